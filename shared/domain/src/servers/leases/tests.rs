//! The lease rules, case by case: paid time taken back, the expiry notices, the server object's
//! lease fields.

use super::*;

fn lease(state: LeaseState, paid_until: i64) -> Lease {
    Lease {
        noticed: None,
        state,
        paid_until: at(paid_until),
        grace_ends_at: at(paid_until + 72 * 3600),
        paid_seconds: 4 * 86_400,
        seq: 3,
        failures: 0,
        power_on: false,
    }
}

/// A reversed payment's paid time comes off `paidUntil`, the grace from then or now.
#[test]
fn paid_time_taken_back_ends_the_lease_as_if_never_paid() {
    let (now, grace, day) = (1_000_000, 3 * 86_400, 86_400);
    let ends = |l: &Lease| (l.paid_until.unix(), l.grace_ends_at.unix());
    // A new server's one period: paid until it was made, so off now.
    let (taken, due) =
        taken_back(&lease(LeaseState::Active, now + day), day + 60, grace, now).unwrap();
    assert_eq!(ends(&taken), (now - 60, now + grace));
    assert_eq!((taken.seq, taken.state, due), (4, LeaseState::Active, now));
    assert_eq!(
        taken.paid_seconds,
        3 * day - 60,
        "the paid time counted less as much"
    );
    // A renewal's periods of a server paid further: time left, the notices' schedule.
    let (taken, due) =
        taken_back(&lease(LeaseState::Active, now + 3 * day), day, grace, now).unwrap();
    assert_eq!(ends(&taken), (now + 2 * day, now + 2 * day + grace));
    assert_eq!(due, next_due(&taken));
    // Already off: deleted when the grace ends. Being, or already, deleted: nothing to take.
    let (taken, due) = taken_back(&lease(LeaseState::Expired, now - 60), day, grace, now).unwrap();
    assert_eq!(
        (due, taken.grace_ends_at.unix()),
        (now + grace, now + grace)
    );
    for gone in [
        LeaseState::Terminating,
        LeaseState::Terminated,
        LeaseState::Ended,
    ] {
        assert_eq!(taken_back(&lease(gone, now), day, grace, now), None);
    }
}

#[test]
fn notices_come_24_h_then_1_h_before_the_end_once_each() {
    let until = 1_800_000_000;
    let fresh = lease(LeaseState::Active, until);
    // Due first at the 24 h notice; nothing to say before it.
    assert_eq!(next_due(&fresh), until - 24 * 3600);
    assert_eq!(notice_due(&fresh, until - 24 * 3600 - 1), None);
    assert_eq!(notice_due(&fresh, until - 24 * 3600), Some(24 * 3600));
    // Sent: due at the 1 h notice, which alone is left.
    let day = Lease {
        noticed: Some(24 * 3600),
        ..fresh.clone()
    };
    assert_eq!(next_due(&day), until - 3600);
    assert_eq!(notice_due(&day, until - 7200), None);
    assert_eq!(notice_due(&day, until - 3600), Some(3600));
    // Both sent: due at the end itself, no notice after it.
    let hour = Lease {
        noticed: Some(3600),
        ..fresh.clone()
    };
    assert_eq!(next_due(&hour), until);
    assert_eq!(notice_due(&hour, until - 60), None);
    // A lease that starts within the hour skips to the notice that is true: 1 h.
    assert_eq!(notice_due(&fresh, until - 1800), Some(3600));
    // Only an active lease before its end is noticed.
    assert_eq!(notice_due(&fresh, until), None);
    assert_eq!(
        notice_due(&lease(LeaseState::Expired, until), until - 60),
        None
    );
}

#[test]
fn a_lease_warns_in_its_last_day_only_while_active() {
    let until = 1_800_000_000;
    let active = lease(LeaseState::Active, until);
    assert!(!expires_soon(&active, until - WARNING_SECONDS - 1));
    assert!(expires_soon(&active, until - WARNING_SECONDS));
    assert!(expires_soon(&active, until - 1));
    // Ended: no longer "soon"; expired or terminating leases are past warning.
    assert!(!expires_soon(&active, until));
    assert!(!expires_soon(
        &lease(LeaseState::Expired, until),
        until - 60
    ));
}

#[test]
fn a_server_object_carries_its_lease_and_in_its_last_day_the_renewal_route() {
    let until = 1_800_000_000;
    let mut server = serde_json::json!({"id": 42, "status": "deployed"});
    annotate(
        &mut server,
        &lease(LeaseState::Active, until),
        until - 2 * 86_400,
    );
    assert_eq!(server["paidUntil"], at(until).to_string());
    assert_eq!(server["graceEndsAt"], at(until + 72 * 3600).to_string());
    assert!(server.get("expiresSoon").is_none() && server.get("renew").is_none());
    annotate(&mut server, &lease(LeaseState::Active, until), until - 3600);
    assert_eq!(server["expiresSoon"], true);
    assert_eq!(server["renew"], "/api/cloud/servers/42/renewals");
}
