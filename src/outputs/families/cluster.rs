//! The families of cluster.

use super::rows::*;
use super::*;
use crate::model::*;

pub const CLUSTER_NODES: Family = gauge(
    "kube_prober_cluster_nodes",
    "Nodes per pool, zone and availability flags (ready, schedulable, done_warming, available = all three); gke-prober's cluster/node_available.",
    None,
)
.otel(&[o("kube_prober.cluster.nodes", "{node}", G)])
.gke(GkeProber {
        suffix: "cluster/node_available",
        labels: &[
            ("nodepool", "pool"),
            ("zone", "zone"),
            ("ready", "ready"),
            ("schedulable", "schedulable"),
            ("done_warming", "done_warming"),
            ("available", "available"),
        ],
        kind: "GAUGE",
});
pub const CLUSTER_NODE_CONDITIONS: Family = gauge(
    "kube_prober_cluster_node_conditions",
    "Nodes per pool, zone, condition type and status; gke-prober's cluster/node_condition.",
    None,
)
.otel(&[o("kube_prober.cluster.node.conditions", "{node}", G)])
.gke(GkeProber {
    suffix: "cluster/node_condition",
    labels: GKE_CONDITION_LABELS,
    kind: "GAUGE",
});

/// Nodes counted per placement, availability and condition (step `ClusterCounts`).
pub const COUNTS: &[Family] = &[CLUSTER_NODES, CLUSTER_NODE_CONDITIONS];

pub const CLUSTER_SKIPPED_OBJECTS: Family = gauge(
    "kube_prober_cluster_skipped_objects",
    "Kubernetes objects left out of the cluster metrics at the last tick because they could not be used, by reason (each is logged).",
    None,
)
.otel(&[o("kube_prober.cluster.skipped_objects", "{object}", G)]);

/// Objects the watchers skipped (step `Skipped`).
pub const SKIPPED: &[Family] = &[CLUSTER_SKIPPED_OBJECTS];

/// Nodes per placement and availability, and per placement and condition.
fn cluster_counts<V: Visitor>(w: &mut V, cs: &ClusterState) {
    let counts = crate::model::cluster::node_availability_counts(&cs.nodes);
    let rows: Vec<_> = counts
        .iter()
        .map(|((pl, (r, s, d, a)), n)| {
            let labels = vec![
                ("pool", pl.pool.as_str()),
                ("zone", pl.zone.as_str()),
                ("ready", flag(*r)),
                ("schedulable", flag(*s)),
                ("done_warming", flag(*d)),
                ("available", flag(*a)),
            ];
            (labels, f64::from(*n))
        })
        .collect();
    w.family(&CLUSTER_NODES, &rows);
    let counts = crate::model::cluster::node_condition_counts(&cs.nodes);
    let rows: Vec<_> = counts
        .iter()
        .map(|((pl, t, st), n)| {
            let labels = vec![
                ("pool", pl.pool.as_str()),
                ("zone", pl.zone.as_str()),
                ("condition", &**t),
                ("status", &**st),
            ];
            (labels, f64::from(*n))
        })
        .collect();
    w.family(&CLUSTER_NODE_CONDITIONS, &rows);
}

/// Nodes per placement and availability, and per placement and condition.
pub fn visit_cluster_counts<V: Visitor>(w: &mut V, snap: &Snapshot) {
    if let Some(cs) = &snap.cluster_state {
        cluster_counts(w, cs);
    }
}

/// Objects the watchers skipped, by reason.
pub fn visit_skipped<V: Visitor>(w: &mut V, snap: &Snapshot) {
    if let Some(cs) = &snap.cluster_state {
        let skipped: Vec<_> = cs
            .skipped
            .iter()
            .map(|(r, n)| (vec![("reason", r.as_str())], *n as f64))
            .collect();
        w.family(&CLUSTER_SKIPPED_OBJECTS, &skipped);
    }
}
