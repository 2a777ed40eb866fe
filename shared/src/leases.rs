//! Paid time (design brief §3, Money): every paid server has a lease. It is paid up to
//! `paidUntil` (provisioned + one period, `PAID_PERIOD_SECONDS`), powered off then, and deleted
//! at `graceEndsAt` (`paidUntil` + `EXPIRY_GRACE_SECONDS`) unless renewed. Free servers have no
//! lease. During the last 24 h before `paidUntil` every answer about the server says
//! `expiresSoon: true` with a `renew` link.
//!
//! The lease lives on the server's sandbox ([`crate::store::sandboxes::Lease`]); every write of
//! it is conditional on the `seq` it read, so a renewal racing an expiry step wins or loses
//! whole.

use serde::Serialize;
use serde_json::Value;
use time::OffsetDateTime;

use crate::state::AppState;
use crate::store::sandboxes::{Lease, LeaseChange, LeaseState, SandboxRecord};

/// How long before `paidUntil` answers warn that the lease ends.
pub const WARNING_SECONDS: i64 = 24 * 3600;

fn at(epoch: i64) -> String {
    crate::time::rfc3339(
        OffsetDateTime::from_unix_timestamp(epoch).unwrap_or(OffsetDateTime::UNIX_EPOCH),
    )
}

fn epoch(rfc3339: &str) -> i64 {
    crate::time::parse_rfc3339(rfc3339)
        .map(|t| t.unix_timestamp())
        .unwrap_or(0)
}

/// The lease of a server provisioned at `now` (epoch seconds): one paid period from now.
pub fn first(state: &AppState, now: i64) -> LeaseChange {
    let paid_until = now + state.config.payments.period.as_secs() as i64;
    let grace_ends_at = paid_until + state.config.payments.grace.as_secs() as i64;
    LeaseChange {
        lease: Lease {
            state: LeaseState::Active,
            paid_until: at(paid_until),
            grace_ends_at: at(grace_ends_at),
            seq: 0,
            failures: 0,
            power_on: false,
        },
        read_seq: None,
        due: Some(paid_until),
    }
}

/// Whether `lease` ends within [`WARNING_SECONDS`] of `now` (and has not ended yet).
pub fn expires_soon(lease: &Lease, now: i64) -> bool {
    let until = epoch(&lease.paid_until);
    lease.state == LeaseState::Active && now < until && until - now <= WARNING_SECONDS
}

/// The renewal route of a server.
pub fn renew_link(server_id: u64) -> String {
    format!("/api/cloud/servers/{server_id}/renewals")
}

/// Adds the lease to a server object of the provider: `paidUntil`, `graceEndsAt`, and, in the
/// last 24 h, `expiresSoon: true` and `renew`.
pub fn annotate(server: &mut Value, lease: &Lease, now: i64) {
    let id = server.get("id").and_then(Value::as_u64);
    if let Value::Object(fields) = server {
        fields.insert("paidUntil".into(), Value::from(lease.paid_until.clone()));
        fields.insert(
            "graceEndsAt".into(),
            Value::from(lease.grace_ends_at.clone()),
        );
        if expires_soon(lease, now) {
            fields.insert("expiresSoon".into(), Value::Bool(true));
            if let Some(id) = id {
                fields.insert("renew".into(), Value::from(renew_link(id)));
            }
        }
    }
}

/// A sandbox as its owner sees it: the record, with the lease's times and warning at the top.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SandboxView {
    /// The record.
    #[serde(flatten)]
    pub record: SandboxRecord,
    /// End of the paid time (paid servers).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paid_until: Option<String>,
    /// When the server is deleted unless renewed (paid servers).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grace_ends_at: Option<String>,
    /// `true` in the last 24 h before `paidUntil`.
    pub expires_soon: bool,
    /// The renewal route, with `expiresSoon`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub renew: Option<String>,
}

impl SandboxView {
    /// The view of `record` at `now` (epoch seconds).
    pub fn of(record: SandboxRecord, now: i64) -> Self {
        let lease = record.lease.as_ref();
        let soon = lease.is_some_and(|l| expires_soon(l, now));
        SandboxView {
            paid_until: lease.map(|l| l.paid_until.clone()),
            grace_ends_at: lease.map(|l| l.grace_ends_at.clone()),
            expires_soon: soon,
            renew: record.server_id.filter(|_| soon).map(renew_link),
            record,
        }
    }
}
