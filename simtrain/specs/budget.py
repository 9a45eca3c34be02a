"""Cheap estimates of the work an input asks for, checked before anything large is built.

Every estimate here is integer arithmetic on the resolved settings (no graph, grid, schedule or
program is built to make it), so a request far beyond what one machine can represent is refused
in microseconds, with one line naming the estimate and what to change:

* the cluster graph (:func:`graph_size`): vertices and directed edges that
  :func:`simtrain.topology.build.build_graph` would create, counted from the same rules (per node
  its GPUs, its NVSwitch, its NICs; the leaves, spines and cores of the fabric; two directed edges
  per physical link);
* the rank grid (:func:`check_ranks`): the ranks a device mesh lays out
  (:mod:`simtrain.topology.mesh` holds one integer per rank and dimension);
* the pipeline schedule (:func:`schedule_cells`): one cell per (rank, model chunk, micro-batch),
  each holding a forward and a backward action or more;
* the operations of a step (:func:`operations_lower_bound`): what the lowering
  (:mod:`simtrain.workload.lower`) emits for the simulated ranks; a lower bound, so a run is
  refused only when it would certainly exceed ``--max-events`` or the memory available.

The limits are sized for a few GiB of memory: a cluster graph costs about 500 bytes per element
(a node or an edge with its attribute dictionary; measured: ``simtrain topology h100-ib --nodes
12500`` builds 866,000 elements and peaks at 466 MiB, its bisection included), so 2,000,000
elements stay near 1 GiB; a schedule action costs about 100 bytes (a frozen dataclass of five
fields), so 1,000,000 cells of two or three actions stay under 300 MiB.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from simtrain.errors import ScheduleError, SpecError

if TYPE_CHECKING:
    from simtrain.topology.spec import TopologySpec

#: Most operations a run simulates unless ``--max-events`` says more: at about 620 bytes and 12 us
#: each (:data:`US_PER_OPERATION`), under 1.2 GiB and half a minute; the largest
#: published run of ``tests/validation`` (GPT-1T) holds 1,310,848.
DEFAULT_MAX_EVENTS = 2_000_000

#: Most vertices + directed edges of a cluster graph (h100-ib holds about 28,800 nodes = 230,000 GPUs).
MAX_GRAPH_ELEMENTS = 2_000_000
#: Most vertices + directed edges ``simtrain topology --draw`` draws (256 h100-ib nodes, 17,700
#: elements, draw in about 3 s; the time grows with the elements).
MAX_DRAWN_ELEMENTS = 20_000
#: Most ranks of a device mesh or a run (2**21 = 2,097,152 GPUs).
MAX_RANKS = 2**21
#: Most (rank, chunk, micro-batch) cells of a generated pipeline schedule (pp 64 x vpp 4 x 4,096
#: micro-batches; a 2,000,000-cell 1F1B takes about 10 s to generate).
MAX_SCHEDULE_CELLS = 1_000_000

#: Operations the lowering emits at least per layer, micro-batch and simulated pipeline: the
#: forward and the backward of the attention block and of the MLP block (design guide, section 3,
#: "Granularity"; :mod:`simtrain.workload.blocks`).
OPS_PER_LAYER = 4
#: Bytes each simulated operation holds at least until the report is written: its program entry,
#: the engine's bookkeeping and its timeline span. Measured with ``benchmarks/bench_scale.py``:
#: S3 (5,405,184 operations) peaks at 1,747 MiB, 339 bytes each; S1 (332,460 operations, all
#: outputs drawn) at 285 MiB, 899 each. The smaller figure, rounded down, so that only a run that
#: certainly does not fit is refused.
BYTES_PER_OPERATION = 300
#: With TP > 1, at least one TP collective per block and pass (Megatron-LM's all-reduce, or its
#: all-gather / reduce-scatter with sequence parallelism, around each block: Korthikanti et al.
#: 2022, section 4.2.2).
TP_OPS_PER_LAYER = 4


def graph_size(spec: TopologySpec) -> tuple[int, int]:
    """(vertices, directed edges) of the graph :func:`simtrain.topology.build.build_graph` builds
    from ``spec``, counted from its rules without building it.

    >>> from simtrain.topology.cluster import preset_table
    >>> from simtrain.topology.spec import parse_spec
    >>> graph_size(parse_spec(preset_table("h100-ib"), "h100-ib"))  # 8 nodes, 2 leaves, 8 spines
    (146, 416)
    """
    nd, fb, n = spec.node, spec.fabric, spec.nodes
    switch = 1 if nd.nvswitch and nd.gpus > 1 else 0
    vertices = n * (nd.gpus + switch + nd.nics)
    links = n * (nd.gpus * switch + (nd.gpus // nd.nics * nd.nics if nd.nics else 0))
    if fb.kind != "none":
        leaves = spec.num_leaves
        spines = fb.spines * (spec.num_pods if fb.tiers == 3 else 1)
        vertices += leaves + spines
        links += n * nd.nics + leaves * fb.spines
        if fb.tiers == 3:
            vertices += fb.cores
            links += fb.cores * spec.num_pods
    return vertices, 2 * links


def most_nodes(spec: TopologySpec, limit: int | None = None) -> int:
    """The most nodes of ``spec``'s kind whose graph stays within ``limit`` elements (default
    :data:`MAX_GRAPH_ELEMENTS`; 0 when even one node exceeds it): a bisection over the node count,
    which the graph size grows with."""
    limit = MAX_GRAPH_ELEMENTS if limit is None else limit
    lo, hi = 0, limit
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if sum(graph_size(replace(spec, nodes=mid))) <= limit:
            lo = mid
        else:
            hi = mid - 1
    return lo


def check_graph_size(spec: TopologySpec, source: str) -> None:
    """A one-line :class:`SpecError` when the graph of ``spec`` would exceed
    :data:`MAX_GRAPH_ELEMENTS`, naming its size and the most nodes that fit."""
    vertices, edges = graph_size(spec)
    if vertices + edges <= MAX_GRAPH_ELEMENTS:
        return
    fb = spec.fabric
    most = most_nodes(spec)
    fabric = f", [fabric] spines = {fb.spines:,}" if fb.kind != "none" else ""
    if fb.tiers == 3:
        fabric += f", cores = {fb.cores:,}"
    switches = {2: " or fewer spines", 3: " or fewer spines or cores"}.get(fb.tiers, "") if fb.kind != "none" else ""
    change = (f"use at most {most:,} nodes" if most else "use fewer nodes") + switches
    raise SpecError(f"{source}: nodes = {spec.nodes:,}{fabric}: the cluster graph would have {vertices:,} "
                    f"vertices and {edges:,} directed links, more than the {MAX_GRAPH_ELEMENTS:,} "
                    f"elements that can be built; {change}")


def check_drawing(spec: TopologySpec) -> None:
    """A one-line :class:`SpecError` when ``--draw`` would draw more than
    :data:`MAX_DRAWN_ELEMENTS` vertices and links (``simtrain topology``)."""
    vertices, edges = graph_size(spec)
    if vertices + edges <= MAX_DRAWN_ELEMENTS:
        return
    raise SpecError(f"--draw: topology {spec.name} with nodes = {spec.nodes:,} has {vertices + edges:,} vertices "
                    f"and directed links, more than the {MAX_DRAWN_ELEMENTS:,} a drawing shows; draw "
                    f"it with --nodes {max(1, most_nodes(spec, MAX_DRAWN_ELEMENTS))} or fewer (the structure "
                    f"repeats)")


def check_ranks(world: int, what: str) -> None:
    """A one-line :class:`SpecError` when ``world`` ranks exceed :data:`MAX_RANKS`; ``what``
    names the input (``gpus=...``)."""
    if world > MAX_RANKS:
        raise SpecError(f"{what}: {world:,} ranks, more than the {MAX_RANKS:,} GPUs a layout can "
                        f"hold; use fewer GPUs")


def schedule_cells(pp: int, m: int, vpp: int = 1) -> int:
    """(rank, model chunk, micro-batch) cells of a schedule: ``pp * vpp * m``."""
    return pp * max(1, vpp) * m


#: CPU microseconds per cell to plan a schedule: zb-auto searches its order cell by cell
#: (measured 75-129 us per cell at pp 16-32, 256 and 1,024 micro-batches, three runs each, on the
#: 2-core machine of ``benchmarks/bench_edges.py``: ``simtrain schedule zb-auto --pp 32
#: --microbatches 1024`` plans and replays in 6.7 s); every other generator lays out its cells in
#: 1-10 us each.
PLAN_US_PER_CELL = {"zb-auto": 140.0}
#: The same for the generators without an entry in :data:`PLAN_US_PER_CELL`.
DEFAULT_PLAN_US_PER_CELL = 10.0
#: CPU microseconds per cell to replay a schedule at fixed costs and report it (``simtrain
#: schedule``): 26-70 us measured over every built-in generator at pp 16-32 (dualpipev the most).
REPLAY_US_PER_CELL = 70.0
#: The most estimated seconds of schedule work one command takes on before it is refused: so
#: that ``simtrain schedule`` answers in about ten seconds (``benchmarks/bench_edges.py`` E17-E20).
MAX_SCHEDULE_SECONDS = 8.0


def schedule_seconds(name: str, pp: int, m: int, vpp: int = 1, replay: bool = False) -> float:
    """Estimated CPU seconds to plan schedule ``name`` (and, with ``replay``, to replay it):
    its cells times :data:`PLAN_US_PER_CELL` (plus :data:`REPLAY_US_PER_CELL`)."""
    per_cell = PLAN_US_PER_CELL.get(name, DEFAULT_PLAN_US_PER_CELL) + (REPLAY_US_PER_CELL if replay else 0.0)
    return schedule_cells(pp, m, vpp) * per_cell * 1e-6


def check_schedule(name: str, pp: int, m: int, vpp: int = 1, replay: bool = False) -> None:
    """A one-line :class:`ScheduleError` when generating schedule ``name`` would exceed
    :data:`MAX_SCHEDULE_CELLS`, or its planning (and with ``replay`` its replay) is estimated
    beyond :data:`MAX_SCHEDULE_SECONDS` (:func:`schedule_seconds`)."""
    cells = schedule_cells(pp, m, vpp)
    chunks = f" x vpp={vpp:,}" if vpp and vpp > 1 else ""
    fewer = "use fewer micro-batches (a smaller global batch or a larger micro-batch), fewer stages or fewer chunks"
    if cells > MAX_SCHEDULE_CELLS:
        raise ScheduleError(f"schedule {name}: pp={pp:,} x micro-batches={m:,}{chunks} = {cells:,} cells, more "
                            f"than the {MAX_SCHEDULE_CELLS:,} a schedule can hold; {fewer}")
    seconds = schedule_seconds(name, pp, m, vpp, replay)
    if seconds > MAX_SCHEDULE_SECONDS:
        most = int(MAX_SCHEDULE_SECONDS / (seconds / cells))
        raise ScheduleError(f"schedule {name}: pp={pp:,} x micro-batches={m:,}{chunks} = {cells:,} cells would take "
                            f"about {seconds:,.0f} s to {'plan and replay' if replay else 'plan'}, more than the "
                            f"{MAX_SCHEDULE_SECONDS:g} s a command takes on; at most {most:,} cells: {fewer}")


def operations_lower_bound(layers: int, microbatches: int, *, pipelines: int = 1, tp: int = 1,
                           steps: int = 1) -> int:
    """At least this many operations in a step: per simulated pipeline (``pipelines``), step and
    micro-batch, :data:`OPS_PER_LAYER` per layer, plus :data:`TP_OPS_PER_LAYER` with TP > 1.

    >>> operations_lower_bound(32, 100_000, tp=8)  # llama3-8b, TP8, gbs 100000
    25600000
    """
    per_layer = OPS_PER_LAYER + (TP_OPS_PER_LAYER if tp > 1 else 0)
    return pipelines * steps * microbatches * layers * per_layer


def check_operations(layers: int, microbatches: int, *, pipelines: int, tp: int, steps: int,
                     max_events: int) -> None:
    """A one-line :class:`SpecError` when a step certainly runs more than ``max_events``
    operations (:func:`operations_lower_bound`), or more than the memory available holds at
    :data:`BYTES_PER_OPERATION` each, before its schedule or program is built."""
    ops = operations_lower_bound(layers, microbatches, pipelines=pipelines, tp=tp, steps=steps)
    need, have = ops * BYTES_PER_OPERATION, available_memory_bytes()
    if ops <= max_events and (have is None or need <= have):
        return
    folded = "" if pipelines == 1 else f" x {pipelines:,} unfolded pipelines"
    times = f" x {steps:,} steps" if steps > 1 else ""
    fewer = ("use fewer micro-batches (a smaller --gbs or a larger --mbs)"
             + (", fewer --steps" if steps > 1 else "") + (" or drop --no-fold" if pipelines > 1 else ""))
    what = (f"{f'{steps:,} steps' if steps > 1 else 'the step'} would run at least {ops:,} operations "
            f"({microbatches:,} micro-batches x {layers:,} layers{times}{folded})")
    if ops > max_events:
        raise SpecError(f"max_events={max_events:,}: {what}; raise --max-events, {fewer}")
    assert have is not None  # the memory check failed, so the memory is known
    raise SpecError(f"{what}, which hold at least {need / 2**30:,.1f} GiB ({BYTES_PER_OPERATION} bytes each), more "
                    f"than the {have / 2**30:,.1f} GiB of memory available; {fewer}")


#: CPU microseconds a simulated operation costs from lowering to report, for the time a refusal
#: names: 9-18 us measured over the A100 validation rows (``tests/validation``) on the 2-core
#: machine, the middle of that range.
US_PER_OPERATION = 12.0
#: Bytes a simulated operation holds until the report is written, as a refusal names them (the
#: mean of ``benchmarks/bench_scale.py``'s S1 and S3 peaks; :data:`BYTES_PER_OPERATION` is the
#: lower bound the up-front check uses).
TYPICAL_BYTES_PER_OPERATION = 620


#: How far beyond the limits an estimate from part of the first rank's step must go to refuse the
#: run (:func:`check_lowered`): the largest overestimate measured, 5%, twice.
PARTIAL_MARGIN = 1.1


def check_lowered(first_ops: int, *, ranks: int, steps: int, max_events: int, share: float | None = None,
                  partial: bool = False) -> None:
    """A one-line :class:`SpecError` when a run whose first simulated rank emitted ``first_ops``
    operations in its first step would emit more than ``max_events`` over its ``ranks`` simulated
    ranks and ``steps`` steps, or more than the memory available holds: called by the lowering
    after that first step, before the rest is built. Every step of a rank emits the same
    operations, and a rank's count grows with its layer passes; ``share`` is the part of the
    layer passes of all simulated ranks lowered so far (``1 / ranks`` when they are even), so the
    estimate is ``first_ops / share * steps``. With ``partial``, only part of the first rank's
    step is lowered: a forward-only warm-up emits fewer operations per layer than what follows,
    so that estimate is mostly low (measured from -47% to +5% over the built-in schedules), and
    it is refused only beyond :data:`PARTIAL_MARGIN` times the limits."""
    share = 1.0 / ranks if share is None else share
    if ranks * steps <= 1 and not partial:
        return
    ops = round(first_ops / share) * steps
    need, have = ops * TYPICAL_BYTES_PER_OPERATION, available_memory_bytes()
    margin = PARTIAL_MARGIN if partial else 1.0
    if ops <= max_events * margin and (have is None or ops * BYTES_PER_OPERATION <= have * margin):
        return
    where = (f"{share:.1%} of the layer passes of a step" if partial
             else f"the first step of the first of {ranks:,} simulated ranks")
    of = f"{first_ops:,} in {where}" + (f", x {steps:,} steps" if steps > 1 else "")
    what = (f"the run would simulate about {ops:,} operations ({of}), about {need / 2**30:,.1f} GiB and "
            f"{_duration(ops * US_PER_OPERATION * 1e-6)} of CPU")
    fewer = ("fewer layers, fewer micro-batches (a smaller --gbs or a larger --mbs)"
             + (", fewer --steps" if steps > 1 else ""))
    if ops > max_events * margin:
        raise SpecError(f"max_events={max_events:,}: {what}; raise --max-events to run it, or simulate {fewer}")
    assert have is not None  # the memory check failed, so the memory is known
    raise SpecError(f"{what}, more than the {have / 2**30:,.1f} GiB of memory available; simulate {fewer}")


def _duration(seconds: float) -> str:
    """``40 s``, ``3 min``, ``2.5 h``."""
    if seconds < 120:
        return f"{seconds:,.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:,.0f} min"
    return f"{seconds / 3600:,.1f} h"


def available_memory_bytes() -> int | None:
    """Memory this process can still use: Linux's ``MemAvailable`` (``/proc/meminfo``), capped
    by the control group's ``memory.max`` less its ``memory.current`` where one is set; None
    where neither can be read (then no run is refused for its memory)."""
    out = None
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    out = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        pass
    try:
        with open("/sys/fs/cgroup/memory.max", encoding="ascii") as f:
            limit = f.read().strip()
        with open("/sys/fs/cgroup/memory.current", encoding="ascii") as f:
            used = int(f.read().strip())
        if limit != "max":
            room = max(0, int(limit) - used)
            out = room if out is None else min(out, room)
    except (OSError, ValueError):
        pass
    return out
