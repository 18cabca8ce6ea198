//! The real kernel, perf counters (`--task-perf-events`): a kubelet-shaped pod cgroup made in
//! the hierarchy perf counters attach to (`perf_event` v1 where mounted, else the v2 tree: on
//! this machine `/sys/fs/cgroup/unified`), counters opened on it in cgroup mode on every online
//! CPU, a real process in it that burns CPU, and the software set's task-clock compared with the
//! cgroup's own CPU usage.
//!
//! Tolerance: task-clock within 30 ms + 3 % of the cgroup's CPU usage (v2 `cpu.stat`
//! `usage_usec`, or v1 `cpuacct.usage` on a pure v1 host). The counters are opened before the
//! process enters the cgroup, so both count the same time; the slack is for the
//! accounting paths (the cgroup counts in the scheduler's tick and at switches, task-clock at
//! switches and on read).
//!
//! Hardware events are asserted as "either counted, or reported unavailable with the
//! documented state" (no event set, a counted open failure with a documented reason, a
//! start-up warning): this machine is a VM without a PMU, and which branch ran is printed.
//!
//! Every cgroup is removed by a guard, also when an assertion fails. Skips (with the reason
//! printed) only where cgroups cannot be created or perf counters need a root this run lacks.

use cgroup_guard::CgroupGuard;
use support::cgroup_guard;
use support::skip;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube_prober::model::{PerfEventSet, PerfMode, TaskContainer, TaskPod};
use kube_prober::sources::task::perf::{FAILURE_REASONS, PerfCollector, online_cpus, perf_root};

const CHILD_ENV: &str = "KUBE_PROBER_TASK_PERF_KERNEL_CHILD";
const BURN_SECONDS: f64 = 1.0;

/// The worker: waits for `go` (it is in its cgroup by then), burns CPU, prints `done`, waits
/// for stdin to close.
#[test]
fn child_worker() {
    let Ok(_) = std::env::var(CHILD_ENV) else {
        return;
    };
    let mut line = String::new();
    let stdin = std::io::stdin();
    stdin.lock().read_line(&mut line).unwrap();
    let start = cgroup_guard::proc_cpu_seconds("self").unwrap_or(0.0);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut x: u64 = 1;
    while cgroup_guard::proc_cpu_seconds("self").unwrap_or(f64::MAX) - start < BURN_SECONDS
        && Instant::now() < deadline
    {
        for i in 0..100_000u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(i);
        }
        std::hint::black_box(x);
    }
    println!("done");
    std::io::stdout().flush().unwrap();
    let mut rest = String::new();
    let _ = stdin.lock().read_line(&mut rest);
}

/// The cgroup's own CPU seconds: v2 `cpu.stat` usage_usec, or v1 `cpuacct.usage`.
fn cgroup_cpu_seconds(cgroup_root: &Path, perf_dir: &Path, rel: &Path) -> f64 {
    if let Ok(s) = std::fs::read_to_string(perf_dir.join(rel).join("cpu.stat"))
        && let Some(v) = s
            .lines()
            .find_map(|l| l.strip_prefix("usage_usec "))
            .and_then(|v| v.trim().parse::<f64>().ok())
    {
        return v / 1e6;
    }
    let p = cgroup_root.join("cpuacct").join(rel).join("cpuacct.usage");
    std::fs::read_to_string(&p)
        .ok()
        .and_then(|s| s.trim().parse::<f64>().ok())
        .map(|ns| ns / 1e9)
        .unwrap_or_else(|| panic!("no cpu usage for {}", rel.display()))
}

/// This process's open perf descriptors (`anon_inode:[perf_event]`).
fn perf_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| {
        d.flatten()
            .filter(|e| {
                std::fs::read_link(e.path())
                    .is_ok_and(|l| l.to_string_lossy().contains("perf_event"))
            })
            .count()
    })
}

#[test]
fn software_counters_match_the_cgroup_and_hardware_is_counted_or_reported() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let cgroup_root = Path::new("/sys/fs/cgroup");
    let sysfs = Path::new("/sys");
    let Some(perf_dir) = perf_root(cgroup_root) else {
        skip::skip(
            "perf-cgroup",
            &format!(
                "no perf_event cgroup hierarchy (neither {0}/perf_event nor a v2 tree) under {0}",
                cgroup_root.display()
            ),
        );
        return;
    };
    let cpus = online_cpus(sysfs);
    assert!(!cpus.is_empty(), "online CPUs from /sys");
    let pid = std::process::id();
    let uid = format!("{pid:08x}-7e7f-4000-8000-00000000beef");
    let top = PathBuf::from(format!("kube-prober-perf-test-{pid}"));
    let pod_rel = top.join(format!(
        "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice",
        uid.replace('-', "_")
    ));
    let mut guard = CgroupGuard::default();
    if let Err(e) = guard.mkdirs(&[perf_dir.as_path()], &pod_rel) {
        skip::skip(
            "cgroups",
            &format!(
                "cannot create cgroups under {} ({e}); needs root and a writable cgroup mount",
                perf_dir.display()
            ),
        );
        return;
    }
    // On a pure v1 host the cgroup's CPU usage comes from cpuacct: the same pod there too.
    let cpuacct = cgroup_root.join("cpuacct");
    let v1_usage = perf_dir.ends_with("perf_event") && cpuacct.is_dir();
    if v1_usage {
        guard.mkdirs(&[cpuacct.as_path()], &pod_rel).unwrap();
    }
    let pod = Arc::new(TaskPod {
        uid: uid.clone(),
        namespace: "test".into(),
        name: "perf".into(),
        qos: "burstable".into(),
        cgroup_ids: vec![uid.clone()],
        labels: vec![],
        containers: vec![TaskContainer {
            name: "burn".into(),
            id: None,
            ready: true,
        }],
        requests: Default::default(),
        limits: Default::default(),
    });

    // Software events: what works in VMs. Not root: the documented state, then skip.
    let fds_before = perf_fds();
    let (mut sw, warnings) = PerfCollector::new("n", cgroup_root, sysfs, PerfMode::Software);
    if sw.event_set().is_none() {
        let s = sw.collect(&[]);
        assert!(!warnings.is_empty() && !s.open_failures.is_empty());
        skip::skip(
            "perf-cgroup",
            &format!(
                "software perf events cannot be opened in cgroup mode here ({:?}: {warnings:?}); needs root or CAP_PERFMON",
                s.open_failures
            ),
        );
        return;
    }
    assert!(warnings.is_empty(), "{warnings:?}");
    let first = sw.collect(std::slice::from_ref(&pod));
    assert_eq!(
        first.open_counters,
        (cpus.len() * 3) as u64,
        "one group of 3 per CPU"
    );
    assert_eq!(first.event_set, Some(PerfEventSet::Software));
    assert!(first.open_failures.is_empty(), "{:?}", first.open_failures);
    let t0 = first.tasks[0]
        .counts
        .task_clock_seconds
        .expect("task-clock");
    let usage0 = cgroup_cpu_seconds(cgroup_root, &perf_dir, &pod_rel);

    // Hardware (and auto) opened before the burn, so a counted set sees it.
    let (mut hw, hw_warnings) = PerfCollector::new("n", cgroup_root, sysfs, PerfMode::Hardware);
    let (mut auto, auto_warnings) = PerfCollector::new("n", cgroup_root, sysfs, PerfMode::Auto);
    let hw_first = hw.collect(std::slice::from_ref(&pod));
    auto.collect(std::slice::from_ref(&pod));

    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        &support::test_name(module_path!(), "child_worker"),
        "--nocapture",
        "--test-threads=1",
    ])
    .env(CHILD_ENV, "burn")
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .stderr(Stdio::null());
    let mut child = support::owned::spawn(cmd).unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let cpid = child.id().to_string();
    std::fs::write(perf_dir.join(&pod_rel).join("cgroup.procs"), &cpid).unwrap();
    if v1_usage {
        std::fs::write(cpuacct.join(&pod_rel).join("cgroup.procs"), &cpid).unwrap();
    }
    child.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
    guard.children.push(child);
    cgroup_guard::wait_done(&mut out);

    let second = sw.collect(std::slice::from_ref(&pod));
    let usage = cgroup_cpu_seconds(cgroup_root, &perf_dir, &pod_rel) - usage0;
    let c = second.tasks[0].counts;
    let clock = c.task_clock_seconds.expect("task-clock") - t0;
    let tolerance = 0.03 + 0.03 * usage;
    println!(
        "software: task-clock {clock:.4} s, cgroup cpu usage {usage:.4} s (tolerance {tolerance:.4} s), context switches {:?}, page faults {:?}, scaling {:?}",
        c.context_switches, c.page_faults, second.tasks[0].scaling_factor
    );
    assert!(
        usage >= BURN_SECONDS - 0.15,
        "the worker burned in the cgroup: {usage}"
    );
    assert!(
        (clock - usage).abs() <= tolerance,
        "task-clock {clock} vs cgroup {usage}"
    );
    assert!(c.context_switches.is_some_and(|v| v >= 1.0));
    assert!(c.page_faults.is_some());
    assert_eq!(c.cycles, None, "software set: no hardware values");
    assert_eq!(second.tasks[0].ipc, None);
    assert_eq!(
        second.tasks[0].scaling_factor,
        Some(1.0),
        "software events are never multiplexed"
    );

    // Hardware: counted, or the documented state.
    let hw_now = hw.collect(std::slice::from_ref(&pod));
    match hw.event_set() {
        Some(set) => {
            assert_eq!(set, PerfEventSet::Hardware);
            let p = &hw_now.tasks[0];
            let c0 = hw_first.tasks[0].counts;
            let cycles = p.counts.cycles.unwrap() - c0.cycles.unwrap();
            let instr = p.counts.instructions.unwrap() - c0.instructions.unwrap();
            println!(
                "hardware: counted: {cycles} cycles, {instr} instructions, IPC {:?}, MPKI {:?}",
                p.ipc, p.cache_mpki
            );
            assert!(cycles > 1e8 && instr > 1e8, "{cycles} {instr}");
            assert!(p.ipc.is_some_and(|v| v > 0.0 && v.is_finite()));
        }
        None => {
            println!(
                "hardware: not available here, reported as documented: failures {:?}, warning {hw_warnings:?}",
                hw_now.open_failures
            );
            assert!(hw_now.tasks.is_empty());
            assert_eq!(hw_now.open_counters, 0);
            assert!(
                hw_now
                    .open_failures
                    .iter()
                    .all(|(r, n)| FAILURE_REASONS.contains(r) && *n >= 1)
                    && !hw_now.open_failures.is_empty()
            );
            assert!(hw_warnings.len() == 1 && hw_warnings[0].contains("hardware"));
            // auto falls back to the software set, with the hardware failure counted.
            assert_eq!(auto.event_set(), Some(PerfEventSet::Software));
            assert!(auto_warnings[0].contains("falling back to software"));
            let a = auto.collect(std::slice::from_ref(&pod));
            assert_eq!(a.open_failures, hw_now.open_failures);
            let ac = a.tasks[0].counts.task_clock_seconds.unwrap();
            assert!(ac >= BURN_SECONDS - 0.15, "auto counted the burn: {ac}");
        }
    }

    // The pod leaves: its counters are closed and the descriptors released.
    assert_eq!(
        perf_fds() - fds_before,
        (sw.open_counters() + hw.open_counters() + auto.open_counters()) as usize,
        "open_counters counts the descriptors"
    );
    for c in [&mut sw, &mut hw, &mut auto] {
        let gone = c.collect(&[]);
        assert_eq!(gone.open_counters, 0);
        assert!(gone.tasks.is_empty());
    }
    assert_eq!(
        perf_fds(),
        fds_before,
        "every perf descriptor closed once the pod left"
    );
    drop(guard);
    assert!(
        !perf_dir.join(&top).exists(),
        "{} left behind",
        perf_dir.join(&top).display()
    );
}
