//! Named steps of the paid path where a test can stop the handler dead, as if the Lambda were
//! killed there (issue: durable orders, "drops the handler at a chosen step"), and guards of the
//! money a test breaks on purpose ([`Guard`]). In production `domain::AppState::checkpoints` is
//! `None`: a checkpoint is a no-op and every guard holds.

use std::sync::Mutex;

use tokio::sync::Notify;

/// A step of the paid path, just after the named effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The claim is written.
    Claimed,
    /// The `settling` intent is written; settle is next.
    BeforeSettle,
    /// Settle answered (settled on chain); nothing is recorded yet.
    AfterSettle,
    /// The `creating` intent is written; the provider's create is next.
    BeforeCreate,
    /// The provider answered the create; the ownership is not recorded yet.
    AfterCreate,
}

/// A guard of the money that a test may break on purpose, to see the simulation catch what it
/// prevents (issue "money conserved under every interleaving": every invariant is seen to fail).
/// In production nothing is ever broken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Guard {
    /// Only the chain's evidence ends a settling order: a facilitator's failure never does.
    ChainDecides,
    /// A facilitator's success is confirmed on the chain before the order counts as settled.
    ChainConfirms,
    /// A cheaper redemption keeps what it leaves as a credit of its own.
    RemainderKept,
    /// A failed first deployment's server is deleted before its payment is credited.
    UndeliveredDeleted,
    /// The sweep deletes servers no record owns.
    SweepDeletesOrphans,
    /// A lease's server is deleted at `graceEndsAt`, not before.
    GraceKept,
    /// Every paid transfer is followed until the chain calls it final, and one gone by then
    /// reverses its payment.
    TransfersFollowed,
    /// A facilitator's "invalid" ends a claimed order only once the chain shows no transfer to
    /// us under the authorization.
    InvalidLooksOnChain,
    /// A claim's refusal stands on the chain's "unused" only from a node that has reached the
    /// time it was recorded.
    RefusalWaitsForTheNode,
    /// A reversed payment takes the paid time it bought back from its server's lease.
    TimeTakenBack,
    /// A reversed payment gives its key's reserved spend back.
    SpendGivenBack,
    /// A log range the node refuses is asked again narrower.
    RangeShrinks,
    /// The search for a use of an authorization presented or claimed starts at its
    /// `validAfter` (within an hour), not at the claim: a payer may have sent the transfer
    /// himself long before he presents it.
    SearchFromValidAfter,
    /// A claim reserves its key's spend only within the key's limits (what a concurrent
    /// request of the same key reserved first counts).
    LimitHolds,
}

/// The armed kill point of a test, and the guards it broke.
#[derive(Debug, Default)]
pub struct Checkpoints {
    broken: Mutex<Vec<Guard>>,
    /// The armed step, and whether the handler only pauses there ([`Checkpoints::pause_at`]).
    armed: Mutex<Option<(Step, bool)>>,
    /// Notified when a handler reaches the armed step (and stops there forever, or pauses).
    pub reached: Notify,
    /// Notified when a paused handler may go on.
    go: Notify,
}

impl Checkpoints {
    /// Arms `step`: the next handler reaching it never goes further. One shot.
    pub fn arm(&self, step: Step) {
        *self.armed.lock().unwrap_or_else(|e| e.into_inner()) = Some((step, false));
    }

    /// Arms `step` as a pause: the next handler reaching it waits there until
    /// [`Checkpoints::resume`] (a holder stalled between two of its steps). One shot.
    pub fn pause_at(&self, step: Step) {
        *self.armed.lock().unwrap_or_else(|e| e.into_inner()) = Some((step, true));
    }

    /// Lets the handler paused at its checkpoint go on.
    pub fn resume(&self) {
        self.go.notify_one();
    }

    /// Breaks `guard` for the rest of the test.
    pub fn break_guard(&self, guard: Guard) {
        self.broken
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(guard);
    }

    /// Whether `guard` holds (it does unless a test broke it).
    pub fn holds(&self, guard: Guard) -> bool {
        !self
            .broken
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&guard)
    }

    /// Disarms whatever is armed.
    pub fn disarm(&self) {
        *self.armed.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// Called by the paid path after each step: returns at once unless `step` is armed, in
    /// which case it disarms, signals [`Checkpoints::reached`] and never returns (or, armed as
    /// a pause, returns once resumed).
    pub async fn pass(&self, step: Step) {
        let hit = {
            let mut armed = self.armed.lock().unwrap_or_else(|e| e.into_inner());
            match *armed {
                Some((at, pause)) if at == step => {
                    *armed = None;
                    Some(pause)
                }
                _ => None,
            }
        };
        match hit {
            Some(true) => {
                tracing::warn!(?step, "checkpoint: the handler pauses here (test)");
                self.reached.notify_one();
                self.go.notified().await;
            }
            Some(false) => {
                tracing::warn!(?step, "checkpoint: the handler stops here (test)");
                self.reached.notify_one();
                std::future::pending::<()>().await;
            }
            None => {}
        }
    }
}
