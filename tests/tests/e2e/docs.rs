//! The docs held true (issue 45, point 6): every repository path, `make` target and test that
//! `README.md` and `docs/` name in code spans exists.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The code spans of a Markdown text (`` `…` `` within a line), fenced blocks aside.
fn code_spans(text: &str) -> Vec<&str> {
    let mut spans = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let parts: Vec<&str> = line.split('`').collect();
        // Parts 1, 3, … are inside backticks; an unpaired last one is not a span.
        for i in (1..parts.len().saturating_sub(1)).step_by(2) {
            spans.push(parts[i]);
        }
    }
    spans
}

/// `README.md` and every page of `docs/`, with their names.
fn pages() -> Vec<(String, String)> {
    let mut pages = vec![("README.md".to_owned(), root().join("README.md"))];
    for entry in std::fs::read_dir(root().join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            let name = format!("docs/{}", path.file_name().unwrap().to_string_lossy());
            pages.push((name, path));
        }
    }
    pages
        .into_iter()
        .map(|(name, path)| (name, std::fs::read_to_string(path).unwrap()))
        .collect()
}

/// Whether `token` is a path into the repository: segments of file-name characters, the first
/// a top-level folder (not an API route, a media type or a build output), with an optional
/// `:line` or `:first-last`.
fn repository_path(token: &str) -> Option<&str> {
    let path = match token.split_once(':') {
        Some((path, lines)) if lines.chars().all(|c| c.is_ascii_digit() || c == '-') => path,
        Some(_) => return None,
        None => token,
    };
    let named = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
    };
    let segments: Vec<&str> = path.trim_end_matches('/').split('/').collect();
    let tracked = [
        ".ci",
        ".config",
        "bench",
        "console",
        "crates",
        "docs",
        "events",
        "functions",
        "infra",
        "shared/domain",
        "tests",
    ];
    (segments.len() > 1 && segments.iter().all(|s| named(s)) && tracked.contains(&segments[0]))
        .then_some(path)
}

/// Every `fn` name of the repository's Rust sources (tests included).
fn function_names() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut dirs = vec![root()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_dir()
                && !name.starts_with('.')
                && !["target", "node_modules"].contains(&name.as_str())
            {
                dirs.push(path);
            } else if name.ends_with(".rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                for rest in text.split("fn ").skip(1) {
                    let name: String = rest
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    names.insert(name);
                }
            }
        }
    }
    names
}

/// What a page names that does not exist: `make` targets the Makefile lacks, repository paths
/// that are not there, and tests (`module::a_long_test_name`, three underscores or more in its
/// last segment) no `fn` is named.
fn missing(page: &str, targets: &BTreeSet<String>, functions: &BTreeSet<String>) -> Vec<String> {
    let mut missing = Vec::new();
    for span in code_spans(page) {
        let words: Vec<&str> = span.split_whitespace().collect();
        for pair in words.windows(2) {
            let target = pair[1].trim_end_matches([',', ';', ')']);
            if pair[0] == "make" && !target.contains('=') && !targets.contains(target) {
                missing.push(format!("make target `{target}`"));
            }
        }
        let Some(token) = words.first() else { continue };
        if let Some(path) = repository_path(token)
            && !root().join(path).exists()
        {
            missing.push(format!("path `{path}`"));
        }
        let segments: Vec<&str> = token.split("::").collect();
        let test_like = segments.len() > 1
            && segments.iter().all(|s| {
                !s.is_empty()
                    && s.chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            });
        let last = segments.last().unwrap_or(&"");
        if test_like && last.matches('_').count() >= 3 && !functions.contains(*last) {
            missing.push(format!("test `{token}`"));
        }
    }
    missing
}

#[test]
fn every_path_make_target_and_test_the_docs_name_exists() {
    let makefile = std::fs::read_to_string(root().join("Makefile")).unwrap();
    let targets: BTreeSet<String> = makefile
        .lines()
        .filter_map(|l| l.split_once(':').map(|(t, _)| t))
        .filter(|t| {
            !t.is_empty()
                && t.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        })
        .map(str::to_owned)
        .collect();
    let functions = function_names();
    let mut found = Vec::new();
    for (name, text) in pages() {
        found.extend(
            missing(&text, &targets, &functions)
                .into_iter()
                .map(|m| format!("{name}: {m}")),
        );
    }
    assert!(
        found.is_empty(),
        "the docs name what does not exist:\n  {}",
        found.join("\n  ")
    );
}

#[test]
fn the_check_names_a_missing_path_target_and_test() {
    let targets = BTreeSet::from(["test".to_owned()]);
    let functions = BTreeSet::from(["a_test_that_exists".to_owned()]);
    let page = "Run `make test` then `make nothing`; see `docs/nowhere.md:12`, `docs/api.md`, \
                `/api/cloud/servers/{id}`, `application/json`, `layers::a_test_that_exists` and \
                `layers::a_test_that_is_gone`.\n```\nmake ignored\n```\n";
    assert_eq!(
        missing(page, &targets, &functions),
        [
            "make target `nothing`",
            "path `docs/nowhere.md`",
            "test `layers::a_test_that_is_gone`"
        ]
    );
}

/// The operation of the route table at `method` (`*`: any) and `path` (a `{name}` segment on
/// either side matches any segment; a query is ignored): the one with the most literal segments
/// matched.
fn operation_at(method: &str, path: &str) -> Option<&'static domain::api::Operation> {
    let path = path.split(['?', '[']).next().unwrap_or_default();
    let given: Vec<&str> = path.trim_end_matches('/').split('/').collect();
    let any_method = method == "*";
    let placeholder = |s: &str| s.starts_with('{') || s.starts_with("${") || s.is_empty();
    domain::api::OPERATIONS
        .iter()
        .copied()
        .filter(|op| any_method || op.method.as_str() == method)
        .filter_map(|op| {
            let wanted: Vec<&str> = op.path.trim_end_matches('/').split('/').collect();
            if wanted.len() != given.len() {
                return None;
            }
            let mut literal = 0;
            for (w, g) in wanted.iter().zip(&given) {
                if placeholder(w) || placeholder(g) {
                    continue;
                }
                if w != g {
                    return None;
                }
                literal += 1;
            }
            Some((literal, op))
        })
        .max_by_key(|(literal, _)| *literal)
        .map(|(_, op)| op)
}

/// Every route `docs/api.md`'s table lists is a row of the route table, listed with who may
/// call it and the scope a key needs as the row says; and every documented row is listed.
#[test]
fn the_api_summary_lists_the_route_tables_rows_as_they_are() {
    use domain::api::Who;
    let text = std::fs::read_to_string(root().join("docs/api.md")).unwrap();
    let mut listed = BTreeSet::new();
    for line in text.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.split(" | ").collect();
        let who = cells[1];
        // A span that is no `METHOD /path` (a second query, `?serverId=…`) belongs to the one
        // before it.
        for route in code_spans(cells[0]) {
            let Some((method, path)) = route.split_once(' ') else {
                continue;
            };
            let op = operation_at(method, path)
                .unwrap_or_else(|| panic!("docs/api.md: {route} is no row of the route table"));
            listed.insert(op.id);
            let (anyone, session, key) = match op.who {
                Who::Anyone | Who::AnyoneChecked => (true, false, false),
                Who::KeyOrSession => (false, true, true),
                Who::Session => (false, true, false),
                Who::Key | Who::KeyAlone => (false, false, true),
            };
            let says = |word: &str| who.contains(word);
            assert_eq!(
                (says("anyone"), says("session"), says("key")),
                (anyone, session, key),
                "docs/api.md: {route} says `{who}`; the row: {:?}",
                op.who
            );
            if let Some(named) = who.split("with `").nth(1) {
                let scope = op.scope.map(|s| s.as_str()).unwrap_or_default();
                assert!(
                    named.starts_with(&format!("{scope}`")),
                    "docs/api.md: {route} names the scope in `{who}`; the row: {scope}"
                );
            }
        }
    }
    let unlisted: Vec<&str> = domain::api::OPERATIONS
        .iter()
        .filter(|op| op.documented && op.method != "OPTIONS" && !listed.contains(op.id))
        .map(|op| op.id)
        .collect();
    assert!(
        unlisted.is_empty(),
        "docs/api.md does not list {unlisted:?}"
    );
}

/// Every API path the console calls (`console/app.js`: its `/api/…` literals, with the method
/// of the `call` they are given to on the same line; a path kept for a later call, with any)
/// is a row of the route table.
#[test]
fn every_route_the_console_calls_is_a_row() {
    let text = std::fs::read_to_string(root().join("console/app.js")).unwrap();
    let mut found = 0;
    for line in text.lines() {
        for quote in ['\'', '`'] {
            let mut rest = line;
            while let Some(start) = rest.find(&format!("{quote}/api/")) {
                let literal = &rest[start + 1..];
                let end = literal.find(quote).unwrap_or(literal.len());
                let path = &literal[..end];
                let before = &rest[..start];
                let method = match before.rfind("call('") {
                    Some(at) => before[at + 6..].split('\'').next().unwrap_or_default(),
                    None if before.contains("const ") => "*",
                    None => "GET",
                };
                assert!(
                    operation_at(method, path).is_some(),
                    "console/app.js calls {method} {path}, no row of the route table"
                );
                found += 1;
                rest = &literal[end..];
            }
        }
    }
    assert!(
        found >= 30,
        "only {found} API paths found in console/app.js"
    );
}

/// The lists of a payment's states that the Makefile's help and `docs/operations.md` copy are
/// `OrderState::ALL`, in its order.
#[test]
fn the_payment_states_the_makefile_and_the_docs_list_are_the_stores() {
    use domain::store::payments::OrderState;
    let states: Vec<&str> = OrderState::ALL.iter().map(|s| s.as_str()).collect();
    let makefile = std::fs::read_to_string(root().join("Makefile")).unwrap();
    let line = makefile
        .lines()
        .find(|l| l.starts_with("payments:"))
        .expect("a payments target");
    let listed = line.split("STATE=").nth(1).unwrap_or_default();
    assert_eq!(
        listed.split('|').collect::<Vec<_>>(),
        states,
        "Makefile: {line}"
    );
    let operations = std::fs::read_to_string(root().join("docs/operations.md")).unwrap();
    let row = operations
        .lines()
        .find(|l| l.starts_with("| `make payments STATE=…`"))
        .expect("the payments row of docs/operations.md");
    let cell = row
        .split("payments in a state: ")
        .nth(1)
        .unwrap_or_default();
    assert_eq!(code_spans(cell), states, "docs/operations.md: {row}");
}

/// The event types the console summarizes and the ones `docs/walkthroughs.md` lists are
/// `EventType::ALL` (the console may leave a type to its default summary, but names no type
/// the service does not send), and the document's `webhooks` show every type once.
#[test]
fn the_event_types_the_console_the_docs_and_the_document_name_are_the_stores() {
    use domain::store::events::EventType;
    let all: BTreeSet<&str> = EventType::ALL.iter().map(|t| t.as_str()).collect();
    let console = std::fs::read_to_string(root().join("console/app.js")).unwrap();
    let summary = console
        .split("function eventSummary(")
        .nth(1)
        .and_then(|rest| rest.split("\n}\n").next())
        .expect("eventSummary in console/app.js");
    let summarized: BTreeSet<&str> = summary
        .split("case '")
        .skip(1)
        .filter_map(|case| case.split('\'').next())
        .collect();
    assert!(summarized.len() >= 15, "{summarized:?}");
    let unknown: Vec<_> = summarized.difference(&all).collect();
    assert!(
        unknown.is_empty(),
        "the console summarizes unknown types {unknown:?}"
    );
    let walkthroughs = std::fs::read_to_string(root().join("docs/walkthroughs.md")).unwrap();
    let paragraph = walkthroughs
        .split("## What happened, as events")
        .nth(1)
        .and_then(|rest| rest.split("\n\n").nth(1))
        .expect("the events section of docs/walkthroughs.md");
    let listed: BTreeSet<&str> = code_spans(paragraph)
        .into_iter()
        .filter(|span| span.contains('.') && !span.contains(' '))
        .collect();
    assert_eq!(listed, all, "docs/walkthroughs.md's list of event types");
    let document = serde_json::to_value(faces::openapi::document()).unwrap();
    let webhooks: BTreeSet<&str> = document["webhooks"]
        .as_object()
        .expect("the document's webhooks")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(webhooks, all, "the document's webhooks");
}
