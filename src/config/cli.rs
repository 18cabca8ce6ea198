//! Command-line flags: `--config`, every component's options flattened (see
//! [`super::Options`]), and the maintenance subcommands. Every option flag has an environment
//! fallback and a config-file key of the same name with dashes as underscores (`--sink` is
//! `sinks`); precedence is flag, then environment, then file, then default.

use std::path::PathBuf;

use clap::Parser;

use super::Options;

/// kube-prober: node load for Trimaran (/watcher), node and addon health, Prometheus /metrics.
#[derive(Debug, Clone, Parser, Default)]
#[command(name = "kube-prober", version, about, long_about = None)]
pub struct Cli {
    /// YAML config file whose keys mirror these flags (e.g. `tick_interval: 10s`); flags win.
    #[arg(long, env = "KUBE_PROBER_CONFIG", value_name = "PATH")]
    pub config: Option<PathBuf>,

    // Every other flag, one group per component (each defined in its component's room).
    #[command(flatten)]
    pub options: Options,

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
