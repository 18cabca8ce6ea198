//! Dashboards as files. Grafana dashboards (generated from the mixin, tests/deploy/mixin.rs) take
//! their data source from a template variable (no hard-coded data source UID anywhere) and, as
//! mixins' dashboards do, filter every selector on `job` and `cluster` variables and take every
//! range as `$__rate_interval`; a `node` variable where nodes are shown. The chart and the
//! `grafana-dashboards` kustomize component carry copies of them (Helm and kustomize read only
//! files inside their own folders), equal to them.
//! Cloud Monitoring dashboards (for `gcloud monitoring dashboards create --config-from-file`)
//! filter only on metric types the Cloud Monitoring sink writes
//! (`kube_prober::outputs::families::GKE_PROBER`), on the resource type it writes each on, with
//! label keys that type carries. (Every Grafana query is evaluated on a real Prometheus in
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

/// One vector selector of a PromQL expression: its metric name (empty for a bare `{...}`) and
/// its label matchers as written.
#[derive(Debug, PartialEq)]
struct Selector {
    metric: String,
    matchers: Vec<String>,
}

/// Words that are no metric name where they stand: the ones followed by a label list, then the
/// operators and modifiers written as words.
const LABEL_LISTS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];
const KEYWORDS: &[&str] = &["and", "or", "unless", "bool", "offset"];

/// The index just past the string literal opening at `i`.
fn skip_string(b: &[u8], i: usize) -> usize {
    let quote = b[i];
    let mut j = i + 1;
    while j < b.len() && b[j] != quote {
        j += if b[j] == b'\\' { 2 } else { 1 };
    }
    j + 1
}

/// The text between the bracket opening at `i` and its closing `close` (strings skipped), and
/// the index past it.
fn enclosed(e: &str, i: usize, close: u8) -> (&str, usize) {
    let b = e.as_bytes();
    let mut j = i + 1;
    while j < b.len() && b[j] != close {
        j = if b[j] == b'"' {
            skip_string(b, j)
        } else {
            j + 1
        };
    }
    (&e[i + 1..j.min(b.len())], j + 1)
}

/// Label matchers, split at the commas outside their strings.
fn matchers(inside: &str) -> Vec<String> {
    let b = inside.as_bytes();
    let (mut out, mut from, mut j) = (Vec::new(), 0, 0);
    while j < b.len() {
        match b[j] {
            b'"' => j = skip_string(b, j),
            b',' => {
                out.push(inside[from..j].trim().to_string());
                j += 1;
                from = j;
            }
            _ => j += 1,
        }
    }
    out.push(inside[from.min(b.len())..].trim().to_string());
    out.retain(|m| !m.is_empty());
    out
}

/// Every vector selector of a PromQL expression and every range (`[...]`) in it.
fn parse_promql(e: &str) -> (Vec<Selector>, Vec<String>) {
    let b = e.as_bytes();
    let (mut selectors, mut ranges, mut i) = (Vec::new(), Vec::new(), 0);
    let word = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b':';
    while i < b.len() {
        let c = b[i];
        if c == b'"' || c == b'\'' {
            i = skip_string(b, i);
        } else if c.is_ascii_digit() || c == b'.' {
            while i < b.len() && (word(b[i]) || b[i] == b'.') {
                i += 1;
            }
        } else if c == b'[' {
            let (inside, next) = enclosed(e, i, b']');
            ranges.push(inside.to_string());
            i = next;
        } else if c == b'{' {
            let (inside, next) = enclosed(e, i, b'}');
            selectors.push(Selector {
                metric: String::new(),
                matchers: matchers(inside),
            });
            i = next;
        } else if word(c) {
            let start = i;
            while i < b.len() && word(b[i]) {
                i += 1;
            }
            let name = &e[start..i];
            let mut j = i;
            while j < b.len() && b[j].is_ascii_whitespace() {
                j += 1;
            }
            let next = b.get(j).copied();
            // `sum by (...) (...)`: an aggregation whose grouping comes first.
            let grouped = ["by", "without"]
                .iter()
                .any(|g| e[j..].starts_with(g) && !b.get(j + g.len()).copied().is_some_and(word));
            if LABEL_LISTS.contains(&name) && next == Some(b'(') {
                i = enclosed(e, j, b')').1;
            } else if next == Some(b'(')
                || grouped
                || KEYWORDS.contains(&name)
                || LABEL_LISTS.contains(&name)
            {
                // A function, an aggregation, an operator.
            } else if next == Some(b'{') {
                let (inside, after) = enclosed(e, j, b'}');
                selectors.push(Selector {
                    metric: name.to_string(),
                    matchers: matchers(inside),
                });
                i = after;
            } else {
                selectors.push(Selector {
                    metric: name.to_string(),
                    matchers: Vec::new(),
                });
            }
        } else {
            i += 1;
        }
    }
    (selectors, ranges)
}

const CLUSTER: &str = r#"cluster=~"$cluster""#;
const JOB: &str = r#"job=~"$job""#;

/// What the mixins' dashboards hold to and `expr` does not: every selector filters on
/// `job=~"$job"` and `cluster=~"$cluster"` (every series Prometheus scrapes has a `job`; a
/// missing `cluster` label matches the variable's "All", `.*`), every range is
/// `[$__rate_interval]`.
fn problems(expr: &str) -> Vec<String> {
    let (selectors, ranges) = parse_promql(expr);
    let mut out = Vec::new();
    if selectors.is_empty() {
        out.push(format!("no selector in `{expr}`"));
    }
    for s in &selectors {
        for want in [CLUSTER, JOB] {
            if !s.matchers.iter().any(|m| m == want) {
                out.push(format!("{}{:?} lacks {want}", s.metric, s.matchers));
            }
        }
    }
    for r in ranges {
        if r != "$__rate_interval" {
            out.push(format!("range [{r}] is not [$__rate_interval]"));
        }
    }
    out
}

#[test]
fn the_query_checker_finds_selectors_ranges_and_what_they_lack() {
    let good = r#"histogram_quantile(0.9, sum by (probe, le) (rate(kube_prober_probe_duration_seconds_bucket{cluster=~"$cluster", job=~"$job"}[$__rate_interval]))) * 3600 > bool 0.5"#;
    let (selectors, ranges) = parse_promql(good);
    assert_eq!(
        selectors,
        [Selector {
            metric: "kube_prober_probe_duration_seconds_bucket".into(),
            matchers: vec![CLUSTER.into(), JOB.into()],
        }]
    );
    assert_eq!(ranges, ["$__rate_interval"]);
    assert_eq!(problems(good), Vec::<String>::new());
    // A selector without `job`, one without any matcher (the operand of `or` and `on (node)`
    // are no metric names), a fixed range, a comma inside a matcher's value.
    let bad = r#"sum(increase(kube_prober_a{cluster=~"$cluster", reason=~"x,y"}[1h])) / on (node) group_left kube_prober_b or time()"#;
    let (selectors, _) = parse_promql(bad);
    assert_eq!(
        selectors
            .iter()
            .map(|s| (s.metric.as_str(), s.matchers.len()))
            .collect::<Vec<_>>(),
        [("kube_prober_a", 2), ("kube_prober_b", 0)]
    );
    assert_eq!(
        problems(bad),
        [
            r#"kube_prober_a["cluster=~\"$cluster\"", "reason=~\"x,y\""] lacks job=~"$job""#,
            r#"kube_prober_b[] lacks cluster=~"$cluster""#,
            r#"kube_prober_b[] lacks job=~"$job""#,
            "range [1h] is not [$__rate_interval]",
        ]
    );
}

/// The `$name` and `${name}` variables a query refers to.
fn variables_used(q: &str) -> BTreeSet<String> {
    q.split('$')
        .skip(1)
        .map(|rest| {
            rest.trim_start_matches('{')
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect()
        })
        .collect()
}

/// Checks one dashboard's template variables; returns the queries of its query variables.
fn check_variables(at: &str, d: &Value) -> Vec<(String, String)> {
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
    let job = var("job").unwrap_or_else(|| panic!("{at}: job variable"));
    assert_eq!(job["includeAll"], true, "{at}");
    assert!(
        job["allValue"].as_str().unwrap_or_default().is_empty(),
        "{at}: the job variable's All must be the jobs it finds, not a regex of every job"
    );
    let mut defined = BTreeSet::new();
    let mut queries = Vec::new();
    for v in vars {
        let name = v["name"].as_str().unwrap().to_string();
        if v["type"] == "query" {
            let q = v["query"]["query"].as_str().unwrap();
            assert_eq!(v["definition"], q, "{at}: variable {name}");
            let used = variables_used(q);
            assert!(
                used.is_subset(&defined),
                "{at}: variable {name} uses {used:?}, defined before it: {defined:?}"
            );
            let (label, promql) = q
                .strip_prefix("label_values(")
                .and_then(|s| s.strip_suffix(')'))
                .and_then(|s| s.rsplit_once(','))
                .map(|(sel, label)| (label.trim(), sel))
                .unwrap_or_else(|| panic!("{at}: variable {name}: {q}"));
            assert_eq!(label, name, "{at}: variable {name} lists {label}");
            queries.push((format!("variable {name}"), promql.to_string()));
        }
        defined.insert(name);
    }
    queries
}

#[test]
fn grafana_dashboards_use_the_datasource_variable_rate_interval_and_filter_by_job_and_cluster() {
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
        let variables = check_variables(&at, &d);
        let mut all = Vec::new();
        datasources(&d, &mut all);
        assert!(!all.is_empty());
        for x in all {
            assert_eq!(
                x["uid"], "${datasource}",
                "{at}: hard-coded data source {x}"
            );
        }
        let panels: Vec<(String, String)> = d["panels"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|p| {
                let title = p["title"].as_str().unwrap_or_default().to_string();
                p["targets"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(move |t| (title.clone(), t["expr"].as_str().unwrap().to_string()))
            })
            .collect();
        assert!(!panels.is_empty());
        let mut bad = Vec::new();
        for (place, q) in &panels {
            bad.extend(
                problems(q)
                    .into_iter()
                    .map(|p| format!("panel {place:?}: {p}")),
            );
        }
        // The variables filter on the variables before them: `cluster` on none, `job` on
        // `cluster`, `node` on both.
        for (place, q) in &variables {
            let mut found = problems(q);
            if place == "variable cluster" {
                found.retain(|p| !p.contains("lacks"));
            } else if place == "variable job" {
                found.retain(|p| !p.contains("lacks job"));
            }
            bad.extend(found.into_iter().map(|p| format!("{place}: {p}")));
        }
        assert!(bad.is_empty(), "{at}:\n{}", bad.join("\n"));
        let exprs: Vec<&str> = panels.iter().map(|(_, q)| q.as_str()).collect();
        if d["templating"]["list"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["name"] == "node")
        {
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
        // Panels have titles.
        for p in d["panels"].as_array().unwrap() {
            assert!(p["title"].as_str().is_some_and(|t| !t.is_empty()), "{at}");
        }
    }
}

/// Where the Grafana dashboards are copied to: the chart's folder (its ConfigMaps read them with
/// `.Files.Glob`) and the kustomize component's (its `configMapGenerator` reads them).
const COPIES: &[&str] = &[
    "charts/kube-prober/files/dashboards",
    "manifests/components/grafana-dashboards/dashboards",
];

/// Each copy holds exactly the files of dashboards/grafana, byte for byte. Outside CI a drifted
/// copy is rewritten (and the test fails, so that the rewrite gets reviewed and committed);
/// with `CI` set it is only reported.
#[test]
fn the_chart_and_the_kustomize_component_carry_the_grafana_dashboards_unchanged() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let fix = std::env::var_os("CI").is_none();
    let source = files("dashboards/grafana");
    assert_eq!(source.len(), 3);
    let mut drift = Vec::new();
    for dir in COPIES {
        let name = |p: &Path| p.file_name().unwrap().to_os_string();
        for copy in files(dir) {
            if !source.iter().any(|s| name(s) == name(&copy)) {
                drift.push(format!("{}: not in dashboards/grafana", copy.display()));
                if fix {
                    std::fs::remove_file(&copy).unwrap();
                }
            }
        }
        for s in &source {
            let want = std::fs::read(s).unwrap();
            let copy = root.join(dir).join(name(s));
            if std::fs::read(&copy).ok().as_ref() != Some(&want) {
                drift.push(format!("{}: differs from {}", copy.display(), s.display()));
                if fix {
                    std::fs::write(&copy, &want).unwrap();
                }
            }
        }
    }
    assert!(
        drift.is_empty(),
        "{}\n{}",
        drift.join("\n"),
        if fix {
            "rewritten from dashboards/grafana: review and commit"
        } else {
            "not rewritten because CI is set: run `cargo test --test deploy -- dashboards::` \
             without CI and commit the result"
        }
    );
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
