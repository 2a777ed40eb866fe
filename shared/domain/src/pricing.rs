//! Prices in USD and USDC (design brief §3, Money; paid time).
//!
//! The service creates servers on the provider's hourly cycle, so one paid period costs what the
//! provider bills for it there: the plan's `Hourly` price × the period's hours, plus the image's
//! own `Hourly` price × the same hours when the image has one (a licensed OS), each converted to
//! USD with the configured rate of its currency, × (1 + markup), rounded *up* to 6 decimals
//! (USDC's precision) so the service never undercharges (`reference/upstream-cherry-api.md`
//! §6.2: `Monthly` is a fixed-term price for another cycle, cheaper than `Hourly` × 730). A plan
//! is free only when every part is 0. A plan or image without an `Hourly` price, or priced in a
//! currency without a configured rate, cannot be priced: it is listed with `monthlyCost: null`
//! and cannot be provisioned — never treated as free.

use rust_decimal::{Decimal, RoundingStrategy};
use serde::{Deserialize, Serialize};

use crate::config::PricingConfig;

/// Hours in the default paid period (8760 / 12).
pub const HOURS_PER_MONTH: u32 = 730;
/// USDC has 6 decimals: 1 USDC = 1 000 000 atomic units.
pub const USDC_DECIMALS: u32 = 6;
/// The unit of the hourly cycle's price, matched case-sensitively as the provider's clients do.
pub const HOURLY: &str = "Hourly";

/// One entry of a plan's or image's `pricing`.
#[derive(Debug, Clone, Deserialize)]
pub struct PriceEntry {
    /// `Hourly`, `Monthly`, `Spot hourly`, … (matched case-sensitively).
    pub unit: String,
    /// Price in `currency`.
    #[serde(default)]
    pub price: Option<Decimal>,
    /// ISO currency code (`EUR`, `USD`).
    #[serde(default)]
    pub currency: Option<String>,
}

/// A resource's `pricing`: an array of entries (plans, images in the SDKs) or one object (the
/// images sample of the provider's documentation) — both are accepted.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Pricing {
    /// `[{unit, price, currency}, …]`.
    Many(Vec<PriceEntry>),
    /// `{unit, price, currency}`.
    One(PriceEntry),
}

impl Pricing {
    /// The entries.
    pub fn entries(&self) -> &[PriceEntry] {
        match self {
            Pricing::Many(entries) => entries,
            Pricing::One(entry) => std::slice::from_ref(entry),
        }
    }

    /// The `pricing` member of a provider object (plan or image); `None` when it has none.
    pub fn of(object: &serde_json::Value) -> Option<Pricing> {
        object
            .get("pricing")
            .filter(|p| !p.is_null())
            .and_then(|p| serde_json::from_value(p.clone()).ok())
    }
}

/// Why something has no price.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PricingError {
    /// No `Hourly` price (the `plan` or the `image`).
    #[error("the {0} has no Hourly price (servers are billed by the hour)")]
    NoHourlyPrice(&'static str),
    /// A currency with no configured USD rate (`CURRENCY_RATES`).
    #[error("no USD rate is configured for currency `{0}`")]
    UnknownCurrency(String),
    /// A negative price.
    #[error("the {0}'s price is negative")]
    Negative(&'static str),
}

/// One part of a price: a plan's or an image's hourly price, and what it comes to in USD.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Part {
    /// Price per hour in `currency`.
    #[serde(with = "rust_decimal::serde::float")]
    #[schema(value_type = f64)]
    pub hourly: Decimal,
    /// The provider's currency.
    pub currency: String,
    /// USD per unit of `currency`.
    #[serde(with = "rust_decimal::serde::float")]
    #[schema(value_type = f64)]
    pub usd_rate: Decimal,
    /// `hourly` × the period's hours × `usd_rate`, before markup and rounding.
    #[serde(with = "rust_decimal::serde::float")]
    #[schema(value_type = f64)]
    pub usd: Decimal,
}

/// What one period costs, and how it was made.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PeriodPrice {
    /// Hours in the period.
    #[serde(with = "rust_decimal::serde::float")]
    #[schema(value_type = f64)]
    pub hours: Decimal,
    /// The plan's part.
    pub plan_part: Part,
    /// The image's part, when the image has its own price.
    pub image_part: Option<Part>,
    /// Markup, percent.
    #[serde(with = "rust_decimal::serde::float")]
    #[schema(value_type = f64)]
    pub markup_percent: Decimal,
    /// (plan part + image part) × (1 + markup), rounded up to 6 decimals: USD.
    #[serde(with = "rust_decimal::serde::float")]
    #[schema(value_type = f64)]
    pub usd: Decimal,
}

/// What a request costs, as quoted to a caller (the 402's `price`).
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Quote {
    /// The plan slug.
    pub plan: String,
    /// The image slug, when one was named.
    pub image: Option<String>,
    /// Paid periods bought (1 for a new server).
    pub periods: u32,
    /// One period's price and its parts.
    pub period: PeriodPrice,
    /// `periods` × one period's USD price.
    #[serde(with = "rust_decimal::serde::float")]
    #[schema(value_type = f64)]
    pub cost_usd: Decimal,
    /// The same in USDC atomic units, as a decimal string.
    pub amount: String,
    /// Always `USDC`.
    pub asset: &'static str,
    /// For a resize: the plan it moves from and the paid time left it pays for (`periods` is
    /// then 0: the paid time does not change).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resize: Option<Prorated>,
    /// The plan's class (not part of the offer; a new server's deployment times).
    #[serde(skip)]
    pub class: crate::store::sandboxes::PlanClass,
}

/// What a resize pays for: the difference between two plans' period prices over the paid time
/// a server has left, in whole hours rounded up (stable within the hour, so a payment signed on a
/// 402 still matches its price until the next hour starts).
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Prorated {
    /// The plan the server is on now.
    pub from_plan: String,
    /// One period of that plan (with the server's image), USD.
    #[serde(with = "rust_decimal::serde::float")]
    #[schema(value_type = f64)]
    pub from_period_usd: Decimal,
    /// The paid time left that the difference is paid for, whole hours (rounded up).
    pub hours_left: u64,
}

impl std::fmt::Display for Quote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(resize) = &self.resize {
            return write!(
                f,
                "moving from plan {} to plan {} for the {} h of paid time left costs {} USD \
                ({} USDC atomic units)",
                resize.from_plan, self.plan, resize.hours_left, self.cost_usd, self.amount
            );
        }
        write!(
            f,
            "{} period(s) of {} h of plan {} cost {} USD ({} USDC atomic units)",
            self.periods, self.period.hours, self.plan, self.cost_usd, self.amount
        )
    }
}

impl Quote {
    /// The quote for `periods` periods at `period` of `plan` (with `image`).
    pub fn new(plan: &str, image: Option<&str>, periods: u32, period: PeriodPrice) -> Self {
        let cost_usd = period.usd * Decimal::from(periods);
        Quote {
            plan: plan.to_owned(),
            image: image.map(str::to_owned),
            periods,
            amount: usdc_atomic(cost_usd).to_string(),
            cost_usd,
            period,
            asset: "USDC",
            resize: None,
            class: crate::store::sandboxes::PlanClass::default(),
        }
    }

    /// The quote of moving a server from a plan whose period costs `from.from_period_usd` to
    /// `plan` (with `image`) whose period is `period`, for `from.hours_left` hours: the
    /// difference of the two periods' USD prices × hours left / hours per period, rounded up to
    /// 6 decimals (never an undercharge). `None` when `plan` costs no more than the plan it moves
    /// from (a downgrade or a move sideways, which the service refuses).
    pub fn prorated(
        plan: &str,
        image: Option<&str>,
        period: PeriodPrice,
        from: Prorated,
    ) -> Option<Self> {
        let difference = period.usd - from.from_period_usd;
        if difference <= Decimal::ZERO || period.hours.is_zero() {
            return None;
        }
        let cost_usd = (difference * Decimal::from(from.hours_left) / period.hours)
            .round_dp_with_strategy(USDC_DECIMALS, RoundingStrategy::AwayFromZero)
            .normalize();
        Some(Quote {
            periods: 0,
            amount: usdc_atomic(cost_usd).to_string(),
            cost_usd,
            resize: Some(from),
            ..Quote::new(plan, image, 1, period)
        })
    }

    /// Whether nothing is to be paid.
    pub fn is_free(&self) -> bool {
        self.cost_usd.is_zero()
    }

    /// The amount in USDC atomic units.
    pub fn atomic(&self) -> u128 {
        usdc_atomic(self.cost_usd)
    }
}

/// Hours in a period of `seconds`.
pub fn hours(seconds: u64) -> Decimal {
    Decimal::from(seconds) / Decimal::from(3600)
}

fn part(
    what: &'static str,
    pricing: &[PriceEntry],
    hours: Decimal,
    config: &PricingConfig,
) -> Result<Part, PricingError> {
    let entry = pricing
        .iter()
        .find(|p| p.unit == HOURLY && p.price.is_some())
        .ok_or(PricingError::NoHourlyPrice(what))?;
    let hourly = entry.price.unwrap_or_default();
    if hourly.is_sign_negative() && !hourly.is_zero() {
        return Err(PricingError::Negative(what));
    }
    let currency = entry
        .currency
        .as_deref()
        .unwrap_or_default()
        .to_ascii_uppercase();
    let usd_rate = *config
        .usd_rates
        .get(&currency)
        .ok_or_else(|| PricingError::UnknownCurrency(currency.clone()))?;
    Ok(Part {
        usd: hourly * hours * usd_rate,
        hourly,
        currency,
        usd_rate,
    })
}

/// The price of one period of `hours` for a plan with `plan` pricing and, when the image has
/// its own price, `image` pricing (see the module docs).
///
/// Errors: [`PricingError`] — never a price of 0 for something that cannot be priced.
pub fn period_price(
    plan: &[PriceEntry],
    image: Option<&[PriceEntry]>,
    hours: Decimal,
    config: &PricingConfig,
) -> Result<PeriodPrice, PricingError> {
    let plan_part = part("plan", plan, hours, config)?;
    let image_part = image
        .map(|image| part("image", image, hours, config))
        .transpose()?;
    let markup = Decimal::ONE + config.markup_percent / Decimal::ONE_HUNDRED;
    let base = plan_part.usd + image_part.as_ref().map_or(Decimal::ZERO, |p| p.usd);
    Ok(PeriodPrice {
        hours,
        usd: (base * markup)
            .round_dp_with_strategy(USDC_DECIMALS, RoundingStrategy::AwayFromZero)
            .normalize(),
        plan_part,
        image_part,
        markup_percent: config.markup_percent,
    })
}

/// Whether a resource with its own price `pricing` (an image's: a licensed OS) costs nothing on
/// the hourly cycle: its `Hourly` price is 0. One that cannot be priced is never free.
pub fn costs_nothing(pricing: &[PriceEntry], config: &PricingConfig) -> bool {
    part("image", pricing, Decimal::ONE, config).is_ok_and(|part| part.usd.is_zero())
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
    fn month() -> Decimal {
        Decimal::from(HOURS_PER_MONTH)
    }

    #[test]
    fn hourly_only_uses_the_periods_hours_rate_and_markup() {
        // 0.0218 EUR/h × 730 = 15.914 EUR × 1.16 = 18.46024 USD × 1.10 = 20.306264
        let p = [entry("Hourly", "0.0218", "EUR")];
        let price = period_price(&p, None, month(), &eur("1.16", "10")).unwrap();
        assert_eq!(price.usd, d("20.306264"));
        assert_eq!(price.plan_part.usd, d("18.46024"));
        assert_eq!(usdc_atomic(price.usd), 20_306_264);
    }

    #[test]
    fn monthly_and_hourly_bills_the_hourly_cycle_the_server_is_created_on() {
        // The fixed-term Monthly (59.29) is cheaper than what the hourly cycle bills (74.17).
        let p = [
            entry("Monthly", "59.29", "USD"),
            entry("Hourly", "0.1016", "USD"),
        ];
        let price = period_price(&p, None, month(), &PricingConfig::default()).unwrap();
        assert_eq!(price.usd, d("74.168"));
    }

    #[test]
    fn a_licensed_image_adds_its_own_hourly_price() {
        let plan = [entry("Hourly", "0.2551", "EUR")];
        let image = [entry("Hourly", "0.0411", "EUR")];
        let price = period_price(&plan, Some(&image), month(), &eur("1.16", "0")).unwrap();
        // (0.2551 + 0.0411) × 730 × 1.16 = 250.82216
        assert_eq!(price.usd, d("250.82216"));
        assert_eq!(price.image_part.unwrap().usd, d("34.80348"));
        // Both shapes of an image's pricing are read.
        let one: Pricing = serde_json::from_value(
            serde_json::json!({"unit": "Hourly", "price": 0.0411, "currency": "EUR"}),
        )
        .unwrap();
        assert_eq!(one.entries().len(), 1);
    }

    #[test]
    fn a_zero_monthly_with_a_positive_hourly_is_not_free() {
        let p = [entry("Monthly", "0", "EUR"), entry("Hourly", "0.05", "EUR")];
        let price = period_price(&p, None, month(), &eur("1", "0")).unwrap();
        assert_eq!(price.usd, d("36.5"));
        let free = [entry("Monthly", "0", "EUR"), entry("Hourly", "0", "EUR")];
        let price = period_price(&free, None, month(), &eur("1", "0")).unwrap();
        assert!(price.usd.is_zero());
    }

    #[test]
    fn short_periods_round_up_to_a_positive_amount() {
        // 60 s of a 0.0218 EUR/h plan: 0.00042… USD, rounded up.
        let p = [entry("Hourly", "0.0218", "EUR")];
        let price = period_price(&p, None, hours(60), &eur("1.16", "0")).unwrap();
        assert_eq!(price.usd, d("0.000422"));
        let quote = Quote::new("p", None, 3, price);
        assert_eq!(quote.amount, "1266");
    }

    #[test]
    fn an_image_costs_nothing_only_at_an_hourly_price_of_zero() {
        let config = eur("1.16", "20");
        assert!(costs_nothing(&[entry("Hourly", "0", "EUR")], &config));
        assert!(!costs_nothing(&[entry("Hourly", "0.0411", "EUR")], &config));
        // Without an Hourly price, or without a rate, it cannot be priced: never free.
        assert!(!costs_nothing(&[entry("Monthly", "0", "EUR")], &config));
        assert!(!costs_nothing(&[entry("Hourly", "0", "GBP")], &config));
    }

    #[test]
    fn a_resize_pays_the_difference_for_the_hours_left_and_never_for_a_downgrade() {
        let config = eur("1.16", "0");
        let small = period_price(&[entry("Hourly", "0.0218", "EUR")], None, month(), &config);
        let big = period_price(&[entry("Hourly", "0.0436", "EUR")], None, month(), &config);
        let (small, big) = (small.unwrap(), big.unwrap());
        let from = |period: &PeriodPrice, hours_left| Prorated {
            from_plan: "small".into(),
            from_period_usd: period.usd,
            hours_left,
        };
        // (0.0436 − 0.0218) × 1.16 × 730 = 18.46024 USD a period; 73 h left is a tenth of it.
        let quote = Quote::prorated("big", None, big.clone(), from(&small, 73)).unwrap();
        assert_eq!(quote.cost_usd, d("1.846024"));
        assert_eq!(quote.amount, "1846024");
        assert_eq!(quote.periods, 0);
        // The policy's price per server is the new plan's period.
        assert_eq!(quote.period.usd, big.usd);
        // An hour left still costs something, rounded up.
        let hour = Quote::prorated("big", None, big.clone(), from(&small, 1)).unwrap();
        assert_eq!(hour.amount, "25288");
        // Down or sideways: nothing to offer.
        let down = Prorated {
            from_period_usd: big.usd,
            ..from(&small, 73)
        };
        assert!(Quote::prorated("small", None, small.clone(), down).is_none());
        assert!(Quote::prorated("same", None, small.clone(), from(&small, 73)).is_none());
    }

    #[test]
    fn unpriceable_plans_are_errors_never_free() {
        let config = PricingConfig::default();
        assert_eq!(
            period_price(&[], None, month(), &config),
            Err(PricingError::NoHourlyPrice("plan"))
        );
        let monthly_only = [entry("Monthly", "149", "USD")];
        assert_eq!(
            period_price(&monthly_only, None, month(), &config),
            Err(PricingError::NoHourlyPrice("plan"))
        );
        let spot_only = [entry("Spot hourly", "0.01", "USD")];
        assert!(period_price(&spot_only, None, month(), &config).is_err());
        let eur_plan = [entry("Hourly", "10", "EUR")];
        assert_eq!(
            period_price(&eur_plan, None, month(), &config),
            Err(PricingError::UnknownCurrency("EUR".into()))
        );
        let negative = [entry("Hourly", "-1", "USD")];
        assert_eq!(
            period_price(&negative, None, month(), &config),
            Err(PricingError::Negative("plan"))
        );
        let plan = [entry("Hourly", "1", "USD")];
        let monthly_image = [entry("Monthly", "5", "USD")];
        assert_eq!(
            period_price(&plan, Some(&monthly_image), month(), &config),
            Err(PricingError::NoHourlyPrice("image"))
        );
    }

    #[test]
    fn quote_serialises_costs_as_numbers_and_amount_as_string() {
        let p = [entry("Hourly", "0.0218", "EUR")];
        let price = period_price(&p, None, month(), &eur("1.16", "0")).unwrap();
        let q = serde_json::to_value(Quote::new("p", None, 1, price)).unwrap();
        assert_eq!(q["costUsd"], serde_json::json!(18.46024));
        assert_eq!(q["amount"], "18460240");
        assert_eq!(q["asset"], "USDC");
        assert_eq!(q["period"]["hours"], serde_json::json!(730.0));
        assert_eq!(q["period"]["planPart"]["usdRate"], serde_json::json!(1.16));
        assert!(q["period"]["imagePart"].is_null());
    }
}
