// An MCP client session against the API's `POST /mcp` with the official TypeScript SDK
// (@modelcontextprotocol/sdk: `Client.callTool` checks every `structuredContent` against the
// tool's `outputSchema`, error results included), paying a paid tool call by x402's MCP
// transport: the PaymentRequired comes as an error result's `structuredContent`, the payment
// payload (made by x402's own client, @x402/core + @x402/evm, signed with PRIVATE_KEY) goes
// in `_meta["x402/payment"]`, the settlement comes back in `_meta["x402/payment-response"]`.
//
// It lists the tools, gets a quote, is asked to pay, pays, waits for the server to be ready,
// renews it (asked to pay again, pays), and deletes it, printing each step; any SDK error (a result that breaks its output schema) fails it.
//
// With APPROVAL_KEY (a key whose policy refuses the plan), OWNER_PRIVATE_KEY (its owner's wallet)
// and OWNER_SESSION (a session of that owner), it first asks with that key as a client that
// declares URL-mode elicitation: the refusal must be MCP's URLElicitationRequiredError naming the
// approval; the owner signs it (an EIP-4361 message naming it, made by viem's createSiweMessage),
// and the same call then pays and gets its server.
// `make mcp-session KEY=svc_…` runs it after the Python session; so does the conformance run.
//
// Environment: MCP_URL (http://127.0.0.1:9000/mcp), API_KEY (required), PRIVATE_KEY (the payer:
// on make dev's rails one of anvil's funded accounts; a throwaway key by default), PLAN (B1-1-1gb-20s-shared), REGION (LT-Siauliai), MAX_USD (25: the most it
// pays; x402's client defaults to $1).

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ElicitRequestSchema, UrlElicitationRequiredError } from "@modelcontextprotocol/sdk/types.js";
import { createSiweMessage } from "viem/siwe";
import { x402Client } from "@x402/core/client";
import { registerExactEvmScheme } from "@x402/evm/exact/client";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";

const PAYMENT = "x402/payment";
const PAYMENT_RESPONSE = "x402/payment-response";

const url = process.env.MCP_URL ?? "http://127.0.0.1:9000/mcp";
const key = process.env.API_KEY;
if (!key) {
  console.error("API_KEY is required");
  process.exit(2);
}
const plan = process.env.PLAN ?? "B1-1-1gb-20s-shared";
const region = process.env.REGION ?? "LT-Siauliai";
const account = privateKeyToAccount(process.env.PRIVATE_KEY || generatePrivateKey());

function show(step, value) {
  console.log(`== ${step}`);
  console.log(JSON.stringify(value, null, 2).slice(0, 1500));
}

function fail(message) {
  console.error(`mcp session (TypeScript SDK): ${message}`);
  process.exit(1);
}

const payments = new x402Client().setSpendControls({
  maxAmountPerPayment: `$${process.env.MAX_USD ?? "25"}`,
});
registerExactEvmScheme(payments, { signer: account });

const client = new Client({ name: "cloud-api-ts-session", version: "1.0.0" });
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { "X-API-Key": key } },
});
await client.connect(transport);
const server = client.getServerVersion();
console.log(`== connected to ${server?.name} ${server?.version} (TypeScript SDK)`);
const { tools } = await client.listTools();
show("tools", tools.map((t) => t.name));

// A tool call that must succeed (the SDK has checked it against the tool's output schema).
async function call(name, args) {
  const result = await client.callTool({ name, arguments: args });
  if (result.isError) fail(`${name}: ${result.content?.[0]?.text}`);
  return result.structuredContent;
}

const { projects } = await call("list_projects", {});
const projectId = projects[0].id;

// The owner approves approval `id` of the API at `url`: a nonce, an EIP-4361 message whose
// Resources name it, signed by the owner's wallet, sent with the owner's session.
async function approve(elicitation) {
  const api = new URL(url);
  const owner = privateKeyToAccount(process.env.OWNER_PRIVATE_KEY);
  const { nonce } = await (await fetch(new URL("/api/auth/nonce", api))).json();
  const message = createSiweMessage({
    address: owner.address,
    chainId: 84532,
    domain: api.host,
    nonce,
    uri: api.origin,
    version: "1",
    statement: "Approve my agent's request.",
    resources: [`urn:approval:${elicitation.elicitationId}`],
  });
  const signature = await owner.signMessage({ message });
  const granted = await fetch(new URL(`/api/approvals/${elicitation.elicitationId}/grant`, api), {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${process.env.OWNER_SESSION}` },
    body: JSON.stringify({ message, signature }),
  });
  const answer = await granted.json();
  if (granted.status !== 200 || answer.state !== "granted") fail(`the grant: ${JSON.stringify(answer)}`);
  show("the owner approves", { id: answer.id, state: answer.state, request: answer.request.route });
}

if (process.env.APPROVAL_KEY) {
  const asker = new Client(
    { name: "cloud-api-ts-session-approvals", version: "1.0.0" },
    { capabilities: { elicitation: { form: {}, url: {} } } },
  );
  // Asked in band, it declines: the approval is the owner's, in the console.
  asker.setRequestHandler(ElicitRequestSchema, async () => ({ action: "decline" }));
  await asker.connect(
    new StreamableHTTPClientTransport(new URL(url), {
      requestInit: { headers: { "X-API-Key": process.env.APPROVAL_KEY } },
    }),
  );
  const args = { projectId, plan, region, hostname: "mcp-ts-approved" };
  let elicitation;
  try {
    await asker.callTool({ name: "provision_server", arguments: args });
    fail("a key over its policy was not asked for an approval");
  } catch (error) {
    if (!(error instanceof UrlElicitationRequiredError)) throw error;
    [elicitation] = error.elicitations;
  }
  show("provision_server over the key's policy (URL elicitation)", elicitation);
  if (elicitation?.mode !== "url" || !elicitation.url.endsWith(`#approvals/${elicitation.elicitationId}`))
    fail(`not the approval's URL: ${JSON.stringify(elicitation)}`);
  await approve(elicitation);
  // The agent's own view, through the SDK's output schema check.
  const waited = await asker.callTool({
    name: "wait_for_approval",
    arguments: { approvalId: elicitation.elicitationId, timeout: 0 },
  });
  if (waited.isError || waited.structuredContent.state !== "granted")
    fail(`wait_for_approval: ${JSON.stringify(waited)}`);
  const again = await asker.callTool({ name: "provision_server", arguments: args });
  if (!again.isError || !again.structuredContent?.accepts?.length)
    fail(`approved, no PaymentRequired: ${JSON.stringify(again)}`);
  const approvedPayload = await payments.createPaymentPayload(again.structuredContent);
  const bought = await asker.callTool({
    name: "provision_server",
    arguments: args,
    _meta: { [PAYMENT]: approvedPayload },
  });
  if (bought.isError) fail(`approved and paid: ${bought.content?.[0]?.text}`);
  show("provision_server, approved and paid", { sandboxId: bought.structuredContent.sandboxId });
  await asker.close();
}
const quote = await call("get_quote", { plan, region, projectId });
show("get_quote", { amount: quote.amount, amountUsd: quote.amountUsd, network: quote.network });

// x402's MCP transport: the first call answers the PaymentRequired as an error result (which
// the SDK must accept: the output schema admits it), the second carries the payment.
const args = { projectId, plan, region, hostname: "mcp-ts-session" };
const asked = await client.callTool({ name: "provision_server", arguments: args });
const required = asked.structuredContent;
if (!asked.isError || !required?.accepts?.length) fail(`no PaymentRequired: ${JSON.stringify(asked)}`);
show("provision_server (payment required)", {
  x402Version: required.x402Version,
  accepts: required.accepts.map((a) => ({ scheme: a.scheme, network: a.network, amount: a.amount })),
});
const payload = await payments.createPaymentPayload(required);
const paid = await client.callTool({ name: "provision_server", arguments: args, _meta: { [PAYMENT]: payload } });
if (paid.isError) fail(`provision_server (paid): ${paid.content?.[0]?.text}`);
const settlement = paid._meta?.[PAYMENT_RESPONSE];
const created = paid.structuredContent;
show("provision_server (paid)", {
  sandboxId: created.sandboxId,
  server: { id: created.server?.id, hostname: created.server?.hostname },
  [PAYMENT_RESPONSE]: settlement,
});
if (!settlement?.success) fail("the payment was not settled");
if (settlement.payer?.toLowerCase() !== account.address.toLowerCase()) fail("another payer settled");

// Ready (deployed, SSH answered): its first deployment is over, so it can be renewed.
let waited;
for (let i = 0; i < 9; i += 1) {
  waited = await call("wait_for_sandbox", {
    sandboxId: created.sandboxId,
    waitFor: ["ready", "failed"],
    timeout: 20,
  });
  if (waited.reached) break;
}
show("wait_for_sandbox", { stage: waited.stage, reached: waited.reached });
if (waited.stage !== "ready") fail("the server never became ready");

// renew_server is paid exactly like provision_server.
const renewal = { serverId: created.server.id, periods: 1 };
const renewAsked = await client.callTool({ name: "renew_server", arguments: renewal });
if (!renewAsked.isError || !renewAsked.structuredContent?.accepts?.length)
  fail(`renew_server: no PaymentRequired: ${JSON.stringify(renewAsked)}`);
const renewPayload = await payments.createPaymentPayload(renewAsked.structuredContent);
const renewed = await client.callTool({
  name: "renew_server",
  arguments: renewal,
  _meta: { [PAYMENT]: renewPayload },
});
if (renewed.isError) fail(`renew_server (paid): ${renewed.content?.[0]?.text}`);
show("renew_server (paid)", {
  renewal: renewed.structuredContent,
  [PAYMENT_RESPONSE]: renewed._meta?.[PAYMENT_RESPONSE],
});
if (!renewed._meta?.[PAYMENT_RESPONSE]?.success) fail("the renewal's payment was not settled");
if (!(renewed.structuredContent.paidUntil > waited.lease.paidUntil)) fail("paidUntil did not move");
show("delete_server", await call("delete_server", { serverId: created.server.id }));
await client.close();
