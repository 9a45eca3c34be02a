"""The offline HTML report: one self-contained file whose data decodes back to the timeline, with
the tables of the step and, for ``compare``, the closed form beside the simulation; and, in a
real headless browser (Debian's chromium driven by selenium), a page that renders without errors
or network requests, zooms with the wheel and the buttons, pans by dragging, filters, names the
span under the pointer, and stays responsive with a million spans."""

from __future__ import annotations

import base64
import gzip
import json
import os
import re
from pathlib import Path

import numpy as np
import pytest

from helpers import add_span, cli, two_rank_timeline
from outputs.browser import chromium, hover, missing, offset_of, open_report
from simtrain import api
from simtrain.outputs.colors import KIND_LABELS
from simtrain.outputs.html import SideBySide, pack_columns, render_html_report
from simtrain.engine.timeline import Timeline, TimelineBuilder
from simtrain.workload.program import KINDS, STREAMS

def _page_parts(page: str) -> tuple[dict, dict[str, np.ndarray]]:
    """The page's description and its columns, decoded as the page's script decodes them."""
    meta = json.loads(re.search(r'id="simtrain-meta">(.*?)</script>', page, re.S).group(1))
    blob = gzip.decompress(base64.b64decode(re.search(r'id="simtrain-data">(.*?)</script>', page, re.S).group(1)))
    dtypes = {"Float64Array": "<f8", "Int32Array": "<i4", "Uint8Array": "u1"}
    cols = {c["name"]: np.frombuffer(blob, dtype=dtypes[c["type"]], count=c["length"], offset=c["offset"])
            for c in meta["columns"]}
    return meta, cols


@pytest.fixture(scope="module")
def default_run():
    return api.simulate(api.resolve(None))


@pytest.fixture(scope="module")
def report_page(default_run, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("report")
    paths = api.write_outputs(default_run, out, plot=False, html=True)
    assert paths["html"] == str(out / "report.html")
    return out / "report.html"


# ---------------------------------------------------------------- the file


def test_the_page_is_one_file_that_needs_no_network(report_page):
    page = report_page.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>")
    for outside in ("http://", "https://", "<link", " src=", "@import", "url("):
        assert outside not in page, outside
    assert "Perfetto" not in page
    assert page.count("<script") == 3  # the description, the data, the script: all inline


@pytest.mark.quick
def test_the_data_decodes_to_the_timeline_sorted_by_row_then_start():
    tl = two_rank_timeline()
    meta, cols = _page_parts(render_html_report(tl, title="t", report=_report_of(tl)))
    assert [(r["rank"], r["stream"]) for r in meta["rows"]] == [
        (0, "compute"), (0, "tp"), (0, "pp_send"), (0, "pp_recv"), (1, "compute"), (1, "pp_send"), (1, "pp_recv")]
    offsets = cols["row_offsets"]
    assert offsets[0] == 0 and offsets[-1] == len(tl) == meta["count"] and np.all(np.diff(offsets) > 0)
    seen = set()
    for row, (lo, hi) in enumerate(zip(offsets[:-1], offsets[1:])):
        assert np.all(np.diff(cols["start"][lo:hi]) >= 0)
        for j in range(lo, hi):
            span = (meta["rows"][row]["rank"], meta["rows"][row]["stream"], KINDS[cols["kind"][j]],
                    meta["names"][cols["name"][j]], int(cols["mb"][j]), int(cols["stage"][j]), int(cols["layer"][j]),
                    round(float(cols["start"][j]), 12), round(float(cols["start"][j] + cols["dur"][j]), 12),
                    float(cols["flops"][j]), float(cols["bytes"][j]))
            seen.add(span)
    expected = {(s.rank, s.stream, s.kind, s.name, s.mb, s.stage, s.layer, round(s.start_s, 12), round(s.end_s, 12),
                 s.flops, s.bytes) for s in tl.spans()}
    assert seen == expected
    assert meta["streams"] == list(STREAMS) and [k["key"] for k in meta["kinds"]] == list(KINDS)
    assert [k["hatch"] != "" for k in meta["kinds"]] == [k in ("tp", "cp", "ep", "pp", "dp") for k in KINDS]


@pytest.mark.quick
def test_columns_are_packed_aligned_for_their_typed_arrays():
    specs, blob = pack_columns([("a", np.arange(3, dtype=np.uint8)), ("b", np.arange(2, dtype=np.int32)),
                                ("c", np.arange(1, dtype=np.float64))])
    assert [(s["name"], s["type"], s["offset"]) for s in specs] == [
        ("c", "Float64Array", 0), ("b", "Int32Array", 8), ("a", "Uint8Array", 16)]
    assert len(blob) == 19


@pytest.mark.quick
def test_tables_and_the_comparison_are_in_the_page(default_run):
    side = SideBySide(["", "analytic", "simulated", "difference"], [["step time", "4.655 s", "4.640 s", "-0.3%"]],
                      ["bubble: simulated 63.76 ms lower: <fill & drain>"])
    page = render_html_report(default_run.timeline, title="llama <70b>", report=default_run.report,
                              comparison=side)
    assert "<title>llama &lt;70b&gt;</title>" in page
    assert 'class="breakdown"' in page and 'class="communication"' in page and 'class="metrics"' in page
    assert "<td>4.655 s</td>" in page and "&lt;fill &amp; drain&gt;" in page
    assert "step breakdown" in page and "<th>in breakdown</th>" in page and "exposed minus in breakdown" in page
    assert "Closed form beside the simulation" not in render_html_report(default_run.timeline, title="t",
                                                                         report=default_run.report)


@pytest.mark.quick
def test_empty_timeline_gives_a_page():
    tl = Timeline.from_json({"streams": list(STREAMS), "kinds": list(KINDS), "names": [],
                             "columns": {c: [] for c in two_rank_timeline().cols}})
    meta, cols = _page_parts(render_html_report(tl, title="empty", report=_report_of(tl)))
    assert meta["rows"] == [] and cols["row_offsets"].tolist() == [0]


def test_run_and_compare_write_the_page(tmp_path, monkeypatch):
    code, out, err = cli("run", "--html", "--no-plot", "--out", tmp_path / "run")
    assert code == 0, err
    assert (tmp_path / "run" / "report.html").exists() and "report.html" in out
    monkeypatch.chdir(tmp_path)
    code, out, err = cli("compare", "--html", "--no-plot")  # compare writes files only when asked: to out/
    assert code == 0, err
    page = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    assert "Closed form beside the simulation" in page and "<th>analytic</th>" in page


def _report_of(tl: Timeline) -> dict:
    zero = {k: 0.0 for k in ("tp", "cp", "ep", "pp", "dp")}
    return {"step_time_s": tl.end_s, "tokens_per_s": 1.0, "tflops_per_gpu": 1.0, "mfu": 0.5, "hfu": 0.5,
            "bubble_ratio": 0.0, "stage_imbalance": 1.0, "peak_memory_gib": [1.0], "memory_capacity_gib": 2.0,
            "fits_in_memory": True, "breakdown_s": {k: 0.0 for k in ("compute", "recompute", "imbalance", "tp",
                                                                      "cp", "ep", "pp", "bubble", "dp")},
            "exposed_comm_s": zero, "overlapped_comm_s": zero}


# ---------------------------------------------------------------- in a browser


@pytest.fixture(scope="module")
def browser():
    """Headless chromium (see browser.py); missing, the tests skip, except on CI where they fail."""
    lacking = missing()
    if lacking:
        if os.environ.get("CI"):
            pytest.fail(f"the browser tests need {lacking} (.ci/run installs chromium and chromedriver)")
        pytest.skip(f"{lacking} is missing")
    with chromium() as driver:
        yield driver


def _open(driver, path: Path, timeout_s: float = 30.0) -> None:
    open_report(driver, path.as_uri(), timeout_s)
    assert driver.execute_script("return window.simtrainErrors") == []


def _geometry(driver) -> dict:
    return driver.execute_script("return window.simtrain.geometry()")


def _window(driver) -> tuple[float, float]:
    g = _geometry(driver)
    return g["t0"], g["t1"]


def test_the_page_renders_without_errors_or_requests(browser, report_page, default_run):
    browser.get_log("performance")  # drop what came before
    _open(browser, report_page)
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == []
    requests = [json.loads(e["message"])["message"] for e in browser.get_log("performance")]
    urls = [m["params"]["request"]["url"] for m in requests if m["method"] == "Network.requestWillBeSent"
            and m["params"].get("documentURL") == report_page.as_uri()]
    assert urls == [report_page.as_uri()]  # the page asks for nothing but itself
    painted = browser.execute_script("""
        const c = document.getElementById('tl-canvas'), g = simtrain.geometry();
        const d = c.getContext('2d').getImageData(g.labelWidth * devicePixelRatio, g.axisHeight * devicePixelRatio,
                                                  g.plotWidth * devicePixelRatio, 200).data;
        let n = 0; for (let i = 0; i < d.length; i += 4) if (d[i] + d[i + 1] + d[i + 2] < 600) n++;
        return n;""")
    assert painted > 20_000  # boxes, not a blank canvas
    assert f"{len(default_run.timeline):,} spans on 20 rows" in browser.find_element("id", "status").text
    assert browser.find_element("css selector", "table.breakdown").text.startswith("category time share")
    assert len(browser.find_elements("css selector", "#mem-legend label")) == 5  # four stages and the capacity


def test_wheel_buttons_and_drag_change_the_visible_window(browser, report_page):
    from selenium.webdriver.common.action_chains import ActionChains, ScrollOrigin

    _open(browser, report_page)
    t0, t1 = _window(browser)
    assert t0 == 0 and t1 == pytest.approx(4.64, abs=0.5)
    canvas = browser.find_element("id", "tl-canvas")
    at = offset_of(browser, 0, "compute", 1.0)
    ActionChains(browser).scroll_from_origin(ScrollOrigin.from_element(canvas, *at), 0, -400).perform()
    z0, z1 = _window(browser)
    assert z1 - z0 < 0.75 * (t1 - t0)  # zoomed in...
    assert z0 < 1.0 < z1 and (1.0 - z0) / (z1 - z0) == pytest.approx((1.0 - t0) / (t1 - t0), abs=0.02)  # ...at the pointer
    assert "window" in browser.find_element("id", "window-readout").text
    browser.find_element("id", "zoom-in").click()
    b0, b1 = _window(browser)
    assert b1 - b0 == pytest.approx((z1 - z0) / 2)
    ActionChains(browser).move_to_element_with_offset(canvas, 0, 0).click_and_hold().move_by_offset(-200, 0) \
        .release().perform()
    p0, p1 = _window(browser)
    assert p1 - p0 == pytest.approx(b1 - b0) and p0 > b0  # dragged left: later times come into view
    browser.find_element("id", "zoom-reset").click()
    assert _window(browser) == pytest.approx((t0, t1))


def test_hovering_a_span_names_its_operation(browser, report_page, default_run):
    _open(browser, report_page)
    tl = default_run.timeline
    compute = np.nonzero(tl.mask(rank=16, stream="compute") & (tl["mb"] >= 0))[0]
    big = tl.span(int(compute[np.argmax((tl["end_s"] - tl["start_s"])[compute])]))
    browser.execute_script("simtrain.setWindow(arguments[0], arguments[1])", big.start_s - 0.05, big.end_s + 0.05)
    text = hover(browser, 16, "compute", (big.start_s + big.end_s) / 2)
    assert text.splitlines()[0] == f"{big.name} ({KIND_LABELS[big.kind]})"
    assert f"micro-batch {big.mb}" in text and f"stage {big.stage}" in text and "duration" in text
    assert "stage 1 (rank 16" in text and "FLOP" in text
    # zoom onto one short TP collective and point at it
    tp = np.nonzero(tl.mask(rank=0, stream="tp") & (tl["mb"] == 3))[0]
    small = tl.span(int(tp[len(tp) // 2]))
    pad = small.duration_s
    browser.execute_script("simtrain.setWindow(arguments[0], arguments[1])", small.start_s - pad, small.end_s + pad)
    text = hover(browser, 0, "tp", (small.start_s + small.end_s) / 2)
    assert text.startswith(f"{small.name} (TP comm)")
    assert "micro-batch 3" in text and f"layer {small.layer}" in text and "B" in text.splitlines()[-1]
    assert hover(browser, 0, "tp", small.end_s + 0.9 * pad) == ""  # idle time names nothing


def test_filters_choose_rows_and_kinds(browser, report_page, default_run):
    _open(browser, report_page)
    browser.find_element("id", "stream-tp").click()
    rows = _geometry(browser)["rows"]
    assert len(rows) == 16 and all(s != "tp" for _, s in rows)
    box = browser.find_element("id", "filter-ranks")
    box.send_keys("16,40-48\t")
    assert {r for r, _ in _geometry(browser)["rows"]} == {16, 48}
    box.clear()  # an empty field: every rank
    box.send_keys("7\t")  # no rank 7: refused, the rows stay
    assert "invalid" in box.get_attribute("class") and {r for r, _ in _geometry(browser)["rows"]} == {0, 16, 32, 48}
    assert "0, 16, 32, 48" in box.get_attribute("title")
    browser.find_element("id", "kind-B").click()  # hide backward boxes: pointing at one names nothing
    tl = default_run.timeline
    b = tl.span(int(np.nonzero(tl.mask(rank=16, kind="B"))[0][0]))
    assert hover(browser, 16, "compute", (b.start_s + b.end_s) / 2) == ""


def test_a_million_spans_stay_responsive(browser, tmp_path):
    from selenium.webdriver.common.action_chains import ActionChains, ScrollOrigin

    n, rows = 1_000_000, 8
    i = np.arange(n)
    row, k = i // (n // rows), i % (n // rows)
    start = k * 5e-6
    cols = dict(rank=(row // 2).astype(np.int32), stream=(row % 2).astype(np.int32),
                kind=np.where(row % 2 == 0, k % 2, KINDS.index("tp")).astype(np.int32),
                name=np.where(row % 2 == 0, k % 2, 2).astype(np.int32),
                stage=(row // 2).astype(np.int32), layer=(k % 80).astype(np.int32), mb=(k // 160).astype(np.int32),
                arrow=np.full(n, -1, np.int32), start_s=start, end_s=start + 4e-6, flops=np.full(n, 1e9),
                bytes=np.full(n, 1e6), alloc_bytes=np.zeros(n), free_bytes=np.zeros(n))
    tl = Timeline(cols, ["attn.F", "mlp.F", "tp.all_reduce"])
    path = tmp_path / "big.html"
    path.write_text(render_html_report(tl, title="a million spans", report=_report_of(tl)), encoding="utf-8")
    _open(browser, path, timeout_s=60)
    assert browser.execute_script("return simtrain.state.lastDrawMs") < 500
    canvas = browser.find_element("id", "tl-canvas")
    for _ in range(3):
        ActionChains(browser).scroll_from_origin(ScrollOrigin.from_element(canvas, 100, 0), 0, -600).perform()
    assert browser.execute_script("return simtrain.state.lastDrawMs") < 200
    t0, t1 = _window(browser)
    assert t1 - t0 < 0.1 * tl.end_s
    text = hover(browser, 1, "tp", t0 + 0.5 * (t1 - t0))
    assert text.startswith("tp.all_reduce (TP comm)") and "rank 1" in text and "1.00 MB" in text


#: For each pixel column of a row's boxes between two times: the darkest and the lightest pixel
#: (R + G + B, 0 to 765) over the boxes' height, their edges left out.
COLUMNS_JS = """
const [row, ta, tb] = arguments, c = document.getElementById('tl-canvas'), g = simtrain.geometry();
const d = window.devicePixelRatio || 1, k = g.plotWidth / (g.t1 - g.t0);
const x0 = Math.floor((g.labelWidth + (ta - g.t0) * k) * d), x1 = Math.ceil((g.labelWidth + (tb - g.t0) * k) * d);
const y0 = Math.ceil((g.axisHeight + row * g.rowHeight - g.scrollY + 4) * d), h = Math.floor((g.rowHeight - 8) * d);
const data = c.getContext('2d').getImageData(x0, y0, x1 - x0, h).data, out = [];
for (let x = 0; x < x1 - x0; x++) {
  let lo = 765, hi = 0;
  for (let y = 0; y < h; y++) {
    const i = 4 * (y * (x1 - x0) + x), v = data[i] + data[i + 1] + data[i + 2];
    lo = Math.min(lo, v); hi = Math.max(hi, v);
  }
  out.push([lo, hi]);
}
return out;"""


def _neighbours_timeline() -> Timeline:
    """Rank 0: 200 forwards of 12.5 ms back to back (a few pixels each at the whole step), two TP
    collectives of a second back to back, then a thousand TP collectives of 0.1 ms (a fraction of
    a pixel each)."""
    b = TimelineBuilder()
    for i in range(200):
        add_span(b, 0, "compute", "F", "mlp.F", i * 0.0125, (i + 1) * 0.0125)
    for i in range(2):
        add_span(b, 0, "tp", "tp", "tp.all_reduce", float(i), i + 1.0)
    for i in range(1000):
        add_span(b, 0, "tp", "tp", "tp.all_reduce", 2.5 + i * 1e-4, 2.5 + (i + 1) * 1e-4)
    return b.build()


def test_neighbouring_boxes_stay_apart_and_communication_is_hatched_at_every_width(browser, tmp_path):
    """As the Gantt PNG draws them: boxes of one kind side by side keep a gap between them (not one
    merged bar), and TP boxes are hatched as the legend shows, the narrow ones too (not solid)."""
    tl = _neighbours_timeline()
    path = tmp_path / "neighbours.html"
    path.write_text(render_html_report(tl, title="neighbours", report=_report_of(tl)), encoding="utf-8")
    _open(browser, path)
    assert [tuple(r) for r in _geometry(browser)["rows"]] == [(0, "compute"), (0, "tp")]
    forward, indigo = 0 + 114 + 178, 0x33 + 0x22 + 0x88  # the fills of F (#0072B2) and TP (#332288)
    # the forwards: a light column (the gap) at nearly every one of the 199 boundaries
    columns = browser.execute_script(COLUMNS_JS, 0, 0.02, 2.48)
    gaps = sum(1 for a, b in zip(columns, columns[1:]) if a[0] < forward + 150 <= b[0])
    assert gaps >= 150, (gaps, columns[:40])
    # the two long TP boxes: hatched inside, a gap at their boundary
    inside = browser.execute_script(COLUMNS_JS, 1, 0.2, 0.8)
    assert min(lo for lo, _ in inside) < indigo + 60 and max(hi for _, hi in inside) > 600  # fill and white strokes
    edge = browser.execute_script(COLUMNS_JS, 1, 0.97, 1.01)
    assert max(lo for lo, _ in edge) > indigo + 150  # a column light from top to bottom
    assert sorted(lo for lo, _ in inside)[len(inside) // 2] < indigo + 100  # inside, none is
    # the thousand short TP collectives, a fraction of a pixel each: hatched, not solid
    narrow = browser.execute_script(COLUMNS_JS, 1, 2.505, 2.595)
    assert min(lo for lo, _ in narrow) < indigo + 60 and max(hi for _, hi in narrow) > 600, narrow

