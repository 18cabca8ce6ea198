//! A stand-in OTLP metrics receiver on 127.0.0.1, built from opentelemetry-proto's types: a
//! tonic `MetricsService/Export` server and an HTTP/protobuf server (`POST /v1/metrics`, gzip
//! `Content-Encoding` understood). It keeps every accepted `ExportMetricsServiceRequest` with
//! its headers and sizes, and can fail the next N requests (gRPC UNAVAILABLE / HTTP 503, or
//! refuse them: gRPC INVALID_ARGUMENT / HTTP 400), answer late (a receiver slower than the
//! client's timeout), reject points of accepted requests (`partial_success`), and come up on
//! given ports (a receiver that was down).
//!
//! Used as `support::otlp` (the suites name it `otlp_support`).
#![allow(dead_code)]

use std::io::Read;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsPartialSuccess, ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use prost::Message;
use tonic::codec::CompressionEncoding;

/// One accepted request.
#[derive(Debug, Clone)]
pub struct Received {
    /// `grpc` or `http`.
    pub transport: &'static str,
    /// Request headers (gRPC metadata), names lower-case.
    pub headers: Vec<(String, String)>,
    pub request: ExportMetricsServiceRequest,
    /// Size of the protobuf message, uncompressed.
    pub proto_bytes: usize,
    /// Size of the HTTP body as it arrived (compressed when gzip); `None` for gRPC.
    pub wire_bytes: Option<usize>,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Default)]
struct State {
    received: Vec<Received>,
    attempts: usize,
    fail_next: usize,
    /// Requests to accept before `fail_next` applies.
    pass_first: usize,
    /// Headers of rejected requests too.
    rejected_headers: Vec<Vec<(String, String)>>,
    /// Bytes of `partial_success.error_message` in every successful answer (0: none).
    answer_padding: usize,
    /// How the `fail_next` requests fail.
    failure: Failure,
    /// Every request waits this long before it is handled; one that waited is answered but
    /// not kept (the client gave up on it).
    delay: Duration,
    /// Points each accepted request rejects in its `partial_success` (at most its own).
    reject: u64,
    /// Requests answered after `delay`.
    late: usize,
}

/// How the failed requests fail.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Failure {
    /// gRPC UNAVAILABLE, HTTP 503: worth retrying.
    #[default]
    Unavailable,
    /// gRPC INVALID_ARGUMENT, HTTP 400: refused for good.
    Refused,
}

/// Data points in a request.
pub fn points_of(req: &ExportMetricsServiceRequest) -> u64 {
    use opentelemetry_proto::tonic::metrics::v1::metric::Data;
    req.resource_metrics
        .iter()
        .flat_map(|r| &r.scope_metrics)
        .flat_map(|s| &s.metrics)
        .map(|m| match &m.data {
            Some(Data::Gauge(g)) => g.data_points.len(),
            Some(Data::Sum(x)) => x.data_points.len(),
            Some(Data::Histogram(h)) => h.data_points.len(),
            Some(Data::ExponentialHistogram(h)) => h.data_points.len(),
            Some(Data::Summary(x)) => x.data_points.len(),
            None => 0,
        })
        .sum::<usize>() as u64
}

/// Shared between both servers.
#[derive(Clone, Default)]
struct Shared(Arc<Mutex<State>>);

impl Shared {
    /// Counts an attempt; how it must fail, if it must.
    fn attempt(&self, headers: &[(String, String)]) -> Option<Failure> {
        let mut s = self.0.lock().unwrap();
        s.attempts += 1;
        if s.pass_first > 0 {
            s.pass_first -= 1;
            return None;
        }
        if s.fail_next > 0 {
            s.fail_next -= 1;
            s.rejected_headers.push(headers.to_vec());
            return Some(s.failure);
        }
        None
    }

    /// Waits the configured delay; true if it waited (the request is then counted as an
    /// attempt, answered, and not kept).
    async fn wait(&self) -> bool {
        let delay = {
            let mut s = self.0.lock().unwrap();
            if !s.delay.is_zero() {
                s.attempts += 1;
            }
            s.delay
        };
        if delay.is_zero() {
            return false;
        }
        tokio::time::sleep(delay).await;
        self.0.lock().unwrap().late += 1;
        true
    }

    fn store(&self, r: Received) {
        self.0.lock().unwrap().received.push(r);
    }

    /// The answer to an accepted request of `points`: padded when asked (see
    /// `answer_padding`), rejecting `reject` of its points when asked.
    fn answer(&self, points: u64) -> ExportMetricsServiceResponse {
        let (pad, reject) = {
            let s = self.0.lock().unwrap();
            (s.answer_padding, s.reject.min(points))
        };
        ExportMetricsServiceResponse {
            partial_success: (pad > 0 || reject > 0).then(|| ExportMetricsPartialSuccess {
                rejected_data_points: reject as i64,
                error_message: if reject > 0 && pad == 0 {
                    format!("{reject} points rejected")
                } else {
                    "x".repeat(pad)
                },
            }),
        }
    }
}

fn header_pairs(h: &HeaderMap) -> Vec<(String, String)> {
    h.iter()
        .map(|(k, v)| {
            (
                k.as_str().to_ascii_lowercase(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect()
}

struct Grpc(Shared);

#[tonic::async_trait]
impl MetricsService for Grpc {
    async fn export(
        &self,
        request: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        let headers = header_pairs(&request.metadata().clone().into_headers());
        if self.0.wait().await {
            return Ok(tonic::Response::new(ExportMetricsServiceResponse::default()));
        }
        match self.0.attempt(&headers) {
            Some(Failure::Unavailable) => {
                return Err(tonic::Status::unavailable("injected failure"));
            }
            Some(Failure::Refused) => {
                return Err(tonic::Status::invalid_argument("injected refusal"));
            }
            None => {}
        }
        let request = request.into_inner();
        let points = points_of(&request);
        self.0.store(Received {
            transport: "grpc",
            headers,
            proto_bytes: request.encoded_len(),
            wire_bytes: None,
            request,
        });
        Ok(tonic::Response::new(self.0.answer(points)))
    }
}

async fn http_export(
    axum::extract::State(shared): axum::extract::State<Shared>,
    headers: HeaderMap,
    body: Bytes,
) -> axum::response::Response {
    let pairs = header_pairs(&headers);
    if shared.wait().await {
        return StatusCode::OK.into_response();
    }
    match shared.attempt(&pairs) {
        Some(Failure::Unavailable) => {
            return (StatusCode::SERVICE_UNAVAILABLE, "injected failure").into_response();
        }
        Some(Failure::Refused) => {
            return (StatusCode::BAD_REQUEST, "injected refusal").into_response();
        }
        None => {}
    }
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if content_type != "application/x-protobuf" {
        return (
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "want application/x-protobuf",
        )
            .into_response();
    }
    let wire = body.len();
    let raw = match headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
    {
        None | Some("identity") => body.to_vec(),
        Some("gzip") => {
            let mut out = Vec::new();
            if flate2::read::GzDecoder::new(&body[..])
                .read_to_end(&mut out)
                .is_err()
            {
                return (StatusCode::BAD_REQUEST, "bad gzip").into_response();
            }
            out
        }
        Some(other) => {
            return (
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                format!("encoding {other}"),
            )
                .into_response();
        }
    };
    let request = match ExportMetricsServiceRequest::decode(&raw[..]) {
        Ok(r) => r,
        Err(e) => return (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
    };
    let points = points_of(&request);
    shared.store(Received {
        transport: "http",
        headers: pairs,
        proto_bytes: raw.len(),
        wire_bytes: Some(wire),
        request,
    });
    let resp = shared.answer(points);
    (
        [(header::CONTENT_TYPE, "application/x-protobuf")],
        resp.encode_to_vec(),
    )
        .into_response()
}

/// Server certificate, key and (for mutual TLS) the CA client certificates must chain to.
#[derive(Debug, Clone)]
pub struct ReceiverTls {
    pub cert_pem: String,
    pub key_pem: String,
    pub client_ca_pem: Option<String>,
}

impl ReceiverTls {
    fn tonic(&self) -> tonic::transport::ServerTlsConfig {
        let mut c = tonic::transport::ServerTlsConfig::new().identity(
            tonic::transport::Identity::from_pem(&self.cert_pem, &self.key_pem),
        );
        if let Some(ca) = &self.client_ca_pem {
            c = c.client_ca_root(tonic::transport::Certificate::from_pem(ca));
        }
        c
    }

    fn rustls(&self) -> Arc<tokio_rustls::rustls::ServerConfig> {
        use tokio_rustls::rustls;
        use tokio_rustls::rustls::pki_types::pem::PemObject;
        use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let certs: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(self.cert_pem.as_bytes())
                .collect::<Result<_, _>>()
                .unwrap();
        let key = PrivateKeyDer::from_pem_slice(self.key_pem.as_bytes()).unwrap();
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .unwrap();
        let builder = match &self.client_ca_pem {
            Some(ca) => {
                let mut roots = rustls::RootCertStore::empty();
                for c in CertificateDer::pem_slice_iter(ca.as_bytes()) {
                    roots.add(c.unwrap()).unwrap();
                }
                let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                    Arc::new(roots),
                    provider,
                )
                .build()
                .unwrap();
                builder.with_client_cert_verifier(verifier)
            }
            None => builder.with_no_client_auth(),
        };
        let mut config = builder.with_single_cert(certs, key).unwrap();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Arc::new(config)
    }
}

/// A TLS listener for axum: handshakes that fail are counted and skipped.
struct TlsListener {
    tcp: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    failed: Arc<Mutex<Vec<String>>>,
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Ok((tcp, addr)) = self.tcp.accept().await else {
                continue;
            };
            let handshake =
                tokio::time::timeout(Duration::from_secs(5), self.acceptor.accept(tcp)).await;
            match handshake {
                Ok(Ok(tls)) => return (tls, addr),
                Ok(Err(e)) => self.failed.lock().unwrap().push(e.to_string()),
                Err(_) => self.failed.lock().unwrap().push("handshake timeout".into()),
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.tcp.local_addr()
    }
}

/// Both servers, running until dropped.
pub struct OtlpReceiver {
    pub grpc_addr: SocketAddr,
    pub http_addr: SocketAddr,
    /// `https` when started with TLS.
    scheme: &'static str,
    shared: Shared,
    tls_failures: Arc<Mutex<Vec<String>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl OtlpReceiver {
    /// Starts the gRPC and HTTP servers on 127.0.0.1:0 (plain text).
    pub async fn start() -> Self {
        Self::start_with_tls(None).await
    }

    /// As [`start`], on the given addresses (a receiver coming up where a sink already
    /// points).
    pub async fn start_on(grpc: SocketAddr, http: SocketAddr) -> Self {
        Self::start_full(None, grpc, http).await
    }

    /// As [`start`], with TLS (and mutual TLS when a client CA is given) on both servers.
    pub async fn start_with_tls(tls: Option<ReceiverTls>) -> Self {
        let any: SocketAddr = ([127, 0, 0, 1], 0).into();
        Self::start_full(tls, any, any).await
    }

    async fn start_full(tls: Option<ReceiverTls>, grpc: SocketAddr, http: SocketAddr) -> Self {
        let shared = Shared::default();
        let grpc_listener = tokio::net::TcpListener::bind(grpc).await.unwrap();
        let grpc_addr = grpc_listener.local_addr().unwrap();
        let svc = MetricsServiceServer::new(Grpc(shared.clone()))
            .accept_compressed(CompressionEncoding::Gzip)
            .max_decoding_message_size(256 * 1024 * 1024);
        let mut builder = tonic::transport::Server::builder();
        if let Some(tls) = &tls {
            builder = builder.tls_config(tls.tonic()).unwrap();
        }
        let router = builder.add_service(svc);
        let grpc = tokio::spawn(async move {
            let incoming = tonic::transport::server::TcpIncoming::from(grpc_listener);
            let _ = router.serve_with_incoming(incoming).await;
        });

        let http_listener = tokio::net::TcpListener::bind(http).await.unwrap();
        let http_addr = http_listener.local_addr().unwrap();
        let app = axum::Router::new()
            .route("/v1/metrics", axum::routing::post(http_export))
            .layer(axum::extract::DefaultBodyLimit::max(256 * 1024 * 1024))
            .with_state(shared.clone());
        let tls_failures = Arc::new(Mutex::new(Vec::new()));
        let http = match &tls {
            None => tokio::spawn(async move {
                let _ = axum::serve(http_listener, app).await;
            }),
            Some(tls) => {
                let listener = TlsListener {
                    tcp: http_listener,
                    acceptor: tokio_rustls::TlsAcceptor::from(tls.rustls()),
                    failed: tls_failures.clone(),
                };
                tokio::spawn(async move {
                    let _ = axum::serve(listener, app).await;
                })
            }
        };
        OtlpReceiver {
            grpc_addr,
            http_addr,
            scheme: if tls.is_some() { "https" } else { "http" },
            shared,
            tls_failures,
            tasks: vec![grpc, http],
        }
    }

    /// `http(s)://127.0.0.1:<port>` of the gRPC server.
    pub fn grpc_endpoint(&self) -> String {
        format!("{}://{}", self.scheme, self.grpc_addr)
    }

    /// `http(s)://127.0.0.1:<port>/v1/metrics` of the HTTP server.
    pub fn http_endpoint(&self) -> String {
        format!("{}://{}/v1/metrics", self.scheme, self.http_addr)
    }

    /// TLS handshakes the HTTPS server refused, with rustls's reason.
    pub fn tls_failures(&self) -> Vec<String> {
        self.tls_failures.lock().unwrap().clone()
    }

    /// Every accepted request so far, oldest first.
    pub fn received(&self) -> Vec<Received> {
        self.shared.0.lock().unwrap().received.clone()
    }

    /// Requests that reached a server, failed ones included.
    pub fn attempts(&self) -> usize {
        self.shared.0.lock().unwrap().attempts
    }

    /// Headers of the requests that were failed on purpose.
    pub fn rejected_headers(&self) -> Vec<Vec<(String, String)>> {
        self.shared.0.lock().unwrap().rejected_headers.clone()
    }

    /// Fails the next `n` requests: gRPC UNAVAILABLE, HTTP 503.
    pub fn fail_next(&self, n: usize) {
        self.fail_after(0, n);
    }

    /// Fails the next `n` requests as `failure` says.
    pub fn fail_next_with(&self, n: usize, failure: Failure) {
        self.shared.0.lock().unwrap().failure = failure;
        self.fail_after(0, n);
    }

    /// Every request from now on waits `delay` before it is handled (zero: none); one that
    /// waited is answered with an empty success and not kept, its client having given up.
    pub fn delay_answers(&self, delay: Duration) {
        self.shared.0.lock().unwrap().delay = delay;
    }

    /// Requests answered after a delay.
    pub fn late(&self) -> usize {
        self.shared.0.lock().unwrap().late
    }

    /// Every accepted request rejects `points` of its points (at most its own) in its
    /// `partial_success` (0: none).
    pub fn reject_points(&self, points: u64) {
        self.shared.0.lock().unwrap().reject = points;
    }

    /// Accepts the next `pass` requests, then fails `n`.
    pub fn fail_after(&self, pass: usize, n: usize) {
        let mut s = self.shared.0.lock().unwrap();
        s.pass_first = pass;
        s.fail_next = n;
    }

    /// Pads every successful answer (both servers) with a `partial_success` message of
    /// `bytes` bytes (0: plain answers again).
    pub fn pad_answers(&self, bytes: usize) {
        self.shared.0.lock().unwrap().answer_padding = bytes;
    }

    pub fn clear(&self) {
        self.shared.0.lock().unwrap().received.clear();
    }

    /// Waits until `n` requests were accepted, at most `timeout`.
    pub async fn wait_for(&self, n: usize, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if self.received().len() >= n {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.received().len() >= n
    }
}
