//! The one wiring module: picks the role, builds sources, the hub and the server, runs the tick
//! loop, and shuts everything down in order on SIGTERM/SIGINT.
//!
//! The top of the house: may import every other module; nothing imports it but `main.rs`.

mod outputs;
mod probes;
mod sources;
mod start;
pub mod subcommand;

use outputs::*;
use probes::*;
use sources::*;
use start::*;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::outputs::published::Published;
use crate::serve::server::{self, AppState};
use tokio::task::JoinHandle;

use crate::config::{Config, SinksConfig};
use crate::k8s::client;
use crate::k8s::identity::{self, Identity, IdentityConfig};
use crate::k8s::role::Role;
use crate::outputs::watcher::WatcherConfig;
use crate::shared::error::{Error, Result};
use crate::sources::probe;
use crate::sources::usage;
use crate::sources::usage::MetricsProvider;
use crate::sources::usage::prometheus::ClusterNodes;

use crate::hub::{Provider, Store};
use crate::k8s::leader;
use crate::k8s::role;
use crate::model::{ClusterInfo, Snapshot};
use crate::outputs::push::{self, Leadership, SinkKind, SinkSchedule};
use crate::outputs::{PushStart, gcm, otlp};
use crate::sources::cluster::{self, watchers};
use crate::sources::task;

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

/// What the binary runs at fixed points of the start and after each tick (the binary hands
/// the start-up's memory back there, for the node role's memory budget); tests run without.
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
    usage::start::check(start.usage, &cfg.procfs)?;
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
    let tls_on = tls_config.is_some();
    let server_task = start_server(&cfg, listener, rx, tls_config, security, &cancel);
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

/// The server on `listener`, handing out the bodies `published` holds behind `security`, with
/// the listener's limits and the counters of what they shed.
fn start_server(
    cfg: &Config,
    listener: TcpListener,
    published: watch::Receiver<Arc<Published>>,
    tls_config: Option<Arc<rustls::ServerConfig>>,
    security: server::Security,
    cancel: &CancellationToken,
) -> JoinHandle<std::io::Result<()>> {
    let state = AppState {
        published,
        stale_after: cfg.tick_interval * 3 + Duration::from_secs(5),
    };
    let listener_stats = Arc::new(crate::serve::listener::ListenerStats::default());
    let security = server::Security {
        listener_stats: Some(listener_stats.clone()),
        ..security
    };
    serve(
        listener,
        server::router_with(state, security),
        tls_config,
        Listening {
            limits: cfg.serve.limits,
            stats: listener_stats,
        },
        cancel,
    )
}

/// The listener's limits and the counters of what they shed.
struct Listening {
    limits: crate::serve::listener::ListenerLimits,
    stats: Arc<crate::serve::listener::ListenerStats>,
}

/// The HTTP server on `listener`, with TLS when configured, until `cancel` fires.
fn serve(
    listener: TcpListener,
    app: axum::Router,
    tls_config: Option<Arc<rustls::ServerConfig>>,
    listening: Listening,
    cancel: &CancellationToken,
) -> JoinHandle<std::io::Result<()>> {
    tokio::spawn(crate::serve::listener::serve(
        listener,
        app,
        tls_config,
        listening.limits,
        listening.stats,
        cancel.clone(),
    ))
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
        let store = tls::CertStore::load(settings.clone()).map_err(|e| Error::Config {
            option: "--tls-cert-file",
            value: settings.cert_file.display().to_string(),
            reason: e.to_string(),
        })?;
        tls_config = Some(tls::server_config(store.clone()).map_err(|e| {
            Error::Config {
                option: "--client-ca-file",
                value: settings
                    .client_ca_file
                    .as_ref()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default(),
                reason: e.to_string(),
            }
        })?);
        security.tls_stats = Some(store.stats.clone());
        reloader = Some(store.spawn_reloader(cancel.clone()));
    }
    if let Some(settings) = &cfg.serve.auth {
        let client = match kube_client {
            Some(c) => c,
            None => client::client(cfg.kubeconfig.as_deref(), cfg.limit.max_response_bytes).await?,
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
