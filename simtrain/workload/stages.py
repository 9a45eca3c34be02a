"""How the layers split into pipeline chunks, and what each layer and chunk costs per pass.

Layers that divide evenly by the chunks split evenly. Otherwise they split the way torchtitan
does (``torchtitan/distributed/pipeline_parallel.py``, ``generate_llm_fqn_per_model_part`` with
``input_weight = output_weight = 1``): the embedding and the LM head with its loss each count as
one layer, the ``L + 2`` layer-equivalents are spread as evenly
as possible (the first chunks take one more where they do not divide), so the end chunks carry
one layer less. Llama 3 405B's 126 layers on 16 chunks become 7 + 14 x 8 + 7, as Llama 3 ran
them (arXiv:2407.21783, section 3.3.2). Megatron-LM's ``--decoder-first-pipeline-num-layers`` /
``--decoder-last-pipeline-num-layers`` (``--first-stage-layers``/``--last-stage-layers``)
override this, and ``--balance-stages`` picks the end chunks' sizes by their costs.

Multi-token prediction layers (``model.mtp_layers``, indices ``layers`` and up) are not part of
the split: they run on the last chunk after its decoder layers, as Megatron-Core builds the MTP
block on the last pipeline stage (``megatron/core/models/gpt/gpt_model.py``, ``mtp_process``).

With ``--account-for-embedding-in-pipeline-split`` and/or ``--account-for-loss-in-pipeline-split``
the split is Megatron-LM's always, even where the layers divide (:func:`accounted_split`,
after ``get_num_layers_to_build`` in ``megatron/core/transformer/transformer_block.py``): the
embedding takes one layer slot of the first chunk, the LM head and loss one of the last, and
every chunk gets ``(L + 2) / chunks`` slots, so an end chunk may hold no decoder layer at all.
"""

from __future__ import annotations

from itertools import groupby
from typing import cast

from simtrain import costs
from simtrain.costs import KernelTimer, Shape
from simtrain.errors import SpecError
from simtrain.specs.gpu import GpuSpec
from simtrain.specs.model import ModelSpec
from simtrain.specs.parallel import ParallelSpec
from simtrain.workload.options import WorkloadOptions


def auto_split(layers: int, chunks: int) -> list[int]:
    """Layers per chunk: even when ``chunks`` divides ``layers``, else torchtitan's split with
    the embedding and the LM head counted as one layer each (see the module docstring).

    >>> auto_split(126, 16)[:2], auto_split(126, 16)[-2:], len(auto_split(126, 16))
    ([7, 8], [8, 7], 16)
    """
    if layers % chunks == 0:
        return [layers // chunks] * chunks
    per, extra = divmod(layers + 2, chunks)
    sizes = [per + (1 if i < extra else 0) for i in range(chunks)]
    sizes[0] -= 1
    sizes[-1] -= 1
    if min(sizes) >= 1:
        return sizes
    per, extra = divmod(layers, chunks)  # too few layers to lighten the ends: middle chunks take the rest
    order = sorted(range(chunks), key=lambda i: (i in (0, chunks - 1), i))
    plus = set(order[:extra])
    return [per + (1 if i in plus else 0) for i in range(chunks)]


def accounted_split(layers: int, chunks: int, embedding: bool, loss: bool) -> list[int]:
    """Layers per chunk when the embedding (``embedding``) and the LM head with its loss
    (``loss``) each count as one layer slot of the first and the last chunk: the slots must divide
    evenly by the chunks, each chunk gets as many, the end chunks one layer fewer each
    (Megatron-LM, ``megatron/core/transformer/transformer_block.py``, ``get_num_layers_to_build``).

    >>> accounted_split(94, 32, True, True)[:2], accounted_split(94, 96, True, True)[:2]
    ([2, 3], [0, 1])
    """
    slots = layers + embedding + loss
    if slots % chunks:
        counted = " + ".join(["layers"] + ["embedding"] * embedding + ["loss"] * loss)
        valid = sorted(d for d in range(1, slots + 1) if slots % d == 0)
        raise SpecError(f"account_for_embedding_in_pipeline_split={embedding}, account_for_loss_in_pipeline_split="
                        f"{loss}: the {slots} layer slots ({counted}) do not divide by the {chunks} pipeline "
                        f"chunks (pp*vpp); valid chunk counts: {', '.join(map(str, valid))}")
    sizes = [slots // chunks] * chunks
    sizes[0] -= embedding
    sizes[-1] -= loss
    return sizes


def describe_split(sizes: list[int]) -> str:
    """Layers per chunk in words, runs of equal chunks folded: ``7 + 14 x 8 + 7``.

    >>> describe_split(auto_split(126, 16))
    '7 + 14 x 8 + 7'
    """
    parts = []
    for size, run in groupby(sizes):
        count = len(list(run))
        parts.append(f"{count} x {size}" if count > 1 else str(size))
    return " + ".join(parts)


def _ranges(sizes: list[int]) -> list[range]:
    out, start = [], 0
    for size in sizes:
        out.append(range(start, start + size))
        start += size
    return out


def chunk_layers(model: ModelSpec, chunks: int, first: int | None = None, last: int | None = None,
                 embedding: bool = False, loss: bool = False) -> list[range]:
    """Layers of each model chunk: ``first`` and ``last`` layers on the end chunks when given,
    the rest split evenly (Megatron-LM's ``--decoder-first-pipeline-num-layers`` and
    ``--decoder-last-pipeline-num-layers``); ``embedding`` or ``loss`` counted as a layer slot:
    :func:`accounted_split`; none given: :func:`auto_split`. The MTP layers follow the last
    chunk's decoder layers."""
    out = _decoder_chunks(model, chunks, first, last, embedding, loss)
    out[-1] = range(out[-1].start, model.total_layers)
    return out


def _decoder_chunks(model: ModelSpec, chunks: int, first: int | None, last: int | None,
                    embedding: bool, loss: bool) -> list[range]:
    """:func:`chunk_layers` of the decoder layers alone."""
    L = model.layers
    if chunks == 1:
        return [range(L)]
    if embedding or loss:
        return _ranges(accounted_split(L, chunks, embedding, loss))
    if first is None and last is None:
        return _ranges(auto_split(L, chunks))
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
    return _ranges([first] + [rest // middle_chunks] * middle_chunks + [last])


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


def layer_pass_times(model: ModelSpec, par: ParallelSpec, gpu: GpuSpec,
                     opts: WorkloadOptions | None = None) -> list[tuple[float, float, float]]:
    """(F, I, W) compute time of each layer for one micro-batch on one rank (communication
    excluded; MoE layers at uniform routing)."""
    sh = Shape.of(par)
    timer = KernelTimer(gpu, (opts or WorkloadOptions()).calibration)
    selective = par.recompute == "selective"

    def t(kind: str, layer: int) -> float:
        mlp = (costs.moe_cost(model, sh, kind, par.expert_tp, par.ep, dispatcher=par.moe_dispatcher)
               if model.is_moe_layer(layer) else costs.mlp_cost(model, sh, kind))
        return timer.time(costs.attention_cost(model, sh, kind, selective)) + timer.time(mlp)

    every = range(model.total_layers)
    per_kind: dict[tuple[str, bool], float | None] = {(kind, model.is_moe_layer(i)): None for kind in "FIW"
                                                       for i in every}
    for kind, moe in per_kind:
        first = next(i for i in every if model.is_moe_layer(i) == moe)
        per_kind[(kind, moe)] = t(kind, first)
    # every entry is timed by now; each tuple has the three of F, I and W
    return cast("list[tuple[float, float, float]]",
                [tuple(per_kind[(k, model.is_moe_layer(i))] for k in "FIW") for i in every])


def end_pass_times(model: ModelSpec, par: ParallelSpec, gpu: GpuSpec, opts: WorkloadOptions | None = None,
                   ) -> tuple[tuple[float, float, float], tuple[float, float, float]]:
    """(F, I, W) of the embedding (first chunk) and of the LM head and loss (last chunk)."""
    opts = opts or WorkloadOptions()
    sh = Shape.of(par)
    timer = KernelTimer(gpu, opts.calibration)
    emb = tuple(timer.time(costs.embedding_cost(model, sh, k)) if opts.embedding else 0.0 for k in "FIW")
    head = tuple(timer.time(costs.lm_head_cost(model, sh, k)) if opts.lm_head else 0.0 for k in "FIW")
    return cast("tuple[float, float, float]", emb), cast("tuple[float, float, float]", head)  # F, I and W


def chunk_pass_times(model: ModelSpec, par: ParallelSpec, gpu: GpuSpec, chunks: list[range],
                     opts: WorkloadOptions | None = None) -> list[tuple[float, float, float]]:
    """(F, I, W) compute time of each model chunk for one micro-batch, communication excluded:
    the per-stage costs a cost-aware scheduler (zb-auto) plans with."""
    layers = layer_pass_times(model, par, gpu, opts)
    emb, head = end_pass_times(model, par, gpu, opts)
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
    (``balance_stages``), else the given first/last chunk sizes, else Megatron-LM's split with the
    embedding and the loss accounted for where asked, else :func:`auto_split`."""
    opts = opts or WorkloadOptions()
    if par.balance_stages and chunks > 1:
        per_layer = [f + i + w for f, i, w in layer_pass_times(model, par, gpu, opts)]
        emb, head = end_pass_times(model, par, gpu, opts)
        first, last = balanced_split(model, chunks, per_layer, sum(emb), sum(head))
        return chunk_layers(model, chunks, first, last)
    return chunk_layers(model, chunks, par.first_stage_layers, par.last_stage_layers,
                        par.account_for_embedding_in_pipeline_split, par.account_for_loss_in_pipeline_split)
