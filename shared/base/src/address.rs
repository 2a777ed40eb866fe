//! Wallet addresses: the owner of every record (a value of the bottom layer; the 400 naming a
//! field is `domain::validate::address`).

/// Checks an Ethereum address (`0x` + 40 hex digits, any case) and returns its canonical
/// lowercase form, which is how owners are stored and compared; `None` for anything else.
pub fn parse(value: &str) -> Option<String> {
    value
        .strip_prefix("0x")
        .or_else(|| value.strip_prefix("0X"))
        .filter(|h| h.len() == 40 && h.bytes().all(|b| b.is_ascii_hexdigit()))
        .map(|hex| format!("0x{}", hex.to_ascii_lowercase()))
}

/// An owner: the wallet address every record belongs to, in its canonical lowercase form
/// ([`parse`]), checked once where it enters — a signed SIWE message, or the credential record
/// an authentication read — and passed as this type from there on.
///
/// Serialized as its text; deserializing a record checks it again (a stored owner that is not an
/// address is an error, never a silent owner).
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(into = "String", try_from = "String")]
pub struct Owner(String);

impl Owner {
    /// `value` as an owner (any case in, lowercase kept); `None` when it is not an address.
    pub fn parse(value: &str) -> Option<Owner> {
        parse(value).map(Owner)
    }

    /// The owner `address` is (a recovered signer).
    pub fn of(address: alloy_primitives::Address) -> Owner {
        Owner(format!("{address:#x}"))
    }

    /// The canonical lowercase text (`0x` + 40 hex), as the store keeps it.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Compares with an address's text as stored (lowercase).
impl PartialEq<&str> for Owner {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl From<Owner> for String {
    fn from(owner: Owner) -> String {
        owner.0
    }
}

impl TryFrom<String> for Owner {
    type Error = &'static str;

    fn try_from(value: String) -> Result<Owner, Self::Error> {
        Owner::parse(&value).ok_or("not an Ethereum address (0x + 40 hex digits)")
    }
}

impl std::fmt::Display for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl Owner {
    /// The owner as answered ([`Checksummed`]).
    pub fn checksummed(&self) -> Checksummed {
        Checksummed::from(self.as_str())
    }
}

/// A wallet address as every answer carries it: EIP-55 mixed case, as wallets and viem show it
/// (`0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed`). The records keep addresses lowercase
/// ([`Owner`], an order's payer); a view turns them into this type, which serializes as its
/// text. Only serialized: nothing reads an address back from an answer.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Checksummed(String);

/// An address (`0x` + 40 hex digits, any case) in EIP-55; any other text as it is (what the
/// service stores as an address always is one, so nothing is lost either way).
impl From<&str> for Checksummed {
    fn from(value: &str) -> Checksummed {
        Checksummed(
            match parse(value).map(|a| a.parse::<alloy_primitives::Address>()) {
                Some(Ok(address)) => address.to_checksum(None),
                _ => value.to_owned(),
            },
        )
    }
}

impl std::fmt::Display for Checksummed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl serde::Serialize for Checksummed {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl utoipa::PartialSchema for Checksummed {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{ObjectBuilder, Type};
        ObjectBuilder::new()
            .schema_type(Type::String)
            .description(Some("A wallet address, EIP-55 mixed case."))
            .examples(["0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed"])
            .into()
    }
}

impl utoipa::ToSchema for Checksummed {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_carry_eip55_addresses() {
        // EIP-55's own test vectors.
        let owner = Owner::parse("0x5aaeb6053f3e94c9b9a09f33669435e7ef1beaed").unwrap();
        assert_eq!(
            serde_json::to_value(owner.checksummed()).unwrap(),
            "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed"
        );
        let payer = Checksummed::from("0xFB6916095CA1DF60BB79CE92CE3EA74C37C5D359");
        assert_eq!(
            payer.to_string(),
            "0xfB6916095ca1df60bB79Ce92cE3Ea74c37c5d359"
        );
        for other in ["not an address", "0x5aaeb6053f3e94c9b9a09f33669435e7ef1bea"] {
            assert_eq!(Checksummed::from(other).to_string(), other);
        }
    }

    #[test]
    fn an_owner_is_checked_where_it_enters() {
        let owner = Owner::parse("0xAbCdEf0123456789aBcDeF0123456789AbCdEf01").unwrap();
        assert_eq!(owner, "0xabcdef0123456789abcdef0123456789abcdef01");
        let stored: Owner = serde_json::from_value(serde_json::json!(owner.as_str())).unwrap();
        assert_eq!(stored, owner);
        assert_eq!(serde_json::to_value(&owner).unwrap(), owner.as_str());
        assert!(Owner::parse("0xabc").is_none());
        assert!(serde_json::from_value::<Owner>(serde_json::json!("alice")).is_err());
        let signer = alloy_primitives::Address::repeat_byte(0xAB);
        assert_eq!(Owner::of(signer).as_str(), format!("0x{}", "ab".repeat(20)));
    }

    #[test]
    fn canonical_lowercase() {
        assert_eq!(
            parse("0xAbCdEf0123456789aBcDeF0123456789AbCdEf01").unwrap(),
            "0xabcdef0123456789abcdef0123456789abcdef01"
        );
        for bad in [
            "",
            "0x",
            "abcdef0123456789abcdef0123456789abcdef01",
            "0xZZcdef0123456789abcdef0123456789abcdef01",
            "0xabc",
        ] {
            assert!(parse(bad).is_none(), "{bad}");
        }
    }
}
