//! What the requests of one push did, added up: points written and lost by reason, the
//! series whose marks are undone, and the one error a failed push reports.

use std::collections::BTreeMap;
use std::time::SystemTime;

use tonic::Code;

use super::status::{code_reason, failure_reason, nothing_written, summary_of};
use crate::model::drop_reason;
use crate::model::sink::PARTIAL;
use crate::outputs::{PushError, PushReport};

/// The outcome of one request (after retries).
pub(super) struct Sent {
    pub(super) keys: Vec<(String, Option<SystemTime>)>,
    pub(super) points: u64,
    pub(super) attempts: u64,
    /// Attempts the server answered (a status of its own): what `requests` counts.
    pub(super) answered: u64,
    pub(super) result: std::result::Result<(), tonic::Status>,
}

/// What the requests of one push did, added up.
#[derive(Default)]
pub(super) struct Tally {
    pub(super) report: PushReport,
    /// Points lost, by reason.
    pub(super) lost: BTreeMap<String, u64>,
    /// The same points by drop reason ([`crate::model::DROP_REASONS`]): those of a request
    /// that wrote others are `partial`, the rest by their failure.
    pub(super) dropped: BTreeMap<&'static str, u64>,
    /// Points written by requests that failed in part (their summary's successes).
    pub(super) partly_written: u64,
    /// The reason and message of the first failed request.
    first_failure: Option<(String, String)>,
    /// Some failed request still wrote points.
    partial: bool,
    failed_requests: u64,
    /// The series of requests that certainly wrote nothing, with their previous end times.
    pub(super) undo: Vec<(String, Option<SystemTime>)>,
}

impl Tally {
    pub(super) fn add(&mut self, s: Sent) {
        // Requests the server answered; attempts that never reached it are not requests.
        self.report.requests += s.answered;
        let status = match s.result {
            Ok(()) => {
                self.report.points += s.points;
                return;
            }
            Err(status) => status,
        };
        self.failed_requests += 1;
        let code = failure_reason(&status);
        let lost_here = self.lose(&status, code, s.points);
        tracing::warn!(
            sink = "gcm",
            code,
            points_lost = lost_here,
            series = s.points,
            attempts = s.attempts,
            error = %status.message(),
            "CreateTimeSeries failed"
        );
        // Never sent (deadline), or certainly not written: no wait needed.
        if s.attempts == 0 || nothing_written(&status) {
            self.undo.extend(s.keys);
        }
        if self.first_failure.is_none() {
            self.first_failure = Some((code.to_string(), status.message().to_string()));
        }
    }

    /// Counts the points a failed request of `points` lost, by reason (from Cloud
    /// Monitoring's summary where it sent one, else all of them as `code`); returns them.
    fn lose(&mut self, status: &tonic::Status, code: &'static str, points: u64) -> u64 {
        let Some(sum) = summary_of(status) else {
            *self.lost.entry(code.to_string()).or_default() += points;
            *self.dropped.entry(drop_reason(code)).or_default() += points;
            return points;
        };
        let mut lost_here = 0u64;
        let ok = u64::try_from(sum.success_point_count).unwrap_or(0);
        self.report.points += ok;
        self.partly_written += ok;
        self.partial |= ok > 0;
        for e in &sum.errors {
            let c = e
                .status
                .as_ref()
                .map_or(code, |st| code_reason(Code::from(st.code)));
            let n = u64::try_from(e.point_count).unwrap_or(0);
            *self.lost.entry(c.to_string()).or_default() += n;
            lost_here += n;
        }
        // Points the summary does not explain.
        let total = u64::try_from(sum.total_point_count).unwrap_or(points);
        let rest = total.saturating_sub(ok + lost_here);
        if rest > 0 {
            *self.lost.entry(code.to_string()).or_default() += rest;
            lost_here += rest;
        }
        let reason = if ok > 0 { PARTIAL } else { drop_reason(code) };
        *self.dropped.entry(reason).or_default() += lost_here;
        lost_here
    }

    /// The report, or one [`PushError`] for every failure.
    pub(super) fn into_result(self) -> Result<PushReport, PushError> {
        let Some((code, message)) = self.first_failure else {
            return Ok(self.report);
        };
        let lost_total: u64 = self.lost.values().sum();
        let by_reason = self
            .lost
            .iter()
            .map(|(r, n)| format!("{r}={n}"))
            .collect::<Vec<_>>()
            .join(", ");
        let failed_requests = self.failed_requests;
        Err(PushError {
            reason: if self.partial { "partial".into() } else { code },
            message: format!(
                "{failed_requests} request(s) failed, {lost_total} point(s) lost ({by_reason}): {message}"
            ),
            sent: self.report,
        })
    }
}
