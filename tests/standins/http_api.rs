//! A fixed snapshot through the real router over HTTP on 127.0.0.1: golden bodies, status codes,
//! content types, gzip, and load-watcher's /watcher rules.

use std::io::Read;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use kube_prober::hub::{Provider, RunOutcome, Store};
use kube_prober::model::{
    ClusterInfo, NodeCapacity, ProbeOutcome, Resource, Snapshot, UsageSample,
};
use kube_prober::outputs::prometheus::{self, Format};
use kube_prober::outputs::published::Published;
use kube_prober::serve::server::{self, AppState};
use kube_prober::watcher::WatcherMetrics;
use support::{assert_golden, promtool_check};
use tokio::sync::watch;

const T0: u64 = 1_700_000_000;

fn at(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
}

/// Two nodes, 20 minutes of one-a-minute samples, one source run, one probe.
pub fn fixed_snapshot() -> Snapshot {
    let store = Store::new();
    store.cluster().record_cluster_info(ClusterInfo {
        cluster_name: "test".into(),
        role: "host".into(),
        ..Default::default()
    });
    store.source().register_source("host");
    for i in 0..20u64 {
        let t = T0 + i * 60;
        for (node, base) in [("node-a", 0.10), ("node-b", 0.50)] {
            store.node().record_node_usage(
                "host",
                UsageSample {
                    node: node.into(),
                    at: at(t),
                    values: vec![
                        (Resource::Cpu, base + (i % 4) as f64 * 0.05),
                        (Resource::Memory, base + 0.25),
                        (Resource::NetworkReceive, 1000.0 * i as f64),
                        (Resource::NetworkTransmit, 500.0),
                        (Resource::DiskIo, 0.125),
                    ],
                },
            );
        }
    }
    store.node().record_node_capacity(
        "node-a",
        NodeCapacity {
            cpu_cores: 4.0,
            memory_bytes: 8.0 * 1024.0 * 1024.0 * 1024.0,
        },
    );
    store.source().record_source_run(
        "host",
        at(T0 + 19 * 60),
        Duration::from_millis(12),
        RunOutcome::Ok,
    );
    store.probe().record_probe_outcome(ProbeOutcome {
        probe: "http".into(),
        target: "http://example.invalid/\"quoted\"".into(),
        at: at(T0),
        duration: Duration::from_millis(250),
        failure: Some("timeout".into()),
    });
    store.record_tick(Duration::from_micros(1500));
    store.snapshot(at(T0 + 19 * 60 + 5))
}

async fn serve(published: Published) -> (String, tokio::task::JoinHandle<()>) {
    let (_tx, rx) = watch::channel(Arc::new(published));
    let state = AppState {
        published: rx,
        stale_after: Duration::from_secs(3600 * 24 * 365 * 100),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        // Keep the sender alive as long as the server.
        let _tx = _tx;
        axum::serve(listener, server::router(state)).await.unwrap();
    });
    (format!("http://{addr}"), task)
}

#[test]
fn golden_metrics_text_and_openmetrics() {
    let snap = fixed_snapshot();
    let now = at(T0 + 19 * 60 + 7);
    let text = prometheus::render(&snap, Format::Text)
        + &prometheus::render_tail(&snap, now, Format::Text);
    assert_golden("metrics.prom", &text);
    let om = prometheus::render(&snap, Format::OpenMetrics)
        + &prometheus::render_tail(&snap, now, Format::OpenMetrics);
    assert_golden("metrics.om", &om);
    let (code, out) = promtool_check(&text);
    assert_eq!(code, 0, "promtool check metrics:\n{out}");
}

/// The golden file holds `CRATE_VERSION`, not this crate's version, on the build_info line
/// (a version bump changes no golden file), and the rendered body still carries the version.
#[test]
fn golden_files_carry_no_crate_version() {
    let snap = fixed_snapshot();
    let text = prometheus::render(&snap, Format::Text);
    let line = format!(
        "kube_prober_build_info{{version=\"{}\"}} 1",
        env!("CARGO_PKG_VERSION")
    );
    assert!(text.contains(&line), "{text}");
    for name in ["metrics.prom", "metrics.om", "cluster_metrics.prom"] {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/golden")
            .join(name);
        let golden = std::fs::read_to_string(&path).unwrap();
        assert!(golden.contains("kube_prober_build_info{version=\"CRATE_VERSION\"} 1"));
        assert!(!golden.contains(&line), "{name} carries the crate version");
    }
}

/// `UPDATE_GOLDEN` under `CI` fails (it would rewrite the file and pass) and leaves the file as
/// it was: the golden test is run again in a child with both set.
#[test]
fn update_golden_is_refused_in_ci() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/watcher.json");
    let before = std::fs::read(&path).unwrap();
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args([
        &support::test_name(module_path!(), "golden_watcher_body"),
        "--exact",
        "--test-threads",
        "1",
    ])
    .env("CI", "true")
    .env("UPDATE_GOLDEN", "1");
    let out = support::owned::output(cmd, None).unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("UPDATE_GOLDEN is set while CI is: refusing"),
        "{text}"
    );
    assert!(
        text.contains("1 failed"),
        "the golden test ran and failed: {text}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), before);
}

#[test]
fn golden_watcher_body() {
    let bodies = kube_prober::watcher::render(&fixed_snapshot(), Default::default()).unwrap();
    assert_golden("watcher.json", std::str::from_utf8(&bodies.all()).unwrap());
}

#[tokio::test]
async fn endpoints_over_http() {
    let (base, _task) = serve(Published::render(Arc::new(fixed_snapshot()), "host")).await;
    let http = reqwest::Client::builder().no_gzip().build().unwrap(); // see the raw gzip body

    // /metrics: text by default, OpenMetrics when asked, gzip when asked.
    let r = http.get(format!("{base}/metrics")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers()["content-type"],
        "text/plain; version=0.0.4; charset=utf-8"
    );
    let text = r.text().await.unwrap();
    assert!(text.contains("kube_prober_node_cpu_utilization_ratio{node=\"node-a\",window=\"instant\",operator=\"latest\"} 0.25\n"));
    assert!(text.contains("# TYPE kube_prober_snapshot_age_seconds gauge\n"));
    let (code, out) = promtool_check(&text);
    assert_eq!(code, 0, "{out}");

    let r = http
        .get(format!("{base}/metrics"))
        .header(
            "accept",
            "application/openmetrics-text;version=1.0.0,text/plain;q=0.5",
        )
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.headers()["content-type"],
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    let om = r.text().await.unwrap();
    assert!(om.ends_with("# EOF\n"));
    assert!(om.contains(
        "# TYPE kube_prober_source_runs counter\nkube_prober_source_runs_total{source=\"host\"} 1\n"
    ));

    let r = http
        .get(format!("{base}/metrics"))
        .header("accept-encoding", "gzip")
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["content-encoding"], "gzip");
    let gz = r.bytes().await.unwrap();
    let mut plain = String::new();
    flate2::read::GzDecoder::new(&gz[..])
        .read_to_string(&mut plain)
        .unwrap();
    assert!(plain.starts_with("# HELP kube_prober_build_info"));
    assert!(gz.len() < plain.len());

    // /watcher: all hosts, one host, unknown host, and only the exact path.
    let r = http.post(format!("{base}/watcher")).send().await.unwrap();
    assert_eq!(r.status(), 200, "any method is accepted");
    assert_eq!(r.headers()["content-type"], "application/json");
    let all: WatcherMetrics = serde_json::from_slice(&r.bytes().await.unwrap()).unwrap();
    assert_eq!(all.data.node_metrics_map.len(), 2);

    let r = http
        .get(format!("{base}/watcher?host=node-b"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let one: WatcherMetrics = serde_json::from_slice(&r.bytes().await.unwrap()).unwrap();
    assert_eq!(
        one.data.node_metrics_map.keys().collect::<Vec<_>>(),
        ["node-b"]
    );
    assert_eq!(one.timestamp, all.timestamp);
    assert_eq!(
        one.data.node_metrics_map["node-b"],
        all.data.node_metrics_map["node-b"]
    );

    let r = http
        .get(format!("{base}/watcher?host=unknown"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(r.headers()["content-type"], "application/json");
    assert_eq!(r.text().await.unwrap(), "No metrics found for host unknown");

    let r = http
        .get(format!("{base}/watcher?host="))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "an empty host means all hosts");

    for path in ["/watcher/", "/watcher/node-a", "/nope"] {
        let r = http.get(format!("{base}{path}")).send().await.unwrap();
        assert_eq!(r.status(), 404, "{path}");
    }

    let r = http
        .get(format!("{base}/watcher/health"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = http.get(format!("{base}/readyz")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let r = http.get(format!("{base}/healthz")).send().await.unwrap();
    assert_eq!(r.status(), 200);
}

#[tokio::test]
async fn before_any_data_watcher_is_500_and_not_ready() {
    let (base, _task) = serve(Published::render(
        Arc::new(Snapshot::empty(SystemTime::now())),
        "host",
    ))
    .await;
    let http = reqwest::Client::new();
    let r = http.get(format!("{base}/watcher")).send().await.unwrap();
    assert_eq!(r.status(), 500);
    assert_eq!(r.headers()["content-type"], "application/json");
    assert!(r.bytes().await.unwrap().is_empty());
    assert_eq!(
        http.get(format!("{base}/watcher/health"))
            .send()
            .await
            .unwrap()
            .status(),
        503
    );
    let r = http.get(format!("{base}/readyz")).send().await.unwrap();
    assert_eq!(r.status(), 503);
    assert!(r.text().await.unwrap().contains("no snapshot yet"));
    assert_eq!(
        http.get(format!("{base}/healthz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
}

#[tokio::test]
async fn a_stale_tick_loop_fails_healthz() {
    let old = Snapshot::empty(SystemTime::now() - Duration::from_secs(120));
    let (_tx, rx) = watch::channel(Arc::new(Published::render(Arc::new(old), "host")));
    let state = AppState {
        published: rx,
        stale_after: Duration::from_secs(60),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, server::router(state)).await });
    let r = reqwest::get(format!("http://{addr}/healthz"))
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    assert!(r.text().await.unwrap().contains("stalled"));
}

/// Decoding with structs that mirror load-watcher's exactly, refusing unknown keys.
#[allow(dead_code)]
mod load_watcher {
    use serde::Deserialize;
    use std::collections::HashMap;

    #[derive(Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    pub struct WatcherMetrics {
        pub timestamp: i64,
        pub window: Window,
        pub source: String,
        pub data: Data,
    }
    #[derive(Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    pub struct Window {
        pub duration: String,
        pub start: i64,
        pub end: i64,
    }
    #[derive(Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    #[allow(non_snake_case)]
    pub struct Data {
        pub NodeMetricsMap: HashMap<String, NodeMetrics>,
        /// Ours, beside the host map (skipped by load-watcher's Go client as the keys below).
        #[serde(rename = "boundPods", default)]
        pub bound_pods: HashMap<String, BoundPods>,
    }
    #[derive(Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    pub struct NodeMetrics {
        pub metrics: Vec<Metric>,
        pub tags: Tags,
        pub metadata: Metadata,
        /// Ours (load-watcher's Go client and the scheduler skip unknown keys:
        /// tests/real/trimaran.rs proves it with the real ones); strict here too.
        pub freshness: Freshness,
    }
    #[derive(Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    pub struct Freshness {
        pub newest: i64,
        pub coverage: HashMap<String, f64>,
    }
    #[derive(Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    #[allow(non_snake_case, dead_code)]
    pub struct BoundPods {
        pub pods: u32,
        pub cpuCores: f64,
        pub memoryBytes: f64,
        pub cpu: Option<f64>,
        pub memory: Option<f64>,
        pub folded: bool,
    }
    #[derive(Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    pub struct Tags {}
    #[derive(Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    #[allow(non_snake_case)]
    pub struct Metadata {
        pub dataCenter: String,
    }
    #[derive(Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    pub struct Metric {
        pub name: String,
        #[serde(rename = "type")]
        pub kind: String,
        pub operator: String,
        pub rollup: String,
        pub value: f64,
    }
}

#[test]
fn watcher_body_decodes_strictly_and_values_are_right() {
    let bodies = kube_prober::watcher::render(&fixed_snapshot(), Default::default()).unwrap();
    let m: load_watcher::WatcherMetrics = serde_json::from_slice(&bodies.all()).unwrap();
    assert_eq!(m.window.duration, "15m");
    assert_eq!(
        m.window.end,
        (T0 + 19 * 60) as i64,
        "end is the newest sample's time"
    );
    assert_eq!(m.window.end - m.window.start, 900);
    assert_eq!(m.timestamp, (T0 + 19 * 60 + 5) as i64);
    assert_eq!(m.source, "Host");
    let a = &m.data.NodeMetricsMap["node-a"];
    assert_eq!(a.metadata.dataCenter, "");
    let find = |kind: &str, op: &str| {
        a.metrics
            .iter()
            .find(|x| x.kind == kind && x.operator == op)
            .unwrap_or_else(|| panic!("{kind} {op} missing"))
    };
    // node-a CPU: 0.10 + (i % 4) * 0.05 for i in 0..20; latest i=19 -> 0.25 -> 25 %.
    assert_eq!(find("CPU", "Latest").value, 25.0);
    // 15m window keeps i = 5..=19 (t > end - 900): (i % 4) = 1,2,3,0,1,2,3,0,1,2,3,0,1,2,3
    // mean of (i%4) = 24/15 = 1.6 -> 0.10 + 0.08 = 0.18 -> 18 %.
    let avg = find("CPU", "AVG");
    assert!((avg.value - 18.0).abs() < 1e-9, "{}", avg.value);
    assert_eq!(avg.rollup, "15m");
    // std of (i%4) over those 15: sum of squares = 4*1 + 4*4 + 4*9 = 56, so
    // var = 56/15 - 1.6^2 and the CPU std is 0.05 * sqrt(var).
    let std = find("CPU", "STD");
    let want = 0.05 * (56.0f64 / 15.0 - 1.6 * 1.6).sqrt() * 100.0;
    assert!((std.value - want).abs() < 1e-9, "{} vs {want}", std.value);
    assert_eq!(find("Memory", "Latest").value, 35.0);
    assert_eq!(find("Memory", "STD").value, 0.0);
    // TargetLoadPacking takes the last CPU metric that is AVG or Latest: it must be the AVG.
    let last = a
        .metrics
        .iter()
        .rfind(|x| x.kind == "CPU" && (x.operator == "AVG" || x.operator == "Latest"))
        .unwrap();
    assert_eq!(last.operator, "AVG");
}
