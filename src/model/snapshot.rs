//! The immutable picture every output reads. Made by the hub on every tick.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::node::{BackendValue, NodeCapacity, Window};
use super::resource_map::ResourceMap;

/// Mean and population standard deviation of the samples in a window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stat {
    pub avg: f64,
    pub std: f64,
    /// At least one: a window without samples has no `Stat` (and `Option<Stat>` then costs
    /// no tag: one node's stats are held per window and resource, 65,000 nodes at once).
    pub samples: std::num::NonZeroU32,
}

/// A backend-aggregated value with the interval it stands for (values of one window can come
/// from different query rounds when some queries failed: each keeps its own true times).
#[derive(Debug, Clone, PartialEq)]
pub struct BackendStat {
    pub value: BackendValue,
    pub start: SystemTime,
    pub end: SystemTime,
}

/// One node's statistics over one window. `end` is the oldest time any of them stands for:
/// the newest ring sample, or the end of the oldest backend query round still served.
#[derive(Debug, Clone, PartialEq)]
pub struct WindowStats {
    pub window: Window,
    pub start: SystemTime,
    pub end: SystemTime,
    /// Computed by the hub from the samples in its rings.
    pub stats: ResourceMap<Stat>,
    /// Aggregated by the backend (Prometheus, SignalFx), in the order they were recorded.
    pub backend: Vec<BackendStat>,
    /// The share of the window (0-1) the hub's samples in it cover (0 for a window the
    /// backend aggregated itself, whose samples the hub does not see).
    pub coverage: f32,
    /// p50, p90, p95 and p99 of CPU and memory over the window, present only when `coverage`
    /// is at least one half. Held to seven digits (`f32`): 48 bytes a window instead of 88,
    /// at 65,000 nodes and two snapshots alive about 15 MiB less.
    pub quantiles: ResourceMap<[f32; 4]>,
}

/// The estimated use of the pods bound to a node that its newest sample cannot show yet
/// (bound since, or still ramping up): what the hub summed from the node's
/// [`Binding`](crate::model::Binding)s.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BoundPods {
    /// Each pod counted: when it was bound, and its estimated CPU cores and memory bytes.
    pub pods: Vec<BoundPod>,
}

/// One pod of [`BoundPods`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BoundPod {
    pub bound_at: SystemTime,
    pub cpu_cores: f64,
    pub memory_bytes: f64,
}

impl BoundPods {
    /// CPU cores and memory bytes of the pods bound before `before` (all: `None`).
    pub fn sum(&self, before: Option<SystemTime>) -> (f64, f64) {
        self.pods
            .iter()
            .filter(|p| before.is_none_or(|b| p.bound_at < b))
            .fold((0.0, 0.0), |(c, m), p| {
                (c + p.cpu_cores, m + p.memory_bytes)
            })
    }
}

/// Everything known about one node's load.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeLoad {
    /// The node's name, shared with the hub's key and the node map's (no copy per snapshot).
    pub node: Arc<str>,
    /// The source that recorded it (e.g. `host`), shared by every node of that source.
    pub source: Arc<str>,
    /// Time of the newest sample.
    pub latest_at: SystemTime,
    /// The newest value per resource.
    pub latest: ResourceMap<f64>,
    /// One entry per window that holds at least one sample, longest first.
    pub windows: Arc<[WindowStats]>,
    pub capacity: Option<NodeCapacity>,
    /// The largest CPU and memory sample of the last hour, present only when samples cover at
    /// least half of the hour's five-minute slots.
    pub hour_max: ResourceMap<f32>,
    /// The share of the hour's five-minute slots (0-1) that hold a sample.
    pub hour_coverage: f32,
}

/// Health and counters of one source (fetcher or probe loop).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SourceStatus {
    pub name: String,
    pub runs: u64,
    /// Failed runs by low-cardinality reason.
    pub errors: BTreeMap<String, u64>,
    /// Runs that succeeded but had nothing to report.
    pub no_data: u64,
    /// Values rejected (non-finite, out of range) by reason.
    pub dropped: BTreeMap<String, u64>,
    /// Nodes that left the hub because this source stopped reporting them.
    pub expired: u64,
    /// The backend's self-check of its latest fetch (Prometheus in the cluster role).
    pub usage_match: Option<crate::model::UsageMatch>,
    pub last_duration: Duration,
    pub last_success: Option<SystemTime>,
    /// Whether the newest run succeeded.
    pub up: bool,
    pub last_error: Option<String>,
    /// The Kubernetes resource a watcher follows (`nodes`, `pods`, ...); `None` for others.
    pub resource: Option<String>,
    /// Readiness waits for a successful run of this source (the watchers), not just any run.
    pub needs_success: bool,
    /// New WATCH requests without a relist, by why the previous watch ended.
    pub watch_restarts: BTreeMap<String, u64>,
    /// Lists after the first, by reason.
    pub relists: BTreeMap<String, u64>,
}

impl SourceStatus {
    /// Whether readiness may stop waiting for this source: a watcher once it has listed
    /// successfully, any other source once it has run at all (a failed run shows on
    /// `/watcher/health` and the self-metrics instead of taking the pod out of its Service).
    pub fn synced(&self) -> bool {
        if self.needs_success {
            self.last_success.is_some()
        } else {
            self.runs > 0
        }
    }
}

/// Latest outcome of one probe against one target, plus counters.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeState {
    pub probe: String,
    pub target: String,
    pub at: SystemTime,
    pub duration: Duration,
    pub failure: Option<String>,
    pub runs: u64,
    /// Failed runs by reason.
    pub failures: BTreeMap<String, u64>,
    /// Cumulative counts per bound of [`super::probe::PROBE_BUCKETS`].
    pub buckets: Vec<u64>,
    /// Sum of all durations, seconds.
    pub duration_sum: f64,
}

/// Who and where we are.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ClusterInfo {
    pub cluster_name: String,
    pub role: String,
    /// GCE project, or empty.
    pub project: String,
    /// Cluster region or zone, or empty.
    pub location: String,
}

/// Every node's load by node name. Keys are shared (`Arc<str>`): the hub keeps the map between
/// ticks and patches only the nodes that changed.
pub type NodeMap = BTreeMap<std::sync::Arc<str>, std::sync::Arc<NodeLoad>>;

/// The estimate of just-bound pods by node name: only the nodes of the [`NodeMap`] that have
/// one. Apart from the node map because it changes with every pod bound, far more often than
/// the loads: a binding patches this small map, and the node map (with everything made of
/// it) stays the same `Arc`.
pub type BoundMap = BTreeMap<std::sync::Arc<str>, std::sync::Arc<BoundPods>>;

/// The immutable state at one tick.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    pub generated_at: SystemTime,
    /// Ticks made so far, this one included.
    pub tick: u64,
    /// How long the previous tick took (snapshot plus rendering).
    pub last_tick_duration: Duration,
    /// Tasks alive in the async runtime when the previous tick ended (0 before it).
    pub alive_tasks: u64,
    /// True once every registered source is [`SourceStatus::synced`].
    pub sources_synced: bool,
    pub cluster: ClusterInfo,
    /// What the Kubernetes watchers derived (cluster and node roles); shared, not copied.
    pub cluster_state: Option<std::sync::Arc<super::cluster::ClusterState>>,
    /// Shared with the hub: a node whose load did not change keeps the same `Arc` from one
    /// snapshot to the next, and when no node changed the whole map is the same `Arc`, so
    /// outputs can reuse what they made of it (per node, or all at once).
    pub nodes: std::sync::Arc<NodeMap>,
    /// The estimates of the nodes' just-bound pods; the same `Arc` while no estimate changed.
    pub bound: std::sync::Arc<BoundMap>,
    pub sources: BTreeMap<String, SourceStatus>,
    pub probes: Vec<ProbeState>,
    pub sinks: BTreeMap<String, super::sink::SinkStatus>,
    /// `None` without leader election.
    pub leadership: Option<super::sink::Leadership>,
    /// Per-pod task measurements (node role); shared, not copied.
    pub tasks: Option<std::sync::Arc<super::task::TaskSet>>,
    /// The node's platform facts (node role).
    pub platform: Option<std::sync::Arc<super::task::Platform>>,
    /// The node's pressure stall totals (host usage source: node and host roles).
    pub pressure: Option<std::sync::Arc<super::node::NodePressure>>,
    /// Per-pod perf counters (node role, `--task-perf-events`).
    pub task_perf: Option<std::sync::Arc<super::perf::TaskPerfSet>>,
    /// This instance's shard and the families left out (see `crate::outputs::select`).
    pub selection: std::sync::Arc<super::select::Selection>,
}

impl Snapshot {
    /// An empty snapshot, for before the first tick.
    pub fn empty(at: SystemTime) -> Self {
        Snapshot {
            generated_at: at,
            tick: 0,
            last_tick_duration: Duration::ZERO,
            alive_tasks: 0,
            sources_synced: false,
            cluster: ClusterInfo::default(),
            cluster_state: None,
            nodes: Default::default(),
            bound: Default::default(),
            sources: BTreeMap::new(),
            probes: Vec::new(),
            sinks: BTreeMap::new(),
            leadership: None,
            tasks: None,
            platform: None,
            pressure: None,
            task_perf: None,
            selection: Default::default(),
        }
    }
}

/// Seconds since the Unix epoch as f64 (0 for times before it).
pub fn unix_seconds(t: SystemTime) -> f64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}
