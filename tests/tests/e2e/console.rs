//! The web console's files through the router (the console issue, point 1): the page at `/`,
//! its modules at `/console/{file}`, each with its content type, `no-cache` and an `ETag`, the
//! strict Content-Security-Policy (no inline script or style anywhere in the page), and every
//! module a page or module imports is one the function serves. The console in a real browser is
//! `tests/browser` (run by `make test`).

use crate::harness::TestEnv;

fn imports(source: &str) -> Vec<String> {
    source
        .lines()
        .filter_map(|line| {
            let line = line.trim_start();
            if !(line.starts_with("import ") || line.starts_with("export ")) {
                return None;
            }
            let (_, rest) = line.split_once(" from ")?;
            let quoted = rest.trim().trim_end_matches(';');
            Some(quoted.trim_matches(|c| c == '"' || c == '\'').to_owned())
        })
        .collect()
}

#[tokio::test]
async fn the_console_is_served_with_its_types_cache_and_security_headers() {
    let env = TestEnv::new().await;
    let page = env.req("GET", "/").send().await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert_eq!(
        page.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    let csp = page.header("content-security-policy").unwrap();
    assert!(csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"));
    assert!(!csp.contains("unsafe-inline") && !csp.contains("unsafe-eval"));
    assert_eq!(page.header("cache-control"), Some("no-cache"));
    assert_eq!(page.header("x-content-type-options"), Some("nosniff"));
    // No inline script or style, no handler attributes, nothing from another origin.
    for banned in [
        "<script>",
        "<style",
        " style=",
        " onclick=",
        "onload=",
        "//cdn",
        "https://",
    ] {
        assert!(!page.body.contains(banned), "{banned} in the page");
    }
    assert!(
        page.body
            .contains(r#"<script type="module" src="/console/app.js">"#)
    );

    // Every file the page names, and every module they import, is served with its type.
    let mut pending = vec!["app.js".to_owned(), "style.css".to_owned()];
    let mut seen = Vec::new();
    while let Some(name) = pending.pop() {
        if seen.contains(&name) {
            continue;
        }
        let res = env.req("GET", &format!("/console/{name}")).send().await;
        assert_eq!(res.status, 200, "{name}: {}", res.body);
        let expected = if name.ends_with(".js") {
            "text/javascript; charset=utf-8"
        } else {
            "text/css; charset=utf-8"
        };
        assert_eq!(res.header("content-type"), Some(expected), "{name}");
        assert!(res.header("etag").is_some(), "{name}");
        for module in imports(&res.body) {
            let module = module.strip_prefix("./").expect("relative imports only");
            pending.push(module.to_owned());
        }
        seen.push(name);
    }
    assert!(seen.contains(&"sha3.js".to_owned()), "{seen:?}");
    // The vendored library's licence is served beside it.
    let licence = env
        .req("GET", "/console/noble-hashes.LICENSE.txt")
        .send()
        .await;
    assert!(licence.body.contains("MIT"), "{}", licence.body);

    // An unchanged file is a 304; HEAD has the headers only; unknown files are 404, other
    // methods 405, as problem documents.
    let app = env.req("GET", "/console/app.js").send().await;
    let tag = app.header("etag").unwrap().to_owned();
    let again = env
        .req("GET", "/console/app.js")
        .header("if-none-match", &tag)
        .send()
        .await;
    assert_eq!(again.status, 304);
    let head = env.req("HEAD", "/console/app.js").send().await;
    assert_eq!((head.status, head.body.as_str()), (200, ""));
    assert_eq!(head.header("etag"), Some(tag.as_str()));
    env.req("GET", "/console/nothing.js")
        .send()
        .await
        .problem(404);
}
