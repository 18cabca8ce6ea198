//! The Prometheus backend: load-watcher's metrics, `avg_over_time` and `stddev_over_time` per
//! window, queried concurrently (bounded), POST with a GET fallback on 405/501.
//!
//! Better than load-watcher: a failed query loses only its own metric; metric names are
//! configurable; when a recording rule is missing (load-watcher #51, scheduler-plugins #702) the
//! metric falls back to an expression over node_exporter's raw series, evaluated as a subquery;
//! the `instance` label (configurable) is mapped to a node name by cutting its port.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use futures_util::stream::{self, StreamExt};
use reqwest::StatusCode;
use serde::Deserialize;

use super::http::{self, HttpBackend};
use super::{Dropped, Fetched, UsageFetcher};
use crate::hub::DropReason;
use crate::model::{
    BackendValue, BackendWindow, MetricType, Operator, Resource, Window, unix_seconds,
};
use crate::shared::error::{Error, Result};

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

/// Gives, once per round, a map from node addresses (InternalIP, hostname) to node names, so
/// `instance` values that are addresses become the node names Trimaran looks up.
pub type NodeAddresses = Arc<dyn Fn() -> HashMap<String, String> + Send + Sync>;

pub struct PrometheusFetcher {
    cfg: PrometheusConfig,
    http: HttpBackend,
    modes: Vec<Mode>,
    use_get: AtomicBool,
    addresses: Option<NodeAddresses>,
    /// `(node, metric)` of sample values this round that were not numbers.
    unparsable: std::sync::Mutex<Vec<(String, String)>>,
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

/// How [`parse_vector`] starts the error of an answer whose `status` is not `success`.
const ANSWERED: &str = "Prometheus answered ";

/// Parses an instant-query answer into `(node, value)` pairs. Series without the node label
/// are skipped and counted in the second return value; nodes whose sample value is not a
/// number are the third (their value is dropped alone, not the whole answer).
pub fn parse_vector(
    body: &[u8],
    node_label: &str,
    strip: bool,
) -> std::result::Result<ParsedVector, String> {
    let resp: ApiResponse =
        serde_json::from_slice(body).map_err(|e| format!("malformed JSON from Prometheus: {e}"))?;
    if resp.status != "success" {
        return Err(format!(
            "{ANSWERED}{}: {} {}",
            resp.status,
            resp.error_type.unwrap_or_default(),
            resp.error.unwrap_or_default()
        ));
    }
    let data = resp
        .data
        .ok_or("Prometheus answered success without data")?;
    if data.result_type != "vector" {
        return Err(format!(
            "expected a vector result, got {}",
            data.result_type
        ));
    }
    let samples: Vec<VectorSample> =
        serde_json::from_value(data.result).map_err(|e| format!("malformed vector result: {e}"))?;
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
            unparsable: std::sync::Mutex::new(Vec::new()),
        })
    }

    /// Maps `instance` values that are node addresses to node names (cluster role).
    pub fn with_node_addresses(mut self, addresses: NodeAddresses) -> Self {
        self.addresses = Some(addresses);
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
                    tracing::debug!(promql, unlabelled, label = %self.cfg.node_label, "series without the node label skipped");
                }
                Ok(v)
            }
            // A 2xx answer Prometheus itself marked as failed is an HTTP-level failure; one
            // that did not decode (invalid JSON, not a vector, a value not a number) is `parse`.
            Err(reason) if a.status.is_success() && reason.starts_with(ANSWERED) => {
                Err(Error::Http { what, reason })
            }
            Err(reason) if a.status.is_success() => Err(Error::Parse { what, reason }),
            Err(reason) => Err(Error::Http {
                what,
                reason: format!("status {}: {reason}", a.status.as_u16()),
            }),
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
                _ if fell_back => {
                    if *mode == Mode::Rule {
                        tracing::warn!(rule = %self.cfg.metrics[m].name, "recording rule returned nothing; using the fallback expression over node_exporter series");
                    }
                    match *mode {
                        Mode::Fallback { rounds } => Mode::Fallback { rounds: rounds + 1 },
                        Mode::Rule => Mode::Fallback { rounds: 0 },
                    }
                }
                Mode::Fallback { .. } if try_rule[m] && !empty_rule[m] => Mode::Rule,
                Mode::Fallback { rounds } => Mode::Fallback { rounds: rounds + 1 },
                Mode::Rule => Mode::Rule,
            };
        }
    }

    /// Fold: one value per node, window, metric and operator (the largest when a rule has
    /// several series per node, e.g. one per disk: the busiest device); instances named by
    /// their node where the address is known; the series whose instance did not parse as
    /// dropped.
    fn fold(&self, results: Answers, now: SystemTime) -> Fetched {
        let mut fetched = Fetched::default();
        let by_address = self.addresses.as_ref().map(|f| f()).unwrap_or_default();
        let unparsable = std::mem::take(
            &mut *self
                .unparsable
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        );
        for (instance, promql) in unparsable {
            fetched.dropped.push(Dropped {
                node: by_address.get(&instance).cloned().unwrap_or(instance),
                what: promql,
                reason: DropReason::Unparsable,
            });
        }
        let mut folded: BTreeMap<(String, Window), BTreeMap<(usize, Operator), f64>> =
            BTreeMap::new();
        for (q, r) in results {
            match r {
                Ok(values) => {
                    for (instance, v) in values {
                        let node = by_address.get(&instance).cloned().unwrap_or(instance);
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
                Err(e) => fetched.errors.push(e),
            }
        }
        for ((node, window), values) in folded {
            fetched.windows.push(self.window(node, window, values, now));
        }
        fetched
    }

    /// One node's values of one window as the backend gives them.
    fn window(
        &self,
        node: String,
        window: Window,
        values: BTreeMap<(usize, Operator), f64>,
        now: SystemTime,
    ) -> BackendWindow {
        BackendWindow {
            node,
            window,
            start: now.checked_sub(window.duration()).unwrap_or(now),
            end: now,
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
}

impl UsageFetcher for PrometheusFetcher {
    fn name(&self) -> &'static str {
        "prometheus"
    }

    async fn fetch(&mut self) -> Fetched {
        let now = SystemTime::now();
        let time = unix_seconds(now);
        let try_rule = self.rule_round();
        let (results, empty_rule) = self.ask(&try_rule, time).await;
        self.update_modes(&results, &try_rule, &empty_rule);
        self.fold(results, now)
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
        let f = PrometheusFetcher::new(PrometheusConfig::new(http::HttpConfig::new("http://p")))
            .unwrap();
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
                .contains("bad_data")
        );
        let matrix = br#"{"status":"success","data":{"resultType":"matrix","result":[]}}"#;
        assert!(
            parse_vector(matrix, "instance", true)
                .unwrap_err()
                .contains("matrix")
        );
        assert!(
            parse_vector(b"<html>", "instance", true)
                .unwrap_err()
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
