//! Name resolution whose failure is a typed [`DnsError`]: the DNS probe resolves through
//! [`lookup`], and an HTTP client built with [`Resolver`] carries the same error in its
//! error's source chain, so a failure is classified as `dns` by its type, never by its text.

use std::net::SocketAddr;

/// `host` could not be resolved (the resolver's error, or no address at all).
#[derive(Debug, thiserror::Error)]
#[error("{host}: {source}")]
pub struct DnsError {
    pub host: String,
    #[source]
    pub source: std::io::Error,
}

/// The addresses of `host` (with `port`), through the system's resolver.
pub async fn lookup(host: &str, port: u16) -> Result<Vec<SocketAddr>, DnsError> {
    match tokio::net::lookup_host((host, port)).await {
        Ok(addrs) => Ok(addrs.collect()),
        Err(source) => Err(DnsError {
            host: host.to_string(),
            source,
        }),
    }
}

/// A resolver for reqwest (`ClientBuilder::dns_resolver`) through [`lookup`]: a failed lookup
/// is a [`DnsError`] under the request's error.
#[derive(Debug, Clone, Copy, Default)]
pub struct Resolver;

impl reqwest::dns::Resolve for Resolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let host = name.as_str().to_string();
        Box::pin(async move {
            let addrs = lookup(&host, 0).await?;
            Ok(Box::new(addrs.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// The [`DnsError`] in `e`'s source chain (`e` itself included).
pub fn find_dns_error<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a DnsError> {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if let Some(d) = err.downcast_ref::<DnsError>() {
            return Some(d);
        }
        cur = err.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `.invalid` never resolves (RFC 6761): the failure is a `DnsError` naming the host.
    #[tokio::test]
    async fn a_name_under_invalid_fails_as_a_dns_error() {
        let e = lookup("kube-prober-test.invalid", 80).await.unwrap_err();
        assert_eq!(e.host, "kube-prober-test.invalid");
        assert!(
            e.to_string().starts_with("kube-prober-test.invalid: "),
            "{e}"
        );
    }

    /// Through reqwest the `DnsError` is found by type in the request error's chain, and only
    /// there: a refused connection to 127.0.0.1 has none.
    #[tokio::test]
    async fn a_request_carries_the_dns_error_in_its_chain() {
        let client = reqwest::Client::builder()
            .dns_resolver(Resolver)
            .no_proxy()
            .build()
            .unwrap();
        let e = client
            .get("http://kube-prober-test.invalid/")
            .send()
            .await
            .unwrap_err();
        let found = find_dns_error(&e).expect("a DnsError under the request's error");
        assert_eq!(found.host, "kube-prober-test.invalid");

        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let e = client
            .get(format!("http://127.0.0.1:{port}/"))
            .send()
            .await
            .unwrap_err();
        assert!(find_dns_error(&e).is_none(), "{e:?}");
    }
}
