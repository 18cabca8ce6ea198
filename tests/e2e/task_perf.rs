//! The node role end to end with `--task-perf-events`: the perf families appear with the flag
//! and are absent without it; where counters cannot attach (a fixture cgroup root is no
//! cgroupfs, as a VM without a PMU cannot count hardware events) the binary keeps serving and
//! shows the documented state; on this machine's real cgroup tree the software
//! set counts a kubelet-shaped pod cgroup.

use support::apiserver;
use support::skip;

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use support::task_fixture::{self as fixture, Driver, Layout, Runtime, Values};
use support::{Prober, promtool_check, wait_ready};

const NODE: &str = "worker-7";

fn write_sysfs(sys: &Path) {
    let cpu = sys.join("devices/system/cpu");
    std::fs::create_dir_all(&cpu).unwrap();
    std::fs::write(cpu.join("online"), "0-1\n").unwrap();
}

/// Starts the node role against the stand-in API server with one pod, cgroups under `cg`.
async fn start(
    api: &apiserver::ApiServer,
    dir: &Path,
    cg: &Path,
    sys: &Path,
    extra: &[&str],
) -> Prober {
    let kc = dir.join("kubeconfig");
    api.write_kubeconfig(&kc).unwrap();
    let kc = kc.to_string_lossy().into_owned();
    let cg_s = cg.to_string_lossy().into_owned();
    let sys_s = sys.to_string_lossy().into_owned();
    let mut args = vec![
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
    ];
    args.extend_from_slice(extra);
    let p = Prober::start_with_env(&args, &[("KUBECONFIG", kc.as_str()), ("NODE_NAME", NODE)]);
    wait_ready(&p).await;
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn perf_families_only_with_the_flag_and_a_documented_state_where_counters_cannot_attach() {
    let api = apiserver::start().await;
    api.set_nodes(vec![apiserver::node(NODE, ("4", "8Gi"), ("4", "8Gi"))]);
    let uid = "aaaaaaaa-1111-2222-3333-444444444444";
    api.upsert(&apiserver::task_pod("web-a", uid, "c0ffee01", NODE));
    let dir = tempfile::tempdir().unwrap();
    let cg = dir.path().join("cgroup");
    let sys = dir.path().join("sys");
    fixture::init(&cg, Layout::V2).unwrap();
    let pdir = fixture::pod_dir(Driver::Systemd, "burstable", uid);
    fixture::write_cgroup(&cg, Layout::V2, &pdir, &Values::seeded(1)).unwrap();
    let c = pdir.join(fixture::container_dir(
        Driver::Systemd,
        Runtime::Containerd,
        "c0ffee01",
    ));
    fixture::write_cgroup(&cg, Layout::V2, &c, &Values::seeded(2)).unwrap();
    write_sysfs(&sys);

    // Without the flag: task families, no perf family at all.
    let p = start(&api, dir.path(), &cg, &sys, &[]).await;
    let body = support::wait_metrics(&p, "task series", |b| {
        b.contains(&format!(
            "kube_prober_task_cpu_usage_seconds_total{{node=\"{NODE}\""
        ))
    })
    .await;
    assert!(!body.contains("kube_prober_task_perf_"), "{body}");
    assert_eq!(p.terminate(), 0);

    // With the flag on a fixture root (no cgroupfs, so no counter can attach): still serving,
    // the state and the counted failure on /metrics (the start-up warning is logged before
    // `listening`, which the harness skips; tests/kernel/task_perf.rs checks its text).
    let p = start(&api, dir.path(), &cg, &sys, &["--task-perf-events"]).await;
    // The perf state and a first collection of the cgroups: the two come from different
    // loops, so a snapshot can hold the one before the other.
    let body = support::wait_metrics(&p, "perf state and task CPU", |b| {
        b.contains("kube_prober_task_perf_event_set{")
            && b.contains("kube_prober_task_cpu_usage_seconds_total{")
    })
    .await;
    assert!(
        body.contains(&format!(
            "kube_prober_task_perf_event_set{{node=\"{NODE}\",set=\"none\"}} 1"
        )),
        "{body}"
    );
    assert!(body.contains(&format!(
        "kube_prober_task_perf_event_set{{node=\"{NODE}\",set=\"hardware\"}} 0"
    )));
    assert!(
        body.contains(&format!(
            "kube_prober_task_perf_open_failures_total{{node=\"{NODE}\",reason=\""
        )),
        "{body}"
    );
    assert!(body.contains(&format!(
        "kube_prober_task_perf_open_counters{{node=\"{NODE}\"}} 0"
    )));
    assert!(!body.contains("kube_prober_task_perf_task_clock_seconds_total"));
    assert!(
        body.contains(&format!(
            "kube_prober_task_cpu_usage_seconds_total{{node=\"{NODE}\""
        )),
        "the cgroup families are unaffected"
    );
    let (code, out) = promtool_check(&body);
    assert_eq!(code, 0, "promtool: {out}");
    assert_eq!(p.terminate(), 0);
}

#[test]
fn a_bad_perf_mode_is_a_clear_error() {
    let (code, err) = support::run_binary(
        &["--role", "node", "--task-perf-events=cycles"],
        &[("NODE_NAME", NODE)],
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--task-perf-events") && err.contains("cycles"),
        "{err}"
    );
}

/// A cgroup tree made under the real hierarchy; removed on drop.
struct CgroupGuard(Vec<PathBuf>);

impl Drop for CgroupGuard {
    fn drop(&mut self) {
        for d in self.0.iter().rev() {
            for _ in 0..50 {
                if std::fs::remove_dir(d).is_ok() || !d.exists() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// On this machine's own cgroup tree the software set counts the pod: its task-clock series
/// appears with the task labels, and leaves with the pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_cgroups_get_software_counters_per_pod() {
    let root = Path::new("/sys/fs/cgroup");
    let Some(perf_dir) = kube_prober::sources::task::perf::perf_root(root) else {
        skip::skip(
            "perf-cgroup",
            &format!("no perf_event cgroup hierarchy under {}", root.display()),
        );
        return;
    };
    let pid = std::process::id();
    let uid = format!("{pid:08x}-e2e0-4000-8000-00000000cafe");
    let rel = PathBuf::from(format!("kube-prober-perf-e2e-{pid}")).join(format!(
        "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice",
        uid.replace('-', "_")
    ));
    let mut guard = CgroupGuard(Vec::new());
    let mut p = perf_dir.clone();
    for comp in rel.components() {
        p.push(comp);
        if let Err(e) = std::fs::create_dir(&p) {
            skip::skip(
                "cgroups",
                &format!(
                    "cannot create {} ({e}); needs root and a writable cgroup mount",
                    p.display()
                ),
            );
            return;
        }
        guard.0.push(p.clone());
    }
    let api = apiserver::start().await;
    api.set_nodes(vec![apiserver::node(NODE, ("4", "8Gi"), ("4", "8Gi"))]);
    api.upsert(&apiserver::task_pod("real", &uid, "c0ffee01", NODE));
    let dir = tempfile::tempdir().unwrap();
    let prober = start(
        &api,
        dir.path(),
        root,
        Path::new("/sys"),
        &["--task-perf-events", "software"],
    )
    .await;
    let series = format!(
        "kube_prober_task_perf_task_clock_seconds_total{{node=\"{NODE}\",namespace=\"shop\",pod=\"real\",task_name=\"shop/real\",task_id=\"{uid}\",qos=\"burstable\",ready=\"true\"}} "
    );
    let body = support::wait_metrics(&prober, "task-clock of the real pod", |b| {
        b.contains(&series)
    })
    .await;
    let cpus = kube_prober::sources::task::perf::online_cpus(Path::new("/sys")).len();
    assert!(
        body.contains(&format!(
            "kube_prober_task_perf_event_set{{node=\"{NODE}\",set=\"software\"}} 1"
        )),
        "{body}"
    );
    assert!(
        body.contains(&format!(
            "kube_prober_task_perf_open_counters{{node=\"{NODE}\"}} {}",
            cpus * 3
        )),
        "{body}"
    );
    assert!(body.contains("kube_prober_task_perf_context_switches_total{"));
    assert!(!body.contains("kube_prober_task_perf_cycles_total"));
    let (code, out) = promtool_check(&body);
    assert_eq!(code, 0, "promtool: {out}");
    assert!(api.delete::<Pod>("shop", "real"));
    let body = support::wait_metrics(&prober, "the pod's counters close", |b| {
        !b.contains(&series)
            && b.contains(&format!(
                "kube_prober_task_perf_open_counters{{node=\"{NODE}\"}} 0"
            ))
    })
    .await;
    assert!(!body.contains(&uid));
    assert_eq!(prober.terminate(), 0);
    drop(guard);
    assert!(
        !perf_dir
            .join(format!("kube-prober-perf-e2e-{pid}"))
            .exists()
    );
}
