//! The node's platform facts (WCA's `platform_*`): topology from `/sys/devices/system/cpu` and
//! `/sys/devices/system/node` (any architecture, no `/proc/cpuinfo`), per-NUMA-node memory,
//! busy CPU seconds per CPU, memory used and a small vmstat set from procfs.
//! This file does the I/O; every file is parsed by the shared parsers of
//! [`crate::sources::procfs`], so busy CPU time and memory used are the same figures the host
//! usage source reports.

use std::collections::BTreeSet;
use std::path::Path;

use crate::model::{NumaMemory, Platform};
use crate::shared::error::{Error, ParseError};
use crate::sources::procfs::{self, CpuStat};

/// `/proc/stat` counts in USER_HZ, which Linux fixes at 100 for user space on every
/// architecture (the kernel's CONFIG_HZ does not change it).
pub const USER_HZ: f64 = 100.0;

/// Busy seconds (user+nice+system+irq+softirq+steal) of each `cpuN` line of `/proc/stat`.
pub fn cpu_busy_seconds(stat: &CpuStat) -> Vec<(u32, f64)> {
    stat.per_cpu
        .iter()
        .map(|(&cpu, t)| (cpu, t.busy() as f64 / USER_HZ))
        .collect()
}

fn read(p: &Path) -> Option<String> {
    std::fs::read_to_string(p).ok()
}

/// Reads the platform facts from a sysfs root (e.g. `/sys`) and a procfs root (`/proc`).
/// Every part is optional: what cannot be read is absent. A procfs file or a NUMA node's
/// meminfo that was read but is malformed is absent too, and its error is returned (the run
/// is counted as failed, reason `parse`, with the rest of the facts kept).
pub fn read_platform(node: &str, sysfs: &Path, procfs: &Path) -> (Platform, Vec<Error>) {
    let mut p = Platform {
        node: node.to_string(),
        ..Platform::default()
    };
    let mut errors = Vec::new();
    read_topology(&mut p, sysfs);
    read_numa(&mut p, sysfs, &mut errors);
    if let Some(stat) = parse_file(&procfs.join("stat"), procfs::parse_stat, &mut errors) {
        p.cpu_busy_seconds = cpu_busy_seconds(&stat);
    }
    // Memory used has one definition, shared with the host usage source.
    p.memory_usage_bytes = parse_file(&procfs.join("meminfo"), procfs::parse_meminfo, &mut errors)
        .map(|m| m.used_bytes() as f64);
    if let Some(v) = parse_file(&procfs.join("vmstat"), procfs::parse_vmstat, &mut errors) {
        p.vmstat = v.into_iter().map(|(k, n)| (k, n as f64)).collect();
    }
    (p, errors)
}

/// One procfs or sysfs file through its shared parser: `None` when it cannot be read (absent, as
/// every platform part may be) or does not parse (the error kept).
fn parse_file<T>(
    path: &Path,
    parse: fn(&[u8]) -> Result<T, ParseError>,
    errors: &mut Vec<Error>,
) -> Option<T> {
    let bytes = std::fs::read(path).ok()?;
    parse(&bytes).map_err(|e| errors.push(e.into())).ok()
}

/// Online CPUs, and sockets and cores when every online CPU's topology is readable.
fn read_topology(p: &mut Platform, sysfs: &Path) {
    let cpu_dir = sysfs.join("devices/system/cpu");
    let Some(cpus) = read_id_list(&cpu_dir.join("online")) else {
        return;
    };
    p.cpus = Some(cpus.len() as u32);
    let mut packages = BTreeSet::new();
    let mut cores = BTreeSet::new();
    for c in &cpus {
        let t = cpu_dir.join(format!("cpu{c}/topology"));
        let pkg = read(&t.join("physical_package_id")).and_then(|s| s.trim().parse::<i64>().ok());
        let core = read(&t.join("core_id")).and_then(|s| s.trim().parse::<i64>().ok());
        let (Some(pk), Some(co)) = (pkg, core) else {
            return;
        };
        packages.insert(pk);
        cores.insert((pk, co));
    }
    if !cpus.is_empty() {
        p.sockets = Some(packages.len() as u32);
        p.cores = Some(cores.len() as u32);
    }
}

/// Online NUMA nodes and each one's MemTotal and MemFree; a node meminfo that was read but
/// does not parse is left out, its error kept.
fn read_numa(p: &mut Platform, sysfs: &Path, errors: &mut Vec<Error>) {
    let node_dir = sysfs.join("devices/system/node");
    let Some(nodes) = read_id_list(&node_dir.join("online")) else {
        return;
    };
    p.numa_nodes = Some(nodes.len() as u32);
    for n in nodes {
        let path = node_dir.join(format!("node{n}/meminfo"));
        if let Some(m) = parse_file(&path, procfs::parse_node_meminfo, errors) {
            p.numa_memory.push(NumaMemory {
                node: n,
                total_bytes: m.total_bytes as f64,
                free_bytes: m.free_bytes as f64,
            });
        }
    }
}

/// A kernel id list file (`cpu/online`, `node/online`); `None` when unreadable or not a list.
fn read_id_list(path: &Path) -> Option<Vec<u32>> {
    procfs::parse_id_list(&std::fs::read(path).ok()?)
}

/// The page size from `/proc/self/auxv` (AT_PAGESZ), for v1 NUMA pages; 4096 if unreadable.
pub fn read_page_size(procfs: &Path) -> u64 {
    std::fs::read(procfs.join("self/auxv"))
        .ok()
        .and_then(|b| procfs::parse_auxv_page_size(&b))
        .unwrap_or(4096)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_seconds_per_cpu() {
        let stat = procfs::parse_stat(
            b"cpu  9 9 9 9 9 9 9 9 0 0\ncpu0 100 10 50 1000 7 3 2 5 0 0\ncpu1 1 1 1 1 1 1 1 1\nintr 1\n",
        )
        .unwrap();
        assert_eq!(cpu_busy_seconds(&stat), vec![(0, 1.7), (1, 0.06)]);
    }

    #[test]
    fn platform_from_a_fixture_tree() {
        let dir = tempfile::tempdir().unwrap();
        let sys = dir.path().join("sys");
        let proc_ = dir.path().join("proc");
        let cpu = sys.join("devices/system/cpu");
        std::fs::create_dir_all(&cpu).unwrap();
        std::fs::write(cpu.join("online"), "0-3\n").unwrap();
        // Two sockets, one core each with two threads.
        for (c, pkg, core) in [(0, 0, 0), (1, 0, 0), (2, 1, 0), (3, 1, 0)] {
            let t = cpu.join(format!("cpu{c}/topology"));
            std::fs::create_dir_all(&t).unwrap();
            std::fs::write(t.join("physical_package_id"), format!("{pkg}\n")).unwrap();
            std::fs::write(t.join("core_id"), format!("{core}\n")).unwrap();
        }
        two_numa_nodes(&sys, "Node 1 MemFree: 50 kB");
        std::fs::create_dir_all(&proc_).unwrap();
        std::fs::write(proc_.join("stat"), "cpu0 100 0 0 0 0 0 0 0\n").unwrap();
        let (p, errors) = read_platform("n1", &sys, &proc_);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(
            (p.sockets, p.cores, p.cpus, p.numa_nodes),
            (Some(2), Some(2), Some(4), Some(2))
        );
        assert_eq!(p.numa_memory.len(), 2);
        assert_eq!(p.numa_memory[1].free_bytes, 50.0 * 1024.0);
        assert_eq!(p.cpu_busy_seconds, vec![(0, 1.0)]);
        // No meminfo, no vmstat: absent, not zero.
        assert_eq!(p.memory_usage_bytes, None);
        assert!(p.vmstat.is_empty());
    }

    /// Two online NUMA nodes under `sys`: node 0 of 100 kB with 40 free, node 1 of 200 kB whose
    /// second meminfo line is `node1_free`.
    fn two_numa_nodes(sys: &Path, node1_free: &str) {
        let node = sys.join("devices/system/node");
        for n in ["node0", "node1"] {
            std::fs::create_dir_all(node.join(n)).unwrap();
        }
        std::fs::write(node.join("online"), "0-1\n").unwrap();
        let node0 = "Node 0 MemTotal: 100 kB\nNode 0 MemFree: 40 kB\n";
        std::fs::write(node.join("node0/meminfo"), node0).unwrap();
        let node1 = format!("Node 1 MemTotal: 200 kB\n{node1_free}\n");
        std::fs::write(node.join("node1/meminfo"), node1).unwrap();
    }

    fn procfs_fixture(name: &str) -> Vec<u8> {
        let p = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/procfs")
            .join(name);
        std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    #[test]
    fn procfs_files_through_the_shared_parsers() {
        let dir = tempfile::tempdir().unwrap();
        for (file, fixture) in [
            ("stat", "stat_4cpu_a"),
            ("meminfo", "meminfo_modern"),
            ("vmstat", "vmstat"),
        ] {
            std::fs::write(dir.path().join(file), procfs_fixture(fixture)).unwrap();
        }
        let (p, errors) = read_platform("n1", &dir.path().join("no-sys"), dir.path());
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(p.cpus, None);
        assert_eq!(p.cpu_busy_seconds.len(), 4);
        // MemTotal - MemAvailable, as the host source's memory utilization counts it.
        assert_eq!(
            p.memory_usage_bytes,
            Some(((24_684_084 - 23_939_712) * 1024) as f64)
        );
        assert_eq!(
            p.vmstat,
            vec![
                ("pgfault", 627_575_890.0),
                ("pgmajfault", 236_229.0),
                ("pswpin", 17.0),
                ("pswpout", 40.0),
                ("oom_kill", 2.0),
            ]
        );
    }

    #[test]
    fn a_malformed_node_meminfo_is_an_error_and_that_node_is_left_out() {
        let dir = tempfile::tempdir().unwrap();
        two_numa_nodes(dir.path(), "Node 1 MemFree: many kB");
        let (p, errors) = read_platform("n1", dir.path(), &dir.path().join("no-proc"));
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0].metric_label(), "parse");
        assert!(
            errors[0].to_string().contains("node meminfo: line 2"),
            "{}",
            errors[0]
        );
        assert_eq!(p.numa_nodes, Some(2));
        assert_eq!(p.numa_memory.len(), 1);
        assert_eq!(p.numa_memory[0].node, 0);
        assert_eq!(p.numa_memory[0].total_bytes, 100.0 * 1024.0);
    }

    #[test]
    fn malformed_procfs_files_are_errors_and_absent_values() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("stat"), "cpu0 1 2 x 4\n").unwrap();
        std::fs::write(dir.path().join("meminfo"), "MemTotal: lots kB\n").unwrap();
        std::fs::write(dir.path().join("vmstat"), "pgfault 1\noom_kill -1\n").unwrap();
        let (p, errors) = read_platform("n1", &dir.path().join("no-sys"), dir.path());
        let shown: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(shown.len(), 3, "{shown:?}");
        for (e, file) in errors.iter().zip(["stat", "meminfo", "vmstat"]) {
            assert_eq!(e.metric_label(), "parse");
            assert!(e.to_string().contains(&format!("{file}: line ")), "{e}");
        }
        assert!(p.cpu_busy_seconds.is_empty());
        assert_eq!(p.memory_usage_bytes, None);
        assert!(p.vmstat.is_empty());
        // One bad file costs only its own values.
        std::fs::write(dir.path().join("stat"), procfs_fixture("stat_4cpu_a")).unwrap();
        std::fs::write(dir.path().join("vmstat"), procfs_fixture("vmstat")).unwrap();
        let (p, errors) = read_platform("n1", &dir.path().join("no-sys"), dir.path());
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(p.cpu_busy_seconds.len(), 4);
        assert_eq!(p.vmstat.len(), 5);
        assert_eq!(p.memory_usage_bytes, None);
    }
}
