//! Cluster role at the largest cluster sizes: issue #12's Measure table, every row, at 5,000
//! nodes / 150,000 pods or 65,000 nodes / 650,000 pods, served by the stand-in API server
//! (`tests/support/apiserver.rs`) in this process.
//!
//! Run with `cargo bench --bench cluster_scale`. Environment:
//! - `NODES` (default 5000), `PODS_PER_NODE` (default 30; the 65,000-node row uses 10);
//!   more than 5,000 nodes selects the 65,000-node budgets;
//! - `CHURN_PER_SEC` (default 1000) pod changes per second during the churn window of
//!   `CHURN_SECS` (default 60); `REPLACE_PERCENT` (default 20) of them deletions and creations,
//!   the rest updates (container restarts, phase flips);
//! - `IDLE_SECS` (default 30): the idle window; `SCRAPES` (default 5) `/metrics` scrapes,
//!   their starts spread evenly over `SCRAPE_SPREAD_SECS` (default 25, two ticks and a half, so
//!   some meet a tick's work as Prometheus' scrapes do);
//!   `WATCHER_SECS` (default 10) and `CONNECTIONS` (default 8) for the `/watcher` load;
//!   `READY_LIMIT_SECS` (default 600) for start to ready and for the relist;
//! - `EXTRA_ARGS`: more kube-prober flags, split on whitespace (e.g.
//!   `EXTRA_ARGS="--pod-scope workloads"`); `SHARD_OF=N` runs kube-prober as shard 0 of N
//!   (`--shard 0 --total-shards N`);
//! - `KUBE_PROBER_BIN`: the kube-prober binary to run instead of this build's (a before/after
//!   of two commits in the same setup);
//! - `KUBE_PROBER_ENV`: more environment for the kube-prober child only, `K=V` pairs split on
//!   whitespace (e.g. heaptrack's `LD_PRELOAD=/usr/lib/heaptrack/libheaptrack_preload.so
//!   DUMP_HEAPTRACK_OUTPUT=/tmp/kp.heaptrack` for a heap profile of the run; the CPU figures of
//!   such a run are heaptrack's too);
//! - `PERF_CHURN=FILE`: records kube-prober's call stacks over the churn window (phase 6) with
//!   `perf record` into FILE (`perf report -i FILE` reads them; that run's churn CPU includes
//!   perf's sampling); no call graphs unless `PERF_CALL_GRAPH=MODE` gives perf's
//!   `--call-graph` mode (`dwarf` works on the release build, which keeps its unwind tables);
//! - `USAGE_SAMPLES=N` (default 0): after ready, move the stand-in's NodeMetrics on N times
//!   (15 s of their time apart, each step fetched before the next), so each node's windows
//!   hold N samples as after 15 minutes of metrics-server with N = 60 (without it they hold
//!   one). NodeMetrics stand still in real time, so the run gives kube-prober
//!   `--watcher-max-age=0` (every host served, as with a real metrics-server), unless
//!   `KUBE_PROBER_BIN` names an older build without that flag. With N > 0 kube-prober fetches
//!   every 2 s (`--interval 2s`) to make the fill take minutes,
//!   not 15, so the idle-CPU row of such a run is not comparable with its budget.
//!
//! Phases, all measured on the kube-prober child (`--role cluster`, noisy probes disabled):
//! 1. start to `/readyz` 200 (polled every 100 ms);
//! 2. 15 s to settle, then idle CPU over `IDLE_SECS` with no pod changes and static NodeMetrics
//!    (utime+stime, ms of CPU per second); then one NodeMetrics fetch (issue #33: memory during
//!    a fetch must grow with one item, not with the cluster): once a fetch has been answered and
//!    kube-prober's CPU is quiet (no tick for 0.5 s), VmRSS is read and VmHWM reset to it
//!    (`echo 5 > /proc/PID/clear_refs`); the next fetch's LIST comes, the stand-in sends its
//!    whole answer, kube-prober goes quiet again; the report gives VmHWM then minus VmRSS
//!    before ("peak RSS during one NodeMetrics fetch minus RSS before it"), the CPU from the
//!    LIST to quiet less the idle rate between the reset and the LIST, and the answer's bytes
//!    and bytes per NodeMetrics item (the stand-in's items carry GKE's 25 node labels, as the
//!    real metrics-server copies them: about 1,350 bytes an item);
//! 3. `SCRAPES` timed pairs of `GET /metrics`: with `Accept-Encoding: gzip` as Prometheus asks,
//!    read to the last byte and inflated in this process (both timed), then uncompressed; the
//!    pairs' starts spread over `SCRAPE_SPREAD_SECS`; the stand-in's threads at nice 19 meanwhile
//!    (it stands for machines other than kube-prober's and its scraper's: see `Threads`);
//! 4. `GET /watcher` with `Accept-Encoding: gzip` (as Go's client) under load from `wrk`
//!    (`-t1`, `CONNECTIONS` connections, `WATCHER_SECS` s), then the same `wrk` against a
//!    static-bytes hyper server in this process serving the bytes kube-prober answered (same
//!    headers): kube-prober's requests/s as a percentage of the static server's;
//! 5. a full relist: the stand-in compacts its history and drops every watch, each watcher gets
//!    410 Gone on resuming and lists everything again in pages; done when every watched path
//!    has been listed and watched again; then one tick (11 s) for the snapshot;
//! 6. churn at `CHURN_PER_SEC`: kube-prober's CPU in cores over a window of whole tick
//!    periods, from just after a tick to just after the first tick `CHURN_SECS` later (the
//!    churn runs on past it), counted from kube-prober's `tick made` debug lines (the run
//!    passes `--log-level info,kube_prober::app=debug`). Each tick renders every body again,
//!    so a fixed window held one tick more or less by where it fell, which moved the figure
//!    by several percent. A build without that line is measured over `CHURN_SECS` unaligned,
//!    and the report says so;
//! 7. VmHWM at the end: the peak of the run, full relist included (with the VmHWM the fetch
//!    phase reset: the larger of the two).
//!
//! Throughout, a thread reads kube-prober's VmRSS and VmHWM every 100 ms; the report gives, per
//! phase, VmRSS at its start, end and maximum (and when), how much VmHWM grew in it, and the
//! phase in which VmHWM reached its final value (where the peak forms).
//!
//! Each figure is printed next to its budget (markdown on stdout, progress on stderr). When a
//! phase cannot finish (not ready in time, kube-prober exits), the report says where it stopped
//! and prints what was measured until then. Under `cargo test --benches` (no `--bench`
//! argument) it does nothing.

use support::apiserver;
mod common;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::convert::Infallible;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use apiserver::{ChurnOptions, GenerateOptions, Options};
use common::{clk_tck, cpu_ticks, env_usize, loadavg, machine_info, mib, ms, rss_kib};

const WRK: &str = "/usr/bin/wrk";
const READY_POLL: Duration = Duration::from_millis(100);
const SETTLE: Duration = Duration::from_secs(15);
/// One tick of kube-prober (`--tick-interval 10s`) and a second.
const AFTER_TICK: Duration = Duration::from_secs(11);
const BOOKMARK_INTERVAL: Duration = Duration::from_secs(60);
/// etcd keeps 5 minutes of history: at 1,000 changes per second, 300,000 events.
const HISTORY_LIMIT: usize = 300_000;
const KUBE_PROBER_ARGS: [&str; 12] = [
    "--role",
    "cluster",
    // Its `tick made` line: the churn window starts at a tick and counts those in it.
    "--log-level",
    "info,kube_prober::app=debug",
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

/// `perf record` of the kube-prober child while it runs, when `PERF_CHURN` names a file.
struct PerfRecord {
    child: Child,
    out: String,
}

impl PerfRecord {
    fn start(pid: u32) -> Option<PerfRecord> {
        let out = std::env::var("PERF_CHURN").ok()?;
        let mut args = vec!["record".to_string(), "-F".into(), "499".into()];
        if let Ok(mode) = std::env::var("PERF_CALL_GRAPH") {
            args.extend(["--call-graph".into(), mode]);
        }
        args.extend(["-o".into(), out.clone(), "-p".into(), pid.to_string()]);
        let mut cmd = Command::new("perf");
        cmd.args(&args).stdout(Stdio::null()).stderr(Stdio::null());
        let child = support::owned::spawn(cmd);
        match child {
            Ok(child) => Some(PerfRecord { child, out }),
            Err(e) => {
                eprintln!("cluster_scale: PERF_CHURN: perf record did not start: {e}");
                None
            }
        }
    }

    /// Stops the recording (SIGINT, as perf expects) and says where it is.
    fn stop(mut self) -> Option<String> {
        let _ = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status();
        let status = self.child.wait().ok()?;
        Some(format!(
            "PERF_CHURN: the churn window's stacks are in {} (perf exited {status})",
            self.out
        ))
    }
}

/// The budgets for one of its two sizes.
struct Budgets {
    column: &'static str,
    peak_rss_mib: f64,
    ready_s: f64,
    idle_ms_s: f64,
    churn_cores: f64,
    shard_scrape_ms: f64,
    watcher_pct: f64,
}

fn budgets(nodes: usize, pod_scope: bool) -> Budgets {
    if nodes > 5_000 {
        Budgets {
            column: "65,000 nodes / 650,000 pods",
            peak_rss_mib: if pod_scope { 400.0 } else { 1024.0 },
            ready_s: 60.0,
            idle_ms_s: 50.0,
            churn_cores: 0.25,
            shard_scrape_ms: 250.0,
            watcher_pct: 90.0,
        }
    } else {
        Budgets {
            column: "5,000 nodes / 150,000 pods",
            peak_rss_mib: 200.0,
            ready_s: 10.0,
            idle_ms_s: 5.0,
            churn_cores: 0.25,
            shard_scrape_ms: 250.0,
            watcher_pct: 90.0,
        }
    }
}

/// The stand-in's niceness during phase 3 (see [`Threads`]).
const STANDIN_NICE_WHILE_SCRAPED: i32 = 19;

/// The threads of the stand-in's runtime, so that their priority can be lowered while
/// `/metrics` is scraped. The stand-in takes the place of the API server and metrics-server,
/// which run on other machines than kube-prober and its scraper; here all three share 2 cores,
/// and the stand-in's answer to each metrics-server fetch (65,000 NodeMetrics every 15 s, about
/// a core for 200 ms) otherwise starves the scraping client and puts the stand-in's time into
/// the scrape's. kube-prober itself runs as always: its own decoding of those NodeMetrics, on
/// the same cores, stays in the figures. Threads started while lowered start lowered.
#[derive(Clone, Default)]
struct Threads {
    tids: Arc<Mutex<BTreeSet<libc::pid_t>>>,
    nice: Arc<std::sync::atomic::AtomicI32>,
}

impl Threads {
    /// A multi-threaded runtime whose threads (workers and blocking ones) are kept here while
    /// they live.
    fn runtime(&self) -> Result<tokio::runtime::Runtime, String> {
        let (started, stopped) = (self.clone(), self.clone());
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .on_thread_start(move || {
                // SAFETY: gettid has no preconditions.
                let tid = unsafe { libc::gettid() };
                let nice = started.nice.load(Ordering::SeqCst);
                if nice != 0 {
                    let _ = set_thread_nice(tid, nice);
                }
                started
                    .tids
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(tid);
            })
            .on_thread_stop(move || {
                // SAFETY: as above.
                let tid = unsafe { libc::gettid() };
                stopped
                    .tids
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&tid);
            })
            .build()
            .map_err(|e| format!("tokio runtime for the stand-in: {e}"))
    }

    /// Sets every live thread's niceness; how many were set.
    fn set_nice(&self, nice: i32) -> Result<usize, String> {
        self.nice.store(nice, Ordering::SeqCst);
        let tids = self.tids.lock().unwrap_or_else(|p| p.into_inner());
        for &tid in tids.iter() {
            set_thread_nice(tid, nice).map_err(|e| format!("setpriority({tid}, {nice}): {e}"))?;
        }
        Ok(tids.len())
    }
}

fn set_thread_nice(tid: libc::pid_t, nice: i32) -> std::io::Result<()> {
    // SAFETY: setpriority takes plain integers; a thread of ours that has just exited gives
    // ESRCH, which is returned as an error.
    let r = unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// One timed `/metrics` scrape pair (phase 3).
struct Scrape {
    /// Request to the last byte of the gzip answer.
    fetched: Duration,
    /// Inflating it, into a buffer kept from the scrape before.
    inflated: Duration,
    /// CPU ticks of kube-prober and of this process over the gzip scrape and its inflating.
    gz_cpu: (u64, u64),
    gz_bytes: usize,
    bytes: usize,
    series: usize,
    /// Request to the last byte of the uncompressed answer.
    plain: Duration,
    plain_bytes: usize,
    /// CPU ticks of kube-prober and of this process over the uncompressed scrape.
    plain_cpu: (u64, u64),
    /// `kube_prober_snapshot_age_seconds` in the gzip answer.
    age: f64,
}

/// The kube-prober child, killed and reaped when dropped (panics included).
struct Guard {
    child: Child,
    tail: Arc<Mutex<VecDeque<String>>>,
    warnings: Arc<AtomicUsize>,
    /// Ticks kube-prober logged as made (its `tick made` debug line).
    ticks: Arc<AtomicUsize>,
}

impl Guard {
    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn tail(&self) -> String {
        let tail = self.tail.lock().unwrap_or_else(|p| p.into_inner());
        tail.iter().cloned().collect::<Vec<_>>().join("\n")
    }

    /// An error (with the last stderr lines) when the process has exited.
    fn running(&mut self) -> Result<(), String> {
        match self.child.try_wait() {
            Ok(Some(status)) => Err(format!(
                "kube-prober exited: {status}; last stderr:\n{}",
                self.tail()
            )),
            _ => Ok(()),
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The report's rows, printed at the end or when a phase cannot finish.
#[derive(Default)]
struct Report {
    rows: Vec<[String; 4]>,
    notes: Vec<String>,
}

impl Report {
    fn row(&mut self, measure: &str, value: String, budget: String, holds: Option<bool>) {
        let holds = match holds {
            Some(true) => "yes".to_string(),
            Some(false) => "**no**".to_string(),
            None => "—".to_string(),
        };
        self.rows.push([measure.to_string(), value, budget, holds]);
    }

    fn note(&mut self, note: String) {
        eprintln!("cluster_scale: {note}");
        self.notes.push(note);
    }
}

/// The bench's phases, in order, for the RSS samples.
const PHASES: [&str; 10] = [
    "start to ready",
    "usage fill",
    "settle and idle window",
    "one NodeMetrics fetch",
    "`/metrics` scrapes",
    "`/watcher` under wrk",
    "relist after 410",
    "tick after the relist",
    "churn",
    "tick after the churn",
];

/// One reading of kube-prober's memory: ms since spawn, phase, VmRSS and VmHWM in KiB.
#[derive(Clone, Copy)]
struct Sample {
    at_ms: u64,
    phase: usize,
    rss: u64,
    hwm: u64,
}

/// Reads kube-prober's VmRSS and VmHWM every 100 ms on a thread, tagging each reading with the
/// phase the bench is in, so the report can say in which phase the peak forms.
struct RssSampler {
    phase: Arc<AtomicUsize>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<Vec<Sample>>>,
}

/// (VmRSS, VmHWM) in KiB, `None` once the process is gone.
fn try_rss_kib(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let get = |key: &str| -> Option<u64> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
    };
    Some((get("VmRSS:")?, get("VmHWM:")?))
}

impl RssSampler {
    const EVERY: Duration = Duration::from_millis(100);

    fn start(pid: u32, t0: Instant) -> RssSampler {
        let phase = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (p, st) = (phase.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut out = Vec::new();
            while !st.load(Ordering::Relaxed) {
                let Some((rss, hwm)) = try_rss_kib(pid) else {
                    break;
                };
                out.push(Sample {
                    at_ms: t0.elapsed().as_millis() as u64,
                    phase: p.load(Ordering::Relaxed),
                    rss,
                    hwm,
                });
                std::thread::sleep(Self::EVERY);
            }
            out
        });
        RssSampler {
            phase,
            stop,
            thread: Some(thread),
        }
    }

    fn enter(&self, phase: usize) {
        self.phase.store(phase, Ordering::Relaxed);
    }

    /// Stops sampling; one note per phase (VmRSS max and when, VmHWM growth in the phase) and
    /// one for the sample where VmHWM reached its final value.
    fn finish(mut self, report: &mut Report) {
        self.stop.store(true, Ordering::Relaxed);
        let mut samples = self
            .thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default();
        if samples.is_empty() {
            return;
        }
        // The fetch phase resets VmHWM once; the running maximum is the peak since spawn.
        let mut top = 0;
        for s in &mut samples {
            top = top.max(s.hwm);
            s.hwm = top;
        }
        let mut prev_hwm = 0;
        for (i, name) in PHASES.iter().enumerate() {
            let ph: Vec<&Sample> = samples.iter().filter(|s| s.phase == i).collect();
            let (Some(first), Some(last)) = (ph.first(), ph.last()) else {
                continue;
            };
            let top = ph.iter().max_by_key(|s| s.rss).map_or(**first, |s| **s);
            report.note(format!(
                "RSS every 100 ms, {name} ({:.1}-{:.1} s after spawn, {} samples): VmRSS {:.1} \
                 -> {:.1} MiB, max {:.1} MiB at {:.1} s; VmHWM {:.1} -> {:.1} MiB (+{:.1} in \
                 this phase)",
                first.at_ms as f64 / 1000.0,
                last.at_ms as f64 / 1000.0,
                ph.len(),
                mib(first.rss),
                mib(last.rss),
                mib(top.rss),
                top.at_ms as f64 / 1000.0,
                mib(prev_hwm.max(first.hwm)),
                mib(last.hwm),
                mib(last.hwm.saturating_sub(prev_hwm.max(first.hwm))),
            ));
            prev_hwm = last.hwm;
        }
        if let Some(last) = samples.last()
            && let Some(at) = samples.iter().find(|s| s.hwm == last.hwm)
        {
            report.note(format!(
                "VmHWM reached its final {:.1} MiB by the sample at {:.1} s after spawn, in \
                 phase \"{}\"",
                mib(last.hwm),
                at.at_ms as f64 / 1000.0,
                PHASES[at.phase]
            ));
        }
    }
}

impl Drop for RssSampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Spawns kube-prober against `kubeconfig`; answers the guard and its listen address.
fn start_kube_prober(
    kubeconfig: &std::path::Path,
    args: &[String],
) -> Result<(Guard, String), String> {
    // `KUBE_PROBER_BIN`: another build (an older commit's) for a before/after in one setup.
    let bin = std::env::var_os("KUBE_PROBER_BIN")
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_kube-prober").into());
    let mut cmd = Command::new(bin);
    for pair in std::env::var("KUBE_PROBER_ENV")
        .unwrap_or_default()
        .split_whitespace()
    {
        let (k, v) = pair
            .split_once('=')
            .ok_or_else(|| format!("KUBE_PROBER_ENV: {pair:?} is not K=V"))?;
        cmd.env(k, v);
    }
    cmd.args(args)
        .env("KUBECONFIG", kubeconfig)
        .env("HOME", "/nonexistent")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let child = support::owned::spawn(cmd).map_err(|e| format!("cannot start kube-prober: {e}"))?;
    let mut guard = Guard {
        child,
        tail: Arc::default(),
        warnings: Arc::default(),
        ticks: Arc::default(),
    };
    let stderr = guard.child.stderr.take().ok_or("no piped stderr")?;
    let (tx, rx) = mpsc::channel::<String>();
    let tail = guard.tail.clone();
    let warnings = guard.warnings.clone();
    let ticks = guard.ticks.clone();
    std::thread::spawn(move || {
        // Drain until EOF so the child never blocks on a full pipe; the receiver may be gone.
        let mut tx = Some(tx);
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.contains("\"level\":\"WARN\"") || line.contains("\"level\":\"ERROR\"") {
                warnings.fetch_add(1, Ordering::Relaxed);
            }
            // Counted, not kept: a tick a second would push what explains a failure out of
            // the tail.
            if line.contains("\"message\":\"tick made\"") {
                ticks.fetch_add(1, Ordering::Relaxed);
                continue;
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
            guard.running()?;
            return Err(format!(
                "kube-prober did not log `listening` (it exited, or 30 s passed); last stderr:\n{}",
                guard.tail()
            ));
        };
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(&line)
            && v["message"] == "listening"
            && let Some(addr) = v["addr"].as_str()
        {
            if !addr.starts_with("127.0.0.1:") {
                return Err(format!("kube-prober listens on {addr}, expected 127.0.0.1"));
            }
            return Ok((guard, addr.to_string()));
        }
    }
}

/// GET `url` with extra headers: status, time to the full body, headers, body.
async fn get(
    client: &reqwest::Client,
    url: &str,
    headers: &[(&str, &str)],
) -> Result<
    (
        reqwest::StatusCode,
        Duration,
        reqwest::header::HeaderMap,
        bytes::Bytes,
    ),
    String,
> {
    let t = Instant::now();
    let mut req = client.get(url);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = req.send().await.map_err(|e| format!("GET {url}: {e}"))?;
    let status = resp.status();
    let head = resp.headers().clone();
    let body = resp
        .bytes()
        .await
        .map_err(|e| format!("GET {url} body: {e}"))?;
    Ok((status, t.elapsed(), head, body))
}

/// A hyper HTTP/1.1 server on 127.0.0.1 answering every request with `body` and `headers`.
async fn static_server(
    body: bytes::Bytes,
    headers: Vec<(String, String)>,
) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    use hyper::server::conn::http1;
    use hyper::service::service_fn;
    use hyper_util::rt::TokioIo;
    let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .expect("bind the static server");
    let addr = listener.local_addr().expect("static server address");
    let headers = Arc::new(headers);
    let task = tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let body = body.clone();
            let headers = headers.clone();
            tokio::spawn(async move {
                let service = service_fn(move |_req| {
                    let mut resp = hyper::Response::new(http_body_util::Full::new(body.clone()));
                    for (k, v) in headers.iter() {
                        if let (Ok(k), Ok(v)) = (
                            hyper::header::HeaderName::from_bytes(k.as_bytes()),
                            hyper::header::HeaderValue::from_str(v),
                        ) {
                            resp.headers_mut().insert(k, v);
                        }
                    }
                    async move { Ok::<_, Infallible>(resp) }
                });
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (addr, task)
}

/// What one wrk run reported.
struct Wrk {
    requests: u64,
    rps: f64,
    errors: Vec<String>,
}

/// Runs wrk with `Accept-Encoding: gzip` against `url`; kills it if it overruns by 30 s.
fn run_wrk(url: &str, connections: usize, secs: usize) -> Result<Wrk, String> {
    let args = [
        "-t1".to_string(),
        format!("-c{connections}"),
        format!("-d{secs}s"),
        "--timeout".to_string(),
        "30s".to_string(),
        "-H".to_string(),
        "Accept-Encoding: gzip".to_string(),
        url.to_string(),
    ];
    let mut cmd = Command::new(WRK);
    cmd.args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = support::owned::spawn(cmd)
        .map_err(|e| format!("cannot start {WRK} (apt-get install wrk): {e}"))?;
    let deadline = Instant::now() + Duration::from_secs(secs as u64 + 30);
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("wrk {} overran by 30 s; killed", args.join(" ")));
            }
            Err(e) => return Err(format!("waiting for wrk: {e}")),
        }
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("wrk output: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut rps = None;
    let mut requests = None;
    let mut errors = Vec::new();
    for line in stdout.lines().map(str::trim) {
        let mut words = line.split_whitespace();
        match words.next() {
            Some("Requests/sec:") => rps = words.next().and_then(|v| v.parse::<f64>().ok()),
            Some(n) if line.contains(" requests in ") => requests = n.parse::<u64>().ok(),
            _ if line.starts_with("Socket errors:") || line.starts_with("Non-2xx") => {
                errors.push(line.to_string());
            }
            _ => {}
        }
    }
    match (requests, rps) {
        (Some(requests), Some(rps)) => Ok(Wrk {
            requests,
            rps,
            errors,
        }),
        _ => Err(format!(
            "wrk output not understood:\n{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        )),
    }
}

/// The fewest and the most samples of any node's 15-minute CPU window in one `/metrics` scrape.
async fn usage_samples_range(client: &reqwest::Client, base: &str) -> Result<(u64, u64), String> {
    let text = client
        .get(format!("{base}/metrics"))
        .send()
        .await
        .map_err(|e| format!("GET /metrics: {e}"))?
        .text()
        .await
        .map_err(|e| format!("GET /metrics: {e}"))?;
    let counts: Vec<u64> = text
        .lines()
        .filter(|l| {
            l.starts_with("kube_prober_node_usage_samples{")
                && l.contains("resource=\"cpu\"")
                && l.contains("window=\"15m\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u64)
        .collect();
    match (counts.iter().min(), counts.iter().max()) {
        (Some(&lo), Some(&hi)) => Ok((lo, hi)),
        _ => Err("usage fill: no kube_prober_node_usage_samples series in /metrics".into()),
    }
}

/// Longest a churn runs past `CHURN_SECS`, waiting for the tick that ends its window.
const TICK_SLACK: Duration = Duration::from_secs(20);

/// What the churn cost kube-prober, over a window of whole tick periods.
struct ChurnWindow {
    counts: apiserver::ChurnCounts,
    /// The churn task's own wall time (longer than the window: it runs on until the window's
    /// last tick, and a little past it).
    churn_wall: Duration,
    /// The window: from just after a tick to just after the first one `CHURN_SECS` later.
    wall: Duration,
    cpu_ticks: u64,
    self_ticks: u64,
    window_ticks: usize,
    /// NodeMetrics LISTs kube-prober made in the window (one per `--interval`, not aligned
    /// with the ticks: a window holds one more or less by where it falls).
    fetches: usize,
    aligned: bool,
    perf_note: Option<String>,
}

/// Runs the churn and measures kube-prober over a window that starts and ends just after a
/// tick. Each tick renders every body again; at one tick in ten seconds, a window of fixed
/// length holds one tick more or less by where it falls, and that moved the figure by
/// several percent. A window of whole periods holds the ticks the rate makes, wherever it
/// starts.
fn churn_window(
    rt: &tokio::runtime::Runtime,
    api: &apiserver::ApiServer,
    kp: &Guard,
    s: &Settings,
) -> Result<ChurnWindow, String> {
    let pid = kp.pid();
    let self_pid = std::process::id();
    let started_at_tick = next_tick(kp, Duration::from_secs(30));
    let perf = PerfRecord::start(pid);
    let fetches0 = api.hits(apiserver::NODE_METRICS_PATH);
    let (ticks0, cpu0, self0) = (
        kp.ticks.load(Ordering::Relaxed),
        cpu_ticks(pid),
        cpu_ticks(self_pid),
    );
    let c0 = Instant::now();
    let churn_for = Duration::from_secs(s.churn_secs as u64);
    let mut options = ChurnOptions::new(s.churn_per_sec as f64, churn_for + TICK_SLACK);
    options.replace_percent = s.replace_percent as u32;
    // Spawned on `rt`, whose workers run it while this thread waits for the window's end.
    let task = {
        let _in_rt = rt.enter();
        api.churn_with(options)
    };
    std::thread::sleep(churn_for);
    let ended_at_tick = next_tick(kp, TICK_SLACK);
    let wall = c0.elapsed();
    let cpu_ticks_used = cpu_ticks(pid) - cpu0;
    let self_ticks = cpu_ticks(self_pid) - self0;
    let window_ticks = kp.ticks.load(Ordering::Relaxed) - ticks0;
    let fetches = api.hits(apiserver::NODE_METRICS_PATH) - fetches0;
    let perf_note = perf.and_then(PerfRecord::stop);
    let counts = rt.block_on(async {
        tokio::time::timeout(TICK_SLACK + Duration::from_secs(60), task)
            .await
            .map_err(|_| "churn did not finish in time".to_string())?
            .map_err(|e| format!("churn task failed: {e}"))
    })?;
    Ok(ChurnWindow {
        counts,
        churn_wall: c0.elapsed(),
        wall,
        cpu_ticks: cpu_ticks_used,
        self_ticks,
        window_ticks,
        fetches,
        aligned: started_at_tick && ended_at_tick,
        perf_note,
    })
}

/// Waits until kube-prober logs its next `tick made` line; false when none came within `limit`
/// (a build without that line).
fn next_tick(kp: &Guard, limit: Duration) -> bool {
    let start = kp.ticks.load(Ordering::Relaxed);
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if kp.ticks.load(Ordering::Relaxed) > start {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// No CPU tick of kube-prober over this long: the fetch (decoding, recording) is over.
const QUIET: Duration = Duration::from_millis(500);
/// How long the fetch phase waits for each thing it waits for: the next fetch comes within one
/// `--interval` (15 s), its answer and decoding take seconds at 65,000 nodes.
const FETCH_WAIT: Duration = Duration::from_secs(120);

/// What one NodeMetrics fetch cost kube-prober.
struct FetchCost {
    /// VmHWM before it was reset (the peak of the run so far), KiB.
    hwm_before_reset: u64,
    /// VmRSS before the fetch and VmHWM (peak RSS) from then to its end, KiB.
    rss_before: u64,
    peak: u64,
    /// CPU ticks from the NodeMetrics LIST to kube-prober's last CPU tick, over `took`.
    ticks: u64,
    took: Duration,
    /// kube-prober's CPU rate between fetches, ticks a second, over `idle_for`.
    idle_rate: f64,
    idle_for: Duration,
    /// The answer's bytes.
    bytes: usize,
}

/// Waits until `done`, polling every 10 ms; fails after `within` or when kube-prober exits.
fn wait_for(
    kp: &mut Guard,
    what: &str,
    within: Duration,
    mut done: impl FnMut() -> bool,
) -> Result<(), String> {
    let deadline = Instant::now() + within;
    while !done() {
        kp.running()?;
        if Instant::now() > deadline {
            return Err(format!("fetch phase: no {what} within {within:?}"));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

/// Waits until kube-prober has used no CPU tick for [`QUIET`]; answers when its CPU time last
/// moved (or when the wait began, if it never did).
fn wait_quiet(kp: &mut Guard, within: Duration) -> Result<Instant, String> {
    let pid = kp.pid();
    let (mut last, mut since) = (cpu_ticks(pid), Instant::now());
    wait_for(kp, "quiet stretch of kube-prober's CPU", within, || {
        let now = cpu_ticks(pid);
        if now != last {
            (last, since) = (now, Instant::now());
        }
        since.elapsed() >= QUIET
    })?;
    Ok(since)
}

/// One NodeMetrics fetch of kube-prober, measured: once a fetch has been answered and
/// kube-prober is quiet, VmRSS is read and VmHWM reset to it (`clear_refs`; what it was is
/// kept, the run's peak so far); then the next fetch's LIST, its whole answer sent and
/// kube-prober quiet again are awaited, and VmHWM and the CPU from the LIST to the last CPU
/// tick are read. The CPU between the reset and the LIST is the idle rate.
fn measure_fetch(api: &apiserver::ApiServer, kp: &mut Guard) -> Result<FetchCost, String> {
    let pid = kp.pid();
    let path = apiserver::NODE_METRICS_PATH;
    let answers = || api.answered().iter().filter(|a| a.path == path).count();
    let n = answers();
    wait_for(kp, "NodeMetrics answer", FETCH_WAIT, || answers() > n)?;
    wait_quiet(kp, FETCH_WAIT)?;
    let (rss_before, hwm_before_reset) = rss_kib(pid);
    common::reset_peak_rss(pid)?;
    let (lists, n) = (api.hits(path), answers());
    let (c0, t0) = (cpu_ticks(pid), Instant::now());
    wait_for(kp, "NodeMetrics LIST", FETCH_WAIT, || {
        api.hits(path) > lists
    })?;
    let (c1, t1) = (cpu_ticks(pid), Instant::now());
    wait_for(kp, "NodeMetrics answer", FETCH_WAIT, || answers() > n)?;
    let t2 = wait_quiet(kp, FETCH_WAIT)?.max(t1);
    let c2 = cpu_ticks(pid);
    let peak = rss_kib(pid).1;
    let bytes = api
        .answered()
        .iter()
        .rev()
        .find(|a| a.path == path)
        .map_or(0, |a| a.bytes);
    Ok(FetchCost {
        hwm_before_reset,
        rss_before,
        peak,
        ticks: c2 - c1,
        took: t2 - t1,
        idle_rate: (c1 - c0) as f64 / (t1 - t0).as_secs_f64().max(1e-3),
        idle_for: t1 - t0,
        bytes,
    })
}

/// The fetch phase's rows: the answer's size (and per NodeMetrics item), the fetch's peak RSS
/// over the RSS before it, and its CPU.
fn fetch_phase(
    api: &apiserver::ApiServer,
    kp: &mut Guard,
    report: &mut Report,
    items: usize,
    tick_ms: f64,
) -> Result<u64, String> {
    let f = measure_fetch(api, kp)?;
    let labels = apiserver::gke_node_labels(0, "node").len();
    report.row(
        "NodeMetrics answer the stand-in sends (one LIST, whole, as metrics-server)",
        format!(
            "{} bytes ({:.1} MiB), {:.1} bytes per item ({items} items, {labels} node labels each)",
            f.bytes,
            f.bytes as f64 / (1 << 20) as f64,
            f.bytes as f64 / items.max(1) as f64
        ),
        "—".into(),
        None,
    );
    report.row(
        "fetch: peak RSS during one NodeMetrics fetch minus RSS before it",
        format!(
            "{:.1} MiB (VmRSS {:.1} MiB before, VmHWM {:.1} MiB during)",
            mib(f.peak.saturating_sub(f.rss_before)),
            mib(f.rss_before),
            mib(f.peak)
        ),
        "—".into(),
        None,
    );
    let idle_ticks = f.idle_rate * f.took.as_secs_f64();
    report.row(
        "fetch: CPU of one NodeMetrics fetch (from its LIST to its last CPU tick, less the idle \
         rate)",
        format!(
            "{:.0} ms ({} ticks over {:.2} s, less {:.1} at the idle rate of the {:.1} s before)",
            (f.ticks as f64 - idle_ticks).max(0.0) * tick_ms,
            f.ticks,
            f.took.as_secs_f64(),
            idle_ticks,
            f.idle_for.as_secs_f64()
        ),
        "—".into(),
        None,
    );
    Ok(f.hwm_before_reset)
}

/// Whether a logged request is a watch.
fn is_watch(q: &apiserver::Logged) -> bool {
    let query = q.query.as_deref().unwrap_or_default();
    query.contains("watch=true") || query.contains("watch=1")
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` does not: then do nothing.
    if !std::env::args().any(|a| a == "--bench") {
        println!("cluster_scale: benchmark only; run `cargo bench --bench cluster_scale`");
        return;
    }
    let mut report = Report::default();
    let stopped = run(&mut report);
    if let Err(where_) = &stopped {
        report.note(format!("**Stopped**: {where_}"));
    }
    print_report(&report);
}

/// Settings from the environment.
struct Settings {
    nodes: usize,
    pods_per_node: usize,
    churn_per_sec: usize,
    churn_secs: usize,
    replace_percent: usize,
    idle_secs: usize,
    scrapes: usize,
    scrape_spread: Duration,
    watcher_secs: usize,
    connections: usize,
    ready_limit: Duration,
    extra_args: String,
    shard_of: usize,
    usage_samples: usize,
}

fn settings() -> Settings {
    Settings {
        nodes: env_usize("NODES", 5000).max(1),
        pods_per_node: env_usize("PODS_PER_NODE", 30),
        churn_per_sec: env_usize("CHURN_PER_SEC", 1000),
        churn_secs: env_usize("CHURN_SECS", 60),
        replace_percent: env_usize("REPLACE_PERCENT", 20),
        idle_secs: env_usize("IDLE_SECS", 30).max(1),
        scrapes: env_usize("SCRAPES", 5).max(1),
        scrape_spread: Duration::from_secs(env_usize("SCRAPE_SPREAD_SECS", 25) as u64),
        watcher_secs: env_usize("WATCHER_SECS", 10).max(1),
        connections: env_usize("CONNECTIONS", 8).max(1),
        ready_limit: Duration::from_secs(env_usize("READY_LIMIT_SECS", 600) as u64),
        extra_args: std::env::var("EXTRA_ARGS").unwrap_or_default(),
        shard_of: env_usize("SHARD_OF", 0),
        usage_samples: env_usize("USAGE_SAMPLES", 0),
    }
}

fn run(report: &mut Report) -> Result<(), String> {
    let s = settings();
    let b = budgets(s.nodes, s.extra_args.contains("--pod-scope"));
    let tck = clk_tck();
    let tick_ms = 1000.0 / tck as f64;
    report.note(format!("load average at start: {}", loadavg()));
    let mut args: Vec<String> = KUBE_PROBER_ARGS.iter().map(|a| a.to_string()).collect();
    args.extend(s.extra_args.split_whitespace().map(str::to_string));
    if s.usage_samples > 0 {
        // Fetch every 2 s so the fill takes minutes, not 15 (see the fill below).
        args.extend([
            "--interval".into(),
            "2s".into(),
            "--timeout".into(),
            "2s".into(),
        ]);
    }
    if std::env::var_os("KUBE_PROBER_BIN").is_none() {
        // The stand-in's NodeMetrics stand still after the fill (a real metrics-server's move
        // every resolution), and the fill's last step is dated when the fill began: without
        // this every host would leave /watcher 3 minutes later, and the /watcher phases and the
        // memory rows would measure an empty map instead of every host served.
        args.push("--watcher-max-age=0".into());
    }
    if s.shard_of > 0 {
        args.extend([
            "--shard".into(),
            "0".into(),
            "--total-shards".into(),
            s.shard_of.to_string(),
        ]);
    }
    report.note(format!(
        "command: NODES={} PODS_PER_NODE={} CHURN_PER_SEC={} CHURN_SECS={} IDLE_SECS={} \
         EXTRA_ARGS={:?} SHARD_OF={} USAGE_SAMPLES={} cargo bench --bench cluster_scale; \
         budgets: {}",
        s.nodes,
        s.pods_per_node,
        s.churn_per_sec,
        s.churn_secs,
        s.idle_secs,
        s.extra_args,
        s.shard_of,
        s.usage_samples,
        b.column
    ));
    report.note(format!(
        "child: KUBECONFIG=<stand-in> HOME=/nonexistent kube-prober {}",
        args.join(" ")
    ));

    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;
    let client = reqwest::Client::builder()
        .no_proxy()
        .http1_only()
        .timeout(Duration::from_secs(300))
        .build()
        .map_err(|e| format!("reqwest client: {e}"))?;

    // The stand-in, in this process, on a runtime of its own whose threads phase 3 can lower.
    let standin_threads = Threads::default();
    let api_rt = standin_threads.runtime()?;
    let api = api_rt.block_on(apiserver::start_with(Options {
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        bookmark_interval: BOOKMARK_INTERVAL,
        history_limit: HISTORY_LIMIT,
    }));
    let self_pid = std::process::id();
    let rss_before_gen = rss_kib(self_pid).0;
    eprintln!(
        "cluster_scale: generating {} nodes x {} pods",
        s.nodes, s.pods_per_node
    );
    let gen_start = Instant::now();
    let self_cpu0 = cpu_ticks(self_pid);
    let made = api.generate_with(&GenerateOptions {
        nodes: s.nodes,
        pods_per_node: s.pods_per_node,
        node_metrics: true,
        pod_metrics: false,
        seed: 42,
    });
    let gen_took = gen_start.elapsed();
    let gen_cpu = (cpu_ticks(self_pid) - self_cpu0) as f64 * tick_ms;
    let (standin_rss, standin_hwm) = rss_kib(self_pid);
    report.note(format!(
        "stand-in: {} nodes, {} pods, {} DaemonSets, {} Deployments, {} ReplicaSets, {} \
         namespaces, {} NodeMetrics; generated in {:.1} s ({:.1} s CPU); bench process RSS \
         {:.0} MiB before, {:.0} MiB after (peak {:.0} MiB)",
        made.nodes,
        made.pods,
        made.daemon_sets,
        made.deployments,
        made.replica_sets,
        made.namespaces,
        made.node_metrics,
        gen_took.as_secs_f64(),
        gen_cpu / 1000.0,
        mib(rss_before_gen),
        mib(standin_rss),
        mib(standin_hwm),
    ));
    let dir = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
    let kubeconfig = dir.path().join("kubeconfig");
    api.write_kubeconfig(&kubeconfig)
        .map_err(|e| format!("write kubeconfig: {e}"))?;

    // 1. Start to ready.
    let t0 = Instant::now();
    let (mut kp, addr) = start_kube_prober(&kubeconfig, &args)?;
    let pid = kp.pid();
    let sampler = RssSampler::start(pid, t0);
    let base = format!("http://{addr}");
    let ready = rt.block_on(async {
        let deadline = t0 + s.ready_limit;
        let mut last = String::new();
        loop {
            kp.running()?;
            if Instant::now() >= deadline {
                return Err(last);
            }
            let poll = client
                .get(format!("{base}/readyz"))
                .timeout(Duration::from_secs(5))
                .send()
                .await;
            match poll {
                Ok(r) if r.status() == reqwest::StatusCode::OK => return Ok(t0.elapsed()),
                Ok(r) => last = format!("{} {}", r.status(), r.text().await.unwrap_or_default()),
                Err(e) => last = e.to_string(),
            }
            tokio::time::sleep(READY_POLL).await;
        }
    });
    let ready = match ready {
        Ok(t) => t,
        Err(last) => {
            let (rss, hwm) = rss_kib(pid);
            let reqs = api.requests();
            let mut lists: BTreeMap<String, usize> = BTreeMap::new();
            for q in reqs.iter().filter(|q| !is_watch(q)) {
                *lists.entry(q.path.clone()).or_default() += 1;
            }
            report.row(
                "start to ready",
                format!("not ready after {:.0} s", s.ready_limit.as_secs_f64()),
                format!("≤ {:.0} s", b.ready_s),
                Some(false),
            );
            return Err(format!(
                "not ready within {:?} (last /readyz answer: {last}); kube-prober VmRSS {:.0} \
                 MiB, VmHWM {:.0} MiB, CPU {:.1} s; LIST requests so far by path: {lists:?}; \
                 last stderr:\n{}",
                s.ready_limit,
                mib(rss),
                mib(hwm),
                cpu_ticks(pid) as f64 * tick_ms / 1000.0,
                kp.tail()
            ));
        }
    };
    let hwm_at_ready = rss_kib(pid).1;
    report.row(
        "start to ready",
        format!("{:.2} s", ready.as_secs_f64()),
        format!("≤ {:.0} s", b.ready_s),
        Some(ready.as_secs_f64() <= b.ready_s),
    );
    report.note(format!(
        "ready after {ready:.2?} (VmHWM then {:.1} MiB); settling {SETTLE:?}",
        mib(hwm_at_ready)
    ));

    // 1b. Usage fill (`USAGE_SAMPLES`): the samples a cluster holds after running for 15
    // minutes. The stand-in's NodeMetrics otherwise never move, so each node's windows hold one
    // sample; with metrics-server they hold 60 (15 s apart). Each step moves every NodeMetrics
    // on (time and usage) and waits until a fetch begun after it has finished (two NodeMetrics
    // LISTs begun since), so every step becomes a sample; the last step is now.
    sampler.enter(1);
    if s.usage_samples > 0 {
        let f0 = Instant::now();
        let end = std::time::SystemTime::now();
        let lists = || {
            api.requests()
                .iter()
                .filter(|q| {
                    q.path == apiserver::NODE_METRICS_PATH
                        && !is_watch(q)
                        && !q.query.as_deref().unwrap_or_default().contains("continue=")
                })
                .count()
        };
        for k in 0..s.usage_samples {
            let back = 15 * (s.usage_samples - 1 - k) as u64;
            api.step_node_metrics(k as u64, end - Duration::from_secs(back));
            let seen = lists();
            let deadline = Instant::now() + Duration::from_secs(120);
            while lists() < seen + 2 {
                kp.running()?;
                if Instant::now() > deadline {
                    return Err(format!(
                        "usage fill: no NodeMetrics fetch finished within 120 s of step {k}"
                    ));
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        let (lo, hi) = rt.block_on(usage_samples_range(&client, &base))?;
        report.row(
            "usage samples per node after the fill (15m window, cpu)",
            format!(
                "{lo}–{hi} ({} steps in {:.0} s)",
                s.usage_samples,
                f0.elapsed().as_secs_f64()
            ),
            "—".into(),
            None,
        );
    }

    // 2. Idle CPU.
    sampler.enter(2);
    std::thread::sleep(SETTLE);
    kp.running()?;
    let idle0 = cpu_ticks(pid);
    let i0 = Instant::now();
    std::thread::sleep(Duration::from_secs(s.idle_secs as u64));
    kp.running()?;
    let idle_ticks = cpu_ticks(pid) - idle0;
    let idle_ms_s = idle_ticks as f64 * tick_ms / i0.elapsed().as_secs_f64();
    let (rss_idle, _) = rss_kib(pid);
    report.row(
        "idle CPU (no pod changes, static NodeMetrics)",
        format!(
            "{idle_ms_s:.1} ms/s ({idle_ticks} ticks in {} s)",
            s.idle_secs
        ),
        format!("≤ {:.0} ms/s", b.idle_ms_s),
        // With the fill, NodeMetrics are fetched every 2 s instead of 15 s: not the budget's.
        (s.usage_samples == 0).then_some(idle_ms_s <= b.idle_ms_s),
    );
    report.row(
        "VmRSS after the idle window",
        format!("{:.1} MiB", mib(rss_idle)),
        "—".into(),
        None,
    );

    // 2b. One NodeMetrics fetch: its memory, CPU and answer.
    sampler.enter(3);
    // It resets VmHWM: the peak rows below take the larger of it and what VmHWM was before.
    let hwm_before_fetch = fetch_phase(&api, &mut kp, report, made.node_metrics, tick_ms)?;

    // 3. Scrapes, as Prometheus makes them: `Accept-Encoding: gzip`, the body read to its last
    // byte and inflated into a buffer kept from the last scrape (Prometheus' scrape loop sizes
    // its buffer from the last scrape and inflates with a streaming gzip reader); then the same
    // without compression (`enable_compression: false`), where kube-prober inflates what it
    // holds and the text arrives whole. A client that does not decompress by itself, so the
    // inflating is timed on its own. Both counted from the request to the text in hand.
    sampler.enter(4);
    let lowered = standin_threads.set_nice(STANDIN_NICE_WHILE_SCRAPED);
    let raw = reqwest::Client::builder()
        .no_proxy()
        .http1_only()
        .no_gzip()
        .timeout(Duration::from_secs(300))
        .build()
        .map_err(|e| format!("reqwest client: {e}"))?;
    let scrapes = rt.block_on(async {
        let url = format!("{base}/metrics");
        let mut text: Vec<u8> = Vec::new();
        let mut out = Vec::with_capacity(s.scrapes);
        let start = tokio::time::Instant::now();
        // One pair first, not timed: Prometheus' scrape loop reads into a buffer sized by the
        // scrape before, so only its first scrape ever grows one from nothing.
        for i in 0..=s.scrapes {
            let timed = i.saturating_sub(1);
            tokio::time::sleep_until(start + s.scrape_spread * timed as u32 / s.scrapes as u32)
                .await;
            let (cpu0, self0) = (cpu_ticks(pid), cpu_ticks(std::process::id()));
            let (status, fetched, head, gz) =
                get(&raw, &url, &[("accept-encoding", "gzip")]).await?;
            if status != reqwest::StatusCode::OK {
                return Err(format!("GET /metrics (gzip): {status}"));
            }
            if head.get("content-encoding").and_then(|v| v.to_str().ok()) != Some("gzip") {
                return Err("GET /metrics with Accept-Encoding: gzip: not gzip".into());
            }
            let t = Instant::now();
            text.clear();
            std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&gz[..]), &mut text)
                .map_err(|e| format!("GET /metrics: the gzip body does not inflate: {e}"))?;
            let inflated = t.elapsed();
            let gz_cpu = (cpu_ticks(pid) - cpu0, cpu_ticks(std::process::id()) - self0);
            let (cpu0, self0) = (cpu_ticks(pid), cpu_ticks(std::process::id()));
            let (status, plain_took, _, plain) =
                get(&raw, &url, &[("accept-encoding", "identity")]).await?;
            let plain_cpu = (cpu_ticks(pid) - cpu0, cpu_ticks(std::process::id()) - self0);
            if status != reqwest::StatusCode::OK {
                return Err(format!("GET /metrics (identity): {status}"));
            }
            if i == 0 {
                continue;
            }
            let age = text
                .split(|b| *b == b'\n')
                .find_map(|l| l.strip_prefix(b"kube_prober_snapshot_age_seconds "))
                .and_then(|v| std::str::from_utf8(v).ok()?.trim().parse::<f64>().ok())
                .unwrap_or(f64::NAN);
            let series = text
                .split(|b| *b == b'\n')
                .filter(|l| !l.is_empty() && !l.starts_with(b"#"))
                .count();
            out.push(Scrape {
                fetched,
                inflated,
                gz_cpu,
                gz_bytes: gz.len(),
                bytes: text.len(),
                series,
                plain: plain_took,
                plain_bytes: plain.len(),
                plain_cpu,
                age,
            });
        }
        Ok::<_, String>(out)
    });
    let restored = standin_threads.set_nice(0);
    let scrapes = scrapes?;
    report.note(format!(
        "the stand-in's threads during the scrapes: nice {STANDIN_NICE_WHILE_SCRAPED} ({}), \
         then 0 again ({})",
        lowered.map_or_else(|e| format!("not set: {e}"), |n| format!("{n} threads")),
        restored.map_or_else(|e| format!("not set: {e}"), |n| format!("{n} threads")),
    ));
    kp.running()?;
    let p50_max = |f: &dyn Fn(&Scrape) -> Duration| {
        let mut v: Vec<Duration> = scrapes.iter().map(f).collect();
        v.sort();
        (v[(v.len() - 1) / 2], v[v.len() - 1])
    };
    let (gz50, gzmax) = p50_max(&|x| x.fetched + x.inflated);
    let (f50, fmax) = p50_max(&|x| x.fetched);
    let (i50, imax) = p50_max(&|x| x.inflated);
    let (pl50, plmax) = p50_max(&|x| x.plain);
    let last = &scrapes[scrapes.len() - 1];
    let what = if s.shard_of > 0 {
        format!("of shard 0 of {}", s.shard_of)
    } else {
        "unsharded".into()
    };
    let judged = s.shard_of > 0;
    let (gz_budget, plain_budget) = if judged {
        (
            format!("≤ {:.0} ms (one shard of 10)", b.shard_scrape_ms),
            "– (judged as Prometheus scrapes: gzip, the row above)".to_string(),
        )
    } else {
        let unjudged = format!(
            "– (budget is for one shard of 10: ≤ {:.0} ms)",
            b.shard_scrape_ms
        );
        (unjudged.clone(), unjudged)
    };
    report.row(
        &format!("`/metrics` scrape {what}, gzip (as Prometheus): fetched and inflated, p50 / max"),
        format!(
            "{:.1} / {:.1} ms (fetch {:.1} / {:.1}, inflate {:.1} / {:.1})",
            ms(gz50),
            ms(gzmax),
            ms(f50),
            ms(fmax),
            ms(i50),
            ms(imax)
        ),
        gz_budget,
        judged.then_some(ms(gzmax) <= b.shard_scrape_ms),
    );
    // Not judged: Prometheus asks for gzip (the row above). A client that does not is shown
    // for what it costs; here it reads 46 MB on the 2 cores kube-prober's fetches also use.
    report.row(
        &format!("`/metrics` scrape {what}, uncompressed (not as Prometheus), p50 / max"),
        format!("{:.1} / {:.1} ms", ms(pl50), ms(plmax)),
        plain_budget,
        None,
    );
    report.note(format!(
        "`/metrics` scrapes in order, gzip fetched + inflated / uncompressed, ms (CPU ticks of \
         kube-prober + this process, gzip / uncompressed; snapshot age at the gzip scrape): {}",
        scrapes
            .iter()
            .map(|x| format!(
                "{:.0}+{:.0}/{:.0} (cpu {}+{}/{}+{}, age {:.1})",
                ms(x.fetched),
                ms(x.inflated),
                ms(x.plain),
                x.gz_cpu.0,
                x.gz_cpu.1,
                x.plain_cpu.0,
                x.plain_cpu.1,
                x.age
            ))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    report.row(
        "`/metrics` body / series",
        format!(
            "{} bytes ({} gzip; uncompressed answer {} bytes) / {}",
            last.bytes, last.gz_bytes, last.plain_bytes, last.series
        ),
        "—".into(),
        None,
    );

    // 4. /watcher with gzip vs static bytes. The client of phase 3, which does not decompress
    // (reqwest's gzip feature is on in the dependency tree and would hand back the decoded body
    // without its Content-Encoding), so the static server serves exactly the bytes kube-prober
    // sent.
    let (status, took, head, body) = rt.block_on(get(
        &raw,
        &format!("{base}/watcher"),
        &[("accept-encoding", "gzip")],
    ))?;
    if status != reqwest::StatusCode::OK {
        return Err(format!("GET /watcher: {status}"));
    }
    let header = |k: &str| {
        head.get(k)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let encoding = header("content-encoding");
    let mut static_headers = vec![(
        "content-type".to_string(),
        header("content-type").unwrap_or_else(|| "application/json".into()),
    )];
    if let Some(e) = &encoding {
        static_headers.push(("content-encoding".into(), e.clone()));
    }
    report.note(format!(
        "`/watcher` with Accept-Encoding: gzip: {} bytes, Content-Encoding {}, one GET {:.1} ms",
        body.len(),
        encoding.as_deref().unwrap_or("none (identity)"),
        ms(took)
    ));
    let hosts = watcher_hosts(&body, encoding.as_deref())?;
    report.row(
        "`/watcher` hosts with CPU and Memory",
        format!("{hosts} of {} nodes", s.nodes),
        "every node".into(),
        Some(hosts == s.nodes),
    );
    sampler.enter(5);
    let kp_wrk = run_wrk(&format!("{base}/watcher"), s.connections, s.watcher_secs)?;
    kp.running()?;
    let (static_addr, static_task) = rt.block_on(static_server(body.clone(), static_headers));
    let static_wrk = run_wrk(
        &format!("http://{static_addr}/watcher"),
        s.connections,
        s.watcher_secs,
    )?;
    static_task.abort();
    let pct = 100.0 * kp_wrk.rps / static_wrk.rps.max(f64::MIN_POSITIVE);
    report.row(
        "`/watcher` all hosts, Accept-Encoding: gzip, vs static-bytes hyper server",
        format!(
            "{pct:.0} % ({:.1} vs {:.1} req/s; body {} bytes, {})",
            kp_wrk.rps,
            static_wrk.rps,
            body.len(),
            match &encoding {
                Some(e) => format!("Content-Encoding {e}"),
                None => "not compressed".into(),
            }
        ),
        format!("≥ {:.0} %", b.watcher_pct),
        Some(pct >= b.watcher_pct),
    );
    report.note(format!(
        "wrk -t1 -c{} -d{}s -H 'Accept-Encoding: gzip': kube-prober {} requests{}, static \
         server {} requests{}",
        s.connections,
        s.watcher_secs,
        kp_wrk.requests,
        if kp_wrk.errors.is_empty() {
            String::new()
        } else {
            format!(" ({})", kp_wrk.errors.join("; "))
        },
        static_wrk.requests,
        if static_wrk.errors.is_empty() {
            String::new()
        } else {
            format!(" ({})", static_wrk.errors.join("; "))
        },
    ));

    // 5. Full relist after 410 Gone.
    let watched: BTreeSet<String> = api
        .requests()
        .iter()
        .filter(|q| is_watch(q))
        .map(|q| q.path.clone())
        .collect();
    let cpu_relist0 = cpu_ticks(pid);
    let r0 = Instant::now();
    let seen_before = api.requests().len();
    sampler.enter(6);
    let compacted_at = api.force_relist();
    let relisted = loop {
        kp.running()?;
        let reqs = api.requests();
        let after = &reqs[seen_before.min(reqs.len())..];
        // Every watched path listed again, then watched again after that list.
        let done = watched.iter().all(|path| {
            let first_list = after.iter().position(|q| &q.path == path && !is_watch(q));
            first_list.is_some_and(|i| after[i..].iter().any(|q| &q.path == path && is_watch(q)))
        });
        if done {
            let pages = after.iter().filter(|q| !is_watch(q)).count();
            break Ok((r0.elapsed(), pages));
        }
        if r0.elapsed() >= s.ready_limit {
            let pages = after.iter().filter(|q| !is_watch(q)).count();
            break Err(pages);
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    match relisted {
        Ok((took, pages)) => {
            let relist_cpu = (cpu_ticks(pid) - cpu_relist0) as f64 * tick_ms;
            report.note(format!(
                "relist after 410 (compaction at resourceVersion {compacted_at}, {} watched \
                 paths: {watched:?}): every path listed and watched again after {:.1} s, {pages} \
                 LIST requests, kube-prober CPU {:.1} s",
                watched.len(),
                took.as_secs_f64(),
                relist_cpu / 1000.0
            ));
            report.row(
                "full relist after 410 (to watching again)",
                format!("{:.1} s", took.as_secs_f64()),
                "—".into(),
                None,
            );
        }
        Err(pages) => {
            return Err(format!(
                "the relist after 410 did not finish within {:?} ({pages} LIST requests); \
                 kube-prober VmHWM {:.0} MiB",
                s.ready_limit,
                mib(rss_kib(pid).1)
            ));
        }
    }
    sampler.enter(7);
    std::thread::sleep(AFTER_TICK);
    kp.running()?;
    let (rss_relist, hwm_relist) = rss_kib(pid);
    let hwm_relist = hwm_relist.max(hwm_before_fetch);
    report.row(
        "VmRSS / VmHWM one tick after the relist",
        format!("{:.1} / {:.1} MiB", mib(rss_relist), mib(hwm_relist)),
        "—".into(),
        None,
    );

    // 6. Churn.
    sampler.enter(8);
    let w = churn_window(&rt, &api, &kp, &s)?;
    if let Some(note) = w.perf_note {
        report.note(note);
    }
    kp.running()?;
    let wall = w.wall.as_secs_f64();
    let cores = w.cpu_ticks as f64 * tick_ms / 1000.0 / wall;
    let achieved = w.counts.total() as f64 / w.churn_wall.as_secs_f64();
    report.row(
        &format!("CPU at {} pod changes per second", s.churn_per_sec),
        format!(
            "{cores:.3} cores ({} ticks over {wall:.1} s; {achieved:.0} changes/s made)",
            w.cpu_ticks
        ),
        format!("≤ {:.2} core", b.churn_cores),
        // With the fill, kube-prober fetches all NodeMetrics every 2 s instead of 15 s, and
        // that decoding is in this window too: not the budget's configuration.
        (s.usage_samples == 0).then_some(cores <= b.churn_cores),
    );
    report.note(format!(
        "churn: {} updates, {} creations, {} deletions over {:.1} s; bench process (stand-in + \
         churn) CPU {:.1} s in the window, on the same cores; the window held {} kube-prober \
         ticks, {}, and {} NodeMetrics fetches",
        w.counts.updates,
        w.counts.creates,
        w.counts.deletes,
        w.churn_wall.as_secs_f64(),
        w.self_ticks as f64 * tick_ms / 1000.0,
        w.window_ticks,
        if w.aligned {
            "from just after one to just after another"
        } else {
            "not aligned to them (no `tick made` line seen: an older build?)"
        },
        w.fetches
    ));

    // 7. Peak of the run.
    sampler.enter(9);
    std::thread::sleep(AFTER_TICK);
    kp.running()?;
    let (rss_end, hwm_end) = rss_kib(pid);
    let hwm_end = hwm_end.max(hwm_before_fetch);
    report.row(
        "peak RSS (VmHWM at the end or, if larger, before the fetch phase reset it: start, \
         relist after 410, churn)",
        format!("{:.1} MiB", mib(hwm_end)),
        format!("≤ {:.0} MiB", b.peak_rss_mib),
        Some(mib(hwm_end) <= b.peak_rss_mib),
    );
    report.row(
        "VmRSS at the end",
        format!("{:.1} MiB", mib(rss_end)),
        "—".into(),
        None,
    );
    let (standin_rss_end, standin_hwm_end) = rss_kib(self_pid);
    report.note(format!(
        "bench process (stand-in) at the end: VmRSS {:.0} MiB, VmHWM {:.0} MiB",
        mib(standin_rss_end),
        mib(standin_hwm_end)
    ));
    report.note(format!(
        "kube-prober WARN/ERROR log lines over the run: {}",
        kp.warnings.load(Ordering::Relaxed)
    ));
    sampler.finish(report);
    report.note(format!("load average at end: {}", loadavg()));
    drop(kp);
    drop(api);
    Ok(())
}

fn print_report(report: &Report) {
    let s = settings();
    let b = budgets(s.nodes, s.extra_args.contains("--pod-scope"));
    println!(
        "## Cluster role at {} nodes × {} pods per node ({} budgets)\n",
        s.nodes, s.pods_per_node, b.column
    );
    println!("| measure | value | budget | holds |");
    println!("|---|---|---|---|");
    for [m, v, bud, h] in &report.rows {
        println!("| {m} | {v} | {bud} | {h} |");
    }
    println!();
    for n in &report.notes {
        println!("- {n}");
    }
    println!();
    println!("Machine:\n");
    for (k, v) in machine_info() {
        println!("- {k}: {v}");
    }
    println!("- CLK_TCK: {}", clk_tck());
}

/// The hosts of a `/watcher` answer that carry both a CPU and a Memory entry.
fn watcher_hosts(body: &[u8], encoding: Option<&str>) -> Result<usize, String> {
    let mut text = Vec::new();
    let json = if encoding == Some("gzip") {
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(body), &mut text)
            .map_err(|e| format!("/watcher: gzip: {e}"))?;
        &text[..]
    } else {
        body
    };
    let v: serde_json::Value =
        serde_json::from_slice(json).map_err(|e| format!("/watcher: {e}"))?;
    let map = v["data"]["NodeMetricsMap"]
        .as_object()
        .ok_or("/watcher: no data.NodeMetricsMap")?;
    let has = |m: &serde_json::Value, kind: &str| {
        m["metrics"]
            .as_array()
            .is_some_and(|a| a.iter().any(|e| e["type"] == kind))
    };
    Ok(map
        .values()
        .filter(|m| has(m, "CPU") && has(m, "Memory"))
        .count())
}
