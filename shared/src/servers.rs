//! Servers (design brief §2 and §3, Ownership): provisioning — the paid path's orchestration,
//! [`provision`] and [`fulfil`] — the caller's servers, actions and delete. A server belongs to
//! whoever provisioned it through this service; that record —
//! [`crate::store::sandboxes::ServerOwnership`], read strongly consistent — is the only thing
//! that authorises an action, a delete or a listing.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use tracing::Instrument;

use crate::auth::Principal;
use crate::checkpoint::Step;
use crate::deadline::Deadline;
use crate::error::ApiError;
use crate::payments::{self, Binding, Known, PaymentHeader, PaymentView, Settled, Target};
use crate::pricing::{Pricing, Quote};
use crate::state::AppState;
use crate::store::payments::{
    Advance, Claim, Order, OrderChanges, OrderKind, OrderState, SandboxStatus, SideWrites,
};
use crate::store::sandboxes::{
    LeaseChange, LeaseState, PlanClass, SandboxRecord, ServerOwnership, Watch, WatchChange,
};
use crate::upstream::{CreateServer, ServerAction, ServerView, UpstreamError};
use crate::x402::SettleResponse;
use crate::{discovery, ids, leases, validate};

/// Tag the service puts on every server it provisions: the sandbox id (lets operators reconcile
/// a create whose answer was lost).
pub const SANDBOX_TAG: &str = "svc-sandbox";
/// Tag the service puts on every server it provisions: the owner's address.
pub const OWNER_TAG: &str = "svc-owner";

/// The body of `POST /api/cloud/servers/{projectId}`.
///
/// `plan` and `region` (slugs) are required; `image` (slug), `hostname` (RFC 1123),
/// `ssh_keys` (provider key ids, numbers or numeric strings), `user_data` (standard base64) and
/// `tags` (string → string, keys not starting with `svc-`) are optional. Unknown fields are
/// refused.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProvisionRequest {
    /// Plan slug.
    pub plan: String,
    /// Region slug.
    pub region: String,
    /// Image slug.
    #[serde(default)]
    pub image: Option<String>,
    /// Hostname.
    #[serde(default)]
    pub hostname: Option<String>,
    /// SSH key ids.
    #[serde(default)]
    #[schema(value_type = Vec<u64>)]
    pub ssh_keys: Vec<Value>,
    /// Base64 user data.
    #[serde(default)]
    pub user_data: Option<String>,
    /// Tags.
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
}

/// A validated provisioning request, ready for the provider (without the service's tags).
#[derive(Debug, Clone, PartialEq, serde::Serialize, Deserialize)]
pub struct ValidProvisionRequest {
    /// Plan slug.
    pub plan: String,
    /// Region slug.
    pub region: String,
    /// Image slug.
    pub image: Option<String>,
    /// Hostname.
    pub hostname: Option<String>,
    /// SSH key ids.
    pub ssh_keys: Vec<u64>,
    /// Base64 user data.
    pub user_data: Option<String>,
    /// Caller's tags.
    pub tags: BTreeMap<String, String>,
}

impl ProvisionRequest {
    /// Checks every field's shape (400 naming the field); no upstream call.
    pub fn validate(self) -> Result<ValidProvisionRequest, ApiError> {
        validate::slug("plan", &self.plan)?;
        validate::slug("region", &self.region)?;
        if let Some(image) = &self.image {
            validate::slug("image", image)?;
        }
        if let Some(hostname) = &self.hostname {
            validate::hostname("hostname", hostname)?;
        }
        if let Some(user_data) = &self.user_data {
            validate::user_data("user_data", user_data)?;
        }
        validate::tags("tags", &self.tags)?;
        Ok(ValidProvisionRequest {
            ssh_keys: validate::ssh_keys("ssh_keys", &self.ssh_keys)?,
            plan: self.plan,
            region: self.region,
            image: self.image,
            hostname: self.hostname,
            user_data: self.user_data,
            tags: self.tags,
        })
    }
}

/// What a provisioning request gets when it does not fail.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// 201: the server exists and is recorded as the caller's.
    Created {
        /// The provider's server object (replays: as recorded, without credentials).
        server: Value,
        /// Its sandbox.
        sandbox_id: String,
        /// The settlement, for a paid plan.
        settlement: Option<SettleResponse>,
    },
    /// 202: the order is in progress and completes on its own (the reconciler drives it);
    /// `GET /api/sandboxes/{sandbox_id}` shows it, `GET /api/payments` its payment.
    Accepted {
        /// The order's sandbox (status `provisioning` until the server exists).
        sandbox_id: String,
        /// The payment as its owner sees it.
        payment: Box<PaymentView>,
        /// The settlement, once the payment settled.
        settlement: Option<SettleResponse>,
        /// What happens next.
        detail: String,
    },
}

/// The checks the provider would otherwise fail deterministically, all made before any 402 or
/// settlement (point 2 of the durable-orders issue), and the price: the plan exists and is in
/// stock in the region, the project exists in the configured team, the image is offered with
/// the plan, the SSH keys exist.
///
/// Errors: 400 naming the field (`plan`, `region`, `projectId`, `image`, `ssh_keys[i]`); 503
/// when the plan cannot be priced (never treated as free); the provider's errors.
pub async fn check(
    state: &AppState,
    project: Option<u64>,
    request: &ValidProvisionRequest,
) -> Result<Quote, ApiError> {
    let plan = discovery::find_plan(state, &request.plan)
        .await?
        .ok_or_else(|| {
            ApiError::invalid(
                "plan",
                format!("unknown plan `{}`; see GET /api/cloud/plans", request.plan),
            )
        })?;
    if !plan.in_stock(&request.region) {
        return Err(ApiError::invalid(
            "region",
            format!(
                "plan `{}` is not in stock in region `{}`; see available_regions in GET \
                /api/cloud/plans",
                request.plan, request.region
            ),
        ));
    }
    if let Some(project) = project
        && !discovery::project_exists(state, project).await?
    {
        return Err(ApiError::invalid(
            "projectId",
            format!(
                "project {project} is not a project of this service's team; see GET \
                /api/cloud/projects/{{teamId}}"
            ),
        ));
    }
    let image_pricing = match &request.image {
        None => None,
        Some(image) => {
            let offered = discovery::plan_image(state, &request.plan, image)
                .await?
                .ok_or_else(|| {
                    ApiError::invalid(
                        "image",
                        format!(
                            "image `{image}` is not offered with plan `{}`; see GET \
                            /api/cloud/images?plan={}",
                            request.plan, request.plan
                        ),
                    )
                })?;
            Pricing::of(&offered)
        }
    };
    if !request.ssh_keys.is_empty() {
        let known = discovery::ssh_key_ids(state).await?;
        if let Some((i, id)) = request
            .ssh_keys
            .iter()
            .enumerate()
            .find(|(_, id)| !known.contains(id))
        {
            return Err(ApiError::invalid(
                format!("ssh_keys[{i}]"),
                format!("SSH key {id} does not exist in the provider account"),
            ));
        }
    }
    let hours = crate::pricing::hours(state.config.payments.period.as_secs());
    let period = crate::pricing::period_price(
        &plan.pricing,
        image_pricing.as_ref().map(Pricing::entries),
        hours,
        &state.config.pricing,
    )
    .map_err(|why| {
        ApiError::Unavailable(format!("plan `{}` cannot be priced: {why}", request.plan))
    })?;
    Ok(Quote {
        class: PlanClass::of_type(plan.plan_type.as_deref()),
        ..Quote::new(&request.plan, request.image.as_deref(), 1, period)
    })
}

/// Provisions `request` for `principal` in `project` — the paid path reads top to bottom here:
///
/// 1. **Ledger first**: a payment header is decoded and looked up by its payment key; a known
///    payment of the same owner and request resumes its order (its outcome, at any time), a
///    credit is redeemed by a corrected request, anything else is 409.
/// 2. **Checks** ([`check`]) before any 402 or charge. A free plan is created at once.
/// 3. **Claim**: the offline x402 checks, then the order row with the sandbox id fixed now.
/// 4. **Fulfil** ([`fulfil`]): settle → create-or-adopt → record, within `deadline`.
///
/// Errors: 400 (fields, an undecodable header), 402 (no or an unacceptable payment), 409
/// (payment used elsewhere), 503 with `Retry-After` (no time left to settle; nothing charged),
/// errors after settlement carry the payment response ([`ApiError::Charged`]).
pub async fn provision(
    state: &AppState,
    principal: &Principal,
    project: u64,
    request: ValidProvisionRequest,
    resource: &str,
    payment: Option<PaymentHeader>,
    deadline: &Deadline,
) -> Result<Outcome, ApiError> {
    state.upstream()?;
    let request_json = serde_json::to_string(&request)
        .map_err(|e| ApiError::Internal(format!("cannot serialise the request: {e}")))?;
    let binding = Binding {
        kind: OrderKind::Provision,
        project,
        request: &request_json,
        target: Target::NewServer {
            plan: &request.plan,
            region: &request.region,
        },
    };
    // Priced (and refused as the provider would), then held to the key's policy: all before
    // any 402.
    let price = || async {
        let quote = check(state, Some(project), &request).await?;
        crate::keys::check_policy(principal, &request.plan, &request.region, &quote)?;
        Ok(quote)
    };
    let free = Box::pin(create(state, principal, project, &request));
    let paid = ledger_first(
        state,
        principal,
        &binding,
        payment,
        price,
        Some(free),
        resource,
        deadline,
    );
    // Boxed: the paid path's future is large (and a test thread's stack is 2 MiB).
    Box::pin(paid).await
}

/// The paid flow of [`provision`] and [`renew`], ledger first: a payment the ledger knows is
/// resumed, redeemed or refused ([`known`]); otherwise the request is priced — `price` refuses
/// what the provider would, before any 402 — and a free one is done by `free` (not run
/// otherwise), a paid one offered, claimed and fulfilled ([`pay`]).
#[allow(clippy::too_many_arguments)]
async fn ledger_first<Q>(
    state: &AppState,
    principal: &Principal,
    binding: &Binding<'_>,
    payment: Option<PaymentHeader>,
    price: impl Fn() -> Q,
    free: Option<impl std::future::Future<Output = Result<Outcome, ApiError>>>,
    resource: &str,
    deadline: &Deadline,
) -> Result<Outcome, ApiError>
where
    Q: std::future::Future<Output = Result<Quote, ApiError>>,
{
    let presented = payment.map(payments::present).transpose()?;
    if let Some(presented) = &presented
        && let Some(order) = payments::lookup(state, presented).await?
    {
        let known = known(
            state,
            principal,
            binding,
            presented,
            order,
            deadline,
            price(),
        );
        return Box::pin(known).await;
    }
    let quote = price().await?;
    if quote.is_free()
        && let Some(free) = free
    {
        return free.await;
    }
    let pay = pay(
        state, principal, binding, &quote, resource, presented, deadline,
    );
    Box::pin(pay).await
}

/// The paid tail of [`provision`] and [`renew`]: the offer (402 without a payment), the offline
/// checks, the claim, then [`fulfil`].
async fn pay(
    state: &AppState,
    principal: &Principal,
    binding: &Binding<'_>,
    quote: &Quote,
    resource: &str,
    presented: Option<payments::Presented>,
    deadline: &Deadline,
) -> Result<Outcome, ApiError> {
    // A key that may not pay, or has not that much left to spend, is refused before any offer
    // (or any check of a payment).
    crate::keys::require(principal, crate::keys::Scope::Pay)?;
    let new_server = matches!(binding.target, Target::NewServer { .. });
    crate::keys::check_spend(&state.store, principal, quote.atomic(), new_server).await?;
    let offer = payments::offer(state, quote, resource)?;
    let Some(presented) = presented else {
        return Err(payments::demand(quote, &offer, payments::NO_PAYMENT));
    };
    let now = crate::time::now().unix_timestamp();
    let verified = payments::verify_offline(&presented, quote, &offer, now as u64)?;
    let claim = payments::claim(state, principal, binding, &verified, quote.class, now)
        .await
        .map_err(|err| match err {
            ApiError::PolicyViolation { .. } => err,
            err => {
                tracing::error!(error = %err, "the payment could not be claimed");
                not_charged("the payment could not be recorded")
            }
        })?;
    match claim {
        // A concurrent request of the key used what was left: nothing recorded or charged.
        Claim::OverLimit => {
            Err(crate::keys::over_limit(&state.store, principal, quote.atomic(), new_server).await)
        }
        Claim::New(order) => {
            state.checkpoint(Step::Claimed).await;
            fulfil(state, *order, deadline, now).await
        }
        // Claimed by a concurrent request between the lookup and the claim.
        Claim::Existing(order) => {
            let price = std::future::ready(Ok(quote.clone()));
            Box::pin(known(
                state, principal, binding, &presented, *order, deadline, price,
            ))
            .await
        }
    }
}

/// A payment the ledger knows: resume, redeem (at the price `price` resolves to, only then
/// asked) or refuse it.
async fn known(
    state: &AppState,
    principal: &Principal,
    binding: &Binding<'_>,
    presented: &payments::Presented,
    order: Order,
    deadline: &Deadline,
    price: impl std::future::Future<Output = Result<Quote, ApiError>>,
) -> Result<Outcome, ApiError> {
    let span = order_span(&order);
    let _enter = span.enter();
    tracing::info!(state = %order.state, "a known payment");
    drop(_enter);
    let fingerprint = payments::fingerprint(&principal.owner, binding.project, binding.request);
    match payments::classify(&order, &principal.owner, &fingerprint, presented) {
        Known::Same => resume(state, order, deadline).instrument(span).await,
        Known::Redeem => {
            let quote = price.await?;
            // Paid already: only a new server counts against the key.
            let new_server = matches!(binding.target, Target::NewServer { .. });
            crate::keys::check_spend(&state.store, principal, 0, new_server).await?;
            let now = crate::time::now().unix_timestamp();
            async {
                let order = payments::redeem(state, principal, &order, binding, &quote, now)
                    .await
                    .map_err(|e| payments::charged(&order, e, "the credit is unchanged"))?;
                fulfil(state, order, deadline, now).await
            }
            .instrument(span)
            .await
        }
        Known::Conflict(why) => Err(ApiError::Conflict(why)),
    }
}

fn order_span(order: &Order) -> tracing::Span {
    tracing::info_span!("order", order = %order.order_id, payment = %order.id)
}

/// A known order of this very request: its outcome when final; in flight, taken over when its
/// lease expired, else waited for up to `X402_WAIT_SECONDS` and answered 202 if still running.
async fn resume(state: &AppState, order: Order, deadline: &Deadline) -> Result<Outcome, ApiError> {
    let wait_until = tokio::time::Instant::now()
        + state
            .config
            .payments
            .wait
            .min(deadline.remaining().saturating_sub(crate::deadline::MARGIN));
    let mut order = order;
    loop {
        if !order.state.in_flight() {
            return outcome(&order, None);
        }
        let now = crate::time::now().unix_timestamp();
        if order.lease_until < now
            && let Some(held) = payments::take(state, &order, now).await?
        {
            return fulfil(state, held, deadline, now).await;
        }
        if tokio::time::Instant::now() >= wait_until {
            return outcome(&order, Some("another attempt is working on this order"));
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        order = state
            .store
            .order(&order.id)
            .await?
            .ok_or_else(|| ApiError::Internal(format!("order {} vanished", order.order_id)))?;
    }
}

/// Drives a held order to a final state — settle → create-or-adopt → record — or as far as
/// `deadline` allows, and says what its requester gets. Also what the reconciler runs for
/// every order past its lease; `now` is the attempt's clock (unix seconds).
///
/// Errors: the store's; 503 with `Retry-After` when the payment could not be settled in time
/// (nothing charged); errors after settlement carry the payment response.
pub async fn fulfil(
    state: &AppState,
    order: Order,
    deadline: &Deadline,
    now: i64,
) -> Result<Outcome, ApiError> {
    let span = order_span(&order);
    // Boxed: the paid path's future is large, and callers nest it.
    Box::pin(fulfil_order(state, order, deadline, now))
        .instrument(span)
        .await
}

async fn fulfil_order(
    state: &AppState,
    mut order: Order,
    deadline: &Deadline,
    now: i64,
) -> Result<Outcome, ApiError> {
    loop {
        let snapshot = order.clone();
        let after_settlement = |error: ApiError| {
            payments::charged(
                &snapshot,
                error,
                "the order completes in the background: retry with the same payment for its \
                outcome",
            )
        };
        let step = match order.state {
            OrderState::Claimed | OrderState::Settling => {
                let settled = payments::settle(state, order, deadline, now).await;
                let settled = settled.map_err(|error| match error {
                    // The claimed → settling intent could not be written: settle never ran.
                    ApiError::Store(err) if snapshot.state == OrderState::Claimed => {
                        tracing::error!(error = %err, "cannot record the settling intent");
                        not_charged("the payment could not be processed now")
                    }
                    other => other,
                })?;
                match settled {
                    Settled::Paid(next) => Progress::Moved(next),
                    Settled::Stopped(Some(next)) => Progress::Moved(next),
                    Settled::Stopped(None) => Progress::Lost,
                    Settled::Unresolved(held, why) => Progress::Paused(held, why),
                    Settled::OutOfTime(held) => {
                        payments::release(state, &held).await;
                        return Err(not_charged(&format!(
                            "too little time was left to settle payment {}",
                            held.id
                        )));
                    }
                }
            }
            OrderState::Settled | OrderState::Creating => match order.kind {
                OrderKind::Provision => create_or_adopt(state, order, deadline, now).await,
                OrderKind::Renewal => extend(state, order, now).await,
            }
            .map_err(after_settlement)?,
            OrderState::Provisioned
            | OrderState::Credited
            | OrderState::Rejected
            | OrderState::Expired
            | OrderState::Refunded => return outcome(&order, None),
        };
        order = match step {
            Progress::Moved(next) => next,
            Progress::Paused(held, why) => {
                payments::release(state, &held).await;
                return outcome(&held, Some(&why));
            }
            // Another attempt moved the order: answer where it is now.
            Progress::Lost => {
                let current = state.store.order(&snapshot.id).await?.ok_or_else(|| {
                    ApiError::Internal(format!("order {} vanished", snapshot.order_id))
                })?;
                return outcome(&current, Some("another attempt is working on this order"));
            }
        };
    }
}

/// 503 with `Retry-After: 2` for a paid request stopped before anything was charged.
fn not_charged(what: &str) -> ApiError {
    ApiError::Busy {
        message: format!("{what}; nothing was charged — retry with the same payment"),
        retry_after: 2,
    }
}

/// What one step of [`fulfil`] did.
enum Progress {
    /// The order moved (as written).
    Moved(Order),
    /// The step cannot go further now (out of time, outcome unclear); why.
    Paused(Order, String),
    /// Another attempt moved the order first.
    Lost,
}

/// Creates the order's server, or adopts the one a lost create left behind: the project is
/// searched for a server tagged with the order's sandbox id before every create, and each
/// create is announced (`creating`, attempts counted) before it is sent. Deterministic refusals,
/// the attempts cap and the order's deadline make the order a credit.
async fn create_or_adopt(
    state: &AppState,
    order: Order,
    deadline: &Deadline,
    now: i64,
) -> Result<Progress, ApiError> {
    let upstream = state.upstream()?;
    let timeout = state.config.upstream.timeout;
    let request: ValidProvisionRequest = serde_json::from_str(&order.request)
        .map_err(|e| ApiError::Internal(format!("order {}: request: {e}", order.order_id)))?;
    let mut order = order;
    loop {
        if !deadline.allows(timeout) {
            return Ok(Progress::Paused(
                order,
                "provisioning continues in the background".into(),
            ));
        }
        tracing::info!(
            sandbox = order.sandbox_id,
            "searching the project for the order's server"
        );
        match upstream
            .find_tagged(order.project_id, SANDBOX_TAG, &order.sandbox_id)
            .await
        {
            Ok(Some(server)) => return record(state, order, server, now).await,
            Ok(None) => {}
            Err(err) => {
                tracing::warn!(error = %err, "cannot search the project; no create without it");
                return Ok(Progress::Paused(
                    order,
                    "the provider cannot be reached; provisioning continues in the background"
                        .into(),
                ));
            }
        }
        let bound = crate::time::parse_rfc3339(&order.bound_at)
            .map(|t| t.unix_timestamp())
            .unwrap_or(now);
        let past_deadline = now > bound + state.config.payments.order_deadline.as_secs() as i64;
        if order.create_attempts >= state.config.payments.create_attempts || past_deadline {
            let reason = if past_deadline {
                "the server could not be provisioned before the order's deadline"
            } else {
                "the provider did not create the server after repeated attempts"
            };
            return credited(state, &order, reason, now).await;
        }
        if !deadline.allows(timeout) {
            return Ok(Progress::Paused(
                order,
                "provisioning continues in the background".into(),
            ));
        }
        let changes = OrderChanges {
            create_attempts: Some(order.create_attempts + 1),
            ..OrderChanges::default()
        };
        let Some(next) = payments::advance(
            state,
            &order,
            OrderState::Creating,
            changes,
            SideWrites::default(),
            now,
        )
        .await?
        else {
            return Ok(Progress::Lost);
        };
        order = next;
        state.checkpoint(Step::BeforeCreate).await;
        tracing::info!(
            attempt = order.create_attempts,
            "asking the provider to create the server"
        );
        match upstream
            .create_server(
                order.project_id,
                &create_body(&request, &order.sandbox_id, &order.owner),
            )
            .await
        {
            Ok(server) => {
                state.checkpoint(Step::AfterCreate).await;
                return record(state, order, server, now).await;
            }
            Err(UpstreamError::Status {
                status: status @ (400 | 404 | 409 | 422),
                message,
                ..
            }) => {
                let reason = format!("the provider refused the server (HTTP {status}): {message}");
                return credited(state, &order, &reason, now).await;
            }
            Err(UpstreamError::RateLimited { retry_after }) => {
                let pause = std::time::Duration::from_secs(retry_after.unwrap_or(1).min(2));
                tracing::warn!(?pause, "the provider rate-limited the create");
                if deadline.allows(pause + timeout) {
                    tokio::time::sleep(pause).await;
                }
            }
            Err(err) => {
                tracing::warn!(
                    error = %err,
                    "create outcome unclear; searching before anything else",
                );
            }
        }
    }
}

async fn credited(
    state: &AppState,
    order: &Order,
    reason: &str,
    now: i64,
) -> Result<Progress, ApiError> {
    Ok(match payments::credit(state, order, reason, now).await? {
        Some(order) => Progress::Moved(order),
        None => Progress::Lost,
    })
}

/// The provider's create body for `request`, tagged with the sandbox id and owner.
fn create_body(request: &ValidProvisionRequest, sandbox_id: &str, owner: &str) -> CreateServer {
    let mut tags = request.tags.clone();
    tags.insert(SANDBOX_TAG.into(), sandbox_id.to_owned());
    tags.insert(OWNER_TAG.into(), owner.to_owned());
    CreateServer {
        plan: request.plan.clone(),
        region: request.region.clone(),
        image: request.image.clone(),
        hostname: request.hostname.clone(),
        ssh_keys: request.ssh_keys.clone(),
        user_data: request.user_data.clone(),
        tags,
        spot_market: false,
        cycle: "hourly".into(),
    }
}

/// Records a created (or adopted) server for its order: the ownership, the sandbox and the
/// order's `provisioned` state in one transaction. The provider's answer is kept without its
/// credentials.
async fn record(
    state: &AppState,
    order: Order,
    server: Value,
    now: i64,
) -> Result<Progress, ApiError> {
    let view = ServerView::of(&server)?;
    tracing::info!(server = view.id, "recording the server as the owner's");
    let lease = leases::first(state, now);
    let mut server = server;
    leases::annotate(&mut server, &lease.lease, now);
    let at = crate::time::now_rfc3339();
    let side = SideWrites {
        ownership: Some(ServerOwnership {
            server_id: view.id,
            owner: order.owner.clone(),
            sandbox_id: order.sandbox_id.clone(),
            project_id: order.project_id,
            created_at: at.clone(),
        }),
        sandbox_status: Some(SandboxStatus {
            sandbox_id: order.sandbox_id.clone(),
            status: status_of(&view),
            server_id: Some(view.id),
            project_id: Some(order.project_id),
            hostname: view.hostname.clone(),
            lease: Some(lease),
            // The server as created, due to the refresher at once (stages: waiting).
            watch: Some(WatchChange {
                watch: crate::stages::created(&server, &order.bound_at, &at),
                read_seq: None,
                due: Some(now),
            }),
            unwatch: false,
        }),
        ..SideWrites::default()
    };
    let changes = OrderChanges {
        server_id: Some(view.id),
        server: serde_json::to_string(&without_credentials(server.clone())).ok(),
        ..OrderChanges::default()
    };
    match payments::advance(state, &order, OrderState::Provisioned, changes, side, now).await? {
        // The answer of this attempt keeps the credentials the provider shows once.
        Some(mut recorded) => {
            recorded.server = serde_json::to_string(&server).ok();
            Ok(Progress::Moved(recorded))
        }
        None => Ok(Progress::Lost),
    }
}

/// A server object without `password` fields (initial and BMC credentials): never stored.
pub fn without_credentials(mut server: Value) -> Value {
    fn strip(value: &mut Value) {
        match value {
            Value::Object(fields) => {
                fields.remove("password");
                fields.values_mut().for_each(strip);
            }
            Value::Array(items) => items.iter_mut().for_each(strip),
            _ => {}
        }
    }
    strip(&mut server);
    server
}

/// The body of `POST /api/cloud/servers/{serverId}/renewals`: `periods`, 1 to
/// [`MAX_RENEWAL_PERIODS`] paid periods (`PAID_PERIOD_SECONDS` each).
#[derive(Debug, Clone, PartialEq, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RenewalRequest {
    /// Periods to add.
    pub periods: u32,
}

/// What a renewal order is bound to (its request, as stored and fingerprinted).
#[derive(Debug, Clone, PartialEq, serde::Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Renewal {
    /// The server.
    server_id: u64,
    /// Periods to add.
    periods: u32,
}

/// The most periods one renewal buys.
pub const MAX_RENEWAL_PERIODS: u32 = 12;

/// What one period more of `server` (its sandbox `record`) costs: its plan's and its deployed
/// image's hourly prices on the hourly cycle, now — the price a new server would pay.
///
/// Errors: 410 when the server is gone (deleted by its owner, by its lease, or unknown at the
/// provider); 409 for a free server (no lease to renew); 503 when it cannot be priced.
async fn renewal_quote(
    state: &AppState,
    server: u64,
    sandbox_id: &str,
    periods: u32,
) -> Result<Quote, ApiError> {
    let gone = || ApiError::Gone(format!("server {server} was deleted; nothing to renew"));
    let record = state.store.sandbox(sandbox_id).await?.ok_or_else(gone)?;
    let Some(lease) = &record.lease else {
        return Err(ApiError::Conflict(format!(
            "server {server} is free: it has no paid time to renew"
        )));
    };
    if leases::renewed(state, lease, periods, 0).is_none() {
        return Err(gone());
    }
    let object = match state.upstream()?.server(server).await {
        Ok(object) => object,
        Err(UpstreamError::Status { status: 404, .. }) => return Err(gone()),
        Err(err) => return Err(err.into()),
    };
    let plan_slug = object["plan"]["slug"]
        .as_str()
        .map(str::to_owned)
        .or(record.plan.clone())
        .ok_or_else(|| ApiError::Unavailable(format!("server {server} names no plan")))?;
    let plan = discovery::find_plan(state, &plan_slug)
        .await?
        .ok_or_else(|| ApiError::Unavailable(format!("plan `{plan_slug}` is no longer offered")))?;
    let image = object["deployed_image"]["slug"].as_str();
    let image_pricing = match image {
        Some(image) => discovery::plan_image(state, &plan_slug, image)
            .await?
            .and_then(|i| Pricing::of(&i)),
        None => None,
    };
    let hours = crate::pricing::hours(state.config.payments.period.as_secs());
    let period = crate::pricing::period_price(
        &plan.pricing,
        image_pricing.as_ref().map(Pricing::entries),
        hours,
        &state.config.pricing,
    )
    .map_err(|why| ApiError::Unavailable(format!("plan `{plan_slug}` cannot be priced: {why}")))?;
    Ok(Quote::new(&plan_slug, image, periods, period))
}

/// Buys `request.periods` more paid periods for `server`, owner only, with x402 on the same
/// ledger as provisioning — ledger first, replays, 409 on another request, credits redeemed —
/// then [`fulfil`] extends the lease (with the order's `provisioned` state, in one transaction).
///
/// Errors: 400 (`periods`); 403 not the owner; 409 a free server; 410 a deleted server; 402
/// without an acceptable payment; those of [`provision`]'s paid path.
pub async fn renew(
    state: &AppState,
    principal: &Principal,
    server: u64,
    request: RenewalRequest,
    resource: &str,
    payment: Option<PaymentHeader>,
    deadline: &Deadline,
) -> Result<Outcome, ApiError> {
    state.upstream()?;
    if !(1..=MAX_RENEWAL_PERIODS).contains(&request.periods) {
        return Err(ApiError::invalid(
            "periods",
            format!("must be 1 to {MAX_RENEWAL_PERIODS}"),
        ));
    }
    let ownership = authorize(state, principal, server).await?;
    let request = Renewal {
        server_id: server,
        periods: request.periods,
    };
    let request_json = serde_json::to_string(&request)
        .map_err(|e| ApiError::Internal(format!("cannot serialise the request: {e}")))?;
    let binding = Binding {
        kind: OrderKind::Renewal,
        project: ownership.project_id,
        request: &request_json,
        target: Target::Server {
            sandbox_id: &ownership.sandbox_id,
        },
    };
    let price = || renewal_quote(state, server, &ownership.sandbox_id, request.periods);
    // A renewal is never free: a free server has no lease (409 from the quote).
    let free: Option<std::future::Ready<Result<Outcome, ApiError>>> = None;
    let paid = ledger_first(
        state, principal, &binding, payment, price, free, resource, deadline,
    );
    Box::pin(paid).await
}

/// Extends the lease of a renewal's server, in one transaction with the order's `provisioned`
/// state, conditional on the lease as read (a racing expiry step or deletion makes it read
/// again); a server that is gone makes the payment a credit. A server being, or already,
/// powered off is powered on right after (or by the reconciler, which the lease asks).
async fn extend(state: &AppState, order: Order, now: i64) -> Result<Progress, ApiError> {
    let request: Renewal = serde_json::from_str(&order.request)
        .map_err(|e| ApiError::Internal(format!("order {}: request: {e}", order.order_id)))?;
    for _ in 0..3 {
        let record = state.store.sandbox(&order.sandbox_id).await?;
        let renewed = record
            .as_ref()
            .and_then(|r| r.lease.as_ref())
            .and_then(|lease| leases::renewed(state, lease, request.periods, now));
        let (Some(record), Some((lease, due))) = (record, renewed) else {
            return credited(
                state,
                &order,
                "the server was deleted before the renewal applied",
                now,
            )
            .await;
        };
        let result = serde_json::json!({
            "serverId": request.server_id,
            "periods": request.periods,
            "amount": order.amount,
            "paidUntil": lease.paid_until,
            "graceEndsAt": lease.grace_ends_at,
        });
        let power_on = lease.power_on;
        let side = SideWrites {
            sandbox_status: Some(SandboxStatus {
                sandbox_id: record.id.clone(),
                status: record.status.clone(),
                lease: Some(LeaseChange {
                    read_seq: record.lease.as_ref().map(|l| l.seq),
                    lease,
                    due: Some(due),
                }),
                ..SandboxStatus::default()
            }),
            ..SideWrites::default()
        };
        let changes = OrderChanges {
            server_id: Some(request.server_id),
            server: Some(result.to_string()),
            ..OrderChanges::default()
        };
        tracing::info!(
            server = request.server_id,
            periods = request.periods,
            "extending the lease"
        );
        let at = crate::time::now_rfc3339();
        match state
            .store
            .advance_order(&order, OrderState::Provisioned, changes, side, 0, &at)
            .await?
        {
            Advance::Done(done) => {
                crate::metrics::order_transition(order.state.as_str(), "provisioned");
                if power_on
                    && let Ok(Some(record)) = state.store.sandbox(&order.sandbox_id).await
                    && let Err(err) = leases::power_on(state, &record).await
                {
                    tracing::warn!(
                        error = %err,
                        "power-on after renewal failed; the reconciler retries"
                    );
                }
                return Ok(Progress::Moved(*done));
            }
            Advance::Blocked => continue,
            Advance::Lost(_) => return Ok(Progress::Lost),
        }
    }
    Ok(Progress::Paused(
        order,
        "the lease kept changing; the renewal completes in the background".into(),
    ))
}

/// What `GET /api/cloud/quote` answers: the exact offer a provisioning (or a renewal) would
/// carry now, with no side effect.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct QuoteAnswer {
    /// USDC atomic units, decimal string — the 402's `amount` / `maxAmountRequired`.
    pub amount: String,
    /// The same in USD.
    #[serde(with = "rust_decimal::serde::float")]
    #[schema(value_type = f64)]
    pub amount_usd: rust_decimal::Decimal,
    /// Whether nothing is to be paid (a free plan).
    pub free: bool,
    /// CAIP-2 network of the payment.
    pub network: &'static str,
    /// The USDC contract.
    pub asset: &'static str,
    /// The treasury (`null` when paid plans are not configured).
    pub pay_to: Option<String>,
    /// The offer's `maxTimeoutSeconds`.
    pub max_timeout_seconds: u64,
    /// How the price was made: periods, hours, plan and image parts, rates, markup.
    pub price: Quote,
    /// Until when the prices behind it are reused (RFC 3339); a 402 after that may differ.
    pub valid_until: String,
}

/// The quote of `GET /api/cloud/quote`: for a new server (`plan`, `region`, optional `image`
/// and `projectId`), or, with `serverId`, for a renewal of the caller's server; `periods` 1 to
/// [`MAX_RENEWAL_PERIODS`] (default 1).
///
/// Errors: 400 naming the field for anything provisioning (or renewing) would refuse before
/// payment; 403 another owner's server; 409 a free server; 410 a deleted one; 503 a plan that
/// cannot be priced.
pub async fn quote(
    state: &AppState,
    principal: &Principal,
    query: &QuoteQuery<'_>,
) -> Result<QuoteAnswer, ApiError> {
    state.upstream()?;
    let periods = match query.periods {
        None => 1,
        Some(p) => p
            .parse::<u32>()
            .ok()
            .filter(|p| (1..=MAX_RENEWAL_PERIODS).contains(p))
            .ok_or_else(|| {
                ApiError::invalid("periods", format!("must be 1 to {MAX_RENEWAL_PERIODS}"))
            })?,
    };
    let quote = match query.server_id {
        Some(server) => {
            let server = validate::numeric_id("serverId", server)?;
            let ownership = authorize(state, principal, server).await?;
            renewal_quote(state, server, &ownership.sandbox_id, periods).await?
        }
        None => {
            let required = |field: &str, value: Option<&str>| {
                value
                    .map(str::to_owned)
                    .ok_or_else(|| ApiError::invalid(field, "is required (or give serverId)"))
            };
            let request = ProvisionRequest {
                plan: required("plan", query.plan)?,
                region: required("region", query.region)?,
                image: query.image.map(str::to_owned),
                hostname: None,
                ssh_keys: vec![],
                user_data: None,
                tags: BTreeMap::new(),
            }
            .validate()?;
            let project = query
                .project_id
                .map(|p| validate::numeric_id("projectId", p))
                .transpose()?;
            let one = check(state, project, &request).await?;
            Quote::new(&one.plan, one.image.as_deref(), periods, one.period)
        }
    };
    let payments = &state.config.payments;
    let at = crate::time::now() + state.config.discovery_ttl;
    Ok(QuoteAnswer {
        amount: quote.amount.clone(),
        amount_usd: quote.cost_usd,
        free: quote.is_free(),
        network: payments.network.caip2(),
        asset: payments.network.usdc(),
        pay_to: payments.pay_to.clone(),
        max_timeout_seconds: payments.max_timeout_seconds,
        valid_until: crate::time::rfc3339(at),
        price: quote,
    })
}

/// The query parameters of `GET /api/cloud/quote`, as received.
#[derive(Debug, Clone, Copy, Default)]
pub struct QuoteQuery<'a> {
    /// Plan slug (a new server).
    pub plan: Option<&'a str>,
    /// Region slug (a new server).
    pub region: Option<&'a str>,
    /// Image slug (a new server).
    pub image: Option<&'a str>,
    /// Project id (a new server; checked when given).
    pub project_id: Option<&'a str>,
    /// A server of the caller's, to renew.
    pub server_id: Option<&'a str>,
    /// Periods, 1-12.
    pub periods: Option<&'a str>,
}

/// What the requester of `order` gets now; `paused` says why an in-flight order stopped.
fn outcome(order: &Order, paused: Option<&str>) -> Result<Outcome, ApiError> {
    let plan = serde_json::from_str::<ValidProvisionRequest>(&order.request)
        .map(|r| r.plan)
        .unwrap_or_default();
    match order.state {
        OrderState::Provisioned => {
            let server = order
                .server
                .as_deref()
                .and_then(|s| serde_json::from_str(s).ok())
                .ok_or_else(|| {
                    ApiError::Internal(format!("order {} lost its server", order.order_id))
                })?;
            Ok(Outcome::Created {
                server,
                sandbox_id: order.sandbox_id.clone(),
                settlement: payments::settlement_of(order),
            })
        }
        OrderState::Credited => Err(payments::charged(
            order,
            ApiError::Conflict(format!(
                "payment {} provisioned nothing: {}",
                order.id,
                order
                    .reason
                    .as_deref()
                    .unwrap_or("the server could not be provisioned")
            )),
            "it is a credit of its owner: send the same payment header with a corrected request \
            costing no more to redeem it (see GET /api/payments)",
        )),
        OrderState::Rejected | OrderState::Expired => Err(payments::refused(order, &plan)),
        OrderState::Refunded => Err(ApiError::Conflict(format!(
            "payment {} was a credit and has been refunded ({})",
            order.id,
            order.refund.as_deref().unwrap_or("no note")
        ))),
        OrderState::Claimed | OrderState::Settling | OrderState::Settled | OrderState::Creating => {
            let why = paused.unwrap_or("the order is in progress");
            let detail = if order.state.maybe_charged() {
                format!(
                    "{why}; the server is provisioned without further action (or the payment \
                    becomes a credit); poll GET /api/sandboxes/{} every 10 s or more",
                    order.sandbox_id
                )
            } else {
                format!(
                    "{why}; nothing has been charged yet; retry with the same payment or poll GET \
                    /api/sandboxes/{}",
                    order.sandbox_id
                )
            };
            Ok(Outcome::Accepted {
                sandbox_id: order.sandbox_id.clone(),
                payment: Box::new(PaymentView::of(order)),
                settlement: payments::settlement_of(order),
                detail,
            })
        }
    }
}

/// Creates a free server (once, never retried) and records its ownership and sandbox in one
/// transaction. No price check: callers decide that the server is free. When the create's
/// outcome is unclear (timeout, connection lost, 5xx), the project is searched for the server
/// tagged with this request's sandbox id, and a server found is recorded — never orphaned, never
/// created twice.
///
/// Errors: the provider's errors (400/404/502/504); 500 when the server was created but could
/// not be recorded (logged with its id).
pub async fn create(
    state: &AppState,
    principal: &Principal,
    project: u64,
    request: &ValidProvisionRequest,
) -> Result<Outcome, ApiError> {
    let upstream = state.upstream()?;
    let sandbox_id = ids::new(ids::SANDBOX);
    // Counted against the key before it exists (given back if the create fails).
    let held = crate::keys::hold_server(&state.store, principal, &sandbox_id).await?;
    let body = create_body(request, &sandbox_id, &principal.owner);
    let server = match upstream.create_server(project, &body).await {
        Ok(server) => server,
        // The answer was lost or failed after the provider may have created it: a server
        // carrying this request's tag is this request's, recorded rather than orphaned.
        Err(
            err @ (UpstreamError::Timeout | UpstreamError::Transport(_) | UpstreamError::Decode(_)),
        )
        | Err(
            err @ UpstreamError::Status {
                status: 500..=599, ..
            },
        ) => {
            tracing::warn!(
                error = %err,
                sandbox = sandbox_id,
                "create outcome unclear; searching for it"
            );
            match upstream
                .find_tagged(project, SANDBOX_TAG, &sandbox_id)
                .await
            {
                Ok(Some(server)) => server,
                _ => return Err(err.into()),
            }
        }
        Err(err) => {
            crate::keys::release_server(&state.store, held).await;
            return Err(err.into());
        }
    };
    let view = ServerView::of(&server)?;
    let now = crate::time::now_rfc3339();
    let sandbox = SandboxRecord {
        id: sandbox_id,
        owner: principal.owner.clone(),
        server_id: Some(view.id),
        project_id: Some(project),
        plan: Some(request.plan.clone()),
        region: Some(request.region.clone()),
        hostname: view.hostname.clone().or(request.hostname.clone()),
        name: None,
        metadata: BTreeMap::new(),
        status: status_of(&view),
        watch: Some(crate::stages::created(&server, &now, &now)),
        payment: None,
        created_at: now.clone(),
        updated_at: now.clone(),
        lease: None,
    };
    let ownership = ServerOwnership {
        server_id: view.id,
        owner: principal.owner.clone(),
        sandbox_id: sandbox.id.clone(),
        project_id: project,
        created_at: now,
    };
    if let Err(err) = state.store.record_server(&ownership, &sandbox).await {
        tracing::error!(
            server_id = view.id,
            sandbox_id = sandbox.id,
            owner = principal.owner,
            error = %err,
            "server created but its ownership could not be recorded"
        );
        return Err(err.into());
    }
    Ok(Outcome::Created {
        server,
        sandbox_id: sandbox.id,
        settlement: None,
    })
}

/// The provider's status of a server (`status`, else `state`, else `unknown`).
pub fn status_of(view: &ServerView) -> String {
    view.status
        .clone()
        .or_else(|| view.state.clone())
        .unwrap_or_else(|| "unknown".into())
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
    let now = crate::time::now().unix_timestamp();
    let mut servers = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = state
            .store
            .sandboxes_of(
                &principal.owner,
                crate::sandboxes::MAX_LIMIT,
                cursor.as_deref(),
            )
            .await?;
        for record in page.items {
            if let Some(server) = listed(state, &record, project, now) {
                servers.push(server);
            }
        }
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
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
    if !crate::stages::live(record) {
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
    let progress = crate::stages::Progress::of(state, record);
    let mut server = crate::stages::server_object(watch)?;
    progress.annotate(&mut server, &record.id);
    if let Some(lease) = &record.lease {
        leases::annotate(&mut server, lease, now);
    }
    Some(server)
}

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
    /// `rebuild`: SSH key ids (optional).
    #[serde(default)]
    pub ssh_keys: Option<Vec<Value>>,
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

/// Turns an action request into the provider's action, checking that each type gets exactly
/// the fields it takes: `rebuild` needs `image`, `hostname`, `password` and may have `ssh_keys`,
/// `user_data`; `enter-rescue-mode` needs `password`; the others take nothing.
///
/// Errors: 400 naming `type` (unknown type) or the missing, malformed or unexpected field.
pub fn parse_action(request: ActionRequest) -> Result<ServerAction, ApiError> {
    let ActionRequest {
        kind,
        image,
        hostname,
        password,
        ssh_keys,
        user_data,
    } = request;
    let given = [
        ("image", image.is_some()),
        ("hostname", hostname.is_some()),
        ("password", password.is_some()),
        ("ssh_keys", ssh_keys.is_some()),
        ("user_data", user_data.is_some()),
    ];
    let allowed: &[&str] = match kind.as_str() {
        "rebuild" => &["image", "hostname", "password", "ssh_keys", "user_data"],
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
    Ok(match kind.as_str() {
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
                ssh_keys: validate::ssh_keys("ssh_keys", &ssh_keys.unwrap_or_default())?,
                user_data,
            }
        }
    })
}

/// Runs `action` on `server` for its owner; returns the provider's server object and records
/// the status it reports on the sandbox.
///
/// Errors: 403 not the owner; the provider's errors (e.g. 400 rescue mode on a VPS).
pub async fn act(
    state: &AppState,
    principal: &Principal,
    server: u64,
    action: &ServerAction,
) -> Result<Acted, ApiError> {
    let upstream = state.upstream()?;
    let ownership = authorize(state, principal, server).await?;
    let record = state.store.sandbox(&ownership.sandbox_id).await?;
    let lease = record.as_ref().and_then(|s| s.lease.clone());
    if let Some(lease) = &lease
        && lease.state != LeaseState::Active
        && *action != ServerAction::PowerOff
    {
        return Err(ApiError::Conflict(format!(
            "the paid time of server {server} ended ({}): renew it first with POST {}",
            lease.state.as_str(),
            leases::renew_link(server)
        )));
    }
    let mut result = upstream.server_action(server, action).await?;
    let now = crate::time::now().unix_timestamp();
    if let Ok(view) = ServerView::of(&result)
        && lease.as_ref().is_none_or(|l| l.state == LeaseState::Active)
        && let Some(record) = record
    {
        let hostname = match action {
            ServerAction::Rebuild { hostname, .. } => Some(hostname.clone()),
            _ => None,
        };
        let change = SandboxStatus {
            sandbox_id: record.id.clone(),
            status: status_of(&view),
            hostname,
            watch: record.watch.as_ref().map(|watch| WatchChange {
                watch: expect(watch, action, &result, now),
                read_seq: None,
                due: Some(now),
            }),
            ..SandboxStatus::default()
        };
        match state.store.change_sandbox(&change).await {
            Ok(_) => {
                let record = SandboxRecord {
                    status: change.status,
                    watch: change.watch.map(|w| w.watch),
                    ..record
                };
                crate::stages::Progress::of(state, &record).annotate(&mut result, &record.id);
            }
            Err(err) => tracing::warn!(server, error = %err, "could not record the transition"),
        }
    }
    let expires = lease.as_ref().filter(|l| leases::expires_soon(l, now));
    if let Some(lease) = &lease {
        leases::annotate(&mut result, lease, now);
    }
    Ok(Acted {
        lease_expires: expires.map(|l| l.paid_until.clone()),
        server: result,
    })
}

/// The watch after `action` was accepted (the provider answered `object` at `now`): the
/// transition it starts, to be confirmed by the refresher; not `ready` until SSH answers again
/// (a rebuild starts a new deployment, without a deadline).
fn expect(watch: &Watch, action: &ServerAction, object: &Value, now: i64) -> Watch {
    let at = crate::time::rfc3339(
        time::OffsetDateTime::from_unix_timestamp(now).unwrap_or_else(|_| crate::time::now()),
    );
    let transition = match action {
        ServerAction::PowerOff => "powering-off",
        ServerAction::PowerOn => "powering-on",
        ServerAction::Reboot => "rebooting",
        ServerAction::Rebuild { .. } => "rebuilding",
        ServerAction::EnterRescueMode { .. } => "entering-rescue-mode",
        ServerAction::ExitRescueMode => "exiting-rescue-mode",
    };
    let rebuild = matches!(action, ServerAction::Rebuild { .. });
    Watch {
        server: Some(without_credentials(object.clone()).to_string()),
        status_at: Some(at.clone()),
        transition: Some(transition.into()),
        transition_at: Some(at.clone()),
        ready_at: None,
        host_keys: if rebuild {
            Vec::new()
        } else {
            watch.host_keys.clone()
        },
        since: if rebuild { at } else { watch.since.clone() },
        first: watch.first && !rebuild,
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
    pub lease_expires: Option<String>,
}

/// Terminates `server` for its owner and marks its sandbox `terminating`. A server the provider
/// no longer knows (404) counts as already deleted.
///
/// Errors: 403 not the owner; the provider's other errors.
pub async fn delete(state: &AppState, principal: &Principal, server: u64) -> Result<(), ApiError> {
    let upstream = state.upstream()?;
    let ownership = authorize(state, principal, server).await?;
    let status = match upstream.delete_server(server).await {
        Ok(()) => "terminating",
        Err(UpstreamError::Status { status: 404, .. }) => "terminated",
        Err(err) => return Err(err.into()),
    };
    // A deleted server's lease stops (retried if a renewal or an expiry step moved it).
    for _ in 0..3 {
        let Some(record) = state.store.sandbox(&ownership.sandbox_id).await? else {
            return Ok(());
        };
        let recorded = if record.lease.is_some() {
            leases::end(state, &record, status).await?
        } else {
            // The refresher confirms the server is gone on its next pass.
            let now = crate::time::now().unix_timestamp();
            let change = SandboxStatus {
                sandbox_id: record.id.clone(),
                status: status.into(),
                watch: crate::stages::recheck(&record, now),
                ..SandboxStatus::default()
            };
            state.store.change_sandbox(&change).await?
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
        let rebuild = action(json!({
            "type": "rebuild", "image": "debian_12_64bit", "hostname": "runner-01",
            "password": "nW7xKp2LmQ9z", "ssh_keys": [9845], "user_data": "I2Nsb3VkLWNvbmZpZwo="
        }))
        .unwrap();
        assert_eq!(
            serde_json::to_value(rebuild).unwrap(),
            json!({"type": "rebuild", "image": "debian_12_64bit", "hostname": "runner-01",
                   "password": "nW7xKp2LmQ9z", "ssh_keys": [9845],
                       "user_data": "I2Nsb3VkLWNvbmZpZwo="})
        );
    }

    #[test]
    fn provision_request_validation_names_fields() {
        let req = |body: Value| {
            serde_json::from_value::<ProvisionRequest>(body)
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
