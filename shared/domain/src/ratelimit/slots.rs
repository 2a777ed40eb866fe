//! In-flight budgets (issue 34, point 1): work that holds a function for more than a moment
//! takes a slot from a budget in the store before it starts, and gives it back on every path
//! (a slot lost with its instance lapses on its own). Rates in windows cannot bound work that
//! outlives a window; a count of what is in flight can, exactly, across every instance.
//!
//! | pool | subject | cap | held by |
//! |---|---|---|---|
//! | `waits` | owner | `MAX_WAITS_PER_OWNER` (4) | a long poll (`waitFor`, `wait_for_sandbox`) |
//! | `webhook-tests` | owner | `MAX_WEBHOOK_TESTS_PER_OWNER` (5) | a queued test event, until it was tried |
//! | `paid` | owner, payer, and everyone | `MAX_PAID_IN_FLIGHT_PER_OWNER` (3) each of `MAX_PAID_IN_FLIGHT` (9) | a request with a payment that passed its checks on chain, to the order's end |
//! | `sign-in` | source address, and everyone | `MAX_SIGN_INS_IN_FLIGHT_PER_ADDRESS` (4) of `MAX_SIGN_INS_IN_FLIGHT` (12) | a sign-in or an approval whose signature is checked on chain |
//! | `probe` | webhook endpoint | 1 | the attempt that probes an endpoint whose deliveries are failing (`crate::notifications::webhooks`) |
//! | `slow-deliveries` | owner | `MAX_SLOW_DELIVERIES_PER_OWNER` (2) | a delivery attempt not answered within a second, until it ends |
//!
//! Over a budget: 429 `rate-limited` naming the pool as its policy (`<pool>-pool` when the
//! pool's global budget is full), with `Retry-After` (until the soonest slot lapses at the
//! latest). The budgets are the capacity table's (`docs/capacity.md`).
//!
//! The paid pool also keeps out, for `PAID_REFUSAL_COOLDOWN_SECONDS`, an owner and a payer
//! whose payment passed the checks on chain and was then refused by the facilitator (or used
//! elsewhere): a wallet whose account answers a simulation one way and the settlement another
//! ([`cooled_down`], [`cool_down`]; 429 `paid-refused`), so that no payment that never pays
//! holds the pool twice in a row.

use crate::error::{ApiError, Exceeded};
use crate::state::AppState;
use crate::store::caps::{Pool, Slot};

/// A slot held: give it back with [`release`].
#[derive(Debug, Clone, PartialEq)]
pub struct Held {
    /// Its pool.
    pub pool: Pool,
    /// Whose budget: an owner's address or a source address.
    pub subject: String,
    /// Its number in the pool.
    pub slot: u32,
    /// Who holds it (a random token, or the id of what holds it).
    pub holder: String,
}

/// Takes one of `subject`'s `cap` slots of `pool` for `holder`, for `seconds` at most.
///
/// Errors: 429 (policy: the pool's name) with `Retry-After` when every slot is held; the
/// store's.
pub async fn take(
    state: &AppState,
    pool: Pool,
    subject: &str,
    holder: &str,
    cap: u32,
    seconds: i64,
) -> Result<Held, ApiError> {
    let now = state.clock.now();
    let until = now + seconds;
    match state
        .store
        .take_slot(pool, subject, holder, cap, now, until)
        .await?
    {
        Slot::Taken(slot) => Ok(Held {
            pool,
            subject: subject.to_owned(),
            slot,
            holder: holder.to_owned(),
        }),
        Slot::Full { free_at } => Err(ApiError::RateLimited(Box::new(Exceeded {
            policy: pool.name(),
            quota: cap,
            window: seconds.max(1) as u64,
            retry_after: (free_at - now).max(1) as u64,
        }))),
    }
}

/// The subject of a pool's global budget: every subject's slots together. (No owner's address
/// or source address is spelt so.)
pub const EVERYONE: &str = "all";

/// Runs `work` holding one of `subject`'s `cap` slots of `pool` and one of the pool's
/// `pool_cap` slots for everyone ([`EVERYONE`]), so that one subject holds at most `cap` and all
/// together at most `pool_cap` (the capacity table, `docs/capacity.md`: a subject's cap is at
/// most a third of its pool's, which the configuration enforces). Gives both back whatever `work`
/// answers.
///
/// Errors: 429 naming the pool (the subject's slots are held) or `<pool>-pool` (every slot of
/// the pool is held), with `Retry-After`; the store's; then `work`'s.
pub async fn holding_in_pool<T>(
    state: &AppState,
    pool: Pool,
    (subject, cap): (&str, u32),
    pool_cap: u32,
    seconds: i64,
    work: impl std::future::Future<Output = Result<T, ApiError>>,
) -> Result<T, ApiError> {
    let holder = crate::ids::random_hex(8);
    let own = take(state, pool, subject, &holder, cap, seconds).await?;
    let everyone = match take(state, pool, EVERYONE, &holder, pool_cap, seconds).await {
        Ok(held) => held,
        Err(err) => {
            release(state, &own).await;
            return Err(match err {
                ApiError::RateLimited(mut exceeded) => {
                    exceeded.policy = pool.pool_name();
                    ApiError::RateLimited(exceeded)
                }
                err => err,
            });
        }
    };
    let answer = work.await;
    release(state, &everyone).await;
    release(state, &own).await;
    answer
}

/// Gives `held` back (best effort: a failure is logged, and the slot lapses on its own).
pub async fn release(state: &AppState, held: &Held) {
    let released = state
        .store
        .release_slot(held.pool, &held.subject, held.slot, &held.holder)
        .await;
    if let Err(err) = released {
        let pool = held.pool.name();
        tracing::warn!(pool, error = %err, "an in-flight slot not released (it lapses)");
    }
}

/// Runs `work` holding one of `subject`'s slots of `pool` (see [`take`]), and gives it back
/// whatever `work` answers.
///
/// Errors: [`take`]'s, then `work`'s.
pub async fn holding<T>(
    state: &AppState,
    pool: Pool,
    subject: &str,
    cap: u32,
    seconds: i64,
    work: impl std::future::Future<Output = Result<T, ApiError>>,
) -> Result<T, ApiError> {
    let holder = crate::ids::random_hex(8);
    let held = take(state, pool, subject, &holder, cap, seconds).await?;
    let answer = work.await;
    release(state, &held).await;
    answer
}

/// The paid pool's subject of a payer (`payer:<address>`): a payer's paid requests in flight
/// are capped as an owner's are, whichever owners they pay for.
pub fn payer_subject(payer: &str) -> String {
    format!("payer:{payer}")
}

/// The policy a 429 names for an owner or payer kept off the paid pool ([`cool_down`]).
pub const PAID_REFUSED: &str = "paid-refused";

/// Refuses a paid request of `owner` with a payment from `payer` while either is kept off the
/// paid pool ([`cool_down`]): one batch read of the store, before the payment is asked of the
/// chain.
///
/// Errors: 429 `paid-refused` with `Retry-After` (until the cooldown ends); the store's.
pub async fn cooled_down(state: &AppState, owner: &str, payer: &str) -> Result<(), ApiError> {
    let cooldown = state.config.payments.refusal_cooldown.as_secs();
    if cooldown == 0 {
        return Ok(());
    }
    let now = state.clock.now();
    let payer = payer_subject(payer);
    let until = state
        .store
        .cooling_until(Pool::Paid, &[owner, &payer], now)
        .await?;
    match until {
        None => Ok(()),
        Some(until) => Err(ApiError::RateLimited(Box::new(Exceeded {
            policy: PAID_REFUSED,
            quota: 0,
            window: cooldown,
            retry_after: (until - now).max(1) as u64,
        }))),
    }
}

/// Keeps `owner` and `payer` off the paid pool for `PAID_REFUSAL_COOLDOWN_SECONDS` from now:
/// their payment passed the checks on chain and the facilitator refused it (best effort: a
/// failure is logged).
pub async fn cool_down(state: &AppState, owner: &str, payer: &str) {
    let cooldown = state.config.payments.refusal_cooldown.as_secs() as i64;
    if cooldown == 0 {
        return;
    }
    let until = state.clock.now() + cooldown;
    for subject in [owner.to_owned(), payer_subject(payer)] {
        if let Err(err) = state.store.cool_down(Pool::Paid, &subject, until).await {
            tracing::warn!(error = %err, "a refused payer is not kept off the paid pool");
        }
    }
    tracing::warn!(
        owner,
        payer,
        until,
        "kept off the paid pool: the facilitator refused"
    );
}
