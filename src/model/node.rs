//! Node usage as sources observe it.

use std::time::{Duration, SystemTime};

/// A quantity of node load. Each has one fixed base unit; nothing is stored as a percentage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Resource {
    /// Busy fraction of all CPUs, 0..=1.
    Cpu,
    /// Used fraction of memory (1 - available/total), 0..=1.
    Memory,
    /// Bytes received per second, all interfaces but loopback.
    NetworkReceive,
    /// Bytes transmitted per second, all interfaces but loopback.
    NetworkTransmit,
    /// Busy fraction (I/O time per second) of the busiest whole disk, 0..=1.
    DiskIo,
}

impl Resource {
    pub const ALL: [Resource; 5] = [
        Resource::Cpu,
        Resource::Memory,
        Resource::NetworkReceive,
        Resource::NetworkTransmit,
        Resource::DiskIo,
    ];

    /// Stable lower-case name, used in logs and labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Resource::Cpu => "cpu",
            Resource::Memory => "memory",
            Resource::NetworkReceive => "network_receive",
            Resource::NetworkTransmit => "network_transmit",
            Resource::DiskIo => "disk_io",
        }
    }
}

/// One observation of one node's load at one instant. A source may know only some resources.
#[derive(Debug, Clone, PartialEq)]
pub struct UsageSample {
    pub node: String,
    /// The time the values stand for (the end of the measured interval for rates).
    pub at: SystemTime,
    pub values: Vec<(Resource, f64)>,
}

/// What a node has to give: total CPU cores and memory bytes.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct NodeCapacity {
    pub cpu_cores: f64,
    pub memory_bytes: f64,
}

/// The pressure stall totals of one whole node (`/proc/pressure/{cpu,memory,io}`), read by
/// the host usage source: the node and host roles.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct NodePressure {
    pub node: String,
    /// In the order cpu, memory, io; `some` before `full`; only the totals the kernel offers.
    pub totals: Vec<super::task::Pressure>,
}

/// load-watcher's metric types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MetricType {
    Cpu,
    Memory,
    Bandwidth,
    Storage,
    Energy,
}

impl MetricType {
    /// load-watcher's spelling.
    pub fn as_wire(self) -> &'static str {
        match self {
            MetricType::Cpu => "CPU",
            MetricType::Memory => "Memory",
            MetricType::Bandwidth => "Bandwidth",
            MetricType::Storage => "Storage",
            MetricType::Energy => "Energy",
        }
    }

    /// CPU and Memory are ratios (0-1) in the hub and percentages on `/watcher`; the other
    /// types keep their own units (bytes/s, seconds/s, joules, microwatts).
    pub fn is_ratio(self) -> bool {
        matches!(self, MetricType::Cpu | MetricType::Memory)
    }
}

/// How a backend aggregated a value over its window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Operator {
    Avg,
    Std,
}

impl Operator {
    pub fn as_wire(self) -> &'static str {
        match self {
            Operator::Avg => "AVG",
            Operator::Std => "STD",
        }
    }
}

/// One value a backend aggregated over a window itself (Prometheus `avg_over_time`, the mean of
/// SignalFx's points), in base units: CPU and Memory as ratios.
#[derive(Debug, Clone, PartialEq)]
pub struct BackendValue {
    /// The backend's metric name (e.g. `instance:node_cpu:ratio`).
    pub name: String,
    pub kind: MetricType,
    /// The hub's quantity this is, when it is one (it then shares that quantity's family on
    /// `/metrics`); `None` for drops, energy and other backend-only series.
    pub resource: Option<Resource>,
    pub operator: Operator,
    pub value: f64,
}

/// Everything one backend query round gave for one node and one window.
#[derive(Debug, Clone, PartialEq)]
pub struct BackendWindow {
    pub node: String,
    pub window: Window,
    /// The interval the values stand for.
    pub start: std::time::SystemTime,
    pub end: std::time::SystemTime,
    pub values: Vec<BackendValue>,
}

/// An aggregation window, as load-watcher names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Window {
    FiveMinutes,
    TenMinutes,
    FifteenMinutes,
}

impl Window {
    pub const ALL: [Window; 3] = [
        Window::FifteenMinutes,
        Window::TenMinutes,
        Window::FiveMinutes,
    ];

    pub fn duration(self) -> Duration {
        match self {
            Window::FiveMinutes => Duration::from_secs(5 * 60),
            Window::TenMinutes => Duration::from_secs(10 * 60),
            Window::FifteenMinutes => Duration::from_secs(15 * 60),
        }
    }

    /// load-watcher's spelling: `15m`, `10m`, `5m`.
    pub fn as_str(self) -> &'static str {
        match self {
            Window::FiveMinutes => "5m",
            Window::TenMinutes => "10m",
            Window::FifteenMinutes => "15m",
        }
    }
}

/// A pod bound to a node whose use may not be in that node's usage samples yet: bound after
/// the node's newest sample, or still ramping up. The hub sums the bindings of each node that
/// its newest sample cannot show yet into the node's [`BoundPods`](crate::model::BoundPods).
#[derive(Debug, Clone, PartialEq)]
pub struct Binding {
    /// `namespace/name`.
    pub pod: std::sync::Arc<str>,
    pub node: std::sync::Arc<str>,
    /// When the pod was bound: its `PodScheduled` condition turned True (else when it was
    /// first seen bound).
    pub bound_at: SystemTime,
    /// From this time on the pod's use shows in the node's samples: its `Ready` condition's
    /// time plus the ramp-up, or, for a pod not ready yet, its binding plus the longest wait.
    /// A sample taken at or after it shows the pod; one taken before does not.
    pub shows_from: SystemTime,
    /// The estimator's guess of its use: CPU cores and memory bytes.
    pub cpu_cores: f64,
    pub memory_bytes: f64,
}

/// How a backend's series met the cluster's nodes in one fetch (the Prometheus backend's
/// self-check): the cluster's nodes that got no usage, and the series whose node label named
/// no node of the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UsageMatch {
    pub nodes_without_usage: u64,
    pub series_without_node: u64,
}
