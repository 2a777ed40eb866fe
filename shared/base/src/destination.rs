//! Where a server-side request may go when a user chose the URL (a webhook endpoint; issue 20,
//! point 5): `https` only; the name resolved and every address it resolves to checked — loopback,
//! private, link-local (and the instance metadata address), shared (CGNAT), multicast,
//! broadcast, reserved, documentation and benchmarking ranges and their IPv6 equivalents
//! (unique local, link-local, multicast, IPv4-mapped, NAT64 and 6to4 forms of a refused IPv4
//! address) are refused, at registration and again before every delivery, which then connects
//! to the addresses it checked (so a name cannot resolve outward for the check and inward for
//! the connection). Only port 443 and the unprivileged ports (1024–65535) are called, so that a
//! delivery's `lastError` cannot map another host's services. The one exception is a
//! development setting that lets `http://127.0.0.1:<port>` through for a local receiver.
//!
//! Follows OWASP's SSRF prevention cheat sheet (application layer: allow-list of schemes,
//! resolve and validate every address, no redirects) and the IANA special-purpose address
//! registries (RFC 6890).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex};

/// The longest URL accepted, in bytes.
pub const MAX_URL_BYTES: usize = 2048;

/// Why a destination is refused: the text says what to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Not a URL this service calls (scheme, credentials, fragment, length, no host).
    #[error("{0}")]
    Url(String),
    /// The name does not resolve.
    #[error("{host} does not resolve")]
    Unresolved {
        /// The URL's host.
        host: String,
    },
    /// The name (or the literal) is, or resolves to, an address of a refused class.
    #[error("{host} resolves to {address}, a {class} address: only public addresses are called")]
    Inward {
        /// The URL's host.
        host: String,
        /// The refused address.
        address: IpAddr,
        /// Its class, e.g. `loopback`, `private`, `instance metadata`.
        class: &'static str,
    },
}

/// A URL checked for its form (not yet resolved): `https://` (or, when `local_receiver` is
/// allowed, `http://127.0.0.1:<port>`), a host, no credentials, no fragment, at most
/// [`MAX_URL_BYTES`].
///
/// Errors: [`Refusal::Url`] saying what is wrong; [`Refusal::Inward`] for an IP literal of a
/// refused class.
pub fn parse(text: &str, local_receiver: bool) -> Result<url::Url, Refusal> {
    let refuse = |why: &str| Err(Refusal::Url(why.to_owned()));
    if text.len() > MAX_URL_BYTES {
        return refuse("is longer than 2048 bytes");
    }
    let url = url::Url::parse(text).map_err(|e| Refusal::Url(format!("is not a URL: {e}")))?;
    if !url.username().is_empty() || url.password().is_some() {
        return refuse("must not carry credentials");
    }
    if url.fragment().is_some() {
        return refuse("must not have a fragment");
    }
    let Some(host) = url.host() else {
        return refuse("must name a host");
    };
    if local_receiver && url.scheme() == "http" && is_local_receiver(&url) {
        return Ok(url);
    }
    if url.scheme() != "https" {
        return refuse("must be an https:// URL");
    }
    if let Some(port) = url.port().filter(|p| !port_allowed(*p)) {
        return Err(Refusal::Url(format!(
            "port {port} is not called: use 443 or a port from 1024 to 65535"
        )));
    }
    let literal = match host {
        url::Host::Ipv4(v4) => Some(IpAddr::V4(v4)),
        url::Host::Ipv6(v6) => Some(IpAddr::V6(v6)),
        url::Host::Domain(_) => None,
    };
    if let Some(address) = literal
        && let Some(class) = refused_class(address)
    {
        return Err(Refusal::Inward {
            host: host.to_string(),
            address,
            class,
        });
    }
    Ok(url)
}

/// Whether `port` may be called: 443, or an unprivileged port (1024–65535).
pub fn port_allowed(port: u16) -> bool {
    port == 443 || port >= 1024
}

/// Whether `url` is the development receiver: `http://127.0.0.1:<port>` with a port.
fn is_local_receiver(url: &url::Url) -> bool {
    url.host() == Some(url::Host::Ipv4(Ipv4Addr::LOCALHOST)) && url.port().is_some()
}

/// The longest a name may take to resolve before it counts as unresolved.
pub const RESOLVE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

/// How names are resolved: the system's resolver, or (tests, local stacks) a fixed table of
/// answers that a test changes to make a name resolve elsewhere later — DNS rebinding.
#[derive(Debug, Clone, Default)]
pub struct Resolver {
    fixed: Option<Arc<Mutex<Answers>>>,
    /// How long a fixed resolver takes to answer, milliseconds (a slow DNS server).
    slow: Arc<std::sync::atomic::AtomicU64>,
}

/// A fixed resolver's table: a name (lowercase) → its addresses.
type Answers = HashMap<String, Vec<IpAddr>>;

impl Resolver {
    /// The system's resolver (`getaddrinfo`, through tokio).
    pub fn system() -> Resolver {
        Resolver::default()
    }

    /// A resolver answering only the names given to [`Resolver::answer`] (a test double of DNS:
    /// no name resolves until it is answered).
    pub fn fixed() -> Resolver {
        Resolver {
            fixed: Some(Arc::default()),
            ..Resolver::default()
        }
    }

    /// From now on a fixed resolver takes `delay` to answer (the system's ignores it).
    pub fn answer_after(&self, delay: std::time::Duration) {
        let millis = delay.as_millis() as u64;
        self.slow.store(millis, std::sync::atomic::Ordering::SeqCst);
    }

    /// From now on `name` resolves to `addresses` (a fixed resolver only; the system's ignores
    /// it).
    pub fn answer(&self, name: &str, addresses: &[IpAddr]) {
        if let Some(fixed) = &self.fixed {
            let mut table = fixed
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            table.insert(name.to_ascii_lowercase(), addresses.to_vec());
        }
    }

    /// The addresses to connect to for `url` (checked by [`parse`]): every address its host
    /// resolves to (within [`RESOLVE_TIMEOUT`]), each checked. A development receiver
    /// (`local_receiver`) is its own address.
    ///
    /// Errors: [`Refusal::Unresolved`]; [`Refusal::Inward`] naming the first refused address
    /// (one refused address refuses the name: a resolver may answer any of them next time).
    pub async fn resolve(
        &self,
        url: &url::Url,
        local_receiver: bool,
    ) -> Result<Vec<SocketAddr>, Refusal> {
        let host = url.host_str().unwrap_or_default().to_owned();
        let port = url.port_or_known_default().unwrap_or(443);
        if local_receiver && url.scheme() == "http" && is_local_receiver(url) {
            return Ok(vec![SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port)]);
        }
        let unresolved = || Refusal::Unresolved { host: host.clone() };
        let found: Vec<SocketAddr> = match (url.host(), &self.fixed) {
            (Some(url::Host::Ipv4(v4)), _) => vec![SocketAddr::new(IpAddr::V4(v4), port)],
            (Some(url::Host::Ipv6(v6)), _) => vec![SocketAddr::new(IpAddr::V6(v6), port)],
            (_, Some(fixed)) => {
                let slow = self.slow.load(std::sync::atomic::Ordering::SeqCst);
                tokio::time::sleep(std::time::Duration::from_millis(slow)).await;
                let table = fixed
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
                let answers = table.get(&host.to_ascii_lowercase()).cloned();
                let answers = answers.ok_or_else(unresolved)?;
                answers
                    .into_iter()
                    .map(|ip| SocketAddr::new(ip, port))
                    .collect()
            }
            (_, None) => {
                let lookup = tokio::net::lookup_host((host.as_str(), port));
                tokio::time::timeout(RESOLVE_TIMEOUT, lookup)
                    .await
                    .map_err(|_| unresolved())?
                    .map_err(|_| unresolved())?
                    .collect()
            }
        };
        checked(&host, found)
    }
}

/// `addresses` (what `host` resolved to) when every one is public.
///
/// Errors: [`Refusal::Unresolved`] for none; [`Refusal::Inward`] for the first refused one.
pub fn checked(host: &str, addresses: Vec<SocketAddr>) -> Result<Vec<SocketAddr>, Refusal> {
    if addresses.is_empty() {
        return Err(Refusal::Unresolved {
            host: host.to_owned(),
        });
    }
    for address in &addresses {
        if let Some(class) = refused_class(address.ip()) {
            return Err(Refusal::Inward {
                host: host.to_owned(),
                address: address.ip(),
                class,
            });
        }
    }
    Ok(addresses)
}

/// The class of a refused address, or `None` for a public one.
pub fn refused_class(address: IpAddr) -> Option<&'static str> {
    match address {
        IpAddr::V4(v4) => refused_v4(v4),
        IpAddr::V6(v6) => refused_v6(v6),
    }
}

fn refused_v4(v4: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = v4.octets();
    let class = match (a, b, c) {
        _ if v4 == Ipv4Addr::new(169, 254, 169, 254) => "instance metadata",
        _ if v4.is_loopback() => "loopback",
        _ if v4.is_private() => "private",
        _ if v4.is_link_local() => "link-local",
        _ if v4.is_multicast() => "multicast",
        _ if v4.is_broadcast() => "broadcast",
        _ if v4.is_documentation() => "documentation",
        (0, _, _) => "this-network",
        (100, 64..=127, _) => "shared (CGNAT)",
        (192, 0, 0) => "IETF protocol",
        (192, 88, 99) => "6to4 relay anycast (deprecated)",
        (198, 18..=19, _) => "benchmarking",
        (240..=255, _, _) => "reserved",
        _ => return None,
    };
    Some(class)
}

fn refused_v6(v6: Ipv6Addr) -> Option<&'static str> {
    let segments = v6.segments();
    let class = match segments {
        // IPv4-mapped (::ffff:0:0/96) and IPv4-translated (::ffff:0:0:0/96, SIIT): an IPv4
        // address in IPv6 clothes, which a socket may reach as the IPv4 one behind every check
        // made of it as IPv6. A public endpoint is never named so.
        [0, 0, 0, 0, 0, 0xffff, _, _] => "IPv4-mapped",
        [0, 0, 0, 0, 0xffff, 0, _, _] => "IPv4-translated",
        _ if v6.is_loopback() => "loopback",
        _ if v6.is_unspecified() => "unspecified",
        // fd00:ec2::254, the instance metadata service over IPv6, is unique local too.
        _ if v6 == Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254) => "instance metadata",
        _ if v6.is_unique_local() => "unique local (private)",
        _ if v6.is_unicast_link_local() => "link-local",
        _ if v6.is_multicast() => "multicast",
        // NAT64 (64:ff9b::/96) and 6to4 (2002::/16) carry an IPv4 address.
        [0x64, 0xff9b, 0, 0, 0, 0, hi, lo] => return refused_v4(embedded(hi, lo)),
        // Local-use NAT64 (RFC 8215): a network's own translator.
        [0x64, 0xff9b, 1, ..] => "local-use NAT64",
        // Teredo (2001::/32) tunnels to an IPv4 address it hides.
        [0x2001, 0, ..] => "Teredo",
        // Site-local (fec0::/10, deprecated by RFC 3879): private in practice.
        [s, ..] if s & 0xffc0 == 0xfec0 => "site-local (deprecated)",
        [0x2002, hi, lo, ..] => return refused_v4(embedded(hi, lo)),
        [0x2001, 0xdb8, ..] => "documentation",
        [0x100, 0, 0, 0, ..] => "discard",
        [0, 0, 0, 0, 0, 0, _, _] => "IPv4-compatible (deprecated)",
        _ => return None,
    };
    Some(class)
}

/// The IPv4 address in two IPv6 segments.
fn embedded(hi: u16, lo: u16) -> Ipv4Addr {
    let [a, b] = hi.to_be_bytes();
    let [c, d] = lo.to_be_bytes();
    Ipv4Addr::new(a, b, c, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(text: &str) -> Option<&'static str> {
        refused_class(text.parse().unwrap())
    }

    #[test]
    fn every_inward_class_is_refused() {
        for (address, expected) in [
            ("127.0.0.1", "loopback"),
            ("127.255.0.9", "loopback"),
            ("10.1.2.3", "private"),
            ("172.16.0.1", "private"),
            ("172.31.255.255", "private"),
            ("192.168.1.1", "private"),
            ("169.254.169.254", "instance metadata"),
            ("169.254.10.1", "link-local"),
            ("100.64.0.1", "shared (CGNAT)"),
            ("0.0.0.0", "this-network"),
            ("224.0.0.251", "multicast"),
            ("255.255.255.255", "broadcast"),
            ("240.0.0.1", "reserved"),
            ("192.0.2.10", "documentation"),
            ("198.18.0.1", "benchmarking"),
            ("192.0.0.170", "IETF protocol"),
            ("::1", "loopback"),
            ("::", "unspecified"),
            ("fd00:ec2::254", "instance metadata"),
            ("fc00::1", "unique local (private)"),
            ("fe80::1", "link-local"),
            ("ff02::1", "multicast"),
            ("::ffff:127.0.0.1", "IPv4-mapped"),
            ("::ffff:169.254.169.254", "IPv4-mapped"),
            ("::ffff:8.8.8.8", "IPv4-mapped"),
            ("::ffff:0:7f00:1", "IPv4-translated"),
            ("::ffff:0:808:808", "IPv4-translated"),
            ("64:ff9b::a00:1", "private"),
            ("2002:c0a8:101::1", "private"),
            ("2001:db8::1", "documentation"),
            ("::127.0.0.1", "IPv4-compatible (deprecated)"),
            ("2001::1", "Teredo"),
            ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "Teredo"),
            ("fec0::1", "site-local (deprecated)"),
            ("feff::1", "site-local (deprecated)"),
            ("64:ff9b:1::a", "local-use NAT64"),
            ("192.88.99.1", "6to4 relay anycast (deprecated)"),
        ] {
            assert_eq!(class(address), Some(expected), "{address}");
        }
    }

    #[test]
    fn public_addresses_pass() {
        for address in [
            "1.1.1.1",
            "8.8.8.8",
            "172.32.0.1",
            "100.128.0.1",
            "2606:4700:4700::1111",
            "64:ff9b::808:808",
            // Neighbours of the ranges refused.
            "2001:4860:4860::8888",
            "192.88.98.1",
            "64:ff9b:2::1",
        ] {
            assert_eq!(class(address), None, "{address}");
        }
    }

    #[test]
    fn only_https_urls_without_credentials_are_destinations() {
        assert!(parse("https://hooks.example.com/x?y=1", false).is_ok());
        for (text, says) in [
            ("http://hooks.example.com/", "https"),
            ("ftp://hooks.example.com/", "https"),
            ("https://user:pw@hooks.example.com/", "credentials"),
            ("https://hooks.example.com/#frag", "fragment"),
            ("not a url", "not a URL"),
            ("http://127.0.0.1:9999/", "https"),
        ] {
            let refusal = parse(text, false).unwrap_err().to_string();
            assert!(refusal.contains(says), "{text}: {refusal}");
        }
        // Port 443 and the unprivileged ports; not another host's services.
        assert!(parse("https://hooks.example.com:443/", false).is_ok());
        assert!(parse("https://hooks.example.com:8443/", false).is_ok());
        for text in [
            "https://hooks.example.com:22/",
            "https://hooks.example.com:25/",
        ] {
            let refusal = parse(text, false).unwrap_err().to_string();
            assert!(refusal.contains("is not called"), "{text}: {refusal}");
        }
        let long = format!("https://example.com/{}", "a".repeat(MAX_URL_BYTES));
        assert!(parse(&long, false).is_err());
        // IP literals are checked as they stand.
        for text in [
            "https://127.0.0.1/",
            "https://[::1]/",
            "https://169.254.169.254/latest",
        ] {
            assert!(
                matches!(parse(text, false), Err(Refusal::Inward { .. })),
                "{text}"
            );
        }
        // The development receiver, when allowed: http, 127.0.0.1, a port; nothing else.
        assert!(parse("http://127.0.0.1:9999/hook", true).is_ok());
        assert!(parse("http://127.0.0.1/hook", true).is_err());
        assert!(parse("http://localhost:9999/hook", true).is_err());
        assert!(parse("http://10.0.0.1:9999/hook", true).is_err());
    }

    #[test]
    fn one_inward_answer_refuses_the_name() {
        let public: SocketAddr = "93.184.215.14:443".parse().unwrap();
        let inward: SocketAddr = "10.0.0.7:443".parse().unwrap();
        assert_eq!(checked("h", vec![public]), Ok(vec![public]));
        assert!(matches!(
            checked("h", vec![public, inward]),
            Err(Refusal::Inward {
                class: "private",
                ..
            })
        ));
        assert!(matches!(
            checked("h", vec![]),
            Err(Refusal::Unresolved { .. })
        ));
    }

    #[tokio::test]
    async fn names_are_resolved_and_checked() {
        let system = Resolver::system();
        // `localhost` resolves inward on every machine.
        let url = parse("https://localhost:8443/hook", false).unwrap();
        assert!(matches!(
            system.resolve(&url, false).await,
            Err(Refusal::Inward {
                class: "loopback",
                ..
            })
        ));
        let local = parse("http://127.0.0.1:9999/hook", true).unwrap();
        assert_eq!(
            system.resolve(&local, true).await.unwrap(),
            vec!["127.0.0.1:9999".parse().unwrap()]
        );
        let unknown = parse("https://no-such-name.invalid/", false).unwrap();
        assert!(system.resolve(&unknown, false).await.is_err());
    }

    #[tokio::test]
    async fn a_name_is_checked_again_when_it_resolves_elsewhere() {
        let dns = Resolver::fixed();
        let url = parse("https://hooks.example.com/in", false).unwrap();
        assert!(matches!(
            dns.resolve(&url, false).await,
            Err(Refusal::Unresolved { .. })
        ));
        dns.answer("hooks.example.com", &["93.184.215.14".parse().unwrap()]);
        assert_eq!(
            dns.resolve(&url, false).await.unwrap(),
            vec!["93.184.215.14:443".parse().unwrap()]
        );
        dns.answer("hooks.example.com", &["10.0.0.7".parse().unwrap()]);
        assert!(matches!(
            dns.resolve(&url, false).await,
            Err(Refusal::Inward {
                class: "private",
                ..
            })
        ));
        // An IP literal is its own answer; the local receiver only with the setting.
        let literal = parse("https://[2606:4700::1111]/", false).unwrap();
        assert!(dns.resolve(&literal, false).await.is_ok());
        let local = url::Url::parse("http://127.0.0.1:9/").unwrap();
        assert!(dns.resolve(&local, false).await.is_err());
    }
}
