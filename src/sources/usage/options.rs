//! The usage source's options: which backend feeds `/watcher` and how to reach it
//! ([`UsageOptions`]), and each backend's own knobs ([`BackendOptions`]), resolved together
//! into [`UsageConfig`], which hands the backend that runs its own part ([`Backend`]).

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::MetricsProvider;
use super::http::Token;
use super::prometheus::PromMetric;
use crate::k8s::role::Role;
use crate::model::{MetricType, Resource};
use crate::shared::error::Result;
use crate::shared::options::{duration, invalid};

/// The usage backend and its connection.
#[derive(Debug, Clone, Default, PartialEq, clap::Args, serde::Deserialize)]
#[serde(default)]
pub struct UsageOptions {
    /// Usage backend behind /watcher: Host, KubernetesMetricsServer, Prometheus or SignalFx.
    /// [default: Host in the host role, KubernetesMetricsServer in the cluster role]
    #[arg(long, env = "METRICS_PROVIDER_NAME", value_name = "NAME", value_parser = MetricsProvider::parse)]
    pub metrics_provider: Option<MetricsProvider>,

    /// Backend address. [default: http://prometheus-k8s:9090 for Prometheus, https://api.signalfx.com for SignalFx]
    #[arg(long, env = "METRICS_PROVIDER_ADDRESS", value_name = "URL")]
    pub metrics_provider_address: Option<String>,

    /// Backend token: Prometheus bearer token, SignalFx X-SF-Token.
    #[arg(
        long,
        env = "METRICS_PROVIDER_TOKEN",
        value_name = "TOKEN",
        hide_env_values = true
    )]
    pub metrics_provider_token: Option<String>,

    /// File holding the backend token, re-read on every request (rotated tokens work).
    #[arg(
        long,
        env = "KUBE_PROBER_METRICS_PROVIDER_TOKEN_FILE",
        value_name = "PATH"
    )]
    pub metrics_provider_token_file: Option<PathBuf>,

    /// PEM CA bundle to trust for the backend, besides the system roots.
    #[arg(
        long,
        env = "KUBE_PROBER_METRICS_PROVIDER_CA_FILE",
        value_name = "PATH"
    )]
    pub metrics_provider_ca_file: Option<PathBuf>,

    /// Do not verify the backend's TLS certificate. [default: false]
    #[arg(long, env = "INSECURE_SKIP_VERIFY", value_name = "BOOL", num_args = 0..=1, default_missing_value = "true", value_parser = crate::shared::options::parse_bool)]
    pub insecure_skip_verify: Option<bool>,

    /// OpenShift: trust the service-account CA and, without a token, send the service-account
    /// token to Prometheus. [default: false]
    #[arg(long, env = "ENABLE_OPENSHIFT_AUTH", value_name = "BOOL", num_args = 0..=1, default_missing_value = "true", value_parser = crate::shared::options::parse_bool)]
    pub enable_openshift_auth: Option<bool>,
}

crate::merge_options!(UsageOptions {
    metrics_provider,
    metrics_provider_address,
    metrics_provider_token,
    metrics_provider_token_file,
    metrics_provider_ca_file,
    insecure_skip_verify,
    enable_openshift_auth
});

/// Each usage backend's own settings.
#[derive(Debug, Clone, Default, PartialEq, clap::Args, serde::Deserialize)]
#[serde(default)]
pub struct BackendOptions {
    /// KubernetesMetricsServer: percent of allocatable instead of capacity (load-watcher uses
    /// capacity). [default: false]
    #[arg(long, env = "KUBE_PROBER_METRICS_SERVER_USE_ALLOCATABLE", value_name = "BOOL", num_args = 0..=1, default_missing_value = "true", value_parser = crate::shared::options::parse_bool)]
    pub metrics_server_use_allocatable: Option<bool>,

    /// Prometheus label that names the node; its `:port` is cut. [default: instance]
    #[arg(long, env = "KUBE_PROBER_PROMETHEUS_NODE_LABEL", value_name = "LABEL")]
    pub prometheus_node_label: Option<String>,

    /// Resolution of the subqueries used when a recording rule is missing. [default: 1m]
    #[arg(
        long,
        env = "KUBE_PROBER_PROMETHEUS_FALLBACK_RESOLUTION",
        value_name = "DURATION"
    )]
    pub prometheus_fallback_resolution: Option<String>,

    /// SignalFx: only hosts whose name ends with this suffix.
    #[arg(long, env = "SIGNALFX_HOST_NAME_SUFFIX", value_name = "SUFFIX")]
    pub signalfx_host_name_suffix: Option<String>,

    /// SignalFx: only hosts of this cluster.
    #[arg(long, env = "SIGNALFX_CLUSTER_NAME", value_name = "NAME")]
    pub signalfx_cluster_name: Option<String>,

    /// Config file only: the Prometheus metrics to query instead of load-watcher's 17.
    #[arg(skip)]
    pub prometheus_metrics: Option<Vec<PrometheusMetricEntry>>,
}

crate::merge_options!(BackendOptions {
    metrics_server_use_allocatable,
    prometheus_node_label,
    prometheus_fallback_resolution,
    signalfx_host_name_suffix,
    signalfx_cluster_name,
    prometheus_metrics,
});

/// One entry of `prometheus_metrics` in the config file.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PrometheusMetricEntry {
    /// Series (recording rule) name, queried as `avg_over_time(<name>[15m])`.
    pub name: String,
    /// load-watcher type: CPU, Memory, Bandwidth, Storage or Energy.
    #[serde(rename = "type")]
    pub kind: String,
    /// PromQL to use when the series is absent (evaluated as a subquery).
    #[serde(default)]
    pub fallback: Option<String>,
    /// Which node family it feeds on /metrics: cpu, memory, network_receive,
    /// network_transmit or disk_io; absent: kube_prober_node_backend_value.
    #[serde(default)]
    pub resource: Option<String>,
}

/// The usage backend behind `/watcher`, resolved: the one `--metrics-provider` names (or the
/// role's default, chosen at start by [`UsageConfig::kind_for`]) and every backend's own
/// settings, of which [`UsageConfig::backend`] hands the chosen one its part.
#[derive(Debug, Clone, PartialEq)]
pub struct UsageConfig {
    /// `None`: the role's default (Host for the host and node roles, KubernetesMetricsServer
    /// for the cluster role).
    pub provider: Option<MetricsProvider>,
    /// The remote backends' connection (Prometheus, SignalFx).
    pub remote: RemoteConfig,
    pub metrics_server: MetricsServerSettings,
    pub prometheus: PrometheusSettings,
    pub signalfx: SignalFxSettings,
}

/// A remote backend's address and how to authenticate to it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RemoteConfig {
    /// `None`: the backend's default address.
    pub address: Option<String>,
    pub token: Option<Token>,
    pub ca_file: Option<PathBuf>,
    pub insecure_skip_verify: bool,
    /// `--enable-openshift-auth`: the service account's CA (and Prometheus' token) unless given.
    pub openshift_auth: bool,
}

/// The metrics-server backend's settings.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MetricsServerSettings {
    /// Percentages of allocatable instead of capacity.
    pub use_allocatable: bool,
}

/// The Prometheus backend's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct PrometheusSettings {
    /// The label that names a series' node (`instance` by default).
    pub node_label: String,
    /// The step of the fallback subqueries.
    pub fallback_resolution: Duration,
    /// `None`: load-watcher's 17 metrics.
    pub metrics: Option<Vec<PromMetric>>,
}

/// The SignalFx backend's settings.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SignalFxSettings {
    /// Cut from host names (FQDN hosts become node names).
    pub host_name_suffix: String,
    /// Only hosts of this cluster.
    pub cluster_name: String,
}

/// The backend to run, with only its own settings.
#[derive(Debug, Clone, PartialEq)]
pub enum Backend {
    /// This machine's procfs.
    Host,
    /// metrics-server, through the Kubernetes client.
    MetricsServer(MetricsServerSettings),
    Prometheus(RemoteConfig, PrometheusSettings),
    SignalFx(RemoteConfig, SignalFxSettings),
}

impl Backend {
    /// Which backend this is.
    pub fn kind(&self) -> MetricsProvider {
        match self {
            Backend::Host => MetricsProvider::Host,
            Backend::MetricsServer(_) => MetricsProvider::KubernetesMetricsServer,
            Backend::Prometheus(..) => MetricsProvider::Prometheus,
            Backend::SignalFx(..) => MetricsProvider::SignalFx,
        }
    }
}

impl UsageConfig {
    /// The backend the role runs: the configured one, or the role's default.
    pub fn kind_for(&self, role: Role) -> MetricsProvider {
        self.provider.unwrap_or(match role {
            Role::Cluster => MetricsProvider::KubernetesMetricsServer,
            Role::Host | Role::Node => MetricsProvider::Host,
        })
    }

    /// Backend `kind` with its settings.
    pub fn backend(&self, kind: MetricsProvider) -> Backend {
        match kind {
            MetricsProvider::Host => Backend::Host,
            MetricsProvider::KubernetesMetricsServer => {
                Backend::MetricsServer(self.metrics_server.clone())
            }
            MetricsProvider::Prometheus => {
                Backend::Prometheus(self.remote.clone(), self.prometheus.clone())
            }
            MetricsProvider::SignalFx => {
                Backend::SignalFx(self.remote.clone(), self.signalfx.clone())
            }
        }
    }
}

impl UsageOptions {
    pub fn resolve(self, backends: BackendOptions) -> Result<UsageConfig> {
        let (address, token, ca_file) = self.connection()?;
        let label = backends
            .prometheus_node_label
            .unwrap_or_else(|| "instance".into());
        let label_ok = label
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !label_ok {
            return Err(invalid(
                "--prometheus-node-label",
                &label,
                "not a Prometheus label name",
            ));
        }
        let res_s = backends
            .prometheus_fallback_resolution
            .unwrap_or_else(|| "1m".into());
        let prometheus_fallback_resolution = duration(
            "--prometheus-fallback-resolution",
            &res_s,
            Duration::from_secs(1),
            Duration::from_secs(600),
        )?;
        Ok(UsageConfig {
            provider: self.metrics_provider,
            remote: RemoteConfig {
                address,
                token,
                ca_file,
                insecure_skip_verify: self.insecure_skip_verify.unwrap_or(false),
                openshift_auth: self.enable_openshift_auth.unwrap_or(false),
            },
            metrics_server: MetricsServerSettings {
                use_allocatable: backends.metrics_server_use_allocatable.unwrap_or(false),
            },
            prometheus: PrometheusSettings {
                node_label: label,
                fallback_resolution: prometheus_fallback_resolution,
                metrics: backends
                    .prometheus_metrics
                    .map(|entries| entries.into_iter().map(prom_metric).collect())
                    .transpose()?,
            },
            signalfx: SignalFxSettings {
                host_name_suffix: backends.signalfx_host_name_suffix.unwrap_or_default(),
                cluster_name: backends.signalfx_cluster_name.unwrap_or_default(),
            },
        })
    }

    /// `--metrics-provider-address`, its token (or token file) and CA file.
    fn connection(&self) -> Result<(Option<String>, Option<Token>, Option<PathBuf>)> {
        let address = self.metrics_provider_address.clone();
        if let Some(a) = &address
            && !(a.starts_with("http://") || a.starts_with("https://"))
        {
            return Err(invalid(
                "--metrics-provider-address",
                a,
                "must be an http:// or https:// URL",
            ));
        }
        let token = match (
            &self.metrics_provider_token,
            &self.metrics_provider_token_file,
        ) {
            (Some(_), Some(f)) => {
                return Err(invalid(
                    "--metrics-provider-token-file",
                    &f.display().to_string(),
                    "give a token or a token file, not both",
                ));
            }
            (Some(v), None) if v.trim().is_empty() => None,
            (Some(v), None) => Some(Token::Value(v.trim().to_string())),
            (None, Some(f)) if !f.is_file() => {
                return Err(invalid(
                    "--metrics-provider-token-file",
                    &f.display().to_string(),
                    "no such file",
                ));
            }
            (None, Some(f)) => Some(Token::File(f.clone())),
            (None, None) => None,
        };
        let ca_file = self.metrics_provider_ca_file.clone();
        if let Some(f) = &ca_file
            && !f.is_file()
        {
            return Err(invalid(
                "--metrics-provider-ca-file",
                &f.display().to_string(),
                "no such file",
            ));
        }
        Ok((address, token, ca_file))
    }
}

/// Checks and converts one `prometheus_metrics` entry.
fn prom_metric(e: PrometheusMetricEntry) -> Result<PromMetric> {
    let kind = match e.kind.to_ascii_lowercase().as_str() {
        "cpu" => MetricType::Cpu,
        "memory" => MetricType::Memory,
        "bandwidth" => MetricType::Bandwidth,
        "storage" => MetricType::Storage,
        "energy" => MetricType::Energy,
        _ => {
            return Err(invalid(
                "prometheus_metrics[].type",
                &e.kind,
                "expected CPU, Memory, Bandwidth, Storage or Energy",
            ));
        }
    };
    let name_ok = !e.name.is_empty()
        && e.name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':');
    if !name_ok {
        return Err(invalid(
            "prometheus_metrics[].name",
            &e.name,
            "not a Prometheus metric name",
        ));
    }
    let resource = match e.resource.as_deref() {
        None => None,
        Some(r) => Some(
            Resource::ALL
                .into_iter()
                .find(|x| x.as_str() == r)
                .ok_or_else(|| {
                    invalid(
                        "prometheus_metrics[].resource",
                        r,
                        "expected cpu, memory, network_receive, network_transmit or disk_io",
                    )
                })?,
        ),
    };
    Ok(PromMetric {
        name: e.name,
        kind,
        resource,
        fallback: e.fallback,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolved(provider: Option<MetricsProvider>) -> UsageConfig {
        let usage = UsageOptions {
            metrics_provider: provider,
            metrics_provider_address: Some("https://backend:443".into()),
            metrics_provider_token: Some("t".into()),
            ..UsageOptions::default()
        };
        let backends = BackendOptions {
            metrics_server_use_allocatable: Some(true),
            prometheus_node_label: Some("node".into()),
            signalfx_cluster_name: Some("c1".into()),
            ..BackendOptions::default()
        };
        usage.resolve(backends).expect("valid options")
    }

    #[test]
    fn the_role_chooses_the_default_backend_and_a_given_one_wins() {
        let default = resolved(None);
        assert_eq!(
            default.kind_for(Role::Cluster),
            MetricsProvider::KubernetesMetricsServer
        );
        assert_eq!(default.kind_for(Role::Node), MetricsProvider::Host);
        assert_eq!(default.kind_for(Role::Host), MetricsProvider::Host);
        let given = resolved(Some(MetricsProvider::Prometheus));
        for role in [Role::Cluster, Role::Node, Role::Host] {
            assert_eq!(given.kind_for(role), MetricsProvider::Prometheus);
        }
    }

    #[test]
    fn each_backend_gets_its_own_settings_and_the_remote_ones_the_connection() {
        let cfg = resolved(None);
        let remote = RemoteConfig {
            address: Some("https://backend:443".into()),
            token: Some(Token::Value("t".into())),
            ..RemoteConfig::default()
        };
        for kind in [
            MetricsProvider::Host,
            MetricsProvider::KubernetesMetricsServer,
            MetricsProvider::Prometheus,
            MetricsProvider::SignalFx,
        ] {
            let backend = cfg.backend(kind);
            assert_eq!(backend.kind(), kind);
            match backend {
                Backend::Host => {}
                Backend::MetricsServer(s) => assert!(s.use_allocatable),
                Backend::Prometheus(r, p) => {
                    assert_eq!(r, remote);
                    assert_eq!(p.node_label, "node");
                    assert_eq!(p.fallback_resolution, Duration::from_secs(60));
                    assert_eq!(p.metrics, None, "load-watcher's 17");
                }
                Backend::SignalFx(r, s) => {
                    assert_eq!(r, remote);
                    assert_eq!(
                        (s.cluster_name.as_str(), s.host_name_suffix.as_str()),
                        ("c1", "")
                    );
                }
            }
        }
    }
}
