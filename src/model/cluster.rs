//! What the Kubernetes watchers derive from objects: plain facts, no API types.

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
    /// Condition type -> status (`True`, `False`, `Unknown`), one per type.
    pub conditions: Vec<(String, String)>,
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
pub struct Addon {
    pub name: String,
    pub version: String,
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
    pub name: String,
    pub restarts: u32,
    /// `lastState.terminated.reason`, e.g. `OOMKilled`, `Error`.
    pub last_reason: Option<String>,
    pub last_exit_code: Option<i32>,
}

/// The top controller of a pod.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Owner {
    /// `Deployment` (resolved from its ReplicaSet), `DaemonSet`, `StatefulSet`, `Job`, ...
    pub kind: String,
    pub name: String,
}

/// Everything the metrics need of one Pod.
#[derive(Debug, Clone, PartialEq)]
pub struct PodFacts {
    pub namespace: String,
    pub name: String,
    pub node: Option<String>,
    pub phase: String,
    /// The `Ready` condition is `True`.
    pub ready: bool,
    pub owner: Option<Owner>,
    pub addon: Option<Addon>,
    /// What the scheduler counts: max(sum of containers, largest init container) + overhead.
    pub requests: CpuMem,
    pub limits: CpuMem,
    pub containers: Vec<ContainerRestarts>,
}
