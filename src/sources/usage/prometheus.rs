//! The Prometheus backend: load-watcher's metrics, `avg_over_time` and `stddev_over_time` per
//! window, queried concurrently (bounded), POST with a GET fallback on 405/501.
//!
//! Better than load-watcher: a failed query loses only its own metric; metric names are
//! configurable; when a recording rule is missing (load-watcher #51, scheduler-plugins #702) the
//! metric falls back to an expression over node_exporter's raw series, evaluated as a subquery;
//! the `instance` label (configurable) is mapped to a node name by cutting its port and, in the
//! cluster role, by the Nodes' addresses. Each node's values are dated by its newest sample
//! (`timestamp()` of its series), so a node whose series went stale does not look current; and
//! each round checks how the series met the cluster's Nodes (a [`UsageMatch`]).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use futures_util::stream::{self, StreamExt};
use reqwest::StatusCode;
use serde::Deserialize;

use super::http::{self, HttpBackend};
use super::metrics_server::{NODE_LIST_WAIT, NodesListed};
use super::{Dropped, Fetched, UsageFetcher};
use crate::hub::DropReason;
use crate::model::{
    BackendValue, BackendWindow, MetricType, Operator, Resource, UsageMatch, Window, unix_seconds,
};
use crate::shared::error::{Cause, Error, Result};

/// One metric load-watcher asks Prometheus for.
#[derive(Debug, Clone, PartialEq)]
pub struct PromMetric {
    /// The recording rule (or any series) name.
    pub name: String,
    pub kind: MetricType,
    /// The hub quantity it measures, if any.
    pub resource: Option<Resource>,
    /// PromQL over node_exporter's raw series giving the same thing, for when the rule is absent.
    pub fallback: Option<String>,
}

fn metric(name: &str, kind: MetricType, fallback: Option<&str>) -> PromMetric {
    let resource = match name {
        "instance:node_cpu:ratio" => Some(Resource::Cpu),
        "instance:node_memory_utilisation:ratio" => Some(Resource::Memory),
        "instance:node_network_receive_bytes:rate:sum" => Some(Resource::NetworkReceive),
        "instance:node_network_transmit_bytes:rate:sum" => Some(Resource::NetworkTransmit),
        "instance_device:node_disk_io_time_seconds:rate5m" => Some(Resource::DiskIo),
        _ => None,
    };
    PromMetric {
        name: name.into(),
        kind,
        resource,
        fallback: fallback.map(Into::into),
    }
}

/// load-watcher's 17 metrics, in its order, with fallbacks for the node_exporter-based ones.
pub fn default_metrics() -> Vec<PromMetric> {
    use MetricType::*;
    let mut m = vec![
        metric(
            "instance:node_cpu:ratio",
            Cpu,
            Some(
                r#"1 - avg without (cpu) (sum without (mode) (rate(node_cpu_seconds_total{mode=~"idle|iowait"}[5m])))"#,
            ),
        ),
        metric(
            "instance:node_memory_utilisation:ratio",
            Memory,
            Some("1 - node_memory_MemAvailable_bytes / node_memory_MemTotal_bytes"),
        ),
        metric(
            "instance:node_network_transmit_bytes:rate:sum",
            Bandwidth,
            Some(
                r#"sum without (device) (rate(node_network_transmit_bytes_total{device!="lo"}[5m]))"#,
            ),
        ),
        metric(
            "instance:node_network_transmit_drop_excluding_lo:rate5m",
            Bandwidth,
            Some(
                r#"sum without (device) (rate(node_network_transmit_drop_total{device!="lo"}[5m]))"#,
            ),
        ),
        metric(
            "instance:node_network_receive_bytes:rate:sum",
            Bandwidth,
            Some(
                r#"sum without (device) (rate(node_network_receive_bytes_total{device!="lo"}[5m]))"#,
            ),
        ),
        metric(
            "instance:node_network_receive_drop_excluding_lo:rate5m",
            Bandwidth,
            Some(
                r#"sum without (device) (rate(node_network_receive_drop_total{device!="lo"}[5m]))"#,
            ),
        ),
        metric(
            "instance_device:node_disk_io_time_seconds:rate5m",
            Storage,
            Some("rate(node_disk_io_time_seconds_total[5m])"),
        ),
        metric("scaph_host_power_microwatts", Energy, None),
        metric("scaph_host_energy_microjoules", Energy, None),
    ];
    for part in [
        "core", "uncore", "dram", "package", "other", "gpu", "platform",
    ] {
        m.push(metric(
            &format!("kepler_node_{part}_joules_total"),
            Energy,
            None,
        ));
    }
    m.push(metric("kepler_node_energy_stat", Energy, None));
    m
}

/// Settings of the Prometheus backend.
#[derive(Debug, Clone, PartialEq)]
pub struct PrometheusConfig {
    pub http: http::HttpConfig,
    pub metrics: Vec<PromMetric>,
    /// The label that names the node (load-watcher: `instance`).
    pub node_label: String,
    /// Cut `:port` off the label value (`10.0.0.5:9100` -> `10.0.0.5`).
    pub strip_port: bool,
    /// Queries in flight at once.
    pub concurrency: usize,
    /// Use the fallback expressions when a rule returns nothing.
    pub fallback: bool,
    /// Resolution of the fallback subqueries (`[15m:<this>]`).
    pub fallback_resolution: Duration,
}

impl PrometheusConfig {
    pub fn new(http: http::HttpConfig) -> Self {
        PrometheusConfig {
            http,
            metrics: default_metrics(),
            node_label: "instance".into(),
            strip_port: true,
            concurrency: 4,
            fallback: true,
            fallback_resolution: Duration::from_secs(60),
        }
    }
}

/// How a metric is being queried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Rule,
    /// The rule was missing; `rounds` since, to try the rule again now and then.
    Fallback {
        rounds: u32,
    },
}

/// Rounds between retries of a missing rule.
const REPROBE_EVERY: u32 = 10;

/// The cluster's Nodes as the node watcher holds them, asked for once per round.
#[derive(Debug, Clone, Default)]
pub struct ClusterNodes {
    /// Every Node's name. Filled in the cluster role only: empty, the self-check is not made.
    pub names: HashSet<String>,
    /// Node addresses (InternalIP, ExternalIP, Hostname) to node names.
    pub by_address: HashMap<String, String>,
}

impl ClusterNodes {
    /// The node an `instance` value (its port cut) stands for: the Node with that address, else
    /// the value itself.
    fn node_of(&self, instance: &str) -> String {
        self.by_address
            .get(instance)
            .cloned()
            .unwrap_or_else(|| instance.to_string())
    }

    /// Whether an `instance` value (its port cut) names a Node, by name or address.
    fn knows(&self, instance: &str) -> bool {
        self.names.contains(instance) || self.by_address.contains_key(instance)
    }
}

/// Gives, once per round, the cluster's Nodes, so `instance` values that are addresses become
/// the node names Trimaran looks up and the series can be checked against the Nodes.
pub type NodeAddresses = Arc<dyn Fn() -> ClusterNodes + Send + Sync>;

/// Where a metric's values came from in a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// Its recording rule (load-watcher's setup).
    Rule,
    /// Its fallback expression over node_exporter's raw series.
    Raw,
    /// Neither answered with a series.
    Nothing,
}

/// Each node's newest sample, as a round's dating queries found it.
enum Dating {
    /// `(instance, newest sample time in Unix seconds)`; an instance absent is not current.
    Dated(Vec<(String, f64)>),
    /// The dating queries failed: the round's values are dated by the query time.
    Failed(Error),
    /// No metric to date by.
    Undated,
    /// The dating queries have found no node yet in this process (a selector that matches
    /// nothing here would otherwise hide every node): the values are dated by the query time.
    NoneYet,
}

/// What a round's answers named, for the self-check.
#[derive(Debug, Default)]
struct Round {
    /// Some query was answered (even with nothing).
    answered: bool,
    /// Every `instance` value (port cut) the answers named.
    instances: HashSet<String>,
    /// Nodes with values but no sample within Prometheus' lookback: not recorded.
    undated: BTreeSet<String>,
}

/// Names shown in a log line for a list of nodes or series.
const EXAMPLES: usize = 5;

pub struct PrometheusFetcher {
    cfg: PrometheusConfig,
    http: HttpBackend,
    modes: Vec<Mode>,
    use_get: AtomicBool,
    addresses: Option<NodeAddresses>,
    /// Taken by the first fetch: the node watcher's first list (in a mutex only to keep the
    /// fetcher `Sync`, as its queries borrow it across awaits).
    nodes_listed: std::sync::Mutex<Option<NodesListed>>,
    /// `(node, metric)` of sample values this round that were not numbers.
    unparsable: std::sync::Mutex<Vec<(String, String)>>,
    /// The most series without the node label in one answer this round.
    unlabelled: AtomicUsize,
    /// Where each metric's values came from, as last logged.
    origins: Vec<Option<Origin>>,
    /// The dating queries failed last round (logged once until they answer again).
    dating_failed: bool,
    /// The raw series have dated nodes: from now on they alone do.
    raw_dated: bool,
    /// Some node has been dated: from now on a node without a date is not current.
    ever_dated: bool,
    /// Values were dated by the query time as no node had been dated yet (logged once).
    none_yet_logged: bool,
    /// The last self-check, logged again only when it changes.
    last_match: Option<UsageMatch>,
}

/// One query of a round.
#[derive(Debug, Clone)]
struct Query {
    window: Window,
    metric: usize,
    op: Operator,
    fallback: bool,
}

/// The answers of a round: each query with the node values it got.
type Answers = Vec<(Query, Result<Vec<(String, f64)>>)>;

fn over_time(op: Operator) -> &'static str {
    match op {
        Operator::Avg => "avg_over_time",
        Operator::Std => "stddev_over_time",
    }
}

/// A duration in PromQL's spelling (`15m`, `30s`, `1500ms`).
fn promql_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms.is_multiple_of(60_000) {
        format!("{}m", ms / 60_000)
    } else if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

/// `10.0.0.5:9100` -> `10.0.0.5`, `[::1]:9100` -> `::1`, `node-1` stays.
pub fn strip_port(instance: &str) -> &str {
    if let Some(rest) = instance.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match instance.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') && port.chars().all(|c| c.is_ascii_digit()) => {
            host
        }
        _ => instance,
    }
}

#[derive(Deserialize)]
struct ApiResponse {
    status: String,
    #[serde(default)]
    data: Option<ApiData>,
    #[serde(rename = "errorType", default)]
    error_type: Option<String>,
    #[serde(default)]
    error: Option<String>,
}

#[derive(Deserialize)]
struct ApiData {
    #[serde(rename = "resultType")]
    result_type: String,
    result: serde_json::Value,
}

#[derive(Deserialize)]
struct VectorSample {
    metric: BTreeMap<String, String>,
    value: (f64, String),
}

/// `(node, value)` pairs, series without the node label, nodes whose value is not a number.
pub type ParsedVector = (Vec<(String, f64)>, usize, Vec<String>);

/// Why an instant-query answer is not a vector [`parse_vector`] can read.
#[derive(Debug, thiserror::Error)]
pub enum VectorError {
    /// Prometheus marked the answer as failed (`"status":"error"`): an HTTP-level failure.
    #[error("Prometheus answered {status}: {error_type} {error}")]
    Answered {
        status: String,
        error_type: String,
        error: String,
    },
    #[error("malformed JSON from Prometheus: {0}")]
    Json(#[source] serde_json::Error),
    #[error("Prometheus answered success without data")]
    NoData,
    #[error("expected a vector result, got {0}")]
    NotVector(String),
    #[error("malformed vector result: {0}")]
    Result(#[source] serde_json::Error),
}

/// Parses an instant-query answer into `(node, value)` pairs. Series without the node label
/// are skipped and counted in the second return value; nodes whose sample value is not a
/// number are the third (their value is dropped alone, not the whole answer).
pub fn parse_vector(
    body: &[u8],
    node_label: &str,
    strip: bool,
) -> std::result::Result<ParsedVector, VectorError> {
    let resp: ApiResponse = serde_json::from_slice(body).map_err(VectorError::Json)?;
    if resp.status != "success" {
        return Err(VectorError::Answered {
            status: resp.status,
            error_type: resp.error_type.unwrap_or_default(),
            error: resp.error.unwrap_or_default(),
        });
    }
    let data = resp.data.ok_or(VectorError::NoData)?;
    if data.result_type != "vector" {
        return Err(VectorError::NotVector(data.result_type));
    }
    let samples: Vec<VectorSample> =
        serde_json::from_value(data.result).map_err(VectorError::Result)?;
    let mut out = Vec::with_capacity(samples.len());
    let mut unlabelled = 0;
    let mut unparsable = Vec::new();
    for s in samples {
        let Some(raw) = s.metric.get(node_label).filter(|v| !v.is_empty()) else {
            unlabelled += 1;
            continue;
        };
        let node = if strip { strip_port(raw) } else { raw };
        match s.value.1.parse::<f64>() {
            Ok(value) => out.push((node.to_string(), value)),
            Err(_) => unparsable.push(node.to_string()),
        }
    }
    Ok((out, unlabelled, unparsable))
}

/// The first series selector a PromQL expression reads, with its matchers:
/// `node_cpu_seconds_total{mode=~"idle|iowait"}` of the CPU fallback. Names followed by `(`
/// (functions), aggregations and other keywords, the label lists of `by`, `without`, `on`, `ignoring`,
/// `group_left` and `group_right`, numbers and durations, strings, ranges and matchers without
/// a name are skipped.
pub fn first_selector(expr: &str) -> Option<String> {
    // Operators, and the aggregations, which may take `by (...)` before their `(`.
    const KEYWORDS: [&str; 22] = [
        "and",
        "or",
        "unless",
        "bool",
        "offset",
        "atan2",
        "inf",
        "nan",
        "sum",
        "avg",
        "min",
        "max",
        "count",
        "stddev",
        "stdvar",
        "topk",
        "bottomk",
        "quantile",
        "count_values",
        "group",
        "limitk",
        "limit_ratio",
    ];
    const LISTS: [&str; 6] = [
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
    ];
    let b = expr.as_bytes();
    let word = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b':';
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'"' | b'\'' | b'`' => i = skip_string(b, i),
            b'[' => i = skip_past(b, i, b']'),
            b'{' => i = skip_past(b, i, b'}'),
            b'0'..=b'9' | b'.' => {
                while i < b.len() && (word(b[i]) || b[i] == b'.') {
                    i += 1;
                }
            }
            c if c.is_ascii_alphabetic() || c == b'_' || c == b':' => {
                let start = i;
                while i < b.len() && word(b[i]) {
                    i += 1;
                }
                let name = &expr[start..i];
                let lower = name.to_ascii_lowercase();
                let j = i + b[i..]
                    .iter()
                    .take_while(|c| c.is_ascii_whitespace())
                    .count();
                let next = b.get(j).copied();
                if LISTS.contains(&lower.as_str()) {
                    if next == Some(b'(') {
                        i = skip_past(b, j, b')');
                    }
                } else if next == Some(b'(') || KEYWORDS.contains(&lower.as_str()) {
                    // a function, an aggregation or an operator
                } else if next == Some(b'{') {
                    let end = skip_past(b, j, b'}');
                    return Some(format!("{name}{}", &expr[j..end]));
                } else {
                    return Some(name.to_string());
                }
            }
            _ => i += 1,
        }
    }
    None
}

/// The index just past the string starting at `b[start]` (a quote), escapes skipped.
fn skip_string(b: &[u8], start: usize) -> usize {
    let quote = b[start];
    let mut i = start + 1;
    while i < b.len() {
        match b[i] {
            b'\\' if quote != b'`' => i += 2,
            c if c == quote => return i + 1,
            _ => i += 1,
        }
    }
    b.len()
}

/// The index just past the first `close` after `b[start]`, strings skipped.
fn skip_past(b: &[u8], start: usize, close: u8) -> usize {
    let mut i = start + 1;
    while i < b.len() {
        match b[i] {
            b'"' | b'\'' | b'`' => i = skip_string(b, i),
            c if c == close => return i + 1,
            _ => i += 1,
        }
    }
    b.len()
}

/// The first few of `names`, then how many more.
fn examples<'a>(names: impl IntoIterator<Item = &'a String>, total: usize) -> String {
    let mut s = names
        .into_iter()
        .take(EXAMPLES)
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(", ");
    if total > EXAMPLES {
        s.push_str(&format!(" (+{} more)", total - EXAMPLES));
    }
    s
}

impl PrometheusFetcher {
    pub fn new(cfg: PrometheusConfig) -> Result<Self> {
        let http = HttpBackend::new(cfg.http.clone())?;
        let modes = vec![Mode::Rule; cfg.metrics.len()];
        Ok(PrometheusFetcher {
            cfg,
            http,
            modes,
            use_get: AtomicBool::new(false),
            addresses: None,
            nodes_listed: std::sync::Mutex::new(None),
            unparsable: std::sync::Mutex::new(Vec::new()),
            unlabelled: AtomicUsize::new(0),
            origins: Vec::new(),
            dating_failed: false,
            raw_dated: false,
            ever_dated: false,
            none_yet_logged: false,
            last_match: None,
        })
    }

    /// Maps `instance` values that are node addresses to node names and, where the Nodes'
    /// names are given (cluster role), checks every round how the series met them.
    pub fn with_node_addresses(mut self, addresses: NodeAddresses) -> Self {
        self.addresses = Some(addresses);
        self
    }

    /// The first fetch waits up to [`NODE_LIST_WAIT`] for `listed` (the node watcher's first
    /// list), so that its `instance` addresses are named as nodes from the first round on.
    pub fn with_nodes_listed(mut self, listed: NodesListed) -> Self {
        self.nodes_listed = std::sync::Mutex::new(Some(listed));
        self
    }

    fn promql(&self, q: &Query) -> String {
        let m = &self.cfg.metrics[q.metric];
        let range = promql_duration(q.window.duration());
        match (&m.fallback, q.fallback) {
            (Some(expr), true) => format!(
                "{}(({expr})[{range}:{}])",
                over_time(q.op),
                promql_duration(self.cfg.fallback_resolution)
            ),
            _ => format!("{}({}[{range}])", over_time(q.op), m.name),
        }
    }

    /// One instant query at `time`; `(node, value)` pairs.
    async fn query(&self, promql: &str, time: f64) -> Result<Vec<(String, f64)>> {
        let what = format!("Prometheus query {promql}");
        let time = format!("{time:.3}");
        let params = [("query", promql), ("time", time.as_str())];
        let url = self.http.url("/api/v1/query");
        let mut answer = None;
        if !self.use_get.load(Ordering::Relaxed) {
            let form = form_urlencoded::Serializer::new(String::new())
                .extend_pairs(params)
                .finish();
            let a = self
                .http
                .send(&what, "authorization", http::bearer, |c| {
                    c.post(&url)
                        .header("content-type", "application/x-www-form-urlencoded")
                        .body(form.clone())
                })
                .await?;
            if matches!(
                a.status,
                StatusCode::METHOD_NOT_ALLOWED | StatusCode::NOT_IMPLEMENTED
            ) {
                tracing::info!(
                    status = a.status.as_u16(),
                    "Prometheus refused POST; using GET from now on"
                );
                self.use_get.store(true, Ordering::Relaxed);
            } else {
                answer = Some(a);
            }
        }
        let a = match answer {
            Some(a) => a,
            None => {
                self.http
                    .send(&what, "authorization", http::bearer, |c| {
                        c.get(&url).query(&params)
                    })
                    .await?
            }
        };
        // Prometheus explains 400/422/503 in the JSON body; anything else without JSON is an
        // HTTP failure.
        match parse_vector(&a.body, &self.cfg.node_label, self.cfg.strip_port) {
            Ok((v, unlabelled, unparsable)) => {
                if !unparsable.is_empty() {
                    let mut held = self
                        .unparsable
                        .lock()
                        .unwrap_or_else(|poisoned| poisoned.into_inner());
                    held.extend(unparsable.into_iter().map(|n| (n, promql.to_string())));
                }
                if unlabelled > 0 {
                    self.unlabelled.fetch_max(unlabelled, Ordering::Relaxed);
                    tracing::debug!(promql, unlabelled, label = %self.cfg.node_label, "series without the node label skipped");
                }
                Ok(v)
            }
            // A 2xx answer Prometheus itself marked as failed is an HTTP-level failure; one
            // that did not decode (invalid JSON, not a vector, a value not a number) is `parse`.
            Err(e @ VectorError::Answered { .. }) if a.status.is_success() => {
                Err(Error::http(what, Cause::other(e)))
            }
            Err(e) if a.status.is_success() => Err(Error::parse(what, Cause::other(e))),
            Err(e) => Err(Error::http(
                what,
                Cause::context(format!("status {}", a.status.as_u16()), e),
            )),
        }
    }

    async fn run_queries(&self, queries: Vec<Query>, time: f64) -> Answers {
        stream::iter(queries)
            .map(|q| async move {
                let r = self.query(&self.promql(&q), time).await;
                (q, r)
            })
            .buffer_unordered(self.cfg.concurrency.max(1))
            .collect()
            .await
    }

    /// Which metrics try their recording rule this round: those on it, and those on their
    /// fallback once every `REPROBE_EVERY` rounds.
    fn rule_round(&self) -> Vec<bool> {
        self.modes
            .iter()
            .map(|m| match m {
                Mode::Rule => true,
                Mode::Fallback { rounds } => rounds % REPROBE_EVERY == REPROBE_EVERY - 1,
            })
            .collect()
    }

    /// The queries of one round: for every window and every metric `rule` gives a choice for
    /// (`Some(true)`: its rule, `Some(false)`: its fallback), the average and the deviation.
    fn plan(&self, rule: &dyn Fn(usize) -> Option<bool>) -> Vec<Query> {
        let mut qs = Vec::new();
        for window in Window::ALL {
            for metric in 0..self.cfg.metrics.len() {
                if let Some(use_rule) = rule(metric) {
                    for op in [Operator::Avg, Operator::Std] {
                        qs.push(Query {
                            window,
                            metric,
                            op,
                            fallback: !use_rule,
                        });
                    }
                }
            }
        }
        qs
    }

    /// Asks every query of the round; rules that answered with nothing are asked again as
    /// their fallback expression in the same round. Returns the answers and, per metric,
    /// whether its rule answered with nothing.
    async fn ask(&self, try_rule: &[bool], time: f64) -> (Answers, Vec<bool>) {
        let first = self.plan(&|m| Some(try_rule[m]));
        let mut results = self.run_queries(first, time).await;
        let mut empty_rule = vec![false; self.cfg.metrics.len()];
        for (q, r) in &results {
            if !q.fallback && r.as_ref().is_ok_and(Vec::is_empty) {
                empty_rule[q.metric] = true;
            }
        }
        let needs_fallback =
            |m: usize| self.cfg.fallback && empty_rule[m] && self.cfg.metrics[m].fallback.is_some();
        let second = self.plan(&|m| needs_fallback(m).then_some(false));
        if !second.is_empty() {
            let fb = self.run_queries(second, time).await;
            results.retain(|(q, _)| q.fallback || !needs_fallback(q.metric));
            results.extend(fb);
        }
        (results, empty_rule)
    }

    /// Each metric's mode for the next round, from what its rule and fallback answered.
    fn update_modes(&mut self, results: &Answers, try_rule: &[bool], empty_rule: &[bool]) {
        for (m, mode) in self.modes.iter_mut().enumerate() {
            let fell_back = results.iter().any(|(q, r)| {
                q.metric == m && q.fallback && r.as_ref().is_ok_and(|v| !v.is_empty())
            });
            *mode = match *mode {
                _ if fell_back => match *mode {
                    Mode::Fallback { rounds } => Mode::Fallback { rounds: rounds + 1 },
                    Mode::Rule => Mode::Fallback { rounds: 0 },
                },
                Mode::Fallback { .. } if try_rule[m] && !empty_rule[m] => Mode::Rule,
                Mode::Fallback { rounds } => Mode::Fallback { rounds: rounds + 1 },
                Mode::Rule => Mode::Rule,
            };
        }
    }

    /// Where each metric's values came from this round; `None` where every query of it failed.
    fn origins(&self, results: &Answers) -> Vec<Option<Origin>> {
        let mut out = vec![None; self.cfg.metrics.len()];
        for (q, r) in results {
            let Ok(v) = r else { continue };
            let this = match (v.is_empty(), q.fallback) {
                (true, _) => Origin::Nothing,
                (false, true) => Origin::Raw,
                (false, false) => Origin::Rule,
            };
            let slot = &mut out[q.metric];
            if matches!(slot, None | Some(Origin::Nothing)) {
                *slot = Some(this);
            }
        }
        out
    }

    /// Logs which metrics come from recording rules and which from node_exporter's raw series:
    /// after the first round that answered, and whenever that changes.
    fn log_origins(&mut self, now: Vec<Option<Origin>>) {
        if self.origins.len() != now.len() {
            self.origins = vec![None; now.len()];
        }
        let mut changed = false;
        for (held, new) in self.origins.iter_mut().zip(now) {
            if let Some(n) = new
                && *held != Some(n)
            {
                *held = Some(n);
                changed = true;
            }
        }
        if !changed {
            return;
        }
        let names = |o: Origin| {
            let n: Vec<&str> = self
                .origins
                .iter()
                .zip(&self.cfg.metrics)
                .filter(|(held, _)| **held == Some(o))
                .map(|(_, m)| m.name.as_str())
                .collect();
            if n.is_empty() {
                "none".to_string()
            } else {
                n.join(", ")
            }
        };
        tracing::info!(
            recording_rules = %names(Origin::Rule),
            node_exporter_raw_series = %names(Origin::Raw),
            no_series = %names(Origin::Nothing),
            "Prometheus metrics by origin (a metric whose recording rule answers nothing is \
             computed from node_exporter's raw series; its rule is tried again every {REPROBE_EVERY} rounds)"
        );
    }

    /// The metric whose series date a node's values: the CPU one (what TargetLoadPacking
    /// reads), else the first.
    fn dating_metric(&self) -> Option<&PromMetric> {
        let m = &self.cfg.metrics;
        m.iter()
            .find(|x| x.resource == Some(Resource::Cpu))
            .or_else(|| m.first())
    }

    /// The dating queries: each node's newest sample of the raw series the dating metric's
    /// fallback reads (when it has one), then, until those raw series have answered once, of
    /// its rule.
    fn dating_queries(&self) -> (Option<String>, Option<String>) {
        let Some(m) = self.dating_metric() else {
            return (None, None);
        };
        let label = &self.cfg.node_label;
        let newest = |selector: &str| format!("max by ({label}) (timestamp({selector}))");
        let raw = m
            .fallback
            .as_deref()
            .and_then(first_selector)
            .map(|s| newest(&s));
        let rule = (!(self.raw_dated && raw.is_some())).then(|| newest(&m.name));
        (raw, rule)
    }

    /// The answers of the dating queries at `time`: raw, rule.
    async fn date(
        &self,
        time: f64,
    ) -> (
        Option<Result<Vec<(String, f64)>>>,
        Option<Result<Vec<(String, f64)>>>,
    ) {
        let (raw, rule) = self.dating_queries();
        let one = |q: Option<String>| async move {
            match q {
                Some(q) => Some(self.query(&q, time).await),
                None => None,
            }
        };
        if self.cfg.concurrency > 1 {
            tokio::join!(one(raw), one(rule))
        } else {
            (one(raw).await, one(rule).await)
        }
    }

    /// Each node's newest sample: from the raw series once this Prometheus has them (a target
    /// that stops being scraped leaves them at once, with a staleness marker; all of them gone
    /// means no node is current), else from the rule (which outlives its inputs by its own rate
    /// window: a Prometheus without node_exporter's series, e.g. a federated one). Beyond
    /// Prometheus' lookback (5 m) a series has no newest sample: its node is not current.
    fn dating(
        &mut self,
        raw: Option<Result<Vec<(String, f64)>>>,
        rule: Option<Result<Vec<(String, f64)>>>,
    ) -> Dating {
        let d = match (raw, rule) {
            (Some(Ok(raw)), _) if self.raw_dated || !raw.is_empty() => {
                self.raw_dated = true;
                Dating::Dated(raw)
            }
            (Some(Err(e)), _) | (_, Some(Err(e))) => Dating::Failed(e),
            (_, Some(Ok(rule))) => Dating::Dated(rule),
            (_, None) => Dating::Undated,
        };
        match d {
            Dating::Dated(v) if v.is_empty() && !self.ever_dated => Dating::NoneYet,
            Dating::Dated(v) => {
                self.ever_dated = true;
                Dating::Dated(v)
            }
            other => other,
        }
    }

    /// The newest sample per node (the newest of its instances, never after `now`; a time that
    /// is not a positive number dates nothing), or `None` to date by `now`, with the error of
    /// failed dating queries (logged when they start and stop failing).
    fn node_dates(
        &mut self,
        dating: Dating,
        nodes: &ClusterNodes,
        now: SystemTime,
    ) -> (Option<HashMap<String, SystemTime>>, Option<Error>) {
        let failed = matches!(dating, Dating::Failed(_));
        if failed != self.dating_failed {
            self.dating_failed = failed;
            match &dating {
                Dating::Failed(e) => {
                    tracing::warn!(error = %e, "the query of each node's newest sample failed; values are dated by the query time until it answers")
                }
                _ => tracing::info!("the query of each node's newest sample answers again"),
            }
        }
        let dated = match dating {
            Dating::Dated(d) => d,
            Dating::Failed(e) => return (None, Some(e)),
            Dating::Undated | Dating::NoneYet => return (None, None),
        };
        let mut dates: HashMap<String, SystemTime> = HashMap::new();
        for (instance, secs) in dated {
            if !(secs.is_finite() && secs > 0.0) {
                tracing::debug!(instance, secs, "a newest-sample time that is not a time");
                continue;
            }
            // Past what a `Duration` holds (a Prometheus answers at most 2^63 ms): now.
            let t = Duration::try_from_secs_f64(secs)
                .ok()
                .and_then(|d| SystemTime::UNIX_EPOCH.checked_add(d))
                .unwrap_or(now)
                .min(now);
            let slot = dates.entry(nodes.node_of(&instance)).or_insert(t);
            *slot = (*slot).max(t);
        }
        (Some(dates), None)
    }

    /// Moves this round's values that were not numbers into `fetched` as dropped.
    fn drop_unparsable(&self, fetched: &mut Fetched, nodes: &ClusterNodes) {
        let unparsable = std::mem::take(
            &mut *self
                .unparsable
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        );
        for (instance, promql) in unparsable {
            fetched.dropped.push(Dropped {
                node: nodes.node_of(&instance),
                what: promql,
                reason: DropReason::Unparsable,
            });
        }
    }

    /// Fold: one value per node, window, metric and operator (the largest when a rule has
    /// several series per node, e.g. one per disk: the busiest device); instances named by
    /// their node where the address is known; the series whose instance did not parse as
    /// dropped. Each node's windows end at its newest sample (`dates`; `None`: at `now`); a
    /// node without one is left out.
    fn fold(
        &self,
        results: Answers,
        nodes: &ClusterNodes,
        dates: Option<&HashMap<String, SystemTime>>,
        now: SystemTime,
    ) -> (Fetched, Round) {
        let mut fetched = Fetched::default();
        self.drop_unparsable(&mut fetched, nodes);
        let mut round = Round::default();
        let mut folded: BTreeMap<(String, Window), BTreeMap<(usize, Operator), f64>> =
            BTreeMap::new();
        for (q, r) in results {
            let values = match r {
                Ok(values) => values,
                Err(e) => {
                    fetched.errors.push(e);
                    continue;
                }
            };
            round.answered = true;
            for (instance, v) in values {
                let node = nodes.node_of(&instance);
                if !round.instances.contains(&instance) {
                    round.instances.insert(instance);
                }
                let slot = folded
                    .entry((node, q.window))
                    .or_default()
                    .entry((q.metric, q.op))
                    .or_insert(v);
                if v > *slot || slot.is_nan() {
                    *slot = v;
                }
            }
        }
        for ((node, window), values) in folded {
            let end = match dates.map(|d| d.get(&node)) {
                None => now,
                Some(Some(t)) => *t,
                Some(None) => {
                    round.undated.insert(node);
                    continue;
                }
            };
            fetched.windows.push(self.window(node, window, values, end));
        }
        (fetched, round)
    }

    /// One node's values of one window as the backend gives them, ending at `end`.
    fn window(
        &self,
        node: String,
        window: Window,
        values: BTreeMap<(usize, Operator), f64>,
        end: SystemTime,
    ) -> BackendWindow {
        BackendWindow {
            node,
            window,
            start: end.checked_sub(window.duration()).unwrap_or(end),
            end,
            values: values
                .into_iter()
                .map(|((m, op), value)| BackendValue {
                    name: self.cfg.metrics[m].name.clone(),
                    kind: self.cfg.metrics[m].kind,
                    resource: self.cfg.metrics[m].resource,
                    operator: op,
                    value,
                })
                .collect(),
        }
    }

    /// The self-check of a round (cluster role, once some query answered): the Nodes that got
    /// no usage and the series whose node label named no Node; logged on the first round and
    /// whenever the counts change.
    fn check(
        &mut self,
        nodes: &ClusterNodes,
        windows: &[BackendWindow],
        round: &Round,
        unlabelled: usize,
    ) -> Option<UsageMatch> {
        if nodes.names.is_empty() || !round.answered {
            return None;
        }
        let served: HashSet<&str> = windows.iter().map(|w| w.node.as_str()).collect();
        let mut without_usage: Vec<&String> = nodes
            .names
            .iter()
            .filter(|n| !served.contains(n.as_str()))
            .collect();
        without_usage.sort();
        let mut without_node: Vec<&String> =
            round.instances.iter().filter(|i| !nodes.knows(i)).collect();
        without_node.sort();
        let m = UsageMatch {
            nodes_without_usage: without_usage.len() as u64,
            series_without_node: without_node.len() as u64,
        };
        if self.last_match != Some(m) {
            self.last_match = Some(m);
            self.log_check(nodes, &without_usage, &without_node, round, unlabelled);
        }
        Some(m)
    }

    /// The self-check's log line: counts, a few names, and what to look at.
    fn log_check(
        &self,
        nodes: &ClusterNodes,
        without_usage: &[&String],
        without_node: &[&String],
        round: &Round,
        unlabelled: usize,
    ) {
        let label = &self.cfg.node_label;
        if without_usage.is_empty() && without_node.is_empty() {
            tracing::info!(
                nodes = nodes.names.len(),
                "every Node got usage from Prometheus and every series named a Node"
            );
            return;
        }
        let mut hints = Vec::new();
        if !without_node.is_empty() {
            let mut known: Vec<&String> = nodes.by_address.keys().collect();
            known.sort();
            hints.push(format!(
                "the `{label}` label, its port cut, must be a Node's name or one of its addresses \
                 (InternalIP, ExternalIP, Hostname; known here e.g.: {}); relabel the targets to \
                 the node name, or name the label that holds it with --prometheus-node-label",
                examples(known.iter().copied(), known.len())
            ));
        }
        let stale = round.undated.len();
        if stale > 0 {
            hints.push(format!(
                "{stale} node(s) had values but no sample within Prometheus' 5 m lookback (target \
                 down or stale): not served as current (e.g. {})",
                examples(&round.undated, stale)
            ));
        }
        if unlabelled > 0 {
            hints.push(format!(
                "up to {unlabelled} series in one answer had no `{label}` label"
            ));
        }
        if hints.is_empty() {
            hints.push("no series names these Nodes: is node_exporter scraped on them?".into());
        }
        tracing::warn!(
            nodes = nodes.names.len(),
            nodes_without_usage = without_usage.len(),
            nodes_without_usage_examples = %examples(without_usage.iter().copied(), without_usage.len()),
            series_without_node = without_node.len(),
            series_without_node_examples = %examples(without_node.iter().copied(), without_node.len()),
            hint = %hints.join("; "),
            "Prometheus series and the cluster's Nodes do not match"
        );
    }
}

impl UsageFetcher for PrometheusFetcher {
    fn name(&self) -> &'static str {
        "prometheus"
    }

    async fn before_first_fetch(&mut self) {
        let held = self
            .nodes_listed
            .get_mut()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let Some(listed) = held.take() else {
            return;
        };
        if !matches!(tokio::time::timeout(NODE_LIST_WAIT, listed).await, Ok(true)) {
            tracing::info!(
                waited = ?NODE_LIST_WAIT,
                "the Node watcher has no list yet; Prometheus instances are named as they come \
                 until it has"
            );
        }
    }

    async fn fetch(&mut self) -> Fetched {
        let now = SystemTime::now();
        let time = unix_seconds(now);
        let try_rule = self.rule_round();
        let (raw, rule) = self.date(time).await;
        let dating = self.dating(raw, rule);
        let none_yet = matches!(dating, Dating::NoneYet);
        let (results, empty_rule) = self.ask(&try_rule, time).await;
        self.update_modes(&results, &try_rule, &empty_rule);
        let origins = self.origins(&results);
        self.log_origins(origins);
        let nodes = self.addresses.as_ref().map(|f| f()).unwrap_or_default();
        let (dates, dating_error) = self.node_dates(dating, &nodes, now);
        let (mut fetched, round) = self.fold(results, &nodes, dates.as_ref(), now);
        fetched.errors.extend(dating_error);
        if none_yet && !fetched.windows.is_empty() && !self.none_yet_logged {
            self.none_yet_logged = true;
            tracing::warn!(queries = ?self.dating_queries(), "no node's newest sample was found; values are dated by the query time until one is");
        }
        let unlabelled = self.unlabelled.swap(0, Ordering::Relaxed);
        fetched.usage_match = self.check(&nodes, &fetched.windows, &round, unlabelled);
        fetched
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seventeen_metrics_in_load_watcher_order() {
        let m = default_metrics();
        assert_eq!(m.len(), 17);
        assert_eq!(m[0].name, "instance:node_cpu:ratio");
        assert_eq!(m.iter().filter(|x| x.fallback.is_some()).count(), 7);
        assert_eq!(
            m.iter().filter(|x| x.kind == MetricType::Energy).count(),
            10
        );
        assert_eq!(m.iter().filter(|x| x.resource.is_some()).count(), 5);
    }

    #[test]
    fn instance_ports_are_cut() {
        assert_eq!(strip_port("10.0.0.5:9100"), "10.0.0.5");
        assert_eq!(strip_port("node-1:9100"), "node-1");
        assert_eq!(strip_port("node-1"), "node-1");
        assert_eq!(strip_port("[fd00::1]:9100"), "fd00::1");
        assert_eq!(strip_port("fd00::1"), "fd00::1");
    }

    #[test]
    fn promql_forms() {
        let f = fetcher();
        let q = |metric, op, fallback| Query {
            window: Window::FifteenMinutes,
            metric,
            op,
            fallback,
        };
        assert_eq!(
            f.promql(&q(0, Operator::Avg, false)),
            "avg_over_time(instance:node_cpu:ratio[15m])"
        );
        assert_eq!(
            f.promql(&q(1, Operator::Std, true)),
            "stddev_over_time((1 - node_memory_MemAvailable_bytes / node_memory_MemTotal_bytes)[15m:1m])"
        );
        assert_eq!(promql_duration(Duration::from_millis(1500)), "1500ms");
        assert_eq!(promql_duration(Duration::from_secs(30)), "30s");
    }

    #[test]
    fn first_selector_finds_the_series_an_expression_reads() {
        let found: Vec<Option<String>> = default_metrics()
            .iter()
            .filter_map(|m| m.fallback.as_deref())
            .map(first_selector)
            .collect();
        let want = [
            r#"node_cpu_seconds_total{mode=~"idle|iowait"}"#,
            "node_memory_MemAvailable_bytes",
            r#"node_network_transmit_bytes_total{device!="lo"}"#,
            r#"node_network_transmit_drop_total{device!="lo"}"#,
            r#"node_network_receive_bytes_total{device!="lo"}"#,
            r#"node_network_receive_drop_total{device!="lo"}"#,
            "node_disk_io_time_seconds_total",
        ];
        assert_eq!(found, want.map(|w| Some(w.to_string())));
        let one = |e: &str| first_selector(e);
        assert_eq!(
            one("sum by (instance) (rate(x_total[5m] offset 5m)) > bool 0").as_deref(),
            Some("x_total")
        );
        assert_eq!(
            one(r#"label_replace(up{job="a}"}, "dst", "$1", "src", "(.*)")"#).as_deref(),
            Some(r#"up{job="a}"}"#)
        );
        assert_eq!(
            one("2e3 * AVG without(cpu) (a) / ON(instance) group_left(node) b").as_deref(),
            Some("a")
        );
        assert_eq!(one("1 + Inf"), None);
        assert_eq!(one(r#"{__name__="x"}"#), None);
        assert_eq!(one(r#"count("unclosed"#), None);
    }

    fn fetcher() -> PrometheusFetcher {
        PrometheusFetcher::new(PrometheusConfig::new(http::HttpConfig::new("http://p"))).unwrap()
    }

    #[test]
    fn nodes_are_dated_by_the_raw_series_of_the_cpu_metric_else_its_rule() {
        let raw = r#"max by (instance) (timestamp(node_cpu_seconds_total{mode=~"idle|iowait"}))"#;
        let rule = "max by (instance) (timestamp(instance:node_cpu:ratio))";
        let mut f = fetcher();
        assert_eq!(
            f.dating_queries(),
            (Some(raw.to_string()), Some(rule.to_string()))
        );
        let (a, b) = ("a".to_string(), "b".to_string());
        // Nothing dated yet in this process: the values are dated by the query time.
        let d = f.dating(Some(Ok(vec![])), Some(Ok(vec![])));
        assert!(matches!(d, Dating::NoneYet));
        // No raw series: the rule dates.
        let d = f.dating(Some(Ok(vec![])), Some(Ok(vec![(a.clone(), 1.0)])));
        assert!(matches!(d, Dating::Dated(v) if v == [(a.clone(), 1.0)]));
        // Raw series: they date, and from then on they alone, even when none is left.
        let d = f.dating(
            Some(Ok(vec![(b.clone(), 2.0)])),
            Some(Ok(vec![(a.clone(), 1.0)])),
        );
        assert!(matches!(d, Dating::Dated(v) if v == [(b.clone(), 2.0)]));
        assert_eq!(f.dating_queries(), (Some(raw.to_string()), None));
        // Once a node has been dated, a node without a date is not current.
        let d = f.dating(Some(Ok(vec![])), None);
        assert!(matches!(d, Dating::Dated(v) if v.is_empty()));
        let failed = Error::http("q", Cause::message("down"));
        assert!(matches!(
            f.dating(Some(Err(failed)), None),
            Dating::Failed(_)
        ));
        let mut cfg = PrometheusConfig::new(http::HttpConfig::new("http://p"));
        cfg.node_label = "node".into();
        cfg.metrics = vec![metric("my_memory", MetricType::Memory, None)];
        let f = PrometheusFetcher::new(cfg).unwrap();
        assert_eq!(
            f.dating_queries(),
            (
                None,
                Some("max by (node) (timestamp(my_memory))".to_string())
            )
        );
    }

    /// A newest-sample time past what a `Duration` holds dates the node by now (no panic);
    /// one that is not a positive number dates nothing.
    #[test]
    fn absurd_newest_sample_times_never_panic() {
        let mut f = fetcher();
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let dated = vec![
            ("far".to_string(), 1e300),
            ("max".to_string(), f64::MAX),
            ("nan".to_string(), f64::NAN),
            ("negative".to_string(), -5.0),
            ("ok".to_string(), 1_700_000_000.5),
        ];
        let (dates, err) = f.node_dates(Dating::Dated(dated), &ClusterNodes::default(), now);
        assert!(err.is_none());
        let dates = dates.unwrap();
        assert_eq!(dates.len(), 3, "{dates:?}");
        assert_eq!((dates["far"], dates["max"]), (now, now));
        assert_eq!(
            dates["ok"],
            SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_000_500)
        );
    }

    #[test]
    fn windows_end_at_each_nodes_newest_sample_and_the_check_counts_what_did_not_meet() {
        let mut f = fetcher();
        let nodes = ClusterNodes {
            names: ["a", "b", "c"].map(String::from).into(),
            by_address: [("10.0.0.1".to_string(), "a".to_string())].into(),
        };
        let at = |s: u64| SystemTime::UNIX_EPOCH + Duration::from_secs(s);
        let now = at(1000);
        let dated = vec![
            ("10.0.0.1".to_string(), 990.0),
            ("b".to_string(), 2000.0),
            ("9.9.9.9".to_string(), f64::NAN),
        ];
        let (dates, err) = f.node_dates(Dating::Dated(dated), &nodes, now);
        assert!(err.is_none());
        let q = Query {
            window: Window::FiveMinutes,
            metric: 0,
            op: Operator::Avg,
            fallback: false,
        };
        let values = vec![
            ("10.0.0.1".to_string(), 0.5),
            ("b".to_string(), 0.25),
            ("9.9.9.9".to_string(), 0.125),
        ];
        let (fetched, round) = f.fold(
            vec![(q.clone(), Ok(values.clone()))],
            &nodes,
            dates.as_ref(),
            now,
        );
        let ends: Vec<(&str, SystemTime, SystemTime)> = fetched
            .windows
            .iter()
            .map(|w| (w.node.as_str(), w.start, w.end))
            .collect();
        // a by its address, at its newest sample; b never after now; 9.9.9.9 has no date.
        assert_eq!(ends, [("a", at(690), at(990)), ("b", at(700), at(1000))]);
        assert_eq!(round.undated, BTreeSet::from(["9.9.9.9".to_string()]));
        let m = f.check(&nodes, &fetched.windows, &round, 0);
        assert_eq!(
            m,
            Some(UsageMatch {
                nodes_without_usage: 1,
                series_without_node: 1
            })
        );
        // A failed dating query dates the values by the query time and is an error of the round.
        let failed = Error::http("q", Cause::message("down"));
        let (dates, err) = f.node_dates(Dating::Failed(failed), &nodes, now);
        assert!(dates.is_none() && err.is_some());
        let (fetched, _) = f.fold(vec![(q, Ok(values))], &nodes, None, now);
        assert!(fetched.windows.iter().all(|w| w.end == now));
        assert_eq!(fetched.windows.len(), 3);
        // Without the Nodes' names (not the cluster role) nothing is checked.
        let (_, round) = f.fold(Vec::new(), &ClusterNodes::default(), None, now);
        assert_eq!(f.check(&ClusterNodes::default(), &[], &round, 0), None);
    }

    #[test]
    fn parses_vectors_and_errors() {
        let ok = br#"{"status":"success","data":{"resultType":"vector","result":[
            {"metric":{"instance":"10.0.0.5:9100"},"value":[1700000000.5,"0.25"]},
            {"metric":{"job":"x"},"value":[1700000000.5,"1"]},
            {"metric":{"instance":"n2"},"value":[1700000000.5,"NaN"]}]}}"#;
        let (v, unlabelled, _) = parse_vector(ok, "instance", true).unwrap();
        assert_eq!(unlabelled, 1);
        assert_eq!(v[0], ("10.0.0.5".to_string(), 0.25));
        assert!(
            v[1].1.is_nan(),
            "NaN is parsed here and dropped (and counted) by the hub"
        );
        let err = br#"{"status":"error","errorType":"bad_data","error":"parse error"}"#;
        assert!(
            parse_vector(err, "instance", true)
                .unwrap_err()
                .to_string()
                .contains("bad_data")
        );
        let matrix = br#"{"status":"success","data":{"resultType":"matrix","result":[]}}"#;
        assert!(
            parse_vector(matrix, "instance", true)
                .unwrap_err()
                .to_string()
                .contains("matrix")
        );
        assert!(
            parse_vector(b"<html>", "instance", true)
                .unwrap_err()
                .to_string()
                .contains("malformed")
        );
        // One value that is not a number drops that value alone.
        let bad = br#"{"status":"success","data":{"resultType":"vector","result":[
            {"metric":{"instance":"a"},"value":[1,"x"]},
            {"metric":{"instance":"b"},"value":[1,"0.5"]}]}}"#;
        let (v, _, unparsable) = parse_vector(bad, "instance", true).unwrap();
        assert_eq!(v, [("b".to_string(), 0.5)]);
        assert_eq!(unparsable, ["a"]);
    }
}
