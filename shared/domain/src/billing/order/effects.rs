//! The effects of the order machine ([`super::machine::Effect`]), each one outside call whose
//! answer — whatever it is: refused, lost, late, garbage — becomes the machine's next event.
//! None of them writes the order; the driver records each transition before its effect.

use serde_json::Value;

use super::machine::{Answer, Chain, Create, Event, FINALITY_SECS, Search, Verdict};
use crate::billing::purchase::{Resize, ValidProvisionRequest};
use crate::deadline::Deadline;
use crate::error::ApiError;
use crate::state::AppState;
use crate::store::payments::{Order, OrderKind};
use crate::upstream::{CreateServer, UpstreamError};
use crate::x402::chain::{Authorization, Evidence};
use crate::x402::facilitator::{PaymentRequest, Settlement};

/// Tag the service puts on every server it provisions: the sandbox id (lets a create whose
/// answer was lost be found, and a server no record owns be recognised).
pub const SANDBOX_TAG: &str = "svc-sandbox";
/// Tag the service puts on every server it provisions: the owner's address.
pub const OWNER_TAG: &str = "svc-owner";
/// Tag the service puts on every server it provisions: this deployment (its table's name). The
/// sweep ([`crate::servers::sweep`]) judges only servers carrying its own.
pub const DEPLOYMENT_TAG: &str = "svc-deployment";

/// The stored payment payload and requirements of an order, as JSON.
fn stored(order: &Order) -> Option<(Value, Value)> {
    let payload = serde_json::from_str(&order.payload).ok()?;
    let requirements = serde_json::from_str(&order.requirements).ok()?;
    Some((payload, requirements))
}

/// `POST /verify` with the stored payload (advisory).
pub async fn verify(state: &AppState, order: &Order) -> Event {
    let Some((payload, requirements)) = stored(order) else {
        return Event::Verified(Verdict::Unknown);
    };
    let request = PaymentRequest {
        version: order.version,
        payload: &payload,
        requirements: &requirements,
    };
    tracing::info!(payment = %order.id, "asking the facilitator to verify");
    Event::Verified(match state.facilitator.verify(&request).await {
        Ok(verdict) if !verdict.is_valid => Verdict::Invalid(
            verdict
                .invalid_reason
                .unwrap_or_else(|| "invalid_payment".into()),
        ),
        Ok(_) => Verdict::Valid,
        Err(err) => {
            tracing::warn!(payment = %order.id, error = %err, "verify failed; settle checks too");
            Verdict::Unknown
        }
    })
}

/// `POST /settle` with the stored payload (identical on every call).
pub async fn settle(state: &AppState, order: &Order) -> Event {
    let Some((payload, requirements)) = stored(order) else {
        return Event::Settled(Answer::Lost);
    };
    let request = PaymentRequest {
        version: order.version,
        payload: &payload,
        requirements: &requirements,
    };
    tracing::info!(payment = %order.id, "asking the facilitator to settle");
    let answer = match state.facilitator.settle(&request).await {
        Ok(Settlement::Settled(response)) => Answer::Success(response.transaction),
        Ok(Settlement::Pending(response)) => {
            Answer::Pending(Some(response.transaction).filter(|t| !t.is_empty()))
        }
        Ok(Settlement::Failed(response)) => {
            let reason = response
                .error_reason
                .unwrap_or_else(|| "settlement_failed".into());
            tracing::warn!(payment = %order.id, reason, "settle answered a failure");
            Answer::Failed(reason)
        }
        Err(err) => {
            tracing::warn!(payment = %order.id, error = %err, "settle answer lost");
            Answer::Lost
        }
    };
    if matches!(answer, Answer::Success(_)) {
        state.checkpoint(crate::checkpoint::Step::AfterSettle).await;
    }
    Event::Settled(answer)
}

/// How long before its claim a use of an authorization is searched for, seconds. The search of
/// a claimed order the facilitator refused (and of a presented payment whose nonce is used)
/// starts at the authorization's `validAfter` (the payer may have sent the transfer himself
/// before presenting it), but no earlier than this before the claim: whoever signs picks
/// `validAfter`, and an hour keeps the search within one log range (`LOG_RANGE` 10,000 blocks),
/// so a payload presented again and again costs what any look-up costs.
pub const USE_LOOKBACK_SECS: i64 = 3_600;

/// Where the search for a use of an authorization valid from `valid_after` starts, for a claim
/// at `claimed` (unix seconds): see [`USE_LOOKBACK_SECS`].
pub fn search_from(valid_after: i64, claimed: i64) -> i64 {
    valid_after.clamp(claimed - USE_LOOKBACK_SECS, claimed)
}

/// Asks the chain for evidence of the authorization's use ([`crate::x402::chain`]): since the
/// claim once a settle may have been sent (a use before the claim was refused before it), since
/// its `validAfter` while the order is only claimed ([`search_from`]).
pub async fn look_up(state: &AppState, order: &Order) -> Event {
    let requirements: Value = serde_json::from_str(&order.requirements).unwrap_or(Value::Null);
    let claimed = order.created_at.unix();
    let since = match order.state {
        super::machine::State::Claimed
            if state.holds(crate::checkpoint::Guard::SearchFromValidAfter) =>
        {
            search_from(valid_after(&order.payload), claimed)
        }
        _ => claimed,
    };
    let authorization = authorization(state, order, &requirements, since);
    tracing::info!(
        payment = %order.id,
        "asking the chain for the authorization's use"
    );
    let evidence = state
        .chain
        .evidence(&authorization, order.transaction.as_deref())
        .await;
    if let Ok(Evidence::Unused { head, .. }) = &evidence
        && let Err(err) = state.store.scanned_through(order, *head).await
    {
        let id = &order.id;
        tracing::warn!(payment = %id, error = %err, "cannot record how far the chain was read");
    }
    Event::Looked(match evidence {
        Ok(Evidence::Paid { transaction, .. }) => Chain::Paid(transaction),
        Ok(Evidence::Elsewhere { transaction, why }) => {
            tracing::warn!(
                payment = %order.id,
                transaction,
                why,
                "the authorization paid someone else"
            );
            Chain::Elsewhere(format!(
                "{why} (transaction {transaction}); nothing was paid"
            ))
        }
        // A claim's refusal stands on "unused" only from a node that has reached the time it
        // was recorded: a use the facilitator saw is in a block no newer (the payer, or whoever
        // holds the payload, may have just sent this very transfer to us).
        Ok(Evidence::Unused { head_time, .. })
            if order.state == super::machine::State::Claimed
                && order.refused_at.is_some_and(|at| head_time < at)
                && head_time <= order.valid_before as i64 + FINALITY_SECS
                && state.holds(crate::checkpoint::Guard::RefusalWaitsForTheNode) =>
        {
            Chain::Unknown(format!(
                "the chain's node has not reached the facilitator's answer yet ({} s behind)",
                order.refused_at.unwrap_or_default() - head_time
            ))
        }
        Ok(Evidence::Unused { head_time, .. }) => Chain::Unused {
            final_: head_time > order.valid_before as i64 + FINALITY_SECS,
        },
        Err(err) => {
            tracing::warn!(payment = %order.id, error = %err, "cannot ask the chain");
            Chain::Unknown(format!("the chain cannot be asked: {err}"))
        }
    })
}

/// The authorization `order` pays with, as the chain is asked about it (`requirements`: the
/// order's, parsed), its use searched from `since` (unix seconds).
pub fn authorization<'a>(
    state: &AppState,
    order: &'a Order,
    requirements: &'a Value,
    since: i64,
) -> Authorization<'a> {
    let network =
        crate::x402::Network::parse(&order.network).unwrap_or(state.config.payments.network);
    Authorization {
        asset: network.usdc(),
        payer: &order.payer,
        nonce: &order.nonce,
        pay_to: requirements["payTo"].as_str().unwrap_or_default(),
        amount: order.amount.parse().unwrap_or(u128::MAX),
        since,
        scanned: order.scanned_to,
    }
}

/// The `validAfter` of a stored payment payload (0 when it cannot be read: the search then
/// reaches [`USE_LOOKBACK_SECS`] back).
pub fn valid_after(payload: &str) -> i64 {
    let payload: Value = serde_json::from_str(payload).unwrap_or(Value::Null);
    payload["payload"]["authorization"]["validAfter"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// Searches every page of the order's project for its tagged server, within `deadline` (a
/// listing it cannot finish is a failed search).
pub async fn search(state: &AppState, order: &Order, deadline: &Deadline) -> Event {
    let Ok(upstream) = state.upstream() else {
        return Event::Searched(Search::Failed("the provider is not configured".into()));
    };
    if order.kind == OrderKind::Resize {
        return Event::Searched(resized(upstream, order).await);
    }
    tracing::info!(
        sandbox = order.sandbox_id,
        "searching the project for the order's server"
    );
    Event::Searched(
        match upstream
            .find_tagged(
                order.project_id,
                (SANDBOX_TAG, &order.sandbox_id),
                Some(deadline),
            )
            .await
        {
            Ok(Some(server)) => Search::Found(server),
            Ok(None) => Search::Missing,
            Err(err) => {
                if order.create_sent_at > 0 {
                    // A create may have landed where nobody can look: an operator must know.
                    crate::metrics::emit("OrderSearchFailures", 1.0, "Count", &[]);
                    tracing::error!(payment = %order.id, error = %err,
                        "cannot search for the server a create may have made");
                }
                Search::Failed(format!("the provider's listing failed: {err}"))
            }
        },
    )
}

/// The provider's create body for `request`, tagged with the sandbox id, the owner and this
/// `deployment`.
pub fn create_body(
    request: &ValidProvisionRequest,
    sandbox_id: &str,
    owner: &crate::address::Owner,
    deployment: &str,
) -> CreateServer {
    let mut tags = request.tags.clone();
    tags.insert(SANDBOX_TAG.into(), sandbox_id.to_owned());
    tags.insert(OWNER_TAG.into(), owner.to_string());
    tags.insert(DEPLOYMENT_TAG.into(), deployment.to_owned());
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

/// How the provider's answer to a create reads: created, refused for good, not processed, or
/// unclear (it may still land).
pub fn create_outcome(result: Result<Value, UpstreamError>) -> Create {
    match result {
        Ok(server) => Create::Created(server),
        Err(UpstreamError::Status {
            status: status @ (400 | 404 | 409 | 422),
            message,
            ..
        }) => Create::Refused(format!(
            "the provider refused the server (HTTP {status}): {message}"
        )),
        Err(UpstreamError::RateLimited { .. }) => Create::RateLimited,
        Err(err) => {
            tracing::warn!(error = %err, "create outcome unclear; it may still land");
            Create::Unclear
        }
    }
}

/// `request` with the provider's ids of its keys: its `authorized_keys` registered with the
/// provider now, as the server they go on is created (an SSH key costs the provider's account
/// nothing until then). A request stored with the ids already keeps them.
///
/// Errors: those of [`crate::identity::ssh_keys::register_keys`] (400 naming `sshKeys` for a
/// key deleted since, or refused by the provider; 503 while another registration of it is under
/// way; the provider's; the store's).
pub async fn with_registered_keys(
    state: &AppState,
    owner: &crate::address::Owner,
    request: &ValidProvisionRequest,
) -> Result<ValidProvisionRequest, ApiError> {
    let mut request = request.clone();
    if request.ssh_keys.is_empty() {
        let keys = &request.authorized_keys;
        request.ssh_keys =
            crate::identity::ssh_keys::register_keys(state, owner, keys, "sshKeys").await?;
    }
    Ok(request)
}

/// `POST /projects/{id}/servers`, tagged with the order's sandbox id, sent once — after the
/// keys it names are registered with the provider ([`with_registered_keys`]; a key that cannot
/// be is a refusal when it is gone or refused for good, else the create is not sent and is
/// tried again, as after a 429).
pub async fn create(state: &AppState, order: &Order) -> Event {
    let Ok(upstream) = state.upstream() else {
        return Event::Created(Create::Unclear);
    };
    if order.kind == OrderKind::Resize {
        return Event::Created(upgrade(state, upstream, order).await);
    }
    let Ok(request) = serde_json::from_str::<ValidProvisionRequest>(&order.request) else {
        return Event::Created(Create::Refused("the stored request cannot be read".into()));
    };
    let request = match with_registered_keys(state, &order.owner, &request).await {
        Ok(request) => request,
        Err(ApiError::Invalid { message, .. }) => {
            return Event::Created(Create::Refused(format!(
                "the server's SSH keys cannot be put on it: {message}"
            )));
        }
        Err(err) => {
            tracing::warn!(error = %err, "the server's SSH keys are not registered yet");
            return Event::Created(Create::RateLimited);
        }
    };
    tracing::info!(
        attempt = order.create_attempts,
        "asking the provider to create the server"
    );
    let body = create_body(
        &request,
        &order.sandbox_id,
        &order.owner,
        state.store.table(),
    );
    let result = upstream.create_server(order.project_id, &body).await;
    if result.is_ok() {
        state.checkpoint(crate::checkpoint::Step::AfterCreate).await;
    }
    Event::Created(create_outcome(result))
}

/// A resize's search: the server read now, found when it is on the plan the order moves it to
/// (the upgrade landed); missing while it is on another plan or gone (the next upgrade, or its
/// refusal, decides).
///
/// Boxed where it is made (a plain function): the paid path's poll frames, on a 2 MiB stack in
/// tests and in the runtime, never hold its future.
fn resized<'a>(
    upstream: &'a crate::upstream::Client,
    order: &'a Order,
) -> futures::future::BoxFuture<'a, Search> {
    Box::pin(read_back(upstream, order))
}

async fn read_back(upstream: &crate::upstream::Client, order: &Order) -> Search {
    let Ok(resize) = serde_json::from_str::<Resize>(&order.request) else {
        return Search::Failed("the stored request cannot be read".into());
    };
    match upstream.server(resize.server_id).await {
        Ok(server) if server["plan"]["slug"].as_str() == Some(resize.plan.as_str()) => {
            Search::Found(server)
        }
        Ok(_) | Err(UpstreamError::Status { status: 404, .. }) => Search::Missing,
        Err(err) => Search::Failed(format!("the provider's server read failed: {err}")),
    }
}

/// A resize's `upgrade` action, sent once, by an order that holds its server (the driver takes
/// the hold first: no other resize under way, the lease still the one the order priced, the
/// record still on the plan it moves from). A refusal is read back: an earlier upgrade whose
/// answer was lost may have landed since.
///
/// Boxed where it is made, as [`resized`].
fn upgrade<'a>(
    state: &'a AppState,
    upstream: &'a crate::upstream::Client,
    order: &'a Order,
) -> futures::future::BoxFuture<'a, Create> {
    Box::pin(send_upgrade(state, upstream, order))
}

async fn send_upgrade(
    state: &AppState,
    upstream: &crate::upstream::Client,
    order: &Order,
) -> Create {
    let Ok(resize) = serde_json::from_str::<Resize>(&order.request) else {
        return Create::Refused("the stored request cannot be read".into());
    };
    tracing::info!(
        server = resize.server_id,
        plan = resize.plan,
        attempt = order.create_attempts,
        "asking the provider to upgrade the server"
    );
    let action = crate::upstream::ServerAction::Upgrade {
        plan: resize.plan.clone(),
    };
    let result = upstream.server_action(resize.server_id, &action).await;
    if result.is_ok() {
        state.checkpoint(crate::checkpoint::Step::AfterCreate).await;
    }
    match create_outcome(result) {
        // Refused, perhaps because an earlier upgrade whose answer was lost has landed since:
        // the server read back says which.
        Create::Refused(why) => match read_back(upstream, order).await {
            Search::Found(server) => Create::Created(server),
            _ => Create::Refused(why),
        },
        outcome => outcome,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A refused claim's search reaches back to the authorization's `validAfter`, but never more
    /// than the look-back before the claim, nor past it.
    #[test]
    fn the_search_starts_at_valid_after_within_the_look_back() {
        let claimed = 1_800_000_000;
        assert_eq!(search_from(claimed - 600, claimed), claimed - 600);
        assert_eq!(search_from(0, claimed), claimed - USE_LOOKBACK_SECS);
        assert_eq!(search_from(claimed + 30, claimed), claimed);
    }
}
