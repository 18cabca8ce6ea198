//! The one wiring module: picks the role, builds sources, the hub and the server, runs the tick
//! loop, and shuts everything down in order on SIGTERM/SIGINT.
//!
//! The top of the house: may import every other module; nothing imports it but `main.rs`.

pub mod subcommand;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::outputs::published::Published;
use crate::serve::server::{self, AppState};
use tokio::task::JoinHandle;

use crate::config::{
    Config, DEFAULT_HOST_INTERVAL, DEFAULT_METRICS_SERVER_INTERVAL, DEFAULT_REMOTE_INTERVAL,
};
use crate::k8s::client;
use crate::k8s::identity::{self, Identity, IdentityConfig};
use crate::k8s::role::Role;
use crate::outputs::watcher::WatcherOptions;
use crate::shared::error::{Error, Result};
use crate::sources::probe::dns::DnsProbe;
use crate::sources::probe::http::HttpProbe;
use crate::sources::probe::kube::{ApiServerReadyProbe, MetricsServerProbe};
use crate::sources::probe::{self, Probe};
use crate::sources::usage::MetricsProvider;
use crate::sources::usage::http::{HttpConfig, Token};
use crate::sources::usage::metrics_server::{MetricsServerConfig, MetricsServerFetcher};
use crate::sources::usage::prometheus::{ClusterNodes, PrometheusConfig, PrometheusFetcher};
use crate::sources::usage::signalfx::{SignalFxConfig, SignalFxFetcher};
use crate::sources::usage::{self, Schedule, host};

use crate::hub::{Provider, Store};
use crate::k8s::leader::{self, LeaseConfig};
use crate::k8s::lean::PodFollower;
use crate::k8s::role;
use crate::model::{ClusterInfo, Snapshot};
use crate::outputs::Sink;
use crate::outputs::gcm::{GcmConfig, GcmSink};
use crate::outputs::otlp::{OtlpResource, OtlpSink};
use crate::outputs::push::SinkKind;
use crate::outputs::push::{Leadership, SinkSchedule, run_sink};
use crate::sources::cluster::derive::DeriveConfig;
use crate::sources::cluster::watchers::{self, PodScope, Scope, WatchConfig};
use crate::sources::task::pods::{TaskPodConfig, TaskPodIndex};

/// Runs until SIGTERM or SIGINT, then shuts down gracefully.
/// `after_tick` runs (on a blocking thread) after each published snapshot; the binary uses it
/// to hand freed heap back to the kernel.
pub async fn run(cfg: Config, after_tick: Option<fn()>) -> Result<()> {
    run_with(
        cfg,
        Hooks {
            after_tick,
            after_setup: None,
        },
    )
    .await
}

/// What the binary runs at fixed points of the start and after each tick (issue #11: it hands
/// the start-up's memory back there); tests run without.
#[derive(Clone, Copy, Default)]
pub struct Hooks {
    /// After each published snapshot, on a blocking thread.
    pub after_tick: Option<fn()>,
    /// On the start's own thread, with the point's name, before the first tick: `"kube
    /// client"` once the Kubernetes client is built (the kubeconfig's YAML, the TLS set-up and
    /// its trust anchors are done with; not in a host role without one), and `"set-up"` once
    /// every source and sink is started, before the tick loop is.
    pub after_setup: Option<fn(&'static str)>,
}

/// [`run`] with every hook.
pub async fn run_with(cfg: Config, hooks: Hooks) -> Result<()> {
    let cancel = CancellationToken::new();
    let on_signal = cancel.clone();
    // Handlers are installed here, before anything is logged or served: a SIGTERM that
    // arrives right after start must stop us cleanly, not kill us by its default action.
    let mut signals = Signals::install();
    tokio::spawn(async move {
        signals.next().await;
        tracing::info!("signal received: shutting down");
        on_signal.cancel();
        signals.next().await;
        tracing::warn!("second signal: exiting now");
        std::process::exit(130);
    });
    run_until_with(cfg, cancel, hooks).await
}

/// SIGTERM and SIGINT, installed when created.
struct Signals {
    #[cfg(unix)]
    term: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    int: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    fn install() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let term = signal(SignalKind::terminate())
                .map_err(|e| tracing::error!(error = %e, "cannot listen for SIGTERM; only SIGINT stops kube-prober"))
                .ok();
            let int = signal(SignalKind::interrupt())
                .map_err(|e| tracing::error!(error = %e, "cannot listen for SIGINT"))
                .ok();
            Signals { term, int }
        }
        #[cfg(not(unix))]
        {
            Signals {}
        }
    }

    /// The next SIGTERM or SIGINT.
    async fn next(&mut self) {
        #[cfg(unix)]
        {
            let term = async {
                match &mut self.term {
                    Some(s) => {
                        s.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            let int = async {
                match &mut self.int {
                    Some(s) => {
                        s.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                _ = term => {}
                _ = int => {}
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// Runs until `cancel` fires.
pub async fn run_until(cfg: Config, cancel: CancellationToken) -> Result<()> {
    run_until_with(cfg, cancel, Hooks::default()).await
}

async fn run_until_with(cfg: Config, cancel: CancellationToken, hooks: Hooks) -> Result<()> {
    let mut start = choose_role(&cfg)?;
    let kube_client = connect_kube(&cfg, &start, hooks).await?;
    check_procfs(&cfg, start.usage)?;
    let place = where_we_run(&cfg, start.role).await?;
    let store = make_hub(&place, start.role);
    let (listener, local) = bind(&cfg).await?;
    let (tls_config, security, tls_reloader) =
        serve_security(&cfg, kube_client.clone(), &cancel).await?;
    let sources = spawn_sources(
        &cfg,
        &mut start,
        &place,
        &store,
        kube_client.clone(),
        &cancel,
    )?;
    let watcher_opts = cfg.watcher;
    let (tx, rx) = watch::channel(Arc::new(Published::render_with(
        Arc::new(Snapshot::empty(SystemTime::now())),
        sources.usage_source,
        watcher_opts,
    )));
    let sinks = spawn_sinks(
        &cfg,
        start.role,
        &SinkContext {
            node_name: &place.node_name,
            cluster_name: &place.cluster_name,
            identity: &place.identity,
            kube_client: kube_client.as_ref(),
        },
        &rx,
        store.clone(),
        &cancel,
    )
    .await?;
    if let Some(f) = hooks.after_setup {
        f("set-up");
    }
    let tick_task = tokio::spawn(tick_loop(
        store.clone(),
        tx,
        cfg.tick_interval,
        sources.usage_source,
        watcher_opts,
        hooks.after_tick,
        cancel.clone(),
    ));
    let auth_on = security.auth.is_some();
    let state = AppState {
        published: rx,
        stale_after: cfg.tick_interval * 3 + Duration::from_secs(5),
    };
    let tls_on = tls_config.is_some();
    let server_task = serve(
        listener,
        server::router_with(state, security),
        tls_config,
        &cancel,
    );
    tracing::info!(
        addr = %local,
        tls = tls_on,
        auth = if auth_on { "kubernetes" } else { "none" },
        node = %place.node_name,
        usage_source = sources.usage_source,
        "listening"
    );
    let running = Running {
        sources,
        sinks,
        tick_task,
        tls_reloader,
        server_task,
    };
    running.until_stopped(&cfg, local, &cancel).await
}

/// The role chosen and the usage backend it runs.
struct Start {
    role: Role,
    /// The kubeconfig the role detection found, if any.
    kubeconfig: Option<std::path::PathBuf>,
    usage: MetricsProvider,
    kubelet_pods: Option<crate::sources::task::kubelet::KubeletPods>,
}

/// Chooses the role (logging why) and checks what the role needs before anything starts.
fn choose_role(cfg: &Config) -> Result<Start> {
    let choice = role::detect(cfg.role, cfg.kubeconfig.as_deref(), &role::Probe::system())?;
    let usage = cfg.usage.provider.unwrap_or(match choice.role {
        Role::Host => MetricsProvider::Host,
        Role::Cluster => MetricsProvider::KubernetesMetricsServer,
        Role::Node => MetricsProvider::Host,
    });
    tracing::info!(
        role = choice.role.as_str(),
        reason = %choice.reason,
        metrics_provider = usage.as_str(),
        "role chosen"
    );
    if choice.role == Role::Node && !cfg.task.cgroup_root.is_dir() {
        return Err(Error::Config {
            option: "--cgroup-root",
            value: cfg.task.cgroup_root.display().to_string(),
            reason: "not a directory".into(),
        });
    }
    Ok(Start {
        role: choice.role,
        kubelet_pods: kubelet_pods(cfg, choice.role)?,
        kubeconfig: choice.kubeconfig,
        usage,
    })
}

/// The Kubernetes client, when the role or the usage backend needs one.
async fn connect_kube(cfg: &Config, start: &Start, hooks: Hooks) -> Result<Option<kube::Client>> {
    let needs_kube =
        start.role != Role::Host || start.usage == MetricsProvider::KubernetesMetricsServer;
    if !needs_kube {
        return Ok(None);
    }
    let kube_client = client::honour_retry_after(
        client::client(start.kubeconfig.as_deref(), cfg.max_response_bytes).await?,
    );
    if let Some(f) = hooks.after_setup {
        f("kube client");
    }
    Ok(Some(kube_client))
}

/// `--procfs` must be a directory when the host source reads it.
fn check_procfs(cfg: &Config, usage: MetricsProvider) -> Result<()> {
    if usage == MetricsProvider::Host && !cfg.procfs.is_dir() {
        return Err(Error::Config {
            option: "--procfs",
            value: cfg.procfs.display().to_string(),
            reason: "not a directory".into(),
        });
    }
    Ok(())
}

/// Where this instance runs: its cloud identity, node name and cluster name.
struct Place {
    identity: Identity,
    node_name: String,
    cluster_name: String,
}

async fn where_we_run(cfg: &Config, role: Role) -> Result<Place> {
    let identity = match role {
        Role::Host => Identity::default(),
        _ => identity::detect(&IdentityConfig::from_env()).await,
    };
    let node_name = match (&cfg.node_name, &identity.node_name) {
        (Some(n), _) | (None, Some(n)) => n.clone(),
        (None, None) => local_hostname()?,
    };
    let cluster_name = cfg
        .cluster_name
        .clone()
        .or_else(|| identity.cluster_name.clone())
        .unwrap_or_else(|| "unknown".into());
    Ok(Place {
        identity,
        node_name,
        cluster_name,
    })
}

/// The hub, with the cluster's identity recorded.
fn make_hub(place: &Place, role: Role) -> Arc<Store> {
    let store = Arc::new(Store::new());
    store.cluster().record_cluster_info(ClusterInfo {
        cluster_name: place.cluster_name.clone(),
        role: role.as_str().into(),
        project: place.identity.project.clone().unwrap_or_default(),
        location: place.identity.location.clone().unwrap_or_default(),
    });
    store
}

/// The listener on `--listen`. A port in use or not allowed is the user's to fix: a config
/// error (exit 2) naming --listen.
async fn bind(cfg: &Config) -> Result<(TcpListener, std::net::SocketAddr)> {
    let listener = TcpListener::bind(cfg.listen)
        .await
        .map_err(|e| Error::Config {
            option: "--listen",
            value: cfg.listen.to_string(),
            reason: match e.kind() {
                std::io::ErrorKind::AddrInUse => {
                    format!("cannot listen: {e} (another process holds this port; stop it or choose another --listen)")
                }
                std::io::ErrorKind::PermissionDenied => {
                    format!("cannot listen: {e} (ports below 1024 need CAP_NET_BIND_SERVICE)")
                }
                _ => format!("cannot listen: {e}"),
            },
        })?;
    let local = listener.local_addr().map_err(|source| Error::Listen {
        addr: cfg.listen.to_string(),
        source,
    })?;
    Ok((listener, local))
}

/// The running sources: their tasks and the name of the usage source behind `/watcher`.
struct Sources {
    tasks: Vec<JoinHandle<()>>,
    fetch_task: JoinHandle<()>,
    usage_source: &'static str,
}

/// Starts every source of the role: the shard selection, the Kubernetes watchers with the
/// task source, the probes and the usage backend.
fn spawn_sources(
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
fn spawn_watchers(
    cfg: &Config,
    start: &mut Start,
    place: &Place,
    client: &kube::Client,
    provider: &Arc<dyn Provider>,
    cancel: &CancellationToken,
) -> (watchers::Stores, Vec<JoinHandle<()>>) {
    let role = start.role;
    let kubelet_pods = start.kubelet_pods.take();
    let scope = match role {
        Role::Node => Scope::Node {
            name: place.node_name.clone(),
        },
        _ => Scope::Cluster {
            namespaces: cfg.workload_namespaces.clone(),
            pods: cfg.pod_scope,
        },
    };
    if role == Role::Node && cfg.pod_scope != PodScope::All {
        tracing::warn!(
            pod_scope = cfg.pod_scope.as_str(),
            "--pod-scope applies to the cluster role only; the node role watches the pods on its node"
        );
    }
    let wc = WatchConfig {
        scope,
        derive: DeriveConfig {
            addon_keys: cfg.addon_keys.clone(),
            estimate: cfg.estimate,
            ..DeriveConfig::default()
        },
        interval: cfg.tick_interval,
    };
    let task_pods = (role == Role::Node).then(|| {
        TaskPodIndex::new(TaskPodConfig {
            namespaces: cfg.task.namespaces.clone(),
            label_allowlist: cfg.task.label_allowlist.clone(),
        })
    });
    // With --kubelet-url the kubelet's /pods feeds the task source, not the pod watch.
    let (stores, mut tasks) = watchers::spawn_with_tasks(
        client.clone(),
        wc,
        provider.clone(),
        cancel.clone(),
        task_pods
            .clone()
            .filter(|_| kubelet_pods.is_none())
            .map(|t| Arc::new(t) as Arc<dyn PodFollower>),
    );
    if let Some(index) = task_pods {
        if let Some(source) = kubelet_pods {
            tasks.push(crate::sources::task::kubelet::spawn(
                source,
                index.clone(),
                cfg.interval.unwrap_or(crate::config::DEFAULT_HOST_INTERVAL),
                provider.clone(),
                cancel.clone(),
            ));
        }
        tasks.push(spawn_tasks(
            cfg,
            &place.node_name,
            index,
            provider.clone(),
            cancel,
        ));
    }
    (stores, tasks)
}

/// The HTTP server on `listener`, with TLS when configured, until `cancel` fires.
fn serve(
    listener: TcpListener,
    app: axum::Router,
    tls_config: Option<Arc<rustls::ServerConfig>>,
    cancel: &CancellationToken,
) -> JoinHandle<std::io::Result<()>> {
    let server_cancel = cancel.clone();
    tokio::spawn(async move {
        match tls_config {
            Some(tls) => crate::serve::tls::serve(listener, app, tls, server_cancel).await,
            None => {
                axum::serve(listener, app)
                    .with_graceful_shutdown(server_cancel.cancelled_owned())
                    .await
            }
        }
    })
}

/// Everything started, to be stopped in order.
struct Running {
    sources: Sources,
    sinks: Sinks,
    tick_task: JoinHandle<()>,
    tls_reloader: Option<JoinHandle<()>>,
    server_task: JoinHandle<std::io::Result<()>>,
}

impl Running {
    /// Waits for `cancel` (or the server's end), then shuts down in order: sources, the sinks'
    /// final pushes (then the Lease), the tick loop, the certificate reloader, and the server's
    /// in-flight requests within `--shutdown-timeout`.
    async fn until_stopped(
        mut self,
        cfg: &Config,
        local: std::net::SocketAddr,
        cancel: &CancellationToken,
    ) -> Result<()> {
        let server_result = tokio::select! {
            r = &mut self.server_task => Some(r),
            _ = cancel.cancelled() => None,
        };
        cancel.cancel();
        let _ = self.sources.fetch_task.await;
        for t in self.sources.tasks {
            let _ = t.await;
        }
        // Sinks make their final push from the last snapshot (bounded), then the Lease goes.
        self.sinks.shutdown().await;
        let _ = self.tick_task.await;
        if let Some(t) = self.tls_reloader {
            let _ = t.await;
        }
        let server_result = match server_result {
            Some(r) => Some(r),
            None => match tokio::time::timeout(cfg.shutdown_timeout, &mut self.server_task).await {
                Ok(r) => Some(r),
                Err(_) => {
                    tracing::warn!(timeout = ?cfg.shutdown_timeout, "in-flight requests did not finish in time; closing them");
                    self.server_task.abort();
                    None
                }
            },
        };
        match server_result {
            Some(Ok(Err(e))) => Err(Error::Listen {
                addr: local.to_string(),
                source: e,
            }),
            _ => {
                tracing::info!("stopped");
                Ok(())
            }
        }
    }
}

/// The listener's TLS configuration (with its certificate reloader) and auth layer, from
/// `--tls-*`, `--client-ca-file` and `--auth`. Files that cannot be used are config errors.
async fn serve_security(
    cfg: &Config,
    kube_client: Option<kube::Client>,
    cancel: &CancellationToken,
) -> Result<(
    Option<Arc<rustls::ServerConfig>>,
    server::Security,
    Option<JoinHandle<()>>,
)> {
    use crate::serve::{auth, tls};
    let mut security = server::Security::default();
    let mut tls_config = None;
    let mut reloader = None;
    if let Some(settings) = &cfg.serve.tls {
        let store = tls::CertStore::load(settings.clone()).map_err(|reason| Error::Config {
            option: "--tls-cert-file",
            value: settings.cert_file.display().to_string(),
            reason,
        })?;
        tls_config = Some(tls::server_config(store.clone()).map_err(|reason| {
            Error::Config {
                option: "--client-ca-file",
                value: settings
                    .client_ca_file
                    .as_ref()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default(),
                reason,
            }
        })?);
        security.tls_stats = Some(store.stats.clone());
        reloader = Some(store.spawn_reloader(cancel.clone()));
    }
    if let Some(settings) = &cfg.serve.auth {
        let client = match kube_client {
            Some(c) => c,
            None => client::client(cfg.kubeconfig.as_deref(), cfg.max_response_bytes).await?,
        };
        if cfg.serve.tls.is_none() {
            tracing::warn!(
                "--auth kubernetes without TLS: bearer tokens cross the network in clear text; set --tls-cert-file and --tls-key-file"
            );
        }
        security.auth = Some(Arc::new(auth::Authorizer::new(client, settings.clone())));
    }
    Ok((tls_config, security, reloader))
}

/// `--kubelet-url`'s source, built before anything starts so a bad CA, certificate or token
/// file is a config error (exit 2). Only the node role has tasks.
fn kubelet_pods(
    cfg: &Config,
    role: Role,
) -> Result<Option<crate::sources::task::kubelet::KubeletPods>> {
    let Some(k) = &cfg.task.kubelet else {
        return Ok(None);
    };
    if role != Role::Node {
        return Err(Error::Config {
            option: "--kubelet-url",
            value: k.url.clone(),
            reason: format!(
                "only the node role reads the kubelet's /pods; this process runs the {} role",
                role.as_str()
            ),
        });
    }
    crate::sources::task::kubelet::KubeletPods::new(k.clone(), cfg.timeout, cfg.max_response_bytes)
        .map(Some)
}

/// The metric allow/denylist and the shard (`--shard`, or the StatefulSet watcher it starts).
fn start_selection(
    cfg: &Config,
    role: Role,
    store: &Arc<Store>,
    kube_client: Option<&kube::Client>,
    cancel: &CancellationToken,
) -> Result<Option<JoinHandle<()>>> {
    use crate::sources::cluster::options::ShardMode;
    store.set_excluded_families(cfg.excluded_families.clone());
    store.set_stale_after(cfg.watcher.max_age);
    if cfg.shard != ShardMode::Off && role != Role::Cluster {
        return Err(Error::Config {
            option: "--shard",
            value: format!("{:?}", cfg.shard),
            reason: format!(
                "sharding applies to the cluster role only (this is the {} role)",
                role.as_str()
            ),
        });
    }
    match (&cfg.shard, kube_client) {
        (ShardMode::Off, _) => Ok(None),
        (ShardMode::Static(s), _) => {
            tracing::info!(shard = s.index, total = s.total, "sharded");
            store.cluster().record_shard(Some(*s));
            Ok(None)
        }
        (
            ShardMode::StatefulSet {
                statefulset,
                ordinal,
            },
            Some(client),
        ) => {
            let namespace = cfg
                .sinks
                .leader
                .namespace
                .clone()
                .unwrap_or_else(|| client.default_namespace().to_string());
            tracing::info!(%namespace, %statefulset, ordinal, "shard from the StatefulSet");
            Ok(Some(crate::sources::cluster::shard::spawn(
                client.clone(),
                &namespace,
                statefulset,
                *ordinal,
                store.clone(),
                cancel.clone(),
            )))
        }
        (ShardMode::StatefulSet { .. }, None) => Err(Error::Kube {
            what: "--shard-from-statefulset".into(),
            reason: "no Kubernetes client was built".into(),
        }),
    }
}

/// The node role's task source: pods from the pod watcher, cgroups under `--cgroup-root`.
fn spawn_tasks(
    cfg: &Config,
    node_name: &str,
    index: crate::sources::task::pods::TaskPodIndex,
    provider: Arc<dyn Provider>,
    cancel: &CancellationToken,
) -> tokio::task::JoinHandle<()> {
    let tc = crate::sources::task::TaskConfig {
        node: node_name.to_string(),
        cgroup_root: cfg.task.cgroup_root.clone(),
        sysfs: cfg.task.sysfs.clone(),
        procfs: cfg.procfs.clone(),
        interval: cfg.interval.unwrap_or(crate::config::DEFAULT_HOST_INTERVAL),
        detail_every: cfg.task.detail_every,
        container_detail_every: cfg.task.container_detail_every,
    };
    let pods: crate::sources::task::PodList = Arc::new(move || index.pods());
    if cfg.task.perf_events == crate::model::PerfMode::Off {
        return crate::sources::task::spawn(tc, pods, provider, cancel.clone());
    }
    // `--task-perf-events`: its own loop beside the cgroup reader; both end with `cancel`.
    let pc = crate::sources::task::perf::PerfConfig {
        node: node_name.to_string(),
        cgroup_root: cfg.task.cgroup_root.clone(),
        sysfs: cfg.task.sysfs.clone(),
        mode: cfg.task.perf_events,
        interval: tc.interval,
    };
    let perf =
        crate::sources::task::perf::spawn(pc, pods.clone(), provider.clone(), cancel.clone());
    let tasks = crate::sources::task::spawn(tc, pods, provider, cancel.clone());
    tokio::spawn(async move {
        let _ = tasks.await;
        let _ = perf.await;
    })
}

/// Makes a snapshot every `interval` (every 200 ms until the first ready one) and publishes it.
async fn tick_loop(
    store: Arc<Store>,
    tx: watch::Sender<Arc<Published>>,
    interval: Duration,
    usage_source: &'static str,
    watcher_opts: WatcherOptions,
    after_tick: Option<fn()>,
    cancel: CancellationToken,
) {
    let mut ready = false;
    loop {
        let wait = if ready {
            interval
        } else {
            interval.min(Duration::from_millis(200))
        };
        tokio::select! {
            _ = cancel.cancelled() => break,
            _ = tokio::time::sleep(wait) => {}
        }
        let started = Instant::now();
        // Off the async workers: at 5,000 nodes this is ~100 ms of CPU, and scrapes, watch
        // events and pushes should not wait behind it.
        let tick_store = store.clone();
        // The renderers carry over from tick to tick: only what changed is written again.
        let renderers = tx.borrow().renderers().clone();
        let made = tokio::task::spawn_blocking(move || {
            let snapshot = Arc::new(tick_store.snapshot(SystemTime::now()));
            Published::render_next(&renderers, snapshot, usage_source, watcher_opts)
        })
        .await;
        let published = match made {
            Ok(p) => p,
            Err(e) => {
                tracing::error!(error = %e, "making the snapshot failed; keeping the previous one");
                continue;
            }
        };
        if published.ready && !ready {
            ready = true;
            tracing::info!(
                nodes = published.snapshot.nodes.len(),
                "ready: first complete snapshot"
            );
        }
        let (tick, nodes) = (published.snapshot.tick, published.snapshot.nodes.len());
        drop(tx.send_replace(Arc::new(published)));
        let took = started.elapsed();
        store.record_tick(took);
        // Off by default; `--log-level info,kube_prober::app=debug` shows when each tick's
        // bodies were served and what they cost (benches count ticks by it).
        tracing::debug!(tick, nodes, took_ms = took.as_millis() as u64, "tick made");
        if let Some(f) = after_tick {
            let _ = tokio::task::spawn_blocking(f).await;
        }
    }
}

/// Starts one probe if its schedule is configured (not disabled).
fn spawn_probe<P: Probe>(
    cfg: &Config,
    probe: P,
    provider: &Arc<dyn Provider>,
    cancel: &CancellationToken,
) -> Option<JoinHandle<()>> {
    if !runs_probes(&cfg.shard) {
        return None;
    }
    let (interval, timeout) = *cfg.probes.schedules.get(probe.name())?;
    tracing::info!(
        probe = probe.name(),
        target = probe.target(),
        ?interval,
        "probe enabled"
    );
    Some(tokio::spawn(probe::run(
        probe,
        probe::Schedule { interval, timeout },
        provider.clone(),
        cancel.clone(),
    )))
}

/// Whether this instance runs probes: all but a cluster-role shard above 0, whose probe series
/// are never emitted (they come from shard 0 only, `outputs::select`). A StatefulSet pod's ordinal
/// never changes, so this holds for the life of the process even when replicas change.
fn runs_probes(shard: &crate::sources::cluster::options::ShardMode) -> bool {
    use crate::sources::cluster::options::ShardMode;
    match shard {
        ShardMode::Off => true,
        ShardMode::Static(s) => s.index == 0,
        ShardMode::StatefulSet { ordinal, .. } => *ordinal == 0,
    }
}

/// The probes of a role: cluster (metrics-server, cluster DNS, API server), node (kubelet,
/// addon endpoints), and connectivity (URLs, DNS names) in every role.
fn spawn_probes(
    cfg: &Config,
    role: Role,
    on_gce: bool,
    client: Option<&kube::Client>,
    provider: Arc<dyn Provider>,
    cancel: &CancellationToken,
) -> Result<Vec<JoinHandle<()>>> {
    let p = &cfg.probes;
    let mut tasks = Vec::new();
    if !runs_probes(&cfg.shard) {
        // Their targets are still validated below, so a bad URL fails on every shard alike.
        tracing::info!("probes run on shard 0 only; this shard runs none");
    }
    let mut dns_names = p.dns_names.clone().unwrap_or_else(|| match role {
        Role::Cluster => vec!["kubernetes.default.svc.cluster.local".into()],
        _ => Vec::new(),
    });
    if let (Role::Cluster, Some(client)) = (role, client) {
        tasks.extend(spawn_cluster_probes(
            cfg,
            client,
            &mut dns_names,
            &provider,
            cancel,
        ));
    }
    if role == Role::Node {
        tasks.extend(spawn_node_probes(cfg, on_gce, &provider, cancel)?);
    }
    for url in &p.urls {
        tasks.extend(spawn_probe(
            cfg,
            http_probe(cfg, "http_get", url, "http_get")?,
            &provider,
            cancel,
        ));
    }
    for name in &dns_names {
        tasks.extend(spawn_probe(
            cfg,
            DnsProbe::new("dns_lookup", name),
            &provider,
            cancel,
        ));
    }
    Ok(tasks)
}

/// An HTTP probe with the timeout of `timeout_of`'s schedule; a bad URL is a config error.
fn http_probe(cfg: &Config, name: &str, url: &str, timeout_of: &str) -> Result<HttpProbe> {
    let timeout = cfg
        .probes
        .schedules
        .get(timeout_of)
        .map_or(Duration::from_secs(5), |s| s.1);
    HttpProbe::new(name, url, timeout)
        .map(|p| p.max_body_bytes(cfg.max_response_bytes))
        .map_err(|reason| Error::Config {
            option: "probe URL",
            value: url.to_string(),
            reason,
        })
}

/// The cluster role's probes: metrics-server, the API server's readiness, and the first DNS
/// name (taken out of `dns_names`) as `cluster_dns`.
fn spawn_cluster_probes(
    cfg: &Config,
    client: &kube::Client,
    dns_names: &mut Vec<String>,
    provider: &Arc<dyn Provider>,
    cancel: &CancellationToken,
) -> Vec<JoinHandle<()>> {
    let mut tasks = Vec::new();
    tasks.extend(spawn_probe(
        cfg,
        MetricsServerProbe::new(client.clone()),
        provider,
        cancel,
    ));
    tasks.extend(spawn_probe(
        cfg,
        ApiServerReadyProbe::new(client.clone()),
        provider,
        cancel,
    ));
    if !dns_names.is_empty() {
        let first = dns_names.remove(0);
        tasks.extend(spawn_probe(
            cfg,
            DnsProbe::new("cluster_dns", &first),
            provider,
            cancel,
        ));
    }
    tasks
}

/// The node role's probes: the kubelet's healthz, the GCE metadata server (on GCE) and the
/// addon endpoints on this node.
fn spawn_node_probes(
    cfg: &Config,
    on_gce: bool,
    provider: &Arc<dyn Provider>,
    cancel: &CancellationToken,
) -> Result<Vec<JoinHandle<()>>> {
    let p = &cfg.probes;
    let mut tasks = Vec::new();
    let kubelet = http_probe(
        cfg,
        "kubelet_healthz",
        &p.kubelet_healthz_url,
        "kubelet_healthz",
    )?
    .body_contains("ok");
    tasks.extend(spawn_probe(cfg, kubelet, provider, cancel));
    let node_ip = std::env::var("NODE_IP").unwrap_or_else(|_| "127.0.0.1".into());
    if on_gce {
        let host = IdentityConfig::from_env().metadata_host;
        let url =
            format!("http://{host}/computeMetadata/v1/instance/service-accounts/default/email");
        let probe = http_probe(cfg, "gce_metadata", &url, "gce_metadata")?
            .header("Metadata-Flavor", "Google");
        tasks.extend(spawn_probe(cfg, probe, provider, cancel));
    }
    for (_addon, url) in &p.addon_endpoints {
        let url = url.replace("$NODE_IP", &node_ip);
        tasks.extend(spawn_probe(
            cfg,
            http_probe(cfg, "addon_http", &url, "addon_http")?,
            provider,
            cancel,
        ));
    }
    Ok(tasks)
}

/// Builds and spawns the usage source; returns its task and source name.
fn spawn_usage(
    cfg: &Config,
    kind: MetricsProvider,
    node_name: &str,
    kube_client: Option<kube::Client>,
    // The watchers' stores, and whether they hold every Node (cluster role) or one (node role).
    node_stores: Option<(crate::sources::cluster::watchers::Stores, bool)>,
    provider: Arc<dyn Provider>,
    cancel: CancellationToken,
) -> Result<(JoinHandle<()>, &'static str)> {
    let schedule = |default: Duration| Schedule {
        interval: cfg.interval.unwrap_or(default),
        timeout: cfg.timeout,
        expire_after: cfg.expire_after_fetches,
    };
    Ok(match kind {
        MetricsProvider::Host => {
            let f = host::HostFetcher::new(host::HostConfig {
                procfs: cfg.procfs.clone(),
                node_name: node_name.to_string(),
            });
            let s = schedule(DEFAULT_HOST_INTERVAL);
            (tokio::spawn(usage::run(f, provider, s, cancel)), "host")
        }
        MetricsProvider::Prometheus => {
            let f = prometheus_fetcher(cfg, node_stores)?;
            let s = schedule(DEFAULT_REMOTE_INTERVAL);
            (
                tokio::spawn(usage::run(f, provider, s, cancel)),
                "prometheus",
            )
        }
        MetricsProvider::SignalFx => {
            let f = SignalFxFetcher::new(SignalFxConfig {
                http: remote_http(cfg, kind, "https://api.signalfx.com")?,
                host_name_suffix: cfg.usage.signalfx_host_name_suffix.clone(),
                cluster_name: cfg.usage.signalfx_cluster_name.clone(),
            })?;
            let s = schedule(DEFAULT_REMOTE_INTERVAL);
            (tokio::spawn(usage::run(f, provider, s, cancel)), "signalfx")
        }
        MetricsProvider::KubernetesMetricsServer => {
            let f = metrics_server_fetcher(cfg, kube_client, node_stores)?;
            let s = schedule(DEFAULT_METRICS_SERVER_INTERVAL);
            (
                tokio::spawn(usage::run(f, provider, s, cancel)),
                "metrics_server",
            )
        }
    })
}

/// The HTTP client settings of a remote usage backend (`kind`), at `--metrics-provider-address`
/// or `default_address`.
fn remote_http(cfg: &Config, kind: MetricsProvider, default_address: &str) -> Result<HttpConfig> {
    let u = &cfg.usage;
    let mut h = HttpConfig::new(u.address.clone().unwrap_or_else(|| default_address.into()));
    h.timeout = cfg.timeout;
    h.insecure_skip_verify = u.insecure_skip_verify;
    h.token = u.token.clone();
    h.ca_file = u.ca_file.clone();
    h.max_body_bytes = cfg.max_response_bytes;
    if u.openshift_auth {
        let sa = Path::new(role::SERVICE_ACCOUNT_DIR);
        h.ca_file = h.ca_file.or_else(|| Some(sa.join("ca.crt")));
        if kind == MetricsProvider::Prometheus {
            h.token = h.token.or_else(|| Some(Token::File(sa.join("token"))));
        }
    }
    Ok(h)
}

/// The Prometheus backend, asking the node watcher for node addresses when there is one.
fn prometheus_fetcher(
    cfg: &Config,
    node_stores: Option<(crate::sources::cluster::watchers::Stores, bool)>,
) -> Result<PrometheusFetcher> {
    let mut pc = PrometheusConfig::new(remote_http(
        cfg,
        MetricsProvider::Prometheus,
        "http://prometheus-k8s:9090",
    )?);
    pc.node_label = cfg.usage.prometheus_node_label.clone();
    pc.fallback_resolution = cfg.usage.prometheus_fallback_resolution;
    if let Some(m) = &cfg.usage.prometheus_metrics {
        pc.metrics = m.clone();
    }
    let mut f = PrometheusFetcher::new(pc)?;
    if let Some((stores, cluster)) = node_stores {
        let listed = stores.clone();
        f = f
            .with_node_addresses(Arc::new(move || ClusterNodes {
                // Every Node only in the cluster role: there the series are checked against them.
                names: match cluster {
                    true => stores
                        .nodes
                        .state()
                        .iter()
                        .filter_map(|n| n.metadata.name.clone())
                        .collect(),
                    false => Default::default(),
                },
                by_address: stores.node_addresses(),
            }))
            .with_nodes_listed(Box::pin(async move { listed.nodes_listed().await }));
    }
    Ok(f)
}

/// The metrics-server backend; in the cluster role it reads the watched Nodes.
fn metrics_server_fetcher(
    cfg: &Config,
    kube_client: Option<kube::Client>,
    node_stores: Option<(crate::sources::cluster::watchers::Stores, bool)>,
) -> Result<MetricsServerFetcher> {
    let client = kube_client.ok_or_else(|| Error::Kube {
        what: "the KubernetesMetricsServer backend".into(),
        reason: "no Kubernetes client was built".into(),
    })?;
    let mut f = MetricsServerFetcher::new(
        client,
        MetricsServerConfig {
            use_allocatable: cfg.usage.metrics_server_use_allocatable,
            max_item_bytes: cfg.max_response_bytes,
        },
    );
    // The cluster role watches every Node already: no LIST of all Nodes per fetch.
    if let Some((stores, true)) = node_stores {
        let listed = stores.clone();
        f = f.with_node_source(
            Arc::new(stores.nodes.clone()),
            Box::pin(async move { listed.nodes_listed().await }),
        );
    }
    Ok(f)
}

/// What the sinks need to know about this instance.
struct SinkContext<'a> {
    node_name: &'a str,
    cluster_name: &'a str,
    identity: &'a Identity,
    kube_client: Option<&'a kube::Client>,
}

/// The running push outputs and the leader elector.
struct Sinks {
    tasks: Vec<JoinHandle<()>>,
    elector: Option<Elector>,
}

/// The Lease elector's cancel token and task.
type Elector = (CancellationToken, JoinHandle<()>);

impl Sinks {
    async fn shutdown(self) {
        for t in self.tasks {
            let _ = t.await;
        }
        if let Some((cancel, task)) = self.elector {
            cancel.cancel();
            let _ = task.await;
        }
    }
}

/// Starts each configured push output on its own ticker and, in the cluster role, the Lease
/// elector that decides which replica pushes cluster-level series.
async fn spawn_sinks(
    cfg: &Config,
    role: Role,
    ctx: &SinkContext<'_>,
    published: &watch::Receiver<Arc<Published>>,
    store: Arc<Store>,
    cancel: &CancellationToken,
) -> Result<Sinks> {
    let sc = &cfg.sinks;
    let mut sinks = Sinks {
        tasks: Vec::new(),
        elector: None,
    };
    if sc.kinds.is_empty() {
        if sc.leader.enabled == Some(true) {
            tracing::warn!("--leader-elect has no effect without a --sink");
        }
        return Ok(sinks);
    }
    let schedule = SinkSchedule {
        interval: sc.interval,
        timeout: sc.timeout,
        final_push: cfg.shutdown_timeout.min(sc.timeout),
    };
    // This replica's name in the Lease and in `service.instance.id`.
    let instance_id = match &sc.leader.identity {
        Some(i) => i.clone(),
        None => format!("{}_{}", local_hostname()?, std::process::id()),
    };
    // Build every sink first: a bad setting stops the start before anything runs.
    let mut gcm = None;
    let mut otlp = None;
    for kind in &sc.kinds {
        match kind {
            SinkKind::Gcm => gcm = Some(build_gcm(cfg, role, ctx).await?),
            SinkKind::Otlp => otlp = Some(build_otlp(cfg, role, ctx, &instance_id)?),
        }
    }
    let leadership = leadership(cfg, role, ctx, instance_id, &store, &mut sinks)?;
    if let Some(o) = otlp {
        let t = start_sink(o, schedule, published, &store, &leadership, cancel);
        sinks.tasks.push(t);
    }
    if let Some(g) = gcm {
        let t = start_sink(g, schedule, published, &store, &leadership, cancel);
        sinks.tasks.push(t);
    }
    tracing::info!(
        sinks = %sc.kinds.iter().map(|k| k.as_str()).collect::<Vec<_>>().join(","),
        interval = ?sc.interval,
        "push outputs started"
    );
    Ok(sinks)
}

/// The Cloud Monitoring sink; project and location come from the flags or the metadata server.
async fn build_gcm(cfg: &Config, role: Role, ctx: &SinkContext<'_>) -> Result<Arc<GcmSink>> {
    let sc = &cfg.sinks;
    let g = &sc.gcm;
    let project = g.project.clone().or_else(|| ctx.identity.project.clone());
    if project.is_none() {
        return Err(Error::Config {
            option: "--gcm-project",
            value: String::new(),
            reason: "the Cloud Monitoring sink needs a project: set --gcm-project (not on GCE, or the metadata server did not answer)".into(),
        });
    }
    let location = g.location.clone().or_else(|| ctx.identity.location.clone());
    if location.is_none() {
        return Err(Error::Config {
            option: "--gcm-location",
            value: String::new(),
            reason: "the Cloud Monitoring sink needs the cluster location (k8s_* resources): set --gcm-location".into(),
        });
    }
    let gc = GcmConfig {
        project,
        location,
        cluster: Some(ctx.cluster_name.to_string()),
        own_node: (role == Role::Node).then(|| ctx.node_name.to_string()),
        ..g.clone()
    };
    Ok(Arc::new(GcmSink::new(gc).await?))
}

/// The OTLP sink, with this instance's resource attributes.
fn build_otlp(
    cfg: &Config,
    role: Role,
    ctx: &SinkContext<'_>,
    instance_id: &str,
) -> Result<Arc<OtlpSink>> {
    let resource = OtlpResource {
        cluster_name: ctx.cluster_name.to_string(),
        role: role.as_str().to_string(),
        node_name: matches!(role, Role::Node | Role::Host).then(|| ctx.node_name.to_string()),
        project: ctx.identity.project.clone().unwrap_or_default(),
        location: ctx.identity.location.clone().unwrap_or_default(),
        instance_id: instance_id.to_string(),
        host_id: if role == Role::Host {
            machine_id()
        } else {
            String::new()
        },
    };
    let sink = OtlpSink::new(&cfg.sinks.otlp, &resource)?;
    tracing::info!(
        protocol = sink.settings().protocol.as_str(),
        endpoint = %sink.settings().endpoint,
        "OTLP sink configured"
    );
    Ok(Arc::new(sink))
}

/// Whether this replica may push cluster-level series: Lease election in the cluster role
/// (unless turned off), nothing to elect in the others.
fn leadership(
    cfg: &Config,
    role: Role,
    ctx: &SinkContext<'_>,
    instance_id: String,
    store: &Arc<Store>,
    sinks: &mut Sinks,
) -> Result<Leadership> {
    Ok(match (role, cfg.sinks.leader.enabled, ctx.kube_client) {
        (Role::Cluster, None | Some(true), Some(client)) => {
            let (leading, elector) = start_election(cfg, client, instance_id, store)?;
            sinks.elector = Some(elector);
            Some(leading)
        }
        (Role::Cluster, Some(false), _) => {
            tracing::info!("leader election off: this replica pushes everything");
            None
        }
        (_, Some(true), _) => {
            tracing::warn!(
                role = role.as_str(),
                "--leader-elect applies to the cluster role only; ignored"
            );
            None
        }
        _ => None,
    })
}

/// Starts the Lease elector, with the leadership mirrored into the hub.
fn start_election(
    cfg: &Config,
    client: &kube::Client,
    instance_id: String,
    store: &Arc<Store>,
) -> Result<(tokio::sync::watch::Receiver<bool>, Elector)> {
    let l = &cfg.sinks.leader;
    let namespace = l
        .namespace
        .clone()
        .unwrap_or_else(|| client.default_namespace().to_string());
    let identity = instance_id;
    let lc = LeaseConfig {
        lease_duration: l.lease_duration,
        renew_deadline: l.renew_deadline,
        retry_period: l.retry_period,
        ..LeaseConfig::new(lease_name(&l.lease_name, &cfg.shard), namespace, identity)
    };
    lc.validate()?;
    tracing::info!(
        lease = %format!("{}/{}", lc.namespace, lc.name),
        identity = %lc.identity,
        "leader election on: only the Lease holder pushes cluster-level series"
    );
    let elector_cancel = CancellationToken::new();
    let lease = format!("{}/{}", lc.namespace, lc.name);
    let elector = leader::start(client.clone(), lc, elector_cancel.clone());
    // Leadership on /metrics (kube_prober_leader), from every change the elector makes.
    let mut leading = elector.leading.clone();
    let recorder = store.clone();
    let mirror = tokio::spawn(async move {
        loop {
            let now = *leading.borrow_and_update();
            recorder.sink().record_leadership(&lease, now);
            if leading.changed().await.is_err() {
                break;
            }
        }
    });
    let task = tokio::spawn(async move {
        let _ = elector.task.await;
        let _ = mirror.await;
    });
    Ok((elector.leading, (elector_cancel, task)))
}

/// One push output on its own ticker.
fn start_sink<S: Sink>(
    sink: Arc<S>,
    schedule: SinkSchedule,
    published: &watch::Receiver<Arc<Published>>,
    store: &Arc<Store>,
    leadership: &Leadership,
    cancel: &CancellationToken,
) -> JoinHandle<()> {
    tokio::spawn(run_sink(
        sink,
        schedule,
        published.clone(),
        store.clone(),
        leadership.clone(),
        cancel.clone(),
    ))
}

/// The leader Lease: one per shard when sharded (`<name>-shard-<index>`), so each shard has
/// its own pusher and two replicas of one shard still push once.
fn lease_name(name: &str, shard: &crate::sources::cluster::options::ShardMode) -> String {
    use crate::sources::cluster::options::ShardMode;
    match shard {
        ShardMode::Off => name.to_string(),
        ShardMode::Static(s) => format!("{name}-shard-{}", s.index),
        ShardMode::StatefulSet { ordinal, .. } => format!("{name}-shard-{ordinal}"),
    }
}

fn local_hostname() -> Result<String> {
    let name = hostname::get().map_err(|source| Error::Io {
        path: Path::new("hostname").to_path_buf(),
        source,
    })?;
    let name = name.to_string_lossy().trim().to_string();
    if name.is_empty() {
        return Err(Error::Config {
            option: "--node-name",
            value: String::new(),
            reason: "the hostname is empty; set --node-name".into(),
        });
    }
    Ok(name)
}

/// This machine's id for OTLP's `host.id` (host role): `/etc/machine-id`, empty when unreadable.
fn machine_id() -> String {
    std::fs::read_to_string("/etc/machine-id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::runs_probes;
    use crate::model::Shard;
    use crate::sources::cluster::options::ShardMode;

    #[test]
    fn only_shard_0_and_unsharded_instances_run_probes() {
        assert!(runs_probes(&ShardMode::Off));
        assert!(runs_probes(&ShardMode::Static(Shard {
            index: 0,
            total: 3
        })));
        assert!(!runs_probes(&ShardMode::Static(Shard {
            index: 2,
            total: 3
        })));
        let sts = |ordinal| ShardMode::StatefulSet {
            statefulset: "kube-prober-shard".into(),
            ordinal,
        };
        assert!(runs_probes(&sts(0)));
        assert!(!runs_probes(&sts(1)));
    }
}
