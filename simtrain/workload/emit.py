"""Op emission: appends the ops of a lowering to one :class:`~simtrain.workload.program.Program`.

Compute ops are timed by the kernel model (or a calibration) once per distinct cost; collectives are
keyed so that the members of one group meet in the engine. With folding (the default) one representative rank per
pipeline rank is simulated: the ranks that share its pipeline position run identical programs,
and each collective it joins costs as much as the slowest of the groups it stands for. Folded by
EP position (:mod:`simtrain.workload.fold`), a representative stands for the ranks of the
pipeline groups given by :meth:`Emitter.stand_for`, and representatives whose groups along a
dimension are the same join one collective as its simulated members.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

from simtrain import costs
from simtrain.costs import KernelTimer, Shape
from simtrain.costs.calibration import Calibration
from simtrain.specs.gpu import GpuSpec
from simtrain.specs.model import ModelSpec
from simtrain.specs.parallel import ParallelSpec
from simtrain.topology.mesh import DeviceMesh
from simtrain.workload.program import KIND, STREAM, Key, OpRef, Program

T = TypeVar("T")
#: What an op's cost comes to: (FLOPs, bytes, seconds).
Priced = tuple[float, float, float]
_COMPUTE = STREAM["compute"]


class Emitter:
    """The program being built, with the caches and counters its ops need."""

    def __init__(self, model: ModelSpec, par: ParallelSpec, gpu: GpuSpec, mesh: DeviceMesh, fold: bool,
                 calibration: Calibration | None = None, speeds: dict[int, float] | None = None,
                 gpus: dict[int, GpuSpec] | None = None):
        self.model, self.gpu, self.mesh, self.fold = model, gpu, mesh, fold
        self.shape = Shape.of(par)
        self.timer = KernelTimer(gpu, calibration)
        # perturbed GPUs: speed factor and another GPU's kernel times (simtrain.specs.perturbation)
        self._speeds = speeds or {}
        self._gpus = gpus or {}
        self._calibration = calibration
        self._timers: dict[GpuSpec, KernelTimer] = {gpu: self.timer}
        self._perturbed: dict[tuple[GpuSpec, float, costs.OpCost], Priced] = {}  # (gpu, speed, cost) -> priced
        self.prog = Program()
        self.pp_groups = mesh.groups("pp")
        self._pp_group: dict[int, list[int]] = {}  # rank -> its pipeline group
        self._counters: dict[tuple[int, int], int] = {}  # (rank, stream) -> collectives so far
        self._stands_for: dict[int, list[list[int]]] = {}  # rank -> its pipeline groups (EP folding)
        self._group_cache: dict[tuple[str, int, int], tuple[tuple[int, ...], ...]] = {}
        self._time_cache: dict[costs.OpCost, float] = {}
        self._priced: dict[costs.OpCost, Priced] = {}  # cost -> flops, bytes, seconds
        # cost function and arguments -> its value
        self._memo: dict[tuple[Callable[..., object], tuple[object, ...]], object] = {}
        # (dim, rank) -> (groups, group-set id)
        self._group_ids: dict[tuple[str, int], tuple[tuple[tuple[int, ...], ...], int]] = {}

    # ---- groups ------------------------------------------------------------------------------
    def stand_for(self, rank: int, pp_groups: list[list[int]]) -> None:
        """Let simulated ``rank`` stand for the ranks at its pipeline position in ``pp_groups``."""
        self._stands_for[rank] = pp_groups

    @property
    def keys_name_their_rank(self) -> bool:
        """Whether a collective's key names its rank (folding without representatives standing for
        other ranks, :meth:`collective`): no other simulated rank then holds it, so it has one member."""
        return self.fold and not self._stands_for

    def pp_group(self, rank: int) -> list[int]:
        """``rank``'s pipeline group (do not change it: it is kept for the next call)."""
        group = self._pp_group.get(rank)
        if group is None:
            group = self._pp_group[rank] = self.mesh.group_of("pp", rank)
        return group

    def slices(self, rank: int) -> list[list[int]]:
        """The pipeline groups ``rank``'s program stands for (all of them when folding)."""
        given = self._stands_for.get(rank)
        if given is not None:
            return given
        if self.fold:
            return self.pp_groups
        return [self.pp_group(rank)]

    def groups(self, dim: str, rank: int) -> tuple[tuple[int, ...], ...]:
        """Groups along ``dim`` the op of ``rank`` stands for; ``dpcp`` = DP including CP ranks."""
        pp_index = self.prog.pipeline_rank_of[rank]
        cache_key = (dim, rank if not self.fold or self._stands_for else -1, pp_index)
        cached = self._group_cache.get(cache_key)
        if cached is not None:
            return cached
        groups, covered = [], set()
        for pp_group in self.slices(rank):
            member = pp_group[pp_index]
            if member in covered:  # groups along a dimension partition the ranks: its group is listed
                continue
            if dim == "edp":
                g = self.mesh.group_of("edp", member)
            elif dim == "dpcp":
                g = sorted({d for c in self.mesh.group_of("cp", member) for d in self.mesh.group_of("dp", c)})
            else:
                g = self.mesh.group_of(dim, member)
            covered.update(g)
            groups.append(tuple(g))
        out = self._group_cache[cache_key] = tuple(sorted(set(groups)))
        return out

    # ---- costs -------------------------------------------------------------------------------
    def cost(self, fn: Callable[..., T], *args: object) -> T:
        """A cost function of (model, shape, *args), computed once per distinct arguments."""
        key = (fn, args)
        value = self._memo.get(key)
        if value is None:
            value = self._memo[key] = fn(self.model, self.shape, *args)
        return cast(T, value)  # the memo holds what fn returned for these arguments

    def _time(self, cost: costs.OpCost) -> float:
        t = self._time_cache.get(cost)
        if t is None:
            t = self._time_cache[cost] = self.timer.time(cost)
        return t

    # ---- ops ---------------------------------------------------------------------------------
    def emit(self, rank: int, stream: str, kind: str, name: str, stage: int, layer: int, mb: int,
             deps: list[int | None] | list[int], cost: costs.OpCost | None = None, **kw: Any) -> OpRef:
        """Append one op of schedule stage ``stage``; ``None`` dependencies are dropped."""
        if None in deps:
            deps = [d for d in deps if d is not None]
        if cost is not None:
            kw["flops"], kw["nbytes"], kw["duration_s"] = self._priced.get(cost) or self._price(cost)
            if rank in self._speeds or rank in self._gpus:
                kw["duration_s"] = self._perturbed_price(rank, cost)[2]
        prog = self.prog
        return OpRef(prog.ops, prog.append(rank, STREAM[stream], KIND[kind], name, stage, layer, mb,
                                           deps=cast("list[int]", deps), **kw))  # its Nones dropped

    def _price(self, cost: costs.OpCost) -> Priced:
        """FLOPs, bytes and seconds of ``cost``, once per distinct cost (equal costs built apart
        share one entry)."""
        priced = self._priced[cost] = (cost.flops, cost.bytes, self._time(cost))
        return priced

    def _perturbed_price(self, rank: int, cost: costs.OpCost) -> Priced:
        """:meth:`_price` on perturbed GPU ``rank``: timed on its GPU (another generation's
        kernel model where ``--node-gpu`` gives one) and divided by its speed factor."""
        gpu, speed = self._gpus.get(rank, self.gpu), self._speeds.get(rank, 1.0)
        key = (gpu, speed, cost)
        priced = self._perturbed.get(key)
        if priced is None:
            timer = self._timers.get(gpu)
            if timer is None:
                timer = self._timers[gpu] = KernelTimer(gpu, self._calibration if gpu == self.gpu else None)
            priced = self._perturbed[key] = (cost.flops, cost.bytes, timer.time(cost) / speed)
        return priced

    def compute(self, rank: int, kind: str, name: str, stage: int, layer: int, mb: int,
                cost: costs.OpCost, last: int | None, **kw: Any) -> OpRef:
        """A compute op after op ``last`` (none: no dependency). The most frequent op: built
        here directly rather than through :meth:`emit`."""
        flops, nbytes, seconds = self._priced.get(cost) or self._price(cost)
        if (self._speeds or self._gpus) and (rank in self._speeds or rank in self._gpus):
            seconds = self._perturbed_price(rank, cost)[2]
        prog = self.prog
        return OpRef(prog.ops, prog.append(rank, _COMPUTE, KIND[kind], name, stage, layer, mb, seconds, flops, nbytes,
                                           deps=[last] if last is not None else [], **kw))

    def collective(self, rank: int, stream: str, dim: str, op_name: str, nbytes: float,
                   stage: int, layer: int, mb: int, deps: list[int | None] | list[int]) -> OpRef:
        """A collective ``op_name`` of ``nbytes`` over ``rank``'s groups along ``dim`` (its kind is
        its stream's name); ``None`` dependencies are dropped."""
        groups, gid = self._group_ids.get((dim, rank)) or self._group_and_id(dim, rank)
        counter = (rank, STREAM[stream])
        n = self._counters.get(counter, 0)
        self._counters[counter] = n + 1
        if not self.fold:
            key: Key = (stream, groups[0], n)
        elif self._stands_for:  # representatives standing for the same groups meet
            key = (stream, gid, n)
        else:
            key = (stream, rank, n)
        if None in deps:
            deps = [d for d in deps if d is not None]
        prog = self.prog
        return OpRef(prog.ops, prog.append(rank, counter[1], KIND[stream], f"{stream}.{op_name}", stage, layer, mb,
                                           0.0, 0.0, nbytes, op_name, gid, key, deps=cast("list[int]", deps)))

    def _group_and_id(self, dim: str, rank: int) -> tuple[tuple[tuple[int, ...], ...], int]:
        """:meth:`groups` and their group-set id, once per (dim, rank): hashing the groups of a
        folded op (every DP group of a stage) is what a collective's emission would otherwise
        spend its time on."""
        groups = self.groups(dim, rank)
        out = self._group_ids[(dim, rank)] = (groups, self.prog.group_set_id(groups))
        return out
