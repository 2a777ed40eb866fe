//! The payment ledger (design brief §3, Money): one item per payment, keyed on
//! (network, asset, payer, nonce) — the identity of an EIP-3009 authorization — and bound to a
//! fingerprint of the request that first carried it.
//!
//! Item: `pk = PAYMENT#<network>/<asset>/<payer>/<nonce>`, `sk = PAYMENT`; GSI1
//! `gsi1pk = PAYSTATE#<state>`, `gsi1sk = PAYMENT#<updatedAt>#<id>` so operators list payments
//! by state.
//!
//! States: [`CLAIMED`] (claimed by one request; verify and settle in progress, or left by a
//! facilitator timeout for reconciliation) → [`SETTLED`] (paid; provisioning in progress) →
//! [`PROVISIONED`]; or [`SETTLED_UNPROVISIONED`] (paid, provisioning failed: a retry with the
//! same payment takes it back to [`SETTLED`] and provisions, without a new charge); or
//! [`REJECTED`] (the facilitator refused it). Every transition is a conditional write on the
//! current state, so only one request ever moves a payment forward.

use aws_sdk_dynamodb::types::ReturnValue;
use serde::{Deserialize, Serialize};

use super::{Page, Store, StoreError, s, schema, to_item};
use crate::error::ApiError;

/// Claimed by a request; not yet settled.
pub const CLAIMED: &str = "claimed";
/// Settled; provisioning in progress.
pub const SETTLED: &str = "settled";
/// Settled and provisioned.
pub const PROVISIONED: &str = "provisioned";
/// Settled, but provisioning failed; a retry with the same payment provisions.
pub const SETTLED_UNPROVISIONED: &str = "settled-unprovisioned";
/// Refused by the facilitator.
pub const REJECTED: &str = "rejected";
/// Every state, for validation of operator input.
pub const STATES: [&str; 5] = [
    CLAIMED,
    SETTLED,
    PROVISIONED,
    SETTLED_UNPROVISIONED,
    REJECTED,
];

/// A payment as recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PaymentRecord {
    /// `<CAIP-2 network>/<asset>/<payer>/<nonce>`, all lowercase.
    pub id: String,
    /// x402 version of the header it came in (1 or 2).
    pub version: u8,
    /// USDC atomic units, decimal string.
    pub amount: String,
    /// The payer, lowercase.
    pub payer: String,
    /// The owner who sent it.
    pub owner: String,
    /// The provider project it pays a server in.
    pub project_id: u64,
    /// SHA-256 of the owner, project and request body (see `payments::fingerprint`).
    pub fingerprint: String,
    /// One of [`STATES`].
    pub state: String,
    /// Why it was rejected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The facilitator's settle response, JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settle_response: Option<String>,
    /// Settlement transaction hash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transaction: Option<String>,
    /// The server it paid for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_id: Option<u64>,
    /// The sandbox of that server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_id: Option<String>,
    /// The server object answered at provisioning, JSON (returned again to a retry).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// RFC 3339.
    pub created_at: String,
    /// RFC 3339.
    pub updated_at: String,
}

/// Fields a transition sets besides the state.
#[derive(Debug, Clone, Default)]
pub struct PaymentUpdate {
    /// Rejection reason.
    pub reason: Option<String>,
    /// Settle response JSON.
    pub settle_response: Option<String>,
    /// Transaction hash.
    pub transaction: Option<String>,
    /// Server id.
    pub server_id: Option<u64>,
    /// Sandbox id.
    pub sandbox_id: Option<String>,
    /// Server object JSON.
    pub server: Option<String>,
}

/// The outcome of a claim.
#[derive(Debug, Clone, PartialEq)]
pub enum Claim {
    /// This request holds the payment now.
    New,
    /// The payment was already recorded, as this.
    Existing(Box<PaymentRecord>),
}

fn pk(id: &str) -> String {
    format!("PAYMENT#{id}")
}

fn state_keys(state: &str, updated_at: &str, id: &str) -> (String, String) {
    (
        format!("PAYSTATE#{state}"),
        format!("PAYMENT#{updated_at}#{id}"),
    )
}

impl Store {
    /// Claims a payment: a conditional put on its id. [`Claim::Existing`] with the stored record
    /// (read strongly consistent) when it was already claimed.
    pub async fn claim_payment(&self, record: &PaymentRecord) -> Result<Claim, StoreError> {
        let (gpk, gsk) = state_keys(&record.state, &record.updated_at, &record.id);
        let item = to_item(
            record,
            &[
                (schema::PK, pk(&record.id)),
                (schema::SK, "PAYMENT".into()),
                (schema::GSI1_PK, gpk),
                (schema::GSI1_SK, gsk),
            ],
        )?;
        match self.insert(item).await {
            Ok(_) => Ok(Claim::New),
            Err(StoreError::ConditionFailed) => self
                .payment(&record.id)
                .await?
                .map(|record| Claim::Existing(Box::new(record)))
                .ok_or_else(|| StoreError::Backend("a claimed payment vanished".into())),
            Err(err) => Err(err),
        }
    }

    /// The payment `id` (strongly consistent).
    pub async fn payment(&self, id: &str) -> Result<Option<PaymentRecord>, StoreError> {
        self.get(pk(id), "PAYMENT").await
    }

    /// Moves payment `id` from state `from` to `to` at `at`, setting `update`'s fields. Returns
    /// the record after the write, or `None` when the payment was not in state `from`.
    pub async fn transition_payment(
        &self,
        id: &str,
        from: &str,
        to: &str,
        update: PaymentUpdate,
        at: &str,
    ) -> Result<Option<PaymentRecord>, StoreError> {
        let (gpk, gsk) = state_keys(to, at, id);
        let mut sets = vec![
            "#state = :to".to_owned(),
            "#updatedAt = :at".to_owned(),
            "#gpk = :gpk".to_owned(),
            "#gsk = :gsk".to_owned(),
        ];
        let mut request = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(schema::PK, s(pk(id)))
            .key(schema::SK, s("PAYMENT"))
            .condition_expression("#state = :from")
            .expression_attribute_names("#state", "state")
            .expression_attribute_names("#updatedAt", "updatedAt")
            .expression_attribute_names("#gpk", schema::GSI1_PK)
            .expression_attribute_names("#gsk", schema::GSI1_SK)
            .expression_attribute_values(":from", s(from))
            .expression_attribute_values(":to", s(to))
            .expression_attribute_values(":at", s(at))
            .expression_attribute_values(":gpk", s(gpk))
            .expression_attribute_values(":gsk", s(gsk))
            .return_values(ReturnValue::AllNew);
        let strings = [
            ("reason", update.reason),
            ("settleResponse", update.settle_response),
            ("transaction", update.transaction),
            ("sandboxId", update.sandbox_id),
            ("server", update.server),
        ];
        for (name, value) in strings {
            if let Some(value) = value {
                sets.push(format!("#{name} = :{name}"));
                request = request
                    .expression_attribute_names(format!("#{name}"), name)
                    .expression_attribute_values(format!(":{name}"), s(value));
            }
        }
        if let Some(server_id) = update.server_id {
            sets.push("#serverId = :serverId".into());
            request = request
                .expression_attribute_names("#serverId", "serverId")
                .expression_attribute_values(
                    ":serverId",
                    aws_sdk_dynamodb::types::AttributeValue::N(server_id.to_string()),
                );
        }
        let result = request
            .update_expression(format!("SET {}", sets.join(", ")))
            .send()
            .await
            .map_err(StoreError::from_sdk);
        match result {
            Ok(out) => out.attributes.map(super::from_item).transpose(),
            Err(StoreError::ConditionFailed) => Ok(None),
            Err(err) => Err(err),
        }
    }

    /// One page of the payments in `state`, most recently changed first (GSI1, eventually
    /// consistent).
    pub async fn payments_in_state(
        &self,
        state: &str,
        limit: i32,
        cursor: Option<&str>,
    ) -> Result<Page<PaymentRecord>, ApiError> {
        self.query_gsi1(&format!("PAYSTATE#{state}"), "PAYMENT#", limit, cursor)
            .await
    }
}
