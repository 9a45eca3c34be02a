"""Routing on a cluster graph, in one place: the router (:mod:`~simtrain.topology.routing.router`:
shortest-hop routes with ECMP, their bottleneck and latency, a GPU's NIC) and what makes it fast
at 100,000 GPUs: its tables read once from the graph (:mod:`~simtrain.topology.routing.tables`),
routes inside a node learned once per kind of node (:mod:`~simtrain.topology.routing.node_routes`),
a route's price without the route (:mod:`~simtrain.topology.routing.costs`) and the links of many
routes as integer ids (:mod:`~simtrain.topology.routing.link_ids`)."""
