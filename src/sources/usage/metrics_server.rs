//! The Kubernetes Metrics Server backend: load-watcher's `KubernetesMetricsServer` source.
//!
//! Per fetch it LISTs `metrics.k8s.io/v1beta1` NodeMetrics and core/v1 Nodes (concurrently) and
//! turns each node's usage into ratios of its capacity (load-watcher) or, optionally, of its
//! allocatable. Each sample carries the time metrics-server says the usage stands for.
//!
//! Better than load-watcher: quantities are parsed in full (every SI, binary and exponent form,
//! fractions), and a node whose denominator is missing, zero, absurd or unparsable gets no
//! ratio of that resource (a counted, logged drop) instead of an infinite or wrong percentage.
//! Ratios go to the hub as measured: its one rule drops a negative or above-capacity one.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_metrics::v1beta1::NodeMetrics;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::Api;
use kube::api::ListParams;
use serde::{Deserialize, Deserializer};

use super::{Dropped, Fetched, UsageFetcher};
use crate::hub::{DropReason, validate};
use crate::k8s::lean::LeanNode;
use crate::model::{NodeCapacity, Resource, UsageSample};
use crate::shared::quantity::parse_quantity;

/// Settings of the metrics-server backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MetricsServerConfig {
    /// Divide usage by the node's allocatable instead of its capacity. Off (the default) is
    /// load-watcher's behaviour: capacity.
    pub use_allocatable: bool,
}

/// The Nodes the cluster role's watchers already hold (trimmed, with capacity and allocatable).
pub type NodeSource = Arc<dyn Fn() -> Vec<Arc<LeanNode>> + Send + Sync>;

/// Resolves once the Node watcher's first list is in its store (`true`), or when the watcher
/// ended without one (`false`).
pub type NodesListed = Pin<Box<dyn Future<Output = bool> + Send>>;

/// How long the first fetch waits for the Node watcher's first list before it lists Nodes
/// itself. At 65,000 nodes that list takes seconds; listing them twice at once (the watcher
/// and the fetch) held every Node twice at start-up (docs/benchmarks.md). The readiness budget
/// at that size is 60 s.
pub const NODE_LIST_WAIT: Duration = Duration::from_secs(30);

/// Reads node usage from the resource metrics API through the Kubernetes API server.
pub struct MetricsServerFetcher {
    client: kube::Client,
    cfg: MetricsServerConfig,
    nodes: Option<NodeSource>,
    /// Taken by the first fetch.
    nodes_listed: Option<NodesListed>,
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
            nodes_listed: None,
        }
    }

    /// Takes capacities from Nodes already watched instead of listing every Node on every
    /// fetch (at 5,000 nodes that LIST is tens of megabytes every interval, for the API server
    /// and for us). The first fetch waits up to [`NODE_LIST_WAIT`] for `listed` (the watcher's
    /// first list); whenever the watcher has no nodes, Nodes are listed as without it.
    pub fn with_node_source(mut self, nodes: NodeSource, listed: NodesListed) -> Self {
        self.nodes = Some(nodes);
        self.nodes_listed = Some(listed);
        self
    }
}

/// A NodeMetrics as each fetch decodes it: the name, the timestamp and the CPU and memory
/// usage, in the shapes of `k8s_metrics`' `NodeMetrics`. The rest of the metadata (labels,
/// creation time, managed fields) is skipped by the parser without being allocated, and the
/// window (which the samples do not use) only has to be there, as before.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct LeanNodeMetrics {
    #[serde(deserialize_with = "name_only")]
    pub metadata: ObjectMeta,
    pub timestamp: Time,
    pub window: serde::de::IgnoredAny,
    pub usage: LeanUsage,
}

/// The usage a NodeMetrics reports.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct LeanUsage {
    pub cpu: Quantity,
    pub memory: Quantity,
}

fn name_only<'de, D: Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    #[derive(Deserialize)]
    struct NameOnly {
        #[serde(default)]
        name: Option<String>,
    }
    let m = NameOnly::deserialize(d)?;
    Ok(ObjectMeta {
        name: m.name,
        ..ObjectMeta::default()
    })
}

crate::k8s::lean::lean_resource!(LeanNodeMetrics, NodeMetrics, ClusterResourceScope);

const WHAT_METRICS: &str = "LIST metrics.k8s.io/v1beta1 NodeMetrics";
const WHAT_NODES: &str = "LIST v1 Nodes";

impl UsageFetcher for MetricsServerFetcher {
    fn name(&self) -> &'static str {
        "metrics_server"
    }

    async fn before_first_fetch(&mut self) {
        let Some(listed) = self.nodes_listed.take() else {
            return;
        };
        let started = std::time::Instant::now();
        match tokio::time::timeout(NODE_LIST_WAIT, listed).await {
            Ok(true) => tracing::debug!(
                waited = ?started.elapsed(),
                "first NodeMetrics fetch after the Node watcher's first list"
            ),
            Ok(false) => tracing::info!(
                "the Node watcher ended without a list; NodeMetrics fetches list Nodes themselves"
            ),
            Err(_) => tracing::info!(
                waited = ?NODE_LIST_WAIT,
                "the Node watcher has not listed every Node yet; NodeMetrics fetches list Nodes \
                 themselves until it has"
            ),
        }
    }

    async fn fetch(&mut self) -> Fetched {
        let metrics_api: Api<LeanNodeMetrics> = Api::all(self.client.clone());
        let watched = self.nodes.as_ref().map(|f| f()).unwrap_or_default();
        let mut fetched = Fetched::default();
        if !watched.is_empty() {
            // Each page of NodeMetrics becomes samples as it arrives. metrics-server itself
            // ignores `limit` and answers the whole list as one page (docs/benchmarks.md, "The
            // cluster role with the real metrics-server"); an implementation that pages is
            // never held whole.
            let now = SystemTime::now();
            let mut conv = Converter::new(&watched, &self.cfg, now);
            let listed = for_each_page(&metrics_api, |page| conv.add(page)).await;
            let out = conv.finish();
            fetched.capacities = out.capacities;
            match listed {
                Ok(()) => {
                    fetched.samples = out.samples;
                    fetched.dropped = out.dropped;
                }
                // As with a whole list that failed: no usage of this fetch is recorded.
                Err(e) => fetched
                    .errors
                    .push(crate::k8s::client::kube_error(WHAT_METRICS, &e)),
            }
            return fetched;
        }
        let nodes_api: Api<LeanNode> = Api::all(self.client.clone());
        let (metrics, nodes) = tokio::join!(list_all(&metrics_api), list_all(&nodes_api));
        let now = SystemTime::now();
        let nodes = match nodes {
            Ok(items) => items,
            Err(e) => {
                // Without the denominators no usage can be turned into a ratio.
                fetched
                    .errors
                    .push(crate::k8s::client::kube_error(WHAT_NODES, &e));
                if let Err(e) = metrics {
                    fetched
                        .errors
                        .push(crate::k8s::client::kube_error(WHAT_METRICS, &e));
                }
                return fetched;
            }
        };
        let metrics = match metrics {
            Ok(items) => items,
            Err(e) => {
                fetched
                    .errors
                    .push(crate::k8s::client::kube_error(WHAT_METRICS, &e));
                Vec::new()
            }
        };
        let out = samples_from(metrics, &nodes, &self.cfg, now);
        fetched.samples = out.samples;
        fetched.capacities = out.capacities;
        fetched.dropped = out.dropped;
        fetched
    }
}

/// Items per LIST page asked for: bounds each response of a server that pages (Nodes; a
/// metrics.k8s.io implementation that honours `limit`). metrics-server does not: its one answer
/// is bounded only by `--max-response-bytes`.
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
    for_each_page(api, |page| items.extend(page)).await?;
    Ok(items)
}

/// Hands every page of the list to `each` as it arrives, each page retried with backoff when
/// the failure is transient. On an error, the pages before it were handed over already.
async fn for_each_page<K>(api: &Api<K>, mut each: impl FnMut(Vec<K>)) -> Result<(), kube::Error>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
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
        each(page.items);
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(()),
        }
    }
}

/// Whether `e` is an answer past `--max-response-bytes`: never retried (it would only be
/// read again), and counted as `too_large`.
fn too_large(e: &kube::Error) -> bool {
    crate::shared::limit::find_too_large(e).is_some()
}

/// One denominator usage is divided by: capacity, or allocatable when configured (which
/// defaults to capacity, as the API documents, where a node does not report it). `Err` holds
/// why it is unusable (the hub's rule in [`validate`]) and what to log.
fn denominator(
    node: &LeanNode,
    cfg: &MetricsServerConfig,
    resource: &str,
) -> Result<f64, (DropReason, String)> {
    let status = node.status.as_ref();
    let capacity = status.and_then(|s| s.capacity.as_ref());
    let allocatable = status.and_then(|s| s.allocatable.as_ref());
    let from_allocatable = if cfg.use_allocatable {
        allocatable.and_then(|m| m.get(resource))
    } else {
        None
    };
    let (field, q) = match from_allocatable {
        Some(q) => ("allocatable", Some(q)),
        None => ("capacity", capacity.and_then(|m| m.get(resource))),
    };
    let q = q.ok_or_else(|| (DropReason::BadCapacity, format!("{resource} {field}")))?;
    let v = parse_quantity(&q.0)
        .map_err(|_| (DropReason::Unparsable, format!("{resource} {field}")))?;
    let check = if resource == "cpu" {
        validate::cpu_cores
    } else {
        validate::memory_bytes
    };
    check(v).map_err(|r| (r, format!("{resource} {field}")))
}

/// The time the usage stands for; `now` where metrics-server left it unset (the zero time).
fn sample_time(m: &LeanNodeMetrics, now: SystemTime) -> SystemTime {
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

/// What the two LISTs give: samples, the denominators used (for every node where both are
/// usable) and the values that could not be used. A node's bad value never touches another
/// node or the node's other resource; values the hub must judge (a negative or absurd ratio)
/// are passed on as they are, so its one rule decides.
#[derive(Debug, Default, PartialEq)]
struct FromLists {
    samples: Vec<UsageSample>,
    capacities: Vec<(String, NodeCapacity)>,
    dropped: Vec<Dropped>,
}

fn samples_from<N: std::borrow::Borrow<LeanNode>>(
    node_metrics: Vec<LeanNodeMetrics>,
    nodes: &[N],
    cfg: &MetricsServerConfig,
    now: SystemTime,
) -> FromLists {
    let mut conv = Converter::new(nodes, cfg, now);
    conv.add(node_metrics);
    conv.finish()
}

/// Turns NodeMetrics into [`FromLists`], one batch (a LIST page) at a time. A node's
/// denominators are worked out when its NodeMetrics arrives (and once more for the
/// capacities): the index holds only where each node is, 24 bytes a node instead of its two
/// results (81 bytes: 10.6 MB at 65,000 nodes, alive through every fetch).
struct Converter<'a, N> {
    nodes: &'a [N],
    cfg: &'a MetricsServerConfig,
    by_name: HashMap<&'a str, u32>,
    out: FromLists,
    not_listed: Vec<String>,
    now: SystemTime,
}

impl<'a, N: std::borrow::Borrow<LeanNode>> Converter<'a, N> {
    fn new(nodes: &'a [N], cfg: &'a MetricsServerConfig, now: SystemTime) -> Self {
        let mut by_name = HashMap::with_capacity(nodes.len());
        let mut out = FromLists {
            samples: Vec::with_capacity(nodes.len()),
            capacities: Vec::with_capacity(nodes.len()),
            dropped: Vec::new(),
        };
        for (i, node) in nodes.iter().enumerate() {
            let node = node.borrow();
            let (Some(name), Ok(i)) = (node.metadata.name.as_deref(), u32::try_from(i)) else {
                continue;
            };
            let cpu = denominator(node, cfg, "cpu");
            let memory = denominator(node, cfg, "memory");
            if let (Ok(cpu_cores), Ok(memory_bytes)) = (&cpu, &memory) {
                let c = NodeCapacity {
                    cpu_cores: *cpu_cores,
                    memory_bytes: *memory_bytes,
                };
                out.capacities.push((name.to_string(), c));
            }
            by_name.insert(name, i);
        }
        Converter {
            nodes,
            cfg,
            by_name,
            out,
            not_listed: Vec::new(),
            now,
        }
    }

    /// One batch of NodeMetrics, by value: each sample takes its NodeMetrics' name (no copy
    /// per node and fetch).
    fn add(&mut self, node_metrics: Vec<LeanNodeMetrics>) {
        let out = &mut self.out;
        for mut m in node_metrics {
            let name = m.metadata.name.take().unwrap_or_default();
            let Some(node) = self
                .by_name
                .get(name.as_str())
                .and_then(|&i| self.nodes.get(i as usize))
            else {
                self.not_listed.push(name);
                continue;
            };
            let node = node.borrow();
            let (cpu_d, memory_d) = (
                &denominator(node, self.cfg, "cpu"),
                &denominator(node, self.cfg, "memory"),
            );
            let mut values = Vec::with_capacity(2);
            for (resource, raw, d) in [
                (Resource::Cpu, &m.usage.cpu.0, cpu_d),
                (Resource::Memory, &m.usage.memory.0, memory_d),
            ] {
                let what = resource.as_str();
                let usage = match parse_quantity(raw) {
                    Ok(v) => v,
                    Err(_) => {
                        out.dropped.push(Dropped {
                            node: name.to_string(),
                            what: format!("{what} usage {raw:?}"),
                            reason: DropReason::Unparsable,
                        });
                        continue;
                    }
                };
                match d {
                    Ok(d) => values.push((resource, usage / d)),
                    Err((reason, field)) => out.dropped.push(Dropped {
                        node: name.to_string(),
                        what: field.clone(),
                        reason: *reason,
                    }),
                }
            }
            if !values.is_empty() {
                out.samples.push(UsageSample {
                    at: sample_time(&m, self.now),
                    node: name,
                    values,
                });
            }
        }
    }

    fn finish(self) -> FromLists {
        if !self.not_listed.is_empty() {
            tracing::debug!(
                skipped = self.not_listed.len(),
                nodes = ?self.not_listed,
                "node metrics for nodes missing from the node list skipped"
            );
        }
        self.out
    }
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

    fn node(name: &str, capacity: (&str, &str), allocatable: Option<(&str, &str)>) -> LeanNode {
        use crate::k8s::lean::AsLeanNode;
        k8s_openapi::api::core::v1::Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            status: Some(NodeStatus {
                capacity: resources(capacity.0, capacity.1),
                allocatable: allocatable.and_then(|(c, m)| resources(c, m)),
                ..NodeStatus::default()
            }),
            ..Default::default()
        }
        .lean()
        .unwrap()
        .into_owned()
    }

    const T: i64 = 1_760_000_000;

    fn metrics(name: &str, cpu: &str, memory: &str, at: i64) -> LeanNodeMetrics {
        LeanNodeMetrics {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            timestamp: Time(Timestamp::from_second(at).unwrap()),
            window: serde::de::IgnoredAny,
            usage: LeanUsage {
                cpu: Quantity(cpu.into()),
                memory: Quantity(memory.into()),
            },
        }
    }

    #[test]
    fn lean_decoding_reads_what_the_full_type_reads_and_skips_the_rest() {
        let json = r#"{"kind":"NodeMetrics","apiVersion":"metrics.k8s.io/v1beta1",
            "metadata":{"name":"n1","creationTimestamp":"2025-01-01T00:00:00Z",
              "labels":{"kubernetes.io/hostname":"n1"},"managedFields":[{"manager":"m"}]},
            "timestamp":"2025-10-09T08:26:40.25Z","window":"20.035s",
            "usage":{"cpu":"487558164n","memory":"732212Ki","extra":"1"}}"#;
        let full: NodeMetrics = serde_json::from_str(json).unwrap();
        let lean: LeanNodeMetrics = serde_json::from_str(json).unwrap();
        assert_eq!(lean.metadata.name, full.metadata.name);
        assert!(lean.metadata.labels.is_none(), "labels are not kept");
        assert_eq!(lean.timestamp, full.timestamp);
        assert_eq!(lean.usage.cpu, full.usage.cpu);
        assert_eq!(lean.usage.memory, full.usage.memory);
        // What the full type requires, the lean one requires too: such an item fails the LIST.
        for missing in ["\"timestamp\"", "\"window\"", "\"usage\""] {
            let broken = json.replacen(missing, "\"x\"", 1);
            assert!(
                serde_json::from_str::<NodeMetrics>(&broken).is_err(),
                "{missing}"
            );
            assert!(
                serde_json::from_str::<LeanNodeMetrics>(&broken).is_err(),
                "{missing}"
            );
        }
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
        let FromLists {
            samples,
            capacities: caps,
            dropped,
        } = samples_from(m.to_vec(), &nodes, &CAPACITY, at(T + 99));
        assert!(dropped.is_empty(), "{dropped:?}");
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
        let FromLists {
            samples,
            capacities: caps,
            dropped,
        } = samples_from(m.to_vec(), &nodes, &ALLOCATABLE, at(T));
        assert!(dropped.is_empty(), "{dropped:?}");
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
        let FromLists {
            samples, dropped, ..
        } = samples_from(m.to_vec(), &nodes, &CAPACITY, at(T));
        assert!(dropped.is_empty());
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
        let FromLists {
            samples, dropped, ..
        } = samples_from(m.to_vec(), &nodes, &CAPACITY, at(T));
        assert!(dropped.is_empty());
        assert_eq!(samples.len(), 1);
        assert_eq!(samples[0].node, "a");
    }

    #[test]
    fn bad_denominators_and_usage_drop_only_their_own_value() {
        let mut no_status = node("no-status", ("4", "8Gi"), None);
        no_status.status = None;
        let nodes = [
            node("good", ("4", "8Gi"), None),
            node("zero-cpu", ("0", "8Gi"), None),
            node("bad-mem", ("4", "8Gb"), None),
            no_status,
            node("bad-usage", ("4", "8Gi"), None),
            node("negative", ("4", "8Gi"), None),
            node("absurd-cpu", ("1e9", "8Gi"), None),
            node("lying", ("4", "8Gi"), None),
            node("idle", ("0", "0"), None),
        ];
        let m = [
            metrics("good", "1", "2Gi", T),
            metrics("zero-cpu", "1", "2Gi", T),
            metrics("bad-mem", "1", "2Gi", T),
            metrics("no-status", "1", "2Gi", T),
            metrics("bad-usage", "1x", "2Gi", T),
            metrics("negative", "1", "-2Gi", T),
            metrics("absurd-cpu", "1", "2Gi", T),
            metrics("lying", "400", "2Gi", T),
        ];
        let out = samples_from(m.to_vec(), &nodes, &CAPACITY, at(T));
        let served: Vec<(&str, Vec<(Resource, f64)>)> = out
            .samples
            .iter()
            .map(|s| (s.node.as_str(), s.values.clone()))
            .collect();
        // Ratios the hub judges (negative, above capacity) go on as measured.
        assert_eq!(
            served,
            [
                (
                    "good",
                    vec![(Resource::Cpu, 0.25), (Resource::Memory, 0.25)]
                ),
                ("zero-cpu", vec![(Resource::Memory, 0.25)]),
                ("bad-mem", vec![(Resource::Cpu, 0.25)]),
                ("bad-usage", vec![(Resource::Memory, 0.25)]),
                (
                    "negative",
                    vec![(Resource::Cpu, 0.25), (Resource::Memory, -0.25)]
                ),
                ("absurd-cpu", vec![(Resource::Memory, 0.25)]),
                (
                    "lying",
                    vec![(Resource::Cpu, 100.0), (Resource::Memory, 0.25)]
                ),
            ]
        );
        let names: Vec<&str> = out.capacities.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["good", "bad-usage", "negative", "lying"]);
        let dropped: Vec<(&str, &str, DropReason)> = out
            .dropped
            .iter()
            .map(|d| (d.node.as_str(), d.what.as_str(), d.reason))
            .collect();
        assert_eq!(
            dropped,
            [
                ("zero-cpu", "cpu capacity", DropReason::BadCapacity),
                ("bad-mem", "memory capacity", DropReason::Unparsable),
                ("no-status", "cpu capacity", DropReason::BadCapacity),
                ("no-status", "memory capacity", DropReason::BadCapacity),
                ("bad-usage", "cpu usage \"1x\"", DropReason::Unparsable),
                ("absurd-cpu", "cpu capacity", DropReason::BadCapacity),
            ]
        );
    }

    #[test]
    fn an_unset_timestamp_means_now() {
        let nodes = [node("a", ("4", "8Gi"), None)];
        let mut m = metrics("a", "1", "2Gi", T);
        m.timestamp = Time(Timestamp::UNIX_EPOCH);
        let samples = samples_from(vec![m.clone()], &nodes, &CAPACITY, at(T + 5)).samples;
        assert_eq!(samples[0].at, at(T + 5));
        let mut m = metrics("a", "1", "2Gi", T);
        m.timestamp = Time(Timestamp::new(T, 250_000_000).unwrap());
        let samples = samples_from(vec![m.clone()], &nodes, &CAPACITY, at(T + 5)).samples;
        assert_eq!(samples[0].at, at(T) + Duration::from_millis(250));
    }

    #[test]
    fn undecodable_answers_are_parse_errors() {
        let err = serde_json::from_str::<serde_json::Value>("{not json").unwrap_err();
        let e = crate::k8s::client::kube_error(WHAT_METRICS, &kube::Error::SerdeError(err));
        assert_eq!(e.metric_label(), "parse");
        assert!(e.to_string().contains("invalid JSON"), "{e}");
    }

    #[test]
    fn api_errors_keep_the_status() {
        let status =
            kube::core::Status::failure("metrics unavailable", "ServiceUnavailable").with_code(503);
        let e = crate::k8s::client::kube_error(WHAT_METRICS, &kube::Error::Api(status.boxed()));
        assert_eq!(e.metric_label(), "http");
        assert_eq!(
            e.to_string(),
            "LIST metrics.k8s.io/v1beta1 NodeMetrics: status 503 ServiceUnavailable: metrics unavailable"
        );
    }
}
