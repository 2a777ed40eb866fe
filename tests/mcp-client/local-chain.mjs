// The local rails' chain as the clients of this folder see it: Base Sepolia's chain id on anvil,
// and Solady's ERC-4337 smart account from the rails' factory, as viem's `toSoladySmartAccount`
// drives it.

import { createPublicClient, createWalletClient, defineChain, http, parseAbi } from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { toSoladySmartAccount } from "viem/account-abstraction";

/** Base Sepolia's USDC (Circle's FiatTokenV2_2 on the rails). */
export const USDC = "0x036CbD53842c5426634e7929541eC2318f3dCF7e";

/** A public and a wallet client of the chain at `rpcUrl`. */
export function localChain(rpcUrl) {
  const chain = defineChain({
    id: 84532,
    name: "Base Sepolia (local anvil)",
    nativeCurrency: { name: "Ether", symbol: "ETH", decimals: 18 },
    rpcUrls: { default: { http: [rpcUrl] } },
  });
  return {
    chain,
    client: createPublicClient({ chain, transport: http(rpcUrl), pollingInterval: 100 }),
    wallet: createWalletClient({ chain, transport: http(rpcUrl), pollingInterval: 100 }),
  };
}

/** `owner`'s smart account from `factoryAddress`, not deployed yet: the account and its salt
 * (Solady's factory derives the address from the salt alone: the owner in its upper 160 bits). */
export async function smartAccount({ client, owner, factoryAddress }) {
  const salt = `${owner.address}${"00".repeat(12)}`;
  return { account: await toSoladySmartAccount({ client, owner, factoryAddress, salt }), salt };
}

/** Deploys `owner`'s smart account through the factory, paying gas with `gasKey`. */
export async function deploySmartAccount({ client, wallet, owner, factoryAddress, salt, gasKey }) {
  const hash = await wallet.writeContract({
    account: privateKeyToAccount(gasKey),
    address: factoryAddress,
    abi: parseAbi(["function createAccount(address owner, bytes32 salt) payable returns (address)"]),
    functionName: "createAccount",
    args: [owner.address, salt],
  });
  await client.waitForTransactionReceipt({ hash });
}
