"""Networks: the protocol the engine talks to, with analytic (closed-form), flow (max-min fair
flows on the graph) and fixed-latency implementations; collective algorithms as records and their
tuner; the flow solver and link statistics."""
