//! The metrics-server backend (`MetricsServerFetcher`) against the real metrics-server, through
//! the real kube-apiserver's aggregation layer (tests/support/control_plane.rs): the same
//! public API as tests/standins/metrics_server_backend.rs uses against the stand-in, with what the real
//! components answer.
//! - every node with pods gets a sample equal to its NodeMetrics ÷ allocatable, read by kubectl
//!   at the same NodeMetrics timestamp;
//! - a node without pods has no NodeMetrics, so no sample, no error and no drop;
//! - a node added later appears once metrics-server has its metrics;
//! - one NodeMetrics LIST per fetch (metrics-server answers whole), counted by metrics-server's
//!   own `apiserver_request_total` (kube-apiserver's counts no proxied request);
//! - metrics-server killed: a failed run naming the cause (the aggregation layer's 503), no
//!   usage recorded; restarted, the fetcher recovers;
//! - an answer past `--max-response-bytes` is still read whole, item by item (the cap bounds
//!   each item); an item past it is a counted `too_large` skip of its node, not a failed run.
//!
//! Both of the fetcher's paths run: Nodes listed by the fetch itself, and Nodes from a node
//! source as the cluster role's watcher gives them (NodeMetrics then read page by page, which
//! with metrics-server is one page). One control plane serves the file; the tests take turns
//! (they count requests and stop metrics-server).

use support::control_plane;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use control_plane::{ControlPlane, Options, items, node_name, quantity};
use kube_prober::hub::{RunOutcome, Store};
use kube_prober::k8s::lean::LeanNode;
use kube_prober::model::Resource;
use kube_prober::sources::usage::metrics_server::{
    MetricsServerConfig, MetricsServerFetcher, NodeSource,
};
use kube_prober::sources::usage::run_once;
use serde_json::Value;

/// Nodes `kwok-node-0..3` with one usage pod each.
const WITH_PODS: usize = 3;
/// `kwok-node-3`: a node with no pods.
const PODLESS: usize = 3;
const TIMEOUT: Duration = Duration::from_secs(20);
const MAX_RESPONSE_BYTES: usize = 32 << 20;

/// The control plane of this file, and when its podless node was Ready (unix seconds).
fn cp() -> &'static (ControlPlane, i64) {
    static CP: OnceLock<(ControlPlane, i64)> = OnceLock::new();
    CP.get_or_init(|| {
        let cp = ControlPlane::start(Options {
            nodes: WITH_PODS,
            pods_per_node: 1,
            controller_manager: false,
            scheduler: false,
            ..Options::default()
        });
        cp.create_nodes(PODLESS..PODLESS + 1, "4", "16Gi");
        cp.wait_nodes_ready(WITH_PODS + 1);
        (cp, unix_now())
    })
}

/// The tests take turns: they count the API server's requests and stop metrics-server.
static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// A client as kube-prober makes it from a kubeconfig (kube's retry off, answers capped).
async fn client(kubeconfig: &Path, max_response_bytes: usize) -> kube::Client {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).expect("admin kubeconfig");
    let mut config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("kube config");
    config.default_retry = false;
    kube_prober::k8s::client::client_from_config(config, max_response_bytes).expect("client")
}

const ALLOCATABLE: MetricsServerConfig = MetricsServerConfig {
    use_allocatable: true,
    max_item_bytes: MAX_RESPONSE_BYTES,
};

/// Nodes by name, as the test brings them up to date before each run.
type Held = Arc<Mutex<HashMap<String, Arc<LeanNode>>>>;

/// The fetcher's two ways to its Nodes.
#[derive(Debug, Clone, Copy)]
enum NodesFrom {
    /// It LISTs Nodes itself on every fetch.
    ListsNodes,
    /// Nodes from a node source (the cluster role's watcher); refreshed before each fetch.
    Watched,
}

struct Fetcher {
    f: MetricsServerFetcher,
    /// Lists the node source's Nodes (uncapped: the cap under test is the fetcher's).
    admin: kube::Client,
    nodes: Option<Held>,
}

impl Fetcher {
    async fn new(path: NodesFrom, max_response_bytes: usize) -> Fetcher {
        let kubeconfig = &cp().0.admin_kubeconfig;
        let config = MetricsServerConfig {
            max_item_bytes: max_response_bytes,
            ..ALLOCATABLE
        };
        let f = MetricsServerFetcher::new(client(kubeconfig, max_response_bytes).await, config);
        let admin = client(kubeconfig, MAX_RESPONSE_BYTES).await;
        match path {
            NodesFrom::ListsNodes => Fetcher {
                f,
                admin,
                nodes: None,
            },
            NodesFrom::Watched => {
                let held: Held = Arc::default();
                let source: NodeSource = held.clone();
                let f = f.with_node_source(source, Box::pin(async { true }));
                Fetcher {
                    f,
                    admin,
                    nodes: Some(held),
                }
            }
        }
    }

    /// One run into `store` (the node source first brought up to date).
    async fn run(&mut self, store: &Store) -> RunOutcome {
        if let Some(held) = &self.nodes {
            let api: kube::Api<LeanNode> = kube::Api::all(self.admin.clone());
            let nodes = api
                .list(&Default::default())
                .await
                .expect("listing Nodes for the node source");
            *held.lock().unwrap() = nodes
                .items
                .into_iter()
                .filter_map(|n| Some((n.metadata.name.clone()?, Arc::new(n))))
                .collect();
        }
        run_once(&mut self.f, store, TIMEOUT).await
    }
}

/// One NodeMetrics as kubectl reads it through the aggregation layer.
#[derive(Debug, Clone, PartialEq)]
struct Metrics {
    timestamp: SystemTime,
    cpu: f64,
    memory: f64,
}

/// NodeMetrics by node name (`None` while the metrics API does not answer).
fn node_metrics(cp: &ControlPlane) -> Option<BTreeMap<String, Metrics>> {
    let out = cp.kubectl_output(
        &["get", "--raw", "/apis/metrics.k8s.io/v1beta1/nodes"],
        None,
    );
    if !out.status.success() {
        return None;
    }
    let v: Value = serde_json::from_slice(&out.stdout).expect("NodeMetrics JSON");
    Some(
        items(&v)
            .iter()
            .map(|m| {
                let ts = m["timestamp"].as_str().expect("timestamp");
                let ts: k8s_openapi::jiff::Timestamp = ts.parse().expect("RFC 3339 timestamp");
                let timestamp = SystemTime::UNIX_EPOCH
                    + Duration::new(ts.as_second() as u64, ts.subsec_nanosecond().unsigned_abs());
                (
                    m["metadata"]["name"].as_str().unwrap().to_string(),
                    Metrics {
                        timestamp,
                        cpu: quantity(m["usage"]["cpu"].as_str().unwrap()),
                        memory: quantity(m["usage"]["memory"].as_str().unwrap()),
                    },
                )
            })
            .collect(),
    )
}

/// Every node's allocatable (cores, bytes).
fn allocatable(cp: &ControlPlane) -> BTreeMap<String, (f64, f64)> {
    items(&cp.get_json(&["nodes"]))
        .iter()
        .map(|n| {
            let a = &n["status"]["allocatable"];
            (
                n["metadata"]["name"].as_str().unwrap().to_string(),
                (
                    quantity(a["cpu"].as_str().unwrap()),
                    quantity(a["memory"].as_str().unwrap()),
                ),
            )
        })
        .collect()
}

/// What a store holds per node: (time, CPU ratio, memory ratio).
fn usage(store: &Store) -> BTreeMap<String, (SystemTime, f64, f64)> {
    store
        .snapshot(SystemTime::now())
        .nodes
        .iter()
        .filter_map(|(name, load)| {
            let cpu = *load.latest.get(&Resource::Cpu)?;
            let mem = *load.latest.get(&Resource::Memory)?;
            Some((name.to_string(), (load.latest_at, cpu, mem)))
        })
        .collect()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12 * b.abs().max(1.0)
}

/// The NodeMetrics LISTs metrics-server has answered since it started, by response code: its
/// own `apiserver_request_total` (kube-apiserver counts no request it proxies to an aggregated
/// API there), read with the admin client certificate, which metrics-server's delegated
/// authentication and authorization accept.
fn node_metrics_lists(cp: &ControlPlane) -> BTreeMap<String, f64> {
    let d = cp.dir();
    // metrics-server serves a self-signed certificate of its own (`--cert-dir`): -k, on
    // 127.0.0.1 only.
    let out = std::process::Command::new("curl")
        .args(["-sSk", "--max-time", "10", "--cert"])
        .arg(d.join("admin.crt"))
        .arg("--key")
        .arg(d.join("admin.key"))
        .arg(format!(
            "https://127.0.0.1:{}/metrics",
            cp.metrics_server_port
        ))
        .output()
        .expect("running curl");
    assert!(
        out.status.success(),
        "metrics-server /metrics: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let mut by_code = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
            continue;
        };
        let (labels, value) = rest.rsplit_once("} ").expect("sample line");
        let has = |l: &str| labels.split(',').any(|x| x == l);
        if has(r#"group="metrics.k8s.io""#) && has(r#"resource="nodes""#) && has(r#"verb="LIST""#) {
            let code = labels
                .split(',')
                .find_map(|x| x.strip_prefix("code="))
                .unwrap_or("?")
                .trim_matches('"')
                .to_string();
            *by_code.entry(code).or_insert(0.0) += value.trim().parse::<f64>().unwrap();
        }
    }
    by_code
}

fn total(m: &BTreeMap<String, f64>) -> f64 {
    m.values().sum()
}

/// Runs `f` until every node of `want` has a sample whose time is its NodeMetrics' timestamp
/// and whose values are NodeMetrics ÷ allocatable (rounding only); a sample at another time
/// (metrics-server scraped between the two reads) is read again. Returns the last store.
async fn until_samples_equal_node_metrics(
    f: &mut Fetcher,
    want: &[String],
    within: Duration,
) -> Store {
    let cp = &cp().0;
    let alloc = allocatable(cp);
    let deadline = Instant::now() + within;
    loop {
        let store = Store::new();
        let outcome = f.run(&store).await;
        let metrics = node_metrics(cp).unwrap_or_default();
        let got = usage(&store);
        let mut pending = Vec::new();
        for node in want {
            let (Some(m), Some(&(at, cpu, mem))) = (metrics.get(node), got.get(node)) else {
                pending.push(format!("{node}: NodeMetrics {:?}", metrics.get(node)));
                continue;
            };
            if at != m.timestamp {
                pending.push(format!("{node}: sample at {at:?}, NodeMetrics {m:?}"));
                continue;
            }
            let (acpu, amem) = alloc[node];
            assert!(
                close(cpu, m.cpu / acpu) && close(mem, m.memory / amem),
                "{node}: sample ({cpu}, {mem}), NodeMetrics {m:?} ÷ allocatable ({acpu}, {amem})"
            );
        }
        if pending.is_empty() {
            assert_eq!(outcome, RunOutcome::Ok);
            return store;
        }
        assert!(
            Instant::now() < deadline,
            "after {within:?} ({outcome:?}):\n{}",
            pending.join("\n")
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The nodes any pod is bound to, sorted.
fn nodes_with_pods(cp: &ControlPlane) -> Vec<String> {
    let pods = cp.get_json(&["pods", "-A"]);
    let nodes: std::collections::BTreeSet<String> = items(&pods)
        .iter()
        .filter_map(|p| p["spec"]["nodeName"].as_str().map(str::to_string))
        .collect();
    nodes.into_iter().collect()
}

fn with_pods() -> Vec<String> {
    (0..WITH_PODS).map(node_name).collect()
}

/// Every node with pods: NodeMetrics ÷ allocatable at the NodeMetrics timestamp. The node
/// without pods, once metrics-server has scraped twice since it was Ready: no NodeMetrics, no
/// sample, no error, nothing dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn samples_are_node_metrics_over_allocatable_and_a_podless_node_has_none() {
    let (cp, podless_ready) = cp();
    let _turn = TURN.lock().await;
    let podless = node_name(PODLESS);
    // Two scrapes after the podless node was Ready: every other node's NodeMetrics newer
    // than that by a metric resolution (15 s) and more.
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let m = node_metrics(cp).unwrap_or_default();
        let scraped = with_pods().iter().all(|n| {
            m.get(n).is_some_and(|m| {
                m.timestamp
                    > SystemTime::UNIX_EPOCH + Duration::from_secs(*podless_ready as u64 + 16)
            })
        });
        if scraped {
            assert!(
                !m.contains_key(&podless),
                "metrics-server has NodeMetrics for a node without pods: {:?}",
                m[&podless]
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no NodeMetrics newer than 16 s after {podless} was Ready: {m:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    for path in [NodesFrom::ListsNodes, NodesFrom::Watched] {
        let mut f = Fetcher::new(path, MAX_RESPONSE_BYTES).await;
        let store = until_samples_equal_node_metrics(&mut f, &with_pods(), TIMEOUT * 3).await;
        let got: Vec<String> = usage(&store).into_keys().collect();
        assert_eq!(
            got,
            nodes_with_pods(cp),
            "{path:?}: a sample for every node with pods (another test may have added one), \
             none for {podless}"
        );
        let snap = store.snapshot(SystemTime::now());
        let src = &snap.sources["metrics_server"];
        assert!(src.up, "{path:?}: {src:?}");
        assert!(src.errors.is_empty(), "{path:?}: {src:?}");
        assert!(
            src.dropped.is_empty(),
            "{path:?}: a node without NodeMetrics is not a drop: {src:?}"
        );
        assert_eq!(src.runs, 1);
        eprintln!(
            "{path:?}: {} samples = NodeMetrics ÷ allocatable; {podless}: none",
            got.len()
        );
    }
}

/// One NodeMetrics LIST per fetch on either path (metrics-server answers the whole list, the
/// fetcher asks for no second page), and a node added later appears once metrics-server has
/// NodeMetrics for it, never before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_list_per_fetch_and_a_node_added_later_appears_with_its_metrics() {
    let (cp, _) = cp();
    let _turn = TURN.lock().await;
    for path in [NodesFrom::ListsNodes, NodesFrom::Watched] {
        let mut f = Fetcher::new(path, MAX_RESPONSE_BYTES).await;
        let before = node_metrics_lists(cp);
        const FETCHES: usize = 3;
        for _ in 0..FETCHES {
            assert_eq!(f.run(&Store::new()).await, RunOutcome::Ok, "{path:?}");
        }
        let after = node_metrics_lists(cp);
        assert_eq!(
            total(&after) - total(&before),
            FETCHES as f64,
            "{path:?}: one NodeMetrics LIST per fetch; before {before:?}, after {after:?}"
        );
        assert_eq!(
            after.get("200").copied().unwrap_or(0.0) - before.get("200").copied().unwrap_or(0.0),
            FETCHES as f64,
            "{path:?}: every one answered 200"
        );
    }

    let added = 10;
    let name = node_name(added);
    cp.create_nodes(added..added + 1, "2", "8Gi");
    cp.wait_nodes_ready(WITH_PODS + 2);
    cp.create_usage_pods("default", added..added + 1, 1, "250m", "512Mi");
    let mut fetchers = [
        Fetcher::new(NodesFrom::ListsNodes, MAX_RESPONSE_BYTES).await,
        Fetcher::new(NodesFrom::Watched, MAX_RESPONSE_BYTES).await,
    ];
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut seen_without = 0;
    loop {
        let had = node_metrics(cp).unwrap_or_default().contains_key(&name);
        let mut got = Vec::new();
        for f in &mut fetchers {
            let store = Store::new();
            assert_eq!(f.run(&store).await, RunOutcome::Ok);
            got.push(usage(&store).contains_key(&name));
        }
        let has = node_metrics(cp).unwrap_or_default().contains_key(&name);
        if !had && !has {
            assert_eq!(
                got,
                [false, false],
                "a sample for {name} before its NodeMetrics"
            );
            seen_without += 1;
        }
        if had && has && got == [true, true] {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{name}: no sample 120 s after its pod (NodeMetrics {had}/{has}, samples {got:?})"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(seen_without > 0, "{name} had NodeMetrics at once");
    let mut want = with_pods();
    want.push(name.clone());
    for f in &mut fetchers {
        let store = until_samples_equal_node_metrics(f, &want, TIMEOUT * 3).await;
        assert_eq!(usage(&store).len(), want.len());
    }
    eprintln!("{name}: absent for {seen_without} rounds, then NodeMetrics ÷ allocatable");
}

/// Restarts metrics-server when dropped: a failed assertion does not leave the other tests
/// of the file without it.
struct RestartOnDrop(&'static ControlPlane);

impl Drop for RestartOnDrop {
    fn drop(&mut self) {
        self.0.restart("metrics-server");
    }
}

/// metrics-server killed: the aggregation layer answers 503 "error trying to reach service";
/// each fetch fails with that cause and records no usage. Restarted, the same fetchers recover
/// with every node once metrics-server has scraped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_server_stopped_fails_the_run_and_restarted_recovers() {
    let (cp, _) = cp();
    let _turn = TURN.lock().await;
    let mut fetchers = [
        Fetcher::new(NodesFrom::ListsNodes, MAX_RESPONSE_BYTES).await,
        Fetcher::new(NodesFrom::Watched, MAX_RESPONSE_BYTES).await,
    ];
    for f in &mut fetchers {
        assert_eq!(f.run(&Store::new()).await, RunOutcome::Ok);
    }
    let restart = RestartOnDrop(cp);
    cp.kill("metrics-server");
    let port = cp.metrics_server_port;
    for (f, path) in fetchers
        .iter_mut()
        .zip([NodesFrom::ListsNodes, NodesFrom::Watched])
    {
        let store = Store::new();
        let outcome = f.run(&store).await;
        let RunOutcome::Failed { reason, message } = outcome else {
            panic!("{path:?}: metrics-server stopped, run {outcome:?}");
        };
        eprintln!("{path:?}: {reason}: {message}");
        assert_eq!(reason, "http", "{path:?}: {message}");
        assert_eq!(
            message,
            format!(
                "LIST metrics.k8s.io/v1beta1 NodeMetrics: status 503 Failed to parse error data: \
                 error trying to reach service: dial tcp 127.0.0.1:{port}: connect: connection \
                 refused"
            ),
            "{path:?}"
        );
        let u = usage(&store);
        assert!(u.is_empty(), "{path:?}: no usage recorded: {u:?}");
        let snap = store.snapshot(SystemTime::now());
        let src = &snap.sources["metrics_server"];
        assert!(!src.up, "{src:?}");
        assert_eq!(src.errors.get("http"), Some(&1), "{src:?}");
    }
    drop(restart);
    for f in &mut fetchers {
        until_samples_equal_node_metrics(f, &with_pods(), Duration::from_secs(120)).await;
    }
}

/// `--max-response-bytes` below the real whole answer: the list is read as a stream, so every
/// node still gets its sample from one LIST; below one item's size, each node is a counted
/// `too_large` skip (not a failed run), from the same one LIST.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cap_bounds_each_item_not_the_whole_answer() {
    let (cp, _) = cp();
    let _turn = TURN.lock().await;
    let m = node_metrics(cp);
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut m = m.unwrap_or_default();
    while !with_pods().iter().all(|n| m.contains_key(n)) {
        assert!(Instant::now() < deadline, "NodeMetrics {m:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
        m = node_metrics(cp).unwrap_or_default();
    }
    let whole = cp
        .kubectl(&["get", "--raw", "/apis/metrics.k8s.io/v1beta1/nodes"])
        .len();
    let items = m.len();
    let cap = whole / 2;
    let mut f = Fetcher::new(NodesFrom::Watched, cap).await;
    let before = node_metrics_lists(cp);
    let store = Store::new();
    assert_eq!(
        f.run(&store).await,
        RunOutcome::Ok,
        "a {whole}-byte answer, cap {cap}"
    );
    let after = node_metrics_lists(cp);
    assert_eq!(total(&after) - total(&before), 1.0, "one LIST: {after:?}");
    let got = usage(&store);
    for n in with_pods() {
        assert!(got.contains_key(&n), "{n} missing from {got:?}");
    }

    // Below the smallest item: every item skipped and counted, the run not failed.
    let mut f = Fetcher::new(NodesFrom::Watched, 64).await;
    let before = node_metrics_lists(cp);
    let store = Store::new();
    let outcome = f.run(&store).await;
    let after = node_metrics_lists(cp);
    assert_eq!(outcome, RunOutcome::NoData, "every item over a 64-byte cap");
    assert!(usage(&store).is_empty());
    let snap = store.snapshot(SystemTime::now());
    let src = &snap.sources["metrics_server"];
    assert!(src.errors.is_empty(), "{src:?}");
    assert_eq!(src.dropped.get("too_large").copied(), Some(items as u64));
    assert_eq!(
        total(&after) - total(&before),
        1.0,
        "not retried: {after:?}"
    );
    eprintln!("{whole}-byte answer of {items} items read under a {cap}-byte cap");
}
