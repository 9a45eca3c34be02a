"""Gantt charts: PNG and SVG of small hand-built timelines, refused suffixes, legends outside the
data, hatched communication, time windows, rank and stream selection from the command line,
titles with the right plural."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from helpers import assert_user_error, cli, two_rank_timeline
from simtrain import api
from simtrain.results.metrics import memory_timeline
from simtrain.outputs.colors import KIND_HATCHES
from simtrain.outputs.gantt import _chunks_of, draw_gantt, gantt_figure
from simtrain.outputs.view import chunk_index, parse_window
from simtrain.engine.timeline import Timeline, TimelineBuilder
from simtrain.workload.program import KINDS, STREAMS
from outputs.test_view import many_rank_timeline

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    width, height = struct.unpack(">II", data[16:24])
    return width, height


@pytest.fixture(scope="module")
def default_run():
    return api.simulate(api.resolve(None))


def _overlaps(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


# ---------------------------------------------------------------- files


def test_png_signature_and_height_grows_with_rows(tmp_path):
    tl = two_rank_timeline()
    one, two, full = tmp_path / "one.png", tmp_path / "two.png", tmp_path / "full.png"
    draw_gantt(tl, one, ranks=[0], streams=["compute"])
    draw_gantt(tl, two, textbook=True, title="textbook")
    draw_gantt(tl, full, rank_labels={0: "stage 0", 1: "stage 1"})
    (w1, h1), (w2, h2), (w3, h3) = png_size(one), png_size(two), png_size(full)
    assert w1 == w2 == w3
    assert h1 < h2 < h3
    assert not list(tmp_path.glob(".*.tmp"))  # atomic write left no temporary behind


def test_textbook_height_matches_one_row_per_rank(tmp_path):
    tl = two_rank_timeline()
    textbook, compute_only = tmp_path / "t.png", tmp_path / "c.png"
    draw_gantt(tl, textbook, textbook=True)
    draw_gantt(tl, compute_only, streams=["compute"])
    assert png_size(textbook)[1] == png_size(compute_only)[1]


@pytest.mark.quick
def test_svg_output_is_reproducible(tmp_path):
    a, b = tmp_path / "a.svg", tmp_path / "b.svg"
    draw_gantt(two_rank_timeline(), a, textbook=True)
    draw_gantt(two_rank_timeline(), b, textbook=True)
    assert "<svg" in a.read_text() and a.read_bytes() == b.read_bytes()


def test_subset_is_drawn_and_capped(tmp_path):
    tl = many_rank_timeline(100)
    capped, small = tmp_path / "capped.png", tmp_path / "small.png"
    draw_gantt(tl, capped, max_rows=8)
    draw_gantt(many_rank_timeline(4), small)  # 8 rows, no subset
    assert png_size(capped)[1] == png_size(small)[1]
    heading = gantt_figure(tl, max_rows=8)._suptitle.get_text()
    assert "showing 4 of 100 ranks" in heading and "8 of 200 rows" in heading


@pytest.mark.quick
def test_unknown_suffix_raises(tmp_path):
    with pytest.raises(ValueError, match="suffix"):
        draw_gantt(two_rank_timeline(), tmp_path / "g.jpg")
    assert not list(tmp_path.iterdir())


@pytest.mark.quick
def test_empty_timeline_draws(tmp_path):
    path = tmp_path / "empty.png"
    draw_gantt(TimelineBuilder().build(), path)
    assert path.read_bytes()[:8] == PNG_SIGNATURE


# ---------------------------------------------------------------- what is drawn


def test_legends_sit_outside_every_data_area(default_run):
    r = default_run
    fig = gantt_figure(r.timeline, rank_labels=r.rank_labels, memory=memory_timeline(r.timeline, r.static_bytes),
                       memory_capacity_bytes=r.scenario.gpu.usable_memory_bytes)
    renderer = fig.canvas.get_renderer()
    axes = [ax.get_window_extent(renderer) for ax in fig.axes]
    assert len(axes) == 2 and len(fig.legends) == 2  # the Gantt and the memory panel, a legend each
    texts = [t.get_text() for leg in fig.legends for t in leg.get_texts()]
    assert "capacity" in texts and "F forward" in texts and "DP comm" in texts
    for legend in fig.legends:
        box = legend.get_window_extent(renderer)
        assert not any(_overlaps(box, ax) for ax in axes), (box, axes)
        assert 0 <= box.x0 and box.x1 <= fig.bbox.x1 and 0 <= box.y0 and box.y1 <= fig.bbox.y1
    title = fig._suptitle.get_window_extent(renderer)
    assert not any(_overlaps(title, b) for b in [*axes, *(leg.get_window_extent(renderer) for leg in fig.legends)])


@pytest.mark.quick
def test_communication_is_hatched_and_compute_is_not():
    from matplotlib.collections import LineCollection

    fig = gantt_figure(two_rank_timeline())
    ax = fig.axes[0]
    hatches = {c.get_hatch() for c in ax.collections if not isinstance(c, LineCollection)}
    assert KIND_HATCHES["tp"] in hatches and KIND_HATCHES["pp"] in hatches
    assert None in hatches  # compute
    legend = {t.get_text(): h for t, h in zip(fig.legends[0].get_texts(), fig.legends[0].legend_handles)}
    assert legend["TP comm"].get_hatch() == KIND_HATCHES["tp"] and legend["F forward"].get_hatch() is None


def _boxes(fig) -> int:
    """Boxes drawn: one per path of a PolyCollection, one per subpath of a compound path."""
    from matplotlib.collections import PathCollection, PolyCollection
    from matplotlib.path import Path

    return sum(len(c.get_paths()) if isinstance(c, PolyCollection)
               else sum(int((p.codes == Path.MOVETO).sum()) for p in c.get_paths())
               for c in fig.axes[0].collections if isinstance(c, (PolyCollection, PathCollection)))


@pytest.mark.quick
def test_window_limits_the_axis_and_the_boxes():
    tl = two_rank_timeline()  # 11 ms: the axis is in microseconds
    whole = gantt_figure(tl)
    part = gantt_figure(tl, window=parse_window("0.006:0.009"))
    assert part.axes[0].get_xlim() == pytest.approx((6000.0, 9000.0))
    assert _boxes(part) < _boxes(whole)
    assert "window 0.006 s to 0.009 s" in part._suptitle.get_text()
    mb = gantt_figure(tl, window=parse_window("mb:1:2"))
    assert mb.axes[0].get_xlim() == pytest.approx((2000.0, 5700.0))
    assert "window micro-batch 1" in mb._suptitle.get_text()


@pytest.mark.quick
def test_ranks_and_streams_choose_the_rows():
    fig = gantt_figure(two_rank_timeline(), ranks=[1], streams=["compute", "pp_recv"],
                       rank_labels={1: "stage 1"})
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["stage 1  compute", "pp_recv"]


@pytest.mark.quick
def test_a_ranks_label_heads_its_rows():
    """The rank's label on its first row, the stream alone below it; a textbook row is its rank."""
    from simtrain.outputs.gantt import _row_labels

    rows = [(0, "compute"), (0, "tp"), (1, "compute"), (2, "tp"), (2, "dp")]
    assert _row_labels(rows, {0: "stage 0"}, False) == ["stage 0  compute", "tp", "rank 1  compute",
                                                        "rank 2  tp", "dp"]
    assert _row_labels([(0, "compute"), (1, "compute")], {1: "stage 1"}, True) == ["rank 0", "stage 1"]


def test_run_draws_what_the_chart_flags_ask_for(tmp_path, monkeypatch):
    import simtrain.outputs.gantt as gantt

    seen = {}
    real = gantt.draw_gantt
    monkeypatch.setattr(gantt, "draw_gantt", lambda *a, **kw: (seen.update(kw), real(*a, **kw)))
    code, _, err = cli("run", "--pp", "1", "--gbs", "8", "--ranks", "0", "--streams", "tp,compute",
                       "--window", "0:0.5", "--out", tmp_path)
    assert code == 0, err
    assert seen["ranks"] == (0,) and seen["streams"] == ("compute", "tp")
    assert (seen["window"].start, seen["window"].end) == (0.0, 0.5)
    assert seen["title"].endswith(", 1 micro-batch")  # gbs 8 on DP=8: one per pipeline
    assert png_size(tmp_path / "timeline.png")[1] < 500  # 2 rows and the memory panel


def test_two_hundred_thousand_spans_draw(tmp_path):
    n = 200_000
    starts = np.arange(n) * 10e-6
    cols = {c: np.zeros(n, dtype=np.int32) for c in ("rank", "stream", "name", "stage", "layer", "arrow")}
    cols.update(kind=(np.arange(n) % 2).astype(np.int32), mb=(np.arange(n) // 100).astype(np.int32),
                start_s=starts, end_s=starts + 8e-6, flops=np.zeros(n), bytes=np.zeros(n),
                alloc_bytes=np.zeros(n), free_bytes=np.zeros(n))
    path = tmp_path / "big.png"
    draw_gantt(Timeline(cols, ["op"]), path)
    assert png_size(path)[0] == 1600


@pytest.mark.quick
def test_schedule_gantt_takes_a_window_and_ranks(tmp_path):
    path = tmp_path / "zb.svg"
    code, out, err = cli("schedule", "zb-h1", "--pp", "4", "--microbatches", "8", "--gantt", path,
                         "--window", "mb:0:2", "--ranks", "0,3")
    assert code == 0, err
    svg = path.read_text()
    assert "rank 0" in svg and "rank 3" in svg and "rank 1" not in svg and "rank 2" not in svg
    assert "window micro-batches 0 to 1" in svg
    assert_user_error("schedule", "zb-h1", "--pp", "4", "--microbatches", "8", "--window", "0:5",
                      contains="give --gantt")
    assert_user_error("schedule", "zb-h1", "--pp", "4", "--microbatches", "8", "--gantt", path, "--ranks", "4",
                      contains=("--ranks 4", "ranks 0, 1, 2, 3"))


@pytest.mark.quick
def test_counts_of_one_are_singular():
    code, out, err = cli("schedule", "1f1b", "--pp", "1", "--microbatches", "1")
    assert code == 0, err
    assert out.startswith("1f1b: 1 rank, 1 micro-batch, 1 stage;")


# ---------------------------------------------------------------- drawing many boxes at once


def _narrow_spans_timeline(n_per_row: int = 3000) -> Timeline:
    """Three ranks, each with a compute row (forward, then backward of a later chunk) and rows of
    hatched TP and PP spans, all a fraction of a pixel wide with gaps of about a pixel between
    some; the last span of a row ends the step, on the axes' right edge."""
    rng = np.random.default_rng(7)
    rows = [(r, s) for r in range(3) for s in ("compute", "tp", "pp_send")]
    kind_of = {"compute": "F", "tp": "tp", "pp_send": "pp"}
    cols: dict[str, list] = {c: [] for c in ("rank", "stream", "kind", "stage", "mb", "start_s", "end_s")}
    for r, s in rows:
        gaps = rng.choice([1e-6, 2e-5, 3e-4], size=n_per_row)
        starts = np.cumsum(gaps + 4e-6) - 4e-6
        starts = starts * (1.0 / (starts[-1] + 4e-6))  # every row ends at 1 s
        kinds = np.full(n_per_row, KINDS.index(kind_of[s]))
        later = np.arange(n_per_row) >= n_per_row // 2
        if s == "compute":
            kinds[later] = KINDS.index("B")
        for c, v in (("rank", np.full(n_per_row, r)), ("stream", np.full(n_per_row, STREAMS.index(s))),
                     ("kind", kinds), ("stage", np.where(later & (s == "compute"), r + 3, r)),
                     ("mb", np.arange(n_per_row) % 7),
                     ("start_s", starts), ("end_s", np.minimum(starts + 4e-6, 1.0))):
            cols[c].append(v)
    out = {c: np.concatenate(v) for c, v in cols.items()}
    order = np.argsort(out["start_s"], kind="stable")
    out = {c: v[order] for c, v in out.items()}
    n = len(order)
    for c in ("rank", "stream", "kind", "stage", "mb"):
        out[c] = out[c].astype(np.int32)
    out.update(name=np.zeros(n, dtype=np.int32), layer=np.zeros(n, dtype=np.int32),
               arrow=np.full(n, -1, dtype=np.int32), flops=np.zeros(n), bytes=np.zeros(n),
               alloc_bytes=np.zeros(n), free_bytes=np.zeros(n))
    return Timeline(out, ["op"])


def _rgba(fig) -> np.ndarray:
    fig.canvas.draw()
    return np.asarray(fig.canvas.buffer_rgba()).copy()


def test_compound_paths_draw_the_pixels_of_one_path_per_box():
    """Each collection's boxes drawn as two compound paths give exactly the picture of the same
    boxes drawn as a PolyCollection of one path each, hatching and the axes' edge included."""
    from matplotlib.collections import PathCollection, PolyCollection

    tl = _narrow_spans_timeline()
    compound = gantt_figure(tl)
    reference = gantt_figure(tl)
    ax = reference.axes[0]
    swapped = 0
    for coll in list(ax.collections):
        if not isinstance(coll, PathCollection):
            continue
        boxes = np.concatenate([p.vertices.reshape(-1, 5, 2)[:, :4] for p in coll.get_paths()])
        assert len(coll.get_paths()) == 2
        one_each = PolyCollection(boxes, closed=True, facecolors=coll.get_facecolor(),
                                  edgecolors=coll.get_edgecolor(), hatch=coll.get_hatch(),
                                  linewidths=0.0, antialiaseds=False, zorder=coll.get_zorder())
        coll.remove()
        ax.add_collection(one_each)
        swapped += 1
    assert swapped == 4  # F, B (a later chunk: lighter), TP, PP
    assert {c.get_hatch() for c in compound.axes[0].collections} >= {KIND_HATCHES["tp"], KIND_HATCHES["pp"]}
    a, b = _rgba(compound), _rgba(reference)
    assert a.shape == b.shape
    assert np.array_equal(a, b), int((a != b).any(axis=2).sum())


def test_a_large_chart_draws_few_paths(tmp_path):
    """Hundreds of thousands of spans end as a handful of paths: at most two per (kind, shade)."""
    from matplotlib.collections import LineCollection

    tl = _narrow_spans_timeline(20_000)
    fig = gantt_figure(tl)
    boxes = [c for c in fig.axes[0].collections if not isinstance(c, LineCollection)]
    assert len(boxes) == 4 and all(len(c.get_paths()) == 2 for c in boxes)


@pytest.mark.quick
def test_chunks_are_those_of_the_view():
    """The one-pass chunk count equals :func:`chunk_index` (ranks holding stages 0 and 3, spans of
    no stage, and ranks numbered too sparsely for a table)."""
    tl = _narrow_spans_timeline(50)
    idx = np.arange(0, len(tl), 3)
    chunks = _chunks_of(tl, idx)
    assert np.array_equal(chunks, chunk_index(tl)[idx])
    assert set(chunks.tolist()) == {0, 1}
    cols = dict(tl.cols)
    cols["stage"] = np.where(np.arange(len(tl)) % 5 == 0, -1, cols["stage"]).astype(np.int32)
    cols["rank"] = (cols["rank"] * 1_000_000).astype(np.int32)
    sparse = Timeline(cols, ["op"])
    assert np.array_equal(_chunks_of(sparse, idx), chunk_index(sparse)[idx])
    assert _chunks_of(sparse, idx[:0]).tolist() == []
