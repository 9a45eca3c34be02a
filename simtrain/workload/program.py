"""Per-rank programs: the operations each simulated rank runs, on which stream, after what.

This is the interface between the workload lowering (:mod:`simtrain.workload.lower`) and the
engine (:mod:`simtrain.engine.simulator`): plain data, no simulation. The ops are held as columns
(:mod:`~simtrain.workload.optable`); the program vocabulary the timeline, the metrics and the
outputs share (streams, kinds, keys: :mod:`~simtrain.workload.opfields`) is imported from here too.

Vocabulary: a *stage* is a model chunk in the schedule IR; a *chunk* is the slice of layers a
stage holds; a *pipeline rank* is a position in the pipeline group (it runs one or more stages);
a *micro-batch* is one slice of the global batch; a *stream* is one of a rank's queues
(:data:`STREAMS`); an *op* is one entry of a program; a *span* is an op as it ran.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from typing import TypeAlias

from simtrain.workload.opfields import (
    CODED, COMM_KINDS, COMM_NONE, COMM_P2P, COMPUTE_KINDS, FIELDS, KIND, KINDS, MORE, NONE, STREAM, STREAMS, TYPED, Key,
    StreamKey, op_label)
from simtrain.workload.optable import OpRef, OpTable


class Op:
    """One operation of one rank, as a record (what :meth:`Program.add` appends).

    ``comm`` is None for compute (which then lasts ``duration_s``), a collective name
    (``all_reduce``, ``reduce_scatter``, ``all_gather``, ``all_to_all``) or ``"p2p"``.
    Collective members on different ranks share ``key``; ``group_set`` indexes
    :attr:`Program.group_sets`: the GPU groups this op stands for (one group, or every group a
    folded representative represents; the slowest decides). A p2p op is owned by the sender and
    occupies the receiver rank ``peer``'s ``pp_recv`` stream while it runs; ``peer_stage`` is the
    schedule stage it delivers to. ``stage``, ``layer`` and ``mb`` are -1 where they do not apply.
    ``flops`` and ``nbytes`` are the op's work (FLOPs, bytes moved); ``alloc`` and ``free`` are
    bytes of memory a compute op allocates when it starts and frees when it ends.
    """

    __slots__ = ("id",) + FIELDS

    def __init__(self, id: int, rank: int, stream: int, kind: int, name: str, stage: int,
                 layer: int, mb: int, duration_s: float = 0.0, flops: float = 0.0,
                 nbytes: float = 0.0, comm: str | None = None, group_set: int = -1,
                 key: Key | None = None, peer: int = -1, peer_stage: int = -1, deps: list[int] | None = None,
                 alloc: float = 0.0, free: float = 0.0) -> None:
        self.id = id
        self.rank = rank
        self.stream = stream
        self.kind = kind
        self.name = name
        self.stage = stage
        self.layer = layer
        self.mb = mb
        self.duration_s = duration_s
        self.flops = flops
        self.nbytes = nbytes
        self.comm = comm
        self.group_set = group_set
        self.key = key
        self.peer = peer
        self.peer_stage = peer_stage
        self.deps = deps if deps is not None else []
        self.alloc = alloc
        self.free = free

    def label(self) -> str:
        return op_label(self.rank, self.stream, self.name, self.mb, self.layer, self.stage)


#: An op as code that handles one at a time reads it: a record or a row of a table.
AnyOp: TypeAlias = Op | OpRef


@dataclass
class Program:
    """All operations of one simulated step."""

    ops: OpTable = field(default_factory=OpTable)
    order: dict[tuple[int, int], array[int]] = field(default_factory=dict)  # (rank, stream) -> op ids (int32)
    group_sets: list[tuple[tuple[int, ...], ...]] = field(default_factory=list)
    # collective key -> simulated members; a lowered program keeps only keys of several (absent: one)
    members: dict[Key, int] = field(default_factory=dict)
    rank_weight: dict[int, int] = field(default_factory=dict)  # simulated rank -> ranks it stands for
    pipeline_rank_of: dict[int, int] = field(default_factory=dict)  # simulated rank -> its pipeline rank
    static_bytes: dict[int, float] = field(default_factory=dict)  # simulated rank -> static memory
    layers_per_chunk: list[int] = field(default_factory=list)  # layers of each pipeline chunk, in order
    kernel_sources: dict[str, int] = field(default_factory=dict)  # measured/interpolated/model -> distinct kernels
    _group_ids: dict[tuple[tuple[int, ...], ...], int] = field(default_factory=dict, repr=False)
    _keys: dict[Key, Key] = field(default_factory=dict, repr=False)  # each key -> the one object held for it

    def add(self, op: Op) -> OpRef:
        """Append ``op`` (a record; its ``id`` is ignored) to its rank's stream; the new row."""
        return OpRef(self.ops, self.append(*(getattr(op, f) for f in FIELDS)))

    def append(self, rank: int, stream: int, kind: int, name: str, stage: int, layer: int, mb: int,
               duration_s: float = 0.0, flops: float = 0.0, nbytes: float = 0.0, comm: str | None = None,
               group_set: int = -1, key: Key | None = None, peer: int = -1, peer_stage: int = -1,
               deps: list[int] | None = None, alloc: float = 0.0, free: float = 0.0) -> int:
        """Append an op (fields as :class:`Op` has them) to its rank's stream; its id."""
        if key is not None:
            key = self._keys.setdefault(key, key)
        i = self.ops.append(rank, stream, kind, name, stage, layer, mb, duration_s, flops, nbytes, comm, group_set,
                            key, peer, peer_stage, deps if deps is not None else [], alloc, free)
        queue = self.order.get((rank, stream))
        if queue is None:
            self.order[(rank, stream)] = array("i", (i,))
        else:
            queue.append(i)
        if key is not None:
            self.members[key] = self.members.get(key, 0) + 1
        return i

    def shared_keys(self, keys: list[Key]) -> list[Key]:
        """``keys`` as the objects the program already holds for them (new ones are kept): the
        members of a collective on different ranks hold one key object, not one each (an
        unfolded run has millions of members, and each live tuple is walked by the cycle
        collector until it untracks it)."""
        return list(map(self._keys.setdefault, keys, keys))

    def forget_keys(self) -> None:
        """Drop the table of held keys (the ops keep theirs), once no more ops are coming."""
        self._keys = {}

    def group_set_id(self, groups: tuple[tuple[int, ...], ...]) -> int:
        gid = self._group_ids.get(groups)
        if gid is None:
            gid = self._group_ids[groups] = len(self.group_sets)
            self.group_sets.append(groups)
        return gid

    @property
    def ranks(self) -> list[int]:
        return sorted(self.rank_weight)


__all__ = ["AnyOp", "CODED", "COMM_KINDS", "COMM_NONE", "COMM_P2P", "COMPUTE_KINDS", "FIELDS", "KIND", "KINDS", "Key",
           "MORE", "NONE", "Op", "OpRef", "OpTable", "Program", "STREAM", "STREAMS", "StreamKey", "TYPED", "op_label"]
