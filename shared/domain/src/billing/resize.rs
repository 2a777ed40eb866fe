//! A resize (issue 48): a server of the caller's moved to a bigger plan in its region, keeping
//! the paid time it has (`paidUntil` unchanged). The provider's `upgrade` action
//! (`reference/upstream-cherry-api.md` §8) changes cloud VPS plans only, so a resize is offered
//! for a paid VPS moving to a dearer VPS plan in stock in its region.
//!
//! The price is the difference of the two plans' period prices (with the server's image) for
//! the paid time left, in whole hours rounded up ([`crate::pricing::Quote::prorated`]), paid with
//! x402 on the same ledger as every order. A downgrade (or a move to a plan costing the same) is
//! refused before any 402: the provider grows disks but never shrinks them, and paid time is
//! never refunded in part, so a smaller plan would credit nothing — provision a smaller server
//! instead. Everything the provider would refuse is refused here first (400 naming `plan`, 409
//! for a server that cannot be resized now).
//!
//! The order binds `paidUntil` and the plan it moves from as priced, and holds the server before
//! its upgrade is sent (one resize at a time: `order::ledger::hold`). A renewal or another resize
//! landing between the price and the hold makes the order a credit (the difference was priced
//! for less time, or from another plan); a renewal priced on the old plan landing after the hold
//! becomes a credit itself. Never a bigger plan underpaid.

use crate::billing::purchase::{Priced, Resize, ResizeRequest, Stored, period_with_image};
use crate::error::ApiError;
use crate::pricing::{Prorated, Quote};
use crate::servers::discovery;
use crate::state::AppState;
use crate::store::sandboxes::{LeaseState, PlanClass, SandboxRecord};
use crate::validate;

/// The resize of `server` (its sandbox `sandbox_id`) to `request.plan` as it would be bound now,
/// with its price — every check made before any 402.
///
/// Errors: 400 naming `plan` (not a slug, unknown, the server's own, not a cloud VPS plan, not
/// in stock in the server's region, costing no more than the server's); 409 for a free server,
/// one on its first deployment, one whose paid time ended (renew it first) or a bare-metal
/// server; 410 for a deleted server; 503 when a plan cannot be priced.
pub async fn bind(
    state: &AppState,
    server: u64,
    sandbox_id: &str,
    request: &ResizeRequest,
) -> Result<(Resize, Priced), ApiError> {
    validate::slug("plan", &request.plan)?;
    let record =
        state.store.sandbox(sandbox_id).await?.ok_or_else(|| {
            ApiError::Gone(format!("server {server} was deleted; nothing to resize"))
        })?;
    let paid_until = resizable(state, server, &record)?;
    let on = Stored::of(state, server, &record).await?;
    let resize = Resize {
        server_id: server,
        plan: request.plan.clone(),
        from: on.plan.clone(),
        paid_until,
        period_amount: None,
    };
    let priced = price(state, &resize, &on).await?;
    let period_amount = crate::pricing::usdc_atomic(priced.quote.period.usd).to_string();
    Ok((
        Resize {
            period_amount: Some(period_amount),
            ..resize
        },
        priced,
    ))
}

/// Whether `record`'s server can be resized now: its `paidUntil` (unix seconds) when it can.
fn resizable(state: &AppState, server: u64, record: &SandboxRecord) -> Result<i64, ApiError> {
    let Some(lease) = &record.lease else {
        return Err(ApiError::Conflict(format!(
            "server {server} is free: a resize is for paid servers (provision a paid plan)"
        )));
    };
    if record.resizing.is_some() {
        return Err(ApiError::Conflict(format!(
            "a resize of server {server} is under way: ask again once it ends (GET \
            /api/payments says when)"
        )));
    }
    if record.watch.as_ref().is_some_and(|w| w.first) {
        return Err(ApiError::Conflict(format!(
            "server {server} is still on its first deployment (not ready yet): resize it once \
            it is ready (GET /api/sandboxes/{} says when)",
            record.id
        )));
    }
    let paid_until = lease.paid_until.unix();
    match lease.state {
        LeaseState::Terminating | LeaseState::Terminated | LeaseState::Ended => Err(
            ApiError::Gone(format!("server {server} was deleted; nothing to resize")),
        ),
        LeaseState::Expiring | LeaseState::Expired => Err(paid_time_ended(server)),
        LeaseState::Active if paid_until <= state.clock.now() => Err(paid_time_ended(server)),
        LeaseState::Active => Ok(paid_until),
    }
}

fn paid_time_ended(server: u64) -> ApiError {
    ApiError::Conflict(format!(
        "the paid time of server {server} ended: renew it first (POST {}), then resize",
        crate::servers::leases::renew_link(server)
    ))
}

/// The checks on the plan moved to and the price of `resize` of the server `on` is.
async fn price(state: &AppState, resize: &Resize, on: &Stored) -> Result<Priced, ApiError> {
    let invalid = |why: String| ApiError::invalid("plan", why);
    if resize.plan == on.plan {
        return Err(invalid(format!(
            "server {} is on plan `{}` already",
            resize.server_id, on.plan
        )));
    }
    let from = discovery::find_plan(state, &on.plan)
        .await?
        .ok_or_else(|| ApiError::Unavailable(format!("plan `{}` is no longer offered", on.plan)))?;
    if PlanClass::of_type(from.plan_type.as_deref()) == PlanClass::Baremetal {
        return Err(ApiError::Conflict(format!(
            "server {} is bare metal: the provider resizes cloud VPS only",
            resize.server_id
        )));
    }
    let to = discovery::find_plan(state, &resize.plan)
        .await?
        .ok_or_else(|| {
            invalid(format!(
                "unknown plan `{}`; see GET /api/cloud/plans",
                resize.plan
            ))
        })?;
    if PlanClass::of_type(to.plan_type.as_deref()) == PlanClass::Baremetal {
        return Err(invalid(format!(
            "plan `{}` is bare metal: the provider moves cloud VPS to cloud VPS plans only",
            resize.plan
        )));
    }
    if !to.in_stock(&on.region) {
        return Err(invalid(format!(
            "plan `{}` is not in stock in the server's region `{}`; see available_regions in \
            GET /api/cloud/plans",
            resize.plan, on.region
        )));
    }
    let image = on.image.as_deref();
    let from_period = period_with_image(state, &on.plan, &from.pricing, image).await?;
    let to_period = period_with_image(state, &resize.plan, &to.pricing, image).await?;
    let left = resize.paid_until - state.clock.now();
    let prorated = Prorated {
        from_plan: on.plan.clone(),
        from_period_usd: from_period.usd,
        hours_left: u64::try_from(left).unwrap_or(0).div_ceil(3600).max(1),
    };
    let quote = Quote::prorated(&resize.plan, image, to_period, prorated).ok_or_else(|| {
        invalid(format!(
            "plan `{}` costs no more than the server's plan `{}`: a resize only grows a server \
            (the provider never shrinks a disk, and paid time is not refunded in part); \
            provision a smaller server instead",
            resize.plan, on.plan
        ))
    })?;
    Ok(Priced {
        quote: Quote {
            class: PlanClass::Vps,
            ..quote
        },
        region: on.region.clone(),
    })
}

/// The paid time a reversed resize payment of `amount` (USDC atomic units) takes back: what the
/// amount bought of the plan moved to at `period_amount` atomic units a period of `period`
/// seconds, rounded up — never more than `left`, the paid time the resize was priced for (the
/// rest was paid by other payments); nothing when the period has no price.
pub fn taken_back_seconds(amount: u128, period_amount: u128, period: i64, left: i64) -> i64 {
    let left = left.max(0);
    if period_amount == 0 {
        return 0;
    }
    let bought = amount
        .saturating_mul(u128::try_from(period).unwrap_or(0))
        .div_ceil(period_amount);
    i64::try_from(bought).map_or(left, |bought| bought.min(left))
}

/// One period of the plan `resize` moves `record`'s server to, with the server's image, in USDC
/// atomic units: as its order recorded it when priced, or — an order bound before it was
/// recorded — as priced now from the cached catalogue. `None` when it cannot be priced (no
/// record, the plan no longer offered, or without a price).
///
/// Errors: the catalogue's and the store's (the provider failing: a reversal waits for it,
/// never takes back more for want of a price).
pub async fn period_amount(
    state: &AppState,
    record: Option<&SandboxRecord>,
    resize: &Resize,
) -> Result<Option<u128>, ApiError> {
    if let Some(recorded) = resize.period_amount.as_deref() {
        return Ok(recorded.parse().ok());
    }
    let Some(record) = record else {
        return Ok(None);
    };
    let on = Stored::of(state, resize.server_id, record).await?;
    let Some(plan) = discovery::find_plan(state, &resize.plan).await? else {
        return Ok(None);
    };
    let image = match on.image.as_deref() {
        Some(image) => discovery::plan_image(state, &resize.plan, image)
            .await?
            .and_then(|i| crate::pricing::Pricing::of(&i)),
        None => None,
    };
    let hours = crate::pricing::hours(state.config.payments.period.as_secs());
    let image = image.as_ref().map(crate::pricing::Pricing::entries);
    Ok(
        crate::pricing::period_price(&plan.pricing, image, hours, &state.config.pricing)
            .ok()
            .map(|period| crate::pricing::usdc_atomic(period.usd)),
    )
}

#[cfg(test)]
mod tests {
    use super::taken_back_seconds;

    const DAY: i64 = 86_400;

    /// What a reversal takes back is what the amount bought at its price, and never the paid
    /// time other payments bought.
    #[test]
    fn a_reversed_resize_takes_back_what_its_amount_bought_and_no_more() {
        // A day's difference of 0.606912 USD, a day of the bigger plan 1.213824: half a day.
        assert_eq!(taken_back_seconds(606_912, 1_213_824, DAY, DAY), DAY / 2);
        // Rounded up to the second.
        assert_eq!(taken_back_seconds(1, 3, 3, DAY), 1);
        // Never more than the paid time the resize was priced for, whatever the price says.
        assert_eq!(
            taken_back_seconds(2_000_000, 1_000_000, DAY, DAY - 60),
            DAY - 60
        );
        assert_eq!(taken_back_seconds(u128::MAX, 1, DAY, DAY), DAY);
        assert_eq!(taken_back_seconds(10, 20, DAY, -5), 0);
        // A period without a price buys nothing to take back.
        assert_eq!(taken_back_seconds(606_912, 0, DAY, DAY), 0);
    }
}
