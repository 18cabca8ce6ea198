//! docs/metrics.md lists exactly the metric families in src/sink/names.rs, and exactly the
//! `reason` values the source counters can carry; each documented reason is provoked here from
//! real input (stand-ins over HTTP, a procfs directory), so a reason that is never produced or
//! one produced but undocumented fails a test.

#[path = "support/apiserver.rs"]
mod apiserver;
#[path = "support/fake_prom.rs"]
mod fake_prom;

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime};

use apiserver::{node, node_metrics};
use fake_prom::{Behaviour, FakePrometheus};
use kube_prober::fetch::host::{HostConfig, HostFetcher};
use kube_prober::fetch::http::HttpConfig;
use kube_prober::fetch::metrics_server::{MetricsServerConfig, MetricsServerFetcher};
use kube_prober::fetch::prometheus::{PrometheusConfig, PrometheusFetcher};
use kube_prober::fetch::run_once;
use kube_prober::provider::{RunOutcome, Store, validate};
use kube_prober::sink::names;

fn doc() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/metrics.md")).unwrap()
}

#[test]
fn every_metric_is_documented_and_every_documented_metric_exists() {
    let doc = doc();
    let code: BTreeSet<String> = names::ALL
        .iter()
        .chain(names::SERVER)
        .map(|f| f.sample_name())
        .collect();
    let documented: BTreeSet<String> = doc
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("kube_prober_") && w.len() > "kube_prober_".len())
        .map(str::to_string)
        .collect();
    let missing: Vec<_> = code.difference(&documented).collect();
    assert!(missing.is_empty(), "not in docs/metrics.md: {missing:?}");
    let stale: Vec<_> = documented.difference(&code).collect();
    assert!(
        stale.is_empty(),
        "docs/metrics.md names metrics the code does not have: {stale:?}"
    );
}

/// The `reason` values the metrics table documents for `family`: every `code` span of the
/// meaning column that is a plain label value.
fn documented_reasons(family: &str) -> BTreeSet<String> {
    let doc = doc();
    let row = doc
        .lines()
        .find(|l| l.starts_with(&format!("| `{family}` |")))
        .unwrap_or_else(|| panic!("no row for {family} in docs/metrics.md"));
    let meaning = row.split('|').nth(4).unwrap_or_default();
    meaning
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|w| !w.is_empty() && w.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
        .map(str::to_string)
        .collect()
}

fn prometheus(url: &str) -> PrometheusFetcher {
    let mut h = HttpConfig::new(url);
    h.retries = 0;
    h.timeout = Duration::from_secs(3);
    PrometheusFetcher::new(PrometheusConfig::new(h)).unwrap()
}

fn reason(outcome: RunOutcome) -> String {
    match outcome {
        RunOutcome::Failed { reason, .. } => reason,
        other => panic!("expected a failed run, got {other:?}"),
    }
}

/// One row per documented source error reason: the real input that produces it.
#[tokio::test]
async fn every_source_error_reason_is_documented_and_produced() {
    let code: BTreeSet<String> = kube_prober::error::SOURCE_ERROR_REASONS
        .iter()
        .map(|s| s.to_string())
        .collect();
    let documented = documented_reasons("kube_prober_source_errors_total");
    assert_eq!(
        documented, code,
        "docs/metrics.md and error::SOURCE_ERROR_REASONS disagree"
    );

    let mut produced = BTreeSet::new();
    let t = Duration::from_secs(10);
    // http: a backend answering 503.
    let down = FakePrometheus::start(Behaviour::Down).await;
    produced.insert(reason(
        run_once(&mut prometheus(&down.url), &Store::new(), t).await,
    ));
    // parse: a 200 answer that is not JSON.
    let bad = FakePrometheus::start(Behaviour::Malformed).await;
    produced.insert(reason(
        run_once(&mut prometheus(&bad.url), &Store::new(), t).await,
    ));
    // timeout: a backend that answers after the run's deadline.
    let slow = FakePrometheus::start(Behaviour::Stall(Duration::from_secs(5))).await;
    let short = Duration::from_millis(200);
    produced.insert(reason(
        run_once(&mut prometheus(&slow.url), &Store::new(), short).await,
    ));
    // too_large: an answer past the byte cap.
    let huge = FakePrometheus::start(Behaviour::Huge(256 * 1024)).await;
    let mut capped = HttpConfig::new(&huge.url);
    capped.retries = 0;
    capped.timeout = Duration::from_secs(3);
    capped.max_body_bytes = 64 * 1024;
    let mut capped = PrometheusFetcher::new(PrometheusConfig::new(capped)).unwrap();
    produced.insert(reason(run_once(&mut capped, &Store::new(), t).await));
    // io: a procfs that is not there.
    let dir = tempfile::tempdir().unwrap();
    let mut host = HostFetcher::new(HostConfig {
        procfs: dir.path().join("missing"),
        node_name: "h".into(),
    });
    produced.insert(reason(run_once(&mut host, &Store::new(), t).await));
    assert_eq!(produced, code, "reasons produced by real input");
}

/// One row per documented dropped-value reason, each from real backend answers.
#[tokio::test]
async fn every_dropped_value_reason_is_documented_and_produced() {
    let code: BTreeSet<String> = validate::dropped_reasons().map(str::to_string).collect();
    let documented = documented_reasons("kube_prober_source_dropped_values_total");
    assert_eq!(
        documented, code,
        "docs/metrics.md and validate::DropReason disagree"
    );

    let store = Store::new();
    let t = Duration::from_secs(10);
    let api = apiserver::start().await;
    let now = SystemTime::now();
    api.set_nodes(vec![
        node("liar", ("4", "8Gi"), ("4", "8Gi")),
        node("negative", ("4", "8Gi"), ("4", "8Gi")),
        node("zero-cpu", ("0", "8Gi"), ("0", "8Gi")),
        node("garbled", ("4", "8Gi"), ("4", "8Gi")),
    ]);
    api.set_node_metrics(vec![
        node_metrics("liar", "400", "2Gi", now),    // above_capacity
        node_metrics("negative", "1", "-2Gi", now), // negative
        node_metrics("zero-cpu", "1", "2Gi", now),  // bad_capacity
        node_metrics("garbled", "1 core", "2Gi", now), // unparsable
    ]);
    let mut ms = MetricsServerFetcher::new(api.client(), MetricsServerConfig::default());
    assert_eq!(run_once(&mut ms, &store, t).await, RunOutcome::Ok);
    // non_finite: Prometheus answering NaN.
    let nan = FakePrometheus::start(Behaviour::Answer(vec![("n1:9100".into(), f64::NAN)])).await;
    assert_eq!(
        run_once(&mut prometheus(&nan.url), &store, t).await,
        RunOutcome::Ok
    );
    let snap = store.snapshot(SystemTime::now());
    let produced: BTreeSet<String> = snap
        .sources
        .values()
        .flat_map(|s| s.dropped.keys().cloned())
        .collect();
    assert_eq!(produced, code, "reasons produced by real input");
    let ms = &snap.sources["metrics_server"];
    for r in ["above_capacity", "negative", "bad_capacity", "unparsable"] {
        assert_eq!(ms.dropped[r], 1, "{r}: {:?}", ms.dropped);
    }
}

/// The perf open-failure reasons documented are exactly the ones the classifier can give
/// (`task::perf::tests::error_classification` maps each errno to one).
#[test]
fn every_perf_open_failure_reason_is_documented() {
    let documented = documented_reasons("kube_prober_task_perf_open_failures_total");
    let code: BTreeSet<String> = kube_prober::task::perf::FAILURE_REASONS
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(documented, code);
}
