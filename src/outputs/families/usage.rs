//! The families of usage.

use super::rows::*;
use super::*;
use crate::model::*;

pub const NODE_CPU_UTILIZATION: Family = gauge(
    "kube_prober_node_cpu_utilization_ratio",
    "Busy fraction of the node's CPUs (0-1): the latest sample (window=\"instant\", operator=\"latest\") and the mean (avg) and population standard deviation (std) over the trailing window.",
    Some("ratio"),
)
.otel(&[o("kube_prober.node.cpu.utilization", "1", G), Otel {
        name: "k8s.node.cpu.usage",
        unit: "{cpu}",
        kind: G,
        derivation: Derivation::LatestTimesCapacity {
            capacity: NODE_CPU_CAPACITY.name,
        },
    }]);
pub const NODE_MEMORY_UTILIZATION: Family = gauge(
    "kube_prober_node_memory_utilization_ratio",
    "Used fraction of the node's memory, 1 - MemAvailable/MemTotal (0-1): latest, and avg/std over the trailing window.",
    Some("ratio"),
)
.otel(&[o("kube_prober.node.memory.utilization", "1", G), Otel {
        name: "k8s.node.memory.working_set",
        unit: "By",
        kind: U,
        derivation: Derivation::LatestTimesCapacity {
            capacity: NODE_MEMORY_CAPACITY.name,
        },
    }])
.legacy(&[o("kube_prober.node.memory.utilization", "1", G), Otel {
        name: "k8s.node.memory.working_set",
        unit: "By",
        kind: G,
        derivation: Derivation::LatestTimesCapacity {
            capacity: NODE_MEMORY_CAPACITY.name,
        },
    }]);
pub const NODE_NETWORK_RECEIVE: Family = gauge(
    "kube_prober_node_network_receive_bytes_per_second",
    "Bytes per second received on all interfaces but loopback: latest, and avg/std over the trailing window.",
    Some("bytes_per_second"),
)
.otel(&[o("kube_prober.node.network.receive.rate", "By/s", G)]);
pub const NODE_NETWORK_TRANSMIT: Family = gauge(
    "kube_prober_node_network_transmit_bytes_per_second",
    "Bytes per second transmitted on all interfaces but loopback: latest, and avg/std over the trailing window.",
    Some("bytes_per_second"),
)
.otel(&[o("kube_prober.node.network.transmit.rate", "By/s", G)]);
pub const NODE_DISK_IO_UTILIZATION: Family = gauge(
    "kube_prober_node_disk_io_utilization_ratio",
    "Fraction of time the node's busiest whole disk was doing I/O (0-1): latest, and avg/std over the trailing window.",
    Some("ratio"),
)
.otel(&[o("kube_prober.node.disk.io.utilization", "1", G)]);
pub const NODE_BACKEND_VALUE: Family = gauge(
    "kube_prober_node_backend_value",
    "Values a usage backend aggregated over a window that have no family of their own (network drops per second, energy), in the backend's own unit; metric is the backend's series name, type its load-watcher type.",
    None,
)
.otel(&[o("kube_prober.node.backend.value", "", G)]);
pub const NODE_USAGE_SAMPLES: Family = gauge(
    "kube_prober_node_usage_samples",
    "Number of usage samples in each trailing window, per node and resource.",
    None,
)
.otel(&[o("kube_prober.node.usage.samples", "{sample}", G)]);
pub const NODE_USAGE_TIMESTAMP: Family = gauge(
    "kube_prober_node_usage_timestamp_seconds",
    "Unix time of the newest usage sample of the node.",
    Some("seconds"),
)
.otel(&[o("kube_prober.node.usage.timestamp", "s", G)]);
pub const NODE_USAGE_QUANTILE: Family = gauge(
    "kube_prober_node_usage_quantile_ratio",
    "CPU and memory percentiles (50, 90, 95, 99) over each trailing window, and the largest sample of the last hour (window=\"1h\", percentile=\"100\"), reported when samples cover at least half of the window. Off unless --metric-allowlist names it: 26 series a node.",
    Some("ratio"),
)
.otel(&[o("kube_prober.node.usage.quantile", "1", G)]);

/// The node usage families, from [`NodeUsage`]'s table.
pub const USAGE: &[Family] = &families_of::<{ NodeUsage::FAMILIES.len() }, _>(NodeUsage::FAMILIES);

pub const NODE_BOUND_PODS: Family = gauge(
    "kube_prober_node_bound_pods",
    "Pods bound to the node whose use its newest usage sample cannot show yet (bound since, or still ramping up).",
    None,
)
.otel(&[o("kube_prober.node.bound_pods", "{pod}", G)]);
pub const NODE_BOUND_PODS_CPU: Family = gauge(
    "kube_prober_node_bound_pods_cpu_cores",
    "Estimated CPU use of the node's bound pods that its newest usage sample cannot show yet.",
    Some("cores"),
)
.otel(&[o("kube_prober.node.bound_pods.cpu", "{cpu}", G)]);
pub const NODE_BOUND_PODS_MEMORY: Family = gauge(
    "kube_prober_node_bound_pods_memory_bytes",
    "Estimated memory use of the node's bound pods that its newest usage sample cannot show yet.",
    Some("bytes"),
)
.otel(&[o("kube_prober.node.bound_pods.memory", "By", G)]);

/// The just-bound pods' families, from [`NodeBound`]'s table.
pub const BOUND: &[Family] = &families_of::<{ NodeBound::FAMILIES.len() }, _>(NodeBound::FAMILIES);

pub const NODE_USAGE_AGE: Family = gauge(
    "kube_prober_node_usage_age_seconds",
    "Age of the nodes' newest usage samples at the tick: percentiles 50, 90 and 99 and the oldest (percentile=\"100\") over the nodes with usage.",
    Some("seconds"),
)
.in_scope(Scope::Instance)
.otel(&[o("kube_prober.node.usage.age", "s", G)]);
pub const WATCHER_STALE_HOSTS: Family = gauge(
    "kube_prober_watcher_stale_hosts",
    "Nodes with usage whose newest sample is older than --watcher-max-age: left out of /watcher.",
    None,
)
.in_scope(Scope::Instance)
.otel(&[o("kube_prober.watcher.stale_hosts", "{node}", G)]);

/// How fresh the nodes' usage is (step `Freshness`).
pub const FRESHNESS: &[Family] = &[NODE_USAGE_AGE, WATCHER_STALE_HOSTS];

/// The bounds of [`NODE_USAGE_AGE`], seconds.
pub const USAGE_AGE_BUCKETS: [f64; 9] =
    [15.0, 30.0, 60.0, 120.0, 180.0, 300.0, 600.0, 1800.0, 3600.0];
/// Families emitted only when `--metric-allowlist` names them (their series grow with the
/// nodes many times over).
pub const OPT_IN: &[Family] = &[NODE_USAGE_QUANTILE];

/// The family that carries a node resource.
pub const fn node_resource_family(r: crate::model::Resource) -> &'static Family {
    use crate::model::Resource;
    match r {
        Resource::Cpu => &NODE_CPU_UTILIZATION,
        Resource::Memory => &NODE_MEMORY_UTILIZATION,
        Resource::NetworkReceive => &NODE_NETWORK_RECEIVE,
        Resource::NetworkTransmit => &NODE_NETWORK_TRANSMIT,
        Resource::DiskIo => &NODE_DISK_IO_UTILIZATION,
    }
}

/// A node's usage, from the hub (`snap.nodes`).
pub struct NodeUsage;

impl Keyed for NodeUsage {
    type Item<'a> = &'a NodeLoad;
    const FAMILIES: &'static [(&'static Family, RowsOf<Self>)] = &[
        (&NODE_CPU_UTILIZATION, |k, n, out| {
            resource_rows(Resource::Cpu, k, n, out)
        }),
        (&NODE_MEMORY_UTILIZATION, |k, n, out| {
            resource_rows(Resource::Memory, k, n, out)
        }),
        (&NODE_NETWORK_RECEIVE, |k, n, out| {
            resource_rows(Resource::NetworkReceive, k, n, out)
        }),
        (&NODE_NETWORK_TRANSMIT, |k, n, out| {
            resource_rows(Resource::NetworkTransmit, k, n, out)
        }),
        (&NODE_DISK_IO_UTILIZATION, |k, n, out| {
            resource_rows(Resource::DiskIo, k, n, out)
        }),
        (&NODE_BACKEND_VALUE, backend_value_rows),
        (&NODE_USAGE_SAMPLES, sample_count_rows),
        (&NODE_USAGE_TIMESTAMP, |name, n, out| {
            out.push((
                vec![("node", name), ("source", &*n.source)],
                unix_seconds(n.latest_at),
            ))
        }),
        (&NODE_USAGE_QUANTILE, |name, n, out| {
            quantile_rows(name, n, out)
        }),
    ];

    fn items<'a>(snap: &'a Snapshot, out: &mut Vec<(&'a str, &'a NodeLoad)>) {
        out.extend(snap.nodes.iter().map(|(k, v)| (&**k, &**v)));
    }

    fn same(a: &&NodeLoad, b: &&NodeLoad) -> bool {
        std::ptr::eq(*a, *b) || a == b
    }

    fn unchanged(a: &Snapshot, b: &Snapshot) -> bool {
        std::sync::Arc::ptr_eq(&a.nodes, &b.nodes)
    }
}

/// A resource's latest value, and its avg and std (or the backend's aggregate) per window.
fn resource_rows<'a>(resource: Resource, name: &'a str, n: &&'a NodeLoad, out: &mut Vec<Row<'a>>) {
    let n: &'a NodeLoad = n;
    if let Some(&v) = n.latest.get(&resource) {
        out.push((
            vec![
                ("node", name),
                ("window", "instant"),
                ("operator", "latest"),
            ],
            v,
        ));
    }
    for ws in n.windows.iter() {
        let win = ws.window.as_str();
        if let Some(s) = ws.stats.get(&resource) {
            for (op, v) in [("avg", s.avg), ("std", s.std)] {
                out.push((vec![("node", name), ("window", win), ("operator", op)], v));
            }
            continue;
        }
        // Backend-aggregated, when the hub has no samples of its own for it.
        for b in ws
            .backend
            .iter()
            .filter(|b| b.value.resource == Some(resource))
        {
            let op = operator_label(b.value.operator);
            let labels = vec![("node", name), ("window", win), ("operator", op)];
            out.push((labels, b.value.value));
        }
    }
}

/// The values a backend aggregated that have no family of their own.
fn backend_value_rows<'a>(name: &'a str, n: &&'a NodeLoad, out: &mut Vec<Row<'a>>) {
    let n: &'a NodeLoad = n;
    for ws in n.windows.iter() {
        for b in ws.backend.iter().filter(|b| b.value.resource.is_none()) {
            out.push((
                vec![
                    ("node", name),
                    ("window", ws.window.as_str()),
                    ("operator", operator_label(b.value.operator)),
                    ("metric", b.value.name.as_str()),
                    ("type", b.value.kind.as_wire()),
                ],
                b.value.value,
            ));
        }
    }
}

/// The number of samples per resource and window.
fn sample_count_rows<'a>(name: &'a str, n: &&'a NodeLoad, out: &mut Vec<Row<'a>>) {
    let n: &'a NodeLoad = n;
    for ws in n.windows.iter() {
        for (r, s) in ws.stats.iter() {
            out.push((
                vec![
                    ("node", name),
                    ("resource", r.as_str()),
                    ("window", ws.window.as_str()),
                ],
                f64::from(s.samples.get()),
            ));
        }
    }
}

/// The estimate of a node's just-bound pods, from the hub (`snap.bound`): rows only for the
/// nodes that have one (absent means none), so a pod bound writes the rows of its node's
/// block here and nothing of the usage part.
pub struct NodeBound;

impl Keyed for NodeBound {
    type Item<'a> = &'a BoundPods;
    const FAMILIES: &'static [(&'static Family, RowsOf<Self>)] = &[
        (&NODE_BOUND_PODS, |name, b, out| {
            out.push((vec![("node", name)], b.pods.len() as f64))
        }),
        (&NODE_BOUND_PODS_CPU, |name, b, out| {
            out.push((vec![("node", name)], b.sum(None).0))
        }),
        (&NODE_BOUND_PODS_MEMORY, |name, b, out| {
            out.push((vec![("node", name)], b.sum(None).1))
        }),
    ];

    fn items<'a>(snap: &'a Snapshot, out: &mut Vec<(&'a str, &'a BoundPods)>) {
        out.extend(snap.bound.iter().map(|(k, v)| (&**k, &**v)));
    }

    fn same(a: &&BoundPods, b: &&BoundPods) -> bool {
        std::ptr::eq(*a, *b) || a == b
    }

    fn unchanged(a: &Snapshot, b: &Snapshot) -> bool {
        std::sync::Arc::ptr_eq(&a.bound, &b.bound)
    }
}

/// Percentile labels, in `crate::hub::window::QUANTILES` order (`quantile` is a summary's
/// label: Prometheus' lint refuses it on a gauge).
const QUANTILE_LABELS: [&str; 4] = ["50", "90", "95", "99"];

/// A node's CPU and memory quantiles per window, and the hour's max as quantile 1.
fn quantile_rows<'a>(name: &'a str, n: &'a NodeLoad, out: &mut Vec<Row<'a>>) {
    for r in [Resource::Cpu, Resource::Memory] {
        for ws in n.windows.iter() {
            let Some(q) = ws.quantiles.get(&r) else {
                continue;
            };
            for (label, v) in QUANTILE_LABELS.iter().zip(q) {
                let labels = vec![
                    ("node", name),
                    ("resource", r.as_str()),
                    ("window", ws.window.as_str()),
                    ("percentile", *label),
                ];
                out.push((labels, f64::from(*v)));
            }
        }
        if let Some(&max) = n.hour_max.get(&r) {
            let labels = vec![
                ("node", name),
                ("resource", r.as_str()),
                ("window", "1h"),
                ("percentile", "100"),
            ];
            out.push((labels, f64::from(max)));
        }
    }
}

/// How old the nodes' newest samples are at the tick, and how many are stale for `/watcher`.
pub fn visit_freshness<V: Visitor>(w: &mut V, snap: &Snapshot) {
    let mut ages: Vec<f64> = snap
        .nodes
        .values()
        .map(|n| {
            let age = snap.generated_at.duration_since(n.latest_at);
            age.unwrap_or_default().as_secs_f64()
        })
        .collect();
    let stale = snap.selection.stale_after.map_or(0, |max| {
        ages.iter().filter(|&&a| a > max.as_secs_f64()).count()
    });
    let mut rows = Vec::new();
    if !ages.is_empty() {
        for (label, q) in [("50", 0.5), ("90", 0.9), ("99", 0.99), ("100", 1.0)] {
            // Nearest rank: an age some node really has.
            let rank = ((q * ages.len() as f64).ceil() as usize).clamp(1, ages.len()) - 1;
            let (_, v, _) = ages.select_nth_unstable_by(rank, f64::total_cmp);
            rows.push((vec![("percentile", label)], *v));
        }
    }
    w.family(&NODE_USAGE_AGE, &rows);
    w.family(&WATCHER_STALE_HOSTS, &[(vec![], stale as f64)]);
}
