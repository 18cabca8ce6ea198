//! The HTTP server's options: TLS (`--tls-*`, `--client-ca-file`), `--auth` and the listener's
//! limits (`--server-*`), resolved into [`ServeConfig`].

use std::path::PathBuf;
use std::time::Duration;

use super::auth::{AuthConfig, CACHE_CAPACITY, REVIEW_TIMEOUT};
use super::listener::ListenerLimits;
use super::tls::TlsConfig;
use crate::shared::error::Result;
use crate::shared::options::{bytes, duration, invalid, path};

pub const DEFAULT_TLS_RELOAD_INTERVAL: &str = "10s";
pub const DEFAULT_AUTH_CACHE_TTL: &str = "2m";

/// The listener's defaults; their sources are in docs/endpoints.md ("Listener limits").
pub mod defaults {
    use std::time::Duration;

    /// kube-state-metrics' `--server-read-header-timeout`.
    pub const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
    /// kube-state-metrics' `--server-idle-timeout` and Prometheus' `--web.read-timeout`, which
    /// closes idle connections: 5 minutes, a Prometheus scraper's own idle timeout.
    pub const IDLE_TIMEOUT: Duration = Duration::from_secs(300);
    /// kube-state-metrics' `--server-write-timeout`.
    pub const WRITE_TIMEOUT: Duration = Duration::from_secs(60);
    /// Prometheus' `--web.max-connections`.
    pub const MAX_CONNECTIONS: usize = 512;
    /// 16 KiB: Go's 1 MiB (what all three inherit) times the cap would be 512 MiB of heads.
    pub const MAX_HEADER_BYTES: usize = 16 * 1024;
    /// 8 KiB, half the head: our targets are `/metrics` and `/watcher?host=NODE`.
    pub const MAX_REQUEST_LINE_BYTES: usize = 8 * 1024;
}

/// How the HTTP server is guarded.
#[derive(Debug, Clone, Default, PartialEq, clap::Args, serde::Deserialize)]
#[serde(default)]
pub struct ServeOptions {
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

    /// A connection whose request line and headers have not all arrived this long after its
    /// first byte (on a new connection: after the accept, TLS handshake included) is closed.
    /// [default: 5s]
    #[arg(
        long,
        env = "KUBE_PROBER_SERVER_READ_HEADER_TIMEOUT",
        value_name = "DURATION"
    )]
    pub server_read_header_timeout: Option<String>,

    /// A kept-alive connection that sends no new request this long after its last answer is
    /// closed. [default: 5m]
    #[arg(long, env = "KUBE_PROBER_SERVER_IDLE_TIMEOUT", value_name = "DURATION")]
    pub server_idle_timeout: Option<String>,

    /// An answer not written out this long after its request's headers were read (a client
    /// that stopped reading) closes its connection. [default: 60s]
    #[arg(
        long,
        env = "KUBE_PROBER_SERVER_WRITE_TIMEOUT",
        value_name = "DURATION"
    )]
    pub server_write_timeout: Option<String>,

    /// Open connections at most; past it, the connection that has waited longest without
    /// sending a whole request is closed to make room (a new one is refused only when every
    /// connection is in the middle of a request). [default: 512]
    #[arg(long, env = "KUBE_PROBER_SERVER_MAX_CONNECTIONS", value_name = "N")]
    #[serde(deserialize_with = "crate::shared::options::u32_as_text")]
    pub server_max_connections: Option<String>,

    /// The request line and headers together may hold this many bytes; more is answered 431.
    /// Bytes or a quantity. [default: 16Ki]
    #[arg(
        long,
        env = "KUBE_PROBER_SERVER_MAX_HEADER_BYTES",
        value_name = "BYTES"
    )]
    pub server_max_header_bytes: Option<String>,

    /// The request line may hold this many bytes; more is answered 414. Below
    /// --server-max-header-bytes. [default: 8Ki]
    #[arg(
        long,
        env = "KUBE_PROBER_SERVER_MAX_REQUEST_LINE_BYTES",
        value_name = "BYTES"
    )]
    pub server_max_request_line_bytes: Option<String>,
}

crate::merge_options!(ServeOptions {
    tls_cert_file,
    tls_key_file,
    tls_reload_interval,
    client_ca_file,
    auth,
    auth_cache_ttl,
    server_read_header_timeout,
    server_idle_timeout,
    server_write_timeout,
    server_max_connections,
    server_max_header_bytes,
    server_max_request_line_bytes
});

/// How the HTTP server is guarded.
#[derive(Debug, Clone, PartialEq)]
pub struct ServeConfig {
    /// `None`: plain HTTP.
    pub tls: Option<TlsConfig>,
    /// `None`: `/metrics` and `/watcher*` are open (`--auth none`).
    pub auth: Option<AuthConfig>,
    /// The listener's timeouts and caps (`--server-*`).
    pub limits: ListenerLimits,
}

impl ServeOptions {
    pub fn resolve(mut self) -> Result<ServeConfig> {
        let (tls, client_ca) = self.tls()?;
        let limits = self.limits()?;
        let auth_s = self.auth.unwrap_or_else(|| "none".into());
        let kubernetes = match auth_s.trim().to_ascii_lowercase().as_str() {
            "none" | "" => false,
            "kubernetes" => true,
            _ => {
                return Err(invalid("--auth", &auth_s, "expected none or kubernetes"));
            }
        };
        let ttl_s = self
            .auth_cache_ttl
            .unwrap_or_else(|| DEFAULT_AUTH_CACHE_TTL.into());
        let cache_ttl = duration(
            "--auth-cache-ttl",
            &ttl_s,
            Duration::ZERO,
            Duration::from_secs(3600),
        )?;
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
        let auth = kubernetes.then_some(AuthConfig {
            cache_ttl,
            cache_capacity: CACHE_CAPACITY,
            review_timeout: REVIEW_TIMEOUT,
        });
        Ok(ServeConfig { tls, auth, limits })
    }

    /// `--server-*`: the listener's timeouts and caps.
    fn limits(&mut self) -> Result<ListenerLimits> {
        let d = ListenerLimits::default();
        let timeout = |option: &'static str, v: Option<String>, default: Duration| match v {
            None => Ok(default),
            Some(v) => duration(
                option,
                &v,
                Duration::from_millis(100),
                Duration::from_secs(3600),
            ),
        };
        let header_timeout = timeout(
            "--server-read-header-timeout",
            self.server_read_header_timeout.take(),
            d.header_timeout,
        )?;
        let idle_timeout = timeout(
            "--server-idle-timeout",
            self.server_idle_timeout.take(),
            d.idle_timeout,
        )?;
        let write_timeout = timeout(
            "--server-write-timeout",
            self.server_write_timeout.take(),
            d.write_timeout,
        )?;
        let max_connections = match self.server_max_connections.take() {
            None => d.max_connections,
            Some(v) => match v.trim().parse::<usize>() {
                Ok(n) if (1..=1_048_576).contains(&n) => n,
                _ => {
                    return Err(invalid(
                        "--server-max-connections",
                        &v,
                        "must be a whole number from 1 to 1048576",
                    ));
                }
            },
        };
        let max_header_bytes = bytes(
            "--server-max-header-bytes",
            self.server_max_header_bytes.take(),
            d.max_header_bytes,
            (1024, 1024 * 1024),
        )?;
        let line_s = self.server_max_request_line_bytes.take();
        let max_request_line_bytes = bytes(
            "--server-max-request-line-bytes",
            line_s.clone(),
            d.max_request_line_bytes.min(max_header_bytes / 2),
            (256, 1024 * 1024),
        )?;
        if max_request_line_bytes >= max_header_bytes {
            return Err(invalid(
                "--server-max-request-line-bytes",
                &line_s.unwrap_or_else(|| max_request_line_bytes.to_string()),
                format!(
                    "must be below --server-max-header-bytes ({max_header_bytes}), which counts the request line too"
                ),
            ));
        }
        Ok(ListenerLimits {
            header_timeout,
            idle_timeout,
            write_timeout,
            max_connections,
            max_header_bytes,
            max_request_line_bytes,
        })
    }

    /// `--tls-cert-file`, `--tls-key-file`, `--tls-reload-interval` and `--client-ca-file`.
    fn tls(&mut self) -> Result<(Option<TlsConfig>, Option<PathBuf>)> {
        let cert = path("--tls-cert-file", self.tls_cert_file.take())?;
        let key = path("--tls-key-file", self.tls_key_file.take())?;
        let client_ca = path("--client-ca-file", self.client_ca_file.take())?;
        let reload_s = self
            .tls_reload_interval
            .take()
            .unwrap_or_else(|| DEFAULT_TLS_RELOAD_INTERVAL.into());
        let reload_interval = duration(
            "--tls-reload-interval",
            &reload_s,
            Duration::from_secs(1),
            Duration::from_secs(3600),
        )?;
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
            (Some(cert_file), Some(key_file)) => Some(TlsConfig {
                cert_file,
                key_file,
                client_ca_file: client_ca.clone(),
                reload_interval,
            }),
        };
        Ok((tls, client_ca))
    }
}
