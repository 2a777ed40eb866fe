// The wallet in the page: any EIP-1193 provider at `window.ethereum` (browser wallets, embedded
// wallets). Sign-In with Ethereum (EIP-4361, signed with `personal_sign`, EIP-191) and the x402
// `exact` payment (an EIP-3009 `TransferWithAuthorization`, signed with `eth_signTypedData_v4`,
// EIP-712). Hashing for EIP-55 is the vendored @noble/hashes keccak.

import { keccak_256 } from './sha3.js';

/** The provider, or an error saying none is in the page. */
export function provider() {
  if (!window.ethereum || typeof window.ethereum.request !== 'function') {
    throw new Error(
      'No wallet found in this browser: install or unlock an Ethereum wallet, then reload.',
    );
  }
  return window.ethereum;
}

const hex = (bytes) => Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');

/** `address` in its EIP-55 mixed-case checksum form. */
export function checksum(address) {
  const lower = address.toLowerCase().replace(/^0x/, '');
  if (!/^[0-9a-f]{40}$/.test(lower)) throw new Error(`not an address: ${address}`);
  const hash = hex(keccak_256(new TextEncoder().encode(lower)));
  let out = '0x';
  for (let i = 0; i < 40; i += 1) {
    out += parseInt(hash[i], 16) >= 8 ? lower[i].toUpperCase() : lower[i];
  }
  return out;
}

/** Asks the wallet for its account: the EIP-55 address. */
export async function account() {
  const accounts = await provider().request({ method: 'eth_requestAccounts' });
  if (!accounts || !accounts.length) throw new Error('The wallet shared no account.');
  return checksum(accounts[0]);
}

/** The wallet's chain id, a number. */
export async function chainId() {
  return Number.parseInt(await provider().request({ method: 'eth_chainId' }), 16);
}

/**
 * The EIP-4361 message for this page: domain = this host (no scheme), URI = this origin,
 * version 1, the wallet's chain, the server's nonce, issued now; `statement` (one line) and
 * `resources` (URIs: an approval's `urn:approval:<id>`) when given.
 */
export function siweMessage({
  address,
  chain,
  nonce,
  issuedAt = new Date().toISOString(),
  statement = 'Sign in to the cloud API console.',
  resources = [],
}) {
  return [
    `${window.location.host} wants you to sign in with your Ethereum account:`,
    address,
    '',
    statement,
    '',
    `URI: ${window.location.origin}`,
    'Version: 1',
    `Chain ID: ${chain}`,
    `Nonce: ${nonce}`,
    `Issued At: ${issuedAt}`,
    ...(resources.length ? ['Resources:', ...resources.map((r) => `- ${r}`)] : []),
  ].join('\n');
}

/** Signs `message` (text) with `personal_sign`: the 65-byte signature, hex. */
export async function personalSign(address, message) {
  const data = `0x${hex(new TextEncoder().encode(message))}`;
  return provider().request({ method: 'personal_sign', params: [data, address] });
}

/**
 * Pays `required` (a decoded v2 `PAYMENT-REQUIRED`) from `address`: picks its first `exact`
 * offer, has the wallet sign an EIP-3009 authorization of its amount to its `payTo`, valid from
 * ten minutes ago to `maxTimeoutSeconds` from now, with a random nonce. Resolves to the v2
 * payment payload to send in `PAYMENT-SIGNATURE`.
 */
export async function pay(address, required) {
  const offer = (required.accepts || []).find((a) => a.scheme === 'exact');
  if (!offer) throw new Error('The payment request offers no exact payment.');
  const chain = Number(offer.network.split(':')[1]);
  const now = Math.floor(Date.now() / 1000);
  const nonce = `0x${hex(crypto.getRandomValues(new Uint8Array(32)))}`;
  const authorization = {
    from: address,
    to: checksum(offer.payTo),
    value: String(offer.amount),
    validAfter: String(now - 600),
    validBefore: String(now + Number(offer.maxTimeoutSeconds || 60)),
    nonce,
  };
  const typedData = {
    types: {
      EIP712Domain: [
        { name: 'name', type: 'string' },
        { name: 'version', type: 'string' },
        { name: 'chainId', type: 'uint256' },
        { name: 'verifyingContract', type: 'address' },
      ],
      TransferWithAuthorization: [
        { name: 'from', type: 'address' },
        { name: 'to', type: 'address' },
        { name: 'value', type: 'uint256' },
        { name: 'validAfter', type: 'uint256' },
        { name: 'validBefore', type: 'uint256' },
        { name: 'nonce', type: 'bytes32' },
      ],
    },
    primaryType: 'TransferWithAuthorization',
    domain: {
      name: offer.extra && offer.extra.name,
      version: offer.extra && offer.extra.version,
      chainId: chain,
      verifyingContract: checksum(offer.asset),
    },
    message: authorization,
  };
  const signature = await provider().request({
    method: 'eth_signTypedData_v4',
    params: [address, JSON.stringify(typedData)],
  });
  return {
    x402Version: 2,
    resource: required.resource,
    accepted: offer,
    payload: { signature, authorization },
  };
}
