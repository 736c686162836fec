// elastic-cache dashboard: polls the coordinator's admin API once a second and redraws.
// Vanilla JavaScript, no dependencies, nothing fetched from another host. Ring tokens go
// up to 2^64 and lose precision as JavaScript numbers, so only the server's `position`
// fractions are used for drawing.
"use strict";

(function () {
  const POLL_MS = 1000;
  const FETCH_TIMEOUT_MS = 4000; // a poll not answered by then counts as no answer
  const MAX_WINDOW_S = 600; // the charts show up to the last 10 minutes
  const MIN_WINDOW_S = 60; // and at least the last minute
  const HIT_SMOOTH_S = 10; // hit rate over a sliding window of this many seconds
  const PALETTE = [
    "#2f6fde", "#f0a23b", "#2e9d5b", "#c2417b", "#7b4fc9",
    "#1fa3a3", "#d9534f", "#8a9a2b", "#5b6b7f", "#b5651d",
  ];
  const SVG = "http://www.w3.org/2000/svg";

  let samples = [];
  let lastSampleT = 0;
  let lastEventSeq = null;

  // -- helpers ------------------------------------------------------------------------

  const $ = (sel) => document.querySelector(sel);

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") node.className = v;
      else if (k === "style") node.setAttribute("style", v);
      else node.setAttribute(k, v);
    }
    for (const child of children) {
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function svg(tag, attrs, text) {
    const node = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function colorOf(nodeId) {
    // The palette for the first ten node numbers; past them a hue by the golden angle,
    // so node-11 is not node-1's colour (neighbours on the ring merged into one arc).
    const m = /(\d+)$/.exec(nodeId || "");
    const i = m ? parseInt(m[1], 10) - 1 : [...(nodeId || "")].reduce((a, c) => a + c.charCodeAt(0), 0);
    if (i >= 0 && i < PALETTE.length) return PALETTE[i];
    return `hsl(${Math.round((i * 137.508) % 360)}, 58%, 46%)`;
  }

  function fmtInt(n) {
    return n == null ? "–" : Math.round(n).toLocaleString("en-US");
  }

  function fmtBytes(n) {
    if (n == null) return "–";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (Math.abs(n) >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return (i === 0 ? n.toFixed(0) : n.toFixed(1)) + " " + units[i];
  }

  function fmtPct(x, digits) {
    return x == null ? "–" : (100 * x).toFixed(digits == null ? 1 : digits) + "%";
  }

  function fmtTime(t) {
    const d = new Date(t * 1000);
    return d.toTimeString().slice(0, 8);
  }

  function fmtSeconds(s) {
    if (s == null) return "–";
    if (s < 1) return Math.round(s * 1000) + " ms";
    if (s < 60) return s.toFixed(1) + " s";
    return Math.floor(s / 60) + " min " + Math.round(s % 60) + " s";
  }

  function fmtCost(c) {
    return c == null ? "–" : "$" + c.toFixed(c < 1 ? 4 : 2);
  }

  // -- header -------------------------------------------------------------------------

  function renderKpis(view) {
    $("#kpi-nodes").textContent = view.nodes.length + (view.launching.length ? " +" + view.launching.length : "");
    $("#kpi-epoch").textContent = view.epoch;
    $("#kpi-records").textContent = fmtInt(view.nodes.reduce((a, n) => a + n.records, 0));
    // With copies every record is counted on each node that holds it: say so.
    const copies = (view.replication && view.replication.factor) || 1;
    $("#kpi-records-label").textContent = copies > 1 ? `records (${copies} copies each)` : "records";
    $("#kpi-rate").textContent = view.request_rate.toFixed(1);
    $("#kpi-hit").textContent = fmtPct(view.hit_rate);
    $("#kpi-cost").textContent = fmtCost(view.cost_per_hour);
    const sc = view.scaler || {};
    $("#footer-scaler").textContent =
      "scaler " + (sc.enabled ? "on" : "off") + " · max " + sc.max_nodes + " nodes · on_full=" +
      sc.on_full + " · prices " + (view.price_region || "?") +
      (view.price_source ? " (" + view.price_source + ")" : "") + " · " +
      copiesText(view.replication) + bootstrapText(view.bootstrap) + hotText(view.read_through) +
      watchText(view.watch);
  }

  function watchText(watch) {
    if (!watch) return "";
    return "watchers " + fmtInt(watch.watchers) + " (" + fmtInt(watch.published) + " changes sent" +
      (watch.cut_offs ? ", " + fmtInt(watch.cut_offs) + " cut off" : "") + ")";
  }

  function copiesText(rep) {
    if (!rep || rep.factor <= 1) return "";
    const short = rep.under_replicated
      ? rep.under_replicated + " of " + rep.buckets + " ranges short of copies" +
        (rep.repairing ? ", repairing" : "")
      : "every range has its copies";
    const where = rep.placement === "primaries"
      ? ", primaries " + (rep.primaries || []).join(", ")
      : "";
    return "copies " + rep.factor + " (" + short + where + ") · ";
  }

  function hotText(rt) {
    const hot = rt && rt.hot;
    if (!hot || !hot.hits) return "";
    return "hot answers " + fmtInt(hot.hits) + " hits, " + fmtBytes(hot.bytes) + " · ";
  }

  function bootstrapText(boot) {
    if (!boot || boot.policy !== "two-phase") return "";
    return "imbalance " + boot.imbalance.toFixed(3) + (boot.balancing ? ", balancing" : "") + " · ";
  }

  // -- ring ---------------------------------------------------------------------------

  function point(frac, r) {
    const a = frac * 2 * Math.PI - Math.PI / 2; // token 0 at the top, clockwise
    return [r * Math.cos(a), r * Math.sin(a)];
  }

  function arcPath(from, to, r) {
    // Clockwise arc from fraction `from` to fraction `to` (wrapping past 1).
    let span = to - from;
    if (span <= 0) span += 1;
    if (span >= 0.9999) {
      const [x0, y0] = point(from, r);
      const [x1, y1] = point(from + 0.5, r);
      return `M ${x0} ${y0} A ${r} ${r} 0 1 1 ${x1} ${y1} A ${r} ${r} 0 1 1 ${x0} ${y0}`;
    }
    const [x0, y0] = point(from, r);
    const [x1, y1] = point(from + span, r);
    return `M ${x0} ${y0} A ${r} ${r} 0 ${span > 0.5 ? 1 : 0} 1 ${x1} ${y1}`;
  }

  function renderRing(view) {
    const ring = $("#ring");
    ring.replaceChildren();
    const buckets = view.buckets;
    const R = 92;
    ring.append(svg("circle", { cx: 0, cy: 0, r: R, fill: "none", stroke: "#edf1f5", "stroke-width": 22 }));
    buckets.forEach((b, i) => {
      const prev = buckets[(i - 1 + buckets.length) % buckets.length];
      const from = buckets.length === 1 ? b.position : prev.position;
      const path = svg("path", {
        d: arcPath(from, b.position, R),
        fill: "none",
        stroke: colorOf(b.node),
        "stroke-width": 22,
        "data-node": b.node,
      });
      path.append(svg("title", {}, `${b.node}: bucket at ${(100 * b.position).toFixed(2)}% of the ring`));
      ring.append(path);
      const [x0, y0] = point(b.position, R - 13);
      const [x1, y1] = point(b.position, R + 13);
      ring.append(svg("line", { x1: x0, y1: y0, x2: x1, y2: y1, stroke: "#fff", "stroke-width": 1.5 }));
    });
    for (const m of view.migrations) {
      if (m.state !== "running") continue;
      const path = svg("path", {
        d: arcPath(m.lo_position, m.hi_position, R + 17),
        class: "moving",
        stroke: colorOf(m.destination),
      });
      path.append(svg("title", {}, `moving to ${m.destination}`));
      ring.append(path);
    }
    ring.append(svg("text", { x: 0, y: -4, class: "center" }, String(view.nodes.length)));
    ring.append(svg("text", { x: 0, y: 12, class: "label" }, view.nodes.length === 1 ? "node" : "nodes"));
    ring.append(svg("text", { x: 0, y: 26, class: "label" }, `${buckets.length} bucket${buckets.length === 1 ? "" : "s"}`));
    $("#ring-caption").textContent = `epoch ${view.epoch} · ${view.hash}`;
    $("#ring-legend").replaceChildren(...view.nodes.map((n) =>
      el("li", { "data-node": n.id },
        el("span", { class: "swatch", style: `background:${colorOf(n.id)}` }), n.id,
        el("span", { class: "share", title: "share of the ring" }, fmtPct(n.share)))));
  }

  // -- nodes --------------------------------------------------------------------------

  function fillBar(n) {
    const cap = n.capacity || 1;
    const fill = Math.min(1, n.used / cap);
    const t = n.threshold == null ? null : Math.min(1, n.threshold / cap);
    const bar = el("div", { class: "bar", title: `${fmtInt(n.used)} of ${fmtInt(cap)}` });
    bar.append(el("div", { class: "fill", style: `width:${(100 * fill).toFixed(2)}%;background:${colorOf(n.id)}` }));
    if (t != null) bar.append(el("div", { class: "mark", style: `left:calc(${(100 * t).toFixed(2)}% - 1px)`, title: "threshold T" }));
    bar.append(el("span", { class: "pct" }, fmtPct(n.fill)));
    return bar;
  }

  // A node whose cold tier refuses writes (full disk, S3 down): demotion is paused.
  function coldTag(n) {
    if (!n.cold || !n.cold.demotion_paused) return "";
    const refuse = n.cold.on_cold_full !== "evict";
    const title = `${n.cold.tier}: ${n.cold.demotion_error || "a write failed"}; ` +
      (refuse ? "writes that need room get 507 until a retry succeeds" : "the node evicts meanwhile");
    return el("span", { class: "state coldfull", title }, refuse ? "cold tier full · 507" : "cold tier full · evicting");
  }

  function renderNodes(view) {
    const body = $("#nodes tbody");
    const rows = [];
    for (const n of view.nodes) {
      const cap = n.capacity || 1;
      const lookups = n.hits + n.misses;
      const over = n.threshold != null && n.used > n.threshold;
      // A node that stopped answering is suspect (its figures are from its last answer).
      const state = n.suspect ? "suspect" : n.state;
      const stateTitle = n.suspect
        ? "not answering: its keys answer 503 (reads go to a copy) until it does or is declared dead; figures as of its last answer"
        : "";
      const tr = el(
        "tr",
        { "data-node": n.id, "data-state": state, class: over ? "over" : "" },
        el("td", {}, el("span", { class: "swatch", style: `background:${colorOf(n.id)}` }), n.id),
        el("td", { class: "muted" }, n.address),
        el("td", {}, n.index || "–"),
        el("td", { class: "num" }, fmtInt(n.records)),
        el("td", { class: "num" }, fmtBytes(n.bytes)),
        el("td", { class: "bar-col" }, fillBar(n)),
        el("td", { class: "num", title: n.threshold == null ? "" : `${fmtInt(n.threshold)} of ${fmtInt(cap)}` },
          n.threshold == null ? "–" : fmtPct(n.threshold / cap, 0)),
        el("td", { class: "num" }, lookups ? fmtPct(n.hits / lookups) : "–"),
        el("td", {}, el("span", { class: "state " + state, title: stateTitle }, state), coldTag(n)),
      );
      rows.push(tr);
    }
    for (const l of view.launches_in_flight || []) {
      rows.push(el(
        "tr",
        { "data-node": l.node, "data-state": "launching", class: "launching" },
        el("td", {}, el("span", { class: "swatch", style: `background:${colorOf(l.node)}` }), l.node),
        el("td", {}, "starting…"),
        el("td", {}, "–"), el("td", { class: "num" }, "–"), el("td", { class: "num" }, "–"),
        el("td", { class: "bar-col" }, el("div", { class: "progress indeterminate" }, el("div", {}))),
        el("td", { class: "num" }, "–"), el("td", { class: "num" }, "–"),
        el("td", {}, el("span", { class: "state launching" }, `launching ${fmtSeconds(l.seconds)}`)),
      ));
    }
    body.replaceChildren(...rows);
  }

  // -- namespaces ----------------------------------------------------------------------

  // A namespace's policy in a few words: what differs from the default.
  function policyText(p) {
    const words = [];
    if (p.durability && p.durability !== "memory") words.push(p.durability);
    if (p.default_ttl != null) words.push("ttl " + p.default_ttl + " s");
    if (p.max_ttl != null) words.push("max ttl " + p.max_ttl + " s");
    if (p.quota_records != null) words.push("quota " + fmtInt(p.quota_records) + " records");
    if (p.quota_bytes != null) words.push("quota " + fmtBytes(p.quota_bytes));
    if (p.on_full != null) words.push("on_full " + p.on_full);
    if (p.never_evict) words.push("never evicted");
    else if (p.evict_order) words.push("evict order " + p.evict_order);
    if (p.write_quorum != null) words.push("w " + p.write_quorum);
    return words.join(", ") || "–";
  }

  function renderNamespaces(view) {
    const spaces = (view.namespaces && view.namespaces.namespaces) || {};
    const rows = Object.entries(spaces).map(([name, ns]) => el(
      "tr",
      { "data-namespace": name },
      el("td", {}, name),
      el("td", { class: "muted prefixes" }, (ns.prefixes || []).join(" ") || "(the rest)"),
      el("td", { class: "num" }, fmtInt(ns.records)),
      el("td", { class: "num" }, fmtBytes(ns.bytes)),
      el("td", { class: "num" }, fmtPct(ns.hit_rate)),
      el("td", { class: "num" }, fmtInt(ns.evictions)),
      el("td", { class: "num" }, fmtInt(ns.refused || 0)),
      el("td", {}, policyText(ns.policy || {})),
    ));
    $("#namespaces tbody").replaceChildren(...rows);
  }

  // -- launches and migrations ---------------------------------------------------------

  function renderInflight(view) {
    const launches = (view.launches_in_flight || []).map((l) =>
      el("li", { "data-node": l.node },
        el("span", { class: "tag running" }, "launching"),
        `${l.node} · ${fmtSeconds(l.seconds)}`,
        el("div", { class: "progress indeterminate" }, el("div", {}))));
    $("#launches").replaceChildren(...launches);
    const running = view.migrations.filter((m) => m.state === "running");
    const finished = view.migrations.filter((m) => m.state !== "running").slice(-4).reverse();
    const items = [];
    for (const m of running) {
      const total = m.total || 0;
      const frac = total ? Math.min(1, m.sent / total) : 0;
      items.push(el("li", { "data-migration": m.id, "data-state": m.state },
        el("span", { class: "tag running" }, "moving"),
        `${m.source} → ${m.destination} (${m.kind}) · ${fmtInt(m.sent)} / ${fmtInt(total)} records · ${fmtSeconds(m.seconds)}`,
        el("div", { class: "progress" }, el("div", { style: `width:${(100 * frac).toFixed(1)}%` }))));
    }
    for (const m of finished) {
      const resumed = m.resumed_from
        ? ` · the source died: ${fmtInt(m.reused)} received records kept, the rest from ${m.resumed_from}`
        : "";
      const what = m.state === "done"
        ? `${fmtInt(m.records)} records (${fmtBytes(m.bytes)}) in ${fmtSeconds(m.seconds)}${resumed}`
        : m.state === "salvaged"
          ? `the source died; ${fmtInt(m.records)} records received were kept`
          : (m.error || "abandoned");
      items.push(el("li", { "data-migration": m.id, "data-state": m.state },
        el("span", { class: "tag " + m.state }, m.state),
        `${m.source} → ${m.destination} (${m.kind}) · ${what}`));
    }
    $("#migrations").replaceChildren(...items);
    $("#inflight-empty").hidden = launches.length + running.length > 0;
    $("#inflight-empty").textContent = finished.length ? "nothing in flight; recent migrations:" : "nothing in flight";
  }

  // -- events -------------------------------------------------------------------------

  function renderEvents(view) {
    const events = view.events;
    // A restarted coordinator numbers its events from 1 again: the newest one's time
    // tells its events from the last life's.
    const last = events.length ? events[events.length - 1] : null;
    const newest = last ? `${last.seq}@${last.time}` : "";
    if (newest === lastEventSeq) return;
    lastEventSeq = newest;
    const items = events.slice().reverse().map((e) =>
      el("li", { "data-kind": e.kind, "data-seq": e.seq },
        el("time", {}, fmtTime(e.time)),
        el("span", { class: "kind" }, e.kind.replace(/_/g, " ")),
        el("span", {}, e.message)));
    $("#events").replaceChildren(...items);
  }

  // -- charts -------------------------------------------------------------------------

  function chartWindow() {
    if (!samples.length) return MIN_WINDOW_S;
    const age = Date.now() / 1000 - samples[0].t;
    return Math.min(MAX_WINDOW_S, Math.max(MIN_WINDOW_S, Math.ceil(age / 60) * 60));
  }

  function fmtWindow(s) {
    return s % 60 === 0 ? `${s / 60} min` : `${s} s`;
  }

  function renderChart(target, points, { max, format }) {
    const WINDOW_S = chartWindow();
    const box = target.getBoundingClientRect();
    const W = Math.max(200, Math.round(box.width)), H = Math.max(80, Math.round(box.height));
    const left = 40, right = 6, top = 6, bottom = 16;
    target.setAttribute("viewBox", `0 0 ${W} ${H}`);
    target.replaceChildren();
    const now = Date.now() / 1000;
    const x = (t) => left + ((t - (now - WINDOW_S)) / WINDOW_S) * (W - left - right);
    const yMax = Math.max(max == null ? 0 : max, ...points.map((p) => p[1]), 1e-9);
    const y = (v) => H - bottom - (v / yMax) * (H - top - bottom);
    target.append(svg("line", { x1: left, y1: H - bottom, x2: W - right, y2: H - bottom, class: "axis" }));
    target.append(svg("line", { x1: left, y1: top, x2: left, y2: H - bottom, class: "axis" }));
    target.append(svg("text", { x: left - 4, y: top + 8, class: "tick", "text-anchor": "end" }, format(yMax)));
    target.append(svg("text", { x: left - 4, y: H - bottom, class: "tick", "text-anchor": "end" }, format(0)));
    target.append(svg("text", { x: left, y: H - 3, class: "tick" }, `-${fmtWindow(WINDOW_S)}`));
    target.append(svg("text", { x: W - right, y: H - 3, class: "tick", "text-anchor": "end" }, "now"));
    const shown = points.filter((p) => p[0] >= now - WINDOW_S);
    if (shown.length < 2) {
      target.append(svg("text", { x: (W + left) / 2, y: H / 2, class: "empty", "text-anchor": "middle" }, "waiting for data…"));
      return;
    }
    // A point marked as after a break (its third element) is not joined to the one
    // before: samples without data lie between them (no lookups at all), which a line
    // across would draw as a trend. Sparse samples (a slow poll) stay joined.
    const runs = [[shown[0]]];
    for (let i = 1; i < shown.length; i++) {
      if (shown[i][2]) runs.push([]);
      runs[runs.length - 1].push(shown[i]);
    }
    for (const run of runs) {
      if (run.length === 1) {
        target.append(svg("circle", { class: "series-dot", cx: x(run[0][0]).toFixed(1), cy: y(run[0][1]).toFixed(1), r: 2 }));
        continue;
      }
      const line = run.map((p) => `${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join(" ");
      const first = run[0], last = run[run.length - 1];
      target.append(svg("polygon", {
        class: "area",
        points: `${x(first[0]).toFixed(1)},${H - bottom} ${line} ${x(last[0]).toFixed(1)},${H - bottom}`,
      }));
      target.append(svg("polyline", { class: "series", points: line }));
    }
  }

  function renderCharts() {
    const rate = samples.filter((s) => s.requests_per_s != null).map((s) => [s.t, s.requests_per_s]);
    const hit = [];
    let hits = 0, misses = 0, j = 0, last = -1;
    for (let i = 0; i < samples.length; i++) {
      hits += samples[i].hits; misses += samples[i].misses;
      while (samples[j].t < samples[i].t - HIT_SMOOTH_S) { hits -= samples[j].hits; misses -= samples[j].misses; j++; }
      if (hits + misses > 0) {
        hit.push([samples[i].t, hits / (hits + misses), hit.length > 0 && last !== i - 1]);
        last = i;
      }
    }
    renderChart($("#chart-rate"), rate, { format: (v) => v >= 1000 ? (v / 1000).toFixed(1) + "k" : v.toFixed(0) });
    renderChart($("#chart-hit"), hit, { max: 1, format: (v) => (100 * v).toFixed(0) + "%" });
    const span = chartWindow();
    for (const w of document.querySelectorAll(".window")) {
      w.textContent = span === 60 ? "last minute" : `last ${span / 60} minutes`;
    }
  }

  // -- polling ------------------------------------------------------------------------

  // -- the cluster token ----------------------------------------------------------------
  // A cluster with a token answers its API only with "Authorization: Bearer TOKEN". The
  // page takes it from its address (/#token=TOKEN: a fragment is never sent to a server
  // nor logged by one), or asks once; it keeps it for this tab only (sessionStorage).

  const TOKEN_KEY = "ecache-token";
  let askedForToken = false;

  let badTokenInAddress = false;

  function takeTokenFromAddress() {
    const m = /(?:^#|&)token=([^&]+)/.exec(window.location.hash);
    if (m) {
      let token = null;
      try {
        token = decodeURIComponent(m[1]);
      } catch (e) {
        badTokenInAddress = true; // a malformed escape (a stray %): said in the status
      }
      if (token) {
        badTokenInAddress = false;
        sessionStorage.setItem(TOKEN_KEY, token);
      }
      history.replaceState(null, "", window.location.pathname + window.location.search);
    }
  }

  class Unauthorized extends Error {
    constructor(url, token) {
      super(url);
      this.token = token; // the token the refused request carried (null: none)
    }
  }

  function authHeaders(token) {
    return token ? { Authorization: `Bearer ${token}` } : {};
  }

  async function getJson(url) {
    const token = sessionStorage.getItem(TOKEN_KEY);
    // A coordinator that hangs (paused, overloaded) must not leave the page saying
    // "live" with its last figures: a request gives up after FETCH_TIMEOUT_MS.
    const abort = new AbortController();
    const timer = setTimeout(() => abort.abort(), FETCH_TIMEOUT_MS);
    try {
      const resp = await fetch(url, { cache: "no-store", headers: authHeaders(token), signal: abort.signal });
      if (resp.status === 401) throw new Unauthorized(url, token);
      if (!resp.ok) throw new Error(`${url}: ${resp.status}`);
      return await resp.json();
    } finally {
      clearTimeout(timer);
    }
  }

  // The footer's links to the raw API: with a token a plain link cannot send it (401),
  // so a click fetches with it and shows the answer in a new tab.
  function openRaw(event) {
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (!token) return; // no token: the plain link works
    event.preventDefault();
    const url = event.currentTarget.getAttribute("href");
    const tab = window.open("", "_blank");
    fetch(url, { cache: "no-store", headers: authHeaders(token) })
      .then((resp) => resp.blob())
      .then((blob) => {
        const shown = URL.createObjectURL(blob);
        if (tab) tab.location = shown; else window.location = shown;
        setTimeout(() => URL.revokeObjectURL(shown), 60_000); // the tab has it by then
      })
      .catch(() => { if (tab) tab.close(); });
  }

  async function tick() {
    const status = $("#status");
    try {
      const [view, history] = await Promise.all([
        getJson("/v1/cluster"),
        getJson(`/v1/cluster/history?since=${lastSampleT}`),
      ]);
      for (const s of history.samples) {
        if (s.t > lastSampleT) { samples.push(s); lastSampleT = s.t; }
      }
      const cutoff = Date.now() / 1000 - MAX_WINDOW_S - HIT_SMOOTH_S;
      while (samples.length && samples[0].t < cutoff) samples.shift();
      renderKpis(view);
      renderRing(view);
      renderNodes(view);
      renderNamespaces(view);
      renderInflight(view);
      renderEvents(view);
      renderCharts();
      status.className = "status live";
      status.textContent = "live · " + fmtTime(view.time);
      document.body.dataset.epoch = view.epoch;
    } catch (err) {
      status.className = "status down";
      if (err instanceof Unauthorized) {
        status.textContent = badTokenInAddress
          ? "the token in the address is malformed (a stray %?): open /#token=TOKEN again"
          : "this cluster needs its token (the one given to ecache up, or `ecache token --name NAME` for a deployed cluster)";
        if (err.token && sessionStorage.getItem(TOKEN_KEY) === err.token) {
          // The token kept was refused (a typo in the prompt, a rotated token): drop it
          // and ask again, once per refused token. One given meanwhile (/#token=...
          // while the request was out) is another: it stays.
          sessionStorage.removeItem(TOKEN_KEY);
          askedForToken = false;
        }
        if (!askedForToken) {
          askedForToken = true;
          const given = window.prompt(
            "This cluster needs its token: the one given to ecache up (--token, --token-file), " +
            "or what `ecache token --name NAME` prints for a deployed cluster:");
          if (given) sessionStorage.setItem(TOKEN_KEY, given.trim());
        }
      } else {
        status.textContent = "no answer from the coordinator; retrying";
      }
    } finally {
      setTimeout(tick, POLL_MS);
    }
  }

  for (const link of document.querySelectorAll("footer a[data-raw]")) {
    link.addEventListener("click", openRaw);
  }
  takeTokenFromAddress();
  // Opening /#token=TOKEN in this tab changes only the fragment: no reload, so the page
  // takes it from here too.
  window.addEventListener("hashchange", takeTokenFromAddress);
  tick();
})();
