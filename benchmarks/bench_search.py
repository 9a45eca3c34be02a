"""Wall time of `simtrain search` over the course notes' 70B / 64 GPU / 8K / 512-sequence scenario.

Run: python benchmarks/bench_search.py [--jobs 2]
"""

from __future__ import annotations

import argparse
import time

from simtrain.layout_search.simulated import simulated_search


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--top", type=int, default=None)
    args = ap.parse_args()
    base = {"model": "llama3-70b", "topology": "seed-h100", "nodes": 8, "seq": 8192, "gbs": 512}
    t0 = time.perf_counter()
    out = simulated_search(base, gpus=64, gpus_per_node=8, top=args.top, jobs=args.jobs, results=None, resume=False)
    wall = time.perf_counter() - t0
    print(f"layouts enumerated {out['candidates_enumerated']}, fit {out['candidates_fit']}, "
          f"simulated {out['candidates_simulated']}")
    print(f"wall time {wall:.1f} s with {args.jobs} processes; Spearman {out['spearman']:.3f}")
    best = out["ranking"][0]
    print(f"best simulated: {best['label']} MFU {best['simulated_mfu']:.1%} "
          f"(analytic rank {best['analytic_rank']}, MFU {best['analytic_mfu']:.1%})")


if __name__ == "__main__":
    main()
