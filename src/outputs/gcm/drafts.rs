//! The series one snapshot says, in gke-prober's names: its metric suffixes, label keys and
//! monitored resources, identical series merged, before timing.

use std::collections::{BTreeMap, HashMap};

use crate::model::{ClusterState, NodeFacts, Snapshot};
use crate::outputs::families::{self, GkeProberMetric};
use crate::outputs::select;

/// The monitored resource a series belongs to (project, location and cluster are common).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Res {
    Cluster,
    Node(String),
    Pod { namespace: String, pod: String },
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Value {
    Int(i64),
    #[allow(dead_code)]
    Double(f64),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Gauge,
    Cumulative,
}

/// One series as the snapshot gives it, before timing.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Draft {
    pub(super) suffix: &'static str,
    /// gke-prober's label keys, in its order, with values.
    pub(super) labels: Vec<(&'static str, String)>,
    pub(super) res: Res,
    pub(super) kind: Kind,
    pub(super) value: Value,
}

impl Draft {
    /// Identifies the series across pushes.
    pub(super) fn key(&self) -> String {
        let mut k = String::with_capacity(96);
        k.push_str(self.suffix);
        match &self.res {
            Res::Cluster => k.push_str("|c"),
            Res::Node(n) => {
                k.push_str("|n=");
                k.push_str(n);
            }
            Res::Pod { namespace, pod } => {
                k.push_str("|p=");
                k.push_str(namespace);
                k.push('/');
                k.push_str(pod);
            }
        }
        for (key, v) in &self.labels {
            k.push('|');
            k.push_str(key);
            k.push('=');
            k.push_str(v);
        }
        k
    }
}

fn tf(b: bool) -> &'static str {
    if b { "True" } else { "False" }
}

fn gke(suffix: &str) -> Option<&'static GkeProberMetric> {
    families::GKE_PROBER.iter().find(|m| m.suffix == suffix)
}

/// Collects drafts, mapping our label names to gke-prober's keys through
/// [`families::GKE_PROBER`]; identical series are merged (counts add up).
#[derive(Default)]
struct Drafts {
    by_key: BTreeMap<String, Draft>,
}

impl Drafts {
    /// Adds a count: an identical series adds up.
    fn add(&mut self, suffix: &'static str, res: Res, ours: &[(&str, &str)], value: i64) {
        self.put(suffix, res, ours, value, true);
    }

    /// Adds a series whose value stands alone: an identical one is not added again.
    fn add_once(&mut self, suffix: &'static str, res: Res, ours: &[(&str, &str)], value: i64) {
        self.put(suffix, res, ours, value, false);
    }

    fn put(
        &mut self,
        suffix: &'static str,
        res: Res,
        ours: &[(&str, &str)],
        value: i64,
        sum: bool,
    ) {
        let Some(m) = gke(suffix) else {
            tracing::error!(suffix, "no gke-prober mapping for this metric; not written");
            return;
        };
        let labels = m
            .labels
            .iter()
            .map(|(key, our)| {
                let v = ours
                    .iter()
                    .find(|(k, _)| k == our)
                    .map(|(_, v)| (*v).to_string())
                    .unwrap_or_default();
                (*key, v)
            })
            .collect();
        let kind = if m.kind == "CUMULATIVE" {
            Kind::Cumulative
        } else {
            Kind::Gauge
        };
        let d = Draft {
            suffix: m.suffix,
            labels,
            res,
            kind,
            value: Value::Int(value),
        };
        match self.by_key.entry(d.key()) {
            std::collections::btree_map::Entry::Vacant(e) => {
                e.insert(d);
            }
            std::collections::btree_map::Entry::Occupied(mut e) => {
                if let (true, Value::Int(a), Value::Int(b)) = (sum, &mut e.get_mut().value, d.value)
                {
                    *a += b;
                } else {
                    tracing::debug!(series = %e.key(), "duplicate series in the snapshot; written once");
                }
            }
        }
    }
}

/// Everything this instance writes for one snapshot, in a stable order.
pub(super) fn drafts(snap: &Snapshot, own_node: Option<&str>, node_series: bool) -> Vec<Draft> {
    let node_mode = own_node.is_some() || snap.cluster.role == "node";
    let mut out = Drafts::default();
    if let Some(cs) = &snap.cluster_state {
        if !node_mode {
            cluster_drafts(&mut out, cs);
        }
        if node_mode || node_series {
            node_drafts(&mut out, cs, own_node);
        }
    }
    if !node_mode {
        probe_drafts(&mut out, snap);
    }
    let sel = &snap.selection;
    // Pod series follow their pod's node (only looked up when sharded).
    let pod_nodes: HashMap<(&str, &str), &str> = match (&snap.cluster_state, sel.shard) {
        (Some(cs), Some(_)) => cs
            .restarts
            .iter()
            .filter_map(|p| Some(((p.namespace.as_ref(), p.pod.as_ref()), p.node.as_deref()?)))
            .collect(),
        _ => HashMap::new(),
    };
    let pod_node =
        |namespace: &str, pod: &str| pod_nodes.get(&(namespace, pod)).map(|n| (*n).to_string());
    out.by_key
        .into_values()
        .filter(|d| {
            let Some(family) =
                gke(d.suffix).and_then(|m| families::ALL.iter().find(|f| f.name == m.family))
            else {
                return true;
            };
            let node = match &d.res {
                Res::Cluster => None,
                Res::Node(n) => Some(n.clone()),
                Res::Pod { namespace, pod } => pod_node(namespace, pod),
            };
            let labels: Vec<(&str, &str)> = node.iter().map(|n| ("node", n.as_str())).collect();
            select::family_allowed(sel, family) && select::emits_row(sel, family, &labels)
        })
        .collect()
}

fn cluster_drafts(out: &mut Drafts, cs: &ClusterState) {
    for ((pl, t, st), n) in crate::model::cluster::node_condition_counts(&cs.nodes) {
        out.add(
            "cluster/node_condition",
            Res::Cluster,
            &[
                ("pool", &pl.pool),
                ("zone", &pl.zone),
                ("condition", &t),
                ("status", &st),
            ],
            i64::from(n),
        );
    }
    for ((pl, (r, s, d, a)), n) in crate::model::cluster::node_availability_counts(&cs.nodes) {
        out.add(
            "cluster/node_available",
            Res::Cluster,
            &[
                ("pool", &pl.pool),
                ("zone", &pl.zone),
                ("ready", tf(r)),
                ("schedulable", tf(s)),
                ("done_warming", tf(d)),
                ("available", tf(a)),
            ],
            i64::from(n),
        );
    }
    // Several controllers of one addon version add up.
    for e in &cs.expected {
        out.add(
            "cluster/addons_expected",
            Res::Cluster,
            &[
                ("addon", &e.addon.name),
                ("version", &e.addon.version),
                ("controller", e.addon.controller.as_str()),
            ],
            i64::from(e.expected),
        );
    }
}

fn node_drafts(out: &mut Drafts, cs: &ClusterState, own_node: Option<&str>) {
    let mine = |name: &str| own_node.is_none_or(|o| o == name);
    for n in cs.nodes.iter().filter(|n| mine(&n.name)) {
        let addons_ok = cs
            .addons
            .get(n.name.as_str())
            .is_none_or(|list| list.iter().all(|a| a.available()));
        node_facts_drafts(out, n, addons_ok);
    }
    addon_drafts(out, cs, mine);
    restart_drafts(out, cs, own_node);
}

/// A node's conditions, availability and its control plane's availability.
fn node_facts_drafts(out: &mut Drafts, n: &NodeFacts, addons_ok: bool) {
    let res = || Res::Node(n.name.clone());
    let (pool, zone) = (n.placement.pool.as_str(), n.placement.zone.as_str());
    for (t, st) in &n.conditions {
        out.add_once(
            "node/condition",
            res(),
            &[
                ("pool", pool),
                ("zone", zone),
                ("condition", t),
                ("status", st),
            ],
            1,
        );
    }
    out.add_once(
        "node/available",
        res(),
        &[
            ("pool", pool),
            ("zone", zone),
            ("available", tf(n.available())),
            ("ready", tf(n.ready)),
            ("schedulable", tf(n.schedulable)),
            ("done_warming", tf(n.done_warming)),
        ],
        1,
    );
    out.add_once(
        "addon/control_plane_available",
        res(),
        &[
            ("pool", pool),
            ("zone", zone),
            ("available", tf(n.available() && addons_ok)),
        ],
        1,
    );
}

/// The addons on the nodes `mine` accepts. Addons on nodes without facts still count, with
/// an unknown pool and zone.
fn addon_drafts(out: &mut Drafts, cs: &ClusterState, mine: impl Fn(&str) -> bool) {
    let facts: HashMap<&str, &NodeFacts> = cs.nodes.iter().map(|n| (n.name.as_str(), n)).collect();
    const UNKNOWN: &str = "unknown";
    let placement = |node: &str| {
        facts.get(node).map_or((UNKNOWN, UNKNOWN), |n| {
            (n.placement.pool.as_str(), n.placement.zone.as_str())
        })
    };
    for (node, list) in cs.addons.iter().filter(|(node, _)| mine(node)) {
        let (pool, zone) = placement(node);
        for a in list {
            out.add(
                "addon/available",
                Res::Node(node.to_string()),
                &[
                    ("pool", pool),
                    ("zone", zone),
                    ("addon", &a.addon.name),
                    ("version", &a.addon.version),
                    ("controller", a.addon.controller.as_str()),
                    ("available", tf(a.available())),
                ],
                i64::from(a.pods),
            );
        }
    }
}

/// The restarts of every container of the addon pods (on `own_node` only, when set).
fn restart_drafts(out: &mut Drafts, cs: &ClusterState, own_node: Option<&str>) {
    for p in &cs.restarts {
        if own_node.is_some() && p.node.as_deref() != own_node {
            continue;
        }
        let addon = p.addon.as_ref().map_or("", |a| a.name.as_ref());
        for c in &p.containers {
            out.add_once(
                "addon/restart",
                Res::Pod {
                    namespace: p.namespace.to_string(),
                    pod: p.pod.to_string(),
                },
                &[("container", &c.name), ("addon", addon)],
                i64::from(c.restarts),
            );
        }
    }
}

/// gke-prober's cluster probes: our probe name -> its `name` label and success text.
const ADDON_PROBES: &[(&str, &str, &str)] = &[
    (
        "metrics_server",
        "metrics_server",
        "Metrics-server is operational",
    ),
    ("cluster_dns", "kube_dns", "Kube-dns is operational"),
];

fn probe_drafts(out: &mut Drafts, snap: &Snapshot) {
    for p in &snap.probes {
        let Some((_, name, ok_text)) = ADDON_PROBES.iter().find(|(ours, _, _)| *ours == p.probe)
        else {
            continue;
        };
        let (condition, reason) = match &p.failure {
            None => ("Healthy", *ok_text),
            Some(r) => ("Unhealthy", r.as_str()),
        };
        // A second target with the same outcome is the same series.
        out.add_once(
            "cluster/probe/addons_condition",
            Res::Cluster,
            &[("probe", *name), ("success", condition), ("reason", reason)],
            1,
        );
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::{Duration, SystemTime};

    use super::*;
    use crate::model::{
        Addon, AddonExpected, AddonOnNode, ClusterInfo, ContainerRestarts, Controller, Placement,
        PodRestarts, ProbeState,
    };

    fn facts(name: &str, ready: bool) -> NodeFacts {
        NodeFacts {
            name: name.into(),
            placement: Placement {
                pool: "p".into(),
                zone: "z".into(),
            },
            conditions: vec![("Ready".into(), tf(ready).into())],
            ready,
            schedulable: true,
            done_warming: true,
            created: None,
            capacity: None,
            allocatable: None,
        }
    }

    fn snap(role: &str) -> Snapshot {
        let addon = Addon {
            name: "fluentbit".into(),
            version: "1".into(),
            controller: Controller::DaemonSet,
        };
        let mut cs = ClusterState {
            nodes: Arc::new(vec![facts("a", true), facts("b", false)]),
            ..Default::default()
        };
        cs.expected.push(AddonExpected {
            addon: addon.clone(),
            namespace: "kube-system".into(),
            workload: "fb".into(),
            expected: 2,
        });
        for n in ["a", "b", "ghost"] {
            cs.addons.insert(
                n.into(),
                vec![AddonOnNode {
                    addon: addon.clone(),
                    pods: 1,
                    ready: 1,
                }],
            );
        }
        cs.restarts.push(Arc::new(PodRestarts {
            namespace: "kube-system".into(),
            pod: "fb-1".into(),
            node: Some("b".into()),
            addon: Some(addon),
            containers: vec![ContainerRestarts {
                name: "fb".into(),
                restarts: 2,
                last_reason: None,
                last_exit_code: None,
            }],
        }));
        let mut s = Snapshot::empty(SystemTime::now());
        s.cluster = ClusterInfo {
            cluster_name: "c".into(),
            role: role.into(),
            project: "p".into(),
            location: "l".into(),
        };
        s.cluster_state = Some(Arc::new(cs));
        for (probe, failure) in [("metrics_server", None), ("cluster_dns", Some("refused"))] {
            s.probes.push(ProbeState {
                probe: probe.into(),
                target: "t".into(),
                at: SystemTime::now(),
                duration: Duration::ZERO,
                failure: failure.map(String::from),
                runs: 1,
                failures: BTreeMap::new(),
                buckets: vec![],
                duration_sum: 0.0,
            });
        }
        s
    }

    #[test]
    fn every_gke_prober_metric_is_written_with_all_its_label_keys() {
        let d = drafts(&snap("cluster"), None, true);
        for m in families::GKE_PROBER {
            let of: Vec<_> = d.iter().filter(|x| x.suffix == m.suffix).collect();
            assert!(!of.is_empty(), "{} not written", m.suffix);
            for x in of {
                let keys: Vec<_> = x.labels.iter().map(|(k, _)| *k).collect();
                let want: Vec<_> = m.labels.iter().map(|(k, _)| *k).collect();
                assert_eq!(keys, want, "{}", m.suffix);
                assert!(
                    x.labels.iter().all(|(_, v)| !v.is_empty()),
                    "{}: every label has a value: {:?}",
                    m.suffix,
                    x.labels
                );
                assert_eq!(
                    x.kind == Kind::Cumulative,
                    m.kind == "CUMULATIVE",
                    "{}",
                    m.suffix
                );
            }
        }
        // The addon on a node without facts is still written, with an unknown placement.
        let ghost: Vec<_> = d
            .iter()
            .filter(|x| x.res == Res::Node("ghost".into()))
            .collect();
        assert_eq!(ghost.len(), 1);
        assert_eq!(ghost[0].labels[0], ("nodepool", "unknown".to_string()));
    }

    #[test]
    fn shards_write_disjoint_shares_that_add_up_and_the_denylist_holds() {
        use crate::model::{Selection, Shard};
        use crate::outputs::select::shard_of;
        let all = drafts(&snap("cluster"), None, true);
        let mut union = Vec::new();
        for index in 0..2 {
            let mut s = snap("cluster");
            s.selection = Arc::new(Selection {
                shard: Some(Shard { index, total: 2 }),
                ..Selection::default()
            });
            let d = drafts(&s, None, true);
            for x in &d {
                match &x.res {
                    // Pods follow their node: fb-1 is on b.
                    Res::Node(n) => assert_eq!(shard_of(n, 2), index, "{}", x.key()),
                    Res::Pod { .. } => assert_eq!(shard_of("b", 2), index),
                    Res::Cluster => assert_eq!(index, 0, "{}", x.key()),
                }
            }
            union.extend(d.into_iter().map(|x| x.key()));
        }
        union.sort();
        let mut want: Vec<_> = all.iter().map(Draft::key).collect();
        want.sort();
        assert_eq!(union, want, "each series from exactly one shard");

        let mut s = snap("cluster");
        s.selection = Arc::new(Selection {
            shard: None,
            excluded_families: ["kube_prober_node_condition".to_string()].into(),
            stale_after: None,
        });
        let d = drafts(&s, None, true);
        assert!(d.iter().all(|x| x.suffix != "node/condition"));
        assert_eq!(
            d.len(),
            all.iter().filter(|x| x.suffix != "node/condition").count()
        );
    }

    #[test]
    fn without_node_series_the_cluster_role_writes_only_cluster_series() {
        let all = drafts(&snap("cluster"), None, true);
        let d = drafts(&snap("cluster"), None, false);
        assert!(!d.is_empty());
        assert!(d.iter().all(|x| x.suffix.starts_with("cluster/")));
        assert!(d.iter().all(|x| matches!(x.res, Res::Cluster)));
        assert_eq!(
            d.len(),
            all.iter()
                .filter(|x| x.suffix.starts_with("cluster/"))
                .count()
        );
    }

    #[test]
    fn the_node_role_keeps_to_its_node() {
        let d = drafts(&snap("node"), Some("b"), true);
        assert!(d.iter().all(|x| !x.suffix.starts_with("cluster/")));
        assert!(d.iter().all(|x| match &x.res {
            Res::Node(n) => n == "b",
            Res::Pod { pod, .. } => pod == "fb-1",
            Res::Cluster => false,
        }));
        assert_eq!(d.len(), 5);
        // Role `node` without a name: no cluster series either.
        assert!(
            drafts(&snap("node"), None, false)
                .iter()
                .all(|x| !x.suffix.starts_with("cluster/"))
        );
    }

    #[test]
    fn identical_counts_add_up_and_single_series_stay_single() {
        let mut s = snap("cluster");
        let cs = Arc::make_mut(s.cluster_state.as_mut().unwrap());
        let again = cs.expected[0].clone();
        cs.expected.push(again);
        s.probes.push(s.probes[0].clone());
        let d = drafts(&s, None, true);
        let expected: Vec<_> = d
            .iter()
            .filter(|x| x.suffix == "cluster/addons_expected")
            .collect();
        assert_eq!(expected.len(), 1);
        assert_eq!(expected[0].value, Value::Int(4));
        let ms: Vec<_> = d
            .iter()
            .filter(|x| {
                x.suffix == "cluster/probe/addons_condition" && x.labels[0].1 == "metrics_server"
            })
            .collect();
        assert_eq!(ms.len(), 1);
        assert_eq!(ms[0].value, Value::Int(1));
        assert_eq!(ms[0].labels[1].1, "Healthy");
    }
}
