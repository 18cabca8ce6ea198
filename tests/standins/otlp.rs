//! The OTLP output against the stand-in receiver, over gRPC and HTTP/protobuf: names, units,
//! attributes, values, kinds, start times, resource, headers (explicit over environment),
//! gzip, vanished series, more than 2,000 series of one family, the instance-only scope,
//! failures, mutual TLS with a CA file and a client certificate, config errors, and the
//! docs/metrics.md table.

use support::otlp as otlp_support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use kube_prober::hub::{Provider, Store};
use kube_prober::model::{
    Addon, ClusterInfo, ClusterState, ContainerRestarts, Controller, NodeCapacity, NodeFacts,
    Placement, PodRestarts, ProbeOutcome, Resource, Snapshot, UsageSample,
};
use kube_prober::outputs::families;
use kube_prober::outputs::otlp::{
    OTLP_METRICS, OTLP_METRICS_LEGACY, OtlpBounds, OtlpOptions, OtlpResource, OtlpSink,
};
use kube_prober::outputs::{PushReport, PushScope, Sink};
use kube_prober::shared::error::Error;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyV;
use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use opentelemetry_proto::tonic::metrics::v1::number_data_point::Value as NumV;
use opentelemetry_proto::tonic::metrics::v1::{AggregationTemporality, Metric};
use otlp_support::{OtlpReceiver, Received};

const GRPC: &str = "grpc";
const HTTP: &str = "http/protobuf";
const WAIT: Duration = Duration::from_secs(10);

fn node_facts(name: &str, ready: &str) -> NodeFacts {
    NodeFacts {
        name: name.into(),
        placement: Placement {
            pool: "pool-1".into(),
            zone: "us-central1-a".into(),
        },
        conditions: vec![
            ("Ready".into(), ready.into()),
            ("MemoryPressure".into(), "False".into()),
        ],
        ready: ready == "True",
        schedulable: true,
        done_warming: true,
        created: None,
        capacity: Some(NodeCapacity {
            cpu_cores: 4.0,
            memory_bytes: 16e9,
        }),
        allocatable: Some(NodeCapacity {
            cpu_cores: 3.5,
            memory_bytes: 14e9,
        }),
    }
}

/// A store with `nodes` (usage, capacity, conditions), one restarting addon container on the
/// first node, and two probe runs (3 ms and 30 ms).
fn store_with(nodes: &[String]) -> Store {
    let store = Store::new();
    store.cluster().record_cluster_info(ClusterInfo {
        cluster_name: "prod".into(),
        role: "cluster".into(),
        project: "my-proj".into(),
        location: "us-central1".into(),
    });
    let addon = Addon {
        name: "kube-dns".into(),
        version: "1.2".into(),
        controller: Controller::Deployment,
    };
    let mut state = ClusterState {
        nodes: std::sync::Arc::new(nodes.iter().map(|n| node_facts(n, "True")).collect()),
        ..Default::default()
    };
    if let Some(first) = nodes.first() {
        state.restarts.push(Arc::new(PodRestarts {
            namespace: "kube-system".into(),
            pod: "kube-dns-abc".into(),
            node: Some(first.as_str().into()),
            addon: Some(addon),
            containers: vec![ContainerRestarts {
                name: "dns".into(),
                restarts: 3,
                last_reason: Some("OOMKilled".into()),
                last_exit_code: Some(137),
            }],
        }));
    }
    store.cluster().record_cluster_state(state);
    let now = SystemTime::now();
    for n in nodes {
        store.node().record_node_usage(
            "metrics_server",
            UsageSample {
                node: n.clone(),
                at: now,
                values: vec![(Resource::Cpu, 0.5), (Resource::Memory, 0.25)],
            },
        );
        store.node().record_node_capacity(
            n,
            NodeCapacity {
                cpu_cores: 4.0,
                memory_bytes: 16e9,
            },
        );
    }
    for ms in [3, 30] {
        store.probe().record_probe_outcome(ProbeOutcome {
            probe: "dns".into(),
            target: "kubernetes.default".into(),
            at: now,
            duration: Duration::from_millis(ms),
            failure: None,
        });
    }
    store
}

fn names_of(nodes: &[&str]) -> Vec<String> {
    nodes.iter().map(|s| s.to_string()).collect()
}

fn resource() -> OtlpResource {
    OtlpResource {
        cluster_name: "prod".into(),
        role: "cluster".into(),
        node_name: None,
        project: "my-proj".into(),
        location: "us-central1-a".into(),
        instance_id: "pod-uid-1".into(),
        host_id: String::new(),
    }
}

fn config(protocol: &str, rx: &OtlpReceiver) -> OtlpOptions {
    OtlpOptions {
        otlp_protocol: Some(protocol.into()),
        otlp_endpoint: Some(if protocol == GRPC {
            rx.grpc_endpoint()
        } else {
            rx.http_endpoint()
        }),
        ..Default::default()
    }
}

/// A request timeout of 5 s and the default answer cap.
const BOUNDS: OtlpBounds = OtlpBounds {
    timeout: Some(Duration::from_secs(5)),
    max_response_bytes: None,
};

/// Builds the sink without reading the process environment for our own settings.
fn sink(opts: &OtlpOptions) -> OtlpSink {
    sink_with(opts, BOUNDS)
}

/// [`sink`] with other bounds.
fn sink_with(opts: &OtlpOptions, bounds: OtlpBounds) -> OtlpSink {
    let config = opts
        .clone()
        .resolve_with(bounds, &|_| None)
        .expect("valid config");
    OtlpSink::new(config, &resource()).expect("sink")
}

fn all_metrics(req: &ExportMetricsServiceRequest) -> Vec<&Metric> {
    req.resource_metrics
        .iter()
        .flat_map(|r| &r.scope_metrics)
        .flat_map(|s| &s.metrics)
        .collect()
}

/// The requests of one push as one request: every request's metrics are added to the first
/// request's resource and scope; a metric split over several requests gets its points joined.
fn merged(reqs: &[ExportMetricsServiceRequest]) -> ExportMetricsServiceRequest {
    let mut out = reqs[0].clone();
    for r in &reqs[1..] {
        for m in all_metrics(r) {
            let into = &mut out.resource_metrics[0].scope_metrics[0].metrics;
            match into.iter_mut().find(|x| x.name == m.name) {
                Some(x) => match (&mut x.data, &m.data) {
                    (Some(Data::Gauge(a)), Some(Data::Gauge(b))) => {
                        a.data_points.extend(b.data_points.iter().cloned())
                    }
                    (Some(Data::Sum(a)), Some(Data::Sum(b))) => {
                        a.data_points.extend(b.data_points.iter().cloned())
                    }
                    (Some(Data::Histogram(a)), Some(Data::Histogram(b))) => {
                        a.data_points.extend(b.data_points.iter().cloned())
                    }
                    other => panic!("{}: kinds differ between requests: {other:?}", m.name),
                },
                None => into.push(m.clone()),
            }
        }
    }
    out
}

/// Points in one request.
fn point_count(req: &ExportMetricsServiceRequest) -> usize {
    all_metrics(req)
        .iter()
        .map(|m| match &m.data {
            Some(Data::Gauge(g)) => g.data_points.len(),
            Some(Data::Sum(s)) => s.data_points.len(),
            Some(Data::Histogram(h)) => h.data_points.len(),
            _ => 0,
        })
        .sum()
}

/// Pushes and returns the push's requests merged (the receiver must have received nothing
/// else since `rx.clear()` or its start), with the report.
async fn push_merged(
    rx: &OtlpReceiver,
    s: &OtlpSink,
    snap: impl Into<Arc<Snapshot>>,
    scope: PushScope,
) -> (ExportMetricsServiceRequest, PushReport) {
    let before = rx.received().len();
    let report = s.push(snap.into(), scope).await.expect("push");
    let n = report.requests as usize;
    assert!(rx.wait_for(before + n, WAIT).await);
    let got = rx.received();
    assert_eq!(
        got.len(),
        before + n,
        "requests counted = requests received"
    );
    let reqs: Vec<_> = got[before..].iter().map(|r| r.request.clone()).collect();
    let total: usize = reqs.iter().map(point_count).sum();
    assert_eq!(report.points, total as u64, "points counted = points sent");
    (merged(&reqs), report)
}

fn metric<'a>(req: &'a ExportMetricsServiceRequest, name: &str) -> Option<&'a Metric> {
    all_metrics(req).into_iter().find(|m| m.name == name)
}

fn attr_map(attrs: &[KeyValue]) -> BTreeMap<String, String> {
    attrs
        .iter()
        .map(|kv| {
            let v = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(AnyV::StringValue(s)) => s.clone(),
                Some(other) => format!("{other:?}"),
                None => String::new(),
            };
            (kv.key.clone(), v)
        })
        .collect()
}

/// (attributes, value, start, time) of every number point of a gauge or sum.
fn points(m: &Metric) -> Vec<(BTreeMap<String, String>, f64, u64, u64)> {
    let dps = match &m.data {
        Some(Data::Gauge(g)) => &g.data_points,
        Some(Data::Sum(s)) => &s.data_points,
        other => panic!("{}: not a number metric: {other:?}", m.name),
    };
    dps.iter()
        .map(|p| {
            let v = match p.value {
                Some(NumV::AsDouble(d)) => d,
                Some(NumV::AsInt(i)) => i as f64,
                None => f64::NAN,
            };
            (
                attr_map(&p.attributes),
                v,
                p.start_time_unix_nano,
                p.time_unix_nano,
            )
        })
        .collect()
}

fn kv(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn value_of(m: &Metric, want: &[(&str, &str)]) -> Option<f64> {
    let want = kv(want);
    points(m)
        .into_iter()
        .find(|(a, ..)| want.iter().all(|(k, v)| a.get(k) == Some(v)))
        .map(|(_, v, ..)| v)
}

/// "gauge", "counter" (monotonic cumulative sum), "updowncounter" or "histogram".
fn kind_of(m: &Metric) -> &'static str {
    match &m.data {
        Some(Data::Gauge(_)) => "gauge",
        Some(Data::Sum(s)) => {
            assert_eq!(
                s.aggregation_temporality,
                AggregationTemporality::Cumulative as i32,
                "{}",
                m.name
            );
            if s.is_monotonic {
                "counter"
            } else {
                "updowncounter"
            }
        }
        Some(Data::Histogram(h)) => {
            assert_eq!(
                h.aggregation_temporality,
                AggregationTemporality::Cumulative as i32
            );
            "histogram"
        }
        _ => "other",
    }
}

async fn one_push(protocol: &str) -> (OtlpReceiver, ExportMetricsServiceRequest) {
    let rx = OtlpReceiver::start().await;
    let s = sink(&config(protocol, &rx));
    let snap = store_with(&names_of(&["n1", "n2"])).snapshot(SystemTime::now());
    let (req, report) = push_merged(&rx, &s, snap, PushScope::All).await;
    // The instance's own series and the histogram, then the cluster-level ones.
    assert_eq!(report.requests, 2);
    (rx, req)
}

async fn check_content(protocol: &str) {
    let (rx, req) = one_push(protocol).await;
    assert_eq!(
        rx.received()[0].transport,
        if protocol == GRPC { "grpc" } else { "http" }
    );

    // Resource.
    let res = attr_map(
        &req.resource_metrics[0]
            .resource
            .as_ref()
            .unwrap()
            .attributes,
    );
    assert_eq!(res["service.name"], "kube-prober");
    assert_eq!(res["service.version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(res["service.instance.id"], "pod-uid-1");
    assert_eq!(res["k8s.cluster.name"], "prod");
    assert_eq!(res["cloud.provider"], "gcp");
    assert_eq!(res["cloud.platform"], "gcp_kubernetes_engine");
    assert_eq!(res["cloud.account.id"], "my-proj");
    assert_eq!(res["cloud.availability_zone"], "us-central1-a");
    assert!(!res.contains_key("k8s.node.name"), "cluster role: no node");
    let scope = req.resource_metrics[0].scope_metrics[0]
        .scope
        .as_ref()
        .unwrap();
    assert_eq!(scope.name, "kube-prober");

    // Every metric sent is in the table, with its unit and kind.
    for m in all_metrics(&req) {
        let row = OTLP_METRICS
            .iter()
            .find(|r| r.name == m.name)
            .unwrap_or_else(|| panic!("{} is not in OTLP_METRICS", m.name));
        assert_eq!(m.unit, row.unit, "{}", m.name);
        assert_eq!(kind_of(m), row.kind.as_str(), "{}", m.name);
        assert!(!m.description.is_empty(), "{}", m.name);
    }
    let sent: BTreeSet<&str> = all_metrics(&req).iter().map(|m| m.name.as_str()).collect();
    for want in [
        "kube_prober.build.info",
        "kube_prober.cluster.info",
        "kube_prober.node.cpu.utilization",
        "k8s.node.cpu.usage",
        "k8s.node.memory.working_set",
        "k8s.node.cpu.allocatable",
        "k8s.node.memory.allocatable",
        "k8s.node.condition.status",
        "k8s.container.restart.count",
        "kube_prober.probe.duration",
        "kube_prober.probe.runs",
        "kube_prober.snapshot.age",
        "kube_prober.ticks",
    ] {
        assert!(sent.contains(want), "{want} missing from {sent:?}");
    }

    // Values and attributes.
    let util = metric(&req, "kube_prober.node.cpu.utilization").unwrap();
    assert_eq!(
        value_of(
            util,
            &[
                ("k8s.node.name", "n1"),
                ("window", "instant"),
                ("operator", "latest")
            ]
        ),
        Some(0.5)
    );
    let usage = metric(&req, "k8s.node.cpu.usage").unwrap();
    assert_eq!(points(usage).len(), 2);
    assert_eq!(value_of(usage, &[("k8s.node.name", "n2")]), Some(2.0));
    let ws = metric(&req, "k8s.node.memory.working_set").unwrap();
    assert_eq!(value_of(ws, &[("k8s.node.name", "n1")]), Some(4e9));
    let alloc = metric(&req, "k8s.node.cpu.allocatable").unwrap();
    // Point order is not defined (hash order).
    let mut got: Vec<_> = points(alloc).into_iter().map(|(a, v, ..)| (a, v)).collect();
    got.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        got,
        vec![
            (kv(&[("k8s.node.name", "n1")]), 3.5),
            (kv(&[("k8s.node.name", "n2")]), 3.5)
        ]
    );
    assert_eq!(value_of(alloc, &[("k8s.node.name", "n1")]), Some(3.5));

    // Conditions: all three statuses per node and type, lower case, 1 for the current one.
    let cond = metric(&req, "k8s.node.condition.status").unwrap();
    assert_eq!(points(cond).len(), 2 * 2 * 3);
    let c = |t: &str, st: &str| {
        value_of(
            cond,
            &[
                ("k8s.node.name", "n1"),
                ("k8s.node.condition.type", t),
                ("k8s.node.condition.status", st),
                ("pool", "pool-1"),
                ("zone", "us-central1-a"),
            ],
        )
    };
    assert_eq!(c("Ready", "true"), Some(1.0));
    assert_eq!(c("Ready", "false"), Some(0.0));
    assert_eq!(c("Ready", "unknown"), Some(0.0));
    assert_eq!(c("MemoryPressure", "false"), Some(1.0));

    let restarts = metric(&req, "k8s.container.restart.count").unwrap();
    assert_eq!(
        points(restarts)[0].0,
        kv(&[
            ("k8s.namespace.name", "kube-system"),
            ("k8s.pod.name", "kube-dns-abc"),
            ("k8s.container.name", "dns"),
            ("k8s.node.name", "n1"),
            ("addon", "kube-dns"),
        ])
    );
    assert_eq!(points(restarts)[0].1, 3.0);

    let runs = metric(&req, "kube_prober.probe.runs").unwrap();
    assert_eq!(
        value_of(runs, &[("probe", "dns"), ("target", "kubernetes.default")]),
        Some(2.0)
    );

    // The histogram: exact bucket counts, count and sum; no made-up min/max.
    let Some(Data::Histogram(h)) = &metric(&req, "kube_prober.probe.duration").unwrap().data else {
        panic!("not a histogram")
    };
    let p = &h.data_points[0];
    assert_eq!(
        attr_map(&p.attributes),
        kv(&[("probe", "dns"), ("target", "kubernetes.default")])
    );
    assert_eq!(
        p.explicit_bounds,
        kube_prober::model::PROBE_BUCKETS.to_vec()
    );
    assert_eq!(p.count, 2);
    // 3 ms in (2.5ms, 5ms], 30 ms in (25ms, 50ms].
    let mut want = vec![0u64; 13];
    want[2] = 1;
    want[5] = 1;
    assert_eq!(p.bucket_counts, want);
    assert!((p.sum.unwrap() - 0.033).abs() < 1e-9, "{:?}", p.sum);
    assert_eq!((p.min, p.max), (None, None));
}

#[tokio::test]
async fn grpc_sends_names_units_kinds_attributes_values_and_resource() {
    check_content(GRPC).await;
}

#[tokio::test]
async fn http_sends_names_units_kinds_attributes_values_and_resource() {
    check_content(HTTP).await;
}

async fn check_two_pushes(protocol: &str) {
    let rx = OtlpReceiver::start().await;
    let s = sink(&config(protocol, &rx));
    let store = store_with(&names_of(&["n1", "n2"]));
    let (a, _) = push_merged(&rx, &s, store.snapshot(SystemTime::now()), PushScope::All).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    // n2 leaves the cluster and its usage ages out: a new store without it, plus a third run.
    let store2 = store_with(&names_of(&["n1"]));
    store2.probe().record_probe_outcome(ProbeOutcome {
        probe: "dns".into(),
        target: "kubernetes.default".into(),
        at: SystemTime::now(),
        duration: Duration::from_secs(7),
        failure: None,
    });
    let (b, _) = push_merged(&rx, &s, store2.snapshot(SystemTime::now()), PushScope::All).await;
    let (a, b) = (&a, &b);

    for name in [
        "kube_prober.node.cpu.utilization",
        "k8s.node.cpu.usage",
        "k8s.node.condition.status",
        "k8s.node.cpu.allocatable",
    ] {
        let nodes = |r: &ExportMetricsServiceRequest| -> BTreeSet<String> {
            points(metric(r, name).unwrap())
                .into_iter()
                .filter_map(|(a, ..)| a.get("k8s.node.name").cloned())
                .collect()
        };
        assert_eq!(
            nodes(a),
            kv(&[("n1", ""), ("n2", "")]).into_keys().collect()
        );
        assert_eq!(
            nodes(b),
            BTreeSet::from(["n1".to_string()]),
            "{name}: the vanished node must not be sent again"
        );
    }

    // Cumulative sums keep their start time; the point time moves on.
    for name in ["kube_prober.probe.runs", "k8s.container.restart.count"] {
        let (pa, pb) = (
            points(metric(a, name).unwrap()),
            points(metric(b, name).unwrap()),
        );
        assert!(pa[0].2 > 0, "{name} has a start time");
        assert_eq!(pa[0].2, pb[0].2, "{name}: start time is stable");
        assert!(pb[0].3 > pa[0].3, "{name}: time moves on");
    }
    let runs = metric(b, "kube_prober.probe.runs").unwrap();
    assert_eq!(points(runs)[0].1, 3.0);
    let hist = |r: &ExportMetricsServiceRequest| match &metric(r, "kube_prober.probe.duration")
        .unwrap()
        .data
    {
        Some(Data::Histogram(h)) => h.data_points[0].clone(),
        _ => panic!(),
    };
    let (ha, hb) = (hist(a), hist(b));
    assert_eq!(ha.start_time_unix_nano, hb.start_time_unix_nano);
    assert_eq!(hb.count, 3);
    assert_eq!(hb.bucket_counts[12], 1, "7 s lands in +Inf");
    assert!((hb.sum.unwrap() - 7.033).abs() < 1e-9, "{:?}", hb.sum);
}

#[tokio::test]
async fn grpc_vanished_series_are_not_resent_and_start_times_are_stable() {
    check_two_pushes(GRPC).await;
}

#[tokio::test]
async fn http_vanished_series_are_not_resent_and_start_times_are_stable() {
    check_two_pushes(HTTP).await;
}

async fn check_headers_and_gzip(protocol: &str) {
    let rx = OtlpReceiver::start().await;
    let cfg = OtlpOptions {
        otlp_headers: Some("x-tenant=team-a,authorization=Bearer%20abc".into()),
        otlp_compression: Some("gzip".into()),
        ..config(protocol, &rx)
    };
    let s = sink(&cfg);
    let snap = Arc::new(store_with(&names_of(&["n1"])).snapshot(SystemTime::now()));
    let report = s.push(snap, PushScope::All).await.unwrap();
    let n = report.requests as usize;
    assert!(rx.wait_for(n, WAIT).await);
    for r in &rx.received() {
        assert_eq!(r.header("x-tenant"), Some("team-a"));
        assert_eq!(r.header("authorization"), Some("Bearer abc"));
    }
    let r = &rx.received()[0];
    assert_eq!(r.header("x-tenant"), Some("team-a"));
    assert_eq!(r.header("authorization"), Some("Bearer abc"));
    if protocol == GRPC {
        assert_eq!(r.header("grpc-encoding"), Some("gzip"));
    } else {
        assert_eq!(r.header("content-encoding"), Some("gzip"));
        assert_eq!(r.header("content-type"), Some("application/x-protobuf"));
        let wire = r.wire_bytes.unwrap();
        assert!(
            wire < r.proto_bytes,
            "gzip shrank {} to {wire}",
            r.proto_bytes
        );
    }
    assert!(metric(&r.request, "kube_prober.build.info").is_some());
}

#[tokio::test]
async fn grpc_headers_arrive_and_gzip_works() {
    check_headers_and_gzip(GRPC).await;
}

#[tokio::test]
async fn http_headers_arrive_and_gzip_works() {
    check_headers_and_gzip(HTTP).await;
}

async fn check_many_series(protocol: &str) {
    let rx = OtlpReceiver::start().await;
    let s = sink(&config(protocol, &rx));
    let nodes: Vec<String> = (0..2500).map(|i| format!("node-{i:04}")).collect();
    let snap = store_with(&nodes).snapshot(SystemTime::now());
    let (req, report) = push_merged(&rx, &s, snap, PushScope::All).await;
    // More than the default 10,000 points per request: split.
    assert!(report.points > 10_000, "{report:?}");
    assert!(report.requests >= 3, "{report:?}");
    for r in &rx.received() {
        assert!(
            point_count(&r.request) <= 10_000,
            "{}",
            point_count(&r.request)
        );
    }
    let req = &req;
    for name in ["k8s.node.cpu.allocatable", "k8s.node.cpu.usage"] {
        let pts = points(metric(req, name).unwrap());
        assert_eq!(pts.len(), 2500, "{name}");
        assert!(
            pts.iter()
                .all(|(a, ..)| !a.contains_key("otel.metric.overflow")),
            "{name} overflowed"
        );
    }
    // 2,500 nodes x 2 condition types x 3 statuses.
    assert_eq!(
        points(metric(req, "k8s.node.condition.status").unwrap()).len(),
        15_000
    );
}

#[tokio::test]
async fn grpc_more_than_2000_series_of_one_family_all_arrive() {
    check_many_series(GRPC).await;
}

#[tokio::test]
async fn http_more_than_2000_series_of_one_family_all_arrive() {
    check_many_series(HTTP).await;
}

/// Every point of a request as (metric, kind, unit, attributes, value(s)), sorted; the
/// snapshot age's value (time-dependent) as 0.
fn canonical(req: &ExportMetricsServiceRequest) -> Vec<String> {
    let mut out = Vec::new();
    for m in all_metrics(req) {
        let head = format!("{} {} {}", m.name, kind_of(m), m.unit);
        match &m.data {
            Some(Data::Histogram(h)) => {
                for p in &h.data_points {
                    out.push(format!(
                        "{head} {:?} count={} sum={:?} buckets={:?}",
                        attr_map(&p.attributes),
                        p.count,
                        p.sum,
                        p.bucket_counts
                    ));
                }
            }
            _ => {
                for (a, v, ..) in points(m) {
                    let v = if m.name == "kube_prober.snapshot.age" {
                        0.0
                    } else {
                        v
                    };
                    out.push(format!("{head} {a:?} {v:?}"));
                }
            }
        }
    }
    out.sort();
    out
}

/// Same points in both, each as often; the difference when not.
fn same_points(a: &ExportMetricsServiceRequest, b: &ExportMetricsServiceRequest) {
    let (ca, cb) = (canonical(a), canonical(b));
    if ca != cb {
        let only_a: Vec<_> = ca.iter().filter(|x| !cb.contains(x)).take(5).collect();
        let only_b: Vec<_> = cb.iter().filter(|x| !ca.contains(x)).take(5).collect();
        panic!(
            "{} vs {} points; only in the first: {only_a:#?}; only in the second: {only_b:#?}",
            ca.len(),
            cb.len()
        );
    }
}

/// (metric, start time) of every cumulative sum point.
fn sum_starts(req: &ExportMetricsServiceRequest) -> BTreeMap<String, BTreeSet<u64>> {
    let mut out: BTreeMap<String, BTreeSet<u64>> = BTreeMap::new();
    for m in all_metrics(req) {
        if let Some(Data::Sum(s)) = &m.data {
            for p in &s.data_points {
                out.entry(m.name.clone())
                    .or_default()
                    .insert(p.start_time_unix_nano);
            }
        }
    }
    out
}

async fn check_batches(protocol: &str) {
    const MAX: usize = 100;
    let nodes: Vec<String> = (0..40).map(|i| format!("node-{i:02}")).collect();
    // The same probe history in both stores, so that the histogram does not go back.
    let probed = |nodes: &[String]| {
        let store = store_with(nodes);
        store.probe().record_probe_outcome(ProbeOutcome {
            probe: "dns".into(),
            target: "kubernetes.default".into(),
            at: SystemTime::now(),
            duration: Duration::from_millis(40),
            failure: None,
        });
        store
    };
    let store = probed(&nodes);
    let snap = Arc::new(store.snapshot(SystemTime::now()));

    // The default limit: the instance's request and one more.
    let rx1 = OtlpReceiver::start().await;
    let whole_sink = sink(&config(protocol, &rx1));
    let (whole, r1) = push_merged(&rx1, &whole_sink, snap.clone(), PushScope::All).await;
    assert_eq!(r1.requests, 2, "{r1:?}");

    let rx = OtlpReceiver::start().await;
    let s = sink(&OtlpOptions {
        otlp_max_points_per_request: Some(MAX),
        ..config(protocol, &rx)
    });
    let (split, r) = push_merged(&rx, &s, snap.clone(), PushScope::All).await;
    assert_eq!(r.points, r1.points);
    assert!(r.points > 10 * MAX as u64, "{r:?}");
    assert!(r.requests >= r.points.div_ceil(MAX as u64), "{r:?}");
    let got = rx.received();
    for g in &got {
        assert!(
            point_count(&g.request) <= MAX,
            "{}",
            point_count(&g.request)
        );
        assert!(g.proto_bytes > 0);
    }
    // The batches together are the single request: same points, each once.
    same_points(&split, &whole);
    // One family alone over the limit is spread over several requests.
    let spread = got
        .iter()
        .filter(|g| metric(&g.request, "k8s.node.condition.status").is_some())
        .count();
    assert!(
        spread >= 2,
        "k8s.node.condition.status in {spread} requests"
    );
    // The same description everywhere.
    for m in all_metrics(&whole) {
        for g in &got {
            if let Some(x) = metric(&g.request, &m.name) {
                assert_eq!(x.description, m.description, "{}", m.name);
            }
        }
    }
    // Cumulative sums: one start time per metric across the batches, the same next push.
    let starts = sum_starts(&split);
    assert!(
        starts.contains_key("k8s.container.restart.count"),
        "{starts:?}"
    );
    for (name, st) in &starts {
        assert_eq!(st.len(), 1, "{name}: {st:?}");
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    // Half of the nodes leave: their series are not sent again.
    let half = probed(&nodes[..20]);
    let (next, _) = push_merged(&rx, &s, half.snapshot(SystemTime::now()), PushScope::All).await;
    assert_eq!(sum_starts(&next), starts, "start times are stable");
    let sent_nodes: BTreeSet<String> = all_metrics(&next)
        .iter()
        .filter(|m| !matches!(m.data, Some(Data::Histogram(_))))
        .flat_map(|m| points(m))
        .filter_map(|(a, ..)| a.get("k8s.node.name").cloned())
        .collect();
    assert_eq!(sent_nodes, nodes[..20].iter().cloned().collect());

    // A failed request ends the push; `sent` tells what went out.
    let before = rx.received().len();
    rx.fail_after(2, 1);
    let e = s
        .push(snap.clone(), PushScope::All)
        .await
        .expect_err("third request fails");
    assert_eq!(e.sent.requests, 3, "{e:?}");
    let ok: usize = rx.received()[before..]
        .iter()
        .map(|g| point_count(&g.request))
        .sum();
    assert_eq!(rx.received().len(), before + 2);
    assert_eq!(e.sent.points, ok as u64, "{e:?}");
    assert!(e.message.contains("request 3"), "{}", e.message);
    assert_eq!(rx.attempts(), before + 3, "nothing after the failure");
    // The next push sends everything again.
    let (again, _) = push_merged(&rx, &s, snap, PushScope::All).await;
    same_points(&again, &whole);
}

#[tokio::test]
async fn grpc_pushes_are_split_into_bounded_requests() {
    check_batches(GRPC).await;
}

#[tokio::test]
async fn http_pushes_are_split_into_bounded_requests() {
    check_batches(HTTP).await;
}

/// Start times of every cumulative point (sums and histograms) in `reqs`, with the earliest
/// point time.
fn cumulative_starts(reqs: &[Received]) -> (BTreeSet<u64>, u64, usize) {
    let mut starts = BTreeSet::new();
    let mut earliest = u64::MAX;
    let mut n = 0;
    for r in reqs {
        for m in all_metrics(&r.request) {
            let pts: Vec<(u64, u64)> = match &m.data {
                Some(Data::Sum(s)) => s
                    .data_points
                    .iter()
                    .map(|p| (p.start_time_unix_nano, p.time_unix_nano))
                    .collect(),
                Some(Data::Histogram(h)) => h
                    .data_points
                    .iter()
                    .map(|p| (p.start_time_unix_nano, p.time_unix_nano))
                    .collect(),
                _ => Vec::new(),
            };
            for (start, time) in pts {
                starts.insert(start);
                earliest = earliest.min(time);
                n += 1;
            }
        }
    }
    (starts, earliest, n)
}

/// Every cumulative point one sink sends carries the same start time (the sink's), whatever
/// the metric, the request (instance request or batch) or the push.
async fn check_one_start_time(protocol: &str) {
    let nodes: Vec<String> = (0..30).map(|i| format!("node-{i:02}")).collect();
    let store = store_with(&nodes);
    store.probe().record_probe_outcome(ProbeOutcome {
        probe: "dns".into(),
        target: "kubernetes.default".into(),
        at: SystemTime::now(),
        duration: Duration::from_millis(40),
        failure: None,
    });
    let rx = OtlpReceiver::start().await;
    let s = sink(&OtlpOptions {
        otlp_max_points_per_request: Some(25),
        ..config(protocol, &rx)
    });
    let (_, first) = push_merged(&rx, &s, store.snapshot(SystemTime::now()), PushScope::All).await;
    assert!(first.requests > 3, "{first:?}");
    tokio::time::sleep(Duration::from_millis(5)).await;
    let (_, second) = push_merged(&rx, &s, store.snapshot(SystemTime::now()), PushScope::All).await;
    assert!(second.requests > 3, "{second:?}");
    let got = rx.received();
    let (starts, earliest, n) = cumulative_starts(&got);
    // Sums of several families (probe runs, restarts, sink and source counters) and the
    // probe histogram, in the instance request and in batches, in both pushes.
    assert!(n > 10, "{n} cumulative points");
    let with_sums = got
        .iter()
        .filter(|r| {
            all_metrics(&r.request)
                .iter()
                .any(|m| matches!(m.data, Some(Data::Sum(_))))
        })
        .count();
    assert!(with_sums >= 3, "cumulative points in {with_sums} requests");
    assert_eq!(starts.len(), 1, "one start time per sink: {starts:?}");
    let start = *starts.iter().next().unwrap();
    assert_eq!(start, s.start_time_unix_nano());
    assert!(start > 0 && start <= earliest, "{start} > {earliest}");
}

#[tokio::test]
async fn grpc_every_cumulative_point_of_a_sink_has_one_start_time() {
    check_one_start_time(GRPC).await;
}

#[tokio::test]
async fn http_every_cumulative_point_of_a_sink_has_one_start_time() {
    check_one_start_time(HTTP).await;
}

/// A receiver's answer larger than `--max-response-bytes` fails the request with the counted
/// reason `too_large`; the same answer under the cap is accepted.
async fn check_answer_cap(protocol: &str) {
    const CAP: usize = 64 * 1024;
    let rx = OtlpReceiver::start().await;
    // 4 MiB of partial-success message: 64 times the cap.
    rx.pad_answers(4 << 20);
    let snap = Arc::new(store_with(&names_of(&["n1"])).snapshot(SystemTime::now()));
    let capped = sink_with(
        &config(protocol, &rx),
        OtlpBounds {
            max_response_bytes: Some(CAP),
            ..BOUNDS
        },
    );
    let e = tokio::time::timeout(WAIT, capped.push(snap.clone(), PushScope::All))
        .await
        .expect("bounded")
        .expect_err("an answer over the cap");
    assert_eq!(e.reason, "too_large", "{e:?}");
    // The receiver answered: the request counts, its points do not; nothing after it.
    assert_eq!(e.sent.requests, 1, "{e:?}");
    assert_eq!(e.sent.points, 0, "{e:?}");
    assert_eq!(rx.attempts(), 1);
    assert!(e.message.contains(&CAP.to_string()), "{}", e.message);
    // A small answer passes the same cap; the big one passes the default cap.
    rx.pad_answers(100);
    let ok = capped
        .push(snap.clone(), PushScope::All)
        .await
        .expect("small answer");
    assert!(ok.points > 0);
    rx.pad_answers(4 << 20);
    let default_cap = sink(&config(protocol, &rx));
    let ok = default_cap
        .push(snap, PushScope::All)
        .await
        .expect("under the default cap");
    assert!(ok.points > 0);
}

#[tokio::test]
async fn grpc_an_answer_over_the_byte_cap_is_a_too_large_failure() {
    check_answer_cap(GRPC).await;
}

#[tokio::test]
async fn http_an_answer_over_the_byte_cap_is_a_too_large_failure() {
    check_answer_cap(HTTP).await;
}

#[tokio::test]
async fn instance_only_scope_sends_only_instance_level_families() {
    let rx = OtlpReceiver::start().await;
    let s = sink(&config(GRPC, &rx));
    let store = store_with(&names_of(&["n1"]));
    let (first_req, report) = push_merged(
        &rx,
        &s,
        store.snapshot(SystemTime::now()),
        PushScope::InstanceOnly,
    )
    .await;
    assert_eq!(report.requests, 1, "instance-level series: one request");
    let (full, _) = push_merged(&rx, &s, store.snapshot(SystemTime::now()), PushScope::All).await;
    let instance_names: BTreeSet<&str> = OTLP_METRICS
        .iter()
        .filter(|m| {
            families::ALL
                .iter()
                .any(|f| f.name == m.family && kube_prober::outputs::series::is_instance_level(f))
        })
        .map(|m| m.name)
        .collect();
    let first: BTreeSet<&str> = all_metrics(&first_req)
        .iter()
        .map(|m| m.name.as_str())
        .collect();
    assert!(first.contains("kube_prober.probe.runs"));
    assert!(first.contains("kube_prober.build.info"));
    for n in &first {
        assert!(instance_names.contains(n), "{n} is not instance-level");
    }
    assert!(!first.contains("k8s.node.cpu.allocatable"));
    assert!(!first.contains("k8s.node.cpu.usage"));
    // The next full push has the cluster-level series again.
    assert!(metric(&full, "k8s.node.cpu.allocatable").is_some());
}

async fn check_failure(protocol: &str, reason: &str) {
    let rx = OtlpReceiver::start().await;
    let s = sink(&config(protocol, &rx));
    let snap = Arc::new(store_with(&names_of(&["n1"])).snapshot(SystemTime::now()));
    rx.fail_next(1);
    let e = s
        .push(snap.clone(), PushScope::All)
        .await
        .expect_err("injected failure");
    assert_eq!(e.reason, reason, "{e:?}");
    assert_eq!(e.sent.requests, 1);
    assert_eq!(e.sent.points, 0);
    assert!(e.message.contains("OTLP export"), "{}", e.message);
    assert_eq!(rx.attempts(), 1, "no retries inside one push");
    // The next push goes through.
    let ok = s.push(snap, PushScope::All).await.unwrap();
    assert!(ok.points > 0);
    assert_eq!(rx.received().len(), ok.requests as usize);
}

#[tokio::test]
async fn grpc_unavailable_is_reported_as_unavailable() {
    check_failure(GRPC, "unavailable").await;
}

#[tokio::test]
async fn http_503_is_reported_as_http_503() {
    check_failure(HTTP, "http_503").await;
}

#[tokio::test]
async fn an_unreachable_receiver_fails_with_a_transport_reason() {
    // A port nothing listens on.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    drop(l);
    let snap = Arc::new(Snapshot::empty(SystemTime::now()));
    for (protocol, endpoint, reason) in [
        (GRPC, format!("http://{addr}"), "unavailable"),
        (HTTP, format!("http://{addr}/v1/metrics"), "transport"),
    ] {
        let s = sink_with(
            &OtlpOptions {
                otlp_protocol: Some(protocol.into()),
                otlp_endpoint: Some(endpoint),
                ..Default::default()
            },
            OtlpBounds {
                timeout: Some(Duration::from_secs(2)),
                ..BOUNDS
            },
        );
        let e = tokio::time::timeout(
            Duration::from_secs(10),
            s.push(snap.clone(), PushScope::All),
        )
        .await
        .expect("bounded")
        .expect_err("nothing listens");
        assert_eq!(e.reason, reason, "{protocol}: {e:?}");
        // The receiver never answered: no request is counted.
        assert_eq!(e.sent.requests, 0, "{protocol}: {e:?}");
        assert!(e.message.contains("refused"), "{protocol}: {}", e.message);
    }
}

/// Runs in a child process (see below) with `OTEL_EXPORTER_OTLP_HEADERS` set:
/// `OtlpOptions::resolve` reads the process environment, which cannot be changed safely in a multi-threaded test
/// binary.
#[tokio::test]
#[ignore = "run by explicit_headers_win_over_the_environment in a child process"]
async fn child_explicit_headers_win_over_the_environment() {
    if std::env::var_os("KP_OTLP_CHILD").is_none() {
        return;
    }
    let rx = OtlpReceiver::start().await;
    let mut requests = 0;
    for protocol in [GRPC, HTTP] {
        let cfg = OtlpOptions {
            otlp_headers: Some("x-tenant=team-a".into()),
            ..config(protocol, &rx)
        };
        let s = OtlpSink::new(cfg.resolve(BOUNDS).unwrap(), &resource()).unwrap();
        let snap = Arc::new(Snapshot::empty(SystemTime::now()));
        requests += s.push(snap, PushScope::All).await.unwrap().requests as usize;
    }
    let got = rx.received();
    assert!(requests >= 2);
    assert_eq!(got.len(), requests);
    for r in &got {
        assert_eq!(r.header("x-tenant"), Some("team-a"), "{}", r.transport);
        assert_eq!(r.header("x-env-only"), Some("yes"), "{}", r.transport);
        let tenants: Vec<_> = r.headers.iter().filter(|(k, _)| k == "x-tenant").collect();
        assert_eq!(tenants.len(), 1, "{}: {tenants:?}", r.transport);
    }
}

#[test]
fn explicit_headers_win_over_the_environment() {
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        &support::test_name(
            module_path!(),
            "child_explicit_headers_win_over_the_environment",
        ),
        "--ignored",
        "--nocapture",
    ])
    .env("KP_OTLP_CHILD", "1")
    .env(
        "OTEL_EXPORTER_OTLP_HEADERS",
        "x-tenant=from-env,x-env-only=yes",
    );
    let out = support::owned::output(cmd, None).unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("1 passed"), "{text}");
}

#[tokio::test]
async fn config_errors_are_clear() {
    let err = |opts: OtlpOptions| match opts.clone().resolve(OtlpBounds::default()) {
        Err(e) => e,
        Ok(_) => panic!("{opts:?} was accepted"),
    };
    let e = err(OtlpOptions {
        otlp_protocol: Some("http/xml".into()),
        ..Default::default()
    });
    assert!(
        matches!(
            e,
            Error::Config {
                option: "otlp protocol",
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(
        e.to_string(),
        "invalid value 'http/xml' for otlp protocol: expected grpc or http/protobuf"
    );
    let e = err(OtlpOptions {
        otlp_headers: Some("x-tenant".into()),
        ..Default::default()
    });
    assert_eq!(
        e.to_string(),
        "invalid value 'x-tenant' for otlp header: expected key=value"
    );
    let e = err(OtlpOptions {
        otlp_headers: Some("bad header=1".into()),
        ..Default::default()
    });
    assert!(
        e.to_string().contains("not a valid HTTP header name"),
        "{e}"
    );
    let e = err(OtlpOptions {
        otlp_endpoint: Some("collector:4317".into()),
        ..Default::default()
    });
    assert!(e.to_string().contains("http:// or https://"), "{e}");
    assert_eq!(e.exit_code(), 2);
    let e = err(OtlpOptions {
        otlp_max_points_per_request: Some(0),
        ..Default::default()
    });
    assert_eq!(
        e.to_string(),
        "invalid value '0' for --otlp-max-points-per-request: must be between 1 and 10000000"
    );
    let defaults = OtlpOptions::default()
        .resolve_with(OtlpBounds::default(), &|_| None)
        .unwrap();
    assert_eq!(defaults.max_points_per_request, 10_000);
}

#[test]
fn docs_list_the_otlp_names_of_the_code() {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/metrics.md")).unwrap();
    let section = doc
        .split("\n## OTLP names")
        .nth(1)
        .expect("docs/metrics.md has a '## OTLP names' section");
    let section = section.split("\n## ").next().unwrap_or(section);
    let clean = |s: &str| s.trim().trim_matches('`').to_string();
    let documented: BTreeSet<(String, String, String, String)> = section
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split('|').collect();
            assert_eq!(cells.len(), 4, "{l}");
            let unit = clean(cells[2]);
            (
                clean(cells[0]),
                clean(cells[1]),
                if unit == "-" { String::new() } else { unit },
                clean(cells[3]),
            )
        })
        .collect();
    let code: BTreeSet<(String, String, String, String)> = OTLP_METRICS
        .iter()
        .map(|m| {
            let family = families::ALL
                .iter()
                .find(|f| f.name == m.family)
                .unwrap()
                .sample_name();
            (
                family,
                m.name.to_string(),
                m.unit.to_string(),
                m.kind.as_str().to_string(),
            )
        })
        .collect();
    let missing: Vec<_> = code.difference(&documented).collect();
    let stale: Vec<_> = documented.difference(&code).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "docs/metrics.md OTLP table drifted.\nnot documented: {missing:#?}\nnot in code: {stale:#?}"
    );
}

/// docs/metrics.md's "OTLP names under `--otlp-semconv legacy`" table is exactly what the
/// families declare: every legacy metric that differs from the stable ones, with the stable
/// name it replaces, its unit and kind.
#[test]
fn docs_list_the_legacy_otlp_names_of_the_code() {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/metrics.md")).unwrap();
    let section = doc
        .split("\n## OTLP names under `--otlp-semconv legacy`")
        .nth(1)
        .expect("docs/metrics.md has a '## OTLP names under `--otlp-semconv legacy`' section");
    let section = section.split("\n## ").next().unwrap_or(section);
    let clean = |s: &str| s.trim().trim_matches('`').to_string();
    type Row = (String, String, String, String, String);
    let documented: BTreeSet<Row> = section
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| {
            let cells: Vec<String> = l.trim_matches('|').split('|').map(clean).collect();
            assert_eq!(cells.len(), 6, "{l}");
            let unit = if cells[3] == "-" {
                String::new()
            } else {
                cells[3].clone()
            };
            (
                cells[0].clone(),
                cells[1].clone(),
                cells[2].clone(),
                unit,
                cells[4].clone(),
            )
        })
        .collect();
    let mut code: BTreeSet<Row> = BTreeSet::new();
    for m in OTLP_METRICS_LEGACY {
        if OTLP_METRICS.contains(m) {
            continue;
        }
        let family = families::ALL.iter().find(|f| f.name == m.family).unwrap();
        // The stable metric it replaces: the family's one stable metric not sent under legacy.
        let replaced: Vec<&str> = family
            .otel
            .iter()
            .filter(|o| !family.otel_legacy.contains(o))
            .map(|o| o.name)
            .collect();
        assert_eq!(replaced.len(), 1, "{}: {replaced:?}", family.name);
        code.insert((
            family.sample_name(),
            replaced[0].to_string(),
            m.name.to_string(),
            m.unit.to_string(),
            m.kind.as_str().to_string(),
        ));
    }
    let missing: Vec<_> = code.difference(&documented).collect();
    let stale: Vec<_> = documented.difference(&code).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "docs/metrics.md legacy OTLP table drifted.\nnot documented: {missing:#?}\nnot in code: {stale:#?}"
    );
}

// Test PKI made with openssl for these tests only (P-256, valid 2020-2120): a CA, a server
// certificate for 127.0.0.1/localhost and a client certificate, both signed by the CA.
const CA_CERT: &str = "\
-----BEGIN CERTIFICATE-----
MIIBcTCCARagAwIBAgICEAAwCgYIKoZIzj0EAwIwHjEcMBoGA1UEAwwTa3ViZS1w
cm9iZXIgdGVzdCBDQTAgFw0yMDAxMDEwMDAwMDBaGA8yMTIwMDEwMTAwMDAwMFow
HjEcMBoGA1UEAwwTa3ViZS1wcm9iZXIgdGVzdCBDQTBZMBMGByqGSM49AgEGCCqG
SM49AwEHA0IABDZyr+IdY3ySZSGOxo3dMh0ErWIKOdQ1TvOSAuh4pzhE1jn1v4S/
Y40xg8pE8Seyqy28C6wEDKH1PXksVEutSP2jQjBAMA8GA1UdEwEB/wQFMAMBAf8w
DgYDVR0PAQH/BAQDAgEGMB0GA1UdDgQWBBT1rk1llgxVC/rH/2OjtWMY9jPflDAK
BggqhkjOPQQDAgNJADBGAiEA1tWTUP2NwuGupyNVDzm20A6EyMJ9h8p8Qo343iN5
mukCIQCHnc8RxeiOpvtjabYVQ4oxGoIcKHHJ+WDwG4iGnczb9Q==
-----END CERTIFICATE-----
";
const SERVER_CERT: &str = "\
-----BEGIN CERTIFICATE-----
MIIBtDCCAVqgAwIBAgICEAEwCgYIKoZIzj0EAwIwHjEcMBoGA1UEAwwTa3ViZS1w
cm9iZXIgdGVzdCBDQTAgFw0yMDAxMDEwMDAwMDBaGA8yMTIwMDEwMTAwMDAwMFow
FDESMBAGA1UEAwwJMTI3LjAuMC4xMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE
4vHfAhtPT8iT9+UrcqWvkkOj3yvx7EvbO9nluqSFQ5/Sbxhyv5FgPWuvK2a7mMP7
LBRqr8B3d2xjU4aqBEc3t6OBjzCBjDAaBgNVHREEEzARhwR/AAABgglsb2NhbGhv
c3QwCQYDVR0TBAIwADAOBgNVHQ8BAf8EBAMCB4AwEwYDVR0lBAwwCgYIKwYBBQUH
AwEwHQYDVR0OBBYEFB+6Y1YzYDhVtxSKP57enwkk5kRxMB8GA1UdIwQYMBaAFPWu
TWWWDFUL+sf/Y6O1Yxj2M9+UMAoGCCqGSM49BAMCA0gAMEUCIQDavrc9zmutzswd
M5HTGyUfsjSzoSGQDWCwG3MdKTnmlwIgZeAbWXz7ag67+6T1+cdwPMf7x3vFSL5u
j9rrpoOcouI=
-----END CERTIFICATE-----
";
const SERVER_KEY: &str = "\
-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgdG/BgDoiAiCM1kVn
ylzGDcTSEzJO/RHdmfcBY2mUpH6hRANCAATi8d8CG09PyJP35Stypa+SQ6PfK/Hs
S9s72eW6pIVDn9JvGHK/kWA9a68rZruYw/ssFGqvwHd3bGNThqoERze3
-----END PRIVATE KEY-----
";
const CLIENT_CERT: &str = "\
-----BEGIN CERTIFICATE-----
MIIBnzCCAUWgAwIBAgICEAIwCgYIKoZIzj0EAwIwHjEcMBoGA1UEAwwTa3ViZS1w
cm9iZXIgdGVzdCBDQTAgFw0yMDAxMDEwMDAwMDBaGA8yMTIwMDEwMTAwMDAwMFow
HTEbMBkGA1UEAwwSa3ViZS1wcm9iZXIgY2xpZW50MFkwEwYHKoZIzj0CAQYIKoZI
zj0DAQcDQgAEwg0I8Y6uZTnrBT3gT2CJAozKrjdHmGzBeGlOAvlSsyEix1e2KZ3o
7G0aYudNmJCrpw9r1xGwb3K05Y+MtaqQS6NyMHAwCQYDVR0TBAIwADAOBgNVHQ8B
Af8EBAMCB4AwEwYDVR0lBAwwCgYIKwYBBQUHAwIwHQYDVR0OBBYEFP8BuRu89MV+
j+kGtYfy2sjB3YfLMB8GA1UdIwQYMBaAFPWuTWWWDFUL+sf/Y6O1Yxj2M9+UMAoG
CCqGSM49BAMCA0gAMEUCIG+pZxNcrKqwOC+Z4HJXPivURKtPvN72V7WLc65hsGXE
AiEAzxCNU8939DHnk7TM1tH5JltdsD5vq8OmkSFzFHnB4BM=
-----END CERTIFICATE-----
";
const CLIENT_KEY: &str = "\
-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgHsJ16LiYVhmoJqdA
KnNsZQTFh7BpU7xWTKFyFSMYA5mhRANCAATCDQjxjq5lOesFPeBPYIkCjMquN0eY
bMF4aU4C+VKzISLHV7YpnejsbRpi502YkKunD2vXEbBvcrTlj4y1qpBL
-----END PRIVATE KEY-----
";

/// The number of requests on success.
async fn tls_push(cfg: &OtlpOptions, env: &[(&str, &str)]) -> Result<usize, String> {
    let env: BTreeMap<String, String> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let config = cfg
        .clone()
        .resolve_with(BOUNDS, &|k| env.get(k).cloned())
        .map_err(|e| e.to_string())?;
    let s = OtlpSink::new(config, &resource()).map_err(|e| e.to_string())?;
    let snap = Arc::new(store_with(&names_of(&["n1"])).snapshot(SystemTime::now()));
    tokio::time::timeout(Duration::from_secs(15), s.push(snap, PushScope::All))
        .await
        .map_err(|_| "push hung".to_string())?
        .map(|r| r.requests as usize)
        .map_err(|e| format!("{}: {}", e.reason, e.message))
}

async fn check_mutual_tls(protocol: &str) {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str, body: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, body).unwrap();
        p
    };
    let (ca, cert, key) = (
        file("ca.pem", CA_CERT),
        file("client.pem", CLIENT_CERT),
        file("client.key", CLIENT_KEY),
    );
    let rx = OtlpReceiver::start_with_tls(Some(otlp_support::ReceiverTls {
        cert_pem: SERVER_CERT.into(),
        key_pem: SERVER_KEY.into(),
        client_ca_pem: Some(CA_CERT.into()),
    }))
    .await;
    let base = config(protocol, &rx);
    assert!(
        base.otlp_endpoint
            .as_deref()
            .unwrap()
            .starts_with("https://")
    );

    // CA file and client certificate given explicitly.
    let explicit = OtlpOptions {
        otlp_ca_file: Some(ca.clone()),
        otlp_client_cert: Some(cert.clone()),
        otlp_client_key: Some(key.clone()),
        ..base.clone()
    };
    let n1 = tls_push(&explicit, &[]).await.expect("mutual TLS push");
    assert!(n1 > 0);
    assert_eq!(rx.received().len(), n1);

    // The same from the standard variables.
    let (ca_s, cert_s, key_s) = (
        ca.display().to_string(),
        cert.display().to_string(),
        key.display().to_string(),
    );
    let n2 = tls_push(
        &base,
        &[
            ("OTEL_EXPORTER_OTLP_METRICS_CERTIFICATE", &ca_s),
            ("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", &cert_s),
            ("OTEL_EXPORTER_OTLP_CLIENT_KEY", &key_s),
        ],
    )
    .await
    .expect("mutual TLS push configured from the environment");
    assert_eq!(rx.received().len(), n1 + n2);

    // Without the client certificate the receiver refuses the connection.
    let no_client = OtlpOptions {
        otlp_ca_file: Some(ca.clone()),
        ..base.clone()
    };
    let e = tls_push(&no_client, &[]).await.expect_err("no client cert");
    // Without our CA the built-in roots do not trust the receiver.
    let no_ca = OtlpOptions {
        otlp_client_cert: Some(cert),
        otlp_client_key: Some(key),
        ..base
    };
    let e2 = tls_push(&no_ca, &[]).await.expect_err("untrusted server");
    if protocol == GRPC {
        assert!(e.starts_with("tls:"), "{e}");
        assert!(e.contains("CertificateRequired"), "{e}");
        assert!(e2.starts_with("tls:"), "{e2}");
        assert!(e2.contains("UnknownIssuer"), "{e2}");
    } else {
        assert!(e.starts_with("tls:"), "{e}");
        assert!(e2.starts_with("tls:"), "{e2}");
        assert!(e2.contains("UnknownIssuer"), "{e2}");
        let refused = rx.tls_failures();
        assert!(
            refused
                .iter()
                .any(|f| f.to_lowercase().contains("certificate")),
            "{refused:?}"
        );
    }
    assert_eq!(rx.received().len(), n1 + n2);
}

#[tokio::test]
async fn grpc_over_mutual_tls_with_a_ca_file_and_a_client_certificate() {
    check_mutual_tls(GRPC).await;
}

#[tokio::test]
async fn http_over_mutual_tls_with_a_ca_file_and_a_client_certificate() {
    check_mutual_tls(HTTP).await;
}
