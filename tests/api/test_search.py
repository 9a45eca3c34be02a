"""search(): layouts ranked by simulated step time; each value to try is checked as its setting."""

from __future__ import annotations

import pytest

from simtrain import search
from simtrain.errors import SimtrainError

def test_the_top_layouts_are_ranked_by_simulated_step():
    out = search("llama3-8b", "seed-h100", gpus=8, seq=4096, gbs=16, top=2, tps=(2, 4, 8), cps=(1,), pps=(1, 2))
    steps = [r["simulated_step_time_s"] for r in out["ranking"]]
    assert steps == sorted(steps) and [r["simulated_rank"] for r in out["ranking"][:2]] == [1, 2]


@pytest.mark.quick
@pytest.mark.parametrize("kwargs, words", [({"schedules": ("2f2b",)}, "unknown schedule"),
                                           ({"mbss": (0,)}, "mbs"),
                                           ({"resume": True}, "--resume needs --results")])
def test_a_bad_value_is_one_line(kwargs, words):
    with pytest.raises(SimtrainError, match=words):
        search("llama3-8b", "seed-h100", gpus=8, seq=4096, gbs=16, **kwargs)
