"""Folding: which ranks a lowering simulates, and which ranks each of them stands for.

Ranks that run identical programs in identical network situations can be folded into one simulated
representative (design guide, section 3, "Scale"). Three levels:

* no folding: every rank is simulated;
* folding (the default): one pipeline group is simulated and each of its ranks stands for the
  ranks at its pipeline position in every pipeline group;
* folding by EP position (MoE routing skew, where each EP rank computes its own share of the
  tokens): one pipeline group per EP position, each standing for the pipeline groups whose ranks
  hold that EP position (in Megatron-LM's expert grid, ``megatron/core/parallel_state.py``). The
  ranks sharing a (pipeline index, EP index) run identical programs; a collective whose groups span
  several EP positions has several simulated members, which meet in the engine.

* folding around perturbed GPUs (a straggler, a slow node, another GPU generation;
  :mod:`simtrain.specs.perturbation`): the pipeline groups holding a GPU that computes differently
  are simulated apart from the others, together with every pipeline group that meets them in a
  collective of a layer (TP, CP, EP, expert TP: these wait for the slow GPU every layer); such
  connected sets that are perturbed alike (the same profile on the same positions) fold into one
  per position, and the other pipeline groups fold by their position in those groups, so that a
  representative meets the perturbed ones in the data-parallel collectives where its ranks would.

Folding by EP position or around perturbed GPUs needs each pipeline group to keep one position
along the pipeline, and the groups of every parallel dimension to fall either wholly inside one
representative's share or to be shared identically by several; a rank order where that fails is
simulated unfolded.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping

from simtrain.topology.mesh import DeviceMesh

#: One simulated pipeline group and the pipeline groups its ranks stand for (itself included).
FoldClass = tuple[list[int], list[list[int]]]

#: The dimensions whose collectives a representative joins (``dpcp``: DP including the CP ranks).
DIMS = ("tp", "cp", "ep", "etp", "dp", "edp", "dpcp")
#: The dimensions with a collective in every layer: a slow GPU holds up its whole group there.
LAYER_DIMS = ("tp", "cp", "ep", "etp")


def _group(mesh: DeviceMesh, dim: str, rank: int) -> tuple[int, ...]:
    if dim == "dpcp":
        return tuple(sorted({d for c in mesh.group_of("cp", rank) for d in mesh.group_of("dp", c)}))
    return tuple(mesh.group_of(dim, rank))


def _consistent(mesh: DeviceMesh, classes: list[FoldClass]) -> bool:
    """Whether, at every pipeline index and along every dimension, two representatives' sets of
    groups are either equal (one collective, several simulated members) or disjoint."""
    pp = len(classes[0][0])
    for dim in DIMS:
        for i in range(pp):
            owner: dict[tuple[int, ...], frozenset[tuple[int, ...]]] = {}
            for _, groups in classes:
                gs = frozenset(_group(mesh, dim, g[i]) for g in groups)
                for g in gs:
                    if owner.setdefault(g, gs) != gs:
                        return False
    return True


def _position(mesh: DeviceMesh, dim: str, rank: int) -> int:
    return _group(mesh, dim, rank).index(rank)


def components(mesh: DeviceMesh, touched: Iterable[int]) -> list[list[list[int]]]:
    """The pipeline groups holding a GPU of ``touched`` with, transitively, every pipeline group
    sharing a collective of a layer (:data:`LAYER_DIMS`) with one of them: one list per connected
    set, each in rank order, the sets in the order of their first rank."""
    groups = mesh.groups("pp")
    pipeline_of = {r: i for i, g in enumerate(groups) for r in g}
    seen: set[int] = set()
    out = []
    for start in sorted({pipeline_of[g] for g in touched}):
        if start in seen:
            continue
        seen.add(start)
        todo, found = [start], [start]
        while todo:
            for rank in groups[todo.pop()]:
                for dim in LAYER_DIMS:
                    for peer in _group(mesh, dim, rank):
                        p = pipeline_of[peer]
                        if p not in seen:
                            seen.add(p)
                            todo.append(p)
                            found.append(p)
        out.append([groups[i] for i in sorted(found)])
    return out


def reached(mesh: DeviceMesh, touched: Iterable[int]) -> list[list[int]]:
    """Every pipeline group of :func:`components`, in rank order."""
    return sorted(g for c in components(mesh, touched) for g in c)


def _around(mesh: DeviceMesh, touched: Mapping[int, Hashable]) -> list[FoldClass]:
    """Classes around perturbed GPUs (``touched``: GPU -> how it computes): the reached pipeline
    groups, one class per position in sets that are perturbed alike (the same profile on the same
    GPUs of the same positions, so their programs are the same), and the other groups folded by
    their position along every layer dimension (see the module docstring)."""
    def key(g: list[int]) -> tuple[int, ...]:
        return tuple(_position(mesh, dim, g[0]) for dim in LAYER_DIMS)

    alike: dict[tuple[Hashable, tuple[int, ...]], list[list[int]]] = {}  # (signature, position) -> groups
    inside = set()
    for comp in components(mesh, touched):
        signature = tuple((key(g), tuple(touched.get(r) for r in g)) for g in comp)
        for g in comp:
            inside.add(tuple(g))
            alike.setdefault((signature, key(g)), []).append(g)
    by_position: dict[tuple[int, ...], list[list[int]]] = {}
    for g in mesh.groups("pp"):
        if tuple(g) not in inside:
            by_position.setdefault(key(g), []).append(g)
    classes = [(gs[0], gs) for gs in alike.values()] + [(gs[0], gs) for gs in by_position.values()]
    return sorted(classes, key=lambda c: c[0][0])


def fold_classes(mesh: DeviceMesh, fold: bool, by_ep: bool,
                 touched: Mapping[int, Hashable] | None = None) -> list[FoldClass]:
    """The simulated pipeline groups with the pipeline groups each stands for, in rank order:
    all of them unfolded (``fold`` False), the first one for all, with ``by_ep`` one per EP
    position, or around the GPUs ``touched`` by a perturbation (GPU -> how it computes; unfolded
    where the layout does not allow it: see the module docstring)."""
    groups = mesh.groups("pp")
    unfolded = [(g, [g]) for g in groups]
    if not fold:
        return unfolded
    if touched:
        classes = _around(mesh, touched)
        return classes if _consistent(mesh, classes) else unfolded
    if not by_ep:
        return [(groups[0], groups)]
    by_position: dict[int, list[list[int]]] = {}
    for g in groups:
        positions = {mesh.expert.coords(r)["ep"] for r in g}
        if len(positions) != 1:
            return unfolded
        by_position.setdefault(positions.pop(), []).append(g)
    classes = [(gs[0], gs) for _, gs in sorted(by_position.items())]
    return classes if _consistent(mesh, classes) else unfolded
