"""The closed form's ledger: ZeRO's sharding and traffic, activations with and without sequence
parallelism, selective recompute, stage splits, and the settings it does not model; each against
the published formula written out by hand."""

from __future__ import annotations

import pytest

from simtrain.analytic import ledger
from simtrain.analytic.model import estimate
from simtrain.specs.parallel import ParallelSpec
from simtrain.units import GiB

pytestmark = pytest.mark.quick

# the default scenario's layout: llama3-70b, TP8 PP4 DP2 on seed-h100, 16 micro-batches of 8K tokens
DEFAULT = dict(tp=8, pp=4, dp=2, seq=8192, gbs=32, recompute="none")


def test_zero_stages_shard_as_the_paper_says():
    # Rajbhandari et al. 2020, figure 1 with K = 12 and N_d = 64: 16, 4 + 12/64, 2 + 14/64, 16/64
    assert ledger.states_bytes(1e9, 64, 0) == pytest.approx(16e9)
    assert ledger.states_bytes(1e9, 64, 1) == pytest.approx(4e9 + 12e9 / 64)
    assert ledger.states_bytes(1e9, 64, 2) == pytest.approx(2e9 + 14e9 / 64)
    assert ledger.states_bytes(1e9, 64, 3) == pytest.approx(16e9 / 64)
    assert [ledger.dp_passes(z, 16) for z in range(4)] == [2, 2, 17, 48]


def test_estimate_honours_zero(llama70b, seed64):
    est = {z: estimate(llama70b, seed64, ParallelSpec(zero=z, **DEFAULT)) for z in range(4)}
    psi = llama70b.params_total / (8 * 4)  # parameters per GPU
    # ZeRO-0 keeps the 12 optimizer bytes whole, ZeRO-3 shards all 16 over DP=2
    assert est[0]["memory_gib"] - est[3]["memory_gib"] == pytest.approx(8 * psi / GiB)
    assert est[1]["memory_gib"] - est[2]["memory_gib"] == pytest.approx(1 * psi / GiB)  # 2 - 2/2
    assert est[0]["memory_gib"] - est[1]["memory_gib"] == pytest.approx(6 * psi / GiB)  # 12 - 12/2
    # traffic: ZeRO-3 gathers twice and reduces once per micro-batch, 3 x 16 passes against 2
    assert est[3]["breakdown_s"]["dp"] / est[1]["breakdown_s"]["dp"] == pytest.approx(48 / 2)
    assert est[0]["breakdown_s"]["dp"] == pytest.approx(est[1]["breakdown_s"]["dp"])


def test_estimate_honours_sequence_parallelism(llama8b, seed64):
    base = dict(tp=4, pp=2, dp=1, seq=2048, gbs=8, recompute="none")
    sp, no_sp = (estimate(llama8b, seed64, ParallelSpec(sp=flag, **base)) for flag in (True, False))
    sbh = 2048 * 1 * llama8b.hidden
    layers, in_flight = llama8b.layers // 2, 2  # 1F1B's first stage holds min(p, m) micro-batches
    extra = layers * in_flight * (sbh * (10 + 24 / 4) - 34 * sbh / 4)  # Korthikanti et al. table 2
    assert no_sp["memory_gib"] - sp["memory_gib"] == pytest.approx(extra / GiB)


def test_selective_recompute_repeats_the_attention_forward(llama8b, seed64):
    base = dict(tp=4, pp=2, dp=1, seq=2048, gbs=8)
    none, sel = (estimate(llama8b, seed64, ParallelSpec(recompute=r, **base)) for r in ("none", "selective"))
    m, layers = 8, llama8b.layers // 2
    sec = 2048 / 4 / seed64.gpu.effective_flops  # seconds per FLOP-per-token on one GPU
    redo = m * layers * 2 * 2048 * llama8b.q_width * sec
    assert sel["breakdown_s"]["recompute"] == pytest.approx(redo)
    assert none["breakdown_s"]["recompute"] == 0
    assert sel["memory_gib"] == pytest.approx(none["memory_gib"])  # flash keeps no scores either way
    eager = {r: estimate(llama8b, seed64, ParallelSpec(recompute=r, attention="eager", **base))
             for r in ("none", "selective")}
    scores = (5 if llama8b.dropout > 0 else 2) * llama8b.heads * 2048 ** 2 / 4  # per layer, a s^2 b / t
    assert eager["none"]["memory_gib"] - eager["selective"]["memory_gib"] == pytest.approx(
        layers * 2 * scores / GiB)


def test_stage_split_moves_layers_between_stages(llama70b, seed64):
    even = estimate(llama70b, seed64, ParallelSpec(**DEFAULT))
    split = estimate(llama70b, seed64, ParallelSpec(first_stage_layers=17, **DEFAULT))
    # 80 layers as 17 + 21 + 21 + 21: stage 1 has no LM head, so its work grows by 21/20
    assert split["compute_s_per_stage"][1] / even["compute_s_per_stage"][1] == pytest.approx(21 / 20)
    assert split["compute_s_per_stage"][0] / even["compute_s_per_stage"][0] == pytest.approx(17 / 20)
    assert split["step_time_s"] > even["step_time_s"]  # the last stage, with the head, is slower
    ranks = ledger.rank_layers(llama70b, ParallelSpec(first_stage_layers=17, **DEFAULT), seed64.gpu, "1f1b", 1)
    assert ranks.layers == (17, 21, 21, 21) and ranks.head_ranks == {3}


def test_rank_layers_follow_the_schedules_stage_map(llama70b, seed64):
    def ranks(schedule, vpp=1, **split):
        par = ParallelSpec(**{**DEFAULT, "vpp": vpp}, **split)
        return ledger.rank_layers(llama70b, par, seed64.gpu, schedule, vpp)

    # 8 chunks of 4 + 6 x 10 + 16; interleaving puts chunks r and r + 4 on rank r
    inter = ranks("interleaved-1f1b", 2, first_stage_layers=4, last_stage_layers=16)
    assert inter.layers == (14, 20, 20, 26) and inter.head_ranks == {3}
    # the V puts chunks r and 7 - r on rank r: the last chunk comes back to rank 0
    v = ranks("zb-v", first_stage_layers=4, last_stage_layers=16)
    assert v.layers == (20, 20, 20, 20) and v.head_ranks == {0}
    # DualPipe: 14 + 3 x 22, each rank holds stages i and p-1-i, each layer counted once
    dual = ranks("dualpipe", first_stage_layers=14)
    assert dual.layers == (18, 22, 22, 18) and dual.head_ranks == {0, 3}


def test_settings_the_closed_form_does_not_model():
    defaults = {"fp8": False, "network": "analytic", "tp": 8, "jitter": 0.0}
    assert ledger.not_modelled({"fp8": True, "network": "flow", "tp": 4, "jitter": 0.0}, defaults) == \
        ["network", "fp8"]
    assert ledger.not_modelled(defaults, defaults) == []
    assert ledger.not_modelled({"mtp_layers": 1}, {"mtp_layers": None}) == ["mtp_layers"]
    assert ledger.not_modelled({"mtp_layers": None}, {"mtp_layers": None}) == []
    from simtrain.settings import SETTINGS

    assert set(ledger.NOT_MODELLED) <= set(SETTINGS)  # each read by its checked name


def test_docstring_examples():
    import doctest

    result = doctest.testmod(ledger, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0 and result.attempted >= 3
