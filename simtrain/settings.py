"""Run settings: one table from which the command line, the experiment TOML and the docs are made.

Each :class:`Setting` is one key of a scenario: its name (the ``--config`` TOML key, the keyword
of :func:`simtrain.api.resolve` and the key in the report's ``config``), type, default, help text,
valid values and flag spelling. Derived from :data:`SETTINGS`:

* the flags of ``simtrain run``, ``analytic``, ``compare`` and ``search`` (:mod:`simtrain.cli.run`);
* the keys :func:`simtrain.api.load_config` accepts;
* the checks of :func:`simtrain.api.resolve` (:func:`complete`): types, ranges and choices, with
  the same words for a flag, a TOML key and a Python value;
* the README's settings reference (``docs/make_tour.py``).

Adding a setting is one entry here plus the code that uses its value.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from simtrain.engine import DEFAULT_MAX_EVENTS
from simtrain.errors import SpecError
from simtrain.specs.strict import check_value
from simtrain.specs.order import DEFAULT_ORDER


@dataclass(frozen=True)
class Rule:
    """The range a number must lie in: its test and the words that name it in an error."""

    test: Callable[[float], bool]
    phrase: str  # completes "<value> ...", e.g. "must be >= 1"


POSITIVE = Rule(lambda v: v >= 1, "must be >= 1")
NON_NEGATIVE = Rule(lambda v: v >= 0, "must be >= 0")
FRACTION = Rule(lambda v: 0 < v <= 1, "must be in (0, 1]")
NON_NEGATIVE_FINITE = Rule(lambda v: 0 <= v < math.inf, "must be a finite number >= 0")

#: Network models a run can use: alpha-beta per collective, max-min fair flows, free.
NETWORKS = ("analytic", "flow", "none")


@dataclass(frozen=True)
class Setting:
    """One run setting and everything the command line, the TOML reader and the docs need."""

    name: str  # TOML key, keyword of api.resolve, key of the report's config
    kind: type | tuple[type, ...]  # accepted Python type(s); a flag's text is parsed as the first
    default: Any  # None: derived from other settings (default_text says how)
    help: str  # what it sets, for --help and the README
    default_text: str = ""  # the default in words, where the value alone does not say it
    rule: Rule | None = None  # range of a number
    choices: tuple[str, ...] = ()  # the valid values, where there is a closed list
    metavar: str = "VALUE"  # the value's name in --help
    flags: tuple[str, ...] | None = None  # None: --name-with-dashes; () for a bool with only off_flag
    off_flag: str = ""  # a bool's flag that sets it false (--no-sp, --no-fold)
    off_help: str = ""
    scenario: bool = False  # describes the scenario (see SCENARIO_KEYS)

    @property
    def cli_flags(self) -> tuple[str, ...]:
        """The flags that set the value (true, for a bool)."""
        return ("--" + self.name.replace("_", "-"),) if self.flags is None else self.flags

    @property
    def flag_kind(self) -> type:
        """The type a flag's text is parsed as."""
        return self.kind[0] if isinstance(self.kind, tuple) else self.kind

    @property
    def flag_help(self) -> str:
        """The help of the flag(s) that set the value, with the default."""
        value = self.default
        if self.default_text:
            return f"{self.help} (default: {self.default_text})"
        if value is None or value is False:
            return self.help
        if value is True:
            shown = "on"
        elif isinstance(value, int) and value >= 10_000:
            shown = f"{value:,}"
        else:
            shown = f"{value:g}" if isinstance(value, float) else str(value)
        return f"{self.help} (default {shown})"

    def validate(self, value: Any, source: str = "") -> Any:
        """``value`` checked for type, range and choices (an int given for a float becomes a
        float); a :class:`SpecError` names ``source`` (a file), the setting and the value."""
        label = f"{source}: {self.name}" if source else self.name
        value = check_value(label, value, self.kind, choices=self.choices or None)
        if self.rule is not None and isinstance(value, (int, float)) and not self.rule.test(value):
            raise SpecError(f"{label} = {value!r}: {self.rule.phrase}")
        return value


#: The scenario ``simtrain run`` simulates with no arguments: the course notes' Llama-3-70B on 64
#: H100s (their ``parallel_plan.py`` constants) with the textbook TP=8 x PP=4 x DP=2 layout and a
#: small global batch, so the step shows pipeline bubbles, gradient reductions overlapped with
#: the backward, and the last stage's LM head as stage imbalance.
DEFAULT_SCENARIO: Mapping[str, Any] = MappingProxyType({
    "model": "llama3-70b", "topology": "seed-h100", "gpus": 64, "tp": 8, "pp": 4, "cp": 1,
    "seq": 8192, "mbs": 1, "gbs": 32, "schedule": "1f1b",
})


def _degree(name: str, what: str, default: int | None = 1, default_text: str = "") -> Setting:
    return Setting(name, int, default, f"{what} parallel degree", default_text=default_text, rule=POSITIVE,
                   metavar="N", scenario=True)


_TABLE = (
    Setting("model", str, DEFAULT_SCENARIO["model"], "model preset or file (.toml, or a Hugging Face "
            "config.json)", metavar="NAME|FILE", scenario=True),
    Setting("topology", str, DEFAULT_SCENARIO["topology"], "topology preset or .toml file", metavar="NAME|FILE",
            scenario=True),
    Setting("nodes", int, None, "nodes in the cluster", default_text="enough for --gpus", rule=POSITIVE,
            metavar="N", scenario=True),
    Setting("gpus", int, None, "GPUs used", default_text="all of the topology", rule=POSITIVE, metavar="N",
            scenario=True),
    _degree("tp", "tensor"),
    _degree("cp", "context"),
    _degree("pp", "pipeline"),
    _degree("dp", "data", None, "gpus / (tp*cp*pp)"),
    _degree("ep", "expert"),
    _degree("etp", "expert tensor", None, "tp"),
    Setting("vpp", int, 1, "virtual pipeline chunks per rank (interleaved)", rule=POSITIVE, metavar="N",
            scenario=True),
    Setting("schedule", str, "1f1b", "pipeline schedule (see simtrain list schedules)", metavar="NAME|FILE.csv"),
    Setting("seq", int, 4096, "sequence length, tokens", rule=POSITIVE, metavar="N", scenario=True),
    Setting("mbs", int, 1, "micro-batch size, sequences", rule=POSITIVE, metavar="N", scenario=True),
    Setting("gbs", int, None, "global batch size, sequences", default_text="2 pp micro-batches per pipeline",
            rule=POSITIVE, metavar="N", scenario=True),
    Setting("zero", int, 1, "ZeRO stage 0-3", rule=NON_NEGATIVE, metavar="0-3"),
    Setting("sp", bool, True, "sequence parallelism", off_flag="--no-sp", off_help="no sequence parallelism"),
    Setting("recompute", (str, int), "none", "activation recompute: none, selective, full, auto (the fewest "
            "whole layers per chunk that fit in memory) or a number of layers per chunk",
            metavar="none|selective|full|auto|N"),
    Setting("order", str, DEFAULT_ORDER, "rank order, innermost first", metavar="ORDER"),
    Setting("first_stage_layers", int, None, "layers on the first pipeline chunk", default_text="an even split",
            rule=POSITIVE, metavar="N"),
    Setting("last_stage_layers", int, None, "layers on the last pipeline chunk", default_text="an even split",
            rule=POSITIVE, metavar="N"),
    Setting("balance_stages", bool, False, "move layers off the first and last stages to equalise stage times"),
    Setting("network", str, "analytic", "network model: analytic (alpha-beta time per collective), flow "
            "(max-min fair flows on the topology graph) or none (free communication)", choices=NETWORKS,
            metavar="|".join(NETWORKS)),
    Setting("collective_algo", str, None, "force a collective algorithm in flow mode: ring, tree, hierarchical, "
            "nvls, direct", default_text="chosen per message like NCCL's tuner", metavar="ALGO"),
    Setting("routing_skew", float, 0.0, "MoE expert popularity skew (Zipf exponent; 0 = uniform routing)",
            rule=NON_NEGATIVE_FINITE, metavar="X"),
    Setting("routing_seed", int, 0, "seed of the skewed expert popularity", rule=NON_NEGATIVE, metavar="N"),
    Setting("efficiency", float, None, "fraction of peak FLOP/s a GEMM reaches", default_text="the GPU's",
            rule=FRACTION, metavar="X"),
    Setting("fold", bool, True, "simulate one representative per group of ranks with identical programs",
            flags=(), off_flag="--no-fold",
            off_help="simulate every rank instead of one representative per pipeline rank"),
    Setting("max_events", int, DEFAULT_MAX_EVENTS, "stop after this many operations (a normal run stays far "
            "below)", rule=POSITIVE, metavar="N"),
)

#: Every run setting by name, in the order of ``--help``.
SETTINGS: Mapping[str, Setting] = MappingProxyType({s.name: s for s in _TABLE})

#: Settings that describe a scenario (model, cluster, layout, batch); when none is given, the other
#: settings (network, schedule, recompute, ...) apply to :data:`DEFAULT_SCENARIO`.
SCENARIO_KEYS: tuple[str, ...] = tuple(s.name for s in _TABLE if s.scenario)


def complete(given: Mapping[str, Any] | None) -> dict[str, Any]:
    """Every setting's value: the given ones checked (:meth:`Setting.validate`), the others their
    defaults. With no scenario key given, :data:`DEFAULT_SCENARIO` lies underneath.

    >>> s = complete({"network": "flow"})
    >>> s["model"], s["tp"], s["network"], s["fold"]
    ('llama3-70b', 8, 'flow', True)
    """
    given = dict(given or {})
    if not set(given) & set(SCENARIO_KEYS):
        given = {**DEFAULT_SCENARIO, **given}
    unknown = sorted(set(given) - set(SETTINGS))
    if unknown:
        raise SpecError(f"unknown setting {unknown[0]!r} (valid: {', '.join(SETTINGS)})")
    return {name: s.default if given.get(name) is None else s.validate(given[name])
            for name, s in SETTINGS.items()}
