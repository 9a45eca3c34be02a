"""Rank replicas: in an unfolded run, a rank whose program is another's up to the ranks it names
copies that program instead of being lowered again.

Every rank of one pipeline position runs the same actions on the same costs; its ops differ from
those of the first such rank (the *source*) only in what names ranks: the rank itself, the group
sets of its collectives and transfers (its own TP, CP, DP, EP groups and pipeline pairs), the
collectives' keys (which hold the group), the transfers' peers, the op ids its dependencies
refer to and the pipeline its transfers belong to. A replica copies the source's columns with
these renamed, as a whole (:meth:`RankReplicas.copy`): no cost model, no group look-up and no
Python per op except one per collective key. A rank lowered in full (a source, or one that has
none) is taken out of the table again and queued like a copy of itself, so that every column
grows once, at the end (:meth:`RankReplicas.flush`), instead of once per rank: growing a column
of millions of values rank by rank moves it again and again.

What else a lowering reads of a rank makes its :func:`symmetry` key: the pipeline position and,
with expert parallelism, how many ranks of its EP group share a node (the all-to-all's bytes
depend on it). Folded runs, perturbed GPUs and skewed routing (each EP position its own program)
lower every rank. A source is kept only for a key that other ranks share; one whose keys or peers
do not name its own groups, or whose group sets cannot be renamed one to one for a rank, is not
copied for it. ``tests/workload/test_replicas.py`` checks that a replicated program equals the
one lowered rank by rank, column for column.
"""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Hashable
from dataclasses import dataclass
from itertools import repeat
from typing import Protocol, cast

import numpy as np

from simtrain.topology.mesh import DeviceMesh
from simtrain.workload.emit import Emitter
from simtrain.workload.moe_block import ep_ranks_per_node
from simtrain.workload.program import STREAMS, TYPED, Key, Program

#: A PP transfer's key (as :mod:`simtrain.workload.lower` names it): (pipeline group, step,
#: sending stage, micro-batch, "act" or "grad"); a receiver may name a stage that is None, which
#: no send has.
SendKey = tuple[int, int, int | None, int, str]
#: How a group set of a source's program is found again for another rank: ("dim", dimension) or
#: ("pairs", sending pipeline rank, receiving pipeline rank).
Recipe = tuple[str, str] | tuple[str, int, int]
#: The columns copied as they are.
_SAME = ("stream", "kind", "name_code", "stage", "layer", "mb", "duration_s", "flops", "nbytes", "comm_code", "peer_stage",
         "alloc", "free")
#: Every column of a copy, typed (bytes) or lists of objects, in the order a flush appends them.
_TYPED_COPIES = ("rank", *(c for c in _SAME if c in TYPED), "dep0", "dep1", "group_set", "peer")
_LIST_COPIES = (*(c for c in _SAME if c not in TYPED), "key")


class Lowering(Protocol):
    """What a replica reads and extends of the lowering that owns it."""

    em: Emitter
    prog: Program
    mesh: DeviceMesh
    needs: list[tuple[int, SendKey]]
    sends: dict[SendKey, int]
    send_log: list[SendKey]
    last_send: dict[int, int]
    pairs: dict[tuple[int, int, int], tuple[tuple[int, int], ...]]  # (rank, from, to pp rank) -> pairs

    def pairs_of(self, rank: int, src_pp: int, dst_pp: int) -> tuple[tuple[int, int], ...]: ...


@dataclass(frozen=True)
class _Renaming:
    """What a copy for another rank renames in a source's program (offsets relative to its first op)."""

    peer_at: np.ndarray  # per op: its peer's position in the pipeline group, or -1
    gids: tuple[int, ...]  # the group sets its ops use, in order of first use
    recipes: dict[int, frozenset[Recipe]]  # group set -> how the rank came to it (absent: names no rank of its own)
    key_sets: tuple[tuple[int, tuple[tuple[str, int], ...]], ...]  # (group set, its collectives' (stream, number))
    key_at: tuple[int, ...]  # offsets of the numbered collectives, in op order
    key_from: tuple[tuple[int, int], ...]  # per numbered collective: (index in key_sets, index in its list)
    keys: list[Key | None]  # per op: its one-off collective's key (shared by every rank), else None


@dataclass(frozen=True)
class _Source:
    """A lowered rank's program, laid out for copying (offsets are relative to its first op)."""

    rank: int
    size: int  # its ops
    same: tuple[tuple[str, bytes | list[object]], ...]  # (column, its values) of the columns copied as they are
    dep0: np.ndarray  # per op: its first dependency as an offset, or NONE/MORE
    dep0_own: np.ndarray  # 1 where dep0 is an op (rebased by adding the copy's first op), else 0
    dep1: np.ndarray
    dep1_own: np.ndarray
    group_set: np.ndarray  # per op: its group set, or -1
    peer: bytes  # per op: its peer
    keys: list[Key | None]  # per op: its key as lowered
    more: tuple[tuple[int, tuple[int, ...]], ...]  # (op offset, its dependencies as offsets)
    streams: tuple[tuple[int, np.ndarray], ...]  # (stream, its op ids as offsets)
    needs: tuple[tuple[int, SendKey], ...]  # (op offset, transfer it waits for)
    sends: tuple[tuple[SendKey, int], ...]  # (transfer, op offset)
    counters: tuple[tuple[int, int], ...]  # (stream, collectives numbered)
    last_send: int | None  # op offset
    static_bytes: float
    renaming: _Renaming | None  # None: no other rank copies it


def symmetry(em: Emitter, rank: int, moe: bool) -> Hashable:
    """What decides ``rank``'s program beyond the ranks it names: its pipeline position and, with
    MoE layers, its EP group's ranks per node."""
    return em.prog.pipeline_rank_of[rank], ep_ranks_per_node(em.mesh, rank) if moe else None


class RankReplicas:
    """Sources by symmetry key, and the copies made from them, queued until :meth:`flush`."""

    def __init__(self, lw: Lowering, moe: bool) -> None:
        self.lw, self.moe = lw, moe
        self._sources: dict[Hashable, _Source | None] = {}  # None: that key's first rank cannot be copied
        self._key_of: dict[int, Hashable] = {}  # simulated rank -> its symmetry key (filled at first use)
        self._sharing: Counter[Hashable] = Counter()  # symmetry key -> the simulated ranks that have it
        # (source rank, its group set, the copy's) -> the keys of the source's collectives on it, renamed
        self._key_lists: dict[tuple[int, int, int], list[Key]] = {}
        # queued ranks' columns, not in the table yet: column -> its values, in rank order
        self._typed: dict[str, list[bytes]] = {c: [] for c in _TYPED_COPIES}
        self._lists: dict[str, list[object]] = {c: [] for c in _LIST_COPIES}
        self._more: dict[int, list[int]] = {}  # their ops' dependency lists beyond two
        self._pending = 0  # their ops
        self.copied = 0  # ranks copied from another's program

    def copy(self, rank: int) -> bool:
        """Queue ``rank``'s program as a copy of its source's; False (nothing queued) where it
        has none."""
        source = self._sources.get(self._key(rank))
        if source is None:
            return False
        gmap = self._group_map(source, rank)
        if gmap is None:
            return False
        self._append(source, rank, gmap)
        self.copied += 1
        return True

    def offer(self, rank: int, start: int, needs_from: int, sends_from: int) -> None:
        """``rank`` was lowered in full from op ``start`` (its transfers' needs and sends from
        those indices of the lowering's lists): take it out of the table and queue it; keep it
        as the source of its symmetry key where other ranks share the key and it has none yet."""
        key = self._key(rank)
        keep = key not in self._sources and self._sharing[key] > 1
        source = _capture(self.lw, rank, start, needs_from, sends_from, renamed=keep)
        if key not in self._sources:
            self._sources[key] = source if source.renaming is not None else None
        self._append(source, rank, None)

    def _key(self, rank: int) -> Hashable:
        """``rank``'s :func:`symmetry` key (every simulated rank's found and counted at the first call)."""
        if not self._key_of:
            em = self.lw.em
            self._key_of = {r: symmetry(em, r, self.moe) for r in em.prog.pipeline_rank_of}
            self._sharing.update(self._key_of.values())
        return self._key_of[rank]

    def flush(self) -> None:
        """Append the queued ranks' columns to the table, each column at once."""
        table = self.lw.prog.ops
        for column, chunks in self._typed.items():
            getattr(table, column).frombytes(b"".join(chunks))
            chunks.clear()
        for column, values in self._lists.items():
            getattr(table, column).extend(values)
            values.clear()
        table.more.update(self._more)
        self._more = {}
        self._pending = 0

    def _group_map(self, source: _Source, rank: int) -> dict[int, int] | None:
        """The source's group sets -> ``rank``'s (registered in the order the source first used
        them, as lowering ``rank`` would), or None where a group set's recipes disagree."""
        wanted: list[tuple[int, tuple[tuple[int, ...], ...] | None]] = []
        renaming = cast(_Renaming, source.renaming)  # (a kept source has one)
        for gid in renaming.gids:
            recipes = renaming.recipes.get(gid)
            if recipes is None:
                wanted.append((gid, None))
                continue
            found = {self._groups(recipe, rank) for recipe in recipes}
            if len(found) != 1:
                return None
            wanted.append((gid, found.pop()))
        prog = self.lw.prog
        return {gid: gid if groups is None else prog.group_set_id(groups) for gid, groups in wanted}

    def _groups(self, recipe: Recipe, rank: int) -> tuple[tuple[int, ...], ...]:
        if recipe[0] == "dim":
            return self.lw.em.groups(str(recipe[1]), rank)
        _, src, dst = cast("tuple[str, int, int]", recipe)
        return self.lw.pairs_of(rank, src, dst)

    def _append(self, s: _Source, rank: int, gmap: dict[int, int] | None) -> None:
        """Queue the copy of source ``s`` for ``rank`` (group sets renamed by ``gmap``; None: the
        source's own copy) and record what the lowering keeps beside the columns."""
        lw = self.lw
        prog = lw.prog
        base = len(prog.ops) + self._pending
        self._pending += s.size
        typed, lists = self._typed, self._lists
        typed["rank"].append(array("i", [rank]).tobytes() * s.size)
        for column, values in s.same:
            if isinstance(values, bytes):
                typed[column].append(values)
            else:
                lists[column].extend(values)
        typed["dep0"].append((s.dep0 + s.dep0_own * base).astype(np.intc).tobytes())
        typed["dep1"].append((s.dep1 + s.dep1_own * base).astype(np.intc).tobytes())
        if gmap is None:
            typed["group_set"].append(s.group_set.astype(np.intc).tobytes())
            typed["peer"].append(s.peer)
            keys = s.keys
        else:
            renaming = cast(_Renaming, s.renaming)  # (only a kept source is copied for another rank)
            lut = np.full(max(gmap, default=0) + 2, -1, dtype=np.intc)  # the last entry: no group set (-1)
            for old, new in gmap.items():
                lut[old] = new
            typed["group_set"].append(lut[s.group_set].tobytes())
            peers = np.array([*lw.em.pp_group(rank), -1], dtype=np.intc)  # the last entry: no peer (-1)
            typed["peer"].append(peers[renaming.peer_at].tobytes())
            keys = self._keys(s.rank, renaming, gmap)
        lists["key"].extend(keys)
        members = prog.members  # a rank's keys are distinct: counted in one pass, in op order
        counted: list[Key] = [k for k in keys if k is not None]
        members.update(zip(counted, map((1).__add__, map(members.get, counted, repeat(0)))))
        more = self._more  # (a rank lowered in full meanwhile numbers its ops from the table's end)
        for offset, deps in s.more:
            more[base + offset] = [base + d for d in deps]
        for stream, ids in s.streams:
            prog.order[(rank, stream)] = array("i", (ids + base).astype(np.intc).tobytes())
        pipeline = lw.em.pp_group(rank)[0]
        lw.needs.extend((base + offset, _moved(need, pipeline)) for offset, need in s.needs)
        for send, offset in s.sends:
            moved = _moved(send, pipeline)
            lw.sends[moved] = base + offset
            lw.send_log.append(moved)
        if s.last_send is not None:
            lw.last_send[rank] = base + s.last_send
        counters = lw.em._counters
        for stream, count in s.counters:
            counters[(rank, stream)] = count
        prog.static_bytes[rank] = s.static_bytes

    def _keys(self, source: int, r: _Renaming, gmap: dict[int, int]) -> list[Key | None]:
        """The keys of a copy of rank ``source``'s program, per op: each numbered collective's
        with the copy's group, held once per (source, group set, renamed group set)."""
        prog = self.lw.prog
        sets, cache = prog.group_sets, self._key_lists
        lists = []
        for gid, parts in r.key_sets:
            new = gmap[gid]
            held = cache.get((source, gid, new))
            if held is None:
                first = sets[new][0]
                held = cache[(source, gid, new)] = prog.shared_keys([(stream, first, k) for stream, k in parts])
            lists.append(held)
        keys = r.keys.copy()
        for offset, (i, j) in zip(r.key_at, r.key_from):
            keys[offset] = lists[i][j]
        return keys


def _moved(send: SendKey, pipeline: int) -> SendKey:
    """Transfer ``send`` in pipeline group ``pipeline``."""
    _, step, stage, mb, what = send
    return pipeline, step, stage, mb, what


def _capture(lw: Lowering, rank: int, start: int, needs_from: int, sends_from: int, renamed: bool) -> _Source:
    """The program of ``rank`` (ops ``start:``, the last in the table), taken out of the table
    and the lowering's records; with ``renamed``, also what a copy for another rank renames
    (:func:`_renaming`)."""
    prog = lw.prog
    table = prog.ops
    end = len(table)
    deps = [table.column(c)[start:end].astype(np.int64) for c in ("dep0", "dep1")]
    more = tuple((i - start, tuple(d - start for d in ds)) for i, ds in table.more.items() if start <= i < end)
    if any(bool(np.any((d >= 0) & (d < start))) for d in deps) or any(d < 0 for _, ds in more for d in ds):
        raise AssertionError(f"rank {rank}'s program waits for another rank's op")  # lowering links ranks at the end
    gids = table.column("group_set")[start:end].astype(np.int64)
    keys = table.key[start:end]
    last = lw.last_send.get(rank)
    # the rank's queues in the order they were made: the dict's last, since the rank was lowered last
    streams: list[tuple[int, array[int]]] = []
    for r, stream in reversed(prog.order.keys()):
        if r != rank:
            break
        streams.insert(0, (stream, prog.order[(r, stream)]))
    source = _Source(
        rank, end - start,
        tuple((c, getattr(table, c)[start:end].tobytes() if c in TYPED else getattr(table, c)[start:end])
              for c in _SAME),
        np.where(deps[0] >= 0, deps[0] - start, deps[0]), (deps[0] >= 0).astype(np.int64),
        np.where(deps[1] >= 0, deps[1] - start, deps[1]), (deps[1] >= 0).astype(np.int64),
        gids, table.peer[start:end].tobytes(), keys, more,
        tuple((s, np.frombuffer(q, dtype=np.intc).astype(np.int64) - start) for s, q in streams),
        tuple((op - start, need) for op, need in lw.needs[needs_from:]),
        tuple((send, lw.sends[send] - start) for send in lw.send_log[sends_from:]),
        tuple((s, lw.em._counters[(rank, s)]) for s in range(len(STREAMS)) if (rank, s) in lw.em._counters),
        None if last is None else last - start, prog.static_bytes[rank],
        _renaming(lw, rank, table.peer[start:end], gids, keys) if renamed else None)
    _take_out(lw, start, needs_from, sends_from, keys)
    return source


def _renaming(lw: Lowering, rank: int, peers: array[int], gids: np.ndarray, keys: list[Key | None]) -> _Renaming | None:
    """What a copy of ``rank``'s program for another rank renames, or None where a copy could
    not: a peer outside its pipeline group, or a key that does not hold its group set's first
    group."""
    pp = lw.em.pp_group(rank)
    if not {p for p in peers if p >= 0} <= set(pp):
        return None
    recipes: dict[int, set[Recipe]] = {}
    for (dim, r), (_, gid) in lw.em._group_ids.items():
        if r == rank:
            recipes.setdefault(gid, set()).add(("dim", dim))
    for (r, src, dst), pairs in lw.pairs.items():
        if r == rank:
            recipes.setdefault(lw.prog.group_set_id(pairs), set()).add(("pairs", src, dst))
    by_set: dict[int, list[tuple[str, int]]] = {}
    key_at: list[int] = []
    key_from: list[tuple[int, int]] = []
    one_off: list[Key | None] = []
    sets = lw.prog.group_sets
    for offset, key in enumerate(keys):
        if key is None or len(key) == 2:  # none, or one-off (every rank's)
            one_off.append(key)
            continue
        one_off.append(None)
        gid = int(gids[offset])
        if gid not in recipes or key[1] != sets[gid][0] or not isinstance(key[2], int):
            return None
        parts = by_set.setdefault(gid, [])
        key_at.append(offset)
        key_from.append((gid, len(parts)))
        parts.append((str(key[0]), key[2]))
    order = {gid: i for i, gid in enumerate(by_set)}
    uniq, first = np.unique(gids, return_index=True)
    return _Renaming(np.array([pp.index(p) if p >= 0 else -1 for p in peers], dtype=np.int64),
                     tuple(int(g) for g in uniq[np.argsort(first)] if g >= 0),
                     {g: frozenset(r) for g, r in recipes.items()},
                     tuple((gid, tuple(parts)) for gid, parts in by_set.items()), tuple(key_at),
                     tuple((order[g], j) for g, j in key_from), one_off)


def _take_out(lw: Lowering, start: int, needs_from: int, sends_from: int, keys: list[Key | None]) -> None:
    """Remove ops ``start:`` from the table and what the lowering recorded of them: their
    dependency lists, transfers' needs and sends, and their keys' member counts (a key left with
    none is dropped, so that its copy enters the members where it did)."""
    table, members = lw.prog.ops, lw.prog.members
    for column in _TYPED_COPIES:
        del getattr(table, column)[start:]
    for column in _LIST_COPIES:
        del getattr(table, column)[start:]
    for i in [i for i in table.more if i >= start]:  # (queued ranks keep theirs apart)
        del table.more[i]
    del lw.needs[needs_from:]
    del lw.send_log[sends_from:]
    for key in keys:
        if key is None:
            continue
        left = members[key] - 1
        if left:
            members[key] = left
        else:
            del members[key]


__all__ = ["RankReplicas", "symmetry"]
