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
        // CDP hands out SEC1 (`EC PRIVATE KEY`) PEMs; the signer takes PKCS#8 (`PRIVATE KEY`,
        // taken as it is).
        use p256::pkcs8::{DecodePrivateKey, EncodePrivateKey};
        let pem = pem::parse(secret.expose().trim())
            .map_err(|e| format!("CDP_API_KEY_SECRET is not a PEM: {e}"))?;
        let key = match pem.tag() {
            "PRIVATE KEY" => p256::SecretKey::from_pkcs8_der(pem.contents()).ok(),
            _ => p256::SecretKey::from_sec1_der(pem.contents()).ok(),
        }
        .ok_or("CDP_API_KEY_SECRET is not a P-256 private key")?;
        let pkcs8 = key
            .to_pkcs8_der()
            .map_err(|_| "cannot encode the CDP key".to_owned())?;
        (Algorithm::ES256, EncodingKey::from_ec_der(pkcs8.as_bytes()))
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

    // The same key as PKCS#8 (openssl pkcs8 -topk8 -nocrypt).
    const PKCS8_PRIVATE: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg+It6gwBZp3u1mQSL
yWfp0EH0uv9y/ulOH/a8uLIUU/qhRANCAAQ/syK6MzbMMnWXKrduFwuYy+40UfME
oUXTbvS1Lk92kFqdtw6ArMhPBd7L8Qvji+AjBtxVF9mhRzPmCY8eDrNX
-----END PRIVATE KEY-----";

    #[test]
    fn a_pkcs8_key_signs_as_its_sec1_form_and_other_curves_are_refused() {
        let token = jwt("k", &Secret::new(PKCS8_PRIVATE), "GET", "https://h/x", 0).unwrap();
        let mut validation = Validation::new(Algorithm::ES256);
        validation.validate_exp = false;
        validation.set_required_spec_claims::<&str>(&[]);
        let key = DecodingKey::from_ec_pem(EC_PUBLIC.as_bytes()).unwrap();
        assert!(decode::<serde_json::Value>(&token, &key, &validation).is_ok());
        // A P-384 key (openssl ecparam -name secp384r1 -genkey -noout), made for this test.
        let p384 = r"-----BEGIN EC PRIVATE KEY-----
MIGkAgEBBDAQ18mFsMcdgkKXujL7cGzarknVnXZwpX2nb+94mgViA/2Ku1MYoBWB
ySMlLNFWZKagBwYFK4EEACKhZANiAAR7s4vdw2NCdw9o0p3Ym4tgTpgQGlabEdtS
vTUWHy+Mz6SUv4V+fbpnr7HmJZiV+HxnqP+YVRV8n+jXpJkOFlqgNw8UUPfFLbRf
RhV9xAM2f6Evdzlh+YlpP0JDxQZrpoA=
-----END EC PRIVATE KEY-----";
        let refused = jwt("k", &Secret::new(p384), "GET", "https://h/x", 0).unwrap_err();
        assert_eq!(refused, "CDP_API_KEY_SECRET is not a P-256 private key");
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
