"""How the layers split into pipeline chunks, and what each layer and chunk costs per pass.

Megatron-LM splits layers evenly unless ``--decoder-first-pipeline-num-layers`` /
``--decoder-last-pipeline-num-layers`` move some off the end stages, which also carry the
embedding and the LM head with its loss (the course notes' advice: put fewer layers there).
"""

from __future__ import annotations

from simtrain import costs
from simtrain.costs import Shape
from simtrain.errors import SpecError
from simtrain.specs.gpu import GpuSpec
from simtrain.specs.model import ModelSpec
from simtrain.specs.parallel import ParallelSpec
from simtrain.workload.options import WorkloadOptions


def chunk_layers(model: ModelSpec, chunks: int, first: int | None = None,
                 last: int | None = None) -> list[range]:
    """Layers of each model chunk: ``first`` and ``last`` layers on the end chunks when given,
    the rest split evenly (Megatron-LM's ``--decoder-first-pipeline-num-layers`` and
    ``--decoder-last-pipeline-num-layers``)."""
    L = model.layers
    if chunks == 1:
        return [range(L)]
    if first is None and last is None:
        if L % chunks:
            raise SpecError(f"the {L} layers of {model.name} do not split evenly into {chunks} "
                            f"pipeline chunks")
        per = L // chunks
        return [range(c * per, (c + 1) * per) for c in range(chunks)]
    middle_chunks = chunks - 2
    if first is None or last is None:
        rest = L - (first or 0) - (last or 0)
        n_rest = chunks - 1
        if rest < n_rest or rest % n_rest:
            raise SpecError(f"first_stage_layers={first}, last_stage_layers={last}: the other "
                            f"{rest} of {L} layers do not split evenly over {n_rest} chunks")
        per = rest // n_rest
        first = per if first is None else first
        last = per if last is None else last
    rest = L - first - last
    if middle_chunks == 0:
        if rest != 0:
            raise SpecError(f"first_stage_layers={first} + last_stage_layers={last} must equal the "
                            f"{L} layers of {model.name} with 2 pipeline chunks")
        return [range(0, first), range(first, L)]
    if rest < middle_chunks or rest % middle_chunks:
        raise SpecError(f"first_stage_layers={first}, last_stage_layers={last}: the remaining {rest} "
                        f"layers do not split evenly over the {middle_chunks} middle chunks")
    per = rest // middle_chunks
    bounds = [0, first] + [first + per * (i + 1) for i in range(middle_chunks)]
    return [range(bounds[i], bounds[i + 1]) for i in range(len(bounds) - 1)] + [range(L - last, L)]


def balanced_split(model: ModelSpec, chunks: int, layer_s: list[float], first_extra_s: float,
                   last_extra_s: float) -> tuple[int, int]:
    """(first, last) chunk layer counts that minimise the slowest chunk's time, where layer i
    costs ``layer_s[i]`` and the end chunks also carry the embedding (``first_extra_s``) and the
    LM head and loss (``last_extra_s``); ties go to the most even split."""
    L = model.layers
    best = None
    for first in range(1, L):
        for last in range(1, L - first + 1):
            try:
                split = chunk_layers(model, chunks, first, last)
            except SpecError:
                continue
            times = [sum(layer_s[i] for i in r) for r in split]
            times[0] += first_extra_s
            times[-1] += last_extra_s
            key = (max(times), max(len(r) for r in split) - min(len(r) for r in split), first, last)
            if best is None or key < best:
                best = key
    if best is None:
        raise SpecError(f"no split of the {L} layers of {model.name} over {chunks} chunks leaves the "
                        f"middle chunks even")
    return best[2], best[3]


def layer_pass_times(model: ModelSpec, par: ParallelSpec, gpu: GpuSpec) -> list[tuple[float, float, float]]:
    """(F, I, W) compute time of each layer for one micro-batch on one rank (communication excluded)."""
    sh = Shape.of(par)

    def t(kind: str, layer: int) -> float:
        return (costs.attention_cost(model, sh, kind).time_s(gpu)
                + costs.mlp_cost(model, sh, kind, layer).time_s(gpu))

    return [(t("F", i), t("I", i), t("W", i)) for i in range(model.layers)]


def end_pass_times(model: ModelSpec, par: ParallelSpec, gpu: GpuSpec, embedding: bool = True,
                   lm_head: bool = True) -> tuple[tuple[float, float, float], tuple[float, float, float]]:
    """(F, I, W) of the embedding (first chunk) and of the LM head and loss (last chunk)."""
    sh = Shape.of(par)
    emb = tuple(costs.embedding_cost(model, sh, k).time_s(gpu) if embedding else 0.0 for k in "FIW")
    head = tuple(costs.lm_head_cost(model, sh, k).time_s(gpu) if lm_head else 0.0 for k in "FIW")
    return emb, head  # type: ignore[return-value]


def chunk_pass_times(model: ModelSpec, par: ParallelSpec, gpu: GpuSpec, chunks: list[range],
                     embedding: bool = True, lm_head: bool = True) -> list[tuple[float, float, float]]:
    """(F, I, W) compute time of each model chunk for one micro-batch, communication excluded:
    the per-stage costs a cost-aware scheduler (zb-auto) plans with."""
    layers = layer_pass_times(model, par, gpu)
    emb, head = end_pass_times(model, par, gpu, embedding, lm_head)
    out = []
    for i, chunk in enumerate(chunks):
        f, i_, w = (sum(layers[j][k] for j in chunk) for k in range(3))
        if i == 0:
            f, i_, w = f + emb[0], i_ + emb[1], w + emb[2]
        if i == len(chunks) - 1:
            f, i_, w = f + head[0], i_ + head[1], w + head[2]
        out.append((f, i_, w))
    return out


def split_layers(model: ModelSpec, par: ParallelSpec, gpu: GpuSpec, chunks: int,
                 opts: WorkloadOptions | None = None) -> list[range]:
    """The layers of each of ``chunks`` model chunks under ``par``: balanced when asked
    (``balance_stages``), else the given first/last chunk sizes, else an even split."""
    opts = opts or WorkloadOptions()
    if par.balance_stages and chunks > 1:
        per_layer = [f + i + w for f, i, w in layer_pass_times(model, par, gpu)]
        emb, head = end_pass_times(model, par, gpu, opts.embedding, opts.lm_head)
        first, last = balanced_split(model, chunks, per_layer, sum(emb), sum(head))
        return chunk_layers(model, chunks, first, last)
    return chunk_layers(model, chunks, par.first_stage_layers, par.last_stage_layers)
