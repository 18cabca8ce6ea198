//! The push-output runner: each [`Sink`] on its own ticker in its own task, with a timeout; a
//! tick that finds the previous push still running is skipped and counted; on shutdown one
//! final push of the newest snapshot, bounded. Pull outputs (`/metrics`, `/watcher`) are never
//! slowed: pushes read the same immutable snapshot in their own tasks.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::api::server::Published;
use crate::model::SinkPush;
use crate::provider::Provider;
use crate::sink::Sink;

/// When a sink pushes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SinkSchedule {
    pub interval: Duration,
    pub timeout: Duration,
    /// Bound on the final push at shutdown (and on waiting for one in flight).
    pub final_push: Duration,
}

async fn push_once<S: Sink>(
    sink: &S,
    published: &Published,
    timeout: Duration,
    provider: &dyn Provider,
) {
    let started = Instant::now();
    let result = tokio::time::timeout(timeout, sink.push(published.snapshot.clone())).await;
    let (report, failure) = match result {
        Ok(Ok(r)) => (r, None),
        Ok(Err(e)) => {
            tracing::warn!(sink = sink.name(), reason = %e.reason, error = %e.message, "push failed");
            (e.sent, Some(e.reason))
        }
        Err(_) => {
            tracing::warn!(sink = sink.name(), ?timeout, "push timed out");
            (Default::default(), Some("timeout".to_string()))
        }
    };
    provider.sink().record_sink_push(
        sink.name(),
        SinkPush {
            at: SystemTime::now(),
            duration: started.elapsed(),
            points: report.points,
            requests: report.requests,
            failure,
        },
    );
}

/// Runs `sink` until `cancel`, then makes the final push.
pub async fn run_sink<S: Sink>(
    sink: Arc<S>,
    schedule: SinkSchedule,
    published: watch::Receiver<Arc<Published>>,
    provider: Arc<dyn Provider>,
    cancel: CancellationToken,
) {
    let mut ticker = tokio::time::interval(schedule.interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticker.tick().await; // the first tick fires at once; the first push waits one interval
    let mut in_flight: Option<JoinHandle<()>> = None;
    loop {
        tokio::select! {
            _ = cancel.cancelled() => break,
            _ = ticker.tick() => {}
        }
        if in_flight.as_ref().is_some_and(|h| !h.is_finished()) {
            tracing::warn!(
                sink = sink.name(),
                "previous push still running; tick skipped"
            );
            provider.sink().record_sink_skipped(sink.name());
            continue;
        }
        let current = published.borrow().clone();
        if current.snapshot.tick == 0 {
            continue;
        }
        let (sink, provider) = (sink.clone(), provider.clone());
        in_flight = Some(tokio::spawn(async move {
            push_once(sink.as_ref(), &current, schedule.timeout, provider.as_ref()).await;
        }));
    }
    // Shutdown: let a running push finish (bounded), then push the newest snapshot once more.
    let deadline = Instant::now() + schedule.final_push;
    if let Some(h) = in_flight {
        if tokio::time::timeout(schedule.final_push, h).await.is_err() {
            tracing::warn!(
                sink = sink.name(),
                "push in flight at shutdown did not finish in time"
            );
        }
    }
    let left = deadline.saturating_duration_since(Instant::now());
    let current = published.borrow().clone();
    if !left.is_zero() && current.snapshot.tick > 0 {
        tracing::info!(sink = sink.name(), "final push");
        push_once(
            sink.as_ref(),
            &current,
            left.min(schedule.timeout),
            provider.as_ref(),
        )
        .await;
    }
}
