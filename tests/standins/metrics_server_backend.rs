//! The metrics-server backend through a real kube client, over HTTP, against a stand-in API
//! server, into the hub and out of `/watcher` as Trimaran decodes it.

use support::apiserver;

use std::time::{Duration, SystemTime};

use apiserver::{ApiServer, Fault, Kind, NODE_METRICS_PATH, NODES_PATH, node, node_metrics};
use kube_prober::hub::{RunOutcome, Store};
use kube_prober::k8s::client::client_from_config;
use kube_prober::model::NodeCapacity;
use kube_prober::shared::limit::DEFAULT_MAX_RESPONSE_BYTES;
use kube_prober::sources::usage::metrics_server::{MetricsServerConfig, MetricsServerFetcher};
use kube_prober::sources::usage::{UsageFetcher, run_once};
use kube_prober::watcher::{WatcherConfig, WatcherMetrics, render};

const TIMEOUT: Duration = Duration::from_secs(10);
const GI: f64 = 1024.0 * 1024.0 * 1024.0;

/// Now, to the second (API times have whole seconds).
fn now_s() -> SystemTime {
    let s = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    SystemTime::UNIX_EPOCH + Duration::from_secs(s)
}

fn secs(t: SystemTime) -> i64 {
    t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs() as i64
}

/// The config with `use_allocatable` and every other field at its default (the per-item cap
/// the binary uses).
fn config(use_allocatable: bool) -> MetricsServerConfig {
    MetricsServerConfig {
        use_allocatable,
        ..Default::default()
    }
}

fn fetcher(api: &ApiServer, use_allocatable: bool) -> MetricsServerFetcher {
    MetricsServerFetcher::new(api.client(), config(use_allocatable))
}

fn watcher(store: &Store) -> Option<WatcherMetrics> {
    render(&store.snapshot(SystemTime::now()), WatcherConfig::default())
        .map(|b| serde_json::from_slice(&b.all()).unwrap())
}

/// The value of `kind`/`operator` for `host` on `/watcher`.
fn value(w: &WatcherMetrics, host: &str, kind: &str, operator: &str) -> Option<f64> {
    w.data
        .node_metrics_map
        .get(host)?
        .metrics
        .iter()
        .find(|m| m.kind == kind && m.operator == operator)
        .map(|m| m.value)
}

fn hosts(w: &WatcherMetrics) -> Vec<&str> {
    w.data.node_metrics_map.keys().map(String::as_str).collect()
}

fn assert_near(got: Option<f64>, want: f64) {
    let got = got.expect("value present");
    assert!((got - want).abs() < 1e-9, "got {got}, want {want}");
}

fn failed(outcome: RunOutcome) -> (String, String) {
    match outcome {
        RunOutcome::Failed { reason, message } => (reason, message),
        other => panic!("expected a failed run, got {other:?}"),
    }
}

#[tokio::test]
async fn usage_over_capacity_is_served_as_exact_percentages() {
    let api = apiserver::start().await;
    let t = now_s();
    api.set_nodes(vec![
        node("worker-1", ("4", "8Gi"), ("2", "4Gi")),
        node("worker-2", ("2", "4028440Ki"), ("1930m", "3926040Ki")),
    ]);
    api.set_node_metrics(vec![
        node_metrics("worker-1", "1", "2Gi", t),
        node_metrics("worker-2", "487558164n", "732212Ki", t),
    ]);
    let store = Store::new();
    let mut f = fetcher(&api, false);
    assert_eq!(f.name(), "metrics_server");
    assert_eq!(run_once(&mut f, &store, TIMEOUT).await, RunOutcome::Ok);

    let w = watcher(&store).expect("/watcher has data");
    assert_eq!(w.source, "KubernetesMetricsServer");
    assert_eq!(w.window.duration, "15m");
    assert_eq!(
        w.window.end,
        secs(t),
        "the data stands for the NodeMetrics timestamp"
    );
    assert_eq!(hosts(&w), ["worker-1", "worker-2"]);
    assert_eq!(value(&w, "worker-1", "CPU", "Latest"), Some(25.0));
    assert_eq!(value(&w, "worker-1", "Memory", "Latest"), Some(25.0));
    assert_eq!(value(&w, "worker-1", "CPU", "AVG"), Some(25.0));
    assert_eq!(value(&w, "worker-1", "CPU", "STD"), Some(0.0));
    assert_near(
        value(&w, "worker-2", "CPU", "Latest"),
        100.0 * 0.487558164 / 2.0,
    );
    assert_near(
        value(&w, "worker-2", "Memory", "Latest"),
        100.0 * 732_212.0 / 4_028_440.0,
    );

    let snap = store.snapshot(SystemTime::now());
    assert_eq!(
        snap.nodes["worker-1"].capacity,
        Some(NodeCapacity {
            cpu_cores: 4.0,
            memory_bytes: 8.0 * GI
        })
    );

    // One LIST page of each per round (pages of at most 500 items bound every response).
    let reqs = api.requests();
    assert_eq!(reqs.len(), 2, "{reqs:?}");
    assert_eq!(api.hits(NODE_METRICS_PATH), 1);
    let nodes = reqs.iter().find(|r| r.path == NODES_PATH).unwrap();
    assert!(
        nodes
            .query
            .as_deref()
            .unwrap_or_default()
            .contains("limit=500"),
        "{nodes:?}"
    );
}

#[tokio::test]
async fn usage_over_allocatable_when_configured() {
    let api = apiserver::start().await;
    let t = now_s();
    api.set_nodes(vec![node("worker-1", ("4", "8Gi"), ("2", "4Gi"))]);
    api.set_node_metrics(vec![node_metrics("worker-1", "1", "2Gi", t)]);
    let store = Store::new();
    let mut f = fetcher(&api, true);
    assert_eq!(run_once(&mut f, &store, TIMEOUT).await, RunOutcome::Ok);
    let w = watcher(&store).unwrap();
    assert_eq!(value(&w, "worker-1", "CPU", "Latest"), Some(50.0));
    assert_eq!(value(&w, "worker-1", "Memory", "Latest"), Some(50.0));
    let snap = store.snapshot(SystemTime::now());
    assert_eq!(
        snap.nodes["worker-1"].capacity,
        Some(NodeCapacity {
            cpu_cores: 2.0,
            memory_bytes: 4.0 * GI
        })
    );
}

#[tokio::test]
async fn metrics_of_a_node_not_in_the_node_list_are_skipped() {
    let api = apiserver::start().await;
    let t = now_s();
    api.set_nodes(vec![node("worker-1", ("4", "8Gi"), ("4", "8Gi"))]);
    api.set_node_metrics(vec![
        node_metrics("deleted-node", "3", "6Gi", t),
        node_metrics("worker-1", "1", "2Gi", t),
    ]);
    let store = Store::new();
    let mut f = fetcher(&api, false);
    assert_eq!(run_once(&mut f, &store, TIMEOUT).await, RunOutcome::Ok);
    let w = watcher(&store).unwrap();
    assert_eq!(hosts(&w), ["worker-1"]);
    let snap = store.snapshot(SystemTime::now());
    assert!(!snap.nodes.contains_key("deleted-node"));
}

#[tokio::test]
async fn metrics_api_unavailable_fails_the_run_and_keeps_the_last_data() {
    let api = apiserver::start().await;
    let t = now_s();
    api.set_nodes(vec![node("worker-1", ("4", "8Gi"), ("4", "8Gi"))]);
    api.set_node_metrics(vec![node_metrics("worker-1", "1", "2Gi", t)]);
    let store = Store::new();
    let mut f = fetcher(&api, false);
    assert_eq!(run_once(&mut f, &store, TIMEOUT).await, RunOutcome::Ok);

    api.fail(
        Kind::NodeMetrics,
        Fault::unavailable("the server is currently unable to handle the request"),
    );
    let (reason, message) = failed(run_once(&mut f, &store, TIMEOUT).await);
    assert_eq!(reason, "http");
    assert!(message.contains("metrics.k8s.io"), "{message}");
    assert!(
        message.contains("503 ServiceUnavailable: the server is currently unable"),
        "kube's Status kept: {message}"
    );
    let w = watcher(&store).expect("earlier data still served");
    assert_eq!(value(&w, "worker-1", "CPU", "Latest"), Some(25.0));
    assert_eq!(w.window.end, secs(t));
    let status = &store.snapshot(SystemTime::now()).sources["metrics_server"];
    assert_eq!(status.runs, 2, "{status:?}");

    api.heal(Kind::NodeMetrics);
    api.set_node_metrics(vec![node_metrics(
        "worker-1",
        "2",
        "2Gi",
        t + Duration::from_secs(30),
    )]);
    assert_eq!(run_once(&mut f, &store, TIMEOUT).await, RunOutcome::Ok);
    let w = watcher(&store).unwrap();
    assert_eq!(value(&w, "worker-1", "CPU", "Latest"), Some(50.0));
}

#[tokio::test]
async fn two_rounds_give_avg_and_std() {
    let api = apiserver::start().await;
    let t1 = now_s();
    let t0 = t1 - Duration::from_secs(60);
    api.set_nodes(vec![node("worker-1", ("10", "10Gi"), ("10", "10Gi"))]);
    let store = Store::new();
    let mut f = fetcher(&api, false);

    api.set_node_metrics(vec![node_metrics("worker-1", "2", "5Gi", t0)]);
    assert_eq!(run_once(&mut f, &store, TIMEOUT).await, RunOutcome::Ok);
    api.set_node_metrics(vec![node_metrics("worker-1", "8000m", "5Gi", t1)]);
    assert_eq!(run_once(&mut f, &store, TIMEOUT).await, RunOutcome::Ok);

    let w = watcher(&store).unwrap();
    assert_eq!(w.window.end, secs(t1));
    assert_eq!(w.window.start, secs(t1) - 15 * 60);
    assert_near(value(&w, "worker-1", "CPU", "Latest"), 80.0);
    assert_near(value(&w, "worker-1", "CPU", "AVG"), 50.0);
    assert_near(value(&w, "worker-1", "CPU", "STD"), 30.0);
    assert_near(value(&w, "worker-1", "Memory", "AVG"), 50.0);
    assert_near(value(&w, "worker-1", "Memory", "STD"), 0.0);
}

#[tokio::test]
async fn a_node_with_zero_capacity_loses_that_ratio_only_and_the_others_are_kept() {
    let api = apiserver::start().await;
    let t = now_s();
    api.set_nodes(vec![
        node("worker-1", ("4", "8Gi"), ("4", "8Gi")),
        node("worker-2", ("0", "8Gi"), ("0", "8Gi")),
    ]);
    api.set_node_metrics(vec![
        node_metrics("worker-1", "1", "2Gi", t),
        node_metrics("worker-2", "1", "2Gi", t),
    ]);
    let store = Store::new();
    let mut f = fetcher(&api, false);
    // An impossible capacity is a dropped value, not a failed run: /watcher/health stays 200.
    assert_eq!(run_once(&mut f, &store, TIMEOUT).await, RunOutcome::Ok);
    let snap = store.snapshot(SystemTime::now());
    let src = &snap.sources["metrics_server"];
    assert!(src.up && src.errors.is_empty(), "{src:?}");
    assert_eq!(src.dropped["bad_capacity"], 1);
    let w = watcher(&store).unwrap();
    assert_eq!(hosts(&w), ["worker-1", "worker-2"]);
    assert_eq!(value(&w, "worker-1", "CPU", "Latest"), Some(25.0));
    assert_eq!(value(&w, "worker-2", "CPU", "Latest"), None);
    assert_eq!(value(&w, "worker-2", "Memory", "Latest"), Some(25.0));
}

#[tokio::test]
async fn a_forbidden_node_list_fails_the_run_with_nothing_recorded() {
    let api = apiserver::start().await;
    api.set_nodes(vec![node("worker-1", ("4", "8Gi"), ("4", "8Gi"))]);
    api.set_node_metrics(vec![node_metrics("worker-1", "1", "2Gi", now_s())]);
    api.fail(
        Kind::Nodes,
        Fault::forbidden(
            "nodes is forbidden: User \"system:serviceaccount:kube-system:kube-prober\" cannot list resource \"nodes\"",
        ),
    );
    let store = Store::new();
    let mut f = fetcher(&api, false);
    let (reason, message) = failed(run_once(&mut f, &store, TIMEOUT).await);
    assert_eq!(reason, "http");
    assert!(
        message.starts_with("LIST v1 Nodes: status 403 Forbidden: nodes is forbidden"),
        "{message}"
    );
    assert!(watcher(&store).is_none());
}

#[tokio::test]
async fn an_unreachable_api_server_fails_the_run_with_the_cause() {
    let api = apiserver::start().await;
    let url = api.url.clone();
    let client = api.client();
    drop(api);
    // Let the aborted server task release its listener.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let store = Store::new();
    let mut f = MetricsServerFetcher::new(client, MetricsServerConfig::default());
    let (reason, message) = failed(run_once(&mut f, &store, TIMEOUT).await);
    assert_eq!(reason, "http", "{message} ({url})");
    assert!(
        message.starts_with("LIST v1 Nodes: ") && message.contains("Connection refused"),
        "the error chain is kept: {message}"
    );
}

#[tokio::test]
async fn kube_default_retry_rides_out_a_brief_503() {
    let api = apiserver::start().await;
    let t = now_s();
    api.set_nodes(vec![node("worker-1", ("4", "8Gi"), ("4", "8Gi"))]);
    api.set_node_metrics(vec![node_metrics("worker-1", "1", "2Gi", t)]);
    api.fail(Kind::NodeMetrics, Fault::unavailable("starting").times(2));
    let store = Store::new();
    let mut f = MetricsServerFetcher::new(
        api.client_with_default_retry(),
        MetricsServerConfig::default(),
    );
    assert_eq!(run_once(&mut f, &store, TIMEOUT).await, RunOutcome::Ok);
    assert_eq!(api.hits(NODE_METRICS_PATH), 3);
}

#[tokio::test]
async fn nodes_come_in_pages_node_metrics_whole_and_a_brief_fault_is_retried() {
    let api = apiserver::start().await;
    let now = std::time::SystemTime::now();
    let names: Vec<String> = (0..1100).map(|i| format!("node-{i:04}")).collect();
    api.set_nodes(
        names
            .iter()
            .map(|n| apiserver::node(n, ("4", "8Gi"), ("4", "8Gi")))
            .collect(),
    );
    api.set_node_metrics(
        names
            .iter()
            .map(|n| apiserver::node_metrics(n, "1", "2Gi", now))
            .collect(),
    );
    api.fail(
        apiserver::Kind::of::<k8s_metrics::v1beta1::NodeMetrics>(),
        apiserver::Fault::unavailable("blip").times(1),
    );
    let store = Store::new();
    let mut f = MetricsServerFetcher::new(api.client(), MetricsServerConfig::default());
    assert_eq!(run_once(&mut f, &store, TIMEOUT).await, RunOutcome::Ok);
    assert_eq!(store.snapshot(now).nodes.len(), 1100);
    assert_eq!(api.hits(NODES_PATH), 3, "1,100 nodes in pages of 500");
    assert_eq!(
        api.hits(NODE_METRICS_PATH),
        2,
        "one failed LIST retried, then every NodeMetrics in one answer (metrics-server ignores limit)"
    );
}

/// Nodes as the cluster role's Node watcher holds them, for `with_node_source`.
fn watched(names: &[String]) -> kube_prober::sources::usage::metrics_server::NodeSource {
    use kube_prober::k8s::lean::AsLeanNode;
    let nodes: std::collections::HashMap<String, std::sync::Arc<kube_prober::k8s::lean::LeanNode>> =
        names
            .iter()
            .map(|n| {
                let node = node(n, ("4", "8Gi"), ("4", "8Gi"));
                (
                    n.clone(),
                    std::sync::Arc::new(node.lean().unwrap().into_owned()),
                )
            })
            .collect();
    std::sync::Arc::new(nodes)
}

/// A stand-in with 1,100 NodeMetrics (one LIST answer, as metrics-server gives), node `i`
/// using `cpu(i)` cores and 2Gi now, and their names.
async fn cluster_of_1100(cpu: impl Fn(usize) -> &'static str) -> (ApiServer, Vec<String>) {
    let api = apiserver::start().await;
    let t = now_s();
    let names: Vec<String> = (0..1100).map(|i| format!("node-{i:04}")).collect();
    api.set_node_metrics(
        names
            .iter()
            .enumerate()
            .map(|(i, n)| node_metrics(n, cpu(i), "2Gi", t))
            .collect(),
    );
    (api, names)
}

/// With the watcher's Nodes, NodeMetrics are turned into samples (no LIST of Nodes): every
/// node of the one whole answer arrives, with the right ratio.
#[tokio::test]
async fn with_watched_nodes_every_node_metrics_becomes_samples() {
    let (api, names) = cluster_of_1100(|i| if i % 2 == 0 { "1" } else { "3" }).await;
    let store = Store::new();
    let mut f = fetcher(&api, false).with_node_source(watched(&names), Box::pin(async { true }));
    f.before_first_fetch().await;
    assert_eq!(run_once(&mut f, &store, TIMEOUT).await, RunOutcome::Ok);
    assert_eq!(api.hits(NODES_PATH), 0, "capacities from the watched Nodes");
    assert_eq!(
        api.hits(NODE_METRICS_PATH),
        1,
        "1,100 NodeMetrics in one answer: metrics-server does not page"
    );
    let w = watcher(&store).unwrap();
    assert_eq!(w.data.node_metrics_map.len(), 1100);
    for (i, n) in names.iter().enumerate() {
        let cpu = if i % 2 == 0 { 25.0 } else { 75.0 };
        assert_near(value(&w, n, "CPU", "Latest"), cpu);
        assert_near(value(&w, n, "Memory", "Latest"), 25.0);
    }
}

/// A NodeMetrics LIST refused (403: not transient, so not retried) records no usage of that
/// fetch: no node gets a value, none is half-updated.
#[tokio::test]
async fn with_watched_nodes_a_failed_list_records_no_usage() {
    let (api, names) = cluster_of_1100(|_| "1").await;
    api.fail(
        Kind::NodeMetrics,
        apiserver::Fault::forbidden("no metrics for you").times(1),
    );
    let store = std::sync::Arc::new(Store::new());
    let mut f = fetcher(&api, false).with_node_source(watched(&names), Box::pin(async { true }));
    let (reason, message) = failed(run_once(&mut f, store.as_ref(), TIMEOUT).await);
    assert!(message.contains("NodeMetrics"), "{reason}: {message}");
    assert_eq!(api.hits(NODE_METRICS_PATH), 1, "a 403 is not retried");
    let usage = watcher(&store).map(|w| w.data.node_metrics_map.len());
    assert!(usage.is_none_or(|n| n == 0), "no usage recorded: {usage:?}");
}

/// Nodes at which the real metrics-server's one NodeMetrics answer, with GKE's 25 node labels
/// in every item, is past the default `--max-response-bytes` (issue #33: about 26,500).
const GKE_NODES_PAST_THE_CAP: usize = 30_000;

/// Issue #33: metrics-server answers the NodeMetrics list whole, each item carrying its node's
/// labels. With GKE's labels, 30,000 nodes make one answer of about 39 MiB, past the default
/// 32 MiB `--max-response-bytes`. With the client the binary builds (that default cap) and the
/// cluster role's watched Nodes, one fetch must still succeed and `/watcher` list every host
/// with its CPU and memory.
#[tokio::test]
async fn thirty_thousand_gke_nodes_fill_watcher_with_the_default_response_cap() {
    let started = std::time::Instant::now();
    let api = apiserver::start().await;
    let n = GKE_NODES_PAST_THE_CAP;
    let made = api.generate_with(&apiserver::GenerateOptions::new(n, 0));
    assert_eq!((made.nodes, made.node_metrics, made.pods), (n, n, 0));
    let generated = started.elapsed();
    let answer = answer_bytes(&api).await;
    assert!(
        answer > DEFAULT_MAX_RESPONSE_BYTES,
        "the answer ({answer} bytes) must pass the default cap ({DEFAULT_MAX_RESPONSE_BYTES})"
    );
    let nodes = watched_standin_nodes(&api);
    assert_eq!(nodes.len(), n);
    let names: Vec<String> = nodes.keys().cloned().collect();
    // As the binary builds it: the default cap on every response body.
    let client = client_from_config(api.config(), DEFAULT_MAX_RESPONSE_BYTES).unwrap();
    let store = Store::new();
    let mut f = MetricsServerFetcher::new(client, config(false))
        .with_node_source(std::sync::Arc::new(nodes), Box::pin(async { true }));
    f.before_first_fetch().await;
    api.clear_requests();
    let fetch_started = std::time::Instant::now();
    let outcome = run_once(&mut f, &store, Duration::from_secs(120)).await;
    let fetched = fetch_started.elapsed();
    assert_eq!(outcome, RunOutcome::Ok, "one fetch of {answer} bytes");
    assert_eq!(api.hits(NODE_METRICS_PATH), 1, "one answer, no retry");
    assert_eq!(api.hits(NODES_PATH), 0, "capacities from the watched Nodes");

    let w = watcher(&store).expect("/watcher has data");
    assert_eq!(w.data.node_metrics_map.len(), n);
    for name in &names {
        for kind in ["CPU", "Memory"] {
            let v = value(&w, name, kind, "Latest");
            assert!(
                v.is_some_and(|v| v > 0.0 && v <= 100.0),
                "{name} {kind}: {v:?}"
            );
        }
    }
    // Values are the right ones, not just present: a node of each pool and zone, and more.
    for name in names.iter().step_by(997) {
        let m: k8s_metrics::v1beta1::NodeMetrics = api.get("", name).unwrap();
        let node: k8s_openapi::api::core::v1::Node = api.get("", name).unwrap();
        let capacity = node.status.unwrap().capacity.unwrap();
        let cpu = quantity(&m.usage.cpu.0) / quantity(&capacity["cpu"].0);
        let memory = quantity(&m.usage.memory.0) / quantity(&capacity["memory"].0);
        assert_near_rel(value(&w, name, "CPU", "Latest"), 100.0 * cpu);
        assert_near_rel(value(&w, name, "Memory", "Latest"), 100.0 * memory);
    }
    eprintln!(
        "{n} GKE-shaped nodes: generated in {generated:?}, one NodeMetrics answer of {answer} \
         bytes ({:.1} a node) fetched in {fetched:?}; {:?} in all",
        answer as f64 / n as f64,
        started.elapsed()
    );
}

/// The quantities the generated objects use: `n`, `m`, `Ki` or none.
fn quantity(q: &str) -> f64 {
    let (digits, scale) = [("n", 1e-9), ("m", 1e-3), ("Ki", 1024.0)]
        .iter()
        .find_map(|(suffix, scale)| q.strip_suffix(suffix).map(|d| (d, *scale)))
        .unwrap_or((q, 1.0));
    digits.parse::<f64>().unwrap() * scale
}

fn assert_near_rel(got: Option<f64>, want: f64) {
    let got = got.expect("value present");
    assert!(
        (got - want).abs() <= 1e-9 * want.abs().max(1.0),
        "got {got}, want {want}"
    );
}

/// The size of one NodeMetrics LIST answer, as a client reads it.
async fn answer_bytes(api: &ApiServer) -> usize {
    let url = format!("{}{NODE_METRICS_PATH}", api.url);
    let answer = reqwest::get(&url).await.unwrap().bytes().await.unwrap();
    answer.len()
}

/// The stand-in's Nodes as the cluster role's Node watcher holds them, by name, for
/// `with_node_source`. Every node of a pool has its pool's capacity and allocatable, so each is
/// its pool's first node decoded as the watcher decodes it ([`LeanNode`]), under its own name:
/// decoding all 30,000 takes seconds in a debug build.
///
/// [`LeanNode`]: kube_prober::k8s::lean::LeanNode
fn watched_standin_nodes(
    api: &ApiServer,
) -> std::collections::HashMap<String, std::sync::Arc<kube_prober::k8s::lean::LeanNode>> {
    use kube_prober::k8s::lean::LeanNode;
    let mut pools: std::collections::HashMap<&str, LeanNode> = Default::default();
    api.versions(Kind::Nodes)
        .into_iter()
        .map(|(_, name, _)| {
            let pool = apiserver::NODE_POOLS
                .into_iter()
                .find(|p| name.contains(p))
                .unwrap();
            let first = pools
                .entry(pool)
                .or_insert_with(|| api.get::<LeanNode>("", &name).unwrap());
            let mut node = first.clone();
            node.metadata.name = Some(name.clone());
            (name, std::sync::Arc::new(node))
        })
        .collect()
}
