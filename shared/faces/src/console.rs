//! The web console's static files (the console issue, point 1), served by the `console`
//! function on the API's own origin — so the `__Host-session` cookie and the cross-origin write
//! refusal apply unchanged: `GET /` is the page (`index.html`), `GET /console/{file}` its
//! scripts, styles and vendored modules. The files are embedded in that function's binary; this
//! module holds the rules: content types, caching (`Cache-Control: no-cache` with a strong
//! `ETag`, so a deploy is seen at once and an unchanged file costs a 304) and the security
//! headers — a strict Content-Security-Policy with no inline script or style, no framing, no
//! referrer, no MIME sniffing.

use lambda_http::http::{HeaderValue, Method, StatusCode, header};
use lambda_http::{Body, Request, Response};
use sha2::{Digest, Sha256};

use domain::error::ApiError;

/// One embedded file: the name it is served under (`/console/<name>`; `index.html` is also `/`)
/// and its bytes.
#[derive(Debug, Clone, Copy)]
pub struct Asset {
    /// File name, one path segment (`app.js`).
    pub name: &'static str,
    /// Contents.
    pub body: &'static [u8],
}

/// The Content-Security-Policy of every console response: scripts, styles and requests only
/// from this origin, no inline code, no plugins, no framing, forms post nowhere.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
    style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; \
    form-action 'none'; frame-ancestors 'none'";

/// The `Content-Type` of a file, by its extension (`application/octet-stream` otherwise).
pub fn content_type(name: &str) -> &'static str {
    match name.rsplit_once('.').map(|(_, ext)| ext) {
        Some("html") => "text/html; charset=utf-8",
        Some("js") => "text/javascript; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("txt") => "text/plain; charset=utf-8",
        Some("png") => "image/png",
        Some("svg") => "image/svg+xml",
        _ => "application/octet-stream",
    }
}

/// The strong `ETag` of `body`: the first 16 bytes of its SHA-256, hex, quoted.
pub fn etag(body: &[u8]) -> String {
    format!("\"{}\"", hex::encode(&Sha256::digest(body)[..16]))
}

/// The console's routes: the page and its files, each by `GET` or `HEAD`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    Page,
    File,
}

const ROUTES: &[(&str, Route)] = &[
    ("consolePage", Route::Page),
    ("consolePageHead", Route::Page),
    ("consoleFile", Route::File),
    ("consoleFileHead", Route::File),
];

/// Answers `req` from `assets`: `GET` or `HEAD` of `/` (`index.html`) or `/console/<name>`;
/// 304 when `If-None-Match` names the file's `ETag`.
///
/// Errors: 404 for a file not in `assets`; 405 for other methods.
pub fn serve(assets: &[Asset], req: &Request) -> Result<Response<Body>, ApiError> {
    let matched = crate::router::parse(ROUTES, req)?;
    let method = req.method();
    let name = match matched.route {
        Route::Page => "index.html",
        Route::File => matched.param("file")?,
    };
    let asset = assets
        .iter()
        .find(|a| a.name == name)
        .ok_or_else(|| ApiError::NotFound(format!("no console file {name}")))?;
    let tag = etag(asset.body);
    let fresh = req
        .headers()
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == tag || t.trim() == "*"));
    let (status, body) = match (fresh, method == Method::HEAD) {
        (true, _) => (StatusCode::NOT_MODIFIED, Body::Empty),
        (false, true) => (StatusCode::OK, Body::Empty),
        (false, false) => (StatusCode::OK, Body::Binary(asset.body.to_vec())),
    };
    let mut response = Response::new(body);
    *response.status_mut() = status;
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_TYPE, content_type(asset.name)),
        (header::CACHE_CONTROL, "no-cache"),
        (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::X_FRAME_OPTIONS, "DENY"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    if let Ok(tag) = HeaderValue::from_str(&tag) {
        headers.insert(header::ETAG, tag);
    }
    headers.insert(
        "cross-origin-opener-policy",
        HeaderValue::from_static("same-origin"),
    );
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ASSETS: &[Asset] = &[
        Asset {
            name: "index.html",
            body: b"<!doctype html>",
        },
        Asset {
            name: "app.js",
            body: b"export {};",
        },
    ];

    fn request(method: &str, path: &str, if_none_match: Option<&str>) -> Request {
        let mut builder = lambda_http::http::Request::builder()
            .method(method)
            .uri(path);
        if let Some(tag) = if_none_match {
            builder = builder.header(header::IF_NONE_MATCH, tag);
        }
        builder.body(Body::Empty).unwrap()
    }

    #[test]
    fn the_page_and_its_files_with_their_types_and_headers() {
        let page = serve(ASSETS, &request("GET", "/", None)).unwrap();
        assert_eq!(page.status(), StatusCode::OK);
        assert_eq!(
            page.headers()[header::CONTENT_TYPE],
            "text/html; charset=utf-8"
        );
        assert_eq!(
            page.headers()[header::CONTENT_SECURITY_POLICY],
            CONTENT_SECURITY_POLICY
        );
        assert!(!CONTENT_SECURITY_POLICY.contains("unsafe"));
        assert_eq!(page.headers()[header::CACHE_CONTROL], "no-cache");
        let script = serve(ASSETS, &request("GET", "/console/app.js", None)).unwrap();
        assert_eq!(
            script.headers()[header::CONTENT_TYPE],
            "text/javascript; charset=utf-8"
        );
        assert_eq!(script.body().as_ref(), b"export {};");
        let head = serve(ASSETS, &request("HEAD", "/console/app.js", None)).unwrap();
        assert!(head.body().is_empty());
        assert_eq!(head.headers()[header::ETAG], etag(b"export {};").as_str());
    }

    #[test]
    fn an_unchanged_file_is_304_and_others_are_refused() {
        let tag = etag(b"export {};");
        let again = serve(ASSETS, &request("GET", "/console/app.js", Some(&tag))).unwrap();
        assert_eq!(again.status(), StatusCode::NOT_MODIFIED);
        assert!(again.body().is_empty());
        let stale = serve(ASSETS, &request("GET", "/console/app.js", Some("\"x\""))).unwrap();
        assert_eq!(stale.status(), StatusCode::OK);
        for path in [
            "/console/",
            "/console/missing.js",
            "/console/../Cargo.toml",
            "/index",
        ] {
            assert!(
                matches!(
                    serve(ASSETS, &request("GET", path, None)),
                    Err(ApiError::NotFound(_))
                ),
                "{path}"
            );
        }
        assert!(matches!(
            serve(ASSETS, &request("POST", "/", None)),
            Err(ApiError::MethodNotAllowed(_))
        ));
    }
}
