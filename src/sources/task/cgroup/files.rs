//! The files of one cgroup: which ones these hierarchies offer (the plan), opened once when
//! the cgroup is found, and one read of them (every-collection files always, detail files at
//! the cgroup's phase) into [`CgroupStats`].

use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;

use super::discovery::{Dirs, Hier, Hierarchies};
use super::fds::{FdBudget, Slot};
use super::schedule::{Phase, Stagger};
use super::values::{Derive, apply};
use crate::model::CgroupStats;

/// Each cgroup file a collection reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Knob {
    CpuacctUsage,
    CpuStatV1,
    CpuStatV2,
    CpuPressure,
    MemoryPressure,
    IoPressure,
    MemUsageV1,
    MemLimitV1,
    MemStatV1,
    OomControlV1,
    NumaStatV1,
    MemCurrent,
    MemMax,
    MemStatV2,
    MemEvents,
    NumaStatV2,
    CpusetCpus,
    CpusetMems,
}

impl Knob {
    /// A detail file: read when the cgroup is found and then once every `detail_every`
    /// collections (staggered over the cgroups, see [`Stagger`]); the others (CPU usage:
    /// `cpuacct.usage` or the unified `cpu.stat`, which gives throttling in the same read;
    /// memory usage: `memory.usage_in_bytes` or `memory.current`) are read on every
    /// collection. The v1 `cpu.stat` (CFS throttling) and the OOM kill counters
    /// (`memory.oom_control`, `memory.events`) are counters in their own files: a detail read
    /// gives a later value of the same counter.
    fn detail(self) -> bool {
        matches!(
            self,
            Knob::CpuStatV1
                | Knob::OomControlV1
                | Knob::MemEvents
                | Knob::CpuPressure
                | Knob::MemoryPressure
                | Knob::IoPressure
                | Knob::MemLimitV1
                | Knob::MemStatV1
                | Knob::NumaStatV1
                | Knob::MemMax
                | Knob::MemStatV2
                | Knob::NumaStatV2
                | Knob::CpusetCpus
                | Knob::CpusetMems
        )
    }
}

/// The files of one cgroup on these hierarchies, in reading order: v1 CPU before the unified
/// `cpu.stat` (which only fills what v1 did not give, and is not opened when v1 gave it all),
/// memory from v1 where the v1 controller is mounted, else from v2; the effective cpuset from
/// v1 (`cpuset.effective_cpus`) or v2 (`cpuset.cpus.effective`, only where the cpuset
/// controller is enabled for the cgroup).
pub(super) fn plan(hier: &Hierarchies) -> Vec<(Knob, Hier, &'static str)> {
    let has = |h: Hier| hier.root(h).is_some();
    let mut p = Vec::with_capacity(12);
    if has(Hier::Cpuacct) {
        p.push((Knob::CpuacctUsage, Hier::Cpuacct, "cpuacct.usage"));
    }
    if has(Hier::Cpu) {
        p.push((Knob::CpuStatV1, Hier::Cpu, "cpu.stat"));
    }
    if has(Hier::Unified) {
        p.push((Knob::CpuStatV2, Hier::Unified, "cpu.stat"));
        p.push((Knob::CpuPressure, Hier::Unified, "cpu.pressure"));
        p.push((Knob::MemoryPressure, Hier::Unified, "memory.pressure"));
        p.push((Knob::IoPressure, Hier::Unified, "io.pressure"));
    }
    if has(Hier::Memory) {
        p.extend([
            (Knob::MemUsageV1, Hier::Memory, "memory.usage_in_bytes"),
            (Knob::MemLimitV1, Hier::Memory, "memory.limit_in_bytes"),
            (Knob::MemStatV1, Hier::Memory, "memory.stat"),
            (Knob::OomControlV1, Hier::Memory, "memory.oom_control"),
            (Knob::NumaStatV1, Hier::Memory, "memory.numa_stat"),
        ]);
    } else if has(Hier::Unified) {
        p.extend([
            (Knob::MemCurrent, Hier::Unified, "memory.current"),
            (Knob::MemMax, Hier::Unified, "memory.max"),
            (Knob::MemStatV2, Hier::Unified, "memory.stat"),
            (Knob::MemEvents, Hier::Unified, "memory.events"),
            (Knob::NumaStatV2, Hier::Unified, "memory.numa_stat"),
        ]);
    }
    if has(Hier::Cpuset) {
        p.push((Knob::CpusetCpus, Hier::Cpuset, "cpuset.effective_cpus"));
        p.push((Knob::CpusetMems, Hier::Cpuset, "cpuset.effective_mems"));
    } else if has(Hier::Unified) {
        p.push((Knob::CpusetCpus, Hier::Unified, "cpuset.cpus.effective"));
        p.push((Knob::CpusetMems, Hier::Unified, "cpuset.mems.effective"));
    }
    p
}

/// Files read, counted by the reader (for tests and the bench: the read pattern, not timing).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadCounts {
    /// Reads of the every-collection files (CPU usage, memory usage).
    pub fast_files: u64,
    /// Reads of detail files (v1 `cpu.stat`, OOM kills, `memory.stat`, NUMA stat, pressure,
    /// memory limit, cpuset).
    pub detail_files: u64,
    /// Cgroups whose detail files were read (once per cgroup and detail read).
    pub detail_cgroups: u64,
}

/// The files one cgroup offers, found once (when the cgroup is found) and read every
/// collection. Files the cgroup did not offer then are not looked for again until the cgroup
/// is found again (its pod's cgroup went away, or its pod's container ids changed).
#[derive(Debug)]
pub(super) struct CgroupFiles {
    files: Vec<(Knob, Slot)>,
    /// The files are on the kernel's cgroup filesystem (cgroup v1 or v2), where reading a
    /// removed cgroup fails: no need to look for unlinked files.
    on_cgroupfs: bool,
    phase: Phase,
    /// Detail reads so far (the first one when the cgroup is found).
    pub(super) detail_reads: u64,
    /// The detail values as last read (v1 throttling, OOM kills, working set, RSS, cache, page
    /// faults, limit, pressure, NUMA, cpuset); the other fields stay empty.
    detail: CgroupStats,
    /// The host's one NUMA node with memory, where the cgroup offers `memory.numa_stat`: its
    /// bytes come from `memory.stat` (the file is not read; see
    /// [`CgroupReader::with_memory_nodes`](super::CgroupReader::with_memory_nodes)).
    numa_from_stat: Option<u32>,
}

impl CgroupFiles {
    /// Opens every file of `plan` this cgroup offers: each hierarchy's directory once, its
    /// files relative to it (`openat`), kept while `budget` allows.
    pub(super) fn open(
        dirs: &Dirs,
        plan: &[(Knob, Hier, &'static str)],
        budget: &FdBudget,
        phase: Phase,
        single_numa_node: Option<u32>,
    ) -> Self {
        use rustix::fs::{Mode, OFlags, open, openat};
        let mut files: Vec<(Knob, Slot)> = Vec::with_capacity(plan.len());
        let mut numa_from_stat = None;
        // Each hierarchy's directory, opened once when its first file is wanted.
        let mut dir_fds: [Option<rustix::io::Result<OwnedFd>>; 5] = Default::default();
        let out_of_fds =
            |e: rustix::io::Errno| e == rustix::io::Errno::MFILE || e == rustix::io::Errno::NFILE;
        for (knob, h, name) in plan {
            let Some(dir) = dirs[h.index()].as_deref() else {
                continue;
            };
            let has = |k: Knob| files.iter().any(|(f, _)| *f == k);
            // One source per value: the unified cpu.stat gives usage and throttling only; on a
            // hybrid host v1 `cpuacct.usage` and `cpu.stat` give both (and the unified file
            // has no throttling without the v2 cpu controller).
            if *knob == Knob::CpuStatV2 && has(Knob::CpuacctUsage) && has(Knob::CpuStatV1) {
                continue;
            }
            let dfd = dir_fds[h.index()].get_or_insert_with(|| {
                open(
                    dir,
                    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                    Mode::empty(),
                )
            });
            let opened = match dfd {
                Ok(dfd) => openat(dfd, *name, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty()),
                Err(e) => Err(*e),
            };
            // One NUMA node: the file only proves it exists (so the value is absent where the
            // kernel has none), its value comes from `memory.stat`.
            if matches!(knob, Knob::NumaStatV1 | Knob::NumaStatV2)
                && let Some(node) = single_numa_node
            {
                if opened.is_ok() {
                    numa_from_stat = Some(node);
                }
                continue;
            }
            let slot = match opened {
                Ok(fd) => match budget.keep(fd) {
                    Some(k) => Slot::Kept(k),
                    None => Slot::Path(dir.join(name)),
                },
                // Out of fds: read it by path, and see then whether it exists.
                Err(e) if out_of_fds(e) => Slot::Path(dir.join(name)),
                Err(_) => continue,
            };
            files.push((*knob, slot));
        }
        let on_cgroupfs = dir_fds.iter().flatten().flatten().next().is_some_and(|d| {
            rustix::fs::fstatfs(d).is_ok_and(|st| {
                // CGROUP_SUPER_MAGIC and CGROUP2_SUPER_MAGIC (linux/magic.h).
                matches!(st.f_type as u64, 0x27e0eb | 0x6367_7270)
            })
        });
        CgroupFiles {
            files,
            on_cgroupfs,
            phase,
            detail_reads: 0,
            detail: CgroupStats::default(),
            numa_from_stat,
        }
    }

    pub(super) fn kept(&self) -> usize {
        self.files
            .iter()
            .filter(|(_, s)| matches!(s, Slot::Kept(_)))
            .count()
    }

    /// True when the files were unlinked (a removed directory on an ordinary filesystem, as in
    /// the fixture trees; kernfs answers reads of a removed cgroup with an error instead).
    pub(super) fn unlinked(&self) -> bool {
        if self.on_cgroupfs {
            return false;
        }
        self.files.iter().find_map(|(_, s)| match s {
            Slot::Kept(k) => Some(k.file.metadata().is_ok_and(|m| m.nlink() == 0)),
            Slot::Path(_) => None,
        }) == Some(true)
    }

    /// Reads the every-collection files, and the detail files when this is the cgroup's first
    /// read or `collection` is its phase (one `pread` per file). The detail values of the
    /// other collections are those of the last detail read. Empty when every file read failed
    /// (the cgroup went away).
    pub(super) fn read(
        &mut self,
        collection: u64,
        page_size: u64,
        buf: &mut Vec<u8>,
        counts: &mut ReadCounts,
    ) -> CgroupStats {
        let mut s = CgroupStats::default();
        let detail_now = self.detail_reads == 0 || self.phase.due(collection);
        let mut fresh = CgroupStats::default();
        let (mut tried, mut ok) = (0u32, 0u32);
        let mut derive = Derive::default();
        for (knob, slot) in &self.files {
            let detail = knob.detail();
            if detail && !detail_now {
                continue;
            }
            tried += 1;
            let Some(b) = slot.read(buf) else { continue };
            ok += 1;
            if detail {
                counts.detail_files += 1;
            } else {
                counts.fast_files += 1;
            }
            let target = if detail { &mut fresh } else { &mut s };
            apply(*knob, b, page_size, target, &mut derive);
        }
        if tried > 0 && ok == 0 {
            return CgroupStats::default();
        }
        if detail_now {
            // The working set from `memory.stat` and the usage of this same read.
            if let (Some(u), Some(i)) = (derive.usage, derive.inactive) {
                fresh.memory_working_set_bytes = Some(u.saturating_sub(i) as f64);
            }
            // One NUMA node: `memory.numa_stat` would say the LRU total of `memory.stat`.
            if let (Some(node), Some(lru)) = (self.numa_from_stat, derive.lru) {
                fresh.numa_bytes = vec![(node, lru as f64)];
            }
            self.detail = fresh;
            self.detail_reads += 1;
            counts.detail_cgroups += 1;
        }
        let d = &self.detail;
        // Throttling from the v1 `cpu.stat` (detail) where the cgroup has it, else what the
        // unified `cpu.stat` (every collection) gave.
        if d.cpu_periods.is_some() {
            s.cpu_periods = d.cpu_periods;
            s.cpu_throttled_periods = d.cpu_throttled_periods;
            s.cpu_throttled_seconds = d.cpu_throttled_seconds;
        }
        s.oom_kills = d.oom_kills;
        s.memory_working_set_bytes = d.memory_working_set_bytes;
        s.memory_rss_bytes = d.memory_rss_bytes;
        s.memory_cache_bytes = d.memory_cache_bytes;
        s.memory_limit_bytes = d.memory_limit_bytes;
        s.page_faults = d.page_faults;
        s.major_page_faults = d.major_page_faults;
        s.pressure.clone_from(&d.pressure);
        s.numa_bytes.clone_from(&d.numa_bytes);
        s.cpuset_cpus = d.cpuset_cpus;
        s.cpuset_memory_nodes = d.cpuset_memory_nodes;
        s
    }
}

/// Reads every value this kernel offers for one cgroup, opening each file by path (what a
/// collection did before files were kept open; for one-off reads). `page_size` converts v1
/// NUMA pages.
pub fn read_stats(
    dirs: &Dirs,
    hier: &Hierarchies,
    page_size: u64,
    buf: &mut Vec<u8>,
) -> CgroupStats {
    let phase = Stagger::new(1).assign(0);
    CgroupFiles::open(dirs, &plan(hier), &FdBudget::new(0), phase, None).read(
        0,
        page_size,
        buf,
        &mut ReadCounts::default(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::task::cgroup::CgroupReader;
    use crate::sources::task::cgroup::testing::staggered_tree;
    use support::task_fixture::{self as fixture, Layout, Values};

    /// On a host with one NUMA node the node's bytes come from `memory.stat` (the LRU lists)
    /// and equal what `memory.numa_stat` says, on every layout and through detail reads of
    /// changed values; `memory.numa_stat` is then not read (one detail file fewer per cgroup);
    /// with several nodes or unknown nodes it is read; where the cgroup has no
    /// `memory.numa_stat` the value stays absent.
    #[test]
    fn one_numa_node_is_derived_from_memory_stat_and_equals_the_file() {
        for layout in [Layout::Hybrid, Layout::V2] {
            let dir = tempfile::tempdir().unwrap();
            let root = dir.path();
            fixture::init(root, layout).unwrap();
            let (pods, rels) = staggered_tree(root, layout, 4, 0);
            let hier = Hierarchies::detect(root);
            // Every collection a detail read (the readers' phases would differ otherwise).
            let mut file = CgroupReader::new(hier.clone(), 4096).with_detail_every(1);
            let mut derived = CgroupReader::new(hier.clone(), 4096)
                .with_detail_every(1)
                .with_memory_nodes(Some(&[0]));
            let mut two = CgroupReader::new(hier.clone(), 4096)
                .with_detail_every(1)
                .with_memory_nodes(Some(&[0, 1]));
            for round in 0..6u64 {
                if round == 3 {
                    // Change memory on every cgroup: the next detail reads follow.
                    for (k, rel) in rels.iter().enumerate() {
                        let mut v = Values::seeded(50 + k as u64);
                        v.rss += 4096 * (k as u64 + 1);
                        fixture::write_cgroup(root, layout, rel, &v).unwrap();
                    }
                }
                let (f, d, t) = (
                    file.collect(&pods),
                    derived.collect(&pods),
                    two.collect(&pods),
                );
                assert_eq!(f, d, "{layout:?} round {round}");
                assert_eq!(f, t, "{layout:?} round {round}");
                for task in &f {
                    let s = task.stats.as_ref().unwrap();
                    assert_eq!(s.numa_bytes.len(), 1, "{layout:?}");
                    assert!(
                        task.containers
                            .iter()
                            .all(|c| c.stats.numa_bytes.len() == 1)
                    );
                }
            }
            // The same detail reads; the derived reader skipped memory.numa_stat in each.
            assert_eq!(file.reads.detail_cgroups, derived.reads.detail_cgroups);
            assert_eq!(
                file.reads.detail_files - derived.reads.detail_files,
                derived.reads.detail_cgroups,
                "{layout:?}: one file fewer per detail read"
            );
            assert_eq!(file.reads.detail_files, two.reads.detail_files);

            // No memory.numa_stat (a kernel without NUMA): absent, also when derived.
            for rel in &rels {
                let d = match layout {
                    Layout::Hybrid => root.join("memory").join(rel),
                    Layout::V2 => root.join(rel),
                };
                std::fs::remove_file(d.join("memory.numa_stat")).unwrap();
            }
            let got = CgroupReader::new(hier, 4096)
                .with_memory_nodes(Some(&[0]))
                .collect(&pods);
            for task in &got {
                let s = task.stats.as_ref().unwrap();
                assert!(s.numa_bytes.is_empty(), "{layout:?}");
                assert!(s.memory_rss_bytes.is_some());
            }
        }
    }
}
