"""Text columns of an op table held as integer codes: each distinct value once, in a vocabulary.

An unfolded run's table holds millions of op names and communication kinds drawn from a few
hundred distinct values. Held as codes (C ints), a row's text costs 4 bytes instead of a
pointer, a template's or a replica's copy is a copy of bytes, and the engine and the timeline
read the codes as a numpy column instead of numbering millions of strings in a Python loop.
:class:`Decoded` gives the column back as the values, for code that reads a few.
"""

from __future__ import annotations

from array import array
from collections.abc import Hashable, Iterable, Iterator, Sequence
from typing import Generic, TypeVar, overload

H = TypeVar("H", bound=Hashable)


class Vocabulary(Generic[H]):
    """Values and their codes: a new value gets the next code, and keeps it."""

    __slots__ = ("values", "_codes")

    def __init__(self, first: Iterable[H] = ()) -> None:
        self.values: list[H] = []
        self._codes: dict[H, int] = {}
        for value in first:
            self.code(value)

    def code(self, value: H) -> int:
        """The code of ``value`` (a new one where it is new)."""
        c = self._codes.get(value)
        if c is None:
            c = self._codes[value] = len(self.values)
            self.values.append(value)
        return c

    def __len__(self) -> int:
        return len(self.values)


class Decoded(Sequence[H]):
    """A column of codes read as its values (read-only; the table writes the codes)."""

    __slots__ = ("codes", "values")

    def __init__(self, codes: array[int], values: list[H]) -> None:
        self.codes, self.values = codes, values

    def __len__(self) -> int:
        return len(self.codes)

    @overload
    def __getitem__(self, i: int) -> H: ...
    @overload
    def __getitem__(self, i: slice) -> list[H]: ...

    def __getitem__(self, i: int | slice) -> H | list[H]:
        if isinstance(i, slice):
            return list(map(self.values.__getitem__, self.codes[i]))
        return self.values[self.codes[i]]

    def __iter__(self) -> Iterator[H]:
        return map(self.values.__getitem__, self.codes)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]  # (equal to lists, which are unhashable)


__all__ = ["Decoded", "Vocabulary"]
