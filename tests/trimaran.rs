//! Trimaran's plugins scoring nodes from our `/watcher` bodies, with the scoring written from
//! scheduler-plugins' documented formulas (TargetLoadPacking and LoadVariationRiskBalancing).

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
    let snap = store.snapshot(SystemTime::UNIX_EPOCH + Duration::from_secs(T0 + 3600));
    let bodies = kube_prober::watcher::render(&snap, Default::default()).expect("data");
    serde_json::from_slice(&bodies.all()).expect("decodes")
}

/// TargetLoadPacking: the last CPU metric whose operator is AVG or Latest (its loop has no
/// break), as a percentage; piecewise score around the target utilisation.
fn tlp_score(metrics: Option<&[Metric]>, target: f64) -> i64 {
    let Some(metrics) = metrics else { return 0 };
    let cpu = metrics
        .iter()
        .filter(|m| m.kind == "CPU" && (m.operator == "AVG" || m.operator == "Latest"))
        .map(|m| m.value)
        .next_back();
    let Some(predicted) = cpu else { return 0 };
    if predicted > 100.0 {
        return 0;
    }
    let score = if predicted <= target {
        (100.0 - target) * predicted / target + target
    } else {
        target * (100.0 - predicted) / (100.0 - target)
    };
    score.round() as i64
}

/// LoadVariationRiskBalancing's per-type data: AVG sets avg, STD sets std, "" or Latest sets
/// avg only while no AVG was seen; any metric of the type makes it valid.
fn resource_data(metrics: &[Metric], kind: &str) -> Option<(f64, f64)> {
    let (mut avg, mut std, mut avg_found, mut valid) = (0.0, 0.0, false, false);
    for m in metrics.iter().filter(|m| m.kind == kind) {
        match m.operator.as_str() {
            "AVG" => {
                avg = m.value;
                avg_found = true;
            }
            "STD" => std = m.value,
            "" | "Latest" if !avg_found => avg = m.value,
            _ => {}
        }
        valid = true;
    }
    valid.then_some((avg, std))
}

/// risk = (mu + margin * sigma^(1/sensitivity)) / 2, score = (1 - risk) * 100; the node's
/// score is the min over valid resources when both are valid, else the max.
fn lvrb_score(metrics: &[Metric], margin: f64, sensitivity: f64) -> i64 {
    let one = |kind| {
        resource_data(metrics, kind).map(|(avg, std)| {
            // Percentages of allocatable: mu and sigma are the fractions, clamped to [0, 1].
            let mu = (avg / 100.0).clamp(0.0, 1.0);
            let sigma =
                (((std / 100.0).clamp(0.0, 1.0)).powf(1.0 / sensitivity) * margin).clamp(0.0, 1.0);
            (1.0 - (mu + sigma) / 2.0) * 100.0
        })
    };
    let score = match (one("CPU"), one("Memory")) {
        (Some(c), Some(m)) => c.min(m),
        (c, m) => c.unwrap_or(0.0).max(m.unwrap_or(0.0)),
    };
    score.round() as i64
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

#[path = "support/apiserver.rs"]
mod apiserver;

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
