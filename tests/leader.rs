//! Lease leader election against the stand-in API server over real HTTP: one leader of several,
//! takeover after a crash (lease expiry) and after a graceful release, stepping down on API
//! faults and hung requests, write conflicts, and a foreign holder that keeps renewing.
//!
//! Every elector's leadership intervals are recorded from its status channel (the elector stamps
//! them so that they cover the time its `bool` said `true`), and every scenario ends by checking
//! that no two electors' intervals overlap.
//!
//! Timings are short (lease 1.5 s, written as 2 s; renew deadline 1 s; retry 0.2 s); bounds
//! leave generous slack, and every wait is bounded.

#[path = "support/apiserver.rs"]
mod apiserver;

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
use kube_prober::leader::{Elector, LeaderStatus, LeaseConfig, start};
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
    let _ = tracing_subscriber::fmt()
        .with_test_writer()
        .with_env_filter("kube_prober=debug")
        .try_init();
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

#[derive(Clone)]
struct ProxyState {
    upstream: String,
    mode: Arc<AtomicU8>,
    http: reqwest::Client,
}

struct Proxy {
    url: String,
    mode: Arc<AtomicU8>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    async fn start(upstream: &str) -> Proxy {
        let mode = Arc::new(AtomicU8::new(PASS));
        let state = ProxyState {
            upstream: upstream.to_string(),
            mode: mode.clone(),
            http: reqwest::Client::new(),
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let app = axum::Router::new().fallback(forward).with_state(state);
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Proxy { url, mode, task }
    }

    fn set(&self, mode: u8) {
        self.mode.store(mode, Ordering::SeqCst);
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
    match st.mode.load(Ordering::SeqCst) {
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
        let proxy = Proxy::start(&server.url).await;
        let mut config = kube::Config::new(proxy.url.parse().unwrap());
        config.default_retry = false;
        let client = kube::Client::try_from(config).unwrap();
        let cancel = CancellationToken::new();
        let Elector {
            leading,
            status,
            task,
        } = start(client, cfg(id), cancel.clone());
        let log = Arc::new(Mutex::new(Log::default()));
        tokio::spawn(record(status.clone(), log.clone()));
        Candidate {
            id: id.to_string(),
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
    // crash) could have expired; within the lease and a few retry periods.
    assert!(
        took >= LEASE_WRITTEN - RETRY * 2,
        "took over early: {took:?}"
    );
    assert!(
        took <= LEASE_WRITTEN + RETRY * 5,
        "took over late: {took:?}"
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

    // A follower that stops leaves the Lease alone.
    let f = (i + 1) % 3;
    let holder_before = spec(&server).holder_identity;
    let started = Instant::now();
    cands[f].stop().await;
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "a follower stops at once"
    );
    assert_eq!(spec(&server).holder_identity, holder_before);
    hold_steady(
        &cands.iter().collect::<Vec<_>>(),
        Some(&leader_id),
        Duration::from_millis(400),
    )
    .await;

    // The leader stops: false at once, the Lease released, the last one takes over in about a
    // retry period rather than a lease duration.
    let transitions_before = spec(&server).lease_transitions.unwrap_or(0);
    let started = Instant::now();
    cands[i].stop().await;
    let stop_took = started.elapsed();
    assert!(
        stop_took < Duration::from_secs(2),
        "release bounded: {stop_took:?}"
    );
    let k = 3 - i - f;
    let took = wait_for("the last one to lead", Duration::from_secs(4), || {
        cands[k].leads()
    })
    .await;
    let took = took + stop_took;
    assert!(
        took < RETRY * 3 + Duration::from_millis(300),
        "takeover after a release took {took:?} (a lease expiry takes {LEASE_WRITTEN:?})"
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
async fn leader_steps_down_on(mode: u8) {
    init_tracing();
    let server = apiserver::start().await;
    let mut a = Candidate::start(&server, "pod-a").await;
    let mut b = Candidate::start(&server, "pod-b").await;
    let i = one_leader(&[&a, &b], Duration::from_secs(3)).await;
    hold_steady(
        &[&a, &b],
        Some(if i == 0 { "pod-a" } else { "pod-b" }),
        RETRY * 3,
    )
    .await;
    let (leader, follower) = if i == 0 { (&a, &b) } else { (&b, &a) };

    leader.proxy.set(mode);
    let faulted = Instant::now();
    let down = wait_for("the leader to step down", Duration::from_secs(3), || {
        !leader.leads()
    })
    .await;
    assert!(
        down <= RENEW + Duration::from_millis(300),
        "stepped down after {down:?}, renew deadline {RENEW:?}"
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
    assert!(
        faulted.elapsed() <= LEASE_WRITTEN + RETRY * 6 + Duration::from_secs(1),
        "takeover late"
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
    leader_steps_down_on(FAIL).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hung_renewals_make_the_leader_step_down_on_time() {
    leader_steps_down_on(STALL).await;
}

/// 500s on every Lease GET and PUT at the server: the leader steps down within the renew
/// deadline, nobody leads while the faults last, and someone leads again once they clear.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn server_side_lease_faults_then_recovery() {
    init_tracing();
    let server = apiserver::start().await;
    let mut a = Candidate::start(&server, "pod-a").await;
    let mut b = Candidate::start(&server, "pod-b").await;
    let i = one_leader(&[&a, &b], Duration::from_secs(3)).await;
    let leader = if i == 0 { &a } else { &b };

    for verb in [Verb::Get, Verb::Update, Verb::Create] {
        server.fail_verb(Kind::Leases, verb, Fault::internal("etcd is unhappy"));
    }
    let down = wait_for("the leader to step down", Duration::from_secs(3), || {
        !leader.leads()
    })
    .await;
    assert!(down <= RENEW + Duration::from_millis(300), "{down:?}");
    hold_steady(&[&a, &b], None, LEASE_WRITTEN).await;

    server.heal(Kind::Leases);
    let healed = Instant::now();
    one_leader(&[&a, &b], Duration::from_secs(4)).await;
    assert!(healed.elapsed() <= LEASE_WRITTEN + RETRY * 5);
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
        let written = Instant::now();
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
        assert!(written.elapsed() < RENEW);
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
    let mut a = Candidate::start(&server, "pod-a").await;
    let mut b = Candidate::start(&server, "pod-b").await;
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
    let down = wait_for("the leader to step down", Duration::from_secs(2), || {
        !leader.leads()
    })
    .await;
    assert!(
        down < RENEW,
        "stepped down after {down:?}: on seeing the holder, not at the renew deadline"
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

/// Shutdown while the API hangs: `false` at once, and the task still ends within the release
/// bound (capped at the renew deadline, 1 s here).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shutdown_is_bounded_when_the_api_hangs() {
    init_tracing();
    let server = apiserver::start().await;
    let mut a = Candidate::start(&server, "pod-a").await;
    one_leader(&[&a], Duration::from_secs(3)).await;

    a.proxy.set(STALL);
    tokio::time::sleep(RETRY * 2).await; // a renewal is now hanging
    assert!(a.leads(), "still within the renew deadline");
    a.cancel.cancel();
    let cancelled = Instant::now();
    let down = wait_for("false after cancel", Duration::from_secs(1), || !a.leads()).await;
    assert!(down < Duration::from_millis(100), "false took {down:?}");
    tokio::time::timeout(Duration::from_secs(3), &mut a.task)
        .await
        .expect("the elector ends")
        .unwrap();
    let took = cancelled.elapsed();
    assert!(
        took < RENEW + Duration::from_millis(500),
        "shutdown took {took:?}"
    );
    // The release could not get through: the record still names pod-a, and expires normally.
    assert_eq!(spec(&server).holder_identity.as_deref(), Some("pod-a"));
}
