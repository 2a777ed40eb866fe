//! SSH keys are the owner's (issue 33): an owner adds OpenSSH public keys
//! (`POST /api/ssh-keys`), names them on a provisioning or a rebuild (`sshKeys`: its key ids,
//! the provider's ids of its keys, or raw public keys, added on the fly), and only its own keys
//! ever reach its servers: an id of the operator's provider account that is not one of the
//! owner's keys is refused.
//!
//! - **Parsing** ([`parse_public_key`]) takes one OpenSSH public key line (`ssh-ed25519`,
//!   `ecdsa-sha2-nistp256/384/521`, `ssh-rsa` of at least [`MIN_RSA_BITS`] bits,
//!   `sk-ssh-ed25519@openssh.com`) with the `ssh-key` crate; a private key, `authorized_keys`
//!   options, several keys or another algorithm is refused, saying why.
//! - **Adding** a key writes only its record, with the API key that added it: nothing reaches
//!   the provider's account (shared by every tenant through one token) until a server is paid
//!   for. A key added by an API key is disabled, saying why, once that key is revoked or expires
//!   (as a webhook endpoint is): it is no longer offered nor taken on a server.
//! - **Registration** with the provider (`POST /ssh-keys`, label `svc <owner> <id> <token>`)
//!   happens when a paid create, or a rebuild of an owned server, first uses the key
//!   ([`register_keys`]; a rebuild's registrations count against the owner's budget of provider
//!   writes, `PROVIDER_WRITES_PER_SECOND`: [`register_for_rebuild`]). The record is claimed first
//!   ([`CLAIM_SECONDS`]); a refusal deletes it (nothing is left half-made); a lost answer leaves
//!   the claim, and whoever finds it lapsed looks the label up before sending again
//!   (`store::ssh_keys`).
//! - **Deletion** removes the record at once; the provider's copy is removed by the
//!   reconciler's pass ([`retire_due`]) once [`RETIRE_AFTER_SECONDS`] passed and no order in
//!   flight names it (servers already made keep the key: the provider copies it at creation).

use std::collections::BTreeSet;

use russh::keys::ssh_key::{Algorithm, HashAlg, PublicKey, public::KeyData};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::Digest;

use crate::deadline::Deadline;
use crate::error::ApiError;
use crate::identity::auth::Principal;
use crate::ids::SSH_KEY;
use crate::page::PageRequest;
use crate::state::AppState;
use crate::store::ssh_keys::{AuthorizedKey, Retirement, SshKeyRecord};
use crate::store::{Page, StoreError};
use crate::upstream::UpstreamError;

/// The fewest bits an RSA key may have.
pub const MIN_RSA_BITS: u32 = 2048;
/// The most keys one provisioning or rebuild may name.
pub const MAX_PER_SERVER: usize = 20;
/// How long a registration holds its key before another may take it over, seconds.
pub const CLAIM_SECONDS: i64 = 30;
/// How long after a deletion the provider's copy is first considered for removal, seconds (a
/// request that read the key before it was deleted has claimed its order by then).
pub const RETIRE_AFTER_SECONDS: i64 = 60;
/// A public key line, for the documents.
const EXAMPLE_KEY: &str = concat!(
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEUwtq0dnKZIwio9dsNtAZXA6XuOXMlBmgWGp1VGJOQf ",
    "agent@example"
);
/// The longest public key text taken, bytes (an RSA key of 16,384 bits is about 2,800).
const MAX_KEY_BYTES: usize = 8192;

/// `POST /api/ssh-keys`: a public key and, optionally, a name for it.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NewSshKey {
    /// 1-64 characters; absent: the key's comment, or `key <fingerprint's first 8>`.
    #[serde(default)]
    #[schema(example = "laptop")]
    pub name: Option<String>,
    /// One OpenSSH public key line, e.g. the contents of `~/.ssh/id_ed25519.pub`.
    #[schema(example = json!(EXAMPLE_KEY))]
    pub public_key: String,
}

/// A key as answered.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SshKey {
    /// `ssh_<32 hex>` (the same for the same owner and key).
    pub id: String,
    /// Its name.
    pub name: String,
    /// `SHA256:<base64>`, as `ssh-keygen -lf` prints it.
    pub fingerprint: String,
    /// e.g. `ssh-ed25519`.
    pub algorithm: String,
    /// `<algorithm> <base64>` (without the comment).
    pub public_key: String,
    /// When it was added, RFC 3339.
    pub created_at: crate::time::Timestamp,
    /// Whether the provider holds it: a key is registered when a paid server or a rebuild
    /// first uses it, never when it is added.
    pub registered: bool,
    /// Why it can no longer be used, when it cannot: the API key that added it was revoked or
    /// expired. Absent while it can.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disabled: Option<String>,
}

impl From<&SshKeyRecord> for SshKey {
    fn from(record: &SshKeyRecord) -> SshKey {
        SshKey {
            id: record.id.clone(),
            name: record.name.clone(),
            fingerprint: record.fingerprint.clone(),
            algorithm: record.algorithm.clone(),
            public_key: record.public_key.clone(),
            created_at: record.created_at,
            registered: record.provider_id.is_some(),
            disabled: None,
        }
    }
}

/// A public key that passed [`parse_public_key`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedKey {
    /// `<algorithm> <base64>`.
    pub text: String,
    /// `SHA256:<base64>`.
    pub fingerprint: String,
    /// e.g. `ssh-ed25519`.
    pub algorithm: String,
    /// The comment after the key, if any.
    pub comment: String,
}

/// One entry of `sshKeys`: how a request names a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyRef {
    /// One of the owner's keys, `ssh_…`.
    Id(String),
    /// The provider's id of one of the owner's keys (the old `ssh_keys` form).
    Provider(u64),
    /// A public key, added to the owner's keys if it is not one already.
    Raw(ParsedKey),
}

/// The algorithms taken.
const ALGORITHMS: [&str; 6] = [
    "ssh-ed25519",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "ssh-rsa",
    "sk-ssh-ed25519@openssh.com",
];

/// Parses one OpenSSH public key line.
///
/// Errors: 400 naming `field`, saying why: empty, too long, a private key, several lines,
/// `authorized_keys` options before the key, an algorithm not taken (DSA, certificates, …),
/// not a well-formed key, an RSA key under [`MIN_RSA_BITS`] bits.
pub fn parse_public_key(field: &str, text: &str) -> Result<ParsedKey, ApiError> {
    let bad = |why: String| ApiError::invalid(field, why);
    let text = text.trim();
    if text.is_empty() {
        return Err(bad("is empty: paste one OpenSSH public key line".into()));
    }
    if text.len() > MAX_KEY_BYTES {
        return Err(bad(format!("is longer than {MAX_KEY_BYTES} bytes")));
    }
    if text.contains("PRIVATE KEY") {
        return Err(bad(
            "is a private key: paste the public key (the .pub file), and keep the private key \
             to yourself"
                .into(),
        ));
    }
    let lines = text.lines().filter(|l| !l.trim().is_empty()).count();
    if lines > 1 {
        return Err(bad(format!("holds {lines} lines: give one key per entry")));
    }
    let first = text.split_whitespace().next().unwrap_or_default();
    if !ALGORITHMS.contains(&first) {
        let later = text
            .split_whitespace()
            .skip(1)
            .any(|w| ALGORITHMS.contains(&w));
        return Err(bad(if later {
            "starts with authorized_keys options (from=, command=, …): give the key alone".into()
        } else {
            format!(
                "algorithm `{first}` is not taken; use one of {}",
                ALGORITHMS.join(", ")
            )
        }));
    }
    let key = PublicKey::from_openssh(text)
        .map_err(|e| bad(format!("is not a well-formed OpenSSH public key ({e})")))?;
    if let KeyData::Rsa(rsa) = key.key_data() {
        let bits = rsa.key_size();
        if bits < MIN_RSA_BITS {
            return Err(bad(format!(
                "is an RSA key of {bits} bits; at least {MIN_RSA_BITS} are needed"
            )));
        }
    }
    let comment = key.comment().as_str_lossy().to_owned();
    let mut bare = key.clone();
    bare.set_comment("");
    let algorithm = key.algorithm();
    Ok(ParsedKey {
        text: bare
            .to_openssh()
            .map_err(|e| bad(format!("cannot be written back ({e})")))?
            .trim()
            .to_owned(),
        fingerprint: key.fingerprint(HashAlg::Sha256).to_string(),
        algorithm: algorithm_name(&algorithm),
        comment,
    })
}

fn algorithm_name(algorithm: &Algorithm) -> String {
    algorithm.as_str().to_owned()
}

/// The entries of `sshKeys` (or its alias `ssh_keys`), shape only: `ssh_…` ids, provider ids
/// (numbers or numeric strings), or public key lines; at most [`MAX_PER_SERVER`].
///
/// Errors: 400 naming `field` or `field[i]`.
pub fn key_refs(field: &str, values: &[Value]) -> Result<Vec<KeyRef>, ApiError> {
    if values.len() > MAX_PER_SERVER {
        return Err(ApiError::invalid(
            field,
            format!("at most {MAX_PER_SERVER} SSH keys"),
        ));
    }
    values
        .iter()
        .enumerate()
        .map(|(i, value)| {
            let item = format!("{field}[{i}]");
            match value {
                Value::Number(n) => n
                    .as_u64()
                    .filter(|n| *n > 0 && *n < 1_000_000_000_000_000)
                    .map(KeyRef::Provider)
                    .ok_or_else(|| ApiError::invalid(&item, "must be a positive numeric id")),
                Value::String(s) if s.starts_with(SSH_KEY) => {
                    crate::ids::parse(SSH_KEY, &item, s).map(|id| KeyRef::Id(id.to_owned()))
                }
                Value::String(s) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => {
                    Ok(KeyRef::Provider(crate::validate::numeric_id(&item, s)?))
                }
                Value::String(s) => parse_public_key(&item, s).map(KeyRef::Raw),
                _ => Err(ApiError::invalid(
                    &item,
                    "must be an SSH key id (ssh_…), a public key line, or the provider's id of \
                     one of your keys",
                )),
            }
        })
        .collect()
}

/// The keys a request named under `sshKeys` or under its alias `ssh_keys` (the provider's
/// name), with the field's name for errors; none when neither is given.
///
/// Errors: 400 naming `ssh_keys` when both are given; those of [`key_refs`].
pub fn named(
    ssh_keys: Option<Vec<Value>>,
    alias: Option<Vec<Value>>,
) -> Result<(String, Vec<KeyRef>), ApiError> {
    match (ssh_keys, alias) {
        (Some(_), Some(_)) => Err(ApiError::invalid(
            "ssh_keys",
            "give sshKeys or its alias ssh_keys, not both",
        )),
        (Some(keys), None) => Ok(("sshKeys".to_owned(), key_refs("sshKeys", &keys)?)),
        (None, Some(keys)) => Ok(("ssh_keys".to_owned(), key_refs("ssh_keys", &keys)?)),
        (None, None) => Ok(("sshKeys".to_owned(), Vec::new())),
    }
}

/// The id of `owner`'s key with `fingerprint`: `ssh_` and the first 32 hex digits of
/// SHA-256 of both (so one owner holds one key once).
fn key_id(owner: &crate::address::Owner, fingerprint: &str) -> String {
    let digest = sha2::Sha256::digest(format!("{owner}\n{fingerprint}").as_bytes());
    format!("{SSH_KEY}{}", &hex::encode(digest)[..32])
}

/// A record of `key` for the caller, not registered, with the API key that adds it.
fn new_record(
    state: &AppState,
    principal: &Principal,
    name: &str,
    key: &ParsedKey,
) -> SshKeyRecord {
    let id = key_id(&principal.owner, &key.fingerprint);
    let now = state.clock.now();
    SshKeyRecord {
        label: format!("svc {} {id} {}", principal.owner, crate::ids::random_hex(4)),
        id,
        owner: principal.owner.clone(),
        name: name.to_owned(),
        public_key: key.text.clone(),
        fingerprint: key.fingerprint.clone(),
        algorithm: key.algorithm.clone(),
        created_at: crate::time::Timestamp::from_unix(now),
        provider_id: None,
        claimed_until: None,
        key_id: match &principal.credential {
            crate::identity::auth::Credential::ApiKey { key_id, .. } => Some(key_id.clone()),
            crate::identity::auth::Credential::Session { .. } => None,
        },
    }
}

/// The name a key gets when none is given: its comment, or `key <fingerprint's first 8>`.
fn default_name(key: &ParsedKey) -> String {
    let comment: String = key.comment.trim().chars().take(64).collect();
    if crate::validate::name("name", &comment).is_ok() {
        comment
    } else {
        let digits = key.fingerprint.trim_start_matches("SHA256:");
        format!("key {}", &digits[..digits.len().min(8)])
    }
}

/// Adds `key` to the caller's keys (or finds it there): a record only, nothing at the
/// provider. Answers the record and whether it is new.
///
/// Errors: 409 at the cap; 503 while it is being deleted; the store's.
async fn add_key(
    state: &AppState,
    principal: &Principal,
    name: &str,
    key: &ParsedKey,
) -> Result<(SshKeyRecord, bool), ApiError> {
    let record = new_record(state, principal, name, key);
    let cap = state.config.caps.ssh_keys;
    match state.store.add_ssh_key(&record, cap).await {
        Ok(()) => Ok((record, true)),
        Err(StoreError::ConditionFailed) => {
            let found = state
                .store
                .ssh_key(&principal.owner, &record.id)
                .await?
                .ok_or_else(|| ApiError::Busy {
                    message: "this key is being deleted: add it again in a moment".into(),
                    retry_after: 1,
                })?;
            Ok((found, false))
        }
        Err(StoreError::CapReached(_)) => Err(ApiError::Conflict(format!(
            "this wallet has {cap} SSH keys, the most allowed: delete one first"
        ))),
        Err(other) => Err(other.into()),
    }
}

/// `record` registered with the provider: as it is when it already is; else registered now,
/// once its claim is taken. A registration taken over from an earlier claim looks the label up
/// first (that answer may have been lost).
///
/// Errors: 400 naming `field` when the provider refuses the key (the record is deleted); 503
/// while another holds the claim; the provider's; the store's.
async fn register(
    state: &AppState,
    record: SshKeyRecord,
    field: &str,
) -> Result<SshKeyRecord, ApiError> {
    if record.provider_id.is_some() {
        return Ok(record);
    }
    let upstream = state.upstream()?;
    let now = state.clock.now();
    let until = now + CLAIM_SECONDS;
    if !state
        .store
        .claim_ssh_key(&record.owner, &record.id, now, until)
        .await?
    {
        // Registered meanwhile by whoever held it: as it is now.
        let now_read = state.store.ssh_key(&record.owner, &record.id).await?;
        if let Some(done) = now_read.filter(|r| r.provider_id.is_some()) {
            return Ok(done);
        }
        return Err(ApiError::Busy {
            message: format!("SSH key {} is being registered: ask again", record.id),
            retry_after: record
                .claimed_until
                .map_or(1, |c| (c - now).clamp(1, 30) as u64),
        });
    }
    // Claimed before: that registration may have been sent and its answer lost.
    if record.claimed_until.is_some()
        && let Some(found) = find_by_label(upstream, &record.label).await?
    {
        return registered(state, record, found).await;
    }
    match upstream
        .add_ssh_key(&record.label, &record.public_key)
        .await
    {
        Ok(provider_id) => registered(state, record, provider_id).await,
        Err(UpstreamError::Status {
            status: 400 | 409 | 422,
            message,
            ..
        }) => {
            // Refused for good: nothing to retire.
            let unclaimed = SshKeyRecord {
                claimed_until: None,
                ..record.clone()
            };
            state.store.delete_ssh_key(&unclaimed, now).await?;
            Err(ApiError::invalid(
                field,
                format!("the provider refused this key: {message}"),
            ))
        }
        Err(err) => Err(err.into()),
    }
}

/// Writes that `record` is the provider's `provider_id`; a key deleted meanwhile has that copy
/// retired instead.
///
/// Errors: 409 when the key was deleted meanwhile; the store's.
async fn registered(
    state: &AppState,
    record: SshKeyRecord,
    provider_id: u64,
) -> Result<SshKeyRecord, ApiError> {
    if state
        .store
        .registered_ssh_key(&record.owner, &record.id, provider_id)
        .await?
    {
        return Ok(SshKeyRecord {
            provider_id: Some(provider_id),
            claimed_until: None,
            ..record
        });
    }
    let retirement = Retirement {
        label: record.label.clone(),
        owner: record.owner.clone(),
        provider_id: Some(provider_id),
        due: state.clock.now() + RETIRE_AFTER_SECONDS,
    };
    state.store.retire_ssh_key(&retirement).await?;
    Err(ApiError::Conflict(format!(
        "SSH key {} was deleted while it was being registered",
        record.id
    )))
}

/// The provider's id of the account key labelled `label`, if there is one.
async fn find_by_label(
    upstream: &crate::upstream::Client,
    label: &str,
) -> Result<Option<u64>, ApiError> {
    Ok(upstream
        .ssh_keys()
        .await?
        .iter()
        .find(|k| k["label"].as_str() == Some(label))
        .and_then(|k| k["id"].as_u64()))
}

/// `POST /api/ssh-keys`: adds a key to the caller's keys (nothing reaches the provider until a
/// paid server or a rebuild uses it). Answers the key and whether it is new (201) or was the
/// caller's already (200, as it was).
///
/// Errors: 400 naming `publicKey` (see [`parse_public_key`]) or `name`; 409 at
/// `MAX_SSH_KEYS_PER_OWNER`; 503 while the same key is being deleted; the store's.
pub async fn add(
    state: &AppState,
    principal: &Principal,
    request: NewSshKey,
) -> Result<(SshKey, bool), ApiError> {
    let key = parse_public_key("publicKey", &request.public_key)?;
    let name = match &request.name {
        Some(name) => crate::validate::name("name", name)?.to_owned(),
        None => default_name(&key),
    };
    let (record, created) = add_key(state, principal, &name, &key).await?;
    Ok((SshKey::from(&record), created))
}

/// Why `record` can no longer be used: the API key that added it was revoked or expired, or is
/// gone; `None` while it stands (or a session added it).
///
/// Errors: the store's.
async fn key_gone(state: &AppState, record: &SshKeyRecord) -> Result<Option<String>, ApiError> {
    let Some(key_id) = &record.key_id else {
        return Ok(None);
    };
    let now = state.clock.datetime();
    Ok(match state.store.api_key_by_id(key_id).await? {
        None => Some(format!("the API key {key_id} that added it is gone")),
        Some(key) => match key.status(now) {
            "active" => None,
            status => Some(format!("the API key {key_id} that added it was {status}")),
        },
    })
}

/// `record` as answered, disabled (saying why) once the API key that added it no longer stands.
///
/// Errors: the store's.
async fn view(state: &AppState, record: &SshKeyRecord) -> Result<SshKey, ApiError> {
    Ok(SshKey {
        disabled: key_gone(state, record).await?,
        ..SshKey::from(record)
    })
}

/// One page of the caller's keys, newest first.
///
/// Errors: 400 naming `limit` or `cursor`; the store's.
pub async fn list(
    state: &AppState,
    principal: &Principal,
    page: &PageRequest,
) -> Result<Page<SshKey>, ApiError> {
    let records = state
        .store
        .ssh_key_page(&principal.owner, page.limit, page.cursor.as_deref())
        .await?;
    let views = futures::future::try_join_all(records.items.iter().map(|r| view(state, r))).await?;
    Ok(Page {
        items: views,
        next_cursor: records.next_cursor,
    })
}

/// The caller's key `id`.
///
/// Errors: 400 for a malformed id; 404 for none of the caller's; the store's.
pub async fn get(state: &AppState, principal: &Principal, id: &str) -> Result<SshKey, ApiError> {
    view(state, &owned(state, principal, id).await?).await
}

async fn owned(
    state: &AppState,
    principal: &Principal,
    id: &str,
) -> Result<SshKeyRecord, ApiError> {
    crate::ids::parse(SSH_KEY, "id", id)?;
    state
        .store
        .ssh_key(&principal.owner, id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("SSH key {id} not found")))
}

/// Deletes the caller's key `id`: it can no longer be named, and the provider's copy is removed
/// by the reconciler's pass once no order in flight needs it. Servers made with it keep it.
///
/// Errors: 400 for a malformed id; 404 for none of the caller's; 503 when it changed meanwhile
/// (its registration was answered: ask again); the store's.
pub async fn delete(state: &AppState, principal: &Principal, id: &str) -> Result<(), ApiError> {
    let record = owned(state, principal, id).await?;
    let due = state.clock.now() + RETIRE_AFTER_SECONDS;
    if state.store.delete_ssh_key(&record, due).await? {
        Ok(())
    } else {
        Err(ApiError::Busy {
            message: format!("SSH key {id} changed while it was being deleted: ask again"),
            retry_after: 1,
        })
    }
}

/// The keys `refs` name, for the caller's server: each one of the caller's (a raw key is added
/// to them, a record only), each once, in the request's order. Nothing reaches the provider:
/// [`register_keys`] does that when the server is paid for (or rebuilt).
///
/// Errors: 400 naming `field[i]` for an id that is not one of the caller's keys (an id of the
/// provider's account that is not the caller's included), or a key disabled because the API
/// key that added it was revoked or expired; 409 at the cap; the store's.
pub async fn resolve(
    state: &AppState,
    principal: &Principal,
    field: &str,
    refs: &[KeyRef],
) -> Result<Vec<AuthorizedKey>, ApiError> {
    let mut authorized: Vec<AuthorizedKey> = Vec::new();
    if refs.is_empty() {
        return Ok(authorized);
    }
    let mut mine = state.store.ssh_keys_of(&principal.owner).await?;
    for (i, key) in refs.iter().enumerate() {
        let item = format!("{field}[{i}]");
        let found = match key {
            KeyRef::Id(id) => mine.iter().find(|r| &r.id == id).cloned().ok_or_else(|| {
                ApiError::invalid(
                    &item,
                    format!("{id} is not one of your SSH keys; see GET /api/ssh-keys"),
                )
            })?,
            KeyRef::Provider(n) => mine
                .iter()
                .find(|r| r.provider_id == Some(*n))
                .cloned()
                .ok_or_else(|| {
                    ApiError::invalid(
                        &item,
                        format!(
                            "{n} is not one of your SSH keys: add the key with POST \
                             /api/ssh-keys, or give its public key here"
                        ),
                    )
                })?,
            KeyRef::Raw(parsed) => {
                match mine.iter().find(|r| r.fingerprint == parsed.fingerprint) {
                    Some(record) => record.clone(),
                    None => {
                        let name = default_name(parsed);
                        let (record, _) = add_key(state, principal, &name, parsed).await?;
                        mine.push(record.clone());
                        record
                    }
                }
            }
        };
        if let Some(why) = key_gone(state, &found).await? {
            return Err(ApiError::invalid(
                &item,
                format!(
                    "SSH key {} is disabled: {why}; delete it and add it again",
                    found.id
                ),
            ));
        }
        if !authorized.iter().any(|a| a.id == found.id) {
            authorized.push(AuthorizedKey {
                id: found.id,
                fingerprint: found.fingerprint,
            });
        }
    }
    Ok(authorized)
}

/// The provider's ids of `owner`'s `keys`, in order: each registered with the provider now if
/// it is not yet (claimed first; a lost answer is found by its label). Called when a paid
/// create is about to use them.
///
/// Errors: 400 naming `field` when a key is no longer the owner's (deleted since) or the
/// provider refuses it; 503 while another registration of it is under way; the provider's; the
/// store's.
pub async fn register_keys(
    state: &AppState,
    owner: &crate::address::Owner,
    keys: &[AuthorizedKey],
    field: &str,
) -> Result<Vec<u64>, ApiError> {
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    let mine = records_of(state, owner, keys, field).await?;
    register_all(state, mine, field).await
}

/// The provider's ids of the keys a rebuild of `principal`'s server names (`field`, `keys`:
/// [`resolve`]d), registered now: each key the provider does not hold yet is one write at the
/// provider, counted first against the owner's budget of provider writes
/// (`PROVIDER_WRITES_PER_SECOND`; a paid create's keys are bounded by its payment instead).
///
/// Errors: 429 `provider-writes` past the budget, before anything is written; those of
/// [`register_keys`].
pub async fn register_for_rebuild(
    state: &AppState,
    principal: &Principal,
    keys: &[AuthorizedKey],
    field: &str,
) -> Result<Vec<u64>, ApiError> {
    let owner = &principal.owner;
    let mine = records_of(state, owner, keys, field).await?;
    let (now, budget) = (
        crate::ratelimit::now(state),
        state.config.rate_limits.provider_writes,
    );
    for _ in mine.iter().filter(|r| r.provider_id.is_none()) {
        let policy = "provider-writes";
        crate::ratelimit::check(state, policy, budget, owner.as_str(), now).await?;
    }
    register_all(state, mine, field).await
}

/// `owner`'s records of `keys`, in order (one read).
///
/// Errors: 400 naming `field` for a key deleted since; the store's.
async fn records_of(
    state: &AppState,
    owner: &crate::address::Owner,
    keys: &[AuthorizedKey],
    field: &str,
) -> Result<Vec<SshKeyRecord>, ApiError> {
    let mine = state.store.ssh_keys_of(owner).await?;
    keys.iter()
        .map(|key| {
            let found = mine.iter().find(|r| r.id == key.id).cloned();
            found.ok_or_else(|| ApiError::invalid(field, format!("SSH key {} was deleted", key.id)))
        })
        .collect()
}

/// `records` registered ([`register`]), their provider ids each once, in order.
async fn register_all(
    state: &AppState,
    records: Vec<SshKeyRecord>,
    field: &str,
) -> Result<Vec<u64>, ApiError> {
    let mut ids = Vec::with_capacity(records.len());
    for record in records {
        let id = register(state, record, field)
            .await?
            .provider_id
            .expect("registered");
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    Ok(ids)
}

/// What one pass did to the provider's copies of deleted keys.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RetireReport {
    /// Copies removed (or found gone).
    pub removed: usize,
    /// Copies an order in flight still names, or whose removal failed: tried again later.
    pub deferred: usize,
}

/// The provider's ids of the SSH keys that orders in flight will send with their create.
///
/// Errors: the store's.
async fn needed_by_orders(state: &AppState) -> Result<BTreeSet<u64>, ApiError> {
    let mut needed = BTreeSet::new();
    for in_flight in crate::store::payments::OrderState::IN_FLIGHT {
        let mut cursor: Option<String> = None;
        loop {
            let page = state
                .store
                .orders_in_state(in_flight, 100, cursor.as_deref())
                .await?;
            // A provisioning's request as stored (`billing::purchase::ValidProvisionRequest`):
            // its `ssh_keys` are the provider's ids its create sends.
            for order in &page.items {
                if let Ok(request) = serde_json::from_str::<Value>(&order.request) {
                    let ids = request["ssh_keys"].as_array().into_iter().flatten();
                    needed.extend(ids.filter_map(Value::as_u64));
                }
            }
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
    }
    Ok(needed)
}

/// The reconciler's step for deleted keys: removes the provider's copy of each retirement due,
/// unless an order in flight still names it (then, and on a provider failure, it is due again
/// [`RETIRE_AFTER_SECONDS`] later). A copy the provider no longer has counts as removed.
///
/// Errors: the store's (listing the retirements or the orders).
pub async fn retire_due(state: &AppState, deadline: &Deadline) -> Result<RetireReport, ApiError> {
    let mut report = RetireReport::default();
    let due = state.store.retirements_due(state.clock.now(), 25).await?;
    if due.is_empty() {
        return Ok(report);
    }
    let upstream = state.upstream()?;
    let needed = needed_by_orders(state).await?;
    for retirement in due {
        if !deadline.allows(state.config.upstream.timeout) {
            break;
        }
        let provider_id = match retirement.provider_id {
            Some(id) => Ok(Some(id)),
            None => find_by_label(upstream, &retirement.label).await,
        };
        let removed = match provider_id {
            Ok(Some(id)) if needed.contains(&id) => false,
            Ok(Some(id)) => match upstream.delete_ssh_key(id).await {
                Ok(()) | Err(UpstreamError::Status { status: 404, .. }) => true,
                Err(err) => {
                    tracing::warn!(key = id, error = %err, "cannot remove a deleted SSH key");
                    false
                }
            },
            Ok(None) => true,
            Err(err) => {
                tracing::warn!(label = retirement.label, error = %err, "cannot list SSH keys");
                false
            }
        };
        if removed {
            state.store.retired_ssh_key(&retirement).await?;
            report.removed += 1;
        } else {
            let later = Retirement {
                due: state.clock.now() + RETIRE_AFTER_SECONDS,
                ..retirement
            };
            state.store.retire_ssh_key(&later).await?;
            report.deferred += 1;
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests;
