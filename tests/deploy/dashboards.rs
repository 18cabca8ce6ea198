//! Dashboards as files: Grafana dashboards take their data source from a template variable (no
//! hard-coded data source UID anywhere), have `cluster` and `node` variables used by their
//! queries; Cloud Monitoring dashboards (for `gcloud monitoring dashboards create
//! --config-from-file`) filter only on metric types the Cloud Monitoring sink writes
//! (`kube_prober::outputs::families::GKE_PROBER`), on the resource type it writes each on, with label
//! keys that type carries. (Every Grafana query is evaluated on a real Prometheus in
//! tests/deploy/prometheus.rs.)

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use kube_prober::outputs::families::GKE_PROBER;
use serde_json::Value;

fn files(dir: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(dir))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    v.sort();
    v
}

fn load(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Every `datasource` object anywhere in the dashboard.
fn datasources<'a>(v: &'a Value, out: &mut Vec<&'a Value>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                if k == "datasource" {
                    out.push(x);
                }
                datasources(x, out);
            }
        }
        Value::Array(a) => a.iter().for_each(|x| datasources(x, out)),
        _ => {}
    }
}

#[test]
fn grafana_dashboards_use_the_datasource_variable_and_cluster_and_node_variables() {
    let dashboards = files("dashboards/grafana");
    assert_eq!(dashboards.len(), 3);
    let mut uids = BTreeSet::new();
    for p in &dashboards {
        let at = p.file_name().unwrap().to_string_lossy().into_owned();
        let d = load(p);
        assert!(
            uids.insert(d["uid"].as_str().unwrap().to_string()),
            "{at}: unique uid"
        );
        let vars = d["templating"]["list"].as_array().unwrap();
        let var = |n: &str| vars.iter().find(|v| v["name"] == n);
        let ds = var("datasource").unwrap_or_else(|| panic!("{at}: datasource variable"));
        assert_eq!(ds["type"], "datasource");
        assert_eq!(ds["query"], "prometheus");
        let cluster = var("cluster").unwrap_or_else(|| panic!("{at}: cluster variable"));
        assert_eq!(
            cluster["allValue"], ".*",
            "{at}: single-cluster Prometheus has no cluster label"
        );
        let mut all = Vec::new();
        datasources(&d, &mut all);
        assert!(!all.is_empty());
        for x in all {
            assert_eq!(
                x["uid"], "${datasource}",
                "{at}: hard-coded data source {x}"
            );
        }
        let exprs: Vec<&str> = d["panels"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|p| p["targets"].as_array().unwrap())
            .map(|t| t["expr"].as_str().unwrap())
            .collect();
        assert!(!exprs.is_empty());
        for e in &exprs {
            assert!(
                e.contains("cluster=~\"$cluster\""),
                "{at}: query ignores $cluster: {e}"
            );
        }
        if var("node").is_some() {
            assert!(
                exprs.iter().any(|e| e.contains("node=~\"$node\"")),
                "{at}: $node unused"
            );
        } else {
            assert!(
                at.contains("self"),
                "{at}: a node variable (only the self-health board has none)"
            );
        }
        // Panels do not overlap and have titles.
        for p in d["panels"].as_array().unwrap() {
            assert!(p["title"].as_str().is_some_and(|t| !t.is_empty()), "{at}");
        }
    }
}

/// gke-prober's metric types as the Cloud Monitoring sink writes them, with the resource type
/// and metric label keys of each.
fn written() -> Vec<(String, &'static str, BTreeSet<&'static str>)> {
    GKE_PROBER
        .iter()
        .map(|m| {
            let resource = if m.suffix == "addon/restart" {
                "k8s_pod"
            } else if m.suffix.starts_with("cluster/") {
                "k8s_cluster"
            } else {
                "k8s_node"
            };
            (
                format!("workload.googleapis.com/kube-prober/{}", m.suffix),
                resource,
                m.labels.iter().map(|(k, _)| *k).collect(),
            )
        })
        .collect()
}

fn resource_labels(resource: &str) -> &'static [&'static str] {
    match resource {
        "k8s_cluster" => &["project_id", "location", "cluster_name"],
        "k8s_node" => &["project_id", "location", "cluster_name", "node_name"],
        "k8s_pod" => &[
            "project_id",
            "location",
            "cluster_name",
            "namespace_name",
            "pod_name",
        ],
        other => panic!("{other}"),
    }
}

/// `key="value"` / `key!="value"` terms of a monitoring filter.
fn terms(filter: &str) -> Vec<(String, String)> {
    filter
        .split_whitespace()
        .filter(|t| *t != "AND")
        .map(|t| {
            let (k, v) = t
                .split_once('=')
                .unwrap_or_else(|| panic!("term {t} in {filter}"));
            (
                k.trim_end_matches('!').to_string(),
                v.trim_matches('"').to_string(),
            )
        })
        .collect()
}

fn queries<'a>(v: &'a Value, out: &mut Vec<&'a Value>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                if k == "timeSeriesFilter" {
                    out.push(x);
                }
                queries(x, out);
            }
        }
        Value::Array(a) => a.iter().for_each(|x| queries(x, out)),
        _ => {}
    }
}

#[test]
fn cloud_monitoring_dashboards_filter_only_on_types_we_write() {
    let written = written();
    let dashboards = files("dashboards/cloud-monitoring");
    assert!(dashboards.len() >= 2);
    let mut used = BTreeSet::new();
    for p in &dashboards {
        let at = p.file_name().unwrap().to_string_lossy().into_owned();
        let d = load(p);
        assert!(
            d["displayName"].as_str().is_some_and(|s| !s.is_empty()),
            "{at}"
        );
        assert!(
            d["mosaicLayout"]["tiles"]
                .as_array()
                .is_some_and(|t| !t.is_empty()),
            "{at}"
        );
        let mut filters = Vec::new();
        queries(&d, &mut filters);
        assert!(!filters.is_empty(), "{at}");
        for f in filters {
            let filter = f["filter"].as_str().unwrap();
            let t = terms(filter);
            let get = |k: &str| t.iter().find(|(x, _)| x == k).map(|(_, v)| v.as_str());
            let ty =
                get("metric.type").unwrap_or_else(|| panic!("{at}: no metric.type in {filter}"));
            let (_, resource, labels) =
                written.iter().find(|(w, _, _)| w == ty).unwrap_or_else(|| {
                    panic!("{at}: {ty} is not a type the Cloud Monitoring sink writes")
                });
            assert_eq!(get("resource.type"), Some(*resource), "{at}: {filter}");
            let mut keys: Vec<String> = t.iter().map(|(k, _)| k.clone()).collect();
            keys.extend(
                f["aggregation"]["groupByFields"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|g| g.as_str().unwrap().to_string()),
            );
            for k in keys {
                if let Some(l) = k.strip_prefix("metric.label.") {
                    assert!(labels.contains(l), "{at}: {ty} has no label {l}");
                } else if let Some(l) = k.strip_prefix("resource.label.") {
                    assert!(
                        resource_labels(resource).contains(&l),
                        "{at}: {resource} has no label {l}"
                    );
                } else {
                    assert!(k == "metric.type" || k == "resource.type", "{at}: {k}");
                }
            }
            used.insert(ty.to_string());
        }
    }
    // Every type we write appears on some dashboard.
    for (w, _, _) in &written {
        assert!(used.contains(w), "{w} is on no Cloud Monitoring dashboard");
    }
}

#[test]
fn the_checker_rejects_a_type_we_do_not_write() {
    // gke-prober's own performance dashboard queried custom.googleapis.com/.../go_memstats_*,
    // which nothing writes any more; such a filter must not pass.
    let t = terms(
        r#"metric.type="custom.googleapis.com/kube-prober/go_memstats_heap_objects" resource.type="k8s_container""#,
    );
    assert!(!written().iter().any(|(w, _, _)| *w == t[0].1));
    assert_eq!(t[1], ("resource.type".into(), "k8s_container".into()));
}
