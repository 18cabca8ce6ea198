//! Probes: each checks one thing (an HTTP endpoint, a DNS name, an API) on its own interval and
//! with its own timeout; the runner records duration, success and a low-cardinality failure
//! reason as a [`ProbeOutcome`], so a failing probe never fails anything else.
//!
//! May import: [`crate::shared`], [`crate::model`], [`crate::hub`], [`crate::k8s`].

pub mod dns;
pub mod http;
pub mod kube;
pub mod options;
pub mod start;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio_util::sync::CancellationToken;

use crate::hub::Provider;
use crate::model::ProbeOutcome;
use crate::sources::runner::{self, Pace};

/// Every failure reason a probe records, as docs/configuration.md, docs/alerts.md and
/// docs/metrics.md list them; `status_<code>` stands for `status_` and the HTTP status code.
/// `tests/repo/docs.rs` checks the reasons the probes' code gives against this list and the
/// list against those pages.
pub const FAILURE_REASONS: &[&str] = &[
    "timeout",
    "refused",
    "dns",
    "status_<code>",
    "bad_body",
    "no_items",
    "too_large",
    "error",
];

/// Why a probe failed: `reason` is a label value from [`FAILURE_REASONS`]; `detail` is for the
/// log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub reason: String,
    pub detail: String,
}

impl Failure {
    pub fn new(reason: impl Into<String>, detail: impl Into<String>) -> Self {
        Failure {
            reason: reason.into(),
            detail: detail.into(),
        }
    }
}

/// One check.
pub trait Probe: Send + Sync + 'static {
    /// The probe's kind, e.g. `kubelet_healthz`: a label value.
    fn name(&self) -> &str;
    /// What it checks, e.g. a URL or DNS name: a label value of bounded cardinality.
    fn target(&self) -> &str;
    fn check(&self) -> impl Future<Output = Result<(), Failure>> + Send;
}

/// When a probe runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Schedule {
    pub interval: Duration,
    pub timeout: Duration,
}

/// Runs the probe once within `timeout` and records the outcome.
pub async fn run_once<P: Probe>(p: &P, timeout: Duration, provider: &dyn Provider) -> ProbeOutcome {
    let started = Instant::now();
    let result = match tokio::time::timeout(timeout, p.check()).await {
        Ok(r) => r,
        Err(_) => Err(Failure::new(
            "timeout",
            format!("no answer within {timeout:?}"),
        )),
    };
    let outcome = ProbeOutcome {
        probe: p.name().to_string(),
        target: p.target().to_string(),
        at: SystemTime::now(),
        duration: started.elapsed(),
        failure: result.as_ref().err().map(|f| f.reason.clone()),
    };
    if let Err(f) = &result {
        tracing::warn!(probe = p.name(), target = p.target(), reason = %f.reason, detail = %f.detail, "probe failed");
    }
    provider.probe().record_probe_outcome(outcome.clone());
    outcome
}

/// Runs the probe now and then every `schedule.interval` until `cancel` fires, paced by the
/// source runner; each run is recorded as the probe's outcome.
pub async fn run<P: Probe>(
    p: P,
    schedule: Schedule,
    provider: Arc<dyn Provider>,
    cancel: CancellationToken,
) {
    let mut pace = Pace::every(schedule.interval);
    while pace.next(&cancel).await {
        let run = run_once(&p, schedule.timeout, provider.as_ref());
        if runner::until_cancelled(&cancel, run).await.is_none() {
            break;
        }
    }
}

/// The reason for an I/O-level error (refused, DNS, timeout, other), read from the types in
/// `e`'s source chain: a [`DnsError`](crate::shared::dns::DnsError) (the probes' resolver's) is
/// `dns`, an `io::Error` says refused or timed out by its kind. The text is never read.
pub fn io_reason(e: &(dyn std::error::Error + 'static)) -> &'static str {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if err.is::<crate::shared::dns::DnsError>() {
            return "dns";
        }
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            return match io.kind() {
                std::io::ErrorKind::ConnectionRefused => "refused",
                std::io::ErrorKind::TimedOut => "timeout",
                _ => "error",
            };
        }
        cur = err.source();
    }
    "error"
}

#[cfg(test)]
mod tests;
