//! The paid order as a pure state machine: [`next`] maps (state, event, facts) to the next
//! state, the ledger write that records it, and the effect to carry out after that write. It
//! never reads the clock, the store or the network; [`super::driver`] does, one effect at a
//! time, and feeds back what happened as the next event. (TigerBeetle's and FoundationDB's
//! shape: the logic runs unchanged under the seeded fault simulation.)
//!
//! The rules it holds (issue "Money that holds against a hostile world"):
//!
//! - **Nothing charged before `settling`.** A verify that refuses ends a `claimed` order
//!   `rejected` once the chain shows the authorization did not pay us: a transfer of this very
//!   authorization (the payer's own, or a leaked payload's) may have paid the treasury before
//!   the claim, and then the facilitator refuses it as used — the order is `settled` on that
//!   transfer instead. An authorization whose window closed before any settle ends it
//!   `expired` once the chain shows it unused past `validBefore` + [`FINALITY_SECS`] (it may
//!   still pay us by someone else's hand until then).
//! - **Paid means our transfer.** Once a settle may have been sent (`settling`), only the
//!   chain's evidence ends the order — even after the facilitator's `success: true`, whose
//!   transaction is recorded and then read back from the chain: our transfer → `settled`; the
//!   nonce used elsewhere or cancelled → `rejected`; unused on a node whose head is past
//!   `validBefore` + finality → `expired`. A facilitator's failure, a lost answer, or a lagging node's "unused" never does:
//!   the order looks again, settles again while the authorization is valid (the contract moves
//!   the money at most once), or waits.
//! - **No second create while the first may land.** A create is announced (`creating`, with the
//!   time it was sent) before it is sent; after an unclear answer, the order searches — and
//!   waits — until the create settle time has passed since then, before another create or a
//!   credit. A definite refusal makes the order a credit at once; so do the attempts cap, and
//!   the order's deadline for an order that never got a create out.
//! - **A failing search never blocks the credit of an order that never sent a create**; one that
//!   did waits (the driver reports it).

use serde_json::Value;

pub use crate::store::payments::OrderState as State;

/// Seconds before `validBefore` within which a settle is no longer sent (the chain needs a block
/// to include it; `reference/x402.md` §2.3 check 9).
pub const SETTLE_BUFFER_SECS: i64 = 6;

/// How long after `validBefore` a node's "unused" is final (a transfer mined at the window's end
/// must show first), seconds.
pub const FINALITY_SECS: i64 = 60;

/// Settle calls one attempt makes at most.
pub const SETTLE_CALLS: u32 = 3;

/// What an attempt knows when it decides: times are unix seconds.
#[derive(Debug, Clone, PartialEq)]
pub struct Facts {
    /// Now.
    pub now: i64,
    /// The authorization's `validBefore`.
    pub valid_before: i64,
    /// After this, an order that cannot provision becomes a credit (its binding + the order
    /// deadline).
    pub deadline_at: i64,
    /// When the last create whose outcome is unknown was announced; `None`: no create can land.
    pub create_sent_at: Option<i64>,
    /// How long a create may take to land and show in listings, seconds.
    pub create_settle: i64,
    /// An attempt's lease, seconds: a create is sent within it of its intent (the attempt checks
    /// its lease before sending), so one may land until intent + lease + settle.
    pub lease: i64,
    /// Creates announced so far, and the most allowed.
    pub creates: (u32, u32),
    /// Settle calls this attempt made.
    pub settle_calls: u32,
    /// Whether a settle of this attempt answered success or a failure: the order then waits for
    /// the chain's evidence (or a later attempt) instead of asking again at once.
    pub answered: bool,
    /// Whether this invocation has time for one more call to the facilitator or the chain.
    pub room: bool,
    /// Whether it has time for one more call to the provider.
    pub provider_room: bool,
    /// A renewal (extends a lease) rather than a new server.
    pub renewal: bool,
    /// The facilitator's refusal recorded on the order (its reason), if any.
    pub refusal: Option<String>,
}

/// What the facilitator's `/verify` said.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// `isValid: true`.
    Valid,
    /// `isValid: false`, with the reason.
    Invalid(String),
    /// No usable answer (advisory: settle verifies again).
    Unknown,
}

/// What the facilitator's `/settle` said.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// `success: true`, with the transaction.
    Success(String),
    /// `settlement_pending`, with the transaction when named.
    Pending(Option<String>),
    /// `success: false`, with the reason (it may have broadcast anyway).
    Failed(String),
    /// No answer (timeout, transport, garbage).
    Lost,
}

/// What the chain shows of the authorization.
#[derive(Debug, Clone, PartialEq)]
pub enum Chain {
    /// Our transfer, in this transaction.
    Paid(String),
    /// Used by another transfer, or cancelled: nothing will be paid.
    Elsewhere(String),
    /// Not used as far as the node has seen; `final` once its head is past `validBefore` +
    /// [`FINALITY_SECS`].
    Unused {
        /// Whether "unused" is final.
        final_: bool,
    },
    /// The node cannot be asked (why).
    Unknown(String),
}

/// What a search of the project for the order's tagged server found.
#[derive(Debug, Clone, PartialEq)]
pub enum Search {
    /// The server (the provider's object).
    Found(Value),
    /// Not in any page of the listing.
    Missing,
    /// The listing failed (why).
    Failed(String),
}

/// What the provider's create answered.
#[derive(Debug, Clone, PartialEq)]
pub enum Create {
    /// 201 with the server.
    Created(Value),
    /// A definite refusal (400, 404, 409, 422): nothing was created (why).
    Refused(String),
    /// 429: not processed.
    RateLimited,
    /// Timeout, transport failure, 5xx: it may land later.
    Unclear,
}

/// What extending a renewal's lease did (written with the order, in one transaction).
#[derive(Debug, Clone, PartialEq)]
pub enum Extension {
    /// The lease is extended and the order `provisioned`.
    Done,
    /// Nothing to extend (why): the server is gone (deleted), or its plan is no longer the one
    /// the renewal was priced on.
    Gone(String),
    /// The lease kept changing under the write (why): try again later.
    Busy(String),
}

/// What happened, fed to [`next`].
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// An attempt holds the order (a new claim, a take-over, a retry of the same request).
    Resumed,
    /// Verify answered.
    Verified(Verdict),
    /// Settle answered.
    Settled(Answer),
    /// The chain was asked.
    Looked(Chain),
    /// The project was searched.
    Searched(Search),
    /// The create answered.
    Created(Create),
    /// The lease extension ran.
    Extended(Extension),
}

/// The ledger write that records a transition, made before its effect.
#[derive(Debug, Clone, PartialEq)]
pub enum Write {
    /// Nothing to write.
    None,
    /// `claimed` → `settling`: a settle is about to be sent.
    Settling,
    /// A transaction the facilitator named while the outcome is still open.
    Transaction(String),
    /// The facilitator's failure reason while the outcome is still open (it may have broadcast
    /// anyway): kept as the reason should the authorization expire unused.
    Refusal(String),
    /// Paid: `settled`, with the transaction.
    Settled(String),
    /// Refused, nothing charged (reason): `rejected`.
    Rejected(String),
    /// Never used and now never usable (reason): `expired`.
    Expired(String),
    /// A create is about to be sent: `creating`, one more attempt, sent now.
    Creating,
    /// The last create was definitely not processed: no create can land.
    CreateUndone,
    /// The server exists: recorded as its owner's, `provisioned`.
    Provisioned(Value),
    /// Paid, nothing delivered (reason): `credited`.
    Credited(String),
}

/// What the driver does after the write.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Ask the facilitator to verify.
    Verify,
    /// Ask the facilitator to settle (the stored payload, identical every time).
    Settle,
    /// Ask the chain for evidence of the authorization's use.
    LookUp,
    /// Search the project (every page) for the order's tagged server.
    Search,
    /// Ask the provider to create the server, tagged with the sandbox id.
    Create,
    /// Extend the renewed server's lease, with the order, in one transaction.
    Extend,
    /// No outside call: decide again at once (as on [`Event::Resumed`]).
    Continue,
    /// Stop for now (why): the order stays in flight; a retry or the reconciler goes on.
    Pause(String),
    /// The order is final: answer its outcome.
    Finish,
}

/// One transition.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// The state after it.
    pub to: State,
    /// What is written (before the effect).
    pub write: Write,
    /// What is done next.
    pub effect: Effect,
}

fn go(to: State, write: Write, effect: Effect) -> Step {
    Step { to, write, effect }
}

fn stay(state: State, effect: Effect) -> Step {
    go(state, Write::None, effect)
}

fn pause(state: State, why: &str) -> Step {
    stay(state, Effect::Pause(why.to_owned()))
}

/// Why a settle is not sent now (and the order waits).
pub const NOT_SETTLED_YET: &str = "the payment is not settled yet";
/// Why a claimed order is rejected when the facilitator's reason was not recorded.
pub const REFUSED: &str = "the facilitator refused the payment";
/// Why a paid order stops before it is provisioned.
pub const IN_BACKGROUND: &str = "provisioning continues in the background";
/// Why a create is not sent now.
pub const CREATE_MAY_LAND: &str =
    "the last create may still land; waiting for it before another create";

/// The transition from `state` on `event` given `facts` (see the module docs).
pub fn next(state: State, event: &Event, facts: &Facts) -> Step {
    match state {
        State::Claimed => claimed(event, facts),
        State::Settling => settling(event, facts),
        State::Settled | State::Creating => paid(state, event, facts),
        State::Provisioned
        | State::Credited
        | State::Rejected
        | State::Expired
        | State::Refunding
        | State::Refunded
        | State::Reversed => stay(state, Effect::Finish),
    }
}

fn claimed(event: &Event, f: &Facts) -> Step {
    let window_closed = f.now + SETTLE_BUFFER_SECS >= f.valid_before;
    let look = if f.room {
        Effect::LookUp
    } else {
        Effect::Pause(NOT_SETTLED_YET.into())
    };
    match event {
        // Never settled by us, but the payload may have been sent by someone else meanwhile.
        // Refused already: the chain decides, as of the refusal (never a new verify, which
        // would move the time the chain must reach: `effects::look_up`).
        Event::Resumed if window_closed || f.refusal.is_some() => stay(State::Claimed, look),
        Event::Resumed if f.room => stay(State::Claimed, Effect::Verify),
        // "Invalid" is not "nothing was paid" until the chain says so.
        Event::Verified(Verdict::Invalid(reason)) => {
            go(State::Claimed, Write::Refusal(reason.clone()), look)
        }
        Event::Looked(Chain::Paid(tx)) => settled(tx, f),
        Event::Looked(Chain::Elsewhere(why)) => rejected(why),
        Event::Looked(Chain::Unused { final_: true }) if window_closed => go(
            State::Expired,
            Write::Expired("the authorization expired before it was settled".into()),
            Effect::Finish,
        ),
        // Still usable by whoever holds the payload until `validBefore`, and shown late.
        Event::Looked(Chain::Unused { final_: false }) if window_closed => {
            pause(State::Claimed, NOT_SETTLED_YET)
        }
        // Unused: the refusal stands (a later use is the payer's own, never our settle).
        Event::Looked(Chain::Unused { .. }) => rejected(f.refusal.as_deref().unwrap_or(REFUSED)),
        Event::Looked(Chain::Unknown(why)) => pause(State::Claimed, why),
        Event::Verified(_) if may_settle(f) => go(State::Settling, Write::Settling, Effect::Settle),
        _ => pause(State::Claimed, NOT_SETTLED_YET),
    }
}

fn may_settle(f: &Facts) -> bool {
    f.room
        && !f.answered
        && f.settle_calls < SETTLE_CALLS
        && f.now + SETTLE_BUFFER_SECS < f.valid_before
}

fn settling(event: &Event, f: &Facts) -> Step {
    let s = State::Settling;
    let look = if f.room {
        Effect::LookUp
    } else {
        Effect::Pause(NOT_SETTLED_YET.into())
    };
    match event {
        Event::Resumed if f.room => stay(s, Effect::LookUp),
        // The facilitator's word names the transaction; the chain's receipt decides.
        Event::Settled(Answer::Success(tx)) => go(s, Write::Transaction(tx.clone()), look),
        Event::Settled(Answer::Pending(tx)) => {
            let effect = if may_settle(f) { Effect::Settle } else { look };
            match tx {
                Some(tx) => go(s, Write::Transaction(tx.clone()), effect),
                None => stay(s, effect),
            }
        }
        Event::Settled(Answer::Failed(reason)) => go(s, Write::Refusal(reason.clone()), look),
        Event::Settled(Answer::Lost) => stay(s, look),
        Event::Looked(Chain::Paid(tx)) => settled(tx, f),
        Event::Looked(Chain::Elsewhere(why)) => rejected(why),
        Event::Looked(Chain::Unused { final_: true }) => go(
            State::Expired,
            Write::Expired("the authorization was never used and has expired".into()),
            Effect::Finish,
        ),
        Event::Looked(Chain::Unused { final_: false }) if may_settle(f) => stay(s, Effect::Settle),
        Event::Looked(Chain::Unknown(why)) => pause(s, why),
        _ => pause(s, NOT_SETTLED_YET),
    }
}

/// What a paid order does next: a renewal extends its lease, a new server is searched for —
/// when the invocation has time for it.
fn after_paid(f: &Facts) -> Effect {
    match (f.provider_room, f.renewal) {
        (false, _) => Effect::Pause(IN_BACKGROUND.into()),
        (true, true) => Effect::Extend,
        (true, false) => Effect::Search,
    }
}

/// What a just-paid order does next: a renewal extends its lease; a new server's order decides
/// on its create (nothing to search for: no create was ever announced for its sandbox).
fn just_paid(f: &Facts) -> Effect {
    if f.renewal {
        after_paid(f)
    } else {
        Effect::Continue
    }
}

/// The chain shows our transfer, in transaction `tx`: paid.
fn settled(tx: &str, f: &Facts) -> Step {
    go(State::Settled, Write::Settled(tx.to_owned()), just_paid(f))
}

/// Nothing was or will be paid (why): refused.
fn rejected(why: &str) -> Step {
    go(
        State::Rejected,
        Write::Rejected(why.to_owned()),
        Effect::Finish,
    )
}

fn credit(reason: &str) -> Step {
    go(
        State::Credited,
        Write::Credited(reason.to_owned()),
        Effect::Finish,
    )
}

fn paid(state: State, event: &Event, f: &Facts) -> Step {
    match event {
        // Nothing announced, nothing to find: decide on the first create.
        Event::Resumed if state == State::Settled && !f.renewal && f.creates.0 == 0 => {
            missing(state, f)
        }
        Event::Resumed => stay(state, after_paid(f)),
        Event::Searched(Search::Found(server)) | Event::Created(Create::Created(server)) => go(
            State::Provisioned,
            Write::Provisioned(server.clone()),
            Effect::Finish,
        ),
        Event::Searched(Search::Failed(why))
            if f.create_sent_at.is_none() && f.now > f.deadline_at =>
        {
            credit(&format!(
                "the server could not be provisioned before the order's deadline ({why})"
            ))
        }
        Event::Searched(Search::Failed(why)) => pause(state, why),
        Event::Searched(Search::Missing) => missing(state, f),
        Event::Created(Create::Refused(why)) => credit(why),
        Event::Created(Create::Unclear) if f.provider_room => stay(state, Effect::Search),
        Event::Created(Create::Unclear) => pause(state, CREATE_MAY_LAND),
        Event::Created(Create::RateLimited) => go(
            state,
            Write::CreateUndone,
            Effect::Pause("the provider is rate limiting creates".into()),
        ),
        Event::Extended(Extension::Done) => stay(State::Provisioned, Effect::Finish),
        Event::Extended(Extension::Gone(why)) => credit(why),
        Event::Extended(Extension::Busy(why)) => pause(state, why),
        Event::Verified(_) | Event::Settled(_) | Event::Looked(_) => pause(state, IN_BACKGROUND),
    }
}

/// The order's server is not at the provider (every page searched).
fn missing(state: State, f: &Facts) -> Step {
    if let Some(sent) = f.create_sent_at
        && f.now < sent + f.lease + f.create_settle
    {
        return pause(state, CREATE_MAY_LAND);
    }
    // Past its deadline, an order that never got a create out gives up; one whose creates are
    // known not to have landed tries again, up to the attempts allowed.
    if f.now > f.deadline_at && f.creates.0 == 0 {
        return credit("the server could not be provisioned before the order's deadline");
    }
    if f.creates.0 >= f.creates.1 {
        return credit("the provider did not create the server after repeated attempts");
    }
    if !f.provider_room {
        return pause(state, IN_BACKGROUND);
    }
    go(State::Creating, Write::Creating, Effect::Create)
}

#[cfg(test)]
mod tests;
