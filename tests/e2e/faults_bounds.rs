//! Faults on the bounds of what kube-prober reads and pushes, against the real binary and the
//! stand-ins over real HTTP: an oversized answer from metrics.k8s.io, from a probe target and
//! from an HTTP backend. Each asserts the counted `too_large` failure (for the NodeMetrics
//! list, read as a stream: a counted skip of each item past the cap, and the whole answer read
//! when its items are not), that the process keeps serving, and its peak RSS (VmHWM of the
//! child), printed as `peak_rss_mib=...`. Then a push
//! output that is down and comes back (`recovered_in_ms=...`) and SIGTERM during a push that
//! hangs (`shutdown_ms=...`).

use support::apiserver;
use support::gcm as gcm_support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use support::{Prober, get, wait_ready};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const MIB: u64 = 1 << 20;
/// What a misbehaving peer sends: the 80 MiB that took RSS to 805–863 MiB before the cap.
const HUGE: u64 = 80 * MIB;

/// The value of the sample `series` (name and labels as rendered) in `metrics`, 0 if absent.
fn sample(metrics: &str, series: &str) -> f64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0.0)
}

/// Polls `/metrics` until each `(series, at_least)` has reached its value (at most `within`).
async fn wait_metrics(p: &Prober, want: &[(&str, f64)], within: Duration) -> String {
    let deadline = Instant::now() + within;
    loop {
        let (_, m) = get(&p.url("/metrics")).await;
        if want.iter().all(|(s, v)| sample(&m, s) >= *v) {
            return m;
        }
        assert!(Instant::now() < deadline, "missing {want:?} in:\n{m}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// An HTTP/1.1 server that answers every request with 200 and a chunked body of `size` bytes
/// made on the fly (`prefix`, then spaces), never holding it; counts the bytes it wrote.
struct HugeServer {
    url: String,
    written: Arc<AtomicU64>,
    requests: Arc<AtomicU64>,
}

async fn huge_server(prefix: &'static str, size: u64) -> HugeServer {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let written = Arc::new(AtomicU64::new(0));
    let requests = Arc::new(AtomicU64::new(0));
    let (w, r) = (written.clone(), requests.clone());
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            let (w, r) = (w.clone(), r.clone());
            tokio::spawn(async move {
                // Read the request head (small; no body).
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|x| x == b"\r\n\r\n") {
                    match sock.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                r.fetch_add(1, Ordering::Relaxed);
                let hdr = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n";
                if sock.write_all(hdr.as_bytes()).await.is_err() {
                    return;
                }
                let filler = vec![b' '; 64 * 1024];
                let mut sent = 0u64;
                let mut first = true;
                while sent < size {
                    let chunk: Vec<u8> = if first {
                        first = false;
                        let mut c = prefix.as_bytes().to_vec();
                        c.extend_from_slice(&filler[..filler.len() - c.len()]);
                        c
                    } else {
                        filler[..(size - sent).min(filler.len() as u64) as usize].to_vec()
                    };
                    let framed = [
                        format!("{:x}\r\n", chunk.len()).into_bytes(),
                        chunk,
                        b"\r\n".to_vec(),
                    ]
                    .concat();
                    if sock.write_all(&framed).await.is_err() {
                        return;
                    }
                    sent += framed.len() as u64;
                    w.fetch_add(framed.len() as u64, Ordering::Relaxed);
                }
                let _ = sock.write_all(b"0\r\n\r\n").await;
            });
        }
    });
    HugeServer {
        url,
        written,
        requests,
    }
}

/// 400 NodeMetrics of about 205 KiB each (an oversized annotation): one 80 MiB LIST answer,
/// as a misbehaving metrics.k8s.io would send it.
fn huge_node_metrics(now: SystemTime) -> Vec<k8s_metrics::v1beta1::NodeMetrics> {
    let filler = "x".repeat(205 * 1024);
    (0..400)
        .map(|i| {
            let name = if i == 0 {
                "node-a".to_string()
            } else {
                format!("node-{i}")
            };
            let mut m = apiserver::node_metrics(&name, "1", "1Gi", now);
            m.metadata.annotations = Some([("filler".to_string(), filler.clone())].into());
            m
        })
        .collect()
}

/// kube-prober's cluster role against the stand-in serving [`huge_node_metrics`], with `cap`
/// as `--max-response-bytes`.
async fn against_huge_node_metrics(cap: &str) -> (apiserver::ApiServer, Prober) {
    let api = apiserver::start().await;
    let now = SystemTime::now();
    api.set_nodes(vec![apiserver::node("node-a", ("4", "8Gi"), ("4", "8Gi"))]);
    api.set_node_metrics(huge_node_metrics(now));
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    api.write_kubeconfig(&kc).unwrap();
    let p = Prober::start_with_env(
        &[
            "--role",
            "cluster",
            "--interval",
            "5s",
            "--timeout",
            "5s",
            "--tick-interval",
            "1s",
            "--max-response-bytes",
            cap,
        ],
        &[("KUBECONFIG", kc.to_str().unwrap())],
    );
    wait_ready(&p).await;
    (api, p)
}

/// The NodeMetrics list is read as a stream: an 80 MiB answer (ten times the cap) gives its
/// node's usage while memory stays far below the answer's size, since only one item is held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_metrics_server_answer_is_read_item_by_item_in_bounded_memory() {
    let (_api, p) = against_huge_node_metrics("8Mi").await;
    let m = wait_metrics(
        &p,
        &[(
            "kube_prober_source_runs_total{source=\"metrics_server\"}",
            3.0,
        )],
        Duration::from_secs(60),
    )
    .await;
    let peak = p.peak_rss_mib();
    println!("fault=metrics_server_80MiB_streamed cap_mib=8 peak_rss_mib={peak:.1}");
    assert_eq!(
        sample(&m, "kube_prober_source_up{source=\"metrics_server\"}"),
        1.0,
        "{m}"
    );
    assert!(
        !m.contains(
            "kube_prober_source_errors_total{source=\"metrics_server\",reason=\"too_large\"}"
        ),
        "{m}"
    );
    assert_eq!(
        sample(
            &m,
            "kube_prober_node_cpu_utilization_ratio{node=\"node-a\",window=\"instant\",operator=\"latest\"}"
        ),
        0.25,
        "{m}"
    );
    // Before the cap the same answer took the process to 805–863 MiB; one item is 205 KiB.
    assert!(peak < 64.0, "peak RSS {peak:.1} MiB for an 80 MiB answer");
    assert_eq!(p.terminate(), 0);
}

/// Items past `--max-response-bytes` are counted skips of their nodes, never a failed run or a
/// retried LIST, and memory stays bounded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_server_items_past_the_cap_are_counted_skips() {
    let (api, p) = against_huge_node_metrics("100Ki").await;
    let m = wait_metrics(
        &p,
        &[(
            "kube_prober_source_dropped_values_total{source=\"metrics_server\",reason=\"too_large\"}",
            800.0,
        )],
        Duration::from_secs(60),
    )
    .await;
    let peak = p.peak_rss_mib();
    println!("fault=metrics_server_items_over_cap cap_kib=100 peak_rss_mib={peak:.1}");
    assert!(
        !m.contains(
            "kube_prober_source_errors_total{source=\"metrics_server\",reason=\"too_large\"}"
        ),
        "{m}"
    );
    assert!(
        !m.contains("kube_prober_node_cpu_utilization_ratio{node=\"node-a\""),
        "{m}"
    );
    // One LIST per run: skipping items retries nothing. The runs are read from a snapshot made
    // after the LISTs were counted.
    let lists = api.hits(apiserver::NODE_METRICS_PATH) as f64;
    let (_, now) = get(&p.url("/metrics")).await;
    let ticks = sample(&now, "kube_prober_ticks_total");
    let later = wait_metrics(
        &p,
        &[("kube_prober_ticks_total", ticks + 2.0)],
        Duration::from_secs(20),
    )
    .await;
    let runs = sample(
        &later,
        "kube_prober_source_runs_total{source=\"metrics_server\"}",
    );
    assert!(lists <= runs + 1.0, "{lists} LISTs for {runs} runs");
    assert_eq!(get(&p.url("/healthz")).await.0, 200);
    assert!(peak < 64.0, "peak RSS {peak:.1} MiB for an 80 MiB answer");
    assert_eq!(p.terminate(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_probe_answer_fails_the_probe_as_too_large() {
    let api = apiserver::start().await;
    api.set_nodes(vec![apiserver::node(
        "worker-7",
        ("4", "8Gi"),
        ("4", "8Gi"),
    )]);
    let kubelet = huge_server("ok", HUGE).await;
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    api.write_kubeconfig(&kc).unwrap();
    let url = format!("{}/healthz", kubelet.url);
    let p = Prober::start_with_env(
        &[
            "--role",
            "node",
            "--kubelet-healthz-url",
            &url,
            "--probe-interval",
            "1s",
            "--max-response-bytes",
            "1Mi",
        ],
        &[
            ("KUBECONFIG", kc.to_str().unwrap()),
            ("NODE_NAME", "worker-7"),
        ],
    );
    wait_ready(&p).await;
    let want = format!(
        "kube_prober_probe_failures_total{{probe=\"kubelet_healthz\",target=\"{url}\",reason=\"too_large\"}}"
    );
    let m = wait_metrics(&p, &[(&want, 2.0)], Duration::from_secs(20)).await;
    assert!(m.contains(&format!(
        "kube_prober_probe_success{{probe=\"kubelet_healthz\",target=\"{url}\"}} 0"
    )));
    let peak = p.peak_rss_mib();
    let per_request = kubelet.written.load(Ordering::Relaxed) as f64
        / kubelet.requests.load(Ordering::Relaxed).max(1) as f64
        / MIB as f64;
    println!(
        "fault=probe_target_80MiB cap_mib=1 peak_rss_mib={peak:.1} read_per_request_mib={per_request:.1}"
    );
    assert!(
        per_request < 16.0,
        "{per_request:.1} MiB of an 80 MiB body read"
    );
    assert!(peak < 64.0, "peak RSS {peak:.1} MiB");
    assert_eq!(p.terminate(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_backend_answer_is_a_too_large_source_error() {
    let prom = huge_server("{\"status\":\"success\",\"data\":{\"result\":[", HUGE).await;
    let p = Prober::start(&[
        "--role",
        "host",
        "--metrics-provider",
        "Prometheus",
        "--metrics-provider-address",
        &prom.url,
        "--interval",
        "5s",
        "--timeout",
        "5s",
        "--max-response-bytes",
        "1Mi",
    ]);
    let m = wait_metrics(
        &p,
        &[(
            "kube_prober_source_errors_total{source=\"prometheus\",reason=\"too_large\"}",
            1.0,
        )],
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(
        sample(&m, "kube_prober_source_up{source=\"prometheus\"}"),
        0.0
    );
    assert!(
        !m.contains("source=\"prometheus\",reason=\"timeout\""),
        "{m}"
    );
    let peak = p.peak_rss_mib();
    let per_request = prom.written.load(Ordering::Relaxed) as f64
        / prom.requests.load(Ordering::Relaxed).max(1) as f64
        / MIB as f64;
    println!(
        "fault=http_backend_80MiB cap_mib=1 peak_rss_mib={peak:.1} read_per_request_mib={per_request:.1}"
    );
    // Up to 4 queries run at once (the fetcher's concurrency), each holding at most the cap.
    assert!(per_request < 16.0, "{per_request:.1} MiB of 80 read");
    assert!(peak < 64.0, "peak RSS {peak:.1} MiB");
    assert_eq!(p.terminate(), 0);
}

#[test]
fn a_cap_below_64_kib_is_a_config_error() {
    let (code, err) = support::run_binary(&["--role", "host", "--max-response-bytes", "1Ki"], &[]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--max-response-bytes"), "{err}");
    let (code, err) = support::run_binary(
        &["--role", "host", "--max-response-bytes", "lots"],
        &[("KUBE_PROBER_MAX_RESPONSE_BYTES", "1Mi")],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("expected bytes"), "{err}");
}

/// An address nothing listens on (yet).
fn free_addr() -> std::net::SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

/// The binary in the cluster role with a Cloud Monitoring sink at `endpoint`, pushing every
/// second (no probes: only the sink talks to the outside besides the API server).
fn cluster_with_gcm(kubeconfig: &std::path::Path, endpoint: &str, extra: &[&str]) -> Prober {
    let mut args = vec![
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
        endpoint,
        "--gcm-anonymous",
        "--leader-elect",
        "false",
        "--tick-interval",
        "1s",
        "--disable-probes",
        "cluster_dns,metrics_server,apiserver_readyz",
    ];
    args.extend_from_slice(extra);
    Prober::start_with_env(&args, &[("KUBECONFIG", kubeconfig.to_str().unwrap())])
}

/// Cloud Monitoring down at start, then up on the same address: failed pushes are counted as
/// `unavailable` with no request (nothing answered), the first push after it comes up delivers
/// every series, and in the end the requests counted are exactly those the server received,
/// without a single sampling-period violation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_down_at_start_recovers_with_exact_counts() {
    let api = apiserver::start().await;
    api.generate(3, 2);
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    api.write_kubeconfig(&kc).unwrap();
    let addr = free_addr();
    // A push timeout that an answer beats on a loaded machine: a request the stand-in received
    // but answered after the sink gave up is (rightly) not counted as a request, and the exact
    // count below would then never match (seen with 1 s under the full suite).
    let p = cluster_with_gcm(
        &kc,
        &format!("http://{addr}"),
        &["--sink-interval", "3s", "--sink-timeout", "3s"],
    );
    wait_ready(&p).await;
    let m = wait_metrics(
        &p,
        &[(
            "kube_prober_sink_failures_total{sink=\"gcm\",reason=\"unavailable\"}",
            2.0,
        )],
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(
        sample(&m, "kube_prober_sink_requests_total{sink=\"gcm\"}"),
        0.0,
        "{m}"
    );
    assert_eq!(
        sample(&m, "kube_prober_sink_points_total{sink=\"gcm\"}"),
        0.0
    );

    let gcm = gcm_support::GcmStandIn::with_period_on(addr, Duration::from_secs(10)).await;
    let up = Instant::now();
    let deadline = up + Duration::from_secs(20);
    while gcm.writes().is_empty() {
        assert!(Instant::now() < deadline, "no push within 20 s of recovery");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let recovered = up.elapsed();
    println!(
        "fault=gcm_down_then_up recovered_in_ms={}",
        recovered.as_millis()
    );
    // Every node's series arrived in that push.
    assert_eq!(
        gcm.series_of("workload.googleapis.com/kube-prober/node/available")
            .len(),
        3
    );
    // Exact final state: requests counted = requests the server received (the snapshot is
    // rendered at tick time, so wait for one that has seen them all).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, m) = get(&p.url("/metrics")).await;
        let counted = sample(&m, "kube_prober_sink_requests_total{sink=\"gcm\"}");
        let received = gcm.writes().len() as f64;
        if counted == received && counted > 0.0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "counted {counted}, received {received}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(gcm.errors().is_empty(), "{:?}", gcm.errors());
    assert_eq!(p.terminate(), 0);
}

/// A receiver that accepts connections and never answers: every push hangs. Counts the
/// connections accepted.
async fn black_hole() -> (String, Arc<AtomicU64>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let accepted = Arc::new(AtomicU64::new(0));
    let n = accepted.clone();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((sock, _)) = listener.accept().await {
            n.fetch_add(1, Ordering::SeqCst);
            held.push(sock);
        }
    });
    (url, accepted)
}

/// SIGTERM while a push hangs: shutdown waits for it at most `--shutdown-timeout` (1 s here,
/// shorter than the 3 s sink timeout), has no time left for a final push, and exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_during_a_hanging_push_exits_within_the_shutdown_timeout() {
    let api = apiserver::start().await;
    api.generate(2, 1);
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    api.write_kubeconfig(&kc).unwrap();
    let (url, accepted) = black_hole().await;
    let p = cluster_with_gcm(
        &kc,
        &url,
        &[
            "--sink-interval",
            "3s",
            "--sink-timeout",
            "3s",
            "--shutdown-timeout",
            "1s",
        ],
    );
    wait_ready(&p).await;
    // The first push (after one interval) connects and hangs.
    let deadline = Instant::now() + Duration::from_secs(20);
    while accepted.load(Ordering::SeqCst) == 0 {
        assert!(Instant::now() < deadline, "no push started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let started = Instant::now();
    let (code, log) = p.terminate_with_log();
    let took = started.elapsed();
    println!(
        "fault=sigterm_during_hanging_push shutdown_ms={}",
        took.as_millis()
    );
    assert_eq!(code, 0);
    // It waited for the push (a lower bound: load only makes it longer), then gave up on it at
    // the shutdown timeout, not at the 3 s sink timeout, and had no time left for a final push
    // (no second connection).
    assert!(
        took >= Duration::from_millis(900),
        "shutdown took {took:?} with --shutdown-timeout 1s and a push hanging"
    );
    let said = |m: &str| {
        log.iter()
            .any(|l| l.contains(&format!("\"message\":\"{m}\"")))
    };
    assert!(
        said("push in flight at shutdown did not finish in time"),
        "{log:#?}"
    );
    assert!(!said("push timed out"), "{log:#?}");
    assert!(!said("final push"), "{log:#?}");
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        1,
        "a second push connected"
    );
}

/// The kube-client probes through a capped client: the metrics-server probe streams the
/// NodeMetrics list (which metrics-server answers whole) and stops after its first item, so an
/// answer far past the cap passes, while an answer past the cap on any other read is still
/// `too_large`; `/readyz` passes. A watch (a stream of small events) is not cut by a cap far
/// below its total size.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_probes_and_watches_through_the_capped_client() {
    use futures_util::StreamExt;
    use kube_prober::sources::probe::Probe;
    use kube_prober::sources::probe::kube::{ApiServerReadyProbe, MetricsServerProbe};

    let api = apiserver::start().await;
    let now = SystemTime::now();
    api.set_node_metrics(huge_node_metrics(now));
    let client = kube_prober::k8s::client::client_from_config(api.config(), 64 * 1024).unwrap();
    assert_eq!(
        MetricsServerProbe::new(client.clone()).check().await,
        Ok(())
    );
    // The same answer through kube's own LIST (collected whole) is past the cap.
    let whole: kube::Api<k8s_metrics::v1beta1::NodeMetrics> = kube::Api::all(client.clone());
    let e = whole.list(&Default::default()).await.unwrap_err();
    let t = kube_prober::shared::limit::find_too_large(&e).expect("too_large");
    assert_eq!(t.limit, 64 * 1024, "{e}");
    api.set_node_metrics(Vec::new());
    let failure = MetricsServerProbe::new(client.clone())
        .check()
        .await
        .unwrap_err();
    assert_eq!(failure.reason, "no_items", "{failure:?}");
    assert_eq!(
        ApiServerReadyProbe::new(client.clone()).check().await,
        Ok(())
    );

    // 300 Nodes of about 1 KiB each arrive through one watch: far more than the 64 KiB cap in
    // total, each event well under it.
    let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(client);
    let mut stream = nodes
        .watch(&kube::api::WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    for i in 0..300 {
        api.upsert(&apiserver::node(
            &format!("w-{i:03}"),
            ("4", "8Gi"),
            ("4", "8Gi"),
        ));
    }
    let mut seen = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while seen < 300 {
        let ev = tokio::time::timeout_at(deadline, stream.next())
            .await
            .expect("events in time")
            .expect("stream open")
            .expect("no error");
        if matches!(ev, kube::api::WatchEvent::Added(_)) {
            seen += 1;
        }
    }
}

/// The streamed LIST against the stand-in's pages: every Node, page by page, each one item at a
/// time; a `continue` token that expired between two pages (the API server compacted) is the
/// real server's 410, with the items of the first page already handed over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_list_follows_pages_and_fails_on_an_expired_continue_token() {
    use kube_prober::k8s::stream_list::{ListError, Reading, list_items};
    use kube_prober::shared::json_items::Piece;

    let api = apiserver::start().await;
    api.set_nodes(
        (0..1100)
            .map(|i| apiserver::node(&format!("n-{i:04}"), ("4", "8Gi"), ("4", "8Gi")))
            .collect(),
    );
    let client = kube_prober::k8s::client::client_from_config(api.config(), 64 * 1024).unwrap();
    let reading = Reading {
        max_item: 64 * 1024,
        stop_after: None,
        page: Some(500),
    };
    let mut names = Vec::new();
    let listed = list_items(&client, apiserver::NODES_PATH, reading, &mut |p| {
        if let Piece::Item { bytes, .. } = p {
            let v: serde_json::Value = serde_json::from_slice(bytes).unwrap();
            names.push(v["metadata"]["name"].as_str().unwrap().to_string());
        }
    })
    .await
    .unwrap();
    assert_eq!((listed.pages, listed.items), (3, 1100));
    assert_eq!(names.len(), 1100);
    assert_eq!(names[0], "n-0000");
    assert_eq!(names[1099], "n-1099");

    let mut seen = 0u64;
    let compacting = &api;
    let e = list_items(&client, apiserver::NODES_PATH, reading, &mut |_| {
        seen += 1;
        if seen == 500 {
            // Every write bumps the revision; compaction then expires the first page's token.
            compacting.upsert(&apiserver::node("n-new", ("4", "8Gi"), ("4", "8Gi")));
            compacting.compact();
        }
    })
    .await
    .unwrap_err();
    match e {
        ListError::Kube {
            error: kube::Error::Api(s),
            items,
        } => {
            assert_eq!((s.code, items), (410, 500), "{s:?}");
            assert_eq!(s.reason, "Expired");
        }
        other => panic!("{other:?}"),
    }
}
