//! Coinbase CDP's API authentication (`reference/x402.md` §3): every request carries
//! `Authorization: Bearer <JWT>`, a fresh JWT per request, valid 120 s. Header: `alg` ES256 (the
//! secret is an EC private key PEM) or EdDSA (the secret is base64 of 64 bytes, the Ed25519
//! seed first), `kid` = the key id. Claims: `sub` = key id, `iss` = `cdp`, `nbf` = `iat` = now,
//! `exp` = now + 120, `uris` = [`"<METHOD> <host><path>"`].

use base64::Engine;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde::Serialize;

use crate::secrets::Secret;

/// Seconds a JWT is valid.
pub const JWT_LIFETIME_SECS: i64 = 120;

/// PKCS#8 prefix of an Ed25519 private key (RFC 8410): the DER a 32-byte seed is wrapped in.
const ED25519_PKCS8_PREFIX: [u8; 16] = [
    0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20,
];

#[derive(Serialize)]
struct Claims<'a> {
    sub: &'a str,
    iss: &'a str,
    nbf: i64,
    iat: i64,
    exp: i64,
    uris: Vec<String>,
}

/// The JWT for one request `method url` at unix time `now`.
///
/// Errors: a secret that is neither an EC PEM nor base64 of 64 bytes; a URL without a host.
pub fn jwt(
    key_id: &str,
    secret: &Secret,
    method: &str,
    url: &str,
    now: i64,
) -> Result<String, String> {
    let parsed: reqwest::Url = url.parse().map_err(|e| format!("facilitator URL: {e}"))?;
    let host = parsed.host_str().ok_or("facilitator URL without a host")?;
    let (algorithm, key) = if secret.expose().contains("BEGIN") {
        // CDP hands out SEC1 (`EC PRIVATE KEY`) PEMs; the signer takes PKCS#8.
        let pem = pem::parse(secret.expose().trim())
            .map_err(|e| format!("CDP_API_KEY_SECRET is not a PEM: {e}"))?;
        let pair = aws_lc_rs::signature::EcdsaKeyPair::from_private_key_der(
            &aws_lc_rs::signature::ECDSA_P256_SHA256_FIXED_SIGNING,
            pem.contents(),
        )
        .map_err(|_| "CDP_API_KEY_SECRET is not a P-256 private key".to_owned())?;
        let pkcs8 = pair
            .to_pkcs8v1()
            .map_err(|_| "cannot encode the CDP key".to_owned())?;
        (Algorithm::ES256, EncodingKey::from_ec_der(pkcs8.as_ref()))
    } else {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(secret.expose().trim())
            .map_err(|_| "CDP_API_KEY_SECRET is neither a PEM nor base64".to_owned())?;
        if bytes.len() != 64 {
            return Err("an Ed25519 CDP_API_KEY_SECRET must be 64 bytes".into());
        }
        let mut der = ED25519_PKCS8_PREFIX.to_vec();
        der.extend_from_slice(&bytes[..32]);
        (Algorithm::EdDSA, EncodingKey::from_ed_der(&der))
    };
    let mut header = Header::new(algorithm);
    header.kid = Some(key_id.to_owned());
    let claims = Claims {
        sub: key_id,
        iss: "cdp",
        nbf: now,
        iat: now,
        exp: now + JWT_LIFETIME_SECS,
        uris: vec![format!("{method} {host}{}", parsed.path())],
    };
    jsonwebtoken::encode(&header, &claims, &key)
        .map_err(|e| format!("cannot sign the CDP JWT: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use jsonwebtoken::{DecodingKey, Validation, decode};

    // A throwaway P-256 key made for this test (openssl ecparam -name prime256v1 -genkey).
    const EC_PRIVATE: &str = "-----BEGIN EC PRIVATE KEY-----
MHcCAQEEIPiLeoMAWad7tZkEi8ln6dBB9Lr/cv7pTh/2vLiyFFP6oAoGCCqGSM49
AwEHoUQDQgAEP7MiujM2zDJ1lyq3bhcLmMvuNFHzBKFF0270tS5PdpBanbcOgKzI
TwXey/EL44vgIwbcVRfZoUcz5gmPHg6zVw==
-----END EC PRIVATE KEY-----";
    const EC_PUBLIC: &str = "-----BEGIN PUBLIC KEY-----
MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEP7MiujM2zDJ1lyq3bhcLmMvuNFHz
BKFF0270tS5PdpBanbcOgKzITwXey/EL44vgIwbcVRfZoUcz5gmPHg6zVw==
-----END PUBLIC KEY-----";

    #[test]
    fn es256_jwt_verifies_and_carries_the_request() {
        let now = crate::time::now().unix_timestamp();
        let token = jwt(
            "key-1",
            &Secret::new(EC_PRIVATE),
            "POST",
            "https://api.cdp.coinbase.com/platform/v2/x402/settle",
            now,
        )
        .unwrap();
        let mut validation = Validation::new(Algorithm::ES256);
        validation.set_issuer(&["cdp"]);
        validation.set_required_spec_claims(&["exp", "nbf", "iss", "sub"]);
        let data = decode::<serde_json::Value>(
            &token,
            &DecodingKey::from_ec_pem(EC_PUBLIC.as_bytes()).unwrap(),
            &validation,
        )
        .unwrap();
        assert_eq!(data.header.kid.as_deref(), Some("key-1"));
        assert_eq!(data.claims["sub"], "key-1");
        assert_eq!(data.claims["exp"], now + 120);
        assert_eq!(
            data.claims["uris"][0],
            "POST api.cdp.coinbase.com/platform/v2/x402/settle"
        );
    }

    #[test]
    fn ed25519_secrets_sign_eddsa() {
        let secret = base64::engine::general_purpose::STANDARD.encode([7u8; 64]);
        let token = jwt(
            "k",
            &Secret::new(secret),
            "POST",
            "https://h.example/verify",
            0,
        )
        .unwrap();
        let header = jsonwebtoken::decode_header(&token).unwrap();
        assert_eq!(header.alg, Algorithm::EdDSA);
        assert!(
            jwt(
                "k",
                &Secret::new("bm90IDY0IGJ5dGVz"),
                "POST",
                "https://h/x",
                0
            )
            .is_err()
        );
    }
}
