"""A cluster and the rank grid of a layout, described (``simtrain topology`` and ``simtrain mesh``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from simtrain.api.checks import check_instance, check_settings
from simtrain.errors import SimtrainError
from simtrain.outputs.words import counted
from simtrain.settings import SETTINGS

#: The settings :func:`describe_mesh` takes; each defaults to the default scenario's value.
MESH_SETTINGS = ("gpus", "tp", "cp", "pp", "dp", "ep", "etp", "order")


def describe_topology(name: str, *, nodes: int | None = None, draw: str | Path | None = None,
                      report: str | Path | None = None) -> dict[str, Any]:
    """Topology ``name`` (a preset or a ``.toml`` file; ``nodes``: the topology's own by default)
    as :func:`simtrain.topology.cluster.summary` describes it; ``draw`` renders its graph to a PNG
    or SVG file, its links coloured by the utilisation of a flow-network run's ``report.json``
    where ``report`` is given (the result then has ``drawing``)."""
    from simtrain.topology.cluster import load_topology, summary

    check_instance("describe_topology", "name", name, (str, os.PathLike), "a topology preset or a .toml file")
    check_instance("describe_topology", "nodes", nodes, (int, type(None)))
    check_instance("describe_topology", "draw", draw, (str, os.PathLike, type(None)))
    check_instance("describe_topology", "report", report, (str, os.PathLike, type(None)))
    if report is not None and draw is None:
        raise SimtrainError(f"--report {report}: colours the links of --draw; give --draw OUT.png too")
    cluster = load_topology(name, nodes=nodes)
    if draw is not None:
        from simtrain.specs.budget import check_drawing

        check_drawing(cluster.spec)  # before the bisection: a drawing of a large cluster is refused at once
    info = summary(cluster)
    if draw is not None:
        from simtrain.outputs.topology_plot import draw_topology

        draw_topology(cluster, str(draw), link_utilisation=link_utilisation(report, cluster))
        info["drawing"] = str(draw)
    return info


def link_utilisation(path: str | Path | None, cluster: Any) -> dict[tuple[str, str], float] | None:
    """Link utilisation from a flow-network run's ``report.json`` at ``path``, keyed by graph edge
    of ``cluster`` (None without a path); each link must be one of the cluster's, each value a
    finite number >= 0."""
    from simtrain.specs.strict import read_json, shown

    if path is None:
        return None
    loaded = read_json(str(path), f"--report {path}")
    links = loaded.get("links") if isinstance(loaded, dict) else None
    links = links.get("utilisation_by_link") if isinstance(links, dict) else None
    if not links or not isinstance(links, dict):
        raise SimtrainError(f"--report {path}: has no link utilisation; write it with "
                            f"simtrain run --network flow")
    out = {}
    for name, value in links.items():
        u, _, v = name.partition("->")
        if not cluster.graph.has_edge(u, v):
            raise SimtrainError(f"--report {path}: link {shown(name)} is not in topology {cluster.name} with "
                                f"{counted(cluster.num_nodes, 'node')} (use the run's topology and --nodes)")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < float("inf"):
            raise SimtrainError(f"--report {path}: link {shown(name)}: utilisation {shown(value)} is not a "
                                f"finite number >= 0")
        out[(u, v)] = float(value)
    return out


def describe_mesh(given: dict[str, Any] | None = None, *, gpus_per_node: int = 8, topology: str | None = None,
                  rank: int | None = None) -> dict[str, Any]:
    """The rank grid of a layout: the default scenario's values of :data:`MESH_SETTINGS` with those
    of ``given`` in their place, on nodes of ``gpus_per_node`` GPUs (or ``topology``'s). The result
    is :func:`simtrain.topology.mesh.mesh_report`'s (groups and whether each dimension stays inside
    a node; ``rank``'s coordinates where given) with the layout's ``order``.

    >>> describe_mesh({"gpus": 16, "tp": 8, "pp": 2})["groups"]["pp"][:2]
    [[0, 8], [1, 9]]
    """
    from simtrain.specs.budget import check_ranks
    from simtrain.settings import defaults_note
    from simtrain.specs.parallel import resolve_parallel
    from simtrain.topology.mesh import build_mesh, mesh_report

    given = check_settings("describe_mesh", given)
    check_instance("describe_mesh", "gpus_per_node", gpus_per_node, int)
    check_instance("describe_mesh", "topology", topology, (str, os.PathLike, type(None)))
    check_instance("describe_mesh", "rank", rank, (int, type(None)))
    unknown = sorted(set(given) - set(MESH_SETTINGS))
    if unknown:
        raise SimtrainError(f"describe_mesh: unknown setting {unknown[0]!r}; valid: {', '.join(MESH_SETTINGS)}")
    if topology is not None:
        from simtrain.topology.cluster import load_topology

        gpus_per_node = load_topology(topology, nodes=1).gpus_per_node
    values = {name: given.get(name, SETTINGS[name].default) for name in MESH_SETTINGS}
    try:
        par = resolve_parallel(values.pop("gpus"), **values)
    except SimtrainError as exc:
        raise type(exc)(f"{exc}{defaults_note(str(exc), set(given))}") from None
    check_ranks(par.world, f"gpus={par.world}")
    mesh = build_mesh(par.tp, par.cp, par.dp, par.pp, ep=par.ep, etp=par.etp, order=par.order,
                      gpus_per_node=gpus_per_node)
    return {**mesh_report(mesh, rank), "order": par.order}
