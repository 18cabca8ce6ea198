//! The HTTP server's options: TLS (`--tls-*`, `--client-ca-file`) and `--auth`, resolved into
//! [`ServeConfig`].

use std::path::PathBuf;
use std::time::Duration;

use super::auth::{AuthConfig, CACHE_CAPACITY, REVIEW_TIMEOUT};
use super::tls::TlsConfig;
use crate::shared::error::Result;
use crate::shared::options::{duration, invalid, path};

pub const DEFAULT_TLS_RELOAD_INTERVAL: &str = "10s";
pub const DEFAULT_AUTH_CACHE_TTL: &str = "2m";

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
}

crate::merge_options!(ServeOptions {
    tls_cert_file,
    tls_key_file,
    tls_reload_interval,
    client_ca_file,
    auth,
    auth_cache_ttl
});

/// How the HTTP server is guarded.
#[derive(Debug, Clone, PartialEq)]
pub struct ServeConfig {
    /// `None`: plain HTTP.
    pub tls: Option<TlsConfig>,
    /// `None`: `/metrics` and `/watcher*` are open (`--auth none`).
    pub auth: Option<AuthConfig>,
}

impl ServeOptions {
    pub fn resolve(mut self) -> Result<ServeConfig> {
        let (tls, client_ca) = self.tls()?;
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
        Ok(ServeConfig { tls, auth })
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
