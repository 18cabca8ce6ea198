//! The resolved [`OtlpConfig`] the sink takes, the resolution of [`OtlpOptions`] against the
//! `OTEL_*` environment ([`OtlpOptions::resolve_with`]), and the resource attributes
//! ([`OtlpResource`]).

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::Semconv;
use super::options::{OtlpBounds, OtlpOptions};
use crate::shared::error::{Error, Result};
use crate::shared::limit::DEFAULT_MAX_RESPONSE_BYTES;

/// The wire protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OtlpProtocol {
    /// OTLP/gRPC (`grpc`).
    Grpc,
    /// OTLP/HTTP with binary protobuf bodies (`http/protobuf`).
    HttpProtobuf,
}

impl OtlpProtocol {
    pub fn as_str(self) -> &'static str {
        match self {
            OtlpProtocol::Grpc => "grpc",
            OtlpProtocol::HttpProtobuf => "http/protobuf",
        }
    }
}

/// Request body compression.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OtlpCompression {
    None,
    Gzip,
}

/// TLS material, read from files when the options resolve.
#[derive(Clone, PartialEq, Eq)]
pub struct OtlpTls {
    /// PEM CA bundle; `None` trusts the built-in (webpki / platform) roots.
    pub ca_pem: Option<Vec<u8>>,
    /// PEM client certificate chain and key.
    pub client: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for OtlpTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OtlpTls")
            .field("ca", &self.ca_pem.as_ref().map(|c| c.len()))
            .field("client_identity", &self.client.is_some())
            .finish()
    }
}

/// The OTLP output's config: its options (flags or config file) checked, with the environment's
/// fallbacks and the defaults applied ([`OtlpOptions::resolve`]).
#[derive(Debug, Clone, PartialEq)]
pub struct OtlpConfig {
    pub protocol: OtlpProtocol,
    /// Full URL. For `http/protobuf` this is the whole metrics URL (`.../v1/metrics`).
    pub endpoint: String,
    /// The environment's headers merged with the explicit ones (same key: the explicit value).
    pub headers: Vec<(String, String)>,
    pub tls: OtlpTls,
    pub compression: OtlpCompression,
    /// Per-request timeout.
    pub timeout: Duration,
    /// `OTEL_RESOURCE_ATTRIBUTES`, parsed.
    pub resource_attributes: Vec<(String, String)>,
    /// `OTEL_SERVICE_NAME`, if set.
    pub service_name: Option<String>,
    /// Bytes of a receiver's answer to read at most (`--max-response-bytes`); default
    /// [`DEFAULT_MAX_RESPONSE_BYTES`]. A larger answer fails the request with `too_large`.
    pub max_response_bytes: usize,
    /// Data points per export request at most; a push with more is sent as several requests
    /// (see [`super::OtlpSink`]). Default [`DEFAULT_MAX_POINTS_PER_REQUEST`].
    pub max_points_per_request: usize,
    /// The names of the Kubernetes metrics (`--otlp-semconv`); default [`Semconv::Stable`].
    pub semconv: Semconv,
}

const ENV_PREFIX_METRICS: &str = "OTEL_EXPORTER_OTLP_METRICS_";
const ENV_PREFIX: &str = "OTEL_EXPORTER_OTLP_";
/// Default timeout of OTLP exporters (the spec's 10 s).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// Default data points per export request. A cluster-level point takes about 155 bytes of
/// protobuf (measured at 5,000 nodes: 50 MB for 325,111 points), so a request of 10,000
/// points is about 1.5 MB uncompressed: well under the 4 MiB an OpenTelemetry Collector's
/// OTLP gRPC receiver accepts by default (`max_recv_msg_size_mib`, gRPC's default), with room
/// for longer attribute values.
pub const DEFAULT_MAX_POINTS_PER_REQUEST: usize = 10_000;

pub(super) fn config_err(option: &'static str, value: &str, reason: impl Into<String>) -> Error {
    Error::Config {
        option,
        value: value.to_string(),
        reason: reason.into(),
    }
}

/// Environment variable names as `&'static str` for `Error::Config::option`.
fn env_name(prefix: &str, suffix: &str) -> &'static str {
    match (prefix == ENV_PREFIX_METRICS, suffix) {
        (true, "PROTOCOL") => "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
        (false, "PROTOCOL") => "OTEL_EXPORTER_OTLP_PROTOCOL",
        (true, "ENDPOINT") => "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
        (false, "ENDPOINT") => "OTEL_EXPORTER_OTLP_ENDPOINT",
        (true, "HEADERS") => "OTEL_EXPORTER_OTLP_METRICS_HEADERS",
        (false, "HEADERS") => "OTEL_EXPORTER_OTLP_HEADERS",
        (true, "COMPRESSION") => "OTEL_EXPORTER_OTLP_METRICS_COMPRESSION",
        (false, "COMPRESSION") => "OTEL_EXPORTER_OTLP_COMPRESSION",
        (true, "TIMEOUT") => "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT",
        (false, "TIMEOUT") => "OTEL_EXPORTER_OTLP_TIMEOUT",
        (true, "CERTIFICATE") => "OTEL_EXPORTER_OTLP_METRICS_CERTIFICATE",
        (false, "CERTIFICATE") => "OTEL_EXPORTER_OTLP_CERTIFICATE",
        (true, "CLIENT_CERTIFICATE") => "OTEL_EXPORTER_OTLP_METRICS_CLIENT_CERTIFICATE",
        (false, "CLIENT_CERTIFICATE") => "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
        (true, "CLIENT_KEY") => "OTEL_EXPORTER_OTLP_METRICS_CLIENT_KEY",
        (false, "CLIENT_KEY") => "OTEL_EXPORTER_OTLP_CLIENT_KEY",
        _ => "OTEL_EXPORTER_OTLP_*",
    }
}

/// The value of the metrics-specific variable, else the generic one, with its name.
fn env_pair(env: &dyn Fn(&str) -> Option<String>, suffix: &str) -> Option<(&'static str, String)> {
    [ENV_PREFIX_METRICS, ENV_PREFIX].into_iter().find_map(|p| {
        let name = env_name(p, suffix);
        env(name)
            .filter(|v| !v.trim().is_empty())
            .map(|v| (name, v.trim().to_string()))
    })
}

fn parse_protocol(option: &'static str, v: &str) -> Result<OtlpProtocol> {
    match v.trim() {
        "grpc" => Ok(OtlpProtocol::Grpc),
        "http/protobuf" => Ok(OtlpProtocol::HttpProtobuf),
        "http/json" => Err(config_err(
            option,
            v,
            "http/json is not supported; use grpc or http/protobuf",
        )),
        _ => Err(config_err(option, v, "expected grpc or http/protobuf")),
    }
}

fn parse_compression(option: &'static str, v: &str) -> Result<OtlpCompression> {
    match v.trim().to_ascii_lowercase().as_str() {
        "gzip" => Ok(OtlpCompression::Gzip),
        "none" | "" => Ok(OtlpCompression::None),
        _ => Err(config_err(option, v, "expected gzip or none")),
    }
}

fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// One `key=value` header item: a valid HTTP header name (lower-cased) and a valid value.
fn parse_header(option: &'static str, item: &str) -> Result<(String, String)> {
    let Some((k, v)) = item.split_once('=') else {
        return Err(config_err(option, item, "expected key=value"));
    };
    let key = k.trim().to_ascii_lowercase();
    let value = percent_decode(v.trim())
        .ok_or_else(|| config_err(option, item, "bad percent-encoding in the value"))?;
    if key.is_empty() {
        return Err(config_err(option, item, "empty header name"));
    }
    if http::HeaderName::from_bytes(key.as_bytes()).is_err() {
        return Err(config_err(option, item, "not a valid HTTP header name"));
    }
    if http::HeaderValue::from_str(&value).is_err() {
        return Err(config_err(option, item, "not a valid HTTP header value"));
    }
    if key.starts_with(':') || key.ends_with("-bin") {
        return Err(config_err(
            option,
            item,
            "pseudo headers and binary (-bin) metadata are not supported",
        ));
    }
    Ok((key, value))
}

/// `key=value,key=value` as in `OTEL_EXPORTER_OTLP_HEADERS` and `OTEL_RESOURCE_ATTRIBUTES`.
fn parse_list(option: &'static str, list: &str) -> Result<Vec<(String, String)>> {
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|item| {
            let (k, v) = item
                .split_once('=')
                .ok_or_else(|| config_err(option, item, "expected key=value"))?;
            let v = percent_decode(v.trim())
                .ok_or_else(|| config_err(option, item, "bad percent-encoding in the value"))?;
            if k.trim().is_empty() {
                return Err(config_err(option, item, "empty key"));
            }
            Ok((k.trim().to_string(), v))
        })
        .collect()
}

fn parse_endpoint(option: &'static str, v: &str) -> Result<String> {
    let uri: http::Uri = v
        .parse()
        .map_err(|e| config_err(option, v, format!("not a URL: {e}")))?;
    match uri.scheme_str() {
        Some("http") | Some("https") => {}
        _ => {
            return Err(config_err(option, v, "must start with http:// or https://"));
        }
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(config_err(option, v, "no host"));
    }
    Ok(v.to_string())
}

/// What a PEM file must hold.
#[derive(Clone, Copy)]
enum Pem {
    Certificates,
    PrivateKey,
}

fn read_pem(option: &'static str, path: &Path, want: Pem) -> Result<Vec<u8>> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let bytes = std::fs::read(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let shown = path.display().to_string();
    match want {
        Pem::Certificates => {
            let certs: std::result::Result<Vec<_>, _> =
                CertificateDer::pem_slice_iter(&bytes).collect();
            match certs {
                Ok(c) if !c.is_empty() => {}
                Ok(_) => return Err(config_err(option, &shown, "no PEM certificate in the file")),
                Err(e) => return Err(config_err(option, &shown, format!("bad PEM: {e}"))),
            }
        }
        Pem::PrivateKey => {
            PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| {
                config_err(option, &shown, format!("no usable PEM private key: {e}"))
            })?;
        }
    }
    Ok(bytes)
}

impl OtlpOptions {
    /// The endpoint: explicit, else the signal variable, else the generic one (a base URL), else
    /// the protocol's default.
    fn resolve_endpoint(
        &self,
        env: &dyn Fn(&str) -> Option<String>,
        protocol: OtlpProtocol,
    ) -> Result<String> {
        let endpoint = match self
            .otlp_endpoint
            .as_deref()
            .filter(|s| !s.trim().is_empty())
        {
            Some(e) => parse_endpoint("otlp endpoint", e.trim())?,
            None => {
                let signal = env_name(ENV_PREFIX_METRICS, "ENDPOINT");
                let generic = env_name(ENV_PREFIX, "ENDPOINT");
                if let Some(v) = env(signal).filter(|v| !v.trim().is_empty()) {
                    parse_endpoint(signal, v.trim())?
                } else if let Some(v) = env(generic).filter(|v| !v.trim().is_empty()) {
                    let v = v.trim();
                    parse_endpoint(generic, v)?;
                    match protocol {
                        OtlpProtocol::Grpc => v.to_string(),
                        // The generic variable is a base URL: the signal path is appended.
                        OtlpProtocol::HttpProtobuf => {
                            format!("{}/v1/metrics", v.trim_end_matches('/'))
                        }
                    }
                } else {
                    match protocol {
                        OtlpProtocol::Grpc => "http://localhost:4317".to_string(),
                        OtlpProtocol::HttpProtobuf => {
                            "http://localhost:4318/v1/metrics".to_string()
                        }
                    }
                }
            }
        };
        Ok(endpoint)
    }

    /// The headers: the environment's, then the explicit ones (which win on a clash).
    fn resolve_headers(
        &self,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Vec<(String, String)>> {
        let mut explicit_headers = Vec::new();
        // `--otlp-headers`: comma-separated items.
        let items = self.otlp_headers.iter().flat_map(|h| h.split(','));
        for item in items.map(str::trim).filter(|s| !s.is_empty()) {
            explicit_headers.push(parse_header("otlp header", item)?);
        }
        // The environment's headers come from the signal variable, else the generic one (as
        // the OpenTelemetry exporters read them). Explicit headers win on a clash: the sink
        // sends this merged list, each name once.
        let signal = env_name(ENV_PREFIX_METRICS, "HEADERS");
        let generic = env_name(ENV_PREFIX, "HEADERS");
        let env_headers = env(signal)
            .map(|v| (signal, v))
            .or_else(|| env(generic).map(|v| (generic, v)));
        let mut headers = Vec::new();
        if let Some((name, list)) = env_headers {
            for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                let (k, v) = parse_header(name, item)?;
                headers.retain(|(hk, _): &(String, String)| *hk != k);
                headers.push((k, v));
            }
        }
        for (k, v) in &explicit_headers {
            headers.retain(|(hk, _)| hk != k);
            headers.push((k.clone(), v.clone()));
        }
        Ok(headers)
    }

    /// The CA and client certificate files, explicit or from the environment, read.
    fn resolve_tls(&self, env: &dyn Fn(&str) -> Option<String>) -> Result<OtlpTls> {
        let file = |explicit: &Option<PathBuf>,
                    option: &'static str,
                    suffix: &str|
         -> Result<Option<(&'static str, PathBuf)>> {
            Ok(match explicit {
                Some(p) if !p.as_os_str().is_empty() => Some((option, p.clone())),
                _ => env_pair(env, suffix).map(|(name, v)| (name, PathBuf::from(v))),
            })
        };
        let ca = file(&self.otlp_ca_file, "otlp CA file", "CERTIFICATE")?;
        let cert = file(
            &self.otlp_client_cert,
            "otlp client certificate",
            "CLIENT_CERTIFICATE",
        )?;
        let key = file(&self.otlp_client_key, "otlp client key", "CLIENT_KEY")?;
        let ca_pem = ca
            .map(|(o, p)| read_pem(o, &p, Pem::Certificates))
            .transpose()?;
        let client = match (cert, key) {
            (None, None) => None,
            (Some((co, cp)), Some((ko, kp))) => Some((
                read_pem(co, &cp, Pem::Certificates)?,
                read_pem(ko, &kp, Pem::PrivateKey)?,
            )),
            (Some((o, p)), None) | (None, Some((o, p))) => {
                return Err(config_err(
                    o,
                    &p.display().to_string(),
                    "a client certificate and a client key must be given together",
                ));
            }
        };
        Ok(OtlpTls { ca_pem, client })
    }

    /// The answer cap and the points per request.
    fn resolve_limits(&self, bounds: OtlpBounds) -> Result<(usize, usize)> {
        let max_response_bytes = match bounds.max_response_bytes {
            Some(0) => {
                return Err(config_err(
                    "--max-response-bytes",
                    "0",
                    "must be more than zero",
                ));
            }
            Some(n) => n,
            None => DEFAULT_MAX_RESPONSE_BYTES,
        };
        let max_points_per_request = match self.otlp_max_points_per_request {
            Some(n) if n == 0 || n > 10_000_000 => {
                return Err(config_err(
                    "--otlp-max-points-per-request",
                    &n.to_string(),
                    "must be between 1 and 10000000",
                ));
            }
            Some(n) => n,
            None => DEFAULT_MAX_POINTS_PER_REQUEST,
        };
        Ok((max_response_bytes, max_points_per_request))
    }

    /// [`OtlpOptions::resolve`], reading the environment through `env` (for tests): checks
    /// the options ([`OtlpOptions::check`]), then resolves them. Explicit settings win; then
    /// `OTEL_EXPORTER_OTLP_METRICS_*`; then `OTEL_EXPORTER_OTLP_*`; then the defaults.
    pub fn resolve_with(
        self,
        bounds: OtlpBounds,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<OtlpConfig> {
        self.check()?;
        let protocol = match self
            .otlp_protocol
            .as_deref()
            .filter(|s| !s.trim().is_empty())
        {
            Some(p) => parse_protocol("otlp protocol", p)?,
            None => match env_pair(env, "PROTOCOL") {
                Some((name, v)) => parse_protocol(name, &v)?,
                None => OtlpProtocol::Grpc,
            },
        };

        let endpoint = self.resolve_endpoint(env, protocol)?;

        let headers = self.resolve_headers(env)?;

        let compression = match self
            .otlp_compression
            .as_deref()
            .filter(|s| !s.trim().is_empty())
        {
            Some(c) => parse_compression("otlp compression", c)?,
            None => match env_pair(env, "COMPRESSION") {
                Some((name, v)) => parse_compression(name, &v)?,
                None => OtlpCompression::None,
            },
        };

        let timeout = match bounds.timeout {
            Some(t) if t.is_zero() => {
                return Err(config_err("otlp timeout", "0", "must be more than zero"));
            }
            Some(t) => t,
            None => match env_pair(env, "TIMEOUT") {
                Some((name, v)) => match v.parse::<u64>() {
                    Ok(ms) if ms > 0 => Duration::from_millis(ms),
                    _ => {
                        return Err(config_err(
                            name,
                            &v,
                            "expected a whole number of milliseconds above 0",
                        ));
                    }
                },
                None => DEFAULT_TIMEOUT,
            },
        };

        let tls = self.resolve_tls(env)?;

        let resource_attributes = match env("OTEL_RESOURCE_ATTRIBUTES") {
            Some(v) => parse_list("OTEL_RESOURCE_ATTRIBUTES", &v)?,
            None => Vec::new(),
        };
        let service_name = env("OTEL_SERVICE_NAME")
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty());

        let (max_response_bytes, max_points_per_request) = self.resolve_limits(bounds)?;

        Ok(OtlpConfig {
            semconv: self.semconv()?,
            max_response_bytes,
            max_points_per_request,
            protocol,
            endpoint,
            headers,
            tls,
            compression,
            timeout,
            resource_attributes,
            service_name,
        })
    }
}

// The resource.

/// One resource attribute (a string value, as every attribute kube-prober sends).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceAttribute {
    pub key: String,
    pub value: String,
}

impl ResourceAttribute {
    pub fn new(key: impl Into<String>, value: impl Into<String>) -> Self {
        ResourceAttribute {
            key: key.into(),
            value: value.into(),
        }
    }
}

/// Who is pushing: the caller fills this from the identity it detected.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OtlpResource {
    pub cluster_name: String,
    /// `cluster`, `node` or `host`.
    pub role: String,
    /// This node's name (node role), or this machine's (host role: `host.name`).
    pub node_name: Option<String>,
    /// GCE project, or empty off GCE.
    pub project: String,
    /// Cluster zone (`us-central1-a`) or region (`us-central1`), or empty.
    pub location: String,
    /// `service.instance.id`: unique per running instance (e.g. the pod UID).
    pub instance_id: String,
    /// `host.id` of the host role: the machine-id (`/etc/machine-id`), or empty.
    pub host_id: String,
}

/// `host.arch` as the semantic conventions spell it.
fn host_arch() -> Option<&'static str> {
    Some(match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "x86",
        "arm" => "arm32",
        "powerpc64" => "ppc64",
        "s390x" => "s390x",
        _ => return None,
    })
}

/// `os.type` as the semantic conventions spell it.
fn os_type() -> &'static str {
    match std::env::consts::OS {
        "macos" => "darwin",
        other => other,
    }
}

/// True for GCE zone names like `us-central1-a` (region, dash, one letter).
fn is_zone(location: &str) -> bool {
    let Some((region, suffix)) = location.rsplit_once('-') else {
        return false;
    };
    suffix.len() == 1
        && suffix.bytes().all(|b| b.is_ascii_lowercase())
        && region.contains('-')
        && region.bytes().last().is_some_and(|b| b.is_ascii_digit())
}

impl OtlpResource {
    /// The resource attributes, before `OTEL_RESOURCE_ATTRIBUTES` and `OTEL_SERVICE_NAME`.
    pub fn attributes(&self) -> Vec<ResourceAttribute> {
        let mut out = vec![
            ResourceAttribute::new("service.name", "kube-prober"),
            ResourceAttribute::new("service.version", env!("CARGO_PKG_VERSION")),
        ];
        if !self.instance_id.is_empty() {
            out.push(ResourceAttribute::new(
                "service.instance.id",
                self.instance_id.clone(),
            ));
        }
        if !self.cluster_name.is_empty() {
            out.push(ResourceAttribute::new(
                "k8s.cluster.name",
                self.cluster_name.clone(),
            ));
        }
        if self.role == "node"
            && let Some(n) = self.node_name.as_ref().filter(|n| !n.is_empty())
        {
            out.push(ResourceAttribute::new("k8s.node.name", n.clone()));
        }
        if self.role == "host" {
            // No cluster: the machine is what the series describe (semconv `host.*`, `os.*`).
            if let Some(n) = self.node_name.as_ref().filter(|n| !n.is_empty()) {
                out.push(ResourceAttribute::new("host.name", n.clone()));
            }
            if !self.host_id.is_empty() {
                out.push(ResourceAttribute::new("host.id", self.host_id.clone()));
            }
            if let Some(arch) = host_arch() {
                out.push(ResourceAttribute::new("host.arch", arch));
            }
            out.push(ResourceAttribute::new("os.type", os_type()));
        }
        if !self.project.is_empty() {
            out.push(ResourceAttribute::new("cloud.provider", "gcp"));
            out.push(ResourceAttribute::new(
                "cloud.platform",
                "gcp_kubernetes_engine",
            ));
            out.push(ResourceAttribute::new(
                "cloud.account.id",
                self.project.clone(),
            ));
            let loc = self.location.as_str();
            if is_zone(loc) {
                out.push(ResourceAttribute::new(
                    "cloud.availability_zone",
                    loc.to_string(),
                ));
                if let Some((region, _)) = loc.rsplit_once('-') {
                    out.push(ResourceAttribute::new("cloud.region", region.to_string()));
                }
            } else if !loc.is_empty() {
                out.push(ResourceAttribute::new("cloud.region", loc.to_string()));
            }
        }
        out
    }

    /// The resource attributes every request carries: `telemetry.sdk.*` (the encoder is
    /// kube-prober's own: `telemetry.sdk.name=kube-prober`, `telemetry.sdk.language=rust`,
    /// `telemetry.sdk.version` ours), then [`OtlpResource::attributes`], then
    /// `OTEL_RESOURCE_ATTRIBUTES` (replacing attributes of the same key), then
    /// `OTEL_SERVICE_NAME` (replacing `service.name`). Each key once, in that order.
    pub(super) fn build(&self, config: &OtlpConfig) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = Vec::new();
        let mut set = |k: String, v: String| match out.iter_mut().find(|(ok, _)| *ok == k) {
            Some(slot) => slot.1 = v,
            None => out.push((k, v)),
        };
        set("telemetry.sdk.name".into(), "kube-prober".into());
        set("telemetry.sdk.language".into(), "rust".into());
        set(
            "telemetry.sdk.version".into(),
            env!("CARGO_PKG_VERSION").into(),
        );
        for a in self.attributes() {
            set(a.key, a.value);
        }
        for (k, v) in &config.resource_attributes {
            set(k.clone(), v.clone());
        }
        if let Some(name) = &config.service_name {
            set("service.name".into(), name.clone());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn settings_fall_back_to_the_environment_then_defaults() {
        let none = OtlpBounds::default();
        let s = OtlpOptions::default()
            .resolve_with(none, &env_of(&[]))
            .unwrap();
        assert_eq!(s.protocol, OtlpProtocol::Grpc);
        assert_eq!(s.endpoint, "http://localhost:4317");
        assert_eq!(s.timeout, DEFAULT_TIMEOUT);
        assert_eq!(s.compression, OtlpCompression::None);

        let env = env_of(&[
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "2500"),
            ("OTEL_EXPORTER_OTLP_METRICS_COMPRESSION", "gzip"),
            ("OTEL_EXPORTER_OTLP_COMPRESSION", "none"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "a=1,b=x%20y"),
            ("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=prod"),
            ("OTEL_SERVICE_NAME", "probe-eu"),
        ]);
        let s = OtlpOptions::default().resolve_with(none, &env).unwrap();
        assert_eq!(s.protocol, OtlpProtocol::HttpProtobuf);
        assert_eq!(s.endpoint, "http://collector:4318/v1/metrics");
        assert_eq!(s.timeout, Duration::from_millis(2500));
        assert_eq!(s.compression, OtlpCompression::Gzip);
        assert_eq!(
            s.headers,
            vec![("a".into(), "1".into()), ("b".into(), "x y".into())]
        );
        assert_eq!(s.service_name.as_deref(), Some("probe-eu"));

        // Explicit settings win; the signal endpoint is used as is.
        let opts = OtlpOptions {
            otlp_protocol: Some("grpc".into()),
            otlp_endpoint: Some("https://otel.example:4317".into()),
            otlp_headers: Some("a=2, c=3".into()),
            otlp_compression: Some("none".into()),
            ..Default::default()
        };
        let bounds = OtlpBounds {
            timeout: Some(Duration::from_secs(3)),
            max_response_bytes: Some(1 << 20),
        };
        let s = opts.resolve_with(bounds, &env).unwrap();
        assert_eq!(s.protocol, OtlpProtocol::Grpc);
        assert_eq!(s.endpoint, "https://otel.example:4317");
        assert_eq!(s.timeout, Duration::from_secs(3));
        assert_eq!(s.max_response_bytes, 1 << 20);
        assert_eq!(s.compression, OtlpCompression::None);
        // Same key: the explicit value.
        assert_eq!(
            s.headers,
            vec![
                ("b".into(), "x y".into()),
                ("a".into(), "2".into()),
                ("c".into(), "3".into())
            ]
        );
        let env = env_of(&[(
            "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
            "http://c:4318/custom/path",
        )]);
        let opts = OtlpOptions {
            otlp_protocol: Some("http/protobuf".into()),
            ..Default::default()
        };
        assert_eq!(
            opts.resolve_with(none, &env).unwrap().endpoint,
            "http://c:4318/custom/path"
        );
    }

    #[test]
    fn bad_values_are_config_errors_naming_their_source() {
        let bad = |opts: OtlpOptions, env: &[(&str, &str)]| -> (String, String) {
            match opts.resolve_with(OtlpBounds::default(), &env_of(env)) {
                Err(Error::Config { option, value, .. }) => (option.to_string(), value),
                other => panic!("expected a config error, got {other:?}"),
            }
        };
        let proto = |p: &str| OtlpOptions {
            otlp_protocol: Some(p.into()),
            ..Default::default()
        };
        assert_eq!(bad(proto("udp"), &[]).0, "otlp protocol");
        assert_eq!(bad(proto("http/json"), &[]).0, "otlp protocol");
        assert_eq!(
            bad(
                OtlpOptions::default(),
                &[("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "thrift")]
            ),
            (
                "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL".into(),
                "thrift".into()
            )
        );
        let headers = |h: &str| OtlpOptions {
            otlp_headers: Some(h.into()),
            ..Default::default()
        };
        assert_eq!(bad(headers("novalue"), &[]).0, "otlp header");
        assert_eq!(bad(headers("bad key=1"), &[]).0, "otlp header");
        assert_eq!(bad(headers("k=a\nb"), &[]).0, "otlp header");
        assert_eq!(
            bad(
                OtlpOptions::default(),
                &[("OTEL_EXPORTER_OTLP_HEADERS", "x=1,oops")]
            )
            .0,
            "OTEL_EXPORTER_OTLP_HEADERS"
        );
        let endpoint = |e: &str| OtlpOptions {
            otlp_endpoint: Some(e.into()),
            ..Default::default()
        };
        assert_eq!(bad(endpoint("localhost:4317"), &[]).0, "otlp endpoint");
        assert_eq!(bad(endpoint("ftp://x"), &[]).0, "otlp endpoint");
        assert_eq!(
            bad(
                OtlpOptions::default(),
                &[("OTEL_EXPORTER_OTLP_TIMEOUT", "10s")]
            )
            .0,
            "OTEL_EXPORTER_OTLP_TIMEOUT"
        );
        let comp = OtlpOptions {
            otlp_compression: Some("zstd".into()),
            ..Default::default()
        };
        assert_eq!(bad(comp, &[]).0, "otlp compression");
        // The options' own checks come first: a missing file, half a client pair.
        let half = OtlpOptions {
            otlp_client_cert: Some("/nonexistent".into()),
            ..Default::default()
        };
        assert_eq!(bad(half, &[]).0, "--otlp-client-cert");
        let missing_ca = OtlpOptions {
            otlp_ca_file: Some("/nonexistent/ca.pem".into()),
            ..Default::default()
        };
        assert_eq!(bad(missing_ca, &[]).0, "--otlp-ca-file");
        let dir = tempfile::tempdir().unwrap();
        let junk = dir.path().join("junk.pem");
        std::fs::write(&junk, "not a certificate").unwrap();
        let junk_ca = OtlpOptions {
            otlp_ca_file: Some(junk.clone()),
            ..Default::default()
        };
        assert_eq!(bad(junk_ca, &[]).0, "otlp CA file");
        let junk_key = OtlpOptions {
            otlp_client_cert: Some(junk.clone()),
            otlp_client_key: Some(junk.clone()),
            ..Default::default()
        };
        assert_eq!(bad(junk_key, &[]).0, "otlp client certificate");
        // From the environment only: half a pair, a file that cannot be read.
        let env_half = [("OTEL_EXPORTER_OTLP_CLIENT_KEY", "/nonexistent")];
        assert_eq!(
            bad(OtlpOptions::default(), &env_half).0,
            "OTEL_EXPORTER_OTLP_CLIENT_KEY"
        );
        assert!(matches!(
            OtlpOptions::default().resolve_with(
                OtlpBounds::default(),
                &env_of(&[("OTEL_EXPORTER_OTLP_CERTIFICATE", "/nonexistent/ca.pem")])
            ),
            Err(Error::Io { .. })
        ));
    }

    #[test]
    fn resource_attributes_follow_semconv() {
        let r = OtlpResource {
            cluster_name: "prod".into(),
            role: "node".into(),
            node_name: Some("n1".into()),
            project: "my-proj".into(),
            location: "us-central1-a".into(),
            instance_id: "uid-1".into(),
            host_id: String::new(),
        };
        let a: HashMap<String, String> = r
            .attributes()
            .into_iter()
            .map(|kv| (kv.key.to_string(), kv.value.to_string()))
            .collect();
        assert_eq!(a["service.name"], "kube-prober");
        assert_eq!(a["service.instance.id"], "uid-1");
        assert_eq!(a["k8s.cluster.name"], "prod");
        assert_eq!(a["k8s.node.name"], "n1");
        assert_eq!(a["cloud.provider"], "gcp");
        assert_eq!(a["cloud.platform"], "gcp_kubernetes_engine");
        assert_eq!(a["cloud.account.id"], "my-proj");
        assert_eq!(a["cloud.availability_zone"], "us-central1-a");
        assert_eq!(a["cloud.region"], "us-central1");

        let r = OtlpResource {
            role: "cluster".into(),
            location: "europe-west4".into(),
            ..r
        };
        let a: HashMap<String, String> = r
            .attributes()
            .into_iter()
            .map(|kv| (kv.key.to_string(), kv.value.to_string()))
            .collect();
        assert!(!a.contains_key("k8s.node.name"));
        assert!(!a.contains_key("cloud.availability_zone"));
        assert_eq!(a["cloud.region"], "europe-west4");
        let off_gce = OtlpResource {
            project: String::new(),
            ..Default::default()
        };
        assert!(
            !off_gce
                .attributes()
                .iter()
                .any(|kv| kv.key.as_str().starts_with("cloud."))
        );
        assert!(!a.keys().any(|k| k.starts_with("host.")), "{a:?}");
    }

    #[test]
    fn the_host_role_names_its_host() {
        let r = OtlpResource {
            role: "host".into(),
            node_name: Some("box-1".into()),
            host_id: "0123abcd".into(),
            ..Default::default()
        };
        let a: HashMap<String, String> = r
            .attributes()
            .into_iter()
            .map(|kv| (kv.key.to_string(), kv.value.to_string()))
            .collect();
        assert_eq!(a["host.name"], "box-1");
        assert_eq!(a["host.id"], "0123abcd");
        assert_eq!(a["os.type"], std::env::consts::OS);
        assert!(!a.contains_key("k8s.node.name"));
        let no_id = OtlpResource {
            host_id: String::new(),
            ..r
        };
        assert!(
            !no_id
                .attributes()
                .iter()
                .any(|kv| kv.key.as_str() == "host.id")
        );
    }
}
