// A real OpenID provider for the sign-in test (web/e2e/sign-in.mjs): the `oidc-provider`
// package with its development login screens (any user name signs in as itself), one
// client for the Rota console, and each user's groups in the ID token's `groups` claim.
//
// Started as its own process: `node oidc-provider.mjs` with
//   OIDC_PORT          the port (0: any free one)
//   OIDC_CLIENT_SECRET the console client's secret
//   OIDC_REDIRECT_URL  the console's callback (http://127.0.0.1:PORT/login/oidc/callback)
// It prints `issuer=<url>` once it listens.
//
// The test changes it between steps with `POST /__test` and a JSON body:
//   {"groups": {"alice": ["rota-admins"]}}   the users' groups from now on
//   {"names": {"frank": "alice"}}            the preferred_username a user gives
// A user's `sub` is `u-<name>` (what the test types at the login form), not its name, so
// Rota must tell the two apart.
//   {"mode": "normal" | "down" | "wrong-key" | "wrong-issuer" | "expired"}
//     down          every endpoint answers 503 (the provider is out)
//     wrong-key     the published key set has another key under the signing key's id, so
//                   the ID tokens it signs do not verify
//     wrong-issuer  the discovery document names another issuer
//     expired       ID tokens are issued as if two hours ago (expired an hour ago)
//     userinfo      groups and names only from the userinfo endpoint, not in the ID token

import { generateKeyPairSync } from "node:crypto";
import { createServer } from "node:http";
import Provider from "oidc-provider";

const port = Number(process.env.OIDC_PORT ?? 0);
const secret = process.env.OIDC_CLIENT_SECRET;
const redirect = process.env.OIDC_REDIRECT_URL;
if (!secret || !redirect) throw new Error("set OIDC_CLIENT_SECRET and OIDC_REDIRECT_URL");

const state = { mode: "normal", groups: {}, names: {} };

function rsaJwk(kid) {
  const { privateKey } = generateKeyPairSync("rsa", { modulusLength: 2048 });
  return { ...privateKey.export({ format: "jwk" }), kid, use: "sig", alg: "RS256" };
}
const signing = rsaJwk("signing-key");
// The same id, another key: what a provider publishing the wrong keys looks like.
const { d, p, q, dp, dq, qi, ...decoy } = rsaJwk("signing-key");

// The port must be known before the issuer is: listen first, then mount the provider.
const server = createServer();
await new Promise((resolve) => server.listen(port, "127.0.0.1", resolve));
const issuer = `http://127.0.0.1:${server.address().port}`;

const provider = new Provider(issuer, {
  clients: [{
    client_id: "rota",
    client_secret: secret,
    redirect_uris: [redirect],
    grant_types: ["authorization_code"],
    response_types: ["code"],
  }],
  jwks: { keys: [signing] },
  cookies: { keys: ["rota-e2e-cookie-key"] },
  pkce: { required: () => true },
  // Scope claims in the ID token itself, as most company providers put groups there.
  conformIdTokenClaims: false,
  claims: { openid: ["sub"], profile: ["preferred_username", "groups"], email: ["email"] },
  features: { devInteractions: { enabled: true } },
  // Errors in the test's log, not only on the page.
  async renderError(ctx, out, error) {
    console.error("provider error:", out, error?.stack ?? error);
    ctx.type = "html";
    ctx.body = `<p class="provider-error">${JSON.stringify(out)}</p>`;
  },
  // The account id is what was typed at the login form: `u-alice` for alice.
  async findAccount(_ctx, accountId) {
    const id = accountId.replace(/^u-/, "");
    return {
      accountId,
      // `use`: "id_token" or "userinfo".
      async claims(use) {
        if (state.mode === "userinfo" && use === "id_token") return { sub: accountId };
        return {
          sub: accountId,
          preferred_username: state.names[id] ?? id,
          email: `${id}@corp.example`,
          groups: state.groups[id] ?? [],
        };
      },
    };
  },
});

provider.use(async (ctx, next) => {
  if (ctx.path === "/__test" && ctx.method === "POST") {
    let body = "";
    for await (const chunk of ctx.req) body += chunk;
    const change = JSON.parse(body || "{}");
    if (change.mode) state.mode = change.mode;
    if (change.groups) state.groups = { ...state.groups, ...change.groups };
    if (change.names) state.names = { ...state.names, ...change.names };
    ctx.body = state;
    return;
  }
  if (state.mode === "down") {
    ctx.status = 503;
    ctx.body = "down for the test";
    return;
  }
  if (state.mode === "wrong-key" && ctx.path === "/jwks") {
    ctx.body = { keys: [decoy] };
    return;
  }
  if (state.mode === "expired" && ctx.path === "/token") {
    // Only while this request is served: the tokens it issues are two hours old.
    const realNow = Date.now;
    Date.now = () => realNow() - 2 * 3600 * 1000;
    try {
      await next();
    } finally {
      Date.now = realNow;
    }
    return;
  }
  await next();
  if (state.mode === "wrong-issuer" && ctx.path === "/.well-known/openid-configuration") {
    ctx.body = { ...ctx.body, issuer: "https://not-this-provider.example" };
  }
});

server.on("request", provider.callback());
console.log(`issuer=${issuer}`);
