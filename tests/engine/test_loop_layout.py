"""The compiled loop's layout: one offset index per named array, none shared, and the arrays
:func:`~simtrain.engine.priced.run_priced` lays out end to end, as views of one array."""

from __future__ import annotations

import numpy as np
import pytest

from simtrain.engine import loop_layout as layout
from simtrain.engine.priced import _alloc


def _indices() -> dict[str, int]:
    return {name[2:]: value for name, value in vars(layout).items() if name.startswith("K_") and name != "K_COUNT"}


@pytest.mark.quick
def test_every_named_array_has_its_own_index():
    k = _indices()
    assert sorted(k.values()) == list(range(layout.K_COUNT))
    assert set(layout.INTS) | set(layout.FLOATS) <= set(k) and not set(layout.INTS) & set(layout.FLOATS)
    codes = [layout.R_HEAD, layout.R_COUNT, layout.R_RESUMING, layout.R_EXEC, layout.R_REC, layout.R_SEQ,
             layout.R_SIZE, layout.R_STATUS, layout.R_INST, layout.R_OP]
    assert codes == list(range(10))
    assert len({layout.COMPUTE, layout.P2P, layout.COLLECTIVE}) == 3 and len({layout.OK, layout.RAN_TWICE,
                                                                              layout.BUDGET}) == 3


@pytest.mark.quick
def test_alloc_lays_arrays_end_to_end_as_views():
    o = np.zeros(layout.K_COUNT, np.int64)
    out, views = _alloc(dict(ptr=2, ops=3, srank=2), np.int32, o)
    views["ptr"][:] = 7, 8
    views["srank"][:] = -1
    assert out.dtype == np.int32 and out.tolist() == [7, 8, 0, 0, 0, -1, -1]
    assert (o[layout.K_ptr], o[layout.K_ops], o[layout.K_srank]) == (0, 2, 5)
