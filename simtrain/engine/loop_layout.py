"""The layout of the compiled loop's two arrays (:mod:`~simtrain.engine.compiled`): the offset
index of each named array, its registers, and the codes of op classes, queued events and status.

:func:`simtrain.engine.priced.run_priced` lays the arrays out; ``o[K_name]`` is where array
``name`` starts in ``I`` (ints, :data:`INTS`) or ``F`` (floats, :data:`FLOATS`).
"""

from __future__ import annotations

COMPUTE, P2P, COLLECTIVE = 0, 1, 2  # op classes (an op record's ``CLS``)
EV_COMPUTE, EV_SOLO, EV_P2P, EV_COLL = 0, 1, 2, 3  # what a stream's queued end is
OK, RAN_TWICE, BUDGET = 0, 1, 2  # the run's status
#: the arrays held in ``I`` (ints) and ``F`` (floats), each at the offset ``o[K_name]``
K_ptr = 0
K_ops = 1
K_srank = 2
K_comp = 3
K_op = 4
K_more_ptr = 5
K_more_ids = 6
K_key_off = 7
K_heap = 8
K_hpos = 9
K_hs = 10
K_htype = 11
K_harg = 12
K_reg = 13
K_sop = 14
K_evalid = 15
K_active = 16
K_wnext = 17
K_rows = 18
K_rq = 19
K_pend_cnt = 20
K_pend = 21
K_inst_mem = 22
K_inst_off = 23
K_spos = 24
K_qhead = 25
K_qtail = 26
K_qnext = 27
K_qexists = 28
K_scratch = 29
K_cost = 30
K_ht = 31
K_send = 32
K_sleft = 33
K_st0 = 34
K_sslow = 35
K_starts = 36
K_ends = 37
K_sstart = 38
K_slowdown = 39
K_interference = 40
K_factor = 41
K_max_events = 42
K_cap = 43
K_nstreams = 44
K_COUNT = 45
INTS = ('ptr', 'ops', 'srank', 'comp', 'op', 'more_ptr', 'more_ids', 'key_off', 'heap', 'hpos', 'hs', 'htype',
    'harg', 'reg', 'sop', 'evalid', 'active', 'wnext', 'rows', 'rq', 'pend_cnt', 'pend', 'inst_mem', 'inst_off',
    'spos', 'qhead', 'qtail', 'qnext', 'qexists', 'scratch')
FLOATS = ('cost', 'ht', 'send', 'sleft', 'st0', 'sslow', 'starts', 'ends', 'sstart', 'slowdown')
#: An op's record in ``op``: ``W`` ints, its first two dependencies (``DEP1`` indexes ``more_ptr``
#: where ``DEP0`` is -2), class, argument (a transfer's receiver as a rank index, a collective's
#: key index or -1), done flag, the first and last stream waiting for it, and the members a
#: collective waits for. One record per op keeps what a move reads of an op on one cache line.
DEP0, DEP1, CLS, ARG, FIN, WHEAD, WTAIL, NEED = range(8)
W = 8
# registers (``reg``): ready queue head and count, resuming, ops finished, spans recorded, events
# queued, queue size, status, instances started, the op of the status
R_HEAD, R_COUNT, R_RESUMING, R_EXEC, R_REC, R_SEQ, R_SIZE, R_STATUS, R_INST, R_OP = range(10)
