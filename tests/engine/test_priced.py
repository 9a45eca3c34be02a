"""What the compiled loop is given: every communication op's price, asked of the network once
per distinct (communication, group set, bytes); none where the network times an op itself or
prices it at nothing."""

from __future__ import annotations

import numpy as np
import pytest

from simtrain.engine.priced import prices, run_priced
from simtrain.network.fixed import FixedLatency
from simtrain.workload.program import KIND, STREAM, Op, Program


def _program(nbytes=(1.0, 1.0, 2.0)):
    prog = Program()
    prog.rank_weight = {0: 1, 1: 1}
    prog.group_sets = [((0, 1),)]
    for rank in (0, 1):
        prog.add(Op(0, rank, STREAM["compute"], KIND["F"], "f", 0, -1, -1, duration_s=1.0))
    for k, size in enumerate(nbytes):
        prog.add(Op(0, 0, STREAM["dp"], KIND["dp"], "ar", 0, -1, -1, nbytes=size, comm="all_reduce",
                    group_set=0, key=("k", k)))
    return prog


class Counting(FixedLatency):
    def __init__(self, price=0.25):
        super().__init__()
        self.price, self.asked = price, 0

    def fixed_duration(self, op):
        self.asked += 1
        return self.price


@pytest.mark.quick
def test_prices_ask_once_per_key_and_fill_the_communication_ops():
    prog, net = _program(), Counting()
    price, ids = prices(prog, net)
    assert ids.tolist() == [2, 3, 4] and net.asked == 2  # two ops share (all_reduce, 0, 1.0)
    assert price.tolist() == [0.0, 0.0, 0.25, 0.25, 0.25]


@pytest.mark.quick
@pytest.mark.parametrize("answer", [None, 0.0])
def test_no_prices_where_the_network_times_an_op_or_prices_it_at_nothing(answer):
    assert prices(_program(), Counting(answer)) is None


@pytest.mark.quick
def test_run_priced_records_every_op_once():
    prog = _program()
    price, ids = prices(prog, Counting())
    rec = run_priced(prog, price, ids, max_events=100, comm_interference=0.0)
    assert sorted(rec.rows.tolist()) == list(range(5)) and rec.executed == 5 and rec.finished.all()
    dp = rec.rows >= 2
    assert np.allclose(rec.ends[dp] - rec.starts[dp], 0.25) and rec.slowdown_s == {0: 0.0, 1: 0.0}
