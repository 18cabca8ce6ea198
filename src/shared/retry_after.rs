//! `Retry-After` as the usage backends and the Kubernetes client read it.

use std::time::Duration;

use reqwest::StatusCode;

/// The longest `Retry-After` a retry waits for; a longer one ends the retries.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(30);

/// `Retry-After` in seconds on a 429 or 503, as the server asked (the form Prometheus, SignalFx
/// and the API server send; an HTTP date is ignored and the usual pause applies). Callers decide
/// what to do with a wait above [`MAX_RETRY_AFTER`]; the kube client's gate caps it
/// (`watch::backoff::retry_after`).
pub fn retry_after(status: StatusCode, headers: &http::HeaderMap) -> Option<Duration> {
    if status != StatusCode::TOO_MANY_REQUESTS && status != StatusCode::SERVICE_UNAVAILABLE {
        return None;
    }
    let secs: u64 = headers
        .get(http::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(Duration::from_secs(secs))
}
