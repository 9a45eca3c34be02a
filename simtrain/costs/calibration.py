"""Calibration tables: kernel times measured on a real GPU, used in place of the kernel model.

The file is CSV with a header line ``kind,shape,dtype,time_us`` (lines starting with ``#`` are
comments). ``shape`` is ``x``-separated integers whose meaning depends on ``kind``:

* ``gemm``: ``batch x m x n x k`` (C[m, n] = A[m, k] B[k, n], ``batch`` times);
* ``attention_forward`` / ``attention_backward``: ``batch x sq x skv x d_qk x d_v x causal``
  (``batch`` = sequences x heads, ``causal`` 0 or 1);
* ``elementwise``: ``bytes`` moved by one kernel (read plus written).

A kernel whose shape is in the table takes the measured time. A kernel that differs from
measured shapes in one dimension only, lying between two of them, takes the model's time scaled
by the measured/model ratio interpolated linearly in the logarithm of that dimension. Any other
kernel falls back to the model (:class:`simtrain.costs.timing.KernelTimer` counts each case).

A file is read once, at most :data:`MAX_CSV_BYTES`; shape numbers above :data:`MAX_DIM`, a shape
number below 1 (``causal`` is 0 or 1), a time that is not a finite number > 0 and a kernel given on
two lines are refused with the lines that hold them. :func:`check_peaks` refuses a row faster than
the GPU's datasheet peak: a GEMM or attention core above its dense tensor-core FLOP/s (FP8's for an
FP8 GEMM), an elementwise kernel above its HBM bandwidth (a GEMM's or attention core's operands
may come from L2 in a measuring loop, so only their FLOPs bound them).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from simtrain.costs.kernels import DTYPES, Attention, Elementwise, Gemm, Kernel
from simtrain.errors import SpecError
from simtrain.specs.strict import clip, read_text, shown
from simtrain.units import US

if TYPE_CHECKING:  # pragma: no cover
    from simtrain.specs.gpu import GpuSpec

#: The largest calibration file read: 16 MiB (a layout's table has tens of rows of ~40 bytes).
MAX_CSV_BYTES = 16 * 2**20
#: The largest shape number: 2**53, the largest integer a float holds exactly (IEEE 754 binary64).
MAX_DIM = 2**53

HEADER = ("kind", "shape", "dtype", "time_us")
KINDS = {"gemm": 4, "attention_forward": 6, "attention_backward": 6, "elementwise": 1}  # shape fields
_VARYING = {"gemm": 4, "attention_forward": 3, "attention_backward": 3, "elementwise": 1}  # leading dims that may vary


@dataclass(frozen=True)
class Entry:
    """One measured kernel."""

    kind: str
    shape: tuple[int, ...]
    dtype: str
    time_s: float
    row: int = field(default=0, compare=False, repr=False)  # the file's line that gave it; 0: not read

    def line(self) -> str:
        return f"{self.kind},{'x'.join(map(str, self.shape))},{self.dtype},{self.time_s / US!r}"


def kernel_key(kernel: Kernel) -> tuple[str, tuple[int, ...], str, int]:
    """(kind, shape, dtype, launches) of ``kernel`` in the table's terms; an elementwise kernel
    with several launches is looked up per launch."""
    if isinstance(kernel, Gemm):
        return "gemm", (kernel.batch, kernel.m, kernel.n, kernel.k), kernel.dtype, 1
    if isinstance(kernel, Attention):
        kind = "attention_backward" if kernel.backward else "attention_forward"
        shape = (kernel.batch, kernel.sq, kernel.skv, kernel.d_qk, kernel.d_v, int(kernel.causal))
        return kind, shape, "bf16", 1
    assert isinstance(kernel, Elementwise)
    launches = max(1, kernel.launches)
    return "elementwise", (max(1, round(kernel.nbytes / launches)),), "bf16", launches


def example_kernel(kind: str, shape: tuple[int, ...], dtype: str) -> Kernel:
    """A kernel with the table's kind, shape and dtype (the inverse of :func:`kernel_key`)."""
    if kind == "gemm":
        b, m, n, k = shape
        return Gemm("measured", m, n, k, batch=b, dtype=dtype)
    if kind.startswith("attention"):
        b, sq, skv, dqk, dv, causal = shape
        return Attention("measured", b, sq, skv, dqk, dv, bool(causal), kind == "attention_backward")
    return Elementwise("measured", float(shape[0]))


@dataclass(frozen=True)
class Calibration:
    """Measured kernel times of one GPU, indexed for lookup."""

    entries: tuple[Entry, ...]
    source: str = ""  # the file it came from
    _index: dict = field(init=False, default_factory=dict, compare=False, repr=False, hash=False)

    def __post_init__(self) -> None:
        for e in self.entries:
            self._index.setdefault((e.kind, e.dtype), {})[e.shape] = e.time_s

    def lookup(self, kernel: Kernel, model: Callable[[Kernel], float]) -> tuple[float, str] | None:
        """(time, "measured" | "interpolated") of ``kernel``, or None outside the measurements;
        ``model`` gives the model's time of a kernel (for the interpolated ratio)."""
        kind, shape, dtype, launches = kernel_key(kernel)
        table = self._index.get((kind, dtype))
        if not table:
            return None
        exact = table.get(shape)
        if exact is not None:
            return exact * launches, "measured"
        ratio = self._interpolated_ratio(kind, shape, dtype, table, model)
        if ratio is None:
            return None
        return model(kernel) * ratio, "interpolated"

    @staticmethod
    def _interpolated_ratio(kind: str, shape: tuple[int, ...], dtype: str, table: dict,
                            model: Callable[[Kernel], float]) -> float | None:
        for axis in range(_VARYING[kind]):
            below = above = None
            for other in table:
                if any(o != s for i, (o, s) in enumerate(zip(other, shape)) if i != axis):
                    continue
                if other[axis] < shape[axis] and (below is None or other[axis] > below[axis]):
                    below = other
                elif other[axis] > shape[axis] and (above is None or other[axis] < above[axis]):
                    above = other
            if below is None or above is None:
                continue
            r0, r1 = (table[s] / model(example_kernel(kind, s, dtype)) for s in (below, above))
            w = math.log(shape[axis] / below[axis]) / math.log(above[axis] / below[axis])
            return r0 + (r1 - r0) * w
        return None

    def to_csv(self, comment: str = "") -> str:
        """The table as CSV text (``comment`` lines first, each prefixed with ``#``)."""
        lines = [f"# {line}" for line in comment.splitlines()]
        lines.append(",".join(HEADER))
        lines += [e.line() for e in self.entries]
        return "\n".join(lines) + "\n"


def measured(kernels: Iterable[Kernel], time_of: Callable[[Kernel], float]) -> Calibration:
    """A calibration of the distinct kernels of ``kernels`` (per launch), timed by ``time_of``."""
    entries: dict[tuple, Entry] = {}
    for k in kernels:
        kind, shape, dtype, launches = kernel_key(k)
        key = (kind, shape, dtype)
        if key not in entries:
            one = example_kernel(kind, shape, dtype) if launches > 1 else k
            entries[key] = Entry(kind, shape, dtype, time_of(one))
    return Calibration(tuple(entries[key] for key in sorted(entries)))


def parse_calibration(text: str, source: str) -> Calibration:
    """A calibration from CSV text; every problem names ``source`` and the line."""
    entries = []
    lines: dict[tuple, int] = {}  # (kind, shape, dtype) -> the line that gave it
    header_seen = False
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        cells = [c.strip() for c in line.split(",")]
        where = f"{source}, line {number}"
        if not header_seen:
            if tuple(cells) != HEADER:
                raise SpecError(f"{where}: expected the header {','.join(HEADER)!r}, got {shown(line)}")
            header_seen = True
            continue
        if len(cells) != len(HEADER):
            raise SpecError(f"{where}: expected {len(HEADER)} fields ({','.join(HEADER)}), got {len(cells)}")
        kind, shape_text, dtype, time_text = cells
        if kind not in KINDS:
            raise SpecError(f"{where}: kind = {shown(kind)}: must be one of {', '.join(KINDS)}")
        if dtype not in DTYPES:
            raise SpecError(f"{where}: dtype = {shown(dtype)}: must be one of {', '.join(DTYPES)}")
        try:
            shape = tuple(int(x) for x in shape_text.split("x"))
            time_us = float(time_text)
        except ValueError:
            raise SpecError(f"{where}: shape {shown(shape_text)} or time_us {shown(time_text)} is not a "
                            f"number") from None
        if len(shape) != KINDS[kind] or min(shape[:5]) < 1:
            raise SpecError(f"{where}: shape {shown(shape_text)}: {kind} takes {KINDS[kind]} positive integers"
                            + (" (the last, causal, 0 or 1)" if kind.startswith("attention") else ""))
        if kind.startswith("attention") and shape[5] not in (0, 1):
            raise SpecError(f"{where}: shape {shown(shape_text)}: causal = {shape[5]}: must be 0 or 1")
        if max(shape) > MAX_DIM:
            raise SpecError(f"{where}: shape {shown(shape_text)}: numbers must be at most 2**53")
        if not (time_us * US > 0 and math.isfinite(time_us)):
            raise SpecError(f"{where}: time_us = {clip(time_text)}: must be a finite number > 0")
        key = (kind, shape, dtype)
        if key in lines:
            raise SpecError(f"{where}: {kind} {shown(shape_text)} {dtype} is given twice (lines {lines[key]} and "
                            f"{number}); keep one measurement per kernel")
        lines[key] = number
        entries.append(Entry(kind, shape, dtype, time_us * US, row=number))
    if not entries:
        raise SpecError(f"{source}: no measured kernels (expected the header {','.join(HEADER)!r} and rows)")
    return Calibration(tuple(entries), source=source)


def check_peaks(calibration: Calibration, gpu: GpuSpec) -> None:
    """Refuse the first row of ``calibration`` faster than ``gpu``'s datasheet peak (module
    docstring), naming the row, the rate it implies and the peak."""
    for index, e in enumerate(calibration.entries, start=1):
        kernel = example_kernel(e.kind, e.shape, e.dtype)
        if e.kind == "elementwise":
            work, peak, what, unit = kernel.bytes, gpu.hbm_bandwidth_Bps, "HBM bandwidth", "TB/s"
        else:
            fp8 = e.dtype == "fp8" and gpu.peak_fp8_flops is not None
            work, peak, unit = kernel.flops, gpu.peak_fp8_flops if fp8 else gpu.peak_bf16_flops, "TFLOP/s"
            what = f"dense {'FP8' if fp8 else 'BF16'} peak"
        if work / e.time_s > peak:
            where = f"line {e.row}" if e.row else f"row {index}"
            raise SpecError(f"{calibration.source or 'calibration'}, {where}: {e.kind} {'x'.join(map(str, e.shape))} "
                            f"{e.dtype} in {e.time_s / US:.4g} us is {work / e.time_s / 1e12:.4g} {unit}, faster "
                            f"than the {what} of {gpu.name} ({peak / 1e12:.4g} {unit}); it cannot take less than "
                            f"{work / peak / US:.4g} us")


def read_calibration(path: str | Path) -> Calibration:
    """Read a calibration CSV file (``--calibration``)."""
    return parse_calibration(read_text(path, f"--calibration {path}", MAX_CSV_BYTES), str(path))
