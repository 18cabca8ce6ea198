//! Cluster role at the largest supported Kubernetes scale: 5,000 nodes and 150,000 pods served
//! by the stand-in API server (`tests/support/apiserver.rs`), plus pod churn.
//!
//! Run with `cargo bench --bench cluster_scale` (env `NODES`, default 5000; `PODS_PER_NODE`,
//! default 30; `CHURN_SECS`, default 60). The stand-in runs in this process (tokio multi-thread
//! runtime, 127.0.0.1, bookmarks every 60 s, NodeMetrics generated so the default
//! KubernetesMetricsServer backend works). The kube-prober binary runs as a child with
//! `--role cluster` and the noisy probes disabled. Measured on the child only:
//! 1. time from spawn to `/readyz` 200 (polled every 100 ms, 180 s limit);
//! 2. VmRSS and VmHWM 15 s after ready (that wait also gives the idle CPU rate);
//! 3. five timed `/metrics` scrapes (bytes, series) and one `/watcher` GET;
//! 4. utime+stime over a churn window of `CHURN_SECS` at 20 pod changes per second, per 1,000
//!    changes, and VmRSS/VmHWM after it.
//!
//! The result is a markdown report on stdout. Under `cargo test --benches` (no `--bench`
//! argument) it does nothing.

#[path = "../tests/support/apiserver.rs"]
mod apiserver;
mod common;

use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use apiserver::{GenerateOptions, Options};
use common::{clk_tck, cpu_ticks, env_usize, loadavg, machine_info, mib, ms, rss_kib};

const CHURN_PER_SEC: f64 = 20.0;
const READY_LIMIT: Duration = Duration::from_secs(180);
const READY_POLL: Duration = Duration::from_millis(100);
const SETTLE: Duration = Duration::from_secs(15);
const SCRAPES: usize = 5;
const BOOKMARK_INTERVAL: Duration = Duration::from_secs(60);
const BUDGET_RSS_MIB: f64 = 300.0;
const BUDGET_READY_S: f64 = 30.0;
const BUDGET_SCRAPE_S: f64 = 1.0;
const KUBE_PROBER_ARGS: [&str; 10] = [
    "--role",
    "cluster",
    "--listen",
    "127.0.0.1:0",
    "--log-format",
    "json",
    "--tick-interval",
    "10s",
    "--disable-probes",
    "cluster_dns,metrics_server,apiserver_readyz",
];
/// Stderr lines kept for error messages.
const TAIL_LINES: usize = 40;

/// The kube-prober child, killed and reaped when dropped (panics included).
struct Guard {
    child: Child,
    tail: Arc<Mutex<VecDeque<String>>>,
    warnings: Arc<AtomicUsize>,
}

impl Guard {
    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn tail(&self) -> String {
        let tail = self.tail.lock().unwrap_or_else(|p| p.into_inner());
        tail.iter().cloned().collect::<Vec<_>>().join("\n")
    }

    /// Panics (with the last stderr lines) when the process has exited.
    fn assert_running(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!(
                "kube-prober exited early: {status}; last stderr:\n{}",
                self.tail()
            );
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn verdict(ok: bool) -> &'static str {
    if ok { "yes" } else { "**no**" }
}

/// Spawns kube-prober against `kubeconfig`; answers the guard and its listen address.
fn start_kube_prober(kubeconfig: &std::path::Path) -> (Guard, String) {
    let child = Command::new(env!("CARGO_BIN_EXE_kube-prober"))
        .args(KUBE_PROBER_ARGS)
        .env("KUBECONFIG", kubeconfig)
        .env("HOME", "/nonexistent")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cannot start kube-prober");
    let mut guard = Guard {
        child,
        tail: Arc::default(),
        warnings: Arc::default(),
    };
    let stderr = guard.child.stderr.take().expect("piped stderr");
    let (tx, rx) = mpsc::channel::<String>();
    let tail = guard.tail.clone();
    let warnings = guard.warnings.clone();
    std::thread::spawn(move || {
        // Drain until EOF so the child never blocks on a full pipe; the receiver may be gone.
        let mut tx = Some(tx);
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.contains("\"level\":\"WARN\"") || line.contains("\"level\":\"ERROR\"") {
                warnings.fetch_add(1, Ordering::Relaxed);
            }
            if let Some(t) = &tx
                && t.send(line.clone()).is_err()
            {
                tx = None;
            }
            let mut tail = tail.lock().unwrap_or_else(|p| p.into_inner());
            if tail.len() == TAIL_LINES {
                tail.pop_front();
            }
            tail.push_back(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok(line) = rx.recv_timeout(left) else {
            panic!(
                "kube-prober did not log `listening` within 30 s; last stderr:\n{}",
                guard.tail()
            );
        };
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(&line)
            && v["message"] == "listening"
            && let Some(addr) = v["addr"].as_str()
        {
            assert!(
                addr.starts_with("127.0.0.1:"),
                "kube-prober listens on {addr}, expected 127.0.0.1"
            );
            return (guard, addr.to_string());
        }
    }
}

/// GET `url`: status, elapsed time to the full body, body.
async fn get(client: &reqwest::Client, url: &str) -> (reqwest::StatusCode, Duration, bytes::Bytes) {
    let t = Instant::now();
    let resp = client
        .get(url)
        .header(reqwest::header::ACCEPT, "text/plain")
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    let status = resp.status();
    let body = resp
        .bytes()
        .await
        .unwrap_or_else(|e| panic!("GET {url} body: {e}"));
    (status, t.elapsed(), body)
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` does not: then do nothing.
    if !std::env::args().any(|a| a == "--bench") {
        println!("cluster_scale: benchmark only; run `cargo bench --bench cluster_scale`");
        return;
    }
    let nodes = env_usize("NODES", 5000);
    let pods_per_node = env_usize("PODS_PER_NODE", 30);
    let churn_secs = env_usize("CHURN_SECS", 60);
    assert!(nodes > 0, "NODES must be at least 1");
    let tck = clk_tck();
    let tick_ms = 1000.0 / tck as f64;
    let load_start = loadavg();

    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let client = reqwest::Client::builder()
        .no_proxy()
        .http1_only()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("reqwest client");

    // The stand-in, in this process.
    let api = rt.block_on(apiserver::start_with(Options {
        listen: std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
        bookmark_interval: BOOKMARK_INTERVAL,
        history_limit: 10_000,
    }));
    eprintln!("cluster_scale: generating {nodes} nodes x {pods_per_node} pods");
    let gen_start = Instant::now();
    let made = api.generate_with(&GenerateOptions {
        nodes,
        pods_per_node,
        node_metrics: true,
        pod_metrics: false,
        seed: 42,
    });
    let gen_took = gen_start.elapsed();
    let standin_rss_gen = rss_kib(std::process::id()).0;
    eprintln!(
        "cluster_scale: generated {} nodes, {} pods, {} node metrics in {gen_took:.2?}",
        made.nodes, made.pods, made.node_metrics
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let kubeconfig = dir.path().join("kubeconfig");
    api.write_kubeconfig(&kubeconfig).expect("write kubeconfig");

    // 1. Start to ready.
    let t0 = Instant::now();
    let (mut kp, addr) = start_kube_prober(&kubeconfig);
    let pid = kp.pid();
    let pid_s = pid.to_string();
    let base = format!("http://{addr}");
    let ready_after = rt.block_on(async {
        let deadline = t0 + READY_LIMIT;
        let mut last = String::new();
        loop {
            kp.assert_running();
            if Instant::now() >= deadline {
                panic!(
                    "/readyz not 200 within {READY_LIMIT:?}; last answer: {last}; stderr:\n{}",
                    kp.tail()
                );
            }
            let poll = client
                .get(format!("{base}/readyz"))
                .timeout(Duration::from_secs(5))
                .send()
                .await;
            match poll {
                Ok(r) if r.status() == reqwest::StatusCode::OK => return t0.elapsed(),
                Ok(r) => last = format!("{} {}", r.status(), r.text().await.unwrap_or_default()),
                Err(e) => last = e.to_string(),
            }
            tokio::time::sleep(READY_POLL).await;
        }
    });
    let cpu_at_ready = cpu_ticks(&pid_s);
    let hwm_at_ready = rss_kib(pid).1;
    eprintln!("cluster_scale: ready after {ready_after:.2?}; settling {SETTLE:?}");

    // 2. Steady RSS after ready; the settle window also gives the idle CPU rate.
    std::thread::sleep(SETTLE);
    kp.assert_running();
    let cpu_settled = cpu_ticks(&pid_s);
    let (rss_steady, hwm_steady) = rss_kib(pid);
    let idle_ticks = cpu_settled - cpu_at_ready;

    // 3. Scrapes.
    let (scrapes, watcher) = rt.block_on(async {
        let mut scrapes = Vec::with_capacity(SCRAPES);
        for _ in 0..SCRAPES {
            let (status, took, body) = get(&client, &format!("{base}/metrics")).await;
            assert_eq!(status, reqwest::StatusCode::OK, "GET /metrics");
            let series = String::from_utf8_lossy(&body)
                .lines()
                .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
                .count();
            scrapes.push((took, body.len(), series));
        }
        let (status, took, body) = get(&client, &format!("{base}/watcher")).await;
        assert_eq!(status, reqwest::StatusCode::OK, "GET /watcher");
        (scrapes, (took, body.len()))
    });
    kp.assert_running();

    // 4. Churn window.
    let watches = api.open_watches();
    eprintln!("cluster_scale: churn {CHURN_PER_SEC}/s for {churn_secs} s ({watches} open watches)");
    let self_pid = std::process::id().to_string();
    let cpu0 = cpu_ticks(&pid_s);
    let self0 = cpu_ticks(&self_pid);
    let rv0 = api.resource_version();
    let c0 = Instant::now();
    let changes = rt.block_on(async {
        let task = api.churn(CHURN_PER_SEC, Duration::from_secs(churn_secs as u64));
        tokio::time::timeout(Duration::from_secs(churn_secs as u64 + 30), task)
            .await
            .expect("churn did not finish in time")
            .expect("churn task failed")
    });
    let churn_wall = c0.elapsed();
    let cpu1 = cpu_ticks(&pid_s);
    let self1 = cpu_ticks(&self_pid);
    let rv1 = api.resource_version();
    kp.assert_running();
    let (rss_after, hwm_after) = rss_kib(pid);
    let churn_ticks = cpu1 - cpu0;
    let warnings = kp.warnings.load(Ordering::Relaxed);
    let load_end = loadavg();
    drop(kp);
    drop(api);

    // Report.
    let mut lat: Vec<Duration> = scrapes.iter().map(|s| s.0).collect();
    lat.sort();
    let p50 = lat[(lat.len() - 1) / 2];
    let max = *lat.last().expect("scrapes");
    let bytes_min = scrapes.iter().map(|s| s.1).min().unwrap_or(0);
    let bytes_max = scrapes.iter().map(|s| s.1).max().unwrap_or(0);
    let series = scrapes.last().map(|s| s.2).unwrap_or(0);
    let per_1000 = |ticks: f64| -> Option<f64> {
        (changes > 0).then(|| ticks * tick_ms / changes as f64 * 1000.0)
    };
    let churn_ms = churn_ticks as f64 * tick_ms;
    let idle_rate_ms_s = idle_ticks as f64 * tick_ms / SETTLE.as_secs_f64();
    let churn_rate_ms_s = churn_ms / churn_wall.as_secs_f64();
    // What the churn window cost above the idle rate; none when it ran below that rate.
    let net_ticks = churn_ticks as f64 - idle_rate_ms_s * churn_wall.as_secs_f64() / tick_ms;
    let net = (net_ticks > 0.0).then_some(net_ticks).and_then(per_1000);
    let fmt_opt = |v: Option<f64>| v.map(|v| format!("{v:.0} ms")).unwrap_or("n/a".into());

    println!(
        "## Cluster role at {} nodes and {} pods\n",
        made.nodes, made.pods
    );
    println!(
        "Stand-in: {} nodes, {} pods, {} DaemonSets, {} Deployments, {} ReplicaSets, {} \
         namespaces, {} NodeMetrics; generated in {:.1} s (stand-in process RSS then {:.0} MiB).\n",
        made.nodes,
        made.pods,
        made.daemon_sets,
        made.deployments,
        made.replica_sets,
        made.namespaces,
        made.node_metrics,
        gen_took.as_secs_f64(),
        mib(standin_rss_gen),
    );
    println!("| measure | value | budget | holds |");
    println!("|---|---:|---:|---|");
    println!(
        "| start → `/readyz` 200 | {:.2} s | ≤ {BUDGET_READY_S:.0} s | {} |",
        ready_after.as_secs_f64(),
        verdict(ready_after.as_secs_f64() <= BUDGET_READY_S)
    );
    println!(
        "| VmRSS 15 s after ready | {:.1} MiB | ≤ {BUDGET_RSS_MIB:.0} MiB | {} |",
        mib(rss_steady),
        verdict(mib(rss_steady) <= BUDGET_RSS_MIB)
    );
    println!(
        "| VmHWM 15 s after ready (peak so far) | {:.1} MiB | ≤ {BUDGET_RSS_MIB:.0} MiB | {} |",
        mib(hwm_steady),
        verdict(mib(hwm_steady) <= BUDGET_RSS_MIB)
    );
    println!(
        "| VmRSS after churn | {:.1} MiB | ≤ {BUDGET_RSS_MIB:.0} MiB | {} |",
        mib(rss_after),
        verdict(mib(rss_after) <= BUDGET_RSS_MIB)
    );
    println!(
        "| VmHWM after churn (peak of the run) | {:.1} MiB | ≤ {BUDGET_RSS_MIB:.0} MiB | {} |",
        mib(hwm_after),
        verdict(mib(hwm_after) <= BUDGET_RSS_MIB)
    );
    println!(
        "| CPU per 1,000 watch events (churn window, gross) | {} | — | — |",
        fmt_opt(per_1000(churn_ticks as f64))
    );
    println!(
        "| CPU per 1,000 watch events (net of idle rate) | {} | — | — |",
        net.map(|v| format!("{v:.0} ms"))
            .unwrap_or_else(|| "n/a (churn-window rate below idle rate)".into())
    );
    println!(
        "| kube-prober CPU rate: idle after ready / during churn | {idle_rate_ms_s:.1} / \
         {churn_rate_ms_s:.1} ms/s | — | — |"
    );
    println!(
        "| `/metrics` scrape p50 / max ({SCRAPES} scrapes) | {:.1} / {:.1} ms | ≤ {:.0} ms | {} |",
        ms(p50),
        ms(max),
        BUDGET_SCRAPE_S * 1000.0,
        verdict(max.as_secs_f64() <= BUDGET_SCRAPE_S)
    );
    println!("| `/metrics` body bytes (min–max) | {bytes_min}–{bytes_max} | — | — |");
    println!("| `/metrics` series | {series} | — | — |");
    println!(
        "| `/watcher` body bytes (GET time) | {} ({:.1} ms) | — | — |",
        watcher.1,
        ms(watcher.0)
    );
    println!();
    println!(
        "- VmHWM at the moment `/readyz` first answered 200: {:.1} MiB.",
        mib(hwm_at_ready)
    );
    println!(
        "- Churn: {changes} pod changes at {CHURN_PER_SEC}/s over {:.1} s (resourceVersion \
         {rv0} → {rv1}); kube-prober CPU {churn_ms:.0} ms ({churn_ticks} ticks of {tick_ms:.0} \
         ms); open watches at the stand-in: {watches}.",
        churn_wall.as_secs_f64()
    );
    println!(
        "- Idle CPU in the {:.0} s after ready (no churn, no scrapes): {:.0} ms ({idle_ticks} \
         ticks), {idle_rate_ms_s:.1} ms/s; the net figure subtracts this rate over the churn \
         window.",
        SETTLE.as_secs_f64(),
        idle_ticks as f64 * tick_ms,
    );
    println!(
        "- Bench process (stand-in + churn + client) CPU over the churn window: {:.0} ms; it \
         shares the same cores but is not counted above.",
        (self1 - self0) as f64 * tick_ms
    );
    println!("- kube-prober WARN/ERROR log lines over the run: {warnings}.");
    println!();
    println!("Machine:\n");
    for (k, v) in machine_info() {
        println!("- {k}: {v}");
    }
    println!("- CLK_TCK: {tck}");
    println!("- load average (1/5/15 min) at start: {load_start}; at end: {load_end}");
    println!();
    println!("Command:\n");
    println!(
        "    NODES={nodes} PODS_PER_NODE={pods_per_node} CHURN_SECS={churn_secs} cargo bench \
         --bench cluster_scale"
    );
    println!();
    println!("Child:\n");
    println!(
        "    KUBECONFIG=<stand-in kubeconfig> HOME=/nonexistent kube-prober {}",
        KUBE_PROBER_ARGS.join(" ")
    );
}
