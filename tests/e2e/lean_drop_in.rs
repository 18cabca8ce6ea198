//! The lean load-watcher drop-in: the cluster role with the arguments
//! `manifests/components/load-watcher-lean` appends (read from the file, so the test follows the
//! manifests) asks the API server for Nodes and NodeMetrics only, never a pod, DaemonSet or
//! Deployment, registers no pod watch, and serves the same `/watcher` hosts and values as the
//! full cluster role on the same cluster. With `--pod-scope=bound` (the estimate of just-bound
//! pods on) its one pod watch asks only for the bound pods, and a pod bound now gets its node's
//! estimate. Binaries against the stand-in API
//! server with a generated GKE-like cluster.

use support::apiserver;
use support::deploy;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{Prober, get, wait_ready};

const NODES: usize = 4;
const PODS_PER_NODE: usize = 6;

/// `/watcher` once it holds every node's host (it answers 500 before any data).
async fn watcher_of_every_node(p: &Prober, what: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, body) = get(&p.url("/watcher")).await;
        if status == 200 {
            let v: Value = serde_json::from_str(&body).expect("/watcher is JSON");
            if hosts(&v).len() == NODES {
                return v;
            }
        }
        assert!(
            Instant::now() < deadline,
            "{what}: /watcher without {NODES} hosts: {status} {body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn hosts(v: &Value) -> BTreeSet<String> {
    v["data"]["NodeMetricsMap"]
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}

/// The resources (last path segment of a collection) the stand-in was asked for since the log
/// was cleared, each with the query of its first request.
fn asked(api: &apiserver::ApiServer) -> Vec<(String, Option<String>)> {
    let mut seen = BTreeSet::new();
    api.requests()
        .into_iter()
        .filter(|r| r.path.starts_with("/api/v1/") || r.path.starts_with("/apis/"))
        .filter_map(|r| {
            let resource = r.path.rsplit('/').next().unwrap_or_default().to_string();
            seen.insert(r.path.clone()).then_some((resource, r.query))
        })
        .collect()
}

fn start(kubeconfig: &str, extra: &[String]) -> Prober {
    let mut args = vec!["--role", "cluster", "--tick-interval", "1s"];
    args.extend(extra.iter().map(String::as_str));
    Prober::start_with_env(
        &args,
        &[
            ("KUBECONFIG", kubeconfig),
            ("METRICS_PROVIDER_NAME", "KubernetesMetricsServer"),
        ],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lean_drop_in_watches_no_pods_and_serves_the_full_roles_watcher() {
    let lean_args = deploy::component_args("load-watcher-lean");
    assert!(
        lean_args.iter().any(|a| a == "--pod-scope=none")
            && lean_args.iter().any(|a| a == "--watch-workloads=false"),
        "the component's arguments: {lean_args:?}"
    );
    let api = apiserver::start().await;
    let made = api.generate(NODES, PODS_PER_NODE);
    assert_eq!(made.nodes, NODES);
    let dir = tempfile::tempdir().unwrap();
    let kc_path = dir.path().join("kubeconfig");
    api.write_kubeconfig(&kc_path).unwrap();
    let kc = kc_path.to_string_lossy().into_owned();

    // The lean drop-in alone first, so that every request logged is its own.
    api.clear_requests();
    let lean = start(&kc, &lean_args);
    wait_ready(&lean).await;
    let lean_watcher = watcher_of_every_node(&lean, "lean").await;
    let resources: BTreeSet<String> = asked(&api).into_iter().map(|(r, _)| r).collect();
    assert_eq!(
        resources,
        BTreeSet::from(["nodes".to_string()]),
        "the lean drop-in asks for Nodes (core and metrics.k8s.io) and nothing else"
    );
    let metrics_nodes = api
        .requests()
        .iter()
        .filter(|r| r.path == "/apis/metrics.k8s.io/v1beta1/nodes")
        .count();
    assert!(metrics_nodes >= 1, "NodeMetrics fetched");
    let (_, metrics) = get(&lean.url("/metrics")).await;
    let watches: BTreeSet<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("kube_prober_source_"))
        .filter_map(|l| l.split("source=\"").nth(1)?.split('"').next())
        .filter(|s| s.starts_with("watch_"))
        .collect();
    assert_eq!(
        watches,
        BTreeSet::from(["watch_nodes"]),
        "one watch registered, the Nodes'"
    );
    for absent in [
        "kube_prober_node_pods{",
        "kube_prober_addon_expected_pods{",
        "kube_prober_probe_runs_total{",
    ] {
        assert!(!metrics.contains(absent), "lean /metrics has {absent}");
    }
    assert!(metrics.contains("kube_prober_node_cpu_capacity_cores{"));

    // The full cluster role on the same cluster: the same hosts with the same values.
    let full = start(&kc, &["--disable-probes=cluster_dns".to_string()]);
    wait_ready(&full).await;
    let full_watcher = watcher_of_every_node(&full, "full").await;
    assert_eq!(hosts(&lean_watcher), hosts(&full_watcher));
    for host in hosts(&full_watcher) {
        let entry = |v: &Value| v["data"]["NodeMetricsMap"][&host].clone();
        let (l, f) = (entry(&lean_watcher), entry(&full_watcher));
        assert!(
            f["metrics"].as_array().is_some_and(|m| !m.is_empty()),
            "{host}: {f}"
        );
        assert_eq!(l["metrics"], f["metrics"], "{host}: the same entries");
        assert_eq!(
            l["freshness"]["newest"], f["freshness"]["newest"],
            "{host}: the same sample"
        );
    }
    assert_eq!(lean_watcher["source"], full_watcher["source"]);
    assert_eq!(lean.terminate(), 0);
    assert_eq!(full.terminate(), 0);

    // The estimate on: one pod watch, of the bound pods only.
    let mut bound_args: Vec<String> = lean_args
        .iter()
        .map(|a| match a.as_str() {
            "--pod-scope=none" => "--pod-scope=bound".to_string(),
            _ => a.clone(),
        })
        .collect();
    bound_args.push("--watcher-estimate-bound-pods=all".into());
    api.clear_requests();
    let bound = start(&kc, &bound_args);
    wait_ready(&bound).await;
    watcher_of_every_node(&bound, "bound").await;
    let pods: Vec<Option<String>> = asked(&api)
        .into_iter()
        .filter(|(r, _)| r == "pods")
        .map(|(_, q)| q)
        .collect();
    assert_eq!(pods.len(), 1, "one pod watch: {pods:?}");
    let query = pods[0].clone().unwrap_or_default();
    let selector = query
        .split('&')
        .find_map(|kv| kv.strip_prefix("fieldSelector="))
        .map(|s| {
            s.replace("%21", "!")
                .replace("%3D", "=")
                .replace("%2C", ",")
        });
    assert_eq!(
        selector.as_deref(),
        Some("spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"),
        "{query}"
    );
    // A pod bound now: its node's estimate is served, and no held pod counts as a bad one.
    let node = hosts(&lean_watcher).into_iter().next().unwrap();
    api.upsert_json(
        apiserver::Kind::Pods,
        serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "just-bound", "namespace": "default"},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i",
                "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]},
            "status": {"phase": "Pending"},
        }),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, body) = get(&bound.url("/watcher")).await;
        let v: Value = serde_json::from_str(&body).unwrap_or_default();
        if v["data"]["boundPods"][&node]["pods"].as_u64() >= Some(1) {
            break;
        }
        assert!(Instant::now() < deadline, "no estimate for {node}: {body}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (_, metrics) = get(&bound.url("/metrics")).await;
    assert!(
        !metrics.contains("reason=\"bad_pod\""),
        "bound pods counted as bad ones"
    );
    assert_eq!(bound.terminate(), 0);
}
