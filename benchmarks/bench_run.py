"""Wall time, operations per second and peak memory of `simtrain run` on standard scenarios.

Run: python benchmarks/bench_run.py [--quick]
Not a test: machines are noisy; compare rows of one machine, as ratios.
"""

from __future__ import annotations

import argparse
import resource
import time

from simtrain import api

SCENARIOS = {
    "default (70B, 64 GPUs, 16 mb)": {},
    "70B 64 GPUs TP8 PP4 DP2, gbs 512": dict(model="llama3-70b", topology="seed-h100", gpus=64, tp=8, pp=4,
                                              seq=8192, gbs=512),
    "70B 64 GPUs TP4 CP2 PP8, gbs 512": dict(model="llama3-70b", topology="seed-h100", gpus=64, tp=4, cp=2,
                                              pp=8, seq=8192, gbs=512, recompute="auto"),
    "405B 1024 GPUs TP8 PP16 DP8, gbs 128": dict(model="llama3-405b", topology="h100-ib", gpus=1024, tp=8,
                                                  pp=16, seq=8192, gbs=128, first_stage_layers=7,
                                                  last_stage_layers=7),
    "Mixtral 8x7B 64 GPUs EP8 PP4, gbs 64": dict(model="mixtral-8x7b", topology="h100-ib", gpus=64, tp=1,
                                                  pp=4, ep=8, seq=4096, gbs=64),
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="only the first two scenarios")
    ap.add_argument("--networks", default="analytic,flow")
    args = ap.parse_args()
    names = list(SCENARIOS)[:2] if args.quick else list(SCENARIOS)
    print(f"{'scenario':<40} {'network':<9} {'step s':>9} {'MFU':>6} {'ops':>9} {'wall s':>7} "
          f"{'ops/s':>9} {'peak RSS MiB':>12}")
    for name in names:
        for network in args.networks.split(","):
            settings = {**SCENARIOS[name], "network": network}
            t0 = time.perf_counter()
            result = api.simulate(api.resolve(settings))
            wall = time.perf_counter() - t0
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            r = result.report
            print(f"{name:<40} {network:<9} {r['step_time_s']:>9.3f} {r['mfu']:>6.1%} {r['num_events']:>9,} "
                  f"{wall:>7.2f} {r['num_events'] / wall:>9,.0f} {rss:>12,.0f}", flush=True)


if __name__ == "__main__":
    main()
