//! The service's library: every rule of the API lives here, in a named module.
//!
//! Data flows one way (design brief §1): an API Gateway event reaches a thin binary in
//! `functions/<group>`, which parses and admits it by its row of the route table ([`api`],
//! through `faces::router`), validates with [`validate`], and calls the domain, grouped by
//! subdomain: [`identity`] (sessions, keys, agents), [`ratelimit`] (limits and spend),
//! [`billing`] (payments and the paid [`billing::order`]), [`servers`] (a server's life:
//! provisioning, actions, leases, records, the refresher and the sweep) and [`notifications`]
//! (events, webhook endpoints and their deliveries). The domain uses the [`store`] (DynamoDB),
//! the [`upstream`] provider client and [`x402`] (facilitator, chain), on one [`clock`], and
//! answers. Errors are typed ([`error::ApiError`]) and become HTTP responses in one place,
//! `faces::http::serve`. The scheduled [`reconciler`] drives paid orders past their lease and
//! paid servers' leases.

#![warn(missing_docs)]

pub mod api;
pub mod billing;
pub mod cache;
pub mod error;
pub mod identity;
pub mod ids;
pub mod notifications;
pub mod page;
pub mod pricing;
pub mod ratelimit;
pub mod reconciler;
pub mod servers;
pub mod state;
pub mod validate;

// The layers below, crates of their own (`crates/`), at the paths the library has always named
// them by (`crate::time`, `domain::store`, …).
pub use base::{
    address, checkpoint, clock, deadline, destination, metrics, money, outbound, policy, secrets,
    time,
};
pub use outside::{config, upstream, x402};
pub use store;

pub use error::ApiError;
pub use state::AppState;
