//! The records of sandboxes and server ownership, and the values they hold (a status, a
//! lease, a watch), as the store reads and writes them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::address::Owner;
use crate::events::Outbox;

/// Who owns a server provisioned through this service.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerOwnership {
    /// Provider server id.
    pub server_id: u64,
    /// Owner's wallet address, lowercase.
    pub owner: Owner,
    /// The sandbox record written with it.
    pub sandbox_id: String,
    /// Provider project id.
    pub project_id: u64,
    /// RFC 3339.
    pub created_at: crate::time::Timestamp,
}

/// A sandbox's last known status: one the service writes itself, or the provider's server
/// `status` as last read.
///
/// Stored and answered as its plain text (`"provisioning"`, `"deployed"`, …), as the status was
/// before it had a type: text that names one of the service's own statuses ([`Status::OWN`])
/// reads as that variant, any other text as [`Status::Provider`]. The text of an item written
/// before this type existed therefore reads as the same status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "String", from = "String")]
pub enum Status {
    /// `recorded`: a metadata record (`POST /api/sandboxes`), written when it is created; it
    /// holds no server of its own.
    Recorded,
    /// `provisioning`: a paid order's sandbox, or a free server's intent, written with the
    /// sandbox before its server exists.
    Provisioning,
    /// `cancelled`: the order ended without a charge (refused, or its authorization expired), or
    /// the provider refused a free server's create or never created the server.
    Cancelled,
    /// `credited`: the order was paid but delivered no server (the create failed, or its first
    /// deployment failed): a credit its owner can redeem.
    Credited,
    /// `redeemed`: the credit of this sandbox's order was redeemed by another request (with its
    /// own sandbox).
    Redeemed,
    /// `expiring`: the paid time ended; the power-off is announced (and being sent).
    Expiring,
    /// `expired`: powered off at the end of the paid time; deleted at the end of the grace
    /// period unless renewed.
    Expired,
    /// `terminating`: the server's delete is announced or sent (by its owner, at the end of the
    /// grace period, or after a failed first deployment); the refresher watches it until the
    /// provider no longer has it.
    Terminating,
    /// `terminated`: the provider no longer knows the server (deleted, or gone).
    Terminated,
    /// Any other text: the provider's server `status` as last read (`deploying`, `deployed`,
    /// `failed deployment`, `rescue mode`, …). Built from the provider's text with
    /// [`Status::from`], which never makes this variant of an own status's text.
    Provider(String),
}

impl Status {
    /// Every status the service writes itself (every variant but [`Status::Provider`]).
    pub const OWN: [Status; 9] = [
        Status::Recorded,
        Status::Provisioning,
        Status::Cancelled,
        Status::Credited,
        Status::Redeemed,
        Status::Expiring,
        Status::Expired,
        Status::Terminating,
        Status::Terminated,
    ];

    /// The text, as stored and answered.
    pub fn as_str(&self) -> &str {
        match self {
            Status::Recorded => "recorded",
            Status::Provisioning => "provisioning",
            Status::Cancelled => "cancelled",
            Status::Credited => "credited",
            Status::Redeemed => "redeemed",
            Status::Expiring => "expiring",
            Status::Expired => "expired",
            Status::Terminating => "terminating",
            Status::Terminated => "terminated",
            Status::Provider(text) => text,
        }
    }

    /// Whether the server is being deleted or is gone: `terminating` or `terminated`.
    pub fn is_ending(&self) -> bool {
        matches!(self, Status::Terminating | Status::Terminated)
    }

    /// Whether the sandbox's order never delivered a server: `cancelled`, `credited` or
    /// `redeemed`.
    pub fn is_undelivered(&self) -> bool {
        matches!(
            self,
            Status::Cancelled | Status::Credited | Status::Redeemed
        )
    }
}

/// An empty provider status: what a change built with `..SandboxStatus::default()` holds until
/// it names its status (as the empty text did before); every change the service writes names
/// one.
impl Default for Status {
    fn default() -> Self {
        Status::Provider(String::new())
    }
}

/// The own status `text` names, else the provider's status `text`.
impl From<String> for Status {
    fn from(text: String) -> Self {
        Status::OWN
            .into_iter()
            .find(|own| own.as_str() == text)
            .unwrap_or(Status::Provider(text))
    }
}

/// The own status `text` names, else the provider's status `text`.
impl From<&str> for Status {
    fn from(text: &str) -> Self {
        Status::from(text.to_owned())
    }
}

/// The text, as stored and answered.
impl From<Status> for String {
    fn from(status: Status) -> String {
        match status {
            Status::Provider(text) => text,
            own => own.as_str().to_owned(),
        }
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A sandbox: the service's record of a server (or free-standing metadata) and its owner.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SandboxRecord {
    /// `sbx_<32 hex>`.
    pub id: String,
    /// Owner's wallet address, lowercase.
    pub owner: Owner,
    /// Provider server id, when the record is about a server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_id: Option<u64>,
    /// Provider project id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project_id: Option<u64>,
    /// Plan slug.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<String>,
    /// Region slug.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Hostname.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// A name the owner chose.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Free-form string metadata.
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
    /// Last known status ([`Status`]): the provider's (`deploying`, `deployed`, …),
    /// `terminating` after a delete, `terminated` once the provider no longer knows the server,
    /// `recorded` for a metadata-only record, or another of the service's own.
    pub status: Status,
    /// RFC 3339.
    pub created_at: crate::time::Timestamp,
    /// RFC 3339.
    pub updated_at: crate::time::Timestamp,
    /// A paid server's lease (free servers and metadata records have none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<Lease>,
    /// A provisioned server's progress and last known provider state (`domain::stages`);
    /// metadata records have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watch: Option<Watch>,
    /// The payment key of the order that provisioned the server (paid servers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payment: Option<crate::x402::PaymentKey>,
    /// The sequence of the server's last event (`crate::events`; 0: none yet).
    #[serde(default)]
    pub event_seq: u64,
    /// The owner's SSH keys the server was created (or last rebuilt) with.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub authorized_keys: Vec<crate::ssh_keys::AuthorizedKey>,
    /// The resize order (its order id) whose upgrade may be under way: one at a time per server,
    /// taken before its upgrade is sent, released with the order's end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resizing: Option<String>,
}

/// A change of the resize a sandbox holds ([`SandboxRecord::resizing`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Resizing {
    /// Held by this order: when no other holds it.
    Take(String),
    /// Released by this order, which holds it.
    Release(String),
}

/// How long a plan takes to deploy: the provider's `plan.type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PlanClass {
    /// A virtual server (`vps`, and anything that is not bare metal).
    #[default]
    Vps,
    /// A dedicated machine (`baremetal`).
    Baremetal,
}

impl PlanClass {
    /// The class of a provider plan `type` (`baremetal` → bare metal; anything else a VPS).
    pub fn of_type(plan_type: Option<&str>) -> Self {
        match plan_type {
            Some(t) if t.eq_ignore_ascii_case("baremetal") => PlanClass::Baremetal,
            _ => PlanClass::Vps,
        }
    }
}

/// An SSH host key as the readiness check received it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct HostKey {
    /// The key's algorithm, e.g. `ssh-ed25519`.
    pub algorithm: String,
    /// OpenSSH's SHA-256 fingerprint, `SHA256:<base64 without padding>`.
    pub fingerprint: String,
}

/// What the service knows of a provisioned server's progress: the provider's state as the
/// refresher last read it, the transition an action expects, and the readiness check's result.
/// Every write names the `seq` it read (as leases do), so a refresh never overwrites an action.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Watch {
    /// The plan's class (sets `etaAt`, `deadlineAt`).
    pub class: PlanClass,
    /// Start of the current deployment (the order; a rebuild), RFC 3339.
    pub since: crate::time::Timestamp,
    /// Whether the current deployment is the first: past `deadlineAt` the server is deleted.
    #[serde(default)]
    pub first: bool,
    /// The provider's server object as last read, without credentials (JSON text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// When it was read, RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_at: Option<crate::time::Timestamp>,
    /// `on` / `off`, as the provider last said (`GET /servers/{id}?fields=power`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power: Option<String>,
    /// The transition an action started and the refresher has not confirmed yet
    /// (`powering-off`, `powering-on`, `rebooting`, `rebuilding`, `entering-rescue-mode`,
    /// `exiting-rescue-mode`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transition: Option<String>,
    /// When the transition started, RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transition_at: Option<crate::time::Timestamp>,
    /// When TCP port 22 answered the readiness check, RFC 3339 (cleared by actions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_at: Option<crate::time::Timestamp>,
    /// The host keys the readiness check received.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub host_keys: Vec<HostKey>,
    /// Why the deployment failed (the provider said so, or it missed its deadline).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
    /// Why a deployed, running server is not `ready`: SSH did not answer by its deadline. It is
    /// kept (and charged); the check goes on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unreachable: Option<String>,
    /// Bumped by every write of the watch.
    #[serde(default)]
    pub seq: u64,
}

/// Where a paid server's lease is (`domain::leases`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum LeaseState {
    /// Paid up to `paidUntil`.
    Active,
    /// Past `paidUntil`: the power-off is announced (and being sent).
    Expiring,
    /// Powered off; deleted at `graceEndsAt` unless renewed.
    Expired,
    /// Past `graceEndsAt`: the deletion is announced (and being sent).
    Terminating,
    /// Deleted by the service at the end of the grace period.
    Terminated,
    /// Deleted by its owner: the lease stopped.
    Ended,
}

impl LeaseState {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            LeaseState::Active => "active",
            LeaseState::Expiring => "expiring",
            LeaseState::Expired => "expired",
            LeaseState::Terminating => "terminating",
            LeaseState::Terminated => "terminated",
            LeaseState::Ended => "ended",
        }
    }
}

/// A paid server's lease: paid time, grace, and the bookkeeping of its expiry steps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Lease {
    /// Where it is.
    pub state: LeaseState,
    /// End of the paid time, RFC 3339: the server is powered off then.
    pub paid_until: crate::time::Timestamp,
    /// `paidUntil` + `EXPIRY_GRACE_SECONDS`, RFC 3339: the server is deleted then.
    pub grace_ends_at: crate::time::Timestamp,
    /// Paid time delivered to the server so far, seconds: a period at provisioning, the periods
    /// of each renewal, less what a reversed payment took back. `paidUntil` is later than the
    /// lease's start by this much, plus the time it stood expired before a renewal. 0 on a
    /// lease written before it was counted.
    #[serde(default)]
    pub paid_seconds: i64,
    /// Bumped by every write of the lease; every lease write names the value it read.
    #[serde(default)]
    pub seq: u64,
    /// Expiry steps that failed in a row.
    #[serde(default)]
    pub failures: u32,
    /// A renewal came while the server was (being) powered off: power it on.
    #[serde(default)]
    pub power_on: bool,
    /// The last `lease.expiring` notice sent for this `paidUntil`: how many seconds before it
    /// (`domain::leases::NOTICES`); cleared by a renewal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub noticed: Option<i64>,
}

/// A sandbox change written on its own or with an order change: its status and, once there is
/// one, its server; and a lease change.
#[derive(Debug, Clone, Default)]
pub struct SandboxStatus {
    /// The sandbox.
    pub sandbox_id: String,
    /// Its new status.
    pub status: Status,
    /// The server, once there is one.
    pub server_id: Option<u64>,
    /// The project, with the server.
    pub project_id: Option<u64>,
    /// The hostname, with the server.
    pub hostname: Option<String>,
    /// The plan (slug) the server is on, when a resize moves it.
    pub plan: Option<String>,
    /// The resize the sandbox holds, taken or released (conditional on who holds it).
    pub resizing: Option<Resizing>,
    /// The lease as it is to be.
    pub lease: Option<LeaseChange>,
    /// The watch as it is to be.
    pub watch: Option<WatchChange>,
    /// The SSH keys a rebuild put on the server.
    pub authorized_keys: Option<Vec<crate::ssh_keys::AuthorizedKey>>,
    /// Take the server off the refresher's schedule (with a watch change whose `due` is `None`).
    pub unwatch: bool,
    /// The server's events the change writes, in the same transaction; the change applies only
    /// if the sandbox's `eventSeq` is still the one the outbox numbered from.
    pub outbox: Option<Outbox>,
}

/// A watch written with a sandbox change.
#[derive(Debug, Clone)]
pub struct WatchChange {
    /// The watch as it is to be (its `seq` one above the one read).
    pub watch: Watch,
    /// The `seq` of the watch as read; `None` writes it whatever it was.
    pub read_seq: Option<u64>,
    /// When the refresher is next due (epoch seconds), or `None` to leave its schedule.
    pub due: Option<i64>,
}

/// A lease written with a sandbox change.
#[derive(Debug, Clone)]
pub struct LeaseChange {
    /// The lease as it is to be (its `seq` one above the one read).
    pub lease: Lease,
    /// The `seq` of the lease as read; `None` for a new lease.
    pub read_seq: Option<u64>,
    /// When the reconciler is next due (epoch seconds), or `None` to leave its index.
    pub due: Option<i64>,
}

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::types::AttributeValue;

    use super::super::sandbox_item;
    use super::*;
    use crate::from_item;

    /// The text of every own status, as stored and answered before the status had a type.
    const OWN_TEXT: [&str; 9] = [
        "recorded",
        "provisioning",
        "cancelled",
        "credited",
        "redeemed",
        "expiring",
        "expired",
        "terminating",
        "terminated",
    ];

    #[test]
    fn own_statuses_round_trip_as_their_text() {
        for (own, text) in Status::OWN.into_iter().zip(OWN_TEXT) {
            assert_eq!(own.as_str(), text);
            assert_eq!(own.to_string(), text);
            assert_eq!(serde_json::to_string(&own).unwrap(), format!("\"{text}\""));
            let read: Status = serde_json::from_value(serde_json::json!(text)).unwrap();
            assert_eq!(read, own);
            assert_eq!(String::from(own.clone()), text);
        }
    }

    #[test]
    fn the_text_of_an_own_status_reads_as_that_status() {
        for (own, text) in Status::OWN.into_iter().zip(OWN_TEXT) {
            assert_eq!(Status::from(text.to_owned()), own);
            assert_eq!(Status::from(text), own);
        }
    }

    #[test]
    fn any_other_text_is_the_providers() {
        for text in [
            "deploying",
            "deployed",
            "failed deployment",
            "rescue mode",
            "Terminated",
        ] {
            let status = Status::from(text);
            assert_eq!(status, Status::Provider(text.to_owned()));
            assert_eq!(status.as_str(), text);
            let json = serde_json::to_string(&status).unwrap();
            assert_eq!(json, format!("\"{text}\""));
            assert_eq!(serde_json::from_str::<Status>(&json).unwrap(), status);
        }
    }

    #[test]
    fn the_questions_asked_of_a_status() {
        let ending: Vec<_> = Status::OWN.into_iter().filter(Status::is_ending).collect();
        assert_eq!(ending, [Status::Terminating, Status::Terminated]);
        let undelivered: Vec<_> = Status::OWN
            .into_iter()
            .filter(Status::is_undelivered)
            .collect();
        assert_eq!(
            undelivered,
            [Status::Cancelled, Status::Credited, Status::Redeemed]
        );
        assert!(!Status::from("deployed").is_ending());
        assert!(!Status::from("deployed").is_undelivered());
    }

    #[test]
    fn a_record_stores_its_status_as_plain_text() {
        let record = SandboxRecord {
            event_seq: 0,
            id: "sbx_1".into(),
            owner: Owner::parse(&format!("0x{}", "1".repeat(40))).unwrap(),
            server_id: Some(7),
            project_id: None,
            plan: None,
            region: None,
            hostname: None,
            name: None,
            metadata: BTreeMap::new(),
            status: Status::Terminating,
            created_at: crate::time::Timestamp::from_unix(1_795_392_000),
            updated_at: crate::time::Timestamp::from_unix(1_795_392_000),
            lease: None,
            watch: None,
            payment: None,
            authorized_keys: Vec::new(),
            resizing: None,
        };
        let item = sandbox_item(&record).unwrap();
        assert_eq!(item["status"], AttributeValue::S("terminating".into()));
        let answer = serde_json::to_value(&record).unwrap();
        assert_eq!(answer["status"], "terminating");
        let deployed = SandboxRecord {
            status: Status::from("deployed"),
            ..record
        };
        let read: SandboxRecord = from_item(sandbox_item(&deployed).unwrap()).unwrap();
        assert_eq!(read.status, Status::Provider("deployed".into()));
    }
}
