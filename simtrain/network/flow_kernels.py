"""The flow model's compiled functions, by name, through their saved machine code (:mod:`simtrain.kernels`).

:data:`CORE` names :mod:`~simtrain.network.flowcore`'s functions, :data:`CLASSES`
:mod:`~simtrain.network.flowclass`'s, :data:`AHEAD`
:mod:`~simtrain.network.flowahead`'s, :data:`FILL` :mod:`~simtrain.network.maxmin_fill`'s and
:data:`COMPONENT` :mod:`~simtrain.network.flowcomponent`'s,
without importing them (and numba); the flow model calls them as it would call numba's
dispatchers.
"""

from __future__ import annotations

from pathlib import Path

from simtrain.kernels import Kernels

__all__ = ["CORE", "CLASSES", "AHEAD", "FILL", "COMPONENT", "SOURCES"]

_HERE = Path(__file__).resolve().parent
#: the files the functions' code comes from (their constants and the tolerance they share)
SOURCES = tuple(_HERE / f for f in ("flowcore.py", "flowclass.py", "flowheap.py", "flowahead.py", "flow_layout.py", "flow_jit.py",
                                    "maxmin.py", "maxmin_fill.py", "flowcomponent.py"))
CORE = Kernels("simtrain.network.flowcore", SOURCES)
CLASSES = Kernels("simtrain.network.flowclass", SOURCES)
AHEAD = Kernels("simtrain.network.flowahead", SOURCES)
FILL = Kernels("simtrain.network.maxmin_fill", SOURCES)
COMPONENT = Kernels("simtrain.network.flowcomponent", SOURCES)
