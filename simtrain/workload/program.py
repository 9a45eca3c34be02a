"""Per-rank programs: the operations each simulated rank runs, on which stream, after what.

This is the interface between the workload lowering (:mod:`simtrain.workload.lower`) and the
engine (:mod:`simtrain.engine`): plain data, no simulation. It also holds the program vocabulary
that the timeline, the metrics and the outputs share: the streams of a rank and the kinds of its
ops (and so of the spans they become).

Vocabulary: a *stage* is a model chunk in the schedule IR; a *chunk* is the slice of layers a
stage holds; a *pipeline rank* is a position in the pipeline group (it runs one or more stages);
a *micro-batch* is one slice of the global batch; a *stream* is one of a rank's queues
(:data:`STREAMS`); an *op* is one entry of a program; a *span* is an op as it ran.
"""

from __future__ import annotations

from dataclasses import dataclass, field

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


class Op:
    """One operation of one rank.

    ``comm`` is None for compute (which then lasts ``duration_s``), a collective name
    (``all_reduce``, ``reduce_scatter``, ``all_gather``, ``all_to_all``) or ``"p2p"``.
    Collective members on different ranks share ``key``; ``group_set`` indexes
    :attr:`Program.group_sets`: the GPU groups this op stands for (one group, or every group a
    folded representative represents; the slowest decides). A p2p op is owned by the sender and
    occupies the receiver rank ``peer``'s ``pp_recv`` stream while it runs; ``peer_stage`` is the
    schedule stage it delivers to. ``stage``, ``layer`` and ``mb`` are -1 where they do not apply.
    """

    __slots__ = ("id", "rank", "stream", "kind", "name", "stage", "layer", "mb", "duration_s",
                 "flops", "nbytes", "comm", "group_set", "key", "peer", "peer_stage", "deps", "alloc", "free")

    def __init__(self, id: int, rank: int, stream: int, kind: int, name: str, stage: int,
                 layer: int, mb: int, duration_s: float = 0.0, flops: float = 0.0,
                 nbytes: float = 0.0, comm: str | None = None, group_set: int = -1,
                 key: tuple | None = None, peer: int = -1, peer_stage: int = -1, deps: list[int] | None = None,
                 alloc: float = 0.0, free: float = 0.0):
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
        mb = f" mb{self.mb}" if self.mb >= 0 else ""
        layer = f" layer {self.layer}" if self.layer >= 0 else ""
        return f"rank {self.rank} {STREAMS[self.stream]}: {self.name}{mb}{layer} (stage {self.stage})"


@dataclass
class Program:
    """All operations of one simulated step."""

    ops: list[Op] = field(default_factory=list)
    order: dict[tuple[int, int], list[int]] = field(default_factory=dict)  # (rank, stream) -> op ids
    group_sets: list[tuple[tuple[int, ...], ...]] = field(default_factory=list)
    members: dict[tuple, int] = field(default_factory=dict)  # collective key -> simulated members
    rank_weight: dict[int, int] = field(default_factory=dict)  # simulated rank -> ranks it stands for
    pipeline_rank_of: dict[int, int] = field(default_factory=dict)  # simulated rank -> its pipeline rank
    static_bytes: dict[int, float] = field(default_factory=dict)  # simulated rank -> static memory
    layers_per_chunk: list[int] = field(default_factory=list)  # layers of each pipeline chunk, in order
    kernel_sources: dict[str, int] = field(default_factory=dict)  # measured/interpolated/model -> distinct kernels
    _group_ids: dict = field(default_factory=dict, repr=False)

    def add(self, op: Op) -> Op:
        op.id = i = len(self.ops)
        self.ops.append(op)
        queue = self.order.get((op.rank, op.stream))
        if queue is None:
            self.order[(op.rank, op.stream)] = [i]
        else:
            queue.append(i)
        if op.key is not None:
            self.members[op.key] = self.members.get(op.key, 0) + 1
        return op

    def group_set_id(self, groups: tuple[tuple[int, ...], ...]) -> int:
        gid = self._group_ids.get(groups)
        if gid is None:
            gid = self._group_ids[groups] = len(self.group_sets)
            self.group_sets.append(groups)
        return gid

    @property
    def ranks(self) -> list[int]:
        return sorted(self.rank_weight)
