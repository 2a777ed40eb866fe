//! Agents (design brief §2): named principals linked to one API key, `active` or `inactive`.
//! A signed-in owner registers one for any of their keys; an agent holding a key registers
//! itself under that key. Revoking the key makes its agents inactive in the same transaction
//! ([`crate::store::agents`]).

use serde::Deserialize;

use crate::error::ApiError;
use crate::identity::auth::{Credential, Principal};
use crate::ids;
use crate::state::AppState;
use crate::store::agents::{ACTIVE, AgentRecord, INACTIVE, MAX_AGENTS_PER_KEY};
use crate::store::{Page, StoreError};

/// Why an agent is inactive when its key has expired.
pub const REASON_KEY_EXPIRED: &str = "key expired";

/// The body of `POST /api/agents`: `name` (1-64 characters) and, with a session, `keyId` — one
/// of the caller's keys. With an API key, `keyId` may be left out (or must name that key).
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NewAgent {
    /// A name.
    pub name: String,
    /// The key the agent acts with.
    #[serde(default)]
    pub key_id: Option<String>,
}

/// An agent as answered: the record (`crate::store::agents::AgentRecord`) with its owner in
/// EIP-55.
#[derive(Debug, Clone, PartialEq, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Agent {
    /// `agt_<32 hex>`.
    pub id: String,
    /// The owner.
    pub owner: crate::address::Checksummed,
    /// The API key it acts with (`key_…`).
    pub key_id: String,
    /// A name.
    pub name: String,
    /// `active` or `inactive`.
    pub status: String,
    /// When it was registered.
    pub created_at: crate::time::Timestamp,
    /// When it became inactive.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deactivated_at: Option<crate::time::Timestamp>,
    /// Why it became inactive.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deactivation_reason: Option<String>,
}

impl From<AgentRecord> for Agent {
    fn from(agent: AgentRecord) -> Agent {
        Agent {
            owner: agent.owner.checksummed(),
            id: agent.id,
            key_id: agent.key_id,
            name: agent.name,
            status: agent.status,
            created_at: agent.created_at,
            deactivated_at: agent.deactivated_at,
            deactivation_reason: agent.deactivation_reason,
        }
    }
}

/// Registers an agent for `principal`.
///
/// The route's row asks a key for `act` before this runs (`domain::api`: a read-only key writes
/// nothing).
///
/// Errors: 400 (`name`, `keyId`) malformed or missing; 404 unknown key; 403 another owner's key, or a
/// key naming a key other than itself; 409 revoked or expired key, or one with
/// [`MAX_AGENTS_PER_KEY`] agents already.
pub async fn register(
    state: &AppState,
    principal: &Principal,
    request: NewAgent,
) -> Result<Agent, ApiError> {
    let name = crate::validate::name("name", &request.name)?;
    let key_id = match (&principal.credential, request.key_id.as_deref()) {
        (Credential::ApiKey { key_id, .. }, None) => key_id.clone(),
        (Credential::ApiKey { key_id, .. }, Some(given)) => {
            ids::parse(ids::API_KEY, "keyId", given)?;
            if given != key_id {
                return Err(ApiError::Forbidden(
                    "an API key can only register agents for itself".into(),
                ));
            }
            key_id.clone()
        }
        (Credential::Session { .. }, None) => {
            return Err(ApiError::invalid("keyId", "is required with a session"));
        }
        (Credential::Session { .. }, Some(given)) => {
            ids::parse(ids::API_KEY, "keyId", given)?.to_owned()
        }
    };
    let key = state
        .store
        .api_key_by_id(&key_id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no key {key_id}")))?;
    if key.owner != principal.owner {
        return Err(ApiError::Forbidden(format!(
            "key {key_id} does not belong to the caller"
        )));
    }
    let now = state.clock.datetime();
    match key.status(now) {
        "active" => {}
        status => return Err(ApiError::Conflict(format!("key {key_id} is {status}"))),
    }
    let agent = AgentRecord {
        id: ids::new(ids::AGENT),
        owner: principal.owner.clone(),
        key_id: key.id.clone(),
        name: name.to_owned(),
        status: ACTIVE.into(),
        created_at: crate::time::Timestamp::of(now),
        deactivated_at: None,
        deactivation_reason: None,
    };
    match state
        .store
        .register_agent(&key.key_hash, &agent, &crate::time::rfc3339(now))
        .await
    {
        Ok(()) => Ok(agent.into()),
        Err(StoreError::ConditionFailed) => Err(ApiError::Conflict(format!(
            "key {key_id} is revoked, expired, or already has {MAX_AGENTS_PER_KEY} agents"
        ))),
        Err(err) => Err(err.into()),
    }
}

/// The agent `id` of `principal`.
///
/// Errors: 400 malformed id; 404 unknown; 403 another owner's.
pub async fn get(state: &AppState, principal: &Principal, id: &str) -> Result<Agent, ApiError> {
    ids::parse(ids::AGENT, "id", id)?;
    let agent = state
        .store
        .agent(id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no agent {id}")))?;
    if agent.owner != principal.owner {
        return Err(ApiError::Forbidden(format!(
            "agent {id} does not belong to the caller"
        )));
    }
    Ok(as_of_key(state, vec![agent]).await?.remove(0).into())
}

/// Agents as their keys make them now: an active agent whose key has expired is answered
/// `inactive`, deactivated at the key's `expiresAt` with reason [`REASON_KEY_EXPIRED`] (a
/// revocation deactivates agents in the store; an expiry happens without a write). One read per
/// distinct key.
async fn as_of_key(
    state: &AppState,
    mut agents: Vec<AgentRecord>,
) -> Result<Vec<AgentRecord>, ApiError> {
    let now = state.clock.datetime();
    let mut keys = std::collections::BTreeMap::new();
    for agent in agents.iter_mut().filter(|a| a.status == ACTIVE) {
        if !keys.contains_key(&agent.key_id) {
            let key = state.store.api_key_by_id(&agent.key_id).await?;
            keys.insert(agent.key_id.clone(), key);
        }
        if let Some(Some(key)) = keys.get(&agent.key_id)
            && key.status(now) == "expired"
        {
            agent.status = INACTIVE.into();
            agent.deactivated_at = key.expires_at;
            agent.deactivation_reason = Some(REASON_KEY_EXPIRED.into());
        }
    }
    Ok(agents)
}

/// One page of the caller's agents, newest first (`limit` 1-100, default 50; `cursor`).
pub async fn list(
    state: &AppState,
    principal: &Principal,
    page: &crate::page::PageRequest,
) -> Result<Page<Agent>, ApiError> {
    let page = state
        .store
        .agents_of(&principal.owner, page.limit, page.cursor())
        .await?;
    Ok(Page {
        items: as_of_key(state, page.items)
            .await?
            .into_iter()
            .map(Agent::from)
            .collect(),
        next_cursor: page.next_cursor,
    })
}
