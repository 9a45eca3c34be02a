"""whatif(): clusters ranked by time and by cost to train, each at its best layout."""

from __future__ import annotations

import pytest

from simtrain import WhatIfQuery, whatif
from simtrain.api.search import DEGREES
from simtrain.api.whatif import overridden

def test_a_faster_cluster_ranks_first_in_time(tmp_path):
    query = WhatIfQuery(model="llama3-8b", train_tokens=10**9, seq=2048, gbs=16, gpus=8, top=1,
                        grid={**DEGREES, "tps": (8,), "cps": (1,), "pps": (1,)})
    out = whatif(query, [("a100-hdr", None), ("h100-ib", None)], prices={"h100-ib": 2.0}, out=tmp_path, plot=False)
    ranks = {r["topology"]: (r["time_rank"], r["cost_rank"]) for r in out["results"]}
    assert ranks == {"h100-ib": (1, 1), "a100-hdr": (2, None)}  # a100-hdr has no price
    assert out["plots"] == {} and not list(tmp_path.iterdir())


@pytest.mark.quick
def test_a_swept_key_the_file_does_not_set_goes_to_its_table():
    assert overridden({"node": {"gpus": 8}}, "spines", 4)["fabric"] == {"spines": 4}
