//! `auth` function: Sign-In with Ethereum and sessions. A page (a request with `Origin`) gets
//! its session as the `__Host-session` cookie (HttpOnly: the page's script never sees the
//! token); a script or CLI gets `token`, to send as `Authorization: Bearer`.
//! Its routes are the rows of `domain::api::OPERATIONS` naming `Function::Auth`: method,
//! path, who may call, the scope a key needs, answers; the router admits each caller by its row.
//!
//! CORS for the configured web origin.

#![warn(missing_docs)]

use domain::api;
use domain::identity::auth::{self, session, siwe};
use domain::{AppState, ratelimit};
use faces::http::{self, json_body};
use faces::router;
use lambda_http::http::header;
use lambda_http::{Body, Request, Response};
use serde_json::json;

/// Handles one request of this function's routes.
pub async fn handle(state: &AppState, req: Request) -> Response<Body> {
    let config = &state.config;
    http::serve_cors(
        config.max_body_bytes,
        config.sign_in.web_origin.as_deref(),
        req,
        |req| route(state, req),
    )
    .await
}

/// This function's routes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    Nonce,
    Verify,
    Logout,
    Me,
}

const ROUTES: &[(&str, Route)] = &[
    ("getNonce", Route::Nonce),
    ("verifySignIn", Route::Verify),
    ("logout", Route::Logout),
    ("getMe", Route::Me),
];

/// One request of this function's routes, by its typed route.
async fn route(state: &AppState, req: Request) -> http::HttpResult {
    let matched = router::admit(state, ROUTES, &req).await?;
    let route = matched.route;
    if matches!(route, Route::Nonce | Route::Verify) {
        // Before anyone is known: per source address.
        let limit = state.config.rate_limits.sign_in;
        let ip = auth::source_address(&req);
        ratelimit::check(state, "sign-in", limit, &ip, ratelimit::now(state)).await?;
    }
    match route {
        Route::Nonce => {
            let (nonce, expires) = siwe::issue_nonce(state, state.clock.datetime()).await?;
            http::answer(
                &api::GET_NONCE,
                &json!({"nonce": nonce, "expiresAt": domain::time::rfc3339(expires)}),
            )
        }
        Route::Verify => verify(state, &req).await,
        Route::Logout => {
            let principal = matched.principal()?;
            session::sign_out(state, principal).await?;
            let mut response = http::answer(&api::LOGOUT, &())?;
            response
                .headers_mut()
                .insert(header::SET_COOKIE, session::clear_cookie());
            Ok(response)
        }
        Route::Me => {
            let principal = matched.principal()?;
            http::answer(&api::GET_ME, &session::describe(principal)?)
        }
    }
}

/// `POST /api/auth/verify`: checks the signed sign-in message and opens a session — as the
/// HttpOnly cookie for a page (a request with `Origin`), else as `token` in the body.
async fn verify(state: &AppState, req: &Request) -> http::HttpResult {
    http::require_json(req)?;
    let body: siwe::VerifyRequest = json_body(req)?;
    let now = state.clock.datetime();
    let source = domain::identity::auth::source_address(req);
    let sign_in = siwe::verify(state, &body.message, &body.signature, &source, now).await?;
    let (token, record) = session::create(state, &sign_in.address, now, sign_in.expiration).await?;
    let expires = record.expires_at.datetime();
    // A page (its request has an Origin) keeps the session in the HttpOnly cookie, out
    // of its script's reach; a script or CLI gets the token to send as a bearer.
    let page = req.headers().contains_key(header::ORIGIN);
    let mut body = json!({"address": record.owner.checksummed(), "expiresAt": record.expires_at});
    if !page {
        body["token"] = token.expose().into();
    }
    let mut response = http::answer(&api::VERIFY_SIGN_IN, &body)?;
    if page {
        response.headers_mut().insert(
            header::SET_COOKIE,
            session::set_cookie(&token, now, expires),
        );
    }
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, "no-store".parse().expect("static"));
    Ok(response)
}
