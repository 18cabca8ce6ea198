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

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

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

/// What one push has done so far, kept apart from the push's future so that the runner can
/// count the points lost when it cuts the push short (its deadline, a lost Lease): the points
/// the push is to carry (`planned`, known once the snapshot is turned into series, before the
/// first request), those the receiver accepted so far, and those lost for a reason the sink
/// knows better than the push's outcome (points rejected in an accepted request, series left
/// out for Cloud Monitoring's sampling period, requests of one push failing differently).
/// Whatever is planned and neither accepted nor lost here is lost for the push's failure
/// reason ([`crate::model::drop_reason`]).
#[derive(Debug, Default)]
pub struct PushProgress {
    planned: AtomicU64,
    accepted: AtomicU64,
    lost: Mutex<BTreeMap<&'static str, u64>>,
}

impl PushProgress {
    /// The push is to carry `points`.
    pub fn plan(&self, points: u64) {
        self.planned.store(points, Ordering::Relaxed);
    }
    /// The receiver accepted `points` more.
    pub fn accept(&self, points: u64) {
        self.accepted.fetch_add(points, Ordering::Relaxed);
    }
    /// `points` more are lost for `reason` (one of [`crate::model::DROP_REASONS`]).
    pub fn lose(&self, reason: &'static str, points: u64) {
        if points > 0 {
            let mut lost = self.lost.lock().unwrap_or_else(PoisonError::into_inner);
            *lost.entry(reason).or_default() += points;
        }
    }
    pub fn planned(&self) -> u64 {
        self.planned.load(Ordering::Relaxed)
    }
    pub fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }
    /// The points lost, by reason: those counted with [`PushProgress::lose`], and the rest of
    /// the planned ones not accepted for `failure` (the push's outcome; a success with points
    /// unaccounted for counts them as `refused`).
    pub fn dropped(&self, failure: Option<&str>) -> Vec<(&'static str, u64)> {
        let mut out: BTreeMap<&'static str, u64> = self
            .lost
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let known: u64 = out.values().sum();
        let rest = self
            .planned()
            .saturating_sub(self.accepted())
            .saturating_sub(known);
        if rest > 0 {
            let reason = crate::model::drop_reason(failure.unwrap_or("refused"));
            *out.entry(reason).or_default() += rest;
        }
        out.into_iter().filter(|(_, n)| *n > 0).collect()
    }
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

    /// [`Sink::push`], telling `progress` what it plans and what was accepted as it goes (the
    /// push runner calls this). The default knows only the outcome: what it reports as sent
    /// is what was planned and accepted.
    fn push_tracked<'a>(
        &'a self,
        snapshot: Arc<Snapshot>,
        scope: PushScope,
        progress: &'a PushProgress,
    ) -> impl Future<Output = Result<PushReport, PushError>> + Send + 'a {
        async move {
            let result = self.push(snapshot, scope).await;
            let points = match &result {
                Ok(r) => r.points,
                Err(e) => e.sent.points,
            };
            progress.plan(points);
            progress.accept(points);
            result
        }
    }

    /// How long until a push would carry the newest value of every series it last wrote
    /// (Cloud Monitoring's sampling period); zero for outputs that take any rate. The final
    /// push at shutdown waits this long when its deadline allows.
    fn ready_in(&self) -> std::time::Duration {
        std::time::Duration::ZERO
    }
}
