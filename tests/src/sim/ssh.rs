//! SSH at the simulated provider (issue 33): the account's SSH keys (`GET/POST /ssh-keys`,
//! `GET/PUT/DELETE /ssh-keys/{id}`, reference §3), and its servers' SSH daemons. With
//! [`Simulator::serve_ssh`], each server answers SSH on a loopback address of its own (its
//! `ip_addresses`) and the given port, with a host key of its own; it accepts a public-key login
//! as `root` for exactly the keys it was created or last rebuilt with (copied at that time, as a
//! provider writes `authorized_keys`: a key removed from the account later still logs in), and
//! answers one `exec` of `hostname`. [`SshListener`] is one listener that completes key
//! exchanges and refuses every login: the readiness check's target under `SSH_PROBE_TARGET`.

use std::sync::{Arc, Weak};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use russh::keys::ssh_key::private::Ed25519Keypair;
use russh::keys::{HashAlg, PrivateKey, PublicKey};
use russh::server::{Auth, Msg, PublicKeyOffer, Session, VerifiedPublicKey};
use russh::{Channel, ChannelId};
use serde_json::{Value, json};

use super::{Simulator, array, body_json, error};

/// A key of the account.
#[derive(Debug, Clone)]
pub(super) struct AccountKey {
    id: u64,
    label: String,
    /// The OpenSSH public key text, as given.
    pub(super) key: String,
    fingerprint: String,
    created: String,
}

impl AccountKey {
    fn render(&self) -> Value {
        json!({"id": self.id, "label": self.label, "key": self.key,
               "fingerprint": self.fingerprint, "created": self.created,
               "updated": self.created, "href": format!("/ssh-keys/{}", self.id)})
    }
}

/// The account's SSH key ids before any is added.
pub const SSH_KEY_IDS: [u64; 2] = [9845, 9846];

/// The keys the account starts with (the operator's own, with placeholder key texts).
pub(super) fn seed_keys() -> std::collections::BTreeMap<u64, AccountKey> {
    SSH_KEY_IDS
        .iter()
        .map(|&id| {
            let key = AccountKey {
                id,
                label: format!("key-{id}"),
                key: format!("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI{id} ci@example"),
                fingerprint: format!("SHA256:{id}"),
                created: "2026-01-05T10:00:00+00:00".into(),
            };
            (id, key)
        })
        .collect()
}

impl Simulator {
    /// Each server created from now on answers SSH on `port` of a loopback address of its own
    /// (the `127.0.0.0/8` addresses are all local on Linux), which its `ip_addresses` give.
    pub fn serve_ssh(&self, port: u16) {
        self.data.lock().unwrap().ssh_port = Some(port);
    }

    /// The account's keys as `(id, label)`.
    pub fn account_keys(&self) -> Vec<(u64, String)> {
        let data = self.data.lock().unwrap();
        data.keys
            .values()
            .map(|k| (k.id, k.label.clone()))
            .collect()
    }

    /// The key ids server `id` was created or last rebuilt with.
    pub fn server_key_ids(&self, id: u64) -> Option<Vec<u64>> {
        let data = self.data.lock().unwrap();
        data.servers.get(&id).map(|s| s.ssh_keys.clone())
    }
}

/// `GET /ssh-keys`.
pub(super) async fn list_keys(State(sim): State<Arc<Simulator>>) -> Response {
    let data = sim.data.lock().unwrap();
    array(data.keys.values().map(AccountKey::render).collect())
}

/// `POST /ssh-keys {label, key}`: 201 with the key; 400 for a key that does not parse.
pub(super) async fn add_key(State(sim): State<Arc<Simulator>>, body: Bytes) -> Response {
    let body = match body_json(&body) {
        Ok(b) => b,
        Err(m) => return error(StatusCode::BAD_REQUEST, m),
    };
    let (Some(label), Some(text)) = (body["label"].as_str(), body["key"].as_str()) else {
        return error(StatusCode::BAD_REQUEST, "Label and key are required.");
    };
    let Ok(parsed) = PublicKey::from_openssh(text) else {
        return error(StatusCode::BAD_REQUEST, "Invalid public key.");
    };
    let created = sim.clock.rfc3339();
    let mut data = sim.data.lock().unwrap();
    data.next_key_id += 1;
    let key = AccountKey {
        id: data.next_key_id,
        label: label.to_owned(),
        key: text.to_owned(),
        fingerprint: parsed.fingerprint(HashAlg::Sha256).to_string(),
        created,
    };
    let rendered = key.render();
    data.keys.insert(key.id, key);
    (StatusCode::CREATED, axum::Json(rendered)).into_response()
}

/// `GET /ssh-keys/{id}`.
pub(super) async fn get_key(State(sim): State<Arc<Simulator>>, Path(id): Path<String>) -> Response {
    let data = sim.data.lock().unwrap();
    match id.parse::<u64>().ok().and_then(|id| data.keys.get(&id)) {
        Some(key) => axum::Json(key.render()).into_response(),
        None => error(StatusCode::NOT_FOUND, "SSH key not found."),
    }
}

/// `PUT /ssh-keys/{id} {label?}`: 201 (the provider's quirk) with the key.
pub(super) async fn update_key(
    State(sim): State<Arc<Simulator>>,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    let body = match body_json(&body) {
        Ok(b) => b,
        Err(m) => return error(StatusCode::BAD_REQUEST, m),
    };
    let mut data = sim.data.lock().unwrap();
    match id.parse::<u64>().ok().and_then(|id| data.keys.get_mut(&id)) {
        Some(key) => {
            if let Some(label) = body["label"].as_str() {
                key.label = label.to_owned();
            }
            (StatusCode::CREATED, axum::Json(key.render())).into_response()
        }
        None => error(StatusCode::NOT_FOUND, "SSH key not found."),
    }
}

/// `DELETE /ssh-keys/{id}`: 204; servers keep the key.
pub(super) async fn delete_key(
    State(sim): State<Arc<Simulator>>,
    Path(id): Path<String>,
) -> Response {
    let mut data = sim.data.lock().unwrap();
    match id.parse::<u64>().ok().and_then(|id| data.keys.remove(&id)) {
        Some(_) => StatusCode::NO_CONTENT.into_response(),
        None => error(StatusCode::NOT_FOUND, "SSH key not found."),
    }
}

/// A fresh ed25519 host key and its `SHA256:` fingerprint.
fn host_key() -> std::io::Result<(PrivateKey, String)> {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).map_err(|e| std::io::Error::other(e.to_string()))?;
    let key = PrivateKey::from(Ed25519Keypair::from_seed(&seed));
    let fingerprint = key.fingerprint(HashAlg::Sha256).to_string();
    Ok((key, fingerprint))
}

fn daemon_config(key: PrivateKey) -> Arc<russh::server::Config> {
    Arc::new(russh::server::Config {
        keys: vec![key],
        auth_rejection_time: Duration::from_millis(10),
        auth_rejection_time_initial: Some(Duration::ZERO),
        inactivity_timeout: Some(Duration::from_secs(5)),
        ..Default::default()
    })
}

/// Starts server `server`'s SSH daemon on `port` of a free loopback address; its address and
/// the guard that stops it.
pub(super) fn serve(
    sim: Weak<Simulator>,
    server: u64,
    port: u16,
) -> std::io::Result<(String, crate::Serving)> {
    let (key, _) = host_key()?;
    let mut last = None;
    for _ in 0..20 {
        let mut octets = [0u8; 3];
        getrandom::fill(&mut octets).map_err(|e| std::io::Error::other(e.to_string()))?;
        let address = format!(
            "127.{}.{}.{}",
            octets[0].max(1),
            octets[1],
            octets[2].clamp(2, 254)
        );
        match std::net::TcpListener::bind((address.as_str(), port)) {
            Ok(listener) => {
                listener.set_nonblocking(true)?;
                let listener = tokio::net::TcpListener::from_std(listener)?;
                let mut daemon = Daemon { sim, server };
                let config = daemon_config(key);
                let task = tokio::spawn(async move {
                    use russh::server::Server as _;
                    let _ = daemon.run_on_socket(config, &listener).await;
                });
                return Ok((address, crate::Serving::of(&task)));
            }
            Err(err) => last = Some(err),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no free loopback address")))
}

/// One server's SSH daemon.
#[derive(Clone)]
struct Daemon {
    sim: Weak<Simulator>,
    server: u64,
}

impl Daemon {
    /// Whether `user` may log in with `key`: `root`, and a key the server holds.
    fn admits(&self, user: &str, key: &PublicKey) -> bool {
        let Some(sim) = self.sim.upgrade() else {
            return false;
        };
        let data = sim.data.lock().unwrap();
        user == "root"
            && data.servers.get(&self.server).is_some_and(|s| {
                s.authorized.iter().any(|text| {
                    PublicKey::from_openssh(text).is_ok_and(|k| k.key_data() == key.key_data())
                })
            })
    }

    fn hostname(&self) -> Option<String> {
        let sim = self.sim.upgrade()?;
        let data = sim.data.lock().unwrap();
        data.servers.get(&self.server).map(|s| s.hostname.clone())
    }
}

impl russh::server::Server for Daemon {
    type Handler = Self;
    fn new_client(&mut self, _: Option<std::net::SocketAddr>) -> Self {
        self.clone()
    }
}

impl russh::server::Handler for Daemon {
    type Error = russh::Error;

    async fn auth_publickey_offered(
        &mut self,
        user: &str,
        offer: PublicKeyOffer<'_>,
    ) -> Result<Auth, Self::Error> {
        Ok(if self.admits(user, offer.public_key) {
            Auth::Accept
        } else {
            Auth::reject()
        })
    }

    async fn auth_publickey(
        &mut self,
        user: &str,
        key: VerifiedPublicKey<'_>,
    ) -> Result<Auth, Self::Error> {
        Ok(if self.admits(user, key.public_key) {
            Auth::Accept
        } else {
            Auth::reject()
        })
    }

    async fn channel_open_session(
        &mut self,
        _channel: Channel<Msg>,
        reply: russh::server::ChannelOpenHandle,
        _session: &mut Session,
    ) -> Result<(), Self::Error> {
        reply.accept().await;
        Ok(())
    }

    /// `hostname` answers the server's hostname (exit 0); anything else exits 127.
    async fn exec_request(
        &mut self,
        channel: ChannelId,
        data: &[u8],
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        let (out, code) = match (data, self.hostname()) {
            (b"hostname", Some(hostname)) => (format!("{hostname}\n"), 0),
            _ => ("command not found\n".to_owned(), 127),
        };
        session.channel_success(channel)?;
        if code == 0 {
            session.data(channel, out.into_bytes())?;
        } else {
            session.extended_data(channel, 1, out.into_bytes())?;
        }
        session.exit_status_request(channel, code)?;
        session.eof(channel)?;
        session.close(channel)?;
        Ok(())
    }
}

/// An SSH server that completes key exchanges with a fresh ed25519 host key and refuses every
/// authentication: what the readiness check dials in tests and under
/// `make dev` (`SSH_PROBE_TARGET`), standing in for a deployed server's port 22.
pub struct SshListener {
    /// `127.0.0.1:<port>`.
    pub address: String,
    /// `SHA256:…` fingerprint of its host key.
    pub fingerprints: Vec<String>,
    /// Listening until dropped.
    pub serving: crate::Serving,
}

#[derive(Clone)]
struct SshRefuser;

impl russh::server::Server for SshRefuser {
    type Handler = Self;
    fn new_client(&mut self, _: Option<std::net::SocketAddr>) -> Self {
        self.clone()
    }
}

impl russh::server::Handler for SshRefuser {
    type Error = russh::Error;
}

impl SshListener {
    /// Listens on `addr` (port 0 picks a free one) in the background with fresh host keys.
    pub async fn start(addr: &str) -> std::io::Result<SshListener> {
        let (key, fingerprint) = host_key()?;
        let config = daemon_config(key);
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let address = listener.local_addr()?.to_string();
        let task = tokio::spawn(async move {
            use russh::server::Server as _;
            let _ = SshRefuser.run_on_socket(config, &listener).await;
        });
        Ok(SshListener {
            address,
            fingerprints: vec![fingerprint],
            serving: crate::Serving::of(&task),
        })
    }
}
