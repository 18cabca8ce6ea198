//! The cluster role against the real control plane (tests/support/control_plane.rs): what
//! kube-prober reports is what the real controllers, kwok and metrics-server produce.
//! - `/watcher` CPU and memory of every node equal metrics-server's NodeMetrics, read through
//!   the aggregation layer, divided by the node's allocatable;
//! - a DaemonSet short of pods and a Deployment scaled down give the addon counts the
//!   DaemonSet and Deployment controllers wrote;
//! - a node turned NotReady, and container restarts, as kwok (the kubelet here) reports them
//!   (restarts through a kwok stage of the test support: kwok's own stages never restart);
//! - a deleted node leaves `/metrics` and `/watcher` by the next tick, and so do its pods once
//!   the pod-GC controller removes them;
//! - the node role for one kwok node sees exactly its pods (field selector).
//! - pod-level resources, and an in-place resize through the `resize` subresource with the
//!   kubelet's report written through `status`, count in the pods' requests as the scheduler
//!   counts them.
//!
//! One control plane serves every test of this file (they use their own nodes and namespaces).

use support::control_plane;
use support::deploy;

use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use control_plane::{ControlPlane, Options};
use deploy::sample;
use kube_prober::watcher::WatcherMetrics;
use support::{Prober, get, wait_body};

/// Nodes `kwok-node-0..3` carry usage pods; each test that changes nodes makes its own.
const BASE_NODES: usize = 3;

fn cp() -> &'static ControlPlane {
    static CP: OnceLock<ControlPlane> = OnceLock::new();
    CP.get_or_init(|| {
        ControlPlane::start(Options {
            nodes: BASE_NODES,
            pods_per_node: 2,
            ..Options::default()
        })
    })
}

/// The cluster role against the control plane as the admin, with fast schedules.
fn cluster_role(extra: &[&str]) -> Prober {
    let kc = cp().admin_kubeconfig.to_string_lossy().into_owned();
    let mut args = support::FAST_CLUSTER_ROLE.to_vec();
    args.extend_from_slice(extra);
    Prober::start_with_env(&args, &[("KUBECONFIG", kc.as_str())])
}

fn latest(w: &WatcherMetrics, node: &str, kind: &str) -> Option<f64> {
    w.data
        .node_metrics_map
        .get(node)?
        .metrics
        .iter()
        .find(|m| m.kind == kind && m.operator == "Latest")
        .map(|m| m.value)
}

/// Every node's `/watcher` CPU and memory equal NodeMetrics ÷ allocatable: both read in the
/// same instant, compared when kube-prober's newest sample is metrics-server's newest window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watcher_equals_node_metrics_divided_by_allocatable() {
    let cp = cp();
    let p = cluster_role(&[]);
    support::wait_ready(&p).await;
    let allocatable: BTreeMap<String, (f64, f64)> = control_plane::items(&cp.get_json(&["nodes"]))
        .iter()
        .map(|n| {
            let a = &n["status"]["allocatable"];
            (
                n["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                (
                    control_plane::quantity(a["cpu"].as_str().unwrap_or("0")),
                    control_plane::quantity(a["memory"].as_str().unwrap_or("0")),
                ),
            )
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let metrics = cp.node_metrics();
        let (_, body) = get(&p.url("/watcher")).await;
        let w: WatcherMetrics = serde_json::from_str(&body).expect("/watcher JSON");
        let mut mismatches = Vec::new();
        for i in 0..BASE_NODES {
            let node = control_plane::node_name(i);
            let (cpu, mem) = metrics[&node];
            let (acpu, amem) = allocatable[&node];
            let want = (100.0 * cpu / acpu, 100.0 * mem / amem);
            let have = (latest(&w, &node, "CPU"), latest(&w, &node, "Memory"));
            let close = |h: Option<f64>, w: f64| h.is_some_and(|h| (h - w).abs() <= 0.06);
            if !(close(have.0, want.0) && close(have.1, want.1)) {
                mismatches.push(format!(
                    "{node}: /watcher {have:?}, NodeMetrics ÷ allocatable {want:?}"
                ));
            }
        }
        if mismatches.is_empty() {
            eprintln!("/watcher = NodeMetrics ÷ allocatable for {BASE_NODES} nodes (±0.06 points)");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "after 90 s:\n{}",
            mismatches.join("\n")
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(p.terminate(), 0);
}

/// Addons as the controllers made them: a DaemonSet that cannot place its pod on one node
/// (the node is too small for it) is short of one pod; a Deployment scaled from 3 to 1 expects 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn addon_counts_follow_the_real_controllers() {
    let cp = cp();
    // A node too small for the DaemonSet's pod: desired counts it, no pod can run there.
    cp.create_nodes(20..21, "100m", "1Gi");
    cp.wait_nodes_ready(BASE_NODES + 1);
    let nodes = cp.get_json(&["nodes", "-l", "type=kwok"]);
    let node_count = control_plane::items(&nodes).len();
    cp.apply(
        r#"
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: test-agent
  namespace: kube-system
  labels: {components.gke.io/component-name: test-agent, components.gke.io/component-version: "1.0"}
spec:
  selector: {matchLabels: {app: test-agent}}
  template:
    metadata:
      labels: {app: test-agent, components.gke.io/component-name: test-agent, components.gke.io/component-version: "1.0"}
    spec:
      tolerations: [{operator: Exists}]
      containers: [{name: agent, image: agent, resources: {requests: {cpu: 500m}}}]
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: test-dns
  namespace: kube-system
  labels: {components.gke.io/component-name: test-dns, components.gke.io/component-version: "2.0"}
spec:
  replicas: 3
  selector: {matchLabels: {app: test-dns}}
  template:
    metadata:
      labels: {app: test-dns, components.gke.io/component-name: test-dns, components.gke.io/component-version: "2.0"}
    spec:
      tolerations: [{operator: Exists}]
      containers: [{name: dns, image: dns, resources: {requests: {cpu: 10m}}}]
"#,
    );
    let p = cluster_role(&[]);
    support::wait_ready(&p).await;
    let expected = |addon: &'static str, n: usize| {
        move |b: &str| {
            sample(b, "kube_prober_addon_expected_pods", &[("addon", addon)]) == Some(n as f64)
        }
    };
    wait_body(
        &p,
        "/metrics",
        60,
        "DaemonSet expected on every kwok node",
        expected("test-agent", node_count),
    )
    .await;
    // Every node but the small one runs a ready pod of the DaemonSet; the small one has none.
    let body = wait_body(
        &p,
        "/metrics",
        60,
        "DaemonSet pods ready on the big nodes",
        |b| {
            deploy::samples(b, "kube_prober_addon_ready_pods")
                .iter()
                .filter(|(l, v)| {
                    l.get("addon").map(String::as_str) == Some("test-agent") && *v == 1.0
                })
                .count()
                == node_count - 1
        },
    )
    .await;
    assert_eq!(
        sample(
            &body,
            "kube_prober_addon_pods",
            &[("addon", "test-agent"), ("node", "kwok-node-20")]
        ),
        None,
        "no DaemonSet pod can run on the small node"
    );
    let ds = cp.get_json(&["daemonset", "test-agent", "-n", "kube-system"]);
    assert_eq!(ds["status"]["desiredNumberScheduled"], node_count);
    assert_eq!(ds["status"]["numberAvailable"], node_count - 1);
    wait_body(
        &p,
        "/metrics",
        60,
        "Deployment expects 3",
        expected("test-dns", 3),
    )
    .await;
    cp.kubectl(&[
        "scale",
        "deployment/test-dns",
        "-n",
        "kube-system",
        "--replicas=1",
    ]);
    wait_body(
        &p,
        "/metrics",
        60,
        "Deployment scaled down expects 1 and has 1 pod",
        |b| {
            expected("test-dns", 1)(b)
                && deploy::samples(b, "kube_prober_addon_pods")
                    .iter()
                    .filter(|(l, _)| l.get("addon").map(String::as_str) == Some("test-dns"))
                    .map(|(_, v)| v)
                    .sum::<f64>()
                    == 1.0
        },
    )
    .await;
    assert_eq!(p.terminate(), 0);
    cp.kubectl(&[
        "delete",
        "daemonset/test-agent",
        "deployment/test-dns",
        "-n",
        "kube-system",
    ]);
    cp.kubectl(&["delete", "node", "kwok-node-20"]);
}

/// Container restarts as the kubelet (kwok, with the restarts stage of the test support)
/// reports them: the restart counter of each container of an addon pod, and its last
/// termination; a later restart moves the counter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn container_restarts_as_the_kubelet_reports_them() {
    let cp = cp();
    cp.apply(&control_plane::restarting_addon(3, true));
    let p = cluster_role(&[]);
    support::wait_ready(&p).await;
    let restarts = |container: &'static str, n: f64| {
        move |b: &str| {
            sample(
                b,
                "kube_prober_container_restarts_total",
                &[("addon", "test-restarts"), ("container", container)],
            ) == Some(n)
        }
    };
    wait_body(
        &p,
        "/metrics",
        60,
        "3 restarts of app",
        restarts("app", 3.0),
    )
    .await;
    let body = wait_body(
        &p,
        "/metrics",
        10,
        "3 restarts of sidecar",
        restarts("sidecar", 3.0),
    )
    .await;
    assert!(
        body.lines()
            .any(|l| l.starts_with("kube_prober_container_last_termination{")
                && l.contains("test-restarts")
                && l.contains("OOMKilled")),
        "the last termination, OOMKilled:\n{body}"
    );
    let pods = cp.get_json(&["pods", "-n", "kube-system", "-l", "app=test-restarts"]);
    let pod = control_plane::items(&pods)[0]["metadata"]["name"]
        .as_str()
        .expect("pod name")
        .to_string();
    cp.kubectl(&[
        "annotate",
        "--overwrite",
        "pod",
        &pod,
        "-n",
        "kube-system",
        &format!("{}=5", control_plane::RESTARTS_ANNOTATION),
    ]);
    wait_body(
        &p,
        "/metrics",
        30,
        "5 restarts of app",
        restarts("app", 5.0),
    )
    .await;
    assert_eq!(p.terminate(), 0);
    cp.kubectl(&["delete", "deployment/test-restarts", "-n", "kube-system"]);
}

/// A node kwok turns NotReady (its node-not-ready stage) shows Ready=False and unavailable; a
/// deleted node's own series leave `/metrics` and `/watcher` by the next tick; the series of
/// its pods (`kube_prober_node_pod_*` and `kube_prober_node_pods`, keyed by the node they are
/// bound to) leave once the pod-GC controller has deleted them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_ready_and_deleted_nodes_as_the_node_lifecycle_and_pod_gc_leave_them() {
    let cp = cp();
    cp.create_nodes(30..32, "4", "16Gi");
    cp.wait_nodes_ready(BASE_NODES + 2);
    cp.create_usage_pods("default", 30..32, 1, "200m", "512Mi");
    let p = cluster_role(&[]);
    support::wait_ready(&p).await;
    let ready = |node: &'static str, status: &'static str| {
        move |b: &str| {
            sample(
                b,
                "kube_prober_node_condition",
                &[("node", node), ("condition", "Ready"), ("status", status)],
            ) == Some(1.0)
        }
    };
    wait_body(
        &p,
        "/metrics",
        30,
        "kwok-node-30 Ready",
        ready("kwok-node-30", "True"),
    )
    .await;
    cp.kubectl(&[
        "label",
        "node",
        "kwok-node-30",
        "node-not-ready.stage.kwok.x-k8s.io=true",
    ]);
    wait_body(
        &p,
        "/metrics",
        60,
        "kwok-node-30 NotReady",
        ready("kwok-node-30", "False"),
    )
    .await;
    // Unavailable because not ready (both are new, so neither is done warming: 5 minutes).
    let body = wait_body(
        &p,
        "/metrics",
        30,
        "kwok-node-30 unavailable, not ready",
        |b| {
            sample(
                b,
                "kube_prober_node_available",
                &[("node", "kwok-node-30"), ("ready", "false")],
            ) == Some(0.0)
        },
    )
    .await;
    assert!(
        sample(
            &body,
            "kube_prober_node_available",
            &[("node", "kwok-node-31"), ("ready", "true")]
        )
        .is_some(),
        "kwok-node-31 stays ready:\n{body}"
    );
    // Deleted: gone from /metrics and /watcher by the next ticks; its pod is gone once pod GC
    // deleted it (the pod's node label leaves kube_prober_node_pods).
    wait_body(&p, "/watcher", 60, "kwok-node-31 in /watcher", |b| {
        b.contains("\"kwok-node-31\"")
    })
    .await;
    cp.kubectl(&["delete", "node", "kwok-node-31"]);
    let deleted = Instant::now();
    wait_body(&p, "/watcher", 10, "kwok-node-31 left /watcher", |b| {
        !b.contains("\"kwok-node-31\"")
    })
    .await;
    wait_body(
        &p,
        "/metrics",
        10,
        "kwok-node-31's node series left /metrics",
        |b| {
            b.lines().all(|l| {
                !l.contains("node=\"kwok-node-31\"") || l.starts_with("kube_prober_node_pod")
            })
        },
    )
    .await;
    eprintln!(
        "deleted node left /watcher and /metrics after {:?}",
        deleted.elapsed()
    );
    let deadline = Instant::now() + Duration::from_secs(90);
    while !control_plane::items(&cp.get_json(&[
        "pods",
        "-A",
        "--field-selector=spec.nodeName=kwok-node-31",
    ]))
    .is_empty()
    {
        assert!(
            Instant::now() < deadline,
            "pod GC did not delete the pods of kwok-node-31"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    eprintln!(
        "pod GC removed kwok-node-31's pods after {:?}",
        deleted.elapsed()
    );
    wait_body(&p, "/metrics", 10, "kwok-node-31's pod left", |b| {
        !b.contains("kwok-node-31")
    })
    .await;
    assert_eq!(p.terminate(), 0);
    cp.kubectl(&["delete", "node", "kwok-node-30"]);
}

/// The node role for one kwok node sees exactly the pods bound to it (a field selector on
/// `spec.nodeName`), with their requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_role_sees_exactly_its_nodes_pods() {
    let cp = cp();
    let kc = cp.admin_kubeconfig.to_string_lossy().into_owned();
    let p = Prober::start_with_env(
        &["--role", "node", "--tick-interval", "1s"],
        &[("KUBECONFIG", kc.as_str()), ("NODE_NAME", "kwok-node-1")],
    );
    support::wait_ready(&p).await;
    // kwok-node-1 runs the two usage pods of 500m each (and whatever DaemonSet pods other tests
    // add: those are not this node's usage pods' requests, so compare with the API's own view).
    let body = wait_body(&p, "/metrics", 30, "the node's pods", |b| {
        sample(b, "kube_prober_node_pods", &[("node", "kwok-node-1")]).is_some()
    })
    .await;
    let pods = cp.get_json(&["pods", "-A", "--field-selector=spec.nodeName=kwok-node-1"]);
    let n = control_plane::items(&pods).len() as f64;
    assert_eq!(
        sample(&body, "kube_prober_node_pods", &[("node", "kwok-node-1")]),
        Some(n)
    );
    assert!(
        deploy::samples(&body, "kube_prober_node_pods").len() == 1,
        "the node role reports its own node only:\n{body}"
    );
    assert_eq!(p.terminate(), 0);
}

/// The CPU requested by the pods on `node` outside namespace `ns`, from the API's own view
/// (plain container requests: the DaemonSet pods other tests may put there).
fn other_pods_cpu(cp: &ControlPlane, node: &str, ns: &str) -> f64 {
    let pods = cp.get_json(&[
        "pods",
        "-A",
        &format!("--field-selector=spec.nodeName={node}"),
    ]);
    control_plane::items(&pods)
        .iter()
        .filter(|p| p["metadata"]["namespace"] != ns)
        .flat_map(|p| {
            p["spec"]["containers"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter_map(|c| {
            c["resources"]["requests"]["cpu"]
                .as_str()
                .map(control_plane::quantity)
        })
        .sum()
}

/// PUTs `object` to the API path `path` (a subresource), as the admin.
fn put(cp: &ControlPlane, path: &str, object: &serde_json::Value) {
    cp.kubectl_stdin(
        &["replace", "--raw", path, "-f", "-"],
        Some(&object.to_string()),
    );
}

/// Pod-level resources and in-place resize, kept by the real API server 1.34 (both features on
/// by default there): a pod's `spec.resources` wins over its containers'; a resize through the
/// `resize` subresource moves the requests; the resources the kubelet reports in the
/// container statuses count as the scheduler counts them, the running ones alone while the
/// resize is infeasible. (kwok writes no status resources: the test writes them through the
/// `status` subresource as a kubelet would.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_level_resources_and_in_place_resize_as_the_api_server_keeps_them() {
    let cp = cp();
    let (node, ns) = ("kwok-node-40", "resize");
    cp.create_nodes(40..41, "8", "16Gi");
    cp.apply(&format!(
        r#"apiVersion: v1
kind: Namespace
metadata: {{name: {ns}}}
---
apiVersion: v1
kind: Pod
metadata: {{name: resized, namespace: {ns}}}
spec:
  nodeName: {node}
  containers: [{{name: app, image: app, resources: {{requests: {{cpu: 500m}}, limits: {{cpu: "1"}}}}}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: pod-level, namespace: {ns}}}
spec:
  nodeName: {node}
  resources: {{requests: {{cpu: "2", memory: 1Gi}}}}
  containers: [{{name: app, image: app, resources: {{requests: {{cpu: 100m}}}}}}]
"#
    ));
    cp.wait_pods_running(ns, 2);
    let p = cluster_role(&[]);
    support::wait_ready(&p).await;
    let requests = |ours: f64| {
        move |b: &str| {
            let want = ours + other_pods_cpu(cp, node, ns);
            let got = sample(
                b,
                "kube_prober_node_pod_requests_cpu_cores",
                &[("node", node)],
            );
            got.is_some_and(|g| (g - want).abs() < 1e-9)
        }
    };
    wait_body(
        &p,
        "/metrics",
        60,
        "500m + the pod level's 2",
        requests(2.5),
    )
    .await;

    // The kubelet's report, as a kubelet that can resize writes it for every running
    // container (the API server allows a resize only then): running and allocated 500m.
    let path = format!("/api/v1/namespaces/{ns}/pods/resized");
    let mut pod = cp.get_json(&["pod", "resized", "-n", ns]);
    let status = &mut pod["status"]["containerStatuses"][0];
    status["resources"] = serde_json::json!({"requests": {"cpu": "500m"}, "limits": {"cpu": "1"}});
    status["allocatedResources"] = serde_json::json!({"cpu": "500m"});
    put(cp, &format!("{path}/status"), &pod);
    let pod = cp.get_json(&["pod", "resized", "-n", ns]);
    assert_eq!(
        pod["status"]["containerStatuses"][0]["allocatedResources"]["cpu"], "500m",
        "the API server keeps the status resources: {pod}"
    );

    // The resize subresource: the desired requests move to 800m, while 500m still runs.
    let mut pod = pod;
    pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "800m".into();
    put(cp, &format!("{path}/resize"), &pod);
    wait_body(&p, "/metrics", 30, "800m desired", requests(2.8)).await;

    // The kubelet finds the resize infeasible on this node: what runs counts.
    let mut pod = cp.get_json(&["pod", "resized", "-n", ns]);
    let infeasible = serde_json::json!({"type": "PodResizePending", "status": "True",
        "reason": "Infeasible", "message": "Node didn't have enough capacity"});
    let conditions = pod["status"]["conditions"]
        .as_array_mut()
        .expect("conditions");
    conditions.push(infeasible);
    put(cp, &format!("{path}/status"), &pod);
    wait_body(
        &p,
        "/metrics",
        30,
        "500m running, infeasible",
        requests(2.5),
    )
    .await;

    // No longer infeasible (e.g. deferred): the larger of desired and running counts again.
    let mut pod = cp.get_json(&["pod", "resized", "-n", ns]);
    let conditions = pod["status"]["conditions"]
        .as_array_mut()
        .expect("conditions");
    conditions.retain(|c| c["type"] != "PodResizePending");
    put(cp, &format!("{path}/status"), &pod);
    wait_body(&p, "/metrics", 30, "800m again", requests(2.8)).await;

    assert_eq!(p.terminate(), 0);
    cp.kubectl(&["delete", "namespace", ns, "--wait=false"]);
    cp.kubectl(&["delete", "node", node]);
}

/// `--auth kubernetes` with the real TokenReview and SubjectAccessReview: a ServiceAccount bound
/// to `get` on `/metrics` gets 200, an unbound one 403, no token 401; kube-prober without
/// `system:auth-delegator` answers 503 with `Retry-After` and its log names the missing
/// permission.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_kubernetes_with_real_token_and_access_reviews() {
    let cp = cp();
    cp.apply(
        r#"
apiVersion: v1
kind: Namespace
metadata: {name: auth-test}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: prober, namespace: auth-test}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: prober-undelegated, namespace: auth-test}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: scraper, namespace: auth-test}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: stranger, namespace: auth-test}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: auth-test-metrics-reader}
rules: [{nonResourceURLs: ["/metrics"], verbs: [get]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: auth-test-scraper}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: auth-test-metrics-reader}
subjects: [{kind: ServiceAccount, name: scraper, namespace: auth-test}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: auth-test-prober-delegator}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: system:auth-delegator}
subjects: [{kind: ServiceAccount, name: prober, namespace: auth-test}]
"#,
    );
    let start = |sa: &str| {
        let kc = cp.service_account_kubeconfig("auth-test", sa);
        Prober::start(&[
            "--role",
            "host",
            "--kubeconfig",
            &kc.to_string_lossy(),
            "--auth",
            "kubernetes",
        ])
    };
    let client = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("client");
    let scrape = |p: &Prober, token: Option<String>| {
        let mut r = client.get(p.url("/metrics"));
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        async move { r.send().await.expect("GET /metrics") }
    };
    let p = start("prober");
    support::wait_ready(&p).await;
    let scraper = cp.token("auth-test", "scraper");
    let stranger = cp.token("auth-test", "stranger");
    assert_eq!(scrape(&p, Some(scraper.clone())).await.status(), 200);
    assert_eq!(scrape(&p, Some(stranger)).await.status(), 403);
    assert_eq!(scrape(&p, None).await.status(), 401);
    assert_eq!(
        scrape(&p, Some("not-a-token".into())).await.status(),
        401,
        "a token the API server does not know"
    );
    assert_eq!(p.terminate(), 0);

    let mut p = start("prober-undelegated");
    support::wait_ready(&p).await;
    let r = scrape(&p, Some(scraper)).await;
    assert_eq!(r.status(), 503);
    assert_eq!(
        r.headers().get("retry-after").and_then(|v| v.to_str().ok()),
        Some("5")
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut lines = Vec::new();
    loop {
        lines.extend(p.log.try_iter());
        if let Some(l) = lines
            .iter()
            .find(|l| l.contains("TokenReview failed") || l.contains("403 Forbidden"))
        {
            assert!(
                l.contains("403 Forbidden")
                    && l.contains("system:auth-delegator")
                    && l.contains("tokenreviews"),
                "the log names the missing permission: {l}"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no review failure logged:\n{}",
            lines.join("\n")
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = &mut p;
    assert_eq!(p.terminate(), 0);
}

/// Two cluster-role replicas elect a leader on a real Lease; when the leader is killed, the
/// other takes over once the Lease has expired (lease duration plus at most one retry period).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_election_on_a_real_lease_fails_over_when_the_leader_dies() {
    let cp = cp();
    let kc = cp.admin_kubeconfig.to_string_lossy().into_owned();
    let start = |id: &str| {
        Prober::start_with_env(
            &[
                "--role",
                "cluster",
                "--tick-interval",
                "1s",
                "--sink",
                "otlp",
                "--leader-elect-namespace",
                "default",
                "--leader-elect-lease-name",
                "leader-test",
                "--leader-elect-identity",
                id,
                "--leader-elect-lease-duration",
                "4s",
                "--leader-elect-renew-deadline",
                "3s",
                "--leader-elect-retry-period",
                "500ms",
            ],
            &[
                ("KUBECONFIG", kc.as_str()),
                // No collector: pushes fail at once on a closed port of 127.0.0.1.
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9"),
            ],
        )
    };
    let holder = || {
        let out = cp.kubectl_output(
            &[
                "get",
                "lease",
                "leader-test",
                "-n",
                "default",
                "-o",
                "jsonpath={.spec.holderIdentity}",
            ],
            None,
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let a = start("replica-a");
    let b = start("replica-b");
    let deadline = Instant::now() + Duration::from_secs(30);
    let first = loop {
        let h = holder();
        if h == "replica-a" || h == "replica-b" {
            break h;
        }
        assert!(
            Instant::now() < deadline,
            "no replica took the Lease: {h:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let (mut leader, follower, next) = if first == "replica-a" {
        (a, b, "replica-b")
    } else {
        (b, a, "replica-a")
    };
    wait_body(
        &follower,
        "/metrics",
        10,
        "the follower reports it does not lead",
        |b| sample(b, "kube_prober_leader", &[]) == Some(0.0),
    )
    .await;
    let _ = leader.child.kill();
    let _ = leader.child.wait();
    let killed = Instant::now();
    let deadline = killed + Duration::from_secs(20);
    while holder() != next {
        assert!(
            Instant::now() < deadline,
            "{next} did not take over the Lease"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let took = killed.elapsed();
    eprintln!("{next} took over {took:?} after the leader was killed (lease 4 s, retry 500 ms)");
    assert!(
        took <= Duration::from_millis(4_000 + 2 * 500 + 2_000),
        "takeover took {took:?}: more than the lease duration plus two retry periods (the follower sees each renewal up to one retry period late), with 2 s for polling the Lease through kubectl"
    );
    wait_body(
        &follower,
        "/metrics",
        10,
        "the new leader reports it",
        |b| sample(b, "kube_prober_leader", &[]) == Some(1.0),
    )
    .await;
    assert_eq!(follower.terminate(), 0);
}
