//! The one wiring module: picks the role, builds sources, the hub and the server, runs the tick
//! loop, and shuts everything down in order on SIGTERM/SIGINT.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::api::server::{self, AppState, Published};
use tokio::task::JoinHandle;

use crate::api::watcher::WatcherOptions;
use crate::cli::{MetricsProvider, Role};
use crate::config::{
    Config, DEFAULT_HOST_INTERVAL, DEFAULT_METRICS_SERVER_INTERVAL, DEFAULT_REMOTE_INTERVAL,
};
use crate::error::{Error, Result};
use crate::fetch::http::{HttpConfig, Token};
use crate::fetch::metrics_server::{MetricsServerConfig, MetricsServerFetcher};
use crate::fetch::prometheus::{PrometheusConfig, PrometheusFetcher};
use crate::fetch::signalfx::{SignalFxConfig, SignalFxFetcher};
use crate::fetch::{self, Schedule, host};
use crate::kubeclient;
use crate::model::{ClusterInfo, Snapshot};
use crate::provider::{Provider, Store};
use crate::role;

/// Runs until SIGTERM or SIGINT, then shuts down gracefully.
pub async fn run(cfg: Config) -> Result<()> {
    let cancel = CancellationToken::new();
    let on_signal = cancel.clone();
    tokio::spawn(async move {
        shutdown_signal().await;
        tracing::info!("signal received: shutting down");
        on_signal.cancel();
        shutdown_signal().await;
        tracing::warn!("second signal: exiting now");
        std::process::exit(130);
    });
    run_until(cfg, cancel).await
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for SIGTERM; only SIGINT stops kube-prober");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Runs until `cancel` fires.
pub async fn run_until(cfg: Config, cancel: CancellationToken) -> Result<()> {
    let choice = role::detect(cfg.role, cfg.kubeconfig.as_deref(), &role::Probe::system())?;
    let provider_kind = cfg.usage.provider.unwrap_or(match choice.role {
        Role::Host => MetricsProvider::Host,
        Role::Cluster | Role::Node => MetricsProvider::KubernetesMetricsServer,
    });
    tracing::info!(
        role = choice.role.as_str(),
        reason = %choice.reason,
        metrics_provider = provider_kind.as_str(),
        "role chosen"
    );
    if choice.role == Role::Node {
        return Err(Error::RoleUnavailable {
            role: "node".into(),
            reason: "this build does not have the node role yet (its Kubernetes watchers are being built); run with --role host".into(),
        });
    }
    let kube_client = match provider_kind {
        MetricsProvider::KubernetesMetricsServer => {
            Some(kubeclient::client(choice.kubeconfig.as_deref()).await?)
        }
        _ => None,
    };
    if provider_kind == MetricsProvider::Host && !cfg.procfs.is_dir() {
        return Err(Error::Config {
            option: "--procfs",
            value: cfg.procfs.display().to_string(),
            reason: "not a directory".into(),
        });
    }
    let node_name = match &cfg.node_name {
        Some(n) => n.clone(),
        None => local_hostname()?,
    };

    let store = Arc::new(Store::new());
    store.cluster().record_cluster_info(ClusterInfo {
        cluster_name: cfg.cluster_name.clone(),
        role: choice.role.as_str().into(),
    });

    let listener = TcpListener::bind(cfg.listen)
        .await
        .map_err(|source| Error::Listen {
            addr: cfg.listen.to_string(),
            source,
        })?;
    let local = listener.local_addr().map_err(|source| Error::Listen {
        addr: cfg.listen.to_string(),
        source,
    })?;

    let provider: Arc<dyn Provider> = store.clone();
    let (fetch_task, usage_source) = spawn_usage(
        &cfg,
        provider_kind,
        &node_name,
        kube_client,
        provider,
        cancel.clone(),
    )?;
    let watcher_opts = WatcherOptions {
        legacy_scaling: cfg.usage.watcher_legacy_scaling,
    };
    let (tx, rx) = watch::channel(Arc::new(Published::render_with(
        Arc::new(Snapshot::empty(SystemTime::now())),
        usage_source,
        watcher_opts,
    )));
    let tick_task = tokio::spawn(tick_loop(
        store.clone(),
        tx,
        cfg.tick_interval,
        usage_source,
        watcher_opts,
        cancel.clone(),
    ));

    let state = AppState {
        published: rx,
        stale_after: cfg.tick_interval * 3 + Duration::from_secs(5),
    };
    let app = server::router(state);
    let server_cancel = cancel.clone();
    let mut server_task = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(server_cancel.cancelled_owned())
            .await
    });
    tracing::info!(
        addr = %local,
        node = %node_name,
        usage_source,
        "listening"
    );

    let server_result = tokio::select! {
        r = &mut server_task => Some(r),
        _ = cancel.cancelled() => None,
    };
    cancel.cancel();
    let _ = fetch_task.await;
    let _ = tick_task.await;
    let server_result = match server_result {
        Some(r) => Some(r),
        None => match tokio::time::timeout(cfg.shutdown_timeout, &mut server_task).await {
            Ok(r) => Some(r),
            Err(_) => {
                tracing::warn!(timeout = ?cfg.shutdown_timeout, "in-flight requests did not finish in time; closing them");
                server_task.abort();
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

/// Makes a snapshot every `interval` (every 200 ms until the first ready one) and publishes it.
async fn tick_loop(
    store: Arc<Store>,
    tx: watch::Sender<Arc<Published>>,
    interval: Duration,
    usage_source: &'static str,
    watcher_opts: WatcherOptions,
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
        let snapshot = Arc::new(store.snapshot(SystemTime::now()));
        let published = Published::render_with(snapshot, usage_source, watcher_opts);
        if published.ready && !ready {
            ready = true;
            tracing::info!(
                nodes = published.snapshot.nodes.len(),
                "ready: first complete snapshot"
            );
        }
        tx.send_replace(Arc::new(published));
        store.record_tick(started.elapsed());
    }
}

/// Builds and spawns the usage source; returns its task and source name.
fn spawn_usage(
    cfg: &Config,
    kind: MetricsProvider,
    node_name: &str,
    kube_client: Option<kube::Client>,
    provider: Arc<dyn Provider>,
    cancel: CancellationToken,
) -> Result<(JoinHandle<()>, &'static str)> {
    let remote = |default_address: &str| -> Result<HttpConfig> {
        let u = &cfg.usage;
        let mut h = HttpConfig::new(u.address.clone().unwrap_or_else(|| default_address.into()));
        h.timeout = cfg.timeout;
        h.insecure_skip_verify = u.insecure_skip_verify;
        h.token = u.token.clone();
        h.ca_file = u.ca_file.clone();
        if u.openshift_auth {
            let sa = Path::new(role::SERVICE_ACCOUNT_DIR);
            h.ca_file = h.ca_file.or_else(|| Some(sa.join("ca.crt")));
            if kind == MetricsProvider::Prometheus {
                h.token = h.token.or_else(|| Some(Token::File(sa.join("token"))));
            }
        }
        Ok(h)
    };
    let schedule = |default: Duration| Schedule {
        interval: cfg.interval.unwrap_or(default),
        timeout: cfg.timeout,
    };
    Ok(match kind {
        MetricsProvider::Host => {
            let f = host::HostFetcher::new(host::HostConfig {
                procfs: cfg.procfs.clone(),
                node_name: node_name.to_string(),
            });
            let s = schedule(DEFAULT_HOST_INTERVAL);
            (tokio::spawn(fetch::run(f, provider, s, cancel)), "host")
        }
        MetricsProvider::Prometheus => {
            let mut pc = PrometheusConfig::new(remote("http://prometheus-k8s:9090")?);
            pc.node_label = cfg.usage.prometheus_node_label.clone();
            pc.fallback_resolution = cfg.usage.prometheus_fallback_resolution;
            if let Some(m) = &cfg.usage.prometheus_metrics {
                pc.metrics = m.clone();
            }
            let f = PrometheusFetcher::new(pc)?;
            let s = schedule(DEFAULT_REMOTE_INTERVAL);
            (
                tokio::spawn(fetch::run(f, provider, s, cancel)),
                "prometheus",
            )
        }
        MetricsProvider::SignalFx => {
            let f = SignalFxFetcher::new(SignalFxConfig {
                http: remote("https://api.signalfx.com")?,
                host_name_suffix: cfg.usage.signalfx_host_name_suffix.clone(),
                cluster_name: cfg.usage.signalfx_cluster_name.clone(),
            })?;
            let s = schedule(DEFAULT_REMOTE_INTERVAL);
            (tokio::spawn(fetch::run(f, provider, s, cancel)), "signalfx")
        }
        MetricsProvider::KubernetesMetricsServer => {
            let client = kube_client.ok_or_else(|| Error::Kube {
                what: "the KubernetesMetricsServer backend".into(),
                reason: "no Kubernetes client was built".into(),
            })?;
            let f = MetricsServerFetcher::new(
                client,
                MetricsServerConfig {
                    use_allocatable: cfg.usage.metrics_server_use_allocatable,
                },
            );
            let s = schedule(DEFAULT_METRICS_SERVER_INTERVAL);
            (
                tokio::spawn(fetch::run(f, provider, s, cancel)),
                "metrics_server",
            )
        }
    })
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
