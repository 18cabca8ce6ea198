//! HTTP GET probes: kubelet `/healthz`, addon endpoints (fluentbit's `:2020/api/v1/uptime`),
//! the GCE metadata server, and connectivity checks of any URL.

use std::time::Duration;

use super::{Failure, Probe, io_reason};
use crate::shared::dns::Resolver;

/// Why an HTTP probe could not be made (a config error naming the URL).
#[derive(Debug, thiserror::Error)]
pub enum BadProbe {
    #[error("{url}: {source}")]
    Url {
        url: String,
        #[source]
        source: <reqwest::Url as std::str::FromStr>::Err,
    },
    #[error("{0}: only http and https")]
    Scheme(String),
    #[error("{0}")]
    Client(#[source] reqwest::Error),
}

/// An HTTP GET check.
#[derive(Debug, Clone)]
pub struct HttpProbe {
    name: String,
    url: String,
    headers: Vec<(String, String)>,
    /// The body must contain this (e.g. `ok` for `/healthz`).
    body_contains: Option<String>,
    /// Larger bodies fail the probe with reason `too_large`.
    max_body_bytes: usize,
    client: reqwest::Client,
}

impl HttpProbe {
    /// A probe named `name` of `url`; `timeout` bounds connect and the whole request. Names
    /// are resolved through [`Resolver`], so a failed lookup is a `dns` failure by its type.
    pub fn new(name: &str, url: &str, timeout: Duration) -> Result<Self, BadProbe> {
        let parsed: reqwest::Url = url.parse().map_err(|source| BadProbe::Url {
            url: url.to_string(),
            source,
        })?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(BadProbe::Scheme(url.to_string()));
        }
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            .dns_resolver(Resolver)
            .build()
            .map_err(BadProbe::Client)?;
        Ok(HttpProbe {
            name: name.into(),
            url: url.into(),
            headers: Vec::new(),
            body_contains: None,
            max_body_bytes: crate::shared::limit::DEFAULT_MAX_RESPONSE_BYTES,
            client,
        })
    }

    pub fn header(mut self, k: &str, v: &str) -> Self {
        self.headers.push((k.into(), v.into()));
        self
    }

    pub fn body_contains(mut self, s: &str) -> Self {
        self.body_contains = Some(s.into());
        self
    }

    /// The cap on the body read (`--max-response-bytes`).
    pub fn max_body_bytes(mut self, n: usize) -> Self {
        self.max_body_bytes = n;
        self
    }
}

impl Probe for HttpProbe {
    fn name(&self) -> &str {
        &self.name
    }

    fn target(&self) -> &str {
        &self.url
    }

    async fn check(&self) -> Result<(), Failure> {
        let mut req = self.client.get(&self.url);
        for (k, v) in &self.headers {
            req = req.header(k, v);
        }
        let resp = req.send().await.map_err(|e| {
            let reason = if e.is_timeout() {
                "timeout"
            } else {
                io_reason(&e)
            };
            Failure::new(reason, e.to_string())
        })?;
        let status = resp.status();
        if !status.is_success() {
            return Err(Failure::new(
                format!("status_{}", status.as_u16()),
                format!("{} answered {status}", self.url),
            ));
        }
        if let Some(want) = &self.body_contains {
            let body = read_text(resp, self.max_body_bytes).await?;
            if !body.contains(want.as_str()) {
                let shown: String = body.chars().take(100).collect();
                return Err(Failure::new(
                    "bad_body",
                    format!("expected {want:?} in {shown:?}"),
                ));
            }
        }
        Ok(())
    }
}

/// The body as text, at most `limit` bytes (`too_large` past it).
async fn read_text(resp: reqwest::Response, limit: usize) -> Result<String, Failure> {
    match crate::shared::limit::read_capped(resp, limit).await {
        Ok(bytes) => Ok(String::from_utf8_lossy(&bytes).into_owned()),
        Err(crate::shared::limit::ReadError::TooLarge(t)) => {
            Err(Failure::new("too_large", t.to_string()))
        }
        Err(crate::shared::limit::ReadError::Read(e)) => {
            Err(Failure::new("bad_body", e.to_string()))
        }
    }
}
