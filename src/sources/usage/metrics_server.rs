//! The Kubernetes Metrics Server backend: load-watcher's `KubernetesMetricsServer` source.
//!
//! Per fetch it LISTs `metrics.k8s.io/v1beta1` NodeMetrics and turns each node's usage into
//! ratios of its capacity (load-watcher) or, optionally, of its allocatable, taken from the Nodes
//! the cluster role watches (or, without that watcher, from a LIST of Nodes). Each sample carries
//! the time metrics-server says the usage stands for.
//!
//! metrics-server answers the NodeMetrics list whole, whatever `limit` says: about 1.3 KB a node
//! with GKE's labels, 80 MiB at 65,000 nodes. The list is read as a stream
//! ([`crate::k8s::stream_list`]): each item is decoded as it arrives and goes to the hub at once
//! ([`UsageFetcher::fetch_into`]), so a fetch holds one item, never the body or the decoded
//! list. `--max-response-bytes` caps each item; a larger one is a counted, logged skip of that
//! node (`too_large`), as is an item that does not decode (`unparsable`, naming the item and its
//! byte offset, never quoting it). The fetch as a whole is bounded by the source's timeout.
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
use kube::runtime::reflector::{ObjectRef, Store};
use serde::{Deserialize, Deserializer};

use super::{Dropped, Fetched, UsageFetcher};
use crate::hub::{DropReason, NodeRecorder, validate};
use crate::k8s::lean::LeanNode;
use crate::k8s::stream_list::{NODE_METRICS_PATH, NODES_PATH, Reading, list_items};
use crate::model::{NodeCapacity, Resource, UsageSample};
use crate::shared::error::{Cause, Error, Oversize};
use crate::shared::json_items::Piece;
use crate::shared::limit::DEFAULT_MAX_RESPONSE_BYTES;
use crate::shared::quantity::parse_quantity;

/// Settings of the metrics-server backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetricsServerConfig {
    /// Divide usage by the node's allocatable instead of its capacity. Off (the default) is
    /// load-watcher's behaviour: capacity.
    pub use_allocatable: bool,
    /// The largest NodeMetrics item read (`--max-response-bytes`); a larger one is skipped and
    /// counted.
    pub max_item_bytes: usize,
}

impl Default for MetricsServerConfig {
    fn default() -> Self {
        MetricsServerConfig {
            use_allocatable: false,
            max_item_bytes: DEFAULT_MAX_RESPONSE_BYTES,
        }
    }
}

/// Nodes by name, with capacity and allocatable: the cluster role's Node watcher, or a LIST.
pub trait NodeLookup: Send + Sync {
    fn node(&self, name: &str) -> Option<Arc<LeanNode>>;
    fn is_empty(&self) -> bool;
}

impl NodeLookup for Store<LeanNode> {
    fn node(&self, name: &str) -> Option<Arc<LeanNode>> {
        self.get(&ObjectRef::new(name))
    }
    fn is_empty(&self) -> bool {
        Store::is_empty(self)
    }
}

impl NodeLookup for HashMap<String, Arc<LeanNode>> {
    fn node(&self, name: &str) -> Option<Arc<LeanNode>> {
        self.get(name).cloned()
    }
    fn is_empty(&self) -> bool {
        HashMap::is_empty(self)
    }
}

/// A lookup its owner brings up to date between fetches.
impl NodeLookup for std::sync::Mutex<HashMap<String, Arc<LeanNode>>> {
    fn node(&self, name: &str) -> Option<Arc<LeanNode>> {
        let map = self.lock().unwrap_or_else(|p| p.into_inner());
        map.get(name).cloned()
    }
    fn is_empty(&self) -> bool {
        self.lock().unwrap_or_else(|p| p.into_inner()).is_empty()
    }
}

/// The Nodes the cluster role's watchers already hold (trimmed, with capacity and allocatable).
pub type NodeSource = Arc<dyn NodeLookup>;

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

    /// One fetch into `out`: the nodes' denominators, then every NodeMetrics item as it
    /// arrives. The errors are returned; what was converted before one stays in `out`.
    async fn convert<O: UsageOut + Send>(&mut self, out: &mut O) -> Fetched {
        let mut fetched = Fetched::default();
        let listed: HashMap<String, Arc<LeanNode>>;
        let nodes: &dyn NodeLookup = match self.nodes.as_deref() {
            Some(watched) if !watched.is_empty() => watched,
            _ => match list_nodes(&self.client, self.cfg.max_item_bytes).await {
                Ok(map) => {
                    listed = map;
                    &listed
                }
                Err(e) => {
                    // Without the denominators no usage can be turned into a ratio.
                    fetched.errors.push(e);
                    return fetched;
                }
            },
        };
        let mut conv = Converter::new(nodes, &self.cfg, SystemTime::now(), out);
        let reading = Reading {
            max_item: self.cfg.max_item_bytes,
            stop_after: None,
            page: None,
        };
        let streamed = list_items(&self.client, NODE_METRICS_PATH, reading, &mut |piece| {
            conv.piece(piece)
        })
        .await
        .map_err(|e| e.into_error(WHAT_METRICS));
        conv.finish();
        match streamed {
            Ok(listed) => tracing::debug!(
                items = listed.items,
                bytes = listed.bytes,
                pages = listed.pages,
                "NodeMetrics list read"
            ),
            Err(e) => fetched.errors.push(e),
        }
        fetched
    }
}

/// Every Node, page by page, by name, each decoded as it arrives. A Node that does not decode
/// (or is over `max_item` bytes) fails the list, as a LIST that did not decode always has.
async fn list_nodes(
    client: &kube::Client,
    max_item: usize,
) -> Result<HashMap<String, Arc<LeanNode>>, Error> {
    let mut map = HashMap::new();
    let mut bad: Option<Error> = None;
    let reading = Reading {
        max_item,
        stop_after: None,
        page: Some(PAGE),
    };
    let listed = list_items(client, NODES_PATH, reading, &mut |piece| {
        if bad.is_some() {
            return;
        }
        match piece {
            Piece::Item {
                index,
                offset,
                bytes,
            } => match serde_json::from_slice::<LeanNode>(bytes) {
                Ok(n) => {
                    if let Some(name) = n.metadata.name.clone() {
                        map.insert(name, Arc::new(n));
                    }
                }
                Err(e) => {
                    bad = Some(Error::parse(
                        WHAT_NODES,
                        Cause::context(format!("Node {index} at byte {offset}"), e),
                    ))
                }
            },
            Piece::Oversized { index, len, .. } => {
                bad = Some(Error::too_large(
                    WHAT_NODES,
                    Oversize::Item {
                        kind: "Node",
                        index,
                        len,
                        limit: max_item,
                    },
                ))
            }
        }
    })
    .await;
    listed.map_err(|e| e.into_error(WHAT_NODES))?;
    match bad {
        Some(e) => Err(e),
        None => Ok(map),
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

    /// The samples collected in a list (for callers without a hub; `fetch_into` is what runs).
    async fn fetch(&mut self) -> Fetched {
        let mut lists = FromLists::default();
        let mut fetched = self.convert(&mut lists).await;
        fetched.samples = lists.samples;
        fetched.capacities = lists.capacities;
        fetched.dropped = lists.dropped;
        fetched
    }

    async fn fetch_into(&mut self, out: &dyn NodeRecorder) -> Fetched {
        let mut recording = Recording {
            out,
            source: self.name(),
            samples: 0,
        };
        let mut fetched = self.convert(&mut recording).await;
        fetched.streamed = recording.samples;
        fetched
    }
}

/// Items per LIST page of Nodes asked for (the API server pages them).
const PAGE: u32 = 500;

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

/// Where converted NodeMetrics go: the hub as each item is decoded ([`Recording`]), or lists
/// ([`FromLists`]: `fetch` and the tests).
trait UsageOut {
    fn sample(&mut self, sample: UsageSample);
    fn capacity(&mut self, node: &str, capacity: NodeCapacity);
    fn dropped(&mut self, dropped: Dropped);
}

/// What the conversion gives as lists: samples, the denominators used (for every node with
/// usage where both are usable) and the values that could not be used. A node's bad value never
/// touches another node or the node's other resource; values the hub must judge (a negative or
/// absurd ratio) are passed on as they are, so its one rule decides.
#[derive(Debug, Default, PartialEq)]
struct FromLists {
    samples: Vec<UsageSample>,
    capacities: Vec<(String, NodeCapacity)>,
    dropped: Vec<Dropped>,
}

impl UsageOut for FromLists {
    fn sample(&mut self, sample: UsageSample) {
        self.samples.push(sample);
    }
    fn capacity(&mut self, node: &str, capacity: NodeCapacity) {
        self.capacities.push((node.to_string(), capacity));
    }
    fn dropped(&mut self, dropped: Dropped) {
        self.dropped.push(dropped);
    }
}

/// Straight into the hub, item by item.
struct Recording<'a> {
    out: &'a dyn NodeRecorder,
    source: &'static str,
    samples: u64,
}

impl UsageOut for Recording<'_> {
    fn sample(&mut self, sample: UsageSample) {
        self.samples += 1;
        self.out.record_node_usage(self.source, sample);
    }
    fn capacity(&mut self, node: &str, capacity: NodeCapacity) {
        self.out.record_node_capacity(node, capacity);
    }
    fn dropped(&mut self, d: Dropped) {
        self.out
            .record_dropped(self.source, &d.node, &d.what, d.reason);
    }
}

#[cfg(test)]
fn samples_from(
    node_metrics: Vec<LeanNodeMetrics>,
    nodes: &HashMap<String, Arc<LeanNode>>,
    cfg: &MetricsServerConfig,
    now: SystemTime,
) -> FromLists {
    let mut out = FromLists::default();
    let mut conv = Converter::new(nodes, cfg, now, &mut out);
    for m in node_metrics {
        conv.add(m);
    }
    conv.finish();
    out
}

/// The name of a NodeMetrics item that could not be decoded, from its first bytes (its
/// `metadata.name` comes first), for the skip's count and log.
fn name_in(bytes: &[u8]) -> String {
    const KEY: &[u8] = b"\"name\":\"";
    memchr::memmem::find(bytes, KEY)
        .and_then(|at| {
            let rest = &bytes[at + KEY.len()..];
            let end = memchr::memchr(b'"', rest)?;
            std::str::from_utf8(&rest[..end.min(253)]).ok()
        })
        .filter(|n| !n.is_empty())
        .unwrap_or("<unnamed>")
        .to_string()
}

/// Turns NodeMetrics into samples for `out`, one item at a time, each node's denominators
/// worked out when its NodeMetrics arrives.
struct Converter<'a, O> {
    nodes: &'a dyn NodeLookup,
    cfg: &'a MetricsServerConfig,
    out: &'a mut O,
    not_listed: u64,
    first_not_listed: Option<String>,
    now: SystemTime,
}

impl<'a, O: UsageOut> Converter<'a, O> {
    fn new(
        nodes: &'a dyn NodeLookup,
        cfg: &'a MetricsServerConfig,
        now: SystemTime,
        out: &'a mut O,
    ) -> Self {
        Converter {
            nodes,
            cfg,
            out,
            not_listed: 0,
            first_not_listed: None,
            now,
        }
    }

    /// One element of the list as the stream hands it over.
    fn piece(&mut self, piece: Piece<'_>) {
        match piece {
            Piece::Item {
                index,
                offset,
                bytes,
            } => match serde_json::from_slice::<LeanNodeMetrics>(bytes) {
                Ok(m) => self.add(m),
                Err(e) => self.out.dropped(Dropped {
                    node: name_in(bytes),
                    what: format!("NodeMetrics item {index} at byte {offset}: {e}"),
                    reason: DropReason::Unparsable,
                }),
            },
            Piece::Oversized {
                index,
                offset,
                len,
                head,
            } => self.out.dropped(Dropped {
                node: name_in(head),
                what: format!(
                    "NodeMetrics item {index} at byte {offset}: {len} bytes, over the {}-byte \
                     limit (--max-response-bytes)",
                    self.cfg.max_item_bytes
                ),
                reason: DropReason::TooLarge,
            }),
        }
    }

    /// One NodeMetrics, by value: the sample takes its name (no copy per node and fetch).
    fn add(&mut self, mut m: LeanNodeMetrics) {
        let name = m.metadata.name.take().unwrap_or_default();
        let Some(node) = self.nodes.node(&name) else {
            self.not_listed += 1;
            if self.first_not_listed.is_none() {
                self.first_not_listed = Some(name);
            }
            return;
        };
        let (cpu_d, memory_d) = (
            denominator(&node, self.cfg, "cpu"),
            denominator(&node, self.cfg, "memory"),
        );
        let mut values = Vec::with_capacity(2);
        for (resource, raw, d) in [
            (Resource::Cpu, &m.usage.cpu.0, &cpu_d),
            (Resource::Memory, &m.usage.memory.0, &memory_d),
        ] {
            let usage = match parse_quantity(raw) {
                Ok(v) => v,
                Err(_) => {
                    self.out.dropped(Dropped {
                        node: name.clone(),
                        what: format!("{} usage {raw:?}", resource.as_str()),
                        reason: DropReason::Unparsable,
                    });
                    continue;
                }
            };
            match d {
                Ok(d) => values.push((resource, usage / d)),
                Err((reason, field)) => self.out.dropped(Dropped {
                    node: name.clone(),
                    what: field.clone(),
                    reason: *reason,
                }),
            }
        }
        if values.is_empty() {
            return;
        }
        let at = sample_time(&m, self.now);
        let capacity = match (cpu_d, memory_d) {
            (Ok(cpu_cores), Ok(memory_bytes)) => Some(NodeCapacity {
                cpu_cores,
                memory_bytes,
            }),
            _ => None,
        };
        let node_name = capacity.is_some().then(|| name.clone());
        self.out.sample(UsageSample {
            at,
            node: name,
            values,
        });
        if let (Some(c), Some(n)) = (capacity, node_name) {
            self.out.capacity(&n, c);
        }
    }

    fn finish(self) {
        if self.not_listed > 0 {
            tracing::debug!(
                skipped = self.not_listed,
                first = ?self.first_not_listed,
                "node metrics for nodes missing from the node list skipped"
            );
        }
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
        max_item_bytes: 1 << 20,
    };
    const ALLOCATABLE: MetricsServerConfig = MetricsServerConfig {
        use_allocatable: true,
        max_item_bytes: 1 << 20,
    };

    /// Nodes by name, as the lookup holds them.
    fn by_name(nodes: impl IntoIterator<Item = LeanNode>) -> HashMap<String, Arc<LeanNode>> {
        nodes
            .into_iter()
            .map(|n| (n.metadata.name.clone().unwrap(), Arc::new(n)))
            .collect()
    }

    #[test]
    fn ratios_of_capacity_with_the_metrics_timestamp() {
        let nodes = [node("a", ("4", "8Gi"), Some(("3500m", "7Gi")))];
        let m = [metrics("a", "1", "2Gi", T)];
        let FromLists {
            samples,
            capacities: caps,
            dropped,
        } = samples_from(m.to_vec(), &by_name(nodes.clone()), &CAPACITY, at(T + 99));
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
        } = samples_from(m.to_vec(), &by_name(nodes.clone()), &ALLOCATABLE, at(T));
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
        } = samples_from(m.to_vec(), &by_name(nodes.clone()), &CAPACITY, at(T));
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
        } = samples_from(m.to_vec(), &by_name(nodes.clone()), &CAPACITY, at(T));
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
        let out = samples_from(m.to_vec(), &by_name(nodes.clone()), &CAPACITY, at(T));
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
        let nodes = by_name([node("a", ("4", "8Gi"), None)]);
        let sample_at = |ts: Timestamp| {
            let mut m = metrics("a", "1", "2Gi", T);
            m.timestamp = Time(ts);
            samples_from(vec![m], &nodes, &CAPACITY, at(T + 5)).samples[0].at
        };
        assert_eq!(sample_at(Timestamp::UNIX_EPOCH), at(T + 5));
        assert_eq!(
            sample_at(Timestamp::new(T, 250_000_000).unwrap()),
            at(T) + Duration::from_millis(250)
        );
    }

    #[test]
    fn an_item_that_does_not_decode_or_is_too_large_is_a_named_skip_and_the_rest_go_on() {
        let nodes = by_name([node("a", ("4", "8Gi"), None), node("b", ("4", "8Gi"), None)]);
        let good = serde_json::to_vec(&serde_json::json!({
            "metadata": {"name": "a", "labels": {"x": "y"}},
            "timestamp": "2025-10-09T08:26:40Z", "window": "20s",
            "usage": {"cpu": "1", "memory": "2Gi"}
        }))
        .unwrap();
        let broken = br#"{"metadata":{"name":"b"},"timestamp":"2025-10-09T08:26:40Z","window":"20s","usage":{"cpu":"secret-1"}}"#;
        let mut out = FromLists::default();
        let mut conv = Converter::new(&nodes, &CAPACITY, at(T), &mut out);
        conv.piece(Piece::Item {
            index: 0,
            offset: 10,
            bytes: broken,
        });
        conv.piece(Piece::Oversized {
            index: 1,
            offset: 120,
            len: 5 << 20,
            head: br#"{"metadata":{"name":"huge","labels":{"#,
        });
        conv.piece(Piece::Item {
            index: 2,
            offset: 99_999,
            bytes: &good,
        });
        conv.finish();
        assert_eq!(out.samples.len(), 1);
        assert_eq!(out.samples[0].node, "a");
        assert_eq!(out.capacities.len(), 1);
        let d: Vec<(&str, &str, DropReason)> = out
            .dropped
            .iter()
            .map(|d| (d.node.as_str(), d.what.as_str(), d.reason))
            .collect();
        assert_eq!(d[0].0, "b");
        assert_eq!(d[0].2, DropReason::Unparsable);
        assert!(
            d[0].1
                .starts_with("NodeMetrics item 0 at byte 10: missing field `memory`"),
            "{}",
            d[0].1
        );
        assert!(!d[0].1.contains("secret"), "the item is never quoted");
        assert_eq!(
            d[1],
            (
                "huge",
                "NodeMetrics item 1 at byte 120: 5242880 bytes, over the 1048576-byte limit \
                 (--max-response-bytes)",
                DropReason::TooLarge
            )
        );
        assert_eq!(name_in(b"{\"metadata\":{}}"), "<unnamed>");
    }

    #[test]
    fn undecodable_answers_are_parse_errors() {
        let err = serde_json::from_str::<serde_json::Value>("{not json").unwrap_err();
        let e = crate::k8s::client::kube_error(WHAT_METRICS, kube::Error::SerdeError(err));
        assert_eq!(e.metric_label(), "parse");
        assert!(e.to_string().contains("invalid JSON"), "{e}");
    }

    #[test]
    fn api_errors_keep_the_status() {
        let status =
            kube::core::Status::failure("metrics unavailable", "ServiceUnavailable").with_code(503);
        let e = crate::k8s::client::kube_error(WHAT_METRICS, kube::Error::Api(status.boxed()));
        assert_eq!(e.metric_label(), "http");
        assert_eq!(
            e.to_string(),
            "LIST metrics.k8s.io/v1beta1 NodeMetrics: status 503 ServiceUnavailable: metrics unavailable"
        );
    }
}
