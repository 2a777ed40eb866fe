//! Typed routes (issue 18, point 2): each function binds the operations it serves (their ids
//! in [`domain::api::OPERATIONS`], where each method and path is written once) to the variants
//! of its `enum Route`; [`parse`] turns a request into its variant once, and the function's
//! `match` on it is exhaustive. A path no row names is a 404 and a path named for other methods
//! a 405, from here alone.
//!
//! Patterns are API Gateway's: literal segments and `{name}` segments, each matching one
//! non-empty segment of the path (a trailing `/` of the request is ignored).

use lambda_http::http::Method;
use lambda_http::{Request, RequestExt};

use domain::error::ApiError;

/// A request's route: the table's variant and the path's `{name}` segments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Matched<R> {
    /// The variant of the row the request matched.
    pub route: R,
    params: Vec<(&'static str, String)>,
}

impl<R> Matched<R> {
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
