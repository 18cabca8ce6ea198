//! Alert rules: dashboards/alerts.yaml (generated from the mixin, tests/deploy/mixin.rs) is the
//! one source of the shipped copies; the PrometheusRule carries the same groups; promtool checks
//! the rules and runs their unit tests (every alert fires in one case and stays quiet in
//! another); every alert has a runbook section in docs/alerts.md.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn yaml(path: &str) -> Value {
    let text = std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

const RULES: &str = "dashboards/alerts.yaml";
const PROMETHEUS_RULE: &str = "manifests/components/prometheus-operator/prometheusrule.yaml";
const HEADER: &str = "# GENERATED from dashboards/alerts.yaml by tests/deploy/alerts.rs (UPDATE_MANIFESTS=1); do not edit.\n";

fn alerts() -> Vec<Value> {
    yaml(RULES)["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap().clone())
        .collect()
}

#[test]
fn prometheus_rule_carries_exactly_the_rules_file() {
    let rules = yaml(RULES);
    let want = serde_json::json!({
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "kube-prober",
            "namespace": "kube-system",
            "labels": {"app.kubernetes.io/name": "kube-prober"}
        },
        "spec": rules
    });
    if std::env::var_os("UPDATE_MANIFESTS").is_some() {
        support::refuse_update_in_ci("UPDATE_MANIFESTS");
        let text = format!("{HEADER}{}", serde_yaml_ng::to_string(&want).unwrap());
        std::fs::write(repo().join(PROMETHEUS_RULE), text).unwrap();
    }
    let got = yaml(PROMETHEUS_RULE);
    assert_eq!(
        got, want,
        "{PROMETHEUS_RULE} differs from {RULES}: run UPDATE_MANIFESTS=1 cargo test --test deploy -- alerts::"
    );
}

#[test]
fn promtool_checks_the_rules() {
    let out = Command::new(support::promtool())
        .args(["check", "rules"])
        .arg(repo().join(RULES))
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains(&format!("SUCCESS: {} rules found", alerts().len())),
        "{text}"
    );
}

#[test]
fn promtool_unit_tests_fire_and_stay_quiet_for_every_alert() {
    let out = Command::new(support::promtool())
        .args(["test", "rules"])
        .arg(repo().join("dashboards/alerts_test.yaml"))
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    // Every alert has a case where it fires and one where it does not.
    let tests = yaml("dashboards/alerts_test.yaml");
    let mut fires = BTreeSet::new();
    let mut quiet = BTreeSet::new();
    for t in tests["tests"].as_array().unwrap() {
        for case in t["alert_rule_test"].as_array().into_iter().flatten() {
            let name = case["alertname"].as_str().unwrap().to_string();
            let n = case["exp_alerts"].as_array().map_or(0, Vec::len);
            if n > 0 {
                fires.insert(name);
            } else {
                quiet.insert(name);
            }
        }
    }
    for a in alerts() {
        let name = a["alert"]
            .as_str()
            .expect("alerting rules only")
            .to_string();
        assert!(fires.contains(&name), "{name}: no firing case");
        assert!(
            quiet.contains(&name),
            "{name}: no case where it stays quiet"
        );
    }
}

#[test]
fn every_alert_has_a_runbook_section() {
    let doc = std::fs::read_to_string(repo().join("docs/alerts.md")).unwrap();
    let headings: BTreeSet<String> = doc
        .lines()
        .filter_map(|l| l.strip_prefix("## "))
        .map(|h| h.trim().to_string())
        .collect();
    for a in alerts() {
        let name = a["alert"].as_str().unwrap();
        assert!(headings.contains(name), "docs/alerts.md has no `## {name}`");
        let anchor = format!("docs/alerts.md#{}", name.to_lowercase());
        assert_eq!(a["annotations"]["runbook"], anchor.as_str(), "{name}");
        // The paragraph is real text, not a stub.
        let section = doc.split(&format!("## {name}\n")).nth(1).unwrap();
        let body = section.split("\n## ").next().unwrap();
        assert!(
            body.split_whitespace().count() > 40,
            "{name}: runbook too short"
        );
        assert!(
            a["labels"]["severity"].is_string(),
            "{name}: label severity"
        );
        assert!(a["annotations"]["summary"].is_string(), "{name}: summary");
    }
}
