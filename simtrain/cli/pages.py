"""The pages the command line's large arrays live on: 4 KiB pages unless its user says otherwise.

On Linux NumPy advises the kernel to back every array of 4 MiB or more with transparent huge
pages (``madvise(MADV_HUGEPAGE)``), and reads ``NUMPY_MADVISE_HUGEPAGE`` (0 or 1) at its import
to turn that off or on (NumPy's documentation, "Environment variables"). Where fresh huge pages
are slow to come by, each new array waits for them. Measured on a 2-core Linux VM (THP
``enabled`` and ``defrag`` both ``madvise``), the first touch of a new 43 MB array kept alive:

- with the advice, 8 to 13 ms for the first five, then 106 to 114 ms each;
- without it, 23 to 28 ms each.

A simulation allocates such arrays all along (an unfolded run's op table and timeline columns),
so on that machine ``benchmarks/bench_scale.py``'s S3 (5.4M operations) took 13.0 CPU seconds
with the advice and 9.9 without, and S1 with every output 3.06 and 2.46. On a machine whose huge
pages come fast the advice saves about 15 ms per such array instead. The command line turns it
off where ``NUMPY_MADVISE_HUGEPAGE`` is unset (its worker processes inherit the setting); any value
the user sets is NumPy's to apply. The library (:mod:`simtrain.api`) leaves NumPy as it finds it.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

VARIABLE = "NUMPY_MADVISE_HUGEPAGE"


def small_pages_unless_set(environ: MutableMapping[str, str] | None = None) -> bool:
    """Turn NumPy's huge-page advice off for this process and its children where ``VARIABLE`` is
    unset in ``environ`` (default ``os.environ``); whether it was turned off."""
    env = os.environ if environ is None else environ
    if env.get(VARIABLE) is not None:
        return False
    env[VARIABLE] = "0"
    import numpy

    for core in ("_core", "core"):  # (NumPy 2, NumPy 1) NumPy read the variable at its import
        advise = getattr(getattr(getattr(numpy, core, None), "multiarray", None), "_set_madvise_hugepage", None)
        if advise is not None:
            advise(False)
            break
    return True


__all__ = ["VARIABLE", "small_pages_unless_set"]
