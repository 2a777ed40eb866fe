//! The service's library: every rule of the API lives here, in a named module.
//!
//! Data flows one way (design brief §1): an API Gateway event reaches a thin binary in
//! `functions/<group>`, which parses, authenticates and validates with [`http`], [`auth`] and
//! [`validate`], calls the domain logic ([`discovery`], [`servers`] — whose paid path is an
//! [`order`]: a state machine over [`purchase`], [`payments`] and [`leases`] —, [`sandboxes`])
//! that uses the [`store`] (DynamoDB), the [`upstream`] provider client and [`x402`]
//! (facilitator, chain), on one [`clock`], and answers. Errors are typed
//! ([`error::ApiError`]) and become HTTP responses in one place, [`http::serve`]. The scheduled
//! [`reconciler`] drives paid orders past their lease and paid servers' leases.

#![warn(missing_docs)]

pub mod agents;
pub mod api;
pub mod auth;
pub mod cache;
pub mod console;
pub mod discovery;
pub mod error;
pub mod events;
pub mod http;
pub mod ids;
pub mod keys;
pub mod leases;
pub mod openapi;
pub mod order;
pub mod ownership;
pub mod page;
pub mod payments;
pub mod pricing;
pub mod probe;
pub mod purchase;
pub mod ratelimit;
pub mod reconciler;
pub mod refresher;
pub mod router;
pub mod sandboxes;
pub mod servers;
pub mod stages;
pub mod state;
pub mod sweep;
pub mod validate;
pub mod webhooks;

// The layers below, crates of their own (`crates/`), at the paths the library has always named
// them by (`crate::time`, `shared::store`, …).
pub use store;
pub use values::{
    address, checkpoint, clock, deadline, destination, metrics, money, outbound, policy, secrets,
    time,
};
pub use wire::{config, upstream, x402};

pub use error::ApiError;
pub use state::AppState;
