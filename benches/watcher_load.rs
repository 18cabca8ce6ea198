//! `GET /watcher` (all hosts) at 5,000 nodes under load on loopback: kube-prober's real router
//! against a minimal axum server that returns the same bytes (the ceiling).
//!
//! Run with `cargo bench --bench watcher_load` (env `DURATION_SECS`, default 10; `CONNECTIONS`,
//! default 8). The data goes through the public API: 5,000 nodes, 15 CPU and memory samples
//! each, one minute apart, recorded by source `host`; one snapshot; one `Published::render`.
//! Both servers run in this process, in one tokio multi-thread runtime with 2 worker threads,
//! one after the other, on 127.0.0.1. The load comes from `wrk` (`-t1`, `CONNECTIONS`
//! keep-alive connections, 2 s warm-up, then `DURATION_SECS` measured): requests per second and
//! the p50/p99 latency wrk reports. Also measured in-process: the average of 10
//! `Published::render` calls of the snapshot, the cost paid once per tick. The result is a
//! markdown report on stdout. `GZIP=1`: every request asks for gzip and both servers answer
//! with the gzip body. `RENDER_NODES=N`: no servers, only the `/watcher` tick cost at N nodes
//! (see `render_only`).
//!
//! Under `cargo test --benches` (no `--bench` argument) it does nothing.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use axum::Router;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use bytes::Bytes;
use kube_prober::hub::{Provider, RunOutcome, Store};
use kube_prober::model::{Resource, UsageSample};
use kube_prober::outputs::published::Published;
use kube_prober::serve::server::{AppState, router};
use tokio::runtime::Runtime;
use tokio::sync::{oneshot, watch};

mod common;

const WRK: &str = "/usr/bin/wrk";
const NODES: usize = 5_000;
const SAMPLES: u64 = 15;
const SOURCE: &str = "host";
const WARMUP_SECS: u64 = 2;
const RENDERS: u32 = 10;
const WORKER_THREADS: usize = 2;

/// splitmix64: deterministic, well-spread values without a dependency.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// GKE-like node names: `gke-pool-<n>-<8 hex>-<4 digits>`, 1,000 nodes per pool.
fn node_name(i: usize) -> String {
    let pool = i / 1000 + 1;
    let hash = (pool as u32).wrapping_mul(0x9E37_79B1) ^ 0xabcd_1234;
    format!("gke-pool-{pool}-{hash:08x}-{i:04}")
}

/// A store holding `NODES` nodes with `SAMPLES` samples each, the newest at `now - 1 s`.
fn fill_store(now: SystemTime) -> Store {
    fill_store_of(now, NODES)
}

fn fill_store_of(now: SystemTime, nodes: usize) -> Store {
    let store = Store::new();
    store.source().register_source(SOURCE);
    let mut rng = Rng(0x5eed);
    let newest = now - Duration::from_secs(1);
    for i in 0..nodes {
        let name = node_name(i);
        // Each node has its own level; samples wander around it.
        let cpu_base = 0.05 + 0.8 * rng.unit();
        let mem_base = 0.2 + 0.7 * rng.unit();
        for k in 0..SAMPLES {
            let at = newest - Duration::from_secs(60 * (SAMPLES - 1 - k));
            let cpu = (cpu_base + 0.15 * (rng.unit() - 0.5)).clamp(0.0, 1.0);
            let mem = (mem_base + 0.05 * (rng.unit() - 0.5)).clamp(0.0, 1.0);
            store.node().record_node_usage(
                SOURCE,
                UsageSample {
                    node: name.clone(),
                    at,
                    values: vec![(Resource::Cpu, cpu), (Resource::Memory, mem)],
                },
            );
        }
    }
    store
        .source()
        .record_source_run(SOURCE, newest, Duration::from_millis(12), RunOutcome::Ok);
    store
}

fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a whole number")),
        Err(_) => default,
    }
}

fn machine_info() -> Vec<(&'static str, String)> {
    // `wrk -v` prints its version line and exits non-zero; take the first line either way.
    let mut info = common::machine_info();
    info.push(("wrk", common::first_line(WRK, &["-v"])));
    info
}

/// One server running on the shared runtime; stopped (gracefully, bounded) by `stop`.
struct Running {
    addr: SocketAddr,
    shutdown: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

fn start(rt: &Runtime, app: Router) -> Running {
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("cannot bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("local_addr");
    assert!(addr.ip().is_loopback(), "listening on {addr}, not loopback");
    let (shutdown, stop) = oneshot::channel::<()>();
    let task = rt.spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = stop.await;
            })
            .await
    });
    Running {
        addr,
        shutdown,
        task,
    }
}

impl Running {
    fn stop(self, rt: &Runtime) {
        let _ = self.shutdown.send(());
        rt.block_on(async {
            match tokio::time::timeout(Duration::from_secs(10), self.task).await {
                Ok(Ok(Ok(()))) => {}
                Ok(Ok(Err(e))) => panic!("server on {} failed: {e}", self.addr),
                Ok(Err(e)) => panic!("server task on {} panicked: {e}", self.addr),
                Err(_) => eprintln!(
                    "watcher_load: server on {} did not stop within 10 s; going on",
                    self.addr
                ),
            }
        });
    }
}

/// One GET through reqwest: the served body and Content-Type must match what was rendered.
/// `GZIP=1`: every request asks for gzip (as Go's client, which Trimaran uses) and both servers
/// answer with the gzip body; otherwise no `Accept-Encoding` and the plain body.
fn gzip_mode() -> bool {
    std::env::var("GZIP").is_ok_and(|v| v.trim() == "1")
}

fn check_body(rt: &Runtime, url: &str, want: &Bytes) {
    let (status, ctype, body) = rt.block_on(async {
        let client = reqwest::Client::builder()
            .no_proxy()
            .no_gzip()
            .http1_only()
            .timeout(Duration::from_secs(30))
            .build()
            .expect("reqwest client");
        let mut req = client.get(url);
        if gzip_mode() {
            req = req.header(reqwest::header::ACCEPT_ENCODING, "gzip");
        }
        let resp = req
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {url}: {e}"));
        let status = resp.status();
        let ctype = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        let body = resp
            .bytes()
            .await
            .unwrap_or_else(|e| panic!("GET {url} body: {e}"));
        (status, ctype, body)
    });
    assert_eq!(status, reqwest::StatusCode::OK, "GET {url}");
    assert_eq!(ctype, "application/json", "GET {url} Content-Type");
    assert!(
        body == *want,
        "GET {url}: {} bytes served, not the {} rendered",
        body.len(),
        want.len()
    );
}

/// What one wrk run reported.
struct WrkResult {
    requests: u64,
    rps: f64,
    p50_us: f64,
    p99_us: f64,
    /// `Socket errors: ...` and `Non-2xx or 3xx responses: ...` lines, if any.
    errors: Vec<String>,
}

/// `4.99ms`, `850.00us`, `1.02s`, `1.00m`, `1.00h` to microseconds.
fn parse_wrk_time(s: &str) -> Option<f64> {
    let (num, scale) = if let Some(n) = s.strip_suffix("us") {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix("ms") {
        (n, 1e3)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1e6)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60e6)
    } else if let Some(n) = s.strip_suffix('h') {
        (n, 3600e6)
    } else {
        return None;
    };
    num.parse::<f64>().ok().map(|v| v * scale)
}

fn parse_wrk(out: &str) -> Option<WrkResult> {
    let mut rps = None;
    let mut p50 = None;
    let mut p99 = None;
    let mut requests = None;
    let mut errors = Vec::new();
    for line in out.lines().map(str::trim) {
        let mut words = line.split_whitespace();
        match words.next() {
            Some("Requests/sec:") => rps = words.next().and_then(|v| v.parse::<f64>().ok()),
            Some("50%") => p50 = words.next().and_then(parse_wrk_time),
            Some("99%") => p99 = words.next().and_then(parse_wrk_time),
            Some(n) if line.contains(" requests in ") => requests = n.parse::<u64>().ok(),
            _ if line.starts_with("Socket errors:") || line.starts_with("Non-2xx") => {
                errors.push(line.to_string());
            }
            _ => {}
        }
    }
    Some(WrkResult {
        requests: requests?,
        rps: rps?,
        p50_us: p50?,
        p99_us: p99?,
        errors,
    })
}

/// Runs wrk against `url` for `secs` seconds; kills it if it overruns by 30 s.
fn run_wrk(url: &str, connections: u64, secs: u64) -> (WrkResult, String) {
    let mut args = vec![
        "-t1".to_string(),
        format!("-c{connections}"),
        format!("-d{secs}s"),
        "--timeout".to_string(),
        "10s".to_string(),
        "--latency".to_string(),
        url.to_string(),
    ];
    if gzip_mode() {
        args.splice(
            0..0,
            ["-H".to_string(), "Accept-Encoding: gzip".to_string()],
        );
    }
    let mut cmd = Command::new(WRK);
    cmd.args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child =
        support::owned::spawn(cmd).unwrap_or_else(|e| panic!("cannot start {WRK}: {e}"));
    let deadline = Instant::now() + Duration::from_secs(secs + 30);
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "wrk {} overran its {secs} s by 30 s; killed",
                    args.join(" ")
                );
            }
            Err(e) => panic!("waiting for wrk: {e}"),
        }
    }
    let out = child.wait_with_output().expect("wrk output");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "wrk {} failed ({}):\n{stdout}{stderr}",
        args.join(" "),
        out.status
    );
    let res = parse_wrk(&stdout).unwrap_or_else(|| {
        panic!(
            "cannot read wrk's output of `wrk {}`:\n{stdout}{stderr}",
            args.join(" ")
        )
    });
    assert!(res.requests > 0, "wrk completed no requests:\n{stdout}");
    (res, format!("wrk {}", args.join(" ")))
}

struct Measured {
    name: &'static str,
    body_bytes: usize,
    wrk: WrkResult,
}

/// Starts `app`, checks one response, warms up, measures, stops.
fn measure(
    rt: &Runtime,
    name: &'static str,
    app: Router,
    body: &Bytes,
    connections: u64,
    secs: u64,
) -> (Measured, String) {
    let server = start(rt, app);
    let url = format!("http://{}/watcher", server.addr);
    check_body(rt, &url, body);
    eprintln!("watcher_load: {name}: {WARMUP_SECS} s warm-up, then {secs} s on {url}");
    let (warm, _) = run_wrk(&url, connections, WARMUP_SECS);
    assert!(
        warm.errors.is_empty(),
        "{name}: warm-up errors: {:?}",
        warm.errors
    );
    let (res, cmd) = run_wrk(&url, connections, secs);
    server.stop(rt);
    (
        Measured {
            name,
            body_bytes: body.len(),
            wrk: res,
        },
        cmd,
    )
}

fn group_thousands(n: usize) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn fmt_latency(us: f64) -> String {
    if us >= 1000.0 {
        format!("{:.2} ms", us / 1000.0)
    } else {
        format!("{us:.0} µs")
    }
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` does not: then do nothing.
    if !std::env::args().any(|a| a == "--bench") {
        println!("watcher_load: benchmark only; run `cargo bench --bench watcher_load`");
        return;
    }
    if let Ok(n) = std::env::var("RENDER_NODES") {
        let n: usize = n
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("RENDER_NODES={n:?} is not a whole number"));
        render_only(n);
        return;
    }
    if !Path::new(WRK).is_file() {
        eprintln!("watcher_load: {WRK} not found; install it with `apt-get install wrk`");
        std::process::exit(1);
    }
    let secs = env_u64("DURATION_SECS", 10);
    assert!(
        (1..=600).contains(&secs),
        "DURATION_SECS must be 1..=600, not {secs}"
    );
    let connections = env_u64("CONNECTIONS", 8);
    assert!(
        (1..=1000).contains(&connections),
        "CONNECTIONS must be 1..=1000, not {connections}"
    );

    // The data, through the public API.
    let now = SystemTime::now();
    let t = Instant::now();
    let store = fill_store(now);
    let fill = t.elapsed();
    let t = Instant::now();
    let snap = Arc::new(store.snapshot(now));
    let snapshot_took = t.elapsed();
    assert_eq!(snap.nodes.len(), NODES, "nodes in the snapshot");
    let published = Published::render(snap.clone(), SOURCE);
    assert!(published.watcher_healthy, "source `{SOURCE}` is not up");
    let all: Bytes = published
        .watcher
        .as_ref()
        .expect("no /watcher body was rendered")
        .all();
    let decoded: kube_prober::watcher::WatcherMetrics =
        serde_json::from_slice(&all).expect("the /watcher body does not decode");
    assert_eq!(decoded.window.duration, "15m");
    assert_eq!(decoded.data.node_metrics_map.len(), NODES);
    let metrics_per_node = decoded
        .data
        .node_metrics_map
        .values()
        .next()
        .map_or(0, |n| n.metrics.len());
    eprintln!(
        "watcher_load: {NODES} nodes x {SAMPLES} samples recorded in {:.0} ms, snapshot in {:.1} ms; \
         /watcher body {} bytes",
        fill.as_secs_f64() * 1e3,
        snapshot_took.as_secs_f64() * 1e3,
        all.len()
    );

    // Tick-time cost: one Published::render (Prometheus text + /watcher; OpenMetrics is lazy).
    let mut renders = Vec::with_capacity(RENDERS as usize);
    for _ in 0..RENDERS {
        let t = Instant::now();
        let p = Published::render(snap.clone(), SOURCE);
        renders.push(t.elapsed());
        std::hint::black_box(p);
    }
    let render_avg = renders.iter().sum::<Duration>() / RENDERS;
    let render_min = renders.iter().min().copied().unwrap_or_default();
    let render_max = renders.iter().max().copied().unwrap_or_default();

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(WORKER_THREADS)
        .enable_all()
        .build()
        .expect("tokio runtime");

    // What is served: the plain body, or with GZIP=1 the gzip body (made before the load).
    let gzip = gzip_mode();
    let served = match &published.watcher {
        Some(w) if gzip => w.all_gzip().clone(),
        _ => all.clone(),
    };
    // (a) kube-prober's router; the sender stays alive until both runs are done.
    let (tx, rx) = watch::channel(Arc::new(published));
    let app_a = router(AppState {
        published: rx,
        stale_after: Duration::from_secs(3600),
    });
    let (a, cmd) = measure(&rt, "kube-prober router", app_a, &served, connections, secs);

    // (b) the ceiling: one route, the same bytes, the same Content-Type.
    let ceiling_body = served.clone();
    let app_b = Router::new().route(
        "/watcher",
        get(move || {
            let body = ceiling_body.clone();
            async move {
                let mut resp = ([(header::CONTENT_TYPE, "application/json")], body).into_response();
                if gzip {
                    resp.headers_mut().insert(
                        header::CONTENT_ENCODING,
                        header::HeaderValue::from_static("gzip"),
                    );
                }
                resp
            }
        }),
    );
    let (b, _) = measure(
        &rt,
        "minimal axum (ceiling)",
        app_b,
        &served,
        connections,
        secs,
    );
    drop(tx);
    rt.shutdown_timeout(Duration::from_secs(5));

    let ratio = a.wrk.rps / b.wrk.rps * 100.0;
    println!("## /watcher at {} nodes\n", group_thousands(NODES));
    println!(
        "`GET /watcher` (all hosts), {} nodes x {SAMPLES} samples (CPU, memory), 15m window, \
         {metrics_per_node} metrics per node; body {} bytes{}. Server: one tokio multi-thread \
         runtime, {WORKER_THREADS} worker threads, 127.0.0.1; load: wrk, 1 thread, \
         {connections} keep-alive connections, {WARMUP_SECS} s warm-up then {secs} s.\n",
        group_thousands(NODES),
        group_thousands(all.len()),
        if gzip {
            format!(
                ", served gzip ({} bytes; every request asks for gzip)",
                group_thousands(served.len())
            )
        } else {
            String::new()
        },
    );
    println!("| server | body bytes | req/s | p50 | p99 | % of ceiling |");
    println!("|---|---:|---:|---:|---:|---:|");
    for r in [&a, &b] {
        println!(
            "| {} | {} | {:.1} | {} | {} | {:.1}% |",
            r.name,
            group_thousands(r.body_bytes),
            r.wrk.rps,
            fmt_latency(r.wrk.p50_us),
            fmt_latency(r.wrk.p99_us),
            r.wrk.rps / b.wrk.rps * 100.0,
        );
    }
    println!();
    for r in [&a, &b] {
        let errors = if r.wrk.errors.is_empty() {
            "no socket errors, all 2xx".to_string()
        } else {
            r.wrk.errors.join("; ")
        };
        println!(
            "- {}: {} requests in {secs} s ({:.0} MB/s of body); {errors}",
            r.name,
            r.wrk.requests,
            r.wrk.rps * r.body_bytes as f64 / 1e6,
        );
    }
    println!(
        "- target, kube-prober >= 80% of the ceiling's req/s: {} ({ratio:.1}%)",
        if ratio >= 80.0 {
            "holds"
        } else {
            "does NOT hold"
        }
    );
    println!();
    println!(
        "Tick-time cost, in-process: `Published::render` of the {}-node snapshot \
         (Prometheus text and the /watcher bodies, all hosts and per host; OpenMetrics is \
         rendered on first request): \
         avg {:.1} ms over {RENDERS} (min {:.1}, max {:.1}).",
        group_thousands(NODES),
        render_avg.as_secs_f64() * 1e3,
        render_min.as_secs_f64() * 1e3,
        render_max.as_secs_f64() * 1e3,
    );
    println!();
    println!("Machine:\n");
    for (k, v) in machine_info() {
        println!("- {k}: {v}");
    }
    println!();
    println!("Command:\n");
    println!(
        "    {}DURATION_SECS={secs} CONNECTIONS={connections} cargo bench --bench watcher_load",
        if gzip { "GZIP=1 " } else { "" }
    );
    println!();
    println!(
        "Load, per server (preceded by a {WARMUP_SECS} s warm-up, the same flags with \
         `-d{WARMUP_SECS}s`):\n"
    );
    println!("    {}", hide_port(&cmd));
}

/// A wrk command line with its URL's random port written as `PORT`.
fn hide_port(cmd: &str) -> String {
    cmd.split_whitespace()
        .map(|w| match w.strip_prefix("http://127.0.0.1:") {
            Some(rest) => {
                let path = rest.find('/').map_or("", |i| &rest[i..]);
                format!("http://127.0.0.1:PORT{path}")
            }
            None => w.to_string(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// `RENDER_NODES=N`: no server, only what a tick costs `/watcher` at N nodes (15 samples each)
/// when every node changed since the previous tick (a new sample for each, as metrics-server's
/// moving timestamps do every 15 s): `render_cached` with the previous tick's cache, then the
/// gzip body (`all_gzip`, made on the first gzip request), then the plain body in one piece
/// (`all`, as a client without gzip reads it); and a tick where nothing changed. One thread;
/// wall time, averaged over the rounds after the first (the first has no cache).
fn render_only(nodes: usize) {
    const ROUNDS: u64 = 6;
    let start = SystemTime::now();
    let store = fill_store_of(start, nodes);
    let mut cache = kube_prober::watcher::WatcherCache::default();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let (mut render, mut gzip, mut plain) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    let mut sizes = (0, 0);
    for k in 0..ROUNDS {
        let at = start + Duration::from_secs(15 * k);
        let mut rng = Rng(k + 1);
        for i in 0..nodes {
            let cpu = rng.unit();
            store.node().record_node_usage(
                SOURCE,
                UsageSample {
                    node: node_name(i),
                    at,
                    values: vec![(Resource::Cpu, cpu), (Resource::Memory, 0.5)],
                },
            );
        }
        let snap = store.snapshot(at);
        let t = Instant::now();
        let bodies = kube_prober::watcher::render_cached(&snap, Default::default(), &mut cache)
            .expect("no /watcher body was rendered");
        let r = t.elapsed();
        let t = Instant::now();
        let gz = bodies.all_gzip().len();
        let g = t.elapsed();
        let t = Instant::now();
        let all = bodies.all().len();
        let p = t.elapsed();
        eprintln!(
            "round {k}: render {:.1} ms, gzip body {:.1} ms ({gz} B), plain body {:.1} ms ({all} B)",
            ms(r),
            ms(g),
            ms(p)
        );
        if k > 0 {
            (render, gzip, plain) = (render + r, gzip + g, plain + p);
        }
        sizes = (gz, all);
    }
    let snap = store.snapshot(start + Duration::from_secs(15 * ROUNDS));
    let t = Instant::now();
    let idle = kube_prober::watcher::render_cached(&snap, Default::default(), &mut cache);
    let idle_took = t.elapsed();
    drop(idle);
    let n = (ROUNDS - 1) as u32;
    println!(
        "/watcher at {} nodes, every node changed (avg of {n} ticks): render_cached {:.1} ms, \
         all_gzip {:.1} ms ({} B), all (plain) {:.1} ms ({} B); a tick without change: {:.3} ms",
        group_thousands(nodes),
        ms(render / n),
        ms(gzip / n),
        group_thousands(sizes.0),
        ms(plain / n),
        group_thousands(sizes.1),
        ms(idle_took)
    );
    println!("    RENDER_NODES={nodes} cargo bench --bench watcher_load");
}
