"""The layout of the compiled loop's two arrays (:mod:`~simtrain.engine.compiled`): the offset
index of each named array, its registers, and the codes of op classes, queued events and status.

:func:`simtrain.engine.priced.run_priced` lays the arrays out; ``o[K_name]`` is where array
``name`` starts in ``I`` (ints, :data:`INTS`) or ``F`` (floats, :data:`FLOATS`).
"""

from __future__ import annotations

COMPUTE, P2P, COLLECTIVE = 0, 1, 2  # op classes (the ``cls`` column)
EV_COMPUTE, EV_SOLO, EV_P2P, EV_COLL = 0, 1, 2, 3  # what a stream's queued end is
OK, RAN_TWICE, BUDGET = 0, 1, 2  # the run's status
#: the arrays held in ``I`` (ints) and ``F`` (floats), each at the offset ``o[K_name]``
K_ptr = 0
K_ops = 1
K_srank = 2
K_comp = 3
K_cls = 4
K_dep0 = 5
K_dep1 = 6
K_more_ptr = 7
K_more_ids = 8
K_need = 9
K_peer = 10
K_coll = 11
K_key_off = 12
K_heap = 13
K_hpos = 14
K_hs = 15
K_htype = 16
K_harg = 17
K_reg = 18
K_finished = 19
K_sop = 20
K_evalid = 21
K_active = 22
K_whead = 23
K_wnext = 24
K_rows = 25
K_rq = 26
K_pend_cnt = 27
K_pend = 28
K_inst_mem = 29
K_inst_off = 30
K_spos = 31
K_wtail = 32
K_qhead = 33
K_qtail = 34
K_qnext = 35
K_qexists = 36
K_scratch = 37
K_dur = 38
K_price = 39
K_ht = 40
K_send = 41
K_sleft = 42
K_st0 = 43
K_sslow = 44
K_starts = 45
K_ends = 46
K_sstart = 47
K_slowdown = 48
K_interference = 49
K_factor = 50
K_max_events = 51
K_cap = 52
K_nstreams = 53
K_COUNT = 54
INTS = ('ptr', 'ops', 'srank', 'comp', 'cls', 'dep0', 'dep1', 'more_ptr', 'more_ids', 'need', 'peer', 'coll', 'key_off', 'heap', 'hpos', 'hs', 'htype', 'harg', 'reg', 'finished', 'sop', 'evalid', 'active', 'whead', 'wnext', 'rows', 'rq', 'pend_cnt', 'pend', 'inst_mem', 'inst_off', 'spos', 'wtail', 'qhead', 'qtail', 'qnext', 'qexists', 'scratch')
FLOATS = ('dur', 'price', 'ht', 'send', 'sleft', 'st0', 'sslow', 'starts', 'ends', 'sstart', 'slowdown')
# registers (``reg``): ready queue head and count, resuming, ops finished, spans recorded, events
# queued, queue size, status, instances started, the op of the status
R_HEAD, R_COUNT, R_RESUMING, R_EXEC, R_REC, R_SEQ, R_SIZE, R_STATUS, R_INST, R_OP = range(10)
