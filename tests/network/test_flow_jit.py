"""How the flow model's functions are compiled (:mod:`simtrain.network.flow_jit`)."""

from __future__ import annotations

import pytest
from numba.core.caching import NullCache

from simtrain.network.flow_jit import OPTIONS, compiled

pytestmark = pytest.mark.quick


@compiled
def _twice(x: int) -> int:
    return 2 * x


def test_a_compiled_function_runs_with_the_options_and_a_cache():
    assert _twice(21) == 42
    assert OPTIONS["cache"] is True and not isinstance(_twice._cache, NullCache)
    assert all(_twice.targetoptions.get(k) == v for k, v in OPTIONS.items() if k != "cache")
