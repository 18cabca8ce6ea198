//! `corpus/cgroup-v1/` and `corpus/cgroup-v2/`: each case folder is the files of one cgroup as
//! the kernel lays them out under a cgroup root (v1: one folder per controller, `unified`
//! beside them on a hybrid host; v2: the files at the root), read by the task source's
//! cgroup reader (`src/sources/task/cgroup/`: the hierarchies it finds, the files it reads,
//! what each file's bytes mean) into `CgroupStats`.

use std::path::Path;

use kube_prober::model::{CgroupStats, Pressure};
use kube_prober::sources::task::cgroup::{Hierarchies, read_stats};

use super::{assert_every_entry_has_a_row, folder};

/// Every file name the reader knows; any other file in a case would be read by nothing.
const KNOWN: &[&str] = &[
    "cgroup.controllers",
    "cpuacct.usage",
    "cpu.stat",
    "cpu.pressure",
    "memory.pressure",
    "io.pressure",
    "memory.usage_in_bytes",
    "memory.limit_in_bytes",
    "memory.stat",
    "memory.oom_control",
    "memory.numa_stat",
    "memory.current",
    "memory.max",
    "memory.events",
    "cpuset.effective_cpus",
    "cpuset.effective_mems",
    "cpuset.cpus.effective",
    "cpuset.mems.effective",
];

const PAGE: u64 = 4096;

/// Nanoseconds (v1 `cpuacct.usage`, `throttled_time`) as seconds, as the reader divides them.
fn ns(v: u64) -> Option<f64> {
    Some(v as f64 / 1e9)
}

/// Microseconds (v2 `cpu.stat`, pressure totals) as seconds.
fn us(v: u64) -> f64 {
    v as f64 / 1e6
}

fn bytes(v: u64) -> Option<f64> {
    Some(v as f64)
}

/// The `some` and `full` totals of the cpu, memory and io pressure files, in that order;
/// `None`: the file has no such line.
fn pressure(totals: [(Option<u64>, Option<u64>); 3]) -> Vec<Pressure> {
    let mut out = Vec::new();
    for (resource, (some, full)) in ["cpu", "memory", "io"].into_iter().zip(totals) {
        for (kind, v) in [("some", some), ("full", full)] {
            if let Some(v) = v {
                out.push(Pressure {
                    resource,
                    kind,
                    seconds: us(v),
                });
            }
        }
    }
    out
}

/// This process's cgroups on the hybrid host: v1 `cpu`, `cpuacct` and `cpuset` at their root,
/// its own memory cgroup, and the unified root (pressure only; its `cpu.stat` is not read, v1
/// gives CPU time and throttling). No limit: the kernel's "unlimited" is no value.
fn hybrid_this_process() -> CgroupStats {
    CgroupStats {
        cpu_seconds: ns(22745225660488),
        cpu_periods: Some(0),
        cpu_throttled_periods: Some(0),
        cpu_throttled_seconds: ns(0),
        memory_usage_bytes: bytes(24186880),
        // usage - total_inactive_file
        memory_working_set_bytes: bytes(24186880 - 7446528),
        memory_rss_bytes: bytes(2048000),
        memory_cache_bytes: bytes(19603456),
        memory_limit_bytes: None,
        page_faults: Some(132311),
        major_page_faults: Some(19),
        oom_kills: Some(0),
        pressure: pressure([
            (Some(5388249524), Some(0)),
            (Some(34070742), Some(15957719)),
            (Some(158354683), Some(90732673)),
        ]),
        // hierarchical_total pages
        numa_bytes: vec![(0, (5280 * PAGE) as f64)],
        cpuset_cpus: Some(2),
        cpuset_memory_nodes: Some(1),
    }
}

/// The v1 memory root: the `total_` (hierarchical) keys, not the root's own few pages.
fn memory_root() -> CgroupStats {
    CgroupStats {
        memory_usage_bytes: bytes(17857449984),
        memory_working_set_bytes: bytes(17857449984 - 9708666880),
        memory_rss_bytes: bytes(528703488),
        memory_cache_bytes: bytes(17329278976),
        memory_limit_bytes: None,
        page_faults: Some(800720218),
        major_page_faults: Some(218758),
        oom_kills: Some(0),
        numa_bytes: vec![(0, (4359924 * PAGE) as f64)],
        ..CgroupStats::default()
    }
}

/// A 4.9 kernel's pod with a limit, throttled, on two NUMA nodes, `cpu,cpuacct` mounted
/// together; `memory.oom_control` has no `oom_kill` line before 4.13: no value, not a zero.
fn pod_guaranteed_4_9() -> CgroupStats {
    CgroupStats {
        cpu_seconds: ns(1734985443217),
        cpu_periods: Some(52418),
        cpu_throttled_periods: Some(1310),
        cpu_throttled_seconds: ns(96254318779),
        memory_usage_bytes: bytes(498196480),
        memory_working_set_bytes: bytes(498196480 - 98586624),
        memory_rss_bytes: bytes(343502848),
        memory_cache_bytes: bytes(151007232),
        memory_limit_bytes: bytes(536870912),
        page_faults: Some(2209867),
        major_page_faults: Some(312),
        oom_kills: None,
        pressure: Vec::new(),
        numa_bytes: vec![(0, (80140 * PAGE) as f64), (1, (40575 * PAGE) as f64)],
        cpuset_cpus: Some(4),
        cpuset_memory_nodes: Some(2),
    }
}

/// The unified root of this host read as a v2 tree: CPU time from `cpu.stat` (no throttling
/// keys there without the cpu controller: no values), pressure; no memory files at a root.
fn v2_root() -> CgroupStats {
    CgroupStats {
        cpu_seconds: Some(us(22497943867)),
        pressure: pressure([
            (Some(5388249524), Some(0)),
            (Some(34070742), Some(15957719)),
            (Some(158354683), Some(90732673)),
        ]),
        ..CgroupStats::default()
    }
}

/// A 6.1 pod with every controller: NUMA bytes are anon + file + unevictable per node.
fn pod_burstable_6_1() -> CgroupStats {
    CgroupStats {
        cpu_seconds: Some(us(8120355412)),
        cpu_periods: Some(1203556),
        cpu_throttled_periods: Some(20718),
        cpu_throttled_seconds: Some(us(611045870)),
        memory_usage_bytes: bytes(1287593984),
        memory_working_set_bytes: bytes(1287593984 - 235675648),
        memory_rss_bytes: bytes(905220096),
        memory_cache_bytes: bytes(356777984),
        memory_limit_bytes: bytes(2147483648),
        page_faults: Some(3318502),
        major_page_faults: Some(41),
        oom_kills: Some(2),
        pressure: pressure([
            (Some(84120993), Some(30288411)),
            (Some(1510246), Some(1202914)),
            (Some(2904417), Some(2701339)),
        ]),
        numa_bytes: vec![
            (0, (605028352u64 + 200282112) as f64),
            (1, (300191744u64 + 156495872) as f64),
        ],
        cpuset_cpus: Some(8),
        cpuset_memory_nodes: Some(2),
    }
}

/// A 5.10 best-effort pod: `memory.max` is `max` (no limit), `cpu.pressure` has no `full`
/// line before 5.13, no cpuset controller (no cpuset files: no values).
fn besteffort_5_10() -> CgroupStats {
    CgroupStats {
        cpu_seconds: Some(us(120733498)),
        cpu_periods: Some(0),
        cpu_throttled_periods: Some(0),
        cpu_throttled_seconds: Some(us(0)),
        memory_usage_bytes: bytes(38391808),
        memory_working_set_bytes: bytes(38391808 - 9691136),
        memory_rss_bytes: bytes(22437888),
        memory_cache_bytes: bytes(14598144),
        memory_limit_bytes: None,
        page_faults: Some(91245),
        major_page_faults: Some(3),
        oom_kills: Some(0),
        pressure: pressure([
            (Some(311096), None),
            (Some(0), Some(0)),
            (Some(48210), Some(44721)),
        ]),
        numa_bytes: vec![(0, (22437888u64 + 14598144) as f64)],
        cpuset_cpus: None,
        cpuset_memory_nodes: None,
    }
}

type Row = (&'static str, fn() -> CgroupStats);

const V1: &[Row] = &[
    ("hybrid-6.18-this-process", hybrid_this_process),
    ("memory-root-6.18", memory_root),
    ("pod-guaranteed-4.9", pod_guaranteed_4_9),
];

const V2: &[Row] = &[
    ("root-6.18", v2_root),
    ("pod-burstable-6.1", pod_burstable_6_1),
    ("besteffort-5.10", besteffort_5_10),
];

/// The files of a case folder the reader does not know.
fn unknown_files(dir: &Path, out: &mut Vec<String>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            unknown_files(&p, out);
        } else {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            if !KNOWN.contains(&name.as_str()) {
                out.push(p.display().to_string());
            }
        }
    }
}

fn check(kind: &str, rows: &[Row]) {
    assert_every_entry_has_a_row(kind, rows.iter().map(|(name, _)| *name));
    let mut wrong = Vec::new();
    let mut unknown = Vec::new();
    for (name, want) in rows {
        let root = folder(kind).join(name);
        unknown_files(&root, &mut unknown);
        let hier = Hierarchies::detect(&root);
        let got = read_stats(&hier.roots, &hier, PAGE, &mut Vec::new());
        if got != want() {
            wrong.push(format!(
                "{kind}/{name} ({}):\n got {got:?}\nwant {:?}",
                hier.describe(),
                want()
            ));
        }
    }
    assert!(unknown.is_empty(), "files no parser reads: {unknown:?}");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn every_cgroup_v1_case_reads_to_its_expected_stats() {
    check("cgroup-v1", V1);
}

#[test]
fn every_cgroup_v2_case_reads_to_its_expected_stats() {
    check("cgroup-v2", V2);
}

/// The hierarchies each case is found as: hybrid, v1 with `cpu,cpuacct` mounted together, a
/// lone memory controller, and pure v2.
#[test]
fn each_cgroup_case_is_found_as_its_layout() {
    let describe =
        |kind: &str, name: &str| Hierarchies::detect(&folder(kind).join(name)).describe();
    assert_eq!(
        describe("cgroup-v1", "hybrid-6.18-this-process"),
        "v1(cpu,cpuacct,memory,cpuset)+unified"
    );
    assert_eq!(describe("cgroup-v1", "memory-root-6.18"), "v1(memory)");
    assert_eq!(
        describe("cgroup-v1", "pod-guaranteed-4.9"),
        "v1(cpu,cpuacct,memory,cpuset)"
    );
    for name in ["root-6.18", "pod-burstable-6.1", "besteffort-5.10"] {
        assert_eq!(describe("cgroup-v2", name), "v2", "{name}");
    }
}
