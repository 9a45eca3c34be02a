"""Analytic against simulated: the same categories side by side, and why they differ.

Pure functions of two reports' step metrics (:class:`~simtrain.results.metrics.StepMetrics`, which the
simulation's report and the closed form's both hold). The explanations name the modelling
difference behind each category; they are chosen by the sign and size of the difference, not
written per configuration. Where the closed form keeps a formula of its source on purpose although
the simulation models the same quantity otherwise, a :class:`DeliberateDifference` says so, and
every explanation of its category names it (:data:`DELIBERATE_DIFFERENCES`).
"""

from __future__ import annotations

from dataclasses import dataclass

from simtrain.results.metrics import BREAKDOWN, StepMetrics


@dataclass(frozen=True)
class DeliberateDifference:
    """A formula the closed form keeps from its source on purpose, unlike the simulation's."""

    category: str  # the breakdown category it shows in
    name: str
    closed_form: str  # what the closed form counts
    simulation: str  # what the simulation counts
    source: str  # where the closed form's formula comes from

    def sentence(self) -> str:
        """The words ``compare`` adds to its category's explanation."""
        return (f"deliberate difference ({self.name}): the closed form {self.closed_form}, as {self.source}; "
                f"the simulation {self.simulation}")


#: The closed form's deliberate differences from the simulation, each named wherever ``compare``
#: explains its category.
DELIBERATE_DIFFERENCES: tuple[DeliberateDifference, ...] = (
    DeliberateDifference(
        "cp", "CP ring volume",
        closed_form="passes the micro-batch's whole K and V per ring step (not divided by TP)",
        simulation="passes each GPU's 1/TP share of the KV heads (simtrain.costs.attention.cp_kv_bytes), "
                   "a factor TP less",
        source="the course notes' parallel_plan.py does (ring = layers x 3 (cp-1) x 2 s mbs KV x 2 / "
               "bandwidth(tp, cp))"),
)


def deliberate(category: str) -> tuple[DeliberateDifference, ...]:
    """The deliberate differences that show in ``category``."""
    return tuple(d for d in DELIBERATE_DIFFERENCES if d.category == category)

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
           "the simulation hides ring transfers behind attention chunk by chunk"),
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
    each with the modelling difference that explains it; after them, any other category of at
    least ``min_share`` with a deliberate difference. A category's explanation ends with its
    deliberate differences (:data:`DELIBERATE_DIFFERENCES`), listed by name under ``deliberate``."""
    ts = simulated["step_time_s"]
    rows = sorted(side_by_side(analytic, simulated), key=lambda r: -abs(r["difference_s"]))
    out = []
    for i, r in enumerate(rows):
        known = deliberate(r["category"])
        if (i >= top and not known) or (ts and abs(r["difference_s"]) / ts < min_share):
            continue
        higher, lower = CAUSES[r["category"]]
        cause = "; ".join([higher if r["difference_s"] > 0 else lower, *(d.sentence() for d in known)])
        out.append({**r, "cause": cause, "deliberate": [d.name for d in known]})
    return out
