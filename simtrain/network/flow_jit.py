"""How the flow model's compiled functions are compiled: by numba, cached, without numba's runtime
(they allocate nothing), where this numba has that option."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

from numba import njit
from numba.core.options import DefaultOptions

__all__ = ["OPTIONS", "compiled"]

_F = TypeVar("_F", bound=Callable[..., Any])
#: numba's options: cached; without its runtime where this numba has the option
OPTIONS: dict[str, bool] = {"cache": True, **({"_nrt": False} if hasattr(DefaultOptions, "_nrt") else {})}


def compiled(fn: _F) -> _F:
    """``fn`` compiled with :data:`OPTIONS`."""
    return cast(_F, njit(**OPTIONS)(fn))  # type: ignore[call-overload]  # (_nrt: not in the stubs)
