//! Usage faults against the binary, over real HTTP, on the stand-ins: nodes deleted in the
//! cluster (by a watch event, or only visible through a relist after 410 Gone), hosts a backend
//! stops reporting (metrics-server, Prometheus, SignalFx) and a metrics-server that lies
//! (400 cores on 4, a negative value, invalid JSON). Each test asserts the exact final state of
//! `/metrics` and `/watcher` and prints how long kube-prober took to converge
//! (`converged_in_ms=...`; docs/reliability.md quotes these figures).

use support::apiserver;
use support::fake_prom;
use support::fake_signalfx;

use std::time::{Duration, Instant, SystemTime};

use apiserver::{ApiServer, Kind, node, node_metrics};
use k8s_openapi::api::core::v1::Node;
use kube_prober::watcher::WatcherMetrics;
use support::{Prober, get, promtool_check, wait_ready};

/// Fast schedules: fetch every second, derive the cluster state and tick every second.
const FAST: [&str; 6] = [
    "--interval",
    "1s",
    "--timeout",
    "1s",
    "--tick-interval",
    "1s",
];

/// Usage families: what must leave with a node the backend no longer reports (its capacity
/// series stay while the Node exists: they then come from the Node object).
const USAGE_FAMILIES: [&str; 5] = [
    "kube_prober_node_cpu_utilization_ratio",
    "kube_prober_node_memory_utilization_ratio",
    "kube_prober_node_backend_value",
    "kube_prober_node_usage_samples",
    "kube_prober_node_usage_timestamp_seconds",
];

fn cluster_prober(api: &ApiServer, dir: &std::path::Path) -> Prober {
    let path = dir.join("kubeconfig");
    api.write_kubeconfig(&path).unwrap();
    let kc = path.to_string_lossy().into_owned();
    let mut args = vec!["--role", "cluster"];
    args.extend(FAST);
    Prober::start_with_env(&args, &[("KUBECONFIG", kc.as_str())])
}

async fn metrics(p: &Prober) -> String {
    let (status, body) = get(&p.url("/metrics")).await;
    assert_eq!(status, 200, "{body}");
    body
}

async fn watcher(p: &Prober) -> WatcherMetrics {
    let (status, body) = get(&p.url("/watcher")).await;
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

fn hosts(w: &WatcherMetrics) -> Vec<String> {
    w.data.node_metrics_map.keys().cloned().collect()
}

/// The hosts `/watcher` serves now; none while it has no data yet (500).
async fn hosts_now(p: &Prober) -> Vec<String> {
    let (status, body) = get(&p.url("/watcher")).await;
    if status != 200 {
        return Vec::new();
    }
    let w: WatcherMetrics = serde_json::from_str(&body).unwrap();
    hosts(&w)
}

/// `/watcher`'s value of `kind` / `operator` for `host`.
fn wvalue(w: &WatcherMetrics, host: &str, kind: &str, operator: &str) -> Option<f64> {
    w.data
        .node_metrics_map
        .get(host)?
        .metrics
        .iter()
        .find(|m| m.kind == kind && m.operator == operator)
        .map(|m| m.value)
}

/// Sample lines of `/metrics` that carry `node="name"`.
fn node_lines<'a>(body: &'a str, name: &str) -> Vec<&'a str> {
    let label = format!("node=\"{name}\"");
    body.lines()
        .filter(|l| !l.starts_with('#') && l.contains(&label))
        .collect()
}

/// Usage sample lines of `/metrics` for `name`.
fn usage_lines<'a>(body: &'a str, name: &str) -> Vec<&'a str> {
    node_lines(body, name)
        .into_iter()
        .filter(|l| {
            USAGE_FAMILIES
                .iter()
                .any(|f| l.starts_with(&format!("{f}{{")))
        })
        .collect()
}

/// The value of the sample line that starts with `series` (name and labels, exactly).
fn mvalue(body: &str, series: &str) -> Option<f64> {
    body.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

/// Polls `check` every 50 ms until it holds (at most 30 s); the time it took.
async fn converge<F, Fut>(what: &str, mut check: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = Instant::now();
    loop {
        if check().await {
            let took = started.elapsed();
            println!("{what}: converged_in_ms={}", took.as_millis());
            return took;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{what}: no convergence within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Sum of the `/metrics` samples of `family` whose labels contain `labels` (all when empty).
fn msum(body: &str, family: &str, labels: &str) -> f64 {
    body.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let rest = l.strip_prefix(family)?;
            let (series, value) = rest.rsplit_once(' ')?;
            (series.is_empty() || series.starts_with('{'))
                .then_some(())
                .filter(|()| series.contains(labels))?;
            value.trim().parse::<f64>().ok()
        })
        .sum()
}

/// Waits (bounded) until `source` has run and the tick loop has ticked `n` more times than now:
/// whatever a test checks next has been through that many more fetches and snapshots.
async fn after_more_runs(p: &Prober, source: &str, n: f64) {
    let runs = |m: &str| {
        (
            msum(
                m,
                "kube_prober_source_runs_total",
                &format!("source=\"{source}\""),
            ),
            msum(m, "kube_prober_ticks_total", ""),
        )
    };
    let (runs0, ticks0) = runs(&metrics(p).await);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (r, t) = runs(&metrics(p).await);
        if r >= runs0 + n && t >= ticks0 + n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no {n} more {source} runs and ticks within 30 s ({runs0} -> {r}, {ticks0} -> {t})"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Three nodes with metrics; waits until `/watcher` and `/metrics` show all three.
async fn three_nodes(api: &ApiServer, p: &Prober) {
    let now = SystemTime::now();
    api.set_nodes(vec![
        node("node-a", ("4", "8Gi"), ("4", "8Gi")),
        node("node-b", ("8", "16Gi"), ("8", "16Gi")),
        node("node-c", ("4", "8Gi"), ("4", "8Gi")),
    ]);
    api.set_node_metrics(vec![
        node_metrics("node-a", "1", "2Gi", now),
        node_metrics("node-b", "6", "4Gi", now),
        node_metrics("node-c", "2", "4Gi", now),
    ]);
    wait_ready(p).await;
    converge("initial state", || async {
        let m = metrics(p).await;
        hosts_now(p).await == ["node-a", "node-b", "node-c"]
            && !usage_lines(&m, "node-c").is_empty()
    })
    .await;
}

/// The two nodes that stay, exactly as before the fault.
async fn assert_a_and_b_untouched(p: &Prober) {
    let w = watcher(p).await;
    assert_eq!(hosts(&w), ["node-a", "node-b"]);
    assert_eq!(wvalue(&w, "node-a", "CPU", "Latest"), Some(25.0));
    assert_eq!(wvalue(&w, "node-a", "Memory", "Latest"), Some(25.0));
    assert_eq!(wvalue(&w, "node-b", "CPU", "Latest"), Some(75.0));
    assert_eq!(wvalue(&w, "node-b", "Memory", "Latest"), Some(25.0));
    assert_eq!(get(&p.url("/watcher/health")).await.0, 200);
    let m = metrics(p).await;
    assert!(m.contains("kube_prober_node_cpu_capacity_cores{node=\"node-b\"} 8"));
    assert!(!usage_lines(&m, "node-a").is_empty());
    let (code, out) = promtool_check(&m);
    assert_eq!(code, 0, "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_deleted_by_a_watch_event_leaves_every_output() {
    let api = apiserver::start().await;
    let dir = tempfile::tempdir().unwrap();
    let p = cluster_prober(&api, dir.path());
    three_nodes(&api, &p).await;

    // metrics-server keeps reporting the node for a while after it is gone: that must not
    // bring it back.
    assert!(api.delete::<Node>("", "node-c"));
    converge("node deleted by a watch event", || async {
        let m = metrics(&p).await;
        !hosts_now(&p).await.contains(&"node-c".to_string()) && node_lines(&m, "node-c").is_empty()
    })
    .await;
    // Several more fetches and ticks: it stays gone.
    after_more_runs(&p, "metrics_server", 3.0).await;
    let m = metrics(&p).await;
    assert_eq!(node_lines(&m, "node-c"), Vec::<&str>::new());
    assert_a_and_b_untouched(&p).await;
    // The fetch no longer sees the Node either, so the backend expiry may win the race
    // with the next cluster state; either way once.
    let expired = mvalue(
        &m,
        "kube_prober_source_expired_nodes_total{source=\"metrics_server\"}",
    );
    assert!(matches!(expired, Some(e) if e <= 1.0), "{expired:?}");
    println!("peak_rss_mib={:.1}", p.peak_rss_mib());
    assert_eq!(p.terminate(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_missing_after_a_410_relist_leaves_every_output() {
    let api = apiserver::start().await;
    let dir = tempfile::tempdir().unwrap();
    let p = cluster_prober(&api, dir.path());
    three_nodes(&api, &p).await;

    // No bookmark may carry the watcher past the compaction (see `ClusterState::compact`): from
    // here on no open watch sends one (the stand-in applies the interval at once).
    api.set_bookmark_interval(Duration::from_secs(3600));
    {
        // In one step: the deletion's event is compacted away before any watch can read it, so
        // only a relist (after 410 Gone) can show the node is missing.
        let mut st = api.state();
        assert!(st.delete::<Node>("", "node-c"));
        st.compact();
        st.drop_watches();
    }
    converge("node missing after a 410 relist", || async {
        let m = metrics(&p).await;
        !hosts_now(&p).await.contains(&"node-c".to_string()) && node_lines(&m, "node-c").is_empty()
    })
    .await;
    after_more_runs(&p, "metrics_server", 3.0).await;
    let m = metrics(&p).await;
    assert_eq!(node_lines(&m, "node-c"), Vec::<&str>::new());
    assert_a_and_b_untouched(&p).await;
    println!("peak_rss_mib={:.1}", p.peak_rss_mib());
    assert_eq!(p.terminate(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_metrics_server_stops_reporting_expires_after_two_fetches() {
    let api = apiserver::start().await;
    let dir = tempfile::tempdir().unwrap();
    let p = cluster_prober(&api, dir.path());
    three_nodes(&api, &p).await;

    let now = SystemTime::now();
    api.set_node_metrics(vec![
        node_metrics("node-a", "1", "2Gi", now),
        node_metrics("node-b", "6", "4Gi", now),
    ]);
    converge("host vanished from metrics-server", || async {
        let m = metrics(&p).await;
        !hosts_now(&p).await.contains(&"node-c".to_string()) && usage_lines(&m, "node-c").is_empty()
    })
    .await;
    after_more_runs(&p, "metrics_server", 2.0).await;
    let m = metrics(&p).await;
    assert_eq!(usage_lines(&m, "node-c"), Vec::<&str>::new());
    assert_eq!(
        mvalue(
            &m,
            "kube_prober_source_expired_nodes_total{source=\"metrics_server\"}"
        ),
        Some(1.0)
    );
    // The Node still exists: its cluster series stay, from the Node object.
    assert!(m.contains("kube_prober_node_allocatable_cpu_cores{node=\"node-c\"} 4"));
    assert!(m.contains("kube_prober_node_cpu_capacity_cores{node=\"node-c\"} 4"));
    assert_a_and_b_untouched(&p).await;
    println!("peak_rss_mib={:.1}", p.peak_rss_mib());
    assert_eq!(p.terminate(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_prometheus_stops_reporting_expires_in_the_host_role() {
    use fake_prom::{Behaviour, FakePrometheus};
    let fake = FakePrometheus::start(Behaviour::Answer(vec![
        ("h1:9100".into(), 0.3),
        ("h2:9100".into(), 0.4),
    ]))
    .await;
    let mut args = vec!["--role", "host"];
    args.extend(FAST);
    let p = Prober::start_with_env(
        &args,
        &[
            ("METRICS_PROVIDER_NAME", "Prometheus"),
            ("METRICS_PROVIDER_ADDRESS", fake.url.as_str()),
        ],
    );
    wait_ready(&p).await;
    converge("prometheus initial", || async {
        hosts_now(&p).await == ["h1", "h2"]
    })
    .await;
    fake.set(Behaviour::Answer(vec![("h1:9100".into(), 0.3)]));
    converge("host vanished from Prometheus", || async {
        let m = metrics(&p).await;
        hosts_now(&p).await == ["h1"] && node_lines(&m, "h2").is_empty()
    })
    .await;
    after_more_runs(&p, "prometheus", 2.0).await;
    let w = watcher(&p).await;
    assert_eq!(hosts(&w), ["h1"]);
    assert_eq!(wvalue(&w, "h1", "CPU", "AVG"), Some(30.0));
    let m = metrics(&p).await;
    assert_eq!(node_lines(&m, "h2"), Vec::<&str>::new());
    assert_eq!(
        mvalue(
            &m,
            "kube_prober_source_expired_nodes_total{source=\"prometheus\"}"
        ),
        Some(1.0)
    );
    assert!(m.contains(
        "kube_prober_node_cpu_utilization_ratio{node=\"h1\",window=\"15m\",operator=\"avg\"} 0.3"
    ));
    assert_eq!(get(&p.url("/watcher/health")).await.0, 200);
    let (code, out) = promtool_check(&m);
    assert_eq!(code, 0, "{out}");
    println!("peak_rss_mib={:.1}", p.peak_rss_mib());
    assert_eq!(p.terminate(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_signalfx_stops_reporting_expires_in_the_host_role() {
    use fake_signalfx::{FakeSignalFx, Series, TOKEN};
    let series = |id: &str, host: &str, metric: &str, v: f64| Series {
        id: id.into(),
        host: host.into(),
        metric: metric.into(),
        points: vec![(1, Some(v))],
    };
    let fake = FakeSignalFx::start(vec![
        series("A", "s1.example.com", "cpu.utilization", 30.0),
        series("B", "s1.example.com", "memory.utilization", 40.0),
        series("C", "s2.example.com", "cpu.utilization", 50.0),
        series("D", "s2.example.com", "memory.utilization", 60.0),
    ])
    .await;
    let mut args = vec!["--role", "host"];
    args.extend(FAST);
    let p = Prober::start_with_env(
        &args,
        &[
            ("METRICS_PROVIDER_NAME", "SignalFx"),
            ("METRICS_PROVIDER_ADDRESS", fake.url.as_str()),
            ("METRICS_PROVIDER_TOKEN", TOKEN),
        ],
    );
    wait_ready(&p).await;
    converge("signalfx initial", || async {
        hosts_now(&p).await == ["s1", "s2"]
    })
    .await;
    fake.inner
        .lock()
        .unwrap()
        .series
        .retain(|s| s.host != "s2.example.com");
    converge("host vanished from SignalFx", || async {
        let m = metrics(&p).await;
        hosts_now(&p).await == ["s1"] && node_lines(&m, "s2").is_empty()
    })
    .await;
    after_more_runs(&p, "signalfx", 2.0).await;
    let w = watcher(&p).await;
    assert_eq!(hosts(&w), ["s1"]);
    assert_eq!(wvalue(&w, "s1", "CPU", "AVG"), Some(30.0));
    let m = metrics(&p).await;
    assert_eq!(node_lines(&m, "s2"), Vec::<&str>::new());
    assert_eq!(
        mvalue(
            &m,
            "kube_prober_source_expired_nodes_total{source=\"signalfx\"}"
        ),
        Some(1.0)
    );
    assert_eq!(get(&p.url("/watcher/health")).await.0, 200);
    println!("peak_rss_mib={:.1}", p.peak_rss_mib());
    assert_eq!(p.terminate(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lying_metrics_server_loses_only_the_lies() {
    let api = apiserver::start().await;
    let now = SystemTime::now();
    api.set_nodes(vec![
        node("good", ("4", "8Gi"), ("4", "8Gi")),
        node("liar", ("4", "8Gi"), ("4", "8Gi")),
        node("negative", ("4", "8Gi"), ("4", "8Gi")),
    ]);
    api.set_node_metrics(vec![
        node_metrics("good", "1", "2Gi", now),
        node_metrics("liar", "400", "2Gi", now),
        node_metrics("negative", "1", "-2Gi", now),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let p = cluster_prober(&api, dir.path());
    wait_ready(&p).await;
    converge("lies dropped", || async {
        hosts_now(&p).await == ["good", "liar", "negative"]
    })
    .await;

    // 400 cores on 4 and a negative memory: those two values are dropped, nothing else.
    let w = watcher(&p).await;
    assert_eq!(wvalue(&w, "good", "CPU", "Latest"), Some(25.0));
    assert_eq!(wvalue(&w, "good", "Memory", "Latest"), Some(25.0));
    assert_eq!(wvalue(&w, "liar", "CPU", "Latest"), None);
    assert_eq!(wvalue(&w, "liar", "Memory", "Latest"), Some(25.0));
    assert_eq!(wvalue(&w, "negative", "CPU", "Latest"), Some(25.0));
    assert_eq!(wvalue(&w, "negative", "Memory", "Latest"), None);
    assert!(
        w.data
            .node_metrics_map
            .values()
            .flat_map(|n| &n.metrics)
            .all(|m| (0.0..=100.0).contains(&m.value)),
        "no percentage outside 0-100: {w:?}"
    );
    assert_eq!(get(&p.url("/watcher/health")).await.0, 200);
    let m = metrics(&p).await;
    let runs = mvalue(
        &m,
        "kube_prober_source_runs_total{source=\"metrics_server\"}",
    )
    .unwrap();
    let dropped = |reason: &str| {
        mvalue(
            &m,
            &format!(
                "kube_prober_source_dropped_values_total{{source=\"metrics_server\",reason=\"{reason}\"}}"
            ),
        )
    };
    // Every run so far saw both lies: one drop of each per run, and no run failed.
    assert_eq!(dropped("above_capacity"), Some(runs));
    assert_eq!(dropped("negative"), Some(runs));
    assert!(!m.contains("kube_prober_source_errors_total{source=\"metrics_server\""));
    assert!(m.contains("kube_prober_source_up{source=\"metrics_server\"} 1"));
    assert!(!m.contains("kube_prober_node_cpu_utilization_ratio{node=\"liar\""));
    assert!(!m.contains("kube_prober_node_memory_utilization_ratio{node=\"negative\""));
    assert!(m.contains("kube_prober_node_cpu_utilization_ratio{node=\"good\""));
    let (code, out) = promtool_check(&m);
    assert_eq!(code, 0, "{out}");

    // Invalid JSON: the run fails as `parse`, health goes 503, the last good data stays.
    api.set_raw_list(
        Kind::NodeMetrics,
        Some("{\"kind\":\"NodeMetricsList\",\"items\":[{"),
    );
    converge("invalid JSON seen", || async {
        get(&p.url("/watcher/health")).await.0 == 503
    })
    .await;
    let m = metrics(&p).await;
    let parse = "kube_prober_source_errors_total{source=\"metrics_server\",reason=\"parse\"}";
    assert!(mvalue(&m, parse).unwrap_or(0.0) >= 1.0, "{m}");
    assert!(
        !m.contains("kube_prober_source_errors_total{source=\"metrics_server\",reason=\"http\"}")
    );
    let w = watcher(&p).await;
    assert_eq!(
        hosts(&w),
        ["good", "liar", "negative"],
        "failed fetches expire nothing"
    );
    assert_eq!(wvalue(&w, "good", "CPU", "Latest"), Some(25.0));
    // Recovery.
    api.set_raw_list(Kind::NodeMetrics, None);
    converge("recovered from invalid JSON", || async {
        get(&p.url("/watcher/health")).await.0 == 200
    })
    .await;
    println!("peak_rss_mib={:.1}", p.peak_rss_mib());
    assert_eq!(p.terminate(), 0);
}
