"""The parallel layout of a run: degrees, batch shape, ZeRO, recompute, schedule, rank order.

Constraints follow Megatron-LM's argument checks (``megatron/training/arguments.py``): TP must
divide the attention heads and the KV heads, the global batch must split into whole micro-batches
per data-parallel replica, EP must divide the experts and be folded from the DP x CP ranks. Layers
that PP x VPP does not divide are split unevenly (:func:`simtrain.workload.stages.auto_split`).
The precision of a run is Megatron-LM's for bf16 training: gradients accumulated and reduced in
fp32 (``--grad-dtype bf16`` is Megatron's opt-in ``--grad-reduce-in-bf16``), FP8 linear layers
with ``--fp8`` (TransformerEngine, Hopper and later).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from simtrain.errors import SpecError
from simtrain.specs.order import DEFAULT_ORDER, parse_order

if TYPE_CHECKING:  # pragma: no cover
    from simtrain.specs.model import ModelSpec

MIN_CP_TOKENS = 512  # shortest sequence slice per CP rank the simulator accepts
RECOMPUTE_POLICIES = ("none", "selective", "full", "auto")
#: Megatron-LM's ``--recompute-modules`` (``transformer_config.py``, ``recompute_modules``): what
#: selective recompute runs again before its backward (:mod:`simtrain.costs.sizes` says what each holds).
RECOMPUTE_MODULES = ("core_attn", "mlp", "moe", "moe_act", "layernorm", "mla_up_proj", "shared_experts")
MOE_DISPATCHERS = ("alltoall", "deepep")  # Megatron-LM's all-to-all token dispatcher, DeepEP's
ATTENTION_KERNELS = ("flash", "eager")  # fused attention, or the unfused core of 2021-22 stacks
GRAD_DTYPES = ("fp32", "bf16")
#: The TP, CP and PP degrees a layout search tries by default (the course notes' ``parallel_plan.py``
#: lists; a TP beyond a node is skipped): :func:`simtrain.layout_search.candidates.enumerate_candidates`,
#: :func:`simtrain.api.search.search`, ``simtrain search`` and ``simtrain whatif`` read it.
SEARCH_DEGREES = {"tp": (1, 2, 4, 8), "cp": (1, 2, 4, 8, 16, 32), "pp": (1, 2, 4, 8, 16)}


@dataclass(frozen=True)
class ParallelSpec:
    """A parallel layout and batch shape; validated against a model by :func:`validate_parallel`.

    >>> par = ParallelSpec(tp=8, pp=4, dp=2, gbs=512, seq=8192)
    >>> par.world, par.num_microbatches, par.tokens_per_step
    (64, 256, 4194304)
    """

    tp: int = 1  # tensor parallel degree
    cp: int = 1  # context parallel degree (sequence split across ranks)
    pp: int = 1  # pipeline parallel degree (pipeline ranks)
    dp: int = 1  # data parallel degree (replicas)
    ep: int = 1  # expert parallel degree (MoE), folded from dp x cp
    etp: int | None = None  # expert tensor parallel degree; None = tp
    vpp: int = 1  # stages (model chunks) per pipeline rank (interleaved schedules)
    mbs: int = 1  # micro-batch size, sequences
    gbs: int = 1  # global batch size, sequences per step
    seq: int = 4096  # sequence length, tokens
    zero: int = 1  # ZeRO stage 0-3 (1 = distributed optimizer)
    sp: bool = True  # sequence parallelism alongside TP (only meaningful when tp > 1)
    recompute: str = "none"  # none | selective | full | N (full recompute of N layers per chunk) | auto
    recompute_modules: tuple[str, ...] = ()  # selective recompute's modules (RECOMPUTE_MODULES); () = core_attn
    schedule: str = "1f1b"  # pipeline schedule name or CSV path
    order: str = DEFAULT_ORDER  # rank order, innermost dimension first
    # layers of the first chunk of the chain (the first stage's; with vpp > 1 not all of the
    # first pipeline rank's layers); None = even split
    first_stage_layers: int | None = None
    last_stage_layers: int | None = None  # layers of the last chunk of the chain; None = even split
    balance_stages: bool = False  # choose first/last chunk layers to equalise the chunks' times
    # Megatron-LM's split: the embedding / the LM head and loss take one layer slot of the first /
    # last chunk (simtrain.workload.stages.accounted_split)
    account_for_embedding_in_pipeline_split: bool = False
    account_for_loss_in_pipeline_split: bool = False
    attention: str = "flash"  # attention core: flash (fused kernel) or eager (unfused, s x s scores)
    rope_fusion: bool = True  # rotary embedding in one fused kernel; False: PyTorch ops (--no-rope-fusion)
    grad_dtype: str = "fp32"  # gradient accumulation and data-parallel reduction: fp32 or bf16
    fp8: bool = False  # linear-layer GEMMs in FP8 (needs a GPU with FP8 tensor cores)
    overlap_grad_reduce: bool = True  # reduce each gradient bucket during the backward, not after it
    overlap_param_gather: bool = True  # ZeRO-1/2: gather each bucket ahead of its first use (False: all first)
    overlap_p2p_comm: bool = True  # pipeline sends run beside the compute; False: the sender waits
    tp_backward_overlap: bool = True  # backward TP collectives beside the GEMMs (False: one after another)
    tp_comm_overlap: bool = False  # TransformerEngine's chunked TP all-gather/reduce-scatter beside the GEMMs
    moe_dispatcher: str = "alltoall"  # EP all-to-all: Megatron-LM's alltoall or DeepEP's (simtrain.costs.dispatch)
    # Megatron-LM's 1F1B overlap: steady-state F and B as overlapped pairs (simtrain.schedules.combined)
    overlap_moe_expert_parallel_comm: bool = False
    # shared experts beside the dispatch all-to-all (Megatron-LM's --moe-shared-expert-overlap);
    # False: after the combine, and in the backward before its gradient (Megatron-LM's default)
    moe_shared_expert_overlap: bool = True

    @property
    def world(self) -> int:
        return self.tp * self.cp * self.pp * self.dp

    @property
    def expert_tp(self) -> int:
        return self.tp if self.etp is None else self.etp

    @property
    def edp(self) -> int:
        """Expert data parallel degree: the ranks of one pipeline position not used by etp x ep."""
        return self.world // (self.expert_tp * self.ep * self.pp)

    @property
    def num_microbatches(self) -> int:
        """Micro-batches each pipeline runs per step: gbs / (dp * mbs)."""
        return self.gbs // (self.dp * self.mbs)

    @property
    def sequence_parallel(self) -> bool:
        return self.sp and self.tp > 1

    @property
    def tokens_per_step(self) -> int:
        return self.gbs * self.seq

    def recompute_layers(self, layers_per_chunk: int) -> int:
        """Layers per chunk that run a full recompute forward before their backward."""
        if self.recompute == "full":
            return layers_per_chunk
        if self.recompute in ("none", "selective", "auto"):
            return 0
        return min(int(self.recompute), layers_per_chunk)

    @property
    def recomputed_modules(self) -> tuple[str, ...]:
        """The modules selective recompute runs again: ``recompute_modules``, or Korthikanti et
        al.'s core attention by default; none for the other policies."""
        if self.recompute != "selective":
            return ()
        return self.recompute_modules or ("core_attn",)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_recompute(value: str | int) -> str:
    """Normalise a recompute policy: none | selective | full | a layer count N >= 0."""
    text = str(value).strip().lower()
    if text in RECOMPUTE_POLICIES:
        return text
    if text.isdigit():
        return str(int(text))
    raise SpecError(f"recompute={value!r}: must be none, selective, full, auto or a layer count N >= 0")


def parse_recompute_modules(value: str | tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """The module names of ``--recompute-modules`` (comma-separated text or a sequence), each once
    in the order given; an unknown name is a :class:`SpecError` naming it and the valid ones."""
    names = value.split(",") if isinstance(value, str) else list(value)
    out: list[str] = []
    for name in (str(n).strip().lower() for n in names):
        if name not in RECOMPUTE_MODULES:
            raise SpecError(f"recompute_modules={value!r}: unknown module {name!r}; valid: "
                            f"{', '.join(RECOMPUTE_MODULES)}")
        if name not in out:
            out.append(name)
    return tuple(out)


def _check_recompute_modules(par: ParallelSpec, model: "ModelSpec") -> None:
    """The modules of ``par.recompute_modules`` need selective recompute and must exist in ``model``."""
    mods = parse_recompute_modules(par.recompute_modules)
    if mods and par.recompute != "selective":
        raise SpecError(f"recompute_modules={','.join(mods)!r} with recompute={par.recompute!r}: the modules "
                        f"are selective recompute's; use recompute=selective")
    dense = not model.is_moe or model.dense_layers > 0
    exists = {"moe": model.is_moe, "moe_act": model.is_moe, "shared_experts": model.shared_experts > 0,
              "mla_up_proj": model.is_mla, "mlp": dense}
    for name in mods:
        if not exists.get(name, True):
            raise SpecError(f"recompute_modules={','.join(mods)!r}: {model.name} has no {name} module; valid for it: "
                            f"{', '.join(m for m in RECOMPUTE_MODULES if exists.get(m, True))}")


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _valid_degrees(num_gpus: int, degrees: dict[str, int]) -> str:
    """The values of one of ``degrees`` (tp, cp, pp) with which their product divides the GPU
    count, the others kept: of the first degree that does not divide it, else of the last.

    >>> _valid_degrees(256, {"tp": 8, "cp": 1, "pp": 3})
    'valid pp with tp=8, cp=1: 1, 2, 4, 8, 16, 32'
    >>> _valid_degrees(256, {"tp": 3, "cp": 1, "pp": 4})
    'valid tp with cp=1, pp=4: 1, 2, 4, 8, 16, 32, 64'
    """
    names = sorted(degrees, key=lambda n: (num_gpus % degrees[n] == 0, -list(degrees).index(n)))
    for name in names:
        others = {k: v for k, v in degrees.items() if k != name}
        product = 1
        for v in others.values():
            product *= v
        if num_gpus % product == 0:
            kept = ", ".join(f"{k}={v}" for k, v in others.items())
            return f"valid {name} with {kept}: {', '.join(map(str, _divisors(num_gpus // product)))}"
    return f"{'*'.join(degrees)} must divide gpus={num_gpus}: each of {', '.join(degrees)} a divisor of it"


def _valid_ep(par: ParallelSpec, model: "ModelSpec") -> str:
    """The EP degrees that divide the experts and, with the expert TP and the pipeline, the world."""
    span = par.expert_tp * par.pp
    valid = [e for e in _divisors(model.num_experts) if par.world % (span * e) == 0]
    return (f"valid ep with etp={par.expert_tp}, pp={par.pp} on {par.world} GPUs: {', '.join(map(str, valid))}"
            if valid else f"etp*pp={span} does not divide the {par.world} GPUs")


def resolve_parallel(num_gpus: int, *, tp: int = 1, cp: int = 1, pp: int = 1, dp: int | None = None,
                     **rest: Any) -> ParallelSpec:
    """A ParallelSpec whose dp is derived from the GPU count when not given."""
    for name, value in (("gpus", num_gpus), ("tp", tp), ("cp", cp), ("pp", pp)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise SpecError(f"{name}={value!r}: must be an integer >= 1")
    inner = tp * cp * pp
    if dp is None:
        if num_gpus % inner:
            raise SpecError(f"gpus={num_gpus} is not divisible by tp*cp*pp={inner} "
                            f"(tp={tp}, cp={cp}, pp={pp}); dp cannot be derived; "
                            f"{_valid_degrees(num_gpus, {'tp': tp, 'cp': cp, 'pp': pp})}")
        dp = num_gpus // inner
    elif inner * dp != num_gpus:
        raise SpecError(f"tp*cp*pp*dp={inner * dp} (tp={tp}, cp={cp}, pp={pp}, dp={dp}) does not "
                        f"match gpus={num_gpus}")
    if "recompute" in rest:
        rest["recompute"] = parse_recompute(rest["recompute"])
    if rest.get("recompute_modules") is None:
        rest.pop("recompute_modules", None)  # not given: the policy's own (core_attn for selective)
    else:
        rest["recompute_modules"] = parse_recompute_modules(rest["recompute_modules"])
    return ParallelSpec(tp=tp, cp=cp, pp=pp, dp=dp, **rest)


def validate_parallel(par: ParallelSpec, model: "ModelSpec", num_gpus: int | None = None) -> None:
    """Raise a SpecError naming the first impossible combination of layout and model."""
    for name in ("tp", "cp", "pp", "dp", "ep", "vpp", "mbs", "gbs", "seq"):
        value = getattr(par, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise SpecError(f"{name}={value!r}: must be an integer >= 1")
    if par.etp is not None and par.etp < 1:
        raise SpecError(f"etp={par.etp}: must be an integer >= 1")
    dims = parse_order(par.order)
    if par.ep > 1 and par.pp > 1 and dims.index("pp") < dims.index("ep"):
        raise SpecError(f"order {par.order!r} with ep={par.ep} and pp={par.pp}: pp is inside ep, so an EP group "
                        f"would span pipeline stages that run different layers; put ep before pp "
                        f"(e.g. {DEFAULT_ORDER!r})")
    parse_recompute(par.recompute)
    _check_recompute_modules(par, model)
    if par.zero not in (0, 1, 2, 3):
        raise SpecError(f"zero={par.zero!r}: ZeRO stage must be 0, 1, 2 or 3")
    if num_gpus is not None and par.world != num_gpus:
        raise SpecError(f"tp*cp*pp*dp={par.world} (tp={par.tp}, cp={par.cp}, pp={par.pp}, "
                        f"dp={par.dp}) does not match gpus={num_gpus}")
    if model.heads % par.tp:
        raise SpecError(f"tp={par.tp} does not divide the {model.heads} attention heads of {model.name}")
    if model.kv_heads % par.tp:
        raise SpecError(f"tp={par.tp} does not divide the {model.kv_heads} KV heads of {model.name} "
                        f"(valid tp: divisors of {model.kv_heads})")
    if model.vocab < par.tp:
        raise SpecError(f"tp={par.tp} exceeds the vocabulary of {model.name} (vocab_size = {model.vocab}): each "
                        f"tensor-parallel rank holds a slice of the embedding and the LM head (valid tp: at most "
                        f"{model.vocab})")
    uneven = par.first_stage_layers is not None or par.last_stage_layers is not None or par.balance_stages
    accounted = par.account_for_embedding_in_pipeline_split or par.account_for_loss_in_pipeline_split
    if accounted:
        _check_accounted(par, model, uneven)
    elif par.pp * par.vpp > model.layers:
        raise SpecError(f"pp*vpp={par.pp * par.vpp} (pp={par.pp}, vpp={par.vpp}) exceeds the "
                        f"{model.layers} layers of {model.name}: every pipeline chunk needs a layer"
                        + ("; or count the embedding and the loss as layers (--account-for-embedding-in-pipeline-split "
                           "--account-for-loss-in-pipeline-split)" if (model.layers + 2) % (par.pp * par.vpp) == 0
                           else ""))
    if par.moe_dispatcher not in MOE_DISPATCHERS:
        raise SpecError(f"moe_dispatcher={par.moe_dispatcher!r}: must be one of {', '.join(MOE_DISPATCHERS)}")
    if par.attention not in ATTENTION_KERNELS:
        raise SpecError(f"attention={par.attention!r}: must be one of {', '.join(ATTENTION_KERNELS)}")
    if par.attention == "eager" and par.cp > 1:
        raise SpecError(f"attention=eager with cp={par.cp}: context parallelism needs the fused "
                        f"attention kernel (attention=flash)")
    if par.grad_dtype not in GRAD_DTYPES:
        raise SpecError(f"grad_dtype={par.grad_dtype!r}: must be one of {', '.join(GRAD_DTYPES)}")
    for key in ("first_stage_layers", "last_stage_layers"):
        value = getattr(par, key)
        if value is not None and (not isinstance(value, int) or value < 1) and not (
                key == "last_stage_layers" and value == 0 and model.mtp_layers):
            least = "0 (with multi-token prediction modules) or 1" if key == "last_stage_layers" else "1"
            raise SpecError(f"{key}={value!r}: must be an integer >= {least}")
    chunks = par.pp * par.vpp  # at least this many model chunks, each needing a layer
    chunks -= par.account_for_embedding_in_pipeline_split + par.account_for_loss_in_pipeline_split
    for key in ("first_stage_layers", "last_stage_layers"):
        value = getattr(par, key)
        if value is not None and value > model.layers - (chunks - 1):
            raise SpecError(f"{key}={value}: leaves no layer for some of the other {chunks - 1} pipeline "
                            f"chunks of the {model.layers} layers of {model.name}; at most "
                            f"{max(1, model.layers - chunks + 1)} with pp*vpp={chunks}")
    if uneven and par.pp == 1:
        raise SpecError("--first-stage-layers/--last-stage-layers/--balance-stages need pp > 1")
    if par.vpp > 1 and par.pp == 1:
        raise SpecError(f"vpp={par.vpp} needs pp > 1 (interleaving splits each pipeline rank)")
    if par.gbs % (par.dp * par.mbs):
        raise SpecError(f"gbs={par.gbs} is not divisible by dp*mbs={par.dp * par.mbs} "
                        f"(dp={par.dp}, mbs={par.mbs})")
    if par.pp > 1 and par.num_microbatches < par.pp:
        raise SpecError(f"gbs={par.gbs} gives {par.num_microbatches} micro-batches per pipeline "
                        f"(gbs/(dp*mbs)), fewer than pp={par.pp} stages; use gbs >= "
                        f"{par.pp * par.dp * par.mbs} or a smaller pp")
    if par.cp > 1 and par.seq // par.cp < MIN_CP_TOKENS:
        raise SpecError(f"cp={par.cp} leaves seq/cp={par.seq // par.cp} tokens per CP rank, below "
                        f"{MIN_CP_TOKENS}: ring-attention chunks that short cannot hide their K/V "
                        f"transfers (use cp <= {max(1, par.seq // MIN_CP_TOKENS)})")
    if par.cp > 1 and par.seq % (2 * par.cp):
        raise SpecError(f"seq={par.seq} is not divisible by 2*cp={2 * par.cp} (load-balanced "
                        f"causal context parallelism gives each CP rank two equal chunks)")
    check_expert_layout(par, model)
    if par.overlap_moe_expert_parallel_comm:
        check_combined_1f1b(par, model)
    rc = par.recompute
    if rc.isdigit() and int(rc) > -(-model.layers // par.pp):
        raise SpecError(f"recompute={rc} layers exceeds the {-(-model.layers // par.pp)} layers per stage")


def check_expert_layout(par: ParallelSpec, model: "ModelSpec") -> None:
    """EP and expert TP against the model: only an MoE model has them, EP divides its experts,
    and etp x ep x pp divides the world (EP folded from the DP x CP ranks)."""
    if par.ep > 1 or par.etp not in (None, par.tp):
        if not model.is_moe:
            raise SpecError(f"ep={par.ep}, etp={par.etp}: {model.name} has no experts; "
                            f"expert parallelism needs an MoE model")
    if model.is_moe:
        if model.num_experts % par.ep:
            raise SpecError(f"ep={par.ep} does not divide the {model.num_experts} experts of "
                            f"{model.name}; {_valid_ep(par, model)}")
        if par.world % (par.expert_tp * par.ep * par.pp):
            raise SpecError(f"etp*ep*pp={par.expert_tp * par.ep * par.pp} does not divide the world "
                            f"size {par.world}; EP is folded from the DP x CP ranks; {_valid_ep(par, model)}")


def expert_layouts(model: "ModelSpec", *, world: int, tp: int, pp: int, eps: tuple[int, ...] | None = None,
                   etps: tuple[int, ...] | None = None) -> list[tuple[int, int]]:
    """The (ep, etp) pairs :func:`check_expert_layout` accepts for a layout of ``world`` GPUs at
    TP ``tp`` and PP ``pp`` (``tp * pp`` divides ``world``), EP first: EP from ``eps`` (default:
    every divisor of the experts), expert TP from ``etps`` (default: the divisors of ``tp``), none
    above ``tp``. A dense model has only ``(1, tp)``.

    >>> from simtrain.specs.model import load_model
    >>> expert_layouts(load_model("mixtral-8x7b"), world=16, tp=2, pp=2)
    [(1, 1), (1, 2), (2, 1), (2, 2), (4, 1), (4, 2), (8, 1)]
    """
    if not model.is_moe:
        return [(1, tp)]
    eps = eps or tuple(e for e in range(1, model.num_experts + 1) if model.num_experts % e == 0)
    etps = etps or tuple(e for e in range(1, tp + 1) if tp % e == 0)
    out = []
    for ep in eps:
        for etp in (e for e in etps if e <= tp):
            try:
                check_expert_layout(ParallelSpec(tp=tp, pp=pp, dp=world // (tp * pp), ep=ep, etp=etp), model)
            except SpecError:
                continue
            out.append((ep, etp))
    return out


def check_combined_1f1b(par: ParallelSpec, model: "ModelSpec") -> None:
    """Megatron-LM's conditions for ``--overlap-moe-expert-parallel-comm`` (NVIDIA/Megatron-LM
    ``megatron/core/transformer/transformer_config.py``): expert parallelism (ep > 1, so an MoE
    model), the 1F1B loop (simtrain's ``1f1b`` or ``interleaved-1f1b``; Megatron-core asks for
    virtual stages when pp > 1) and no full-layer recompute; one line naming what fails."""
    from simtrain.schedules.combined import COMBINABLE

    applies = (f"it applies to MoE models with ep > 1 under schedule {' or '.join(COMBINABLE)} "
               "without full recompute")
    if not model.is_moe or par.ep < 2:
        what = f"{model.name} is dense" if not model.is_moe else f"ep={par.ep}"
        raise SpecError(f"overlap_moe_expert_parallel_comm=True with {what}: {applies}")
    if par.schedule not in COMBINABLE:
        raise SpecError(f"overlap_moe_expert_parallel_comm=True with schedule {par.schedule}: {applies}")
    if par.recompute == "full" or (par.recompute.isdigit() and int(par.recompute) > 0):
        raise SpecError(f"overlap_moe_expert_parallel_comm=True with recompute={par.recompute}: {applies}")



def _check_accounted(par: ParallelSpec, model: "ModelSpec", uneven: bool) -> None:
    """The embedding and/or the loss counted as a layer slot of the split: not with given end
    chunk sizes (Megatron-LM's ``TransformerConfig`` refuses ``num_layers_in_first/last_pipeline_stage``
    beside them, ``megatron/core/transformer/transformer_config.py``), and the slots must divide
    evenly by pp x vpp (``get_num_layers_to_build``, ``megatron/core/transformer/transformer_block.py``)."""
    counted = [what for what, on in (("embedding", par.account_for_embedding_in_pipeline_split),
                                     ("loss", par.account_for_loss_in_pipeline_split)) if on]
    flags = " and ".join(f"--account-for-{what}-in-pipeline-split" for what in counted)
    if uneven:
        given = [f"{k}={getattr(par, k)}" for k in ("first_stage_layers", "last_stage_layers")
                 if getattr(par, k) is not None] + (["balance_stages=True"] if par.balance_stages else [])
        raise SpecError(f"{', '.join(given)} with {flags}: both set the end chunks' layers; give one or the other")
    slots = model.layers + len(counted)
    chunks = par.pp * par.vpp
    if slots % chunks:
        vpps = [v for v in range(1, slots // par.pp + 1) if slots % (par.pp * v) == 0]
        valid = f"with pp={par.pp} use vpp {', '.join(map(str, vpps))}" if vpps else f"pp={par.pp} does not divide them"
        raise SpecError(f"pp*vpp={chunks} (pp={par.pp}, vpp={par.vpp}) does not divide the {slots} layer slots of "
                        f"{model.name} ({model.layers} layers + {' + '.join(counted)}) with {flags} (each chunk "
                        f"takes as many); {valid}")
