//! The node role end to end: the binary watches its pods on the stand-in API server, finds
//! their cgroups in a fixture cgroup root (cgroup v2, systemd driver, containerd) and serves the
//! task, container and platform families; pods added and deleted through watch events appear
//! and disappear.

use support::apiserver;

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Pod;
use support::task_fixture::{self as fixture, Layout, Values};
use support::{Prober, promtool_check, wait_ready};

const NODE: &str = "worker-7";

/// A node role's files under `dir`: a cgroup v2 tree with the pod cgroups `(uid, container id,
/// seed)` of [`support::write_task_cgroups`], a sysfs tree and the stand-in's kubeconfig.
fn node_fixture(
    api: &apiserver::ApiServer,
    dir: &Path,
    pods: &[(&str, &str, u64)],
) -> (PathBuf, PathBuf, PathBuf) {
    let (cg, sys, kc) = (dir.join("cgroup"), dir.join("sys"), dir.join("kubeconfig"));
    fixture::init(&cg, Layout::V2).unwrap();
    for &(uid, container, seed) in pods {
        support::write_task_cgroups(&cg, uid, container, seed);
    }
    support::write_sysfs_fixture(&sys);
    api.write_kubeconfig(&kc).unwrap();
    (cg, sys, kc)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_role_serves_task_metrics_that_follow_the_pods() {
    let api = apiserver::start().await;
    api.set_nodes(vec![apiserver::node(NODE, ("4", "8Gi"), ("4", "8Gi"))]);
    let uid_a = "aaaaaaaa-1111-2222-3333-444444444444";
    let uid_b = "bbbbbbbb-1111-2222-3333-444444444444";
    let uid_other = "cccccccc-1111-2222-3333-444444444444";
    api.upsert(&apiserver::task_pod("web-a", uid_a, "c0ffee01", NODE));
    api.upsert(&apiserver::task_pod(
        "elsewhere",
        uid_other,
        "c0ffee09",
        "worker-8",
    ));

    let dir = tempfile::tempdir().unwrap();
    let (cg, sys, kc) = node_fixture(
        &api,
        dir.path(),
        &[
            (uid_a, "c0ffee01", 1),
            (uid_b, "c0ffee02", 3),
            (uid_other, "c0ffee09", 5),
        ],
    );
    let kc = kc.to_string_lossy().into_owned();
    let cg_s = cg.to_string_lossy().into_owned();
    let sys_s = sys.to_string_lossy().into_owned();
    let p = Prober::start_with_env(
        &[
            "--role",
            "node",
            "--tick-interval",
            "1s",
            "--interval",
            "1s",
            "--timeout",
            "1s",
            "--cgroup-root",
            &cg_s,
            "--sysfs",
            &sys_s,
            "--task-label-allowlist",
            "app",
        ],
        &[("KUBECONFIG", kc.as_str()), ("NODE_NAME", NODE)],
    );
    wait_ready(&p).await;

    let v = Values::seeded(1);
    let cpu_a = format!(
        "kube_prober_task_cpu_usage_seconds_total{{node=\"{NODE}\",namespace=\"shop\",pod=\"web-a\",task_name=\"shop/web-a\",task_id=\"{uid_a}\",qos=\"burstable\",ready=\"true\",app=\"web-a\"}} {}",
        v.cpu_usec as f64 / 1e6
    );
    let body = support::wait_metrics(&p, "task series of web-a", |b| b.contains(&cpu_a)).await;
    assert!(
        !body.contains(uid_other),
        "a pod on another node is no task"
    );
    assert!(!body.contains(uid_b), "no pod yet for this cgroup");
    let cv = Values::seeded(2);
    assert!(
        body.contains(&format!(
            "kube_prober_container_memory_working_set_bytes{{node=\"{NODE}\",namespace=\"shop\",pod=\"web-a\",task_name=\"shop/web-a\",task_id=\"{uid_a}\",qos=\"burstable\",ready=\"true\",app=\"web-a\",container=\"main\"}} {}",
            cv.memory_usage - cv.inactive_file
        )),
        "{body}"
    );
    assert!(body.contains(&format!(
        "kube_prober_task_resource_requests{{node=\"{NODE}\",namespace=\"shop\",pod=\"web-a\",task_name=\"shop/web-a\",task_id=\"{uid_a}\",qos=\"burstable\",ready=\"true\",app=\"web-a\",resource=\"cpu\",unit=\"core\"}} 0.1"
    )), "{body}");
    assert!(body.contains("kube_prober_task_pressure_stalled_seconds_total{"));
    assert!(body.contains(&format!(
        "kube_prober_platform_topology_cores{{node=\"{NODE}\"}} 2"
    )));
    assert!(body.contains(&format!(
        "kube_prober_platform_memory_numa_used_bytes{{node=\"{NODE}\",numa_node=\"0\"}} 614400"
    )));
    assert!(body.contains("kube_prober_source_up{source=\"task_cgroups\"} 1"));
    let (code, out) = promtool_check(&body);
    assert_eq!(code, 0, "promtool: {out}");

    // A new pod appears, a deleted one leaves.
    api.upsert(&apiserver::task_pod("web-b", uid_b, "c0ffee02", NODE));
    support::wait_metrics(&p, "web-b appears", |b| {
        b.contains(&format!("task_id=\"{uid_b}\"")) && b.contains("container=\"main\"")
    })
    .await;
    assert!(api.delete::<Pod>("shop", "web-a"));
    let body = support::wait_metrics(&p, "web-a leaves", |b| {
        !b.contains(&format!("task_id=\"{uid_a}\""))
    })
    .await;
    assert!(body.contains(&format!("task_id=\"{uid_b}\"")));
    let (code, out) = promtool_check(&body);
    assert_eq!(code, 0, "promtool: {out}");
    assert_eq!(p.terminate(), 0);
}

#[test]
fn a_missing_cgroup_root_is_a_clear_error() {
    let (code, err) = support::run_binary(
        &[
            "--role",
            "node",
            "--cgroup-root",
            "/nonexistent/cgroup",
            "--listen",
            "127.0.0.1:0",
        ],
        &[
            ("KUBECONFIG", "/nonexistent/kubeconfig"),
            ("NODE_NAME", NODE),
        ],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--cgroup-root"), "{err}");
}

/// Issue #11 (node-role VmHWM): the start-up's pages are handed back once the Kubernetes client
/// is built and once every role is started, both before the first tick, so the kubeconfig's
/// YAML and TLS set-up are not resident beside the watches' first lists and the first render.
/// Read from the binary's own debug lines, in the order they were written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_role_hands_start_up_pages_back_at_each_set_up_point_before_the_first_tick() {
    use std::io::BufRead as _;
    let api = apiserver::start().await;
    api.set_nodes(vec![apiserver::node(NODE, ("4", "8Gi"), ("4", "8Gi"))]);
    let uid = "aaaaaaaa-1111-2222-3333-444444444444";
    api.upsert(&apiserver::task_pod("web-a", uid, "c0ffee01", NODE));
    let dir = tempfile::tempdir().unwrap();
    let (cg, sys, kc) = node_fixture(&api, dir.path(), &[(uid, "c0ffee01", 1)]);
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_kube-prober"));
    cmd.args(["--role", "node", "--listen", "127.0.0.1:0"])
        .args([
            "--log-format",
            "json",
            "--log-level",
            "warn,kube_prober=debug",
        ])
        .args([
            "--tick-interval",
            "1s",
            "--interval",
            "1s",
            "--timeout",
            "1s",
        ])
        .arg("--cgroup-root")
        .arg(&cg)
        .arg("--sysfs")
        .arg(&sys)
        .env("KUBECONFIG", &kc)
        .env("NODE_NAME", NODE)
        .env("HOME", "/nonexistent")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let mut child = support::owned::spawn(cmd).unwrap();
    let stderr = child.stderr.take().unwrap();
    // The lines up to the first complete snapshot (or the end of the output), read off the
    // test's threads: the stand-in API server runs on them.
    let reader = tokio::task::spawn_blocking(move || {
        let mut seen = Vec::new();
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else {
                continue;
            };
            let message = v["message"].as_str().unwrap_or_default().to_string();
            let point = v["point"].as_str().map(str::to_string);
            let bytes = v["bytes"].as_u64();
            let done = message == "ready: first complete snapshot";
            seen.push((message, point, bytes));
            if done {
                break;
            }
        }
        seen
    });
    let seen = tokio::time::timeout(std::time::Duration::from_secs(30), reader).await;
    let _ = child.kill();
    let _ = child.wait();
    let seen = seen.expect("no first snapshot within 30 s").unwrap();
    let at = |message: &str, point: Option<&str>| {
        seen.iter()
            .position(|(m, p, _)| m == message && p.as_deref() == point)
            .unwrap_or_else(|| panic!("no `{message}` {point:?} in {seen:?}"))
    };
    let handed = "start-up pages handed back";
    let client = at(handed, Some("kube client"));
    let set_up = at(handed, Some("set-up"));
    let ready = at("ready: first complete snapshot", None);
    assert!(client < set_up && set_up < ready, "{seen:?}");
    for i in [client, set_up] {
        assert!(
            seen[i].2.is_some_and(|b| b > 0),
            "nothing handed back: {:?}",
            seen[i]
        );
    }
    assert_eq!(
        seen.iter().filter(|(m, _, _)| m == handed).count(),
        2,
        "once at each point: {seen:?}"
    );
}
