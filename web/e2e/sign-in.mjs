// Sign-in with the company's identity provider (SPEC §14), in headless Chromium against a
// real OpenID provider (web/e2e/oidc-provider.mjs, the `oidc-provider` package) and a real
// `rota standalone`:
//
// - `rota config check` accepts the settings, and names --oidc-issuer when the provider is
//   unreachable or names another issuer, and --sso-map when a rule is wrong;
// - the login page offers the provider (screenshots, en and zh);
// - users sign in through the provider's own pages (found by `sub`, shown by name); their
//   groups set role and apps; a user in no mapped group is refused and nothing is created;
// - a group removed takes effect at the next sign-in and ends the user's other sessions;
// - a wrong state, an expired ID token, one signed by a key the provider does not publish,
//   a provider naming another issuer, a provider that is down: each refused with a page
//   saying why, nobody signed in; the local admin still signs in;
// - a name the local admin or another provider user holds is not taken over;
// - groups only at the provider's userinfo endpoint are read there;
// - the users page shows where each user signs in (screenshots, en and zh) and the audit
//   log names the provider and subject;
// - a provider user's API token follows the node's rules at each use (a restart with
//   another --sso-map demotes it and ends its session);
// - with --sso-only the provider is the only way in.
//
// Run it through scripts/e2e (after the console walk), which sets:
//   ROTA_BIN              the rota binary
//   ROTA_E2E_SCREENSHOTS  where the screenshots go
//   ROTA_E2E_CHROMIUM     the browser

import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

const here = dirname(fileURLToPath(import.meta.url));
const ROTA = resolve(process.env.ROTA_BIN ?? join(here, "..", "..", "target", "debug", "rota"));
const SHOTS = resolve(process.env.ROTA_E2E_SCREENSHOTS ?? join(here, "..", "..", "target", "screenshots"));
const CHROMIUM = process.env.ROTA_E2E_CHROMIUM ?? "/usr/bin/chromium";

const ADMIN_PASSWORD = "sign-in-e2e-admin-password";
const CLIENT_SECRET = "sign-in-e2e-client-secret";
const RULES = ["rota-admins=admin", "ops=operator:orders", "devs=viewer"];
const TIMEOUT_MS = 15_000;

function log(...args) {
  console.log("[sign-in]", ...args);
}

function check(ok, message) {
  if (!ok) throw new Error(message);
}

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

/** A port nothing listens on now. */
async function freePort() {
  const server = createServer();
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  const { port } = server.address();
  await new Promise((r) => server.close(r));
  return port;
}

/** Starts `command`, resolves with the child and the first stdout line matching `pattern`. */
function start(command, args, env, pattern, logFile) {
  const child = spawn(command, args, { env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
  const lines = [];
  const keep = (l) => {
    lines.push(l);
    if (lines.length > 200) lines.shift();
  };
  return new Promise((resolveStart, reject) => {
    const timer = setTimeout(() => reject(new Error(`${command} printed nothing matching ${pattern} in 30 s:\n${lines.join("\n")}`)), 30_000);
    child.on("exit", (code) => {
      if (!started) reject(new Error(`${command} exited (${code}) at start:\n${lines.join("\n")}`));
    });
    let started = false;
    const read = (line) => {
      keep(line);
      const m = line.match(pattern);
      if (m && !started) {
        started = true;
        clearTimeout(timer);
        resolveStart({ child, match: m, lines });
      }
    };
    createInterface({ input: child.stdout }).on("line", read);
    createInterface({ input: child.stderr }).on("line", read);
  });
}

async function main() {
  const tmp = mkdtempSync(join(tmpdir(), "rota-sign-in-"));
  const children = [];
  let rotaLines = [];
  let providerLines = [];
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"],
  });
  try {
    const port = await freePort();
    const BASE = `http://127.0.0.1:${port}`;
    const redirect = `${BASE}/login/oidc/callback`;
    const op = await start("node", [join(here, "oidc-provider.mjs")],
      { OIDC_PORT: "0", OIDC_CLIENT_SECRET: CLIENT_SECRET, OIDC_REDIRECT_URL: redirect }, /^issuer=(.*)$/);
    children.push(op.child);
    providerLines = op.lines;
    const ISSUER = op.match[1];
    log(`provider at ${ISSUER}; console at ${BASE}`);

    /** Changes the provider: its mode, its users' groups. */
    async function provider(change) {
      const res = await fetch(`${ISSUER}/__test`, { method: "POST", body: JSON.stringify(change) });
      check(res.ok, `the provider refused ${JSON.stringify(change)}: ${res.status}`);
    }
    await provider({ groups: { alice: ["rota-admins", "staff"], bob: ["ops"], carol: ["staff"], dave: ["devs"] } });

    const sso = (issuer) => [
      `oidc-issuer = "${issuer}"`,
      `oidc-client-id = "rota"`,
      `oidc-client-secret = "${CLIENT_SECRET}"`,
      `oidc-redirect-url = "${redirect}"`,
      `oidc-label = "Corp ID"`,
    ];

    /** `rota config check` of a [standalone] table with `lines`: its exit code and output. */
    function configCheck(name, lines) {
      const file = join(tmp, `${name}.toml`);
      writeFileSync(file, ["[standalone]", ...lines, ""].join("\n"));
      const r = spawnSync(ROTA, ["config", "check", file], { encoding: "utf8", timeout: 30_000 });
      return { status: r.status, out: `${r.stdout}${r.stderr}` };
    }

    await step("rota config check: the settings pass; an unreachable or wrong issuer and a bad rule are named", async () => {
      const rules = `sso-map = ${JSON.stringify(RULES)}`;
      const good = configCheck("good", [...sso(ISSUER), rules]);
      check(good.status === 0 && good.out.includes("ok"), `good settings: exit ${good.status}: ${good.out}`);
      const closed = await freePort();
      const down = configCheck("unreachable", [...sso(`http://127.0.0.1:${closed}`), rules]);
      check(down.status === 1 && down.out.includes(`--oidc-issuer \`http://127.0.0.1:${closed}\``),
        `an unreachable issuer: exit ${down.status}: ${down.out}`);
      await provider({ mode: "wrong-issuer" });
      const other = configCheck("other-issuer", [...sso(ISSUER), rules]);
      await provider({ mode: "normal" });
      check(other.status === 1 && other.out.includes("--oidc-issuer") && other.out.includes("not-this-provider.example"),
        `a provider naming another issuer: exit ${other.status}: ${other.out}`);
      const badRule = configCheck("bad-rule", [...sso(ISSUER), `sso-map = ["ops=boss"]`]);
      check(badRule.status === 1 && badRule.out.includes("--sso-map `ops=boss`"),
        `a bad rule: exit ${badRule.status}: ${badRule.out}`);
    });

    /** Starts the node (on the same port and data each time) with `rules`. */
    async function startRota(rules, more = []) {
      const rota = await start(ROTA, ["standalone", "--data-dir", join(tmp, "data"), "--listen", `127.0.0.1:${port}`,
        "--oidc-issuer", ISSUER, "--oidc-client-id", "rota", "--oidc-redirect-url", redirect,
        "--oidc-label", "Corp ID", "--sso-map", rules.join(";"), ...more],
      {
        ROTA_ADMIN_PASSWORD: ADMIN_PASSWORD,
        ROTA_OIDC_CLIENT_SECRET: CLIENT_SECRET,
        ROTA_EXECUTOR_SECRET: "sign-in-e2e-executor-secret",
        ROTA_LOG: "info",
      }, /OIDC sign-in is on/);
      children.push(rota.child);
      rotaLines = rota.lines;
      return rota.child;
    }
    let rota = await startRota(RULES);

    const contexts = [];
    async function newPage(locale = "en-US") {
      const context = await browser.newContext({ locale, timezoneId: "UTC", viewport: { width: 1100, height: 700 } });
      context.setDefaultTimeout(TIMEOUT_MS);
      contexts.push(context);
      return context.newPage();
    }
    const pathOf = (page) => new URL(page.url()).pathname;
    const bodyText = async (page) => (await page.locator("body").innerText()).trim();

    /** Signs `name` in through the provider's pages; resolves on the page Rota ends on. */
    async function throughProvider(name, page) {
      page = page ?? (await newPage());
      await page.goto(`${BASE}/login`);
      await Promise.all([page.waitForURL((u) => u.href.startsWith(ISSUER)), page.click("#sign-in-provider")]);
      await page.fill('input[name="login"]', `u-${name}`);
      await page.fill('input[name="password"]', "the provider checks this, not Rota");
      await Promise.all([page.waitForNavigation(), page.click('button[type="submit"]')]);
      if (page.url().startsWith(ISSUER) && (await page.locator('input[name="prompt"][value="consent"]').count())) {
        await Promise.all([page.waitForURL((u) => u.href.startsWith(BASE)), page.click('button[type="submit"]')]);
      }
      await page.waitForURL((u) => u.href.startsWith(BASE));
      // Signed in, the callback's page goes on to the console; refused, it says why.
      await Promise.race([
        page.waitForURL(`${BASE}/console`),
        page.locator("p.error").waitFor(),
      ]);
      return page;
    }

    /** Whether `page`'s browser has a session: /console shows a page, not the login form. */
    async function signedIn(page) {
      await page.goto(`${BASE}/console`);
      return pathOf(page) !== "/login";
    }

    const admin = await newPage();
    await step("the local admin signs in with a password beside the provider", async () => {
      await admin.goto(`${BASE}/login`);
      await admin.fill('input[name="user"]', "admin");
      await admin.fill('input[name="password"]', ADMIN_PASSWORD);
      await Promise.all([admin.waitForNavigation(), admin.click('form[action="/login"] button[type="submit"]')]);
      check(pathOf(admin) === "/console", `the admin landed at ${admin.url()}`);
    });

    await step("the login page offers the provider (en, zh)", async () => {
      const page = await newPage();
      await page.goto(`${BASE}/login`);
      check((await page.locator("#sign-in-provider").innerText()).trim() === "Sign in with Corp ID",
        `the button says ${await page.locator("#sign-in-provider").innerText()}`);
      check(await page.locator('input[name="password"]').count() === 1, "the password form is missing beside the provider");
      await page.screenshot({ path: join(SHOTS, "sign-in-login.png"), fullPage: true });
      await page.goto(`${BASE}/lang/zh-CN`);
      await page.goto(`${BASE}/login`);
      check((await page.locator("#sign-in-provider").innerText()).includes("使用 Corp ID 登录"), "no Chinese button");
      await page.screenshot({ path: join(SHOTS, "sign-in-login-zh.png"), fullPage: true });
    });

    let alice;
    await step("alice (rota-admins) signs in through the provider and is an admin", async () => {
      alice = await throughProvider("alice");
      check(pathOf(alice) === "/console", `alice landed at ${alice.url()}: ${await bodyText(alice)}`);
      check((await bodyText(alice)).includes("alice"), "the console does not name alice");
      const res = await alice.goto(`${BASE}/console/users`);
      check(res.status() === 200, `alice's users page: ${res.status()}`);
    });

    await step("bob (ops) is an operator of orders: no users page", async () => {
      const bob = await throughProvider("bob");
      check(pathOf(bob) === "/console", `bob landed at ${bob.url()}: ${await bodyText(bob)}`);
      const res = await bob.goto(`${BASE}/console/users`);
      check(res.status() === 403, `bob's users page: ${res.status()}`);
      await admin.goto(`${BASE}/console/users`);
      const row = await admin.locator("tr", { hasText: "bob" }).first().innerText();
      check(row.includes("oidc") && row.includes("operator") && row.includes("orders")
        && row.includes("from the provider's groups"), `bob's row: ${row}`);
    });

    await step("carol, in no mapped group, is refused and nothing is created", async () => {
      const carol = await throughProvider("carol");
      check(pathOf(carol) === "/login/oidc/callback", `carol landed at ${carol.url()}`);
      check((await bodyText(carol)).includes("in no group that gives access"), `carol sees: ${await bodyText(carol)}`);
      check(!(await signedIn(carol)), "carol has a session");
    });

    await step("alice moved to devs: viewer at her next sign-in, her other session ended", async () => {
      await provider({ groups: { alice: ["devs"] } });
      check(await signedIn(alice), "alice's first session ended before she signed in again");
      const again = await throughProvider("alice");
      check(pathOf(again) === "/console", `alice landed at ${again.url()}`);
      const res = await again.goto(`${BASE}/console/users`);
      check(res.status() === 403, `alice as a viewer, users page: ${res.status()}`);
      check(!(await signedIn(alice)), "alice's first session (an admin's) still works");
      await admin.goto(`${BASE}/console/users`);
      const row = await admin.locator("tr", { hasText: "alice" }).first().innerText();
      check(row.includes("viewer"), `alice's row: ${row}`);
    });

    /** A sign-in that must be refused on the callback page saying `says`; nobody signs in. */
    async function refused(name, says, status) {
      const page = await newPage();
      const responses = [];
      page.on("response", (r) => {
        if (new URL(r.url()).pathname === "/login/oidc/callback") responses.push(r.status());
      });
      await throughProvider(name, page);
      check(pathOf(page) === "/login/oidc/callback", `${name} landed at ${page.url()}`);
      const text = await bodyText(page);
      check(text.includes(says), `the page should say "${says}"; it says: ${text}`);
      check(responses.includes(status), `callback statuses ${responses}, expected ${status}`);
      check(!(await signedIn(page)), `${name} has a session`);
    }

    await step("a provider user named like the local admin does not become it", async () => {
      await provider({ groups: { admin: ["rota-admins"] } });
      await refused("admin", "You cannot sign in here under this name", 409);
    });

    await step("a provider user choosing another's name does not take it over", async () => {
      await provider({ groups: { frank: ["rota-admins"] }, names: { frank: "bob" } });
      await refused("frank", "another oidc user", 409);
      await admin.goto(`${BASE}/console/users`);
      const row = await admin.locator("tr", { hasText: "bob" }).first().innerText();
      check(row.includes("u-bob") && row.includes("operator"), `bob's row: ${row}`);
    });

    await step("a provider that names groups only at its userinfo endpoint: asked there", async () => {
      await provider({ mode: "userinfo", groups: { gina: ["ops"] } });
      try {
        const gina = await throughProvider("gina");
        check(pathOf(gina) === "/console", `gina landed at ${gina.url()}: ${await bodyText(gina)}`);
        await admin.goto(`${BASE}/console/users`);
        const row = await admin.locator("tr", { hasText: "gina" }).first().innerText();
        check(row.includes("operator") && row.includes("orders"), `gina's row: ${row}`);
      } finally {
        await provider({ mode: "normal" });
      }
    });

    await step("a wrong state is refused", async () => {
      const page = await newPage();
      await page.goto(`${BASE}/login`);
      await Promise.all([page.waitForURL((u) => u.href.startsWith(ISSUER)), page.click("#sign-in-provider")]);
      const res = await page.goto(`${BASE}/login/oidc/callback?code=made-up&state=not-the-one-sent`);
      check(res.status() === 403, `status ${res.status()}`);
      const text = await bodyText(page);
      check(text.includes("state does not match"), `the page says: ${text}`);
      check(!(await signedIn(page)), "a session after a wrong state");
      const none = await newPage();
      const cold = await none.goto(`${BASE}/login/oidc/callback?code=x&state=y`);
      check(cold.status() === 400 && (await bodyText(none)).includes("not started in this browser"),
        `a callback without a flow: ${cold.status()}: ${await bodyText(none)}`);
    });

    await step("an expired ID token is refused", async () => {
      await provider({ mode: "expired" });
      try {
        await refused("dave", "the ID token is not valid", 403);
        await refused("dave", "expired", 403);
      } finally {
        await provider({ mode: "normal" });
      }
    });

    await step("an ID token signed with a key the provider does not publish is refused", async () => {
      await provider({ mode: "wrong-key" });
      try {
        await refused("dave", "the ID token is not valid", 403);
      } finally {
        await provider({ mode: "normal" });
      }
    });

    await step("a provider naming another issuer is refused", async () => {
      await provider({ mode: "wrong-issuer" });
      try {
        const page = await newPage();
        await page.goto(`${BASE}/login`);
        const [res] = await Promise.all([page.waitForNavigation(), page.click("#sign-in-provider")]);
        check(res.status() === 503, `status ${res.status()}`);
        const text = await bodyText(page);
        check(text.includes("not-this-provider.example"), `the page says: ${text}`);
      } finally {
        await provider({ mode: "normal" });
      }
    });

    await step("the provider down: a clear page, and the local admin still signs in", async () => {
      await provider({ mode: "down" });
      try {
        const page = await newPage();
        await page.goto(`${BASE}/login`);
        const [res] = await Promise.all([page.waitForNavigation(), page.click("#sign-in-provider")]);
        check(res.status() === 503, `status ${res.status()}`);
        check((await bodyText(page)).includes("local accounts still work"), `the page says: ${await bodyText(page)}`);
        await page.fill('input[name="user"]', "admin");
        await page.fill('input[name="password"]', ADMIN_PASSWORD);
        await Promise.all([page.waitForNavigation(), page.click('form[action="/login"] button[type="submit"]')]);
        check(pathOf(page) === "/console", `the admin landed at ${page.url()}`);
      } finally {
        await provider({ mode: "normal" });
      }
    });

    await step("nobody refused became a user; the users page and the audit log name the provider (en, zh)", async () => {
      await admin.goto(`${BASE}/console/users`);
      const table = await admin.locator("table").first().innerText();
      for (const name of ["carol", "dave"]) {
        check(!new RegExp(`\\b${name}\\b`).test(table), `${name} is a user: ${table}`);
      }
      await admin.screenshot({ path: join(SHOTS, "sign-in-users.png"), fullPage: true });
      await admin.goto(`${BASE}/lang/zh-CN`);
      await admin.goto(`${BASE}/console/users`);
      await admin.screenshot({ path: join(SHOTS, "sign-in-users-zh.png"), fullPage: true });
      await admin.goto(`${BASE}/lang/en`);
      await admin.goto(`${BASE}/console/audit`);
      const audit = await bodyText(admin);
      check(audit.includes(`oidc:${ISSUER} u-alice`) && audit.includes(`oidc:${ISSUER} u-bob`),
        `the audit log: ${audit.slice(0, 1500)}`);
    });
    await step("a provider user's API token follows the node's rules at each use (a restart with another --sso-map)", async () => {
      await provider({ groups: { erin: ["rota-admins"] } });
      const erin = await throughProvider("erin");
      check(pathOf(erin) === "/console", `erin landed at ${erin.url()}`);
      await erin.goto(`${BASE}/console/tokens`);
      await erin.fill('form[action="/console/tokens"] input[name="name"]', "ci");
      await Promise.all([erin.waitForNavigation(), erin.click('form[action="/console/tokens"] button[type="submit"]')]);
      const token = (await erin.locator("#new-token").innerText()).trim();
      const audit = () => fetch(`${BASE}/api/v1/audit`, { headers: { authorization: `Bearer ${token}` } });
      const before = await audit();
      check(before.status === 200, `erin's token as an admin: ${before.status} ${await before.text()}`);
      const stopped = new Promise((r) => rota.once("exit", r));
      rota.kill("SIGTERM");
      await stopped;
      rota = await startRota(["rota-admins=viewer", ...RULES.filter((r) => !r.startsWith("rota-admins="))]);
      const after = await audit();
      check(after.status === 403, `erin's token after rota-admins became viewers: ${after.status} ${await after.text()}`);
      check(!(await signedIn(erin)), "erin's session outlived the rule that made her an admin");
    });
    await step("--sso-only: the provider is the only way in; the local admin's password is refused", async () => {
      const stopped = new Promise((r) => rota.once("exit", r));
      rota.kill("SIGTERM");
      await stopped;
      rota = await startRota(RULES, ["--sso-only"]);
      const page = await newPage();
      await page.goto(`${BASE}/login`);
      check(await page.locator("#sign-in-provider").count() === 1, "no provider button");
      check(await page.locator('input[name="password"]').count() === 0, "a password form under --sso-only");
      const res = await fetch(`${BASE}/login`, {
        method: "POST",
        headers: { "content-type": "application/x-www-form-urlencoded" },
        body: `user=admin&password=${encodeURIComponent(ADMIN_PASSWORD)}`,
      });
      check(res.status === 403 && !res.headers.get("set-cookie")?.includes("rota_session="),
        `the admin's password under --sso-only: ${res.status}`);
      const bob = await throughProvider("bob");
      check(pathOf(bob) === "/console", `bob landed at ${bob.url()}`);
    });
    for (const c of contexts) await c.close();
    log("passed");
  } catch (e) {
    if (rotaLines.length) console.error(`[sign-in] rota's last lines:\n${rotaLines.slice(-30).join("\n")}`);
    if (providerLines.length) console.error(`[sign-in] the provider's last lines:\n${providerLines.slice(-20).join("\n")}`);
    throw e;
  } finally {
    await browser.close();
    for (const child of children) child.kill("SIGTERM");
    rmSync(tmp, { recursive: true, force: true });
  }
}

main().catch((e) => {
  console.error(`[sign-in] FAILED: ${e.stack ?? e}`);
  process.exit(1);
});
