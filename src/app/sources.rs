//! The sources of a role, started: the watchers, the node role's task sources and the usage
//! backend.

use super::*;
use crate::outputs::watcher::Fold;

/// The running sources: their tasks and the name of the usage source behind `/watcher`.
pub(super) struct Sources {
    pub(super) tasks: Vec<JoinHandle<()>>,
    pub(super) fetch_task: JoinHandle<()>,
    pub(super) usage_source: &'static str,
}

/// Starts every source of the role: the shard selection, the Kubernetes watchers with the
/// task source, the probes and the usage backend.
pub(super) fn spawn_sources(
    cfg: &Config,
    start: &mut Start,
    place: &Place,
    store: &Arc<Store>,
    kube_client: Option<kube::Client>,
    cancel: &CancellationToken,
) -> Result<Sources> {
    let provider: Arc<dyn Provider> = store.clone();
    let mut tasks = Vec::new();
    tasks.extend(start_selection(
        cfg,
        start.role,
        store,
        kube_client.as_ref(),
        cancel,
    )?);
    let mut node_stores = None;
    if let (Some(client), true) = (&kube_client, start.role != Role::Host) {
        let (stores, watch_tasks) = spawn_watchers(cfg, start, place, client, &provider, cancel);
        // Added to, not replaced: the StatefulSet shard watcher is already in there.
        tasks.extend(watch_tasks);
        node_stores = Some(stores);
    }
    tasks.extend(spawn_probes(
        cfg,
        start.role,
        place.identity.on_gce,
        kube_client.as_ref(),
        provider.clone(),
        cancel,
    )?);
    let (fetch_task, usage_source) = spawn_usage(
        cfg,
        start.usage,
        &place.node_name,
        kube_client,
        node_stores.map(|s| (s, start.role == Role::Cluster)),
        provider,
        cancel.clone(),
    )?;
    Ok(Sources {
        tasks,
        fetch_task,
        usage_source,
    })
}

/// The Kubernetes watchers of the role and, in the node role, the task source they (or the
/// kubelet's `/pods`) feed.
pub(super) fn spawn_watchers(
    cfg: &Config,
    start: &mut Start,
    place: &Place,
    client: &kube::Client,
    provider: &Arc<dyn Provider>,
    cancel: &CancellationToken,
) -> (watchers::Stores, Vec<JoinHandle<()>>) {
    let prepared = start.tasks.take();
    let no_pods = cfg.scope.pods == watchers::PodScope::None;
    if start.role == Role::Cluster && no_pods && cfg.watcher.fold != Fold::Off {
        tracing::warn!(
            "--watcher-estimate-bound-pods with --pod-scope none: no pod is watched, so no node has an estimate to fold; --pod-scope bound watches the pods it needs"
        );
    }
    let ctx = cluster::start::StartContext {
        role: start.role,
        node_name: place.node_name.clone(),
        interval: cfg.tick_interval,
        client: client.clone(),
        pods_follower: prepared.as_ref().and_then(|p| p.pods_follower()),
    };
    let (stores, mut tasks) = cluster::start::spawn(
        &cfg.workloads,
        &cfg.scope,
        cfg.estimate,
        ctx,
        provider.clone(),
        cancel,
    );
    if let Some(prepared) = prepared {
        let ctx = task::start::StartContext {
            node_name: place.node_name.clone(),
            procfs: cfg.procfs.clone(),
            interval: cfg.interval,
        };
        tasks.extend(task::start::spawn(
            &cfg.task,
            ctx,
            prepared,
            provider.clone(),
            cancel,
        ));
    }
    (stores, tasks)
}

/// The metric allow/denylist and the shard (`--shard`, or the StatefulSet watcher it starts).
pub(super) fn start_selection(
    cfg: &Config,
    role: Role,
    store: &Arc<Store>,
    kube_client: Option<&kube::Client>,
    cancel: &CancellationToken,
) -> Result<Option<JoinHandle<()>>> {
    store.set_excluded_families(cfg.select.excluded_families.clone());
    store.set_stale_after(cfg.watcher.max_age);
    crate::sources::cluster::shard::start(
        &cfg.scope.shard,
        role,
        kube_client,
        cfg.sinks.leader.namespace.as_deref(),
        store.clone(),
        cancel,
    )
}

/// The usage source, started with what only the wiring knows; in the cluster and node roles
/// the node watcher's view goes with it.
pub(super) fn spawn_usage(
    cfg: &Config,
    kind: MetricsProvider,
    node_name: &str,
    kube_client: Option<kube::Client>,
    // The watchers' stores, and whether they hold every Node (cluster role) or one (node role).
    node_stores: Option<(crate::sources::cluster::watchers::Stores, bool)>,
    provider: Arc<dyn Provider>,
    cancel: CancellationToken,
) -> Result<(JoinHandle<()>, &'static str)> {
    let ctx = usage::start::StartContext {
        node_name: node_name.to_string(),
        procfs: cfg.procfs.clone(),
        interval: cfg.interval,
        timeout: cfg.timeout,
        expire_after: cfg.expire_after_fetches,
        max_response_bytes: cfg.limit.max_response_bytes,
        kube_client,
        nodes: node_stores.map(|(stores, every)| watched_nodes(stores, every)),
    };
    usage::start::spawn(cfg.usage.backend(kind), ctx, provider, cancel)
}

/// The node watcher's view for the usage backends: names (every Node only in the cluster role,
/// where Prometheus series are checked against them), addresses, and the Nodes themselves when
/// it holds every one.
fn watched_nodes(
    stores: crate::sources::cluster::watchers::Stores,
    every: bool,
) -> usage::start::WatchedNodes {
    let listed = stores.clone();
    let every_node: Option<usage::metrics_server::NodeSource> =
        every.then(|| Arc::new(stores.nodes.clone()) as _);
    usage::start::WatchedNodes {
        addresses: Arc::new(move || ClusterNodes {
            names: match every {
                true => stores
                    .nodes
                    .state()
                    .iter()
                    .filter_map(|n| n.metadata.name.clone())
                    .collect(),
                false => Default::default(),
            },
            by_address: stores.node_addresses(),
        }),
        every_node,
        listed: Box::pin(async move { listed.nodes_listed().await }),
    }
}
