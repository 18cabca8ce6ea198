//! The open-file cache: cgroup files kept open (within a process-wide [`FdBudget`]) and
//! re-read from offset 0 with one `pread`, or opened by path once the budget is spent.

use std::fs;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The largest cgroup file read, in bytes (`memory.numa_stat` of a many-node machine is a few
/// KiB); a longer one is taken as unreadable.
const MAX_FILE: usize = 1 << 20;

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
    pub(super) fn keep(&self, fd: OwnedFd) -> Option<Kept> {
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
pub(super) struct Kept {
    pub(super) file: fs::File,
    count: Arc<AtomicUsize>,
}

impl Drop for Kept {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Where one file of a cgroup is read from.
#[derive(Debug)]
pub(super) enum Slot {
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
    pub(super) fn read<'a>(&self, buf: &'a mut Vec<u8>) -> Option<&'a [u8]> {
        match self {
            Slot::Kept(k) => pread_all(&k.file, buf),
            Slot::Path(p) => pread_all(&fs::File::open(p).ok()?, buf),
        }
    }
}

/// Reads a (small) cgroup file into `buf`; `None` when it does not exist or cannot be read.
pub fn read_into<'a>(path: &Path, buf: &'a mut Vec<u8>) -> Option<&'a [u8]> {
    buf.clear();
    let mut f = fs::File::open(path).ok()?;
    f.read_to_end(buf).ok()?;
    Some(buf.as_slice())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::task::cgroup::testing::pod;
    use crate::sources::task::cgroup::{CgroupReader, Hierarchies};
    use support::task_fixture::{self as fixture, Driver, Layout, Runtime, Values};

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
}
