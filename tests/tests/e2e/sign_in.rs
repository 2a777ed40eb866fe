//! Sign-In with Ethereum and sessions (issue 3, point 1): real EIP-4361 messages signed with
//! throwaway keys; every failure is the right 4xx and leaves no session behind.

use alloy_signer_local::PrivateKeySigner;
use serde_json::{Value, json};
use time::Duration;

use crate::harness::{TestEnv, sign, siwe_message};

async fn nonce(env: &TestEnv) -> String {
    let res = env.req("GET", "/api/auth/nonce").send().await;
    assert_eq!(res.status, 200);
    let body = res.json();
    let nonce = body["nonce"].as_str().unwrap().to_owned();
    assert!(
        nonce.len() >= 32 && nonce.bytes().all(|b| b.is_ascii_alphanumeric()),
        "{nonce}"
    );
    let expires = domain::time::parse_rfc3339(body["expiresAt"].as_str().unwrap()).unwrap();
    let ttl = expires - domain::time::now();
    assert!(
        ttl > Duration::minutes(9) && ttl <= Duration::minutes(10),
        "{ttl}"
    );
    nonce
}

async fn verify(env: &TestEnv, message: &str, signature: &str) -> crate::harness::TestResponse {
    env.req("POST", "/api/auth/verify")
        .json(json!({"message": message, "signature": signature}))
        .send()
        .await
}

const DOMAIN: &str = "127.0.0.1:9000";
const URI: &str = "http://127.0.0.1:9000";

#[tokio::test]
async fn a_signed_message_opens_a_session() {
    let env = TestEnv::new().await;
    let signer = PrivateKeySigner::random();
    let nonce = nonce(&env).await;
    let message = siwe_message(
        &signer,
        DOMAIN,
        &format!("{URI}/app"),
        84532,
        &nonce,
        |_| {},
    );
    let res = verify(&env, &message, &sign(&signer, &message)).await;
    assert_eq!(res.status, 200, "{}", res.body);
    let body = res.json();
    // Answered as wallets show it (EIP-55).
    let address = signer.address().to_checksum(None);
    assert_eq!(body["address"], address);
    // A script (no Origin) gets the token, to send as a bearer token; no cookie.
    let token = body["token"].as_str().unwrap().to_owned();
    assert_eq!(token.len(), 64);
    assert!(res.header("set-cookie").is_none());
    let me = env.req("GET", "/api/auth/me").bearer(&token).send().await;
    assert_eq!(me.status, 200, "{}", me.body);
    assert_eq!(me.json()["address"], address);
    // A page (its request has an Origin) gets the HttpOnly cookie, and no token its script
    // could read.
    let nonce = self::nonce(&env).await;
    let message = siwe_message(&signer, DOMAIN, URI, 8453, &nonce, |_| {});
    let res = env
        .req("POST", "/api/auth/verify")
        .header("origin", crate::harness::WEB_ORIGIN)
        .json(json!({"message": message, "signature": sign(&signer, &message)}))
        .send()
        .await;
    assert_eq!(res.status, 200, "{}", res.body);
    assert!(res.json().get("token").is_none(), "{}", res.body);
    assert_eq!(res.json()["address"], address);
    let cookie = res.header("set-cookie").unwrap().to_owned();
    for part in ["HttpOnly", "Secure", "SameSite=Lax", "Path=/"] {
        assert!(cookie.contains(part), "{cookie}");
    }
    let session = cookie
        .strip_prefix("__Host-session=")
        .and_then(|c| c.split(';').next())
        .unwrap();
    assert_eq!(session.len(), 64);
    let me = env
        .req("GET", "/api/auth/me")
        .header("cookie", &format!("__Host-session={session}"))
        .send()
        .await;
    assert_eq!(me.json()["address"], address);
    // Only the hash is stored.
    assert_eq!(env.session_count().await, 2);
    let stored = env
        .store
        .session_by_hash(
            &domain::identity::auth::session::SessionToken::parse(&token)
                .unwrap()
                .hash(),
        )
        .await
        .unwrap()
        .unwrap();
    // Stored (and compared) lowercase.
    assert_eq!(stored.owner, address.to_lowercase().as_str());
    assert_ne!(stored.token_hash, token);
}

/// Each failing case: status, and no session left behind.
#[tokio::test]
async fn every_failing_check_is_refused_without_a_session() {
    let env = TestEnv::new().await;
    let signer = PrivateKeySigner::random();
    let other = PrivateKeySigner::random();
    let now = domain::time::now();
    type Edit = Box<dyn FnOnce(&mut siwe::Message)>;
    let cases: Vec<(&str, &str, &str, u64, Edit, bool)> = vec![
        (
            "wrong domain",
            "evil.example",
            URI,
            8453,
            Box::new(|_| {}),
            false,
        ),
        ("wrong chain id", DOMAIN, URI, 1, Box::new(|_| {}), false),
        (
            "wrong URI",
            DOMAIN,
            "https://evil.example",
            8453,
            Box::new(|_| {}),
            false,
        ),
        (
            "look-alike URI",
            DOMAIN,
            "http://127.0.0.1:90001/",
            8453,
            Box::new(|_| {}),
            false,
        ),
        (
            "expired",
            DOMAIN,
            URI,
            8453,
            Box::new(move |m| m.expiration_time = Some((now - Duration::seconds(1)).into())),
            false,
        ),
        (
            "not yet valid",
            DOMAIN,
            URI,
            8453,
            Box::new(move |m| m.not_before = Some((now + Duration::minutes(5)).into())),
            false,
        ),
        (
            "issued in the future",
            DOMAIN,
            URI,
            8453,
            Box::new(move |m| m.issued_at = (now + Duration::minutes(5)).into()),
            false,
        ),
        (
            "signed by another address",
            DOMAIN,
            URI,
            8453,
            Box::new(|_| {}),
            true,
        ),
    ];
    for (case, domain, uri, chain, edit, wrong_signer) in cases {
        let nonce = nonce(&env).await;
        let message = siwe_message(&signer, domain, uri, chain, &nonce, edit);
        let by = if wrong_signer { &other } else { &signer };
        let res = verify(&env, &message, &sign(by, &message)).await;
        let doc = res.problem(401);
        assert_eq!(doc["type"], "/problems/sign-in-failed", "{case}");
        assert!(res.header("set-cookie").is_none(), "{case}");
        assert!(!res.body.contains("token"), "{case}");
        // The nonce was consumed by the failed attempt: even a good message cannot use it now.
        let good = siwe_message(&signer, DOMAIN, URI, 8453, &nonce, |_| {});
        verify(&env, &good, &sign(&signer, &good))
            .await
            .problem(401);
    }
    assert_eq!(env.session_count().await, 0);
}

#[tokio::test]
async fn nonces_are_single_use_issued_here_and_short_lived() {
    let env = TestEnv::new().await;
    let signer = PrivateKeySigner::random();
    // Replayed after a success.
    let n = nonce(&env).await;
    let message = siwe_message(&signer, DOMAIN, URI, 8453, &n, |_| {});
    assert_eq!(
        verify(&env, &message, &sign(&signer, &message))
            .await
            .status,
        200
    );
    let doc = verify(&env, &message, &sign(&signer, &message))
        .await
        .problem(401);
    assert!(doc["detail"].as_str().unwrap().contains("nonce"));
    // Never issued.
    let message = siwe_message(
        &signer,
        DOMAIN,
        URI,
        8453,
        "abcdef0123456789abcdef0123456789",
        |_| {},
    );
    verify(&env, &message, &sign(&signer, &message))
        .await
        .problem(401);
    // Expired (issued eleven minutes ago).
    let past = domain::time::now() - Duration::minutes(11);
    env.store
        .put_nonce(&domain::store::sessions::NonceRecord {
            nonce: "00000000aaaaaaaa00000000aaaaaaaa".into(),
            created_at: domain::time::Timestamp::of(past),
            expires_epoch: (past + Duration::minutes(10)).unix_timestamp(),
        })
        .await
        .unwrap();
    let message = siwe_message(
        &signer,
        DOMAIN,
        URI,
        8453,
        "00000000aaaaaaaa00000000aaaaaaaa",
        |_| {},
    );
    let doc = verify(&env, &message, &sign(&signer, &message))
        .await
        .problem(401);
    assert!(doc["detail"].as_str().unwrap().contains("expired"));
    assert_eq!(env.session_count().await, 1);
}

#[tokio::test]
async fn malformed_input_is_400_and_still_consumes_the_nonce() {
    let env = TestEnv::new().await;
    let signer = PrivateKeySigner::random();
    let n = nonce(&env).await;
    let good = siwe_message(&signer, DOMAIN, URI, 8453, &n, |_| {});
    // A lowercase address is not EIP-55: the parser refuses the message.
    let broken = good.replace(
        &signer.address().to_checksum(None),
        &format!("{:#x}", signer.address()),
    );
    verify(&env, &broken, &sign(&signer, &broken))
        .await
        .invalid("message");
    verify(&env, &good, &sign(&signer, &good))
        .await
        .problem(401);
    // A bad signature encoding, after the nonce is consumed.
    let n = nonce(&env).await;
    let good = siwe_message(&signer, DOMAIN, URI, 8453, &n, |_| {});
    verify(&env, &good, "0x12zz").await.invalid("signature");
    verify(&env, &good, &sign(&signer, &good))
        .await
        .problem(401);
    // Missing fields, garbage, oversized.
    env.req("POST", "/api/auth/verify")
        .json(json!({"message": good}))
        .send()
        .await
        .invalid("signature");
    verify(&env, "hello", "0x00").await.invalid("message");
    let huge = Value::String("x".repeat(10_000));
    env.req("POST", "/api/auth/verify")
        .json(json!({"message": huge, "signature": "0x"}))
        .send()
        .await
        .problem(413);
    assert_eq!(env.session_count().await, 0);
}

#[tokio::test]
async fn logout_ends_the_session_and_clears_the_cookie() {
    let env = TestEnv::new().await;
    let signer = PrivateKeySigner::random();
    let token = env.sign_in(&signer).await;
    let res = env
        .req("POST", "/api/auth/logout")
        .bearer(&token)
        .send()
        .await;
    assert_eq!(res.status, 204, "{}", res.body);
    assert!(res.header("set-cookie").unwrap().contains("Max-Age=0"));
    env.req("GET", "/api/auth/me")
        .bearer(&token)
        .send()
        .await
        .problem(401);
    env.req("POST", "/api/auth/logout")
        .bearer(&token)
        .send()
        .await
        .problem(401);
    assert_eq!(env.session_count().await, 0);
}

/// Sign-in reads no credential (issue 63, point 9, the rows where one is obtained): an ended
/// session's cookie or token, which the rest of the API answers 401, never keeps its human
/// from asking a nonce and signing in again.
#[tokio::test]
async fn a_stale_session_never_keeps_its_human_from_signing_in_again() {
    let env = TestEnv::new().await;
    let signer = PrivateKeySigner::random();
    let token = env.sign_in(&signer).await;
    let res = env
        .req("POST", "/api/auth/logout")
        .bearer(&token)
        .send()
        .await;
    assert_eq!(res.status, 204, "{}", res.body);
    let cookie = format!("__Host-session={token}");
    env.req("GET", "/api/cloud/plans")
        .header("cookie", &cookie)
        .send()
        .await
        .problem(401);
    let res = env
        .req("GET", "/api/auth/nonce")
        .header("cookie", &cookie)
        .bearer(&token)
        .send()
        .await;
    assert_eq!(res.status, 200, "{}", res.body);
    let nonce = res.json()["nonce"].as_str().unwrap().to_owned();
    let message = siwe_message(&signer, DOMAIN, URI, 8453, &nonce, |_| {});
    let res = env
        .req("POST", "/api/auth/verify")
        .header("cookie", &cookie)
        .bearer(&token)
        .json(json!({"message": message, "signature": sign(&signer, &message)}))
        .send()
        .await;
    assert_eq!(res.status, 200, "{}", res.body);
    let fresh = res.json()["token"].as_str().unwrap().to_owned();
    let me = env.req("GET", "/api/auth/me").bearer(&fresh).send().await;
    assert_eq!(me.status, 200, "{}", me.body);
}

#[tokio::test]
async fn sessions_expire_absolutely_and_when_idle() {
    let env = TestEnv::new().await;
    let signer = PrivateKeySigner::random();
    for (name, shift) in [("absolute", 0), ("idle", 1)] {
        let token = env.sign_in(&signer).await;
        let hash = domain::identity::auth::session::SessionToken::parse(&token)
            .unwrap()
            .hash();
        let mut record = env.store.session_by_hash(&hash).await.unwrap().unwrap();
        env.store.delete_session(&hash).await.unwrap();
        if shift == 0 {
            record.expires_epoch = domain::time::now().unix_timestamp() - 1;
        } else {
            record.last_seen_at =
                domain::time::Timestamp::of(domain::time::now() - Duration::days(2));
        }
        env.store.put_session(&record).await.unwrap();
        // Refused, and left as it was: a refused use does not revive it, however often tried.
        for _ in 0..2 {
            env.req("GET", "/api/auth/me")
                .bearer(&token)
                .send()
                .await
                .problem(401);
        }
        let after = env.store.session_by_hash(&hash).await.unwrap();
        assert_eq!(after.as_ref(), Some(&record), "{name}");
    }
    // A message that expires in an hour bounds the session.
    let n = nonce(&env).await;
    let limit = domain::time::now() + Duration::hours(1);
    let message = siwe_message(&signer, DOMAIN, URI, 8453, &n, |m| {
        m.expiration_time = Some(limit.into())
    });
    let body = verify(&env, &message, &sign(&signer, &message))
        .await
        .json();
    let expires = domain::time::parse_rfc3339(body["expiresAt"].as_str().unwrap()).unwrap();
    assert!(expires <= limit);
}

#[tokio::test]
async fn api_keys_cannot_use_session_routes() {
    let env = TestEnv::new().await;
    let key = env.key(crate::harness::ALICE).await;
    env.req("GET", "/api/auth/me")
        .key(&key)
        .send()
        .await
        .problem(403);
    env.req("POST", "/api/auth/logout")
        .key(&key)
        .send()
        .await
        .problem(403);
    env.req("GET", "/api/auth/me").send().await.problem(401);
}

/// A key's signature costs no call to the chain; a signature no key recovers to the message's
/// address — a smart wallet's, ERC-1271 or ERC-6492 — is asked of the payment network's chain
/// (one `eth_call` of EIP-6492's universal validator), only for a message on that chain; a
/// chain that does not answer is a 503, never a session.
#[tokio::test]
async fn a_smart_wallets_signature_is_asked_of_the_chain_and_a_keys_is_not() {
    let env = TestEnv::new().await;
    let signer = PrivateKeySigner::random();
    let message = siwe_message(&signer, DOMAIN, URI, 84532, &nonce(&env).await, |_| {});
    let res = verify(&env, &message, &sign(&signer, &message)).await;
    assert_eq!(res.status, 200, "{}", res.body);
    let round_trips = || env.facilitator.chain().round_trips();
    assert_eq!(round_trips(), 0, "a key's signature is checked offline");
    // Another key's 65 bytes, and a longer signature: the chain says neither is the address's.
    let other = PrivateKeySigner::random();
    let message = siwe_message(&signer, DOMAIN, URI, 84532, &nonce(&env).await, |_| {});
    let res = verify(&env, &message, &sign(&other, &message)).await;
    assert_eq!(res.status, 401, "{}", res.body);
    assert_eq!(round_trips(), 1);
    let message = siwe_message(&signer, DOMAIN, URI, 84532, &nonce(&env).await, |_| {});
    let smart = format!("0x{}", "ab".repeat(200));
    let res = verify(&env, &message, &smart).await;
    assert_eq!(res.status, 401, "{}", res.body);
    assert_eq!(round_trips(), 2);
    // On another chain than the payment network's, a smart wallet cannot be checked here.
    let message = siwe_message(&signer, DOMAIN, URI, 8453, &nonce(&env).await, |_| {});
    let res = verify(&env, &message, &smart).await;
    assert_eq!(res.status, 401, "{}", res.body);
    assert!(res.body.contains("chain 84532 only"), "{}", res.body);
    assert_eq!(round_trips(), 2);
    // Empty or not hex: the field is named.
    for bad in ["0x", "0xzz"] {
        let message = siwe_message(&signer, DOMAIN, URI, 84532, &nonce(&env).await, |_| {});
        let res = verify(&env, &message, bad).await;
        res.invalid("signature");
    }
    assert_eq!(env.session_count().await, 1);
}

/// `inner` wrapped as ERC-6492 does for an account not deployed yet: `(factory, calldata,
/// inner)` ABI-encoded, then the magic suffix. The factory here is any address, its calldata
/// anything (what a stranger would choose).
fn wrap_6492(inner: &[u8]) -> String {
    use alloy_sol_types::SolValue;
    let factory = PrivateKeySigner::random().address();
    let calldata = alloy_primitives::Bytes::from(vec![0xc0; 68]);
    let body = (
        factory,
        calldata,
        alloy_primitives::Bytes::copy_from_slice(inner),
    );
    let suffix = domain::x402::chain::ERC6492_SUFFIX;
    format!(
        "0x{}{}",
        hex::encode(body.abi_encode_params()),
        hex::encode(suffix)
    )
}

/// A smart wallet's signature is asked of its account, and no stranger's code runs on a
/// deployed one: deployed, the account's own `isValidSignature` decides, of the inner signature
/// of an ERC-6492 wrapper too — the wrapper's factory is never called for it, not even to
/// "prepare" and ask again when the account refuses; not deployed, the wrapper's factory deploys
/// it (in the call's simulation) and then it decides; with no code and no wrapper, the signature
/// is nobody's.
#[tokio::test]
async fn a_deployed_accounts_signature_never_runs_a_factory() {
    let env = TestEnv::new().await;
    let chain = env.facilitator.chain();
    let wallet = PrivateKeySigner::random();
    let address = format!("{:#x}", wallet.address());
    let message = siwe_message(&wallet, DOMAIN, URI, 84532, &nonce(&env).await, |_| {});
    let hash = alloy_primitives::eip191_hash_message(message.as_bytes());
    let inner = [0x42u8; 120];
    chain.deploy_account(&address, hash, &hex::encode(inner));
    let res = verify(&env, &message, &wrap_6492(&inner)).await;
    assert_eq!(res.status, 200, "{}", res.body);
    assert_eq!((chain.round_trips(), chain.validator_runs()), (1, 0));
    // The account refuses this inner signature: refused, without a factory call.
    let message = siwe_message(&wallet, DOMAIN, URI, 84532, &nonce(&env).await, |_| {});
    let res = verify(&env, &message, &wrap_6492(&inner)).await;
    assert_eq!(res.status, 401, "{}", res.body);
    assert_eq!((chain.round_trips(), chain.validator_runs()), (2, 0));
    // A counterfactual account: the validator deploys it, once.
    let future = PrivateKeySigner::random();
    let message = siwe_message(&future, DOMAIN, URI, 84532, &nonce(&env).await, |_| {});
    let hash = alloy_primitives::eip191_hash_message(message.as_bytes());
    let address = format!("{:#x}", future.address());
    chain.counterfactual_account(&address, hash, &hex::encode(inner));
    let res = verify(&env, &message, &wrap_6492(&inner)).await;
    assert_eq!(res.status, 200, "{}", res.body);
    assert_eq!((chain.round_trips(), chain.validator_runs()), (4, 1));
    // No code and no wrapper: nobody's, and no factory to call.
    let message = siwe_message(&future, DOMAIN, URI, 84532, &nonce(&env).await, |_| {});
    let res = verify(&env, &message, &format!("0x{}", hex::encode(inner))).await;
    assert_eq!(res.status, 401, "{}", res.body);
    assert_eq!((chain.round_trips(), chain.validator_runs()), (5, 1));
}

/// A chain that does not answer: a smart wallet's sign-in is a 503 (retry), a key's still
/// works.
#[tokio::test]
async fn a_chain_that_does_not_answer_refuses_only_smart_wallets_for_now() {
    let env = TestEnv::with(crate::harness::Options {
        vars: vec![("RPC_URL", "http://127.0.0.1:9/".into())],
        ..Default::default()
    })
    .await;
    let signer = PrivateKeySigner::random();
    let message = siwe_message(&signer, DOMAIN, URI, 84532, &nonce(&env).await, |_| {});
    let res = verify(&env, &message, &format!("0x{}", "ab".repeat(200))).await;
    assert_eq!(res.status, 503, "{}", res.body);
    let message = siwe_message(&signer, DOMAIN, URI, 84532, &nonce(&env).await, |_| {});
    let res = verify(&env, &message, &sign(&signer, &message)).await;
    assert_eq!(res.status, 200, "{}", res.body);
}

/// Sign-ins waiting on the chain are bounded per source address and for everyone: with a
/// chain that takes its time, a second smart wallet's sign-in from the same address while one
/// is being checked is answered 429 `sign-in`; another address's is checked, until the pool is
/// full (429 `sign-in-pool`); a key's signature never waits on the chain and is never refused
/// for it.
#[tokio::test]
async fn sign_ins_checked_on_chain_are_bounded_per_address() {
    // A node that accepts and never answers (the RPC timeout is 1 s here).
    let node = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let rpc = format!("http://{}/", node.local_addr().unwrap());
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = node.accept().await {
            held.push(socket);
        }
    });
    let env = TestEnv::with(crate::harness::Options {
        vars: vec![
            ("RPC_URL", rpc),
            ("MAX_SIGN_INS_IN_FLIGHT_PER_ADDRESS", "1".into()),
            ("MAX_SIGN_INS_IN_FLIGHT", "3".into()),
        ],
        ..Default::default()
    })
    .await;
    let signer = PrivateKeySigner::random();
    let smart = format!("0x{}", "ab".repeat(200));
    let from = |ip: &'static str, message: String, signature: String| {
        let env = &env;
        async move {
            env.req("POST", "/api/auth/verify")
                .source_ip(ip)
                .json(json!({"message": message, "signature": signature}))
                .send()
                .await
        }
    };
    let messages: Vec<String> = {
        let mut out = Vec::new();
        for _ in 0..6 {
            out.push(siwe_message(
                &signer,
                DOMAIN,
                URI,
                84532,
                &nonce(&env).await,
                |_| {},
            ));
        }
        out
    };
    let later = |ip, message, signature| async move {
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        from(ip, message, signature).await
    };
    let much_later = |ip, message, signature| async move {
        tokio::time::sleep(std::time::Duration::from_millis(600)).await;
        from(ip, message, signature).await
    };
    let (first, second, elsewhere, third, over, key) = tokio::join!(
        from("198.51.100.40", messages[0].clone(), smart.clone()),
        later("198.51.100.40", messages[1].clone(), smart.clone()),
        later("203.0.113.40", messages[2].clone(), smart.clone()),
        later("192.0.2.40", messages[4].clone(), smart.clone()),
        much_later("192.0.2.41", messages[5].clone(), smart.clone()),
        later(
            "198.51.100.40",
            messages[3].clone(),
            sign(&signer, &messages[3])
        ),
    );
    assert_eq!(first.status, 503, "{}", first.body);
    assert_eq!(second.status, 429, "{}", second.body);
    let policy = second.header("ratelimit-policy").unwrap();
    assert!(policy.starts_with("\"sign-in\""), "{policy}");
    assert_eq!(elsewhere.status, 503, "{}", elsewhere.body);
    assert_eq!(third.status, 503, "{}", third.body);
    // Three addresses hold the whole pool: a fourth is refused for the pool, not for itself.
    assert_eq!(over.status, 429, "{}", over.body);
    let policy = over.header("ratelimit-policy").unwrap();
    assert!(policy.starts_with("\"sign-in-pool\""), "{policy}");
    assert_eq!(key.status, 200, "{}", key.body);
}

/// On the real rails (anvil, EIP-6492's validator run for real): a long signature for an
/// address with no code is nobody's.
#[tokio::test]
async fn the_real_chain_refuses_a_signature_no_account_made() {
    let env = TestEnv::with(crate::harness::Options {
        real_rails: true,
        ..Default::default()
    })
    .await;
    let signer = PrivateKeySigner::random();
    let message = siwe_message(&signer, DOMAIN, URI, 84532, &nonce(&env).await, |_| {});
    let res = verify(&env, &message, &format!("0x{}", "ab".repeat(200))).await;
    assert_eq!(res.status, 401, "{}", res.body);
    let other = PrivateKeySigner::random();
    let message = siwe_message(&signer, DOMAIN, URI, 84532, &nonce(&env).await, |_| {});
    let res = verify(&env, &message, &sign(&other, &message)).await;
    assert_eq!(res.status, 401, "{}", res.body);
}
