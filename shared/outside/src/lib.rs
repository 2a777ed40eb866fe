//! The library's second layer (`docs/architecture.md`): the [`config`]uration read at cold
//! start, the [`x402`] wire types with their offline verification and the facilitator and chain
//! clients, and the provider's client ([`upstream`]).
//!
//! A crate of its own over [`base`] only: the store and the rules above cannot be reached
//! from here.

#![warn(missing_docs)]

pub mod config;
pub mod upstream;
pub mod x402;

// The base layer, at the paths this crate's modules name it by (`crate::time`, …).
use base::{address, checkpoint, outbound, secrets, time};
