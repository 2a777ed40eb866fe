//! Plan prices in USD and USDC (design brief §3, Money).
//!
//! A plan's monthly cost is its `Monthly` price, else its `Hourly` price × 730
//! (`reference/upstream-cherry-api.md` §6.2), converted to USD with the configured rate of its
//! currency, plus the configured markup, rounded *up* to 6 decimals (USDC's precision) so the
//! service never undercharges. Payment is required exactly when that cost is greater than 0.
//! A plan without a usable price, or priced in a currency without a configured rate, has no
//! cost at all: it is listed with `monthlyCost: null` and cannot be provisioned.

use rust_decimal::{Decimal, RoundingStrategy};
use serde::{Deserialize, Serialize};

use crate::config::PricingConfig;

/// Hours in a month, for plans priced only by the hour (8760 / 12).
pub const HOURS_PER_MONTH: u32 = 730;
/// USDC has 6 decimals: 1 USDC = 1 000 000 atomic units.
pub const USDC_DECIMALS: u32 = 6;

/// One entry of a plan's `pricing` array.
#[derive(Debug, Clone, Deserialize)]
pub struct PriceEntry {
    /// `Hourly`, `Monthly`, `Spot hourly`, … (matched case-sensitively, as the provider's
    /// clients do).
    pub unit: String,
    /// Price in `currency`.
    #[serde(default)]
    pub price: Option<Decimal>,
    /// ISO currency code (`EUR`, `USD`).
    #[serde(default)]
    pub currency: Option<String>,
}

/// Why a plan has no cost.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PricingError {
    /// Neither a `Monthly` nor an `Hourly` price.
    #[error("the plan has no Monthly or Hourly price")]
    NoPrice,
    /// A currency with no configured USD rate (`CURRENCY_RATES`).
    #[error("no USD rate is configured for currency `{0}`")]
    UnknownCurrency(String),
    /// A negative price.
    #[error("the plan's price is negative")]
    Negative,
}

/// What a plan costs, as quoted to a caller.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Quote {
    /// The plan slug.
    pub plan: String,
    /// Monthly cost in USD (6 decimals at most).
    #[serde(with = "rust_decimal::serde::float")]
    pub monthly_cost_usd: Decimal,
    /// The same in USDC atomic units, as a decimal string.
    pub amount: String,
    /// Always `USDC`.
    pub asset: &'static str,
}

impl std::fmt::Display for Quote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "plan {} costs {} USD per month ({} USDC atomic units)",
            self.plan, self.monthly_cost_usd, self.amount
        )
    }
}

impl Quote {
    /// The quote for `plan` at `monthly_cost_usd`.
    pub fn new(plan: &str, monthly_cost_usd: Decimal) -> Self {
        Quote {
            plan: plan.to_owned(),
            monthly_cost_usd,
            amount: usdc_atomic(monthly_cost_usd).to_string(),
            asset: "USDC",
        }
    }
}

/// The monthly cost in USD of a plan with these `pricing` entries (see the module docs).
pub fn monthly_cost(
    pricing: &[PriceEntry],
    config: &PricingConfig,
) -> Result<Decimal, PricingError> {
    let find = |unit: &str| pricing.iter().find(|p| p.unit == unit && p.price.is_some());
    let (entry, native) = if let Some(monthly) = find("Monthly") {
        (monthly, monthly.price.unwrap_or_default())
    } else if let Some(hourly) = find("Hourly") {
        (
            hourly,
            hourly.price.unwrap_or_default() * Decimal::from(HOURS_PER_MONTH),
        )
    } else {
        return Err(PricingError::NoPrice);
    };
    if native.is_sign_negative() && !native.is_zero() {
        return Err(PricingError::Negative);
    }
    let currency = entry
        .currency
        .as_deref()
        .unwrap_or_default()
        .to_ascii_uppercase();
    let rate = config
        .usd_rates
        .get(&currency)
        .ok_or_else(|| PricingError::UnknownCurrency(currency.clone()))?;
    let markup = Decimal::ONE + config.markup_percent / Decimal::ONE_HUNDRED;
    Ok((native * rate * markup)
        .round_dp_with_strategy(USDC_DECIMALS, RoundingStrategy::AwayFromZero)
        .normalize())
}

/// USD → USDC atomic units (× 10^6, rounded up).
pub fn usdc_atomic(usd: Decimal) -> u128 {
    let atomic = (usd * Decimal::from(10u64.pow(USDC_DECIMALS)))
        .round_dp_with_strategy(0, RoundingStrategy::AwayFromZero);
    u128::try_from(atomic).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    fn d(s: &str) -> Decimal {
        Decimal::from_str(s).unwrap()
    }
    fn entry(unit: &str, price: &str, currency: &str) -> PriceEntry {
        PriceEntry {
            unit: unit.into(),
            price: Some(d(price)),
            currency: Some(currency.into()),
        }
    }
    fn eur(rate: &str, markup: &str) -> PricingConfig {
        let mut c = PricingConfig::default();
        c.usd_rates.insert("EUR".into(), d(rate));
        c.markup_percent = d(markup);
        c
    }

    #[test]
    fn monthly_price_wins_over_hourly() {
        let p = [
            entry("Hourly", "0.2551", "USD"),
            entry("Monthly", "149", "USD"),
        ];
        assert_eq!(monthly_cost(&p, &PricingConfig::default()), Ok(d("149")));
    }

    #[test]
    fn hourly_only_uses_730_hours_rate_and_markup() {
        // 0.0218 EUR/h × 730 = 15.914 EUR × 1.16 = 18.46024 USD × 1.10 = 20.306264
        let p = [entry("Hourly", "0.0218", "EUR")];
        assert_eq!(monthly_cost(&p, &eur("1.16", "10")), Ok(d("20.306264")));
        assert_eq!(usdc_atomic(d("20.306264")), 20_306_264);
    }

    #[test]
    fn rounds_up_to_six_decimals() {
        let p = [entry("Monthly", "0.0000001", "USD")];
        assert_eq!(
            monthly_cost(&p, &PricingConfig::default()),
            Ok(d("0.000001"))
        );
        assert_eq!(usdc_atomic(d("0.0000001")), 1);
    }

    #[test]
    fn free_plans_cost_zero() {
        let p = [entry("Hourly", "0", "EUR")];
        assert_eq!(monthly_cost(&p, &eur("1.16", "10")), Ok(Decimal::ZERO));
    }

    #[test]
    fn unpriceable_plans_are_errors_never_free() {
        assert_eq!(
            monthly_cost(&[], &PricingConfig::default()),
            Err(PricingError::NoPrice)
        );
        let spot_only = [entry("Spot hourly", "0.01", "USD")];
        assert_eq!(
            monthly_cost(&spot_only, &PricingConfig::default()),
            Err(PricingError::NoPrice)
        );
        let eur_plan = [entry("Monthly", "10", "EUR")];
        assert_eq!(
            monthly_cost(&eur_plan, &PricingConfig::default()),
            Err(PricingError::UnknownCurrency("EUR".into()))
        );
        let negative = [entry("Monthly", "-1", "USD")];
        assert_eq!(
            monthly_cost(&negative, &PricingConfig::default()),
            Err(PricingError::Negative)
        );
    }

    #[test]
    fn quote_serialises_cost_as_number_and_amount_as_string() {
        let q = serde_json::to_value(Quote::new("p", d("18.46024"))).unwrap();
        assert_eq!(q["monthlyCostUsd"], serde_json::json!(18.46024));
        assert_eq!(q["amount"], "18460240");
        assert_eq!(q["asset"], "USDC");
    }
}
