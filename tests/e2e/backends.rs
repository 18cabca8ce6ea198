//! The binary with remote usage backends chosen by load-watcher's environment variables.

use support::fake_prom;
use support::fake_signalfx;

use std::time::Duration;

use kube_prober::watcher::{Client, WatcherMetrics};
use support::{Prober, get, promtool_check, wait_ready};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_by_load_watcher_environment() {
    let fake = fake_prom::FakePrometheus::start(fake_prom::Behaviour::Answer(vec![(
        "worker-1:9100".into(),
        0.42,
    )]))
    .await;
    let p = Prober::start_with_env(
        &["--role", "host"],
        &[
            ("METRICS_PROVIDER_NAME", "Prometheus"),
            ("METRICS_PROVIDER_ADDRESS", fake.url.as_str()),
            ("METRICS_PROVIDER_TOKEN", "secret-token"),
            ("INSECURE_SKIP_VERIFY", "TRUE"),
            ("LOG_LEVEL", "debug"),
        ],
    );
    wait_ready(&p).await;
    let client = Client::new(&format!("http://{}", p.addr), Duration::from_secs(5)).unwrap();
    let w: WatcherMetrics = client.get_latest_watcher_metrics().await.unwrap();
    assert_eq!(w.source, "Prometheus");
    let m = &w.data.node_metrics_map["worker-1"].metrics;
    let cpu = m
        .iter()
        .find(|x| x.kind == "CPU" && x.operator == "AVG")
        .unwrap();
    assert_eq!(cpu.value, 42.0);
    assert_eq!(get(&p.url("/watcher/health")).await.0, 200);

    let (status, metrics) = get(&p.url("/metrics")).await;
    assert_eq!(status, 200);
    assert!(metrics.contains(
        "kube_prober_node_cpu_utilization_ratio{node=\"worker-1\",window=\"15m\",operator=\"avg\"} 0.42"
    ));
    assert!(metrics.contains("kube_prober_node_backend_value{node=\"worker-1\",window=\"5m\",operator=\"std\",metric=\"kepler_node_energy_stat\",type=\"Energy\"} 0.42"));
    assert!(metrics.contains("kube_prober_source_up{source=\"prometheus\"} 1"));
    let (code, out) = promtool_check(&metrics);
    assert_eq!(code, 0, "{out}");
    assert!(!fake.requests().is_empty());
    assert_eq!(p.terminate(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signalfx_by_load_watcher_environment() {
    let fake = fake_signalfx::FakeSignalFx::start(vec![fake_signalfx::Series {
        id: "A".into(),
        host: "node-7.prod.example.com".into(),
        metric: "cpu.utilization".into(),
        points: vec![(1, Some(30.0)), (2, Some(50.0))],
    }])
    .await;
    let p = Prober::start_with_env(
        &["--role", "host"],
        &[
            ("METRICS_PROVIDER_NAME", "signalfx"),
            ("METRICS_PROVIDER_ADDRESS", fake.url.as_str()),
            ("METRICS_PROVIDER_TOKEN", fake_signalfx::TOKEN),
            ("SIGNALFX_HOST_NAME_SUFFIX", ".prod.example.com"),
            ("SIGNALFX_CLUSTER_NAME", "prod"),
        ],
    );
    wait_ready(&p).await;
    let (status, body) = get(&p.url("/watcher?host=node-7")).await;
    assert_eq!(status, 200, "{body}");
    let w: WatcherMetrics = serde_json::from_str(&body).unwrap();
    assert_eq!(w.data.node_metrics_map["node-7"].metrics[0].value, 40.0);
    let q = fake.inner.lock().unwrap().queries[0]["query"].clone();
    assert_eq!(
        q,
        "host:*.prod.example.com AND cluster:prod AND sf_metric:\"cpu.utilization\""
    );
    assert_eq!(p.terminate(), 0);
}

#[test]
fn bad_provider_settings_exit_2() {
    let (code, err) =
        support::run_binary(&["--role", "host"], &[("METRICS_PROVIDER_NAME", "Datadog")]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--metrics-provider") && err.contains("Datadog"),
        "{err}"
    );
    let (code, err) = support::run_binary(
        &[
            "--role",
            "host",
            "--metrics-provider",
            "SignalFx",
            "--listen",
            "127.0.0.1:0",
        ],
        &[],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("access token"), "{err}");
    let (code, err) =
        support::run_binary(&["--role", "host"], &[("INSECURE_SKIP_VERIFY", "maybe")]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--insecure-skip-verify"), "{err}");
}
