//! Actions and delete (issue point 7): owner only, every type, ids validated first.

use alloy_signer_local::PrivateKeySigner;
use serde_json::{Value, json};

use crate::harness::{ALICE, BOB, PROJECT, TestEnv, TestResponse, pay};

fn action_calls(env: &TestEnv) -> usize {
    env.upstream_log()
        .iter()
        .filter(|r| r.ends_with("/actions"))
        .count()
}

async fn power(env: &TestEnv, id: u64) -> Value {
    reqwest::Client::new()
        .get(format!("{}/servers/{id}?fields=power", env.sim_url))
        .bearer_auth(crate::harness::TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

#[tokio::test]
async fn power_reboot_and_rebuild_on_an_owned_server() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let (id, sandbox) = env.provision(&key, "cloud_vps_free", None).await;
    let act = |body: Value| {
        let env = &env;
        let key = key.clone();
        async move {
            env.req("POST", &format!("/api/cloud/servers/{id}/actions"))
                .key(&key)
                .json(body)
                .send()
                .await
        }
    };
    let res = act(json!({"type": "power-off"})).await;
    assert_eq!(res.status, 202, "{}", res.body);
    assert_eq!(res.json()["id"], id);
    assert_eq!(power(&env, id).await, json!({"power": "off"}));
    assert_eq!(act(json!({"type": "power-on"})).await.status, 202);
    assert_eq!(power(&env, id).await, json!({"power": "on"}));
    assert_eq!(act(json!({"type": "reboot"})).await.status, 202);
    let res = act(json!({
        "type": "rebuild", "image": "ubuntu_24_04_64bit", "hostname": "rebuilt-01",
        "password": "nW7xKp2LmQ9z", "ssh_keys": [e2e::shell::public(&e2e::shell::key_pair())],
        "user_data": "I2Nsb3VkLWNvbmZpZwo="
    }))
    .await;
    assert_eq!(res.status, 202, "{}", res.body);
    assert_eq!(res.json()["status"], "deploying");
    let record = env.store.sandbox(&sandbox).await.unwrap().unwrap();
    assert_eq!(
        (record.status.as_str(), record.hostname.as_deref()),
        ("deploying", Some("rebuilt-01"))
    );
    assert_eq!(action_calls(&env), 4);
}

#[tokio::test]
async fn rescue_mode_is_for_bare_metal_as_the_provider_says() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let (vps, _) = env.provision(&key, "cloud_vps_free", None).await;
    let (metal, sandbox) = env.provision(&key, "bm_trial", None).await;
    let rescue = json!({"type": "enter-rescue-mode", "password": "rS4cueTmp8q"});
    let doc = env
        .req("POST", &format!("/api/cloud/servers/{vps}/actions"))
        .key(&key)
        .json(rescue.clone())
        .send()
        .await
        .problem(400);
    assert_eq!(doc["type"], "/problems/upstream-rejected");
    let res = env
        .req("POST", &format!("/api/cloud/servers/{metal}/actions"))
        .key(&key)
        .json(rescue)
        .send()
        .await;
    assert_eq!(res.status, 202, "{}", res.body);
    assert_eq!(res.json()["status"], "rescue mode");
    assert_eq!(
        env.store
            .sandbox(&sandbox)
            .await
            .unwrap()
            .unwrap()
            .status
            .as_str(),
        "rescue mode"
    );
    let res = env
        .req("POST", &format!("/api/cloud/servers/{metal}/actions"))
        .key(&key)
        .json(json!({"type": "exit-rescue-mode"}))
        .send()
        .await;
    assert_eq!(res.status, 202);
    assert_ne!(res.json()["status"], "rescue mode");
}

#[tokio::test]
async fn unknown_types_and_missing_fields_are_400_without_a_provider_call() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let (id, _) = env.provision(&key, "cloud_vps_free", None).await;
    let path = format!("/api/cloud/servers/{id}/actions");
    let cases = [
        (json!({}), "type"),
        (json!({"type": "explode"}), "type"),
        (json!({"type": "power_off"}), "type"),
        (json!({"type": 7}), "type"),
        (json!({"type": "enter-rescue-mode"}), "password"),
        (
            json!({"type": "enter-rescue-mode", "password": "weak"}),
            "password",
        ),
        (
            json!({"type": "rebuild", "hostname": "h", "password": "nW7xKp2LmQ9z"}),
            "image",
        ),
        (
            json!({"type": "rebuild", "image": "debian_12_64bit", "password": "nW7xKp2LmQ9z"}),
            "hostname",
        ),
        (
            json!({"type": "rebuild", "image": "debian_12_64bit", "hostname": "h"}),
            "password",
        ),
        (
            json!({"type": "rebuild", "image": "debian_12_64bit", "hostname": "h",
                "password": "nW7xKp2LmQ9z", "user_data": "!"}),
            "user_data",
        ),
        (
            json!({"type": "reboot", "image": "debian_12_64bit"}),
            "image",
        ),
        (json!({"type": "reboot", "force": true}), "force"),
    ];
    for (body, field) in cases {
        env.req("POST", &path)
            .key(&key)
            .json(body)
            .send()
            .await
            .invalid(field);
    }
    assert_eq!(action_calls(&env), 0);
}

#[tokio::test]
async fn another_owners_server_is_403_and_untouched() {
    let env = TestEnv::new().await;
    let alice = env.key(ALICE).await;
    let bob = env.key(BOB).await;
    let (id, sandbox) = env.provision(&alice, "cloud_vps_free", None).await;
    let foreign = env.sim.create_foreign_server(PROJECT);
    for target in [id, foreign] {
        env.req("POST", &format!("/api/cloud/servers/{target}/actions"))
            .key(&bob)
            .json(json!({"type": "power-off"}))
            .send()
            .await
            .problem(403);
        env.req("DELETE", &format!("/api/cloud/servers/{target}"))
            .key(&bob)
            .send()
            .await
            .problem(403);
    }
    // Alice cannot touch a server provisioned outside the service either.
    env.req("DELETE", &format!("/api/cloud/servers/{foreign}"))
        .key(&alice)
        .send()
        .await
        .problem(403);
    assert_eq!(action_calls(&env), 0);
    assert!(!env.upstream_log().iter().any(|r| r.starts_with("DELETE")));
    assert_eq!(power(&env, id).await, json!({"power": "on"}));
    assert_eq!(
        env.store
            .sandbox(&sandbox)
            .await
            .unwrap()
            .unwrap()
            .status
            .as_str(),
        "deploying"
    );
}

#[tokio::test]
async fn server_ids_are_validated_before_the_store_or_provider() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    for bad in ["abc", "12a", "..", "-5", "0"] {
        env.req("POST", &format!("/api/cloud/servers/{bad}/actions"))
            .key(&key)
            .json(json!({"type": "reboot"}))
            .send()
            .await
            .invalid("serverId");
        env.req("DELETE", &format!("/api/cloud/servers/{bad}"))
            .key(&key)
            .send()
            .await
            .invalid("serverId");
    }
    assert!(env.upstream_log().is_empty());
}

#[tokio::test]
async fn delete_terminates_and_is_idempotent() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let (id, sandbox) = env.provision(&key, "cloud_vps_free", None).await;
    let res = env
        .req("DELETE", &format!("/api/cloud/servers/{id}"))
        .key(&key)
        .send()
        .await;
    assert_eq!(res.status, 204, "{}", res.body);
    assert_eq!(res.body, "");
    assert_eq!(env.sim.server_count(), 0);
    assert_eq!(
        env.store.sandbox(&sandbox).await.unwrap().unwrap().status,
        domain::store::sandboxes::Status::Terminating
    );
    // Gone at the provider (404 there): still 204 here, and the sandbox says so.
    assert_eq!(
        env.req("DELETE", &format!("/api/cloud/servers/{id}"))
            .key(&key)
            .send()
            .await
            .status,
        204
    );
    assert_eq!(
        env.store.sandbox(&sandbox).await.unwrap().unwrap().status,
        domain::store::sandboxes::Status::Terminated
    );
    // Actions on it now get the provider's 404.
    env.req("POST", &format!("/api/cloud/servers/{id}/actions"))
        .key(&key)
        .json(json!({"type": "reboot"}))
        .send()
        .await
        .problem(404);
}

/// A paid bare-metal server of `key`'s made with `image`: its id.
async fn paid_metal(env: &TestEnv, key: &str, image: &str) -> u64 {
    let body = json!({"plan": "e5_1650v4", "region": "LT-Siauliai", "image": image});
    let path = format!("/api/cloud/servers/{PROJECT}");
    let offer = env
        .req("POST", &path)
        .key(key)
        .json(body.clone())
        .send()
        .await;
    assert_eq!(offer.status, 402, "{}", offer.body);
    let header = offer.header("payment-required").unwrap();
    let payment = pay(&PrivateKeySigner::random(), header, 2);
    let res = env
        .req("POST", &path)
        .key(key)
        .header(payment.0, &payment.1)
        .json(body)
        .send()
        .await;
    assert_eq!(res.status, 201, "{}", res.body);
    res.json()["id"].as_u64().unwrap()
}

/// A rebuild of `server` to `image`, with a new SSH key, by `key`.
async fn rebuild(env: &TestEnv, key: &str, server: u64, image: &str) -> TestResponse {
    env.req("POST", &format!("/api/cloud/servers/{server}/actions"))
        .key(key)
        .json(json!({
            "type": "rebuild", "image": image, "hostname": "rebuilt", "password": "nW7xKp2LmQ9z",
            "sshKeys": [e2e::shell::public(&e2e::shell::key_pair())]
        }))
        .send()
        .await
}

/// A licensed image (one with its own price, which the provider bills by the hour) is taken by
/// a rebuild only on a paid server whose paid time was paid for it (issue 63, point 7): on a
/// free server or one paid for another image it is 409 saying what to do, with nothing sent to
/// the provider — no action, no SSH key; an image without a price is taken.
#[tokio::test]
async fn a_rebuild_to_a_licensed_image_the_lease_was_not_paid_for_is_refused() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let (free, _) = env.provision(&key, "bm_trial", None).await;
    let paid = paid_metal(&env, &key, "ubuntu_24_04_64bit").await;
    let licensed = paid_metal(&env, &key, "windows_2022").await;
    let keys_written = env.sim.calls("POST /ssh-keys");
    for server in [free, paid] {
        let doc = rebuild(&env, &key, server, "windows_2022")
            .await
            .problem(409);
        let detail = doc["detail"].as_str().unwrap();
        assert!(
            detail.contains("`windows_2022` has its own price")
                && detail.contains("rebuild to an image without a price")
                && detail.contains("provision a new server with `windows_2022`"),
            "{detail}"
        );
    }
    assert_eq!(action_calls(&env), 0);
    assert_eq!(env.sim.calls("POST /ssh-keys"), keys_written);
    // An image the server's plan does not offer is refused too, naming it.
    rebuild(&env, &key, paid, "windows_2019")
        .await
        .invalid("image");
    // An image without a price is taken, and so is the licensed image a server was paid with.
    for (server, image) in [
        (free, "debian_12_64bit"),
        (paid, "debian_12_64bit"),
        (licensed, "windows_2022"),
    ] {
        let res = rebuild(&env, &key, server, image).await;
        assert_eq!(res.status, 202, "{server} to {image}: {}", res.body);
    }
    assert_eq!(action_calls(&env), 3);
    assert_eq!(env.sim.calls("POST /ssh-keys"), keys_written + 3);
    // The paid server on a free image still takes no licensed one.
    rebuild(&env, &key, paid, "windows_2022").await.problem(409);
    assert_eq!(action_calls(&env), 3);
}
