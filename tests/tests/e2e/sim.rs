//! The upstream simulator itself follows `reference/upstream-cherry-api.md` (issue point 10).

use std::time::Duration;

use domain::clock::Clock;
use e2e::sim::Simulator;
use serde_json::{Value, json};

/// A simulator on its own clock (moved by the test, never slept on), its client and base URL,
/// serving until the guard is dropped.
async fn start(deploy: Duration) -> (reqwest::Client, String, Clock, e2e::Serving) {
    let clock = Clock::system();
    let sim = Simulator::with_clock("t0ken", deploy, clock.clone());
    let running = sim.start("127.0.0.1:0").await.unwrap();
    (
        reqwest::Client::new(),
        running.base_url,
        clock,
        running.serving,
    )
}

#[tokio::test]
async fn lists_are_bare_arrays_and_errors_are_code_and_message() {
    let (http, base, _, _serving) = start(Duration::ZERO).await;
    let res = http
        .get(format!("{base}/plans"))
        .bearer_auth("t0ken")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert!(res.headers().contains_key("x-total-count"));
    let plans: Value = res.json().await.unwrap();
    let plans = plans.as_array().expect("bare array");
    let cost = |slug: &str| plans.iter().find(|p| p["slug"] == slug).unwrap()["pricing"].clone();
    assert_eq!(cost("cloud_vps_free")[0]["price"], 0.0);
    assert!(
        plans
            .iter()
            .filter(|p| p["pricing"]
                .as_array()
                .unwrap()
                .iter()
                .any(|e| e["price"].as_f64() > Some(0.0)))
            .count()
            >= 3
    );
    assert!(
        plans
            .iter()
            .all(|p| p["available_regions"][0]["stock_qty"].is_i64())
    );
    for path in [
        "/regions",
        "/teams",
        "/teams/210345/projects",
        "/plans/bm_trial/images",
    ] {
        let v: Value = http
            .get(format!("{base}{path}"))
            .bearer_auth("t0ken")
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert!(v.is_array(), "{path}");
    }
    let res = http
        .get(format!("{base}/plans"))
        .bearer_auth("wrong")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 401);
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["code"], 401);
    assert!(body["message"].is_string());
    let res = http
        .get(format!("{base}/servers/1"))
        .bearer_auth("t0ken")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 404);
    assert_eq!(res.json::<Value>().await.unwrap()["code"], 404);
}

#[tokio::test]
async fn servers_live_deploy_power_rescue_and_die() {
    let (http, base, clock, _serving) = start(Duration::from_millis(200)).await;
    let create = |body: Value| {
        http.post(format!("{base}/projects/254871/servers"))
            .bearer_auth("t0ken")
            .json(&body)
            .send()
    };
    let res = create(json!({"plan": "nope", "region": "LT-Siauliai"}))
        .await
        .unwrap();
    assert_eq!(res.status(), 400);
    assert_eq!(
        res.json::<Value>().await.unwrap()["message"],
        "Given server plan was not found."
    );
    let res = create(json!({"plan": "bm_trial", "region": "LT-Siauliai", "ssh_keys": ["9845", 1]}))
        .await
        .unwrap();
    assert_eq!(res.status(), 400, "unknown SSH keys are refused");
    let res =
        create(json!({"plan": "bm_trial", "region": "LT-Siauliai", "ssh_keys": ["9845", 9846]}))
            .await
            .unwrap();
    assert_eq!(res.status(), 201);
    let server: Value = res.json().await.unwrap();
    let id = server["id"].as_u64().unwrap();
    assert_eq!(
        (server["status"].as_str(), server["state"].as_str()),
        (Some("deploying"), Some("pending"))
    );
    assert_eq!(
        server["ssh_keys"],
        json!([{"id": 9845, "href": "/ssh-keys/9845"}, {"id": 9846, "href": "/ssh-keys/9846"}])
    );
    assert_eq!(server["termination_date"], "None");
    clock.advance(Duration::from_millis(250));
    let get = |q: &'static str| {
        http.get(format!("{base}/servers/{id}{q}"))
            .bearer_auth("t0ken")
            .send()
    };
    assert_eq!(
        get("").await.unwrap().json::<Value>().await.unwrap()["status"],
        "deployed"
    );
    let act = |body: Value| {
        http.post(format!("{base}/servers/{id}/actions"))
            .bearer_auth("t0ken")
            .json(&body)
            .send()
    };
    for (spelling, power) in [
        ("power_off", "off"),
        ("power-on", "on"),
        ("power-off", "off"),
        ("power_on", "on"),
    ] {
        assert_eq!(act(json!({"type": spelling})).await.unwrap().status(), 202);
        assert_eq!(
            get("?fields=power")
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap(),
            json!({"power": power})
        );
    }
    assert_eq!(
        act(json!({"type": "exit-rescue-mode"}))
            .await
            .unwrap()
            .status(),
        400
    );
    assert_eq!(
        act(json!({"type": "enter-rescue-mode", "password": "rS4cueTmp8q"}))
            .await
            .unwrap()
            .json::<Value>()
            .await
            .unwrap()["status"],
        "rescue mode"
    );
    assert_eq!(
        act(json!({"type": "exit-rescue-mode"}))
            .await
            .unwrap()
            .status(),
        202
    );
    for kind in ["rebuild", "reinstall"] {
        let res = act(json!({"type": kind, "image": "debian_12_64bit",
            "password": "nW7xKp2LmQ9z", "hostname": "x"}))
        .await
        .unwrap();
        assert_eq!(res.status(), 202);
        assert_eq!(res.json::<Value>().await.unwrap()["status"], "deploying");
    }
    assert_eq!(
        act(json!({"type": "teleport"})).await.unwrap().status(),
        400
    );
    let res = http
        .delete(format!("{base}/servers/{id}"))
        .bearer_auth("t0ken")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 204);
    assert_eq!(get("").await.unwrap().status(), 404);
}
