//! The soak: kube-prober's cluster role on a real control plane ([`crate::control_plane`]:
//! etcd, kube-apiserver, kwok, metrics-server) pushing OTLP into the real Collector
//! ([`crate::otelcol`]) for a long time while the world misbehaves on a schedule:
//!
//! - pods churn all along: every change deletes one usage pod and creates another under a new
//!   name on the same node (`CHURN` changes a second), so the pod count stays put while every
//!   pod's series must die and be born again;
//! - metrics-server is restarted (SIGKILL, then started again) every `metrics_server_restart`;
//! - the API server is SIGKILLed and started again every `apiserver_kill`;
//! - the Collector is down for `collector_down` at the end of every `collector_cycle` (stopped
//!   with SIGTERM, started again on the same ports).
//!
//! Every `sample` it reads kube-prober's RSS, open fds and threads from /proc, and from its
//! `/metrics` the series count, the async runtime's alive tasks
//! (`kube_prober_runtime_alive_tasks`) and the push counters. At the end it brings the
//! Collector back, waits until fds and tasks are back to their undisturbed baseline (bounded),
//! and settles the points: the Collector is stopped, kube-prober makes two more (failed) pushes
//! so that none is in flight, and the points kube-prober counts as sent
//! (`kube_prober_sink_points_total`) are set against the points the Collector exported over
//! all its lives ([`Collector::exported_points`]; the pipeline has no queue, so exported is
//! accepted). Every point not sent is in a failed push (`kube_prober_sink_failures_total`) or
//! a skipped tick, and counted by reason in `kube_prober_sink_points_dropped_total`.
//!
//! [`run`] returns every sample and event; [`Slope`] fits each quantity. The bench
//! `benches/soak.rs` runs it at the size and prints the figures; the test
//! `real/soak.rs` runs three minutes of it at 50 × 5 and asserts the slopes coarsely.
#![allow(dead_code)]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, PostParams};

use crate::Prober;
use crate::control_plane::{ControlPlane, Options, node_name, usage_pod};
use crate::otelcol::Collector;
use crate::populate;

/// What to run.
#[derive(Debug, Clone)]
pub struct Settings {
    /// How long the disturbed run lasts (from the first full scrape and push).
    pub duration: Duration,
    pub nodes: usize,
    pub pods_per_node: usize,
    /// Pod changes a second (each a delete and a create).
    pub churn: f64,
    pub metrics_server_restart: Duration,
    pub apiserver_kill: Duration,
    pub collector_cycle: Duration,
    pub collector_down: Duration,
    /// How often kube-prober is sampled.
    pub sample: Duration,
    /// kube-prober's `--sink-interval`.
    pub push_interval: Duration,
    /// Requests in flight while populating the cluster.
    pub create_concurrency: usize,
    /// metrics-server's `--metric-resolution`.
    pub metric_resolution: Duration,
}

impl Settings {
    /// The three-minute version `real/soak.rs` runs in CI: 50 nodes × 5 pods, metrics-server
    /// restarted every 45 s, the API server killed at 90 s, the Collector down 30 s of every
    /// 60 s, a push every 5 s, a sample every 2 s.
    pub fn ci() -> Settings {
        Settings {
            duration: Duration::from_secs(180),
            nodes: 50,
            pods_per_node: 5,
            churn: 5.0,
            metrics_server_restart: Duration::from_secs(45),
            apiserver_kill: Duration::from_secs(90),
            collector_cycle: Duration::from_secs(60),
            collector_down: Duration::from_secs(30),
            sample: Duration::from_secs(2),
            push_interval: Duration::from_secs(5),
            create_concurrency: 16,
            metric_resolution: Duration::from_secs(15),
        }
    }

    pub fn pods(&self) -> usize {
        self.nodes * self.pods_per_node
    }
}

/// A disturbance of the schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disturbance {
    MetricsServerRestart,
    ApiServerKill,
    CollectorDown,
    CollectorUp,
}

/// Every disturbance of a run, by time from its start: metrics-server at each multiple of its
/// period, the API server at each of its own, the Collector down for the last `collector_down`
/// of each cycle (the last window may reach past the end: the Collector comes back in the
/// settling that follows).
pub fn schedule(s: &Settings) -> Vec<(Duration, Disturbance)> {
    let mut out = Vec::new();
    let every = |period: Duration, what: Disturbance, out: &mut Vec<(Duration, Disturbance)>| {
        if period.is_zero() {
            return;
        }
        let mut t = period;
        while t < s.duration {
            out.push((t, what));
            t += period;
        }
    };
    every(
        s.metrics_server_restart,
        Disturbance::MetricsServerRestart,
        &mut out,
    );
    every(s.apiserver_kill, Disturbance::ApiServerKill, &mut out);
    if !s.collector_cycle.is_zero() && !s.collector_down.is_zero() {
        let mut start = s.collector_cycle.saturating_sub(s.collector_down);
        while start < s.duration {
            out.push((start, Disturbance::CollectorDown));
            let up = start + s.collector_down;
            if up < s.duration {
                out.push((up, Disturbance::CollectorUp));
            }
            start += s.collector_cycle;
        }
    }
    out.sort_by_key(|(t, _)| *t);
    out
}

/// One reading of kube-prober.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    /// Seconds from the start of the disturbed run (negative: the undisturbed minutes before).
    pub at: f64,
    pub rss_kib: u64,
    pub fds: u64,
    pub threads: u64,
    /// From `/metrics` (`None`: the scrape failed).
    pub scraped: Option<Scraped>,
}

impl Sample {
    /// The columns of [`Sample::CSV_HEADER`]; a failed scrape leaves its columns empty.
    pub fn csv(&self) -> String {
        let scraped = self.scraped.map_or_else(
            || ",,,,,,".to_string(),
            |c| {
                format!(
                    "{},{},{},{},{},{},{}",
                    c.series,
                    c.alive_tasks,
                    c.pushes,
                    c.push_failures,
                    c.skipped_ticks,
                    c.points,
                    c.dropped
                )
            },
        );
        format!(
            "{:.1},{},{},{},{scraped}",
            self.at, self.rss_kib, self.fds, self.threads
        )
    }

    pub const CSV_HEADER: &str = "at_s,rss_kib,fds,threads,series,alive_tasks,pushes,\
                                  push_failures,skipped_ticks,points,dropped";
}

/// What one scrape of `/metrics` says.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Scraped {
    /// Samples in the exposition.
    pub series: u64,
    pub alive_tasks: f64,
    pub pushes: f64,
    pub push_failures: f64,
    pub skipped_ticks: f64,
    pub points: f64,
    /// Points lost, every sink and reason (`kube_prober_sink_points_dropped_total`).
    pub dropped: f64,
    /// Watch restarts and relists, every resource and reason.
    pub watch_restarts: f64,
    pub relists: f64,
    /// Nodes with `kube_prober_node_pods` and the pods they count.
    pub nodes: u64,
    pub pods: f64,
    /// Nodes with usage (`kube_prober_node_usage_timestamp_seconds`).
    pub usage_nodes: u64,
}

/// The value of every sample of family `name` (exact name, any labels), summed; `None` when it
/// has none.
pub fn sum_of(text: &str, name: &str) -> Option<f64> {
    let mut found = None;
    for l in text.lines() {
        let Some(rest) = l.strip_prefix(name) else {
            continue;
        };
        if !(rest.starts_with('{') || rest.starts_with(' ')) {
            continue;
        }
        let value = rest.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok());
        if let Some(v) = value {
            *found.get_or_insert(0.0) += v;
        }
    }
    found
}

/// Reads a Prometheus text exposition of kube-prober's.
pub fn parse_scrape(text: &str) -> Scraped {
    let sum = |name: &str| sum_of(text, name).unwrap_or(0.0);
    let node_pods: Vec<f64> = text
        .lines()
        .filter_map(|l| l.strip_prefix("kube_prober_node_pods{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .collect();
    Scraped {
        series: text
            .lines()
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .count() as u64,
        alive_tasks: sum("kube_prober_runtime_alive_tasks"),
        pushes: sum("kube_prober_sink_pushes_total"),
        push_failures: sum("kube_prober_sink_failures_total"),
        skipped_ticks: sum("kube_prober_sink_skipped_ticks_total"),
        points: sum("kube_prober_sink_points_total"),
        dropped: sum("kube_prober_sink_points_dropped_total"),
        watch_restarts: sum("kube_prober_watch_restarts_total"),
        relists: sum("kube_prober_watch_relists_total"),
        nodes: node_pods.len() as u64,
        pods: node_pods.iter().sum(),
        usage_nodes: text
            .lines()
            .filter(|l| l.starts_with("kube_prober_node_usage_timestamp_seconds{"))
            .count() as u64,
    }
}

/// A least-squares line through (hours, value): its slope per hour, the residuals' standard
/// deviation (the noise) and the mean.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Slope {
    pub per_hour: f64,
    pub noise: f64,
    pub mean: f64,
    pub n: usize,
    /// Hours the points span.
    pub hours: f64,
}

impl Slope {
    /// Fits `points` of (seconds, value).
    pub fn fit(points: &[(f64, f64)]) -> Slope {
        let n = points.len();
        if n < 2 {
            let mean = points.first().map_or(0.0, |p| p.1);
            return Slope {
                mean,
                n,
                ..Slope::default()
            };
        }
        let xs: Vec<f64> = points.iter().map(|p| p.0 / 3600.0).collect();
        let mx = xs.iter().sum::<f64>() / n as f64;
        let my = points.iter().map(|p| p.1).sum::<f64>() / n as f64;
        let sxx: f64 = xs.iter().map(|x| (x - mx).powi(2)).sum();
        let sxy: f64 = xs
            .iter()
            .zip(points)
            .map(|(x, p)| (x - mx) * (p.1 - my))
            .sum();
        let per_hour = if sxx > 0.0 { sxy / sxx } else { 0.0 };
        let ss: f64 = xs
            .iter()
            .zip(points)
            .map(|(x, p)| (p.1 - (my + per_hour * (x - mx))).powi(2))
            .sum();
        Slope {
            per_hour,
            noise: (ss / n as f64).sqrt(),
            mean: my,
            n,
            hours: xs[n - 1] - xs[0],
        }
    }

    /// What the line grows over the span it was fitted on.
    pub fn growth(&self) -> f64 {
        self.per_hour * self.hours
    }

    /// Flat: the line grows over its span by no more than twice the noise, or than `floor`.
    pub fn flat(&self, floor: f64) -> bool {
        self.growth() <= (2.0 * self.noise).max(floor)
    }
}

/// Something that happened during the run, at seconds from its start.
#[derive(Debug, Clone)]
pub struct Event {
    pub at: f64,
    pub what: String,
}

/// The pod changes of the churn.
#[derive(Debug, Default)]
pub struct Churn {
    /// Changes made (a pod deleted and its successor created).
    pub done: AtomicU64,
    /// Requests that failed and were tried again (the API server down, mostly).
    pub retried: AtomicU64,
}

/// Everything a run saw.
#[derive(Debug, Default)]
pub struct Outcome {
    pub samples: Vec<Sample>,
    pub events: Vec<Event>,
    pub populated: populate::Populated,
    /// Control plane up, cluster populated, kube-prober's first full scrape and push: seconds.
    pub set_up_secs: f64,
    pub churn_done: u64,
    pub churn_retried: u64,
    /// Undisturbed values before the first disturbance: (fds, alive tasks, series), the largest
    /// of each over the last half of that window.
    pub baseline: (u64, f64, u64),
    /// After the run, the Collector back and a push through: (fds, alive tasks, series, seconds
    /// it took to get there; `None`: not within the bound).
    pub recovered: Option<(u64, f64, u64, f64)>,
    /// Points the Collector exported over all its lives, and its lives.
    pub accepted: u64,
    pub collector_lives: u32,
    /// kube-prober's counters once no push was in flight, the Collector stopped.
    pub settled: Scraped,
    /// kube-prober's log lines at warn or error level, by message (first 20 messages).
    pub warnings: Vec<(String, usize)>,
}

/// Samples of the disturbed run (`at >= from`) as (seconds, value) for one quantity.
pub fn series_of(out: &Outcome, from: f64, f: impl Fn(&Sample) -> Option<f64>) -> Vec<(f64, f64)> {
    out.samples
        .iter()
        .filter(|s| s.at >= from)
        .filter_map(|s| f(s).map(|v| (s.at, v)))
        .collect()
}

/// (VmRSS KiB, Threads) of `pid`.
fn proc_status(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let get = |key: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    (get("VmRSS:"), get("Threads:"))
}

/// Open file descriptors of `pid` (entries of /proc/PID/fd).
pub fn open_fds(pid: u32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count() as u64)
        .unwrap_or(0)
}

async fn scrape(client: &reqwest::Client, url: &str) -> Option<String> {
    let r = client.get(url).send().await.ok()?;
    if !r.status().is_success() {
        return None;
    }
    r.text().await.ok()
}

/// One sample of kube-prober at `at` seconds.
async fn sample(client: &reqwest::Client, url: &str, pid: u32, at: f64) -> Sample {
    let (rss_kib, threads) = proc_status(pid);
    let fds = open_fds(pid);
    let scraped = scrape(client, url).await.map(|t| parse_scrape(&t));
    Sample {
        at,
        rss_kib,
        fds,
        threads,
        scraped,
    }
}

/// The shared state of a run's tasks.
struct Run {
    cp: Arc<ControlPlane>,
    started: Instant,
    events: Mutex<Vec<Event>>,
    stop: AtomicBool,
}

impl Run {
    fn secs(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }
    fn event(&self, what: impl Into<String>) {
        let at = self.secs();
        let what = what.into();
        eprintln!("soak: {at:.1} s: {what}");
        self.events.lock().unwrap().push(Event { at, what });
    }
}

/// Runs the soak with `s`; panics when the set-up fails (a component that does not start, a
/// cluster that is not populated, kube-prober that never serves every node or never pushes).
pub fn run(s: &Settings) -> Outcome {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let t0 = Instant::now();
    let cp = Arc::new(ControlPlane::start(Options {
        metric_resolution: s.metric_resolution,
        ..Options::bare()
    }));
    rt.block_on(run_on(s, cp, t0))
}

async fn run_on(s: &Settings, cp: Arc<ControlPlane>, t0: Instant) -> Outcome {
    let mut out = Outcome::default();
    let kube = populate::kube_client(&cp.admin_kubeconfig).await;
    out.populated = populate::populate(&kube, s.nodes, s.pods_per_node, s.create_concurrency).await;
    let mut collector = Collector::start().await;
    let prober = start_prober(s, &cp, &collector);
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .no_proxy()
        .build()
        .expect("an HTTP client");
    let url = prober.url("/metrics");
    wait_full_and_pushed(s, &client, &url).await;
    out.set_up_secs = t0.elapsed().as_secs_f64();
    eprintln!(
        "soak: set up in {:.0} s; disturbed run of {:?}",
        out.set_up_secs, s.duration
    );
    let run = Arc::new(Run {
        cp: cp.clone(),
        started: Instant::now(),
        events: Mutex::new(Vec::new()),
        stop: AtomicBool::new(false),
    });
    let churn = Arc::new(Churn::default());
    let churner = tokio::spawn(churn_loop(
        kube.clone(),
        s.clone(),
        run.clone(),
        churn.clone(),
    ));
    let pid = prober.child.id();
    let sampler = tokio::spawn(sample_loop(
        client.clone(),
        url.clone(),
        pid,
        s.sample,
        run.clone(),
    ));
    let supervisor = tokio::spawn(supervise_metrics_server(run.clone()));
    disturb(s, &run, &mut collector).await;
    run.stop.store(true, Ordering::Relaxed);
    supervisor.abort();
    let _ = churner.await;
    out.samples = sampler.await.unwrap_or_default();
    out.churn_done = churn.done.load(Ordering::Relaxed);
    out.churn_retried = churn.retried.load(Ordering::Relaxed);
    out.baseline = baseline(s, &out.samples);
    out.recovered = recover(&run, &mut collector, &client, &url, pid, out.baseline).await;
    out.settled = settle(&run, &mut collector, &client, &url).await;
    out.accepted = collector.exported_points();
    out.collector_lives = collector.lives();
    out.events = run.events.lock().unwrap().clone();
    out.warnings = warnings(prober);
    out
}

/// kube-prober's cluster role on the control plane, pushing OTLP/gRPC to the Collector.
fn start_prober(s: &Settings, cp: &ControlPlane, collector: &Collector) -> Prober {
    let interval = format!("{}s", s.push_interval.as_secs().max(1));
    let kubeconfig = cp.admin_kubeconfig.to_string_lossy().into_owned();
    Prober::start_with_env(
        &[
            "--role",
            "cluster",
            "--cluster-name",
            "soak",
            "--sink",
            "otlp",
            "--otlp-endpoint",
            &collector.grpc_endpoint,
            "--sink-interval",
            &interval,
        ],
        &[("KUBECONFIG", kubeconfig.as_str())],
    )
}

/// Waits (15 minutes at most) until kube-prober serves every node with all its pods and its
/// usage (metrics-server's NodeMetrics) and has pushed points that the Collector took.
async fn wait_full_and_pushed(s: &Settings, client: &reqwest::Client, url: &str) {
    let deadline = Instant::now() + Duration::from_secs(900);
    loop {
        let got = scrape(client, url).await.map(|t| parse_scrape(&t));
        if let Some(g) = got
            && g.nodes as usize == s.nodes
            && g.pods as usize == s.pods()
            && g.usage_nodes as usize == s.nodes
            && g.points > 0.0
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "kube-prober did not serve {} nodes with {} pods and their usage and push within 15 \
             minutes: {got:?}",
            s.nodes,
            s.pods()
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Samples every `every` until the run stops.
async fn sample_loop(
    client: reqwest::Client,
    url: String,
    pid: u32,
    every: Duration,
    run: Arc<Run>,
) -> Vec<Sample> {
    let mut out = Vec::new();
    let mut ticker = tokio::time::interval(every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    eprintln!("soak: sample {}", Sample::CSV_HEADER);
    while !run.stop.load(Ordering::Relaxed) {
        ticker.tick().await;
        let one = sample(&client, &url, pid, run.secs()).await;
        // One line a sample, so that a run cut short still leaves its samples in the log.
        eprintln!("soak: sample {}", one.csv());
        out.push(one);
    }
    out
}

/// `s.churn` pod changes a second until the run stops, 16 in flight at most; a change whose
/// request fails is tried again (once a second) until it goes through or the run stops.
async fn churn_loop(kube: kube::Client, s: Settings, run: Arc<Run>, churn: Arc<Churn>) {
    if s.churn <= 0.0 || s.pods() == 0 {
        return;
    }
    let pods: Api<Pod> = Api::namespaced(kube, "default");
    let permits = Arc::new(tokio::sync::Semaphore::new(16));
    let total = s.pods() as u64;
    let per = s.pods_per_node.max(1) as u64;
    let mut issued = 0u64;
    while !run.stop.load(Ordering::Relaxed) {
        let due = (run.secs() * s.churn) as u64;
        while issued < due && !run.stop.load(Ordering::Relaxed) {
            let Ok(permit) = permits.clone().acquire_owned().await else {
                return;
            };
            // Change `issued` replaces generation g of slot k by generation g + 1.
            let (k, g) = (issued % total, issued / total);
            let node = node_name((k / per) as usize);
            let j = k % per;
            let old = format!("usage-{node}-{}", j + g * per);
            let new = usage_pod(
                "default",
                &node,
                (j + (g + 1) * per) as usize,
                "100m",
                "256Mi",
            );
            let (pods, run, churn) = (pods.clone(), run.clone(), churn.clone());
            tokio::spawn(async move {
                replace_pod(&pods, &old, new, &run, &churn).await;
                drop(permit);
            });
            issued += 1;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = permits.acquire_many(16).await;
}

/// Deletes pod `old` at once and creates `new`, each tried again until it is done (404 and 409
/// count as done: a try that went through before its answer was lost).
async fn replace_pod(pods: &Api<Pod>, old: &str, new: serde_json::Value, run: &Run, churn: &Churn) {
    let new: Pod = serde_json::from_value(new).expect("usage_pod is a Pod");
    let dp = DeleteParams::default().grace_period(0);
    loop {
        match pods.delete(old, &dp).await {
            Ok(_) => break,
            Err(kube::Error::Api(e)) if e.code == 404 => break,
            Err(_) if run.stop.load(Ordering::Relaxed) => return,
            Err(_) => churn.retried.fetch_add(1, Ordering::Relaxed),
        };
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    loop {
        match pods.create(&PostParams::default(), &new).await {
            Ok(_) => break,
            Err(kube::Error::Api(e)) if e.code == 409 => break,
            Err(_) if run.stop.load(Ordering::Relaxed) => return,
            Err(_) => churn.retried.fetch_add(1, Ordering::Relaxed),
        };
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    churn.done.fetch_add(1, Ordering::Relaxed);
}

/// Restarts metrics-server when it has exited, checked every 5 s until the run stops, as its
/// Deployment's kubelet would: restarted while the API server is down it cannot read its
/// authentication config and exits. A restart waits 10 s more each time it comes back dead in
/// a row (at most 60 s), as a kubelet backs off a crash loop.
async fn supervise_metrics_server(run: Arc<Run>) {
    let mut backoff = 0u64;
    while !run.stop.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_secs(5 + backoff)).await;
        let cp = run.cp.clone();
        let exited = tokio::task::spawn_blocking(move || cp.restart_if_exited("metrics-server"))
            .await
            .ok()
            .flatten();
        match exited {
            Some(status) => {
                run.event(format!(
                    "metrics-server had exited ({status}): started again"
                ));
                backoff = (backoff + 10).min(60);
            }
            None => backoff = 0,
        }
    }
}

/// Applies the schedule, each disturbance at its time; returns at the end of the run.
async fn disturb(s: &Settings, run: &Arc<Run>, collector: &mut Collector) {
    for (at, what) in schedule(s) {
        tokio::time::sleep_until((run.started + at).into()).await;
        match what {
            Disturbance::MetricsServerRestart => {
                let cp = run.cp.clone();
                let _ = tokio::task::spawn_blocking(move || cp.restart("metrics-server")).await;
                run.event("metrics-server restarted");
            }
            Disturbance::ApiServerKill => {
                let r = run.clone();
                // Killed and started at once; its readiness is waited for beside the schedule.
                tokio::task::spawn_blocking(move || {
                    r.cp.restart("kube-apiserver");
                    r.event("kube-apiserver SIGKILLed and started again");
                    r.cp.wait_apiserver(Duration::from_secs(300));
                    r.event("kube-apiserver ready");
                });
            }
            Disturbance::CollectorDown => {
                let n = collector.stop().await;
                run.event(format!(
                    "Collector stopped ({n} points exported in that life)"
                ));
            }
            Disturbance::CollectorUp => {
                collector.start_again().await;
                run.event("Collector started again");
            }
        }
    }
    tokio::time::sleep_until((run.started + s.duration).into()).await;
}

/// The undisturbed baseline: the largest fds, tasks and series over the last half of the time
/// before the first disturbance (the whole run when there is none).
fn baseline(s: &Settings, samples: &[Sample]) -> (u64, f64, u64) {
    let first = schedule(s)
        .first()
        .map_or(s.duration.as_secs_f64(), |(t, _)| t.as_secs_f64());
    let window: Vec<&Sample> = samples
        .iter()
        .filter(|x| x.at >= first / 2.0 && x.at < first && x.scraped.is_some())
        .collect();
    let fds = window.iter().map(|x| x.fds).max().unwrap_or(0);
    let tasks = window
        .iter()
        .filter_map(|x| x.scraped.map(|c| c.alive_tasks))
        .fold(0.0, f64::max);
    let series = window
        .iter()
        .filter_map(|x| x.scraped.map(|c| c.series))
        .max()
        .unwrap_or(0);
    (fds, tasks, series)
}

/// After the run: the Collector back up (if the schedule left it down) and the API server
/// ready, then (120 s at most) a push through and fds and tasks at or below the baseline.
async fn recover(
    run: &Run,
    collector: &mut Collector,
    client: &reqwest::Client,
    url: &str,
    pid: u32,
    base: (u64, f64, u64),
) -> Option<(u64, f64, u64, f64)> {
    let t = Instant::now();
    if !collector.running() {
        collector.start_again().await;
        run.event("Collector started again (settling)");
    }
    let cp = run.cp.clone();
    let _ = tokio::task::spawn_blocking(move || cp.wait_apiserver(Duration::from_secs(300))).await;
    let pushed_at = scrape(client, url).await.map(|t| parse_scrape(&t).points);
    let deadline = t + Duration::from_secs(120);
    while Instant::now() < deadline {
        let s = sample(client, url, pid, run.secs()).await;
        if let (Some(c), Some(before)) = (s.scraped, pushed_at)
            && c.points > before
            && s.fds <= base.0
            && c.alive_tasks <= base.1
        {
            let secs = t.elapsed().as_secs_f64();
            run.event(format!(
                "recovered: fds {}, tasks {}, series {}",
                s.fds, c.alive_tasks, c.series
            ));
            return Some((s.fds, c.alive_tasks, c.series, secs));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    run.event("not recovered within 120 s");
    None
}

/// Stops the Collector and waits (bounded) until kube-prober has finished two more pushes,
/// which fail: no push is in flight then, and the counters hold every push to the Collector.
async fn settle(
    run: &Run,
    collector: &mut Collector,
    client: &reqwest::Client,
    url: &str,
) -> Scraped {
    let n = collector.stop().await;
    run.event(format!(
        "Collector stopped for the count ({n} points in its last life)"
    ));
    let pushes_at_stop = loop {
        if let Some(t) = scrape(client, url).await {
            break parse_scrape(&t).pushes;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        if let Some(t) = scrape(client, url).await {
            let c = parse_scrape(&t);
            if c.pushes >= pushes_at_stop + 2.0 {
                return c;
            }
        }
        assert!(
            Instant::now() < deadline,
            "kube-prober made no two pushes within 10 minutes of the Collector's stop"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// kube-prober's warn and error log lines, by message: SIGTERM, then its whole log.
fn warnings(prober: Prober) -> Vec<(String, usize)> {
    let (_, log) = prober.terminate_with_log();
    let mut by: std::collections::BTreeMap<String, usize> = Default::default();
    for line in log {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        let level = v["level"].as_str().unwrap_or_default().to_ascii_lowercase();
        if level == "warn" || level == "error" {
            let msg = v["message"].as_str().unwrap_or_default().to_string();
            *by.entry(format!("{level}: {msg}")).or_default() += 1;
        }
    }
    let mut v: Vec<(String, usize)> = by.into_iter().collect();
    v.sort_by_key(|b| std::cmp::Reverse(b.1));
    v.truncate(20);
    v
}
