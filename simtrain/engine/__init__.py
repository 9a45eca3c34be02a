"""The run: :mod:`~simtrain.engine.simulator` executes every rank's program as SimPy processes
(the only place SimPy is imported) and records :mod:`~simtrain.engine.timeline`'s spans, which
the results and the outputs read."""
