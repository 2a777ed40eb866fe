//! Paid means final (issue 46, item 1): a server is made on our transfer as soon as the chain
//! shows it (the facilitator's receipt, or our own read at `latest`), and the transfer is then
//! followed until the chain calls it final; a transfer that is gone before that stops what it
//! paid for.
//!
//! **How deep before a server is made: one block, on every network.** Base (and Base Sepolia)
//! is an OP Stack chain: one sequencer makes a block every 2 s, and its blocks are reorganised
//! only when it fails or its batch does not reach L1 in time — and then every block since the
//! last one whose batch is on L1 (`safe`, minutes behind) goes at once. Waiting for a few more
//! blocks buys nothing against that; waiting for `safe` does not fit API Gateway's 29 s, and
//! every paid request would pay the wait. So the order settles on the block that holds the
//! transfer, and what a reorganisation can cost is bounded instead: the transfer is read again
//! (every one to three minutes: [`FOLLOW_SECS`]) until it is at or below the chain's
//! `finalized` block (on Base, its batch in a finalized L1 block: ~15–20 minutes), and when the
//! chain shows it gone by then — the payer cancelled the authorization, or its nonce paid
//! someone else, in the new fork; or no transfer and the authorization expired unused — the
//! payment is **reversed**: its server's
//! paid time is taken back at once (powered off at the next lease step, deleted when the grace
//! period ends unless renewed), a credit is no longer redeemable, the owner gets
//! `payment.reversed`, and the `PaymentsReversed` metric (alarmed) counts it — and so are the
//! payment's remainders (credits its cheaper redemptions split off), paid by the same transfer.
//! A reorganisation that puts the same transfer back in another block changes nothing: it is
//! our transfer again, followed until that block is final.
//!
//! Orders still in flight are the machine's (it reads the chain itself); they are followed once
//! they end. A refunded credit whose transfer is gone is reported (the payout went out) and no
//! longer followed.

use serde::Serialize;

use crate::billing::order::machine::FINALITY_SECS;
use crate::billing::order::{effects, ledger};
use crate::deadline::Deadline;
use crate::error::ApiError;
use crate::state::AppState;
use crate::store::payments::{Order, OrderState};
use crate::x402::chain::Evidence;

/// The soonest a transfer that is not final yet is read again, seconds: when the `finalized`
/// block should have reached it ([`BLOCK_SECS`] a block), but no later than
/// [`FOLLOW_MAX_SECS`] — on Base, ~15–20 minutes of following, about seven reads.
pub const FOLLOW_SECS: i64 = 60;

/// The longest a transfer that is not final goes unread, seconds: how late a reversal can be
/// seen (three passes).
pub const FOLLOW_MAX_SECS: i64 = 180;

/// How long after its order a paid transfer may go on not being final before it is reported
/// (`TransfersNotFinal`), seconds: three times what Base takes.
pub const NOT_FINAL_SECS: i64 = 3_600;

/// Seconds between blocks on Base and Base Sepolia.
pub const BLOCK_SECS: i64 = 2;

/// Transfers read per pass.
const PER_PASS: i32 = 50;

/// What the chain says of a followed transfer, judged ([`judge`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// At or below the `finalized` block: no longer followed.
    Final,
    /// Not final yet (or the chain cannot say now): read again in this many seconds.
    Later(i64),
    /// Gone for good, with why: the payment is reversed.
    Gone(String),
}

/// Judges what the chain shows of a followed transfer: `evidence` of its authorization,
/// `finalized` (the chain's finalized block, when it could be read) and the authorization's
/// `valid_before` (unix seconds).
pub fn judge(evidence: &Evidence, finalized: Option<u64>, valid_before: i64) -> Verdict {
    match evidence {
        Evidence::Paid { block, .. } => match finalized {
            Some(finalized) if *block <= finalized => Verdict::Final,
            Some(finalized) => {
                let due = (*block - finalized) as i64 * BLOCK_SECS;
                Verdict::Later(due.clamp(FOLLOW_SECS, FOLLOW_MAX_SECS))
            }
            None => Verdict::Later(FOLLOW_SECS),
        },
        Evidence::Elsewhere { transaction, why } => {
            Verdict::Gone(format!("{why} (transaction {transaction})"))
        }
        // Dropped from the chain, its nonce unused: it may be mined again while it is valid.
        Evidence::Unused { head_time, .. } if *head_time > valid_before + FINALITY_SECS => {
            Verdict::Gone(
                "the transfer is no longer on chain and the authorization expired unused".into(),
            )
        }
        Evidence::Unused { .. } => Verdict::Later(FOLLOW_SECS),
    }
}

/// What one pass did to the transfers it followed.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FinalityReport {
    /// Transfers due and read.
    pub followed: usize,
    /// Of those, now final.
    pub finalized: usize,
    /// Of those, gone: their payments reversed.
    pub reversed: usize,
    /// Reads or writes that failed (tried again next time).
    pub errors: usize,
    /// Of those, transfers still not final more than [`NOT_FINAL_SECS`] after their order
    /// (`TransfersNotFinal`, alarmed): on Base a transfer is final in ~15–20 minutes, so the
    /// node, its `finalized` block or the chain itself is not what it should be.
    pub not_final: usize,
    /// Whether the node timed out: the pass stopped following there (the rest is read again by
    /// the next pass), so that a slow node costs one timeout a pass.
    pub node_timed_out: bool,
}

/// Follows every transfer that is due, within `deadline` (see the module docs). A transfer is
/// read only while two chain reads fit (its receipt and the `finalized` block: what a follow
/// asks in the common case; no facilitator is asked). A transfer not read, or whose follow
/// was cut short, is read again by the next pass.
///
/// Errors: the listing of transfers due fails.
pub async fn follow_due(state: &AppState, deadline: &Deadline) -> Result<FinalityReport, ApiError> {
    let mut report = FinalityReport::default();
    if !state.holds(crate::checkpoint::Guard::TransfersFollowed) {
        return Ok(report);
    }
    let due = state
        .store
        .transfers_due(state.clock.now(), PER_PASS)
        .await?;
    for order in due {
        if !deadline.allows(state.config.payments.rpc_timeout * 2) {
            break;
        }
        report.followed += 1;
        match follow(state, &order, deadline).await {
            Ok(Verdict::Final) => report.finalized += 1,
            Ok(Verdict::Gone(_)) => report.reversed += 1,
            Ok(Verdict::Later(_)) => {
                if state.clock.now() - order.created_at.unix() > NOT_FINAL_SECS {
                    let payment = &order.id;
                    tracing::error!(%payment, "a paid transfer is not final after an hour");
                    report.not_final += 1;
                }
            }
            Err(Unfollowed::NodeTimedOut) => {
                tracing::warn!(payment = %order.id, "the node timed out: following stops");
                report.node_timed_out = true;
                break;
            }
            Err(Unfollowed::Failed(err)) => {
                report.errors += 1;
                tracing::warn!(payment = %order.id, error = %err, "cannot follow the transfer");
            }
        }
    }
    if report.reversed > 0 {
        crate::metrics::emit("PaymentsReversed", report.reversed as f64, "Count", &[]);
    }
    if report.not_final > 0 {
        crate::metrics::emit("TransfersNotFinal", report.not_final as f64, "Count", &[]);
    }
    Ok(report)
}

/// Why a transfer was not followed this time.
enum Unfollowed {
    /// The node did not answer in time: the pass follows no more (the order stays due).
    NodeTimedOut,
    /// A write or a reversal failed.
    Failed(ApiError),
}

impl From<ApiError> for Unfollowed {
    fn from(err: ApiError) -> Self {
        Unfollowed::Failed(err)
    }
}

impl From<crate::store::StoreError> for Unfollowed {
    fn from(err: crate::store::StoreError) -> Self {
        Unfollowed::Failed(err.into())
    }
}

/// Reads `order`'s transfer and acts on the verdict.
async fn follow(
    state: &AppState,
    order: &Order,
    deadline: &Deadline,
) -> Result<Verdict, Unfollowed> {
    let later = |secs| state.clock.now() + secs;
    let Some(transaction) = order.transaction.as_deref() else {
        state.store.follow_transfer(order, None).await?;
        return Ok(Verdict::Final);
    };
    if order.state.in_flight() {
        state
            .store
            .follow_transfer(order, Some(later(FOLLOW_SECS)))
            .await?;
        return Ok(Verdict::Later(FOLLOW_SECS));
    }
    let requirements: serde_json::Value =
        serde_json::from_str(&order.requirements).unwrap_or_default();
    let since = effects::search_from(
        effects::valid_after(&order.payload),
        order.created_at.unix(),
    );
    let authorization = effects::authorization(state, order, &requirements, since);
    let chain = &state.chain;
    let verdict = match chain.evidence(&authorization, Some(transaction)).await {
        Ok(evidence) => {
            let finalized = match evidence {
                Evidence::Paid {
                    block, block_hash, ..
                } => finalized_for(chain, block, block_hash).await,
                _ => None,
            };
            judge(&evidence, finalized, order.valid_before as i64)
        }
        Err(crate::x402::chain::ChainError::Timeout) => return Err(Unfollowed::NodeTimedOut),
        Err(err) => {
            tracing::warn!(payment = %order.id, error = %err, "cannot ask the chain");
            Verdict::Later(FOLLOW_SECS)
        }
    };
    match &verdict {
        Verdict::Final => state.store.follow_transfer(order, None).await?,
        Verdict::Later(secs) => {
            state
                .store
                .follow_transfer(order, Some(later(*secs)))
                .await?
        }
        // Not reversed this time (another attempt holds an order, or a lease moved): the next
        // pass reads it again, and counts it once it is.
        Verdict::Gone(why) if !reverse(state, order, why, deadline).await? => {
            return Ok(Verdict::Later(FOLLOW_SECS));
        }
        Verdict::Gone(_) => {}
    }
    Ok(verdict)
}

/// The chain's `finalized` block for a transfer in block `block` whose receipt names
/// `block_hash`: `None` (not final: read again) when it cannot be read, or when the block at that
/// height, final already, is not the receipt's (a backend served the receipt from a fork it has
/// not left; only the chain's own block is final).
async fn finalized_for(
    chain: &crate::x402::chain::Chain,
    block: u64,
    block_hash: alloy_primitives::B256,
) -> Option<u64> {
    let finalized = chain.finalized().await.ok()?;
    if block > finalized {
        return Some(finalized);
    }
    let canonical = chain.block_hash(block).await.ok()?;
    if canonical != Some(block_hash) {
        tracing::warn!(
            block,
            "a receipt's block is not the chain's own at its height"
        );
        return None;
    }
    Some(finalized)
}

/// Reverses `order` for `why` ([`ledger::reverse`]), each order taken over first: the
/// payment's remainders first (the credits its cheaper redemptions split off, paid by the same
/// transfer: a credit redeemable, or a server it bought), then the order itself, whose write
/// ends the following — so a pass that stops between them reverses the rest on the next. A
/// refunded credit is reported (and counted: the payout went out) and no longer followed.
/// Whether the order was reversed (or reported).
async fn reverse(
    state: &AppState,
    order: &Order,
    why: &str,
    deadline: &Deadline,
) -> Result<bool, ApiError> {
    if matches!(order.state, OrderState::Refunding | OrderState::Refunded) {
        tracing::error!(payment = %order.id, why,
            "a refunded credit's transfer is gone: the refund paid out money never received");
        state.store.follow_transfer(order, None).await?;
        return Ok(true);
    }
    let reason = format!("the transfer that paid is gone: {why}");
    let chain = crate::billing::payments::chain_from(&state.store, order.clone()).await?;
    for remainder in chain
        .iter()
        .skip(1)
        .filter(|o| matches!(o.state, OrderState::Provisioned | OrderState::Credited))
    {
        if let Some(held) = ledger::take(state, remainder, deadline).await? {
            ledger::reverse(state, &held, &reason, deadline).await?;
        }
    }
    let Some(held) = ledger::take(state, order, deadline).await? else {
        return Ok(false);
    };
    Ok(ledger::reverse(state, &held, &reason, deadline)
        .await?
        .is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALID_BEFORE: i64 = 1_000;

    fn paid(block: u64) -> Evidence {
        Evidence::Paid {
            transaction: "0xabc".into(),
            block,
            block_hash: alloy_primitives::B256::repeat_byte(1),
        }
    }

    /// Each rule of [`judge`] has a case that fails without it.
    #[test]
    fn a_transfer_is_final_at_the_finalized_block_and_gone_only_for_good() {
        assert_eq!(judge(&paid(10), Some(10), VALID_BEFORE), Verdict::Final);
        assert_eq!(judge(&paid(10), Some(11), VALID_BEFORE), Verdict::Final);
        // Read again when the finalized block should have reached it: a minute at the soonest.
        assert_eq!(
            judge(&paid(11), Some(10), VALID_BEFORE),
            Verdict::Later(FOLLOW_SECS)
        );
        assert_eq!(
            judge(&paid(160), Some(100), VALID_BEFORE),
            Verdict::Later(60 * BLOCK_SECS)
        );
        // A reversal is seen within three passes, however far finality is.
        assert_eq!(
            judge(&paid(600), Some(100), VALID_BEFORE),
            Verdict::Later(FOLLOW_MAX_SECS)
        );
        // The finalized block could not be read: not final.
        assert_eq!(
            judge(&paid(1), None, VALID_BEFORE),
            Verdict::Later(FOLLOW_SECS)
        );
        let cancelled = Evidence::Elsewhere {
            transaction: "0xdef".into(),
            why: "the payer cancelled the authorization".into(),
        };
        assert!(matches!(
            judge(&cancelled, None, VALID_BEFORE),
            Verdict::Gone(why) if why.contains("cancelled") && why.contains("0xdef")
        ));
        // Dropped and unused: it may come back while the authorization is valid (and a node's
        // head a little past it may not show a transfer mined at its end yet).
        let unused = |head_time| Evidence::Unused { head: 1, head_time };
        assert_eq!(
            judge(&unused(VALID_BEFORE + FINALITY_SECS), None, VALID_BEFORE),
            Verdict::Later(FOLLOW_SECS)
        );
        assert!(matches!(
            judge(
                &unused(VALID_BEFORE + FINALITY_SECS + 1),
                None,
                VALID_BEFORE
            ),
            Verdict::Gone(_)
        ));
    }
}
