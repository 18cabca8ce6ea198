//! Faults of the Kubernetes API server, through kube-runtime's real watchers over HTTP against
//! the stand-in API server: LIST answered 500 and 429 with `Retry-After`, a watch cut
//! mid-event, a cleanly dropped watch, a 410 after compaction, and the API server failing at
//! start. Each asserts the exact final state, the measured retry intervals and the
//! restart/relist counters, and prints the time to converge (`converged_in_ms=`).

use support::apiserver;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use apiserver::{ApiServer, Fault, Kind, Verb};
use k8s_openapi::api::core::v1::{
    ContainerStatus, Node, NodeCondition, NodeStatus, Pod, PodSpec, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kube_prober::hub::{Provider, RunOutcome, Store};
use kube_prober::model::{ClusterState, Snapshot};
use kube_prober::outputs::published::Published;
use kube_prober::serve::server::{self, AppState};
use kube_prober::sources::cluster::derive::DeriveConfig;
use kube_prober::sources::cluster::watchers::{InitialList, PodScope, Scope, WatchConfig, spawn};
use tokio_util::sync::CancellationToken;

fn node(name: &str) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            creation_timestamp: Some(Time(
                k8s_openapi::jiff::Timestamp::from_second(1_600_000_000).unwrap(),
            )),
            ..Default::default()
        },
        spec: None,
        status: Some(NodeStatus {
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: "True".into(),
                ..Default::default()
            }]),
            ..Default::default()
        }),
    }
}

fn pod(name: &str, node: &str, restarts: i32) -> Pod {
    Pod {
        // An addon pod: only those carry restart rows into the cluster state.
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("kube-system".into()),
            annotations: Some(
                [
                    ("components.gke.io/component-name", "fluentbit"),
                    ("components.gke.io/component-version", "2.1"),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ),
            owner_references: Some(vec![OwnerReference {
                api_version: "apps/v1".into(),
                kind: "DaemonSet".into(),
                name: "fluentbit".into(),
                uid: "u1".into(),
                controller: Some(true),
                ..Default::default()
            }]),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: Some(node.into()),
            ..Default::default()
        }),
        status: Some(PodStatus {
            phase: Some("Running".into()),
            container_statuses: Some(vec![ContainerStatus {
                name: "c".into(),
                restart_count: restarts,
                ..Default::default()
            }]),
            ..Default::default()
        }),
    }
}

/// Nodes and pods only (no workload namespaces), no bookmarks (a bookmark would carry a
/// watcher past a compaction; see `ClusterState::compact`).
async fn setup() -> ApiServer {
    apiserver::start_with(apiserver::Options {
        bookmark_interval: Duration::from_secs(3600),
        ..Default::default()
    })
    .await
}

fn start(
    api: &ApiServer,
) -> (
    Arc<Store>,
    CancellationToken,
    Vec<tokio::task::JoinHandle<()>>,
) {
    let store = Arc::new(Store::new());
    let cancel = CancellationToken::new();
    let (_stores, tasks) = spawn(
        api.client(),
        WatchConfig {
            scope: Scope::Cluster {
                namespaces: vec![],
                pods: PodScope::All,
                workloads: true,
            },
            derive: DeriveConfig::default(),
            interval: Duration::from_millis(50),
            initial_list: InitialList::Paged,
        },
        store.clone(),
        cancel.clone(),
    );
    (store, cancel, tasks)
}

async fn stop(cancel: CancellationToken, tasks: Vec<tokio::task::JoinHandle<()>>) {
    cancel.cancel();
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(5), t)
            .await
            .expect("the watcher stops on cancel")
            .expect("the watcher task did not panic");
    }
}

/// Polls the hub until `ok` holds (bounded); returns the state and how long it took.
async fn until(
    store: &Store,
    what: &str,
    limit: Duration,
    ok: impl Fn(&ClusterState) -> bool,
) -> (Arc<ClusterState>, Duration) {
    let started = Instant::now();
    loop {
        if let Some(cs) = store.snapshot(SystemTime::now()).cluster_state
            && ok(&cs)
        {
            return (cs, started.elapsed());
        }
        assert!(started.elapsed() < limit, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until `n` watch streams are open: a watcher whose LIST is done may not have sent its
/// WATCH yet, and a fault injected before that would miss it.
async fn watches_open(api: &ApiServer, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while api.open_watches() != n {
        assert!(
            Instant::now() < deadline,
            "{} watches open, not {n}",
            api.open_watches()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn node_names(cs: &ClusterState) -> Vec<String> {
    let mut v: Vec<_> = cs.nodes.iter().map(|n| n.name.clone()).collect();
    v.sort();
    v
}

/// (pod, restarts), sorted: a duplicate or a ghost shows as an extra row.
fn pod_rows(cs: &ClusterState) -> Vec<(String, u32)> {
    let mut v: Vec<_> = cs
        .restarts
        .iter()
        .map(|p| (p.pod.to_string(), p.containers[0].restarts))
        .collect();
    v.sort();
    v
}

fn counts(store: &Store, source: &str) -> (BTreeMap<String, u64>, BTreeMap<String, u64>) {
    let snap = store.snapshot(SystemTime::now());
    let s = &snap.sources[source];
    (s.watch_restarts.clone(), s.relists.clone())
}

fn map(kv: &[(&str, u64)]) -> BTreeMap<String, u64> {
    kv.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

/// When each LIST (not WATCH) of `path` came.
fn list_times(api: &ApiServer, path: &str) -> Vec<Instant> {
    api.timed_requests()
        .into_iter()
        .filter(|(_, r)| {
            r.path == path && !r.query.as_deref().unwrap_or_default().contains("watch=")
        })
        .map(|(t, _)| t.into_std())
        .collect()
}

fn ms(d: Duration) -> u128 {
    d.as_millis()
}

/// LIST answered 429 `Retry-After: 2`, then 500 twice: the first retry waits for the server's
/// 2 s (the backoff alone would be 0.8–1.6 s), the next ones grow (1.6–3.2 s, 3.2–6.4 s): no
/// reset on the `Init` that precedes every relist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_failures_back_off_growing_and_honour_retry_after() {
    let api = setup().await;
    api.upsert(&node("n1"));
    api.upsert(&node("n2"));
    api.upsert(&pod("p1", "n1", 0));
    api.fail_in_turn(
        Kind::of::<Node>(),
        Verb::List,
        vec![
            Fault::too_many_requests(2),
            Fault::internal("etcd timeout"),
            Fault::internal("etcd timeout"),
        ],
    );
    let started = Instant::now();
    let (store, cancel, tasks) = start(&api);

    // Before the nodes are listed the watchers are not all synced (readiness waits).
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!store.snapshot(SystemTime::now()).sources_synced);

    let (cs, _) = until(
        &store,
        "nodes listed after the faults",
        Duration::from_secs(30),
        |cs| cs.nodes.len() == 2,
    )
    .await;
    let converged = started.elapsed();
    assert_eq!(node_names(&cs), ["n1", "n2"]);
    assert_eq!(pod_rows(&cs), [("p1".to_string(), 0)]);

    let t = list_times(&api, "/api/v1/nodes");
    assert_eq!(t.len(), 4, "three failed lists and one good one");
    let gaps: Vec<Duration> = t.windows(2).map(|w| w[1] - w[0]).collect();
    println!(
        "list_retry_gaps_ms={:?} converged_in_ms={}",
        gaps.iter().map(|d| ms(*d)).collect::<Vec<_>>(),
        ms(converged)
    );
    // Lower bounds are exact (a timer never fires early); upper bounds allow 2 s of scheduling
    // slack on a loaded machine over the jittered maximum (2× the base).
    let tol = Duration::from_millis(5);
    assert!(
        gaps[0] + tol >= Duration::from_secs(2),
        "Retry-After: 2 honoured: {gaps:?}"
    );
    assert!(gaps[0] < Duration::from_millis(1600 + 2000), "{gaps:?}");
    assert!(
        gaps[1] + tol >= Duration::from_millis(1600),
        "grown to 1.6 s: {gaps:?}"
    );
    assert!(gaps[1] < Duration::from_millis(3200 + 2000), "{gaps:?}");
    assert!(
        gaps[2] + tol >= Duration::from_millis(3200),
        "grown to 3.2 s: {gaps:?}"
    );
    assert!(gaps[2] < Duration::from_millis(6400 + 2000), "{gaps:?}");

    let (restarts, relists) = counts(&store, "watch_nodes");
    assert_eq!(relists, map(&[("list_failed", 3)]));
    assert_eq!(restarts, map(&[]));
    let snap = store.snapshot(SystemTime::now());
    assert!(snap.sources_synced);
    assert!(snap.sources["watch_nodes"].up);
    assert_eq!(
        snap.sources["watch_nodes"].errors["http"], 3,
        "LIST answered 500, 500, 429: http"
    );
    assert_eq!(snap.sources["watch_pods"].relists, map(&[]));
    stop(cancel, tasks).await;
}

/// A watch cut mid-event, a dropped watch whose re-watch fails twice, and a 410 after
/// compaction: every change is seen exactly once, and each recovery is counted by resource and
/// reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cut_dropped_and_expired_watches_end_equal_to_the_server() {
    let api = setup().await;
    for n in ["n1", "n2", "n3"] {
        api.upsert(&node(n));
    }
    api.upsert(&pod("p1", "n1", 0));
    api.upsert(&pod("p2", "n2", 0));
    let (store, cancel, tasks) = start(&api);
    let limit = Duration::from_secs(15);
    until(&store, "initial list", limit, |cs| {
        cs.nodes.len() == 3 && cs.restarts.len() == 2
    })
    .await;

    // Cut mid-event (half an event line, then the body fails). kube-client ends the stream
    // on the unexpected EOF as it does on a clean close ("resumable"), so the watchers
    // re-watch at once from their resource version (no relist) and count it as `closed`.
    watches_open(&api, 2).await;
    api.cut_watches();
    api.upsert(&pod("p1", "n1", 1));
    api.upsert(&pod("p3", "n3", 0));
    api.delete::<Node>("", "n2");
    let (cs, took) = until(&store, "changes after the cut", limit, |cs| {
        pod_rows(cs).len() == 3 && cs.nodes.len() == 2 && pod_rows(cs)[0].1 == 1
    })
    .await;
    println!("fault=watch_cut_mid_event converged_in_ms={}", ms(took));
    assert_eq!(node_names(&cs), ["n1", "n3"]);
    assert_eq!(
        pod_rows(&cs),
        [("p1".into(), 1), ("p2".into(), 0), ("p3".into(), 0)]
    );
    for s in ["watch_nodes", "watch_pods"] {
        let (restarts, relists) = counts(&store, s);
        assert_eq!(restarts, map(&[("closed", 1)]), "{s}");
        assert_eq!(relists, map(&[]), "{s}");
    }

    // Dropped cleanly, and the next two WATCH requests for nodes answered 500: the re-watch
    // backs off (0.8–1.6 s, then 1.6–3.2 s) and resumes from its resource version.
    watches_open(&api, 2).await;
    api.fail_in_turn(
        Kind::of::<Node>(),
        Verb::Watch,
        vec![Fault::internal("boom"), Fault::internal("boom")],
    );
    let dropped_at = Instant::now();
    api.drop_watches();
    api.upsert(&pod("p2", "n2", 4));
    api.upsert(&node("n4"));
    let (cs, took) = until(&store, "changes after the drop", limit, |cs| {
        cs.nodes.len() == 3 && pod_rows(cs).iter().any(|p| p.1 == 4)
    })
    .await;
    println!(
        "fault=watch_dropped_then_watch_500x2 converged_in_ms={}",
        ms(took)
    );
    let watches: Vec<Instant> = api
        .timed_requests()
        .into_iter()
        .filter(|(t, r)| {
            *t >= dropped_at.into()
                && r.path == "/api/v1/nodes"
                && r.query.as_deref().unwrap_or_default().contains("watch=")
        })
        .map(|(t, _)| t.into_std())
        .collect();
    let gaps: Vec<Duration> = watches.windows(2).map(|w| w[1] - w[0]).collect();
    println!(
        "watch_retry_gaps_ms={:?}",
        gaps.iter().map(|d| ms(*d)).collect::<Vec<_>>()
    );
    assert_eq!(gaps.len(), 2, "two failed WATCH requests, then a good one");
    let tol = Duration::from_millis(5);
    assert!(gaps[0] + tol >= Duration::from_millis(800), "{gaps:?}");
    assert!(gaps[0] < Duration::from_millis(1600 + 2000), "{gaps:?}");
    assert!(gaps[1] + tol >= Duration::from_millis(1600), "{gaps:?}");
    assert!(gaps[1] < Duration::from_millis(3200 + 2000), "{gaps:?}");
    assert_eq!(node_names(&cs), ["n1", "n3", "n4"]);
    assert_eq!(
        pod_rows(&cs),
        [("p1".into(), 1), ("p2".into(), 4), ("p3".into(), 0)]
    );
    let (restarts, relists) = counts(&store, "watch_nodes");
    assert_eq!(restarts, map(&[("closed", 2), ("error", 2)]));
    assert_eq!(relists, map(&[]));
    let (restarts, relists) = counts(&store, "watch_pods");
    assert_eq!(restarts, map(&[("closed", 2)]));
    assert_eq!(relists, map(&[]));

    // History compacted, streams dropped: the resumed watch gets 410, the watcher relists and
    // a deletion it never saw as an event (p1, n1) is gone after the relist.
    watches_open(&api, 2).await;
    let expired_at = Instant::now();
    api.compact();
    api.drop_watches();
    api.delete::<Pod>("kube-system", "p1");
    api.delete::<Node>("", "n1");
    let (cs, took) = until(&store, "relist after 410", limit, |cs| {
        cs.nodes.len() == 2 && cs.restarts.len() == 2
    })
    .await;
    println!(
        "fault=watch_410 converged_in_ms={} since_compaction_ms={}",
        ms(took),
        ms(expired_at.elapsed())
    );
    assert_eq!(node_names(&cs), ["n3", "n4"]);
    assert_eq!(pod_rows(&cs), [("p2".into(), 4), ("p3".into(), 0)]);
    // The re-watch that met the 410 is a restart after a clean end; the relist follows.
    let (restarts, relists) = counts(&store, "watch_nodes");
    assert_eq!(restarts, map(&[("closed", 3), ("error", 2)]));
    assert_eq!(relists, map(&[("expired", 1)]));
    let (restarts, relists) = counts(&store, "watch_pods");
    assert_eq!(restarts, map(&[("closed", 3)]));
    assert_eq!(relists, map(&[("expired", 1)]));
    let snap = store.snapshot(SystemTime::now());
    assert_eq!(snap.sources["watch_pods"].runs, 3, "list, 410, relist");
    stop(cancel, tasks).await;
}

async fn serve_published(
    rx: tokio::sync::watch::Receiver<Arc<Published>>,
) -> (String, tokio::task::JoinHandle<()>) {
    let state = AppState {
        published: rx,
        stale_after: Duration::from_secs(3600),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, server::router(state)).await;
    });
    (format!("http://{addr}"), task)
}

/// The API server fails every LIST at start: `/readyz` is 503 and names the watchers it waits
/// for, although each has run (and failed); a usage source that ran and failed does not hold
/// readiness back. Once the API server answers, `/readyz` turns 200.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_waits_for_every_watchers_first_good_list_not_for_failed_fetchers() {
    let api = setup().await;
    api.upsert(&node("n1"));
    api.upsert(&pod("p1", "n1", 0));
    for kind in [Kind::of::<Node>(), Kind::of::<Pod>()] {
        api.fail_verb(kind, Verb::List, Fault::unavailable("etcd is down"));
    }
    let (store, cancel, tasks) = start(&api);
    // A usage source that ran and failed.
    store.source().register_source("metrics_server");
    store.source().record_source_run(
        "metrics_server",
        SystemTime::now(),
        Duration::from_millis(3),
        RunOutcome::Failed {
            reason: "http".into(),
            message: "connection refused".into(),
        },
    );
    let (tx, rx) = tokio::sync::watch::channel(Arc::new(Published::render(
        Arc::new(Snapshot::empty(SystemTime::now())),
        "metrics_server",
    )));
    let ticker = {
        let store = store.clone();
        tokio::spawn(async move {
            loop {
                let snap = Arc::new(store.snapshot(SystemTime::now()));
                let _ = tx.send(Arc::new(Published::render(snap, "metrics_server")));
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    let (base, server) = serve_published(rx).await;
    let http = reqwest::Client::new();
    let readyz = || async {
        let r = http.get(format!("{base}/readyz")).send().await.unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    };

    // Wait until both watchers have failed at least once (they have run), then check.
    let deadline = Instant::now() + Duration::from_secs(10);
    while ["watch_nodes", "watch_pods"].iter().any(|s| {
        store
            .snapshot(SystemTime::now())
            .sources
            .get(*s)
            .is_none_or(|st| st.errors.is_empty())
    }) {
        assert!(Instant::now() < deadline, "the watchers never ran");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(120)).await;
    let (code, body) = readyz().await;
    assert_eq!(code, 503, "{body}");
    assert_eq!(
        body,
        "not ready: waiting for the first successful list of: watch_nodes, watch_pods\n"
    );

    let healed = Instant::now();
    for kind in [Kind::of::<Node>(), Kind::of::<Pod>()] {
        api.heal(kind);
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (code, body) = readyz().await;
        if code == 200 {
            assert_eq!(body, "ready\n");
            break;
        }
        assert!(Instant::now() < deadline, "never ready: {body}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!(
        "fault=apiserver_down_at_start ready_after_heal_ms={}",
        ms(healed.elapsed())
    );
    // The failed usage source still shows where it should.
    let r = http
        .get(format!("{base}/watcher/health"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    ticker.abort();
    server.abort();
    stop(cancel, tasks).await;
}
