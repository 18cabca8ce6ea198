//! What a `CreateTimeSeries` status means: the failure's reason, whether to retry, whether
//! the server sent it, whether anything was written, and the summary of a partial failure.

use gcloud_sdk::google::monitoring::v3::CreateTimeSeriesSummary;
use prost::Message;
use tonic::Code;

/// The failure to report when an attempt ends with `status`: a retry the push deadline cut
/// short (the request carries the time left as its gRPC timeout, so the server answers
/// CANCELLED or DEADLINE_EXCEEDED when it runs out) lost the points because of the failure
/// that made us retry, `last`, not because of the cut.
pub(super) fn cut_short(status: tonic::Status, last: Option<tonic::Status>) -> tonic::Status {
    match (status.code(), last) {
        (Code::Cancelled | Code::DeadlineExceeded, Some(last)) => last,
        _ => status,
    }
}

/// gRPC code in snake_case: the `reason` of failures.
pub use crate::shared::error::grpc_code_name as code_reason;

pub(super) fn retryable(code: Code) -> bool {
    matches!(
        code,
        Code::Unavailable | Code::DeadlineExceeded | Code::ResourceExhausted
    )
}

/// The credentials error behind a status, when the request failed before it was sent because
/// no token could be had (no ADC, metadata server unreachable, key refused).
fn credentials_error(status: &tonic::Status) -> Option<&gcloud_sdk::error::ErrorKind> {
    let mut e: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(status);
    while let Some(err) = e {
        let found = err
            .downcast_ref::<gcloud_sdk::error::Error>()
            .or_else(|| {
                err.downcast_ref::<Box<gcloud_sdk::error::Error>>()
                    .map(|b| b.as_ref())
            })
            .map(|g| g.kind());
        if let Some(kind) = found {
            use gcloud_sdk::error::ErrorKind as K;
            return matches!(
                kind,
                K::Credentials(_) | K::CredentialsBuild(_) | K::CryptoProviderMissing
            )
            .then_some(kind);
        }
        e = err.source();
    }
    None
}

/// The low-cardinality reason of a failed request: `credentials`, or the gRPC code; tonic's
/// own deadline on the request (`CANCELLED` carrying `TimeoutExpired`) is `deadline_exceeded`.
pub(super) fn failure_reason(status: &tonic::Status) -> &'static str {
    if credentials_error(status).is_some() {
        "credentials"
    } else if status.code() == Code::Cancelled && timed_out(status) {
        code_reason(Code::DeadlineExceeded)
    } else {
        code_reason(status.code())
    }
}

/// Whether tonic's own timeout made the status (a `TimeoutExpired` among its sources).
fn timed_out(status: &tonic::Status) -> bool {
    let mut e: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(status);
    let mut depth = 0;
    while let Some(err) = e.filter(|_| depth < 16) {
        if err.is::<tonic::TimeoutExpired>() {
            return true;
        }
        depth += 1;
        e = err.source();
    }
    false
}

/// Worth another attempt: the retryable codes, and token failures the credentials call
/// transient (a metadata server hiccup).
pub(super) fn should_retry(status: &tonic::Status) -> bool {
    match credentials_error(status) {
        Some(gcloud_sdk::error::ErrorKind::Credentials(c)) => c.is_transient(),
        Some(_) => false,
        None => retryable(status.code()),
    }
}

/// Whether Cloud Monitoring (or a proxy in front of it) sent this status. tonic attaches the
/// transport error as the `source` of statuses it makes up itself (connection refused or
/// reset, TLS, DNS); statuses read from the server's trailers or HTTP status have none. A
/// token that could not be had fails before the request is sent.
pub(super) fn answered_by_server(status: &tonic::Status) -> bool {
    std::error::Error::source(status).is_none() && credentials_error(status).is_none()
}

/// The failure certainly wrote nothing, so the series may be written again at once.
pub(super) fn nothing_written(status: &tonic::Status) -> bool {
    credentials_error(status).is_some()
        || summary_of(status).is_none()
            && matches!(
                status.code(),
                Code::Unavailable
                    | Code::ResourceExhausted
                    | Code::Unauthenticated
                    | Code::PermissionDenied
                    | Code::InvalidArgument
                    | Code::NotFound
                    | Code::Unimplemented
                    | Code::FailedPrecondition
            )
}

/// The `CreateTimeSeriesSummary` Cloud Monitoring puts in the status details of a partly
/// (or wholly) failed `CreateTimeSeries`.
pub fn summary_of(status: &tonic::Status) -> Option<CreateTimeSeriesSummary> {
    let details = status.details();
    if details.is_empty() {
        return None;
    }
    let rpc = gcloud_sdk::google::rpc::Status::decode(details).ok()?;
    rpc.details
        .iter()
        .find(|a| {
            a.type_url
                .ends_with("google.monitoring.v3.CreateTimeSeriesSummary")
        })
        .and_then(|a| CreateTimeSeriesSummary::decode(a.value.as_slice()).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A retry the push deadline cut short reports the failure that made us retry; a first
    /// attempt cut short, or any other failure, reports itself.
    #[test]
    fn a_retry_cut_short_by_the_deadline_reports_the_failure_before_it() {
        let unavailable = || tonic::Status::unavailable("down");
        for cut in [Code::Cancelled, Code::DeadlineExceeded] {
            let s = tonic::Status::new(cut, "Timeout expired");
            assert_eq!(
                cut_short(s.clone(), Some(unavailable())).code(),
                Code::Unavailable
            );
            assert_eq!(cut_short(s, None).code(), cut);
        }
        // tonic's own deadline is a timeout; the words alone are not.
        let tonic_timeout = tonic::Status::from_error(Box::new(tonic::TimeoutExpired(())));
        assert_eq!(tonic_timeout.code(), Code::Cancelled);
        assert_eq!(failure_reason(&tonic_timeout), "deadline_exceeded");
        assert_eq!(
            failure_reason(&tonic::Status::cancelled("Timeout expired")),
            "cancelled"
        );
        let denied = tonic::Status::permission_denied("no");
        assert_eq!(
            cut_short(denied, Some(unavailable())).code(),
            Code::PermissionDenied
        );
    }

    #[test]
    fn summaries_are_read_from_the_status_details() {
        let sum = CreateTimeSeriesSummary {
            total_point_count: 5,
            success_point_count: 3,
            errors: vec![],
        };
        let rpc = gcloud_sdk::google::rpc::Status {
            code: 3,
            message: "m".into(),
            details: vec![prost_types::Any {
                type_url: "type.googleapis.com/google.monitoring.v3.CreateTimeSeriesSummary".into(),
                value: sum.encode_to_vec(),
            }],
        };
        let st =
            tonic::Status::with_details(Code::InvalidArgument, "m", rpc.encode_to_vec().into());
        assert_eq!(summary_of(&st), Some(sum));
        assert!(!nothing_written(&st));
        assert_eq!(summary_of(&tonic::Status::invalid_argument("x")), None);
        assert!(nothing_written(&tonic::Status::invalid_argument("x")));
        assert!(!nothing_written(&tonic::Status::deadline_exceeded("x")));
        // Garbage details are no summary, not a panic.
        let junk = tonic::Status::with_details(Code::Internal, "j", vec![0xff, 0x01].into());
        assert_eq!(summary_of(&junk), None);
    }
}
