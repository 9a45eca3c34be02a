"""A program's run on a network that prices every op up front, through the compiled loop of
:mod:`~simtrain.engine.compiled`: the program's columns and the ops' prices as arrays in, the
recorded spans out, as :mod:`~simtrain.engine.simulator` records them.

The network is asked ``fixed_duration`` once per distinct (communication, group set, bytes), the
key its own cache uses, before the run (the protocol's prices do not depend on the clock). Where
it answers None (it times the op as the run unfolds), the run is the SimPy engine's instead. An op
priced at nothing ends within the move that starts it, as in the SimPy engine.
"""

from __future__ import annotations

from itertools import repeat
from typing import Any, NamedTuple

import numpy as np

from simtrain.engine import loop_code, loop_layout
from simtrain.network.interface import NetworkModel
from simtrain.workload.program import COMM_NONE, COMM_P2P, MORE, STREAM, OpRef, Program


class Recorded(NamedTuple):
    rows: np.ndarray  # op id, or ~id for a transfer's receiver span (int64)
    starts: np.ndarray
    ends: np.ndarray
    executed: int
    finished: np.ndarray  # op id -> done (int32: 0 or 1)
    status: int  # loop_layout.OK, RAN_TWICE or BUDGET
    status_op: int
    slowdown_s: dict[int, float]


def prices(program: Program, network: NetworkModel) -> tuple[np.ndarray, np.ndarray] | None:
    """Each op's price (s; 0 for compute) and its class (:data:`~simtrain.engine.loop_layout.COMPUTE`,
    ``P2P`` or ``COLLECTIVE``, int8), or None where a communication op has no price up front. The
    network is asked once per key, about the key's first op."""
    table = program.ops
    n = len(table)
    comm, vocabulary = table.column("comm_code"), table.comms.values
    seen = np.flatnonzero(np.bincount(comm, minlength=len(vocabulary))).tolist()  # the kinds the ops use
    by_name = sorted((c for c in seen if c != COMM_NONE), key=lambda c: str(vocabulary[c]))
    lut = np.zeros(len(vocabulary), dtype=np.int16)  # a kind's code: 0 for compute, else its name's rank + 1
    lut[by_name] = np.arange(1, len(by_name) + 1)
    codes = lut[comm]
    ids = np.flatnonzero(codes)
    cls = np.zeros(n, dtype=np.int8)
    cls[ids] = loop_layout.COLLECTIVE
    cls[comm == COMM_P2P] = loop_layout.P2P
    price = np.zeros(n)
    if not len(ids):
        return price, cls
    i0 = int(ids[0])
    t0 = network.fixed_duration(OpRef(table, i0))  # (a network that times ops: None at once)
    if t0 is None:
        return None
    gsets, nbytes, c = table.column("group_set")[ids], table.column("nbytes")[ids], codes[ids]
    k = np.lexsort((nbytes, gsets, c))  # by key; stable: a key's ops in id order
    first = np.ones(len(k), dtype=bool)
    first[1:] = (c[k][1:] != c[k][:-1]) | (gsets[k][1:] != gsets[k][:-1]) | (nbytes[k][1:] != nbytes[k][:-1])
    group = np.cumsum(first) - 1
    heads = ids[k[first]]
    asked = np.zeros(len(heads))
    for j, i in enumerate(heads.tolist()):
        t = t0 if i == i0 else network.fixed_duration(OpRef(table, i))  # (the first op heads its key)
        if t is None:
            return None
        asked[j] = t
    price[ids[k]] = asked[group]
    return price, cls


def run_priced(program: Program, price: np.ndarray, cls: np.ndarray, max_events: int,
               comm_interference: float) -> Recorded:
    """Run ``program`` with its ops priced and classed as :func:`prices` gives them.

    The loop indexes ops by position, the streams' op lists laid end to end: a stream's next op
    lies next to its last, in memory as in the loop (``ops`` maps a position back to the op's id,
    which the spans record). An op on no stream comes after them; it never starts."""
    L = loop_layout
    table = program.ops
    n = len(table)
    keys = sorted(program.order)
    lengths = np.array([len(program.order[k]) for k in keys], dtype=np.int64)
    ptr = np.zeros(len(keys) + 1, dtype=np.int64)
    np.cumsum(lengths, out=ptr[1:])
    ops = np.concatenate([np.frombuffer(program.order[k], dtype=np.int32) for k in keys]) if keys \
        else np.zeros(0, np.int32)
    seen = np.bincount(ops, minlength=n)
    if len(ops) and seen.max() > 1:
        raise AssertionError(f"op ran twice: {table[int(np.argmax(seen))].label()}")  # (as the SimPy engine would)
    ops = np.concatenate([ops, np.flatnonzero(seen == 0).astype(np.int32)])
    pos_of = np.empty(n, dtype=np.int32)
    pos_of[ops] = np.arange(n, dtype=np.int32)
    c = cls[ops]
    p2p, coll = np.flatnonzero(c == L.P2P), np.flatnonzero(c == L.COLLECTIVE)
    # ranks as dense indices: the streams' and the transfers' receivers
    stream_ranks = np.array([r for r, _ in keys], dtype=np.int64)
    receivers = table.column("peer")[ops[p2p]].astype(np.int64)
    ranks, dense = np.unique(np.concatenate([stream_ranks, receivers]), return_inverse=True)
    srank = dense[:len(keys)].astype(np.int64)
    comp = np.full(len(ranks), -1, dtype=np.int64)
    for s, (_, stream) in enumerate(keys):
        if stream == STREAM["compute"]:
            comp[srank[s]] = s
    # collectives of several simulated members: their key's index in ``members``, and how many arrive
    members: dict[Any, int] = program.members
    index = {k: j for j, k in enumerate(members)}
    coll_keys: list[Any] = list(map(table.key.__getitem__, ops[coll].tolist()))
    kid = np.fromiter(map(index.get, coll_keys, repeat(-1)), dtype=np.int64, count=len(coll))
    counts = np.fromiter(members.values(), dtype=np.int64, count=len(members))
    need = np.where(kid >= 0, counts[kid] if len(counts) else 1, 1)
    key_off = np.zeros(len(members) + 1, dtype=np.int64)
    np.cumsum(counts, out=key_off[1:])
    # dependencies as positions; beyond two, the list's index in DEP1 and the lists as one array
    listed = np.flatnonzero(table.column("dep0")[ops] == MORE)
    lists = [table.more[i] for i in ops[listed].tolist()]
    more_ptr = np.zeros(len(lists) + 1, np.int64)
    np.cumsum([len(x) for x in lists], out=more_ptr[1:])
    more_ids = pos_of[np.fromiter((d for x in lists for d in x), dtype=np.int64, count=int(more_ptr[-1]))]
    S, R = len(keys), len(ranks)
    nrec = n + len(p2p)

    def arrays() -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, np.ndarray], dict[str, np.ndarray]]:
        """The loop's state, as it starts: ``I``, ``F``, the offsets ``o``, and their named views."""
        o = np.zeros(L.K_COUNT, np.int64)
        I, iv = _alloc(dict(ptr=S + 1, ops=n, srank=S, comp=R, op=n * L.W, more_ptr=len(more_ptr),
                            more_ids=len(more_ids), key_off=len(key_off), heap=S, hpos=S, hs=S, htype=S, harg=S,
                            reg=10, sop=S, evalid=S, active=R, wnext=S, rows=nrec, rq=S + 1, pend_cnt=len(members),
                            pend=int(key_off[-1]), inst_mem=len(coll), inst_off=len(coll) + 1, spos=S, qhead=R,
                            qtail=R, qnext=S, qexists=R, scratch=S, max_events=1), np.int32, o)
        F, fv = _alloc(dict(cost=n, ht=S, send=S, sleft=S, st0=S, sslow=S, starts=nrec, ends=nrec, sstart=S,
                            slowdown=R, interference=1, factor=1), np.float64, o)
        for name, v in dict(ptr=ptr, ops=ops, srank=srank, comp=comp, more_ptr=more_ptr, more_ids=more_ids,
                            key_off=key_off, max_events=min(max_events, n)).items():  # (no run executes more than its ops)
            iv[name][:] = v
        for name in ("hpos", "wnext", "qhead", "qtail", "qnext"):
            iv[name][:] = -1
        rec = iv["op"].reshape(n, L.W)  # each op's record, by position
        loop_code.RECORDS.fill(rec, fv["cost"], ops, pos_of, table.column("dep0"), table.column("dep1"), cls,
                               table.column("duration_s"), price)
        rec[listed, L.DEP1] = np.arange(len(lists))
        rec[p2p, L.ARG] = dense[len(keys):]
        rec[coll[need > 1], L.ARG] = kid[need > 1]
        rec[coll, L.NEED] = need
        fv["sslow"][:], fv["interference"][:], fv["factor"][:] = 1.0, comm_interference, 1.0 + comm_interference
        o[L.K_cap], o[L.K_nstreams] = S + 1, S
        return I, F, o, iv, fv

    I, F, o, iv, fv = arrays()
    if not loop_code.run(I, F, o):  # its machine code raised midway: numba's run of the same start raises
        I, F, o, iv, fv = arrays()
        loop_code.LOOP.run_loop.dispatcher()(I, F, o)
    rec = iv["op"].reshape(n, L.W)
    reg = iv["reg"]
    k = int(reg[L.R_REC])
    finished = np.zeros(n, dtype=np.int32)
    finished[ops] = rec[:, L.FIN]
    slow = {int(r): 0.0 for r in program.ranks}
    for j, r in enumerate(ranks.tolist()):
        if r in slow:
            slow[r] += float(fv["slowdown"][j])
    return Recorded(iv["rows"][:k].astype(np.int64), fv["starts"][:k].copy(), fv["ends"][:k].copy(),
                    int(reg[L.R_EXEC]), finished, int(reg[L.R_STATUS]), int(reg[L.R_OP]), slow)


def _alloc(sizes: dict[str, int], dtype: type, o: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """One array of zeros holding arrays of ``sizes`` end to end, each one's offset in ``o``; and
    each as a view, by name."""
    out: np.ndarray = np.zeros(sum(sizes.values()), dtype=dtype)
    views, at = {}, 0
    for name, size in sizes.items():
        o[getattr(loop_layout, "K_" + name)] = at
        views[name] = out[at:at + size]
        at += size
    return out, views
