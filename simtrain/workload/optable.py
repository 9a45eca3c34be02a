"""A program's ops as columns (:class:`OpTable`), and one row of it as an object (:class:`OpRef`)
whose attributes read and write the columns, for code that handles one op at a time.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator
from typing import Generic, NoReturn, TypeVar, overload

import numpy as np

from simtrain.workload.opfields import CODED, FIELDS, MORE, NONE, TYPED, Key, op_label
from simtrain.workload.vocab import Decoded, Vocabulary

T = TypeVar("T")
_COLUMNS = tuple(CODED.get(f, f) for f in FIELDS if f != "deps") + ("dep0", "dep1", "more")
_DTYPES = {"i": np.int32, "b": np.int8, "d": np.float64}


class OpTable:
    """A program's ops as columns, indexed by op id: one per field of :data:`FIELDS`, the
    dependencies as :data:`TYPED` describes.

    The lowering appends rows (:meth:`append`, and whole template copies by extending every
    column); the engine and the timeline read the columns. Numbers and the codes of names and
    comms are held in typed arrays, read by numpy without a copy (:meth:`column`), so a row costs
    about 100 bytes, plus its key for a collective. :attr:`name` and :attr:`comm` read the codes as
    their values. Indexing gives an :class:`OpRef`, a view of one row whose attributes read and
    write the columns, for code that handles one op at a time.
    """

    __slots__ = _COLUMNS + ("names", "comms")
    # the columns, one per field (created in __init__)
    rank: array[int]
    stream: array[int]
    kind: array[int]
    name_code: array[int]  # codes of ``names``
    stage: array[int]
    layer: array[int]
    mb: array[int]
    duration_s: array[float]
    flops: array[float]
    nbytes: array[float]
    comm_code: array[int]  # codes of ``comms`` (COMM_NONE, COMM_P2P, then collectives' names)
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
        self.names: Vocabulary[str] = Vocabulary()
        self.comms: Vocabulary[str | None] = Vocabulary((None, "p2p"))  # codes COMM_NONE and COMM_P2P

    @property
    def name(self) -> Decoded[str]:
        """The ops' names (decoded from ``name_code``)."""
        return Decoded(self.name_code, self.names.values)

    @property
    def comm(self) -> Decoded[str | None]:
        """The ops' communication kinds, None for compute (decoded from ``comm_code``)."""
        return Decoded(self.comm_code, self.comms.values)

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
        self.name_code.append(self.names.code(name))
        self.stage.append(stage)
        self.layer.append(layer)
        self.mb.append(mb)
        self.duration_s.append(duration_s)
        self.flops.append(flops)
        self.nbytes.append(nbytes)
        self.comm_code.append(self.comms.code(comm))
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


class _Coded(_Column[T]):
    """An attribute of :class:`OpRef` held as a code in its table (``name``, ``comm``)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name, self.codes, self.vocabulary = name, CODED[name], name + "s"

    def __get__(self, ref: OpRef | None, owner: type | None = None) -> T | _Column[T]:  # type: ignore[override]
        if ref is None:
            return self
        t = ref.table
        value: T = getattr(t, self.vocabulary).values[getattr(t, self.codes)[ref.id]]
        return value

    def __set__(self, ref: OpRef, value: T) -> None:
        t = ref.table
        getattr(t, self.codes)[ref.id] = getattr(t, self.vocabulary).code(value)


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
    name: _Column[str] = _Coded()
    stage: _Column[int] = _Column()
    layer: _Column[int] = _Column()
    mb: _Column[int] = _Column()
    duration_s: _Column[float] = _Column()
    flops: _Column[float] = _Column()
    nbytes: _Column[float] = _Column()
    comm: _Column[str | None] = _Coded()
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


__all__ = ["OpRef", "OpTable"]
