// simtrain's HTML report: the timeline of a simulated step on a canvas (zoom, pan, filters,
// hover) and the memory in use on the same time axis. Plain JavaScript, no dependencies; the
// data is in the page (script#simtrain-meta: the description; script#simtrain-data: the span
// columns, gzip + base64, spans sorted by row then start time).
"use strict";
(function () {
  const errors = (window.simtrainErrors = window.simtrainErrors || []);
  window.addEventListener("error", (e) => errors.push(String(e.message || e)));
  window.addEventListener("unhandledrejection", (e) => errors.push(String(e.reason)));

  const ROW_H = 18, AXIS_H = 26, BOX_PAD = 2, MEM_H = 190, FONT = "11px system-ui, sans-serif";
  const meta = JSON.parse(document.getElementById("simtrain-meta").textContent);
  const $ = (id) => document.getElementById(id);
  const frame = $("tl-frame"), canvas = $("tl-canvas"), spacer = $("tl-spacer");
  const memCanvas = $("mem-canvas"), tooltip = $("tooltip"), readout = $("window-readout");
  const ctx = canvas.getContext("2d"), mctx = memCanvas.getContext("2d");

  async function decode(text) {
    if (typeof DecompressionStream === "undefined") {
      throw new Error("this browser cannot unpack the page's data (Chrome 80, Firefox 113, Safari 16.4 or later can)");
    }
    const bin = atob(text.trim());
    const bytes = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    const buffer = await new Response(stream).arrayBuffer();
    const cols = {};
    for (const c of meta.columns) cols[c.name] = new window[c.type](buffer, c.offset, c.length);
    return cols;
  }

  // ---- formatting
  const counted = (n, noun) => n.toLocaleString("en") + " " + noun + (n === 1 ? "" : "s");
  function fmtTime(s) {
    const a = Math.abs(s);
    if (a >= 1) return s.toFixed(3) + " s";
    if (a >= 1e-3) return (s * 1e3).toFixed(3) + " ms";
    if (a >= 1e-6) return (s * 1e6).toFixed(2) + " \u00b5s";
    return (s * 1e9).toFixed(1) + " ns";
  }
  function fmtAmount(x, unit) {
    const steps = [[1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"]];
    for (const [f, p] of steps) if (x >= f) return (x / f).toFixed(2) + " " + p + unit;
    return x.toFixed(0) + " " + unit;
  }
  function tickUnit(step) {
    if (step >= 1) return [1, "s"];
    if (step >= 1e-3) return [1e-3, "ms"];
    if (step >= 1e-6) return [1e-6, "\u00b5s"];
    return [1e-9, "ns"];
  }
  function niceStep(range, count) {
    const raw = range / count, p = Math.pow(10, Math.floor(Math.log10(raw)));
    for (const m of [1, 2, 5, 10]) if (m * p >= raw) return m * p;
    return 10 * p;
  }
  function lowerBound(a, lo, hi, x) {  // first index in [lo, hi) with a[i] >= x
    while (lo < hi) { const mid = (lo + hi) >>> 1; if (a[mid] < x) lo = mid + 1; else hi = mid; }
    return lo;
  }

  // ---- hatch patterns and kind styles: style = kind * shades + shade
  function hatchCanvas(fill, stroke, hatch) {
    const c = document.createElement("canvas");
    c.width = c.height = 8;
    const g = c.getContext("2d");
    g.fillStyle = fill; g.fillRect(0, 0, 8, 8);
    g.strokeStyle = stroke; g.fillStyle = stroke; g.lineWidth = 1.1;
    const line = (a, b, c2, d) => { g.beginPath(); g.moveTo(a, b); g.lineTo(c2, d); g.stroke(); };
    const ch = hatch.charAt(0);
    if (ch === "/" || ch === "x") { line(-1, 9, 9, -1); line(-1, 1, 1, -1); line(7, 9, 9, 7); }
    if (ch === "\\" || ch === "x") { line(-1, -1, 9, 9); line(-1, 7, 1, 9); line(7, -1, 9, 1); }
    if (ch === "-" || ch === "+") line(0, 4, 8, 4);
    if (ch === "|" || ch === "+") line(4, 0, 4, 8);
    if (ch === ".") { g.beginPath(); g.arc(4, 4, 1.4, 0, 2 * Math.PI); g.fill(); }
    return c;
  }
  const SHADES = meta.kinds[0] ? meta.kinds[0].fills.length : 1;
  const fills = [], strokes = [], patterns = [];
  meta.kinds.forEach((k) => k.fills.forEach((f, s) => {
    fills.push(f); strokes.push(k.strokes[s]);
    patterns.push(k.hatch ? ctx.createPattern(hatchCanvas(f, k.strokes[s], k.hatch), "repeat") : null);
  }));

  // ---- state
  const S = {
    t0: 0, t1: Math.max(meta.end_s, 1e-9), scrollY: 0, ranks: null,
    streams: new Set(meta.rows.map((r) => r.stream)), kinds: meta.kinds.map(() => true),
    visible: [], labelW: 80, plotW: 100, hover: -1, lastDrawMs: 0,
  };
  const T_MAX = S.t1, MIN_W = Math.max(T_MAX * 1e-9, 1e-12);
  let C = null, pmaxEnd = null, memTop = 1;  // columns; per row, the running maximum of span ends
  const chunksOf = new Map();  // rank -> its highest chunk index

  function visibleRows() {
    S.visible = [];
    meta.rows.forEach((r, i) => {
      if (S.streams.has(r.stream) && (S.ranks === null || S.ranks.has(r.rank))) S.visible.push(i);
    });
  }
  function layout() {
    const width = Math.max(frame.clientWidth, 300), dpr = window.devicePixelRatio || 1;
    ctx.font = FONT;
    let widest = 40;
    for (const r of meta.rows) widest = Math.max(widest, ctx.measureText(r.label + "  " + r.stream).width);
    S.labelW = Math.min(Math.ceil(widest) + 14, Math.floor(width * 0.4));
    S.plotW = width - S.labelW - 8;
    const full = AXIS_H + S.visible.length * ROW_H;
    const height = Math.min(full, Math.max(240, Math.floor(window.innerHeight * 0.65)));
    for (const [cv, h] of [[canvas, height], [memCanvas, MEM_H]]) {
      cv.style.width = width + "px"; cv.style.height = h + "px";
      cv.width = Math.round(width * dpr); cv.height = Math.round(h * dpr);
      cv.getContext("2d").setTransform(dpr, 0, 0, dpr, 0, 0);
    }
    frame.style.height = height + 2 + "px";
    spacer.style.height = full - height + "px";
    S.scrollY = frame.scrollTop;
  }

  // ---- drawing
  function drawAxis(g, top, bottom, withLabels) {
    const range = S.t1 - S.t0, step = niceStep(range, Math.max(2, S.plotW / 110));
    const [unit, name] = tickUnit(step), digits = Math.max(0, -Math.floor(Math.log10(step / unit) + 1e-9));
    g.font = FONT; g.textAlign = "center"; g.textBaseline = "alphabetic";
    for (let t = Math.ceil(S.t0 / step) * step; t <= S.t1; t += step) {
      const x = S.labelW + (t - S.t0) / range * S.plotW;
      g.fillStyle = "#eee"; g.fillRect(Math.round(x), top, 1, bottom - top);
      if (withLabels) { g.fillStyle = "#444"; g.fillText((t / unit).toFixed(digits) + " " + name, x, AXIS_H - 8); }
    }
  }
  let pixStyle = new Int16Array(0), pixTime = new Float64Array(0), pixSpan = new Int32Array(0);
  function drawRow(r, y, h, k) {
    // Boxes a few pixels wide or more are drawn one by one, each ending in a one-pixel gap so
    // that neighbouring boxes of one kind stay apart; narrower spans are aggregated per pixel
    // column (the column takes the span that covers most of it), then drawn as runs, one per
    // span, with the same gap after a run of two pixels or more. Communication is hatched at
    // every width, as the legend shows it.
    const start = C.start, dur = C.dur, kind = C.kind, chunk = C.chunk, mb = C.mb;
    const end = C.row_offsets[r + 1], W = S.plotW, L = S.labelW, cols = Math.ceil(W) + 1;
    if (pixStyle.length < cols) {
      pixStyle = new Int16Array(cols); pixTime = new Float64Array(cols); pixSpan = new Int32Array(cols);
    }
    pixStyle.fill(-1, 0, cols); pixTime.fill(0, 0, cols); pixSpan.fill(-1, 0, cols);
    let narrow = false;
    for (let j = lowerBound(pmaxEnd, C.row_offsets[r], end, S.t0); j < end && start[j] <= S.t1; j++) {
      const kd = kind[j];
      if (!S.kinds[kd]) continue;
      let x0 = (start[j] - S.t0) * k, x1 = x0 + dur[j] * k;
      if (x1 < 0) continue;
      if (x0 < -2) x0 = -2;
      if (x1 > W + 2) x1 = W + 2;
      const st = kd * SHADES + Math.min(chunk[j], SHADES - 1);
      if (x1 - x0 < 3) {
        narrow = true;
        for (let px = Math.max(0, Math.floor(x0)); px <= Math.min(cols - 1, Math.floor(x1)); px++) {
          const cover = Math.min(x1, px + 1) - Math.max(x0, px) + 1e-6;
          if (cover > pixTime[px]) { pixTime[px] = cover; pixStyle[px] = st; pixSpan[px] = j; }
        }
        continue;
      }
      ctx.fillStyle = patterns[st] || fills[st];
      ctx.fillRect(L + x0, y, x1 - x0 - 1, h);
      const label = mb[j] >= 0 ? String(mb[j]) : "";
      if (label && x1 - x0 > 7 * label.length + 6) {
        const cx = L + (Math.max(x0, 0) + Math.min(x1, W)) / 2;
        if (patterns[st]) { ctx.fillStyle = fills[st]; ctx.fillRect(cx - 3.5 * label.length - 2, y + 2, 7 * label.length + 4, h - 4); }
        ctx.fillStyle = strokes[st];
        ctx.fillText(label, cx, y + h / 2 + 0.5);
      }
    }
    if (!narrow) return;
    for (let px = 0; px < cols;) {
      const st = pixStyle[px], j = pixSpan[px];
      let q = px + 1;
      while (q < cols && pixSpan[q] === j) q++;
      const gap = st >= 0 && q - px >= 2 && q < cols && pixStyle[q] >= 0 ? 1 : 0;
      if (st >= 0) { ctx.fillStyle = patterns[st] || fills[st]; ctx.fillRect(L + px, y, q - px - gap, h); }
      px = q;
    }
  }
  function draw() {
    const t = performance.now(), W = S.plotW, L = S.labelW;
    const cw = canvas.width / (window.devicePixelRatio || 1), chh = canvas.height / (window.devicePixelRatio || 1);
    ctx.clearRect(0, 0, cw, chh);
    ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, cw, chh);
    drawAxis(ctx, AXIS_H - 4, chh, true);
    const k = W / (S.t1 - S.t0), first = Math.floor(S.scrollY / ROW_H);
    const last = Math.min(S.visible.length, Math.ceil((S.scrollY + chh - AXIS_H) / ROW_H));
    ctx.save();
    ctx.beginPath(); ctx.rect(0, AXIS_H, cw, chh - AXIS_H); ctx.clip();
    ctx.font = FONT; ctx.textBaseline = "middle";
    for (let i = first; i < last; i++) {
      const r = S.visible[i], row = meta.rows[r], y = AXIS_H + i * ROW_H - S.scrollY;
      const prev = i > 0 ? meta.rows[S.visible[i - 1]] : null;
      ctx.fillStyle = prev && prev.rank !== row.rank ? "#bbb" : "#eee";
      if (prev) ctx.fillRect(0, y, cw, 1);
      ctx.save();
      ctx.beginPath(); ctx.rect(L, y, W, ROW_H); ctx.clip();
      ctx.textAlign = "center";
      if (C) drawRow(r, y + BOX_PAD, ROW_H - 2 * BOX_PAD, k);
      ctx.restore();
      ctx.textAlign = "left"; ctx.fillStyle = "#222";
      ctx.fillText(row.label + "  " + row.stream, 4, y + ROW_H / 2);
    }
    ctx.restore();
    drawMemory();
    S.lastDrawMs = performance.now() - t;
    readout.textContent = "window " + fmtTime(S.t0) + " \u2013 " + fmtTime(S.t1) + " (" + fmtTime(S.t1 - S.t0) +
      ")  \u00b7  " + S.visible.length + " of " + counted(meta.rows.length, "row");
  }
  function drawMemory() {
    const g = mctx, W = S.plotW, L = S.labelW, w = memCanvas.width / (window.devicePixelRatio || 1);
    g.clearRect(0, 0, w, MEM_H); g.fillStyle = "#fff"; g.fillRect(0, 0, w, MEM_H);
    if (!C || !meta.memory.length) return;
    const series = meta.memory.filter((m) => S.ranks === null || S.ranks.has(m.rank));
    const top = memTop;
    const y = (v) => MEM_H - 18 - (v / top) * (MEM_H - 28), k = W / (S.t1 - S.t0);
    drawAxis(g, 4, MEM_H - 18, false);
    g.font = FONT; g.textAlign = "right"; g.textBaseline = "middle"; g.fillStyle = "#444";
    const step = niceStep(top, 4);
    for (let v = 0; v <= top; v += step) { g.fillText(v.toFixed(0), L - 6, y(v)); g.fillStyle = "#eee"; g.fillRect(L, Math.round(y(v)), W, 1); g.fillStyle = "#444"; }
    g.save(); g.beginPath(); g.rect(L, 0, W, MEM_H); g.clip();
    for (const m of series) {
      const T = C["mem_t" + m.rank], V = C["mem_v" + m.rank];
      if (!T.length) continue;
      let i = Math.max(0, lowerBound(T, 0, T.length, S.t0) - 1);
      g.strokeStyle = m.colour; g.lineWidth = 1.2; g.beginPath();
      g.moveTo(L + (T[i] - S.t0) * k, y(V[i]));
      for (i += 1; i < T.length && T[i] <= S.t1; i++) {
        const x = L + (T[i] - S.t0) * k;
        g.lineTo(x, y(V[i - 1])); g.lineTo(x, y(V[i]));
      }
      g.lineTo(L + W, y(V[i - 1])); g.stroke();
    }
    if (meta.capacity_gib) {
      g.strokeStyle = meta.capacity_colour; g.setLineDash([5, 4]); g.beginPath();
      g.moveTo(L, y(meta.capacity_gib)); g.lineTo(L + W, y(meta.capacity_gib)); g.stroke(); g.setLineDash([]);
    }
    g.restore();
  }

  // ---- window, hover
  function setWindow(a, b) {
    let w = Math.min(Math.max(b - a, MIN_W), T_MAX);
    a = Math.min(Math.max(a, 0), T_MAX - w);
    S.t0 = a; S.t1 = a + w;
    draw();
  }
  function zoom(factor, atX) {
    const frac = atX === undefined ? 0.5 : Math.min(Math.max((atX - S.labelW) / S.plotW, 0), 1);
    const t = S.t0 + frac * (S.t1 - S.t0), w = (S.t1 - S.t0) * factor;
    setWindow(t - frac * w, t - frac * w + w);
  }
  function spanAt(x, y) {
    if (!C || x < S.labelW || y < AXIS_H) return -1;
    const i = Math.floor((y - AXIS_H + S.scrollY) / ROW_H);
    if (i < 0 || i >= S.visible.length) return -1;
    const r = S.visible[i], k = S.plotW / (S.t1 - S.t0), t = S.t0 + (x - S.labelW) / k, tol = 3 / k;
    const end = C.row_offsets[r + 1];
    let best = -1, bestD = Infinity;
    for (let j = lowerBound(pmaxEnd, C.row_offsets[r], end, t - tol); j < end && C.start[j] <= t + tol; j++) {
      if (!S.kinds[C.kind[j]]) continue;
      const s = C.start[j], e = s + C.dur[j], d = t < s ? s - t : t > e ? t - e : 0;
      if (d < bestD || (d === bestD && C.dur[j] < C.dur[best])) { best = j; bestD = d; }
    }
    return bestD <= tol ? best : -1;
  }
  function describe(j) {
    const kd = meta.kinds[C.kind[j]], r = meta.rows[rowOf(j)], lines = [], chunks = chunksOf.get(r.rank) || 0;
    lines.push(meta.names[C.name[j]] + " (" + kd.label + ")");
    lines.push(r.label + " \u00b7 stream " + r.stream);
    const where = [];
    if (C.mb[j] >= 0) where.push("micro-batch " + C.mb[j]);
    if (C.stage[j] >= 0) where.push("stage " + C.stage[j] + (chunks > 0 ? " (chunk " + C.chunk[j] + " of " + (chunks + 1) + " on its rank)" : ""));
    if (C.layer[j] >= 0) where.push("layer " + C.layer[j]);
    if (where.length) lines.push(where.join(" \u00b7 "));
    lines.push("start " + fmtTime(C.start[j]) + " \u00b7 duration " + fmtTime(C.dur[j]));
    const amounts = [];
    if (C.flops[j] > 0) amounts.push(fmtAmount(C.flops[j], "FLOP"));
    if (C.bytes[j] > 0) amounts.push(fmtAmount(C.bytes[j], "B"));
    if (amounts.length) lines.push(amounts.join(" \u00b7 "));
    return lines;
  }
  function rowOf(j) {
    return Math.max(0, lowerBound(C.row_offsets, 0, C.row_offsets.length, j + 1) - 1);
  }
  function showTooltip(e) {
    const rect = canvas.getBoundingClientRect(), j = spanAt(e.clientX - rect.left, e.clientY - rect.top);
    S.hover = j;
    if (j < 0) { tooltip.hidden = true; return; }
    tooltip.replaceChildren(...describe(j).map((text, i) => {
      const div = document.createElement("div");
      div.textContent = text;
      if (i === 0) div.className = "op";
      return div;
    }));
    tooltip.hidden = false;
    const tw = tooltip.offsetWidth, th = tooltip.offsetHeight;
    tooltip.style.left = Math.min(e.clientX + 14, window.innerWidth - tw - 4) + "px";
    tooltip.style.top = (e.clientY + 16 + th > window.innerHeight ? e.clientY - th - 8 : e.clientY + 16) + "px";
  }

  // ---- controls
  function parseRanks(text) {
    const known = new Set(meta.rows.map((r) => r.rank)), out = new Set();
    for (const part of text.split(",").map((p) => p.trim()).filter((p) => p)) {
      const m = /^(\d+)(?:-(\d+))?$/.exec(part);
      if (!m) return null;
      const a = +m[1], b = m[2] === undefined ? a : +m[2];
      for (const r of known) if (r >= a && r <= b) out.add(r);
    }
    return out.size ? out : text.trim() ? null : "all";
  }
  function buildControls() {
    const present = new Set(C ? C.kind : []);
    const legend = $("legend");
    meta.kinds.forEach((kd, i) => {
      if (!present.has(i)) return;
      const label = document.createElement("label"), box = document.createElement("input");
      box.type = "checkbox"; box.checked = true; box.id = "kind-" + kd.key;
      box.addEventListener("change", () => { S.kinds[i] = box.checked; draw(); });
      const sw = document.createElement("canvas");
      sw.width = 22; sw.height = 12;
      const g = sw.getContext("2d");
      g.fillStyle = kd.hatch ? g.createPattern(hatchCanvas(kd.fills[0], kd.strokes[0], kd.hatch), "repeat") : kd.fills[0];
      g.fillRect(0, 0, 22, 12);
      label.append(box, sw, kd.label);
      legend.append(label);
    });
    const streams = $("filter-streams");
    for (const s of meta.streams) {
      if (!S.streams.has(s)) continue;
      const label = document.createElement("label"), box = document.createElement("input");
      box.type = "checkbox"; box.checked = true; box.id = "stream-" + s;
      box.addEventListener("change", () => {
        if (box.checked) S.streams.add(s); else S.streams.delete(s);
        refilter();
      });
      label.append(box, s);
      streams.append(label);
    }
    const ranks = $("filter-ranks");
    ranks.addEventListener("change", () => {
      const parsed = parseRanks(ranks.value);
      ranks.classList.toggle("invalid", parsed === null);
      ranks.title = parsed === null ? "no such rank; ranks: " + [...new Set(meta.rows.map((r) => r.rank))].join(", ") : "";
      if (parsed === null) return;
      S.ranks = parsed === "all" ? null : parsed;
      refilter();
    });
    const ml = $("mem-legend");
    for (const m of meta.memory) {
      const label = document.createElement("label"), line = document.createElement("span");
      line.className = "line"; line.style.borderColor = m.colour;
      label.append(line, m.label);
      ml.append(label);
    }
    if (meta.capacity_gib && meta.memory.length) {
      const label = document.createElement("label"), line = document.createElement("span");
      line.className = "line"; line.style.borderTop = "2px dashed " + meta.capacity_colour;
      label.append(line, "capacity " + meta.capacity_gib.toFixed(1) + " GiB");
      ml.append(label);
    }
    $("zoom-in").addEventListener("click", () => zoom(0.5));
    $("zoom-out").addEventListener("click", () => zoom(2));
    $("zoom-reset").addEventListener("click", () => setWindow(0, T_MAX));
  }
  function refilter() { visibleRows(); layout(); draw(); }

  canvas.addEventListener("wheel", (e) => {
    e.preventDefault();
    if (e.shiftKey) { frame.scrollTop += e.deltaY || e.deltaX; return; }
    const rect = canvas.getBoundingClientRect();
    zoom(Math.exp(Math.max(-5, Math.min(5, e.deltaY * 0.0015))), e.clientX - rect.left);
  }, { passive: false });
  let drag = null;
  canvas.addEventListener("mousedown", (e) => {
    if (e.button !== 0) return;
    drag = { x: e.clientX, t0: S.t0, t1: S.t1 };
    canvas.classList.add("dragging");
  });
  window.addEventListener("mousemove", (e) => {
    if (drag) {
      const dt = (e.clientX - drag.x) / S.plotW * (drag.t1 - drag.t0);
      setWindow(drag.t0 - dt, drag.t1 - dt);
      tooltip.hidden = true;
    } else if (e.target === canvas) showTooltip(e);
  });
  window.addEventListener("mouseup", () => { drag = null; canvas.classList.remove("dragging"); });
  canvas.addEventListener("mouseleave", () => { if (!drag) tooltip.hidden = true; });
  frame.addEventListener("scroll", () => { S.scrollY = frame.scrollTop; draw(); });
  window.addEventListener("resize", () => { layout(); draw(); });
  new ResizeObserver(() => { if (canvas.style.width !== frame.clientWidth + "px") { layout(); draw(); } }).observe(frame);

  window.simtrain = {
    state: S, meta, draw, setWindow, zoom, spanAt, ready: false,
    geometry: () => ({
      labelWidth: S.labelW, plotWidth: S.plotW, axisHeight: AXIS_H, rowHeight: ROW_H, scrollY: S.scrollY,
      t0: S.t0, t1: S.t1, rows: S.visible.map((r) => [meta.rows[r].rank, meta.rows[r].stream]),
    }),
  };
  visibleRows(); layout(); draw();
  decode(document.getElementById("simtrain-data").textContent).then((cols) => {
    C = cols;
    pmaxEnd = new Float64Array(C.start.length);
    for (let r = 0; r + 1 < C.row_offsets.length; r++) {
      let m = -Infinity;
      let top = chunksOf.get(meta.rows[r].rank) || 0;
      for (let j = C.row_offsets[r]; j < C.row_offsets[r + 1]; j++) {
        m = Math.max(m, C.start[j] + C.dur[j]); pmaxEnd[j] = m; top = Math.max(top, C.chunk[j]);
      }
      chunksOf.set(meta.rows[r].rank, top);
    }
    memTop = meta.capacity_gib || 0;
    for (const m of meta.memory) for (const v of C["mem_v" + m.rank]) memTop = Math.max(memTop, v);
    memTop = memTop * 1.08 || 1;
    buildControls(); draw();
    $("status").textContent = counted(meta.count, "span") + " on " + counted(meta.rows.length, "row") +
      "; drawn in " + S.lastDrawMs.toFixed(1) + " ms";
    window.simtrain.ready = true;
  }).catch((err) => {
    errors.push(String(err));
    $("status").textContent = "could not read the timeline data: " + err;
  });
})();
