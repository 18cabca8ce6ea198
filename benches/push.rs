//! One push of the cluster role's snapshot at 5,000 nodes and 150,000 pods, through each push
//! output: OTLP/gRPC and OTLP/HTTP-protobuf (gzip and none) into the OTLP receiver stand-in
//! (`tests/support/otlp.rs`), and Cloud Monitoring into its stand-in (`tests/support/gcm.rs`,
//! real 10 s sampling period).
//!
//! Run with `cargo bench --bench push` (env `NODES`, default 5000; `PODS_PER_NODE`, default 30;
//! `REPEATS`, default 3). The snapshot is built once, without kube-prober's watchers: the stand-in
//! API server generates the cluster, its Nodes, Pods, DaemonSets and Deployments go through the
//! public derivation functions (`watch::derive`) into the `Store`, with 15 metrics-server usage
//! samples one minute apart and the capacity of every node, as the cluster role records them.
//!
//! Each measured push runs on a fresh sink, on its own current-thread tokio runtime on a
//! dedicated thread; the stand-ins and a byte-counting TCP proxy in front of them run on another
//! runtime (one worker thread), so the receiving side's decoding is not in the sink's CPU time.
//! Measured per push: wall time, the sink thread's utime+stime (`/proc/thread-self/stat`) and
//! on-CPU time (`/proc/thread-self/schedstat`), the whole process's CPU, points and requests
//! (the sink's `PushReport`, checked against the stand-in), protobuf bytes (as the stand-in
//! decoded them), bytes on the wire (client to server through the proxy: HTTP/2 or HTTP/1.1
//! framing, headers, compression), and the sink thread's peak heap growth (a counting global
//! allocator, per thread). OTLP sinks push twice (fresh, then the same sink again); Cloud
//! Monitoring pushes once per stand-in, since a second point within 10 s would be refused.
//!
//! The result is a markdown report on stdout. Under `cargo test --benches` (no `--bench`
//! argument) it does nothing.
//!
//! **A long outage** (`OUTAGE_SECS=1800`): instead of the single pushes, the three outputs
//! (OTLP/gRPC, OTLP/HTTP, Cloud Monitoring) run through the push runner (`run_sink`, every
//! `OUTAGE_INTERVAL` seconds, default 60, the default `--sink-interval`) against receivers that
//! are dead (`OUTAGE_MODE=dead`, the default: nothing listens on their ports) or refuse every
//! request (`OUTAGE_MODE=refusing`: gRPC INVALID_ARGUMENT, HTTP 400) for that long. The
//! process's RSS is sampled every minute and its slope reported (least squares from the fifth
//! minute on), with the pushes and the points counted as dropped; then the receivers come up
//! (or accept) and the first push of each output after it is reported: one tick's points.

use support::apiserver;
mod common;
use support::gcm as gcm_support;
use support::otlp as otlp_support;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use apiserver::GenerateOptions;
use common::{clk_tck, cpu_ticks, env_usize, loadavg, machine_info, mib, ms, rss_kib};
use gcm_support::GcmStandIn;
use k8s_metrics::v1beta1::NodeMetrics;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube_prober::hub::{Provider, RunOutcome, Store};
use kube_prober::model::{
    ClusterInfo, NodeCapacity, ProbeOutcome, Resource, Snapshot, UsageSample,
};
use kube_prober::outputs::gcm::{GcmClientConfig, GcmConfig, GcmSink};
use kube_prober::outputs::otlp::{OtlpBounds, OtlpOptions, OtlpResource, OtlpSink};
use kube_prober::outputs::prometheus::{self, Format};
use kube_prober::outputs::{PushError, PushReport, PushScope, Sink};
use kube_prober::shared::quantity::parse_quantity;
use kube_prober::sources::cluster::derive::{DeriveConfig, cluster_state_from_facts, pod_facts};
use otlp_support::OtlpReceiver;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

// ---------------------------------------------------------------------------------------
// Heap bytes per thread: a global allocator that counts live bytes and their peak for the
// thread that allocates (frees on another thread are counted there).

struct Counting;

thread_local! {
    static LIVE: Cell<i64> = const { Cell::new(0) };
    static PEAK: Cell<i64> = const { Cell::new(0) };
}

fn note(delta: i64) {
    let _ = LIVE.try_with(|l| {
        let v = l.get() + delta;
        l.set(v);
        let _ = PEAK.try_with(|p| {
            if v > p.get() {
                p.set(v);
            }
        });
    });
}

// SAFETY: every call is passed to `System` unchanged; the counters are const thread-locals
// without destructors, so updating them never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            note(layout.size() as i64);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            note(layout.size() as i64);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) };
        note(-(layout.size() as i64));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            note(new_size as i64 - layout.size() as i64);
        }
        p
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Starts a peak measurement on this thread: answers the live bytes now.
fn heap_mark() -> i64 {
    let live = LIVE.with(Cell::get);
    PEAK.with(|p| p.set(live));
    live
}

/// Peak live bytes of this thread since `heap_mark`, above the mark.
fn heap_peak_since(mark: i64) -> i64 {
    PEAK.with(Cell::get) - mark
}

// ---------------------------------------------------------------------------------------
// A TCP proxy that counts the bytes each way.

struct Proxy {
    addr: SocketAddr,
    up: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    count: Option<Arc<AtomicU64>>,
) {
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if let Some(c) = &count {
                    c.fetch_add(n as u64, Ordering::Relaxed);
                }
                if to.write_all(&buf[..n]).await.is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown().await;
}

/// Listens on 127.0.0.1:0 and forwards every connection to `target`, counting client bytes.
async fn proxy(target: SocketAddr) -> Proxy {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind proxy");
    let addr = listener.local_addr().expect("proxy addr");
    let up = Arc::new(AtomicU64::new(0));
    let counter = up.clone();
    let task = tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let Ok(server) = tokio::net::TcpStream::connect(target).await else {
                continue;
            };
            let _ = client.set_nodelay(true);
            let _ = server.set_nodelay(true);
            let (cr, cw) = client.into_split();
            let (sr, sw) = server.into_split();
            tokio::spawn(pump(cr, sw, Some(counter.clone())));
            tokio::spawn(pump(sr, cw, None));
        }
    });
    Proxy { addr, up, task }
}

// ---------------------------------------------------------------------------------------
// The snapshot.

struct Built {
    snap: Arc<Snapshot>,
    nodes: usize,
    pods: usize,
    daemon_sets: usize,
    deployments: usize,
    prom_series: usize,
    prom_bytes: usize,
    took: Duration,
}

fn build_snapshot(rt: &tokio::runtime::Runtime, nodes: usize, pods_per_node: usize) -> Built {
    let t0 = Instant::now();
    let api = rt.block_on(apiserver::start());
    api.generate_with(&GenerateOptions::new(nodes, pods_per_node));
    let node_objs = api.objects::<Node>();
    let pod_objs = api.objects::<Pod>();
    let ds = api.objects::<DaemonSet>();
    let deps = api.objects::<Deployment>();
    let metrics = api.objects::<NodeMetrics>();
    drop(api);

    let cfg = DeriveConfig::default();
    let mut bad = 0u64;
    let facts: Vec<_> = pod_objs
        .iter()
        .filter_map(|p| pod_facts(p, &cfg).map_err(|_| bad += 1).ok())
        .collect();
    let pods = pod_objs.len();
    drop(pod_objs);
    let now = SystemTime::now();
    let state = cluster_state_from_facts(&node_objs, &facts, bad, &ds, &deps, now, &cfg);
    drop(facts);

    let store = Store::new();
    store.cluster().record_cluster_info(ClusterInfo {
        cluster_name: "bench-cluster".into(),
        role: "cluster".into(),
        project: "bench-project".into(),
        location: "us-central1".into(),
    });
    // The cluster role's sources, each after one good run.
    for source in [
        "metrics_server",
        "watch_nodes",
        "watch_pods",
        "watch_daemonsets",
        "watch_deployments",
    ] {
        store.source().register_source(source);
        store
            .source()
            .record_source_run(source, now, Duration::from_millis(250), RunOutcome::Ok);
    }
    // Usage as the metrics_server source records it: ratios of capacity, one sample per minute
    // for the last 15 minutes (so every window has data), and the capacity of every node.
    let capacity: std::collections::HashMap<&str, NodeCapacity> = state
        .nodes
        .iter()
        .filter_map(|n| n.capacity.map(|c| (n.name.as_str(), c)))
        .collect();
    for m in &metrics {
        let name = m.metadata.name.as_deref().unwrap_or_default();
        let Some(cap) = capacity.get(name) else {
            continue;
        };
        let cpu = parse_quantity(&m.usage.cpu.0).expect("cpu usage") / cap.cpu_cores;
        let mem = parse_quantity(&m.usage.memory.0).expect("memory usage") / cap.memory_bytes;
        for i in 0..15u32 {
            let wobble = 1.0 + 0.05 * f64::from(i % 5) - 0.1;
            store.node().record_node_usage(
                "metrics_server",
                UsageSample {
                    node: name.to_string(),
                    at: now - Duration::from_secs(60 * u64::from(14 - i)),
                    values: vec![
                        (Resource::Cpu, (cpu * wobble).min(1.0)),
                        (Resource::Memory, (mem * wobble).min(1.0)),
                    ],
                },
            );
        }
        store.node().record_node_capacity(name, *cap);
    }
    // The cluster role's probes, a few runs each.
    for (probe, target) in [
        ("cluster_dns", "kubernetes.default.svc.cluster.local"),
        ("metrics_server", "v1beta1.metrics.k8s.io"),
        ("apiserver_readyz", "/readyz"),
    ] {
        for i in 0..10u64 {
            store.probe().record_probe_outcome(ProbeOutcome {
                probe: probe.into(),
                target: target.into(),
                at: now,
                duration: Duration::from_millis(2 + 3 * i),
                failure: None,
            });
        }
    }
    let node_count = state.nodes.len();
    store.cluster().record_cluster_state(state);
    let snap = Arc::new(store.snapshot(now));
    let took = t0.elapsed();
    let text = prometheus::render(&snap, Format::Text);
    let prom_series = text
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .count();
    Built {
        snap,
        nodes: node_count,
        pods,
        daemon_sets: ds.len(),
        deployments: deps.len(),
        prom_series,
        prom_bytes: text.len(),
        took,
    }
}

// ---------------------------------------------------------------------------------------
// Measuring pushes.

/// One push as seen from the sink's thread.
struct Measured {
    wall: Duration,
    /// utime+stime of the sink thread, clock ticks.
    thread_ticks: u64,
    /// On-CPU time of the sink thread (schedstat), ns.
    thread_ns: Option<u64>,
    /// utime+stime of the whole process (sink, stand-in, proxy), clock ticks.
    process_ticks: u64,
    /// Peak heap growth of the sink thread during the push, bytes.
    heap_peak: i64,
    result: Result<PushReport, PushError>,
}

fn schedstat_ns() -> Option<u64> {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

async fn measure<S: Sink>(sink: &S, snap: &Arc<Snapshot>) -> Measured {
    let snap = snap.clone();
    let ticks0 = cpu_ticks("thread-self");
    let ns0 = schedstat_ns();
    let proc0 = cpu_ticks("self");
    let mark = heap_mark();
    let t = Instant::now();
    let result = sink.push(snap, PushScope::All).await;
    let wall = t.elapsed();
    let heap_peak = heap_peak_since(mark);
    let ticks1 = cpu_ticks("thread-self");
    let ns1 = schedstat_ns();
    let proc1 = cpu_ticks("self");
    Measured {
        wall,
        thread_ticks: ticks1 - ticks0,
        thread_ns: ns0.zip(ns1).map(|(a, b)| b - a),
        process_ticks: proc1 - proc0,
        heap_peak,
        result,
    }
}

/// Makes a sink with `make` on a dedicated thread with its own current-thread runtime, then
/// pushes `snap` `pushes` times in a row with it; after each push (outside the measurement)
/// `seen` reads what the receiving side got from it.
fn on_sink_thread<S, F, Fut>(
    make: F,
    snap: &Arc<Snapshot>,
    pushes: usize,
    seen: impl Fn() -> Seen + Send + 'static,
) -> Vec<(Measured, Seen)>
where
    S: Sink,
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = S>,
{
    let snap = snap.clone();
    std::thread::Builder::new()
        .name("push-sink".into())
        .spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("sink runtime");
            rt.block_on(async move {
                let sink = make().await;
                let mut out = Vec::with_capacity(pushes);
                for _ in 0..pushes {
                    let m = measure(&sink, &snap).await;
                    out.push((m, seen()));
                }
                out
            })
        })
        .expect("spawn sink thread")
        .join()
        .expect("sink thread panicked")
}

/// What the receiving side saw for one push.
#[derive(Default, Clone, Copy)]
struct Seen {
    requests: usize,
    series: usize,
    proto_bytes: usize,
    /// Protobuf bytes of the largest request.
    max_proto_bytes: usize,
    /// HTTP body bytes as they arrived (compressed when gzip); OTLP/HTTP only.
    body_bytes: Option<usize>,
    /// Client-to-server TCP bytes through the proxy.
    wire_bytes: u64,
    errors: usize,
}

struct Row {
    output: String,
    push: &'static str,
    m: Measured,
    seen: Seen,
}

const OTLP_TIMEOUT: Duration = Duration::from_secs(27);

/// What the receiver got since the last call (then forgotten), and the proxy's bytes.
fn otlp_seen(rx: &OtlpReceiver, up: &AtomicU64) -> Seen {
    use opentelemetry_proto::tonic::metrics::v1::metric::Data;
    let got = rx.received();
    rx.clear();
    let series = got
        .iter()
        .flat_map(|r| &r.request.resource_metrics)
        .flat_map(|r| &r.scope_metrics)
        .flat_map(|s| &s.metrics)
        .map(|m| match &m.data {
            Some(Data::Gauge(g)) => g.data_points.len(),
            Some(Data::Sum(s)) => s.data_points.len(),
            Some(Data::Histogram(h)) => h.data_points.len(),
            Some(Data::ExponentialHistogram(h)) => h.data_points.len(),
            Some(Data::Summary(s)) => s.data_points.len(),
            None => 0,
        })
        .sum();
    Seen {
        requests: got.len(),
        series,
        proto_bytes: got.iter().map(|r| r.proto_bytes).sum(),
        max_proto_bytes: got.iter().map(|r| r.proto_bytes).max().unwrap_or(0),
        body_bytes: got
            .iter()
            .map(|r| r.wire_bytes)
            .sum::<Option<usize>>()
            .filter(|_| !got.is_empty()),
        wire_bytes: up.swap(0, Ordering::Relaxed),
        errors: 0,
    }
}

fn run_otlp(
    rt: &tokio::runtime::Runtime,
    snap: &Arc<Snapshot>,
    protocol: &'static str,
    compression: &'static str,
    repeats: usize,
    rows: &mut Vec<Row>,
) {
    let label = match protocol {
        "grpc" => format!("OTLP/gRPC, {compression}"),
        _ => format!("OTLP/HTTP protobuf, {compression}"),
    };
    for rep in 0..repeats {
        let rx = rt.block_on(OtlpReceiver::start());
        let target = if protocol == "grpc" {
            rx.grpc_addr
        } else {
            rx.http_addr
        };
        let px = rt.block_on(proxy(target));
        let endpoint = if protocol == "grpc" {
            format!("http://{}", px.addr)
        } else {
            format!("http://{}/v1/metrics", px.addr)
        };
        let cfg = OtlpOptions {
            otlp_protocol: Some(protocol.into()),
            otlp_endpoint: Some(endpoint),
            otlp_compression: Some(compression.into()),
            ..Default::default()
        };
        let bounds = OtlpBounds {
            timeout: Some(OTLP_TIMEOUT),
            max_response_bytes: None,
        };
        let resource = OtlpResource {
            cluster_name: "bench-cluster".into(),
            role: "cluster".into(),
            node_name: None,
            project: "bench-project".into(),
            location: "us-central1".into(),
            instance_id: "bench-pod-uid".into(),
            host_id: String::new(),
        };
        let rx = Arc::new(rx);
        let (rx2, up) = (rx.clone(), px.up.clone());
        let measured = on_sink_thread(
            move || async move {
                let config = cfg.resolve_with(bounds, &|_| None).expect("OTLP config");
                OtlpSink::new(config, &resource).expect("OTLP sink")
            },
            snap,
            2,
            move || otlp_seen(&rx2, &up),
        );
        for ((m, seen), push) in measured
            .into_iter()
            .zip(["1st (fresh sink)", "2nd (same sink)"])
        {
            eprintln!(
                "push: {label} #{} {push}: {:?}, {} request(s), {} series, {} wire bytes{}",
                rep + 1,
                m.wall,
                seen.requests,
                seen.series,
                seen.wire_bytes,
                m.result
                    .as_ref()
                    .err()
                    .map_or(String::new(), |e| format!(", failed: {}", e.message)),
            );
            rows.push(Row {
                output: label.clone(),
                push,
                m,
                seen,
            });
        }
        drop(px);
        drop(rx);
    }
}

fn run_gcm(
    rt: &tokio::runtime::Runtime,
    snap: &Arc<Snapshot>,
    repeats: usize,
    rows: &mut Vec<Row>,
) {
    for rep in 0..repeats {
        let gcm = rt.block_on(GcmStandIn::start());
        let target: SocketAddr = gcm
            .url
            .trim_start_matches("http://")
            .parse()
            .expect("stand-in address");
        let px = rt.block_on(proxy(target));
        let cfg = GcmConfig {
            client: GcmClientConfig {
                endpoint: Some(format!("http://{}", px.addr)),
                anonymous: true,
                ..Default::default()
            },
            // As the app sets it with the default --sink-timeout of 30 s.
            push_deadline: Duration::from_secs(27),
            ..Default::default()
        };
        let measured = on_sink_thread(
            move || async move { GcmSink::new(cfg).await.expect("GCM sink") },
            snap,
            1,
            Seen::default,
        );
        let writes = gcm.writes();
        let seen = Seen {
            requests: writes.len(),
            series: writes.iter().map(|c| c.written).sum(),
            proto_bytes: writes.iter().map(|c| c.bytes).sum(),
            max_proto_bytes: writes.iter().map(|c| c.bytes).max().unwrap_or(0),
            body_bytes: None,
            wire_bytes: px.up.load(Ordering::Relaxed),
            errors: writes.iter().filter(|c| c.code != tonic::Code::Ok).count(),
        };
        let max_series = writes.iter().map(|c| c.series).max().unwrap_or(0);
        if let Some(first) = gcm.errors().first() {
            eprintln!(
                "push: GCM stand-in error: {:?} {}",
                first.code, first.message
            );
        }
        let m = measured.into_iter().next().expect("one push").0;
        eprintln!(
            "push: GCM #{}: {:?}, {} request(s), at most {max_series} series per request",
            rep + 1,
            m.wall,
            writes.len()
        );
        rows.push(Row {
            output: "Cloud Monitoring".into(),
            push: "1st (fresh sink)",
            m,
            seen,
        });
        drop(px);
        drop(gcm);
    }
}

// ---------------------------------------------------------------------------------------
// The report.

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn min(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::INFINITY, f64::min)
}

fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` does not: then do nothing.
    if !std::env::args().any(|a| a == "--bench") {
        println!("push: benchmark only; run `cargo bench --bench push`");
        return;
    }
    let nodes = env_usize("NODES", 5000);
    let pods_per_node = env_usize("PODS_PER_NODE", 30);
    let repeats = env_usize("REPEATS", 3).max(1);
    assert!(nodes > 0, "NODES must be at least 1");
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let tck = clk_tck();
    let tick_ms = 1000.0 / tck as f64;
    let load_start = loadavg();

    // The stand-ins' runtime: one worker thread, apart from the sink threads.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("standin")
        .enable_all()
        .build()
        .expect("stand-in runtime");

    eprintln!("push: building the snapshot ({nodes} nodes x {pods_per_node} pods)");
    let built = build_snapshot(&rt, nodes, pods_per_node);
    let snap = built.snap.clone();
    let rss_after_build = rss_kib(std::process::id()).0;
    eprintln!(
        "push: snapshot of {} nodes, {} pods in {:.1?}; {} Prometheus series",
        built.nodes, built.pods, built.took, built.prom_series
    );
    let outage_secs = env_usize("OUTAGE_SECS", 0) as u64;
    if outage_secs > 0 {
        outage::run(&rt, &built, outage_secs);
        return;
    }

    let mut rows = Vec::new();
    for (protocol, compression) in [
        ("grpc", "gzip"),
        ("grpc", "none"),
        ("http/protobuf", "gzip"),
        ("http/protobuf", "none"),
    ] {
        run_otlp(&rt, &snap, protocol, compression, repeats, &mut rows);
    }
    run_gcm(&rt, &snap, repeats, &mut rows);
    let load_end = loadavg();

    // Group rows by (output, push), in order of first appearance.
    let mut groups: Vec<(String, &'static str, Vec<&Row>)> = Vec::new();
    for r in &rows {
        match groups
            .iter_mut()
            .find(|(o, p, _)| *o == r.output && *p == r.push)
        {
            Some(g) => g.2.push(r),
            None => groups.push((r.output.clone(), r.push, vec![r])),
        }
    }

    println!(
        "# Push outputs at {} nodes\n",
        thousands(built.nodes as u64)
    );
    println!(
        "Snapshot: {} nodes, {} pods, {} DaemonSets, {} Deployments; built in {:.1} s (generate, \
         derive, record). Prometheus text of the same snapshot: {} series, {} bytes.\n",
        thousands(built.nodes as u64),
        thousands(built.pods as u64),
        built.daemon_sets,
        thousands(built.deployments as u64),
        built.took.as_secs_f64(),
        thousands(built.prom_series as u64),
        thousands(built.prom_bytes as u64),
    );
    println!("Each push: {repeats} runs, each with a fresh sink and stand-in; min / median.\n");
    println!(
        "| output | push | wall ms | sink CPU ms (utime+stime) | sink on-CPU ms (schedstat) | process CPU ms | sink heap peak MiB | failed |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|");
    for (output, push, rs) in &groups {
        let wall: Vec<f64> = rs.iter().map(|r| ms(r.m.wall)).collect();
        let cpu: Vec<f64> = rs
            .iter()
            .map(|r| r.m.thread_ticks as f64 * tick_ms)
            .collect();
        let on_cpu: Vec<f64> = rs
            .iter()
            .filter_map(|r| r.m.thread_ns.map(|n| n as f64 / 1e6))
            .collect();
        let proc_cpu: Vec<f64> = rs
            .iter()
            .map(|r| r.m.process_ticks as f64 * tick_ms)
            .collect();
        let heap: Vec<f64> = rs
            .iter()
            .map(|r| r.m.heap_peak as f64 / 1024.0 / 1024.0)
            .collect();
        let failed = rs.iter().filter(|r| r.m.result.is_err()).count();
        let on_cpu_s = if on_cpu.is_empty() {
            "n/a".to_string()
        } else {
            format!("{:.0} / {:.0}", min(&on_cpu), median(on_cpu.clone()))
        };
        println!(
            "| {output} | {push} | {:.0} / {:.0} | {:.0} / {:.0} | {on_cpu_s} | {:.0} / {:.0} | {:.1} / {:.1} | {failed} of {} |",
            min(&wall),
            median(wall.clone()),
            min(&cpu),
            median(cpu.clone()),
            min(&proc_cpu),
            median(proc_cpu.clone()),
            min(&heap),
            median(heap.clone()),
            rs.len(),
        );
    }
    println!();
    println!(
        "| output | push | points (PushReport) | requests (PushReport) | series received | requests received | protobuf bytes | largest request (protobuf bytes) | HTTP body bytes | wire bytes (client→server TCP) | protobuf bytes / point | wire bytes / point |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (output, push, rs) in &groups {
        // Sizes from the middle run; runs that disagree are named on stderr.
        let r = rs[rs.len() / 2];
        let (points, requests) = match &r.m.result {
            Ok(p) => (p.points, p.requests),
            Err(e) => (e.sent.points, e.sent.requests),
        };
        let body = r
            .seen
            .body_bytes
            .map_or("—".to_string(), |b| thousands(b as u64));
        let per = |b: f64| {
            if points > 0 {
                format!("{:.1}", b / points as f64)
            } else {
                "—".into()
            }
        };
        println!(
            "| {output} | {push} | {} | {} | {} | {} | {} | {} | {body} | {} | {} | {} |",
            thousands(points),
            thousands(requests),
            thousands(r.seen.series as u64),
            thousands(r.seen.requests as u64),
            thousands(r.seen.proto_bytes as u64),
            thousands(r.seen.max_proto_bytes as u64),
            thousands(r.seen.wire_bytes),
            per(r.seen.proto_bytes as f64),
            per(r.seen.wire_bytes as f64),
        );
        let differ: Vec<String> = rs
            .iter()
            .filter(|o| o.seen.proto_bytes != r.seen.proto_bytes || o.seen.series != r.seen.series)
            .map(|o| format!("{} bytes / {} series", o.seen.proto_bytes, o.seen.series))
            .collect();
        if !differ.is_empty() {
            eprintln!("push: {output} {push}: runs differ: {differ:?}");
        }
    }
    println!();
    for r in &rows {
        if let Err(e) = &r.m.result {
            println!(
                "- {} {} failed: {} ({})",
                r.output, r.push, e.message, e.reason
            );
        }
        if r.seen.errors > 0 {
            println!(
                "- {} {}: {} request(s) answered with an error by the stand-in",
                r.output, r.push, r.seen.errors
            );
        }
    }
    println!(
        "- Bench process VmRSS after building the snapshot: {:.0} MiB; at the end: {:.0} MiB.",
        mib(rss_after_build),
        mib(rss_kib(std::process::id()).0)
    );
    println!("- CLK_TCK {tck}: sink CPU (utime+stime) resolution is {tick_ms:.0} ms per push.");
    println!("- Load average (1/5/15 min) at start: {load_start}; at end: {load_end}.");
    let info = machine_info()
        .into_iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ");
    println!("- Machine: {info}.");
}

// ---------------------------------------------------------------------------------------
// A long outage (`OUTAGE_SECS`).

mod outage {
    use super::*;
    use kube_prober::model::SinkStatus;
    use kube_prober::outputs::published::Published;
    use kube_prober::outputs::push::{SinkSchedule, run_sink};
    use otlp_support::{Failure, points_of};
    use tokio::sync::watch;
    use tokio_util::sync::CancellationToken;

    const OUTPUTS: [&str; 3] = ["OTLP/gRPC", "OTLP/HTTP", "Cloud Monitoring"];

    fn free_addr() -> SocketAddr {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
        l.local_addr().expect("its address")
    }

    /// One minute's sample: minutes since the start, RSS in KiB, each output's counters.
    struct Sample {
        minute: u64,
        rss_kib: u64,
        sinks: Vec<SinkStatus>,
    }

    /// Least-squares slope of `(x, y)`, in y per x.
    fn slope(points: &[(f64, f64)]) -> f64 {
        let n = points.len() as f64;
        if n < 2.0 {
            return 0.0;
        }
        let (sx, sy) = points
            .iter()
            .fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y));
        let (mx, my) = (sx / n, sy / n);
        let num: f64 = points.iter().map(|(x, y)| (x - mx) * (y - my)).sum();
        let den: f64 = points.iter().map(|(x, _)| (x - mx) * (x - mx)).sum();
        if den == 0.0 { 0.0 } else { num / den }
    }

    /// The three sinks' counters, in [`OUTPUTS`] order (the OTLP sinks record under their
    /// own stores, so each output has a store of its own).
    fn statuses(stores: &[Arc<Store>; 3]) -> Vec<SinkStatus> {
        stores
            .iter()
            .zip(["otlp", "otlp", "gcm"])
            .map(|(s, name)| {
                s.snapshot(SystemTime::now())
                    .sinks
                    .get(name)
                    .cloned()
                    .unwrap_or_default()
            })
            .collect()
    }

    fn otlp_sink(protocol: &str, endpoint: String) -> OtlpSink {
        let config = OtlpOptions {
            otlp_protocol: Some(protocol.into()),
            otlp_endpoint: Some(endpoint),
            ..Default::default()
        }
        .resolve_with(
            OtlpBounds {
                timeout: Some(OTLP_TIMEOUT),
                ..Default::default()
            },
            &|_| None,
        )
        .expect("OTLP config");
        OtlpSink::new(config, &OtlpResource::default()).expect("OTLP sink")
    }

    pub(super) fn run(rt: &tokio::runtime::Runtime, built: &Built, secs: u64) {
        let refusing = std::env::var("OUTAGE_MODE").is_ok_and(|m| m == "refusing");
        let interval = Duration::from_secs(env_usize("OUTAGE_INTERVAL", 60).max(1) as u64);
        let (grpc, http, gcm_addr) = (free_addr(), free_addr(), free_addr());
        let period = Duration::from_secs(10);
        // Refusing: the stand-ins run from the start and refuse everything.
        let mut otlp_rx = None;
        let mut gcm = None;
        if refusing {
            let rx = rt.block_on(OtlpReceiver::start_on(grpc, http));
            rx.fail_next_with(usize::MAX / 2, Failure::Refused);
            otlp_rx = Some(rx);
            let g = rt.block_on(GcmStandIn::with_period_on(gcm_addr, period));
            g.fail_next(1 << 24, tonic::Code::InvalidArgument);
            gcm = Some(g);
        }
        let published = Arc::new(Published::render(built.snap.clone(), "cluster"));
        let (_tx, rx) = watch::channel(published);
        let stores = [(); 3].map(|()| Arc::new(Store::new()));
        let cancel = CancellationToken::new();
        let schedule = SinkSchedule {
            interval,
            timeout: interval.min(Duration::from_secs(30)),
            final_push: Duration::ZERO,
        };
        // The OTLP sinks' gRPC channel is made on the runtime.
        let (grpc_sink, http_sink) = {
            let _enter = rt.enter();
            (
                Arc::new(otlp_sink("grpc", format!("http://{grpc}"))),
                Arc::new(otlp_sink(
                    "http/protobuf",
                    format!("http://{http}/v1/metrics"),
                )),
            )
        };
        let gcm_sink = Arc::new(
            rt.block_on(GcmSink::new(GcmConfig {
                client: GcmClientConfig {
                    endpoint: Some(format!("http://{gcm_addr}")),
                    anonymous: true,
                    ..Default::default()
                },
                // As the app sets it: 0.9 of the push timeout.
                push_deadline: schedule.timeout.mul_f64(0.9),
                ..Default::default()
            }))
            .expect("GCM sink"),
        );
        let tasks = vec![
            rt.spawn(run_sink(
                grpc_sink,
                schedule,
                rx.clone(),
                stores[0].clone(),
                None,
                cancel.clone(),
            )),
            rt.spawn(run_sink(
                http_sink,
                schedule,
                rx.clone(),
                stores[1].clone(),
                None,
                cancel.clone(),
            )),
            rt.spawn(run_sink(
                gcm_sink.clone(),
                schedule,
                rx.clone(),
                stores[2].clone(),
                None,
                cancel.clone(),
            )),
        ];
        let pid = std::process::id();
        let start = Instant::now();
        let mut samples = vec![Sample {
            minute: 0,
            rss_kib: rss_kib(pid).0,
            sinks: statuses(&stores),
        }];
        let minutes = secs.div_ceil(60);
        for minute in 1..=minutes {
            let due = start + Duration::from_secs(60 * minute);
            std::thread::sleep(due.saturating_duration_since(Instant::now()));
            let s = Sample {
                minute,
                rss_kib: rss_kib(pid).0,
                sinks: statuses(&stores),
            };
            eprintln!(
                "push outage: minute {minute}: RSS {:.1} MiB; pushes {:?}; dropped {:?}",
                mib(s.rss_kib),
                s.sinks.iter().map(|x| x.pushes).collect::<Vec<_>>(),
                s.sinks
                    .iter()
                    .map(|x| x.dropped.values().sum::<u64>())
                    .collect::<Vec<_>>(),
            );
            samples.push(s);
        }
        let tracked = gcm_sink.stats().tracked_series;
        // The receivers come back.
        let before = statuses(&stores);
        if refusing {
            if let Some(rx) = &otlp_rx {
                rx.fail_next(0);
            }
            if let Some(g) = &gcm {
                g.lock().faults.clear();
            }
        } else {
            otlp_rx = Some(rt.block_on(OtlpReceiver::start_on(grpc, http)));
            gcm = Some(rt.block_on(GcmStandIn::with_period_on(gcm_addr, period)));
        }
        let back = Instant::now();
        while statuses(&stores)
            .iter()
            .zip(&before)
            .any(|(now, then)| now.pushes <= then.pushes)
            && back.elapsed() < interval * 3 + Duration::from_secs(60)
        {
            std::thread::sleep(Duration::from_millis(200));
        }
        cancel.cancel();
        for t in tasks {
            let _ = rt.block_on(t);
        }
        let after = statuses(&stores);
        report(
            &samples, &before, &after, built, secs, interval, refusing, tracked,
        );
        if let (Some(rx), Some(g)) = (&otlp_rx, &gcm) {
            let mut by_transport: std::collections::BTreeMap<&str, u64> = Default::default();
            for r in rx.received() {
                *by_transport.entry(r.transport).or_default() += points_of(&r.request);
            }
            let written: usize = g.writes().iter().map(|c| c.written).sum();
            println!(
                "- Received after the outage: OTLP/gRPC {} points, OTLP/HTTP {} points, Cloud Monitoring {} series, from the first push of each.",
                thousands(by_transport.get("grpc").copied().unwrap_or(0)),
                thousands(by_transport.get("http").copied().unwrap_or(0)),
                thousands(written as u64),
            );
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn report(
        samples: &[Sample],
        before: &[SinkStatus],
        after: &[SinkStatus],
        built: &Built,
        secs: u64,
        interval: Duration,
        refusing: bool,
        tracked: usize,
    ) {
        let mode = if refusing {
            "refusing every request"
        } else {
            "dead (nothing listens)"
        };
        println!(
            "# Push outputs over a {}-minute outage at {} nodes\n",
            secs / 60,
            thousands(built.nodes as u64)
        );
        println!(
            "Receivers {mode}; one push every {} s per output; {} pods. RSS of the whole bench process (snapshot, its /metrics rendering, three sinks).\n",
            interval.as_secs(),
            thousands(built.pods as u64)
        );
        println!(
            "| minute | RSS MiB | pushes (gRPC / HTTP / GCM) | points dropped (gRPC / HTTP / GCM) |"
        );
        println!("|---:|---:|---|---|");
        for s in samples {
            let p: Vec<String> = s.sinks.iter().map(|x| x.pushes.to_string()).collect();
            let d: Vec<String> = s
                .sinks
                .iter()
                .map(|x| thousands(x.dropped.values().sum::<u64>()))
                .collect();
            println!(
                "| {} | {:.1} | {} | {} |",
                s.minute,
                mib(s.rss_kib),
                p.join(" / "),
                d.join(" / ")
            );
        }
        let from = if samples.len() > 6 { 5 } else { 0 };
        let steady: Vec<(f64, f64)> = samples
            .iter()
            .filter(|s| s.minute >= from)
            .map(|s| (s.minute as f64 / 60.0, mib(s.rss_kib)))
            .collect();
        let rss: Vec<f64> = steady.iter().map(|(_, y)| *y).collect();
        println!();
        println!(
            "- RSS from minute {from} on: min {:.1} MiB, max {:.1} MiB, slope {:+.2} MiB/hour (least squares over {} samples).",
            rss.iter().copied().fold(f64::INFINITY, f64::min),
            rss.iter().copied().fold(0.0, f64::max),
            slope(&steady),
            steady.len()
        );
        for (i, name) in OUTPUTS.iter().enumerate() {
            let b = &before[i];
            let ticks = b.pushes + b.skipped;
            let per = b.dropped.values().sum::<u64>() / ticks.max(1);
            println!(
                "- {name}: {} pushes and {} skipped ticks in the outage, {} points accepted, dropped {:?} ({} per tick); after it: {} push(es), {} points accepted.",
                b.pushes,
                b.skipped,
                b.points,
                b.dropped,
                thousands(per),
                after[i].pushes - b.pushes,
                thousands(after[i].points - b.points),
            );
        }
        println!(
            "- Cloud Monitoring series the sink remembers at the end of the outage: {}.",
            thousands(tracked as u64)
        );
        println!("- Load average (1/5/15 min) at the end: {}.", loadavg());
    }
}
