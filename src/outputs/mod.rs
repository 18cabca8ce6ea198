//! Outputs. Each reads only a [`crate::model::Snapshot`]; none knows the sources.
//!
//! Pull outputs (`/metrics` in [`prometheus`], `/watcher` in [`watcher`]) render at tick time
//! into [`published::Published`], as [`body::Body`] pieces. Push outputs ([`otlp`], [`gcm`])
//! implement [`Sink`]: one push of one snapshot; the runner in [`push`] gives each its own
//! ticker, timeout and self-metrics. The vocabulary every output shares lives here too: the
//! metric families ([`families`]), their series ([`series`]) and which of them this instance emits
//! ([`select`]).
//!
//! May import: [`crate::shared`], [`crate::model`], [`crate::hub`] (the push runner records its
//! pushes). An output imports the shared vocabulary here, never another output, a source or
//! config; the two exceptions stand above the outputs they use: [`published`] renders the
//! pull outputs ([`prometheus`], [`watcher`]), and [`push`] reads [`published`].

pub mod body;
pub mod families;
pub mod gcm;
pub mod otlp;
pub mod prometheus;
pub mod published;
pub mod push;
pub mod select;
pub mod series;
pub mod watcher;

use std::future::Future;
use std::sync::Arc;

use crate::model::Snapshot;

/// What one push sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PushReport {
    pub points: u64,
    pub requests: u64,
}

/// A failed (or partly failed) push.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushError {
    /// Low-cardinality: `unavailable`, `invalid_argument`, `partial`, `timeout`, ...
    pub reason: String,
    pub message: String,
    /// What did get sent before or despite the failure.
    pub sent: PushReport,
}

/// Which series one push may carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushScope {
    /// Everything in the snapshot: the node role, a single cluster replica, or the holder of
    /// the leader Lease.
    All,
    /// Only this instance's own series ([`series::is_instance_level`]): a cluster replica that
    /// does not hold the Lease must not push cluster-level series, which the leader pushes.
    InstanceOnly,
}

/// What a push output needs from the wiring, beside its own config: who is pushing. Each
/// push output's `start::start` takes it.
pub struct PushStart<'a> {
    /// `cluster`, `node` or `host`: the node role writes its own node's series only.
    pub role: &'a str,
    pub node_name: &'a str,
    pub cluster_name: &'a str,
    /// The GCE project and location, when the metadata server gave them.
    pub project: Option<&'a str>,
    pub location: Option<&'a str>,
    /// This replica's name (OTLP's `service.instance.id`).
    pub instance_id: &'a str,
}

/// An output that pushes snapshots somewhere (OTLP, Cloud Monitoring).
pub trait Sink: Send + Sync + 'static {
    /// Stable name: a label value and a log field.
    fn name(&self) -> &'static str;
    fn push(
        &self,
        snapshot: Arc<Snapshot>,
        scope: PushScope,
    ) -> impl Future<Output = Result<PushReport, PushError>> + Send;

    /// How long until a push would carry the newest value of every series it last wrote
    /// (Cloud Monitoring's sampling period); zero for outputs that take any rate. The final
    /// push at shutdown waits this long when its deadline allows.
    fn ready_in(&self) -> std::time::Duration {
        std::time::Duration::ZERO
    }
}
