//! The resolved configuration: flags over environment over the YAML file over defaults, every
//! value checked at start. A bad value is an [`Error::Config`] naming the option and the value.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::cli::{Cli, LogFormat, Role};
use crate::error::{Error, Result};

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
    pub tick_interval: Option<String>,
    pub shutdown_timeout: Option<String>,
    pub log_level: Option<String>,
    pub log_format: Option<LogFormat>,
}

impl FileConfig {
    /// Reads and parses a config file.
    pub fn read(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::ConfigFile {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
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
        serde_yaml_ng::from_str(text).map_err(|e| e.to_string())
    }
}

/// Everything the program runs with.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// `None`: detect (see [`crate::role::detect`]).
    pub role: Option<Role>,
    pub listen: SocketAddr,
    pub node_name: Option<String>,
    pub cluster_name: String,
    pub kubeconfig: Option<PathBuf>,
    pub procfs: PathBuf,
    pub interval: Duration,
    pub timeout: Duration,
    pub tick_interval: Duration,
    pub shutdown_timeout: Duration,
    pub log_level: String,
    pub log_format: LogFormat,
}

pub const DEFAULT_LISTEN: &str = "0.0.0.0:2020";
pub const DEFAULT_INTERVAL: &str = "15s";
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

/// Parses a duration like `15s`, `1m30s`, `500ms`, bounded to `[min, max]`.
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
    pub fn resolve(cli: Cli, file: FileConfig) -> Result<Self> {
        let listen_s = cli
            .listen
            .or(file.listen)
            .unwrap_or_else(|| DEFAULT_LISTEN.into());
        let listen = listen_s.trim().parse::<SocketAddr>().map_err(|e| {
            invalid(
                "--listen",
                &listen_s,
                format!("{e} (expected IP:PORT, e.g. 0.0.0.0:2020)"),
            )
        })?;

        let node_name = cli.node_name.or(file.node_name);
        if let Some(n) = &node_name
            && (n.trim().is_empty() || n.len() > 253)
        {
            return Err(invalid("--node-name", n, "must be 1 to 253 characters"));
        }
        let cluster_name = cli
            .cluster_name
            .or(file.cluster_name)
            .unwrap_or_else(|| "unknown".into());
        if cluster_name.trim().is_empty() {
            return Err(invalid(
                "--cluster-name",
                &cluster_name,
                "must not be empty",
            ));
        }

        let secs = Duration::from_secs;
        let interval_s = cli
            .interval
            .or(file.interval)
            .unwrap_or_else(|| DEFAULT_INTERVAL.into());
        let interval = duration("--interval", &interval_s, secs(1), secs(3600))?;
        let timeout_s = cli
            .timeout
            .or(file.timeout)
            .unwrap_or_else(|| DEFAULT_TIMEOUT.into());
        let timeout = duration(
            "--timeout",
            &timeout_s,
            Duration::from_millis(100),
            secs(3600),
        )?;
        if timeout > interval {
            return Err(invalid(
                "--timeout",
                &timeout_s,
                format!("must not exceed --interval ({interval_s})"),
            ));
        }
        let tick_s = cli
            .tick_interval
            .or(file.tick_interval)
            .unwrap_or_else(|| DEFAULT_TICK_INTERVAL.into());
        let tick_interval = duration("--tick-interval", &tick_s, secs(1), secs(600))?;
        let shutdown_s = cli
            .shutdown_timeout
            .or(file.shutdown_timeout)
            .unwrap_or_else(|| DEFAULT_SHUTDOWN_TIMEOUT.into());
        let shutdown_timeout =
            duration("--shutdown-timeout", &shutdown_s, Duration::ZERO, secs(300))?;

        let log_level = cli
            .log_level
            .or(file.log_level)
            .unwrap_or_else(|| "info".into());
        tracing_subscriber::EnvFilter::builder()
            .parse(&log_level)
            .map_err(|e| {
                invalid(
                    "--log-level",
                    &log_level,
                    format!("{e} (expected e.g. info, debug, kube_prober=debug)"),
                )
            })?;

        Ok(Config {
            role: cli.role.or(file.role),
            listen,
            node_name,
            cluster_name,
            kubeconfig: cli.kubeconfig.or(file.kubeconfig),
            procfs: cli
                .procfs
                .or(file.procfs)
                .unwrap_or_else(|| PathBuf::from("/proc")),
            interval,
            timeout,
            tick_interval,
            shutdown_timeout,
            log_level,
            log_format: cli.log_format.or(file.log_format).unwrap_or_default(),
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
    fn defaults() {
        let c = Config::resolve(Cli::default(), FileConfig::default()).unwrap();
        assert_eq!(c.listen, "0.0.0.0:2020".parse().unwrap());
        assert_eq!(c.interval, Duration::from_secs(15));
        assert_eq!(c.timeout, Duration::from_secs(10));
        assert_eq!(c.tick_interval, Duration::from_secs(10));
        assert_eq!(c.procfs, PathBuf::from("/proc"));
        assert_eq!(c.cluster_name, "unknown");
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
        assert_eq!(c.interval, Duration::from_secs(30));
        assert_eq!(c.role, Some(Role::Host));
        assert_eq!(c.log_format, LogFormat::Json);
        assert_eq!(c.node_name.as_deref(), Some("from-file"));
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
            cli(|c| c.timeout = Some("20s".into())),
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
    fn unknown_file_keys_are_errors() {
        let e = FileConfig::parse("lisen: 1.2.3.4:5\n").unwrap_err();
        assert!(e.contains("unknown field `lisen`"), "{e}");
        let e = FileConfig::parse("role: admiral\n").unwrap_err();
        assert!(e.contains("role"), "{e}");
        assert_eq!(FileConfig::parse("\n").unwrap(), FileConfig::default());
    }
}
