"""Networks: the protocol the engine talks to, with analytic (closed-form), flow (max-min fair
flows on the graph) and fixed-latency implementations; collectives as NCCL runs them (channels over
every NIC, algorithms as records, protocols and latencies of NCCL's tuning model, one tuner and
planner for every user); the flow solver and link statistics; published nccl-tests results."""
