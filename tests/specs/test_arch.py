"""GPU architectures: every preset names a known one, and each efficiency is a fraction."""

from __future__ import annotations

import pytest

from simtrain.errors import SpecError
from simtrain.specs.arch import ARCHS, get_arch
from simtrain.specs.gpu import GPU_PRESETS, get_gpu
from simtrain.units import GiB

pytestmark = pytest.mark.quick


def test_efficiencies_are_fractions():
    for arch in ARCHS.values():
        for fraction, shape in arch.mamf.values():
            assert 0.5 < fraction < 1 and len(shape) == 3
        for value in (arch.sustained_clock, arch.attention_forward, arch.attention_backward,
                      arch.hbm_efficiency, arch.elementwise_efficiency):
            assert 0 < value <= 1
    assert get_arch("ampere").sustained_clock == pytest.approx(1305 / 1410)
    with pytest.raises(SpecError, match="architecture 'volta' is not known"):
        get_arch("volta")


def test_presets_in_gib_with_their_architecture():
    assert {g.arch for g in GPU_PRESETS.values()} <= set(ARCHS)
    assert get_gpu("a100-80g").hbm_bytes == 80 * GiB and get_gpu("a100-80g").sm_count == 108
    for name, gib in (("h100-sxm", 79.65), ("h200", 140.40), ("b200", 179.06)):
        assert get_gpu(name).hbm_bytes / GiB == pytest.approx(gib, abs=0.01)
    assert get_gpu("seed-h100").efficiency == 0.6 and get_gpu("h100-sxm").efficiency is None


def test_communication_holds_sms_that_compute_loses():
    """comm_sms of sm_count SMs leave compute sm_count - comm_sms: it runs that much longer."""
    from dataclasses import replace

    assert get_gpu("h100-sxm").comm_interference == pytest.approx(20 / 112)
    assert get_gpu("a100-80g").comm_interference == pytest.approx(20 / 88)
    assert replace(get_gpu("h100-sxm"), comm_sms=0).comm_interference == 0
    with pytest.raises(SpecError, match="comm_sms = 132: must be in"):
        replace(get_gpu("h100-sxm"), comm_sms=132)
