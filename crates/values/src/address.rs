//! Wallet addresses: the owner of every record (a value of the bottom layer; the 400 naming a
//! field is `shared::validate::address`).

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

/// The fields of an answer that hold a wallet address: `owner`, `payer`, `address`.
const ADDRESS_FIELDS: [&str; 3] = ["owner", "payer", "address"];

/// An address in its EIP-55 mixed-case form (as wallets and viem show it); anything that is
/// not an address is returned unchanged.
pub fn eip55(value: &str) -> String {
    match value.parse::<alloy_primitives::Address>() {
        Ok(address) if value.len() == 42 => address.to_checksum(None),
        _ => value.to_owned(),
    }
}

/// Rewrites, at any depth of an answer, the wallet address fields (`owner`, `payer`,
/// `address`) into EIP-55: addresses are stored and compared lowercase, and answered as wallets
/// show them. Called once per face: `shared::http::json` and the MCP tool results.
pub fn answer_eip55(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Object(map) => {
            for (key, field) in map.iter_mut() {
                match field {
                    serde_json::Value::String(text) if ADDRESS_FIELDS.contains(&key.as_str()) => {
                        *text = eip55(text);
                    }
                    other => answer_eip55(other),
                }
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(answer_eip55),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_carry_eip55_addresses() {
        let mut answer = serde_json::json!({
            "owner": "0x5aaeb6053f3e94c9b9a09f33669435e7ef1beaed",
            "items": [{"payer": "0xfb6916095ca1df60bb79ce92ce3ea74c37c5d359", "name": "owner"}],
            "address": "not an address",
            "payTo": "0x5aaeb6053f3e94c9b9a09f33669435e7ef1beaed",
        });
        answer_eip55(&mut answer);
        // EIP-55's own test vectors.
        assert_eq!(
            answer["owner"],
            "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed"
        );
        assert_eq!(
            answer["items"][0]["payer"],
            "0xfB6916095ca1df60bB79Ce92cE3Ea74c37c5d359"
        );
        assert_eq!(answer["items"][0]["name"], "owner");
        assert_eq!(answer["address"], "not an address");
        assert_eq!(
            answer["payTo"],
            "0x5aaeb6053f3e94c9b9a09f33669435e7ef1beaed"
        );
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
