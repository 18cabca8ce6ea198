//! The probes' failure reasons come from the types of their errors, never from the text.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::dns::DnsProbe;
use super::http::HttpProbe;
use super::{Probe, io_reason};
use crate::shared::dns::DnsError;

/// `.invalid` never resolves (RFC 6761), with or without a network.
const UNRESOLVABLE: &str = "kube-prober-test.invalid";
const T: Duration = Duration::from_secs(5);

#[tokio::test]
async fn a_dns_probe_of_a_name_that_does_not_resolve_fails_as_dns() {
    let f = DnsProbe::new("dns_lookup", UNRESOLVABLE)
        .check()
        .await
        .unwrap_err();
    assert_eq!(f.reason, "dns");
    assert!(f.detail.starts_with(UNRESOLVABLE), "{}", f.detail);
}

/// The real resolver's failure reaches the HTTP probe as a `DnsError` under reqwest's error.
#[tokio::test]
async fn an_http_probe_of_a_name_that_does_not_resolve_fails_as_dns() {
    let url = format!("http://{UNRESOLVABLE}/healthz");
    let f = HttpProbe::new("http_get", &url, T)
        .unwrap()
        .check()
        .await
        .unwrap_err();
    assert_eq!(f.reason, "dns", "{}", f.detail);
}

/// Text that reads like a DNS failure is not one; a `DnsError` is, whatever its text.
#[test]
fn io_reason_reads_the_types_in_the_chain() {
    #[derive(Debug, thiserror::Error)]
    #[error("client error (Connect)")]
    struct Outer(#[source] Box<dyn std::error::Error + Send + Sync>);

    let lookalike = Outer(Box::new(std::io::Error::other(
        "dns error: failed to lookup address information: Name or service not known",
    )));
    assert_eq!(io_reason(&lookalike), "error");

    let dns = Outer(Box::new(DnsError {
        host: "x".into(),
        source: std::io::Error::other("no such host"),
    }));
    assert_eq!(io_reason(&dns), "dns");

    let refused = Outer(Box::new(std::io::Error::from(
        std::io::ErrorKind::ConnectionRefused,
    )));
    assert_eq!(io_reason(&refused), "refused");
    let timed_out = std::io::Error::from(std::io::ErrorKind::TimedOut);
    assert_eq!(io_reason(&timed_out), "timeout");
}

/// A server on 127.0.0.1 answering every request with `head` and then `body_len` bytes of
/// `x`; the address to ask.
async fn serve(head: &'static str, body_len: usize) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let mut seen = Vec::new();
            let mut buf = [0u8; 1024];
            while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                match conn.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => seen.extend_from_slice(&buf[..n]),
                }
            }
            let _ = conn.write_all(head.as_bytes()).await;
            let _ = conn.write_all(&vec![b'x'; body_len]).await;
            let _ = conn.shutdown().await;
        }
    });
    format!("http://{addr}/")
}

/// Past the cap, whether the length is announced or only seen, the probe fails as `too_large`
/// (the cap's `TooLarge`, matched by type).
#[tokio::test]
async fn a_body_over_the_cap_is_too_large() {
    let announced = serve(
        "HTTP/1.1 200 OK\r\nContent-Length: 4096\r\nConnection: close\r\n\r\n",
        4096,
    )
    .await;
    let unannounced = serve("HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n", 4096).await;
    for url in [announced, unannounced] {
        let probe = HttpProbe::new("http_get", &url, T)
            .unwrap()
            .body_contains("ok")
            .max_body_bytes(1024);
        let f = probe.check().await.unwrap_err();
        assert_eq!(f.reason, "too_large", "{url}: {}", f.detail);
        let within = HttpProbe::new("http_get", &url, T)
            .unwrap()
            .body_contains("xxx")
            .max_body_bytes(8192);
        assert_eq!(within.check().await, Ok(()), "{url}");
    }
}
