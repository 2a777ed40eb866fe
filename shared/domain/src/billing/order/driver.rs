//! The driver of the order machine: reads the facts, asks [`machine::next`], records the
//! transition's write ([`ledger::record`]) and only then carries out its effect
//! ([`super::effects`]), whose answer is the next event — until the machine pauses (the order
//! stays in flight for a retry or the reconciler) or finishes.

use tracing::Instrument;

use super::machine::{self, Answer, Effect, Event, Facts, Write};
use super::{Outcome, effects, ledger};
use crate::checkpoint::Step;
use crate::deadline::Deadline;
use crate::error::ApiError;
use crate::state::AppState;
use crate::store::payments::{Order, OrderKind};

/// Drives a held order to a final state — settle → create-or-adopt → record, or a credit — or
/// as far as `deadline` allows, and says what its requester gets. Also what the reconciler runs
/// for every order past its lease.
///
/// Errors: the store's, wrapped to say truthfully whether the payment was or will be charged
/// ([`unrecorded`]).
pub async fn fulfil(
    state: &AppState,
    order: Order,
    deadline: &Deadline,
) -> Result<Outcome, ApiError> {
    let span = tracing::info_span!("order", order = %order.order_id, payment = %order.id);
    // Boxed: the paid path's future is large, and callers nest it.
    Box::pin(drive(state, order, deadline))
        .instrument(span)
        .await
}

/// The facts the machine decides on, read now.
fn facts(state: &AppState, order: &Order, attempt: &Attempt, deadline: &Deadline) -> Facts {
    let config = &state.config.payments;
    let now = state.clock.now();
    let bound = order.bound_at.unix();
    Facts {
        now,
        valid_before: order.valid_before as i64,
        deadline_at: bound + config.order_deadline.as_secs() as i64,
        create_sent_at: (order.create_sent_at > 0).then_some(order.create_sent_at),
        create_settle: config.create_settle.as_secs() as i64,
        lease: config.lease.as_secs() as i64,
        creates: (order.create_attempts, config.create_attempts),
        settle_calls: attempt.settle_calls,
        answered: attempt.answered,
        room: deadline.allows(config.facilitator_timeout.max(config.rpc_timeout * 2)),
        provider_room: deadline.allows(state.config.upstream.timeout),
        renewal: order.kind == OrderKind::Renewal,
        refusal: order.reason.clone(),
    }
}

/// What this attempt did so far that the machine decides on.
#[derive(Debug, Default)]
struct Attempt {
    settle_calls: u32,
    answered: bool,
}

/// Why an attempt stopped before its create.
const LEASE_ENDED: &str = "this attempt's lease ended before the create was sent; the order \
                           continues in the background";

async fn drive(
    state: &AppState,
    mut order: Order,
    deadline: &Deadline,
) -> Result<Outcome, ApiError> {
    let mut event = Event::Resumed;
    let mut attempt = Attempt::default();
    loop {
        let step = machine::next(
            order.state,
            &event,
            &facts(state, &order, &attempt, deadline),
        );
        order = match ledger::record(state, &order, step.to, &step.write, deadline).await {
            Ok(Some(next)) => next,
            Ok(None) => return lost(state, &order).await,
            // A settlement the chain showed is charged whether or not its write landed.
            Err(err) => return Err(unrecorded(&ledger::as_written(&order, &step.write), err)),
        };
        if step.write == Write::Settling {
            state.checkpoint(Step::BeforeSettle).await;
        }
        event = match step.effect {
            Effect::Verify => match effects::verify(state, &order).await {
                Event::Verified(machine::Verdict::Invalid(reason))
                    if !state.holds(crate::checkpoint::Guard::InvalidLooksOnChain) =>
                {
                    Event::Looked(machine::Chain::Elsewhere(reason))
                }
                verified => verified,
            },
            Effect::Settle => {
                attempt.settle_calls += 1;
                let mut answer = effects::settle(state, &order).await;
                if let Event::Settled(Answer::Failed(reason)) = &answer
                    && !state.holds(crate::checkpoint::Guard::ChainDecides)
                {
                    answer = Event::Looked(machine::Chain::Elsewhere(reason.clone()));
                }
                if let Event::Settled(Answer::Success(tx)) = &answer
                    && !state.holds(crate::checkpoint::Guard::ChainConfirms)
                {
                    answer = Event::Looked(machine::Chain::Paid(tx.clone()));
                }
                attempt.answered |= matches!(
                    answer,
                    Event::Settled(Answer::Failed(_) | Answer::Success(_))
                );
                answer
            }
            Effect::LookUp => effects::look_up(state, &order).await,
            Effect::Search => effects::search(state, &order, deadline).await,
            // Never a create after this attempt's lease ended: another attempt may have taken
            // the order over and decided on its own create (a stall between the intent and the
            // call, a pause of the process); this one stops, and the order's next attempt
            // decides, counting a create as possibly sent until the lease's end.
            Effect::Create => {
                state.checkpoint(Step::BeforeCreate).await;
                if state.clock.now() >= order.lease_until {
                    return super::outcome(&order, Some(LEASE_ENDED));
                }
                create(state, &order).await
            }
            Effect::Extend => {
                let (extension, written) = ledger::extend(state, &order)
                    .await
                    .map_err(|err| unrecorded(&order, err))?;
                order = written.unwrap_or(order);
                Event::Extended(extension)
            }
            Effect::Continue => Event::Resumed,
            Effect::Pause(why) => {
                ledger::release(state, &order).await;
                return super::outcome(&order, Some(&why));
            }
            Effect::Finish => return super::outcome(&order, None),
        };
    }
}

/// The create of `order`: a resize's only once it holds its server ([`ledger::hold`]: a server
/// held by another resize is not sent now, one that is no longer what was priced never will be).
async fn create(state: &AppState, order: &Order) -> Event {
    if order.kind != OrderKind::Resize {
        return effects::create(state, order).await;
    }
    match ledger::hold(state, order).await {
        Ok(ledger::Hold::Held) => effects::create(state, order).await,
        Ok(ledger::Hold::Refused(why)) => Event::Created(machine::Create::Refused(why)),
        Ok(ledger::Hold::Waiting(why)) => {
            tracing::info!(why, "the upgrade is not sent now");
            Event::Created(machine::Create::RateLimited)
        }
        Err(err) => {
            tracing::warn!(error = %err, "cannot hold the server for its upgrade; not sent");
            Event::Created(machine::Create::RateLimited)
        }
    }
}

/// Another attempt moved the order first: what it is now.
async fn lost(state: &AppState, order: &Order) -> Result<Outcome, ApiError> {
    let current = state
        .store
        .order(&order.id)
        .await
        .map_err(|err| unrecorded(order, err.into()))?
        .ok_or_else(|| ApiError::Internal(format!("order {} vanished", order.order_id)))?;
    super::outcome(&current, Some("another attempt is working on this order"))
}

/// An error met while `order` is where it is: after settlement, it carries the payment response
/// and says the order completes in the background; before, it says the payment is not charged
/// *yet* — it will still be settled unless its authorization expires — so that no agent signs a
/// second payment.
pub fn unrecorded(order: &Order, error: ApiError) -> ApiError {
    if order.state.maybe_charged() && order.settle_response.is_some() {
        return crate::billing::payments::charged(
            order,
            error,
            "the order completes in the background: retry with the same payment for its outcome",
        );
    }
    tracing::error!(payment = %order.id, error = %error, "the order stops here for now");
    ApiError::Busy {
        message: super::NOT_CHARGED_YET.to_owned(),
        retry_after: 2,
    }
}
