//! Real faults on the real control plane (tests/support/control_plane.rs). Each converges to
//! the exact state a fresh kube-prober reports, with the counters of docs/reliability.md moving
//! as documented:
//! - kube-apiserver SIGKILLed, the cluster changed meanwhile through a second API server on the
//!   same etcd, etcd compacted past kube-prober's resourceVersion, the API server restarted
//!   (a real 410 Gone and relist), listing in pages and with streaming lists;
//! - API Priority and Fairness set so that every request of kube-prober's identity is rejected
//!   with a real 429, then lifted;
//! - metrics-server stopped and restarted;
//!
//! One control plane for the file; the tests take turns (each breaks it for the others).

use support::control_plane;
use support::deploy;

use std::collections::BTreeSet;
use std::sync::OnceLock;

use std::time::{Duration, Instant};
use tokio::sync::Mutex;

use control_plane::{ControlPlane, Options};
use deploy::sum as counter;
use support::{Prober, get};

const NODES: usize = 3;

/// The control plane, one test at a time (each breaks it for the others).
fn cp() -> &'static Mutex<ControlPlane> {
    static CP: OnceLock<Mutex<ControlPlane>> = OnceLock::new();
    CP.get_or_init(|| {
        Mutex::new(ControlPlane::start(Options {
            nodes: NODES,
            pods_per_node: 1,
            ..Options::default()
        }))
    })
}

fn start_with(kubeconfig: &str) -> Prober {
    Prober::start_with_env(support::FAST_CLUSTER_ROLE, &[("KUBECONFIG", kubeconfig)])
}

fn admin(cp: &ControlPlane) -> String {
    cp.admin_kubeconfig.to_string_lossy().into_owned()
}

/// The series that describe the cluster (not kube-prober's own counters and timings): what a
/// long-running instance must share with a fresh one.
fn cluster_state(body: &str) -> BTreeSet<String> {
    const FAMILIES: &[&str] = &[
        "kube_prober_node_condition",
        "kube_prober_node_available",
        "kube_prober_cluster_nodes",
        "kube_prober_cluster_node_conditions",
        "kube_prober_node_pods",
        "kube_prober_node_pod_requests_cpu_cores",
        "kube_prober_node_pod_requests_memory_bytes",
        "kube_prober_node_allocatable_cpu_cores",
        "kube_prober_node_allocatable_memory_bytes",
        "kube_prober_addon_expected_pods",
        "kube_prober_addon_pods",
    ];
    body.lines()
        .filter(|l| {
            FAMILIES.iter().any(|f| {
                l.strip_prefix(f)
                    .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
            })
        })
        .map(str::to_string)
        .collect()
}

/// Waits until `old` reports the same cluster state as `fresh` (a new instance started now),
/// and that state holds the node set `nodes`.
async fn converges_to_fresh(old: &Prober, kubeconfig: &str, nodes: &[String], what: &str) {
    let fresh = start_with(kubeconfig);
    support::wait_ready(&fresh).await;
    let deadline = Instant::now() + Duration::from_secs(90);
    let started = Instant::now();
    loop {
        let (_, a) = get(&old.url("/metrics")).await;
        let (_, b) = get(&fresh.url("/metrics")).await;
        let (sa, sb) = (cluster_state(&a), cluster_state(&b));
        let has_nodes = nodes
            .iter()
            .all(|n| b.contains(&format!("kube_prober_node_available{{node=\"{n}\"")));
        if sa == sb && has_nodes && !sa.is_empty() {
            eprintln!(
                "{what}: converged to a fresh instance's state after {:?}",
                started.elapsed()
            );
            break;
        }
        let diff: Vec<_> = sa.symmetric_difference(&sb).take(10).collect();
        assert!(
            Instant::now() < deadline,
            "{what}: not converged after 90 s (has nodes {nodes:?}: {has_nodes}); differing series:\n{diff:#?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(fresh.terminate(), 0);
}

/// The API server is SIGKILLed; through a second API server on the same etcd a node is deleted
/// and another created; etcd is compacted at its head; the API server comes back. kube-prober's
/// watches resume from a compacted resourceVersion, get a real 410 Gone, relist (`expired`),
/// and report exactly what a fresh instance reports.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_server_killed_cluster_changed_etcd_compacted_then_back() {
    killed_changed_compacted_then_back("paged").await;
}

/// The same with `--watch-initial-list=streaming`: the start and the relist after the 410 go
/// through WATCHes with `sendInitialEvents` (kube-apiserver 1.34 serves them by default), and
/// the state still ends equal to a fresh instance's (which lists in pages). A server that did not
/// stream would never end the initial list (no `k8s.io/initial-events-end` bookmark) and the
/// instance would never be ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_server_killed_cluster_changed_etcd_compacted_then_back_with_streaming_lists() {
    killed_changed_compacted_then_back("streaming").await;
}

async fn killed_changed_compacted_then_back(initial_list: &str) {
    let mut cp = cp().lock().await;
    let kc = admin(&cp);
    cp.create_nodes(40..41, "4", "16Gi");
    let p = Prober::start_with_env(
        support::FAST_CLUSTER_ROLE,
        &[
            ("KUBECONFIG", &kc),
            ("KUBE_PROBER_WATCH_INITIAL_LIST", initial_list),
        ],
    );
    support::wait_ready(&p).await;
    support::wait_metrics(&p, "kwok-node-40 reported", |b| {
        b.contains("\"kwok-node-40\"")
    })
    .await;
    let second = cp.start_second_apiserver();
    cp.kill("kube-apiserver");
    let run = |args: &[&str]| {
        let out = control_plane::kubectl_with(&second, args, None);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(&["delete", "node", "kwok-node-40"]);
    let node41 = serde_json::json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "kwok-node-41", "annotations": {"kwok.x-k8s.io/node": "fake"}},
        "status": {"allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"},
                   "capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"}}});
    let out =
        control_plane::kubectl_with(&second, &["create", "-f", "-"], Some(&node41.to_string()));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rev = cp.compact_etcd();
    eprintln!("etcd compacted at revision {rev}");
    cp.kill("kube-apiserver-2");
    cp.restart("kube-apiserver");
    cp.wait_apiserver(Duration::from_secs(60));
    let mut nodes: Vec<String> = (0..NODES).map(control_plane::node_name).collect();
    nodes.push("kwok-node-41".into());
    converges_to_fresh(&p, &kc, &nodes, "API server back after compaction").await;
    let (_, body) = get(&p.url("/metrics")).await;
    assert!(
        !body.contains("\"kwok-node-40\""),
        "the node deleted meanwhile is gone"
    );
    let expired = counter(
        &body,
        "kube_prober_watch_relists_total",
        &[("reason", "expired")],
    );
    let restarts = counter(&body, "kube_prober_watch_restarts_total", &[]);
    eprintln!("relists expired: {expired}, watch restarts: {restarts}");
    assert!(
        expired >= 1.0,
        "a real 410 Gone makes a relist counted `expired`:\n{body}"
    );
    assert!(
        restarts >= 1.0,
        "the broken watches were restarted and counted"
    );
    assert_eq!(p.terminate(), 0);
    cp.kubectl(&["delete", "node", "kwok-node-41"]);
}

/// API Priority and Fairness: a FlowSchema sends every request of kube-prober's
/// ServiceAccount to a priority level with no seats that rejects. APF still runs one request of
/// a level when none is running; the test keeps one running (a GET of an aggregated API that
/// never answers, served by the test), so every LIST of kube-prober gets a real 429, however
/// the requests fall in time. kube-prober is not ready and counts the failed lists; once the
/// FlowSchema is gone it turns ready with the exact node set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_priority_and_fairness_rejects_with_429_then_lets_through() {
    let cp = cp().lock().await;
    cp.apply(
        r#"
apiVersion: v1
kind: Namespace
metadata: {name: apf-test}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: prober, namespace: apf-test}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: apf-test-prober}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}
subjects: [{kind: ServiceAccount, name: prober, namespace: apf-test}]
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: PriorityLevelConfiguration
metadata: {name: apf-test-starved}
spec:
  type: Limited
  limited:
    nominalConcurrencyShares: 0
    lendablePercent: 0
    borrowingLimitPercent: 0
    limitResponse: {type: Reject}
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {name: apf-test-prober}
spec:
  matchingPrecedence: 100
  priorityLevelConfiguration: {name: apf-test-starved}
  distinguisherMethod: {type: ByUser}
  rules:
  - subjects: [{kind: ServiceAccount, serviceAccount: {name: prober, namespace: apf-test}}]
    resourceRules: [{verbs: ["*"], apiGroups: ["*"], resources: ["*"], clusterScope: true, namespaces: ["*"]}]
    nonResourceRules: [{verbs: ["*"], nonResourceURLs: ["*"]}]
"#,
    );
    let kc = cp.service_account_kubeconfig("apf-test", "prober");
    let kc = kc.to_string_lossy().into_owned();
    let _hang = hold_a_request(&cp, &cp.token("apf-test", "prober")).await;
    // The FlowSchema is in force once the SA's own requests are rejected.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = control_plane::kubectl_with(kc.as_ref(), &["get", "nodes"], None);
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        if !out.status.success()
            && (err.contains("429") || err.to_lowercase().contains("too many requests"))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the FlowSchema never rejected: {err}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let p = start_with(&kc);
    let deadline = Instant::now() + Duration::from_secs(20);
    let body = loop {
        let (_, body) = get(&p.url("/metrics")).await;
        if counter(
            &body,
            "kube_prober_watch_relists_total",
            &[("reason", "list_failed")],
        ) >= 2.0
        {
            break body;
        }
        assert!(
            Instant::now() < deadline,
            "no failed lists counted:\n{body}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert_eq!(
        get(&p.url("/readyz")).await.0,
        503,
        "not ready while every LIST is refused"
    );
    let rejected = cp.kubectl(&["get", "--raw", "/metrics"]);
    let rejected: f64 = rejected
        .lines()
        .filter(|l| {
            l.starts_with("apiserver_flowcontrol_rejected_requests_total{")
                && l.contains("apf-test-starved")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    eprintln!(
        "429s: the API server rejected {rejected} requests at apf-test-starved; kube-prober counted {} failed lists",
        counter(
            &body,
            "kube_prober_watch_relists_total",
            &[("reason", "list_failed")]
        )
    );
    assert!(rejected >= 2.0, "the API server's own count of rejections");
    cp.kubectl(&["delete", "flowschema", "apf-test-prober"]);
    let nodes: Vec<String> = (0..NODES).map(control_plane::node_name).collect();
    support::wait_ready(&p).await;
    converges_to_fresh(&p, &admin(&cp), &nodes, "after APF let it through").await;
    assert_eq!(p.terminate(), 0);
    cp.kubectl(&["delete", "prioritylevelconfiguration", "apf-test-starved"]);
    cp.kubectl(&["delete", "apiservice", &format!("v1.{HANG_GROUP}")]);
}

/// metrics-server stopped: the usage source fails (`/watcher/health` 503, errors counted), the
/// last good usage stays; restarted: healthy again with fresh samples.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_server_stopped_and_restarted() {
    let cp = cp().lock().await;
    let p = start_with(&admin(&cp));
    support::wait_ready(&p).await;
    support::wait_status(&p, "/watcher/health", 200, 60, "/watcher/health 200").await;
    cp.kill("metrics-server");
    support::wait_status(
        &p,
        "/watcher/health",
        503,
        60,
        "/watcher/health 503 without metrics-server",
    )
    .await;
    let (_, body) = get(&p.url("/metrics")).await;
    let errors = counter(&body, "kube_prober_source_errors_total", &[]);
    assert!(errors >= 1.0, "failed fetches counted:\n{body}");
    let (_, w) = get(&p.url("/watcher")).await;
    assert!(
        w.contains("\"kwok-node-0\""),
        "the last good usage stays while the backend is down: {w}"
    );
    cp.restart("metrics-server");
    support::wait_status(
        &p,
        "/watcher/health",
        200,
        120,
        "/watcher/health 200 again after metrics-server came back",
    )
    .await;
    // The same nodes in /watcher as a fresh instance serves, and the same cluster state.
    let nodes: Vec<String> = (0..NODES).map(control_plane::node_name).collect();
    converges_to_fresh(&p, &admin(&cp), &nodes, "metrics-server back").await;
    let (_, w) = get(&p.url("/watcher")).await;
    let w: kube_prober::watcher::WatcherMetrics = serde_json::from_str(&w).expect("/watcher JSON");
    let served: BTreeSet<&String> = w.data.node_metrics_map.keys().collect();
    assert_eq!(
        served,
        nodes.iter().collect(),
        "/watcher serves exactly the nodes with metrics"
    );
    assert_eq!(p.terminate(), 0);
}

// ---- a request that stays running: an aggregated API that answers discovery only ----

const HANG_GROUP: &str = "hang.kube-prober.test";

/// The body and status for `path` of the hanging API; `None`: never answer.
fn hang_answer(path: &str) -> Option<(u16, String)> {
    let gv = serde_json::json!({"groupVersion": format!("{HANG_GROUP}/v1"), "version": "v1"});
    let group = serde_json::json!({"name": HANG_GROUP, "versions": [gv], "preferredVersion": gv});
    let body = match path {
        "/apis" => {
            serde_json::json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": [group]})
        }
        p if p == format!("/apis/{HANG_GROUP}") => {
            let mut g = group.clone();
            g["kind"] = "APIGroup".into();
            g["apiVersion"] = "v1".into();
            g
        }
        p if p == format!("/apis/{HANG_GROUP}/v1") => serde_json::json!({
            "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": format!("{HANG_GROUP}/v1"),
            "resources": [{"name": "things", "singularName": "thing", "namespaced": true,
                           "kind": "Thing", "verbs": ["get", "list"]}]}),
        p if p.starts_with(&format!("/apis/{HANG_GROUP}/v1/")) => return None,
        _ => return Some((404, "{}".into())),
    };
    Some((200, body.to_string()))
}

/// Serves one TLS connection: each request head read, answered or held forever.
async fn serve_hang(mut tls: tokio_rustls::server::TlsStream<tokio::net::TcpStream>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = Vec::new();
    loop {
        let mut chunk = [0u8; 4096];
        let Ok(n) = tls.read(&mut chunk).await else {
            return;
        };
        if n == 0 {
            return;
        }
        buf.extend_from_slice(&chunk[..n]);
        while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).into_owned();
            buf.drain(..end + 4);
            let path = head.split_whitespace().nth(1).unwrap_or("/");
            let path = path.split('?').next().unwrap_or(path).to_string();
            let Some((status, body)) = hang_answer(&path) else {
                std::future::pending::<()>().await;
                return;
            };
            let reply = format!(
                "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            );
            if tls.write_all(reply.as_bytes()).await.is_err() {
                return;
            }
        }
    }
}

/// Starts the hanging API on 127.0.0.1 (TLS, a certificate made here); returns its port.
async fn start_hanging_api() -> u16 {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let key = rcgen::KeyPair::generate().expect("key");
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
        .expect("params")
        .self_signed(&key)
        .expect("certificate");
    let config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der()).expect("key DER"),
        )
        .expect("TLS config");
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                if let Ok(tls) = acceptor.accept(tcp).await {
                    serve_hang(tls).await;
                }
            });
        }
    });
    port
}

/// Registers the hanging API with the aggregation layer and keeps one GET of it running as the
/// holder of `token` (again each time the API server gives up on it); the task ends with the
/// test's runtime.
async fn hold_a_request(cp: &ControlPlane, token: &str) -> tokio::task::JoinHandle<()> {
    let port = start_hanging_api().await;
    cp.apply(&format!(
        r#"
apiVersion: v1
kind: Service
metadata: {{name: hang-test, namespace: kube-system}}
spec: {{type: ExternalName, externalName: 127.0.0.1, ports: [{{name: https, port: {port}}}]}}
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {{name: v1.{HANG_GROUP}}}
spec:
  service: {{name: hang-test, namespace: kube-system, port: {port}}}
  group: {HANG_GROUP}
  version: v1
  insecureSkipTLSVerify: true
  groupPriorityMinimum: 100
  versionPriority: 100
"#
    ));
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let s = cp.get_json(&["apiservice", &format!("v1.{HANG_GROUP}")]);
        if control_plane::condition(&s, "Available") == Some("True") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the hanging API never turned Available: {}",
            s["status"]
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let client = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(cp.ca_pem().as_bytes()).expect("CA"))
        .no_proxy()
        .build()
        .expect("client");
    let url = format!(
        "{}/apis/{HANG_GROUP}/v1/namespaces/default/things",
        cp.api_url
    );
    let token = token.to_string();
    tokio::spawn(async move {
        loop {
            // Answered only when the API server gives up (its request timeout, 60 s); a 429
            // (another request of the level held the seat) is asked again at once.
            let _ = client.get(&url).bearer_auth(&token).send().await;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
}
