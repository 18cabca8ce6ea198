//! Pod and container cgroups: which hierarchies the kernel offers under the cgroup root, where
//! the kubelet put each pod (found by walking the tree and matching the pod UID, whatever the
//! driver or runtime), and the values in their files. `read_*` does I/O, `parse_*` is pure.
//! Read-only: nothing here ever writes to a cgroup.

use std::collections::HashMap;
use std::fs;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::model::{CgroupStats, ContainerSample, Pressure, TaskPod, TaskSample};

/// How deep below a hierarchy's root pod cgroups are looked for
/// (`kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice` is 3).
pub const MAX_DEPTH: usize = 6;

/// A v1 memory limit at or above this is "no limit" (the kernel's PAGE_COUNTER_MAX rounded).
const V1_UNLIMITED: u64 = 1 << 62;

/// The hierarchies one kind of value is read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Hier {
    /// cgroup v2: the whole tree (pure v2) or `unified` next to v1 controllers (hybrid).
    Unified,
    Cpu,
    Cpuacct,
    Memory,
    Cpuset,
}

impl Hier {
    const ALL: [Hier; 5] = [
        Hier::Unified,
        Hier::Cpu,
        Hier::Cpuacct,
        Hier::Memory,
        Hier::Cpuset,
    ];

    fn index(self) -> usize {
        self as usize
    }
}

/// The hierarchies found under a cgroup root.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Hierarchies {
    pub roots: [Option<PathBuf>; 5],
    /// True for a pure cgroup v2 mount at the root.
    pub pure_v2: bool,
}

impl Hierarchies {
    /// Finds what exists under `root`: a v2 mount at the root (it has `cgroup.controllers`),
    /// else v1 controllers `cpu`, `cpuacct` (or the combined `cpu,cpuacct`), `memory`, `cpuset`
    /// and a v2 `unified` hierarchy beside them.
    pub fn detect(root: &Path) -> Hierarchies {
        let mut h = Hierarchies::default();
        if root.join("cgroup.controllers").is_file() {
            h.roots[Hier::Unified.index()] = Some(root.to_path_buf());
            h.pure_v2 = true;
            return h;
        }
        let dir = |name: &str| Some(root.join(name)).filter(|p| p.is_dir());
        let unified = dir("unified").filter(|p| p.join("cgroup.controllers").is_file());
        h.roots[Hier::Unified.index()] = unified;
        h.roots[Hier::Cpu.index()] = dir("cpu").or_else(|| dir("cpu,cpuacct"));
        h.roots[Hier::Cpuacct.index()] = dir("cpuacct").or_else(|| dir("cpu,cpuacct"));
        h.roots[Hier::Memory.index()] = dir("memory");
        h.roots[Hier::Cpuset.index()] = dir("cpuset");
        h
    }

    pub fn root(&self, h: Hier) -> Option<&Path> {
        self.roots[h.index()].as_deref()
    }

    pub fn is_empty(&self) -> bool {
        self.roots.iter().all(Option::is_none)
    }

    /// Short description for logs: `v2` or `v1(cpu,cpuacct,memory,cpuset)+unified`.
    pub fn describe(&self) -> String {
        if self.pure_v2 {
            return "v2".into();
        }
        let names: Vec<&str> = [
            (Hier::Cpu, "cpu"),
            (Hier::Cpuacct, "cpuacct"),
            (Hier::Memory, "memory"),
            (Hier::Cpuset, "cpuset"),
        ]
        .iter()
        .filter(|(h, _)| self.root(*h).is_some())
        .map(|(_, n)| *n)
        .collect();
        let mut s = format!("v1({})", names.join(","));
        if self.root(Hier::Unified).is_some() {
            s.push_str("+unified");
        }
        s
    }
}

/// An id with dashes and underscores removed, lower-cased: the kubelet writes pod UIDs with
/// dashes (cgroupfs), underscores (systemd) or none (static pods' hashes).
pub fn normalize_id(id: &str) -> String {
    id.chars()
        .filter(|c| *c != '-' && *c != '_')
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

/// The normalized pod id a cgroup directory name stands for, if it is a pod cgroup:
/// `pod<uid>` (cgroupfs) or `...-pod<uid_>.slice` (systemd).
pub fn parse_pod_dir_name(name: &str) -> Option<String> {
    let stem = name.strip_suffix(".slice").unwrap_or(name);
    let at = stem.rfind("pod")?;
    // `pod` starts the name or follows a `-` (systemd unit naming).
    if at > 0 && !stem[..at].ends_with('-') {
        return None;
    }
    let id = normalize_id(&stem[at + 3..]);
    (id.len() >= 8 && id.bytes().all(|b| b.is_ascii_hexdigit())).then_some(id)
}

/// Whether a directory below a pod cgroup is the scope of container `id`: containerd
/// `cri-containerd-<id>.scope`, CRI-O `crio-<id>.scope`, Docker `docker-<id>.scope`, or the
/// bare `<id>` of the cgroupfs driver. CRI-O's `crio-conmon-<id>.scope` is its monitor, not
/// the container.
pub fn is_container_dir(name: &str, id: &str) -> bool {
    if id.is_empty() || name.contains("conmon") {
        return false;
    }
    let stem = name.strip_suffix(".scope").unwrap_or(name);
    stem == id
        || stem
            .strip_suffix(id)
            .is_some_and(|prefix| prefix.ends_with('-') || prefix.ends_with(':'))
}

/// Walks `root` up to [`MAX_DEPTH`] and returns the directory of each wanted normalized pod id.
/// Does not descend into pod cgroups (containers are looked up separately).
pub fn find_pod_dirs(root: &Path, wanted: &[&str]) -> HashMap<String, PathBuf> {
    let mut found = HashMap::new();
    let mut level = vec![root.to_path_buf()];
    for _ in 0..MAX_DEPTH {
        let mut next = Vec::new();
        for dir in &level {
            let Ok(entries) = fs::read_dir(dir) else {
                continue;
            };
            for e in entries.flatten() {
                if !e.file_type().is_ok_and(|t| t.is_dir()) {
                    continue;
                }
                let name = e.file_name();
                let Some(name) = name.to_str() else { continue };
                match parse_pod_dir_name(name) {
                    Some(id) if wanted.contains(&id.as_str()) => {
                        found.entry(id).or_insert_with(|| e.path());
                    }
                    Some(_) => {}
                    None => next.push(e.path()),
                }
            }
        }
        if found.len() == wanted.len() || next.is_empty() {
            break;
        }
        level = next;
    }
    found
}

/// Child directories of a pod cgroup that are scopes of the given containers: id -> path.
pub fn find_container_dirs(pod_dir: &Path, ids: &[&str]) -> HashMap<String, PathBuf> {
    let mut out = HashMap::new();
    let Ok(entries) = fs::read_dir(pod_dir) else {
        return out;
    };
    for e in entries.flatten() {
        if !e.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(id) = ids.iter().find(|id| is_container_dir(name, id)) {
            out.insert((*id).to_string(), e.path());
        }
    }
    out
}

// ---- parsing (pure) ----

/// A single unsigned integer (`memory.usage_in_bytes`, `cpuacct.usage`).
pub fn parse_u64(b: &[u8]) -> Option<u64> {
    std::str::from_utf8(b).ok()?.trim().parse().ok()
}

/// A v2 limit (`memory.max`): `Some(None)` for `max`.
pub fn parse_max(b: &[u8]) -> Option<Option<u64>> {
    let s = std::str::from_utf8(b).ok()?.trim();
    if s == "max" {
        return Some(None);
    }
    s.parse().ok().map(Some)
}

/// The value of `key` in a flat keyed file (`cpu.stat`, `memory.stat`, `memory.events`,
/// `memory.oom_control`): lines of `key value`.
pub fn parse_keyed(b: &[u8], key: &str) -> Option<u64> {
    let s = std::str::from_utf8(b).ok()?;
    s.lines().find_map(|l| {
        let mut it = l.split_ascii_whitespace();
        (it.next()? == key).then(|| it.next()?.parse().ok())?
    })
}

/// The values of several keys of a flat keyed file in one pass, in the order of `keys`.
pub fn parse_keys<const N: usize>(b: &[u8], keys: [&str; N]) -> [Option<u64>; N] {
    let mut out = [None; N];
    let Ok(s) = std::str::from_utf8(b) else {
        return out;
    };
    for l in s.lines() {
        let Some((k, v)) = l.split_once(' ') else {
            continue;
        };
        if let Some(i) = keys.iter().position(|x| *x == k) {
            out[i] = v.trim().parse().ok();
        }
    }
    out
}

/// `some` and `full` totals of a pressure file, in microseconds.
pub fn parse_pressure(b: &[u8]) -> Vec<(&'static str, u64)> {
    let Ok(s) = std::str::from_utf8(b) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for l in s.lines() {
        let mut it = l.split_ascii_whitespace();
        let kind = match it.next() {
            Some("some") => "some",
            Some("full") => "full",
            _ => continue,
        };
        if let Some(t) = it
            .find_map(|f| f.strip_prefix("total="))
            .and_then(|v| v.parse().ok())
        {
            out.push((kind, t));
        }
    }
    out
}

/// The `some` and `full` totals of a pressure file, in microseconds, without allocating.
pub fn parse_pressure_totals(b: &[u8]) -> [Option<u64>; 2] {
    let mut out = [None; 2];
    let Ok(s) = std::str::from_utf8(b) else {
        return out;
    };
    for l in s.lines() {
        let mut it = l.split_ascii_whitespace();
        let i = match it.next() {
            Some("some") => 0,
            Some("full") => 1,
            _ => continue,
        };
        out[i] = it
            .find_map(|f| f.strip_prefix("total="))
            .and_then(|v| v.parse().ok());
    }
    out
}

/// The highest CPU or memory-node id accepted in a cpuset list (the kernel's `NR_CPUS` is at
/// most 8192); a list naming a higher one is taken as not understood.
pub const MAX_SET_ID: u32 = 1 << 16;

/// How many ids a kernel id list names (`cpuset.effective_cpus`, `cpuset.cpus.effective`,
/// `cpuset.mems.effective`): `0-3,8,10-11` is 7, an empty list 0. `None` for anything else:
/// not ascending, overlapping, an id above [`MAX_SET_ID`]. Counts without building the set,
/// so the time is bounded by the input length.
pub fn parse_id_list_len(b: &[u8]) -> Option<u32> {
    let s = std::str::from_utf8(b).ok()?.trim();
    if s.is_empty() {
        return Some(0);
    }
    let mut count: u32 = 0;
    let mut next_free: u32 = 0; // ids below this are taken
    for part in s.split(',') {
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (parse_id(a)?, parse_id(b)?),
            None => {
                let v = parse_id(part)?;
                (v, v)
            }
        };
        if lo > hi || lo < next_free {
            return None;
        }
        count += hi - lo + 1;
        next_free = hi + 1;
    }
    Some(count)
}

fn parse_id(s: &str) -> Option<u32> {
    if s.is_empty() || !s.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    s.parse().ok().filter(|&v| v <= MAX_SET_ID)
}

fn per_node(fields: std::str::SplitAsciiWhitespace<'_>) -> Vec<(u32, u64)> {
    fields
        .filter_map(|f| {
            let (n, v) = f.strip_prefix('N')?.split_once('=')?;
            Some((n.parse().ok()?, v.parse().ok()?))
        })
        .collect()
}

/// v1 `memory.numa_stat`: pages per node of the whole subtree (`hierarchical_total=`; the
/// cgroup's own `total=` only when there is no hierarchical line: WCA let `total=` win).
pub fn parse_numa_stat_v1(b: &[u8]) -> Vec<(u32, u64)> {
    let Ok(s) = std::str::from_utf8(b) else {
        return Vec::new();
    };
    let line = |key: &str| {
        s.lines().find_map(|l| {
            let mut it = l.split_ascii_whitespace();
            let first = it.next()?;
            (first.strip_prefix(key)?.starts_with('=')).then(|| per_node(it))
        })
    };
    line("hierarchical_total")
        .or_else(|| line("total"))
        .unwrap_or_default()
}

/// v2 `memory.numa_stat`: bytes per node of `anon`, `file` and `unevictable` summed (what v1's
/// `total` counts).
pub fn parse_numa_stat_v2(b: &[u8]) -> Vec<(u32, u64)> {
    let Ok(s) = std::str::from_utf8(b) else {
        return Vec::new();
    };
    let mut sums: std::collections::BTreeMap<u32, u64> = Default::default();
    for l in s.lines() {
        let mut it = l.split_ascii_whitespace();
        if !matches!(it.next(), Some("anon" | "file" | "unevictable")) {
            continue;
        }
        for (n, v) in per_node(it) {
            *sums.entry(n).or_default() += v;
        }
    }
    sums.into_iter().collect()
}

// ---- reading ----

/// The NUMA nodes with memory (`<sysfs>/devices/system/node/has_memory`, the kernel's
/// `N_MEMORY` nodes: those `memory.numa_stat` lists); `None` where the file is absent (no NUMA
/// support: no `memory.numa_stat` either) or unreadable.
pub fn memory_nodes(sysfs: &Path) -> Option<Vec<u32>> {
    let s = fs::read_to_string(sysfs.join("devices/system/node/has_memory")).ok()?;
    super::platform::parse_cpu_list(s.trim())
}

/// Reads a (small) cgroup file into `buf`; `None` when it does not exist or cannot be read.
pub fn read_into<'a>(path: &Path, buf: &'a mut Vec<u8>) -> Option<&'a [u8]> {
    buf.clear();
    let mut f = fs::File::open(path).ok()?;
    f.read_to_end(buf).ok()?;
    Some(buf.as_slice())
}

/// The directories of one cgroup in each hierarchy.
pub type Dirs = [Option<PathBuf>; 5];

const NS: f64 = 1e9;
const US: f64 = 1e6;

/// The largest cgroup file read, in bytes (`memory.numa_stat` of a many-node machine is a few
/// KiB); a longer one is taken as unreadable.
const MAX_FILE: usize = 1 << 20;

/// Default of `--task-detail-every`: the detail files of each cgroup (v1 `cpu.stat`, the OOM
/// kill counters, `memory.stat`, `memory.numa_stat`, the `*.pressure` files, the memory limit,
/// the effective cpuset) are read once every this many collections, staggered over the
/// cgroups; CPU and memory usage on every collection. 4 keeps the detail series at most 3
/// collections (45 s at the default 15 s interval) old; docs/benchmarks.md has the CPU per
/// collection at each N.
pub const DEFAULT_DETAIL_EVERY: u64 = 4;

/// The largest accepted `--task-detail-every`.
pub const MAX_DETAIL_EVERY: u64 = 60;

/// Each cgroup file a collection reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Knob {
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
fn plan(hier: &Hierarchies) -> Vec<(Knob, Hier, &'static str)> {
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

/// Open cgroup files kept by every reader of the process; `FdBudget::max` caps them.
#[derive(Debug, Clone)]
pub struct FdBudget {
    kept: Arc<AtomicUsize>,
    max: usize,
}

impl FdBudget {
    /// At most `max` kept files.
    pub fn new(max: usize) -> Self {
        FdBudget {
            kept: Arc::new(AtomicUsize::new(0)),
            max,
        }
    }

    /// Three quarters of the soft `RLIMIT_NOFILE` minus 256: the rest stays for sockets, the
    /// perf counters' fds and files opened per read.
    pub fn from_rlimit() -> Self {
        let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile)
            .current
            .unwrap_or(u64::MAX);
        let soft = usize::try_from(soft).unwrap_or(usize::MAX);
        FdBudget::new((soft - soft / 4).saturating_sub(256))
    }

    /// Files kept open now.
    pub fn kept(&self) -> usize {
        self.kept.load(Ordering::Relaxed)
    }

    pub fn max(&self) -> usize {
        self.max
    }

    /// Keeps `fd` when the budget allows, else closes it.
    fn keep(&self, fd: OwnedFd) -> Option<Kept> {
        let taken = self
            .kept
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < self.max).then_some(n + 1)
            });
        taken.ok().map(|_| Kept {
            file: fs::File::from(fd),
            count: self.kept.clone(),
        })
    }
}

/// Raises the soft `RLIMIT_NOFILE` to the hard one (the task source keeps cgroup files open:
/// about 12 per cgroup, 3 cgroups per pod). Returns (soft, hard) after; `None` for "unlimited".
pub fn raise_fd_limit() -> (Option<u64>, Option<u64>) {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut l = getrlimit(Resource::Nofile);
    if l.current != l.maximum {
        let want = rustix::process::Rlimit {
            current: l.maximum,
            maximum: l.maximum,
        };
        if setrlimit(Resource::Nofile, want).is_ok() {
            l = getrlimit(Resource::Nofile);
        }
    }
    (l.current, l.maximum)
}

/// A cgroup file held open and re-read from offset 0 each collection (kernfs regenerates the
/// contents on every read from the start); counted in its [`FdBudget`].
#[derive(Debug)]
struct Kept {
    file: fs::File,
    count: Arc<AtomicUsize>,
}

impl Drop for Kept {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Where one file of a cgroup is read from.
#[derive(Debug)]
enum Slot {
    Kept(Kept),
    /// The fd budget was spent: opened, read and closed on each read.
    Path(PathBuf),
}

/// Reads all of `f` from offset 0 into `buf` (grown as needed, kept for the next read): one
/// `pread` for a file that fits.
fn pread_all<'a>(f: &fs::File, buf: &'a mut Vec<u8>) -> Option<&'a [u8]> {
    if buf.len() < 4096 {
        buf.resize(4096, 0);
    }
    loop {
        let n = f.read_at(buf, 0).ok()?;
        if n < buf.len() {
            return Some(&buf[..n]);
        }
        if buf.len() >= MAX_FILE {
            return None;
        }
        let grown = buf.len() * 2;
        buf.resize(grown, 0);
    }
}

impl Slot {
    fn read<'a>(&self, buf: &'a mut Vec<u8>) -> Option<&'a [u8]> {
        match self {
            Slot::Kept(k) => pread_all(&k.file, buf),
            Slot::Path(p) => pread_all(&fs::File::open(p).ok()?, buf),
        }
    }
}

/// Spreads the detail reads of one reader's cgroups over `every` collections: each cgroup gets
/// a phase (`0..every`) when it is found, the one fewest live cgroups have (ties: the phase of
/// the current collection, so a cgroup found now is next read a full period later), and reads
/// its detail files on the collections whose number is its phase modulo `every`. So every
/// collection reads about 1/`every` of the cgroups' detail files, also as pods come and go.
#[derive(Debug, Clone)]
struct Stagger {
    load: Arc<Vec<AtomicUsize>>,
}

impl Stagger {
    fn new(every: u64) -> Self {
        let n = usize::try_from(every.max(1)).unwrap_or(1);
        Stagger {
            load: Arc::new((0..n).map(|_| AtomicUsize::new(0)).collect()),
        }
    }

    fn every(&self) -> u64 {
        self.load.len() as u64
    }

    /// The least used phase, searched from the phase of `collection` on.
    fn assign(&self, collection: u64) -> Phase {
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
struct Phase {
    phase: u64,
    load: Arc<Vec<AtomicUsize>>,
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
struct CgroupFiles {
    files: Vec<(Knob, Slot)>,
    /// The files are on the kernel's cgroup filesystem (cgroup v1 or v2), where reading a
    /// removed cgroup fails: no need to look for unlinked files.
    on_cgroupfs: bool,
    phase: Phase,
    /// Detail reads so far (the first one when the cgroup is found).
    detail_reads: u64,
    /// The detail values as last read (v1 throttling, OOM kills, working set, RSS, cache, page
    /// faults, limit, pressure, NUMA, cpuset); the other fields stay empty.
    detail: CgroupStats,
    /// The host's one NUMA node with memory, where the cgroup offers `memory.numa_stat`: its
    /// bytes come from `memory.stat` (the file is not read; see [`CgroupReader::with_memory_nodes`]).
    numa_from_stat: Option<u32>,
}

impl CgroupFiles {
    /// Opens every file of `plan` this cgroup offers: each hierarchy's directory once, its
    /// files relative to it (`openat`), kept while `budget` allows.
    fn open(
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

    fn kept(&self) -> usize {
        self.files
            .iter()
            .filter(|(_, s)| matches!(s, Slot::Kept(_)))
            .count()
    }

    /// True when the files were unlinked (a removed directory on an ordinary filesystem, as in
    /// the fixture trees; kernfs answers reads of a removed cgroup with an error instead).
    fn unlinked(&self) -> bool {
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
    fn read(
        &mut self,
        collection: u64,
        page_size: u64,
        buf: &mut Vec<u8>,
        counts: &mut ReadCounts,
    ) -> CgroupStats {
        let mut s = CgroupStats::default();
        let detail_now =
            self.detail_reads == 0 || collection % self.phase.load.len() as u64 == self.phase.phase;
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

/// Values of one read that make others once every file is read: the working set (usage
/// minus inactive file) and, on a host with one NUMA node, the node's bytes (the LRU lists).
#[derive(Debug, Default)]
struct Derive {
    usage: Option<u64>,
    inactive: Option<u64>,
    /// Bytes on the LRU lists (anon + file + unevictable) from `memory.stat`: what
    /// `memory.numa_stat` gives summed over the nodes (v1 `hierarchical_total` in pages, v2
    /// `anon` + `file` + `unevictable`).
    lru: Option<u64>,
}

/// Puts the values of one file into `s`; `d` collects what makes derived values.
fn apply(knob: Knob, b: &[u8], page_size: u64, s: &mut CgroupStats, d: &mut Derive) {
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

// ---- resolution with a cache ----

#[derive(Debug)]
struct PodPaths {
    dirs: Dirs,
    files: CgroupFiles,
    /// Container id -> its files.
    containers: HashMap<String, CgroupFiles>,
    /// The container ids the pod had when its directories were last listed: listed again only
    /// when they change (a finished init container keeps an id but has no scope).
    listed: Vec<String>,
    /// Collections since the last listing.
    since_list: u64,
}

/// Collections between walks for pods still without a cgroup (pending pods), unless a new
/// pod appears.
const REWALK_EVERY: u64 = 6;

/// Finds and reads pod and container cgroups, remembering where each pod lives so the tree
/// is walked again only for pods not found yet, and keeping each cgroup's files open so a
/// collection is one `pread` per file (see [`FdBudget`] for the bound on open files).
#[derive(Debug)]
pub struct CgroupReader {
    hier: Hierarchies,
    plan: Vec<(Knob, Hier, &'static str)>,
    page_size: u64,
    budget: FdBudget,
    /// Pod UID -> where its cgroups are.
    cache: HashMap<String, PodPaths>,
    buf: Vec<u8>,
    /// Tree walks made (for tests and logs).
    pub walks: u64,
    /// Pods not found at the last walk, and collections since.
    missing: std::collections::HashSet<String>,
    since_walk: u64,
    /// Collections made (numbers the current one from 1).
    collections: u64,
    /// Phases of the pod cgroups' detail reads (`--task-detail-every`).
    stagger: Stagger,
    /// Phases of the container cgroups' detail reads (`--task-container-detail-every`).
    container_stagger: Stagger,
    /// Files read so far.
    pub reads: ReadCounts,
    /// The host's one NUMA node with memory, if it has exactly one (see
    /// [`CgroupReader::with_memory_nodes`]).
    numa_node: Option<u32>,
}

impl CgroupReader {
    /// A reader whose open files are bounded by [`FdBudget::from_rlimit`].
    pub fn new(hier: Hierarchies, page_size: u64) -> Self {
        Self::with_budget(hier, page_size, FdBudget::from_rlimit())
    }

    /// A reader keeping at most `budget` files open; beyond it files are opened per read.
    pub fn with_budget(hier: Hierarchies, page_size: u64, budget: FdBudget) -> Self {
        let stagger = Stagger::new(DEFAULT_DETAIL_EVERY);
        CgroupReader {
            plan: plan(&hier),
            hier,
            page_size,
            budget,
            cache: HashMap::new(),
            buf: vec![0; 4096],
            walks: 0,
            missing: Default::default(),
            since_walk: 0,
            collections: 0,
            container_stagger: stagger.clone(),
            stagger,
            reads: ReadCounts::default(),
            numa_node: None,
        }
    }

    /// Reads each cgroup's detail files once every `every` collections (1: every collection;
    /// values above [`MAX_DETAIL_EVERY`] are taken as it), the containers' too unless
    /// [`CgroupReader::with_container_detail_every`] follows. For a new reader: cgroups already
    /// found keep the phases they got.
    pub fn with_detail_every(mut self, every: u64) -> Self {
        self.stagger = Stagger::new(every.clamp(1, MAX_DETAIL_EVERY));
        // One stagger for pods and containers while they share the period: balanced over all.
        self.container_stagger = self.stagger.clone();
        self
    }

    /// Reads each container cgroup's detail files once every `every` collections (staggered
    /// over the containers apart from the pods; clamped as in
    /// [`CgroupReader::with_detail_every`]). For a new reader.
    pub fn with_container_detail_every(mut self, every: u64) -> Self {
        let every = every.clamp(1, MAX_DETAIL_EVERY);
        self.container_stagger = if every == self.stagger.every() {
            self.stagger.clone()
        } else {
            Stagger::new(every)
        };
        self
    }

    /// Collections between two detail reads of a container cgroup.
    pub fn container_detail_every(&self) -> u64 {
        self.container_stagger.every()
    }

    /// The NUMA nodes with memory of the host whose cgroups are read (the nodes the kernel lists
    /// in `memory.numa_stat`; [`memory_nodes`]). With exactly one, `memory.numa_stat` is not read:
    /// its one node's value equals the LRU total of the `memory.stat` of the same detail read
    /// (v1: `hierarchical_total` pages = the `total_*` LRU lines of `memory.stat` in bytes; v2:
    /// `anon` + `file` + `unevictable`), both from the same flushed counters. Saves one file of
    /// the detail tier (5.6 µs per cgroup on this kernel). `None` or several nodes: the file is
    /// read. For a new reader.
    pub fn with_memory_nodes(mut self, nodes: Option<&[u32]>) -> Self {
        self.numa_node = match nodes {
            Some([one]) => Some(*one),
            _ => None,
        };
        self
    }

    /// Collections between two detail reads of a pod cgroup.
    pub fn detail_every(&self) -> u64 {
        self.stagger.every()
    }

    /// Detail reads so far of each cgroup this reader has open: (pod UID, container id or
    /// `None` for the pod cgroup) and the count, the first one when the cgroup was found.
    pub fn detail_reads(&self) -> DetailReads {
        let mut out = Vec::new();
        for (uid, p) in &self.cache {
            out.push(((uid.clone(), None), p.files.detail_reads));
            for (id, c) in &p.containers {
                out.push(((uid.clone(), Some(id.clone())), c.detail_reads));
            }
        }
        out.sort();
        out
    }

    pub fn hierarchies(&self) -> &Hierarchies {
        &self.hier
    }

    pub fn budget(&self) -> &FdBudget {
        &self.budget
    }

    /// Files this reader keeps open now.
    pub fn kept_files(&self) -> usize {
        self.cache
            .values()
            .map(|p| p.files.kept() + p.containers.values().map(CgroupFiles::kept).sum::<usize>())
            .sum()
    }

    /// Resolves (where needed) and reads every pod; pods without a cgroup get `stats: None`.
    pub fn collect(&mut self, pods: &[std::sync::Arc<TaskPod>]) -> Vec<TaskSample> {
        // Forget pods that are gone (and close their files).
        self.collections += 1;
        let live: std::collections::HashSet<&str> = pods.iter().map(|p| p.uid.as_str()).collect();
        self.cache.retain(|uid, _| live.contains(uid.as_str()));
        self.resolve_missing(pods);
        let mut out = Vec::with_capacity(pods.len());
        for pod in pods {
            out.push(self.sample(pod));
        }
        out
    }

    fn resolve_missing(&mut self, pods: &[std::sync::Arc<TaskPod>]) {
        let missing: Vec<&TaskPod> = pods
            .iter()
            .filter(|p| !self.cache.contains_key(&p.uid))
            .map(AsRef::as_ref)
            .collect();
        self.since_walk += 1;
        if missing.is_empty()
            || (self.since_walk < REWALK_EVERY
                && missing.iter().all(|p| self.missing.contains(&p.uid)))
        {
            return;
        }
        self.since_walk = 0;
        // Normalized id -> pod UID.
        let mut by_id: HashMap<String, &str> = HashMap::new();
        for p in &missing {
            for id in &p.cgroup_ids {
                by_id.insert(normalize_id(id), p.uid.as_str());
            }
        }
        let wanted: Vec<&str> = by_id.keys().map(String::as_str).collect();
        let mut found: HashMap<&str, Dirs> = HashMap::new();
        let mut walked: Vec<(&Path, HashMap<String, PathBuf>)> = Vec::new();
        for h in Hier::ALL {
            let Some(root) = self.hier.root(h) else {
                continue;
            };
            // cpu and cpuacct may be one hierarchy: walk it once.
            let dirs = match walked.iter().find(|(r, _)| *r == root) {
                Some((_, d)) => d.clone(),
                None => {
                    self.walks += 1;
                    let d = find_pod_dirs(root, &wanted);
                    walked.push((root, d.clone()));
                    d
                }
            };
            for (id, path) in dirs {
                if let Some(uid) = by_id.get(&id) {
                    found.entry(uid).or_default()[h.index()] = Some(path);
                }
            }
        }
        self.missing = missing
            .iter()
            .filter(|p| !found.contains_key(p.uid.as_str()))
            .map(|p| p.uid.clone())
            .collect();
        for (uid, dirs) in found {
            let phase = self.stagger.assign(self.collections);
            let files = CgroupFiles::open(&dirs, &self.plan, &self.budget, phase, self.numa_node);
            self.cache.insert(
                uid.to_string(),
                PodPaths {
                    dirs,
                    files,
                    containers: HashMap::new(),
                    listed: Vec::new(),
                    since_list: 0,
                },
            );
        }
    }

    fn sample(&mut self, pod: &std::sync::Arc<TaskPod>) -> TaskSample {
        let Some(paths) = self.cache.get_mut(&pod.uid) else {
            return not_found(pod);
        };
        let (plan, budget, numa_node) = (&self.plan, &self.budget, self.numa_node);
        let (stagger, collection) = (&self.container_stagger, self.collections);
        paths.follow_containers(pod, |dirs| {
            let phase = stagger.assign(collection);
            CgroupFiles::open(dirs, plan, budget, phase, numa_node)
        });
        let stats = if paths.files.unlinked() {
            CgroupStats::default()
        } else {
            paths.files.read(
                self.collections,
                self.page_size,
                &mut self.buf,
                &mut self.reads,
            )
        };
        if stats.is_empty() {
            // The pod cgroup went away: close its files, find it again next time.
            self.cache.remove(&pod.uid);
            return not_found(pod);
        }
        let mut containers = Vec::with_capacity(pod.containers.len());
        for c in &pod.containers {
            let Some(files) = c.id.as_deref().and_then(|id| paths.containers.get_mut(id)) else {
                continue;
            };
            let cs = files.read(
                self.collections,
                self.page_size,
                &mut self.buf,
                &mut self.reads,
            );
            if !cs.is_empty() {
                containers.push(ContainerSample {
                    name: c.name.clone(),
                    stats: cs,
                });
            }
        }
        TaskSample {
            pod: pod.clone(),
            stats: Some(stats),
            containers,
        }
    }
}

/// The sample of a pod without a cgroup.
fn not_found(pod: &Arc<TaskPod>) -> TaskSample {
    TaskSample {
        pod: pod.clone(),
        stats: None,
        containers: Vec::new(),
    }
}

impl PodPaths {
    /// Containers not seen yet (new or restarted): lists the pod's directories once and opens
    /// the files of each container found with `open`; a container still without a scope is
    /// looked for again after [`REWALK_EVERY`] collections.
    fn follow_containers(&mut self, pod: &TaskPod, mut open: impl FnMut(&Dirs) -> CgroupFiles) {
        let ids: Vec<&str> = pod
            .containers
            .iter()
            .filter_map(|c| c.id.as_deref())
            .collect();
        self.since_list += 1;
        let changed =
            self.listed.len() != ids.len() || self.listed.iter().zip(&ids).any(|(a, b)| a != b);
        let unfound = ids.iter().any(|id| !self.containers.contains_key(*id));
        if !(changed || (unfound && self.since_list >= REWALK_EVERY)) {
            return;
        }
        self.since_list = 0;
        self.listed = ids.iter().map(|s| s.to_string()).collect();
        // Close the old files before opening the new ones.
        self.containers.clear();
        let mut dirs: HashMap<String, Dirs> = HashMap::new();
        for h in Hier::ALL {
            let Some(d) = &self.dirs[h.index()] else {
                continue;
            };
            for (id, p) in find_container_dirs(d, &ids) {
                dirs.entry(id).or_default()[h.index()] = Some(p);
            }
        }
        for (id, d) in dirs {
            self.containers.insert(id, open(&d));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::TaskContainer;
    use crate::sources::task::fixture::{self, Driver, Layout, Runtime, Values};
    use std::sync::Arc;

    #[test]
    fn pod_dir_names() {
        let uid = "0f4e3a5b-1c2d-4e5f-8a9b-0c1d2e3f4a5b";
        let norm = normalize_id(uid);
        let cases: &[(&str, Option<&str>)] = &[
            (
                "kubepods-burstable-pod0f4e3a5b_1c2d_4e5f_8a9b_0c1d2e3f4a5b.slice",
                Some(&norm),
            ),
            (
                "kubepods-pod0f4e3a5b_1c2d_4e5f_8a9b_0c1d2e3f4a5b.slice",
                Some(&norm),
            ),
            ("pod0f4e3a5b-1c2d-4e5f-8a9b-0c1d2e3f4a5b", Some(&norm)),
            // A static pod: the kubelet's hash, no dashes.
            (
                "pod6f1e0d2c3b4a59687766554433221100",
                Some("6f1e0d2c3b4a59687766554433221100"),
            ),
            ("kubepods.slice", None),
            ("kubepods-burstable.slice", None),
            ("besteffort", None),
            ("system.slice", None),
            ("cri-containerd-abc.scope", None),
            ("mypod1234abcd", None),
        ];
        for (name, want) in cases {
            assert_eq!(parse_pod_dir_name(name).as_deref(), *want, "{name}");
        }
    }

    #[test]
    fn container_dir_names() {
        let id = "a1b2c3";
        for (name, want) in [
            ("cri-containerd-a1b2c3.scope", true),
            ("crio-a1b2c3.scope", true),
            ("docker-a1b2c3.scope", true),
            ("a1b2c3", true),
            ("crio-conmon-a1b2c3.scope", false),
            ("cri-containerd-ffa1b2c3.scope", false),
            ("cri-containerd-a1b2c3d.scope", false),
        ] {
            assert_eq!(is_container_dir(name, id), want, "{name}");
        }
        assert!(!is_container_dir("x", ""));
    }

    #[test]
    fn parsers() {
        assert_eq!(parse_u64(b"123\n"), Some(123));
        assert_eq!(parse_u64(b"x"), None);
        assert_eq!(parse_max(b"max\n"), Some(None));
        assert_eq!(parse_max(b"1024\n"), Some(Some(1024)));
        let stat = b"usage_usec 10\nnr_periods 3\nnr_throttled 1\n";
        assert_eq!(parse_keyed(stat, "nr_periods"), Some(3));
        assert_eq!(parse_keyed(stat, "nr"), None);
        assert_eq!(
            parse_keys(stat, ["nr_throttled", "x", "usage_usec"]),
            [Some(1), None, Some(10)]
        );
        assert_eq!(
            parse_pressure(b"some avg10=0.10 avg60=0.00 avg300=0.00 total=1234\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=5\n"),
            vec![("some", 1234), ("full", 5)]
        );
        assert_eq!(
            parse_numa_stat_v1(
                b"total=10 N0=6 N1=4\nfile=1 N0=1 N1=0\nhierarchical_total=30 N0=20 N1=10\n"
            ),
            vec![(0, 20), (1, 10)]
        );
        assert_eq!(
            parse_numa_stat_v1(b"total=10 N0=6 N1=4\n"),
            vec![(0, 6), (1, 4)]
        );
        assert_eq!(
            parse_numa_stat_v2(b"anon N0=100 N1=1\nfile N0=10 N1=2\nkernel_stack N0=5 N1=5\nunevictable N0=1 N1=0\n"),
            vec![(0, 111), (1, 3)]
        );
    }

    #[test]
    fn id_lists_and_pressure_totals() {
        for (list, want) in [
            (&b"0-3,8,10-11\n"[..], Some(7)),
            (b"0", Some(1)),
            (b"\n", Some(0)),
            (b"", Some(0)),
            (b"0-63", Some(64)),
            (b"65536", Some(1)),
            (b"65537", None),
            (b"3-1", None),
            (b"0-3,2", None),
            (b"4,1", None),
            (b"0-", None),
            (b"-1", None),
            (b"0,,1", None),
            (b"+1", None),
            (b"0 - 3", None),
            (b"\xff", None),
        ] {
            assert_eq!(
                parse_id_list_len(list),
                want,
                "{}",
                String::from_utf8_lossy(list)
            );
        }
        assert_eq!(
            parse_pressure_totals(
                b"some avg10=0.10 avg60=0.00 avg300=0.00 total=1234\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=5\n"
            ),
            [Some(1234), Some(5)]
        );
        assert_eq!(
            parse_pressure_totals(b"some avg10=0.10 total=9\n"),
            [Some(9), None]
        );
    }

    /// A fixture tree of `pods` pods with two containers each; returns the pods and the
    /// relative directories of every cgroup (pod first, then its containers).
    fn staggered_tree(
        root: &Path,
        layout: Layout,
        pods: usize,
        first: usize,
    ) -> (Vec<Arc<TaskPod>>, Vec<PathBuf>) {
        let mut out = Vec::new();
        let mut rels = Vec::new();
        for i in first..first + pods {
            let uid = format!("{i:08x}-1234-1234-1234-123456789abc");
            let rel = fixture::pod_dir(Driver::Systemd, "burstable", &uid);
            fixture::write_cgroup(root, layout, &rel, &Values::seeded(i as u64)).unwrap();
            rels.push(rel.clone());
            let ids = [format!("a{i:04x}0"), format!("a{i:04x}1")];
            for (j, id) in ids.iter().enumerate() {
                let c = rel.join(fixture::container_dir(
                    Driver::Systemd,
                    Runtime::Containerd,
                    id,
                ));
                fixture::write_cgroup(root, layout, &c, &Values::seeded(100 + j as u64)).unwrap();
                rels.push(c);
            }
            out.push(pod(&uid, "burstable", &[&ids[0], &ids[1]]));
        }
        (out, rels)
    }

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

    #[test]
    fn memory_nodes_from_sysfs() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(memory_nodes(dir.path()), None);
        let n = dir.path().join("devices/system/node");
        std::fs::create_dir_all(&n).unwrap();
        std::fs::write(n.join("has_memory"), "0\n").unwrap();
        assert_eq!(memory_nodes(dir.path()), Some(vec![0]));
        std::fs::write(n.join("has_memory"), "0-1,3\n").unwrap();
        assert_eq!(memory_nodes(dir.path()), Some(vec![0, 1, 3]));
    }

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

    /// Files stay open between collections (counted in the budget), are closed with their pod,
    /// and past the budget are read by path with the same values.
    #[test]
    fn kept_files_are_bounded_and_closed_with_their_pods() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        fixture::init(root, Layout::Hybrid).unwrap();
        let mut pods = Vec::new();
        for i in 0..3 {
            let uid = format!("{i:08x}-1234-1234-1234-123456789abc");
            let rel = fixture::pod_dir(Driver::Systemd, "burstable", &uid);
            fixture::write_cgroup(root, Layout::Hybrid, &rel, &Values::seeded(i)).unwrap();
            let c = rel.join(fixture::container_dir(
                Driver::Systemd,
                Runtime::Containerd,
                "abc1",
            ));
            fixture::write_cgroup(root, Layout::Hybrid, &c, &Values::seeded(9)).unwrap();
            pods.push(pod(&uid, "burstable", &["abc1"]));
        }
        // Hybrid: cpuacct.usage, cpu.stat, 3 pressure files, 5 memory files, 2 cpuset files
        // (the unified cpu.stat is not needed when v1 gives CPU): 12 per cgroup, 6 cgroups.
        let plenty = FdBudget::new(1000);
        let mut r = CgroupReader::with_budget(Hierarchies::detect(root), 4096, plenty.clone());
        let full = r.collect(&pods);
        assert_eq!(r.kept_files(), 72);
        assert_eq!(plenty.kept(), 72);
        // A small budget: 20 kept, the rest read by path; the same values.
        let small = FdBudget::new(20);
        let mut r2 = CgroupReader::with_budget(Hierarchies::detect(root), 4096, small.clone());
        assert_eq!(r2.collect(&pods), full);
        assert_eq!(r2.collect(&pods), full);
        assert_eq!(small.kept(), 20);
        let none = FdBudget::new(0);
        let mut r3 = CgroupReader::with_budget(Hierarchies::detect(root), 4096, none.clone());
        assert_eq!(r3.collect(&pods), full);
        assert_eq!(none.kept(), 0);
        // Pods leave the list: their files are closed.
        r.collect(&pods[..1]);
        assert_eq!(plenty.kept(), 24);
        r.collect(&[]);
        assert_eq!(plenty.kept(), 0);
        drop(r2);
        assert_eq!(small.kept(), 0);
    }

    fn pod(uid: &str, qos: &str, ids: &[&str]) -> Arc<TaskPod> {
        Arc::new(TaskPod {
            uid: uid.to_string(),
            namespace: "ns".into(),
            name: format!("p-{}", &uid[..4]),
            qos: qos.into(),
            cgroup_ids: vec![uid.to_string()],
            labels: vec![],
            containers: ids
                .iter()
                .enumerate()
                .map(|(i, id)| TaskContainer {
                    name: format!("c{i}"),
                    id: Some(id.to_string()),
                    ready: true,
                })
                .collect(),
            requests: Default::default(),
            limits: Default::default(),
        })
    }

    /// Every layout, driver, runtime and QoS class: the pod and its containers are found and
    /// their values read; the pause container's scope is not taken for a container.
    #[test]
    fn tree_to_samples_for_every_layout() {
        let qoses = ["guaranteed", "burstable", "besteffort"];
        for layout in [Layout::Hybrid, Layout::V2] {
            for driver in [Driver::Systemd, Driver::Cgroupfs] {
                for runtime in [Runtime::Containerd, Runtime::Crio, Runtime::Docker] {
                    let dir = tempfile::tempdir().unwrap();
                    let root = dir.path();
                    fixture::init(root, layout).unwrap();
                    // Noise the walk must pass by.
                    fixture::write_cgroup(
                        root,
                        layout,
                        Path::new("system.slice/ssh.service"),
                        &Values::seeded(99),
                    )
                    .unwrap();
                    let mut pods = Vec::new();
                    for (i, qos) in qoses.iter().enumerate() {
                        let uid = format!("{i:08x}-1111-2222-3333-444455556666");
                        let ids = [format!("c0ffee{i}0"), format!("c0ffee{i}1")];
                        let pdir = fixture::pod_dir(driver, qos, &uid);
                        fixture::write_cgroup(
                            root,
                            layout,
                            &pdir,
                            &Values::seeded(10 * i as u64 + 1),
                        )
                        .unwrap();
                        for (j, id) in ids.iter().enumerate() {
                            let c = pdir.join(fixture::container_dir(driver, runtime, id));
                            fixture::write_cgroup(
                                root,
                                layout,
                                &c,
                                &Values::seeded(10 * i as u64 + 2 + j as u64),
                            )
                            .unwrap();
                        }
                        // The sandbox (pause) scope.
                        let pause = pdir.join(fixture::container_dir(driver, runtime, "5a4d60b0"));
                        fixture::write_cgroup(root, layout, &pause, &Values::seeded(7)).unwrap();
                        pods.push(pod(&uid, qos, &[&ids[0], &ids[1]]));
                    }
                    let mut r = CgroupReader::new(Hierarchies::detect(root), 4096);
                    let got = r.collect(&pods);
                    let ctx = format!("{layout:?} {driver:?} {runtime:?}");
                    assert_eq!(got.len(), 3, "{ctx}");
                    for (i, t) in got.iter().enumerate() {
                        let v = Values::seeded(10 * i as u64 + 1);
                        let s = t
                            .stats
                            .as_ref()
                            .unwrap_or_else(|| panic!("{ctx}: pod {i} not found"));
                        assert_eq!(s.cpu_seconds, Some(v.cpu_usec as f64 / 1e6), "{ctx}");
                        assert_eq!(s.cpu_periods, Some(v.periods), "{ctx}");
                        assert_eq!(s.cpu_throttled_periods, Some(v.throttled), "{ctx}");
                        assert_eq!(
                            s.cpu_throttled_seconds,
                            Some(v.throttled_usec as f64 / 1e6),
                            "{ctx}"
                        );
                        assert_eq!(s.memory_usage_bytes, Some(v.memory_usage as f64), "{ctx}");
                        assert_eq!(
                            s.memory_working_set_bytes,
                            Some((v.memory_usage - v.inactive_file) as f64),
                            "{ctx}"
                        );
                        assert_eq!(s.memory_rss_bytes, Some(v.rss as f64), "{ctx}");
                        assert_eq!(s.memory_cache_bytes, Some(v.cache as f64), "{ctx}");
                        assert_eq!(s.memory_limit_bytes, Some((512u64 << 20) as f64), "{ctx}");
                        assert_eq!(s.page_faults, Some(v.pgfault), "{ctx}");
                        assert_eq!(s.major_page_faults, Some(v.pgmajfault), "{ctx}");
                        assert_eq!(s.oom_kills, Some(v.oom_kill), "{ctx}");
                        assert_eq!(s.pressure.len(), 6, "{ctx}");
                        assert_eq!(s.numa_bytes, vec![(0, v.lru_bytes() as f64)], "{ctx}");
                        let cpus = if (10 * i as u64 + 1).is_multiple_of(2) {
                            4
                        } else {
                            7
                        };
                        assert_eq!(s.cpuset_cpus, Some(cpus), "{ctx}");
                        assert_eq!(s.cpuset_memory_nodes, Some(1), "{ctx}");
                        assert_eq!(t.containers.len(), 2, "{ctx}: pause must not count");
                        for (j, c) in t.containers.iter().enumerate() {
                            let cv = Values::seeded(10 * i as u64 + 2 + j as u64);
                            assert_eq!(c.name, format!("c{j}"));
                            assert_eq!(
                                c.stats.cpu_seconds,
                                Some(cv.cpu_usec as f64 / 1e6),
                                "{ctx}"
                            );
                            assert_eq!(
                                c.stats.memory_usage_bytes,
                                Some(cv.memory_usage as f64),
                                "{ctx}"
                            );
                        }
                    }
                    // Found once, read from the cache afterwards.
                    let walks = r.walks;
                    r.collect(&pods);
                    assert_eq!(r.walks, walks, "{ctx}");
                }
            }
        }
    }

    /// The Guaranteed-pod path WCA built (`kubepods-guaranteed.slice/...`) does not exist; the
    /// real one sits directly under `kubepods.slice` and is found.
    #[test]
    fn guaranteed_pods_under_the_qos_root_and_static_pods() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        fixture::init(root, Layout::V2).unwrap();
        let uid = "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee";
        fixture::write_cgroup(
            root,
            Layout::V2,
            &fixture::pod_dir(Driver::Systemd, "guaranteed", uid),
            &Values::seeded(1),
        )
        .unwrap();
        assert!(
            fixture::pod_dir(Driver::Systemd, "guaranteed", uid)
                .to_string_lossy()
                .starts_with("kubepods.slice/kubepods-pod")
        );
        // A mirror pod: its API UID differs from the hash the kubelet names the cgroup by.
        let hash = "0123456789abcdef0123456789abcdef";
        fixture::write_cgroup(
            root,
            Layout::V2,
            Path::new(&format!(
                "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{hash}.slice"
            )),
            &Values::seeded(2),
        )
        .unwrap();
        let mut mirror = (*pod("99999999-0000-0000-0000-000000000000", "besteffort", &[])).clone();
        mirror.cgroup_ids.push(hash.into());
        let pods = vec![pod(uid, "guaranteed", &[]), Arc::new(mirror)];
        let got = CgroupReader::new(Hierarchies::detect(root), 4096).collect(&pods);
        assert!(got[0].stats.is_some());
        assert_eq!(
            got[1].stats.as_ref().and_then(|s| s.cpu_seconds),
            Some(Values::seeded(2).cpu_usec as f64 / 1e6)
        );
    }

    /// What a hierarchy does not offer stays absent: no v2 memory controller, no limit,
    /// no pressure on pure v1, and pods without a cgroup.
    #[test]
    fn absent_values_are_absent_not_zero() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        fixture::init(root, Layout::V2).unwrap();
        let uid = "12345678-1234-1234-1234-123456789abc";
        let rel = fixture::pod_dir(Driver::Cgroupfs, "burstable", uid);
        let d = root.join(&rel);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(
            d.join("cpu.stat"),
            "usage_usec 2000000\nuser_usec 1\nsystem_usec 1\n",
        )
        .unwrap();
        std::fs::write(d.join("memory.max"), "max\n").unwrap();
        let pods = vec![
            pod(uid, "burstable", &["nope"]),
            pod("ffffffff-1234-1234-1234-123456789abc", "burstable", &[]),
        ];
        let got = CgroupReader::new(Hierarchies::detect(root), 4096).collect(&pods);
        let s = got[0].stats.as_ref().unwrap();
        assert_eq!(s.cpu_seconds, Some(2.0));
        assert_eq!(s.cpu_periods, None, "no cpu controller: no throttling data");
        assert_eq!(s.memory_usage_bytes, None);
        assert_eq!(s.memory_limit_bytes, None);
        assert!(s.pressure.is_empty());
        assert!(got[0].containers.is_empty());
        assert_eq!(got[1].stats, None);

        // v1 without the unified tree, unlimited memory.
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for c in ["cpu", "cpuacct", "memory"] {
            std::fs::create_dir_all(root.join(c).join(&rel)).unwrap();
        }
        std::fs::write(
            root.join("memory").join(&rel).join("memory.limit_in_bytes"),
            "9223372036854771712\n",
        )
        .unwrap();
        std::fs::write(
            root.join("memory").join(&rel).join("memory.usage_in_bytes"),
            "4096\n",
        )
        .unwrap();
        let h = Hierarchies::detect(root);
        assert_eq!(h.describe(), "v1(cpu,cpuacct,memory)");
        let got = CgroupReader::new(h, 4096).collect(&pods[..1]);
        let s = got[0].stats.as_ref().unwrap();
        assert_eq!(s.memory_usage_bytes, Some(4096.0));
        assert_eq!(s.memory_limit_bytes, None);
        assert_eq!(
            s.memory_working_set_bytes, None,
            "no memory.stat: no inactive_file"
        );
        assert!(s.pressure.is_empty());
        assert_eq!(s.cpu_seconds, None);
    }

    /// A pod whose cgroup goes away is looked for again; a new container is picked up.
    #[test]
    fn cache_follows_the_tree() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        fixture::init(root, Layout::V2).unwrap();
        let uid = "12345678-1234-1234-1234-123456789abc";
        let rel = fixture::pod_dir(Driver::Systemd, "burstable", uid);
        fixture::write_cgroup(root, Layout::V2, &rel, &Values::seeded(1)).unwrap();
        let mut r = CgroupReader::new(Hierarchies::detect(root), 4096);
        let p = pod(uid, "burstable", &["abc1"]);
        assert!(r.collect(std::slice::from_ref(&p))[0].containers.is_empty());
        fixture::write_cgroup(
            root,
            Layout::V2,
            &rel.join("cri-containerd-abc1.scope"),
            &Values::seeded(2),
        )
        .unwrap();
        // A scope that shows up after its id is listed again a few collections later.
        let mut found = 0;
        for _ in 0..REWALK_EVERY {
            found = r.collect(std::slice::from_ref(&p))[0].containers.len();
        }
        assert_eq!(found, 1);
        std::fs::remove_dir_all(root.join(&rel)).unwrap();
        assert_eq!(r.collect(std::slice::from_ref(&p))[0].stats, None);
        fixture::write_cgroup(root, Layout::V2, &rel, &Values::seeded(3)).unwrap();
        assert!(r.collect(std::slice::from_ref(&p))[0].stats.is_some());

        // A pending pod (no cgroup yet) is looked for every REWALK_EVERY collections, not on
        // every one; a new pod is looked for at once.
        let pending = pod("aaaaaaaa-1234-1234-1234-123456789abc", "burstable", &[]);
        let both = [p.clone(), pending.clone()];
        let w0 = r.walks;
        r.collect(&both);
        assert_eq!(
            r.walks,
            w0 + 1,
            "one walk (one v2 hierarchy) for the new pod"
        );
        for _ in 0..REWALK_EVERY - 1 {
            r.collect(&both);
        }
        assert_eq!(r.walks, w0 + 1, "no walk while nothing changed");
        r.collect(&both);
        assert_eq!(
            r.walks,
            w0 + 2,
            "looked for again after {REWALK_EVERY} collections"
        );
        let uid3 = "bbbbbbbb-1234-1234-1234-123456789abc";
        fixture::write_cgroup(
            root,
            Layout::V2,
            &fixture::pod_dir(Driver::Cgroupfs, "besteffort", uid3),
            &Values::seeded(4),
        )
        .unwrap();
        let three = [p, pending, pod(uid3, "besteffort", &[])];
        let got = r.collect(&three);
        assert_eq!(r.walks, w0 + 3);
        assert!(got[2].stats.is_some() && got[1].stats.is_none());
    }
}
