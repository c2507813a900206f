//! The SSRF guard for job types that take a URL. A pipeline config is written by many
//! teams; without a guard, `url: http://169.254.169.254/...` would let any of them read the
//! processor's cloud credentials. Loopback, link-local, unspecified, cloud metadata,
//! 192.0.0.0/24 and NAT64 addresses are refused unless an operator allows them
//! (`run --allow-target CIDR`).
//!
//! The check runs where addresses are known: on IP literals in the URL (and in redirects),
//! and inside the HTTP client's resolver, so a name that resolves to a refused address, or
//! re-resolves to one later (DNS rebinding), is refused too. The resolver only sees the
//! target's name when the client connects to it itself, so the client ignores
//! `HTTP(S)_PROXY`/`ALL_PROXY`: a proxy is explicit configuration (`run --job-proxy`).
//! Redirects stay on the request's host: custom headers (API keys) and bodies are never
//! carried to another one.
//!
//! `kafka` jobs publish with the processor's own producer and principal, so the guard also
//! says which topics they may write ([`KafkaTopics`]): never Sluice's own, under whatever
//! prefix, and only those an operator lists when it lists some (`run --kafka-job-topic`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use ipnet::IpNet;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::{Method, RequestBuilder, Url};

use super::CallError;

/// Which addresses job requests may reach.
#[derive(Debug, Clone, Default)]
pub struct Guard {
    allowed: Vec<IpNet>,
    kafka: KafkaTopics,
}

/// The topics `kafka` jobs may publish to.
#[derive(Debug, Clone, Default)]
pub struct KafkaTopics {
    /// The deployment's own topics (with its prefix): never.
    pub own: Vec<String>,
    /// Patterns (`*` any run of characters) a topic must match; empty: any other topic.
    pub allowed: Vec<String>,
}

impl KafkaTopics {
    /// Why a job may not publish to `topic`, if it may not.
    pub fn refusal(&self, topic: &str) -> Option<String> {
        if self.own.iter().any(|own| own == topic) {
            return Some(format!(
                "{topic:?} is one of Sluice's own topics: a job may not write it"
            ));
        }
        if let Some(why) = crate::core::config::reserved_topic(topic) {
            return Some(why);
        }
        let allowed = self.allowed.is_empty() || self.allowed.iter().any(|p| crate::core::wildcard::wildcard(p, topic));
        (!allowed).then(|| format!("{topic:?} is not among the topics kafka jobs may write (--kafka-job-topic)"))
    }
}

/// A target address the guard refused; found in a request error's source chain.
#[derive(Debug, thiserror::Error)]
#[error("{address} is a {what} address and job targets may not reach it (allow it with --allow-target)")]
pub struct Refused {
    pub address: IpAddr,
    pub what: &'static str,
}

impl Guard {
    pub fn new(allowed: Vec<IpNet>) -> Self {
        Guard {
            allowed,
            kafka: KafkaTopics::default(),
        }
    }

    /// The same guard, with the topics `kafka` jobs may write.
    pub fn with_kafka_topics(self, kafka: KafkaTopics) -> Self {
        Guard { kafka, ..self }
    }

    /// Allows everything: for clients that only talk to operator-given endpoints.
    pub fn open() -> Self {
        Guard {
            allowed: vec!["0.0.0.0/0".parse().unwrap(), "::/0".parse().unwrap()],
            kafka: KafkaTopics::default(),
        }
    }

    pub fn check(&self, address: IpAddr) -> Result<(), Refused> {
        let address = match address {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(address),
            v4 => v4,
        };
        if self.allowed.iter().any(|net| net.contains(&address)) {
            return Ok(());
        }
        match refused_kind(address) {
            Some(what) => Err(Refused { address, what }),
            None => Ok(()),
        }
    }
}

fn refused_kind(address: IpAddr) -> Option<&'static str> {
    // Cloud metadata services: AWS, GCP and Azure use 169.254.169.254 (link-local anyway,
    // as are ECS's 169.254.170.2 and EKS Pod Identity's 169.254.170.23). Not link-local:
    // AWS's IPv6 services, all in fd00:ec2::/32 (IMDS ::254, Pod Identity ::23, DNS ::253),
    // Azure's WireServer and Alibaba's metadata.
    const METADATA_ALIBABA: Ipv4Addr = Ipv4Addr::new(100, 100, 100, 200);
    const AZURE_WIRESERVER: Ipv4Addr = Ipv4Addr::new(168, 63, 129, 16);
    match address {
        IpAddr::V4(v4)
            if v4 == Ipv4Addr::new(169, 254, 169, 254) || v4 == METADATA_ALIBABA || v4 == AZURE_WIRESERVER =>
        {
            Some("cloud metadata")
        }
        IpAddr::V6(v6) if v6.segments()[..2] == [0xfd00, 0xec2] => Some("cloud metadata"),
        a if a.is_loopback() => Some("loopback"),
        a if a.is_unspecified() => Some("unspecified"),
        IpAddr::V4(v4) if v4.is_link_local() => Some("link-local"),
        IpAddr::V6(v6) if (v6.segments()[0] & 0xffc0) == 0xfe80 => Some("link-local"),
        // IETF protocol assignments; 192.0.0.192 is Oracle Cloud's metadata service.
        IpAddr::V4(v4) if v4.octets()[..3] == [192, 0, 0] => Some("special-purpose (192.0.0.0/24)"),
        // NAT64 (64:ff9b::/96 well-known, 64:ff9b:1::/48 local-use) reaches any IPv4
        // address, refused ones too, through a translator.
        IpAddr::V6(v6) if is_nat64(v6) => Some("NAT64"),
        _ => None,
    }
}

fn is_nat64(v6: Ipv6Addr) -> bool {
    let s = v6.segments();
    s[0] == 0x64 && s[1] == 0xff9b && (s[2..6] == [0, 0, 0, 0] || s[2] == 1)
}

/// Resolves names with the system resolver, then drops refused addresses.
struct GuardedResolver(Arc<Guard>);

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let guard = self.0.clone();
        let host = name.as_str().to_string();
        Box::pin(async move {
            let found: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let mut refused = None;
            let kept: Vec<SocketAddr> = found
                .into_iter()
                .filter(|a| match guard.check(a.ip()) {
                    Ok(()) => true,
                    Err(e) => {
                        refused = Some(e);
                        false
                    }
                })
                .collect();
            match (kept.is_empty(), refused) {
                (true, Some(e)) => Err(Box::new(e) as Box<dyn std::error::Error + Send + Sync>),
                _ => Ok(Box::new(kept.into_iter()) as Addrs),
            }
        })
    }
}

/// A redirect the client does not follow: it leaves the request's host.
#[derive(Debug, thiserror::Error)]
#[error("redirected from {from} to another host, {to}: job requests follow redirects only on their own host")]
pub struct OffHost {
    pub from: String,
    pub to: String,
}

/// The HTTP client job types use: guarded resolver, guarded redirects, a user agent.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    guard: Arc<Guard>,
}

impl Client {
    /// A client that connects to targets itself, or through `proxy` (a URL) when the
    /// operator gave one; never through a proxy named by the environment.
    pub fn new(guard: Guard, proxy: Option<&str>) -> anyhow::Result<Self> {
        // TLS through ring (the build has no other provider); a no-op once installed.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let guard = Arc::new(guard);
        let redirects = guard.clone();
        let builder = reqwest::Client::builder()
            .user_agent(concat!("sluice/", env!("CARGO_PKG_VERSION")))
            .dns_resolver(Arc::new(GuardedResolver(guard.clone())))
            .redirect(reqwest::redirect::Policy::custom(move |attempt| {
                if attempt.previous().len() >= 5 {
                    return attempt.error("more than 5 redirects");
                }
                if let Some(off) = off_host(attempt.previous(), attempt.url()) {
                    return attempt.error(off);
                }
                match literal(attempt.url()).map(|ip| redirects.check(ip)) {
                    Some(Err(refused)) => attempt.error(refused),
                    _ => attempt.follow(),
                }
            }));
        let builder = match proxy {
            None => builder.no_proxy(),
            Some(url) => builder.proxy(reqwest::Proxy::all(url)?),
        };
        Ok(Client {
            http: builder.build()?,
            guard,
        })
    }

    /// Refuses (PERMANENT: the config is at fault) a `kafka` job's `topic` the guard does
    /// not let jobs write.
    pub fn kafka_topic(&self, topic: &str) -> Result<(), CallError> {
        match self.guard.kafka.refusal(topic) {
            Some(why) => Err(CallError::Permanent(why)),
            None => Ok(()),
        }
    }

    /// A request to `url`, refused (PERMANENT: the config is at fault) when the URL is not
    /// http(s) or names a refused address.
    pub fn request(&self, method: Method, url: &str, timeout: Duration) -> Result<RequestBuilder, CallError> {
        let parsed = Url::parse(url).map_err(|e| CallError::Permanent(format!("the job URL does not parse: {e}")))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(CallError::Permanent(format!(
                "the job URL must be http or https, not {}",
                parsed.scheme()
            )));
        }
        if let Some(Err(refused)) = literal(&parsed).map(|ip| self.guard.check(ip)) {
            return Err(CallError::Permanent(refused.to_string()));
        }
        Ok(self.http.request(method, parsed).timeout(timeout))
    }
}

/// Why a redirect to `next` is not followed: it leaves the host of the chain's first
/// request (reqwest keeps custom headers and, on 307/308, the body across hosts).
fn off_host(previous: &[Url], next: &Url) -> Option<OffHost> {
    let first = previous.first()?;
    (first.host() != next.host()).then(|| OffHost {
        from: first.host_str().unwrap_or_default().to_string(),
        to: next.host_str().unwrap_or_default().to_string(),
    })
}

/// The address a URL names literally, if it does.
fn literal(url: &Url) -> Option<IpAddr> {
    match url.host()? {
        url::Host::Ipv4(v4) => Some(IpAddr::V4(v4)),
        url::Host::Ipv6(v6) => Some(IpAddr::V6(v6)),
        url::Host::Domain(_) => None,
    }
}

/// Whether a request error was the guard refusing an address or an off-host redirect
/// (found in its source chain).
pub fn refusal(error: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some(r) = e.downcast_ref::<Refused>() {
            return Some(r.to_string());
        }
        if let Some(r) = e.downcast_ref::<OffHost>() {
            return Some(r.to_string());
        }
        next = e.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn refuses_loopback_link_local_and_metadata_by_default() {
        let guard = Guard::default();
        for (address, what) in [
            ("127.0.0.1", "loopback"),
            ("::1", "loopback"),
            ("::ffff:127.0.0.1", "loopback"),
            ("0.0.0.0", "unspecified"),
            ("169.254.169.254", "cloud metadata"),
            ("fd00:ec2::254", "cloud metadata"),
            ("fd00:ec2::23", "cloud metadata"),
            ("fd00:ec2::253", "cloud metadata"),
            ("168.63.129.16", "cloud metadata"),
            ("169.254.170.23", "link-local"),
            ("100.100.100.200", "cloud metadata"),
            ("169.254.10.1", "link-local"),
            ("fe80::1", "link-local"),
            ("192.0.0.192", "special-purpose (192.0.0.0/24)"),
            ("192.0.0.8", "special-purpose (192.0.0.0/24)"),
            ("64:ff9b::a9fe:a9fe", "NAT64"),
            ("64:ff9b::808:808", "NAT64"),
            ("64:ff9b:1::a00:1", "NAT64"),
            ("64:ff9b:1:ffff::1", "NAT64"),
            ("::ffff:169.254.169.254", "cloud metadata"),
            ("::ffff:192.0.0.192", "special-purpose (192.0.0.0/24)"),
            ("::ffff:0.0.0.0", "unspecified"),
        ] {
            let refused = guard.check(ip(address)).expect_err(address);
            assert_eq!(refused.what, what, "{address}");
        }
        for fine in [
            "10.1.2.3",
            "192.168.0.10",
            "8.8.8.8",
            "2001:db8::1",
            "192.0.1.1",
            "64:ff9b:2::1",
            "64:ff9a::1",
        ] {
            assert!(guard.check(ip(fine)).is_ok(), "{fine}");
        }
    }

    #[test]
    fn allowed_ranges_open_what_they_name_and_nothing_else() {
        let guard = Guard::new(vec!["127.0.0.0/8".parse().unwrap()]);
        assert!(guard.check(ip("127.0.0.1")).is_ok());
        assert!(guard.check(ip("::ffff:127.0.0.5")).is_ok());
        assert!(guard.check(ip("169.254.169.254")).is_err());
        assert!(guard.check(ip("::1")).is_err());
    }

    #[test]
    fn literal_urls_are_refused_before_any_request() {
        let client = Client::new(Guard::default(), None).unwrap();
        let refused = client
            .request(
                Method::GET,
                "http://169.254.169.254/latest/meta-data/",
                Duration::from_secs(1),
            )
            .unwrap_err();
        assert!(
            matches!(&refused, CallError::Permanent(m) if m.contains("cloud metadata")),
            "{refused:?}"
        );
        let scheme = client
            .request(Method::GET, "file:///etc/passwd", Duration::from_secs(1))
            .unwrap_err();
        assert!(matches!(scheme, CallError::Permanent(_)));
        assert!(client
            .request(Method::GET, "https://example.com/x", Duration::from_secs(1))
            .is_ok());
    }

    #[tokio::test]
    async fn names_resolving_to_refused_addresses_are_refused_by_the_resolver() {
        let client = Client::new(Guard::default(), None).unwrap();
        let request = client
            .request(Method::GET, "http://localhost:9/", Duration::from_secs(5))
            .unwrap();
        let error = request.send().await.unwrap_err();
        let refusal = refusal(&error).expect("the guard's refusal is in the error chain");
        assert!(refusal.contains("loopback"), "{refusal}");
    }

    /// A loopback server on `ip` answering every request with `answer`, and the requests it
    /// got (method, path, the `x-api-key` header, body).
    async fn server(ip: &str, answer: axum::response::Response) -> (String, Arc<std::sync::Mutex<Vec<String>>>) {
        use axum::{body::Bytes, http::HeaderMap, Router};
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = seen.clone();
        let answer = Arc::new(std::sync::Mutex::new(Some(answer)));
        let app = Router::new().fallback(
            move |method: Method, uri: axum::http::Uri, headers: HeaderMap, body: Bytes| {
                let (log, answer) = (log.clone(), answer.clone());
                async move {
                    let key = headers.get("x-api-key").map(|v| v.to_str().unwrap().to_string());
                    log.lock()
                        .unwrap()
                        .push(format!("{method} {uri} {key:?} {}", String::from_utf8_lossy(&body)));
                    answer.lock().unwrap().take().unwrap_or_default()
                }
            },
        );
        let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (url, seen)
    }

    fn redirect(to: &str) -> axum::response::Response {
        axum::response::Response::builder()
            .status(307)
            .header("location", to)
            .body(Default::default())
            .unwrap()
    }

    #[tokio::test]
    async fn redirects_to_another_host_are_not_followed_so_headers_and_bodies_stay() {
        let guard = Guard::new(vec!["127.0.0.0/8".parse().unwrap()]);
        let client = Client::new(guard, None).unwrap();
        // 127.0.0.2 is loopback too, but another host.
        let (other, other_seen) = server("127.0.0.2", Default::default()).await;
        let (same, same_seen) = server("127.0.0.1", Default::default()).await;
        let (start, _) = server("127.0.0.1", redirect(&format!("{other}/stolen"))).await;
        let error = client
            .request(Method::POST, &format!("{start}/trigger"), Duration::from_secs(5))
            .unwrap()
            .header("x-api-key", "k3y")
            .body("secret body")
            .send()
            .await
            .unwrap_err();
        let refusal = refusal(&error).expect("the off-host redirect is in the error chain");
        assert!(refusal.contains("to another host, 127.0.0.2"), "{refusal}");
        assert!(
            other_seen.lock().unwrap().is_empty(),
            "{:?}",
            other_seen.lock().unwrap()
        );

        // On the same host (another port) the redirect is followed with what it carried.
        let (start, _) = server("127.0.0.1", redirect(&format!("{same}/moved"))).await;
        let answer = client
            .request(Method::POST, &format!("{start}/trigger"), Duration::from_secs(5))
            .unwrap()
            .header("x-api-key", "k3y")
            .body("body")
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 200);
        assert_eq!(*same_seen.lock().unwrap(), ["POST /moved Some(\"k3y\") body"]);
    }

    #[tokio::test]
    async fn an_explicit_proxy_carries_the_requests() {
        // (That `HTTP_PROXY` is ignored is tested on the binary, tests/jobs: setting it here
        // would reach every test of this process.)
        let guard = Guard::new(vec!["127.0.0.0/8".parse().unwrap()]);
        let (proxy, proxy_seen) = server("127.0.0.1", Default::default()).await;
        // An explicit proxy is the operator's choice.
        let proxied = Client::new(guard, Some(proxy.as_str())).unwrap();
        let answer = proxied
            .request(Method::GET, "http://example.invalid/x", Duration::from_secs(5))
            .unwrap()
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 200);
        assert_eq!(*proxy_seen.lock().unwrap(), ["GET http://example.invalid/x None "]);
    }

    #[test]
    fn kafka_jobs_may_write_neither_sluices_own_topics_nor_beyond_the_operators_list() {
        let own = KafkaTopics {
            own: vec!["prod.changelog".into(), "prod.sensors".into()],
            allowed: Vec::new(),
        };
        assert!(own.refusal("prod.changelog").unwrap().contains("Sluice's own"));
        assert!(own.refusal("sluice.config").is_some(), "the default prefix too");
        assert_eq!(own.refusal("jobs.requests"), None);
        let listed = KafkaTopics {
            allowed: vec!["jobs.*".into()],
            ..own
        };
        assert_eq!(listed.refusal("jobs.requests"), None);
        assert!(listed.refusal("orders").unwrap().contains("--kafka-job-topic"));
        assert!(listed.refusal("prod.sensors").is_some());
    }
}
