//! `corpus/node-metrics/`: metrics.k8s.io NodeMetrics lists served by the stand-in API server
//! as they are, read by the metrics-server backend (`src/sources/usage/metrics_server.rs`:
//! the streamed list, the lean decoding, every quantity form) over a real kube client and
//! recorded into the hub, whose snapshot holds each node's ratios and the dropped values by
//! reason. `nodes.json` is the Node list usage is divided by (capacity, or allocatable).

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use kube_prober::hub::{RunOutcome, Store};
use kube_prober::model::{NodeCapacity, Resource};
use kube_prober::sources::usage::metrics_server::{MetricsServerConfig, MetricsServerFetcher};
use kube_prober::sources::usage::run_once;
use support::apiserver::{self, Kind};

use super::{assert_every_entry_has_a_row, read};

const KIND: &str = "node-metrics";
const NODES: &str = "nodes.json";
const KI: f64 = 1024.0;
const GI: f64 = KI * KI * KI;

/// One node as the snapshot holds it: the CPU and memory ratios and the capacity divided by.
#[derive(Debug, PartialEq)]
struct Served {
    cpu: Option<f64>,
    memory: Option<f64>,
    capacity: Option<NodeCapacity>,
}

/// What one answer gives: the nodes served, and the dropped values by reason.
struct Want {
    nodes: BTreeMap<&'static str, Served>,
    dropped: BTreeMap<String, u64>,
}

fn served(cpu: Option<f64>, memory: Option<f64>, cores: f64, mem_bytes: f64) -> Served {
    Served {
        cpu,
        memory,
        capacity: Some(NodeCapacity {
            cpu_cores: cores,
            memory_bytes: mem_bytes,
        }),
    }
}

/// The capacities of `nodes.json` (`capacity`, as load-watcher divides by).
const GKE: (f64, f64) = (2.0, 4028440.0 * KI);
const KWOK: (f64, f64) = (32.0, 256.0 * GI);
const NO_ALLOCATABLE: (f64, f64) = (8.0, 32.0 * GI);
const ARM: (f64, f64) = (4.0, 16093116.0 * KI);

fn dropped(reasons: &[(&str, u64)]) -> BTreeMap<String, u64> {
    reasons.iter().map(|(r, n)| (r.to_string(), *n)).collect()
}

/// metrics-server's own spellings (nanocores, KiB). A NodeMetrics of a node no longer in the
/// Node list (deleted between the two lists) is left out.
fn metrics_server() -> Want {
    Want {
        nodes: BTreeMap::from([
            (
                "arm-node",
                served(
                    Some(0.312998781 / ARM.0),
                    Some(1988236.0 * KI / ARM.1),
                    ARM.0,
                    ARM.1,
                ),
            ),
            (
                "gke-pool-a-1",
                served(
                    Some(0.487558164 / GKE.0),
                    Some(732212.0 * KI / GKE.1),
                    GKE.0,
                    GKE.1,
                ),
            ),
        ]),
        dropped: dropped(&[]),
    }
}

/// Fractions, micro-cores, zero, exponents of both cases; a Node without a status has no
/// capacity to divide by: both its values are dropped as `bad_capacity` and it is not served.
fn unusual_quantities() -> Want {
    Want {
        nodes: BTreeMap::from([
            (
                "arm-node",
                served(Some(0.0), Some(1.25e9 / ARM.1), ARM.0, ARM.1),
            ),
            (
                "gke-pool-a-1",
                served(Some(0.75), Some(1.5 * GI / GKE.1), GKE.0, GKE.1),
            ),
            (
                "kwok-node-0",
                served(Some(250e-6 / KWOK.0), Some(0.0), KWOK.0, KWOK.1),
            ),
            (
                "node-no-allocatable",
                served(
                    Some(0.002 / NO_ALLOCATABLE.0),
                    Some(1e9 / NO_ALLOCATABLE.1),
                    NO_ALLOCATABLE.0,
                    NO_ALLOCATABLE.1,
                ),
            ),
        ]),
        dropped: dropped(&[("bad_capacity", 2)]),
    }
}

/// A quantity that does not parse loses its value alone; an item that does not decode (no
/// memory) loses its node alone; both are `unparsable`.
fn unparsable_items() -> Want {
    Want {
        nodes: BTreeMap::from([
            (
                "arm-node",
                served(Some(0.5), Some(8.0 * GI / ARM.1), ARM.0, ARM.1),
            ),
            (
                "gke-pool-a-1",
                served(None, Some(2.0 * GI / GKE.1), GKE.0, GKE.1),
            ),
        ]),
        dropped: dropped(&[("unparsable", 2)]),
    }
}

/// A file and what it gives.
type Row = (&'static str, fn() -> Want);

const ROWS: &[Row] = &[
    ("metrics-server-v0.8.0.json", metrics_server),
    ("unusual-quantities.json", unusual_quantities),
    ("unparsable-items.json", unparsable_items),
];

/// One fetch of `list` over `nodes.json` into a new hub: what its snapshot serves.
async fn fetch(list: &str, cfg: MetricsServerConfig) -> (RunOutcome, Store) {
    let api = apiserver::start().await;
    let nodes = String::from_utf8(read(KIND, NODES)).unwrap();
    api.set_raw_list(Kind::Nodes, Some(&nodes));
    let body = String::from_utf8(read(KIND, list)).unwrap();
    api.set_raw_list(Kind::NodeMetrics, Some(&body));
    let store = Store::new();
    let mut f = MetricsServerFetcher::new(api.client(), cfg);
    let outcome = run_once(&mut f, &store, Duration::from_secs(10)).await;
    (outcome, store)
}

fn nodes_of(store: &Store) -> BTreeMap<String, Served> {
    let snap = store.snapshot(SystemTime::now());
    snap.nodes
        .iter()
        .map(|(name, load)| {
            let get = |r: Resource| load.latest.get(&r).copied();
            let s = Served {
                cpu: get(Resource::Cpu),
                memory: get(Resource::Memory),
                capacity: load.capacity,
            };
            (name.to_string(), s)
        })
        .collect()
}

fn dropped_of(store: &Store) -> BTreeMap<String, u64> {
    let snap = store.snapshot(SystemTime::now());
    snap.sources
        .get("metrics_server")
        .map(|s| s.dropped.clone())
        .unwrap_or_default()
}

#[tokio::test]
async fn every_node_metrics_answer_serves_its_expected_ratios_and_counts_its_drops() {
    assert_every_entry_has_a_row(KIND, ROWS.iter().map(|(name, _)| *name).chain([NODES]));
    for (name, want) in ROWS {
        let want = want();
        let (outcome, store) = fetch(name, MetricsServerConfig::default()).await;
        assert_eq!(outcome, RunOutcome::Ok, "{name}");
        let want_nodes: BTreeMap<String, Served> = want
            .nodes
            .into_iter()
            .map(|(n, s)| (n.to_string(), s))
            .collect();
        assert_eq!(nodes_of(&store), want_nodes, "{name}");
        assert_eq!(dropped_of(&store), want.dropped, "{name}");
    }
}

/// Divided by allocatable: a Node that reports none is divided by its capacity, as the API
/// defaults allocatable to it.
#[tokio::test]
async fn allocatable_falls_back_to_capacity_where_a_node_has_none() {
    let cfg = MetricsServerConfig {
        use_allocatable: true,
        ..MetricsServerConfig::default()
    };
    let (outcome, store) = fetch("unusual-quantities.json", cfg).await;
    assert_eq!(outcome, RunOutcome::Ok);
    let nodes = nodes_of(&store);
    let alloc = |cores: f64, mem: f64| NodeCapacity {
        cpu_cores: cores,
        memory_bytes: mem,
    };
    assert_eq!(
        nodes["gke-pool-a-1"].capacity,
        Some(alloc(1.93, 2940440.0 * KI))
    );
    assert_eq!(nodes["gke-pool-a-1"].cpu, Some(1.5 / 1.93));
    assert_eq!(
        nodes["arm-node"].capacity,
        Some(alloc(3.92, 15466428.0 * KI))
    );
    let no_allocatable = &nodes["node-no-allocatable"];
    assert_eq!(
        no_allocatable.capacity,
        Some(alloc(NO_ALLOCATABLE.0, NO_ALLOCATABLE.1))
    );
    assert_eq!(no_allocatable.memory, Some(1e9 / NO_ALLOCATABLE.1));
    assert_eq!(dropped_of(&store), dropped(&[("bad_capacity", 2)]));
}
