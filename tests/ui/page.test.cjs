// The operator page in headless Chromium (driven by playwright-core), against a real
// processor on the real broker. tests/ui.rs starts the processor with --http and runs this
// with the environment below; records are produced with the real `sluice` command line.
//
//   SLUICE_UI_URL   the processor's HTTP address      SLUICE_BIN      the sluice binary
//   SLUICE_BROKERS  the broker                        SLUICE_TOPIC_PREFIX  the test's topics
//   SLUICE_SCREENSHOTS  where screenshots go          SLUICE_CHROMIUM  the browser (/usr/bin/chromium)
//   SLUICE_UI_CHECK  which check: `live` (one instance, pipelines moving) or `instances`
//                    (two instances; the page is served by the one that does not own
//                    ui-gold, SLUICE_UI_SERVING names it), or `token` (an instance with
//                    API tokens; SLUICE_UI_TOKEN is one), or `graph` (bronze → silver → gold
//                    and ref → gold on SLUICE_UI_DAY, silver waiting; an hourly pipeline whose
//                    run history holds the dates SLUICE_UI_RUNS, with an SLA_AT_RISK forecast)
"use strict";

const { chromium } = require("playwright-core");
const { execFileSync } = require("node:child_process");
const assert = require("node:assert/strict");
const path = require("node:path");

const env = process.env;
const base = env.SLUICE_UI_URL;
const shots = env.SLUICE_SCREENSHOTS;
const day = new Date().toISOString().slice(0, 10);
const WAIT = { timeout: 30000 };

function sluice(...args) {
  execFileSync(env.SLUICE_BIN, args, { env, stdio: ["ignore", "ignore", "inherit"] });
}

function step(name) {
  console.log(`step: ${name}`);
}

// The timeline's labels, events in the same second included, never cover one another.
async function noLabelsOverlap(page) {
  const boxes = await page.locator("#timeline .lane .label").evaluateAll((labels) =>
    labels.map((l) => { const r = l.getBoundingClientRect(); return { text: l.innerText, left: r.left, right: r.right, top: r.top, bottom: r.bottom }; }));
  assert.ok(boxes.length >= 3, `a timeline with several events: ${JSON.stringify(boxes)}`);
  for (let i = 0; i < boxes.length; i++) {
    for (let j = i + 1; j < boxes.length; j++) {
      const [a, b] = [boxes[i], boxes[j]];
      const apart = a.right <= b.left || b.right <= a.left || a.bottom <= b.top || b.bottom <= a.top;
      assert.ok(apart, `timeline labels overlap: ${JSON.stringify(a)} and ${JSON.stringify(b)}`);
    }
  }
}

// One instance, pipelines moving on screen as records arrive.
async function live(page) {
  const row = (id) => page.locator(`tr[data-pipeline="${id}"]`);

  step("the list shows both pipelines, idle");
  await page.goto(`${base}/`);
  await row("ui-gold").locator(".state-idle").waitFor(WAIT);
  await row("ui-late").locator(".state-idle").waitFor(WAIT);

  step("a trigger with a failing rule: waiting, without a reload");
  sluice("sensor", "put", "ui-gold", "row-count", "count=10", "--date", day);
  sluice("sensor", "put", "ui-gold", "upstream", "status=ready", "--date", day);
  await row("ui-gold").locator(".state-waiting").waitFor(WAIT);
  assert.match(await row("ui-gold").locator(".state").innerText(), /waiting/, "the state is written out, not only coloured");

  step("by keyboard to the pipeline page, where the failing rule says why");
  await row("ui-gold").locator("a").focus();
  await page.keyboard.press("Enter");
  await page.waitForURL(/\/pipelines\/ui-gold$/, WAIT);
  const rule = page.locator('#rules tr[data-rule="row-count"]');
  await rule.getByText("count is 10 but must be >= 1000").waitFor(WAIT);
  assert.match(await rule.innerText(), /row-count\.count is at least 1000/);
  assert.match(await rule.innerText(), /✘ fails/);
  await page.locator('#executions').getByText(/evaluate in/).waitFor(WAIT);
  await page.screenshot({ path: path.join(shots, "pipeline-waiting.png"), fullPage: true });

  step("the fixing sensor: the job runs, the page follows to completed");
  sluice("sensor", "put", "ui-gold", "row-count", "count=5000", "--date", day);
  await page.locator("h1 .state-completed").waitFor(WAIT);
  await page.locator('#timeline [data-event="JOB_COMPLETED"]').waitFor(WAIT);
  assert.match(await rule.innerText(), /✔ passes/);
  await noLabelsOverlap(page);
  await page.screenshot({ path: path.join(shots, "pipeline-completed.png"), fullPage: true });

  step("an SLA breach shows on the timeline, and links to its raw JSON");
  sluice("sensor", "put", "ui-late", "upstream", "status=ready", "--date", day);
  await page.goto(`${base}/pipelines/ui-late`);
  const breach = page.locator('#timeline [data-event="RELATIVE_SLA_BREACH"]');
  await breach.waitFor({ timeout: 60000 });
  const href = await breach.locator("a").getAttribute("href");
  const raw = await (await page.request.get(`${base}${href}`)).json();
  assert.equal(raw.type, "RELATIVE_SLA_BREACH");
  assert.equal(raw.pipelineId, "ui-late");
  step("the row count comes from an evaluator: its answer, age and TTL are shown");
  const evaluator = page.locator('#evaluators tr[data-evaluator="row-count"]');
  await evaluator.getByText("✔ answered").waitFor(WAIT);
  const said = await evaluator.innerText();
  assert.match(said, /http, every 1m/);
  assert.match(said, /\d+s ago/, "the answer's age");
  assert.match(said, /1h \(expires in 59m/, "its TTL and when it expires");
  assert.match(said, /"count":10/);
  await page.locator('#rules tr[data-rule="row-count"]').getByText("count is 10 but must be >= 1000").waitFor(WAIT);
  await page.screenshot({ path: path.join(shots, "pipeline-sla-breach.png"), fullPage: true });

  step("the list: counts by state, a filter typed and sent from the keyboard");
  await page.goto(`${base}/`);
  await page.locator("#count-completed").getByText("completed 1").waitFor(WAIT);
  await page.screenshot({ path: path.join(shots, "list.png"), fullPage: true });
  await page.locator("#q").focus();
  await page.keyboard.type("late");
  await page.keyboard.press("Enter");
  await page.waitForURL(/q=late/, WAIT);
  await page.locator("caption").getByText("1 pipelines match").waitFor(WAIT);
  assert.equal(await page.locator("tbody tr").count(), 1);
  await row("ui-late").waitFor(WAIT);
}

// Two instances: the page, served by the one that does not own ui-gold, shows every pipeline
// and ui-gold's page from its owner, timeline included.
async function instances(page) {
  const row = (id) => page.locator(`tr[data-pipeline="${id}"]`);

  step("the list holds the pipelines of both instances");
  await page.goto(`${base}/`);
  await row("ui-gold").locator(".state-completed").waitFor(WAIT);
  await row("ui-late").waitFor(WAIT);
  await page.locator("#status").getByText(/2 instance\(s\)/).waitFor(WAIT);

  step("a pipeline another instance owns opens with its timeline");
  await row("ui-gold").locator("a").click();
  await page.waitForURL(/\/pipelines\/ui-gold$/, WAIT);
  const servedBy = page.locator("#served-by");
  await servedBy.waitFor(WAIT);
  // Another instance answers for it (a rebalance may still move it: give the page its polls).
  for (let deadline = Date.now() + 30000; ; await page.waitForTimeout(500)) {
    const by = await servedBy.innerText();
    if (by !== env.SLUICE_UI_SERVING) break;
    assert.ok(Date.now() < deadline, `ui-gold still served by ${by}, the serving instance`);
  }
  await page.locator('#timeline [data-event="JOB_COMPLETED"]').waitFor(WAIT);
  await page.screenshot({ path: path.join(shots, "pipeline-forwarded.png"), fullPage: true });
}

// An instance with API tokens: the page asks for one, refuses a wrong one, and shows the
// pipelines once given a good one (SLUICE_UI_TOKEN).
async function token(page) {
  step("the page asks for a token");
  await page.goto(`${base}/`);
  await page.locator("#token-form").waitFor(WAIT);
  step("a wrong token is refused, by name");
  await page.locator("#token").fill("not-the-token-but-long-enough");
  await page.keyboard.press("Enter");
  await page.locator("#status").getByText("that token was refused").waitFor(WAIT);
  step("the right token shows the pipelines");
  await page.locator("#token").fill(env.SLUICE_UI_TOKEN);
  await page.keyboard.press("Enter");
  // Which pipelines depend on the partitions the group gives this instance back.
  await page.locator("caption").getByText(/pipelines match/).waitFor(WAIT);
  await page.locator("tbody tr[data-pipeline]").first().waitFor(WAIT);
}

// The dependency graph on the list, and a pipeline's run history against its SLA.
async function graph(page) {
  const node = (id) => page.locator(`#graph-svg [data-node="${id}"]`);
  const edge = (from, to) => page.locator(`#graph-svg [data-edge="${from}→${to}"]`);
  const inState = (id, state) => page.locator(`#graph-svg [data-node="${id}"][data-state="${state}"]`);

  step("the graph draws each pipeline with its state written out");
  await page.goto(`${base}/`);
  await inState("gold", "waiting").waitFor(WAIT);
  const expected = { bronze: "completed", ref: "completed", silver: "waiting", gold: "waiting" };
  for (const [id, state] of Object.entries(expected)) {
    assert.equal(await node(id).getAttribute("data-state"), state, id);
    assert.match(await node(id).locator(".node-state").textContent(), new RegExp(`^. ${state}$`), `${id}'s state is written, not only coloured`);
  }
  assert.equal(await page.locator("#graph-svg [data-node]").count(), 4, "the hourly pipeline has no dependency: not drawn");

  step("in columns by depth: sources left, downstreams right");
  const x = async (id) => (await node(id).locator("rect").boundingBox()).x;
  assert.equal(await x("bronze"), await x("ref"), "both sources in the first column");
  assert.ok(await x("bronze") < await x("silver") && await x("silver") < await x("gold"), "bronze, silver, gold left to right");

  step("silver holds gold back: its edge is highlighted and said in words");
  assert.equal(await edge("silver", "gold").getAttribute("data-holding"), "true");
  assert.equal(await edge("ref", "gold").getAttribute("data-holding"), "false");
  assert.equal(await edge("bronze", "silver").getAttribute("data-holding"), "false");
  assert.equal(await page.locator("#graph-svg .edge.holding").count(), 1);
  const held = page.locator("#held-back");
  assert.match(await held.innerText(), /gold \(waiting\) waits for silver/);
  assert.equal(await held.locator("li").count(), 1, "only gold is held back");
  const stroke = (l) => l.evaluate((e) => getComputedStyle(e).strokeDasharray + " " + getComputedStyle(e).stroke);
  assert.notEqual(await stroke(edge("silver", "gold")), await stroke(edge("ref", "gold")), "a distinct stroke");
  await page.locator("#graph").screenshot({ path: path.join(shots, "graph.png") });

  step("the date chooser: a day nothing ran, then back to the day");
  const before = new Date(Date.parse(env.SLUICE_UI_DAY) - 86400000).toISOString().slice(0, 10);
  await page.goto(`${base}/?date=${before}`);
  await inState("gold", "notStarted").waitFor(WAIT);
  assert.equal(await node("bronze").locator(".node-state").textContent(), "– notStarted");
  assert.match(await held.innerText(), /gold \(notStarted\) waits for ref and silver/);
  assert.match(await held.innerText(), /silver \(notStarted\) waits for bronze/);
  await page.locator("#graph-date").focus();
  await page.locator("#graph-date").selectOption(env.SLUICE_UI_DAY);
  await page.waitForURL(new RegExp(`date=${env.SLUICE_UI_DAY}`), WAIT);
  await inState("gold", "waiting").waitFor(WAIT);
  assert.equal(await page.evaluate(() => document.activeElement.id), "graph-date", "the chooser keeps the focus");

  step("a node links to its pipeline, by keyboard");
  await node("gold").focus();
  await page.keyboard.press("Enter");
  await page.waitForURL(/\/pipelines\/gold$/, WAIT);

  step("the run history: one bar per run, the SLA line, the forecast");
  await page.goto(`${base}/pipelines/hourly`);
  const chart = page.locator("#run-chart");
  await chart.locator('[data-projection="SLA_AT_RISK"]').waitFor(WAIT);
  const runs = await chart.locator("[data-run]").evaluateAll((marks) => marks.map((m) => m.getAttribute("data-run")));
  assert.deepEqual(runs, env.SLUICE_UI_RUNS.split(",").sort(), "one bar per run on record, oldest left");
  // Each past hour ran long after its deadline (minute 00 of the next hour).
  assert.equal(await chart.locator('[data-run][data-met="false"]').count(), 3);
  assert.match(await chart.locator("[data-run] title").first().textContent(), /after the SLA deadline/);
  assert.equal(await chart.locator(".sla-line").count(), 1);
  assert.match(await chart.locator(".sla-label").textContent(), /^SLA \+1:00$/);
  assert.match(await chart.locator(".projection-label").textContent(), /^◆ projected \+\d:\d\d.* late$/);
  assert.match(await chart.locator("figcaption").innerText(), /SLA_AT_RISK for/);
  // The oldest run (about three hours after its hour began) is drawn well above the SLA line
  // (+1:00) it missed: smaller y is later.
  const top = async (l) => (await l.boundingBox()).y;
  assert.ok(await top(chart.locator("[data-run] rect").first()) + 20 < await top(chart.locator(".sla-line")), "late runs above the line");
  await chart.screenshot({ path: path.join(shots, "pipeline-chart.png") });

  step("a daily pipeline's chart: its one run, met");
  await page.goto(`${base}/pipelines/bronze`);
  await page.locator('#run-chart [data-run][data-met="true"]').waitFor(WAIT);
  assert.equal(await page.locator("#run-chart [data-run]").count(), 1);
  assert.match(await page.locator("#run-chart .sla-label").textContent(), /^SLA \+1d 06:00$/);
  assert.equal(await page.locator("#run-chart [data-projection]").count(), 0, "no forecast for bronze");
}

async function main() {
  const browser = await chromium.launch({
    executablePath: env.SLUICE_CHROMIUM || "/usr/bin/chromium",
    // This machine's network is closed: no background connections, no sandbox as root.
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
      "--disable-component-update", "--disable-sync"],
  });
  try {
    const page = await browser.newPage({ viewport: { width: 1280, height: 1000 } });
    const checks = { live, instances, token, graph };
    const check = checks[env.SLUICE_UI_CHECK || "live"];
    assert.ok(check, `unknown SLUICE_UI_CHECK ${env.SLUICE_UI_CHECK}`);
    try {
      await check(page);
    } catch (e) {
      // What the page showed when the check gave up.
      await page.screenshot({ path: path.join(shots, `failed-${env.SLUICE_UI_CHECK || "live"}.png`), fullPage: true }).catch(() => {});
      console.log(`page text at failure:\n${await page.locator("body").innerText().catch(() => "?")}`);
      throw e;
    }
  } finally {
    await browser.close();
  }
}

main().then(
  () => console.log("ok"),
  (e) => {
    console.error(e);
    process.exit(1);
  },
);
