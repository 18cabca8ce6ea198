//! Authentication and authorization of `/metrics`, `/watcher` and `/watcher/health` the way
//! kube-rbac-proxy does it, delegated to the Kubernetes API server:
//!
//! 1. **Who**: a client certificate verified against `--client-ca-file` (its CN is the user,
//!    each O a group), else an `Authorization: Bearer` token checked with a `TokenReview`
//!    (authentication.k8s.io/v1). Neither, or a token the API server does not accept: 401.
//! 2. **May they**: a `SubjectAccessReview` (authorization.k8s.io/v1) for that user on the
//!    non-resource URL (the request path, e.g. `/metrics`) with the verb from the HTTP method
//!    (GET and HEAD `get`, POST `create`, PUT `update`, PATCH `patch`, DELETE `delete`, other
//!    `*`), as kube-rbac-proxy maps them. Not allowed: 403.
//! 3. Both answers are cached for `--auth-cache-ttl` in bounded caches (tokens by their SHA-256,
//!    never the token itself); a review that fails (API server unreachable, times out, refuses
//!    our own ServiceAccount) is never cached and answers 503, counted, so a scraper retries
//!    instead of taking it as a verdict. (kube-rbac-proxy answers 401 when its TokenReview fails.)
//!
//! Every decision is counted in `kube_prober_http_auth_decisions_total{path,decision}`, every
//! review sent in `kube_prober_http_auth_reviews_total{review,result}`, every answer from the
//! cache in `kube_prober_http_auth_cache_hits_total{review}`.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};

use super::tls::ClientCertUser;
use crate::outputs::families;
use crate::outputs::series::Labels;

/// The paths that need authorization; every other path stays open (`/healthz`, `/readyz`).
pub const PROTECTED_PATHS: [&str; 3] = ["/metrics", "/watcher", "/watcher/health"];

/// Entries per cache (tokens, access decisions); the oldest go first when full.
pub const CACHE_CAPACITY: usize = 4096;

/// How long one review may take before the request gets 503.
pub const REVIEW_TIMEOUT: Duration = Duration::from_secs(10);

/// Settings of `--auth kubernetes`.
#[derive(Debug, Clone, PartialEq)]
pub struct AuthConfig {
    /// How long a TokenReview or SubjectAccessReview answer is reused.
    pub cache_ttl: Duration,
    pub cache_capacity: usize,
    pub review_timeout: Duration,
}

/// Who a request comes from, as the API server sees users.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct User {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

/// What became of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Allowed = 0,
    Unauthenticated = 1,
    Forbidden = 2,
    Unavailable = 3,
}

impl Decision {
    const ALL: [Decision; 4] = [
        Decision::Allowed,
        Decision::Unauthenticated,
        Decision::Forbidden,
        Decision::Unavailable,
    ];
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Allowed => "allowed",
            Decision::Unauthenticated => "unauthenticated",
            Decision::Forbidden => "forbidden",
            Decision::Unavailable => "unavailable",
        }
    }
}

const REVIEWS: [&str; 2] = ["token", "access"];
const TOKEN: usize = 0;
const ACCESS: usize = 1;

/// Counters of the auth layer, rendered on every scrape of `/metrics`.
#[derive(Debug, Default)]
pub struct AuthStats {
    decisions: [[AtomicU64; 4]; 3],
    /// `[review][ok, error]`
    reviews: [[AtomicU64; 2]; 2],
    cache_hits: [AtomicU64; 2],
}

impl AuthStats {
    fn decide(&self, path: usize, d: Decision) {
        self.decisions[path][d as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Decisions so far for `path` (one of [`PROTECTED_PATHS`]).
    pub fn decisions(&self, path: &str, d: Decision) -> u64 {
        PROTECTED_PATHS
            .iter()
            .position(|p| *p == path)
            .map_or(0, |i| self.decisions[i][d as usize].load(Ordering::Relaxed))
    }

    /// The families and rows this layer adds to `/metrics`; every label combination from the
    /// start, so `rate()` sees the first increase.
    pub fn families(&self) -> Vec<(&'static families::Family, Vec<(Labels<'static>, f64)>)> {
        let v = |a: &AtomicU64| a.load(Ordering::Relaxed) as f64;
        let mut decisions = Vec::new();
        for (i, path) in PROTECTED_PATHS.iter().enumerate() {
            for d in Decision::ALL {
                decisions.push((
                    vec![("path", *path), ("decision", d.as_str())],
                    v(&self.decisions[i][d as usize]),
                ));
            }
        }
        let mut reviews = Vec::new();
        let mut hits = Vec::new();
        for (i, review) in REVIEWS.iter().enumerate() {
            reviews.push((
                vec![("review", *review), ("result", "ok")],
                v(&self.reviews[i][0]),
            ));
            reviews.push((
                vec![("review", *review), ("result", "error")],
                v(&self.reviews[i][1]),
            ));
            hits.push((vec![("review", *review)], v(&self.cache_hits[i])));
        }
        vec![
            (&families::HTTP_AUTH_DECISIONS, decisions),
            (&families::HTTP_AUTH_REVIEWS, reviews),
            (&families::HTTP_AUTH_CACHE_HITS, hits),
        ]
    }
}

/// A map whose entries expire after `ttl` and which never holds more than `capacity` of them.
#[derive(Debug)]
pub struct TtlCache<K, V> {
    ttl: Duration,
    capacity: usize,
    entries: HashMap<K, (Instant, V)>,
}

impl<K: Hash + Eq + Clone, V: Clone> TtlCache<K, V> {
    pub fn new(ttl: Duration, capacity: usize) -> Self {
        TtlCache {
            ttl,
            capacity,
            entries: HashMap::new(),
        }
    }

    /// The value stored for `key` less than `ttl` before `now`.
    pub fn get(&mut self, key: &K, now: Instant) -> Option<V> {
        match self.entries.get(key) {
            Some((at, v)) if now.saturating_duration_since(*at) < self.ttl => Some(v.clone()),
            Some(_) => {
                self.entries.remove(key);
                None
            }
            None => None,
        }
    }

    /// Stores `value`; when full, drops the expired entries, then the oldest one.
    pub fn insert(&mut self, key: K, value: V, now: Instant) {
        if self.ttl.is_zero() || self.capacity == 0 {
            return;
        }
        if !self.entries.contains_key(&key) && self.entries.len() >= self.capacity {
            let ttl = self.ttl;
            self.entries
                .retain(|_, (at, _)| now.saturating_duration_since(*at) < ttl);
            if self.entries.len() >= self.capacity
                && let Some(oldest) = self
                    .entries
                    .iter()
                    .min_by_key(|(_, (at, _))| *at)
                    .map(|(k, _)| k.clone())
            {
                self.entries.remove(&oldest);
            }
        }
        self.entries.insert(key, (now, value));
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

type AccessKey = (User, String, &'static str);

/// The auth layer: a Kubernetes client for the reviews, the caches and the counters.
pub struct Authorizer {
    client: kube::Client,
    settings: AuthConfig,
    tokens: Mutex<TtlCache<[u8; 32], Option<User>>>,
    access: Mutex<TtlCache<AccessKey, bool>>,
    pub stats: Arc<AuthStats>,
}

impl std::fmt::Debug for Authorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authorizer")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// A review that got no verdict.
#[derive(Debug)]
struct Unavailable(String);

impl Authorizer {
    pub fn new(client: kube::Client, settings: AuthConfig) -> Self {
        Authorizer {
            client,
            tokens: Mutex::new(TtlCache::new(settings.cache_ttl, settings.cache_capacity)),
            access: Mutex::new(TtlCache::new(settings.cache_ttl, settings.cache_capacity)),
            settings,
            stats: Arc::default(),
        }
    }

    fn review_done(&self, review: usize, ok: bool) {
        self.stats.reviews[review][usize::from(!ok)].fetch_add(1, Ordering::Relaxed);
    }

    /// The user behind `token`: `Ok(None)` when the API server does not accept it.
    /// Creates a review (TokenReview, SubjectAccessReview) within the review timeout and counts
    /// the outcome as review `which`; no answer is [`Unavailable`].
    async fn create_review<K>(&self, which: usize, kind: &str, review: &K) -> Result<K, Unavailable>
    where
        K: kube::Resource<Scope = k8s_openapi::ClusterResourceScope, DynamicType = ()>
            + Clone
            + std::fmt::Debug
            + serde::Serialize
            + serde::de::DeserializeOwned,
    {
        let api: Api<K> = Api::all(self.client.clone());
        let answer = tokio::time::timeout(
            self.settings.review_timeout,
            api.create(&PostParams::default(), review),
        )
        .await;
        let answer = match answer {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(kube::Error::Api(status))) if status.code == 403 => Err(Unavailable(format!(
                "the API server refused the {kind} with 403 Forbidden: kube-prober's own identity \
                 may not create {}: bind it to ClusterRole system:auth-delegator \
                 (docs/security.md): {}",
                K::plural(&()),
                status.message
            ))),
            Ok(Err(e)) => Err(Unavailable(format!("{kind} failed: {e}"))),
            Err(_) => Err(Unavailable(format!(
                "{kind}: no answer within {:?}",
                self.settings.review_timeout
            ))),
        };
        self.review_done(which, answer.is_ok());
        answer
    }

    async fn authenticate_token(&self, token: &str) -> Result<Option<User>, Unavailable> {
        let key: [u8; 32] = {
            let d = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, token.as_bytes());
            let mut k = [0u8; 32];
            k.copy_from_slice(d.as_ref());
            k
        };
        let cached = self
            .tokens
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key, Instant::now());
        if let Some(user) = cached {
            self.stats.cache_hits[TOKEN].fetch_add(1, Ordering::Relaxed);
            return Ok(user);
        }
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_string(),
                audiences: None,
            },
            ..Default::default()
        };
        let answer = self.create_review(TOKEN, "TokenReview", &review).await?;
        let status = answer.status.unwrap_or_default();
        let user = match (status.authenticated, status.user) {
            (Some(true), Some(u)) => u.username.filter(|n| !n.is_empty()).map(|name| User {
                name,
                uid: u.uid.unwrap_or_default(),
                groups: u.groups.unwrap_or_default(),
                extra: u.extra.unwrap_or_default(),
            }),
            _ => None,
        };
        if user.is_none()
            && let Some(e) = status.error.filter(|e| !e.is_empty())
        {
            tracing::debug!(error = %e, "token not accepted by the API server");
        }
        self.tokens
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, user.clone(), Instant::now());
        Ok(user)
    }

    /// Whether `user` may `verb` the non-resource URL `path`.
    async fn authorize(
        &self,
        user: &User,
        path: &str,
        verb: &'static str,
    ) -> Result<bool, Unavailable> {
        let key: AccessKey = (user.clone(), path.to_string(), verb);
        let cached = self
            .access
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key, Instant::now());
        if let Some(allowed) = cached {
            self.stats.cache_hits[ACCESS].fetch_add(1, Ordering::Relaxed);
            return Ok(allowed);
        }
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.name.clone()),
                uid: Some(user.uid.clone()).filter(|u| !u.is_empty()),
                groups: Some(user.groups.clone()).filter(|g| !g.is_empty()),
                extra: Some(user.extra.clone()).filter(|e| !e.is_empty()),
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some(path.to_string()),
                    verb: Some(verb.to_string()),
                }),
                resource_attributes: None,
            },
            ..Default::default()
        };
        let answer = self
            .create_review(ACCESS, "SubjectAccessReview", &review)
            .await?;
        let allowed = answer
            .status
            .is_some_and(|s| s.allowed && s.denied != Some(true));
        self.access
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, allowed, Instant::now());
        Ok(allowed)
    }

    /// Decides one request: `None` to serve it, else the answer to send.
    async fn check(
        &self,
        cert: Option<ClientCertUser>,
        token: Option<String>,
        method: &Method,
        path: &str,
    ) -> (Decision, Option<Response>) {
        let user = if let Some(cert) = cert {
            User {
                name: cert.user,
                groups: cert.groups,
                ..User::default()
            }
        } else {
            let Some(token) = token else {
                return (Decision::Unauthenticated, Some(unauthorized()));
            };
            let token = token.as_str();
            match self.authenticate_token(token).await {
                Ok(Some(u)) => u,
                Ok(None) => return (Decision::Unauthenticated, Some(unauthorized())),
                Err(Unavailable(e)) => {
                    tracing::warn!(error = %e, "cannot authenticate a request: the TokenReview failed");
                    return (Decision::Unavailable, Some(unavailable()));
                }
            }
        };
        let verb = verb_of(method);
        match self.authorize(&user, path, verb).await {
            Ok(true) => (Decision::Allowed, None),
            Ok(false) => {
                tracing::debug!(user = %user.name, verb, path, "access denied");
                let msg = format!(
                    "Forbidden (user={}, verb={verb}, nonResourceURL={path})\n",
                    user.name
                );
                (
                    Decision::Forbidden,
                    Some((StatusCode::FORBIDDEN, msg).into_response()),
                )
            }
            Err(Unavailable(e)) => {
                tracing::warn!(error = %e, "cannot authorize a request: the SubjectAccessReview failed");
                (Decision::Unavailable, Some(unavailable()))
            }
        }
    }
}

fn unauthorized() -> Response {
    let mut r = (StatusCode::UNAUTHORIZED, "Unauthorized\n").into_response();
    r.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"kube-prober\""),
    );
    r
}

fn unavailable() -> Response {
    let mut r = (
        StatusCode::SERVICE_UNAVAILABLE,
        "authentication or authorization unavailable: the Kubernetes API server did not answer a review or refused it (see kube-prober's log)\n",
    )
        .into_response();
    r.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
    r
}

/// The token of `Authorization: Bearer <token>` (scheme case-insensitive), `None` for any
/// other or malformed value.
pub fn bearer_token(value: Option<&HeaderValue>) -> Option<&str> {
    let v = value?.to_str().ok()?.trim();
    let (scheme, token) = v.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer")
        && !token.is_empty()
        && !token.contains(char::is_whitespace))
    .then_some(token)
}

/// The authorization verb of an HTTP method, as kube-rbac-proxy derives it (HEAD as GET).
pub fn verb_of(method: &Method) -> &'static str {
    match *method {
        Method::GET | Method::HEAD => "get",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        _ => "*",
    }
}

/// The middleware in front of the protected routes.
pub async fn require(State(auth): State<Arc<Authorizer>>, req: Request, next: Next) -> Response {
    let Some(path) = PROTECTED_PATHS.iter().position(|p| *p == req.uri().path()) else {
        return next.run(req).await;
    };
    let cert = req.extensions().get::<ClientCertUser>().cloned();
    let token = bearer_token(req.headers().get(header::AUTHORIZATION)).map(str::to_string);
    let method = req.method().clone();
    let uri_path = req.uri().path().to_string();
    let (decision, answer) = auth.check(cert, token, &method, &uri_path).await;
    auth.stats.decide(path, decision);
    match answer {
        None => next.run(req).await,
        Some(r) => r,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_tokens_are_read_strictly() {
        let h = |s: &str| HeaderValue::from_str(s).unwrap();
        assert_eq!(bearer_token(Some(&h("Bearer abc"))), Some("abc"));
        assert_eq!(bearer_token(Some(&h("bearer  abc "))), Some("abc"));
        assert_eq!(bearer_token(Some(&h("Basic abc"))), None);
        assert_eq!(bearer_token(Some(&h("Bearer"))), None);
        assert_eq!(bearer_token(Some(&h("Bearer "))), None);
        assert_eq!(bearer_token(Some(&h("Bearer a b"))), None);
        assert_eq!(bearer_token(None), None);
        let binary = HeaderValue::from_bytes(b"Bearer \xff").unwrap();
        assert_eq!(bearer_token(Some(&binary)), None);
    }

    #[test]
    fn verbs_follow_kube_rbac_proxy() {
        assert_eq!(verb_of(&Method::GET), "get");
        assert_eq!(verb_of(&Method::HEAD), "get");
        assert_eq!(verb_of(&Method::POST), "create");
        assert_eq!(verb_of(&Method::PUT), "update");
        assert_eq!(verb_of(&Method::PATCH), "patch");
        assert_eq!(verb_of(&Method::DELETE), "delete");
        assert_eq!(verb_of(&Method::OPTIONS), "*");
    }

    #[test]
    fn cache_entries_expire_after_the_ttl() {
        let t0 = Instant::now();
        let mut c = TtlCache::new(Duration::from_secs(10), 8);
        c.insert("a", 1, t0);
        assert_eq!(c.get(&"a", t0 + Duration::from_secs(9)), Some(1));
        assert_eq!(c.get(&"a", t0 + Duration::from_secs(10)), None);
        assert!(c.is_empty(), "an expired entry is dropped when seen");
    }

    #[test]
    fn cache_is_bounded_and_drops_the_oldest() {
        let t0 = Instant::now();
        let mut c = TtlCache::new(Duration::from_secs(60), 3);
        for i in 0..3u32 {
            c.insert(i, i, t0 + Duration::from_secs(u64::from(i)));
        }
        c.insert(99, 99, t0 + Duration::from_secs(5));
        assert_eq!(c.len(), 3);
        assert_eq!(c.get(&0, t0 + Duration::from_secs(6)), None, "oldest went");
        assert_eq!(c.get(&99, t0 + Duration::from_secs(6)), Some(99));
        // Expired entries go before live ones.
        let mut c = TtlCache::new(Duration::from_secs(10), 2);
        c.insert(1, 1, t0);
        c.insert(2, 2, t0 + Duration::from_secs(8));
        c.insert(3, 3, t0 + Duration::from_secs(12));
        assert_eq!(c.get(&2, t0 + Duration::from_secs(12)), Some(2));
        assert_eq!(c.get(&3, t0 + Duration::from_secs(12)), Some(3));
        for i in 0..10_000u32 {
            c.insert(i, i, t0);
        }
        assert!(c.len() <= 2);
    }

    #[test]
    fn a_zero_ttl_caches_nothing() {
        let t0 = Instant::now();
        let mut c = TtlCache::new(Duration::ZERO, 8);
        c.insert(1, 1, t0);
        assert_eq!(c.get(&1, t0), None);
    }

    #[test]
    fn every_decision_row_is_present_from_the_start() {
        let s = AuthStats::default();
        s.decide(0, Decision::Forbidden);
        let fams = s.families();
        assert_eq!(fams[0].1.len(), 12);
        assert!(fams[0].1.iter().any(|(l, v)| l
            == &vec![("path", "/metrics"), ("decision", "forbidden")]
            && *v == 1.0));
        assert_eq!(s.decisions("/metrics", Decision::Forbidden), 1);
    }
}
