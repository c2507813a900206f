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
  return { q: p.get("q") || "", owner: p.get("owner") || "", state: p.get("state") || "", offset: Number(p.get("offset") || 0) };
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
  const page = await getJson(`/api/pipelines?${query}`);
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
    main.replaceChildren(el("h1", {}, "Pipelines"), counts, form, body);
  } else {
    main.querySelector("ul.counts").replaceWith(counts);
    main.querySelector("#list-body").replaceWith(body);
  }
  const again = focusAfter || focused;
  if (again && document.getElementById(again)) document.getElementById(again).focus();
  const missing = (page.instances || []).filter((i) => !i.ok).map((i) => i.instance);
  setStatus(missing.length ? `instances not answering: ${missing.join(", ")}` : `${page.instances.length} instance(s), updated ${new Date().toLocaleTimeString()}`, missing.length > 0);
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
const measure = document.createElement("canvas").getContext("2d");
function labelWidth(text) {
  const size = parseFloat(getComputedStyle(document.body).fontSize) * 0.75;
  measure.font = `${size}px ${getComputedStyle(document.body).fontFamily}`;
  return measure.measureText(text).width + 8;
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
    el("h2", {}, "Executions"), executionsTable(view),
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
