//! Every series the program exposes, read off one [`Snapshot`] in `names::ALL` order: the one
//! place that knows which family carries which value under which labels. The Prometheus
//! exposition writes these rows as text; the push outputs turn the same rows into their own
//! messages, so all outputs agree.

use super::names::{self, Family};
use crate::model::{
    AddonOnNode, BoundPods, ClusterState, NodeCapacity, NodeFacts, NodeLoad, NodePods, Operator,
    PROBE_BUCKETS, Resource, Snapshot, unix_seconds,
};
use crate::model::{CgroupStats, Platform, TaskSet};

/// Label pairs of one row: our label key, its value.
pub type Labels<'a> = Vec<(&'static str, &'a str)>;

/// Receives every family of a snapshot, in order. A family with no rows may be passed.
pub trait Visitor {
    /// A gauge or counter family (see `family.kind`): one value per row.
    fn family(&mut self, family: &Family, rows: &[(Labels<'_>, f64)]);
    /// A histogram family: per row the cumulative bucket counts for `bounds` (one per bound;
    /// `+Inf` is the count), the sum and the count.
    fn histogram(
        &mut self,
        family: &Family,
        bounds: &[f64],
        rows: &[(Labels<'_>, &[u64], f64, u64)],
    );
    /// Whether a row of `family` whose `node` label is `node` (`""`: none) would be kept, so a
    /// visit can skip making rows nobody takes (a shard's filter drops most per-node rows).
    /// Only a hint: rows it says yes to may still be dropped.
    fn keeps(&self, _family: &Family, _node: &str) -> bool {
        true
    }
}

/// True for the families that describe this instance itself (build, probes it ran, its sources,
/// push outputs and ticks) rather than the cluster or its nodes: what a replica that does not
/// lead may still push ([`names::Scope::instance_level`]).
pub fn is_instance_level(family: &Family) -> bool {
    family.scope.instance_level()
}

fn flag(b: bool) -> &'static str {
    if b { "true" } else { "false" }
}

fn one_if(b: bool) -> f64 {
    if b { 1.0 } else { 0.0 }
}

/// One row of a gauge or counter family: labels and value.
pub type Row<'a> = (Labels<'a>, f64);

/// Families whose rows come per key (a node) from that key's data alone: the rows of one key
/// depend only on the key and its item, so an output may keep what it made of a key until the
/// item changes ([`Keyed::same`]), and a filter may drop a key or a family.
pub trait Keyed {
    /// What the rows of one key are made from.
    type Item<'a>;
    /// The families, in `names::ALL` order.
    const FAMILIES: &'static [&'static Family];
    /// Every key with its item, in output order.
    fn items<'a>(snap: &'a Snapshot, out: &mut Vec<(&'a str, Self::Item<'a>)>);
    /// The rows of `key` in `Self::FAMILIES[family]`.
    fn rows<'a>(family: usize, key: &'a str, item: &Self::Item<'a>, out: &mut Vec<Row<'a>>);
    /// Whether two items give the same rows (for the same key).
    fn same(a: &Self::Item<'_>, b: &Self::Item<'_>) -> bool;
    /// True when every key and item of `b` is certainly those of `a`, found without visiting
    /// them (the snapshots share the data the items are read from): an output then keeps all
    /// it made of `a`. False says nothing.
    fn unchanged(a: &Snapshot, b: &Snapshot) -> bool;
}

/// Both absent, or the same `Arc`.
fn same_arc<T>(a: &Option<std::sync::Arc<T>>, b: &Option<std::sync::Arc<T>>) -> bool {
    match (a, b) {
        (Some(x), Some(y)) => std::sync::Arc::ptr_eq(x, y),
        (None, None) => true,
        _ => false,
    }
}

/// Whether two snapshots hold the same Node facts: the same `Arc` (the watchers share it
/// while no Node changed), or no cluster state in either.
pub fn same_node_facts(a: &Snapshot, b: &Snapshot) -> bool {
    match (&a.cluster_state, &b.cluster_state) {
        (Some(x), Some(y)) => std::sync::Arc::ptr_eq(&x.nodes, &y.nodes),
        (None, None) => true,
        _ => false,
    }
}

/// Whether what `f` reads of the cluster state is the same in two snapshots: the same state
/// (`Arc`), equal values, or no state in either.
pub fn same_in_state<T: PartialEq + ?Sized>(
    a: &Snapshot,
    b: &Snapshot,
    f: impl Fn(&ClusterState) -> &T,
) -> bool {
    match (&a.cluster_state, &b.cluster_state) {
        (Some(x), Some(y)) => std::sync::Arc::ptr_eq(x, y) || f(x) == f(y),
        (None, None) => true,
        _ => false,
    }
}

/// Looks names up in a map keyed by name, at about one comparison a name while they come in
/// ascending order (the nodes do: by name); a name out of order seeks from the top again.
struct ByName<'a, V> {
    map: &'a std::collections::BTreeMap<std::sync::Arc<str>, V>,
    rest: std::iter::Peekable<std::collections::btree_map::Range<'a, std::sync::Arc<str>, V>>,
    last: &'a str,
}

impl<'a, V> ByName<'a, V> {
    fn new(map: &'a std::collections::BTreeMap<std::sync::Arc<str>, V>) -> Self {
        ByName {
            map,
            rest: map.range::<str, _>(..).peekable(),
            last: "",
        }
    }

    fn get(&mut self, name: &'a str) -> Option<&'a V> {
        if name < self.last {
            let from = (std::ops::Bound::Included(name), std::ops::Bound::Unbounded);
            self.rest = self.map.range::<str, _>(from).peekable();
        }
        self.last = name;
        while self.rest.next_if(|(k, _)| &***k < name).is_some() {}
        self.rest
            .peek()
            .filter(|(k, _)| &***k == name)
            .map(|(_, v)| *v)
    }
}

/// A node's usage, from the hub (`snap.nodes`).
pub struct NodeUsage;

impl Keyed for NodeUsage {
    type Item<'a> = &'a NodeLoad;
    const FAMILIES: &'static [&'static Family] = &[
        names::node_resource_family(Resource::ALL[0]),
        names::node_resource_family(Resource::ALL[1]),
        names::node_resource_family(Resource::ALL[2]),
        names::node_resource_family(Resource::ALL[3]),
        names::node_resource_family(Resource::ALL[4]),
        &names::NODE_BACKEND_VALUE,
        &names::NODE_USAGE_SAMPLES,
        &names::NODE_USAGE_TIMESTAMP,
        &names::NODE_USAGE_QUANTILE,
    ];

    fn items<'a>(snap: &'a Snapshot, out: &mut Vec<(&'a str, &'a NodeLoad)>) {
        out.extend(snap.nodes.iter().map(|(k, v)| (&**k, &**v)));
    }

    fn rows<'a>(family: usize, name: &'a str, n: &&'a NodeLoad, out: &mut Vec<Row<'a>>) {
        let n: &'a NodeLoad = n;
        match family {
            0..5 => {
                let resource = Resource::ALL[family];
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
            5 => {
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
            6 => {
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
            7 => out.push((
                vec![("node", name), ("source", &*n.source)],
                unix_seconds(n.latest_at),
            )),
            _ => quantile_rows(name, n, out),
        }
    }

    fn same(a: &&NodeLoad, b: &&NodeLoad) -> bool {
        std::ptr::eq(*a, *b) || a == b
    }

    fn unchanged(a: &Snapshot, b: &Snapshot) -> bool {
        std::sync::Arc::ptr_eq(&a.nodes, &b.nodes)
    }
}

/// The estimate of a node's just-bound pods, from the hub (`snap.bound`): rows only for the
/// nodes that have one (absent means none), so a pod bound writes the rows of its node's
/// block here and nothing of the usage part.
pub struct NodeBound;

impl Keyed for NodeBound {
    type Item<'a> = &'a BoundPods;
    const FAMILIES: &'static [&'static Family] = &[
        &names::NODE_BOUND_PODS,
        &names::NODE_BOUND_PODS_CPU,
        &names::NODE_BOUND_PODS_MEMORY,
    ];

    fn items<'a>(snap: &'a Snapshot, out: &mut Vec<(&'a str, &'a BoundPods)>) {
        out.extend(snap.bound.iter().map(|(k, v)| (&**k, &**v)));
    }

    fn rows<'a>(family: usize, name: &'a str, b: &&'a BoundPods, out: &mut Vec<Row<'a>>) {
        let (cpu, memory) = b.sum(None);
        let v = [b.pods.len() as f64, cpu, memory][family.min(2)];
        out.push((vec![("node", name)], v));
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
fn visit_freshness<V: Visitor>(w: &mut V, snap: &Snapshot) {
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
    w.family(&names::NODE_USAGE_AGE, &rows);
    w.family(&names::WATCHER_STALE_HOSTS, &[(vec![], stale as f64)]);
}

/// A node's capacity: the usage source's, else the Node object's.
pub struct NodeCapacities;

impl Keyed for NodeCapacities {
    type Item<'a> = NodeCapacity;
    const FAMILIES: &'static [&'static Family] =
        &[&names::NODE_CPU_CAPACITY, &names::NODE_MEMORY_CAPACITY];

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

    fn rows<'a>(family: usize, name: &'a str, c: &NodeCapacity, out: &mut Vec<Row<'a>>) {
        let v = if family == 0 {
            c.cpu_cores
        } else {
            c.memory_bytes
        };
        out.push((vec![("node", name)], v));
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
    const FAMILIES: &'static [&'static Family] = &[
        &names::NODE_ALLOCATABLE_CPU,
        &names::NODE_ALLOCATABLE_MEMORY,
        &names::NODE_CONDITION,
        &names::NODE_AVAILABLE,
        &names::NODE_ADDONS_AVAILABLE,
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

    fn rows<'a>(
        family: usize,
        node: &'a str,
        item: &(&'a NodeFacts, Option<bool>),
        out: &mut Vec<Row<'a>>,
    ) {
        let (n, addons_ok) = *item;
        let (pool, zone) = (n.placement.pool.as_str(), n.placement.zone.as_str());
        match family {
            0 | 1 => {
                if let Some(a) = n.allocatable {
                    let v = if family == 0 {
                        a.cpu_cores
                    } else {
                        a.memory_bytes
                    };
                    out.push((vec![("node", node)], v));
                }
            }
            2 => {
                for (t, st) in &n.conditions {
                    let labels = vec![
                        ("node", node),
                        ("pool", pool),
                        ("zone", zone),
                        ("condition", &**t),
                        ("status", &**st),
                    ];
                    out.push((labels, 1.0));
                }
            }
            3 => {
                let labels = vec![
                    ("node", node),
                    ("pool", pool),
                    ("zone", zone),
                    ("ready", flag(n.ready)),
                    ("schedulable", flag(n.schedulable)),
                    ("done_warming", flag(n.done_warming)),
                ];
                out.push((labels, one_if(n.available())));
            }
            _ => {
                if let Some(addons_ok) = addons_ok {
                    let labels = vec![("node", node), ("pool", pool), ("zone", zone)];
                    out.push((labels, one_if(n.available() && addons_ok)));
                }
            }
        }
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

/// The addons on a node.
pub struct NodeAddons;

impl Keyed for NodeAddons {
    type Item<'a> = &'a [AddonOnNode];
    const FAMILIES: &'static [&'static Family] = &[
        &names::ADDON_PODS,
        &names::ADDON_READY_PODS,
        &names::ADDON_AVAILABLE,
    ];

    fn items<'a>(snap: &'a Snapshot, out: &mut Vec<(&'a str, &'a [AddonOnNode])>) {
        if let Some(cs) = &snap.cluster_state {
            out.extend(cs.addons.iter().map(|(k, v)| (k.as_ref(), v.as_slice())));
        }
    }

    fn rows<'a>(family: usize, node: &'a str, list: &&'a [AddonOnNode], out: &mut Vec<Row<'a>>) {
        let list: &'a [AddonOnNode] = list;
        for a in list {
            let labels = vec![
                ("node", node),
                ("addon", a.addon.name.as_ref()),
                ("version", a.addon.version.as_ref()),
                ("controller", a.addon.controller.as_str()),
            ];
            let v = match family {
                0 => f64::from(a.pods),
                1 => f64::from(a.ready),
                _ => one_if(a.available()),
            };
            out.push((labels, v));
        }
    }

    fn same(a: &&[AddonOnNode], b: &&[AddonOnNode]) -> bool {
        std::ptr::eq(*a, *b) || a == b
    }

    fn unchanged(a: &Snapshot, b: &Snapshot) -> bool {
        same_in_state(a, b, |c| &c.addons)
    }
}

/// What the pods on a node hold.
pub struct NodePodSums;

impl Keyed for NodePodSums {
    type Item<'a> = &'a NodePods;
    const FAMILIES: &'static [&'static Family] = &[
        &names::NODE_POD_REQUESTS_CPU,
        &names::NODE_POD_REQUESTS_MEMORY,
        &names::NODE_POD_LIMITS_CPU,
        &names::NODE_POD_LIMITS_MEMORY,
        &names::NODE_PODS,
    ];

    fn items<'a>(snap: &'a Snapshot, out: &mut Vec<(&'a str, &'a NodePods)>) {
        if let Some(cs) = &snap.cluster_state {
            out.extend(cs.node_pods.iter().map(|(k, v)| (k.as_ref(), v)));
        }
    }

    fn rows<'a>(family: usize, node: &'a str, p: &&'a NodePods, out: &mut Vec<Row<'a>>) {
        let v = match family {
            0 => p.requests.cpu_cores,
            1 => p.requests.memory_bytes,
            2 => p.limits.cpu_cores,
            3 => p.limits.memory_bytes,
            _ => f64::from(p.pods),
        };
        out.push((vec![("node", node)], v));
    }

    fn same(a: &&NodePods, b: &&NodePods) -> bool {
        std::ptr::eq(*a, *b) || a == b
    }

    fn unchanged(a: &Snapshot, b: &Snapshot) -> bool {
        same_arc(&a.cluster_state, &b.cluster_state)
    }
}

/// One step of the exposition, in `names::ALL` order: the families of a [`Keyed`] part one
/// by one, or a group of families read off the snapshot as a whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Step {
    /// Build and cluster info.
    Info,
    Usage(usize),
    /// The estimates of just-bound pods ([`NodeBound`]).
    Bound(usize),
    /// The ages of the nodes' newest samples, and the stale ones.
    Freshness,
    Capacity(usize),
    /// `NodeFactsRows` families 0 and 1 come before the cluster counts, 2.. after them.
    Facts(usize),
    /// Nodes per placement and availability, and per condition.
    ClusterCounts,
    ExpectedPods,
    Addons(usize),
    Pods(usize),
    /// Container restarts and last terminations (addon pods).
    Restarts,
    Skipped,
    Tasks,
    Platform,
    /// Probes, sources, sinks, leadership and ticks: this instance's own families.
    Instance,
}

/// The steps of a snapshot with (or without) a cluster state, in output order.
pub fn steps(has_cluster: bool) -> Vec<Step> {
    let mut s = vec![Step::Info];
    s.extend((0..NodeUsage::FAMILIES.len()).map(Step::Usage));
    s.extend((0..NodeBound::FAMILIES.len()).map(Step::Bound));
    s.push(Step::Freshness);
    s.extend((0..NodeCapacities::FAMILIES.len()).map(Step::Capacity));
    if has_cluster {
        s.extend([Step::Facts(0), Step::Facts(1), Step::ClusterCounts]);
        s.extend((2..NodeFactsRows::FAMILIES.len()).map(Step::Facts));
        s.push(Step::ExpectedPods);
        s.extend((0..NodeAddons::FAMILIES.len()).map(Step::Addons));
        s.extend((0..NodePodSums::FAMILIES.len()).map(Step::Pods));
        s.extend([Step::Restarts, Step::Skipped]);
    }
    s.extend([Step::Tasks, Step::Platform, Step::Instance]);
    s
}

/// Every row of one family of a [`Keyed`] part, all keys in order.
fn keyed_rows<'a, P: Keyed>(family: usize, items: &[(&'a str, P::Item<'a>)]) -> Vec<Row<'a>> {
    let mut rows = Vec::new();
    for (key, item) in items {
        P::rows(family, key, item, &mut rows);
    }
    rows
}

/// Passes a whole-snapshot step (one that is not [`Keyed`]) to `w`; keyed steps pass nothing.
pub fn visit_step<V: Visitor>(step: Step, snap: &Snapshot, w: &mut V) {
    match step {
        Step::Info => {
            let version = env!("CARGO_PKG_VERSION");
            w.family(&names::BUILD_INFO, &[(vec![("version", version)], 1.0)]);
            w.family(
                &names::CLUSTER_INFO,
                &[(
                    vec![
                        ("cluster", snap.cluster.cluster_name.as_str()),
                        ("role", snap.cluster.role.as_str()),
                        ("project", snap.cluster.project.as_str()),
                        ("location", snap.cluster.location.as_str()),
                    ],
                    1.0,
                )],
            );
        }
        Step::ClusterCounts => {
            if let Some(cs) = &snap.cluster_state {
                visit_cluster_counts(w, cs);
            }
        }
        Step::ExpectedPods => {
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
                w.family(&names::ADDON_EXPECTED_PODS, &expected);
            }
        }
        Step::Restarts => {
            if let Some(cs) = &snap.cluster_state {
                visit_restarts(w, cs);
            }
        }
        Step::Skipped => {
            if let Some(cs) = &snap.cluster_state {
                let skipped: Vec<_> = cs
                    .skipped
                    .iter()
                    .map(|(r, n)| (vec![("reason", r.as_str())], *n as f64))
                    .collect();
                w.family(&names::CLUSTER_SKIPPED_OBJECTS, &skipped);
            }
        }
        Step::Tasks => {
            visit_tasks(w, snap.tasks.as_deref());
            visit_task_perf(w, snap.task_perf.as_deref());
        }
        Step::Platform => visit_platform(w, snap.platform.as_deref()),
        Step::Freshness => visit_freshness(w, snap),
        Step::Instance => visit_instance(w, snap),
        Step::Usage(_)
        | Step::Bound(_)
        | Step::Capacity(_)
        | Step::Facts(_)
        | Step::Addons(_)
        | Step::Pods(_) => {}
    }
}

/// Nodes per placement and availability, and per placement and condition.
fn visit_cluster_counts<V: Visitor>(w: &mut V, cs: &ClusterState) {
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
    w.family(&names::CLUSTER_NODES, &rows);
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
    w.family(&names::CLUSTER_NODE_CONDITIONS, &rows);
}

/// Container restarts and last terminations of the addon pods.
fn visit_restarts<V: Visitor>(w: &mut V, cs: &ClusterState) {
    // Only the pods whose rows the visitor keeps (a shard keeps its nodes' pods): at 65,000
    // nodes there are 260,000 addon pods, and rows made only to be dropped cost a core's
    // worth of allocation every time a restart changes.
    let kept = |p: &&std::sync::Arc<crate::model::PodRestarts>| {
        let node = p.node.as_deref().unwrap_or_default();
        w.keeps(&names::CONTAINER_RESTARTS, node)
            || w.keeps(&names::CONTAINER_LAST_TERMINATION, node)
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
    w.family(&names::CONTAINER_RESTARTS, &restarts);
    w.family(&names::CONTAINER_LAST_TERMINATION, &last);
}

fn operator_label(op: Operator) -> &'static str {
    match op {
        Operator::Avg => "avg",
        Operator::Std => "std",
    }
}

/// The family of a keyed step, and its rows over every key of `snap`.
fn visit_keyed<V: Visitor>(step: Step, snap: &Snapshot, w: &mut V) {
    fn one<P: Keyed, V: Visitor>(family: usize, snap: &Snapshot, w: &mut V) {
        let mut items = Vec::new();
        P::items(snap, &mut items);
        w.family(P::FAMILIES[family], &keyed_rows::<P>(family, &items));
    }
    match step {
        Step::Usage(f) => one::<NodeUsage, V>(f, snap, w),
        Step::Bound(f) => one::<NodeBound, V>(f, snap, w),
        Step::Capacity(f) => one::<NodeCapacities, V>(f, snap, w),
        Step::Facts(f) => one::<NodeFactsRows, V>(f, snap, w),
        Step::Addons(f) => one::<NodeAddons, V>(f, snap, w),
        Step::Pods(f) => one::<NodePodSums, V>(f, snap, w),
        other => visit_step(other, snap, w),
    }
}

/// Every family but the snapshot age (which depends on the reader's clock), in `names::ALL`
/// order.
pub fn visit<V: Visitor>(snap: &Snapshot, w: &mut V) {
    for step in steps(snap.cluster_state.is_some()) {
        visit_keyed(step, snap, w);
    }
}

/// This instance's own families: probes, sources, sinks, leadership, ticks.
fn visit_instance<V: Visitor>(w: &mut V, snap: &Snapshot) {
    visit_probes(w, snap);

    visit_sources(w, snap);

    visit_sinks(w, snap);

    if let Some(l) = &snap.leadership {
        let labels = vec![("lease", l.lease.as_str())];
        w.family(
            &names::LEADER,
            &[(labels.clone(), if l.leading { 1.0 } else { 0.0 })],
        );
        w.family(&names::LEADER_ACQUIRED, &[(labels, l.acquired as f64)]);
    }
    if let Some(s) = snap.selection.shard {
        let (index, total) = (s.index.to_string(), s.total.to_string());
        w.family(
            &names::SHARD_INFO,
            &[(
                vec![("shard", index.as_str()), ("total", total.as_str())],
                1.0,
            )],
        );
    }
    w.family(&names::TICKS, &[(vec![], snap.tick as f64)]);
    w.family(
        &names::TICK_DURATION,
        &[(vec![], snap.last_tick_duration.as_secs_f64())],
    );
}

/// The probes' families.
fn visit_probes<V: Visitor>(w: &mut V, snap: &Snapshot) {
    let probe_rows = |f: fn(&crate::model::ProbeState) -> f64| {
        snap.probes
            .iter()
            .map(|p| {
                (
                    vec![("probe", p.probe.as_str()), ("target", p.target.as_str())],
                    f(p),
                )
            })
            .collect::<Vec<_>>()
    };
    w.family(
        &names::PROBE_SUCCESS,
        &probe_rows(|p| if p.failure.is_none() { 1.0 } else { 0.0 }),
    );
    let hist: Vec<_> = snap
        .probes
        .iter()
        .map(|p| {
            let labels = vec![("probe", p.probe.as_str()), ("target", p.target.as_str())];
            (labels, p.buckets.as_slice(), p.duration_sum, p.runs)
        })
        .collect();
    w.histogram(&names::PROBE_DURATION, &PROBE_BUCKETS, &hist);
    w.family(&names::PROBE_RUNS, &probe_rows(|p| p.runs as f64));
    let failures: Vec<_> = snap
        .probes
        .iter()
        .flat_map(|p| {
            p.failures.iter().map(|(reason, n)| {
                let labels = vec![
                    ("probe", p.probe.as_str()),
                    ("target", p.target.as_str()),
                    ("reason", reason.as_str()),
                ];
                (labels, *n as f64)
            })
        })
        .collect();
    w.family(&names::PROBE_FAILURES, &failures);
}

/// The sources' families, with the watchers' restarts and relists.
fn visit_sources<V: Visitor>(w: &mut V, snap: &Snapshot) {
    let per_source = |f: fn(&crate::model::SourceStatus) -> Option<f64>| {
        snap.sources
            .values()
            .filter_map(|s| f(s).map(|v| (vec![("source", s.name.as_str())], v)))
            .collect::<Vec<_>>()
    };
    let by_reason =
        |f: fn(&crate::model::SourceStatus) -> &std::collections::BTreeMap<String, u64>| {
            snap.sources
                .values()
                .flat_map(|s| {
                    f(s).iter().map(|(reason, n)| {
                        (
                            vec![("source", s.name.as_str()), ("reason", reason.as_str())],
                            *n as f64,
                        )
                    })
                })
                .collect::<Vec<_>>()
        };
    w.family(
        &names::SOURCE_UP,
        &per_source(|s| Some(if s.up { 1.0 } else { 0.0 })),
    );
    w.family(&names::SOURCE_RUNS, &per_source(|s| Some(s.runs as f64)));
    w.family(&names::SOURCE_ERRORS, &by_reason(|s| &s.errors));
    w.family(
        &names::SOURCE_NO_DATA,
        &per_source(|s| Some(s.no_data as f64)),
    );
    w.family(&names::SOURCE_DROPPED_VALUES, &by_reason(|s| &s.dropped));
    w.family(
        &names::SOURCE_EXPIRED_NODES,
        &per_source(|s| Some(s.expired as f64)),
    );
    let unmatched: Vec<_> = snap
        .sources
        .values()
        .filter_map(|s| s.usage_match.map(|m| (s.name.as_str(), m)))
        .flat_map(|(source, m)| {
            [
                ("nodes_without_usage", m.nodes_without_usage),
                ("series_without_node", m.series_without_node),
            ]
            .map(|(what, n)| (vec![("source", source), ("what", what)], n as f64))
        })
        .collect();
    w.family(&names::USAGE_UNMATCHED, &unmatched);
    w.family(
        &names::SOURCE_LAST_RUN_DURATION,
        &per_source(|s| Some(s.last_duration.as_secs_f64())),
    );
    w.family(
        &names::SOURCE_LAST_SUCCESS,
        &per_source(|s| s.last_success.map(unix_seconds)),
    );
    let by_resource =
        |f: fn(&crate::model::SourceStatus) -> &std::collections::BTreeMap<String, u64>| {
            snap.sources
                .values()
                .filter_map(|s| s.resource.as_deref().map(|r| (r, f(s))))
                .flat_map(|(resource, m)| {
                    m.iter().map(move |(reason, n)| {
                        (
                            vec![("resource", resource), ("reason", reason.as_str())],
                            *n as f64,
                        )
                    })
                })
                .collect::<Vec<_>>()
        };
    w.family(&names::WATCH_RESTARTS, &by_resource(|s| &s.watch_restarts));
    w.family(&names::WATCH_RELISTS, &by_resource(|s| &s.relists));
}

/// The push outputs' families.
fn visit_sinks<V: Visitor>(w: &mut V, snap: &Snapshot) {
    let per_sink = |f: fn(&crate::model::SinkStatus) -> Option<f64>| {
        snap.sinks
            .values()
            .filter_map(|s| f(s).map(|v| (vec![("sink", s.name.as_str())], v)))
            .collect::<Vec<_>>()
    };
    w.family(&names::SINK_PUSHES, &per_sink(|s| Some(s.pushes as f64)));
    let sink_failures: Vec<_> = snap
        .sinks
        .values()
        .flat_map(|s| {
            s.failures.iter().map(|(reason, n)| {
                (
                    vec![("sink", s.name.as_str()), ("reason", reason.as_str())],
                    *n as f64,
                )
            })
        })
        .collect();
    w.family(&names::SINK_FAILURES, &sink_failures);
    w.family(
        &names::SINK_SKIPPED_TICKS,
        &per_sink(|s| Some(s.skipped as f64)),
    );
    w.family(&names::SINK_POINTS, &per_sink(|s| Some(s.points as f64)));
    w.family(
        &names::SINK_REQUESTS,
        &per_sink(|s| Some(s.requests as f64)),
    );
    w.family(
        &names::SINK_LAST_SUCCESS,
        &per_sink(|s| s.last_success.map(unix_seconds)),
    );
    w.family(
        &names::SINK_PUSH_DURATION,
        &per_sink(|s| Some(s.last_duration.as_secs_f64())),
    );
}

/// A value of one cgroup, the task family and the container family it goes to.
type CgroupValue = (
    &'static Family,
    &'static Family,
    fn(&CgroupStats) -> Option<f64>,
);

/// A count of the effective cpuset, the task family and the container family it goes to.
type CpusetValue = (
    &'static Family,
    &'static Family,
    fn(&CgroupStats) -> Option<u32>,
);

/// The scalar cgroup values, in `names::ALL` order.
const CGROUP_VALUES: &[CgroupValue] = &[
    (&names::TASK_CPU_USAGE, &names::CONTAINER_CPU_USAGE, |s| {
        s.cpu_seconds
    }),
    (
        &names::TASK_CPU_PERIODS,
        &names::CONTAINER_CPU_PERIODS,
        |s| s.cpu_periods.map(|v| v as f64),
    ),
    (
        &names::TASK_CPU_THROTTLED_PERIODS,
        &names::CONTAINER_CPU_THROTTLED_PERIODS,
        |s| s.cpu_throttled_periods.map(|v| v as f64),
    ),
    (
        &names::TASK_CPU_THROTTLED,
        &names::CONTAINER_CPU_THROTTLED,
        |s| s.cpu_throttled_seconds,
    ),
    (
        &names::TASK_MEMORY_USAGE,
        &names::CONTAINER_MEMORY_USAGE,
        |s| s.memory_usage_bytes,
    ),
    (
        &names::TASK_MEMORY_WORKING_SET,
        &names::CONTAINER_MEMORY_WORKING_SET,
        |s| s.memory_working_set_bytes,
    ),
    (&names::TASK_MEMORY_RSS, &names::CONTAINER_MEMORY_RSS, |s| {
        s.memory_rss_bytes
    }),
    (
        &names::TASK_MEMORY_CACHE,
        &names::CONTAINER_MEMORY_CACHE,
        |s| s.memory_cache_bytes,
    ),
    (
        &names::TASK_MEMORY_LIMIT,
        &names::CONTAINER_MEMORY_LIMIT,
        |s| s.memory_limit_bytes,
    ),
    (
        &names::TASK_PAGE_FAULTS,
        &names::CONTAINER_PAGE_FAULTS,
        |s| s.page_faults.map(|v| v as f64),
    ),
    (
        &names::TASK_MAJOR_PAGE_FAULTS,
        &names::CONTAINER_MAJOR_PAGE_FAULTS,
        |s| s.major_page_faults.map(|v| v as f64),
    ),
    (&names::TASK_OOM_KILLS, &names::CONTAINER_OOM_KILLS, |s| {
        s.oom_kills.map(|v| v as f64)
    }),
];

/// `core` for CPU, `byte` for memory, storage and hugepages, `integer` otherwise
/// (kube-state-metrics' units).
fn resource_unit(resource: &str) -> &'static str {
    match resource {
        "cpu" => "core",
        "memory" | "ephemeral-storage" | "storage" => "byte",
        r if r.starts_with("hugepages-") => "byte",
        _ => "integer",
    }
}

/// The per-pod task families and the per-container ones (node role).
fn visit_tasks<V: Visitor>(w: &mut V, ts: Option<&TaskSet>) {
    let empty = TaskSet::default();
    let ts = ts.unwrap_or(&empty);
    let task_names: Vec<String> = ts.tasks.iter().map(|t| t.pod.task_name()).collect();
    let base = |i: usize| -> Labels<'_> {
        let p = &ts.tasks[i].pod;
        // Room for the labels rows add (`container`, `resource` and `kind` or `unit`): no
        // reallocation per row (the node role's RSS: thousands of rows per tick).
        let mut l = Vec::with_capacity(7 + p.labels.len() + 3);
        l.extend([
            ("node", ts.node.as_str()),
            ("namespace", p.namespace.as_str()),
            ("pod", p.name.as_str()),
            ("task_name", task_names[i].as_str()),
            ("task_id", p.uid.as_str()),
            ("qos", p.qos.as_str()),
            ("ready", flag(p.ready())),
        ]);
        l.extend(p.labels.iter().map(|(k, v)| (*k, v.as_str())));
        l
    };
    let idx = 0..ts.tasks.len();
    let rows: Vec<_> = idx
        .clone()
        .map(|i| (base(i), one_if(ts.tasks[i].stats.is_some())))
        .collect();
    w.family(&names::TASK_UP, &rows);
    let rows: Vec<_> = idx
        .clone()
        .filter(|&i| ts.tasks[i].stats.is_some())
        .map(|i| (base(i), ts.tasks[i].containers.len() as f64))
        .collect();
    w.family(&names::TASK_CONTAINERS, &rows);
    for (family, get) in [
        (
            &names::TASK_RESOURCE_REQUESTS,
            (|p: &crate::model::TaskPod| &p.requests) as fn(&_) -> &_,
        ),
        (&names::TASK_RESOURCE_LIMITS, |p| &p.limits),
    ] {
        let mut rows = Vec::new();
        for i in idx.clone() {
            for (r, v) in get(&ts.tasks[i].pod) {
                let mut l = base(i);
                l.push(("resource", r.as_str()));
                l.push(("unit", resource_unit(r)));
                rows.push((l, *v));
            }
        }
        w.family(family, &rows);
    }
    // Per cgroup: (labels, stats) of every pod, then of every container.
    let pods: Vec<(Labels<'_>, &CgroupStats)> = idx
        .clone()
        .filter_map(|i| ts.tasks[i].stats.as_ref().map(|s| (base(i), s)))
        .collect();
    let containers: Vec<(Labels<'_>, &CgroupStats)> = idx
        .flat_map(|i| {
            let base = &base;
            ts.tasks[i].containers.iter().map(move |c| {
                let mut l = base(i);
                l.push(("container", c.name.as_str()));
                (l, &c.stats)
            })
        })
        .collect();
    for (set, container) in [(&pods, false), (&containers, true)] {
        visit_cgroups(w, set, container);
    }
}

/// The cgroup families of `set` (every pod's, or with `container` every container's).
fn visit_cgroups<V: Visitor>(w: &mut V, set: &[(Labels<'_>, &CgroupStats)], container: bool) {
    for (tf, cf, get) in CGROUP_VALUES {
        let rows: Vec<_> = set
            .iter()
            .filter_map(|(l, s)| get(s).map(|v| (l.clone(), v)))
            .collect();
        w.family(if container { cf } else { tf }, &rows);
    }
    let rows: Vec<_> = set
        .iter()
        .flat_map(|(l, s)| {
            s.pressure.iter().map(move |p| {
                let mut l = with_room(l, 2);
                l.push(("resource", p.resource));
                l.push(("kind", p.kind));
                (l, p.seconds)
            })
        })
        .collect();
    let fam = if container {
        &names::CONTAINER_PRESSURE
    } else {
        &names::TASK_PRESSURE
    };
    w.family(fam, &rows);
    let numa: Vec<Vec<String>> = set
        .iter()
        .map(|(_, s)| s.numa_bytes.iter().map(|(n, _)| n.to_string()).collect())
        .collect();
    let rows: Vec<_> = set
        .iter()
        .zip(&numa)
        .flat_map(|((l, s), ids)| {
            s.numa_bytes.iter().zip(ids).map(move |((_, v), id)| {
                let mut l = with_room(l, 1);
                l.push(("numa_node", id.as_str()));
                (l, *v)
            })
        })
        .collect();
    let fam = if container {
        &names::CONTAINER_MEMORY_NUMA
    } else {
        &names::TASK_MEMORY_NUMA
    };
    w.family(fam, &rows);
    // The effective cpuset's sizes, after the NUMA family as in `names::ALL`.
    let cpuset: [CpusetValue; 2] = [
        (
            &names::TASK_CPUSET_CPUS,
            &names::CONTAINER_CPUSET_CPUS,
            |s| s.cpuset_cpus,
        ),
        (
            &names::TASK_CPUSET_MEMORY_NODES,
            &names::CONTAINER_CPUSET_MEMORY_NODES,
            |s| s.cpuset_memory_nodes,
        ),
    ];
    for (tf, cf, get) in cpuset {
        let rows: Vec<_> = set
            .iter()
            .filter_map(|(l, s)| get(s).map(|v| (l.clone(), f64::from(v))))
            .collect();
        w.family(if container { cf } else { tf }, &rows);
    }
}

/// A copy of `l` with room for `more` labels (a clone has none: each push reallocates).
fn with_room<'a>(l: &Labels<'a>, more: usize) -> Labels<'a> {
    let mut out = Vec::with_capacity(l.len() + more);
    out.extend_from_slice(l);
    out
}

/// The labels of a task's series (as `visit_tasks` gives them).
fn task_labels<'a>(node: &'a str, p: &'a crate::model::TaskPod, task_name: &'a str) -> Labels<'a> {
    let mut l = vec![
        ("node", node),
        ("namespace", p.namespace.as_str()),
        ("pod", p.name.as_str()),
        ("task_name", task_name),
        ("task_id", p.uid.as_str()),
        ("qos", p.qos.as_str()),
        ("ready", flag(p.ready())),
    ];
    l.extend(p.labels.iter().map(|(k, v)| (*k, v.as_str())));
    l
}

/// A perf value of one pod and the family it goes to.
type PerfValue = (
    &'static Family,
    fn(&crate::model::TaskPerfSample) -> Option<f64>,
);

/// The per-pod perf families, in `names::ALL` order.
const PERF_VALUES: &[PerfValue] = &[
    (&names::TASK_PERF_CYCLES, |t| t.counts.cycles),
    (&names::TASK_PERF_INSTRUCTIONS, |t| t.counts.instructions),
    (&names::TASK_PERF_CACHE_REFERENCES, |t| {
        t.counts.cache_references
    }),
    (&names::TASK_PERF_CACHE_MISSES, |t| t.counts.cache_misses),
    (&names::TASK_PERF_TASK_CLOCK, |t| {
        t.counts.task_clock_seconds
    }),
    (&names::TASK_PERF_CONTEXT_SWITCHES, |t| {
        t.counts.context_switches
    }),
    (&names::TASK_PERF_PAGE_FAULTS, |t| t.counts.page_faults),
    (&names::TASK_PERF_IPC, |t| t.ipc),
    (&names::TASK_PERF_CACHE_MPKI, |t| t.cache_mpki),
    (&names::TASK_PERF_SCALING, |t| t.scaling_factor),
];

/// The perf counter families (node role, `--task-perf-events`); nothing without the flag.
fn visit_task_perf<V: Visitor>(w: &mut V, ps: Option<&crate::model::TaskPerfSet>) {
    let Some(ps) = ps else { return };
    let node = ps.node.as_str();
    let task_names: Vec<String> = ps.tasks.iter().map(|t| t.pod.task_name()).collect();
    let labels: Vec<Labels<'_>> = ps
        .tasks
        .iter()
        .zip(&task_names)
        .map(|(t, n)| task_labels(node, &t.pod, n))
        .collect();
    for (family, get) in PERF_VALUES {
        let rows: Vec<_> = ps
            .tasks
            .iter()
            .zip(&labels)
            .filter_map(|(t, l)| get(t).map(|v| (l.clone(), v)))
            .collect();
        w.family(family, &rows);
    }
    let active = ps.event_set.map_or("none", |s| s.as_str());
    let rows: Vec<_> = ["hardware", "software", "none"]
        .into_iter()
        .map(|set| (vec![("node", node), ("set", set)], one_if(set == active)))
        .collect();
    w.family(&names::TASK_PERF_EVENT_SET, &rows);
    let rows: Vec<_> = ps
        .open_failures
        .iter()
        .map(|(reason, n)| (vec![("node", node), ("reason", *reason)], *n as f64))
        .collect();
    w.family(&names::TASK_PERF_OPEN_FAILURES, &rows);
    w.family(
        &names::TASK_PERF_OPEN_COUNTERS,
        &[(vec![("node", node)], ps.open_counters as f64)],
    );
}

/// The node's platform families (node role).
fn visit_platform<V: Visitor>(w: &mut V, p: Option<&Platform>) {
    let empty = Platform::default();
    let p = p.unwrap_or(&empty);
    let node = p.node.as_str();
    let one = |v: Option<u32>| -> Vec<(Labels<'_>, f64)> {
        v.map(|v| (vec![("node", node)], f64::from(v)))
            .into_iter()
            .collect()
    };
    w.family(&names::PLATFORM_SOCKETS, &one(p.sockets));
    w.family(&names::PLATFORM_CORES, &one(p.cores));
    w.family(&names::PLATFORM_CPUS, &one(p.cpus));
    w.family(&names::PLATFORM_NUMA_NODES, &one(p.numa_nodes));
    let cpu_ids: Vec<String> = p
        .cpu_busy_seconds
        .iter()
        .map(|(c, _)| c.to_string())
        .collect();
    let rows: Vec<_> = p
        .cpu_busy_seconds
        .iter()
        .zip(&cpu_ids)
        .map(|((_, v), id)| (vec![("node", node), ("cpu", id.as_str())], *v))
        .collect();
    w.family(&names::PLATFORM_CPU_BUSY, &rows);
    let rows: Vec<_> = p
        .memory_usage_bytes
        .map(|v| (vec![("node", node)], v))
        .into_iter()
        .collect();
    w.family(&names::PLATFORM_MEMORY_USAGE, &rows);
    let ids: Vec<String> = p.numa_memory.iter().map(|n| n.node.to_string()).collect();
    let numa = |f: fn(&crate::model::NumaMemory) -> f64| -> Vec<(Labels<'_>, f64)> {
        p.numa_memory
            .iter()
            .zip(&ids)
            .map(|(n, id)| (vec![("node", node), ("numa_node", id.as_str())], f(n)))
            .collect()
    };
    w.family(&names::PLATFORM_NUMA_TOTAL, &numa(|n| n.total_bytes));
    w.family(&names::PLATFORM_NUMA_FREE, &numa(|n| n.free_bytes));
    w.family(
        &names::PLATFORM_NUMA_USED,
        &numa(|n| (n.total_bytes - n.free_bytes).max(0.0)),
    );
    let rows: Vec<_> = p
        .vmstat
        .iter()
        .map(|(k, v)| (vec![("node", node), ("key", *k)], *v))
        .collect();
    w.family(&names::PLATFORM_VMSTAT, &rows);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `ByName` finds what `BTreeMap::get` finds, for names in order, out of order, absent,
    /// before the first key and after the last.
    #[test]
    fn by_name_finds_what_get_finds_in_any_order() {
        let map: std::collections::BTreeMap<std::sync::Arc<str>, u32> =
            [("b", 1), ("d", 2), ("f", 3)]
                .into_iter()
                .map(|(k, v)| (k.into(), v))
                .collect();
        let asks = [
            "a", "b", "c", "d", "d", "e", "f", "g", "b", "a", "f", "c", "d",
        ];
        let mut by = ByName::new(&map);
        for name in asks {
            assert_eq!(by.get(name), map.get(name), "{name}");
        }
    }
}
