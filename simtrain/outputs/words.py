"""Counts in words, for titles, legends and printed summaries: "1 micro-batch", "16 micro-batches"."""

from __future__ import annotations

#: Plurals that are not the singular plus "s".
_IRREGULAR = {"micro-batch": "micro-batches", "batch": "batches"}


def counted(n: int | float, noun: str) -> str:
    """``n`` followed by ``noun``, singular for exactly one and plural otherwise.

    >>> counted(1, "micro-batch"), counted(16, "micro-batch"), counted(1, "node"), counted(0, "node")
    ('1 micro-batch', '16 micro-batches', '1 node', '0 nodes')
    """
    word = noun if n == 1 else _IRREGULAR.get(noun, noun + "s")
    return f"{n:,} {word}" if isinstance(n, int) else f"{n:g} {word}"
