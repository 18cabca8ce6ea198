//! `--pod-scope`: the cluster role with `workloads` (or `none`) plus a node-role process on every
//! node serves the same per-node series as the cluster role alone with `all` (today's
//! deployment), each series once in value; the narrowed cluster role watches only the workload
//! namespaces' pods (or none). Binaries against the stand-in API server with a generated
//! GKE-like cluster (addon DaemonSets in kube-system, application pods in `team-*` namespaces).

use support::apiserver;

use std::collections::{BTreeMap, BTreeSet};

use support::{Prober, run_binary, wait_ready};

const NODES: usize = 3;
const PODS_PER_NODE: usize = 8;

/// Families derived from pods and nodes that carry one node's data: what the node role can
/// serve for its own node. Cluster-wide counts (`kube_prober_cluster_*`,
/// `kube_prober_addon_expected_pods`) are the cluster role's alone and are compared apart.
const PER_NODE: &[&str] = &[
    "kube_prober_node_condition",
    "kube_prober_node_available",
    "kube_prober_node_addons_available",
    "kube_prober_node_allocatable_cpu_cores",
    "kube_prober_node_allocatable_memory_bytes",
    "kube_prober_node_pod_requests_cpu_cores",
    "kube_prober_node_pod_requests_memory_bytes",
    "kube_prober_node_pod_limits_cpu_cores",
    "kube_prober_node_pod_limits_memory_bytes",
    "kube_prober_node_pods",
    "kube_prober_addon_pods",
    "kube_prober_addon_ready_pods",
    "kube_prober_addon_available",
    "kube_prober_container_restarts_total",
    "kube_prober_container_last_termination",
];

const POD_SUMS: &[&str] = &[
    "kube_prober_node_pod_requests_cpu_cores",
    "kube_prober_node_pod_requests_memory_bytes",
    "kube_prober_node_pod_limits_cpu_cores",
    "kube_prober_node_pod_limits_memory_bytes",
    "kube_prober_node_pods",
];

const CLUSTER_WIDE: &[&str] = &[
    "kube_prober_cluster_nodes",
    "kube_prober_cluster_node_conditions",
    "kube_prober_addon_expected_pods",
];

fn family(line: &str) -> &str {
    line.split(['{', ' ']).next().unwrap_or_default()
}

/// Series (name and labels) -> value, of the given families.
fn series(body: &str, families: &[&str]) -> BTreeMap<String, String> {
    body.lines()
        .filter(|l| !l.starts_with('#') && families.contains(&family(l)))
        .filter_map(|l| l.rsplit_once(' '))
        .map(|(s, v)| (s.to_string(), v.to_string()))
        .collect()
}

fn start(kubeconfig: &str, args: &[&str], node: Option<&str>) -> Prober {
    let mut env = vec![("KUBECONFIG", kubeconfig)];
    if let Some(n) = node {
        env.push(("NODE_NAME", n));
    }
    Prober::start_with_env(args, &env)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn narrowed_cluster_role_plus_node_roles_serve_todays_per_node_series() {
    let api = apiserver::start().await;
    let made = api.generate(NODES, PODS_PER_NODE);
    assert_eq!(made.nodes, NODES);
    assert!(made.namespaces >= 2, "kube-system and team namespaces");
    let nodes: Vec<String> = api
        .objects::<k8s_openapi::api::core::v1::Node>()
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    assert_eq!(nodes.len(), NODES);
    let dir = tempfile::tempdir().unwrap();
    let kc_path = dir.path().join("kubeconfig");
    api.write_kubeconfig(&kc_path).unwrap();
    let kc = kc_path.to_string_lossy().into_owned();
    let cgroup = dir.path().join("cgroup");
    std::fs::create_dir_all(&cgroup).unwrap();
    let cgroup = cgroup.to_string_lossy().into_owned();

    let cluster_args = |scope: &'static str| {
        vec![
            "--role",
            "cluster",
            "--tick-interval",
            "1s",
            "--disable-probes",
            "cluster_dns,metrics_server,apiserver_readyz",
            "--pod-scope",
            scope,
        ]
    };
    let every_node = |fams: &'static [&'static str]| {
        let nodes = nodes.clone();
        move |b: &str| {
            nodes.iter().all(|n| {
                fams.iter()
                    .all(|f| b.contains(&format!("{f}{{node=\"{n}\"")))
            })
        }
    };

    // Today: the cluster role alone, every pod watched.
    let today = start(&kc, &cluster_args("all"), None);
    wait_ready(&today).await;
    let today_body =
        support::wait_metrics(&today, "all: every node's pod sums", every_node(POD_SUMS)).await;
    let want = series(&today_body, PER_NODE);
    assert_eq!(
        want.keys()
            .filter(|k| family(k) == "kube_prober_node_pods")
            .count(),
        NODES
    );

    // The node role on every node.
    let mut node_bodies = Vec::new();
    let mut node_probers = Vec::new();
    for n in &nodes {
        let p = start(
            &kc,
            &[
                "--role",
                "node",
                "--tick-interval",
                "1s",
                "--cgroup-root",
                &cgroup,
                "--disable-probes",
                "kubelet_healthz,gce_metadata",
            ],
            Some(n),
        );
        node_probers.push(p);
    }
    for (n, p) in nodes.iter().zip(&node_probers) {
        wait_ready(p).await;
        let mine = format!("kube_prober_node_pods{{node=\"{n}\"}}");
        let body = support::wait_metrics(p, "node role: its pod sums", |b| b.contains(&mine)).await;
        let s = series(&body, PER_NODE);
        assert!(
            s.keys()
                .all(|k| !k.contains("node=\"") || k.contains(&format!("node=\"{n}\""))),
            "a node role serves its own node only: {s:?}"
        );
        node_bodies.push(s);
    }

    for scope in ["workloads", "none"] {
        api.clear_requests();
        let narrowed = start(&kc, &cluster_args(scope), None);
        wait_ready(&narrowed).await;
        let body = support::wait_metrics(
            &narrowed,
            scope,
            every_node(&["kube_prober_node_available"]),
        )
        .await;
        let mine = series(&body, PER_NODE);
        assert!(
            mine.keys().all(|k| !POD_SUMS.contains(&family(k))),
            "{scope}: no per-node pod sums from some of a node's pods: {mine:?}"
        );
        assert_eq!(
            series(&body, CLUSTER_WIDE),
            series(&today_body, CLUSTER_WIDE),
            "{scope}: the cluster-wide series are unchanged"
        );
        // The union, each series with one value wherever it is served.
        let mut union: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for s in std::iter::once(&mine).chain(&node_bodies) {
            for (k, v) in s {
                union.entry(k.clone()).or_default().insert(v.clone());
            }
        }
        let conflicts: Vec<_> = union.iter().filter(|(_, v)| v.len() > 1).collect();
        assert!(
            conflicts.is_empty(),
            "{scope}: one series, two values: {conflicts:?}"
        );
        let union: BTreeMap<String, String> = union
            .into_iter()
            .filter_map(|(k, v)| v.into_iter().next().map(|v| (k, v)))
            .collect();
        let missing: Vec<_> = want
            .iter()
            .filter(|(k, v)| union.get(*k) != Some(v))
            .collect();
        let extra: Vec<_> = union
            .iter()
            .filter(|(k, _)| !want.contains_key(*k))
            .collect();
        assert!(
            missing.is_empty() && extra.is_empty(),
            "{scope}: cluster role + node roles = today; missing or different {missing:?}, extra {extra:?}"
        );

        // What it asked the API server for.
        let pod_paths: BTreeSet<String> = api
            .requests()
            .iter()
            .filter(|r| r.path.ends_with("/pods"))
            .map(|r| r.path.clone())
            .collect();
        match scope {
            "workloads" => assert_eq!(
                pod_paths,
                BTreeSet::from(["/api/v1/namespaces/kube-system/pods".to_string()]),
                "workloads: only the workload namespaces' pods"
            ),
            _ => assert!(pod_paths.is_empty(), "none: no pods at all: {pod_paths:?}"),
        }
        assert_eq!(narrowed.terminate(), 0);
    }
    for p in node_probers {
        assert_eq!(p.terminate(), 0);
    }
    assert_eq!(today.terminate(), 0);
}

#[test]
fn a_bad_pod_scope_is_a_configuration_error() {
    for bad in ["some", ""] {
        let (code, err) = run_binary(
            &["--role", "cluster", "--pod-scope", bad],
            &[("KUBECONFIG", "/nonexistent/kubeconfig")],
        );
        assert_eq!(code, 2, "{bad:?}: {err}");
        assert!(err.contains("--pod-scope"), "{err}");
        assert!(err.contains("all, workloads, bound or none"), "{err}");
    }
    let (code, err) = run_binary(
        &["--role", "cluster"],
        &[
            ("KUBECONFIG", "/nonexistent/kubeconfig"),
            ("KUBE_PROBER_POD_SCOPE", "bogus"),
        ],
    );
    assert_eq!(code, 2, "from the environment too: {err}");
    assert!(err.contains("--pod-scope"), "{err}");
}
