"""Settings that act on some runs only: one that is set away from its default on a run it has no
effect on is refused, naming the setting, its value, why it does nothing there and which runs it
applies to (rather than silently ignored).

Each rule is a (setting, test) pair on the resolved model, layout and settings; the default of
every setting passes every rule, so a run that leaves them alone is never refused. A layout search
resolves its candidates without these rules (:func:`simtrain.api.resolve` with ``strict=False``): a
flag given for the search may apply to some candidates and not to others.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from simtrain.errors import SpecError
from simtrain.specs.model import ModelSpec
from simtrain.specs.parallel import ParallelSpec

_MOE = "it applies to MoE models (num_experts > 0)"
_EP = "it applies to MoE models with ep > 1"


def check_applies(model: ModelSpec, par: ParallelSpec, settings: Mapping[str, Any]) -> None:
    """A one-line :class:`SpecError` for the first setting of ``settings`` (resolved, defaults
    filled in) that is away from its default on a run it cannot change."""
    first = next(_inapplicable(model, par, settings), None)
    if first is not None:
        name, value, reason = first
        raise SpecError(f"{name}={value!r}: {reason}")


def _inapplicable(model: ModelSpec, par: ParallelSpec, s: Mapping[str, Any]) -> Iterator[tuple[str, Any, str]]:
    """(setting, value, why and where it applies) of each setting that does nothing here."""
    dense = f"{model.name} is dense (no experts); "
    if not model.is_moe:
        if s.get("moe_dispatcher", "alltoall") != "alltoall":
            yield "moe_dispatcher", s["moe_dispatcher"], dense + _EP
        if s.get("routing_skew", 0.0):
            yield "routing_skew", s["routing_skew"], dense + _MOE
    elif par.ep < 2 and s.get("moe_dispatcher", "alltoall") != "alltoall":
        yield "moe_dispatcher", s["moe_dispatcher"], f"ep={par.ep} sends no tokens between GPUs; " + _EP
    if not s.get("overlap_param_gather", True) and par.zero not in (1, 2):
        yield ("overlap_param_gather", False, f"zero={par.zero} gathers no parameters once per step; it applies with "
               "zero 1 or 2 (the distributed optimizer)")
    if not s.get("moe_shared_expert_overlap", True) and not model.shared_experts:
        yield ("moe_shared_expert_overlap", False, f"{model.name} has no shared experts; it applies to MoE models "
               "with shared experts (DeepSeek)")
    if s.get("routing_seed", 0) and not (model.is_moe and s.get("routing_skew", 0.0)):
        why = dense if not model.is_moe else "routing_skew=0 routes uniformly, with nothing to draw; "
        yield "routing_seed", s["routing_seed"], why + "it seeds the skewed expert popularity of --routing-skew"
    if par.tp < 2:
        if s.get("tp_comm_overlap", False):
            yield "tp_comm_overlap", True, "tp=1 has no TP collectives to overlap; it applies with tp > 1"
        if not s.get("tp_backward_overlap", True):
            yield "tp_backward_overlap", False, "tp=1 has no TP collectives to order; it applies with tp > 1"
    if par.pp < 2 and not s.get("overlap_p2p_comm", True):
        yield "overlap_p2p_comm", False, "pp=1 has no pipeline sends to wait for; it applies with pp > 1"
    if s.get("network") == "none" and s.get("comm_interference") is not None:
        yield ("comm_interference", s["comm_interference"],
               "network=none makes communication take no time, so it runs beside no compute; "
               "it applies with network analytic or flow")
