"""Run settings: one table from which the command line, the experiment TOML and the docs are made.

Each :class:`Setting` is one key of a scenario: its name (the ``--config`` TOML key, the keyword of
:func:`simtrain.api.resolve` and the key in the report's ``config``), type, default, help text, valid values and
flag spelling. Derived from :data:`SETTINGS`:

* the flags of ``simtrain run``, ``analytic``, ``compare`` and ``search`` (:mod:`simtrain.cli.run`);
* the keys :func:`simtrain.api.load_config` accepts;
* the checks of :func:`simtrain.api.resolve` (:func:`complete`): types, ranges and choices, with
  the same words for a flag, a TOML key and a Python value;
* the settings reference of docs/cli.md (``docs/make_tour.py``).

The defaults are the default scenario's values (:data:`DEFAULT_SCENARIO`): every setting given replaces one value
of the default scenario and leaves the others as they are. Three settings are derived from others when not given:
``nodes`` (enough for ``gpus``), ``dp`` (``gpus / (tp*cp*pp)``) and ``etp`` (``tp``). :func:`defaults_note`
names, in an error about an impossible combination, the default values the user did not set.

:data:`OUTPUTS` are the settings of the command's output rather than of the scenario (``out``, ``plot``, ``json``,
``require_fit``, ``html``, the Gantt chart's ``window``, ``xlim``, ``ranks``, ``streams`` and ``progress``): a flag
and a ``--config`` key each, like the others, but not part of the scenario or its report. Adding a setting is
one entry here plus the code that uses its value.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from simtrain.specs.budget import DEFAULT_MAX_EVENTS
from simtrain.errors import SpecError, unknown_name
from simtrain.network.algorithms import ALGORITHMS
from simtrain.network.models import MODELS, described
from simtrain.specs.strict import check_value
from simtrain.specs.order import DEFAULT_ORDER
from simtrain.specs.parallel import (ATTENTION_KERNELS, GRAD_DTYPES, MOE_DISPATCHERS, RECOMPUTE_MODULES,
                                    parse_recompute, parse_recompute_modules)


@dataclass(frozen=True)
class Rule:
    """The range a number must lie in: its test and the words that name it in an error."""

    test: Callable[[float], bool]
    phrase: str  # completes "<value> ...", e.g. "must be >= 1"


POSITIVE = Rule(lambda v: v >= 1, "must be >= 1")
NON_NEGATIVE = Rule(lambda v: v >= 0, "must be >= 0")
FRACTION = Rule(lambda v: 0 < v <= 1, "must be in (0, 1]")
NON_NEGATIVE_FINITE = Rule(lambda v: 0 <= v < math.inf, "must be a finite number >= 0")
POSITIVE_FINITE = Rule(lambda v: 0 < v < math.inf, "must be a finite number > 0")
#: A coefficient of variation of kernel times: lognormal with sigma = sqrt(ln(1 + cv^2)) (the
#: moments of the lognormal distribution), finite for any cv a float holds only up to ~1e154; at
#: 100 (sigma 3.03) one kernel in a thousand already takes over 10,000 times its median.
CV = Rule(lambda v: 0 <= v <= 100, "must be from 0 to 100")
#: ZeRO's stages (Rajbhandari et al. 2020, section 5: P_os, P_os+g, P_os+g+p, and none).
ZERO_STAGE = Rule(lambda v: v in (0, 1, 2, 3), "must be a ZeRO stage: 0, 1, 2 or 3")


def _phrase(parse: Callable[[Any], object], words: str) -> Callable[[Any], str]:
    """A check: empty where ``parse`` takes the value, else ``words`` (what would be valid)."""
    def check(value: Any) -> str:
        try:
            parse(value)
        except SpecError:
            return words
        return ""
    return check


_recompute_phrase = _phrase(parse_recompute, "must be none, selective, full, auto or a layer count N >= 0")
_modules_phrase = _phrase(parse_recompute_modules, f"must be a comma-separated list of {', '.join(RECOMPUTE_MODULES)}")

#: How a step ends (see the ``optimizer_sync`` setting).
OPTIMIZER_SYNCS = ("grad-norm", "post-validation")
#: ``--progress`` values (:mod:`simtrain.outputs.progress`).
PROGRESS_MODES = ("auto", "on", "off")
#: ``simtrain search --executor`` values (:mod:`simtrain.layout_search.executors`).
EXECUTORS = ("local", "dask")
#: Network models a run can use (:data:`simtrain.network.models.MODELS`).
NETWORKS = tuple(MODELS)


@dataclass(frozen=True)
class Setting:
    """One run setting and everything the command line, the TOML reader and the docs need."""

    name: str  # TOML key, keyword of api.resolve, key of the report's config
    kind: type | tuple[type, ...]  # accepted Python type(s); a flag's text is parsed as the first
    default: Any  # None: derived from other settings (default_text says how)
    help: str  # what it sets, for --help and docs/cli.md
    default_text: str = ""  # the default in words, where the value alone does not say it
    rule: Rule | None = None  # range of a number
    choices: tuple[str, ...] = ()  # the valid values, where there is a closed list
    metavar: str = "VALUE"  # the value's name in --help
    flags: tuple[str, ...] | None = None  # None: --name-with-dashes; () for a bool with only off_flag
    off_flag: str = ""  # a bool's flag that sets it false (--no-sp, --no-fold)
    off_help: str = ""
    scenario: bool = False  # describes the scenario (model, cluster, layout, batch): see defaults_note
    derived_from: tuple[str, ...] = ()  # the settings a default of None is derived from
    check: Callable[[Any], str] | None = None  # beyond type, range and choices: "" or what is valid
    count: bool = False  # a count of tokens: its flag takes 300B, 1.5e12, 1T (simtrain.cli.types.parse_count)

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
        phrase = self.check(value) if self.check is not None else ""
        if phrase:
            raise SpecError(f"{label} = {value!r}: {phrase}")
        return value


#: The scenario ``simtrain run`` simulates with no arguments, and the defaults of its settings:
#: Llama-3-70B on the 64 H100s of the ``seed-h100`` cluster with the textbook TP=8 x PP=4 x DP=2
#: layout and a small global batch (16 micro-batches per pipeline), so the step shows pipeline
#: bubbles, gradient reductions overlapped with the backward, and the last stage's LM head as
#: stage imbalance.
DEFAULT_SCENARIO: Mapping[str, Any] = MappingProxyType({
    "model": "llama3-70b", "topology": "seed-h100", "gpus": 64, "tp": 8, "pp": 4, "cp": 1,
    "seq": 8192, "mbs": 1, "gbs": 32, "schedule": "1f1b",
})


def _degree(name: str, what: str, default: int | None = 1, default_text: str = "",
            derived_from: tuple[str, ...] = ()) -> Setting:
    return Setting(name, int, default, f"{what} parallel degree", default_text=default_text, rule=POSITIVE,
                   metavar="N", scenario=True, derived_from=derived_from)


_TABLE = (
    Setting("model", str, DEFAULT_SCENARIO["model"], "model preset or file (.toml, or a Hugging Face "
            "config.json)", metavar="NAME|FILE", scenario=True),
    Setting("topology", str, DEFAULT_SCENARIO["topology"], "topology preset or .toml file", metavar="NAME|FILE",
            scenario=True),
    Setting("nodes", int, None, "nodes in the cluster", default_text="the fewest the topology's fabric "
            "takes that hold --gpus", rule=POSITIVE, metavar="N", scenario=True, derived_from=("gpus",)),
    Setting("gpus", int, DEFAULT_SCENARIO["gpus"], "GPUs used", rule=POSITIVE, metavar="N", scenario=True),
    _degree("tp", "tensor", DEFAULT_SCENARIO["tp"]),
    _degree("cp", "context", DEFAULT_SCENARIO["cp"]),
    _degree("pp", "pipeline", DEFAULT_SCENARIO["pp"]),
    _degree("dp", "data", None, "gpus / (tp*cp*pp)", ("gpus", "tp", "cp", "pp")),
    _degree("ep", "expert"),
    _degree("etp", "expert tensor", None, "tp", ("tp",)),
    Setting("vpp", int, 1, "virtual pipeline chunks per rank; interleaved-1f1b needs 2 or more", rule=POSITIVE, metavar="N",
            scenario=True),
    Setting("schedule", str, DEFAULT_SCENARIO["schedule"], "pipeline schedule (see simtrain list schedules)",
            metavar="NAME|FILE.csv", scenario=True),
    Setting("seq", int, DEFAULT_SCENARIO["seq"], "sequence length, tokens", rule=POSITIVE, metavar="N", scenario=True),
    Setting("mbs", int, DEFAULT_SCENARIO["mbs"], "micro-batch size, sequences", rule=POSITIVE, metavar="N",
            scenario=True),
    Setting("gbs", int, DEFAULT_SCENARIO["gbs"], "global batch size, sequences", rule=POSITIVE, metavar="N",
            scenario=True),
    Setting("zero", int, 1, "ZeRO stage 0-3", rule=ZERO_STAGE, metavar="0-3"),
    Setting("sp", bool, True, "sequence parallelism", off_flag="--no-sp", off_help="no sequence parallelism"),
    Setting("recompute", (str, int), "none", "activation recompute: none, selective, full, auto (the fewest "
            "whole layers per chunk that fit in memory) or a number of layers per chunk",
            metavar="none|selective|full|auto|N", check=_recompute_phrase),
    Setting("recompute_modules", str, None, "the modules --recompute selective runs again before their backward, "
            "comma-separated (Megatron-LM's --recompute-modules): core_attn, mlp, moe, moe_act, layernorm, "
            "mla_up_proj, shared_experts", default_text="core_attn", metavar="MODULE,...", check=_modules_phrase),
    Setting("order", str, DEFAULT_ORDER, "rank order, innermost first", metavar="ORDER"),
    Setting("first_stage_layers", int, None, "layers on the first pipeline chunk",
            default_text="even, or one fewer on the end chunks where the layers do not divide",
            rule=POSITIVE, metavar="N"),
    Setting("last_stage_layers", int, None, "layers on the last pipeline chunk (0: MTP modules and loss alone)",
            default_text="even, or one fewer on the end chunks where the layers do not divide",
            rule=NON_NEGATIVE, metavar="N"),
    Setting("balance_stages", bool, False, "move layers off the first and last stages to equalise stage times"),
    Setting("mtp_layers", int, None, "multi-token prediction modules on the last pipeline stage, each a layer "
            "like the last decoder layer with its own LM head and loss (Megatron-LM's --mtp-num-layers)",
            default_text="the model's (0 in every preset)", rule=NON_NEGATIVE, metavar="N"),
    Setting("account_for_embedding_in_pipeline_split", bool, False, "count the embedding as one layer slot of "
            "the first pipeline chunk; the layers plus the counted slots must divide by pp*vpp (Megatron-LM's "
            "--account-for-embedding-in-pipeline-split)"),
    Setting("account_for_loss_in_pipeline_split", bool, False, "count the LM head and loss as one layer slot of "
            "the last pipeline chunk; the layers plus the counted slots must divide by pp*vpp (Megatron-LM's "
            "--account-for-loss-in-pipeline-split)"),
    Setting("network", str, NETWORKS[0], "network model: " + described(), choices=NETWORKS, metavar="|".join(NETWORKS)),
    Setting("collective_algo", str, None, "force a collective algorithm where it applies: " + ", ".join(ALGORITHMS),
            default_text="chosen per message like NCCL's tuner", metavar="ALGO"),
    Setting("routing_skew", float, 0.0, "MoE expert popularity skew (Zipf exponent; 0 = uniform routing)",
            rule=NON_NEGATIVE_FINITE, metavar="X"),
    Setting("routing_seed", int, 0, "seed of the skewed expert popularity", rule=NON_NEGATIVE, metavar="N"),
    Setting("moe_dispatcher", str, "alltoall", "EP token dispatcher: alltoall (Megatron-LM's: one copy per "
            "routed expert) or deepep (DeepSeek-V3's, as Megatron-LM runs it: one copy per destination node "
            "over the network, bf16)", choices=MOE_DISPATCHERS, metavar="|".join(MOE_DISPATCHERS)),
    Setting("efficiency", float, None, "run every GEMM and attention core at this flat fraction of peak FLOP/s "
            "instead of the efficiency its shape gets", default_text="by shape; the GPU's where it sets one",
            rule=FRACTION, metavar="X"),
    Setting("attention", str, "flash", "attention core: flash (fused kernel) or eager (unfused scores, softmax, "
            "dropout and context, as 2021-22 stacks ran)", choices=ATTENTION_KERNELS,
            metavar="|".join(ATTENTION_KERNELS)),
    Setting("rope_fusion", bool, True, "rotary embedding in one fused kernel (Megatron-LM's default)", flags=(),
            off_flag="--no-rope-fusion", off_help="rotary embedding as separate PyTorch ops (Megatron-LM's flag)"),
    Setting("grad_dtype", str, "fp32", "precision of gradient accumulation and data-parallel reduction "
            "(Megatron-LM reduces in fp32 unless --grad-reduce-in-bf16)", choices=GRAD_DTYPES,
            metavar="|".join(GRAD_DTYPES)),
    Setting("overlap_grad_reduce", bool, True, "reduce each gradient bucket as soon as its backward is done "
            "(Megatron-LM's --overlap-grad-reduce)", flags=(), off_flag="--no-overlap-grad-reduce",
            off_help="reduce the gradients after the step's last backward (Megatron-LM's default)"),
    Setting("overlap_param_gather", bool, True, "ZeRO-1/2: each bucket's parameters are gathered just ahead of "
            "their first forward (Megatron-LM's --overlap-param-gather)", flags=(),
            off_flag="--no-overlap-param-gather", off_help="all buckets are gathered before the step's first forward "
            "(Megatron-LM's default)"),
    Setting("overlap_p2p_comm", bool, True, "pipeline sends run beside the compute (Megatron-LM's "
            "--overlap-p2p-comm)", flags=(), off_flag="--no-overlap-p2p-comm",
            off_help="a rank waits for its pipeline send before its next action (Megatron-LM's default)"),
    Setting("tp_backward_overlap", bool, True, "in the backward, the TP collectives of a block run beside its "
            "weight-gradient and input-gradient GEMMs (Megatron-LM's asynchronous TP communication)", flags=(),
            off_flag="--no-tp-backward-overlap",
            off_help="each backward TP collective runs after the GEMM that produces its input and before the next "
            "(Megatron-LM before asynchronous TP communication)"),
    Setting("tp_comm_overlap", bool, False, "split each sequence-parallel TP all-gather and reduce-scatter into "
            "tp chunks pipelined with the GEMM beside it, so one chunk is exposed (TransformerEngine's userbuffers, "
            "Megatron-LM's --tp-comm-overlap; needs sequence parallelism)"),
    Setting("overlap_moe_expert_parallel_comm", bool, False, "1F1B overlap: each steady-state forward and "
            "backward of the 1f1b or interleaved-1f1b schedule run as one step whose EP all-to-alls run under the "
            "other micro-batch's compute, with one more warm-up forward (Megatron-LM's "
            "--overlap-moe-expert-parallel-comm; needs an MoE model with ep > 1)"),
    Setting("moe_shared_expert_overlap", bool, True, "shared experts beside the dispatch all-to-all (Megatron-LM's "
            "--moe-shared-expert-overlap, NeMo's DeepSeek)", flags=(), off_flag="--no-moe-shared-expert-overlap",
            off_help="shared experts after the combine, their gradient before its (Megatron-LM's default)"),
    Setting("fp8", bool, False, "linear-layer GEMMs in FP8 with TransformerEngine's casts (Hopper and later)"),
    Setting("steps", int, 1, "consecutive training steps simulated; the report gives the last (steady) step and "
            "the first", rule=POSITIVE, metavar="N"),
    Setting("optimizer_sync", str, "grad-norm", "end of a step: grad-norm (Megatron-LM: all-reduce the global "
            "gradient norm over every GPU, then the optimizer) or post-validation (no global synchronisation: the "
            "next step starts on each rank after its own optimizer step; Qi et al. 2024, section 4)",
            choices=OPTIMIZER_SYNCS, metavar="MODE"),
    Setting("comm_interference", float, None, "how much longer compute takes while communication runs beside it "
            "on the same GPU (0 = communication is free)", default_text="the GPU's: comm_sms / (sm_count - comm_sms), "
            "0.179 on an H100", rule=NON_NEGATIVE_FINITE, metavar="X"),
    Setting("calibration", str, None, "CSV of kernel times measured on the GPU (simtrain calibrate) used in "
            "place of the kernel model where it has data", default_text="none: the kernel model",
            metavar="FILE"),
    Setting("fold", bool, True, "simulate one representative per group of ranks with identical programs",
            flags=(), off_flag="--no-fold",
            off_help="simulate every rank instead of one representative per pipeline rank"),
    Setting("straggler", str, None, "slow GPUs: their kernels run at FACTOR of their speed (default 0.8), "
            "e.g. 5:0.8,17", default_text="none", metavar="RANK[:FACTOR],..."),
    Setting("throttle", str, None, "slow a random FRACTION of the GPUs (drawn with --seed) to FACTOR of their "
            "speed (default 0.8), e.g. 0.01:0.7", default_text="none", metavar="FRACTION[:FACTOR]"),
    Setting("slow_node", str, None, "slow every GPU of a node to FACTOR of its speed (default 0.8)",
            default_text="none", metavar="NODE[:FACTOR],..."),
    Setting("node_gpu", str, None, "put another GPU preset on nodes FIRST to LAST (mixed generations; the "
            "kernels of those GPUs are timed on that GPU), e.g. 0-3:a100-80g", default_text="none",
            metavar="FIRST[-LAST]:GPU,..."),
    Setting("degrade_link", str, None, "keep FACTOR of a link's bandwidth, the link named by its ends as "
            "simtrain topology --json names them, e.g. leaf0-spine3:0.5 or node2/nic1-leaf0:0.25",
            default_text="none", metavar="END-END:FACTOR,..."),
    Setting("fail_link", str, None, "remove a link (routes avoid it; a group it disconnects is an error), "
            "e.g. leaf0-spine3", default_text="none", metavar="END-END,..."),
    Setting("seed", int, 0, "seed of the random draws (--throttle, --jitter, --slow-steps)", rule=NON_NEGATIVE,
            metavar="N"),
    Setting("jitter", float, 0.0, "coefficient of variation of every kernel's time, drawn per op, GPU and step "
            "(lognormal, mean 1); with --steps N the report gives the step-time distribution", rule=CV,
            metavar="CV"),
    Setting("slow_steps", str, None, "with probability PROB per step one random GPU runs the step at FACTOR of its "
            "speed (default 0.5), e.g. 0.05:0.5", default_text="none", metavar="PROB[:FACTOR]"),
    Setting("max_events", int, DEFAULT_MAX_EVENTS, "refuse or stop a run of more than this many "
            "operations (each holds about 620 bytes: 2,000,000 stay under 1.2 GiB)", rule=POSITIVE, metavar="N"),
    Setting("price_per_gpu_hour_usd", float, None, "price of one GPU-hour in US dollars, for the cost keys of the "
            "report", default_text="the topology's [cost] table; none: no cost", rule=POSITIVE_FINITE,
            metavar="USD", flags=("--price-per-gpu-hour",)),
    Setting("train_tokens", int, None, "tokens of a whole training run: the report adds its steps, time, energy "
            "and cost; a whole number, or with an exponent or a decimal suffix K, M, B, T: 300B, 1.5e12, 1T",
            default_text="none", rule=POSITIVE, metavar="N", count=True),
)

#: Every run setting by name, in the order of ``--help``.
SETTINGS: Mapping[str, Setting] = MappingProxyType({s.name: s for s in _TABLE})

#: The settings of a command's output, not of the scenario: flags and ``--config`` keys of
#: ``simtrain run``, ``analytic`` and ``compare``, never in a report's ``config`` (the same
#: scenario written to two folders gives the same report).
OUTPUTS: Mapping[str, Setting] = MappingProxyType({s.name: s for s in (
    Setting("out", str, "out", "output folder", metavar="DIR"),
    Setting("plot", bool, True, "draw timeline.png", flags=(), off_flag="--no-plot", off_help="skip timeline.png"),
    Setting("json", bool, False, "print one JSON object instead of tables"),
    Setting("require_fit", bool, False, "fail (exit 2) when a stage's peak memory exceeds the GPU's capacity"),
    Setting("html", bool, False, "also write report.html: the interactive timeline and the tables in one "
            "page that opens offline"),
    Setting("window", str, None, "time window of timeline.png: START:END in seconds, or mb:A:B for "
            "micro-batches A to B-1", default_text="the whole step", metavar="START:END|mb:A:B"),
    Setting("xlim", float, None, "end of timeline.png's time axis in seconds: the axis runs from 0 to it, so "
            "charts of runs with different step times share one axis (at least the step's end)",
            default_text="the step's end", rule=POSITIVE_FINITE, metavar="SECONDS"),
    Setting("ranks", str, None, "ranks drawn in timeline.png, e.g. 0,16", default_text="every simulated "
            "rank, subsampled to 64 rows", metavar="R,R,..."),
    Setting("streams", str, None, "streams drawn in timeline.png: compute, tp, cp, ep, pp_send, pp_recv, dp",
            default_text="all", metavar="S,S,..."),
    Setting("progress", str, "auto", "progress bar on stderr for commands longer than 2 s: auto (when stderr "
            "is a terminal and the output is not --json), on (when stderr is a terminal) or off",
            choices=PROGRESS_MODES, metavar="auto|on|off"),
)})

#: Where ``simtrain search`` runs its candidates: flags of that command only.
SEARCH_OPTIONS: Mapping[str, Setting] = MappingProxyType({s.name: s for s in (
    Setting("executor", str, "local", "where candidates run: local (processes on this machine, --jobs) or dask "
            "(a dask.distributed cluster; pip install 'simtrain[dist]')", choices=EXECUTORS,
            metavar="local|dask"),
    Setting("scheduler", str, None, "address of a running dask scheduler (tcp://host:8786) for --executor dask",
            default_text="a local cluster of --jobs workers", metavar="ADDRESS"),
    OUTPUTS["progress"],
)})


def complete(given: Mapping[str, Any] | None) -> dict[str, Any]:
    """Every setting's value: the given ones checked (:meth:`Setting.validate`), the others their
    defaults, which are the default scenario's values. Output settings (:data:`OUTPUTS`) are
    checked and left out: they are the caller's business.

    >>> s = complete({"network": "flow", "pp": 2})
    >>> s["model"], s["tp"], s["pp"], s["gbs"], s["network"], s["fold"]
    ('llama3-70b', 8, 2, 32, 'flow', True)
    """
    given = dict(given or {})
    unknown = sorted(set(given) - set(SETTINGS) - set(OUTPUTS))
    if unknown:
        raise unknown_name("setting", unknown[0], [*SETTINGS, *OUTPUTS])
    for name in sorted(set(given) & set(OUTPUTS)):
        if given[name] is not None:
            OUTPUTS[name].validate(given[name])
    return {name: s.default if given.get(name) is None else s.validate(given[name])
            for name, s in SETTINGS.items()}


def setting(name: str) -> Setting:
    """The setting called ``name``; for a misspelt name a :class:`SpecError` naming the closest."""
    if name not in SETTINGS:
        raise unknown_name("setting", name, SETTINGS)
    return SETTINGS[name]


def lookup(settings: Mapping[str, Any], name: str, default: Any = None) -> Any:
    """``settings.get(name, default)`` of user-level ``settings``, ``name`` checked by :func:`setting`."""
    return settings.get(setting(name).name, default)


def _mentions(message: str, setting: Setting) -> bool:
    """Whether an error message names ``setting``: a number by its name (``pp=4``,
    ``tp*cp*pp``), a name-valued setting by its default value (``llama3-70b``)."""
    word = str(setting.default) if isinstance(setting.default, str) else setting.name
    return re.search(rf"(?<![\w.-]){re.escape(word)}(?![\w-])", message) is not None


def defaults_note(message: str, given: Collection[str]) -> str:
    """The words to add to an error about an impossible combination: the default values it names
    that the user did not set (not given, or the sources of a derived value such as ``dp``), and
    the flags that override them; empty when it names none. A default of 1 (cp, ep, vpp, mbs)
    cannot cause a clash and is not named.

    >>> defaults_note("gpus=100 is not divisible by tp*cp*pp=32 (tp=8, cp=1, pp=4)", {"gpus"})
    '; defaults in use: tp=8, pp=4 (override with --tp, --pp)'
    """
    named: list[Setting] = []
    for setting in _TABLE:
        if not setting.scenario or setting.name in given or not _mentions(message, setting):
            continue
        sources = [SETTINGS[n] for n in setting.derived_from] if setting.default is None else [setting]
        named += [s for s in sources if s.name not in given and s.default not in (None, 1) and s not in named]
    if not named:
        return ""
    named.sort(key=_TABLE.index)
    values = ", ".join(f"{s.name}={s.default}" for s in named)
    return f"; defaults in use: {values} (override with {', '.join(s.cli_flags[0] for s in named)})"
