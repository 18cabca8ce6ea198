//! Sources: everything that records into the hub, one room each.
//!
//! - [`usage`]: node usage backends behind `/watcher` (procfs, metrics-server, Prometheus,
//!   SignalFx).
//! - [`cluster`]: the cluster role's watchers of nodes, pods and workloads, and what is
//!   derived from them.
//! - [`probe`]: health probes (HTTP, DNS, Kubernetes).
//! - [`task`]: the node role's per-pod and per-container cgroup, perf and platform metrics.
//! - [`procfs`]: every procfs and sysfs parser but the cgroup files', shared by the usage and
//!   task sources, with the one definition of busy CPU time and memory used.
//! - [`runner`]: the one runner every source runs through: each run recorded (duration,
//!   outcome, reason), failures and recoveries logged, periodic runs paced.
//!
//! May import: [`crate::shared`], [`crate::model`], [`crate::hub`], [`crate::k8s`]; a source
//! never imports another source (only the shared [`procfs`] parsers and the [`runner`]), an
//! output, or config.

pub mod cluster;
pub mod probe;
pub mod procfs;
pub mod runner;
pub mod task;
pub mod usage;
