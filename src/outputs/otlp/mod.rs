//! OTLP push output: each push turns one [`Snapshot`] into OTLP `ExportMetricsServiceRequest`s
//! built here from opentelemetry-proto's generated types, and sends them over OTLP/gRPC (our
//! own tonic channel and opentelemetry-proto's generated `MetricsServiceClient`) or
//! OTLP/HTTP with binary protobuf bodies (our reqwest client), in requests of at most
//! [`OtlpConfig::max_points_per_request`] data points (see "Requests" below).
//!
//! No OpenTelemetry SDK is involved: the snapshot already holds the values the receiver must
//! get (it is the one `/metrics` serves), so the sink writes the protocol messages itself.
//! - gauges are OTLP gauges; counters are monotonic cumulative sums; semconv up-down counters
//!   are non-monotonic cumulative sums.
//! - the probe duration histogram is a cumulative explicit-bucket histogram whose bucket
//!   counts, count and sum are the snapshot's, exactly (the snapshot's cumulative bucket
//!   counts turned into per-bucket counts, the last bucket being `+Inf`). Min and max are not
//!   sent: the snapshot does not have them. A series whose cumulative counts go down from one
//!   bucket to the next (never produced by the hub) is left out of that push and logged at
//!   debug level.
//! - **Start time.** Every cumulative point (sums and the histogram) of one sink carries the
//!   same `start_time_unix_nano`: the wall-clock time when the sink was made, kept for the
//!   whole life of the process. The hub's counters start at zero when the process starts and
//!   never reset while it runs, so that one start time is true for every series, including
//!   series that appear later (their counts were zero before). A restart makes a new sink,
//!   hence a new start time, which is how a receiver recognises the reset. Gauges carry no
//!   start time (optional for gauges in OTLP).
//! - **Point time.** Every point of one push carries the same `time_unix_nano`: the wall-clock
//!   time when the push began, so the requests of one push describe one instant.
//! - **NaN and ±Inf** values are not sent: their point is absent from that push (what the
//!   OpenTelemetry SDK did with them, too). The sources already drop non-finite values before
//!   they reach the hub (`kube_prober_source_dropped_values_total{reason="non_finite"}`), so this
//!   only guards the encoding.
//! - A series that left the snapshot is simply not in the next push: each push sends exactly
//!   the snapshot's series, nothing is remembered between pushes except the start time.
//!
//! ## Requests
//! One push is one request with the instance-level families ([`series::is_instance_level`]:
//! the instance's own series and the probe histogram, a few per probe, source and sink, not
//! growing with the cluster; not split), then as many requests as needed for everything else:
//! batches of at most `max_points_per_request` data points, taken family by family in the
//! order of the sink's metrics (`--otlp-semconv`), a family larger than what is left of a
//! batch being spread over several batches. Each series of the snapshot goes out exactly once per push. Each request
//! is encoded just before it is sent and dropped after, so the memory of a push is that of
//! the rows plus one request rather than of the whole push. A batch without points sends
//! nothing. `PushReport` counts the requests sent and their points.
//!
//! A failed request ends the push: the remaining batches are not sent (the receiver is most
//! likely down or refusing, and each further request would wait for its own timeout), and
//! `PushError::sent` counts the requests the receiver answered, the failed one included when
//! it answered (a connect, TLS or transport failure, or no answer in time, is not a request),
//! and the points of those that succeeded. The next push sends everything again. The
//! per-request timeout is the configured one; the push runner's timeout bounds the whole push.
//! There are no retries inside the sink: the push runner has its own ticker, timeout and
//! failure counters.
//!
//! ## Answers
//! The receiver's answer is read through the same byte cap as every other answer
//! (`--max-response-bytes`, [`OtlpConfig::max_response_bytes`]): over OTLP/HTTP with
//! [`crate::shared::limit::read_capped`] (a larger `Content-Length` is refused before reading), over
//! gRPC with tonic's decoding limit. An answer over the cap fails the request with reason
//! `too_large` (counted in `kube_prober_sink_failures_total`); the receiver did answer, so the
//! request counts, its points do not. A successful answer that reports a partial success
//! (rejected points) is logged as a warning; the push still counts as a success, as in the
//! OpenTelemetry exporters, and its rejected points are lost as `partial`
//! (`kube_prober_sink_points_dropped_total`), the others accepted.
//!
//! ## What a push holds, and what it loses
//! Nothing is kept between pushes but the start time, and no request is retried or queued: a
//! push holds the rows of one snapshot and at most one encoded request (its protobuf, and
//! its gzip over HTTP), whatever the receiver does. The push tells the runner's
//! [`PushProgress`] its points before the first request and each request's accepted points as
//! it is answered, so that every point is accepted or counted lost: a failed request loses
//! itself and the batches after it for the failure's reason, a push cut short by the runner's
//! deadline loses what was not yet accepted as `timeout`.
//!
//! ## Settings and the environment
//! Each of the [`OtlpOptions`] that is unset falls back to `OTEL_EXPORTER_OTLP_METRICS_*`,
//! then `OTEL_EXPORTER_OTLP_*`, then the default; [`OtlpOptions::resolve`] does this into the
//! [`OtlpConfig`] the sink takes and turns every bad value into `Error::Config` naming the flag or variable. Nothing else reads those
//! variables: the headers sent are the resolved ones (the environment's, an explicit header
//! replacing one of the same name), compression is exactly the resolved setting.
//! `OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE` is not honoured: always cumulative.
//! `OTEL_RESOURCE_ATTRIBUTES` adds to and overrides the sink's resource attributes;
//! `OTEL_SERVICE_NAME` overrides `service.name`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_client::MetricsServiceClient;
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{
    self as pm, AggregationTemporality, HistogramDataPoint, NumberDataPoint, ResourceMetrics,
    ScopeMetrics, metric::Data, number_data_point,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;
use tonic::codec::CompressionEncoding;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};

use super::families::{self, Family};
use super::series::{self, Labels, Visitor};
use super::{PushError, PushProgress, PushReport, PushScope, Sink};
use crate::model::{PROBE_BUCKETS, Snapshot};
use crate::shared::error::{Error, Result};
use crate::shared::limit::{ReadError, read_capped};

mod config;
pub mod options;
pub mod start;
mod table;
pub use options::{OtlpBounds, OtlpOptions};

pub use crate::outputs::families::{
    Derivation, OTLP_METRICS, OTLP_METRICS_LEGACY, OtelKind, OtelMetric, Semconv,
};
use config::config_err;
pub use config::{
    DEFAULT_MAX_POINTS_PER_REQUEST, DEFAULT_TIMEOUT, OtlpCompression, OtlpConfig, OtlpProtocol,
    OtlpResource, OtlpTls,
};
pub use table::attribute_key;

/// The instrumentation scope name the metrics carry.
pub const SCOPE_NAME: &str = "kube-prober";

type Rows = Vec<(Vec<KeyValue>, f64)>;

/// One probe histogram series as the snapshot has it: cumulative counts per bound (`+Inf`
/// excluded), count and sum.
#[derive(Debug, Clone, PartialEq)]
struct HistogramRow {
    attributes: Vec<KeyValue>,
    buckets: Vec<u64>,
    count: u64,
    sum: f64,
}

/// How requests are sent.
enum Transport {
    Grpc {
        client: MetricsServiceClient<Channel>,
        /// The resolved headers, as gRPC metadata.
        metadata: tonic::metadata::MetadataMap,
    },
    Http {
        client: reqwest::Client,
        /// The resolved headers.
        headers: reqwest::header::HeaderMap,
    },
}

/// The OTLP push output.
pub struct OtlpSink {
    transport: Transport,
    /// The resource every request carries.
    resource: Resource,
    /// `start_time_unix_nano` of every cumulative point: when the sink was made.
    start_time_unix_nano: u64,
    /// One push at a time (the connector's `last_error` belongs to it).
    push_lock: tokio::sync::Mutex<()>,
    config: OtlpConfig,
    /// Filled by the gRPC channel's connector when it could not connect.
    last_error: LastError,
}

impl std::fmt::Debug for OtlpSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OtlpSink")
            .field("protocol", &self.config.protocol)
            .field("endpoint", &self.config.endpoint)
            .field("start_time_unix_nano", &self.start_time_unix_nano)
            .finish()
    }
}

/// Whether a metric belongs to an instance-level family (probes, sources, sinks, build, ...):
/// those and the probe histogram go in the push's first request, the rest in batches.
fn is_instance_metric(metric: &OtelMetric) -> bool {
    families::ALL
        .iter()
        .any(|f| f.name == metric.family && series::is_instance_level(f))
}

fn tls_files_given(tls: &OtlpTls) -> bool {
    tls.ca_pem.is_some() || tls.client.is_some()
}

fn string_kv(key: impl Into<String>, value: impl Into<String>) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.into())),
        }),
        ..Default::default()
    }
}

fn unix_nanos(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// A connect failure seen by the gRPC channel's connector: the request never reached the
/// receiver, so it is not counted as a request, and its full text joins the error message
/// (tonic reports only "transport error").
#[derive(Debug, Clone, Default)]
struct TransportError {
    message: String,
}

type LastError = Arc<Mutex<Option<TransportError>>>;

/// The gRPC channel's connector: plain TCP (tonic adds TLS on top), recording a failed
/// connect in `last_error` so the export it fails is not counted as a request.
#[derive(Debug, Clone)]
struct WatchedConnector {
    last_error: LastError,
}

impl tower_service::Service<http::Uri> for WatchedConnector {
    type Response = hyper_util::rt::TokioIo<tokio::net::TcpStream>;
    type Error = std::io::Error;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = std::io::Result<Self::Response>> + Send>,
    >;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let last_error = self.last_error.clone();
        Box::pin(async move {
            let host = uri
                .host()
                .map(|h| h.trim_start_matches('[').trim_end_matches(']').to_string())
                .ok_or_else(|| std::io::Error::other(format!("no host in {uri}")))?;
            let port = uri.port_u16().unwrap_or(match uri.scheme_str() {
                Some("https") => 443,
                _ => 80,
            });
            match tokio::net::TcpStream::connect((host.as_str(), port)).await {
                Ok(stream) => {
                    let _ = stream.set_nodelay(true);
                    Ok(hyper_util::rt::TokioIo::new(stream))
                }
                Err(e) => {
                    if let Ok(mut last) = last_error.lock() {
                        *last = Some(TransportError {
                            message: format!("connecting to {host}:{port}: {e}"),
                        });
                    }
                    Err(e)
                }
            }
        })
    }
}

fn build_transport(s: &OtlpConfig, last_error: &LastError) -> Result<Transport> {
    let https = s.endpoint.starts_with("https://");
    if !https && tls_files_given(&s.tls) {
        tracing::warn!(
            endpoint = %s.endpoint,
            "OTLP TLS files are set but the endpoint is not https://; they are not used"
        );
    }
    match s.protocol {
        OtlpProtocol::Grpc => grpc_transport(s, https, last_error),
        OtlpProtocol::HttpProtobuf => http_transport(s, https),
    }
}

/// OTLP/gRPC: a lazily connected tonic channel with the headers as metadata.
fn grpc_transport(s: &OtlpConfig, https: bool, last_error: &LastError) -> Result<Transport> {
    let mut metadata = tonic::metadata::MetadataMap::new();
    for (k, v) in &s.headers {
        let key = tonic::metadata::MetadataKey::from_bytes(k.as_bytes())
            .map_err(|e| config_err("otlp header", k, e.to_string()))?;
        let value: tonic::metadata::MetadataValue<tonic::metadata::Ascii> = v
            .parse()
            .map_err(|_| config_err("otlp header", k, "not a valid header value"))?;
        metadata.insert(key, value);
    }
    let mut endpoint = tonic::transport::Endpoint::from_shared(s.endpoint.clone())
        .map_err(|e| config_err("otlp endpoint", &s.endpoint, e.to_string()))?
        .timeout(s.timeout)
        .user_agent(concat!("kube-prober/", env!("CARGO_PKG_VERSION")))
        .map_err(|e| config_err("otlp endpoint", &s.endpoint, e.to_string()))?;
    if https {
        let mut tls = ClientTlsConfig::new();
        tls = match &s.tls.ca_pem {
            Some(ca) => tls.ca_certificate(Certificate::from_pem(ca)),
            None => tls.with_enabled_roots(),
        };
        if let Some((cert, key)) = &s.tls.client {
            tls = tls.identity(Identity::from_pem(cert, key));
        }
        endpoint = endpoint
            .tls_config(tls)
            .map_err(|e| config_err("otlp TLS", &s.endpoint, e.to_string()))?;
    }
    let channel = endpoint.connect_with_connector_lazy(WatchedConnector {
        last_error: last_error.clone(),
    });
    let mut client = MetricsServiceClient::new(channel)
        .max_decoding_message_size(s.max_response_bytes)
        .max_encoding_message_size(usize::MAX);
    if s.compression == OtlpCompression::Gzip {
        client = client.send_compressed(CompressionEncoding::Gzip);
    }
    Ok(Transport::Grpc { client, metadata })
}

/// OTLP/HTTP: a reqwest client with the TLS files and the headers.
fn http_transport(s: &OtlpConfig, https: bool) -> Result<Transport> {
    let mut client = reqwest::Client::builder()
        .timeout(s.timeout)
        .user_agent(concat!("kube-prober/", env!("CARGO_PKG_VERSION")));
    if https {
        if let Some(ca) = &s.tls.ca_pem {
            let certs = reqwest::Certificate::from_pem_bundle(ca)
                .map_err(|e| config_err("otlp CA file", "(PEM)", e.to_string()))?;
            client = client.tls_certs_only(certs);
        }
        if let Some((cert, key)) = &s.tls.client {
            let mut pem = cert.clone();
            pem.push(b'\n');
            pem.extend_from_slice(key);
            let id = reqwest::Identity::from_pem(&pem)
                .map_err(|e| config_err("otlp client certificate", "(PEM)", e.to_string()))?;
            client = client.identity(id);
        }
    }
    let client = client.build().map_err(|e| Error::Config {
        option: "otlp",
        value: s.endpoint.clone(),
        reason: format!("building the HTTP client: {e}"),
    })?;
    let mut headers = reqwest::header::HeaderMap::new();
    for (k, v) in &s.headers {
        let name = http::HeaderName::from_bytes(k.as_bytes())
            .map_err(|e| config_err("otlp header", k, e.to_string()))?;
        let value = http::HeaderValue::from_str(v)
            .map_err(|e| config_err("otlp header", k, e.to_string()))?;
        headers.insert(name, value);
    }
    Ok(Transport::Http { client, headers })
}

/// The error's text with its sources, `: `-separated.
fn with_sources(e: &(dyn std::error::Error + 'static)) -> String {
    let mut message = e.to_string();
    let mut source = e.source();
    let mut depth = 0;
    while let Some(s) = source {
        depth += 1;
        if depth > 16 {
            break;
        }
        let text = s.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = s.source();
    }
    message
}

/// The outcome of one request: whether the receiver answered, and on success the points it
/// rejected (OTLP's `partial_success`), `Err((reason, message))` on failure.
type Sent = (bool, std::result::Result<u64, (String, String)>);

impl OtlpSink {
    /// Builds the sink from its config. Its start time (that of every cumulative point it
    /// sends) is now. Must be called inside a Tokio runtime (the gRPC channel is created
    /// lazily on it).
    pub fn new(config: OtlpConfig, resource: &OtlpResource) -> Result<Self> {
        let last_error = LastError::default();
        let transport = build_transport(&config, &last_error)?;
        let attributes = resource
            .build(&config)
            .into_iter()
            .map(|(k, v)| string_kv(k, v))
            .collect();
        Ok(OtlpSink {
            transport,
            resource: Resource {
                attributes,
                ..Default::default()
            },
            start_time_unix_nano: unix_nanos(SystemTime::now()),
            push_lock: tokio::sync::Mutex::new(()),
            last_error,
            config,
        })
    }

    /// The config in use.
    pub fn config(&self) -> &OtlpConfig {
        &self.config
    }

    /// The start time every cumulative point of this sink carries (Unix nanoseconds).
    pub fn start_time_unix_nano(&self) -> u64 {
        self.start_time_unix_nano
    }

    /// The metrics it sends (`--otlp-semconv`): [`OTLP_METRICS`] or [`OTLP_METRICS_LEGACY`].
    fn metrics(&self) -> &'static [OtelMetric] {
        self.config.semconv.metrics()
    }

    /// One request's message: the resource, our scope, and one metric per non-empty row set
    /// (in the order of [`Self::metrics`]), plus the histogram rows.
    fn request(
        &self,
        batch: Vec<Rows>,
        histograms: Vec<HistogramRow>,
        time_unix_nano: u64,
    ) -> (ExportMetricsServiceRequest, u64) {
        let mut metrics = Vec::new();
        let mut points = 0u64;
        let mut histograms = Some(histograms);
        for (rows, m) in batch.into_iter().zip(self.metrics()) {
            let (data, n) = self.data(m, rows, &mut histograms, time_unix_nano);
            if n == 0 {
                continue;
            }
            points += n as u64;
            let description = families::ALL
                .iter()
                .find(|f| f.name == m.family)
                .map(|f| f.help)
                .unwrap_or_default();
            metrics.push(pm::Metric {
                name: m.name.to_string(),
                description: description.to_string(),
                unit: m.unit.to_string(),
                data: Some(data),
                ..Default::default()
            });
        }
        let request = ExportMetricsServiceRequest {
            resource_metrics: vec![ResourceMetrics {
                resource: Some(self.resource.clone()),
                scope_metrics: vec![ScopeMetrics {
                    scope: Some(InstrumentationScope {
                        name: SCOPE_NAME.to_string(),
                        version: env!("CARGO_PKG_VERSION").to_string(),
                        ..Default::default()
                    }),
                    metrics,
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        (request, points)
    }

    /// The data points of metric `m` from its rows (the histogram metric takes the
    /// histogram rows, once), and how many there are.
    fn data(
        &self,
        m: &OtelMetric,
        rows: Rows,
        histograms: &mut Option<Vec<HistogramRow>>,
        time_unix_nano: u64,
    ) -> (Data, usize) {
        let start = self.start_time_unix_nano;
        match m.kind {
            OtelKind::Gauge => {
                let data_points = number_points(rows, 0, time_unix_nano);
                let n = data_points.len();
                (Data::Gauge(pm::Gauge { data_points }), n)
            }
            OtelKind::Counter | OtelKind::UpDownCounter => {
                let data_points = number_points(rows, start, time_unix_nano);
                let n = data_points.len();
                (
                    Data::Sum(pm::Sum {
                        data_points,
                        aggregation_temporality: AggregationTemporality::Cumulative as i32,
                        is_monotonic: m.kind == OtelKind::Counter,
                    }),
                    n,
                )
            }
            OtelKind::Histogram => {
                let data_points: Vec<HistogramDataPoint> = histograms
                    .take()
                    .unwrap_or_default()
                    .into_iter()
                    .filter_map(|h| histogram_point(h, start, time_unix_nano))
                    .collect();
                let n = data_points.len();
                (
                    Data::Histogram(pm::Histogram {
                        data_points,
                        aggregation_temporality: AggregationTemporality::Cumulative as i32,
                    }),
                    n,
                )
            }
        }
    }

    /// Sends one request over the configured transport.
    async fn export(&self, request: ExportMetricsServiceRequest, points: u64) -> Sent {
        let timeout = self.config.timeout;
        // A little over the client's own timeout, so its error (with details) wins.
        let limit = timeout + Duration::from_millis(500);
        let endpoint = &self.config.endpoint;
        let sent = match &self.transport {
            Transport::Grpc { client, metadata } => {
                if let Ok(mut last) = self.last_error.lock() {
                    *last = None;
                }
                let mut req = tonic::Request::new(request);
                for kv in metadata.iter() {
                    if let tonic::metadata::KeyAndValueRef::Ascii(k, v) = kv {
                        req.metadata_mut().insert(k.clone(), v.clone());
                    }
                }
                let mut client = client.clone();
                tokio::time::timeout(limit, async move {
                    let result = client.export(req).await;
                    self.grpc_outcome(result.map(tonic::Response::into_inner))
                })
                .await
            }
            Transport::Http { client, headers } => {
                tokio::time::timeout(limit, self.http_export(client, headers, request)).await
            }
        };
        match sent {
            Ok((answered, Ok(rejected))) => (answered, Ok(rejected)),
            Ok((answered, Err((reason, message)))) => (
                answered,
                Err((
                    reason,
                    format!("OTLP export of {points} points to {endpoint} failed: {message}"),
                )),
            ),
            Err(_) => (
                false,
                Err((
                    "timeout".into(),
                    format!("OTLP export to {endpoint} did not finish within {limit:?}"),
                )),
            ),
        }
    }

    fn grpc_outcome(
        &self,
        result: std::result::Result<ExportMetricsServiceResponse, tonic::Status>,
    ) -> Sent {
        let status = match result {
            Ok(response) => {
                let rejected = log_partial_success(&self.config.endpoint, &response);
                return (true, Ok(rejected));
            }
            Err(status) => status,
        };
        let connect = self.last_error.lock().ok().and_then(|mut l| l.take());
        let mut message = format!(
            "export failed with gRPC code: {:?}: {}",
            status.code(),
            with_sources(&status)
        );
        if let Some(t) = &connect {
            message = format!("{message}: {}", t.message);
        }
        // tonic's decoding limit (`--max-response-bytes`) on the answer.
        if status.code() == tonic::Code::OutOfRange
            && status.message().contains("message length too large")
        {
            return (
                true,
                Err((
                    "too_large".into(),
                    format!(
                        "{message} (the answer is larger than the {}-byte limit, --max-response-bytes)",
                        self.config.max_response_bytes
                    ),
                )),
            );
        }
        let reason = grpc_reason(&status, self.config.endpoint.starts_with("https://"));
        // A failed connect, and failures tonic makes up itself (TLS, broken connection, its
        // own timeout), never had an answer.
        let answered = connect.is_none() && !matches!(reason, "tls" | "transport" | "timeout");
        (answered, Err((reason.to_string(), message)))
    }

    async fn http_export(
        &self,
        client: &reqwest::Client,
        headers: &reqwest::header::HeaderMap,
        request: ExportMetricsServiceRequest,
    ) -> Sent {
        let body = match self.http_body(request) {
            Ok(b) => b,
            Err(e) => {
                return (
                    false,
                    Err(("error".into(), format!("gzip of the request failed: {e}"))),
                );
            }
        };
        let mut builder = client
            .post(&self.config.endpoint)
            .header(http::header::CONTENT_TYPE, "application/x-protobuf");
        if self.config.compression == OtlpCompression::Gzip {
            builder = builder.header(http::header::CONTENT_ENCODING, "gzip");
        }
        // Set last: an explicit header replaces what the client would send itself.
        for (k, v) in headers {
            builder = builder.header(k.clone(), v.clone());
        }
        match builder.body(body).send().await {
            Ok(response) => self.http_answer(response).await,
            Err(e) => {
                let message = format!("HTTP export failed: {}", with_sources(&e));
                let lower = message.to_ascii_lowercase();
                let reason = if e.is_timeout() {
                    "timeout"
                } else if lower.contains("certificate") || lower.contains("alert") {
                    "tls"
                } else {
                    "transport"
                };
                (false, Err((reason.into(), message)))
            }
        }
    }

    /// The request as protobuf, gzipped when the config says so.
    fn http_body(&self, request: ExportMetricsServiceRequest) -> std::io::Result<Vec<u8>> {
        let body = request.encode_to_vec();
        drop(request);
        if self.config.compression != OtlpCompression::Gzip {
            return Ok(body);
        }
        use std::io::Write as _;
        let mut gz = flate2::write::GzEncoder::new(
            Vec::with_capacity(body.len() / 4),
            flate2::Compression::default(),
        );
        gz.write_all(&body).and_then(|()| gz.finish())
    }

    /// What the receiver's answer says: its status and body (read up to the answer limit).
    async fn http_answer(&self, response: reqwest::Response) -> Sent {
        let status = response.status();
        let body = match read_capped(response, self.config.max_response_bytes).await {
            Ok(b) => b,
            Err(ReadError::TooLarge(t)) => {
                return (
                    true,
                    Err((
                        "too_large".into(),
                        format!("HTTP export answered {}: {t}", status.as_u16()),
                    )),
                );
            }
            Err(ReadError::Read(e)) => {
                let reason = if e.is_timeout() {
                    "timeout"
                } else {
                    "transport"
                };
                return (
                    true,
                    Err((
                        reason.into(),
                        format!(
                            "HTTP export answered {} and the body failed: {}",
                            status.as_u16(),
                            with_sources(&e)
                        ),
                    )),
                );
            }
        };
        if !status.is_success() {
            let text: String = String::from_utf8_lossy(&body).chars().take(300).collect();
            return (
                true,
                Err((
                    format!("http_{}", status.as_u16()),
                    format!(
                        "HTTP export failed with status code: {}: {}",
                        status.as_u16(),
                        text.trim()
                    ),
                )),
            );
        }
        // An empty or undecodable 2xx body is still a success (the spec's receivers answer
        // with a message, but the data was accepted).
        let rejected = ExportMetricsServiceResponse::decode(body).map_or(0, |response| {
            log_partial_success(&self.config.endpoint, &response)
        });
        (true, Ok(rejected))
    }
}

/// Number points of `rows` at `time_unix_nano` (`start` 0: a gauge's, no start time); rows
/// whose value is not finite are left out.
fn number_points(rows: Rows, start: u64, time_unix_nano: u64) -> Vec<NumberDataPoint> {
    rows.into_iter()
        .filter(|(_, v)| v.is_finite())
        .map(|(attributes, v)| NumberDataPoint {
            attributes,
            start_time_unix_nano: start,
            time_unix_nano,
            value: Some(number_data_point::Value::AsDouble(v)),
            ..Default::default()
        })
        .collect()
}

/// Logs a partial success and answers the points it rejected (0 when none or negative).
fn log_partial_success(endpoint: &str, response: &ExportMetricsServiceResponse) -> u64 {
    let Some(p) = &response.partial_success else {
        return 0;
    };
    if p.rejected_data_points > 0 || !p.error_message.is_empty() {
        let message: String = p.error_message.chars().take(300).collect();
        tracing::warn!(
            %endpoint,
            rejected_data_points = p.rejected_data_points,
            message,
            "the OTLP receiver accepted the request in part"
        );
    }
    u64::try_from(p.rejected_data_points).unwrap_or(0)
}

/// The histogram point of one series: per-bucket counts from the snapshot's cumulative ones.
/// `None` (logged) when they are not cumulative.
fn histogram_point(h: HistogramRow, start: u64, time: u64) -> Option<HistogramDataPoint> {
    let per_bucket = per_bucket_counts(&h.buckets, h.count);
    let Some(bucket_counts) = per_bucket.filter(|_| h.buckets.len() == PROBE_BUCKETS.len()) else {
        tracing::debug!(
            series = ?h.attributes,
            "probe histogram counts are not cumulative; series left out of this push"
        );
        return None;
    };
    Some(HistogramDataPoint {
        attributes: h.attributes,
        start_time_unix_nano: start,
        time_unix_nano: time,
        count: h.count,
        sum: h.sum.is_finite().then_some(h.sum),
        bucket_counts,
        explicit_bounds: PROBE_BUCKETS.to_vec(),
        ..Default::default()
    })
}

/// Cumulative counts per bound and the total count as counts per bucket, `+Inf` last.
fn per_bucket_counts(cumulative: &[u64], count: u64) -> Option<Vec<u64>> {
    let mut out = Vec::with_capacity(cumulative.len() + 1);
    let mut below = 0u64;
    for &c in cumulative {
        out.push(c.checked_sub(below)?);
        below = c;
    }
    out.push(count.checked_sub(below)?);
    Some(out)
}

/// The low-cardinality reason of a failed gRPC export, read from the status' code and the
/// types of the errors it carries, never from their text: a TLS failure is `tls`,
/// configuration rather than an outage ([`is_tls`]; `over_tls`: the endpoint is `https://`);
/// tonic's own deadline (`TimeoutExpired`) is `timeout`; an `Unknown` status over a broken
/// connection (a transport, hyper or I/O error) is `transport`.
fn grpc_reason(status: &tonic::Status, over_tls: bool) -> &'static str {
    let mut chain: Vec<&(dyn std::error::Error + 'static)> = Vec::new();
    let mut next = std::error::Error::source(status);
    // Bounded: a cyclic chain must not hang a push.
    while let Some(e) = next.filter(|_| chain.len() < 16) {
        chain.push(e);
        next = e.source();
    }
    if chain.iter().any(|e| is_tls(*e, over_tls)) {
        return "tls";
    }
    let timed_out = chain.iter().any(|e| e.is::<tonic::TimeoutExpired>());
    let broken = chain.iter().any(|e| {
        e.is::<tonic::transport::Error>() || e.is::<hyper::Error>() || e.is::<std::io::Error>()
    });
    use tonic::Code;
    match status.code() {
        Code::Unavailable => "unavailable",
        Code::DeadlineExceeded => "timeout",
        Code::Cancelled if timed_out => "timeout",
        Code::Cancelled => "cancelled",
        Code::Unauthenticated => "unauthenticated",
        Code::PermissionDenied => "permission_denied",
        Code::ResourceExhausted => "resource_exhausted",
        Code::InvalidArgument => "invalid_argument",
        Code::Unimplemented => "unimplemented",
        Code::Internal => "internal",
        Code::Unknown if broken => "transport",
        Code::Unknown => "unknown",
        _ => "error",
    }
}

/// A TLS error: `rustls`' own, an I/O error that wraps one, or, on a TLS connection, an I/O
/// error of kind `InvalidData`: tonic's TLS layer hands a handshake failure on that way, with
/// rustls' error turned into text (bytes that do not decode are the TLS layer's to refuse;
/// HTTP/2's own errors are `h2` errors).
fn is_tls(e: &(dyn std::error::Error + 'static), over_tls: bool) -> bool {
    if e.is::<rustls::Error>() {
        return true;
    }
    let Some(io) = e.downcast_ref::<std::io::Error>() else {
        return false;
    };
    io.get_ref()
        .is_some_and(|inner| inner.is::<rustls::Error>())
        || (over_tls && io.kind() == std::io::ErrorKind::InvalidData)
}

impl Sink for OtlpSink {
    fn name(&self) -> &'static str {
        "otlp"
    }

    async fn push(
        &self,
        snapshot: Arc<Snapshot>,
        scope: PushScope,
    ) -> std::result::Result<PushReport, PushError> {
        self.push_with(snapshot, scope, &PushProgress::default())
            .await
    }

    fn push_tracked<'a>(
        &'a self,
        snapshot: Arc<Snapshot>,
        scope: PushScope,
        progress: &'a PushProgress,
    ) -> impl std::future::Future<Output = std::result::Result<PushReport, PushError>> + Send + 'a
    {
        self.push_with(snapshot, scope, progress)
    }
}

impl OtlpSink {
    /// One push: the snapshot's rows, planned in `progress`, sent in requests; what each
    /// accepted request delivered is told to `progress` as it is answered.
    async fn push_with(
        &self,
        snapshot: Arc<Snapshot>,
        scope: PushScope,
        progress: &PushProgress,
    ) -> std::result::Result<PushReport, PushError> {
        let _one_at_a_time = self.push_lock.lock().await;
        let time = unix_nanos(SystemTime::now());
        let (mut rows, histograms) = prepare(&snapshot, scope, self.metrics());
        let planned = rows.iter().map(Vec::len).sum::<usize>() + histograms.len();
        progress.plan(planned as u64);
        // The instance-level rows (and the probe histogram): one request.
        let instance: Vec<Rows> = rows
            .iter_mut()
            .zip(self.metrics())
            .map(|(r, m)| {
                if is_instance_metric(m) {
                    std::mem::take(r)
                } else {
                    Vec::new()
                }
            })
            .collect();
        let max = self.config.max_points_per_request.max(1);
        let mut sent = PushReport::default();
        self.send(instance, histograms, time, &mut sent, progress)
            .await?;
        while let Some(batch) = next_batch(&mut rows, max) {
            self.send(batch, Vec::new(), time, &mut sent, progress)
                .await?;
        }
        Ok(sent)
    }
}

/// Turns one snapshot into rows per index of `metrics` (non-finite values already left out)
/// and the probe histogram's series (no I/O).
fn prepare(
    snapshot: &Snapshot,
    scope: PushScope,
    metrics: &'static [OtelMetric],
) -> (Vec<Rows>, Vec<HistogramRow>) {
    let mut c = Collector::new(scope, metrics);
    series::visit(
        snapshot,
        &mut super::select::Filter::new(&snapshot.selection, &mut c),
    );
    let age = SystemTime::now()
        .duration_since(snapshot.generated_at)
        .unwrap_or_default()
        .as_secs_f64();
    c.family(&families::SNAPSHOT_AGE, &[(vec![], age)]);
    c.derive();
    for rows in &mut c.rows {
        rows.retain(|(_, v)| v.is_finite());
    }
    // Counts that are not cumulative cannot be sent; every row left is one point.
    c.histograms.retain(|h| {
        let ok = h.buckets.len() == PROBE_BUCKETS.len()
            && per_bucket_counts(&h.buckets, h.count).is_some();
        if !ok {
            tracing::debug!(
                series = ?h.attributes,
                "probe histogram counts are not cumulative; series left out of this push"
            );
        }
        ok
    });
    (c.rows, c.histograms)
}

/// The next batch of at most `max` rows, taken off the end of `rows` (per index of the sink's
/// metrics, in index order; one family may be spread over several batches). `None` when no
/// rows are left.
fn next_batch(rows: &mut [Rows], max: usize) -> Option<Vec<Rows>> {
    let mut batch: Vec<Rows> = vec![Vec::new(); rows.len()];
    let mut n = 0;
    for (i, r) in rows.iter_mut().enumerate() {
        if n == max {
            break;
        }
        if r.is_empty() {
            continue;
        }
        let k = (max - n).min(r.len());
        batch[i] = r.split_off(r.len() - k);
        n += k;
    }
    (n > 0).then_some(batch)
}

impl OtlpSink {
    /// Encodes `batch` (and `histograms`) as one request and sends it (none when it has no
    /// points), adding to `sent` and `progress` the points accepted (those rejected in an
    /// accepted request are lost as `partial`). A failed request ends the push: the error's
    /// `sent` counts it among the requests when the receiver answered, and the points of the
    /// requests before it.
    async fn send(
        &self,
        batch: Vec<Rows>,
        histograms: Vec<HistogramRow>,
        time: u64,
        sent: &mut PushReport,
        progress: &PushProgress,
    ) -> std::result::Result<(), PushError> {
        let (request, points) = self.request(batch, histograms, time);
        if points == 0 {
            return Ok(());
        }
        let (answered, result) = self.export(request, points).await;
        // Only requests the receiver answered count; a connect or transport failure, or no
        // answer in time, is not a request.
        if answered {
            sent.requests += 1;
        }
        match result {
            Ok(rejected) => {
                let rejected = rejected.min(points);
                sent.points += points - rejected;
                progress.accept(points - rejected);
                progress.lose(crate::model::sink::PARTIAL, rejected);
                Ok(())
            }
            Err((reason, message)) => {
                let earlier = sent.requests - u64::from(answered);
                let before = if earlier > 0 {
                    format!(
                        " (request {} of this push; {} points went out before it)",
                        earlier + 1,
                        sent.points
                    )
                } else {
                    String::new()
                };
                Err(PushError {
                    reason,
                    message: format!("{message}{before}"),
                    sent: *sent,
                })
            }
        }
    }
}

/// Turns visitor rows into OTLP rows per index of `metrics`.
struct Collector {
    scope: PushScope,
    /// What is sent: [`OTLP_METRICS`] or [`OTLP_METRICS_LEGACY`].
    metrics: &'static [OtelMetric],
    rows: Vec<Rows>,
    /// Latest utilization per node, for the derived semconv usage metrics (by family name).
    latest: HashMap<&'static str, HashMap<String, f64>>,
    capacity: HashMap<&'static str, HashMap<String, f64>>,
    histograms: Vec<HistogramRow>,
}

fn attrs(labels: &Labels<'_>) -> Vec<KeyValue> {
    labels
        .iter()
        .map(|(k, v)| string_kv(attribute_key(k), *v))
        .collect()
}

fn label<'a>(labels: &'a Labels<'_>, key: &str) -> Option<&'a str> {
    labels.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
}

impl Collector {
    fn new(scope: PushScope, metrics: &'static [OtelMetric]) -> Self {
        Collector {
            scope,
            metrics,
            rows: vec![Vec::new(); metrics.len()],
            latest: HashMap::new(),
            capacity: HashMap::new(),
            histograms: Vec::new(),
        }
    }

    fn wanted(&self, family: &Family) -> bool {
        self.scope == PushScope::All || series::is_instance_level(family)
    }

    /// Derived metrics from what the visit gathered.
    fn derive(&mut self) {
        for (i, m) in self.metrics.iter().enumerate() {
            let Derivation::LatestTimesCapacity { capacity } = m.derivation else {
                continue;
            };
            let (Some(latest), Some(cap)) =
                (self.latest.get(m.family), self.capacity.get(capacity))
            else {
                continue;
            };
            // Point order: the map's (hash order).
            let rows: Rows = latest
                .iter()
                .filter_map(|(node, u)| {
                    let c = cap.get(node)?;
                    Some((vec![string_kv("k8s.node.name", node.clone())], u * c))
                })
                .collect();
            self.rows[i] = rows;
        }
    }

    /// Keeps what the derived metrics need of `family`'s rows: the latest utilization per node
    /// and the capacity per node.
    fn keep_inputs(&mut self, family: &Family, rows: &[(Labels<'_>, f64)]) {
        for m in self.metrics {
            let Derivation::LatestTimesCapacity { capacity } = m.derivation else {
                continue;
            };
            if m.family == family.name {
                let map = self.latest.entry(m.family).or_default();
                for (labels, v) in rows {
                    if label(labels, "window") == Some("instant")
                        && let Some(node) = label(labels, "node")
                    {
                        map.insert(node.to_string(), *v);
                    }
                }
            }
            if capacity == family.name {
                let map = self.capacity.entry(capacity).or_default();
                for (labels, v) in rows {
                    if let Some(node) = label(labels, "node") {
                        map.insert(node.to_string(), *v);
                    }
                }
            }
        }
    }
}

/// The condition rows' attributes but `status`, with `condition` as `condition_key` (or left
/// out when `None`).
fn condition_attrs(labels: &Labels<'_>, condition_key: Option<&'static str>) -> Vec<KeyValue> {
    labels
        .iter()
        .filter(|(k, _)| *k != "status")
        .filter_map(|(k, v)| match *k {
            "condition" => condition_key.map(|key| string_kv(key, *v)),
            k => Some(string_kv(attribute_key(k), *v)),
        })
        .collect()
}

/// [`Derivation::AllConditionStatuses`]: per node and condition type, one point per status,
/// 1 for the current one.
fn all_condition_statuses(rows: &[(Labels<'_>, f64)]) -> Rows {
    let mut out = Vec::with_capacity(rows.len() * 3);
    for (labels, _) in rows {
        let current = label(labels, "status")
            .unwrap_or("unknown")
            .to_ascii_lowercase();
        let base = condition_attrs(labels, Some("k8s.node.condition.type"));
        let mut statuses = vec!["true", "false", "unknown"];
        if !statuses.contains(&current.as_str()) {
            statuses.push(current.as_str());
        }
        for st in statuses {
            let mut a = base.clone();
            a.push(string_kv("k8s.node.condition.status", st));
            out.push((a, if st == current { 1.0 } else { 0.0 }));
        }
    }
    out
}

/// [`Derivation::ConditionValue`]: the rows of condition type `condition`, 1 for `True`, 0 for
/// `False`, -1 for any other status (as the Collector's legacy node condition metrics).
fn condition_values(rows: &[(Labels<'_>, f64)], condition: &str) -> Rows {
    rows.iter()
        .filter(|(labels, _)| label(labels, "condition") == Some(condition))
        .map(|(labels, _)| {
            let v = match label(labels, "status") {
                Some(s) if s.eq_ignore_ascii_case("true") => 1.0,
                Some(s) if s.eq_ignore_ascii_case("false") => 0.0,
                _ => -1.0,
            };
            (condition_attrs(labels, None), v)
        })
        .collect()
}

impl Visitor for Collector {
    fn family(&mut self, family: &Family, rows: &[(Labels<'_>, f64)]) {
        if !self.wanted(family) {
            return;
        }
        self.keep_inputs(family, rows);
        for (i, m) in self.metrics.iter().enumerate() {
            if m.family != family.name {
                continue;
            }
            match m.derivation {
                Derivation::Rows => {
                    self.rows[i] = rows.iter().map(|(l, v)| (attrs(l), *v)).collect();
                }
                Derivation::AllConditionStatuses => self.rows[i] = all_condition_statuses(rows),
                Derivation::ConditionValue { condition } => {
                    self.rows[i] = condition_values(rows, condition);
                }
                Derivation::LatestTimesCapacity { .. } => {}
            }
        }
    }

    fn histogram(
        &mut self,
        family: &Family,
        bounds: &[f64],
        rows: &[(Labels<'_>, &[u64], f64, u64)],
    ) {
        if !self.wanted(family) || bounds != PROBE_BUCKETS.as_slice() {
            return;
        }
        for (labels, buckets, sum, count) in rows {
            self.histograms.push(HistogramRow {
                attributes: attrs(labels),
                buckets: buckets.to_vec(),
                count: *count,
                sum: *sum,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A point's attributes as `key=value,...` and its value.
    fn shown(rows: Rows) -> Vec<(String, f64)> {
        rows.into_iter()
            .map(|(attributes, v)| {
                let a: Vec<String> = attributes
                    .iter()
                    .map(
                        |kv| match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                            Some(any_value::Value::StringValue(s)) => format!("{}={s}", kv.key),
                            other => format!("{}={other:?}", kv.key),
                        },
                    )
                    .collect();
                (a.join(","), v)
            })
            .collect()
    }

    /// Metrics as `node_metrics_as` shows them: name, kind, points.
    type Shown = Vec<(&'static str, OtelKind, Vec<(String, f64)>)>;

    /// The non-empty metrics made of the same node rows under `semconv`: name, kind, points.
    fn node_metrics_as(semconv: Semconv) -> Shown {
        let conditions: Vec<(Labels<'_>, f64)> = [
            ("n1", "Ready", "True"),
            ("n2", "Ready", "Unknown"),
            ("n1", "MemoryPressure", "False"),
            ("n1", "KernelDeadlock", "True"),
        ]
        .into_iter()
        .map(|(n, c, st)| {
            let labels = vec![
                ("node", n),
                ("pool", "p"),
                ("zone", "z"),
                ("condition", c),
                ("status", st),
            ];
            (labels, 1.0)
        })
        .collect();
        let restarts: Vec<(Labels<'_>, f64)> =
            vec![(vec![("container", "dns"), ("addon", "kube-dns")], 3.0)];
        let mut c = Collector::new(PushScope::All, semconv.metrics());
        c.family(
            &families::NODE_ALLOCATABLE_CPU,
            &[(vec![("node", "n1")], 4.0)],
        );
        c.family(&families::NODE_CONDITION, &conditions);
        c.family(&families::CONTAINER_RESTARTS, &restarts);
        c.metrics
            .iter()
            .zip(c.rows)
            .filter(|(_, r)| !r.is_empty())
            .map(|(m, r)| (m.name, m.kind, shown(r)))
            .collect()
    }

    /// `--otlp-semconv stable` sends semconv's names and kinds (the Collector's with its
    /// `semconv.k8s.enableStable` gate); `legacy` the Collector's without it: its names, gauges,
    /// and one metric per kubelet condition type valued 1, 0 or -1.
    #[test]
    fn the_semconv_choice_sends_the_collectors_names_with_or_without_its_gate() {
        use OtelKind::{Gauge, UpDownCounter};
        let node = |n: &str| format!("k8s.node.name={n},pool=p,zone=z");
        let legacy = node_metrics_as(Semconv::Legacy);
        assert_eq!(
            legacy,
            vec![
                (
                    "k8s.node.allocatable_cpu",
                    Gauge,
                    vec![("k8s.node.name=n1".to_string(), 4.0)]
                ),
                (
                    "k8s.node.condition_ready",
                    Gauge,
                    vec![(node("n1"), 1.0), (node("n2"), -1.0)]
                ),
                (
                    "k8s.node.condition_memory_pressure",
                    Gauge,
                    vec![(node("n1"), 0.0)]
                ),
                (
                    "k8s.container.restarts",
                    Gauge,
                    vec![("k8s.container.name=dns,addon=kube-dns".to_string(), 3.0)]
                ),
            ],
            "KernelDeadlock has no legacy metric"
        );

        let stable = node_metrics_as(Semconv::Stable);
        let names: Vec<(&str, OtelKind)> = stable.iter().map(|(n, k, _)| (*n, *k)).collect();
        assert_eq!(
            names,
            [
                ("k8s.node.cpu.allocatable", UpDownCounter),
                ("k8s.node.condition.status", UpDownCounter),
                ("k8s.container.restart.count", UpDownCounter),
            ]
        );
        let (_, _, statuses) = &stable[1];
        assert_eq!(statuses.len(), 4 * 3, "every status of every condition");
        let current: Vec<&str> = statuses
            .iter()
            .filter(|(_, v)| *v == 1.0)
            .map(|(a, _)| a.as_str())
            .collect();
        assert_eq!(
            current,
            [
                "k8s.node.name=n1,pool=p,zone=z,k8s.node.condition.type=Ready,k8s.node.condition.status=true",
                "k8s.node.name=n2,pool=p,zone=z,k8s.node.condition.type=Ready,k8s.node.condition.status=unknown",
                "k8s.node.name=n1,pool=p,zone=z,k8s.node.condition.type=MemoryPressure,k8s.node.condition.status=false",
                "k8s.node.name=n1,pool=p,zone=z,k8s.node.condition.type=KernelDeadlock,k8s.node.condition.status=true",
            ]
        );
    }

    #[test]
    fn otlp_semconv_defaults_to_stable_and_refuses_other_values() {
        let with = |v: Option<&str>| OtlpOptions {
            otlp_endpoint: Some("http://127.0.0.1:9".into()),
            otlp_semconv: v.map(String::from),
            ..Default::default()
        };
        let resolve = |o: OtlpOptions| o.resolve_with(OtlpBounds::default(), &|_| None);
        assert_eq!(
            resolve(with(None)).expect("default").semconv,
            Semconv::Stable
        );
        assert_eq!(
            resolve(with(Some("legacy"))).expect("legacy").semconv,
            Semconv::Legacy
        );
        assert_eq!(
            resolve(with(Some("stable"))).expect("stable").semconv,
            Semconv::Stable
        );
        let err = with(Some("k8s/dup")).check().expect_err("not a choice");
        let text = err.to_string();
        assert!(
            text.contains("--otlp-semconv") && text.contains("k8s/dup"),
            "{text}"
        );
    }

    #[test]
    fn histogram_counts_are_the_snapshots_per_bucket() {
        // Cumulative per bound: 1 in (0, b0], 2 more in (b1, b2], 1 above the last bound.
        let mut cumulative = vec![0u64; PROBE_BUCKETS.len()];
        for (i, c) in cumulative.iter_mut().enumerate() {
            *c = match i {
                0 | 1 => 1,
                _ => 3,
            };
        }
        let h = HistogramRow {
            attributes: vec![string_kv("probe", "dns")],
            buckets: cumulative,
            count: 4,
            sum: 9.5,
        };
        let p = histogram_point(h.clone(), 7, 9).expect("cumulative");
        let mut want = vec![0u64; PROBE_BUCKETS.len() + 1];
        want[0] = 1;
        want[2] = 2;
        want[PROBE_BUCKETS.len()] = 1;
        assert_eq!(p.bucket_counts, want);
        assert_eq!((p.count, p.sum, p.min, p.max), (4, Some(9.5), None, None));
        assert_eq!((p.start_time_unix_nano, p.time_unix_nano), (7, 9));
        assert_eq!(p.explicit_bounds, PROBE_BUCKETS.to_vec());
        // Not cumulative, or a count below the last bucket: left out.
        let mut bad = h.clone();
        bad.buckets[1] = 0;
        assert_eq!(histogram_point(bad, 7, 9), None);
        let bad = HistogramRow {
            count: 2,
            ..h.clone()
        };
        assert_eq!(histogram_point(bad, 7, 9), None);
        let short = HistogramRow {
            buckets: vec![1],
            count: 1,
            ..h
        };
        assert_eq!(histogram_point(short, 7, 9), None);
    }

    /// NaN and ±Inf never reach the wire: their points are absent, and a request with only
    /// such values is not sent at all (it has no points).
    #[tokio::test]
    async fn non_finite_values_are_left_out() {
        let config = OtlpOptions {
            otlp_endpoint: Some("http://127.0.0.1:9".into()),
            ..Default::default()
        }
        .resolve_with(OtlpBounds::default(), &|_| None)
        .expect("config");
        let sink = OtlpSink::new(config, &OtlpResource::default()).expect("sink");
        let gauge = OTLP_METRICS
            .iter()
            .position(|m| m.kind == OtelKind::Gauge)
            .expect("a gauge");
        let sum = OTLP_METRICS
            .iter()
            .position(|m| m.kind == OtelKind::Counter)
            .expect("a counter");
        let mut batch: Vec<Rows> = vec![Vec::new(); OTLP_METRICS.len()];
        batch[gauge] = vec![
            (vec![string_kv("a", "nan")], f64::NAN),
            (vec![string_kv("a", "one")], 1.0),
            (vec![string_kv("a", "inf")], f64::INFINITY),
        ];
        batch[sum] = vec![(vec![string_kv("a", "-inf")], f64::NEG_INFINITY)];
        let (req, points) = sink.request(batch, Vec::new(), 5);
        assert_eq!(points, 1);
        let metrics = &req.resource_metrics[0].scope_metrics[0].metrics;
        assert_eq!(metrics.len(), 1, "the counter had only -Inf: no metric");
        assert_eq!(metrics[0].name, OTLP_METRICS[gauge].name);
        let Some(Data::Gauge(g)) = &metrics[0].data else {
            panic!("not a gauge")
        };
        assert_eq!(g.data_points.len(), 1);
        assert_eq!(
            g.data_points[0].value,
            Some(number_data_point::Value::AsDouble(1.0))
        );

        let mut only_nan: Vec<Rows> = vec![Vec::new(); OTLP_METRICS.len()];
        only_nan[gauge] = vec![(vec![], f64::NAN)];
        let mut sent = PushReport::default();
        // Nothing listens on port 9: a request would fail; none is made.
        sink.send(only_nan, Vec::new(), 5, &mut sent, &PushProgress::default())
            .await
            .expect("nothing to send");
        assert_eq!(sent, PushReport::default());
    }

    #[test]
    fn every_cumulative_point_of_a_request_has_the_sinks_start_time() {
        let config = OtlpOptions {
            otlp_endpoint: Some("http://127.0.0.1:9".into()),
            ..Default::default()
        }
        .resolve_with(OtlpBounds::default(), &|_| None)
        .expect("config");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let _guard = rt.enter();
        let sink = OtlpSink::new(config, &OtlpResource::default()).expect("sink");
        let start = sink.start_time_unix_nano();
        assert!(start > 0);
        let mut batch: Vec<Rows> = vec![Vec::new(); OTLP_METRICS.len()];
        for (i, rows) in batch.iter_mut().enumerate() {
            *rows = vec![(vec![string_kv("i", i.to_string())], 1.0)];
        }
        let hist = HistogramRow {
            attributes: vec![],
            buckets: vec![0; PROBE_BUCKETS.len()],
            count: 0,
            sum: 0.0,
        };
        let (req, points) = sink.request(batch, vec![hist], start + 10);
        assert_eq!(points as usize, OTLP_METRICS.len());
        for m in &req.resource_metrics[0].scope_metrics[0].metrics {
            match &m.data {
                Some(Data::Sum(s)) => {
                    assert!(
                        s.data_points
                            .iter()
                            .all(|p| p.start_time_unix_nano == start)
                    )
                }
                Some(Data::Histogram(h)) => {
                    assert!(
                        h.data_points
                            .iter()
                            .all(|p| p.start_time_unix_nano == start)
                    )
                }
                Some(Data::Gauge(g)) => {
                    assert!(g.data_points.iter().all(|p| p.start_time_unix_nano == 0))
                }
                other => panic!("{}: {other:?}", m.name),
            }
        }
    }

    #[test]
    fn grpc_reasons_come_from_the_status_code_and_the_types_it_carries() {
        use tonic::{Code, Status};
        let io = |kind| std::io::Error::new(kind, "x");
        let tls = || rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        let cases: Vec<(Status, &str)> = vec![
            (Status::unavailable("x"), "unavailable"),
            (Status::deadline_exceeded("x"), "timeout"),
            // tonic's own deadline: Cancelled carrying `TimeoutExpired`.
            (
                Status::from_error(Box::new(tonic::TimeoutExpired(()))),
                "timeout",
            ),
            // The words alone do not make a timeout.
            (Status::cancelled("Timeout expired"), "cancelled"),
            (Status::resource_exhausted("x"), "resource_exhausted"),
            (Status::new(Code::Unauthenticated, "x"), "unauthenticated"),
            // A TLS failure, bare or inside an I/O error, whatever the code says.
            (Status::from_error(Box::new(tls())), "tls"),
            (
                Status::from_error(Box::new(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    tls(),
                ))),
                "tls",
            ),
            // A broken connection under Unknown.
            (
                Status::from_error(Box::new(io(std::io::ErrorKind::ConnectionReset))),
                "transport",
            ),
            // Text that names TLS or a transport error is not one.
            (
                Status::unknown("transport error: received fatal alert: invalid peer certificate"),
                "unknown",
            ),
            (Status::new(Code::DataLoss, "x"), "error"),
        ];
        for (status, want) in cases {
            assert_eq!(grpc_reason(&status, false), want, "{status:?}");
        }
        // tonic's TLS layer: rustls' error as text in an I/O error of kind InvalidData. On a
        // TLS connection that is TLS; on plain TCP it is a broken connection.
        let handshake = || {
            Status::from_error(Box::new(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "received fatal alert: CertificateRequired",
            )))
        };
        assert_eq!(grpc_reason(&handshake(), true), "tls");
        assert_eq!(grpc_reason(&handshake(), false), "transport");
    }
}
