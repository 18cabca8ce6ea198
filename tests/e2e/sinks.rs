//! The binary with push outputs: Cloud Monitoring from the cluster role (leader election on, as
//! by default), the final push on SIGTERM, the descriptors subcommand, and start-up errors.

use support::apiserver;
use support::gcm as gcm_support;
use support::otlp as otlp_support;

use std::time::{Duration, Instant};

use gcm_support::GcmStandIn;
use k8s_openapi::api::coordination::v1::Lease;
use otlp_support::OtlpReceiver;
use std::time::SystemTime;
use support::{Prober, run_binary, wait_ready};

fn crypto() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
}

/// Waits (bounded) until `f` holds.
async fn eventually(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_role_pushes_gke_prober_series_to_cloud_monitoring_and_flushes_on_sigterm() {
    crypto();
    let api = apiserver::start().await;
    api.generate(3, 6);
    let gcm = GcmStandIn::start().await;
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    api.write_kubeconfig(&kc).unwrap();
    let p = Prober::start_with_env(
        &[
            "--role",
            "cluster",
            "--cluster-name",
            "c1",
            "--sink",
            "gcm",
            "--gcm-project",
            "p1",
            "--gcm-location",
            "us-central1-a",
            "--gcm-endpoint",
            &gcm.url,
            "--gcm-anonymous",
            // No tick of its own during the test: what arrives is the final push.
            "--sink-interval",
            "10m",
            "--tick-interval",
            "1s",
            "--disable-probes",
            "cluster_dns,metrics_server,apiserver_readyz",
        ],
        &[("KUBECONFIG", kc.to_str().unwrap())],
    );
    wait_ready(&p).await;
    // Leader election is on by default in the cluster role with a sink: the Lease names us.
    eventually("the Lease to be held", Duration::from_secs(10), || {
        api.get::<Lease>("default", "kube-prober")
            .and_then(|l| l.spec?.holder_identity)
            .is_some()
    })
    .await;
    assert!(gcm.writes().is_empty(), "nothing before the first interval");

    assert_eq!(p.terminate(), 0);
    let writes = gcm.writes();
    assert!(!writes.is_empty(), "SIGTERM made a final push");
    assert!(gcm.errors().is_empty(), "{:?}", gcm.errors());
    let conds = gcm.series_of("workload.googleapis.com/kube-prober/cluster/node_condition");
    assert!(!conds.is_empty());
    for s in &conds {
        assert_eq!(s.resource_type, "k8s_cluster");
        assert_eq!(s.resource_labels["project_id"], "p1");
        assert_eq!(s.resource_labels["location"], "us-central1-a");
        assert_eq!(s.resource_labels["cluster_name"], "c1");
    }
    let ready: i64 = conds
        .iter()
        .filter(|s| s.metric_labels["type"] == "Ready" && s.metric_labels["status"] == "True")
        .map(|s| s.points[0].int64.unwrap())
        .sum();
    assert_eq!(ready, 3, "three Ready nodes");
    let per_node = gcm.series_of("workload.googleapis.com/kube-prober/node/available");
    assert_eq!(per_node.len(), 3);
    assert!(per_node.iter().all(|s| s.resource_type == "k8s_node"));
    // The Lease was released on the way out.
    let lease = api.get::<Lease>("default", "kube-prober").unwrap();
    assert_eq!(lease.spec.unwrap().holder_identity, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn descriptors_subcommand_lists_and_deletes_only_our_prefix() {
    crypto();
    let gcm = GcmStandIn::start().await;
    use gcloud_sdk::google::api::metric_descriptor::{MetricKind, ValueType};
    for t in [
        "workload.googleapis.com/kube-prober/node/condition",
        "workload.googleapis.com/kube-prober/cluster/node_available",
        "workload.googleapis.com/kube-prober-old/node/condition",
        "workload.googleapis.com/other/x",
    ] {
        gcm.add_descriptor(t, MetricKind::Gauge, ValueType::Int64);
    }
    let url = gcm.url.clone();
    let run = move |args: Vec<&'static str>| {
        let url = url.clone();
        std::thread::spawn(move || {
            let mut all = vec!["--gcm-endpoint", url.as_str(), "--gcm-anonymous=true"];
            all.extend(args);
            let out = std::process::Command::new(env!("CARGO_BIN_EXE_kube-prober"))
                .args(&all)
                .env("HOME", "/nonexistent")
                .output()
                .unwrap();
            (
                out.status.code(),
                String::from_utf8_lossy(&out.stdout).into_owned(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        })
    };
    let (code, out, err) = tokio::task::spawn_blocking({
        let h = run(vec!["gcm", "descriptors", "list", "--project", "p1"]);
        move || h.join().unwrap()
    })
    .await
    .unwrap();
    assert_eq!(code, Some(0), "{err}");
    let mut listed: Vec<&str> = out.lines().collect();
    listed.sort();
    assert_eq!(
        listed,
        [
            "workload.googleapis.com/kube-prober/cluster/node_available",
            "workload.googleapis.com/kube-prober/node/condition",
        ]
    );
    let (code, out, err) = tokio::task::spawn_blocking({
        let h = run(vec!["gcm", "descriptors", "delete", "--project", "p1"]);
        move || h.join().unwrap()
    })
    .await
    .unwrap();
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out.lines().count(), 2, "{out}");
    let mut left = gcm.descriptor_types();
    left.sort();
    assert_eq!(
        left,
        [
            "workload.googleapis.com/kube-prober-old/node/condition",
            "workload.googleapis.com/other/x",
        ]
    );
}

#[test]
fn a_cloud_monitoring_sink_without_project_or_location_is_a_start_error() {
    // Not on GCE (no metadata server): the project must be given.
    let (code, err) = run_binary(
        &["--role", "host", "--listen", "127.0.0.1:0", "--sink", "gcm"],
        &[],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--gcm-project"), "{err}");
    let (code, err) = run_binary(
        &[
            "--role",
            "host",
            "--listen",
            "127.0.0.1:0",
            "--sink",
            "gcm",
            "--gcm-project",
            "p1",
        ],
        &[],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--gcm-location"), "{err}");
    let (code, err) = run_binary(&["--sink", "kafka"], &[]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("unknown sink"), "{err}");
}

/// One push as the receiver got it: who sent it, when its data was collected, and whether it
/// carried cluster-level series.
#[derive(Debug)]
struct Push {
    instance: String,
    at_unix_nanos: u64,
    cluster_level: bool,
}

fn pushes(rx: &OtlpReceiver) -> Vec<Push> {
    let mut out = Vec::new();
    for r in rx.received() {
        for rm in &r.request.resource_metrics {
            let instance = rm
                .resource
                .iter()
                .flat_map(|res| &res.attributes)
                .find(|kv| kv.key == "service.instance.id")
                .and_then(|kv| kv.value.as_ref())
                .and_then(|v| match &v.value {
                    Some(
                        opentelemetry_proto::tonic::common::v1::any_value::Value::StringValue(s),
                    ) => Some(s.clone()),
                    _ => None,
                })
                .unwrap_or_default();
            let metrics: Vec<_> = rm.scope_metrics.iter().flat_map(|s| &s.metrics).collect();
            let cluster_level = metrics
                .iter()
                .any(|m| m.name == "kube_prober.cluster.nodes");
            use opentelemetry_proto::tonic::metrics::v1::metric::Data;
            let at_unix_nanos = metrics
                .iter()
                .filter_map(|m| match &m.data {
                    Some(Data::Gauge(g)) => g.data_points.first().map(|p| p.time_unix_nano),
                    Some(Data::Sum(s)) => s.data_points.first().map(|p| p.time_unix_nano),
                    _ => None,
                })
                .max()
                .unwrap_or(0);
            out.push(Push {
                instance,
                at_unix_nanos,
                cluster_level,
            });
        }
    }
    out.sort_by_key(|p| p.at_unix_nanos);
    out
}

fn unix_nanos(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_one_pushes_cluster_series_and_the_other_takes_over_when_it_dies() {
    crypto();
    let api = apiserver::start().await;
    api.generate(2, 4);
    let rx = OtlpReceiver::start().await;
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    api.write_kubeconfig(&kc).unwrap();
    let endpoint = rx.grpc_endpoint();
    let start = |id: &str| {
        Prober::start_with_env(
            &[
                "--role",
                "cluster",
                "--sink",
                "otlp",
                "--otlp-endpoint",
                &endpoint,
                "--sink-interval",
                "1s",
                "--tick-interval",
                "1s",
                "--leader-elect-lease-duration",
                "3s",
                "--leader-elect-renew-deadline",
                "2s",
                "--leader-elect-retry-period",
                "500ms",
                "--leader-elect-identity",
                id,
                "--disable-probes",
                "cluster_dns,metrics_server,apiserver_readyz",
            ],
            &[
                ("KUBECONFIG", kc.to_str().unwrap()),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ],
        )
    };
    let holder = || {
        api.get::<Lease>("default", "kube-prober")
            .and_then(|l| l.spec?.holder_identity)
    };
    let mut a = start("replica-a");
    wait_ready(&a).await;
    eventually(
        "replica-a to hold the Lease",
        Duration::from_secs(10),
        || holder().as_deref() == Some("replica-a"),
    )
    .await;
    let b = start("replica-b");
    wait_ready(&b).await;
    // Both push; only the holder's pushes carry cluster-level series.
    eventually("pushes from both replicas", Duration::from_secs(15), || {
        let p = pushes(&rx);
        p.iter()
            .any(|p| p.instance == "replica-a" && p.cluster_level)
            && p.iter().filter(|p| p.instance == "replica-b").count() >= 2
    })
    .await;
    assert!(
        pushes(&rx)
            .iter()
            .all(|p| p.instance == "replica-a" || !p.cluster_level),
        "the follower pushed cluster-level series"
    );
    // Each replica says on /metrics whether it leads.
    let (_, ma) = support::get(&a.url("/metrics")).await;
    let (_, mb) = support::get(&b.url("/metrics")).await;
    assert!(
        ma.contains("kube_prober_leader{lease=\"default/kube-prober\"} 1\n"),
        "{ma}"
    );
    assert!(ma.contains("kube_prober_leader_acquired_total{lease=\"default/kube-prober\"} 1\n"));
    assert!(
        mb.contains("kube_prober_leader{lease=\"default/kube-prober\"} 0\n"),
        "{mb}"
    );

    // The leader dies without a word: the follower takes over once the Lease runs out.
    let killed_at = SystemTime::now();
    a.child.kill().unwrap();
    let _ = a.child.wait();
    eventually(
        "replica-b to push cluster-level series",
        Duration::from_secs(15),
        || {
            pushes(&rx)
                .iter()
                .any(|p| p.instance == "replica-b" && p.cluster_level)
        },
    )
    .await;
    let all = pushes(&rx);
    let first_b = all
        .iter()
        .find(|p| p.instance == "replica-b" && p.cluster_level)
        .unwrap();
    let last_a = all
        .iter()
        .rev()
        .find(|p| p.instance == "replica-a" && p.cluster_level)
        .unwrap();
    assert!(
        last_a.at_unix_nanos < first_b.at_unix_nanos,
        "two pushers at once: {all:?}"
    );
    assert!(last_a.at_unix_nanos <= unix_nanos(killed_at));
    let takeover = Duration::from_nanos(first_b.at_unix_nanos - unix_nanos(killed_at));
    // Lease 3 s (+ rounding) + a retry period + a push interval, with slack for a busy machine.
    assert!(
        takeover < Duration::from_secs(8),
        "takeover took {takeover:?}"
    );
    assert!(
        takeover >= Duration::from_secs(2),
        "took over before the Lease could have expired: {takeover:?}"
    );
    assert_eq!(holder().as_deref(), Some("replica-b"));
    assert_eq!(b.terminate(), 0);
}
