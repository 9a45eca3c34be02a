"""The fast paths change nothing: on random layouts up to 64 GPUs, under both network
fidelities, the folded run (one representative per group of identical ranks, with every
shortcut the lowering and the engine take) reports what the unfolded run of every rank reports,
to 1e-9 relative."""

from __future__ import annotations

import random

import pytest

from helpers import assert_close, simulate_settings

#: Report keys that describe the simulation itself rather than the step.
_ABOUT_THE_RUN = {"fold", "num_events", "num_ops", "simulated_ranks", "config", "kernel_sources"}
#: The links whose flows ran, first by utilisation: a folded flow run runs fewer of them (the
#: groups it stands for count in ``bytes_by_tier`` and ``utilisation_by_link``).
_RAN_ONLY = {"links.top"}


def _layout(seed: int) -> dict:
    rnd = random.Random(seed)
    gpus = rnd.choice([8, 16, 32, 64])
    moe = rnd.random() < 0.3
    tp = rnd.choice([t for t in (1, 2, 4, 8) if t <= gpus])
    pp = rnd.choice([p for p in (1, 2, 4) if tp * p <= gpus])
    cp = rnd.choice([c for c in (1, 2) if tp * pp * c <= gpus]) if not moe else 1
    dp = gpus // (tp * pp * cp)
    schedule = rnd.choice(["1f1b", "gpipe", "zb-h1", "interleaved-1f1b"] if pp > 1 else ["1f1b"])
    m = rnd.choice([pp * 2, pp * 3]) if pp > 1 else 2
    settings = dict(model="mixtral-8x7b" if moe else "llama3-8b", topology=rnd.choice(["h100-ib", "h100-ib-2to1"]),
                    gpus=gpus, tp=tp, pp=pp, cp=cp, seq=1024 * cp, gbs=m * dp, schedule=schedule,
                    zero=rnd.choice([0, 1, 2, 3]), network=rnd.choice(["analytic", "flow"]))
    if schedule == "interleaved-1f1b":
        settings["vpp"] = 2
    if moe:
        settings["ep"] = rnd.choice([e for e in (2, 4, 8) if dp % e == 0] or [1])
    return settings


def _close(a, b, path: str) -> None:
    assert_close(a, b, path, skip=_ABOUT_THE_RUN, ran_only=_RAN_ONLY)


@pytest.mark.parametrize("seed", [pytest.param(seed, marks=pytest.mark.quick) if seed == 1 else seed
                                  for seed in range(8)])  # seed 1: the fastest of the eight
def test_folded_fast_path_equals_every_rank_simulated(seed):
    settings = _layout(seed)
    folded = simulate_settings(**settings).report
    every = simulate_settings(**settings, fold=False).report
    _close(dict(folded), dict(every), f"layout {settings}")
