"""Where the flow model keeps each part of its state: the rows of its arrays and the fields of its
scalar arrays, shared by the model (:mod:`simtrain.network.solver`), its link statistics
(:mod:`simtrain.network.links`), its memo of recomputations (:mod:`simtrain.network.reshare_memo`)
and their compiled event loop (:mod:`simtrain.network.flowcore`), which reads them by these
numbers. Units are in the names' comments: s, bytes, B/s."""

from __future__ import annotations

#: What the compiled loop returns: done; a recomputation the memo does not hold (the model
#: computes and stores it, then calls again); the rate history is full (the model makes room).
OK, MISS, NEED_HISTORY = 0, 1, 2

#: Rows of ``sf``, per flow slot: bytes left, rate (B/s), size (bytes); then per class of alike
#: flows (:mod:`simtrain.network.flowclass`, by class number): its flows' bytes left, rate (B/s),
#: size (bytes) and time to finish at that rate (s, scratch).
REM, RATE, SIZE, C_REM, C_RATE, C_SIZE, C_FIN = range(7)
SF_ROWS = 7
#: Rows of ``si``, per flow slot: path id (-1: free), transfer index, the live slots (ascending,
#: the first ``ist[N_LISTED]``, of which those ended since are dropped by the next compaction), scratch (the slots ending at one step), its class, the next and
#: previous flow of its class and of its path (-1: none). Then per class: its first flow, its
#: flows, the live classes (the first ``ist[N_CLS]``), its place among them, the recomputation
#: that last split it (``ist[GEN]``), the first class split from it then, the next class split
#: from the same one; the free class numbers (the first ``ist[N_CFREE]``).
(PIDX, TIX, LIVE, ENDS, CLS, C_NEXT, C_PREV, P_NEXT, P_PREV, C_HEAD, C_COUNT, C_LIST, C_POS, C_GEN, C_TGT,
 C_TNEXT, C_FREE) = range(17)
SI_ROWS = 17
#: Rows of ``ef``, per link: summed rate of its flows (B/s), bytes carried, time with traffic
#: (s), peak utilisation (rate over capacity), capacity (B/s).
LRATE, BYTES, BUSY_S, PEAK, CAP = 0, 1, 2, 3, 4
#: Rows of ``chg``: the path ids of the flows started and ended since the last recomputation.
STARTED, ENDED = 0, 1
#: Rows of ``ti``, per transfer index: flows left, transfer id; the latency heap's transfer ids
#: and indices (by heap position); the indices of the transfers completed, in order.
T_LEFT, T_ID, H_ID, H_IX, O_IX = 0, 1, 2, 3, 4
#: Rows of ``tf``: per transfer index its latency (s); the heap's completion times (s); the
#: completed transfers' completion times (s).
T_LAT, H_T, O_T = 0, 1, 2
#: ``fs``: the model's clock (s). ``us``: bytes delivered.
NOW = 0
DELIVERED = 0
#: Fields of ``ist``: live slots, paths started and ended since the last recomputation, busy
#: links, the rates' state number, heap size, completed transfers not yet collected,
#: recomputations, memo hits, the memo table's size minus one (a power of two minus one); the
#: live classes of alike flows, the class numbers handed out, the free ones, the number of the
#: last recomputation that moved flows between classes (it only grows), whether flows that
#: behave alike share a class (1; 0: one class per flow); the entries of the live slots' row,
#: which may still hold flows ended since it was last compacted (``N_LIVE`` counts only the live).
(N_LIVE, N_STARTED, N_ENDED, N_BUSY, NODE, N_HEAP, N_DONE, RECOMPUTES, HITS, MASK, N_CLS, C_HW, N_CFREE, GEN,
 GROUP, N_LISTED) = range(16)
ISTATE = 16
#: Fields of ``hst`` (the rate history): entries, link numbers held, the numbers it may still
#: take (:attr:`~simtrain.network.links.LinkUsage.history_limit`), recording (0 or 1).
N_HIST, N_HVALS, HIST_LIMIT, RECORD = 0, 1, 2, 3
#: Fields of a memo entry (a row of ``ment``): its key (state, counts of paths started and ended,
#: offset of the sorted path ids in ``mkey``) and its result (the next state; then offset and
#: count in ``mint``, or in ``mflt`` for rates, of: the paths it prices (count -1: every flow),
#: the paths' ids and rates, the links it zeroes (none of those it prices), the links it prices
#: and their rates (-1: none; their utilisations follow the rates in ``mflt``), the busy links
#: after it).
(E_NODE, E_NS, E_NE, E_KEY, E_NEXT, E_PATHS, E_NPATHS, E_RP, E_NRP, E_RATES, E_ZEROED, E_NZEROED,
 E_USED, E_NUSED, E_LRATES, E_BUSY, E_NBUSY) = range(17)
ENTRY = 17
