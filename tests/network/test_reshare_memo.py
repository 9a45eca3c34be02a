"""The memo of rate recomputations: every stored key is found (through the compiled loop's own
lookup, across the table's growth), a key it does not hold is not, and clearing forgets all."""

from __future__ import annotations

import random

import numpy as np
import pytest

from simtrain.network import flowcore
from simtrain.network.flow_layout import E_NEXT, E_NPATHS, E_NZEROED, E_NUSED, ISTATE, MASK
from simtrain.network.reshare_memo import ReshareMemo
from simtrain.network.sharing import Reshare

pytestmark = pytest.mark.quick


def _share(next_node: int, rng: random.Random) -> Reshare:
    ints = lambda n: np.array(sorted(rng.sample(range(100), n)), dtype=np.int64)  # noqa: E731
    if rng.random() < 0.3:  # prices nothing, zeroes the busy links
        return Reshare(next_node, None, None, None, None, None, ints(2), ints(3))
    return Reshare(next_node, ints(3), ints(2), np.array([1e9, 2e9]), ints(3), np.array([1.0, 2.0, 3.0]), ints(2),
                   ints(1), np.array([0.1, 0.2, 0.3]))


def _find(memo: ReshareMemo, ist: np.ndarray, node: int, started, ended) -> int:
    key = np.zeros(len(started) + len(ended) + 1, dtype=np.int64)
    key[:len(started)] = started
    key[len(started):len(started) + len(ended)] = ended
    return flowcore._lookup(memo.tab, memo.ent, memo.keys, node, key, len(started), len(ended), int(ist[MASK]))


def test_every_stored_key_is_found_and_no_other():
    rng = random.Random(0)
    ist = np.zeros(ISTATE, dtype=np.int64)
    memo = ReshareMemo(ist, flowcore.key_hash)
    stored = {}
    for n in range(1500):  # past the first table, entry rows and pools
        key = (rng.randrange(40), tuple(sorted(rng.choices(range(30), k=rng.randint(0, 4)))),
               tuple(sorted(rng.choices(range(30), k=rng.randint(0, 4)))))
        if key in stored or not (key[1] or key[2]):
            continue
        share = _share(n, rng)
        memo.insert(key[0], np.array(key[1], dtype=np.int64), np.array(key[2], dtype=np.int64), share)
        stored[key] = share
    assert memo.tab.size >= 2 * memo.n and ist[MASK] == memo.tab.size - 1
    for (node, started, ended), share in stored.items():
        e = _find(memo, ist, node, started, ended)
        assert e >= 0 and memo.ent[e, E_NEXT] == share.node
        assert (memo.ent[e, E_NPATHS] < 0) == (share.paths is None)
        assert memo.ent[e, E_NZEROED] == share.zeroed.size
        assert (memo.ent[e, E_NUSED] < 0) == (share.used is None)
    assert _find(memo, ist, 99, (1,), ()) == -1
    assert _find(memo, ist, 3, (1, 2, 3, 4, 5, 6), ()) == -1
    memo.clear()
    assert memo.n == 0 and memo.held == 0 and all(_find(memo, ist, *k) == -1 for k in list(stored)[:50])
