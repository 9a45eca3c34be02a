"""Golden scenarios: ``simtrain run`` settings whose report.json is kept byte for byte.

Each entry is a name and the flags of one run. Together they cover every built-in schedule and a
CSV schedule, both network fidelities and the free network, CP, EP/MoE with routing skew, ZeRO 0-3,
recompute (selective, full, a layer count), uneven and balanced stages, and an unfolded run.
``python tests/golden/scenarios.py`` rewrites the files (only when a change is meant to alter
numbers; the commit then says which numbers changed and why).
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).parent

_SMALL = ["--model", "llama3-8b", "--topology", "h100-ib", "--seq", "2048"]

SCENARIOS: dict[str, list[str]] = {
    "default": [],
    "gpipe-zero0": [*_SMALL, "--gpus", "16", "--tp", "2", "--pp", "2", "--gbs", "16", "--schedule", "gpipe",
                    "--zero", "0"],
    "1f1b-zero2-flow": [*_SMALL, "--gpus", "16", "--tp", "2", "--pp", "2", "--gbs", "16", "--zero", "2",
                        "--network", "flow"],
    "interleaved-zero3": [*_SMALL, "--gpus", "16", "--tp", "2", "--pp", "2", "--gbs", "16",
                          "--schedule", "interleaved-1f1b", "--vpp", "2", "--zero", "3"],
    "zb-h1-recompute-full": [*_SMALL, "--gpus", "16", "--tp", "4", "--pp", "4", "--gbs", "16",
                             "--schedule", "zb-h1", "--recompute", "full"],
    "zb-h2-selective": [*_SMALL, "--gpus", "8", "--tp", "2", "--pp", "4", "--gbs", "14",
                        "--schedule", "zb-h2", "--recompute", "selective"],
    "zb-v-uneven": [*_SMALL, "--gpus", "8", "--tp", "2", "--pp", "4", "--gbs", "8", "--schedule", "zb-v",
                    "--first-stage-layers", "3", "--last-stage-layers", "5"],
    "dualpipe-moe": ["--model", "mixtral-8x7b", "--topology", "h100-ib", "--gpus", "16", "--tp", "2",
                     "--pp", "2", "--ep", "4", "--seq", "2048", "--gbs", "16", "--schedule", "dualpipe"],
    "dualpipev-moe-skew-flow": ["--model", "mixtral-8x7b", "--topology", "h100-ib", "--gpus", "16",
                                "--tp", "2", "--pp", "2", "--ep", "4", "--seq", "2048", "--gbs", "16",
                                "--schedule", "dualpipev", "--routing-skew", "0.8", "--routing-seed", "3",
                                "--network", "flow"],
    "zb-auto-balanced": [*_SMALL, "--gpus", "8", "--tp", "2", "--pp", "4", "--gbs", "8", "--schedule", "zb-auto",
                         "--balance-stages"],
    "csv-schedule": [*_SMALL, "--gpus", "8", "--tp", "2", "--pp", "4", "--gbs", "8",
                     "--schedule", "zb-h1-4x8"],
    "cp-flow-recompute-n": [*_SMALL, "--seq", "16384", "--gpus", "16", "--tp", "2", "--cp", "2", "--pp", "2",
                            "--gbs", "8", "--recompute", "2", "--network", "flow"],
    "cp-no-fold-oversub": ["--model", "llama3-8b", "--topology", "h100-ib-2to1", "--seq", "8192", "--gpus", "32",
                           "--tp", "2", "--cp", "2", "--pp", "2", "--gbs", "8", "--no-fold", "--zero", "1"],
    "free-network-no-sp": [*_SMALL, "--gpus", "16", "--tp", "4", "--pp", "2", "--gbs", "8", "--network", "none",
                           "--no-sp"],
    "moe-etp-rail-flow": ["--model", "mixtral-8x7b", "--topology", "h100-rail", "--gpus", "32", "--tp", "4",
                          "--etp", "1", "--ep", "8", "--pp", "2", "--seq", "2048", "--gbs", "8",
                          "--network", "flow"],
}


def run_report(name: str, out_dir: Path) -> bytes:
    """Run one scenario through the CLI and return its report.json bytes."""
    from simtrain.cli.main import main

    code = main(["run", *SCENARIOS[name], "--out", str(out_dir), "--no-plot", "--json"])
    if code != 0:
        raise RuntimeError(f"golden scenario {name} exited {code}")
    return (out_dir / "report.json").read_bytes()


if __name__ == "__main__":  # pragma: no cover
    import contextlib
    import io
    import tempfile

    names = sys.argv[1:] or list(SCENARIOS)
    for name in names:
        with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(io.StringIO()):
            data = run_report(name, Path(tmp))
        (HERE / f"{name}.json").write_bytes(data)
        print(f"wrote tests/golden/{name}.json ({len(data):,} bytes)")
