"""The workload: per-rank programs (ops, streams, dependencies) lowered from the specs, the
device mesh and a pipeline schedule; data-parallel buckets and ZeRO; the memory plan."""
