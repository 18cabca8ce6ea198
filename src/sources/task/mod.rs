//! The task source (node role): every collection it takes the pods on this node, finds their
//! cgroups under `--cgroup-root` and records pod and container values, and reads the node's
//! platform facts from `--sysfs` and `--procfs`. Read-only: it never writes to a cgroup.
//!
//! The whole task source lives here: cgroup discovery and reading (`cgroup`), perf counters
//! (`perf`), platform facts (`platform`), the pods as tasks (`pods`, fed by the cluster pod
//! watcher through [`crate::k8s::lean::PodFollower`] or by the kubelet's `/pods`, `kubelet`).
//!
//! May import: [`crate::shared`], [`crate::model`], [`crate::hub`], [`crate::k8s`] and the
//! shared [`crate::sources::procfs`] parsers.

pub mod cgroup;
pub mod kubelet;
pub mod options;
pub mod perf;
pub mod platform;
pub mod pods;
pub mod start;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::hub::{Provider, RunOutcome};
use crate::model::{Platform, TaskPod, TaskSet};
use crate::shared::error::Error;
use crate::sources::runner::{Pace, SourceRun};
use cgroup::{CgroupReader, Hierarchies};

/// Source names in the self-metrics.
pub const TASK_SOURCE: &str = "task_cgroups";
/// How often the node role's task sources (cgroups, the kubelet's pod list) run unless
/// `--interval` says otherwise: the host usage source's default.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(15);
pub const PLATFORM_SOURCE: &str = "platform";

/// What the cgroup and platform loop runs with, made from the resolved [`options::TaskConfig`]
/// and what only the wiring knows ([`start::spawn`]).
#[derive(Debug, Clone, PartialEq)]
pub struct CgroupConfig {
    pub node: String,
    /// Where the cgroup hierarchies are mounted (`/sys/fs/cgroup`, in a container
    /// `/host/sys/fs/cgroup`).
    pub cgroup_root: PathBuf,
    pub sysfs: PathBuf,
    pub procfs: PathBuf,
    pub interval: Duration,
    /// `--task-detail-every`: collections between two reads of a cgroup's detail files.
    pub detail_every: u64,
    /// `--task-container-detail-every`: the same for container cgroups.
    pub container_detail_every: u64,
}

/// Where the task pods come from (the node-role pod watcher): the pods now.
pub type PodList = Arc<dyn Fn() -> Vec<Arc<TaskPod>> + Send + Sync>;

/// One collection: resolve and read every pod's cgroups.
pub fn collect(reader: &mut CgroupReader, node: &str, pods: &[Arc<TaskPod>]) -> TaskSet {
    TaskSet {
        node: node.to_string(),
        tasks: reader.collect(pods),
        collected_at: Some(SystemTime::now()),
    }
}

/// Starts the task and platform collection loop.
pub fn spawn(
    cfg: CgroupConfig,
    pods: PodList,
    provider: Arc<dyn Provider>,
    cancel: CancellationToken,
) -> JoinHandle<()> {
    let mut task = SourceRun::register(TASK_SOURCE, provider.clone());
    let mut platform = SourceRun::register(PLATFORM_SOURCE, provider.clone());
    tokio::spawn(async move {
        let r = open_reader(&cfg);
        let mut reader = Some(r);
        let mut pace = Pace::every(cfg.interval);
        while pace.next(&cancel).await {
            let started = Instant::now();
            let list = pods();
            let Some(mut r) = reader.take() else { break };
            let cfg2 = cfg.clone();
            let joined = tokio::task::spawn_blocking(move || {
                let set = collect(&mut r, &cfg2.node, &list);
                let plat = platform::read_platform(&cfg2.node, &cfg2.sysfs, &cfg2.procfs);
                (r, set, plat)
            })
            .await;
            let Ok((r, set, (plat, plat_errors))) = joined else {
                tracing::error!("task collection panicked; stopping the task source");
                break;
            };
            let outcome = if r.hierarchies().is_empty() {
                RunOutcome::Failed {
                    reason: "io".into(), // one of error::SOURCE_ERROR_REASONS
                    message: format!("no cgroup hierarchy under {}", cfg.cgroup_root.display()),
                }
            } else if set.tasks.is_empty() {
                RunOutcome::NoData
            } else {
                RunOutcome::Ok
            };
            reader = Some(r);
            let plat_outcome = platform_outcome(&cfg, &plat, &plat_errors);
            provider.task().record_tasks(set);
            provider.task().record_platform(plat);
            let took = started.elapsed();
            task.record(took, outcome);
            platform.record(took, plat_outcome);
        }
    })
}

/// The platform run's outcome: failed with reason `parse` when a procfs file or a NUMA node's
/// meminfo did not parse (the facts read are still recorded), with reason `io` when neither the
/// sysfs CPU list nor `/proc/stat` could be read, else ok.
fn platform_outcome(cfg: &CgroupConfig, plat: &Platform, errors: &[Error]) -> RunOutcome {
    if let Some(first) = errors.first() {
        let message = errors
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ");
        return RunOutcome::Failed {
            reason: first.metric_label().into(), // one of error::SOURCE_ERROR_REASONS
            message,
        };
    }
    if plat.cpus.is_none() && plat.cpu_busy_seconds.is_empty() {
        return RunOutcome::Failed {
            reason: "io".into(),
            message: format!(
                "neither {}/devices/system/cpu nor {}/stat readable",
                cfg.sysfs.display(),
                cfg.procfs.display()
            ),
        };
    }
    RunOutcome::Ok
}

/// The cgroup reader: the hierarchies under `--cgroup-root`, the open-file limit raised to
/// the hard one, the detail schedules and this host's memory nodes.
fn open_reader(cfg: &CgroupConfig) -> CgroupReader {
    let hier = Hierarchies::detect(&cfg.cgroup_root);
    let page_size = platform::read_page_size(&cfg.procfs);
    if hier.is_empty() {
        tracing::warn!(cgroup_root = %cfg.cgroup_root.display(), "no cgroup hierarchy found; task metrics stay empty");
    } else {
        tracing::info!(cgroup_root = %cfg.cgroup_root.display(), hierarchies = %hier.describe(), "task source started");
    }
    // The reader keeps each cgroup's files open (one pread per file and collection):
    // about 12 per cgroup, 3 cgroups per pod. Raise the soft fd limit to the hard one.
    let (soft, hard) = cgroup::raise_fd_limit();
    // On a host with one NUMA node `memory.numa_stat` is derived from `memory.stat`.
    let memory_nodes = cgroup::memory_nodes(&cfg.sysfs);
    let r = CgroupReader::new(hier, page_size)
        .with_detail_every(cfg.detail_every)
        .with_container_detail_every(cfg.container_detail_every)
        .with_memory_nodes(memory_nodes.as_deref());
    tracing::debug!(
        soft = ?soft,
        hard = ?hard,
        kept_files_max = r.budget().max(),
        detail_every = r.detail_every(),
        container_detail_every = r.container_detail_every(),
        "open-file limit for the task source"
    );
    r
}
