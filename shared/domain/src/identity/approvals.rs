//! Approvals (issue 35): the middle way between a key's policy and its owner. A paid request
//! (a new server, a renewal) that an API key's policy refuses — its plan, region, price per
//! server, daily or monthly spend, or server count; never its scopes, and never a revoked or
//! expired key, which do not get this far — is still answered 403 `policy-violation`, now with
//! an approval ([`ApprovalOffer`]): a URL that opens the console at it.
//!
//! - [`offer`] records it (owner, key, the digest of the exact request — its route and its
//!   validated body — the price, [`APPROVAL_SECONDS`] to live, single use), with an
//!   `approval.requested` event. The same request repeated while it is pending (or declined)
//!   gets the same approval; a key has at most [`MAX_PENDING_PER_KEY`] pending.
//! - The owner, signed in, grants it by signing an EIP-4361 message whose `Resources:` name it
//!   (`urn:approval:<id>`: [`grant`], checked like a sign-in — nonce, domain, URI, chain, times,
//!   an EOA's or a smart wallet's signature), or declines it ([`decline`]); each writes its event.
//! - The same request, repeated with the same key ([`approved`]), then passes the key's policy
//!   once, at no more than the price the owner saw: the grant rides on the caller
//!   ([`crate::identity::auth::Principal::approval`]) and is marked used in the transaction that
//!   claims the payment (and reserves its spend, counted as any other). Another request, another
//!   key, a second use or a lapsed grant meets the policy as before.
//! - The agent follows it with [`get`] / [`wait`] (a long-poll like a sandbox's).

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::error::ApiError;
pub use crate::identity::auth::Grant;
use crate::identity::auth::{Credential, Principal};
use crate::pricing::Quote;
use crate::state::AppState;
pub use crate::store::approvals::{ApprovalOffer, Status};
use crate::store::approvals::{
    ApprovalRecord, ApprovalRequest, ApprovalState, Refusal, SignedGrant,
};
use crate::store::events::{ApprovalFacts, EventData, Outbox, Subject, SubjectKind};

/// How long an approval can be granted and used, seconds (30 minutes).
pub const APPROVAL_SECONDS: i64 = 30 * 60;

/// The most approvals one key may have pending at once.
pub const MAX_PENDING_PER_KEY: usize = 5;

/// The prefix of the resource a grant's message names: `urn:approval:<id>`.
pub const RESOURCE_PREFIX: &str = "urn:approval:";

/// The resource a grant of approval `id` signs.
pub fn resource(id: &str) -> String {
    format!("{RESOURCE_PREFIX}{id}")
}

/// A paid request, as an approval names it.
#[derive(Debug, Clone)]
pub struct Asked<'a> {
    /// `provision` or `renewal`.
    pub what: &'static str,
    /// Method and path, e.g. `POST /api/cloud/servers/123`.
    pub route: String,
    /// The validated request, JSON (as its payment is bound to).
    pub request: &'a str,
    /// Its price.
    pub quote: &'a Quote,
    /// Region slug.
    pub region: &'a str,
    /// The server renewed.
    pub server_id: Option<u64>,
    /// The API's public base URL (the approval's link is `<base>/#approvals/<id>`).
    pub base: &'a str,
}

impl Asked<'_> {
    /// SHA-256 (hex) of `key_id`, the route and the request.
    fn digest(&self, key_id: &str) -> String {
        hex::encode(Sha256::digest(format!(
            "{key_id}\n{}\n{}",
            self.route, self.request
        )))
    }
}

/// An approval as its owner and its key see it.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalView {
    /// `apr_<32 hex>`.
    pub id: String,
    /// Where it is.
    pub state: Status,
    /// The console at this approval.
    pub url: String,
    /// What a grant's EIP-4361 message must name in its `Resources:` (`urn:approval:<id>`).
    pub resource: String,
    /// What was asked.
    pub request: ApprovalRequest,
    /// Why the key's policy refused it.
    pub reason: Refusal,
    /// The most the approved request may cost, USDC atomic units (the price when asked).
    pub amount: String,
    /// When it was asked, RFC 3339.
    pub created_at: crate::time::Timestamp,
    /// When it lapses unless granted and used.
    pub expires_at: crate::time::Timestamp,
    /// When the owner granted or declined it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decided_at: Option<crate::time::Timestamp>,
    /// When the approved request was made.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub used_at: Option<crate::time::Timestamp>,
    /// The order the approved request made (`ord_…`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub used_by: Option<String>,
}

impl ApprovalView {
    fn of(record: ApprovalRecord, now: i64) -> ApprovalView {
        ApprovalView {
            state: Status::of(&record, now),
            resource: resource(&record.id),
            id: record.id,
            url: record.url,
            request: record.request,
            reason: record.reason,
            amount: record.amount,
            created_at: record.created_at,
            expires_at: record.expires_at,
            decided_at: record.decided_at,
            used_at: record.used_at,
            used_by: record.used_by,
        }
    }
}

/// `principal`, carrying its owner's grant of `asked` when there is one it may use: the key's
/// approval of this very request is granted, still valid, and `asked` costs no more than the
/// owner saw. Otherwise `principal` as it is (a session has no policy to pass).
///
/// Errors: the store's.
pub async fn approved(
    state: &AppState,
    principal: &Principal,
    asked: &Asked<'_>,
) -> Result<Principal, ApiError> {
    let Credential::ApiKey { key_id, .. } = &principal.credential else {
        return Ok(principal.clone());
    };
    let digest = asked.digest(key_id);
    let now = state.clock.now();
    let Some(slot) = state.store.approval_slot(key_id, &digest).await? else {
        return Ok(principal.clone());
    };
    let record = match state.store.approval(&slot.approval_id).await? {
        Some(record) if Status::of(&record, now) == Status::Granted => record,
        _ => return Ok(principal.clone()),
    };
    let covers = record.amount.parse::<u128>().unwrap_or(0) >= asked.quote.atomic();
    if &record.key_id != key_id || record.digest != digest || !covers {
        return Ok(principal.clone());
    }
    Ok(Principal {
        approval: Some(Grant {
            id: record.id,
            digest,
        }),
        ..principal.clone()
    })
}

/// `err` as the answer to `asked`: a key's 403 `policy-violation` carrying its approval —
/// the key's pending (or declined) approval of this very request, or a new one, recorded with
/// its `approval.requested` event. Any other error, a session's, or a key with
/// [`MAX_PENDING_PER_KEY`] approvals pending, gets `err` as it is (the last saying why); so does
/// a store failure, which is logged.
pub async fn offer(
    state: &AppState,
    principal: &Principal,
    asked: &Asked<'_>,
    err: ApiError,
) -> ApiError {
    let ApiError::PolicyViolation {
        limit,
        remaining,
        message,
        approval: None,
    } = err
    else {
        return err;
    };
    let Credential::ApiKey {
        key_id, key_hash, ..
    } = &principal.credential
    else {
        return ApiError::PolicyViolation {
            limit,
            remaining,
            message,
            approval: None,
        };
    };
    let refusal = Refusal { limit, message };
    let key = (key_id.as_str(), key_hash.as_str());
    let (approval, message) = match open(state, principal, key, asked, &refusal).await {
        Ok(Some(offer)) => (Some(Box::new(offer)), refusal.message),
        Ok(None) => (
            None,
            format!(
                "{}; no approval was asked: this key has {MAX_PENDING_PER_KEY} approvals \
                pending (its owner sees them in the console)",
                refusal.message
            ),
        ),
        Err(err) => {
            tracing::error!(error = %err, "could not record an approval");
            (None, refusal.message)
        }
    };
    ApiError::PolicyViolation {
        limit: refusal.limit,
        remaining,
        message,
        approval,
    }
}

/// The key's pending or declined approval of `asked`, or a new one; `None` at the cap.
async fn open(
    state: &AppState,
    principal: &Principal,
    (key_id, key_hash): (&str, &str),
    asked: &Asked<'_>,
    refusal: &Refusal,
) -> Result<Option<ApprovalOffer>, ApiError> {
    let store = &state.store;
    let digest = asked.digest(key_id);
    let now = state.clock.now();
    for _ in 0..2 {
        let slot = store.approval_slot(key_id, &digest).await?;
        if let Some(slot) = &slot
            && let Some(record) = store.approval(&slot.approval_id).await?
            && matches!(Status::of(&record, now), Status::Pending | Status::Declined)
        {
            return Ok(Some(ApprovalOffer::of(&record, now)));
        }
        let live = store.live_approvals_of_key(key_id, now).await?;
        let pending = live
            .iter()
            .filter(|r| Status::of(r, now) == Status::Pending)
            .count();
        if pending >= MAX_PENDING_PER_KEY {
            return Ok(None);
        }
        let record = new_record(state, principal, key_hash, key_id, asked, refusal).await?;
        let outbox = events(&record, 0, EventData::ApprovalRequested);
        let replaces = slot.as_ref().map(|s| s.approval_id.as_str());
        if store.open_approval(&record, replaces, &outbox).await? {
            return Ok(Some(ApprovalOffer::of(&record, now)));
        }
        // Another refusal of the same request made one first: that one is answered.
    }
    Ok(None)
}

async fn new_record(
    state: &AppState,
    principal: &Principal,
    key_hash: &str,
    key_id: &str,
    asked: &Asked<'_>,
    refusal: &Refusal,
) -> Result<ApprovalRecord, ApiError> {
    let store = &state.store;
    let key_name = store
        .api_key_by_hash(key_hash)
        .await?
        .map(|key| key.name)
        .unwrap_or_default();
    let mut agents = Vec::new();
    for agent_id in store.agent_ids_of_key(key_hash).await? {
        if let Some(agent) = store.agent(&agent_id).await?
            && agent.status == crate::store::agents::ACTIVE
        {
            agents.push(agent.name);
        }
    }
    let id = crate::ids::new(crate::ids::APPROVAL);
    let created_at = state.clock.timestamp();
    let valid_until = created_at.unix() + APPROVAL_SECONDS;
    let quote = asked.quote;
    Ok(ApprovalRecord {
        url: format!("{}/#approvals/{id}", asked.base),
        owner: principal.owner.clone(),
        key_id: key_id.to_owned(),
        digest: asked.digest(key_id),
        request: ApprovalRequest {
            what: asked.what.to_owned(),
            route: asked.route.clone(),
            plan: quote.plan.clone(),
            region: asked.region.to_owned(),
            image: quote.image.clone(),
            periods: quote.periods,
            price: rust_decimal::prelude::ToPrimitive::to_f64(&quote.cost_usd).unwrap_or(0.0),
            server_id: asked.server_id,
            key: key_id.to_owned(),
            key_name,
            agents,
        },
        reason: refusal.clone(),
        amount: quote.atomic().to_string(),
        state: ApprovalState::Pending,
        created_at,
        expires_at: crate::time::Timestamp::from_unix(valid_until),
        valid_until,
        decided_at: None,
        grant: None,
        used_at: None,
        used_by: None,
        event_seq: 1,
        id,
    })
}

/// The outbox of `record`'s next event, `kind`, after its `read_seq`th.
fn events(record: &ApprovalRecord, read_seq: u64, kind: fn(ApprovalFacts) -> EventData) -> Outbox {
    let subject = Subject {
        kind: SubjectKind::Approval,
        id: record.id.clone(),
    };
    let at = crate::time::EventTime::from(record.decided_at.unwrap_or(record.created_at));
    let mut outbox = Outbox::new(subject, &record.owner, read_seq, at);
    let data = ApprovalFacts {
        approval_id: record.id.clone(),
        approval_url: record.url.clone(),
        state: record.state.as_str().to_owned(),
        expires_at: record.expires_at,
        request: record.request.clone(),
        reason: record.reason.clone(),
    };
    outbox.push(kind(data));
    outbox
}

/// Approval `id` as `principal` may see it: its owner's session, or the key that asked.
///
/// Errors: 400 (`id`) malformed; 404 unknown, or another's (the same answer).
async fn visible(
    state: &AppState,
    principal: &Principal,
    id: &str,
) -> Result<ApprovalRecord, ApiError> {
    crate::ids::parse(crate::ids::APPROVAL, "id", id)?;
    let record = state.store.approval(id).await?;
    let theirs = |record: &ApprovalRecord| {
        record.owner == principal.owner
            && match &principal.credential {
                Credential::Session { .. } => true,
                Credential::ApiKey { key_id, .. } => key_id == &record.key_id,
            }
    };
    record
        .filter(theirs)
        .ok_or_else(|| ApiError::NotFound(format!("no approval {id}")))
}

/// `GET /api/approvals/{id}`: the approval, for its owner or the key that asked.
///
/// Errors: those of [`visible`].
pub async fn get(
    state: &AppState,
    principal: &Principal,
    id: &str,
) -> Result<ApprovalView, ApiError> {
    let record = visible(state, principal, id).await?;
    Ok(ApprovalView::of(record, state.clock.now()))
}

/// `GET /api/approvals/{id}?timeout=20`: reads the approval until it is no longer `pending` or
/// `timeout` passes (at most [`crate::servers::stages::MAX_WAIT_SECONDS`], never past
/// `deadline`), holding one of the owner's `waits` slots while it polls; the approval as last
/// read.
///
/// Errors: those of [`visible`]; 429 `waits` while the owner holds every slot.
pub async fn wait(
    state: &AppState,
    principal: &Principal,
    id: &str,
    timeout: std::time::Duration,
    deadline: &crate::deadline::Deadline,
) -> Result<ApprovalView, ApiError> {
    use crate::servers::stages::poll_interval;
    let until = tokio::time::Instant::now() + timeout;
    let mut view = get(state, principal, id).await?;
    let pause = poll_interval(0).min(timeout);
    if view.state != Status::Pending || pause.is_zero() || !deadline.allows(pause) {
        return Ok(view);
    }
    let (caps, seconds) = (&state.config.caps, timeout.as_secs() as i64 + 5);
    let (pool, owner) = (
        crate::store::caps::Pool::Waits,
        (principal.owner.as_str(), caps.waits),
    );
    let polled = async {
        let mut reads = 1;
        loop {
            let pause = poll_interval(reads - 1)
                .min(until.saturating_duration_since(tokio::time::Instant::now()));
            if view.state != Status::Pending || pause.is_zero() || !deadline.allows(pause) {
                return Ok(view);
            }
            tokio::time::sleep(pause).await;
            reads += 1;
            view = get(state, principal, id).await?;
        }
    };
    crate::ratelimit::slots::holding_in_pool(state, pool, owner, caps.waits_pool, seconds, polled)
        .await
}

/// `GET /api/approvals`: the owner's approvals, newest first (`limit` 1-100, default 50;
/// `cursor` from the previous page's `nextCursor`).
///
/// Errors: 400 (`limit`, `cursor`).
pub async fn list(
    state: &AppState,
    principal: &Principal,
    page: &crate::page::PageRequest,
) -> Result<crate::store::Page<ApprovalView>, ApiError> {
    let now = state.clock.now();
    let found = state
        .store
        .approvals_of(&principal.owner, page.limit, page.cursor())
        .await?;
    Ok(found.map(|record| ApprovalView::of(record, now)))
}

/// The body of `POST /api/approvals/{id}/grant`: an EIP-4361 `message` whose `Resources:` name
/// the approval (`urn:approval:<id>`), with a nonce from `GET /api/auth/nonce`, signed by the
/// owner's wallet, and its EIP-191 `signature` (an EOA's 65 bytes, or a smart wallet's
/// ERC-1271 / ERC-6492 signature).
#[derive(Debug, Clone, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GrantRequest {
    /// The message, exactly as signed.
    pub message: String,
    /// Its signature.
    pub signature: String,
}

/// `POST /api/approvals/{id}/grant` (the owner's session): checks the signed message as a
/// sign-in is checked (`crate::identity::auth::siwe::verify`: its nonce is used up whatever
/// the outcome, so a signature is good once), that the owner signed it and that it names this
/// approval, then grants it with its `approval.granted` event.
///
/// Errors: 400 (`message`, `signature`) malformed; 401 `sign-in-failed` naming the failed
/// check; 403 a message signed by another wallet, or not naming this approval; 404 unknown or
/// another owner's; 409 no longer pending (granted, declined, used or expired); 503 when a
/// smart wallet's signature cannot be checked now.
pub async fn grant(
    state: &AppState,
    principal: &Principal,
    id: &str,
    body: GrantRequest,
    source: &str,
) -> Result<ApprovalView, ApiError> {
    let record = pending(state, principal, id).await?;
    let now = state.clock.datetime();
    let signed =
        crate::identity::auth::siwe::verify(state, &body.message, &body.signature, source, now)
            .await?;
    if signed.address != record.owner {
        return Err(ApiError::Forbidden(
            "the message is signed by another wallet than the approval's owner".into(),
        ));
    }
    let names = siwe_resources(&body.message);
    if !names.iter().any(|r| r == &resource(id)) {
        return Err(ApiError::Forbidden(format!(
            "the message's Resources must name {}",
            resource(id)
        )));
    }
    let grant = SignedGrant {
        message: body.message,
        signature: body.signature,
    };
    decide(state, record, ApprovalState::Granted, Some(grant)).await
}

/// The `Resources:` of an EIP-4361 message (none if it does not parse: [`grant`] has
/// verified it first).
fn siwe_resources(message: &str) -> Vec<String> {
    use std::str::FromStr;
    siwe::Message::from_str(message)
        .map(|m| m.resources.iter().map(|r| r.to_string()).collect())
        .unwrap_or_default()
}

/// `POST /api/approvals/{id}/decline` (the owner's session): declines it, with its
/// `approval.declined` event. The same request repeated by its key is answered with this
/// approval, declined, until it lapses.
///
/// Errors: 404 unknown or another owner's; 409 no longer pending.
pub async fn decline(
    state: &AppState,
    principal: &Principal,
    id: &str,
) -> Result<ApprovalView, ApiError> {
    let record = pending(state, principal, id).await?;
    decide(state, record, ApprovalState::Declined, None).await
}

/// Approval `id` of `principal`'s owner, still pending.
async fn pending(
    state: &AppState,
    principal: &Principal,
    id: &str,
) -> Result<ApprovalRecord, ApiError> {
    let record = visible(state, principal, id).await?;
    match Status::of(&record, state.clock.now()) {
        Status::Pending => Ok(record),
        other => Err(ApiError::Conflict(format!(
            "approval {id} is {}; only a pending approval can be granted or declined",
            other.as_str()
        ))),
    }
}

async fn decide(
    state: &AppState,
    record: ApprovalRecord,
    to: ApprovalState,
    grant: Option<SignedGrant>,
) -> Result<ApprovalView, ApiError> {
    let read_seq = record.event_seq;
    let decided = ApprovalRecord {
        state: to,
        decided_at: Some(state.clock.timestamp()),
        grant,
        event_seq: read_seq + 1,
        ..record
    };
    let kind = match to {
        ApprovalState::Granted => EventData::ApprovalGranted,
        _ => EventData::ApprovalDeclined,
    };
    let outbox = events(&decided, read_seq, kind);
    if !state.store.decide_approval(&decided, &outbox).await? {
        return Err(ApiError::Conflict(format!(
            "approval {} was decided meanwhile; see GET /api/approvals/{}",
            decided.id, decided.id
        )));
    }
    Ok(ApprovalView::of(decided, state.clock.now()))
}

/// Remembers whether `principal`'s MCP client declared URL-mode elicitation at its
/// `initialize` (`url`): the MCP endpoint is stateless, and [`elicits_urls`] answers a later
/// tool call. Best effort: a failure is logged.
pub async fn remember_mcp_client(state: &AppState, principal: &Principal, url: bool) {
    let Some(key_id) = principal.key_id() else {
        return;
    };
    let now = state.clock.now();
    if let Err(err) = state.store.remember_mcp_client(key_id, url, now).await {
        tracing::warn!(error = %err, "cannot remember the MCP client's capabilities");
    }
}

/// Whether `principal`'s MCP client declared URL-mode elicitation at its last `initialize`
/// (`false` when unknown, or when the store cannot say: logged).
pub async fn elicits_urls(state: &AppState, principal: &Principal) -> bool {
    let Some(key_id) = principal.key_id() else {
        return false;
    };
    match state.store.mcp_client_takes_urls(key_id).await {
        Ok(takes) => takes,
        Err(err) => {
            tracing::warn!(error = %err, "cannot read the MCP client's capabilities");
            false
        }
    }
}
