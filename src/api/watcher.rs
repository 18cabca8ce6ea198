//! paypal/load-watcher's `/watcher` wire format: the structs (for decoding, as Trimaran does),
//! the byte-exact encoder used at tick time, and a small client.
//!
//! Encoding rules copied from load-watcher's hand-written marshalers: every key always present,
//! keys in struct order, hosts under `data.NodeMetricsMap`, `tags` `{}`, `metadata`
//! `{"dataCenter":""}`, floats as the shortest decimal with no exponent, integer times.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::model::{NodeLoad, NodeMap, Operator, Resource, Snapshot, Window, unix_seconds};
use crate::sink::prometheus::{Body, Chunk};

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

/// The pre-rendered `/watcher` bodies of one snapshot: the whole body as two pieces (the head,
/// made each tick, and every host entry with the tail, shared between ticks while no node
/// changed), and for `?host=` the same head and tail around one host's entry.
#[derive(Debug)]
pub struct WatcherBodies {
    /// Everything up to the first host entry.
    head: Arc<Chunk>,
    /// Every host entry, comma-separated, and the tail (shared with other ticks' bodies, and
    /// so is its compressed form).
    rest: Arc<Chunk>,
    /// Each host's entry (a slice of `rest`) by host.
    entries: Arc<HashMap<Arc<str>, Entry>>,
    /// The body gzip-compressed, joined on the first request that accepts gzip: one piece,
    /// so an answer is one write with a `Content-Length`, as a static file's.
    all_gzip: std::sync::OnceLock<Bytes>,
    /// How many times the gzip body was joined (once per body at most; a test hook).
    gzips: std::sync::atomic::AtomicU64,
}

/// One host's entry, `"host":{...}`, and the load it was written from.
#[derive(Debug, PartialEq)]
struct Entry {
    load: Arc<NodeLoad>,
    bytes: Bytes,
}

impl PartialEq for WatcherBodies {
    fn eq(&self, other: &Self) -> bool {
        self.head.bytes() == other.head.bytes()
            && self.rest.bytes() == other.rest.bytes()
            && self.entries == other.entries
    }
}

/// Closes the host map, `data` and the body.
const TAIL: &str = "}}}";

impl WatcherBodies {
    fn body(&self) -> Body {
        Body {
            chunks: vec![self.head.clone(), self.rest.clone()],
        }
    }

    /// The body for all hosts, as chunks to send one after the other (no copy).
    pub fn chunks(&self) -> Vec<Bytes> {
        vec![self.head.bytes().clone(), self.rest.bytes().clone()]
    }

    /// The body for all hosts in one piece (a copy; tests and small bodies).
    pub fn all(&self) -> Bytes {
        Bytes::from([&self.head.bytes()[..], &self.rest.bytes()[..]].concat())
    }

    /// The body for `?host=host`, when that host has data.
    pub fn host(&self, host: &str) -> Option<Bytes> {
        let entry = &self.entries.get(host)?.bytes;
        Some(Bytes::from(
            [&self.head.bytes()[..], &entry[..], TAIL.as_bytes()].concat(),
        ))
    }

    /// The body for all hosts as one gzip stream: joined once, on the first call, from the
    /// head compressed then and the host entries compressed once for every body that shares
    /// them (a copy of the compressed bytes, a tenth of the body or less).
    pub fn all_gzip(&self) -> &Bytes {
        self.all_gzip.get_or_init(|| {
            self.gzips
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Bytes::from(self.body().gzip(&[]).concat())
        })
    }

    /// Whether [`WatcherBodies::all_gzip`] is made already.
    pub fn has_gzip(&self) -> bool {
        self.all_gzip.get().is_some()
    }

    /// How many times the gzip body was joined (1 at most).
    pub fn gzip_count(&self) -> u64 {
        self.gzips.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether the host entries of `self` and `other` are the same piece (and so compressed
    /// once for both): true for bodies of consecutive ticks when no node changed between them.
    pub fn shares_entries_with(&self, other: &WatcherBodies) -> bool {
        Arc::ptr_eq(&self.rest, &other.rest) && Arc::ptr_eq(&self.entries, &other.entries)
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WatcherOptions {
    /// load-watcher multiplies every Prometheus value by 100, so bandwidth comes out as bytes/s
    /// × 100 and energy as joules × 100. Off (the default): CPU and Memory are percentages and
    /// every other type keeps its own unit. On: every value is × 100, as load-watcher.
    pub legacy_scaling: bool,
}

/// What `/watcher` made of the previous tick's nodes: a node's entry is written again only
/// when its load (or the served window or options) changed, and when no node changed at all
/// (the same node map) the joined entries are reused whole, without visiting a node.
#[derive(Debug, Default)]
pub struct WatcherCache {
    whole: Option<Whole>,
    /// Host entries written so far (a test hook: 0 more on a tick without change).
    pub entries_rendered: u64,
}

/// Everything of the previous body that depends only on the node map, the window and the
/// options: reused as long as those are the same.
#[derive(Debug)]
struct Whole {
    nodes: Arc<NodeMap>,
    window: Window,
    opts: WatcherOptions,
    end: SystemTime,
    source: String,
    entries: Arc<HashMap<Arc<str>, Entry>>,
    /// Every entry in name order, comma-separated, and the tail.
    rest: Arc<Chunk>,
}

/// Renders the bodies, or `None` when there is no data (load-watcher answers 500 then).
pub fn render(snap: &Snapshot, opts: WatcherOptions) -> Option<WatcherBodies> {
    render_cached(snap, opts, &mut WatcherCache::default())
}

/// As [`render`], reusing the entries of nodes whose load did not change since `cache` was
/// last used.
pub fn render_cached(
    snap: &Snapshot,
    opts: WatcherOptions,
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
        Some(w) if Arc::ptr_eq(&w.nodes, &snap.nodes) => w,
        previous => whole(snap, window, opts, previous, &mut cache.entries_rendered)?,
    };
    // The data stands for the time of the oldest newest-sample: a consumer (TargetLoadPacking)
    // adds every pod bound after `end` on top, so an `end` later than the data would hide load.
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
        head: Chunk::new(head),
        rest: w.rest.clone(),
        entries: w.entries.clone(),
        all_gzip: std::sync::OnceLock::new(),
        gzips: std::sync::atomic::AtomicU64::new(0),
    };
    cache.whole = Some(w);
    Some(bodies)
}

/// The node-map part of a body: every entry (copying those of unchanged nodes from the
/// previous part, of the same window and options), joined into one buffer; each host's entry
/// is a slice of it, so the entries are held once and the previous buffer is freed.
fn whole(
    snap: &Snapshot,
    window: Window,
    opts: WatcherOptions,
    previous: Option<Whole>,
    rendered: &mut u64,
) -> Option<Whole> {
    let nodes: Vec<(&Arc<str>, &Arc<NodeLoad>)> = snap
        .nodes
        .iter()
        .filter(|(_, n)| n.windows.iter().any(|ws| ws.window == window))
        .collect();
    let end = nodes
        .iter()
        .filter_map(|(_, n)| {
            n.windows
                .iter()
                .find(|ws| ws.window == window)
                .map(|ws| ws.end)
        })
        .min()?;
    let source = nodes
        .first()
        .map(|(_, n)| wire_source_name(&n.source))
        .unwrap_or_default()
        .to_string();

    let old = previous.as_ref().map(|w| &*w.entries);
    let guess = previous.as_ref().map_or(0, |w| w.rest.bytes().len());
    let mut rest: Vec<u8> = Vec::with_capacity(guess.max(TAIL.len()));
    let mut ranges = Vec::with_capacity(nodes.len());
    let mut entry = String::new();
    for (i, (name, node)) in nodes.iter().enumerate() {
        if i > 0 {
            rest.push(b',');
        }
        let from = rest.len();
        let reused = old
            .and_then(|o| o.get(&***name))
            .filter(|e| Arc::ptr_eq(&e.load, node) || e.load == **node);
        match reused {
            Some(e) => rest.extend_from_slice(&e.bytes),
            None => {
                *rendered += 1;
                entry.clear();
                push_json_string(&mut entry, name);
                entry.push(':');
                node_entry(&mut entry, node, window, opts);
                rest.extend_from_slice(entry.as_bytes());
            }
        }
        ranges.push(from..rest.len());
    }
    drop(previous);
    rest.extend_from_slice(TAIL.as_bytes());
    let rest = Chunk::new(rest);
    let entries = nodes
        .iter()
        .zip(ranges)
        .map(|((name, node), range)| {
            let entry = Entry {
                load: (*node).clone(),
                bytes: rest.bytes().slice(range),
            };
            ((*name).clone(), entry)
        })
        .collect();
    Some(Whole {
        nodes: snap.nodes.clone(),
        window,
        opts,
        end,
        source,
        entries: Arc::new(entries),
        rest,
    })
}

/// Appends one `{"name":..,"type":..,"operator":..,"rollup":..,"value":..}`; a non-finite
/// value is never written.
fn push_metric(out: &mut String, first: &mut bool, m: [&str; 4], value: f64) {
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

/// `{"metrics":[...],"tags":{},"metadata":{"dataCenter":""}}` for one node.
///
/// Hub-computed values first: per type (CPU, then Memory) Latest, AVG, STD. TargetLoadPacking
/// takes the last CPU metric that is AVG or Latest, so it scores on the window's mean;
/// LoadVariationRiskBalancing takes AVG (over Latest) and STD. Then backend-aggregated values as
/// load-watcher lists them: every AVG, then every STD.
fn node_entry(out: &mut String, node: &NodeLoad, window: Window, opts: WatcherOptions) {
    out.push_str("{\"metrics\":[");
    let stats = node.windows.iter().find(|ws| ws.window == window);
    let mut first = true;
    let rollup = window.as_str();
    for (resource, kind) in [
        (Resource::Cpu, kinds::CPU),
        (Resource::Memory, kinds::MEMORY),
    ] {
        if let Some(&v) = node.latest.get(&resource) {
            push_metric(
                out,
                &mut first,
                ["", kind, operators::LATEST, ""],
                v * 100.0,
            );
        }
        if let Some(s) = stats.and_then(|ws| ws.stats.get(&resource)) {
            push_metric(
                out,
                &mut first,
                ["", kind, operators::AVG, rollup],
                s.avg * 100.0,
            );
            push_metric(
                out,
                &mut first,
                ["", kind, operators::STD, rollup],
                s.std * 100.0,
            );
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
            push_metric(out, &mut first, m, v.value * scale);
        }
    }
    out.push_str("],\"tags\":{},\"metadata\":{\"dataCenter\":\"\"}}");
}

/// A JSON string literal; escapes `"`, `\` and control characters.
fn push_json_string(out: &mut String, s: &str) {
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
            .map_err(|e| Error::Http {
                what: "building the watcher client".into(),
                reason: e.to_string(),
            })?;
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
        let http_err = |reason: String| Error::Http {
            what: format!("GET {url}"),
            reason,
        };
        let resp = req.send().await.map_err(|e| http_err(e.to_string()))?;
        let status = resp.status();
        if status != reqwest::StatusCode::OK {
            return Err(http_err(format!(
                "received status code {} from watcher",
                status.as_u16()
            )));
        }
        let body = crate::limit::read_capped(resp, WATCHER_MAX_BYTES)
            .await
            .map_err(|e| http_err(e.to_string()))?;
        serde_json::from_slice(&body).map_err(|e| http_err(format!("decoding body: {e}")))
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
                WatcherOptions::default()
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
        };
        let mut node = NodeLoad {
            node: "n".into(),
            source: "prometheus".into(),
            latest_at: at,
            latest: Default::default(),
            windows: vec![ws(Window::FiveMinutes)],
            capacity: None,
        };
        Arc::make_mut(&mut snap.nodes).insert("n".into(), Arc::new(node.clone()));
        assert_eq!(served_window(&snap), None);
        node.windows.push(ws(Window::TenMinutes));
        Arc::make_mut(&mut snap.nodes).insert("n".into(), Arc::new(node));
        assert_eq!(served_window(&snap), Some(Window::TenMinutes));
        let body = render(&snap, WatcherOptions::default()).unwrap();
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
}
