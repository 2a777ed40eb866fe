//! SSH keys are the owner's (issue 33): `/api/ssh-keys`, `sshKeys` on provisioning and rebuild,
//! and a real SSH client (`russh`) logging in to the server an agent paid for — with its own key
//! only. The simulator's servers each answer SSH on a loopback address of their own
//! (`Options::server_ssh`), accepting exactly the keys they were created or rebuilt with.

use alloy_signer_local::PrivateKeySigner;
use domain::checkpoint::Step;
use e2e::shell::{fingerprint, key_pair, login, public};
use e2e::sim::Fault;
use serde_json::{Value, json};

use crate::harness::{ALICE, ApiRequest, BOB, Options, PROJECT, TestEnv, TestResponse, owner, pay};

const PLAN: &str = "B1-1-1gb-20s-shared";

async fn add(env: &TestEnv, key: &str, body: Value) -> TestResponse {
    env.req("POST", "/api/ssh-keys")
        .key(key)
        .json(body)
        .send()
        .await
}

/// The payment (a header) a new payer makes for the 402 that `body` is offered.
async fn payment_for(env: &TestEnv, key: &str, body: &Value) -> (&'static str, String) {
    let path = format!("/api/cloud/servers/{PROJECT}");
    let offer = env
        .req("POST", &path)
        .key(key)
        .json(body.clone())
        .send()
        .await;
    assert_eq!(offer.status, 402, "{}", offer.body);
    let signer = PrivateKeySigner::random();
    pay(&signer, offer.header("payment-required").unwrap(), 2)
}

/// `body` sent again with `payment`.
fn paying<'a>(
    env: &'a TestEnv,
    key: &str,
    payment: &(&str, String),
    body: Value,
) -> ApiRequest<'a> {
    env.req("POST", &format!("/api/cloud/servers/{PROJECT}"))
        .key(key)
        .header(payment.0, &payment.1)
        .json(body)
}

/// Pays for a server with `body`; its 201 body.
async fn paid(env: &TestEnv, key: &str, body: Value) -> Value {
    let payment = payment_for(env, key, &body).await;
    let res = paying(env, key, &payment, body).send().await;
    assert_eq!(res.status, 201, "{}", res.body);
    res.json()
}

/// The sandbox once `ready` (the refresher run as time goes by).
pub(crate) async fn ready(env: &TestEnv, key: &str, sandbox: &str) -> Value {
    for _ in 0..10 {
        let view = env.sandbox(key, sandbox).await;
        if view["stage"] == "ready" {
            return view;
        }
        env.pass_after(5).await;
    }
    panic!("never ready: {}", env.sandbox(key, sandbox).await);
}

#[tokio::test]
async fn an_agent_with_a_fresh_key_gets_a_shell_on_the_server_it_paid_for_and_no_one_else_does() {
    let env = TestEnv::with(Options {
        server_ssh: true,
        ..Options::default()
    })
    .await;
    let (alice, bob) = (env.key(ALICE).await, env.key(BOB).await);
    let mine = key_pair();
    let body = json!({"plan": PLAN, "region": "LT-Siauliai", "hostname": "agent-box",
                      "sshKeys": [public(&mine)]});
    let before = env.sim.requests().len();
    let created = paid(&env, &alice, body).await;
    // A new raw key: registered once, with the 402's request; the paid one only maps it.
    let calls = &env.sim.requests()[before..];
    assert_eq!(
        calls.iter().filter(|c| *c == "POST /ssh-keys").count(),
        1,
        "{calls:?}"
    );
    assert_eq!(
        calls.iter().filter(|c| *c == "GET /ssh-keys").count(),
        0,
        "{calls:?}"
    );
    let server = created["id"].as_u64().unwrap();
    let sandbox = created["sandboxId"].as_str().unwrap().to_owned();
    let view = ready(&env, &alice, &sandbox).await;
    let access = &view["access"];
    let listed = env
        .req("GET", "/api/ssh-keys")
        .key(&alice)
        .send()
        .await
        .json();
    let id = listed["items"][0]["id"].as_str().unwrap();
    assert_eq!(
        access["authorizedKeys"],
        json!([{"id": id, "fingerprint": fingerprint(&mine)}])
    );
    assert_eq!(listed["items"][0]["name"], "agent@example");
    // The provider put exactly that key on the server.
    let provider_ids = env.sim.server_key_ids(server).unwrap();
    assert_eq!(provider_ids.len(), 1);
    let label = env
        .sim
        .account_keys()
        .into_iter()
        .find(|(k, _)| *k == provider_ids[0])
        .unwrap()
        .1;
    assert!(
        label.starts_with(&format!(
            "svc {} {id} ",
            domain::address::Owner::parse(ALICE).unwrap()
        )),
        "{label}"
    );
    assert_eq!(login(access, &mine).await.unwrap(), "agent-box\n");
    // A host key other than the one the API answered is refused by the client.
    let mut spoofed = access.clone();
    spoofed["hostKeys"][0]["fingerprint"] = json!(fingerprint(&key_pair()));
    assert!(
        login(&spoofed, &mine)
            .await
            .unwrap_err()
            .contains("connect")
    );
    // Bob's key, registered with the provider too, does not get in.
    let theirs = key_pair();
    let added = add(&env, &bob, json!({"publicKey": public(&theirs)})).await;
    assert_eq!(added.status, 201, "{}", added.body);
    assert_eq!(
        login(access, &theirs).await.unwrap_err(),
        "authentication refused"
    );
    // Bob cannot name Alice's key, its provider id, nor the operator's: 400 before any 402.
    let path = format!("/api/cloud/servers/{PROJECT}");
    for (keys, field) in [
        (json!([id]), "sshKeys[0]"),
        (json!([provider_ids[0]]), "sshKeys[0]"),
        (json!([public(&theirs), 9845]), "sshKeys[1]"),
        (json!(["9846"]), "ssh_keys[0]"),
    ] {
        let name = if field.starts_with("ssh_keys") {
            "ssh_keys"
        } else {
            "sshKeys"
        };
        let res = env
            .req("POST", &path)
            .key(&bob)
            .json(json!({"plan": PLAN, "region": "LT-Siauliai", name: keys}))
            .send()
            .await;
        res.invalid(field);
    }
    // A rebuild with another key: the old one is out, the new one in.
    let next = key_pair();
    let res = env
        .req("POST", &format!("/api/cloud/servers/{server}/actions"))
        .key(&alice)
        .json(
            json!({"type": "rebuild", "image": "debian_12_64bit", "hostname": "agent-box-2",
                     "password": "nW7xKp2LmQ9z", "sshKeys": [public(&next)]}),
        )
        .send()
        .await;
    assert_eq!(res.status, 202, "{}", res.body);
    let rebuilt = ready(&env, &alice, &sandbox).await;
    let access = &rebuilt["access"];
    assert_eq!(
        access["authorizedKeys"][0]["fingerprint"],
        fingerprint(&next)
    );
    assert_eq!(login(access, &next).await.unwrap(), "agent-box-2\n");
    assert_eq!(
        login(access, &mine).await.unwrap_err(),
        "authentication refused"
    );
    // A known key: nothing to register.
    let before = env.sim.requests().len();
    paid(
        &env,
        &alice,
        json!({"plan": PLAN, "region": "LT-Siauliai", "sshKeys": [id]}),
    )
    .await;
    let calls = &env.sim.requests()[before..];
    assert!(!calls.iter().any(|c| c.contains("/ssh-keys")), "{calls:?}");
}

#[tokio::test]
async fn ssh_keys_are_added_once_listed_and_deleted_then_retired_from_the_provider() {
    let env = TestEnv::with(Options {
        vars: vec![("MAX_SSH_KEYS_PER_OWNER", "2".into())],
        ..Options::default()
    })
    .await;
    let (alice, bob) = (env.key(ALICE).await, env.key(BOB).await);
    let key = key_pair();
    let res = add(
        &env,
        &alice,
        json!({"name": "laptop", "publicKey": public(&key)}),
    )
    .await;
    assert_eq!(res.status, 201, "{}", res.body);
    let added = res.json();
    let id = added["id"].as_str().unwrap().to_owned();
    assert_eq!(
        res.header("location"),
        Some(format!("/api/ssh-keys/{id}").as_str())
    );
    assert_eq!(added["fingerprint"], fingerprint(&key));
    // Added: a record only, nothing at the provider until a paid server uses it.
    assert_eq!(
        (added["algorithm"].as_str(), added["registered"].as_bool()),
        (Some("ssh-ed25519"), Some(false))
    );
    let calls = env.sim.calls("POST /ssh-keys");
    assert_eq!(calls, 0);
    // The same key again: the same record, nothing sent.
    let again = add(
        &env,
        &alice,
        json!({"name": "other", "publicKey": public(&key)}),
    )
    .await;
    assert_eq!(
        (again.status, again.json()["id"].as_str()),
        (200, Some(id.as_str()))
    );
    assert_eq!(again.json()["name"], "laptop");
    assert_eq!(env.sim.calls("POST /ssh-keys"), calls);
    let listed = env
        .req("GET", "/api/ssh-keys")
        .key(&alice)
        .send()
        .await
        .json();
    assert_eq!(listed["items"].as_array().unwrap().len(), 1, "{listed}");
    let one = env
        .req("GET", &format!("/api/ssh-keys/{id}"))
        .key(&alice)
        .send()
        .await;
    assert_eq!(
        one.json()["publicKey"],
        public(&key).trim_end_matches(" agent@example")
    );
    // Another owner sees none of it.
    for method in ["GET", "DELETE"] {
        let res = env
            .req(method, &format!("/api/ssh-keys/{id}"))
            .key(&bob)
            .send()
            .await;
        assert_eq!(res.status, 404, "{}", res.body);
    }
    assert_eq!(
        env.req("GET", "/api/ssh-keys")
            .key(&bob)
            .send()
            .await
            .json()["items"],
        json!([])
    );
    // At the cap: 409.
    add(&env, &alice, json!({"publicKey": public(&key_pair())})).await;
    let third = add(&env, &alice, json!({"publicKey": public(&key_pair())})).await;
    assert_eq!(third.status, 409, "{}", third.body);
    // A paid server uses it: registered with the provider then, once.
    paid(
        &env,
        &alice,
        json!({"plan": PLAN, "region": "LT-Siauliai", "sshKeys": [id]}),
    )
    .await;
    assert_eq!(env.sim.calls("POST /ssh-keys"), 1);
    let one = env
        .req("GET", &format!("/api/ssh-keys/{id}"))
        .key(&alice)
        .send()
        .await;
    assert_eq!(one.json()["registered"], true, "{}", one.body);
    // Deleted: gone at once, counted off; the provider's copy goes with the pass after 60 s.
    let labelled = |env: &TestEnv| {
        env.sim
            .account_keys()
            .iter()
            .filter(|(_, l)| l.contains(&id))
            .count()
    };
    let res = env
        .req("DELETE", &format!("/api/ssh-keys/{id}"))
        .key(&alice)
        .send()
        .await;
    assert_eq!(res.status, 204, "{}", res.body);
    assert_eq!(
        env.req("GET", &format!("/api/ssh-keys/{id}"))
            .key(&alice)
            .send()
            .await
            .status,
        404
    );
    assert_eq!(
        add(&env, &alice, json!({"publicKey": public(&key_pair())}))
            .await
            .status,
        201
    );
    assert_eq!(env.pass_after(30).await.ssh_keys.removed, 0);
    assert_eq!(labelled(&env), 1);
    let report = env.pass_after(31).await.ssh_keys;
    assert_eq!((report.removed, report.deferred), (1, 0));
    assert_eq!(labelled(&env), 0);
    assert_eq!(env.pass_after(61).await.ssh_keys.removed, 0);
}

#[tokio::test]
async fn a_refused_key_is_a_400_naming_public_key_and_leaves_nothing() {
    let env = TestEnv::new().await;
    let alice = env.key(ALICE).await;
    let key = public(&key_pair());
    for text in [
        String::new(),
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn\n-----END OPENSSH PRIVATE KEY-----".into(),
        format!("{key}\n{key}"),
        format!("no-pty {key}"),
        "ssh-dss AAAAB3NzaC1kc3MAAACBAIYW dsa".into(),
        "ssh-ed25519 AAAA".into(),
    ] {
        add(&env, &alice, json!({"publicKey": text}))
            .await
            .invalid("publicKey");
    }
    add(&env, &alice, json!({"name": "", "publicKey": key}))
        .await
        .invalid("name");
    // Nothing refused was kept.
    assert_eq!(
        env.req("GET", "/api/ssh-keys")
            .key(&alice)
            .send()
            .await
            .json()["items"],
        json!([])
    );
    assert_eq!(
        add(&env, &alice, json!({"publicKey": key})).await.status,
        201
    );
    assert_eq!(env.sim.calls("POST /ssh-keys"), 0);
}

/// The provider refuses a key for good when the paid server that names it is created: the
/// key's record goes, the server is not made, and the payment becomes a credit.
#[tokio::test]
async fn a_key_the_provider_refuses_at_the_create_is_a_credit() {
    let env = TestEnv::new().await;
    let alice = env.key(ALICE).await;
    let key = public(&key_pair());
    env.sim
        .inject(Fault::status("/ssh-keys", 422).on(axum::http::Method::POST));
    let body = json!({"plan": PLAN, "region": "LT-Siauliai", "sshKeys": [key]});
    let payment = payment_for(&env, &alice, &body).await;
    assert_eq!(
        env.sim.calls("POST /ssh-keys"),
        0,
        "nothing at the provider before paying"
    );
    let res = paying(&env, &alice, &payment, body).send().await;
    assert_ne!(res.status, 201, "{}", res.body);
    assert!(res.body.contains("credit"), "{}", res.body);
    assert_eq!(env.sim.calls("POST /ssh-keys"), 1);
    assert!(env.sim.server_ids(PROJECT).is_empty());
    let keys = env
        .req("GET", "/api/ssh-keys")
        .key(&alice)
        .send()
        .await
        .json();
    assert_eq!(keys["items"], json!([]), "{keys}");
}

/// An SSH key added and deleted over and over costs the provider nothing: no write, no read.
#[tokio::test]
async fn a_key_added_and_deleted_ten_times_writes_nothing_at_the_provider() {
    let env = TestEnv::new().await;
    let alice = env.key(ALICE).await;
    let key = public(&key_pair());
    let before = env.sim.requests().len();
    for _ in 0..10 {
        let added = add(&env, &alice, json!({"publicKey": key})).await;
        assert_eq!(added.status, 201, "{}", added.body);
        let id = added.json()["id"].as_str().unwrap().to_owned();
        let gone = env
            .req("DELETE", &format!("/api/ssh-keys/{id}"))
            .key(&alice)
            .send()
            .await;
        assert_eq!(gone.status, 204, "{}", gone.body);
    }
    let report = env.pass_after(61).await.ssh_keys;
    assert_eq!((report.removed, report.deferred), (0, 0));
    let calls = &env.sim.requests()[before..];
    assert!(!calls.iter().any(|c| c.contains("ssh-keys")), "{calls:?}");
}

/// An SSH key added by an API key is disabled once that key is revoked, saying why: listed so,
/// and refused on a rebuild (or a new server) by the owner's other credentials.
#[tokio::test]
async fn a_revoked_keys_ssh_keys_are_disabled_and_refused_in_a_rebuild() {
    let env = TestEnv::new().await;
    let (agent, agent_id) = env.issue_key(ALICE, "agent").await;
    let other = env.key(ALICE).await;
    let added = add(&env, &agent, json!({"publicKey": public(&key_pair())}))
        .await
        .json();
    let id = added["id"].as_str().unwrap().to_owned();
    let server = paid(
        &env,
        &other,
        json!({"plan": PLAN, "region": "LT-Siauliai", "sshKeys": [id]}),
    )
    .await;
    let server_id = server["id"].as_u64().unwrap();
    domain::identity::keys::revoke(&env.store, &owner(ALICE), &agent_id, domain::time::now())
        .await
        .unwrap();
    let listed = env
        .req("GET", "/api/ssh-keys")
        .key(&other)
        .send()
        .await
        .json();
    let disabled = listed["items"][0]["disabled"].as_str().unwrap_or_default();
    assert!(
        disabled.contains(&agent_id) && disabled.contains("revoked"),
        "{listed}"
    );
    let rebuild = env
        .req("POST", &format!("/api/cloud/servers/{server_id}/actions"))
        .key(&other)
        .json(
            json!({"type": "rebuild", "image": "ubuntu_24_04_64bit", "hostname": "again",
                     "password": "nW7xKp2LmQ9z", "sshKeys": [id]}),
        )
        .send()
        .await;
    let problem = rebuild.invalid("sshKeys[0]");
    assert!(
        problem["detail"].as_str().unwrap().contains("disabled"),
        "{problem}"
    );
}

/// The registration a paid create makes first: its answer lost, the create is not sent and
/// the order waits; once the claim lapses, the key is found by its label (one copy at the
/// provider) and the server is made with it.
#[tokio::test]
async fn a_registration_whose_answer_was_lost_is_found_by_its_label_not_made_twice() {
    let env = TestEnv::new().await;
    let alice = env.key(ALICE).await;
    let added = add(&env, &alice, json!({"publicKey": public(&key_pair())}))
        .await
        .json();
    let id = added["id"].as_str().unwrap().to_owned();
    let keys_before = env.sim.account_keys().len();
    // The provider adds the key, and its answer is lost.
    env.sim
        .inject(Fault::status_after("/ssh-keys", 502).on(axum::http::Method::POST));
    let body = json!({"plan": PLAN, "region": "LT-Siauliai", "sshKeys": [id]});
    let payment = payment_for(&env, &alice, &body).await;
    let res = paying(&env, &alice, &payment, body).send().await;
    assert_eq!(res.status, 202, "{}", res.body);
    assert_eq!(env.sim.account_keys().len(), keys_before + 1);
    assert!(
        env.sim.server_ids(PROJECT).is_empty(),
        "no create without its keys"
    );
    let listed = env
        .req("GET", "/api/ssh-keys")
        .key(&alice)
        .send()
        .await
        .json();
    assert_eq!(listed["items"][0]["registered"], false, "{listed}");
    // The reconciler finishes the order once the claim lapsed: found by its label.
    for _ in 0..4 {
        env.pass_after(31).await;
        if !env.sim.server_ids(PROJECT).is_empty() {
            break;
        }
    }
    let servers = env.sim.server_ids(PROJECT);
    assert_eq!(servers.len(), 1);
    assert_eq!(env.sim.server_key_ids(servers[0]).unwrap().len(), 1);
    assert_eq!(env.sim.account_keys().len(), keys_before + 1);
    assert_eq!(env.sim.calls("POST /ssh-keys"), 1);
    let one = env
        .req("GET", &format!("/api/ssh-keys/{id}"))
        .key(&alice)
        .send()
        .await;
    assert_eq!(one.json()["registered"], true, "{}", one.body);
}

/// A key deleted while a paid order that names it is in flight (before its create): the key
/// never reached the provider, so nothing is left there; the server is not made without it, and
/// the payment is a credit.
#[tokio::test]
async fn a_key_deleted_while_an_order_names_it_leaves_nothing_at_the_provider() {
    let env = TestEnv::new().await;
    let alice = env.key(ALICE).await;
    let key = key_pair();
    let body = json!({"plan": PLAN, "region": "LT-Siauliai", "sshKeys": [public(&key)]});
    let payment = payment_for(&env, &alice, &body).await;
    let request = paying(&env, &alice, &payment, body);
    env.killed_at(Step::BeforeCreate, request).await;
    let id = env
        .req("GET", "/api/ssh-keys")
        .key(&alice)
        .send()
        .await
        .json()["items"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let res = env
        .req("DELETE", &format!("/api/ssh-keys/{id}"))
        .key(&alice)
        .send()
        .await;
    assert_eq!(res.status, 204, "{}", res.body);
    let state = || async {
        let orders = env.store.orders_of(&owner(ALICE), 10, None).await.unwrap();
        orders.items[0].state
    };
    for _ in 0..10 {
        env.pass_after(61).await;
        if !state().await.in_flight() {
            break;
        }
    }
    assert!(env.sim.server_ids(PROJECT).is_empty());
    assert_eq!(env.sim.calls("POST /ssh-keys"), 0);
    let orders = env.store.orders_of(&owner(ALICE), 10, None).await.unwrap();
    assert_eq!(orders.items.len(), 1);
    assert_eq!(
        orders.items[0].state,
        domain::store::payments::OrderState::Credited
    );
}

#[tokio::test]
async fn a_paid_replay_naming_a_key_deleted_since_still_says_what_was_charged() {
    let env = TestEnv::new().await;
    let alice = env.key(ALICE).await;
    let added = add(&env, &alice, json!({"publicKey": public(&key_pair())}))
        .await
        .json();
    let id = added["id"].as_str().unwrap().to_owned();
    let body = json!({"plan": PLAN, "region": "LT-Siauliai", "sshKeys": [id]});
    let path = format!("/api/cloud/servers/{PROJECT}");
    let offer = env
        .req("POST", &path)
        .key(&alice)
        .json(body.clone())
        .send()
        .await;
    let payment = pay(
        &PrivateKeySigner::random(),
        offer.header("payment-required").unwrap(),
        2,
    );
    let paid = env
        .req("POST", &path)
        .key(&alice)
        .header(payment.0, &payment.1)
        .json(body.clone())
        .send()
        .await;
    assert_eq!(paid.status, 201, "{}", paid.body);
    let res = env
        .req("DELETE", &format!("/api/ssh-keys/{id}"))
        .key(&alice)
        .send()
        .await;
    assert_eq!(res.status, 204);
    // The same payment again: the key is refused, and the answer says the payment was charged.
    let replay = env
        .req("POST", &path)
        .key(&alice)
        .header(payment.0, &payment.1)
        .json(body)
        .send()
        .await;
    let problem = replay.invalid("sshKeys[0]");
    assert!(
        replay.header("payment-response").is_some(),
        "{}",
        replay.body
    );
    assert!(
        problem["detail"].as_str().unwrap().contains("charged"),
        "{problem}"
    );
}

/// A rebuild registers the keys it names that the provider does not hold yet, and each of those
/// writes counts against its owner's budget of provider writes: past it, 429 `provider-writes`,
/// before anything reaches the provider.
#[tokio::test]
async fn a_rebuilds_new_keys_count_against_the_owners_provider_writes() {
    let env = TestEnv::with(Options {
        vars: vec![
            ("PROVIDER_WRITES_PER_SECOND", "0.002".into()),
            ("PROVIDER_WRITES_BURST", "2".into()),
        ],
        ..Options::default()
    })
    .await;
    let alice = env.key(ALICE).await;
    let server = paid(&env, &alice, json!({"plan": PLAN, "region": "LT-Siauliai"})).await;
    let rebuild = |keys: Vec<String>| {
        let (env, alice) = (&env, &alice);
        let path = format!("/api/cloud/servers/{}/actions", server["id"]);
        async move {
            env.req("POST", &path)
                .key(alice)
                .json(json!({"type": "rebuild", "image": "ubuntu_24_04_64bit",
                    "hostname": "again", "password": "nW7xKp2LmQ9z", "sshKeys": keys}))
                .send()
                .await
        }
    };
    let two: Vec<String> = (0..2).map(|_| public(&key_pair())).collect();
    assert_eq!(rebuild(two.clone()).await.status, 202);
    assert_eq!(env.sim.calls("POST /ssh-keys"), 2);
    // The same keys again: registered already, nothing written.
    assert_eq!(rebuild(two).await.status, 202);
    let third = rebuild(vec![public(&key_pair())]).await;
    assert_eq!(third.status, 429, "{}", third.body);
    let policy = third.header("ratelimit-policy").unwrap();
    assert!(policy.starts_with("\"provider-writes\""), "{policy}");
    assert_eq!(env.sim.calls("POST /ssh-keys"), 2);
}
