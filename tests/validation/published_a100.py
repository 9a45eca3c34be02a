"""Published Megatron-LM runs on A100 clusters against the simulator: the per-row table.

``python tests/validation/published_a100.py`` prints it (the table of docs/validation.md comes from here);
``tests/validation/test_published_a100.py`` fails when a paper's mean error rises above
:data:`MEAN_LIMIT_PCT` or a row's above :data:`ROW_LIMIT_PCT`.

The cases (``published_a100.json``, its ``about`` cites them): Korthikanti et al. 2022, table 3
configurations with table 5 iteration times, and Narayanan et al. 2021 (SC21), table 1, with the
step time derived from the paper's equation 3 and its achieved TFLOP/s per GPU. Every row runs with
the stock ``a100-hdr`` topology and :data:`ASSUMPTIONS`, one set for all rows: the 2021-22
Megatron-LM these runs used had the unfused attention core, no distributed optimizer, gradients
reduced in fp32 after the backward (``--overlap-grad-reduce`` came later) and pipeline sends that
block until done (``batch_isend_irecv`` and a wait), and ran the backward's tensor-parallel
collectives synchronously, each after the GEMM producing its input (``tp_backward_overlap`` off:
the asynchronous TP communication of ``LinearWithGradAccumulationAndAsyncCommunication`` is a later
addition). TFLOP/s per GPU counts each paper's FLOPs:
Korthikanti's model FLOPs ``72 B s l h^2 (1 + s/6h + V/12lh)``, SC21's equation 3
``96 B s l h^2 (1 + s/6h + V/16lh)`` (full recompute included).
"""

from __future__ import annotations

import json
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if str(Path(__file__).parent.parent) not in sys.path:  # pragma: no cover - run as a script
    sys.path.insert(0, str(Path(__file__).parent.parent))

from simtrain import api  # noqa: E402
from simtrain.errors import SpecError  # noqa: E402
from validation.shared_rows import group_errors  # noqa: E402

HERE = Path(__file__).parent
CASES = HERE / "published_a100.json"
TOPOLOGY = "a100-hdr"
ASSUMPTIONS: dict[str, Any] = {"attention": "eager", "zero": 0, "grad_dtype": "fp32",
                               "overlap_grad_reduce": False, "overlap_p2p_comm": False,
                               "tp_backward_overlap": False}
MEAN_LIMIT_PCT = 5.0  # mean |error| of each paper's rows
ROW_LIMIT_PCT = 10.0  # |error| of any row
PAPERS = {"A100-korthikanti": "Korthikanti et al. 2022", "A100-megatron-sc21": "Narayanan et al. 2021 (SC21)"}


@dataclass(frozen=True)
class Row:
    """One published run and what the simulator predicts for it."""

    paper: str  # the case's set
    name: str
    gpus: int
    layout: str
    measured_s: float
    predicted_s: float | None  # None: pending (the cluster cannot be built yet)
    flops: float  # the paper's FLOPs per step
    pending: str = ""

    @property
    def error_pct(self) -> float:
        assert self.predicted_s is not None
        return 100.0 * (self.predicted_s / self.measured_s - 1.0)

    def tflops(self, seconds: float) -> float:
        return self.flops / (seconds * self.gpus) / 1e12


def paper_flops(case: dict[str, Any]) -> float:
    """FLOPs per step as the case's paper counts them (see the module docstring)."""
    m = case["model"]
    b, s, l, h, v = case["gbs"], case["seq"], m["n_layer"], m["n_embd"], m["vocab_size"]
    if case["set"] == "A100-megatron-sc21":
        return 96 * b * s * l * h * h * (1 + s / (6 * h) + v / (16 * l * h))
    return 72 * b * s * l * h * h * (1 + s / (6 * h) + v / (12 * l * h))


def settings_of(case: dict[str, Any], model_path: str) -> dict[str, Any]:
    """The simulator settings of one case: its layout and batch, the stock topology and
    :data:`ASSUMPTIONS` (the pipeline-send and TP-order ones where the layout has sends or TP)."""
    keys = ("gpus", "tp", "pp", "dp", "cp", "mbs", "gbs", "seq", "schedule", "recompute", "sp")
    acts = {"overlap_p2p_comm": case["pp"] > 1, "tp_backward_overlap": case["tp"] > 1}  # else nothing to order
    return {"model": model_path, "topology": TOPOLOGY, "vpp": case["vpp"] or 1,
            **{k: case[k] for k in keys}, **{k: v for k, v in ASSUMPTIONS.items() if acts.get(k, True)}}


def load_cases(cases_path: Path = CASES) -> list[dict[str, Any]]:
    """The published cases, in the file's order."""
    return json.loads(cases_path.read_text(encoding="utf-8"))["cases"]


def run_case(case: dict[str, Any]) -> Row:
    """Simulate one case; a cluster the topology cannot build yet gives a pending row."""
    layout = (f"TP{case['tp']} PP{case['pp']}" + (f"x{case['vpp']}" if (case["vpp"] or 1) > 1 else "")
              + f" DP{case['dp']} mbs {case['mbs']} gbs {case['gbs']}, {case['recompute']}"
              + (" +SP" if case["sp"] else ""))
    common = dict(paper=case["set"], name=case["name"], gpus=case["gpus"], layout=layout,
                  measured_s=case["measured_step_s"], flops=paper_flops(case))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.json"
        path.write_text(json.dumps(case["model"]), encoding="utf-8")
        try:
            report = api.simulate(api.resolve(settings_of(case, str(path)))).report
        except SpecError as exc:
            return Row(**common, predicted_s=None, pending=str(exc))
    return Row(**common, predicted_s=report["step_time_s"])


def run_all(cases_path: Path = CASES) -> list[Row]:
    """Simulate every case (:func:`run_case`)."""
    return [run_case(case) for case in load_cases(cases_path)]


def paper_errors(rows: list[Row]) -> dict[str, tuple[float, float, int]]:
    """Per paper: (mean |error| %, largest |error| %, rows that do not run)."""
    return group_errors(rows, PAPERS, lambda r: r.paper)


def table(rows: list[Row]) -> str:
    """The per-row table and each paper's mean and largest error, as Markdown."""
    lines = ["| paper | case | GPUs | layout | measured | simulated | error | TFLOP/s per GPU (measured / simulated) |",
             "| --- | --- | ---: | --- | ---: | ---: | ---: | ---: |"]
    for r in rows:
        paper = PAPERS[r.paper].split(" (")[0]
        if r.predicted_s is None:
            lines.append(f"| {paper} | {r.name} | {r.gpus} | {r.layout} | {r.measured_s:.2f} s | pending | | "
                         f"{r.tflops(r.measured_s):.0f} / - |")
            continue
        lines.append(f"| {paper} | {r.name} | {r.gpus} | {r.layout} | {r.measured_s:.2f} s | "
                     f"{r.predicted_s:.2f} s | {r.error_pct:+.1f}% | "
                     f"{r.tflops(r.measured_s):.0f} / {r.tflops(r.predicted_s):.0f} |")
    lines.append("")
    for paper, (mean, worst, pending) in paper_errors(rows).items():
        note = f", {pending} pending" if pending else ""
        lines.append(f"{PAPERS[paper]}: mean |error| {mean:.1f}%, largest {worst:.1f}%{note} "
                     f"(limits {MEAN_LIMIT_PCT:g}% and {ROW_LIMIT_PCT:g}%)")
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover
    print(table(run_all()))
