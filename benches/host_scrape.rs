//! Host role vs Debian's `prometheus-node-exporter`, on this machine, with one scrape loop.
//!
//! Run with `cargo bench --bench host_scrape` (env `SCRAPES`, default 1000; `IDLE_SECS`,
//! default 60). Both exporters are started on 127.0.0.1, each gets 20 warm-up scrapes and then
//! `SCRAPES` sequential scrapes over one keep-alive connection (`Accept: text/plain`, no
//! compression). Reported per exporter: VmRSS and VmHWM after the loop, CPU time
//! (utime+stime) per scrape across the loop, body bytes per scrape, client-side latency
//! p50/p99 and the series count. Then, with no scrapes at all, both processes' CPU over an
//! idle window: kube-prober collects and renders at tick time, so that cost is paid whether or
//! not anyone scrapes. The result is a markdown report on stdout.
//!
//! Under `cargo test --benches` (no `--bench` argument) it does nothing.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

mod common;
use common::{clk_tck, cpu_ticks, env_usize, first_line, loadavg, machine_info, mib, ms, rss_kib};

const NODE_EXPORTER: &str = "/usr/bin/prometheus-node-exporter";
const WARMUP: usize = 20;
const KUBE_PROBER_ARGS: [&str; 12] = [
    "--role",
    "host",
    "--listen",
    "127.0.0.1:0",
    "--node-name",
    "bench",
    "--log-format",
    "json",
    "--interval",
    "15s",
    "--tick-interval",
    "10s",
];

/// A child process that is killed and reaped when dropped, panics included.
struct Guard {
    name: &'static str,
    child: Child,
}

impl Guard {
    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Panics when the process has already exited.
    fn assert_running(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!("{} exited early: {status}", self.name);
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_kube_prober() -> (Guard, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kube-prober"));
    cmd.args(KUBE_PROBER_ARGS)
        .env("HOME", "/nonexistent")
        .env_remove("KUBECONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let child = support::owned::spawn(cmd).expect("cannot start kube-prober");
    let mut guard = Guard {
        name: "kube-prober",
        child,
    };
    let stderr = guard.child.stderr.take().expect("piped stderr");
    let (tx, rx) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        // Keep draining after the receiver is gone so the child never blocks on a full pipe.
        let mut tx = Some(tx);
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(t) = &tx
                && t.send(line).is_err()
            {
                tx = None;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = match rx.recv_timeout(left) {
            Ok(l) => l,
            Err(_) => panic!(
                "kube-prober did not log `listening` within 30 s; its stderr:\n{}",
                seen.join("\n")
            ),
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
        seen.push(line);
    }
}

use support::ports::free_port;

fn start_node_exporter(port: u16) -> Guard {
    let mut cmd = Command::new(NODE_EXPORTER);
    cmd.arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let child = support::owned::spawn(cmd).expect("cannot start prometheus-node-exporter");
    Guard {
        name: "prometheus-node-exporter",
        child,
    }
}

/// Polls `url` until it answers 200, or panics after `limit`.
async fn wait_200(client: &reqwest::Client, guard: &mut Guard, url: &str, limit: Duration) {
    let deadline = Instant::now() + limit;
    let mut last = String::new();
    while Instant::now() < deadline {
        guard.assert_running();
        match client.get(url).send().await {
            Ok(r) if r.status() == reqwest::StatusCode::OK => return,
            Ok(r) => last = format!("{} {}", r.status(), r.text().await.unwrap_or_default()),
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!(
        "{}: {url} not 200 within {limit:?}; last answer: {last}",
        guard.name
    );
}

struct Measured {
    name: &'static str,
    rss_kib: u64,
    hwm_kib: u64,
    cpu_ticks: u64,
    scrapes: usize,
    bytes_total: u64,
    series: usize,
    latencies: Vec<Duration>,
    wall: Duration,
}

async fn scrape(client: &reqwest::Client, url: &str) -> (Duration, bytes::Bytes) {
    let t = Instant::now();
    let resp = client
        .get(url)
        .header(reqwest::header::ACCEPT, "text/plain")
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    assert_eq!(resp.status(), reqwest::StatusCode::OK, "GET {url}");
    assert!(
        resp.headers()
            .get(reqwest::header::CONTENT_ENCODING)
            .is_none(),
        "GET {url} came back compressed; the bench measures uncompressed bytes"
    );
    let body = resp
        .bytes()
        .await
        .unwrap_or_else(|e| panic!("GET {url} body: {e}"));
    (t.elapsed(), body)
}

async fn scrape_loop(
    client: &reqwest::Client,
    guard: &mut Guard,
    url: &str,
    scrapes: usize,
) -> Measured {
    for _ in 0..WARMUP {
        scrape(client, url).await;
    }
    guard.assert_running();
    let pid = guard.pid();
    let mut latencies = Vec::with_capacity(scrapes);
    let mut bytes_total = 0u64;
    let mut last = bytes::Bytes::new();
    let cpu0 = cpu_ticks(pid);
    let t0 = Instant::now();
    for _ in 0..scrapes {
        let (lat, body) = scrape(client, url).await;
        latencies.push(lat);
        bytes_total += body.len() as u64;
        last = body;
    }
    let wall = t0.elapsed();
    let cpu1 = cpu_ticks(pid);
    let (rss_kib, hwm_kib) = rss_kib(pid);
    let series = String::from_utf8_lossy(&last)
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .count();
    Measured {
        name: guard.name,
        rss_kib,
        hwm_kib,
        cpu_ticks: cpu1 - cpu0,
        scrapes,
        bytes_total,
        series,
        latencies,
        wall,
    }
}

/// Nearest-rank percentile of sorted samples.
fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` does not: then do nothing.
    if !std::env::args().any(|a| a == "--bench") {
        println!("host_scrape: benchmark only; run `cargo bench --bench host_scrape`");
        return;
    }
    if !Path::new(NODE_EXPORTER).is_file() {
        eprintln!(
            "host_scrape: {NODE_EXPORTER} not found; install it with \
             `apt-get install prometheus-node-exporter`"
        );
        std::process::exit(1);
    }
    let scrapes = env_usize("SCRAPES", 1000);
    assert!(scrapes > 0, "SCRAPES must be at least 1");
    let idle_secs = env_usize("IDLE_SECS", 60);
    let tck = clk_tck();
    let load_start = loadavg();

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let client = reqwest::Client::builder()
        .no_proxy()
        .http1_only()
        .pool_max_idle_per_host(1)
        .timeout(Duration::from_secs(30))
        .build()
        .expect("reqwest client");

    let (mut kp, kp_addr) = start_kube_prober();
    let ne_port = free_port();
    let mut ne = start_node_exporter(ne_port);
    let kp_url = format!("http://{kp_addr}/metrics");
    let ne_url = format!("http://127.0.0.1:{ne_port}/metrics");

    let (kp_res, ne_res, idle) = rt.block_on(async {
        wait_200(
            &client,
            &mut kp,
            &format!("http://{kp_addr}/readyz"),
            Duration::from_secs(60),
        )
        .await;
        wait_200(&client, &mut ne, &ne_url, Duration::from_secs(30)).await;

        eprintln!("host_scrape: kube-prober, {WARMUP} warm-up + {scrapes} scrapes of {kp_url}");
        let kp_res = scrape_loop(&client, &mut kp, &kp_url, scrapes).await;
        eprintln!("host_scrape: node_exporter, {WARMUP} warm-up + {scrapes} scrapes of {ne_url}");
        let ne_res = scrape_loop(&client, &mut ne, &ne_url, scrapes).await;

        let idle = if idle_secs > 0 {
            eprintln!("host_scrape: idle window, {idle_secs} s with no scrapes");
            let (kp0, ne0) = (cpu_ticks(kp.pid()), cpu_ticks(ne.pid()));
            let t0 = Instant::now();
            tokio::time::sleep(Duration::from_secs(idle_secs as u64)).await;
            let wall = t0.elapsed();
            kp.assert_running();
            ne.assert_running();
            Some((cpu_ticks(kp.pid()) - kp0, cpu_ticks(ne.pid()) - ne0, wall))
        } else {
            None
        };
        (kp_res, ne_res, idle)
    });

    let load_end = loadavg();
    let ne_version = first_line(NODE_EXPORTER, &["--version"]);
    drop(kp);
    drop(ne);

    let tick_ms = 1000.0 / tck as f64;
    println!("## Host role vs node_exporter\n");
    println!(
        "{scrapes} sequential scrapes per exporter after {WARMUP} warm-up, one keep-alive \
         connection, `Accept: text/plain`, uncompressed.\n"
    );
    println!(
        "| exporter | RSS MiB | peak RSS MiB | CPU ms/scrape | bytes/scrape | p50 ms | p99 ms | series |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for r in [&kp_res, &ne_res] {
        let mut sorted = r.latencies.clone();
        sorted.sort();
        println!(
            "| {} | {:.1} | {:.1} | {:.3} | {} | {:.3} | {:.3} | {} |",
            r.name,
            mib(r.rss_kib),
            mib(r.hwm_kib),
            r.cpu_ticks as f64 * tick_ms / r.scrapes as f64,
            r.bytes_total / r.scrapes as u64,
            ms(percentile(&sorted, 0.50)),
            ms(percentile(&sorted, 0.99)),
            r.series,
        );
    }
    println!();
    for r in [&kp_res, &ne_res] {
        println!(
            "- {}: {} CPU ticks over the loop ({:.2} s wall; resolution {:.3} ms/scrape)",
            r.name,
            r.cpu_ticks,
            r.wall.as_secs_f64(),
            tick_ms / r.scrapes as f64,
        );
    }
    if let Some((kp_idle, ne_idle, wall)) = idle {
        println!();
        println!(
            "Idle window, no scrapes, {:.1} s: kube-prober {:.0} ms CPU ({} ticks), \
             node_exporter {:.0} ms CPU ({} ticks).",
            wall.as_secs_f64(),
            kp_idle as f64 * tick_ms,
            kp_idle,
            ne_idle as f64 * tick_ms,
            ne_idle,
        );
        // At Prometheus' usual pace (one scrape per 15 s), the background cost counts too.
        let per15 = |idle_ticks: u64, r: &Measured| {
            idle_ticks as f64 * tick_ms * 15.0 / wall.as_secs_f64()
                + r.cpu_ticks as f64 * tick_ms / r.scrapes as f64
        };
        println!(
            "CPU per 15 s at one scrape per 15 s (idle rate x 15 s + one scrape): \
             kube-prober {:.2} ms, node_exporter {:.2} ms.",
            per15(kp_idle, &kp_res),
            per15(ne_idle, &ne_res),
        );
    }
    println!();
    println!("Machine:\n");
    for (k, v) in machine_info() {
        println!("- {k}: {v}");
    }
    println!("- CLK_TCK: {tck}");
    println!("- load average (1/5/15 min) at start: {load_start}; at end: {load_end}");
    println!("- node_exporter: {ne_version}");
    println!();
    println!("Command:\n");
    println!("    SCRAPES={scrapes} IDLE_SECS={idle_secs} cargo bench --bench host_scrape");
    println!();
    println!("Children:\n");
    println!(
        "    HOME=/nonexistent kube-prober {}",
        KUBE_PROBER_ARGS.join(" ")
    );
    println!("    {NODE_EXPORTER} --web.listen-address=127.0.0.1:{ne_port}");
}
