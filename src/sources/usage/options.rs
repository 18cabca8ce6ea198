//! The usage source's options: which backend feeds `/watcher` and how to reach it
//! ([`UsageOptions`]), and each backend's own knobs ([`BackendOptions`]), resolved together
//! into [`UsageConfig`].

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::MetricsProvider;
use super::http::Token;
use super::prometheus::PromMetric;
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

/// The usage backend behind `/watcher` and its connection settings.
#[derive(Debug, Clone, PartialEq)]
pub struct UsageConfig {
    /// `None`: the role's default (Host for host, KubernetesMetricsServer for cluster).
    pub provider: Option<MetricsProvider>,
    pub address: Option<String>,
    pub token: Option<Token>,
    pub ca_file: Option<PathBuf>,
    pub insecure_skip_verify: bool,
    pub openshift_auth: bool,
    pub metrics_server_use_allocatable: bool,
    pub prometheus_node_label: String,
    pub prometheus_fallback_resolution: Duration,
    pub signalfx_host_name_suffix: String,
    pub signalfx_cluster_name: String,
    /// `None`: load-watcher's 17 metrics.
    pub prometheus_metrics: Option<Vec<PromMetric>>,
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
            address,
            token,
            ca_file,
            insecure_skip_verify: self.insecure_skip_verify.unwrap_or(false),
            openshift_auth: self.enable_openshift_auth.unwrap_or(false),
            metrics_server_use_allocatable: backends
                .metrics_server_use_allocatable
                .unwrap_or(false),
            prometheus_node_label: label,
            prometheus_fallback_resolution,
            signalfx_host_name_suffix: backends.signalfx_host_name_suffix.unwrap_or_default(),
            signalfx_cluster_name: backends.signalfx_cluster_name.unwrap_or_default(),
            prometheus_metrics: backends
                .prometheus_metrics
                .map(|entries| entries.into_iter().map(prom_metric).collect())
                .transpose()?,
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
