//! [`CgroupReader`]: finds each pod's cgroups once (walking the tree again only for pods not
//! found yet), keeps their files open, and reads every pod and container each collection.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::discovery::{Dirs, Hier, Hierarchies, find_container_dirs, find_pod_dirs, normalize_id};
use super::fds::FdBudget;
use super::files::{CgroupFiles, Knob, ReadCounts, plan};
use super::schedule::{DEFAULT_DETAIL_EVERY, DetailReads, MAX_DETAIL_EVERY, Stagger};
use crate::model::{CgroupStats, ContainerSample, TaskPod, TaskSample};

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
    /// in `memory.numa_stat`; [`memory_nodes`](super::memory_nodes)). With exactly one,
    /// `memory.numa_stat` is not read: its one node's value equals the LRU total of the
    /// `memory.stat` of the same detail read (v1: `hierarchical_total` pages = the `total_*`
    /// LRU lines of `memory.stat` in bytes; v2: `anon` + `file` + `unevictable`), both from the
    /// same flushed counters. Saves one file of the detail tier (5.6 µs per cgroup on this
    /// kernel). `None` or several nodes: the file is read. For a new reader.
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
    use crate::sources::task::cgroup::testing::pod;
    use support::task_fixture::{self as fixture, Driver, Layout, Runtime, Values};

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
