//! Task collection at 110 pods of 2 containers each (the kubelet's default pod limit).
//!
//! Run with `cargo bench --bench task_collect` (env `COLLECTIONS`, default 500; env
//! `DETAIL_EVERY`, default `1,2,3,4,5,6`: the `--task-detail-every` values measured, the
//! default always among them; env `CONTAINER_DETAIL_EVERY`: `same` (containers at N) or a
//! number, by default twice N as the node role; env `NUMA_FROM_STAT=0` reads `memory.numa_stat` on a one-node
//! host too, as before it was derived; env `NODE_ROLE_EXE` runs another kube-prober binary in
//! part 2; env `CHURN=0` keeps the fixture's values fixed in part 2). Two parts:
//!
//! 1. In process, on a fixture cgroup tree shaped like this machine's (v1 cpu, cpuacct,
//!    memory, cpuset plus the v2 `unified` tree; systemd driver, containerd scopes, a pause
//!    scope per pod, a `system.slice` of 40 services to walk past) and, where this machine
//!    lets us create them, the same 110 × 2 cgroups on the real kernel mounts (removed after):
//!    the first collection (which walks the tree), then CPU time (this thread's, user + system,
//!    so the kernel's time generating the files counts) per collection as the mean and the
//!    maximum over `COLLECTIONS` collections (a spike shows in the maximum), wall time, and how
//!    many cgroups' detail files each collection read; the series and bytes the set renders
//!    to on `/metrics`.
//! 2. The node-role binary against the stand-in API server with those 110 pods and the fixture
//!    root, whose CPU, memory and pressure values move every 250 ms as on a busy node (env
//!    `CHURN=0`: fixed): VmRSS and VmHWM after 15 s of 1 s collections, `/metrics` bytes and
//!    series.
//!
//! Budgets (issue #11): ≤ 5 ms CPU per collection of 110 pods, node-role RSS ≤ 16 MiB.
//! The result is a markdown report on stdout. Under `cargo test --benches` it does nothing.

use support::apiserver;
mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use common::{env_usize, loadavg, machine_info, mib, ms, rss_kib};
use kube_prober::model::{Snapshot, TaskContainer, TaskPod, TaskSet};
use kube_prober::outputs::prometheus::{Format, render};
use kube_prober::sources::task::cgroup::{
    CgroupReader, DEFAULT_DETAIL_EVERY, Hier, Hierarchies, MAX_DETAIL_EVERY, memory_nodes,
};
use support::task_fixture::{self as fixture, Driver, Layout, Runtime, Values};

const PODS: usize = 110;
const NODE: &str = "bench-node";

fn uid(i: usize) -> String {
    format!("{i:08x}-aaaa-4bbb-8ccc-dddddddddddd")
}

fn cid(i: usize, j: usize) -> String {
    format!("{i:04x}{j:02x}c0ffee")
}

fn pods() -> Vec<Arc<TaskPod>> {
    (0..PODS)
        .map(|i| {
            Arc::new(TaskPod {
                uid: uid(i),
                namespace: "bench".into(),
                name: format!("pod-{i}"),
                qos: ["burstable", "besteffort", "guaranteed"][i % 3].into(),
                cgroup_ids: vec![uid(i)],
                labels: vec![],
                containers: (0..2)
                    .map(|j| TaskContainer {
                        name: format!("c{j}"),
                        id: Some(cid(i, j)),
                        ready: true,
                    })
                    .collect(),
                requests: [("cpu".to_string(), 0.1), ("memory".to_string(), 1e8)]
                    .into_iter()
                    .collect(),
                limits: Default::default(),
            })
        })
        .collect()
}

fn build_tree(root: &Path) {
    fixture::init(root, Layout::Hybrid).unwrap();
    for s in 0..40 {
        let rel = PathBuf::from(format!("system.slice/service-{s}.service"));
        fixture::write_cgroup(root, Layout::Hybrid, &rel, &Values::seeded(s)).unwrap();
    }
    for i in 0..PODS {
        let qos = ["burstable", "besteffort", "guaranteed"][i % 3];
        let pdir = fixture::pod_dir(Driver::Systemd, qos, &uid(i));
        fixture::write_cgroup(root, Layout::Hybrid, &pdir, &Values::seeded(i as u64)).unwrap();
        for j in 0..2 {
            let c = pdir.join(fixture::container_dir(
                Driver::Systemd,
                Runtime::Containerd,
                &cid(i, j),
            ));
            fixture::write_cgroup(root, Layout::Hybrid, &c, &Values::seeded(j as u64)).unwrap();
        }
        let pause = pdir.join(fixture::container_dir(
            Driver::Systemd,
            Runtime::Containerd,
            &format!("{i:04x}ffpause"),
        ));
        fixture::write_cgroup(root, Layout::Hybrid, &pause, &Values::seeded(1)).unwrap();
    }
}

/// The same pods as real cgroups under the kernel's mounts; removed on drop.
struct RealTree {
    dirs: Vec<PathBuf>,
}

impl Drop for RealTree {
    fn drop(&mut self) {
        let mut d = self.dirs.clone();
        d.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
        for p in d {
            let _ = std::fs::remove_dir(&p);
        }
    }
}

fn real_tree(hier: &Hierarchies) -> Result<(RealTree, PathBuf), String> {
    let mut t = RealTree { dirs: Vec::new() };
    let top = PathBuf::from(format!("kube-prober-bench-{}", std::process::id()));
    let roots: Vec<PathBuf> = [
        Hier::Unified,
        Hier::Cpu,
        Hier::Cpuacct,
        Hier::Memory,
        Hier::Cpuset,
    ]
    .iter()
    .filter_map(|h| hier.root(*h).map(Path::to_path_buf))
    .collect();
    for i in 0..PODS {
        let qos = ["burstable", "besteffort", "guaranteed"][i % 3];
        let pdir = top.join(fixture::pod_dir(Driver::Systemd, qos, &uid(i)));
        for j in 0..3 {
            let id = if j == 2 {
                format!("{i:04x}ffpause")
            } else {
                cid(i, j)
            };
            let rel = pdir.join(fixture::container_dir(
                Driver::Systemd,
                Runtime::Containerd,
                &id,
            ));
            for r in &roots {
                let mut p = r.clone();
                for comp in rel.components() {
                    p.push(comp);
                    if !p.exists() {
                        std::fs::create_dir(&p).map_err(|e| format!("{}: {e}", p.display()))?;
                        t.dirs.push(p.clone());
                    }
                }
            }
        }
    }
    Ok((t, top))
}

struct Measured {
    first_ms: f64,
    cpu_ms: f64,
    /// The most CPU one collection took (spikes show here).
    max_cpu_ms: f64,
    wall_ms: f64,
    /// Cgroups whose detail files one collection read: the fewest and the most.
    detail_min: u64,
    detail_max: u64,
}

/// CPU time of this thread (the reader runs on it), user + system, precise to the
/// nanosecond (clock ticks are 10 ms: too coarse for one collection).
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec to the valid pointer it is given.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn measure(hier: Hierarchies, pods: &[Arc<TaskPod>], n: usize, every: u64) -> (Measured, TaskSet) {
    // As the node role does: on a host with one NUMA node `memory.numa_stat` is derived
    // (env `NUMA_FROM_STAT=0`: read the file, as before).
    let nodes = if std::env::var("NUMA_FROM_STAT").is_ok_and(|v| v == "0") {
        None
    } else {
        memory_nodes(Path::new("/sys"))
    };
    let mut reader = CgroupReader::new(hier, 4096)
        .with_detail_every(every)
        .with_container_detail_every(container_every(every))
        .with_memory_nodes(nodes.as_deref());
    let t0 = Instant::now();
    let first = reader.collect(pods);
    let first_ms = ms(t0.elapsed());
    assert!(
        first
            .iter()
            .all(|t| t.stats.is_some() && t.containers.len() == 2),
        "every pod and container found"
    );
    let c0 = thread_cpu();
    let w0 = Instant::now();
    let mut last = Vec::new();
    let mut max_cpu = Duration::ZERO;
    let (mut detail_min, mut detail_max) = (u64::MAX, 0);
    for _ in 0..n {
        let d0 = reader.reads.detail_cgroups;
        let c = thread_cpu();
        last = reader.collect(pods);
        max_cpu = max_cpu.max(thread_cpu().saturating_sub(c));
        let d = reader.reads.detail_cgroups - d0;
        detail_min = detail_min.min(d);
        detail_max = detail_max.max(d);
    }
    let wall = w0.elapsed();
    let cpu = thread_cpu().saturating_sub(c0);
    (
        Measured {
            first_ms,
            cpu_ms: ms(cpu) / n as f64,
            max_cpu_ms: ms(max_cpu),
            wall_ms: ms(wall) / n as f64,
            detail_min,
            detail_max,
        },
        TaskSet {
            node: NODE.into(),
            tasks: last,
            collected_at: Some(SystemTime::now()),
        },
    )
}

/// `--task-container-detail-every` for a given N: env `CONTAINER_DETAIL_EVERY` (`same`: N;
/// a number: that), by default what the node role takes (twice N, at most 60).
fn container_every(every: u64) -> u64 {
    match std::env::var("CONTAINER_DETAIL_EVERY").ok().as_deref() {
        Some("same") => every,
        Some(v) => v.trim().parse().unwrap_or(every),
        None => (2 * every).min(MAX_DETAIL_EVERY),
    }
}

/// `DETAIL_EVERY` (comma-separated, default `1,2,3,4,5,6` plus the default N).
fn detail_everys() -> Vec<u64> {
    let mut v: Vec<u64> = std::env::var("DETAIL_EVERY")
        .ok()
        .map(|s| s.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| (1..=6).collect());
    v.push(DEFAULT_DETAIL_EVERY);
    v.sort_unstable();
    v.dedup();
    v
}

fn row(tree: &str, every: u64, m: &Measured) {
    let default = if every == DEFAULT_DETAIL_EVERY {
        " (default)"
    } else {
        ""
    };
    println!(
        "| {tree} | {every}{default} | {} | {:.2} | {:.3} | {:.3} | {:.3} | {}–{} |",
        container_every(every),
        m.first_ms,
        m.cpu_ms,
        m.max_cpu_ms,
        m.wall_ms,
        m.detail_min,
        m.detail_max
    );
}

fn series_and_bytes(set: TaskSet) -> (usize, usize) {
    let mut snap = Snapshot::empty(SystemTime::now());
    snap.tasks = Some(Arc::new(set));
    let body = render(&snap, Format::Text);
    let series = body
        .lines()
        .filter(|l| l.starts_with("kube_prober_task_") || l.starts_with("kube_prober_container_"))
        .count();
    (series, body.len())
}

/// VmRSS, VmHWM, RssAnon, RssFile (KiB) of `pid` now; `None` once it is gone.
fn rss_now(pid: u32) -> Option<[u64; 4]> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let get = |key: &str| -> Option<u64> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))?
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()
    };
    Some([
        get("VmRSS:")?,
        get("VmHWM:")?,
        get("RssAnon:")?,
        get("RssFile:")?,
    ])
}

/// Samples the node role's memory every 100 ms from its start until `stop`: where the
/// start-up peak (VmHWM) forms.
fn sample_rss(
    pid: u32,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<Vec<(u64, [u64; 4])>> {
    std::thread::spawn(move || {
        let t0 = Instant::now();
        let mut out = Vec::new();
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            let Some(v) = rss_now(pid) else { break };
            out.push((t0.elapsed().as_millis() as u64, v));
            std::thread::sleep(Duration::from_millis(100));
        }
        out
    })
}

/// The samples where VmRSS moved by 0.5 MiB or more since the last one shown, and the
/// first one at the final VmHWM, as table rows.
fn rss_timeline(samples: &[(u64, [u64; 4])]) -> String {
    let peak = samples.iter().map(|(_, v)| v[1]).max().unwrap_or(0);
    let mut out = String::from(
        "| t ms | VmRSS MiB | VmHWM MiB | RssAnon MiB | RssFile MiB |\n|---|---|---|---|---|\n",
    );
    let mut shown: Option<u64> = None;
    let mut peak_shown = false;
    for (t, v) in samples {
        let at_peak = !peak_shown && v[1] == peak;
        if at_peak || shown.is_none_or(|r| r.abs_diff(v[0]) >= 512) {
            out.push_str(&format!(
                "| {t} | {:.1} | {:.1}{} | {:.1} | {:.1} |\n",
                mib(v[0]),
                mib(v[1]),
                if at_peak { " (peak reached)" } else { "" },
                mib(v[2]),
                mib(v[3])
            ));
            shown = Some(v[0]);
            peak_shown |= at_peak;
        }
    }
    out
}

/// Every cgroup directory of the 110 pods (pod, two containers, pause) relative to each
/// hierarchy of the fixture tree.
fn pod_cgroups() -> Vec<PathBuf> {
    let mut out = Vec::new();
    for i in 0..PODS {
        let qos = ["burstable", "besteffort", "guaranteed"][i % 3];
        let pdir = fixture::pod_dir(Driver::Systemd, qos, &uid(i));
        for id in [cid(i, 0), cid(i, 1), format!("{i:04x}ffpause")] {
            out.push(pdir.join(fixture::container_dir(
                Driver::Systemd,
                Runtime::Containerd,
                &id,
            )));
        }
        out.push(pdir);
    }
    out
}

/// Writes `body` over the start of `path` without truncating it first (the node role keeps
/// the file open and reads it from offset 0: it never sees an empty file). Bodies of one file
/// keep one length (fixed-width numbers).
fn overwrite(path: &Path, body: &str) {
    use std::io::Write as _;
    if let Ok(mut f) = std::fs::OpenOptions::new().write(true).open(path) {
        let _ = f.write_all(body.as_bytes());
    }
}

/// As on a node whose pods run: every 250 ms each cgroup's CPU and memory usage (read on every
/// collection) and its pressure totals (read with the detail files) move, so the node role's
/// task series change from one collection to the next (the fixture's values are otherwise
/// fixed, which would let every rendered row stay the same). env `CHURN=0`: no changes.
fn churn(root: &Path, stop: Arc<std::sync::atomic::AtomicBool>) -> std::thread::JoinHandle<()> {
    let root = root.to_path_buf();
    let dirs = pod_cgroups();
    let write = move |n: u64| {
        for (k, rel) in dirs.iter().enumerate() {
            let k = k as u64;
            let cpu = format!("{:020}\n", (n + 1) * 7_000_000 * (k + 1));
            overwrite(&root.join("cpuacct").join(rel).join("cpuacct.usage"), &cpu);
            let mem = format!("{:020}\n", 50_000_000 + ((n * 4096 * (k + 3)) % 10_000_000));
            overwrite(
                &root.join("memory").join(rel).join("memory.usage_in_bytes"),
                &mem,
            );
            let total = (n + 1) * 1000 * (k + 1);
            let pressure = format!(
                "some avg10=0.00 avg60=0.00 avg300=0.00 total={total:020}\nfull avg10=0.00 avg60=0.00 avg300=0.00 total={:020}\n",
                total / 2
            );
            for f in ["cpu.pressure", "memory.pressure", "io.pressure"] {
                overwrite(&root.join("unified").join(rel).join(f), &pressure);
            }
        }
    };
    // Fixed-width from here on (the first write makes each file its final length).
    write(0);
    std::thread::spawn(move || {
        let mut n = 1;
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            write(n);
            n += 1;
            std::thread::sleep(Duration::from_millis(250));
        }
    })
}

async fn node_role_rss(root: &Path) -> (u64, u64, usize, usize, String, String) {
    let api = apiserver::start().await;
    api.set_nodes(vec![apiserver::node(NODE, ("8", "32Gi"), ("8", "32Gi"))]);
    for i in 0..PODS {
        let mut p = apiserver::pod("bench", &format!("pod-{i}"), NODE);
        p.metadata.uid = Some(uid(i));
        let st = p.status.as_mut().unwrap();
        st.qos_class = Some("Burstable".into());
        if let Some(cs) = st.container_statuses.as_mut() {
            let mut second = cs[0].clone();
            second.name = "c1".into();
            second.container_id = Some(format!("containerd://{}", cid(i, 1)));
            cs[0].name = "c0".into();
            cs[0].container_id = Some(format!("containerd://{}", cid(i, 0)));
            cs.push(second);
        }
        api.upsert(&p);
    }
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    api.write_kubeconfig(&kc).unwrap();
    // env `NODE_ROLE_EXE`: another kube-prober binary (e.g. a build before a change).
    let exe = std::env::var("NODE_ROLE_EXE")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_kube-prober").to_string());
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let listen = format!("127.0.0.1:{port}");
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let churner = (std::env::var("CHURN").as_deref() != Ok("0")).then(|| churn(root, stop.clone()));
    let mut cmd = std::process::Command::new(exe);
    cmd.args([
        "--role",
        "node",
        "--listen",
        &listen,
        "--tick-interval",
        "1s",
    ])
    .args(["--interval", "1s", "--timeout", "1s", "--log-level", "warn"])
    .arg("--cgroup-root")
    .arg(root)
    .env("KUBECONFIG", &kc)
    .env("NODE_NAME", NODE)
    .env("HOME", "/nonexistent")
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::null());
    let mut child = support::owned::spawn(cmd).unwrap();
    let sampler = sample_rss(child.id(), stop.clone());
    let client = reqwest::Client::new();
    let url = format!("http://{listen}/metrics");
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut body = String::new();
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(500)).await;
        if let Ok(r) = client.get(&url).send().await
            && let Ok(b) = r.text().await
            && b.matches("kube_prober_task_up{").count() == PODS
        {
            body = b;
            break;
        }
    }
    assert!(!body.is_empty(), "node role never served 110 tasks");
    tokio::time::sleep(Duration::from_secs(15)).await;
    if let Ok(r) = client.get(&url).send().await
        && let Ok(b) = r.text().await
    {
        body = b;
    }
    let (rss, hwm) = rss_kib(child.id());
    let detail = rss_detail(child.id());
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let timeline = rss_timeline(&sampler.join().unwrap_or_default());
    if let Some(c) = churner {
        let _ = c.join();
    }
    let _ = child.kill();
    let _ = child.wait();
    let series = body.lines().filter(|l| !l.starts_with('#')).count();
    (rss, hwm, series, body.len(), detail, timeline)
}

/// Where the resident memory is: `RssAnon`, `RssFile` and `Threads` from /proc/PID/status,
/// and the resident KiB of the largest mappings from /proc/PID/smaps (heap, stacks, binary).
fn rss_detail(pid: u32) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let mut out: Vec<String> = status
        .lines()
        .filter(|l| {
            ["RssAnon", "RssFile", "Threads"]
                .iter()
                .any(|k| l.starts_with(k))
        })
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap_or_default();
    let mut by_name: std::collections::BTreeMap<String, u64> = Default::default();
    let mut cur = String::new();
    for l in smaps.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.first()
            .is_some_and(|a| a.contains('-') && !a.ends_with(':'))
        {
            cur = f.get(5).copied().map_or("[anon]".to_string(), |s| {
                s.rsplit('/').next().unwrap_or(s).to_string()
            });
        } else if f.first() == Some(&"Rss:") {
            *by_name.entry(cur.clone()).or_default() +=
                f.get(1).and_then(|v| v.parse().ok()).unwrap_or(0);
        }
    }
    let mut v: Vec<_> = by_name.into_iter().collect();
    v.sort_by_key(|(_, k)| std::cmp::Reverse(*k));
    out.extend(v.iter().take(6).map(|(n, k)| format!("{n} {k} kB")));
    out.join("; ")
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("task_collect: benchmark only; run `cargo bench --bench task_collect`");
        return;
    }
    let n = env_usize("COLLECTIONS", 500);
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("cgroup");
    build_tree(&root);
    let pods = pods();

    println!("# task_collect: {PODS} pods × 2 containers, {n} collections\n");
    for (k, v) in machine_info() {
        println!("- {k}: {v}");
    }
    println!("- load average before: {}\n", loadavg());
    println!(
        "| tree | N (`--task-detail-every`) | M (`--task-container-detail-every`) | first collection (walk) ms | CPU ms / collection | max CPU ms of one collection | wall ms / collection | cgroups with detail read per collection |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let mut set = None;
    for every in detail_everys() {
        let (m, s) = measure(Hierarchies::detect(&root), &pods, n, every);
        row(
            "fixture (files in a temp dir, hybrid v1+unified)",
            every,
            &m,
        );
        if every == DEFAULT_DETAIL_EVERY {
            set = Some(s);
        }
    }
    let real = Hierarchies::detect(Path::new("/sys/fs/cgroup"));
    match real_tree(&real) {
        Ok((guard, top)) => {
            let tree = format!("real kernel cgroups ({})", real.describe());
            for every in detail_everys() {
                let (m, _) = measure(real.clone(), &pods, n, every);
                row(&tree, every, &m);
            }
            drop(guard);
            let _ = top;
        }
        Err(e) => println!("| real kernel cgroups | skipped: {e} | | | | | | |"),
    }
    let Some(set) = set else { return };
    let (series, bytes) = series_and_bytes(set);
    println!("\nTask and container series on /metrics: {series}; whole body {bytes} bytes.\n");

    let rt = tokio::runtime::Runtime::new().unwrap();
    let (rss, hwm, series, bytes, detail, timeline) = rt.block_on(node_role_rss(&root));
    println!("| node role binary (110 pods, 1 s collections, after 15 s) | value |");
    println!("|---|---|");
    println!("| VmRSS | {:.1} MiB |", mib(rss));
    println!("| VmHWM | {:.1} MiB |", mib(hwm));
    println!("| /metrics series | {series} |");
    println!("| /metrics bytes | {bytes} |");
    println!("\nResident memory of the node role: {detail}");
    println!("\nNode role memory from its start (100 ms samples):\n\n{timeline}");
    println!("\nload average after: {}", loadavg());
}
