//! Values a backend aggregated itself (Prometheus, SignalFx) through the hub to `/watcher`.

use std::time::{Duration, SystemTime};

use kube_prober::hub::{Provider, Store};
use kube_prober::model::{BackendValue, BackendWindow, MetricType, Operator, Window};
use kube_prober::watcher::{WatcherConfig, WatcherMetrics, render};

const T0: u64 = 1_760_000_000;

fn at(s: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(s)
}

fn v(name: &str, kind: MetricType, operator: Operator, value: f64) -> BackendValue {
    BackendValue {
        name: name.into(),
        kind,
        resource: None,
        operator,
        value,
    }
}

fn round(store: &Store, node: &str, window: Window, end: u64, values: Vec<BackendValue>) {
    store.node().record_node_window(
        "prometheus",
        BackendWindow {
            node: node.into(),
            window,
            start: at(end) - window.duration(),
            end: at(end),
            values,
        },
    );
}

fn decode(store: &Store, opts: WatcherConfig) -> Option<WatcherMetrics> {
    render(&store.snapshot(at(T0 + 30)), opts).map(|b| serde_json::from_slice(&b.all()).unwrap())
}

fn prometheus_round(store: &Store, end: u64) {
    use MetricType::*;
    use Operator::*;
    round(
        store,
        "worker-1",
        Window::FifteenMinutes,
        end,
        vec![
            v("instance:node_cpu:ratio", Cpu, Avg, 0.8),
            v("instance:node_memory_utilisation:ratio", Memory, Avg, 0.25),
            v(
                "instance:node_network_receive_bytes:rate:sum",
                Bandwidth,
                Avg,
                82_000.0,
            ),
            v("instance:node_cpu:ratio", Cpu, Std, 0.16),
            v(
                "instance:node_memory_utilisation:ratio",
                Memory,
                Std,
                0.0625,
            ),
        ],
    );
}

#[test]
fn prometheus_style_values_round_trip_as_trimaran_expects() {
    let store = Store::new();
    prometheus_round(&store, T0);
    let m = decode(&store, WatcherConfig::default()).unwrap();
    assert_eq!(m.source, "Prometheus");
    assert_eq!(
        (m.window.duration.as_str(), m.window.end),
        ("15m", T0 as i64)
    );
    let got: Vec<(&str, &str, &str, &str, f64)> = m.data.node_metrics_map["worker-1"]
        .metrics
        .iter()
        .map(|x| {
            (
                x.name.as_str(),
                x.kind.as_str(),
                x.operator.as_str(),
                x.rollup.as_str(),
                x.value,
            )
        })
        .collect();
    // scheduler-plugins' collector test values: CPU AVG 80 / STD 16, Mem AVG 25 / STD 6.25;
    // every AVG first, then every STD, as load-watcher lists them; bandwidth in bytes/s.
    assert_eq!(
        got,
        vec![
            ("instance:node_cpu:ratio", "CPU", "AVG", "15m", 80.0),
            (
                "instance:node_memory_utilisation:ratio",
                "Memory",
                "AVG",
                "15m",
                25.0
            ),
            (
                "instance:node_network_receive_bytes:rate:sum",
                "Bandwidth",
                "AVG",
                "15m",
                82_000.0
            ),
            ("instance:node_cpu:ratio", "CPU", "STD", "15m", 16.0),
            (
                "instance:node_memory_utilisation:ratio",
                "Memory",
                "STD",
                "15m",
                6.25
            ),
        ]
    );
}

#[test]
fn legacy_scaling_multiplies_every_type_by_100_as_load_watcher() {
    let store = Store::new();
    prometheus_round(&store, T0);
    let m = decode(
        &store,
        WatcherConfig {
            legacy_scaling: true,
            ..WatcherConfig::default()
        },
    )
    .unwrap();
    let bw = m.data.node_metrics_map["worker-1"]
        .metrics
        .iter()
        .find(|x| x.kind == "Bandwidth")
        .unwrap();
    assert_eq!(bw.value, 8_200_000.0);
}

#[test]
fn a_failed_query_loses_only_its_metric_and_end_tells_the_truth() {
    let store = Store::new();
    prometheus_round(&store, T0);
    // The next round only got the CPU AVG query through.
    round(
        &store,
        "worker-1",
        Window::FifteenMinutes,
        T0 + 60,
        vec![v(
            "instance:node_cpu:ratio",
            MetricType::Cpu,
            Operator::Avg,
            0.5,
        )],
    );
    let m = decode(&store, WatcherConfig::default()).unwrap();
    let metrics = &m.data.node_metrics_map["worker-1"].metrics;
    assert_eq!(metrics.len(), 5, "the other values stay");
    assert_eq!(
        metrics[0].value, 50.0,
        "the fresh value replaced the old one in place"
    );
    assert_eq!(
        m.window.end, T0 as i64,
        "end is the oldest time a served value stands for"
    );
}

#[test]
fn fifteen_minutes_falls_back_to_ten_never_to_five() {
    let store = Store::new();
    let cpu = || vec![v("c", MetricType::Cpu, Operator::Avg, 0.3)];
    round(&store, "n", Window::FiveMinutes, T0, cpu());
    assert!(
        decode(&store, WatcherConfig::default()).is_none(),
        "5m alone is not served"
    );
    round(&store, "n", Window::TenMinutes, T0, cpu());
    assert_eq!(
        decode(&store, WatcherConfig::default())
            .unwrap()
            .window
            .duration,
        "10m"
    );
    round(&store, "n", Window::FifteenMinutes, T0, cpu());
    assert_eq!(
        decode(&store, WatcherConfig::default())
            .unwrap()
            .window
            .duration,
        "15m"
    );
}

#[test]
fn non_finite_backend_values_are_dropped_and_counted() {
    let store = Store::new();
    round(
        &store,
        "n",
        Window::FifteenMinutes,
        T0,
        vec![
            v("c", MetricType::Cpu, Operator::Avg, f64::NAN),
            v("m", MetricType::Memory, Operator::Avg, 0.5),
        ],
    );
    let snap = store.snapshot(at(T0 + 1));
    assert_eq!(snap.sources["prometheus"].dropped["non_finite"], 1);
    let body = render(&snap, WatcherConfig::default()).unwrap();
    let all = body.all();
    let text = std::str::from_utf8(&all).unwrap();
    assert!(!text.contains("NaN"), "{text}");
    let m: WatcherMetrics = serde_json::from_str(text).unwrap();
    assert_eq!(m.data.node_metrics_map["n"].metrics.len(), 1);
}
