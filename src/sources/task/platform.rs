//! The node's platform facts (WCA's `platform_*`): topology from `/sys/devices/system/cpu` and
//! `/sys/devices/system/node` (any architecture, no `/proc/cpuinfo`), per-NUMA-node memory,
//! busy CPU seconds per CPU, memory used and a small vmstat set from procfs.
//! `read_*` does I/O, `parse_*` is pure. `/proc/stat`, `/proc/meminfo` and `/proc/vmstat` are
//! read with the shared parsers of [`crate::sources::procfs`], so busy CPU time and memory used
//! are the same figures the host usage source reports.

use std::collections::BTreeSet;
use std::path::Path;

use crate::model::{NumaMemory, Platform};
use crate::shared::error::{Error, ParseError};
use crate::sources::procfs::{self, CpuStat};

/// `/proc/stat` counts in USER_HZ, which Linux fixes at 100 for user space on every
/// architecture (the kernel's CONFIG_HZ does not change it).
pub const USER_HZ: f64 = 100.0;

/// A kernel CPU list (`0-3,8,10-11`) as the ids it names.
pub fn parse_cpu_list(s: &str) -> Option<Vec<u32>> {
    let mut out = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u32, u32) = (a.parse().ok()?, b.parse().ok()?);
                if b < a || b - a > 65_536 {
                    return None;
                }
                out.extend(a..=b);
            }
            None => out.push(part.parse().ok()?),
        }
    }
    Some(out)
}

/// A per-node meminfo (`Node 0 MemTotal:  16384 kB`): (MemTotal, MemFree) in bytes.
pub fn parse_node_meminfo(s: &str) -> (Option<f64>, Option<f64>) {
    let mut total = None;
    let mut free = None;
    for l in s.lines() {
        let mut it = l.split_ascii_whitespace().skip(2);
        let (Some(k), Some(v)) = (it.next(), it.next()) else {
            continue;
        };
        let Ok(v) = v.parse::<f64>() else { continue };
        let bytes = if it.next() == Some("kB") {
            v * 1024.0
        } else {
            v
        };
        match k {
            "MemTotal:" => total = Some(bytes),
            "MemFree:" => free = Some(bytes),
            _ => {}
        }
    }
    (total, free)
}

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
/// Every part is optional: what cannot be read is absent. A procfs file that was read but is
/// malformed is absent too, and its error is returned (the run is counted as failed, reason
/// `parse`, with the rest of the facts kept).
pub fn read_platform(node: &str, sysfs: &Path, procfs: &Path) -> (Platform, Vec<Error>) {
    let mut p = Platform {
        node: node.to_string(),
        ..Platform::default()
    };
    read_topology(&mut p, sysfs);
    read_numa(&mut p, sysfs);
    let mut errors = Vec::new();
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

/// One procfs file through its shared parser: `None` when it cannot be read (absent, as
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
    let Some(cpus) = read(&cpu_dir.join("online")).and_then(|s| parse_cpu_list(&s)) else {
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

/// Online NUMA nodes and each one's MemTotal and MemFree.
fn read_numa(p: &mut Platform, sysfs: &Path) {
    let node_dir = sysfs.join("devices/system/node");
    let Some(nodes) = read(&node_dir.join("online")).and_then(|s| parse_cpu_list(&s)) else {
        return;
    };
    p.numa_nodes = Some(nodes.len() as u32);
    for n in nodes {
        if let Some(s) = read(&node_dir.join(format!("node{n}/meminfo")))
            && let (Some(total), Some(free)) = parse_node_meminfo(&s)
        {
            p.numa_memory.push(NumaMemory {
                node: n,
                total_bytes: total,
                free_bytes: free,
            });
        }
    }
}

/// The page size from `/proc/self/auxv` (AT_PAGESZ), for v1 NUMA pages; 4096 if unreadable.
pub fn read_page_size(procfs: &Path) -> u64 {
    std::fs::read(procfs.join("self/auxv"))
        .ok()
        .and_then(|b| parse_auxv_page_size(&b))
        .unwrap_or(4096)
}

/// AT_PAGESZ (6) from an auxiliary vector of native-endian 64-bit (key, value) pairs.
pub fn parse_auxv_page_size(b: &[u8]) -> Option<u64> {
    const AT_PAGESZ: u64 = 6;
    b.chunks_exact(16).find_map(|c| {
        let k = u64::from_ne_bytes(c[..8].try_into().ok()?);
        let v = u64::from_ne_bytes(c[8..].try_into().ok()?);
        (k == AT_PAGESZ && v.is_power_of_two()).then_some(v)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(
            parse_cpu_list("0-3,8,10-11\n"),
            Some(vec![0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(parse_cpu_list("0"), Some(vec![0]));
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("x"), None);
    }

    #[test]
    fn procfs_and_sysfs_text() {
        let (t, f) = parse_node_meminfo(
            "Node 0 MemTotal:       16384 kB\nNode 0 MemFree:         1024 kB\n",
        );
        assert_eq!((t, f), (Some(16384.0 * 1024.0), Some(1024.0 * 1024.0)));
        let stat = procfs::parse_stat(
            b"cpu  9 9 9 9 9 9 9 9 0 0\ncpu0 100 10 50 1000 7 3 2 5 0 0\ncpu1 1 1 1 1 1 1 1 1\nintr 1\n",
        )
        .unwrap();
        assert_eq!(cpu_busy_seconds(&stat), vec![(0, 1.7), (1, 0.06)]);
        let mut auxv = Vec::new();
        for (k, v) in [(33u64, 1u64), (6, 65536), (0, 0)] {
            auxv.extend_from_slice(&k.to_ne_bytes());
            auxv.extend_from_slice(&v.to_ne_bytes());
        }
        assert_eq!(parse_auxv_page_size(&auxv), Some(65536));
        assert_eq!(parse_auxv_page_size(&[1, 2, 3]), None);
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
        let node = sys.join("devices/system/node");
        std::fs::create_dir_all(node.join("node0")).unwrap();
        std::fs::create_dir_all(node.join("node1")).unwrap();
        std::fs::write(node.join("online"), "0-1\n").unwrap();
        std::fs::write(
            node.join("node0/meminfo"),
            "Node 0 MemTotal: 100 kB\nNode 0 MemFree: 40 kB\n",
        )
        .unwrap();
        std::fs::write(
            node.join("node1/meminfo"),
            "Node 1 MemTotal: 200 kB\nNode 1 MemFree: 50 kB\n",
        )
        .unwrap();
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
