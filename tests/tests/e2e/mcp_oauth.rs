//! MCP over OAuth 2.1 (issue 47, point 2): a client that knows only the base URL is sent from
//! `/mcp`'s 401 to the protected-resource metadata, the authorization server's metadata,
//! registration, the console's consent (a wallet's session, a policy) and the token; its access
//! token is the new API key's, so a paid `provision_server` is the key's. Forged, reused and
//! mismatched codes, wrong verifiers, unregistered redirect URIs, stolen refresh tokens and
//! revoked keys are refused with OAuth's own errors.

use alloy_signer_local::PrivateKeySigner;
use base64::Engine;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::harness::{PROJECT, TestEnv, TestResponse};
use crate::mcp::{PLAN, call, ok, payment_payload, post, rpc};

const REDIRECT: &str = "http://127.0.0.1:33418/callback";

/// The public base the harness's requests are answered on.
async fn base(env: &TestEnv) -> String {
    let document = env.req("GET", "/openapi.json").send().await.json();
    document["servers"][0]["url"].as_str().unwrap().to_owned()
}

/// A PKCE verifier and its S256 challenge (RFC 7636 §4.1, §4.2).
fn pkce() -> (String, String) {
    let verifier = format!("v-{}", domain::ids::random_hex(32));
    let challenge = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(Sha256::digest(verifier.as_bytes()));
    (verifier, challenge)
}

/// Posts `form` (`application/x-www-form-urlencoded`) to `path`.
pub(crate) async fn form(env: &TestEnv, path: &str, form: &[(&str, &str)]) -> TestResponse {
    let body = url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(form)
        .finish();
    env.req("POST", path)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(&body)
        .send()
        .await
}

/// An OAuth error answer: `status`, `error`, a description, never cached.
#[track_caller]
fn oauth_error(res: &TestResponse, error: &str) {
    assert_eq!(res.status, 400, "{}", res.body);
    assert_eq!(res.header("content-type"), Some("application/json"));
    assert_eq!(res.header("cache-control"), Some("no-store"));
    let body = res.json();
    assert_eq!(body["error"], error, "{body}");
    assert!(body["error_description"].is_string(), "{body}");
}

/// Registers a client sending humans back to `redirect_uris`: its id.
async fn register(env: &TestEnv, redirect_uris: &[&str]) -> String {
    let res = env
        .req("POST", "/oauth/register")
        .json(
            json!({"redirect_uris": redirect_uris, "client_name": "Test Assistant",
                     "token_endpoint_auth_method": "none", "unknown_metadata": 1}),
        )
        .send()
        .await;
    assert_eq!(res.status, 201, "{}", res.body);
    let client = res.json();
    assert_eq!(client["token_endpoint_auth_method"], "none");
    assert_eq!(client["redirect_uris"], json!(redirect_uris));
    client["client_id"].as_str().unwrap().to_owned()
}

/// An authorization request's query.
fn request(client_id: &str, challenge: &str, extra: &[(&str, &str)]) -> String {
    let mut query = url::form_urlencoded::Serializer::new(String::new());
    query.extend_pairs([
        ("response_type", "code"),
        ("client_id", client_id),
        ("redirect_uri", REDIRECT),
        ("code_challenge", challenge),
        ("code_challenge_method", "S256"),
        ("state", "st-1"),
        ("scope", "read provision pay"),
    ]);
    for (name, value) in extra {
        query.append_pair(name, value);
    }
    query.finish()
}

/// The query parameters of a URL.
fn params(location: &str) -> std::collections::HashMap<String, String> {
    url::Url::parse(location)
        .unwrap()
        .query_pairs()
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

/// The signed-in human's consent to `query`: the redirect the console follows.
async fn consent(env: &TestEnv, session: &str, query: &str, decision: Value) -> String {
    let mut body = json!({"request": query, "approve": true});
    body.as_object_mut()
        .unwrap()
        .extend(decision.as_object().unwrap().clone());
    let res = env
        .req("POST", "/api/oauth/consent")
        .bearer(session)
        .json(body)
        .send()
        .await;
    assert_eq!(res.status, 200, "{}", res.body);
    res.json()["redirectTo"].as_str().unwrap().to_owned()
}

/// A code for a grant of `session`'s owner to a new client, and its client id and verifier.
async fn code(env: &TestEnv, session: &str) -> (String, String, String) {
    let client_id = register(env, &[REDIRECT]).await;
    let (verifier, challenge) = pkce();
    let to = consent(
        env,
        session,
        &request(&client_id, &challenge, &[]),
        json!({}),
    )
    .await;
    (params(&to)["code"].clone(), client_id, verifier)
}

/// Exchanges `code`: the answer.
async fn exchange(env: &TestEnv, code: &str, client_id: &str, verifier: &str) -> TestResponse {
    form(
        env,
        "/oauth/token",
        &[
            ("grant_type", "authorization_code"),
            ("code", code),
            ("client_id", client_id),
            ("redirect_uri", REDIRECT),
            ("code_verifier", verifier),
        ],
    )
    .await
}

/// A new grant's tokens (`access_token`, `refresh_token`) and its client id.
pub(crate) async fn tokens(env: &TestEnv, session: &str) -> (Value, String) {
    let (code, client_id, verifier) = code(env, session).await;
    let res = exchange(env, &code, &client_id, &verifier).await;
    assert_eq!(res.status, 200, "{}", res.body);
    (res.json(), client_id)
}

/// `tools/list` with `token`: its status.
async fn list_tools(env: &TestEnv, token: &str) -> TestResponse {
    post(
        env,
        Some(token),
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}),
    )
    .await
}

fn text(value: &Value) -> &str {
    value.as_str().unwrap()
}

#[tokio::test]
async fn a_client_that_knows_only_the_base_url_connects_and_provisions_a_paid_server() {
    let env = TestEnv::new().await;
    let base = base(&env).await;
    // /mcp without credentials: 401, naming where an OAuth client starts.
    let message = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}});
    let res = post(&env, None, message).await;
    assert_eq!(res.status, 401, "{}", res.body);
    let metadata_url = format!("{base}/.well-known/oauth-protected-resource/mcp");
    assert_eq!(
        res.header("www-authenticate"),
        Some(format!("Bearer resource_metadata=\"{metadata_url}\"").as_str())
    );
    let resource = env
        .req("GET", "/.well-known/oauth-protected-resource/mcp")
        .header("origin", "https://inspector.example")
        .send()
        .await;
    assert_eq!(resource.status, 200, "{}", resource.body);
    assert_eq!(resource.header("access-control-allow-origin"), Some("*"));
    let resource = resource.json();
    assert_eq!(resource["resource"], format!("{base}/mcp"));
    assert_eq!(resource["authorization_servers"], json!([base]));
    let root = env
        .req("GET", "/.well-known/oauth-protected-resource")
        .send()
        .await;
    assert_eq!(root.json(), resource);
    let server = env
        .req("GET", "/.well-known/oauth-authorization-server")
        .send()
        .await
        .json();
    assert_eq!(server["issuer"], base);
    assert_eq!(server["code_challenge_methods_supported"], json!(["S256"]));
    assert_eq!(
        server["grant_types_supported"],
        json!(["authorization_code", "refresh_token"])
    );
    let preflight = env
        .req("OPTIONS", "/oauth/token")
        .header("origin", "https://inspector.example")
        .header("access-control-request-method", "POST")
        .send()
        .await;
    assert_eq!(preflight.status, 204, "{}", preflight.body);
    assert_eq!(preflight.header("access-control-allow-origin"), Some("*"));

    // Registration, then the authorization request: to the console's consent page.
    let client_id = register(&env, &[REDIRECT]).await;
    assert!(text(&server["registration_endpoint"]).ends_with("/oauth/register"));
    let (verifier, challenge) = pkce();
    let resource_url = format!("{base}/mcp");
    let query = request(&client_id, &challenge, &[("resource", &resource_url)]);
    let res = env
        .req("GET", "/oauth/authorize")
        .query(&query)
        .send()
        .await;
    assert_eq!(res.status, 302, "{}", res.body);
    assert_eq!(
        res.header("location"),
        Some(format!("{base}/#connect?{query}").as_str())
    );

    // The human signs in with their wallet, sees the client, chooses scopes and a policy.
    let session = env.sign_in(&PrivateKeySigner::random()).await;
    let client = env
        .req("GET", &format!("/api/oauth/clients/{client_id}"))
        .bearer(&session)
        .send()
        .await;
    assert_eq!(client.status, 200, "{}", client.body);
    assert_eq!(client.json()["name"], "Test Assistant");
    assert_eq!(client.json()["redirectUris"], json!([REDIRECT]));
    let decision = json!({"scopes": ["read", "provision", "pay"],
                          "policy": {"maxActiveServers": 1}});
    let to = consent(&env, &session, &query, decision).await;
    let answer = params(&to);
    assert!(to.starts_with(REDIRECT), "{to}");
    assert_eq!(
        (&answer["state"], &answer["iss"]),
        (&"st-1".to_owned(), &base)
    );

    // The token, then MCP with it: the grant is a new key with that policy.
    let res = exchange(&env, &answer["code"], &client_id, &verifier).await;
    assert_eq!(res.status, 200, "{}", res.body);
    assert_eq!(res.header("cache-control"), Some("no-store"));
    let tokens = res.json();
    assert_eq!(tokens["token_type"], "Bearer");
    assert_eq!(tokens["expires_in"], 3600);
    assert_eq!(tokens["scope"], "read provision pay");
    let access = text(&tokens["access_token"]).to_owned();
    assert!(access.starts_with("mcp_at_"));
    let keys = env
        .req("GET", "/api/keys")
        .bearer(&session)
        .send()
        .await
        .json();
    let key = &keys["items"][0];
    assert_eq!(key["name"], "MCP: Test Assistant");
    assert_eq!(key["policy"], json!({"maxActiveServers": 1}));

    // A paid provision_server, paid the x402 MCP way, with the access token.
    let args = json!({"projectId": PROJECT, "plan": PLAN, "region": "LT-Siauliai",
                      "hostname": "oauth-paid"});
    let unpaid = call(&env, &access, "provision_server", args.clone(), None).await;
    assert_eq!(unpaid["isError"], true, "{unpaid}");
    let payment = payment_payload(&PrivateKeySigner::random(), &unpaid["structuredContent"]);
    let meta = json!({"x402/payment": payment});
    let paid = call(&env, &access, "provision_server", args, Some(meta)).await;
    let created = ok(&paid);
    assert_eq!(created["server"]["hostname"], "oauth-paid");
    assert_eq!(paid["_meta"]["x402/payment-response"]["success"], true);
    // The key's policy holds: a second server is over its one.
    let again = json!({"projectId": PROJECT, "plan": PLAN, "region": "LT-Siauliai",
                       "hostname": "oauth-second"});
    let refused = call(&env, &access, "provision_server", again, None).await;
    assert_eq!(refused["structuredContent"]["status"], 403, "{refused}");
    // The token is refused where it is not the audience: the REST API.
    let rest = env.req("GET", "/api/payments").bearer(&access).send().await;
    assert_eq!(rest.status, 401, "{}", rest.body);
    // A key without the `delete` scope: the tool says so.
    let server = created["server"]["id"].clone();
    let delete = call(
        &env,
        &access,
        "delete_server",
        json!({"serverId": server}),
        None,
    )
    .await;
    assert_eq!(delete["structuredContent"]["status"], 403, "{delete}");
}

#[tokio::test]
async fn forged_reused_and_mismatched_codes_are_refused_with_oauths_errors() {
    let env = TestEnv::new().await;
    let session = env.sign_in(&PrivateKeySigner::random()).await;

    // A forged code of the right shape, and one of another shape.
    let (_, client_id, verifier) = code(&env, &session).await;
    let forged = format!("mcp_ac_{}", domain::ids::random_hex(32));
    oauth_error(
        &exchange(&env, &forged, &client_id, &verifier).await,
        "invalid_grant",
    );
    oauth_error(
        &exchange(&env, "abc", &client_id, &verifier).await,
        "invalid_grant",
    );

    // A wrong verifier, another redirect URI, another client: each refused, and none spends
    // the code (a leaked one is not burnt by whoever holds it): its client exchanges it after.
    let (code1, client1, verifier1) = code(&env, &session).await;
    let (_, wrong) = pkce();
    oauth_error(
        &exchange(&env, &code1, &client1, &wrong).await,
        "invalid_grant",
    );
    let res = exchange(&env, &code1, &client1, &verifier1).await;
    assert_eq!(res.status, 200, "{}", res.body);
    let (code2, client2, verifier2) = code(&env, &session).await;
    let res = form(
        &env,
        "/oauth/token",
        &[
            ("grant_type", "authorization_code"),
            ("code", &code2),
            ("client_id", &client2),
            ("redirect_uri", "http://127.0.0.1:33418/other"),
            ("code_verifier", &verifier2),
        ],
    )
    .await;
    oauth_error(&res, "invalid_grant");
    let (code3, client3, verifier3) = code(&env, &session).await;
    oauth_error(
        &exchange(&env, &code3, &client1, &verifier3).await,
        "invalid_grant",
    );
    for (code, client, verifier) in [
        (&code2, &client2, &verifier2),
        (&code3, &client3, &verifier3),
    ] {
        let res = exchange(&env, code, client, verifier).await;
        assert_eq!(res.status, 200, "{}", res.body);
    }

    // A code used twice: the second is refused and ends the first's tokens.
    let (code4, client4, verifier4) = code(&env, &session).await;
    let first = exchange(&env, &code4, &client4, &verifier4).await;
    assert_eq!(first.status, 200, "{}", first.body);
    let access = text(&first.json()["access_token"]).to_owned();
    assert_eq!(list_tools(&env, &access).await.status, 200);
    oauth_error(
        &exchange(&env, &code4, &client4, &verifier4).await,
        "invalid_grant",
    );
    let ended = list_tools(&env, &access).await;
    assert_eq!(ended.status, 401, "{}", ended.body);
    assert!(
        ended
            .header("www-authenticate")
            .unwrap()
            .contains("error=\"invalid_token\"")
    );

    // Missing parameters and grant types this server does not take.
    let (code5, client5, _) = code(&env, &session).await;
    let res = form(
        &env,
        "/oauth/token",
        &[
            ("grant_type", "authorization_code"),
            ("code", &code5),
            ("client_id", &client5),
            ("redirect_uri", REDIRECT),
        ],
    )
    .await;
    oauth_error(&res, "invalid_request");
    let res = form(&env, "/oauth/token", &[("grant_type", "password")]).await;
    oauth_error(&res, "unsupported_grant_type");
    let res = form(
        &env,
        "/oauth/token",
        &[("grant_type", "a"), ("grant_type", "b")],
    )
    .await;
    oauth_error(&res, "invalid_request");
}

#[tokio::test]
async fn authorization_requests_and_registrations_are_refused_where_they_should_be() {
    let env = TestEnv::new().await;
    let client_id = register(&env, &[REDIRECT]).await;
    let (_, challenge) = pkce();
    let authorize = |query: String| {
        let env = &env;
        async move {
            env.req("GET", "/oauth/authorize")
                .query(&query)
                .send()
                .await
        }
    };
    // An unknown client or an unregistered redirect URI: shown, never redirected.
    let unknown = request(&format!("cli_{}", "0".repeat(32)), &challenge, &[]);
    let res = authorize(unknown).await;
    oauth_error(&res, "invalid_request");
    assert!(res.header("location").is_none());
    let elsewhere = request(&client_id, &challenge, &[]).replace(
        &url::form_urlencoded::byte_serialize(REDIRECT.as_bytes()).collect::<String>(),
        "https%3A%2F%2Fevil.example%2Fcb",
    );
    let res = authorize(elsewhere).await;
    oauth_error(&res, "invalid_request");
    assert!(res.header("location").is_none());
    // A client no human has connected is a stranger's (anyone registers any https redirect):
    // its refusals are shown here too, never sent to its redirect URI (RFC 9700 §4.11.2), so
    // no link on this domain sends a browser elsewhere.
    let shown = |res: TestResponse, error: &str| {
        oauth_error(&res, error);
        assert!(res.header("location").is_none(), "{res:?}");
    };
    let no_pkce =
        request(&client_id, &challenge, &[]).replace(&format!("code_challenge={challenge}&"), "");
    shown(authorize(no_pkce.clone()).await, "invalid_request");
    let scope = request(&client_id, &challenge, &[]).replace("scope=read", "scope=admin");
    shown(authorize(scope.clone()).await, "invalid_scope");
    // Its well-formed request still goes to the consent page, which is ours.
    let base = base(&env).await;
    let res = authorize(request(&client_id, &challenge, &[])).await;
    assert_eq!(res.status, 302, "{}", res.body);
    assert!(
        res.header("location")
            .unwrap()
            .starts_with(&format!("{base}/#connect?")),
        "{res:?}"
    );
    // The console's consent checks it again the same way: shown on the console's page.
    let session = env.sign_in(&PrivateKeySigner::random()).await;
    let res = env
        .req("POST", "/api/oauth/consent")
        .bearer(&session)
        .json(json!({"request": scope, "approve": true}))
        .send()
        .await;
    shown(res, "invalid_scope");
    // Once a human has connected it, the rest goes back to the client, with its state.
    let query = request(&client_id, &challenge, &[]);
    consent(&env, &session, &query, json!({})).await;
    let back = |res: TestResponse, error: &str| {
        assert_eq!(res.status, 302, "{}", res.body);
        let location = res.header("location").unwrap();
        assert!(location.starts_with(REDIRECT), "{location}");
        let answer = params(location);
        assert_eq!(
            (answer["error"].as_str(), answer["state"].as_str()),
            (error, "st-1")
        );
    };
    let plain = request(&client_id, &challenge, &[]).replace("S256", "plain");
    back(authorize(plain).await, "invalid_request");
    back(authorize(no_pkce).await, "invalid_request");
    let implicit =
        request(&client_id, &challenge, &[]).replace("response_type=code", "response_type=token");
    back(authorize(implicit).await, "unsupported_response_type");
    let other = request(
        &client_id,
        &challenge,
        &[("resource", "https://other.example/mcp")],
    );
    back(authorize(other).await, "invalid_target");
    back(authorize(scope).await, "invalid_scope");
    // Loopback redirects match on any port (RFC 8252 §7.3).
    let port = request(&client_id, &challenge, &[]).replace("33418", "50123");
    assert_eq!(authorize(port).await.status, 302);

    // A human who denies sends the client `access_denied`; a key cannot consent.
    let res = env
        .req("POST", "/api/oauth/consent")
        .bearer(&session)
        .json(json!({"request": query, "approve": false}))
        .send()
        .await;
    assert_eq!(res.status, 200, "{}", res.body);
    assert_eq!(
        params(text(&res.json()["redirectTo"]))["error"],
        "access_denied"
    );
    let key = env.key(crate::harness::ALICE).await;
    let res = env
        .req("POST", "/api/oauth/consent")
        .key(&key)
        .json(json!({"request": query, "approve": true}))
        .send()
        .await;
    res.problem(403);

    // Redirect URIs a human cannot read are refused at registration, and so are private-use
    // schemes the operator does not allow (`OAUTH_REDIRECT_SCHEMES`: Cursor's by default), too
    // many URIs and too long ones: a stranger's registration stays a few hundred bytes.
    let long = format!("https://app.example/{}", "x".repeat(500));
    for bad in [
        json!(["javascript:alert(1)"]),
        json!(["http://app.example/cb"]),
        json!(["https://app.example/cb#x"]),
        json!(["https://good.example@evil.example/cb"]),
        json!(["myapp:/cb"]),
        json!(["com.example.app:/oauth2redirect"]),
        json!(["cursor://evil.example/oauth/callback"]),
        json!([REDIRECT, long]),
        json!([
            "https://a.example/1",
            "https://a.example/2",
            "https://a.example/3",
            "https://a.example/4",
            "https://a.example/5"
        ]),
    ] {
        let res = env
            .req("POST", "/oauth/register")
            .json(json!({"redirect_uris": bad}))
            .send()
            .await;
        oauth_error(&res, "invalid_redirect_uri");
    }
    register(&env, &["cursor://anysphere.cursor-mcp/oauth/callback"]).await;
    let four = [
        "https://a.example/1",
        "https://a.example/2",
        "https://a.example/3",
        REDIRECT,
    ];
    register(&env, &four).await;
    let res = env
        .req("POST", "/oauth/register")
        .json(json!({"redirect_uris": [REDIRECT],
                     "token_endpoint_auth_method": "client_secret_basic"}))
        .send()
        .await;
    oauth_error(&res, "invalid_client_metadata");
    let res = env
        .req("POST", "/oauth/register")
        .json(json!({"client_name": "x"}))
        .send()
        .await;
    oauth_error(&res, "invalid_client_metadata");
}

#[tokio::test]
async fn refresh_tokens_rotate_and_a_stolen_one_ends_the_grant() {
    let env = TestEnv::new().await;
    let session = env.sign_in(&PrivateKeySigner::random()).await;
    let (first, client_id) = tokens(&env, &session).await;
    let refresh = |token: String, client: String| {
        let env = &env;
        async move {
            form(
                env,
                "/oauth/token",
                &[
                    ("grant_type", "refresh_token"),
                    ("refresh_token", &token),
                    ("client_id", &client),
                ],
            )
            .await
        }
    };
    let old_refresh = text(&first["refresh_token"]).to_owned();
    // Another client cannot use it (and it is not spent by trying).
    let stranger = register(&env, &[REDIRECT]).await;
    oauth_error(
        &refresh(old_refresh.clone(), stranger).await,
        "invalid_grant",
    );
    let res = refresh(old_refresh.clone(), client_id.clone()).await;
    assert_eq!(res.status, 200, "{}", res.body);
    let second = res.json();
    assert_ne!(second["refresh_token"], first["refresh_token"]);
    let access = text(&second["access_token"]).to_owned();
    let answer = rpc(&env, &access, "tools/list", json!({})).await;
    assert!(answer["result"]["tools"].is_array(), "{answer}");

    // Its client's retry within the grace (the answer lost on the way): a new pair, and the
    // grant stands.
    use domain::identity::oauth::REFRESH_GRACE_SECONDS;
    env.forward(REFRESH_GRACE_SECONDS / 2);
    let res = refresh(old_refresh.clone(), client_id.clone()).await;
    assert_eq!(res.status, 200, "{}", res.body);
    assert_ne!(res.json()["refresh_token"], second["refresh_token"]);
    assert_eq!(list_tools(&env, &access).await.status, 200);

    // The old refresh token again after the grace: someone else holds it — the grant ends.
    env.forward(REFRESH_GRACE_SECONDS + 1);
    oauth_error(
        &refresh(old_refresh, client_id.clone()).await,
        "invalid_grant",
    );
    assert_eq!(list_tools(&env, &access).await.status, 401);
    let newest = text(&second["refresh_token"]).to_owned();
    oauth_error(&refresh(newest, client_id).await, "invalid_grant");
}

#[tokio::test]
async fn revoking_the_key_or_a_token_ends_the_grant() {
    let env = TestEnv::new().await;
    let session = env.sign_in(&PrivateKeySigner::random()).await;

    // The key revoked in the console: its token is refused, its refresh token too.
    let (tokens1, client1) = tokens(&env, &session).await;
    let access = text(&tokens1["access_token"]).to_owned();
    assert_eq!(list_tools(&env, &access).await.status, 200);
    // On the open plans listing the token is checked as its key is (issue 63, point 9).
    let plans = |token: String| {
        let env = &env;
        async move {
            let res = env
                .req("GET", "/api/cloud/plans")
                .bearer(&token)
                .send()
                .await;
            res.status
        }
    };
    assert_eq!(plans(access.clone()).await, 200);
    let keys = env
        .req("GET", "/api/keys")
        .bearer(&session)
        .send()
        .await
        .json();
    let id = text(&keys["items"][0]["id"]).to_owned();
    let res = env
        .req("DELETE", &format!("/api/keys/{id}"))
        .bearer(&session)
        .send()
        .await;
    assert_eq!(res.status, 200, "{}", res.body);
    let res = list_tools(&env, &access).await;
    assert_eq!(res.status, 401);
    assert_eq!(plans(access.clone()).await, 401);
    assert!(
        res.header("www-authenticate")
            .unwrap()
            .contains("invalid_token")
    );
    let res = form(
        &env,
        "/oauth/token",
        &[
            ("grant_type", "refresh_token"),
            ("refresh_token", text(&tokens1["refresh_token"])),
            ("client_id", &client1),
        ],
    )
    .await;
    oauth_error(&res, "invalid_grant");

    // A token revoked by its client (RFC 7009): the grant ends; unknown tokens are answered
    // the same, and another client's token is left alone.
    let (tokens2, client2) = tokens(&env, &session).await;
    let access2 = text(&tokens2["access_token"]).to_owned();
    let (tokens3, _) = tokens(&env, &session).await;
    let access3 = text(&tokens3["access_token"]).to_owned();
    let revoke = |token: String, client: String| {
        let env = &env;
        async move {
            form(
                env,
                "/oauth/revoke",
                &[("token", &token), ("client_id", &client)],
            )
            .await
        }
    };
    let res = revoke(access3.clone(), client2.clone()).await;
    assert_eq!(res.status, 200, "{}", res.body);
    assert_eq!(
        list_tools(&env, &access3).await.status,
        200,
        "another client's: untouched"
    );
    let unknown = format!("mcp_at_{}", domain::ids::random_hex(32));
    assert_eq!(revoke(unknown, client2.clone()).await.status, 200);
    assert_eq!(
        revoke(text(&tokens2["refresh_token"]).to_owned(), client2)
            .await
            .status,
        200
    );
    assert_eq!(list_tools(&env, &access2).await.status, 401);
    oauth_error(&form(&env, "/oauth/revoke", &[]).await, "invalid_request");
}

#[tokio::test]
async fn codes_tokens_and_registrations_end_when_their_time_is_up() {
    let env = TestEnv::new().await;
    let session = env.sign_in(&PrivateKeySigner::random()).await;
    let (fresh, fresh_client, fresh_verifier) = code(&env, &session).await;
    let (late, late_client, late_verifier) = code(&env, &session).await;
    // The code's exchange names another resource: refused as OAuth's `invalid_target`.
    let res = form(
        &env,
        "/oauth/token",
        &[
            ("grant_type", "authorization_code"),
            ("code", &fresh),
            ("client_id", &fresh_client),
            ("redirect_uri", REDIRECT),
            ("code_verifier", &fresh_verifier),
            ("resource", "https://other.example/mcp"),
        ],
    )
    .await;
    assert_eq!(res.json()["error"], "invalid_target", "{}", res.body);
    // A challenge that is no S256 digest goes back to the client.
    let query = request(&late_client, "too-short", &[]);
    let res = env
        .req("GET", "/oauth/authorize")
        .query(&query)
        .send()
        .await;
    assert_eq!(
        params(res.header("location").unwrap())["error"],
        "invalid_request"
    );

    let (tokens, client_id) = tokens(&env, &session).await;
    let access = text(&tokens["access_token"]).to_owned();
    let refresh = text(&tokens["refresh_token"]).to_owned();
    // A refresh token is no bearer.
    assert_eq!(list_tools(&env, &refresh).await.status, 401);
    assert_eq!(list_tools(&env, &access).await.status, 200);

    // Eleven minutes on: the code has expired; the access token lasts the hour.
    env.forward(domain::identity::oauth::CODE_SECONDS + 60);
    let res = exchange(&env, &late, &late_client, &late_verifier).await;
    oauth_error(&res, "invalid_grant");
    assert!(
        res.json()["error_description"]
            .as_str()
            .unwrap()
            .contains("expired")
    );
    assert_eq!(list_tools(&env, &access).await.status, 200);
    // An hour on: the access token has expired; its refresh token makes a new pair.
    env.forward(domain::identity::oauth::ACCESS_SECONDS + 60);
    let res = list_tools(&env, &access).await;
    assert_eq!(res.status, 401);
    assert!(
        res.header("www-authenticate")
            .unwrap()
            .contains("invalid_token")
    );
    let rotate = |token: String| {
        let (env, client_id) = (&env, &client_id);
        async move {
            form(
                env,
                "/oauth/token",
                &[
                    ("grant_type", "refresh_token"),
                    ("refresh_token", &token),
                    ("client_id", client_id),
                ],
            )
            .await
        }
    };
    let res = rotate(refresh).await;
    assert_eq!(res.status, 200, "{}", res.body);
    let newest = text(&res.json()["refresh_token"]).to_owned();
    // Thirty days after that one was issued: it has expired, and so has every registration.
    use domain::identity::oauth::{ACCESS_SECONDS, REFRESH_SECONDS};
    env.forward(ACCESS_SECONDS + 60 + REFRESH_SECONDS + 60);
    oauth_error(&rotate(newest).await, "invalid_grant");
    let (_, challenge) = pkce();
    let query = request(&client_id, &challenge, &[]);
    let res = env
        .req("GET", "/oauth/authorize")
        .query(&query)
        .send()
        .await;
    oauth_error(&res, "invalid_request");
}

/// A registration no human has connected is a stranger's write: it lapses within the hour. A
/// human's consent keeps it thirty days from then, and makes its refusals go back to it.
#[tokio::test]
async fn a_client_no_human_connects_lapses_within_the_hour() {
    use domain::identity::oauth::{CLIENT_SECONDS, UNCONSENTED_CLIENT_SECONDS};
    let env = TestEnv::new().await;
    let stranger = register(&env, &[REDIRECT]).await;
    let connected = register(&env, &[REDIRECT]).await;
    let record = env.store.oauth_client(&stranger).await.unwrap().unwrap();
    let registered = record.created_at.unix();
    assert_eq!(
        record.expires_epoch,
        registered + UNCONSENTED_CLIENT_SECONDS
    );
    assert_eq!(record.consented_at, None);

    // Half an hour on, a human connects the second: thirty days from the consent.
    env.forward(UNCONSENTED_CLIENT_SECONDS / 2);
    let session = env.sign_in(&PrivateKeySigner::random()).await;
    let (_, challenge) = pkce();
    consent(
        &env,
        &session,
        &request(&connected, &challenge, &[]),
        json!({}),
    )
    .await;
    let record = env.store.oauth_client(&connected).await.unwrap().unwrap();
    let consented = record.consented_at.expect("connected");
    assert_eq!(record.expires_epoch, consented.unix() + CLIENT_SECONDS);
    assert!(record.expires_epoch > registered + 29 * 86_400);

    // An hour after the registrations: the stranger's is gone, the connected one answers.
    env.forward(UNCONSENTED_CLIENT_SECONDS + 60);
    let authorize = |client_id: &str| {
        let query = request(client_id, &challenge, &[]);
        let env = &env;
        async move {
            env.req("GET", "/oauth/authorize")
                .query(&query)
                .send()
                .await
        }
    };
    let res = authorize(&stranger).await;
    oauth_error(&res, "invalid_request");
    assert!(res.header("location").is_none());
    assert_eq!(authorize(&connected).await.status, 302);
    let res = env
        .req("GET", &format!("/api/oauth/clients/{stranger}"))
        .bearer(&session)
        .send()
        .await;
    res.problem(404);
}

/// A consent that names nothing but its approval grants less than everything: a key that
/// expires (90 days), spends at most 100 USD a month, and has the scopes asked for but
/// `delete`, which a human grants only by naming it.
#[tokio::test]
async fn a_consent_that_names_nothing_grants_an_expiring_capped_key_without_delete() {
    use domain::identity::oauth::GRANT_SECONDS;
    let env = TestEnv::new().await;
    let session = env.sign_in(&PrivateKeySigner::random()).await;
    let client_id = register(&env, &[REDIRECT]).await;
    let (_, challenge) = pkce();
    // The key a consent of `asked` with `decision` issues.
    let issued = |asked: String, decision: Value| {
        let (env, session) = (&env, &session);
        async move {
            let mut body = json!({"request": asked, "approve": true});
            body.as_object_mut()
                .unwrap()
                .extend(decision.as_object().unwrap().clone());
            let consented = env
                .req("POST", "/api/oauth/consent")
                .bearer(session)
                .json(body)
                .send()
                .await;
            assert_eq!(consented.status, 200, "{}", consented.body);
            let id = consented.json()["keyId"].clone();
            let list = env.req("GET", "/api/keys").bearer(session).send().await;
            let items = list.json()["items"].as_array().unwrap().clone();
            items.into_iter().find(|k| k["id"] == id).unwrap()
        }
    };
    let asked = request(&client_id, &challenge, &[]).replace("scope=read", "scope=delete+read");
    let key = issued(asked.clone(), json!({})).await;
    assert_eq!(key["scopes"], json!(["read", "provision", "pay"]), "{key}");
    assert_eq!(key["policy"]["monthlySpendLimit"], 100.0, "{key}");
    let expires = domain::time::parse_rfc3339(text(&key["expiresAt"])).unwrap();
    let from_now = (expires - domain::time::now()).whole_seconds();
    assert!(
        (GRANT_SECONDS - 120..=GRANT_SECONDS).contains(&from_now),
        "{key}"
    );
    // Named, they are granted as named: `delete`, no limit, another expiry.
    let decision = json!({"scopes": ["read", "delete"], "policy": {},
                          "expiresAt": "2099-01-01T00:00:00Z"});
    let key = issued(asked, decision).await;
    assert_eq!(key["scopes"], json!(["read", "delete"]), "{key}");
    assert_eq!(key["expiresAt"], "2099-01-01T00:00:00Z", "{key}");
    assert!(
        key["policy"].as_object().is_none_or(|p| p.is_empty()),
        "{key}"
    );
}
