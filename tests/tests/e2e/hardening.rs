//! The hardening list of the key-policies issue (point 4): each item an attacker found, and what
//! the service does now.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use alloy_signer_local::PrivateKeySigner;
use serde_json::json;

use crate::harness::{ALICE, Options, PROJECT, TestEnv, siwe_message};

const DOMAIN: &str = "127.0.0.1:9000";
const URI: &str = "http://127.0.0.1:9000";

#[tokio::test]
async fn teams_show_only_their_id_and_name() {
    let env = TestEnv::new().await;
    let key = env.key(ALICE).await;
    let res = env.req("GET", "/api/cloud/teams").key(&key).send().await;
    assert_eq!(res.status, 200, "{}", res.body);
    let teams = res.json();
    assert!(!teams.as_array().unwrap().is_empty());
    for team in teams.as_array().unwrap() {
        let mut fields: Vec<&String> = team.as_object().unwrap().keys().collect();
        fields.sort();
        assert_eq!(fields, ["id", "name"], "{team}");
    }
    // The provider's object has the billing details this no longer passes on.
    let raw = env.state.upstream().unwrap().teams().await.unwrap();
    assert!(raw[0].get("billing").is_some() || raw[0].as_object().unwrap().len() > 2);
}

#[tokio::test]
async fn a_sign_in_must_be_json_so_a_cross_site_form_cannot_post_one() {
    let env = TestEnv::new().await;
    let signer = PrivateKeySigner::random();
    let nonce = env.req("GET", "/api/auth/nonce").send().await.json()["nonce"]
        .as_str()
        .unwrap()
        .to_owned();
    let message = siwe_message(&signer, DOMAIN, URI, 8453, &nonce, |_| {});
    let body = json!({"message": message, "signature": crate::harness::sign(&signer, &message)});
    for media_type in [
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
    ] {
        let res = env
            .req("POST", "/api/auth/verify")
            .header("content-type", media_type)
            .header("origin", "https://evil.example")
            .body(&body.to_string())
            .send()
            .await;
        let doc = res.problem(415);
        assert_eq!(doc["type"], "/problems/unsupported-media-type");
    }
    // No content type at all is refused too; the nonce is still unused, so the real one works.
    let res = env
        .req("POST", "/api/auth/verify")
        .body(&body.to_string())
        .send()
        .await;
    res.problem(415);
    let ok = env
        .req("POST", "/api/auth/verify")
        .header("content-type", "application/json; charset=utf-8")
        .body(&body.to_string())
        .send()
        .await;
    assert_eq!(ok.status, 200, "{}", ok.body);
}

#[tokio::test]
async fn a_nonce_not_of_the_issued_form_is_refused_before_the_store() {
    let env = TestEnv::new().await;
    let signer = PrivateKeySigner::random();
    let deletes = env.faults.calls("DeleteItem");
    for nonce in [
        "a".repeat(3000),
        "ABCDEF0123456789ABCDEF0123456789".into(),
        "abc12345".into(),
    ] {
        let message = siwe_message(&signer, DOMAIN, URI, 8453, &nonce, |_| {});
        let res = env
            .req("POST", "/api/auth/verify")
            .json(json!({"message": message, "signature": crate::harness::sign(&signer, &message)}))
            .send()
            .await;
        let doc = res.invalid("message");
        assert!(doc["detail"].as_str().unwrap().contains("nonce"), "{doc}");
    }
    // A message that does not parse but names an oversized nonce: the same.
    let res = env
        .req("POST", "/api/auth/verify")
        .json(
            json!({"message": format!("garbage\nNonce: {}", "b".repeat(100)), "signature": "0x00"}),
        )
        .send()
        .await;
    res.invalid("message");
    assert_eq!(
        env.faults.calls("DeleteItem"),
        deletes,
        "the store was never asked"
    );
}

/// A server that answers every request with a redirect to `target`, and one that counts what
/// reaches it and whether it carried credentials.
async fn redirector(target: &str) -> String {
    let target = target.to_owned();
    let app = axum::Router::new().fallback(move || {
        let target = target.clone();
        async move {
            (
                axum::http::StatusCode::TEMPORARY_REDIRECT,
                [(axum::http::header::LOCATION, target)],
            )
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

async fn counter(hits: Arc<AtomicUsize>) -> String {
    let app = axum::Router::new().fallback(move || {
        let hits = hits.clone();
        async move {
            hits.fetch_add(1, Ordering::SeqCst);
            "{}"
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

#[tokio::test]
async fn the_provider_and_facilitator_clients_never_follow_a_redirect() {
    let hits = Arc::new(AtomicUsize::new(0));
    let elsewhere = counter(hits.clone()).await;
    let upstream = redirector(&format!("{elsewhere}/v1/plans")).await;
    let facilitator = redirector(&format!("{elsewhere}/verify")).await;
    let env = TestEnv::with(Options {
        vars: vec![("FACILITATOR_URL", facilitator.clone())],
        ..Options::default()
    })
    .await;
    let key = env.key(ALICE).await;
    // The facilitator: a paid provisioning's verify and settle are redirected, never followed.
    let offer = env
        .req("POST", &format!("/api/cloud/servers/{PROJECT}"))
        .key(&key)
        .json(json!({"plan": "B1-1-1gb-20s-shared", "region": "LT-Siauliai"}))
        .send()
        .await;
    assert_eq!(offer.status, 402, "{}", offer.body);
    let payment = crate::harness::pay(
        &PrivateKeySigner::random(),
        offer.header("payment-required").unwrap(),
        2,
    );
    let paid = env
        .req("POST", &format!("/api/cloud/servers/{PROJECT}"))
        .key(&key)
        .header(payment.0, &payment.1)
        .json(json!({"plan": "B1-1-1gb-20s-shared", "region": "LT-Siauliai"}))
        .send()
        .await;
    // A redirect is no answer: the settlement is unknown until the chain says (202), or refused.
    assert!(
        paid.status == 202 || paid.status >= 500,
        "{} {}",
        paid.status,
        paid.body
    );
    assert_eq!(env.sim.server_count(), 0);
    // The provider: a read redirected elsewhere is an upstream error.
    let env = TestEnv::with(Options {
        vars: vec![("UPSTREAM_URL", format!("{upstream}/v1"))],
        ..Options::default()
    })
    .await;
    let key = env.key(ALICE).await;
    let res = env.req("GET", "/api/cloud/plans").key(&key).send().await;
    res.problem(502);
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "nothing followed a redirect"
    );
}

#[tokio::test]
async fn key_expiry_is_kept_in_utc_and_compared_as_time() {
    let env = TestEnv::new().await;
    let signer = PrivateKeySigner::random();
    let session = env.sign_in(&signer).await;
    // An hour from now, written at UTC−02:00: as a string it sorts before now.
    let offset = time::UtcOffset::from_hms(-2, 0, 0).unwrap();
    let at = (domain::time::now() + time::Duration::hours(1)).to_offset(offset);
    let given = at
        .replace_nanosecond(0)
        .unwrap()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap();
    assert!(given.ends_with("-02:00") && given < domain::time::rfc3339(domain::time::now()));
    let res = env
        .req("POST", "/api/keys/generate")
        .bearer(&session)
        .json(json!({"name": "west", "expiresAt": given}))
        .send()
        .await;
    assert_eq!(res.status, 201, "{}", res.body);
    let created = res.json();
    assert_eq!(created["expiresAt"], domain::time::rfc3339(at), "{created}");
    assert!(created["expiresAt"].as_str().unwrap().ends_with('Z'));
    // The key registers an agent: no spurious 409 from a string comparison.
    let agent = env
        .req("POST", "/api/agents")
        .key(created["key"].as_str().unwrap())
        .json(json!({"name": "builder"}))
        .send()
        .await;
    assert_eq!(agent.status, 201, "{}", agent.body);
}

#[tokio::test]
async fn agents_of_an_expired_key_are_inactive() {
    let env = TestEnv::new().await;
    let signer = PrivateKeySigner::random();
    let owner = domain::address::Owner::of(signer.address());
    let session = env.sign_in(&signer).await;
    let expires = domain::time::Timestamp::of(domain::time::now() + time::Duration::seconds(2));
    let (key, record) = domain::identity::auth::api_key::issue(
        &env.store,
        &owner,
        domain::identity::auth::api_key::NewKey {
            expires_at: Some(expires),
            ..domain::identity::auth::api_key::NewKey::named("short", env.state.clock.timestamp())
        },
        None,
    )
    .await
    .unwrap();
    let agent = env
        .req("POST", "/api/agents")
        .key(key.expose())
        .json(json!({"name": "brief"}))
        .send()
        .await;
    assert_eq!(agent.status, 201, "{}", agent.body);
    let id = agent.json()["id"].as_str().unwrap().to_owned();
    env.clock.advance(std::time::Duration::from_millis(2500));
    let got = env
        .req("GET", &format!("/api/agents/{id}"))
        .bearer(&session)
        .send()
        .await;
    assert_eq!(got.status, 200, "{}", got.body);
    let got = got.json();
    assert_eq!(
        (
            &got["status"],
            &got["deactivationReason"],
            &got["deactivatedAt"]
        ),
        (&json!("inactive"), &json!("key expired"), &json!(expires)),
        "{got}"
    );
    let listed = env
        .req("GET", "/api/agents")
        .bearer(&session)
        .send()
        .await
        .json();
    assert_eq!(listed["items"][0]["status"], "inactive", "{listed}");
    let keys = env
        .req("GET", "/api/keys")
        .bearer(&session)
        .send()
        .await
        .json();
    assert_eq!(keys["items"][0]["id"], record.id.as_str());
    assert_eq!(keys["items"][0]["status"], "expired");
}

#[tokio::test]
async fn cursors_carry_no_key_material_and_forged_ones_never_reach_the_store() {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let env = TestEnv::new().await;
    let signer = PrivateKeySigner::random();
    let owner = domain::address::Owner::of(signer.address());
    let session = env.sign_in(&signer).await;
    let mut hashes = Vec::new();
    for name in ["a", "b", "c"] {
        let (key, _) = domain::identity::auth::api_key::issue(
            &env.store,
            &owner,
            domain::identity::auth::api_key::NewKey::named(name, env.state.clock.timestamp()),
            None,
        )
        .await
        .unwrap();
        hashes.push(key.hash());
    }
    let first = env
        .req("GET", "/api/keys")
        .bearer(&session)
        .query("limit=1")
        .send()
        .await
        .json();
    let cursor = first["nextCursor"].as_str().unwrap().to_owned();
    let decoded = String::from_utf8(b64.decode(&cursor).unwrap()).unwrap();
    for hash in &hashes {
        assert!(!decoded.contains(hash.as_str()), "{decoded}");
    }
    let fields: serde_json::Value = serde_json::from_str(&decoded).unwrap();
    let mut names: Vec<&String> = fields.as_object().unwrap().keys().collect();
    names.sort();
    assert_eq!(names, ["after", "of"], "{decoded}");
    // The pages still walk every key once.
    let mut seen = vec![first["items"][0]["id"].clone()];
    let mut next = Some(cursor.clone());
    while let Some(c) = next {
        let page = env
            .req("GET", "/api/keys")
            .bearer(&session)
            .query(&format!("limit=1&cursor={c}"))
            .send()
            .await
            .json();
        seen.extend(
            page["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|k| k["id"].clone()),
        );
        next = page["nextCursor"].as_str().map(str::to_owned);
    }
    assert_eq!(seen.len(), 3, "{seen:?}");
    // Forged cursors: 400 naming it, and no query is sent.
    let of = serde_json::from_str::<serde_json::Value>(&decoded).unwrap()["of"].clone();
    let queries = env.faults.calls("Query");
    for forged in [
        json!({"after": "", "of": of}),
        json!({"after": format!("APIKEY#{}", "9".repeat(5000)), "of": of}),
        json!({"after": "APIKEY#", "of": of}),
        json!({"after": "SANDBOX#2026-01-01T00:00:00Z#x", "of": of}),
        json!({"after": "APIKEY#2026-01-01T00:00:00Z#x", "of": "0000000000000000"}),
        json!({"after": "APIKEY#2026", "of": of, "pk": "APIKEY#x"}),
    ] {
        let res = env
            .req("GET", "/api/keys")
            .bearer(&session)
            .query(&format!("cursor={}", b64.encode(forged.to_string())))
            .send()
            .await;
        res.invalid("cursor");
    }
    for garbage in ["%%%", "bm90IGpzb24", &"A".repeat(4000)] {
        let res = env
            .req("GET", "/api/keys")
            .bearer(&session)
            .query(&format!("cursor={garbage}"))
            .send()
            .await;
        res.invalid("cursor");
    }
    assert_eq!(env.faults.calls("Query"), queries);
}
