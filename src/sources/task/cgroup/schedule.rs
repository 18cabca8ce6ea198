//! When a cgroup's detail files are read: once every `--task-detail-every` collections (the
//! containers' at their own cadence), each cgroup at a phase that spreads the reads evenly over
//! the collections as pods come and go.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Default of `--task-detail-every`: the detail files of each cgroup (v1 `cpu.stat`, the OOM
/// kill counters, `memory.stat`, `memory.numa_stat`, the `*.pressure` files, the memory limit,
/// the effective cpuset) are read once every this many collections, staggered over the
/// cgroups; CPU and memory usage on every collection. 4 keeps the detail series at most 3
/// collections (45 s at the default 15 s interval) old; docs/benchmarks.md has the CPU per
/// collection at each N.
pub const DEFAULT_DETAIL_EVERY: u64 = 4;

/// The largest accepted `--task-detail-every`.
pub const MAX_DETAIL_EVERY: u64 = 60;

/// Spreads the detail reads of one reader's cgroups over `every` collections: each cgroup gets
/// a phase (`0..every`) when it is found, the one fewest live cgroups have (ties: the phase of
/// the current collection, so a cgroup found now is next read a full period later), and reads
/// its detail files on the collections whose number is its phase modulo `every`. So every
/// collection reads about 1/`every` of the cgroups' detail files, also as pods come and go.
#[derive(Debug, Clone)]
pub(super) struct Stagger {
    load: Arc<Vec<AtomicUsize>>,
}

impl Stagger {
    pub(super) fn new(every: u64) -> Self {
        let n = usize::try_from(every.max(1)).unwrap_or(1);
        Stagger {
            load: Arc::new((0..n).map(|_| AtomicUsize::new(0)).collect()),
        }
    }

    pub(super) fn every(&self) -> u64 {
        self.load.len() as u64
    }

    /// The least used phase, searched from the phase of `collection` on.
    pub(super) fn assign(&self, collection: u64) -> Phase {
        let n = self.load.len();
        let start = (collection % n as u64) as usize;
        let mut best = start;
        for k in 1..n {
            let i = (start + k) % n;
            if self.load[i].load(Ordering::Relaxed) < self.load[best].load(Ordering::Relaxed) {
                best = i;
            }
        }
        self.load[best].fetch_add(1, Ordering::Relaxed);
        Phase {
            phase: best as u64,
            load: self.load.clone(),
        }
    }
}

/// One cgroup's phase in its reader's [`Stagger`]; released when the cgroup's files are
/// dropped (its pod left, or it is found again).
#[derive(Debug)]
pub(super) struct Phase {
    phase: u64,
    load: Arc<Vec<AtomicUsize>>,
}

impl Phase {
    /// Whether collection number `collection` reads this cgroup's detail files.
    pub(super) fn due(&self, collection: u64) -> bool {
        collection % self.load.len() as u64 == self.phase
    }
}

impl Drop for Phase {
    fn drop(&mut self) {
        if let Some(l) = self.load.get(self.phase as usize) {
            l.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// Detail reads per cgroup: ((pod UID, container id or `None` for the pod cgroup), count).
pub type DetailReads = Vec<((String, Option<String>), u64)>;

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::model::TaskPod;
    use crate::sources::task::cgroup::testing::{pod, staggered_tree};
    use crate::sources::task::cgroup::{CgroupReader, Hierarchies};
    use support::task_fixture::{self as fixture, Driver, Layout, Values};

    /// Containers at their own cadence M (`--task-container-detail-every`), pods at N: in any
    /// M consecutive collections each container's detail files are read exactly once and each
    /// pod's M/N times; each collection reads 1/N of the pods' and 1/M of the containers'
    /// detail files; a container's `memory.stat` and limit change shows within M collections,
    /// a pod's within N; usage stays fresh every collection.
    #[test]
    fn containers_at_their_own_cadence() {
        for layout in [Layout::Hybrid, Layout::V2] {
            let dir = tempfile::tempdir().unwrap();
            let root = dir.path();
            fixture::init(root, layout).unwrap();
            let (pods, rels) = staggered_tree(root, layout, 8, 0);
            let (n, m) = (2u64, 4u64);
            let mut r = CgroupReader::new(Hierarchies::detect(root), 4096)
                .with_detail_every(n)
                .with_container_detail_every(m);
            assert_eq!((r.detail_every(), r.container_detail_every()), (n, m));
            r.collect(&pods);
            assert_eq!(
                r.reads.detail_cgroups, 24,
                "{layout:?}: all read when found"
            );
            let mut history = vec![r.detail_reads()];
            for k in 0..2 * m {
                let d0 = r.reads.detail_cgroups;
                r.collect(&pods);
                assert_eq!(
                    r.reads.detail_cgroups - d0,
                    8 / n + 16 / m,
                    "{layout:?} collection {k}: 1/N of the pods, 1/M of the containers"
                );
                history.push(r.detail_reads());
            }
            for w in history.windows(m as usize + 1) {
                for (a, b) in w[0].iter().zip(&w[m as usize]) {
                    let want = if a.0.1.is_some() { 1 } else { m / n };
                    assert_eq!(b.1 - a.1, want, "{layout:?} {:?}", a.0);
                }
            }
            // Change a pod's and its first container's memory and limit.
            let mut pv = Values::seeded(70);
            pv.memory_limit = Some(1 << 30);
            let mut cv = Values::seeded(71);
            cv.memory_limit = Some(2 << 30);
            cv.rss += 1 << 20;
            fixture::write_cgroup(root, layout, &rels[0], &pv).unwrap();
            fixture::write_cgroup(root, layout, &rels[1], &cv).unwrap();
            let (mut pod_at, mut ctr_at) = (None, None);
            for k in 1..=m {
                let got = r.collect(&pods);
                let (ps, cs) = (got[0].stats.as_ref().unwrap(), &got[0].containers[0].stats);
                assert_eq!(ps.memory_usage_bytes, Some(pv.memory_usage as f64));
                assert_eq!(cs.memory_usage_bytes, Some(cv.memory_usage as f64));
                if pod_at.is_none() && ps.memory_limit_bytes == Some((1u64 << 30) as f64) {
                    pod_at = Some(k);
                }
                if ctr_at.is_none() && cs.memory_limit_bytes == Some((2u64 << 30) as f64) {
                    assert_eq!(cs.memory_rss_bytes, Some(cv.rss as f64));
                    ctr_at = Some(k);
                }
            }
            assert!(
                pod_at.is_some_and(|k| k <= n),
                "{layout:?}: pod within N: {pod_at:?}"
            );
            assert!(
                ctr_at.is_some_and(|k| k <= m),
                "{layout:?}: container within M"
            );
        }
    }

    /// With N > 1 each cgroup's detail files are read when it is found and then exactly once
    /// in every N consecutive collections, each collection reads the detail files of 1/N of
    /// the cgroups (no spike), the every-collection files are read for all cgroups every
    /// time, and on an unchanged tree the series and values are those of N = 1.
    #[test]
    fn detail_reads_are_staggered_over_n_collections() {
        for layout in [Layout::Hybrid, Layout::V2] {
            let dir = tempfile::tempdir().unwrap();
            let root = dir.path();
            fixture::init(root, layout).unwrap();
            let (pods, _) = staggered_tree(root, layout, 12, 0);
            let cgroups = 36u64;
            let every = 4u64;
            let mut r = CgroupReader::new(Hierarchies::detect(root), 4096).with_detail_every(every);
            let mut all = CgroupReader::new(Hierarchies::detect(root), 4096).with_detail_every(1);
            assert_eq!(r.detail_every(), every);
            // The first collection reads every cgroup fully.
            let got = r.collect(&pods);
            assert_eq!(got, all.collect(&pods), "{layout:?}");
            assert_eq!(r.reads.detail_cgroups, cgroups, "{layout:?}");
            let fast_per_collection = r.reads.fast_files;
            // Every collection: CPU usage and memory usage, one file each (v2: cpu.stat,
            // memory.current; hybrid: cpuacct.usage, memory.usage_in_bytes).
            assert_eq!(fast_per_collection, 2 * cgroups, "{layout:?}");
            let detail_per_cgroup = r.reads.detail_files / cgroups;
            assert!(detail_per_cgroup >= 4, "{layout:?}: {:?}", r.reads);
            assert!(r.detail_reads().iter().all(|(_, n)| *n == 1));
            let mut history: Vec<DetailReads> = vec![r.detail_reads()];
            for k in 0..3 * every {
                let before = r.reads;
                let got = r.collect(&pods);
                assert_eq!(
                    got,
                    all.collect(&pods),
                    "{layout:?}: same series and values"
                );
                let d = r.reads.detail_cgroups - before.detail_cgroups;
                assert_eq!(
                    d,
                    cgroups / every,
                    "{layout:?} collection {k}: 1/N of the cgroups"
                );
                assert_eq!(
                    r.reads.detail_files - before.detail_files,
                    d * detail_per_cgroup,
                    "{layout:?}"
                );
                assert_eq!(
                    r.reads.fast_files - before.fast_files,
                    fast_per_collection,
                    "{layout:?}: the fast files of every cgroup, every collection"
                );
                history.push(r.detail_reads());
            }
            // Any N consecutive collections read each cgroup's detail files exactly once.
            for w in history.windows(every as usize + 1) {
                let (a, b) = (&w[0], &w[every as usize]);
                assert_eq!(a.len(), cgroups as usize);
                for (x, y) in a.iter().zip(b) {
                    assert_eq!(x.0, y.0);
                    assert_eq!(y.1 - x.1, 1, "{layout:?}: {:?} once per N", x.0);
                }
            }
            // N = 1: everything every collection.
            let before = all.reads;
            all.collect(&pods);
            assert_eq!(all.reads.detail_cgroups - before.detail_cgroups, cgroups);
        }
    }

    /// Pods come and go: a new cgroup is read fully when found, the phases of cgroups that
    /// left are freed, so the per-collection share stays about 1/N; a pod's series leave with it.
    #[test]
    fn stagger_stays_balanced_as_pods_come_and_go() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        fixture::init(root, Layout::V2).unwrap();
        let (pods, _) = staggered_tree(root, Layout::V2, 12, 0);
        let (newer, _) = staggered_tree(root, Layout::V2, 6, 100);
        let every = 3u64;
        let mut r = CgroupReader::new(Hierarchies::detect(root), 4096).with_detail_every(every);
        r.collect(&pods);
        // Half the pods leave, six new ones come.
        let mut now: Vec<Arc<TaskPod>> = pods[6..].to_vec();
        now.extend(newer.iter().cloned());
        let before = r.reads.detail_cgroups;
        let got = r.collect(&now);
        assert_eq!(got.len(), 12);
        assert!(
            got.iter()
                .all(|t| t.stats.is_some() && t.containers.len() == 2)
        );
        assert!(
            got.iter().all(|t| t.pod.uid != pods[0].uid),
            "left with its pod"
        );
        assert_eq!(
            r.detail_reads().len(),
            36,
            "files of the pods that left are closed"
        );
        // The 18 new cgroups are read fully, plus the old ones whose phase it is.
        assert!(r.reads.detail_cgroups - before >= 18);
        // Every new cgroup was read once, now; and the new details are complete.
        for t in got.iter().skip(6) {
            let s = t.stats.as_ref().unwrap();
            assert!(s.memory_working_set_bytes.is_some() && s.memory_limit_bytes.is_some());
            assert!(!s.pressure.is_empty() && !s.numa_bytes.is_empty());
        }
        for _ in 0..every {
            let before = r.reads.detail_cgroups;
            r.collect(&now);
            assert_eq!(
                r.reads.detail_cgroups - before,
                36 / every,
                "balanced again"
            );
        }
    }

    /// The detail values (limit, cpuset, memory.stat, OOM kills, v1 throttling) change within N
    /// collections; CPU and memory usage are read every collection (and v2 throttling, which
    /// comes in the same `cpu.stat` read as the usage); the working set always pairs a
    /// `memory.stat` with the usage of the same read (never a fresh usage minus a stale
    /// inactive_file).
    #[test]
    fn detail_changes_show_within_n_and_the_working_set_is_consistent() {
        for layout in [Layout::V2, Layout::Hybrid] {
            for every in [1u64, 2, 5] {
                let dir = tempfile::tempdir().unwrap();
                let root = dir.path();
                fixture::init(root, layout).unwrap();
                let uid = "12345678-1234-1234-1234-123456789abc";
                let rel = fixture::pod_dir(Driver::Systemd, "burstable", uid);
                let mut v = Values::seeded(2);
                fixture::write_cgroup(root, layout, &rel, &v).unwrap();
                let p = pod(uid, "burstable", &[]);
                let mut r =
                    CgroupReader::new(Hierarchies::detect(root), 4096).with_detail_every(every);
                let one = |r: &mut CgroupReader| {
                    r.collect(std::slice::from_ref(&p))[0]
                        .stats
                        .clone()
                        .unwrap()
                };
                let s = one(&mut r);
                assert_eq!(s.memory_limit_bytes, Some((512u64 << 20) as f64));
                assert_eq!(s.cpuset_cpus, Some(4));
                let old_ws = (v.memory_usage - v.inactive_file) as f64;
                assert_eq!(s.memory_working_set_bytes, Some(old_ws));
                let old = v.clone();
                assert_eq!(s.oom_kills, Some(old.oom_kill));
                assert_eq!(s.cpu_throttled_periods, Some(old.throttled));
                // Change the detail values, the counters and the usage after the first
                // collection.
                v.cpu_usec += 3_000_000;
                v.periods += 50;
                v.throttled += 7;
                v.throttled_usec += 90_000;
                v.oom_kill += 2;
                v.memory_limit = Some(1 << 30);
                v.cpuset_cpus = "0-1";
                v.cpuset_mems = "0-1";
                v.memory_usage += 4 << 20;
                v.inactive_file += 1 << 20;
                v.rss += 1 << 20;
                fixture::write_cgroup(root, layout, &rel, &v).unwrap();
                let new_ws = (v.memory_usage - v.inactive_file) as f64;
                let mut seen_at = None;
                for n in 1..=every {
                    let s = one(&mut r);
                    let ctx = format!("{layout:?} N={every} collection {n}");
                    assert_eq!(
                        s.memory_usage_bytes,
                        Some(v.memory_usage as f64),
                        "{ctx}: usage read every time"
                    );
                    assert_eq!(
                        s.cpu_seconds,
                        Some(v.cpu_usec as f64 / 1e6),
                        "{ctx}: CPU usage read every time"
                    );
                    // Throttling: v2 from the every-collection cpu.stat; v1 from its own
                    // cpu.stat, a detail file.
                    let throttling_fresh = layout == Layout::V2;
                    let throttling = |v: &Values| {
                        (
                            Some(v.periods),
                            Some(v.throttled),
                            Some(v.throttled_usec as f64 / 1e6),
                        )
                    };
                    let got_throttling = (
                        s.cpu_periods,
                        s.cpu_throttled_periods,
                        s.cpu_throttled_seconds,
                    );
                    if throttling_fresh {
                        assert_eq!(got_throttling, throttling(&v), "{ctx}: v2 throttling");
                    }
                    if s.memory_limit_bytes == Some((1u64 << 30) as f64) {
                        assert_eq!(s.oom_kills, Some(v.oom_kill), "{ctx}");
                        assert_eq!(got_throttling, throttling(&v), "{ctx}");
                        assert_eq!(s.cpuset_cpus, Some(2), "{ctx}");
                        assert_eq!(s.cpuset_memory_nodes, Some(2), "{ctx}");
                        assert_eq!(s.memory_rss_bytes, Some(v.rss as f64), "{ctx}");
                        assert_eq!(s.memory_working_set_bytes, Some(new_ws), "{ctx}");
                        seen_at.get_or_insert(n);
                    } else {
                        assert!(seen_at.is_none(), "{ctx}: a new value does not flip back");
                        assert_eq!(s.oom_kills, Some(old.oom_kill), "{ctx}: OOM kills detail");
                        if !throttling_fresh {
                            assert_eq!(got_throttling, throttling(&old), "{ctx}: v1 detail");
                        }
                        assert_eq!(s.memory_limit_bytes, Some((512u64 << 20) as f64));
                        assert_eq!(s.cpuset_cpus, Some(4), "{ctx}");
                        assert_eq!(
                            s.memory_working_set_bytes,
                            Some(old_ws),
                            "{ctx}: the last detail read's pair, not new usage - old inactive"
                        );
                    }
                }
                // A single cgroup gets the first phase after its discovery: a full period.
                assert_eq!(seen_at, Some(every), "{layout:?} N={every}");
            }
        }
    }
}
