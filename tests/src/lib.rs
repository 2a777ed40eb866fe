//! Test doubles and the end-to-end harness.
//!
//! - [`sim`]: the upstream provider simulator (also what `make dev` runs as `upstream-sim`).
//! - [`facilitator`]: the development x402 facilitator (`make dev` runs it as `dev-facilitator`),
//!   on [`chain`], the development payment network it settles on and serves a node of.
//! - [`receiver`]: a webhook receiver that verifies each delivery's signature, and can fail or
//!   hang.
//!
//! The end-to-end tests (`tests/e2e/`) build the real state against moto's DynamoDB and this
//! simulator, and send API Gateway payload 2.0 events through the real handlers.

#![warn(missing_docs)]

pub mod chain;
pub mod facilitator;
pub mod receiver;
pub mod sim;
