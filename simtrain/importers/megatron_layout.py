"""Megatron-LM's ``--pipeline-model-parallel-layout`` as simtrain's pipeline split.

The layout names every model chunk's layers in order, chunks separated by ``|``: ``E`` the
embedding, ``t`` a decoder layer, ``m`` a multi-token prediction module, ``L`` the loss; ``x*n``
repeats one character and ``(...)*n`` a group, commas are cosmetic
(``megatron/core/transformer/pipeline_parallel_layer_layout.py``, ``parse_str_to_list``). The
chunks are listed in the chain's order, ``pp x vpp`` of them, so the layout also gives the
virtual stages per pipeline rank (``len / pp``). Megatron Bridge's DeepSeek-V3 on 1,024 H100s runs
``Et|(tt|)*30mL``: the embedding and one decoder layer, thirty chunks of two, then the MTP module
and the loss alone.

simtrain splits the decoder layers evenly over the middle chunks and takes the end chunks' counts
(``first_stage_layers``, ``last_stage_layers``), with the MTP modules after the last chunk's
layers: :func:`layout_settings` turns a layout of that shape into those settings and names, in one
line, what keeps any other from being simulated.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any

from simtrain.errors import SpecError
from simtrain.importers.job import JobReader
from simtrain.specs.strict import shown

#: The layout's layer characters (Megatron-LM's ``LayerType``).
LAYER_CHARS = "EtmL"


class LayoutError(ValueError):
    """A layout simtrain cannot simulate, or one Megatron-LM would refuse (the message says which)."""


def parse_layout(text: str) -> list[str]:
    """The chunks of a layout string, each as its layer characters: ``"Et*2|(tt|)*2mL"`` ->
    ``["Ett", "tt", "tt", "mL"]``."""
    flat = text.replace(",", "")
    flat = re.sub(r"\(([^)]+)\)\*(\d+)", lambda g: g.group(1) * int(g.group(2)), flat)
    flat = re.sub(r"(.)\*(\d+)", lambda g: g.group(1) * int(g.group(2)), flat)
    chunks = flat.split("|")
    bad = sorted({c for c in flat if c not in LAYER_CHARS + "|"})
    if bad:
        raise LayoutError(f"unknown layer character {', '.join(map(repr, bad))} (known: E embedding, "
                          f"t decoder layer, m MTP module, L loss; x*n and (...)*n repeat)")
    return chunks


def layout_settings(text: str, pp: int, layers: int, mtp_layers: int | None) -> dict[str, Any]:
    """``vpp``, ``first_stage_layers``, ``last_stage_layers`` and ``mtp_layers`` for layout
    ``text`` on ``pp`` pipeline ranks of a model of ``layers`` decoder layers (``mtp_layers`` as
    ``--mtp-num-layers`` gives it, or None); :class:`LayoutError` naming what does not fit."""
    chunks = parse_layout(text)
    if len(chunks) % pp:
        raise LayoutError(f"{len(chunks)} chunks do not divide over pp={pp} pipeline ranks")
    flat = "".join(chunks)
    if not chunks[0].startswith("E") or flat.count("E") != 1:
        raise LayoutError("the embedding (E) must open the first chunk, once")
    if not chunks[-1].endswith("L") or flat.count("L") != 1:
        raise LayoutError("the loss (L) must close the last chunk, once")
    if flat.count("t") != layers:
        raise LayoutError(f"{flat.count('t')} decoder layers (t), the model has {layers}")
    mtp = flat.count("m")
    if mtp_layers is not None and mtp != mtp_layers:
        raise LayoutError(f"{mtp} MTP modules (m) where --mtp-num-layers gives {mtp_layers}")
    if mtp and chunks[-1].count("m") != mtp:
        raise LayoutError("MTP modules (m) outside the last chunk; simtrain runs them after its decoder layers")
    counts = [c.count("t") for c in chunks]
    middle = set(counts[1:-1])
    if len(middle) > 1:
        raise LayoutError(f"the middle chunks hold {', '.join(map(str, sorted(middle)))} decoder layers; "
                          f"simtrain splits the layers evenly between the first and the last chunk")
    out: dict[str, Any] = {"vpp": len(chunks) // pp, "mtp_layers": mtp}
    if len(chunks) > 1:
        out.update(first_stage_layers=counts[0], last_stage_layers=counts[-1])
    return out


#: Megatron-LM's split flags that a layout replaces (it refuses them beside one).
SPLIT_FLAGS = ("--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers",
               "--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split")


def apply_layout(job: JobReader, text: str, args: Collection[str], mtp_layers: int | None,
                 vpp: int | None) -> int:
    """Set the split that layout ``text`` gives on ``job`` (a Megatron-LM launch whose flags are
    ``args``, ``vpp`` virtual stages per rank where its flags give them) and return the layout's
    virtual stages per pipeline rank; a :class:`SpecError` naming the layout for one that does not
    fit, beside a split flag it replaces or with another count of virtual stages."""
    flag = f"{job.source}: --pipeline-model-parallel-layout {shown(text)}"
    beside = [f for f in SPLIT_FLAGS if f in args]
    if beside:
        raise SpecError(f"{flag}: give the split either by the layout or by {', '.join(beside)}, not both")
    try:
        found = layout_settings(text, job.value("pp"), job.model().layers, mtp_layers)
    except LayoutError as exc:
        raise SpecError(f"{flag}: {exc}") from None
    if vpp is not None and vpp != found["vpp"]:
        raise SpecError(f"{flag}: {found['vpp']} chunks per pipeline rank where the virtual-stage flag gives {vpp}")
    for name in ("first_stage_layers", "last_stage_layers"):  # one chunk: no split to give
        if name in found:
            job.set(name, found[name])
    if found["mtp_layers"]:
        job.set("mtp_layers", found["mtp_layers"])
    return int(found["vpp"])
