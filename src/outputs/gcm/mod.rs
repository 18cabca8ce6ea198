//! Google Cloud Monitoring output: gke-prober's metrics, pushed with `CreateTimeSeries`.
//!
//! The series are gke-prober's (`workload.googleapis.com/<prefix>/<suffix>`, its label keys
//! from [`families::GKE_PROBER`](super::families::GKE_PROBER), `True`/`False` booleans), so its
//! dashboards keep working, with its bugs fixed: every pod of an addon counts, restarts are
//! real cumulative counters per container, requests are split at 200 series, and no error is
//! dropped: failed and partly failed requests are logged with the points they lost, counted by
//! reason and returned.
//!
//! Cloud Monitoring takes at most one point per series per request and rejects a point less
//! than the metric's sampling period (10 s) after the previous one of its series. The sink
//! remembers when it last wrote each series and leaves out (and counts) those written too
//! recently, so a fast ticker never produces write errors.
//!
//! Credentials are the Application Default Credentials through gcloud-sdk (a key file named
//! by `GOOGLE_APPLICATION_CREDENTIALS`, gcloud's user credentials, or the metadata server,
//! which is Workload Identity on GKE); `anonymous` sends none, for stand-ins and emulators.
//!
//! The room, by concern: `drafts.rs` is what one snapshot says in gke-prober's names (before
//! timing); `timing.rs` chooses the series a push may write now and their point intervals;
//! `request.rs` builds the `CreateTimeSeries` requests; `sink.rs` pushes them (batches,
//! retries, the push deadline) and `account.rs` adds up what they did; `status.rs` reads Cloud
//! Monitoring's answers; `client.rs` connects; `descriptors.rs` lists and deletes metric
//! descriptors; `start.rs` starts the sink from its config and what the wiring knows. The
//! sink's config is here, its options (`--gcm-*`) in `options.rs`, and everything public is
//! re-exported here.

use std::time::Duration;

use crate::shared::error::{Error, Result};

mod account;
mod client;
mod descriptors;
mod drafts;
pub mod options;
mod request;
mod sink;
pub mod start;
mod status;
mod timing;

pub use client::{GcmClient, connect};
pub use descriptors::{delete_descriptors, list_descriptors};
pub use options::GcmOptions;
pub use sink::{GcmSink, GcmStats};
pub use status::{code_reason, summary_of};

/// Cloud Monitoring's public endpoint.
pub const DEFAULT_ENDPOINT: &str = "https://monitoring.googleapis.com";
/// The metric type prefix when none is configured: `workload.googleapis.com/kube-prober/...`,
/// what gke-prober's manifests set.
pub const DEFAULT_PREFIX: &str = "kube-prober";
/// Cloud Monitoring's limit of time series per `CreateTimeSeries` request.
pub const MAX_SERIES_PER_REQUEST: usize = 200;
/// The shortest interval between two points of one series Cloud Monitoring accepts for
/// user-defined metrics.
pub const DEFAULT_MIN_SAMPLING_PERIOD: Duration = Duration::from_secs(10);

/// How to reach Cloud Monitoring; shared by the sink and the descriptor commands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GcmClientConfig {
    /// `https://host[:port]` (TLS with the webpki roots) or `http://host:port` (plaintext, for
    /// stand-ins and emulators). `None`: [`DEFAULT_ENDPOINT`].
    pub endpoint: Option<String>,
    /// Send no credentials (stand-ins, emulators). Otherwise the Application Default
    /// Credentials.
    pub anonymous: bool,
    /// Bound on opening the connection.
    pub connect_timeout: Duration,
}

impl Default for GcmClientConfig {
    fn default() -> Self {
        GcmClientConfig {
            endpoint: None,
            anonymous: false,
            connect_timeout: Duration::from_secs(10),
        }
    }
}

impl GcmClientConfig {
    /// The endpoint in use.
    pub fn endpoint(&self) -> &str {
        self.endpoint.as_deref().unwrap_or(DEFAULT_ENDPOINT)
    }
}

/// The Cloud Monitoring output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GcmConfig {
    pub client: GcmClientConfig,
    /// Monitored-resource labels; each falls back to the snapshot's [`crate::model::ClusterInfo`].
    pub project: Option<String>,
    pub location: Option<String>,
    pub cluster: Option<String>,
    /// Metric types are `workload.googleapis.com/<prefix>/<gke-prober suffix>`.
    pub prefix: String,
    /// Node role: the node whose `node/*`, `addon/*` series this instance writes (only its
    /// own); `cluster/*` series are then left to the cluster role. `None` in the cluster role
    /// (every node of the cluster state). A snapshot whose role is `node` is treated as the
    /// node role even without a name.
    pub own_node: Option<String>,
    /// Cluster role: also write `node/*` and `addon/*` for every node. Off when a node-role
    /// DaemonSet writes them, which would otherwise collide with ours. Ignored in the node role.
    pub node_series: bool,
    /// Never write a point of a series sooner than this after its previous one.
    pub min_sampling_period: Duration,
    /// Series per request, 1..=200.
    pub max_series_per_request: usize,
    /// Requests in flight at once within one push.
    pub concurrency: usize,
    /// Bound on one push, retries included; keep it below the runner's push timeout.
    pub push_deadline: Duration,
    /// First retry delay; doubled per retry up to `retry_max`, with jitter.
    pub retry_initial: Duration,
    pub retry_max: Duration,
}

impl Default for GcmConfig {
    fn default() -> Self {
        GcmConfig {
            client: GcmClientConfig::default(),
            project: None,
            location: None,
            cluster: None,
            prefix: DEFAULT_PREFIX.to_string(),
            own_node: None,
            node_series: true,
            min_sampling_period: DEFAULT_MIN_SAMPLING_PERIOD,
            max_series_per_request: MAX_SERIES_PER_REQUEST,
            concurrency: 4,
            push_deadline: Duration::from_secs(45),
            retry_initial: Duration::from_secs(1),
            retry_max: Duration::from_secs(16),
        }
    }
}

pub(super) fn config_error(option: &'static str, value: impl ToString, reason: &str) -> Error {
    crate::shared::options::invalid(option, &value.to_string(), reason)
}

/// A metric type prefix is a path below `workload.googleapis.com/`: segments of letters, digits,
/// `-`, `_` or `.`. The one rule for `--gcm-prefix`, the sink's config and the `gcm descriptors`
/// subcommand's `--prefix`; `option` names where the value came from.
pub(super) fn validate_prefix(option: &'static str, prefix: &str) -> Result<()> {
    let prefix_ok = prefix.split('/').all(|seg| {
        !seg.is_empty()
            && seg
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    });
    if !prefix_ok {
        return Err(config_error(
            option,
            prefix,
            "expected path segments of letters, digits, '-', '_' or '.', e.g. kube-prober",
        ));
    }
    Ok(())
}

impl GcmConfig {
    /// Every bad value is a clear error before the first push.
    pub fn validate(&self) -> Result<()> {
        validate_prefix("gcm prefix", &self.prefix)?;
        if !(1..=MAX_SERIES_PER_REQUEST).contains(&self.max_series_per_request) {
            return Err(config_error(
                "gcm max_series_per_request",
                self.max_series_per_request,
                "must be 1..=200 (Cloud Monitoring's limit)",
            ));
        }
        if self.concurrency == 0 {
            return Err(config_error("gcm concurrency", 0, "must be at least 1"));
        }
        if self.push_deadline.is_zero() {
            return Err(config_error("gcm push_deadline", "0s", "must be positive"));
        }
        if self.retry_initial.is_zero() || self.retry_max < self.retry_initial {
            return Err(config_error(
                "gcm retry",
                format!("{:?}..{:?}", self.retry_initial, self.retry_max),
                "initial must be positive and not above max",
            ));
        }
        for (option, v) in [
            ("gcm project", &self.project),
            ("gcm location", &self.location),
            ("gcm cluster", &self.cluster),
        ] {
            if v.as_deref().is_some_and(str::is_empty) {
                return Err(config_error(option, "", "must not be empty when set"));
            }
        }
        check_endpoint(self.client.endpoint())?;
        Ok(())
    }

    /// `workload.googleapis.com/<prefix>/<suffix>`.
    pub fn metric_type(&self, suffix: &str) -> String {
        metric_type(&self.prefix, suffix)
    }
}

fn metric_type(prefix: &str, suffix: &str) -> String {
    format!("workload.googleapis.com/{prefix}/{suffix}")
}

/// The TLS server name for `https` endpoints, `None` for `http`.
pub(super) fn check_endpoint(endpoint: &str) -> Result<Option<String>> {
    let uri: http::Uri = endpoint
        .parse()
        .map_err(|e| config_error("gcm endpoint", endpoint, &format!("not a URL: {e}")))?;
    let host = uri
        .host()
        .filter(|h| !h.is_empty())
        .ok_or_else(|| config_error("gcm endpoint", endpoint, "has no host"))?;
    match uri.scheme_str() {
        Some("https") => Ok(Some(
            host.trim_start_matches('[')
                .trim_end_matches(']')
                .to_string(),
        )),
        Some("http") => Ok(None),
        _ => Err(config_error(
            "gcm endpoint",
            endpoint,
            "must start with https:// or http://",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::status::retryable;
    use super::*;
    use tonic::Code;

    #[test]
    fn config_checks() {
        assert!(GcmConfig::default().validate().is_ok());
        for p in ["", "/a", "a/", "a//b", "a b", "ä"] {
            assert!(validate_prefix("gcm prefix", p).is_err(), "{p:?}");
        }
        assert!(validate_prefix("gcm prefix", "kube-prober/v2").is_ok());
        assert_eq!(
            check_endpoint("https://monitoring.googleapis.com").unwrap(),
            Some("monitoring.googleapis.com".into())
        );
        assert_eq!(check_endpoint("http://127.0.0.1:9").unwrap(), None);
        for e in ["monitoring.googleapis.com", "ftp://x", "https://", ""] {
            assert!(check_endpoint(e).is_err(), "{e:?}");
        }
        assert_eq!(
            GcmConfig::default().metric_type("node/available"),
            "workload.googleapis.com/kube-prober/node/available"
        );
        assert_eq!(code_reason(Code::ResourceExhausted), "resource_exhausted");
        assert!(retryable(Code::DeadlineExceeded) && !retryable(Code::InvalidArgument));
    }
}
