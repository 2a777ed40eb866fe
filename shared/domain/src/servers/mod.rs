//! Servers (design brief §2 and §3, Ownership): provisioning ([`provision`], [`renew`]: the paid
//! path is [`crate::billing::order`]'s, a free server is [`create`]d here), the caller's servers, actions
//! and delete. A server belongs to
//! whoever provisioned it through this service; that record —
//! [`crate::store::sandboxes::ServerOwnership`], read strongly consistent — is the only thing
//! that authorises an action, a delete or a listing.

pub mod discovery;
pub mod leases;
pub mod ownership;
pub mod probe;
mod quotes;
pub mod refresher;
pub mod sandboxes;
pub mod stages;
pub mod sweep;
pub mod tasks;

pub use quotes::{QuoteAnswer, QuoteQuery, quote};

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use crate::billing::order::effects::{SANDBOX_TAG, create_body};
use crate::billing::order::{self, Bought, Outcome};
use crate::billing::payments;
use crate::billing::payments::PaymentHeader;
use crate::billing::purchase::{
    MAX_RENEWAL_PERIODS, Purchase, Renewal, RenewalRequest, Resize, ValidProvisionRequest,
    renewal_price,
};
use crate::deadline::Deadline;
use crate::error::ApiError;
use crate::identity::auth::Principal;
use crate::identity::ssh_keys::{self, KeyRef};
use crate::ids::ServerId;
use crate::servers::ownership::authorize;
use crate::state::AppState;
use crate::store::payments::OrderKind;
use crate::store::payments::SandboxStatus;
use crate::store::sandboxes::{LeaseState, PlanClass, SandboxRecord, Status, Watch, WatchChange};
use crate::upstream::{ServerAction, ServerView, UpstreamError};
use crate::{ids, validate};

/// Provisions `request` for `principal` in `project`: the paid path ([`order::buy`]: ledger
/// first, checks and price before any 402, claim, settle → create-or-adopt → record within
/// `deadline`), or, for a free plan, [`create`] at once.
///
/// Errors: 400 (fields, an undecodable header), 402 (no or an unacceptable payment), 409
/// (payment used elsewhere), 503 with `Retry-After` while the payment is not settled yet;
/// errors after settlement carry the payment response ([`ApiError::Charged`]).
pub async fn provision(
    state: &AppState,
    principal: &Principal,
    project: u64,
    request: ValidProvisionRequest,
    resource: order::Resource<'_>,
    payment: Option<PaymentHeader>,
    deadline: &Deadline,
) -> Result<Outcome, ApiError> {
    state.upstream()?;
    // The caller's keys, resolved (a raw key added) before any 402 or charge; a refusal of a
    // payment the ledger knows says what is true of it.
    let request = match request.resolve(state, principal).await {
        Ok(request) => request,
        Err(err) => return Err(order::refused(state, payment, err).await),
    };
    let purchase = Purchase::NewServer {
        project,
        request: &request,
    };
    let bought = order::buy(state, principal, &purchase, payment, resource, deadline);
    // Boxed: the paid path's future is large (and a test thread's stack is 2 MiB).
    match Box::pin(bought).await? {
        Bought::Order(outcome) => Ok(outcome),
        Bought::Free(quote) => create(state, principal, project, &request, quote.class).await,
    }
}

/// Buys `request.periods` more paid periods for `server`, owner only, with x402 on the same
/// ledger as provisioning — ledger first, replays, 409 on another request, credits redeemed —
/// then the order extends the lease (with the order's `provisioned` state, in one transaction).
///
/// Errors: 400 (`periods`); 403 not the owner; 409 a free server; 410 a deleted server; 402
/// without an acceptable payment; those of [`provision`]'s paid path.
pub async fn renew(
    state: &AppState,
    principal: &Principal,
    server: ServerId,
    request: RenewalRequest,
    resource: order::Resource<'_>,
    payment: Option<PaymentHeader>,
    deadline: &Deadline,
) -> Result<Outcome, ApiError> {
    let server = server.get();
    state.upstream()?;
    if !(1..=MAX_RENEWAL_PERIODS).contains(&request.periods) {
        return Err(ApiError::invalid(
            "periods",
            format!("must be 1 to {MAX_RENEWAL_PERIODS}"),
        ));
    }
    let ownership = authorize(state, principal, server).await?;
    // Priced once, on the server as stored, and bound to the plan it was priced on — or, for a
    // payment the ledger knows as this very renewal, answered from its order (no price).
    let known = payments::known_request::<Renewal>(state, payment.as_ref(), OrderKind::Renewal);
    let (plan, priced) = match known.await {
        Some(known) if known.server_id == server && known.periods == request.periods => {
            (known.plan, None)
        }
        _ => match renewal_price(state, server, &ownership.sandbox_id, request.periods).await {
            Ok(priced) => (Some(priced.quote.plan.clone()), Some(priced)),
            Err(err) => return Err(order::refused(state, payment, err).await),
        },
    };
    let purchase = Purchase::Renewal {
        server,
        sandbox_id: &ownership.sandbox_id,
        project: ownership.project_id,
        periods: request.periods,
        plan: plan.as_deref(),
        priced: priced.as_ref(),
    };
    let bought = order::buy(state, principal, &purchase, payment, resource, deadline);
    match Box::pin(bought).await? {
        Bought::Order(outcome) => Ok(outcome),
        // A renewal is never free: a free server has no lease (409 from the quote).
        Bought::Free(_) => Err(ApiError::Conflict(format!(
            "server {server} is free: it has no paid time to renew"
        ))),
    }
}

/// Moves `server` to the bigger plan `request.plan`, owner only, its paid time unchanged
/// ([`crate::billing::resize`]: the checks, then the price of the difference for the paid time
/// left), with x402 on the same ledger as provisioning — ledger first, replays, 409 on another
/// request, credits redeemed — then the order sends the provider's `upgrade`, announced first,
/// and records the server's new plan once it landed (or becomes a credit).
///
/// Errors: 400 (`plan`); 403 not the owner, or the key's scope or policy; 409 a free, bare-metal
/// or expired server, or one on its first deployment; 410 a deleted server; 402 without an
/// acceptable payment; those of [`provision`]'s paid path.
pub async fn resize(
    state: &AppState,
    principal: &Principal,
    server: ServerId,
    request: crate::billing::purchase::ResizeRequest,
    resource: order::Resource<'_>,
    payment: Option<PaymentHeader>,
    deadline: &Deadline,
) -> Result<Outcome, ApiError> {
    let server = server.get();
    state.upstream()?;
    let ownership = authorize(state, principal, server).await?;
    // A payment the ledger knows for this very resize is answered from its order (the server
    // may be on the new plan by now); any other request is bound to the server as it is.
    let known = payments::known_request::<Resize>(state, payment.as_ref(), OrderKind::Resize);
    let (resize, priced) = match known.await {
        Some(known) if known.server_id == server && known.plan == request.plan => (known, None),
        _ => match crate::billing::resize::bind(state, server, &ownership.sandbox_id, &request)
            .await
        {
            Ok((resize, priced)) => (resize, Some(priced)),
            Err(err) => return Err(order::refused(state, payment, err).await),
        },
    };
    let purchase = Purchase::Resize {
        resize: &resize,
        priced: priced.as_ref(),
        sandbox_id: &ownership.sandbox_id,
        project: ownership.project_id,
    };
    let bought = order::buy(state, principal, &purchase, payment, resource, deadline);
    match Box::pin(bought).await? {
        Bought::Order(outcome) => Ok(outcome),
        // A resize is never free: a free server has no lease (409 from the price).
        Bought::Free(_) => Err(ApiError::Conflict(format!(
            "server {server} is free: a resize is for paid servers"
        ))),
    }
}

/// Creates a free server (once, never retried) for `principal` in `project`: its sandbox is
/// recorded first (`provisioning`, the intent, tagged on the server), then the create is sent,
/// then the server is adopted — its ownership and sandbox in one transaction. When the create's
/// outcome is unclear (timeout, connection lost, 5xx), the project is searched for the server
/// tagged with the intent's id; one that lands later is adopted by the refresher, which also
/// ends an intent whose server never came ([`crate::servers::refresher`]): never orphaned, never created
/// twice.
///
/// Errors: the provider's errors (400/404/502/504); the store's.
pub async fn create(
    state: &AppState,
    principal: &Principal,
    project: u64,
    request: &ValidProvisionRequest,
    class: PlanClass,
) -> Result<Outcome, ApiError> {
    let upstream = state.upstream()?;
    let request =
        &crate::billing::order::effects::with_registered_keys(state, &principal.owner, request)
            .await?;
    let intent = free_intent(state, principal, project, request, class);
    // Counted against the key before it exists (given back if the create is refused).
    let held = crate::ratelimit::spend::hold_server(
        &state.store,
        principal,
        &intent.id,
        state.clock.datetime(),
    )
    .await?;
    state.store.put_sandbox(&intent, None).await?;
    let body = create_body(request, &intent.id, &principal.owner, state.store.table());
    let server = match upstream.create_server(project, &body).await {
        Ok(server) => server,
        // The answer was lost or failed after the provider may have created it: a server
        // carrying the intent's tag is this request's.
        Err(
            err @ (UpstreamError::Timeout | UpstreamError::Transport(_) | UpstreamError::Decode(_)),
        )
        | Err(
            err @ UpstreamError::Status {
                status: 500..=599, ..
            },
        ) => {
            tracing::warn!(error = %err, sandbox = intent.id, "create outcome unclear; searching");
            match upstream
                .find_tagged(project, (SANDBOX_TAG, &intent.id), None)
                .await
            {
                Ok(Some(server)) => server,
                // The refresher adopts it if it lands, and ends the intent if it never does.
                _ => return Err(err.into()),
            }
        }
        Err(err) => {
            crate::ratelimit::spend::release_server(&state.store, held).await;
            let cancelled = SandboxStatus {
                sandbox_id: intent.id.clone(),
                status: Status::Cancelled,
                unwatch: true,
                ..SandboxStatus::default()
            };
            if let Err(err) = state
                .store
                .change_sandbox(&cancelled, state.clock.timestamp())
                .await
            {
                tracing::warn!(sandbox = intent.id, error = %err, "cannot end the intent");
            }
            return Err(err.into());
        }
    };
    crate::servers::refresher::adopt(state, &intent, &server).await?;
    Ok(Outcome::Created {
        server,
        sandbox_id: intent.id,
        settlement: None,
    })
}

/// The sandbox of a free server about to be created: `provisioning`, no server yet, its
/// deployment timed from now.
fn free_intent(
    state: &AppState,
    principal: &Principal,
    project: u64,
    request: &ValidProvisionRequest,
    class: PlanClass,
) -> SandboxRecord {
    let now = state.clock.timestamp();
    SandboxRecord {
        event_seq: 0,
        id: ids::new(ids::SANDBOX),
        owner: principal.owner.clone(),
        server_id: None,
        project_id: Some(project),
        plan: Some(request.plan.clone()),
        region: Some(request.region.clone()),
        hostname: request.hostname.clone(),
        name: None,
        metadata: BTreeMap::new(),
        status: Status::Provisioning,
        watch: Some(crate::servers::stages::ordered(class, now)),
        payment: None,
        created_at: now,
        updated_at: now,
        lease: None,
        authorized_keys: request.authorized_keys.clone(),
        resizing: None,
    }
}

/// The servers of `project` that `principal` provisioned and that still exist, by id (the
/// provider's order), from the store (no provider call): each the provider's object as the
/// refresher last read it (without credentials), with `sandboxId`, its progress (`stage`,
/// `statusAt`, …) and, for a paid server, its lease ([`leases::annotate`]).
///
/// Errors: 503 when the upstream is not configured; the store's.
pub async fn list(
    state: &AppState,
    principal: &Principal,
    project: u64,
) -> Result<Vec<Value>, ApiError> {
    // A cloud route: 503 without the provider, like every other.
    state.upstream()?;
    let now = state.clock.now();
    // Only the owner's servers of this project: metadata sandboxes are never read.
    let owned = state.store.servers_of(&principal.owner, project).await?;
    let ids: Vec<&str> = owned.iter().map(|o| o.sandbox_id.as_str()).collect();
    let mut servers: Vec<Value> = state
        .store
        .sandboxes(&ids)
        .await?
        .iter()
        .filter(|record| record.owner == principal.owner)
        .filter_map(|record| listed(state, record, project, now))
        .collect();
    // The provider's order: by id.
    servers.sort_by_key(|s| s["id"].as_u64());
    Ok(servers)
}

/// The listing's entry for `record`: a server of `project` this service provisioned (a record
/// with a watch) that has not ended. A server provisioned before watches existed is listed from
/// its record alone (`id`, `hostname`, `status`, `sandboxId`); metadata records never are.
fn listed(state: &AppState, record: &SandboxRecord, project: u64, now: i64) -> Option<Value> {
    let id = record.server_id?;
    if record.project_id != Some(project) {
        return None;
    }
    if !crate::servers::stages::live(record) {
        return None;
    }
    let Some(watch) = record.watch.as_ref() else {
        return Some(serde_json::json!({
            "id": id,
            "hostname": record.hostname,
            "status": record.status,
            "sandboxId": record.id,
        }));
    };
    let progress = crate::servers::stages::Progress::of(state, record);
    let mut server = crate::servers::stages::server_object(watch)?;
    progress.annotate(&mut server, &record.id);
    if let Some(lease) = &record.lease {
        leases::annotate(&mut server, lease, now);
    }
    Some(server)
}

/// The body of `POST /api/cloud/servers/{serverId}/actions`: `type` and the fields that type
/// takes (see [`parse_action`]).
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ActionRequest {
    /// `reboot`, `power-on`, `power-off`, `rebuild`, `enter-rescue-mode` or `exit-rescue-mode`.
    #[serde(rename = "type")]
    pub kind: String,
    /// `rebuild`: image slug (required).
    #[serde(default)]
    pub image: Option<String>,
    /// `rebuild`: hostname (required).
    #[serde(default)]
    pub hostname: Option<String>,
    /// `rebuild`, `enter-rescue-mode`: password (required; the provider's password rules).
    #[serde(default)]
    pub password: Option<String>,
    /// `rebuild`: the caller's keys to put on the server (optional): `ssh_…` ids, public key
    /// lines, or the provider's ids of its keys.
    #[serde(default, rename = "sshKeys")]
    #[schema(value_type = Option<Vec<String>>)]
    pub ssh_keys: Option<Vec<Value>>,
    /// `rebuild`: the alias of `sshKeys`.
    #[serde(default, rename = "ssh_keys")]
    #[schema(value_type = Option<Vec<String>>)]
    pub ssh_keys_alias: Option<Vec<Value>>,
    /// `rebuild`: base64 user data (optional).
    #[serde(default)]
    pub user_data: Option<String>,
}

/// The action types the API accepts.
pub const ACTION_TYPES: [&str; 6] = [
    "reboot",
    "power-on",
    "power-off",
    "rebuild",
    "enter-rescue-mode",
    "exit-rescue-mode",
];

/// An action as checked: the provider's action, and for a rebuild the keys the request named
/// (the field's name and the entries), resolved by [`act`].
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedAction {
    /// The provider's action (a rebuild's `ssh_keys` are filled by [`act`]).
    pub action: ServerAction,
    /// `sshKeys` (or `ssh_keys`) and its entries.
    pub keys: (String, Vec<KeyRef>),
}

/// Turns an action request into the provider's action, checking that each type gets exactly
/// the fields it takes: `rebuild` needs `image`, `hostname`, `password` and may have `sshKeys`
/// (or its alias `ssh_keys`), `user_data`; `enter-rescue-mode` needs `password`; the others take
/// nothing.
///
/// Errors: 400 naming `type` (unknown type) or the missing, malformed or unexpected field.
pub fn parse_action(request: ActionRequest) -> Result<ParsedAction, ApiError> {
    let ActionRequest {
        kind,
        image,
        hostname,
        password,
        ssh_keys,
        ssh_keys_alias,
        user_data,
    } = request;
    let given = [
        ("image", image.is_some()),
        ("hostname", hostname.is_some()),
        ("password", password.is_some()),
        ("sshKeys", ssh_keys.is_some()),
        ("ssh_keys", ssh_keys_alias.is_some()),
        ("user_data", user_data.is_some()),
    ];
    let allowed: &[&str] = match kind.as_str() {
        "rebuild" => &[
            "image",
            "hostname",
            "password",
            "sshKeys",
            "ssh_keys",
            "user_data",
        ],
        "enter-rescue-mode" => &["password"],
        "reboot" | "power-on" | "power-off" | "exit-rescue-mode" => &[],
        _ => {
            return Err(ApiError::invalid(
                "type",
                format!("must be one of {}", ACTION_TYPES.join(", ")),
            ));
        }
    };
    if let Some((field, _)) = given
        .iter()
        .find(|(field, present)| *present && !allowed.contains(field))
    {
        return Err(ApiError::invalid(
            *field,
            format!("is not a field of action `{kind}`"),
        ));
    }
    let required = |field: &str, value: Option<String>| {
        value.ok_or_else(|| ApiError::invalid(field, format!("is required for action `{kind}`")))
    };
    let keys = ssh_keys::named(ssh_keys, ssh_keys_alias)?;
    let action = match kind.as_str() {
        "reboot" => ServerAction::Reboot,
        "power-on" => ServerAction::PowerOn,
        "power-off" => ServerAction::PowerOff,
        "exit-rescue-mode" => ServerAction::ExitRescueMode,
        "enter-rescue-mode" => {
            let password = required("password", password)?;
            validate::password("password", &password)?;
            ServerAction::EnterRescueMode { password }
        }
        _ => {
            let image = required("image", image)?;
            validate::slug("image", &image)?;
            let hostname = required("hostname", hostname)?;
            validate::hostname("hostname", &hostname)?;
            let password = required("password", password)?;
            validate::password("password", &password)?;
            if let Some(user_data) = &user_data {
                validate::user_data("user_data", user_data)?;
            }
            ServerAction::Rebuild {
                image,
                hostname,
                password,
                ssh_keys: Vec::new(),
                user_data,
            }
        }
    };
    Ok(ParsedAction { action, keys })
}

/// Runs `action` on `server` for its owner; returns the provider's server object and records
/// the status it reports on the sandbox.
///
/// Errors: 403 not the owner; 409 an action other than power-off on a server whose paid time
/// ended, or a rebuild to a licensed image its lease was not paid for
/// ([`crate::billing::purchase::rebuild_image`]); 400 naming `image` for one its plan does not
/// offer; the provider's errors (e.g. 400 rescue mode on a VPS).
pub async fn act(
    state: &AppState,
    principal: &Principal,
    server: ServerId,
    parsed: ParsedAction,
) -> Result<Acted, ApiError> {
    let server = server.get();
    let upstream = state.upstream()?;
    let ownership = authorize(state, principal, server).await?;
    let ParsedAction { mut action, keys } = parsed;
    let authorized_keys = match &action {
        ServerAction::Rebuild { .. } => {
            Some(ssh_keys::resolve(state, principal, &keys.0, &keys.1).await?)
        }
        _ => None,
    };
    let record = state.store.sandbox(&ownership.sandbox_id).await?;
    let lease = record.as_ref().and_then(|s| s.lease.clone());
    if let Some(lease) = &lease
        && lease.state != LeaseState::Active
        && action != ServerAction::PowerOff
    {
        return Err(ApiError::Conflict(format!(
            "the paid time of server {server} ended ({}): renew it first with POST {}",
            lease.state.as_str(),
            leases::renew_link(server)
        )));
    }
    if let ServerAction::Rebuild { image, .. } = &action {
        crate::billing::purchase::rebuild_image(state, server, record.as_ref(), image).await?;
    }
    // Only an action that goes ahead writes the rebuild's keys at the provider.
    if let (ServerAction::Rebuild { ssh_keys, .. }, Some(keys_named)) =
        (&mut action, &authorized_keys)
    {
        *ssh_keys = ssh_keys::register_for_rebuild(state, principal, keys_named, &keys.0).await?;
    }
    let action = &action;
    let mut result = upstream.server_action(server, action).await?;
    let now = state.clock.now();
    if lease.as_ref().is_none_or(|l| l.state == LeaseState::Active)
        && let Some(record) = record
    {
        let change = Transition {
            action,
            authorized_keys,
            now,
        };
        record_transition(state, record, change, &mut result).await;
    }
    let expires = lease.as_ref().filter(|l| leases::expires_soon(l, now));
    if let Some(lease) = &lease {
        leases::annotate(&mut result, lease, now);
    }
    Ok(Acted {
        lease_expires: expires.map(|l| l.paid_until),
        server: result,
    })
}

/// What an accepted action changes on its server's sandbox.
struct Transition<'a> {
    /// The action the provider accepted.
    action: &'a ServerAction,
    /// A rebuild's keys, now on the server.
    authorized_keys: Option<Vec<crate::store::ssh_keys::AuthorizedKey>>,
    /// Epoch seconds.
    now: i64,
}

/// Records on `record` (the server's sandbox) the status the provider's answer `result`
/// reports after `change`, and the watch the action starts; annotates `result` with the
/// sandbox's progress. A failed write is logged (the refresher records it later).
async fn record_transition(
    state: &AppState,
    record: SandboxRecord,
    change: Transition<'_>,
    result: &mut Value,
) {
    let Transition {
        action,
        authorized_keys,
        now,
    } = change;
    let Ok(view) = ServerView::of(result) else {
        return;
    };
    let hostname = match action {
        ServerAction::Rebuild { hostname, .. } => Some(hostname.clone()),
        _ => None,
    };
    let change = SandboxStatus {
        sandbox_id: record.id.clone(),
        status: Status::from(view.status_or_state()),
        hostname,
        watch: record.watch.as_ref().map(|watch| WatchChange {
            watch: expect(watch, action, result, now),
            read_seq: None,
            due: Some(now),
        }),
        authorized_keys,
        ..SandboxStatus::default()
    };
    match state
        .store
        .change_sandbox(&change, state.clock.timestamp())
        .await
    {
        Ok(_) => {
            let record = SandboxRecord {
                status: change.status,
                watch: change.watch.map(|w| w.watch),
                authorized_keys: change.authorized_keys.unwrap_or(record.authorized_keys),
                ..record
            };
            crate::servers::stages::Progress::of(state, &record).annotate(result, &record.id);
        }
        Err(err) => {
            let server = view.id;
            tracing::warn!(server, error = %err, "could not record the transition");
        }
    }
}

/// The watch after `action` was accepted (the provider answered `object` at `now`): the
/// transition it starts, to be confirmed by the refresher; not `ready` until SSH answers again
/// (a rebuild starts a new deployment, without a deadline). A server its owner acts on is
/// delivered: it is no longer on its first deployment, so its deployment deadline never deletes
/// it and credits its payment (powered off just before the deadline, it would otherwise be a
/// server used and then paid back).
fn expect(watch: &Watch, action: &ServerAction, object: &Value, now: i64) -> Watch {
    let at = crate::time::Timestamp::from_unix(now);
    let transition = match action {
        ServerAction::PowerOff => "powering-off",
        ServerAction::PowerOn => "powering-on",
        ServerAction::Reboot => "rebooting",
        ServerAction::Rebuild { .. } => "rebuilding",
        ServerAction::EnterRescueMode { .. } => "entering-rescue-mode",
        ServerAction::ExitRescueMode => "exiting-rescue-mode",
        ServerAction::Upgrade { .. } => "resizing",
    };
    let rebuild = matches!(action, ServerAction::Rebuild { .. });
    Watch {
        server: Some(crate::upstream::without_credentials(object.clone()).to_string()),
        status_at: Some(at),
        transition: Some(transition.into()),
        transition_at: Some(at),
        ready_at: None,
        host_keys: if rebuild {
            Vec::new()
        } else {
            watch.host_keys.clone()
        },
        since: if rebuild { at } else { watch.since },
        first: false,
        seq: watch.seq + 1,
        ..watch.clone()
    }
}

/// What an action answers: the provider's server object (with its lease, for a paid server)
/// and, in the lease's last 24 h, when it ends (the `X-Lease-Expires` header).
#[derive(Debug, Clone)]
pub struct Acted {
    /// The server object.
    pub server: Value,
    /// `paidUntil` (RFC 3339) when the lease ends within 24 h.
    pub lease_expires: Option<crate::time::Timestamp>,
}

/// Terminates `server` for its owner and marks its sandbox `terminating`. A server the provider
/// no longer knows (404) counts as already deleted.
///
/// Errors: 403 not the owner; the provider's other errors.
pub async fn delete(
    state: &AppState,
    principal: &Principal,
    server: ServerId,
) -> Result<(), ApiError> {
    let server = server.get();
    let upstream = state.upstream()?;
    let ownership = authorize(state, principal, server).await?;
    let status = match upstream.delete_server(server).await {
        Ok(()) => Status::Terminating,
        Err(UpstreamError::Status { status: 404, .. }) => Status::Terminated,
        Err(err) => return Err(err.into()),
    };
    // A deleted server's lease stops (retried if a renewal or an expiry step moved it).
    for _ in 0..3 {
        let Some(record) = state.store.sandbox(&ownership.sandbox_id).await? else {
            return Ok(());
        };
        let recorded = if record.lease.is_some() {
            leases::end(state, &record, status.clone(), "owner").await?
        } else {
            // The refresher confirms the server is gone on its next pass.
            let now = state.clock.now();
            let change = SandboxStatus {
                sandbox_id: record.id.clone(),
                status: status.clone(),
                watch: crate::servers::stages::recheck(&record, now),
                outbox: Some(crate::notifications::events::deleted(
                    &record,
                    state.clock.event_time(),
                    "owner",
                )),
                ..SandboxStatus::default()
            };
            state
                .store
                .change_sandbox(&change, state.clock.timestamp())
                .await?
        };
        if recorded {
            return Ok(());
        }
    }
    Err(ApiError::Conflict(format!(
        "server {server} is deleted; its record kept changing meanwhile, retry to record it"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn action(body: Value) -> Result<ServerAction, ApiError> {
        parsed(body).map(|parsed| parsed.action)
    }
    fn parsed(body: Value) -> Result<ParsedAction, ApiError> {
        parse_action(serde_json::from_value(body).unwrap())
    }
    fn field(err: ApiError) -> String {
        match err {
            ApiError::Invalid { field, .. } => field,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn simple_actions() {
        assert_eq!(
            action(json!({"type": "reboot"})).unwrap(),
            ServerAction::Reboot
        );
        assert_eq!(
            action(json!({"type": "power-off"})).unwrap(),
            ServerAction::PowerOff
        );
        assert_eq!(
            action(json!({"type": "power-on"})).unwrap(),
            ServerAction::PowerOn
        );
        assert_eq!(
            action(json!({"type": "exit-rescue-mode"})).unwrap(),
            ServerAction::ExitRescueMode
        );
    }

    #[test]
    fn action_fields_are_checked_per_type() {
        assert_eq!(
            field(action(json!({"type": "explode"})).unwrap_err()),
            "type"
        );
        assert_eq!(
            field(action(json!({"type": "reboot", "password": "x"})).unwrap_err()),
            "password"
        );
        assert_eq!(
            field(action(json!({"type": "enter-rescue-mode"})).unwrap_err()),
            "password"
        );
        assert_eq!(
            field(action(json!({"type": "enter-rescue-mode", "password": "weak"})).unwrap_err()),
            "password"
        );
        assert_eq!(
            field(
                action(json!({"type": "rebuild", "hostname": "a", "password": "nW7xKp2LmQ9z"}))
                    .unwrap_err()
            ),
            "image"
        );
        assert_eq!(
            field(
                action(json!({
                    "type": "rebuild", "image": "debian_12_64bit", "hostname": "a",
                    "password": "nW7xKp2LmQ9z", "ssh_keys": ["x"]
                }))
                .unwrap_err()
            ),
            "ssh_keys[0]"
        );
        let rebuild = parsed(json!({
            "type": "rebuild", "image": "debian_12_64bit", "hostname": "runner-01",
            "password": "nW7xKp2LmQ9z", "ssh_keys": [9845], "user_data": "I2Nsb3VkLWNvbmZpZwo="
        }))
        .unwrap();
        // The keys are resolved to the caller's by `act`; the shape is checked here.
        assert_eq!(
            rebuild.keys,
            ("ssh_keys".into(), vec![KeyRef::Provider(9845)])
        );
        assert_eq!(
            serde_json::to_value(rebuild.action).unwrap(),
            json!({"type": "rebuild", "image": "debian_12_64bit", "hostname": "runner-01",
                   "password": "nW7xKp2LmQ9z", "user_data": "I2Nsb3VkLWNvbmZpZwo="})
        );
        assert_eq!(
            field(
                action(json!({
                    "type": "rebuild", "image": "debian_12_64bit", "hostname": "a",
                    "password": "nW7xKp2LmQ9z", "sshKeys": [], "ssh_keys": []
                }))
                .unwrap_err()
            ),
            "ssh_keys"
        );
    }

    #[test]
    fn provision_request_validation_names_fields() {
        let req = |body: Value| {
            serde_json::from_value::<crate::billing::purchase::ProvisionRequest>(body)
                .unwrap()
                .validate()
        };
        assert!(req(json!({"plan": "p1", "region": "LT-Siauliai"})).is_ok());
        assert_eq!(
            field(req(json!({"plan": "../x", "region": "r"})).unwrap_err()),
            "plan"
        );
        assert_eq!(
            field(req(json!({"plan": "p", "region": "r", "hostname": "-x"})).unwrap_err()),
            "hostname"
        );
        assert_eq!(
            field(req(json!({"plan": "p", "region": "r", "user_data": "%%"})).unwrap_err()),
            "user_data"
        );
        assert_eq!(
            field(
                req(json!({"plan": "p", "region": "r", "tags": {"svc-owner": "me"}})).unwrap_err()
            ),
            "tags.svc-owner"
        );
        assert_eq!(
            field(req(json!({"plan": "p", "region": "r", "ssh_keys": [0]})).unwrap_err()),
            "ssh_keys[0]"
        );
    }
}
