//! The `prometheus-operator` overlay end to end, on the real control plane
//! (tests/support/control_plane.rs) with the real Prometheus Operator v0.85.0 (its CRDs) and the
//! Prometheus it deploys by default, v3.5.0, both built by tests/upstream/build.sh (Debian's
//! `prometheus` cannot stand in: it is built without Kubernetes service discovery):
//! - the overlay is installed with `kubectl apply -k`; the real controllers roll its Deployment
//!   and node DaemonSet out on kwok nodes, kwok gives the pods their IPs (pod network
//!   10.244.0.0/16; the DaemonSet is host-network, so its pods have their node's own 127.2.0.x),
//!   and kube-prober runs once per pod with the pod's own command line, bound to the pod's IP
//!   and the manifest's port, with its ServiceAccount's token and RBAC;
//! - the operator, given a `Prometheus` object that selects the overlay's ServiceMonitor,
//!   PodMonitor and PrometheusRule, writes the configuration (Secret `prometheus-k8s`) and the
//!   rule files (ConfigMap `prometheus-k8s-rulefiles-0`). Prometheus runs on that configuration
//!   as the Prometheus pod would: `$(SHARD)` and `$(POD_NAME)` expanded from the environment the
//!   operator's StatefulSet gives the config-reloader (which does that in the pod), and the rule
//!   files' folder `/etc/prometheus/rules/` (a volume of the pod) replaced by a folder of the
//!   test holding the ConfigMap's files; nothing else changed. It discovers the pods through the
//!   real API server as the ServiceAccount `monitoring/prometheus` with a Role to read them
//!   (`apiserverConfig`, as for a Prometheus outside the cluster), and scrapes all six;
//! - the whole test runs in a network namespace of its own (`unshare --net`), whose loopback
//!   device answers for the pod network: the API server refuses loopback addresses in
//!   Endpoints and EndpointSlices, so pod IPs must lie elsewhere for the endpoints controller
//!   to publish the cluster role's pods, and the namespace keeps every packet to them local.
//!   The ServiceMonitor's job discovers them through those EndpointSlices, as in a cluster;
//! - every dashboard query and alert expression returns data (support/dashboards.rs),
//!   and kube-prober's own `namespace`, `pod` and `container` labels (of the addon pods it
//!   describes) arrive intact, with no `exported_*` label;
//! - then the defect this guards against: `honorLabels` patched to false on the live
//!   ServiceMonitor and PodMonitor, the operator's new
//!   configuration (`honor_labels: false` in every kube-prober job) turns those labels into
//!   `exported_*` (the target's own pod and container win), and the dashboards' restart query
//!   no longer finds the restarting addon pod.
//!
//! The cluster: 4 kwok nodes with addresses of their own (127.2.0.1-4). kwok-node-0 is NotReady
//! (kwok's node-not-ready stage) before the overlay is installed, kwok-node-3 is cordoned,
//! kwok-node-1 and -2 carry pods using CPU and memory (NodeMetrics from metrics-server). Addons
//! in kube-system: a DaemonSet on every node and a Deployment whose pod is not ready after its
//! containers restarted 5 times, last OOMKilled (the restarts stage of the test support). A
//! source fails: metrics-server is stopped until Prometheus has scraped the errors, then
//! started again. `$cluster` and `$node` are Grafana's "All" (`.*`), `$job` the two jobs.
//!
//! What has no data in this setting, checked to return nothing ([`EMPTY`]): the overlay runs
//! no sink (Prometheus scrapes it) and no leader election, so the sink and leader panels and
//! the `KubeProberSinkFailing` and `KubeProberNoLeader` alerts have no series. A
//! single-cluster Prometheus has no `cluster` label, so the `cluster` variable of the dashboards
//! offers only "All".

use support::control_plane;
use support::dashboards;
use support::deploy;
use support::prom;

use std::io::Read;
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use control_plane::{ControlPlane, Options, items, node_name};
use deploy::{Downward, kind, name, namespace};
use serde_json::Value;

const NODES: usize = 4;
const NOT_READY: usize = 0;
const CORDONED: usize = 3;

/// kwok-node-i's own address.
fn node_ip(i: usize) -> String {
    format!("127.2.0.{}", i + 1)
}

/// Dashboard queries (by a part of their place) and alerts that have no series with this
/// overlay, and why.
const EMPTY: &[(&str, &str)] = &[
    (
        "panel \"Sink pushes and failures per second\"",
        "the prometheus-operator overlay runs no sink: Prometheus scrapes kube-prober",
    ),
    (
        "panel \"Sink push duration\"",
        "the prometheus-operator overlay runs no sink: Prometheus scrapes kube-prober",
    ),
    (
        "panel \"Leader\"",
        "the prometheus-operator overlay runs no leader election (components/leader-election)",
    ),
    (
        "panel \"Leader changes per hour\"",
        "the prometheus-operator overlay runs no leader election (components/leader-election)",
    ),
];
/// Alerts whose expression and query part have no series with this overlay, and why.
const EMPTY_ALERTS: &[(&str, &str)] = &[
    (
        "KubeProberSinkFailing",
        "the prometheus-operator overlay runs no sink",
    ),
    (
        "KubeProberNoLeader",
        "the prometheus-operator overlay runs no leader election",
    ),
];

/// Kube-system addons: a DaemonSet on every node (tolerating every taint) and a Deployment
/// whose two containers restarted 5 times.
fn addons() -> String {
    format!(
        r#"
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: test-agent
  namespace: kube-system
  labels: {{components.gke.io/component-name: test-agent, components.gke.io/component-version: "1.0"}}
spec:
  selector: {{matchLabels: {{app: test-agent}}}}
  template:
    metadata:
      labels: {{app: test-agent, components.gke.io/component-name: test-agent, components.gke.io/component-version: "1.0"}}
    spec:
      tolerations: [{{operator: Exists}}]
      containers: [{{name: agent, image: agent, resources: {{requests: {{cpu: 50m, memory: 64Mi}}}}}}]
---{}"#,
        control_plane::restarting_addon(5, false)
    )
}

/// What Prometheus needs to discover the overlay's targets from outside the cluster: its
/// ServiceAccount, with a Role to read Services, Endpoints, EndpointSlices and Pods in
/// kube-system.
const PROMETHEUS_ACCESS: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: monitoring}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: prometheus, namespace: monitoring}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: prometheus, namespace: kube-system}
rules:
- apiGroups: [""]
  resources: [services, endpoints, pods]
  verbs: [get, list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: prometheus, namespace: kube-system}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: prometheus}
subjects: [{kind: ServiceAccount, name: prometheus, namespace: monitoring}]
"#;

/// The Prometheus object: it selects every ServiceMonitor, PodMonitor and PrometheusRule, and
/// reaches the API server as [`PROMETHEUS_ACCESS`]' ServiceAccount (its token in `token_file`).
fn prometheus_object(cp: &ControlPlane, token_file: &Path) -> String {
    format!(
        r#"
apiVersion: monitoring.coreos.com/v1
kind: Prometheus
metadata: {{name: k8s, namespace: monitoring}}
spec:
  serviceAccountName: prometheus
  evaluationInterval: 5s
  serviceMonitorSelector: {{}}
  serviceMonitorNamespaceSelector: {{}}
  podMonitorSelector: {{}}
  podMonitorNamespaceSelector: {{}}
  ruleSelector: {{}}
  ruleNamespaceSelector: {{}}
  apiserverConfig:
    host: {api}
    tlsConfig: {{caFile: {ca}}}
    authorization: {{type: Bearer, credentialsFile: {token}}}
"#,
        api = cp.api_url,
        ca = cp.ca_file.display(),
        token = token_file.display(),
    )
}

/// The pods' network: a range the API server accepts in Endpoints (it refuses loopback
/// addresses), local to the network namespace the test runs in.
const POD_NETWORK: &str = "10.244.0.0/16";

/// Waits until the endpoints controller has published the cluster role's pods behind Service
/// `kube-prober` (the ServiceMonitor's discovery reads them).
fn wait_service_endpoints(cp: &ControlPlane, want: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let slices = cp.get_json(&[
            "endpointslices",
            "-n",
            "kube-system",
            "-l",
            "kubernetes.io/service-name=kube-prober",
        ]);
        let ready = items(&slices)
            .iter()
            .flat_map(|s| s["endpoints"].as_array().cloned().unwrap_or_default())
            .filter(|e| e["conditions"]["ready"] == true)
            .count();
        if ready >= want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "Service kube-prober has {ready} of {want} ready endpoints after 60 s:\n{}\n{}",
            cp.kubectl(&[
                "get",
                "endpointslices,pods",
                "-n",
                "kube-system",
                "-o",
                "wide"
            ]),
            cp.log_tail("kube-controller-manager", 20)
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Starts the operator as the cluster admin (it has no kubeconfig flag).
fn start_operator(cp: &ControlPlane) -> Child {
    // The folder itself: kubectl reads a symbolic link as a file.
    let crds = control_plane::upstream("prometheus-operator-crd")
        .canonicalize()
        .expect("the CRD folder");
    cp.kubectl(&["apply", "--server-side", "-f", &crds.to_string_lossy()]);
    cp.kubectl(&[
        "wait",
        "--for=condition=established",
        "--timeout=60s",
        "crd",
        "--all",
    ]);
    let mut cmd = Command::new(control_plane::upstream("prometheus-operator"));
    cmd.arg(format!("--apiserver={}", cp.api_url))
        .arg(format!("--ca-file={}", cp.ca_file.display()))
        .arg(format!(
            "--cert-file={}",
            cp.dir().join("admin.crt").display()
        ))
        .arg(format!(
            "--key-file={}",
            cp.dir().join("admin.key").display()
        ))
        .arg(format!(
            "--web.listen-address=127.0.0.1:{}",
            control_plane::free_port()
        ))
        .arg("--log-level=info");
    control_plane::spawn_owned(cmd, &cp.dir().join("prometheus-operator.log"))
}

/// The configuration the operator generated (Secret `prometheus-k8s`, `prometheus.yaml.gz`),
/// once it has one whose kube-prober jobs have `honor_labels: honor`.
fn generated_config(cp: &ControlPlane, honor: bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = String::new();
    loop {
        let out = cp.kubectl_output(
            &[
                "get",
                "secret",
                "prometheus-k8s",
                "-n",
                "monitoring",
                "-o",
                r#"go-template={{index .data "prometheus.yaml.gz" | base64decode}}"#,
            ],
            None,
        );
        if out.status.success() && !out.stdout.is_empty() {
            let mut text = String::new();
            flate2::read::GzDecoder::new(&out.stdout[..])
                .read_to_string(&mut text)
                .expect("prometheus.yaml.gz is gzip of UTF-8 text");
            let jobs = kube_prober_jobs(&text);
            if jobs.len() == 2 && jobs.iter().all(|(_, h)| *h == honor) {
                return text;
            }
            last = format!("kube-prober jobs (job, honor_labels): {jobs:?}");
        }
        assert!(
            Instant::now() < deadline,
            "no generated configuration with honor_labels: {honor} for both kube-prober jobs \
             after 60 s ({last}):\n{}",
            tail(&cp.log("prometheus-operator"), 30)
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// (job_name, honor_labels) of the generated scrape jobs of the overlay's ServiceMonitor and
/// PodMonitor.
fn kube_prober_jobs(config: &str) -> Vec<(String, bool)> {
    let v: Value = serde_yaml_ng::from_str(config).expect("generated configuration is YAML");
    v["scrape_configs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|j| {
            let job = j["job_name"].as_str()?;
            let ours = job.starts_with("serviceMonitor/kube-system/kube-prober/")
                || job.starts_with("podMonitor/kube-system/kube-prober-node/");
            ours.then(|| (job.to_string(), j["honor_labels"] == true))
        })
        .collect()
}

/// The environment the operator gives the config-reloader of the Prometheus pod (StatefulSet
/// `prometheus-k8s`, pod `prometheus-k8s-0`): it expands each `$(NAME)` of the configuration
/// (`SHARD` in the sharding relabelling, `POD_NAME` in the external labels) before Prometheus
/// reads the file.
fn reloader_env(cp: &ControlPlane) -> Vec<(String, String)> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let sts = loop {
        let out = cp.kubectl_output(
            &[
                "get",
                "statefulset",
                "prometheus-k8s",
                "-n",
                "monitoring",
                "-o",
                "json",
            ],
            None,
        );
        if out.status.success() {
            break serde_json::from_slice::<Value>(&out.stdout).expect("StatefulSet JSON");
        }
        assert!(
            Instant::now() < deadline,
            "no StatefulSet prometheus-k8s after 60 s"
        );
        std::thread::sleep(Duration::from_millis(250));
    };
    let reloader = sts["spec"]["template"]["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["name"] == "config-reloader")
        .expect("a config-reloader container");
    reloader["env"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            let name = e["name"].as_str().expect("env name").to_string();
            let value = match (
                e["value"].as_str(),
                e["valueFrom"]["fieldRef"]["fieldPath"].as_str(),
            ) {
                (Some(v), _) => v.to_string(),
                (None, Some("metadata.name")) => "prometheus-k8s-0".to_string(),
                other => panic!("config-reloader env {name}: {other:?} not known to the test"),
            };
            (name, value)
        })
        .collect()
}

/// `config` as the config-reloader writes it for Prometheus: every `$(NAME)` of `env` expanded.
fn expand_reloader_env(config: &str, env: &[(String, String)]) -> String {
    let mut out = config.to_string();
    for (k, v) in env {
        out = out.replace(&format!("$({k})"), v);
    }
    assert!(
        !out.contains("$("),
        "a $(VAR) the config-reloader has no value for ({env:?}):\n{out}"
    );
    out
}

/// The file Prometheus reads: the operator's configuration with kube-prober jobs of
/// `honor_labels: honor`, as the config-reloader writes it, the rule files in `dir`.
fn prometheus_config(cp: &ControlPlane, honor: bool, dir: &Path) -> String {
    let config = generated_config(cp, honor);
    let config = expand_reloader_env(&config, &reloader_env(cp));
    with_rule_files(cp, &config, dir)
}

fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// The rule files the operator generated (ConfigMap `prometheus-k8s-rulefiles-0`) written to
/// `dir/prometheus-k8s-rulefiles-0/`, and `config` with the rule files' folder in the
/// Prometheus pod (`/etc/prometheus/rules/`) replaced by `dir`: the only substitution.
fn with_rule_files(cp: &ControlPlane, config: &str, dir: &Path) -> String {
    let cm = cp.get_json(&[
        "configmap",
        "prometheus-k8s-rulefiles-0",
        "-n",
        "monitoring",
    ]);
    let folder = dir.join("prometheus-k8s-rulefiles-0");
    std::fs::create_dir_all(&folder).expect("rule folder");
    let files = cm["data"].as_object().expect("rule files in the ConfigMap");
    assert_eq!(files.len(), 1, "one PrometheusRule: {files:?}");
    for (file, text) in files {
        std::fs::write(folder.join(file), text.as_str().expect("rule text")).expect("rule file");
    }
    let prefix = "/etc/prometheus/rules/";
    assert!(
        config.contains(&format!("{prefix}prometheus-k8s-rulefiles-0/")),
        "the generated configuration loads the rule ConfigMap's files:\n{config}"
    );
    let config = config.replace(prefix, &format!("{}/", dir.display()));
    for in_pod in ["/etc/prometheus", "/var/run/secrets", "/etc/tls"] {
        assert!(
            !config.contains(in_pod),
            "the generated configuration uses {in_pod}, a path of the Prometheus pod:\n{config}"
        );
    }
    config
}

/// The pods of `w` the controllers made, once `n` run with an IP: (pod, node, hostIP, podIP).
fn running_pods(cp: &ControlPlane, w: &Value, n: usize) -> Vec<(String, String, String, String)> {
    let selector = w["spec"]["selector"]["matchLabels"]
        .as_object()
        .expect("matchLabels")
        .iter()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
        .collect::<Vec<_>>()
        .join(",");
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let pods = cp.get_json(&["pods", "-n", namespace(w), "-l", &selector]);
        let running: Vec<(String, String, String, String)> = items(&pods)
            .iter()
            .filter(|p| p["status"]["phase"] == "Running" && p["status"]["podIP"].is_string())
            .map(|p| {
                let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
                (
                    s(&p["metadata"]["name"]),
                    s(&p["spec"]["nodeName"]),
                    s(&p["status"]["hostIP"]),
                    s(&p["status"]["podIP"]),
                )
            })
            .collect();
        if running.len() >= n {
            return running;
        }
        assert!(
            Instant::now() < deadline,
            "{} {}: {} of {n} pods running after 90 s",
            kind(w),
            name(w),
            running.len()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// kube-prober as the kubelet would start pod `pod` of `w`: the manifest's args and env, the
/// downward API's values, `--listen` on the pod's IP and the manifest's port, the
/// ServiceAccount's token; faster schedules so that rates have data within seconds.
fn start_pod(
    w: &Value,
    pod: &(String, String, String, String),
    kubeconfig: &Path,
) -> support::Prober {
    let (pod_name, node, host_ip, pod_ip) = pod;
    let downward = Downward {
        pod_name: pod_name.clone(),
        pod_namespace: namespace(w).to_string(),
        node_name: node.clone(),
        host_ip: host_ip.clone(),
    };
    let (mut args, mut env, manifest) = deploy::local_pod_command(w, &downward, kubeconfig);
    let port = manifest.rsplit_once(':').expect("HOST:PORT").1;
    for a in args.iter_mut().filter(|a| a.starts_with("--listen=")) {
        *a = format!("--listen={pod_ip}:{port}");
    }
    for (k, v) in [
        ("KUBE_PROBER_TICK_INTERVAL", "1s"),
        ("KUBE_PROBER_INTERVAL", "2s"),
        ("KUBE_PROBER_TIMEOUT", "2s"),
        ("KUBE_PROBER_PROBE_INTERVAL", "1s"),
        ("KUBE_PROBER_PROBE_TIMEOUT", "1s"),
    ] {
        env.push((k.into(), v.into()));
    }
    let p = deploy::spawn(&args, &env);
    assert_eq!(p.addr, format!("{pod_ip}:{port}"), "bound to the pod's IP");
    p
}

/// The cluster: nodes with their own addresses, one NotReady and one cordoned, usage pods,
/// addons.
fn prepare_cluster(cp: &ControlPlane) {
    cp.create_nodes_at(0..NODES, "4", "16Gi", Some(&node_ip));
    cp.wait_nodes_ready(NODES);
    cp.kubectl(&[
        "label",
        "node",
        &node_name(NOT_READY),
        "node-not-ready.stage.kwok.x-k8s.io=true",
    ]);
    cp.kubectl(&["cordon", &node_name(CORDONED)]);
    let deadline = Instant::now() + Duration::from_secs(60);
    while control_plane::condition(&cp.get_json(&["node", &node_name(NOT_READY)]), "Ready")
        != Some("False")
    {
        assert!(
            Instant::now() < deadline,
            "kwok-node-0 not NotReady in 60 s"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    cp.create_usage_pods("default", 1..3, 1, "500m", "1Gi");
    cp.apply(&addons());
    addon_not_ready(cp);
}

/// The restarting addon's pod not ready, as the kubelet reports a container failing its
/// readiness probe (kwok runs no probes): its Ready and ContainersReady conditions False.
fn addon_not_ready(cp: &ControlPlane) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let pod = loop {
        let pods = cp.get_json(&["pods", "-n", "kube-system", "-l", "app=test-restarts"]);
        if let Some(p) = items(&pods)
            .iter()
            .find(|p| p["status"]["phase"] == "Running")
        {
            break p["metadata"]["name"]
                .as_str()
                .expect("pod name")
                .to_string();
        }
        assert!(
            Instant::now() < deadline,
            "test-restarts not running in 60 s"
        );
        std::thread::sleep(Duration::from_millis(250));
    };
    cp.kubectl(&[
        "patch",
        "pod",
        &pod,
        "-n",
        "kube-system",
        "--subresource=status",
        "--type=strategic",
        "-p",
        r#"{"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "ContainersNotReady"}, {"type": "ContainersReady", "status": "False", "reason": "ContainersNotReady"}]}}"#,
    ]);
}

/// The overlay installed, and kube-prober running for each of its pods.
fn install_overlay(cp: &ControlPlane) -> Vec<support::Prober> {
    let dir = deploy::repo().join("manifests/overlays/prometheus-operator");
    cp.kubectl(&["apply", "-k", &dir.to_string_lossy()]);
    let objs = deploy::render("prometheus-operator");
    let mut procs = Vec::new();
    for w in deploy::workloads(&objs) {
        let sa = w["spec"]["template"]["spec"]["serviceAccountName"]
            .as_str()
            .expect("serviceAccountName");
        let kubeconfig = cp.service_account_kubeconfig(namespace(w), sa);
        let n = match kind(w) {
            "DaemonSet" => NODES,
            _ => w["spec"]["replicas"].as_u64().unwrap_or(1) as usize,
        };
        for pod in running_pods(cp, w, n) {
            procs.push(start_pod(w, &pod, &kubeconfig));
        }
    }
    procs
}

/// Waits until Prometheus scrapes every kube-prober pod (2 cluster, 4 node) successfully.
fn wait_targets_up(cp: &ControlPlane, prometheus: &prom::ScrapingPrometheus) -> Vec<prom::Sample> {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let up = prometheus
            .try_query(r#"up{job=~"kube-prober|kube-system/kube-prober-node"} == 1"#)
            .unwrap_or_default();
        if up.len() == 2 + NODES {
            return up;
        }
        assert!(
            Instant::now() < deadline,
            "{} of {} kube-prober targets up after 90 s: {up:?}\n{}\n{}",
            up.len(),
            2 + NODES,
            cp.kubectl(&[
                "get",
                "endpoints,endpointslices,pods",
                "-n",
                "kube-system",
                "-o",
                "wide"
            ]),
            prometheus
                .get("/api/v1/targets")
                .map(|(_, b)| b)
                .unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Waits until `query` returns data; returns it.
fn wait_query(
    prometheus: &prom::ScrapingPrometheus,
    query: &str,
    within: Duration,
) -> Vec<prom::Sample> {
    let deadline = Instant::now() + within;
    loop {
        let got = prometheus.try_query(query).unwrap_or_default();
        if !got.is_empty() {
            return got;
        }
        assert!(
            Instant::now() < deadline,
            "`{query}` has no data after {within:?}\n{}",
            prometheus.diagnostics()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The dashboards' restart query (panel "Addon container restarts and last termination").
const RESTARTS: &str = r#"max by (namespace, pod, container, node, addon) (kube_prober_container_restarts_total{cluster=~".*", node=~".*"}) > 0"#;

fn label<'a>(s: &'a prom::Sample, k: &str) -> &'a str {
    s.0.get(k).map(String::as_str).unwrap_or_default()
}

/// The defect: `honorLabels: false` patched on the live ServiceMonitor and PodMonitor. Once the operator's configuration has
/// `honor_labels: false` in every kube-prober job, a fresh Prometheus on it shows kube-prober's
/// own labels as `exported_*`, the target's pod and container in their place, and the restart
/// panel without the addon pod. Returns (series renamed, the pods the restart panel shows).
fn without_honor_labels(cp: &ControlPlane, dir: &Path) -> (usize, Vec<String>) {
    for (resource, path) in [
        (
            "servicemonitor/kube-prober",
            "/spec/endpoints/0/honorLabels",
        ),
        (
            "podmonitor/kube-prober-node",
            "/spec/podMetricsEndpoints/0/honorLabels",
        ),
    ] {
        cp.kubectl(&[
            "patch",
            resource,
            "-n",
            "kube-system",
            "--type=json",
            "-p",
            &format!(r#"[{{"op": "replace", "path": "{path}", "value": false}}]"#),
        ]);
    }
    let config = prometheus_config(cp, false, dir);
    let prometheus = prom::ScrapingPrometheus::start_with_config(
        &control_plane::upstream("prometheus"),
        &config,
    );
    wait_targets_up(cp, &prometheus);
    let renamed = wait_query(
        &prometheus,
        r#"kube_prober_container_restarts_total{exported_pod=~"test-restarts-.+"}"#,
        Duration::from_secs(60),
    );
    for s in &renamed {
        assert_eq!(label(s, "exported_namespace"), "kube-system", "{s:?}");
        assert!(
            matches!(label(s, "exported_container"), "app" | "sidecar"),
            "{s:?}"
        );
        assert!(
            label(s, "pod").starts_with("kube-prober"),
            "the target's pod wins: {s:?}"
        );
        assert_eq!(label(s, "container"), "kube-prober", "{s:?}");
    }
    let restarts = wait_query(&prometheus, RESTARTS, Duration::from_secs(30));
    assert!(
        restarts
            .iter()
            .all(|s| !label(s, "pod").starts_with("test-restarts-")),
        "without honorLabels the restart panel cannot find the addon pod: {restarts:?}"
    );
    let pods = restarts
        .iter()
        .map(|s| label(s, "pod").to_string())
        .collect();
    (renamed.len(), pods)
}

#[test]
fn the_operator_s_config_scrapes_the_overlay_and_every_dashboard_and_alert_has_data() {
    if !control_plane::run_in_own_network(
        &support::test_name(
            module_path!(),
            "the_operator_s_config_scrapes_the_overlay_and_every_dashboard_and_alert_has_data",
        ),
        POD_NETWORK,
    ) {
        return;
    }
    let started = Instant::now();
    let cp = ControlPlane::start(Options {
        nodes: 0,
        pods_per_node: 0,
        wait_node_metrics: false,
        pod_cidr: POD_NETWORK.into(),
        ..Options::default()
    });
    prepare_cluster(&cp);
    let mut operator = start_operator(&cp);
    let procs = install_overlay(&cp);
    wait_service_endpoints(&cp, 2);
    let files = tempfile::tempdir().expect("temp dir");
    let token = files.path().join("token");
    cp.apply(PROMETHEUS_ACCESS);
    std::fs::write(&token, cp.token("monitoring", "prometheus")).expect("token file");
    cp.apply(&prometheus_object(&cp, &token));
    let config = prometheus_config(&cp, true, files.path());
    eprintln!(
        "operator config generated after {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let prometheus = prom::ScrapingPrometheus::start_with_config(
        &control_plane::upstream("prometheus"),
        &config,
    );
    let up = wait_targets_up(&cp, &prometheus);
    let pods: Vec<&str> = up.iter().map(|s| label(s, "pod")).collect();
    eprintln!("targets up, by pod: {pods:?}");

    // A source that fails: metrics-server stopped until Prometheus has the cluster role's
    // errors, then started again.
    cp.kill("metrics-server");
    wait_query(
        &prometheus,
        "kube_prober_source_errors_total",
        Duration::from_secs(60),
    );
    cp.restart("metrics-server");

    // Grafana's "All" for every variable: `$job`'s is the jobs it finds, the ServiceMonitor's
    // (named by its jobLabel, `app.kubernetes.io/name`) and the PodMonitor's.
    let vars = dashboards::Vars {
        cluster: ".*",
        job: "(kube-prober|kube-system/kube-prober-node)",
        node: ".*",
    };
    let queries = dashboards::dashboard_queries(&vars);
    let alerts: Vec<(String, String)> = dashboards::alert_rules();
    let (empty_alerts, alerts): (Vec<_>, Vec<_>) = alerts
        .into_iter()
        .partition(|(a, _)| EMPTY_ALERTS.iter().any(|(e, _)| e == a));
    let mut report = dashboards::wait_every_query_and_alert(
        &prometheus,
        &queries,
        &alerts,
        EMPTY,
        Duration::from_secs(30),
        Duration::from_secs(150),
    );
    for (alert, expr) in &empty_alerts {
        let part = dashboards::query_part(expr).unwrap_or_else(|| expr.clone());
        let got = prometheus.try_query(&part).expect("alert query part");
        let why = EMPTY_ALERTS
            .iter()
            .find(|(a, _)| a == alert)
            .map(|(_, w)| *w);
        assert!(
            got.is_empty(),
            "{alert}: `{part}` has data: {got:?} ({why:?})"
        );
        report.push(format!(
            "{alert}: no data, as expected: {}",
            why.unwrap_or_default()
        ));
    }
    dashboards::wait_rules_healthy(
        &prometheus,
        alerts.len() + empty_alerts.len(),
        Duration::from_secs(30),
    );
    eprintln!(
        "{} dashboard queries after {:.1} s:\n{}",
        queries.len(),
        started.elapsed().as_secs_f64(),
        report.join("\n")
    );

    // kube-prober's own labels, intact: the restarting addon's pod and containers.
    let restarts = wait_query(&prometheus, RESTARTS, Duration::from_secs(30));
    let addon: Vec<&prom::Sample> = restarts
        .iter()
        .filter(|s| label(s, "pod").starts_with("test-restarts-"))
        .collect();
    assert_eq!(
        addon.len(),
        2,
        "app and sidecar of the addon pod: {restarts:?}"
    );
    for s in &addon {
        assert_eq!(label(s, "namespace"), "kube-system");
        assert!(matches!(label(s, "container"), "app" | "sidecar"), "{s:?}");
    }
    let exported = prometheus
        .try_query(r#"{__name__=~"kube_prober_.+", exported_namespace=~".+"} or {__name__=~"kube_prober_.+", exported_pod=~".+"} or {__name__=~"kube_prober_.+", exported_container=~".+"}"#)
        .expect("exported_* query");
    assert!(exported.is_empty(), "exported_* labels: {exported:?}");
    drop(prometheus);

    let (renamed, pods) = without_honor_labels(&cp, files.path());
    eprintln!(
        "honorLabels false: {renamed} series renamed exported_*, the restart panel shows only \
         {pods:?}; {:.1} s in all",
        started.elapsed().as_secs_f64()
    );
    drop(procs);
    let _ = operator.kill();
    let _ = operator.wait();
}
