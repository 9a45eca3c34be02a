"""The cluster: topology files read (with each link kind's achievable share of its line rate) and
built into a networkx graph, routes on it, and the device mesh (the rank grid of a parallel layout
and its communication groups)."""
