"""Progressive filling compiled: bit for bit the rates of the NumPy definition, through numba's
dispatcher and through the saved machine code, on the hand example and on random flow sets
(equal capacities, so that links saturate together and rates meet the tolerance)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simtrain.machine_code import NativeFunction
from simtrain.network.flow_kernels import FILL
from helpers import path_pools
from simtrain.network.maxmin import MaxMinMemo, max_min_rates
from simtrain.network.maxmin_fill import fill

pytestmark = pytest.mark.quick


def _run(through, pf, pl, capacity, flows):
    rate = np.zeros(flows)
    links = capacity.size
    through(pf.astype(np.int64), pl.astype(np.int64), pf.size, capacity.astype(np.float64), links, rate,
            np.zeros(flows, dtype=bool), np.zeros(links), np.zeros(links, dtype=np.int64), np.empty(links))
    return rate


@pytest.mark.parametrize("through", [fill, FILL.fill], ids=["numba", "machine code"])
def test_the_hand_example(through):
    # links A (1 B/s) and B (2 B/s); flow 0 crosses both, flow 1 only A, flow 2 only B
    rates = _run(through, np.array([0, 0, 1, 2]), np.array([0, 1, 0, 1]), np.array([1.0, 2.0]), 3)
    assert rates.tolist() == [0.5, 0.5, 1.5]
    if through is FILL.fill:  # its machine code ran, not numba's dispatcher standing in
        assert isinstance(FILL.fill._fast, NativeFunction)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_random_flow_sets_get_the_definitions_rates_bit_for_bit(data):
    links = data.draw(st.integers(1, 6))
    flows = data.draw(st.integers(1, 12))
    capacity = np.array(data.draw(st.lists(st.sampled_from([1.0, 3.0, 1e9, 46.5e9, 0.1]), min_size=links,
                                           max_size=links)))
    pairs = sorted({(f, data.draw(st.integers(0, links - 1))) for f in range(flows)}
                   | set(data.draw(st.lists(st.tuples(st.integers(0, flows - 1), st.integers(0, links - 1)),
                                            max_size=20))))
    pf = np.array([p[0] for p in pairs])
    pl = np.array([p[1] for p in pairs])
    want = max_min_rates(pf, pl, capacity, flows)
    for through in (fill, FILL.fill):
        assert _run(through, pf, pl, capacity, flows).tobytes() == want.tobytes()
    paths = [pl[pf == f] for f in range(flows)]  # the same flows as paths, through the memo's filling
    rates, _, _ = MaxMinMemo(capacity).rates(np.arange(flows), *path_pools(paths))
    assert rates.tobytes() == want.tobytes()


def _by_numpy(paths: list[np.ndarray], capacity: np.ndarray, ordered: list[int]):
    """What MaxMinMemo computed with NumPy alone: the pairs flow by flow, the links numbered by
    np.unique, the definition's rates, the loads summed by np.bincount."""
    chosen = [paths[p] for p in ordered]
    pair_link = np.concatenate(chosen)
    pair_flow = np.repeat(np.arange(len(chosen)), [c.size for c in chosen])
    used, local = np.unique(pair_link, return_inverse=True)
    rates = max_min_rates(pair_flow, local, capacity[used], len(chosen))
    return rates, used, np.bincount(local, weights=rates[pair_flow], minlength=used.size)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_memo_fills_paths_as_numpy_did_bit_for_bit(data):
    """Flows on paths of a pool (a link repeated in a path counts twice), in any order and with
    repeats: :class:`MaxMinMemo`'s compiled pairs, numbering, filling and loads equal NumPy's."""
    links = data.draw(st.integers(1, 8))
    capacity = np.array(data.draw(st.lists(st.sampled_from([1.0, 3.0, 1e9, 46.5e9, 0.1]), min_size=links,
                                           max_size=links)))
    paths = [np.array(data.draw(st.lists(st.integers(0, links - 1), min_size=1, max_size=5)), dtype=np.int64)
             for _ in range(data.draw(st.integers(1, 8)))]
    flows = data.draw(st.lists(st.integers(0, len(paths) - 1), min_size=1, max_size=14))
    memo = MaxMinMemo(capacity)
    pa, pao = path_pools(paths)
    for _ in range(2):  # the second time from the memo
        rates, used, loads = memo.rates(np.array(flows), pa, pao)
        ordered = sorted(flows)
        want_rates, want_used, want_loads = _by_numpy(paths, capacity, ordered)
        assert used.tolist() == want_used.tolist()
        assert loads.tobytes() == want_loads.tobytes()
        assert rates[np.argsort(flows, kind="stable")].tobytes() == want_rates.tobytes()
        assert not memo._mark.any()  # its scratch flags left clear for the next call
    assert isinstance(FILL.fill_paths._fast, NativeFunction)
