//! MCP's authorization, as the HTTP face shows it (issue 47, point 2; the rules are
//! `domain::identity::oauth`'s): the protected-resource metadata of `/mcp` (RFC 9728) and the
//! authorization server's (RFC 8414), written from the route table; the 401's challenge; and
//! how the OAuth endpoints are served — form bodies, CORS for any origin, OAuth's own errors,
//! redirects.

use std::future::Future;

use domain::api;
use domain::error::{ApiError, OAuthError};
use domain::identity::oauth::grants::Endpoint;
use domain::policy::Scope;
use lambda_http::http::{HeaderValue, Method, StatusCode, header};
use lambda_http::{Body, Request, Response};
use serde_json::{Value, json};

use crate::http::{self, HttpResult};

/// The resource tokens are bound to (RFC 8707): the MCP endpoint's URL on `base`.
pub fn resource(base: &str) -> String {
    format!("{base}{}", api::MCP.op.path)
}

/// This service as its own authorization server, as `req` reached it: the issuer its public
/// base URL (`http::public_base`), the resource its MCP endpoint there.
pub fn endpoint(config: &domain::config::Config, req: &Request) -> Endpoint {
    let issuer = http::public_base(config, req);
    Endpoint {
        resource: resource(&issuer),
        issuer,
    }
}

/// Where `/mcp`'s protected-resource metadata is (RFC 9728 §3.1: the well-known path inserted
/// before the resource's path): `<base>/.well-known/oauth-protected-resource/mcp`.
pub fn resource_metadata_url(base: &str) -> String {
    format!("{base}{}", api::GET_PROTECTED_RESOURCE.op.path)
}

/// The scopes a client may ask for: the API key's.
fn scope_names() -> Vec<&'static str> {
    Scope::ALL.iter().map(|s| s.as_str()).collect()
}

/// `/mcp`'s protected-resource metadata (RFC 9728 §2).
pub fn protected_resource(base: &str) -> Value {
    json!({
        "resource": resource(base),
        "authorization_servers": [base],
        "scopes_supported": scope_names(),
        "bearer_methods_supported": ["header"],
        "resource_name": "Cloud API for agents (MCP)",
        "resource_documentation": format!("{base}{}", api::GET_LLMS_TXT.op.path),
    })
}

/// The authorization server's metadata (RFC 8414 §2), its issuer the base URL.
pub fn authorization_server(base: &str) -> Value {
    let at = |id: &str| format!("{base}{}", api::link(id, ""));
    json!({
        "issuer": base,
        "authorization_endpoint": at("authorize"),
        "token_endpoint": at("token"),
        "registration_endpoint": at("registerClient"),
        "revocation_endpoint": at("revokeToken"),
        "scopes_supported": scope_names(),
        "response_types_supported": ["code"],
        "response_modes_supported": ["query"],
        "grant_types_supported": ["authorization_code", "refresh_token"],
        "token_endpoint_auth_methods_supported": ["none"],
        "revocation_endpoint_auth_methods_supported": ["none"],
        "code_challenge_methods_supported": ["S256"],
        "authorization_response_iss_parameter_supported": true,
        "service_documentation": format!("{base}{}", api::GET_LLMS_TXT.op.path),
    })
}

/// `/mcp`'s `WWW-Authenticate` on a 401 (RFC 6750 §3, RFC 9728 §5.1): where its metadata is,
/// and `invalid_token` when the request presented a credential.
pub fn challenge(base: &str, presented: bool) -> String {
    let metadata = resource_metadata_url(base);
    if presented {
        format!(
            "Bearer resource_metadata=\"{metadata}\", error=\"invalid_token\", \
             error_description=\"the credential is missing, expired or revoked\""
        )
    } else {
        format!("Bearer resource_metadata=\"{metadata}\"")
    }
}

/// An OAuth refusal as OAuth answers it (RFC 6749 §5.2): `{error, error_description}` JSON,
/// never cached (`http::problem` answers every [`ApiError::OAuth`] so).
pub(crate) fn error(refusal: &OAuthError) -> Response<Body> {
    let body = json!({
        "error": refusal.error,
        "error_description": refusal.description,
    });
    Response::builder()
        .status(refusal.status)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CACHE_CONTROL, "no-store")
        .body(Body::Text(body.to_string()))
        .unwrap_or_else(|_| Response::new(Body::Empty))
}

/// A `302 Found` to `location`, never cached (an authorization request's answer).
///
/// Errors: 500 for a location that is no header value.
pub fn redirect(location: &str) -> HttpResult {
    Response::builder()
        .status(StatusCode::FOUND)
        .header(header::LOCATION, location)
        .header(header::CACHE_CONTROL, "no-store")
        .body(Body::Empty)
        .map_err(|e| ApiError::Internal(e.to_string()))
}

/// `http::serve` for the OAuth endpoints: a write's body may be a form
/// (`application/x-www-form-urlencoded`, as RFC 6749 §4.1.3 and RFC 7009 §2.1 send it) as well
/// as JSON (RFC 7591); CORS for any origin without credentials (`Access-Control-Allow-Origin:
/// *`, for clients that run in a browser: these routes read no cookie), a preflight answered
/// 204.
pub async fn serve<F, Fut>(max_body_bytes: usize, req: Request, handler: F) -> Response<Body>
where
    F: FnOnce(Request) -> Fut,
    Fut: Future<Output = HttpResult>,
{
    let preflight = req.method() == Method::OPTIONS;
    let mut response = http::serve_checked(max_body_bytes, req, form_or_json, |req| async move {
        if !preflight {
            return handler(req).await;
        }
        http::preflight_answer(
            "GET, POST, OPTIONS",
            "content-type, authorization, mcp-protocol-version",
        )
    })
    .await;
    response.headers_mut().insert(
        header::ACCESS_CONTROL_ALLOW_ORIGIN,
        HeaderValue::from_static("*"),
    );
    response
}

/// A write's body is a form, JSON or nothing.
///
/// Errors: 415 for another media type.
fn form_or_json(req: &Request) -> Result<(), ApiError> {
    let form = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| {
            v.trim()
                .eq_ignore_ascii_case("application/x-www-form-urlencoded")
        });
    if form {
        return Ok(());
    }
    http::json_or_nothing(req).map_err(|_| {
        ApiError::UnsupportedMediaType(
            "the body must be application/x-www-form-urlencoded or application/json".into(),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_metadata_names_each_other() {
        let base = "https://api.example";
        let resource = protected_resource(base);
        assert_eq!(resource["resource"], "https://api.example/mcp");
        assert_eq!(resource["authorization_servers"][0], base);
        let server = authorization_server(base);
        assert_eq!(server["issuer"], base);
        assert_eq!(server["token_endpoint"], "https://api.example/oauth/token");
        assert_eq!(
            server["authorization_endpoint"],
            "https://api.example/oauth/authorize"
        );
        assert_eq!(
            server["registration_endpoint"],
            "https://api.example/oauth/register"
        );
        assert_eq!(
            server["revocation_endpoint"],
            "https://api.example/oauth/revoke"
        );
        assert_eq!(server["code_challenge_methods_supported"], json!(["S256"]));
        assert_eq!(
            resource_metadata_url(base),
            "https://api.example/.well-known/oauth-protected-resource/mcp"
        );
        assert!(challenge(base, true).contains("error=\"invalid_token\""));
        assert!(!challenge(base, false).contains("error="));
    }
}
