//! The Helm chart (charts/kube-prober) and the kustomize overlays (manifests/overlays) are one
//! truth: for every overlay, `helm template` with `charts/kube-prober/ci/OVERLAY-values.yaml`
//! renders the same objects as `kubectl kustomize manifests/overlays/OVERLAY` (names, labels,
//! args, env, RBAC rules, probes, every other field), apart from the differences listed in
//! `ALLOWED_DIFFERENCES`, each with its reason. Also: `helm lint --strict` is clean, the values
//! schema refuses wrong values naming the key, RBAC follows the values, every key of values.yaml
//! is documented, and docs/helm-values.md is generated from those comments.

use support::deploy;
use support::helm;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use deploy::{kind, name, namespace, yaml_docs};
use serde_json::Value;

/// Label keys the chart puts on its objects and the kustomize overlays do not, with the reason.
/// Removed from both renders, anywhere they appear (labels, selectors), before the comparison.
const ALLOWED_DIFFERENCES: &[(&str, &str)] = &[
    (
        "helm.sh/chart",
        "Helm's convention: the chart and its version, for `helm` and for people reading the objects",
    ),
    (
        "app.kubernetes.io/instance",
        "the release: two releases in one cluster must not select each other's pods, so the \
         chart's selectors carry it too (moving from the overlays to the chart means deleting \
         the workloads first: selectors are immutable)",
    ),
    (
        "app.kubernetes.io/version",
        "the recommended label of the running version; the overlays leave the version to \
         the image tag set in manifests/components/release",
    ),
    (
        "app.kubernetes.io/managed-by",
        "the recommended label: Helm manages these objects",
    ),
];

/// Each ci values file that is not an overlay's: the kustomization it equals (the opt-in
/// components no overlay includes), as (values file stem, base overlay, extra components).
const COMPOSED: &[(&str, &str, &[&str])] = &[(
    "node-kubelet-pods-perf",
    "cluster-node",
    &["kubelet-pods", "node-perf"],
)];

const RELEASE: &str = "kube-prober";
const NAMESPACE: &str = "kube-system";

fn ci_values(stem: &str) -> PathBuf {
    helm::chart().join("ci").join(format!("{stem}-values.yaml"))
}

fn render_chart(stem: &str) -> Vec<Value> {
    let text = helm::template(RELEASE, NAMESPACE, &[ci_values(stem)], &[])
        .unwrap_or_else(|e| panic!("helm template with ci/{stem}-values.yaml: {e}"));
    yaml_docs(&text)
}

type Key = (String, String, String);

fn key(o: &Value) -> Key {
    (
        kind(o).to_string(),
        namespace(o).to_string(),
        name(o).to_string(),
    )
}

/// Removes the allowed label keys anywhere.
fn normalize(mut o: Value) -> Value {
    fn strip_labels(v: &mut Value) {
        match v {
            Value::Object(m) => {
                for (k, _) in ALLOWED_DIFFERENCES {
                    m.remove(*k);
                }
                m.values_mut().for_each(strip_labels);
            }
            Value::Array(a) => a.iter_mut().for_each(strip_labels),
            _ => {}
        }
    }
    strip_labels(&mut o);
    o
}

/// Checks what both sides must hold beyond equality, on one pair of objects (the overlays'
/// `want`, the chart's `got`).
fn reconcile(want: &mut Value, got: &mut Value) {
    let k = kind(got).to_string();
    // Both sides must scrape with honorLabels: true (the operator's default renames
    // kube-prober's own namespace, pod and container labels exported_*).
    let endpoints = match k.as_str() {
        "ServiceMonitor" => Some("endpoints"),
        "PodMonitor" => Some("podMetricsEndpoints"),
        _ => None,
    };
    if let Some(list) = endpoints {
        let path = format!("/spec/{list}");
        for (side, obj) in [("chart", &*got), ("overlay", &*want)] {
            for e in obj
                .pointer(&path)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                assert_eq!(
                    e.get("honorLabels"),
                    Some(&Value::Bool(true)),
                    "the {side}'s {k} must set honorLabels: true on every endpoint"
                );
            }
        }
    }
}

fn by_key(objs: Vec<Value>) -> BTreeMap<Key, Value> {
    let mut m = BTreeMap::new();
    for o in objs {
        let k = key(&o);
        let prev = m.insert(k.clone(), normalize(o));
        assert!(prev.is_none(), "two objects named {k:?}");
    }
    m
}

/// Every path where two values differ, as `path: want != got` lines.
fn diff(path: &str, want: &Value, got: &Value, out: &mut Vec<String>) {
    match (want, got) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for k in keys {
                let p = format!("{path}.{k}");
                match (a.get(k), b.get(k)) {
                    (Some(x), Some(y)) => diff(&p, x, y, out),
                    (Some(x), None) => out.push(format!("{p}: kustomize has {x}, the chart none")),
                    (None, Some(y)) => out.push(format!("{p}: the chart has {y}, kustomize none")),
                    (None, None) => unreachable!(),
                }
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                diff(&format!("{path}[{i}]"), x, y, out);
            }
        }
        _ if want != got => out.push(format!("{path}: kustomize {want} != chart {got}")),
        _ => {}
    }
}

/// Compares a kustomize render with the chart's; panics with every difference.
fn assert_same(what: &str, kustomize: Vec<Value>, chart: Vec<Value>) {
    let mut want = by_key(kustomize);
    let mut got = by_key(chart);
    let mut out = Vec::new();
    for k in want.keys().filter(|k| !got.contains_key(*k)) {
        out.push(format!("{k:?}: in kustomize, not rendered by the chart"));
    }
    for k in got.keys().filter(|k| !want.contains_key(*k)) {
        out.push(format!("{k:?}: rendered by the chart, not in kustomize"));
    }
    for (k, w) in want.iter_mut() {
        if let Some(g) = got.get_mut(k) {
            reconcile(w, g);
            diff(&format!("{}/{}/{}", k.0, k.1, k.2), w, g, &mut out);
        }
    }
    let allowed: Vec<String> = ALLOWED_DIFFERENCES
        .iter()
        .map(|(k, why)| format!("label {k}: {why}"))
        .collect();
    assert!(
        out.is_empty(),
        "{what}: the chart and kustomize differ:\n{}\n(the allowed differences, already \
         removed:\n{})",
        out.join("\n"),
        allowed.join("\n")
    );
}

#[test]
fn every_overlay_has_values_that_render_the_same_objects() {
    let overlays = deploy::overlays();
    let mut stems: Vec<String> = std::fs::read_dir(helm::chart().join("ci"))
        .expect("charts/kube-prober/ci")
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .map(|f| {
            f.strip_suffix("-values.yaml")
                .unwrap_or_else(|| panic!("ci/{f}: ci files are named OVERLAY-values.yaml"))
                .to_string()
        })
        .collect();
    stems.sort();
    let mut want: Vec<String> = overlays.clone();
    want.extend(COMPOSED.iter().map(|(s, _, _)| s.to_string()));
    want.sort();
    assert_eq!(
        stems, want,
        "charts/kube-prober/ci must hold one values file per overlay (and per COMPOSED case)"
    );
    for overlay in &overlays {
        assert_same(
            &format!("overlay {overlay} vs ci/{overlay}-values.yaml"),
            deploy::render(overlay),
            render_chart(overlay),
        );
    }
}

/// The opt-in node components (kubelet-pods, node-perf) are in no overlay: the test composes the
/// kustomization a user would write and compares that.
#[test]
fn opt_in_components_render_the_same_objects() {
    for (stem, base, components) in COMPOSED {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("helm-chart-kustomize-{}", std::process::id()))
            .join(stem);
        std::fs::create_dir_all(&dir).unwrap();
        // kustomize takes relative paths only.
        let manifests = relative(&dir, &helm::repo().join("manifests"));
        let mut k = format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - {}/overlays/{base}\ncomponents:\n",
            manifests.display()
        );
        // `release` last, as docs/deployment.md says: its image and part-of label reach
        // every component's objects only from there.
        for c in components.iter().chain(&["release"]) {
            k.push_str(&format!("  - {}/components/{c}\n", manifests.display()));
        }
        std::fs::write(dir.join("kustomization.yaml"), k).unwrap();
        let out = std::process::Command::new(deploy::kubectl())
            .arg("kustomize")
            .arg(&dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "kubectl kustomize {}: {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        let kustomize = yaml_docs(&String::from_utf8(out.stdout).unwrap());
        assert_same(
            &format!("{base} + {components:?} vs ci/{stem}-values.yaml"),
            kustomize,
            render_chart(stem),
        );
        let _ = std::fs::remove_dir_all(dir.parent().unwrap());
    }
}

/// `to` relative to the folder `from` (both absolute).
fn relative(from: &Path, to: &Path) -> PathBuf {
    let from = from.canonicalize().expect("from");
    let to = to.canonicalize().expect("to");
    let common = from
        .components()
        .zip(to.components())
        .take_while(|(a, b)| a == b)
        .count();
    let mut p = PathBuf::new();
    for _ in from.components().skip(common) {
        p.push("..");
    }
    to.components().skip(common).for_each(|c| p.push(c));
    p
}

fn lint(extra: &[&str]) -> (bool, String) {
    let state = helm::state_dir("lint");
    let mut cmd = helm::helm_command(&state);
    cmd.args(["lint", "--strict"])
        .arg(helm::chart())
        .args(extra);
    let out = helm::run(cmd);
    let _ = std::fs::remove_dir_all(&state);
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn helm_lint_strict_is_clean_with_every_values_file() {
    let mut files = vec![None];
    for e in std::fs::read_dir(helm::chart().join("ci")).unwrap() {
        files.push(Some(e.unwrap().path()));
    }
    for f in files {
        let args: Vec<String> = f
            .iter()
            .flat_map(|p| ["--values".to_string(), p.display().to_string()])
            .collect();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (ok, text) = lint(&args);
        assert!(ok, "helm lint --strict {args:?}:\n{text}");
        assert!(
            text.contains("1 chart(s) linted, 0 chart(s) failed"),
            "helm lint --strict {args:?}:\n{text}"
        );
        for bad in ["[WARNING]", "[ERROR]"] {
            assert!(!text.contains(bad), "helm lint --strict {args:?}:\n{text}");
        }
    }
}

/// A wrong value is refused at `helm template` (as at `helm install`) with a message naming the
/// key.
#[test]
fn the_schema_refuses_wrong_values_naming_the_key() {
    let cases: &[(&str, &str)] = &[
        (
            "cluster.replicas=two",
            "at '/cluster/replicas': got string, want integer",
        ),
        (
            "cluster.replicaCount=3",
            "at '/cluster': additional properties 'replicaCount' not allowed",
        ),
        (
            "logFormat=xml",
            "at '/logFormat': value must be one of 'json', 'text'",
        ),
        ("shutdownTimeout=soon", "at '/shutdownTimeout'"),
        (
            "node.kubeletPods.resource=nodes/exec",
            "at '/node/kubeletPods/resource'",
        ),
        ("otlp.endpoint=collector:4317", "at '/otlp/endpoint'"),
        (
            "gcm.gcpServiceAccount=someone@example.com",
            "at '/gcm/gcpServiceAccount'",
        ),
        ("cluster.port=70000", "at '/cluster/port'"),
        (
            "loadWatcher.metricsProviderName=Datadog",
            "at '/loadWatcher/metricsProviderName'",
        ),
        (
            "cluster.extraArgs[0]=probe-interval=30s",
            "at '/cluster/extraArgs/0'",
        ),
        (
            "cluster.workloadNamespaces[0]=Kube_System",
            "at '/cluster/workloadNamespaces/0'",
        ),
        (
            "dashboards.label=grafana dashboard",
            "at '/dashboards/label'",
        ),
        ("dashboards.namespace=Grafana", "at '/dashboards/namespace'"),
    ];
    for (set, key) in cases {
        let err = helm::template(RELEASE, NAMESPACE, &[], &[set])
            .err()
            .unwrap_or_else(|| panic!("--set {set} was accepted"));
        assert!(
            err.contains("values don't meet the specifications of the schema"),
            "--set {set}: not refused by the schema:\n{err}"
        );
        assert!(
            err.contains(key),
            "--set {set}: the message does not name {key}:\n{err}"
        );
    }
    // And a wrong value in a values file, as users pass them.
    let dir = helm::state_dir("bad-values");
    let f = dir.join("bad.yaml");
    std::fs::write(&f, "node:\n  enabled: \"yes\"\n").unwrap();
    let err = helm::template(RELEASE, NAMESPACE, &[f], &[]).expect_err("node.enabled: \"yes\"");
    assert!(
        err.contains("at '/node/enabled': got string, want boolean"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
    // The alias needs the Service it points at.
    let err = helm::template(
        RELEASE,
        NAMESPACE,
        &[],
        &["loadWatcher.enabled=true", "cluster.enabled=false"],
    )
    .expect_err("loadWatcher without cluster");
    assert!(
        err.contains("loadWatcher.enabled needs cluster.enabled"),
        "{err}"
    );
}

fn render_set(release: &str, set: &[&str]) -> Vec<Value> {
    yaml_docs(
        &helm::template(release, "monitoring", &[], set)
            .unwrap_or_else(|e| panic!("helm template --set {set:?}: {e}")),
    )
}

fn rbac_names(objs: &[Value]) -> Vec<String> {
    let mut v: Vec<String> = objs
        .iter()
        .filter(|o| {
            matches!(
                kind(o),
                "ClusterRole" | "ClusterRoleBinding" | "Role" | "RoleBinding" | "ServiceAccount"
            )
        })
        .map(|o| format!("{}/{}/{}", kind(o), namespace(o), name(o)))
        .collect();
    v.sort();
    v
}

/// The rules of the cluster role's ClusterRole, as (resources, verbs) per rule.
fn cluster_rules(objs: &[Value]) -> Vec<(Value, Value)> {
    let role = objs
        .iter()
        .find(|o| kind(o) == "ClusterRole" && name(o) == "kube-prober")
        .expect("the cluster role's ClusterRole");
    role["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["resources"].clone(), r["verbs"].clone()))
        .collect()
}

/// The load-watcher mode is the lean drop-in (Nodes and NodeMetrics, their RBAC alone); the
/// estimate adds the bound pods' watch and its grant; `loadWatcher.fullClusterRole` gives back
/// the full cluster role's arguments and RBAC, exactly those of the chart without the mode.
#[test]
fn load_watcher_mode_is_lean_and_the_full_role_is_one_value_away() {
    let r = "kube-prober";
    let lean_args = [
        "--pod-scope=none",
        "--watch-workloads=false",
        "--disable-probes=metrics_server,apiserver_readyz,cluster_dns",
    ];
    let lean = render_set(r, &["loadWatcher.enabled=true"]);
    let args = container_args(&lean, "Deployment");
    assert_eq!(args[args.len() - 3..], lean_args, "{args:?}");
    assert_eq!(
        cluster_rules(&lean),
        vec![
            (
                serde_json::json!(["nodes"]),
                serde_json::json!(["list", "watch"])
            ),
            (serde_json::json!(["nodes"]), serde_json::json!(["list"])),
        ]
    );
    assert!(!rbac_names(&lean).iter().any(|n| n.contains("workloads")));
    // The same arguments as the kustomize component appends.
    assert_eq!(deploy::component_args("load-watcher-lean"), lean_args);

    let est = render_set(
        r,
        &[
            "loadWatcher.enabled=true",
            "loadWatcher.estimateBoundPods=all",
        ],
    );
    let args = container_args(&est, "Deployment");
    assert!(args.contains(&"--pod-scope=bound".to_string()), "{args:?}");
    assert!(!args.contains(&"--pod-scope=none".to_string()), "{args:?}");
    assert!(
        args.contains(&"--watcher-estimate-bound-pods=all".to_string()),
        "{args:?}"
    );
    assert_eq!(
        cluster_rules(&est)[0].0,
        serde_json::json!(["nodes", "pods"])
    );

    let full = render_set(
        r,
        &[
            "loadWatcher.enabled=true",
            "loadWatcher.fullClusterRole=true",
        ],
    );
    let plain = render_set(r, &[]);
    assert_eq!(
        container_args(&full, "Deployment"),
        container_args(&plain, "Deployment")
    );
    assert_eq!(cluster_rules(&full), cluster_rules(&plain));
    assert_eq!(rbac_names(&full), rbac_names(&plain));
}

/// RBAC follows the values: each rule set only when what uses it is on.
#[test]
fn rbac_follows_the_values_and_nothing_more() {
    let r = "kube-prober";
    let ns = "monitoring";
    let base = vec![
        format!("ClusterRole//{r}"),
        format!("ClusterRoleBinding//{r}"),
        format!("Role/kube-system/{r}-workloads"),
        format!("RoleBinding/kube-system/{r}-workloads"),
        format!("ServiceAccount/{ns}/{r}"),
    ];
    assert_eq!(rbac_names(&render_set(r, &[])), base);
    // A sink without leader election: no Lease access.
    let objs = render_set(r, &["otlp.enabled=true", "cluster.leaderElection=false"]);
    assert_eq!(rbac_names(&objs), base);
    let args = container_args(&objs, "Deployment");
    assert!(
        args.contains(&"--leader-elect=false".to_string()),
        "{args:?}"
    );
    // Leader election without a sink does nothing: no Lease access, no flag.
    let objs = render_set(r, &["cluster.leaderElection=true"]);
    assert_eq!(rbac_names(&objs), base);
    assert!(
        !container_args(&objs, "Deployment")
            .iter()
            .any(|a| a.starts_with("--leader-elect"))
    );
    // A sink with leader election: the Lease Role in the release namespace.
    let mut want = base.clone();
    want.push(format!("Role/{ns}/{r}-leader-election"));
    want.push(format!("RoleBinding/{ns}/{r}-leader-election"));
    want.sort();
    assert_eq!(rbac_names(&render_set(r, &["gcm.enabled=true"])), want);
    // Extra workload namespaces: a Role in each, and the flag.
    let objs = render_set(r, &["cluster.workloadNamespaces={kube-system,addons}"]);
    let mut want = base.clone();
    want.push(format!("Role/addons/{r}-workloads"));
    want.push(format!("RoleBinding/addons/{r}-workloads"));
    want.sort();
    assert_eq!(rbac_names(&objs), want);
    assert!(
        container_args(&objs, "Deployment")
            .contains(&"--workload-namespaces=kube-system,addons".to_string())
    );
    // The node role alone: only its own ServiceAccount and ClusterRole.
    let objs = render_set(r, &["cluster.enabled=false", "node.enabled=true"]);
    assert_eq!(
        rbac_names(&objs),
        vec![
            format!("ClusterRole//{r}-node"),
            format!("ClusterRoleBinding//{r}-node"),
            format!("ServiceAccount/{ns}/{r}-node"),
        ]
    );
    assert!(objs.iter().all(|o| kind(o) != "Service"));
    // nodes/pods instead of nodes/proxy where the kubelet allows it.
    let objs = render_set(
        r,
        &[
            "node.enabled=true",
            "node.kubeletPods.enabled=true",
            "node.kubeletPods.resource=nodes/pods",
        ],
    );
    let cr = objs
        .iter()
        .find(|o| kind(o) == "ClusterRole" && name(o) == "kube-prober-node-kubelet-pods")
        .expect("kubelet-pods ClusterRole");
    assert_eq!(
        cr["rules"][0]["resources"],
        serde_json::json!(["nodes/pods"])
    );
    // rbac.create=false: ServiceAccounts only.
    let objs = render_set(
        r,
        &[
            "rbac.create=false",
            "node.enabled=true",
            "otlp.enabled=true",
        ],
    );
    assert_eq!(
        rbac_names(&objs),
        vec![
            format!("ServiceAccount/{ns}/{r}"),
            format!("ServiceAccount/{ns}/{r}-node")
        ]
    );
}

fn container_args(objs: &[Value], workload_kind: &str) -> Vec<String> {
    let w = objs
        .iter()
        .find(|o| kind(o) == workload_kind)
        .unwrap_or_else(|| panic!("no {workload_kind}"));
    w["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect()
}

/// Another release name: every name follows it, the Lease too (two releases never share one),
/// and the load-watcher alias points at this release's Service.
#[test]
fn another_release_name_renames_everything_it_must() {
    let objs = render_set(
        "edge",
        &[
            "otlp.enabled=true",
            "node.enabled=true",
            "loadWatcher.enabled=true",
        ],
    );
    for o in &objs {
        if kind(o) != "Namespace" && name(o) != "load-watcher" {
            assert!(
                name(o).starts_with("edge-kube-prober"),
                "{}/{}",
                kind(o),
                name(o)
            );
        }
        assert_eq!(
            o["metadata"]["labels"]["app.kubernetes.io/instance"],
            "edge"
        );
    }
    let args = container_args(&objs, "Deployment");
    assert!(
        args.contains(&"--leader-elect-lease-name=edge-kube-prober".to_string()),
        "{args:?}"
    );
    let lease = objs
        .iter()
        .find(|o| kind(o) == "Role" && name(o) == "edge-kube-prober-leader-election")
        .expect("lease Role");
    assert_eq!(
        lease["rules"][1]["resourceNames"],
        serde_json::json!(["edge-kube-prober"])
    );
    let alias = objs
        .iter()
        .find(|o| kind(o) == "Service" && name(o) == "load-watcher")
        .expect("alias");
    assert_eq!(
        alias["spec"]["externalName"],
        "edge-kube-prober.monitoring.svc.cluster.local"
    );
    let dep = objs.iter().find(|o| kind(o) == "Deployment").unwrap();
    assert_eq!(
        dep["spec"]["selector"]["matchLabels"]["app.kubernetes.io/instance"],
        "edge"
    );
}

/// The `job` of every series Prometheus scrapes through the release's ServiceMonitor (the
/// value of its `jobLabel` on the Service) and PodMonitor (`NAMESPACE/NAME`), as the operator
/// names them.
fn monitor_jobs(objs: &[Value]) -> Vec<String> {
    let sm = objs
        .iter()
        .find(|o| kind(o) == "ServiceMonitor")
        .expect("a ServiceMonitor");
    let label = sm["spec"]["jobLabel"].as_str().expect("jobLabel");
    let service = objs
        .iter()
        .find(|o| kind(o) == "Service" && name(o) == name(sm))
        .expect("the ServiceMonitor's Service");
    let pm = objs
        .iter()
        .find(|o| kind(o) == "PodMonitor")
        .expect("a PodMonitor");
    vec![
        service["metadata"]["labels"][label]
            .as_str()
            .expect("the Service's jobLabel")
            .to_string(),
        format!("{}/{}", namespace(pm), name(pm)),
    ]
}

/// KubeProberDown's `up{job=~"..."}` selector, as a regex anchored as Prometheus anchors it.
fn down_jobs(objs: &[Value]) -> regex::Regex {
    let rule = objs
        .iter()
        .find(|o| kind(o) == "PrometheusRule")
        .expect("a PrometheusRule");
    let expr = rule["spec"]["groups"][0]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["alert"] == "KubeProberDown")
        .expect("KubeProberDown")["expr"]
        .as_str()
        .unwrap();
    let re = expr
        .trim()
        .strip_prefix("up{job=~\"")
        .and_then(|s| s.strip_suffix("\"} == 0"))
        .unwrap_or_else(|| panic!("KubeProberDown: {expr}"));
    regex::Regex::new(&format!("^(?:{re})$")).unwrap()
}

/// KubeProberDown watches the `up` of the jobs that scrape the release, whatever its name: the
/// chart renders the selector from the release's names (the mixin's default fits only the
/// chart's own name), and a release does not watch another release's node job.
#[test]
fn kube_prober_down_selects_the_jobs_of_the_release() {
    let set = [
        "node.enabled=true",
        "prometheusOperator.serviceMonitor.enabled=true",
        "prometheusOperator.podMonitor.enabled=true",
        "prometheusOperator.prometheusRule.enabled=true",
    ];
    for (release, other) in [
        ("kube-prober", "monitoring/edge-kube-prober-node"),
        ("edge", "monitoring/kube-prober-node"),
        ("edge-kube-prober", "monitoring/kube-prober-node"),
    ] {
        let objs = render_set(release, &set);
        let re = down_jobs(&objs);
        let jobs = monitor_jobs(&objs);
        for job in &jobs {
            assert!(re.is_match(job), "{release}: {re} misses job {job}");
        }
        assert!(!re.is_match(other), "{release}: {re} takes in {other}");
    }
    // The other rules are the file's as they are.
    let objs = render_set("edge", &set);
    let rule = objs.iter().find(|o| kind(o) == "PrometheusRule").unwrap();
    let file: Value = serde_yaml_ng::from_str(&read(ALERT_GROUPS)).unwrap();
    let others = |groups: &Value| -> Vec<Value> {
        groups[0]["rules"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["alert"] != "KubeProberDown")
            .cloned()
            .collect()
    };
    assert_eq!(others(&rule["spec"]["groups"]), others(&file["groups"]));
    assert_eq!(others(&file["groups"]).len(), 9);
}

/// The Grafana dashboards' ConfigMaps of a render: (namespace, name) → the ConfigMap.
fn dashboard_config_maps(objs: &[Value]) -> BTreeMap<(String, String), &Value> {
    objs.iter()
        .filter(|o| kind(o) == "ConfigMap")
        .map(|o| ((namespace(o).to_string(), name(o).to_string()), o))
        .collect()
}

/// The dashboards follow the values: none by default; with `dashboards.enabled` one ConfigMap
/// per file of dashboards/grafana, named after it, whose one key is the file's name and whose
/// value is the file's JSON, carrying the sidecar's label (its name and value as set, an
/// integer value too), in the namespace and with the annotations given.
#[test]
fn dashboards_follow_the_values() {
    assert!(dashboard_config_maps(&render_set("kube-prober", &[])).is_empty());
    let dir = helm::repo().join("dashboards/grafana");
    let mut files: Vec<(String, Value)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                serde_json::from_str(&text).unwrap(),
            )
        })
        .collect();
    files.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(files.len(), 3);
    /// A release, its `--set`s, and the namespace, sidecar label and annotation they give.
    struct Case {
        release: &'static str,
        set: &'static [&'static str],
        ns: &'static str,
        label: (&'static str, &'static str),
        annotation: Option<(&'static str, &'static str)>,
    }
    let cases = [
        Case {
            release: "kube-prober",
            set: &["dashboards.enabled=true"],
            ns: "monitoring",
            label: ("grafana_dashboard", "1"),
            annotation: None,
        },
        Case {
            release: "edge",
            set: &[
                "dashboards.enabled=true",
                "dashboards.label=dashboards.example.com/grafana",
                "dashboards.labelValue=7",
                "dashboards.namespace=grafana",
                "dashboards.annotations.grafana_folder=kube-prober",
            ],
            ns: "grafana",
            label: ("dashboards.example.com/grafana", "7"),
            annotation: Some(("grafana_folder", "kube-prober")),
        },
    ];
    for Case {
        release,
        set,
        ns,
        label: (label, value),
        annotation,
    } in cases
    {
        let objs = render_set(release, set);
        let maps = dashboard_config_maps(&objs);
        let prefix = if release == "kube-prober" {
            "kube-prober".to_string()
        } else {
            format!("{release}-kube-prober")
        };
        let want: Vec<(String, String)> = files
            .iter()
            .map(|(f, _)| {
                let short = f
                    .trim_end_matches(".json")
                    .trim_start_matches("kube-prober-");
                (ns.to_string(), format!("{prefix}-dashboard-{short}"))
            })
            .collect();
        assert_eq!(maps.keys().cloned().collect::<Vec<_>>(), want, "{set:?}");
        for ((f, json), cm) in files.iter().zip(maps.values()) {
            let labels = &cm["metadata"]["labels"];
            assert_eq!(labels[label], value, "{set:?}: {f}: {labels}");
            if label != "grafana_dashboard" {
                assert!(labels.get("grafana_dashboard").is_none(), "{labels}");
            }
            assert_eq!(labels["app.kubernetes.io/instance"], release);
            match annotation {
                Some((k, v)) => assert_eq!(cm["metadata"]["annotations"][k], v),
                None => assert!(cm["metadata"].get("annotations").is_none(), "{cm}"),
            }
            let data = cm["data"].as_object().expect("data");
            assert_eq!(
                data.keys().collect::<Vec<_>>(),
                [f],
                "{set:?}: one key, the file name"
            );
            let got: Value = serde_json::from_str(data[f].as_str().unwrap()).unwrap();
            assert_eq!(&got, json, "{set:?}: {f}");
        }
    }
}

/// NOTES.txt as `helm install` prints it. `helm install --dry-run` needs a reachable cluster,
/// so the test renders it with `helm template` from a copy of the chart that also carries the
/// text of NOTES.txt as a ConfigMap rendered by `tpl` (the same engine, values and helpers).
fn notes(release: &str, namespace: &str, set: &[&str]) -> String {
    let copy = helm::state_dir("notes-chart").join("kube-prober");
    let cp = std::process::Command::new("cp")
        .arg("-r")
        .arg(helm::chart())
        .arg(&copy)
        .status()
        .unwrap();
    assert!(cp.success(), "copying the chart");
    std::fs::copy(
        copy.join("templates/NOTES.txt"),
        copy.join("files/notes.txt"),
    )
    .unwrap();
    std::fs::write(
        copy.join("templates/zz-notes.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\ndata:\n  \
         notes: {{ tpl (.Files.Get \"files/notes.txt\") . | quote }}\n",
    )
    .unwrap();
    let state = helm::state_dir("notes");
    let mut cmd = helm::helm_command(&state);
    cmd.args(["template", release]).arg(&copy).args([
        "--namespace",
        namespace,
        "--show-only",
        "templates/zz-notes.yaml",
    ]);
    for s in set {
        cmd.args(["--set", s]);
    }
    let out = helm::run(cmd);
    let _ = std::fs::remove_dir_all(&state);
    let _ = std::fs::remove_dir_all(copy.parent().unwrap());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cm = &yaml_docs(&String::from_utf8(out.stdout).unwrap())[0];
    cm["data"]["notes"].as_str().expect("notes").to_string()
}

/// NOTES.txt tells how to reach /metrics and /watcher, with this release's names.
#[test]
fn notes_say_how_to_reach_metrics_and_watcher() {
    let text = notes(
        "edge",
        "monitoring",
        &[
            "node.enabled=true",
            "loadWatcher.enabled=true",
            "otlp.enabled=true",
        ],
    );
    for want in [
        "http://edge-kube-prober.monitoring.svc.cluster.local:2020/metrics",
        "http://edge-kube-prober.monitoring.svc.cluster.local:2020/watcher",
        "kubectl -n monitoring port-forward service/edge-kube-prober 2020:2020",
        "curl -s http://127.0.0.1:2020/watcher",
        "http://load-watcher.loadwatcher.svc.cluster.local:2020/watcher",
        "http://NODE_IP:2021/metrics",
        "Lease edge-kube-prober",
    ] {
        assert!(text.contains(want), "NOTES lack {want:?}:\n{text}");
    }
    let sharded = notes(
        "kube-prober",
        "kube-system",
        &["cluster.sharding.enabled=true"],
    );
    assert!(
        sharded.contains("StatefulSet kube-prober-shard, 3 shards"),
        "{sharded}"
    );
    assert!(!sharded.contains("NODE_IP"), "{sharded}");
}

// --- values.yaml, its schema and docs/helm-values.md ----------------------------------------

const DOCS: &str = "docs/helm-values.md";
const ALERT_GROUPS: &str = "charts/kube-prober/files/alert-groups.yaml";

/// One documented key of values.yaml.
#[derive(Debug)]
struct Doc {
    path: Vec<String>,
    doc: String,
    /// A section: its keys are documented one by one.
    section: bool,
}

/// The keys of values.yaml with the comment block right above each. A key whose next line is a
/// comment is a section (its keys are documented one by one); any other key is one value, its
/// default whatever follows it (a map or list included). Every key must have a comment.
fn documented_keys(text: &str) -> Result<Vec<Doc>, Vec<String>> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut errors = Vec::new();
    let mut stack: Vec<(usize, String)> = Vec::new();
    let mut comment: Vec<String> = Vec::new();
    let mut skip_deeper_than: Option<usize> = None;
    for (i, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        if let Some(s) = skip_deeper_than {
            if trimmed.is_empty() || indent > s {
                continue;
            }
            skip_deeper_than = None;
        }
        if trimmed.is_empty() {
            comment.clear();
            continue;
        }
        if let Some(c) = trimmed.strip_prefix('#') {
            comment.push(c.strip_prefix(' ').unwrap_or(c).to_string());
            continue;
        }
        let Some((k, rest)) = trimmed.split_once(':') else {
            errors.push(format!("line {}: not a key: {line}", i + 1));
            continue;
        };
        while stack.last().is_some_and(|(ind, _)| *ind >= indent) {
            stack.pop();
        }
        let mut path: Vec<String> = stack.iter().map(|(_, k)| k.clone()).collect();
        path.push(k.to_string());
        if comment.is_empty() {
            errors.push(format!(
                "{} (line {}) has no comment",
                path.join("."),
                i + 1
            ));
        }
        let next = lines[i + 1..]
            .iter()
            .map(|l| l.trim_start())
            .find(|l| !l.is_empty());
        let section = rest.trim().is_empty() && next.is_some_and(|l| l.starts_with('#'));
        if section {
            stack.push((indent, k.to_string()));
        } else if rest.trim().is_empty() {
            skip_deeper_than = Some(indent);
        }
        out.push(Doc {
            path,
            doc: comment.join(" "),
            section,
        });
        comment.clear();
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(errors)
    }
}

fn read(path: &str) -> String {
    std::fs::read_to_string(helm::repo().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn values() -> (String, Value) {
    let text = read("charts/kube-prober/values.yaml");
    let v: Value = serde_yaml_ng::from_str(&text).expect("values.yaml");
    (text, v)
}

fn lookup<'a>(v: &'a Value, path: &[String]) -> &'a Value {
    path.iter().fold(v, |v, k| &v[k.as_str()])
}

fn cell(s: &str) -> String {
    s.replace('|', "\\|")
}

/// docs/helm-values.md from values.yaml's comments.
fn values_doc() -> String {
    let (text, values) = values();
    let keys = documented_keys(&text).unwrap_or_else(|e| {
        panic!(
            "charts/kube-prober/values.yaml: undocumented keys:\n{}",
            e.join("\n")
        )
    });
    let mut md = String::from(
        "<!-- GENERATED from charts/kube-prober/values.yaml by tests/deploy/helm_chart.rs; do not edit: \
         change the comments there and run `cargo test --test deploy -- helm_chart::`. -->\n\
         # Helm chart values\n\n\
         `helm install kube-prober charts/kube-prober --namespace kube-system` (README \"Deploy\") \
         with these values deploys what `kubectl apply -k manifests/overlays/cluster` deploys; \
         `charts/kube-prober/ci/OVERLAY-values.yaml` are the values equal to each other overlay \
         (tests/deploy/helm_chart.rs renders both and compares them). `values.schema.json` refuses \
         unknown keys and wrong values at `helm install`, `helm upgrade` and `helm template`.\n\n\
         | key | default | description |\n|---|---|---|\n",
    );
    for k in keys {
        let default = if k.section {
            String::new()
        } else {
            format!(
                "`{}`",
                cell(&serde_json::to_string(lookup(&values, &k.path)).unwrap())
            )
        };
        md.push_str(&format!(
            "| `{}` | {} | {} |\n",
            k.path.join("."),
            default,
            cell(&k.doc)
        ));
    }
    md
}

/// charts/kube-prober/files/alert-groups.yaml from dashboards/alerts.yaml.
fn alert_groups() -> String {
    let rules: Value = serde_yaml_ng::from_str(&read("dashboards/alerts.yaml")).unwrap();
    format!(
        "# GENERATED from dashboards/alerts.yaml by tests/deploy/helm_chart.rs; do not edit. The chart's\n\
         # PrometheusRule carries these groups.\n{}",
        serde_yaml_ng::to_string(&rules).unwrap()
    )
}

/// A generated file must equal what it is generated from. Outside CI a drifted file is
/// rewritten (and the test fails, so the rewrite gets reviewed and committed); with `CI` set it
/// is only reported.
fn check_generated(path: &str, want: &str) {
    let full = helm::repo().join(path);
    let got = std::fs::read_to_string(&full).unwrap_or_default();
    if got == want {
        return;
    }
    if std::env::var_os("CI").is_some() {
        panic!(
            "{path} is out of date; not rewritten because CI is set: run \
             `cargo test --test deploy -- helm_chart::` without CI and commit the result"
        );
    }
    std::fs::write(&full, want).unwrap_or_else(|e| panic!("{path}: {e}"));
    panic!("{path} was out of date and has been rewritten: review and commit it");
}

#[test]
fn every_value_is_documented_and_docs_helm_values_is_generated_from_them() {
    check_generated(DOCS, &values_doc());
}

#[test]
fn the_alert_groups_of_the_chart_are_dashboards_alerts() {
    check_generated(ALERT_GROUPS, &alert_groups());
}

/// The schema knows exactly the keys values.yaml has (so every documented key is checked and
/// no key of the schema is undocumented).
#[test]
fn the_schema_has_exactly_the_keys_of_values_yaml() {
    fn schema_keys(s: &Value, prefix: &str, out: &mut Vec<String>) {
        if let Some(props) = s["properties"].as_object() {
            assert_eq!(
                s["additionalProperties"],
                Value::Bool(false),
                "schema of {prefix:?} must refuse unknown keys"
            );
            for (k, v) in props {
                let p = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                out.push(p.clone());
                schema_keys(v, &p, out);
            }
        }
    }
    fn value_keys(v: &Value, prefix: &str, free: &[&str], out: &mut Vec<String>) {
        if let Some(m) = v.as_object() {
            for (k, v) in m {
                let p = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                out.push(p.clone());
                if !free.contains(&p.as_str()) {
                    value_keys(v, &p, free, out);
                }
            }
        }
    }
    let schema: Value =
        serde_json::from_str(&read("charts/kube-prober/values.schema.json")).unwrap();
    let mut s = Vec::new();
    schema_keys(&schema, "", &mut s);
    s.retain(|k| k != "global");
    let (_, values) = values();
    let mut v = Vec::new();
    // Maps whose keys are the user's (labels, selectors, affinity) are not walked.
    value_keys(&values, "", &["cluster.affinity", "node.affinity"], &mut v);
    s.sort();
    v.sort();
    assert_eq!(
        s, v,
        "values.schema.json and values.yaml name different keys"
    );
}

#[test]
fn a_missing_helm_fails_naming_the_build_script() {
    let missing = Path::new(env!("CARGO_TARGET_TMPDIR")).join("no-such-upstream-bin");
    let lint = support::test_name(
        module_path!(),
        "helm_lint_strict_is_clean_with_every_values_file",
    );
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", "--nocapture", &lint])
        .env("KUBE_PROBER_UPSTREAM_BIN", &missing);
    let out = support::owned::output(cmd, None).unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "a missing helm must fail:\n{text}");
    assert!(text.contains("tests/upstream/build.sh helm"), "{text}");
    assert!(
        text.contains(&format!("test {lint} ... FAILED")),
        "the test must fail, not skip:\n{text}"
    );
}
