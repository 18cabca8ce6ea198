//! The push-output runner: each [`Sink`] on its own ticker in its own task, with a timeout; a
//! tick that finds the previous push still running is skipped and counted; on shutdown one
//! final push of the newest snapshot, bounded. Pull outputs (`/metrics`, `/watcher`) are never
//! slowed: pushes read the same immutable snapshot in their own tasks.
//!
//! Nothing is queued: at most one push per sink is in flight, and it carries the newest
//! snapshot when it starts; a tick that finds it still running is skipped. So what a push
//! output holds never grows with an outage, and the first push after one sends one tick's
//! points (the newest values), never a backlog. Every point of every tick is either accepted
//! by the receiver (`kube_prober_sink_points_total`) or counted as lost with its reason
//! (`kube_prober_sink_points_dropped_total`): a skipped tick loses the points of the push
//! still in flight (the count of that tick's points without turning its snapshot into series),
//! a push cut short by its deadline or a lost Lease loses what it had not delivered.

pub mod options;
pub use options::{PushConfig, PushOptions, SinkKind};

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::hub::Provider;
use crate::model::SinkPush;
use crate::outputs::published::Published;
use crate::outputs::{PushProgress, PushScope, Sink};

/// Whether this instance may push cluster-level series: `None` when there is no election
/// (node role, host role, one cluster replica), else the leader elector's view, which turns
/// `false` the moment the Lease is lost.
pub type Leadership = Option<watch::Receiver<bool>>;

fn scope_of(leadership: &Leadership) -> PushScope {
    match leadership {
        Some(rx) if !*rx.borrow() => PushScope::InstanceOnly,
        _ => PushScope::All,
    }
}

/// When a sink pushes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SinkSchedule {
    pub interval: Duration,
    pub timeout: Duration,
    /// Bound on the final push at shutdown (and on waiting for one in flight).
    pub final_push: Duration,
}

/// The push in flight: its task, its scope and what it has done so far.
struct InFlight {
    handle: JoinHandle<()>,
    scope: PushScope,
    progress: Arc<PushProgress>,
}

async fn push_once<S: Sink>(
    sink: &S,
    published: &Published,
    scope: PushScope,
    timeout: Duration,
    provider: &dyn Provider,
    progress: &PushProgress,
) {
    let started = Instant::now();
    let push = sink.push_tracked(published.snapshot.clone(), scope, progress);
    let result = tokio::time::timeout(timeout, push).await;
    let (report, failure) = match result {
        Ok(Ok(r)) => (r, None),
        Ok(Err(e)) => {
            tracing::warn!(sink = sink.name(), reason = %e.reason, error = %e.message, "push failed");
            (e.sent, Some(e.reason))
        }
        Err(_) => {
            tracing::warn!(sink = sink.name(), ?timeout, "push timed out");
            // Cut short: what the receiver accepted so far still counts.
            let points = progress.accepted();
            let report = crate::outputs::PushReport {
                points,
                requests: 0,
            };
            (report, Some("timeout".to_string()))
        }
    };
    let dropped = progress.dropped(failure.as_deref());
    if !dropped.is_empty() {
        tracing::debug!(sink = sink.name(), ?dropped, "points lost");
    }
    provider.sink().record_sink_push(
        sink.name(),
        SinkPush {
            at: SystemTime::now(),
            duration: started.elapsed(),
            points: report.points,
            requests: report.requests,
            failure,
            dropped,
        },
    );
}

/// Starts `sink` on its own ticker in a task of its own ([`run_sink`]), pushing the bodies
/// `published` holds, recording into `provider`, until `cancel`.
pub fn spawn<S: Sink>(
    sink: Arc<S>,
    schedule: SinkSchedule,
    published: &watch::Receiver<Arc<Published>>,
    provider: Arc<dyn Provider>,
    leadership: &Leadership,
    cancel: &CancellationToken,
) -> JoinHandle<()> {
    tokio::spawn(run_sink(
        sink,
        schedule,
        published.clone(),
        provider,
        leadership.clone(),
        cancel.clone(),
    ))
}

/// Runs `sink` until `cancel`, then makes the final push. A push of cluster-level series that
/// is running when the Lease is lost is aborted at once and counted as `lost_lease`.
pub async fn run_sink<S: Sink>(
    sink: Arc<S>,
    schedule: SinkSchedule,
    published: watch::Receiver<Arc<Published>>,
    provider: Arc<dyn Provider>,
    mut leadership: Leadership,
    cancel: CancellationToken,
) {
    let mut ticker = tokio::time::interval(schedule.interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticker.tick().await; // the first tick fires at once; the first push waits one interval
    let mut in_flight: Option<InFlight> = None;
    // Points of the newest push that knew them: what a skipped tick loses when the push in
    // flight does not know its own yet.
    let mut last_planned = 0u64;
    // Held once the elector is gone, so that `leadership` stays `false` and never changes.
    let mut _not_leading: Option<watch::Sender<bool>> = None;
    // Whether this instance led when `lease_lost` last looked.
    let mut leading = leadership.as_ref().is_some_and(|rx| *rx.borrow());
    loop {
        tokio::select! {
            _ = cancel.cancelled() => break,
            _ = ticker.tick() => {}
            lost = lease_lost(&mut leadership, &mut leading) => {
                if !lost {
                    leading = false;
                    // The elector is gone: not leading from now on (and no busy loop here).
                    tracing::warn!(sink = sink.name(), "leader elector stopped; pushing only this instance's series");
                    let (tx, rx) = watch::channel(false);
                    _not_leading = Some(tx);
                    leadership = Some(rx);
                }
                abort_cluster_push(sink.name(), &in_flight, provider.as_ref());
                continue;
            }
        }
        if skip_tick(
            sink.name(),
            &in_flight,
            &mut last_planned,
            provider.as_ref(),
        ) {
            continue;
        }
        let current = published.borrow().clone();
        if current.snapshot.tick == 0 {
            continue;
        }
        let scope = scope_of(&leadership);
        let progress = Arc::new(PushProgress::default());
        let (sink, provider, tracked) = (sink.clone(), provider.clone(), progress.clone());
        let handle = tokio::spawn(async move {
            push_once(
                sink.as_ref(),
                &current,
                scope,
                schedule.timeout,
                provider.as_ref(),
                &tracked,
            )
            .await;
        });
        in_flight = Some(InFlight {
            handle,
            scope,
            progress,
        });
    }
    final_push(sink, schedule, &published, provider, &leadership, in_flight).await;
}

/// Whether this tick is skipped because the previous push is still running; if so it is
/// counted with its points (those of the push in flight, else `last_planned`). Otherwise
/// notes the points of the push that ended in `last_planned`.
fn skip_tick(
    name: &str,
    in_flight: &Option<InFlight>,
    last_planned: &mut u64,
    provider: &dyn Provider,
) -> bool {
    let Some(f) = in_flight else {
        return false;
    };
    let planned = f.progress.planned();
    if f.handle.is_finished() {
        if planned > 0 {
            *last_planned = planned;
        }
        return false;
    }
    let points = if planned > 0 { planned } else { *last_planned };
    tracing::warn!(
        sink = name,
        points,
        "previous push still running; tick skipped"
    );
    provider.sink().record_sink_skipped(name, points);
    true
}

/// On a lost Lease: aborts a push of cluster-level series still running, counted as failed.
fn abort_cluster_push(name: &str, in_flight: &Option<InFlight>, provider: &dyn Provider) {
    if let Some(f) = in_flight
        && f.scope == PushScope::All
        && !f.handle.is_finished()
    {
        f.handle.abort();
        tracing::warn!(
            sink = name,
            "lease lost: push of cluster-level series aborted"
        );
        provider.sink().record_sink_push(
            name,
            SinkPush {
                at: SystemTime::now(),
                duration: Duration::ZERO,
                points: f.progress.accepted(),
                requests: 0,
                failure: Some("lost_lease".into()),
                dropped: f.progress.dropped(Some("lost_lease")),
            },
        );
    }
}

/// Shutdown: lets a running push finish (bounded), then pushes the newest snapshot once more.
async fn final_push<S: Sink>(
    sink: Arc<S>,
    schedule: SinkSchedule,
    published: &watch::Receiver<Arc<Published>>,
    provider: Arc<dyn Provider>,
    leadership: &Leadership,
    in_flight: Option<InFlight>,
) {
    let deadline = Instant::now() + schedule.final_push;
    if let Some(f) = in_flight
        && tokio::time::timeout(schedule.final_push, f.handle)
            .await
            .is_err()
    {
        tracing::warn!(
            sink = sink.name(),
            "push in flight at shutdown did not finish in time"
        );
    }
    let left = deadline.saturating_duration_since(Instant::now());
    if !left.is_zero() && published.borrow().snapshot.tick > 0 {
        wait_until_ready(sink.as_ref(), left).await;
    }
    let left = deadline.saturating_duration_since(Instant::now());
    let current = published.borrow().clone();
    if !left.is_zero() && current.snapshot.tick > 0 {
        tracing::info!(sink = sink.name(), "final push");
        push_once(
            sink.as_ref(),
            &current,
            scope_of(leadership),
            left.min(schedule.timeout),
            provider.as_ref(),
            &PushProgress::default(),
        )
        .await;
    }
}

/// Time kept for the final push itself after waiting for the sink to be ready (at most half
/// of what is left).
const FINAL_SEND_RESERVE: Duration = Duration::from_secs(2);

/// Waits until the sink can write the newest value of every series (Cloud Monitoring refuses a
/// point less than its sampling period after the previous one), if that wait still leaves time
/// for the push within `left`; otherwise pushes at once, and series written too recently keep
/// their previous point (logged).
async fn wait_until_ready<S: Sink>(sink: &S, left: Duration) {
    let wait = sink.ready_in();
    if wait.is_zero() {
        return;
    }
    if wait + FINAL_SEND_RESERVE.min(left / 2) <= left {
        tracing::info!(
            sink = sink.name(),
            ?wait,
            "final push waits for the sampling period"
        );
        tokio::time::sleep(wait).await;
    } else {
        tracing::warn!(
            sink = sink.name(),
            ?wait,
            ?left,
            "final push cannot wait for the sampling period within the shutdown timeout; series written less than a period ago keep their previous point"
        );
    }
}

/// Resolves with `true` when leadership turns from held to lost, with `false` when the elector
/// has gone away (the caller then holds a channel of its own); never resolves without an
/// election.
async fn lease_lost(leadership: &mut Leadership, leading: &mut bool) -> bool {
    let Some(rx) = leadership else {
        return std::future::pending().await;
    };
    loop {
        // Compared with what the runner saw last, kept outside this future: `select!` drops it
        // whenever a tick wins, and a loss that arrives then must still be seen by the next call.
        let now = *rx.borrow_and_update();
        let lost = *leading && !now;
        *leading = now;
        if lost {
            return true;
        }
        if rx.changed().await.is_err() {
            return false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The runner's `select!` drops `lease_lost` whenever a tick wins; a loss that arrives
    /// while it handles that tick was missed (the next call took the new `false` as its
    /// starting point and waited for another change), so the cluster-level push ran on.
    #[tokio::test]
    async fn a_loss_that_arrives_between_two_looks_is_still_seen() {
        let (tx, rx) = watch::channel(true);
        let mut leadership: Leadership = Some(rx);
        let mut leading = true;
        let first = tokio::time::timeout(
            Duration::from_millis(10),
            lease_lost(&mut leadership, &mut leading),
        )
        .await;
        assert!(first.is_err(), "nothing changed yet");
        tx.send(false).unwrap();
        let lost = tokio::time::timeout(
            Duration::from_secs(5),
            lease_lost(&mut leadership, &mut leading),
        )
        .await;
        assert_eq!(lost, Ok(true));
        // Gaining and losing again is one more loss; a dropped elector is `false`.
        tx.send(true).unwrap();
        let first = tokio::time::timeout(
            Duration::from_millis(10),
            lease_lost(&mut leadership, &mut leading),
        )
        .await;
        assert!(first.is_err());
        assert!(leading);
        drop(tx);
        let gone = lease_lost(&mut leadership, &mut leading).await;
        assert!(!gone, "the elector went away");
    }
}
