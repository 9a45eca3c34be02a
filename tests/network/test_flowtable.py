"""The flow table: batched flow starts and ends take the slots of one flow at a time, paths are
interned once, a transfer's flows are checked and kept as one batch."""

from __future__ import annotations

import heapq
import random

import numpy as np
import pytest

from simtrain.network.flowtable import FlowTable, PathTable

pytestmark = pytest.mark.quick

AB, BC = ("a", "b"), ("b", "c")


def test_batched_starts_and_ends_take_the_slots_of_one_at_a_time():
    """Slots: smallest free first, as a heap of free slots hands them out, across growth."""
    rng = random.Random(3)
    table = FlowTable(PathTable({("a", "b"): 0}))
    table.path_table.intern([("a", "b")])
    free, size, used = list(range(64)), 64, set()
    for _ in range(60):
        if used and rng.random() < 0.4:
            gone = sorted(rng.sample(sorted(used), rng.randint(1, len(used))))
            table.end(np.array(gone, dtype=np.int64))
            for s in gone:
                heapq.heappush(free, s)
            used -= set(gone)
        k = rng.randint(1, 50) if rng.random() < 0.9 else rng.randint(65, 200)  # (beyond the first scratch)
        want = []
        for _ in range(k):
            if not free:
                free.extend(range(size, 2 * size))
                size *= 2
            want.append(heapq.heappop(free))
        table.start(7, [0] * k, [1.0] * k)
        used |= set(want)
        assert np.flatnonzero(table.active).tolist() == sorted(used)
        assert table.live().tolist() == sorted(used)


def test_paths_are_interned_and_batches_kept_per_flow_tuple():
    paths = PathTable({AB: 0, BC: 1})
    assert paths.intern([AB, BC]) == paths.intern((AB, BC)) == 0 and paths.intern([BC]) == 1
    assert paths.arrays[0].tolist() == [0, 1] and len(paths) == 2 and paths.psize[:2].tolist() == [2, 1]
    assert paths.pa[:paths.pao[2]].tolist() == [0, 1, 1] and paths.pao[:3].tolist() == [0, 2, 3]
    assert paths.intern([BC, AB, BC]) == 2  # a repeated link: in order in pa, once in pu
    assert paths.pa[paths.pao[2]:paths.pao[3]].tolist() == [1, 0, 1] and paths.psize[2] == 3
    assert paths.pu[paths.puo[2]:paths.puo[3]].tolist() == [0, 1]
    flows = (((AB, BC), 3.0), ((), 2.0), ((BC,), 0.0), ((BC,), 1.0))
    batch = paths.batch(1, flows)
    assert batch[:3] == (4, 6.0, [2.0, 0.0])
    assert batch[3].tolist() == [0, 1] and batch[3].dtype == np.int64 and batch[4].tolist() == [3.0, 1.0]
    assert paths.batch(2, flows) is batch
    with pytest.raises(ValueError, match="sizes must be >= 0"):
        paths.batch(3, (((AB,), -1.0),))
    with pytest.raises(ValueError, match="not in the graph"):
        paths.intern([("a", "c")])
