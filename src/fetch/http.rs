//! The HTTP side every remote backend shares: TLS (CA file, insecure skip-verify), a bearer
//! token from a value or a file (re-read on every request, so rotated tokens are picked up),
//! retries with backoff on transport errors, 429 and 5xx, and a hard limit on body size.

use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use reqwest::{Client, RequestBuilder, StatusCode};

use crate::error::{Error, Result};

/// Where a token comes from.
#[derive(Clone, PartialEq, Eq)]
pub enum Token {
    Value(String),
    File(PathBuf),
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Token::Value(_) => f.write_str("Token::Value(<redacted>)"),
            Token::File(p) => write!(f, "Token::File({})", p.display()),
        }
    }
}

impl Token {
    /// The token's current value.
    pub fn resolve(&self) -> Result<String> {
        match self {
            Token::Value(v) => Ok(v.clone()),
            Token::File(path) => std::fs::read_to_string(path)
                .map(|s| s.trim().to_string())
                .map_err(|source| Error::Io {
                    path: path.clone(),
                    source,
                }),
        }
    }
}

/// Connection settings of one backend.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpConfig {
    /// Base URL, e.g. `http://prometheus-k8s.monitoring:9090`.
    pub address: String,
    pub token: Option<Token>,
    /// PEM bundle trusted in addition to the system roots.
    pub ca_file: Option<PathBuf>,
    pub insecure_skip_verify: bool,
    /// Deadline of one request, body included.
    pub timeout: Duration,
    /// Retries after the first try (transport errors, 429, 5xx).
    pub retries: u32,
    /// First pause between tries; doubles each time.
    pub backoff: Duration,
    /// Larger bodies are refused.
    pub max_body_bytes: usize,
}

impl HttpConfig {
    /// Defaults for `address`: 10 s timeout, 2 retries from 200 ms, bodies up to
    /// [`crate::limit::DEFAULT_MAX_RESPONSE_BYTES`].
    pub fn new(address: impl Into<String>) -> Self {
        HttpConfig {
            address: address.into(),
            token: None,
            ca_file: None,
            insecure_skip_verify: false,
            timeout: Duration::from_secs(10),
            retries: 2,
            backoff: Duration::from_millis(200),
            max_body_bytes: crate::limit::DEFAULT_MAX_RESPONSE_BYTES,
        }
    }
}

/// A configured client for one backend.
#[derive(Debug, Clone)]
pub struct HttpBackend {
    pub cfg: HttpConfig,
    client: Client,
}

/// A complete answer: status and the whole (size-limited) body.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: StatusCode,
    pub body: Bytes,
}

fn http_err(what: &str, reason: impl Into<String>) -> Error {
    Error::Http {
        what: what.to_string(),
        reason: reason.into(),
    }
}

impl HttpBackend {
    pub fn new(cfg: HttpConfig) -> Result<Self> {
        let mut builder = Client::builder()
            .timeout(cfg.timeout)
            .danger_accept_invalid_certs(cfg.insecure_skip_verify);
        if let Some(path) = &cfg.ca_file {
            let pem = std::fs::read(path).map_err(|source| Error::Io {
                path: path.clone(),
                source,
            })?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| Error::Config {
                option: "--metrics-provider-ca-file",
                value: path.display().to_string(),
                reason: format!("not a PEM certificate bundle: {e}"),
            })?;
            for cert in certs {
                builder = builder.add_root_certificate(cert);
            }
        }
        let client = builder
            .build()
            .map_err(|e| http_err("building the HTTP client", e.to_string()))?;
        Ok(HttpBackend { cfg, client })
    }

    /// `address` joined with `path` (which starts with `/`).
    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.cfg.address.trim_end_matches('/'), path)
    }

    /// Sends the request `build` makes (once per try), with the token as `header` (the value
    /// is formatted by `token_value`, e.g. `Bearer {t}`), retrying as configured. Any status
    /// comes back as an [`Answer`]; callers decide what a 4xx means.
    pub async fn send(
        &self,
        what: &str,
        header: &str,
        token_value: fn(&str) -> String,
        build: impl Fn(&Client) -> RequestBuilder,
    ) -> Result<Answer> {
        let token = self.cfg.token.as_ref().map(Token::resolve).transpose()?;
        let mut pause = self.cfg.backoff;
        let mut tries = 0;
        loop {
            tries += 1;
            let mut req = build(&self.client);
            if let Some(t) = &token {
                req = req.header(header, token_value(t));
            }
            let last = tries > self.cfg.retries;
            match self.once(what, req).await {
                Ok(a)
                    if (a.status.is_server_error()
                        || a.status == StatusCode::TOO_MANY_REQUESTS)
                        && !last =>
                {
                    tracing::debug!(what, status = a.status.as_u16(), tries, "retrying");
                }
                Ok(a) => return Ok(a),
                Err(e @ Error::Http { .. }) if !last => {
                    tracing::debug!(what, error = %e, tries, "retrying");
                }
                Err(e) => return Err(e),
            }
            tokio::time::sleep(pause).await;
            pause = pause.saturating_mul(2);
        }
    }

    async fn once(&self, what: &str, req: RequestBuilder) -> Result<Answer> {
        let resp = req.send().await.map_err(|e| {
            let kind = if e.is_timeout() {
                "timed out"
            } else if e.is_connect() {
                "connection failed"
            } else {
                "request failed"
            };
            http_err(what, format!("{kind}: {e}"))
        })?;
        let status = resp.status();
        let body = read_body(what, resp, self.cfg.max_body_bytes).await?;
        Ok(Answer { status, body })
    }
}

/// The body, at most `limit` bytes: larger is [`Error::TooLarge`] (not retried).
async fn read_body(what: &str, resp: reqwest::Response, limit: usize) -> Result<Bytes> {
    crate::limit::read_capped(resp, limit)
        .await
        .map_err(|e| match e {
            crate::limit::ReadError::TooLarge(t) => Error::TooLarge {
                what: what.to_string(),
                reason: t.to_string(),
            },
            crate::limit::ReadError::Read(e) => http_err(what, format!("reading the body: {e}")),
        })
}

/// `Authorization: Bearer <token>`.
pub fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

/// The token as it is (e.g. `X-SF-Token`).
pub fn plain(token: &str) -> String {
    token.to_string()
}
