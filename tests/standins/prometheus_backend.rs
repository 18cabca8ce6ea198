//! The Prometheus backend: against a real Prometheus scraping a real node_exporter (with and
//! without load-watcher's recording rules), and against a stand-in for the faults.

use support::fake_prom;
use support::prom;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use fake_prom::{Behaviour, FakePrometheus};
use kube_prober::hub::{
    ClusterRecorder, DropReason, NodeRecorder, ProbeRecorder, Provider, RunOutcome, SinkRecorder,
    SourceRecorder, Store, TaskRecorder,
};
use kube_prober::model::{BackendWindow, NodeCapacity, UsageMatch, UsageSample};
use kube_prober::outputs::published::Published;
use kube_prober::sources::usage::http::HttpConfig;
use kube_prober::sources::usage::prometheus::{ClusterNodes, PrometheusConfig, PrometheusFetcher};
use kube_prober::sources::usage::run_once;
use kube_prober::watcher::{Metric, WatcherMetrics};

fn config(url: &str) -> PrometheusConfig {
    let mut h = HttpConfig::new(url);
    h.retries = 0;
    h.timeout = Duration::from_secs(3);
    PrometheusConfig::new(h)
}

async fn round(f: &mut PrometheusFetcher, store: &Store) -> RunOutcome {
    run_once(f, store, Duration::from_secs(20)).await
}

fn published(store: &Store) -> Published {
    Published::render(Arc::new(store.snapshot(SystemTime::now())), "prometheus")
}

fn decode(p: &Published) -> WatcherMetrics {
    serde_json::from_slice(&p.watcher.as_ref().expect("/watcher has data").all()).unwrap()
}

fn find<'a>(m: &'a [Metric], name: &str, op: &str) -> Option<&'a Metric> {
    m.iter().find(|x| x.name == name && x.operator == op)
}

const CPU: &str = "instance:node_cpu:ratio";
const MEM: &str = "instance:node_memory_utilisation:ratio";

#[tokio::test]
async fn every_metric_window_and_operator_is_queried_and_served() {
    let fake = FakePrometheus::start(Behaviour::Answer(vec![("10.0.0.5:9100".into(), 0.5)])).await;
    let store = Store::new();
    let mut f = PrometheusFetcher::new(config(&fake.url)).unwrap();
    assert_eq!(round(&mut f, &store).await, RunOutcome::Ok);
    let reqs = fake.requests();
    assert_eq!(
        reqs.len(),
        2 + 3 * 17 * 2,
        "each node's newest sample (raw series, rule), then 3 windows x 17 metrics x AVG/STD"
    );
    assert!(reqs.iter().all(|(m, _)| m == "POST"));
    assert!(reqs.iter().any(|(_, q)| q
        == r#"max by (instance) (timestamp(node_cpu_seconds_total{mode=~"idle|iowait"}))"#));
    assert!(
        reqs.iter()
            .any(|(_, q)| q == "max by (instance) (timestamp(instance:node_cpu:ratio))")
    );
    // Once the raw series have dated the nodes, the rule's newest samples are not asked for.
    assert_eq!(round(&mut f, &store).await, RunOutcome::Ok);
    assert_eq!(fake.requests().len() - reqs.len(), 1 + 3 * 17 * 2);
    assert!(
        reqs.iter()
            .any(|(_, q)| q == "stddev_over_time(instance:node_cpu:ratio[10m])")
    );
    let p = published(&store);
    assert!(p.watcher_healthy);
    let w = decode(&p);
    assert_eq!(w.source, "Prometheus");
    assert_eq!(w.window.duration, "15m");
    let m = &w.data.node_metrics_map["10.0.0.5"].metrics;
    assert_eq!(m.len(), 34);
    assert_eq!(find(m, CPU, "AVG").unwrap().value, 50.0);
    assert_eq!(find(m, CPU, "AVG").unwrap().rollup, "15m");
    assert_eq!(
        find(m, "instance:node_network_receive_bytes:rate:sum", "AVG")
            .unwrap()
            .value,
        0.5,
        "bytes/s, not x100"
    );
}

#[tokio::test]
async fn a_refused_post_falls_back_to_get_and_stays_there() {
    let fake = FakePrometheus::start(Behaviour::NoPost(vec![("n1".into(), 0.25)])).await;
    let store = Store::new();
    let mut cfg = config(&fake.url);
    cfg.concurrency = 1;
    let mut f = PrometheusFetcher::new(cfg).unwrap();
    assert_eq!(round(&mut f, &store).await, RunOutcome::Ok);
    let reqs = fake.requests();
    let posts = reqs.iter().filter(|(m, _)| m == "POST").count();
    assert_eq!(posts, 1, "one refused POST, then GET only");
    assert_eq!(reqs.len(), 1 + 2 + 102);
    let w = decode(&published(&store));
    assert_eq!(
        find(&w.data.node_metrics_map["n1"].metrics, CPU, "AVG")
            .unwrap()
            .value,
        25.0
    );
}

#[tokio::test]
async fn a_failed_query_loses_only_its_own_metric() {
    let fake = FakePrometheus::start(Behaviour::FailMatching(
        "memory".into(),
        vec![("n1".into(), 0.4)],
    ))
    .await;
    let store = Store::new();
    let mut f = PrometheusFetcher::new(config(&fake.url)).unwrap();
    let outcome = round(&mut f, &store).await;
    let RunOutcome::Failed { reason, message } = outcome else {
        panic!("expected a failed run, got {outcome:?}");
    };
    assert_eq!(reason, "http");
    assert!(
        message.contains("status 500") && message.contains("injected"),
        "{message}"
    );
    assert!(
        message.contains("more)"),
        "many failures are summarised: {message}"
    );
    let p = published(&store);
    assert!(!p.watcher_healthy, "/watcher/health reports the failure");
    let m = &decode(&p).data.node_metrics_map["n1"].metrics;
    assert_eq!(find(m, CPU, "AVG").unwrap().value, 40.0);
    assert!(find(m, MEM, "AVG").is_none());
    assert_eq!(m.len(), 32);
}

#[tokio::test]
async fn bad_answers_keep_the_last_good_data_with_its_time() {
    let fake = FakePrometheus::start(Behaviour::Answer(vec![("n1".into(), 0.3)])).await;
    let store = Store::new();
    let mut cfg = config(&fake.url);
    cfg.http.max_body_bytes = 64 * 1024;
    cfg.http.timeout = Duration::from_millis(300);
    let mut f = PrometheusFetcher::new(cfg).unwrap();
    assert_eq!(round(&mut f, &store).await, RunOutcome::Ok);
    let first = decode(&published(&store));

    for (b, needle) in [
        (Behaviour::Malformed, "malformed JSON"),
        (Behaviour::Huge(200 * 1024), "limit"),
        (Behaviour::Stall(Duration::from_secs(3)), "timed out"),
        (Behaviour::Down, "status 503"),
    ] {
        fake.set(b.clone());
        tokio::time::sleep(Duration::from_millis(1100)).await;
        match round(&mut f, &store).await {
            RunOutcome::Failed { message, .. } => {
                assert!(message.contains(needle), "{b:?}: {message}")
            }
            other => panic!("{b:?}: expected failure, got {other:?}"),
        }
        let p = published(&store);
        assert!(!p.watcher_healthy, "{b:?}");
        let now = decode(&p);
        assert_eq!(now.data, first.data, "{b:?}: the old data is still served");
        assert_eq!(
            now.window.end, first.window.end,
            "{b:?}: with its true time"
        );
    }
}

#[tokio::test]
async fn down_at_start_means_500_then_data_once_it_answers() {
    let fake = FakePrometheus::start(Behaviour::Down).await;
    let store = Store::new();
    let mut f = PrometheusFetcher::new(config(&fake.url)).unwrap();
    assert!(matches!(
        round(&mut f, &store).await,
        RunOutcome::Failed { .. }
    ));
    let p = published(&store);
    assert!(p.watcher.is_none(), "no data yet: /watcher answers 500");
    assert!(!p.watcher_healthy);
    fake.set(Behaviour::Answer(vec![("n1".into(), 0.1)]));
    assert_eq!(round(&mut f, &store).await, RunOutcome::Ok);
    let p = published(&store);
    assert!(p.watcher_healthy);
    assert!(decode(&p).data.node_metrics_map.contains_key("n1"));
}

#[tokio::test]
async fn non_finite_values_are_dropped_and_counted() {
    let fake = FakePrometheus::start(Behaviour::Answer(vec![
        ("n1".into(), f64::NAN),
        ("n2".into(), 0.2),
    ]))
    .await;
    let store = Store::new();
    let mut f = PrometheusFetcher::new(config(&fake.url)).unwrap();
    round(&mut f, &store).await;
    let snap = store.snapshot(SystemTime::now());
    assert_eq!(snap.sources["prometheus"].dropped["non_finite"], 102);
    let p = published(&store);
    let body = std::str::from_utf8(&p.watcher.as_ref().unwrap().all())
        .unwrap()
        .to_string();
    assert!(!body.contains("NaN"));
    let w = decode(&p);
    assert!(
        !w.data.node_metrics_map.contains_key("n1"),
        "a node with no valid value is not served"
    );
    assert_eq!(w.data.node_metrics_map["n2"].metrics.len(), 34);
}

/// 1 - MemAvailable/MemTotal from this machine.
fn meminfo_utilisation() -> f64 {
    let text = std::fs::read_to_string("/proc/meminfo").unwrap();
    let field = |name: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
            .unwrap()
    };
    1.0 - field("MemAvailable") / field("MemTotal")
}

/// Runs rounds until this host has CPU and Memory AVG (Prometheus needs a few scrapes).
async fn rounds_until_data(f: &mut PrometheusFetcher, store: &Store, node: &str) -> Vec<Metric> {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        round(f, store).await;
        if let Some(w) = published(store).watcher.as_ref() {
            let w: WatcherMetrics = serde_json::from_slice(&w.all()).unwrap();
            if let Some(n) = w.data.node_metrics_map.get(node)
                && find(&n.metrics, CPU, "AVG").is_some()
                && find(&n.metrics, MEM, "AVG").is_some()
            {
                return n.metrics.clone();
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no CPU and Memory for {node} within 60 s"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_prometheus_with_recording_rules_gives_this_hosts_values() {
    let prom = tokio::task::spawn_blocking(|| prom::RealPrometheus::start(true))
        .await
        .unwrap();
    let node = prom
        .node_exporter_instance
        .split(':')
        .next()
        .unwrap()
        .to_string();
    let store = Store::new();
    let mut f = PrometheusFetcher::new(config(&prom.url)).unwrap();
    let m = rounds_until_data(&mut f, &store, &node).await;
    let cpu = find(&m, CPU, "AVG").unwrap().value;
    assert!((0.0..=100.0).contains(&cpu), "cpu {cpu}");
    let mem = find(&m, MEM, "AVG").unwrap().value;
    let want = meminfo_utilisation() * 100.0;
    assert!(
        (mem - want).abs() < 5.0,
        "memory {mem} % vs /proc/meminfo {want} %"
    );
    assert!(find(&m, "instance:node_network_receive_bytes:rate:sum", "AVG").is_some());
    assert!(
        find(&m, "scaph_host_power_microwatts", "AVG").is_none(),
        "no such series here"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_prometheus_without_rules_falls_back_to_node_exporter_series() {
    let prom = tokio::task::spawn_blocking(|| prom::RealPrometheus::start(false))
        .await
        .unwrap();
    let node = prom
        .node_exporter_instance
        .split(':')
        .next()
        .unwrap()
        .to_string();
    let store = Store::new();
    let mut cfg = config(&prom.url);
    cfg.fallback_resolution = Duration::from_secs(1);
    let mut f = PrometheusFetcher::new(cfg).unwrap();
    let m = rounds_until_data(&mut f, &store, &node).await;
    let mem = find(&m, MEM, "AVG").unwrap().value;
    let want = meminfo_utilisation() * 100.0;
    assert!(
        (mem - want).abs() < 5.0,
        "memory {mem} % vs /proc/meminfo {want} %"
    );
    let cpu = find(&m, CPU, "STD").unwrap().value;
    assert!((0.0..=100.0).contains(&cpu));
    assert!(
        find(
            &m,
            "instance_device:node_disk_io_time_seconds:rate5m",
            "AVG"
        )
        .is_some()
    );
}

#[tokio::test]
async fn instance_addresses_map_to_node_names() {
    let fake = FakePrometheus::start(Behaviour::Answer(vec![
        ("10.0.0.5:9100".into(), 0.5),
        ("10.0.0.99:9100".into(), 0.1),
    ]))
    .await;
    let store = Store::new();
    let addresses = ClusterNodes {
        names: HashSet::new(),
        by_address: HashMap::from([("10.0.0.5".to_string(), "worker-5".to_string())]),
    };
    let mut f = PrometheusFetcher::new(config(&fake.url))
        .unwrap()
        .with_node_addresses(Arc::new(move || addresses.clone()));
    assert_eq!(round(&mut f, &store).await, RunOutcome::Ok);
    let w = decode(&published(&store));
    let mut keys: Vec<_> = w.data.node_metrics_map.keys().cloned().collect();
    keys.sort();
    assert_eq!(
        keys,
        ["10.0.0.99", "worker-5"],
        "unknown addresses stay as they are"
    );
}

/// A provider that keeps what the fetcher records of each node's windows (node, end) and its
/// self-checks, and hands everything on to a [`Store`].
struct Recorder {
    store: Store,
    windows: Mutex<Vec<(String, SystemTime)>>,
    matches: Mutex<Vec<UsageMatch>>,
}

impl Recorder {
    fn new() -> Self {
        Recorder {
            store: Store::new(),
            windows: Mutex::new(Vec::new()),
            matches: Mutex::new(Vec::new()),
        }
    }

    /// The windows recorded since the last call.
    fn take_windows(&self) -> Vec<(String, SystemTime)> {
        std::mem::take(&mut *self.windows.lock().unwrap())
    }

    fn last_match(&self) -> Option<UsageMatch> {
        self.matches.lock().unwrap().last().copied()
    }
}

impl NodeRecorder for Recorder {
    fn record_node_usage(&self, source: &str, sample: UsageSample) {
        self.store.record_node_usage(source, sample)
    }
    fn record_node_window(&self, source: &str, window: BackendWindow) {
        self.windows
            .lock()
            .unwrap()
            .push((window.node.clone(), window.end));
        self.store.record_node_window(source, window)
    }
    fn record_node_capacity(&self, node: &str, capacity: NodeCapacity) {
        self.store.record_node_capacity(node, capacity)
    }
    fn forget_node(&self, node: &str) {
        self.store.forget_node(node)
    }
    fn record_dropped(&self, source: &str, node: &str, what: &str, reason: DropReason) {
        self.store.record_dropped(source, node, what, reason)
    }
    fn record_fetch_end(&self, source: &str, successful: bool, expire_after: u32) {
        self.store
            .record_fetch_end(source, successful, expire_after)
    }
}

impl SourceRecorder for Recorder {
    fn register_source(&self, source: &str) {
        self.store.register_source(source)
    }
    fn record_source_run(
        &self,
        source: &str,
        finished_at: SystemTime,
        duration: Duration,
        outcome: RunOutcome,
    ) {
        self.store
            .record_source_run(source, finished_at, duration, outcome)
    }
    fn record_usage_match(&self, source: &str, m: UsageMatch) {
        assert_eq!(source, "prometheus");
        self.matches.lock().unwrap().push(m);
        self.store.record_usage_match(source, m)
    }
}

impl Provider for Recorder {
    fn cluster(&self) -> &dyn ClusterRecorder {
        self.store.cluster()
    }
    fn node(&self) -> &dyn NodeRecorder {
        self
    }
    fn probe(&self) -> &dyn ProbeRecorder {
        self.store.probe()
    }
    fn source(&self) -> &dyn SourceRecorder {
        self
    }
    fn sink(&self) -> &dyn SinkRecorder {
        self.store.sink()
    }
    fn task(&self) -> &dyn TaskRecorder {
        self.store.task()
    }
}

#[tokio::test]
async fn a_failed_freshness_query_keeps_the_values_dated_by_the_query_time() {
    let fake = FakePrometheus::start(Behaviour::FailMatching(
        "timestamp(".into(),
        vec![("n1:9100".into(), 0.5)],
    ))
    .await;
    let rec = Recorder::new();
    let mut f = PrometheusFetcher::new(config(&fake.url)).unwrap();
    let before = SystemTime::now();
    let outcome = run_once(&mut f, &rec, Duration::from_secs(20)).await;
    let after = SystemTime::now();
    let RunOutcome::Failed { reason, message } = outcome else {
        panic!("the failed query is an error of the round: {outcome:?}");
    };
    assert_eq!(reason, "http");
    assert!(message.contains("timestamp("), "{message}");
    let windows = rec.take_windows();
    assert_eq!(windows.len(), 3, "the values are kept: {windows:?}");
    assert!(
        windows
            .iter()
            .all(|(n, end)| n == "n1" && (before..=after).contains(end)),
        "{windows:?}"
    );
    let m = &decode(&published(&rec.store)).data.node_metrics_map["n1"].metrics;
    assert_eq!(find(m, CPU, "AVG").unwrap().value, 50.0);
    // No Nodes' names (not the cluster role): no self-check.
    assert_eq!(rec.last_match(), None);
}

/// The node (port cut) of a real node_exporter's instance label.
fn host_of(instance: &str) -> String {
    instance.split(':').next().unwrap_or(instance).to_string()
}

/// Runs rounds into `rec` until every one of `nodes` has CPU and Memory AVG on /watcher
/// (Prometheus needs a few scrapes); returns each node's metrics.
async fn rounds_until_nodes(
    f: &mut PrometheusFetcher,
    rec: &Recorder,
    nodes: &[&str],
) -> HashMap<String, Vec<Metric>> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        run_once(f, rec, Duration::from_secs(20)).await;
        if let Some(w) = published(&rec.store).watcher.as_ref() {
            let w: WatcherMetrics = serde_json::from_slice(&w.all()).unwrap();
            let has = |n: &&str| {
                w.data.node_metrics_map.get(*n).is_some_and(|m| {
                    find(&m.metrics, CPU, "AVG").is_some() && find(&m.metrics, MEM, "AVG").is_some()
                })
            };
            if nodes.iter().all(has) {
                return nodes
                    .iter()
                    .map(|n| (n.to_string(), w.data.node_metrics_map[*n].metrics.clone()))
                    .collect();
            }
        }
        assert!(
            Instant::now() < deadline,
            "no CPU and Memory for all of {nodes:?} within 60 s"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_prometheus_raw_series_name_ip_and_hostname_instances_and_the_rest_is_counted() {
    // No recording rules: node_exporter's raw series only. One exporter, scraped as three
    // targets: `127.0.0.1:PORT` (an InternalIP), `worker-b.example:9100` (a Hostname) and
    // `10.9.9.9:9100` (no Node's).
    let prom = tokio::task::spawn_blocking(|| {
        prom::RealPrometheus::start_with(false, &["worker-b.example:9100", "10.9.9.9:9100"])
    })
    .await
    .unwrap();
    let ip = host_of(&prom.node_exporter_instance);
    let nodes = ClusterNodes {
        names: ["node-a", "node-b", "node-c"].map(String::from).into(),
        by_address: HashMap::from([
            (ip.clone(), "node-a".to_string()),
            ("worker-b.example".to_string(), "node-b".to_string()),
            ("node-c.example".to_string(), "node-c".to_string()),
        ]),
    };
    let rec = Recorder::new();
    let mut cfg = config(&prom.url);
    cfg.fallback_resolution = Duration::from_secs(1);
    let mut f = PrometheusFetcher::new(cfg)
        .unwrap()
        .with_node_addresses(Arc::new(move || nodes.clone()));
    let m = rounds_until_nodes(&mut f, &rec, &["node-a", "node-b"]).await;
    let want = meminfo_utilisation() * 100.0;
    for node in ["node-a", "node-b"] {
        let cpu = find(&m[node], CPU, "AVG").unwrap().value;
        assert!((0.0..=100.0).contains(&cpu), "{node}: cpu {cpu}");
        let mem = find(&m[node], MEM, "AVG").unwrap().value;
        assert!(
            (mem - want).abs() < 5.0,
            "{node}: memory {mem} % vs /proc/meminfo {want} %"
        );
    }
    // The round that served both: node-c got nothing, 10.9.9.9 named no Node.
    assert_eq!(
        rec.last_match(),
        Some(UsageMatch {
            nodes_without_usage: 1,
            series_without_node: 1
        })
    );
    let served: Vec<String> = {
        let w = decode(&published(&rec.store));
        let mut k: Vec<String> = w.data.node_metrics_map.keys().cloned().collect();
        k.sort();
        k
    };
    assert_eq!(served, ["10.9.9.9", "node-a", "node-b"]);
    let text: Vec<u8> = published(&rec.store)
        .metrics_text
        .into_plain()
        .flatten()
        .collect();
    let text = String::from_utf8(text).unwrap();
    for what in ["nodes_without_usage", "series_without_node"] {
        let line =
            format!("kube_prober_usage_unmatched{{source=\"prometheus\",what=\"{what}\"}} 1\n");
        assert!(text.contains(&line), "/metrics lacks {line}");
    }
    // Each window ends at its node's newest sample: a moment ago, never later than now.
    let now = SystemTime::now();
    let windows = rec.take_windows();
    assert!(!windows.is_empty());
    for (node, end) in windows {
        let age = now
            .duration_since(end)
            .unwrap_or_else(|_| panic!("{node}: end after now"));
        assert!(age < Duration::from_secs(60), "{node}: {age:?} old");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_prometheus_a_stopped_target_is_never_newer_than_its_last_sample() {
    let prom = tokio::task::spawn_blocking(|| prom::RealPrometheus::start(true))
        .await
        .unwrap();
    let node = host_of(&prom.node_exporter_instance);
    let rec = Recorder::new();
    let mut f = PrometheusFetcher::new(config(&prom.url)).unwrap();
    rounds_until_nodes(&mut f, &rec, &[node.as_str()]).await;
    let fresh = rec.take_windows();
    assert!(fresh.iter().any(|(n, _)| *n == node), "{fresh:?}");

    let stopped = tokio::task::spawn_blocking(move || {
        prom.stop_node_exporter();
        (prom, SystemTime::now())
    });
    let (prom, stopped) = stopped.await.unwrap();
    // Until Prometheus marks the series stale (its next scrape, 1 s), the node is dated by its
    // last sample, before the stop; then it is not current at all, though
    // avg_over_time(...[15m]) still answers with its values.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        run_once(&mut f, &rec, Duration::from_secs(20)).await;
        let windows = rec.take_windows();
        for (n, end) in &windows {
            assert!(
                *end <= stopped,
                "{n}: window ends {:?} after the target stopped",
                end.duration_since(stopped).unwrap_or_default()
            );
        }
        if !windows.iter().any(|(n, _)| *n == node) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{node} still recorded 30 s after its target stopped"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let still = tokio::task::spawn_blocking(move || {
        prom.query("avg_over_time(instance:node_cpu:ratio[15m])")
    })
    .await
    .unwrap();
    assert!(!still.is_empty(), "Prometheus still answers the values");
}
