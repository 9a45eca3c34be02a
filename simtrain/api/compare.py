"""Compare: the closed form and the simulation of one scenario, category by category.

:func:`compare` runs both and returns a :class:`Comparison`: the two reports, the simulated run
(for its outputs) and the table ``simtrain compare`` prints and the HTML report shows, with
sentences on the largest differences and their causes (:mod:`simtrain.analytic.compare`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from simtrain.analytic.compare import largest_differences, side_by_side
from simtrain.api.estimate import estimate, not_modelled_note
from simtrain.api.simulate import SimResult, simulate
from simtrain.api.checks import check_instance
from simtrain.outputs.text_tables import fmt_seconds
from simtrain.scenario import Scenario, scenario_config

#: The header of the comparison table.
COMPARE_HEADER = ["", "analytic", "simulated", "difference"]


@dataclass(frozen=True)
class Comparison:
    """What :func:`compare` returns: both reports (the closed form's with the scenario's
    ``config`` and its ``not_modelled`` note; the simulation's with its ``wall_s``), the
    simulated run, the table's rows under :data:`COMPARE_HEADER` and the notes on the largest
    differences."""

    analytic: dict[str, Any]
    simulated: dict[str, Any]
    result: SimResult
    rows: list[list[str]]
    notes: list[str]


def compare(scenario: Scenario, *, phase: Callable[[str], None] | None = None) -> Comparison:
    """The closed form's estimate and the simulation of ``scenario`` side by side (resolve it with
    :func:`~simtrain.api.estimate.estimate_scenario` so both recompute the same layers); ``phase``
    hears ``"simulate"`` before the simulation starts.

    >>> from simtrain import estimate_scenario
    >>> c = compare(estimate_scenario({"model": "llama3-8b", "topology": "h100-ib", "gpus": 16, "tp": 2,
    ...                                "pp": 2, "seq": 2048, "gbs": 16}))
    >>> [row[0] for row in c.rows[:3]]
    ['step time', 'MFU', 'peak memory (GiB, stage 0)']
    """
    check_instance("compare", "scenario", scenario, Scenario, "make one with simtrain.estimate_scenario({...})")
    analytic = {**estimate(scenario), "config": scenario_config(scenario), "not_modelled": not_modelled_note(scenario)}
    if phase is not None:
        phase("simulate")
    result = simulate(scenario)
    simulated = {**result.report, "wall_s": result.wall_s}
    rows, notes = comparison_table(analytic, simulated)
    return Comparison(analytic, simulated, result, rows, notes)


def comparison_table(analytic: dict[str, Any], simulated: dict[str, Any]) -> tuple[list[list[str]], list[str]]:
    """The rows of the comparison table (:data:`COMPARE_HEADER`) and the sentences on its largest
    differences."""
    rows = [["step time", fmt_seconds(analytic["step_time_s"]), fmt_seconds(simulated["step_time_s"]),
             f"{(simulated['step_time_s'] / analytic['step_time_s'] - 1):+.1%}"],
            ["MFU", f"{analytic['mfu']:.1%}", f"{simulated['mfu']:.1%}",
             f"{(simulated['mfu'] - analytic['mfu']) * 100:+.1f} pt"],
            ["peak memory (GiB, stage 0)", f"{analytic['peak_memory_gib'][0]:.1f}",
             f"{simulated['peak_memory_gib'][0]:.1f}",
             f"{simulated['peak_memory_gib'][0] - analytic['peak_memory_gib'][0]:+.1f}"]]
    for r in side_by_side(analytic, simulated):
        rows.append([r["category"], f"{fmt_seconds(r['analytic_s'])} ({r['analytic_share']:.0%})",
                     f"{fmt_seconds(r['simulated_s'])} ({r['simulated_share']:.0%})",
                     f"{r['difference_s']:+.4g} s"])
    notes = [f"{d['category']}: simulated {fmt_seconds(abs(d['difference_s']))} "
             f"{'higher' if d['difference_s'] > 0 else 'lower'}: {d['cause']}"
             for d in largest_differences(analytic, simulated)]
    return rows, notes
