"""A layered picture of a cluster topology (PNG or SVG).

GPUs at the bottom, then NVSwitches, NICs, leaves, spines and cores at the top; nodes coloured by
kind, links grey or, when a utilisation map is given, coloured by utilisation 0..1 (the larger of
the two directions of a physical link). Markers, lines and labels shrink with the cluster size so
that a 1024-GPU cluster still draws in about a second (one LineCollection, one scatter per kind).
matplotlib is imported inside :func:`draw_topology` and used through the object API with the Agg
canvas, so no global pyplot state or backend is touched.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

from simtrain.errors import SpecError
from simtrain.outputs.files import atomic_open
from simtrain.outputs.words import counted

if TYPE_CHECKING:
    from simtrain.topology.cluster import Cluster

LAYER_Y = {"gpu": 0.0, "nvswitch": 1.0, "nic": 2.0, "leaf": 3.4, "spine": 4.8, "core": 6.2}
KIND_COLOUR = {"gpu": "#76b900", "nvswitch": "#1f77b4", "nic": "#9467bd", "leaf": "#ff7f0e",
               "spine": "#d62728", "core": "#8c564b"}
TIER_COLOUR = {"nvlink": "#76b900", "pcie": "#9467bd", "leaf": "#ff7f0e", "spine": "#d62728",
               "core": "#8c564b"}


def _positions(cluster: "Cluster") -> dict[str, tuple[float, float]]:
    """GPUs spaced by index with a gap between nodes; node-local switches above their GPUs;
    fabric switches spread evenly over the width of each layer."""
    g = cluster.graph
    gap = max(1.0, cluster.gpus_per_node / 4)
    pos: dict[str, tuple[float, float]] = {}
    for n, d in g.nodes(data=True):
        if d["kind"] == "gpu":
            pos[n] = (d["index"] + d["node"] * gap, LAYER_Y["gpu"])
    width = max(x for x, _ in pos.values()) if pos else 1.0
    fabric: dict[str, list[str]] = defaultdict(list)
    for n, d in g.nodes(data=True):
        kind = d["kind"]
        if kind in ("nvswitch", "nic"):
            xs = [pos[m][0] for m in g.successors(n) if m in pos]
            pos[n] = (sum(xs) / len(xs) if xs else 0.0, LAYER_Y[kind])
        elif kind != "gpu":
            fabric[kind].append(n)
    for kind, names in fabric.items():
        names.sort(key=lambda m: (g.nodes[m].get("pod", 0), g.nodes[m].get("index", 0), m))
        step = width / len(names)
        for i, m in enumerate(names):
            pos[m] = ((i + 0.5) * step, LAYER_Y[kind])
    return pos


def draw_topology(cluster: "Cluster", path: str | Path,
                  link_utilisation: dict[tuple[str, str], float] | None = None) -> None:
    """Render ``cluster`` to ``path`` (``.png`` or ``.svg``).

    ``link_utilisation`` maps directed edges ``(u, v)`` to a utilisation in [0, 1] of the link's
    achievable bandwidth; a physical link takes the larger of its two directions; links missing
    from the map are drawn grey. A flow run's report gives every link any rank used, those of the
    ranks a folded run's representatives stand for included
    (:meth:`simtrain.network.flow.FlowNetwork.link_report`), so grey links carried nothing.
    """
    path = Path(path)
    fmt = path.suffix.lower().lstrip(".")
    if fmt not in ("png", "svg"):
        raise SpecError(f"{path}: topology picture must end in .png or .svg")
    from matplotlib import colormaps
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.cm import ScalarMappable
    from matplotlib.collections import LineCollection
    from matplotlib.colors import Normalize
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    g = cluster.graph
    pos = _positions(cluster)
    n_nodes = g.number_of_nodes()
    util: dict[frozenset[str], float] = {}
    for (u, v), value in (link_utilisation or {}).items():
        key = frozenset((u, v))
        util[key] = max(util.get(key, 0.0), min(max(float(value), 0.0), 1.0))

    fig = Figure(figsize=(min(28.0, 8 + cluster.num_gpus / 16), 7), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    cmap, norm = colormaps["plasma"], Normalize(0.0, 1.0)
    segments, colours, seen = [], [], set()
    for u, v, tier in g.edges(data="tier"):
        key = frozenset((u, v))
        if key in seen:
            continue
        seen.add(key)
        segments.append((pos[u], pos[v]))
        if link_utilisation is not None:
            colours.append(cmap(norm(util[key])) if key in util else (0.8, 0.8, 0.8, 0.5))
        else:
            colours.append(TIER_COLOUR.get(tier, "grey"))
    width = 1.5 if len(segments) < 300 else max(0.2, 300 / len(segments))
    ax.add_collection(LineCollection(segments, colors=colours, linewidths=width, zorder=1,
                                     alpha=1.0 if link_utilisation is not None else 0.6))

    size = max(4.0, min(120.0, 6000 / max(n_nodes, 1)))
    handles = []
    for kind, colour in KIND_COLOUR.items():
        names = [n for n, k in g.nodes(data="kind") if k == kind]
        if not names:
            continue
        ax.scatter([pos[n][0] for n in names], [pos[n][1] for n in names], s=size, c=colour,
                   edgecolors="none", zorder=2)
        handles.append(Line2D([], [], marker="o", linestyle="", color=colour,
                              label=f"{kind} ({len(names)})"))
        if len(names) <= 24:
            for n in names:
                label = n.split("/")[-1] if kind in ("nvswitch", "nic") else n
                ax.annotate(label, pos[n], fontsize=6,
                            xytext=(0, -9 if kind == "gpu" else 6), textcoords="offset points",
                            ha="center")
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=len(handles),
              fontsize=7, frameon=False)
    if link_utilisation is not None:
        fig.colorbar(ScalarMappable(norm=norm, cmap=cmap), ax=ax, label="link utilisation (all ranks)",
                     fraction=0.03, pad=0.01)
    ax.set_title(f"{cluster.name}: {counted(cluster.num_nodes, 'node')} x {cluster.gpus_per_node} "
                 f"{cluster.gpu.name}, fabric {cluster.fabric_kind}", fontsize=10)
    ax.autoscale_view()
    ax.margins(0.02, 0.08)
    present = [k for k in LAYER_Y if k in {d for _, d in g.nodes(data="kind")}]
    ax.set_yticks([LAYER_Y[k] for k in present])
    ax.set_yticklabels(present)
    ax.set_xticks([])
    for side in ("top", "right", "bottom"):
        ax.spines[side].set_visible(False)
    with atomic_open(path, "wb") as fh:
        fig.savefig(fh, format=fmt, bbox_inches="tight")
