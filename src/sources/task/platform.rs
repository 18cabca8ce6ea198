//! The node's platform facts (WCA's `platform_*`): topology from `/sys/devices/system/cpu` and
//! `/sys/devices/system/node` (any architecture, no `/proc/cpuinfo`), per-NUMA-node memory,
//! busy CPU seconds per CPU, memory usage and a small vmstat set from procfs.
//! `read_*` does I/O, `parse_*` is pure.

use std::collections::BTreeSet;
use std::path::Path;

use crate::model::{NumaMemory, Platform};

/// `/proc/stat` counts in USER_HZ, which Linux fixes at 100 for user space on every
/// architecture (the kernel's CONFIG_HZ does not change it).
pub const USER_HZ: f64 = 100.0;

/// The `/proc/vmstat` keys reported, as (vmstat key, our key).
pub const VMSTAT_KEYS: &[(&str, &str)] = &[
    ("pgfault", "pgfault"),
    ("pgmajfault", "pgmajfault"),
    ("pswpin", "pswpin"),
    ("pswpout", "pswpout"),
    ("oom_kill", "oom_kill"),
];

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

/// `/proc/meminfo`: MemTotal - MemFree - Buffers - Cached, in bytes.
pub fn parse_meminfo_usage(s: &str) -> Option<f64> {
    let get = |key: &str| {
        s.lines().find_map(|l| {
            let rest = l.strip_prefix(key)?.strip_prefix(':')?;
            rest.split_ascii_whitespace().next()?.parse::<f64>().ok()
        })
    };
    let used = get("MemTotal")?
        - get("MemFree")?
        - get("Buffers").unwrap_or(0.0)
        - get("Cached").unwrap_or(0.0);
    Some(used.max(0.0) * 1024.0)
}

/// `/proc/stat` `cpuN` lines: busy seconds (user+nice+system+irq+softirq+steal) per CPU, read
/// with the host source's parser; a file it rejects gives nothing.
pub fn parse_stat_cpus(s: &str) -> Vec<(u32, f64)> {
    crate::sources::procfs::parse_stat(s.as_bytes())
        .map(|stat| {
            stat.per_cpu
                .iter()
                .map(|(&cpu, t)| (cpu, t.busy() as f64 / USER_HZ))
                .collect()
        })
        .unwrap_or_default()
}

/// The reported keys of `/proc/vmstat`.
pub fn parse_vmstat(s: &str) -> Vec<(&'static str, f64)> {
    let mut out = Vec::new();
    for (key, ours) in VMSTAT_KEYS {
        if let Some(v) = s.lines().find_map(|l| {
            let mut it = l.split_ascii_whitespace();
            (it.next()? == *key).then(|| it.next()?.parse::<f64>().ok())?
        }) {
            out.push((*ours, v));
        }
    }
    out
}

fn read(p: &Path) -> Option<String> {
    std::fs::read_to_string(p).ok()
}

/// Reads the platform facts from a sysfs root (e.g. `/sys`) and a procfs root (`/proc`).
/// Every part is optional: what cannot be read is absent.
pub fn read_platform(node: &str, sysfs: &Path, procfs: &Path) -> Platform {
    let cpu_dir = sysfs.join("devices/system/cpu");
    let online = read(&cpu_dir.join("online")).and_then(|s| parse_cpu_list(&s));
    let mut p = Platform {
        node: node.to_string(),
        ..Platform::default()
    };
    if let Some(cpus) = &online {
        p.cpus = Some(cpus.len() as u32);
        let mut packages = BTreeSet::new();
        let mut cores = BTreeSet::new();
        let mut complete = true;
        for c in cpus {
            let t = cpu_dir.join(format!("cpu{c}/topology"));
            let pkg =
                read(&t.join("physical_package_id")).and_then(|s| s.trim().parse::<i64>().ok());
            let core = read(&t.join("core_id")).and_then(|s| s.trim().parse::<i64>().ok());
            match (pkg, core) {
                (Some(pk), Some(co)) => {
                    packages.insert(pk);
                    cores.insert((pk, co));
                }
                _ => complete = false,
            }
        }
        if complete && !cpus.is_empty() {
            p.sockets = Some(packages.len() as u32);
            p.cores = Some(cores.len() as u32);
        }
    }
    let node_dir = sysfs.join("devices/system/node");
    if let Some(nodes) = read(&node_dir.join("online")).and_then(|s| parse_cpu_list(&s)) {
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
    if let Some(s) = read(&procfs.join("stat")) {
        p.cpu_busy_seconds = parse_stat_cpus(&s);
    }
    p.memory_usage_bytes = read(&procfs.join("meminfo")).and_then(|s| parse_meminfo_usage(&s));
    if let Some(s) = read(&procfs.join("vmstat")) {
        p.vmstat = parse_vmstat(&s);
    }
    p
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
        let used = parse_meminfo_usage(
            "MemTotal: 1000 kB\nMemFree: 100 kB\nBuffers: 50 kB\nCached: 250 kB\n",
        );
        assert_eq!(used, Some(600.0 * 1024.0));
        let cpus = parse_stat_cpus(
            "cpu  9 9 9 9 9 9 9 9 0 0\ncpu0 100 10 50 1000 7 3 2 5 0 0\ncpu1 1 1 1 1 1 1 1 1\nintr 1\n",
        );
        assert_eq!(cpus, vec![(0, 1.7), (1, 0.06)]);
        assert_eq!(
            parse_vmstat("nr_free_pages 1\npgfault 42\npswpin 0\noom_kill 3\n"),
            vec![("pgfault", 42.0), ("pswpin", 0.0), ("oom_kill", 3.0)]
        );
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
        let p = read_platform("n1", &sys, &proc_);
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
}
