//! The usage source started: the [`Backend`] its resolved `UsageConfig` hands over for the role
//! (`UsageConfig::backend`), built from its own settings and run on its schedule. The wiring
//! hands over only what it alone knows ([`StartContext`]): this node's name, the Kubernetes
//! client, and the node watcher's view when one runs.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::http::{HttpConfig, Token};
use super::metrics_server::{MetricsServerConfig, MetricsServerFetcher, NodeSource, NodesListed};
use super::options::{
    Backend, MetricsServerSettings, PrometheusSettings, RemoteConfig, SignalFxSettings,
};
use super::prometheus::{NodeAddresses, PrometheusConfig, PrometheusFetcher};
use super::signalfx::{SignalFxConfig, SignalFxFetcher};
use super::{MetricsProvider, Schedule, host, run};
use crate::hub::Provider;
use crate::k8s::role;
use crate::shared::error::{Cause, Error, Result};

/// What a usage backend needs from the wiring, beside its own config.
pub struct StartContext {
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

/// What is checked before anything starts: `--procfs` (`procfs`) must be a directory when the
/// host backend reads it.
pub fn check(kind: MetricsProvider, procfs: &Path) -> Result<()> {
    if kind == MetricsProvider::Host && !procfs.is_dir() {
        return Err(Error::Config {
            option: "--procfs",
            value: procfs.display().to_string(),
            reason: "not a directory".into(),
        });
    }
    Ok(())
}

/// Builds `backend` and runs it until `cancel`; the task and the name its runs are recorded
/// under.
pub fn spawn(
    backend: Backend,
    ctx: StartContext,
    provider: Arc<dyn Provider>,
    cancel: CancellationToken,
) -> Result<(JoinHandle<()>, &'static str)> {
    let kind = backend.kind();
    let schedule = Schedule {
        interval: ctx.interval.unwrap_or(kind.default_interval()),
        timeout: ctx.timeout,
        expire_after: ctx.expire_after,
    };
    let task = match backend {
        Backend::Host => {
            let f = host::HostFetcher::new(host::HostConfig {
                procfs: ctx.procfs,
                node_name: ctx.node_name,
            });
            tokio::spawn(run(f, provider, schedule, cancel))
        }
        Backend::Prometheus(remote, settings) => {
            let f = prometheus_fetcher(&remote, settings, &ctx)?;
            let f = match ctx.nodes {
                Some(n) => f
                    .with_node_addresses(n.addresses)
                    .with_nodes_listed(n.listed),
                None => f,
            };
            tokio::spawn(run(f, provider, schedule, cancel))
        }
        Backend::SignalFx(remote, settings) => {
            let f = signalfx_fetcher(&remote, settings, &ctx)?;
            tokio::spawn(run(f, provider, schedule, cancel))
        }
        Backend::MetricsServer(settings) => {
            let f = metrics_server_fetcher(settings, ctx)?;
            tokio::spawn(run(f, provider, schedule, cancel))
        }
    };
    Ok((task, kind.source_name()))
}

/// The HTTP client settings of a remote backend, at `--metrics-provider-address` or
/// `default_address`. With `--enable-openshift-auth`, the service account's CA (and, with
/// `token_from_service_account`, its token) unless given.
fn remote_http(
    remote: &RemoteConfig,
    ctx: &StartContext,
    default_address: &str,
    token_from_service_account: bool,
) -> HttpConfig {
    let mut h = HttpConfig::new(
        remote
            .address
            .clone()
            .unwrap_or_else(|| default_address.into()),
    );
    h.timeout = ctx.timeout;
    h.insecure_skip_verify = remote.insecure_skip_verify;
    h.token = remote.token.clone();
    h.ca_file = remote.ca_file.clone();
    h.max_body_bytes = ctx.max_response_bytes;
    if remote.openshift_auth {
        let sa = Path::new(role::SERVICE_ACCOUNT_DIR);
        h.ca_file = h.ca_file.or_else(|| Some(sa.join("ca.crt")));
        if token_from_service_account {
            h.token = h.token.or_else(|| Some(Token::File(sa.join("token"))));
        }
    }
    h
}

/// The Prometheus backend (the node watcher's view is added by [`spawn`]); with OpenShift's
/// auth it sends the service account's token.
fn prometheus_fetcher(
    remote: &RemoteConfig,
    settings: PrometheusSettings,
    ctx: &StartContext,
) -> Result<PrometheusFetcher> {
    let http = remote_http(remote, ctx, "http://prometheus-k8s:9090", true);
    let mut pc = PrometheusConfig::new(http);
    pc.node_label = settings.node_label;
    pc.fallback_resolution = settings.fallback_resolution;
    if let Some(m) = settings.metrics {
        pc.metrics = m;
    }
    PrometheusFetcher::new(pc)
}

/// The SignalFx backend (its own `X-SF-Token`, never the service account's).
fn signalfx_fetcher(
    remote: &RemoteConfig,
    settings: SignalFxSettings,
    ctx: &StartContext,
) -> Result<SignalFxFetcher> {
    SignalFxFetcher::new(SignalFxConfig {
        http: remote_http(remote, ctx, "https://api.signalfx.com", false),
        host_name_suffix: settings.host_name_suffix,
        cluster_name: settings.cluster_name,
    })
}

/// The metrics-server backend; where the node watcher holds every Node, it reads them there.
fn metrics_server_fetcher(
    settings: MetricsServerSettings,
    ctx: StartContext,
) -> Result<MetricsServerFetcher> {
    let client = ctx.kube_client.ok_or_else(|| {
        Error::kube(
            "the KubernetesMetricsServer backend",
            Cause::message("no Kubernetes client was built"),
        )
    })?;
    let f = MetricsServerFetcher::new(
        client,
        MetricsServerConfig {
            use_allocatable: settings.use_allocatable,
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
