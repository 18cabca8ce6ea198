//! Every dashboard query and every alert expression, evaluated on a real Prometheus (Debian's
//! `prometheus`) scraping kube-prober: the cluster role (two replicas with the `otlp` overlay's
//! args, so leader election and a failing sink are live) and the node role against the stand-in
//! API server, and the host role (with an unreachable Prometheus backend, so a source fails),
//! plus one dead target. The stand-in cluster has a NotReady node, a cordoned node and an addon
//! pod that is not ready after 5 restarts (deploy_support::populate).
//!
//! Template variables are substituted as Grafana would (`$cluster` = the `cluster` target label
//! given to every target, as a multi-cluster Prometheus adds; `$node` = the NotReady node;
//! `$__rate_interval` = 1m), and every query must parse and return data. Alert expressions that
//! return nothing in this scenario (the condition does not hold: no stale source, a leader is
//! elected, no recent restarts) are checked on their query part (the expression without its
//! final comparison), which must return data; the test prints which alert was checked how.

#[path = "support/apiserver.rs"]
mod apiserver;
#[path = "deploy_support/mod.rs"]
mod deploy;
#[path = "support/prom.rs"]
mod prom;
mod support;

use std::time::{Duration, Instant};

use deploy::{Downward, name, namespace};
use serde_json::Value;

const CLUSTER: &str = "test";

fn substitute(expr: &str, node: &str) -> String {
    expr.replace("$__rate_interval", "1m")
        .replace("${cluster}", CLUSTER)
        .replace("$cluster", CLUSTER)
        .replace("${node}", node)
        .replace("$node", node)
}

/// `label_values(METRIC_SELECTOR, LABEL)` as a PromQL query with the same answer set.
fn label_values_query(q: &str) -> String {
    let inner = q
        .trim()
        .strip_prefix("label_values(")
        .and_then(|s| s.strip_suffix(')'))
        .unwrap_or_else(|| panic!("unsupported variable query {q}"));
    let (selector, label) = inner
        .rsplit_once(',')
        .expect("label_values(selector, label)");
    format!("group by ({}) ({})", label.trim(), selector.trim())
}

/// The expression without its final comparison against a number (`... > 300` -> `...`).
fn query_part(expr: &str) -> Option<String> {
    let e = expr.trim();
    for op in ["==", "!=", ">=", "<=", ">", "<"] {
        if let Some((left, right)) = e.rsplit_once(op)
            && right.trim().parse::<f64>().is_ok()
        {
            return Some(left.trim().to_string());
        }
    }
    None
}

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
    let (mut args, mut env) = deploy::container_command(w, &downward);
    deploy::local_listen(&mut args);
    // The container's hostPath mounts (/host/proc, /host/sys) are this machine's paths.
    deploy::outside_container(&mut args, &deploy::host_mounts(w));
    deploy::without_collector(&mut env);
    env.push(("KUBECONFIG".into(), kubeconfig.into()));
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

/// Every panel target and variable query of a Grafana dashboard: (where, PromQL).
fn grafana_queries(path: &std::path::Path, node: &str) -> Vec<(String, String)> {
    let d: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let file = path.file_name().unwrap().to_string_lossy().into_owned();
    let mut out = Vec::new();
    for v in d["templating"]["list"].as_array().unwrap() {
        if v["type"] == "query" {
            let q = v["query"]["query"]
                .as_str()
                .or(v["query"].as_str())
                .unwrap();
            out.push((
                format!("{file} variable {}", v["name"]),
                substitute(&label_values_query(q), node),
            ));
        }
    }
    for p in d["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().unwrap() {
            out.push((
                format!(
                    "{file} panel {:?} {}",
                    p["title"].as_str().unwrap(),
                    t["refId"].as_str().unwrap()
                ),
                substitute(t["expr"].as_str().unwrap(), node),
            ));
        }
    }
    out
}

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
    let rules = deploy::repo().join("dashboards/alerts.yaml");
    let prometheus = prom::ScrapingPrometheus::start(&scrape, &[rules.as_path()]);

    let mut queries: Vec<(String, String)> = Vec::new();
    let selected = format!("({}|{})", nodes[0], nodes[1]);
    let mut files: Vec<_> = std::fs::read_dir(deploy::repo().join("dashboards/grafana"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert_eq!(files.len(), 3, "three Grafana dashboards");
    for f in &files {
        queries.extend(grafana_queries(f, &selected));
    }
    let alert_rules: Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(&rules).unwrap()).unwrap();
    let alerts: Vec<(String, String)> = alert_rules["groups"][0]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["alert"].as_str().unwrap().to_string(),
                r["expr"].as_str().unwrap().to_string(),
            )
        })
        .collect();

    // Poll until every query answers (rate() needs two scrapes; sinks push every 2 s).
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut pending: Vec<(String, String)> = queries.clone();
    let mut alert_pending: Vec<(String, String)> = alerts.clone();
    let mut alert_report = Vec::new();
    loop {
        let mut still = Vec::new();
        for (at, q) in pending {
            match prometheus.try_query(&q) {
                Ok(s) if !s.is_empty() => {}
                Ok(_) => still.push((at, q)),
                Err(e) if e.contains("bad_data") => panic!("{at}: `{q}` does not parse: {e}"),
                Err(_) => still.push((at, q)),
            }
        }
        pending = still;
        let mut still = Vec::new();
        for (alert, expr) in alert_pending {
            match prometheus.try_query(&expr) {
                Ok(s) if !s.is_empty() => alert_report.push(format!(
                    "{alert}: expression returns {} series (would fire after `for`)",
                    s.len()
                )),
                Err(e) if e.contains("bad_data") => panic!("{alert}: `{expr}` does not parse: {e}"),
                _ => {
                    let part = query_part(&expr).unwrap_or_else(|| expr.clone());
                    let got = prometheus.try_query(&part).map(|s| s.len()).unwrap_or(0);
                    // Give the firing form a few seconds first (rates need data).
                    if got > 0 && Instant::now() + Duration::from_secs(45) > deadline {
                        alert_report.push(format!(
                            "{alert}: condition false here; query part `{}` returns {got} series",
                            part.replace('\n', " ")
                        ));
                    } else {
                        still.push((alert, expr));
                    }
                }
            }
        }
        alert_pending = still;
        if pending.is_empty() && alert_pending.is_empty() {
            break;
        }
        if Instant::now() > deadline {
            panic!(
                "queries with no data after 60 s:\n{}\nalerts with no data in expression or query part:\n{}\n{}",
                pending
                    .iter()
                    .map(|(a, q)| format!("{a}: {q}"))
                    .collect::<Vec<_>>()
                    .join("\n"),
                alert_pending
                    .iter()
                    .map(|(a, q)| format!("{a}: {q}"))
                    .collect::<Vec<_>>()
                    .join("\n"),
                prometheus.diagnostics()
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // The rules Prometheus loaded evaluate without error.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (_, body) = prometheus.get("/api/v1/rules").unwrap();
        let v: Value = serde_json::from_str(&body).unwrap();
        let rules: Vec<&Value> = v["data"]["groups"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|g| g["rules"].as_array().unwrap())
            .collect();
        assert_eq!(rules.len(), alerts.len(), "{body}");
        let bad: Vec<String> = rules
            .iter()
            .filter(|r| r["health"] != "ok")
            .map(|r| format!("{} {} {}", r["name"], r["health"], r["lastError"]))
            .collect();
        if bad.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "rules not healthy: {bad:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    alert_report.sort();
    eprintln!(
        "{} dashboard queries returned data; alerts:\n{}",
        queries.len(),
        alert_report.join("\n")
    );
    // The scenario's faults show where they should.
    let not_ready = prometheus.try_query(&substitute("max by (node) (kube_prober_node_condition{condition=\"Ready\", status!=\"True\"}) == 1", "")).unwrap();
    assert_eq!(not_ready.len(), 1);
    assert_eq!(not_ready[0].0.get("node"), Some(&nodes[0]));
    drop(cluster);
    drop(node);
    drop(host);
}

#[test]
fn query_part_strips_the_final_comparison() {
    assert_eq!(
        query_part("sum by (lease) (kube_prober_leader) < 1").as_deref(),
        Some("sum by (lease) (kube_prober_leader)")
    );
    assert_eq!(query_part("a / b\n  > 0.5\n").as_deref(), Some("a / b"));
    assert_eq!(query_part("a < b"), None);
    assert_eq!(
        label_values_query("label_values(kube_prober_build_info, cluster)"),
        "group by (cluster) (kube_prober_build_info)"
    );
}
