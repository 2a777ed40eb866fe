// SPDX-License-Identifier: MIT
pragma solidity ^0.8.4;

// A smart wallet as wallets deploy it: Solady's ERC-4337 account (ERC-1271 signatures through
// ERC-7739, as viem's `toSoladySmartAccount` signs them) behind minimal ERC-1967 proxies made by
// Solady's ERC4337Factory (solady 0.0.288: the `createAccount(owner, salt)` viem calls). The
// local rails deploy both, and let x402's facilitator call the factory for ERC-6492 signatures.
import {ERC4337} from "solady/accounts/ERC4337.sol";
import {ERC4337Factory} from "solady/accounts/ERC4337Factory.sol";

contract SmartWallet is ERC4337 {
    function _domainNameAndVersion()
        internal
        pure
        override
        returns (string memory, string memory)
    {
        return ("SmartWallet", "1");
    }
}
