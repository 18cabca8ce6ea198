//! `corpus/prometheus/`: answers of a real Prometheus's `/api/v1/query`, decoded by the
//! Prometheus backend (`src/sources/usage/prometheus.rs`), then served as they are by the
//! stand-in Prometheus to the backend's fetcher and recorded into the hub: NaN and ±Inf are
//! dropped as `non_finite`, a negative ratio as `negative`, each counted per value; a series
//! Prometheus marked stale is simply absent from an instant answer.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use kube_prober::hub::{RunOutcome, Store};
use kube_prober::model::{MetricType, Resource};
use kube_prober::sources::usage::http::HttpConfig;
use kube_prober::sources::usage::prometheus::{
    PromMetric, PrometheusConfig, PrometheusFetcher, VectorError, parse_vector,
};
use kube_prober::sources::usage::run_once;
use support::fake_prom::{Behaviour, FakePrometheus};

use super::{assert_every_entry_has_a_row, read};

const KIND: &str = "prometheus";

/// What `parse_vector` gives: the (node, value) pairs sorted by node, values written as Rust
/// writes them (`NaN`, `inf`, `-inf`); the series without the node label; or the error.
#[derive(Debug, PartialEq)]
enum Parsed {
    Vector(&'static [(&'static str, &'static str)], usize),
    NotVector(&'static str),
    Answered(&'static str),
}

/// What a fetch of one metric whose every query gets the answer leaves in the hub: the run's
/// outcome, the nodes served (each with one value per window and operator, all equal), and
/// the dropped values by reason. `None`: not run through the hub (not a usage answer).
type Hub = Option<(
    &'static str,
    &'static [(&'static str, f64)],
    &'static [(&'static str, u64)],
)>;

/// The five series exposed: a ratio, NaN, +Inf, -Inf and a negative value.
const ALL_FIVE: &[(&str, &str)] = &[
    ("10.0.0.5", "0.25"),
    ("node-inf", "inf"),
    ("node-nan", "NaN"),
    ("node-negative", "-0.5"),
    ("node-neginf", "-inf"),
];

/// Each file, the HTTP status Prometheus answered it with, what it parses to, and what it
/// leaves in the hub.
const ROWS: &[(&str, u16, Parsed, Hub)] = &[
    (
        "vector-nan-inf.json",
        200,
        Parsed::Vector(ALL_FIVE, 0),
        // Three windows, AVG and STD: six values a node.
        Some((
            "ok",
            &[("10.0.0.5", 0.25)],
            &[("negative", 6), ("non_finite", 18)],
        )),
    ),
    (
        "avg-over-time.json",
        200,
        Parsed::Vector(ALL_FIVE, 0),
        Some((
            "ok",
            &[("10.0.0.5", 0.25)],
            &[("negative", 6), ("non_finite", 18)],
        )),
    ),
    // The deviation of a constant is 0 (not negative); of an infinite series, NaN.
    (
        "stddev-over-time.json",
        200,
        Parsed::Vector(
            &[
                ("10.0.0.5", "0"),
                ("node-inf", "NaN"),
                ("node-nan", "NaN"),
                ("node-negative", "0"),
                ("node-neginf", "NaN"),
            ],
            0,
        ),
        Some((
            "ok",
            &[("10.0.0.5", 0.0), ("node-negative", 0.0)],
            &[("non_finite", 18)],
        )),
    ),
    // node-nan stopped being exposed: Prometheus wrote a staleness marker, and an instant
    // answer leaves the series out (the marker itself never reaches the API).
    (
        "vector-after-stale.json",
        200,
        Parsed::Vector(
            &[
                ("10.0.0.5", "0.25"),
                ("node-inf", "inf"),
                ("node-negative", "-0.5"),
                ("node-neginf", "-inf"),
            ],
            0,
        ),
        Some((
            "ok",
            &[("10.0.0.5", 0.25)],
            &[("negative", 6), ("non_finite", 12)],
        )),
    ),
    // A range function still sees the samples before the marker.
    (
        "avg-over-time-after-stale.json",
        200,
        Parsed::Vector(ALL_FIVE, 0),
        Some((
            "ok",
            &[("10.0.0.5", 0.25)],
            &[("negative", 6), ("non_finite", 18)],
        )),
    ),
    // Each instance's newest sample, as the fetcher dates nodes: the stale one has none.
    (
        "timestamp-after-stale.json",
        200,
        Parsed::Vector(
            &[
                ("10.0.0.5", "1795935212.178"),
                ("node-inf", "1795935212.178"),
                ("node-negative", "1795935212.178"),
                ("node-neginf", "1795935212.178"),
            ],
            0,
        ),
        None,
    ),
    // An aggregation without the node label: counted as unlabelled, nothing served.
    (
        "aggregate-without-instance.json",
        200,
        Parsed::Vector(&[], 1),
        Some(("no_data", &[], &[])),
    ),
    (
        "empty-vector.json",
        200,
        Parsed::Vector(&[], 0),
        Some(("no_data", &[], &[])),
    ),
    (
        "matrix-range-selector.json",
        200,
        Parsed::NotVector("matrix"),
        Some(("parse", &[], &[])),
    ),
    (
        "error-bad-data.json",
        400,
        Parsed::Answered("bad_data"),
        Some(("http", &[], &[])),
    ),
];

fn config(url: &str) -> PrometheusConfig {
    let mut h = HttpConfig::new(url);
    h.retries = 0;
    h.timeout = Duration::from_secs(3);
    let mut cfg = PrometheusConfig::new(h);
    cfg.metrics = vec![PromMetric {
        name: "instance:node_cpu:ratio".into(),
        kind: MetricType::Cpu,
        resource: Some(Resource::Cpu),
        fallback: None,
    }];
    cfg
}

fn parsed(body: &[u8]) -> String {
    match parse_vector(body, "instance", true) {
        Ok((mut pairs, unlabelled, unparsable)) => {
            pairs.sort_by(|a, b| a.0.cmp(&b.0));
            let pairs: Vec<(String, String)> = pairs
                .into_iter()
                .map(|(n, v)| (n, format!("{v}")))
                .collect();
            format!("{pairs:?} {unlabelled} {unparsable:?}")
        }
        Err(VectorError::NotVector(t)) => format!("not a vector: {t}"),
        Err(VectorError::Answered { error_type, .. }) => format!("answered: {error_type}"),
        Err(e) => format!("other error: {e}"),
    }
}

fn expected(p: &Parsed) -> String {
    match p {
        Parsed::Vector(pairs, unlabelled) => {
            let pairs: Vec<(String, String)> = pairs
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect();
            format!("{pairs:?} {unlabelled} []")
        }
        Parsed::NotVector(t) => format!("not a vector: {t}"),
        Parsed::Answered(t) => format!("answered: {t}"),
    }
}

#[test]
fn every_prometheus_answer_decodes_to_its_expected_vector_or_error() {
    assert_every_entry_has_a_row(KIND, ROWS.iter().map(|(name, ..)| *name));
    let wrong: Vec<String> = ROWS
        .iter()
        .filter_map(|(name, _, want, _)| {
            let got = parsed(&read(KIND, name));
            (got != expected(want)).then(|| format!("{name}:\n got {got}\nwant {}", expected(want)))
        })
        .collect();
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The outcome of a run as the rows write it: `ok`, `no_data`, or the failure's reason.
fn outcome(o: &RunOutcome) -> String {
    match o {
        RunOutcome::Ok => "ok".into(),
        RunOutcome::NoData => "no_data".into(),
        RunOutcome::Failed { reason, .. } => reason.clone(),
    }
}

#[tokio::test]
async fn every_prometheus_answer_through_the_fetcher_into_the_hub() {
    for (name, status, _, hub) in ROWS {
        let Some((want_outcome, want_served, want_dropped)) = hub else {
            continue;
        };
        let body = String::from_utf8(read(KIND, name)).unwrap();
        let fake = FakePrometheus::start(Behaviour::Body(*status, body)).await;
        let store = Store::new();
        let mut f = PrometheusFetcher::new(config(&fake.url)).unwrap();
        let got = run_once(&mut f, &store, Duration::from_secs(20)).await;
        assert_eq!(outcome(&got), *want_outcome, "{name}: {got:?}");
        let snap = store.snapshot(SystemTime::now());
        let mut served: BTreeMap<String, Vec<f64>> = BTreeMap::new();
        for (node, load) in snap.nodes.iter() {
            for w in load.windows.iter() {
                for b in &w.backend {
                    served
                        .entry(node.to_string())
                        .or_default()
                        .push(b.value.value);
                }
            }
        }
        let want: BTreeMap<String, Vec<f64>> = want_served
            .iter()
            .map(|(n, v)| (n.to_string(), vec![*v; 6]))
            .collect();
        assert_eq!(served, want, "{name}");
        let dropped = snap
            .sources
            .get("prometheus")
            .map(|s| s.dropped.clone())
            .unwrap_or_default();
        let want_dropped: BTreeMap<String, u64> = want_dropped
            .iter()
            .map(|(r, n)| (r.to_string(), *n))
            .collect();
        assert_eq!(dropped, want_dropped, "{name}");
    }
}
