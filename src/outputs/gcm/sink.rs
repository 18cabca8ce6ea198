//! The sink: one push of a snapshot as batches of requests (at most `concurrency` in
//! flight), each retried with backoff within the push deadline; the counters of its life.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use futures_util::stream::{self, StreamExt};
use gcloud_sdk::google::monitoring::v3::CreateTimeSeriesRequest;

use super::GcmConfig;
use super::account::{Sent, Tally};
use super::client::{GcmClient, connect};
use super::drafts::drafts;
use super::request::{resource_labels, time_series};
use super::status::{answered_by_server, cut_short, should_retry};
use super::timing::{State, truncate_ms};
use crate::model::Snapshot;
use crate::model::sink::SAMPLING_PERIOD;
use crate::outputs::{PushError, PushProgress, PushReport, PushScope, Sink};
use crate::shared::error::Result;

/// Counters of the sink's life, beyond what [`PushReport`] carries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GcmStats {
    pub pushes: u64,
    /// Points Cloud Monitoring accepted.
    pub points: u64,
    /// `CreateTimeSeries` calls, retries included.
    pub requests: u64,
    /// Calls retried after UNAVAILABLE, DEADLINE_EXCEEDED or RESOURCE_EXHAUSTED.
    pub retries: u64,
    /// Series left out because their previous point is younger than the sampling period.
    pub skipped_series: u64,
    /// The same, in the newest push.
    pub last_skipped: u64,
    /// Points lost, by reason (`invalid_argument`, `unavailable`, ...).
    pub failed_points: BTreeMap<String, u64>,
    /// Series the sink remembers.
    pub tracked_series: usize,
}

/// The Cloud Monitoring output.
pub struct GcmSink {
    cfg: GcmConfig,
    client: GcmClient,
    started: SystemTime,
    state: Mutex<State>,
    stats: Mutex<GcmStats>,
}

impl std::fmt::Debug for GcmSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GcmSink").field("cfg", &self.cfg).finish()
    }
}

/// A number in [0, 1) that differs per call, for jitter.
fn jitter_fraction() -> f64 {
    use std::hash::BuildHasher;
    let h = std::collections::hash_map::RandomState::new().hash_one(Instant::now());
    (h % 10_000) as f64 / 10_000.0
}

impl GcmSink {
    /// Validates `cfg` and makes the client (see [`connect`]).
    pub async fn new(cfg: GcmConfig) -> Result<Self> {
        cfg.validate()?;
        let client = connect(&cfg.client).await?;
        Ok(GcmSink {
            cfg,
            client,
            started: truncate_ms(SystemTime::now()),
            state: Mutex::new(State::default()),
            stats: Mutex::new(GcmStats::default()),
        })
    }

    pub fn config(&self) -> &GcmConfig {
        &self.cfg
    }

    /// Counters so far.
    pub fn stats(&self) -> GcmStats {
        let mut s = self
            .stats
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        s.tracked_series = self
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .series
            .len();
        s
    }

    /// One request, retried with exponential backoff and jitter on UNAVAILABLE,
    /// DEADLINE_EXCEEDED and RESOURCE_EXHAUSTED while the push deadline allows.
    /// Returns the result, the attempts and how many of them the server answered.
    async fn send(
        &self,
        req: CreateTimeSeriesRequest,
        deadline: Instant,
    ) -> (Result<(), tonic::Status>, u64, u64) {
        let mut backoff = self.cfg.retry_initial;
        let mut attempts = 0u64;
        let mut answered = 0u64;
        // The failure that made us wait: when a backoff sleep overshoots the deadline, that
        // failure (not a made-up DEADLINE_EXCEEDED) is why the points were lost.
        let mut last: Option<tonic::Status> = None;
        loop {
            let Some(left) = deadline
                .checked_duration_since(Instant::now())
                .filter(|d| !d.is_zero())
            else {
                let status = last.unwrap_or_else(|| {
                    tonic::Status::deadline_exceeded("push deadline passed before the request")
                });
                return (Err(status), attempts, answered);
            };
            attempts += 1;
            let mut r = tonic::Request::new(req.clone());
            r.set_timeout(left);
            let mut client = self.client.clone();
            let status = match tokio::time::timeout(left, client.create_time_series(r)).await {
                Ok(Ok(_)) => return (Ok(()), attempts, answered + 1),
                Ok(Err(s)) => {
                    if answered_by_server(&s) {
                        answered += 1;
                    }
                    s
                }
                Err(_) => {
                    let status = last.unwrap_or_else(|| {
                        tonic::Status::deadline_exceeded(format!(
                            "no answer within the push deadline ({:?})",
                            self.cfg.push_deadline
                        ))
                    });
                    return (Err(status), attempts, answered);
                }
            };
            if !should_retry(&status) {
                return (Err(cut_short(status, last)), attempts, answered);
            }
            let wait = backoff.mul_f64(0.5 + 0.5 * jitter_fraction());
            if Instant::now() + wait >= deadline {
                return (Err(status), attempts, answered);
            }
            tracing::debug!(code = ?status.code(), error = %status.message(), ?wait, "CreateTimeSeries failed; retrying");
            self.stats
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .retries += 1;
            tokio::time::sleep(wait).await;
            last = Some(status);
            backoff = backoff
                .checked_mul(2)
                .unwrap_or(self.cfg.retry_max)
                .min(self.cfg.retry_max);
        }
    }

    async fn push_all(
        &self,
        snap: &Snapshot,
        progress: &PushProgress,
    ) -> Result<PushReport, PushError> {
        let started = Instant::now();
        let deadline = started + self.cfg.push_deadline;
        let drafts = drafts(snap, self.cfg.own_node.as_deref(), self.cfg.node_series);
        progress.plan(drafts.len() as u64);
        let common = resource_labels(&self.cfg, snap)?;
        let now = truncate_ms(SystemTime::now());
        let (selected, skipped) = self
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .select(drafts, now, self.started, self.cfg.min_sampling_period);
        progress.lose(SAMPLING_PERIOD, skipped);
        if skipped > 0 {
            tracing::debug!(
                sink = "gcm",
                skipped,
                period = ?self.cfg.min_sampling_period,
                "series left out: written less than the sampling period ago"
            );
        }
        let name = format!("projects/{}", common[0].1);
        let mut batches = Vec::new();
        let mut it = selected.into_iter().peekable();
        while it.peek().is_some() {
            let chunk: Vec<_> = it.by_ref().take(self.cfg.max_series_per_request).collect();
            let mut keys = Vec::with_capacity(chunk.len());
            let mut drafts = Vec::with_capacity(chunk.len());
            for (k, prev, d, interval) in chunk {
                keys.push((k, prev));
                drafts.push((d, interval));
            }
            batches.push((keys, drafts));
        }
        // Requests are built as they are sent (at most `concurrency` at a time): at 5,000 nodes
        // all 75,000 series as messages at once were ~150 MB.
        let common = &common;
        let sent: Vec<Sent> = stream::iter(batches.into_iter().map(|(keys, drafts)| {
            let points = drafts.len() as u64;
            let name = name.clone();
            async move {
                let req = CreateTimeSeriesRequest {
                    name,
                    time_series: drafts
                        .iter()
                        .map(|(d, interval)| time_series(&self.cfg, d, common, *interval))
                        .collect(),
                };
                drop(drafts);
                let (result, attempts, answered) = self.send(req, deadline).await;
                if result.is_ok() {
                    progress.accept(points);
                }
                Sent {
                    keys,
                    points,
                    attempts,
                    answered,
                    result,
                }
            }
        }))
        .buffer_unordered(self.cfg.concurrency)
        .collect()
        .await;
        self.account(sent, skipped, now, progress)
    }

    /// Counts what the requests did, undoes the marks of requests that wrote nothing, and
    /// turns failures into one [`PushError`].
    fn account(
        &self,
        sent: Vec<Sent>,
        skipped: u64,
        now: SystemTime,
        progress: &PushProgress,
    ) -> Result<PushReport, PushError> {
        let mut tally = Tally::default();
        for s in sent {
            tally.add(s);
        }
        progress.accept(tally.partly_written);
        for (&reason, &n) in &tally.dropped {
            progress.lose(reason, n);
        }
        if !tally.undo.is_empty() {
            let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            for (k, prev) in std::mem::take(&mut tally.undo) {
                if let Some(m) = st.series.get_mut(&k)
                    && m.last_end == Some(now)
                {
                    m.last_end = prev;
                }
            }
        }
        {
            let mut stats = self.stats.lock().unwrap_or_else(PoisonError::into_inner);
            stats.pushes += 1;
            stats.points += tally.report.points;
            stats.requests += tally.report.requests;
            stats.skipped_series += skipped;
            stats.last_skipped = skipped;
            for (r, n) in &tally.lost {
                *stats.failed_points.entry(r.clone()).or_default() += n;
            }
        }
        tally.into_result()
    }
}

impl Sink for GcmSink {
    fn name(&self) -> &'static str {
        "gcm"
    }

    /// Until every series written may be written again (its sampling period after its last
    /// point), plus a millisecond for the truncation of point times.
    fn ready_in(&self) -> Duration {
        let now = SystemTime::now();
        let period = self.cfg.min_sampling_period;
        let st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        st.series
            .values()
            .filter_map(|m| m.last_end?.checked_add(period))
            .filter_map(|due| due.duration_since(now).ok())
            .max()
            .map_or(Duration::ZERO, |d| d + Duration::from_millis(1))
    }

    async fn push(
        &self,
        snapshot: Arc<Snapshot>,
        scope: PushScope,
    ) -> Result<PushReport, PushError> {
        self.push_tracked(snapshot, scope, &PushProgress::default())
            .await
    }

    async fn push_tracked(
        &self,
        snapshot: Arc<Snapshot>,
        scope: PushScope,
        progress: &PushProgress,
    ) -> Result<PushReport, PushError> {
        match scope {
            // Every gke-prober metric describes the cluster: the leader writes them.
            PushScope::InstanceOnly => Ok(PushReport::default()),
            PushScope::All => self.push_all(&snapshot, progress).await,
        }
    }
}
