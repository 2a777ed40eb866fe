// A smart wallet against the API on the real rails, as an embedded wallet's user would bring it:
// Solady's ERC-4337 account (the rails' factory), driven by viem's `toSoladySmartAccount`, whose
// signatures are ERC-1271 (ERC-7739) once deployed and ERC-6492 before. For one account deployed
// first and one not deployed yet, it
//   1. signs in with EIP-4361 (viem's createSiweMessage, signed by the account: the service
//      checks it on chain);
//   2. issues an API key with its session;
//   3. pays for a server with x402's official HTTP client (@x402/fetch with @x402/evm's exact
//      scheme, the account as its signer): the facilitator deploys the second account, then
//      settles; the USDC leaves the account.
// The conformance run runs it on its stack. Environment: API_URL (http://127.0.0.1:9000),
// RPC_URL (http://127.0.0.1:8545), SMART_WALLET_FACTORY (required: the rails print it), GAS_KEY
// (required: a funded key that deploys the first account), PROJECT (254871), PLAN
// (B1-1-1gb-20s-shared), REGION (LT-Siauliai).

import { wrapFetchWithPayment, x402Client, decodePaymentResponseHeader } from "@x402/fetch";
import { registerExactEvmScheme } from "@x402/evm/exact/client";
import { parseAbi } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { createSiweMessage } from "viem/siwe";

import { USDC, deploySmartAccount, localChain, smartAccount } from "./local-chain.mjs";

const api = process.env.API_URL ?? "http://127.0.0.1:9000";
const rpcUrl = process.env.RPC_URL ?? "http://127.0.0.1:8545";
const factoryAddress = process.env.SMART_WALLET_FACTORY;
const project = process.env.PROJECT ?? "254871";
const plan = process.env.PLAN ?? "B1-1-1gb-20s-shared";
const region = process.env.REGION ?? "LT-Siauliai";
if (!factoryAddress) {
  console.error("SMART_WALLET_FACTORY is required");
  process.exit(2);
}
/** Circle's roles on the local chain (infra/rails/rails.mjs), impersonated to mint. */
const CIRCLE = "0x0000000000000000000000000000000000c1c1e0";
const usdcAbi = parseAbi([
  "function mint(address to, uint256 amount)",
  "function balanceOf(address account) view returns (uint256)",
]);
const { chain, client, wallet } = localChain(rpcUrl);

function fail(message) {
  console.error(`smart wallet: ${message}`);
  process.exit(1);
}

async function json(response) {
  const text = await response.text();
  try {
    return JSON.parse(text);
  } catch {
    return { text };
  }
}

/** Mints `amount` USDC (atomic units) to `to`, as Circle's minter. */
async function fund(to, amount) {
  await client.request({ method: "anvil_impersonateAccount", params: [CIRCLE] });
  await client.request({ method: "anvil_setBalance", params: [CIRCLE, "0x56BC75E2D63100000"] });
  const hash = await wallet.writeContract({ account: CIRCLE, address: USDC, abi: usdcAbi, functionName: "mint", args: [to, amount] });
  await client.waitForTransactionReceipt({ hash });
}

/** Signs in as `account` (EIP-4361); the session token. */
async function signIn(account) {
  const { nonce } = await json(await fetch(`${api}/api/auth/nonce`));
  const url = new URL(api);
  const message = createSiweMessage({
    domain: url.host,
    address: account.address,
    statement: "Sign in to the cloud API.",
    uri: url.origin,
    version: "1",
    chainId: chain.id,
    nonce,
    issuedAt: new Date(),
  });
  const signature = await account.signMessage({ message });
  const answer = await fetch(`${api}/api/auth/verify`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ message, signature }),
  });
  const body = await json(answer);
  if (answer.status !== 200) fail(`sign-in answered ${answer.status}: ${JSON.stringify(body)}`);
  if (body.address.toLowerCase() !== account.address.toLowerCase()) fail(`signed in as ${body.address}`);
  return { token: body.token, signatureBytes: (signature.length - 2) / 2 };
}

async function run(deployed) {
  const owner = privateKeyToAccount(generatePrivateKey());
  const { account, salt } = await smartAccount({ client, owner, factoryAddress });
  const label = deployed ? "deployed (ERC-1271)" : "not deployed (ERC-6492)";
  if (deployed) {
    const gasKey = process.env.GAS_KEY;
    await deploySmartAccount({ client, wallet, owner, factoryAddress, salt, gasKey });
  }
  const code = await client.getCode({ address: account.address });
  if (Boolean(code && code !== "0x") !== deployed) fail(`${label}: the account's code is not as expected`);
  const { token, signatureBytes } = await signIn(account);
  console.log(`== ${label} ${account.address} signed in (a ${signatureBytes}-byte signature)`);
  const issued = await fetch(`${api}/api/keys/generate`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${token}` },
    body: JSON.stringify({ name: "smart-wallet-agent" }),
  });
  const { key } = await json(issued);
  if (!key) fail(`no key (${issued.status})`);
  const payments = new x402Client().setSpendControls({ maxAmountPerPayment: "$25" });
  registerExactEvmScheme(payments, { signer: account });
  const paying = wrapFetchWithPayment(fetch, payments);
  await fund(account.address, 100_000_000n);
  const before = await client.readContract({ address: USDC, abi: usdcAbi, functionName: "balanceOf", args: [account.address] });
  const answer = await paying(`${api}/api/cloud/servers/${project}`, {
    method: "POST",
    headers: { "content-type": "application/json", "x-api-key": key },
    body: JSON.stringify({ plan, region, hostname: deployed ? "smart-deployed" : "smart-counterfactual" }),
  });
  const server = await json(answer);
  if (answer.status !== 201) fail(`${label}: provisioning answered ${answer.status}: ${JSON.stringify(server)}`);
  const settlement = decodePaymentResponseHeader(answer.headers.get("payment-response"));
  if (!settlement.success) fail(`${label}: settlement ${JSON.stringify(settlement)}`);
  const after = await client.readContract({ address: USDC, abi: usdcAbi, functionName: "balanceOf", args: [account.address] });
  const deployedNow = await client.getCode({ address: account.address });
  if (!deployedNow || deployedNow === "0x") fail(`${label}: the account is still not deployed after paying`);
  console.log(
    `== ${label} paid ${before - after} USDC units for server ${server.id} (transaction ${settlement.transaction})`,
  );
}

await run(true);
await run(false);
console.log("== done");
