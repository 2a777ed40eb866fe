//! Typed routes (issue 18, point 2): each function binds the operations it serves (their ids
//! in [`domain::api::OPERATIONS`], where each method and path is written once) to the variants
//! of its `enum Route`; [`parse`] turns a request into its variant once, and the function's
//! `match` on it is exhaustive. A path no row names is a 404 and a path named for other methods
//! a 405, from here alone.
//!
//! Patterns are API Gateway's: literal segments and `{name}` segments, each matching one
//! non-empty segment of the path (a trailing `/` of the request is ignored).
//!
//! [`admit`] then lets the caller in by the row: it authenticates as the row's `who` says and
//! checks the row's `scope`, so a handler receives a principal already allowed for its row and
//! decides none of it again (`tests/tests/e2e/callers.rs` holds every row's column). The
//! functions that hold no state (status, docs, the console) serve only rows anyone may call and
//! [`parse`] alone; the same test fails if one of their rows comes to need a caller.
//!
//! A credential presented is a credential checked (issue 63, point 9): a request that carries
//! an API key (`X-API-Key`), a bearer (`Authorization: Bearer`: a session token, a key or an
//! OAuth access token) or the session cookie is authenticated on every row, an open one's
//! ([`Who::AnyoneChecked`]) included, and a bad credential is 401 there as everywhere; with
//! none, the open row answers as it does anyone. The x402 payment headers are no credential.
//! The rows of [`Who::Anyone`] read none: sign-in and OAuth's endpoints and metadata, where a
//! credential is obtained (a stale cookie or an expired token must never keep its holder from
//! signing in again or refreshing), the CORS preflights, `GET /mcp`'s 405, and the rows of the
//! functions that hold no store (status, the documents, the console), which answer every
//! caller alike.

use lambda_http::http::Method;
use lambda_http::{Request, RequestExt};

use domain::AppState;
use domain::api::{Operation, Who};
use domain::error::ApiError;
use domain::identity::auth::{self, Principal};

/// A request's route: the table's variant, the path's `{name}` segments and, once
/// [`admit`]ted, its caller.
#[derive(Debug, Clone)]
pub struct Matched<R> {
    /// The variant of the row the request matched.
    pub route: R,
    params: Vec<(&'static str, String)>,
    operation: &'static Operation,
    caller: Option<Principal>,
}

impl<R> Matched<R> {
    /// The caller the row let in ([`admit`]).
    ///
    /// Errors: 500 when there is none — the row lets anyone in, or the request was only
    /// [`parse`]d (a handler's mistake, which the callers' test finds).
    pub fn principal(&self) -> Result<&Principal, ApiError> {
        self.caller
            .as_ref()
            .ok_or_else(|| ApiError::Internal(format!("`{}` admits no caller", self.operation.id)))
    }

    /// The caller the row let in, if any: `None` on a row anyone may call reached without a
    /// credential (an anonymous request), or a request only [`parse`]d.
    pub fn caller(&self) -> Option<&Principal> {
        self.caller.as_ref()
    }

    /// The row the request matched.
    pub fn operation(&self) -> &'static Operation {
        self.operation
    }

    /// The path's `{name}` segments, in the pattern's order.
    pub fn params(&self) -> &[(&'static str, String)] {
        &self.params
    }

    /// The path segment the pattern named `{name}`.
    ///
    /// Errors: 500 when the route's pattern has no such segment (a table's mistake).
    pub fn param(&self, name: &str) -> Result<&str, ApiError> {
        self.params
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
            .ok_or_else(|| ApiError::Internal(format!("the route names no `{{{name}}}`")))
    }
}

/// `path` without a trailing `/` (the root stays `/`).
fn trimmed(path: &str) -> &str {
    match path.trim_end_matches('/') {
        "" => "/",
        trimmed => trimmed,
    }
}

/// The `{name}` segments of `path` if it matches `pattern` (both without a trailing `/`).
fn captures(pattern: &'static str, path: &str) -> Option<Vec<(&'static str, String)>> {
    let mut wanted = trimmed(pattern).split('/');
    let mut given = path.split('/');
    let mut params = Vec::new();
    loop {
        match (wanted.next(), given.next()) {
            (None, None) => return Some(params),
            (Some(w), Some(g)) => match w.strip_prefix('{').and_then(|w| w.strip_suffix('}')) {
                Some(name) if !g.is_empty() => params.push((name, g.to_owned())),
                Some(_) => return None,
                None if w == g => {}
                None => return None,
            },
            _ => return None,
        }
    }
}

/// The route of `method` on `path` in `table`: the first binding whose operation's pattern and
/// method match. An id [`domain::api::operation`] does not know matches nothing (a test holds
/// every function's bindings to the table).
///
/// Errors: 404 naming the path when no bound operation's pattern matches it; 405 naming the
/// method when some match the path but none its method.
pub fn route<R: Copy>(
    table: &[(&'static str, R)],
    method: &Method,
    path: &str,
) -> Result<Matched<R>, ApiError> {
    let path = trimmed(path);
    let mut known_path = false;
    for (id, route) in table {
        let Some(operation) = domain::api::operation(id) else {
            continue;
        };
        if let Some(params) = captures(operation.path, path) {
            if operation.method == method {
                return Ok(Matched {
                    route: *route,
                    params,
                    operation,
                    caller: None,
                });
            }
            known_path = true;
        }
    }
    Err(if known_path {
        ApiError::MethodNotAllowed(method.to_string())
    } else {
        ApiError::NotFound(format!("no route {path}"))
    })
}

/// [`route`] of a request, by its path as API Gateway received it (`rawPath`, without the
/// stage: not normalized, so `/api/sandboxes/..` is a sandbox id to refuse, not `/api`), or
/// its URI's path when the event has none.
pub fn parse<R: Copy>(table: &[(&'static str, R)], req: &Request) -> Result<Matched<R>, ApiError> {
    let path = match req.raw_http_path() {
        "" => req.uri().path(),
        raw => raw,
    };
    route(table, req.method(), path)
}

/// [`parse`], then the caller as the row says: authenticated by its `who` (none for
/// [`Who::Anyone`]; the credential presented, if any, for [`Who::AnyoneChecked`]; a key or a
/// session; a session alone; a key alone) and, for a key, holding the row's `scope`. The
/// handler then takes the caller from [`Matched::principal`] (or [`Matched::caller`] on an
/// open row).
///
/// Errors: those of [`parse`]; 401 without a valid credential the row accepts, or with a bad
/// one on an open row (and 429 over the rate limits: `auth::authenticate`); 403 for a session
/// on a key's row or a key on a session's, and `insufficient-scope` naming the scope a key
/// lacks.
pub async fn admit<R: Copy>(
    state: &AppState,
    table: &[(&'static str, R)],
    req: &Request,
) -> Result<Matched<R>, ApiError> {
    let mut matched = parse(table, req)?;
    let caller = match matched.operation.who {
        Who::Anyone => return Ok(matched),
        Who::AnyoneChecked => match auth::authenticate_presented(state, req).await? {
            Some(caller) => caller,
            None => return Ok(matched),
        },
        Who::KeyOrSession => auth::authenticate(state, req).await?,
        Who::Session => auth::require_session(state, req).await?,
        Who::Key => auth::require_key(state, req).await?,
        Who::KeyAlone => auth::authenticate_key(state, req).await?,
    };
    if let Some(scope) = matched.operation.scope {
        domain::identity::keys::require(&caller, scope)?;
    }
    matched.caller = Some(caller);
    Ok(matched)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum R {
        Generate,
        List,
        Change,
        Revoke,
    }

    const TABLE: &[(&str, R)] = &[
        ("generateKey", R::Generate),
        ("listKeys", R::List),
        ("changeKey", R::Change),
        ("revokeKey", R::Revoke),
    ];

    #[test]
    fn a_request_is_its_route_or_a_404_or_a_405() {
        let got = |m: Method, p: &str| route(TABLE, &m, p);
        assert_eq!(
            got(Method::POST, "/api/keys/generate").unwrap().route,
            R::Generate
        );
        assert_eq!(got(Method::GET, "/api/keys/").unwrap().route, R::List);
        let change = got(Method::PATCH, "/api/keys/key_1").unwrap();
        assert_eq!(
            (change.route, change.param("id").unwrap()),
            (R::Change, "key_1")
        );
        assert_eq!(
            got(Method::DELETE, "/api/keys/key_1").unwrap().route,
            R::Revoke
        );
        let put = got(Method::PUT, "/api/keys/key_1");
        assert!(matches!(put, Err(ApiError::MethodNotAllowed(m)) if m == "PUT"));
        assert!(matches!(
            got(Method::GET, "/api/keys/generate"),
            Err(ApiError::MethodNotAllowed(_))
        ));
        let root: &[(&str, R)] = &[("consolePage", R::List), ("noSuchOperation", R::Change)];
        assert_eq!(route(root, &Method::GET, "/").unwrap().route, R::List);
        assert_eq!(route(root, &Method::GET, "").unwrap().route, R::List);
        for missing in ["/api/keys/a/b", "/api/key", "/"] {
            assert!(
                matches!(got(Method::GET, missing), Err(ApiError::NotFound(_))),
                "{missing}"
            );
        }
        assert!(matches!(
            got(Method::PATCH, "/api/keys//x"),
            Err(ApiError::NotFound(_))
        ));
        assert!(change.param("teamId").is_err());
    }
}
