//! Per-pod perf counters (`--task-perf-events`, node role): `perf_event_open` in cgroup mode
//! (`PERF_FLAG_PID_CGROUP` with a descriptor of the pod's cgroup directory), one counter group
//! per online CPU, read with time enabled and time running, each value scaled by
//! enabled/running and summed over the CPUs. Derived IPC and cache misses per kilo-instruction
//! come from the pod's sums over the last interval (WCA summed per-container ratios).
//!
//! Which cgroup directory: the `perf_event` v1 controller's when it is mounted (pure v1, or a
//! hybrid host that binds it to v1), else the v2 tree's (pure v2, or a hybrid host's `unified`,
//! where an unmounted perf_event controller lives implicitly).
//!
//! At start the hardware set (cycles, instructions, cache references, cache misses) is tried on
//! the hierarchy's root cgroup; where the kernel or the VM refuses it, a warning says why and the
//! software set (task-clock, context switches, page faults) is used (`auto`). Every failed open
//! is counted by reason; nothing here panics or stops the node role.
//!
//! File descriptors: one per event per online CPU per pod (pods × CPUs × 4 hardware or 3
//! software events), opened when a pod's cgroup appears and closed when the pod leaves.
//! The cgroup directory's own descriptor is closed right after the counters are opened.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use perf_event::events::{Hardware, Software};
use perf_event::{Builder, Counter, ReadFormat};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::hub::Provider;
use crate::model::{PerfCounts, PerfEventSet, PerfMode, TaskPerfSample, TaskPerfSet, TaskPod};
use crate::sources::task::PodList;
use crate::sources::task::cgroup::{Hier, Hierarchies, find_pod_dirs, normalize_id};

/// Collections between new attempts for a pod whose cgroup was not found or whose counters
/// could not be opened.
pub const RETRY_EVERY: u64 = 6;

/// The `reason` values of the open-failure counter (docs/metrics.md lists them).
pub const FAILURE_REASONS: &[&str] = &["permission", "unsupported", "cgroup", "fd_limit", "other"];

/// Settings of the perf collection.
#[derive(Debug, Clone, PartialEq)]
pub struct PerfConfig {
    pub node: String,
    pub cgroup_root: PathBuf,
    pub sysfs: PathBuf,
    pub mode: PerfMode,
    pub interval: Duration,
}

/// One counted event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ev {
    Cycles,
    Instructions,
    CacheReferences,
    CacheMisses,
    TaskClock,
    ContextSwitches,
    PageFaults,
}

const HARDWARE: &[Ev] = &[
    Ev::Cycles,
    Ev::Instructions,
    Ev::CacheReferences,
    Ev::CacheMisses,
];
const SOFTWARE: &[Ev] = &[Ev::TaskClock, Ev::ContextSwitches, Ev::PageFaults];

/// The events of a set, in group order (the first leads the group).
pub fn events(set: PerfEventSet) -> &'static [Ev] {
    match set {
        PerfEventSet::Hardware => HARDWARE,
        PerfEventSet::Software => SOFTWARE,
    }
}

fn builder(ev: Ev) -> Builder<'static> {
    match ev {
        Ev::Cycles => Builder::new(Hardware::CPU_CYCLES),
        Ev::Instructions => Builder::new(Hardware::INSTRUCTIONS),
        Ev::CacheReferences => Builder::new(Hardware::CACHE_REFERENCES),
        Ev::CacheMisses => Builder::new(Hardware::CACHE_MISSES),
        Ev::TaskClock => Builder::new(Software::TASK_CLOCK),
        Ev::ContextSwitches => Builder::new(Software::CONTEXT_SWITCHES),
        Ev::PageFaults => Builder::new(Software::PAGE_FAULTS),
    }
}

/// The `reason` of a failed `perf_event_open` (or of opening the cgroup directory):
/// `permission` (EACCES, EPERM: no CAP_PERFMON/CAP_SYS_ADMIN, perf_event_paranoid, seccomp),
/// `unsupported` (ENOENT, ENODEV, EOPNOTSUPP: the PMU or the VM does not offer the event, or
/// the directory is not a cgroup of the perf_event controller), `cgroup` (EBADF, ENOTDIR: not a
/// cgroup directory, or it is gone), `fd_limit` (EMFILE, ENFILE), `other`.
pub fn classify(e: &io::Error) -> &'static str {
    match e.raw_os_error() {
        Some(libc::EACCES | libc::EPERM) => "permission",
        Some(libc::ENOENT | libc::ENODEV | libc::EOPNOTSUPP) => "unsupported",
        Some(libc::EBADF | libc::ENOTDIR) => "cgroup",
        Some(libc::EMFILE | libc::ENFILE) => "fd_limit",
        _ => "other",
    }
}

/// What to do about a reason, for the start-up warning.
fn hint(reason: &str) -> &'static str {
    match reason {
        "permission" => {
            "needs CAP_PERFMON (or CAP_SYS_ADMIN), which perf_event_paranoid does not waive for cgroup mode, and a seccomp profile that allows perf_event_open"
        }
        "unsupported" => {
            "the CPU's PMU does not offer the event here (typical in VMs without a virtual PMU), or the cgroup is not one of the perf_event controller"
        }
        "cgroup" => "the cgroup directory is not usable",
        "fd_limit" => "the open-file limit is reached (pods x CPUs x events descriptors)",
        _ => "unexpected error",
    }
}

/// Hardware counters scaled for multiplexing: `value × enabled / running`; a group that never
/// ran (running 0) counted nothing, so it adds 0.
pub fn scale(value: u64, enabled: u64, running: u64) -> f64 {
    if running == 0 || enabled <= running {
        return value as f64;
    }
    value as f64 * (enabled as f64 / running as f64)
}

/// One CPU group's reading: raw values in event order, times in nanoseconds.
#[derive(Debug, Clone, PartialEq)]
pub struct Reading {
    pub values: Vec<u64>,
    pub enabled: u64,
    pub running: u64,
}

/// The pod's counts: each event scaled per CPU and summed; and the largest enabled/running.
pub fn sum_readings(set: PerfEventSet, readings: &[Reading]) -> (PerfCounts, Option<f64>) {
    let evs = events(set);
    let mut sums = vec![0.0f64; evs.len()];
    let mut factor: Option<f64> = None;
    for r in readings {
        for (s, v) in sums.iter_mut().zip(&r.values) {
            *s += scale(*v, r.enabled, r.running);
        }
        if r.running > 0 {
            let f = (r.enabled as f64 / r.running as f64).max(1.0);
            factor = Some(factor.map_or(f, |g| g.max(f)));
        }
    }
    let mut c = PerfCounts::default();
    for (ev, v) in evs.iter().zip(sums) {
        let slot = match ev {
            Ev::Cycles => &mut c.cycles,
            Ev::Instructions => &mut c.instructions,
            Ev::CacheReferences => &mut c.cache_references,
            Ev::CacheMisses => &mut c.cache_misses,
            Ev::TaskClock => &mut c.task_clock_seconds,
            Ev::ContextSwitches => &mut c.context_switches,
            Ev::PageFaults => &mut c.page_faults,
        };
        *slot = Some(if *ev == Ev::TaskClock { v / 1e9 } else { v });
    }
    (c, factor)
}

/// `num / den` of the increases since `prev`; `None` without a previous reading, when an
/// increase is negative (counters reopened) or when the denominator did not grow.
fn delta_ratio(
    prev: &PerfCounts,
    now: &PerfCounts,
    num: fn(&PerfCounts) -> Option<f64>,
    den: fn(&PerfCounts) -> Option<f64>,
    times: f64,
) -> Option<f64> {
    let dn = num(now)? - num(prev)?;
    let dd = den(now)? - den(prev)?;
    (dd > 0.0 && dn >= 0.0).then(|| times * dn / dd)
}

/// IPC and cache misses per kilo-instruction over the interval from `prev` to `now`, both from
/// the pod's sums. Zero cycles or zero instructions in the interval: absent, never NaN or 0.
pub fn derive(prev: Option<&PerfCounts>, now: &PerfCounts) -> (Option<f64>, Option<f64>) {
    let Some(prev) = prev else {
        return (None, None);
    };
    let ipc = delta_ratio(prev, now, |c| c.instructions, |c| c.cycles, 1.0);
    let mpki = delta_ratio(prev, now, |c| c.cache_misses, |c| c.instructions, 1000.0);
    (ipc, mpki)
}

/// The cgroup hierarchy perf counters attach to: `perf_event` (v1) when mounted, else the v2
/// tree (pure or hybrid `unified`).
pub fn perf_root(cgroup_root: &Path) -> Option<PathBuf> {
    let v1 = cgroup_root.join("perf_event");
    if v1.is_dir() && !cgroup_root.join("cgroup.controllers").is_file() {
        return Some(v1);
    }
    Hierarchies::detect(cgroup_root)
        .root(Hier::Unified)
        .map(Path::to_path_buf)
}

/// The online CPUs (`<sysfs>/devices/system/cpu/online`).
pub fn online_cpus(sysfs: &Path) -> Vec<usize> {
    std::fs::read(sysfs.join("devices/system/cpu/online"))
        .ok()
        .and_then(|b| crate::sources::procfs::parse_id_list(&b))
        .map(|v| v.into_iter().map(|c| c as usize).collect())
        .unwrap_or_default()
}

/// One CPU's counter group: the leader is the first event.
struct CpuGroup {
    leader: Counter,
    /// Kept open: closing a member's descriptor removes it from the group.
    _members: Vec<Counter>,
    /// Kernel ids in event order.
    ids: Vec<u64>,
}

impl CpuGroup {
    fn open(cgroup: &File, cpu: usize, set: PerfEventSet) -> io::Result<CpuGroup> {
        let evs = events(set);
        let mut b = builder(evs[0]);
        b.observe_cgroup(cgroup)
            .one_cpu(cpu)
            .include_kernel()
            .read_format(
                ReadFormat::GROUP
                    | ReadFormat::TOTAL_TIME_ENABLED
                    | ReadFormat::TOTAL_TIME_RUNNING
                    | ReadFormat::ID,
            );
        let mut leader = b.build()?;
        let mut ids = vec![leader.id()];
        let mut members = Vec::with_capacity(evs.len() - 1);
        for ev in &evs[1..] {
            let mut b = builder(*ev);
            b.observe_cgroup(cgroup)
                .one_cpu(cpu)
                .include_kernel()
                .read_format(
                    ReadFormat::TOTAL_TIME_ENABLED
                        | ReadFormat::TOTAL_TIME_RUNNING
                        | ReadFormat::ID,
                );
            let m = b.build_with_group(&mut leader)?;
            ids.push(m.id());
            members.push(m);
        }
        leader.enable_group()?;
        Ok(CpuGroup {
            leader,
            _members: members,
            ids,
        })
    }

    fn read(&mut self) -> io::Result<Reading> {
        let data = self.leader.read_group()?;
        let ns = |d: Option<Duration>| d.map_or(0, |d| d.as_nanos() as u64);
        let mut values = vec![0u64; self.ids.len()];
        for e in data.iter() {
            if let Some(i) = self.ids.iter().position(|id| *id == e.id()) {
                values[i] = e.value();
            }
        }
        Ok(Reading {
            values,
            enabled: ns(data.time_enabled()),
            running: ns(data.time_running()),
        })
    }
}

/// Opens one group per CPU on a cgroup directory; all or nothing.
fn open_groups(dir: &Path, cpus: &[usize], set: PerfEventSet) -> io::Result<Vec<CpuGroup>> {
    let f = File::open(dir)?;
    cpus.iter().map(|&c| CpuGroup::open(&f, c, set)).collect()
}

struct PodCounters {
    groups: Vec<CpuGroup>,
    prev: Option<PerfCounts>,
}

/// Keeps the pods' counter groups: opens them for new pods, closes them for pods that left,
/// reads and sums them.
pub struct PerfCollector {
    node: String,
    root: Option<PathBuf>,
    cpus: Vec<usize>,
    set: Option<PerfEventSet>,
    pods: HashMap<String, PodCounters>,
    /// Pods without counters: collections since the last attempt.
    waiting: HashMap<String, u64>,
    failures: BTreeMap<&'static str, u64>,
    /// Tree walks made (for tests).
    pub walks: u64,
}

impl PerfCollector {
    /// Finds the hierarchy and the CPUs and picks the event set `mode` allows, by opening it on
    /// the hierarchy's root cgroup. Returns the start-up warnings too (already logged).
    pub fn new(
        node: &str,
        cgroup_root: &Path,
        sysfs: &Path,
        mode: PerfMode,
    ) -> (Self, Vec<String>) {
        let mut c = PerfCollector {
            node: node.to_string(),
            root: perf_root(cgroup_root),
            cpus: online_cpus(sysfs),
            set: None,
            pods: HashMap::new(),
            waiting: HashMap::new(),
            failures: BTreeMap::new(),
            walks: 0,
        };
        let mut warnings = Vec::new();
        let candidates: &[PerfEventSet] = match mode {
            PerfMode::Off => &[],
            PerfMode::Auto => &[PerfEventSet::Hardware, PerfEventSet::Software],
            PerfMode::Hardware => &[PerfEventSet::Hardware],
            PerfMode::Software => &[PerfEventSet::Software],
        };
        let Some(root) = c.root.clone() else {
            if mode != PerfMode::Off {
                *c.failures.entry("cgroup").or_default() += 1;
                warnings.push(format!(
                    "--task-perf-events: no perf_event cgroup hierarchy under {} (neither perf_event nor a cgroup v2 tree); no perf counters",
                    cgroup_root.display()
                ));
            }
            return (c, warnings);
        };
        if c.cpus.is_empty() && mode != PerfMode::Off {
            *c.failures.entry("other").or_default() += 1;
            warnings.push(format!(
                "--task-perf-events: {}/devices/system/cpu/online unreadable; no perf counters",
                sysfs.display()
            ));
            return (c, warnings);
        }
        c.pick_set(&root, candidates, mode, &mut warnings);
        for w in &warnings {
            tracing::warn!("{w}");
        }
        if let Some(set) = c.set {
            tracing::info!(
                events = set.as_str(),
                hierarchy = %root.display(),
                cpus = c.cpus.len(),
                "perf counters on: {} descriptors per pod",
                c.cpus.len() * events(set).len()
            );
        }
        (c, warnings)
    }

    /// The first of `candidates` whose events open on the `root` cgroup; a warning and a
    /// counted failure for each before it that does not.
    fn pick_set(
        &mut self,
        root: &Path,
        candidates: &[PerfEventSet],
        mode: PerfMode,
        warnings: &mut Vec<String>,
    ) {
        for set in candidates {
            match open_groups(root, &self.cpus[..1], *set) {
                Ok(_) => {
                    self.set = Some(*set);
                    break;
                }
                Err(e) => {
                    let reason = classify(&e);
                    *self.failures.entry(reason).or_default() += 1;
                    warnings.push(format!(
                        "--task-perf-events: {} events cannot be counted on {} ({reason}: {e}; {}){}",
                        set.as_str(),
                        root.display(),
                        hint(reason),
                        if *set == PerfEventSet::Hardware && mode == PerfMode::Auto {
                            "; falling back to software events (task-clock, context switches, page faults)"
                        } else {
                            "; no perf counters"
                        }
                    ));
                }
            }
        }
    }

    pub fn event_set(&self) -> Option<PerfEventSet> {
        self.set
    }

    /// Open perf descriptors now.
    pub fn open_counters(&self) -> u64 {
        let per_group = self.set.map_or(0, |s| events(s).len()) as u64;
        self.pods
            .values()
            .map(|p| p.groups.len() as u64 * per_group)
            .sum()
    }

    fn fail(&mut self, reason: &'static str) {
        *self.failures.entry(reason).or_default() += 1;
    }

    /// Closes the counters of pods that left, opens them for new pods (and retries waiting ones
    /// every [`RETRY_EVERY`] collections), reads every pod.
    pub fn collect(&mut self, pods: &[Arc<TaskPod>]) -> TaskPerfSet {
        let live: HashSet<&str> = pods.iter().map(|p| p.uid.as_str()).collect();
        self.pods.retain(|uid, _| live.contains(uid.as_str()));
        self.waiting.retain(|uid, _| live.contains(uid.as_str()));
        if let (Some(set), Some(root)) = (self.set, self.root.clone()) {
            self.open_new(pods, set, &root);
        }
        let mut tasks = Vec::new();
        for pod in pods {
            let Some(set) = self.set else { break };
            let Some(pc) = self.pods.get_mut(&pod.uid) else {
                continue;
            };
            let readings: io::Result<Vec<Reading>> =
                pc.groups.iter_mut().map(CpuGroup::read).collect();
            let readings = match readings {
                Ok(r) => r,
                Err(e) => {
                    tracing::debug!(pod = %pod.task_name(), error = %e, "perf read failed; counters closed, reopened later");
                    self.pods.remove(&pod.uid);
                    self.waiting.insert(pod.uid.clone(), 0);
                    self.fail(classify(&e));
                    continue;
                }
            };
            let (counts, scaling_factor) = sum_readings(set, &readings);
            let (ipc, cache_mpki) = derive(pc.prev.as_ref(), &counts);
            pc.prev = Some(counts);
            tasks.push(TaskPerfSample {
                pod: pod.clone(),
                counts,
                ipc,
                cache_mpki,
                scaling_factor,
            });
        }
        TaskPerfSet {
            node: self.node.clone(),
            event_set: self.set,
            tasks,
            open_failures: self.failures.iter().map(|(k, v)| (*k, *v)).collect(),
            open_counters: self.open_counters(),
        }
    }

    fn open_new(&mut self, pods: &[Arc<TaskPod>], set: PerfEventSet, root: &Path) {
        let mut due: Vec<&TaskPod> = Vec::new();
        for p in pods {
            if self.pods.contains_key(&p.uid) {
                continue;
            }
            let since = self.waiting.entry(p.uid.clone()).or_insert(RETRY_EVERY);
            if *since >= RETRY_EVERY {
                due.push(p);
            } else {
                *since += 1;
            }
        }
        if due.is_empty() {
            return;
        }
        let mut by_id: HashMap<String, &str> = HashMap::new();
        for p in &due {
            for id in &p.cgroup_ids {
                by_id.insert(normalize_id(id), p.uid.as_str());
            }
        }
        let wanted: Vec<&str> = by_id.keys().map(String::as_str).collect();
        self.walks += 1;
        let found = find_pod_dirs(root, &wanted);
        let mut dirs: HashMap<&str, PathBuf> = HashMap::new();
        for (id, path) in found {
            if let Some(uid) = by_id.get(id.as_str()) {
                dirs.entry(uid).or_insert(path);
            }
        }
        let cpus = self.cpus.clone();
        for p in due {
            self.waiting.insert(p.uid.clone(), 1);
            let Some(dir) = dirs.get(p.uid.as_str()) else {
                continue;
            };
            match open_groups(dir, &cpus, set) {
                Ok(groups) => {
                    self.waiting.remove(&p.uid);
                    self.pods
                        .insert(p.uid.clone(), PodCounters { groups, prev: None });
                }
                Err(e) => {
                    let reason = classify(&e);
                    tracing::debug!(pod = %p.task_name(), dir = %dir.display(), error = %e, reason, "perf counters not opened; tried again later");
                    self.fail(reason);
                }
            }
        }
    }
}

/// Starts the perf collection loop (`--task-perf-events` other than `off`).
pub fn spawn(
    cfg: PerfConfig,
    pods: PodList,
    provider: Arc<dyn Provider>,
    cancel: CancellationToken,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let (c, _) = {
            let cfg = cfg.clone();
            match tokio::task::spawn_blocking(move || {
                PerfCollector::new(&cfg.node, &cfg.cgroup_root, &cfg.sysfs, cfg.mode)
            })
            .await
            {
                Ok(c) => c,
                Err(_) => {
                    tracing::error!("perf counter set-up panicked; no perf counters");
                    return;
                }
            }
        };
        let mut collector = Some(c);
        loop {
            let started = Instant::now();
            let list = pods();
            let Some(mut c) = collector.take() else { break };
            let Ok((c, set)) = tokio::task::spawn_blocking(move || {
                let set = c.collect(&list);
                (c, set)
            })
            .await
            else {
                tracing::error!("perf collection panicked; stopping perf counters");
                break;
            };
            collector = Some(c);
            provider.task().record_task_perf(set);
            let wait = cfg.interval.saturating_sub(started.elapsed());
            tokio::select! {
                _ = cancel.cancelled() => break,
                _ = tokio::time::sleep(wait) => {}
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scaling_by_enabled_over_running() {
        assert_eq!(scale(100, 1000, 1000), 100.0);
        assert_eq!(scale(100, 1000, 250), 400.0, "ran a quarter of the time");
        assert_eq!(scale(0, 1000, 0), 0.0, "never ran: counted nothing");
        assert_eq!(scale(7, 0, 0), 7.0);
        // Summed over CPUs after scaling each.
        let r = [
            Reading {
                values: vec![100, 50, 10, 1],
                enabled: 1000,
                running: 500,
            },
            Reading {
                values: vec![30, 30, 3, 3],
                enabled: 1000,
                running: 1000,
            },
            Reading {
                values: vec![0, 0, 0, 0],
                enabled: 0,
                running: 0,
            },
        ];
        let (c, f) = sum_readings(PerfEventSet::Hardware, &r);
        assert_eq!(c.cycles, Some(230.0));
        assert_eq!(c.instructions, Some(130.0));
        assert_eq!(c.cache_references, Some(23.0));
        assert_eq!(c.cache_misses, Some(5.0));
        assert_eq!(c.task_clock_seconds, None);
        assert_eq!(f, Some(2.0));
        let (c, f) = sum_readings(
            PerfEventSet::Software,
            &[Reading {
                values: vec![1_500_000_000, 4, 9],
                enabled: 10,
                running: 10,
            }],
        );
        assert_eq!(c.task_clock_seconds, Some(1.5), "nanoseconds to seconds");
        assert_eq!(c.context_switches, Some(4.0));
        assert_eq!(c.page_faults, Some(9.0));
        assert_eq!(c.cycles, None);
        assert_eq!(f, Some(1.0));
        let (_, f) = sum_readings(PerfEventSet::Software, &[]);
        assert_eq!(f, None);
    }

    fn hw(cycles: f64, instr: f64, misses: f64) -> PerfCounts {
        PerfCounts {
            cycles: Some(cycles),
            instructions: Some(instr),
            cache_references: Some(misses * 2.0),
            cache_misses: Some(misses),
            ..PerfCounts::default()
        }
    }

    /// Ratios come from the pod's sums over the interval; WCA summed per-container ratios:
    /// two containers of IPC 2 and 0.5 made an "IPC" of 2.5.
    #[test]
    fn derived_ratios_from_the_pods_sums() {
        let prev = hw(1000.0, 1000.0, 10.0);
        // Container A: 100 cycles, 200 instructions; B: 400 cycles, 200 instructions.
        let now = hw(1500.0, 1400.0, 14.0);
        let (ipc, mpki) = derive(Some(&prev), &now);
        assert_eq!(ipc, Some(400.0 / 500.0));
        assert_eq!(mpki, Some(1000.0 * 4.0 / 400.0));
        assert_ne!(ipc, Some(2.0 + 0.5));
        // First reading: nothing to compare with.
        assert_eq!(derive(None, &now), (None, None));
        // No instructions (and no cycles) in the interval: absent, not NaN, not 0.
        let (ipc, mpki) = derive(Some(&now), &now);
        assert_eq!((ipc, mpki), (None, None));
        // Cycles but no instructions: IPC 0 is a fact, MPKI is undefined.
        let (ipc, mpki) = derive(Some(&prev), &hw(1100.0, 1000.0, 12.0));
        assert_eq!(ipc, Some(0.0));
        assert_eq!(mpki, None);
        // Software set: no ratios.
        let sw = PerfCounts {
            task_clock_seconds: Some(1.0),
            ..PerfCounts::default()
        };
        assert_eq!(derive(Some(&sw), &sw), (None, None));
        // Counters reopened (values went down): no ratio from a negative increase.
        assert_eq!(derive(Some(&now), &hw(10.0, 5.0, 1.0)), (None, None));
    }

    #[test]
    fn error_classification() {
        let e = |n| io::Error::from_raw_os_error(n);
        assert_eq!(classify(&e(libc::EACCES)), "permission");
        assert_eq!(classify(&e(libc::EPERM)), "permission");
        assert_eq!(classify(&e(libc::ENOENT)), "unsupported");
        assert_eq!(classify(&e(libc::EOPNOTSUPP)), "unsupported");
        assert_eq!(classify(&e(libc::ENODEV)), "unsupported");
        assert_eq!(classify(&e(libc::EBADF)), "cgroup");
        assert_eq!(classify(&e(libc::ENOTDIR)), "cgroup");
        assert_eq!(classify(&e(libc::EMFILE)), "fd_limit");
        assert_eq!(classify(&e(libc::ENFILE)), "fd_limit");
        assert_eq!(classify(&e(libc::EINVAL)), "other");
        assert_eq!(classify(&io::Error::other("x")), "other");
        for r in [
            libc::EACCES,
            libc::ENOENT,
            libc::EBADF,
            libc::EMFILE,
            libc::EINVAL,
        ] {
            assert!(FAILURE_REASONS.contains(&classify(&e(r))));
        }
    }

    #[test]
    fn modes_and_hierarchies() {
        assert_eq!(PerfMode::parse("auto"), Some(PerfMode::Auto));
        assert_eq!(PerfMode::parse("true"), Some(PerfMode::Auto));
        assert_eq!(PerfMode::parse("Hardware"), Some(PerfMode::Hardware));
        assert_eq!(PerfMode::parse("software"), Some(PerfMode::Software));
        assert_eq!(PerfMode::parse("off"), Some(PerfMode::Off));
        assert_eq!(PerfMode::parse("cycles"), None);
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        assert_eq!(perf_root(root), None);
        std::fs::create_dir_all(root.join("unified")).unwrap();
        std::fs::write(root.join("unified/cgroup.controllers"), "").unwrap();
        assert_eq!(perf_root(root), Some(root.join("unified")), "hybrid");
        std::fs::create_dir_all(root.join("perf_event")).unwrap();
        assert_eq!(perf_root(root), Some(root.join("perf_event")), "v1 bound");
        let v2 = tempfile::tempdir().unwrap();
        std::fs::write(v2.path().join("cgroup.controllers"), "cpu\n").unwrap();
        assert_eq!(perf_root(v2.path()), Some(v2.path().to_path_buf()));
        // No hierarchy: no set, one counted failure, a warning; never a panic.
        let (c, w) = PerfCollector::new("n", &dir.path().join("nope"), root, PerfMode::Auto);
        assert_eq!(c.event_set(), None);
        assert_eq!(w.len(), 1);
        let (mut c, _) = PerfCollector::new("n", &dir.path().join("nope"), root, PerfMode::Auto);
        let s = c.collect(&[]);
        assert_eq!(s.open_failures, vec![("cgroup", 1)]);
        assert_eq!(s.open_counters, 0);
    }
}
