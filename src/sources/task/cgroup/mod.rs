//! Pod and container cgroups: which hierarchies the kernel offers under the cgroup root, where
//! the kubelet put each pod (found by walking the tree and matching the pod UID, whatever the
//! driver or runtime), and the values in their files. `read_*` does I/O, `parse_*` is pure.
//! Read-only: nothing here ever writes to a cgroup.
//!
//! By concern: `discovery` (the hierarchies, pod and container directories, the NUMA nodes),
//! `parse` (the files' formats, pure), `fds` (the open-file cache within its budget and
//! reads from offset 0), `schedule` (when a cgroup's detail files are read, staggered over the
//! collections), `files` (which files a cgroup offers and one read of them), `values` (what
//! each file's bytes mean for the stats), `reader` ([`CgroupReader`]: resolution with a cache
//! and one collection). The public face is here.

mod discovery;
mod fds;
mod files;
mod parse;
mod reader;
mod schedule;
mod values;

#[cfg(test)]
mod testing;

pub use discovery::{
    Dirs, Hier, Hierarchies, MAX_DEPTH, find_container_dirs, find_pod_dirs, is_container_dir,
    memory_nodes, normalize_id, parse_pod_dir_name,
};
pub use fds::{FdBudget, raise_fd_limit, read_into};
pub use files::{ReadCounts, read_stats};
pub use parse::{
    parse_keyed, parse_keys, parse_max, parse_numa_stat_v1, parse_numa_stat_v2, parse_u64,
};
pub use reader::CgroupReader;
pub use schedule::{DEFAULT_DETAIL_EVERY, DetailReads, MAX_DETAIL_EVERY};
