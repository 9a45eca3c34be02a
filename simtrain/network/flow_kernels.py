"""The flow model's compiled functions, by name, through their saved machine code (:mod:`simtrain.kernels`).

:data:`CORE` names :mod:`~simtrain.network.flowcore`'s functions and :data:`AHEAD`
:mod:`~simtrain.network.flowahead`'s, without importing them (and numba); the flow model calls
them as it would call numba's dispatchers.
"""

from __future__ import annotations

from pathlib import Path

from simtrain.kernels import Kernels

__all__ = ["CORE", "AHEAD", "SOURCES"]

_HERE = Path(__file__).resolve().parent
#: the files the functions' code comes from (their constants and the tolerance they share)
SOURCES = tuple(_HERE / f for f in ("flowcore.py", "flowahead.py", "flow_layout.py", "maxmin.py"))
CORE = Kernels("simtrain.network.flowcore", SOURCES)
AHEAD = Kernels("simtrain.network.flowahead", SOURCES)
