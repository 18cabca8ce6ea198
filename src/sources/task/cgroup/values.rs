//! What each cgroup file's bytes mean: the values of one file put into [`CgroupStats`], and
//! what one read collects for derived values (the working set, one NUMA node's bytes).

use super::files::Knob;
use super::parse::{
    parse_keyed, parse_keys, parse_max, parse_numa_stat_v1, parse_numa_stat_v2, parse_u64,
};
use crate::model::{CgroupStats, Pressure};
use crate::sources::procfs::{parse_id_list_len, parse_pressure_totals};

/// A v1 memory limit at or above this is "no limit" (the kernel's PAGE_COUNTER_MAX rounded).
const V1_UNLIMITED: u64 = 1 << 62;

const NS: f64 = 1e9;
const US: f64 = 1e6;

/// Values of one read that make others once every file is read: the working set (usage
/// minus inactive file) and, on a host with one NUMA node, the node's bytes (the LRU lists).
#[derive(Debug, Default)]
pub(super) struct Derive {
    pub(super) usage: Option<u64>,
    pub(super) inactive: Option<u64>,
    /// Bytes on the LRU lists (anon + file + unevictable) from `memory.stat`: what
    /// `memory.numa_stat` gives summed over the nodes (v1 `hierarchical_total` in pages, v2
    /// `anon` + `file` + `unevictable`).
    pub(super) lru: Option<u64>,
}

/// Puts the values of one file into `s`; `d` collects what makes derived values.
pub(super) fn apply(knob: Knob, b: &[u8], page_size: u64, s: &mut CgroupStats, d: &mut Derive) {
    match knob {
        Knob::CpuacctUsage | Knob::CpuStatV1 | Knob::CpuStatV2 => apply_cpu(knob, b, s),
        Knob::CpuPressure | Knob::MemoryPressure | Knob::IoPressure => {
            apply_pressure(knob, b, s);
        }
        Knob::MemUsageV1 | Knob::MemCurrent => {
            d.usage = parse_u64(b);
            s.memory_usage_bytes = d.usage.map(|v| v as f64);
        }
        Knob::MemLimitV1 => {
            s.memory_limit_bytes = parse_u64(b).filter(|&v| v < V1_UNLIMITED).map(|v| v as f64);
        }
        Knob::MemMax => s.memory_limit_bytes = parse_max(b).flatten().map(|v| v as f64),
        Knob::MemStatV1 => apply_memory_stat_v1(b, s, d),
        Knob::MemStatV2 => apply_memory_stat_v2(b, s, d),
        Knob::OomControlV1 | Knob::MemEvents => s.oom_kills = parse_keyed(b, "oom_kill"),
        Knob::NumaStatV1 => {
            s.numa_bytes = parse_numa_stat_v1(b)
                .into_iter()
                .map(|(n, pages)| (n, pages.saturating_mul(page_size) as f64))
                .collect();
        }
        Knob::NumaStatV2 => {
            s.numa_bytes = parse_numa_stat_v2(b)
                .into_iter()
                .map(|(n, v)| (n, v as f64))
                .collect();
        }
        Knob::CpusetCpus => s.cpuset_cpus = parse_id_list_len(b),
        Knob::CpusetMems => s.cpuset_memory_nodes = parse_id_list_len(b),
    }
}

/// CPU usage and throttling: v1 `cpuacct.usage` and `cpu.stat`, or the unified `cpu.stat`
/// for what v1 did not give.
fn apply_cpu(knob: Knob, b: &[u8], s: &mut CgroupStats) {
    match knob {
        Knob::CpuacctUsage => s.cpu_seconds = parse_u64(b).map(|ns| ns as f64 / NS),
        Knob::CpuStatV1 => {
            let [p, t, tt] = parse_keys(b, ["nr_periods", "nr_throttled", "throttled_time"]);
            s.cpu_periods = p;
            s.cpu_throttled_periods = t;
            s.cpu_throttled_seconds = tt.map(|ns| ns as f64 / NS);
        }
        Knob::CpuStatV2 => {
            let [u, p, t, tt] = parse_keys(
                b,
                ["usage_usec", "nr_periods", "nr_throttled", "throttled_usec"],
            );
            if s.cpu_seconds.is_none() {
                s.cpu_seconds = u.map(|us| us as f64 / US);
            }
            if s.cpu_periods.is_none() {
                s.cpu_periods = p;
                s.cpu_throttled_periods = t;
                s.cpu_throttled_seconds = tt.map(|us| us as f64 / US);
            }
        }
        // Not a CPU file.
        _ => {}
    }
}

/// The `some` and `full` totals of a `*.pressure` file.
fn apply_pressure(knob: Knob, b: &[u8], s: &mut CgroupStats) {
    let resource = match knob {
        Knob::CpuPressure => "cpu",
        Knob::MemoryPressure => "memory",
        _ => "io",
    };
    let [some, full] = parse_pressure_totals(b);
    for (kind, v) in [("some", some), ("full", full)] {
        if let Some(us) = v {
            s.pressure.push(Pressure {
                resource,
                kind,
                seconds: us as f64 / US,
            });
        }
    }
}

/// v1 `memory.stat`: RSS, cache and page faults; the inactive file and LRU bytes for `d`.
fn apply_memory_stat_v1(b: &[u8], s: &mut CgroupStats, d: &mut Derive) {
    // The hierarchical totals count the children (a pod's containers) too.
    const K: usize = 9;
    let keys = [
        "total_inactive_file",
        "total_rss",
        "total_cache",
        "total_pgfault",
        "total_pgmajfault",
        "total_inactive_anon",
        "total_active_anon",
        "total_active_file",
        "total_unevictable",
        "inactive_file",
        "rss",
        "cache",
        "pgfault",
        "pgmajfault",
        "inactive_anon",
        "active_anon",
        "active_file",
        "unevictable",
    ];
    let v = parse_keys(b, keys);
    let get = |i: usize| v[i].or(v[i + K]);
    d.inactive = get(0);
    // The five LRU lists, in bytes; `memory.numa_stat` counts the same pages per node
    // (`hierarchical_total`, or `total` where the totals are not hierarchical).
    d.lru = [0, 5, 6, 7, 8]
        .into_iter()
        .try_fold(0u64, |sum, i| Some(sum.saturating_add(get(i)?)));
    s.memory_rss_bytes = get(1).map(|v| v as f64);
    s.memory_cache_bytes = get(2).map(|v| v as f64);
    s.page_faults = get(3);
    s.major_page_faults = get(4);
}

/// v2 `memory.stat`: anon, file and page faults; the inactive file and LRU bytes for `d`.
fn apply_memory_stat_v2(b: &[u8], s: &mut CgroupStats, d: &mut Derive) {
    let [i, anon, file, pgfault, pgmajfault, unevictable] = parse_keys(
        b,
        [
            "inactive_file",
            "anon",
            "file",
            "pgfault",
            "pgmajfault",
            "unevictable",
        ],
    );
    d.inactive = i;
    // What `memory.numa_stat` sums per node (see `parse_numa_stat_v2`).
    d.lru = match (anon, file, unevictable) {
        (Some(a), Some(f), Some(u)) => Some(a.saturating_add(f).saturating_add(u)),
        _ => None,
    };
    s.memory_rss_bytes = anon.map(|v| v as f64);
    s.memory_cache_bytes = file.map(|v| v as f64);
    s.page_faults = pgfault;
    s.major_page_faults = pgmajfault;
}
