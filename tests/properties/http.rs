//! Hostile input over real HTTP on 127.0.0.1: metrics-server answers with missing and absurd
//! fields through the kube client and the stand-in API server, and `?host=` values through the
//! real router. Bounded like tests/properties/parsers.rs: fixed seed and case count.

use support::apiserver;

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

use apiserver::Kind;
use kube_prober::hub::{Provider, Store};
use kube_prober::model::{Resource, UsageSample};
use kube_prober::outputs::published::Published;
use kube_prober::serve::server::{self, AppState};
use kube_prober::sources::usage::UsageFetcher;
use kube_prober::sources::usage::metrics_server::{MetricsServerConfig, MetricsServerFetcher};
use proptest::prelude::*;
use proptest::test_runner::{Config as PtConfig, RngSeed};
use serde_json::{Value, json};

const CASES: u32 = 48;

fn config(cases: u32) -> PtConfig {
    let env = PtConfig::default();
    PtConfig {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|c| c.parse().ok())
            .unwrap_or(cases),
        rng_seed: match env.rng_seed {
            RngSeed::Random => RngSeed::Fixed(0x6b75_6265_7072_6f62),
            fixed => fixed,
        },
        failure_persistence: None,
        ..env
    }
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    })
}

fn quantity() -> impl Strategy<Value = Value> {
    prop_oneof![
        4 => "[-+]?[0-9]{1,12}(\\.[0-9]{0,6})?(n|u|m|k|M|G|Ki|Mi|Gi|Ei|e[0-9]{1,3})?".prop_map(Value::from),
        1 => "[ -~]{0,12}".prop_map(Value::from),
        1 => Just(Value::from("1e308")),
        1 => Just(Value::from("9".repeat(330))),
        1 => any::<i64>().prop_map(Value::from),
        1 => Just(Value::Null),
    ]
}

fn resources() -> impl Strategy<Value = Option<Value>> {
    prop::option::weighted(
        0.85,
        (
            prop::option::weighted(0.9, quantity()),
            prop::option::weighted(0.9, quantity()),
        )
            .prop_map(|(cpu, memory)| {
                let mut m = serde_json::Map::new();
                if let Some(c) = cpu {
                    m.insert("cpu".into(), c);
                }
                if let Some(mem) = memory {
                    m.insert("memory".into(), mem);
                }
                Value::Object(m)
            }),
    )
}

fn timestamp() -> impl Strategy<Value = Option<Value>> {
    prop::option::of(prop_oneof![
        Just(Value::from("2026-01-01T00:00:00Z")),
        Just(Value::from("9999-12-31T23:59:59Z")),
        Just(Value::from("0001-01-01T00:00:00Z")),
        "[0-9TZ:-]{0,22}".prop_map(Value::from),
    ])
}

/// Node name -> (capacity, allocatable); NodeMetrics name -> (usage, timestamp, window).
type Case = (
    BTreeMap<String, (Option<Value>, Option<Value>)>,
    BTreeMap<String, (Option<Value>, Option<Value>, Option<Value>)>,
);

fn cluster() -> impl Strategy<Value = Case> {
    (
        prop::collection::btree_map("n[0-3]", (resources(), resources()), 0..4),
        prop::collection::btree_map(
            "n[0-4]",
            (
                resources(),
                timestamp(),
                prop::option::of(prop_oneof![
                    Just(Value::from("10s")),
                    Just(Value::from("-5s")),
                    "[0-9a-z.]{0,8}".prop_map(Value::from),
                ]),
            ),
            0..5,
        ),
    )
}

proptest! {
    #![proptest_config(config(CASES))]

    /// Whatever the Node and NodeMetrics objects hold: no panic; every NodeMetrics becomes a
    /// sample with finite values, a per-node error naming the node, or is skipped because its
    /// Node is unknown; an undecodable LIST is one clear error.
    #[test]
    fn metrics_server_answers_with_missing_or_absurd_fields(case in cluster()) {
        let (nodes, metrics) = case;
        let rt = runtime();
        let fetched = rt.block_on(async {
            let api = apiserver::start().await;
            for (name, (cap, alloc)) in &nodes {
                let mut status = serde_json::Map::new();
                if let Some(c) = cap { status.insert("capacity".into(), c.clone()); }
                if let Some(a) = alloc { status.insert("allocatable".into(), a.clone()); }
                api.upsert_json(Kind::Nodes, json!({"metadata": {"name": name}, "status": status}));
            }
            for (name, (usage, ts, window)) in &metrics {
                let mut m = serde_json::Map::new();
                m.insert("metadata".into(), json!({"name": name}));
                if let Some(u) = usage { m.insert("usage".into(), u.clone()); }
                if let Some(t) = ts { m.insert("timestamp".into(), t.clone()); }
                if let Some(w) = window { m.insert("window".into(), w.clone()); }
                api.upsert_json(Kind::NodeMetrics, Value::Object(m));
            }
            let mut f = MetricsServerFetcher::new(api.client(), MetricsServerConfig::default());
            tokio::time::timeout(Duration::from_secs(10), f.fetch()).await
        });
        let fetched = fetched.map_err(|_| TestCaseError::fail("fetch hung"))?;
        for s in &fetched.samples {
            prop_assert!(metrics.contains_key(&s.node) && nodes.contains_key(&s.node), "{}", s.node);
            for (r, v) in &s.values {
                prop_assert!(v.is_finite(), "{}: {r:?} = {v}", s.node);
            }
        }
        for (_, c) in &fetched.capacities {
            prop_assert!(c.cpu_cores.is_finite() && c.memory_bytes.is_finite());
        }
        // One sample or one error per NodeMetrics, plus at most one error per failed LIST.
        prop_assert!(fetched.samples.len() + fetched.errors.len() <= metrics.len() + 2);
        for e in &fetched.errors {
            prop_assert!(!e.to_string().is_empty());
        }
    }

    /// `?host=` of any bytes, percent-encoded or raw: 200 for a known host (also spelled with
    /// escapes), 404 for any other, never a 5xx.
    #[test]
    fn watcher_host_parameter_of_any_bytes(
        host in prop_oneof![
            prop::collection::vec(any::<u8>(), 0..40),
            Just(b"node-a".to_vec()),
            Just("n\u{fc}de b&c=d".as_bytes().to_vec()),
        ],
        raw in "[!$'()*+,;=:@/?a-zA-Z0-9._~%&-]{0,30}",
        extra in "[a-z]{0,5}",
    ) {
        let base = server_url();
        let encoded: String = form_urlencoded::byte_serialize(&host).collect();
        let cases = [
            (format!("{base}/watcher?host={encoded}&{extra}=1"), Some(host.clone())),
            (format!("{base}/watcher?{raw}"), None),
        ];
        for (url, sent) in cases {
            let status = runtime().block_on(async {
                client().get(&url).send().await.map(|r| r.status().as_u16())
            });
            let Ok(status) = status else { continue }; // a URL reqwest refuses to send
            prop_assert!(status < 500, "{url}: {status}");
            if let Some(h) = sent {
                let known = KNOWN.iter().any(|k| k.as_bytes() == h.as_slice());
                let want = if known || h.is_empty() { 200 } else { 404 };
                prop_assert_eq!(status, want, "{}", url);
            } else {
                prop_assert!(status == 200 || status == 404, "{url}: {status}");
            }
        }
    }
}

const KNOWN: [&str; 2] = ["node-a", "n\u{fc}de b&c=d"];

fn client() -> &'static reqwest::Client {
    static C: OnceLock<reqwest::Client> = OnceLock::new();
    C.get_or_init(|| {
        reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .build()
            .unwrap()
    })
}

/// One router on 127.0.0.1 serving a snapshot with the `KNOWN` nodes.
fn server_url() -> &'static str {
    static URL: OnceLock<String> = OnceLock::new();
    URL.get_or_init(|| {
        let store = Store::new();
        store.source().register_source("host");
        let now = SystemTime::now();
        for node in KNOWN {
            store.node().record_node_usage(
                "host",
                UsageSample {
                    node: node.into(),
                    at: now,
                    values: vec![(Resource::Cpu, 0.5), (Resource::Memory, 0.25)],
                },
            );
        }
        let published = Published::render(Arc::new(store.snapshot(now)), "host");
        let (tx, rx) = tokio::sync::watch::channel(Arc::new(published));
        let state = AppState {
            published: rx,
            stale_after: Duration::from_secs(3600 * 24 * 365),
        };
        runtime().block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            tokio::spawn(async move {
                let _tx = tx;
                let _ = axum::serve(listener, server::router(state)).await;
            });
            format!("http://{addr}")
        })
    })
}
