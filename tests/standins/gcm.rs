//! The Cloud Monitoring output through the real gcloud-sdk client to a stand-in speaking
//! gRPC with Cloud Monitoring's rules: batching at 200 series, gke-prober's names, labels and
//! resources, retries, partial failures, the sampling period under a fast ticker, CUMULATIVE
//! restarts, the leader-only scope, and descriptor listing and deletion.

use support::gcm as gcm_support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use gcloud_sdk::google::api::metric_descriptor::{MetricKind, ValueType};
use gcloud_sdk::google::api::{Metric, MonitoredResource};
use gcloud_sdk::google::monitoring::v3::{
    CreateTimeSeriesRequest, Point, TimeInterval, TimeSeries, TypedValue, typed_value,
};
use gcm_support::{GcmStandIn, StoredSeries, TOO_FREQUENT};
use kube_prober::model::{
    Addon, AddonExpected, AddonOnNode, ClusterInfo, ClusterState, ContainerRestarts, Controller,
    NodeFacts, Placement, PodRestarts, ProbeState, Snapshot,
};
use kube_prober::outputs::gcm::{
    GcmClientConfig, GcmConfig, GcmSink, delete_descriptors, list_descriptors, summary_of,
};
use kube_prober::outputs::{PushScope, Sink};
use tonic::Code;

const P: &str = "workload.googleapis.com/kube-prober/";

fn t(suffix: &str) -> String {
    format!("{P}{suffix}")
}

fn crypto() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
}

fn node(i: usize, ready: bool, schedulable: bool) -> NodeFacts {
    NodeFacts {
        name: format!("node-{i:03}"),
        placement: Placement {
            pool: format!("pool-{}", i % 3),
            zone: format!("zone-{}", i % 2),
        },
        conditions: vec![
            ("Ready".into(), if ready { "True" } else { "False" }.into()),
            ("MemoryPressure".into(), "False".into()),
            ("DiskPressure".into(), "False".into()),
        ],
        ready,
        schedulable,
        done_warming: true,
        created: None,
        capacity: None,
        allocatable: None,
    }
}

fn addon(name: &str, version: &str, controller: Controller) -> Addon {
    Addon {
        name: name.into(),
        version: version.into(),
        controller,
    }
}

fn restarts(pod: &str, node: &str, counts: &[(&str, u32)]) -> Arc<PodRestarts> {
    Arc::new(PodRestarts {
        namespace: "kube-system".into(),
        pod: pod.into(),
        node: Some(node.into()),
        addon: Some(addon("fluentbit", "1.9", Controller::DaemonSet)),
        containers: counts
            .iter()
            .map(|(c, n)| ContainerRestarts {
                name: (*c).into(),
                restarts: *n,
                last_reason: Some("OOMKilled".into()),
                last_exit_code: Some(137),
            })
            .collect(),
    })
}

/// `n` nodes (node-001 not ready and cordoned), fluentbit on every node, kube-dns (two
/// Deployments of one version, 2 pods, 1 ready) on node-000, restarts of one fluentbit pod.
fn cluster(n: usize, fluentbit_restarts: u32) -> ClusterState {
    let mut cs = ClusterState {
        nodes: std::sync::Arc::new((0..n).map(|i| node(i, i != 1, i != 1)).collect()),
        ..Default::default()
    };
    let fb = addon("fluentbit", "1.9", Controller::DaemonSet);
    let dns = addon("kube-dns", "1.22", Controller::Deployment);
    cs.expected = vec![
        AddonExpected {
            addon: fb.clone(),
            namespace: "kube-system".into(),
            workload: "fluentbit-gke".into(),
            expected: n as u32,
        },
        AddonExpected {
            addon: dns.clone(),
            namespace: "kube-system".into(),
            workload: "kube-dns".into(),
            expected: 2,
        },
        AddonExpected {
            addon: dns.clone(),
            namespace: "kube-system".into(),
            workload: "kube-dns-extra".into(),
            expected: 1,
        },
    ];
    for i in 0..n {
        let mut list = vec![AddonOnNode {
            addon: fb.clone(),
            pods: 1,
            ready: 1,
        }];
        if i == 0 {
            list.push(AddonOnNode {
                addon: dns.clone(),
                pods: 2,
                ready: 1,
            });
        }
        cs.addons.insert(format!("node-{i:03}").into(), list);
    }
    cs.restarts = vec![restarts(
        "fluentbit-abcde",
        "node-000",
        &[("fluentbit", fluentbit_restarts), ("metrics", 0)],
    )];
    cs
}

fn probe(name: &str, failure: Option<&str>) -> ProbeState {
    ProbeState {
        probe: name.into(),
        target: "x".into(),
        at: SystemTime::now(),
        duration: Duration::from_millis(3),
        failure: failure.map(String::from),
        runs: 1,
        failures: BTreeMap::new(),
        buckets: vec![],
        duration_sum: 0.003,
    }
}

fn snapshot(cs: ClusterState) -> Arc<Snapshot> {
    let mut s = Snapshot::empty(SystemTime::now());
    s.cluster = ClusterInfo {
        cluster_name: "c1".into(),
        role: "cluster".into(),
        project: "p1".into(),
        location: "europe-west1".into(),
    };
    s.cluster_state = Some(Arc::new(cs));
    s.probes = vec![
        probe("metrics_server", None),
        probe("cluster_dns", Some("timeout")),
        probe("kubelet_healthz", None),
    ];
    Arc::new(s)
}

fn cfg(gcm: &GcmStandIn) -> GcmConfig {
    crypto();
    GcmConfig {
        client: GcmClientConfig {
            endpoint: Some(gcm.url.clone()),
            anonymous: true,
            ..Default::default()
        },
        retry_initial: Duration::from_millis(20),
        retry_max: Duration::from_millis(100),
        push_deadline: Duration::from_secs(10),
        ..Default::default()
    }
}

/// Series per metric type, as the stand-in stored them.
fn by_type(gcm: &GcmStandIn) -> BTreeMap<String, Vec<StoredSeries>> {
    let mut m: BTreeMap<String, Vec<StoredSeries>> = BTreeMap::new();
    for s in gcm.series() {
        m.entry(s.metric_type.clone()).or_default().push(s);
    }
    m
}

fn labels(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
    kv.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn int(s: &StoredSeries) -> i64 {
    s.points.last().and_then(|p| p.int64).unwrap_or(i64::MIN)
}

/// The series of `metric_type` whose labels include `kv`.
fn find<'a>(
    all: &'a BTreeMap<String, Vec<StoredSeries>>,
    metric_type: &str,
    resource: &[(&str, &str)],
    kv: &[(&str, &str)],
) -> Vec<&'a StoredSeries> {
    all.get(metric_type)
        .map(|v| {
            v.iter()
                .filter(|s| {
                    kv.iter()
                        .all(|(k, val)| s.metric_labels.get(*k).map(String::as_str) == Some(val))
                        && resource.iter().all(|(k, val)| {
                            s.resource_labels.get(*k).map(String::as_str) == Some(val)
                        })
                })
                .collect()
        })
        .unwrap_or_default()
}

async fn timed<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(30), f)
        .await
        .expect("bounded")
}

#[tokio::test]
async fn a_large_cluster_goes_out_in_requests_of_at_most_200_series() {
    let gcm = GcmStandIn::start().await;
    let sink = GcmSink::new(cfg(&gcm)).await.unwrap();
    let report = timed(sink.push(snapshot(cluster(150, 2)), PushScope::All))
        .await
        .unwrap();

    let writes = gcm.writes();
    let total: usize = writes.iter().map(|w| w.series).sum();
    // 3 conditions, availability and control plane per node; 151 addon series; 2 restart
    // series; cluster aggregates; 2 addon probes.
    assert!(total > 900, "{total}");
    assert_eq!(writes.len(), total.div_ceil(200));
    assert!(writes.iter().all(|w| w.series <= 200 && w.code == Code::Ok));
    assert!(gcm.errors().is_empty(), "{:?}", gcm.errors());
    assert_eq!(report.points as usize, total);
    assert_eq!(report.requests as usize, writes.len());
    assert_eq!(gcm.series().len(), total);
    assert!(writes.iter().all(|w| {
        w.user_agent
            .as_deref()
            .is_some_and(|ua| ua.contains("kube-prober/"))
            && !w.authorization
    }));

    let all = by_type(&gcm);
    assert_eq!(all[&t("node/condition")].len(), 450);
    assert_eq!(all[&t("node/available")].len(), 150);
    assert_eq!(all[&t("addon/control_plane_available")].len(), 150);
    assert_eq!(all[&t("addon/available")].len(), 151);
    assert_eq!(all[&t("addon/restart")].len(), 2);
    // 6 placements, node-001 adds a Ready=False combination.
    assert_eq!(all[&t("cluster/node_condition")].len(), 6 * 3 + 1);
    let ready_nodes: i64 = find(
        &all,
        &t("cluster/node_condition"),
        &[],
        &[("type", "Ready"), ("status", "True")],
    )
    .iter()
    .map(|s| int(s))
    .sum();
    assert_eq!(ready_nodes, 149);
    let stats = sink.stats();
    assert_eq!(stats.points as usize, total);
    assert_eq!(stats.tracked_series, total);
}

#[tokio::test]
async fn series_carry_gke_probers_names_labels_resources_kinds_and_values() {
    let gcm = GcmStandIn::start().await;
    let sink = GcmSink::new(cfg(&gcm)).await.unwrap();
    timed(sink.push(snapshot(cluster(2, 3)), PushScope::All))
        .await
        .unwrap();
    assert!(gcm.errors().is_empty(), "{:?}", gcm.errors());
    let all = by_type(&gcm);
    let types: BTreeSet<&str> = all.keys().map(String::as_str).collect();
    let want: BTreeSet<String> = [
        "cluster/node_condition",
        "cluster/node_available",
        "cluster/addons_expected",
        "cluster/probe/addons_condition",
        "node/condition",
        "node/available",
        "addon/available",
        "addon/control_plane_available",
        "addon/restart",
    ]
    .iter()
    .map(|s| t(s))
    .collect();
    assert_eq!(types, want.iter().map(String::as_str).collect());

    let cluster_res = labels(&[
        ("project_id", "p1"),
        ("location", "europe-west1"),
        ("cluster_name", "c1"),
    ]);
    for s in gcm.series() {
        let kind = if s.metric_type.ends_with("addon/restart") {
            MetricKind::Cumulative
        } else {
            MetricKind::Gauge
        };
        assert_eq!((s.kind, s.value_type), (kind, ValueType::Int64), "{s:?}");
        let suffix = &s.metric_type[P.len()..];
        let (rtype, extra): (&str, &[&str]) = if suffix.starts_with("cluster/") {
            ("k8s_cluster", &[])
        } else if suffix == "addon/restart" {
            ("k8s_pod", &["namespace_name", "pod_name"])
        } else {
            ("k8s_node", &["node_name"])
        };
        assert_eq!(s.resource_type, rtype, "{suffix}");
        for (k, v) in &cluster_res {
            assert_eq!(s.resource_labels.get(k), Some(v), "{suffix}");
        }
        assert_eq!(s.resource_labels.len(), 3 + extra.len(), "{suffix}");
        // Label keys exactly as gke-prober writes them.
        let keys: Vec<&str> = s.metric_labels.keys().map(String::as_str).collect();
        let mut want_keys: Vec<&str> = match suffix {
            "cluster/node_condition" | "node/condition" => {
                vec!["nodepool", "zone", "type", "status"]
            }
            "cluster/node_available" => vec![
                "nodepool",
                "zone",
                "ready",
                "schedulable",
                "done_warming",
                "available",
            ],
            "node/available" => vec![
                "nodepool",
                "zone",
                "available",
                "ready",
                "scheduleable",
                "done_warming",
            ],
            "cluster/addons_expected" => vec!["addon", "version", "controller"],
            "cluster/probe/addons_condition" => vec!["name", "condition", "reason"],
            "addon/available" => vec![
                "nodepool",
                "zone",
                "addon",
                "version",
                "controller",
                "available",
            ],
            "addon/control_plane_available" => vec!["nodepool", "zone", "available"],
            "addon/restart" => vec!["container_name", "addon"],
            other => panic!("unexpected {other}"),
        };
        want_keys.sort();
        assert_eq!(keys, want_keys, "{suffix}");
        let p = &s.points[0];
        assert_eq!(s.points.len(), 1);
        if kind == MetricKind::Gauge {
            assert_eq!(
                p.start, None,
                "{suffix}: GAUGE points have only an end time"
            );
        } else {
            assert!(p.start.is_some_and(|st| st < p.end));
        }
    }

    let n0 = [("node_name", "node-000")];
    let n1 = [("node_name", "node-001")];
    // node/available: 1 with True/False flags; node-001 is not ready and cordoned.
    let a = find(&all, &t("node/available"), &n1, &[]);
    assert_eq!(a.len(), 1);
    assert_eq!(
        a[0].metric_labels,
        labels(&[
            ("nodepool", "pool-1"),
            ("zone", "zone-1"),
            ("available", "False"),
            ("ready", "False"),
            ("scheduleable", "False"),
            ("done_warming", "True"),
        ])
    );
    assert_eq!(int(a[0]), 1);
    let a = find(&all, &t("node/available"), &n0, &[("available", "True")]);
    assert_eq!((a.len(), int(a[0])), (1, 1));
    // node/condition: one per condition type, value 1.
    let c = find(&all, &t("node/condition"), &n1, &[("type", "Ready")]);
    assert_eq!(c[0].metric_labels["status"], "False");
    assert_eq!(find(&all, &t("node/condition"), &n0, &[]).len(), 3);
    // cluster/node_available counts nodes per combination.
    let c = find(
        &all,
        &t("cluster/node_available"),
        &[],
        &[("nodepool", "pool-0"), ("available", "True")],
    );
    assert_eq!((c.len(), int(c[0])), (1, 1));
    assert_eq!(c[0].metric_labels["schedulable"], "True");
    // Two Deployments of one addon version add up.
    let e = find(
        &all,
        &t("cluster/addons_expected"),
        &[],
        &[("addon", "kube-dns")],
    );
    assert_eq!(e.len(), 1);
    assert_eq!(
        (
            int(e[0]),
            e[0].metric_labels["version"].as_str(),
            e[0].metric_labels["controller"].as_str()
        ),
        (3, "1.22", "Deployment")
    );
    let e = find(
        &all,
        &t("cluster/addons_expected"),
        &[],
        &[("addon", "fluentbit"), ("controller", "DaemonSet")],
    );
    assert_eq!(int(e[0]), 2);
    // Every pod counts: kube-dns has 2 pods on node-000, one not ready.
    let d = find(&all, &t("addon/available"), &n0, &[("addon", "kube-dns")]);
    assert_eq!(d.len(), 1);
    assert_eq!(
        (int(d[0]), d[0].metric_labels["available"].as_str()),
        (2, "False")
    );
    assert_eq!(d[0].metric_labels["nodepool"], "pool-0");
    // Control plane: node-000 is available but kube-dns is not; node-001 is unavailable.
    for n in [n0, n1] {
        let c = find(&all, &t("addon/control_plane_available"), &n, &[]);
        assert_eq!(
            (c.len(), c[0].metric_labels["available"].as_str()),
            (1, "False")
        );
    }
    // Probes: metrics_server healthy, cluster_dns -> kube_dns, with our failure reason.
    let p = &all[&t("cluster/probe/addons_condition")];
    assert_eq!(p.len(), 2, "kubelet_healthz is not an addon probe");
    let ms = find(
        &all,
        &t("cluster/probe/addons_condition"),
        &[],
        &[("name", "metrics_server")],
    );
    assert_eq!(ms[0].metric_labels["condition"], "Healthy");
    assert!(!ms[0].metric_labels["reason"].is_empty());
    let dns = find(
        &all,
        &t("cluster/probe/addons_condition"),
        &[],
        &[("name", "kube_dns")],
    );
    assert_eq!(
        (
            dns[0].metric_labels["condition"].as_str(),
            dns[0].metric_labels["reason"].as_str(),
            int(dns[0])
        ),
        ("Unhealthy", "timeout", 1)
    );
    // Restarts per container, on the pod.
    let r = find(
        &all,
        &t("addon/restart"),
        &[
            ("namespace_name", "kube-system"),
            ("pod_name", "fluentbit-abcde"),
        ],
        &[("container_name", "fluentbit"), ("addon", "fluentbit")],
    );
    assert_eq!((r.len(), int(r[0])), (1, 3));
    let r = find(
        &all,
        &t("addon/restart"),
        &[],
        &[("container_name", "metrics")],
    );
    assert_eq!(int(r[0]), 0);
}

#[tokio::test]
async fn the_node_role_writes_only_its_own_node_and_no_cluster_series() {
    let gcm = GcmStandIn::start().await;
    let mut c = cfg(&gcm);
    c.own_node = Some("node-001".into());
    let sink = GcmSink::new(c).await.unwrap();
    let mut cs = cluster(3, 1);
    cs.restarts
        .push(restarts("fluentbit-xyz", "node-001", &[("fluentbit", 4)]));
    timed(sink.push(snapshot(cs), PushScope::All))
        .await
        .unwrap();
    let series = gcm.series();
    assert!(!series.is_empty());
    for s in &series {
        assert!(!s.metric_type.contains("/cluster/"), "{}", s.metric_type);
        if s.resource_type == "k8s_node" {
            assert_eq!(s.resource_labels["node_name"], "node-001");
        } else {
            assert_eq!(s.resource_labels["pod_name"], "fluentbit-xyz");
        }
    }
    // 3 conditions, availability, control plane, fluentbit, one restart series.
    assert_eq!(series.len(), 7);
}

#[tokio::test]
async fn unavailable_is_retried_with_backoff_until_it_succeeds() {
    let gcm = GcmStandIn::start().await;
    let sink = GcmSink::new(cfg(&gcm)).await.unwrap();
    gcm.fail_next(2, Code::Unavailable);
    let report = timed(sink.push(snapshot(cluster(2, 0)), PushScope::All))
        .await
        .unwrap();
    let writes = gcm.writes();
    assert_eq!(writes.len(), 3);
    assert_eq!(
        writes.iter().map(|w| w.code).collect::<Vec<_>>(),
        vec![Code::Unavailable, Code::Unavailable, Code::Ok]
    );
    assert_eq!(report.requests, 3);
    assert_eq!(report.points as usize, gcm.series().len());
    assert_eq!(sink.stats().retries, 2);
    assert!(sink.stats().failed_points.is_empty());
}

#[tokio::test]
async fn retries_stop_at_the_push_deadline_and_the_series_are_not_marked_sent() {
    let gcm = GcmStandIn::start().await;
    let mut c = cfg(&gcm);
    c.push_deadline = Duration::from_millis(400);
    let sink = GcmSink::new(c).await.unwrap();
    gcm.fail_next(1000, Code::Unavailable);
    let err = timed(sink.push(snapshot(cluster(2, 0)), PushScope::All))
        .await
        .unwrap_err();
    assert_eq!(err.reason, "unavailable");
    assert_eq!(err.sent.points, 0);
    assert!(err.sent.requests >= 2, "{err:?}");
    // The deadline, not the 1,000 failures, stopped the retries: a retry waits at least half
    // its backoff (20, 40, 80, then 100 ms), so 400 ms leave room for at most 9 retries (10
    // attempts) of each request, however fast or slow the machine. The last retry may be cut
    // short by the deadline (the stand-in then answers CANCELLED): the reason stays the
    // failure that made the sink retry.
    let writes = gcm.writes();
    let series: usize = writes.iter().map(|w| w.series).max().unwrap_or(0);
    assert!(series < 200, "one request (of {series} series), retried");
    assert!(
        writes.len() <= 10,
        "{} attempts within a 400 ms deadline: {err:?}",
        writes.len()
    );
    let lost = sink.stats().failed_points["unavailable"];
    assert!(lost > 10, "{lost}");
    assert!(
        err.message.contains(&format!("{lost} point(s) lost")),
        "{}",
        err.message
    );

    // Nothing was written, so nothing waits for the sampling period.
    gcm.lock().faults.clear();
    let report = timed(sink.push(snapshot(cluster(2, 0)), PushScope::All))
        .await
        .unwrap();
    assert_eq!(report.points, lost);
    assert_eq!(sink.stats().last_skipped, 0);
}

#[tokio::test]
async fn other_errors_fail_at_once() {
    let gcm = GcmStandIn::start().await;
    let sink = GcmSink::new(cfg(&gcm)).await.unwrap();
    gcm.fail_next(1, Code::PermissionDenied);
    let err = timed(sink.push(snapshot(cluster(2, 0)), PushScope::All))
        .await
        .unwrap_err();
    assert_eq!(err.reason, "permission_denied");
    assert_eq!((err.sent.points, err.sent.requests), (0, 1));
    assert_eq!(gcm.writes().len(), 1);
    assert_eq!(sink.stats().retries, 0);
}

#[tokio::test]
async fn a_partial_failure_is_counted_and_reported() {
    // A sink that ignores the sampling period meets the stand-in's rule: the series it wrote
    // a moment ago are refused, the new ones written.
    let gcm = GcmStandIn::start().await;
    let mut c = cfg(&gcm);
    c.min_sampling_period = Duration::ZERO;
    let sink = GcmSink::new(c).await.unwrap();
    let first = timed(sink.push(snapshot(cluster(2, 0)), PushScope::All))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    let err = timed(sink.push(snapshot(cluster(3, 0)), PushScope::All))
        .await
        .unwrap_err();
    assert_eq!(err.reason, "partial", "{err:?}");
    let w = gcm.writes();
    let second = &w[1];
    assert_eq!(second.code, Code::InvalidArgument);
    assert!(second.message.contains(TOO_FREQUENT), "{}", second.message);
    assert!(second.written > 0 && second.written < second.series);
    assert_eq!(err.sent.points as usize, second.written);
    let refused = (second.series - second.written) as u64;
    assert_eq!(sink.stats().failed_points["invalid_argument"], refused);
    assert!(
        err.message.contains(&format!("invalid_argument={refused}")),
        "{}",
        err.message
    );
    assert!(refused <= first.points);
}

#[tokio::test]
async fn a_fast_ticker_never_breaks_the_sampling_period() {
    // Long enough that the second push, right after the first, is within it however loaded
    // the machine is.
    let period = Duration::from_secs(5);
    let gcm = GcmStandIn::with_period(period).await;
    let mut c = cfg(&gcm);
    c.min_sampling_period = period;
    let sink = GcmSink::new(c).await.unwrap();
    let snap = || snapshot(cluster(4, 1));

    let first = timed(sink.push(snap(), PushScope::All)).await.unwrap();
    assert!(first.points > 20);
    // The next tick comes well within the period (a fast ticker): nothing goes out.
    let second = timed(sink.push(snap(), PushScope::All)).await.unwrap();
    assert_eq!((second.points, second.requests), (0, 0));
    assert_eq!(sink.stats().last_skipped, first.points);
    // Once the sink says every series may be written again (never before the period), all go.
    let wait = sink.ready_in();
    assert!(
        wait > Duration::ZERO && wait <= period + Duration::from_millis(1),
        "{wait:?}"
    );
    tokio::time::sleep(wait).await;
    let third = timed(sink.push(snap(), PushScope::All)).await.unwrap();
    assert_eq!(third.points, first.points);
    assert_eq!(sink.stats().last_skipped, 0);
    assert!(gcm.errors().is_empty(), "{:?}", gcm.errors());
    assert!(gcm.series().iter().all(|s| s.points.len() == 2));
}

#[tokio::test]
async fn at_the_default_period_a_second_push_soon_after_sends_nothing() {
    let gcm = GcmStandIn::start().await;
    let sink = GcmSink::new(cfg(&gcm)).await.unwrap();
    assert_eq!(sink.config().min_sampling_period, Duration::from_secs(10));
    let first = timed(sink.push(snapshot(cluster(3, 0)), PushScope::All))
        .await
        .unwrap();
    // A new node's series are new: they go out at once; the rest wait.
    let second = timed(sink.push(snapshot(cluster(4, 0)), PushScope::All))
        .await
        .unwrap();
    assert!(
        second.points > 0 && second.points < first.points,
        "{second:?}"
    );
    let stats = sink.stats();
    assert_eq!(
        stats.last_skipped + second.points,
        gcm.series().len() as u64
    );
    assert!(stats.last_skipped > 0);
    assert!(gcm.errors().is_empty(), "{:?}", gcm.errors());
    assert!(gcm.series().iter().all(|s| s.points.len() == 1));
}

#[tokio::test]
async fn restarts_are_cumulative_with_a_stable_start_time() {
    let period = Duration::from_secs(2);
    let gcm = GcmStandIn::with_period(period).await;
    let mut c = cfg(&gcm);
    c.min_sampling_period = period;
    let sink = GcmSink::new(c).await.unwrap();
    timed(sink.push(snapshot(cluster(1, 3)), PushScope::All))
        .await
        .unwrap();
    // Until every series may be written again (the sink knows when: no guessed margin).
    tokio::time::sleep(sink.ready_in()).await;
    let mut cs = cluster(1, 5);
    cs.restarts
        .push(restarts("fluentbit-new", "node-000", &[("fluentbit", 1)]));
    timed(sink.push(snapshot(cs), PushScope::All))
        .await
        .unwrap();
    assert!(gcm.errors().is_empty(), "{:?}", gcm.errors());

    let all = by_type(&gcm);
    let r = find(
        &all,
        &t("addon/restart"),
        &[("pod_name", "fluentbit-abcde")],
        &[("container_name", "fluentbit")],
    );
    let pts = &r[0].points;
    assert_eq!(pts.len(), 2);
    assert_eq!(
        pts.iter().map(|p| p.int64).collect::<Vec<_>>(),
        [Some(3), Some(5)]
    );
    let start = pts[0].start.unwrap();
    assert_eq!(pts[1].start, Some(start), "the start time is stable");
    assert!(start < pts[0].end && pts[0].end < pts[1].end);
    // A counter first seen later starts after the push that did not see it.
    let n = find(
        &all,
        &t("addon/restart"),
        &[("pod_name", "fluentbit-new")],
        &[],
    );
    let p = &n[0].points[0];
    assert!(p.start.unwrap() > start && p.start.unwrap() < p.end);
    assert!(p.start.unwrap() >= pts[0].end);
}

#[tokio::test]
async fn a_counter_that_goes_down_gets_a_new_start_time() {
    let period = Duration::from_secs(2);
    let gcm = GcmStandIn::with_period(period).await;
    let mut c = cfg(&gcm);
    c.min_sampling_period = period;
    let sink = GcmSink::new(c).await.unwrap();
    timed(sink.push(snapshot(cluster(1, 7)), PushScope::All))
        .await
        .unwrap();
    // Until every series may be written again (the sink knows when: no guessed margin).
    tokio::time::sleep(sink.ready_in()).await;
    timed(sink.push(snapshot(cluster(1, 1)), PushScope::All))
        .await
        .unwrap();
    assert!(gcm.errors().is_empty(), "{:?}", gcm.errors());
    let all = by_type(&gcm);
    let r = find(
        &all,
        &t("addon/restart"),
        &[],
        &[("container_name", "fluentbit")],
    );
    let pts = &r[0].points;
    assert_eq!(pts.len(), 2);
    assert!(pts[1].start.unwrap() > pts[0].end);
    assert_eq!(pts[1].int64, Some(1));
}

#[tokio::test]
async fn instance_only_pushes_nothing() {
    let gcm = GcmStandIn::start().await;
    let sink = GcmSink::new(cfg(&gcm)).await.unwrap();
    let report = timed(sink.push(snapshot(cluster(5, 0)), PushScope::InstanceOnly))
        .await
        .unwrap();
    assert_eq!((report.points, report.requests), (0, 0));
    assert!(gcm.calls().is_empty());
    assert_eq!(sink.stats().tracked_series, 0);
}

#[tokio::test]
async fn a_missing_project_is_a_clear_error_and_sends_nothing() {
    let gcm = GcmStandIn::start().await;
    let sink = GcmSink::new(cfg(&gcm)).await.unwrap();
    let mut s = (*snapshot(cluster(1, 0))).clone();
    s.cluster.project.clear();
    let err = timed(sink.push(Arc::new(s), PushScope::All))
        .await
        .unwrap_err();
    assert_eq!(err.reason, "config");
    assert!(err.message.contains("project"), "{}", err.message);
    assert!(gcm.calls().is_empty());

    // Configured values win over the snapshot's.
    let mut c = cfg(&gcm);
    c.project = Some("other".into());
    c.cluster = Some("c9".into());
    let sink = GcmSink::new(c).await.unwrap();
    timed(sink.push(snapshot(cluster(1, 0)), PushScope::All))
        .await
        .unwrap();
    assert!(gcm.series().iter().all(|s| {
        s.resource_labels["project_id"] == "other" && s.resource_labels["cluster_name"] == "c9"
    }));
}

#[tokio::test]
async fn bad_config_is_refused_up_front() {
    for c in [
        GcmConfig {
            prefix: String::new(),
            ..Default::default()
        },
        GcmConfig {
            prefix: "kube-prober/".into(),
            ..Default::default()
        },
        GcmConfig {
            max_series_per_request: 201,
            ..Default::default()
        },
        GcmConfig {
            client: GcmClientConfig {
                endpoint: Some("monitoring.googleapis.com".into()),
                ..Default::default()
            },
            ..Default::default()
        },
    ] {
        let err = GcmSink::new(c).await.unwrap_err();
        assert!(matches!(err, kube_prober::Error::Config { .. }), "{err}");
    }
}

#[tokio::test]
async fn descriptors_are_listed_and_deleted_under_the_prefix_only() {
    let gcm = GcmStandIn::start().await;
    let c = cfg(&gcm);
    let sink = GcmSink::new(c.clone()).await.unwrap();
    timed(sink.push(snapshot(cluster(2, 1)), PushScope::All))
        .await
        .unwrap();
    let others = [
        "workload.googleapis.com/kube-prober-old/cluster/node_condition",
        "workload.googleapis.com/other/node/condition",
        "custom.googleapis.com/kube-prober/node/condition",
    ];
    for o in others {
        gcm.add_descriptor(o, MetricKind::Gauge, ValueType::Int64);
    }
    gcm.lock().max_page = 2;

    let listed = timed(list_descriptors(&c.client, "p1", "kube-prober"))
        .await
        .unwrap();
    let ours: Vec<String> = gcm
        .descriptor_types()
        .into_iter()
        .filter(|t| t.starts_with(P))
        .collect();
    assert_eq!(listed.len(), 9);
    assert_eq!(listed, ours);
    let pages = gcm
        .calls()
        .iter()
        .filter(|c| c.method == "ListMetricDescriptors")
        .count();
    assert_eq!(pages, 5, "9 descriptors, 2 per page");

    let deleted = timed(delete_descriptors(&c.client, "p1", "kube-prober"))
        .await
        .unwrap();
    assert_eq!(deleted, ours);
    assert_eq!(gcm.descriptor_types(), {
        let mut o: Vec<String> = others.iter().map(|s| s.to_string()).collect();
        o.sort();
        o
    });
    assert!(gcm.series().is_empty(), "their data went with them");
    assert!(
        timed(list_descriptors(&c.client, "p1", "kube-prober"))
            .await
            .unwrap()
            .is_empty()
    );
    assert!(list_descriptors(&c.client, "p1", "").await.is_err());
    // A failure names itself.
    gcm.fail_next(1, Code::PermissionDenied);
    let err = list_descriptors(&c.client, "p1", "kube-prober")
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("permission_denied"), "{err}");
}

/// The stand-in's own rules, through the real client: what makes it a faithful peer.
#[tokio::test]
async fn the_stand_in_enforces_cloud_monitorings_rules() {
    crypto();
    let gcm = GcmStandIn::start().await;
    let c = cfg(&gcm);
    let mut client = kube_prober::outputs::gcm::connect(&c.client).await.unwrap();
    let now = SystemTime::now();
    let ts = |metric: &str, node: &str, kind: MetricKind, start: Option<SystemTime>| {
        let stamp = |t: SystemTime| {
            let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap();
            prost_types::Timestamp {
                seconds: d.as_secs() as i64,
                nanos: d.subsec_nanos() as i32,
            }
        };
        TimeSeries {
            metric: Some(Metric {
                r#type: t(metric),
                labels: Default::default(),
            }),
            resource: Some(MonitoredResource {
                r#type: "k8s_node".into(),
                labels: [
                    ("project_id", "p1"),
                    ("location", "l"),
                    ("cluster_name", "c"),
                    ("node_name", node),
                ]
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            }),
            metric_kind: kind as i32,
            value_type: ValueType::Int64 as i32,
            points: vec![Point {
                interval: Some(TimeInterval {
                    end_time: Some(stamp(now)),
                    start_time: start.map(stamp),
                }),
                value: Some(TypedValue {
                    value: Some(typed_value::Value::Int64Value(1)),
                }),
            }],
            ..Default::default()
        }
    };
    let req = |series: Vec<TimeSeries>| CreateTimeSeriesRequest {
        name: "projects/p1".into(),
        time_series: series,
    };

    // More than 200 series: refused whole.
    let many: Vec<_> = (0..201)
        .map(|i| ts("x", &format!("n{i}"), MetricKind::Gauge, None))
        .collect();
    let e = client.create_time_series(req(many)).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(gcm.series().is_empty());

    // Kind fixed by the first write; bad resources; CUMULATIVE without a start: each refused,
    // the valid series of the request written, with a summary.
    client
        .create_time_series(req(vec![ts("x", "a", MetricKind::Gauge, None)]))
        .await
        .unwrap();
    let mut unknown = ts("y", "a", MetricKind::Gauge, None);
    unknown.resource.as_mut().unwrap().r#type = "k8s_thing".into();
    let mut missing = ts("y", "b", MetricKind::Gauge, None);
    missing
        .resource
        .as_mut()
        .unwrap()
        .labels
        .remove("cluster_name");
    let e = client
        .create_time_series(req(vec![
            ts(
                "x",
                "b",
                MetricKind::Cumulative,
                Some(now - Duration::from_secs(1)),
            ),
            unknown,
            missing,
            ts("z", "a", MetricKind::Cumulative, None),
            ts("w", "a", MetricKind::Gauge, None),
            ts("x", "a", MetricKind::Gauge, None),
        ]))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    let sum = summary_of(&e).expect("a CreateTimeSeriesSummary in the details");
    assert_eq!((sum.total_point_count, sum.success_point_count), (6, 1));
    assert_eq!(sum.errors.iter().map(|e| e.point_count).sum::<i32>(), 5);
    assert!(
        sum.errors
            .iter()
            .any(|e| e.status.as_ref().is_some_and(|s| s.message == TOO_FREQUENT))
    );
    assert_eq!(gcm.series_of(&t("w")).len(), 1);
    assert_eq!(gcm.series_of(&t("x")).len(), 1);
}

/// Run by [`without_credentials_pushes_fail_with_reason_credentials`] in a child process
/// whose environment has no credentials and an unreachable metadata server.
#[tokio::test]
#[ignore = "runs in a child process with a prepared environment"]
async fn child_application_default_credentials() {
    crypto();
    if let Ok(path) = std::env::var("GOOGLE_APPLICATION_CREDENTIALS") {
        // A broken key file is an error when the sink is made.
        assert!(!path.is_empty());
        let gcm = GcmStandIn::start().await;
        let mut c = cfg(&gcm);
        c.client.anonymous = false;
        let err = GcmSink::new(c).await.unwrap_err().to_string();
        assert!(err.contains("credentials"), "{err}");
        println!("CHILD-OK-KEYFILE {err}");
        return;
    }
    let gcm = GcmStandIn::start().await;
    let mut c = cfg(&gcm);
    c.client.anonymous = false;
    c.push_deadline = Duration::from_millis(1500);
    let sink = GcmSink::new(c).await.unwrap();
    let err = timed(sink.push(snapshot(cluster(1, 0)), PushScope::All))
        .await
        .unwrap_err();
    assert_eq!(err.reason, "credentials", "{err:?}");
    assert_eq!(err.sent.points, 0);
    assert!(gcm.calls().is_empty(), "no token, no request");
    assert!(sink.stats().failed_points["credentials"] > 0);
    println!("CHILD-OK-METADATA {}", err.message);
}

fn run_child(env: &[(&str, &str)]) -> String {
    let home = tempfile::tempdir().unwrap();
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        &support::test_name(module_path!(), "child_application_default_credentials"),
        "--ignored",
        "--nocapture",
    ])
    .env("HOME", home.path())
    .env("CLOUDSDK_CONFIG", home.path())
    // A closed loopback port: the metadata server does not answer.
    .env("GCE_METADATA_HOST", "127.0.0.1:9")
    .env("GCE_METADATA_ROOT", "127.0.0.1:9")
    .env_remove("GOOGLE_APPLICATION_CREDENTIALS");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = support::owned::output(cmd, None).unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn without_credentials_pushes_fail_with_reason_credentials() {
    let out = run_child(&[]);
    assert!(out.contains("CHILD-OK-METADATA"), "{out}");
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("key.json");
    std::fs::write(&key, "{ not json").unwrap();
    let out = run_child(&[("GOOGLE_APPLICATION_CREDENTIALS", key.to_str().unwrap())]);
    assert!(out.contains("CHILD-OK-KEYFILE"), "{out}");
}

/// A snapshot with `fluentbit` at `restarts`, as tick `tick`, published for the push runner.
fn published(tick: u64, restarts: u32) -> Arc<kube_prober::outputs::published::Published> {
    let mut s = (*snapshot(cluster(2, restarts))).clone();
    s.tick = tick;
    Arc::new(kube_prober::outputs::published::Published::render(
        Arc::new(s),
        "metrics_server",
    ))
}

/// The newest value of fluentbit's restart series, as the stand-in stored it.
fn newest_restarts(gcm: &GcmStandIn) -> Option<i64> {
    let all = by_type(gcm);
    let r = find(
        &all,
        &t("addon/restart"),
        &[("pod_name", "fluentbit-abcde")],
        &[("container_name", "fluentbit")],
    );
    r.first().map(|s| int(s))
}

/// Runs a GCM sink in the push runner (ticks every 300 ms, period `period`), waits for the first
/// write, publishes restarts 7 and stops it with `final_push` to spare. Returns the stand-in and
/// how long the runner took to stop.
async fn stop_soon_after_a_push(
    period: Duration,
    final_push: Duration,
) -> (GcmStandIn, Duration, kube_prober::model::SinkStatus) {
    use kube_prober::hub::{Provider, Store};
    use kube_prober::outputs::push::{SinkSchedule, run_sink};
    let gcm = GcmStandIn::with_period(period).await;
    let mut c = cfg(&gcm);
    c.min_sampling_period = period;
    let sink = Arc::new(GcmSink::new(c).await.unwrap());
    let store = Arc::new(Store::new());
    let (tx, rx) = tokio::sync::watch::channel(published(1, 2));
    let cancel = tokio_util::sync::CancellationToken::new();
    let task = tokio::spawn(run_sink(
        sink,
        SinkSchedule {
            interval: Duration::from_millis(300),
            timeout: Duration::from_secs(5),
            final_push,
        },
        rx,
        store.clone() as Arc<dyn Provider>,
        None,
        cancel.clone(),
    ));
    timed(async {
        while newest_restarts(&gcm).is_none() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert_eq!(newest_restarts(&gcm), Some(2));
    // Newer values, then SIGTERM well within the sampling period of the first write.
    tx.send_replace(published(2, 7));
    let stopping = std::time::Instant::now();
    cancel.cancel();
    timed(task).await.unwrap();
    let took = stopping.elapsed();
    let status = store.snapshot(SystemTime::now()).sinks["gcm"].clone();
    (gcm, took, status)
}

/// SIGTERM less than the sampling period after a push: the final push waits until the series
/// may be written again (the deadline allows it) and delivers the newest values. Before, it
/// sent nothing: every series had been written too recently.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_final_push_waits_for_the_sampling_period_and_delivers_the_newest_values() {
    // The runner's own deadline (10 s) bounds the stop: a final push cut by it would not
    // deliver 7, or would count a failure.
    let (gcm, _, status) =
        stop_soon_after_a_push(Duration::from_millis(1500), Duration::from_secs(10)).await;
    assert_eq!(newest_restarts(&gcm), Some(7), "the newest value went out");
    assert!(gcm.errors().is_empty(), "{:?}", gcm.errors());
    assert!(status.failures.is_empty(), "{status:?}");
}

/// When waiting would not leave time for the push within the deadline, the runner does not
/// wait: it pushes at once (series written too recently keep their previous point) and stops
/// within its bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_final_push_that_cannot_wait_stops_within_its_deadline() {
    let period = Duration::from_secs(20);
    let (gcm, took, _) = stop_soon_after_a_push(period, Duration::from_millis(600)).await;
    // It did not wait for the period: that would have taken the period and sent 7.
    assert!(took < period, "{took:?}");
    assert_eq!(newest_restarts(&gcm), Some(2), "the previous point stays");
    assert!(gcm.errors().is_empty(), "{:?}", gcm.errors());
}

/// An address nothing listens on (yet).
fn free_addr() -> std::net::SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

/// Connection attempts that never reached Cloud Monitoring are not requests: a push to a
/// closed port fails as `unavailable` with `requests` 0 (it counted every attempt before).
/// When the server comes up on that port, the next push counts exactly the requests it answered,
/// a retried UNAVAILABLE from the server included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_count_only_what_the_server_answered() {
    crypto();
    let addr = free_addr();
    let mut c = GcmConfig {
        client: GcmClientConfig {
            endpoint: Some(format!("http://{addr}")),
            anonymous: true,
            ..Default::default()
        },
        retry_initial: Duration::from_millis(20),
        retry_max: Duration::from_millis(50),
        push_deadline: Duration::from_millis(500),
        ..Default::default()
    };
    c.min_sampling_period = Duration::from_millis(100);
    let sink = GcmSink::new(c).await.unwrap();
    let err = timed(sink.push(snapshot(cluster(2, 0)), PushScope::All))
        .await
        .unwrap_err();
    // The last try may be cut by the push deadline instead (a retry that lands on it).
    assert!(
        ["unavailable", "deadline_exceeded"].contains(&err.reason.as_str()),
        "{err:?}"
    );
    assert_eq!(
        err.sent,
        kube_prober::outputs::PushReport::default(),
        "{err:?}"
    );
    assert!(sink.stats().retries >= 1, "the attempts were retried");
    assert_eq!(sink.stats().requests, 0);

    let gcm = GcmStandIn::with_period_on(addr, Duration::from_millis(100)).await;
    gcm.fail_next(1, Code::Unavailable);
    let report = timed(async {
        loop {
            match sink.push(snapshot(cluster(2, 0)), PushScope::All).await {
                Ok(r) => break r,
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    })
    .await;
    assert_eq!(report.requests as usize, gcm.calls().len(), "{report:?}");
    assert_eq!(
        report.requests, 2,
        "one UNAVAILABLE from the server, then OK"
    );
    assert_eq!(sink.stats().requests, 2);
}
