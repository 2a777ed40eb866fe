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

pub mod address;
pub mod agents;
pub mod api;
pub mod auth;
pub mod cache;
pub mod checkpoint;
pub mod clock;
pub mod config;
pub mod console;
pub mod deadline;
pub mod destination;
pub mod discovery;
pub mod error;
pub mod events;
pub mod http;
pub mod ids;
pub mod keys;
pub mod leases;
pub mod metrics;
pub mod money;
pub mod openapi;
pub mod order;
pub mod outbound;
pub mod ownership;
pub mod page;
pub mod payments;
pub mod policy;
pub mod pricing;
pub mod probe;
pub mod purchase;
pub mod ratelimit;
pub mod reconciler;
pub mod refresher;
pub mod router;
pub mod sandboxes;
pub mod secrets;
pub mod servers;
pub mod stages;
pub mod state;
pub mod store;
pub mod sweep;
pub mod time;
pub mod upstream;
pub mod validate;
pub mod webhooks;
pub mod x402;

pub use error::ApiError;
pub use state::AppState;
