//! The options that belong to no single component: who and where this instance is
//! ([`InstanceOptions`]) and the global schedule ([`ScheduleOptions`]).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::k8s::role::Role;
use crate::shared::error::Result;
use crate::shared::options::{duration, invalid};

/// Who and where this instance is: role, listen address, names, kubeconfig, procfs.
#[derive(Debug, Clone, Default, PartialEq, clap::Args, serde::Deserialize)]
#[serde(default)]
pub struct InstanceOptions {
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
    #[serde(skip)]
    pub kube_config: Option<PathBuf>,

    /// procfs root the host source reads. [default: /proc]
    #[arg(long, env = "KUBE_PROBER_PROCFS", value_name = "DIR")]
    pub procfs: Option<PathBuf>,
}

crate::merge_options!(InstanceOptions {
    role,
    listen,
    node_name,
    cluster_name,
    kubeconfig,
    kube_config,
    procfs
});

/// The global schedule: fetch interval and deadline, host expiry, tick, shutdown.
#[derive(Debug, Clone, Default, PartialEq, clap::Args, serde::Deserialize)]
#[serde(default)]
pub struct ScheduleOptions {
    /// How often usage sources fetch, e.g. 15s, 1m. [default: 15s]
    #[arg(long, env = "KUBE_PROBER_INTERVAL", value_name = "DURATION")]
    pub interval: Option<String>,

    /// Deadline of one source run; at most --interval. [default: 10s]
    #[arg(long, env = "KUBE_PROBER_TIMEOUT", value_name = "DURATION")]
    pub timeout: Option<String>,

    /// A host a usage backend stops reporting leaves /metrics and /watcher after this many
    /// successful fetches in a row without it; 0 keeps it forever. [default: 2]
    #[arg(long, env = "KUBE_PROBER_EXPIRE_AFTER_FETCHES", value_name = "N")]
    #[serde(deserialize_with = "crate::shared::options::u32_as_text")]
    pub expire_after_fetches: Option<String>,

    /// How often a snapshot is made and rendered for /metrics and /watcher. [default: 10s]
    #[arg(long, env = "KUBE_PROBER_TICK_INTERVAL", value_name = "DURATION")]
    pub tick_interval: Option<String>,

    /// How long shutdown waits for in-flight requests and sinks. [default: 10s]
    #[arg(long, env = "KUBE_PROBER_SHUTDOWN_TIMEOUT", value_name = "DURATION")]
    pub shutdown_timeout: Option<String>,
}

crate::merge_options!(ScheduleOptions {
    interval,
    timeout,
    expire_after_fetches,
    tick_interval,
    shutdown_timeout
});

pub const DEFAULT_LISTEN: &str = "0.0.0.0:2020";
pub const DEFAULT_TIMEOUT: &str = "10s";
pub const DEFAULT_TICK_INTERVAL: &str = "10s";
pub const DEFAULT_SHUTDOWN_TIMEOUT: &str = "10s";

/// This instance, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceConfig {
    /// `None`: detect (see [`crate::k8s::role::detect`]).
    pub role: Option<Role>,
    pub listen: SocketAddr,
    pub node_name: Option<String>,
    /// `None`: from the GCE metadata server, else `unknown`.
    pub cluster_name: Option<String>,
    pub kubeconfig: Option<PathBuf>,
    pub procfs: PathBuf,
}

impl InstanceOptions {
    pub fn resolve(self) -> Result<InstanceConfig> {
        let listen_s = self.listen.unwrap_or_else(|| DEFAULT_LISTEN.into());
        let listen = listen_s.trim().parse::<SocketAddr>().map_err(|e| {
            invalid(
                "--listen",
                &listen_s,
                format!("{e} (expected IP:PORT, e.g. 0.0.0.0:2020)"),
            )
        })?;
        if let Some(n) = &self.node_name
            && (n.trim().is_empty() || n.len() > 253)
        {
            return Err(invalid("--node-name", n, "must be 1 to 253 characters"));
        }
        if let Some(c) = &self.cluster_name
            && c.trim().is_empty()
        {
            return Err(invalid("--cluster-name", c, "must not be empty"));
        }
        Ok(InstanceConfig {
            role: self.role,
            listen,
            node_name: self.node_name,
            cluster_name: self.cluster_name,
            // load-watcher's --kube-config last: the merged --kubeconfig (flag, environment,
            // file) wins.
            kubeconfig: self.kubeconfig.or(self.kube_config),
            procfs: self.procfs.unwrap_or_else(|| PathBuf::from("/proc")),
        })
    }
}

/// The global schedule, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduleConfig {
    /// `None`: 15 s for the host source, 60 s for remote backends (load-watcher's minute).
    pub interval: Option<Duration>,
    pub timeout: Duration,
    /// Successful fetches without a host before it leaves the hub (0: never).
    pub expire_after_fetches: u32,
    pub tick_interval: Duration,
    pub shutdown_timeout: Duration,
}

impl ScheduleOptions {
    pub fn resolve(self) -> Result<ScheduleConfig> {
        let secs = Duration::from_secs;
        let interval = self
            .interval
            .as_deref()
            .map(|s| duration("--interval", s, secs(1), secs(3600)))
            .transpose()?;
        let timeout_s = self.timeout.unwrap_or_else(|| DEFAULT_TIMEOUT.into());
        let timeout = duration(
            "--timeout",
            &timeout_s,
            Duration::from_millis(100),
            secs(3600),
        )?;
        if let (Some(i), Some(i_s)) = (interval, &self.interval)
            && timeout > i
        {
            return Err(invalid(
                "--timeout",
                &timeout_s,
                format!("must not exceed --interval ({i_s})"),
            ));
        }
        let expire_after_fetches = match self.expire_after_fetches {
            Some(s) => s.trim().parse::<u32>().map_err(|_| {
                invalid(
                    "--expire-after-fetches",
                    &s,
                    "must be a whole number of fetches (0 keeps hosts forever)",
                )
            })?,
            None => crate::sources::usage::DEFAULT_EXPIRE_AFTER,
        };
        let tick_s = self
            .tick_interval
            .unwrap_or_else(|| DEFAULT_TICK_INTERVAL.into());
        let tick_interval = duration("--tick-interval", &tick_s, secs(1), secs(600))?;
        let shutdown_s = self
            .shutdown_timeout
            .unwrap_or_else(|| DEFAULT_SHUTDOWN_TIMEOUT.into());
        let shutdown_timeout =
            duration("--shutdown-timeout", &shutdown_s, Duration::ZERO, secs(300))?;
        Ok(ScheduleConfig {
            interval,
            timeout,
            expire_after_fetches,
            tick_interval,
            shutdown_timeout,
        })
    }
}
