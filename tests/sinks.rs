//! The push-output runner: ticks, skipped ticks while a push hangs (without touching /metrics
//! or /watcher latency), failures by reason, timeouts, and the final push at shutdown.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use kube_prober::api::server::{self, AppState, Published};
use kube_prober::model::{Resource, Snapshot, UsageSample};
use kube_prober::output::{SinkSchedule, run_sink};
use kube_prober::provider::{Provider, Store};
use kube_prober::sink::{PushError, PushReport, PushScope, Sink};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// A sink that sleeps `delay`, then succeeds or fails as told, counting pushes and ticks seen.
struct TestSink {
    delay: Duration,
    fail: Option<&'static str>,
    pushes: AtomicU64,
    last_tick: AtomicU64,
    /// The scope of every push started.
    scopes: std::sync::Mutex<Vec<PushScope>>,
}

impl TestSink {
    fn new(delay: Duration, fail: Option<&'static str>) -> Arc<Self> {
        Arc::new(TestSink {
            delay,
            fail,
            pushes: AtomicU64::new(0),
            last_tick: AtomicU64::new(0),
            scopes: std::sync::Mutex::new(Vec::new()),
        })
    }
}

impl Sink for TestSink {
    fn name(&self) -> &'static str {
        "test"
    }

    async fn push(
        &self,
        snapshot: Arc<Snapshot>,
        scope: PushScope,
    ) -> Result<PushReport, PushError> {
        self.scopes.lock().unwrap().push(scope);
        let delay = match scope {
            PushScope::All => self.delay,
            PushScope::InstanceOnly => Duration::ZERO,
        };
        tokio::time::sleep(delay).await;
        self.pushes.fetch_add(1, Ordering::SeqCst);
        self.last_tick.store(snapshot.tick, Ordering::SeqCst);
        match self.fail {
            None => Ok(PushReport {
                points: 10,
                requests: 1,
            }),
            Some(reason) => Err(PushError {
                reason: reason.into(),
                message: "injected".into(),
                sent: PushReport {
                    points: 4,
                    requests: 1,
                },
            }),
        }
    }
}

fn published(store: &Store) -> Arc<Published> {
    store.node().record_node_usage(
        "host",
        UsageSample {
            node: "n1".into(),
            at: SystemTime::now(),
            values: vec![(Resource::Cpu, 0.5)],
        },
    );
    Arc::new(Published::render(
        Arc::new(store.snapshot(SystemTime::now())),
        "host",
    ))
}

fn schedule(interval_ms: u64, timeout_ms: u64) -> SinkSchedule {
    SinkSchedule {
        interval: Duration::from_millis(interval_ms),
        timeout: Duration::from_millis(timeout_ms),
        final_push: Duration::from_secs(2),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pushes_every_tick_and_once_more_at_shutdown() {
    let store = Arc::new(Store::new());
    let (tx, rx) = watch::channel(published(&store));
    let sink = TestSink::new(Duration::ZERO, None);
    let cancel = CancellationToken::new();
    let task = tokio::spawn(run_sink(
        sink.clone(),
        schedule(100, 1000),
        rx,
        store.clone(),
        None,
        cancel.clone(),
    ));
    tokio::time::sleep(Duration::from_millis(550)).await;
    let before = sink.pushes.load(Ordering::SeqCst);
    assert!(
        (3..=6).contains(&before),
        "about one push per 100 ms: {before}"
    );
    // A newer snapshot, then shutdown: the final push carries it.
    tx.send_replace(published(&store));
    let newest = tx.borrow().snapshot.tick;
    cancel.cancel();
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        sink.last_tick.load(Ordering::SeqCst),
        newest,
        "the final push sent the newest snapshot"
    );
    let st = &store.snapshot(SystemTime::now()).sinks["test"];
    assert_eq!(st.pushes, sink.pushes.load(Ordering::SeqCst));
    assert_eq!((st.points, st.requests), (st.pushes * 10, st.pushes));
    assert!(st.last_success.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_sink_skips_ticks_and_never_slows_the_endpoints() {
    let store = Arc::new(Store::new());
    let (_tx, rx) = watch::channel(published(&store));
    let sink = TestSink::new(Duration::from_secs(30), None);
    let cancel = CancellationToken::new();
    let task = tokio::spawn(run_sink(
        sink.clone(),
        SinkSchedule {
            final_push: Duration::from_millis(200),
            ..schedule(50, 20_000)
        },
        rx.clone(),
        store.clone(),
        None,
        cancel.clone(),
    ));

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let state = AppState {
        published: rx,
        stale_after: Duration::from_secs(3600),
    };
    tokio::spawn(async move { axum::serve(listener, server::router(state)).await });
    let http = reqwest::Client::new();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut slowest = Duration::ZERO;
    for _ in 0..20 {
        for path in ["/metrics", "/watcher"] {
            let t = Instant::now();
            let r = http
                .get(format!("http://{addr}{path}"))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
            r.bytes().await.unwrap();
            slowest = slowest.max(t.elapsed());
        }
    }
    assert!(
        slowest < Duration::from_millis(500),
        "a hanging sink slowed the endpoints: {slowest:?}"
    );
    let skipped = store.snapshot(SystemTime::now()).sinks["test"].skipped;
    assert!(skipped >= 3, "skipped ticks counted: {skipped}");
    cancel.cancel();
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        sink.pushes.load(Ordering::SeqCst),
        0,
        "the hung push never completed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_and_timeouts_are_counted_by_reason() {
    let store = Arc::new(Store::new());
    let (_tx, rx) = watch::channel(published(&store));
    let cancel = CancellationToken::new();
    let failing = TestSink::new(Duration::ZERO, Some("unavailable"));
    let t1 = tokio::spawn(run_sink(
        failing,
        schedule(50, 1000),
        rx.clone(),
        store.clone(),
        None,
        cancel.clone(),
    ));
    tokio::time::sleep(Duration::from_millis(300)).await;
    cancel.cancel();
    t1.await.unwrap();
    let st = store.snapshot(SystemTime::now()).sinks["test"].clone();
    assert!(st.failures["unavailable"] >= 3, "{st:?}");
    assert_eq!(st.points, st.pushes * 4, "partly sent points still count");
    assert!(st.last_success.is_none());

    let store = Arc::new(Store::new());
    let (_tx, rx) = watch::channel(published(&store));
    let cancel = CancellationToken::new();
    let slow = TestSink::new(Duration::from_millis(500), None);
    let t2 = tokio::spawn(run_sink(
        slow,
        SinkSchedule {
            final_push: Duration::ZERO,
            ..schedule(50, 100)
        },
        rx,
        store.clone(),
        None,
        cancel.clone(),
    ));
    tokio::time::sleep(Duration::from_millis(400)).await;
    cancel.cancel();
    t2.await.unwrap();
    let st = &store.snapshot(SystemTime::now()).sinks["test"];
    assert!(st.failures["timeout"] >= 1, "{st:?}");
}

/// CPU time (user + system) of this process so far.
fn process_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<u64> = after
        .split_whitespace()
        .skip(11)
        .take(2)
        .map(|x| x.parse().unwrap())
        .collect();
    // CLK_TCK is 100 on Linux.
    Duration::from_millis((f[0] + f[1]) * 10)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_the_lease_aborts_a_cluster_push_and_a_gone_elector_means_instance_only() {
    let store = Arc::new(Store::new());
    let (_tx, rx) = watch::channel(published(&store));
    let (lead_tx, lead_rx) = watch::channel(true);
    let cancel = CancellationToken::new();
    // Cluster-level pushes hang for 10 s; instance-only ones return at once.
    let sink = TestSink::new(Duration::from_secs(10), None);
    let task = tokio::spawn(run_sink(
        sink.clone(),
        schedule(50, 20_000),
        rx,
        store.clone(),
        Some(lead_rx),
        cancel.clone(),
    ));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(*sink.scopes.lock().unwrap(), [PushScope::All]);

    // The Lease is lost while that push runs: it is aborted at once and counted.
    lead_tx.send(false).unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let st = store.snapshot(SystemTime::now()).sinks["test"].clone();
    assert_eq!(st.failures.get("lost_lease"), Some(&1), "{st:?}");
    assert!(
        sink.scopes.lock().unwrap()[1..]
            .iter()
            .all(|s| *s == PushScope::InstanceOnly),
        "only this instance's series after the loss"
    );

    // The elector goes away: still instance-only, and the runner does not spin.
    drop(lead_tx);
    let (cpu0, before) = (process_cpu(), sink.scopes.lock().unwrap().len());
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let cpu = process_cpu() - cpu0;
    let scopes = sink.scopes.lock().unwrap().clone();
    assert!(scopes.len() > before + 5, "pushes go on: {scopes:?}");
    assert!(scopes[1..].iter().all(|s| *s == PushScope::InstanceOnly));
    assert!(
        cpu < Duration::from_millis(500),
        "busy loop: {cpu:?} CPU in 1 s"
    );
    cancel.cancel();
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .unwrap()
        .unwrap();
}
