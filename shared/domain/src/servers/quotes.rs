//! `GET /api/cloud/quote`: the exact offer a paid request would carry now — a new server, a
//! renewal or a resize of the caller's server — with no side effect.

use std::collections::BTreeMap;

use crate::billing::purchase::{MAX_RENEWAL_PERIODS, ProvisionRequest};
use crate::error::ApiError;
use crate::identity::auth::Principal;
use crate::pricing::Quote;
use crate::servers::ownership::authorize;
use crate::state::AppState;
use crate::validate;

/// What `GET /api/cloud/quote` answers: the exact offer a provisioning, a renewal or a resize
/// would carry now, with no side effect.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct QuoteAnswer {
    /// USDC atomic units, decimal string — the 402's `amount` / `maxAmountRequired`.
    pub amount: String,
    /// The same in USD.
    #[serde(with = "rust_decimal::serde::float")]
    #[schema(value_type = f64)]
    pub amount_usd: rust_decimal::Decimal,
    /// Whether nothing is to be paid (a free plan).
    pub free: bool,
    /// CAIP-2 network of the payment.
    pub network: &'static str,
    /// The USDC contract.
    pub asset: &'static str,
    /// The treasury (`null` when paid plans are not configured).
    pub pay_to: Option<String>,
    /// The offer's `maxTimeoutSeconds`.
    pub max_timeout_seconds: u64,
    /// How the price was made: periods, hours, plan and image parts, rates, markup.
    pub price: Quote,
    /// Until when the prices behind it are reused (RFC 3339); a 402 after that may differ.
    pub valid_until: crate::time::Timestamp,
}

/// The quote of `GET /api/cloud/quote`: for a new server (`plan`, `region`, optional `image`
/// and `projectId`), or, with `serverId`, for a renewal of the caller's server (`periods` 1 to
/// [`MAX_RENEWAL_PERIODS`], default 1) or, with `serverId` and `plan`, for its resize to that
/// plan ([`crate::billing::resize`]).
///
/// Errors: 400 naming the field for anything provisioning (or renewing, resizing) would refuse
/// before
/// payment; 403 another owner's server; 409 a free server; 410 a deleted one; 503 a plan that
/// cannot be priced.
pub async fn quote(
    state: &AppState,
    principal: &Principal,
    query: &QuoteQuery<'_>,
) -> Result<QuoteAnswer, ApiError> {
    state.upstream()?;
    let periods = match query.periods {
        None => 1,
        Some(p) => p
            .parse::<u32>()
            .ok()
            .filter(|p| (1..=MAX_RENEWAL_PERIODS).contains(p))
            .ok_or_else(|| {
                ApiError::invalid("periods", format!("must be 1 to {MAX_RENEWAL_PERIODS}"))
            })?,
    };
    let quote = match query.server_id {
        Some(server) => {
            let server = validate::numeric_id("serverId", server)?;
            server_quote(state, principal, server, query, periods).await?
        }
        None => {
            let required = |field: &str, value: Option<&str>| {
                value
                    .map(str::to_owned)
                    .ok_or_else(|| ApiError::invalid(field, "is required (or give serverId)"))
            };
            let request = ProvisionRequest {
                plan: required("plan", query.plan)?,
                region: required("region", query.region)?,
                image: query.image.map(str::to_owned),
                hostname: None,
                ssh_keys: None,
                ssh_keys_alias: None,
                user_data: None,
                tags: BTreeMap::new(),
            }
            .validate()?;
            let project = query
                .project_id
                .map(|p| validate::numeric_id("projectId", p))
                .transpose()?;
            let one = crate::billing::purchase::check(state, project, &request).await?;
            Quote::new(&one.plan, one.image.as_deref(), periods, one.period)
        }
    };
    let payments = &state.config.payments;
    let at = state
        .clock
        .timestamp()
        .plus(state.config.discovery_ttl.as_secs() as i64);
    Ok(QuoteAnswer {
        amount: quote.amount.clone(),
        amount_usd: quote.cost_usd,
        free: quote.is_free(),
        network: payments.network.caip2(),
        asset: payments.network.usdc(),
        pay_to: payments.pay_to.clone(),
        max_timeout_seconds: payments.max_timeout_seconds,
        valid_until: at,
        price: quote,
    })
}

/// The quote for the caller's `server`: its resize to `query.plan`, or `periods` more of it.
///
/// Errors: those of [`quote`].
async fn server_quote(
    state: &AppState,
    principal: &Principal,
    server: u64,
    query: &QuoteQuery<'_>,
    periods: u32,
) -> Result<Quote, ApiError> {
    let ownership = authorize(state, principal, server).await?;
    let Some(plan) = query.plan else {
        return crate::billing::purchase::renewal_quote(
            state,
            principal,
            server,
            &ownership.sandbox_id,
            periods,
        )
        .await;
    };
    if query.periods.is_some() {
        return Err(ApiError::invalid(
            "periods",
            "a resize (serverId with plan) keeps the paid time: give plan or periods, not both",
        ));
    }
    let request = crate::billing::purchase::ResizeRequest {
        plan: plan.to_owned(),
    };
    let (_, priced) =
        crate::billing::resize::bind(state, server, &ownership.sandbox_id, &request).await?;
    priced.check(principal)?;
    Ok(priced.quote)
}

/// The query parameters of `GET /api/cloud/quote`, as received.
#[derive(Debug, Clone, Copy, Default)]
pub struct QuoteQuery<'a> {
    /// Plan slug (a new server, or the plan a resize moves to).
    pub plan: Option<&'a str>,
    /// Region slug (a new server).
    pub region: Option<&'a str>,
    /// Image slug (a new server).
    pub image: Option<&'a str>,
    /// Project id (a new server; checked when given).
    pub project_id: Option<&'a str>,
    /// A server of the caller's, to renew (or, with `plan`, to resize).
    pub server_id: Option<&'a str>,
    /// Periods, 1-12.
    pub periods: Option<&'a str>,
}
