//! The push outputs under a dead, refusing, slow or partly rejecting receiver, through the push
//! runner (`run_sink`) with the real sinks: OTLP over gRPC and HTTP/protobuf against the OTLP
//! stand-in, Cloud Monitoring against its stand-in. Every phase pushes one fixed snapshot of
//! `n` points, so that every point of every tick is accounted for exactly: accepted
//! (`kube_prober_sink_points_total`) or lost by reason (`kube_prober_sink_points_dropped_total`);
//! each push makes one attempt and no more (nothing queued, nothing retried across pushes); and
//! after the receiver is back every push delivers exactly one tick's points, never a backlog.

use support::gcm as gcm_support;
use support::otlp as otlp_support;
use support::push;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use gcloud_sdk::google::api::metric_descriptor::MetricKind;
use gcm_support::GcmStandIn;
use kube_prober::model::SinkStatus;
use kube_prober::outputs::gcm::{GcmClientConfig, GcmConfig, GcmSink};
use kube_prober::outputs::otlp::{OtlpBounds, OtlpOptions, OtlpResource, OtlpSink};
use kube_prober::outputs::published::Published;
use kube_prober::outputs::push::SinkSchedule;
use kube_prober::outputs::{PushScope, Sink};
use otlp_support::{Failure, OtlpReceiver, points_of};

const GRPC: &str = "grpc";
const HTTP: &str = "http/protobuf";
/// Pushes per phase.
const PUSHES: u64 = 3;

/// Every point of every tick is lost for `reason` (skipped ticks for theirs): none accepted.
fn all_lost(what: &str, st: &SinkStatus, n: u64, reason: &str) {
    assert!(st.pushes >= PUSHES, "{what}: {st:?}");
    assert_eq!(st.points, 0, "{what}: nothing accepted: {st:?}");
    let mut want = only_skipped(st, n);
    want.insert(reason.to_string(), st.pushes * n);
    assert_eq!(st.dropped, want, "{what}: {st:?}");
    assert!(st.last_success.is_none(), "{what}: {st:?}");
}

/// Points lost only to skipped ticks (a push that outlasted its interval on a busy machine).
fn only_skipped(st: &SinkStatus, n: u64) -> BTreeMap<String, u64> {
    let mut want = BTreeMap::new();
    if st.skipped > 0 {
        want.insert("tick_skipped".to_string(), st.skipped * n);
    }
    want
}

fn otlp_sink(protocol: &str, endpoint: String) -> Arc<OtlpSink> {
    let config = OtlpOptions {
        otlp_protocol: Some(protocol.into()),
        otlp_endpoint: Some(endpoint),
        // Several requests per push, so that a partial success is counted per request.
        otlp_max_points_per_request: Some(40),
        ..Default::default()
    }
    .resolve_with(
        OtlpBounds {
            timeout: Some(Duration::from_secs(1)),
            max_response_bytes: None,
        },
        &|_| None,
    )
    .expect("config");
    Arc::new(OtlpSink::new(config, &OtlpResource::default()).expect("sink"))
}

fn endpoint(protocol: &str, grpc: std::net::SocketAddr, http: std::net::SocketAddr) -> String {
    if protocol == GRPC {
        format!("http://{grpc}")
    } else {
        format!("http://{http}/v1/metrics")
    }
}

/// The points of one push of `published` to a healthy receiver.
async fn otlp_points_per_push(protocol: &str, published: &Arc<Published>) -> u64 {
    let rx = OtlpReceiver::start().await;
    let sink = otlp_sink(protocol, endpoint(protocol, rx.grpc_addr, rx.http_addr));
    let report = sink
        .push(published.snapshot.clone(), PushScope::All)
        .await
        .expect("a healthy receiver");
    let received: u64 = rx.received().iter().map(|r| points_of(&r.request)).sum();
    assert_eq!(report.points, received);
    assert!(received > 20, "several requests' worth: {received}");
    received
}

async fn check_otlp(protocol: &str) {
    let published = push::fixture(4);
    let n = otlp_points_per_push(protocol, &published).await;
    let (grpc, http) = (push::free_addr(), push::free_addr());
    let sink = otlp_sink(protocol, endpoint(protocol, grpc, http));
    let schedule = SinkSchedule {
        interval: Duration::from_millis(1100),
        timeout: Duration::from_secs(3),
        final_push: Duration::from_secs(4),
    };

    // Dead: nothing listens. gRPC reports the refused connection as UNAVAILABLE.
    let st = push::run(&sink, &published, schedule, PUSHES).await;
    let dead = if protocol == GRPC {
        "unavailable"
    } else {
        "transport"
    };
    all_lost("dead", &st, n, dead);
    assert_eq!(st.requests, 0, "no request reached a receiver: {st:?}");

    // Refusing: every request answered with a permanent error; one request per push.
    let rx = OtlpReceiver::start_on(grpc, http).await;
    rx.fail_next_with(1_000_000, Failure::Refused);
    let st = push::run(&sink, &published, schedule, PUSHES).await;
    all_lost("refusing", &st, n, "refused");
    assert_eq!(
        rx.attempts() as u64,
        st.pushes,
        "one attempt per push: {st:?}"
    );
    assert_eq!(st.requests, st.pushes);

    // Slow: answers after 3 s, past the 1 s request timeout; still one attempt per push.
    rx.fail_next(0);
    rx.delay_answers(Duration::from_secs(3));
    let before = rx.attempts() as u64;
    let st = push::run(&sink, &published, schedule, PUSHES).await;
    all_lost("slow", &st, n, "timeout");
    assert_eq!(rx.attempts() as u64 - before, st.pushes, "{st:?}");
    assert!(rx.received().is_empty(), "nothing was accepted");

    // Partial: every request accepted, 2 of its points rejected.
    rx.delay_answers(Duration::ZERO);
    rx.reject_points(2);
    let st = push::run(&sink, &published, schedule, PUSHES).await;
    let rejected: u64 = rx
        .received()
        .iter()
        .map(|r| points_of(&r.request).min(2))
        .sum();
    assert!(rejected >= 2 * st.pushes, "{rejected}");
    let mut want = only_skipped(&st, n);
    want.insert("partial".to_string(), rejected);
    assert_eq!(st.dropped, want, "{st:?}");
    assert_eq!(st.points, st.pushes * n - rejected, "{st:?}");

    // Back: every push delivers exactly one tick's points, each push one tick apart at least.
    rx.reject_points(0);
    rx.clear();
    let st = push::run(&sink, &published, schedule, PUSHES).await;
    assert_eq!(st.points, st.pushes * n, "{st:?}");
    assert_eq!(st.dropped, only_skipped(&st, n), "{st:?}");
    assert!(st.failures.is_empty(), "{st:?}");
    let mut by_push: BTreeMap<u64, u64> = BTreeMap::new();
    for r in rx.received() {
        *by_push.entry(push_time(&r.request)).or_default() += points_of(&r.request);
    }
    assert_eq!(by_push.len() as u64, st.pushes, "{by_push:?}");
    assert!(
        by_push.values().all(|p| *p == n),
        "one tick's points each: {by_push:?}"
    );
    // The last push is the final one at shutdown, made when the run stops.
    let times: Vec<u64> = by_push.keys().copied().collect();
    for w in times[..times.len() - 1].windows(2) {
        assert!(
            w[1] - w[0] >= 550_000_000,
            "pushes at least half an interval apart: {times:?}"
        );
    }
}

/// The time every point of one push carries.
fn push_time(
    req: &opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest,
) -> u64 {
    use opentelemetry_proto::tonic::metrics::v1::metric::Data;
    let m = req
        .resource_metrics
        .iter()
        .flat_map(|r| &r.scope_metrics)
        .flat_map(|s| &s.metrics)
        .find_map(|m| match &m.data {
            Some(Data::Gauge(g)) => g.data_points.first().map(|p| p.time_unix_nano),
            Some(Data::Sum(s)) => s.data_points.first().map(|p| p.time_unix_nano),
            Some(Data::Histogram(h)) => h.data_points.first().map(|p| p.time_unix_nano),
            _ => None,
        });
    m.expect("a point")
}

#[tokio::test]
async fn otlp_grpc_dead_refusing_slow_and_partial_lose_counted_points_then_recover_one_tick_at_a_time()
 {
    check_otlp(GRPC).await;
}

#[tokio::test]
async fn otlp_http_dead_refusing_slow_and_partial_lose_counted_points_then_recover_one_tick_at_a_time()
 {
    check_otlp(HTTP).await;
}

fn gcm_config(url: String) -> GcmConfig {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    GcmConfig {
        client: GcmClientConfig {
            endpoint: Some(url),
            anonymous: true,
            ..Default::default()
        },
        min_sampling_period: Duration::from_millis(100),
        retry_initial: Duration::from_millis(20),
        retry_max: Duration::from_millis(100),
        push_deadline: Duration::from_secs(1),
        ..Default::default()
    }
}

#[tokio::test]
async fn gcm_dead_refusing_and_slow_lose_counted_points_then_recover_one_tick_at_a_time() {
    let published = push::fixture(4);
    let period = Duration::from_millis(100);
    // One push's series, from a healthy stand-in.
    let n = {
        let gcm = GcmStandIn::with_period(period).await;
        let sink = GcmSink::new(gcm_config(gcm.url.clone())).await.unwrap();
        let report = sink
            .push(published.snapshot.clone(), PushScope::All)
            .await
            .expect("a healthy stand-in");
        assert_eq!(report.points as usize, gcm.series().len());
        report.points
    };
    assert!(n > 4, "{n}");
    let addr = push::free_addr();
    let sink = Arc::new(
        GcmSink::new(gcm_config(format!("http://{addr}")))
            .await
            .unwrap(),
    );
    let schedule = SinkSchedule {
        interval: Duration::from_millis(1200),
        timeout: Duration::from_secs(3),
        final_push: Duration::from_secs(4),
    };

    // Dead: a refused connection is UNAVAILABLE, retried within the push deadline, then lost.
    let st = push::run(&sink, &published, schedule, PUSHES).await;
    all_lost("dead", &st, n, "unavailable");
    assert_eq!(
        sink.stats().tracked_series as u64,
        n,
        "the memo does not grow"
    );

    // Refusing: INVALID_ARGUMENT, not retried: one call per push.
    let gcm = GcmStandIn::with_period_on(addr, period).await;
    gcm.fail_next(1_000_000, tonic::Code::InvalidArgument);
    let st = push::run(&sink, &published, schedule, PUSHES).await;
    all_lost("refusing", &st, n, "refused");
    assert_eq!(gcm.writes().len() as u64, st.pushes, "{st:?}");

    // Slow: no answer within the 1 s push deadline.
    gcm.lock().faults.clear();
    gcm.lock().delay = Duration::from_secs(3);
    let st = push::run(&sink, &published, schedule, PUSHES).await;
    all_lost("slow", &st, n, "timeout");
    assert!(gcm.series().is_empty(), "nothing was written");
    assert_eq!(
        sink.stats().tracked_series as u64,
        n,
        "the memo does not grow"
    );

    // Back: every push writes each series once, with a point of its own time.
    gcm.lock().delay = Duration::ZERO;
    let before = gcm.writes().len();
    let back = SystemTime::now();
    let st = push::run(&sink, &published, schedule, PUSHES).await;
    assert_eq!(st.points, st.pushes * n, "{st:?}");
    assert_eq!(st.dropped, only_skipped(&st, n), "{st:?}");
    // Calls of the slow phase the stand-in answers late may land here too.
    let (ok, late): (Vec<_>, Vec<_>) = gcm.writes()[before..]
        .iter()
        .cloned()
        .partition(|w| w.code == tonic::Code::Ok);
    assert_eq!(ok.len() as u64, st.pushes, "one call per push: {ok:?}");
    assert!(ok.iter().all(|w| w.series as u64 == n), "{ok:?}");
    assert!(
        late.iter().all(|w| w.code == tonic::Code::DeadlineExceeded),
        "{late:?}"
    );
    for s in gcm.series() {
        assert_eq!(s.points.len() as u64, st.pushes, "{s:?}");
        assert!(
            s.points.iter().all(|p| p.end >= back),
            "no point of the outage: {s:?}"
        );
    }
}

#[tokio::test]
async fn gcm_series_refused_in_every_push_are_counted_partial_and_the_rest_written() {
    let published = push::fixture(4);
    let period = Duration::from_millis(100);
    let gcm = GcmStandIn::with_period(period).await;
    // One healthy push first: the series of one push, by metric type.
    let sink = Arc::new(GcmSink::new(gcm_config(gcm.url.clone())).await.unwrap());
    let n = sink
        .push(published.snapshot.clone(), PushScope::All)
        .await
        .expect("a healthy stand-in")
        .points;
    let series = gcm.series();
    assert_eq!(series.len() as u64, n);
    // A second stand-in where one metric type was created before with another kind: its series
    // are refused in every request, every other series is written (a partial failure).
    let victim = series[0].clone();
    let refused = series
        .iter()
        .filter(|s| s.metric_type == victim.metric_type)
        .count() as u64;
    assert!(refused > 0 && refused < n, "{refused} of {n}");
    let other_kind = if victim.kind == MetricKind::Gauge {
        MetricKind::Cumulative
    } else {
        MetricKind::Gauge
    };
    let gcm = GcmStandIn::with_period(period).await;
    gcm.add_descriptor(&victim.metric_type, other_kind, victim.value_type);
    let sink = Arc::new(GcmSink::new(gcm_config(gcm.url.clone())).await.unwrap());
    let schedule = SinkSchedule {
        interval: Duration::from_millis(1200),
        timeout: Duration::from_secs(3),
        final_push: Duration::from_secs(4),
    };
    let st = push::run(&sink, &published, schedule, PUSHES).await;
    assert!(st.pushes >= PUSHES, "{st:?}");
    assert_eq!(st.points, st.pushes * (n - refused), "{st:?}");
    let mut want = only_skipped(&st, n);
    want.insert("partial".to_string(), st.pushes * refused);
    assert_eq!(st.dropped, want, "{st:?}");
    // Written once a push, each series but the refused ones; never retried within a push.
    let writes = gcm.writes();
    assert_eq!(writes.len() as u64, st.pushes, "{writes:?}");
    for s in gcm.series() {
        assert_ne!(s.metric_type, victim.metric_type, "{s:?}");
        assert_eq!(s.points.len() as u64, st.pushes, "{s:?}");
    }
    assert_eq!(gcm.series().len() as u64, n - refused);
}
