// Signs an x402 `exact` authorization (EIP-3009 TransferWithAuthorization on Base Sepolia's
// USDC) as a deployed smart wallet, the way a wallet does it: Solady's ERC-4337 account from the
// local rails' factory, made for a fresh owner, signing through viem's `toSoladySmartAccount`
// (ERC-1271 with ERC-7739's nested typed data). For the contract table of the Rust tests
// (`doubles_agree_with_the_rails.rs`).
//
// Environment: RPC_URL, SMART_WALLET_FACTORY, GAS_KEY (a funded key that deploys the account);
// AUTHORIZATION: JSON {to, value, validAfter, validBefore, nonce} (decimal strings, hex nonce).
// Prints one JSON line: {from, signature}.

import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";

import { USDC, deploySmartAccount, localChain, smartAccount } from "./local-chain.mjs";

const factoryAddress = process.env.SMART_WALLET_FACTORY;
const authorization = JSON.parse(process.env.AUTHORIZATION);
const { client, wallet } = localChain(process.env.RPC_URL);
const owner = privateKeyToAccount(generatePrivateKey());
const { account, salt } = await smartAccount({ client, owner, factoryAddress });
const gasKey = process.env.GAS_KEY;
await deploySmartAccount({ client, wallet, owner, factoryAddress, salt, gasKey });
const signature = await account.signTypedData({
  domain: {
    name: "USDC",
    version: "2",
    chainId: 84532,
    verifyingContract: USDC,
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
