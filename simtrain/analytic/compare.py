"""Analytic against simulated: the same categories side by side, and why they differ.

Pure functions of two reports' step metrics (:class:`~simtrain.results.metrics.StepMetrics`, which the
simulation's report and the closed form's both hold). The explanations name the modelling
difference behind each category; they are chosen by the sign and size of the difference, not
written per configuration.
"""

from __future__ import annotations

from simtrain.results.metrics import BREAKDOWN, StepMetrics

#: What makes each category differ, by direction (simulated above / below analytic).
CAUSES = {
    "compute": ("the simulation runs each GEMM at its shape's efficiency (whole waves, a short K such as a "
                "weight gradient's tokens loses a tile's fixed time) and adds the memory-bound kernels "
                "(norms, activations, residual adds, loss), the fused attention backward's extra products, "
                "the embedding and the optimizer step",
                "the closed form spreads the LM head over all stages' average; the simulation books "
                "it on the last stage as imbalance"),
    "recompute": ("the simulation recomputes whole layers with their TP collectives",
                  "the simulation recomputes fewer layers or cheaper ones"),
    "imbalance": ("the last stage's LM head and loss, and the first stage's embedding, make stages "
                  "uneven on the simulated timeline",
                  "the closed form charges the whole LM head to every micro-batch of the slowest stage"),
    "tp": ("each simulated TP collective also pays NCCL's latency (a base and one per ring step) and "
           "blocks the next block",
           "the simulation's collectives (NVLink SHARP, channels over every NIC) are faster than the "
           "closed form's ring bandwidth"),
    "cp": ("simulated ring steps are exposed when a chunk's attention is shorter than one K/V "
           "transfer; the closed form hides the ring behind the whole attention time at once",
           "the simulation hides ring transfers behind attention chunk by chunk, and each simulated GPU "
           "passes its 1/TP share of the KV heads where the closed form keeps the course notes' volume, "
           "the micro-batch's whole K and V (not divided by TP)"),
    "ep": ("the simulation's all-to-all waits for the busiest expert rank (routing skew) and pays "
           "NCCL's latency per peer",
           "the simulation sends to the EP peers of the same node over NVLink and overlaps the "
           "all-to-all with the shared experts; the closed form charges the whole volume at the "
           "group's slowest bandwidth"),
    "pp": ("stage-to-stage transfers the receiver waits for are exposed on the simulated timeline",
           "the closed form charges half of every transfer; in the simulation most sends overlap "
           "with compute (only transfers a stage waits for count)"),
    "bubble": ("the schedule's real fill and drain on uneven stages (and p2p time) make the "
               "simulated bubble longer than (p-1) micro-batch times",
               "the simulated fill and drain overlap with the stages' real times better than "
               "(p-1) times the slowest stage's micro-batch"),
    "dp": ("the simulated gradient reduction of the last buckets and the parameter all-gather at "
           "the start of the step are exposed; the closed form assumes 80% hidden",
           "the simulation hides gradient reductions behind the remaining backward better than "
           "the closed form's 80%"),
}


def side_by_side(analytic: StepMetrics, simulated: StepMetrics) -> list[dict]:
    """One row per breakdown category: analytic and simulated seconds and shares, difference.

    >>> a = {"step_time_s": 2.0, "breakdown_s": dict.fromkeys(BREAKDOWN, 0.0) | {"compute": 2.0}}
    >>> s = {"step_time_s": 2.5, "breakdown_s": dict.fromkeys(BREAKDOWN, 0.0) | {"compute": 2.0, "tp": 0.5}}
    >>> [(r["category"], r["difference_s"]) for r in side_by_side(a, s) if r["difference_s"]]
    [('tp', 0.5)]
    """
    rows = []
    ta, ts = analytic["step_time_s"], simulated["step_time_s"]
    for k in BREAKDOWN:
        a, s = analytic["breakdown_s"][k], simulated["breakdown_s"][k]
        rows.append({"category": k, "analytic_s": a, "simulated_s": s, "difference_s": s - a,
                     "analytic_share": a / ta if ta else 0.0, "simulated_share": s / ts if ts else 0.0})
    return rows


def largest_differences(analytic: StepMetrics, simulated: StepMetrics, top: int = 3,
                        min_share: float = 0.005) -> list[dict]:
    """The categories whose difference is largest (at least ``min_share`` of the simulated step),
    each with the modelling difference that explains it."""
    ts = simulated["step_time_s"]
    rows = sorted(side_by_side(analytic, simulated), key=lambda r: -abs(r["difference_s"]))
    out = []
    for r in rows[:top]:
        if ts and abs(r["difference_s"]) / ts < min_share:
            continue
        higher, lower = CAUSES[r["category"]]
        out.append({**r, "cause": higher if r["difference_s"] > 0 else lower})
    return out
