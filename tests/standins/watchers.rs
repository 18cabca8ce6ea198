//! kube-runtime's real watchers and reflectors against the stand-in API server over HTTP:
//! initial list, changes, a restart-count increase, a dropped watch, a 410 relist, and the
//! node role's field selectors, all through to the cluster state in the hub.

use support::apiserver;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::apps::v1::{DaemonSet, DaemonSetSpec, DaemonSetStatus};
use k8s_openapi::api::core::v1::{
    ContainerStatus, Node, NodeCondition, NodeStatus, Pod, PodCondition, PodSpec, PodStatus,
    PodTemplateSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kube_prober::hub::Store;
use kube_prober::model::ClusterState;
use kube_prober::sources::cluster::derive::DeriveConfig;
use kube_prober::sources::cluster::watchers::{InitialList, PodScope, Scope, WatchConfig, spawn};
use tokio_util::sync::CancellationToken;

/// Counts this thread's live heap bytes as glibc's malloc spends them (16-byte chunks with an
/// 8-byte header, 32 at least), for the node store's cost per node.
mod heap {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;

    pub struct Counting;

    thread_local! {
        static LIVE: Cell<i64> = const { Cell::new(0) };
        static PEAK: Cell<i64> = const { Cell::new(0) };
    }

    fn chunk(size: usize) -> i64 {
        ((size + 8).div_ceil(16) * 16).max(32) as i64
    }

    fn note(delta: i64) {
        let _ = LIVE.try_with(|l| {
            l.set(l.get() + delta);
            let _ = PEAK.try_with(|p| p.set(p.get().max(l.get())));
        });
    }

    /// The most live bytes this thread held since the last [`reset_peak`].
    pub fn peak() -> i64 {
        PEAK.with(Cell::get)
    }

    /// Starts a new peak from the bytes live now.
    pub fn reset_peak() {
        PEAK.with(|p| p.set(live()));
    }

    /// Live bytes allocated by this thread (and not freed) so far.
    pub fn live() -> i64 {
        LIVE.with(Cell::get)
    }

    // SAFETY: every call is passed to `System` unchanged; the counter is a const thread-local
    // without a destructor, so updating it never allocates.
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            // SAFETY: same contract as the caller's.
            let p = unsafe { System.alloc(layout) };
            if !p.is_null() {
                note(chunk(layout.size()));
            }
            p
        }

        unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
            // SAFETY: same contract as the caller's.
            let p = unsafe { System.alloc_zeroed(layout) };
            if !p.is_null() {
                note(chunk(layout.size()));
            }
            p
        }

        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            // SAFETY: same contract as the caller's.
            unsafe { System.dealloc(ptr, layout) };
            note(-chunk(layout.size()));
        }

        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            // SAFETY: same contract as the caller's.
            let p = unsafe { System.realloc(ptr, layout, new_size) };
            if !p.is_null() {
                note(chunk(new_size) - chunk(layout.size()));
            }
            p
        }
    }
}

#[global_allocator]
static ALLOC: heap::Counting = heap::Counting;

fn map(kv: &[(&str, &str)]) -> Option<BTreeMap<String, String>> {
    Some(
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    )
}

fn node(name: &str, ready: &str) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: map(&[("cloud.google.com/gke-nodepool", "p1")]),
            creation_timestamp: Some(Time(
                k8s_openapi::jiff::Timestamp::from_second(1_600_000_000).unwrap(),
            )),
            ..Default::default()
        },
        spec: None,
        status: Some(NodeStatus {
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: ready.into(),
                ..Default::default()
            }]),
            ..Default::default()
        }),
    }
}

fn addon_pod(name: &str, node: &str, restarts: i32) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("kube-system".into()),
            annotations: map(&[
                ("components.gke.io/component-name", "fluentbit"),
                ("components.gke.io/component-version", "2.1"),
            ]),
            owner_references: Some(vec![OwnerReference {
                api_version: "apps/v1".into(),
                kind: "DaemonSet".into(),
                name: "fluentbit".into(),
                uid: "u1".into(),
                controller: Some(true),
                ..Default::default()
            }]),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: Some(node.into()),
            ..Default::default()
        }),
        status: Some(PodStatus {
            phase: Some("Running".into()),
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: "True".into(),
                ..Default::default()
            }]),
            container_statuses: Some(vec![ContainerStatus {
                name: "fluentbit".into(),
                restart_count: restarts,
                ..Default::default()
            }]),
            ..Default::default()
        }),
    }
}

fn daemonset(desired: i32) -> DaemonSet {
    DaemonSet {
        metadata: ObjectMeta {
            name: Some("fluentbit".into()),
            namespace: Some("kube-system".into()),
            ..Default::default()
        },
        spec: DaemonSetSpec {
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    annotations: map(&[
                        ("components.gke.io/component-name", "fluentbit"),
                        ("components.gke.io/component-version", "2.1"),
                    ]),
                    ..Default::default()
                }),
                spec: None,
            },
            ..Default::default()
        },
        status: Some(DaemonSetStatus {
            desired_number_scheduled: desired,
            ..Default::default()
        }),
    }
}

/// Polls the hub until `ok` holds for the cluster state (bounded).
async fn until(store: &Store, what: &str, ok: impl Fn(&ClusterState) -> bool) -> Arc<ClusterState> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(cs) = store.snapshot(SystemTime::now()).cluster_state
            && ok(&cs)
        {
            return cs;
        }
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn restarts_of(cs: &ClusterState, pod: &str) -> Option<u32> {
    cs.restarts
        .iter()
        .find(|p| &*p.pod == pod)
        .map(|p| p.containers[0].restarts)
}

fn config(scope: Scope) -> WatchConfig {
    WatchConfig {
        scope,
        derive: DeriveConfig::default(),
        interval: Duration::from_millis(100),
        initial_list: InitialList::Paged,
    }
}

/// The cluster role watching every pod, with its workloads in kube-system.
fn all_pods() -> WatchConfig {
    config(Scope::Cluster {
        namespaces: vec!["kube-system".into()],
        pods: PodScope::All,
        workloads: true,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_scope_follows_every_change() {
    follows_every_change(InitialList::Paged).await;
}

/// The same with `--watch-initial-list=streaming`: every watch lists through a WATCH with
/// `sendInitialEvents`, also after the 410, and ends equal to the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_scope_follows_every_change_with_streaming_lists() {
    follows_every_change(InitialList::Streaming).await;
}

async fn follows_every_change(initial_list: InitialList) {
    // No bookmarks: one carrying the global resource version past the compaction below would
    // let a watcher resume without the 410 (see `ClusterState::compact`).
    let api = apiserver::start_with(apiserver::Options {
        bookmark_interval: Duration::from_secs(3600),
        ..Default::default()
    })
    .await;
    for n in ["n1", "n2", "n3"] {
        api.upsert(&node(n, "True"));
    }
    api.upsert(&addon_pod("fb-1", "n1", 0));
    api.upsert(&addon_pod("fb-2", "n2", 0));
    api.upsert(&daemonset(3));

    let store = Arc::new(Store::new());
    let cancel = CancellationToken::new();
    let cfg = WatchConfig {
        initial_list,
        ..all_pods()
    };
    let (_stores, tasks) = spawn(api.client(), cfg, store.clone(), cancel.clone());

    // Initial list; readiness waits for every watcher.
    let cs = until(&store, "initial list", |cs| {
        cs.nodes.len() == 3 && cs.restarts.len() == 2
    })
    .await;
    assert_eq!(cs.expected[0].expected, 3);
    let snap = store.snapshot(SystemTime::now());
    assert!(
        snap.sources_synced,
        "every watcher listed: {:?}",
        snap.sources.keys().collect::<Vec<_>>()
    );
    for s in [
        "watch_nodes",
        "watch_pods",
        "watch_daemonsets",
        "watch_deployments",
    ] {
        assert!(snap.sources[s].up, "{s}");
    }

    // Modify, add, delete.
    api.upsert(&addon_pod("fb-1", "n1", 2));
    api.upsert(&node("n2", "False"));
    api.delete::<Node>("", "n3");
    let cs = until(&store, "changes", |cs| {
        restarts_of(cs, "fb-1") == Some(2)
            && cs.nodes.len() == 2
            && cs.nodes.iter().any(|n| n.name == "n2" && !n.ready)
    })
    .await;
    assert!(cs.nodes.iter().all(|n| n.name != "n3"));

    // A dropped watch resumes from its resourceVersion: no duplicates, nothing missing.
    api.drop_watches();
    api.upsert(&addon_pod("fb-3", "n1", 0));
    api.upsert(&addon_pod("fb-1", "n1", 3));
    let cs = until(&store, "resume after a dropped watch", |cs| {
        cs.restarts.len() == 3 && restarts_of(cs, "fb-1") == Some(3)
    })
    .await;
    let mut names: Vec<_> = cs.restarts.iter().map(|p| p.pod.to_string()).collect();
    names.sort();
    assert_eq!(names, ["fb-1", "fb-2", "fb-3"]);

    // History gone (410 Gone): the watcher relists and ends equal to the server. The stand-in
    // ends the dropped streams before the writes below, so every watcher resumes from a
    // resource version older than the compaction and gets the 410.
    api.compact();
    api.drop_watches();
    api.delete::<Pod>("kube-system", "fb-2");
    api.upsert(&node("n4", "True"));
    let cs = until(&store, "relist after 410", |cs| {
        cs.restarts.len() == 2 && cs.nodes.len() == 3
    })
    .await;
    let mut nodes: Vec<_> = cs.nodes.iter().map(|n| n.name.clone()).collect();
    nodes.sort();
    assert_eq!(nodes, ["n1", "n2", "n4"]);
    let pod_runs = store.snapshot(SystemTime::now()).sources["watch_pods"].runs;
    assert!(pod_runs >= 2, "the relist counted as a run: {pod_runs}");

    // Each relist of this test (the start, the 410) went the chosen way: paged LISTs, or
    // WATCHes that stream the objects first and never a LIST.
    let reads: Vec<String> = api
        .requests()
        .iter()
        .filter(|r| r.path.ends_with("/pods"))
        .map(|r| r.query.clone().unwrap_or_default())
        .collect();
    let streamed = reads
        .iter()
        .filter(|q| q.contains("sendInitialEvents=true"))
        .count();
    let listed = reads.iter().filter(|q| !q.contains("watch=true")).count();
    match initial_list {
        InitialList::Paged => assert!(streamed == 0 && listed >= 2, "{reads:?}"),
        InitialList::Streaming => assert!(streamed >= 2 && listed == 0, "{reads:?}"),
    }

    stop(cancel, tasks).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_scope_sees_only_its_node_and_pods() {
    let api = apiserver::start().await;
    api.upsert(&node("me", "True"));
    api.upsert(&node("other", "True"));
    api.upsert(&addon_pod("mine", "me", 1));
    api.upsert(&addon_pod("theirs", "other", 5));
    let store = Arc::new(Store::new());
    let cancel = CancellationToken::new();
    let (_stores, _tasks) = spawn(
        api.client(),
        config(Scope::Node { name: "me".into() }),
        store.clone(),
        cancel.clone(),
    );
    let cs = until(&store, "node scope", |cs| {
        cs.nodes.len() == 1 && cs.restarts.len() == 1
    })
    .await;
    assert_eq!(cs.nodes[0].name, "me");
    assert_eq!(&*cs.restarts[0].pod, "mine");
    assert!(cs.expected.is_empty(), "the node role watches no workloads");
    let requests = api.requests();
    assert!(
        requests
            .iter()
            .any(|r| format!("{r:?}").contains("spec.nodeName%3Dme")
                || format!("{r:?}").contains("spec.nodeName=me")),
        "field selector sent: {requests:?}"
    );
    cancel.cancel();
}

/// What the node store holds per node, measured with the counting allocator: the object behind
/// its `Arc` and the store's key, for 1,000 of the stand-in's nodes (what `cluster_scale`
/// measures) and for the same nodes as a real kubelet reports them (40 images, managedFields).
/// Before lean decoding the store held whole `Node`s trimmed after decoding (images,
/// managedFields, annotations, nodeInfo... dropped; every label kept).
#[test]
fn a_watched_node_costs_a_fraction_of_a_whole_node() {
    use kube::runtime::reflector::ObjectRef;
    use kube_prober::k8s::lean::LeanNode;
    use kube_prober::sources::cluster::watchers::{Interner, node_label_keys, trim_node};
    const N: usize = 1000;
    let real = |mut v: serde_json::Value| {
        v["status"]["images"] = (0..40)
            .map(|i| {
                serde_json::json!({"names": [
                    format!("us-docker.pkg.dev/project/repo/image-{i}@sha256:{:064x}", i),
                    format!("us-docker.pkg.dev/project/repo/image-{i}:v1.2.3"),
                ], "sizeBytes": 123_456_789})
            })
            .collect();
        v["metadata"]["managedFields"] = (0..5)
            .map(|i| {
                serde_json::json!({"manager": format!("m{i}"), "operation": "Update",
                "apiVersion": "v1", "time": "2025-01-01T00:00:00Z", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:status": {"f:conditions": {"k:{\"type\":\"Ready\"}": {".": {}}}}}})
            })
            .collect();
        v
    };
    let standin: Vec<Vec<u8>> = (0..N)
        .map(|i| {
            let n = apiserver::standin_node(i, &format!("gke-standin-node-{i:05}"));
            serde_json::to_vec(&n).unwrap()
        })
        .collect();
    let gke: Vec<Vec<u8>> = standin
        .iter()
        .map(|j| serde_json::to_vec(&real(serde_json::from_slice(j).unwrap())).unwrap())
        .collect();
    for (what, json) in [("stand-in", &standin), ("with images", &gke)] {
        let before = heap::live();
        let whole: Vec<(ObjectRef<Node>, Arc<Node>)> = json
            .iter()
            .map(|j| {
                let n: Node = serde_json::from_slice(j).unwrap();
                (ObjectRef::from_obj(&n), Arc::new(n))
            })
            .collect();
        let whole_bytes = (heap::live() - before) / N as i64;
        drop(whole);
        // Trimmed as the node watcher did before LeanNode.
        let before = heap::live();
        let trimmed: Vec<(ObjectRef<Node>, Arc<Node>)> = json
            .iter()
            .map(|j| {
                let mut n: Node = serde_json::from_slice(j).unwrap();
                n.metadata.managed_fields = None;
                n.metadata.annotations = None;
                if let Some(s) = n.spec.as_mut() {
                    (s.pod_cidr, s.pod_cidrs, s.provider_id) = (None, None, None);
                }
                if let Some(s) = n.status.as_mut() {
                    (s.images, s.node_info, s.daemon_endpoints) = (None, None, None);
                    for c in s.conditions.iter_mut().flatten() {
                        (c.message, c.last_heartbeat_time) = (None, None);
                    }
                }
                (ObjectRef::from_obj(&n), Arc::new(n))
            })
            .collect();
        let trimmed_bytes = (heap::live() - before) / N as i64;
        drop(trimmed);
        let keys = node_label_keys(&DeriveConfig::default());
        let before = heap::live();
        let mut interner = Interner::default();
        let lean: Vec<(ObjectRef<LeanNode>, Arc<LeanNode>)> = json
            .iter()
            .map(|j| {
                let mut n: LeanNode = serde_json::from_slice(j).unwrap();
                trim_node(&mut n, &keys, &mut interner);
                (ObjectRef::from_obj(&n), Arc::new(n))
            })
            .collect();
        let lean_bytes = (heap::live() - before) / N as i64;
        println!(
            "inline sizes: LeanNode {}, ObjectMeta {}, ObjectRef {}; whole Node {}",
            std::mem::size_of::<LeanNode>(),
            std::mem::size_of::<ObjectMeta>(),
            std::mem::size_of::<ObjectRef<LeanNode>>(),
            std::mem::size_of::<Node>()
        );
        println!(
            "{what}: bytes per node in the store: whole Node {whole_bytes}, trimmed Node \
             {trimmed_bytes}, LeanNode {lean_bytes} (JSON {} B)",
            json[0].len()
        );
        assert!(lean_bytes <= 2000, "{what}: {lean_bytes} B per lean node");
        assert!(
            lean_bytes * 3 <= trimmed_bytes,
            "{what}: {lean_bytes} vs {trimmed_bytes}"
        );
        drop((lean, interner));
    }
}

/// A relist after 410 (here of 30,000 pods in pages of 500) updates the pod index in place and
/// removes at its end the pods it did not list, instead of building a second index beside the
/// first: the watchers' peak during the relist stays well under what they hold (issue #12's
/// peak RSS). What a relist adds on top is one page at a time (its body and decoded pods,
/// ~4.5 MiB), whatever the pod count, so the cluster is large enough for the pods' records
/// (a table slot of ~90 bytes and a key each) to outweigh a page: a second index would add
/// them all. Counted on this thread's allocations: every watcher runs on a current-thread
/// runtime here, the stand-in on another runtime's thread. `-- --nocapture` prints the figures.
#[test]
fn a_relist_does_not_hold_the_pods_twice() {
    use kube_prober::sources::cluster::watchers::Stores;
    const NODES: usize = 500;
    const PODS_PER_NODE: usize = 60;
    let server = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    // No bookmarks: the watchers resume from an old resourceVersion and meet the 410.
    let api = server.block_on(apiserver::start_with(apiserver::Options {
        bookmark_interval: Duration::from_secs(3600),
        ..Default::default()
    }));
    let made = api.generate_with(&apiserver::GenerateOptions {
        node_metrics: false,
        ..apiserver::GenerateOptions::new(NODES, PODS_PER_NODE)
    });
    let pod_watches = |from: usize| {
        let reqs = api.requests();
        let after = &reqs[from.min(reqs.len())..];
        let is_pods = |q: &apiserver::Logged| q.path == apiserver::PODS_PATH;
        let watch = |q: &apiserver::Logged| q.query.as_deref().unwrap_or("").contains("watch=");
        // A LIST of the pods, then a WATCH after it.
        after
            .iter()
            .position(|q| is_pods(q) && !watch(q))
            .is_some_and(|i| after[i..].iter().any(|q| is_pods(q) && watch(q)))
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let until_watching = |from: usize, stores: Stores| {
            let pod_watches = &pod_watches;
            async move {
                let deadline = Instant::now() + Duration::from_secs(60);
                while !(pod_watches(from) && stores.pods[0].len() == made.pods) {
                    assert!(Instant::now() < deadline, "pods not listed and watched");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        };
        let store = Arc::new(Store::new());
        let cancel = CancellationToken::new();
        let before = heap::live();
        let (stores, tasks) = spawn(api.client(), all_pods(), store.clone(), cancel.clone());
        until_watching(0, stores.clone()).await;
        // A derivation after the list, so the cluster state is in the hub on both sides.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let held = heap::live() - before;
        let from = api.requests().len();
        heap::reset_peak();
        let at_relist = heap::live();
        // From another thread: the compaction frees the stand-in's history, not ours.
        std::thread::scope(|s| {
            s.spawn(|| api.force_relist());
        });
        until_watching(from, stores.clone()).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let extra = heap::peak() - at_relist;
        let after = heap::live() - before;
        println!(
            "{} pods on {} nodes: watchers hold {} KiB after the list, {} KiB after the relist; \
             peak during the relist {} KiB above what they held",
            made.pods,
            made.nodes,
            held / 1024,
            after / 1024,
            extra / 1024
        );
        assert_eq!(stores.pods[0].len(), made.pods);
        assert!(
            extra < held * 9 / 10,
            "a relist held {extra} bytes more than the {held} the watchers hold: the pods twice?"
        );
        stop(cancel, tasks).await;
    });
    drop(api);
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_stores_are_not_derived_again_until_an_event() {
    // Bookmarks every second (the default) keep arriving while idle: they are no change.
    let api = apiserver::start().await;
    for n in ["n1", "n2"] {
        api.upsert(&node(n, "True"));
    }
    api.upsert(&addon_pod("fb-1", "n1", 0));
    api.upsert(&daemonset(2));
    let store = Arc::new(Store::new());
    let cancel = CancellationToken::new();
    let mut cfg = all_pods();
    cfg.interval = Duration::from_millis(20);
    let (stores, tasks) = spawn(api.client(), cfg, store.clone(), cancel.clone());
    let first = until(&store, "initial list", |cs| {
        cs.nodes.len() == 2 && cs.restarts.len() == 1
    })
    .await;
    let derived = stores.derivations();
    assert!(derived >= 1);
    // Fifty intervals and a bookmark or more without a change: nothing derived, the hub keeps
    // the very same state.
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    assert_eq!(
        stores.derivations(),
        derived,
        "derived with nothing changed"
    );
    let same = store.snapshot(SystemTime::now()).cluster_state.unwrap();
    assert!(Arc::ptr_eq(&first, &same));

    // One pod event: derived again, and the state follows it.
    let generation = stores.generation();
    api.upsert(&addon_pod("fb-1", "n1", 4));
    until(&store, "the restart", |cs| {
        restarts_of(cs, "fb-1") == Some(4)
    })
    .await;
    assert!(stores.generation() > generation);
    let after = stores.derivations();
    assert!(after > derived);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(stores.derivations(), after, "one event, then idle again");

    stop(cancel, tasks).await;
}

/// Cancels the watchers and waits (bounded) for every task to end cleanly.
async fn stop(cancel: CancellationToken, tasks: Vec<tokio::task::JoinHandle<()>>) {
    cancel.cancel();
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(5), t)
            .await
            .unwrap()
            .unwrap();
    }
}

/// What the hub holds per node for the metrics-server backend (cpu and memory every 15 s):
/// after one fetch, as the `cluster_scale` bench's static NodeMetrics leave it, and after
/// 15 minutes of fetches, as a real cluster does (metrics-server's timestamps move). The
/// difference is what the bench's steady RSS lacks; docs/benchmarks.md adds it per node.
#[test]
fn the_hub_per_node_after_one_fetch_and_after_fifteen_minutes() {
    use kube_prober::model::Resource;
    const N: usize = 2000;
    let (t0, names) = (usage_t0(), node_names(N));
    let fetch = |store: &Store, k: u64| fetch_usage(store, &names, k);
    let before = heap::live();
    let store = Store::new();
    fetch(&store, 0);
    let hub_only = (heap::live() - before) / N as i64;
    // A snapshot hands out each node's load, which the hub keeps for the next one.
    drop(store.snapshot(t0));
    let one = (heap::live() - before) / N as i64;
    for k in 1..60 {
        fetch(&store, k);
    }
    let snap = store.snapshot(t0 + Duration::from_secs(15 * 59));
    assert_eq!(snap.nodes.len(), N);
    let w = &snap.nodes[names[0].as_str()].windows[0];
    assert_eq!(
        w.stats[&Resource::Cpu].samples.get(),
        60,
        "15 minutes of samples held"
    );
    drop(snap);
    let full = (heap::live() - before) / N as i64;
    println!(
        "hub per node, with the load it hands out: {one} B after one fetch ({hub_only} B \
         before the first snapshot), {full} B after 60 fetches (15 min)"
    );
    // The samples are the difference: one row per sample time, a 4-byte time and an 8-byte
    // value per resource (20 B a row for two; was 32 B in a ring per resource).
    assert!(full - one >= 60 * 20, "{one} -> {full}");
    assert!(
        full - one <= 64 * 4 + 128 * 8,
        "{one} -> {full}: more than the rows' own room (capacities of 64 times, 128 values)"
    );
    // 2,400 before the hour's max (104 B of five-minute slots) and the quantiles below.
    assert!(
        full <= 2_650,
        "{full} B per node with 15 minutes of samples"
    );
    // The load a snapshot hands out (a new one per node and snapshot when every node changes,
    // as with metrics-server every 15 s; two are alive while one is rendered): room for its
    // three windows exactly, the source's name shared, CPU and memory statistics inline, and
    // (issue #34) each window's coverage and CPU and memory quantiles as `f32` (48 B a
    // window), the hour's max and the bound pods' pointer: 650 before them.
    assert!(
        one - hub_only <= 820,
        "{} B per node and snapshot",
        one - hub_only
    );
}

/// What the `/watcher` bodies hold per node at 5,000 nodes (the metrics-server backend, the
/// 15-minute window): the bodies of one tick with their gzip form made (Go's client asks for
/// gzip) and the renderer's state kept for the next tick, and the most held while the next
/// tick, where every node changed, renders and gzips its body beside the previous one. The
/// snapshots are made before counting: their loads are the hub's, not the bodies'.
#[test]
fn watcher_bodies_per_node_held_and_while_every_node_changes() {
    use kube_prober::watcher::{WatcherCache, WatcherMetrics, render_cached};
    const N: usize = 5000;
    let (store, names) = store_after_fetches(N, 4);
    let t0 = usage_t0();
    let first = store.snapshot(t0 + Duration::from_secs(60));
    fetch_usage(&store, &names, 4);
    let second = store.snapshot(t0 + Duration::from_secs(75));
    assert!(
        names
            .iter()
            .all(|n| first.nodes[n.as_str()] != second.nodes[n.as_str()]),
        "every node changed"
    );

    let before = heap::live();
    let mut cache = WatcherCache::default();
    let one = render_cached(&first, Default::default(), &mut cache).unwrap();
    let gzip_len = one.all_gzip().len();
    let held = (heap::live() - before) / N as i64;
    heap::reset_peak();
    let two = render_cached(&second, Default::default(), &mut cache).unwrap();
    two.all_gzip();
    let peak = (heap::peak() - before) / N as i64;
    drop(one);
    let held_after = (heap::live() - before) / N as i64;
    let decoded: WatcherMetrics = serde_json::from_slice(&two.all()).unwrap();
    assert_eq!(decoded.data.node_metrics_map.len(), N);
    drop(decoded);
    drop(two);
    drop(cache);
    // Before printing: the test harness's capture buffer grows on this thread.
    let left = heap::live() - before;
    println!(
        "/watcher bodies per node at {N} nodes: {held} B held after one tick (gzip body \
         {gzip_len} B), {held_after} B after the next tick with every node changed, {peak} B \
         at most while it rendered beside the first"
    );
    assert!(
        left <= 0,
        "the bodies and the cache free what they held: {left} B left"
    );
    // Only compressed bytes are held (the blocks and the joined gzip body, ~50 B per node
    // each), no plain body: that held 773 B per node and 1,986 B at most while rendering.
    assert!(
        held <= 160 && held_after <= 160,
        "{held} / {held_after} B per node held"
    );
    assert!(peak <= 400, "{peak} B per node at most while rendering");
}

#[test]
fn metrics_blocks_of_nodes_are_held_compressed() {
    use kube_prober::outputs::prometheus::{Format, Renderer};
    use std::io::Read;
    const N: usize = 5000;
    let (store, names) = store_after_fetches(N, 4);
    let t0 = usage_t0();
    let snap = Arc::new(store.snapshot(t0 + Duration::from_secs(60)));
    let before = heap::live();
    let mut renderer = Renderer::new(Format::Text);
    let body = renderer.render(snap.clone());
    let held = (heap::live() - before) / N as i64;
    let text_len = body.len();
    let compressed = body.chunks.iter().filter(|c| !c.holds_text()).count();
    // The text as a plain answer sends it (each compressed chunk inflated as it goes) and as
    // a gzip answer does: the same bytes, and the rows of every node.
    let plain: Vec<u8> = body.clone().into_plain().flatten().collect();
    let mut unzipped = Vec::new();
    flate2::read::GzDecoder::new(&body.gzip(&[]).concat()[..])
        .read_to_end(&mut unzipped)
        .unwrap();
    assert_eq!(plain.len(), text_len);
    assert_eq!(plain, unzipped);
    let text = String::from_utf8(plain).unwrap();
    for n in [&names[0], &names[N / 2], &names[N - 1]] {
        assert!(
            text.contains(&format!("kube_prober_node_usage_samples{{node=\"{n}\"")),
            "{n}'s rows"
        );
    }
    drop((text, unzipped, body, renderer));
    // Before printing: the test harness's capture buffer grows on this thread.
    let left = heap::live() - before;
    println!(
        "/metrics body per node at {N} nodes: {held} B held for {} B of text ({compressed} \
         chunks held compressed)",
        text_len / N
    );
    assert!(
        left <= 0,
        "the body and the renderer free what they held: {left} B left"
    );
    assert!(compressed > N / 64, "{compressed} chunks held compressed");
    // The node rows are held as deflate (a tenth of the text or less), not as text.
    assert!(
        held * 5 <= (text_len / N) as i64,
        "{held} B held per node for {} B of text",
        text_len / N
    );
}

/// The time of the first fetch of [`fetch_usage`].
fn usage_t0() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

/// `n` node names as GKE makes them.
fn node_names(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("gke-pool-1-{i:08}")).collect()
}

/// A hub after `fetches` fetches of [`fetch_usage`] of `n` nodes, and their names.
fn store_after_fetches(n: usize, fetches: u64) -> (Store, Vec<String>) {
    let (store, names) = (Store::new(), node_names(n));
    for k in 0..fetches {
        fetch_usage(&store, &names, k);
    }
    (store, names)
}

/// Fetch `k` of a metrics-server backend (15 s after fetch `k - 1`): a CPU and memory sample
/// of every node, every value moved since the previous fetch, and every node's capacity.
fn fetch_usage(store: &Store, names: &[String], k: u64) {
    use kube_prober::hub::NodeRecorder;
    use kube_prober::model::{NodeCapacity, Resource, UsageSample};
    let at = usage_t0() + Duration::from_secs(15 * k);
    for (i, n) in names.iter().enumerate() {
        // Below 1 (a ratio) however many fetches.
        let moved = (i as u64 + k * 7) % names.len() as u64;
        let v = moved as f64 / (names.len() as f64 + 100.0);
        store.record_node_usage(
            "metrics_server",
            UsageSample {
                node: n.clone(),
                at,
                values: vec![(Resource::Cpu, v), (Resource::Memory, 1.0 - v)],
            },
        );
        store.record_node_capacity(
            n,
            NodeCapacity {
                cpu_cores: 8.0,
                memory_bytes: 32e9,
            },
        );
    }
    store.record_fetch_end("metrics_server", true, 2);
}

/// A hub that keeps everything in a [`Store`] and, besides, every binding call in order.
mod recording {
    use std::sync::{Arc, Mutex};
    use std::time::SystemTime;

    use kube_prober::hub::{
        ClusterRecorder, DropReason, NodeRecorder, ProbeRecorder, Provider, SinkRecorder,
        SourceRecorder, Store, TaskRecorder,
    };
    use kube_prober::model::{BackendWindow, Binding, NodeCapacity, UsageSample};

    #[derive(Debug, Clone, PartialEq)]
    pub enum Call {
        Record(Binding),
        Forget(String),
    }

    #[derive(Default)]
    pub struct Recording {
        pub store: Arc<Store>,
        pub calls: Mutex<Vec<Call>>,
    }

    impl Call {
        /// The binding recorded (a forget panics).
        pub fn recorded(&self) -> &Binding {
            match self {
                Call::Record(b) => b,
                Call::Forget(p) => panic!("{p} forgotten, not recorded"),
            }
        }
    }

    impl Recording {
        pub fn calls(&self) -> Vec<Call> {
            self.calls.lock().unwrap().clone()
        }

        /// The calls about pod `key`.
        pub fn calls_of(&self, key: &str) -> Vec<Call> {
            self.calls()
                .into_iter()
                .filter(|c| match c {
                    Call::Record(b) => &*b.pod == key,
                    Call::Forget(p) => p == key,
                })
                .collect()
        }
    }

    impl NodeRecorder for Recording {
        fn record_node_usage(&self, source: &str, sample: UsageSample) {
            self.store.record_node_usage(source, sample)
        }
        fn record_node_window(&self, source: &str, window: BackendWindow) {
            self.store.record_node_window(source, window)
        }
        fn record_node_capacity(&self, node: &str, capacity: NodeCapacity) {
            self.store.record_node_capacity(node, capacity)
        }
        fn forget_node(&self, node: &str) {
            self.store.forget_node(node)
        }
        fn record_dropped(&self, source: &str, node: &str, what: &str, reason: DropReason) {
            self.store.record_dropped(source, node, what, reason)
        }
        fn record_fetch_end(&self, source: &str, successful: bool, expire_after: u32) {
            self.store
                .record_fetch_end(source, successful, expire_after)
        }
        fn record_binding(&self, binding: Binding) {
            self.calls.lock().unwrap().push(Call::Record(binding));
        }
        fn forget_binding(&self, pod: &str) {
            self.calls.lock().unwrap().push(Call::Forget(pod.into()));
        }
    }

    impl Provider for Recording {
        fn cluster(&self) -> &dyn ClusterRecorder {
            &*self.store
        }
        fn node(&self) -> &dyn NodeRecorder {
            self
        }
        fn probe(&self) -> &dyn ProbeRecorder {
            &*self.store
        }
        fn source(&self) -> &dyn SourceRecorder {
            &*self.store
        }
        fn sink(&self) -> &dyn SinkRecorder {
            &*self.store
        }
        fn task(&self) -> &dyn TaskRecorder {
            &*self.store
        }
    }

    pub fn now_s() -> u64 {
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs()
    }
}

/// A pod asking for 500m CPU and 100 MiB, limited to 1 CPU, on `node`, with the conditions
/// (type, time in Unix seconds) given as True.
fn bound_pod(name: &str, node: &str, conditions: &[(&str, u64)]) -> Pod {
    use k8s_openapi::api::core::v1::{Container, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    let q = |kv: &[(&str, &str)]| {
        Some(
            kv.iter()
                .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                .collect(),
        )
    };
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: Some(node.into()),
            containers: vec![Container {
                name: "c".into(),
                resources: Some(ResourceRequirements {
                    requests: q(&[("cpu", "500m"), ("memory", "100Mi")]),
                    limits: q(&[("cpu", "1")]),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: Some(PodStatus {
            phase: Some("Running".into()),
            conditions: Some(
                conditions
                    .iter()
                    .map(|(ty, at)| PodCondition {
                        type_: ty.to_string(),
                        status: "True".into(),
                        last_transition_time: Some(Time(
                            k8s_openapi::jiff::Timestamp::from_second(*at as i64).unwrap(),
                        )),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        }),
    }
}

/// Polls until the calls about `key` satisfy `ok` (bounded).
async fn until_calls(
    hub: &recording::Recording,
    key: &str,
    what: &str,
    ok: impl Fn(&[recording::Call]) -> bool,
) -> Vec<recording::Call> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let calls = hub.calls_of(key);
        if ok(&calls) {
            return calls;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for: {what}; calls: {:?}",
            hub.calls()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The pod watch tells the hub of just-bound pods: a scheduled pod is recorded with its
/// PodScheduled time, shows from that time plus the longest wait until Ready and from Ready
/// plus the ramp-up after, with Koordinator's estimate; an unchanged pod makes no call; a pod
/// created bound counts from when it was first seen; a deleted pod and a pod a relist no
/// longer lists are forgotten; a pod bound long ago is never recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn just_bound_pods_are_recorded_with_their_estimate_and_forgotten() {
    use recording::{Call, Recording, now_s};
    let t = |s: u64| SystemTime::UNIX_EPOCH + Duration::from_secs(s);
    // No bookmarks: the relist below needs the 410 (see `cluster_scope_follows_every_change`).
    let api = apiserver::start_with(apiserver::Options {
        bookmark_interval: Duration::from_secs(3600),
        ..Default::default()
    })
    .await;
    api.upsert(&node("n1", "True"));
    let scheduled = now_s() - 10;
    api.upsert(&bound_pod("web", "n1", &[("PodScheduled", scheduled)]));
    // Bound and ready an hour ago: over, never recorded.
    let old = now_s() - 3600;
    api.upsert(&bound_pod(
        "old",
        "n1",
        &[("PodScheduled", old), ("Ready", old + 5)],
    ));
    let hub = Arc::new(Recording::default());
    let cancel = CancellationToken::new();
    let (_stores, tasks) = spawn(api.client(), all_pods(), hub.clone(), cancel.clone());

    // Not ready: bound + 5 minutes; 1 CPU limit × 0.85, 100 MiB × 0.7.
    let calls = until_calls(&hub, "default/web", "web recorded", |c| !c.is_empty()).await;
    let b = calls[0].recorded();
    assert_eq!((&*b.pod, &*b.node), ("default/web", "n1"));
    assert_eq!(b.bound_at, t(scheduled));
    assert_eq!(b.shows_from, t(scheduled + 300));
    assert_eq!((b.cpu_cores, b.memory_bytes), (0.85, 73_400_320.0));

    // Ready: from ready + 60 s.
    let ready = now_s();
    api.upsert(&bound_pod(
        "web",
        "n1",
        &[("PodScheduled", scheduled), ("Ready", ready)],
    ));
    let calls = until_calls(&hub, "default/web", "web ready", |c| c.len() == 2).await;
    let b = calls[1].recorded();
    assert_eq!((b.bound_at, b.shows_from), (t(scheduled), t(ready + 60)));

    // The same pod again (only its resourceVersion moves): no call. A pod created bound
    // (no PodScheduled condition), written after it, shows the event was handled.
    api.upsert(&bound_pod(
        "web",
        "n1",
        &[("PodScheduled", scheduled), ("Ready", ready)],
    ));
    let before = SystemTime::now() - Duration::from_secs(1);
    api.upsert(&bound_pod("kwok", "n1", &[]));
    let calls = until_calls(&hub, "default/kwok", "kwok recorded", |c| !c.is_empty()).await;
    let after = SystemTime::now();
    let k = calls[0].recorded();
    assert!(before <= k.bound_at && k.bound_at <= after, "{k:?}");
    assert_eq!(k.shows_from, k.bound_at + Duration::from_secs(300));
    assert_eq!(hub.calls_of("default/web").len(), 2, "{:?}", hub.calls());
    assert!(hub.calls_of("default/old").is_empty(), "{:?}", hub.calls());

    // Deleted: forgotten.
    api.delete::<Pod>("default", "web");
    until_calls(&hub, "default/web", "web forgotten", |c| {
        c.last() == Some(&Call::Forget("default/web".into()))
    })
    .await;

    // Deleted while the watch was gone, then a 410 relist: forgotten at the list's end.
    api.compact();
    api.drop_watches();
    api.delete::<Pod>("default", "kwok");
    until_calls(
        &hub,
        "default/kwok",
        "kwok forgotten after the relist",
        |c| c.last() == Some(&Call::Forget("default/kwok".into())),
    )
    .await;
    assert_eq!(hub.calls_of("default/kwok").len(), 2, "{:?}", hub.calls());
    stop(cancel, tasks).await;
}
