//! The payment ledger (design brief §3, Money; durable orders): one item per payment, keyed on
//! (network, asset, payer, nonce) — the identity of an EIP-3009 authorization — holding the
//! order that payment pays for, bound to a fingerprint of the request that first carried it.
//!
//! Item: `pk = PAYMENT#<network>/<asset>/<payer>/<nonce>`, `sk = PAYMENT`; GSI1
//! `gsi1pk = OWNER#<owner>`, `gsi1sk = PAYMENT#<createdAt>#<id>` (the owner's payments); GSI2
//! `gsi2pk = PAYSTATE#<state>`, `gsi2sk = PAYMENT#<updatedAt>#<id>` (operators and the
//! reconciler, by state).
//!
//! Every change is a conditional write on the order's `state` and `seq` (a counter bumped by
//! every write) and on the `attempt` that holds it: an attempt holds an in-flight order until
//! `leaseUntil` (epoch seconds), and a later request or the reconciler takes over an expired
//! lease ([`Store::take_order`]). A write whose reply is lost is retried identically; a retry
//! that then fails its condition reads the order back, and "state, seq and attempt are what I
//! wrote" means the write was mine ([`Advance::Done`]), anything else that another attempt moved
//! the order ([`Advance::Lost`]). Transactions carry a `ClientRequestToken` derived from the
//! order, its seq and the attempt, so DynamoDB itself deduplicates a retried transaction.

use super::events::Outbox;
use crate::address::Owner;
use crate::partitions::Partition;
use crate::x402::PaymentKey;
use std::time::Duration;

use aws_sdk_dynamodb::types::{Put, TransactWriteItem, Update};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

pub use super::sandboxes::SandboxStatus;
use super::sandboxes::{SandboxRecord, ServerOwnership};
use super::usage::{Reservation, SpendHold};
use super::{Index, Item, Page, Store, StoreError, builder_error, n, put_new, s, schema, to_item};

/// Attempts of one conditional write whose outcome was unclear (throttled, reply lost).
const WRITE_ATTEMPTS: u32 = 3;

/// Where an order is. In flight: [`OrderState::Claimed`], [`OrderState::Settling`],
/// [`OrderState::Settled`], [`OrderState::Creating`]; the others are final (a credit can still
/// be redeemed or refunded).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum OrderState {
    /// Claimed by a request; nothing charged yet; verify and settle come next.
    Claimed,
    /// Settlement is about to be, or was, requested; an unclear outcome is resolved by the
    /// chain's evidence of the transfer (`x402::chain`).
    Settling,
    /// Paid; the server is created (or adopted) next.
    Settled,
    /// A create was sent to the provider (`createAttempts` counts them); the project is
    /// searched for the order's tagged server before anything else.
    Creating,
    /// Paid and provisioned: the server is recorded as its owner's.
    Provisioned,
    /// Paid, nothing provisioned: a credit its owner can redeem once.
    Credited,
    /// Refused (facilitator verify, or the authorization spent elsewhere); nothing charged.
    Rejected,
    /// The authorization was never used and has expired; nothing charged.
    Expired,
    /// A credit an operator is refunding: locked (no longer redeemable) before the payout.
    Refunding,
    /// A credit an operator refunded.
    Refunded,
    /// Its transfer was reorganised away and the authorization cancelled or used elsewhere
    /// before the chain called the transfer final (`domain::billing::finality`): nothing was
    /// paid after all, and what it bought stops (a server's paid time is taken back).
    Reversed,
}

impl OrderState {
    /// Every state.
    pub const ALL: [OrderState; 11] = [
        OrderState::Claimed,
        OrderState::Settling,
        OrderState::Settled,
        OrderState::Creating,
        OrderState::Provisioned,
        OrderState::Credited,
        OrderState::Rejected,
        OrderState::Expired,
        OrderState::Refunding,
        OrderState::Refunded,
        OrderState::Reversed,
    ];
    /// The states the reconciler drives to a final one.
    pub const IN_FLIGHT: [OrderState; 4] = [
        OrderState::Claimed,
        OrderState::Settling,
        OrderState::Settled,
        OrderState::Creating,
    ];

    /// The wire name (`claimed`, `settling`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            OrderState::Claimed => "claimed",
            OrderState::Settling => "settling",
            OrderState::Settled => "settled",
            OrderState::Creating => "creating",
            OrderState::Provisioned => "provisioned",
            OrderState::Credited => "credited",
            OrderState::Rejected => "rejected",
            OrderState::Expired => "expired",
            OrderState::Refunding => "refunding",
            OrderState::Refunded => "refunded",
            OrderState::Reversed => "reversed",
        }
    }

    /// From the wire name.
    pub fn parse(value: &str) -> Option<Self> {
        OrderState::ALL.into_iter().find(|s| s.as_str() == value)
    }

    /// Whether money may have moved (or did): every state from `settling` on but `rejected`,
    /// `expired` and `reversed`.
    pub fn maybe_charged(self) -> bool {
        match self {
            OrderState::Claimed
            | OrderState::Rejected
            | OrderState::Expired
            | OrderState::Reversed => false,
            OrderState::Settling
            | OrderState::Settled
            | OrderState::Creating
            | OrderState::Provisioned
            | OrderState::Credited
            | OrderState::Refunding
            | OrderState::Refunded => true,
        }
    }

    /// Whether the reconciler still has work on it.
    pub fn in_flight(self) -> bool {
        OrderState::IN_FLIGHT.contains(&self)
    }
}

impl std::fmt::Display for OrderState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A payment and the order it pays for, as recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Order {
    /// The payment key: `<CAIP-2 network>/<asset>/<payer>/<nonce>`, all lowercase (a
    /// remainder's with `#<n>`).
    pub id: PaymentKey,
    /// `ord_<32 hex>`: the order's own id, on every log line of the paid path.
    pub order_id: String,
    /// Where the order is.
    pub state: OrderState,
    /// What it buys.
    #[serde(default)]
    pub kind: OrderKind,
    /// Bumped by every write; every conditional write names the value it read.
    pub seq: u64,
    /// The sequence of the payment's last event (`crate::events`; 0: none yet).
    #[serde(default)]
    pub event_seq: u64,
    /// The attempt (a request or a reconciler pass) that holds the order.
    pub attempt: String,
    /// Epoch seconds until which `attempt` holds the order.
    pub lease_until: i64,
    /// x402 version of the header it came in (1 or 2).
    pub version: u8,
    /// CAIP-2 network.
    pub network: String,
    /// USDC atomic units, decimal string.
    pub amount: String,
    /// The payer, lowercase.
    pub payer: String,
    /// The EIP-3009 nonce, lowercase hex.
    pub nonce: String,
    /// The authorization's `validBefore`, epoch seconds.
    pub valid_before: u64,
    /// The owner who sent it.
    pub owner: Owner,
    /// The provider project the server is provisioned in.
    pub project_id: u64,
    /// SHA-256 of the owner, project and request (see `payments::fingerprint`).
    pub fingerprint: String,
    /// The validated provisioning request, JSON.
    pub request: String,
    /// The payment payload as received, JSON (settled again with it when needed).
    pub payload: String,
    /// The payment requirements it pays, JSON.
    pub requirements: String,
    /// The sandbox fixed at claim time: tagged on the server, the key of every create.
    pub sandbox_id: String,
    /// When the order was bound to its request (claim, or a credit's redemption), RFC 3339:
    /// the order's deadline counts from here.
    pub bound_at: crate::time::Timestamp,
    /// Creates sent to the provider so far.
    #[serde(default)]
    pub create_attempts: u32,
    /// Epoch seconds at which the last create whose outcome is unknown was announced; 0 when
    /// no create can still land (none sent, or the last one definitely refused).
    #[serde(default)]
    pub create_sent_at: i64,
    /// How many of its servers were deleted undelivered (not ready by their deadline): from
    /// the second, its credit can only be refunded, never redeemed again.
    #[serde(default)]
    pub undelivered: u32,
    /// Why it was refused, credited or refunded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The settle response, JSON (the facilitator's, or made from the chain's answer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settle_response: Option<String>,
    /// Settlement transaction hash, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transaction: Option<String>,
    /// The server it paid for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_id: Option<u64>,
    /// The server object answered at provisioning, JSON, without its credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// What the operator recorded when refunding a credit (a transaction hash or a note).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refund: Option<String>,
    /// Where its amount was reserved against the paying key's spend (absent: a session's
    /// payment): given back if the payment ends without a charge.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spend: Option<SpendHold>,
    /// The payment key of the credit that kept what a cheaper redemption left of this order's
    /// amount ([`PaymentKey::remainder`]); a replay of that payment follows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remainder: Option<PaymentKey>,
    /// When the facilitator's refusal (`reason`, while the order is open) was recorded, epoch
    /// seconds: a node's "unused" stands against it only from a block no older.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused_at: Option<i64>,
    /// The block through which a search of the chain for its authorization's use found nothing
    /// (`outside::x402::chain::Authorization::scanned`): the next search starts near it. A hint,
    /// written beside the order's state ([`Store::scanned_through`]), never a condition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scanned_to: Option<u64>,
    /// RFC 3339.
    pub created_at: crate::time::Timestamp,
    /// RFC 3339.
    pub updated_at: crate::time::Timestamp,
}

/// Fields a write sets besides state, seq, attempt and lease.
#[derive(Debug, Clone, Default)]
pub struct OrderChanges {
    /// Refusal, credit or refund reason.
    pub reason: Option<String>,
    /// Settle response JSON.
    pub settle_response: Option<String>,
    /// Transaction hash.
    pub transaction: Option<String>,
    /// Server id.
    pub server_id: Option<u64>,
    /// Server object JSON.
    pub server: Option<String>,
    /// Creates sent so far.
    pub create_attempts: Option<u32>,
    /// When the last create was announced (epoch seconds; 0: none can land).
    pub create_sent_at: Option<i64>,
    /// Servers of the order deleted undelivered so far.
    pub undelivered: Option<u32>,
    /// When the facilitator's refusal was recorded (epoch seconds).
    pub refused_at: Option<i64>,
    /// Operator's refund record.
    pub refund: Option<String>,
    /// A redeemed credit's new request: fingerprint, request JSON, project, sandbox.
    pub rebind: Option<Rebind>,
    /// A cheaper redemption: the order's amount becomes the redeeming request's price (USDC
    /// atomic units, decimal), and the remainder's key is recorded.
    pub split: Option<(String, PaymentKey)>,
    /// The payment's events, written in the same transaction (numbered from the order's
    /// `eventSeq` as read, which the order's own `seq` condition keeps current).
    pub outbox: Option<Outbox>,
    /// Follow its transfer from then on (epoch seconds: when first due): on `gsi3`'s
    /// [`Partition::Transfers`] until [`Store::follow_transfer`] stops it (`crate::transfers`).
    pub follow: Option<i64>,
    /// Stop following its transfer (it was reversed).
    pub unfollow: bool,
    /// When the item lapses (epoch seconds, the table's TTL): an order that ended with
    /// nothing charged (`rejected`, `expired`) is kept a while past its authorization's window,
    /// then goes, so that payments that never pay do not pile up.
    pub expires: Option<i64>,
}

/// A credit rebound to a corrected request.
#[derive(Debug, Clone)]
pub struct Rebind {
    /// The new request's fingerprint.
    pub fingerprint: String,
    /// The new request, JSON.
    pub request: String,
    /// The new project.
    pub project_id: u64,
    /// The new sandbox id.
    pub sandbox_id: String,
    /// When it was rebound, RFC 3339.
    pub bound_at: crate::time::Timestamp,
    /// What it buys now.
    pub kind: OrderKind,
}

/// What a write does to other items in the same transaction.
#[derive(Debug, Clone, Default)]
pub struct SideWrites {
    /// A new sandbox (`attribute_not_exists`).
    pub new_sandbox: Option<SandboxRecord>,
    /// A sandbox's new status (and, once provisioned, its server).
    pub sandbox_status: Option<SandboxStatus>,
    /// A server's ownership record (`attribute_not_exists`).
    pub ownership: Option<ServerOwnership>,
    /// What the paying key reserves (a redeemed credit's new server), conditional on its
    /// limits: when one fails, nothing is written ([`Advance::Blocked`]).
    pub reserve: Option<Reservation>,
    /// The order's reserved spend given back (it ends without a charge).
    pub release: bool,
    /// The credit a cheaper redemption leaves (`attribute_not_exists`), with the `split` of
    /// [`OrderChanges`].
    pub remainder: Option<Order>,
}

/// The outcome of a claim.
#[derive(Debug, Clone, PartialEq)]
pub enum Claim {
    /// This attempt holds the new order.
    New(Box<Order>),
    /// The payment was already recorded, as this.
    Existing(Box<Order>),
    /// The reservation went over a limit of the key (another request used it meanwhile):
    /// nothing was written.
    OverLimit,
}

/// The outcome of a conditional write on an order.
#[derive(Debug, Clone, PartialEq)]
pub enum Advance {
    /// Applied (by this call or by an earlier identical one whose reply was lost): the order
    /// as written.
    Done(Box<Order>),
    /// Another attempt moved the order first: the order as it is now (`None` if it vanished).
    Lost(Option<Box<Order>>),
    /// The order is as read, but a write that goes with it found its item moved (e.g. the lease
    /// of a sandbox): nothing was written; read that item again.
    Blocked,
}

/// What an order buys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OrderKind {
    /// A new server (the request is a provisioning request).
    #[default]
    Provision,
    /// More paid time for a server (the request is `{serverId, periods}`).
    Renewal,
    /// A server moved to a bigger plan for the paid time it has left (the request is
    /// `{serverId, plan, from, paidUntil, periodAmount}`: `periodAmount`, one period of the plan
    /// it moves to as priced, absent on orders bound before it was recorded).
    Resize,
}

impl OrderKind {
    /// Its name as stored (`provision`, `renewal`, `resize`).
    pub fn as_str(self) -> &'static str {
        match self {
            OrderKind::Provision => "provision",
            OrderKind::Renewal => "renewal",
            OrderKind::Resize => "resize",
        }
    }
}

pub(crate) fn pk(id: &str) -> String {
    Partition::Payment.key(id)
}

pub(crate) const ORDER_SK: &str = "PAYMENT";

fn state_keys(state: OrderState, updated_at: crate::time::Timestamp, id: &str) -> (String, String) {
    (
        Partition::PaymentState.key(state),
        format!("PAYMENT#{updated_at}#{id}"),
    )
}

/// A `ClientRequestToken` (at most 36 characters) for the write of `order` at `seq` by
/// `attempt` made of `items`: the same on every identical retry of that write, different for
/// any other — other items included. DynamoDB answers a token reused with other parameters
/// within ten minutes `IdempotentParameterMismatchException` (moto does not check; the tests'
/// DynamoDB hook does, as DynamoDB would): a write re-made from the same order as read (a lease
/// read again, a redemption retried) is another write, with a token of its own.
pub(crate) fn request_token(
    order: &str,
    seq: u64,
    attempt: &str,
    items: &[TransactWriteItem],
) -> String {
    let mut hasher = Sha256::new();
    hasher.update(format!("{order}\n{seq}\n{attempt}\n").as_bytes());
    // The items' full description (every table, key, condition and value), as built once for
    // all the retries of this write.
    hasher.update(format!("{items:?}").as_bytes());
    hex::encode(&hasher.finalize()[..16])
}

impl Store {
    /// Claims a payment for `order` (held by `order.attempt`) and writes its new sandbox (status
    /// `provisioning`; a renewal has its server's already) and its `reservation` against the
    /// paying key, and marks the owner's `approval` of the request used, if it has one, in one
    /// transaction. [`Claim::Existing`] with the stored order when the payment was already
    /// recorded by another attempt; a claim of ours whose reply was lost is recognised by its
    /// attempt id; [`Claim::OverLimit`] when the payment is not recorded and the reservation or
    /// the approval failed its condition (the approval used or lapsed meanwhile).
    pub async fn claim_order(
        &self,
        order: &Order,
        sandbox: Option<&SandboxRecord>,
        reservation: Option<&Reservation>,
        approval: Option<&super::approvals::ApprovalUse>,
    ) -> Result<Claim, StoreError> {
        let item = order_item(order)?;
        let reserved = match reservation {
            Some(reservation) => self.reservation_items(reservation)?,
            None => Vec::new(),
        };
        let mut items = vec![put_new(&self.table, item)?];
        if let Some(sandbox) = sandbox {
            items.push(put_new(
                &self.table,
                super::sandboxes::sandbox_item(sandbox)?,
            )?);
        }
        items.extend(reserved);
        if let Some(approval) = approval {
            items.push(approval.item(&self.table)?);
        }
        let token = request_token(order.id.as_str(), order.seq, &order.attempt, &items);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let items = items.clone();
            let result = self
                .client
                .transact_write_items()
                .client_request_token(&token)
                .set_transact_items(Some(items))
                .send()
                .await
                .map_err(StoreError::from_sdk);
            match result {
                Ok(_) => return Ok(Claim::New(Box::new(order.clone()))),
                Err(StoreError::ConditionFailed) => {
                    // The order's put is the only other condition (a new sandbox's id is new).
                    let Some(stored) = self.order(&order.id).await? else {
                        return Ok(Claim::OverLimit);
                    };
                    return Ok(
                        if stored.attempt == order.attempt && stored.seq >= order.seq {
                            Claim::New(Box::new(stored))
                        } else {
                            Claim::Existing(Box::new(stored))
                        },
                    );
                }
                Err(err) if attempt < WRITE_ATTEMPTS => {
                    tracing::warn!(payment = %order.id, error = %err, "claim unclear; retrying it");
                    tokio::time::sleep(Duration::from_millis(50 * u64::from(attempt))).await;
                }
                Err(err) => return Err(err),
            }
        }
    }

    /// The order of payment `id` (strongly consistent).
    pub async fn order(&self, id: &PaymentKey) -> Result<Option<Order>, StoreError> {
        self.get(pk(id.as_str()), ORDER_SK).await
    }

    /// Takes over `order` (as read) for `attempt` until `lease_until`, if its lease has expired
    /// at `now` (epoch seconds) and nobody wrote it since it was read. [`Advance::Lost`] when
    /// it cannot be taken (held by a live attempt, or moved).
    pub async fn take_order(
        &self,
        order: &Order,
        attempt: &str,
        lease_until: i64,
        now: i64,
        at: crate::time::Timestamp,
    ) -> Result<Advance, StoreError> {
        let taken = Order {
            seq: order.seq + 1,
            attempt: attempt.to_owned(),
            lease_until,
            updated_at: at,
            ..order.clone()
        };
        self.write_order(
            order,
            taken,
            OrderChanges::default(),
            SideWrites::default(),
            Some(now),
        )
        .await
    }

    /// Moves `order` (as read, held by its `attempt`) to state `to` with `changes` and
    /// `side` writes, holding it until `lease_until`, in one transaction conditional on the
    /// order's state, seq and attempt. [`Advance::Lost`] when another attempt moved it first.
    pub async fn advance_order(
        &self,
        order: &Order,
        to: OrderState,
        changes: OrderChanges,
        side: SideWrites,
        lease_until: i64,
        at: crate::time::Timestamp,
    ) -> Result<Advance, StoreError> {
        let mut next = Order {
            state: to,
            seq: order.seq + 1,
            lease_until,
            updated_at: at,
            ..order.clone()
        };
        apply(&mut next, &changes);
        self.write_order(order, next, changes, side, None).await
    }

    /// One conditional transaction from `from` to `next`; see the module docs for retries.
    /// With `take_at`, the condition is "lease expired at that time" instead of "held by the
    /// same attempt".
    async fn write_order(
        &self,
        from: &Order,
        next: Order,
        changes: OrderChanges,
        side: SideWrites,
        take_at: Option<i64>,
    ) -> Result<Advance, StoreError> {
        let items = self.order_transaction(from, &next, &changes, &side, take_at)?;
        let token = request_token(from.id.as_str(), next.seq, &next.attempt, &items);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let result = self
                .client
                .transact_write_items()
                .client_request_token(&token)
                .set_transact_items(Some(items.clone()))
                .send()
                .await
                .map_err(StoreError::from_sdk);
            match result {
                Ok(_) => return Ok(Advance::Done(Box::new(next))),
                Err(StoreError::ConditionFailed) => {
                    let now = self.order(&from.id).await?;
                    return Ok(match now {
                        Some(now)
                            if now.seq == next.seq
                                && now.attempt == next.attempt
                                && now.state == next.state =>
                        {
                            Advance::Done(Box::new(now))
                        }
                        Some(now)
                            if now.seq == from.seq
                                && now.attempt == from.attempt
                                && now.state == from.state =>
                        {
                            Advance::Blocked
                        }
                        other => Advance::Lost(other.map(Box::new)),
                    });
                }
                Err(err) if attempt < WRITE_ATTEMPTS => {
                    tracing::warn!(
                        payment = %from.id,
                        to = %next.state,
                        error = %err,
                        "order write unclear; retrying it identically"
                    );
                    tokio::time::sleep(Duration::from_millis(50 * u64::from(attempt))).await;
                }
                Err(err) => return Err(err),
            }
        }
    }

    fn order_transaction(
        &self,
        from: &Order,
        next: &Order,
        changes: &OrderChanges,
        side: &SideWrites,
        take_at: Option<i64>,
    ) -> Result<Vec<TransactWriteItem>, StoreError> {
        let (gpk, gsk) = state_keys(next.state, next.updated_at, next.id.as_str());
        let mut sets = vec![
            "#state = :to",
            "#seq = :next",
            "#attempt = :attempt",
            "#leaseUntil = :lease",
            "#updatedAt = :at",
            "#gpk = :gpk",
            "#gsk = :gsk",
        ]
        .into_iter()
        .map(str::to_owned)
        .collect::<Vec<_>>();
        let mut update = Update::builder()
            .table_name(&self.table)
            .key(schema::PK, s(pk(from.id.as_str())))
            .key(schema::SK, s(ORDER_SK))
            .expression_attribute_names("#state", "state")
            .expression_attribute_names("#seq", "seq")
            .expression_attribute_names("#attempt", "attempt")
            .expression_attribute_names("#leaseUntil", "leaseUntil")
            .expression_attribute_names("#updatedAt", "updatedAt")
            .expression_attribute_names("#gpk", schema::GSI2_PK)
            .expression_attribute_names("#gsk", schema::GSI2_SK)
            .expression_attribute_values(":from", s(from.state.as_str()))
            .expression_attribute_values(":to", s(next.state.as_str()))
            .expression_attribute_values(":seq", n(from.seq))
            .expression_attribute_values(":next", n(next.seq))
            .expression_attribute_values(":attempt", s(&next.attempt))
            .expression_attribute_values(":lease", n(next.lease_until))
            .expression_attribute_values(":at", s(next.updated_at))
            .expression_attribute_values(":gpk", s(gpk))
            .expression_attribute_values(":gsk", s(gsk));
        update = match take_at {
            Some(now) => update
                .condition_expression("#state = :from AND #seq = :seq AND #leaseUntil < :now")
                .expression_attribute_values(":now", n(now)),
            None => update
                .condition_expression("#state = :from AND #seq = :seq AND #attempt = :holder")
                .expression_attribute_values(":holder", s(&from.attempt)),
        };
        let (strings, numbers) = changed_fields(changes);
        let values = strings
            .into_iter()
            .filter_map(|(name, v)| Some((name, s(v?))))
            .chain(
                numbers
                    .into_iter()
                    .filter_map(|(name, v)| Some((name, n(v?)))),
            );
        for (name, value) in values {
            sets.push(format!("#{name} = :{name}"));
            update = update
                .expression_attribute_names(format!("#{name}"), name)
                .expression_attribute_values(format!(":{name}"), value);
        }
        let (update, remove) =
            super::transfers::clauses(update, changes, next.id.as_str(), &mut sets);
        let update = update
            .update_expression(format!("SET {}{remove}", sets.join(", ")))
            .build()
            .map_err(builder_error)?;
        let mut items = vec![TransactWriteItem::builder().update(update).build()];
        if let Some(outbox) = &changes.outbox {
            items.extend(outbox.puts(&self.table)?);
        }
        items.extend(self.side_items(from, next, side)?);
        Ok(items)
    }

    /// The items a transition writes beside its order, in the same transaction: a new sandbox,
    /// a sandbox's change, an ownership, a remainder's credit, a spend reservation or its
    /// release.
    fn side_items(
        &self,
        from: &Order,
        next: &Order,
        side: &SideWrites,
    ) -> Result<Vec<TransactWriteItem>, StoreError> {
        let mut items = Vec::new();
        if let Some(sandbox) = &side.new_sandbox {
            items.push(put_new(
                &self.table,
                super::sandboxes::sandbox_item(sandbox)?,
            )?);
        }
        if let Some(change) = &side.sandbox_status {
            items.extend(self.sandbox_change_items(change, next.updated_at)?);
        }
        if let Some(ownership) = &side.ownership {
            let item = super::sandboxes::ownership_item(ownership)?;
            items.push(
                TransactWriteItem::builder()
                    .put(
                        Put::builder()
                            .table_name(&self.table)
                            .set_item(Some(item))
                            .condition_expression("attribute_not_exists(#pk)")
                            .expression_attribute_names("#pk", schema::PK)
                            .build()
                            .map_err(builder_error)?,
                    )
                    .build(),
            );
        }
        if let Some(remainder) = &side.remainder {
            items.push(put_new(&self.table, order_item(remainder)?)?);
        }
        if let Some(reservation) = &side.reserve {
            items.extend(self.reservation_items(reservation)?);
        }
        if side.release
            && let Some(hold) = &from.spend
        {
            let amount = from.amount.parse().unwrap_or(0);
            items.extend(self.release_items(hold, amount, next.updated_at)?);
        }
        Ok(items)
    }

    /// One page of the orders in `state`, most recently changed first (GSI2, eventually
    /// consistent).
    pub async fn orders_in_state(
        &self,
        state: OrderState,
        limit: i32,
        cursor: Option<&str>,
    ) -> Result<Page<Order>, StoreError> {
        self.by_state(state, limit, cursor, false).await
    }

    /// One page of the orders in `state`, least recently changed first (GSI2, eventually
    /// consistent): the reconciler's order, so that old orders are never starved.
    pub async fn oldest_in_state(
        &self,
        state: OrderState,
        limit: i32,
        cursor: Option<&str>,
    ) -> Result<Page<Order>, StoreError> {
        self.by_state(state, limit, cursor, true).await
    }

    /// One page of the orders in `state` (GSI2, eventually consistent), either way.
    async fn by_state(
        &self,
        state: OrderState,
        limit: i32,
        cursor: Option<&str>,
        oldest_first: bool,
    ) -> Result<Page<Order>, StoreError> {
        let partition = Partition::PaymentState.key(state);
        self.query_index(
            Index::Gsi2,
            &partition,
            "PAYMENT#",
            limit,
            cursor,
            oldest_first,
        )
        .await
    }

    /// One page of `owner`'s payments, newest first (GSI1, eventually consistent).
    pub async fn orders_of(
        &self,
        owner: &Owner,
        limit: i32,
        cursor: Option<&str>,
    ) -> Result<Page<Order>, StoreError> {
        self.query_gsi1(
            &super::keys::owner_partition(owner),
            "PAYMENT#",
            limit,
            cursor,
        )
        .await
    }
}

fn apply(order: &mut Order, changes: &OrderChanges) {
    let set = |field: &mut Option<String>, value: &Option<String>| {
        if value.is_some() {
            field.clone_from(value);
        }
    };
    set(&mut order.reason, &changes.reason);
    set(&mut order.settle_response, &changes.settle_response);
    set(&mut order.transaction, &changes.transaction);
    set(&mut order.server, &changes.server);
    set(&mut order.refund, &changes.refund);
    if let Some(id) = changes.server_id {
        order.server_id = Some(id);
    }
    if let Some(attempts) = changes.create_attempts {
        order.create_attempts = attempts;
    }
    if let Some(at) = changes.create_sent_at {
        order.create_sent_at = at;
    }
    if let Some(count) = changes.undelivered {
        order.undelivered = count;
    }
    if let Some(at) = changes.refused_at {
        order.refused_at = Some(at);
    }
    if let Some(outbox) = &changes.outbox {
        order.event_seq = outbox.seq();
    }
    if let Some((amount, remainder)) = &changes.split {
        order.amount.clone_from(amount);
        order.remainder = Some(remainder.clone());
    }
    if let Some(rebind) = &changes.rebind {
        order.fingerprint.clone_from(&rebind.fingerprint);
        order.request.clone_from(&rebind.request);
        order.project_id = rebind.project_id;
        order.sandbox_id.clone_from(&rebind.sandbox_id);
        order.bound_at.clone_from(&rebind.bound_at);
        order.kind = rebind.kind;
    }
}

/// The item of an order, as [`Store::claim_order`] writes it.
fn order_item(order: &Order) -> Result<Item, StoreError> {
    let (gpk, gsk) = state_keys(order.state, order.updated_at, order.id.as_str());
    to_item(
        order,
        &[
            (schema::PK, pk(order.id.as_str())),
            (schema::SK, ORDER_SK.into()),
            (schema::GSI1_PK, super::keys::owner_partition(&order.owner)),
            (
                schema::GSI1_SK,
                format!("PAYMENT#{}#{}", order.created_at, order.id),
            ),
            (schema::GSI2_PK, gpk),
            (schema::GSI2_SK, gsk),
        ],
    )
}

/// The fields a transition sets on its order besides its state: strings and numbers, each
/// `None` when unchanged.
#[allow(clippy::type_complexity)]
fn changed_fields(
    changes: &OrderChanges,
) -> (
    Vec<(&'static str, Option<String>)>,
    Vec<(&'static str, Option<u64>)>,
) {
    let mut strings: Vec<(&'static str, Option<String>)> = vec![
        ("reason", changes.reason.clone()),
        ("settleResponse", changes.settle_response.clone()),
        ("transaction", changes.transaction.clone()),
        ("server", changes.server.clone()),
        ("refund", changes.refund.clone()),
        ("amount", changes.split.as_ref().map(|s| s.0.clone())),
        ("remainder", changes.split.as_ref().map(|s| s.1.to_string())),
    ];
    let mut numbers: Vec<(&'static str, Option<u64>)> = vec![
        ("serverId", changes.server_id),
        ("createAttempts", changes.create_attempts.map(u64::from)),
        (
            "createSentAt",
            changes.create_sent_at.map(|t| t.max(0) as u64),
        ),
        ("undelivered", changes.undelivered.map(u64::from)),
        ("refusedAt", changes.refused_at.map(|t| t.max(0) as u64)),
        ("eventSeq", changes.outbox.as_ref().map(Outbox::seq)),
        (
            schema::TTL_ATTRIBUTE,
            changes.expires.map(|t| t.max(0) as u64),
        ),
    ];
    if let Some(rebind) = &changes.rebind {
        strings.push(("fingerprint", Some(rebind.fingerprint.clone())));
        strings.push(("request", Some(rebind.request.clone())));
        strings.push(("sandboxId", Some(rebind.sandbox_id.clone())));
        strings.push(("boundAt", Some(rebind.bound_at.to_string())));
        strings.push(("kind", Some(rebind.kind.as_str().to_owned())));
        numbers.push(("projectId", Some(rebind.project_id)));
    }
    (strings, numbers)
}
