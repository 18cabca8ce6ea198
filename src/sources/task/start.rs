//! The node role's task sources started from their resolved [`TaskConfig`]: the cgroup
//! reader with the platform facts, perf counters when `--task-perf-events` asks, and the
//! kubelet's `/pods` feeding the pods when `--kubelet-url` is given. [`prepare`] checks them and
//! builds their pod index before anything starts; the wiring hands over only what it alone
//! knows ([`StartContext`]), and the pod watch fills the index unless the kubelet does.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::kubelet::KubeletPods;
use super::options::TaskConfig;
use super::perf::PerfConfig;
use super::pods::{TaskPodConfig, TaskPodIndex};
use super::{CgroupConfig, DEFAULT_INTERVAL, PodList};
use crate::hub::Provider;
use crate::k8s::lean::PodFollower;
use crate::k8s::role::Role;
use crate::model::PerfMode;
use crate::shared::error::{Error, Result};

/// What the task sources need from the wiring, beside their own settings.
pub struct StartContext {
    /// This node's name.
    pub node_name: String,
    /// The procfs root (the platform facts).
    pub procfs: PathBuf,
    /// `--interval` (`None`: [`DEFAULT_INTERVAL`]).
    pub interval: Option<Duration>,
}

/// The node role's task sources, checked and built before anything starts ([`prepare`]): the
/// index of the pods they read and, with `--kubelet-url`, the kubelet's `/pods` that fills it.
pub struct Prepared {
    index: TaskPodIndex,
    kubelet: Option<KubeletPods>,
}

impl Prepared {
    /// What the pod watch feeds for the task sources: their pod index, unless `--kubelet-url`
    /// is given (the kubelet's `/pods` fills it then, not the pod watch).
    pub fn pods_follower(&self) -> Option<Arc<dyn PodFollower>> {
        self.kubelet
            .is_none()
            .then(|| Arc::new(self.index.clone()) as Arc<dyn PodFollower>)
    }
}

/// What is checked and built before anything starts, so that a wrong setting is a config error
/// (exit 2): in the node role, that `--cgroup-root` is a folder; `--kubelet-url`'s source (a bad
/// CA, certificate or token file fails here), refused in any role but the node role, the only
/// one with tasks (`None` in the others). `timeout` and `max_body_bytes` are `--timeout` and
/// `--max-response-bytes`.
pub fn prepare(
    cfg: &TaskConfig,
    role: Role,
    timeout: Duration,
    max_body_bytes: usize,
) -> Result<Option<Prepared>> {
    if role == Role::Node && !cfg.cgroup_root.is_dir() {
        return Err(Error::Config {
            option: "--cgroup-root",
            value: cfg.cgroup_root.display().to_string(),
            reason: "not a directory".into(),
        });
    }
    if let Some(k) = &cfg.kubelet
        && role != Role::Node
    {
        return Err(Error::Config {
            option: "--kubelet-url",
            value: k.url.clone(),
            reason: format!(
                "only the node role reads the kubelet's /pods; this process runs the {} role",
                role.as_str()
            ),
        });
    }
    if role != Role::Node {
        return Ok(None);
    }
    let kubelet = match &cfg.kubelet {
        Some(k) => Some(KubeletPods::new(k.clone(), timeout, max_body_bytes)?),
        None => None,
    };
    let index = TaskPodIndex::new(TaskPodConfig {
        namespaces: cfg.namespaces.clone(),
        label_allowlist: cfg.label_allowlist.clone(),
    });
    Ok(Some(Prepared { index, kubelet }))
}

/// Starts the task sources over the pods of `prepared`'s index: the kubelet's `/pods` filling it
/// when `--kubelet-url` is given (else the pod watch fills it,
/// [`Prepared::pods_follower`]), the cgroup reader, and the perf counters' own loop beside it
/// when asked for. Every task ends with `cancel`.
pub fn spawn(
    cfg: &TaskConfig,
    ctx: StartContext,
    prepared: Prepared,
    provider: Arc<dyn Provider>,
    cancel: &CancellationToken,
) -> Vec<JoinHandle<()>> {
    let Prepared { index, kubelet } = prepared;
    let interval = ctx.interval.unwrap_or(DEFAULT_INTERVAL);
    let mut tasks = Vec::new();
    if let Some(source) = kubelet {
        tasks.push(super::kubelet::spawn(
            source,
            index.clone(),
            interval,
            provider.clone(),
            cancel.clone(),
        ));
    }
    let pods: PodList = Arc::new(move || index.pods());
    if cfg.perf_events != PerfMode::Off {
        let perf = PerfConfig {
            node: ctx.node_name.clone(),
            cgroup_root: cfg.cgroup_root.clone(),
            sysfs: cfg.sysfs.clone(),
            mode: cfg.perf_events,
            interval,
        };
        let perf = super::perf::spawn(perf, pods.clone(), provider.clone(), cancel.clone());
        tasks.push(perf);
    }
    let tc = CgroupConfig {
        node: ctx.node_name,
        cgroup_root: cfg.cgroup_root.clone(),
        sysfs: cfg.sysfs.clone(),
        procfs: ctx.procfs,
        interval,
        detail_every: cfg.detail_every,
        container_detail_every: cfg.container_detail_every,
    };
    tasks.push(super::spawn(tc, pods, provider, cancel.clone()));
    tasks
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::task::kubelet::{KubeletAuth, KubeletConfig};
    use crate::sources::task::options::{KubeletOptions, TaskOptions};

    fn settings(cgroup_root: &std::path::Path) -> TaskConfig {
        let mut s = TaskOptions::default()
            .resolve(KubeletOptions::default())
            .expect("the defaults resolve");
        s.cgroup_root = cgroup_root.to_path_buf();
        s
    }

    fn refused(r: Result<Option<Prepared>>) -> (&'static str, String) {
        match r {
            Err(Error::Config { option, reason, .. }) => (option, reason),
            other => panic!("not a config error: {:?}", other.map(|k| k.is_some())),
        }
    }

    #[test]
    fn prepare_checks_the_cgroup_root_and_refuses_the_kubelet_outside_the_node_role() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let s = Duration::from_secs(1);
        // The node role: a folder is enough without a kubelet (the pod watch then feeds the
        // pods); a missing one is refused.
        let prepared = prepare(&settings(dir.path()), Role::Node, s, 1 << 20);
        assert!(prepared.is_ok_and(|p| p.is_some_and(|p| p.pods_follower().is_some())));
        let missing = dir.path().join("no-such-dir");
        let (option, reason) = refused(prepare(&settings(&missing), Role::Node, s, 1 << 20));
        assert_eq!(
            (option, reason.as_str()),
            ("--cgroup-root", "not a directory")
        );
        // Other roles have no tasks: their cgroup root is not looked at, a kubelet is refused.
        assert!(prepare(&settings(&missing), Role::Cluster, s, 1 << 20).is_ok_and(|p| p.is_none()));
        let mut with_kubelet = settings(dir.path());
        with_kubelet.kubelet = Some(KubeletConfig {
            url: "https://127.0.0.1:10250".into(),
            auth: KubeletAuth::TokenFile(dir.path().join("token")),
            ca_file: None,
            insecure_skip_verify: true,
        });
        let (option, reason) = refused(prepare(&with_kubelet, Role::Cluster, s, 1 << 20));
        assert_eq!(option, "--kubelet-url");
        assert!(
            reason.contains("this process runs the cluster role"),
            "{reason}"
        );
    }
}
