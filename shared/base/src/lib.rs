//! The library's first layer (`docs/architecture.md`): facts with no rules of the service — the
//! clock and RFC 3339 times ([`time`], [`clock`]), USDC amounts ([`money`]), a request's
//! [`deadline`], an owner's [`address`], the one [`outbound`] HTTP client and where a request to
//! a URL a user chose may go ([`destination`]), [`secrets`] read on first use, a key's scopes
//! and spend [`policy`] as values, [`checkpoint`]s and [`metrics`].
//!
//! A crate of its own, so that nothing here can reach up: it depends on no other crate of the
//! workspace.

#![warn(missing_docs)]

pub mod address;
pub mod checkpoint;
pub mod clock;
pub mod deadline;
pub mod destination;
pub mod metrics;
pub mod money;
pub mod outbound;
pub mod policy;
pub mod secrets;
pub mod time;
