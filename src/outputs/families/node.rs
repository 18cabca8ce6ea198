//! The families of node.

use super::rows::*;
use super::*;
use crate::model::*;

pub const NODE_CPU_CAPACITY: Family = gauge(
    "kube_prober_node_cpu_capacity_cores",
    "CPU cores the node has.",
    Some("cores"),
)
.otel(&[o("kube_prober.node.cpu.capacity", "{cpu}", G)]);
pub const NODE_MEMORY_CAPACITY: Family = gauge(
    "kube_prober_node_memory_capacity_bytes",
    "Memory the node has, in bytes.",
    Some("bytes"),
)
.otel(&[o("kube_prober.node.memory.capacity", "By", G)]);

/// From [`NodeCapacities`]'s table.
pub const CAPACITY: &[Family] =
    &families_of::<{ NodeCapacities::FAMILIES.len() }, _>(NodeCapacities::FAMILIES);

pub const NODE_ALLOCATABLE_CPU: Family = gauge(
    "kube_prober_node_allocatable_cpu_cores",
    "CPU cores the node offers to pods (status.allocatable).",
    Some("cores"),
)
.otel(&[o("k8s.node.cpu.allocatable", "{cpu}", U)])
.legacy(&[o("k8s.node.allocatable_cpu", "{cpu}", G)]);
pub const NODE_ALLOCATABLE_MEMORY: Family = gauge(
    "kube_prober_node_allocatable_memory_bytes",
    "Memory the node offers to pods (status.allocatable).",
    Some("bytes"),
)
.otel(&[o("k8s.node.memory.allocatable", "By", U)])
.legacy(&[o("k8s.node.allocatable_memory", "By", G)]);

/// The allocatable pair of [`NodeFactsRows`]' table: its first [`ALLOCATABLE_LEN`] families,
/// which come before the cluster counts in the exposition.
pub const ALLOCATABLE: &[Family] =
    &families_of::<ALLOCATABLE_LEN, _>(NodeFactsRows::FAMILIES.split_at(ALLOCATABLE_LEN).0);
/// How many families of [`NodeFactsRows`] come before the cluster counts.
pub const ALLOCATABLE_LEN: usize = 2;

pub const NODE_CONDITION: Family = gauge(
    "kube_prober_node_condition",
    "1 per node and condition type, with the condition's status as a label; gke-prober's node/condition.",
    None,
)
.otel(&[Otel {
        name: "k8s.node.condition.status",
        unit: "{node}",
        kind: U,
        derivation: Derivation::AllConditionStatuses,
    }])
.legacy(&[
    condition_value("k8s.node.condition_ready", "Ready"),
    condition_value("k8s.node.condition_memory_pressure", "MemoryPressure"),
    condition_value("k8s.node.condition_disk_pressure", "DiskPressure"),
    condition_value("k8s.node.condition_pid_pressure", "PIDPressure"),
    condition_value("k8s.node.condition_network_unavailable", "NetworkUnavailable"),
])
.gke(GkeProber {
        suffix: "node/condition",
        labels: GKE_CONDITION_LABELS,
        kind: "GAUGE",
});
/// The Collector's legacy metric of one condition type (`node_conditions_to_report`): the
/// kubelet's five; other types have no legacy metric here.
const fn condition_value(name: &'static str, condition: &'static str) -> Otel {
    Otel {
        name,
        unit: "",
        kind: G,
        derivation: Derivation::ConditionValue { condition },
    }
}

pub const NODE_AVAILABLE: Family = gauge(
    "kube_prober_node_available",
    "1 if the node is ready, schedulable (no spec.unschedulable, no unschedulable taint) and done warming, else 0; the three flags are labels.",
    None,
)
.otel(&[o("kube_prober.node.available", "", G)])
.gke(GkeProber {
        suffix: "node/available",
        labels: &[
            ("nodepool", "pool"),
            ("zone", "zone"),
            ("available", "available"),
            ("ready", "ready"),
            ("scheduleable", "schedulable"),
            ("done_warming", "done_warming"),
        ],
        kind: "GAUGE",
});
pub const NODE_ADDONS_AVAILABLE: Family = gauge(
    "kube_prober_node_addons_available",
    "1 if the node is available and every addon pod on it is ready, else 0; gke-prober's addon/control_plane_available.",
    None,
)
.otel(&[o("kube_prober.node.addons.available", "", G)])
.gke(GkeProber {
        suffix: "addon/control_plane_available",
        labels: &[
            ("nodepool", "pool"),
            ("zone", "zone"),
            ("available", "available"),
        ],
        kind: "GAUGE",
});

pub const NODE_CREATED: Family = gauge(
    "kube_prober_node_created_timestamp_seconds",
    "Unix time the Node object was created (metadata.creationTimestamp): node age, and the start of its warming (done_warming).",
    Some("seconds"),
)
.otel(&[o("kube_prober.node.created.timestamp", "s", G)]);

/// The rest of [`NodeFactsRows`]' table, after the cluster counts.
pub const FACTS: &[Family] = &families_of::<{ NodeFactsRows::FAMILIES.len() - ALLOCATABLE_LEN }, _>(
    NodeFactsRows::FAMILIES.split_at(ALLOCATABLE_LEN).1,
);

pub const NODE_POD_REQUESTS_CPU: Family = gauge(
    "kube_prober_node_pod_requests_cpu_cores",
    "CPU requested by the pods holding resources on the node, by Kubernetes' rule: pod-level requests where set, else the larger of the app and sidecar containers' sum and each init container with the sidecars before it, resized containers counted as the scheduler counts them, plus overhead.",
    Some("cores"),
)
.otel(&[o("kube_prober.node.pod.requests.cpu", "{cpu}", G)]);
pub const NODE_POD_REQUESTS_MEMORY: Family = gauge(
    "kube_prober_node_pod_requests_memory_bytes",
    "Memory requested by the pods holding resources on the node.",
    Some("bytes"),
)
.otel(&[o("kube_prober.node.pod.requests.memory", "By", G)]);
pub const NODE_POD_LIMITS_CPU: Family = gauge(
    "kube_prober_node_pod_limits_cpu_cores",
    "CPU limits of the pods holding resources on the node.",
    Some("cores"),
)
.otel(&[o("kube_prober.node.pod.limits.cpu", "{cpu}", G)]);
pub const NODE_POD_LIMITS_MEMORY: Family = gauge(
    "kube_prober_node_pod_limits_memory_bytes",
    "Memory limits of the pods holding resources on the node.",
    Some("bytes"),
)
.otel(&[o("kube_prober.node.pod.limits.memory", "By", G)]);
pub const NODE_PODS: Family = gauge(
    "kube_prober_node_pods",
    "Pods holding resources on the node (not Succeeded or Failed).",
    None,
)
.otel(&[o("kube_prober.node.pods", "{pod}", G)]);

/// From [`NodePodSums`]'s table.
pub const POD_SUMS: &[Family] =
    &families_of::<{ NodePodSums::FAMILIES.len() }, _>(NodePodSums::FAMILIES);

/// A node's capacity: the usage source's, else the Node object's.
pub struct NodeCapacities;

impl Keyed for NodeCapacities {
    type Item<'a> = NodeCapacity;
    const FAMILIES: &'static [(&'static Family, RowsOf<Self>)] = &[
        (&NODE_CPU_CAPACITY, |node, c, out| {
            out.push((vec![("node", node)], c.cpu_cores))
        }),
        (&NODE_MEMORY_CAPACITY, |node, c, out| {
            out.push((vec![("node", node)], c.memory_bytes))
        }),
    ];

    fn items<'a>(snap: &'a Snapshot, out: &mut Vec<(&'a str, NodeCapacity)>) {
        out.extend(
            snap.nodes
                .iter()
                .filter_map(|(name, n)| n.capacity.map(|c| (&**name, c))),
        );
        // Capacity the usage source did not give, from the Node objects.
        if let Some(cs) = &snap.cluster_state {
            let mut loads = ByName::new(&snap.nodes);
            for n in cs.nodes.iter() {
                let from_usage = loads.get(&n.name).is_some_and(|l| l.capacity.is_some());
                if let (false, Some(c)) = (from_usage, n.capacity) {
                    out.push((n.name.as_str(), c));
                }
            }
            // Two runs by name (the nodes are): merged in one pass.
            out.sort_by(|a, b| a.0.cmp(b.0));
        }
    }

    fn same(a: &NodeCapacity, b: &NodeCapacity) -> bool {
        a.cpu_cores.to_bits() == b.cpu_cores.to_bits()
            && a.memory_bytes.to_bits() == b.memory_bytes.to_bits()
    }

    fn unchanged(a: &Snapshot, b: &Snapshot) -> bool {
        std::sync::Arc::ptr_eq(&a.nodes, &b.nodes) && same_node_facts(a, b)
    }
}

/// A Node's facts (cluster and node roles), and whether every addon on it is available (`None`
/// when the addon pods are watched elsewhere: `--pod-scope none`).
pub struct NodeFactsRows;

impl Keyed for NodeFactsRows {
    type Item<'a> = (&'a NodeFacts, Option<bool>);
    const FAMILIES: &'static [(&'static Family, RowsOf<Self>)] = &[
        (&NODE_ALLOCATABLE_CPU, |node, (n, _), out| {
            if let Some(a) = n.allocatable {
                out.push((vec![("node", node)], a.cpu_cores));
            }
        }),
        (&NODE_ALLOCATABLE_MEMORY, |node, (n, _), out| {
            if let Some(a) = n.allocatable {
                out.push((vec![("node", node)], a.memory_bytes));
            }
        }),
        (&NODE_CONDITION, condition_rows),
        (&NODE_AVAILABLE, |node, (n, _), out| {
            let labels = vec![
                ("node", node),
                ("pool", n.placement.pool.as_str()),
                ("zone", n.placement.zone.as_str()),
                ("ready", flag(n.ready)),
                ("schedulable", flag(n.schedulable)),
                ("done_warming", flag(n.done_warming)),
            ];
            out.push((labels, one_if(n.available())));
        }),
        (&NODE_ADDONS_AVAILABLE, |node, (n, addons_ok), out| {
            if let Some(addons_ok) = addons_ok {
                let (pool, zone) = (n.placement.pool.as_str(), n.placement.zone.as_str());
                let labels = vec![("node", node), ("pool", pool), ("zone", zone)];
                out.push((labels, one_if(n.available() && *addons_ok)));
            }
        }),
        (&NODE_CREATED, |node, (n, _), out| {
            if let Some(created) = n.created {
                out.push((vec![("node", node)], unix_seconds(created)));
            }
        }),
    ];

    fn items<'a>(snap: &'a Snapshot, out: &mut Vec<(&'a str, (&'a NodeFacts, Option<bool>))>) {
        let Some(cs) = &snap.cluster_state else {
            return;
        };
        let mut addons = ByName::new(&cs.addons);
        out.extend(cs.nodes.iter().map(|n| {
            let addons_ok = (!cs.addons_elsewhere).then(|| {
                addons
                    .get(n.name.as_str())
                    .is_none_or(|a| a.iter().all(|x| x.available()))
            });
            (n.name.as_str(), (n, addons_ok))
        }));
    }

    fn same(a: &(&NodeFacts, Option<bool>), b: &(&NodeFacts, Option<bool>)) -> bool {
        a.1 == b.1 && (std::ptr::eq(a.0, b.0) || a.0 == b.0)
    }

    fn unchanged(a: &Snapshot, b: &Snapshot) -> bool {
        same_node_facts(a, b)
            && same_in_state(a, b, |c| &c.addons_elsewhere)
            && same_in_state(a, b, |c| &c.addons)
    }
}

/// A Node's conditions: one row per condition with its status.
fn condition_rows<'a>(node: &'a str, item: &(&'a NodeFacts, Option<bool>), out: &mut Vec<Row<'a>>) {
    let n: &'a NodeFacts = item.0;
    for (t, st) in &n.conditions {
        let labels = vec![
            ("node", node),
            ("pool", n.placement.pool.as_str()),
            ("zone", n.placement.zone.as_str()),
            ("condition", &**t),
            ("status", &**st),
        ];
        out.push((labels, 1.0));
    }
}

/// What the pods on a node hold.
pub struct NodePodSums;

impl Keyed for NodePodSums {
    type Item<'a> = &'a NodePods;
    const FAMILIES: &'static [(&'static Family, RowsOf<Self>)] = &[
        (&NODE_POD_REQUESTS_CPU, |node, p, out| {
            out.push((vec![("node", node)], p.requests.cpu_cores))
        }),
        (&NODE_POD_REQUESTS_MEMORY, |node, p, out| {
            out.push((vec![("node", node)], p.requests.memory_bytes))
        }),
        (&NODE_POD_LIMITS_CPU, |node, p, out| {
            out.push((vec![("node", node)], p.limits.cpu_cores))
        }),
        (&NODE_POD_LIMITS_MEMORY, |node, p, out| {
            out.push((vec![("node", node)], p.limits.memory_bytes))
        }),
        (&NODE_PODS, |node, p, out| {
            out.push((vec![("node", node)], f64::from(p.pods)))
        }),
    ];

    fn items<'a>(snap: &'a Snapshot, out: &mut Vec<(&'a str, &'a NodePods)>) {
        if let Some(cs) = &snap.cluster_state {
            out.extend(cs.node_pods.iter().map(|(k, v)| (k.as_ref(), v)));
        }
    }

    fn same(a: &&NodePods, b: &&NodePods) -> bool {
        std::ptr::eq(*a, *b) || a == b
    }

    fn unchanged(a: &Snapshot, b: &Snapshot) -> bool {
        same_arc(&a.cluster_state, &b.cluster_state)
    }
}
