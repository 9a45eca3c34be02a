"""The run: :mod:`~simtrain.engine.simulator` executes every rank's program as SimPy processes
(the only place SimPy is imported), or, where every op is priced up front, as
:mod:`~simtrain.engine.compiled`'s loop (the same spans), and records
:mod:`~simtrain.engine.timeline`'s spans, which the results and the outputs read."""
