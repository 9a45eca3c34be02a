"""A torchtitan job TOML as simtrain settings (torchtitan's ``torchtitan/config/job_config.py``).

The keys read, with torchtitan's defaults where the file leaves one out:

* ``[model] name, flavor``: the model preset (llama3 8B/70B/405B, deepseek_v3 671B, qwen3
  235B-A22B); ``converters``: float8 (FP8 linear layers); MX cannot be simulated.
* ``[parallelism]``: ``tensor/pipeline/context_parallel_degree``; ``data_parallel_replicate_degree``
  and ``data_parallel_shard_degree`` (-1: the ranks left over, out of ``--gpus``) give the GPU
  count and the data-parallel degree; FSDP (a shard degree or CP above 1) is ZeRO-3, or ZeRO-2
  when ``fsdp_reshard_after_forward`` keeps the gathered weights (``never``, or ``default`` with
  PP, torchtitan's rule); plain replication (DDP) is ZeRO-0; HSDP (both degrees above 1) shards
  within a group simtrain does not model. ``expert_parallel_degree`` and
  ``expert_tensor_parallel_degree`` apply to MoE models only, as in torchtitan.
  ``pipeline_parallel_schedule`` (torch.distributed.pipelining's names: 1F1B, GPipe,
  Interleaved1F1B, ZBVZeroBubble, DualPipeV) or ``pipeline_parallel_schedule_csv`` (the same CSV
  format simtrain reads), ``pipeline_parallel_layers_per_stage`` (stages per rank) and the layer
  split of torchtitan's ``generate_llm_fqn_per_model_part`` (``pipeline_parallel_first/last_stage
  _less_layers``, at least 0) or ``module_fqns_per_model_part`` (lists of module names, one per stage,
  that hold every ``layers.N`` exactly once); ``pipeline_parallel_microbatch_size``. Degrees and
  sizes are at least 1 (or -1 where torchtitan gives -1 a meaning).
* ``[training] local_batch_size`` (or its older name ``batch_size``, not both), ``global_batch_size``,
  ``seq_len``: per-rank batch, global batch (-1:
  local x DP), sequence length; without PP a rank runs its local batch at once (one micro-batch of
  ``local_batch_size`` sequences per gradient-accumulation step).
* ``[activation_checkpoint] mode, selective_ac_option``: none, full, selective per op (simtrain's
  selective recompute) or every N-th layer (that share of each chunk's layers fully recomputed).

Sections about logging, checkpoints, data, the optimizer's hyper-parameters, validation and
compilation are ignored; unknown keys of the four sections above are errors.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from simtrain.errors import SpecError
from simtrain.importers.job import Imported, JobReader, stage_split
from simtrain.specs.strict import check_value, read_toml, shown

#: (torchtitan model name, flavor) -> simtrain model preset.
MODELS = {("llama3", "8b"): "llama3-8b", ("llama3", "70b"): "llama3-70b", ("llama3", "405b"): "llama3-405b",
          ("deepseek_v3", "671b"): "deepseek-v3", ("qwen3", "235b-a22b"): "qwen3-235b-a22b"}

#: torch.distributed.pipelining schedule names (lower case, as ``get_schedule_class`` compares
#: them) -> simtrain schedule; GPipe and 1F1B hold one stage per rank, the others two or more.
SCHEDULES = {"gpipe": "gpipe", "1f1b": "1f1b", "interleaved1f1b": "interleaved-1f1b", "zbvzerobubble": "zb-v",
             "dualpipev": "dualpipev"}
_SINGLE_STAGE = ("gpipe", "1f1b")
_V_SHAPED = ("zbvzerobubble", "dualpipev")

#: Sections with no effect on one simulated step.
IGNORED_SECTIONS = ("job", "profiling", "metrics", "optimizer", "lr_scheduler", "checkpoint", "comm", "validation",
                    "experimental", "memory_estimation", "float8", "mx", "compile", "fault_tolerance")

#: The keys of the sections that describe the step: read here, or ignored.
KEYS = {
    "model": {"read": ("name", "flavor", "converters"),
              "ignored": ("tokenizer_path", "hf_assets_path", "print_after_conversion")},
    "parallelism": {"read": ("data_parallel_replicate_degree", "data_parallel_shard_degree",
                             "fsdp_reshard_after_forward", "tensor_parallel_degree", "pipeline_parallel_degree",
                             "context_parallel_degree", "expert_parallel_degree", "expert_tensor_parallel_degree",
                             "pipeline_parallel_schedule", "pipeline_parallel_schedule_csv",
                             "pipeline_parallel_microbatch_size", "pipeline_parallel_layers_per_stage",
                             "pipeline_parallel_first_stage_less_layers", "pipeline_parallel_last_stage_less_layers",
                             "module_fqns_per_model_part", "enable_async_tensor_parallel",
                             "context_parallel_rotate_method", "expert_parallel_comm_backend"),
                    "ignored": ("enable_compiled_autograd", "disable_loss_parallel", "context_parallel_load_balancer",
                                "pipeline_parallel_expert_parallel_overlap")},
    "training": {"read": ("local_batch_size", "batch_size", "global_batch_size", "seq_len", "enable_cpu_offload",
                          "mixed_precision_param", "dtype"),
                 "ignored": ("dataset", "dataset_path", "max_norm", "steps", "max_steps", "warmup_steps",
                             "mixed_precision_reduce", "gc_freq", "gc_debug", "seed", "deterministic", "dataloader",
                             "compile")},
    "activation_checkpoint": {"read": ("mode", "selective_ac_option"),
                              "ignored": ("per_op_sac_force_recompute_mm_shapes_by_fqns", "early_stop",
                                          "preserve_rng_state", "determinism_check", "debug")},
}


class _Job(JobReader):
    """A torchtitan job file being read."""

    def __init__(self, path: str | Path, flags: Mapping[str, Any]):
        super().__init__("torchtitan", str(path), flags)
        self.path = Path(path)
        self.data = read_toml(path)
        for name, table in self.data.items():
            if name in KEYS:
                if not isinstance(table, dict):
                    raise SpecError(f"{self.source}: [{name}] must be a table, got {table!r}")
                for key in table:
                    if key in KEYS[name]["ignored"]:
                        self.ignore(f"{name}.{key}")
                    elif key not in KEYS[name]["read"]:
                        self.unsupported(f"{name}.{key}", "not a torchtitan key simtrain knows")
            elif name == "fault_tolerance" and isinstance(table, dict) and table.get("enable"):
                self.unsupported("fault_tolerance.enable", "TorchFT replica groups")
            else:
                self.ignore(f"[{name}]")

    def get(self, section: str, key: str, kind: type | tuple[type, ...], default: Any, *,
            least: int | None = None, auto: str = "") -> Any:
        """``[section] key`` checked for type, or torchtitan's default; an integer must be at least
        ``least``, or -1 where ``auto`` says what -1 stands for."""
        table = self.data.get(section, {})
        if key not in table:
            return default
        value = check_value(f"{self.source}: {section}.{key}", table[key], kind)
        if least is not None and isinstance(value, int) and value < least and not (auto and value == -1):
            raise SpecError(f"{self.source}: {section}.{key} = {value}: must be "
                            + (f"-1 ({auto}) or at least {least}" if auto else f"at least {least}"))
        return value


def _model(job: _Job) -> None:
    name = job.get("model", "name", str, "llama3")
    flavor = job.get("model", "flavor", str, "debugmodel")
    preset = MODELS.get((name.lower(), flavor.lower()))
    if preset is None:
        job.unsupported(f"model.name = {name!r}, flavor = {flavor!r}", "no simtrain model preset; give --model",
                        decides=("model",))
    else:
        job.set("model", preset)
    converters = job.get("model", "converters", (list, str), [])
    converters = [converters] if isinstance(converters, str) else converters
    if "float8" in converters:
        job.set("fp8", True)
    other = [c for c in converters if c != "float8"]
    if other:
        job.unsupported(f"model.converters = {other!r}", "simtrain times BF16 and FP8 GEMMs")


def _layout(job: _Job) -> int:
    """Degrees, GPU count, ZeRO stage; returns the data-parallel degree."""
    get = job.get
    tp, pp, cp = (get("parallelism", f"{d}_parallel_degree", int, 1, least=1) for d in ("tensor", "pipeline",
                                                                                          "context"))
    replicate = get("parallelism", "data_parallel_replicate_degree", int, 1, least=1)
    shard = get("parallelism", "data_parallel_shard_degree", int, -1, least=1, auto="the ranks left over")
    job.update(tp=tp, pp=pp, cp=cp)
    tp, pp, cp = job.value("tp"), job.value("pp"), job.value("cp")  # a flag takes precedence
    if shard > 0:
        job.set("gpus", replicate * shard * cp * tp * pp)
    else:
        gpus, inner = job.value("gpus"), replicate * cp * tp * pp
        if gpus % inner:
            raise SpecError(f"{job.source}: parallelism.data_parallel_shard_degree = {shard} takes the ranks left "
                            f"over, but gpus={gpus} is not divisible by replicate*cp*tp*pp={inner}; give --gpus")
        shard = gpus // inner
    if replicate > 1 and shard > 1:
        job.unsupported(f"parallelism.data_parallel_replicate_degree = {replicate} with shard degree {shard}",
                        "HSDP shards within groups; simtrain's ZeRO shards over all data-parallel ranks",
                        decides=("zero",))
    policy = get("parallelism", "fsdp_reshard_after_forward", str, "default")
    if policy not in ("default", "always", "never"):
        raise SpecError(f"{job.source}: parallelism.fsdp_reshard_after_forward = {policy!r}: must be default, "
                        f"always or never")
    reshard = policy == "always" or (policy == "default" and pp == 1)
    job.set("zero", (3 if reshard else 2) if shard > 1 or cp > 1 else 0)
    ep = get("parallelism", "expert_parallel_degree", int, 1, least=1)
    etp = get("parallelism", "expert_tensor_parallel_degree", int, 1, least=1)
    if job.model().is_moe:
        job.update(ep=ep, etp=etp)
    elif ep > 1:
        job.ignore("parallelism.expert_parallel_degree (no effect on a dense model)")
    for key, fine, why in (("enable_async_tensor_parallel", False, "TP communication overlapped with GEMMs"),
                           ("context_parallel_rotate_method", "allgather", "all-to-all K/V exchange"),
                           ("expert_parallel_comm_backend", "standard", "DeepEP kernels")):
        value = get("parallelism", key, (bool, str), fine)
        if value != fine:
            job.unsupported(f"parallelism.{key} = {value!r}", why)
    return replicate * shard


def _fqn_parts(job: _Job) -> list[list[str]] | None:
    """``module_fqns_per_model_part``: lists of module names that hold every ``layers.N`` of the
    model exactly once (torchtitan's ``tok_embeddings``, ``norm`` and ``output`` may stand beside
    them); a :class:`SpecError` naming what is wrong otherwise."""
    parts = job.get("parallelism", "module_fqns_per_model_part", list, None)
    if parts is None:
        return None
    key = f"{job.source}: parallelism.module_fqns_per_model_part"
    if not parts or not all(isinstance(p, list) and p and all(isinstance(f, str) for f in p) for p in parts):
        raise SpecError(f"{key} = {shown(parts)}: must be a list of non-empty lists of module names, one per "
                        f"pipeline stage (e.g. [[\"tok_embeddings\", \"layers.0\"], [\"layers.1\", \"norm\", "
                        f"\"output\"]])")
    layers = job.model().layers
    seen: dict[int, int] = {}
    for stage, part in enumerate(parts):
        for fqn in part:
            if not fqn.startswith("layers."):
                continue
            index = fqn[len("layers."):]
            if not (index.isdigit() and int(index) < layers):
                raise SpecError(f"{key}: {shown(fqn)} in stage {stage}: the model has layers.0 to "
                                f"layers.{layers - 1}")
            if int(index) in seen:
                raise SpecError(f"{key}: {fqn} is in stage {seen[int(index)]} and stage {stage}; each layer "
                                f"belongs to one stage")
            seen[int(index)] = stage
    if len(seen) != layers:
        missing = [i for i in range(layers) if i not in seen]
        raise SpecError(f"{key}: covers {len(seen)} of the {layers} layers (missing layers.{missing[0]}"
                        f"{f' and {len(missing) - 1} more' if len(missing) > 1 else ''}); every layer must be in "
                        f"exactly one stage")
    return parts


def _layer_counts(job: _Job, stages: int) -> list[int] | None:
    """Layers per pipeline stage as torchtitan splits them."""
    layers = job.model().layers
    parts = _fqn_parts(job)
    if parts is not None:
        return [sum(1 for fqn in part if fqn.startswith("layers.")) for part in parts]
    first, last = _less_layers(job)
    effective = layers + first + last  # generate_llm_fqn_per_model_part
    per, extra = divmod(effective, stages)
    counts = [per + (s < extra) for s in range(stages)]
    counts[0] -= first
    counts[-1] -= last
    return counts if min(counts) > 0 else None


def _less_layers(job: _Job) -> tuple[int, int]:
    """``pipeline_parallel_first/last_stage_less_layers`` (torchtitan's input and output weights,
    which must be non-negative)."""
    return tuple(job.get("parallelism", f"pipeline_parallel_{end}_stage_less_layers", int, 1, least=0)
                 for end in ("first", "last"))


def _pipeline(job: _Job, pp: int) -> None:
    """Schedule, chunks per rank and the layer split."""
    name = job.get("parallelism", "pipeline_parallel_schedule", str, "1F1B")
    csv = job.get("parallelism", "pipeline_parallel_schedule_csv", str, "")
    _fqn_parts(job)  # checked whatever the schedule
    per_stage = job.get("parallelism", "pipeline_parallel_layers_per_stage", int, None, least=1)
    first, last = _less_layers(job)
    if pp == 1:
        job.set("schedule", "1f1b")
        return
    if csv:
        near = job.path.parent / csv
        job.set("schedule", str(near if near.is_file() else csv))
        return
    key = name.lower()
    if key not in SCHEDULES:
        job.unsupported(f"parallelism.pipeline_parallel_schedule = {name!r}",
                        f"simtrain runs {', '.join(SCHEDULES)} of torch's schedules", decides=("schedule",))
        return
    job.set("schedule", SCHEDULES[key])
    stages = (-(-(job.model().layers + first + last) // per_stage) if per_stage
              else pp * (1 if key in _SINGLE_STAGE else 2))
    per_rank = stages // pp
    if stages % pp or (key in _SINGLE_STAGE and per_rank != 1) or (key in _V_SHAPED and per_rank != 2) or \
            per_rank < 1:
        job.unsupported(f"parallelism.pipeline_parallel_layers_per_stage = {per_stage}",
                        f"{stages} stages over pp={pp} ranks do not suit {name}", decides=("schedule",))
        return
    if key == "interleaved1f1b":
        job.set("vpp", per_rank)
    counts = _layer_counts(job, stages)
    split = None if counts is None or len(counts) != stages else stage_split(counts)
    if split is None:
        job.unsupported("the pipeline layer split", f"{counts} layers per stage; simtrain splits the middle "
                        f"stages evenly (give --first-stage-layers and --last-stage-layers)",
                        decides=("first_stage_layers", "last_stage_layers"))
    else:
        job.update(split)


def _batch(job: _Job, dp: int, pp: int) -> None:
    training = job.data.get("training", {})
    if "local_batch_size" in training and "batch_size" in training:
        raise SpecError(f"{job.source}: training.local_batch_size = {shown(training['local_batch_size'])} and "
                        f"training.batch_size = {shown(training['batch_size'])}: give one (batch_size is "
                        f"torchtitan's older name of local_batch_size)")
    local = job.get("training", "local_batch_size", int, job.get("training", "batch_size", int, 8, least=1), least=1)
    global_batch = job.get("training", "global_batch_size", int, -1, least=1, auto="local_batch_size x DP")
    micro = job.get("parallelism", "pipeline_parallel_microbatch_size", int, 1, least=1)
    gbs = global_batch if global_batch > 0 else local * dp
    job.update(seq=job.get("training", "seq_len", int, 2048, least=1), gbs=gbs,
               mbs=micro if pp > 1 else local)
    if pp > 1 and gbs != local * dp:
        job.unsupported(f"training.global_batch_size = {gbs}", f"{gbs // max(local * dp, 1)} gradient-accumulation "
                        f"steps each run the pipeline schedule; simtrain runs one schedule per step",
                        decides=("gbs",))
    for key, fine, why in (("enable_cpu_offload", False, "FSDP CPU offload"),
                           ("mixed_precision_param", "bfloat16", "FP32 parameters in the forward"),
                           ("dtype", "float32", "training without FP32 master weights")):
        value = job.get("training", key, (bool, str), fine)
        if value != fine:
            job.unsupported(f"training.{key} = {value!r}", why)


def _recompute(job: _Job, pp: int) -> None:
    mode = job.get("activation_checkpoint", "mode", str, "selective")
    option = str(job.get("activation_checkpoint", "selective_ac_option", (str, int), "2"))
    if mode in ("none", "full"):
        job.set("recompute", mode)
    elif mode == "selective" and option == "op":
        job.set("recompute", "selective")
    elif mode == "selective" and option.isdigit() and int(option) >= 1:
        chunks = pp * job.value("vpp") * (2 if job.value("schedule") in ("zb-v", "dualpipev") else 1)
        every = int(option)  # torchtitan checkpoints every N-th block of a rank's model
        job.set("recompute", "full" if every == 1 else job.model().layers // chunks // every or "none")
    else:
        job.unsupported(f"activation_checkpoint.mode = {mode!r}, selective_ac_option = {option!r}",
                        "simtrain recomputes none, selective (attention), full or N layers per chunk",
                        decides=("recompute",))


def from_torchtitan(path: str | Path, flags: Mapping[str, Any] | None = None) -> Imported:
    """The simtrain settings of torchtitan job file ``path`` (see the module docstring); ``flags``
    are the settings given on the command line, which take precedence.

    >>> job = from_torchtitan("tests/data/jobs/torchtitan_llama3_70b.toml")
    >>> job.pick("model", "tp", "pp", "zero", "recompute")
    {'model': 'llama3-70b', 'tp': 8, 'pp': 4, 'zero': 2, 'recompute': 'selective'}
    """
    job = _Job(path, flags or {})
    _model(job)
    dp = _layout(job)
    pp = job.own("pp")
    _pipeline(job, pp)
    _batch(job, dp, pp)
    _recompute(job, pp)
    return job.result()
