"""A Megatron-LM launch (``pretrain_gpt.py``'s arguments, ``megatron/training/arguments.py``) as simtrain settings.

The arguments come as a string or as a launch script: lines joined at a trailing backslash, ``#`` comments dropped,
``NAME=value`` assignments substituted into ``$NAME`` and ``${NAME}``, the items of bash arrays (``ARGS=( ... )``)
read where they stand, ``torchrun``'s ``--nnodes`` and ``--nproc_per_node`` giving the GPU count; the expanded text
may be at most :data:`MAX_EXPANDED`. A flag's values run to the next flag or the program (``pretrain_gpt.py``); a flag
simtrain reads takes exactly one, a whole number at least 1 (0 where :data:`MAY_BE_ZERO`) or one of Megatron-LM's
:data:`CHOICES`. Megatron-LM's flags, with its defaults where a flag is left out:

* layout: ``--tensor-model-parallel-size``, ``--pipeline-model-parallel-size``, ``--context-parallel-size``,
  ``--expert-model-parallel-size`` and ``--expert-tensor-parallel-size`` (MoE models),
  ``--num-layers-per-virtual-pipeline-stage`` or ``--num-virtual-stages-per-pipeline-rank`` (the interleaved schedule;
  1F1B otherwise), ``--decoder-first/last-pipeline-num-layers``, ``--account-for-embedding-in-pipeline-split`` and
  ``--account-for-loss-in-pipeline-split`` (the embedding and the loss as a layer slot of the end chunks) or instead
  ``--pipeline-model-parallel-layout`` (:mod:`~simtrain.importers.megatron_layout`), ``--use-tp-pp-dp-mapping`` (the
  rank order);
* batch: ``--micro-batch-size``, ``--global-batch-size`` (default: micro-batch x DP), ``--seq-length``;
* memory: ``--sequence-parallel`` (off unless given), ``--use-distributed-optimizer`` (ZeRO-1; ZeRO-0 without it),
  Megatron FSDP's ``--data-parallel-sharding-strategy`` and ``--use-torch-fsdp2`` (ZeRO-3);
  ``--recompute-granularity`` full or selective, ``--recompute-method`` block with ``--recompute-num-layers`` N (N
  layers per chunk), uniform (all layers), ``--recompute-activations`` (selective), ``--recompute-modules`` with
  selective (its space-separated names, ``nargs='*'``, as ``recompute_modules``; default core_attn);
* kernels: ``--fp8-format`` (FP8 linear layers), ``--grad-reduce-in-bf16``, ``--attention-backend`` (unfused or local:
  the eager attention core), ``--tp-comm-overlap`` (TransformerEngine's TP communication overlapped with the GEMMs;
  with ``--sequence-parallel`` only, as Megatron-LM's argument check requires);
* model: ``--num-layers``, ``--hidden-size``, ``--num-attention-heads``, ``--group-query-attention`` with
  ``--num-query-groups``, ``--ffn-hidden-size``, ``--swiglu``, ``--num-experts``, ``--moe-router-topk``,
  ``--moe-ffn-hidden-size`` pick the model preset they describe (a dense one without ``--num-experts``; ``--model``
  takes their place).

``--overlap-grad-reduce`` and (with the distributed optimizer) ``--overlap-param-gather``, both off unless given, and
``--no-overlap-p2p-communication`` are simtrain's ``overlap_grad_reduce``, ``overlap_param_gather`` and
``overlap_p2p_comm``, ``--no-rope-fusion`` is ``rope_fusion`` off; ``--overlap-moe-expert-parallel-comm`` (the
Megatron-MoE model zoo's "1F1B overlap") is ``overlap_moe_expert_parallel_comm``, its companion
``--delay-wgrad-compute`` (weight gradients run later inside the combined step) is named unsupported. For a model with
shared experts, ``--moe-shared-expert-overlap`` (off unless given) is ``moe_shared_expert_overlap``; an MoE launch
without ``--moe-grouped-gemm`` (its experts one after another, Megatron-LM's ``SequentialMLP``) is named unsupported.
simtrain models the all-to-all token dispatcher, DeepEP's (``--moe-token-dispatcher-type flex`` with
``--moe-enable-deepep`` or ``--moe-flex-dispatcher-backend deepep``: ``moe_dispatcher`` deepep) and point-to-point CP.
Logging, checkpoint, data, tokenizer, learning-rate and other kernel-fusion flags are ignored; flags that change the
step in a way simtrain does not model (CPU offload, another token dispatcher, ...) and unknown flags are named in one
error.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from simtrain.errors import SpecError
from simtrain.importers.job import Imported, JobReader, match_model
from simtrain.importers.megatron_layout import apply_layout
from simtrain.specs.strict import read_text, shown

#: Flags that set one simtrain setting to their integer value.
SETTING_FLAGS = {"--tensor-model-parallel-size": "tp", "--pipeline-model-parallel-size": "pp",
                 "--context-parallel-size": "cp", "--micro-batch-size": "mbs", "--global-batch-size": "gbs",
                 "--seq-length": "seq", "--decoder-first-pipeline-num-layers": "first_stage_layers",
                 "--decoder-last-pipeline-num-layers": "last_stage_layers", "--mtp-num-layers": "mtp_layers"}
#: Expert-parallel flags: settings of an MoE model only.
MOE_FLAGS = {"--expert-model-parallel-size": "ep", "--expert-tensor-parallel-size": "etp"}
#: Flags that describe the model: the field of the model's architecture each gives.
MODEL_FLAGS = {"--num-layers": "layers", "--hidden-size": "hidden", "--num-attention-heads": "heads",
               "--num-query-groups": "kv_heads", "--ffn-hidden-size": "ffn", "--num-experts": "num_experts",
               "--moe-router-topk": "top_k", "--moe-ffn-hidden-size": "moe_ffn"}
#: Other flags with an integer value.
INT_FLAGS = ("--num-layers-per-virtual-pipeline-stage", "--num-virtual-stages-per-pipeline-rank",
             "--recompute-num-layers", "--nnodes", "--nproc_per_node", "--nproc-per-node")
#: Flags with a text value.
TEXT_FLAGS = ("--recompute-granularity", "--recompute-method", "--data-parallel-sharding-strategy",
              "--moe-token-dispatcher-type", "--moe-flex-dispatcher-backend", "--fp8-format", "--attention-backend",
              "--pipeline-model-parallel-layout")
#: Megatron-LM's choices of a text flag (``megatron/training/arguments.py``).
CHOICES = {"--recompute-granularity": ("full", "selective"), "--recompute-method": ("uniform", "block"),
           "--fp8-format": ("e4m3", "hybrid"), "--moe-token-dispatcher-type": ("allgather", "alltoall", "flex")}
#: Integer flags that may be 0 (the others must be at least 1).
MAY_BE_ZERO = ("--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers", "--num-experts")
#: The most text a launch's variables may expand to: 1 MiB (a launch line is a few kilobytes).
MAX_EXPANDED = 2**20
#: Flags with a list of values (``nargs='*'``).
LIST_FLAGS = ("--recompute-modules",)
#: Flags without a value that the import reads.
SWITCHES = ("--sequence-parallel", "--use-distributed-optimizer", "--group-query-attention", "--swiglu",
            "--recompute-activations", "--use-tp-pp-dp-mapping", "--use-custom-fsdp", "--use-megatron-fsdp",
            "--use-torch-fsdp2", "--overlap-grad-reduce", "--overlap-param-gather", "--grad-reduce-in-bf16",
            "--no-overlap-p2p-communication", "--no-rope-fusion", "--overlap-moe-expert-parallel-comm",
            "--tp-comm-overlap", "--moe-enable-deepep", "--moe-shared-expert-overlap", "--moe-grouped-gemm",
            "--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split")
#: Switches that turn one boolean setting on.
SWITCH_SETTINGS = {"--tp-comm-overlap": "tp_comm_overlap",
                   "--overlap-moe-expert-parallel-comm": "overlap_moe_expert_parallel_comm",
                   "--account-for-embedding-in-pipeline-split": "account_for_embedding_in_pipeline_split",
                   "--account-for-loss-in-pipeline-split": "account_for_loss_in_pipeline_split"}
#: Flags that change the step in a way simtrain does not model, and how.
UNSUPPORTED = {"--cpu-offloading": "activation offload to the CPU",
               "--hierarchical-context-parallel-sizes": "hierarchical CP",
               "--cp-comm-type": "CP communication other than point-to-point rings",
               "--defer-embedding-wgrad-compute": "the LM head's weight gradient moved to the flush",
               "--rampup-batch-size": "a batch size that changes during training",
               "--num-distributed-optimizer-instances": "several distributed-optimizer copies",
               "--microbatch-group-size-per-virtual-pipeline-stage": "another interleaving group size",
               "--moe-layer-freq": "dense and MoE layers in another pattern than the preset's",
               "--encoder-num-layers": "an encoder", "--encoder-seq-length": "an encoder",
               "--delay-wgrad-compute": "weight gradients moved later inside a 1F1B-overlap step"}
#: Flag prefixes with no effect on one simulated step (logging, checkpoints, data, tokenizer,
#: optimizer hyper-parameters, regularisation, kernels and fusions, launcher plumbing).
IGNORED_PREFIXES = (
    "--log", "--tensorboard", "--wandb", "--save", "--load", "--no-load", "--no-save", "--ckpt", "--data",
    "--split", "--vocab", "--merge-file", "--tokenizer", "--tiktoken", "--mock-data", "--num-workers", "--eval",
    "--lr", "--min-lr", "--weight-decay", "--clip-grad", "--adam", "--sgd", "--optimizer", "--init-method",
    "--seed", "--train-iters", "--train-samples", "--exit", "--timing", "--profile", "--distributed-backend",
    "--distributed-timeout", "--bf16", "--fp16", "--loss-scale", "--initial-loss-scale", "--hysteresis",
    "--attention-dropout", "--hidden-dropout", "--position-embedding-type", "--rotary", "--use-rotary",
    "--use-rope", "--max-position-embeddings", "--normalization", "--norm-epsilon", "--untie-embeddings",
    "--disable-bias-linear", "--add-bias", "--add-qkv-bias", "--qk-layernorm", "--kv-channels", "--make-vocab-size",
    "--use-flash-attn", "--transformer-impl", "--fp8-", "--use-mcore-models", "--use-legacy-models",
    "--no-masked-softmax-fusion", "--no-bias", "--no-gradient", "--no-persist-layer-norm", "--apply-query-key",
    "--attention-softmax-in-fp32", "--accumulate-allreduce", "--use-cpu-initialization", "--manual-gc", "--rerun",
    "--check-for", "--calculate-per-token-loss", "--ddp-", "--no-align", "--moe-aux-loss", "--moe-z-loss",
    "--moe-router-", "--moe-permute-fusion", "--moe-shared-expert-intermediate", "--moe-expert-capacity",
    "--moe-pad-expert", "--moe-token-drop", "--multi-latent-attention", "--q-lora-rank", "--kv-lora-rank",
    "--qk-head-dim", "--qk-pos-emb-head-dim", "--v-head-dim", "--mtp-loss", "--finetune", "--spec",
    "--no-create-attention-mask", "--num-dataset-builder-threads", "--dist-ckpt", "--async-save", "--use-dist-ckpt",
    "--auto-detect-ckpt-format", "--local-rank", "--node_rank", "--node-rank", "--master_addr", "--master-addr",
    "--master_port", "--master-port", "--rdzv", "--standalone", "--max_restarts", "--max-restarts",
    "--overlap-p2p-communication", "--use-ring-exchange-p2p", "--no-scatter-gather-tensors", "--deterministic-mode",
    "--enable-cuda-graph", "--one-logger", "--straggler", "--num-layers-at-", "--use-precision-aware-optimizer",
    "--main-grads-dtype", "--main-params-dtype", "--exp-avg", "--cross-entropy-loss-fusion",
    "--cross-entropy-fusion-impl",
)


def _expand(token: str, variables: Mapping[str, str], source: str = "arguments") -> str:
    """``token`` with ``$NAME`` and ``${NAME}`` substituted; a :class:`SpecError` beyond
    :data:`MAX_EXPANDED` characters (before the text is built)."""
    pattern = r"\$\{(\w+)\}|\$(\w+)"
    size = len(token) + sum(len(variables[name]) - len(m.group(0)) for m in re.finditer(pattern, token)
                            if (name := m.group(1) or m.group(2)) in variables)
    if size > MAX_EXPANDED:
        raise SpecError(f"{source}: {shown(token)} expands to {size:,} characters, more than {MAX_EXPANDED:,} "
                        f"(1 MiB); a launch's variables expand to a few kilobytes")
    return re.sub(pattern, lambda m: variables.get(m.group(1) or m.group(2), m.group(0)), token)


def launch_tokens(text: str, source: str) -> list[str]:
    """The tokens of a launch command or script, with variables substituted and bash array
    syntax and assignments taken out (see the module docstring)."""
    try:
        raw = shlex.split(re.sub(r"\\\r?\n", " ", text), comments=True)
    except ValueError as exc:
        raise SpecError(f"{source}: cannot split the arguments into words ({exc})") from None
    variables: dict[str, str] = {}
    tokens: list[str] = []
    for token in raw:
        assign = re.fullmatch(r"([A-Za-z_]\w*)=(.*)", token, re.S)
        if assign:
            name, value = assign.groups()
            if value.startswith("("):  # NAME=( item ...: the items follow as tokens
                tokens += [value[1:]] if value[1:] else []
            else:
                variables[name] = _expand(value, variables, source)
            continue
        if token in ("(", ")", "export") or re.search(r"\[[@*]\]", token):
            continue
        tokens.append(_expand(token.rstrip(")") if token.endswith(")") else token, variables, source))
        if sum(map(len, tokens)) > MAX_EXPANDED:
            raise SpecError(f"{source}: the arguments expand to more than {MAX_EXPANDED:,} characters (1 MiB)")
    return [t for t in tokens if t]


def _parse(tokens: list[str]) -> dict[str, list[str]]:
    """Each ``--flag`` with the values after it (``--flag=value`` too); a switch takes none."""
    flags: dict[str, list[str]] = {}
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if not token.startswith("--"):
            continue  # a program name (torchrun, pretrain_gpt.py) or a value nobody took
        name, eq, inline = token.partition("=")
        values = [inline] if eq else []
        if not eq and name not in SWITCHES and name not in UNSUPPORTED:
            # values up to the next flag or the program torchrun starts (pretrain_gpt.py)
            while i < len(tokens) and not tokens[i].startswith("--") and not tokens[i].endswith(".py"):
                values.append(tokens[i])
                i += 1
        flags[name] = values
    return flags


def _given(values: list[str]) -> str:
    """What a flag was given, for an error: no value, its value, or its several values."""
    if not values:
        return "(no value)"
    return shown(values[0]) if len(values) == 1 else f"{shown(' '.join(values))} ({len(values)} values)"


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except OSError:  # a name too long for the filesystem: arguments
        return False


class _Launch(JobReader):
    """A Megatron-LM launch being read."""

    def __init__(self, text_or_path: str, flags: Mapping[str, Any]):
        path = Path(text_or_path)
        is_file = not text_or_path.lstrip().startswith("-") and "\n" not in text_or_path and _is_file(path)
        super().__init__("Megatron-LM", str(path) if is_file else "arguments", flags)
        text = read_text(path, f"--from-megatron {path}") if is_file else text_or_path
        self.args = _parse(launch_tokens(text, self.source))
        if not self.args:
            raise SpecError(f"--from-megatron {text_or_path[:60]!r}: neither a file nor Megatron-LM arguments "
                            f"(--tensor-model-parallel-size 8 ...)")

    def number(self, flag: str, default: int | None = None) -> int | None:
        """The integer value of ``flag``, or ``default`` when it is not given; it must be one
        whole number, at least 1 unless the flag may be 0 (:data:`MAY_BE_ZERO`)."""
        if flag not in self.args:
            return default
        values = self.args[flag]
        if len(values) != 1 or not re.fullmatch(r"\d+", values[0]):
            raise SpecError(f"{self.source}: {flag} {_given(values)}: expected a whole number"
                            + ("; expand the shell variable first" if values and "$" in values[0] else ""))
        least = 0 if flag in MAY_BE_ZERO else 1
        if int(values[0]) < least:
            raise SpecError(f"{self.source}: {flag} {values[0]}: must be at least {least}")
        return int(values[0])

    def text(self, flag: str, default: str | None = None) -> str | None:
        """The value of text flag ``flag`` (one of its :data:`CHOICES`), or ``default`` when it
        is not given."""
        if flag not in self.args:
            return default
        values = self.args[flag]
        if len(values) != 1:
            choices = CHOICES.get(flag)
            raise SpecError(f"{self.source}: {flag} {_given(values)}: expected one value"
                            + (f" ({', '.join(choices)})" if choices else ""))
        if flag in CHOICES and values[0] not in CHOICES[flag]:
            raise SpecError(f"{self.source}: {flag} {shown(values[0])}: must be one of {', '.join(CHOICES[flag])}")
        return values[0]


def _classify(job: _Launch) -> None:
    """Name each flag ignored or unsupported; check the value of each flag simtrain reads (even
    one whose value a setting of the command line replaces)."""
    known = (*SETTING_FLAGS, *MOE_FLAGS, *MODEL_FLAGS, *INT_FLAGS, *TEXT_FLAGS, *LIST_FLAGS, *SWITCHES)
    for flag in job.args:
        if flag in TEXT_FLAGS:
            job.text(flag)
        elif flag in known and flag not in SWITCHES and flag not in LIST_FLAGS:
            job.number(flag)
        if flag in UNSUPPORTED:
            job.unsupported(flag, UNSUPPORTED[flag])
        elif flag not in known:
            if flag.startswith(IGNORED_PREFIXES):
                job.ignore(flag)
            else:
                job.unsupported(flag, "not a Megatron-LM flag simtrain knows")


def _model_and_layout(job: _Launch) -> None:
    arch = {field: job.number(flag) for flag, field in MODEL_FLAGS.items() if flag in job.args}
    if "--group-query-attention" not in job.args and "heads" in arch:
        arch["kv_heads"] = arch["heads"]  # Megatron-LM reads --num-query-groups only with GQA
    if arch and job.flags.get("model") is None:
        arch.update(gated_mlp="--swiglu" in job.args, num_experts=arch.get("num_experts", 0))
        try:
            job.set("model", match_model(arch))
        except SpecError as exc:
            job.unsupported("the model flags", str(exc), decides=("model",))
    for flag, name in SETTING_FLAGS.items():
        if flag in job.args:
            job.set(name, job.number(flag))
    for name, default in (("tp", 1), ("pp", 1), ("cp", 1), ("mbs", 1)):
        job.set_default(name, default)
    if job.model().is_moe:
        job.update({name: job.number(flag) for flag, name in MOE_FLAGS.items() if flag in job.args})
    nodes, per_node = job.number("--nnodes"), job.number("--nproc_per_node", job.number("--nproc-per-node"))
    if per_node is not None:
        job.set("gpus", per_node * (nodes or 1))
    gpus, inner = job.value("gpus"), job.value("tp") * job.value("pp") * job.value("cp")
    job.set_default("gbs", job.value("mbs") * max(gpus // inner, 1))
    if "--use-tp-pp-dp-mapping" in job.args:
        job.set("order", "tp-cp-ep-pp-dp")
    vpp = job.number("--num-virtual-stages-per-pipeline-rank")
    per_chunk = job.number("--num-layers-per-virtual-pipeline-stage")
    if per_chunk is not None:
        layers, pp = job.model().layers, job.value("pp")
        per_stage = layers // pp
        if per_stage % per_chunk:
            fits = [n for n in range(1, per_stage + 1) if per_stage % n == 0]
            raise SpecError(f"{job.source}: --num-layers-per-virtual-pipeline-stage {per_chunk}: must divide the "
                            f"{per_stage} layers per pipeline stage ({layers} layers over pp={pp}; valid: "
                            f"{', '.join(map(str, fits[:12]))}{', ...' if len(fits) > 12 else ''})")
        vpp = per_stage // per_chunk
    if "--pipeline-model-parallel-layout" in job.args:
        vpp = apply_layout(job, str(job.text("--pipeline-model-parallel-layout")), job.args,
                           job.number("--mtp-num-layers"), vpp)
    job.set("vpp", vpp or 1)
    job.set("schedule", "interleaved-1f1b" if (vpp or 1) > 1 else "1f1b")
    _dispatcher(job)
    model = job.model()
    if model.shared_experts:  # Megatron-LM runs them after the combine unless told otherwise
        job.set("moe_shared_expert_overlap", "--moe-shared-expert-overlap" in job.args)
    if model.is_moe and "--moe-grouped-gemm" not in job.args:
        job.unsupported("no --moe-grouped-gemm", "Megatron-LM then runs the local experts one after another "
                        "(SequentialMLP); simtrain runs TransformerEngine's grouped GEMM: add --moe-grouped-gemm")


def _dispatcher(job: _Launch) -> None:
    """Megatron-LM's token dispatcher: ``alltoall``, or ``flex`` with DeepEP as its backend
    (``--moe-enable-deepep``, or ``--moe-flex-dispatcher-backend deepep`` in later versions;
    ``megatron/core/transformer/moe/token_dispatcher.py``, ``MoEFlexTokenDispatcher``), which is
    simtrain's ``deepep``; any other is named unsupported."""
    dispatcher = job.text("--moe-token-dispatcher-type", "alltoall")
    backend = job.text("--moe-flex-dispatcher-backend", "deepep" if "--moe-enable-deepep" in job.args else None)
    if dispatcher == "flex" and backend == "deepep":
        job.set("moe_dispatcher", "deepep")
    elif dispatcher != "alltoall":
        given = f"--moe-token-dispatcher-type {dispatcher}" + (f" --moe-flex-dispatcher-backend {backend}"
                                                               if backend else "")
        job.unsupported(given, "simtrain dispatches tokens by all-to-all or by DeepEP (flex with "
                               "--moe-enable-deepep)")


#: Megatron FSDP's --data-parallel-sharding-strategy -> ZeRO stage.
FSDP_ZERO = {"no_shard": 0, "optim": 1, "optim_grads": 2, "optim_grads_params": 3}


def _memory(job: _Launch) -> None:
    job.set("sp", "--sequence-parallel" in job.args)
    zero = 1 if "--use-distributed-optimizer" in job.args else 0
    if "--use-torch-fsdp2" in job.args:
        zero = 3
    elif "--use-custom-fsdp" in job.args or "--use-megatron-fsdp" in job.args:
        strategy = job.text("--data-parallel-sharding-strategy", "optim_grads_params")
        if strategy not in FSDP_ZERO:
            raise SpecError(f"{job.source}: --data-parallel-sharding-strategy {strategy}: must be one of "
                            f"{', '.join(FSDP_ZERO)}")
        zero = FSDP_ZERO[strategy]
    job.set("zero", zero)
    job.set("grad_dtype", "bf16" if "--grad-reduce-in-bf16" in job.args else "fp32")
    job.set("overlap_grad_reduce", "--overlap-grad-reduce" in job.args)
    if zero in (1, 2):
        job.set("overlap_param_gather", "--overlap-param-gather" in job.args)
    job.set("overlap_p2p_comm", "--no-overlap-p2p-communication" not in job.args)
    job.set("rope_fusion", "--no-rope-fusion" not in job.args)
    if "--fp8-format" in job.args:
        job.set("fp8", True)
    job.update({name: True for flag, name in SWITCH_SETTINGS.items() if flag in job.args})
    if job.value("tp_comm_overlap") and job.value("tp") > 1 and not job.value("sp"):
        # Megatron-LM's argument check (megatron/training/arguments.py) and simtrain's own
        raise SpecError(f"{job.source}: --tp-comm-overlap needs sequence parallelism (add --sequence-parallel)")
    backend = job.text("--attention-backend", "auto")
    if backend in ("unfused", "local"):
        job.set("attention", "eager")
    elif backend not in ("auto", "flash", "fused"):
        raise SpecError(f"{job.source}: --attention-backend {backend}: must be auto, flash, fused, unfused or "
                        f"local")
    selective = "selective" if "--recompute-activations" in job.args else None
    granularity = job.text("--recompute-granularity", selective)
    method = job.text("--recompute-method")
    if granularity == "full":
        job.set("recompute", job.number("--recompute-num-layers", 1) if method == "block" else "full")
    elif granularity in ("selective", None):
        job.set("recompute", granularity or "none")
    else:
        raise SpecError(f"{job.source}: --recompute-granularity {granularity}: must be full or selective")
    modules = job.args.get("--recompute-modules")
    if modules is not None:
        if granularity != "selective" or not modules:
            raise SpecError(f"{job.source}: --recompute-modules {' '.join(modules)!r}: needs module names and "
                            f"--recompute-granularity selective (given: {granularity or 'none'})")
        job.set("recompute_modules", ",".join(modules))


def from_megatron(text_or_path: str, flags: Mapping[str, Any] | None = None) -> Imported:
    """The simtrain settings of a Megatron-LM launch: a file (a launch script or a file of
    arguments) or the arguments themselves (see the module docstring); ``flags`` are the
    settings given on the command line, which take precedence.

    >>> job = from_megatron("--tensor-model-parallel-size 8 --pipeline-model-parallel-size 4 "
    ...                     "--num-layers 80 --hidden-size 8192 --num-attention-heads 64 --group-query-attention "
    ...                     "--num-query-groups 8 --swiglu --micro-batch-size 1 --global-batch-size 512 "
    ...                     "--seq-length 8192 --sequence-parallel")
    >>> job.pick("model", "tp", "pp", "gbs", "sp", "zero")
    {'model': 'llama3-70b', 'tp': 8, 'pp': 4, 'gbs': 512, 'sp': True, 'zero': 0}
    """
    job = _Launch(text_or_path, flags or {})
    _classify(job)
    _model_and_layout(job)
    _memory(job)
    return job.result()
