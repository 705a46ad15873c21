// The grl controller's dashboard (docs/dashboard.md). Reads /api/state every interval (at
// least every second) and /api/history once, then appends each new history point that
// /api/state carries; charts are plain SVG. No library, no build step.
"use strict";

const SPAN_MS = 15 * 60 * 1000;
const FIELDS = ["offered", "admitted", "limit", "ratio", "shadow_dropped"];
let hist = null;          // {recorded, capacity, times: [], series: Map(id -> series)}
let historyLoading = false;
let pollMs = 1000;

const $ = (id) => document.getElementById(id);
const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
const rate = (v) => (v == null ? "-" : v.toFixed(1));
const ratio = (v) => (v == null ? "-" : v.toFixed(3));
const secs = (ms) => (ms == null ? "-" : (ms / 1000).toFixed(1) + " s");
const when = (ms) => (ms ? new Date(ms).toISOString().replace(/\.\d{3}Z$/, "Z") : "-");
const id = (o) => o.bucket + "\u0000" + o.scope + "\u0000" + o.zone;
// How well the limit held (docs/dashboard.md): admitted / limit while over it in the last
// minute, and the seconds the last change in demand took to settle within 10% of the limit.
const held = (a) => {
  if (!a || a.held == null) return "<td class='n held'>-</td>";
  const settle = a.settling_s != null ? "settling " + a.settling_s.toFixed(0) + " s" :
    a.settle_s != null ? "settled in " + a.settle_s.toFixed(0) + " s" : "";
  const cls = a.held > 1.1 ? "bad" : a.held > 1.02 ? "warn" : "good";
  return "<td class='n held " + cls + "'>" + a.held.toFixed(2) + " L" +
    (settle ? " <span class='note'>" + settle + "</span>" : "") + "</td>";
};
const where = (b) => (b.scope === "global" ? "-" : b.scope === "region" ? b.region : b.zone);

async function getJSON(url) {
  const r = await fetch(url, {cache: "no-store"});
  if (r.status === 503) return null;  // not ready yet
  if (!r.ok) throw new Error(url + ": HTTP " + r.status);
  return r.json();
}

function table(el, head, rows, empty) {
  if (!rows.length) {
    el.innerHTML = "<tr><td class='note'>" + esc(empty) + "</td></tr>";
    return;
  }
  el.innerHTML = "<tr>" + head.map((h) => "<th>" + esc(h) + "</th>").join("") + "</tr>" + rows.join("");
}

function card(title, value, detail, cls) {
  return "<div class='card'><small>" + esc(title) + "</small><b class='" + (cls || "") + "'>" +
    esc(value) + "</b><small>" + esc(detail || "") + "</small></div>";
}

function renderState(s) {
  $("who").textContent = "controller " + s.controller + " (region " + s.region + ")";
  $("updated").textContent = "as of " + when(s.time_ms) + ", every " + s.interval_ms + " ms";
  const staleZones = s.zones.filter((z) => !z.fresh).length;
  const stalePeers = s.peers.filter((p) => !p.fresh).length;
  const age = s.instruction_age_ms;
  const lim = s.limits;
  let limits = lim.source ? (lim.version || "no version") : "none";
  let limitsDetail = lim.source ? lim.source + ", digest " + lim.digest : "no --limits";
  let limitsCls = "good";
  if (!lim.ok) { limits = "REJECTED"; limitsDetail = lim.error + " (last good in force)"; limitsCls = "bad"; }
  if (lim.store_error) { limits = "STORE DOWN"; limitsDetail = lim.store_error; limitsCls = "bad"; }
  $("cards").innerHTML = [
    card("hosts reporting", String(s.hosts.fresh), s.hosts.stale + " stale", s.hosts.stale ? "warn" : "good"),
    card("zones reporting", (s.zones.length - staleZones) + " / " + s.zones.length, staleZones ? staleZones + " stale" : "all fresh", staleZones ? "bad" : "good"),
    card("peer controllers", (s.peers.length - stalePeers) + " / " + s.peers.length, s.held_regions ? s.held_regions + " regions held" : "", stalePeers ? "warn" : "good"),
    card("instruction age", secs(age), "ttl " + secs(s.ttl_ms), age == null || age > s.ttl_ms ? "bad" : "good"),
    card("limits", limits, limitsDetail, limitsCls),
    card("buckets", String(s.buckets.length), s.overrides.length + " overrides / run-time", ""),
  ].join("");
  table($("zones"), ["zone", "collector", "hosts", "stale", "age", "state"], s.zones.map((z) =>
    "<tr><td>" + esc(z.zone) + "</td><td>" + esc(z.collector) + "</td><td class='n'>" + z.hosts +
    "</td><td class='n'>" + z.stale_hosts + "</td><td class='n'>" + secs(z.age_ms) + "</td><td class='" +
    (z.fresh ? "good'>fresh" : "bad'>STALE") + "</td></tr>"), "no zone has reported");
  table($("peers"), ["controller", "region", "age", "limits", "state"], s.peers.map((p) =>
    "<tr><td>" + esc(p.controller) + "</td><td>" + esc(p.region) + "</td><td class='n'>" + secs(p.age_ms) +
    "</td><td class='" + (p.same_limits ? "good'>same" : "warn'>DIFFERENT") + "</td><td class='" +
    (p.fresh ? "good'>fresh" : "bad'>STALE") + "</td></tr>"), "no peer controller");
  table($("buckets"), ["bucket", "scope", "where", "offered", "admitted", "limit", "ratio", "mode",
    "shadow would-drops", "held (last min)", "hosts", "limit from"], s.buckets.map((b, i) =>
    "<tr class='bucket' data-bucket='" + esc(b.name) + "' data-scope='" + esc(b.scope) + "' data-zone='" + esc(b.zone) + "'>" +
    "<td>" + esc(b.name) + "</td><td>" + esc(b.scope) + "</td><td>" + esc(where(b)) + "</td>" +
    "<td class='n offered'>" + rate(b.offered_rps) + "</td><td class='n admitted'>" + rate(b.admitted_rps) +
    "</td><td class='n limit'>" + rate(b.limit_rps) + (b.keyed ? " per key" : "") +
    "</td><td class='n ratio'>" + (b.keyed ? b.keys_limited + " keys limited" : ratio(b.ratio)) +
    "</td><td class='mode'>" + esc(b.mode) + "</td><td class='n shadow'>" +
    (b.mode === "shadow" ? rate(b.shadow_dropped_rps) : "-") + "</td>" + held((s.accuracy || [])[i]) +
    "<td class='n hosts'>" + b.hosts +
    "</td><td>" + esc(b.limit_source + (b.runtime ? ", run-time" : "") + (b.expires_ms ? ", until " + when(b.expires_ms) : "")) +
    "</td></tr>"), "no bucket yet (no zone usage received)");
  table($("overrides"), ["bucket", "kind", "limit", "mode", "match", "expires", "set by"], s.overrides.map((o) =>
    "<tr><td>" + esc(o.bucket) + "</td><td>" + (o.runtime ? "run-time (" + esc(o.scope) + ")" : "override") +
    "</td><td class='n'>" + rate(o.limit_rps) + "</td><td>" + esc(o.mode || "-") + "</td><td>" + esc(o.match || "-") +
    "</td><td>" + (o.expires_ms ? when(o.expires_ms) : "never") + "</td><td>" + esc(o.origin) + "</td></tr>"),
    "none (grlctl set / grlctl add make them)");
  const h = s.history;
  $("history-note").textContent = h.series_refused ?
    h.series_refused + " bucket instances have no chart: the history holds " + h.series + " at most" : "";
}

// ---- history ----

function newSeries(o, n) {
  const se = {bucket: o.bucket, scope: o.scope, zone: o.zone};
  for (const f of FIELDS) se[f] = new Array(n).fill(null);
  return se;
}

async function loadHistory() {
  if (historyLoading) return;
  historyLoading = true;
  try {
    const h = await getJSON("/api/history");
    if (!h) { setTimeout(() => { historyLoading = false; loadHistory(); }, 1000); return; }
    const series = new Map();
    for (const se of h.series) series.set(id(se), se);
    hist = {recorded: h.recorded, times: h.times, series: series};
    drawCharts();
  } catch (e) {
    setTimeout(() => { historyLoading = false; loadHistory(); }, 2000);
    return;
  }
  historyLoading = false;
}

// The newest point, from /api/state: appended when it follows the last one held.
function append(h) {
  if (!hist || historyLoading) return;
  if (h.recorded === hist.recorded) return;
  if (h.recorded !== hist.recorded + 1) { loadHistory(); return; }  // missed points
  const n = hist.times.length;
  hist.times.push(h.last_ms);
  const seen = new Set();
  for (const p of h.last) {
    const k = id(p);
    if (!hist.series.has(k)) hist.series.set(k, newSeries(p, n));
    const se = hist.series.get(k);
    for (const f of FIELDS) se[f].push(p[f]);
    seen.add(k);
  }
  for (const [k, se] of hist.series) if (!seen.has(k)) for (const f of FIELDS) se[f].push(null);
  while (hist.times.length > h.capacity) {
    hist.times.shift();
    for (const se of hist.series.values()) for (const f of FIELDS) se[f].shift();
  }
  hist.recorded = h.recorded;
  drawCharts();
}

// One polyline per run of non-null values.
function path(times, values, x, y) {
  let d = "", pen = false;
  for (let i = 0; i < times.length; i++) {
    const v = values[i];
    if (v == null) { pen = false; continue; }
    d += (pen ? "L" : "M") + x(times[i]).toFixed(1) + " " + y(v).toFixed(1);
    pen = true;
  }
  return d;
}

function svg(times, lines, w, h, max, labels) {
  const end = times.length ? times[times.length - 1] : Date.now();
  const x = (t) => 30 + (w - 36) * (1 - (end - t) / SPAN_MS);
  const y = (v) => h - 14 - (h - 20) * Math.min(v / max, 1.05);
  let s = "<svg viewBox='0 0 " + w + " " + h + "' xmlns='http://www.w3.org/2000/svg'>";
  s += "<line x1='30' y1='" + (h - 14) + "' x2='" + (w - 6) + "' y2='" + (h - 14) + "' stroke='#ccd'/>";
  s += "<text x='0' y='10'>" + esc(labels.top) + "</text><text x='0' y='" + (h - 14) + "'>0</text>";
  if (labels.axis) {
    s += "<text x='30' y='" + (h - 2) + "'>-15 min</text><text x='" + (w / 2 - 10) + "' y='" + (h - 2) +
      "'>-7.5</text><text x='" + (w - 30) + "' y='" + (h - 2) + "'>now</text>";
  }
  for (const l of lines) {
    s += "<path d='" + path(times, l.values, x, y) + "' fill='none' stroke='" + l.color + "' stroke-width='1.6'" +
      (l.dash ? " stroke-dasharray='5 3'" : "") + "/>";
  }
  return s + "</svg>";
}

function drawCharts() {
  const out = [];
  for (const se of hist.series.values()) {
    let max = 0;
    for (const f of ["offered", "admitted", "limit", "shadow_dropped"])
      for (const v of se[f]) if (v != null && v > max) max = v;
    max = max > 0 ? max * 1.1 : 1;
    const title = se.bucket + " (" + se.scope + (se.zone ? " " + se.zone : "") + ")";
    out.push("<div class='chart' data-bucket='" + esc(se.bucket) + "'><h3>" + esc(title) + "</h3>" +
      svg(hist.times, [
        {values: se.offered, color: "#8a8f99"}, {values: se.admitted, color: "#1f9d55"},
        {values: se.limit, color: "#d0312d", dash: true}, {values: se.shadow_dropped, color: "#e08a00"},
      ], 440, 120, max, {top: max.toFixed(0) + " r/s"}) +
      svg(hist.times, [{values: se.ratio, color: "#2f6fd0"}], 440, 56, 1, {top: "ratio 1", axis: true}) +
      "</div>");
  }
  $("charts").innerHTML = out.length ? out.join("") : "<p class='note'>no history yet</p>";
}

// ---- the loop ----

async function poll() {
  try {
    const s = await getJSON("/api/state");
    if (s) {
      renderState(s);
      pollMs = Math.max(1000, s.interval_ms);
      append(s.history);
      $("status").textContent = "live";
      $("status").className = "pill live";
    }
  } catch (e) {
    $("status").textContent = "no answer from the controller";
    $("status").className = "pill down";
  }
  setTimeout(poll, pollMs);
}

poll();
loadHistory();
