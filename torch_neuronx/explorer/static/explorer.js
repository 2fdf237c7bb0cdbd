// Neuron Explorer UI over the simulator's profiles: plain DOM + one canvas timeline component.
"use strict";
const $ = (sel) => document.querySelector(sel);
const state = { profile: null, overview: null, selected: null, generation: null, timelines: {} };

async function api(route, params = {}) {
  const query = new URLSearchParams({ ...params, ...(state.profile ? { profile: state.profile } : {}) });
  const response = await fetch(`/api/${route}?${query}`);
  const body = await response.json();
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body;
}

const esc = (s) => String(s ?? "").replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);
function fmtNs(ns) {
  if (ns == null) return "n/a";
  const a = Math.abs(ns);
  if (a >= 1e9) return (ns / 1e9).toFixed(3) + " s";
  if (a >= 1e6) return (ns / 1e6).toFixed(3) + " ms";
  if (a >= 1e3) return (ns / 1e3).toFixed(1) + " us";
  return Math.round(ns) + " ns";
}
const pct = (v) => (v == null ? "n/a" : v.toFixed(2) + " %");
function table(el, headers, rows, numeric = []) {
  el.innerHTML = `<thead><tr>${headers.map((h, i) => `<th class="${numeric.includes(i) ? "num" : ""}">${esc(h)}</th>`).join("")}</tr></thead>` +
    `<tbody>${rows.map((r) => `<tr>${r.map((c, i) => `<td class="${numeric.includes(i) ? "num" : ""}">${c}</td>`).join("")}</tr>`).join("")}</tbody>`;
}
function sourceLink(frame) {
  if (!frame) return "";
  const name = frame.file.split("/").pop();
  return `<a data-file="${esc(frame.file)}" data-line="${frame.line}" class="source-link">${esc(name)}:${frame.line}</a> <span class="muted">${esc(frame.function)}</span>`;
}
const eventLink = (e) => `<a class="event-link" data-id="${e.id}">${esc(e.name)}</a>`;

// ---- tabs -------------------------------------------------------------------------------------
function showTab(name) {
  document.querySelectorAll("nav button").forEach((b) => b.classList.toggle("active", b.dataset.tab === name));
  document.querySelectorAll(".tab").forEach((t) => t.classList.toggle("active", t.id === name));
  const loaders = { trace: () => timeline("trace"), chip: () => timeline("chip"), source: loadSources,
    hierarchy: loadHierarchy, deps: () => { loadGaps(); loadCollectives(); loadKernelWaits(); }, critical: loadCritical, compare: setupCompare };
  if (loaders[name]) loaders[name]();
}

// ---- timeline ---------------------------------------------------------------------------------
const ROW_H = 18, LABEL_W = 230;
const colour = (name) => { let h = 0; for (const c of name) h = (h * 31 + c.charCodeAt(0)) | 0; return `hsl(${Math.abs(h) % 360},55%,62%)`; };

class Timeline {
  constructor(root, view) {
    this.root = root; this.view = view; this.canvas = root.querySelector("canvas");
    this.ctx = this.canvas.getContext("2d"); this.rows = []; this.data = []; this.hits = []; this.request = 0;
    this.scrollY = 0;
    // Perfetto's conventions: wheel scrolls the rows, Ctrl+wheel zooms, Shift+wheel pans, WASD.
    this.canvas.addEventListener("wheel", (e) => {
      e.preventDefault();
      if (e.ctrlKey || e.metaKey) { this.zoom(e.deltaY > 0 ? 1.25 : 0.8, this.xToT(e.offsetX)); return; }
      if (e.shiftKey) { const shift = e.deltaY * (this.end - this.start) / this.plotW(); this.start += shift; this.end += shift; this.fetch(); return; }
      const maxY = Math.max(0, this.rows.length * ROW_H + 20 - this.canvas.clientHeight);
      this.scrollY = Math.min(maxY, Math.max(0, this.scrollY + e.deltaY)); this.draw();
    });
    this.canvas.addEventListener("mousedown", (e) => { this.drag = { x: e.offsetX, start: this.start, end: this.end, moved: false }; });
    window.addEventListener("mouseup", (e) => { if (this.drag && !this.drag.moved && e.target === this.canvas) this.click(e.offsetX, e.offsetY); this.drag = null; });
    this.canvas.addEventListener("mousemove", (e) => {
      if (!this.drag) return;
      const dx = e.offsetX - this.drag.x; if (Math.abs(dx) > 3) this.drag.moved = true;
      const span = this.drag.end - this.drag.start, shift = -dx * span / this.plotW();
      this.start = this.drag.start + shift; this.end = this.drag.end + shift; this.fetch();
    });
    window.addEventListener("keydown", (e) => {
      if (!this.root.offsetParent) return;
      const span = this.end - this.start, mid = (this.start + this.end) / 2;
      if (e.key === "w") this.zoom(0.8, mid); if (e.key === "s") this.zoom(1.25, mid);
      if (e.key === "a") { this.start -= span / 5; this.end -= span / 5; this.fetch(); }
      if (e.key === "d") { this.start += span / 5; this.end += span / 5; this.fetch(); }
    });
    new ResizeObserver(() => this.fetch()).observe(root);
  }
  plotW() { return Math.max(1, this.canvas.clientWidth - LABEL_W); }
  xToT(x) { return this.start + (x - LABEL_W) * (this.end - this.start) / this.plotW(); }
  tToX(t) { return LABEL_W + (t - this.start) * this.plotW() / (this.end - this.start); }
  async load(params) {
    this.params = params;
    const lanes = await api("lanes", { view: this.view, ...params });
    this.rows = lanes.rows; this.start = lanes.start; this.end = Math.max(lanes.end, lanes.start + 1);
    this.origin = lanes.start; await this.fetch();
  }
  zoom(factor, at) {
    this.start = at - (at - this.start) * factor; this.end = at + (this.end - at) * factor;
    if (this.end - this.start < 100) this.end = this.start + 100; this.fetch();
  }
  async fetch() {
    if (this.rows === undefined || this.start === undefined) return;
    const id = ++this.request;
    const answer = await api("timeline", { view: this.view, ...this.params, start: Math.floor(this.start), end: Math.ceil(this.end), px: this.plotW() });
    if (id !== this.request) return; // a newer window was asked for
    this.data = answer.rows; this.draw();
    this.root.dataset.drawn = String(this.request);
  }
  draw() {
    const c = this.canvas, ratio = window.devicePixelRatio || 1;
    c.width = c.clientWidth * ratio; c.height = c.clientHeight * ratio;
    const g = this.ctx; g.setTransform(ratio, 0, 0, ratio, 0, 0);
    g.clearRect(0, 0, c.clientWidth, c.clientHeight); g.font = "11px system-ui"; g.textBaseline = "middle";
    this.hits = [];
    this.rows.forEach((row, i) => {
      const y = 20 + i * ROW_H - this.scrollY;
      g.fillStyle = i % 2 ? "#fafbfc" : "#fff"; g.fillRect(0, y, c.clientWidth, ROW_H);
      g.fillStyle = row.group === "device" || row.group === "chip" ? "#0b3d91" : "#333";
      g.fillText(row.label, 4, y + ROW_H / 2, LABEL_W - 8);
    });
    for (const r of this.data) {
      const y = 20 + r.row * ROW_H + 2 - this.scrollY;
      if (y < 0 || y > c.clientHeight) continue;
      if (r.bins) {
        const w = Math.max(1, this.plotW() * r.bin_ns / (this.end - this.start));
        for (const [t, count, busy] of r.bins) {
          g.fillStyle = `rgba(76,139,245,${0.25 + 0.75 * busy})`; g.fillRect(this.tToX(t), y, w, ROW_H - 4);
        }
        continue;
      }
      for (const [s, e, id, name] of r.events) {
        const x0 = Math.max(LABEL_W, this.tToX(s)), x1 = Math.min(c.clientWidth, this.tToX(e)), w = Math.max(1, x1 - x0);
        g.fillStyle = id === this.selected ? "#ff9900" : colour(name); g.fillRect(x0, y, w, ROW_H - 4);
        if (w > 40) { g.fillStyle = "#111"; g.fillText(name, x0 + 2, y + (ROW_H - 4) / 2, w - 4); }
        this.hits.push([x0, x1 + 1, y, id]);
      }
    }
    // time axis
    g.fillStyle = "#fff"; g.fillRect(0, 0, c.clientWidth, 18); g.fillStyle = "#555";
    for (let k = 0; k <= 8; k++) {
      const t = this.start + (this.end - this.start) * k / 8, x = this.tToX(t);
      g.fillRect(x, 12, 1, 6); g.fillText(fmtNs(t - this.origin), x + 2, 8);
    }
  }
  click(x, y) {
    // Of the events under the pointer (1 px of slop: narrow events), the one centred nearest it.
    const under = this.hits.filter(([x0, x1, y0]) => x >= x0 - 1 && x <= x1 && y >= y0 && y <= y0 + ROW_H - 4);
    const hit = under.sort((p, q) => Math.abs((p[0] + p[1]) / 2 - x) - Math.abs((q[0] + q[1]) / 2 - x))[0];
    if (hit) { this.selected = hit[3]; this.draw(); select(hit[3], this.view); }
  }
}

async function timeline(name) {
  const view = name === "trace" ? "system" : "chip";
  if (!state.timelines[name]) state.timelines[name] = new Timeline($(`#${name}-timeline`), view);
  const tl = state.timelines[name];
  const params = view === "chip" ? { generation: state.generation } : {};
  if (JSON.stringify(tl.params) !== JSON.stringify(params) || tl.profile !== state.profile) {
    tl.profile = state.profile; await tl.load(params);
    if (view === "chip") $("#chip-span").textContent = `estimated span on ${state.generation}: ${fmtNs(tl.end - tl.start)}`;
  }
}

// ---- event details ----------------------------------------------------------------------------
async function select(id, view = "system") {
  const d = await api("event", { id, view });
  const info = view === "chip" ? d.kernel : d;
  state.selected = info.event.id;
  const act = view === "chip" ? `<p><b>${esc(d.activity.name)}</b> on ${esc(d.activity.engine)} (${esc(d.activity.generation)}):
      ${fmtNs(d.activity.duration_ns)} <span class="est">ESTIMATED</span>${d.activity.source_location ? `<br>kernel line ${esc(d.activity.source_location)}` : ""}
      ${d.activity.waited_for ? `<br><span id="detail-waited">waited ${fmtNs(d.activity.wait_ns)} for ${esc(d.activity.waited_for)}</span>` : ""}</p>` : "";
  const e = info.event;
  const deps = (list, key) => list.map((f) => `<li>${eventLink(f.event)} <span class="muted">${esc(f.dependency_type)}${f.waited_for ? ", waited for " + esc(f.waited_for) : ""}, gap ${fmtNs(f.gap_time)}</span></li>`).join("");
  const html = `${act}<h3 id="detail-name">${esc(e.name)}</h3>
    <p>${esc(e.trace_event_source)}${e.nc_idx != null ? " · core " + e.nc_idx : ""} · ${fmtNs(e.duration_ns)} <span class="muted">measured</span></p>
    ${e.module_path ? `<p>module <code>${esc(e.module_path)}</code></p>` : ""}
    <h4>Source</h4>${info.stack.length ? `<ol id="detail-stack">${info.stack.map((f) => `<li>${sourceLink(f)}</li>`).join("")}</ol>` : '<p class="muted">no user frame (record with with_stack=True)</p>'}
    <h4>Estimated on the chip</h4><p>${Object.entries(info.estimated_ns).map(([g, ns]) => `${g}: ${fmtNs(ns)}`).join(" · ") || '<span class="muted">not estimated</span>'} <span class="est">ESTIMATED</span></p>
    <h4>Predecessors</h4><ul id="detail-pred">${deps(info.predecessors)}</ul>
    <h4>Successors</h4><ul id="detail-succ">${deps(info.successors)}</ul>
    <h4>Same operator call</h4><ul>${info.correlated.map((c) => `<li>${eventLink(c)} <span class="muted">${esc(c.source)} ${fmtNs(c.duration_ns)}</span></li>`).join("")}</ul>`;
  $("#detail").innerHTML = html; $("#detail").dataset.event = String(e.id);
  $("#deps-selected").innerHTML = html.replace(/ id="[^"]*"/g, "");  // a copy: ids stay unique
}

document.addEventListener("click", (ev) => {
  const link = ev.target.closest("a");
  if (!link) return;
  if (link.classList.contains("source-link")) openSource(link.dataset.file, Number(link.dataset.line));
  if (link.classList.contains("event-link")) { select(Number(link.dataset.id)); }
});

// ---- source -----------------------------------------------------------------------------------
async function loadSources() {
  const files = await api("sources");
  const sel = $("#source-file");
  if (!sel.options.length) {
    sel.innerHTML = files.map((f) => `<option value="${esc(f.file)}">${esc(f.file)} (${fmtNs(f.device_ns)} device)</option>`).join("");
    sel.onchange = () => openSource(sel.value);
  }
  if (files.length && !state.sourceFile) await openSource(files[0].file, null, false);
}
async function openSource(file, line = null, switchTab = true) {
  if (switchTab) { document.querySelectorAll("nav button").forEach((b) => b.classList.toggle("active", b.dataset.tab === "source"));
    document.querySelectorAll(".tab").forEach((t) => t.classList.toggle("active", t.id === "source")); }
  const src = await api("source", { file });
  state.sourceFile = file; $("#source-file").value = file;
  const rows = src.lines.map((text, i) => {
    const n = i + 1, p = src.per_line[n];
    return `<tr data-line="${n}" class="${p ? "hot" : ""} ${n === line ? "selected" : ""}"><td class="num muted">${n}</td>
      <td class="num">${p ? fmtNs(p.device_ns) : ""}</td><td class="num">${p ? p.event_count : ""}</td>
      <td class="num">${p && p.instructions ? fmtNs(p.estimated_instruction_ns) : ""}</td><td>${esc(text)}</td></tr>`;
  });
  $("#source-code").innerHTML = `<table><thead><tr><th>line</th><th class="num">device time</th><th class="num">events</th><th class="num">kernel instr. (est.)</th><th></th></tr></thead><tbody>${rows.join("")}</tbody></table>`;
  $("#source-code").querySelectorAll("tr[data-line]").forEach((tr) => tr.onclick = () => lineEvents(src, Number(tr.dataset.line)));
  if (line) { const tr = $(`#source-code tr[data-line="${line}"]`); if (tr) tr.scrollIntoView({ block: "center" }); lineEvents(src, line); }
}
async function lineEvents(src, line) {
  const p = src.per_line[line];
  $("#source-code").querySelectorAll("tr.selected").forEach((t) => t.classList.remove("selected"));
  const tr = $(`#source-code tr[data-line="${line}"]`); if (tr) tr.classList.add("selected");
  if (!p) { $("#line-events").innerHTML = `<p class="muted">line ${line}: no events</p>`; return; }
  $("#line-events").innerHTML = `<h3 id="line-title">line ${line}: ${p.event_count} events, ${fmtNs(p.device_ns)} device, ${fmtNs(p.host_ns)} host</h3>
    ${p.instructions ? `<p>${p.instructions} kernel instructions, ${fmtNs(p.estimated_instruction_ns)} <span class="est">ESTIMATED</span></p>` : ""}
    <ul>${p.events.slice(0, 100).map((id) => `<li><a class="event-link" data-id="${id}">event ${id}</a></li>`).join("")}</ul>`;
}

// ---- hierarchy --------------------------------------------------------------------------------
async function loadHierarchy() {
  const root = await api("hierarchy", state.generation ? { generation: state.generation } : {});
  state.hierarchy = root; state.hierarchySort = state.hierarchySort || "device_ns"; state.open = state.open || new Set(["/profile"]);
  renderHierarchy();
}
function renderHierarchy() {
  const key = state.hierarchySort, out = [];
  const walk = (node, depth, path) => {
    const id = path + "/" + node.name, open = state.open.has(id);
    out.push(`<tr data-node="${esc(id)}" class="level-${node.level}"><td style="padding-left:${depth * 16 + 4}px">${node.children.length ? (open ? "▾ " : "▸ ") : "  "}${esc(node.name)}</td>
      <td>${node.level}</td><td class="num">${node.count}</td><td class="num">${fmtNs(node.device_ns)}</td><td class="num">${fmtNs(node.estimated_ns)}</td></tr>`);
    if (open) [...node.children].sort((a, b) => (key === "name" ? a.name.localeCompare(b.name) : b[key] - a[key])).forEach((c) => walk(c, depth + 1, id));
  };
  walk(state.hierarchy, 0, "");
  const el = $("#hierarchy-table");
  el.innerHTML = `<thead><tr><th data-sort="name">name</th><th>level</th><th class="num" data-sort="count">count</th>
    <th class="num" data-sort="device_ns">device time (measured)</th><th class="num" data-sort="estimated_ns">chip time (ESTIMATED, ${esc(state.generation)})</th></tr></thead><tbody>${out.join("")}</tbody>`;
  el.querySelectorAll("th[data-sort]").forEach((th) => th.onclick = () => { state.hierarchySort = th.dataset.sort; renderHierarchy(); });
  el.querySelectorAll("tr[data-node]").forEach((tr) => tr.onclick = () => {
    const id = tr.dataset.node; state.open.has(id) ? state.open.delete(id) : state.open.add(id); renderHierarchy(); });
}

// ---- dependencies -----------------------------------------------------------------------------
async function loadGaps() {
  const gaps = await api("gaps");
  const totals = {};
  gaps.forEach((g) => { totals[g.waited_for] = (totals[g.waited_for] || 0) + g.gap_ns; });
  $("#gap-totals").innerHTML = `<div class="cards">${Object.entries(totals).sort((a, b) => b[1] - a[1]).map(([k, v]) =>
    `<div class="card" data-cause="${esc(k)}">${esc(k)}<b>${fmtNs(v)}</b></div>`).join("")}</div>`;
  const origin = state.overview.timeline.start;
  table($("#gaps-table"), ["core", "at", "idle", "waited for", "kernel before", "kernel after", "culprit", "culprit source"],
    gaps.sort((a, b) => b.gap_ns - a.gap_ns).slice(0, 500).map((g) => [g.core, fmtNs(g.start_ts - origin), fmtNs(g.gap_ns), esc(g.waited_for),
      eventLink(g.before), eventLink(g.after), g.culprit ? eventLink(g.culprit) : "", g.culprit && g.culprit.stack.length ? sourceLink(g.culprit.stack[0]) : ""]), [2]);
}

async function loadCollectives() {
  const rows = await api("collectives");
  table($("#collectives-table"), ["#", "collective", "this rank", "slowest rank", "waited for it", "arrivals (from the first)"],
    rows.map((c) => [c.index, `<a class="event-link" data-id="${c.event_id}">${esc(c.name)}</a>`, c.rank ?? "-", c.slowest_rank ?? "-",
      fmtNs(c.waited_ns), Object.entries(c.arrivals_ns).map(([r, t]) => `rank ${esc(r)}: ${fmtNs(t)}`).join(" · ")]), [4]);
  if (!rows.length) $("#collectives-table").innerHTML = '<tr><td class="muted">no collectives in this profile</td></tr>';
}

async function loadKernelWaits() {
  const rows = await api("kernel_waits", { generation: state.generation });
  $("#waits-generation").textContent = `(${state.generation})`;
  table($("#kernel-waits-table"), ["kernel", "engine", "waited for", "waits", "total wait"],
    rows.map((w) => [esc(w.kernel), esc(w.engine), esc(w.waited_for), w.waits, fmtNs(w.wait_ns)]), [3, 4]);
  if (!rows.length) $("#kernel-waits-table").innerHTML = '<tr><td class="muted">no engine waits inside kernel-language kernels</td></tr>';
}

// ---- critical path ----------------------------------------------------------------------------
async function loadCritical(params = {}) {
  const r = await api("critical_path", params);
  table($("#whatif-table"), ["what if", "span", "speedup vs measured", "critical path by kind"],
    r.what_ifs.map((w) => [esc(w.what_if), fmtNs(w.span_ns), w.speedup ? w.speedup.toFixed(2) + "x" : "n/a",
      Object.entries(w.by_kind).map(([k, v]) => `${esc(k)} ${fmtNs(v)}`).join(" · ")]), [1, 2]);
  $("#critical-label").textContent = `(${r.path.length} steps, span ${fmtNs(r.span_ns)})`;
  table($("#critical-table"), ["at", "event", "kind", "duration"],
    r.path.slice(0, 400).map((s) => [fmtNs(s.start_ns), `<a class="event-link" data-id="${s.id}">${esc(s.name)}</a>`, esc(s.kind), fmtNs(s.duration_ns)]), [0, 3]);
}

// ---- compare ----------------------------------------------------------------------------------
async function setupCompare() {
  const other = $("#compare-other");
  if (other.options.length === 1) {
    const profiles = await api("profiles");
    profiles.filter((p) => p.key !== state.profile).forEach((p) => other.insertAdjacentHTML("beforeend", `<option value="${p.key}">${esc(p.path)}</option>`));
    for (const id of ["#compare-a", "#compare-b"]) $(id).innerHTML = state.overview.generations.map((g) => `<option>${g}</option>`).join("");
    $("#compare-b").value = state.overview.generations.includes("trn3") ? "trn3" : state.overview.generations.at(-1);
    $("#compare-a").value = state.overview.generations.includes("trn2") ? "trn2" : state.overview.generations[0];
    $("#compare-run").onclick = runCompare;
  }
}
async function runCompare() {
  const other = $("#compare-other").value;
  const r = await api("compare", other ? { other } : { generation_a: $("#compare-a").value, generation_b: $("#compare-b").value });
  table($("#compare-table"), ["level", "name", `A: ${r.a}`, `B: ${r.b}`, "B - A"],
    r.rows.slice(0, 500).map((x) => [x.level, esc(x.name), fmtNs(x.a_ns), fmtNs(x.b_ns), fmtNs(x.delta_ns)]), [2, 3, 4]);
  $("#compare-table").dataset.rows = String(r.rows.length);
}

// ---- summary ----------------------------------------------------------------------------------
function renderSummary() {
  const { summary: s, metadata: m, recommendations, top_operators, fallbacks } = state.overview;
  const engines = [["TensorE", "tensor_engine"], ["VectorE", "vector_engine"], ["ScalarE", "scalar_engine"], ["GpSimd", "gpsimd_engine"], ["DMA", "dma"]];
  const maxEngine = Math.max(1e-12, ...engines.map(([, p]) => s[p + "_active_time"] || 0));
  $("#summary").innerHTML = `
    <p>${esc(state.overview.profile)} · simulated ${esc(m.chip_generation)}, estimates for <b>${esc(m.target_generation)}</b> · ${s.steps} steps</p>
    <div class="cards">
      <div class="card">MFU<b id="mfu">${pct(s.mfu_estimated_percent)}</b><span class="est">ESTIMATED</span></div>
      <div class="card">HFU<b>${pct(s.hfu_estimated_percent)}</b><span class="est">ESTIMATED</span></div>
      <div class="card">MBU<b>${pct(s.mbu_estimated_percent)}</b><span class="est">ESTIMATED</span></div>
      <div class="card">chip time per step<b>${fmtNs(s.estimated_step_time_us * 1e3)}</b><span class="est">ESTIMATED</span></div>
      <div class="card">wall time<b>${fmtNs(s.wall_time_us * 1e3)}</b>measured</div>
      <div class="card">device time<b>${fmtNs(s.device_time_us * 1e3)}</b>measured</div>
      <div class="card">CPU fallback time<b>${fmtNs(s.host_fallback_time_us * 1e3)}</b>measured</div>
    </div>
    <h2>Recommendations</h2><div id="recommendations">${recommendations.map((r, i) => `<div class="reco"><b>${i + 1}. ${esc(r.title)}</b>
      (${fmtNs(r.at_stake_ns)} at stake)<br>${esc(r.advice)}<br><span class="muted">${esc(r.evidence)}</span></div>`).join("") || '<p class="muted">nothing to recommend</p>'}</div>
    <h2>Engines <span class="est">ESTIMATED</span></h2><table>${engines.map(([name, p]) => `<tr><td>${name}</td><td class="num">${fmtNs((s[p + "_active_time"] || 0) * 1e9)}</td>
      <td><span class="bar" style="width:${300 * (s[p + "_active_time"] || 0) / maxEngine}px"></span></td></tr>`).join("")}</table>
    <h2>Top operators</h2><table id="top-ops"></table>
    <h2>CPU fallbacks</h2><table id="fallbacks"></table>`;
  table($("#top-ops"), ["operator", "execution", "calls", "device (measured)", "chip (ESTIMATED)", "bound", "source"],
    top_operators.map((o) => [esc(o.op_name), o.execution, o.calls, fmtNs(o.device_time_us * 1e3), fmtNs(o.estimated_chip_time_us == null ? null : o.estimated_chip_time_us * 1e3), esc(o.estimated_bound || ""), esc(o.source_location || "")]), [2, 3, 4]);
  table($("#fallbacks"), ["operator", "calls", "host time (measured)"], fallbacks.map((o) => [esc(o.op_name), o.calls, fmtNs(o.host_fallback_time_us * 1e3)]), [1, 2]);
}

// ---- start ------------------------------------------------------------------------------------
async function loadProfile(key) {
  state.profile = key; state.sourceFile = null; $("#source-file").innerHTML = "";
  state.overview = await api("overview");
  const gens = state.overview.generations;
  state.generation = gens.includes(state.overview.metadata.target_generation) ? state.overview.metadata.target_generation : gens[0];
  $("#generation").innerHTML = gens.map((g) => `<option ${g === state.generation ? "selected" : ""}>${g}</option>`).join("");
  renderSummary();
  const active = document.querySelector("nav button.active").dataset.tab;
  showTab(active);
}

async function start() {
  document.querySelectorAll("nav button").forEach((b) => b.onclick = () => showTab(b.dataset.tab));
  $("#generation").onchange = () => { state.generation = $("#generation").value; timeline("chip"); };
  const profiles = await api("profiles");
  $("#profile").innerHTML = profiles.map((p) => `<option value="${p.key}" ${p.default ? "selected" : ""}>${esc(p.path)}</option>`).join("");
  $("#profile").onchange = () => loadProfile($("#profile").value);
  await loadProfile(profiles.find((p) => p.default).key);
  document.body.dataset.state = "ready";
}
start().catch((e) => { document.body.dataset.state = "error"; $("#summary").textContent = "error: " + e.message; });
