//! Paid orders with x402 (design brief §3, Money; durable orders): a request that pays is
//! looked up in the ledger first, then priced, offered, claimed and driven to one server or one
//! credit — or, when nothing is paid, to nothing at all.
//!
//! - [`machine`]: the order as a pure state machine, tested over its whole table.
//! - [`driver`]: records each transition, then carries out its effect ([`effects`]: facilitator,
//!   chain, provider), until the order pauses or finishes.
//! - [`ledger`]: the order's writes, as verbs, timed when written.
//! - [`buy`]: the paid path of a request, top to bottom — ledger first (a known payment resumes,
//!   redeems or is refused), then the price of the [`Purchase`], the 402 or the offline checks,
//!   the checks on chain (signature, balance, nonce), the claim, [`fulfil`].
//!
//! Every answer says what is true of the money: a 402 only when nothing was or will be charged;
//! before settlement, that the same payment will still be settled unless its authorization
//! expires (never "nothing was charged" while the reconciler may still settle it); after it,
//! the payment response.

pub mod driver;
pub mod effects;
pub mod ledger;
pub mod machine;

use crate::address::Owner;
use serde_json::Value;
use tracing::Instrument;

pub use driver::fulfil;

use crate::billing::payments::{self, Known, PaymentHeader, PaymentView, Presented, fingerprint};
use crate::billing::purchase::{Purchase, Renewal, ValidProvisionRequest};
use crate::checkpoint::Step;
use crate::deadline::Deadline;
use crate::error::ApiError;
use crate::identity::auth::Principal;
use crate::pricing::Quote;
use crate::ratelimit::slots;
use crate::state::AppState;
use crate::store::caps::Pool;
use crate::store::payments::{Claim, Order, OrderKind, OrderState};
use crate::store::sandboxes::{PlanClass, SandboxRecord};
use crate::x402::SettleResponse;

/// What an answer says of a payment that is not settled yet.
pub const NOT_CHARGED_YET: &str = "this payment is not settled yet: it will still be settled — \
    once — and the order completed, unless its authorization expires first; retry with the same \
    payment (never sign a new one), or see GET /api/payments";

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

/// What a payment is bound to: the request (JSON) it pays for, in a project, and where the
/// result goes.
#[derive(Debug, Clone, Copy)]
pub struct Binding<'a> {
    /// What the order buys.
    pub kind: OrderKind,
    /// The provider project.
    pub project: u64,
    /// The validated request, JSON (its fingerprint binds the payment).
    pub request: &'a str,
    /// The sandbox the order works on.
    pub target: Target<'a>,
}

/// The sandbox an order works on.
#[derive(Debug, Clone, Copy)]
pub enum Target<'a> {
    /// A new server: a new sandbox, `provisioning`, whose id every create carries.
    NewServer {
        /// Plan slug.
        plan: &'a str,
        /// Region slug.
        region: &'a str,
        /// The caller's SSH keys it is made with.
        authorized_keys: &'a [crate::store::ssh_keys::AuthorizedKey],
    },
    /// An existing server (a renewal, a resize): its sandbox.
    Server {
        /// The server's sandbox.
        sandbox_id: &'a str,
    },
}

impl<'a> Binding<'a> {
    /// The binding of `purchase`, whose request JSON is `request`.
    pub fn of(purchase: &Purchase<'a>, request: &'a str) -> Self {
        let target = match purchase {
            Purchase::NewServer { request, .. } => Target::NewServer {
                plan: &request.plan,
                region: &request.region,
                authorized_keys: &request.authorized_keys,
            },
            Purchase::Renewal { sandbox_id, .. } | Purchase::Resize { sandbox_id, .. } => {
                Target::Server { sandbox_id }
            }
        };
        Binding {
            kind: purchase.kind(),
            project: purchase.project(),
            request,
            target,
        }
    }

    /// The sandbox id of the order, and the new sandbox record to write with it, if any: a new
    /// server's is `provisioning` (stage `ordered`), its deployment timed from `at` by `class`,
    /// and names the order's `payment` key.
    pub(crate) fn sandbox(
        &self,
        owner: &Owner,
        at: crate::time::Timestamp,
        class: PlanClass,
        payment: &crate::x402::PaymentKey,
    ) -> (String, Option<SandboxRecord>) {
        match self.target {
            Target::Server { sandbox_id } => (sandbox_id.to_owned(), None),
            Target::NewServer {
                plan,
                region,
                authorized_keys,
            } => {
                let record = SandboxRecord {
                    event_seq: 0,
                    id: crate::ids::new(crate::ids::SANDBOX),
                    owner: owner.to_owned(),
                    server_id: None,
                    project_id: Some(self.project),
                    plan: Some(plan.to_owned()),
                    region: Some(region.to_owned()),
                    hostname: None,
                    name: None,
                    metadata: Default::default(),
                    status: crate::store::sandboxes::Status::Provisioning,
                    created_at: at,
                    updated_at: at,
                    lease: None,
                    watch: Some(crate::servers::stages::ordered(class, at)),
                    payment: Some(payment.to_owned()),
                    authorized_keys: authorized_keys.to_vec(),
                    resizing: None,
                };
                (record.id.clone(), Some(record))
            }
        }
    }

    fn new_server(&self) -> bool {
        matches!(self.target, Target::NewServer { .. })
    }
}

/// Where a paid request came in: its x402 `resource` (`url`: the HTTP request's URL, or
/// `mcp://tool/<name>`) and the API's public base URL (`base`: an approval's link opens the
/// console there).
#[derive(Debug, Clone, Copy)]
pub struct Resource<'a> {
    /// The payment requirements' `resource`.
    pub url: &'a str,
    /// `PUBLIC_BASE_URL`, or the request's own origin.
    pub base: &'a str,
}

/// Where a paid request ends.
#[derive(Debug)]
pub enum Bought {
    /// The order's outcome (or a payment the ledger knew).
    Order(Outcome),
    /// The purchase costs nothing (a free plan, priced here): the caller provisions it.
    Free(Quote),
}

/// The paid path of a request for `purchase` by `principal`, top to bottom (module docs). A key's
/// request its owner approved passes the key's policy once
/// ([`crate::identity::approvals::approved`]); one its policy refuses is answered with an
/// approval the owner can grant ([`crate::identity::approvals::offer`]).
///
/// Errors: 400 (an undecodable payment), 402 (no or an unacceptable payment), 403 (scope,
/// policy, the latter with its approval), 409 (a payment used for another request), those of
/// pricing the purchase, 503 with
/// `Retry-After` while the payment is not settled yet or when the rate limiter could not count
/// a request that carries a payment; errors after settlement carry the
/// payment response ([`ApiError::Charged`]).
pub async fn buy(
    state: &AppState,
    principal: &Principal,
    purchase: &Purchase<'_>,
    payment: Option<PaymentHeader>,
    resource: Resource<'_>,
    deadline: &Deadline,
) -> Result<Bought, ApiError> {
    let request = purchase.request_json()?;
    let binding = Binding::of(purchase, &request);
    let presented = payment.map(payments::present).transpose()?;
    if let Some(presented) = &presented
        && let Some(order) = payments::lookup(state, presented).await?
    {
        // A payment moves money: never on a request the rate limiter could not count — and
        // the refusal says what is true of this payment.
        crate::ratelimit::require_counted(&principal.counted)
            .await
            .map_err(|err| uncounted(Some(&order), err))?;
        let known = known(
            state, principal, purchase, &binding, presented, order, deadline,
        );
        return Box::pin(known).await.map(Bought::Order);
    }
    if presented.is_some() {
        crate::ratelimit::require_counted(&principal.counted)
            .await
            .map_err(|err| uncounted(None, err))?;
    }
    let priced = purchase.priced(state).await?;
    if priced.quote.is_free() && purchase.kind() == OrderKind::Provision {
        priced.check(principal)?;
        return Ok(Bought::Free(priced.quote));
    }
    let asked = asked(purchase, &request, &priced, resource.base);
    let approved = crate::identity::approvals::approved(state, principal, &asked).await?;
    let paid = async {
        priced.check(&approved)?;
        let quote = &priced.quote;
        pay(
            state,
            &approved,
            &binding,
            quote,
            resource.url,
            presented,
            deadline,
        )
        .await
    };
    match Box::pin(paid).await {
        Ok(outcome) => Ok(Bought::Order(outcome)),
        Err(err) => Err(crate::identity::approvals::offer(state, principal, &asked, err).await),
    }
}

/// `purchase` (its request JSON `request`, priced `priced`) as an approval names it, its link
/// on `base`.
fn asked<'a>(
    purchase: &Purchase<'_>,
    request: &'a str,
    priced: &'a crate::billing::purchase::Priced,
    base: &'a str,
) -> crate::identity::approvals::Asked<'a> {
    let (what, server_id) = match purchase {
        Purchase::NewServer { .. } => ("provision", None),
        Purchase::Renewal { server, .. } => ("renewal", Some(*server)),
        Purchase::Resize { resize, .. } => ("resize", Some(resize.server_id)),
    };
    crate::identity::approvals::Asked {
        what,
        route: purchase.route(),
        request,
        quote: &priced.quote,
        region: &priced.region,
        server_id,
        base,
    }
}

/// `err`, a refusal made before the ledger was read (e.g. a key named on a provisioning that the
/// caller deleted since), as the answer to a request carrying `payment`: when the ledger knows
/// the payment, the refusal says what is true of it (charged, with the payment response; or
/// still to be settled), so that a replay is never answered with the refusal alone.
pub async fn refused(state: &AppState, payment: Option<PaymentHeader>, err: ApiError) -> ApiError {
    let Some(Ok(presented)) = payment.map(payments::present) else {
        return err;
    };
    match payments::lookup(state, &presented).await {
        Ok(Some(order)) => uncounted(Some(&order), err),
        _ => err,
    }
}

/// The refusal `err` of a request carrying a payment that its rate limits refused or could not
/// count, saying what is true of the payment: its `order`, when the ledger knows it — charged
/// (with the payment response), or still to be settled (never "nothing was charged" then) —
/// else that nothing was charged.
fn uncounted(order: Option<&Order>, err: ApiError) -> ApiError {
    let next = "retry with the same payment (never sign a new one)";
    match (order, err) {
        (Some(order), err) if order.settle_response.is_some() => {
            payments::charged(order, err, next)
        }
        (Some(order), ApiError::Busy { retry_after, .. }) if order.state.in_flight() => {
            ApiError::Busy {
                message: format!("{}; {NOT_CHARGED_YET}", crate::ratelimit::UNCOUNTED),
                retry_after,
            }
        }
        (_, ApiError::Busy { retry_after, .. }) => ApiError::Busy {
            message: format!("{}; nothing was charged", crate::ratelimit::UNCOUNTED),
            retry_after,
        },
        (_, err) => err,
    }
}

/// The offer (402 without a payment), the offline checks, the claim, then [`fulfil`].
async fn pay(
    state: &AppState,
    principal: &Principal,
    binding: &Binding<'_>,
    quote: &Quote,
    resource: &str,
    presented: Option<Presented>,
    deadline: &Deadline,
) -> Result<Outcome, ApiError> {
    // A key that may not pay, or has not that much left to spend, is refused before any offer
    // (or any check of a payment).
    crate::identity::keys::require(principal, crate::policy::Scope::Pay)?;
    let new_server = binding.new_server();
    crate::ratelimit::spend::check_spend(
        &state.store,
        principal,
        quote.atomic(),
        new_server,
        state.clock.datetime(),
    )
    .await?;
    let offer = payments::offer(state, quote, resource)?;
    let Some(presented) = presented else {
        return Err(payments::demand(quote, &offer, payments::NO_PAYMENT));
    };
    let verified = payments::verify_offline(&presented, quote, &offer, state.clock.now() as u64)?;
    // An owner or payer whose checked payment the facilitator refused lately waits first.
    Box::pin(slots::cooled_down(
        state,
        principal.owner.as_str(),
        &verified.payer,
    ))
    .await?;
    // Nothing of a payment is recorded, held or sent on before the chain says it is signed,
    // funded and unused — unless the ledger knows it by now: a concurrent request may have
    // claimed and settled this very payment since this one looked it up (its nonce then reads
    // as used), and its order, not the chain, answers (the claim below finds it, and a payload
    // that is not the one claimed is refused there); or unless its use is this very transfer to
    // us (the payer sent it himself, or someone holding the payload did): it pays the order as
    // our settle would, and the order finds it on chain once the facilitator calls it used.
    if let Err(refused) = payments::verify_on_chain(state, &verified, quote, &offer).await
        && payments::lookup(state, &presented).await?.is_none()
        && !(payments::nonce_used(&refused) && payments::paid_us(state, &verified, &offer).await?)
    {
        return Err(refused);
    }
    // From here the request waits on the facilitator, the chain and the provider: it holds one
    // of its payer's paid slots, one of its owner's and one of the paid pool's (429 past them,
    // before anything is claimed or charged).
    let caps = &state.config.caps;
    let seconds = deadline.remaining().as_secs() as i64 + 5;
    let payer = slots::payer_subject(&verified.payer);
    let owner = (principal.owner.as_str(), caps.paid_in_flight);
    let claimed = claim_and_fulfil(
        state, principal, binding, quote, presented, verified, deadline,
    );
    let claimed = Box::pin(claimed);
    // Boxed as the claim is: the paid path's poll frames stay small.
    let in_pool = Box::pin(slots::holding_in_pool(
        state,
        Pool::Paid,
        owner,
        caps.paid_pool,
        seconds,
        claimed,
    ));
    slots::holding(
        state,
        Pool::Paid,
        &payer,
        caps.paid_in_flight,
        seconds,
        in_pool,
    )
    .await
}

/// Claims `verified` in the ledger for this request, then drives the order to its end.
async fn claim_and_fulfil(
    state: &AppState,
    principal: &Principal,
    binding: &Binding<'_>,
    quote: &Quote,
    presented: Presented,
    verified: crate::x402::verify::VerifiedPayment,
    deadline: &Deadline,
) -> Result<Outcome, ApiError> {
    let new_server = binding.new_server();
    let claim = ledger::claim(state, principal, binding, &verified, quote.class, deadline)
        .await
        .map_err(|err| match err {
            ApiError::PolicyViolation { .. } => err,
            // The claim may have been written before its answer was lost.
            err => {
                tracing::error!(error = %err, "the payment could not be claimed");
                ApiError::Busy {
                    message: NOT_CHARGED_YET.into(),
                    retry_after: 2,
                }
            }
        })?;
    match claim {
        // A concurrent request of the key used what was left, or its approval: nothing recorded
        // or charged. The key's policy, as it is, says why.
        Claim::OverLimit => Err(
            match crate::ratelimit::spend::over_limit(
                &state.store,
                &principal.unapproved(),
                quote.atomic(),
                new_server,
                state.clock.datetime(),
            )
            .await
            {
                ApiError::Conflict(why) => {
                    ApiError::Conflict(format!("{why}; nothing was charged"))
                }
                refused => refused,
            },
        ),
        Claim::New(order) => {
            state.checkpoint(Step::Claimed).await;
            fulfil(state, *order, deadline).await
        }
        Claim::Existing(order) => {
            let won = claimed_first(state, principal, binding, &presented, *order, deadline);
            Box::pin(won).await
        }
    }
}

/// A payment a concurrent request claimed between this request's lookup and its claim: resumed
/// only when it is this very request of this owner, as a replay would be; else 409.
async fn claimed_first(
    state: &AppState,
    principal: &Principal,
    binding: &Binding<'_>,
    presented: &Presented,
    order: Order,
    deadline: &Deadline,
) -> Result<Outcome, ApiError> {
    let fingerprint = fingerprint(&principal.owner, binding.project, binding.request);
    let owner = &principal.owner;
    match payments::classify(&order, owner, &fingerprint, presented, order.undelivered) {
        Known::Same => resume(state, order, deadline).await,
        Known::Conflict(why) => Err(ApiError::Conflict(why)),
        Known::Redeem => Err(ApiError::Conflict(format!(
            "payment {} was just used by a concurrent request; retry to redeem its credit",
            order.id
        ))),
    }
}

/// A payment the ledger knows: resume it (the same request), redeem it (a credit, for another
/// request, at that request's price) or refuse it.
async fn known(
    state: &AppState,
    principal: &Principal,
    purchase: &Purchase<'_>,
    binding: &Binding<'_>,
    presented: &Presented,
    order: Order,
    deadline: &Deadline,
) -> Result<Outcome, ApiError> {
    let fingerprint = fingerprint(&principal.owner, binding.project, binding.request);
    let (known, order, chain) =
        chosen(state, order, &principal.owner, &fingerprint, presented).await?;
    let span = tracing::info_span!("order", order = %order.order_id, payment = %order.id);
    span.in_scope(|| tracing::info!(state = %order.state, "a known payment"));
    match known {
        Known::Same => {
            // Resuming may settle the payment: only a key that may pay resumes it.
            crate::identity::keys::require(principal, crate::policy::Scope::Pay)?;
            resume(state, order, deadline).instrument(span).await
        }
        Known::Redeem => {
            // Redeeming pays: the key must be allowed to.
            crate::identity::keys::require(principal, crate::policy::Scope::Pay)?;
            let quote = purchase.quote(state, principal).await?;
            // Paid already: only a new server counts against the key.
            crate::ratelimit::spend::check_spend(
                &state.store,
                principal,
                0,
                binding.new_server(),
                state.clock.datetime(),
            )
            .await?;
            async {
                let price = (quote.atomic(), quote.class);
                let redemption = ledger::Redemption {
                    price,
                    remainder: chain.next_remainder,
                };
                let order = ledger::redeem(state, principal, &order, binding, redemption, deadline)
                    .await
                    .map_err(|e| payments::charged(&order, e, "the credit is unchanged"))?;
                fulfil(state, order, deadline).await
            }
            .instrument(span)
            .await
        }
        Known::Conflict(why) => Err(ApiError::Conflict(why)),
    }
}

/// What a payment's chain of credits says of a redemption: the number its remainder would take,
/// and how many of the payment's servers were deleted undelivered.
#[derive(Debug, Clone, Default)]
pub struct Chain {
    /// The key the credit a cheaper redemption leaves would take
    /// ([`payments::next_remainder`]); `None` when the payment is split as far as it goes.
    pub next_remainder: Option<crate::x402::PaymentKey>,
    /// Servers of the payment (its own order and every remainder) deleted undelivered.
    pub undelivered: u32,
}

/// Which order of a known payment a request with `fingerprint` meets, and how: the payment's
/// own order, or one of the credits its cheaper redemptions left ([`Order::remainder`]) — the
/// order bound to this very request, else the first redeemable credit, else the refusal of the
/// payment's own order. A credit is redeemable while the payment as a whole (every order of
/// its chain) has had fewer than two servers deleted undelivered.
///
/// Errors: the store's.
async fn chosen(
    state: &AppState,
    order: Order,
    owner: &Owner,
    fingerprint: &str,
    presented: &Presented,
) -> Result<(Known, Order, Chain), ApiError> {
    let classify =
        |o: &Order, undelivered| payments::classify(o, owner, fingerprint, presented, undelivered);
    if classify(&order, order.undelivered) == Known::Same {
        return Ok((Known::Same, order, Chain::default()));
    }
    let mut chain = payments::chain_from(&state.store, order).await?;
    let facts = Chain {
        next_remainder: payments::next_remainder(
            &chain.iter().map(|o| o.id.clone()).collect::<Vec<_>>(),
        ),
        undelivered: chain.iter().map(|o| o.undelivered).sum(),
    };
    let known: Vec<Known> = chain
        .iter()
        .map(|o| classify(o, facts.undelivered))
        .collect();
    let at = known
        .iter()
        .position(|k| *k == Known::Same)
        .or_else(|| known.iter().position(|k| *k == Known::Redeem))
        .unwrap_or(0);
    Ok((known[at].clone(), chain.swap_remove(at), facts))
}

/// A known order of this very request: its outcome when final; in flight, taken over when its
/// lease expired, else waited for up to `X402_WAIT_SECONDS` and answered 202 if still running.
async fn resume(state: &AppState, order: Order, deadline: &Deadline) -> Result<Outcome, ApiError> {
    let wait = state
        .config
        .payments
        .wait
        .min(deadline.remaining().saturating_sub(crate::deadline::MARGIN));
    let wait_until = tokio::time::Instant::now() + wait;
    let mut order = order;
    loop {
        if !order.state.in_flight() {
            return outcome(&order, None);
        }
        if order.lease_until < state.clock.now()
            && let Some(held) = ledger::take(state, &order, deadline).await?
        {
            return fulfil(state, held, deadline).await;
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

/// One page of the orders in `order_state` (an in-flight state), oldest first (GSI2,
/// eventually consistent): what the reconciler drives, `limit` at a time from `cursor`.
///
/// Errors: 500 when the store fails.
pub async fn oldest_in_state(
    state: &AppState,
    order_state: OrderState,
    limit: i32,
    cursor: Option<&str>,
) -> Result<crate::store::Page<Order>, ApiError> {
    Ok(state
        .store
        .oldest_in_state(order_state, limit, cursor)
        .await?)
}

/// What the requester of `order` gets now; `paused` says why an in-flight order stopped.
pub fn outcome(order: &Order, paused: Option<&str>) -> Result<Outcome, ApiError> {
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
            if payments::redeemable(order.undelivered) {
                "it is a credit of its owner: send the same payment header with a corrected \
                request costing no more to redeem it (see GET /api/payments)"
            } else {
                "it is a credit of its owner that can only be refunded (its servers were \
                undelivered twice): ask the operator"
            },
        )),
        // Nothing was paid after all (reversed: the transfer is gone): a new payment is asked.
        OrderState::Rejected | OrderState::Expired | OrderState::Reversed => {
            Err(payments::refused(order, &plan))
        }
        OrderState::Refunding => Err(ApiError::Conflict(format!(
            "payment {} was a credit and is being refunded to its payer",
            order.id
        ))),
        OrderState::Refunded => Err(ApiError::Conflict(format!(
            "payment {} was a credit and has been refunded ({})",
            order.id,
            order.refund.as_deref().unwrap_or("no note")
        ))),
        OrderState::Claimed | OrderState::Settling | OrderState::Settled | OrderState::Creating => {
            Ok(in_progress(
                order,
                paused.unwrap_or("the order is in progress"),
            ))
        }
    }
}

/// An [`Outcome`] as every face answers it (HTTP's `servers` function, the MCP tools).
#[derive(Debug, Clone)]
pub struct Answer {
    /// Whether the server (or the renewal) exists: HTTP 201; else 202, in progress.
    pub created: bool,
    /// Created: the provider's server object (without credentials) with `sandboxId`, its
    /// `stage` and times as stored, or a renewal's `{serverId, periods, amount, paidUntil,
    /// graceEndsAt}`; in progress: `{status: "provisioning", sandboxId, payment, detail}`.
    pub body: Value,
    /// The order's sandbox (`GET /api/sandboxes/{sandboxId}` shows it).
    pub sandbox_id: String,
    /// The payment response, once the payment settled (a header over HTTP, `_meta` over MCP).
    pub settlement: Option<SettleResponse>,
}

/// Renders `outcome` (module docs: every answer says what is true of the money); reads the
/// sandbox's progress for a created server.
pub async fn answer(state: &AppState, outcome: Outcome) -> Answer {
    match outcome {
        Outcome::Created {
            mut server,
            sandbox_id,
            settlement,
        } => {
            crate::servers::stages::annotate_stored(state, &mut server, &sandbox_id).await;
            Answer {
                created: true,
                body: server,
                sandbox_id,
                settlement,
            }
        }
        Outcome::Accepted {
            sandbox_id,
            payment,
            settlement,
            detail,
        } => Answer {
            created: false,
            body: serde_json::json!({
                "status": crate::store::sandboxes::Status::Provisioning,
                "sandboxId": sandbox_id,
                "payment": payment,
                "detail": detail,
            }),
            sandbox_id,
            settlement,
        },
    }
}

/// 202 for an order in flight: the payment as it is, and whether it is settled — before
/// settlement, that the same payment will still be settled (never "nothing was charged").
fn in_progress(order: &Order, why: &str) -> Outcome {
    let detail = if order.settle_response.is_some() {
        format!(
            "{why}; the payment is settled: the server is provisioned without further action \
            (or the payment becomes a credit); poll GET /api/sandboxes/{} every 10 s or more",
            order.sandbox_id
        )
    } else {
        format!("{why}; {NOT_CHARGED_YET}")
    };
    Outcome::Accepted {
        sandbox_id: order.sandbox_id.clone(),
        payment: Box::new(PaymentView::of(order)),
        settlement: payments::settlement_of(order),
        detail,
    }
}
