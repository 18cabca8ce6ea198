//! The push-output runner: ticks, skipped ticks while a push hangs (without touching /metrics
//! or /watcher latency), failures by reason, timeouts, and the final push at shutdown.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use kube_prober::hub::{Provider, Store};
use kube_prober::model::{Resource, Snapshot, UsageSample};
use kube_prober::outputs::published::Published;
use kube_prober::outputs::push::{SinkSchedule, run_sink};
use kube_prober::outputs::{PushError, PushReport, PushScope, Sink};
use kube_prober::serve::server::{self, AppState};
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

/// Waits until `f` holds, polling; panics naming `what` after 30 s (real time).
async fn until(what: &str, f: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn schedule(interval_ms: u64, timeout_ms: u64) -> SinkSchedule {
    SinkSchedule {
        interval: Duration::from_millis(interval_ms),
        timeout: Duration::from_millis(timeout_ms),
        final_push: Duration::from_secs(2),
    }
}

/// Paused time (these tests make no I/O): the runner's ticks and the sinks' sleeps happen at
/// exact instants, so counts are exact and never depend on how busy the machine is.
#[tokio::test(start_paused = true)]
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
    // Ticks at 100, 200, ..., 500 ms (the first push waits one interval).
    tokio::time::sleep(Duration::from_millis(550)).await;
    let before = sink.pushes.load(Ordering::SeqCst);
    assert_eq!(before, 5, "one push per 100 ms");
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
    assert_eq!(
        sink.pushes.load(Ordering::SeqCst),
        before + 1,
        "one final push"
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
    // The push hangs for an hour: every request below is answered while it hangs.
    let sink = TestSink::new(Duration::from_secs(3600), None);
    let cancel = CancellationToken::new();
    let task = tokio::spawn(run_sink(
        sink.clone(),
        SinkSchedule {
            final_push: Duration::from_millis(200),
            ..schedule(50, 7_200_000)
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
    // The push has started and ticks are being skipped behind it.
    let skipped = || {
        store
            .snapshot(SystemTime::now())
            .sinks
            .get("test")
            .map_or(0, |s| s.skipped)
    };
    until("three skipped ticks", || skipped() >= 3).await;
    assert_eq!(*sink.scopes.lock().unwrap(), [PushScope::All]);
    for _ in 0..20 {
        for path in ["/metrics", "/watcher"] {
            let r = http
                .get(format!("http://{addr}{path}"))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
            r.bytes().await.unwrap();
        }
    }
    // Answered while the push still hangs (the push below never completed), so serving never
    // waits for a push; the ticks behind it are counted as skipped.
    assert_eq!(sink.pushes.load(Ordering::SeqCst), 0);
    assert_eq!(sink.scopes.lock().unwrap().len(), 1, "no second push");
    assert!(skipped() >= 3);
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

#[tokio::test(start_paused = true)]
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
    // Pushes at 50, 100, ..., 250 ms, then the final one.
    tokio::time::sleep(Duration::from_millis(275)).await;
    cancel.cancel();
    t1.await.unwrap();
    let st = store.snapshot(SystemTime::now()).sinks["test"].clone();
    assert_eq!(st.failures["unavailable"], 6, "{st:?}");
    assert_eq!(st.pushes, 6, "{st:?}");
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
    // The push started at 50 ms times out at 150 ms; the next (at 150 or 200 ms: that tick and
    // the timeout fall on one instant) times out by 300 ms; the third is cut by the shutdown.
    tokio::time::sleep(Duration::from_millis(325)).await;
    cancel.cancel();
    t2.await.unwrap();
    let st = &store.snapshot(SystemTime::now()).sinks["test"];
    assert_eq!(st.failures["timeout"], 2, "{st:?}");
    assert!(st.last_success.is_none(), "{st:?}");
}

/// Runs `f` on a current-thread runtime with paused time, on its own thread, and waits up to
/// `limit` of real time for it. Paused time only advances when every task is idle, so a task
/// that spins (busy loop) keeps the clock still and `f` never finishes: that is reported as
/// a failure instead of a hang.
fn paused<F: std::future::Future<Output = ()> + Send + 'static>(limit: Duration, f: F) {
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let runner = std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap()
            .block_on(f);
        let _ = done_tx.send(());
    });
    match done_rx.recv_timeout(limit) {
        Ok(()) => runner.join().unwrap(),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            // `f` panicked: report its panic.
            if let Err(p) = runner.join() {
                std::panic::resume_unwind(p);
            }
        }
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            panic!("paused time did not advance for {limit:?}: a task spins")
        }
    }
}

#[test]
fn losing_the_lease_aborts_a_cluster_push_and_a_gone_elector_means_instance_only() {
    paused(
        Duration::from_secs(60),
        losing_the_lease_aborts_a_cluster_push_and_a_gone_elector_means_instance_only_(),
    );
}

async fn losing_the_lease_aborts_a_cluster_push_and_a_gone_elector_means_instance_only_() {
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
    // Every sleep here ends between two ticks (50 ms apart), never at one.
    tokio::time::sleep(Duration::from_millis(225)).await;
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

    // The elector goes away: still instance-only, one push per tick, and the runner does not
    // spin (it would stop paused time from advancing: `paused` reports that).
    drop(lead_tx);
    let before = sink.scopes.lock().unwrap().len();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let scopes = sink.scopes.lock().unwrap().clone();
    assert_eq!(
        scopes.len(),
        before + 20,
        "one push per 50 ms tick: {scopes:?}"
    );
    assert!(scopes[1..].iter().all(|s| *s == PushScope::InstanceOnly));
    cancel.cancel();
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .unwrap()
        .unwrap();
}
