"""What a run's timeline gives: the report's metrics (:mod:`~simtrain.results.metrics`: step time,
MFU, breakdown, memory, per stage) and the energy and cost of a step and of a whole training run
(:mod:`~simtrain.results.energy`)."""
