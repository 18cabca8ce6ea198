//! Installed as users install it, on the real control plane (tests/support/control_plane.rs):
//! `kubectl apply -k` of each overlay that runs without a cloud, then kube-prober runs as each of
//! the overlay's workloads would, with the manifest's args and env, the ServiceAccount's real
//! token from the TokenRequest API and the rendered ClusterRoles and Roles bound as its only
//! permissions. The real authorizer (RBAC) then proves least privilege: every replica turns
//! ready, and no log line carries a 403 or an RBAC error. The workloads' own pods are made by
//! the real controllers and scheduled on kwok nodes: the manifests install and roll out.

use support::control_plane;
use support::deploy;

use std::time::{Duration, Instant};

use control_plane::{ControlPlane, Options};
use deploy::{Downward, kind, name, namespace};
use serde_json::Value;

/// Every log line of `p` received so far.
fn drain(p: &support::Prober, into: &mut Vec<String>) {
    into.extend(p.log.try_iter());
}

/// The replicas of a workload as the controllers would name them.
fn replica_names(w: &Value, nodes: &[String]) -> Vec<(String, String)> {
    let n = name(w);
    match kind(w) {
        "StatefulSet" => {
            let r = w["spec"]["replicas"].as_u64().unwrap_or(1) as usize;
            (0..r)
                .map(|i| (format!("{n}-{i}"), nodes[0].clone()))
                .collect()
        }
        "DaemonSet" => vec![(format!("{n}-abcde"), nodes[0].clone())],
        _ => {
            let r = w["spec"]["replicas"].as_u64().unwrap_or(1) as usize;
            (0..r)
                .map(|i| (format!("{n}-5d4f8-{i}"), nodes[i % nodes.len()].clone()))
                .collect()
        }
    }
}

/// Starts every replica of `w` with the manifest's command line and a kubeconfig holding the
/// ServiceAccount's token.
fn start_workload(cp: &ControlPlane, w: &Value, nodes: &[String]) -> Vec<support::Prober> {
    let sa = w["spec"]["template"]["spec"]["serviceAccountName"]
        .as_str()
        .expect("serviceAccountName");
    let kubeconfig = cp.service_account_kubeconfig(namespace(w), sa);
    replica_names(w, nodes)
        .into_iter()
        .map(|(pod, node)| {
            let downward = Downward {
                pod_name: pod,
                pod_namespace: namespace(w).to_string(),
                node_name: node,
                host_ip: "127.0.0.1".into(),
            };
            let (args, mut env, _) = deploy::local_pod_command(w, &downward, &kubeconfig);
            // Fast probes, so that every probe (each an API call of its own) runs within seconds.
            env.push(("KUBE_PROBER_PROBE_INTERVAL".into(), "1s".into()));
            env.push(("KUBE_PROBER_PROBE_TIMEOUT".into(), "1s".into()));
            deploy::spawn(&args, &env)
        })
        .collect()
}

async fn wait_ready(p: &support::Prober, what: &str, log: &mut Vec<String>) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, body) = support::get(&p.url("/readyz")).await;
        drain(p, log);
        if status == 200 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not ready after 60 s: {body}\nlog:\n{}",
            log.join("\n")
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits until each of `probes` has run at least once on `p`; returns the last `/metrics`.
async fn wait_probes(p: &support::Prober, probes: &[&str], what: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, body) = support::get(&p.url("/metrics")).await;
        let ran = |probe: &str| {
            deploy::samples(&body, "kube_prober_probe_runs_total")
                .iter()
                .any(|(l, v)| l.get("probe").map(String::as_str) == Some(probe) && *v >= 1.0)
        };
        if probes.iter().all(|p| ran(p)) {
            return body;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: probes {probes:?} did not all run:\n{body}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits until the controllers have rolled `w` out on the kwok nodes (its pods Running).
fn wait_rolled_out(cp: &ControlPlane, w: &Value) {
    let resource = format!("{}/{}", kind(w).to_lowercase(), name(w));
    let out = cp.kubectl_output(
        &[
            "rollout",
            "status",
            &resource,
            "-n",
            namespace(w),
            "--timeout=90s",
        ],
        None,
    );
    assert!(
        out.status.success(),
        "{resource} did not roll out: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

async fn install_and_run(cp: &ControlPlane, overlay: &str, nodes: &[String]) {
    let dir = deploy::repo().join("manifests/overlays").join(overlay);
    let dir = dir.to_string_lossy().into_owned();
    cp.kubectl(&["apply", "-k", &dir]);
    let objs = deploy::render(overlay);
    for w in deploy::workloads(&objs) {
        let what = format!("{overlay}: {} {}", kind(w), name(w));
        wait_rolled_out(cp, w);
        let procs = start_workload(cp, w, nodes);
        let mut log = Vec::new();
        for p in &procs {
            wait_ready(p, &what, &mut log).await;
        }
        // Every probe of the role has run (the cluster role's call the API server; with shards,
        // shard 0 runs them), and no series reports a refused request.
        let cluster = kind(w) != "DaemonSet";
        for (i, p) in procs.iter().enumerate() {
            if kind(w) == "StatefulSet" && i > 0 {
                continue;
            }
            let role_probes: &[&str] = if cluster {
                &["metrics_server", "apiserver_readyz"]
            } else {
                &["kubelet_healthz"]
            };
            // Less the probes the manifest turns off (the lean load-watcher drop-in: all).
            let disabled: Vec<&str> = w["spec"]["template"]["spec"]["containers"][0]["args"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|a| a.as_str()?.strip_prefix("--disable-probes="))
                .flat_map(|l| l.split(','))
                .collect();
            let probes: Vec<&str> = role_probes
                .iter()
                .copied()
                .filter(|p| !disabled.contains(p))
                .collect();
            let body = wait_probes(p, &probes, &what).await;
            let refused: Vec<&str> = body
                .lines()
                .filter(|l| !l.starts_with('#'))
                .filter(|l| {
                    deploy::names_a_refusal(l.rsplit_once(' ').map_or(*l, |(series, _)| series))
                })
                .collect();
            assert!(
                refused.is_empty(),
                "{what}: refused requests counted:\n{}",
                refused.join("\n")
            );
        }
        for p in &procs {
            drain(p, &mut log);
        }
        for p in procs {
            assert_eq!(p.terminate(), 0, "{what}: exit code");
        }
        let bad = deploy::permission_lines(&log);
        assert!(
            bad.is_empty(),
            "{what}: permission problems with the installed RBAC:\n{}",
            bad.iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join("\n")
        );
        eprintln!(
            "{what}: ready with its own RBAC, {} log lines, none a 403",
            log.len()
        );
    }
    let out = cp.kubectl_output(
        &["delete", "-k", &dir, "--wait=true", "--timeout=90s"],
        None,
    );
    assert!(
        out.status.success(),
        "kubectl delete -k {overlay}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Each overlay that runs without a cloud, installed, run as its workloads and removed in turn
/// on one control plane.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_overlay_installs_and_runs_with_its_own_rbac_on_the_real_api_server() {
    let cp = ControlPlane::start(Options {
        nodes: 2,
        ..Options::default()
    });
    let nodes: Vec<String> = (0..2).map(control_plane::node_name).collect();
    for overlay in ["cluster", "cluster-node", "sharded", "load-watcher", "otlp"] {
        install_and_run(&cp, overlay, &nodes).await;
    }
}

/// The check itself: a real kube-prober log line of a denied list is found.
#[test]
fn permission_lines_finds_a_denied_request() {
    let lines = vec![
        r#"{"level":"INFO","message":"ready"}"#.to_string(),
        r#"{"level":"WARN","message":"list failed","error":"ApiError: nodes is forbidden: User \"system:serviceaccount:kube-system:kube-prober\" cannot list resource \"nodes\" (403)"}"#.to_string(),
    ];
    assert_eq!(deploy::permission_lines(&lines).len(), 1);
    assert!(deploy::names_a_refusal(
        r#"kube_prober_probe_failures_total{reason="status_403"}"#
    ));
    assert!(!deploy::names_a_refusal(
        r#"{"timestamp":"2026-11-26T18:59:28.004034Z"}"#
    ));
    assert!(!deploy::names_a_refusal(
        "kube_prober_node_cpu_utilization_ratio{node=\"n\"} 0.403"
    ));
}
