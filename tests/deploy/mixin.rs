//! The monitoring mixin (`mixin/`) is the source of the alerts and Grafana dashboards under
//! `dashboards/`: the pinned go-jsonnet, run as `mixin/generate.jsonnet` says, writes exactly
//! the files checked in (and the chart's and kustomize components' copies are checked against
//! those by alerts.rs, dashboards.rs and helm_chart.rs); its `_config` reaches every rule and
//! query; a missing `jsonnet` fails naming the build script.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;
use support::jsonnet;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every file under `dir`, by its path relative to `dir`.
fn walk(dir: &Path, under: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
    for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let p = e.unwrap().path();
        if p.is_dir() {
            walk(&p, under, out);
        } else {
            let rel = p
                .strip_prefix(under)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            out.insert(rel, std::fs::read(&p).unwrap());
        }
    }
}

/// The first line where `want` and `got` differ, for the failure message.
fn first_difference(want: &[u8], got: &[u8]) -> String {
    let (want, got) = (String::from_utf8_lossy(want), String::from_utf8_lossy(got));
    let (mut w, mut g) = (want.lines(), got.lines());
    for n in 1.. {
        match (w.next(), g.next()) {
            (Some(a), Some(b)) if a == b => {}
            (None, None) => return "only in the line ends".into(),
            (a, b) => return format!("line {n}:\n  checked in: {a:?}\n  mixin:      {b:?}"),
        }
    }
    unreachable!()
}

/// What the files under dashboards/ hold that the mixin makes: the alert rules and every
/// Grafana dashboard (the Cloud Monitoring dashboards and the rules' unit tests are written by
/// hand).
fn generated_here() -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    walk(
        &repo().join("dashboards/grafana"),
        &repo().join("dashboards"),
        &mut out,
    );
    out.insert(
        "alerts.yaml".into(),
        std::fs::read(repo().join("dashboards/alerts.yaml")).unwrap(),
    );
    out
}

/// The documented command, into a temporary folder: every file it writes equals the one under
/// dashboards/, byte for byte, and every Grafana dashboard and the rules under dashboards/ come
/// from it. `UPDATE_GOLDEN=1` writes the mixin's output over dashboards/ instead (refused under
/// `CI`); then `cargo test --test deploy -- dashboards:: alerts:: helm_chart::` (with
/// `UPDATE_MANIFESTS=1` for the PrometheusRule) carries it to the copies.
#[test]
fn the_files_under_dashboards_are_the_mixins_output() {
    let tmp = tempfile::tempdir_in(support::target_tmpdir()).unwrap();
    let out = tmp.path().to_str().unwrap();
    jsonnet::run(&["-S", "-c", "-m", out, "mixin/generate.jsonnet"]);
    let mut made = BTreeMap::new();
    walk(tmp.path(), tmp.path(), &mut made);
    assert!(made.contains_key("alerts.yaml"), "{:?}", made.keys());
    assert_eq!(
        made.keys().filter(|k| k.starts_with("grafana/")).count(),
        3,
        "three Grafana dashboards: {:?}",
        made.keys()
    );
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        support::refuse_update_in_ci("UPDATE_GOLDEN");
        for k in generated_here().keys().filter(|k| !made.contains_key(*k)) {
            std::fs::remove_file(repo().join("dashboards").join(k)).unwrap();
        }
        for (k, v) in &made {
            std::fs::write(repo().join("dashboards").join(k), v).unwrap();
        }
    }
    let here = generated_here();
    let mut drift = Vec::new();
    for (k, v) in &made {
        match here.get(k) {
            None => drift.push(format!("dashboards/{k}: made by the mixin, not checked in")),
            Some(h) if h != v => drift.push(format!(
                "dashboards/{k} differs from the mixin's output, {}",
                first_difference(h, v)
            )),
            Some(_) => {}
        }
    }
    for k in here.keys().filter(|k| !made.contains_key(*k)) {
        drift.push(format!("dashboards/{k}: checked in, not made by the mixin"));
    }
    assert!(
        drift.is_empty(),
        "{}\nchange mixin/, not the generated files; `UPDATE_GOLDEN=1 cargo test --test deploy \
         -- mixin::` rewrites them",
        drift.join("\n")
    );
}

/// Every PromQL expression of the mixin's dashboards: panel targets and variable queries.
fn dashboard_queries(dashboards: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for d in dashboards.as_object().unwrap().values() {
        for v in d["templating"]["list"].as_array().unwrap() {
            if let Some(q) = v["query"]["query"].as_str() {
                out.push(q.to_string());
            }
        }
        for p in d["panels"].as_array().unwrap() {
            for t in p["targets"].as_array().unwrap() {
                out.push(t["expr"].as_str().unwrap().to_string());
            }
        }
    }
    out
}

/// `_config` reaches what it says: the KubeProberDown selector, the cluster label of every
/// query, the thresholds (in `for`, the expression and the summary), the runbook links and,
/// with a Grafana URL, a link from each alert to a dashboard of the mixin.
#[test]
fn the_mixin_takes_its_selector_cluster_label_and_thresholds_from_config() {
    let snippet = r#"
local m = (import 'mixin/mixin.libsonnet') + { _config+:: {
  kubeProberSelector: 'job=~"kube-prober|monitoring/edge-kube-prober-node"',
  clusterLabel: 'k8s_cluster',
  grafanaUrl: 'https://grafana.example.com',
  runbookUrlFormat: 'https://runbooks.example.com/%s',
  nodeNotReadyMinutes: 20,
  sourceStaleAfterMinutes: 10,
  addonRestarts: 5,
} };
{ alerts: m.prometheusAlerts, rules: m.prometheusRules, dashboards: m.grafanaDashboards }
"#;
    let v: Value = serde_json::from_str(&jsonnet::run(&["-e", snippet])).unwrap();
    let rules: BTreeMap<&str, &Value> = v["alerts"]["groups"][0]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["alert"].as_str().unwrap(), r))
        .collect();
    assert_eq!(rules.len(), 10, "{:?}", rules.keys());
    assert_eq!(
        rules["KubeProberDown"]["expr"],
        "up{job=~\"kube-prober|monitoring/edge-kube-prober-node\"} == 0\n"
    );
    let not_ready = rules["KubeProberNodeNotReady"];
    assert_eq!(not_ready["for"], "20m");
    assert!(
        not_ready["annotations"]["summary"]
            .as_str()
            .unwrap()
            .ends_with("for 20 minutes."),
        "{not_ready}"
    );
    let stale = rules["KubeProberSourceStale"];
    assert!(
        stale["expr"].as_str().unwrap().ends_with("> 600\n"),
        "{stale}"
    );
    assert!(
        stale["annotations"]["summary"]
            .as_str()
            .unwrap()
            .contains("for over 10 minutes"),
        "{stale}"
    );
    let restarting = rules["KubeProberAddonRestarting"];
    assert!(restarting["expr"].as_str().unwrap().ends_with("> 5\n"));
    assert!(
        restarting["annotations"]["summary"]
            .as_str()
            .unwrap()
            .contains("more than 5 times in 15 minutes"),
        "{restarting}"
    );
    let uids: Vec<&str> = v["dashboards"]
        .as_object()
        .unwrap()
        .values()
        .map(|d| d["uid"].as_str().unwrap())
        .collect();
    for (name, r) in &rules {
        let a = &r["annotations"];
        assert_eq!(
            a["runbook"],
            format!("https://runbooks.example.com/{}", name.to_lowercase()).as_str()
        );
        let url = a["dashboard_url"].as_str().unwrap_or_default();
        let uid = url
            .strip_prefix("https://grafana.example.com/d/")
            .unwrap_or_else(|| panic!("{name}: dashboard_url {url:?}"));
        assert!(
            uids.contains(&uid),
            "{name}: {uid} is no dashboard of the mixin"
        );
    }
    assert_eq!(v["rules"]["groups"], serde_json::json!([]));
    let queries = dashboard_queries(&v["dashboards"]);
    assert!(queries.len() > 30, "{}", queries.len());
    for q in &queries {
        assert!(q.contains("k8s_cluster"), "{q}");
        assert!(
            !q.replace("k8s_cluster", "").contains("cluster=~"),
            "a matcher on another cluster label in {q}"
        );
    }
    // The `cluster` variable lists the configured label's values.
    assert!(
        queries.contains(&"label_values(kube_prober_build_info, k8s_cluster)".to_string()),
        "{queries:?}"
    );
}

/// Without the pinned binary the mixin tests fail, naming the script that builds it.
#[test]
fn a_missing_jsonnet_fails_naming_the_build_script() {
    let missing = Path::new(env!("CARGO_TARGET_TMPDIR")).join("no-such-upstream-bin");
    let test = support::test_name(
        module_path!(),
        "the_files_under_dashboards_are_the_mixins_output",
    );
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", "--nocapture", &test])
        .env("KUBE_PROBER_UPSTREAM_BIN", &missing)
        .env_remove("UPDATE_GOLDEN");
    let out = support::owned::output(cmd, None).unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !out.status.success(),
        "a missing jsonnet must fail:\n{text}"
    );
    assert!(text.contains("tests/upstream/build.sh jsonnet"), "{text}");
    assert!(
        text.contains(&format!("test {test} ... FAILED")),
        "the test must fail, not skip:\n{text}"
    );
}
