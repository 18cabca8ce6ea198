//! Every Grafana dashboard query and every alert expression of `dashboards/`, evaluated on a real
//! Prometheus (`support/prom.rs`): shared by tests/deploy/prometheus.rs (a hand-written scrape
//! config) and tests/real/prometheus_operator.rs (the config the Prometheus Operator generates).
//!
//! Used as `support::dashboards`, on `support::prom`'s Prometheus.
//!
//! Template variables are substituted as Grafana would (`$cluster`, `$job` and `$node` from
//! [`Vars`], `$__rate_interval` = 1m). Every query must parse and return data. Alert expressions
//! that return nothing (the condition does not hold in the scenario) are checked on their query
//! part (the expression without its final comparison), which must return data; the report says
//! which alert was checked how. Queries the caller names as expected to be empty, with the reason,
//! must return nothing, so that such a list cannot go stale.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::prom::ScrapingPrometheus;

/// The values Grafana gives the dashboards' template variables.
pub struct Vars<'a> {
    /// `$cluster`: a cluster name, or `.*` (the variable's "All").
    pub cluster: &'a str,
    /// `$job`: the jobs that scrape kube-prober, as a regex; the variable's "All" is every value
    /// its query finds, `(JOB1|JOB2)`, never `.*` (which would take in every other job's
    /// `scrape_duration_seconds`).
    pub job: &'a str,
    /// `$node`: a node name or a regex of several (a multi-value selection).
    pub node: &'a str,
}

pub fn substitute(expr: &str, vars: &Vars) -> String {
    expr.replace("$__rate_interval", "1m")
        .replace("${cluster}", vars.cluster)
        .replace("$cluster", vars.cluster)
        .replace("${job}", vars.job)
        .replace("$job", vars.job)
        .replace("${node}", vars.node)
        .replace("$node", vars.node)
}

/// `label_values(METRIC_SELECTOR, LABEL)` as a PromQL query with the same answer set.
pub fn label_values_query(q: &str) -> String {
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
pub fn query_part(expr: &str) -> Option<String> {
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

fn repo() -> PathBuf {
    crate::repo_root()
}

/// Every panel target and variable query of a Grafana dashboard: (where, PromQL).
pub fn grafana_queries(path: &Path, vars: &Vars) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(path).expect("a dashboard file");
    let d: Value = serde_json::from_str(&text).expect("dashboard JSON");
    let file = path
        .file_name()
        .expect("a file name")
        .to_string_lossy()
        .into_owned();
    let mut out = Vec::new();
    for v in d["templating"]["list"].as_array().expect("templating.list") {
        if v["type"] == "query" {
            let q = v["query"]["query"]
                .as_str()
                .or(v["query"].as_str())
                .expect("a variable query");
            out.push((
                format!("{file} variable {}", v["name"]),
                substitute(&label_values_query(q), vars),
            ));
        }
    }
    for p in d["panels"].as_array().expect("panels") {
        for t in p["targets"].as_array().expect("targets") {
            out.push((
                format!(
                    "{file} panel {:?} {}",
                    p["title"].as_str().expect("title"),
                    t["refId"].as_str().expect("refId")
                ),
                substitute(t["expr"].as_str().expect("expr"), vars),
            ));
        }
    }
    out
}

/// Every query of the three Grafana dashboards under dashboards/grafana.
pub fn dashboard_queries(vars: &Vars) -> Vec<(String, String)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo().join("dashboards/grafana"))
        .expect("dashboards/grafana")
        .map(|e| e.expect("dir entry").path())
        .collect();
    files.sort();
    assert_eq!(files.len(), 3, "three Grafana dashboards");
    files
        .iter()
        .flat_map(|f| grafana_queries(f, vars))
        .collect()
}

/// dashboards/alerts.yaml, the alert rules.
pub fn alerts_file() -> PathBuf {
    repo().join("dashboards/alerts.yaml")
}

/// (alert name, expression) of every rule of `alerts_file()`.
pub fn alert_rules() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(alerts_file()).expect("dashboards/alerts.yaml");
    let rules: Value = serde_yaml_ng::from_str(&text).expect("alerts YAML");
    rules["groups"][0]["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .map(|r| {
            (
                r["alert"].as_str().expect("alert").to_string(),
                r["expr"].as_str().expect("expr").to_string(),
            )
        })
        .collect()
}

/// Whether `q` returns data now; panics when it does not parse.
fn has_data(prometheus: &ScrapingPrometheus, at: &str, q: &str) -> bool {
    match prometheus.try_query(q) {
        Ok(s) => !s.is_empty(),
        Err(e) if e.contains("bad_data") => panic!("{at}: `{q}` does not parse: {e}"),
        Err(_) => false,
    }
}

fn listed(pairs: &[(String, String)]) -> String {
    pairs
        .iter()
        .map(|(a, q)| format!("{a}: {q}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Polls until every query of `queries` (but those whose place contains a key of `empty`)
/// returns data, and every alert of `alerts` returns data in its expression or, after `grace`,
/// in its query part; then checks that every query of `empty` returns nothing. Panics with what
/// is missing after `within`. Returns one line per alert saying how it was checked, and one
/// per query expected empty with its reason.
pub fn wait_every_query_and_alert(
    prometheus: &ScrapingPrometheus,
    queries: &[(String, String)],
    alerts: &[(String, String)],
    empty: &[(&str, &str)],
    grace: Duration,
    within: Duration,
) -> Vec<String> {
    let start = Instant::now();
    let deadline = start + within;
    let exempt = |at: &str| empty.iter().find(|(key, _)| at.contains(key));
    let (expect_empty, mut pending): (Vec<_>, Vec<_>) = queries
        .iter()
        .cloned()
        .partition(|(at, _)| exempt(at).is_some());
    for (key, _) in empty {
        assert!(
            expect_empty.iter().any(|(at, _)| at.contains(key)),
            "no dashboard query matches the exemption {key:?}"
        );
    }
    let mut alert_pending: Vec<(String, String)> = alerts.to_vec();
    let mut report = Vec::new();
    loop {
        pending.retain(|(at, q)| !has_data(prometheus, at, q));
        let mut still = Vec::new();
        for (alert, expr) in alert_pending {
            if has_data(prometheus, &alert, &expr) {
                report.push(format!(
                    "{alert}: expression returns data (would fire after `for`)"
                ));
                continue;
            }
            let part = query_part(&expr).unwrap_or_else(|| expr.clone());
            if start.elapsed() > grace && has_data(prometheus, &alert, &part) {
                report.push(format!(
                    "{alert}: condition false here; query part `{}` returns data",
                    part.replace('\n', " ")
                ));
            } else {
                still.push((alert, expr));
            }
        }
        alert_pending = still;
        if pending.is_empty() && alert_pending.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "queries with no data after {within:?}:\n{}\nalerts with no data in expression or \
             query part:\n{}\n{}",
            listed(&pending),
            listed(&alert_pending),
            prometheus.diagnostics()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    for (at, q) in &expect_empty {
        let why = exempt(at).map(|(_, why)| *why).unwrap_or_default();
        assert!(
            !has_data(prometheus, at, q),
            "{at}: `{q}` returns data although it is listed as empty here ({why})"
        );
        report.push(format!("{at}: no data, as expected: {why}"));
    }
    report.sort();
    report
}

/// Waits until Prometheus has loaded `count` rules and every one evaluates without error.
pub fn wait_rules_healthy(prometheus: &ScrapingPrometheus, count: usize, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let (_, body) = prometheus.get("/api/v1/rules").expect("GET /api/v1/rules");
        let v: Value = serde_json::from_str(&body).expect("rules JSON");
        let rules: Vec<&Value> = v["data"]["groups"]
            .as_array()
            .expect("groups")
            .iter()
            .flat_map(|g| g["rules"].as_array().expect("rules"))
            .collect();
        assert_eq!(rules.len(), count, "{body}");
        let bad: Vec<String> = rules
            .iter()
            .filter(|r| r["health"] != "ok")
            .map(|r| format!("{} {} {}", r["name"], r["health"], r["lastError"]))
            .collect();
        if bad.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "rules not healthy: {bad:?}");
        std::thread::sleep(Duration::from_millis(500));
    }
}
