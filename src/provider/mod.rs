//! The hub: sources record typed observations here; the tick loop turns them into a [`Snapshot`].
//!
//! Sources only see these traits. They never name a metric or know which outputs run.

pub mod store;
pub mod window;

use std::time::{Duration, SystemTime};

use crate::model::{
    BackendWindow, ClusterInfo, ClusterState, NodeCapacity, ProbeOutcome, SinkPush, UsageSample,
};

pub use store::Store;

/// Cluster-wide facts: identity and role (workloads and node objects come with the watchers).
pub trait ClusterRecorder: Send + Sync {
    fn record_cluster_info(&self, info: ClusterInfo);
    /// The whole picture the Kubernetes watchers derived; replaces the previous one, so series
    /// of deleted nodes, pods and workloads leave the next snapshot.
    fn record_cluster_state(&self, state: ClusterState);
}

/// Per-node load and capacity.
pub trait NodeRecorder: Send + Sync {
    /// One usage sample from `source`. Non-finite or negative values are dropped and counted.
    fn record_node_usage(&self, source: &str, sample: UsageSample);
    /// Values a backend aggregated over a window for one node. Each replaces the value of the
    /// same name and operator; values not in this round keep their own (older) times, so a
    /// failed query loses only its own metric. One value per name and operator: a fetcher
    /// folds per-device series (e.g. the busiest disk) before recording.
    fn record_node_window(&self, source: &str, window: BackendWindow);
    fn record_node_capacity(&self, node: &str, capacity: NodeCapacity);
    /// The node is gone: its series leave the next snapshot.
    fn forget_node(&self, node: &str);
}

/// Per-pod task measurements and platform facts (node role).
pub trait TaskRecorder: Send + Sync {
    /// Every task on the node; replaces the previous set, so series of deleted pods leave the
    /// next snapshot.
    fn record_tasks(&self, tasks: crate::model::TaskSet);
    /// The node's platform facts; replaces the previous ones.
    fn record_platform(&self, platform: crate::model::Platform);
}

/// Probe outcomes.
pub trait ProbeRecorder: Send + Sync {
    fn record_probe_outcome(&self, outcome: ProbeOutcome);
}

/// How a source run ended.
#[derive(Debug, Clone, PartialEq)]
pub enum RunOutcome {
    /// It produced data.
    Ok,
    /// It worked but had nothing to report (kept apart from failure).
    NoData,
    /// It failed; `reason` is a low-cardinality label, `message` the full text.
    Failed { reason: String, message: String },
}

/// Self-telemetry of sources: every run's duration and outcome.
pub trait SourceRecorder: Send + Sync {
    /// Announce a source, so readiness waits for its first run.
    fn register_source(&self, source: &str);
    /// A run that ended at `finished_at` after `duration`.
    fn record_source_run(
        &self,
        source: &str,
        finished_at: SystemTime,
        duration: Duration,
        outcome: RunOutcome,
    );
}

/// Self-telemetry of the outputs that push.
pub trait SinkRecorder: Send + Sync {
    fn record_sink_push(&self, sink: &str, push: SinkPush);
    /// A tick came while the previous push was still running; it was skipped.
    fn record_sink_skipped(&self, sink: &str);
    /// Whether this replica holds the leader Lease `lease` (`namespace/name`), on each change.
    fn record_leadership(&self, lease: &str, leading: bool);
}

/// What sources are handed: one recorder per concern.
pub trait Provider: Send + Sync {
    fn cluster(&self) -> &dyn ClusterRecorder;
    fn node(&self) -> &dyn NodeRecorder;
    fn probe(&self) -> &dyn ProbeRecorder;
    fn source(&self) -> &dyn SourceRecorder;
    fn sink(&self) -> &dyn SinkRecorder;
    fn task(&self) -> &dyn TaskRecorder;
}
