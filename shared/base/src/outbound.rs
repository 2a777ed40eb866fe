//! The one HTTP client of a function's outbound calls — the provider (`outside::upstream`), the
//! x402 facilitator and the payment network's node (`outside::x402`) — built on the first call
//! that needs it, never at cold start (the cold-start issue, point 1): a function that never
//! calls out (`status`, `auth`, `keys`, the listings) never loads TLS roots.
//!
//! Every call is sent by [`send`] (which a test may gate: [`install_gate`]) and sets its own
//! timeout (`RequestBuilder::timeout`); the client refuses redirects (a
//! redirect would carry a request and its credentials elsewhere) and connects within
//! [`CONNECT_TIMEOUT`]. TLS roots: Mozilla's, compiled in (`webpki-root-certs`), measured by
//! `make bench` against the platform verifier that loads the system store on every client build.
//! The AWS SDK's HTTP client ([`sdk_http_client`]) trusts the same roots: by default it reads
//! the system store when a client is built, at cold start.

use std::any::Any;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// The longest a connection may take to open, whatever the call's own timeout.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The process's client, or why it could not be built.
static CLIENT: OnceLock<Result<reqwest::Client, String>> = OnceLock::new();

/// The client every outbound call of this process uses, built on the first call.
///
/// Errors: the TLS setup failed (the message of `reqwest`'s builder); every later call gets the
/// same error.
pub fn client() -> Result<&'static reqwest::Client, String> {
    CLIENT
        .get_or_init(|| build(Roots::CompiledIn).map_err(|e| e.to_string()))
        .as_ref()
        .map_err(Clone::clone)
}

/// What a test runs before every outbound call of [`send`], given the request: a future whose
/// output is held until the call's answer (its status and headers) is in. The seeded simulation
/// makes each call of one of its actors a point of its schedule (its turn taken before the
/// call, held until the answer), so that the provider's, the facilitator's and the node's calls
/// interleave with the rest as the seed says; `make bench` times each call by where it goes.
pub type Gate = Box<
    dyn Fn(&reqwest::Request) -> Pin<Box<dyn Future<Output = Box<dyn Any + Send>> + Send>>
        + Send
        + Sync,
>;

/// The process's gate: none in production.
static GATE: OnceLock<Gate> = OnceLock::new();

/// Installs `gate` before every outbound call of this process (a test's; once: a later gate is
/// ignored, so install one that decides per call).
pub fn install_gate(gate: Gate) {
    let _ = GATE.set(gate);
}

/// Sends `request` (built on [`client`]), through the test's gate if one is installed
/// ([`install_gate`]).
///
/// Errors: `reqwest`'s, as `RequestBuilder::send`.
pub async fn send(request: reqwest::RequestBuilder) -> Result<reqwest::Response, reqwest::Error> {
    let Some(gate) = GATE.get() else {
        return request.send().await;
    };
    let (client, request) = request.build_split();
    let request = request?;
    let _held = gate(&request).await;
    client.execute(request).await
}

/// Where a client's TLS trust anchors come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Roots {
    /// Mozilla's roots compiled into the binary (`webpki-root-certs`): nothing read.
    CompiledIn,
    /// The platform verifier (`rustls-platform-verifier`, reqwest's default): on Linux it reads
    /// and parses the system store at every client build.
    Platform,
}

/// A client as [`client`] builds it, with trust anchors from `roots` (`make bench` times both).
///
/// Errors: the TLS setup failed.
pub fn build(roots: Roots) -> Result<reqwest::Client, reqwest::Error> {
    // Never a proxy the environment names (`HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY`): the
    // provider's token and the payment network's answers go to the hosts configured, only.
    let builder = reqwest::Client::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .user_agent(concat!("svc-cloud-api/", env!("CARGO_PKG_VERSION")));
    match roots {
        Roots::Platform => builder.build(),
        Roots::CompiledIn => builder.use_preconfigured_tls(compiled_in()).build(),
    }
}

/// A client for calls to a destination a user chose (a webhook endpoint): it connects to
/// `addresses` for `host` and nowhere else (the addresses `crate::destination` checked, so a
/// name cannot resolve elsewhere between the check and the connection), refuses redirects, and
/// gives up on a call after `timeout`. Built per delivery; the TLS configuration is built once.
///
/// Errors: the TLS setup failed (the message of `reqwest`'s builder).
pub fn pinned(
    host: &str,
    addresses: &[std::net::SocketAddr],
    timeout: Duration,
) -> Result<reqwest::Client, String> {
    static TLS: OnceLock<rustls::ClientConfig> = OnceLock::new();
    reqwest::Client::builder()
        .connect_timeout(CONNECT_TIMEOUT.min(timeout))
        .timeout(timeout)
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .resolve_to_addrs(host, addresses)
        .user_agent(concat!(
            "svc-cloud-api-webhooks/",
            env!("CARGO_PKG_VERSION")
        ))
        .use_preconfigured_tls(TLS.get_or_init(compiled_in).clone())
        .build()
        .map_err(|e| e.to_string())
}

/// A rustls configuration trusting Mozilla's roots as compiled into `webpki-root-certs`, with
/// the aws-lc-rs provider reqwest uses, HTTP/1.1 only (the client has no HTTP/2).
fn compiled_in() -> rustls::ClientConfig {
    let mut roots = rustls::RootCertStore::empty();
    roots.add_parsable_certificates(webpki_root_certs::TLS_SERVER_ROOT_CERTS.iter().cloned());
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("aws-lc-rs supports the default protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    config
}

/// The AWS SDK's HTTP client (DynamoDB, SSM) as its default one — hyper, rustls with aws-lc-rs —
/// but trusting the compiled-in roots instead of reading the system store when the SDK client is
/// built at cold start.
///
/// Errors: a compiled-in root the SDK cannot take (its message).
pub fn sdk_http_client() -> Result<aws_sdk_dynamodb::config::SharedHttpClient, String> {
    use aws_smithy_http_client::tls::{self, rustls_provider::CryptoMode};
    let mut store = tls::TrustStore::empty().with_native_roots(false);
    for cert in webpki_root_certs::TLS_SERVER_ROOT_CERTS {
        store.add_pem_certificate(pem::encode(&pem::Pem::new("CERTIFICATE", cert.to_vec())));
    }
    let context = tls::TlsContext::builder()
        .with_trust_store(store)
        .build()
        .map_err(|e| e.to_string())?;
    Ok(aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(CryptoMode::AwsLc))
        .tls_context(context)
        .build_https())
}
