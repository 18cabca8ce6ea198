//! Trimaran's plugins scoring nodes from our `/watcher` bodies, with the scoring written from
//! scheduler-plugins' documented formulas (tests/support/trimaran.rs). The same functions are
//! checked against the scores the real plugins log in tests/real/trimaran.rs, so these fast tests
//! hold for the real scheduler too.

use std::time::{Duration, SystemTime};

use kube_prober::hub::{Provider, Store};
use kube_prober::model::{Resource, UsageSample};
use kube_prober::watcher::{Metric, WatcherMetrics};

const T0: u64 = 1_750_000_000;

/// `/watcher` as Trimaran decodes it, from a Latest-only source's samples (one a minute).
fn watcher_from(samples: &[(&str, Resource, &[f64])]) -> WatcherMetrics {
    let store = Store::new();
    for (node, resource, values) in samples {
        for (i, v) in values.iter().enumerate() {
            store.node().record_node_usage(
                "metrics_server",
                UsageSample {
                    node: node.to_string(),
                    at: SystemTime::UNIX_EPOCH + Duration::from_secs(T0 + 60 * i as u64),
                    values: vec![(*resource, *v)],
                },
            );
        }
    }
    // A minute after the last sample: fresh (`--watcher-max-age` leaves out older hosts).
    let newest = samples.iter().map(|s| s.2.len()).max().unwrap_or(1) as u64;
    let at = SystemTime::UNIX_EPOCH + Duration::from_secs(T0 + 60 * newest);
    let snap = store.snapshot(at);
    let bodies = kube_prober::watcher::render(&snap, Default::default()).expect("data");
    serde_json::from_slice(&bodies.all()).expect("decodes")
}

use support::trimaran as scoring;

use scoring::{Args, NodePod};

/// A 4-core, 8 GiB node and a pod that asks for nothing: what the scores below are about.
fn node() -> NodePod {
    NodePod {
        cpu_capacity_millis: 4000.0,
        cpu_allocatable_millis: 4000.0,
        memory_allocatable_bytes: 8.0 * 1024.0 * 1024.0 * 1024.0,
        ..NodePod::default()
    }
}

fn tlp_score(metrics: Option<&[Metric]>, target: f64) -> i64 {
    let args = Args {
        target_utilization: target,
        ..Args::default()
    };
    scoring::tlp_score(metrics, &args, &node())
}

fn lvrb_score(metrics: &[Metric], margin: f64, sensitivity: f64) -> i64 {
    let args = Args {
        margin,
        sensitivity,
        ..Args::default()
    };
    scoring::lvrb_score(Some(metrics), &args, &node())
}

#[test]
fn target_load_packing_scores_idle_and_hot_nodes_as_upstream() {
    let w = watcher_from(&[
        ("idle", Resource::Cpu, &[0.0, 0.0, 0.0]),
        ("hot", Resource::Cpu, &[0.5, 0.5, 0.5]),
    ]);
    let map = &w.data.node_metrics_map;
    assert_eq!(tlp_score(map.get("idle").map(|n| &n.metrics[..]), 40.0), 40);
    assert_eq!(tlp_score(map.get("hot").map(|n| &n.metrics[..]), 40.0), 33);
    assert_eq!(
        tlp_score(map.get("absent").map(|n| &n.metrics[..]), 40.0),
        0,
        "no data scores 0"
    );
}

#[test]
fn target_load_packing_uses_the_window_mean_not_the_last_sample() {
    // Samples 20 %, 80 %, 50 %: the last CPU metric of AVG/Latest is the 15m AVG (50 %).
    let w = watcher_from(&[("n", Resource::Cpu, &[0.2, 0.8, 0.5])]);
    let m = &w.data.node_metrics_map["n"].metrics;
    assert_eq!(tlp_score(Some(m), 40.0), 33);
    let w = watcher_from(&[("n", Resource::Cpu, &[0.5, 0.5, 0.2])]);
    // mean 40 % is exactly the target: the best score, 100; a Latest-only reading (20 %)
    // would give (100 - 40) * 20 / 40 + 40 = 70.
    let m = &w.data.node_metrics_map["n"].metrics;
    assert_eq!(tlp_score(Some(m), 40.0), 100);
    let latest: Vec<Metric> = m
        .iter()
        .filter(|x| x.operator == "Latest")
        .cloned()
        .collect();
    assert_eq!(tlp_score(Some(&latest), 40.0), 70);
}

#[test]
fn load_variation_risk_balancing_cpu_avg_50_alone_scores_75() {
    let w = watcher_from(&[("n", Resource::Cpu, &[0.5, 0.5, 0.5])]);
    assert_eq!(
        lvrb_score(&w.data.node_metrics_map["n"].metrics, 1.0, 1.0),
        75
    );
}

#[test]
fn computed_std_changes_the_risk_score_of_a_latest_only_source() {
    // A metrics-server style source reports only the newest value. load-watcher would publish
    // just `Latest 50` for this node (LVRB: 75). We keep the samples and publish AVG 50 and
    // STD sqrt(600) = 24.49, so LVRB sees the variation: risk = (0.5 + 0.2449) / 2, score 63.
    let w = watcher_from(&[("n", Resource::Cpu, &[0.2, 0.8, 0.5])]);
    let metrics = &w.data.node_metrics_map["n"].metrics;
    let std = metrics
        .iter()
        .find(|m| m.kind == "CPU" && m.operator == "STD")
        .unwrap();
    assert!((std.value - 600f64.sqrt()).abs() < 1e-9, "{}", std.value);
    assert_eq!(lvrb_score(metrics, 1.0, 1.0), 63);
    let latest_only: Vec<Metric> = metrics
        .iter()
        .filter(|m| m.operator == "Latest")
        .cloned()
        .collect();
    assert_eq!(lvrb_score(&latest_only, 1.0, 1.0), 75);
}

#[test]
fn load_variation_risk_balancing_takes_the_lower_of_cpu_and_memory() {
    let w = watcher_from(&[
        ("n", Resource::Cpu, &[0.2, 0.2]),
        ("n", Resource::Memory, &[0.6, 0.6]),
    ]);
    // CPU: (1 - 0.2/2) * 100 = 90; memory: (1 - 0.6/2) * 100 = 70.
    assert_eq!(
        lvrb_score(&w.data.node_metrics_map["n"].metrics, 1.0, 1.0),
        70
    );
}

use support::apiserver;

/// The metrics-server scenario end to end: the real kube client reads three NodeMetrics
/// rounds (20 %, 80 %, 50 %) from the stand-in API server; load-watcher would serve only
/// `Latest 50` (LVRB 75), kube-prober serves AVG 50 and STD 24.49 as well (LVRB 63).
#[tokio::test]
async fn metrics_server_rounds_give_lvrb_the_variation() {
    use kube_prober::sources::usage::metrics_server::{MetricsServerConfig, MetricsServerFetcher};
    let api = apiserver::start().await;
    api.set_nodes(vec![apiserver::node("n", ("4", "8Gi"), ("4", "8Gi"))]);
    let store = Store::new();
    let mut f = MetricsServerFetcher::new(api.client(), MetricsServerConfig::default());
    for (i, cpu) in ["800m", "3200m", "2"].into_iter().enumerate() {
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(T0 + 60 * i as u64);
        api.set_node_metrics(vec![apiserver::node_metrics("n", cpu, "1Gi", at)]);
        let outcome =
            kube_prober::sources::usage::run_once(&mut f, &store, Duration::from_secs(10)).await;
        assert_eq!(outcome, kube_prober::hub::RunOutcome::Ok);
    }
    let snap = store.snapshot(SystemTime::UNIX_EPOCH + Duration::from_secs(T0 + 200));
    let bodies = kube_prober::watcher::render(&snap, Default::default()).unwrap();
    let w: WatcherMetrics = serde_json::from_slice(&bodies.all()).unwrap();
    assert_eq!(w.source, "KubernetesMetricsServer");
    let metrics = &w.data.node_metrics_map["n"].metrics;
    assert_eq!(lvrb_score(metrics, 1.0, 1.0), 63);
    let latest_only: Vec<Metric> = metrics
        .iter()
        .filter(|m| m.operator == "Latest")
        .cloned()
        .collect();
    assert_eq!(lvrb_score(&latest_only, 1.0, 1.0), 75);
    assert_eq!(tlp_score(Some(metrics), 40.0), 33, "TLP on the 50 % mean");
}

#[test]
fn regularized_incomplete_beta_matches_closed_forms() {
    for x in [0.0, 0.1, 0.25, 0.5, 0.9, 1.0] {
        assert!(
            (scoring::beta_cdf(x, 1.0, 1.0) - x).abs() < 1e-12,
            "I_{x}(1,1)"
        );
        let two = 3.0 * x * x - 2.0 * x * x * x;
        assert!(
            (scoring::beta_cdf(x, 2.0, 2.0) - two).abs() < 1e-12,
            "I_{x}(2,2)"
        );
        let a_one = 1.0 - (1.0 - x).powf(3.5);
        assert!(
            (scoring::beta_cdf(x, 1.0, 3.5) - a_one).abs() < 1e-12,
            "I_{x}(1,3.5)"
        );
    }
    for a in [0.05, 0.3, 7.0, 400.0] {
        assert!(
            (scoring::beta_cdf(0.5, a, a) - 0.5).abs() < 1e-9,
            "I_0.5({a},{a})"
        );
    }
}

/// LowRiskOverCommitment on a 4-core node whose pods request 1.6 cores (limits 4.3 cores) and a
/// pod asking 1m: steady load under the requests risks only the limits' overcommitment
/// (100 x (1 - 0.5 x 301/2701) = 94), steady load over the requests is a certain overload (50
/// at most), and a load that varies puts the fitted beta distribution's tail over the requests.
#[test]
fn low_risk_over_commitment_weighs_limits_and_the_load_over_requests() {
    let np = NodePod {
        node_cpu_requests: 1600.0,
        node_cpu_limits: 4300.0,
        pod_cpu_request: 1.0,
        pod_cpu_limit: 1.0,
        ..node()
    };
    let cpu = |avg: f64, std: f64| {
        vec![
            Metric {
                kind: "CPU".into(),
                operator: "AVG".into(),
                value: avg,
                ..Metric::default()
            },
            Metric {
                kind: "CPU".into(),
                operator: "STD".into(),
                value: std,
                ..Metric::default()
            },
        ]
    };
    let args = Args::default();
    assert_eq!(scoring::lro_score(Some(&cpu(20.0, 0.0)), &args, &np), 94);
    let over = NodePod {
        node_cpu_limits: 4000.0,
        ..np
    };
    assert_eq!(scoring::lro_score(Some(&cpu(60.0, 0.0)), &args, &over), 50);
    assert_eq!(scoring::lro_score(Some(&cpu(10.0, 0.0)), &args, &over), 100);
    let varying = scoring::lro_score(Some(&cpu(45.0, 20.0)), &args, &over);
    assert!((50..100).contains(&varying), "{varying}");
    assert_eq!(scoring::lro_score(None, &args, &over), 0, "no metrics");
    let best_effort = NodePod {
        pod_cpu_request: 0.0,
        pod_cpu_limit: 0.0,
        ..over
    };
    assert_eq!(
        scoring::lro_score(Some(&cpu(10.0, 0.0)), &args, &best_effort),
        0
    );
}
