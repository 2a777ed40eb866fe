//! Whose a server is: the ownership record written when the service provisioned it, the one
//! thing that lets a caller act on, renew, delete or describe a server, or link a sandbox
//! record to it.

use crate::error::ApiError;
use crate::identity::auth::Principal;
use crate::state::AppState;
use crate::store::sandboxes::ServerOwnership;

/// The ownership record of `server`, if `principal` owns it.
///
/// Errors: 403 when the server was not provisioned here by this owner (another owner's, or
/// never provisioned through the service).
pub async fn authorize(
    state: &AppState,
    principal: &Principal,
    server: u64,
) -> Result<ServerOwnership, ApiError> {
    match state.store.server_ownership(server).await? {
        Some(ownership) if ownership.owner == principal.owner => Ok(ownership),
        _ => Err(ApiError::Forbidden(format!(
            "server {server} does not belong to the caller"
        ))),
    }
}

/// The upgrade step `svcctl index-servers`: indexes, under their owner, the ownership records
/// written before the server listing read ownerships alone. Idempotent; returns how many it
/// indexed.
///
/// Errors: 500 when the store fails.
pub async fn index_all(store: &impl crate::state::StoreHandle) -> Result<usize, ApiError> {
    Ok(store
        .store(crate::state::Sealed::key())
        .index_server_ownerships()
        .await?)
}
