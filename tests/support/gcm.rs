//! A Cloud Monitoring stand-in on 127.0.0.1: `google.monitoring.v3.MetricService` over real
//! gRPC (tonic's server, gcloud-sdk's prost messages), with Cloud Monitoring's rules for
//! `CreateTimeSeries`:
//! - at most 200 series per request, else INVALID_ARGUMENT and nothing is written;
//! - one point per series per request, newer than the series' newest and at least the
//!   sampling period after it, else INVALID_ARGUMENT "One or more points were written more
//!   frequently than the maximum sampling period configured for the metric";
//! - metric kind and value type fixed per metric type by its first write (the auto-created
//!   descriptor); known monitored resource types with all their labels; CUMULATIVE points
//!   with start_time < end_time; GAUGE points with no other start than their end;
//! - a request with invalid series writes its valid ones and fails with INVALID_ARGUMENT
//!   carrying a `CreateTimeSeriesSummary` in the status details, as Cloud Monitoring does.
//!
//! Also `ListMetricDescriptors` (filter `metric.type = starts_with("...")`, paging) and
//! `DeleteMetricDescriptor`. Faults: the next N calls answer a chosen code; every
//! `CreateTimeSeries` waits a given delay (a server slower than its client's deadline: a call
//! that waited writes nothing and answers DEADLINE_EXCEEDED, its client having given up). Every
//! call is recorded.
#![allow(dead_code)]

use std::collections::{BTreeMap, VecDeque};
use std::marker::PhantomData;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use gcloud_sdk::google::api::MetricDescriptor;
use gcloud_sdk::google::api::metric_descriptor::{MetricKind, ValueType};
use gcloud_sdk::google::monitoring::v3::create_time_series_summary;
use gcloud_sdk::google::monitoring::v3::{
    CreateTimeSeriesRequest, CreateTimeSeriesSummary, DeleteMetricDescriptorRequest,
    ListMetricDescriptorsRequest, ListMetricDescriptorsResponse, TimeSeries, typed_value,
};
use prost::Message;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::{Code, Status};

pub const SERVICE: &str = "google.monitoring.v3.MetricService";
pub const TOO_FREQUENT: &str = "One or more points were written more frequently than the maximum sampling period configured for the metric";

/// A prost codec (tonic-prost's `ProstCodec` is not a dependency of this crate).
pub struct PCodec<E, D>(PhantomData<fn() -> (E, D)>);

impl<E, D> Default for PCodec<E, D> {
    fn default() -> Self {
        PCodec(PhantomData)
    }
}

pub struct PEnc<E>(PhantomData<fn() -> E>);
pub struct PDec<D>(PhantomData<fn() -> D>);

impl<E: Message + Send + 'static, D: Message + Default + Send + 'static> Codec for PCodec<E, D> {
    type Encode = E;
    type Decode = D;
    type Encoder = PEnc<E>;
    type Decoder = PDec<D>;
    fn encoder(&mut self) -> PEnc<E> {
        PEnc(PhantomData)
    }
    fn decoder(&mut self) -> PDec<D> {
        PDec(PhantomData)
    }
}

impl<E: Message> Encoder for PEnc<E> {
    type Item = E;
    type Error = Status;
    fn encode(&mut self, item: E, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
        item.encode(buf)
            .map_err(|e| Status::internal(format!("encode: {e}")))
    }
}

impl<D: Message + Default> Decoder for PDec<D> {
    type Item = D;
    type Error = Status;
    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<D>, Status> {
        D::decode(buf)
            .map(Some)
            .map_err(|e| Status::invalid_argument(format!("decode: {e}")))
    }
}

/// One recorded call.
#[derive(Debug, Clone)]
pub struct Call {
    /// `CreateTimeSeries`, `ListMetricDescriptors`, `DeleteMetricDescriptor`.
    pub method: &'static str,
    /// Series in a `CreateTimeSeries` request.
    pub series: usize,
    /// Series written.
    pub written: usize,
    /// Size of the request message as protobuf (`encoded_len`, before gRPC framing).
    pub bytes: usize,
    pub code: Code,
    pub message: String,
    pub user_agent: Option<String>,
    pub authorization: bool,
}

/// One stored point.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredPoint {
    pub start: Option<SystemTime>,
    pub end: SystemTime,
    pub int64: Option<i64>,
    pub double: Option<f64>,
}

/// One stored series.
#[derive(Debug, Clone)]
pub struct StoredSeries {
    pub metric_type: String,
    pub metric_labels: BTreeMap<String, String>,
    pub resource_type: String,
    pub resource_labels: BTreeMap<String, String>,
    pub kind: MetricKind,
    pub value_type: ValueType,
    pub points: Vec<StoredPoint>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Descriptor {
    pub kind: MetricKind,
    pub value_type: ValueType,
}

pub struct Inner {
    pub min_period: Duration,
    /// Largest page `ListMetricDescriptors` returns, whatever the request asks.
    pub max_page: usize,
    pub descriptors: BTreeMap<String, Descriptor>,
    /// By series identity (type, labels, resource).
    pub series: BTreeMap<String, StoredSeries>,
    pub calls: Vec<Call>,
    /// Codes to answer the next calls with, one each.
    pub faults: VecDeque<Code>,
    /// `CreateTimeSeries` waits this long, then writes nothing (zero: no wait).
    pub delay: Duration,
}

pub struct GcmStandIn {
    pub url: String,
    pub inner: Arc<Mutex<Inner>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for GcmStandIn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl GcmStandIn {
    /// With Cloud Monitoring's sampling period of 10 s.
    pub async fn start() -> Self {
        Self::with_period(Duration::from_secs(10)).await
    }

    pub async fn with_period(min_period: Duration) -> Self {
        Self::with_period_on(([127, 0, 0, 1], 0).into(), min_period).await
    }

    /// Listening on `addr` (e.g. the port a sink already points at, to come up late).
    pub async fn with_period_on(addr: std::net::SocketAddr, min_period: Duration) -> Self {
        let inner = Arc::new(Mutex::new(Inner {
            min_period,
            max_page: 1000,
            descriptors: BTreeMap::new(),
            series: BTreeMap::new(),
            calls: Vec::new(),
            faults: VecDeque::new(),
            delay: Duration::ZERO,
        }));
        let incoming =
            tonic::transport::server::TcpIncoming::bind(addr).expect("bind the stand-in");
        let addr = incoming.local_addr().expect("local addr");
        let svc = Svc {
            inner: inner.clone(),
        };
        let task = tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(svc)
                .serve_with_incoming(incoming)
                .await;
        });
        GcmStandIn {
            url: format!("http://{addr}"),
            inner,
            task,
        }
    }

    pub fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The next `n` calls answer `code`.
    pub fn fail_next(&self, n: usize, code: Code) {
        let mut g = self.lock();
        g.faults.extend(std::iter::repeat_n(code, n));
    }

    pub fn calls(&self) -> Vec<Call> {
        self.lock().calls.clone()
    }

    /// `CreateTimeSeries` calls only.
    pub fn writes(&self) -> Vec<Call> {
        self.calls()
            .into_iter()
            .filter(|c| c.method == "CreateTimeSeries")
            .collect()
    }

    pub fn series(&self) -> Vec<StoredSeries> {
        self.lock().series.values().cloned().collect()
    }

    /// Series of one metric type.
    pub fn series_of(&self, metric_type: &str) -> Vec<StoredSeries> {
        self.series()
            .into_iter()
            .filter(|s| s.metric_type == metric_type)
            .collect()
    }

    /// Calls answered with anything but OK.
    pub fn errors(&self) -> Vec<Call> {
        self.calls()
            .into_iter()
            .filter(|c| c.code != Code::Ok)
            .collect()
    }

    pub fn add_descriptor(&self, metric_type: &str, kind: MetricKind, value_type: ValueType) {
        self.lock()
            .descriptors
            .insert(metric_type.to_string(), Descriptor { kind, value_type });
    }

    pub fn descriptor_types(&self) -> Vec<String> {
        self.lock().descriptors.keys().cloned().collect()
    }
}

fn to_time(t: &prost_types::Timestamp) -> Option<SystemTime> {
    if t.seconds < 0 || !(0..1_000_000_000).contains(&t.nanos) {
        return None;
    }
    Some(
        SystemTime::UNIX_EPOCH
            + Duration::from_secs(t.seconds as u64)
            + Duration::from_nanos(t.nanos as u64),
    )
}

fn required_resource_labels(resource_type: &str) -> Option<&'static [&'static str]> {
    Some(match resource_type {
        "global" => &["project_id"],
        "k8s_cluster" => &["project_id", "location", "cluster_name"],
        "k8s_node" => &["project_id", "location", "cluster_name", "node_name"],
        "k8s_pod" => &[
            "project_id",
            "location",
            "cluster_name",
            "namespace_name",
            "pod_name",
        ],
        "k8s_container" => &[
            "project_id",
            "location",
            "cluster_name",
            "namespace_name",
            "pod_name",
            "container_name",
        ],
        _ => return None,
    })
}

fn series_key(ts: &TimeSeries) -> String {
    let m = ts.metric.clone().unwrap_or_default();
    let r = ts.resource.clone().unwrap_or_default();
    let ml: BTreeMap<_, _> = m.labels.into_iter().collect();
    let rl: BTreeMap<_, _> = r.labels.into_iter().collect();
    format!("{}|{:?}|{}|{:?}", m.r#type, ml, r.r#type, rl)
}

/// The checks that need no stored state; `Err` is the per-series error message.
fn check_shape(ts: &TimeSeries, project: &str) -> Result<StoredPoint, String> {
    let m = ts.metric.as_ref().ok_or("metric is missing")?;
    if !(m.r#type.starts_with("workload.googleapis.com/")
        || m.r#type.starts_with("custom.googleapis.com/"))
    {
        return Err(format!("metric type {} is not user-defined", m.r#type));
    }
    if m.labels.len() > 30 {
        return Err("too many metric labels".into());
    }
    for (k, v) in &m.labels {
        let ok = !k.is_empty()
            && k.len() <= 100
            && k.chars().next().is_some_and(|c| c.is_ascii_lowercase())
            && k.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !ok || v.len() > 1024 {
            return Err(format!("invalid metric label {k}"));
        }
    }
    let r = ts.resource.as_ref().ok_or("resource is missing")?;
    let required = required_resource_labels(&r.r#type)
        .ok_or_else(|| format!("unrecognized resource type {}", r.r#type))?;
    for k in required {
        if r.labels.get(*k).is_none_or(|v| v.is_empty()) {
            return Err(format!("resource {} is missing label {k}", r.r#type));
        }
    }
    if let Some(extra) = r.labels.keys().find(|k| !required.contains(&k.as_str())) {
        return Err(format!("resource {} has no label {extra}", r.r#type));
    }
    if r.labels.get("project_id").map(String::as_str) != Some(project) {
        return Err("resource project_id differs from the request's project".into());
    }
    let kind = MetricKind::try_from(ts.metric_kind).map_err(|_| "bad metric kind")?;
    if !matches!(kind, MetricKind::Gauge | MetricKind::Cumulative) {
        return Err(format!("unsupported metric kind {kind:?}"));
    }
    let vt = ValueType::try_from(ts.value_type).map_err(|_| "bad value type")?;
    if ts.points.len() != 1 {
        return Err(if ts.points.is_empty() {
            "no point".into()
        } else {
            TOO_FREQUENT.into()
        });
    }
    let p = &ts.points[0];
    let iv = p.interval.as_ref().ok_or("point has no interval")?;
    let end = iv
        .end_time
        .as_ref()
        .and_then(to_time)
        .ok_or("point has no valid end_time")?;
    let start = iv.start_time.as_ref().and_then(to_time);
    let now = SystemTime::now();
    if end > now + Duration::from_secs(300) {
        return Err("point's end time is too far in the future".into());
    }
    if now.duration_since(end).unwrap_or_default() > Duration::from_secs(25 * 3600) {
        return Err("point's end time is older than 25 hours".into());
    }
    match kind {
        MetricKind::Gauge => {
            if start.is_some_and(|s| s != end) {
                return Err("GAUGE point's start time must equal its end time".into());
            }
        }
        _ => match start {
            Some(s) if s < end => {}
            _ => {
                return Err("CUMULATIVE point's start time must be before its end time".into());
            }
        },
    }
    let value = p.value.as_ref().and_then(|v| v.value.as_ref());
    let (int64, double) = match (vt, value) {
        (ValueType::Int64, Some(typed_value::Value::Int64Value(v))) => (Some(*v), None),
        (ValueType::Double, Some(typed_value::Value::DoubleValue(v))) => (None, Some(*v)),
        _ => return Err(format!("point value does not match value type {vt:?}")),
    };
    Ok(StoredPoint {
        start,
        end,
        int64,
        double,
    })
}

impl Inner {
    fn create(&mut self, req: CreateTimeSeriesRequest) -> Result<usize, Status> {
        let Some(project) = req.name.strip_prefix("projects/").filter(|p| !p.is_empty()) else {
            return Err(Status::invalid_argument(format!(
                "name must be projects/[PROJECT_ID]: {}",
                req.name
            )));
        };
        if req.time_series.len() > 200 {
            return Err(Status::invalid_argument(format!(
                "Field timeSeries had an invalid value: exceeded the limit of 200 TimeSeries per request ({})",
                req.time_series.len()
            )));
        }
        let total = req.time_series.len();
        let mut seen = std::collections::HashSet::new();
        let mut errors: BTreeMap<(i32, String), i32> = BTreeMap::new();
        let mut first: Option<(usize, String)> = None;
        let mut written = 0usize;
        for (i, ts) in req.time_series.iter().enumerate() {
            let key = series_key(ts);
            let res = check_shape(ts, project).and_then(|p| {
                if !seen.insert(key.clone()) {
                    return Err(TOO_FREQUENT.to_string());
                }
                let m = ts.metric.as_ref().map(|m| m.r#type.clone()).unwrap_or_default();
                let kind = MetricKind::try_from(ts.metric_kind).unwrap_or(MetricKind::Unspecified);
                let vt = ValueType::try_from(ts.value_type).unwrap_or(ValueType::Unspecified);
                if let Some(d) = self.descriptors.get(&m)
                    && (d.kind != kind || d.value_type != vt)
                {
                    return Err(format!(
                        "Value type for metric {m} must be {:?}/{:?}, but is {kind:?}/{vt:?}",
                        d.kind, d.value_type
                    ));
                }
                if let Some(s) = self.series.get(&key)
                    && let Some(last) = s.points.last()
                {
                    if p.end <= last.end
                        || p.end.duration_since(last.end).unwrap_or_default() < self.min_period
                    {
                        return Err(TOO_FREQUENT.to_string());
                    }
                    if kind == MetricKind::Cumulative
                        && p.start != last.start
                        && p.start.zip(Some(last.end)).is_some_and(|(s, e)| s < e)
                    {
                        return Err("Points must be written in order. One or more of the points specified had an older start time than the most recent point.".into());
                    }
                }
                Ok((m, kind, vt, p))
            });
            match res {
                Ok((m, kind, vt, p)) => {
                    self.descriptors.entry(m.clone()).or_insert(Descriptor {
                        kind,
                        value_type: vt,
                    });
                    let metric = ts.metric.clone().unwrap_or_default();
                    let resource = ts.resource.clone().unwrap_or_default();
                    self.series
                        .entry(key)
                        .or_insert_with(|| StoredSeries {
                            metric_type: m,
                            metric_labels: metric.labels.into_iter().collect(),
                            resource_type: resource.r#type,
                            resource_labels: resource.labels.into_iter().collect(),
                            kind,
                            value_type: vt,
                            points: Vec::new(),
                        })
                        .points
                        .push(p);
                    written += 1;
                }
                Err(msg) => {
                    *errors
                        .entry((Code::InvalidArgument as i32, msg.clone()))
                        .or_default() += 1;
                    first.get_or_insert((i, msg));
                }
            }
        }
        let Some((i, msg)) = first else {
            return Ok(written);
        };
        let summary = CreateTimeSeriesSummary {
            total_point_count: total as i32,
            success_point_count: written as i32,
            errors: errors
                .into_iter()
                .map(|((code, message), n)| create_time_series_summary::Error {
                    status: Some(gcloud_sdk::google::rpc::Status {
                        code,
                        message,
                        details: vec![],
                    }),
                    point_count: n,
                })
                .collect(),
        };
        let message =
            format!("One or more TimeSeries could not be written: {msg}: timeSeries[{i}]");
        let rpc = gcloud_sdk::google::rpc::Status {
            code: Code::InvalidArgument as i32,
            message: message.clone(),
            details: vec![prost_types::Any {
                type_url: "type.googleapis.com/google.monitoring.v3.CreateTimeSeriesSummary".into(),
                value: summary.encode_to_vec(),
            }],
        };
        Err(Status::with_details(
            Code::InvalidArgument,
            message,
            rpc.encode_to_vec().into(),
        ))
    }

    fn list(
        &mut self,
        req: ListMetricDescriptorsRequest,
    ) -> Result<ListMetricDescriptorsResponse, Status> {
        let Some(project) = req.name.strip_prefix("projects/").filter(|p| !p.is_empty()) else {
            return Err(Status::invalid_argument(
                "name must be projects/[PROJECT_ID]",
            ));
        };
        let filter = req.filter.trim();
        let prefix = if filter.is_empty() {
            String::new()
        } else {
            let inner = filter
                .strip_prefix("metric.type")
                .map(str::trim_start)
                .and_then(|s| s.strip_prefix('='))
                .map(str::trim_start)
                .and_then(|s| s.strip_prefix("starts_with(\""))
                .and_then(|s| s.strip_suffix("\")"))
                .ok_or_else(|| Status::invalid_argument(format!("unsupported filter: {filter}")))?;
            inner.to_string()
        };
        let start: usize = if req.page_token.is_empty() {
            0
        } else {
            req.page_token
                .parse()
                .map_err(|_| Status::invalid_argument("bad page token"))?
        };
        let page = match usize::try_from(req.page_size) {
            Ok(0) | Err(_) => 100,
            Ok(n) => n,
        }
        .min(self.max_page);
        let matching: Vec<_> = self
            .descriptors
            .iter()
            .filter(|(t, _)| t.starts_with(&prefix))
            .collect();
        let items: Vec<MetricDescriptor> = matching
            .iter()
            .skip(start)
            .take(page)
            .map(|(t, d)| MetricDescriptor {
                name: format!("projects/{project}/metricDescriptors/{t}"),
                r#type: (*t).clone(),
                metric_kind: d.kind as i32,
                value_type: d.value_type as i32,
                ..Default::default()
            })
            .collect();
        let next = start + items.len();
        Ok(ListMetricDescriptorsResponse {
            metric_descriptors: items,
            next_page_token: if next < matching.len() {
                next.to_string()
            } else {
                String::new()
            },
        })
    }

    fn delete(&mut self, req: DeleteMetricDescriptorRequest) -> Result<(), Status> {
        let t = req
            .name
            .strip_prefix("projects/")
            .and_then(|s| s.split_once("/metricDescriptors/"))
            .map(|(_, t)| t.to_string())
            .ok_or_else(|| Status::invalid_argument(format!("bad name {}", req.name)))?;
        if self.descriptors.remove(&t).is_none() {
            return Err(Status::not_found(format!(
                "Could not find descriptor for metric '{t}'"
            )));
        }
        self.series.retain(|_, s| s.metric_type != t);
        Ok(())
    }
}

struct Unary<F>(F);

impl<R, T, F> tonic::server::UnaryService<R> for Unary<F>
where
    F: FnMut(tonic::Request<R>) -> Result<tonic::Response<T>, Status>,
{
    type Response = T;
    type Future = std::future::Ready<Result<tonic::Response<T>, Status>>;
    fn call(&mut self, request: tonic::Request<R>) -> Self::Future {
        std::future::ready((self.0)(request))
    }
}

#[derive(Clone)]
struct Svc {
    inner: Arc<Mutex<Inner>>,
}

impl tonic::server::NamedService for Svc {
    const NAME: &'static str = SERVICE;
}

/// Runs `f` unless the call is `late` (answered after the delay: DEADLINE_EXCEEDED, nothing
/// written) or a fault is queued, and records the call.
fn handle<R: Message, T>(
    inner: &Arc<Mutex<Inner>>,
    late: bool,
    method: &'static str,
    req: tonic::Request<R>,
    series: impl Fn(&R) -> usize,
    f: impl FnOnce(&mut Inner, R) -> Result<(T, usize), Status>,
) -> Result<tonic::Response<T>, Status> {
    let user_agent = req
        .metadata()
        .get("user-agent")
        .and_then(|v| v.to_str().ok())
        .map(String::from);
    let authorization = req.metadata().get("authorization").is_some();
    let body = req.into_inner();
    let n = series(&body);
    let bytes = body.encoded_len();
    let mut g = inner.lock().unwrap_or_else(|e| e.into_inner());
    let result = if late {
        Err(Status::deadline_exceeded(
            "answered after the injected delay",
        ))
    } else {
        match g.faults.pop_front() {
            Some(code) => Err(Status::new(code, format!("injected {code:?}"))),
            None => f(&mut g, body),
        }
    };
    let (code, message, written) = match &result {
        Ok((_, w)) => (Code::Ok, String::new(), *w),
        Err(s) => (s.code(), s.message().to_string(), 0),
    };
    let written = if code == Code::InvalidArgument && method == "CreateTimeSeries" {
        // A partial failure still wrote the valid series.
        result
            .as_ref()
            .err()
            .and_then(|s| gcloud_sdk::google::rpc::Status::decode(s.details()).ok())
            .and_then(|r| r.details.first().cloned())
            .and_then(|a| CreateTimeSeriesSummary::decode(a.value.as_slice()).ok())
            .map_or(0, |s| s.success_point_count as usize)
    } else {
        written
    };
    g.calls.push(Call {
        method,
        series: n,
        written,
        bytes,
        code,
        message,
        user_agent,
        authorization,
    });
    result.map(|(t, _)| tonic::Response::new(t))
}

impl<B> tonic::codegen::Service<http::Request<B>> for Svc
where
    B: tonic::codegen::Body + Send + 'static,
    B::Error: Into<tonic::codegen::StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = tonic::codegen::BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let inner = self.inner.clone();
        let path = req.uri().path().to_string();
        Box::pin(async move {
            let resp = match path.rsplit('/').next().unwrap_or_default() {
                "CreateTimeSeries" => {
                    let delay = inner.lock().unwrap_or_else(|e| e.into_inner()).delay;
                    if !delay.is_zero() {
                        tokio::time::sleep(delay).await;
                    }
                    let mut grpc =
                        tonic::server::Grpc::new(PCodec::<(), CreateTimeSeriesRequest>::default());
                    let svc = Unary(move |r| {
                        handle(
                            &inner,
                            !delay.is_zero(),
                            "CreateTimeSeries",
                            r,
                            |b: &CreateTimeSeriesRequest| b.time_series.len(),
                            |g, b| g.create(b).map(|w| ((), w)),
                        )
                    });
                    grpc.unary(svc, req).await
                }
                "ListMetricDescriptors" => {
                    let mut grpc = tonic::server::Grpc::new(PCodec::<
                        ListMetricDescriptorsResponse,
                        ListMetricDescriptorsRequest,
                    >::default());
                    let svc = Unary(move |r| {
                        handle(
                            &inner,
                            false,
                            "ListMetricDescriptors",
                            r,
                            |_| 0,
                            |g, b| g.list(b).map(|r| (r, 0)),
                        )
                    });
                    grpc.unary(svc, req).await
                }
                "DeleteMetricDescriptor" => {
                    let mut grpc = tonic::server::Grpc::new(PCodec::<
                        (),
                        DeleteMetricDescriptorRequest,
                    >::default());
                    let svc = Unary(move |r| {
                        handle(
                            &inner,
                            false,
                            "DeleteMetricDescriptor",
                            r,
                            |_| 0,
                            |g, b| g.delete(b).map(|()| ((), 0)),
                        )
                    });
                    grpc.unary(svc, req).await
                }
                _ => Status::unimplemented(format!("{path} is not served by the stand-in"))
                    .into_http(),
            };
            Ok(resp)
        })
    }
}
