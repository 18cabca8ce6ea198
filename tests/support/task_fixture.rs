//! Kubelet-shaped cgroup trees in a directory, for tests and benches: cgroup v1 (with the v2
//! `unified` hierarchy beside it, as hybrid hosts have) or v2, systemd or cgroupfs driver,
//! containerd, CRI-O or Docker scopes. Writes only below the directory it is given.

use std::io;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// v1 controllers cpu, cpuacct, memory, cpuset plus `unified` (pressure and cpu.stat only).
    Hybrid,
    /// One v2 hierarchy at the root with the cpu and memory controllers.
    V2,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Driver {
    Systemd,
    Cgroupfs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runtime {
    Containerd,
    Crio,
    Docker,
}

/// The values one fixture cgroup holds.
#[derive(Debug, Clone, PartialEq)]
pub struct Values {
    pub cpu_usec: u64,
    pub periods: u64,
    pub throttled: u64,
    pub throttled_usec: u64,
    pub memory_usage: u64,
    pub inactive_file: u64,
    pub rss: u64,
    pub cache: u64,
    /// `None`: no limit.
    pub memory_limit: Option<u64>,
    pub pgfault: u64,
    pub pgmajfault: u64,
    pub oom_kill: u64,
    pub pressure_some_usec: u64,
    pub pressure_full_usec: u64,
    /// The effective cpuset: CPU list and memory-node list in the kernel's list format.
    pub cpuset_cpus: &'static str,
    pub cpuset_mems: &'static str,
}

impl Values {
    /// Bytes on the LRU lists (anon + file + unevictable), what `memory.numa_stat` gives per
    /// node: all of it on NUMA node 0. The fixture writes the LRU lines of `memory.stat`
    /// (anon = `rss`, file = `cache` of which `inactive_file` inactive, unevictable 0) and
    /// `memory.numa_stat` consistently, as the kernel does (`inactive_file` ≤ `cache`, both and
    /// `rss` multiples of 4096).
    pub fn lru_bytes(&self) -> u64 {
        self.rss + self.cache
    }

    /// Distinct, recognisable values derived from `seed`.
    pub fn seeded(seed: u64) -> Values {
        Values {
            cpu_usec: 1_000_000 * seed + 500_000,
            periods: 100 * seed,
            throttled: 10 * seed,
            throttled_usec: 20_000 * seed,
            memory_usage: (64 + seed) << 20,
            inactive_file: (8 + seed) << 20,
            rss: (32 + seed) << 20,
            cache: (16 + seed) << 20,
            memory_limit: Some(512 << 20),
            pgfault: 1000 * seed,
            pgmajfault: seed,
            oom_kill: seed % 3,
            pressure_some_usec: 3_000_000 * seed,
            pressure_full_usec: 1_000_000 * seed,
            cpuset_cpus: if seed.is_multiple_of(2) {
                "0-3"
            } else {
                "0,2-3,8-11"
            },
            cpuset_mems: "0",
        }
    }
}

/// The QoS path part of a pod cgroup as the kubelet makes it.
pub fn pod_dir(driver: Driver, qos: &str, uid: &str) -> PathBuf {
    match (driver, qos) {
        (Driver::Systemd, "guaranteed") => PathBuf::from(format!(
            "kubepods.slice/kubepods-pod{}.slice",
            uid.replace('-', "_")
        )),
        (Driver::Systemd, q) => PathBuf::from(format!(
            "kubepods.slice/kubepods-{q}.slice/kubepods-{q}-pod{}.slice",
            uid.replace('-', "_")
        )),
        (Driver::Cgroupfs, "guaranteed") => PathBuf::from(format!("kubepods/pod{uid}")),
        (Driver::Cgroupfs, q) => PathBuf::from(format!("kubepods/{q}/pod{uid}")),
    }
}

/// A container's directory name below its pod cgroup.
pub fn container_dir(driver: Driver, runtime: Runtime, id: &str) -> String {
    match (driver, runtime) {
        (Driver::Cgroupfs, _) => id.to_string(),
        (Driver::Systemd, Runtime::Containerd) => format!("cri-containerd-{id}.scope"),
        (Driver::Systemd, Runtime::Crio) => format!("crio-{id}.scope"),
        (Driver::Systemd, Runtime::Docker) => format!("docker-{id}.scope"),
    }
}

fn write(dir: &Path, file: &str, body: &str) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join(file), body)
}

/// Marks `root` as the given layout (the files `Hierarchies::detect` looks at).
pub fn init(root: &Path, layout: Layout) -> io::Result<()> {
    match layout {
        Layout::V2 => write(root, "cgroup.controllers", "cpuset cpu io memory pids\n"),
        Layout::Hybrid => {
            for c in ["cpu", "cpuacct", "memory", "cpuset"] {
                std::fs::create_dir_all(root.join(c))?;
            }
            write(&root.join("unified"), "cgroup.controllers", "")
        }
    }
}

/// Writes one cgroup at `rel` (relative to each hierarchy) with `v`.
pub fn write_cgroup(root: &Path, layout: Layout, rel: &Path, v: &Values) -> io::Result<()> {
    match layout {
        Layout::Hybrid => {
            write_hybrid_cpu(root, rel, v)?;
            write_hybrid_memory(&root.join("memory").join(rel), v)?;
            let cs = root.join("cpuset").join(rel);
            write(
                &cs,
                "cpuset.effective_cpus",
                &format!("{}\n", v.cpuset_cpus),
            )?;
            write(
                &cs,
                "cpuset.effective_mems",
                &format!("{}\n", v.cpuset_mems),
            )
        }
        Layout::V2 => write_v2(&root.join(rel), v),
    }
}

/// The three pressure files' contents.
fn pressure(v: &Values) -> String {
    format!(
        "some avg10=0.00 avg60=0.00 avg300=0.00 total={}\nfull avg10=0.00 avg60=0.00 avg300=0.00 total={}\n",
        v.pressure_some_usec, v.pressure_full_usec
    )
}

/// Hybrid: the unified `cpu.stat` and pressure files, v1 `cpu.stat` and `cpuacct.usage`.
fn write_hybrid_cpu(root: &Path, rel: &Path, v: &Values) -> io::Result<()> {
    let u = root.join("unified").join(rel);
    write(
        &u,
        "cpu.stat",
        &format!("usage_usec {}\nuser_usec 0\nsystem_usec 0\n", v.cpu_usec),
    )?;
    let pressure = pressure(v);
    for f in ["cpu.pressure", "memory.pressure", "io.pressure"] {
        write(&u, f, &pressure)?;
    }
    let cpu = root.join("cpu").join(rel);
    write(
        &cpu,
        "cpu.stat",
        &format!(
            "nr_periods {}\nnr_throttled {}\nthrottled_time {}\n",
            v.periods,
            v.throttled,
            v.throttled_usec * 1000
        ),
    )?;
    write(
        &root.join("cpuacct").join(rel),
        "cpuacct.usage",
        &format!("{}\n", v.cpu_usec * 1000),
    )
}

/// Hybrid: the v1 memory controller's files in `m`.
fn write_hybrid_memory(m: &Path, v: &Values) -> io::Result<()> {
    write(m, "memory.usage_in_bytes", &format!("{}\n", v.memory_usage))?;
    write(
        m,
        "memory.limit_in_bytes",
        &format!("{}\n", v.memory_limit.unwrap_or(9223372036854771712)),
    )?;
    write(
        m,
        "memory.stat",
        &format!(
            "cache 0\nrss 0\ninactive_file 0\npgfault 0\ntotal_cache {}\ntotal_rss {}\ntotal_inactive_file {}\ntotal_pgfault {}\ntotal_pgmajfault {}\ntotal_inactive_anon 0\ntotal_active_anon {}\ntotal_active_file {}\ntotal_unevictable 0\n",
            v.cache,
            v.rss,
            v.inactive_file,
            v.pgfault,
            v.pgmajfault,
            v.rss,
            v.cache.saturating_sub(v.inactive_file)
        ),
    )?;
    write(
        m,
        "memory.oom_control",
        &format!("oom_kill_disable 0\nunder_oom 0\noom_kill {}\n", v.oom_kill),
    )?;
    write(
        m,
        "memory.numa_stat",
        &format!(
            "total=1 N0=1\nhierarchical_total={0} N0={0}\n",
            v.lru_bytes() / 4096
        ),
    )
}

/// cgroup v2: every file in the one directory `d`.
fn write_v2(d: &Path, v: &Values) -> io::Result<()> {
    write(
        d,
        "cpu.stat",
        &format!(
            "usage_usec {}\nuser_usec 0\nsystem_usec 0\nnr_periods {}\nnr_throttled {}\nthrottled_usec {}\n",
            v.cpu_usec, v.periods, v.throttled, v.throttled_usec
        ),
    )?;
    let pressure = pressure(v);
    for f in ["cpu.pressure", "memory.pressure", "io.pressure"] {
        write(d, f, &pressure)?;
    }
    write(d, "memory.current", &format!("{}\n", v.memory_usage))?;
    write(
        d,
        "memory.max",
        &v.memory_limit
            .map_or_else(|| "max\n".to_string(), |l| format!("{l}\n")),
    )?;
    write(
        d,
        "memory.stat",
        &format!(
            "anon {}\nfile {}\ninactive_file {}\nunevictable 0\npgfault {}\npgmajfault {}\n",
            v.rss, v.cache, v.inactive_file, v.pgfault, v.pgmajfault
        ),
    )?;
    write(
        d,
        "memory.events",
        &format!("low 0\nhigh 0\nmax 0\noom 0\noom_kill {}\n", v.oom_kill),
    )?;
    write(
        d,
        "memory.numa_stat",
        &format!(
            "anon N0={}\nfile N0={}\nunevictable N0=0\nkernel_stack N0=4096\n",
            v.rss, v.cache
        ),
    )?;
    write(d, "cpuset.cpus.effective", &format!("{}\n", v.cpuset_cpus))?;
    write(d, "cpuset.mems.effective", &format!("{}\n", v.cpuset_mems))
}
