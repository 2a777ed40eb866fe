//! `GET /api/cloud/quote`: the exact offer a provisioning or a renewal would carry, with no side
//! effect, and the same refusals before payment.

use alloy_signer_local::PrivateKeySigner;
use serde_json::{Value, json};

use crate::harness::{ALICE, BOB, PROJECT, TREASURY, TestEnv, owner, pay};

async fn quote(env: &TestEnv, key: &str, query: &str) -> crate::harness::TestResponse {
    env.req("GET", "/api/cloud/quote")
        .key(key)
        .query(query)
        .send()
        .await
}

fn offer_of(res: &crate::harness::TestResponse) -> Value {
    assert_eq!(res.status, 402, "{}", res.body);
    res.json()["accepts"][0].clone()
}

#[tokio::test]
async fn a_quote_is_the_offer_the_402_carries() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    for (query, body) in [
        (
            format!("plan=B1-1-1gb-20s-shared&region=LT-Siauliai&projectId={PROJECT}"),
            json!({"plan": "B1-1-1gb-20s-shared", "region": "LT-Siauliai"}),
        ),
        (
            "plan=e5_1650v4&region=LT-Siauliai&image=windows_2022".to_owned(),
            json!({"plan": "e5_1650v4", "region": "LT-Siauliai", "image": "windows_2022"}),
        ),
    ] {
        let quoted = quote(&env, &key, &query).await;
        assert_eq!(quoted.status, 200, "{}", quoted.body);
        let quoted = quoted.json();
        let offer = offer_of(
            &env.req("POST", &format!("/api/cloud/servers/{PROJECT}"))
                .key(&key)
                .json(body)
                .send()
                .await,
        );
        assert_eq!(quoted["amount"], offer["maxAmountRequired"], "{quoted}");
        assert_eq!(quoted["payTo"], offer["payTo"]);
        assert_eq!(quoted["asset"], offer["asset"]);
        assert_eq!(quoted["network"], "eip155:84532");
        assert_eq!(quoted["maxTimeoutSeconds"], offer["maxTimeoutSeconds"]);
        assert_eq!(quoted["free"], false);
        assert!(quoted["price"]["period"]["planPart"]["hourly"].is_number());
        assert!(
            domain::time::parse_rfc3339(quoted["validUntil"].as_str().unwrap()).unwrap()
                > domain::time::now()
        );
    }
    // Periods multiply the period price.
    let three = quote(
        &env,
        &key,
        "plan=B1-1-1gb-20s-shared&region=LT-Siauliai&periods=3",
    )
    .await
    .json();
    assert_eq!(three["amount"], (3 * 18_460_240u64).to_string());
    assert_eq!(three["payTo"], TREASURY.to_lowercase());
    // A free plan is free.
    let free = quote(&env, &key, "plan=cloud_vps_free&region=LT-Siauliai")
        .await
        .json();
    assert_eq!(
        (free["free"].clone(), free["amount"].clone()),
        (json!(true), json!("0"))
    );
    // No side effect: nothing claimed, nothing created.
    assert_eq!(
        env.store
            .orders_of(&owner(ALICE), 10, None)
            .await
            .unwrap()
            .items
            .len(),
        0
    );
    assert_eq!(env.sim.server_count(), 0);
}

#[tokio::test]
async fn a_quote_refuses_what_provisioning_would_refuse() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let cases = [
        ("region=LT-Siauliai", "plan"),
        ("plan=B1-1-1gb-20s-shared", "region"),
        ("plan=nope&region=LT-Siauliai", "plan"),
        ("plan=e5_1650v4&region=NL-Amsterdam", "region"),
        (
            "plan=cloud_vps_free&region=LT-Siauliai&image=windows_2022",
            "image",
        ),
        (
            "plan=cloud_vps_free&region=LT-Siauliai&projectId=999999",
            "projectId",
        ),
        (
            "plan=cloud_vps_free&region=LT-Siauliai&projectId=abc",
            "projectId",
        ),
        (
            "plan=cloud_vps_free&region=LT-Siauliai&periods=13",
            "periods",
        ),
        ("serverId=x", "serverId"),
    ];
    for (query, field) in cases {
        quote(&env, &key, query).await.invalid(field);
    }
    env.req("GET", "/api/cloud/quote").send().await.problem(401);
}

#[tokio::test]
async fn a_renewal_quote_is_the_renewals_offer() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let path = format!("/api/cloud/servers/{PROJECT}");
    let body = json!({"plan": "B1-1-1gb-20s-shared", "region": "LT-Siauliai"});
    let first = env
        .req("POST", &path)
        .key(&key)
        .json(body.clone())
        .send()
        .await;
    let payment = pay(
        &PrivateKeySigner::random(),
        first.header("payment-required").unwrap(),
        2,
    );
    let created = env
        .req("POST", &path)
        .key(&key)
        .header(payment.0, &payment.1)
        .json(body)
        .send()
        .await;
    let server = created.json()["id"].as_u64().unwrap();
    // Delivered (deployed, SSH answered): no longer on its first deployment, so renewable.
    env.pass_after(1).await;
    let quoted = quote(&env, &key, &format!("serverId={server}&periods=2")).await;
    assert_eq!(quoted.status, 200, "{}", quoted.body);
    let offer = offer_of(
        &env.req("POST", &format!("/api/cloud/servers/{server}/renewals"))
            .key(&key)
            .json(json!({"periods": 2}))
            .send()
            .await,
    );
    assert_eq!(quoted.json()["amount"], offer["maxAmountRequired"]);
    let bob = env.key(BOB).await;
    quote(&env, &bob, &format!("serverId={server}"))
        .await
        .problem(403);
}
