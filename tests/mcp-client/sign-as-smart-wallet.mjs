// Signs an x402 `exact` authorization (EIP-3009 TransferWithAuthorization on Base Sepolia's
// USDC) as a deployed smart wallet, the way a wallet does it: Solady's ERC-4337 account from the
// local rails' factory, made for a fresh owner, signing through viem's `toSoladySmartAccount`
// (ERC-1271 with ERC-7739's nested typed data). For the contract table of the Rust tests
// (`doubles_agree_with_the_rails.rs`).
//
// Environment: RPC_URL, SMART_WALLET_FACTORY, GAS_KEY (a funded key that deploys the account);
// AUTHORIZATION: JSON {to, value, validAfter, validBefore, nonce} (decimal strings, hex nonce).
// Prints one JSON line: {from, signature}.

import { createPublicClient, createWalletClient, defineChain, http, parseAbi } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { toSoladySmartAccount } from "viem/account-abstraction";

const rpcUrl = process.env.RPC_URL;
const factoryAddress = process.env.SMART_WALLET_FACTORY;
const authorization = JSON.parse(process.env.AUTHORIZATION);
const chain = defineChain({
  id: 84532,
  name: "Base Sepolia (local anvil)",
  nativeCurrency: { name: "Ether", symbol: "ETH", decimals: 18 },
  rpcUrls: { default: { http: [rpcUrl] } },
});
const client = createPublicClient({ chain, transport: http(rpcUrl), pollingInterval: 100 });
const wallet = createWalletClient({ chain, transport: http(rpcUrl), pollingInterval: 100 });
const owner = privateKeyToAccount(generatePrivateKey());
// Solady's factory derives the address from the salt alone: the owner in its upper 160 bits.
const salt = `${owner.address}${"00".repeat(12)}`;
const account = await toSoladySmartAccount({ client, owner, factoryAddress, salt });
const hash = await wallet.writeContract({
  account: privateKeyToAccount(process.env.GAS_KEY),
  address: factoryAddress,
  abi: parseAbi(["function createAccount(address owner, bytes32 salt) payable returns (address)"]),
  functionName: "createAccount",
  args: [owner.address, salt],
});
await client.waitForTransactionReceipt({ hash });
const signature = await account.signTypedData({
  domain: {
    name: "USDC",
    version: "2",
    chainId: 84532,
    verifyingContract: "0x036CbD53842c5426634e7929541eC2318f3dCF7e",
  },
  types: {
    TransferWithAuthorization: [
      { name: "from", type: "address" },
      { name: "to", type: "address" },
      { name: "value", type: "uint256" },
      { name: "validAfter", type: "uint256" },
      { name: "validBefore", type: "uint256" },
      { name: "nonce", type: "bytes32" },
    ],
  },
  primaryType: "TransferWithAuthorization",
  message: {
    from: account.address,
    to: authorization.to,
    value: BigInt(authorization.value),
    validAfter: BigInt(authorization.validAfter),
    validBefore: BigInt(authorization.validBefore),
    nonce: authorization.nonce,
  },
});
console.log(JSON.stringify({ from: account.address, signature }));
