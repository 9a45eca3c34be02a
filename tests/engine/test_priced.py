"""What the compiled loop is given: every communication op's price, asked of the network once
per distinct (communication, group set, bytes); none where the network times an op itself or
prices it at nothing."""

from __future__ import annotations

import numpy as np
import pytest

from simtrain.engine import loop_layout as compiled
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
    price, cls = prices(prog, net)
    assert cls.tolist() == [compiled.COMPUTE] * 2 + [compiled.COLLECTIVE] * 3
    assert net.asked == 2  # two ops share (all_reduce, 0, 1.0)
    assert price.tolist() == [0.0, 0.0, 0.25, 0.25, 0.25]


@pytest.mark.quick
def test_no_prices_where_the_network_times_an_op_and_free_ones_where_it_prices_at_nothing():
    assert prices(_program(), Counting(None)) is None
    price, cls = prices(_program(), Counting(0.0))
    assert price.tolist() == [0.0] * 5 and cls.tolist() == [compiled.COMPUTE] * 2 + [compiled.COLLECTIVE] * 3


@pytest.mark.quick
def test_a_key_is_its_communication_group_set_and_bytes_and_transfers_are_classed_apart():
    prog = _program(nbytes=(1.0,))
    prog.add(Op(0, 0, STREAM["dp"], KIND["dp"], "ag", 0, -1, -1, nbytes=1.0, comm="all_gather", group_set=0,
                key=("g", 0)))
    prog.add(Op(0, 0, STREAM["pp_send"], KIND["pp"], "s", 0, -1, 0, nbytes=1.0, comm="p2p", group_set=0, peer=1))
    asked = []

    class Recording(Counting):
        def fixed_duration(self, op):
            asked.append(op.id)
            return 0.25 * len(asked)

    price, cls = prices(prog, Recording())
    assert sorted(asked) == [2, 3, 4]  # same group set and bytes, three communications
    assert cls.tolist() == [compiled.COMPUTE] * 2 + [compiled.COLLECTIVE] * 2 + [compiled.P2P]
    assert sorted(price[2:].tolist()) == [0.25, 0.5, 0.75] and price[asked[0]] == 0.25


@pytest.mark.quick
def test_run_priced_records_every_op_once():
    prog = _program()
    price, cls = prices(prog, Counting())
    rec = run_priced(prog, price, cls, max_events=100, comm_interference=0.0)
    assert sorted(rec.rows.tolist()) == list(range(5)) and rec.executed == 5 and rec.finished.all()
    dp = rec.rows >= 2
    assert np.allclose(rec.ends[dp] - rec.starts[dp], 0.25) and rec.slowdown_s == {0: 0.0, 1: 0.0}
