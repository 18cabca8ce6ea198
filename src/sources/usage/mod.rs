//! Node usage fetchers and the loop that runs them.
//!
//! A fetcher only reads and parses; [`run`] times each run out, records the samples, and
//! records the run's duration and outcome, so a failing fetcher never stops an output and
//! the last good data stays in the hub with its true timestamps.
//!
//! May import: [`crate::shared`], [`crate::model`], [`crate::hub`], [`crate::k8s`] and the
//! shared [`crate::sources::procfs`] parsers.

pub mod host;
pub mod http;
pub mod metrics_server;
pub mod options;
pub mod prometheus;
pub mod signalfx;
pub mod start;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use crate::hub::{DropReason, NodeRecorder, Provider, RunOutcome};
use crate::model::{BackendWindow, NodeCapacity, UsageSample};
use crate::shared::error::Error;
use crate::sources::runner::{self, Pace, SourceRun};

/// The usage backend behind `/watcher`, by load-watcher's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricsProvider {
    /// This machine's procfs (the host role's default).
    Host,
    /// `metrics.k8s.io` NodeMetrics with Nodes (the cluster role's default, as load-watcher).
    KubernetesMetricsServer,
    Prometheus,
    SignalFx,
}

impl MetricsProvider {
    /// load-watcher's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            MetricsProvider::Host => "Host",
            MetricsProvider::KubernetesMetricsServer => "KubernetesMetricsServer",
            MetricsProvider::Prometheus => "Prometheus",
            MetricsProvider::SignalFx => "SignalFx",
        }
    }

    /// Case-insensitive; also `metrics-server`. Unknown names are errors (load-watcher would
    /// silently use the metrics server).
    pub fn parse(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "host" => Ok(MetricsProvider::Host),
            "kubernetesmetricsserver" | "metrics-server" | "metrics_server" | "metricsserver" => {
                Ok(MetricsProvider::KubernetesMetricsServer)
            }
            "prometheus" => Ok(MetricsProvider::Prometheus),
            "signalfx" => Ok(MetricsProvider::SignalFx),
            _ => Err(format!(
                "unknown provider (expected Host, KubernetesMetricsServer, Prometheus or SignalFx; got {s:?}){}",
                crate::shared::suggest::did_you_mean(
                    s,
                    [
                        "Host",
                        "KubernetesMetricsServer",
                        "metrics-server",
                        "Prometheus",
                        "SignalFx"
                    ]
                )
                .map(|k| format!("; did you mean `{k}`?"))
                .unwrap_or_default()
            )),
        }
    }
}

impl<'de> Deserialize<'de> for MetricsProvider {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        MetricsProvider::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// What one fetch produced. `errors` holds the parts that failed; what did work is still kept.
#[derive(Debug, Default)]
pub struct Fetched {
    pub samples: Vec<UsageSample>,
    /// Values the backend aggregated over windows itself.
    pub windows: Vec<BackendWindow>,
    pub capacities: Vec<(String, NodeCapacity)>,
    /// Values of single nodes that could not be turned into numbers (an unparsable quantity,
    /// a missing or impossible capacity): dropped and counted by the hub, never a run error.
    pub dropped: Vec<Dropped>,
    pub errors: Vec<Error>,
    /// Samples the fetcher recorded into the hub itself as it decoded them
    /// ([`UsageFetcher::fetch_into`]), not in `samples`.
    pub streamed: u64,
    /// How the backend's series met the cluster's Nodes, when the fetcher checked it.
    pub usage_match: Option<crate::model::UsageMatch>,
    /// The node's pressure stall totals (the host fetcher, on a kernel that has them).
    pub pressure: Option<crate::model::NodePressure>,
}

/// One value a fetcher could not use, for [`crate::hub::NodeRecorder::record_dropped`].
#[derive(Debug, Clone, PartialEq)]
pub struct Dropped {
    pub node: String,
    /// What the value was, e.g. `cpu usage`.
    pub what: String,
    pub reason: DropReason,
}

/// A source of node usage.
pub trait UsageFetcher: Send + 'static {
    /// Stable source name (`host`, `metrics_server`, ...): a label value and a log field.
    fn name(&self) -> &'static str;
    /// One fetch. Partial failure goes into [`Fetched::errors`].
    fn fetch(&mut self) -> impl Future<Output = Fetched> + Send;
    /// One fetch as [`run_once`] makes it: a fetcher whose answer grows with the cluster (the
    /// NodeMetrics list) records each node's sample, capacity and dropped values into `out`
    /// as it decodes them, so that a fetch never holds them all, and counts them in
    /// [`Fetched::streamed`]; what it returns is recorded as from [`UsageFetcher::fetch`]. By
    /// default, `fetch`.
    fn fetch_into<'a>(
        &'a mut self,
        out: &'a dyn NodeRecorder,
    ) -> impl Future<Output = Fetched> + Send + 'a {
        let _ = out;
        self.fetch()
    }
    /// Awaited once before the first fetch, outside its timeout: a source whose first fetch
    /// would be better made with something another part of the process is still building
    /// (the Node watcher's first list) waits for it here. Nothing by default.
    fn before_first_fetch(&mut self) -> impl Future<Output = ()> + Send {
        std::future::ready(())
    }
}

/// Schedule of a fetch loop.
#[derive(Debug, Clone, Copy)]
pub struct Schedule {
    pub interval: Duration,
    pub timeout: Duration,
    /// A node this source no longer reports leaves the hub after this many successful fetches
    /// in a row without it (0: never). See [`DEFAULT_EXPIRE_AFTER`].
    pub expire_after: u32,
}

/// load-watcher rebuilds its map on every fetch, so a host it stops reporting is gone on the
/// next one; we tolerate one missed fetch (a host whose exporter was scraped a moment late)
/// and drop it on the second.
pub const DEFAULT_EXPIRE_AFTER: u32 = 2;

/// Runs one fetch with the timeout and records everything it produced into `provider`;
/// nodes expire after [`DEFAULT_EXPIRE_AFTER`] fetches without them.
pub async fn run_once<F: UsageFetcher>(
    fetcher: &mut F,
    provider: &dyn Provider,
    timeout: Duration,
) -> RunOutcome {
    run_once_expiring(fetcher, provider, timeout, DEFAULT_EXPIRE_AFTER).await
}

/// [`run_once`] with nodes expiring after `expire_after` successful fetches without them.
pub async fn run_once_expiring<F: UsageFetcher>(
    fetcher: &mut F,
    provider: &dyn Provider,
    timeout: Duration,
    expire_after: u32,
) -> RunOutcome {
    let (took, outcome) = fetch_once(fetcher, provider, timeout, expire_after).await;
    runner::record(provider, fetcher.name(), took, outcome.clone());
    outcome
}

/// One fetch with the timeout, everything it produced recorded into `provider`: how long it
/// took and how it ended, for the runner to record.
async fn fetch_once<F: UsageFetcher>(
    fetcher: &mut F,
    provider: &dyn Provider,
    timeout: Duration,
    expire_after: u32,
) -> (Duration, RunOutcome) {
    let name = fetcher.name();
    let started = Instant::now();
    let fetched = match tokio::time::timeout(timeout, fetcher.fetch_into(provider.node())).await {
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
    let had_samples =
        !fetched.samples.is_empty() || !fetched.windows.is_empty() || fetched.streamed > 0;
    for sample in fetched.samples {
        provider.node().record_node_usage(name, sample);
    }
    for window in fetched.windows {
        provider.node().record_node_window(name, window);
    }
    for (node, cap) in fetched.capacities {
        provider.node().record_node_capacity(&node, cap);
    }
    if let Some(p) = fetched.pressure {
        provider.node().record_node_pressure(p);
    }
    for d in &fetched.dropped {
        provider
            .node()
            .record_dropped(name, &d.node, &d.what, d.reason);
    }
    if let Some(m) = fetched.usage_match {
        provider.source().record_usage_match(name, m);
    }
    provider
        .node()
        .record_fetch_end(name, fetched.errors.is_empty(), expire_after);
    let outcome = match fetched.errors.first() {
        Some(first) => RunOutcome::Failed {
            reason: first.metric_label().to_string(),
            message: summarize(&fetched.errors),
        },
        None if had_samples => RunOutcome::Ok,
        None => RunOutcome::NoData,
    };
    (took, outcome)
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

/// Fetches now and then every `schedule.interval` until `cancel` fires, through the source
/// runner (each fetch recorded and its failures and recovery logged).
pub async fn run<F: UsageFetcher>(
    mut fetcher: F,
    provider: Arc<dyn Provider>,
    schedule: Schedule,
    cancel: CancellationToken,
) {
    let mut source = SourceRun::register(fetcher.name(), provider.clone());
    if runner::until_cancelled(&cancel, fetcher.before_first_fetch())
        .await
        .is_none()
    {
        return;
    }
    let mut pace = Pace::every(schedule.interval);
    while pace.next(&cancel).await {
        let fetch = fetch_once(
            &mut fetcher,
            provider.as_ref(),
            schedule.timeout,
            schedule.expire_after,
        );
        let Some((took, outcome)) = runner::until_cancelled(&cancel, fetch).await else {
            break;
        };
        source.record(took, outcome);
    }
    tracing::debug!(source = source.name(), "source stopped");
}
