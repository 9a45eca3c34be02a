"""Units. Everything inside simtrain is SI: seconds, bytes, FLOP, bytes/s, FLOP/s.

Non-SI values appear only at the edges (files, flags, printed tables), always with the unit in the
name (``nic_gbps``, ``hbm_gib``), and are converted with the helpers here.
"""

from __future__ import annotations

KiB = 2**10
MiB = 2**20
GiB = 2**30
TiB = 2**40
KB = 1e3
MB = 1e6
GB = 1e9
TB = 1e12
TFLOPS = 1e12  # FLOP/s
MS = 1e-3  # one millisecond in seconds
US = 1e-6  # one microsecond in seconds
NS = 1e-9
US_PER_S = 1e6  # microseconds per second (trace timestamps)
NS_PER_S = 1e9  # nanoseconds per second (trace timestamps' resolution)
BYTES_BF16 = 2
BYTES_FP32 = 4


def gbps_to_Bps(gbps: float) -> float:
    """Gigabits per second (network convention, 400 Gb/s) to bytes per second."""
    return gbps * GB / 8


def GBps_to_Bps(GBps: float) -> float:
    """Gigabytes per second (NVLink convention, 450 GB/s) to bytes per second."""
    return GBps * GB


def us_to_s(us: float) -> float:
    """Microseconds to seconds."""
    return us * US
