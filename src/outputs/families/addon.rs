//! The families of addon.

use super::rows::*;
use super::*;
use crate::model::*;

pub const ADDON_EXPECTED_PODS: Family = gauge(
    "kube_prober_addon_expected_pods",
    "Pods an addon's controller wants: DaemonSet status.desiredNumberScheduled, Deployment spec.replicas; gke-prober's cluster/addons_expected.",
    None,
)
.otel(&[o("kube_prober.addon.expected_pods", "{pod}", G)])
.gke(GkeProber {
        suffix: "cluster/addons_expected",
        labels: &[
            ("addon", "addon"),
            ("version", "version"),
            ("controller", "controller"),
        ],
        kind: "GAUGE",
});

/// The pods each addon workload expects (step `ExpectedPods`).
pub const EXPECTED: &[Family] = &[ADDON_EXPECTED_PODS];

pub const ADDON_PODS: Family = gauge(
    "kube_prober_addon_pods",
    "Pods of an addon on a node (every pod counts); gke-prober's addon/available.",
    None,
)
.otel(&[o("kube_prober.addon.pods", "{pod}", G)])
.gke(GkeProber {
    suffix: "addon/available",
    labels: &[
        ("nodepool", "pool"),
        ("zone", "zone"),
        ("addon", "addon"),
        ("version", "version"),
        ("controller", "controller"),
        ("available", "available"),
    ],
    kind: "GAUGE",
});
pub const ADDON_READY_PODS: Family = gauge(
    "kube_prober_addon_ready_pods",
    "Pods of an addon on a node whose Ready condition is True.",
    None,
)
.otel(&[o("kube_prober.addon.ready_pods", "{pod}", G)]);
pub const ADDON_AVAILABLE: Family = gauge(
    "kube_prober_addon_available",
    "1 if every pod of the addon on the node is ready, else 0.",
    None,
)
.otel(&[o("kube_prober.addon.available", "", G)]);

/// From [`NodeAddons`]'s table.
pub const ADDONS: &[Family] =
    &families_of::<{ NodeAddons::FAMILIES.len() }, _>(NodeAddons::FAMILIES);

pub const CONTAINER_RESTARTS: Family = counter(
    "kube_prober_container_restarts",
    "Restarts of each container of addon pods (the kubelet's restartCount); gke-prober's addon/restart.",
    None,
)
.otel(&[o("k8s.container.restart.count", "{restart}", U)])
.legacy(&[o("k8s.container.restarts", "{restart}", G)])
.gke(GkeProber {
        suffix: "addon/restart",
        labels: &[("container_name", "container"), ("addon", "addon")],
        kind: "CUMULATIVE",
});
pub const CONTAINER_LAST_TERMINATION: Family = gauge(
    "kube_prober_container_last_termination",
    "1 per container of addon pods that has ended before, with its node and the reason and exit code of its last termination.",
    None,
)
.otel(&[o("kube_prober.container.last_termination", "", G)]);

/// The addon pods' container restarts and last terminations (step `Restarts`).
pub const RESTARTS: &[Family] = &[CONTAINER_RESTARTS, CONTAINER_LAST_TERMINATION];

/// One row per addon on the node, valued by `value`.
fn addon_rows<'a>(
    node: &'a str,
    list: &&'a [AddonOnNode],
    out: &mut Vec<Row<'a>>,
    value: fn(&AddonOnNode) -> f64,
) {
    let list: &'a [AddonOnNode] = list;
    for a in list {
        let labels = vec![
            ("node", node),
            ("addon", a.addon.name.as_ref()),
            ("version", a.addon.version.as_ref()),
            ("controller", a.addon.controller.as_str()),
        ];
        out.push((labels, value(a)));
    }
}

/// The addons on a node.
pub struct NodeAddons;

impl Keyed for NodeAddons {
    type Item<'a> = &'a [AddonOnNode];
    const FAMILIES: &'static [(&'static Family, RowsOf<Self>)] = &[
        (&ADDON_PODS, |node, list, out| {
            addon_rows(node, list, out, |a| f64::from(a.pods))
        }),
        (&ADDON_READY_PODS, |node, list, out| {
            addon_rows(node, list, out, |a| f64::from(a.ready))
        }),
        (&ADDON_AVAILABLE, |node, list, out| {
            addon_rows(node, list, out, |a| one_if(a.available()))
        }),
    ];

    fn items<'a>(snap: &'a Snapshot, out: &mut Vec<(&'a str, &'a [AddonOnNode])>) {
        if let Some(cs) = &snap.cluster_state {
            out.extend(cs.addons.iter().map(|(k, v)| (k.as_ref(), v.as_slice())));
        }
    }

    fn same(a: &&[AddonOnNode], b: &&[AddonOnNode]) -> bool {
        std::ptr::eq(*a, *b) || a == b
    }

    fn unchanged(a: &Snapshot, b: &Snapshot) -> bool {
        same_in_state(a, b, |c| &c.addons)
    }
}

/// Container restarts and last terminations of the addon pods.
fn restarts<V: Visitor>(w: &mut V, cs: &ClusterState) {
    // Only the pods whose rows the visitor keeps (a shard keeps its nodes' pods): at 65,000
    // nodes there are 260,000 addon pods, and rows made only to be dropped cost a core's
    // worth of allocation every time a restart changes.
    let kept = |p: &&std::sync::Arc<crate::model::PodRestarts>| {
        let node = p.node.as_deref().unwrap_or_default();
        w.keeps(&CONTAINER_RESTARTS, node) || w.keeps(&CONTAINER_LAST_TERMINATION, node)
    };
    let pods: Vec<_> = cs.restarts.iter().filter(kept).collect();
    // The exit codes as text, one per container of those pods, for the rows to borrow.
    let exit_codes: Vec<String> = pods
        .iter()
        .flat_map(|p| &p.containers)
        .map(|c| c.last_exit_code.map(|e| e.to_string()).unwrap_or_default())
        .collect();
    let mut restarts = vec![];
    let mut last = vec![];
    let mut codes = exit_codes.iter();
    for p in pods {
        let addon = p
            .addon
            .as_ref()
            .map(|a| a.name.as_ref())
            .unwrap_or_default();
        let node = p.node.as_deref().unwrap_or_default();
        for (c, code) in p.containers.iter().zip(&mut codes) {
            let labels = vec![
                ("namespace", p.namespace.as_ref()),
                ("pod", p.pod.as_ref()),
                ("container", c.name.as_ref()),
                ("node", node),
                ("addon", addon),
            ];
            restarts.push((labels, f64::from(c.restarts)));
            if c.last_reason.is_some() || c.last_exit_code.is_some() {
                let labels = vec![
                    ("namespace", p.namespace.as_ref()),
                    ("pod", p.pod.as_ref()),
                    ("container", c.name.as_ref()),
                    ("node", node),
                    ("reason", c.last_reason.as_deref().unwrap_or("unknown")),
                    (
                        "exit_code",
                        if code.is_empty() {
                            "unknown"
                        } else {
                            code.as_str()
                        },
                    ),
                ];
                last.push((labels, 1.0));
            }
        }
    }
    w.family(&CONTAINER_RESTARTS, &restarts);
    w.family(&CONTAINER_LAST_TERMINATION, &last);
}

/// Container restarts and last terminations of the addon pods.
pub fn visit_restarts<V: Visitor>(w: &mut V, snap: &Snapshot) {
    if let Some(cs) = &snap.cluster_state {
        restarts(w, cs);
    }
}

/// The pods each addon workload expects.
pub fn visit_expected_pods<V: Visitor>(w: &mut V, snap: &Snapshot) {
    if let Some(cs) = &snap.cluster_state {
        let expected: Vec<_> = cs
            .expected
            .iter()
            .map(|e| {
                let labels = vec![
                    ("namespace", e.namespace.as_str()),
                    ("workload", e.workload.as_str()),
                    ("addon", e.addon.name.as_ref()),
                    ("version", e.addon.version.as_ref()),
                    ("controller", e.addon.controller.as_str()),
                ];
                (labels, f64::from(e.expected))
            })
            .collect();
        w.family(&ADDON_EXPECTED_PODS, &expected);
    }
}
