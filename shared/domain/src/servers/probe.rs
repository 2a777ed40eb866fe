//! The readiness check (waiting, point 3): a server is `ready` when TCP port 22 answers and an
//! SSH key exchange completes; the host keys it presents are kept so an agent can verify the
//! host on first connect (`access.hostKeys`). Only the key exchange runs (no authentication:
//! the check stops at the host key), once per host-key algorithm the check asks for.
//!
//! Uses `russh` (RFC 4253 transport); fingerprints are OpenSSH's `SHA256:<base64>`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use russh::keys::{Algorithm, EcdsaCurve, HashAlg, PublicKey, PublicKeyOrCertificate};

use crate::store::sandboxes::HostKey;

/// Host-key algorithms asked for, in order: one key exchange each.
fn algorithms() -> [Algorithm; 3] {
    [
        Algorithm::Ed25519,
        Algorithm::Ecdsa {
            curve: EcdsaCurve::NistP256,
        },
        Algorithm::Rsa {
            hash: Some(HashAlg::Sha512),
        },
    ]
}

/// Why a server is not ready yet.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// No TCP connection (refused, unreachable) or no SSH key exchange within the timeout.
    #[error("port 22 does not answer: {0}")]
    Unreachable(String),
}

/// The host keys of the SSH server at `address` (`host:port`), one per algorithm it offers of
/// ed25519, ECDSA P-256 and RSA; each attempt within `timeout`.
///
/// Errors: [`ProbeError::Unreachable`] when not even one key exchange reached the host key.
pub async fn host_keys(address: &str, timeout: Duration) -> Result<Vec<HostKey>, ProbeError> {
    let mut keys = Vec::new();
    let mut last_error = String::from("no key exchange");
    for algorithm in algorithms() {
        match tokio::time::timeout(timeout, host_key(address, algorithm)).await {
            Ok(Ok(key)) => keys.push(HostKey {
                algorithm: key.algorithm().as_str().to_owned(),
                fingerprint: key.fingerprint(HashAlg::Sha256).to_string(),
            }),
            Ok(Err(err)) => {
                // A refused connection will not answer the next algorithm either.
                if keys.is_empty() && err.contains("connect") {
                    return Err(ProbeError::Unreachable(err));
                }
                last_error = err;
            }
            Err(_) => {
                last_error = format!("no answer within {} ms", timeout.as_millis());
                if keys.is_empty() {
                    break;
                }
            }
        }
    }
    if keys.is_empty() {
        return Err(ProbeError::Unreachable(last_error));
    }
    Ok(keys)
}

/// Keeps the host key the server presented, then stops the handshake there.
struct Collect(Arc<Mutex<Option<PublicKey>>>);

impl russh::client::Handler for Collect {
    type Error = russh::Error;

    async fn check_server_key(
        &mut self,
        key: &PublicKeyOrCertificate,
    ) -> Result<bool, Self::Error> {
        if let PublicKeyOrCertificate::PublicKey { key, .. } = key
            && let Ok(mut seen) = self.0.lock()
        {
            *seen = Some(key.clone());
        }
        Ok(false)
    }
}

/// One key exchange asking for `algorithm`: the host key, or why there was none.
async fn host_key(address: &str, algorithm: Algorithm) -> Result<PublicKey, String> {
    let config = russh::client::Config {
        preferred: russh::Preferred {
            key: std::borrow::Cow::Owned(vec![algorithm]),
            ..russh::Preferred::default()
        },
        ..russh::client::Config::default()
    };
    let seen = Arc::new(Mutex::new(None));
    let result = russh::client::connect(Arc::new(config), address, Collect(seen.clone())).await;
    if let Some(key) = seen.lock().ok().and_then(|mut k| k.take()) {
        return Ok(key);
    }
    match result {
        Err(russh::Error::IO(err)) => Err(format!("connect: {err}")),
        Err(err) => Err(err.to_string()),
        Ok(_) => Err("the server presented no plain host key".into()),
    }
}
