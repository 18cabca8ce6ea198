//! Command-line flags. Every flag has an environment fallback and a config-file key of the same
//! name (dashes as underscores); precedence is flag, then environment, then file, then default.

use std::path::PathBuf;

use clap::Parser;

use crate::k8s::role::Role;
use crate::shared::telemetry::LogFormat;
use crate::sources::usage::MetricsProvider;

/// A boolean as environment variables spell it: true/false, 1/0, yes/no, on/off.
pub fn parse_bool(s: &str) -> Result<bool, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Ok(true),
        "false" | "0" | "no" | "off" | "" => Ok(false),
        _ => Err(format!("expected true or false, got {s:?}")),
    }
}

/// kube-prober: node load for Trimaran (/watcher), node and addon health, Prometheus /metrics.
#[derive(Debug, Clone, Parser, Default)]
#[command(name = "kube-prober", version, about, long_about = None)]
pub struct Cli {
    /// YAML config file whose keys mirror these flags (e.g. `tick_interval: 10s`); flags win.
    #[arg(long, env = "KUBE_PROBER_CONFIG", value_name = "PATH")]
    pub config: Option<PathBuf>,

    /// Role to run. Default: `cluster` when in-cluster config or a kubeconfig is found, else `host`.
    #[arg(long, env = "KUBE_PROBER_ROLE", value_enum)]
    pub role: Option<Role>,

    /// Address for the HTTP server (/metrics, /watcher, /healthz, /readyz). [default: 0.0.0.0:2020]
    #[arg(long, env = "KUBE_PROBER_LISTEN", value_name = "ADDR")]
    pub listen: Option<String>,

    /// Name this node is published under. [default: the hostname]
    #[arg(long, env = "NODE_NAME", value_name = "NAME")]
    pub node_name: Option<String>,

    /// Cluster name for labels. [default: unknown]
    #[arg(long, env = "CLUSTER_NAME", value_name = "NAME")]
    pub cluster_name: Option<String>,

    /// Kubeconfig file. [default: $KUBECONFIG, then ~/.kube/config]
    #[arg(long, env = "KUBECONFIG", value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,

    /// load-watcher's name for --kubeconfig.
    #[arg(
        long = "kube-config",
        env = "KUBE_CONFIG",
        value_name = "PATH",
        hide = true
    )]
    pub kube_config: Option<PathBuf>,

    /// procfs root the host source reads. [default: /proc]
    #[arg(long, env = "KUBE_PROBER_PROCFS", value_name = "DIR")]
    pub procfs: Option<PathBuf>,

    /// How often usage sources fetch, e.g. 15s, 1m. [default: 15s]
    #[arg(long, env = "KUBE_PROBER_INTERVAL", value_name = "DURATION")]
    pub interval: Option<String>,

    /// Deadline of one source run; at most --interval. [default: 10s]
    #[arg(long, env = "KUBE_PROBER_TIMEOUT", value_name = "DURATION")]
    pub timeout: Option<String>,

    /// A host a usage backend stops reporting leaves /metrics and /watcher after this many
    /// successful fetches in a row without it; 0 keeps it forever. [default: 2]
    #[arg(long, env = "KUBE_PROBER_EXPIRE_AFTER_FETCHES", value_name = "N")]
    pub expire_after_fetches: Option<String>,

    /// How often a snapshot is made and rendered for /metrics and /watcher. [default: 10s]
    #[arg(long, env = "KUBE_PROBER_TICK_INTERVAL", value_name = "DURATION")]
    pub tick_interval: Option<String>,

    /// How long shutdown waits for in-flight requests and sinks. [default: 10s]
    #[arg(long, env = "KUBE_PROBER_SHUTDOWN_TIMEOUT", value_name = "DURATION")]
    pub shutdown_timeout: Option<String>,

    /// Log level or tracing filter, e.g. `info`, `debug`, `kube_prober=debug,warn`. [default: info]
    #[arg(long, env = "LOG_LEVEL", value_name = "LEVEL")]
    pub log_level: Option<String>,

    /// Log format. [default: text]
    #[arg(long, env = "KUBE_PROBER_LOG_FORMAT", value_enum)]
    pub log_format: Option<LogFormat>,

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
    #[arg(long, env = "INSECURE_SKIP_VERIFY", value_name = "BOOL", num_args = 0..=1, default_missing_value = "true", value_parser = parse_bool)]
    pub insecure_skip_verify: Option<bool>,

    /// OpenShift: trust the service-account CA and, without a token, send the service-account
    /// token to Prometheus. [default: false]
    #[arg(long, env = "ENABLE_OPENSHIFT_AUTH", value_name = "BOOL", num_args = 0..=1, default_missing_value = "true", value_parser = parse_bool)]
    pub enable_openshift_auth: Option<bool>,

    /// Namespaces whose DaemonSets and Deployments are watched for addons (comma-separated).
    /// [default: kube-system]
    #[arg(long, env = "KUBE_PROBER_WORKLOAD_NAMESPACES", value_name = "NS,...")]
    pub workload_namespaces: Option<String>,

    /// More addon markers besides GKE's components.gke.io/component-name/-version, as
    /// NAME_KEY=VERSION_KEY pairs, comma-separated (annotations, then labels), e.g.
    /// app.kubernetes.io/name=app.kubernetes.io/version.
    #[arg(
        long,
        env = "KUBE_PROBER_ADDON_KEYS",
        value_name = "NAME_KEY=VERSION_KEY,..."
    )]
    pub addon_keys: Option<String>,

    /// Probes to turn off, comma-separated: metrics_server, cluster_dns, apiserver_readyz,
    /// kubelet_healthz, addon_http, gce_metadata, http_get, dns_lookup.
    #[arg(long, env = "KUBE_PROBER_DISABLE_PROBES", value_name = "NAME,...")]
    pub disable_probes: Option<String>,

    /// How often each probe runs (per probe: `probes:` in the config file). [default: 30s]
    #[arg(long, env = "KUBE_PROBER_PROBE_INTERVAL", value_name = "DURATION")]
    pub probe_interval: Option<String>,

    /// Deadline of one probe run. [default: 5s]
    #[arg(long, env = "KUBE_PROBER_PROBE_TIMEOUT", value_name = "DURATION")]
    pub probe_timeout: Option<String>,

    /// URLs to GET as connectivity probes (`http_get`), comma-separated.
    #[arg(long, env = "KUBE_PROBER_PROBE_URLS", value_name = "URL,...")]
    pub probe_urls: Option<String>,

    /// Names to resolve as DNS probes, comma-separated. In the cluster role the first is the
    /// `cluster_dns` probe. [default: kubernetes.default.svc.cluster.local in the cluster role]
    #[arg(long, env = "KUBE_PROBER_PROBE_DNS_NAMES", value_name = "NAME,...")]
    pub probe_dns_names: Option<String>,

    /// Node role: the kubelet's health endpoint (it listens on 127.0.0.1 by default, so the
    /// DaemonSet needs hostNetwork, or point this at the node IP). [default: http://127.0.0.1:10248/healthz]
    #[arg(long, env = "KUBE_PROBER_KUBELET_HEALTHZ_URL", value_name = "URL")]
    pub kubelet_healthz_url: Option<String>,

    /// Node role: addon HTTP endpoints as NAME=URL pairs, comma-separated; `$NODE_IP` is
    /// replaced by the NODE_IP environment variable. [default: fluentbit=http://$NODE_IP:2020/api/v1/uptime]
    #[arg(long, env = "KUBE_PROBER_ADDON_ENDPOINTS", value_name = "NAME=URL,...")]
    pub addon_endpoints: Option<String>,

    /// KubernetesMetricsServer: percent of allocatable instead of capacity (load-watcher uses
    /// capacity). [default: false]
    #[arg(long, env = "KUBE_PROBER_METRICS_SERVER_USE_ALLOCATABLE", value_name = "BOOL", num_args = 0..=1, default_missing_value = "true", value_parser = parse_bool)]
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

    /// /watcher: multiply every value by 100 as load-watcher does (bandwidth as bytes/s x 100);
    /// off: CPU and Memory in percent, other types in their own units. [default: false]
    #[arg(long, env = "KUBE_PROBER_WATCHER_LEGACY_SCALING", value_name = "BOOL", num_args = 0..=1, default_missing_value = "true", value_parser = parse_bool)]
    pub watcher_legacy_scaling: Option<bool>,

    /// Push outputs to run, repeatable or comma-separated: `otlp`, `gcm` (Google Cloud
    /// Monitoring). [default: none]
    #[arg(
        long = "sink",
        env = "KUBE_PROBER_SINKS",
        value_name = "NAME",
        value_delimiter = ','
    )]
    pub sinks: Option<Vec<String>>,

    /// How often each push output pushes. [default: 60s]
    #[arg(long, env = "KUBE_PROBER_SINK_INTERVAL", value_name = "DURATION")]
    pub sink_interval: Option<String>,

    /// Deadline of one push, retries included; at most --sink-interval. [default: 30s, or the interval if shorter]
    #[arg(long, env = "KUBE_PROBER_SINK_TIMEOUT", value_name = "DURATION")]
    pub sink_timeout: Option<String>,

    /// OTLP protocol: `grpc` or `http/protobuf`. [default: $OTEL_EXPORTER_OTLP_PROTOCOL, else grpc]
    #[arg(long, env = "KUBE_PROBER_OTLP_PROTOCOL", value_name = "PROTOCOL")]
    pub otlp_protocol: Option<String>,

    /// OTLP endpoint. [default: $OTEL_EXPORTER_OTLP_(METRICS_)ENDPOINT, else http://localhost:4317 (grpc) or http://localhost:4318/v1/metrics]
    #[arg(long, env = "KUBE_PROBER_OTLP_ENDPOINT", value_name = "URL")]
    pub otlp_endpoint: Option<String>,

    /// OTLP request headers as KEY=VALUE pairs, comma-separated. [default: $OTEL_EXPORTER_OTLP_HEADERS]
    #[arg(
        long,
        env = "KUBE_PROBER_OTLP_HEADERS",
        value_name = "KEY=VALUE,...",
        hide_env_values = true
    )]
    pub otlp_headers: Option<String>,

    /// PEM CA bundle to trust for the OTLP endpoint. [default: $OTEL_EXPORTER_OTLP_CERTIFICATE]
    #[arg(long, env = "KUBE_PROBER_OTLP_CA_FILE", value_name = "PATH")]
    pub otlp_ca_file: Option<PathBuf>,

    /// PEM client certificate for mutual TLS to the OTLP endpoint. [default: $OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE]
    #[arg(long, env = "KUBE_PROBER_OTLP_CLIENT_CERT", value_name = "PATH")]
    pub otlp_client_cert: Option<PathBuf>,

    /// PEM private key of --otlp-client-cert. [default: $OTEL_EXPORTER_OTLP_CLIENT_KEY]
    #[arg(long, env = "KUBE_PROBER_OTLP_CLIENT_KEY", value_name = "PATH")]
    pub otlp_client_key: Option<PathBuf>,

    /// OTLP compression: `gzip` or `none`. [default: $OTEL_EXPORTER_OTLP_COMPRESSION, else none]
    #[arg(long, env = "KUBE_PROBER_OTLP_COMPRESSION", value_name = "NAME")]
    pub otlp_compression: Option<String>,

    /// Data points per OTLP export request at most; a larger push is sent as several requests.
    /// [default: 10000]
    #[arg(
        long,
        env = "KUBE_PROBER_OTLP_MAX_POINTS_PER_REQUEST",
        value_name = "N"
    )]
    pub otlp_max_points_per_request: Option<usize>,

    /// Cloud Monitoring project. [default: the GCE metadata server's project]
    #[arg(long, env = "KUBE_PROBER_GCM_PROJECT", value_name = "PROJECT")]
    pub gcm_project: Option<String>,

    /// Cloud Monitoring `location` resource label. [default: the GCE metadata server's cluster location]
    #[arg(long, env = "KUBE_PROBER_GCM_LOCATION", value_name = "LOCATION")]
    pub gcm_location: Option<String>,

    /// Metric type prefix: types are workload.googleapis.com/PREFIX/... (gke-prober's
    /// METRIC_PREFIX). [default: kube-prober]
    #[arg(long, env = "METRIC_PREFIX", value_name = "PREFIX")]
    pub gcm_prefix: Option<String>,

    /// Cloud Monitoring API endpoint (tests, emulators). [default: https://monitoring.googleapis.com]
    #[arg(long, env = "KUBE_PROBER_GCM_ENDPOINT", value_name = "URL")]
    pub gcm_endpoint: Option<String>,

    /// Cluster role: also write node/* and addon/* for every node to Cloud Monitoring. Set false
    /// when a node-role DaemonSet writes them too (they would collide). [default: true]
    #[arg(long, env = "KUBE_PROBER_GCM_NODE_SERIES", value_name = "BOOL", num_args = 0..=1, default_missing_value = "true", value_parser = parse_bool)]
    pub gcm_node_series: Option<bool>,

    /// Send no credentials to Cloud Monitoring (only for a local emulator). [default: false]
    #[arg(long, env = "KUBE_PROBER_GCM_ANONYMOUS", value_name = "BOOL", num_args = 0..=1, default_missing_value = "true", value_parser = parse_bool, hide = true)]
    pub gcm_anonymous: Option<bool>,

    /// Cluster role: only the holder of a coordination.k8s.io/v1 Lease pushes cluster-level
    /// series. [default: true in the cluster role when a sink is configured]
    #[arg(long, env = "KUBE_PROBER_LEADER_ELECT", value_name = "BOOL", num_args = 0..=1, default_missing_value = "true", value_parser = parse_bool)]
    pub leader_elect: Option<bool>,

    /// Name of the leader Lease. [default: kube-prober]
    #[arg(long, env = "KUBE_PROBER_LEADER_ELECT_LEASE_NAME", value_name = "NAME")]
    pub leader_elect_lease_name: Option<String>,

    /// Namespace of the leader Lease. [default: $POD_NAMESPACE, else the client's namespace]
    #[arg(long, env = "POD_NAMESPACE", value_name = "NAMESPACE")]
    pub leader_elect_namespace: Option<String>,

    /// How long a Lease holds without renewal. [default: 15s]
    #[arg(
        long,
        env = "KUBE_PROBER_LEADER_ELECT_LEASE_DURATION",
        value_name = "DURATION"
    )]
    pub leader_elect_lease_duration: Option<String>,

    /// The leader stops pushing when it has not renewed for this long. [default: 10s]
    #[arg(
        long,
        env = "KUBE_PROBER_LEADER_ELECT_RENEW_DEADLINE",
        value_name = "DURATION"
    )]
    pub leader_elect_renew_deadline: Option<String>,

    /// How often to try to acquire or renew. [default: 2s]
    #[arg(
        long,
        env = "KUBE_PROBER_LEADER_ELECT_RETRY_PERIOD",
        value_name = "DURATION"
    )]
    pub leader_elect_retry_period: Option<String>,

    /// This replica's identity in the Lease. [default: $POD_NAME, else hostname_pid]
    #[arg(long, env = "POD_NAME", value_name = "ID")]
    pub leader_elect_identity: Option<String>,

    /// Serve over TLS with this certificate (PEM, chain allowed); needs --tls-key-file. Re-read
    /// when it changes.
    #[arg(long, env = "KUBE_PROBER_TLS_CERT_FILE", value_name = "PATH")]
    pub tls_cert_file: Option<PathBuf>,

    /// The private key (PEM) of --tls-cert-file.
    #[arg(long, env = "KUBE_PROBER_TLS_KEY_FILE", value_name = "PATH")]
    pub tls_key_file: Option<PathBuf>,

    /// How often the TLS files are checked for a new pair. [default: 10s]
    #[arg(long, env = "KUBE_PROBER_TLS_RELOAD_INTERVAL", value_name = "DURATION")]
    pub tls_reload_interval: Option<String>,

    /// Verify client certificates against these CAs (PEM); a verified certificate's CN and O are
    /// the user and groups for --auth kubernetes. Needs TLS and --auth kubernetes.
    #[arg(long, env = "KUBE_PROBER_CLIENT_CA_FILE", value_name = "PATH")]
    pub client_ca_file: Option<PathBuf>,

    /// Guard /metrics, /watcher and /watcher/health: `none`, or `kubernetes` (bearer tokens
    /// checked with a TokenReview, access with a SubjectAccessReview, like kube-rbac-proxy).
    /// [default: none]
    #[arg(long, env = "KUBE_PROBER_AUTH", value_name = "MODE")]
    pub auth: Option<String>,

    /// How long TokenReview and SubjectAccessReview answers are reused; 0s turns caching off.
    /// [default: 2m]
    #[arg(long, env = "KUBE_PROBER_AUTH_CACHE_TTL", value_name = "DURATION")]
    pub auth_cache_ttl: Option<String>,

    /// Where the cgroup hierarchies are mounted; the node role reads pod and container
    /// cgroups there, never writes (in a container: /host/sys/fs/cgroup). [default: /sys/fs/cgroup]
    #[arg(long, env = "KUBE_PROBER_CGROUP_ROOT", value_name = "DIR")]
    pub cgroup_root: Option<PathBuf>,

    /// sysfs root the node role reads CPU and NUMA topology from (in a container: /host/sys).
    /// [default: /sys]
    #[arg(long, env = "KUBE_PROBER_SYSFS", value_name = "DIR")]
    pub sysfs: Option<PathBuf>,

    /// Namespaces whose pods get task metrics (comma-separated; WCA's monitored_namespaces).
    /// [default: all]
    #[arg(long, env = "KUBE_PROBER_TASK_NAMESPACES", value_name = "NS,...")]
    pub task_namespaces: Option<String>,

    /// Pod label keys copied onto task metrics as labels (comma-separated), e.g.
    /// app.kubernetes.io/name. [default: none]
    #[arg(long, env = "KUBE_PROBER_TASK_LABEL_ALLOWLIST", value_name = "KEY,...")]
    pub task_label_allowlist: Option<String>,

    /// Per-pod perf counters through perf_event_open in cgroup mode (node role): `off`, `auto`
    /// (hardware events where allowed, else software events), `hardware` or `software`; the
    /// flag alone means `auto`. Needs CAP_PERFMON or CAP_SYS_ADMIN. [default: off]
    #[arg(long, env = "KUBE_PROBER_TASK_PERF_EVENTS", value_name = "MODE", num_args = 0..=1, default_missing_value = "auto")]
    pub task_perf_events: Option<String>,

    /// Node role: read each cgroup's detail files (v1 cpu.stat throttling, OOM kills,
    /// memory.stat, NUMA stat, pressure, memory limit, cpuset) once every N collections,
    /// staggered over the cgroups (1..=60; 1: every collection). CPU and memory usage are read
    /// on every collection (and v2 throttling, from the same cpu.stat). [default: 4]
    #[arg(long, env = "KUBE_PROBER_TASK_DETAIL_EVERY", value_name = "N")]
    pub task_detail_every: Option<String>,

    /// Node role: read each container cgroup's detail files once every M collections,
    /// staggered over the containers (1..=60); pod cgroups follow --task-detail-every.
    /// Containers' CPU and memory usage are read on every collection. [default: twice
    /// --task-detail-every, at most 60]
    #[arg(
        long,
        env = "KUBE_PROBER_TASK_CONTAINER_DETAIL_EVERY",
        value_name = "M"
    )]
    pub task_container_detail_every: Option<String>,

    /// Largest answer read from outside (Kubernetes API incl. metrics.k8s.io, HTTP backends,
    /// probe targets), in bytes or as a quantity (32Mi); one event for watch streams. A larger
    /// answer is a `too_large` error. [default: 32Mi]
    #[arg(long, env = "KUBE_PROBER_MAX_RESPONSE_BYTES", value_name = "BYTES")]
    pub max_response_bytes: Option<String>,

    /// Node role: take task pods from this kubelet's GET /pods (e.g. https://$(NODE_IP):10250)
    /// instead of the API-server pod watch. [default: none]
    #[arg(long, env = "KUBE_PROBER_KUBELET_URL", value_name = "URL")]
    pub kubelet_url: Option<String>,

    /// Bearer token file for the kubelet, re-read on every poll.
    /// [default: /var/run/secrets/kubernetes.io/serviceaccount/token]
    #[arg(long, env = "KUBE_PROBER_KUBELET_TOKEN_FILE", value_name = "FILE")]
    pub kubelet_token_file: Option<PathBuf>,

    /// Client certificate (PEM) for the kubelet instead of the token; needs
    /// --kubelet-client-key-file.
    #[arg(
        long,
        env = "KUBE_PROBER_KUBELET_CLIENT_CERT_FILE",
        value_name = "FILE"
    )]
    pub kubelet_client_cert_file: Option<PathBuf>,

    /// Private key (PEM) of --kubelet-client-cert-file.
    #[arg(long, env = "KUBE_PROBER_KUBELET_CLIENT_KEY_FILE", value_name = "FILE")]
    pub kubelet_client_key_file: Option<PathBuf>,

    /// The only CA trusted for the kubelet's serving certificate.
    /// [default: /var/run/secrets/kubernetes.io/serviceaccount/ca.crt]
    #[arg(long, env = "KUBE_PROBER_KUBELET_CA_FILE", value_name = "FILE")]
    pub kubelet_ca_file: Option<PathBuf>,

    /// Do not verify the kubelet's serving certificate (self-signed kubelet certificates, as
    /// metrics-server's --kubelet-insecure-tls). [default: false]
    #[arg(long, env = "KUBE_PROBER_KUBELET_INSECURE_SKIP_TLS_VERIFY", value_name = "BOOL", num_args = 0..=1, default_missing_value = "true", value_parser = parse_bool)]
    pub kubelet_insecure_skip_tls_verify: Option<bool>,

    /// Cluster role: which pods to watch. `all` (every pod: per-node requests, limits and pod
    /// counts), `workloads` (only pods in --workload-namespaces; run the node DaemonSet for the
    /// per-node pod series), `none` (no pods; addon and per-node pod series come from the node
    /// DaemonSet). [default: all]
    #[arg(long, env = "KUBE_PROBER_POD_SCOPE", value_name = "all|workloads|none")]
    pub pod_scope: Option<String>,

    /// This instance's shard of the cluster role (0-based; with --total-shards): it emits the
    /// per-node series of the nodes whose name hashes to it, and shard 0 the cluster-level ones.
    /// [default: unsharded]
    #[arg(long, env = "KUBE_PROBER_SHARD", value_name = "N")]
    pub shard: Option<String>,

    /// How many shards the cluster role is split into (with --shard). [default: 1]
    #[arg(long, env = "KUBE_PROBER_TOTAL_SHARDS", value_name = "N")]
    pub total_shards: Option<String>,

    /// Shard from the StatefulSet this pod belongs to: the ordinal of --pod-name is the shard,
    /// the StatefulSet's spec.replicas the total, followed live (a change re-shards in place).
    #[arg(long, env = "KUBE_PROBER_SHARD_FROM_STATEFULSET", value_name = "BOOL", num_args = 0..=1, default_missing_value = "true", value_parser = parse_bool)]
    pub shard_from_statefulset: Option<bool>,

    /// This pod's name (downward API `metadata.name`), `<statefulset>-<ordinal>`; read by
    /// --shard-from-statefulset.
    #[arg(long, env = "POD_NAME", value_name = "NAME")]
    pub pod_name: Option<String>,

    /// Only the metric families matching one of these comma-separated regular expressions
    /// (each anchored) are emitted on /metrics and pushed. [default: all]
    #[arg(long, env = "KUBE_PROBER_METRIC_ALLOWLIST", value_name = "REGEX,...")]
    pub metric_allowlist: Option<String>,

    /// Metric families matching one of these comma-separated regular expressions (each
    /// anchored) are left out of /metrics and the pushes; exclusive with --metric-allowlist.
    #[arg(long, env = "KUBE_PROBER_METRIC_DENYLIST", value_name = "REGEX,...")]
    pub metric_denylist: Option<String>,

    #[command(subcommand)]
    pub command: Option<Command>,
}

/// Subcommands; without one, kube-prober runs.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum Command {
    /// Google Cloud Monitoring maintenance.
    Gcm {
        #[command(subcommand)]
        command: GcmCommand,
    },
}

#[derive(Debug, Clone, clap::Subcommand)]
pub enum GcmCommand {
    /// Metric descriptors of kube-prober's types (gke-prober's listmd).
    Descriptors {
        #[command(subcommand)]
        action: DescriptorAction,
        /// Project whose descriptors to list or delete. [default: --gcm-project, then the GCE
        /// metadata server]
        #[arg(long, global = true, value_name = "PROJECT")]
        project: Option<String>,
        /// Metric type prefix: workload.googleapis.com/PREFIX/... [default: --gcm-prefix, then kube-prober]
        #[arg(long, global = true, value_name = "PREFIX")]
        prefix: Option<String>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::Subcommand)]
pub enum DescriptorAction {
    /// Print the types of workload.googleapis.com/PREFIX/... descriptors.
    List,
    /// Delete them (their data goes with them).
    Delete,
}
