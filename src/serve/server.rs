//! The axum server: `/metrics`, `/watcher`, `/watcher/health`, `/healthz`, `/readyz`.
//!
//! Handlers only pick pre-rendered bytes out of the newest [`Published`]: the text exposition
//! and `/watcher` bodies are encoded at tick time, OpenMetrics once per snapshot on its first
//! request, and only the one-line snapshot age on every scrape. `/watcher` holds its host
//! entries compressed only: the plain body is inflated on the first request without gzip and
//! kept with that body, and `?host=` is written from the node's load on request.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::Router;
use axum::body::Body as HttpBody;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use bytes::Bytes;
use tokio::sync::watch;

use crate::outputs::prometheus::{self, Format};
use crate::outputs::published::Published;
use crate::outputs::watcher::WatcherBodies;

/// Shared handler state.
#[derive(Clone)]
pub struct AppState {
    pub published: watch::Receiver<Arc<Published>>,
    /// `/healthz` fails when the newest snapshot is older than this.
    pub stale_after: Duration,
}

impl AppState {
    fn current(&self) -> Arc<Published> {
        self.published.borrow().clone()
    }
}

/// The router with every endpoint.
pub fn router(state: AppState) -> Router {
    router_with(state, Security::default())
}

/// What guards the server: the auth layer on the protected paths, and the counters of auth,
/// TLS and the listener's limits shown on `/metrics`.
#[derive(Debug, Clone, Default)]
pub struct Security {
    /// `--auth kubernetes`: in front of `/metrics`, `/watcher` and `/watcher/health`.
    pub auth: Option<Arc<super::auth::Authorizer>>,
    pub tls_stats: Option<Arc<super::tls::TlsStats>>,
    /// The listener's counters ([`super::listener::serve`]).
    pub listener_stats: Option<Arc<super::listener::ListenerStats>>,
}

/// The server's own counters, rendered on every scrape.
#[derive(Debug, Clone, Default)]
struct ServerStats {
    auth: Option<Arc<super::auth::AuthStats>>,
    tls: Option<Arc<super::tls::TlsStats>>,
    listener: Option<Arc<super::listener::ListenerStats>>,
}

/// The router with every endpoint, `/metrics` and `/watcher*` behind `security.auth` when set;
/// `/healthz` and `/readyz` stay open.
pub fn router_with(state: AppState, security: Security) -> Router {
    let stats = ServerStats {
        auth: security.auth.as_ref().map(|a| a.stats.clone()),
        tls: security.tls_stats.clone(),
        listener: security.listener_stats.clone(),
    };
    let mut protected = Router::new()
        .route("/metrics", get(metrics))
        .route("/watcher", any(watcher_handler))
        .route("/watcher/health", any(watcher_health));
    if let Some(auth) = security.auth {
        protected = protected.route_layer(axum::middleware::from_fn_with_state(
            auth,
            super::auth::require,
        ));
    }
    Router::new()
        .merge(protected)
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .fallback(not_found)
        .layer(axum::Extension(stats))
        .with_state(state)
}

async fn not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        "404 page not found\n",
    )
        .into_response()
}

/// Whether `Accept-Encoding` allows gzip (present with a non-zero q).
fn accepts_gzip(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|item| {
            let mut parts = item.split(';').map(str::trim);
            let coding = parts.next().unwrap_or_default();
            let zero_q = parts.any(|p| {
                p.strip_prefix("q=")
                    .and_then(|q| q.parse::<f64>().ok())
                    .is_some_and(|q| q <= 0.0)
            });
            (coding.eq_ignore_ascii_case("gzip") || coding == "*") && !zero_q
        })
}

async fn metrics(
    State(st): State<AppState>,
    axum::Extension(stats): axum::Extension<ServerStats>,
    method: Method,
    headers: HeaderMap,
) -> Response {
    let p = st.current();
    let format = Format::negotiate(headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()));
    let gzip = accepts_gzip(&headers);
    // Making a body (OpenMetrics on its first scrape) or a chunk's gzip form (on the first gzip
    // scrape after it changed) can take a while at 5,000 nodes: not on an async worker.
    let needs_work = match format {
        Format::Text => gzip && !p.metrics_text.is_deflated(),
        Format::OpenMetrics => {
            !p.has_openmetrics() || (gzip && !p.metrics_openmetrics().is_deflated())
        }
    };
    if needs_work {
        let p = p.clone();
        let _ = tokio::task::spawn_blocking(move || {
            let body = match format {
                Format::Text => &p.metrics_text,
                Format::OpenMetrics => p.metrics_openmetrics(),
            };
            if gzip {
                drop(body.gzip(&[]));
            }
        })
        .await;
    }
    let head = match format {
        Format::Text => &p.metrics_text,
        Format::OpenMetrics => p.metrics_openmetrics(),
    };
    let tail = Bytes::from(prometheus::render_tail(
        &p.snapshot,
        SystemTime::now(),
        format,
    ));

    let mut resp_headers = HeaderMap::new();
    resp_headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(format.content_type()),
    );
    resp_headers.insert(
        header::VARY,
        HeaderValue::from_static("Accept, Accept-Encoding"),
    );
    let mut families = Vec::new();
    if let Some(a) = &stats.auth {
        families.extend(a.families());
    }
    if let Some(t) = &stats.tls {
        families.extend(t.families());
    }
    if let Some(l) = &stats.listener {
        families.extend(l.families());
    }
    families.retain(|(f, _)| crate::outputs::select::family_allowed(&p.snapshot.selection, f));
    let server = Bytes::from(prometheus::render_families(&families, format));
    if gzip {
        resp_headers.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    }
    if method == Method::HEAD {
        return (StatusCode::OK, resp_headers).into_response();
    }
    let body = if gzip {
        // Reference counts, not copies of the (possibly large) body.
        chunked(head.gzip(&[server, tail]))
    } else {
        // Chunks held compressed are inflated one at a time, as the answer is sent.
        chunked(head.clone().into_plain().chain([server, tail]))
    };
    (StatusCode::OK, resp_headers, body).into_response()
}

/// A body sent as these pieces, one after the other, each taken when the previous one is sent
/// (reference counts, no copy; a lazy iterator makes its pieces as they are sent).
fn chunked<I>(chunks: I) -> HttpBody
where
    I: IntoIterator<Item = Bytes>,
    I::IntoIter: Send + 'static,
{
    HttpBody::from_stream(futures_util::stream::iter(
        chunks
            .into_iter()
            .filter(|c| !c.is_empty())
            .map(Ok::<_, std::convert::Infallible>),
    ))
}

/// `?host=` as Go's `Query().Get("host")`: the first value, `""` when absent.
fn host_param(query: Option<&str>) -> String {
    query
        .map(|q| {
            form_urlencoded::parse(q.as_bytes())
                .find(|(k, _)| k == "host")
                .map(|(_, v)| v.into_owned())
                .unwrap_or_default()
        })
        .unwrap_or_default()
}

fn json(status: StatusCode, body: impl Into<HttpBody>) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.into(),
    )
        .into_response()
}

async fn watcher_handler(
    State(st): State<AppState>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let p = st.current();
    let Some(bodies) = &p.watcher else {
        return json(StatusCode::INTERNAL_SERVER_ERROR, HttpBody::empty());
    };
    let host = host_param(query.as_deref());
    if host.is_empty() {
        if !accepts_gzip(&headers) {
            // Only compressed blocks are held: the plain body is inflated on the first plain
            // request of this body, off the async workers (milliseconds at 5,000 nodes, about
            // a tenth of a second at 65,000), and kept with it for the next ones.
            if !bodies.has_plain() {
                make_off_workers(&p, |b| {
                    b.all_plain();
                })
                .await;
            }
            let Some(plain) = bodies.all_plain() else {
                return json(StatusCode::INTERNAL_SERVER_ERROR, HttpBody::empty());
            };
            let mut resp = json(StatusCode::OK, plain.clone());
            resp.headers_mut()
                .insert(header::VARY, HeaderValue::from_static("Accept-Encoding"));
            return resp;
        }
        // Compressed once per body, on the first request that accepts gzip; off the async
        // workers (tens of milliseconds at 5,000 nodes).
        if !bodies.has_gzip() {
            make_off_workers(&p, |b| {
                b.all_gzip();
            })
            .await;
        }
        return (
            StatusCode::OK,
            [
                (header::CONTENT_TYPE, "application/json"),
                (header::CONTENT_ENCODING, "gzip"),
                (header::VARY, "Accept-Encoding"),
            ],
            bodies.all_gzip().clone(),
        )
            .into_response();
    }
    match bodies.host(&host) {
        Some(b) => json(StatusCode::OK, b),
        None => json(
            StatusCode::NOT_FOUND,
            format!("No metrics found for host {host}"),
        ),
    }
}

/// Runs `make` (a body made once per `/watcher` body, on its first use) on the published
/// bodies, on a blocking thread: tens of milliseconds at 5,000 nodes, not for an async worker.
async fn make_off_workers(p: &Arc<Published>, make: fn(&WatcherBodies)) {
    let p = p.clone();
    let _ = tokio::task::spawn_blocking(move || {
        if let Some(b) = &p.watcher {
            make(b);
        }
    })
    .await;
}

async fn watcher_health(State(st): State<AppState>) -> StatusCode {
    if st.current().watcher_healthy {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    }
}

async fn healthz(State(st): State<AppState>) -> Response {
    let p = st.current();
    let age = SystemTime::now()
        .duration_since(p.snapshot.generated_at)
        .unwrap_or_default();
    if age > st.stale_after {
        let msg = format!(
            "tick loop stalled: newest snapshot is {:.0}s old\n",
            age.as_secs_f64()
        );
        return (StatusCode::SERVICE_UNAVAILABLE, msg).into_response();
    }
    (StatusCode::OK, "ok\n").into_response()
}

async fn readyz(State(st): State<AppState>) -> Response {
    let p = st.current();
    if p.ready {
        return (StatusCode::OK, "ready\n").into_response();
    }
    let waiting = |watchers: bool| {
        p.snapshot
            .sources
            .values()
            .filter(|s| !s.synced() && s.needs_success == watchers)
            .map(|s| s.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let msg = if p.snapshot.tick == 0 {
        "not ready: no snapshot yet\n".to_string()
    } else {
        // Watchers wait for a successful list; other sources for any run.
        let parts: Vec<String> = [
            (waiting(true), "the first successful list of"),
            (waiting(false), "the first run of"),
        ]
        .into_iter()
        .filter(|(names, _)| !names.is_empty())
        .map(|(names, what)| format!("{what}: {names}"))
        .collect();
        format!("not ready: waiting for {}\n", parts.join("; "))
    };
    (StatusCode::SERVICE_UNAVAILABLE, msg).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_param_reads_the_first_host() {
        assert_eq!(host_param(None), "");
        assert_eq!(host_param(Some("a=1")), "");
        assert_eq!(host_param(Some("host=n%2D1&host=x")), "n-1");
        assert_eq!(host_param(Some("host=")), "");
    }

    #[test]
    fn gzip_negotiation() {
        let h = |v: &str| {
            let mut m = HeaderMap::new();
            m.insert(header::ACCEPT_ENCODING, HeaderValue::from_str(v).unwrap());
            m
        };
        assert!(accepts_gzip(&h("gzip")));
        assert!(accepts_gzip(&h("br, gzip;q=0.5")));
        assert!(!accepts_gzip(&h("gzip;q=0")));
        assert!(!accepts_gzip(&h("identity")));
        assert!(!accepts_gzip(&HeaderMap::new()));
    }
}
