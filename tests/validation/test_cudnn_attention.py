"""The attention model against published cuDNN measurements on Hopper
(``tests/validation/cudnn_attention_h200.csv``: NVIDIA cudnn-frontend's training benchmark on an
H200, cuDNN 9.19, DeepSeek-V3's 192/128-wide MLA core and Llama 3.1's 128-wide heads).

The model prices a kernel at the clock a GH100 holds through a training run, 1500 MHz
(:mod:`simtrain.specs.arch`); the benchmark's ten iterations run at a boost clock, at most the
GH100's 1980 MHz. A right model is then 1 to 1980 / 1500 = 1.32 times the measured time; the
bounds allow 10% either side for the spread between kernels."""

from __future__ import annotations

from pathlib import Path

import pytest

from simtrain.costs.calibration import example_kernel, read_calibration
from simtrain.costs.timing import KernelTimer
from simtrain.specs.gpu import get_gpu

pytestmark = pytest.mark.quick

TABLE = Path(__file__).resolve().parent / "cudnn_attention_h200.csv"
MEASURED = read_calibration(TABLE)
CLOCKS = 1980 / 1500  # the GH100's highest boost clock over the clock it sustains in training
LOW, HIGH = 0.9, CLOCKS * 1.1


def _ratio(entry) -> float:
    kernel = example_kernel(entry.kind, entry.shape, entry.dtype)
    return KernelTimer(get_gpu("h200")).kernel_time(kernel) / entry.time_s


def test_the_table_holds_both_models_both_passes_and_masks():
    shapes = {(e.kind, e.shape[3], e.shape[5]) for e in MEASURED.entries}
    assert {("attention_forward", 192, 1), ("attention_backward", 192, 1),
            ("attention_forward", 128, 0), ("attention_backward", 128, 1)} <= shapes
    assert len(MEASURED.entries) == 26


@pytest.mark.parametrize("entry", MEASURED.entries, ids=lambda e: f"{e.kind}-{'x'.join(map(str, e.shape))}")
def test_model_time_is_the_measured_time_at_the_training_clock(entry):
    assert LOW <= _ratio(entry) <= HIGH

