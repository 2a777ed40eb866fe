//! Paid provisioning with x402 (design brief §3, Money), in this order: offline checks
//! ([`x402::verify`]) → claim the payment in the ledger, bound to a fingerprint of the request
//! ([`crate::store::payments`]) → facilitator verify and settle → provision → record ownership →
//! 201 with the settle response.
//!
//! Never provisioned on an unsettled payment; never settled twice (the claim is a conditional
//! write, so one request holds a payment); the same payment on the same request returns the same
//! outcome (the stored server, or the stored refusal); on a different request, 409. A request
//! that finds its payment in flight waits up to `X402_WAIT_SECONDS` for the outcome. If
//! provisioning fails after settlement the payment becomes `settled-unprovisioned`, and a retry
//! with it provisions without a new charge. A facilitator timeout or a settlement still pending
//! after one retry leaves the payment `claimed` for reconciliation (`svcctl payments`).

use lambda_http::http::HeaderMap;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::auth::Principal;
use crate::error::{ApiError, PaymentDemand};
use crate::pricing::Quote;
use crate::servers::{self, Provisioned, ValidProvisionRequest};
use crate::state::AppState;
use crate::store::payments::{
    CLAIMED, Claim, PROVISIONED, PaymentRecord, PaymentUpdate, REJECTED, SETTLED,
    SETTLED_UNPROVISIONED,
};
use crate::x402::facilitator::{Facilitator, FacilitatorError, Settlement};
use crate::x402::verify::{self, PaymentError, VerifiedPayment};
use crate::x402::{Offer, PAYMENT_SIGNATURE, SettleResponse, X_PAYMENT};

/// A payment header as received.
#[derive(Debug, Clone, PartialEq)]
pub struct PaymentHeader {
    /// 2 for `PAYMENT-SIGNATURE`, 1 for `X-PAYMENT`.
    pub version: u8,
    /// The base64 value.
    pub value: String,
}

impl PaymentHeader {
    /// The payment a request carries: `PAYMENT-SIGNATURE` (v2) if present, else `X-PAYMENT` (v1).
    pub fn from_headers(headers: &HeaderMap) -> Option<Self> {
        [(PAYMENT_SIGNATURE, 2), (X_PAYMENT, 1)]
            .iter()
            .find_map(|(name, version)| {
                headers
                    .get(*name)
                    .and_then(|v| v.to_str().ok())
                    .map(|value| PaymentHeader {
                        version: *version,
                        value: value.to_owned(),
                    })
            })
    }

    fn name(&self) -> &'static str {
        if self.version == 2 {
            PAYMENT_SIGNATURE
        } else {
            X_PAYMENT
        }
    }
}

/// The offer of this deployment for `quote` at `resource` (the request URL).
///
/// Errors: 503 when no treasury (`X402_PAY_TO`) is configured.
pub fn offer(state: &AppState, quote: &Quote, resource: &str) -> Result<Offer, ApiError> {
    let config = &state.config.payments;
    let pay_to = config.pay_to.clone().ok_or_else(|| {
        ApiError::Unavailable("paid plans are unavailable: payments are not configured".into())
    })?;
    Ok(Offer {
        network: config.network,
        pay_to,
        amount: crate::pricing::usdc_atomic(quote.monthly_cost_usd),
        max_timeout_seconds: config.max_timeout_seconds,
        resource: resource.to_owned(),
        description: format!("One month of a `{}` server", quote.plan),
    })
}

/// SHA-256 (hex) of the owner, the project and the validated request: what a payment is bound to.
pub fn fingerprint(owner: &str, project: u64, request: &ValidProvisionRequest) -> String {
    let body = serde_json::to_string(request).unwrap_or_default();
    hex::encode(Sha256::digest(
        format!("{owner}\n{project}\n{body}").as_bytes(),
    ))
}

/// Takes payment for a paid plan and provisions (see the module docs).
///
/// Errors: 402 without a payment, or with one that fails a check or is refused by the
/// facilitator (with the reason); 400 for a header that cannot be decoded; 409 for a payment
/// used on another request, or still in flight after the wait; 502/504 facilitator failures;
/// the provider's errors.
pub async fn pay_and_provision(
    state: &AppState,
    principal: &Principal,
    project: u64,
    request: ValidProvisionRequest,
    quote: Quote,
    resource: &str,
    header: Option<PaymentHeader>,
) -> Result<Provisioned, ApiError> {
    let offer = offer(state, &quote, resource)?;
    let demand = |reason: &str| {
        ApiError::PaymentRequired(Box::new(PaymentDemand {
            quote: quote.clone(),
            offer: offer.clone(),
            reason: reason.to_owned(),
        }))
    };
    let Some(header) = header else {
        return Err(demand("PAYMENT-SIGNATURE or X-PAYMENT header is required"));
    };
    let (payload, raw) = verify::decode(&header.value)
        .map_err(|e| ApiError::invalid(header.name(), e.to_string()))?;
    let now = crate::time::now();
    let verified = verify::verify(
        header.version,
        &payload,
        raw,
        &offer,
        now.unix_timestamp() as u64,
    )
    .map_err(|e| match e {
        PaymentError::Malformed(m) => ApiError::invalid(header.name(), m),
        PaymentError::Rejected(reason) => demand(reason),
    })?;
    let id = format!(
        "{}/{}/{}/{}",
        verified.network.caip2(),
        verified.asset,
        verified.payer,
        verified.nonce
    );
    let at = crate::time::rfc3339(now);
    let record = PaymentRecord {
        id: id.clone(),
        version: verified.version,
        amount: verified.value.to_string(),
        payer: verified.payer.clone(),
        owner: principal.owner.clone(),
        project_id: project,
        fingerprint: fingerprint(&principal.owner, project, &request),
        state: CLAIMED.into(),
        reason: None,
        settle_response: None,
        transaction: None,
        server_id: None,
        sandbox_id: None,
        server: None,
        created_at: at.clone(),
        updated_at: at,
    };
    let run = Run {
        state,
        principal,
        project,
        request: &request,
        id: &id,
    };
    match state.store.claim_payment(&record).await? {
        Claim::New => run.settle_then_provision(&verified, demand).await,
        Claim::Existing(existing) if existing.fingerprint != record.fingerprint => {
            Err(ApiError::Conflict(format!(
                "payment {id} was already used for a different request"
            )))
        }
        Claim::Existing(existing) => run.resume(*existing, demand).await,
    }
}

struct Run<'a> {
    state: &'a AppState,
    principal: &'a Principal,
    project: u64,
    request: &'a ValidProvisionRequest,
    id: &'a str,
}

impl Run<'_> {
    fn facilitator(&self) -> Result<Facilitator, ApiError> {
        let config = &self.state.config.payments;
        Ok(Facilitator::new(
            &config.facilitator_url,
            config.facilitator_auth.clone(),
            config.facilitator_timeout,
        )?)
    }

    async fn reject(&self, reason: &str, demand: impl Fn(&str) -> ApiError) -> ApiError {
        let update = PaymentUpdate {
            reason: Some(reason.to_owned()),
            ..PaymentUpdate::default()
        };
        if let Err(err) = self
            .state
            .store
            .transition_payment(
                self.id,
                CLAIMED,
                REJECTED,
                update,
                &crate::time::now_rfc3339(),
            )
            .await
        {
            tracing::error!(payment = self.id, error = %err, "could not record a rejected payment");
        }
        demand(reason)
    }

    /// Verify and settle a payment this request holds, then provision.
    async fn settle_then_provision(
        &self,
        payment: &VerifiedPayment,
        demand: impl Fn(&str) -> ApiError,
    ) -> Result<Provisioned, ApiError> {
        let facilitator = self.facilitator()?;
        let verdict = facilitator.verify(payment).await?;
        if !verdict.is_valid {
            let reason = verdict
                .invalid_reason
                .unwrap_or_else(|| "invalid_payment".into());
            return Err(self.reject(&reason, demand).await);
        }
        let mut settlement = facilitator.settle(payment).await?;
        if let Settlement::Pending(_) = settlement {
            // Broadcast but unconfirmed: the identical request once more (reference/x402.md §3).
            settlement = facilitator.settle(payment).await?;
        }
        let settled = match settlement {
            Settlement::Settled(response) => response,
            Settlement::Pending(response) => {
                tracing::warn!(
                    payment = self.id,
                    transaction = response.transaction,
                    "settlement pending"
                );
                return Err(FacilitatorError::Pending(response.transaction).into());
            }
            Settlement::Failed(response) => {
                let reason = response
                    .error_reason
                    .unwrap_or_else(|| "settlement_failed".into());
                return Err(self.reject(&reason, demand).await);
            }
        };
        let update = PaymentUpdate {
            settle_response: serde_json::to_string(&settled).ok(),
            transaction: Some(settled.transaction.clone()),
            ..PaymentUpdate::default()
        };
        self.state
            .store
            .transition_payment(
                self.id,
                CLAIMED,
                SETTLED,
                update,
                &crate::time::now_rfc3339(),
            )
            .await?
            .ok_or_else(|| {
                ApiError::Internal(format!("payment {} left the claimed state", self.id))
            })?;
        self.provision(settled).await
    }

    /// Provision for a payment in state `settled` that this request holds.
    async fn provision(&self, settled: SettleResponse) -> Result<Provisioned, ApiError> {
        let at = || crate::time::now_rfc3339();
        match servers::create(self.state, self.principal, self.project, self.request).await {
            Ok(mut provisioned) => {
                let update = PaymentUpdate {
                    server_id: provisioned.server.get("id").and_then(Value::as_u64),
                    sandbox_id: Some(provisioned.sandbox_id.clone()),
                    server: serde_json::to_string(&provisioned.server).ok(),
                    ..PaymentUpdate::default()
                };
                if let Err(err) = self
                    .state
                    .store
                    .transition_payment(self.id, SETTLED, PROVISIONED, update, &at())
                    .await
                {
                    tracing::error!(payment = self.id, error = %err, "provisioned but could not record it on the payment");
                }
                provisioned.settlement = Some(settled);
                Ok(provisioned)
            }
            Err(err) => {
                tracing::error!(payment = self.id, error = %err, "settled but not provisioned");
                if let Err(store) = self
                    .state
                    .store
                    .transition_payment(
                        self.id,
                        SETTLED,
                        SETTLED_UNPROVISIONED,
                        PaymentUpdate::default(),
                        &at(),
                    )
                    .await
                {
                    tracing::error!(payment = self.id, error = %store, "could not record settled-unprovisioned");
                }
                Err(err)
            }
        }
    }

    /// A payment already claimed for this very request: give its outcome, finish its
    /// provisioning, or wait for the request that holds it.
    async fn resume(
        &self,
        mut record: PaymentRecord,
        demand: impl Fn(&str) -> ApiError,
    ) -> Result<Provisioned, ApiError> {
        let deadline = tokio::time::Instant::now() + self.state.config.payments.wait;
        loop {
            match record.state.as_str() {
                PROVISIONED => {
                    let server: Value = record
                        .server
                        .as_deref()
                        .and_then(|s| serde_json::from_str(s).ok())
                        .ok_or_else(|| {
                            ApiError::Internal(format!("payment {} lost its server", self.id))
                        })?;
                    return Ok(Provisioned {
                        server,
                        sandbox_id: record.sandbox_id.clone().unwrap_or_default(),
                        settlement: record
                            .settle_response
                            .as_deref()
                            .and_then(|s| serde_json::from_str(s).ok()),
                    });
                }
                REJECTED => {
                    return Err(demand(
                        record.reason.as_deref().unwrap_or("invalid_payment"),
                    ));
                }
                SETTLED_UNPROVISIONED => {
                    let retried = self
                        .state
                        .store
                        .transition_payment(
                            self.id,
                            SETTLED_UNPROVISIONED,
                            SETTLED,
                            PaymentUpdate::default(),
                            &crate::time::now_rfc3339(),
                        )
                        .await?;
                    if let Some(held) = retried {
                        let settled = held
                            .settle_response
                            .as_deref()
                            .and_then(|s| serde_json::from_str(s).ok())
                            .ok_or_else(|| {
                                ApiError::Internal(format!(
                                    "payment {} lost its settlement",
                                    self.id
                                ))
                            })?;
                        return self.provision(settled).await;
                    }
                }
                _ => {}
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(ApiError::Conflict(format!(
                    "payment {} is being processed (state {}); retry later with the same payment",
                    self.id, record.state
                )));
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            record = self
                .state
                .store
                .payment(self.id)
                .await?
                .ok_or_else(|| ApiError::Internal(format!("payment {} vanished", self.id)))?;
        }
    }
}
