//! The Kubernetes Metrics Server backend: load-watcher's `KubernetesMetricsServer` source.
//!
//! Per fetch it LISTs `metrics.k8s.io/v1beta1` NodeMetrics and core/v1 Nodes (concurrently) and
//! turns each node's usage into ratios of its capacity (load-watcher) or, optionally, of its
//! allocatable. Each sample carries the time metrics-server says the usage stands for.
//!
//! Better than load-watcher: quantities are parsed in full (every SI, binary and exponent form,
//! fractions), and a node whose denominator is missing, zero or unparsable is reported as an
//! error instead of becoming an infinite or wrong percentage.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_metrics::v1beta1::NodeMetrics;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::ListParams;

use super::{Fetched, UsageFetcher};
use crate::error::Error;
use crate::model::{NodeCapacity, Resource, UsageSample};
use crate::quantity::parse_quantity;

/// Settings of the metrics-server backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MetricsServerConfig {
    /// Divide usage by the node's allocatable instead of its capacity. Off (the default) is
    /// load-watcher's behaviour: capacity.
    pub use_allocatable: bool,
}

/// The Nodes the cluster role's watchers already hold (trimmed, with capacity and allocatable).
pub type NodeSource = Arc<dyn Fn() -> Vec<Arc<Node>> + Send + Sync>;

/// Reads node usage from the resource metrics API through the Kubernetes API server.
pub struct MetricsServerFetcher {
    client: kube::Client,
    cfg: MetricsServerConfig,
    nodes: Option<NodeSource>,
}

impl std::fmt::Debug for MetricsServerFetcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsServerFetcher")
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
}

impl MetricsServerFetcher {
    pub fn new(client: kube::Client, cfg: MetricsServerConfig) -> Self {
        MetricsServerFetcher {
            client,
            cfg,
            nodes: None,
        }
    }

    /// Takes capacities from Nodes already watched instead of listing every Node on every
    /// fetch (at 5,000 nodes that LIST is tens of megabytes every interval, for the API server
    /// and for us). Until the watcher has nodes, Nodes are listed as without it.
    pub fn with_node_source(mut self, nodes: NodeSource) -> Self {
        self.nodes = Some(nodes);
        self
    }
}

const WHAT_METRICS: &str = "LIST metrics.k8s.io/v1beta1 NodeMetrics";
const WHAT_NODES: &str = "LIST v1 Nodes";

impl UsageFetcher for MetricsServerFetcher {
    fn name(&self) -> &'static str {
        "metrics_server"
    }

    async fn fetch(&mut self) -> Fetched {
        let metrics_api: Api<NodeMetrics> = Api::all(self.client.clone());
        let watched = self.nodes.as_ref().map(|f| f()).unwrap_or_default();
        let (metrics, nodes) = if watched.is_empty() {
            let nodes_api: Api<Node> = Api::all(self.client.clone());
            let (metrics, nodes) = tokio::join!(list_all(&metrics_api), list_all(&nodes_api));
            (
                metrics,
                nodes.map(|n| n.into_iter().map(Arc::new).collect()),
            )
        } else {
            (list_all(&metrics_api).await, Ok(watched))
        };
        let now = SystemTime::now();
        let mut fetched = Fetched::default();
        let nodes = match nodes {
            Ok(items) => items,
            Err(e) => {
                // Without the denominators no usage can be turned into a ratio.
                fetched.errors.push(list_error(WHAT_NODES, &e));
                if let Err(e) = metrics {
                    fetched.errors.push(list_error(WHAT_METRICS, &e));
                }
                return fetched;
            }
        };
        let metrics = match metrics {
            Ok(items) => items,
            Err(e) => {
                fetched.errors.push(list_error(WHAT_METRICS, &e));
                Vec::new()
            }
        };
        let (samples, capacities, errors) = samples_from(&metrics, &nodes, &self.cfg, now);
        fetched.samples = samples;
        fetched.capacities = capacities;
        fetched.errors.extend(errors);
        fetched
    }
}

/// Items per LIST page: bounds the size of every response (a 5,000-node list at once is tens
/// of megabytes).
const PAGE: u32 = 500;
/// Retries of a failed page (429, 5xx, transport), from [`BACKOFF`], doubling.
const RETRIES: u32 = 2;
const BACKOFF: Duration = Duration::from_millis(200);

fn transient(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => s.code == 429 || s.code >= 500,
        kube::Error::HyperError(_) => true,
        kube::Error::Service(_) => !too_large(e),
        _ => false,
    }
}

/// Every object, page by page, each page retried with backoff when the failure is transient.
async fn list_all<K>(api: &Api<K>) -> Result<Vec<K>, kube::Error>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut items = Vec::new();
    let mut params = ListParams::default().limit(PAGE);
    loop {
        let mut pause = BACKOFF;
        let mut tries = 0;
        let page = loop {
            match api.list(&params).await {
                Ok(page) => break page,
                Err(e) if tries < RETRIES && transient(&e) => {
                    tries += 1;
                    tracing::debug!(error = %e, tries, "LIST page failed; retrying");
                    tokio::time::sleep(pause).await;
                    pause *= 2;
                }
                Err(e) => return Err(e),
            }
        };
        items.extend(page.items);
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(items),
        }
    }
}

/// Whether `e` is an answer past `--max-response-bytes`: never retried (it would only be
/// read again), and counted as `too_large`.
fn too_large(e: &kube::Error) -> bool {
    crate::limit::find_too_large(e).is_some()
}

/// A kube error as [`Error::Http`] (or [`Error::TooLarge`]), keeping the API server's `Status`
/// or the error chain.
fn list_error(what: &str, e: &kube::Error) -> Error {
    if let Some(t) = crate::limit::find_too_large(e) {
        return Error::TooLarge {
            what: what.to_string(),
            reason: t.to_string(),
        };
    }
    let reason = match e {
        kube::Error::Api(s) => {
            let mut r = format!("status {}", s.code);
            if !s.reason.is_empty() {
                r.push(' ');
                r.push_str(&s.reason);
            }
            if !s.message.is_empty() {
                r.push_str(": ");
                r.push_str(&s.message);
            }
            r
        }
        other => {
            let mut r = other.to_string();
            let mut source = std::error::Error::source(other);
            while let Some(s) = source {
                let text = s.to_string();
                if !r.contains(&text) {
                    r.push_str(": ");
                    r.push_str(&text);
                }
                source = s.source();
            }
            r
        }
    };
    Error::Http {
        what: what.to_string(),
        reason,
    }
}

/// The cores and bytes usage is divided by: capacity, or allocatable when configured (which
/// defaults to capacity, as the API documents, where a node does not report it).
fn denominators(node: &Node, cfg: &MetricsServerConfig) -> Result<NodeCapacity, String> {
    let status = node.status.as_ref();
    let capacity = status.and_then(|s| s.capacity.as_ref());
    let allocatable = status.and_then(|s| s.allocatable.as_ref());
    let get = |resource: &str| -> Result<f64, String> {
        let from_allocatable = if cfg.use_allocatable {
            allocatable.and_then(|m| m.get(resource))
        } else {
            None
        };
        let (field, q) = match from_allocatable {
            Some(q) => ("allocatable", Some(q)),
            None => ("capacity", capacity.and_then(|m| m.get(resource))),
        };
        let q = q.ok_or_else(|| format!("no {resource} {field}"))?;
        let v = parse_quantity(&q.0).map_err(|e| format!("{resource} {field}: {e}"))?;
        if v <= 0.0 {
            return Err(format!("{resource} {field} is {:?}, not above zero", q.0));
        }
        Ok(v)
    };
    Ok(NodeCapacity {
        cpu_cores: get("cpu")?,
        memory_bytes: get("memory")?,
    })
}

/// The time the usage stands for; `now` where metrics-server left it unset (the zero time).
fn sample_time(m: &NodeMetrics, now: SystemTime) -> SystemTime {
    let ts = m.timestamp.0;
    let secs = ts.as_second();
    let nanos = ts.subsec_nanosecond();
    if secs <= 0 || nanos < 0 {
        return now;
    }
    SystemTime::UNIX_EPOCH
        .checked_add(Duration::new(secs.unsigned_abs(), nanos.unsigned_abs()))
        .unwrap_or(now)
}

/// One node's usage as `(cpu cores, memory bytes)`.
fn usage(m: &NodeMetrics) -> Result<(f64, f64), String> {
    let cpu = parse_quantity(&m.usage.cpu.0).map_err(|e| format!("cpu usage: {e}"))?;
    let memory = parse_quantity(&m.usage.memory.0).map_err(|e| format!("memory usage: {e}"))?;
    for (resource, v, raw) in [
        ("cpu", cpu, &m.usage.cpu.0),
        ("memory", memory, &m.usage.memory.0),
    ] {
        if v < 0.0 {
            return Err(format!("{resource} usage {raw:?} is negative"));
        }
    }
    Ok((cpu, memory))
}

/// Turns the two LISTs into samples, the denominators used (for every node that has valid
/// ones) and one error per node with metrics that could not be turned into ratios.
fn samples_from<N: std::borrow::Borrow<Node>>(
    node_metrics: &[NodeMetrics],
    nodes: &[N],
    cfg: &MetricsServerConfig,
    now: SystemTime,
) -> (Vec<UsageSample>, Vec<(String, NodeCapacity)>, Vec<Error>) {
    let mut by_name: HashMap<&str, Result<NodeCapacity, String>> =
        HashMap::with_capacity(nodes.len());
    let mut capacities = Vec::with_capacity(nodes.len());
    for node in nodes {
        let node = node.borrow();
        let Some(name) = node.metadata.name.as_deref() else {
            continue;
        };
        let d = denominators(node, cfg);
        if let Ok(c) = &d {
            capacities.push((name.to_string(), *c));
        }
        by_name.insert(name, d);
    }

    let mut samples = Vec::with_capacity(node_metrics.len());
    let mut errors = Vec::new();
    let mut not_listed: Vec<&str> = Vec::new();
    for m in node_metrics {
        let name = m.metadata.name.as_deref().unwrap_or_default();
        let Some(d) = by_name.get(name) else {
            not_listed.push(name);
            continue;
        };
        let ratios = d.as_ref().map_err(Clone::clone).and_then(|cap| {
            let (cpu, memory) = usage(m)?;
            Ok([
                (Resource::Cpu, cpu / cap.cpu_cores),
                (Resource::Memory, memory / cap.memory_bytes),
            ])
        });
        match ratios {
            Ok(values) => samples.push(UsageSample {
                node: name.to_string(),
                at: sample_time(m, now),
                values: values.to_vec(),
            }),
            Err(reason) => {
                tracing::warn!(node = name, error = %reason, "metrics-server node skipped");
                errors.push(Error::Http {
                    what: format!("metrics-server node {name}"),
                    reason: format!("{reason}; node skipped"),
                });
            }
        }
    }
    if !not_listed.is_empty() {
        tracing::debug!(
            skipped = not_listed.len(),
            nodes = ?not_listed,
            "node metrics for nodes missing from the node list skipped"
        );
    }
    (samples, capacities, errors)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::NodeStatus;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    use k8s_openapi::jiff::Timestamp;

    use super::*;

    fn resources(cpu: &str, memory: &str) -> Option<BTreeMap<String, Quantity>> {
        Some(BTreeMap::from([
            ("cpu".to_string(), Quantity(cpu.into())),
            ("memory".to_string(), Quantity(memory.into())),
            ("pods".to_string(), Quantity("110".into())),
        ]))
    }

    fn node(name: &str, capacity: (&str, &str), allocatable: Option<(&str, &str)>) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            status: Some(NodeStatus {
                capacity: resources(capacity.0, capacity.1),
                allocatable: allocatable.and_then(|(c, m)| resources(c, m)),
                ..NodeStatus::default()
            }),
            ..Node::default()
        }
    }

    const T: i64 = 1_760_000_000;

    fn metrics(name: &str, cpu: &str, memory: &str, at: i64) -> NodeMetrics {
        let mut m = NodeMetrics::default();
        m.metadata.name = Some(name.into());
        m.timestamp = Time(Timestamp::from_second(at).unwrap());
        m.window = Duration::from_secs(20);
        m.usage.cpu = Quantity(cpu.into());
        m.usage.memory = Quantity(memory.into());
        m
    }

    fn at(s: i64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(s as u64)
    }

    const CAPACITY: MetricsServerConfig = MetricsServerConfig {
        use_allocatable: false,
    };
    const ALLOCATABLE: MetricsServerConfig = MetricsServerConfig {
        use_allocatable: true,
    };

    #[test]
    fn ratios_of_capacity_with_the_metrics_timestamp() {
        let nodes = [node("a", ("4", "8Gi"), Some(("3500m", "7Gi")))];
        let m = [metrics("a", "1", "2Gi", T)];
        let (samples, caps, errors) = samples_from(&m, &nodes, &CAPACITY, at(T + 99));
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(
            samples,
            vec![UsageSample {
                node: "a".into(),
                at: at(T),
                values: vec![(Resource::Cpu, 0.25), (Resource::Memory, 0.25)],
            }]
        );
        assert_eq!(
            caps,
            vec![(
                "a".to_string(),
                NodeCapacity {
                    cpu_cores: 4.0,
                    memory_bytes: 8.0 * 1024.0 * 1024.0 * 1024.0
                }
            )]
        );
    }

    #[test]
    fn ratios_of_allocatable_when_asked_falling_back_to_capacity() {
        let nodes = [
            node("a", ("4", "8Gi"), Some(("2", "4Gi"))),
            node("b", ("4", "8Gi"), None),
        ];
        let m = [metrics("a", "1", "2Gi", T), metrics("b", "1", "2Gi", T)];
        let (samples, caps, errors) = samples_from(&m, &nodes, &ALLOCATABLE, at(T));
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(
            samples[0].values,
            vec![(Resource::Cpu, 0.5), (Resource::Memory, 0.5)]
        );
        assert_eq!(caps[0].1.cpu_cores, 2.0);
        assert_eq!(
            samples[1].values,
            vec![(Resource::Cpu, 0.25), (Resource::Memory, 0.25)],
            "no allocatable reported: capacity, as the API defaults it"
        );
    }

    #[test]
    fn metrics_server_spellings() {
        let nodes = [node("a", ("2", "4028440Ki"), None)];
        let m = [metrics("a", "487558164n", "732212Ki", T)];
        let (samples, _, errors) = samples_from(&m, &nodes, &CAPACITY, at(T));
        assert!(errors.is_empty());
        let v = &samples[0].values;
        assert_eq!(v[0], (Resource::Cpu, 0.487558164 / 2.0));
        assert_eq!(v[1], (Resource::Memory, 732_212.0 / 4_028_440.0));
    }

    #[test]
    fn nodes_missing_from_the_node_list_are_skipped_without_error() {
        let nodes = [node("a", ("4", "8Gi"), None)];
        let mut nameless = metrics("x", "1", "1Gi", T);
        nameless.metadata.name = None;
        let m = [
            metrics("gone", "1", "1Gi", T),
            metrics("a", "2", "4Gi", T),
            nameless,
        ];
        let (samples, _, errors) = samples_from(&m, &nodes, &CAPACITY, at(T));
        assert!(errors.is_empty());
        assert_eq!(samples.len(), 1);
        assert_eq!(samples[0].node, "a");
    }

    #[test]
    fn bad_denominators_and_usage_are_errors_and_the_rest_is_kept() {
        let mut no_status = node("no-status", ("4", "8Gi"), None);
        no_status.status = None;
        let nodes = [
            node("good", ("4", "8Gi"), None),
            node("zero-cpu", ("0", "8Gi"), None),
            node("bad-mem", ("4", "8Gb"), None),
            no_status,
            node("bad-usage", ("4", "8Gi"), None),
            node("negative", ("4", "8Gi"), None),
            node("idle", ("0", "0"), None),
        ];
        let m = [
            metrics("good", "1", "2Gi", T),
            metrics("zero-cpu", "1", "2Gi", T),
            metrics("bad-mem", "1", "2Gi", T),
            metrics("no-status", "1", "2Gi", T),
            metrics("bad-usage", "1x", "2Gi", T),
            metrics("negative", "1", "-2Gi", T),
        ];
        let (samples, caps, errors) = samples_from(&m, &nodes, &CAPACITY, at(T));
        assert_eq!(samples.len(), 1);
        assert_eq!(samples[0].node, "good");
        let names: Vec<&str> = caps.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["good", "bad-usage", "negative"]);
        let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(text.len(), 5, "{text:?}");
        let want = [
            ("zero-cpu", "cpu capacity is \"0\", not above zero"),
            ("bad-mem", "memory capacity: invalid quantity \"8Gb\""),
            ("no-status", "no cpu capacity"),
            ("bad-usage", "cpu usage: invalid quantity \"1x\""),
            ("negative", "memory usage \"-2Gi\" is negative"),
        ];
        for (e, (node, why)) in text.iter().zip(want) {
            assert!(
                e.starts_with(&format!("metrics-server node {node}: ")),
                "{e}"
            );
            assert!(e.contains(why) && e.ends_with("; node skipped"), "{e}");
        }
        assert!(errors.iter().all(|e| e.metric_label() == "http"));
    }

    #[test]
    fn an_unset_timestamp_means_now() {
        let nodes = [node("a", ("4", "8Gi"), None)];
        let mut m = metrics("a", "1", "2Gi", T);
        m.timestamp = Time(Timestamp::UNIX_EPOCH);
        let (samples, _, _) = samples_from(&[m], &nodes, &CAPACITY, at(T + 5));
        assert_eq!(samples[0].at, at(T + 5));
        let mut m = metrics("a", "1", "2Gi", T);
        m.timestamp = Time(Timestamp::new(T, 250_000_000).unwrap());
        let (samples, _, _) = samples_from(&[m], &nodes, &CAPACITY, at(T + 5));
        assert_eq!(samples[0].at, at(T) + Duration::from_millis(250));
    }

    #[test]
    fn api_errors_keep_the_status() {
        let status =
            kube::core::Status::failure("metrics unavailable", "ServiceUnavailable").with_code(503);
        let e = list_error(WHAT_METRICS, &kube::Error::Api(status.boxed()));
        assert_eq!(e.metric_label(), "http");
        assert_eq!(
            e.to_string(),
            "LIST metrics.k8s.io/v1beta1 NodeMetrics: status 503 ServiceUnavailable: metrics unavailable"
        );
    }
}
