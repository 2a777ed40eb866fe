//! Test doubles and the end-to-end harness.
//!
//! - [`sim`]: the upstream provider simulator (also what `make dev` runs as `upstream-sim`).
//! - [`facilitator`]: the development x402 facilitator, on [`chain`], the development payment
//!   network it settles on and serves a node of: doubles for the seeded simulation and for faults
//!   no real component shows, held to the real rails (`make dev` and `make test` run anvil with
//!   Circle's USDC and x402's own facilitator) by `tests/e2e/doubles_agree_with_the_rails.rs`.
//! - [`receiver`]: a webhook receiver that verifies each delivery's signature, and can fail or
//!   hang.
//! - [`shell`]: an agent's SSH client (a key pair, a login that checks the host key).
//!
//! The end-to-end tests (`tests/e2e/`) build the real state against moto's DynamoDB and this
//! simulator, and send API Gateway payload 2.0 events through the real handlers.

#![warn(missing_docs)]

pub mod chain;
pub mod facilitator;
pub mod receiver;
pub mod sched;
pub mod shell;
pub mod sim;

/// A server running in the background; dropped, it stops listening (the seeded simulation makes
/// thousands of environments in one process).
#[derive(Debug)]
pub struct Serving(tokio::task::AbortHandle);

impl Serving {
    /// The guard of `task`.
    pub fn of<T>(task: &tokio::task::JoinHandle<T>) -> Self {
        Serving(task.abort_handle())
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        self.0.abort();
    }
}
