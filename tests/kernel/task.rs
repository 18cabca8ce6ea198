//! The real kernel: kubelet-shaped pod and container cgroups made under this machine's cgroup
//! mounts (v1 cpu, cpuacct, memory, cpuset and the v2 `unified` tree of a hybrid host, or one
//! v2 tree), real processes in them that burn CPU and allocate memory, and the reader's values
//! compared with the kernel's own counters and with what the processes did.
//!
//! Tolerances: CPU seconds within 20 ms of the kernel's counter read right after (the
//! processes are idle by then) and within 150 ms of the CPU time the process itself reports
//! (it ran a little before it was moved into the cgroup); memory within 2 MiB of the kernel's
//! counter, and at least the 64 MiB the process touched, at most 64 + 24 MiB.
//!
//! Every cgroup is removed by a guard, also when an assertion fails. Names carry the pid and
//! a counter, so parallel runs never meet. Skips (with the reason printed) only where cgroups
//! cannot be created (not root, read-only or absent mounts).

use cgroup_guard::CgroupGuard;
use support::cgroup_guard;
use support::skip;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube_prober::model::{TaskContainer, TaskPod};
use kube_prober::sources::task::cgroup::{CgroupReader, Hier, Hierarchies, memory_nodes};

const CHILD_ENV: &str = "KUBE_PROBER_TASK_KERNEL_CHILD";
const MEM_BYTES: usize = 64 << 20;
/// What the memory worker touches on `more`.
const MORE_BYTES: usize = 16 << 20;
const BURN_SECONDS: f64 = 1.0;

/// The worker: runs as a child of this test binary (`child_worker` with the env set). Waits
/// for `go` on stdin (it has been moved into its cgroups by then), does its work, prints
/// `done`, and waits for stdin to close.
#[test]
fn child_worker() {
    let Ok(role) = std::env::var(CHILD_ENV) else {
        return;
    };
    let mut line = String::new();
    let stdin = std::io::stdin();
    stdin.lock().read_line(&mut line).unwrap();
    let mut keep: Vec<u8> = Vec::new();
    match role.as_str() {
        "burn" => {
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
        }
        "mem" => {
            keep = vec![0u8; MEM_BYTES];
            for i in (0..keep.len()).step_by(4096) {
                keep[i] = 1;
            }
            std::hint::black_box(&keep);
        }
        _ => {}
    }
    println!("done");
    std::io::stdout().flush().unwrap();
    // `more`: touch MORE_BYTES more (a change in memory.stat), then `done` again; EOF ends.
    let mut more: Vec<Vec<u8>> = Vec::new();
    loop {
        let mut rest = String::new();
        match stdin.lock().read_line(&mut rest) {
            Ok(n) if n > 0 && rest.trim() == "more" => {
                let mut m = vec![0u8; MORE_BYTES];
                for i in (0..m.len()).step_by(4096) {
                    m[i] = 1;
                }
                more.push(std::hint::black_box(m));
                println!("done");
                std::io::stdout().flush().unwrap();
            }
            _ => break,
        }
    }
    drop(keep);
    drop(more);
}

fn spawn_worker(role: &str) -> (Child, BufReader<std::process::ChildStdout>) {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        &support::test_name(module_path!(), "child_worker"),
        "--nocapture",
        "--test-threads=1",
    ])
    .env(CHILD_ENV, role)
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .stderr(Stdio::null());
    let mut child = support::owned::spawn(cmd).unwrap();
    let out = BufReader::new(child.stdout.take().unwrap());
    (child, out)
}

fn read_u64(p: &Path) -> u64 {
    std::fs::read_to_string(p)
        .unwrap_or_default()
        .trim()
        .parse()
        .unwrap_or(0)
}

/// The effective-cpuset files of this machine: (hierarchy root, cpus file, mems file).
fn cpuset_files(hier: &Hierarchies) -> Option<(PathBuf, &'static str, &'static str)> {
    if let Some(d) = hier.root(Hier::Cpuset) {
        return Some((
            d.to_path_buf(),
            "cpuset.effective_cpus",
            "cpuset.effective_mems",
        ));
    }
    let u = hier.root(Hier::Unified)?;
    Some((
        u.to_path_buf(),
        "cpuset.cpus.effective",
        "cpuset.mems.effective",
    ))
}

/// Ids in a kernel list (`0-3,8`), by expanding it.
fn count_list(s: &str) -> u32 {
    let mut ids = std::collections::BTreeSet::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        for i in a.parse::<u32>().unwrap()..=b.parse::<u32>().unwrap() {
            ids.insert(i);
        }
    }
    ids.len() as u32
}

static COUNTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

#[test]
fn real_cgroups_match_the_kernel_and_the_processes() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let root = Path::new("/sys/fs/cgroup");
    let hier = Hierarchies::detect(root);
    if hier.is_empty() {
        skip::skip(
            "cgroups",
            &format!("no cgroup hierarchy under {}", root.display()),
        );
        return;
    }
    let roots: Vec<PathBuf> = [
        Hier::Unified,
        Hier::Cpu,
        Hier::Cpuacct,
        Hier::Memory,
        Hier::Cpuset,
    ]
    .iter()
    .filter_map(|h| hier.root(*h).map(Path::to_path_buf))
    .fold(Vec::new(), |mut v, r| {
        if !v.contains(&r) {
            v.push(r);
        }
        v
    });
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let pid = std::process::id();
    // A pod UID unique to this run: pid and counter in its hex digits.
    let uid = format!(
        "{pid:08x}-{n:04x}-4000-8000-{:012x}",
        Instant::now().elapsed().as_nanos() as u64 ^ 0xfeed
    );
    let top = PathBuf::from(format!("kube-prober-test-{pid}-{n}"));
    let pod_rel = top.join(format!(
        "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice",
        uid.replace('-', "_")
    ));
    let (burn_id, mem_id) = (format!("{pid:x}b{n:x}"), format!("{pid:x}a{n:x}"));
    let burn_rel = pod_rel.join(format!("cri-containerd-{burn_id}.scope"));
    let mem_rel = pod_rel.join(format!("cri-containerd-{mem_id}.scope"));
    let mut guard = CgroupGuard::default();
    for rel in [&burn_rel, &mem_rel] {
        if let Err(e) = guard.mkdirs(&roots.iter().map(PathBuf::as_path).collect::<Vec<_>>(), rel) {
            skip::skip(
                "cgroups",
                &format!(
                    "cannot create cgroups under {} ({e}); needs root and writable cgroup mounts",
                    root.display()
                ),
            );
            return;
        }
    }
    // The effective cpuset, as the kubelet's runtime sets it on v1 (copied from the parent),
    // top-down: the root's CPUs and memory nodes on every level made here.
    let cpuset = cpuset_files(&hier);
    if let Some((dir, cpus_file, mems_file)) = &cpuset {
        let cpus = std::fs::read_to_string(dir.join(cpus_file)).unwrap();
        let mems = std::fs::read_to_string(dir.join(mems_file)).unwrap();
        for rel in [&burn_rel, &mem_rel] {
            let mut p = dir.clone();
            for comp in rel.components() {
                p.push(comp);
                // v1 names the writable files cpuset.cpus and cpuset.mems.
                if !hier.pure_v2 {
                    std::fs::write(p.join("cpuset.cpus"), cpus.trim()).unwrap();
                    std::fs::write(p.join("cpuset.mems"), mems.trim()).unwrap();
                }
            }
        }
    }
    let memory_root = hier
        .root(Hier::Memory)
        .or(hier.root(Hier::Unified))
        .unwrap()
        .to_path_buf();
    // A limit on the memory container, as the kubelet would set it.
    let limit: u64 = 256 << 20;
    let limit_file = if hier.pure_v2 {
        "memory.max"
    } else {
        "memory.limit_in_bytes"
    };
    let has_memory = memory_root.join(&mem_rel).join(limit_file).exists();
    if has_memory {
        std::fs::write(
            memory_root.join(&mem_rel).join(limit_file),
            limit.to_string(),
        )
        .unwrap();
    }

    let mut outs = Vec::new();
    for (role, rel) in [("burn", &burn_rel), ("mem", &mem_rel)] {
        let (mut child, out) = spawn_worker(role);
        let cpid = child.id().to_string();
        // Into every hierarchy but cpuset (which needs cpus and mems set first).
        for r in &roots {
            if Some(r.as_path()) == hier.root(Hier::Cpuset) {
                continue;
            }
            std::fs::write(r.join(rel).join("cgroup.procs"), &cpid).unwrap();
        }
        child.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
        guard.children.push(child);
        outs.push((cpid, out));
    }
    for (_, out) in &mut outs {
        cgroup_guard::wait_done(out);
    }
    let burn_pid = outs[0].0.clone();
    let burn_cpu = cgroup_guard::proc_cpu_seconds(&burn_pid).unwrap();

    let pod = Arc::new(TaskPod {
        uid: uid.clone(),
        namespace: "test".into(),
        name: "kernel".into(),
        qos: "burstable".into(),
        cgroup_ids: vec![uid.clone()],
        labels: vec![],
        containers: vec![
            TaskContainer {
                name: "burn".into(),
                id: Some(burn_id.clone()),
                ready: true,
            },
            TaskContainer {
                name: "mem".into(),
                id: Some(mem_id.clone()),
                ready: true,
            },
        ],
        requests: Default::default(),
        limits: Default::default(),
    });
    // Detail files every 3 collections: the pod and its two containers, one a collection.
    let every = 3u64;
    let mut reader = CgroupReader::new(hier.clone(), 4096).with_detail_every(every);
    let pod_arc = pod.clone();
    let got = reader.collect(&[pod]);
    assert_eq!(reader.reads.detail_cgroups, 3, "read fully when found");
    let t = &got[0];
    let pod_stats = t
        .stats
        .as_ref()
        .expect("pod cgroup found by walking the real tree");
    assert_eq!(t.containers.len(), 2, "both container scopes found");
    let burn = &t.containers[0].stats;
    let mem = &t.containers[1].stats;

    // CPU against the kernel's counter and the process's own CPU time.
    let kernel_cpu = if let Some(d) = hier.root(Hier::Cpuacct) {
        read_u64(&d.join(&burn_rel).join("cpuacct.usage")) as f64 / 1e9
    } else {
        let s = std::fs::read_to_string(
            hier.root(Hier::Unified)
                .unwrap()
                .join(&burn_rel)
                .join("cpu.stat"),
        )
        .unwrap();
        s.lines()
            .find_map(|l| l.strip_prefix("usage_usec "))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap()
            / 1e6
    };
    let cpu = burn.cpu_seconds.expect("cpu seconds");
    println!("burn: reported {cpu:.3} s, kernel {kernel_cpu:.3} s, process {burn_cpu:.3} s");
    assert!(
        (cpu - kernel_cpu).abs() < 0.02,
        "reported {cpu} vs kernel {kernel_cpu}"
    );
    assert!(
        (cpu - burn_cpu).abs() < 0.15,
        "reported {cpu} vs process {burn_cpu}"
    );
    assert!(
        cpu >= BURN_SECONDS - 0.15,
        "the worker burned {BURN_SECONDS} s"
    );
    let pod_cpu = pod_stats.cpu_seconds.unwrap();
    assert!(
        pod_cpu + 0.001 >= cpu + mem.cpu_seconds.unwrap_or(0.0),
        "pod {pod_cpu} counts its containers"
    );

    if has_memory {
        let usage_file = if hier.pure_v2 {
            "memory.current"
        } else {
            "memory.usage_in_bytes"
        };
        let kernel_mem = read_u64(&memory_root.join(&mem_rel).join(usage_file)) as f64;
        let used = mem.memory_usage_bytes.expect("memory usage");
        println!("mem: reported {used} B, kernel {kernel_mem} B");
        let mib = (1 << 20) as f64;
        assert!(
            (used - kernel_mem).abs() <= 2.0 * mib,
            "reported {used} vs kernel {kernel_mem}"
        );
        assert!(
            used >= MEM_BYTES as f64,
            "at least what the process touched: {used}"
        );
        assert!(used <= (MEM_BYTES as f64) + 24.0 * mib, "{used}");
        let rss = mem.memory_rss_bytes.expect("rss");
        assert!(rss >= MEM_BYTES as f64 * 0.95, "rss {rss}");
        let ws = mem.memory_working_set_bytes.expect("working set");
        assert!(
            ws <= used && ws >= MEM_BYTES as f64 * 0.95,
            "working set {ws}"
        );
        assert_eq!(mem.memory_limit_bytes, Some(limit as f64));
        assert_eq!(burn.memory_limit_bytes, None, "no limit: absent");
        assert!(
            pod_stats.memory_usage_bytes.unwrap() >= used,
            "pod counts its containers"
        );
        assert!(mem.page_faults.unwrap_or(0) >= (MEM_BYTES / 4096) as u64 / 2);
        assert_eq!(
            mem.oom_kills,
            Some(0),
            "OOM kills from the first (detail) read"
        );
    } else {
        println!("no memory controller on this hierarchy: memory values must be absent");
        assert_eq!(mem.memory_usage_bytes, None);
    }
    // The effective cpuset against the kernel's own list, counted here apart from the parser.
    match &cpuset {
        Some((dir, cpus_file, mems_file)) if dir.join(&pod_rel).join(cpus_file).exists() => {
            let cpus =
                count_list(&std::fs::read_to_string(dir.join(&pod_rel).join(cpus_file)).unwrap());
            let mems =
                count_list(&std::fs::read_to_string(dir.join(&pod_rel).join(mems_file)).unwrap());
            println!("cpuset: kernel {cpus} cpus, {mems} memory nodes");
            assert!(cpus >= 1, "the test set the root's CPUs");
            assert_eq!(pod_stats.cpuset_cpus, Some(cpus));
            assert_eq!(pod_stats.cpuset_memory_nodes, Some(mems));
            assert_eq!(burn.cpuset_cpus, Some(cpus));
        }
        _ => {
            println!("no effective cpuset offered: cpuset values must be absent");
            assert_eq!(pod_stats.cpuset_cpus, None);
        }
    }
    // A limit set and memory touched after the cgroup was found show within N collections:
    // the kept file is read again from offset 0 and the kernel regenerates it. Each of the 3
    // cgroups' detail files are read once in the N = 3 collections, one cgroup per collection.
    if has_memory {
        let new_limit: u64 = 128 << 20;
        std::fs::write(
            memory_root.join(&mem_rel).join(limit_file),
            new_limit.to_string(),
        )
        .unwrap();
        let rss_before = mem.memory_rss_bytes.expect("rss");
        let mem_child = guard.children[1].stdin.as_mut().expect("worker stdin");
        mem_child.write_all(b"more\n").unwrap();
        cgroup_guard::wait_done(&mut outs[1].1);
        let counts0 = reader.detail_reads();
        let mut last = None;
        for k in 0..every {
            let d0 = reader.reads.detail_cgroups;
            let f0 = reader.reads.fast_files;
            let got = reader.collect(std::slice::from_ref(&pod_arc));
            assert_eq!(
                reader.reads.detail_cgroups - d0,
                1,
                "collection {k}: one cgroup's details"
            );
            // Every collection reads CPU usage and memory usage of each cgroup, one file each
            // (`cpuacct.usage` or the unified `cpu.stat`; `memory.usage_in_bytes` or
            // `memory.current`); throttling (v1) and OOM kills are detail files.
            assert_eq!(
                reader.reads.fast_files - f0,
                2 * 3,
                "collection {k}: CPU and memory usage of the 3 cgroups"
            );
            last = Some(got[0].containers[1].stats.clone());
        }
        let counts1 = reader.detail_reads();
        assert_eq!(counts0.len(), 3);
        for (a, b) in counts0.iter().zip(&counts1) {
            assert_eq!(b.1 - a.1, 1, "{:?}: detail read once in N collections", a.0);
        }
        let last = last.expect("collected");
        assert_eq!(
            last.memory_limit_bytes,
            Some(new_limit as f64),
            "limit change within N collections"
        );
        let rss = last.memory_rss_bytes.expect("rss");
        println!("mem after `more`: rss {rss_before} -> {rss} B");
        assert!(
            rss >= rss_before + MORE_BYTES as f64 * 0.95,
            "memory.stat change within N collections: {rss_before} -> {rss}"
        );
        let ws = last.memory_working_set_bytes.expect("working set");
        let used = last.memory_usage_bytes.expect("usage");
        assert!(
            ws >= rss * 0.95 && ws <= used + (1 << 20) as f64,
            "ws {ws} used {used}"
        );
        assert!(
            reader.kept_files() > 0,
            "files are kept open between collections"
        );
    }
    // One NUMA node: the node's bytes derived from `memory.stat` equal what the kernel's
    // `memory.numa_stat` says, for the pod and both containers (the workers are idle, blocked
    // on stdin; a read pair is taken when two file reads around the derived one agree).
    let nodes = memory_nodes(Path::new("/sys"));
    match nodes.as_deref() {
        Some([_]) if has_memory => {
            let pods = [pod_arc.clone()];
            let mut file = CgroupReader::new(hier.clone(), 4096).with_detail_every(1);
            let mut derived = CgroupReader::new(hier.clone(), 4096)
                .with_detail_every(1)
                .with_memory_nodes(nodes.as_deref());
            let numa = |t: &kube_prober::model::TaskSample| {
                let mut v = vec![t.stats.as_ref().expect("pod").numa_bytes.clone()];
                v.extend(t.containers.iter().map(|c| c.stats.numa_bytes.clone()));
                v
            };
            let mut compared = false;
            for _ in 0..10 {
                let f1 = numa(&file.collect(&pods)[0]);
                let d = numa(&derived.collect(&pods)[0]);
                let f2 = numa(&file.collect(&pods)[0]);
                if f1 != f2 {
                    continue;
                }
                println!("numa: file {f1:?}, derived {d:?}");
                assert_eq!(d, f1, "memory.stat's LRU total equals memory.numa_stat");
                assert!(f1.iter().all(|n| n.len() == 1));
                assert!(
                    f1[2][0].1 >= MEM_BYTES as f64 * 0.95,
                    "the mem worker's pages"
                );
                compared = true;
                break;
            }
            assert!(compared, "memory.numa_stat never stable over two reads");
            assert!(
                file.reads.detail_files > derived.reads.detail_files,
                "the derived reader skips memory.numa_stat"
            );
        }
        _ => println!("NUMA derivation not compared: memory nodes {nodes:?}, memory {has_memory}"),
    }
    if let Some(u) = hier.root(Hier::Unified)
        && u.join(&pod_rel).join("cpu.pressure").exists()
    {
        assert!(
            pod_stats
                .pressure
                .iter()
                .any(|p| p.resource == "cpu" && p.kind == "some")
        );
    }
    drop(guard);
    for r in &roots {
        assert!(
            !r.join(&top).exists(),
            "{} left behind",
            r.join(&top).display()
        );
    }
}
