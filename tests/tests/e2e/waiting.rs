//! Waiting without hammering the provider (the waiting issue): polls and listings answer from
//! the store; the reconciler's refresher alone reads the provider, within its rate; stages move
//! `deploying` → `network-ready` → `ready` (a real SSH key exchange with the test's listener,
//! whose host key fingerprint the access block carries); long-polls; deadlines delete and
//! credit; actions write their transition; a server gone at the provider becomes `terminated`.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::harness::{ALICE, Options, PROJECT, TestEnv, owner};

async fn listing(env: &TestEnv, key: &str) -> Vec<Value> {
    let res = env
        .req("GET", &format!("/api/cloud/servers/{PROJECT}"))
        .key(key)
        .send()
        .await;
    assert_eq!(res.status, 200, "{}", res.body);
    res.json().as_array().unwrap().clone()
}

/// An environment whose servers never answer SSH (port 9 is closed), with a two-minute deadline.
async fn never_ready() -> TestEnv {
    let env = TestEnv::with(Options {
        vars: vec![
            ("SSH_PROBE_TARGET", "127.0.0.1:9".into()),
            ("DEPLOY_DEADLINE_VPS_SECONDS", "120".into()),
        ],
        ..Options::default()
    })
    .await;
    // The provider never finishes deploying it.
    env.sim
        .set_stages(Duration::ZERO, Duration::from_secs(100_000));
    env
}

/// One reconciler pass now (the refresher reads what is due).
async fn refresh(env: &TestEnv) -> domain::servers::refresher::RefreshReport {
    env.reconcile_in(1).await.refresh
}

#[tokio::test]
async fn polls_and_listings_make_no_provider_calls() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let (server, sandbox_id) = env.provision(&key, "cloud_vps_free", Some("quiet")).await;
    let before = env.sim.requests().len();
    // At once, in both: the server as created, with its stage.
    let listed = listing(&env, &key).await;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["id"], server);
    assert_eq!(listed[0]["sandboxId"], sandbox_id.as_str());
    assert!(listed[0]["stage"].is_string(), "{}", listed[0]);
    assert!(
        listed[0].get("password").is_none(),
        "credentials are never stored"
    );
    let record = env.sandbox(&key, &sandbox_id).await;
    assert_eq!(record["server"]["id"], server);
    assert!(record["statusAt"].is_string(), "{record}");
    assert!(record["etaAt"].is_string(), "{record}");
    assert!(record["deadlineAt"].is_string(), "{record}");
    let (gets, updates) = (env.faults.calls("GetItem"), env.faults.calls("UpdateItem"));
    for _ in 0..25 {
        env.sandbox(&key, &sandbox_id).await;
    }
    // A poll uses the API key (one write that reads it) and reads the sandbox, nothing else.
    assert_eq!(
        (
            env.faults.calls("GetItem") - gets,
            env.faults.calls("UpdateItem") - updates
        ),
        (25, 25)
    );
    for _ in 0..25 {
        listing(&env, &key).await;
    }
    assert_eq!(env.sim.requests().len(), before, "{:?}", env.sim.requests());
}

#[tokio::test]
async fn the_refresher_moves_stages_to_ready_and_hands_over_access() {
    let env = TestEnv::new().await;
    env.sim
        .set_stages(Duration::from_secs(10), Duration::from_secs(20));
    let key = env.key(ALICE).await;
    let (_, sandbox_id) = env.provision(&key, "cloud_vps_free", Some("staged")).await;
    let created = env.sandbox(&key, &sandbox_id).await;
    assert_eq!(created["stage"], "deploying", "{created}");
    assert!(created.get("access").is_none());
    refresh(&env).await;
    assert_eq!(env.sandbox(&key, &sandbox_id).await["stage"], "deploying");
    env.clock.advance(Duration::from_secs(10));
    refresh(&env).await;
    let addressed = env.sandbox(&key, &sandbox_id).await;
    assert_eq!(addressed["stage"], "network-ready", "{addressed}");
    assert!(addressed.get("access").is_none(), "{addressed}");
    env.clock.advance(Duration::from_secs(10));
    let report = refresh(&env).await;
    assert_eq!((report.probes, report.ready), (1, 1), "{report:?}");
    let ready = env.sandbox(&key, &sandbox_id).await;
    assert_eq!(ready["stage"], "ready", "{ready}");
    assert_eq!(ready["status"], "deployed");
    let access = &ready["access"];
    assert!(access["ipv4"].as_str().unwrap().starts_with("203.0.113."));
    assert_eq!(access["sshUser"], "root");
    assert_eq!(access["sshPort"], 22);
    assert_eq!(access["hostKeys"][0]["algorithm"], "ssh-ed25519");
    assert_eq!(
        access["hostKeys"][0]["fingerprint"],
        env.ssh.fingerprints[0].as_str()
    );
    assert!(ready.get("etaAt").is_none() && ready.get("deadlineAt").is_none());
    // Ready and stable: not read again for ten minutes.
    let again = refresh(&env).await;
    assert_eq!((again.due, again.provider_calls()), (0, 0), "{again:?}");
}

/// A server the provider deployed and runs, whose port 22 the check cannot reach (a firewall in
/// its user data, sshd moved), is never deleted for it: past its deadline it stays
/// `network-ready` with the reason, listed, and paid for — no credit, so one payment cannot buy
/// endless servers by redeeming the credit of each.
#[tokio::test]
async fn a_server_that_never_answers_ssh_stays_network_ready_and_is_never_deleted_for_it() {
    let env = TestEnv::with(Options {
        vars: vec![
            ("SSH_PROBE_TARGET", "127.0.0.1:9".into()),
            ("DEPLOY_DEADLINE_VPS_SECONDS", "120".into()),
        ],
        ..Options::default()
    })
    .await;
    let key = env.key(ALICE).await;
    let (server, sandbox_id, _) = crate::paid_time::paid_server(&env, &key, "walled").await;
    let report = refresh(&env).await;
    assert_eq!((report.probes, report.ready), (1, 0), "{report:?}");
    let record = env.sandbox(&key, &sandbox_id).await;
    assert_eq!(record["status"], "deployed");
    assert_eq!(record["stage"], "network-ready", "{record}");
    assert!(record.get("access").is_none());
    // Still on its way: due again on the next pass.
    assert_eq!(refresh(&env).await.due, 1);
    // Past its deadline: kept, with the reason; still charged and listed.
    let report = env.reconcile_in(121).await.refresh;
    assert_eq!(report.failed, 0, "{report:?}");
    assert_eq!(env.sim.powered_on(server), Some(true));
    let record = env.sandbox(&key, &sandbox_id).await;
    assert_eq!(record["stage"], "network-ready", "{record}");
    assert!(
        record["unreachable"].as_str().unwrap().contains("port 22"),
        "{record}"
    );
    assert!(record.get("failure").is_none(), "{record}");
    let payments = env
        .req("GET", "/api/payments")
        .key(&key)
        .send()
        .await
        .json();
    assert_eq!(payments["items"][0]["state"], "provisioned", "{payments}");
    assert_eq!(listing(&env, &key).await.len(), 1);
    // Checked again now and then, not every pass.
    assert_eq!(refresh(&env).await.due, 0);
}

#[tokio::test]
async fn one_listing_per_project_within_the_rate() {
    let env = TestEnv::with(Options {
        max_rps: Some(3.0),
        ..Options::default()
    })
    .await;
    let key = env.key(ALICE).await;
    let mut servers = Vec::new();
    for n in 0..6 {
        let host = format!("many-{n}");
        servers.push(env.provision(&key, "cloud_vps_free", Some(&host)).await.0);
    }
    env.clock.advance(Duration::from_millis(400));
    let from = env.sim.requests().len();
    let report = refresh(&env).await;
    assert_eq!(report.due, 6, "{report:?}");
    assert_eq!((report.listings, report.reads), (1, 0), "{report:?}");
    assert_eq!(report.ready, 6, "{report:?}");
    // Power transitions each need a power read: six more calls, paced.
    for server in &servers {
        let res = env
            .req("POST", &format!("/api/cloud/servers/{server}/actions"))
            .key(&key)
            .json(serde_json::json!({"type": "power-off"}))
            .send()
            .await;
        assert_eq!(res.status, 202, "{}", res.body);
        assert_eq!(res.json()["transition"], "powering-off");
    }
    let from_actions = env.sim.requests().len();
    let started = Instant::now();
    let report = refresh(&env).await;
    assert_eq!((report.listings, report.power_reads), (1, 6), "{report:?}");
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "7 calls at 3/s"
    );
    // Sent at least 1/3 s apart; the simulator times arrivals, and a few milliseconds of
    // delay on the first can bring the fourth (sent a full second later) into its second.
    assert!(env.sim.peak_per_second(from_actions) <= 4);
    assert!(env.sim.peak_per_second(from) <= 4);
    for server in &servers {
        assert_eq!(env.sim.powered_on(*server), Some(false));
    }
}

#[tokio::test]
async fn a_long_poll_answers_when_the_stage_is_reached_or_at_its_timeout() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let (_, sandbox_id) = env.provision(&key, "cloud_vps_free", None).await;
    let path = format!("/api/sandboxes/{sandbox_id}");
    // Not reached within the timeout: 200, reached false, Retry-After.
    let started = Instant::now();
    let res = env
        .req("GET", &path)
        .query("waitFor=failed,terminated&timeout=1")
        .key(&key)
        .send()
        .await;
    assert_eq!(res.status, 200, "{}", res.body);
    assert_eq!(res.json()["reached"], false);
    assert!(res.header("retry-after").is_some());
    assert!(started.elapsed() >= Duration::from_millis(900));
    assert!(started.elapsed() < Duration::from_secs(3));
    // Reached while it waits: answers right after the refresher moved the stage.
    env.clock.advance(Duration::from_millis(400));
    let started = Instant::now();
    let wait = env
        .req("GET", &path)
        .query("waitFor=ready&timeout=15")
        .key(&key)
        .send();
    let move_it = async {
        tokio::time::sleep(Duration::from_millis(800)).await;
        refresh(&env).await
    };
    let (res, report) = tokio::join!(wait, move_it);
    assert_eq!(report.ready, 1, "{report:?}");
    assert_eq!(res.status, 200, "{}", res.body);
    let body = res.json();
    assert_eq!(
        (body["reached"].clone(), body["stage"].clone()),
        (true.into(), "ready".into())
    );
    assert!(body["access"]["hostKeys"].is_array());
    assert!(res.header("retry-after").is_none());
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    // Already there: at once.
    let res = env
        .req("GET", &path)
        .query("waitFor=ready")
        .key(&key)
        .send()
        .await;
    assert_eq!(res.json()["reached"], true);
    // Bad input names the field.
    for (query, field) in [
        ("waitFor=bogus", "waitFor"),
        ("waitFor=", "waitFor"),
        ("waitFor=ready&timeout=soon", "timeout"),
        ("waitFor=ready&timeout=-1", "timeout"),
    ] {
        let res = env.req("GET", &path).query(query).key(&key).send().await;
        assert_eq!(res.status, 400, "{query}: {}", res.body);
        assert!(res.body.contains(field), "{query}: {}", res.body);
    }
}

#[tokio::test]
async fn past_its_deadline_a_paid_server_is_deleted_and_credited() {
    let env = never_ready().await;
    let key = env.key(ALICE).await;
    let (server, sandbox_id, _) = crate::paid_time::paid_server(&env, &key, "late").await;
    let record = env.sandbox(&key, &sandbox_id).await;
    assert!(record["deadlineAt"].is_string(), "{record}");
    // Before the deadline nothing happens; after it the server is deleted and credited.
    env.reconcile_in(60).await;
    assert!(env.sim.powered_on(server).is_some());
    let report = env.reconcile_in(121).await.refresh;
    assert_eq!(report.failed, 1, "{report:?}");
    assert_eq!(env.sim.powered_on(server), None, "deleted at the provider");
    let record = env.sandbox(&key, &sandbox_id).await;
    assert_eq!(record["stage"], "failed", "{record}");
    assert!(record["failure"].as_str().unwrap().contains("deadline"));
    let payments = env
        .req("GET", "/api/payments")
        .key(&key)
        .send()
        .await
        .json();
    assert_eq!(payments["items"][0]["state"], "credited", "{payments}");
    assert!(listing(&env, &key).await.is_empty());
    // Done once: the next passes have nothing to do.
    let again = env.reconcile_in(200).await;
    assert_eq!(again.refresh.due, 0, "{again:?}");
    assert_eq!(again.leases.due, 0, "{again:?}");
}

#[tokio::test]
async fn past_its_deadline_a_free_server_is_deleted() {
    let env = never_ready().await;
    let key = env.key(ALICE).await;
    let (server, sandbox_id) = env.provision(&key, "cloud_vps_free", None).await;
    let report = env.reconcile_in(121).await.refresh;
    assert_eq!(report.failed, 1, "{report:?}");
    assert_eq!(env.sim.powered_on(server), None);
    assert_eq!(env.sandbox(&key, &sandbox_id).await["stage"], "failed");
}

#[tokio::test]
async fn actions_write_their_transition_and_the_refresher_confirms_it() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let (server, sandbox_id) = env.provision(&key, "cloud_vps_free", None).await;
    env.clock.advance(Duration::from_millis(400));
    refresh(&env).await;
    assert_eq!(env.sandbox(&key, &sandbox_id).await["stage"], "ready");
    let act = |kind: &'static str| {
        env.req("POST", &format!("/api/cloud/servers/{server}/actions"))
            .key(&key)
            .json(serde_json::json!({"type": kind}))
            .send()
    };
    let res = act("power-off").await;
    assert_eq!(res.status, 202, "{}", res.body);
    assert_eq!(res.json()["transition"], "powering-off");
    let record = env.sandbox(&key, &sandbox_id).await;
    assert_eq!(
        (record["transition"].clone(), record["stage"].clone()),
        ("powering-off".into(), "network-ready".into())
    );
    let report = refresh(&env).await;
    assert_eq!(report.power_reads, 1, "{report:?}");
    let record = env.sandbox(&key, &sandbox_id).await;
    assert!(record.get("transition").is_none(), "{record}");
    assert_eq!(record["power"], "off");
    assert_eq!(record["stage"], "network-ready");
    // Power on: ready again once SSH answers.
    assert_eq!(act("power-on").await.json()["transition"], "powering-on");
    let report = refresh(&env).await;
    assert_eq!((report.power_reads, report.ready), (1, 1), "{report:?}");
    let record = env.sandbox(&key, &sandbox_id).await;
    assert_eq!(
        (record["stage"].clone(), record["power"].clone()),
        ("ready".into(), "on".into())
    );
}

#[tokio::test]
async fn a_server_deleted_at_the_provider_becomes_terminated() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let (server, sandbox_id) = env.provision(&key, "cloud_vps_free", None).await;
    env.sim.remove_server(server);
    let report = refresh(&env).await;
    assert_eq!(report.terminated, 1, "{report:?}");
    let record = env.sandbox(&key, &sandbox_id).await;
    assert_eq!(
        (record["status"].clone(), record["stage"].clone()),
        ("terminated".into(), "terminated".into())
    );
    assert!(listing(&env, &key).await.is_empty());
    assert_eq!(refresh(&env).await.due, 0, "off the schedule");
}

#[tokio::test]
async fn an_owners_delete_ends_the_watch_once_the_provider_lets_go() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let (server, sandbox_id) = env.provision(&key, "cloud_vps_free", None).await;
    let res = env
        .req("DELETE", &format!("/api/cloud/servers/{server}"))
        .key(&key)
        .send()
        .await;
    assert_eq!(res.status, 204);
    assert_eq!(env.sandbox(&key, &sandbox_id).await["stage"], "terminated");
    assert!(listing(&env, &key).await.is_empty());
    refresh(&env).await;
    assert_eq!(env.sandbox(&key, &sandbox_id).await["status"], "terminated");
    assert_eq!(refresh(&env).await.due, 0);
}

#[tokio::test]
async fn a_deadline_delete_that_fails_is_finished_by_the_next_pass() {
    let env = never_ready().await;
    let key = env.key(ALICE).await;
    let (server, sandbox_id, _) = crate::paid_time::paid_server(&env, &key, "stuck").await;
    env.sim
        .inject(e2e::sim::Fault::status("/servers/", 500).on(axum::http::Method::DELETE));
    let report = env.reconcile_in(121).await.refresh;
    assert_eq!((report.failed, report.errors), (0, 1), "{report:?}");
    assert_eq!(env.sim.unfired_faults(), 0);
    // The intent is recorded: failed, still to be deleted; nothing credited yet.
    assert!(env.sim.powered_on(server).is_some());
    assert_eq!(env.sandbox(&key, &sandbox_id).await["stage"], "failed");
    let payments = env
        .req("GET", "/api/payments")
        .key(&key)
        .send()
        .await
        .json();
    assert_eq!(payments["items"][0]["state"], "provisioned", "{payments}");
    // The next pass deletes it and credits the payment, once.
    let report = env.reconcile_in(182).await.refresh;
    assert_eq!(report.failed, 1, "{report:?}");
    assert_eq!(env.sim.powered_on(server), None);
    let payments = env
        .req("GET", "/api/payments")
        .key(&key)
        .send()
        .await
        .json();
    assert_eq!(payments["items"][0]["state"], "credited", "{payments}");
    assert_eq!(env.reconcile_in(243).await.refresh.due, 0);
}

#[tokio::test]
async fn servers_provisioned_before_watches_are_still_listed() {
    use domain::store::sandboxes::{SandboxRecord, ServerOwnership};
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let now = domain::time::Timestamp::of(domain::time::now());
    let legacy = SandboxRecord {
        event_seq: 0,
        id: domain::ids::new(domain::ids::SANDBOX),
        owner: owner(ALICE),
        server_id: Some(4242),
        project_id: Some(PROJECT),
        plan: Some("cloud_vps_free".into()),
        region: Some("LT-Siauliai".into()),
        hostname: Some("old-box".into()),
        name: None,
        metadata: Default::default(),
        status: "deployed".into(),
        created_at: now,
        updated_at: now,
        lease: None,
        watch: None,
        payment: None,
        authorized_keys: Vec::new(),
        resizing: None,
    };
    let ownership = ServerOwnership {
        server_id: 4242,
        owner: owner(ALICE),
        sandbox_id: legacy.id.clone(),
        project_id: PROJECT,
        created_at: now,
    };
    env.store.record_server(&ownership, &legacy).await.unwrap();
    // A metadata record naming the same server is not a second server.
    let res = env
        .req("POST", "/api/sandboxes")
        .key(&key)
        .json(serde_json::json!({"serverId": 4242, "name": "notes"}))
        .send()
        .await;
    assert_eq!(res.status, 201, "{}", res.body);
    let listed = listing(&env, &key).await;
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(
        (listed[0]["id"].clone(), listed[0]["hostname"].clone()),
        (4242.into(), "old-box".into())
    );
    assert_eq!(listed[0]["sandboxId"], legacy.id.as_str());
}

#[tokio::test]
async fn past_its_paid_time_a_server_is_the_leases_not_the_deadlines() {
    // Paid time (60 s) ends before the deployment deadline (120 s): the lease powers the server
    // off, and the deadline must not then delete it and hand the payment back as a credit.
    let env = TestEnv::with(Options {
        period_seconds: 60,
        grace_seconds: 3600,
        vars: vec![
            ("SSH_PROBE_TARGET", "127.0.0.1:9".into()),
            ("DEPLOY_DEADLINE_VPS_SECONDS", "120".into()),
        ],
        ..Options::default()
    })
    .await;
    let key = env.key(ALICE).await;
    let (server, sandbox_id, _) = crate::paid_time::paid_server(&env, &key, "lapsed").await;
    // One pass past both: the lease powers it off first, then the refresher reads it.
    let report = env.reconcile_in(121).await;
    assert_eq!(report.leases.expired, 1, "{report:?}");
    assert_eq!(
        (report.refresh.due, report.refresh.failed),
        (1, 0),
        "{report:?}"
    );
    assert_eq!(
        env.sim.powered_on(server),
        Some(false),
        "powered off, not deleted"
    );
    assert_eq!(env.sandbox(&key, &sandbox_id).await["status"], "expired");
    let payments = env
        .req("GET", "/api/payments")
        .key(&key)
        .send()
        .await
        .json();
    assert_eq!(payments["items"][0]["state"], "provisioned", "{payments}");
}

/// A credit from servers deleted undelivered redeems once: the second time its server is not
/// ready by its deadline, the credit can only be refunded — one payment never buys servers
/// without end.
#[tokio::test]
async fn a_credit_from_servers_undelivered_twice_can_only_be_refunded() {
    let env = never_ready().await;
    let key = env.key(ALICE).await;
    let path = format!("/api/cloud/servers/{}", crate::harness::PROJECT);
    let body = |host: &str| paid_body(host);
    let offer = env
        .req("POST", &path)
        .key(&key)
        .json(body("one"))
        .send()
        .await;
    let payment = crate::harness::pay(
        &alloy_signer_local::PrivateKeySigner::random(),
        offer.header("payment-required").unwrap(),
        2,
    );
    let send = |host: &'static str| {
        env.req("POST", &path)
            .key(&key)
            .header(payment.0, &payment.1)
            .json(body(host))
            .send()
    };
    assert_eq!(send("one").await.status, 201);
    assert_eq!(env.pass_after(121).await.refresh.failed, 1);
    // Undelivered once: redeemed for a server.
    let redeemed = send("two").await;
    assert_eq!(redeemed.status, 201, "{}", redeemed.body);
    assert_eq!(env.pass_after(130).await.refresh.failed, 1);
    // Undelivered twice: refund only.
    let doc = send("three").await.problem(409);
    assert!(
        doc["detail"].as_str().unwrap().contains("only be refunded"),
        "{doc}"
    );
    let payments = env
        .req("GET", "/api/payments")
        .key(&key)
        .send()
        .await
        .json();
    assert_eq!(
        payments["items"][0]["credit"]["redeemable"], false,
        "{payments}"
    );
    assert_eq!(env.facilitator.settles(), 1);
}

/// A paid plan's provisioning request for `host`.
fn paid_body(host: &str) -> serde_json::Value {
    serde_json::json!({"plan": "B1-1-1gb-20s-shared", "region": "LT-Siauliai", "hostname": host})
}
