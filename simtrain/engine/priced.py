"""A program's run on a network that prices every op up front, through the compiled loop of
:mod:`~simtrain.engine.compiled`: the program's columns and the ops' prices as arrays in, the
recorded spans out, as :mod:`~simtrain.engine.simulator` records them.

The network is asked ``fixed_duration`` once per distinct (communication, group set, bytes), the
key its own cache uses, before the run (the protocol's prices do not depend on the clock). Where
it answers None (it times the op as the run unfolds), the run is the SimPy engine's instead. An op
priced at nothing ends within the move that starts it, as in the SimPy engine.
"""

from __future__ import annotations

from itertools import compress, repeat
from typing import Any, NamedTuple

import numpy as np

from simtrain.engine import compiled, loop_layout
from simtrain.network.interface import NetworkModel
from simtrain.workload.program import MORE, STREAM, OpRef, Program


class Recorded(NamedTuple):
    rows: np.ndarray  # op id, or ~id for a transfer's receiver span (int64)
    starts: np.ndarray
    ends: np.ndarray
    executed: int
    finished: np.ndarray  # op id -> done (uint8)
    status: int  # loop_layout.OK, RAN_TWICE or BUDGET
    status_op: int
    slowdown_s: dict[int, float]


def prices(program: Program, network: NetworkModel) -> tuple[np.ndarray, np.ndarray] | None:
    """Each op's price (s; 0 for compute) and its class (:data:`~simtrain.engine.loop_layout.COMPUTE`,
    ``P2P`` or ``COLLECTIVE``, int8), or None where a communication op has no price up front. The
    network is asked once per key, about the key's first op."""
    table = program.ops
    n = len(table)
    comm = table.comm
    names = sorted({c for c in set(comm) if c is not None})
    code: dict[str | None, int] = {None: 0}
    code.update((c, k + 1) for k, c in enumerate(names))
    codes = np.fromiter(map(code.__getitem__, comm), dtype=np.int8, count=n)
    ids = np.flatnonzero(codes)
    cls = np.zeros(n, dtype=np.int8)
    cls[ids] = loop_layout.COLLECTIVE
    if "p2p" in code:
        cls[codes == code["p2p"]] = loop_layout.P2P
    price = np.zeros(n)
    if not len(ids):
        return price, cls
    gsets, nbytes, c = table.column("group_set")[ids], table.column("nbytes")[ids], codes[ids]
    by_key = np.lexsort((nbytes, gsets, c))  # stable: a key's ops in id order
    k = by_key
    first = np.ones(len(k), dtype=bool)
    first[1:] = (c[k][1:] != c[k][:-1]) | (gsets[k][1:] != gsets[k][:-1]) | (nbytes[k][1:] != nbytes[k][:-1])
    group = np.cumsum(first) - 1
    heads = ids[k[first]]
    asked = np.zeros(len(heads))
    for j, i in enumerate(heads.tolist()):
        t = network.fixed_duration(OpRef(table, i))
        if t is None:
            return None
        asked[j] = t
    price[ids[k]] = asked[group]
    return price, cls


def run_priced(program: Program, price: np.ndarray, cls: np.ndarray, max_events: int,
               comm_interference: float) -> Recorded:
    """Run ``program`` with its ops priced and classed as :func:`prices` gives them."""
    table = program.ops
    n = len(table)
    keys = sorted(program.order)
    lengths = np.array([len(program.order[k]) for k in keys], dtype=np.int64)
    ptr = np.zeros(len(keys) + 1, dtype=np.int64)
    np.cumsum(lengths, out=ptr[1:])
    ops = np.concatenate([np.frombuffer(program.order[k], dtype=np.int32) for k in keys]) if keys \
        else np.zeros(0, np.int32)
    p2p = np.flatnonzero(cls == loop_layout.P2P)
    coll = np.flatnonzero(cls == loop_layout.COLLECTIVE)
    # ranks as dense indices: the streams' and the transfers' receivers
    stream_ranks = np.array([r for r, _ in keys], dtype=np.int64)
    peer_col = table.column("peer")
    ranks, dense = np.unique(np.concatenate([stream_ranks, peer_col[p2p].astype(np.int64)]), return_inverse=True)
    srank = dense[:len(keys)].astype(np.int64)
    L = loop_layout
    op = np.empty((n, L.W), dtype=np.int32)  # each op's record (loop_layout.W)
    op[:, L.CLS] = cls
    op[:, L.ARG] = -1
    op[p2p, L.ARG] = dense[len(keys):]
    op[:, L.FIN] = 0
    op[:, L.WHEAD] = op[:, L.WTAIL] = -1
    comp = np.full(len(ranks), -1, dtype=np.int64)
    for s, (_, stream) in enumerate(keys):
        if stream == STREAM["compute"]:
            comp[srank[s]] = s
    # collectives of several simulated members: their key's index in ``members``, and how many arrive
    members: dict[Any, int] = program.members
    index = {k: j for j, k in enumerate(members)}
    coll_keys: list[Any] = list(map(table.key.__getitem__, coll.tolist()))
    m = np.fromiter(map(members.get, coll_keys, repeat(1)), dtype=np.int64, count=len(coll))
    several = m > 1
    op[:, L.NEED] = 1
    op[coll, L.NEED] = m
    op[coll[several], L.ARG] = np.fromiter(map(index.__getitem__, compress(coll_keys, several.tolist())),
                                         dtype=np.int64, count=int(several.sum()))
    key_off = np.zeros(len(members) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(members.values(), dtype=np.int64, count=len(members)), out=key_off[1:])
    # dependencies: beyond two, the list's index in dep1 and the lists as one array
    dep0 = table.column("dep0")
    op[:, L.DEP0] = dep0
    dep1 = op[:, L.DEP1]
    dep1[:] = table.column("dep1")
    more_ids = np.zeros(0, np.int64)
    more_ptr = np.zeros(1, np.int64)
    if table.more:
        lists = [table.more[i] for i in np.flatnonzero(dep0 == MORE).tolist()]
        dep1[dep0 == MORE] = np.arange(len(lists), dtype=np.int32)
        more_ptr = np.zeros(len(lists) + 1, np.int64)
        np.cumsum([len(x) for x in lists], out=more_ptr[1:])
        more_ids = np.fromiter((d for x in lists for d in x), dtype=np.int64, count=int(more_ptr[-1]))
    cost = np.where(cls == L.COMPUTE, table.column("duration_s"), price)  # a compute op's duration, else its price
    S, R = len(keys), len(ranks)
    nrec = n + len(p2p)
    ints = dict(ptr=ptr, ops=ops, srank=srank, comp=comp, op=op.ravel(), more_ptr=more_ptr,
                more_ids=more_ids, key_off=key_off, heap=S, hpos=(S, -1),
                hs=S, htype=S, harg=S, reg=10, sop=S, evalid=S, active=R,
                wnext=(S, -1), rows=nrec, rq=S + 1, pend_cnt=len(members), pend=int(key_off[-1]),
                inst_mem=len(coll), inst_off=len(coll) + 1, spos=S, qhead=(R, -1),
                qtail=(R, -1), qnext=(S, -1), qexists=R, scratch=S,
                max_events=np.array([min(max_events, n)]))  # (no run executes more than its ops)
    floats = dict(cost=cost, ht=S, send=S, sleft=S, st0=S, sslow=(S, 1.0), starts=nrec, ends=nrec,
                  sstart=S, slowdown=R, interference=np.array([comm_interference]),
                  factor=np.array([1.0 + comm_interference]))
    o = np.zeros(loop_layout.K_COUNT, np.int64)
    I, F = _flat(ints, np.int32, o), _flat(floats, np.float64, o)
    o[loop_layout.K_cap], o[loop_layout.K_nstreams] = S + 1, S
    compiled.run_loop(I, F, o)

    def col(a: np.ndarray, name: str, size: int) -> np.ndarray:
        k = int(o[getattr(loop_layout, "K_" + name)])
        return a[k:k + size]
    reg = col(I, "reg", 10)
    k = int(reg[loop_layout.R_REC])
    slow = {int(r): 0.0 for r in program.ranks}
    for j, r in enumerate(ranks.tolist()):
        if r in slow:
            slow[r] += float(col(F, "slowdown", R)[j])
    return Recorded(col(I, "rows", k).astype(np.int64), col(F, "starts", k).copy(), col(F, "ends", k).copy(),
                    int(reg[loop_layout.R_EXEC]), I[o[L.K_op] + L.FIN:o[L.K_op] + L.W * n:L.W].copy(), int(reg[loop_layout.R_STATUS]),
                    int(reg[loop_layout.R_OP]), slow)


def _flat(parts: dict[str, Any], dtype: type, o: np.ndarray) -> np.ndarray:
    """The arrays (an array, a length, or a (length, fill) pair) laid end to end in one array;
    each one's offset goes to ``o``."""
    sizes = [len(v) if isinstance(v, np.ndarray) else (v[0] if isinstance(v, tuple) else v) for v in parts.values()]
    out: np.ndarray = np.zeros(int(sum(sizes)), dtype=dtype)
    at = 0
    for (name, v), size in zip(parts.items(), sizes):
        o[getattr(loop_layout, "K_" + name)] = at
        if isinstance(v, np.ndarray):
            out[at:at + size] = v
        elif isinstance(v, tuple):
            out[at:at + size] = v[1]
        at += size
    return out
