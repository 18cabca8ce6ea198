//! Command-line flags. Every flag has an environment fallback and a config-file key of the same
//! name (dashes as underscores); precedence is flag, then environment, then file, then default.

use std::path::PathBuf;

use clap::{Parser, ValueEnum};
use serde::Deserialize;

/// Which sources run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// One Deployment per cluster: nodes, workloads, usage backends, cluster probes.
    Cluster,
    /// A DaemonSet pod: its own node, the pods on it, node probes.
    Node,
    /// No cluster: this machine is the only node, read from procfs.
    Host,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Cluster => "cluster",
            Role::Node => "node",
            Role::Host => "host",
        }
    }
}

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
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

    /// procfs root the host source reads. [default: /proc]
    #[arg(long, env = "KUBE_PROBER_PROCFS", value_name = "DIR")]
    pub procfs: Option<PathBuf>,

    /// How often usage sources fetch, e.g. 15s, 1m. [default: 15s]
    #[arg(long, env = "KUBE_PROBER_INTERVAL", value_name = "DURATION")]
    pub interval: Option<String>,

    /// Deadline of one source run; at most --interval. [default: 10s]
    #[arg(long, env = "KUBE_PROBER_TIMEOUT", value_name = "DURATION")]
    pub timeout: Option<String>,

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
}
