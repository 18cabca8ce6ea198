//! What `/watcher` gives beyond load-watcher, all of it skipped by load-watcher's Go client and
//! the Trimaran plugins (unknown keys; operators they do not pick): quantile and hour-max metric
//! entries, each host's `freshness`, the estimate of the hosts' just-bound pods (`boundPods`,
//! beside the host map) and its folding into the CPU and Memory values. docs/trimaran.md is
//! the contract.

use std::fmt::Write as _;
use std::time::SystemTime;

use super::{Fold, kinds, operators, push_metric};
use crate::model::{BoundPods, NodeLoad, Resource, ResourceMap, Window, WindowStats, unix_seconds};

/// The hub's ratio resources and their load-watcher types.
pub(super) const RATIOS: [(Resource, &str); 2] = [
    (Resource::Cpu, kinds::CPU),
    (Resource::Memory, kinds::MEMORY),
];

/// Percent of the node's CPU and memory that `fold` adds to its values from its estimate
/// `bound`; empty without a known capacity or bound pods.
pub(super) fn folded(
    node: &NodeLoad,
    bound: Option<&BoundPods>,
    fold: Fold,
    end: SystemTime,
) -> ResourceMap<f64> {
    let mut out = ResourceMap::new();
    let (Some(bound), Some(cap), Some(before)) = (bound, node.capacity, fold.cutoff(end)) else {
        return out;
    };
    let (cpu, memory) = bound.sum(before);
    if cap.cpu_cores > 0.0 && cpu > 0.0 {
        out.insert(Resource::Cpu, 100.0 * cpu / cap.cpu_cores);
    }
    if cap.memory_bytes > 0.0 && memory > 0.0 {
        out.insert(Resource::Memory, 100.0 * memory / cap.memory_bytes);
    }
    out
}

/// The served window's P50-P99 of CPU and Memory, then the hour's MAX (rollup `1h`), each
/// through `level` (percent, with any folded estimate).
pub(super) fn push_quantiles(
    out: &mut String,
    first: &mut bool,
    node: &NodeLoad,
    stats: Option<&WindowStats>,
    level: &dyn Fn(Resource, f64) -> f64,
) {
    for (resource, kind) in RATIOS {
        if let Some(ws) = stats
            && let Some(q) = ws.quantiles.get(&resource)
        {
            for (op, v) in operators::QUANTILES.iter().zip(q) {
                let m = ["", kind, op, ws.window.as_str()];
                push_metric(out, first, m, digits(level(resource, f64::from(*v))));
            }
        }
        if let Some(&max) = node.hour_max.get(&resource) {
            let m = ["", kind, operators::MAX, "1h"];
            push_metric(out, first, m, digits(level(resource, f64::from(max))));
        }
    }
}

/// A percent held to seven digits (`f32`), written with four decimals (not the float's
/// noise: 30.000001192092896 for 0.3).
fn digits(x: f64) -> f64 {
    (x * 1e4).round() / 1e4
}

/// A share (0-1) with three decimals, as written.
fn share(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// `,"freshness":{"newest":..,"coverage":{"15m":..,"10m":..,"5m":..,"1h":..}}`.
pub(super) fn push_freshness(out: &mut String, node: &NodeLoad) {
    let newest = unix_seconds(node.latest_at).floor() as i64;
    let _ = write!(out, ",\"freshness\":{{\"newest\":{newest},\"coverage\":{{");
    for w in Window::ALL {
        let c = node
            .windows
            .iter()
            .find(|ws| ws.window == w)
            .map_or(0.0, |ws| f64::from(ws.coverage));
        let _ = write!(out, "\"{}\":{},", w.as_str(), share(c));
    }
    let _ = write!(out, "\"1h\":{}}}}}", share(f64::from(node.hour_coverage)));
}

/// What closes the body: the host map, then `,"boundPods":{..}` (the estimate of every served
/// host in `hosts` with pods bound that its newest sample cannot show; nothing when none has),
/// then `data` and the body. Apart from the hosts' entries, so that a pod bound writes this
/// small piece again, not its host's block of entries (unless `fold` folds it into the values).
pub(super) fn tail<'a>(
    hosts: impl Iterator<Item = (&'a str, &'a NodeLoad, &'a BoundPods)>,
    fold: Fold,
    end: SystemTime,
) -> String {
    let mut out = String::from("}");
    let mut first = true;
    for (name, node, bound) in hosts.filter(|(_, _, b)| !b.pods.is_empty()) {
        out.push_str(if first { ",\"boundPods\":{" } else { "," });
        first = false;
        super::push_json_string(&mut out, name);
        let (cpu, memory) = bound.sum(None);
        let _ = write!(
            out,
            ":{{\"pods\":{},\"cpuCores\":{cpu},\"memoryBytes\":{memory}",
            bound.pods.len()
        );
        if let Some(cap) = node
            .capacity
            .filter(|c| c.cpu_cores > 0.0 && c.memory_bytes > 0.0)
        {
            let _ = write!(
                out,
                ",\"cpu\":{},\"memory\":{}",
                100.0 * cpu / cap.cpu_cores,
                100.0 * memory / cap.memory_bytes
            );
        }
        let folded = !folded(node, Some(bound), fold, end).is_empty();
        let _ = write!(out, ",\"folded\":{folded}}}");
    }
    if !first {
        out.push('}');
    }
    out.push_str("}}");
    out
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::{Duration, SystemTime};

    use super::super::{Fold, WatcherConfig, WatcherMetrics, render};
    use crate::hub::{NodeRecorder, Store};
    use crate::model::{Binding, NodeCapacity, Resource, UsageSample, unix_seconds};

    const S: Duration = Duration::from_secs(1);

    fn sample(store: &Store, node: &str, at: SystemTime, cpu: f64) {
        store.record_node_usage(
            "metrics_server",
            UsageSample {
                node: node.into(),
                at,
                values: vec![(Resource::Cpu, cpu), (Resource::Memory, 0.5)],
            },
        );
    }

    fn decode(store: &Store, now: SystemTime, opts: WatcherConfig) -> WatcherMetrics {
        let body = render(&store.snapshot(now), opts).expect("a body");
        serde_json::from_slice(&body.all()).expect("our own JSON")
    }

    /// node-a sampled every 15 s for the last ten minutes, node-b once, an hour ago (the case
    /// measured before freshness was served: node-b served as current, `window.end` an hour
    /// back for every host).
    fn two_nodes(now: SystemTime) -> Store {
        let store = Store::new();
        for i in 0..40 {
            sample(&store, "node-a", now - 600 * S + 15 * i * S, 0.25);
        }
        sample(&store, "node-b", now - 3600 * S, 0.125);
        store
    }

    #[test]
    fn a_stale_host_leaves_and_does_not_move_window_end() {
        let now = SystemTime::UNIX_EPOCH + 1_800_000_000 * S;
        let store = two_nodes(now);
        let newest_a = (unix_seconds(now - 15 * S)).floor() as i64;
        let w = decode(&store, now, WatcherConfig::default());
        assert_eq!(
            w.data.node_metrics_map.keys().collect::<Vec<_>>(),
            ["node-a"]
        );
        assert_eq!(w.window.end, newest_a);
        assert_eq!(w.window.end - w.window.start, 900);
        // Without a limit the old behaviour: node-b served, and `end` an hour back for all.
        let all = WatcherConfig {
            max_age: None,
            ..WatcherConfig::default()
        };
        let w = decode(&store, now, all);
        assert_eq!(w.data.node_metrics_map.len(), 2);
        assert_eq!(w.window.end, unix_seconds(now - 3600 * S) as i64);
        // Every host stale: an empty map, not an error (Trimaran keeps old data on errors).
        let later = now + 3600 * S;
        let w = decode(&store, later, WatcherConfig::default());
        assert!(w.data.node_metrics_map.is_empty());
        assert_eq!(w.window.end, unix_seconds(later) as i64);
    }

    #[test]
    fn freshness_quantiles_and_the_hour_max_follow_coverage() {
        let now = SystemTime::UNIX_EPOCH + 1_800_000_000 * S;
        let store = two_nodes(now);
        let w = decode(&store, now, WatcherConfig::default());
        let a = &w.data.node_metrics_map["node-a"];
        let f = a.freshness.as_ref().expect("freshness");
        assert_eq!(f.newest, unix_seconds(now - 15 * S) as i64);
        // Ten minutes of 15 s samples: the 15m window is two thirds covered, 5m and 10m whole,
        // the hour's slots two of twelve (the ten minutes start on a five-minute boundary).
        assert_eq!(f.coverage["15m"], 0.667);
        assert_eq!((f.coverage["10m"], f.coverage["5m"]), (1.0, 1.0));
        assert_eq!(f.coverage["1h"], 0.167);
        let ops: Vec<(&str, &str, &str)> = a
            .metrics
            .iter()
            .map(|m| (m.kind.as_str(), m.operator.as_str(), m.rollup.as_str()))
            .collect();
        assert!(ops.contains(&("CPU", "P90", "15m")), "{ops:?}");
        assert!(ops.contains(&("Memory", "P99", "15m")), "{ops:?}");
        assert!(
            !ops.iter().any(|o| o.1 == "MAX"),
            "a sixth of the hour: no MAX {ops:?}"
        );
        let p50 = a
            .metrics
            .iter()
            .find(|m| m.operator == "P50" && m.kind == "CPU");
        assert_eq!(p50.map(|m| m.value), Some(25.0));
        // Another 25 minutes: seven of the hour's twelve slots, so MAX appears.
        for i in 0..100 {
            sample(
                &store,
                "node-a",
                now + 15 * i * S,
                if i == 7 { 0.75 } else { 0.25 },
            );
        }
        let w = decode(&store, now + 1500 * S, WatcherConfig::default());
        let max = w.data.node_metrics_map["node-a"]
            .metrics
            .iter()
            .find(|m| m.operator == "MAX" && m.kind == "CPU")
            .map(|m| (m.value, m.rollup.clone()));
        assert_eq!(max, Some((75.0, "1h".to_string())));
    }

    fn bind(store: &Store, pod: &str, bound_at: SystemTime, cpu: f64) {
        store.record_binding(Binding {
            pod: Arc::from(pod),
            node: Arc::from("node-a"),
            bound_at,
            shows_from: bound_at + 120 * S,
            cpu_cores: cpu,
            memory_bytes: 0.0,
        });
    }

    #[test]
    fn bound_pods_are_served_and_folded_as_each_mode_says() {
        let now = SystemTime::UNIX_EPOCH + 1_800_000_000 * S;
        let store = two_nodes(now);
        store.record_node_capacity(
            "node-a",
            NodeCapacity {
                cpu_cores: 4.0,
                memory_bytes: 8e9,
            },
        );
        let end = now - 15 * S; // node-a's newest sample, the answer's window.end
        bind(&store, "ns/early", end - 90 * S, 1.0); // bound before the sample, not shown yet
        bind(&store, "ns/late", end + 5 * S, 0.5); // bound after it
        bind(&store, "ns/shown", end - 200 * S, 2.0); // shows from end - 80 s: in the sample
        let cpu = |w: &WatcherMetrics, op: &str| {
            let a = &w.data.node_metrics_map["node-a"];
            a.metrics
                .iter()
                .find(|m| m.kind == "CPU" && m.operator == op)
                .map(|m| m.value)
        };
        let with = |fold| WatcherConfig {
            fold,
            ..WatcherConfig::default()
        };
        let off = decode(&store, now, with(Fold::Off));
        // Beside the host map, not in node-a's entry.
        assert_eq!(off.data.bound_pods.keys().collect::<Vec<_>>(), ["node-a"]);
        let b = off.data.bound_pods["node-a"].clone();
        assert_eq!(
            (b.pods, b.cpu_cores, b.cpu, b.folded),
            (2, 1.5, Some(37.5), false)
        );
        assert_eq!(cpu(&off, "AVG"), Some(25.0));
        let all = decode(&store, now, with(Fold::All));
        assert_eq!(
            (cpu(&all, "AVG"), cpu(&all, "Latest")),
            (Some(62.5), Some(62.5))
        );
        assert_eq!(
            cpu(&all, "STD"),
            cpu(&off, "STD"),
            "the spread is not moved"
        );
        assert_eq!(cpu(&all, "P50"), Some(62.5));
        // TargetLoadPacking adds pods bound after end - 60 s itself: only "early" is folded.
        let tlp = decode(&store, now, with(Fold::BeforeWindowEnd));
        assert_eq!(cpu(&tlp, "AVG"), Some(50.0));
        assert!(tlp.data.bound_pods["node-a"].folded);
        // A sample taken after "early" and "late" show leaves nothing to estimate.
        sample(&store, "node-a", end + 200 * S, 0.25);
        let w = decode(&store, end + 201 * S, with(Fold::All));
        assert!(w.data.bound_pods.is_empty());
        assert_eq!(cpu(&w, "Latest"), Some(25.0));
    }
}
