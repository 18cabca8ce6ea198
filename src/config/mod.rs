//! The resolved configuration: flags over environment over the YAML file over defaults, every
//! value checked at start. A bad value is an [`Error::Config`] naming the option and the value.
//!
//! [`cli`] holds the flags; this module resolves them with the environment and the file into
//! each component's config. May import every layer below it (components' config types), never
//! [`crate::app`].

pub mod cli;

use crate::shared::suggest::did_you_mean;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::config::cli::Cli;
use crate::k8s::role::Role;
use crate::model::{MetricType, Resource};
use crate::shared::error::{Error, Result};
use crate::shared::telemetry::LogFormat;
use crate::sources::cluster::derive::{AddonKeys, DeriveConfig};
use crate::sources::cluster::watchers::PodScope;
use crate::sources::usage::MetricsProvider;
use crate::sources::usage::http::Token;
use crate::sources::usage::prometheus::PromMetric;

/// The config file: the same keys as the flags, dashes as underscores. Unknown keys are errors.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub role: Option<Role>,
    pub listen: Option<String>,
    pub node_name: Option<String>,
    pub cluster_name: Option<String>,
    pub kubeconfig: Option<PathBuf>,
    pub procfs: Option<PathBuf>,
    pub interval: Option<String>,
    pub timeout: Option<String>,
    pub expire_after_fetches: Option<u32>,
    pub tick_interval: Option<String>,
    pub shutdown_timeout: Option<String>,
    pub log_level: Option<String>,
    pub log_format: Option<LogFormat>,
    pub metrics_provider: Option<MetricsProvider>,
    pub metrics_provider_address: Option<String>,
    pub metrics_provider_token: Option<String>,
    pub metrics_provider_token_file: Option<PathBuf>,
    pub metrics_provider_ca_file: Option<PathBuf>,
    pub insecure_skip_verify: Option<bool>,
    pub enable_openshift_auth: Option<bool>,
    pub metrics_server_use_allocatable: Option<bool>,
    pub workload_namespaces: Option<String>,
    pub addon_keys: Option<String>,
    pub disable_probes: Option<String>,
    pub probe_interval: Option<String>,
    pub probe_timeout: Option<String>,
    pub probe_urls: Option<String>,
    pub probe_dns_names: Option<String>,
    pub kubelet_healthz_url: Option<String>,
    pub addon_endpoints: Option<String>,
    /// Config file only: per-probe settings by probe name.
    pub probes: Option<BTreeMap<String, ProbeFileSettings>>,
    pub prometheus_node_label: Option<String>,
    pub prometheus_fallback_resolution: Option<String>,
    pub signalfx_host_name_suffix: Option<String>,
    pub signalfx_cluster_name: Option<String>,
    pub watcher_legacy_scaling: Option<bool>,
    /// Config file only: the Prometheus metrics to query instead of load-watcher's 17.
    pub prometheus_metrics: Option<Vec<PrometheusMetricEntry>>,
    pub sinks: Option<Vec<String>>,
    pub sink_interval: Option<String>,
    pub sink_timeout: Option<String>,
    pub otlp_protocol: Option<String>,
    pub otlp_endpoint: Option<String>,
    pub otlp_headers: Option<String>,
    pub otlp_ca_file: Option<PathBuf>,
    pub otlp_client_cert: Option<PathBuf>,
    pub otlp_client_key: Option<PathBuf>,
    pub otlp_compression: Option<String>,
    pub otlp_max_points_per_request: Option<usize>,
    pub gcm_project: Option<String>,
    pub gcm_location: Option<String>,
    pub gcm_prefix: Option<String>,
    pub gcm_endpoint: Option<String>,
    pub gcm_anonymous: Option<bool>,
    pub gcm_node_series: Option<bool>,
    pub leader_elect: Option<bool>,
    pub leader_elect_lease_name: Option<String>,
    pub leader_elect_namespace: Option<String>,
    pub leader_elect_lease_duration: Option<String>,
    pub leader_elect_renew_deadline: Option<String>,
    pub leader_elect_retry_period: Option<String>,
    pub leader_elect_identity: Option<String>,
    pub tls_cert_file: Option<PathBuf>,
    pub tls_key_file: Option<PathBuf>,
    pub tls_reload_interval: Option<String>,
    pub client_ca_file: Option<PathBuf>,
    pub auth: Option<String>,
    pub auth_cache_ttl: Option<String>,
    pub cgroup_root: Option<PathBuf>,
    pub sysfs: Option<PathBuf>,
    pub task_namespaces: Option<String>,
    pub task_label_allowlist: Option<String>,
    pub max_response_bytes: Option<String>,
    pub kubelet_url: Option<String>,
    pub kubelet_token_file: Option<PathBuf>,
    pub kubelet_client_cert_file: Option<PathBuf>,
    pub kubelet_client_key_file: Option<PathBuf>,
    pub kubelet_ca_file: Option<PathBuf>,
    pub kubelet_insecure_skip_tls_verify: Option<bool>,
    pub pod_scope: Option<String>,
    pub task_perf_events: Option<String>,
    pub task_detail_every: Option<u32>,
    pub task_container_detail_every: Option<u32>,
    pub shard: Option<u32>,
    pub total_shards: Option<u32>,
    pub shard_from_statefulset: Option<bool>,
    pub pod_name: Option<String>,
    pub metric_allowlist: Option<String>,
    pub metric_denylist: Option<String>,
}

/// How the cluster role is sharded (see `crate::outputs::select`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ShardMode {
    /// One instance emits everything.
    #[default]
    Off,
    /// `--shard`/`--total-shards`.
    Static(crate::model::Shard),
    /// `--shard-from-statefulset`: `ordinal` from the pod name, the total from the
    /// StatefulSet `statefulset`'s spec.replicas, followed live.
    StatefulSet { statefulset: String, ordinal: u32 },
}

/// The node role's task source: where cgroups and sysfs are, which pods, which labels.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskSettings {
    pub cgroup_root: PathBuf,
    pub sysfs: PathBuf,
    /// Empty: every namespace.
    pub namespaces: Vec<String>,
    pub label_allowlist: Vec<String>,
    /// `--kubelet-url` and its auth: task pods from the kubelet instead of the pod watch.
    pub kubelet: Option<crate::sources::task::kubelet::KubeletSettings>,
    /// `--task-perf-events`.
    pub perf_events: crate::model::PerfMode,
    /// `--task-detail-every`: collections between two reads of a cgroup's detail files.
    pub detail_every: u64,
    /// `--task-container-detail-every`: the same for container cgroups (default twice
    /// `detail_every`, at most `MAX_DETAIL_EVERY`).
    pub container_detail_every: u64,
}

/// A push output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum SinkKind {
    Otlp,
    Gcm,
}

impl SinkKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SinkKind::Otlp => "otlp",
            SinkKind::Gcm => "gcm",
        }
    }
}

/// OTLP settings as given; unset ones fall back to the `OTEL_EXPORTER_OTLP_*` variables in
/// [`crate::outputs::otlp`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OtlpOptions {
    pub protocol: Option<String>,
    pub endpoint: Option<String>,
    pub headers: Option<String>,
    pub ca_file: Option<PathBuf>,
    pub client_cert: Option<PathBuf>,
    pub client_key: Option<PathBuf>,
    pub compression: Option<String>,
    pub max_points_per_request: Option<usize>,
}

/// Cloud Monitoring settings as given.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GcmSettings {
    /// `None`: the metadata server's project (an error at start when there is none).
    pub project: Option<String>,
    pub location: Option<String>,
    pub prefix: String,
    pub endpoint: Option<String>,
    pub anonymous: bool,
    /// Cluster role: node/* and addon/* for every node too.
    pub node_series: bool,
}

/// Lease-based leader election (cluster role).
#[derive(Debug, Clone, PartialEq)]
pub struct LeaderSettings {
    /// `None`: on in the cluster role when a sink runs.
    pub enabled: Option<bool>,
    pub lease_name: String,
    /// `None`: the Kubernetes client's namespace.
    pub namespace: Option<String>,
    pub identity: Option<String>,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

/// How the HTTP server is guarded.
#[derive(Debug, Clone, PartialEq)]
pub struct ServeConfig {
    /// `None`: plain HTTP.
    pub tls: Option<crate::serve::tls::TlsSettings>,
    /// `None`: `/metrics` and `/watcher*` are open (`--auth none`).
    pub auth: Option<crate::serve::auth::AuthSettings>,
}

pub const DEFAULT_TLS_RELOAD_INTERVAL: &str = "10s";
pub const DEFAULT_AUTH_CACHE_TTL: &str = "2m";

/// The push outputs and their shared schedule.
#[derive(Debug, Clone, PartialEq)]
pub struct SinksConfig {
    pub kinds: Vec<SinkKind>,
    pub interval: Duration,
    pub timeout: Duration,
    pub otlp: OtlpOptions,
    pub gcm: GcmSettings,
    pub leader: LeaderSettings,
}

/// One entry of `probes` in the config file.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ProbeFileSettings {
    pub enabled: Option<bool>,
    pub interval: Option<String>,
    pub timeout: Option<String>,
}

/// Every probe name, for validation.
pub const PROBE_NAMES: [&str; 8] = [
    "metrics_server",
    "cluster_dns",
    "apiserver_readyz",
    "kubelet_healthz",
    "addon_http",
    "gce_metadata",
    "http_get",
    "dns_lookup",
];

/// When each probe runs, and what the configurable ones check.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbesConfig {
    /// Probe name -> (interval, timeout); a disabled probe is absent.
    pub schedules: BTreeMap<String, (Duration, Duration)>,
    pub urls: Vec<String>,
    /// `None`: the role's default.
    pub dns_names: Option<Vec<String>>,
    pub kubelet_healthz_url: String,
    pub addon_endpoints: Vec<(String, String)>,
}

/// A namespace name: a DNS label (lower-case letters, digits, `-`; at most 63 characters).
fn is_namespace_name(n: &str) -> bool {
    n.len() <= 63
        && n.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

fn csv(s: &str) -> Vec<String> {
    s.split(',')
        .map(|x| x.trim().to_string())
        .filter(|x| !x.is_empty())
        .collect()
}

/// `; did you mean `x`?` or nothing.
fn hint<'a>(word: &str, known: impl IntoIterator<Item = &'a str>) -> String {
    did_you_mean(word, known)
        .map(|k| format!("; did you mean `{k}`?"))
        .unwrap_or_default()
}

/// Adds a "did you mean" to serde's `unknown field `x`, expected one of `a`, `b`` (and
/// `unknown variant`) messages, from the names serde lists.
fn suggest_in_serde_message(msg: String) -> String {
    let Some((_, rest)) = msg
        .split_once("unknown field `")
        .or_else(|| msg.split_once("unknown variant `"))
    else {
        return msg;
    };
    let Some((word, expected)) = rest.split_once('`') else {
        return msg;
    };
    let known: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
    match did_you_mean(word, known) {
        Some(k) => format!("{msg} (did you mean `{k}`?)"),
        None => msg,
    }
}

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
    pub watcher_legacy_scaling: bool,
    /// `None`: load-watcher's 17 metrics.
    pub prometheus_metrics: Option<Vec<PromMetric>>,
}

impl FileConfig {
    /// Reads and parses a config file (at most [`MAX_CONFIG_FILE_BYTES`]).
    pub fn read(path: &Path) -> Result<Self> {
        use std::io::Read;
        let io_err = |e: std::io::Error| Error::ConfigFile {
            path: path.to_path_buf(),
            reason: e.to_string(),
        };
        let mut text = String::new();
        std::fs::File::open(path)
            .map_err(io_err)?
            .take(MAX_CONFIG_FILE_BYTES + 1)
            .read_to_string(&mut text)
            .map_err(io_err)?;
        if text.len() as u64 > MAX_CONFIG_FILE_BYTES {
            return Err(Error::ConfigFile {
                path: path.to_path_buf(),
                reason: format!("larger than {MAX_CONFIG_FILE_BYTES} bytes"),
            });
        }
        Self::parse(&text).map_err(|reason| Error::ConfigFile {
            path: path.to_path_buf(),
            reason,
        })
    }

    /// Parses config-file text. An empty file is an empty config.
    pub fn parse(text: &str) -> std::result::Result<Self, String> {
        if text.trim().is_empty() {
            return Ok(Self::default());
        }
        // The YAML parser takes quadratic time in flow nesting (100,000 `[` took a minute):
        // refuse what no config needs before it starts.
        let mut depth = 0usize;
        for b in text.bytes() {
            match b {
                b'[' | b'{' => depth += 1,
                b']' | b'}' => depth = depth.saturating_sub(1),
                _ => {}
            }
            if depth > MAX_CONFIG_NESTING {
                return Err(format!(
                    "brackets nested deeper than {MAX_CONFIG_NESTING} levels"
                ));
            }
        }
        serde_yaml_ng::from_str(text).map_err(|e| suggest_in_serde_message(e.to_string()))
    }
}

/// How the cluster role is sharded, from `--shard`, `--total-shards`,
/// `--shard-from-statefulset` and `--pod-name`.
fn shard_mode(
    shard: Option<u32>,
    total: Option<u32>,
    from_sts: bool,
    pod_name: Option<String>,
) -> Result<ShardMode> {
    let mode = match (shard, total, from_sts) {
        (Some(_), _, true) | (_, Some(_), true) => {
            return Err(invalid(
                "--shard-from-statefulset",
                "true",
                "exclusive with --shard and --total-shards",
            ));
        }
        (None, None, false) => ShardMode::Off,
        (Some(s), None, false) => {
            return Err(invalid("--shard", &s.to_string(), "needs --total-shards"));
        }
        (index, Some(total), false) => {
            let index = index.unwrap_or(0);
            if total == 0 {
                return Err(invalid("--total-shards", "0", "must be at least 1"));
            }
            if index >= total {
                return Err(invalid(
                    "--shard",
                    &index.to_string(),
                    format!("must be below --total-shards ({total}); shards count from 0"),
                ));
            }
            if total == 1 {
                ShardMode::Off
            } else {
                ShardMode::Static(crate::model::Shard { index, total })
            }
        }
        (None, None, true) => {
            let name = pod_name.unwrap_or_default();
            let parsed = name
                .rsplit_once('-')
                .filter(|(sts, _)| !sts.is_empty())
                .and_then(|(sts, n)| {
                    let all_digits = !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit());
                    all_digits
                        .then(|| n.parse::<u32>().ok())
                        .flatten()
                        .map(|n| (sts.to_string(), n))
                });
            let Some((statefulset, ordinal)) = parsed else {
                return Err(invalid(
                    "--pod-name",
                    &name,
                    "--shard-from-statefulset needs the pod name `<statefulset>-<ordinal>` (set POD_NAME from the downward API metadata.name)",
                ));
            };
            ShardMode::StatefulSet {
                statefulset,
                ordinal,
            }
        }
    };
    Ok(mode)
}

/// A config file larger than this is an error (a real one is a few kilobytes).
pub const MAX_CONFIG_FILE_BYTES: u64 = 1 << 20;
/// Flow collections (`[`, `{`) nested deeper than this are an error.
pub const MAX_CONFIG_NESTING: usize = 64;

/// Everything the program runs with.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// `None`: detect (see [`crate::k8s::role::detect`]).
    pub role: Option<Role>,
    pub listen: SocketAddr,
    pub node_name: Option<String>,
    /// `None`: from the GCE metadata server, else `unknown`.
    pub cluster_name: Option<String>,
    pub kubeconfig: Option<PathBuf>,
    pub procfs: PathBuf,
    /// `None`: 15 s for the host source, 60 s for remote backends (load-watcher's minute).
    pub interval: Option<Duration>,
    pub timeout: Duration,
    /// Successful fetches without a host before it leaves the hub (0: never).
    pub expire_after_fetches: u32,
    pub tick_interval: Duration,
    pub shutdown_timeout: Duration,
    pub log_level: String,
    pub log_format: LogFormat,
    pub usage: UsageConfig,
    /// Namespaces whose DaemonSets and Deployments are addon candidates.
    pub workload_namespaces: Vec<String>,
    /// Addon markers, GKE's first.
    pub addon_keys: Vec<AddonKeys>,
    pub probes: ProbesConfig,
    pub sinks: SinksConfig,
    pub serve: ServeConfig,
    pub task: TaskSettings,
    /// Cap on every answer read from outside (see [`crate::shared::limit`]).
    pub max_response_bytes: usize,
    /// Cluster role: which pods the pod watcher follows.
    pub pod_scope: PodScope,
    pub shard: ShardMode,
    /// Families `--metric-allowlist`/`--metric-denylist` leave out.
    pub excluded_families: std::collections::BTreeSet<String>,
}

/// The global schedule, as [`Config::resolve`] reads it.
struct GlobalSchedule {
    interval: Option<Duration>,
    timeout: Duration,
    expire_after_fetches: u32,
    tick_interval: Duration,
    shutdown_timeout: Duration,
}

pub const DEFAULT_LISTEN: &str = "0.0.0.0:2020";
/// Default fetch interval of the host source.
pub const DEFAULT_HOST_INTERVAL: Duration = Duration::from_secs(15);
/// Default fetch interval of the metrics-server backend (its own resolution).
pub const DEFAULT_METRICS_SERVER_INTERVAL: Duration = Duration::from_secs(15);
/// Default fetch interval of Prometheus and SignalFx (load-watcher refreshes every minute).
pub const DEFAULT_REMOTE_INTERVAL: Duration = Duration::from_secs(60);
pub const DEFAULT_TIMEOUT: &str = "10s";
pub const DEFAULT_TICK_INTERVAL: &str = "10s";
pub const DEFAULT_SHUTDOWN_TIMEOUT: &str = "10s";

fn invalid(option: &'static str, value: &str, reason: impl Into<String>) -> Error {
    Error::Config {
        option,
        value: value.to_string(),
        reason: reason.into(),
    }
}

/// A value that, when given, must not be blank; trimmed.
fn non_empty(option: &'static str, v: Option<String>) -> Result<Option<String>> {
    match v {
        Some(s) if s.trim().is_empty() => Err(invalid(option, &s, "must not be empty")),
        other => Ok(other.map(|s| s.trim().to_string())),
    }
}

/// Parses a duration like `15s`, `1m30s`, `500ms`, bounded to `[min, max]`.
/// `--max-response-bytes`: bytes or a quantity (`32Mi`), 64 KiB to 4 GiB.
fn max_response_bytes(value: Option<String>) -> Result<usize> {
    let Some(v) = value else {
        return Ok(crate::shared::limit::DEFAULT_MAX_RESPONSE_BYTES);
    };
    const OPT: &str = "--max-response-bytes";
    let n = crate::shared::quantity::parse_quantity(v.trim()).map_err(|e| {
        invalid(
            OPT,
            &v,
            format!("{e} (expected bytes, e.g. 33554432 or 32Mi)"),
        )
    })?;
    let (min, max) = (64.0 * 1024.0, 4.0 * 1024.0 * 1024.0 * 1024.0);
    if !(min..=max).contains(&n) || n.fract() != 0.0 {
        return Err(invalid(
            OPT,
            &v,
            "must be a whole number of bytes from 64Ki to 4Gi",
        ));
    }
    usize::try_from(n as u64).map_err(|_| invalid(OPT, &v, "too large for this platform"))
}

fn duration(option: &'static str, value: &str, min: Duration, max: Duration) -> Result<Duration> {
    let d = humantime::parse_duration(value.trim())
        .map_err(|e| invalid(option, value, format!("{e} (expected e.g. 15s, 1m, 500ms)")))?;
    if d < min || d > max {
        return Err(invalid(
            option,
            value,
            format!(
                "must be between {} and {}",
                humantime::format_duration(min),
                humantime::format_duration(max)
            ),
        ));
    }
    Ok(d)
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

impl Config {
    /// Reads the file named by `--config` (if any) and resolves.
    pub fn load(cli: Cli) -> Result<Self> {
        let file = match &cli.config {
            Some(path) => FileConfig::read(path)?,
            None => FileConfig::default(),
        };
        Self::resolve(cli, file)
    }

    /// Merges flags (already holding their environment fallbacks) over the file, and validates.
    pub fn resolve(mut cli: Cli, mut file: FileConfig) -> Result<Self> {
        let usage = Self::resolve_usage(&mut cli, &mut file)?;
        let serve = Self::resolve_serve(&mut cli, &mut file)?;
        let sinks = Self::resolve_sinks(&mut cli, &mut file)?;
        let probes = Self::resolve_probes(&mut cli, &mut file)?;
        let task = Self::resolve_task(&mut cli, &mut file)?;
        let (shard, excluded_families) = Self::resolve_select(&mut cli, &mut file)?;
        let (workload_namespaces, addon_keys) = Self::resolve_workloads(&mut cli, &mut file)?;
        let (listen, node_name, cluster_name) = Self::resolve_instance(&mut cli, &mut file)?;

        let schedule = Self::resolve_schedule(&mut cli, &mut file)?;

        let log_level = cli
            .log_level
            .or(file.log_level)
            .unwrap_or_else(|| "info".into());
        crate::shared::telemetry::parse_filter(&log_level)?;

        let max_response_bytes = max_response_bytes(
            cli.max_response_bytes
                .take()
                .or(file.max_response_bytes.take()),
        )?;

        let pod_scope_s = cli.pod_scope.take().or(file.pod_scope.take());
        let pod_scope = match pod_scope_s.as_deref() {
            None => PodScope::All,
            Some(v) => PodScope::parse(v)
                .ok_or_else(|| invalid("--pod-scope", v, "expected all, workloads or none"))?,
        };

        Ok(Config {
            role: cli.role.or(file.role),
            listen,
            node_name,
            cluster_name,
            kubeconfig: cli.kubeconfig.or(file.kubeconfig).or(cli.kube_config),
            procfs: cli
                .procfs
                .or(file.procfs)
                .unwrap_or_else(|| PathBuf::from("/proc")),
            interval: schedule.interval,
            timeout: schedule.timeout,
            expire_after_fetches: schedule.expire_after_fetches,
            tick_interval: schedule.tick_interval,
            shutdown_timeout: schedule.shutdown_timeout,
            log_level,
            log_format: cli.log_format.or(file.log_format).unwrap_or_default(),
            usage,
            workload_namespaces,
            addon_keys,
            probes,
            sinks,
            serve,
            task,
            max_response_bytes,
            pod_scope,
            shard,
            excluded_families,
        })
    }

    /// `--workload-namespaces` and `--addon-keys`.
    fn resolve_workloads(
        cli: &mut Cli,
        file: &mut FileConfig,
    ) -> Result<(Vec<String>, Vec<AddonKeys>)> {
        let ns_s = cli
            .workload_namespaces
            .take()
            .or(file.workload_namespaces.take())
            .unwrap_or_else(|| "kube-system".into());
        let workload_namespaces = csv(&ns_s);
        if workload_namespaces.is_empty()
            || !workload_namespaces.iter().all(|n| is_namespace_name(n))
        {
            return Err(invalid(
                "--workload-namespaces",
                &ns_s,
                "expected comma-separated namespace names",
            ));
        }
        let mut addon_keys = DeriveConfig::default().addon_keys;
        if let Some(k) = cli.addon_keys.take().or(file.addon_keys.take()) {
            for pair in k.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                let (name, version) = pair
                    .split_once('=')
                    .filter(|(n, v)| !n.is_empty() && !v.is_empty())
                    .ok_or_else(|| {
                        invalid("--addon-keys", &k, "expected NAME_KEY=VERSION_KEY pairs")
                    })?;
                addon_keys.push(AddonKeys {
                    name: name.trim().into(),
                    version: version.trim().into(),
                });
            }
        }
        Ok((workload_namespaces, addon_keys))
    }

    /// `--listen`, `--node-name` and `--cluster-name`.
    fn resolve_instance(
        cli: &mut Cli,
        file: &mut FileConfig,
    ) -> Result<(SocketAddr, Option<String>, Option<String>)> {
        let listen_s = cli
            .listen
            .take()
            .or(file.listen.take())
            .unwrap_or_else(|| DEFAULT_LISTEN.into());
        let listen = listen_s.trim().parse::<SocketAddr>().map_err(|e| {
            invalid(
                "--listen",
                &listen_s,
                format!("{e} (expected IP:PORT, e.g. 0.0.0.0:2020)"),
            )
        })?;

        let node_name = cli.node_name.take().or(file.node_name.take());
        if let Some(n) = &node_name
            && (n.trim().is_empty() || n.len() > 253)
        {
            return Err(invalid("--node-name", n, "must be 1 to 253 characters"));
        }
        let cluster_name = cli.cluster_name.take().or(file.cluster_name.take());
        if let Some(c) = &cluster_name
            && c.trim().is_empty()
        {
            return Err(invalid("--cluster-name", c, "must not be empty"));
        }
        Ok((listen, node_name, cluster_name))
    }

    /// `--interval`, `--timeout`, `--expire-after-fetches`, `--tick-interval` and
    /// `--shutdown-timeout`.
    fn resolve_schedule(cli: &mut Cli, file: &mut FileConfig) -> Result<GlobalSchedule> {
        let secs = Duration::from_secs;
        let interval_s = cli.interval.take().or(file.interval.take());
        let interval = interval_s
            .as_deref()
            .map(|s| duration("--interval", s, secs(1), secs(3600)))
            .transpose()?;
        let timeout_s = cli
            .timeout
            .take()
            .or(file.timeout.take())
            .unwrap_or_else(|| DEFAULT_TIMEOUT.into());
        let timeout = duration(
            "--timeout",
            &timeout_s,
            Duration::from_millis(100),
            secs(3600),
        )?;
        if let (Some(i), Some(i_s)) = (interval, &interval_s)
            && timeout > i
        {
            return Err(invalid(
                "--timeout",
                &timeout_s,
                format!("must not exceed --interval ({i_s})"),
            ));
        }
        let expire_after_fetches = match cli.expire_after_fetches.take() {
            Some(s) => s.trim().parse::<u32>().map_err(|_| {
                invalid(
                    "--expire-after-fetches",
                    &s,
                    "must be a whole number of fetches (0 keeps hosts forever)",
                )
            })?,
            None => file
                .expire_after_fetches
                .unwrap_or(crate::sources::usage::DEFAULT_EXPIRE_AFTER),
        };
        let tick_s = cli
            .tick_interval
            .take()
            .or(file.tick_interval.take())
            .unwrap_or_else(|| DEFAULT_TICK_INTERVAL.into());
        let tick_interval = duration("--tick-interval", &tick_s, secs(1), secs(600))?;
        let shutdown_s = cli
            .shutdown_timeout
            .take()
            .or(file.shutdown_timeout.take())
            .unwrap_or_else(|| DEFAULT_SHUTDOWN_TIMEOUT.into());
        let shutdown_timeout =
            duration("--shutdown-timeout", &shutdown_s, Duration::ZERO, secs(300))?;
        Ok(GlobalSchedule {
            interval,
            timeout,
            expire_after_fetches,
            tick_interval,
            shutdown_timeout,
        })
    }

    /// `--shard`, `--total-shards`, `--shard-from-statefulset`, `--metric-allowlist`,
    /// `--metric-denylist`.
    fn resolve_select(
        cli: &mut Cli,
        file: &mut FileConfig,
    ) -> Result<(ShardMode, std::collections::BTreeSet<String>)> {
        let number = |option: &'static str, cli: Option<String>, file: Option<u32>| match cli {
            Some(s) => s
                .trim()
                .parse::<u32>()
                .map(Some)
                .map_err(|_| invalid(option, &s, "must be a whole number")),
            None => Ok(file),
        };
        let shard = number("--shard", cli.shard.take(), file.shard.take())?;
        let total = number(
            "--total-shards",
            cli.total_shards.take(),
            file.total_shards.take(),
        )?;
        let from_sts = cli
            .shard_from_statefulset
            .take()
            .or(file.shard_from_statefulset.take())
            .unwrap_or(false);
        let pod_name = cli.pod_name.take().or(file.pod_name.take());
        let mode = shard_mode(shard, total, from_sts, pod_name)?;
        let allow = cli.metric_allowlist.take().or(file.metric_allowlist.take());
        let deny = cli.metric_denylist.take().or(file.metric_denylist.take());
        let excluded = crate::outputs::select::excluded_families(allow.as_deref(), deny.as_deref())
            .map_err(|reason| {
                let (option, value) = match (&allow, &deny) {
                    (Some(a), None) => ("--metric-allowlist", a.as_str()),
                    (None, Some(d)) => ("--metric-denylist", d.as_str()),
                    _ => ("--metric-allowlist", allow.as_deref().unwrap_or_default()),
                };
                invalid(option, value, reason)
            })?;
        Ok((mode, excluded))
    }

    fn resolve_task(cli: &mut Cli, file: &mut FileConfig) -> Result<TaskSettings> {
        let dir = |option: &'static str, v: Option<PathBuf>, default: &str| -> Result<PathBuf> {
            let p = v.unwrap_or_else(|| PathBuf::from(default));
            if p.as_os_str().is_empty() {
                return Err(invalid(option, "", "must not be empty"));
            }
            Ok(p)
        };
        let cgroup_root = dir(
            "--cgroup-root",
            cli.cgroup_root.take().or(file.cgroup_root.take()),
            "/sys/fs/cgroup",
        )?;
        let sysfs = dir("--sysfs", cli.sysfs.take().or(file.sysfs.take()), "/sys")?;
        let ns_s = cli
            .task_namespaces
            .take()
            .or(file.task_namespaces.take())
            .unwrap_or_default();
        let namespaces = csv(&ns_s);
        if !namespaces.iter().all(|n| is_namespace_name(n)) {
            return Err(invalid(
                "--task-namespaces",
                &ns_s,
                "expected comma-separated namespace names",
            ));
        }
        let keys_s = cli
            .task_label_allowlist
            .take()
            .or(file.task_label_allowlist.take())
            .unwrap_or_default();
        let label_allowlist = csv(&keys_s);
        // A Kubernetes label key: optional DNS prefix and `/`, then a name of at most 63
        // characters of [A-Za-z0-9-_.].
        let valid_key = |k: &String| {
            let name = k.rsplit_once('/').map_or(k.as_str(), |(_, n)| n);
            !name.is_empty()
                && name.len() <= 63
                && k.len() <= 317
                && k.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
        };
        if let Some(bad) = label_allowlist.iter().find(|k| !valid_key(k)) {
            return Err(invalid(
                "--task-label-allowlist",
                bad,
                "not a Kubernetes label key",
            ));
        }
        let kubelet = Self::resolve_kubelet(cli, file)?;
        let perf_s = cli.task_perf_events.take().or(file.task_perf_events.take());
        let perf_events = match perf_s.as_deref() {
            None => crate::model::PerfMode::Off,
            Some(v) => crate::model::PerfMode::parse(v).ok_or_else(|| {
                invalid(
                    "--task-perf-events",
                    v,
                    "expected off, auto, hardware or software",
                )
            })?,
        };
        let (detail_every, container_detail_every) = Self::resolve_detail_every(cli, file)?;
        Ok(TaskSettings {
            cgroup_root,
            sysfs,
            namespaces,
            label_allowlist,
            kubelet,
            perf_events,
            detail_every,
            container_detail_every,
        })
    }

    /// `--task-detail-every` and `--task-container-detail-every`.
    fn resolve_detail_every(cli: &mut Cli, file: &mut FileConfig) -> Result<(u64, u64)> {
        let max = crate::sources::task::cgroup::MAX_DETAIL_EVERY;
        let detail_every = match cli.task_detail_every.take() {
            Some(s) => s
                .trim()
                .parse::<u64>()
                .map_err(|_| invalid("--task-detail-every", &s, format!("expected 1..={max}")))?,
            None => file.task_detail_every.take().map_or(
                crate::sources::task::cgroup::DEFAULT_DETAIL_EVERY,
                u64::from,
            ),
        };
        if !(1..=max).contains(&detail_every) {
            return Err(invalid(
                "--task-detail-every",
                &detail_every.to_string(),
                format!("expected 1..={max} collections"),
            ));
        }
        let container_detail_every = match cli.task_container_detail_every.take() {
            Some(s) => s.trim().parse::<u64>().map_err(|_| {
                invalid(
                    "--task-container-detail-every",
                    &s,
                    format!("expected 1..={max}"),
                )
            })?,
            None => file
                .task_container_detail_every
                .take()
                .map_or((2 * detail_every).min(max), u64::from),
        };
        if !(1..=max).contains(&container_detail_every) {
            return Err(invalid(
                "--task-container-detail-every",
                &container_detail_every.to_string(),
                format!("expected 1..={max} collections"),
            ));
        }
        Ok((detail_every, container_detail_every))
    }

    fn resolve_kubelet(
        cli: &mut Cli,
        file: &mut FileConfig,
    ) -> Result<Option<crate::sources::task::kubelet::KubeletSettings>> {
        use crate::sources::task::kubelet::{DEFAULT_CA_FILE, KubeletSettings};
        let path = |option: &'static str, p: Option<PathBuf>| -> Result<Option<PathBuf>> {
            match p {
                Some(p) if p.as_os_str().is_empty() => Err(invalid(option, "", "empty path")),
                p => Ok(p),
            }
        };
        let url = cli.kubelet_url.take().or(file.kubelet_url.take());
        let token = path(
            "--kubelet-token-file",
            cli.kubelet_token_file
                .take()
                .or(file.kubelet_token_file.take()),
        )?;
        let cert = path(
            "--kubelet-client-cert-file",
            cli.kubelet_client_cert_file
                .take()
                .or(file.kubelet_client_cert_file.take()),
        )?;
        let key = path(
            "--kubelet-client-key-file",
            cli.kubelet_client_key_file
                .take()
                .or(file.kubelet_client_key_file.take()),
        )?;
        let ca = path(
            "--kubelet-ca-file",
            cli.kubelet_ca_file.take().or(file.kubelet_ca_file.take()),
        )?;
        let insecure = cli
            .kubelet_insecure_skip_tls_verify
            .or(file.kubelet_insecure_skip_tls_verify)
            .unwrap_or(false);
        let Some(url) = url else {
            let stray = [
                ("--kubelet-token-file", token.is_some()),
                ("--kubelet-client-cert-file", cert.is_some()),
                ("--kubelet-client-key-file", key.is_some()),
                ("--kubelet-ca-file", ca.is_some()),
                ("--kubelet-insecure-skip-tls-verify", insecure),
            ];
            if let Some((option, _)) = stray.iter().find(|(_, set)| *set) {
                return Err(invalid(option, "", "needs --kubelet-url"));
            }
            return Ok(None);
        };
        let url = Self::kubelet_base_url(&url)?;
        let auth = Self::resolve_kubelet_auth(token, cert, key)?;
        if insecure && ca.is_some() {
            return Err(invalid(
                "--kubelet-insecure-skip-tls-verify",
                "true",
                "conflicts with --kubelet-ca-file (verify against the CA, or do not verify)",
            ));
        }
        let ca_file = (!insecure).then(|| ca.unwrap_or_else(|| PathBuf::from(DEFAULT_CA_FILE)));
        Ok(Some(KubeletSettings {
            url,
            auth,
            ca_file,
            insecure_skip_verify: insecure,
        }))
    }

    /// How the kubelet is authenticated: a client certificate, or a token file (the service
    /// account's by default).
    /// `--kubelet-url`, checked: an http:// or https:// base URL.
    fn kubelet_base_url(url: &str) -> Result<String> {
        let url = url.trim().to_string();
        let parsed = reqwest::Url::parse(&url).map_err(|e| {
            invalid(
                "--kubelet-url",
                &url,
                format!("not a URL ({e}); expected e.g. https://$(NODE_IP):10250"),
            )
        })?;
        if !matches!(parsed.scheme(), "https" | "http")
            || parsed.host_str().is_none_or(str::is_empty)
            || parsed.query().is_some()
            || parsed.fragment().is_some()
        {
            return Err(invalid(
                "--kubelet-url",
                &url,
                "expected an http:// or https:// base URL without query, e.g. https://$(NODE_IP):10250",
            ));
        }
        Ok(url)
    }

    fn resolve_kubelet_auth(
        token: Option<PathBuf>,
        cert: Option<PathBuf>,
        key: Option<PathBuf>,
    ) -> Result<crate::sources::task::kubelet::KubeletAuth> {
        use crate::sources::task::kubelet::{DEFAULT_TOKEN_FILE, KubeletAuth};
        let auth = match (cert, key) {
            (Some(cert), Some(key)) => {
                if token.is_some() {
                    return Err(invalid(
                        "--kubelet-token-file",
                        "",
                        "give a token file or a client certificate, not both",
                    ));
                }
                KubeletAuth::ClientCert { cert, key }
            }
            (None, None) => {
                KubeletAuth::TokenFile(token.unwrap_or_else(|| PathBuf::from(DEFAULT_TOKEN_FILE)))
            }
            (Some(_), None) => {
                return Err(invalid(
                    "--kubelet-client-key-file",
                    "",
                    "--kubelet-client-cert-file needs --kubelet-client-key-file (both or neither)",
                ));
            }
            (None, Some(_)) => {
                return Err(invalid(
                    "--kubelet-client-cert-file",
                    "",
                    "--kubelet-client-key-file needs --kubelet-client-cert-file (both or neither)",
                ));
            }
        };
        Ok(auth)
    }

    /// `--tls-cert-file`, `--tls-key-file`, `--tls-reload-interval` and `--client-ca-file`.
    fn resolve_tls(
        cli: &mut Cli,
        file: &mut FileConfig,
    ) -> Result<(Option<crate::serve::tls::TlsSettings>, Option<PathBuf>)> {
        let secs = Duration::from_secs;
        let path_opt = |p: Option<PathBuf>, option: &'static str| -> Result<Option<PathBuf>> {
            match p {
                Some(p) if p.as_os_str().is_empty() => Err(invalid(option, "", "empty path")),
                p => Ok(p),
            }
        };
        let cert = path_opt(
            cli.tls_cert_file.take().or(file.tls_cert_file.take()),
            "--tls-cert-file",
        )?;
        let key = path_opt(
            cli.tls_key_file.take().or(file.tls_key_file.take()),
            "--tls-key-file",
        )?;
        let client_ca = path_opt(
            cli.client_ca_file.take().or(file.client_ca_file.take()),
            "--client-ca-file",
        )?;
        let reload_s = cli
            .tls_reload_interval
            .take()
            .or(file.tls_reload_interval.take())
            .unwrap_or_else(|| DEFAULT_TLS_RELOAD_INTERVAL.into());
        let reload_interval = duration("--tls-reload-interval", &reload_s, secs(1), secs(3600))?;
        let tls = match (cert, key) {
            (None, None) => None,
            (Some(c), None) => {
                return Err(invalid(
                    "--tls-cert-file",
                    &c.display().to_string(),
                    "needs --tls-key-file too (both or neither)",
                ));
            }
            (None, Some(k)) => {
                return Err(invalid(
                    "--tls-key-file",
                    &k.display().to_string(),
                    "needs --tls-cert-file too (both or neither)",
                ));
            }
            (Some(cert_file), Some(key_file)) => Some(crate::serve::tls::TlsSettings {
                cert_file,
                key_file,
                client_ca_file: client_ca.clone(),
                reload_interval,
            }),
        };
        Ok((tls, client_ca))
    }

    fn resolve_serve(cli: &mut Cli, file: &mut FileConfig) -> Result<ServeConfig> {
        let secs = Duration::from_secs;
        let (tls, client_ca) = Self::resolve_tls(cli, file)?;
        let auth_s = cli
            .auth
            .take()
            .or(file.auth.take())
            .unwrap_or_else(|| "none".into());
        let kubernetes = match auth_s.trim().to_ascii_lowercase().as_str() {
            "none" | "" => false,
            "kubernetes" => true,
            _ => {
                return Err(invalid("--auth", &auth_s, "expected none or kubernetes"));
            }
        };
        let ttl_s = cli
            .auth_cache_ttl
            .take()
            .or(file.auth_cache_ttl.take())
            .unwrap_or_else(|| DEFAULT_AUTH_CACHE_TTL.into());
        let cache_ttl = duration("--auth-cache-ttl", &ttl_s, Duration::ZERO, secs(3600))?;
        if let Some(ca) = &client_ca {
            let ca = ca.display().to_string();
            if tls.is_none() {
                return Err(invalid(
                    "--client-ca-file",
                    &ca,
                    "client certificates need TLS: set --tls-cert-file and --tls-key-file",
                ));
            }
            if !kubernetes {
                return Err(invalid(
                    "--client-ca-file",
                    &ca,
                    "a client certificate names a user to authorize: set --auth kubernetes",
                ));
            }
        }
        let auth = kubernetes.then_some(crate::serve::auth::AuthSettings {
            cache_ttl,
            cache_capacity: crate::serve::auth::CACHE_CAPACITY,
            review_timeout: crate::serve::auth::REVIEW_TIMEOUT,
        });
        Ok(ServeConfig { tls, auth })
    }

    fn resolve_sinks(cli: &mut Cli, file: &mut FileConfig) -> Result<SinksConfig> {
        let kinds = Self::resolve_sink_kinds(cli, file)?;
        let (interval, timeout) = Self::resolve_sink_schedule(cli, file)?;
        let otlp = Self::resolve_otlp(cli, file)?;
        let gcm = Self::resolve_gcm(cli, file)?;
        let leader = Self::resolve_leader(cli, file)?;
        Ok(SinksConfig {
            kinds,
            interval,
            timeout,
            otlp,
            gcm,
            leader,
        })
    }

    /// `--sink`: the push outputs, each once, in the order given.
    fn resolve_sink_kinds(cli: &mut Cli, file: &mut FileConfig) -> Result<Vec<SinkKind>> {
        let mut kinds = Vec::new();
        for name in cli
            .sinks
            .take()
            .or(file.sinks.take())
            .unwrap_or_default()
            .iter()
            .map(|s| s.trim())
            .filter(|s| !s.is_empty())
        {
            let kind = match name.to_ascii_lowercase().as_str() {
                "otlp" => SinkKind::Otlp,
                "gcm" | "cloud-monitoring" | "stackdriver" => SinkKind::Gcm,
                _ => {
                    return Err(invalid(
                        "--sink",
                        name,
                        format!(
                            "unknown sink (known: otlp, gcm){}",
                            hint(name, ["otlp", "gcm", "cloud-monitoring", "stackdriver"])
                        ),
                    ));
                }
            };
            if !kinds.contains(&kind) {
                kinds.push(kind);
            }
        }
        Ok(kinds)
    }

    /// `--sink-interval` and `--sink-timeout`.
    fn resolve_sink_schedule(cli: &mut Cli, file: &mut FileConfig) -> Result<(Duration, Duration)> {
        let secs = Duration::from_secs;
        let interval_s = cli
            .sink_interval
            .take()
            .or(file.sink_interval.take())
            .unwrap_or_else(|| "60s".into());
        let interval = duration("--sink-interval", &interval_s, secs(1), secs(3600))?;
        let timeout = match cli.sink_timeout.take().or(file.sink_timeout.take()) {
            Some(t) => {
                let d = duration("--sink-timeout", &t, Duration::from_millis(100), secs(3600))?;
                if d > interval {
                    return Err(invalid(
                        "--sink-timeout",
                        &t,
                        format!("must not exceed --sink-interval ({interval_s})"),
                    ));
                }
                d
            }
            None => interval.min(secs(30)),
        };
        Ok((interval, timeout))
    }

    /// `--otlp-*`; unset ones fall back to the `OTEL_EXPORTER_OTLP_*` variables later.
    fn resolve_otlp(cli: &mut Cli, file: &mut FileConfig) -> Result<OtlpOptions> {
        let otlp = OtlpOptions {
            protocol: cli.otlp_protocol.take().or(file.otlp_protocol.take()),
            endpoint: cli.otlp_endpoint.take().or(file.otlp_endpoint.take()),
            headers: cli.otlp_headers.take().or(file.otlp_headers.take()),
            ca_file: cli.otlp_ca_file.take().or(file.otlp_ca_file.take()),
            client_cert: cli.otlp_client_cert.take().or(file.otlp_client_cert.take()),
            client_key: cli.otlp_client_key.take().or(file.otlp_client_key.take()),
            compression: cli.otlp_compression.take().or(file.otlp_compression.take()),
            max_points_per_request: cli
                .otlp_max_points_per_request
                .take()
                .or(file.otlp_max_points_per_request.take()),
        };
        for (option, path) in [
            ("--otlp-ca-file", &otlp.ca_file),
            ("--otlp-client-cert", &otlp.client_cert),
            ("--otlp-client-key", &otlp.client_key),
        ] {
            if let Some(p) = path
                && !p.is_file()
            {
                return Err(invalid(option, &p.display().to_string(), "no such file"));
            }
        }
        if otlp.client_cert.is_some() != otlp.client_key.is_some() {
            return Err(invalid(
                "--otlp-client-cert",
                &format!("{:?}", otlp.client_cert),
                "a client certificate needs --otlp-client-key, and the other way round",
            ));
        }
        Ok(otlp)
    }

    /// `--gcm-*`.
    fn resolve_gcm(cli: &mut Cli, file: &mut FileConfig) -> Result<GcmSettings> {
        let prefix = cli
            .gcm_prefix
            .take()
            .or(file.gcm_prefix.take())
            .unwrap_or_else(|| "kube-prober".into());
        let prefix_ok = prefix.split('/').all(|seg| {
            !seg.is_empty()
                && seg
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        });
        if !prefix_ok {
            return Err(invalid(
                "--gcm-prefix",
                &prefix,
                "expected path segments of letters, digits, '-', '_' or '.', e.g. kube-prober",
            ));
        }
        let gcm = GcmSettings {
            project: non_empty(
                "--gcm-project",
                cli.gcm_project.take().or(file.gcm_project.take()),
            )?,
            location: non_empty(
                "--gcm-location",
                cli.gcm_location.take().or(file.gcm_location.take()),
            )?,
            prefix,
            endpoint: cli.gcm_endpoint.take().or(file.gcm_endpoint.take()),
            anonymous: cli.gcm_anonymous.or(file.gcm_anonymous).unwrap_or(false),
            node_series: cli.gcm_node_series.or(file.gcm_node_series).unwrap_or(true),
        };
        if let Some(e) = &gcm.endpoint
            && !(e.starts_with("http://") || e.starts_with("https://"))
        {
            return Err(invalid(
                "--gcm-endpoint",
                e,
                "must be an http:// or https:// URL",
            ));
        }
        Ok(gcm)
    }

    /// `--leader-elect*`.
    fn resolve_leader(cli: &mut Cli, file: &mut FileConfig) -> Result<LeaderSettings> {
        let secs = Duration::from_secs;
        let dur = |option: &'static str, v: Option<String>, default: &str| {
            let v = v.unwrap_or_else(|| default.to_string());
            duration(option, &v, Duration::from_millis(100), secs(600))
        };
        let leader = LeaderSettings {
            enabled: cli.leader_elect.or(file.leader_elect),
            lease_name: cli
                .leader_elect_lease_name
                .take()
                .or(file.leader_elect_lease_name.take())
                .unwrap_or_else(|| "kube-prober".into()),
            namespace: non_empty(
                "--leader-elect-namespace",
                cli.leader_elect_namespace
                    .take()
                    .or(file.leader_elect_namespace.take()),
            )?,
            identity: non_empty(
                "--leader-elect-identity",
                cli.leader_elect_identity
                    .take()
                    .or(file.leader_elect_identity.take()),
            )?,
            lease_duration: dur(
                "--leader-elect-lease-duration",
                cli.leader_elect_lease_duration
                    .take()
                    .or(file.leader_elect_lease_duration.take()),
                "15s",
            )?,
            renew_deadline: dur(
                "--leader-elect-renew-deadline",
                cli.leader_elect_renew_deadline
                    .take()
                    .or(file.leader_elect_renew_deadline.take()),
                "10s",
            )?,
            retry_period: dur(
                "--leader-elect-retry-period",
                cli.leader_elect_retry_period
                    .take()
                    .or(file.leader_elect_retry_period.take()),
                "2s",
            )?,
        };
        let name_ok = |n: &str| {
            !n.is_empty()
                && n.len() <= 253
                && n.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        };
        if !name_ok(&leader.lease_name) {
            return Err(invalid(
                "--leader-elect-lease-name",
                &leader.lease_name,
                "not a Kubernetes object name",
            ));
        }
        if leader.renew_deadline >= leader.lease_duration {
            return Err(invalid(
                "--leader-elect-renew-deadline",
                &humantime::format_duration(leader.renew_deadline).to_string(),
                "must be shorter than --leader-elect-lease-duration (so a leader stops before another can take over)",
            ));
        }
        if leader.retry_period >= leader.renew_deadline {
            return Err(invalid(
                "--leader-elect-retry-period",
                &humantime::format_duration(leader.retry_period).to_string(),
                "must be shorter than --leader-elect-renew-deadline",
            ));
        }
        Ok(leader)
    }

    fn resolve_probes(cli: &mut Cli, file: &mut FileConfig) -> Result<ProbesConfig> {
        let schedules = Self::resolve_probe_schedules(cli, file)?;
        let url_ok = |u: &str| u.starts_with("http://") || u.starts_with("https://");
        let urls = csv(&cli
            .probe_urls
            .take()
            .or(file.probe_urls.take())
            .unwrap_or_default());
        if let Some(bad) = urls.iter().find(|u| !url_ok(u)) {
            return Err(invalid(
                "--probe-urls",
                bad,
                "must be an http:// or https:// URL",
            ));
        }
        let dns_names = cli
            .probe_dns_names
            .take()
            .or(file.probe_dns_names.take())
            .map(|s| csv(&s));
        let kubelet_healthz_url = cli
            .kubelet_healthz_url
            .take()
            .or(file.kubelet_healthz_url.take())
            .unwrap_or_else(|| "http://127.0.0.1:10248/healthz".into());
        if !url_ok(&kubelet_healthz_url) {
            return Err(invalid(
                "--kubelet-healthz-url",
                &kubelet_healthz_url,
                "must be an http:// or https:// URL",
            ));
        }
        let ep_s = cli
            .addon_endpoints
            .take()
            .or(file.addon_endpoints.take())
            .unwrap_or_else(|| "fluentbit=http://$NODE_IP:2020/api/v1/uptime".into());
        let mut addon_endpoints = Vec::new();
        for pair in csv(&ep_s) {
            let (name, url) = pair
                .split_once('=')
                .filter(|(n, u)| !n.is_empty() && url_ok(u))
                .ok_or_else(|| {
                    invalid("--addon-endpoints", &pair, "expected NAME=http(s)://URL")
                })?;
            addon_endpoints.push((name.to_string(), url.to_string()));
        }
        Ok(ProbesConfig {
            schedules,
            urls,
            dns_names,
            kubelet_healthz_url,
            addon_endpoints,
        })
    }

    /// `--probe-interval`, `--probe-timeout`, `--disable-probes` and the file's `probes`: when each
    /// probe runs.
    fn resolve_probe_schedules(
        cli: &mut Cli,
        file: &mut FileConfig,
    ) -> Result<BTreeMap<String, (Duration, Duration)>> {
        let secs = Duration::from_secs;
        let interval_s = cli
            .probe_interval
            .take()
            .or(file.probe_interval.take())
            .unwrap_or_else(|| "30s".into());
        let interval = duration("--probe-interval", &interval_s, secs(1), secs(3600))?;
        let timeout_s = cli
            .probe_timeout
            .take()
            .or(file.probe_timeout.take())
            .unwrap_or_else(|| "5s".into());
        let timeout = duration(
            "--probe-timeout",
            &timeout_s,
            Duration::from_millis(10),
            secs(600),
        )?;
        let disabled_s = cli
            .disable_probes
            .take()
            .or(file.disable_probes.take())
            .unwrap_or_default();
        let disabled = csv(&disabled_s);
        for d in &disabled {
            if !PROBE_NAMES.contains(&d.as_str()) {
                return Err(invalid(
                    "--disable-probes",
                    d,
                    format!(
                        "unknown probe (known: {}){}",
                        PROBE_NAMES.join(", "),
                        hint(d, PROBE_NAMES)
                    ),
                ));
            }
        }
        let per = file.probes.take().unwrap_or_default();
        let mut schedules = BTreeMap::new();
        for name in PROBE_NAMES {
            let s = per.get(name).cloned().unwrap_or_default();
            if disabled.iter().any(|d| d == name) || s.enabled == Some(false) {
                continue;
            }
            let i = s
                .interval
                .as_deref()
                .map(|v| duration("probes[].interval", v, secs(1), secs(3600)))
                .transpose()?
                .unwrap_or(interval);
            let t = s
                .timeout
                .as_deref()
                .map(|v| duration("probes[].timeout", v, Duration::from_millis(10), secs(600)))
                .transpose()?
                .unwrap_or(timeout);
            schedules.insert(name.to_string(), (i, t));
        }
        if let Some(unknown) = per.keys().find(|k| !PROBE_NAMES.contains(&k.as_str())) {
            return Err(invalid(
                "probes",
                unknown,
                format!(
                    "unknown probe (known: {}){}",
                    PROBE_NAMES.join(", "),
                    hint(unknown, PROBE_NAMES)
                ),
            ));
        }
        Ok(schedules)
    }

    /// `--metrics-provider-address`, its token (or token file) and CA file.
    fn resolve_usage_connection(
        cli: &mut Cli,
        file: &mut FileConfig,
    ) -> Result<(Option<String>, Option<Token>, Option<PathBuf>)> {
        let address = cli
            .metrics_provider_address
            .take()
            .or(file.metrics_provider_address.take());
        if let Some(a) = &address
            && !(a.starts_with("http://") || a.starts_with("https://"))
        {
            return Err(invalid(
                "--metrics-provider-address",
                a,
                "must be an http:// or https:// URL",
            ));
        }
        let token_value = cli
            .metrics_provider_token
            .take()
            .or(file.metrics_provider_token.take());
        let token_file = cli
            .metrics_provider_token_file
            .take()
            .or(file.metrics_provider_token_file.take());
        let token = match (token_value, token_file) {
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
            (None, Some(f)) => Some(Token::File(f)),
            (None, None) => None,
        };
        let ca_file = cli
            .metrics_provider_ca_file
            .take()
            .or(file.metrics_provider_ca_file.take());
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

    fn resolve_usage(cli: &mut Cli, file: &mut FileConfig) -> Result<UsageConfig> {
        let (address, token, ca_file) = Self::resolve_usage_connection(cli, file)?;
        let label = cli
            .prometheus_node_label
            .take()
            .or(file.prometheus_node_label.take())
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
        let res_s = cli
            .prometheus_fallback_resolution
            .take()
            .or(file.prometheus_fallback_resolution.take())
            .unwrap_or_else(|| "1m".into());
        let prometheus_fallback_resolution = duration(
            "--prometheus-fallback-resolution",
            &res_s,
            Duration::from_secs(1),
            Duration::from_secs(600),
        )?;
        Ok(UsageConfig {
            provider: cli.metrics_provider.or(file.metrics_provider),
            address,
            token,
            ca_file,
            insecure_skip_verify: cli
                .insecure_skip_verify
                .or(file.insecure_skip_verify)
                .unwrap_or(false),
            openshift_auth: cli
                .enable_openshift_auth
                .or(file.enable_openshift_auth)
                .unwrap_or(false),
            metrics_server_use_allocatable: cli
                .metrics_server_use_allocatable
                .or(file.metrics_server_use_allocatable)
                .unwrap_or(false),
            prometheus_node_label: label,
            prometheus_fallback_resolution,
            signalfx_host_name_suffix: cli
                .signalfx_host_name_suffix
                .take()
                .or(file.signalfx_host_name_suffix.take())
                .unwrap_or_default(),
            signalfx_cluster_name: cli
                .signalfx_cluster_name
                .take()
                .or(file.signalfx_cluster_name.take())
                .unwrap_or_default(),
            watcher_legacy_scaling: cli
                .watcher_legacy_scaling
                .or(file.watcher_legacy_scaling)
                .unwrap_or(false),
            prometheus_metrics: file
                .prometheus_metrics
                .take()
                .map(|entries| entries.into_iter().map(prom_metric).collect())
                .transpose()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(cli: Cli, file: FileConfig) -> String {
        Config::resolve(cli, file).unwrap_err().to_string()
    }

    #[test]
    fn serve_flags() {
        fn cli(f: impl FnOnce(&mut Cli)) -> Cli {
            let mut c = Cli::default();
            f(&mut c);
            c
        }
        let c = Config::resolve(Cli::default(), FileConfig::default()).unwrap();
        assert_eq!(c.serve.tls, None);
        assert_eq!(c.serve.auth, None);
        let file = FileConfig::parse(
            "tls_cert_file: /t/tls.crt\ntls_key_file: /t/tls.key\nauth: Kubernetes\nauth_cache_ttl: 30s\nclient_ca_file: /t/ca.crt\ntls_reload_interval: 5s\n",
        )
        .unwrap();
        let c = Config::resolve(Cli::default(), file).unwrap();
        let tls = c.serve.tls.unwrap();
        assert_eq!(tls.cert_file, PathBuf::from("/t/tls.crt"));
        assert_eq!(tls.client_ca_file, Some(PathBuf::from("/t/ca.crt")));
        assert_eq!(tls.reload_interval, Duration::from_secs(5));
        assert_eq!(c.serve.auth.unwrap().cache_ttl, Duration::from_secs(30));
        let e = err(
            cli(|c| c.tls_cert_file = Some("/t/tls.crt".into())),
            FileConfig::default(),
        );
        assert!(
            e.contains("--tls-cert-file") && e.contains("both or neither"),
            "{e}"
        );
        let e = err(cli(|c| c.auth = Some("rbac".into())), FileConfig::default());
        assert!(e.contains("--auth") && e.contains("'rbac'"), "{e}");
        let e = err(
            cli(|c| c.auth_cache_ttl = Some("soon".into())),
            FileConfig::default(),
        );
        assert!(e.contains("--auth-cache-ttl"), "{e}");
        let e = err(
            cli(|c| c.tls_reload_interval = Some("100ms".into())),
            FileConfig::default(),
        );
        assert!(e.contains("--tls-reload-interval"), "{e}");
        let e = err(
            cli(|c| {
                c.client_ca_file = Some("/t/ca.crt".into());
                c.auth = Some("kubernetes".into());
            }),
            FileConfig::default(),
        );
        assert!(e.contains("need TLS"), "{e}");
    }

    #[test]
    fn defaults() {
        let c = Config::resolve(Cli::default(), FileConfig::default()).unwrap();
        assert_eq!(c.listen, "0.0.0.0:2020".parse().unwrap());
        assert_eq!(c.interval, None);
        assert_eq!(c.usage.provider, None);
        assert_eq!(c.usage.prometheus_node_label, "instance");
        assert!(!c.usage.insecure_skip_verify);
        assert_eq!(c.timeout, Duration::from_secs(10));
        assert_eq!(c.tick_interval, Duration::from_secs(10));
        assert_eq!(c.procfs, PathBuf::from("/proc"));
        assert_eq!(c.cluster_name, None);
        assert_eq!(c.role, None);
        assert_eq!(c.log_format, LogFormat::Text);
    }

    #[test]
    fn flags_win_over_file() {
        let file = FileConfig::parse(
            "listen: 127.0.0.1:9000\ninterval: 30s\nrole: host\nlog_format: json\nnode_name: from-file\n",
        )
        .unwrap();
        let cli = Cli {
            listen: Some("127.0.0.1:9100".into()),
            ..Cli::default()
        };
        let c = Config::resolve(cli, file).unwrap();
        assert_eq!(c.listen, "127.0.0.1:9100".parse().unwrap());
        assert_eq!(c.interval, Some(Duration::from_secs(30)));
        assert_eq!(c.role, Some(Role::Host));
        assert_eq!(c.log_format, LogFormat::Json);
        assert_eq!(c.node_name.as_deref(), Some("from-file"));
    }

    #[test]
    fn expire_after_fetches_from_flag_file_or_default() {
        let c = Config::resolve(Cli::default(), FileConfig::default()).unwrap();
        assert_eq!(
            c.expire_after_fetches,
            crate::sources::usage::DEFAULT_EXPIRE_AFTER
        );
        let file = FileConfig::parse("expire_after_fetches: 5\n").unwrap();
        assert_eq!(
            Config::resolve(Cli::default(), file)
                .unwrap()
                .expire_after_fetches,
            5
        );
        let cli = Cli {
            expire_after_fetches: Some("0".into()),
            ..Cli::default()
        };
        let file = FileConfig::parse("expire_after_fetches: 5\n").unwrap();
        assert_eq!(Config::resolve(cli, file).unwrap().expire_after_fetches, 0);
        let cli = Cli {
            expire_after_fetches: Some("two".into()),
            ..Cli::default()
        };
        let e = Config::resolve(cli, FileConfig::default()).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        let e = e.to_string();
        assert!(
            e.contains("--expire-after-fetches") && e.contains("'two'"),
            "{e}"
        );
    }

    #[test]
    fn bad_values_name_the_option_and_value() {
        let cli = |f: fn(&mut Cli)| {
            let mut c = Cli::default();
            f(&mut c);
            c
        };
        let e = err(
            cli(|c| c.listen = Some("nope".into())),
            FileConfig::default(),
        );
        assert!(e.contains("--listen") && e.contains("'nope'"), "{e}");
        let e = err(
            cli(|c| c.interval = Some("soon".into())),
            FileConfig::default(),
        );
        assert!(e.contains("--interval") && e.contains("'soon'"), "{e}");
        let e = err(
            cli(|c| c.interval = Some("0s".into())),
            FileConfig::default(),
        );
        assert!(e.contains("between"), "{e}");
        let e = err(
            cli(|c| {
                c.interval = Some("10s".into());
                c.timeout = Some("20s".into());
            }),
            FileConfig::default(),
        );
        assert!(
            e.contains("--timeout") && e.contains("must not exceed --interval"),
            "{e}"
        );
        let e = err(
            cli(|c| c.log_level = Some("loud=?".into())),
            FileConfig::default(),
        );
        assert!(e.contains("--log-level"), "{e}");
        let file = FileConfig::parse("tick_interval: forever\n").unwrap();
        let e = err(Cli::default(), file);
        assert!(
            e.contains("--tick-interval") && e.contains("'forever'"),
            "{e}"
        );
    }

    #[test]
    fn provider_settings() {
        let file = FileConfig::parse(
            "metrics_provider: prometheus\nmetrics_provider_address: http://prom:9090\ninsecure_skip_verify: true\n",
        )
        .unwrap();
        let c = Config::resolve(Cli::default(), file).unwrap();
        assert_eq!(c.usage.provider, Some(MetricsProvider::Prometheus));
        assert_eq!(c.usage.address.as_deref(), Some("http://prom:9090"));
        assert!(c.usage.insecure_skip_verify);
        let e = FileConfig::parse("metrics_provider: datadog\n").unwrap_err();
        assert!(e.contains("unknown provider"), "{e}");
        let bad = Cli {
            metrics_provider_address: Some("prom:9090".into()),
            ..Cli::default()
        };
        let e = err(bad, FileConfig::default());
        assert!(e.contains("--metrics-provider-address"), "{e}");
        let both = Cli {
            metrics_provider_token: Some("t".into()),
            metrics_provider_token_file: Some("/etc/hostname".into()),
            ..Cli::default()
        };
        assert!(err(both, FileConfig::default()).contains("not both"));
        let label = Cli {
            prometheus_node_label: Some("node-name".into()),
            ..Cli::default()
        };
        assert!(err(label, FileConfig::default()).contains("--prometheus-node-label"));
        assert_eq!(crate::config::cli::parse_bool("TRUE"), Ok(true));
        assert!(crate::config::cli::parse_bool("maybe").is_err());
    }

    #[test]
    fn prometheus_metric_names_are_configurable() {
        let file = FileConfig::parse(
            "prometheus_metrics:\n- name: instance:node_cpu_utilisation:rate5m\n  type: CPU\n  resource: cpu\n- name: node_load1\n  type: Unknownish\n",
        )
        .unwrap();
        let e = err(Cli::default(), file);
        assert!(
            e.contains("prometheus_metrics[].type") && e.contains("Unknownish"),
            "{e}"
        );
        let file = FileConfig::parse(
            "prometheus_metrics:\n- name: instance:node_cpu_utilisation:rate5m\n  type: cpu\n  resource: cpu\n",
        )
        .unwrap();
        let m = Config::resolve(Cli::default(), file)
            .unwrap()
            .usage
            .prometheus_metrics
            .unwrap();
        assert_eq!(m.len(), 1);
        assert_eq!(
            (m[0].kind, m[0].resource),
            (MetricType::Cpu, Some(Resource::Cpu))
        );
    }

    #[test]
    fn task_settings() {
        let c = Config::resolve(Cli::default(), FileConfig::default()).unwrap();
        assert_eq!(c.task.cgroup_root, PathBuf::from("/sys/fs/cgroup"));
        assert_eq!(c.task.sysfs, PathBuf::from("/sys"));
        assert!(c.task.namespaces.is_empty() && c.task.label_allowlist.is_empty());
        let file = FileConfig::parse(
            "cgroup_root: /host/sys/fs/cgroup\nsysfs: /host/sys\ntask_namespaces: a, b\ntask_label_allowlist: app.kubernetes.io/name,tier\n",
        )
        .unwrap();
        let cli = Cli {
            sysfs: Some(PathBuf::from("/other/sys")),
            ..Cli::default()
        };
        let c = Config::resolve(cli, file).unwrap();
        assert_eq!(c.task.cgroup_root, PathBuf::from("/host/sys/fs/cgroup"));
        assert_eq!(c.task.sysfs, PathBuf::from("/other/sys"), "flag over file");
        assert_eq!(c.task.namespaces, ["a", "b"]);
        assert_eq!(c.task.label_allowlist, ["app.kubernetes.io/name", "tier"]);
        let e = err(
            Cli {
                task_namespaces: Some("Bad_NS".into()),
                ..Cli::default()
            },
            FileConfig::default(),
        );
        assert!(e.contains("--task-namespaces"), "{e}");
        let e = err(
            Cli {
                task_label_allowlist: Some("ok,not ok".into()),
                ..Cli::default()
            },
            FileConfig::default(),
        );
        assert!(
            e.contains("--task-label-allowlist") && e.contains("not ok"),
            "{e}"
        );
        assert_eq!(c.task.perf_events, crate::model::PerfMode::Off);
        let c = Config::resolve(
            Cli::default(),
            FileConfig::parse("task_perf_events: software\n").unwrap(),
        )
        .unwrap();
        assert_eq!(c.task.perf_events, crate::model::PerfMode::Software);
        let c = Config::resolve(
            Cli {
                task_perf_events: Some("auto".into()),
                ..Cli::default()
            },
            FileConfig::parse("task_perf_events: software\n").unwrap(),
        )
        .unwrap();
        assert_eq!(
            c.task.perf_events,
            crate::model::PerfMode::Auto,
            "flag over file"
        );
        let e = err(
            Cli {
                task_perf_events: Some("cycles".into()),
                ..Cli::default()
            },
            FileConfig::default(),
        );
        assert!(
            e.contains("--task-perf-events") && e.contains("cycles"),
            "{e}"
        );
    }

    #[test]
    fn task_detail_every() {
        let c = Config::resolve(Cli::default(), FileConfig::default()).unwrap();
        assert_eq!(
            c.task.detail_every,
            crate::sources::task::cgroup::DEFAULT_DETAIL_EVERY
        );
        assert_eq!(
            c.task.detail_every, 4,
            "detail series at most 3 collections old"
        );
        let file = || FileConfig::parse("task_detail_every: 7\n").unwrap();
        let c = Config::resolve(Cli::default(), file()).unwrap();
        assert_eq!(c.task.detail_every, 7);
        let flag = |v: &str| Cli {
            task_detail_every: Some(v.into()),
            ..Cli::default()
        };
        let c = Config::resolve(flag("1"), file()).unwrap();
        assert_eq!(c.task.detail_every, 1, "flag over file");
        assert_eq!(
            Config::resolve(flag("60"), file())
                .unwrap()
                .task
                .detail_every,
            60
        );
        for bad in ["0", "61", "-1", "x", ""] {
            let e = err(flag(bad), FileConfig::default());
            assert!(
                e.contains("--task-detail-every") && e.contains("1..=60"),
                "{bad}: {e}"
            );
        }
        let e = err(
            Cli::default(),
            FileConfig::parse("task_detail_every: 0\n").unwrap(),
        );
        assert!(e.contains("--task-detail-every"), "{e}");
    }

    #[test]
    fn task_container_detail_every() {
        let c = Config::resolve(Cli::default(), FileConfig::default()).unwrap();
        assert_eq!(
            c.task.container_detail_every, 8,
            "twice the default --task-detail-every"
        );
        let file = |s: &str| FileConfig::parse(s).unwrap();
        let c = Config::resolve(Cli::default(), file("task_detail_every: 7\n")).unwrap();
        assert_eq!(
            c.task.container_detail_every, 14,
            "follows --task-detail-every"
        );
        let c = Config::resolve(Cli::default(), file("task_detail_every: 40\n")).unwrap();
        assert_eq!(c.task.container_detail_every, 60, "at most 60");
        let c = Config::resolve(
            Cli::default(),
            file("task_detail_every: 7\ntask_container_detail_every: 3\n"),
        )
        .unwrap();
        assert_eq!(c.task.container_detail_every, 3);
        let flag = |v: &str| Cli {
            task_container_detail_every: Some(v.into()),
            ..Cli::default()
        };
        let c = Config::resolve(flag("4"), file("task_container_detail_every: 3\n")).unwrap();
        assert_eq!(c.task.container_detail_every, 4, "flag over file");
        for bad in ["0", "61", "-1", "x", ""] {
            let e = err(flag(bad), FileConfig::default());
            assert!(
                e.contains("--task-container-detail-every") && e.contains("1..=60"),
                "{bad}: {e}"
            );
        }
        let e = err(Cli::default(), file("task_container_detail_every: 0\n"));
        assert!(e.contains("--task-container-detail-every"), "{e}");
    }

    #[test]
    fn kubelet_settings() {
        use crate::sources::task::kubelet::{KubeletAuth, KubeletSettings};
        let c = Config::resolve(Cli::default(), FileConfig::default()).unwrap();
        assert_eq!(c.task.kubelet, None, "off by default");
        let file = FileConfig::parse("kubelet_url: https://10.0.0.5:10250\n").unwrap();
        let c = Config::resolve(Cli::default(), file).unwrap();
        assert_eq!(
            c.task.kubelet,
            Some(KubeletSettings {
                url: "https://10.0.0.5:10250".into(),
                auth: KubeletAuth::TokenFile(
                    "/var/run/secrets/kubernetes.io/serviceaccount/token".into()
                ),
                ca_file: Some("/var/run/secrets/kubernetes.io/serviceaccount/ca.crt".into()),
                insecure_skip_verify: false,
            })
        );
        let file = FileConfig::parse(
            "kubelet_url: https://file:10250\nkubelet_client_cert_file: /c.pem\nkubelet_client_key_file: /k.pem\nkubelet_insecure_skip_tls_verify: true\n",
        )
        .unwrap();
        let cli = Cli {
            kubelet_url: Some("https://flag:10250".into()),
            ..Cli::default()
        };
        let k = Config::resolve(cli, file).unwrap().task.kubelet.unwrap();
        assert_eq!(k.url, "https://flag:10250", "flag over file");
        assert_eq!(
            k.auth,
            KubeletAuth::ClientCert {
                cert: "/c.pem".into(),
                key: "/k.pem".into()
            }
        );
        assert!(k.insecure_skip_verify && k.ca_file.is_none());
        for (cli, flag) in [
            (
                Cli {
                    kubelet_url: Some("10.0.0.5:10250".into()),
                    ..Cli::default()
                },
                "--kubelet-url",
            ),
            (
                Cli {
                    kubelet_url: Some("https://h:1/pods?x=1".into()),
                    ..Cli::default()
                },
                "--kubelet-url",
            ),
            (
                Cli {
                    kubelet_ca_file: Some("/ca".into()),
                    ..Cli::default()
                },
                "--kubelet-ca-file",
            ),
            (
                Cli {
                    kubelet_url: Some("https://h:1".into()),
                    kubelet_client_key_file: Some("/k".into()),
                    ..Cli::default()
                },
                "--kubelet-client-cert-file",
            ),
            (
                Cli {
                    kubelet_url: Some("https://h:1".into()),
                    kubelet_token_file: Some("/t".into()),
                    kubelet_client_cert_file: Some("/c".into()),
                    kubelet_client_key_file: Some("/k".into()),
                    ..Cli::default()
                },
                "--kubelet-token-file",
            ),
            (
                Cli {
                    kubelet_url: Some("https://h:1".into()),
                    kubelet_token_file: Some("".into()),
                    ..Cli::default()
                },
                "--kubelet-token-file",
            ),
        ] {
            let e = err(cli, FileConfig::default());
            assert!(e.contains(flag), "{flag}: {e}");
        }
    }

    #[test]
    fn shard_and_metric_list_settings() {
        use crate::model::Shard;
        let c = Config::resolve(Cli::default(), FileConfig::default()).unwrap();
        assert_eq!(c.shard, ShardMode::Off);
        assert!(c.excluded_families.is_empty());
        let cli = |shard: Option<&str>, total: Option<&str>| Cli {
            shard: shard.map(str::to_string),
            total_shards: total.map(str::to_string),
            ..Cli::default()
        };
        let c = Config::resolve(cli(Some("2"), Some("3")), FileConfig::default()).unwrap();
        assert_eq!(c.shard, ShardMode::Static(Shard { index: 2, total: 3 }));
        let file = FileConfig::parse(
            "shard: 1\ntotal_shards: 4\nmetric_denylist: kube_prober_node_condition\n",
        )
        .unwrap();
        let c = Config::resolve(Cli::default(), file).unwrap();
        assert_eq!(c.shard, ShardMode::Static(Shard { index: 1, total: 4 }));
        assert_eq!(
            c.excluded_families.iter().collect::<Vec<_>>(),
            ["kube_prober_node_condition"]
        );
        // One shard of one is no sharding.
        let c = Config::resolve(cli(Some("0"), Some("1")), FileConfig::default()).unwrap();
        assert_eq!(c.shard, ShardMode::Off);
        for (shard, total, option, words) in [
            (Some("3"), Some("3"), "--shard", "below --total-shards"),
            (Some("0"), Some("0"), "--total-shards", "at least 1"),
            (Some("1"), None, "--shard", "needs --total-shards"),
            (Some("x"), Some("2"), "--shard", "whole number"),
        ] {
            let e = err(cli(shard, total), FileConfig::default());
            assert!(e.contains(option) && e.contains(words), "{e}");
        }
        let sts = |pod: &str| Cli {
            shard_from_statefulset: Some(true),
            pod_name: Some(pod.into()),
            ..Cli::default()
        };
        let c = Config::resolve(sts("kube-prober-shard-12"), FileConfig::default()).unwrap();
        assert_eq!(
            c.shard,
            ShardMode::StatefulSet {
                statefulset: "kube-prober-shard".into(),
                ordinal: 12
            }
        );
        for pod in ["kube-prober-7d9f-abcde", "", "-3", "pod-+3"] {
            let e = err(sts(pod), FileConfig::default());
            assert!(e.contains("--pod-name") && e.contains("<ordinal>"), "{e}");
        }
        let e = err(
            Cli {
                shard: Some("0".into()),
                total_shards: Some("2".into()),
                ..sts("p-0")
            },
            FileConfig::default(),
        );
        assert!(e.contains("exclusive"), "{e}");
        let e = err(
            Cli {
                metric_allowlist: Some("kube_prober_(".into()),
                ..Cli::default()
            },
            FileConfig::default(),
        );
        assert!(
            e.contains("--metric-allowlist") && e.contains("regular expression"),
            "{e}"
        );
        let e = err(
            Cli {
                metric_allowlist: Some("kube_prober_ticks".into()),
                metric_denylist: Some("kube_prober_ticks".into()),
                ..Cli::default()
            },
            FileConfig::default(),
        );
        assert!(e.contains("exclusive"), "{e}");
    }

    #[test]
    fn probe_settings() {
        let c = Config::resolve(Cli::default(), FileConfig::default()).unwrap();
        assert_eq!(c.probes.schedules.len(), 8);
        assert_eq!(
            c.probes.schedules["kubelet_healthz"],
            (Duration::from_secs(30), Duration::from_secs(5))
        );
        assert_eq!(c.probes.addon_endpoints[0].0, "fluentbit");
        let file = FileConfig::parse(
            "probes:\n  cluster_dns: {interval: 10s, timeout: 1s}\n  gce_metadata: {enabled: false}\n",
        )
        .unwrap();
        let cli = Cli {
            disable_probes: Some("http_get".into()),
            ..Cli::default()
        };
        let c = Config::resolve(cli, file).unwrap();
        assert_eq!(
            c.probes.schedules["cluster_dns"],
            (Duration::from_secs(10), Duration::from_secs(1))
        );
        assert!(!c.probes.schedules.contains_key("gce_metadata"));
        assert!(!c.probes.schedules.contains_key("http_get"));
        let bad = Cli {
            disable_probes: Some("ping".into()),
            ..Cli::default()
        };
        assert!(err(bad, FileConfig::default()).contains("--disable-probes"));
        let bad = Cli {
            addon_endpoints: Some("fluentbit".into()),
            ..Cli::default()
        };
        assert!(err(bad, FileConfig::default()).contains("--addon-endpoints"));
        let file = FileConfig::parse("probes:\n  pingu: {enabled: true}\n").unwrap();
        assert!(err(Cli::default(), file).contains("pingu"));
    }

    #[test]
    fn unknown_file_keys_are_errors() {
        let e = FileConfig::parse("lisen: 1.2.3.4:5\n").unwrap_err();
        assert!(e.contains("unknown field `lisen`"), "{e}");
        let e = FileConfig::parse("role: admiral\n").unwrap_err();
        assert!(e.contains("role"), "{e}");
        assert_eq!(FileConfig::parse("\n").unwrap(), FileConfig::default());
    }

    #[test]
    fn typos_get_a_did_you_mean() {
        assert_eq!(did_you_mean("lisen", ["role", "listen"]), Some("listen"));
        assert_eq!(
            did_you_mean("hots", ["cluster", "node", "host"]),
            Some("host")
        );
        assert_eq!(
            did_you_mean("tick-interval", ["tick_interval"]),
            Some("tick_interval")
        );
        assert_eq!(
            did_you_mean("verbose", crate::shared::telemetry::LEVELS),
            None
        );
        assert_eq!(did_you_mean("", ["a"]), None);
        assert_eq!(did_you_mean("zzzzzzzzzz", ["listen"]), None);

        let e = FileConfig::parse("lisen: 1.2.3.4:5\n").unwrap_err();
        assert!(e.contains("did you mean `listen`?"), "{e}");
        let e = FileConfig::parse("tick_intreval: 5s\n").unwrap_err();
        assert!(e.contains("did you mean `tick_interval`?"), "{e}");
        let e = FileConfig::parse("role: hots\n").unwrap_err();
        assert!(e.contains("did you mean `host`?"), "{e}");
        let e = FileConfig::parse("log_format: jsn\n").unwrap_err();
        assert!(e.contains("did you mean `json`?"), "{e}");
        let e = FileConfig::parse("metrics_provider: prometheous\n").unwrap_err();
        assert!(e.contains("did you mean `Prometheus`?"), "{e}");
        let e = FileConfig::parse("probes:\n  cluster_dns: {intervall: 5s}\n").unwrap_err();
        assert!(e.contains("did you mean `interval`?"), "{e}");
        let e = FileConfig::parse("completely_unrelated_key: 1\n").unwrap_err();
        assert!(!e.contains("did you mean"), "{e}");

        let e = err(
            Cli {
                sinks: Some(vec!["otpl".into()]),
                ..Cli::default()
            },
            FileConfig::default(),
        );
        assert!(e.contains("did you mean `otlp`?"), "{e}");
        let e = err(
            Cli {
                disable_probes: Some("clusterdns".into()),
                ..Cli::default()
            },
            FileConfig::default(),
        );
        assert!(e.contains("did you mean `cluster_dns`?"), "{e}");
        let file = FileConfig::parse("probes:\n  gce_metdata: {enabled: false}\n").unwrap();
        let e = err(Cli::default(), file);
        assert!(e.contains("did you mean `gce_metadata`?"), "{e}");
        let e = err(
            Cli {
                log_level: Some("verbose".into()),
                ..Cli::default()
            },
            FileConfig::default(),
        );
        assert!(
            e.contains("--log-level") && e.contains("did you mean `debug`?"),
            "{e}"
        );
    }

    #[test]
    fn sink_settings() {
        let c = Config::resolve(Cli::default(), FileConfig::default()).unwrap();
        assert!(c.sinks.kinds.is_empty());
        assert_eq!(c.sinks.interval, Duration::from_secs(60));
        assert_eq!(c.sinks.timeout, Duration::from_secs(30));
        assert_eq!(c.sinks.gcm.prefix, "kube-prober");
        assert!(c.sinks.gcm.node_series);
        assert_eq!(c.sinks.leader.enabled, None);
        assert_eq!(c.sinks.leader.lease_duration, Duration::from_secs(15));

        let file = FileConfig::parse(
            "sinks: [gcm, otlp]\nsink_interval: 10s\notlp_protocol: http/protobuf\ngcm_project: p1\n",
        )
        .unwrap();
        let cli = Cli {
            sinks: Some(vec!["otlp".into(), "OTLP".into()]),
            ..Cli::default()
        };
        let c = Config::resolve(cli, file).unwrap();
        assert_eq!(
            c.sinks.kinds,
            vec![SinkKind::Otlp],
            "flags win, repeats fold"
        );
        assert_eq!(
            c.sinks.timeout,
            Duration::from_secs(10),
            "at most the interval"
        );
        assert_eq!(c.sinks.otlp.protocol.as_deref(), Some("http/protobuf"));
        assert_eq!(c.sinks.gcm.project.as_deref(), Some("p1"));

        let bad = |cli: Cli| err(cli, FileConfig::default());
        assert!(
            bad(Cli {
                sinks: Some(vec!["kafka".into()]),
                ..Cli::default()
            })
            .contains("--sink")
        );
        assert!(
            bad(Cli {
                sink_interval: Some("10s".into()),
                sink_timeout: Some("20s".into()),
                ..Cli::default()
            })
            .contains("--sink-timeout")
        );
        assert!(
            bad(Cli {
                leader_elect_renew_deadline: Some("15s".into()),
                ..Cli::default()
            })
            .contains("--leader-elect-renew-deadline")
        );
        assert!(
            bad(Cli {
                gcm_prefix: Some("a//b".into()),
                ..Cli::default()
            })
            .contains("--gcm-prefix")
        );
        assert!(
            bad(Cli {
                otlp_client_cert: Some("Cargo.toml".into()),
                ..Cli::default()
            })
            .contains("--otlp-client-key")
        );
        assert!(
            bad(Cli {
                gcm_project: Some(" ".into()),
                ..Cli::default()
            })
            .contains("--gcm-project")
        );
    }
}
