"""Device mesh: the rank grid of a parallel layout and its communication groups.

Ranks are laid out by an order string (:mod:`simtrain.specs.order`), innermost dimension first,
as Megatron-LM's ``RankGenerator`` does (``megatron/core/parallel_state.py``, default order
``tp-cp-ep-dp-pp``): the innermost dimension has stride 1, so its groups hold consecutive ranks
and land in one node.

Dense layers (attention and dense MLPs) use the grid ``tp x cp x dp x pp``. MoE layers reuse the
same GPUs regrouped as ``etp x ep x edp x pp`` (expert tensor, expert, expert data parallel) with
``edp = world / (etp * ep * pp)``: Megatron's MoE parallel folding, where EP is carved out of the
attention layers' DP x CP ranks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from simtrain.errors import SpecError
from simtrain.specs.order import DEFAULT_ORDER, parse_order


@dataclass(frozen=True)
class Grid:
    """One rank grid: ``sizes`` per dimension, ``dims`` innermost first."""

    dims: tuple[str, ...]
    sizes: tuple[int, ...]

    @property
    def world(self) -> int:
        return int(np.prod(self.sizes))

    def _array(self) -> np.ndarray:
        # numpy's last axis is the fastest-varying one: reverse so the innermost dim comes last.
        return np.arange(self.world).reshape(tuple(reversed(self.sizes)))

    def _axis(self, dim: str) -> int:
        return len(self.dims) - 1 - self.dims.index(dim)

    def group_array(self, dim: str) -> np.ndarray:
        """Every communication group along ``dim`` as the rows of one integer array (groups x
        size), ordered by their smallest rank: O(world) numpy, no per-rank Python loop."""
        arr = self._array()
        axis = self._axis(dim)
        lines = np.moveaxis(arr, axis, -1).reshape(-1, arr.shape[axis])
        return lines[np.argsort(lines[:, 0], kind="stable")]

    def groups(self, dim: str) -> list[list[int]]:
        """Every communication group along ``dim``, ordered by their smallest rank."""
        return self.group_array(dim).tolist()

    def coords(self, rank: int) -> dict[str, int]:
        """The index of ``rank`` along each dimension."""
        out = {}
        for dim, size in zip(self.dims, self.sizes):
            out[dim] = rank % size
            rank //= size
        return out

    def stride(self, dim: str) -> int:
        """The rank distance between neighbours along ``dim`` (the product of the sizes of the
        dimensions inside it)."""
        return math.prod(self.sizes[:self.dims.index(dim)])

    def group_of(self, dim: str, rank: int) -> list[int]:
        """The group along ``dim`` that contains ``rank``: ``size`` ranks ``stride`` apart."""
        if dim not in self.dims:
            raise KeyError(dim)
        i = self.dims.index(dim)
        size, stride = self.sizes[i], math.prod(self.sizes[:i])
        base = rank - (rank // stride) % size * stride
        return list(range(base, base + size * stride, stride))


@dataclass(frozen=True)
class DeviceMesh:
    """The dense grid and the folded expert grid of one layout, with GPU placement.

    Rank r runs on GPU r; GPU g sits in node ``g // gpus_per_node``.
    """

    dense: Grid
    expert: Grid
    gpus_per_node: int

    @property
    def world(self) -> int:
        return self.dense.world

    def node_of(self, rank: int) -> int:
        return rank // self.gpus_per_node

    def dims(self) -> list[str]:
        """Dimensions users see: tp, cp, dp, pp, and ep, etp, edp when experts are split."""
        out = ["tp", "cp", "dp", "pp"]
        if self.expert.sizes[self.expert.dims.index("ep")] > 1 or \
                self.expert.sizes[self.expert.dims.index("tp")] != self.dense.sizes[self.dense.dims.index("tp")]:
            out += ["ep", "etp", "edp"]
        return out

    def _grid_dim(self, dim: str) -> tuple[Grid, str]:
        if dim in ("tp", "cp", "dp", "pp"):
            return self.dense, dim
        return self.expert, {"ep": "ep", "etp": "tp", "edp": "dp"}[dim]

    def groups(self, dim: str) -> list[list[int]]:
        grid, d = self._grid_dim(dim)
        return grid.groups(d)

    def group_of(self, dim: str, rank: int) -> list[int]:
        grid, d = self._grid_dim(dim)
        return grid.group_of(d, rank)

    def coords(self, rank: int) -> dict[str, int]:
        if not 0 <= rank < self.world:
            raise SpecError(f"rank {rank}: must be in 0..{self.world - 1}")
        c = {d: self.dense.coords(rank)[d] for d in ("tp", "cp", "dp", "pp")}
        if "ep" in self.dims():
            e = self.expert.coords(rank)
            c.update(ep=e["ep"], etp=e["tp"], edp=e["dp"])
        return c

    def intra_node(self, dim: str) -> bool:
        """True when every group along ``dim`` stays inside one node."""
        grid, d = self._grid_dim(dim)
        nodes = grid.group_array(d) // self.gpus_per_node
        return bool((nodes.min(axis=1) == nodes.max(axis=1)).all())


def build_mesh(tp: int, cp: int, dp: int, pp: int, ep: int = 1, etp: int | None = None,
               order: str = DEFAULT_ORDER, gpus_per_node: int = 8) -> DeviceMesh:
    """The mesh of a layout; ``etp`` defaults to ``tp`` (Megatron's expert-tensor-parallel default).

    The course notes' example, 16 GPUs with TP=CP=DP=PP=2:

    >>> mesh = build_mesh(tp=2, cp=2, dp=2, pp=2)
    >>> mesh.groups("cp")[:2], mesh.group_of("pp", 13), mesh.intra_node("pp")
    ([[0, 2], [1, 3]], [5, 13], False)
    """
    dims = parse_order(order)
    etp = tp if etp is None else etp
    world = tp * cp * dp * pp
    for name, value in (("tp", tp), ("cp", cp), ("dp", dp), ("pp", pp), ("ep", ep), ("etp", etp),
                        ("gpus_per_node", gpus_per_node)):
        if value < 1:
            raise SpecError(f"{name}={value}: must be >= 1")
    if world % (etp * ep * pp):
        raise SpecError(f"ep*etp*pp={ep * etp * pp} (ep={ep}, etp={etp}, pp={pp}) does not divide "
                        f"the world size tp*cp*dp*pp={world}; EP is folded from the DP x CP ranks")
    edp = world // (etp * ep * pp)
    dense_sizes = {"tp": tp, "cp": cp, "ep": 1, "dp": dp, "pp": pp}
    expert_sizes = {"tp": etp, "cp": 1, "ep": ep, "dp": edp, "pp": pp}
    return DeviceMesh(
        dense=Grid(dims, tuple(dense_sizes[d] for d in dims)),
        expert=Grid(dims, tuple(expert_sizes[d] for d in dims)),
        gpus_per_node=gpus_per_node,
    )


def mesh_report(mesh: DeviceMesh, rank: int | None = None) -> dict:
    """JSON-ready description: groups and intra-node flag per dimension, optional coordinates."""
    dims = mesh.dims()
    out = {
        "world": mesh.world,
        "gpus_per_node": mesh.gpus_per_node,
        "groups": {d: mesh.groups(d) for d in dims},
        "intra_node": {d: mesh.intra_node(d) for d in dims},
    }
    if rank is not None:
        out["rank"] = rank
        out["coords"] = mesh.coords(rank)
    return out
