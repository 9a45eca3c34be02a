"""The cluster: topology files built into a networkx graph, routes on it, and the device mesh
(the rank grid of a parallel layout and its communication groups)."""
