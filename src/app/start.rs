//! Start-up: which role runs, the Kubernetes client, where this instance runs, the hub and
//! the listener.

use super::*;

/// The role chosen and the usage backend it runs.
pub(super) struct Start {
    pub(super) role: Role,
    /// The kubeconfig the role detection found, if any.
    pub(super) kubeconfig: Option<std::path::PathBuf>,
    pub(super) usage: MetricsProvider,
    /// The node role's task sources, checked and ready to start.
    pub(super) tasks: Option<crate::sources::task::start::Prepared>,
}

/// Chooses the role (logging why) and checks what the role needs before anything starts.
pub(super) fn choose_role(cfg: &Config) -> Result<Start> {
    let choice = role::detect(cfg.role, cfg.kubeconfig.as_deref(), &role::Probe::system())?;
    let usage = cfg.usage.kind_for(choice.role);
    tracing::info!(
        role = choice.role.as_str(),
        reason = %choice.reason,
        metrics_provider = usage.as_str(),
        "role chosen"
    );
    Ok(Start {
        role: choice.role,
        tasks: crate::sources::task::start::prepare(
            &cfg.task,
            choice.role,
            cfg.timeout,
            cfg.limit.max_response_bytes,
        )?,
        kubeconfig: choice.kubeconfig,
        usage,
    })
}

/// The Kubernetes client, when the role or the usage backend needs one.
pub(super) async fn connect_kube(
    cfg: &Config,
    start: &Start,
    hooks: Hooks,
) -> Result<Option<kube::Client>> {
    let needs_kube =
        start.role != Role::Host || start.usage == MetricsProvider::KubernetesMetricsServer;
    if !needs_kube {
        return Ok(None);
    }
    let kube_client = client::honour_retry_after(
        client::client(start.kubeconfig.as_deref(), cfg.limit.max_response_bytes).await?,
    );
    if let Some(f) = hooks.after_setup {
        f("kube client");
    }
    Ok(Some(kube_client))
}

/// Where this instance runs: its cloud identity, node name and cluster name.
pub(super) struct Place {
    pub(super) identity: Identity,
    pub(super) node_name: String,
    pub(super) cluster_name: String,
}

pub(super) async fn where_we_run(cfg: &Config, role: Role) -> Result<Place> {
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
pub(super) fn make_hub(place: &Place, role: Role) -> Arc<Store> {
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
pub(super) async fn bind(cfg: &Config) -> Result<(TcpListener, std::net::SocketAddr)> {
    let listener = crate::serve::listener::bind(cfg.listen).map_err(|e| Error::Config {
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

pub(super) fn local_hostname() -> Result<String> {
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
