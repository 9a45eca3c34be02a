"""The compiled component search (through :class:`~simtrain.network.sharing.ComponentSearch` and
its machine code) equals connected components from scratch (networkx)."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simtrain.machine_code import NativeFunction
from simtrain.network.flow_kernels import COMPONENT
from simtrain.network.flowtable import PathTable
from simtrain.network.sharing import ComponentSearch

pytestmark = pytest.mark.quick


def _components_from_scratch(active: dict[int, int], dirty: set[int], paths: list[frozenset[int]],
                             sizes: list[int]):
    """The same answer as :class:`ComponentSearch`, from networkx's connected components of the
    path-link graph."""
    g = nx.Graph()
    g.add_nodes_from(("link", link) for link in dirty)
    for p in active:
        g.add_edges_from((("path", p), ("link", link)) for link in paths[p])
    found, links = set(), set()
    for part in nx.connected_components(g):
        if any(("link", link) in part for link in dirty):
            found |= {n[1] for n in part if n[0] == "path"}
            links |= {n[1] for n in part if n[0] == "link"}
    pairs = sum(n * sizes[p] for p, n in active.items())
    if sum(active[p] * sizes[p] for p in found) > pairs // 2:
        return None
    return sorted(found), sorted(links)


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_component_equals_connected_components_from_scratch(data):
    """The compiled search (a path may repeat a link; the changed links are those of an idle
    path) against networkx, searched twice on its kept scratch arrays."""
    num_links = data.draw(st.integers(1, 12))
    routes = list({tuple(data.draw(st.lists(st.integers(0, num_links - 1), min_size=1, max_size=5))): None
                   for _ in range(data.draw(st.integers(1, 10)))})  # distinct, as interned
    paths = [frozenset(r) for r in routes]
    sizes = [len(r) for r in routes]
    active = {p: n for p, n in enumerate(data.draw(st.lists(st.integers(0, 3), min_size=len(paths),
                                                            max_size=len(paths)))) if n}
    dirty = data.draw(st.sets(st.integers(0, num_links - 1), min_size=1, max_size=3))
    table = PathTable({(f"u{i}", f"v{i}"): i for i in range(num_links)})
    ids = [table.intern([(f"u{i}", f"v{i}") for i in r]) for r in routes + [tuple(sorted(dirty))]]
    assert ids[:-1] == list(range(len(routes)))
    changed = np.array(ids[-1:], dtype=np.int64)  # (an idle path, or an active one with those links)
    counts = np.zeros(len(table), dtype=np.int64)
    for p, n in active.items():
        counts[p] += n
    search = ComponentSearch(num_links)
    want = _components_from_scratch(active, dirty, paths, sizes)
    for _ in range(2):
        got = search(np.flatnonzero(counts), counts, table, changed)
        assert (None if got is None else (got[0].tolist(), got[1].tolist())) == want
        assert not (search._lseen.any() or search._pseen.any() or search._per_link[0].any())  # left clear
    assert isinstance(COMPONENT.component._fast, NativeFunction)
