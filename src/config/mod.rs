//! The resolved configuration: flags over environment over the YAML file over defaults, every
//! value checked at start. A bad value is an [`Error::Config`] naming the option and the value.
//!
//! Each component owns its options: one `XxxOptions` struct in the component's room (clap
//! `Args` and serde `Deserialize`), which resolves and validates itself. This root only
//! composes them ([`Options`]: flattened into the flags in [`cli`] and into the config file),
//! merges flag over file field by field, and checks what spans components. May import every
//! layer below it, never [`crate::app`].

pub mod cli;
pub mod instance;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use crate::config::cli::Cli;
use crate::k8s::leader_options::{LeaderConfig, LeaderOptions};
use crate::k8s::role::Role;
use crate::outputs::gcm::{GcmConfig, GcmOptions};
use crate::outputs::otlp::{OtlpBounds, OtlpConfig, OtlpOptions};
use crate::outputs::push::{PushOptions, SinkKind};
use crate::outputs::select::{SelectConfig, SelectOptions};
use crate::outputs::watcher::{WatcherConfig, WatcherOptions};
use crate::serve::options::{ServeConfig, ServeOptions};
use crate::shared::error::{Cause, Error, Result};
use crate::shared::limit::{LimitConfig, LimitOptions};
use crate::shared::options::{Merge, check_keys, field_names};
use crate::shared::suggest::did_you_mean;
use crate::shared::telemetry::{LogConfig, LogOptions};
use crate::sources::cluster::estimate::EstimateConfig;
use crate::sources::cluster::options::{
    EstimateOptions, ScopeConfig, ScopeOptions, WorkloadConfig, WorkloadOptions,
};
use crate::sources::probe::options::{ProbeConfig, ProbeOptions};
use crate::sources::task::options::{KubeletOptions, TaskConfig, TaskOptions};
use crate::sources::usage::options::{BackendOptions, UsageConfig, UsageOptions};

pub use instance::{DEFAULT_LISTEN, InstanceOptions, ScheduleOptions};

/// Declares [`Options`], every component's options in the order `--help` lists them, with
/// what the root does for each: parse it from the config file, merge flag over file, and
/// list its file keys.
macro_rules! compose {
    ($($field:ident: $ty:ty),* $(,)?) => {
        /// Every option, one field per component; the flags flatten it (see [`cli::Cli`]) and
        /// so does the config file (see [`FileConfig`]).
        #[derive(Debug, Clone, Default, PartialEq, clap::Args)]
        pub struct Options {
            $(#[command(flatten)] pub $field: $ty,)*
        }

        impl Options {
            /// Every key the config file accepts, component by component.
            pub fn keys() -> &'static [&'static str] {
                static KEYS: OnceLock<Vec<&'static str>> = OnceLock::new();
                KEYS.get_or_init(|| [$(field_names::<$ty>()),*].concat())
            }

            /// Each component's options read from the same config-file text.
            fn from_yaml(text: &str) -> std::result::Result<Self, BadConfigText> {
                Ok(Options { $($field: component(text)?,)* })
            }
        }

        impl Merge for Options {
            fn or(self, file: Self) -> Self {
                Options { $($field: self.$field.or(file.$field),)* }
            }
        }
    };
}

compose! {
    instance: InstanceOptions,
    schedule: ScheduleOptions,
    log: LogOptions,
    usage: UsageOptions,
    workloads: WorkloadOptions,
    probes: ProbeOptions,
    backends: BackendOptions,
    watcher: WatcherOptions,
    push: PushOptions,
    otlp: OtlpOptions,
    gcm: GcmOptions,
    leader: LeaderOptions,
    serve: ServeOptions,
    task: TaskOptions,
    limit: LimitOptions,
    kubelet: KubeletOptions,
    scope: ScopeOptions,
    estimate: EstimateOptions,
    select: SelectOptions,
}

/// The config file: the same keys as the flags, dashes as underscores (`sinks` for `--sink`),
/// plus the file-only `probes` and `prometheus_metrics`. Unknown keys are errors.
pub type FileConfig = Options;

/// Why the config file's text cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum BadConfigText {
    /// The YAML parser's (or serde's) error, with a "did you mean" for an unknown key or value.
    #[error("{source}{}", .suggestion.as_deref().map(|k| format!(" (did you mean `{k}`?)")).unwrap_or_default())]
    Yaml {
        #[source]
        source: serde_yaml_ng::Error,
        suggestion: Option<String>,
    },
    #[error("brackets nested deeper than {MAX_CONFIG_NESTING} levels")]
    TooDeep,
}

impl From<serde_yaml_ng::Error> for BadConfigText {
    fn from(source: serde_yaml_ng::Error) -> Self {
        let suggestion = suggestion_for(&source.to_string());
        BadConfigText::Yaml { source, suggestion }
    }
}

/// One component's options from the config-file text (keys of other components ignored).
fn component<T: serde::de::DeserializeOwned>(text: &str) -> std::result::Result<T, BadConfigText> {
    Ok(serde_yaml_ng::from_str(text)?)
}

/// The "did you mean" for serde's `unknown field `x`, expected one of `a`, `b`` (and
/// `unknown variant`) messages, from the names serde lists: serde's error holds them only in
/// its text.
fn suggestion_for(msg: &str) -> Option<String> {
    let (_, rest) = msg
        .split_once("unknown field `")
        .or_else(|| msg.split_once("unknown variant `"))?;
    let (word, expected) = rest.split_once('`')?;
    let known: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
    did_you_mean(word, known).map(str::to_string)
}

/// A config file larger than this is an error (a real one is a few kilobytes).
pub const MAX_CONFIG_FILE_BYTES: u64 = 1 << 20;
/// Flow collections (`[`, `{`) nested deeper than this are an error.
pub const MAX_CONFIG_NESTING: usize = 64;

impl Options {
    /// Reads and parses a config file (at most [`MAX_CONFIG_FILE_BYTES`]).
    pub fn read(path: &Path) -> Result<Self> {
        use std::io::Read;
        let io_err = |e: std::io::Error| Error::ConfigFile {
            path: path.to_path_buf(),
            source: Cause::other(e),
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
                source: Cause::message(format!("larger than {MAX_CONFIG_FILE_BYTES} bytes")),
            });
        }
        Self::parse(&text).map_err(|e| Error::ConfigFile {
            path: path.to_path_buf(),
            source: Cause::other(e),
        })
    }

    /// Parses config-file text. An empty file is an empty config; a key no component knows is
    /// an error with serde's own message and a "did you mean".
    pub fn parse(text: &str) -> std::result::Result<Self, BadConfigText> {
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
                return Err(BadConfigText::TooDeep);
            }
        }
        let de = serde_yaml_ng::Deserializer::from_str(text);
        check_keys(de, "FileConfig", Self::keys())?;
        Self::from_yaml(text)
    }
}

/// The push outputs and their shared schedule.
#[derive(Debug, Clone, PartialEq)]
pub struct SinksConfig {
    pub kinds: Vec<SinkKind>,
    pub interval: Duration,
    pub timeout: Duration,
    /// The OTLP sink's config when `--sink otlp` is given (its options are checked either
    /// way), its request timeout and answer cap set from the others.
    pub otlp: Option<OtlpConfig>,
    /// The Cloud Monitoring sink's config; project and location may wait for the metadata
    /// server, the rest of the instance's facts are added at start.
    pub gcm: GcmConfig,
    pub leader: LeaderConfig,
}

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
    pub log: LogConfig,
    pub usage: UsageConfig,
    /// How `/watcher` writes values.
    pub watcher: WatcherConfig,
    /// Where addons are looked for.
    pub workloads: WorkloadConfig,
    pub probes: ProbeConfig,
    pub sinks: SinksConfig,
    pub serve: ServeConfig,
    pub task: TaskConfig,
    /// Cap on every answer read from outside (see [`crate::shared::limit`]).
    pub limit: LimitConfig,
    /// Cluster role: which pods the pod watcher follows, and the shard.
    pub scope: ScopeConfig,
    /// How the pod watcher estimates the load of just-bound pods.
    pub estimate: EstimateConfig,
    /// Which families `--metric-allowlist`/`--metric-denylist` leave out.
    pub select: SelectConfig,
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

    /// Merges flags (already holding their environment fallbacks) over the file; each
    /// component resolves and checks its own options, then what spans components is set.
    pub fn resolve(cli: Cli, file: FileConfig) -> Result<Self> {
        let o = cli.options.or(file);
        let usage = o.usage.resolve(o.backends)?;
        let serve = o.serve.resolve()?;
        let limit = o.limit.resolve()?;
        let sinks = Self::sinks(o.push, o.otlp, o.gcm, o.leader, limit)?;
        let probes = o.probes.resolve()?;
        let task = o.task.resolve(o.kubelet)?;
        let scope = o.scope.resolve()?;
        let estimate = o.estimate.resolve()?;
        let select = o.select.resolve()?;
        let workloads = o.workloads.resolve()?;
        let i = o.instance.resolve()?;
        let s = o.schedule.resolve()?;
        let log = o.log.resolve()?;
        Ok(Config {
            role: i.role,
            listen: i.listen,
            node_name: i.node_name,
            cluster_name: i.cluster_name,
            kubeconfig: i.kubeconfig,
            procfs: i.procfs,
            interval: s.interval,
            timeout: s.timeout,
            expire_after_fetches: s.expire_after_fetches,
            tick_interval: s.tick_interval,
            shutdown_timeout: s.shutdown_timeout,
            log,
            usage,
            watcher: o.watcher.resolve(s.interval)?,
            workloads,
            probes,
            sinks,
            serve,
            task,
            limit,
            scope,
            estimate,
            select,
        })
    }

    /// The push outputs: each sink's config, with the deadline and answer cap that come from
    /// the push schedule and `--max-response-bytes`.
    fn sinks(
        push: PushOptions,
        otlp: OtlpOptions,
        gcm: GcmOptions,
        leader: LeaderOptions,
        limit: LimitConfig,
    ) -> Result<SinksConfig> {
        let plan = push.resolve()?;
        // The environment's `OTEL_*` variables are read, and the files, only for a sink that runs.
        let otlp = match plan.kinds.contains(&SinkKind::Otlp) {
            true => Some(otlp.resolve(OtlpBounds {
                // Retries stop before the runner's timeout would cut the push off.
                timeout: Some(plan.timeout.mul_f64(0.9)),
                max_response_bytes: Some(limit.max_response_bytes),
            })?),
            false => {
                otlp.check()?;
                None
            }
        };
        let mut gcm = gcm.resolve()?;
        gcm.push_deadline = plan.timeout.mul_f64(0.9);
        Ok(SinksConfig {
            kinds: plan.kinds,
            interval: plan.interval,
            timeout: plan.timeout,
            otlp,
            gcm,
            leader: leader.resolve()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{MetricType, Resource};
    use crate::shared::telemetry::LogFormat;
    use crate::sources::cluster::options::ShardMode;
    use crate::sources::usage::MetricsProvider;

    /// Flags as if given on the command line, without the environment.
    fn flags(f: impl FnOnce(&mut Options)) -> Cli {
        let mut c = Cli::default();
        f(&mut c.options);
        c
    }

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
            cli(|c| c.options.serve.tls_cert_file = Some("/t/tls.crt".into())),
            FileConfig::default(),
        );
        assert!(
            e.contains("--tls-cert-file") && e.contains("both or neither"),
            "{e}"
        );
        let e = err(
            cli(|c| c.options.serve.auth = Some("rbac".into())),
            FileConfig::default(),
        );
        assert!(e.contains("--auth") && e.contains("'rbac'"), "{e}");
        let e = err(
            cli(|c| c.options.serve.auth_cache_ttl = Some("soon".into())),
            FileConfig::default(),
        );
        assert!(e.contains("--auth-cache-ttl"), "{e}");
        let e = err(
            cli(|c| c.options.serve.tls_reload_interval = Some("100ms".into())),
            FileConfig::default(),
        );
        assert!(e.contains("--tls-reload-interval"), "{e}");
        let e = err(
            cli(|c| {
                c.options.serve.client_ca_file = Some("/t/ca.crt".into());
                c.options.serve.auth = Some("kubernetes".into());
            }),
            FileConfig::default(),
        );
        assert!(e.contains("need TLS"), "{e}");
    }

    #[test]
    fn listener_limits() {
        use crate::serve::listener::ListenerLimits;
        let c = Config::resolve(Cli::default(), FileConfig::default()).unwrap();
        assert_eq!(
            c.serve.limits,
            ListenerLimits {
                header_timeout: Duration::from_secs(5),
                idle_timeout: Duration::from_secs(300),
                write_timeout: Duration::from_secs(60),
                max_connections: 512,
                max_header_bytes: 16 * 1024,
                max_request_line_bytes: 8 * 1024,
            }
        );
        let file = FileConfig::parse(
            "server_read_header_timeout: 2s\nserver_idle_timeout: 1m\nserver_write_timeout: 30s\nserver_max_connections: 64\nserver_max_header_bytes: 4Ki\n",
        )
        .unwrap();
        let l = Config::resolve(Cli::default(), file).unwrap().serve.limits;
        assert_eq!(l.header_timeout, Duration::from_secs(2));
        assert_eq!(l.idle_timeout, Duration::from_secs(60));
        assert_eq!(l.write_timeout, Duration::from_secs(30));
        assert_eq!(l.max_connections, 64);
        assert_eq!(l.max_header_bytes, 4096);
        assert_eq!(
            l.max_request_line_bytes, 2048,
            "the default request line is half a smaller head"
        );
        let bad = |f: fn(&mut ServeOptions)| {
            let mut c = Cli::default();
            f(&mut c.options.serve);
            err(c, FileConfig::default())
        };
        let e = bad(|s| s.server_read_header_timeout = Some("10ms".into()));
        assert!(e.contains("--server-read-header-timeout"), "{e}");
        let e = bad(|s| s.server_idle_timeout = Some("forever".into()));
        assert!(e.contains("--server-idle-timeout"), "{e}");
        let e = bad(|s| s.server_write_timeout = Some("2h".into()));
        assert!(e.contains("--server-write-timeout"), "{e}");
        let e = bad(|s| s.server_max_connections = Some("0".into()));
        assert!(e.contains("--server-max-connections"), "{e}");
        let e = bad(|s| s.server_max_header_bytes = Some("100".into()));
        assert!(
            e.contains("--server-max-header-bytes") && e.contains("1024"),
            "{e}"
        );
        let e = bad(|s| {
            s.server_max_header_bytes = Some("8Ki".into());
            s.server_max_request_line_bytes = Some("8Ki".into());
        });
        assert!(
            e.contains("--server-max-request-line-bytes") && e.contains("below"),
            "{e}"
        );
    }

    #[test]
    fn defaults() {
        let c = Config::resolve(Cli::default(), FileConfig::default()).unwrap();
        assert_eq!(c.listen, "0.0.0.0:2020".parse().unwrap());
        assert_eq!(c.interval, None);
        assert_eq!(c.usage.provider, None);
        assert_eq!(c.usage.prometheus.node_label, "instance");
        assert!(!c.usage.remote.insecure_skip_verify);
        assert_eq!(c.timeout, Duration::from_secs(10));
        assert_eq!(c.tick_interval, Duration::from_secs(10));
        assert_eq!(c.procfs, PathBuf::from("/proc"));
        assert_eq!(c.cluster_name, None);
        assert_eq!(c.role, None);
        assert_eq!(c.log.format, LogFormat::Text);
    }

    #[test]
    fn flags_win_over_file() {
        let file = FileConfig::parse(
            "listen: 127.0.0.1:9000\ninterval: 30s\nrole: host\nlog_format: json\nnode_name: from-file\n",
        )
        .unwrap();
        let cli = flags(|o| {
            o.instance.listen = Some("127.0.0.1:9100".into());
        });
        let c = Config::resolve(cli, file).unwrap();
        assert_eq!(c.listen, "127.0.0.1:9100".parse().unwrap());
        assert_eq!(c.interval, Some(Duration::from_secs(30)));
        assert_eq!(c.role, Some(Role::Host));
        assert_eq!(c.log.format, LogFormat::Json);
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
        let cli = flags(|o| {
            o.schedule.expire_after_fetches = Some("0".into());
        });
        let file = FileConfig::parse("expire_after_fetches: 5\n").unwrap();
        assert_eq!(Config::resolve(cli, file).unwrap().expire_after_fetches, 0);
        let cli = flags(|o| {
            o.schedule.expire_after_fetches = Some("two".into());
        });
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
            cli(|c| c.options.instance.listen = Some("nope".into())),
            FileConfig::default(),
        );
        assert!(e.contains("--listen") && e.contains("'nope'"), "{e}");
        let e = err(
            cli(|c| c.options.schedule.interval = Some("soon".into())),
            FileConfig::default(),
        );
        assert!(e.contains("--interval") && e.contains("'soon'"), "{e}");
        let e = err(
            cli(|c| c.options.schedule.interval = Some("0s".into())),
            FileConfig::default(),
        );
        assert!(e.contains("between"), "{e}");
        let e = err(
            cli(|c| {
                c.options.schedule.interval = Some("10s".into());
                c.options.schedule.timeout = Some("20s".into());
            }),
            FileConfig::default(),
        );
        assert!(
            e.contains("--timeout") && e.contains("must not exceed --interval"),
            "{e}"
        );
        let e = err(
            cli(|c| c.options.log.log_level = Some("loud=?".into())),
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
        assert_eq!(c.usage.remote.address.as_deref(), Some("http://prom:9090"));
        assert!(c.usage.remote.insecure_skip_verify);
        let e = FileConfig::parse("metrics_provider: datadog\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown provider"), "{e}");
        let bad = flags(|o| {
            o.usage.metrics_provider_address = Some("prom:9090".into());
        });
        let e = err(bad, FileConfig::default());
        assert!(e.contains("--metrics-provider-address"), "{e}");
        let both = flags(|o| {
            o.usage.metrics_provider_token = Some("t".into());
            o.usage.metrics_provider_token_file = Some("/etc/hostname".into());
        });
        assert!(err(both, FileConfig::default()).contains("not both"));
        let label = flags(|o| {
            o.backends.prometheus_node_label = Some("node-name".into());
        });
        assert!(err(label, FileConfig::default()).contains("--prometheus-node-label"));
        assert_eq!(crate::shared::options::parse_bool("TRUE"), Ok(true));
        assert!(crate::shared::options::parse_bool("maybe").is_err());
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
            .prometheus
            .metrics
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
        let cli = flags(|o| {
            o.task.sysfs = Some(PathBuf::from("/other/sys"));
        });
        let c = Config::resolve(cli, file).unwrap();
        assert_eq!(c.task.cgroup_root, PathBuf::from("/host/sys/fs/cgroup"));
        assert_eq!(c.task.sysfs, PathBuf::from("/other/sys"), "flag over file");
        assert_eq!(c.task.namespaces, ["a", "b"]);
        assert_eq!(c.task.label_allowlist, ["app.kubernetes.io/name", "tier"]);
        let e = err(
            flags(|o| {
                o.task.task_namespaces = Some("Bad_NS".into());
            }),
            FileConfig::default(),
        );
        assert!(e.contains("--task-namespaces"), "{e}");
        let e = err(
            flags(|o| {
                o.task.task_label_allowlist = Some("ok,not ok".into());
            }),
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
            flags(|o| {
                o.task.task_perf_events = Some("auto".into());
            }),
            FileConfig::parse("task_perf_events: software\n").unwrap(),
        )
        .unwrap();
        assert_eq!(
            c.task.perf_events,
            crate::model::PerfMode::Auto,
            "flag over file"
        );
        let e = err(
            flags(|o| {
                o.task.task_perf_events = Some("cycles".into());
            }),
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
        let flag = |v: &str| {
            flags(|o| {
                o.task.task_detail_every = Some(v.into());
            })
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
        let flag = |v: &str| {
            flags(|o| {
                o.task.task_container_detail_every = Some(v.into());
            })
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
        use crate::sources::task::kubelet::{KubeletAuth, KubeletConfig};
        let c = Config::resolve(Cli::default(), FileConfig::default()).unwrap();
        assert_eq!(c.task.kubelet, None, "off by default");
        let file = FileConfig::parse("kubelet_url: https://10.0.0.5:10250\n").unwrap();
        let c = Config::resolve(Cli::default(), file).unwrap();
        assert_eq!(
            c.task.kubelet,
            Some(KubeletConfig {
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
        let cli = flags(|o| {
            o.kubelet.kubelet_url = Some("https://flag:10250".into());
        });
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
                flags(|o| {
                    o.kubelet.kubelet_url = Some("10.0.0.5:10250".into());
                }),
                "--kubelet-url",
            ),
            (
                flags(|o| {
                    o.kubelet.kubelet_url = Some("https://h:1/pods?x=1".into());
                }),
                "--kubelet-url",
            ),
            (
                flags(|o| {
                    o.kubelet.kubelet_ca_file = Some("/ca".into());
                }),
                "--kubelet-ca-file",
            ),
            (
                flags(|o| {
                    o.kubelet.kubelet_url = Some("https://h:1".into());
                    o.kubelet.kubelet_client_key_file = Some("/k".into());
                }),
                "--kubelet-client-cert-file",
            ),
            (
                flags(|o| {
                    o.kubelet.kubelet_url = Some("https://h:1".into());
                    o.kubelet.kubelet_token_file = Some("/t".into());
                    o.kubelet.kubelet_client_cert_file = Some("/c".into());
                    o.kubelet.kubelet_client_key_file = Some("/k".into());
                }),
                "--kubelet-token-file",
            ),
            (
                flags(|o| {
                    o.kubelet.kubelet_url = Some("https://h:1".into());
                    o.kubelet.kubelet_token_file = Some("".into());
                }),
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
        assert_eq!(c.scope.shard, ShardMode::Off);
        let opt_in = crate::outputs::families::OPT_IN
            .iter()
            .map(|f| f.name.to_string());
        assert_eq!(c.select.excluded_families, opt_in.collect());
        let cli = |shard: Option<&str>, total: Option<&str>| {
            flags(|o| {
                o.scope.shard = shard.map(str::to_string);
                o.scope.total_shards = total.map(str::to_string);
            })
        };
        let c = Config::resolve(cli(Some("2"), Some("3")), FileConfig::default()).unwrap();
        assert_eq!(
            c.scope.shard,
            ShardMode::Static(Shard { index: 2, total: 3 })
        );
        let file = FileConfig::parse(
            "shard: 1\ntotal_shards: 4\nmetric_denylist: kube_prober_node_condition\n",
        )
        .unwrap();
        let c = Config::resolve(Cli::default(), file).unwrap();
        assert_eq!(
            c.scope.shard,
            ShardMode::Static(Shard { index: 1, total: 4 })
        );
        assert_eq!(
            c.select.excluded_families.iter().collect::<Vec<_>>(),
            [
                "kube_prober_node_condition",
                "kube_prober_node_usage_quantile_ratio"
            ]
        );
        // One shard of one is no sharding.
        let c = Config::resolve(cli(Some("0"), Some("1")), FileConfig::default()).unwrap();
        assert_eq!(c.scope.shard, ShardMode::Off);
        for (shard, total, option, words) in [
            (Some("3"), Some("3"), "--shard", "below --total-shards"),
            (Some("0"), Some("0"), "--total-shards", "at least 1"),
            (Some("1"), None, "--shard", "needs --total-shards"),
            (Some("x"), Some("2"), "--shard", "whole number"),
        ] {
            let e = err(cli(shard, total), FileConfig::default());
            assert!(e.contains(option) && e.contains(words), "{e}");
        }
        let sts = |pod: &str| {
            flags(|o| {
                o.scope.shard_from_statefulset = Some(true);
                o.scope.pod_name = Some(pod.into());
            })
        };
        let c = Config::resolve(sts("kube-prober-shard-12"), FileConfig::default()).unwrap();
        assert_eq!(
            c.scope.shard,
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
            {
                let mut c = sts("p-0");
                c.options.scope.shard = Some("0".into());
                c.options.scope.total_shards = Some("2".into());
                c
            },
            FileConfig::default(),
        );
        assert!(e.contains("exclusive"), "{e}");
        let e = err(
            flags(|o| {
                o.select.metric_allowlist = Some("kube_prober_(".into());
            }),
            FileConfig::default(),
        );
        assert!(
            e.contains("--metric-allowlist") && e.contains("regular expression"),
            "{e}"
        );
        let e = err(
            flags(|o| {
                o.select.metric_allowlist = Some("kube_prober_ticks".into());
                o.select.metric_denylist = Some("kube_prober_ticks".into());
            }),
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
        let cli = flags(|o| {
            o.probes.disable_probes = Some("http_get".into());
        });
        let c = Config::resolve(cli, file).unwrap();
        assert_eq!(
            c.probes.schedules["cluster_dns"],
            (Duration::from_secs(10), Duration::from_secs(1))
        );
        assert!(!c.probes.schedules.contains_key("gce_metadata"));
        assert!(!c.probes.schedules.contains_key("http_get"));
        let bad = flags(|o| {
            o.probes.disable_probes = Some("ping".into());
        });
        assert!(err(bad, FileConfig::default()).contains("--disable-probes"));
        let bad = flags(|o| {
            o.probes.addon_endpoints = Some("fluentbit".into());
        });
        assert!(err(bad, FileConfig::default()).contains("--addon-endpoints"));
        let file = FileConfig::parse("probes:\n  pingu: {enabled: true}\n").unwrap();
        assert!(err(Cli::default(), file).contains("pingu"));
    }

    #[test]
    fn unknown_file_keys_are_errors() {
        let e = FileConfig::parse("lisen: 1.2.3.4:5\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown field `lisen`"), "{e}");
        let e = FileConfig::parse("role: admiral\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("role"), "{e}");
        assert_eq!(FileConfig::parse("\n").unwrap(), FileConfig::default());
    }

    /// The parser's error is kept as it is, with the suggestion beside it.
    #[test]
    fn a_bad_key_keeps_the_parsers_error() {
        let e = FileConfig::parse("lisen: 1.2.3.4:5\n").unwrap_err();
        let BadConfigText::Yaml { source, suggestion } = &e else {
            panic!("{e:?}")
        };
        assert_eq!(suggestion.as_deref(), Some("listen"));
        assert!(
            source.location().is_some_and(|l| l.line() == 1),
            "{source:?}"
        );
        assert_eq!(e.to_string(), format!("{source} (did you mean `listen`?)"));
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

        let e = FileConfig::parse("lisen: 1.2.3.4:5\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("did you mean `listen`?"), "{e}");
        let e = FileConfig::parse("tick_intreval: 5s\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("did you mean `tick_interval`?"), "{e}");
        let e = FileConfig::parse("role: hots\n").unwrap_err().to_string();
        assert!(e.contains("did you mean `host`?"), "{e}");
        let e = FileConfig::parse("log_format: jsn\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("did you mean `json`?"), "{e}");
        let e = FileConfig::parse("metrics_provider: prometheous\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("did you mean `Prometheus`?"), "{e}");
        let e = FileConfig::parse("probes:\n  cluster_dns: {intervall: 5s}\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("did you mean `interval`?"), "{e}");
        let e = FileConfig::parse("completely_unrelated_key: 1\n")
            .unwrap_err()
            .to_string();
        assert!(!e.contains("did you mean"), "{e}");

        let e = err(
            flags(|o| {
                o.push.sinks = Some(vec!["otpl".into()]);
            }),
            FileConfig::default(),
        );
        assert!(e.contains("did you mean `otlp`?"), "{e}");
        let e = err(
            flags(|o| {
                o.probes.disable_probes = Some("clusterdns".into());
            }),
            FileConfig::default(),
        );
        assert!(e.contains("did you mean `cluster_dns`?"), "{e}");
        let file = FileConfig::parse("probes:\n  gce_metdata: {enabled: false}\n").unwrap();
        let e = err(Cli::default(), file);
        assert!(e.contains("did you mean `gce_metadata`?"), "{e}");
        let e = err(
            flags(|o| {
                o.log.log_level = Some("verbose".into());
            }),
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
        let cli = flags(|o| {
            o.push.sinks = Some(vec!["otlp".into(), "OTLP".into()]);
        });
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
        let otlp = c.sinks.otlp.expect("--sink otlp resolves the OTLP config");
        assert_eq!(
            otlp.protocol,
            crate::outputs::otlp::OtlpProtocol::HttpProtobuf
        );
        assert_eq!(otlp.timeout, Duration::from_secs(9), "below --sink-timeout");
        assert_eq!(c.sinks.gcm.project.as_deref(), Some("p1"));

        let bad = |cli: Cli| err(cli, FileConfig::default());
        assert!(
            bad(flags(|o| {
                o.push.sinks = Some(vec!["kafka".into()]);
            }))
            .contains("--sink")
        );
        assert!(
            bad(flags(|o| {
                o.push.sink_interval = Some("10s".into());
                o.push.sink_timeout = Some("20s".into());
            }))
            .contains("--sink-timeout")
        );
        assert!(
            bad(flags(|o| {
                o.leader.leader_elect_renew_deadline = Some("15s".into());
            }))
            .contains("--leader-elect-renew-deadline")
        );
        assert!(
            bad(flags(|o| {
                o.gcm.gcm_prefix = Some("a//b".into());
            }))
            .contains("--gcm-prefix")
        );
        assert!(
            bad(flags(|o| {
                o.otlp.otlp_client_cert = Some("Cargo.toml".into());
            }))
            .contains("--otlp-client-key")
        );
        assert!(
            bad(flags(|o| {
                o.gcm.gcm_project = Some(" ".into());
            }))
            .contains("--gcm-project")
        );
    }
}
