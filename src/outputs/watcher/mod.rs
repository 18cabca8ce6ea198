//! paypal/load-watcher's `/watcher` wire format: the structs (for decoding, as Trimaran does),
//! the byte-exact encoder used at tick time, and a small client.
//!
//! Encoding rules copied from load-watcher's hand-written marshalers: every key always present,
//! keys in struct order, hosts under `data.NodeMetricsMap`, `tags` `{}`, `metadata`
//! `{"dataCenter":""}`, floats as the shortest decimal with no exponent, integer times.

mod extra;
pub mod options;
pub use options::WatcherOptions;

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::model::{
    BoundMap, BoundPods, NodeLoad, NodeMap, Operator, Resource, Snapshot, Window, unix_seconds,
};
use crate::outputs::body::{self, Body, Chunk};
use crate::shared::error::{Cause, Error, Result};

/// load-watcher's `WatcherMetrics`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct WatcherMetrics {
    pub timestamp: i64,
    pub window: WatcherWindow,
    pub source: String,
    pub data: Data,
}

/// load-watcher's `Window`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct WatcherWindow {
    pub duration: String,
    pub start: i64,
    pub end: i64,
}

/// load-watcher's `Data`: the hosts sit under the key `NodeMetricsMap`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Data {
    #[serde(rename = "NodeMetricsMap", default)]
    pub node_metrics_map: BTreeMap<String, NodeMetrics>,
    /// Ours, after the host map (load-watcher's Go client skips unknown keys): per host with
    /// pods bound that its newest sample cannot show yet, their estimated load.
    #[serde(
        rename = "boundPods",
        default,
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub bound_pods: BTreeMap<String, BoundPodsEntry>,
}

/// load-watcher's `NodeMetrics`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct NodeMetrics {
    #[serde(default, deserialize_with = "null_as_empty")]
    pub metrics: Vec<Metric>,
    #[serde(default)]
    pub tags: Tags,
    #[serde(default)]
    pub metadata: Metadata,
    /// Ours, after load-watcher's keys (its Go client skips unknown keys): the time of the
    /// host's newest sample and each window's coverage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub freshness: Option<Freshness>,
}

/// A host's `freshness` key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Freshness {
    /// Unix time (seconds) of the newest sample.
    pub newest: i64,
    /// Per window (`15m`, `10m`, `5m`, `1h`), the share of it that samples cover (0-1).
    #[serde(default)]
    pub coverage: BTreeMap<String, f64>,
}

/// A host's entry in `data.boundPods`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct BoundPodsEntry {
    pub pods: u32,
    #[serde(rename = "cpuCores")]
    pub cpu_cores: f64,
    #[serde(rename = "memoryBytes")]
    pub memory_bytes: f64,
    /// Percent of the node's CPU and memory (absent without a known capacity).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<f64>,
    /// Whether (some of) it is folded into this host's CPU and Memory values.
    pub folded: bool,
}

/// load-watcher's `Tags` (always empty).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Tags {}

/// load-watcher's `Metadata`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Metadata {
    #[serde(rename = "dataCenter", default)]
    pub data_center: String,
}

/// load-watcher's `Metric`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Metric {
    #[serde(default)]
    pub name: String,
    #[serde(rename = "type", default)]
    pub kind: String,
    #[serde(default)]
    pub operator: String,
    #[serde(default)]
    pub rollup: String,
    pub value: f64,
}

fn null_as_empty<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<Metric>, D::Error> {
    Ok(Option::<Vec<Metric>>::deserialize(d)?.unwrap_or_default())
}

/// load-watcher's type constants.
pub mod kinds {
    pub const CPU: &str = "CPU";
    pub const MEMORY: &str = "Memory";
    pub const BANDWIDTH: &str = "Bandwidth";
    pub const STORAGE: &str = "Storage";
    pub const ENERGY: &str = "Energy";
}

/// load-watcher's operator constants.
pub mod operators {
    pub const AVG: &str = "AVG";
    pub const STD: &str = "STD";
    pub const LATEST: &str = "Latest";
    /// Ours, skipped by every plugin (they pick `AVG`, `STD` and `Latest` by name): the
    /// served window's quantiles, and the hour's largest sample (rollup `1h`).
    pub const P50: &str = "P50";
    pub const P90: &str = "P90";
    pub const P95: &str = "P95";
    pub const P99: &str = "P99";
    pub const MAX: &str = "MAX";
    /// The quantile operators, in `crate::hub::window::QUANTILES` order.
    pub const QUANTILES: [&str; 4] = [P50, P90, P95, P99];
}

/// The name in `source` for one of our source names.
pub fn wire_source_name(source: &str) -> &str {
    match source {
        "host" => "Host",
        "metrics_server" => "KubernetesMetricsServer",
        "prometheus" => "Prometheus",
        "signalfx" => "SignalFx",
        other => other,
    }
}

/// The pre-rendered `/watcher` bodies of one snapshot: the head (made each tick) and every
/// host entry as deflated blocks of consecutive nodes (shared between ticks while none of a
/// block's nodes changed). Only compressed bytes are held: the gzip answer is joined from
/// them, the plain answer inflated from them on the first plain request, and a `?host=` answer
/// is written on demand from the snapshot's node map.
#[derive(Debug)]
pub struct WatcherBodies {
    /// Everything up to the first host entry.
    head: Bytes,
    /// Every host entry, comma-separated, in name order, as deflated blocks.
    blocks: Arc<Vec<Arc<Block>>>,
    /// Everything after the last host entry (see [`extra::tail`]).
    tail: Bytes,
    /// The nodes the entries were written from and their estimates, with the window and
    /// options (for `?host=`).
    nodes: Arc<NodeMap>,
    bound: Arc<BoundMap>,
    window: Window,
    opts: WatcherConfig,
    /// The time hosts were found fresh at, and the answer's `window.end`.
    now: SystemTime,
    end: SystemTime,
    /// The body gzip-compressed, joined on the first request that accepts gzip: one piece,
    /// so an answer is one write with a `Content-Length`, as a static file's.
    all_gzip: std::sync::OnceLock<Bytes>,
    /// How many times the gzip body was joined (once per body at most; a test hook).
    gzips: std::sync::atomic::AtomicU64,
    /// The plain body, inflated on the first request of this body that does not accept gzip
    /// and kept with it: held only while such a client polls (Trimaran's Go client asks for
    /// gzip), so every plain answer of a tick after the first is one write of these bytes,
    /// as a static file's. `None`: a block did not inflate (not seen: the bytes are our own).
    all_plain: std::sync::OnceLock<Option<Bytes>>,
}

/// The entries of consecutive nodes (of the served window), held compressed only
/// ([`Chunk::compressed`]: a piece that stands alone, so gzip streams are joined from pieces
/// deflated once and each piece inflates by itself). Its boundaries come from the nodes' names
/// ([`body::ends_block`], ~64 nodes a block), so adding or removing a node changes one
/// block.
#[derive(Debug)]
struct Block {
    /// The name of its first node, and how many nodes it holds.
    first: Arc<str>,
    len: usize,
    /// Whether it opens the host map (its bytes then start without a comma).
    leads: bool,
    entries: Arc<Chunk>,
}

impl PartialEq for WatcherBodies {
    /// The same bytes, window and options (the bodies of two ticks with the same data).
    fn eq(&self, other: &Self) -> bool {
        self.window == other.window
            && self.opts == other.opts
            && self.head == other.head
            && self.all() == other.all()
    }
}

impl WatcherBodies {
    /// The body for all hosts, as pieces one after the other: the head, each block inflated
    /// when the piece is asked for, the tail ([`WatcherBodies::all_plain`] joins them once).
    /// An error is a block that does not inflate (not seen: the bytes are our own).
    pub fn plain_pieces(&self) -> impl Iterator<Item = std::io::Result<Bytes>> + Send + 'static {
        let blocks = self.blocks.clone();
        let tail = self.tail.clone();
        std::iter::once(Ok(self.head.clone()))
            .chain((0..blocks.len()).map(move |i| blocks[i].entries.try_text()))
            .chain(std::iter::once(Ok(tail)))
    }

    /// The body for all hosts in one piece (inflated and joined: tests and small bodies; empty
    /// when a block does not inflate).
    pub fn all(&self) -> Bytes {
        self.join_plain().unwrap_or_default()
    }

    fn join_plain(&self) -> std::io::Result<Bytes> {
        let mut out = Vec::with_capacity(self.plain_len());
        for piece in self.plain_pieces() {
            out.extend_from_slice(&piece?);
        }
        Ok(Bytes::from(out))
    }

    /// The plain body for all hosts in one piece: inflated once, on the first call, and kept
    /// with this body (see the field); `None` when a block does not inflate.
    pub fn all_plain(&self) -> Option<&Bytes> {
        self.all_plain
            .get_or_init(|| {
                self.join_plain()
                    .inspect_err(
                        |e| tracing::error!(error = %e, "/watcher: a block did not inflate"),
                    )
                    .ok()
            })
            .as_ref()
    }

    /// Whether [`WatcherBodies::all_plain`] is made already.
    pub fn has_plain(&self) -> bool {
        self.all_plain.get().is_some()
    }

    /// Length of the plain body for all hosts.
    pub fn plain_len(&self) -> usize {
        self.head.len()
            + self.blocks.iter().map(|b| b.entries.len()).sum::<usize>()
            + self.tail.len()
    }

    /// The body for `?host=host`, when that host has data: written now from its load.
    pub fn host(&self, host: &str) -> Option<Bytes> {
        let (name, node) = self.nodes.get_key_value(host)?;
        node.windows.iter().find(|ws| ws.window == self.window)?;
        if !is_fresh(node, self.now, self.opts) {
            return None;
        }
        let bound = self.bound.get(host).map(|b| &**b);
        let mut entry = String::with_capacity(640);
        push_json_string(&mut entry, name);
        entry.push(':');
        node_entry(&mut entry, (node, bound), self.window, self.opts, self.end);
        let hosts = bound.map(|b| (&**name, &**node, b));
        let tail = extra::tail(hosts.into_iter(), self.opts.fold, self.end);
        Some(Bytes::from(
            [&self.head[..], entry.as_bytes(), tail.as_bytes()].concat(),
        ))
    }

    /// The body for all hosts as one gzip stream: joined once, on the first call, from the
    /// head and tail compressed then and the blocks compressed once for every body that
    /// shares them (a copy of the compressed bytes, a tenth of the body or less).
    pub fn all_gzip(&self) -> &Bytes {
        self.all_gzip.get_or_init(|| {
            self.gzips
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.join_gzip()
        })
    }

    /// The head (compressed now), the blocks' compressed forms and the tail as one gzip
    /// stream ([`Body::gzip_whole`]), in one piece.
    fn join_gzip(&self) -> Bytes {
        let mut chunks = Vec::with_capacity(self.blocks.len() + 1);
        chunks.push(Chunk::new(self.head.to_vec()));
        chunks.extend(self.blocks.iter().map(|b| b.entries.clone()));
        Body { chunks }.gzip_whole(std::slice::from_ref(&self.tail))
    }

    /// Whether [`WatcherBodies::all_gzip`] is made already.
    pub fn has_gzip(&self) -> bool {
        self.all_gzip.get().is_some()
    }

    /// How many times the gzip body was joined (1 at most).
    pub fn gzip_count(&self) -> u64 {
        self.gzips.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether the host entries of `self` and `other` are the same pieces (and so compressed
    /// once for both): true for bodies of consecutive ticks when no node changed between them.
    pub fn shares_entries_with(&self, other: &WatcherBodies) -> bool {
        Arc::ptr_eq(&self.blocks, &other.blocks)
    }

    /// How many of this body's blocks of entries are `other`'s own (compressed once for
    /// both), and how many blocks it has.
    pub fn blocks_shared_with(&self, other: &WatcherBodies) -> (usize, usize) {
        let theirs: std::collections::HashSet<*const Block> =
            other.blocks.iter().map(Arc::as_ptr).collect();
        let shared = self
            .blocks
            .iter()
            .filter(|b| theirs.contains(&Arc::as_ptr(b)))
            .count();
        (shared, self.blocks.len())
    }
}

/// The window `/watcher` serves: 15m, else 10m (never 5m), as load-watcher does.
pub fn served_window(snap: &Snapshot) -> Option<Window> {
    [Window::FifteenMinutes, Window::TenMinutes]
        .into_iter()
        .find(|w| {
            snap.nodes
                .values()
                .any(|n| n.windows.iter().any(|ws| ws.window == *w))
        })
}

/// How `/watcher` writes values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatcherConfig {
    /// load-watcher multiplies every Prometheus value by 100, so bandwidth comes out as bytes/s
    /// × 100 and energy as joules × 100. Off (the default): CPU and Memory are percentages and
    /// every other type keeps its own unit. On: every value is × 100, as load-watcher.
    pub legacy_scaling: bool,
    /// A host whose newest sample is older than this leaves the answer (`None`: never).
    pub max_age: Option<Duration>,
    /// Which estimated load of just-bound pods is added to the CPU and Memory values.
    pub fold: Fold,
}

impl Default for WatcherConfig {
    fn default() -> Self {
        WatcherConfig {
            legacy_scaling: false,
            max_age: Some(DEFAULT_MAX_AGE),
            fold: Fold::Off,
        }
    }
}

/// `--watcher-max-age`'s default: three missed scrapes of metrics-server at its own default
/// resolution (60 s), twelve at the 15 s most installs use, and Koordinator's
/// `nodeMetricExpirationSeconds`. Trimaran polls every 30 s, so a host that stopped leaves its
/// scores within three and a half minutes.
pub const DEFAULT_MAX_AGE: Duration = Duration::from_secs(180);

/// TargetLoadPacking adds the pods bound after `window.end` and those bound less than this
/// before it (`metricsAgentReportingIntervalSeconds` in scheduler-plugins' `pkg/trimaran`).
pub const TLP_REPORTING_INTERVAL: Duration = Duration::from_secs(60);

/// What `--watcher-estimate-bound-pods` folds into the CPU and Memory values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Fold {
    /// Nothing: the estimate is served beside the values only (`boundPods`).
    #[default]
    Off,
    /// Every pod the newest sample cannot show: for LoadVariationRiskBalancing,
    /// LowRiskOverCommitment and Peaks, which add nothing for just-bound pods.
    All,
    /// Only the pods bound more than [`TLP_REPORTING_INTERVAL`] before the answer's
    /// `window.end`: the ones TargetLoadPacking does not add itself.
    BeforeWindowEnd,
}

impl Fold {
    pub fn parse(s: &str) -> Option<Fold> {
        match s {
            "off" | "false" => Some(Fold::Off),
            "all" | "true" => Some(Fold::All),
            "before-window-end" => Some(Fold::BeforeWindowEnd),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Fold::Off => "off",
            Fold::All => "all",
            Fold::BeforeWindowEnd => "before-window-end",
        }
    }

    /// The bound pods folded: those bound before the returned time (`None`: all), or none.
    fn cutoff(self, end: SystemTime) -> Option<Option<SystemTime>> {
        match self {
            Fold::Off => None,
            Fold::All => Some(None),
            Fold::BeforeWindowEnd => Some(end.checked_sub(TLP_REPORTING_INTERVAL)),
        }
    }
}

/// Whether `node`'s newest sample is recent enough at `now` to be served.
pub fn is_fresh(node: &NodeLoad, now: SystemTime, opts: WatcherConfig) -> bool {
    opts.max_age
        .is_none_or(|max| now.duration_since(node.latest_at).unwrap_or_default() <= max)
}

/// What `/watcher` made of the previous tick's nodes: a block of entries is written and
/// deflated again only when one of its nodes' load (or the served window or options)
/// changed, and when no node changed at all (the same node map) the blocks are reused whole,
/// without visiting a node.
#[derive(Debug, Default)]
pub struct WatcherCache {
    whole: Option<Whole>,
    /// Hosts with data left out as stale at the last choice (logged when it changes).
    pub stale_hosts: usize,
    /// Host entries written so far (a test hook: 0 more on a tick without change, the
    /// entries of one block when one node changed).
    pub entries_rendered: u64,
    /// Blocks of entries written and deflated so far (a test hook).
    pub blocks_rendered: u64,
}

/// Everything of the previous body that depends only on the node map, the window and the
/// options: reused as long as those are the same.
#[derive(Debug)]
struct Whole {
    nodes: Arc<NodeMap>,
    /// The estimates the tail (and, when folded, the entries) were written from.
    bound: Arc<BoundMap>,
    window: Window,
    opts: WatcherConfig,
    /// The snapshot time its hosts were found fresh at.
    now: SystemTime,
    /// When the first of its hosts turns stale (then the hosts are chosen again).
    next_stale_at: SystemTime,
    end: SystemTime,
    source: String,
    blocks: Arc<Vec<Arc<Block>>>,
    tail: Bytes,
}

/// Renders the bodies, or `None` when there is no data (load-watcher answers 500 then).
pub fn render(snap: &Snapshot, opts: WatcherConfig) -> Option<WatcherBodies> {
    render_cached(snap, opts, &mut WatcherCache::default())
}

/// As [`render`], reusing the blocks of entries whose nodes' load did not change since
/// `cache` was last used.
pub fn render_cached(
    snap: &Snapshot,
    opts: WatcherConfig,
    cache: &mut WatcherCache,
) -> Option<WatcherBodies> {
    let Some(window) = served_window(snap) else {
        cache.whole = None;
        return None;
    };
    let previous = cache
        .whole
        .take()
        .filter(|w| w.window == window && w.opts == opts);
    let w = match previous {
        Some(mut w)
            if Arc::ptr_eq(&w.nodes, &snap.nodes) && snap.generated_at < w.next_stale_at =>
        {
            if same_nodes(snap, window, &mut w) {
                w
            } else {
                whole(snap, window, opts, Some(w), cache)
            }
        }
        previous => whole(snap, window, opts, previous, cache),
    };
    // The data stands for the time of the oldest newest-sample among the hosts served: a
    // consumer (TargetLoadPacking) adds every pod bound after `end` on top, so an `end` later
    // than the data would hide load; a stale host is not served, so it cannot move `end`.
    let end_s = unix_seconds(w.end).floor() as i64;
    let start_s = end_s - window.duration().as_secs() as i64;
    let timestamp = (unix_seconds(snap.generated_at).floor() as i64).max(end_s);

    let mut head = String::with_capacity(160);
    let _ = write!(
        head,
        "{{\"timestamp\":{timestamp},\"window\":{{\"duration\":\"{}\",\"start\":{start_s},\"end\":{end_s}}},\"source\":",
        window.as_str()
    );
    push_json_string(&mut head, &w.source);
    head.push_str(",\"data\":{\"NodeMetricsMap\":{");
    let bodies = WatcherBodies {
        head: Bytes::from(head),
        blocks: w.blocks.clone(),
        tail: w.tail.clone(),
        nodes: w.nodes.clone(),
        bound: w.bound.clone(),
        window,
        opts,
        now: w.now,
        end: w.end,
        all_gzip: std::sync::OnceLock::new(),
        gzips: std::sync::atomic::AtomicU64::new(0),
        all_plain: std::sync::OnceLock::new(),
    };
    cache.whole = Some(w);
    Some(bodies)
}

/// A node of the served map and its load.
type Member<'a> = (&'a Arc<str>, &'a Arc<NodeLoad>);

/// Whether node `n` has the served window.
fn has_window(n: &NodeLoad, window: Window) -> bool {
    n.windows.iter().any(|ws| ws.window == window)
}

/// The hosts served (those with the window whose newest sample is recent enough), the names
/// of those left out as stale, and when the first served one turns stale.
fn served(
    snap: &Snapshot,
    window: Window,
    opts: WatcherConfig,
) -> (Vec<Member<'_>>, Vec<&str>, SystemTime) {
    let now = snap.generated_at;
    let mut stale: Vec<&str> = Vec::new();
    let mut next_stale_at = now + Duration::from_secs(365 * 86_400);
    let nodes = snap
        .nodes
        .iter()
        .filter(|(_, n)| has_window(n, window))
        .filter(|(name, n)| {
            let fresh = is_fresh(n, now, opts);
            match opts.max_age {
                Some(max) if fresh => next_stale_at = next_stale_at.min(n.latest_at + max),
                _ if !fresh => stale.push(name),
                _ => {}
            }
            fresh
        })
        .collect();
    (nodes, stale, next_stale_at)
}

/// The previous part for a snapshot with the same node map and no host turned stale: as it is
/// when the estimates are the same too; with only the tail written again when they are not
/// folded into the entries (a pod bound, with every node's load the same `Arc`, costs the
/// small tail, not a walk of the hosts). False: the entries must be looked at.
fn same_nodes(snap: &Snapshot, window: Window, w: &mut Whole) -> bool {
    if Arc::ptr_eq(&w.bound, &snap.bound) {
        return true;
    }
    if w.opts.fold != Fold::Off {
        return false;
    }
    // The hosts served are the previous part's: the same map, none turned stale since.
    w.tail = Bytes::from(extra::tail(
        served_bound(snap, window, w.opts, w.now),
        w.opts.fold,
        w.end,
    ));
    w.bound = snap.bound.clone();
    true
}

/// The served hosts (at `now`) that have an estimate, in name order.
fn served_bound(
    snap: &Snapshot,
    window: Window,
    opts: WatcherConfig,
    now: SystemTime,
) -> impl Iterator<Item = (&str, &NodeLoad, &BoundPods)> {
    snap.bound.iter().filter_map(move |(name, b)| {
        let n = snap.nodes.get(name)?;
        (has_window(n, window) && is_fresh(n, now, opts)).then_some((&**name, &**n, &**b))
    })
}

/// The node-map part of a body: the blocks of entries, reusing the previous part's block
/// (same window and options) where its nodes and their loads are the same, writing and
/// deflating the others one at a time through one reused buffer and compressor.
fn whole(
    snap: &Snapshot,
    window: Window,
    opts: WatcherConfig,
    previous: Option<Whole>,
    cache: &mut WatcherCache,
) -> Whole {
    let now = snap.generated_at;
    let (nodes, stale, next_stale_at) = served(snap, window, opts);
    log_stale(cache, &stale, opts);
    // With every host stale the answer is an empty map, not an error: Trimaran's collector
    // keeps its previous answer on an error, and would score on the stale data forever.
    let end = nodes
        .iter()
        .filter_map(|(_, n)| {
            n.windows
                .iter()
                .find(|ws| ws.window == window)
                .map(|ws| ws.end)
        })
        .min()
        .unwrap_or(now);
    let source = nodes
        .first()
        .map(|(_, n)| wire_source_name(&n.source))
        .unwrap_or_default()
        .to_string();

    // The previous blocks by their first node's name.
    let old: HashMap<&str, &Arc<Block>> = previous
        .as_ref()
        .map(|w| w.blocks.iter().map(|b| (&*b.first, b)).collect())
        .unwrap_or_default();
    let mut blocks = Vec::with_capacity(old.len().max(nodes.len() / 32 + 1));
    let mut plain = String::new();
    let mut compress = flate2::Compress::new(flate2::Compression::fast(), false);
    let mut from = 0;
    for (i, (name, _)) in nodes.iter().enumerate() {
        if !(body::ends_block(name) || i + 1 == nodes.len()) {
            continue;
        }
        let members = &nodes[from..=i];
        let leads = from == 0;
        from = i + 1;
        let reused = old.get(&**members[0].0).filter(|b| {
            b.leads == leads
                && same_block(previous.as_ref(), (window, end), &snap.bound, b, members)
        });
        if let Some(b) = reused {
            blocks.push(Arc::clone(b));
            continue;
        }
        cache.entries_rendered += members.len() as u64;
        cache.blocks_rendered += 1;
        let entries = block_entries(&mut plain, members, &snap.bound, leads, (window, end), opts);
        blocks.push(Arc::new(Block {
            first: members[0].0.clone(),
            len: members.len(),
            leads,
            entries: Chunk::compressed_with(&mut compress, entries.as_bytes()),
        }));
    }
    drop(old);
    drop(previous);
    let tail = extra::tail(served_bound(snap, window, opts, now), opts.fold, end);
    Whole {
        nodes: snap.nodes.clone(),
        bound: snap.bound.clone(),
        window,
        opts,
        now,
        next_stale_at,
        end,
        source,
        blocks: Arc::new(blocks),
        tail: Bytes::from(tail),
    }
}

/// Logs when the hosts left out as stale change: how many, a few of their names, and why.
fn log_stale(cache: &mut WatcherCache, stale: &[&str], opts: WatcherConfig) {
    let (before, now) = (cache.stale_hosts, stale.len());
    cache.stale_hosts = now;
    let max_age = opts.max_age.unwrap_or_default();
    if now > before {
        let examples = stale.iter().take(5).copied().collect::<Vec<_>>().join(", ");
        tracing::warn!(
            stale_hosts = now,
            examples = %examples,
            max_age = ?max_age,
            "/watcher: hosts left out, their newest usage sample is older than --watcher-max-age \
             (is the usage backend scraping them? kube_prober_node_usage_age_seconds shows the ages)"
        );
    } else if now < before {
        tracing::info!(stale_hosts = now, "/watcher: stale hosts back or gone");
    }
}

/// Whether `block` (of the previous part) holds exactly `members`, with the same loads (and,
/// when folded into the entries, the same estimates: `bound` is the new snapshot's).
fn same_block(
    previous: Option<&Whole>,
    (window, end): (Window, SystemTime),
    bound: &BoundMap,
    block: &Block,
    members: &[Member<'_>],
) -> bool {
    let Some(prev) = previous else {
        return false;
    };
    // What is folded depends on `end` only in the mode that folds by it.
    if prev.opts.fold == Fold::BeforeWindowEnd && prev.end != end {
        return false;
    }
    block.len == members.len()
        && prev
            .nodes
            .range::<str, _>((
                std::ops::Bound::Included(&*block.first),
                std::ops::Bound::Unbounded,
            ))
            .filter(|(_, n)| has_window(n, window) && is_fresh(n, prev.now, prev.opts))
            .take(block.len)
            .zip(members)
            .all(|((name, load), (new_name, new_load))| {
                (Arc::ptr_eq(name, new_name) || name == *new_name)
                    && (Arc::ptr_eq(load, new_load) || **load == ***new_load)
                    // Bound pods are not in the entries unless folded into the values.
                    && (prev.opts.fold == Fold::Off
                        || same_estimate(prev.bound.get(name), bound.get(name)))
            })
}

/// Both absent, or the same estimate.
fn same_estimate(a: Option<&Arc<BoundPods>>, b: Option<&Arc<BoundPods>>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => Arc::ptr_eq(a, b) || a == b,
        (None, None) => true,
        _ => false,
    }
}

/// The entries of one block's nodes, written into `plain` (cleared first): a comma before
/// each but the map's first.
fn block_entries<'p>(
    plain: &'p mut String,
    members: &[Member<'_>],
    bound: &BoundMap,
    leads: bool,
    (window, end): (Window, SystemTime),
    opts: WatcherConfig,
) -> &'p str {
    plain.clear();
    for (j, (name, node)) in members.iter().enumerate() {
        if j > 0 || !leads {
            plain.push(',');
        }
        push_json_string(plain, name);
        plain.push(':');
        let estimate = bound.get(&***name).map(|b| &**b);
        node_entry(plain, (node, estimate), window, opts, end);
    }
    plain
}

/// Appends one `{"name":..,"type":..,"operator":..,"rollup":..,"value":..}`; a non-finite
/// value is never written.
pub(super) fn push_metric(out: &mut String, first: &mut bool, m: [&str; 4], value: f64) {
    if !value.is_finite() {
        return;
    }
    if !*first {
        out.push(',');
    }
    *first = false;
    let [name, kind, operator, rollup] = m;
    out.push_str("{\"name\":");
    push_json_string(out, name);
    out.push_str(",\"type\":");
    push_json_string(out, kind);
    out.push_str(",\"operator\":");
    push_json_string(out, operator);
    out.push_str(",\"rollup\":");
    push_json_string(out, rollup);
    let _ = write!(out, ",\"value\":{value}}}");
}

/// `{"metrics":[...],"tags":{},"metadata":{"dataCenter":""},"freshness":{..}}` for one node,
/// and `"boundPods":{..}` when pods are bound to it that its newest sample cannot show.
///
/// Hub-computed values first: per type (CPU, then Memory) Latest, AVG, STD. TargetLoadPacking
/// takes the last CPU metric that is AVG or Latest, so it scores on the window's mean;
/// LoadVariationRiskBalancing takes AVG (over Latest) and STD. Then backend-aggregated values as
/// load-watcher lists them: every AVG, then every STD. Last, ours, which every plugin skips by
/// operator: the served window's P50-P99 and the hour's MAX. A folded estimate (see [`Fold`])
/// is added to every CPU and Memory level (not to STD), at most up to 100 %.
fn node_entry(
    out: &mut String,
    (node, bound): (&NodeLoad, Option<&BoundPods>),
    window: Window,
    opts: WatcherConfig,
    end: SystemTime,
) {
    out.push_str("{\"metrics\":[");
    let stats = node.windows.iter().find(|ws| ws.window == window);
    let folded = extra::folded(node, bound, opts.fold, end);
    let level =
        |r: Resource, v: f64| (v * 100.0 + folded.get(&r).copied().unwrap_or(0.0)).min(100.0);
    let mut first = true;
    let rollup = window.as_str();
    for (resource, kind) in extra::RATIOS {
        if let Some(&v) = node.latest.get(&resource) {
            let m = ["", kind, operators::LATEST, ""];
            push_metric(out, &mut first, m, level(resource, v));
        }
        if let Some(s) = stats.and_then(|ws| ws.stats.get(&resource)) {
            let m = ["", kind, operators::AVG, rollup];
            push_metric(out, &mut first, m, level(resource, s.avg));
            let m = ["", kind, operators::STD, rollup];
            push_metric(out, &mut first, m, s.std * 100.0);
        }
    }
    let backend = stats.map(|ws| ws.backend.as_slice()).unwrap_or_default();
    for op in [Operator::Avg, Operator::Std] {
        for b in backend.iter().filter(|b| b.value.operator == op) {
            let v = &b.value;
            let scale = if v.kind.is_ratio() || opts.legacy_scaling {
                100.0
            } else {
                1.0
            };
            let m = [v.name.as_str(), v.kind.as_wire(), op.as_wire(), rollup];
            let value = match (op, v.resource) {
                (Operator::Avg, Some(r)) if v.kind.is_ratio() => level(r, v.value),
                _ => v.value * scale,
            };
            push_metric(out, &mut first, m, value);
        }
    }
    extra::push_quantiles(out, &mut first, node, stats, &level);
    out.push_str("],\"tags\":{},\"metadata\":{\"dataCenter\":\"\"}");
    extra::push_freshness(out, node);
    out.push('}');
}

/// A JSON string literal; escapes `"`, `\` and control characters.
pub(super) fn push_json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Fetches `/watcher` from kube-prober (or load-watcher), as Trimaran's service client does.
#[derive(Debug, Clone)]
pub struct Client {
    base: String,
    http: reqwest::Client,
}

/// Largest `/watcher` answer the client reads: a node's CPU and Memory statistics take about
/// 550 bytes (tests/golden/watcher.json), 36 MB at 65,000 nodes, so this leaves room for
/// backends with more metric types while bounding what a wrong address can make it hold.
pub const WATCHER_MAX_BYTES: usize = 256 << 20;

impl Client {
    /// `address` is the base URL, e.g. `http://kube-prober.kube-system:2020`.
    pub fn new(address: &str, timeout: Duration) -> Result<Self> {
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .build()
            .map_err(|e| Error::http("building the watcher client", Cause::other(e)))?;
        Ok(Client {
            base: address.trim_end_matches('/').to_string(),
            http,
        })
    }

    /// All hosts.
    pub async fn get_latest_watcher_metrics(&self) -> Result<WatcherMetrics> {
        self.get(None).await
    }

    /// One host (`?host=`).
    pub async fn get_host_metrics(&self, host: &str) -> Result<WatcherMetrics> {
        self.get(Some(host)).await
    }

    async fn get(&self, host: Option<&str>) -> Result<WatcherMetrics> {
        let url = format!("{}/watcher", self.base);
        let mut req = self.http.get(&url);
        if let Some(h) = host {
            req = req.query(&[("host", h)]);
        }
        let http_err = |cause| Error::http(format!("GET {url}"), cause);
        let resp = req.send().await.map_err(|e| http_err(Cause::other(e)))?;
        let status = resp.status();
        if status != reqwest::StatusCode::OK {
            return Err(http_err(Cause::message(format!(
                "received status code {} from watcher",
                status.as_u16()
            ))));
        }
        let body = crate::shared::limit::read_capped(resp, WATCHER_MAX_BYTES)
            .await
            .map_err(|e| http_err(Cause::other(e)))?;
        serde_json::from_slice(&body).map_err(|e| http_err(Cause::context("decoding body", e)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Stat, WindowStats};
    use std::time::SystemTime;

    #[test]
    fn json_strings_escape_like_load_watcher() {
        let mut s = String::new();
        push_json_string(&mut s, "sf_metric:\"cpu.utilization\"\\\u{1}");
        assert_eq!(s, "\"sf_metric:\\\"cpu.utilization\\\"\\\\\\u0001\"");
    }

    #[test]
    fn no_data_renders_nothing() {
        assert_eq!(
            render(
                &Snapshot::empty(SystemTime::UNIX_EPOCH),
                WatcherConfig::default()
            ),
            None
        );
    }

    #[test]
    fn ten_minute_window_is_the_fallback_but_five_is_not() {
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(10_000);
        let mut snap = Snapshot::empty(at);
        let ws = |window| WindowStats {
            window,
            start: at,
            end: at,
            stats: crate::model::ResourceMap::from([(
                Resource::Cpu,
                Stat {
                    avg: 0.5,
                    std: 0.1,
                    samples: std::num::NonZeroU32::new(3).unwrap(),
                },
            )]),
            backend: Vec::new(),
            coverage: 1.0,
            quantiles: Default::default(),
        };
        let mut node = NodeLoad {
            node: "n".into(),
            source: "prometheus".into(),
            latest_at: at,
            latest: Default::default(),
            windows: vec![ws(Window::FiveMinutes)].into(),
            capacity: None,
            hour_max: Default::default(),
            hour_coverage: 0.0,
        };
        Arc::make_mut(&mut snap.nodes).insert("n".into(), Arc::new(node.clone()));
        assert_eq!(served_window(&snap), None);
        node.windows = vec![ws(Window::FiveMinutes), ws(Window::TenMinutes)].into();
        Arc::make_mut(&mut snap.nodes).insert("n".into(), Arc::new(node));
        assert_eq!(served_window(&snap), Some(Window::TenMinutes));
        let body = render(&snap, WatcherConfig::default()).unwrap();
        let decoded: WatcherMetrics = serde_json::from_slice(&body.all()).unwrap();
        assert_eq!(decoded.window.duration, "10m");
        assert_eq!(decoded.window.end - decoded.window.start, 600);
        assert_eq!(decoded.source, "Prometheus");
        let m = &decoded.data.node_metrics_map["n"].metrics;
        assert_eq!(m.len(), 2);
        assert_eq!((m[0].operator.as_str(), m[0].value), ("AVG", 50.0));
        assert_eq!(
            (m[1].operator.as_str(), m[1].rollup.as_str()),
            ("STD", "10m")
        );
    }

    /// A small deterministic generator (xorshift) for the random snapshots.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn unit(&mut self) -> f64 {
            (self.next() % 1_000_000) as f64 / 1_000_000.0
        }
    }

    fn load(name: &str, at: SystemTime, cpu: f64, windows: &[Window]) -> Arc<NodeLoad> {
        let stat = |avg: f64| Stat {
            avg,
            std: avg / 7.0,
            samples: std::num::NonZeroU32::new(3).unwrap(),
        };
        Arc::new(NodeLoad {
            node: name.into(),
            source: "metrics_server".into(),
            latest_at: at,
            latest: crate::model::ResourceMap::from([
                (Resource::Cpu, cpu),
                (Resource::Memory, 1.0 - cpu),
            ]),
            windows: windows
                .iter()
                .map(|&window| WindowStats {
                    window,
                    start: at - Duration::from_secs(600),
                    end: at,
                    stats: crate::model::ResourceMap::from([
                        (Resource::Cpu, stat(cpu)),
                        (Resource::Memory, stat(1.0 - cpu)),
                    ]),
                    backend: Vec::new(),
                    coverage: 1.0,
                    quantiles: Default::default(),
                })
                .collect(),
            capacity: None,
            hour_max: Default::default(),
            hour_coverage: 0.0,
        })
    }

    /// `n` nodes with random names (some needing JSON escapes) and loads; about one in ten
    /// lacks the 15-minute window (and so is left out of the body).
    fn random_snapshot(rng: &mut Rng, n: usize) -> Snapshot {
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let mut snap = Snapshot::empty(at + Duration::from_secs(5));
        let nodes = Arc::make_mut(&mut snap.nodes);
        for i in 0..n {
            let odd = ["", "\"q\"", "\\", "\u{1}", "é"][(rng.next() % 5) as usize];
            let name = format!("pool-{}-{i}{odd}", rng.next() % 1000);
            let windows: &[Window] = if rng.next().is_multiple_of(10) {
                &[Window::TenMinutes]
            } else {
                &[Window::FifteenMinutes, Window::TenMinutes]
            };
            nodes.insert(name.as_str().into(), load(&name, at, rng.unit(), windows));
        }
        snap
    }

    /// The `n`th node of `snap` that has both windows, with its load.
    fn nth_with_both_windows(snap: &Snapshot, n: usize) -> (Arc<str>, Arc<NodeLoad>) {
        snap.nodes
            .iter()
            .filter(|(_, l)| l.windows.len() == 2)
            .nth(n)
            .map(|(k, v)| (k.clone(), v.clone()))
            .expect("random_snapshot gives most nodes both windows")
    }

    /// The body as the previous implementation wrote it: the head, every entry joined by
    /// commas, the tail, in one buffer.
    fn reference_body(bodies: &WatcherBodies, snap: &Snapshot) -> Vec<u8> {
        let mut out = String::from_utf8(bodies.head.to_vec()).unwrap();
        let mut first = true;
        let served = || {
            snap.nodes
                .iter()
                .filter(|(_, n)| n.windows.iter().any(|ws| ws.window == bodies.window))
        };
        for (name, node) in served() {
            if !first {
                out.push(',');
            }
            first = false;
            push_json_string(&mut out, name);
            out.push(':');
            let bound = snap.bound.get(name).map(|b| &**b);
            node_entry(
                &mut out,
                (node, bound),
                bodies.window,
                bodies.opts,
                bodies.end,
            );
        }
        let hosts = served().filter_map(|(k, n)| Some((&**k, &**n, &**snap.bound.get(k)?)));
        out.push_str(&extra::tail(hosts, bodies.opts.fold, bodies.end));
        out.into_bytes()
    }

    fn gunzip(b: &[u8]) -> Vec<u8> {
        use std::io::Read;
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(b)
            .read_to_end(&mut out)
            .unwrap();
        out
    }

    #[test]
    fn plain_pieces_and_gzip_are_the_reference_bytes_for_random_snapshots() {
        let mut rng = Rng(0x1234_5678_9abc_def1);
        let mut cache = WatcherCache::default();
        for n in [1, 2, 63, 64, 65, 300, 1_000] {
            for _ in 0..3 {
                let snap = random_snapshot(&mut rng, n);
                let Some(bodies) = render_cached(&snap, WatcherConfig::default(), &mut cache)
                else {
                    // Every node lacked the 15-minute window: then the 10-minute one is
                    // served, so a body is always made.
                    panic!("no body for {n} nodes");
                };
                let reference = reference_body(&bodies, &snap);
                let plain: Vec<u8> = bodies
                    .plain_pieces()
                    .map(|p| p.unwrap())
                    .collect::<Vec<_>>()
                    .concat();
                assert_eq!(plain, reference, "{n} nodes");
                assert_eq!(bodies.plain_len(), reference.len());
                assert_eq!(gunzip(bodies.all_gzip()), reference, "{n} nodes");
                let decoded: WatcherMetrics = serde_json::from_slice(&plain).unwrap();
                let served = snap
                    .nodes
                    .values()
                    .filter(|l| l.windows.iter().any(|w| w.window == bodies.window))
                    .count();
                assert_eq!(decoded.data.node_metrics_map.len(), served);
                // A fresh render (no cache) makes the same body.
                assert_eq!(render(&snap, WatcherConfig::default()).unwrap(), bodies);
            }
        }
    }

    #[test]
    fn a_host_answer_is_its_entry_between_the_head_and_the_tail() {
        let mut rng = Rng(42);
        let snap = random_snapshot(&mut rng, 200);
        let bodies = render(&snap, WatcherConfig::default()).unwrap();
        let all: WatcherMetrics = serde_json::from_slice(&bodies.all()).unwrap();
        for (name, node) in snap.nodes.iter() {
            let served = node.windows.iter().any(|ws| ws.window == bodies.window);
            let Some(one) = bodies.host(name) else {
                assert!(!served, "{name} has data");
                continue;
            };
            assert!(served, "{name} has no 15m data");
            let mut expected = bodies.head.to_vec();
            let mut entry = String::new();
            push_json_string(&mut entry, name);
            entry.push(':');
            node_entry(
                &mut entry,
                (node, None),
                bodies.window,
                bodies.opts,
                bodies.end,
            );
            expected.extend_from_slice(entry.as_bytes());
            // No estimates here (see a_pod_bound_writes_the_tail_not_its_hosts_block_unless_folded).
            let tail = extra::tail(std::iter::empty(), bodies.opts.fold, bodies.end);
            expected.extend_from_slice(tail.as_bytes());
            assert_eq!(one, expected);
            let decoded: WatcherMetrics = serde_json::from_slice(&one).unwrap();
            assert_eq!(
                decoded.data.node_metrics_map[&**name],
                all.data.node_metrics_map[&**name]
            );
        }
        assert_eq!(bodies.host("nope"), None);
    }

    #[test]
    fn one_changed_node_writes_its_block_only_and_the_others_are_shared() {
        let mut rng = Rng(7);
        let mut snap = random_snapshot(&mut rng, 2_000);
        let mut cache = WatcherCache::default();
        let first = render_cached(&snap, WatcherConfig::default(), &mut cache).unwrap();
        let blocks = first.blocks.len();
        assert!(blocks > 10, "{blocks} blocks for 2,000 nodes");
        assert_eq!(cache.blocks_rendered, blocks as u64);
        let served = first.blocks.iter().map(|b| b.len).sum::<usize>() as u64;
        assert_eq!(cache.entries_rendered, served);

        // The same node map: not a node visited, every block shared.
        let again = render_cached(&snap, WatcherConfig::default(), &mut cache).unwrap();
        assert!(again.shares_entries_with(&first));
        assert_eq!(cache.entries_rendered, served);

        // One node changes (a new map, the other loads the same `Arc`s): its block only.
        let (name, old) = nth_with_both_windows(&snap, 777);
        let at = old.latest_at;
        Arc::make_mut(&mut snap.nodes).insert(
            name.clone(),
            load(
                &name,
                at,
                0.999,
                &old.windows.iter().map(|w| w.window).collect::<Vec<_>>(),
            ),
        );
        let (e0, b0) = (cache.entries_rendered, cache.blocks_rendered);
        let changed = render_cached(&snap, WatcherConfig::default(), &mut cache).unwrap();
        assert!(!changed.shares_entries_with(&first));
        assert_eq!(cache.blocks_rendered - b0, 1);
        let block = changed
            .blocks
            .iter()
            .find(|b| *b.first <= *name && !first.blocks.iter().any(|o| Arc::ptr_eq(o, b)))
            .unwrap();
        assert_eq!(cache.entries_rendered - e0, block.len as u64);
        assert!(block.len < 300, "one block, not every node: {}", block.len);
        assert_eq!(changed.blocks_shared_with(&first), (blocks - 1, blocks));
        assert_eq!(changed.all(), reference_body(&changed, &snap));
        assert_eq!(changed, render(&snap, WatcherConfig::default()).unwrap());
        let decoded: WatcherMetrics = serde_json::from_slice(&changed.all()).unwrap();
        assert_eq!(decoded.data.node_metrics_map[&*name].metrics[0].value, 99.9);

        // A node added and one removed: at most the two blocks around them (and the first
        // block when the body's first node changes) are written again.
        let nodes = Arc::make_mut(&mut snap.nodes);
        let gone = nodes.keys().nth(1_000).unwrap().clone();
        nodes.remove(&gone);
        nodes.insert(
            "pool-500-new".into(),
            load("pool-500-new", at, 0.5, &[Window::FifteenMinutes]),
        );
        let b1 = cache.blocks_rendered;
        let moved = render_cached(&snap, WatcherConfig::default(), &mut cache).unwrap();
        assert!(
            (1..=3).contains(&(cache.blocks_rendered - b1)),
            "{}",
            cache.blocks_rendered - b1
        );
        assert!(moved.blocks_shared_with(&changed).0 + 3 >= changed.blocks.len());
        assert_eq!(moved.all(), reference_body(&moved, &snap));
        assert_eq!(gunzip(moved.all_gzip()), reference_body(&moved, &snap));

        // Other options: every block is written again.
        let b2 = cache.blocks_rendered;
        let legacy = WatcherConfig {
            legacy_scaling: true,
            ..WatcherConfig::default()
        };
        let scaled = render_cached(&snap, legacy, &mut cache).unwrap();
        assert_eq!(scaled.blocks_shared_with(&moved).0, 0);
        assert_eq!(cache.blocks_rendered - b2, scaled.blocks.len() as u64);
    }

    #[test]
    fn a_pod_bound_writes_the_tail_not_its_hosts_block_unless_folded() {
        use crate::model::{BoundPod, BoundPods, NodeCapacity};
        let mut rng = Rng(5);
        let mut snap = random_snapshot(&mut rng, 2_000);
        let (name, old) = nth_with_both_windows(&snap, 321);
        let mut bound = (*old).clone();
        bound.capacity = Some(NodeCapacity {
            cpu_cores: 4.0,
            memory_bytes: 8e9,
        });
        // The capacity first (it is in the entry when folded), then a pod bound: the same
        // node map, a new estimate.
        Arc::make_mut(&mut snap.nodes).insert(name.clone(), Arc::new(bound.clone()));
        let with_pod = {
            let mut s = snap.clone();
            let pods = vec![BoundPod {
                bound_at: bound.latest_at,
                cpu_cores: 1.0,
                memory_bytes: 2e9,
            }];
            Arc::make_mut(&mut s.bound).insert(name.clone(), Arc::new(BoundPods { pods }));
            s
        };
        for fold in [Fold::Off, Fold::All] {
            let opts = WatcherConfig {
                fold,
                ..WatcherConfig::default()
            };
            let mut cache = WatcherCache::default();
            let before = render_cached(&snap, opts, &mut cache).unwrap();
            let b0 = cache.blocks_rendered;
            let after = render_cached(&with_pod, opts, &mut cache).unwrap();
            let (shared, blocks) = after.blocks_shared_with(&before);
            let rewritten = cache.blocks_rendered - b0;
            if fold == Fold::Off {
                assert_eq!((rewritten, shared), (0, blocks), "no entry changed");
            } else {
                assert_eq!((rewritten, shared + 1), (1, blocks), "its values moved");
            }
            assert_eq!(after.all(), reference_body(&after, &with_pod));
            assert_eq!(gunzip(after.all_gzip()), reference_body(&after, &with_pod));
            let w: WatcherMetrics = serde_json::from_slice(&after.all()).unwrap();
            let b = &w.data.bound_pods[&*name];
            assert_eq!(
                (b.pods, b.cpu, b.folded),
                (1, Some(25.0), fold == Fold::All)
            );
            let one: WatcherMetrics = serde_json::from_slice(&after.host(&name).unwrap()).unwrap();
            assert_eq!(one.data.bound_pods[&*name], *b);
            let w: WatcherMetrics = serde_json::from_slice(&before.all()).unwrap();
            assert!(w.data.bound_pods.is_empty());
        }
    }
}
