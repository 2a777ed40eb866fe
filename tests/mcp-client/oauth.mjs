// MCP over OAuth with the official TypeScript SDK's own client (issue 47, point 4), against a
// running stack (MCP_URL): knowing only the MCP endpoint, the SDK is answered 401, reads the
// protected-resource and authorization-server metadata, registers, and sends its human to the
// authorization URL. The human is headless Chromium (puppeteer-core): the console's consent page
// signs them in with their wallet (an EIP-1193 provider injected in the page, a throwaway key),
// shows the client and where the token goes, takes a spend policy, and connects; the browser is
// sent to the client's loopback redirect with the code. The SDK exchanges it (PKCE), connects
// with the access token and pays for a server with x402's MCP transport (PRIVATE_KEY, funded on
// the stack's rails), the paid call made as an MCP task the SDK follows until the server is
// ready. Fails on anything else.

import assert from "node:assert/strict";
import http from "node:http";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { UnauthorizedError } from "@modelcontextprotocol/sdk/client/auth.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { x402Client } from "@x402/core/client";
import { registerExactEvmScheme } from "@x402/evm/exact/client";
import puppeteer from "puppeteer-core";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";

const url = new URL(process.env.MCP_URL ?? "http://127.0.0.1:9000/mcp");
const CHROMIUM = process.env.CHROMIUM || "/usr/bin/chromium";
const STATE = "conformance-oauth";
const human = privateKeyToAccount(generatePrivateKey());
const payer = privateKeyToAccount(process.env.PRIVATE_KEY || generatePrivateKey());

function show(step, value) {
  console.log(`== ${step}`);
  console.log(JSON.stringify(value, null, 2).slice(0, 1500));
}

// The client's redirect: a loopback server that takes the authorization response.
let answered;
const answer = new Promise((resolve) => {
  answered = resolve;
});
const callback = http.createServer((req, res) => {
  answered(Object.fromEntries(new URL(req.url, "http://127.0.0.1").searchParams));
  res.end("Connected. You may close this window.");
});
await new Promise((resolve) => callback.listen(0, "127.0.0.1", resolve));
const redirectUrl = `http://127.0.0.1:${callback.address().port}/callback`;

/** The SDK's OAuthClientProvider, kept in memory. */
const provider = {
  stored: {},
  get redirectUrl() {
    return redirectUrl;
  },
  get clientMetadata() {
    return {
      client_name: "Conformance assistant",
      redirect_uris: [redirectUrl],
      grant_types: ["authorization_code", "refresh_token"],
      response_types: ["code"],
      token_endpoint_auth_method: "none",
    };
  },
  state: () => STATE,
  clientInformation() {
    return this.stored.client;
  },
  saveClientInformation(client) {
    this.stored.client = client;
  },
  tokens() {
    return this.stored.tokens;
  },
  saveTokens(tokens) {
    this.stored.tokens = tokens;
  },
  redirectToAuthorization(authorizationUrl) {
    this.stored.authorizationUrl = authorizationUrl;
  },
  saveCodeVerifier(verifier) {
    this.stored.verifier = verifier;
  },
  codeVerifier() {
    return this.stored.verifier;
  },
};

// 1. Unauthorized: the SDK discovers, registers and asks for the human's authorization.
const first = new Client({ name: "cloud-api-oauth", version: "1.0.0" });
await assert.rejects(
  first.connect(new StreamableHTTPClientTransport(url, { authProvider: provider })),
  UnauthorizedError,
);
const authorizationUrl = provider.stored.authorizationUrl;
assert.ok(authorizationUrl, "the SDK sent no one to authorize");
assert.equal(authorizationUrl.searchParams.get("code_challenge_method"), "S256");
assert.equal(authorizationUrl.searchParams.get("resource"), url.href);
show("registered and sent to authorize", {
  clientId: provider.stored.client.client_id,
  authorize: `${authorizationUrl.origin}${authorizationUrl.pathname}`,
});

// 2. The human, in Chromium: the consent page, the wallet's sign-in, a policy, connect.
const browser = await puppeteer.launch({
  executablePath: CHROMIUM,
  headless: true,
  args: ["--no-sandbox", "--disable-dev-shm-usage"],
});
try {
  const page = await browser.newPage();
  page.setDefaultNavigationTimeout(90000);
  await page.exposeFunction("__testWallet", async (method, params = []) => {
    switch (method) {
      case "eth_requestAccounts":
      case "eth_accounts":
        return [human.address];
      case "eth_chainId":
        return "0x14a34";
      case "personal_sign":
        return human.signMessage({ message: { raw: params[0] } });
      default:
        throw new Error(`the test wallet does not support ${method}`);
    }
  });
  await page.evaluateOnNewDocument(() => {
    window.ethereum = { request: ({ method, params }) => window.__testWallet(method, params) };
  });
  page.on("pageerror", (error) => console.error(`page error: ${error.message}`));
  await page.goto(authorizationUrl.href, { waitUntil: "networkidle0" });
  assert.match(page.url(), /\/#connect\?/, "the authorization request did not reach the console");
  await page.waitForSelector("#connect-note");
  await page.click("#sign-in");
  await page.waitForSelector("#approve-connect", { timeout: 30000 });
  const shown = await page.$eval("#client", (el) => el.textContent);
  assert.match(shown, /Conformance assistant/);
  assert.match(shown, new RegExp(`this computer \\(127\\.0\\.0\\.1:${callback.address().port}\\)`));
  for (const scope of ["delete", "webhooks"]) {
    await page.$eval(`#connect input[value=${scope}]`, (box) => {
      box.checked = false;
    });
  }
  await page.type("#connect input[name=maxActiveServers]", "2");
  await page.click("#approve-connect");
  const response = await answer;
  assert.equal(response.state, STATE);
  assert.equal(response.iss, url.origin);
  assert.match(response.code, /^mcp_ac_[0-9a-f]{64}$/);
  show("consented in the console", { scopesLeftOut: ["delete", "webhooks"], policy: "2 servers" });
} finally {
  await browser.close();
  callback.close();
}

// 3. The code for tokens, then MCP with them: a paid provision_server.
const transport = new StreamableHTTPClientTransport(url, { authProvider: provider });
await transport.finishAuth((await answer).code);
const tokens = provider.stored.tokens;
assert.match(tokens.access_token, /^mcp_at_/);
assert.match(tokens.refresh_token, /^mcp_rt_/);
assert.equal(tokens.scope.split(" ").includes("delete"), false);
const client = new Client({ name: "cloud-api-oauth", version: "1.0.0" });
await client.connect(new StreamableHTTPClientTransport(url, { authProvider: provider }));
const { tools } = await client.listTools();
show("connected with the access token", { tools: tools.length, expiresIn: tokens.expires_in });

async function call(name, args, meta) {
  const result = await client.callTool({ name, arguments: args, ...(meta ? { _meta: meta } : {}) });
  return result;
}
const { projects } = (await call("list_projects", {})).structuredContent;
const args = {
  projectId: projects[0].id,
  plan: process.env.PLAN ?? "B1-1-1gb-20s-shared",
  region: process.env.REGION ?? "LT-Siauliai",
  hostname: "mcp-oauth",
};
const asked = await call("provision_server", args);
assert.ok(asked.isError && asked.structuredContent?.accepts?.length, JSON.stringify(asked));
const payments = new x402Client().setSpendControls({ maxAmountPerPayment: "$25" });
registerExactEvmScheme(payments, { signer: payer });
const payload = await payments.createPaymentPayload(asked.structuredContent);
// The paid call as a task (MCP 2025-11-25): created at once, polled until the server is ready.
const statuses = [];
let paid;
const stream = client.experimental.tasks.callToolStream({
  name: "provision_server",
  arguments: args,
  _meta: { "x402/payment": payload },
});
for await (const message of stream) {
  if (["taskCreated", "taskStatus"].includes(message.type)) statuses.push(message.task.status);
  if (message.type === "result") paid = message.result;
  if (message.type === "error") throw message.error;
}
assert.equal(statuses[0], "working", JSON.stringify(statuses));
assert.ok(paid && !paid.isError, JSON.stringify(paid));
assert.ok(paid._meta?.["io.modelcontextprotocol/related-task"]?.taskId, JSON.stringify(paid._meta));
const settlement = paid._meta?.["x402/payment-response"];
assert.equal(settlement?.success, true, JSON.stringify(paid._meta));
const sandbox = await call("get_sandbox", { sandboxId: paid.structuredContent.sandboxId });
assert.equal(sandbox.structuredContent.stage, "ready", JSON.stringify(sandbox));
show("provision_server (paid with the OAuth grant's key, followed as a task)", {
  server: paid.structuredContent.server?.hostname,
  statuses,
  stage: sandbox.structuredContent.stage,
  transaction: settlement.transaction,
});
// The grant's key lacks `delete`: the tool says so.
const refused = await call("delete_server", { serverId: paid.structuredContent.server.id });
assert.equal(refused.structuredContent?.status, 403, JSON.stringify(refused));
await client.close();
console.log("== done");
