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

from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TypeAlias, overload

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
#: The columns held as typed arrays (``array`` type codes: 64-bit integers, doubles); the others
#: (name, comm, key, deps) are lists of Python objects.
TYPED = {"rank": "q", "stream": "q", "kind": "q", "stage": "q", "layer": "q", "mb": "q", "duration_s": "d",
         "flops": "d", "nbytes": "d", "group_set": "q", "peer": "q", "peer_stage": "q", "alloc": "d", "free": "d"}


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


def op_label(rank: int, stream: int, name: str, mb: int, layer: int, stage: int) -> str:
    """How an error message names an op: rank, stream, name, micro-batch, layer and stage."""
    mb_text = f" mb{mb}" if mb >= 0 else ""
    layer_text = f" layer {layer}" if layer >= 0 else ""
    return f"rank {rank} {STREAMS[stream]}: {name}{mb_text}{layer_text} (stage {stage})"


class OpTable:
    """A program's ops as columns: one list per field of :data:`FIELDS`, indexed by op id.

    The lowering appends rows (:meth:`append`, and whole template copies by extending every
    column); the engine and the timeline read the columns. Numbers are held in typed arrays
    (:data:`TYPED`: 8 bytes a value, read by numpy without a copy), so a row costs about 110
    bytes plus its dependency list and, for a collective, its key. Indexing gives an :class:`OpRef`, a
    view of one row whose attributes read and write the columns, for code that handles one op
    at a time (its dependency list is the column's own list, so appending to it is seen).
    """

    __slots__ = FIELDS
    # the columns, one per field (created in __init__)
    rank: array[int]
    stream: array[int]
    kind: array[int]
    name: list[str]
    stage: array[int]
    layer: array[int]
    mb: array[int]
    duration_s: array[float]
    flops: array[float]
    nbytes: array[float]
    comm: list[str | None]
    group_set: array[int]
    key: list[Key | None]
    peer: array[int]
    peer_stage: array[int]
    deps: list[list[int]]
    alloc: array[float]
    free: array[float]

    def __init__(self) -> None:
        for f in FIELDS:
            code = TYPED.get(f)
            setattr(self, f, array(code) if code else [])

    def __len__(self) -> int:
        return len(self.rank)

    @overload
    def __getitem__(self, i: int) -> OpRef: ...
    @overload
    def __getitem__(self, i: slice) -> list[OpRef]: ...

    def __getitem__(self, i: int | slice) -> OpRef | list[OpRef]:
        n = len(self.rank)
        if isinstance(i, slice):
            return [OpRef(self, j) for j in range(*i.indices(n))]
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"op {i} of {n}")
        return OpRef(self, i)

    def __iter__(self) -> Iterator[OpRef]:
        return (OpRef(self, i) for i in range(len(self.rank)))

    def append(self, rank: int, stream: int, kind: int, name: str, stage: int, layer: int, mb: int,
               duration_s: float, flops: float, nbytes: float, comm: str | None, group_set: int, key: Key | None,
               peer: int, peer_stage: int, deps: list[int], alloc: float, free: float) -> int:
        """Append one row; its op id."""
        i = len(self.rank)
        self.rank.append(rank)
        self.stream.append(stream)
        self.kind.append(kind)
        self.name.append(name)
        self.stage.append(stage)
        self.layer.append(layer)
        self.mb.append(mb)
        self.duration_s.append(duration_s)
        self.flops.append(flops)
        self.nbytes.append(nbytes)
        self.comm.append(comm)
        self.group_set.append(group_set)
        self.key.append(key)
        self.peer.append(peer)
        self.peer_stage.append(peer_stage)
        self.deps.append(deps)
        self.alloc.append(alloc)
        self.free.append(free)
        return i


class OpRef:
    """One row of an :class:`OpTable`, with the attributes of an :class:`Op` (read and written
    through to the columns)."""

    __slots__ = ("table", "id")

    def __init__(self, table: OpTable, i: int) -> None:
        self.table, self.id = table, i

    def label(self) -> str:
        t, i = self.table, self.id
        return op_label(t.rank[i], t.stream[i], t.name[i], t.mb[i], t.layer[i], t.stage[i])

    def __repr__(self) -> str:
        return f"OpRef({self.id}: {self.label()})"

    # one property per column of the table, read and written through
    @property
    def rank(self) -> int:
        return self.table.rank[self.id]

    @rank.setter
    def rank(self, value: int) -> None:
        self.table.rank[self.id] = value

    @property
    def stream(self) -> int:
        return self.table.stream[self.id]

    @stream.setter
    def stream(self, value: int) -> None:
        self.table.stream[self.id] = value

    @property
    def kind(self) -> int:
        return self.table.kind[self.id]

    @kind.setter
    def kind(self, value: int) -> None:
        self.table.kind[self.id] = value

    @property
    def name(self) -> str:
        return self.table.name[self.id]

    @name.setter
    def name(self, value: str) -> None:
        self.table.name[self.id] = value

    @property
    def stage(self) -> int:
        return self.table.stage[self.id]

    @stage.setter
    def stage(self, value: int) -> None:
        self.table.stage[self.id] = value

    @property
    def layer(self) -> int:
        return self.table.layer[self.id]

    @layer.setter
    def layer(self, value: int) -> None:
        self.table.layer[self.id] = value

    @property
    def mb(self) -> int:
        return self.table.mb[self.id]

    @mb.setter
    def mb(self, value: int) -> None:
        self.table.mb[self.id] = value

    @property
    def duration_s(self) -> float:
        return self.table.duration_s[self.id]

    @duration_s.setter
    def duration_s(self, value: float) -> None:
        self.table.duration_s[self.id] = value

    @property
    def flops(self) -> float:
        return self.table.flops[self.id]

    @flops.setter
    def flops(self, value: float) -> None:
        self.table.flops[self.id] = value

    @property
    def nbytes(self) -> float:
        return self.table.nbytes[self.id]

    @nbytes.setter
    def nbytes(self, value: float) -> None:
        self.table.nbytes[self.id] = value

    @property
    def comm(self) -> str | None:
        return self.table.comm[self.id]

    @comm.setter
    def comm(self, value: str | None) -> None:
        self.table.comm[self.id] = value

    @property
    def group_set(self) -> int:
        return self.table.group_set[self.id]

    @group_set.setter
    def group_set(self, value: int) -> None:
        self.table.group_set[self.id] = value

    @property
    def key(self) -> Key | None:
        return self.table.key[self.id]

    @key.setter
    def key(self, value: Key | None) -> None:
        self.table.key[self.id] = value

    @property
    def peer(self) -> int:
        return self.table.peer[self.id]

    @peer.setter
    def peer(self, value: int) -> None:
        self.table.peer[self.id] = value

    @property
    def peer_stage(self) -> int:
        return self.table.peer_stage[self.id]

    @peer_stage.setter
    def peer_stage(self, value: int) -> None:
        self.table.peer_stage[self.id] = value

    @property
    def deps(self) -> list[int]:
        return self.table.deps[self.id]

    @deps.setter
    def deps(self, value: list[int]) -> None:
        self.table.deps[self.id] = value

    @property
    def alloc(self) -> float:
        return self.table.alloc[self.id]

    @alloc.setter
    def alloc(self, value: float) -> None:
        self.table.alloc[self.id] = value

    @property
    def free(self) -> float:
        return self.table.free[self.id]

    @free.setter
    def free(self, value: float) -> None:
        self.table.free[self.id] = value


#: An op as code that handles one at a time reads it: a record or a row of a table.
AnyOp: TypeAlias = Op | OpRef


@dataclass
class Program:
    """All operations of one simulated step."""

    ops: OpTable = field(default_factory=OpTable)
    order: dict[tuple[int, int], list[int]] = field(default_factory=dict)  # (rank, stream) -> op ids
    group_sets: list[tuple[tuple[int, ...], ...]] = field(default_factory=list)
    members: dict[Key, int] = field(default_factory=dict)  # collective key -> simulated members
    rank_weight: dict[int, int] = field(default_factory=dict)  # simulated rank -> ranks it stands for
    pipeline_rank_of: dict[int, int] = field(default_factory=dict)  # simulated rank -> its pipeline rank
    static_bytes: dict[int, float] = field(default_factory=dict)  # simulated rank -> static memory
    layers_per_chunk: list[int] = field(default_factory=list)  # layers of each pipeline chunk, in order
    kernel_sources: dict[str, int] = field(default_factory=dict)  # measured/interpolated/model -> distinct kernels
    _group_ids: dict[tuple[tuple[int, ...], ...], int] = field(default_factory=dict, repr=False)

    def add(self, op: Op) -> OpRef:
        """Append ``op`` (a record; its ``id`` is ignored) to its rank's stream; the new row."""
        return OpRef(self.ops, self.append(*(getattr(op, f) for f in FIELDS)))

    def append(self, rank: int, stream: int, kind: int, name: str, stage: int, layer: int, mb: int,
               duration_s: float = 0.0, flops: float = 0.0, nbytes: float = 0.0, comm: str | None = None,
               group_set: int = -1, key: Key | None = None, peer: int = -1, peer_stage: int = -1,
               deps: list[int] | None = None, alloc: float = 0.0, free: float = 0.0) -> int:
        """Append an op (fields as :class:`Op` has them) to its rank's stream; its id."""
        i = self.ops.append(rank, stream, kind, name, stage, layer, mb, duration_s, flops, nbytes, comm, group_set,
                            key, peer, peer_stage, deps if deps is not None else [], alloc, free)
        queue = self.order.get((rank, stream))
        if queue is None:
            self.order[(rank, stream)] = [i]
        else:
            queue.append(i)
        if key is not None:
            self.members[key] = self.members.get(key, 0) + 1
        return i

    def group_set_id(self, groups: tuple[tuple[int, ...], ...]) -> int:
        gid = self._group_ids.get(groups)
        if gid is None:
            gid = self._group_ids[groups] = len(self.group_sets)
            self.group_sets.append(groups)
        return gid

    @property
    def ranks(self) -> list[int]:
        return sorted(self.rank_weight)
