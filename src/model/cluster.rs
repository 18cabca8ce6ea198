//! What the Kubernetes watchers derive from objects: plain facts, no API types.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;

use super::node::NodeCapacity;

/// Node pool and zone, as read from node labels (`unknown` when no known key is set).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Placement {
    pub pool: String,
    pub zone: String,
}

/// Everything the cluster metrics need of one Node.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeFacts {
    pub name: String,
    pub placement: Placement,
    /// Condition type -> status (`True`, `False`, `Unknown`), one per type, by type. Shared
    /// with the watched Node's (interned) strings: no copy per node and derivation.
    pub conditions: Vec<(Arc<str>, Arc<str>)>,
    /// The `Ready` condition is `True`.
    pub ready: bool,
    /// Neither `spec.unschedulable` nor a `node.kubernetes.io/unschedulable` taint.
    pub schedulable: bool,
    /// Older than the warming period.
    pub done_warming: bool,
    pub created: Option<SystemTime>,
    pub capacity: Option<NodeCapacity>,
    pub allocatable: Option<NodeCapacity>,
}

impl NodeFacts {
    /// Ready, schedulable and done warming.
    pub fn available(&self) -> bool {
        self.ready && self.schedulable && self.done_warming
    }
}

/// The kind of controller that runs an addon.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Controller {
    DaemonSet,
    Deployment,
}

impl Controller {
    pub fn as_str(self) -> &'static str {
        match self {
            Controller::DaemonSet => "DaemonSet",
            Controller::Deployment => "Deployment",
        }
    }
}

/// An addon: a workload marked by the addon annotations or labels.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
///
/// Its strings are shared (`Arc<str>`): a few addons run on every node, and every pod, per-node
/// count and restart record of them holds one clone, not a copy.
pub struct Addon {
    pub name: Arc<str>,
    pub version: Arc<str>,
    pub controller: Controller,
}

/// How many pods an addon's controller wants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddonExpected {
    pub addon: Addon,
    pub namespace: String,
    /// The controller object's name.
    pub workload: String,
    /// DaemonSet `status.desiredNumberScheduled`; Deployment `spec.replicas`.
    pub expected: u32,
}

/// CPU (cores) and memory (bytes).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct CpuMem {
    pub cpu_cores: f64,
    pub memory_bytes: f64,
}

impl CpuMem {
    pub fn add(&mut self, o: CpuMem) {
        self.cpu_cores += o.cpu_cores;
        self.memory_bytes += o.memory_bytes;
    }

    pub fn max(self, o: CpuMem) -> CpuMem {
        CpuMem {
            cpu_cores: self.cpu_cores.max(o.cpu_cores),
            memory_bytes: self.memory_bytes.max(o.memory_bytes),
        }
    }
}

/// One container's restarts and how it last ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerRestarts {
    /// Shared, like the reason: the same few names recur on every node.
    pub name: Arc<str>,
    pub restarts: u32,
    /// `lastState.terminated.reason`, e.g. `OOMKilled`, `Error`.
    pub last_reason: Option<Arc<str>>,
    pub last_exit_code: Option<i32>,
}

/// The top controller of a pod.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Owner {
    /// `Deployment` (resolved from its ReplicaSet), `DaemonSet`, `StatefulSet`, `Job`, ...
    pub kind: Arc<str>,
    pub name: Arc<str>,
}

/// Everything the metrics need of one Pod.
///
/// Strings many pods share are `Arc<str>`: the pod watcher keeps a [`PodRecord`] of the facts
/// and hands it one copy of each string the record holds (node; an addon pod's namespace,
/// addon and container names: `watch::cluster::Interner::record`).
///
/// [`PodRecord`]: crate::sources::cluster::aggregate::PodRecord
#[derive(Debug, Clone, PartialEq)]
pub struct PodFacts {
    pub namespace: Arc<str>,
    pub name: Arc<str>,
    pub node: Option<Arc<str>>,
    /// `status.phase`; the five phases Kubernetes defines are borrowed, not allocated per pod.
    pub phase: std::borrow::Cow<'static, str>,
    /// The `Ready` condition is `True`.
    pub ready: bool,
    pub owner: Option<Owner>,
    pub addon: Option<Addon>,
    /// What the scheduler counts: max(sum of containers, largest init container) + overhead.
    pub requests: CpuMem,
    pub limits: CpuMem,
    /// Addon pods only (restart series cover addon pods; keeping every pod's containers would
    /// cost about 40 MB at 150,000 pods for nothing). Made once per watch event and shared
    /// with every cluster state derived while the pod is unchanged: a derivation clones a
    /// pointer per addon pod, not its strings (260,000 addon pods at 65,000 nodes).
    pub restarts: Option<Arc<PodRestarts>>,
}

/// One addon on one node: every pod of it counts (gke-prober looked at the first only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddonOnNode {
    pub addon: Addon,
    pub pods: u32,
    /// Pods whose Ready condition is True.
    pub ready: u32,
}

impl AddonOnNode {
    /// Every pod of the addon on the node is ready.
    pub fn available(&self) -> bool {
        self.pods > 0 && self.ready == self.pods
    }
}

/// What the pods on one node hold.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct NodePods {
    pub requests: CpuMem,
    pub limits: CpuMem,
    /// Pods that hold resources (not Succeeded or Failed).
    pub pods: u32,
}

/// Restart counters of one pod's containers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodRestarts {
    pub namespace: Arc<str>,
    pub pod: Arc<str>,
    pub node: Option<Arc<str>>,
    pub addon: Option<Addon>,
    pub containers: Vec<ContainerRestarts>,
}

#[cfg(test)]
impl NodeFacts {
    /// A Ready, schedulable, warmed-up node in pool `p`, zone `z`, without capacities (unit
    /// tests).
    pub fn ready_for_test(name: &str) -> NodeFacts {
        NodeFacts {
            name: name.into(),
            placement: Placement {
                pool: "p".into(),
                zone: "z".into(),
            },
            conditions: Vec::new(),
            ready: true,
            schedulable: true,
            done_warming: true,
            created: None,
            capacity: None,
            allocatable: None,
        }
    }
}

/// The cluster as the Kubernetes watchers see it at one tick.
#[derive(Debug, Clone, Default)]
pub struct ClusterState {
    /// By name. Shared with the state before when no Node changed (and no node finished
    /// warming) since: the hub and the outputs skip every per-node fact by pointer then.
    pub nodes: Arc<Vec<NodeFacts>>,
    pub expected: Vec<AddonExpected>,
    /// By node name.
    pub node_pods: std::collections::BTreeMap<Arc<str>, NodePods>,
    /// By node name.
    pub addons: std::collections::BTreeMap<Arc<str>, Vec<AddonOnNode>>,
    /// Addon pods only: every pod's containers would be 300,000 series at the largest scale.
    /// Shared with the pod index (see [`PodFacts::restarts`]).
    pub restarts: Vec<Arc<PodRestarts>>,
    /// Objects that could not be used, by reason (e.g. `bad_quantity`); each is logged.
    pub skipped: std::collections::BTreeMap<String, u64>,
    /// No pods were watched (cluster role, `--pod-scope none`): whether each node's addons are
    /// available is unknown here and left to the node role.
    pub addons_elsewhere: bool,
}

impl PartialEq for ClusterState {
    /// Field by field, the cheap ones first; the nodes by pointer before their facts.
    fn eq(&self, other: &Self) -> bool {
        let ClusterState {
            nodes,
            expected,
            node_pods,
            addons,
            restarts,
            skipped,
            addons_elsewhere,
        } = self;
        *addons_elsewhere == other.addons_elsewhere
            && *skipped == other.skipped
            && *expected == other.expected
            && (Arc::ptr_eq(nodes, &other.nodes) || *nodes == other.nodes)
            && *restarts == other.restarts
            && *node_pods == other.node_pods
            && *addons == other.addons
    }
}

/// Nodes per (placement, condition type, status).
pub fn node_condition_counts(
    nodes: &[NodeFacts],
) -> BTreeMap<(Placement, Arc<str>, Arc<str>), u32> {
    let mut out = BTreeMap::new();
    for n in nodes {
        for (t, s) in &n.conditions {
            *out.entry((n.placement.clone(), t.clone(), s.clone()))
                .or_default() += 1;
        }
    }
    out
}

/// The availability flags of a node: ready, schedulable, done_warming, available.
pub type Availability = (bool, bool, bool, bool);

/// Nodes per (placement, availability).
pub fn node_availability_counts(nodes: &[NodeFacts]) -> BTreeMap<(Placement, Availability), u32> {
    let mut out = BTreeMap::new();
    for n in nodes {
        let a = (n.ready, n.schedulable, n.done_warming, n.available());
        *out.entry((n.placement.clone(), a)).or_default() += 1;
    }
    out
}
