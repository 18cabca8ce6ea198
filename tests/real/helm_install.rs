//! The chart installed as users install it, on the real control plane
//! (tests/support/control_plane.rs: etcd, kube-apiserver with RBAC, the controllers, a
//! scheduler, kwok nodes): `helm install --wait` of the cluster and node roles with the
//! load-watcher alias and the Grafana dashboards (the ConfigMaps Grafana's sidecar lists by its
//! label hold every dashboard of dashboards/grafana), whose workloads the real controllers roll out and whose RBAC suffices (each
//! workload run as one replica with its ServiceAccount's token turns ready, never denied);
//! `helm upgrade` with
//! changed values, which rolls every pod to the new args and adds (then removes) exactly the RBAC
//! the new values need, then to the sharded cluster role (the Deployment replaced by the
//! StatefulSet); `helm uninstall`, which leaves nothing behind: no object of the release,
//! no pod, not the namespace it created, not Helm's release records.

use support::control_plane;
use support::deploy;
use support::helm;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Output;
use std::time::{Duration, Instant};

use control_plane::{ControlPlane, Options};
use serde_json::Value;

const RELEASE: &str = "kube-prober";
const NS: &str = "kube-system";

/// Runs helm against the control plane's admin kubeconfig.
fn helm_on(cp: &ControlPlane, state: &std::path::Path, args: &[&str]) -> Output {
    let mut cmd = helm::helm_command(state);
    cmd.env("KUBECONFIG", &cp.admin_kubeconfig).args(args);
    helm::run(cmd)
}

fn ok(out: &Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what}:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn yaml_docs(text: &str) -> Vec<Value> {
    use serde::Deserialize;
    serde_yaml_ng::Deserializer::from_str(text)
        .map(|d| Value::deserialize(d).expect("valid YAML"))
        .filter(|v| !v.is_null())
        .collect()
}

/// (kind, namespace, name) of every object of a render.
fn objects(text: &str) -> BTreeSet<(String, String, String)> {
    yaml_docs(text)
        .iter()
        .map(|o| {
            (
                o["kind"].as_str().unwrap().to_string(),
                o["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
                o["metadata"]["name"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// `kubectl get KIND NAME` of one object: its JSON, or None when it does not exist.
fn get(cp: &ControlPlane, kind: &str, ns: &str, name: &str) -> Option<Value> {
    let mut args = vec!["get", kind, name, "-o", "json"];
    if !ns.is_empty() {
        args.extend(["-n", ns]);
    }
    let out = cp.kubectl_output(&args, None);
    if out.status.success() {
        return Some(serde_json::from_slice(&out.stdout).expect("kubectl JSON"));
    }
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("NotFound"), "kubectl get {kind} {name}: {err}");
    None
}

fn pods(cp: &ControlPlane, component: &str) -> Vec<Value> {
    let sel =
        format!("app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component={component}");
    let v = cp.get_json(&["pods", "-n", NS, "-l", &sel]);
    v["items"].as_array().cloned().unwrap_or_default()
}

fn args_of(pod_or_template: &Value) -> Vec<String> {
    pod_or_template["spec"]["containers"][0]["args"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|a| a.as_str().unwrap().to_string())
        .collect()
}

fn rollout(cp: &ControlPlane, what: &str) {
    let out = cp.kubectl_output(
        &["rollout", "status", what, "-n", NS, "--timeout=120s"],
        None,
    );
    ok(&out, &format!("kubectl rollout status {what}"));
}

/// Waits until `check` holds, or fails with `what` and the last answer.
fn eventually(what: &str, within: Duration, mut check: impl FnMut() -> Result<(), String>) {
    let deadline = Instant::now() + within;
    loop {
        match check() {
            Ok(()) => return,
            Err(e) if Instant::now() > deadline => panic!("{what} after {within:?}: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(500)),
        }
    }
}

/// Runs the installed workload `kind/name` (as the API server holds it) as one replica would
/// run: its args and env, the ServiceAccount's real token, the chart's RBAC as its only
/// permissions. It must turn ready, and no log line may show a denied request. Returns the
/// replica's pod name. `while_running` is called with it while the replica still runs.
async fn run_as_installed(
    cp: &ControlPlane,
    kind: &str,
    name: &str,
    while_running: impl Fn(&str),
) -> String {
    let w = cp.get_json(&[kind, name, "-n", NS]);
    let sa = w["spec"]["template"]["spec"]["serviceAccountName"]
        .as_str()
        .expect("serviceAccountName");
    let kubeconfig = cp.service_account_kubeconfig(NS, sa);
    let pod = match kind {
        "statefulset" => format!("{name}-0"),
        _ => format!("{name}-5d4f8-x7k2p"),
    };
    let downward = deploy::Downward {
        pod_name: pod.clone(),
        pod_namespace: NS.to_string(),
        node_name: control_plane::node_name(0),
        host_ip: "127.0.0.1".into(),
    };
    let (args, env, _) = deploy::local_pod_command(&w, &downward, &kubeconfig);
    let p = deploy::spawn(&args, &env);
    let mut log: Vec<String> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, body) = support::get(&p.url("/readyz")).await;
        log.extend(p.log.try_iter());
        if status == 200 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{kind}/{name}: not ready after 60 s: {body}\nlog:\n{}",
            log.join("\n")
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // A few ticks and watch rounds under the real authorizer before the log is judged.
    tokio::time::sleep(Duration::from_secs(3)).await;
    log.extend(p.log.try_iter());
    while_running(&pod);
    assert_eq!(p.terminate(), 0, "{kind}/{name}: exit code");
    // 403 as a number of its own: a timestamp's digits (…41.240384Z) are no refusal.
    let denied = deploy::permission_lines(&log);
    assert!(
        denied.is_empty(),
        "{kind}/{name}: denied with the chart's RBAC:\n{denied:?}"
    );
    pod
}

fn values(name: &str) -> String {
    helm::chart()
        .join("ci")
        .join(format!("{name}-values.yaml"))
        .display()
        .to_string()
}

/// What Grafana's dashboard sidecar lists, the ConfigMaps of every namespace with the label
/// `grafana_dashboard=1` (kube-prometheus-stack's default), is one per file of
/// dashboards/grafana, keyed by the file's name, holding the file's JSON.
fn assert_sidecar_finds_the_dashboards(cp: &ControlPlane) {
    let listed = cp.get_json(&["configmaps", "-A", "-l", "grafana_dashboard=1"]);
    let mut got: Vec<(String, Value)> = Vec::new();
    for cm in listed["items"].as_array().expect("items") {
        for (key, text) in cm["data"].as_object().expect("data") {
            let json = serde_json::from_str(text.as_str().expect("a string"))
                .unwrap_or_else(|e| panic!("{key} in {}: {e}", cm["metadata"]["name"]));
            got.push((key.clone(), json));
        }
    }
    got.sort_by(|a, b| a.0.cmp(&b.0));
    let dir = helm::repo().join("dashboards/grafana");
    let mut want: Vec<(String, Value)> = std::fs::read_dir(&dir)
        .expect("dashboards/grafana")
        .map(|e| e.expect("entry").path())
        .map(|p| {
            let text = std::fs::read_to_string(&p).expect("a dashboard");
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                serde_json::from_str(&text).expect("dashboard JSON"),
            )
        })
        .collect();
    want.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(want.len(), 3);
    assert_eq!(
        got.iter().map(|(k, _)| k).collect::<Vec<_>>(),
        want.iter().map(|(k, _)| k).collect::<Vec<_>>(),
        "the dashboards the sidecar finds"
    );
    for ((k, g), (_, w)) in got.iter().zip(&want) {
        assert_eq!(g, w, "{k} as installed differs from dashboards/grafana/{k}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn install_upgrade_and_uninstall_on_the_real_api_server() {
    let cp = ControlPlane::start(Options {
        nodes: 2,
        pods_per_node: 0,
        metrics_server: false,
        wait_node_metrics: false,
        ..Options::default()
    });
    let state = helm::state_dir("install");
    let chart = helm::chart().display().to_string();
    let node_values = values("cluster-node");
    let install_args = [
        "--namespace",
        NS,
        "--values",
        &node_values,
        "--set",
        "loadWatcher.enabled=true",
        "--set",
        "dashboards.enabled=true",
        "--wait",
        "--timeout",
        "180s",
    ];

    // Install: every rendered object exists, the workloads are rolled out by the controllers.
    let mut args = vec!["install", RELEASE, &chart];
    args.extend(install_args);
    ok(&helm_on(&cp, &state, &args), "helm install");
    let manifest = ok(
        &helm_on(&cp, &state, &["get", "manifest", RELEASE, "-n", NS]),
        "helm get manifest",
    );
    let installed = objects(&manifest);
    let want = objects(
        &helm::template(
            RELEASE,
            NS,
            &[PathBuf::from(&node_values)],
            &["loadWatcher.enabled=true", "dashboards.enabled=true"],
        )
        .expect("helm template"),
    );
    assert_eq!(
        installed, want,
        "helm install applied other objects than helm template renders"
    );
    for (kind, ns, name) in &installed {
        assert!(
            get(&cp, kind, ns, name).is_some(),
            "{kind} {ns}/{name} not in the API server"
        );
    }
    rollout(&cp, "deployment/kube-prober");
    rollout(&cp, "daemonset/kube-prober-node");
    assert_eq!(pods(&cp, "cluster").len(), 2, "two cluster-role replicas");
    assert_eq!(
        pods(&cp, "node").len(),
        2,
        "one node-role pod per kwok node"
    );
    assert!(
        get(&cp, "role", NS, "kube-prober-leader-election").is_none(),
        "no Lease access without a sink"
    );
    run_as_installed(&cp, "deployment", "kube-prober", |_| {}).await;
    run_as_installed(&cp, "daemonset", "kube-prober-node", |_| {}).await;
    let alias = get(&cp, "service", "loadwatcher", "load-watcher").expect("alias");
    assert_eq!(
        alias["spec"]["externalName"],
        "kube-prober.kube-system.svc.cluster.local"
    );
    assert_sidecar_finds_the_dashboards(&cp);

    // Upgrade with changed values: the pods roll to the new args, and the Lease Role the OTLP
    // sink's leader election needs appears.
    let before: BTreeSet<String> = pods(&cp, "cluster")
        .iter()
        .chain(pods(&cp, "node").iter())
        .map(|p| p["metadata"]["uid"].as_str().unwrap().to_string())
        .collect();
    let mut args = vec!["upgrade", RELEASE, &chart];
    args.extend(install_args);
    args.extend([
        "--set",
        "otlp.enabled=true",
        "--set",
        "cluster.extraArgs={--probe-interval=30s}",
    ]);
    ok(&helm_on(&cp, &state, &args), "helm upgrade");
    rollout(&cp, "deployment/kube-prober");
    rollout(&cp, "daemonset/kube-prober-node");
    let role = get(&cp, "role", NS, "kube-prober-leader-election").expect("Lease Role");
    assert_eq!(
        role["rules"][1]["resourceNames"],
        serde_json::json!(["kube-prober"])
    );
    eventually(
        "every pod rolled to the new args",
        Duration::from_secs(120),
        || {
            let cluster = pods(&cp, "cluster");
            let node = pods(&cp, "node");
            let all: Vec<&Value> = cluster.iter().chain(node.iter()).collect();
            let live: Vec<&&Value> = all
                .iter()
                .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
                .collect();
            if cluster.len() != 2 || node.len() != 2 || live.len() != 4 {
                return Err(format!(
                    "{} cluster and {} node pods",
                    cluster.len(),
                    node.len()
                ));
            }
            for p in &live {
                let uid = p["metadata"]["uid"].as_str().unwrap();
                if before.contains(uid) {
                    return Err(format!("pod {} not replaced", p["metadata"]["name"]));
                }
                let args = args_of(p);
                if !args.contains(&"--sink=otlp".to_string()) {
                    return Err(format!("pod {} args {args:?}", p["metadata"]["name"]));
                }
            }
            for p in &cluster {
                let args = args_of(p);
                for want in ["--probe-interval=30s", "--leader-elect=true"] {
                    if !args.iter().any(|a| a == want) {
                        return Err(format!(
                            "pod {} lacks {want}: {args:?}",
                            p["metadata"]["name"]
                        ));
                    }
                }
            }
            Ok(())
        },
    );
    let history = ok(
        &helm_on(&cp, &state, &["history", RELEASE, "-n", NS, "-o", "json"]),
        "helm history",
    );
    let history: Value = serde_json::from_str(&history).unwrap();
    assert_eq!(history.as_array().map(Vec::len), Some(2), "{history}");
    // The chart's Lease Role suffices on the real authorizer: the replica takes the Lease.
    run_as_installed(&cp, "deployment", "kube-prober", |pod| {
        let lease = cp.get_json(&["lease", "kube-prober", "-n", NS]);
        assert_eq!(lease["spec"]["holderIdentity"], pod, "{lease}");
    })
    .await;

    // Upgrade to the sharded cluster role: the Lease Role goes with the sink, the Deployment
    // gives way to the StatefulSet, whose Role to watch itself appears.
    let mut args = vec!["upgrade", RELEASE, &chart];
    args.extend(install_args);
    args.extend(["--set", "cluster.sharding.enabled=true"]);
    ok(&helm_on(&cp, &state, &args), "helm upgrade to sharded");
    assert!(
        get(&cp, "role", NS, "kube-prober-leader-election").is_none(),
        "the Lease Role must go with the sink"
    );
    rollout(&cp, "statefulset/kube-prober-shard");
    run_as_installed(&cp, "statefulset", "kube-prober-shard", |_| {}).await;
    let shards = get(&cp, "role", NS, "kube-prober-shards").expect("the shards' Role");
    assert_eq!(
        shards["rules"][0]["resources"],
        serde_json::json!(["statefulsets"])
    );
    eventually(
        "the Deployment replaced by 3 shards",
        Duration::from_secs(120),
        || {
            let cluster = pods(&cp, "cluster");
            let mut names: Vec<&str> = cluster
                .iter()
                .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
                .map(|p| p["metadata"]["name"].as_str().unwrap())
                .collect();
            names.sort();
            let deployment = get(&cp, "deployment", NS, "kube-prober");
            if deployment.is_none()
                && cluster.len() == 3
                && names
                    == [
                        "kube-prober-shard-0",
                        "kube-prober-shard-1",
                        "kube-prober-shard-2",
                    ]
            {
                Ok(())
            } else {
                Err(format!(
                    "pods {names:?}, deployment left: {}",
                    deployment.is_some()
                ))
            }
        },
    );
    let manifest = ok(
        &helm_on(&cp, &state, &["get", "manifest", RELEASE, "-n", NS]),
        "helm get manifest",
    );
    let installed: BTreeSet<_> = installed.union(&objects(&manifest)).cloned().collect();

    // Uninstall: nothing of the release is left.
    ok(
        &helm_on(
            &cp,
            &state,
            &[
                "uninstall",
                RELEASE,
                "-n",
                NS,
                "--wait",
                "--timeout",
                "180s",
            ],
        ),
        "helm uninstall",
    );
    eventually(
        "nothing of the release left",
        Duration::from_secs(120),
        || {
            let left: Vec<String> = installed
                .iter()
                .filter(|(kind, ns, name)| get(&cp, kind, ns, name).is_some())
                .map(|(kind, ns, name)| format!("{kind} {ns}/{name}"))
                .collect();
            let pods: Vec<String> = ["cluster", "node"]
                .iter()
                .flat_map(|c| pods(&cp, c))
                .map(|p| p["metadata"]["name"].as_str().unwrap().to_string())
                .collect();
            if left.is_empty() && pods.is_empty() {
                Ok(())
            } else {
                Err(format!("objects {left:?}, pods {pods:?}"))
            }
        },
    );
    let names = |v: &Value| -> Vec<String> {
        v["items"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|o| {
                format!(
                    "{} {}/{}",
                    o["kind"].as_str().unwrap_or_default(),
                    o["metadata"]["namespace"].as_str().unwrap_or_default(),
                    o["metadata"]["name"].as_str().unwrap_or_default()
                )
            })
            .collect()
    };
    let labelled = cp.get_json(&[
        "all",
        "-A",
        "-l",
        &format!("app.kubernetes.io/instance={RELEASE}"),
    ]);
    assert_eq!(
        names(&labelled),
        Vec::<String>::new(),
        "objects labelled with the release remain"
    );
    let records = cp.get_json(&[
        "secrets",
        "-n",
        NS,
        "-l",
        &format!("owner=helm,name={RELEASE}"),
    ]);
    assert_eq!(
        names(&records),
        Vec::<String>::new(),
        "Helm's release records remain"
    );
    let _ = std::fs::remove_dir_all(&state);
}
