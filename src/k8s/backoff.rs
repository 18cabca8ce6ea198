//! Retry pacing of the Kubernetes sources, as client-go paces its reflectors.
//!
//! - [`ReflectorBackoff`]: the pause after a failed LIST or WATCH: 800 ms, doubling, capped at
//!   30 s, each pause jittered up to twice its base (so the longest lies in [30 s, 60 s)), and
//!   reset only when the previous failure is more than 2 minutes old, i.e. after a watch that
//!   stayed up (client-go's `NewExponentialBackoffManager(800ms, 30s, 2m, 2.0, 1.0)` in
//!   `NewReflectorWithOptions`). kube-runtime's own backoff is reset by every `Ok` item, and the
//!   watcher yields `Event::Init` before each relist, so consecutive LIST failures never grew.
//! - [`paced`]: a kube client that honours `Retry-After` on 429 and 503: once the API server
//!   has asked to wait, no request for the same API group through that client leaves before
//!   the time it named (capped at [`MAX_RETRY_AFTER`]; per group, so an aggregated API's 503,
//!   metrics.k8s.io for one, does not hold back the core watches or the leader Lease). Requests are not retried here; the caller's own loop
//!   (the reflector backoff, a fetcher's interval) decides when to try again, and the wait
//!   makes that try no earlier than the server asked. The same wrapper tells a reflector about
//!   every WATCH request it sends, which is how re-watches after a cleanly closed stream (no
//!   event at all from kube-runtime) are counted.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response, StatusCode};
use kube::client::Body;
use tokio::time::Instant;

/// The longest `Retry-After` honoured: a server (or something pretending to be one) cannot
/// park a source for longer than the reflector backoff's own cap. One value for every client.
pub use crate::shared::retry_after::MAX_RETRY_AFTER;

/// client-go's reflector backoff; see the module docs.
#[derive(Debug, Clone)]
pub struct ReflectorBackoff {
    pub initial: Duration,
    pub cap: Duration,
    pub factor: f64,
    /// Each pause is `base * (1 + jitter * r)`, `r` uniform in [0, 1).
    pub jitter: f64,
    /// The backoff starts over when the previous pause began longer ago than this.
    pub reset_after: Duration,
    next_base: Duration,
    last: Option<Instant>,
    rng: u64,
}

impl Default for ReflectorBackoff {
    fn default() -> Self {
        Self::new(
            Duration::from_millis(800),
            Duration::from_secs(30),
            Duration::from_secs(120),
        )
    }
}

impl ReflectorBackoff {
    pub fn new(initial: Duration, cap: Duration, reset_after: Duration) -> Self {
        let seed = {
            use std::hash::{BuildHasher, Hasher};
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u64(0x9e37_79b9_7f4a_7c15);
            h.finish() | 1
        };
        ReflectorBackoff {
            initial,
            cap,
            factor: 2.0,
            jitter: 1.0,
            reset_after,
            next_base: initial,
            last: None,
            rng: seed,
        }
    }

    /// The pause before the next try, after a failure at `now`.
    pub fn next_delay(&mut self, now: Instant) -> Duration {
        let r = self.random();
        self.next_delay_with(now, r)
    }

    /// As [`Self::next_delay`] with the jitter draw `r` in [0, 1) given (tests).
    pub fn next_delay_with(&mut self, now: Instant, r: f64) -> Duration {
        if self
            .last
            .is_some_and(|last| now.saturating_duration_since(last) > self.reset_after)
        {
            self.next_base = self.initial;
        }
        self.last = Some(now);
        let base = self.next_base;
        self.next_base = base.mul_f64(self.factor).min(self.cap);
        base.mul_f64(1.0 + self.jitter * r.clamp(0.0, 1.0))
    }

    /// The base of the next pause (before jitter).
    pub fn next_base(&self) -> Duration {
        self.next_base
    }

    /// xorshift64*: jitter needs spread, not secrecy.
    fn random(&mut self) -> f64 {
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The `Retry-After` of a 429 or 503 answer, in seconds (the only form the API server sends),
/// capped at [`MAX_RETRY_AFTER`]; `None` for other answers or a header that is no number.
pub fn retry_after(status: StatusCode, headers: &http::HeaderMap) -> Option<Duration> {
    crate::shared::retry_after::retry_after(status, headers).map(|d| d.min(MAX_RETRY_AFTER))
}

/// Shared between a [`paced`] client's clones: per API group, the earliest time the next
/// request may leave.
#[derive(Default)]
pub struct Pacing {
    not_before: Mutex<HashMap<String, Instant>>,
    on_watch: Option<Box<dyn Fn() + Send + Sync>>,
}

impl std::fmt::Debug for Pacing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pacing")
            .field("not_before", &self.not_before)
            .finish_non_exhaustive()
    }
}

impl Pacing {
    /// Until when the server asked this client to wait before requests to `path`'s API group,
    /// if that is still ahead.
    pub fn not_before(&self, path: &str) -> Option<Instant> {
        let g = self.not_before.lock().unwrap_or_else(|p| p.into_inner());
        g.get(api_group(path))
            .copied()
            .filter(|t| *t > Instant::now())
    }

    fn observe(&self, path: &str, status: StatusCode, headers: &http::HeaderMap) {
        if let Some(wait) = retry_after(status, headers) {
            let until = Instant::now() + wait;
            let mut g = self.not_before.lock().unwrap_or_else(|p| p.into_inner());
            let now = Instant::now();
            g.retain(|_, t| *t > now);
            let at = g.entry(api_group(path).to_string()).or_insert(until);
            *at = (*at).max(until);
            tracing::debug!(
                status = status.as_u16(),
                ?wait,
                "API server asked to wait (Retry-After)"
            );
        }
    }
}

/// `/api` for the core group, `/apis/<group>` for the others, the first segment otherwise.
fn api_group(path: &str) -> &str {
    let mut ends = path.match_indices('/').map(|(i, _)| i).skip(1);
    let end = if path.starts_with("/apis/") {
        ends.nth(1)
    } else {
        ends.next()
    };
    &path[..end.unwrap_or(path.len())]
}

fn is_watch(req: &Request<Body>) -> bool {
    req.uri()
        .query()
        .is_some_and(|q| q.split('&').any(|kv| kv == "watch=true" || kv == "watch=1"))
}

/// A tower service over a kube client that waits out `Retry-After` before each request.
#[derive(Clone)]
struct Paced {
    inner: kube::Client,
    pacing: Arc<Pacing>,
}

type PacedFuture = Pin<Box<dyn Future<Output = Result<Response<Body>, kube::Error>> + Send>>;

impl tower_service::Service<Request<Body>> for Paced {
    type Response = Response<Body>;
    type Error = kube::Error;
    type Future = PacedFuture;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let inner = self.inner.clone();
        let pacing = self.pacing.clone();
        Box::pin(async move {
            let path = req.uri().path().to_string();
            if let Some(at) = pacing.not_before(&path) {
                tokio::time::sleep_until(at).await;
            }
            if is_watch(&req)
                && let Some(f) = &pacing.on_watch
            {
                f();
            }
            let res = inner.send(req).await?;
            pacing.observe(&path, res.status(), res.headers());
            Ok(res)
        })
    }
}

/// `client` behind a `Retry-After` gate; `on_watch` runs before every WATCH request sent.
pub fn paced(
    client: kube::Client,
    on_watch: Option<Box<dyn Fn() + Send + Sync>>,
) -> (kube::Client, Arc<Pacing>) {
    let ns = client.default_namespace().to_string();
    let pacing = Arc::new(Pacing {
        not_before: Mutex::new(HashMap::new()),
        on_watch,
    });
    let svc = Paced {
        inner: client,
        pacing: pacing.clone(),
    };
    (kube::Client::new(svc, ns), pacing)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_like_client_go_and_caps_at_thirty_seconds() {
        let mut b = ReflectorBackoff::default();
        let t0 = Instant::now();
        let bases: Vec<u64> = (0..9)
            .map(|i| {
                b.next_delay_with(t0 + Duration::from_secs(i), 0.0)
                    .as_millis() as u64
            })
            .collect();
        assert_eq!(
            bases,
            [800, 1600, 3200, 6400, 12800, 25600, 30000, 30000, 30000]
        );
        // Jitter up to twice the base: the longest pause lies in [30 s, 60 s).
        let d = b.next_delay_with(t0 + Duration::from_secs(10), 0.999);
        assert!(
            d >= Duration::from_secs(59) && d < Duration::from_secs(60),
            "{d:?}"
        );
    }

    #[test]
    fn resets_only_after_two_quiet_minutes() {
        let mut b = ReflectorBackoff::default();
        let t0 = Instant::now();
        assert_eq!(b.next_delay_with(t0, 0.0), Duration::from_millis(800));
        // Failures 100 s apart: still growing (no watch stayed up for 2 minutes).
        let t1 = t0 + Duration::from_secs(100);
        assert_eq!(b.next_delay_with(t1, 0.0), Duration::from_millis(1600));
        let t2 = t1 + Duration::from_secs(120);
        assert_eq!(b.next_delay_with(t2, 0.0), Duration::from_millis(3200));
        // More than 2 minutes without a failure: start over.
        let t3 = t2 + Duration::from_secs(121);
        assert_eq!(b.next_delay_with(t3, 0.0), Duration::from_millis(800));
    }

    #[test]
    fn jitter_spreads_within_one_to_two_times_the_base() {
        let mut b = ReflectorBackoff::default();
        let t0 = Instant::now();
        let ds: Vec<Duration> = (0..200)
            .map(|_| {
                let mut c = b.clone();
                b.random();
                c.next_delay(t0)
            })
            .collect();
        assert!(
            ds.iter()
                .all(|d| *d >= Duration::from_millis(800) && *d < Duration::from_millis(1600))
        );
        let min = ds.iter().min().copied().unwrap_or_default();
        let max = ds.iter().max().copied().unwrap_or_default();
        assert!(max - min > Duration::from_millis(400), "{min:?}..{max:?}");
    }

    #[test]
    fn gates_are_per_api_group() {
        assert_eq!(api_group("/api/v1/namespaces/x/pods"), "/api");
        assert_eq!(
            api_group("/apis/metrics.k8s.io/v1beta1/nodes"),
            "/apis/metrics.k8s.io"
        );
        assert_eq!(api_group("/apis/apps/v1/daemonsets"), "/apis/apps");
        assert_eq!(api_group("/apis"), "/apis");
        assert_eq!(api_group("/version"), "/version");
        assert_eq!(api_group(""), "");
    }

    #[test]
    fn retry_after_only_on_429_and_503_and_capped() {
        let mut h = http::HeaderMap::new();
        h.insert(http::header::RETRY_AFTER, "2".parse().unwrap());
        assert_eq!(
            retry_after(StatusCode::TOO_MANY_REQUESTS, &h),
            Some(Duration::from_secs(2))
        );
        assert_eq!(
            retry_after(StatusCode::SERVICE_UNAVAILABLE, &h),
            Some(Duration::from_secs(2))
        );
        assert_eq!(retry_after(StatusCode::INTERNAL_SERVER_ERROR, &h), None);
        h.insert(http::header::RETRY_AFTER, "86400".parse().unwrap());
        assert_eq!(
            retry_after(StatusCode::TOO_MANY_REQUESTS, &h),
            Some(MAX_RETRY_AFTER)
        );
        h.insert(
            http::header::RETRY_AFTER,
            "Wed, 21 Oct 2015 07:28:00 GMT".parse().unwrap(),
        );
        assert_eq!(retry_after(StatusCode::TOO_MANY_REQUESTS, &h), None);
    }
}
