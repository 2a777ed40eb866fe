//! Money as a type (issue 31, point 2): [`Usdc`], an amount of USDC in atomic units (6
//! decimals, as the token contract counts), never a float. The API writes USD as JSON numbers
//! (`2.01`, a key policy's limits and its usage: one USDC is one USD), read exactly as written.

use std::fmt;
use std::str::FromStr;

use rust_decimal::Decimal;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Atomic units per USDC (the token's 6 decimals).
pub const UNITS_PER_USDC: u128 = 1_000_000;

/// An amount of USDC in atomic units. Serialised as USD, a JSON number with at most six
/// decimals (`2.01`), and read from one; parsed from its decimal text (`"2.01".parse()`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Usdc(u128);

/// Why a text is not an amount of USDC.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MoneyError {
    /// Not a decimal number.
    #[error("`{0}` is not a decimal number")]
    NotDecimal(String),
    /// Below zero.
    #[error("`{0}` is below zero")]
    Negative(String),
    /// Finer than one atomic unit (more than six decimals).
    #[error("`{0}` has more than six decimals (USDC counts millionths)")]
    TooFine(String),
    /// Too large to count.
    #[error("`{0}` is too large")]
    TooLarge(String),
}

impl Usdc {
    /// Zero.
    pub const ZERO: Usdc = Usdc(0);

    /// `units` atomic units.
    pub const fn from_atomic(units: u128) -> Self {
        Usdc(units)
    }

    /// The amount in atomic units.
    pub const fn atomic(self) -> u128 {
        self.0
    }

    /// The amount of a USD decimal (`2.01` → 2,010,000 units), exactly.
    ///
    /// Errors: [`MoneyError`] for a negative amount, one finer than a millionth, or one too
    /// large for 128 bits of units.
    pub fn from_usd(usd: Decimal) -> Result<Self, MoneyError> {
        let text = || usd.to_string();
        if usd.is_sign_negative() && !usd.is_zero() {
            return Err(MoneyError::Negative(text()));
        }
        let units = usd
            .checked_mul(Decimal::from(UNITS_PER_USDC))
            .ok_or_else(|| MoneyError::TooLarge(text()))?;
        if units.fract() != Decimal::ZERO {
            return Err(MoneyError::TooFine(text()));
        }
        u128::try_from(units)
            .map(Usdc)
            .map_err(|_| MoneyError::TooLarge(text()))
    }

    /// The amount in USD, exactly (`2010000` units → `2.01`).
    pub fn usd(self) -> Decimal {
        // At most 28 digits: amounts beyond 10^22 USD saturate (no USDC supply comes near).
        Decimal::from_i128_with_scale(self.0.min(10u128.pow(28) - 1) as i128, 6).normalize()
    }

    /// The amount in USD as a JSON number's `f64`, for a field that mixes it with other units
    /// (a policy violation's `remaining`); exact below a billion USD (see [`Serialize`]).
    pub fn usd_f64(self) -> f64 {
        self.usd().try_into().unwrap_or(f64::MAX)
    }

    /// `self` less `other`, at least zero.
    pub fn saturating_sub(self, other: Usdc) -> Usdc {
        Usdc(self.0.saturating_sub(other.0))
    }
}

impl fmt::Display for Usdc {
    /// USD, with no trailing zeros (`2.01`, `25`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.usd())
    }
}

impl FromStr for Usdc {
    type Err = MoneyError;

    /// A USD decimal (`"2.01"`, `"25"`): see [`Usdc::from_usd`].
    fn from_str(text: &str) -> Result<Self, MoneyError> {
        let usd = Decimal::from_str_exact(text.trim())
            .map_err(|_| MoneyError::NotDecimal(text.to_owned()))?;
        Usdc::from_usd(usd)
    }
}

impl Serialize for Usdc {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // Written as the number it is: an f64's shortest form is the decimal itself for every
        // amount of at most 15 significant digits, so every amount below 10^15 units (a
        // billion USD, a thousand times a policy's largest limit).
        serializer.serialize_f64(self.usd_f64())
    }
}

impl<'de> Deserialize<'de> for Usdc {
    /// A JSON number (USD), read as the decimal its writer wrote (an `f64`'s shortest
    /// representation: `2.01` is 2,010,000 units, not the 2,009,999 of `2.01 × 10⁶` in binary
    /// floating point). A string is refused: the API's amounts in USD are numbers.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let usd = f64::deserialize(deserializer)?;
        if !usd.is_finite() {
            return Err(serde::de::Error::custom(format!("`{usd}` is not a number")));
        }
        usd.to_string().parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_usd_decimal_is_its_exact_units() {
        assert_eq!("2.01".parse::<Usdc>().unwrap().atomic(), 2_010_000);
        assert_eq!("25".parse::<Usdc>().unwrap().atomic(), 25_000_000);
        assert_eq!("0.000001".parse::<Usdc>().unwrap().atomic(), 1);
        assert_eq!(
            "0.0000001".parse::<Usdc>(),
            Err(MoneyError::TooFine("0.0000001".into()))
        );
        assert!(matches!("-1".parse::<Usdc>(), Err(MoneyError::Negative(_))));
        assert!(matches!(
            "two".parse::<Usdc>(),
            Err(MoneyError::NotDecimal(_))
        ));
        assert_eq!(Usdc::from_atomic(18_460_240).to_string(), "18.46024");
        assert_eq!(Usdc::from_atomic(25_000_000).to_string(), "25");
    }

    #[test]
    fn json_numbers_are_read_as_written() {
        let read = |json: &str| serde_json::from_str::<Usdc>(json).map(Usdc::atomic);
        assert_eq!(read("2.01").unwrap(), 2_010_000);
        assert!(read("\"2.01\"").is_err());
        assert_eq!(read("1000000").unwrap(), 1_000_000_000_000);
        assert!(read("-0.5").is_err());
        assert!(read("0.1234567").is_err());
        assert_eq!(
            serde_json::to_string(&Usdc::from_atomic(2_010_000)).unwrap(),
            "2.01"
        );
    }

    #[test]
    fn a_two_point_zero_one_limit_admits_a_two_point_zero_one_purchase() {
        let limit: Usdc = serde_json::from_str("2.01").unwrap();
        let purchase = Usdc::from_atomic(2_010_000);
        assert!(purchase <= limit);
    }

    proptest! {
        /// Every amount below a billion USD goes out as a JSON number and comes back the same,
        /// and so does its decimal text.
        #[test]
        fn every_amount_round_trips(units in 0u128..1_000_000_000_000_000) {
            let amount = Usdc::from_atomic(units);
            let json = serde_json::to_string(&amount).unwrap();
            prop_assert_eq!(serde_json::from_str::<Usdc>(&json).unwrap(), amount);
            prop_assert_eq!(amount.to_string().parse::<Usdc>().unwrap(), amount);
        }

        /// Every two-decimal amount a human writes is the units it names.
        #[test]
        fn every_two_decimal_amount_is_exact(cents in 1u64..100_000_000) {
            let written = format!("{}.{:02}", cents / 100, cents % 100);
            let read: Usdc = serde_json::from_str(&written).unwrap();
            prop_assert_eq!(read.atomic(), u128::from(cents) * 10_000);
        }
    }
}
