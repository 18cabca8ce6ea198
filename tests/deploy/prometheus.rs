//! Every dashboard query and every alert expression, evaluated on a real Prometheus (Debian's
//! `prometheus`) scraping kube-prober: the cluster role (two replicas with the `otlp` overlay's
//! args, so leader election and a failing sink are live) and the node role against the stand-in
//! API server, and the host role (with an unreachable Prometheus backend, so a source fails),
//! plus one dead target. The stand-in cluster has a NotReady node, a cordoned node and an addon
//! pod that is not ready after 5 restarts (support::deploy::populate).
//!
//! The checks are support/dashboards.rs'. `$cluster` = the `cluster` target label given to
//! every target, as a multi-cluster Prometheus adds; `$job` = both jobs, as the variable's "All";
//! `$node` = two nodes, the NotReady one first.
//! Alert expressions that return nothing in this scenario (the condition does not hold: no stale
//! source, a leader is elected, no recent restarts) are checked on their query part.

use support::apiserver;
use support::dashboards;
use support::deploy;
use support::prom;

use std::time::Duration;

use deploy::{Downward, name, namespace};
use serde_json::Value;

const CLUSTER: &str = "test";
/// The two scrape jobs below, as the `job` variable's "All" gives them.
const JOBS: &str = "(kube-prober|kube-system/kube-prober-node)";

fn start_role(
    w: &Value,
    kubeconfig: &str,
    replica: usize,
    node: &str,
    extra: &[(&str, &str)],
) -> support::Prober {
    let downward = Downward {
        pod_name: format!("{}-{replica}", name(w)),
        pod_namespace: namespace(w).to_string(),
        node_name: node.to_string(),
        host_ip: "127.0.0.1".into(),
    };
    let (args, mut env, _) =
        deploy::local_pod_command(w, &downward, std::path::Path::new(kubeconfig));
    for (k, v) in extra {
        env.push((k.to_string(), v.to_string()));
    }
    deploy::spawn(&args, &env)
}

const FAST: &[(&str, &str)] = &[
    ("KUBE_PROBER_TICK_INTERVAL", "1s"),
    ("KUBE_PROBER_INTERVAL", "1s"),
    ("KUBE_PROBER_TIMEOUT", "1s"),
    ("KUBE_PROBER_PROBE_INTERVAL", "1s"),
    ("KUBE_PROBER_PROBE_TIMEOUT", "1s"),
    ("KUBE_PROBER_SINK_INTERVAL", "2s"),
    ("KUBE_PROBER_SINK_TIMEOUT", "1s"),
    ("KUBE_PROBER_LEADER_ELECT_RETRY_PERIOD", "500ms"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_dashboard_query_and_alert_expression_returns_data_on_a_real_prometheus() {
    let api = apiserver::start().await;
    let nodes = deploy::populate(&api);
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    api.write_kubeconfig(&kc).unwrap();
    let kc = kc.to_string_lossy().into_owned();

    let objs = deploy::render("otlp");
    let workloads = deploy::workloads(&objs);
    let deployment = workloads
        .iter()
        .find(|w| deploy::kind(w) == "Deployment")
        .unwrap();
    let daemonset = workloads
        .iter()
        .find(|w| deploy::kind(w) == "DaemonSet")
        .unwrap();
    let cluster: Vec<support::Prober> = (0..2)
        .map(|i| start_role(deployment, &kc, i, &nodes[0], FAST))
        .collect();
    let node = start_role(daemonset, &kc, 0, &nodes[0], FAST);
    let host = deploy::spawn(
        &[
            "--role=host",
            "--listen=127.0.0.1:0",
            "--log-format=json",
            "--tick-interval=1s",
            "--metrics-provider=Prometheus",
            "--metrics-provider-address=http://127.0.0.1:9",
            "--interval=1s",
            "--timeout=1s",
        ]
        .map(String::from),
        &[],
    );
    let targets: Vec<String> = cluster
        .iter()
        .map(|p| p.addr.clone())
        .chain([host.addr.clone(), "127.0.0.1:9".into()])
        .collect();
    let quoted = |t: &[String]| {
        t.iter()
            .map(|a| format!("'{a}'"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let scrape = format!(
        "  - job_name: kube-prober\n    static_configs:\n      - targets: [{}]\n        labels: {{cluster: {CLUSTER}}}\n  - job_name: kube-system/kube-prober-node\n    static_configs:\n      - targets: ['{}']\n        labels: {{cluster: {CLUSTER}}}\n",
        quoted(&targets),
        node.addr
    );
    let rules = dashboards::alerts_file();
    let prometheus = prom::ScrapingPrometheus::start(&scrape, &[rules.as_path()]);

    let selected = format!("({}|{})", nodes[0], nodes[1]);
    let vars = dashboards::Vars {
        cluster: CLUSTER,
        job: JOBS,
        node: &selected,
    };
    let queries = dashboards::dashboard_queries(&vars);
    let alerts = dashboards::alert_rules();
    // rate() needs two scrapes; sinks push every 2 s.
    let alert_report = dashboards::wait_every_query_and_alert(
        &prometheus,
        &queries,
        &alerts,
        &[],
        Duration::from_secs(15),
        Duration::from_secs(60),
    );
    // The rules Prometheus loaded evaluate without error.
    dashboards::wait_rules_healthy(&prometheus, alerts.len(), Duration::from_secs(20));
    eprintln!(
        "{} dashboard queries returned data; alerts:\n{}",
        queries.len(),
        alert_report.join("\n")
    );
    // The `job` variable finds exactly the two jobs that scrape kube-prober (so `JOBS` is its
    // "All"), not the dead target's.
    let (_, job_query) = queries
        .iter()
        .find(|(at, _)| at.ends_with("variable \"job\""))
        .expect("a job variable");
    let jobs = prometheus.try_query(job_query).unwrap();
    let mut found: Vec<&str> = jobs
        .iter()
        .filter_map(|(labels, _)| labels.get("job").map(String::as_str))
        .collect();
    found.sort();
    assert_eq!(found, ["kube-prober", "kube-system/kube-prober-node"]);
    // The scenario's faults show where they should.
    let not_ready = prometheus
        .try_query(&dashboards::substitute(
            "max by (node) (kube_prober_node_condition{condition=\"Ready\", status!=\"True\"}) == 1",
            &vars,
        ))
        .unwrap();
    assert_eq!(not_ready.len(), 1);
    assert_eq!(not_ready[0].0.get("node"), Some(&nodes[0]));
    drop(cluster);
    drop(node);
    drop(host);
}

#[test]
fn query_part_strips_the_final_comparison() {
    assert_eq!(
        dashboards::query_part("sum by (lease) (kube_prober_leader) < 1").as_deref(),
        Some("sum by (lease) (kube_prober_leader)")
    );
    assert_eq!(
        dashboards::query_part("a / b\n  > 0.5\n").as_deref(),
        Some("a / b")
    );
    assert_eq!(dashboards::query_part("a < b"), None);
    assert_eq!(
        dashboards::label_values_query("label_values(kube_prober_build_info, cluster)"),
        "group by (cluster) (kube_prober_build_info)"
    );
}
