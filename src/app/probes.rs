//! The probes of a role, started on their schedules.

use super::*;

/// Starts one probe if its schedule is configured (not disabled).
pub(super) fn spawn_probe<P: Probe>(
    cfg: &Config,
    probe: P,
    provider: &Arc<dyn Provider>,
    cancel: &CancellationToken,
) -> Option<JoinHandle<()>> {
    if !runs_probes(&cfg.scope.shard) {
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
pub(super) fn runs_probes(shard: &crate::sources::cluster::options::ShardMode) -> bool {
    use crate::sources::cluster::options::ShardMode;
    match shard {
        ShardMode::Off => true,
        ShardMode::Static(s) => s.index == 0,
        ShardMode::StatefulSet { ordinal, .. } => *ordinal == 0,
    }
}

/// The probes of a role: cluster (metrics-server, cluster DNS, API server), node (kubelet,
/// addon endpoints), and connectivity (URLs, DNS names) in every role.
pub(super) fn spawn_probes(
    cfg: &Config,
    role: Role,
    on_gce: bool,
    client: Option<&kube::Client>,
    provider: Arc<dyn Provider>,
    cancel: &CancellationToken,
) -> Result<Vec<JoinHandle<()>>> {
    let p = &cfg.probes;
    let mut tasks = Vec::new();
    if !runs_probes(&cfg.scope.shard) {
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
pub(super) fn http_probe(
    cfg: &Config,
    name: &str,
    url: &str,
    timeout_of: &str,
) -> Result<HttpProbe> {
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
pub(super) fn spawn_cluster_probes(
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
pub(super) fn spawn_node_probes(
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
