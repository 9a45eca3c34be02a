"""The flow model's sort and latency heap (:mod:`simtrain.network.flowheap`), against Python's."""

from __future__ import annotations

import heapq

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from simtrain.network import flowheap
from simtrain.network.flow_layout import H_T, ISTATE, N_DONE, N_HEAP, O_IX, O_T

pytestmark = pytest.mark.quick


@given(st.lists(st.integers(-50, 50), max_size=60))
def test_the_sort_sorts(values):
    a = np.array(values + [99, 98], dtype=np.int64)
    flowheap.sort(a, len(values))
    assert a[:len(values)].tolist() == sorted(values) and a[len(values):].tolist() == [99, 98]


@given(st.lists(st.tuples(st.sampled_from([0.0, 1.0, 1.5, 2.0]), st.integers(0, 10 ** 6)), max_size=40, unique_by=lambda x: x[1]),
       st.sampled_from([0.5, 1.5, 3.0]))
def test_the_latency_heap_pops_by_time_then_id_as_heapq_does(items, until):
    ti, tf, ist = np.zeros((5, 64), dtype=np.int64), np.zeros((3, 64)), np.zeros(ISTATE, dtype=np.int64)
    ref: list[tuple[float, int]] = []
    for ix, (t, tid) in enumerate(items):
        flowheap.heap_push(ti, tf, ist, t, tid, ix)
        heapq.heappush(ref, (t, tid))
    flowheap.pop_done(ti, tf, ist, until)
    want = []
    while ref and ref[0][0] <= until:
        want.append(heapq.heappop(ref))
    got = [(float(tf[O_T, d]), items[int(ti[O_IX, d])][1]) for d in range(ist[N_DONE])]
    assert got == want
    assert ist[N_HEAP] == len(ref) and (not ref or tf[H_T, 0] == ref[0][0])
