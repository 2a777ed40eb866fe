//! The provider's side of the books: every server this deployment tagged is owned by a record,
//! or it goes. A create can land after its order gave it up (committed minutes late, after the
//! order became a credit), or twice (a late commit and a second create): such a server is owned
//! by no record, runs, and is billed to the service. Each project of the service's team is
//! listed (every page) at most every `SWEEP_SECONDS`, and each server carrying this deployment's
//! tag ([`DEPLOYMENT_TAG`], the table name) is judged by its sandbox ([`verdict`]):
//!
//! - owned: its sandbox names it;
//! - on its way: its sandbox is a free server's intent (the refresher adopts it) or belongs to
//!   an order still in flight (the order adopts it);
//! - an orphan otherwise — no sandbox, a sandbox that names another server, an order that ended
//!   without it — deleted at the provider and reported (`OrphanServersDeleted`, alarmed).
//!
//! Servers without this deployment's tag — another deployment's, or anyone's — are never
//! touched.

use std::collections::HashMap;

use serde::Serialize;
use serde_json::Value;

use crate::billing::order::effects::{DEPLOYMENT_TAG, SANDBOX_TAG};
use crate::deadline::Deadline;
use crate::error::ApiError;
use crate::state::AppState;
use crate::store::payments::OrderState;
use crate::store::sandboxes::{SandboxRecord, Status};
use crate::upstream::UpstreamError;

/// What one sweep did.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SweepReport {
    /// Projects listed.
    pub projects: usize,
    /// Servers of this deployment seen.
    pub tagged: usize,
    /// Servers no record owns, deleted.
    pub orphans: usize,
    /// Listings, reads or deletes that failed (tried again next time).
    pub errors: usize,
}

/// What a tagged server is to the books.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Its sandbox names it.
    Owned,
    /// Its sandbox or order will adopt it.
    OnItsWay,
    /// No record owns it (why).
    Orphan(String),
}

/// The verdict on server `server` tagged with `sandbox` (its record, if any), whose sandbox's
/// order is in `order` (when the sandbox names one).
pub fn verdict(server: u64, sandbox: Option<&SandboxRecord>, order: Option<OrderState>) -> Verdict {
    let Some(record) = sandbox else {
        return Verdict::Orphan("no sandbox record names it".into());
    };
    match (record.server_id, &record.payment, order) {
        (Some(id), _, _) if id == server => Verdict::Owned,
        (Some(id), _, _) => Verdict::Orphan(format!("its sandbox owns server {id}")),
        (None, None, _) if record.status == Status::Provisioning => Verdict::OnItsWay,
        (None, Some(_), Some(state)) if state.in_flight() => Verdict::OnItsWay,
        (None, Some(_), Some(state)) => Verdict::Orphan(format!("its order ended {state}")),
        (None, _, _) => Verdict::Orphan(format!("its sandbox is {}", record.status)),
    }
}

/// The projects of the service's team(s) (discovery, cached).
async fn projects(state: &AppState) -> Result<Vec<u64>, ApiError> {
    let teams: Vec<u64> = match state.config.upstream.team_id {
        Some(team) => vec![team],
        None => crate::servers::discovery::teams(state)
            .await?
            .iter()
            .filter_map(|t| t["id"].as_u64())
            .collect(),
    };
    let mut ids = Vec::new();
    for team in teams {
        let projects = crate::servers::discovery::projects(state, team).await?;
        ids.extend(projects.iter().filter_map(|p| p["id"].as_u64()));
    }
    Ok(ids)
}

/// One sweep within `deadline`: each project not swept for `SWEEP_SECONDS` (see the module
/// docs).
///
/// Errors: the team's projects cannot be listed; the store fails.
pub async fn pass(state: &AppState, deadline: &Deadline) -> Result<SweepReport, ApiError> {
    let mut report = SweepReport::default();
    let Some(every) = state.config.payments.sweep else {
        return Ok(report);
    };
    let every = every.as_secs() as i64;
    for project in projects(state).await? {
        if !deadline.allows(state.config.upstream.timeout * 2) {
            break;
        }
        if !state
            .store
            .claim_sweep(project, state.clock.now(), every)
            .await?
        {
            continue;
        }
        report.projects += 1;
        if let Err(err) = sweep(state, project, &mut report).await {
            report.errors += 1;
            tracing::warn!(project, error = %err, "cannot sweep the project");
        }
    }
    if report.orphans > 0 {
        crate::metrics::emit("OrphanServersDeleted", report.orphans as f64, "Count", &[]);
    }
    Ok(report)
}

/// This deployment's servers of `project`: (server id, sandbox id).
fn ours(state: &AppState, servers: &[Value]) -> Vec<(u64, String)> {
    servers
        .iter()
        .filter(|s| s["tags"][DEPLOYMENT_TAG].as_str() == Some(state.store.table()))
        .filter_map(|s| {
            Some((
                s["id"].as_u64()?,
                s["tags"][SANDBOX_TAG].as_str()?.to_owned(),
            ))
        })
        .collect()
}

async fn sweep(state: &AppState, project: u64, report: &mut SweepReport) -> Result<(), ApiError> {
    let upstream = state.upstream()?;
    let tagged = ours(state, &upstream.servers(project).await?);
    report.tagged += tagged.len();
    // One read per sandbox, however many servers carry its tag (a duplicate create).
    let ids: std::collections::BTreeSet<&str> =
        tagged.iter().map(|(_, sandbox)| sandbox.as_str()).collect();
    let ids: Vec<&str> = ids.into_iter().collect();
    let records: HashMap<String, SandboxRecord> = state
        .store
        .sandboxes(&ids)
        .await?
        .into_iter()
        .map(|r| (r.id.clone(), r))
        .collect();
    for (server, sandbox) in &tagged {
        let record = records.get(sandbox);
        let order = match record.and_then(|r| r.payment.as_ref()) {
            Some(payment) => state.store.order(payment).await?.map(|o| o.state),
            None => None,
        };
        if !matches!(verdict(*server, record, order), Verdict::Orphan(_)) {
            continue;
        }
        // The records were read a while ago: an order may have adopted the server since.
        let Verdict::Orphan(why) = judge_again(state, *server, sandbox, record).await? else {
            continue;
        };
        if !state.holds(crate::checkpoint::Guard::SweepDeletesOrphans) {
            continue;
        }
        tracing::error!(
            project,
            server,
            sandbox,
            why,
            "a server no record owns: deleting it"
        );
        match upstream.delete_server(*server).await {
            Ok(()) | Err(UpstreamError::Status { status: 404, .. }) => report.orphans += 1,
            Err(err) => {
                report.errors += 1;
                tracing::warn!(server, error = %err, "cannot delete the orphan; next sweep");
            }
        }
    }
    Ok(())
}

/// The verdict on `server`, an orphan by the records as first read (`record`), from its
/// order and then its sandbox read again, in that order: an order that adopts a server writes
/// its sandbox in the same transaction, so a sandbox read after its order is at least as new —
/// an order seen ended with a sandbox seen without the server is an orphan for good.
///
/// Errors: the store's.
async fn judge_again(
    state: &AppState,
    server: u64,
    sandbox: &str,
    record: Option<&SandboxRecord>,
) -> Result<Verdict, ApiError> {
    let order = match record.and_then(|r| r.payment.as_ref()) {
        Some(payment) => state.store.order(payment).await?.map(|o| o.state),
        None => None,
    };
    let record = state.store.sandbox(sandbox).await?;
    Ok(verdict(server, record.as_ref(), order))
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "eip155:8453/0x833589fcd6edb6e08f4c7c32d4f71b54bda02913/\
        0x1111111111111111111111111111111111111111/\
        0x2222222222222222222222222222222222222222222222222222222222222222";

    fn record(server: Option<u64>, payment: Option<&str>, status: &str) -> SandboxRecord {
        SandboxRecord {
            event_seq: 0,
            id: "sbx_1".into(),
            owner: crate::address::Owner::parse(&format!("0x{}", "1".repeat(40))).unwrap(),
            server_id: server,
            project_id: Some(1),
            plan: None,
            region: None,
            hostname: None,
            name: None,
            metadata: Default::default(),
            status: Status::from(status),
            created_at: crate::time::Timestamp::EPOCH,
            updated_at: crate::time::Timestamp::EPOCH,
            lease: None,
            watch: None,
            payment: payment.map(|key| crate::x402::PaymentKey::parse(key).unwrap()),
            authorized_keys: Vec::new(),
            resizing: None,
        }
    }

    #[test]
    fn only_a_server_no_record_will_own_is_an_orphan() {
        let orphan = |v: Verdict| matches!(v, Verdict::Orphan(_));
        assert!(orphan(verdict(7, None, None)));
        let owned = record(Some(7), Some(KEY), "deployed");
        assert_eq!(
            verdict(7, Some(&owned), Some(OrderState::Provisioned)),
            Verdict::Owned
        );
        // A duplicate of an order's server.
        assert!(orphan(verdict(
            8,
            Some(&owned),
            Some(OrderState::Provisioned)
        )));
        // A free server's intent, still provisioning: the refresher adopts it.
        let intent = record(None, None, "provisioning");
        assert_eq!(verdict(7, Some(&intent), None), Verdict::OnItsWay);
        assert!(orphan(verdict(
            7,
            Some(&record(None, None, "cancelled")),
            None
        )));
        // A paid order's sandbox: adopted while the order is in flight, an orphan once it ended.
        let paid = record(None, Some(KEY), "provisioning");
        for state in OrderState::IN_FLIGHT {
            assert_eq!(verdict(7, Some(&paid), Some(state)), Verdict::OnItsWay);
        }
        for state in [
            OrderState::Credited,
            OrderState::Refunded,
            OrderState::Expired,
        ] {
            assert!(orphan(verdict(7, Some(&paid), Some(state))));
        }
    }
}
