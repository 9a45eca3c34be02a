"""Estimate: the closed form's step time, memory and breakdown of a scenario (Megatron-LM's
formulas: Narayanan et al. 2021, Korthikanti et al. 2022; :mod:`simtrain.analytic.model`).

The closed form recomputes by its own memory estimate, so a scenario meant for it is resolved
with ``recompute_rule="ledger"`` (:func:`estimate_scenario`); :func:`not_modelled_note` names the
settings it does not model.
"""

from __future__ import annotations

from typing import Any

from simtrain.analytic.ledger import NOT_MODELLED, not_modelled
from simtrain.analytic.model import ANALYTIC_SCHEDULES, analytic_report
from simtrain.api.resolve import resolve
from simtrain.api.checks import check_instance
from simtrain.errors import SimtrainError
from simtrain.results.finite import check_finite
from simtrain.scenario import Scenario, scenario_config
from simtrain.settings import SETTINGS


def estimate_scenario(settings: dict[str, Any]) -> Scenario:
    """:func:`~simtrain.api.resolve.resolve` of ``settings`` as the closed form takes them: the
    recompute the closed form's memory estimate needs (``"auto"``) unless the settings fix one.

    >>> sc = estimate_scenario({"model": "llama3-8b", "topology": "h100-ib", "gpus": 16, "tp": 2, "pp": 2,
    ...                         "seq": 2048, "gbs": 16})
    >>> sc.parallel.recompute
    '0'
    """
    settings = dict(settings)
    settings.setdefault("recompute", "auto")
    return resolve(settings, recompute_rule="ledger")


def estimate(scenario: Scenario) -> dict[str, Any]:
    """The closed form's report of ``scenario`` (keys as the simulated report's where they share
    a meaning: ``step_time_s``, ``mfu``, ``breakdown_s``, ``peak_memory_gib``, ...). A schedule
    without bubble formulas is a one-line :class:`~simtrain.errors.SimtrainError`.

    >>> report = estimate(estimate_scenario({"model": "llama3-8b", "topology": "h100-ib", "gpus": 16,
    ...                                      "tp": 2, "pp": 2, "seq": 2048, "gbs": 16}))
    >>> 0 < report["mfu"] < 1
    True
    """
    check_instance("estimate", "scenario", scenario, Scenario, "make one with simtrain.estimate_scenario({...})")
    par = scenario.parallel
    if par.schedule not in ANALYTIC_SCHEDULES:
        raise SimtrainError(f"--schedule {par.schedule}: the closed-form model has bubble formulas for "
                            f"{', '.join(ANALYTIC_SCHEDULES)} only")
    report = analytic_report(scenario.model, scenario.cluster, par, schedule=par.schedule, gpu=scenario.gpu,
                             routing=scenario.routing)
    check_finite(report, "closed-form estimate")
    return report


def not_modelled_note(scenario: Scenario) -> str:
    """One line naming the scenario's settings the closed form does not model; empty if none."""
    words = []
    config = scenario_config(scenario)
    for name in not_modelled(config, {n: s.default for n, s in SETTINGS.items()}):
        entry, value = SETTINGS[name], config[name]
        flag = (entry.cli_flags[0] if value else entry.off_flag) if entry.kind is bool \
            else f"{entry.cli_flags[0]} {value}"
        words.append(f"{flag} (it assumes {NOT_MODELLED[name]})")
    return f"note: the closed form does not model {'; '.join(words)}" if words else ""
