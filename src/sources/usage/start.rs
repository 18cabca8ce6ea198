//! The usage source started: the backend its resolved [`UsageConfig`] names, built from that
//! config and run on its schedule. The wiring hands over only what it alone knows
//! ([`StartContext`]): which backend the role runs, this node's name, the Kubernetes client,
//! and the node watcher's view when one runs.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::http::{HttpConfig, Token};
use super::metrics_server::{MetricsServerConfig, MetricsServerFetcher, NodeSource, NodesListed};
use super::options::UsageConfig;
use super::prometheus::{NodeAddresses, PrometheusConfig, PrometheusFetcher};
use super::signalfx::{SignalFxConfig, SignalFxFetcher};
use super::{MetricsProvider, Schedule, host, run};
use crate::hub::Provider;
use crate::k8s::role;
use crate::shared::error::{Error, Result};

/// What a usage backend needs from the wiring, beside its own config.
pub struct StartContext {
    /// The backend to run: the configured one, or the role's default.
    pub kind: MetricsProvider,
    /// This node's name (the host backend reports under it).
    pub node_name: String,
    /// The procfs root (the host backend).
    pub procfs: PathBuf,
    /// `--interval` (`None`: the backend's default, [`MetricsProvider::default_interval`]),
    /// `--timeout` and `--expire-after-fetches`.
    pub interval: Option<Duration>,
    pub timeout: Duration,
    pub expire_after: u32,
    /// `--max-response-bytes`: the cap on a backend's answer (metrics-server: on one item).
    pub max_response_bytes: usize,
    /// The metrics-server backend's client.
    pub kube_client: Option<kube::Client>,
    /// The node watcher's view, when one runs.
    pub nodes: Option<WatchedNodes>,
}

/// What the node watcher knows, handed to the backends that name or size nodes by it.
pub struct WatchedNodes {
    /// Every watched Node's name (the cluster role; empty in the node role) and the addresses
    /// Prometheus series are mapped by.
    pub addresses: NodeAddresses,
    /// The Node objects, when the watcher holds every Node (the cluster role): metrics-server's
    /// denominators without a LIST of all Nodes per fetch.
    pub every_node: Option<NodeSource>,
    /// Resolves once the watcher's first list is in.
    pub listed: NodesListed,
}

impl MetricsProvider {
    /// How often the backend is fetched unless `--interval` says otherwise: the host source
    /// and metrics-server at metrics-server's own resolution, Prometheus and SignalFx every
    /// minute as load-watcher refreshes.
    pub fn default_interval(self) -> Duration {
        match self {
            MetricsProvider::Host | MetricsProvider::KubernetesMetricsServer => {
                Duration::from_secs(15)
            }
            MetricsProvider::Prometheus | MetricsProvider::SignalFx => Duration::from_secs(60),
        }
    }

    /// The name the backend's runs are recorded under (`kube_prober_source_*{source=…}`).
    pub fn source_name(self) -> &'static str {
        match self {
            MetricsProvider::Host => "host",
            MetricsProvider::KubernetesMetricsServer => "metrics_server",
            MetricsProvider::Prometheus => "prometheus",
            MetricsProvider::SignalFx => "signalfx",
        }
    }
}

/// Builds the backend `ctx.kind` from `cfg` and runs it until `cancel`; the task and the name
/// its runs are recorded under.
pub fn spawn(
    cfg: &UsageConfig,
    ctx: StartContext,
    provider: Arc<dyn Provider>,
    cancel: CancellationToken,
) -> Result<(JoinHandle<()>, &'static str)> {
    let kind = ctx.kind;
    let schedule = Schedule {
        interval: ctx.interval.unwrap_or(kind.default_interval()),
        timeout: ctx.timeout,
        expire_after: ctx.expire_after,
    };
    let task = match kind {
        MetricsProvider::Host => {
            let f = host::HostFetcher::new(host::HostConfig {
                procfs: ctx.procfs,
                node_name: ctx.node_name,
            });
            tokio::spawn(run(f, provider, schedule, cancel))
        }
        MetricsProvider::Prometheus => {
            let f = prometheus_fetcher(cfg, &ctx)?;
            let f = match ctx.nodes {
                Some(n) => f
                    .with_node_addresses(n.addresses)
                    .with_nodes_listed(n.listed),
                None => f,
            };
            tokio::spawn(run(f, provider, schedule, cancel))
        }
        MetricsProvider::SignalFx => {
            let f = SignalFxFetcher::new(SignalFxConfig {
                http: remote_http(cfg, &ctx, "https://api.signalfx.com"),
                host_name_suffix: cfg.signalfx_host_name_suffix.clone(),
                cluster_name: cfg.signalfx_cluster_name.clone(),
            })?;
            tokio::spawn(run(f, provider, schedule, cancel))
        }
        MetricsProvider::KubernetesMetricsServer => {
            let f = metrics_server_fetcher(cfg, ctx)?;
            tokio::spawn(run(f, provider, schedule, cancel))
        }
    };
    Ok((task, kind.source_name()))
}

/// The HTTP client settings of a remote backend, at `--metrics-provider-address` or
/// `default_address`. With `--enable-openshift-auth`, the service account's CA (and, for
/// Prometheus, its token) unless given.
fn remote_http(cfg: &UsageConfig, ctx: &StartContext, default_address: &str) -> HttpConfig {
    let mut h = HttpConfig::new(
        cfg.address
            .clone()
            .unwrap_or_else(|| default_address.into()),
    );
    h.timeout = ctx.timeout;
    h.insecure_skip_verify = cfg.insecure_skip_verify;
    h.token = cfg.token.clone();
    h.ca_file = cfg.ca_file.clone();
    h.max_body_bytes = ctx.max_response_bytes;
    if cfg.openshift_auth {
        let sa = Path::new(role::SERVICE_ACCOUNT_DIR);
        h.ca_file = h.ca_file.or_else(|| Some(sa.join("ca.crt")));
        if ctx.kind == MetricsProvider::Prometheus {
            h.token = h.token.or_else(|| Some(Token::File(sa.join("token"))));
        }
    }
    h
}

/// The Prometheus backend (the node watcher's view is added by [`spawn`]).
fn prometheus_fetcher(cfg: &UsageConfig, ctx: &StartContext) -> Result<PrometheusFetcher> {
    let mut pc = PrometheusConfig::new(remote_http(cfg, ctx, "http://prometheus-k8s:9090"));
    pc.node_label = cfg.prometheus_node_label.clone();
    pc.fallback_resolution = cfg.prometheus_fallback_resolution;
    if let Some(m) = &cfg.prometheus_metrics {
        pc.metrics = m.clone();
    }
    PrometheusFetcher::new(pc)
}

/// The metrics-server backend; where the node watcher holds every Node, it reads them there.
fn metrics_server_fetcher(cfg: &UsageConfig, ctx: StartContext) -> Result<MetricsServerFetcher> {
    let client = ctx.kube_client.ok_or_else(|| Error::Kube {
        what: "the KubernetesMetricsServer backend".into(),
        reason: "no Kubernetes client was built".into(),
    })?;
    let f = MetricsServerFetcher::new(
        client,
        MetricsServerConfig {
            use_allocatable: cfg.metrics_server_use_allocatable,
            max_item_bytes: ctx.max_response_bytes,
        },
    );
    Ok(match ctx.nodes {
        Some(WatchedNodes {
            every_node: Some(nodes),
            listed,
            ..
        }) => f.with_node_source(nodes, listed),
        _ => f,
    })
}
