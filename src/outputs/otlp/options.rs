//! The OTLP output's options (`--otlp-*`), resolved into the [`OtlpConfig`] the sink takes;
//! what they leave unset falls back to the `OTEL_EXPORTER_OTLP_*` variables
//! ([`OtlpOptions::resolve`]).

use std::path::PathBuf;
use std::time::Duration;

use super::{OtlpConfig, Semconv};
use crate::shared::error::Result;
use crate::shared::options::invalid;

/// The OTLP push output (`--sink otlp`).
#[derive(Debug, Clone, Default, PartialEq, clap::Args, serde::Deserialize)]
#[serde(default)]
pub struct OtlpOptions {
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

    /// Names of the Kubernetes metrics over OTLP: `stable` (the semantic conventions', as the
    /// Collector's k8scluster and kubeletstats receivers send them with the
    /// `semconv.k8s.enableStable` feature gate) or `legacy` (as they send them without it, e.g.
    /// k8s.node.allocatable_cpu). [default: stable]
    #[arg(long, env = "KUBE_PROBER_OTLP_SEMCONV", value_name = "stable|legacy")]
    pub otlp_semconv: Option<String>,
}

crate::merge_options!(OtlpOptions {
    otlp_protocol,
    otlp_endpoint,
    otlp_headers,
    otlp_ca_file,
    otlp_client_cert,
    otlp_client_key,
    otlp_compression,
    otlp_max_points_per_request,
    otlp_semconv
});

/// What the OTLP output's resolution takes from other components' options: the request
/// timeout (the root sets it below `--sink-timeout`) and the answer cap (`--max-response-bytes`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct OtlpBounds {
    /// `None`: `$OTEL_EXPORTER_OTLP_(METRICS_)TIMEOUT`, else [`DEFAULT_TIMEOUT`](super::DEFAULT_TIMEOUT).
    pub timeout: Option<Duration>,
    /// `None`: [`DEFAULT_MAX_RESPONSE_BYTES`](crate::shared::limit::DEFAULT_MAX_RESPONSE_BYTES).
    pub max_response_bytes: Option<usize>,
}

impl OtlpOptions {
    /// The files and the client-certificate pair, checked whether or not the sink runs.
    pub fn check(&self) -> Result<()> {
        for (option, path) in [
            ("--otlp-ca-file", &self.otlp_ca_file),
            ("--otlp-client-cert", &self.otlp_client_cert),
            ("--otlp-client-key", &self.otlp_client_key),
        ] {
            if let Some(p) = path
                && !p.is_file()
            {
                return Err(invalid(option, &p.display().to_string(), "no such file"));
            }
        }
        self.semconv()?;
        if self.otlp_client_cert.is_some() != self.otlp_client_key.is_some() {
            return Err(invalid(
                "--otlp-client-cert",
                &format!("{:?}", self.otlp_client_cert),
                "a client certificate needs --otlp-client-key, and the other way round",
            ));
        }
        Ok(())
    }

    /// `--otlp-semconv`, or its default [`Semconv::Stable`].
    pub fn semconv(&self) -> Result<Semconv> {
        let Some(given) = self.otlp_semconv.as_deref() else {
            return Ok(Semconv::default());
        };
        Semconv::ALL
            .into_iter()
            .find(|s| s.as_str() == given.trim())
            .ok_or_else(|| invalid("--otlp-semconv", given, "expected stable or legacy"))
    }

    /// The sink's config: the options checked, what they leave unset taken from the
    /// `OTEL_EXPORTER_OTLP_*` variables of the process, then the defaults; the files read.
    /// `bounds` are the root's to set (they come from `--sink-timeout` and
    /// `--max-response-bytes`).
    pub fn resolve(self, bounds: OtlpBounds) -> Result<OtlpConfig> {
        self.resolve_with(bounds, &|name| std::env::var(name).ok())
    }
}
