//! OTLP push output: each push turns one [`Snapshot`] into OTLP metrics and sends them with
//! opentelemetry-otlp's `MetricExporter` (gRPC or HTTP/protobuf), in requests of at most
//! [`OtlpSettings::max_points_per_request`] data points (see "Requests" below).
//!
//! `ResourceMetrics` can only be made by the SDK, so the sink keeps two private
//! `SdkMeterProvider`s, each with a `ManualReader` (cumulative temporality), and one
//! instrument per row of [`OTLP_METRICS`] in one of them: the *instance* pipeline has the
//! instance-level families ([`series::is_instance_level`]) and the probe histogram, the
//! *batched* pipeline everything else.
//! - gauges are `ObservableGauge<f64>`, counters `ObservableCounter<f64>` (monotonic cumulative
//!   sums), semconv up-down counters `ObservableUpDownCounter<f64>` (non-monotonic cumulative
//!   sums). Their callbacks read the rows this push prepared in a shared slot. Observable
//!   instruments forget every series their callback did not report, so a series that left the
//!   snapshot is not sent again, and cumulative sums keep the start time the instrument was
//!   made with (the sink's start) for as long as the process lives.
//! - the probe duration histogram is pre-aggregated in the snapshot (cumulative bucket counts,
//!   sum, count) and the SDK takes no pre-aggregated histograms. The sink keeps the counts it
//!   fed last and records, per push, the difference into a synchronous `Histogram<f64>` with the
//!   same bounds: `d` values per bucket, placed inside their bucket so that the values add up
//!   to the snapshot's sum. Bucket counts, count and sum then equal the snapshot's exactly
//!   (the sum up to float rounding); min and max are switched off with a View because they
//!   would be made up. Probe series never leave the hub, so the SDK keeping histogram series
//!   forever loses nothing today.
//!
//! A View raises the SDK's default cardinality limit (2,000 series per instrument, beyond which
//! the SDK folds series into `otel.metric.overflow=true`) to [`SERIES_LIMIT`] for the
//! cluster-level metrics of the `cluster` role ([`SMALL_SERIES_LIMIT`] elsewhere). The limit
//! applies per collect, i.e. per request: with batches of at most `max_points_per_request`
//! points it only folds when set below that. Values that
//! are NaN or infinite are dropped by the SDK: their series is absent from that push.
//!
//! ## Requests
//! One push is one collect and one export request of the instance pipeline (the instance's
//! own series and the probe histogram: a few per probe, source and sink, not growing with the
//! cluster; not split), then as many collects and requests of the batched pipeline as needed:
//! before each collect the shared slot gets the next batch of at most
//! `max_points_per_request` rows, taken family by family in [`OTLP_METRICS`] order, a family
//! larger than what is left of the batch being spread over several batches. Only the rows of
//! the current batch are reported, so the SDK forgets every other series for that collect and
//! each series of the snapshot goes out exactly once per push; the collected
//! `ResourceMetrics` (and its encoded request) is dropped before the next batch, so the memory
//! of a push is that of the rows plus one request rather than of the whole push. Cumulative
//! sums keep their start time across batches and pushes: an instrument lives in one pipeline
//! only. The histogram is in the instance pipeline because the SDK reports a synchronous
//! instrument's series in every collect. A collect without points (nothing in the batch, or
//! only NaN values) sends nothing. `PushReport` counts the requests sent and their points.
//!
//! A failed request ends the push: the remaining batches are not sent (the receiver is most
//! likely down or refusing, and each further request would wait for its own timeout), and
//! `PushError::sent` counts the requests the receiver answered, the failed one included when
//! it answered (a connect, TLS or transport failure, or no answer in time, is not a request),
//! and the points of those that succeeded. The next push sends everything again. The per-request timeout is the
//! configured one; the push runner's timeout bounds the whole push.
//!
//! Retries inside the exporter are off: the push runner has its own ticker, timeout and
//! failure counters.
//!
//! ## Settings and the environment
//! Each setting of [`OtlpConfig`] that is unset falls back to `OTEL_EXPORTER_OTLP_METRICS_*`,
//! then `OTEL_EXPORTER_OTLP_*`, then the default; [`OtlpConfig::resolve`] does this and turns
//! every bad value into `Error::Config` naming the flag or variable. The resolved protocol,
//! endpoint, timeout, compression (when gzip) and TLS files are handed to the exporter
//! explicitly, so opentelemetry-otlp's own reading of those variables never decides anything
//! (it does not read `*_PROTOCOL` for the transport, nor the certificate variables, at all).
//! Two things it does read itself:
//! - headers (`*_METRICS_HEADERS`, else `*_HEADERS`): it adds them to every request; the sink
//!   validates them at start and sets the explicit headers last (a tonic interceptor, a wrapped
//!   HTTP client), so an explicit header replaces an environment one of the same name.
//! - compression: with compression set to `none` explicitly, a `gzip` in `*_COMPRESSION` still
//!   turns gzip on inside the exporter (it cannot be told "none").
//!
//! `OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE` is not honoured: always cumulative.
//! `OTEL_RESOURCE_ATTRIBUTES` adds to and overrides the sink's resource attributes;
//! `OTEL_SERVICE_NAME` overrides `service.name`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime};

use opentelemetry::metrics::{Histogram, Meter, MeterProvider as _};
use opentelemetry::{Key, KeyValue};
use opentelemetry_otlp::tonic_types::metadata::MetadataMap;
use opentelemetry_otlp::tonic_types::transport::{Certificate, ClientTlsConfig, Identity};
use opentelemetry_otlp::{
    Compression, MetricExporter, Protocol, RetryPolicy, WithExportConfig, WithHttpConfig,
    WithTonicConfig,
};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData, ResourceMetrics};
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::reader::MetricReader;
use opentelemetry_sdk::metrics::{
    Aggregation, Instrument, InstrumentKind, ManualReader, Pipeline, SdkMeterProvider, Stream,
    Temporality,
};

use super::names::{self, Family};
use super::series::{self, Labels, Visitor};
use super::{PushError, PushReport, PushScope, Sink};
use crate::error::{Error, Result};
use crate::model::{PROBE_BUCKETS, Snapshot};

mod config;
mod table;

use config::config_err;
pub use config::{
    DEFAULT_MAX_POINTS_PER_REQUEST, DEFAULT_TIMEOUT, OtlpCompression, OtlpConfig, OtlpProtocol,
    OtlpResource, OtlpSettings, OtlpTls,
};
pub use table::{Derivation, OTLP_METRICS, OtelKind, OtelMetric, attribute_key};

/// Series one instrument may carry per push before the SDK folds the rest into
/// `otel.metric.overflow`, for the cluster-level families of the `cluster` role: 5,000 nodes
/// (the Kubernetes limit) times 40 series per node (`k8s.node.condition.status` sends three per
/// node and condition type). The SDK's default is 2,000.
///
/// The SDK sizes each instrument's series table for its limit when the instrument is made:
/// with this limit the cluster role's sink costs about 12 MiB more resident memory than with
/// the default (measured, debug build), so the other roles and the instance-level families use
/// [`SMALL_SERIES_LIMIT`] (about 0.6 MiB), and [`OtlpConfig::series_limit`] can lower it.
pub const SERIES_LIMIT: usize = 200_000;
/// Limit for the node and host roles and for instance-level families (probes, sources, sinks,
/// build): their series do not grow with the cluster.
pub const SMALL_SERIES_LIMIT: usize = 4_000;

/// The instrumentation scope name the metrics carry.
pub const SCOPE_NAME: &str = "kube-prober";
/// A `ManualReader` the sink keeps a handle to after giving it to the provider.
#[derive(Debug, Clone)]
struct SharedReader(Arc<ManualReader>);

impl MetricReader for SharedReader {
    fn register_pipeline(&self, pipeline: Weak<Pipeline>) {
        self.0.register_pipeline(pipeline)
    }
    fn collect(&self, rm: &mut ResourceMetrics) -> OTelSdkResult {
        self.0.collect(rm)
    }
    fn force_flush(&self) -> OTelSdkResult {
        self.0.force_flush()
    }
    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.0.shutdown_with_timeout(timeout)
    }
    fn temporality(&self, kind: InstrumentKind) -> Temporality {
        self.0.temporality(kind)
    }
}

type Rows = Vec<(Vec<KeyValue>, f64)>;

/// What the callbacks read during one collect: rows per [`OTLP_METRICS`] index.
#[derive(Default)]
struct Prepared {
    rows: Vec<Rows>,
}

/// What was last fed into the histogram for one series.
#[derive(Debug, Clone, PartialEq)]
struct Fed {
    buckets: Vec<u64>,
    count: u64,
    sum: f64,
}

struct State {
    exporter: MetricExporter,
    histogram: Histogram<f64>,
    fed: HashMap<Vec<(&'static str, String)>, Fed>,
}

/// The OTLP push output.
pub struct OtlpSink {
    /// Keep the pipelines alive: the readers hold only a weak reference to them. The first
    /// has the instance-level instruments and the probe histogram, the second the rest.
    _providers: [SdkMeterProvider; 2],
    /// Reader of the instance-level pipeline: one request per push, not split.
    instance_reader: SharedReader,
    /// Reader of the other pipeline: collected once per batch.
    reader: SharedReader,
    slot: Arc<Mutex<Prepared>>,
    /// One push at a time: the slot and the histogram baseline belong to it.
    state: tokio::sync::Mutex<State>,
    settings: OtlpSettings,
    /// Filled by the OTLP/HTTP client on transport errors.
    last_error: LastError,
}

impl std::fmt::Debug for OtlpSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OtlpSink")
            .field("protocol", &self.settings.protocol)
            .field("endpoint", &self.settings.endpoint)
            .finish()
    }
}

/// Whether a metric belongs to an instance-level family (probes, sources, sinks, build, ...):
/// those and the probe histogram go through the sink's instance pipeline, the rest through
/// the batched one.
fn is_instance_metric(metric: &OtelMetric) -> bool {
    names::ALL
        .iter()
        .any(|f| f.name == metric.family && series::is_instance_level(f))
}

/// Registers the observable instruments of the metrics with `is_instance_metric == instance`.
fn register(meter: &Meter, slot: &Arc<Mutex<Prepared>>, instance: bool) {
    for (i, metric) in OTLP_METRICS.iter().enumerate() {
        if is_instance_metric(metric) != instance {
            continue;
        }
        let description = names::ALL
            .iter()
            .find(|f| f.name == metric.family)
            .map(|f| f.help)
            .unwrap_or_default();
        let slot = slot.clone();
        let emit = move |observe: &dyn Fn(f64, &[KeyValue])| {
            if let Ok(p) = slot.lock()
                && let Some(rows) = p.rows.get(i)
            {
                for (attrs, v) in rows {
                    observe(*v, attrs);
                }
            }
        };
        // Observable instruments stay registered with the provider; the handles are not needed.
        match metric.kind {
            OtelKind::Gauge => {
                meter
                    .f64_observable_gauge(metric.name)
                    .with_description(description)
                    .with_unit(metric.unit)
                    .with_callback(move |o| emit(&|v, a| o.observe(v, a)))
                    .build();
            }
            OtelKind::Counter => {
                meter
                    .f64_observable_counter(metric.name)
                    .with_description(description)
                    .with_unit(metric.unit)
                    .with_callback(move |o| emit(&|v, a| o.observe(v, a)))
                    .build();
            }
            OtelKind::UpDownCounter => {
                meter
                    .f64_observable_up_down_counter(metric.name)
                    .with_description(description)
                    .with_unit(metric.unit)
                    .with_callback(move |o| emit(&|v, a| o.observe(v, a)))
                    .build();
            }
            OtelKind::Histogram => {}
        }
    }
}

/// The series limit of one metric: `large` for cluster-level families, else the small one.
fn series_limit(metric: &OtelMetric, large: usize) -> usize {
    if is_instance_metric(metric) {
        SMALL_SERIES_LIMIT
    } else {
        large
    }
}

/// Cardinality limits and histogram bounds (min/max off).
fn view(large: usize) -> impl Fn(&Instrument) -> Option<Stream> + Send + Sync + 'static {
    move |i: &Instrument| {
        let metric = OTLP_METRICS.iter().find(|m| m.name == i.name())?;
        let builder = Stream::builder().with_cardinality_limit(series_limit(metric, large));
        let builder = match metric.kind {
            OtelKind::Histogram => builder.with_aggregation(Aggregation::ExplicitBucketHistogram {
                boundaries: PROBE_BUCKETS.to_vec(),
                record_min_max: false,
            }),
            _ => builder,
        };
        builder.build().ok()
    }
}

fn tls_files_given(tls: &OtlpTls) -> bool {
    tls.ca_pem.is_some() || tls.client.is_some()
}

/// The last transport error, in full: opentelemetry-otlp reports only "network error" (HTTP)
/// or the gRPC code. Set by the OTLP/HTTP client, and by the gRPC channel's connector when it
/// could not connect (then the gRPC code stays the reason: `keep_reason`). Either way the
/// request never reached the receiver, so it is not counted as a request.
#[derive(Debug, Clone, Default)]
struct TransportError {
    message: String,
    timeout: bool,
    keep_reason: bool,
}

type LastError = Arc<Mutex<Option<TransportError>>>;

/// The OTLP/HTTP client: reqwest, with the explicit headers set last on every request (so
/// they win over the environment's) and the full text of transport errors kept.
#[derive(Debug)]
struct HttpTransport {
    client: reqwest::Client,
    headers: Vec<(http::HeaderName, http::HeaderValue)>,
    last_error: LastError,
}

impl opentelemetry_http::HttpClient for HttpTransport {
    // What `#[async_trait]` expands the trait method to.
    fn send_bytes<'a, 'b>(
        &'a self,
        mut request: http::Request<opentelemetry_http::Bytes>,
    ) -> std::pin::Pin<
        Box<
            dyn std::future::Future<
                    Output = std::result::Result<
                        http::Response<opentelemetry_http::Bytes>,
                        opentelemetry_http::HttpError,
                    >,
                > + Send
                + 'b,
        >,
    >
    where
        'a: 'b,
        Self: 'b,
    {
        Box::pin(async move {
            for (k, v) in &self.headers {
                request.headers_mut().insert(k.clone(), v.clone());
            }
            let result = opentelemetry_http::HttpClient::send_bytes(&self.client, request).await;
            if let Err(e) = &result {
                let timeout = e
                    .downcast_ref::<reqwest::Error>()
                    .is_some_and(reqwest::Error::is_timeout);
                let mut message = e.to_string();
                let mut source = e.source();
                while let Some(s) = source {
                    message.push_str(": ");
                    message.push_str(&s.to_string());
                    source = s.source();
                }
                if let Ok(mut last) = self.last_error.lock() {
                    *last = Some(TransportError {
                        message,
                        timeout,
                        keep_reason: false,
                    });
                }
            }
            result
        })
    }
}

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
                            timeout: e.kind() == std::io::ErrorKind::TimedOut,
                            keep_reason: true,
                        });
                    }
                    Err(e)
                }
            }
        })
    }
}

fn build_exporter(s: &OtlpSettings, last_error: &LastError) -> Result<MetricExporter> {
    let https = s.endpoint.starts_with("https://");
    if !https && tls_files_given(&s.tls) {
        tracing::warn!(
            endpoint = %s.endpoint,
            "OTLP TLS files are set but the endpoint is not https://; they are not used"
        );
    }
    let build_err = |e: opentelemetry_otlp::ExporterBuildError| Error::Config {
        option: "otlp",
        value: s.endpoint.clone(),
        reason: e.to_string(),
    };
    match s.protocol {
        OtlpProtocol::Grpc => {
            let mut metadata = MetadataMap::new();
            for (k, v) in &s.explicit_headers {
                let key = tonic::metadata::MetadataKey::from_bytes(k.as_bytes())
                    .map_err(|e| config_err("otlp header", k, e.to_string()))?;
                let value: tonic::metadata::MetadataValue<tonic::metadata::Ascii> = v
                    .parse()
                    .map_err(|_| config_err("otlp header", k, "not a valid header value"))?;
                metadata.insert(key, value);
            }
            // Runs after the exporter added its own and the environment's headers, so the
            // explicit ones replace those with the same name.
            let explicit = metadata.clone();
            let interceptor = move |mut req: tonic::Request<()>| {
                for kv in explicit.iter() {
                    if let tonic::metadata::KeyAndValueRef::Ascii(k, v) = kv {
                        req.metadata_mut().insert(k.clone(), v.clone());
                    }
                }
                Ok(req)
            };
            // Our own channel (same endpoint, timeout and TLS as the exporter would make), so
            // that a failed connect is known: see `WatchedConnector`.
            let mut endpoint = tonic::transport::Endpoint::from_shared(s.endpoint.clone())
                .map_err(|e| config_err("otlp endpoint", &s.endpoint, e.to_string()))?
                .timeout(s.timeout);
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
            let mut b = MetricExporter::builder()
                .with_tonic()
                .with_channel(channel)
                .with_protocol(Protocol::Grpc)
                .with_timeout(s.timeout)
                .with_metadata(metadata)
                .with_interceptor(interceptor)
                .with_retry_policy(RetryPolicy::disabled());
            if s.compression == OtlpCompression::Gzip {
                b = b.with_compression(Compression::Gzip);
            }
            b.build().map_err(build_err)
        }
        OtlpProtocol::HttpProtobuf => {
            let mut client = reqwest::Client::builder().timeout(s.timeout);
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
                    let id = reqwest::Identity::from_pem(&pem).map_err(|e| {
                        config_err("otlp client certificate", "(PEM)", e.to_string())
                    })?;
                    client = client.identity(id);
                }
            }
            let client = client.build().map_err(|e| Error::Config {
                option: "otlp",
                value: s.endpoint.clone(),
                reason: format!("building the HTTP client: {e}"),
            })?;
            let mut headers = Vec::new();
            for (k, v) in &s.explicit_headers {
                let name = http::HeaderName::from_bytes(k.as_bytes())
                    .map_err(|e| config_err("otlp header", k, e.to_string()))?;
                let value = http::HeaderValue::from_str(v)
                    .map_err(|e| config_err("otlp header", k, e.to_string()))?;
                headers.push((name, value));
            }
            let transport = HttpTransport {
                client,
                headers,
                last_error: last_error.clone(),
            };
            let mut b = MetricExporter::builder()
                .with_http()
                .with_endpoint(s.endpoint.clone())
                .with_protocol(Protocol::HttpBinary)
                .with_timeout(s.timeout)
                .with_http_client(transport)
                .with_retry_policy(RetryPolicy::disabled());
            if s.compression == OtlpCompression::Gzip {
                b = b.with_compression(Compression::Gzip);
            }
            b.build().map_err(build_err)
        }
    }
}

impl OtlpSink {
    /// Resolves `config` against the process environment and builds the sink. Must be called
    /// inside a Tokio runtime (the gRPC channel is created lazily on it).
    pub fn new(config: &OtlpConfig, resource: &OtlpResource) -> Result<Self> {
        Self::from_settings(config.resolve()?, resource)
    }

    /// Builds the sink from resolved settings.
    pub fn from_settings(settings: OtlpSettings, resource: &OtlpResource) -> Result<Self> {
        let last_error = LastError::default();
        let exporter = build_exporter(&settings, &last_error)?;
        let large = settings
            .series_limit
            .unwrap_or(if resource.role == "cluster" {
                SERIES_LIMIT
            } else {
                SMALL_SERIES_LIMIT
            });
        let otel_resource = resource.build(&settings);
        let pipeline = || {
            let reader = SharedReader(Arc::new(
                ManualReader::builder()
                    .with_temporality(Temporality::Cumulative)
                    .build(),
            ));
            let provider = SdkMeterProvider::builder()
                .with_resource(otel_resource.clone())
                .with_reader(reader.clone())
                .with_view(view(large))
                .build();
            let meter = provider.meter_with_scope(
                opentelemetry::InstrumentationScope::builder(SCOPE_NAME)
                    .with_version(env!("CARGO_PKG_VERSION"))
                    .build(),
            );
            (provider, reader, meter)
        };
        let (instance_provider, instance_reader, instance_meter) = pipeline();
        let (provider, reader, meter) = pipeline();
        let slot = Arc::new(Mutex::new(Prepared::default()));
        register(&instance_meter, &slot, true);
        register(&meter, &slot, false);
        let hist = OTLP_METRICS
            .iter()
            .find(|m| m.kind == OtelKind::Histogram)
            .map_or("kube_prober.probe.duration", |m| m.name);
        let histogram = instance_meter
            .f64_histogram(hist)
            .with_description(names::PROBE_DURATION.help)
            .with_unit("s")
            .with_boundaries(PROBE_BUCKETS.to_vec())
            .build();
        Ok(OtlpSink {
            _providers: [instance_provider, provider],
            instance_reader,
            reader,
            slot,
            last_error,
            state: tokio::sync::Mutex::new(State {
                exporter,
                histogram,
                fed: HashMap::new(),
            }),
            settings,
        })
    }

    /// The settings in use.
    pub fn settings(&self) -> &OtlpSettings {
        &self.settings
    }

    /// Turns one snapshot into rows per [`OTLP_METRICS`] index and feeds the probe histogram
    /// (no I/O).
    fn prepare(&self, state: &mut State, snapshot: &Snapshot, scope: PushScope) -> Vec<Rows> {
        let mut c = Collector::new(scope);
        series::visit(
            snapshot,
            &mut super::select::Filter::new(&snapshot.selection, &mut c),
        );
        let age = SystemTime::now()
            .duration_since(snapshot.generated_at)
            .unwrap_or_default()
            .as_secs_f64();
        c.family(&names::SNAPSHOT_AGE, &[(vec![], age)]);
        c.derive();

        for (key, fed_now) in c.histograms {
            let attrs: Vec<KeyValue> = key
                .iter()
                .map(|(k, v)| KeyValue::new(*k, v.clone()))
                .collect();
            let prev = state.fed.get(&key);
            match replay(&PROBE_BUCKETS, prev, &fed_now) {
                Some(values) => {
                    for (v, n) in values {
                        for _ in 0..n {
                            state.histogram.record(v, &attrs);
                        }
                    }
                }
                None => tracing::debug!(
                    series = ?key,
                    "probe histogram went backwards; keeping the exported counts"
                ),
            }
            state.fed.insert(key, fed_now);
        }
        c.rows
    }

    /// Collects one pipeline with the callbacks reporting `rows` (per [`OTLP_METRICS`] index;
    /// the others report nothing, so the SDK forgets their series for this collect).
    fn collect(
        &self,
        reader: &SharedReader,
        rows: Vec<Rows>,
    ) -> std::result::Result<ResourceMetrics, PushError> {
        match self.slot.lock() {
            Ok(mut p) => p.rows = rows,
            Err(_) => {
                return Err(PushError {
                    reason: "error".into(),
                    message: "OTLP sink state lock poisoned".into(),
                    sent: PushReport::default(),
                });
            }
        }
        let mut rm = ResourceMetrics::default();
        let collected = reader.collect(&mut rm);
        if let Ok(mut p) = self.slot.lock() {
            p.rows = Vec::new();
        }
        collected.map_err(|e| PushError {
            reason: "collect".into(),
            message: format!("collecting metrics: {e}"),
            sent: PushReport::default(),
        })?;
        Ok(rm)
    }
}

/// Data points in one `ResourceMetrics`.
pub fn count_points(rm: &ResourceMetrics) -> u64 {
    fn n<T>(d: &MetricData<T>) -> usize {
        match d {
            MetricData::Gauge(g) => g.data_points().count(),
            MetricData::Sum(s) => s.data_points().count(),
            MetricData::Histogram(h) => h.data_points().count(),
            MetricData::ExponentialHistogram(h) => h.data_points().count(),
        }
    }
    rm.scope_metrics()
        .flat_map(|s| s.metrics())
        .map(|m| match m.data() {
            AggregatedMetrics::F64(d) => n(d),
            AggregatedMetrics::U64(d) => n(d),
            AggregatedMetrics::I64(d) => n(d),
        } as u64)
        .sum()
}

/// The low-cardinality reason for an exporter error message.
pub fn classify(message: &str) -> String {
    if let Some(rest) = message.split("gRPC code: ").nth(1) {
        let code: String = rest.chars().take_while(|c| c.is_alphanumeric()).collect();
        let lower = message.to_ascii_lowercase();
        // Certificate problems are configuration, not an outage: keep them apart.
        if lower.contains("invalid peer certificate") || lower.contains("received fatal alert") {
            return "tls".to_string();
        }
        return match code.as_str() {
            "Unavailable" => "unavailable",
            "DeadlineExceeded" => "timeout",
            "Cancelled" if lower.contains("timeout") || lower.contains("timed out") => "timeout",
            "Cancelled" => "cancelled",
            "Unauthenticated" => "unauthenticated",
            "PermissionDenied" => "permission_denied",
            "ResourceExhausted" => "resource_exhausted",
            "InvalidArgument" => "invalid_argument",
            "Unimplemented" => "unimplemented",
            "Internal" => "internal",
            // tonic reports failed TLS handshakes and broken connections this way.
            "Unknown" if lower.contains("transport error") => "transport",
            "Unknown" => "unknown",
            _ => "error",
        }
        .to_string();
    }
    if let Some(rest) = message.split("status code: ").nth(1) {
        let code: String = rest.chars().take_while(char::is_ascii_digit).collect();
        if let Ok(c) = code.parse::<u16>()
            && (100..600).contains(&c)
        {
            return format!("http_{c}");
        }
    }
    if message.contains("network error") {
        return "transport".to_string();
    }
    "error".to_string()
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
        let mut state = self.state.lock().await;
        let mut rows = self.prepare(&mut state, &snapshot, scope);
        // The instance-level rows (and the probe histogram): one request.
        let instance: Vec<Rows> = rows
            .iter_mut()
            .zip(OTLP_METRICS)
            .map(|(r, m)| {
                if is_instance_metric(m) {
                    std::mem::take(r)
                } else {
                    Vec::new()
                }
            })
            .collect();
        let max = self.settings.max_points_per_request.max(1);
        let mut sent = PushReport::default();
        self.send(&state, &self.instance_reader, instance, &mut sent)
            .await?;
        while let Some(batch) = next_batch(&mut rows, max) {
            self.send(&state, &self.reader, batch, &mut sent).await?;
        }
        Ok(sent)
    }
}

/// The next batch of at most `max` rows, taken off the end of `rows` (per [`OTLP_METRICS`]
/// index, in index order; one family may be spread over several batches). `None` when no
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
    /// Collects `reader` with the callbacks reporting `batch` and exports the result as one
    /// request (none when it has no points), adding to `sent`. A failed request ends the push:
    /// the error's `sent` counts it among the requests, and the points of the requests before
    /// it.
    async fn send(
        &self,
        state: &State,
        reader: &SharedReader,
        batch: Vec<Rows>,
        sent: &mut PushReport,
    ) -> std::result::Result<(), PushError> {
        let rm = self
            .collect(reader, batch)
            .map_err(|e| PushError { sent: *sent, ..e })?;
        let points = count_points(&rm);
        if points == 0 {
            return Ok(());
        }
        let (answered, result) = self.export(state, &rm).await;
        // Only requests the receiver answered count; a connect or transport failure, or no
        // answer in time, is not a request.
        if answered {
            sent.requests += 1;
        }
        match result {
            Ok(()) => {
                sent.points += points;
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

    /// Sends one `ResourceMetrics`: whether the receiver answered, and `Err((reason, message))`
    /// on failure.
    async fn export(
        &self,
        state: &State,
        rm: &ResourceMetrics,
    ) -> (bool, std::result::Result<(), (String, String)>) {
        let points = count_points(rm);
        let timeout = self.settings.timeout;
        if let Ok(mut last) = self.last_error.lock() {
            *last = None;
        }
        // A little over the exporter's own timeout, so its error (with details) wins.
        let limit = timeout + Duration::from_millis(500);
        match tokio::time::timeout(limit, state.exporter.export(rm)).await {
            Ok(Ok(())) => (true, Ok(())),
            Ok(Err(e)) => {
                let mut message = e.to_string();
                let mut reason = classify(&message);
                let transport = self.last_error.lock().ok().and_then(|mut l| l.take());
                let reached = transport.is_none();
                if let Some(t) = transport {
                    let lower = t.message.to_ascii_lowercase();
                    if !t.keep_reason {
                        reason = if t.timeout {
                            "timeout".to_string()
                        } else if lower.contains("certificate") || lower.contains("alert") {
                            "tls".to_string()
                        } else {
                            "transport".to_string()
                        };
                    }
                    message = format!("{message}: {}", t.message);
                }
                // Failures tonic makes up itself (TLS, broken connection, its own timeout)
                // never had an answer either.
                let answered =
                    reached && !matches!(reason.as_str(), "tls" | "transport" | "timeout");
                (
                    answered,
                    Err((
                        reason,
                        format!(
                            "OTLP export of {points} points to {} failed: {message}",
                            self.settings.endpoint
                        ),
                    )),
                )
            }
            Err(_) => (
                false,
                Err((
                    "timeout".into(),
                    format!(
                        "OTLP export to {} did not finish within {limit:?}",
                        self.settings.endpoint
                    ),
                )),
            ),
        }
    }
}

/// Values to record so that a histogram fed `prev` ends up at `now`: per bucket with new
/// observations, one value inside the bucket and how many times to record it, chosen so the
/// values add up to the sum's increase. `None` when a count went down (reset), or the
/// increase is implausibly large.
fn replay(bounds: &[f64], prev: Option<&Fed>, now: &Fed) -> Option<Vec<(f64, u64)>> {
    const MAX_RECORDS: u64 = 10_000_000;
    let zero = Fed {
        buckets: vec![0; bounds.len()],
        count: 0,
        sum: 0.0,
    };
    let prev = prev.unwrap_or(&zero);
    if now.buckets.len() != bounds.len() || prev.buckets.len() != bounds.len() {
        return None;
    }
    // Non-cumulative counts per bucket, +Inf last.
    let per_bucket = |f: &Fed| -> Option<Vec<u64>> {
        let mut out = Vec::with_capacity(bounds.len() + 1);
        let mut below = 0u64;
        for &c in &f.buckets {
            out.push(c.checked_sub(below)?);
            below = c;
        }
        out.push(f.count.checked_sub(below)?);
        Some(out)
    };
    let (p, n) = (per_bucket(prev)?, per_bucket(now)?);
    let deltas: Vec<u64> = n
        .iter()
        .zip(&p)
        .map(|(a, b)| a.checked_sub(*b))
        .collect::<Option<_>>()?;
    let total: u64 = deltas.iter().sum();
    if total == 0 {
        return Some(Vec::new());
    }
    if total > MAX_RECORDS {
        return None;
    }
    let dsum = now.sum - prev.sum;
    if !dsum.is_finite() {
        return None;
    }
    // Bucket i holds (lo, hi]; the first bucket starts at 0 (durations are not negative).
    let lo = |i: usize| if i == 0 { 0.0 } else { bounds[i - 1] };
    let lowest = |i: usize| {
        let l = lo(i);
        let width = bounds.get(i).map_or(l.max(1.0), |h| h - l);
        // Strictly above the lower bound, which belongs to the bucket below.
        if i == 0 { l } else { l + width * 1e-6 }
    };
    let mut min_total = 0.0;
    let mut max_total = 0.0;
    let mut inf = false;
    for (i, &d) in deltas.iter().enumerate() {
        if d == 0 {
            continue;
        }
        min_total += d as f64 * lowest(i);
        match bounds.get(i) {
            Some(h) => max_total += d as f64 * h,
            None => inf = true,
        }
    }
    let target = if inf {
        dsum.max(min_total)
    } else {
        dsum.clamp(min_total, max_total)
    };
    let mut out = Vec::new();
    if inf {
        // Finite buckets at their lowest value; the +Inf bucket takes the rest.
        let last = deltas.len() - 1;
        let mut finite = 0.0;
        for (i, &d) in deltas.iter().enumerate().take(last) {
            if d > 0 {
                out.push((lowest(i), d));
                finite += d as f64 * lowest(i);
            }
        }
        let d = deltas[last];
        let v = ((target - finite) / d as f64).max(lowest(last));
        out.push((v, d));
    } else {
        let span = max_total - min_total;
        let t = if span > 0.0 {
            ((target - min_total) / span).clamp(0.0, 1.0)
        } else {
            0.0
        };
        for (i, &d) in deltas.iter().enumerate() {
            if d > 0 {
                let (l, h) = (lowest(i), bounds[i]);
                out.push(((l + t * (h - l)).min(h), d));
            }
        }
    }
    Some(out)
}

/// Turns visitor rows into OTel rows per [`OTLP_METRICS`] index.
struct Collector {
    scope: PushScope,
    rows: Vec<Rows>,
    /// Latest utilization per node, for the derived semconv usage metrics (by family name).
    latest: HashMap<&'static str, HashMap<String, f64>>,
    capacity: HashMap<&'static str, HashMap<String, f64>>,
    histograms: Vec<(Vec<(&'static str, String)>, Fed)>,
}

fn attrs(labels: &Labels<'_>) -> Vec<KeyValue> {
    labels
        .iter()
        .map(|(k, v)| KeyValue::new(Key::from_static_str(attribute_key(k)), v.to_string()))
        .collect()
}

fn label<'a>(labels: &'a Labels<'_>, key: &str) -> Option<&'a str> {
    labels.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
}

impl Collector {
    fn new(scope: PushScope) -> Self {
        Collector {
            scope,
            rows: vec![Vec::new(); OTLP_METRICS.len()],
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
        for (i, m) in OTLP_METRICS.iter().enumerate() {
            let Derivation::LatestTimesCapacity { capacity } = m.derivation else {
                continue;
            };
            let (Some(latest), Some(cap)) =
                (self.latest.get(m.family), self.capacity.get(capacity))
            else {
                continue;
            };
            // Point order is the SDK's (hash order) anyway.
            let rows: Rows = latest
                .iter()
                .filter_map(|(node, u)| {
                    let c = cap.get(node)?;
                    Some((vec![KeyValue::new("k8s.node.name", node.clone())], u * c))
                })
                .collect();
            self.rows[i] = rows;
        }
    }
}

impl Visitor for Collector {
    fn family(&mut self, family: &Family, rows: &[(Labels<'_>, f64)]) {
        if !self.wanted(family) {
            return;
        }
        // Inputs of derived metrics.
        for m in OTLP_METRICS {
            if let Derivation::LatestTimesCapacity { capacity } = m.derivation {
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
        for (i, m) in OTLP_METRICS.iter().enumerate() {
            if m.family != family.name {
                continue;
            }
            match m.derivation {
                Derivation::Rows => {
                    self.rows[i] = rows.iter().map(|(l, v)| (attrs(l), *v)).collect();
                }
                Derivation::AllConditionStatuses => {
                    let mut out = Vec::with_capacity(rows.len() * 3);
                    for (labels, _) in rows {
                        let current = label(labels, "status")
                            .unwrap_or("unknown")
                            .to_ascii_lowercase();
                        let base: Vec<KeyValue> = labels
                            .iter()
                            .filter(|(k, _)| *k != "status")
                            .map(|(k, v)| {
                                let key = match *k {
                                    "condition" => "k8s.node.condition.type",
                                    k => attribute_key(k),
                                };
                                KeyValue::new(key, v.to_string())
                            })
                            .collect();
                        let mut statuses = vec!["true", "false", "unknown"];
                        if !statuses.contains(&current.as_str()) {
                            statuses.push(current.as_str());
                        }
                        for st in statuses {
                            let mut a = base.clone();
                            a.push(KeyValue::new("k8s.node.condition.status", st.to_string()));
                            out.push((a, if st == current { 1.0 } else { 0.0 }));
                        }
                    }
                    self.rows[i] = out;
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
            let key = labels
                .iter()
                .map(|(k, v)| (attribute_key(k), v.to_string()))
                .collect();
            self.histograms.push((
                key,
                Fed {
                    buckets: buckets.to_vec(),
                    count: *count,
                    sum: *sum,
                },
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replay_reproduces_buckets_count_and_sum() {
        let bounds = [0.1, 0.5, 1.0];
        let prev = Fed {
            buckets: vec![1, 2, 2],
            count: 3,
            sum: 2.05,
        };
        // +2 in (0.1,0.5], +1 in (1,inf), +1 in (0,0.1]
        let now = Fed {
            buckets: vec![2, 5, 5],
            count: 7,
            sum: 2.05 + 0.05 + 0.6 + 3.0 + 0.3,
        };
        let values = replay(&bounds, Some(&prev), &now).unwrap();
        let mut cum = [0u64; 4];
        let mut sum = 0.0;
        for (v, n) in &values {
            let b = bounds.iter().position(|b| v <= b).unwrap_or(3);
            cum[b] += n;
            sum += v * *n as f64;
        }
        assert_eq!(cum, [1, 2, 0, 1]);
        assert!((sum - (now.sum - prev.sum)).abs() < 1e-9, "{sum}");

        // All finite: interpolated inside the buckets.
        let now2 = Fed {
            buckets: vec![3, 8, 11],
            count: 11,
            sum: 2.05 + 0.02 + 0.2 + 0.3 + 0.7,
        };
        let prev2 = Fed {
            buckets: vec![2, 5, 7],
            count: 7,
            sum: 2.05,
        };
        let values = replay(&bounds, Some(&prev2), &now2).unwrap();
        let total: f64 = values.iter().map(|(v, n)| v * *n as f64).sum();
        assert!((total - 1.22).abs() < 1e-9, "{values:?}");
        for (v, _) in &values {
            assert!(*v > 0.0 && *v <= 1.0);
        }
        // Nothing new, and a reset.
        assert_eq!(replay(&bounds, Some(&now), &now), Some(vec![]));
        assert_eq!(replay(&bounds, Some(&now), &prev), None);
    }

    #[test]
    fn reasons_are_low_cardinality() {
        assert_eq!(
            classify("TonicMetricsClient export failed with gRPC code: Unavailable: x"),
            "unavailable"
        );
        assert_eq!(
            classify("export failed with gRPC code: Cancelled: Timeout expired"),
            "timeout"
        );
        assert_eq!(
            classify("gRPC code: ResourceExhausted"),
            "resource_exhausted"
        );
        assert_eq!(
            classify("HTTP export failed with status code: 503"),
            "http_503"
        );
        assert_eq!(classify("HTTP export failed: network error"), "transport");
        assert_eq!(
            classify("gRPC code: Unknown: transport error: connection error: received fatal alert"),
            "tls"
        );
        assert_eq!(
            classify("gRPC code: Unavailable: transport error: invalid peer certificate: x"),
            "tls"
        );
        assert_eq!(
            classify("gRPC code: Unknown: transport error: connection reset"),
            "transport"
        );
        assert_eq!(classify("something else"), "error");
    }
}
