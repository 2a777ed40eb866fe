//! An agent's side of SSH (issue 33): a fresh key pair as `ssh-keygen -t ed25519` makes, its
//! public key line, and a login with `russh` that accepts the server only with the host key the
//! API answered, then runs `hostname`.

use std::sync::Arc;

use russh::keys::ssh_key::private::Ed25519Keypair;
use russh::keys::{HashAlg, PrivateKey, PrivateKeyWithHashAlg, PublicKeyOrCertificate};
use serde_json::Value;

/// A fresh ed25519 key pair, as an agent would make with `ssh-keygen -t ed25519`.
pub fn key_pair() -> PrivateKey {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).unwrap();
    let mut key = PrivateKey::from(Ed25519Keypair::from_seed(&seed));
    key.set_comment("agent@example");
    key
}

/// The `.pub` line of `key` (with its comment).
pub fn public(key: &PrivateKey) -> String {
    key.public_key().to_openssh().unwrap()
}

/// `SHA256:…` of `key`'s public half.
pub fn fingerprint(key: &PrivateKey) -> String {
    key.public_key().fingerprint(HashAlg::Sha256).to_string()
}

/// Accepts the server only if its host key is the one the API answered.
struct KnownHost(String);

impl russh::client::Handler for KnownHost {
    type Error = russh::Error;

    async fn check_server_key(
        &mut self,
        key: &PublicKeyOrCertificate,
    ) -> Result<bool, Self::Error> {
        Ok(matches!(key, PublicKeyOrCertificate::PublicKey { key, .. }
            if key.fingerprint(HashAlg::Sha256).to_string() == self.0))
    }
}

/// Logs in to `access` (`ipv4`, `sshPort`, `sshUser`, the first host key) with `key` and runs
/// `hostname`: its output, or why there was none.
pub async fn login(access: &Value, key: &PrivateKey) -> Result<String, String> {
    let address = (
        access["ipv4"].as_str().unwrap().to_owned(),
        access["sshPort"].as_u64().unwrap() as u16,
    );
    let host = KnownHost(
        access["hostKeys"][0]["fingerprint"]
            .as_str()
            .unwrap()
            .into(),
    );
    let config = Arc::new(russh::client::Config::default());
    let mut session = russh::client::connect(config, address, host)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let user = access["sshUser"].as_str().unwrap();
    let auth = session
        .authenticate_publickey(
            user,
            PrivateKeyWithHashAlg::new(Arc::new(key.clone()), None),
        )
        .await
        .map_err(|e| e.to_string())?;
    if !auth.success() {
        return Err("authentication refused".into());
    }
    let mut channel = session
        .channel_open_session()
        .await
        .map_err(|e| e.to_string())?;
    channel
        .exec(true, "hostname")
        .await
        .map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    while let Some(message) = channel.wait().await {
        if let russh::ChannelMsg::Data { data } = message {
            out.extend_from_slice(&data);
        }
    }
    Ok(String::from_utf8_lossy(&out).into_owned())
}
