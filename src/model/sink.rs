//! What the outputs that push (OTLP, Cloud Monitoring) report about themselves.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

/// How one push went.
#[derive(Debug, Clone, PartialEq)]
pub struct SinkPush {
    pub at: SystemTime,
    pub duration: Duration,
    /// Points the receiver accepted and requests it answered, failed pushes included (a
    /// partial failure still delivered some).
    pub points: u64,
    pub requests: u64,
    /// `None` on success, else a low-cardinality reason (`timeout`, `unavailable`, ...).
    pub failure: Option<String>,
    /// Points of this push that no receiver accepted, by reason (`refused`, `unavailable`,
    /// `timeout`, `transport`, `partial`, ...): with `points`, every point of the push.
    pub dropped: Vec<(&'static str, u64)>,
}

/// This replica's part in leader election (cluster role with push outputs).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Leadership {
    /// `namespace/name` of the Lease.
    pub lease: String,
    pub leading: bool,
    /// Times this replica became the leader.
    pub acquired: u64,
}

/// Counters of one sink.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SinkStatus {
    pub name: String,
    pub pushes: u64,
    pub failures: BTreeMap<String, u64>,
    /// Ticks skipped because the previous push was still running.
    pub skipped: u64,
    /// Points the receivers accepted.
    pub points: u64,
    /// Points lost, by reason: skipped ticks (`tick_skipped`) and pushes that did not deliver
    /// them all.
    pub dropped: BTreeMap<String, u64>,
    pub requests: u64,
    pub last_duration: Duration,
    pub last_success: Option<SystemTime>,
}

// Why points of a push output were lost (`kube_prober_sink_points_dropped_total`'s
// `reason`): every point of every tick is either accepted by the receiver or counted under
// one of these.

/// A tick came while the previous push was still running: its points were never sent.
pub const TICK_SKIPPED: &str = "tick_skipped";
/// The receiver answered with an error not worth retrying (OTLP/HTTP 4xx but 429, 500, 501;
/// gRPC `INVALID_ARGUMENT`, `PERMISSION_DENIED`, `UNAUTHENTICATED`, `INTERNAL`, ...).
pub const REFUSED: &str = "refused";
/// The receiver said it could not take them now (gRPC `UNAVAILABLE`, `RESOURCE_EXHAUSTED`,
/// `ABORTED`; HTTP 429, 502, 503, 504), or could not be connected to over gRPC.
pub const UNAVAILABLE: &str = "unavailable";
/// No answer in time: the request's or the push's deadline passed.
pub const TIMEOUT: &str = "timeout";
/// The connection failed (refused, reset, TLS), the answer could not be read, or no
/// credentials could be had.
pub const TRANSPORT: &str = "transport";
/// The receiver accepted the request but rejected some of its points (OTLP
/// `partial_success.rejected_data_points`; Cloud Monitoring's `CreateTimeSeriesSummary`).
pub const PARTIAL: &str = "partial";
/// Cloud Monitoring only: the series was written less than the sampling period ago, so this
/// tick's point was left out (Cloud Monitoring would refuse it).
pub const SAMPLING_PERIOD: &str = "sampling_period";
/// The push of cluster-level series was aborted because this replica lost the Lease.
pub const LOST_LEASE: &str = "lost_lease";
/// The push could not be made at all (Cloud Monitoring without a project or location).
pub const CONFIG: &str = "config";

/// Every reason points are counted as dropped, in documentation order.
pub const DROP_REASONS: [&str; 9] = [
    TICK_SKIPPED,
    REFUSED,
    UNAVAILABLE,
    TIMEOUT,
    TRANSPORT,
    PARTIAL,
    SAMPLING_PERIOD,
    LOST_LEASE,
    CONFIG,
];

/// The drop reason of the points a failed push lost, from its failure reason (the
/// low-cardinality one of `kube_prober_sink_failures_total`: `http_503`, `invalid_argument`,
/// `transport`, ...). A status OTLP's specification calls retryable is `unavailable`, one
/// the receiver sent that it does not is `refused`.
pub fn drop_reason(failure: &str) -> &'static str {
    match failure {
        "timeout" | "deadline_exceeded" => TIMEOUT,
        "unavailable" | "resource_exhausted" | "aborted" | "http_429" | "http_502" | "http_503"
        | "http_504" => UNAVAILABLE,
        "transport" | "tls" | "cancelled" | "credentials" | "too_large" => TRANSPORT,
        "partial" => PARTIAL,
        "lost_lease" => LOST_LEASE,
        "config" => CONFIG,
        _ => REFUSED,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_reasons_map_onto_the_documented_drop_reasons() {
        let cases = [
            ("http_400", REFUSED),
            ("http_500", REFUSED),
            ("invalid_argument", REFUSED),
            ("permission_denied", REFUSED),
            ("http_503", UNAVAILABLE),
            ("http_429", UNAVAILABLE),
            ("unavailable", UNAVAILABLE),
            ("resource_exhausted", UNAVAILABLE),
            ("timeout", TIMEOUT),
            ("deadline_exceeded", TIMEOUT),
            ("transport", TRANSPORT),
            ("tls", TRANSPORT),
            ("too_large", TRANSPORT),
            ("lost_lease", LOST_LEASE),
            ("config", CONFIG),
        ];
        for (failure, want) in cases {
            assert_eq!(drop_reason(failure), want, "{failure}");
            assert!(DROP_REASONS.contains(&want));
        }
    }
}
