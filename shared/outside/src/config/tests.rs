//! The configuration's tests: every row read and every read a row, defaults as unset means,
//! the docs' table rendered from the rows, and each section's parsing.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::*;

fn config(pairs: &[(&str, &str)]) -> Result<Config, ConfigError> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Config::from_lookup(|k| map.get(k).cloned())
}

#[test]
fn defaults_and_token_sources() {
    let c = config(&[("TABLE_NAME", "t")]).unwrap();
    assert!(matches!(c.token, TokenSource::None));
    assert_eq!(c.upstream.base_url, "https://api.cherryservers.com/v1");
    assert_eq!(c.max_body_bytes, 65536);
    let c = config(&[("TABLE_NAME", "t"), ("UPSTREAM_TOKEN_PARAM", "/svc/token")]).unwrap();
    assert!(matches!(c.token, TokenSource::SsmParameter(ref p) if p == "/svc/token"));
    let c = config(&[("TABLE_NAME", "t"), ("UPSTREAM_TOKEN", "abc")]).unwrap();
    assert!(matches!(c.token, TokenSource::Value(_)));
    assert_eq!(format!("{:?}", c.token), "Value(Secret(***))");
}

#[test]
fn rates_and_markup_parse_and_bad_values_fail() {
    let c = config(&[
        ("TABLE_NAME", "t"),
        ("CURRENCY_RATES", "eur=1.16, GBP=1.3"),
        ("PRICE_MARKUP_PERCENT", "10"),
    ])
    .unwrap();
    assert_eq!(c.pricing.usd_rates["EUR"], Decimal::new(116, 2));
    assert_eq!(c.pricing.usd_rates["USD"], Decimal::ONE);
    assert_eq!(c.pricing.markup_percent, Decimal::TEN);
    assert!(config(&[]).is_err());
    assert!(config(&[("TABLE_NAME", "t"), ("CURRENCY_RATES", "EUR")]).is_err());
    assert!(config(&[("TABLE_NAME", "t"), ("CURRENCY_RATES", "EUR=-1")]).is_err());
    assert!(config(&[("TABLE_NAME", "t"), ("UPSTREAM_TIMEOUT_SECONDS", "x")]).is_err());
}

#[test]
fn sign_in_settings() {
    let c = config(&[
        ("TABLE_NAME", "t"),
        ("SIWE_DOMAINS", "App.Example.com, localhost:9000"),
    ])
    .unwrap();
    assert_eq!(c.sign_in.domains, ["app.example.com", "localhost:9000"]);
    assert_eq!(
        c.sign_in.uri_prefixes,
        ["https://app.example.com", "https://localhost:9000"]
    );
    assert_eq!(c.sign_in.chain_ids, [8453]);
    let c = config(&[
        ("TABLE_NAME", "t"),
        ("SIWE_URI_PREFIXES", "http://127.0.0.1:9000/"),
        ("SIWE_CHAIN_IDS", "8453,84532"),
        ("WEB_ORIGIN", "http://localhost:5173/"),
    ])
    .unwrap();
    assert_eq!(c.sign_in.uri_prefixes, ["http://127.0.0.1:9000"]);
    assert_eq!(c.sign_in.chain_ids, [8453, 84532]);
    assert_eq!(
        c.sign_in.web_origin.as_deref(),
        Some("http://localhost:5173")
    );
    assert!(config(&[("TABLE_NAME", "t"), ("SIWE_CHAIN_IDS", "base")]).is_err());
}

#[test]
fn the_web_origin_is_one_https_origin_or_a_local_http_one() {
    let origin = |value: &str| {
        config(&[("TABLE_NAME", "t"), ("WEB_ORIGIN", value)])
            .map(|c| c.sign_in.web_origin.unwrap_or_default())
            .map_err(|e| e.name)
    };
    assert_eq!(
        origin("https://App.Example.com").unwrap(),
        "https://app.example.com"
    );
    assert_eq!(
        origin("https://app.example.com:443").unwrap(),
        "https://app.example.com"
    );
    assert_eq!(
        origin("https://app.example.com:8443").unwrap(),
        "https://app.example.com:8443"
    );
    assert_eq!(
        origin("http://127.0.0.1:5173").unwrap(),
        "http://127.0.0.1:5173"
    );
    for bad in [
        "null",
        "*",
        "https://*.example.com",
        "http://app.example.com",
        "https://app.example.com/console",
        "https://app.example.com?x=1",
        "https://user@app.example.com",
        "app.example.com",
        "ftp://app.example.com",
        "https://a.example, https://b.example",
    ] {
        assert_eq!(origin(bad), Err("WEB_ORIGIN"), "{bad}");
    }
}

#[test]
fn caps_and_the_new_limits_have_defaults_and_refuse_zero() {
    let c = config(&[("TABLE_NAME", "t")]).unwrap();
    assert_eq!((c.caps.waits, c.caps.keys, c.caps.sandboxes), (4, 50, 500));
    let limits = c.rate_limits;
    assert_eq!(limits.owner.map(|l| l.window_seconds()), Some(5));
    assert_eq!(limits.address.map(|l| l.burst), Some(200));
    assert_eq!(limits.failed_auth.map(|l| l.window_seconds()), Some(60));
    assert!(config(&[("TABLE_NAME", "t"), ("MAX_WAITS_PER_OWNER", "0")]).is_err());
    // No one subject holds more than a third of a pool: an owner's paid slots, an
    // address's on-chain sign-in checks.
    let (c, pools) = (c.caps, "must be at least three times");
    assert_eq!((c.paid_in_flight, c.paid_pool), (3, 9));
    assert_eq!((c.sign_ins_in_flight, c.sign_in_pool), (4, 12));
    for (name, value) in [
        ("MAX_PAID_IN_FLIGHT", "8"),
        ("MAX_PAID_IN_FLIGHT_PER_OWNER", "4"),
        ("MAX_SIGN_INS_IN_FLIGHT", "11"),
        ("MAX_SIGN_INS_IN_FLIGHT_PER_ADDRESS", "5"),
    ] {
        let err = config(&[("TABLE_NAME", "t"), (name, value)]).unwrap_err();
        assert!(err.message.contains(pools), "{name}={value}: {err:?}");
    }
    let raised = [
        ("MAX_PAID_IN_FLIGHT_PER_OWNER", "5"),
        ("MAX_PAID_IN_FLIGHT", "15"),
    ];
    assert_eq!(
        config(&[&[("TABLE_NAME", "t")], &raised[..]].concat())
            .unwrap()
            .caps
            .paid_pool,
        15
    );
    // The local webhook receiver: on a laptop, never in Lambda.
    let local = [("TABLE_NAME", "t"), ("WEBHOOK_LOCAL_RECEIVER", "1")];
    assert!(config(&local).unwrap().webhook_local_receiver);
    let lambda = [
        ("TABLE_NAME", "t"),
        ("WEBHOOK_LOCAL_RECEIVER", "1"),
        ("LAMBDA_TASK_ROOT", "/var/task"),
    ];
    let err = config(&lambda).unwrap_err();
    assert_eq!(err.name, "WEBHOOK_LOCAL_RECEIVER");
    assert!(
        !config(&[("TABLE_NAME", "t"), ("LAMBDA_TASK_ROOT", "/var/task")])
            .unwrap()
            .webhook_local_receiver
    );
}

#[test]
fn payment_settings() {
    use crate::x402::Network;
    use crate::x402::facilitator::FacilitatorAuth;
    let c = config(&[("TABLE_NAME", "t")]).unwrap();
    assert_eq!(c.payments.network, Network::BaseSepolia);
    assert_eq!(c.payments.facilitator_url, "https://x402.org/facilitator");
    assert!(c.payments.pay_to.is_none());
    assert!(matches!(c.payments.facilitator_auth, FacilitatorAuth::None));
    let c = config(&[
        ("TABLE_NAME", "t"),
        ("X402_NETWORK", "base"),
        ("X402_PAY_TO", "0x209693Bc6afc0C5328bA36FaF03C514EF312287C"),
        ("CDP_API_KEY_ID", "id"),
        ("CDP_API_KEY_SECRET", "s"),
    ])
    .unwrap();
    assert_eq!(c.payments.network, Network::Base);
    assert_eq!(
        c.payments.facilitator_url,
        "https://api.cdp.coinbase.com/platform/v2/x402"
    );
    assert_eq!(
        c.payments.pay_to.as_deref(),
        Some("0x209693bc6afc0c5328ba36faf03c514ef312287c")
    );
    assert!(matches!(
        c.payments.facilitator_auth,
        FacilitatorAuth::Cdp { .. }
    ));
    let c = config(&[
        ("TABLE_NAME", "t"),
        ("FACILITATOR_AUTH_HEADER", "X-Api-Key: abc"),
    ])
    .unwrap();
    let FacilitatorAuth::Header { name, .. } = &c.payments.facilitator_auth else {
        panic!("a header: {:?}", c.payments.facilitator_auth);
    };
    assert_eq!(name, "X-Api-Key");
    assert!(config(&[("TABLE_NAME", "t"), ("X402_NETWORK", "ethereum")]).is_err());
    assert!(config(&[("TABLE_NAME", "t"), ("X402_PAY_TO", "treasury")]).is_err());
}

/// The names [`Config::from_lookup`] asks for.
fn asked() -> BTreeSet<String> {
    let asked = RefCell::new(BTreeSet::new());
    Config::from_lookup(|name| {
        asked.borrow_mut().insert(name.to_owned());
        (name == "TABLE_NAME").then(|| "t".to_owned())
    })
    .unwrap();
    asked.into_inner()
}

/// The names given as literals to `env::var` or `env::var_os` in the sources under `dir`.
fn env_reads(dir: &Path, found: &mut BTreeSet<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            env_reads(&path, found);
            continue;
        }
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for call in ["env::var(\"", "env::var_os(\""] {
            for (at, _) in text.match_indices(call) {
                let rest = &text[at + call.len()..];
                found.insert(rest[..rest.find('"').unwrap()].to_owned());
            }
        }
    }
}

/// Read by the library, but not settings: Lambda sets the first, this module's test the
/// second.
const NOT_SETTINGS: [&str; 2] = ["AWS_LAMBDA_FUNCTION_NAME", "UPDATE_DOCS"];

#[test]
fn every_variable_the_library_reads_is_a_row_and_every_row_is_read() {
    let mut read = asked();
    // Every crate of the library below the faces: this one and its siblings in `shared/`.
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for src in ["base/src", "outside/src", "store/src", "domain/src"] {
        env_reads(&crates.join(src), &mut read);
    }
    for name in NOT_SETTINGS {
        read.remove(name);
    }
    let rows: BTreeSet<String> = VARIABLES
        .iter()
        .flat_map(|v| v.names.iter().map(|n| (*n).to_owned()))
        .collect();
    let unlisted: Vec<_> = read.difference(&rows).collect();
    let unread: Vec<_> = rows.difference(&read).collect();
    assert!(
        unlisted.is_empty() && unread.is_empty(),
        "read but not in VARIABLES: {unlisted:?}; in VARIABLES but never read: {unread:?}"
    );
    let names: Vec<_> = VARIABLES.iter().flat_map(|v| v.names.iter()).collect();
    assert_eq!(names.len(), rows.len(), "a name is in two rows");
}

#[test]
fn every_default_in_the_table_is_what_unset_means() {
    let asked = asked();
    let unset = format!("{:?}", config(&[("TABLE_NAME", "t")]).unwrap());
    for variable in VARIABLES.iter().filter(|v| !v.default.is_empty()) {
        assert_eq!(variable.names.len(), variable.default.len(), "{variable:?}");
        // Read outside the parser (`metrics.rs`): not a field of `Config`.
        if !variable.names.iter().all(|n| asked.contains(*n)) {
            continue;
        }
        let mut pairs = vec![("TABLE_NAME", "t")];
        pairs.extend(
            variable
                .names
                .iter()
                .copied()
                .zip(variable.default.iter().copied()),
        );
        let set = format!("{:?}", config(&pairs).unwrap());
        assert_eq!(set, unset, "{:?}: the table's default", variable.names);
    }
}

/// `docs/configuration.md`.
fn configuration_docs() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/configuration.md")
}

/// The docs' table is [`table`]: else this fails, printing the table to paste between the
/// markers, or, with `UPDATE_DOCS=1`, writes it there.
#[test]
fn the_docs_table_is_rendered_from_the_variables() {
    const BEGIN: &str = "<!-- config:begin -->\n";
    const END: &str = "<!-- config:end -->";
    let path = configuration_docs();
    let text = std::fs::read_to_string(&path).unwrap();
    let start = text.find(BEGIN).expect("a `<!-- config:begin -->` line") + BEGIN.len();
    let end = start
        + text[start..]
            .find(END)
            .expect("a `<!-- config:end -->` line");
    let expected = table();
    if text[start..end] == expected {
        return;
    }
    if std::env::var_os("UPDATE_DOCS").is_some_and(|v| v == "1") {
        let updated = format!("{}{expected}{}", &text[..start], &text[end..]);
        std::fs::write(&path, updated).unwrap();
        return;
    }
    panic!(
        "docs/configuration.md's table is not the one VARIABLES renders: run \
         `UPDATE_DOCS=1 cargo test -p shared --lib config`, or paste between the markers:\n\n\
         {expected}"
    );
}

#[test]
fn oauth_redirect_schemes_are_an_allow_list_of_schemes_or_scheme_and_host() {
    let c = config(&[("TABLE_NAME", "t")]).unwrap();
    let cursor = RedirectScheme {
        scheme: "cursor".into(),
        host: Some("anysphere.cursor-mcp".into()),
    };
    assert_eq!(c.oauth.redirect_schemes, std::slice::from_ref(&cursor));
    assert_eq!(cursor.to_string(), REDIRECT_SCHEMES);
    assert_eq!(
        c.oauth.registrations.map(|l| (l.burst, l.window_seconds())),
        Some((300, 60))
    );
    let schemes = |value: &str| {
        config(&[("TABLE_NAME", "t"), ("OAUTH_REDIRECT_SCHEMES", value)])
            .map(|c| c.oauth.redirect_schemes)
            .map_err(|e| e.name)
    };
    let app = RedirectScheme {
        scheme: "com.example.app".into(),
        host: None,
    };
    assert_eq!(
        schemes("Com.Example.App:, cursor://anysphere.cursor-mcp").unwrap(),
        [app, cursor]
    );
    assert_eq!(schemes("none").unwrap(), []);
    for bad in [
        "https",
        "http://localhost",
        "1app",
        "my app",
        "cursor://a/b",
        "x://",
    ] {
        assert_eq!(schemes(bad), Err("OAUTH_REDIRECT_SCHEMES"), "{bad}");
    }
}
