"""The memo of the flow model's rate recomputations, in arrays its compiled loop searches.

A recomputation (:class:`~simtrain.network.sharing.Reshare`) is a function of the state it starts
from (a number, :meth:`~simtrain.network.sharing.Reshares.node`) and the paths started and ended
since the last one (sorted path ids): that triple is its key. Keys sit in an open-addressing hash
table (linear probing, at most half full) over entries, each a row of integers naming where its
key and the parts of its result lie in three pools (:mod:`simtrain.network.flow_layout`, ``E_*``):
integers (path and link ids), floats (rates, B/s) and the keys' path ids. The loop
(:func:`simtrain.network.flowcore.settle`) looks a key up and applies what it finds; the model
computes and :meth:`ReshareMemo.insert` stores what it does not find.
"""

from __future__ import annotations

import numpy as np

from simtrain.network.flow_layout import (
    E_BUSY, E_KEY, E_LRATES, E_NBUSY, E_NE, E_NEXT, E_NODE, E_NPATHS, E_NRP, E_NS, E_NZEROED,
    E_NUSED, E_PATHS, E_RATES, E_RP, E_ZEROED, E_USED, ENTRY, MASK)
from simtrain.network.sharing import Reshare


def _grown(a: np.ndarray, need: int) -> np.ndarray:
    """``a`` (1-D) with room for at least ``need`` values, doubling."""
    if need <= a.size:
        return a
    out = np.zeros(max(need, 2 * a.size), dtype=a.dtype)
    out[:a.size] = a
    return out


class ReshareMemo:
    """Recomputations by (state, sorted paths started, sorted paths ended); the table's size minus
    one is kept in ``ist[MASK]`` for the loop. ``hash_key(node, key, ns, ne)`` is the loop's hash
    (:func:`simtrain.network.flowcore.key_hash`)."""

    def __init__(self, ist: np.ndarray, hash_key) -> None:  # type: ignore[no-untyped-def]
        self.ist = ist
        self.hash_key = hash_key
        self.clear()

    def clear(self) -> None:
        """Forget every entry."""
        self.tab = np.full(1024, -1, dtype=np.int64)
        self.ent = np.zeros((64, ENTRY), dtype=np.int64)
        self.keys = np.zeros(1024, dtype=np.int64)
        self.ints = np.zeros(4096, dtype=np.int64)
        self.flts = np.zeros(1024)
        self.n = self.n_keys = self.n_ints = self.n_flts = 0
        self.ist[MASK] = self.tab.size - 1

    def _ints(self, a: np.ndarray | None) -> tuple[int, int]:
        if a is None:
            return 0, -1
        at = self.n_ints
        self.ints = _grown(self.ints, at + a.size)
        self.ints[at:at + a.size] = a
        self.n_ints = at + a.size
        return at, int(a.size)

    def _floats(self, a: np.ndarray | None) -> int:
        at = self.n_flts
        if a is not None:
            self.flts = _grown(self.flts, at + a.size)
            self.flts[at:at + a.size] = a
            self.n_flts = at + a.size
        return at

    def insert(self, node: int, started: np.ndarray, ended: np.ndarray, share: Reshare) -> None:
        """Store ``share``, the recomputation from state ``node`` after the paths ``started`` and
        ``ended`` (each sorted)."""
        if 2 * (self.n + 1) > self.tab.size:
            self._rehash(2 * self.tab.size)
        if self.n == self.ent.shape[0]:
            self.ent = np.concatenate([self.ent, np.zeros_like(self.ent)])
        key = np.concatenate([started, ended]).astype(np.int64)
        at = self.n_keys
        self.keys = _grown(self.keys, at + key.size)
        self.keys[at:at + key.size] = key
        self.n_keys = at + key.size
        row = self.ent[self.n]
        row[E_NODE], row[E_NS], row[E_NE], row[E_KEY], row[E_NEXT] = node, started.size, ended.size, at, share.node
        row[E_PATHS], row[E_NPATHS] = self._ints(share.paths)
        row[E_RP], row[E_NRP] = self._ints(share.rate_paths)
        row[E_RATES] = self._floats(share.rates)
        row[E_ZEROED], row[E_NZEROED] = self._ints(share.zeroed)
        row[E_USED], row[E_NUSED] = self._ints(share.used)
        row[E_LRATES] = self._floats(share.link_rates)
        self._floats(share.utilisations)  # (right after the link rates: the loop reads them there)
        row[E_BUSY], row[E_NBUSY] = self._ints(share.busy)
        self._place(self.n, self.tab)
        self.n += 1

    def _place(self, e: int, tab: np.ndarray) -> None:
        row = self.ent[e]
        ns, ne = int(row[E_NS]), int(row[E_NE])
        key = self.keys[row[E_KEY]:row[E_KEY] + ns + ne]
        mask = tab.size - 1
        pos = self.hash_key(int(row[E_NODE]), key, ns, ne) & mask
        while tab[pos] >= 0:
            pos = (pos + 1) & mask
        tab[pos] = e

    def _rehash(self, size: int) -> None:
        tab = np.full(size, -1, dtype=np.int64)
        for e in range(self.n):
            self._place(e, tab)
        self.tab = tab
        self.ist[MASK] = size - 1

    @property
    def held(self) -> int:
        """Numbers the memo holds."""
        return self.n_keys + self.n_ints + self.n_flts
