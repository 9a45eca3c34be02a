"""Wall time and peak memory of the edge-of-scale commands: huge inputs that must be refused
cheaply and realistic scales that must answer in seconds.

Run: python benchmarks/bench_edges.py [--quick] [--only E1,E5] [--limit 120]

Each command runs in a fresh wrapper process that starts the CLI as its child and reports the
child's peak RSS (``resource.getrusage(RUSAGE_CHILDREN)``, as ``bench_scale.py`` does) so every row
is its own. Columns: the command, its exit code (``timeout`` past ``--limit`` seconds), wall
seconds, peak RSS in MiB and the first line of its stderr. The target for every row: under 10 s
and 2 GiB, with a result (exit 0) or one line and exit 2. Not a test: machines are noisy.

``--quick`` runs only the cheap rows (the refusals, each well under a second of work); the test
suite runs it.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIG = str(10**18)
L8 = ["--model", "llama3-8b", "--topology", "h100-ib"]
L70 = ["--model", "llama3-70b", "--topology", "h100-ib"]

#: A topology file whose fabric has a billion spines (``{dir}`` is the row's scratch folder).
SPINES_TOML = """name = "many-spines"
gpu = "h100-sxm"
nodes = 2
[node]
gpus = 8
nic_gbps = 400
[fabric]
kind = "fat-tree"
nodes_per_leaf = 1
spines = 1000000000
"""

#: name -> (cheap, simtrain arguments); ``{dir}`` becomes a scratch folder.
COMMANDS: dict[str, tuple[bool, list[str]]] = {
    "E1": (True, ["run", *L8, "--gpus", "8", "--tp", "8", "--pp", "1", "--gbs", "100000", "--max-events", "1000"]),
    "E2": (True, ["run", *L8, "--gpus", "8", "--tp", "8", "--pp", "1", "--gbs", "10000", "--max-events", "1000"]),
    "E3": (True, ["run", "--gpus", BIG]),
    "E4": (True, ["run", "--nodes", BIG]),
    "E5": (True, ["topology", "h100-ib", "--nodes", "1000000"]),
    "E6": (True, ["schedule", "interleaved-1f1b", "--pp", "4", "--microbatches", "8", "--vpp", BIG]),
    "E7": (True, ["schedule", "1f1b", "--pp", BIG, "--microbatches", "8"]),
    "E8": (True, ["schedule", "1f1b", "--pp", "4", "--microbatches", BIG]),
    "E9": (True, ["collective", "all-reduce", "--size", "1G", "--gpus", "8", "--topology", "h100-ib",
                  "--concurrent-groups", BIG]),
    "E10": (True, ["mesh", "--gpus", "100000000", "--tp", "8"]),
    "E11": (True, ["topology", "{dir}/spines.toml"]),
    "E12": (False, ["run", *L8, "--gpus", "65536", "--tp", "1", "--pp", "1", "--gbs", "65536"]),
    "E13": (False, ["run", *L70, "--gpus", "100000", "--tp", "8", "--pp", "5", "--gbs", "20000"]),
    "E14": (False, ["run", *L70, "--gpus", "32768", "--tp", "8", "--pp", "8", "--gbs", "4096"]),
    "E15": (False, ["topology", "h100-ib", "--nodes", "12500"]),
    "E16": (False, ["mesh", "--gpus", "100000", "--tp", "8", "--pp", "5"]),
    "E17": (True, ["schedule", "zb-auto", "--pp", "64", "--microbatches", "4096"]),
    "E18": (True, ["schedule", "zb-h2", "--pp", "64", "--microbatches", "4096"]),
    "E19": (True, ["schedule", "1f1b", "--pp", "64", "--microbatches", "15000"]),
    "E20": (True, ["schedule", "zb-auto", "--pp", "32", "--microbatches", "2048"]),
    "E21": (True, ["run", *L8, "--gpus", "16", "--tp", "2", "--pp", "2", "--seq", "2048", "--gbs", "16",
                   "--steps", "1000"]),
    "E22": (False, ["run", "--model", "{dir}/layers-20000.json", "--topology", "h100-ib", "--gpus", "8", "--tp",
                    "2", "--pp", "4", "--seq", "1024", "--gbs", "8"]),
    "E23": (True, ["run", "--model", "{dir}/layers-40000.json", "--topology", "h100-ib", "--gpus", "8", "--tp",
                   "2", "--pp", "4", "--seq", "1024", "--gbs", "8"]),
    "E24": (True, ["run", "--model", "{dir}/layers-200000.json", "--topology", "h100-ib", "--gpus", "8", "--tp",
                   "2", "--pp", "4", "--seq", "1024", "--gbs", "8"]),
}


def hf_config(layers: int) -> str:
    """A small Llama-shaped Hugging Face config.json with ``layers`` decoder layers."""
    return json.dumps({"model_type": "llama", "hidden_size": 256, "num_hidden_layers": layers,
                       "num_attention_heads": 4, "intermediate_size": 1024, "vocab_size": 32000,
                       "max_position_embeddings": 4096})


def _cap(memory_mib: int):
    """A ``preexec_fn`` capping the child's address space at ``memory_mib`` MiB, so that a runaway
    command fails with MemoryError instead of exhausting a shared machine."""
    def cap() -> None:
        limit = memory_mib * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    return cap


def run_one(name: str, limit_s: float, memory_mib: int = 8192) -> dict:
    """Run row ``name`` as a child of this process; its row (JSON-ready)."""
    _, argv = COMMANDS[name]
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "spines.toml").write_text(SPINES_TOML, encoding="utf-8")
        for layers in (20_000, 40_000, 200_000):
            Path(tmp, f"layers-{layers}.json").write_text(hf_config(layers), encoding="utf-8")
        args = [a.replace("{dir}", tmp) for a in argv]
        cmd = [sys.executable, "-m", "simtrain", *args]
        if args[0] == "run":
            cmd += ["--out", str(Path(tmp, "out")), "--no-plot"]
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=limit_s,
                                  preexec_fn=_cap(memory_mib))
            rc, err = str(proc.returncode), proc.stderr
        except subprocess.TimeoutExpired as exc:
            rc = "timeout"
            err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        wall = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # KiB on Linux
    first = (err.strip().splitlines() or [""])[0]
    return {"name": name, "command": "simtrain " + " ".join(argv), "rc": rc, "wall_s": wall,
            "peak_rss_mib": rss, "stderr": first}


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="only the cheap rows (the refusals)")
    ap.add_argument("--only", help="comma-separated rows (default: all, or the cheap ones with --quick)")
    ap.add_argument("--limit", type=float, default=120.0, help="seconds before a command is stopped")
    ap.add_argument("--memory-mib", type=int, default=8192, help="address-space cap of each command, MiB")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # run one row here, print it as JSON
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(run_one(args.one, args.limit, args.memory_mib)))
        return []
    names = args.only.split(",") if args.only else [n for n, (cheap, _) in COMMANDS.items()
                                                     if cheap or not args.quick]
    unknown = [n for n in names if n not in COMMANDS]
    if unknown:
        ap.error(f"--only {unknown[0]}: unknown row; valid: {', '.join(COMMANDS)}")
    print(f"{'row':<4} {'exit':>7} {'wall s':>7} {'RSS MiB':>8}  command  |  first line of stderr")
    rows = []
    for name in names:
        cmd = [sys.executable, __file__, "--one", name, "--limit", str(args.limit), "--memory-mib",
               str(args.memory_mib)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode:
            print(f"{name:<4} wrapper failed: {(proc.stderr.strip().splitlines() or ['?'])[-1]}", flush=True)
            rows.append({"name": name, "error": proc.stderr})
            continue
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        rows.append(r)
        print(f"{name:<4} {r['rc']:>7} {r['wall_s']:>7.2f} {r['peak_rss_mib']:>8,.0f}  {r['command']}  |  "
              f"{r['stderr'][:160]}", flush=True)
    return rows


if __name__ == "__main__":
    main()
