//! Per-pod task data (the node role's cgroup measurements, Intel WCA's "tasks") and the node's
//! platform facts. Plain data: sources fill it, the hub stores it, outputs render it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;

/// One container of a task pod, as the pod's status names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskContainer {
    pub name: String,
    /// The runtime's id without its scheme (`containerd://abc` -> `abc`); `None` before start.
    pub id: Option<String>,
    pub ready: bool,
}

/// What the pod watcher knows of one pod on this node: who it is, how to find its cgroup,
/// its labels (the allowlisted ones, keys already valid label names) and its resources.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskPod {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    /// `guaranteed`, `burstable`, `besteffort` (WCA's spelling), or `unknown`.
    pub qos: String,
    /// Ids the pod's cgroup may carry: the UID, and for a mirror pod the static pod's hash
    /// (the `kubernetes.io/config.mirror` annotation), which is what the kubelet names it by.
    pub cgroup_ids: Vec<String>,
    /// Allowlisted pod labels: (sanitised key, value), sorted by key.
    pub labels: Vec<(&'static str, String)>,
    pub containers: Vec<TaskContainer>,
    /// Effective requests per resource name (`cpu` in cores, `memory` and storage in bytes,
    /// other resources in their own count).
    pub requests: BTreeMap<String, f64>,
    pub limits: BTreeMap<String, f64>,
}

impl TaskPod {
    /// `namespace/name`: WCA's `task_name`.
    pub fn task_name(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// True when the pod has containers and every one is ready (WCA's only kind of task).
    pub fn ready(&self) -> bool {
        !self.containers.is_empty() && self.containers.iter().all(|c| c.ready)
    }
}

/// A pressure stall total of cgroup v2 (`cpu.pressure`, `memory.pressure`, `io.pressure`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pressure {
    /// `cpu`, `memory` or `io`.
    pub resource: &'static str,
    /// `some` or `full`.
    pub kind: &'static str,
    /// The `total=` field, in seconds.
    pub seconds: f64,
}

/// Values read from one cgroup. `None` is "this kernel or hierarchy does not offer it", never 0.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CgroupStats {
    pub cpu_seconds: Option<f64>,
    pub cpu_periods: Option<u64>,
    pub cpu_throttled_periods: Option<u64>,
    pub cpu_throttled_seconds: Option<f64>,
    pub memory_usage_bytes: Option<f64>,
    /// Usage minus inactive file, floored at 0 (as the kubelet computes it).
    pub memory_working_set_bytes: Option<f64>,
    pub memory_rss_bytes: Option<f64>,
    pub memory_cache_bytes: Option<f64>,
    /// `None` also when the cgroup has no limit.
    pub memory_limit_bytes: Option<f64>,
    pub page_faults: Option<u64>,
    pub major_page_faults: Option<u64>,
    pub oom_kills: Option<u64>,
    pub pressure: Vec<Pressure>,
    /// Bytes per NUMA node (node id, bytes), where `memory.numa_stat` exists.
    pub numa_bytes: Vec<(u32, f64)>,
    /// CPUs in the effective cpuset (v1 `cpuset.effective_cpus`, v2 `cpuset.cpus.effective`).
    pub cpuset_cpus: Option<u32>,
    /// Memory nodes in the effective cpuset (`cpuset.effective_mems`, `cpuset.mems.effective`).
    pub cpuset_memory_nodes: Option<u32>,
}

impl CgroupStats {
    /// True when nothing at all was read.
    pub fn is_empty(&self) -> bool {
        *self == CgroupStats::default()
    }
}

/// One container's measurements.
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerSample {
    pub name: String,
    pub stats: CgroupStats,
}

/// One task at one collection: the pod, its pod cgroup's values (pause and overhead included)
/// and its containers'.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskSample {
    pub pod: Arc<TaskPod>,
    /// `None` while the pod has no cgroup yet (or it is gone); the pod's other series stay.
    pub stats: Option<CgroupStats>,
    pub containers: Vec<ContainerSample>,
}

/// Every task on the node at one collection. Replaces the previous set, so series of deleted
/// pods leave the next snapshot.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TaskSet {
    pub node: String,
    pub tasks: Vec<TaskSample>,
    pub collected_at: Option<SystemTime>,
}

/// Memory of one NUMA node.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NumaMemory {
    pub node: u32,
    pub total_bytes: f64,
    pub free_bytes: f64,
}

/// The node's platform facts (WCA's `platform_*`), from sysfs and procfs.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Platform {
    pub node: String,
    pub sockets: Option<u32>,
    pub cores: Option<u32>,
    pub cpus: Option<u32>,
    pub numa_nodes: Option<u32>,
    pub numa_memory: Vec<NumaMemory>,
    /// Busy CPU seconds per logical CPU (user+nice+system+irq+softirq+steal), a counter.
    pub cpu_busy_seconds: Vec<(u32, f64)>,
    /// Memory used, MemTotal - MemAvailable (`procfs::MemInfo::used_bytes`, the figure the
    /// host usage source's memory utilization divides by MemTotal; WCA's
    /// `platform_mem_usage_bytes` was MemTotal - MemFree - Buffers - Cached).
    pub memory_usage_bytes: Option<f64>,
    /// A documented `/proc/vmstat` set: (key, counter value).
    pub vmstat: Vec<(&'static str, f64)>,
}
