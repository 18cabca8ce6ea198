//! Plain data shared by sources, the hub and outputs. No I/O, nothing imported from the rest of the crate.
//!
//! May import: [`crate::shared`] only (today: nothing).

pub mod cluster;
pub mod node;
pub mod perf;
pub mod probe;
pub mod resource_map;
pub mod select;
pub mod sink;
pub mod snapshot;
pub mod task;

pub use cluster::{
    Addon, AddonExpected, AddonOnNode, ClusterState, ContainerRestarts, Controller, CpuMem,
    NodeFacts, NodePods, Owner, Placement, PodFacts, PodRestarts,
};
pub use node::{
    BackendValue, BackendWindow, Binding, MetricType, NodeCapacity, NodePressure, Operator,
    Resource, UsageMatch, UsageSample, Window,
};
pub use perf::{PerfCounts, PerfEventSet, PerfMode, TaskPerfSample, TaskPerfSet};
pub use probe::{PROBE_BUCKETS, ProbeOutcome};
pub use resource_map::ResourceMap;
pub use select::{Selection, Shard};
pub use sink::{DROP_REASONS, Leadership, SinkPush, SinkStatus, TICK_SKIPPED, drop_reason};
pub use snapshot::{
    BackendStat, BoundMap, BoundPod, BoundPods, ClusterInfo, NodeLoad, NodeMap, ProbeState,
    Snapshot, SourceStatus, Stat, WindowStats, unix_seconds,
};
pub use task::{
    CgroupStats, ContainerSample, NumaMemory, Platform, Pressure, TaskContainer, TaskPod,
    TaskSample, TaskSet,
};
