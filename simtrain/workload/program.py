"""Per-rank programs: the operations each simulated rank runs, on which stream, after what.

This is the interface between the workload lowering (:mod:`simtrain.workload.lower`) and the
engine (:mod:`simtrain.engine.simulator`): plain data, no simulation. It also holds the program vocabulary
that the timeline, the metrics and the outputs share: the streams of a rank and the kinds of its
ops (and so of the spans they become).

Vocabulary: a *stage* is a model chunk in the schedule IR; a *chunk* is the slice of layers a
stage holds; a *pipeline rank* is a position in the pipeline group (it runs one or more stages);
a *micro-batch* is one slice of the global batch; a *stream* is one of a rank's queues
(:data:`STREAMS`); an *op* is one entry of a program; a *span* is an op as it ran.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Generic, NoReturn, TypeAlias, TypeVar, overload

import numpy as np

T = TypeVar("T")

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
#: The columns held as typed arrays (``array`` type codes: 32-bit and 8-bit integers, doubles);
#: the others (name, comm, key) are lists of Python objects. An op's dependencies are the columns
#: ``dep0`` and ``dep1`` (its first two, -1 where it has fewer) and, for the few with more, a list
#: in ``more`` (``dep0`` is then -2).
TYPED = {"rank": "i", "stream": "b", "kind": "b", "stage": "i", "layer": "i", "mb": "i", "duration_s": "d",
         "flops": "d", "nbytes": "d", "group_set": "i", "peer": "i", "peer_stage": "i", "alloc": "d", "free": "d",
         "dep0": "i", "dep1": "i"}
_COLUMNS = tuple(f for f in FIELDS if f != "deps") + ("dep0", "dep1", "more")
_DTYPES = {"i": np.int32, "b": np.int8, "d": np.float64}
NONE, MORE = -1, -2  # dep0/dep1: no dependency; dep0: the op's dependencies are in ``more``


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
    """A program's ops as columns, indexed by op id: one per field of :data:`FIELDS`, the
    dependencies as :data:`TYPED` describes.

    The lowering appends rows (:meth:`append`, and whole template copies by extending every
    column); the engine and the timeline read the columns. Numbers are held in typed arrays, read
    by numpy without a copy (:meth:`column`), so a row costs about 100 bytes, plus its key for a
    collective. Indexing gives an :class:`OpRef`, a view of one row whose attributes read and
    write the columns, for code that handles one op at a time.
    """

    __slots__ = _COLUMNS
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
    dep0: array[int]
    dep1: array[int]
    more: dict[int, list[int]]
    alloc: array[float]
    free: array[float]

    def __init__(self) -> None:
        for f in _COLUMNS[:-1]:  # all but ``more``
            code = TYPED.get(f)
            setattr(self, f, array(code) if code else [])
        self.more: dict[int, list[int]] = {}

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

    def column(self, name: str) -> np.ndarray:
        """A typed column as a numpy array (a view of its buffer: copy it before the table grows)."""
        col = getattr(self, name)
        return np.frombuffer(col, dtype=_DTYPES[col.typecode])

    def deps_of(self, i: int) -> list[int]:
        """Op ``i``'s dependencies, in the order they were given."""
        d0 = self.dep0[i]
        if d0 == MORE:
            return list(self.more[i])
        if d0 == NONE:
            return []
        d1 = self.dep1[i]
        return [d0] if d1 == NONE else [d0, d1]

    def add_dep(self, i: int, d: int) -> None:
        """Op ``i`` also waits for op ``d`` (after its other dependencies)."""
        d0 = self.dep0[i]
        if d0 == NONE:
            self.dep0[i] = d
        elif d0 == MORE:
            self.more[i].append(d)
        elif self.dep1[i] == NONE:
            self.dep1[i] = d
        else:
            self.more[i] = [d0, self.dep1[i], d]
            self.dep0[i], self.dep1[i] = MORE, NONE

    def set_deps(self, i: int, deps: list[int]) -> None:
        """Op ``i``'s dependencies become ``deps``."""
        self.more.pop(i, None)
        self.dep0[i] = self.dep1[i] = NONE
        for d in deps:
            self.add_dep(i, d)

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
        n = len(deps)
        if n > 2:
            self.dep0.append(MORE)
            self.dep1.append(NONE)
            self.more[i] = list(deps)
        else:
            self.dep0.append(deps[0] if n else NONE)
            self.dep1.append(deps[1] if n == 2 else NONE)
        self.alloc.append(alloc)
        self.free.append(free)
        return i


class _Deps(list[int]):
    """An op's dependencies as :attr:`OpRef.deps` gives them: a list whose ``append`` and
    ``extend`` also add to the table (other changes are refused)."""

    __slots__ = ("_table", "_i")

    def __init__(self, table: OpTable, i: int):
        super().__init__(table.deps_of(i))
        self._table, self._i = table, i

    def append(self, d: int) -> None:
        super().append(d)
        self._table.add_dep(self._i, d)

    def extend(self, ds: Iterable[int]) -> None:
        for d in ds:
            self.append(d)

    def _refused(self, *_args: object, **_kw: object) -> NoReturn:
        raise TypeError("an op's dependencies only grow: use append or extend")

    insert = remove = pop = clear = sort = reverse = __setitem__ = __delitem__ = __iadd__ = _refused


class _Column(Generic[T]):
    """An attribute of :class:`OpRef` that reads and writes one column of its table."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, ref: None, owner: type | None = None) -> _Column[T]: ...

    @overload
    def __get__(self, ref: OpRef, owner: type | None = None) -> T: ...

    def __get__(self, ref: OpRef | None, owner: type | None = None) -> T | _Column[T]:
        if ref is None:  # looked up on the class
            return self
        value: T = getattr(ref.table, self.name)[ref.id]
        return value

    def __set__(self, ref: OpRef, value: T) -> None:
        getattr(ref.table, self.name)[ref.id] = value


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

    # one descriptor per column of the table, read and written through
    rank: _Column[int] = _Column()
    stream: _Column[int] = _Column()
    kind: _Column[int] = _Column()
    name: _Column[str] = _Column()
    stage: _Column[int] = _Column()
    layer: _Column[int] = _Column()
    mb: _Column[int] = _Column()
    duration_s: _Column[float] = _Column()
    flops: _Column[float] = _Column()
    nbytes: _Column[float] = _Column()
    comm: _Column[str | None] = _Column()
    group_set: _Column[int] = _Column()
    key: _Column[Key | None] = _Column()
    peer: _Column[int] = _Column()
    peer_stage: _Column[int] = _Column()
    alloc: _Column[float] = _Column()
    free: _Column[float] = _Column()

    @property
    def deps(self) -> list[int]:
        """The op's dependencies: a list whose ``append`` and ``extend`` add to the table."""
        return _Deps(self.table, self.id)

    @deps.setter
    def deps(self, value: list[int]) -> None:
        self.table.set_deps(self.id, list(value))


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
