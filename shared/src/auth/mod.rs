//! Who is calling (design brief §3, Identity). A request is authenticated into a [`Principal`]:
//! the owner's wallet address, and the API key that proved it.

pub mod address;
pub mod api_key;

use lambda_http::Request;

use crate::error::ApiError;
use crate::state::AppState;

/// An authenticated caller.
#[derive(Debug, Clone, PartialEq)]
pub struct Principal {
    /// The owner's wallet address, lowercase `0x` + 40 hex. Every record is owned by one.
    pub owner: String,
    /// The id (`key_…`) of the API key that authenticated the request.
    pub key_id: String,
}

/// Authenticates a request by its API key (`X-API-Key: svc_…`, or `Authorization: Bearer svc_…`).
///
/// Errors: 401 [`ApiError::Unauthorized`] — one generic answer for a missing, malformed,
/// unknown, revoked or expired key; 500 when the store fails.
pub async fn authenticate(state: &AppState, req: &Request) -> Result<Principal, ApiError> {
    api_key::authenticate(&state.store, req.headers()).await
}
