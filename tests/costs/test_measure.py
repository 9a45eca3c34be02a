"""Measuring a layout's kernels: which kernels a step runs, and PyTorch as an optional extra."""

from __future__ import annotations

import sys

import pytest

from simtrain.costs.kernels import Attention, Elementwise, Gemm
from simtrain.costs.measure import INSTALL_HINT, TorchTimer, layout_kernels
from simtrain.errors import SimtrainError
from simtrain.specs.model import load_model
from simtrain.specs.parallel import ParallelSpec

pytestmark = pytest.mark.quick


def test_layout_kernels_are_distinct_and_cover_every_kind():
    kernels = layout_kernels(load_model("llama3-8b"), ParallelSpec(tp=2, seq=2048, gbs=1))
    assert len(kernels) == len(set(kernels))
    kinds = {type(k) for k in kernels}
    assert kinds == {Gemm, Attention, Elementwise}
    names = {k.name for k in kernels}
    assert {"attn.qkv", "attn.qkv.dgrad", "attn.qkv.wgrad", "mlp.fc2", "lm_head", "attn.core.bwd"} <= names
    moe = layout_kernels(load_model("mixtral-8x7b"), ParallelSpec(tp=2, ep=4, seq=2048, gbs=1))
    assert any(k.name == "moe.expert.fc1" for k in moe)
    eager = layout_kernels(load_model("gpt3-175b"), ParallelSpec(tp=8, seq=2048, gbs=1, attention="eager"))
    assert any(k.name == "attn.softmax" for k in eager) and not any(isinstance(k, Attention) for k in eager)


def test_torch_is_an_optional_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # as if PyTorch were not installed
    with pytest.raises(SimtrainError, match="pip install 'simtrain\\[calibrate\\]'"):
        TorchTimer()
    assert "simtrain[calibrate]" in INSTALL_HINT
