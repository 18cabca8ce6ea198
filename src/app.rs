//! The one wiring module: picks the role, builds sources, the hub and the server, runs the tick
//! loop, and shuts everything down in order on SIGTERM/SIGINT.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::api::server::{self, AppState, Published};
use crate::cli::Role;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::fetch::{self, Schedule, host};
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
    tracing::info!(role = choice.role.as_str(), reason = %choice.reason, "role chosen");
    if choice.role != Role::Host {
        return Err(Error::RoleUnavailable {
            role: choice.role.as_str().into(),
            reason: format!(
                "chosen because {}, but this build has only the host role so far (the Kubernetes sources are being built); run with --role host",
                choice.reason
            ),
        });
    }
    if !cfg.procfs.is_dir() {
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

    let host_fetcher = host::HostFetcher::new(host::HostConfig {
        procfs: cfg.procfs.clone(),
        node_name: node_name.clone(),
    });
    let usage_source = "host";
    let (tx, rx) = watch::channel(Arc::new(Published::render(
        Arc::new(Snapshot::empty(SystemTime::now())),
        usage_source,
    )));

    let provider: Arc<dyn Provider> = store.clone();
    let schedule = Schedule {
        interval: cfg.interval,
        timeout: cfg.timeout,
    };
    let fetch_task = tokio::spawn(fetch::run(host_fetcher, provider, schedule, cancel.clone()));
    let tick_task = tokio::spawn(tick_loop(
        store.clone(),
        tx,
        cfg.tick_interval,
        usage_source,
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
        procfs = %cfg.procfs.display(),
        interval = ?cfg.interval,
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
        let published = Published::render(snapshot, usage_source);
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
