//! What `/watcher` gives beyond load-watcher, all of it skipped by load-watcher's Go client and
//! the Trimaran plugins (unknown keys; operators they do not pick): quantile and hour-max metric
//! entries, each host's `freshness`, the estimate of its just-bound pods (`boundPods`) and its
//! folding into the CPU and Memory values. docs/trimaran.md is the contract.

use std::fmt::Write as _;
use std::time::SystemTime;

use super::{Fold, kinds, operators, push_metric};
use crate::model::{NodeLoad, Resource, ResourceMap, Window, WindowStats, unix_seconds};

/// The hub's ratio resources and their load-watcher types.
pub(super) const RATIOS: [(Resource, &str); 2] = [
    (Resource::Cpu, kinds::CPU),
    (Resource::Memory, kinds::MEMORY),
];

/// Percent of the node's CPU and memory that `fold` adds to its values; empty without a
/// known capacity or bound pods.
pub(super) fn folded(node: &NodeLoad, fold: Fold, end: SystemTime) -> ResourceMap<f64> {
    let mut out = ResourceMap::new();
    let (Some(bound), Some(cap), Some(before)) = (&node.bound, node.capacity, fold.cutoff(end))
    else {
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
                push_metric(
                    out,
                    first,
                    ["", kind, op, ws.window.as_str()],
                    level(resource, *v),
                );
            }
        }
        if let Some(&max) = node.hour_max.get(&resource) {
            push_metric(
                out,
                first,
                ["", kind, operators::MAX, "1h"],
                level(resource, max),
            );
        }
    }
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
            .map_or(0.0, |ws| ws.coverage);
        let _ = write!(out, "\"{}\":{},", w.as_str(), share(c));
    }
    let _ = write!(out, "\"1h\":{}}}}}", share(node.hour_coverage));
}

/// `,"boundPods":{..}` when pods are bound to the node that its newest sample cannot show.
pub(super) fn push_bound(out: &mut String, node: &NodeLoad, fold: Fold, end: SystemTime) {
    let Some(bound) = node.bound.as_ref().filter(|b| !b.pods.is_empty()) else {
        return;
    };
    let (cpu, memory) = bound.sum(None);
    let _ = write!(
        out,
        ",\"boundPods\":{{\"pods\":{},\"cpuCores\":{cpu},\"memoryBytes\":{memory}",
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
    let folded = !folded(node, fold, end).is_empty();
    let _ = write!(out, ",\"folded\":{folded}}}");
}
