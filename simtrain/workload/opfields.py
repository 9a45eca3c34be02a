"""The program vocabulary: a rank's streams, op kinds, collective keys and an op's fields.

The lowering, the engine, the timeline, the metrics and the outputs share it: the kinds of ops
are those of the spans they become; the fields are how an op table holds an op (typed columns,
codes in a vocabulary); :func:`op_label` is how an error names an op.
"""

from __future__ import annotations

from typing import TypeAlias

#: The streams of one rank: one compute stream and the communication streams (PP has two).
STREAMS = ("compute", "tp", "cp", "ep", "pp_send", "pp_recv", "dp")
#: Kinds of compute op: pass F, B (= I + W), I and W, R = recompute forward, opt = optimizer step.
COMPUTE_KINDS = ("F", "B", "I", "W", "R", "opt")
#: Kinds of communication op, by parallel dimension.
COMM_KINDS = ("tp", "cp", "ep", "pp", "dp")
#: Every op (and span) kind.
KINDS = COMPUTE_KINDS + COMM_KINDS

#: Stream name -> the integer code an :class:`Op` and a timeline column carry.
STREAM = {s: i for i, s in enumerate(STREAMS)}
#: Kind name -> the integer code an :class:`Op` and a timeline column carry.
KIND = {k: i for i, k in enumerate(KINDS)}

#: A numbered collective's key: (stream, its first group, group-set id or rank, its number on the stream).
StreamKey: TypeAlias = tuple[str, int | tuple[int, ...], int]
#: What a collective's members on different ranks share: a :data:`StreamKey`, or a one-off
#: collective's (name, step).
Key: TypeAlias = StreamKey | tuple[str, int]


#: The fields of an op, in the order :class:`Op` takes them; each is one column of :class:`OpTable`.
FIELDS = ("rank", "stream", "kind", "name", "stage", "layer", "mb", "duration_s", "flops", "nbytes", "comm",
          "group_set", "key", "peer", "peer_stage", "deps", "alloc", "free")
#: The fields an op table holds as codes in a vocabulary, and the column of each one's codes.
CODED = {"name": "name_code", "comm": "comm_code"}
#: The columns held as typed arrays (``array`` type codes: 32-bit and 8-bit integers, doubles);
#: ``key`` is a list of Python objects. Name and comm are held as codes (``name_code``,
#: ``comm_code``) in the table's vocabularies (:mod:`~simtrain.workload.vocab`). An op's
#: dependencies are the columns ``dep0`` and ``dep1`` (its first two, -1 where it has fewer) and,
#: for the few with more, a list in ``more`` (``dep0`` is then -2).
TYPED = {"rank": "i", "stream": "b", "kind": "b", "name_code": "i", "stage": "i", "layer": "i", "mb": "i",
         "duration_s": "d", "flops": "d", "nbytes": "d", "comm_code": "i", "group_set": "i", "peer": "i",
         "peer_stage": "i", "alloc": "d", "free": "d", "dep0": "i", "dep1": "i"}
#: The codes every table's comm vocabulary starts with: compute (no communication), point-to-point.
COMM_NONE, COMM_P2P = 0, 1
NONE, MORE = -1, -2  # dep0/dep1: no dependency; dep0: the op's dependencies are in ``more``


def op_label(rank: int, stream: int, name: str, mb: int, layer: int, stage: int) -> str:
    """How an error message names an op: rank, stream, name, micro-batch, layer and stage."""
    mb_text = f" mb{mb}" if mb >= 0 else ""
    layer_text = f" layer {layer}" if layer >= 0 else ""
    return f"rank {rank} {STREAMS[stream]}: {name}{mb_text}{layer_text} (stage {stage})"


__all__ = ["CODED", "COMM_KINDS", "COMM_NONE", "COMM_P2P", "COMPUTE_KINDS", "FIELDS", "KIND", "KINDS", "Key", "MORE",
           "NONE", "STREAM", "STREAMS", "StreamKey", "TYPED", "op_label"]
