// Walks the Rota console in headless Chromium as a person would: sign in, upload a plugin,
// create a job, trigger it and watch its run succeed, cancel a delayed task, add an alarm
// channel and rule (a test send that fails says why), start a workflow of the job from its
// page and watch its graph run and finish (screenshots in English and Chinese), visit every
// page (a full-page screenshot of each) and sign out. Each step logs what it does and
// throws with a clear message when the console does not do what it should.
//
// Run it through scripts/e2e, which starts `rota standalone` and sets:
//   ROTA_E2E_URL          the console's base URL (http://127.0.0.1:PORT)
//   ROTA_E2E_PASSWORD     the `admin` password (ROTA_ADMIN_PASSWORD of that node)
//   ROTA_E2E_TOKEN        the API token (ROTA_API_TOKEN), for what the console cannot do
//   ROTA_E2E_PLUGIN       the plugin to upload (.wat or .wasm); prints "hello from e2e"
//   ROTA_E2E_COMPONENT    a rota:plugin/handler component to upload beside it (default the
//                         WAT fixture executor/tests/fixtures/handler.wat)
//   ROTA_E2E_SCREENSHOTS  where the screenshots go (default target/screenshots)
//   ROTA_E2E_CHROMIUM     the browser (default /usr/bin/chromium)

import { mkdirSync } from "node:fs";
import { basename, dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

const here = dirname(fileURLToPath(import.meta.url));

function env(name, fallback) {
  const v = process.env[name];
  if (v) return v;
  if (fallback !== undefined) return fallback;
  throw new Error(`${name} is not set (run this through scripts/e2e)`);
}

const BASE = env("ROTA_E2E_URL").replace(/\/$/, "");
const PASSWORD = env("ROTA_E2E_PASSWORD");
const TOKEN = env("ROTA_E2E_TOKEN", "");
const PLUGIN_FILE = resolve(env("ROTA_E2E_PLUGIN", join(here, "hello.wat")));
// A component to upload beside the module: the WAT handler fixture, or (CI) a Python one.
const COMPONENT_FILE = resolve(env("ROTA_E2E_COMPONENT",
  join(here, "..", "..", "executor", "tests", "fixtures", "handler.wat")));
const SHOTS = resolve(env("ROTA_E2E_SCREENSHOTS", join(here, "..", "..", "target", "screenshots")));
const CHROMIUM = env("ROTA_E2E_CHROMIUM", "/usr/bin/chromium");

const EXPECTED_OUTPUT = "hello from e2e";
const RUN_TIMEOUT_MS = 30_000;
// Names unique to this run, so the test also passes against a console that has data.
const SUFFIX = Date.now().toString(36);
const PLUGIN_NAME = `e2e-hello-${SUFFIX}`;
const COMPONENT_NAME = `e2e-handler-${SUFFIX}`;
const JOB_NAME = `e2e-job-${SUFFIX}`;
const TASK_KEY = `e2e-delayed-${SUFFIX}`;
const CHANNEL_NAME = `e2e-chat-${SUFFIX}`;
const RULE_NAME = `e2e-dead-${SUFFIX}`;

// ----- small helpers ----------------------------------------------------------------------

function log(...args) {
  console.log("[e2e]", ...args);
}

function check(ok, message) {
  if (!ok) throw new Error(message);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** The path (and query) of the page the browser shows. */
function where(page) {
  const u = new URL(page.url());
  return u.pathname + u.search;
}

/** Fails unless the browser shows `path` (a string or a RegExp on the path). */
function expectAt(page, path, what) {
  const p = new URL(page.url()).pathname;
  const ok = path instanceof RegExp ? path.test(p) : p === path;
  check(ok, `${what}: expected to be at ${path}, but the browser shows ${where(page)}`);
}

/** Goes to a console path and checks the answer is a page, not an error. */
async function visit(page, path) {
  const res = await page.goto(BASE + path);
  check(res, `GET ${path}: no response`);
  check(res.ok(), `GET ${path}: status ${res.status()}: ${await errorText(page)}`);
  return res;
}

/** Clicks `selector` and waits for the page it leads to; fails on an error page. */
async function clickAndLoad(page, selector, what) {
  const el = page.locator(selector);
  check((await el.count()) === 1, `${what}: expected one ${selector} on ${where(page)}, found ${await el.count()}`);
  const [res] = await Promise.all([page.waitForNavigation(), el.click()]);
  check(res, `${what}: clicking ${selector} loaded no page`);
  check(res.ok(), `${what}: status ${res.status()} at ${where(page)}: ${await errorText(page)}`);
  return res;
}

/** What an error page (or a plain-text refusal) says, for failure messages. */
async function errorText(page) {
  const text = await page.locator("p.error, body").first().innerText().catch(() => "");
  return text.trim().slice(0, 300);
}

/** The text of the first element matching `selector`, trimmed. */
async function textOf(page, selector) {
  const el = page.locator(selector).first();
  check((await el.count()) > 0, `no ${selector} on ${where(page)}`);
  return (await el.innerText()).trim();
}

/** Submits the console form whose action is `action` with its (one) submit button. */
async function submitForm(page, action, what) {
  const button = `form[action="${action}"] button[type="submit"]:not([name])`;
  return clickAndLoad(page, button, what);
}

/** A number of steps, each logged with its time; the first failure names the step. */
async function step(name, fn) {
  const t0 = Date.now();
  log(`▶ ${name}`);
  try {
    const out = await fn();
    log(`✓ ${name} (${Date.now() - t0} ms)`);
    return out;
  } catch (e) {
    e.message = `step "${name}" failed: ${e.message}`;
    throw e;
  }
}

/** The REST API, for what the console has no form for. */
async function api(method, path, body) {
  check(TOKEN, `ROTA_E2E_TOKEN is needed for ${method} ${path}`);
  const res = await fetch(BASE + path, {
    method,
    headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const json = await res.json().catch(() => ({}));
  check(res.ok, `${method} ${path}: status ${res.status}: ${JSON.stringify(json)}`);
  return json;
}

// ----- the walk ---------------------------------------------------------------------------

async function main() {
  mkdirSync(SHOTS, { recursive: true });
  log(`console at ${BASE}; screenshots into ${SHOTS}`);
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: [
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
  // Problems the browser sees that no assertion looks for: script errors, refused
  // resources (CSP), server errors. Any of them fails the run at the end.
  const problems = [];
  // Error statuses a step asks for on purpose: path → status.
  const expectedStatus = new Map();
  try {
    const context = await browser.newContext({
      viewport: { width: 1280, height: 800 },
      locale: "en-US",
      timezoneId: "UTC",
    });
    context.setDefaultTimeout(10_000);
    const page = await context.newPage();
    // Destructive forms ask first (data-confirm); the user says yes.
    page.on("dialog", (d) => d.accept());
    page.on("pageerror", (e) => problems.push(`script error on ${where(page)}: ${e.message}`));
    page.on("console", (m) => {
      // Failed loads are reported (with their URL) by the response handler below.
      if (m.type() === "error" && !m.text().startsWith("Failed to load resource")) {
        problems.push(`console error on ${where(page)}: ${m.text()}`);
      }
    });
    page.on("response", (r) => {
      const path = new URL(r.url()).pathname;
      const expected = expectedStatus.get(path);
      if (r.status() >= 400 && r.status() !== expected && path !== "/favicon.ico") {
        problems.push(`${r.request().method()} ${path}: status ${r.status()}`);
      }
    });

    const ids = {};

    await step("without a session the console sends me to the login page", async () => {
      await page.goto(BASE + "/console");
      expectAt(page, "/login", "GET /console without a session");
      check((await page.locator('form[action="/login"] input[name="password"]').count()) === 1,
        "the login page has no password field");
      await page.screenshot({ path: join(SHOTS, "login.png"), fullPage: true });
    });

    await step("a wrong password is refused", async () => {
      expectedStatus.set("/login", 401);
      await page.fill('form[action="/login"] input[name="user"]', "admin");
      await page.fill('form[action="/login"] input[name="password"]', "not-the-password");
      await page.click('form[action="/login"] button[type="submit"]');
      await page.waitForLoadState();
      expectAt(page, "/login", "after a wrong password");
      const error = await textOf(page, "p.error");
      check(/wrong/i.test(error), `expected "Wrong user name or password", saw "${error}"`);
      expectedStatus.delete("/login");
    });

    await step("sign in as admin", async () => {
      await page.fill('form[action="/login"] input[name="user"]', "admin");
      await page.fill('form[action="/login"] input[name="password"]', PASSWORD);
      await clickAndLoad(page, 'form[action="/login"] button[type="submit"]', "signing in");
      expectAt(page, "/console", "after signing in");
      const user = await textOf(page, "header a.user");
      check(user === "admin", `the header names "${user}", not admin`);
    });

    await step(`upload plugin ${PLUGIN_NAME} (${basename(PLUGIN_FILE)}) on the plugins page`, async () => {
      await clickAndLoad(page, 'nav a[href="/console/plugins"]', "opening Plugins");
      const form = page.locator('form#upload[action="/console/plugins"]');
      await form.locator('input[name="name"]').fill(PLUGIN_NAME);
      await form.locator('input[name="module"]').setInputFiles(PLUGIN_FILE);
      // The page's script sends the module and reloads the page when it is stored.
      await Promise.all([
        Promise.race([
          page.waitForEvent("load", { timeout: 30_000 }),
          page.waitForSelector("#upload-result.error", { timeout: 30_000 }),
        ]),
        form.locator('button[type="submit"]').click(),
      ]);
      const failed = await page.locator("#upload-result.error").count();
      if (failed) throw new Error(`the upload failed: ${await textOf(page, "#upload-result")}`);
      const row = page.locator("table tbody tr", { has: page.locator(`td:text-is("${PLUGIN_NAME}")`) });
      check((await row.count()) === 1, `plugin ${PLUGIN_NAME} is not in the list after the upload`);
      const version = (await row.locator("td").nth(2).innerText()).trim();
      check(version === "1", `plugin ${PLUGIN_NAME} shows version ${version}, expected 1`);
    });

    await step(`upload component ${COMPONENT_NAME} (${basename(COMPONENT_FILE)}): the list says what it is`, async () => {
      const form = page.locator('form#upload[action="/console/plugins"]');
      await form.locator('input[name="name"]').fill(COMPONENT_NAME);
      await form.locator('input[name="module"]').setInputFiles(COMPONENT_FILE);
      // A Python component is compiled at upload: give it time.
      await Promise.all([
        Promise.race([
          page.waitForEvent("load", { timeout: 180_000 }),
          page.waitForSelector("#upload-result.error", { timeout: 180_000 }),
        ]),
        form.locator('button[type="submit"]').click(),
      ]);
      const failed = await page.locator("#upload-result.error").count();
      if (failed) throw new Error(`the upload failed: ${await textOf(page, "#upload-result")}`);
      const row = page.locator("table tbody tr", { has: page.locator(`td:text-is("${COMPONENT_NAME}")`) });
      check((await row.count()) === 1, `component ${COMPONENT_NAME} is not in the list after the upload`);
      const kind = (await row.locator("td.kind").innerText()).trim();
      check(kind.startsWith("component") && kind.includes("rota:plugin/handler"),
        `component ${COMPONENT_NAME} shows its kind as "${kind}"`);
      await row.locator("td.kind summary").click();
      // Whichever version of the world it was built for (the WAT fixture is 0.1).
      check(await row.locator('td.kind li code:text-matches("^rota:plugin/log@0\\.[0-9]+\\.[0-9]+$")').first().isVisible(),
        "its imports are not shown");
    });

    await step("a module that is not WebAssembly is refused with a message on the page", async () => {
      expectedStatus.set("/console/plugins", 422);
      const form = page.locator('form#upload[action="/console/plugins"]');
      await form.locator('input[name="name"]').fill(`${PLUGIN_NAME}-broken`);
      await form.locator('input[name="module"]').setInputFiles({
        name: "broken.wat", mimeType: "text/plain", buffer: Buffer.from("(module (func $oops"),
      });
      await form.locator('button[type="submit"]').click();
      await page.waitForSelector("#upload-result.error", { timeout: 30_000 });
      const message = await textOf(page, "#upload-result");
      check(message.length > 0 && !/^Upload failed \(\d+\)\.$/.test(message),
        `the refusal says only "${message}"`);
      check((await page.locator(`td:text-is("${PLUGIN_NAME}-broken")`).count()) === 0, "the broken plugin is listed");
      expectedStatus.delete("/console/plugins");
      log(`  refused with: ${message.split("\n")[0].slice(0, 120)}`);
    });

    await step("the job form shows an error next to an unknown plugin and keeps what I typed", async () => {
      // A plugin that does not exist is a 404, as the API answers the same job.
      expectedStatus.set("/console/jobs", 404);
      await visit(page, "/console/jobs/new");
      const form = page.locator('form[action="/console/jobs"]');
      await form.locator('input[name="name"]').fill(`${JOB_NAME}-bad`);
      await form.locator('input[name="app"]').fill("default");
      await form.locator('input[name="plugin"]').fill(`no-such-plugin-${SUFFIX}`);
      await form.locator('select[name="schedule_kind"]').selectOption("none");
      const [res] = await Promise.all([
        page.waitForNavigation(),
        form.locator('button[type="submit"]:not([name])').click(),
      ]);
      check(res.status() === 404, `saving a job with an unknown plugin answered ${res.status()}, expected 404`);
      const error = await page.locator('input[name="plugin"] ~ .field-error').count()
        ? await textOf(page, 'input[name="plugin"] ~ .field-error')
        : await page.locator(".field-error, form p.error").allInnerTexts().then((t) => t.join(" | "));
      check(error.length > 0, "no error is shown for the unknown plugin");
      check((await page.locator('input[name="plugin"] ~ .field-error').count()) === 1,
        `the error is not next to the plugin field; the page shows: ${error}`);
      check((await form.locator('input[name="name"]').inputValue()) === `${JOB_NAME}-bad`, "the form lost the name");
      expectedStatus.delete("/console/jobs");
      log(`  shown: ${error}`);
    });

    await step(`create job ${JOB_NAME} (app default, no schedule) with the job form`, async () => {
      await clickAndLoad(page, 'nav a[href="/console/jobs"]', "opening Jobs");
      await clickAndLoad(page, 'a[href="/console/jobs/new"]', "opening New job");
      const form = page.locator('form[action="/console/jobs"]');
      await form.locator('input[name="name"]').fill(JOB_NAME);
      await form.locator('input[name="app"]').fill("default");
      await form.locator('input[name="plugin"]').fill(PLUGIN_NAME);
      await form.locator('select[name="schedule_kind"]').selectOption("none");
      await form.locator('input[name="cron_expr"]').fill("");
      await clickAndLoad(page, 'form[action="/console/jobs"] button[type="submit"]:not([name])', "saving the job");
      expectAt(page, /^\/console\/jobs\/\d+$/, "after saving the new job");
      ids.job = Number(new URL(page.url()).pathname.split("/").pop());
      const h1 = await textOf(page, "h1");
      check(h1.includes(JOB_NAME), `the job page's title is "${h1}"`);
      check(await page.locator('select[name="schedule_kind"] option[value="none"]').evaluate((o) => o.selected),
        "the saved job's schedule kind is not none");
      log(`  job id ${ids.job}`);
    });

    await step("the new job is in the jobs list", async () => {
      await clickAndLoad(page, 'nav a[href="/console/jobs"]', "opening Jobs");
      const link = page.locator(`table a[href="/console/jobs/${ids.job}"]`);
      check((await link.count()) === 1, `job ${ids.job} is not in the jobs list`);
      check((await link.innerText()).trim() === JOB_NAME, "the jobs list shows another name");
    });

    await step("trigger the job now from its page", async () => {
      await clickAndLoad(page, `table a[href="/console/jobs/${ids.job}"]`, "opening the job");
      await submitForm(page, `/console/jobs/${ids.job}/trigger`, "Trigger now");
      expectAt(page, /^\/console\/tasks\/\d+$/, "after Trigger now");
      ids.manualTask = Number(new URL(page.url()).pathname.split("/").pop());
      const kind = await page.locator("dl.facts dt:text-is('kind') + dd").innerText();
      check(kind.trim() === "manual", `the triggered task's kind is "${kind}"`);
      log(`  manual task id ${ids.manualTask}`);
    });

    await step("the run shows up on the runs page; open the newest", async () => {
      await clickAndLoad(page, 'nav a[href="/console/runs"]', "opening Runs");
      const deadline = Date.now() + RUN_TIMEOUT_MS;
      const runLink = page.locator(`table tbody tr`, {
        has: page.locator(`a[href="/console/tasks/${ids.manualTask}"]`),
      }).first().locator('a[href^="/console/runs/"]');
      while ((await runLink.count()) === 0) {
        check(Date.now() < deadline, `no run of task ${ids.manualTask} on the runs page after ${RUN_TIMEOUT_MS / 1000} s`);
        await sleep(500);
        await page.reload();
      }
      // The list is newest first: the first row of the task is its newest run.
      const firstRow = await page.locator("table tbody tr").first().locator('a[href^="/console/runs/"]').getAttribute("href");
      const href = await runLink.getAttribute("href");
      check(firstRow === href, `the newest run (${href}) is not the first row (${firstRow})`);
      await clickAndLoad(page, `table a[href="${href}"]`, "opening the run");
      ids.run = Number(href.split("/").pop());
      log(`  run id ${ids.run}`);
    });

    await step(`the run succeeds and its log shows "${EXPECTED_OUTPUT}"`, async () => {
      const deadline = Date.now() + RUN_TIMEOUT_MS;
      let status = "";
      let logText = "";
      for (;;) {
        status = await textOf(page, "h1 .status");
        if (status === "succeeded") {
          // The script follows the log; give it a moment to fetch it.
          await page.waitForFunction(
            (want) => document.getElementById("log")?.textContent.includes(want),
            EXPECTED_OUTPUT, { timeout: 5_000 },
          ).catch(() => {});
          logText = await page.locator("#log").innerText();
          if (logText.includes(EXPECTED_OUTPUT)) break;
        }
        check(!["failed", "timeout", "killed", "lost"].includes(status),
          `the run ended ${status}: ${await page.locator("dl.facts").innerText()}\nlog:\n${await page.locator("#log").innerText()}`);
        check(Date.now() < deadline,
          `after ${RUN_TIMEOUT_MS / 1000} s the run is "${status}" and its log is ${JSON.stringify(logText)}`);
        await sleep(1000);
        await page.reload();
      }
      const exit = await page.locator("dl.facts dt:text-is('exit code') + dd").innerText();
      check(exit.trim() === "0", `the run's exit code is "${exit}"`);
      check((await page.locator('form[action$="/kill"]').count()) === 0, "a finished run still offers Kill");
    });

    await step("the triggered task is succeeded and links its run", async () => {
      await clickAndLoad(page, `dl.facts a[href="/console/tasks/${ids.manualTask}"]`, "opening the run's task");
      const status = await textOf(page, "h1 .status");
      check(status === "succeeded", `task ${ids.manualTask} is "${status}"`);
      check((await page.locator(`dl.facts a[href="/console/runs/${ids.run}"]`).count()) === 1,
        `task ${ids.manualTask}'s page does not link its last run ${ids.run}`);
    });

    await step("create a delayed task (in an hour) through the REST API", async () => {
      // The console has no form for creating delayed tasks.
      const task = await api("POST", "/api/v1/tasks", {
        job: ids.job,
        delay_ms: 3_600_000,
        key: TASK_KEY,
        payload: "from the e2e test",
      });
      ids.delayedTask = task.id;
      check(Number.isInteger(task.id), `the API answered no task id: ${JSON.stringify(task)}`);
      log(`  delayed task id ${ids.delayedTask}`);
    });

    await step("find the delayed task on the tasks page by its key, open it and cancel it", async () => {
      await clickAndLoad(page, 'nav a[href="/console/tasks"]', "opening Tasks");
      const filters = page.locator('form.filters[action="/console/tasks"]');
      await filters.locator('input[name="key"]').fill(TASK_KEY);
      await clickAndLoad(page, 'form.filters[action="/console/tasks"] button[type="submit"]', "searching by key");
      const rows = page.locator("table tbody tr");
      check((await rows.count()) === 1, `searching key ${TASK_KEY} shows ${await rows.count()} rows`);
      const link = rows.first().locator(`a[href="/console/tasks/${ids.delayedTask}"]`);
      check((await link.count()) === 1, `the search for key ${TASK_KEY} does not list task ${ids.delayedTask}`);
      const status = (await rows.first().locator(".status").innerText()).trim();
      check(status === "pending", `the delayed task is listed as "${status}"`);
      await clickAndLoad(page, `table a[href="/console/tasks/${ids.delayedTask}"]`, "opening the task");
      const kind = await page.locator("dl.facts dt:text-is('kind') + dd").innerText();
      check(kind.trim() === "delayed", `the task's kind is "${kind}"`);
      await submitForm(page, `/console/tasks/${ids.delayedTask}/cancel`, "Cancel task");
      expectAt(page, `/console/tasks/${ids.delayedTask}`, "after Cancel task");
      const after = await textOf(page, "h1 .status");
      check(after === "cancelled", `after Cancel task the task is "${after}"`);
      check((await page.locator('form[action$="/cancel"]').count()) === 0, "a cancelled task still offers Cancel");
    });

    await step("the API agrees the task is cancelled", async () => {
      const task = await api("GET", `/api/v1/tasks/${ids.delayedTask}`);
      check(task.status === "cancelled", `the API says task ${ids.delayedTask} is ${task.status}`);
    });

    await step("add an alarm channel and a rule; a test send to a closed port says why it failed", async () => {
      await clickAndLoad(page, 'nav a[href="/console/alarms"]', "opening Alarms");
      const form = 'form[action="/console/alarms/channels"]';
      await page.fill(`${form} input[name="name"]`, CHANNEL_NAME);
      await page.selectOption(`${form} select[name="kind"]`, "slack");
      // Port 9 (discard) on loopback: nothing listens there.
      await page.fill(`${form} input[name="url"]`, "http://127.0.0.1:9/services/T000/B000/secret-token");
      await submitForm(page, "/console/alarms/channels", "Add channel");
      expectAt(page, "/console/alarms", "after Add channel");
      const row = page.locator("table tbody tr", { has: page.locator(`code:text-is("${CHANNEL_NAME}")`) });
      check((await row.count()) === 1, `channel ${CHANNEL_NAME} is not listed`);
      check(!(await page.content()).includes("secret-token"), "the channel's URL (with its token) is shown");
      const testPath = `/console/alarms/channels/${CHANNEL_NAME}/test`;
      // The endpoint refused: a 502, as the API answers the same test send.
      expectedStatus.set(testPath, 502);
      const [res] = await Promise.all([
        page.waitForNavigation(),
        page.locator(`form[action="${testPath}"] button`).click(),
      ]);
      expectedStatus.delete(testPath);
      check(res && res.status() === 502, `a failed test send answered ${res && res.status()}`);
      const said = await textOf(page, "p.field-error");
      check(said.includes("did not deliver"), `a failed test send says "${said}"`);
      const rule = 'form[action="/console/alarms/rules"]';
      await page.fill(`${rule} input[name="name"]`, RULE_NAME);
      await page.fill(`${rule} input[name="app"]`, "default");
      await page.selectOption(`${rule} select[name="on"]`, "task_dead");
      await page.fill(`${rule} input[name="channels"]`, CHANNEL_NAME);
      await submitForm(page, "/console/alarms/rules", "Add rule");
      check((await page.locator(`table code:text-is("${RULE_NAME}")`).count()) === 1, `rule ${RULE_NAME} is not listed`);
      const viaApi = await api("GET", `/api/v1/alarm-rules/${RULE_NAME}`);
      check(viaApi.on === "task_dead" && viaApi.channels[0] === CHANNEL_NAME, `the API sees the rule as ${JSON.stringify(viaApi)}`);
    });

    await step("a workflow of the job: start it from its page, its graph running, then finished (en, zh)", async () => {
      // The last step is a pull job nobody consumes: the instance stays running until
      // this walk acks it through the API.
      const waitJob = `e2e-wait-${SUFFIX}`;
      await api("POST", "/api/v1/jobs", {
        name: waitJob, app: "default", schedule: { kind: "none" }, delivery: { kind: "pull" },
      });
      const wf = await api("POST", "/api/v1/workflows", {
        name: `e2e-flow-${SUFFIX}`, app: "default", steps: [
          { name: "fetch", job: JOB_NAME },
          { name: "left", job: JOB_NAME, after: ["fetch"] },
          { name: "right", job: JOB_NAME, after: ["fetch"] },
          { name: "approve", job: waitJob, after: ["left", "right"] },
        ],
      });
      await clickAndLoad(page, 'nav a[href="/console/workflows"]', "opening Workflows");
      await clickAndLoad(page, `table a[href="/console/workflows/${wf.id}"]`, "opening the workflow");
      check((await page.locator("svg.graph g.step").count()) === 4, "the graph does not draw four steps");
      await page.screenshot({ path: join(SHOTS, "workflow.png"), fullPage: true });
      await page.fill(`form[action="/console/workflows/${wf.id}/start"] textarea[name="input"]`, '{"order": 42}');
      await submitForm(page, `/console/workflows/${wf.id}/start`, "starting an instance");
      expectAt(page, /^\/console\/workflow-instances\/\d+$/, "after starting");
      const instance = new URL(page.url()).pathname.split("/").pop();
      // fetch, left and right run on the executor; approve waits for its consumer.
      const deadline = Date.now() + RUN_TIMEOUT_MS;
      while ((await page.locator("svg.graph g.step.status-succeeded").count()) < 3) {
        check(Date.now() < deadline, "three steps did not succeed in time");
        await sleep(300);
        await visit(page, `/console/workflow-instances/${instance}`);
      }
      check((await page.locator("svg.graph g.step.status-running").count()) === 1, "approve is not running");
      await page.screenshot({ path: join(SHOTS, "workflow-running.png"), fullPage: true });
      const pulled = await api("POST", `/api/v1/jobs/${waitJob}/pull`, { wait_ms: 10_000 });
      check(pulled.items?.length === 1, `no approve task to pull: ${JSON.stringify(pulled)}`);
      await api("POST", `/api/v1/tasks/${pulled.items[0].task}/ack`, {
        lease: pulled.items[0].lease, output: { approved: true },
      });
      await visit(page, `/console/workflow-instances/${instance}`);
      check((await textOf(page, "main h1 .status")) === "succeeded", "the instance did not succeed");
      check((await page.locator("svg.graph g.step.status-succeeded").count()) === 4, "not every step succeeded");
      check((await page.locator("pre.output").allInnerTexts()).some((t) => t.includes('"approved": true')),
        "approve's output is not shown");
      await page.screenshot({ path: join(SHOTS, "workflow-finished.png"), fullPage: true });
      await visit(page, "/lang/zh-CN");
      await visit(page, `/console/workflow-instances/${instance}`);
      check((await textOf(page, "main h1")).startsWith("工作流实例"), "the instance page is not in Chinese");
      await page.screenshot({ path: join(SHOTS, "workflow-finished-zh.png"), fullPage: true });
      await visit(page, "/lang/en");
    });

    await step("visit every page from the nav and screenshot it", async () => {
      // [file name, how to get there, what the page must show]
      const pages = [
        ["dashboard", 'nav a[href="/console"]', async () => {
          const jobs = await textOf(page, '.tiles a[href="/console/jobs"] b');
          check(Number(jobs) >= 1, `the dashboard counts ${jobs} jobs`);
          const online = await textOf(page, '.tiles a[href="/console/executors"] b');
          check(Number(online) >= 1, `the dashboard shows ${online} executors online`);
        }],
        ["jobs", 'nav a[href="/console/jobs"]', async () => {
          check((await page.locator(`table a[href="/console/jobs/${ids.job}"]`).count()) === 1, "the job is not listed");
        }],
        ["job-edit", `table a[href="/console/jobs/${ids.job}"]`, async () => {
          check((await page.locator(`form[action="/console/jobs/${ids.job}"] input[name="name"]`).inputValue()) === JOB_NAME,
            "the edit form does not hold the job's name");
        }],
        ["job-new", null, async () => {
          await clickAndLoad(page, 'nav a[href="/console/jobs"]', "opening Jobs");
          await clickAndLoad(page, 'a[href="/console/jobs/new"]', "opening New job");
          check((await page.locator('form[action="/console/jobs"]').count()) === 1, "no new-job form");
        }],
        ["job-delete", null, async () => {
          await visit(page, `/console/jobs/${ids.job}`);
          await clickAndLoad(page, `a[href="/console/jobs/${ids.job}/delete"]`, "opening Delete…");
          check((await page.locator(`form[action="/console/jobs/${ids.job}/delete"]`).count()) === 1, "no delete form");
        }],
        ["tasks", 'nav a[href="/console/tasks"]', async () => {
          for (const id of [ids.manualTask, ids.delayedTask]) {
            check((await page.locator(`table a[href="/console/tasks/${id}"]`).count()) === 1, `task ${id} is not listed`);
          }
        }],
        ["task-detail", `table a[href="/console/tasks/${ids.manualTask}"]`, async () => {
          check((await page.locator(`table a[href="/console/runs/${ids.run}"]`).count()) === 1,
            "the task page does not list its run");
        }],
        ["task-cancelled", null, async () => {
          await visit(page, `/console/tasks/${ids.delayedTask}`);
        }],
        ["runs", 'nav a[href="/console/runs"]', async () => {
          check((await page.locator(`table a[href="/console/runs/${ids.run}"]`).count()) === 1, "the run is not listed");
        }],
        ["run-detail", `table a[href="/console/runs/${ids.run}"]`, async () => {
          await page.waitForFunction((want) => document.getElementById("log")?.textContent.includes(want), EXPECTED_OUTPUT);
        }],
        ["plugins", 'nav a[href="/console/plugins"]', async () => {
          check((await page.locator(`td:text-is("${PLUGIN_NAME}")`).count()) === 1, "the plugin is not listed");
        }],
        ["executors", 'nav a[href="/console/executors"]', async () => {
          const rows = await page.locator("table tbody tr td.empty").count();
          check(rows === 0, "the executors page says no executor is online");
          check((await page.locator("table tbody tr td:text-is('default')").count()) >= 1,
            "no executor of app default is listed");
        }],
        ["audit", 'nav a[href="/console/audit"]', async () => {
          const text = await page.locator("table tbody").innerText();
          for (const action of ["login", "upload plugin", "create job", "trigger job", "cancel task"]) {
            check(text.includes(action), `the audit log has no "${action}" entry:\n${text}`);
          }
        }],
        ["tokens", 'nav a[href="/console/tokens"]', async () => {
          await page.fill('form[action="/console/tokens"] input[name="name"]', "e2e");
          await clickAndLoad(page, 'form[action="/console/tokens"] button[type="submit"]', "creating a token");
          const token = (await textOf(page, "#new-token")).trim();
          check(/^rota_[0-9a-f]{40}$/.test(token), `the new token looks wrong: "${token}"`);
          const res = await fetch(BASE + "/api/v1/jobs", { headers: { authorization: `Bearer ${token}` } });
          check(res.status === 200, `the API refused the new token: ${res.status}`);
        }],
        ["users", 'nav a[href="/console/users"]', async () => {
          check((await page.locator('form[action="/console/users"] input[name="name"]').count()) === 1,
            "no new-user form");
          check((await page.locator("table tbody").innerText()).includes("admin"), "admin is not listed");
        }],
        ["alarms", 'nav a[href="/console/alarms"]', async () => {
          check((await page.locator(`table code:text-is("${RULE_NAME}")`).count()) === 1, "the rule is not listed");
        }],
        ["alarms-zh", null, async () => {
          await visit(page, "/lang/zh-CN");
          await visit(page, "/console/alarms");
          const title = await textOf(page, "main h1");
          check(title === "告警", `the Chinese alarms page is titled "${title}"`);
        }],
        ["dashboard-zh", null, async () => {
          await visit(page, "/console");
          check((await textOf(page, "main h1")) !== "Dashboard", "the dashboard is not in Chinese");
        }],
        ["account", "header a.user", async () => {
          check((await page.locator('form[action="/console/account"] input[name="new"]').count()) === 1,
            "no change-password form");
        }],
      ];
      for (const [name, link, verify] of pages) {
        if (link) await clickAndLoad(page, link, `opening ${name}`);
        await verify();
        check((await page.locator("main h1").count()) === 1, `${name} (${where(page)}) has no title`);
        const file = join(SHOTS, `${name}.png`);
        await page.screenshot({ path: file, fullPage: true });
        log(`  ${name}: ${where(page)} → ${file}`);
      }
    });

    await step("sign out; the console sends me to the login page again", async () => {
      await clickAndLoad(page, 'form.logout[action="/console/logout"] button[type="submit"]', "signing out");
      expectAt(page, "/login", "after signing out");
      await page.goto(BASE + "/console");
      expectAt(page, "/login", "GET /console after signing out");
      await page.goto(BASE + `/console/jobs/${ids.job}`);
      expectAt(page, "/login", "GET a job page after signing out");
    });

    check(problems.length === 0, `the browser saw problems:\n  ${problems.join("\n  ")}`);
  } finally {
    await browser.close();
  }
}

const t0 = Date.now();
main().then(
  () => log(`PASS: the console walk took ${((Date.now() - t0) / 1000).toFixed(1)} s`),
  (e) => {
    console.error(`[e2e] FAIL: ${e.message}`);
    if (e.stack) console.error(e.stack.split("\n").slice(1, 4).join("\n"));
    process.exitCode = 1;
  },
);
