//! The HTTP side every remote backend shares: TLS (CA file, insecure skip-verify), a bearer
//! token from a value or a file (re-read on every request, so rotated tokens are picked up),
//! retries with backoff on transport errors, 429 and 5xx (no earlier than a 429's or 503's
//! `Retry-After`), and a hard limit on body size.

use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use reqwest::{Client, RequestBuilder, StatusCode};

use crate::shared::error::{Cause, Error, Result};
use crate::shared::retry_after::{MAX_RETRY_AFTER, retry_after};

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
    /// [`crate::shared::limit::DEFAULT_MAX_RESPONSE_BYTES`].
    pub fn new(address: impl Into<String>) -> Self {
        HttpConfig {
            address: address.into(),
            token: None,
            ca_file: None,
            insecure_skip_verify: false,
            timeout: Duration::from_secs(10),
            retries: 2,
            backoff: Duration::from_millis(200),
            max_body_bytes: crate::shared::limit::DEFAULT_MAX_RESPONSE_BYTES,
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

fn http_err(what: &str, cause: Cause) -> Error {
    Error::http(what, cause)
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
            .map_err(|e| http_err("building the HTTP client", Cause::other(e)))?;
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
            let mut wait = pause;
            match self.once(what, req).await {
                Ok((a, asked))
                    if (a.status.is_server_error()
                        || a.status == StatusCode::TOO_MANY_REQUESTS)
                        && !last
                        && asked.is_none_or(|d| d <= MAX_RETRY_AFTER) =>
                {
                    // The server's `Retry-After` (429/503) wins over a shorter pause of ours.
                    wait = wait.max(asked.unwrap_or_default());
                    tracing::debug!(what, status = a.status.as_u16(), tries, ?wait, "retrying");
                }
                // Asked to wait longer than we retry for: the answer goes back as it is, and
                // the source's next run tries again.
                Ok((a, _)) => return Ok(a),
                Err(e @ Error::Http { .. }) if !last => {
                    tracing::debug!(what, error = %e, tries, "retrying");
                }
                Err(e) => return Err(e),
            }
            tokio::time::sleep(wait).await;
            pause = pause.saturating_mul(2);
        }
    }

    /// One try: the answer and the `Retry-After` it asked for (429 and 503, in seconds).
    async fn once(&self, what: &str, req: RequestBuilder) -> Result<(Answer, Option<Duration>)> {
        let resp = req.send().await.map_err(|e| {
            let kind = if e.is_timeout() {
                "timed out"
            } else if e.is_connect() {
                "connection failed"
            } else {
                "request failed"
            };
            http_err(what, Cause::context(kind, e))
        })?;
        let status = resp.status();
        let asked = retry_after(status, resp.headers());
        let body = read_body(what, resp, self.cfg.max_body_bytes).await?;
        Ok((Answer { status, body }, asked))
    }
}

/// The body, at most `limit` bytes: larger is [`Error::TooLarge`] (not retried).
async fn read_body(what: &str, resp: reqwest::Response, limit: usize) -> Result<Bytes> {
    crate::shared::limit::read_capped(resp, limit)
        .await
        .map_err(|e| match e {
            crate::shared::limit::ReadError::TooLarge(t) => Error::too_large(what, t),
            crate::shared::limit::ReadError::Read(e) => {
                http_err(what, Cause::context("reading the body", e))
            }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;
    use std::sync::{Arc, Mutex};
    use std::time::Instant;

    type Answers = Arc<Mutex<(VecDeque<(u16, Option<&'static str>)>, Vec<Instant>)>>;

    /// A server on 127.0.0.1 answering `answers` in turn (then 200), noting when each request came.
    async fn serve(answers: Vec<(u16, Option<&'static str>)>) -> (String, Answers) {
        let state: Answers = Arc::new(Mutex::new((answers.into(), Vec::new())));
        let s = state.clone();
        let app = axum::Router::new().fallback(move || {
            let s = s.clone();
            async move {
                let mut g = s.lock().unwrap();
                g.1.push(Instant::now());
                let (code, ra) = g.0.pop_front().unwrap_or((200, None));
                let mut r = axum::response::Response::new(axum::body::Body::from("x"));
                *r.status_mut() = axum::http::StatusCode::from_u16(code).unwrap();
                if let Some(ra) = ra {
                    r.headers_mut()
                        .insert("retry-after", axum::http::HeaderValue::from_static(ra));
                }
                r
            }
        });
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(l, app).await });
        (format!("http://{addr}"), state)
    }

    fn gaps(times: &[Instant]) -> Vec<Duration> {
        times.windows(2).map(|w| w[1] - w[0]).collect()
    }

    async fn get(address: &str) -> Answer {
        let mut cfg = HttpConfig::new(address);
        cfg.backoff = Duration::from_millis(50);
        let b = HttpBackend::new(cfg).unwrap();
        let url = b.url("/x");
        b.send("test", "Authorization", bearer, |c| c.get(&url))
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn retry_after_on_429_and_503_is_waited_for() {
        let (addr, st) = serve(vec![(429, Some("1")), (503, Some("1"))]).await;
        let a = get(&addr).await;
        assert_eq!(a.status, StatusCode::OK);
        let g = gaps(&st.lock().unwrap().1);
        assert_eq!(g.len(), 2, "{g:?}");
        for d in g {
            // Our own pause would be 50 then 100 ms; the server asked for 1 s each time.
            assert!(d >= Duration::from_millis(990), "retried after {d:?}");
        }
    }

    #[tokio::test]
    async fn a_500_keeps_the_own_pause_and_a_too_long_retry_after_ends_the_retries() {
        let (addr, st) = serve(vec![(500, Some("5"))]).await;
        assert_eq!(get(&addr).await.status, StatusCode::OK);
        let g = gaps(&st.lock().unwrap().1);
        assert!(
            g[0] < Duration::from_secs(1),
            "a 500's Retry-After is not ours to honour: {g:?}"
        );

        let (addr, st) = serve(vec![(429, Some("3600"))]).await;
        assert_eq!(get(&addr).await.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(
            st.lock().unwrap().1.len(),
            1,
            "no retry before the hour is up"
        );
    }

    /// The error of one GET of `/x` through a backend made of `cfg`, which must fail.
    async fn failed_get(cfg: HttpConfig) -> Error {
        let b = HttpBackend::new(cfg).unwrap();
        let url = b.url("/x");
        b.send("test", "Authorization", bearer, |c| c.get(&url))
            .await
            .unwrap_err()
    }

    /// Past the cap the error is `TooLarge` holding the cap's own `TooLarge` (found by type in
    /// the chain), not retried; a refused connection is `Http` with reqwest's error under it.
    #[tokio::test]
    async fn failures_keep_their_typed_cause() {
        let (addr, st) = serve(vec![]).await;
        let mut cfg = HttpConfig::new(&addr);
        cfg.max_body_bytes = 0;
        let e = failed_get(cfg).await;
        assert_eq!(e.metric_label(), "too_large");
        assert_eq!(
            e.to_string(),
            "test: response body larger than the 0-byte limit (--max-response-bytes)"
        );
        let cap = crate::shared::limit::find_too_large(&e).expect("the cap's TooLarge");
        assert_eq!(cap.limit, 0);
        assert_eq!(st.lock().unwrap().1.len(), 1, "not retried");

        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut cfg = HttpConfig::new(format!("http://127.0.0.1:{port}"));
        cfg.retries = 0;
        let e = failed_get(cfg).await;
        assert_eq!(e.metric_label(), "http");
        let Error::Http { source, .. } = &e else {
            panic!("{e:?}")
        };
        let request = std::error::Error::source(source)
            .and_then(|r| r.downcast_ref::<reqwest::Error>())
            .expect("reqwest's error under the cause");
        assert!(request.is_connect(), "{request:?}");
        assert!(
            e.to_string().starts_with("test: connection failed: "),
            "{e}"
        );
    }
}
