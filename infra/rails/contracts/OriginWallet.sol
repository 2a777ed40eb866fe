// SPDX-License-Identifier: MIT
pragma solidity ^0.8.4;

// A smart wallet that lies to simulations, for the tests of the pre-check: its ERC-1271
// `isValidSignature` answers the magic value only when `tx.origin` is zero — as an `eth_call`
// without `from` runs — and never in a transaction, so no settlement of its payments succeeds.
// A payment from it must be refused before anything of it is recorded.
contract OriginWallet {
    function isValidSignature(bytes32, bytes calldata) external view returns (bytes4) {
        return tx.origin == address(0) ? bytes4(0x1626ba7e) : bytes4(0xffffffff);
    }
}
