"""A program's run on a network that prices every op up front, through the compiled loop of
:mod:`~simtrain.engine.compiled`: the program's columns and the ops' prices as arrays in, the
recorded spans out, as :mod:`~simtrain.engine.simulator` records them.

The network is asked ``fixed_duration`` once per distinct (communication, group set, bytes), the
key its own cache uses, before the run (the protocol's prices do not depend on the clock). Where
it answers None (it times the op as the run unfolds) or 0 (the SimPy engine ends such an op
within the call that starts it), the run is the SimPy engine's instead.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from simtrain.engine import compiled
from simtrain.network.interface import NetworkModel
from simtrain.workload.program import MORE, STREAM, OpRef, Program


class Recorded(NamedTuple):
    rows: np.ndarray  # op id, or ~id for a transfer's receiver span (int64)
    starts: np.ndarray
    ends: np.ndarray
    executed: int
    finished: np.ndarray  # op id -> done (uint8)
    status: int  # compiled.OK, RAN_TWICE or BUDGET
    status_op: int
    slowdown_s: dict[int, float]


def prices(program: Program, network: NetworkModel) -> tuple[np.ndarray, np.ndarray] | None:
    """Each communication op's price (s) and the ids of those ops, or None where one has none."""
    table = program.ops
    comm, gsets, nbytes = table.comm, table.group_set, table.nbytes
    ids = np.fromiter((i for i, c in enumerate(comm) if c is not None), dtype=np.int64)
    price = np.zeros(len(table))
    known: dict[tuple[str | None, int, float], float | None] = {}
    for i in ids.tolist():
        key = (comm[i], gsets[i], nbytes[i])
        t = known.get(key, -1.0)
        if t == -1.0:
            t = known[key] = network.fixed_duration(OpRef(table, i))
        if t is None or not t > 0:
            return None
        price[i] = t
    return price, ids


def run_priced(program: Program, price: np.ndarray, comm_ids: np.ndarray, max_events: int,
               comm_interference: float) -> Recorded:
    """Run ``program`` with its communication ops lasting ``price`` (their ids ``comm_ids``)."""
    table = program.ops
    n = len(table)
    keys = sorted(program.order)
    lengths = np.array([len(program.order[k]) for k in keys], dtype=np.int64)
    ptr = np.zeros(len(keys) + 1, dtype=np.int64)
    np.cumsum(lengths, out=ptr[1:])
    ops = np.concatenate([np.frombuffer(program.order[k], dtype=np.int32) for k in keys]) if keys \
        else np.zeros(0, np.int32)
    peer_col = table.column("peer")
    cls = np.zeros(n, dtype=np.int8)
    comm = table.comm
    p2p = np.array([i for i in comm_ids.tolist() if comm[i] == "p2p"], dtype=np.int64)
    coll = np.setdiff1d(comm_ids, p2p, assume_unique=True)
    cls[p2p] = compiled.P2P
    cls[coll] = compiled.COLLECTIVE
    # ranks as dense indices: the streams' and the transfers' receivers
    stream_ranks = np.array([r for r, _ in keys], dtype=np.int64)
    ranks, dense = np.unique(np.concatenate([stream_ranks, peer_col[p2p].astype(np.int64)]), return_inverse=True)
    srank = dense[:len(keys)].astype(np.int64)
    peer = np.full(n, -1, dtype=np.int64)
    peer[p2p] = dense[len(keys):]
    comp = np.full(len(ranks), -1, dtype=np.int64)
    for s, (_, stream) in enumerate(keys):
        if stream == STREAM["compute"]:
            comp[srank[s]] = s
    # collectives of several simulated members: their key as a dense id, and how many arrive
    need = np.ones(n, dtype=np.int64)
    coll_id = np.full(n, -1, dtype=np.int64)
    members, key_col = program.members, table.key
    key_ids: dict[object, int] = {}
    needs: list[int] = []
    for i in coll.tolist():
        k = key_col[i]
        m = members.get(k, 1)
        if m > 1:
            need[i] = m
            j = key_ids.get(k)
            if j is None:
                j = key_ids[k] = len(needs)
                needs.append(m)
            coll_id[i] = j
    key_off = np.zeros(len(needs) + 1, dtype=np.int64)
    np.cumsum(np.asarray(needs, dtype=np.int64), out=key_off[1:])
    # dependencies: beyond two, the list's index in dep1 and the lists as one array
    dep0 = table.column("dep0")
    dep1 = table.column("dep1").copy()
    more_ids = np.zeros(0, np.int64)
    more_ptr = np.zeros(1, np.int64)
    if table.more:
        lists = [table.more[i] for i in np.flatnonzero(dep0 == MORE).tolist()]
        dep1[dep0 == MORE] = np.arange(len(lists), dtype=np.int32)
        more_ptr = np.zeros(len(lists) + 1, np.int64)
        np.cumsum([len(x) for x in lists], out=more_ptr[1:])
        more_ids = np.fromiter((d for x in lists for d in x), dtype=np.int64, count=int(more_ptr[-1]))
    dur = table.column("duration_s")
    S, R = len(keys), len(ranks)
    nrec = n + len(p2p)
    ints = dict(ptr=ptr, ops=ops, srank=srank, comp=comp, cls=cls, dep0=dep0, dep1=dep1, more_ptr=more_ptr,
                more_ids=more_ids, need=need, peer=peer, coll=coll_id, key_off=key_off, heap=S, hpos=(S, -1),
                hs=S, htype=S, harg=S, reg=10, finished=n, sop=S, evalid=S, active=R, whead=(n, -1),
                wnext=(S, -1), rows=nrec, rq=S + 1, pend_cnt=len(needs), pend=int(key_off[-1]),
                inst_mem=len(coll), inst_off=len(coll) + 1, spos=S, wtail=(n, -1), qhead=(R, -1),
                qtail=(R, -1), qnext=(S, -1), qexists=R, scratch=S, max_events=np.array([max_events]))
    floats = dict(dur=dur, price=price, ht=S, send=S, sleft=S, st0=S, sslow=(S, 1.0), starts=nrec, ends=nrec,
                  sstart=S, slowdown=R, interference=np.array([comm_interference]),
                  factor=np.array([1.0 + comm_interference]))
    o = np.zeros(compiled.K_COUNT, np.int64)
    I, F = _flat(ints, np.int64, o), _flat(floats, np.float64, o)
    o[compiled.K_cap], o[compiled.K_nstreams] = S + 1, S
    compiled.run_loop(I, F, o)

    def col(a: np.ndarray, name: str, size: int) -> np.ndarray:
        k = int(o[getattr(compiled, "K_" + name)])
        return a[k:k + size]
    reg = col(I, "reg", 10)
    k = int(reg[compiled.R_REC])
    slow = {int(r): 0.0 for r in program.ranks}
    for j, r in enumerate(ranks.tolist()):
        if r in slow:
            slow[r] += float(col(F, "slowdown", R)[j])
    return Recorded(col(I, "rows", k).copy(), col(F, "starts", k).copy(), col(F, "ends", k).copy(),
                    int(reg[compiled.R_EXEC]), col(I, "finished", n).copy(), int(reg[compiled.R_STATUS]),
                    int(reg[compiled.R_OP]), slow)


def _flat(parts: dict[str, Any], dtype: type, o: np.ndarray) -> np.ndarray:
    """The arrays (an array, a length, or a (length, fill) pair) laid end to end in one array;
    each one's offset goes to ``o``."""
    sizes = [len(v) if isinstance(v, np.ndarray) else (v[0] if isinstance(v, tuple) else v) for v in parts.values()]
    out: np.ndarray = np.zeros(int(sum(sizes)), dtype=dtype)
    at = 0
    for (name, v), size in zip(parts.items(), sizes):
        o[getattr(compiled, "K_" + name)] = at
        if isinstance(v, np.ndarray):
            out[at:at + size] = v
        elif isinstance(v, tuple):
            out[at:at + size] = v[1]
        at += size
    return out
