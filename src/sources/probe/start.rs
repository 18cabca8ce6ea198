//! The probes of a role, built from their resolved [`ProbeConfig`] and started on their
//! schedules. The wiring hands over only what it alone knows ([`StartContext`]): the role,
//! whether this instance runs probes at all, whether it is on GCE, and the API client.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::dns::DnsProbe;
use super::http::HttpProbe;
use super::kube::{ApiServerReadyProbe, MetricsServerProbe};
use super::options::ProbeConfig;
use super::{Probe, Schedule, run};
use crate::hub::Provider;
use crate::k8s::role::Role;
use crate::shared::error::{Error, Result};

/// What the probes need from the wiring, beside their own config.
pub struct StartContext<'a> {
    pub role: Role,
    /// Whether this instance runs probes (a cluster-role shard above 0 does not: their series
    /// come from shard 0 only). Their targets are checked either way, so a bad URL fails on
    /// every shard alike.
    pub runs: bool,
    /// On GCE, the node role probes the metadata server at `metadata_host`.
    pub on_gce: bool,
    pub metadata_host: String,
    /// The cluster role's API client (metrics-server and API server probes).
    pub client: Option<&'a kube::Client>,
    /// `--max-response-bytes`: the cap on an HTTP probe's answer.
    pub max_response_bytes: usize,
}

/// The probes of a role: cluster (metrics-server, cluster DNS, API server), node (kubelet, the
/// metadata server on GCE, addon endpoints), and connectivity (URLs, DNS names) in every role.
pub fn spawn(
    cfg: &ProbeConfig,
    ctx: &StartContext<'_>,
    provider: &Arc<dyn Provider>,
    cancel: &CancellationToken,
) -> Result<Vec<JoinHandle<()>>> {
    let start = Starter {
        cfg,
        ctx,
        provider,
        cancel,
    };
    if !ctx.runs {
        tracing::info!("probes run on shard 0 only; this shard runs none");
    }
    let mut tasks = Vec::new();
    let mut dns_names = cfg.dns_names.clone().unwrap_or_else(|| match ctx.role {
        Role::Cluster => vec!["kubernetes.default.svc.cluster.local".into()],
        _ => Vec::new(),
    });
    if let (Role::Cluster, Some(client)) = (ctx.role, ctx.client) {
        tasks.extend(start.cluster(client, &mut dns_names));
    }
    if ctx.role == Role::Node {
        tasks.extend(start.node()?);
    }
    for url in &cfg.urls {
        tasks.extend(start.one(start.http("http_get", url, "http_get")?));
    }
    for name in &dns_names {
        tasks.extend(start.one(DnsProbe::new("dns_lookup", name)));
    }
    Ok(tasks)
}

/// Starts the probes of one [`spawn`].
struct Starter<'a> {
    cfg: &'a ProbeConfig,
    ctx: &'a StartContext<'a>,
    provider: &'a Arc<dyn Provider>,
    cancel: &'a CancellationToken,
}

impl Starter<'_> {
    /// Starts one probe if this instance runs probes and its schedule is configured (not
    /// disabled).
    fn one<P: Probe>(&self, probe: P) -> Option<JoinHandle<()>> {
        if !self.ctx.runs {
            return None;
        }
        let (interval, timeout) = *self.cfg.schedules.get(probe.name())?;
        tracing::info!(
            probe = probe.name(),
            target = probe.target(),
            ?interval,
            "probe enabled"
        );
        Some(tokio::spawn(run(
            probe,
            Schedule { interval, timeout },
            self.provider.clone(),
            self.cancel.clone(),
        )))
    }

    /// An HTTP probe with the timeout of `timeout_of`'s schedule; a bad URL is a config error.
    fn http(&self, name: &str, url: &str, timeout_of: &str) -> Result<HttpProbe> {
        let timeout = self
            .cfg
            .schedules
            .get(timeout_of)
            .map_or(Duration::from_secs(5), |s| s.1);
        HttpProbe::new(name, url, timeout)
            .map(|p| p.max_body_bytes(self.ctx.max_response_bytes))
            .map_err(|e| Error::Config {
                option: "probe URL",
                value: url.to_string(),
                reason: e.to_string(),
            })
    }

    /// The cluster role's probes: metrics-server, the API server's readiness, and the first
    /// DNS name (taken out of `dns_names`) as `cluster_dns`.
    fn cluster(&self, client: &kube::Client, dns_names: &mut Vec<String>) -> Vec<JoinHandle<()>> {
        let mut tasks = Vec::new();
        tasks.extend(self.one(MetricsServerProbe::new(client.clone())));
        tasks.extend(self.one(ApiServerReadyProbe::new(client.clone())));
        if !dns_names.is_empty() {
            let first = dns_names.remove(0);
            tasks.extend(self.one(DnsProbe::new("cluster_dns", &first)));
        }
        tasks
    }

    /// The node role's probes: the kubelet's healthz, the GCE metadata server (on GCE) and the
    /// addon endpoints on this node (`$NODE_IP` in their URLs is the `NODE_IP` environment
    /// variable the DaemonSet sets, else 127.0.0.1).
    fn node(&self) -> Result<Vec<JoinHandle<()>>> {
        let p = self.cfg;
        let mut tasks = Vec::new();
        let kubelet = self
            .http("kubelet_healthz", &p.kubelet_healthz_url, "kubelet_healthz")?
            .body_contains("ok");
        tasks.extend(self.one(kubelet));
        if self.ctx.on_gce {
            let host = &self.ctx.metadata_host;
            let url =
                format!("http://{host}/computeMetadata/v1/instance/service-accounts/default/email");
            let probe = self
                .http("gce_metadata", &url, "gce_metadata")?
                .header("Metadata-Flavor", "Google");
            tasks.extend(self.one(probe));
        }
        let node_ip = std::env::var("NODE_IP").unwrap_or_else(|_| "127.0.0.1".into());
        for (_addon, url) in &p.addon_endpoints {
            let url = url.replace("$NODE_IP", &node_ip);
            tasks.extend(self.one(self.http("addon_http", &url, "addon_http")?));
        }
        Ok(tasks)
    }
}
