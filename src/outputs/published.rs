//! What the pull outputs publish on every tick: the snapshot with its `/metrics` and
//! `/watcher` bodies, rendered once and handed out by the server and read by the push runner.

use std::sync::{Arc, Mutex};

use super::body::Body;
use super::prometheus::{Format, RenderStats, Renderer};
use super::watcher::{self, WatcherBodies, WatcherConfig};
use crate::model::Snapshot;

/// Everything the handlers serve, made once per tick.
#[derive(Debug)]
pub struct Published {
    pub snapshot: Arc<Snapshot>,
    pub metrics_text: Body,
    /// Rendered on the first OpenMetrics scrape of this snapshot, then reused: most scrapers ask
    /// for text, and at 5,000 nodes each rendering is tens of megabytes.
    metrics_openmetrics: std::sync::OnceLock<Body>,
    /// `None` until there is data: `/watcher` answers 500 then, as load-watcher does.
    pub watcher: Option<WatcherBodies>,
    /// `/watcher/health`: whether the usage source behind `/watcher` is healthy.
    pub watcher_healthy: bool,
    /// `/readyz`: a tick has been made after every watcher's first successful list and every
    /// other source's first run ([`crate::model::SourceStatus::synced`]).
    pub ready: bool,
    /// What the previous bodies were made of, for the next tick and the OpenMetrics body.
    renderers: Arc<Renderers>,
}

/// The renderers kept from tick to tick: each writes again only what changed since the
/// snapshot it rendered last.
#[derive(Debug)]
pub struct Renderers {
    text: Mutex<Renderer>,
    openmetrics: Mutex<Renderer>,
    watcher: Mutex<watcher::WatcherCache>,
}

impl Default for Renderers {
    fn default() -> Self {
        Renderers {
            text: Mutex::new(Renderer::new(Format::Text)),
            openmetrics: Mutex::new(Renderer::new(Format::OpenMetrics)),
            watcher: Mutex::new(watcher::WatcherCache::default()),
        }
    }
}

impl Renderers {
    /// What the text renderer did so far (a test hook).
    pub fn text_stats(&self) -> RenderStats {
        lock(&self.text).stats()
    }

    /// `/watcher` host entries written so far (a test hook).
    pub fn watcher_entries_rendered(&self) -> u64 {
        lock(&self.watcher).entries_rendered
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A renderer left half-updated by a panic only makes it write more next time.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Published {
    /// Renders every body of `snapshot`. `usage_source` names the source behind `/watcher`.
    pub fn render(snapshot: Arc<Snapshot>, usage_source: &str) -> Self {
        Self::render_with(snapshot, usage_source, WatcherConfig::default())
    }

    /// As [`Published::render`], with `/watcher` options.
    pub fn render_with(snapshot: Arc<Snapshot>, usage_source: &str, opts: WatcherConfig) -> Self {
        Self::render_next(&Arc::default(), snapshot, usage_source, opts)
    }

    /// As [`Published::render_with`], reusing what `renderers` made of earlier snapshots.
    pub fn render_next(
        renderers: &Arc<Renderers>,
        snapshot: Arc<Snapshot>,
        usage_source: &str,
        opts: WatcherConfig,
    ) -> Self {
        let watcher_healthy = snapshot.sources.get(usage_source).is_some_and(|s| s.up);
        Published {
            metrics_text: lock(&renderers.text).render(snapshot.clone()),
            metrics_openmetrics: std::sync::OnceLock::new(),
            watcher: watcher::render_cached(&snapshot, opts, &mut lock(&renderers.watcher)),
            watcher_healthy,
            ready: snapshot.tick > 0 && snapshot.sources_synced,
            snapshot,
            renderers: renderers.clone(),
        }
    }

    /// The renderers behind this and the next ticks' bodies.
    pub fn renderers(&self) -> &Arc<Renderers> {
        &self.renderers
    }

    /// The OpenMetrics body of this snapshot (all families but the snapshot age).
    pub fn metrics_openmetrics(&self) -> &Body {
        self.metrics_openmetrics
            .get_or_init(|| lock(&self.renderers.openmetrics).render(self.snapshot.clone()))
    }

    /// Whether the OpenMetrics body is made.
    pub(crate) fn has_openmetrics(&self) -> bool {
        self.metrics_openmetrics.get().is_some()
    }
}
