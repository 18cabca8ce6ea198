//! Not a stand-in: what the tests of the push outputs under failing receivers share. A fixed
//! snapshot whose every push carries the same points, a free address for a receiver that is
//! down (or comes up later), and a run of a sink through the push runner (`run_sink`) for a
//! number of pushes, recorded into a store of its own.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use kube_prober::hub::{Provider, Store};
use kube_prober::model::{
    ClusterInfo, ClusterState, NodeCapacity, NodeFacts, Placement, Resource, SinkStatus, Snapshot,
    UsageSample,
};
use kube_prober::outputs::Sink;
use kube_prober::outputs::published::Published;
use kube_prober::outputs::push::{SinkSchedule, run_sink};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// A snapshot of `nodes` nodes with conditions, usage and capacity (series for OTLP and Cloud
/// Monitoring alike), rendered as the tick loop publishes it. It never changes, so every push
/// of it carries the same points.
pub fn fixture(nodes: usize) -> Arc<Published> {
    let store = Store::new();
    store.cluster().record_cluster_info(ClusterInfo {
        cluster_name: "outage".into(),
        role: "cluster".into(),
        project: "p1".into(),
        location: "europe-west1".into(),
    });
    let facts = (0..nodes).map(|i| NodeFacts {
        name: format!("node-{i}"),
        placement: Placement {
            pool: "pool-0".into(),
            zone: "zone-a".into(),
        },
        conditions: vec![("Ready".into(), "True".into())],
        ready: true,
        schedulable: true,
        done_warming: true,
        created: None,
        capacity: None,
        allocatable: None,
    });
    store.cluster().record_cluster_state(ClusterState {
        nodes: Arc::new(facts.collect()),
        ..Default::default()
    });
    for i in 0..nodes {
        let node = format!("node-{i}");
        store.node().record_node_usage(
            "metrics_server",
            UsageSample {
                node: node.clone(),
                at: SystemTime::now(),
                values: vec![(Resource::Cpu, 0.5), (Resource::Memory, 0.25)],
            },
        );
        store.node().record_node_capacity(
            &node,
            NodeCapacity {
                cpu_cores: 4.0,
                memory_bytes: 16e9,
            },
        );
    }
    let snap: Arc<Snapshot> = Arc::new(store.snapshot(SystemTime::now()));
    Arc::new(Published::render(snap, "cluster"))
}

/// An address of 127.0.0.1 nothing listens on (yet).
pub fn free_addr() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    let addr = l.local_addr().expect("its address");
    drop(l);
    addr
}

/// Runs `sink` through the push runner on `published`, recording into a store of its own,
/// until it has made `pushes` pushes (60 s at most), then stops it (its final push included)
/// and answers its counters.
pub async fn run<S: Sink>(
    sink: &Arc<S>,
    published: &Arc<Published>,
    schedule: SinkSchedule,
    pushes: u64,
) -> SinkStatus {
    let store = Arc::new(Store::new());
    let (_tx, rx) = watch::channel(published.clone());
    let cancel = CancellationToken::new();
    let task = tokio::spawn(run_sink(
        sink.clone(),
        schedule,
        rx,
        store.clone(),
        None,
        cancel.clone(),
    ));
    let name = sink.name();
    let made = || {
        store
            .snapshot(SystemTime::now())
            .sinks
            .get(name)
            .map_or(0, |s| s.pushes)
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while made() < pushes {
        assert!(Instant::now() < deadline, "{name}: {pushes} pushes in 60 s");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    cancel.cancel();
    tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .expect("the runner stops")
        .expect("the runner does not panic");
    store.snapshot(SystemTime::now()).sinks[name].clone()
}
