//! Where cgroups are: the hierarchies under the cgroup root, the pod cgroups (by walking the
//! tree for the pod UIDs) and their containers' scopes, and the host's NUMA nodes with memory.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

/// How deep below a hierarchy's root pod cgroups are looked for
/// (`kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice` is 3).
pub const MAX_DEPTH: usize = 6;

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
    pub(super) const ALL: [Hier; 5] = [
        Hier::Unified,
        Hier::Cpu,
        Hier::Cpuacct,
        Hier::Memory,
        Hier::Cpuset,
    ];

    pub(super) fn index(self) -> usize {
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

/// The directories of one cgroup in each hierarchy.
pub type Dirs = [Option<PathBuf>; 5];

/// The NUMA nodes with memory (`<sysfs>/devices/system/node/has_memory`, the kernel's
/// `N_MEMORY` nodes: those `memory.numa_stat` lists); `None` where the file is absent (no NUMA
/// support: no `memory.numa_stat` either) or unreadable.
pub fn memory_nodes(sysfs: &Path) -> Option<Vec<u32>> {
    let b = fs::read(sysfs.join("devices/system/node/has_memory")).ok()?;
    crate::sources::procfs::parse_id_list(&b)
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
