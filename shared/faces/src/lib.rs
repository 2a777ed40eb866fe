//! The faces: the HTTP face of the library, above its domain (`domain`) and apart from it, so
//! that the compiler holds what a face may do. A face holds the state (`domain::AppState`) but
//! cannot reach its store (the domain's alone), so a store call from a face does not compile;
//! and nothing below imports a face, as no crate below depends on this one.
//!
//! [`router`] parses a request into its typed route by the route table (`domain::api`),
//! [`http`] authenticates at the door, runs a handler and turns its errors into problem+json
//! (one place), [`openapi`] writes the OpenAPI document from the route table, [`discovery`]
//! the documents that let agents find what is sold, [`oauth`] MCP's authorization metadata and
//! endpoints, and [`console`] serves the web console's files.
//!
//! A face that reaches for the store does not compile (`make test` runs this example):
//!
//! ```compile_fail,E0616
//! async fn count(state: &domain::AppState) -> usize {
//!     state.store.leases_due(0, 10).await.unwrap().len()
//! }
//! ```
//!
//! nor does one that opens a verb's store handle (its key is `domain`'s alone):
//!
//! ```compile_fail,E0423
//! use domain::state::{Sealed, StoreHandle};
//! fn store(state: &domain::AppState) -> &domain::store::Store {
//!     state.store(Sealed(()))
//! }
//! ```

#![warn(missing_docs)]

pub mod console;
pub mod discovery;
pub mod http;
pub mod oauth;
pub mod openapi;
pub mod router;
