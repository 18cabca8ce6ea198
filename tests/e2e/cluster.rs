//! The binary finds a kubeconfig, picks the cluster role and load-watcher's default backend
//! (KubernetesMetricsServer), and serves /watcher from the stand-in API server.

use support::apiserver;

use std::time::{Duration, Instant, SystemTime};

use kube_prober::watcher::WatcherMetrics;
use support::{Prober, get, wait_ready};

fn kubeconfig(dir: &std::path::Path, api: &apiserver::ApiServer) -> String {
    let path = dir.join("kubeconfig");
    api.write_kubeconfig(&path).unwrap();
    path.to_string_lossy().into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubeconfig_means_cluster_role_with_metrics_server() {
    let api = apiserver::start().await;
    let now = SystemTime::now();
    api.set_nodes(vec![
        apiserver::node("node-a", ("4", "8Gi"), ("4", "8Gi")),
        apiserver::node("node-b", ("8", "16Gi"), ("8", "16Gi")),
    ]);
    api.set_node_metrics(vec![
        apiserver::node_metrics("node-a", "1", "2Gi", now),
        apiserver::node_metrics("node-b", "6", "4Gi", now),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let kc = kubeconfig(dir.path(), &api);
    let p = Prober::start_with_env(&[], &[("KUBECONFIG", kc.as_str())]);

    wait_ready(&p).await;
    let (status, body) = get(&p.url("/watcher")).await;
    assert_eq!(status, 200, "{body}");
    let w: WatcherMetrics = serde_json::from_str(&body).unwrap();
    assert_eq!(w.source, "KubernetesMetricsServer");
    let latest = |node: &str, kind: &str| {
        w.data.node_metrics_map[node]
            .metrics
            .iter()
            .find(|m| m.kind == kind && m.operator == "Latest")
            .unwrap()
            .value
    };
    assert_eq!(latest("node-a", "CPU"), 25.0);
    assert_eq!(latest("node-a", "Memory"), 25.0);
    assert_eq!(latest("node-b", "CPU"), 75.0);
    assert_eq!(get(&p.url("/watcher/health")).await.0, 200);
    let (_, metrics) = get(&p.url("/metrics")).await;
    assert!(metrics.contains("kube_prober_cluster_info{cluster=\"unknown\",role=\"cluster\",project=\"\",location=\"\"} 1"));
    assert!(metrics.contains("kube_prober_node_cpu_capacity_cores{node=\"node-b\"} 8"));
    assert_eq!(p.terminate(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_role_watches_its_node_and_reads_procfs() {
    let api = apiserver::start().await;
    api.set_nodes(vec![
        apiserver::node("worker-7", ("4", "8Gi"), ("4", "8Gi")),
        apiserver::node("worker-8", ("4", "8Gi"), ("4", "8Gi")),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let kc = kubeconfig(dir.path(), &api);
    let p = Prober::start_with_env(
        &["--role", "node", "--tick-interval", "1s"],
        &[("KUBECONFIG", kc.as_str()), ("NODE_NAME", "worker-7")],
    );
    wait_ready(&p).await;
    let (_, body) = get(&p.url("/watcher")).await;
    let w: WatcherMetrics = serde_json::from_str(&body).unwrap();
    assert_eq!(
        w.source, "Host",
        "the node role reads this machine's procfs"
    );
    assert!(w.data.node_metrics_map.contains_key("worker-7"));
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (_, metrics) = get(&p.url("/metrics")).await;
        if metrics.contains("kube_prober_node_allocatable_cpu_cores{node=\"worker-7\"} 4") {
            assert!(!metrics.contains("node=\"worker-8\""), "only its own node");
            assert!(
                metrics.contains("kube_prober_cluster_info{cluster=\"unknown\",role=\"node\",project=\"\",location=\"\"} 1")
            );
            break;
        }
        assert!(Instant::now() < deadline, "no node metrics: {metrics}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(p.terminate(), 0);
}

/// In the cluster role the metrics-server backend takes capacities from the watched Nodes: after
/// the watcher's list, no fetch lists every Node again (at 5,000 nodes that was tens of MB every
/// 15 s for the API server and for us). Nor does the first fetch: it waits for the watcher's
/// first list instead of listing every Node beside it (at 65,000 nodes both lists at once held
/// every Node twice at start-up).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_role_fetches_node_metrics_without_listing_every_node_each_time() {
    let api = apiserver::start().await;
    let now = SystemTime::now();
    api.set_nodes(vec![apiserver::node("node-a", ("4", "8Gi"), ("4", "8Gi"))]);
    api.set_node_metrics(vec![apiserver::node_metrics("node-a", "2", "2Gi", now)]);
    // A slow Node LIST: the first NodeMetrics fetch starts long before the watcher's list ends.
    api.set_kind_latency(apiserver::Kind::Nodes, Duration::from_millis(700));
    let dir = tempfile::tempdir().unwrap();
    let kc = kubeconfig(dir.path(), &api);
    let p = Prober::start_with_env(
        &["--role", "cluster", "--interval", "1s", "--timeout", "1s"],
        &[("KUBECONFIG", kc.as_str())],
    );
    wait_ready(&p).await;
    let node_lists = || {
        api.requests()
            .iter()
            .filter(|r| r.path == "/api/v1/nodes")
            .filter(|r| {
                !r.query
                    .as_deref()
                    .unwrap_or_default()
                    .contains("watch=true")
            })
            .count()
    };
    let metric_lists = || api.hits("/apis/metrics.k8s.io/v1beta1/nodes");
    let (nodes_before, metrics_before) = (node_lists(), metric_lists());
    assert_eq!(nodes_before, 1, "one LIST of Nodes at start: the watcher's");
    assert!(metrics_before >= 1, "ready after the first fetch");
    let deadline = Instant::now() + Duration::from_secs(15);
    while metric_lists() < metrics_before + 3 {
        assert!(Instant::now() < deadline, "the backend stopped fetching");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        node_lists(),
        nodes_before,
        "three fetches, no new LIST of Nodes"
    );
    let (_, body) = get(&p.url("/watcher")).await;
    let w: WatcherMetrics = serde_json::from_str(&body).unwrap();
    let cpu = w.data.node_metrics_map["node-a"]
        .metrics
        .iter()
        .find(|m| m.kind == "CPU" && m.operator == "Latest")
        .unwrap()
        .value;
    assert_eq!(cpu, 50.0, "2 of 4 cores, capacity from the watched Node");
    assert_eq!(p.terminate(), 0);
}
