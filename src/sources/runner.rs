//! The one runner every source runs through, as node_exporter's `execute()` wraps every
//! collector:
//!
//! - [`record`] is the only place a run reaches the hub's source recorder: when it ended, how
//!   long it took, and its outcome (success, no data, or a failure with its reason). The
//!   periodic sources (usage backends, the task and platform collection, the kubelet's `/pods`)
//!   record each run; the watchers (nodes, pods, workloads, the StatefulSet of the shards)
//!   record each completed list and each failed watch.
//! - [`SourceRun`] is a source's running state: it registers the source (readiness waits for
//!   its first run), records every run, and logs the changes a reader at 3 a.m. needs: the
//!   first failure and every change of reason at WARN (`source run failed; keeping the last
//!   good data`), the same failure again at DEBUG, the recovery at INFO.
//! - [`Pace`] paces the periodic sources and the probes: a run now, then one every interval (a
//!   run longer than the interval delays the next one, never doubles it), until cancelled;
//!   [`until_cancelled`] cuts a run short at shutdown.
//!
//! The watchers' retries are paced by their own back-off (`k8s::backoff`, client-go's), which
//! they apply before they record the failure here.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio_util::sync::CancellationToken;

use crate::hub::{Provider, RunOutcome};

/// Records one run of `source` that ended now, after `took`.
pub fn record(provider: &dyn Provider, source: &str, took: Duration, outcome: RunOutcome) {
    provider
        .source()
        .record_source_run(source, SystemTime::now(), took, outcome);
}

/// A source's running state: where its runs are recorded and whether it is failing.
pub struct SourceRun {
    name: &'static str,
    provider: Arc<dyn Provider>,
    /// The reason of the failure last logged at WARN while the source keeps failing.
    failing: Option<String>,
}

impl SourceRun {
    /// Registers `name` with the hub: until its first run, readiness waits for it.
    pub fn register(name: &'static str, provider: Arc<dyn Provider>) -> SourceRun {
        provider.source().register_source(name);
        SourceRun {
            name,
            provider,
            failing: None,
        }
    }

    /// The source's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Records one run that ended now after `took`, and logs what changed.
    pub fn record(&mut self, took: Duration, outcome: RunOutcome) {
        self.log(&outcome);
        record(self.provider.as_ref(), self.name, took, outcome);
    }

    /// The log line of `outcome`, given the runs before it.
    fn log(&mut self, outcome: &RunOutcome) {
        let source = self.name;
        match outcome {
            RunOutcome::Failed { reason, message } => {
                if self.failing.as_deref() == Some(reason.as_str()) {
                    tracing::debug!(source, reason, error = %message, "source run failed again");
                } else {
                    tracing::warn!(source, reason, error = %message, "source run failed; keeping the last good data");
                    self.failing = Some(reason.clone());
                }
            }
            RunOutcome::Ok | RunOutcome::NoData => {
                if self.failing.take().is_some() {
                    tracing::info!(source, "source recovered");
                }
                if *outcome == RunOutcome::NoData {
                    tracing::debug!(source, "source had no data");
                }
            }
        }
    }

    /// Whether the last run failed.
    #[cfg(test)]
    fn is_failing(&self) -> bool {
        self.failing.is_some()
    }
}

/// The pace of a periodic source: a run now, then one every interval. A run that takes longer
/// than the interval delays the next one; missed runs are not made up.
pub struct Pace {
    ticker: tokio::time::Interval,
}

impl Pace {
    /// The first run is due at once.
    pub fn every(interval: Duration) -> Pace {
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Pace { ticker }
    }

    /// Waits until the next run is due: true then, false if `cancel` fired first (or had).
    pub async fn next(&mut self, cancel: &CancellationToken) -> bool {
        tokio::select! {
            biased;
            _ = cancel.cancelled() => false,
            _ = self.ticker.tick() => true,
        }
    }
}

/// `run`'s output, or `None` when `cancel` fires first (a run is cut short at shutdown); a
/// token already cancelled wins over a run that is ready at once.
pub async fn until_cancelled<T>(
    cancel: &CancellationToken,
    run: impl Future<Output = T>,
) -> Option<T> {
    tokio::select! {
        biased;
        _ = cancel.cancelled() => None,
        out = run => Some(out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hub::Store;

    fn failed(reason: &str) -> RunOutcome {
        RunOutcome::Failed {
            reason: reason.into(),
            message: format!("{reason} happened"),
        }
    }

    #[test]
    fn a_source_run_records_every_run_with_its_duration_and_reason() {
        let store = Arc::new(Store::new());
        let mut run = SourceRun::register("s", store.clone());
        let snap = store.snapshot(SystemTime::now());
        let s = snap.sources.get("s").expect("registered");
        assert_eq!(s.runs, 0, "registered, not run");
        run.record(Duration::from_millis(7), RunOutcome::Ok);
        run.record(Duration::from_millis(9), failed("http"));
        assert!(run.is_failing());
        run.record(Duration::from_millis(3), failed("http"));
        run.record(Duration::from_millis(4), failed("timeout"));
        run.record(Duration::from_millis(5), RunOutcome::NoData);
        assert!(!run.is_failing());
        let snap = store.snapshot(SystemTime::now());
        let s = snap.sources.get("s").expect("recorded");
        assert_eq!(s.runs, 5);
        assert_eq!(s.no_data, 1);
        assert_eq!(s.errors.get("http"), Some(&2));
        assert_eq!(s.errors.get("timeout"), Some(&1));
        assert_eq!(s.last_duration, Duration::from_millis(5));
        assert!(s.up, "the last run had no data, which is no failure");
    }

    #[tokio::test(start_paused = true)]
    async fn a_pace_is_due_at_once_then_each_interval_and_a_slow_run_delays_the_next() {
        let cancel = CancellationToken::new();
        let start = tokio::time::Instant::now();
        let mut pace = Pace::every(Duration::from_secs(10));
        let mut due = Vec::new();
        for n in 0..4 {
            assert!(pace.next(&cancel).await);
            due.push(start.elapsed().as_secs());
            if n == 1 {
                tokio::time::sleep(Duration::from_secs(25)).await; // a slow run
            }
        }
        // 0 and 10 on time; the slow run ends at 35, so the next is due then (not twice), and
        // the one after it an interval later.
        assert_eq!(due, [0, 10, 35, 45]);
        cancel.cancel();
        assert!(!pace.next(&cancel).await, "cancelled: no more runs");
    }

    #[tokio::test(start_paused = true)]
    async fn cancelling_during_a_run_ends_it() {
        let cancel = CancellationToken::new();
        let c = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(5)).await;
            c.cancel();
        });
        let start = tokio::time::Instant::now();
        let out = until_cancelled(&cancel, tokio::time::sleep(Duration::from_secs(3600))).await;
        assert_eq!(out, None);
        assert_eq!(start.elapsed().as_secs(), 5, "cut short at the cancel");
        assert_eq!(
            until_cancelled(&cancel, async { 7 }).await,
            None,
            "already cancelled"
        );
        let fresh = CancellationToken::new();
        assert_eq!(until_cancelled(&fresh, async { 7 }).await, Some(7));
    }
}
