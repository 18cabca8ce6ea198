//! Lease leader election against the stand-in API server over real HTTP: one leader of several,
//! takeover after a crash (lease expiry) and after a graceful release, stepping down on API
//! faults and hung requests, write conflicts, and a foreign holder that keeps renewing.
//!
//! Every elector's leadership intervals are recorded from its status channel (the elector stamps
//! them so that they cover the time its `bool` said `true`), and every scenario ends by checking
//! that no two electors' intervals overlap.
//!
//! Timings are short (lease 1.5 s, written as 2 s; renew deadline 1 s; retry 0.2 s). Every wait
//! is bounded, and no test measures how long something took against a tight bound: what an
//! elector did and why comes from the requests its proxy saw (with whether it led at each) and
//! from the reason it logged for stepping down. Lower bounds (not taken over before the lease
//! could expire) stay: load only lengthens what they measure.

use support::apiserver;

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use apiserver::{ApiServer, Fault, Kind, Verb};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube_prober::k8s::leader::{Elector, LeaderStatus, LeaseConfig, start};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

const NAME: &str = "kube-prober";
const NS: &str = "kube-system";
const LEASE: Duration = Duration::from_millis(1500);
/// `leaseDurationSeconds` as written for [`LEASE`].
const LEASE_WRITTEN: Duration = Duration::from_secs(2);
const RENEW: Duration = Duration::from_secs(1);
const RETRY: Duration = Duration::from_millis(200);

fn init_tracing() {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let _ = tracing_subscriber::registry()
        .with(tracing_subscriber::EnvFilter::new("kube_prober=debug"))
        .with(tracing_subscriber::fmt::layer().with_test_writer())
        .with(CaptureLost)
        .try_init();
}

/// Every elector's `leadership lost` event in this test binary, as (identity, reason): why a
/// leader stepped down, from the elector itself. Tests that read it use identities of their own.
static LOST: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

struct CaptureLost;

/// The reasons `id` gave for losing leadership, once it has given one (it logs right after its
/// `bool` turns `false`).
async fn lost_reasons(id: &str) -> Vec<String> {
    let reasons = || -> Vec<String> {
        LOST.lock()
            .unwrap()
            .iter()
            .filter(|(who, _)| who == id)
            .map(|(_, reason)| reason.clone())
            .collect()
    };
    wait_for(
        "the reason for stepping down",
        Duration::from_secs(5),
        || !reasons().is_empty(),
    )
    .await;
    reasons()
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for CaptureLost {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        #[derive(Default)]
        struct Fields {
            message: String,
            identity: String,
            reason: String,
        }
        impl Fields {
            fn set(&mut self, field: &tracing::field::Field, value: String) {
                match field.name() {
                    "message" => self.message = value,
                    "identity" => self.identity = value,
                    "reason" => self.reason = value,
                    _ => {}
                }
            }
        }
        impl tracing::field::Visit for Fields {
            fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
                self.set(field, value.to_string());
            }
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                self.set(field, format!("{value:?}"));
            }
        }
        let mut f = Fields::default();
        event.record(&mut f);
        if f.message == "leadership lost" {
            LOST.lock().unwrap().push((f.identity, f.reason));
        }
    }
}

fn cfg(identity: &str) -> LeaseConfig {
    LeaseConfig {
        lease_duration: LEASE,
        renew_deadline: RENEW,
        retry_period: RETRY,
        ..LeaseConfig::new(NAME, NS, identity)
    }
}

// ---------------------------------------------------------------------------------------------
// A fault-injecting HTTP proxy in front of the stand-in, one per elector, so that faults hit
// one replica only.

const PASS: u8 = 0;
const FAIL: u8 = 1;
const STALL: u8 = 2;

/// One request the proxy got, in the order they arrived.
#[derive(Debug, Clone)]
struct Seen {
    method: Method,
    /// Whether the elector behind the proxy led when the request arrived.
    leading: Option<bool>,
    /// Held by [`STALL`] (never answered in time).
    stalled: bool,
    /// The holder of the Lease in a successful answer (`""` for none).
    holder: Option<String>,
}

#[derive(Clone)]
struct ProxyState {
    upstream: String,
    mode: Arc<AtomicU8>,
    http: reqwest::Client,
    seen: Arc<Mutex<Vec<Seen>>>,
    leading: Arc<Mutex<Option<watch::Receiver<bool>>>>,
}

struct Proxy {
    url: String,
    mode: Arc<AtomicU8>,
    seen: Arc<Mutex<Vec<Seen>>>,
    leading: Arc<Mutex<Option<watch::Receiver<bool>>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    async fn start(upstream: &str) -> Proxy {
        let mode = Arc::new(AtomicU8::new(PASS));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let leading = Arc::new(Mutex::new(None));
        let state = ProxyState {
            upstream: upstream.to_string(),
            mode: mode.clone(),
            http: reqwest::Client::new(),
            seen: seen.clone(),
            leading: leading.clone(),
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let app = axum::Router::new().fallback(forward).with_state(state);
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Proxy {
            url,
            mode,
            seen,
            leading,
            task,
        }
    }

    fn set(&self, mode: u8) {
        self.mode.store(mode, Ordering::SeqCst);
    }

    /// Every request so far.
    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn forward(
    State(st): State<ProxyState>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let mode = st.mode.load(Ordering::SeqCst);
    let leading = st.leading.lock().unwrap().as_ref().map(|l| *l.borrow());
    let index = {
        let mut seen = st.seen.lock().unwrap();
        seen.push(Seen {
            method: method.clone(),
            leading,
            stalled: mode == STALL,
            holder: None,
        });
        seen.len() - 1
    };
    match mode {
        FAIL => {
            let status = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"injected by the test proxy","reason":"InternalError","code":500}"#;
            return (
                StatusCode::INTERNAL_SERVER_ERROR,
                [(header::CONTENT_TYPE, "application/json")],
                status,
            )
                .into_response();
        }
        STALL => {
            tokio::time::sleep(Duration::from_secs(30)).await;
            return StatusCode::GATEWAY_TIMEOUT.into_response();
        }
        _ => {}
    }
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let mut req = st
        .http
        .request(method, format!("{}{path}", st.upstream))
        .body(body);
    if let Some(ct) = headers.get(header::CONTENT_TYPE) {
        req = req.header(header::CONTENT_TYPE, ct.clone());
    }
    match req.send().await {
        Ok(resp) => {
            let status = resp.status();
            let ct = resp.headers().get(header::CONTENT_TYPE).cloned();
            let bytes = resp.bytes().await.unwrap_or_default();
            if status.is_success()
                && let Ok(lease) = serde_json::from_slice::<Lease>(&bytes)
            {
                let holder = lease.spec.and_then(|s| s.holder_identity);
                st.seen.lock().unwrap()[index].holder = Some(holder.unwrap_or_default());
            }
            let mut out = (status, bytes).into_response();
            if let Some(ct) = ct {
                out.headers_mut().insert(header::CONTENT_TYPE, ct);
            }
            out
        }
        Err(e) => (StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
    }
}

// ---------------------------------------------------------------------------------------------
// Candidates and their recorded leadership intervals

#[derive(Debug, Default)]
struct Log {
    /// `[start, end)`; `end` is `None` while leading.
    intervals: Vec<(Instant, Option<Instant>)>,
    /// A transition the recorder did not see (two changes coalesced).
    missed: bool,
}

struct Candidate {
    id: String,
    cancel: CancellationToken,
    leading: watch::Receiver<bool>,
    status: watch::Receiver<LeaderStatus>,
    task: tokio::task::JoinHandle<()>,
    log: Arc<Mutex<Log>>,
    proxy: Proxy,
}

impl Candidate {
    async fn start(server: &ApiServer, id: &str) -> Candidate {
        Self::start_with(server, cfg(id)).await
    }

    async fn start_with(server: &ApiServer, cfg: LeaseConfig) -> Candidate {
        let id = cfg.identity.clone();
        let proxy = Proxy::start(&server.url).await;
        let mut config = kube::Config::new(proxy.url.parse().unwrap());
        config.default_retry = false;
        let client = kube::Client::try_from(config).unwrap();
        let cancel = CancellationToken::new();
        let Elector {
            leading,
            status,
            task,
        } = start(client, cfg, cancel.clone());
        *proxy.leading.lock().unwrap() = Some(leading.clone());
        let log = Arc::new(Mutex::new(Log::default()));
        tokio::spawn(record(status.clone(), log.clone()));
        Candidate {
            id,
            cancel,
            leading,
            status,
            task,
            log,
            proxy,
        }
    }

    fn leads(&self) -> bool {
        *self.leading.borrow()
    }

    fn intervals(&self) -> Vec<(Instant, Option<Instant>)> {
        self.log.lock().unwrap().intervals.clone()
    }

    /// Cancels and waits (bounded) for the task to end, release included.
    async fn stop(&mut self) {
        self.cancel.cancel();
        tokio::time::timeout(Duration::from_secs(3), &mut self.task)
            .await
            .unwrap_or_else(|_| panic!("{}: elector did not stop within 3 s", self.id))
            .unwrap();
        assert!(!self.leads(), "{}: still leading after stop", self.id);
    }
}

async fn record(mut status: watch::Receiver<LeaderStatus>, log: Arc<Mutex<Log>>) {
    let mut seen = 0u64;
    loop {
        {
            let s = status.borrow_and_update().clone();
            if s.changes != seen {
                let mut log = log.lock().unwrap();
                if s.changes > seen + 1 {
                    log.missed = true;
                }
                seen = s.changes;
                if s.leading {
                    log.intervals.push((s.since, None));
                } else if let Some(last) = log.intervals.last_mut()
                    && last.1.is_none()
                {
                    last.1 = Some(s.since);
                }
            }
        }
        if status.changed().await.is_err() {
            return;
        }
    }
}

/// No two candidates' leadership intervals overlap, and no transition went unrecorded.
fn assert_no_overlap(cands: &[&Candidate]) {
    let now = Instant::now();
    for c in cands {
        assert!(
            !c.log.lock().unwrap().missed,
            "{}: missed a transition",
            c.id
        );
    }
    for (i, a) in cands.iter().enumerate() {
        for b in &cands[i + 1..] {
            for (a0, a1) in a.intervals() {
                for (b0, b1) in b.intervals() {
                    let (a1, b1) = (a1.unwrap_or(now), b1.unwrap_or(now));
                    assert!(
                        a1 <= b0 || b1 <= a0,
                        "{} led {:?}..{:?} and {} led {:?}..{:?} at once",
                        a.id,
                        a0,
                        a1,
                        b.id,
                        b0,
                        b1
                    );
                }
            }
        }
    }
}

fn leaders<'a>(cands: &[&'a Candidate]) -> Vec<&'a str> {
    cands
        .iter()
        .filter(|c| c.leads())
        .map(|c| c.id.as_str())
        .collect()
}

/// Polls `cond` every 10 ms for at most `bound`; the time it took.
async fn wait_for(what: &str, bound: Duration, mut cond: impl FnMut() -> bool) -> Duration {
    let started = Instant::now();
    loop {
        if cond() {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < bound,
            "timed out after {bound:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits until exactly one of `cands` leads; its index.
async fn one_leader(cands: &[&Candidate], bound: Duration) -> usize {
    wait_for("a leader", bound, || leaders(cands).len() == 1).await;
    cands.iter().position(|c| c.leads()).unwrap()
}

/// Asserts, sampling for `period`, that `expected` leads alone (or nobody, for `None`).
async fn hold_steady(cands: &[&Candidate], expected: Option<&str>, period: Duration) {
    let until = Instant::now() + period;
    while Instant::now() < until {
        let now = leaders(cands);
        assert_eq!(now, expected.into_iter().collect::<Vec<_>>());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn stored(server: &ApiServer) -> Lease {
    server.get::<Lease>(NS, NAME).expect("the Lease exists")
}

fn spec(server: &ApiServer) -> k8s_openapi::api::coordination::v1::LeaseSpec {
    stored(server).spec.expect("the Lease has a spec")
}

fn now_micro() -> MicroTime {
    MicroTime(k8s_openapi::jiff::Timestamp::now())
}

// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_electors_exactly_one_leads_and_renews() {
    init_tracing();
    let server = apiserver::start().await;
    let mut a = Candidate::start(&server, "pod-a").await;
    let mut b = Candidate::start(&server, "pod-b").await;
    let i = one_leader(&[&a, &b], Duration::from_secs(3)).await;
    let (leader, follower) = if i == 0 { (&a, &b) } else { (&b, &a) };
    let leader_id = leader.id.clone();

    let first = spec(&server);
    assert_eq!(first.holder_identity.as_deref(), Some(leader_id.as_str()));
    assert_eq!(first.lease_transitions, Some(0));
    assert_eq!(first.lease_duration_seconds, Some(2));
    assert!(first.acquire_time.is_some());

    // Steady: the same one leads for several lease durations, renewing.
    hold_steady(&[&a, &b], Some(&leader_id), LEASE_WRITTEN * 2).await;
    let later = spec(&server);
    assert_eq!(later.holder_identity.as_deref(), Some(leader_id.as_str()));
    assert!(later.renew_time > first.renew_time, "renewTime advances");
    assert_eq!(
        later.acquire_time, first.acquire_time,
        "a renewal keeps acquireTime"
    );
    assert_eq!(later.lease_transitions, Some(0));
    assert_eq!(leader.intervals().len(), 1, "no flapping");
    assert!(follower.intervals().is_empty());

    // The holder is exposed on both.
    for c in [&a, &b] {
        let s = c.status.borrow().clone();
        assert_eq!(s.holder.as_deref(), Some(leader_id.as_str()), "{}", c.id);
        assert_eq!(s.leading, c.id == leader_id);
    }

    assert_no_overlap(&[&a, &b]);
    a.stop().await;
    b.stop().await;
    assert_no_overlap(&[&a, &b]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn crashed_leader_is_replaced_after_the_lease_expires() {
    init_tracing();
    let server = apiserver::start().await;
    let mut cands = [
        Candidate::start(&server, "pod-a").await,
        Candidate::start(&server, "pod-b").await,
        Candidate::start(&server, "pod-c").await,
    ];
    let all: Vec<&Candidate> = cands.iter().collect();
    let i = one_leader(&all, Duration::from_secs(3)).await;
    hold_steady(&all, Some(&cands[i].id.clone()), Duration::from_millis(600)).await;
    let before = spec(&server);

    // Crash: no release, no more renewals.
    cands[i].task.abort();
    let crashed_at = Instant::now();
    let took = wait_for("a new leader", Duration::from_secs(5), || {
        cands.iter().filter(|c| c.leads()).count() == 1 && !cands[i].leads()
    })
    .await;
    let all: Vec<&Candidate> = cands.iter().collect();
    let j = all.iter().position(|c| c.leads()).unwrap();
    assert_ne!(i, j);
    // Not before the lease (2 s from the last observed renewal, at most one retry before the
    // crash) could have expired (a lower bound: load only delays the takeover).
    assert!(
        took >= LEASE_WRITTEN - RETRY * 2,
        "took over early: {took:?}"
    );
    assert!(!cands[i].leads(), "an aborted elector reads as not leading");
    assert!(crashed_at.elapsed() >= took);

    let after = spec(&server);
    assert_eq!(after.holder_identity.as_deref(), Some(cands[j].id.as_str()));
    assert_eq!(after.lease_transitions, Some(1));
    assert!(
        after.acquire_time > before.acquire_time,
        "acquireTime set on takeover"
    );
    // The third one lost the race (or did not try): still one leader, steadily.
    let j_id = cands[j].id.clone();
    hold_steady(&all, Some(&j_id), Duration::from_millis(600)).await;

    assert_no_overlap(&all);
    for (k, c) in cands.iter_mut().enumerate() {
        if k != i {
            c.stop().await;
        }
    }
    assert_no_overlap(&cands.iter().collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn graceful_cancel_releases_the_lease() {
    init_tracing();
    let server = apiserver::start().await;
    let mut cands = [
        Candidate::start(&server, "pod-a").await,
        Candidate::start(&server, "pod-b").await,
        Candidate::start(&server, "pod-c").await,
    ];
    let all: Vec<&Candidate> = cands.iter().collect();
    let i = one_leader(&all, Duration::from_secs(3)).await;
    let leader_id = cands[i].id.clone();

    // A follower that stops leaves the Lease alone: it writes nothing.
    let f = (i + 1) % 3;
    let holder_before = spec(&server).holder_identity;
    let writes = |c: &Candidate| {
        c.proxy
            .seen()
            .iter()
            .filter(|r| r.method != Method::GET)
            .count()
    };
    let written_before = writes(&cands[f]);
    cands[f].stop().await;
    assert_eq!(
        writes(&cands[f]),
        written_before,
        "a follower wrote on stop"
    );
    assert_eq!(spec(&server).holder_identity, holder_before);
    hold_steady(
        &cands.iter().collect::<Vec<_>>(),
        Some(&leader_id),
        Duration::from_millis(400),
    )
    .await;

    // The leader stops: false at once, the Lease released, the last one takes it over as soon
    // as it reads the released record, without waiting for an expiry.
    let transitions_before = spec(&server).lease_transitions.unwrap_or(0);
    cands[i].stop().await;
    let k = 3 - i - f;
    wait_for("the last one to lead", Duration::from_secs(4), || {
        cands[k].leads()
    })
    .await;
    let seen = cands[k].proxy.seen();
    let read = seen
        .iter()
        .position(|r| r.method == Method::GET && r.holder.as_deref() == Some(""))
        .unwrap_or_else(|| panic!("{} never read the released Lease: {seen:#?}", cands[k].id));
    // Its next request after that read is the write that made it the holder: no second read,
    // no wait for the record to expire.
    assert_eq!(seen[read + 1].method, Method::PUT, "{seen:#?}");
    assert_eq!(
        seen[read + 1].holder.as_deref(),
        Some(cands[k].id.as_str()),
        "{seen:#?}"
    );
    let after = spec(&server);
    assert_eq!(after.holder_identity.as_deref(), Some(cands[k].id.as_str()));
    assert_eq!(after.lease_transitions, Some(transitions_before + 1));
    assert_eq!(after.lease_duration_seconds, Some(2));

    assert_no_overlap(&cands.iter().collect::<Vec<_>>());
    cands[k].stop().await;
    // The last one released too: nobody holds the Lease.
    let last = spec(&server);
    assert_eq!(last.holder_identity.filter(|h| !h.is_empty()), None);
    assert_eq!(last.lease_duration_seconds, Some(1));
    assert_no_overlap(&cands.iter().collect::<Vec<_>>());
}

/// Faults on the leader's connection only: it steps down within the renew deadline, before the
/// lease expires for the other, who then takes over.
/// `prefix` names the candidates (`<prefix>-a`, `<prefix>-b`), for their events in [`LOST`].
async fn leader_steps_down_on(mode: u8, prefix: &str) {
    init_tracing();
    let server = apiserver::start().await;
    let mut a = Candidate::start(&server, &format!("{prefix}-a")).await;
    let mut b = Candidate::start(&server, &format!("{prefix}-b")).await;
    let i = one_leader(&[&a, &b], Duration::from_secs(3)).await;
    let leader_id = [&a, &b][i].id.clone();
    hold_steady(&[&a, &b], Some(&leader_id), RETRY * 3).await;
    let (leader, follower) = if i == 0 { (&a, &b) } else { (&b, &a) };

    leader.proxy.set(mode);
    let down = wait_for("the leader to step down", Duration::from_secs(3), || {
        !leader.leads()
    })
    .await;
    // At the renew deadline, as the elector says (not, say, at the lease expiry); that this is
    // before the other can take over is the interval log's check below.
    let reasons = lost_reasons(&leader.id).await;
    assert!(
        reasons.len() == 1
            && reasons[0].starts_with("no successful renewal within the renew deadline (1s)"),
        "{reasons:?}"
    );
    // The other takes over once the lease expired for it; never before the leader stepped down
    // (checked by the interval log).
    let up = wait_for("the other to take over", Duration::from_secs(5), || {
        follower.leads()
    })
    .await;
    assert!(
        up >= down,
        "took over ({up:?}) before the old leader stepped down ({down:?})"
    );
    assert_eq!(
        spec(&server).holder_identity.as_deref(),
        Some(follower.id.as_str())
    );

    // Faults clear: the old leader sees the new holder and stays a follower.
    leader.proxy.set(PASS);
    let follower_id = follower.id.clone();
    hold_steady(&[&a, &b], Some(&follower_id), LEASE_WRITTEN).await;
    wait_for(
        "the old leader to see the new holder",
        Duration::from_secs(2),
        || leader.status.borrow().holder.as_deref() == Some(follower_id.as_str()),
    )
    .await;

    assert_no_overlap(&[&a, &b]);
    a.stop().await;
    b.stop().await;
    assert_no_overlap(&[&a, &b]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn api_errors_make_the_leader_step_down_before_the_lease_expires() {
    leader_steps_down_on(FAIL, "fail").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hung_renewals_make_the_leader_step_down_on_time() {
    leader_steps_down_on(STALL, "stall").await;
}

/// 500s on every Lease GET and PUT at the server: the leader steps down within the renew
/// deadline, nobody leads while the faults last, and someone leads again once they clear.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn server_side_lease_faults_then_recovery() {
    init_tracing();
    let server = apiserver::start().await;
    let mut a = Candidate::start(&server, "server-a").await;
    let mut b = Candidate::start(&server, "server-b").await;
    let i = one_leader(&[&a, &b], Duration::from_secs(3)).await;
    let leader = if i == 0 { &a } else { &b };

    for verb in [Verb::Get, Verb::Update, Verb::Create] {
        server.fail_verb(Kind::Leases, verb, Fault::internal("etcd is unhappy"));
    }
    wait_for("the leader to step down", Duration::from_secs(3), || {
        !leader.leads()
    })
    .await;
    let reasons = lost_reasons(&leader.id).await;
    assert!(
        reasons.len() == 1
            && reasons[0].starts_with("no successful renewal within the renew deadline (1s)"),
        "stepped down at the renew deadline: {reasons:?}"
    );
    hold_steady(&[&a, &b], None, LEASE_WRITTEN).await;

    server.heal(Kind::Leases);
    one_leader(&[&a, &b], Duration::from_secs(4)).await;
    let holder = spec(&server).holder_identity;
    let now_leading = leaders(&[&a, &b]);
    assert_eq!(holder.as_deref(), Some(now_leading[0]));

    assert_no_overlap(&[&a, &b]);
    a.stop().await;
    b.stop().await;
    assert_no_overlap(&[&a, &b]);
}

/// Someone else writes the Lease (a label) without changing the record: the leader's next PUT
/// carries a stale resourceVersion, gets 409, re-reads, finds itself still the holder and keeps
/// leading; its renewals keep the other writer's change.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stale_resource_version_while_still_the_holder_keeps_leadership() {
    init_tracing();
    let server = apiserver::start().await;
    let mut a = Candidate::start(&server, "pod-a").await;
    let mut b = Candidate::start(&server, "pod-b").await;
    let i = one_leader(&[&a, &b], Duration::from_secs(3)).await;
    let leader_id = [&a, &b][i].id.clone();

    for n in 0..4 {
        let mut lease = stored(&server);
        lease
            .metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert("touched".into(), n.to_string());
        let rv = server.upsert(&lease);
        // The leader renews on top of it (so it re-read it) and keeps leading.
        wait_for(
            "a renewal after the foreign write",
            Duration::from_secs(2),
            || {
                let l = stored(&server);
                l.metadata.resource_version.as_deref() != Some(rv.to_string().as_str())
            },
        )
        .await;
        let l = stored(&server);
        assert_eq!(
            l.metadata
                .labels
                .as_ref()
                .and_then(|m| m.get("touched"))
                .map(String::as_str),
            Some(n.to_string().as_str()),
            "the renewal kept the other writer's label"
        );
        assert_eq!(
            l.spec.and_then(|s| s.holder_identity).as_deref(),
            Some(leader_id.as_str())
        );
        hold_steady(&[&a, &b], Some(&leader_id), RETRY * 2).await;
    }
    assert_eq!([&a, &b][i].intervals().len(), 1, "never stepped down");
    assert_eq!(spec(&server).lease_transitions, Some(0));

    assert_no_overlap(&[&a, &b]);
    a.stop().await;
    b.stop().await;
}

/// Another party writes itself in as holder (it won a race we could not see): the leader's next
/// renewal conflicts, it re-reads, sees the new holder and steps down at once, without waiting
/// for the renew deadline. While that holder renews, nobody takes the Lease; when it stops,
/// one candidate takes over with the transitions counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_foreign_holder_writing_itself_in_makes_the_leader_step_down() {
    init_tracing();
    let server = apiserver::start().await;
    // Identities of this test's own, for its `leadership lost` events in [`LOST`].
    let mut a = Candidate::start(&server, "foreign-a").await;
    let mut b = Candidate::start(&server, "foreign-b").await;
    let i = one_leader(&[&a, &b], Duration::from_secs(3)).await;
    let leader = [&a, &b][i];

    let mut lease = stored(&server);
    let spec0 = lease.spec.get_or_insert_with(Default::default);
    spec0.holder_identity = Some("intruder".into());
    spec0.lease_transitions = Some(spec0.lease_transitions.unwrap_or(0) + 1);
    spec0.acquire_time = Some(now_micro());
    spec0.renew_time = Some(now_micro());
    spec0.lease_duration_seconds = Some(2);
    server.upsert(&lease);
    wait_for("the leader to step down", Duration::from_secs(3), || {
        !leader.leads()
    })
    .await;
    // On seeing the holder, not at the renew deadline: once an answer named the intruder, no
    // request came from it as a leader, and the reason it gave is the holder.
    let seen = leader.proxy.seen();
    let named = seen
        .iter()
        .position(|r| r.holder.as_deref() == Some("intruder"))
        .unwrap_or_else(|| panic!("no answer named the intruder: {seen:#?}"));
    assert!(
        seen[named + 1..].iter().all(|r| r.leading == Some(false)),
        "requests as a leader after seeing the intruder: {seen:#?}"
    );
    assert_eq!(
        lost_reasons(&leader.id).await,
        ["the Lease is held by 'intruder'"],
        "stepped down for seeing the holder, once"
    );

    // The intruder renews for three lease durations: never taken.
    let renewing_until = Instant::now() + LEASE_WRITTEN * 3;
    while Instant::now() < renewing_until {
        let mut l = stored(&server);
        if let Some(s) = l.spec.as_mut() {
            s.renew_time = Some(now_micro());
        }
        server.upsert(&l);
        hold_steady(&[&a, &b], None, Duration::from_millis(300)).await;
    }
    assert_eq!(spec(&server).holder_identity.as_deref(), Some("intruder"));
    for c in [&a, &b] {
        assert_eq!(c.status.borrow().holder.as_deref(), Some("intruder"));
    }

    // It stops renewing: taken over after the lease expires.
    let stopped = Instant::now();
    let before = spec(&server);
    one_leader(&[&a, &b], Duration::from_secs(5)).await;
    let took = stopped.elapsed();
    assert!(took >= LEASE_WRITTEN - RETRY * 2, "taken early: {took:?}");
    let after = spec(&server);
    let winner = leaders(&[&a, &b])[0];
    assert_eq!(after.holder_identity.as_deref(), Some(winner));
    assert_eq!(
        after.lease_transitions,
        Some(before.lease_transitions.unwrap_or(0) + 1)
    );
    assert!(after.acquire_time > before.acquire_time);

    assert_no_overlap(&[&a, &b]);
    a.stop().await;
    b.stop().await;
}

/// A Lease that a foreign holder created and keeps renewing is never taken; its record's own
/// lease duration (here 4 s, longer than ours) is what counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_renewing_foreign_holder_is_never_taken() {
    init_tracing();
    let server = apiserver::start().await;
    let mut foreign = apiserver::lease(NS, NAME, "other-controller");
    if let Some(s) = foreign.spec.as_mut() {
        s.lease_duration_seconds = Some(4);
        s.lease_transitions = Some(3);
    }
    server.upsert(&foreign);
    let mut a = Candidate::start(&server, "pod-a").await;
    let mut b = Candidate::start(&server, "pod-b").await;

    // Renewed every 1.5 s (longer than our own lease duration, within its own): never taken.
    let until = Instant::now() + Duration::from_secs(6);
    while Instant::now() < until {
        hold_steady(&[&a, &b], None, Duration::from_millis(1500)).await;
        let mut l = stored(&server);
        if let Some(s) = l.spec.as_mut() {
            s.renew_time = Some(now_micro());
        }
        server.upsert(&l);
    }
    let s = spec(&server);
    assert_eq!(s.holder_identity.as_deref(), Some("other-controller"));
    assert_eq!(s.lease_transitions, Some(3));
    for c in [&a, &b] {
        let st = c.status.borrow().clone();
        assert_eq!(st.holder.as_deref(), Some("other-controller"));
        assert_eq!(st.lease_transitions, 3);
        assert!(!st.leading);
        assert!(c.intervals().is_empty());
    }

    // It stops: taken over after its 4 s, with transitions counted and a new acquireTime.
    let stopped = Instant::now();
    one_leader(&[&a, &b], Duration::from_secs(7)).await;
    let took = stopped.elapsed();
    assert!(took >= Duration::from_secs(3), "taken early: {took:?}");
    let after = spec(&server);
    assert_eq!(
        after.holder_identity.as_deref(),
        Some(leaders(&[&a, &b])[0])
    );
    assert_eq!(after.lease_transitions, Some(4));
    assert!(after.acquire_time > s.acquire_time);
    assert_eq!(after.lease_duration_seconds, Some(2));

    assert_no_overlap(&[&a, &b]);
    a.stop().await;
    b.stop().await;
}

/// Shutdown while the API hangs: `false` at once (before the release request goes out), and
/// the task still ends within the release bound ([`kube_prober::k8s::leader::RELEASE_BOUND`], 2 s),
/// not when the hung requests would (30 s). A long renew deadline here keeps the leader from
/// stepping down on its own while the test looks, however slow the machine.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shutdown_is_bounded_when_the_api_hangs() {
    init_tracing();
    let server = apiserver::start().await;
    let mut a = Candidate::start_with(
        &server,
        LeaseConfig {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: RETRY,
            ..LeaseConfig::new(NAME, NS, "pod-a")
        },
    )
    .await;
    one_leader(&[&a], Duration::from_secs(3)).await;

    a.proxy.set(STALL);
    let hanging = |leading: bool| {
        move |r: &Seen| r.stalled && r.method == Method::PUT && r.leading == Some(leading)
    };
    wait_for("a renewal hanging", Duration::from_secs(5), || {
        a.proxy.seen().iter().any(hanging(true))
    })
    .await;
    let cancelled = Instant::now();
    a.cancel.cancel();
    // The release (a PUT, hanging too) went out after `false` was said.
    wait_for("the release request", Duration::from_secs(5), || {
        a.proxy.seen().iter().any(hanging(false))
    })
    .await;
    let status = a.status.borrow().clone();
    assert!(!status.leading);
    assert!(status.since >= cancelled, "false came from the cancel");
    tokio::time::timeout(Duration::from_secs(15), &mut a.task)
        .await
        .expect("the elector ends on its own bound, not the API's")
        .unwrap();
    // The release could not get through: the record still names pod-a, and expires normally.
    assert_eq!(spec(&server).holder_identity.as_deref(), Some("pod-a"));
}
