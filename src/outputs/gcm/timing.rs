//! When a series may be written again (Cloud Monitoring's sampling period) and the
//! intervals of the points sent: what the sink remembers of each series, and point times.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use gcloud_sdk::google::monitoring::v3::TimeInterval;

use super::drafts::{Draft, Kind, Value};

/// A series chosen for this push: its key, the end time of its previous point, the series and
/// the interval of its new point.
pub(super) type Selected = (String, Option<SystemTime>, Draft, TimeInterval);

/// What the sink remembers of one series.
#[derive(Debug, Clone, Copy)]
pub(super) struct Memo {
    /// End time of the newest point sent (or in flight).
    pub(super) last_end: Option<SystemTime>,
    /// CUMULATIVE: the start time all its points carry until the counter goes down.
    start: Option<SystemTime>,
    last_value: Option<i64>,
}

#[derive(Debug, Default)]
pub(super) struct State {
    pub(super) series: HashMap<String, Memo>,
    last_push_at: Option<SystemTime>,
}

impl State {
    /// Chooses the series to send now with their point intervals; marks them as sent at
    /// `now` (undone if a request certainly wrote nothing). `started`: when the sink started;
    /// `period`: the sampling period.
    pub(super) fn select(
        &mut self,
        drafts: Vec<Draft>,
        now: SystemTime,
        started: SystemTime,
        period: Duration,
    ) -> (Vec<Selected>, u64) {
        // A counter first seen now started counting after our previous look.
        let new_start = match self.last_push_at {
            Some(t) if t < now => t,
            Some(_) => just_before(now),
            None => started.min(just_before(now)),
        };
        let mut out = Vec::with_capacity(drafts.len());
        let mut skipped = 0u64;
        let mut seen = std::collections::HashSet::with_capacity(drafts.len());
        for d in drafts {
            let key = d.key();
            let memo = self.series.entry(key.clone()).or_insert(Memo {
                last_end: None,
                start: None,
                last_value: None,
            });
            seen.insert(key.clone());
            if let Some(last) = memo.last_end
                && (now <= last || now.duration_since(last).unwrap_or(Duration::ZERO) < period)
            {
                skipped += 1;
                continue;
            }
            let interval = match d.kind {
                Kind::Gauge => TimeInterval {
                    end_time: Some(timestamp(now)),
                    start_time: None,
                },
                Kind::Cumulative => {
                    let v = match d.value {
                        Value::Int(v) => Some(v),
                        Value::Double(_) => None,
                    };
                    let reset = matches!((memo.last_value, v), (Some(a), Some(b)) if b < a);
                    let start = match (memo.start, reset) {
                        (Some(s), false) => s,
                        // A reset: the new counter began after the previous point.
                        (Some(_), true) => memo
                            .last_end
                            .and_then(|e| e.checked_add(Duration::from_millis(1)))
                            .filter(|s| *s < now)
                            .unwrap_or(just_before(now)),
                        (None, _) => new_start,
                    };
                    memo.start = Some(start);
                    memo.last_value = v;
                    TimeInterval {
                        end_time: Some(timestamp(now)),
                        start_time: Some(timestamp(start)),
                    }
                }
            };
            let previous = memo.last_end;
            memo.last_end = Some(now);
            out.push((key, previous, d, interval));
        }
        // Forget series that are gone and whose period has passed.
        self.series.retain(|k, m| {
            seen.contains(k)
                || m.last_end
                    .is_some_and(|e| now.duration_since(e).unwrap_or(Duration::ZERO) < period)
        });
        self.last_push_at = Some(now);
        (out, skipped)
    }
}

fn timestamp(t: SystemTime) -> prost_types::Timestamp {
    let d = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or(Duration::ZERO);
    prost_types::Timestamp {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        // Below one billion by construction.
        nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
    }
}

/// Milliseconds are enough, and keep times comparable after a round trip.
pub(super) fn truncate_ms(t: SystemTime) -> SystemTime {
    let d = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or(Duration::ZERO);
    SystemTime::UNIX_EPOCH + Duration::from_millis(u64::try_from(d.as_millis()).unwrap_or(0))
}

/// One millisecond earlier (the times sent are whole milliseconds).
fn just_before(t: SystemTime) -> SystemTime {
    t.checked_sub(Duration::from_millis(1)).unwrap_or(t)
}
