//! Node usage fetchers and the loop that runs them.
//!
//! A fetcher only reads and parses; [`run`] times each run out, records the samples, and
//! records the run's duration and outcome, so a failing fetcher never stops an output and
//! the last good data stays in the hub with its true timestamps.

pub mod host;
pub mod http;
pub mod metrics_server;
pub mod procfs;
pub mod prometheus;
pub mod signalfx;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio_util::sync::CancellationToken;

use crate::error::Error;
use crate::model::{BackendWindow, NodeCapacity, UsageSample};
use crate::provider::{Provider, RunOutcome};

/// What one fetch produced. `errors` holds the parts that failed; what did work is still kept.
#[derive(Debug, Default)]
pub struct Fetched {
    pub samples: Vec<UsageSample>,
    /// Values the backend aggregated over windows itself.
    pub windows: Vec<BackendWindow>,
    pub capacities: Vec<(String, NodeCapacity)>,
    pub errors: Vec<Error>,
}

/// A source of node usage.
pub trait UsageFetcher: Send + 'static {
    /// Stable source name (`host`, `metrics_server`, ...): a label value and a log field.
    fn name(&self) -> &'static str;
    /// One fetch. Partial failure goes into [`Fetched::errors`].
    fn fetch(&mut self) -> impl Future<Output = Fetched> + Send;
}

/// Schedule of a fetch loop.
#[derive(Debug, Clone, Copy)]
pub struct Schedule {
    pub interval: Duration,
    pub timeout: Duration,
}

/// Runs one fetch with the timeout and records everything it produced into `provider`.
pub async fn run_once<F: UsageFetcher>(
    fetcher: &mut F,
    provider: &dyn Provider,
    timeout: Duration,
) -> RunOutcome {
    let name = fetcher.name();
    let started = Instant::now();
    let fetched = match tokio::time::timeout(timeout, fetcher.fetch()).await {
        Ok(f) => f,
        Err(_) => Fetched {
            errors: vec![Error::Timeout {
                what: format!("source {name}"),
                after: timeout,
            }],
            ..Fetched::default()
        },
    };
    let took = started.elapsed();
    let had_samples = !fetched.samples.is_empty() || !fetched.windows.is_empty();
    for sample in fetched.samples {
        provider.node().record_node_usage(name, sample);
    }
    for window in fetched.windows {
        provider.node().record_node_window(name, window);
    }
    for (node, cap) in fetched.capacities {
        provider.node().record_node_capacity(&node, cap);
    }
    let outcome = match fetched.errors.first() {
        Some(first) => RunOutcome::Failed {
            reason: first.metric_label().to_string(),
            message: summarize(&fetched.errors),
        },
        None if had_samples => RunOutcome::Ok,
        None => RunOutcome::NoData,
    };
    provider
        .source()
        .record_source_run(name, SystemTime::now(), took, outcome.clone());
    outcome
}

/// The first few errors of a run, then how many more: a backend that is down fails every
/// query the same way, and one line should still fit a log viewer.
fn summarize(errors: &[Error]) -> String {
    const SHOWN: usize = 3;
    let mut s = errors
        .iter()
        .take(SHOWN)
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ");
    if errors.len() > SHOWN {
        s.push_str(&format!(" (+{} more)", errors.len() - SHOWN));
    }
    s
}

/// Fetches now and then every `schedule.interval` until `cancel` fires.
pub async fn run<F: UsageFetcher>(
    mut fetcher: F,
    provider: Arc<dyn Provider>,
    schedule: Schedule,
    cancel: CancellationToken,
) {
    let name = fetcher.name();
    provider.source().register_source(name);
    let mut ticker = tokio::time::interval(schedule.interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut was_failing = false;
    loop {
        tokio::select! {
            _ = cancel.cancelled() => break,
            _ = ticker.tick() => {}
        }
        let outcome = tokio::select! {
            _ = cancel.cancelled() => break,
            o = run_once(&mut fetcher, provider.as_ref(), schedule.timeout) => o,
        };
        match outcome {
            RunOutcome::Failed { reason, message } => {
                tracing::warn!(source = name, reason, error = %message, "source run failed; keeping the last good data");
                was_failing = true;
            }
            RunOutcome::NoData => tracing::debug!(source = name, "source had no data"),
            RunOutcome::Ok => {
                if was_failing {
                    tracing::info!(source = name, "source recovered");
                    was_failing = false;
                }
            }
        }
    }
    tracing::debug!(source = name, "source stopped");
}
