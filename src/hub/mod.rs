//! The hub: sources record typed observations here; the tick loop turns them into a [`Snapshot`](crate::model::Snapshot).
//!
//! Sources only see these traits. They never name a metric or know which outputs run.
//!
//! May import: [`crate::shared`] and [`crate::model`] only.

pub mod store;
pub mod validate;
pub mod window;

use std::time::{Duration, SystemTime};

use crate::model::{
    BackendWindow, ClusterInfo, ClusterState, NodeCapacity, ProbeOutcome, SinkPush, UsageSample,
};

pub use store::Store;
pub use validate::DropReason;

/// Cluster-wide facts: identity and role (workloads and node objects come with the watchers).
pub trait ClusterRecorder: Send + Sync {
    fn record_cluster_info(&self, info: ClusterInfo);
    /// The whole picture the Kubernetes watchers derived; replaces the previous one, so series
    /// of deleted nodes, pods and workloads leave the next snapshot.
    fn record_cluster_state(&self, state: ClusterState);
    /// This instance's shard of the cluster role (`None`: unsharded); outputs emit only its
    /// share from the next snapshot on. A StatefulSet watcher calls it on each replica change.
    fn record_shard(&self, shard: Option<crate::model::Shard>) {
        let _ = shard;
    }
}

/// Per-node load and capacity.
pub trait NodeRecorder: Send + Sync {
    /// One usage sample from `source`. Values that fail [`validate`] (non-finite, negative,
    /// a utilization above 100 % beyond the tolerance) are dropped one by one and counted.
    fn record_node_usage(&self, source: &str, sample: UsageSample);
    /// Values a backend aggregated over a window for one node. Each replaces the value of the
    /// same name and operator; values not in this round keep their own (older) times, so a
    /// failed query loses only its own metric. One value per name and operator: a fetcher
    /// folds per-device series (e.g. the busiest disk) before recording.
    fn record_node_window(&self, source: &str, window: BackendWindow);
    /// The cores and bytes the node's usage was divided by. Recorded for nodes that have
    /// usage only; an impossible capacity (see [`validate`]) is dropped and counted under the
    /// node's source, and the node then shows no capacity.
    fn record_node_capacity(&self, node: &str, capacity: NodeCapacity);
    /// The node is gone: its series leave the next snapshot.
    fn forget_node(&self, node: &str);
    /// A value `source` got for `node` that it could not even turn into a number (an
    /// unparsable quantity, a missing capacity): counted and logged like every dropped value.
    fn record_dropped(&self, source: &str, node: &str, what: &str, reason: DropReason);
    /// A fetch of `source` ended. After a successful one, every node of `source` that got no
    /// valid value in it has missed one more fetch; a node that missed `expire_after` in a
    /// row leaves the hub (0: never), and the expiry is counted. A failed fetch expires
    /// nothing and resets nothing.
    fn record_fetch_end(&self, source: &str, successful: bool, expire_after: u32);
    /// A pod bound to a node that may not show in the node's samples yet (see
    /// [`Binding`](crate::model::Binding)); replaces the binding of the same pod. The hub
    /// keeps it until a sample of the node is taken at or after `shows_from`.
    fn record_binding(&self, binding: crate::model::Binding) {
        let _ = binding;
    }
    /// Pod `pod` (`namespace/name`) is deleted, finished or no longer bound: its binding goes.
    fn forget_binding(&self, pod: &str) {
        let _ = pod;
    }
    /// The node's pressure stall totals (the host usage source); replaces the previous ones.
    fn record_node_pressure(&self, pressure: crate::model::NodePressure) {
        let _ = pressure;
    }
}

/// Per-pod task measurements and platform facts (node role).
pub trait TaskRecorder: Send + Sync {
    /// Every task on the node; replaces the previous set, so series of deleted pods leave the
    /// next snapshot.
    fn record_tasks(&self, tasks: crate::model::TaskSet);
    /// The node's platform facts; replaces the previous ones.
    fn record_platform(&self, platform: crate::model::Platform);
    /// Per-pod perf counters (`--task-perf-events`); replaces the previous set.
    fn record_task_perf(&self, perf: crate::model::TaskPerfSet) {
        let _ = perf;
    }
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
    /// Announce a watcher of the Kubernetes `resource` (`nodes`, `pods`, ...): readiness waits
    /// for its first successful list, not just any run.
    fn register_watch(&self, source: &str, resource: &str) {
        let _ = resource;
        self.register_source(source);
    }
    /// A watcher opened a new WATCH without relisting, because the previous one ended for
    /// `reason` (`closed`: the server ended the stream; `error`: it failed or could not start).
    fn record_watch_restart(&self, source: &str, reason: &str) {
        let _ = (source, reason);
    }
    /// A watcher listed again after its first list, for `reason` (`expired`: 410 Gone;
    /// `list_failed`: the previous list failed; `no_resource_version`).
    fn record_relist(&self, source: &str, reason: &str) {
        let _ = (source, reason);
    }
    /// A backend's self-check: how its series met the cluster's nodes (replaces the previous).
    fn record_usage_match(&self, source: &str, m: crate::model::UsageMatch) {
        let _ = (source, m);
    }
}

/// Self-telemetry of the outputs that push.
pub trait SinkRecorder: Send + Sync {
    fn record_sink_push(&self, sink: &str, push: SinkPush);
    /// A tick came while the previous push was still running; it was skipped, and its
    /// `points` (those of the push in flight) with it.
    fn record_sink_skipped(&self, sink: &str, points: u64);
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
