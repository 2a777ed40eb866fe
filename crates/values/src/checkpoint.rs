//! Named steps of the paid path where a test can stop the handler dead, as if the Lambda were
//! killed there (issue: durable orders, "drops the handler at a chosen step"). In production
//! `shared::AppState::checkpoints` is `None` and a checkpoint is a no-op.

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

/// The armed kill point of a test.
#[derive(Debug, Default)]
pub struct Checkpoints {
    armed: Mutex<Option<Step>>,
    /// Notified when a handler reaches the armed step (and stops there forever).
    pub reached: Notify,
}

impl Checkpoints {
    /// Arms `step`: the next handler reaching it never goes further. One shot.
    pub fn arm(&self, step: Step) {
        *self.armed.lock().unwrap_or_else(|e| e.into_inner()) = Some(step);
    }

    /// Disarms whatever is armed.
    pub fn disarm(&self) {
        *self.armed.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// Called by the paid path after each step: returns at once unless `step` is armed, in
    /// which case it disarms, signals [`Checkpoints::reached`] and never returns.
    pub async fn pass(&self, step: Step) {
        let hit = {
            let mut armed = self.armed.lock().unwrap_or_else(|e| e.into_inner());
            if *armed == Some(step) {
                *armed = None;
                true
            } else {
                false
            }
        };
        if hit {
            tracing::warn!(?step, "checkpoint: the handler stops here (test)");
            self.reached.notify_one();
            std::future::pending::<()>().await;
        }
    }
}
