//! The SignalFx backend against a stand-in SignalFx API over HTTP on 127.0.0.1.

use support::fake_signalfx;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use fake_signalfx::{FakeSignalFx, Series, TOKEN};
use kube_prober::hub::{RunOutcome, Store};
use kube_prober::outputs::published::Published;
use kube_prober::sources::usage::http::{HttpConfig, Token};
use kube_prober::sources::usage::run_once;
use kube_prober::sources::usage::signalfx::{SignalFxConfig, SignalFxFetcher};
use kube_prober::watcher::WatcherMetrics;

fn series(id: &str, host: &str, metric: &str, values: &[f64]) -> Series {
    Series {
        id: id.into(),
        host: host.into(),
        metric: metric.into(),
        points: values
            .iter()
            .enumerate()
            .map(|(i, v)| (1_700_000_000_000 + i as i64 * 60_000, Some(*v)))
            .collect(),
    }
}

fn fetcher(url: &str, token: &str, cluster: &str) -> SignalFxFetcher {
    let mut h = HttpConfig::new(url);
    h.retries = 0;
    h.token = Some(Token::Value(token.into()));
    SignalFxFetcher::new(SignalFxConfig {
        http: h,
        host_name_suffix: ".dev.com".into(),
        cluster_name: cluster.into(),
    })
    .unwrap()
}

fn watcher(store: &Store) -> (Published, Option<WatcherMetrics>) {
    let p = Published::render(Arc::new(store.snapshot(SystemTime::now())), "signalfx");
    let w = p
        .watcher
        .as_ref()
        .map(|b| serde_json::from_slice(&b.all()).unwrap());
    (p, w)
}

#[tokio::test]
async fn fqdn_hosts_are_cut_and_points_averaged() {
    let fake = FakeSignalFx::start(vec![
        series(
            "Ehql_bxBgAc",
            "test1.dev.com",
            "cpu.utilization",
            &[84.0, 86.0],
        ),
        series(
            "EuXgJm7BkAA",
            "test2.dev.com",
            "cpu.utilization",
            &[5.0, 6.0, 7.0],
        ),
        series("Mem1", "test1.dev.com", "memory.utilization", &[40.0]),
    ])
    .await;
    let store = Store::new();
    let mut f = fetcher(&fake.url, TOKEN, "prod");
    assert_eq!(
        run_once(&mut f, &store, Duration::from_secs(10)).await,
        RunOutcome::Ok
    );
    let (p, w) = watcher(&store);
    assert!(p.watcher_healthy);
    let w = w.unwrap();
    assert_eq!(w.source, "SignalFx");
    let nodes = &w.data.node_metrics_map;
    assert_eq!(nodes.keys().collect::<Vec<_>>(), ["test1", "test2"]);
    let t1 = &nodes["test1"].metrics;
    assert_eq!(t1[0].name, "sf_metric:\"cpu.utilization\"");
    assert_eq!(
        (t1[0].kind.as_str(), t1[0].operator.as_str(), t1[0].value),
        ("CPU", "AVG", 85.0)
    );
    assert_eq!((t1[1].kind.as_str(), t1[1].value), ("Memory", 40.0));
    assert_eq!(nodes["test2"].metrics[0].value, 6.0);

    let queries = fake.inner.lock().unwrap().queries.clone();
    assert_eq!(
        queries.len(),
        3 * 2 * 2,
        "3 windows x 2 metrics x (metadata + data)"
    );
    let q = &queries[0]["query"];
    assert_eq!(
        q,
        "host:*.dev.com AND cluster:prod AND sf_metric:\"cpu.utilization\""
    );
    let data_q = queries.iter().find(|q| q.contains_key("startMs")).unwrap();
    let span: i64 =
        data_q["endMs"].parse::<i64>().unwrap() - data_q["startMs"].parse::<i64>().unwrap();
    assert_eq!(span, 15 * 60 * 1000);
    assert_eq!(data_q["resolution"], "60000");
}

#[tokio::test]
async fn a_wrong_token_fails_the_run_visibly() {
    let fake = FakeSignalFx::start(vec![series("a", "h.dev.com", "cpu.utilization", &[1.0])]).await;
    let store = Store::new();
    let mut f = fetcher(&fake.url, "wrong", "");
    match run_once(&mut f, &store, Duration::from_secs(10)).await {
        RunOutcome::Failed { reason, message } => {
            assert_eq!(reason, "http");
            assert!(message.contains("status 401"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    let (p, w) = watcher(&store);
    assert!(w.is_none() && !p.watcher_healthy);
}

#[tokio::test]
async fn failing_data_keeps_the_last_good_values() {
    let fake =
        FakeSignalFx::start(vec![series("a", "h1.dev.com", "cpu.utilization", &[30.0])]).await;
    let store = Store::new();
    let mut f = fetcher(&fake.url, TOKEN, "");
    assert_eq!(
        run_once(&mut f, &store, Duration::from_secs(10)).await,
        RunOutcome::Ok
    );
    let (_, before) = watcher(&store);
    fake.inner.lock().unwrap().fail_data = Some(500);
    assert!(matches!(
        run_once(&mut f, &store, Duration::from_secs(10)).await,
        RunOutcome::Failed { .. }
    ));
    let (p, after) = watcher(&store);
    assert!(!p.watcher_healthy);
    assert_eq!(after.unwrap().data, before.unwrap().data);
}
