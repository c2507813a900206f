// Sluice's operator page: the pipeline list (/) and one pipeline (/pipelines/ID), built on
// the HTTP API and refreshed by polling. Every value from the API goes into the page as
// text (never as HTML), and every state is written out in words with a symbol, so nothing
// depends on colour alone.
"use strict";

const REFRESH_MS = 3000;
const PAGE = 100;
const SYMBOLS = {
  waiting: "○", triggering: "▷", running: "▶", completed: "✔", failed: "✘",
  "validation-exhausted": "✘", "dry-run": "◌", cancelled: "■", stale: "⊗",
  excluded: "⊘", idle: "·", unconfigured: "?",
};
const STATES = Object.keys(SYMBOLS);
// States only the dependency graph shows: no execution for the date, an upstream no one knows.
Object.assign(SYMBOLS, { notStarted: "–", unknown: "?" });
const SVG_NS = "http://www.w3.org/2000/svg";

/** An element with attributes (on* keys are listeners) and children (strings become text). */
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

/** An SVG element, as el() makes HTML ones (no listeners). */
function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== undefined && v !== null && v !== false) node.setAttribute(k, String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

function stateBadge(state) {
  return el("span", { class: `state state-${state}` }, `${SYMBOLS[state] || "•"} ${state}`);
}

/** "in 4m 10s" / "2m 5s ago", to the second. */
function relative(iso, now) {
  const ms = new Date(iso).getTime() - now;
  let s = Math.round(Math.abs(ms) / 1000);
  const parts = [];
  for (const [unit, size] of [["d", 86400], ["h", 3600], ["m", 60], ["s", 1]]) {
    if (s >= size || (unit === "s" && parts.length === 0)) {
      parts.push(`${Math.floor(s / size)}${unit}`);
      s %= size;
    }
  }
  const text = parts.slice(0, 2).join(" ");
  return ms >= 0 ? `in ${text}` : `${text} ago`;
}

function clock(iso) {
  return new Date(iso).toISOString().replace("T", " ").slice(0, 19) + "Z";
}

/** A countdown that keeps itself current (see tick()). */
function countdown(iso) {
  return el("time", { datetime: iso, "data-countdown": "", title: clock(iso) }, relative(iso, Date.now()));
}

function tick() {
  const now = Date.now();
  for (const t of document.querySelectorAll("time[data-countdown]")) {
    t.textContent = relative(t.getAttribute("datetime"), now);
  }
}

// The API token, when the instance asks for one: kept for this tab only (sessionStorage).
const TOKEN_KEY = "sluice-api-token";

/** Thrown when the API wants a token: the page then shows the token form. */
class NeedsToken extends Error {}

async function getJson(path) {
  const headers = { accept: "application/json" };
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers.authorization = `Bearer ${token}`;
  const response = await fetch(path, { headers });
  const body = await response.json().catch(() => ({}));
  if (response.status === 401) throw new NeedsToken(token ? "that token was refused" : "this instance needs an API token");
  if (!response.ok) throw new Error(body.error || `HTTP ${response.status}`);
  return body;
}

/** A form for the API token (the page's data needs one on this instance). */
function tokenForm(why) {
  const input = el("input", { id: "token", type: "password", autocomplete: "off", required: "" });
  const form = el("form", { id: "token-form", class: "filters" },
    el("label", { for: "token" }, "API token", input),
    el("button", { type: "submit" }, "Use token"));
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, input.value.trim());
    refresh();
  });
  return [el("h1", {}, "Sign in"), el("p", { class: "error" }, `${why}.`), form];
}

function setStatus(text, isError) {
  const s = document.getElementById("status");
  s.textContent = text;
  s.className = isError ? "error" : "";
}

// ---- the list -------------------------------------------------------------------------

function listParams() {
  const p = new URLSearchParams(location.search);
  return { q: p.get("q") || "", owner: p.get("owner") || "", state: p.get("state") || "", offset: Number(p.get("offset") || 0), date: p.get("date") || "" };
}

function setListParams(next) {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(next)) if (v) p.set(k, v);
  history.replaceState(null, "", p.toString() ? `/?${p}` : "/");
}

async function renderList(main, focusAfter) {
  const params = listParams();
  const query = new URLSearchParams({ limit: PAGE, offset: params.offset });
  for (const k of ["q", "owner", "state"]) if (params[k]) query.set(k, params[k]);
  const [page, graph] = await Promise.all([
    getJson(`/api/pipelines?${query}`),
    getJson(`/api/graph${params.date ? `?date=${encodeURIComponent(params.date)}` : ""}`).catch((e) => ({ error: e })),
  ]);
  const update = ({ focus, ...change }) => {
    setListParams({ ...params, offset: 0, ...change });
    renderList(main, focus).catch(showError);
  };

  const counts = el("ul", { class: "counts", "aria-label": "Pipelines by state" });
  const all = Object.values(page.counts || {}).reduce((a, b) => a + b, 0);
  counts.append(el("li", {}, el("button", { type: "button", "aria-pressed": !params.state, onclick: () => update({ state: "", focus: "count-all" }), id: "count-all" }, `all ${all}`)));
  for (const [state, n] of Object.entries(page.counts || {})) {
    counts.append(el("li", {}, el("button", {
      type: "button", id: `count-${state}`, "aria-pressed": params.state === state,
      onclick: () => update({ state: params.state === state ? "" : state, focus: `count-${state}` }),
    }, `${SYMBOLS[state] || "•"} ${state} ${n}`)));
  }

  const q = el("input", { type: "search", id: "q", name: "q", value: params.q, placeholder: "part of the id" });
  const owner = el("input", { type: "text", id: "owner", name: "owner", value: params.owner });
  const state = el("select", { id: "state", name: "state" },
    el("option", { value: "" }, "any"),
    STATES.map((s) => el("option", { value: s, selected: params.state === s }, `${SYMBOLS[s]} ${s}`)));
  const form = el("form", { class: "filters", role: "search", onsubmit: (e) => {
    e.preventDefault();
    update({ q: q.value.trim(), owner: owner.value.trim(), state: state.value, focus: "apply" });
  } },
  el("label", { for: "q" }, "Name", q),
  el("label", { for: "owner" }, "Owner", owner),
  el("label", { for: "state" }, "State", state),
  el("button", { type: "submit", id: "apply" }, "Filter"));

  const rows = page.pipelines.map((p) => {
    const latest = p.executions[0];
    const stateName = latest ? latest.state : (p.configured ? "idle" : "unconfigured");
    return el("tr", { "data-pipeline": p.pipelineId },
      el("td", {}, el("a", { href: `/pipelines/${encodeURIComponent(p.pipelineId)}` }, p.pipelineId)),
      el("td", {}, p.owner || "—"),
      el("td", {}, stateBadge(stateName), p.dryRun ? el("span", { class: "muted" }, " (dry run)") : null),
      el("td", { class: "mono" }, latest ? latest.date : "—"),
      el("td", {}, latest && latest.attempt ? String(latest.attempt) : "—"),
      el("td", {}, p.nextTimer ? [`${p.nextTimer.kind} `, countdown(p.nextTimer.at)] : "—"));
  });
  const table = el("table", {},
    el("caption", { class: "muted" }, `${page.total} pipelines match`),
    el("thead", {}, el("tr", {}, ["Pipeline", "Owner", "State", "Date", "Attempt", "Next timer"].map((h) => el("th", { scope: "col" }, h)))),
    el("tbody", {}, rows.length ? rows : el("tr", {}, el("td", { colspan: 6 }, "No pipeline matches."))));

  const last = Math.min(params.offset + PAGE, page.total);
  const pager = el("nav", { class: "pager", "aria-label": "Pages" },
    el("button", { type: "button", id: "prev", disabled: params.offset === 0, onclick: () => update({ q: params.q, owner: params.owner, state: params.state, offset: Math.max(0, params.offset - PAGE), focus: "prev" }) }, "← Previous"),
    el("span", {}, page.total ? `${params.offset + 1}–${last} of ${page.total}` : "0 of 0"),
    el("button", { type: "button", id: "next", disabled: last >= page.total, onclick: () => update({ q: params.q, owner: params.owner, state: params.state, offset: params.offset + PAGE, focus: "next" }) }, "Next →"));

  const focused = document.activeElement && document.activeElement.id;
  // The form is drawn once per filter change, so a refresh never takes what is being typed.
  const body = el("div", { id: "list-body" }, table, pager);
  if (focusAfter || !main.querySelector("#list-body")) {
    main.replaceChildren(el("h1", {}, "Pipelines"),
      el("p", {}, el("a", { href: "#graph", id: "to-graph" }, "↓ Dependency graph")),
      counts, form, body, graphSection(graph, params, update));
  } else {
    main.querySelector("ul.counts").replaceWith(counts);
    main.querySelector("#list-body").replaceWith(body);
    const chooser = main.querySelector("#graph-date");
    // The date chooser is drawn again only when the dates offered change.
    if (!chooser || graph.error || chooser.dataset.dates !== (graph.dates || []).join()) main.querySelector("#graph").replaceWith(graphSection(graph, params, update));
    else main.querySelector("#graph-body").replaceWith(graphBody(graph));
  }
  const again = focusAfter || focused;
  if (again && document.getElementById(again)) document.getElementById(again).focus();
  const missing = (page.instances || []).filter((i) => !i.ok).map((i) => i.instance);
  setStatus(missing.length ? `instances not answering: ${missing.join(", ")}` : `${page.instances.length} instance(s), updated ${new Date().toLocaleTimeString()}`, missing.length > 0);
}

// ---- the dependency graph -------------------------------------------------------------

/** Text's width in pixels in the page's font at `size` px (and `weight`). */
const measure = document.createElement("canvas").getContext("2d");
function textWidth(text, size, weight) {
  measure.font = `${weight || 400} ${size}px ${getComputedStyle(document.body).fontFamily}`;
  return measure.measureText(text).width;
}

/** The colour family of a state (the text says the state; the colour only helps). */
function tone(state) {
  if (state === "completed") return "ok";
  if (["failed", "validation-exhausted", "stale"].includes(state)) return "bad";
  if (["waiting", "triggering"].includes(state)) return "warn";
  if (state === "running") return "run";
  return "none";
}

/** "gold waits for silver", "gold waits for silver and ref". */
function waitsFor(h) {
  const by = h.by.length > 1 ? `${h.by.slice(0, -1).join(", ")} and ${h.by[h.by.length - 1]}` : h.by[0];
  return `${h.pipelineId} (${h.state}) waits for ${by}`;
}

/** The graph's section on the list: a date chooser, the drawing, and what holds what back. */
function graphSection(graph, params, update) {
  const dates = graph.dates || [];
  const title = el("h2", { id: "graph-title" }, "Dependencies");
  if (graph.error || !graph.nodes.length) return el("section", { id: "graph", "aria-labelledby": "graph-title" }, title, graphBody(graph));
  const chooser = el("select", { id: "graph-date", name: "date", "data-dates": dates.join(), onchange: (e) => update({ ...params, date: e.target.value, focus: "graph-date" }) },
    dates.map((d) => el("option", { value: d, selected: d === graph.date }, d)));
  return el("section", { id: "graph", "aria-labelledby": "graph-title" }, title,
    el("form", { class: "filters", onsubmit: (e) => e.preventDefault() }, el("label", { for: "graph-date" }, "Execution date", chooser)),
    graphBody(graph));
}

function graphBody(graph) {
  if (graph.error) return el("p", { id: "graph-body", class: "error" }, `Could not load the graph: ${graph.error.message}`);
  if (!graph.nodes.length) return el("p", { id: "graph-body", class: "muted" }, "No pipeline declares dependsOn.");
  const held = graph.heldBack || [];
  return el("div", { id: "graph-body" },
    el("div", { class: "graph-scroll" }, drawGraph(graph)),
    held.length
      ? el("ul", { id: "held-back", class: "about", "aria-label": "Held back" }, held.map((h) => el("li", { "data-held": h.pipelineId }, waitsFor(h))))
      : el("p", { id: "held-back", class: "muted" }, `Nothing is held back by an upstream on ${graph.date}.`),
    graph.complete === false ? el("p", { class: "error" }, "Some instances did not answer: their pipelines are missing.") : null);
}

/**
 * The graph in columns by depth (sources left, downstreams right); within a column, each
 * node goes near the middle of its upstreams (fewer crossings). Every node links to its page
 * and writes its state out; an edge from an upstream holding its downstream back is red,
 * thick and dashed.
 */
function drawGraph(graph) {
  const columns = [];
  for (const n of graph.nodes) (columns[n.depth] = columns[n.depth] || []).push(n);
  const row = new Map();
  const ups = (id) => graph.edges.filter((e) => e.to === id).map((e) => row.get(e.from)).filter((r) => r !== undefined);
  for (const column of columns.filter(Boolean)) {
    const centre = (n) => { const r = ups(n.pipelineId); return r.length ? r.reduce((a, b) => a + b, 0) / r.length : Infinity; };
    column.sort((a, b) => centre(a) - centre(b) || (a.pipelineId < b.pipelineId ? -1 : 1));
    column.forEach((n, i) => row.set(n.pipelineId, i));
  }
  const size = 13, nodeH = 44, gapY = 18, gapX = 90, pad = 12;
  const nodeW = Math.max(150, ...graph.nodes.map((n) => Math.max(textWidth(n.pipelineId, size, 700), textWidth(`${SYMBOLS[n.state] || "•"} ${n.state}`, size - 1)) + 24));
  const at = new Map(graph.nodes.map((n) => [n.pipelineId, { x: pad + n.depth * (nodeW + gapX), y: pad + row.get(n.pipelineId) * (nodeH + gapY) }]));
  const width = pad * 2 + columns.length * nodeW + (columns.length - 1) * gapX;
  const height = pad * 2 + Math.max(...columns.filter(Boolean).map((c) => c.length)) * (nodeH + gapY) - gapY;
  const arrow = (id) => svg("marker", { id, viewBox: "0 0 10 10", refX: 9, refY: 5, markerUnits: "userSpaceOnUse", markerWidth: 11, markerHeight: 11, orient: "auto" }, svg("path", { d: "M0,0 L10,5 L0,10 z" }));
  const edges = graph.edges.map((e) => {
    const a = at.get(e.from), b = at.get(e.to);
    // Straight along its row through the columns it spans, then a curve in the last gap.
    const x1 = a.x + nodeW, y1 = a.y + nodeH / 2, x2 = b.x - 2, y2 = b.y + nodeH / 2, bend = b.x - gapX, mid = (bend + x2) / 2;
    return svg("path", { class: e.holding ? "edge holding" : "edge", "data-edge": `${e.from}→${e.to}`, "data-holding": String(e.holding),
      d: `M${x1},${y1} L${bend},${y1} C${mid},${y1} ${mid},${y2} ${x2},${y2}`, "marker-end": `url(#${e.holding ? "arrow-holding" : "arrow"})` },
    svg("title", {}, e.holding ? `${e.to} waits for ${e.from}` : `${e.to} depends on ${e.from}`));
  });
  const nodes = graph.nodes.map((n) => {
    const { x, y } = at.get(n.pipelineId);
    const label = `${n.pipelineId}: ${n.state}${n.executionDate && n.executionDate !== graph.date ? ` (${n.executionDate})` : ""}`;
    return svg("a", { href: `/pipelines/${encodeURIComponent(n.pipelineId)}`, class: `node tone-${tone(n.state)}`, "data-node": n.pipelineId, "data-state": n.state, "aria-label": label },
      svg("title", {}, label),
      svg("rect", { x, y, width: nodeW, height: nodeH, rx: 6 }),
      svg("text", { x: x + 12, y: y + 18, class: "node-id" }, n.pipelineId),
      svg("text", { x: x + 12, y: y + 35, class: "node-state" }, `${SYMBOLS[n.state] || "•"} ${n.state}`));
  });
  return svg("svg", { id: "graph-svg", role: "group", "aria-label": `Dependency graph for ${graph.date}`, width, height, viewBox: `0 0 ${width} ${height}` },
    svg("defs", {}, arrow("arrow"), arrow("arrow-holding")), edges, nodes);
}

// ---- one pipeline ---------------------------------------------------------------------

function rulesTable(view) {
  const rules = view.rules || [];
  if (!rules.length) return el("p", { class: "muted" }, "No validation rules.");
  const newest = (view.executions || []).slice().sort((a, b) => (a.date < b.date ? 1 : -1))[0];
  const results = (newest && newest.lastVerdict && newest.lastVerdict.results) || [];
  return el("table", { id: "rules" },
    el("caption", { class: "muted" }, newest ? `Latest results for ${newest.scheduleId}/${newest.date}` : "Not evaluated yet"),
    el("thead", {}, el("tr", {}, ["Rule", "Result", "Value seen", "Why"].map((h) => el("th", { scope: "col" }, h)))),
    el("tbody", {}, rules.map((rule, i) => {
      const r = results[i];
      return el("tr", { "data-rule": rule.key },
        el("td", {}, rule.sentence),
        el("td", {}, r ? el("span", { class: r.passed ? "pass" : "fail" }, r.passed ? "✔ passes" : "✘ fails") : el("span", { class: "muted" }, "— not evaluated")),
        el("td", { class: "mono" }, r && r.seen !== undefined ? JSON.stringify(r.seen) : "—"),
        el("td", {}, r && r.reason ? r.reason : ""));
    })));
}

function evaluatorsTable(view) {
  const evaluators = view.evaluators || [];
  if (!evaluators.length) return el("p", { class: "muted" }, "No evaluators: every sensor comes from a producer.");
  const now = Date.now();
  const rows = [];
  for (const e of evaluators) {
    const answers = e.answers.length ? e.answers : [null];
    for (const a of answers) {
      const expired = a && a.expiresAt && Date.parse(a.expiresAt) < now;
      const result = !a ? el("span", { class: "muted" }, "— not asked yet")
        : a.error ? el("span", { class: "fail" }, `✘ failed${a.failures > 1 ? ` (${a.failures} in a row)` : ""}`)
        : expired ? el("span", { class: "fail" }, "✘ expired")
        : el("span", { class: "pass" }, "✔ answered");
      rows.push(el("tr", { "data-evaluator": e.key },
        el("td", { class: "mono" }, e.key),
        el("td", {}, `${e.type}, every ${e.every}`),
        el("td", { class: "mono" }, a && a.scope ? a.scope : "—"),
        el("td", {}, result),
        el("td", {}, a ? relative(a.answeredAt, now) : "—"),
        el("td", {}, e.ttl ? `${e.ttl}${a && a.expiresAt ? (expired ? " (expired " : " (expires ") + relative(a.expiresAt, now) + ")" : ""}` : "none"),
        el("td", { class: "mono" }, a ? (a.error || JSON.stringify(a.data)) : "")));
    }
  }
  return el("table", { id: "evaluators" },
    el("thead", {}, el("tr", {}, ["Sensor", "Evaluator", "Date", "Answer", "Age", "TTL", "What it said"].map((h) => el("th", { scope: "col" }, h)))),
    el("tbody", {}, rows));
}

function executionsTable(view) {
  const executions = (view.executions || []).slice().sort((a, b) => (a.date < b.date ? 1 : -1));
  if (!executions.length) return el("p", { class: "muted" }, "No executions yet.");
  const timers = view.timers || [];
  return el("table", { id: "executions" },
    el("thead", {}, el("tr", {}, ["Execution", "State", "Attempt", "Run", "Next timers"].map((h) => el("th", { scope: "col" }, h)))),
    el("tbody", {}, executions.map((e) => {
      const phase = e.phase.phase;
      const state = (view.summary.executions.find((s) => s.date === e.date && s.scheduleId === e.scheduleId) || {}).state || phase;
      const mine = timers.filter((t) => t.date === e.date);
      return el("tr", { "data-execution": `${e.scheduleId}/${e.date}` },
        el("td", { class: "mono" }, `${e.scheduleId}/${e.date}`),
        el("td", {}, stateBadge(state), e.phase.reason ? el("div", { class: "muted" }, e.phase.reason) : null),
        el("td", {}, String(e.attempt)),
        el("td", { class: "mono" }, e.phase.runId || "—"),
        el("td", {}, mine.length ? el("ul", { class: "about" }, mine.map((t) => el("li", {}, `${t.kind} `, countdown(t.at)))) : "—"));
    })));
}

/** A label's width in pixels, in the timeline's font (0.75rem of the page's). */
function labelWidth(text) {
  return textWidth(text, parseFloat(getComputedStyle(document.body).fontSize) * 0.75) + 8;
}

/**
 * Rows for the timeline's labels, so that none overlaps another: each label (in time order)
 * takes the first row whose last label ends left of it. `items`: {x: 0..1 across the lane,
 * text}; `width`: the lane in pixels.
 */
function labelRows(items, width) {
  const ends = [];
  return items.map(({ x, text }) => {
    const w = labelWidth(text), left = x * width - w / 2;
    let row = ends.findIndex((end) => end + 6 <= left);
    if (row < 0) row = ends.push(0) - 1;
    ends[row] = left + w;
    return row;
  });
}

/** The lanes' width in pixels: main's content box (lanes are as wide). */
function laneWidth() {
  const main = document.getElementById("main");
  const style = getComputedStyle(main);
  return Math.max(320, main.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight));
}

const SLA_EVENTS = new Set(["SLA_WARNING", "SLA_BREACH", "SLA_MET", "SLA_AT_RISK", "SLA_RECOVERED", "RELATIVE_SLA_WARNING", "RELATIVE_SLA_BREACH"]);

/** One swimlane per execution date: its events from first to last (or now), SLA marks below. */
function timeline(view) {
  const events = view.recentEvents || [];
  const byDate = new Map();
  for (const e of events) {
    if (!e.date) continue;
    if (!byDate.has(e.date)) byDate.set(e.date, []);
    byDate.get(e.date).push(e);
  }
  if (!byDate.size) return el("p", { class: "muted" }, "No events of an execution yet.");
  const lanes = [];
  for (const [date, list] of [...byDate.entries()].sort((a, b) => (a[0] < b[0] ? 1 : -1))) {
    // An open execution's lane runs to now and shows the SLA deadlines still ahead.
    const state = (view.summary.executions.find((s) => s.date === date) || {}).state;
    const open = ["waiting", "triggering", "running"].includes(state);
    const slaTimers = open ? (view.timers || []).filter((t) => t.date === date && /sla/i.test(t.kind)) : [];
    const times = list.map((e) => new Date(e.timestamp).getTime()).concat(slaTimers.map((t) => new Date(t.at).getTime()));
    if (open) times.push(Date.now());
    const start = Math.min(...times), end = Math.max(...times), span = Math.max(end - start, 1);
    const x = (t) => ((new Date(t).getTime() - start) / span) * 0.88 + 0.06;
    // Every label gets a row where it overlaps no other (events in the same second included).
    const items = list.map((e) => ({ x: x(e.timestamp), text: e.type }))
      .concat(slaTimers.map((t) => ({ x: x(t.at), text: `${t.kind} due in 00:00:00` })));
    const rows = labelRows(items, laneWidth());
    const mark = (i, attrs, dot, ...label) => el("div", { ...attrs, style: `left:${(items[i].x * 100).toFixed(2)}%` },
      el("span", { class: "dot", "aria-hidden": "true" }, dot),
      el("span", { class: "label", style: `margin-top:${rows[i] * 1.3}rem` }, ...label));
    const marks = list.map((e, i) => mark(i, { class: `mark${SLA_EVENTS.has(e.type) ? " sla" : ""}`, "data-event": e.type },
      SLA_EVENTS.has(e.type) ? "◆" : "●",
      el("a", { href: `/api/pipelines/${encodeURIComponent(view.pipelineId)}/events/${encodeURIComponent(e.eventId)}`, title: `${e.message} (${clock(e.timestamp)}): raw JSON` }, e.type)));
    const due = slaTimers.map((t, i) => mark(list.length + i, { class: "mark sla", "data-timer": t.kind }, "◇", `${t.kind} due `, countdown(t.at)));
    const height = (Math.max(0, ...rows) + 1) * 1.3 + 2.2;
    lanes.push(el("section", { "aria-label": `Timeline of ${date}` },
      el("h3", { class: "mono" }, date),
      el("div", { class: "lane", style: `height:${height}rem`, role: "img", "aria-label": list.map((e) => `${e.type} at ${clock(e.timestamp)}`).join(", ") }, marks, due),
      el("div", { class: "lane-ends" }, el("span", {}, clock(new Date(start).toISOString())), el("span", {}, clock(new Date(end).toISOString()))),
      el("ol", { class: "about" }, list.map((e) => el("li", {},
        el("span", { class: "mono" }, clock(e.timestamp)), " ", el("strong", {}, e.type), ` ${e.message} `,
        el("a", { href: `/api/pipelines/${encodeURIComponent(view.pipelineId)}/events/${encodeURIComponent(e.eventId)}` }, "raw JSON"))))));
  }
  return el("div", { id: "timeline" }, lanes);
}

// ---- the run history against the SLA ----------------------------------------------------

/** "45m", "1h 5m", "2d 3h": a duration in seconds, to the minute (seconds under one). */
function span(seconds) {
  let s = Math.round(Math.abs(seconds));
  if (s < 60) return `${s}s`;
  const parts = [];
  for (const [unit, size] of [["d", 86400], ["h", 3600], ["m", 60]]) {
    if (s >= size) { parts.push(`${Math.floor(s / size)}${unit}`); s %= size; }
  }
  return parts.slice(0, 2).join(" ");
}

/**
 * Where in its date a moment falls, as the chart's axis reads: for a day, its time of day in
 * the schedule's timezone ("02:10", "+1d 06:00" the day after); for an hour, how long after
 * the hour began ("+0:25").
 */
function offsetLabel(seconds, hourly) {
  const sign = seconds < 0 ? "-" : "";
  const s = Math.round(Math.abs(seconds) / 60) * 60;
  const hm = (t) => `${String(Math.floor(t / 3600)).padStart(2, "0")}:${String(Math.floor((t % 3600) / 60)).padStart(2, "0")}`;
  if (hourly) return `${sign || "+"}${Math.floor(s / 3600)}:${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}`;
  const days = Math.floor(s / 86400);
  const time = hm(s % 86400);
  if (sign) return `-1d ${hm((86400 - (s % 86400)) % 86400)}`;
  return days ? `+${days}d ${time}` : time;
}

/** Seconds from a date's start to `iso`. */
function offsetOf(iso, dateStart) {
  return (new Date(iso).getTime() - new Date(dateStart).getTime()) / 1000;
}

/**
 * The pipeline's recent successful runs, one column per date (oldest left): a bar from the
 * trigger up to the completion, against the date's SLA deadline (the dashed line), in the
 * time of the date; a date still open with an SLA forecast gets a dashed bar up to the
 * projected completion, marked ◆. Above the line is late.
 */
function runChart(view) {
  const runs = (view.runHistory || []).slice().sort((a, b) => (a.date < b.date ? -1 : 1));
  const projection = view.slaProjection;
  if (!runs.length && !projection) return el("p", { class: "muted", id: "run-chart" }, "No successful run on record yet.");
  const hourly = (runs[0] || projection).date.length > 10;
  const columns = runs.map((r) => ({ date: r.date, run: r, deadline: r.deadline && offsetOf(r.deadline, r.dateStart) }));
  if (projection) {
    const p = projection;
    const column = columns.find((c) => c.date === p.date) || columns[columns.push({ date: p.date }) - 1];
    Object.assign(column, { projection: p, deadline: offsetOf(p.deadline, p.dateStart) });
  }
  // The time axis: every trigger, completion, deadline and projection, in whole ticks.
  const values = columns.flatMap((c) => [c.deadline,
    ...(c.run ? [c.run.triggeredAfter, c.run.triggeredAfter + c.run.duration] : []),
    ...(c.projection ? [offsetOf(c.projection.triggeredAt || c.projection.usualTriggerAt, c.projection.dateStart), offsetOf(c.projection.projectedCompletion, c.projection.dateStart)] : [])])
    .filter((v) => typeof v === "number");
  let lo = Math.min(...values), hi = Math.max(...values);
  const step = [60, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800].find((t) => (hi - lo) / t <= 5) || 604800;
  lo = Math.floor(lo / step) * step;
  hi = Math.max(Math.ceil(hi / step) * step, lo + step);

  const W = 720, H = 260, left = 74, right = 170, top = 26, bottom = 34;
  const plotW = W - left - right, plotH = H - top - bottom;
  const y = (v) => top + plotH - ((v - lo) / (hi - lo)) * plotH;
  const colW = plotW / columns.length, barW = Math.min(26, colW * 0.6);
  const cx = (i) => left + colW * (i + 0.5);
  const nodes = [];
  for (let t = lo; t <= hi; t += step) {
    nodes.push(svg("line", { class: "grid", x1: left, x2: left + plotW, y1: y(t), y2: y(t) }),
      svg("text", { class: "axis", x: left - 6, y: y(t) + 4, "text-anchor": "end" }, offsetLabel(t, hourly)));
  }
  const every = Math.ceil(columns.length / Math.max(1, Math.floor(plotW / (hourly ? 78 : 48))));
  const dateLabel = (d) => (hourly ? `${d.slice(5, 10)} ${d.slice(11)}h` : d.slice(5));
  columns.forEach((c, i) => {
    if (i % every === 0 || i === columns.length - 1) nodes.push(svg("text", { class: "axis", x: cx(i), y: H - bottom + 16, "text-anchor": "middle" }, dateLabel(c.date)));
  });
  // The SLA deadline: a dashed step line over the columns that have one.
  const withDeadline = columns.map((c, i) => [c, i]).filter(([c]) => typeof c.deadline === "number");
  if (withDeadline.length) {
    const d = withDeadline.map(([c, i], k) => `${k ? "L" : "M"}${cx(i) - colW / 2},${y(c.deadline)} L${cx(i) + colW / 2},${y(c.deadline)}`).join(" ");
    const [lastColumn] = withDeadline[withDeadline.length - 1];
    nodes.push(svg("path", { class: "sla-line", d, "data-sla": offsetLabel(lastColumn.deadline, hourly) }, svg("title", {}, "SLA deadline")),
      svg("text", { class: "sla-label", x: left + plotW + 6, y: y(lastColumn.deadline) + 4 }, `SLA ${offsetLabel(lastColumn.deadline, hourly)}`));
  }
  columns.forEach((c, i) => {
    if (!c.run) return;
    const r = c.run, done = r.triggeredAfter + r.duration;
    const met = typeof c.deadline === "number" ? done <= c.deadline : null;
    const barTop = y(done), height = Math.max(3, y(r.triggeredAfter) - y(done));
    const verdict = met === null ? "no SLA deadline" : met ? `${span(c.deadline - done)} before the SLA deadline` : `${span(done - c.deadline)} after the SLA deadline`;
    nodes.push(svg("g", { class: `run ${met === null ? "" : met ? "met" : "late"}`, "data-run": r.date, "data-met": met === null ? "" : String(met) },
      svg("title", {}, `${r.date}: triggered ${offsetLabel(r.triggeredAfter, hourly)}, ran ${span(r.duration)}, completed ${offsetLabel(done, hourly)}, ${verdict}`),
      svg("rect", { x: cx(i) - barW / 2, y: barTop - (height === 3 ? 1.5 : 0), width: barW, height }),
      met === null ? null : svg("text", { class: "verdict", x: cx(i), y: barTop - 5, "text-anchor": "middle" }, met ? "✔" : "✘")));
  });
  let caption = null;
  if (projection) {
    const i = columns.findIndex((c) => c.projection);
    const p = projection, at = offsetOf(p.projectedCompletion, p.dateStart);
    const from = offsetOf(p.triggeredAt || p.usualTriggerAt, p.dateStart);
    const risk = p.type === "SLA_AT_RISK";
    const text = `projected ${offsetLabel(at, hourly)}, ${span(p.marginSeconds)} ${p.marginSeconds < 0 ? "late" : "early"}`;
    // The label (two lines) beside its marker, clear of the SLA label.
    const deadline = columns[i].deadline, x = cx(i);
    const ly = typeof deadline !== "number" ? y(at) + 4 : at > deadline ? Math.min(y(at) + 4, y(deadline) - 24) : Math.max(y(at) + 4, y(deadline) + 20);
    nodes.push(svg("g", { class: `projection ${risk ? "at-risk" : "recovered"}`, "data-projection": p.type },
      svg("title", {}, `${p.type} for ${p.date}: ${text} (from ${p.triggeredAt ? "its trigger" : "the usual trigger time"} ${offsetLabel(from, hourly)})`),
      svg("rect", { x: x - barW / 2, y: Math.min(y(at), y(from)), width: barW, height: Math.max(3, Math.abs(y(from) - y(at))) }),
      svg("path", { class: "diamond", d: `M${x},${y(at) - 7} L${x + 7},${y(at)} L${x},${y(at) + 7} L${x - 7},${y(at)} z` }),
      svg("text", { class: "projection-label", x: left + plotW + 6, y: ly },
        svg("tspan", {}, `◆ projected ${offsetLabel(at, hourly)}`),
        svg("tspan", { x: left + plotW + 18, dy: 15 }, `${span(p.marginSeconds)} ${p.marginSeconds < 0 ? "late" : "early"}`))));
    caption = `${p.type} for ${p.date}: ${text} against the SLA deadline ${clock(p.deadline)}.`;
  }
  const late = columns.filter((c) => c.run && typeof c.deadline === "number" && c.run.triggeredAfter + c.run.duration > c.deadline).length;
  const summary = `${runs.length} run(s) on record${withDeadline.length ? `, ${late} completed after their SLA deadline` : ", no SLA deadline configured"}.`;
  const tz = (view.config && view.config.schedule && view.config.schedule.timezone) || "UTC";
  return el("figure", { id: "run-chart", class: "chart" },
    svg("svg", { role: "img", "aria-label": `${summary}${caption ? ` ${caption}` : ""}`, viewBox: `0 0 ${W} ${H}`, width: W, height: H }, nodes),
    el("figcaption", { class: "muted" },
      `Each bar is a date's first successful run, from its trigger up to its completion (✔ before the SLA deadline, ✘ after), ${hourly ? "in time after the start of its hour" : `in time of day (${tz}; +1d is the day after the date)`}; the dashed line is the SLA deadline; above it is late. ${summary}`,
      caption ? el("strong", { class: projection.type === "SLA_AT_RISK" ? "fail" : "" }, ` ${caption}`) : null),
    runs.length ? el("details", {}, el("summary", {}, "The runs as a table"), runsTable(runs, hourly)) : null);
}

function runsTable(runs, hourly) {
  return el("table", { id: "runs" },
    el("thead", {}, el("tr", {}, ["Date", "Triggered", "Took", "Completed", "SLA deadline", "Margin"].map((h) => el("th", { scope: "col" }, h)))),
    el("tbody", {}, runs.slice().reverse().map((r) => {
      const margin = r.deadline ? offsetOf(r.deadline, r.completedAt) : null;
      return el("tr", {},
        el("td", { class: "mono" }, r.date),
        el("td", { class: "mono", title: clock(r.triggeredAt) }, offsetLabel(r.triggeredAfter, hourly)),
        el("td", {}, span(r.duration)),
        el("td", { class: "mono", title: clock(r.completedAt) }, offsetLabel(r.triggeredAfter + r.duration, hourly)),
        el("td", { class: "mono" }, r.deadline ? offsetLabel(offsetOf(r.deadline, r.dateStart), hourly) : "—"),
        el("td", {}, margin === null ? "—" : el("span", { class: margin >= 0 ? "pass" : "fail" }, margin >= 0 ? `✔ ${span(margin)} early` : `✘ ${span(margin)} late`)));
    })));
}

async function renderPipeline(main, id) {
  const view = await getJson(`/api/pipelines/${encodeURIComponent(id)}`);
  const s = view.summary;
  const latest = s.executions[0];
  const focused = document.activeElement && document.activeElement.id;
  main.replaceChildren(
    el("p", {}, el("a", { href: "/", id: "back" }, "← All pipelines")),
    el("h1", {}, id, " ", stateBadge(latest ? latest.state : (s.configured ? "idle" : "unconfigured"))),
    el("p", { class: "muted" }, `owner ${s.owner || "—"} · partition ${view.partition} · served by `, el("span", { id: "served-by" }, view.servedBy), s.dryRun ? " · dry run" : ""),
    el("h2", {}, "What it does"),
    view.about ? el("ul", { class: "about", id: "about" }, view.about.map((t) => el("li", {}, t))) : el("p", { class: "muted" }, "No config has arrived."),
    el("h2", {}, "Rules"), rulesTable(view),
    el("h2", {}, "Evaluators"), evaluatorsTable(view),
    el("h2", {}, "Executions"), executionsTable(view),
    el("h2", {}, "Run history and SLA"), runChart(view),
    el("h2", {}, "Timeline"), timeline(view));
  if (focused && document.getElementById(focused)) document.getElementById(focused).focus();
  setStatus(`updated ${new Date().toLocaleTimeString()}`, false);
}

// ---- wiring ---------------------------------------------------------------------------

function showError(e) {
  setStatus(`could not load: ${e.message}`, true);
}

async function refresh() {
  const main = document.getElementById("main");
  try {
    if (location.pathname.startsWith("/pipelines/")) {
      await renderPipeline(main, decodeURIComponent(location.pathname.slice("/pipelines/".length)));
    } else {
      await renderList(main);
    }
  } catch (e) {
    if (e instanceof NeedsToken) {
      // Not while someone is typing a token in.
      if (!document.getElementById("token-form")) main.replaceChildren(...tokenForm(e.message));
      setStatus(e.message, true);
      return;
    }
    showError(e);
    if (!main.querySelector("h1")) main.replaceChildren(el("p", { class: "error" }, `Could not load: ${e.message}`));
  }
}

refresh();
setInterval(refresh, REFRESH_MS);
setInterval(tick, 1000);
