//! Populating a real control plane ([`crate::control_plane`]) quickly through its API, many
//! requests in flight: kwok nodes and usage pods bound to them, and the waits until the nodes
//! are Ready and the pods Running. Used by the benches `peers` and `soak` and the soak test
//! (`real/soak.rs`), where kubectl's one request at a time would take minutes at 1,000 nodes ×
//! 30 pods.
#![allow(dead_code)]

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, PostParams};

use crate::control_plane::{node_name, node_object};

/// A client of the API server with `kubeconfig` (the admin one of a [`ControlPlane`]).
///
/// [`ControlPlane`]: crate::control_plane::ControlPlane
pub async fn kube_client(kubeconfig: &Path) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).expect("the admin kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("a kube config from the admin kubeconfig");
    kube::Client::try_from(config).expect("a kube client")
}

/// When each step of [`populate`] ended, from its start.
#[derive(Debug, Default, Clone, Copy)]
pub struct Populated {
    pub nodes_created: Duration,
    pub nodes_ready: Duration,
    pub pods_created: Duration,
    pub pods_running: Duration,
}

/// Creates `nodes_n` kwok nodes (`kwok-node-<i>`, 4 CPUs, 16 GiB), waits until they are Ready,
/// then `pods_per_node` usage pods bound to each (`usage-<node>-<j>` in `default`, 100m and
/// 256Mi) and waits until they run; `concurrency` requests in flight.
pub async fn populate(
    client: &kube::Client,
    nodes_n: usize,
    pods_per_node: usize,
    concurrency: usize,
) -> Populated {
    let t = Instant::now();
    let pods_n = nodes_n * pods_per_node;
    let nodes: Api<Node> = Api::all(client.clone());
    create_all(concurrency, 0..nodes_n, |i| {
        let nodes = nodes.clone();
        async move {
            let node: Node = serde_json::from_value(node_object(&node_name(i), "4", "16Gi"))
                .expect("node_object is a Node");
            nodes
                .create(&PostParams::default(), &node)
                .await
                .map(|_| ())
        }
    })
    .await;
    let nodes_created = t.elapsed();
    wait_count("nodes Ready", nodes_n, || count_ready_nodes(client)).await;
    let nodes_ready = t.elapsed();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let per = pods_per_node.max(1);
    create_all(concurrency, 0..pods_n, |k| {
        let pods = pods.clone();
        async move {
            let doc = crate::control_plane::usage_pod(
                "default",
                &node_name(k / per),
                k % per,
                "100m",
                "256Mi",
            );
            let pod: Pod = serde_json::from_value(doc).expect("usage_pod is a Pod");
            pods.create(&PostParams::default(), &pod).await.map(|_| ())
        }
    })
    .await;
    let pods_created = t.elapsed();
    wait_count("pods Running", pods_n, || {
        count_running_pods(client, pods_n)
    })
    .await;
    Populated {
        nodes_created,
        nodes_ready,
        pods_created,
        pods_running: t.elapsed(),
    }
}

/// Runs `make(i)` for every `i` of `range`, `concurrency` at a time; panics on the first error
/// after three tries.
pub async fn create_all<F, Fut, E>(concurrency: usize, range: std::ops::Range<usize>, make: F)
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = Result<(), E>>,
    E: std::fmt::Display,
{
    let total = range.len();
    let done = AtomicU64::new(0);
    futures_util::stream::iter(range)
        .map(|i| {
            let make = &make;
            let done = &done;
            async move {
                let mut last = String::new();
                for _ in 0..3 {
                    match make(i).await {
                        Ok(()) => {
                            let n = done.fetch_add(1, Ordering::Relaxed) + 1;
                            if n.is_multiple_of(5000) {
                                eprintln!("  created {n} of {total}");
                            }
                            return;
                        }
                        Err(e) => last = e.to_string(),
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                panic!("creating object {i}: {last}");
            }
        })
        .buffer_unordered(concurrency.max(1))
        .collect::<Vec<()>>()
        .await;
}

/// Polls `count` every 2 s until it reaches `want` (30 minutes at most).
pub async fn wait_count<F, Fut>(what: &str, want: usize, count: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = usize>,
{
    let deadline = Instant::now() + Duration::from_secs(1800);
    loop {
        let have = count().await;
        eprintln!("  {have} of {want} {what}");
        if have >= want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: {have} of {want} after 30 minutes"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// Every object of a list, in pages of 500 (an error reads as none).
pub async fn list_all<K>(api: &Api<K>) -> Vec<K>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut out = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let mut lp = ListParams::default().limit(500);
        if let Some(t) = &token {
            lp = lp.continue_token(t);
        }
        let Ok(page) = api.list(&lp).await else {
            return out;
        };
        token = page.metadata.continue_.clone().filter(|t| !t.is_empty());
        out.extend(page.items);
        if token.is_none() {
            return out;
        }
    }
}

pub async fn count_ready_nodes(client: &kube::Client) -> usize {
    let nodes: Api<Node> = Api::all(client.clone());
    list_all(&nodes)
        .await
        .iter()
        .filter(|n| {
            n.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .count()
}

/// Pods Running out of `total`: the API server sends only the others (a field selector), so
/// the wait does not list every pod again and again while kwok starts them.
pub async fn count_running_pods(client: &kube::Client, total: usize) -> usize {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let lp = ListParams::default()
        .fields("status.phase!=Running")
        .limit(500);
    match pods.list(&lp).await {
        // More than a page not Running: the count is below `total`, which is all the wait asks.
        Ok(page) => {
            let rest = page.metadata.remaining_item_count.unwrap_or(0).max(0) as usize;
            total.saturating_sub(page.items.len() + rest)
        }
        Err(_) => 0,
    }
}
