// tools/report_template.hpp — the page `ckpt report` writes: HTML, CSS and a small
// script in one raw string, into which the report's JSON goes (report_data_marker).
//
// Self-contained: nothing is fetched when it is opened (no CDN, no font, no image; the
// Content-Security-Policy forbids any load). Whatever comes from the checkpoint (names,
// dtypes, metric names, tags) is put into the page as text (textContent, setAttribute),
// never parsed as HTML; report.hpp escapes the JSON for the <script> element.
#pragma once

#include <string_view>

namespace {

constexpr std::string_view report_data_marker = "@CKPT_REPORT_DATA@";

constexpr std::string_view report_template = R"ckpt_html(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'">
<title>ckpt report</title>
<style>
:root { --fg: #1d2330; --muted: #5d6677; --line: #dde1e8; --panel: #f5f6f8; --bad: #fde0df; --badfg: #a3151a; --accent: #2e6bd1; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.4 system-ui, -apple-system, "Segoe UI", Roboto, Helvetica, Arial, sans-serif; color: var(--fg); background: #fff; }
header { padding: 10px 20px; border-bottom: 1px solid var(--line); background: var(--panel); }
header h1 { font-size: 17px; margin: 0; display: inline; }
#path { font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 13px; margin-left: 8px; word-break: break-all; }
#summary { color: var(--muted); margin-top: 2px; }
#alerts { margin: 6px 0 0; padding: 0; list-style: none; }
#alerts li { color: var(--badfg); background: var(--bad); border-radius: 4px; padding: 2px 8px; margin-top: 3px; word-break: break-word; }
#alerts li.ok { color: #1f6e3a; background: #e1f3e6; }
main { padding: 12px 20px; display: grid; grid-template-columns: 1fr 1fr; gap: 14px 18px; }
section { grid-column: 1 / -1; min-width: 0; }
section.half { grid-column: auto; }
h2 { font-size: 15px; margin: 0 0 4px; }
.note { color: var(--muted); font-size: 12px; margin: 2px 0 6px; }
.charts { display: grid; grid-template-columns: repeat(auto-fill, minmax(220px, 1fr)); gap: 10px; }
.chart { border: 1px solid var(--line); border-radius: 6px; padding: 4px 6px 2px; min-width: 0; }
.chart h3 { font-size: 12px; margin: 0; font-weight: 600; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
svg { display: block; width: 100%; height: auto; overflow: visible; }
svg text { font-size: 10px; fill: var(--muted); }
svg .grid { stroke: #eceef2; }
svg .axis { stroke: #b8bec9; }
svg .nonfinite { fill: var(--badfg); font-weight: 700; }
.legend { display: flex; flex-wrap: wrap; gap: 2px 12px; font-size: 11px; margin-top: 4px; }
.legend span { white-space: nowrap; overflow: hidden; text-overflow: ellipsis; max-width: 100%; }
.legend i { display: inline-block; width: 10px; height: 3px; margin-right: 4px; vertical-align: middle; }
.scroll { overflow: auto; max-height: 420px; border: 1px solid var(--line); border-radius: 6px; }
table { border-collapse: collapse; font-size: 12px; width: 100%; }
th, td { padding: 3px 8px; border-bottom: 1px solid var(--line); text-align: right; white-space: nowrap; }
th { position: sticky; top: 0; background: var(--panel); z-index: 1; }
th:first-child, td:first-child { text-align: left; position: sticky; left: 0; background: inherit; }
th:first-child { background: var(--panel); z-index: 2; }
td:first-child { font-family: ui-monospace, Menlo, Consolas, monospace; max-width: 360px; overflow: hidden; text-overflow: ellipsis; }
tbody tr { background: #fff; }
#leaves th { cursor: pointer; user-select: none; }
#leaves th[aria-sort=ascending]::after { content: " \25B2"; }
#leaves th[aria-sort=descending]::after { content: " \25BC"; }
tr.bad { background: var(--bad); color: var(--badfg); font-weight: 600; }
td.dt { text-align: left; color: var(--muted); }
.heat td { min-width: 56px; font-size: 11px; }
.heat td.nonfinite { background: #3b0a45; color: #fff; font-weight: 700; }
.heat td.absent { background: repeating-linear-gradient(45deg, #f4f5f7, #f4f5f7 4px, #e6e8ec 4px, #e6e8ec 8px); }
.controls { display: flex; flex-wrap: wrap; gap: 6px 14px; align-items: center; margin: 4px 0 6px; }
.controls input[type=search] { padding: 4px 8px; min-width: 220px; flex: 1 1 220px; max-width: 420px; border: 1px solid #c3c8d1; border-radius: 4px; font: inherit; }
#treemap { position: relative; height: 340px; border: 1px solid var(--line); border-radius: 6px; overflow: hidden; }
#treemap div { position: absolute; overflow: hidden; font-size: 11px; line-height: 14px; }
#treemap .group { border: 1px solid #fff; }
#treemap .label { position: static; padding: 1px 4px; font-weight: 600; color: #fff; white-space: nowrap; text-overflow: ellipsis; }
#treemap .cell { border: 1px solid rgba(255, 255, 255, .7); color: #fff; padding: 1px 3px; white-space: nowrap; text-overflow: ellipsis; }
#treemap .cell.bad { outline: 3px solid var(--badfg); outline-offset: -3px; }
#errors { color: var(--badfg); background: var(--bad); margin: 0; padding: 6px 20px; white-space: pre-wrap; }
#errors:empty { display: none; }
footer { color: var(--muted); font-size: 11px; padding: 4px 20px 16px; }
@media (max-width: 820px) {
  main { grid-template-columns: 1fr; padding: 8px 10px; }
  header { padding: 8px 10px; }
  #treemap { height: 260px; }
  td:first-child { max-width: 180px; }
}
</style>
</head>
<body>
<pre id="errors"></pre>
<script>
window.onerror = function (msg, src, line) { document.getElementById('errors').textContent += msg + ' (line ' + line + ')\n'; };
</script>
<header>
  <h1>ckpt report</h1><span id="path"></span>
  <div id="summary"></div>
  <ul id="alerts"></ul>
</header>
<main>
  <section id="metrics-section" hidden>
    <h2>Metrics per step</h2>
    <p class="note" id="metrics-note"></p>
    <div class="charts" id="metrics"></div>
  </section>
  <section class="half" id="norms-section" hidden>
    <h2>L2 norm per leaf across steps</h2>
    <p class="note" id="norms-note"></p>
    <div class="chart" id="norms"></div>
  </section>
  <section class="half" id="heat-section" hidden>
    <h2>Relative change between consecutive steps</h2>
    <p class="note">||a&minus;b|| / ||a|| per leaf, as <code>ckpt diff --rel</code> computes it; NaN: the difference holds NaN or Inf.</p>
    <div class="scroll"><table class="heat" id="heat"></table></div>
  </section>
  <section>
    <div class="controls">
      <h2 style="margin:0">Bytes per subtree</h2>
      <label id="step-label" hidden>step <select id="step"></select></label>
      <span class="note" id="treemap-note"></span>
    </div>
    <div id="treemap"></div>
  </section>
  <section>
    <h2>Leaves</h2>
    <div class="controls">
      <input type="search" id="filter" placeholder="filter by path (also the norms and the heat map)" aria-label="filter leaves">
      <label><input type="checkbox" id="only-bad"> only NaN/Inf</label>
      <span class="note" id="leaf-count"></span>
    </div>
    <div class="scroll"><table id="leaves"><thead><tr id="leaf-head"></tr></thead><tbody id="leaf-rows"></tbody></table></div>
    <p class="note">Statistics of the finite values (NaN and Inf counted apart); complex values by their magnitude; as <code>ckpt stats</code> computes them.</p>
  </section>
</main>
<footer id="footer"></footer>
<script type="application/json" id="report-data">@CKPT_REPORT_DATA@</script>
<script>
'use strict';
(function () {
  const D = JSON.parse(document.getElementById('report-data').textContent);
  const SVGNS = 'http://www.w3.org/2000/svg';
  const PALETTE = ['#4e79a7', '#f28e2b', '#59a14f', '#b07aa1', '#76b7b2', '#edc948', '#9c755f', '#e15759', '#ff9da7', '#bab0ac'];
  const $ = (id) => document.getElementById(id);
  function el(tag, attrs, text, ns) {
    const e = ns ? document.createElementNS(SVGNS, tag) : document.createElement(tag);
    for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined && text !== null) e.textContent = text;
    return e;
  }
  const svg = (tag, attrs, text) => el(tag, attrs, text, true);
  function num(x) {
    if (x === null || x === undefined) return '\u2014';
    if (x === 0) return '0';
    const a = Math.abs(x);
    return a >= 1e5 || a < 1e-3 ? x.toExponential(2) : String(+x.toPrecision(4));
  }
  function bytes(n) {
    const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
    return (i ? n.toFixed(1) : n) + ' ' + u[i];
  }
  const bad = (l) => (l.nan || 0) + (l.inf || 0) > 0;
  const steps = D.steps;
  const stepName = (s) => (s.step !== undefined && s.step !== null ? 'step ' + s.step : s.name);
  const xOf = (s, i) => (typeof s.step === 'number' ? s.step : i);
  let filter = '';
  const shown = (path) => path.toLowerCase().includes(filter);

  // --- header: what this is, and which steps hold NaN or Inf -----------------------
  $('path').textContent = D.path;
  document.title = 'ckpt report: ' + D.path;
  const lastStep = steps[steps.length - 1];
  const nLeaves = lastStep.leaves.length;
  $('summary').textContent = D.root
    ? (steps.length === 1 ? '1 step kept (' + stepName(lastStep) + '), '
      : steps.length + ' steps kept (' + stepName(steps[0]) + ' to ' + stepName(lastStep) + '), ') + lastStep.format +
      '; the latest: ' + nLeaves + ' leaves, ' + bytes(lastStep.tree.bytes)
    : lastStep.format + ' checkpoint: ' + nLeaves + ' leaves, ' + bytes(lastStep.tree.bytes) + ', ' +
      lastStep.total.elements + ' elements';
  let lastFinite = null;
  for (const s of steps) {
    const b = s.leaves.filter(bad);
    if (!b.length) { lastFinite = s; continue; }
    const names = b.slice(0, 5).map((l) => l.path + ' (' + (l.nan || 0) + ' NaN, ' + (l.inf || 0) + ' Inf)').join(', ');
    $('alerts').append(el('li', {}, (D.root ? stepName(s) + ': ' : '') + b.length + ' of ' + s.leaves.length +
      ' leaves hold NaN or Inf: ' + names + (b.length > 5 ? ', \u2026' : '')));
  }
  if (D.root && lastFinite !== lastStep && lastFinite)
    $('alerts').append(el('li', { class: 'ok' }, 'latest step without NaN or Inf: ' + stepName(lastFinite)));

  // --- a line chart in SVG: series of [x, y] points; y null is drawn as a red x ----------
  function chart(series, opts) {
    opts = opts || {};
    const W = opts.width || 330, H = opts.height || 150, L = 46, R = 8, T = 8, B = 20;
    const log = !!opts.log;
    const xs = [], ys = [];
    for (const s of series) for (const [x, y] of s.points) {
      xs.push(x);
      if (y !== null && isFinite(y) && (!log || y > 0)) ys.push(log ? Math.log10(y) : y);
    }
    let x0 = Math.min(...xs), x1 = Math.max(...xs), y0 = Math.min(...ys), y1 = Math.max(...ys);
    if (!xs.length) { x0 = 0; x1 = 1; }
    if (x0 === x1) { x0 -= 1; x1 += 1; }
    if (!ys.length) { y0 = 0; y1 = 1; }
    if (y0 === y1) { const d = Math.abs(y0) * 0.1 || 1; y0 -= d; y1 += d; }
    const pad = (y1 - y0) * 0.06; y0 -= pad; y1 += pad;
    const X = (x) => L + (x - x0) / (x1 - x0) * (W - L - R);
    const Y = (y) => T + (1 - ((log ? Math.log10(y) : y) - y0) / (y1 - y0)) * (H - T - B);
    const g = svg('svg', { viewBox: '0 0 ' + W + ' ' + H, role: 'img' });
    for (const t of ticks(y0, y1, 4, log)) {
      const y = T + (1 - (t - y0) / (y1 - y0)) * (H - T - B);
      g.append(svg('line', { class: 'grid', x1: L, x2: W - R, y1: y, y2: y }));
      g.append(svg('text', { x: L - 4, y: y + 3, 'text-anchor': 'end' }, num(log ? Math.pow(10, t) : t)));
    }
    for (const t of ticks(x0, x1, 5, false)) {
      if (Math.round(t) !== t) continue;  // steps are integers
      g.append(svg('text', { x: X(t), y: H - 6, 'text-anchor': 'middle' }, num(t)));
    }
    g.append(svg('line', { class: 'axis', x1: L, x2: W - R, y1: H - B, y2: H - B }));
    g.append(svg('line', { class: 'axis', x1: L, x2: L, y1: T, y2: H - B }));
    for (const s of series) {
      let d = '';
      for (const [x, y] of s.points) {
        if (y === null || !isFinite(y) || (log && y <= 0)) { d += ' '; continue; }
        d += (d === '' || d.endsWith(' ') ? 'M' : 'L') + X(x).toFixed(1) + ',' + Y(y).toFixed(1);
      }
      if (s.line !== false) g.append(svg('path', { d: d.replace(/ /g, ''), fill: 'none', stroke: s.color, 'stroke-width': 1.5 }));
      for (const p of s.points) {
        if (s.dots === false) continue;
        const [x, y] = p;
        const attrs = Object.assign({ 'data-step': x }, s.attrs || {});
        const tip = s.name + ' at step ' + x + ': ' + (p[2] || num(y));
        let m;
        if (y === null || !isFinite(y)) {
          attrs.class = (s.cls || 'pt') + ' nonfinite';
          m = svg('text', Object.assign(attrs, { x: X(x), y: T + 8, 'text-anchor': 'middle' }), '\u00d7');
        } else if (log && y <= 0) {
          continue;
        } else {
          attrs.class = (s.cls || 'pt') + (p[2] ? ' nonfinite' : '');
          m = svg('circle', Object.assign(attrs, { cx: X(x).toFixed(1), cy: Y(y).toFixed(1), r: p[2] ? 4.5 : 2.8,
            fill: p[2] ? '#a3151a' : s.color }));
        }
        m.append(svg('title', {}, tip));
        g.append(m);
      }
    }
    return g;
  }
  // About n round values from lo to hi (log: the decades, as exponents).
  function ticks(lo, hi, n, log) {
    if (log) {
      const out = [];
      const step = Math.max(1, Math.ceil((Math.floor(hi) - Math.ceil(lo) + 1) / 5));
      for (let e = Math.ceil(lo); e <= hi; e += step) out.push(e);
      return out.length ? out : [lo];
    }
    const raw = (hi - lo) / n, mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw);
    const out = [];
    for (let t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) out.push(+t.toPrecision(12));
    return out;
  }
  function legend(series) {
    const div = el('div', { class: 'legend' });
    for (const s of series) {
      const span = el('span', { title: s.name });
      span.append(el('i', { style: 'background:' + s.color }), document.createTextNode(s.name));
      div.append(span);
    }
    return div;
  }
  function card(title, body, extra) {
    const c = el('div', { class: 'chart' });
    c.append(el('h3', { title: title }, title), body);
    if (extra) c.append(extra);
    return c;
  }

  // --- metrics of every kept step, the TensorBoard scalars, and two figures of the values --
  if (D.root) {
    $('metrics-section').hidden = false;
    const names = [];
    for (const s of steps) for (const k of Object.keys(s.metrics || {})) if (!names.includes(k)) names.push(k);
    const tb = D.tensorboard || {};
    for (const k of Object.keys(tb)) if (!names.includes(k)) names.push(k);
    for (const name of names) {
      const series = [];
      if (name in tb)
        series.push({ name: 'TensorBoard', color: '#9aa3b2', cls: 'tb', attrs: { 'data-tag': name }, dots: tb[name].length <= 200,
          points: tb[name].map((p) => [p[0], p[1]]) });
      const kept = steps.filter((s) => s.metrics && name in s.metrics);
      if (kept.length)
        series.push({ name: 'kept steps', color: PALETTE[0], attrs: { 'data-metric': name },
          points: kept.map((s) => [xOf(s), s.metrics[name]]) });
      $('metrics').append(card(name, chart(series), series.length > 1 ? legend(series) : null));
    }
    const idx = steps.map((s, i) => xOf(s, i));
    const nf = steps.map((s, i) => [idx[i], (s.total.nan || 0) + (s.total.inf || 0)]);
    $('metrics').append(card('NaN + Inf elements (all leaves)', chart([{ name: 'NaN + Inf', color: PALETTE[7],
      attrs: { 'data-figure': 'nonfinite' }, points: nf }])));
    $('metrics').append(card('L2 norm of the whole state (finite values)', chart([{ name: 'L2', color: PALETTE[2],
      attrs: { 'data-figure': 'l2' }, points: steps.map((s, i) => [idx[i], s.total.l2]) }])));
    $('metrics-note').textContent = (names.length ? 'From each step\u2019s metadata' +
      (Object.keys(tb).length ? ' and the TensorBoard event files (grey)' : '') : 'No step has metrics') +
      '; the last two are computed from the values. \u00d7: not a finite number.';
  }

  // --- the leaves that are numbers, in path order across all steps --------------------
  const numeric = [];
  {
    const seen = new Set();
    for (const s of steps) for (const l of s.leaves) if ('l2' in l && !seen.has(l.path)) { seen.add(l.path); numeric.push(l.path); }
  }
  const byPath = steps.map((s) => new Map(s.leaves.map((l) => [l.path, l])));
  const moved = steps.map((s) => new Map((s.moved || []).map((m) => [m.path, m])));

  // L2 norm per leaf across steps: the leaves matching the filter, those with NaN or Inf
  // first, then those whose norm changed most between two steps.
  function drawNorms() {
    const box = $('norms');
    box.textContent = '';
    const score = (p) => {
      let s = 0, prev = null;
      for (let i = 0; i < steps.length; i++) {
        const l = byPath[i].get(p);
        if (!l) continue;
        if (bad(l)) return Infinity;
        if (prev !== null && prev > 0 && l.l2 > 0) s = Math.max(s, Math.abs(Math.log(l.l2 / prev)));
        prev = l.l2;
      }
      return s;
    };
    const cand = numeric.filter(shown).map((p) => [p, score(p)]).sort((a, b) => b[1] - a[1]);
    const pick = cand.slice(0, 8);
    const series = pick.map(([p], k) => ({ name: p, color: PALETTE[k % PALETTE.length], cls: 'norm', attrs: { 'data-leaf': p },
      points: steps.map((s, i) => {
        const l = byPath[i].get(p);
        if (!l) return [xOf(s, i), undefined];
        return [xOf(s, i), l.l2, bad(l) ? (l.nan || 0) + ' NaN, ' + (l.inf || 0) + ' Inf; L2 of the rest ' + num(l.l2) : undefined];
      }).filter((q) => q[1] !== undefined) }));
    box.append(chart(series, { log: true, width: 600, height: 250 }), legend(series));
    $('norms-note').textContent = 'Log scale, of the finite values; a large red dot: the leaf holds NaN or Inf at that step. ' +
      (cand.length > pick.length ? 'The ' + pick.length + ' of ' + cand.length + ' leaves that hold NaN/Inf or changed most; ' +
        'the filter below chooses others.' : 'Every leaf' + (filter ? ' matching the filter.' : '.'));
  }

  // Heat map: a row per leaf, a column per pair of consecutive steps; most moved first
  // (a change that is not finite first of all), as `ckpt diff --rel` lists them.
  function heatColor(r) {
    const t = r <= 0 ? 0 : Math.min(1, Math.max(0, (Math.log10(r) + 6) / 6));  // 1e-6 .. 1
    const stops = [[255, 255, 255], [254, 224, 139], [244, 109, 67], [165, 0, 38]];
    const f = t * (stops.length - 1), i = Math.min(stops.length - 2, Math.floor(f)), u = f - i;
    const c = stops[i].map((v, k) => Math.round(v + (stops[i + 1][k] - v) * u));
    return ['rgb(' + c.join(',') + ')', t > 0.7 ? '#fff' : '#1d2330'];
  }
  function drawHeat() {
    const t = $('heat');
    t.textContent = '';
    const head = el('tr');
    head.append(el('th', {}, 'leaf'));
    for (let i = 1; i < steps.length; i++) head.append(el('th', {}, xOf(steps[i - 1], i - 1) + '\u2192' + xOf(steps[i], i)));
    const thead = el('thead');
    thead.append(head);
    t.append(thead);
    const body = t.appendChild(el('tbody'));
    const most = (p) => {
      let r = -1;
      for (let i = 1; i < steps.length; i++) {
        const m = moved[i].get(p);
        if (m && m.nonfinite_diff > 0) return Infinity;
        if (m && m.rel_l2 !== null) r = Math.max(r, m.rel_l2);
      }
      return r;
    };
    for (const p of numeric.filter(shown).map((q) => [q, most(q)]).sort((a, b) => b[1] - a[1]).map((q) => q[0])) {
      const tr = el('tr', { 'data-leaf': p });
      tr.append(el('td', { title: p }, p));
      for (let i = 1; i < steps.length; i++) {
        const m = moved[i].get(p);
        let td;
        if (!m) td = el('td', { class: 'absent', title: 'not in both steps, or its dtype or shape changed' });
        else if (m.nonfinite_diff > 0) td = el('td', { class: 'nonfinite', title: m.nonfinite_diff + ' differences are NaN or Inf' }, 'NaN');
        else if (m.rel_l2 === null) td = el('td', { title: '||a|| is 0' }, '\u2014');
        else {
          const [bg, fg] = heatColor(m.rel_l2);
          td = el('td', { style: 'background:' + bg + ';color:' + fg, title: 'max |a\u2212b| ' + num(m.max_abs_diff) }, num(m.rel_l2));
        }
        tr.append(td);
      }
      body.append(tr);
    }
  }

  // Treemap of the bytes of the chosen step: squarified, nested while there is room.
  function squarify(items, x, y, w, h) {
    const out = [];
    let rest = items.filter((it) => it.v > 0);
    const total = rest.reduce((a, it) => a + it.v, 0);
    if (!total) return out;
    const scale = (w * h) / total;
    while (rest.length) {
      const side = Math.min(w, h);
      const worst = (row) => {
        const s = row.reduce((a, it) => a + it.v, 0) * scale;
        const hi = row[0].v * scale, lo = row[row.length - 1].v * scale;
        return Math.max((side * side * hi) / (s * s), (s * s) / (side * side * lo));
      };
      let n = 1;
      while (n < rest.length && worst(rest.slice(0, n + 1)) <= worst(rest.slice(0, n))) n++;
      const row = rest.slice(0, n);
      rest = rest.slice(n);
      const s = row.reduce((a, it) => a + it.v, 0) * scale;
      if (w >= h) {
        const cw = s / h;
        let yy = y;
        for (const it of row) { const rh = (it.v * scale) / cw; out.push({ it, x, y: yy, w: cw, h: rh }); yy += rh; }
        x += cw; w -= cw;
      } else {
        const rh = s / w;
        let xx = x;
        for (const it of row) { const rw = (it.v * scale) / rh; out.push({ it, x: xx, y, w: rw, h: rh }); xx += rw; }
        y += rh; h -= rh;
      }
    }
    return out;
  }
  function drawTreemap(i) {
    const box = $('treemap');
    box.textContent = '';
    const W = box.clientWidth || 1000, H = box.clientHeight || 340;
    const pct = (v, of) => (100 * v / of).toFixed(3) + '%';
    const badPaths = new Set(steps[i].leaves.filter(bad).map((l) => l.path));
    const place = (div, r) => {
      div.style.left = pct(r.x, W); div.style.top = pct(r.y, H); div.style.width = pct(r.w, W); div.style.height = pct(r.h, H);
      box.append(div);
    };
    const tip = (n) => (n.path || '(root)') + '\n' + bytes(n.bytes) + (n.shape ? '  ' + n.dtype + ' [' + n.shape.join(',') + ']'
      : '  ' + n.leaves + ' leaves');
    const items = (n) => (n.children || []).map((c) => ({ v: c.bytes, n: c }));
    function draw(n, x, y, w, h, color) {
      if (!n.children) {
        const d = el('div', { class: 'cell' + (badPaths.has(n.path) ? ' bad' : ''), title: tip(n) }, w > 40 && h > 14 ? n.name || n.path : '');
        d.style.background = color;
        place(d, { x, y, w, h });
        return;
      }
      let top = 0;
      if (w > 70 && h > 36 && n.path) {  // a labelled group
        const d = el('div', { class: 'group', title: tip(n) });
        d.style.background = color;
        d.append(el('div', { class: 'label' }, n.name + '  ' + bytes(n.bytes)));
        place(d, { x, y, w, h });
        top = 16;
      }
      for (const r of squarify(items(n), x + (top ? 2 : 0), y + top, w - (top ? 4 : 0), h - top - (top ? 2 : 0))) draw(r.it.n, r.x, r.y, r.w, r.h, color);
    }
    const tree = steps[i].tree;
    if (!tree.children) draw(tree, 0, 0, W, H, PALETTE[0]);
    else squarify(items(tree), 0, 0, W, H).forEach((r, k) => draw(r.it.n, r.x, r.y, r.w, r.h, PALETTE[k % PALETTE.length]));
    const zero = steps[i].leaves.filter((l) => !l.bytes).length;
    $('treemap-note').textContent = bytes(tree.bytes) + ' in ' + steps[i].leaves.length + ' leaves' +
      (zero ? ' (' + zero + ' empty, not drawn)' : '') + '; a red frame: NaN or Inf.';
  }

  // The leaves of the chosen step: sortable, filterable, NaN/Inf rows highlighted.
  const cols = [['path', 'path'], ['dtype', 'dtype'], ['shape', 'shape'], ['bytes', 'bytes'], ['elements', 'elements'],
    ['nan', 'NaN'], ['inf', 'Inf'], ['min', 'min'], ['max', 'max'], ['mean', 'mean'], ['std', 'std'], ['l2', 'L2']];
  let sortKey = null, sortDir = 1, current = steps.length - 1;
  for (const [k, label] of cols) {
    const th = el('th', { 'data-key': k, scope: 'col' }, label);
    th.addEventListener('click', () => {
      sortDir = sortKey === k ? -sortDir : (k === 'path' || k === 'dtype' ? 1 : -1);
      sortKey = k;
      drawTable();
    });
    $('leaf-head').append(th);
  }
  function cellText(l, k) {
    if (k === 'shape') return '[' + l.shape.join(',') + ']';
    if (k === 'bytes') return bytes(l.bytes);
    if (k === 'path' || k === 'dtype') return l[k];
    if (!(k in l)) return k === 'elements' ? '' : '\u2014';
    return k === 'elements' || k === 'nan' || k === 'inf' ? String(l[k]) : num(l[k]);
  }
  function drawTable() {
    const rows = steps[current].leaves.filter((l) => shown(l.path) && (!$('only-bad').checked || bad(l)));
    if (sortKey) {
      const k = sortKey;
      const v = (l) => (k === 'shape' ? l.shape.reduce((a, b) => a * b, 1) : l[k]);
      rows.sort((a, b) => {
        const x = v(a), y = v(b);
        if (x === y) return 0;
        if (x === undefined || x === null) return 1;
        if (y === undefined || y === null) return -1;
        return (x < y ? -1 : 1) * sortDir;
      });
    }
    for (const th of $('leaf-head').children)
      if (th.dataset.key === sortKey) th.setAttribute('aria-sort', sortDir > 0 ? 'ascending' : 'descending');
      else th.removeAttribute('aria-sort');
    const body = $('leaf-rows');
    body.textContent = '';
    for (const l of rows) {
      const tr = el('tr', bad(l) ? { class: 'bad' } : {});
      for (const [k] of cols) tr.append(el('td', k === 'dtype' ? { class: 'dt' } : k === 'path' ? { title: l.path } : {}, cellText(l, k)));
      body.append(tr);
    }
    $('leaf-count').textContent = rows.length + ' of ' + steps[current].leaves.length + ' leaves' +
      (D.root ? ' (' + stepName(steps[current]) + ')' : '');
  }

  if (D.root) {
    $('step-label').hidden = false;
    steps.forEach((s, i) => {
      const o = el('option', { value: i }, stepName(s) + (s.leaves.some(bad) ? '  (NaN/Inf)' : ''));
      if (s.time) o.title = new Date(s.time * 1000).toISOString().replace('T', ' ').slice(0, 19) + ' UTC';
      $('step').append(o);
    });
    $('step').value = String(current);
    $('step').addEventListener('change', () => { current = +$('step').value; drawTreemap(current); drawTable(); });
  }
  if (D.root && steps.length > 1) {
    $('norms-section').hidden = false;
    $('heat-section').hidden = false;
  }
  const drawFiltered = () => {
    drawTable();
    if (D.root && steps.length > 1) { drawNorms(); drawHeat(); }
  };
  $('filter').addEventListener('input', () => { filter = $('filter').value.toLowerCase(); drawFiltered(); });
  $('only-bad').addEventListener('change', drawTable);
  drawTreemap(current);
  drawFiltered();
  $('footer').textContent = 'Written by ckpt report. Everything is in this file; nothing is loaded when it is opened.';
  document.body.setAttribute('data-rendered', '1');
})();
</script>
</body>
</html>
)ckpt_html";

}  // namespace
