//! CPU time at the scheduler's resolution: a process the bench starts is moved into a cgroup
//! of its own (v1 `cpuacct`, or v2), whose counter holds every thread's CPU in nanoseconds,
//! threads that already exited included. utime + stime in /proc/PID/stat count in clock ticks
//! (10 ms here), too coarse for a process that uses 3 ms in 15 s. Where no cgroup can be made
//! (not root, a read-only /sys/fs/cgroup), CPU falls back to clock ticks and the report says so.

use std::path::{Path, PathBuf};

/// The name every cgroup the benches make starts with; [`cpu_ns`] only reads these.
const PREFIX: &str = "kube-prober-bench.";

/// Where a kind of cgroup is mounted, and the file and unit of its CPU counter.
struct Hierarchy {
    root: &'static str,
    /// The process's line in /proc/PID/cgroup for this hierarchy: v1 names its controllers,
    /// v2 has an empty list (`0::/path`).
    v1_controller: Option<&'static str>,
}

const HIERARCHIES: [Hierarchy; 4] = [
    Hierarchy {
        root: "/sys/fs/cgroup/cpuacct",
        v1_controller: Some("cpuacct"),
    },
    Hierarchy {
        root: "/sys/fs/cgroup/cpu,cpuacct",
        v1_controller: Some("cpuacct"),
    },
    Hierarchy {
        root: "/sys/fs/cgroup/unified",
        v1_controller: None,
    },
    Hierarchy {
        root: "/sys/fs/cgroup",
        v1_controller: None,
    },
];

impl Hierarchy {
    fn usable(&self) -> bool {
        let root = Path::new(self.root);
        match self.v1_controller {
            Some(_) => root.join("cpuacct.usage").exists(),
            None => root.join("cgroup.procs").exists() && !root.join("cpuacct.usage").exists(),
        }
    }

    /// Nanoseconds of CPU the cgroup `dir` counted.
    fn usage_ns(&self, dir: &Path) -> Option<u64> {
        if self.v1_controller.is_some() {
            let text = std::fs::read_to_string(dir.join("cpuacct.usage")).ok()?;
            return text.trim().parse().ok();
        }
        let text = std::fs::read_to_string(dir.join("cpu.stat")).ok()?;
        text.lines()
            .find_map(|l| l.strip_prefix("usage_usec "))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(|us| us * 1000)
    }

    /// The path (relative to `root`) of `pid`'s cgroup in this hierarchy.
    fn cgroup_of(&self, pid: u32) -> Option<String> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
        text.lines().find_map(|line| {
            let mut f = line.splitn(3, ':');
            let (_, controllers, path) = (f.next()?, f.next()?, f.next()?);
            let ours = match self.v1_controller {
                Some(c) => controllers.split(',').any(|x| x == c),
                None => controllers.is_empty(),
            };
            ours.then(|| path.to_string())
        })
    }
}

/// A cgroup holding one process the bench started; removed when dropped (after the process
/// has exited: a cgroup with a process in it cannot be removed, and is then left behind).
pub struct CpuGroup {
    dir: PathBuf,
}

impl CpuGroup {
    /// Moves `pid` into a new cgroup named after it, in the first usable hierarchy; `None`
    /// (CPU in clock ticks then) when none can be made or the move is refused.
    pub fn adopt(pid: u32) -> Option<CpuGroup> {
        let h = HIERARCHIES.iter().find(|h| h.usable())?;
        let dir = Path::new(h.root).join(format!("{PREFIX}{}.{pid}", std::process::id()));
        std::fs::create_dir(&dir).ok()?;
        let group = CpuGroup { dir };
        std::fs::write(group.dir.join("cgroup.procs"), pid.to_string()).ok()?;
        Some(group)
    }
}

impl Drop for CpuGroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// CPU a process used, in nanoseconds: from its own bench cgroup ([`CpuGroup::adopt`]) when
/// it is in one, else utime + stime in clock ticks.
pub fn cpu_ns(pid: u32) -> u64 {
    for h in HIERARCHIES.iter().filter(|h| h.usable()) {
        let Some(path) = h.cgroup_of(pid) else {
            continue;
        };
        let own = path
            .rsplit('/')
            .next()
            .is_some_and(|n| n.starts_with(PREFIX));
        if let Some(ns) = own
            .then(|| h.usage_ns(&Path::new(h.root).join(path.trim_start_matches('/'))))
            .flatten()
        {
            return ns;
        }
    }
    super::cpu_ticks(pid) * 1_000_000_000 / super::clk_tck()
}
