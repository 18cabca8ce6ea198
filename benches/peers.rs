//! Side by side with the tools kube-prober replaces, in one run, on this machine and the same
//! inputs: the real control plane of tests/support/control_plane.rs (etcd, kube-apiserver, kwok,
//! metrics-server through the aggregation layer; pods bound to their nodes, so no scheduler or
//! controller-manager) with `NODES` kwok nodes × `PODS_PER_NODE` pods, created through the API
//! from this process with `CREATE_CONCURRENCY` requests in flight.
//!
//! 1. **Host role vs node_exporter** (Debian's `prometheus-node-exporter`, before the control
//!    plane starts): kube-prober `--role host`, node_exporter with its defaults, and node_exporter
//!    restricted to what the host role reports (`--collector.disable-defaults` and the cpu,
//!    meminfo, netdev and diskstats collectors), all three at once. CPU per 15 s: one scrape each
//!    every 15 s over `HOST_SECS`; CPU per scrape: `HOST_SCRAPES` sequential scrapes each; RSS.
//! 2. **Cluster role vs kube-state-metrics**: kube-prober `--role cluster`, KSM with its defaults
//!    and KSM restricted to the families a user needs to compute every cluster-role family with
//!    PromQL ([`KSM_EQUAL_RESOURCES`], [`KSM_EQUAL_FAMILIES`]), started at once: time from start to
//!    the first full scrape (every pod and node in it), CPU over an idle `WINDOW_SECS` (kwok's
//!    node heartbeats still write), `SCRAPES` scrapes each as Prometheus asks (OpenMetrics or
//!    text, gzip), series, then CPU while pods churn at each rate of `CHURN` (changes a second;
//!    a change is one pod update, a label merge patch, which the API server sends every watcher)
//!    for `WINDOW_SECS` each, steady RSS (after the idle window) and peak RSS (VmHWM at the end).
//! 3. **Memory at start and at a forced relist** (`benches/peers/relist.rs`; `RELIST=0` skips
//!    it): fresh kube-prober cluster roles listing in pages and with streaming lists, and both
//!    kube-state-metrics, started at once; peak RSS at start against steady RSS, then every
//!    watch made to relist through a real 410 Gone (the API server killed, etcd compacted past
//!    every watcher, the API server back) and the peak of the relist against RSS before it.
//! 4. **kube-prober as a load-watcher replacement vs load-watcher** on the same metrics-server:
//!    a fresh kube-prober as the lean drop-in `manifests/overlays/load-watcher` deploys (the base's
//!    arguments, then those `components/load-watcher-lean` appends, read from its file: Nodes and
//!    NodeMetrics only) with load-watcher's environment, and
//!    load-watcher v0.2.4 (`METRICS_PROVIDER_NAME=KubernetesMetricsServer`; it binds `:2020` on
//!    every address and has no flag to change it), started at once after metrics-server has
//!    NodeMetrics: over `WATCHER_SECS`, with no pod churn (the churn of phase 2 is over and its
//!    peers stopped; only kwok's node heartbeats still write), CPU per metrics-server fetch (each
//!    process's CPU over the window over the fetches it made in it) and the staleness of each
//!    answer (`/watcher` read every 2 s; age = now − `window.end`: for kube-prober the time of
//!    the oldest newest sample, for load-watcher the time its fetch began, so load-watcher's age
//!    leaves out metrics-server's own), RSS; then `/watcher` under load, one server at a time:
//!    `CONNECTIONS` keep-alive connections for `LOAD_SECS`, gzip asked as Go's client asks
//!    (`Accept-Encoding: gzip`): answers a second, p50/p99 latency and the bytes of one answer
//!    as sent (kube-prober's gzip; load-watcher never compresses).
//!
//! Every byte figure is bytes on the wire: the HTTP client does not inflate answers itself
//! (`.no_gzip()`), and a scrape asking gzip that comes back without `Content-Encoding: gzip`
//! stops the run.
//!
//! CPU is what each peer's own cgroup counted over the window, in nanoseconds, threads that
//! exited included (`common::cpu_group`; where no cgroup can be made, utime + stime from
//! /proc/PID/stat in clock ticks, and the report says so); the control plane's own processes
//! (clock ticks) are measured over the same windows. `HEARTBEAT=status` (default) runs kwok's
//! `node/heartbeat` stage (every node's status every 20–45 s), `HEARTBEAT=lease` its
//! `node/heartbeat-with-lease` stage (a Lease per node, the status every 10–20 minutes).
//!
//! Run with `cargo bench --bench peers`; the small default (`NODES=50`, `PODS_PER_NODE=5`)
//! only checks that it works. Other settings: `WINDOW_SECS` (60), `CHURN` (`100,1000`),
//! `SCRAPES` (10), `WATCHER_SECS` (130), `LOAD_SECS` (10), `CONNECTIONS` (8), `HOST_SECS`
//! (150), `HOST_SCRAPES` (100), `CREATE_CONCURRENCY` (32), `METRICS_WAIT_SECS` (300: how long
//! to wait for NodeMetrics of every node) and `PORT_WAIT_SECS` (600: how long to wait for port
//! 2020 to be free). Under `cargo test --benches` (no `--bench` argument) it does
//! nothing. Needs the upstream binaries of `tests/upstream/build.sh` and
//! `/usr/bin/prometheus-node-exporter`. The report (markdown, on stdout) ends with the command.

mod common;
#[path = "peers/plots.rs"]
mod plots;
#[path = "peers/relist.rs"]
mod relist;
use support::control_plane;
use support::populate::{self, Populated};

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::process::{Child, Command};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use common::cpu_group::{CpuGroup, cpu_ns};
use common::{env_usize, loadavg, machine_info, mib, rss_kib, rss_split_kib};
use control_plane::{ControlPlane, Heartbeat, Options, free_port, node_name};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

const NODE_EXPORTER: &str = "/usr/bin/prometheus-node-exporter";
/// What Prometheus sends (its default scrape protocols) and asks of compression.
const PROM_ACCEPT: &str = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
/// node_exporter doing what the host role reports: CPU, memory, network bytes, disk I/O.
const NE_EQUAL: [&str; 5] = [
    "--collector.disable-defaults",
    "--collector.cpu",
    "--collector.meminfo",
    "--collector.netdev",
    "--collector.diskstats",
];
/// KSM equal work: the resources behind the cluster role's families.
const KSM_EQUAL_RESOURCES: &str = "nodes,pods,daemonsets,deployments,replicasets";
/// KSM equal work: the families from which PromQL computes every cluster-role family
/// (docs/benchmarks.md, "Equal work").
const KSM_EQUAL_FAMILIES: [&str; 27] = [
    "kube_node_labels",
    "kube_node_created",
    "kube_node_spec_unschedulable",
    "kube_node_spec_taint",
    "kube_node_status_condition",
    "kube_node_status_allocatable",
    "kube_node_status_capacity",
    "kube_pod_info",
    "kube_pod_status_phase",
    "kube_pod_status_ready",
    "kube_pod_deletion_timestamp",
    "kube_pod_owner",
    "kube_pod_labels",
    "kube_pod_annotations",
    "kube_pod_container_resource_requests",
    "kube_pod_container_resource_limits",
    "kube_pod_init_container_info",
    "kube_pod_init_container_resource_requests",
    "kube_pod_init_container_resource_limits",
    "kube_pod_overhead_cpu_cores",
    "kube_pod_overhead_memory_bytes",
    "kube_pod_container_status_restarts_total",
    "kube_pod_container_status_last_terminated_reason",
    "kube_pod_container_status_last_terminated_exitcode",
    "kube_daemonset_status_desired_number_scheduled",
    "kube_deployment_spec_replicas",
    "kube_replicaset_owner",
];
/// The node labels pool and zone come from, and the pod labels and annotations that name an
/// addon (docs/metrics.md).
const KSM_EQUAL_LABELS: &str = "nodes=[cloud.google.com/gke-nodepool,eks.amazonaws.com/nodegroup,kubernetes.azure.com/agentpool,agentpool,topology.kubernetes.io/zone,failure-domain.beta.kubernetes.io/zone],pods=[components.gke.io/component-name,components.gke.io/component-version]";
const KSM_EQUAL_ANNOTATIONS: &str =
    "pods=[components.gke.io/component-name,components.gke.io/component-version]";

/// What the run is told by its environment.
#[derive(Debug, Clone)]
struct Settings {
    nodes: usize,
    pods_per_node: usize,
    window: Duration,
    watcher_window: Duration,
    load: Duration,
    connections: usize,
    scrapes: usize,
    host_window: Duration,
    host_scrapes: usize,
    churn: Vec<u64>,
    heartbeat: Heartbeat,
    create_concurrency: usize,
    /// Phase 3 (`benches/peers/relist.rs`) runs (`RELIST`, default 1).
    relist: bool,
}

fn settings() -> Settings {
    let secs = |name: &str, default: usize| Duration::from_secs(env_usize(name, default) as u64);
    let churn = std::env::var("CHURN").unwrap_or_else(|_| "100,1000".into());
    let churn = churn
        .split(',')
        .map(|r| {
            r.trim()
                .parse()
                .unwrap_or_else(|_| panic!("CHURN={churn:?}: comma-separated whole numbers"))
        })
        .collect();
    let heartbeat = match std::env::var("HEARTBEAT").as_deref() {
        Err(_) | Ok("status") => Heartbeat::Status,
        Ok("lease") => Heartbeat::Lease,
        Ok(other) => panic!("HEARTBEAT={other:?}: `status` or `lease`"),
    };
    Settings {
        nodes: env_usize("NODES", 50),
        pods_per_node: env_usize("PODS_PER_NODE", 5),
        window: secs("WINDOW_SECS", 60),
        watcher_window: secs("WATCHER_SECS", 130),
        load: secs("LOAD_SECS", 10),
        connections: env_usize("CONNECTIONS", 8),
        scrapes: env_usize("SCRAPES", 10),
        host_window: secs("HOST_SECS", 150),
        host_scrapes: env_usize("HOST_SCRAPES", 100),
        churn,
        heartbeat,
        create_concurrency: env_usize("CREATE_CONCURRENCY", 32),
        relist: env_usize("RELIST", 1) != 0,
    }
}

impl Settings {
    /// The command that repeats this run.
    fn command(&self) -> String {
        let hb = match self.heartbeat {
            Heartbeat::Status => "status",
            Heartbeat::Lease => "lease",
        };
        let churn: Vec<String> = self.churn.iter().map(u64::to_string).collect();
        format!(
            "NODES={} PODS_PER_NODE={} HEARTBEAT={hb} WINDOW_SECS={} CHURN={} SCRAPES={} \
             WATCHER_SECS={} LOAD_SECS={} CONNECTIONS={} HOST_SECS={} HOST_SCRAPES={} \
             RELIST={} cargo bench --bench peers",
            self.nodes,
            self.pods_per_node,
            self.window.as_secs(),
            churn.join(","),
            self.scrapes,
            self.watcher_window.as_secs(),
            self.load.as_secs(),
            self.connections,
            self.host_window.as_secs(),
            self.host_scrapes,
            u8::from(self.relist),
        )
    }

    fn pods(&self) -> usize {
        self.nodes * self.pods_per_node
    }
}

// ---- processes ----

/// A process under measurement, stopped (SIGTERM, then SIGKILL) when dropped.
struct Peer {
    name: &'static str,
    child: Child,
    /// `http://127.0.0.1:PORT`
    url: String,
    log: std::path::PathBuf,
    started: Instant,
    /// The cgroup of its own that counts its CPU in nanoseconds (`None`: clock ticks).
    cpu_group: Option<CpuGroup>,
}

impl Peer {
    fn start(name: &'static str, mut cmd: Command, url: String, dir: &Path) -> Peer {
        let log = dir.join(format!("{name}.log"));
        cmd.env("HOME", "/nonexistent");
        let started = Instant::now();
        let child = control_plane::spawn_owned(cmd, &log);
        let cpu_group = CpuGroup::adopt(child.id());
        let counter = if cpu_group.is_some() {
            &IN_CGROUP
        } else {
            &IN_TICKS
        };
        counter.fetch_add(1, Ordering::Relaxed);
        Peer {
            name,
            child,
            url,
            log,
            started,
            cpu_group,
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Panics with the log's tail when the process has exited.
    fn assert_running(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            let text = std::fs::read_to_string(&self.log).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(30).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            panic!("{} exited ({status}):\n{}", self.name, tail.join("\n"));
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        if !matches!(self.child.try_wait(), Ok(Some(_))) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        // Empty now: the cgroup can go.
        drop(self.cpu_group.take());
    }
}

/// Peers whose CPU a cgroup of their own counts, and peers counted in clock ticks.
static IN_CGROUP: AtomicU64 = AtomicU64::new(0);
static IN_TICKS: AtomicU64 = AtomicU64::new(0);

/// CPU ms/s of `pids` between two readings.
struct CpuWindow {
    ns: Vec<u64>,
    at: Instant,
}

impl CpuWindow {
    fn start(pids: &[u32]) -> CpuWindow {
        CpuWindow {
            ns: pids.iter().map(|&p| cpu_ns(p)).collect(),
            at: Instant::now(),
        }
    }

    /// (CPU ms per wall second, CPU ms in all) of each pid since `start`.
    fn end(&self, pids: &[u32]) -> Vec<(f64, f64)> {
        let secs = self.at.elapsed().as_secs_f64();
        pids.iter()
            .zip(&self.ns)
            .map(|(&p, n0)| {
                let ms = cpu_ns(p).saturating_sub(*n0) as f64 / 1e6;
                (ms / secs, ms)
            })
            .collect()
    }
}

/// RSS (VmRSS, VmHWM) of a peer, in MiB.
fn rss(peer: &Peer) -> (f64, f64) {
    let (r, h) = rss_kib(peer.pid());
    (mib(r), mib(h))
}

// ---- HTTP ----

/// The bench's HTTP client. `.no_gzip()`: gcloud-sdk turns on reqwest's `gzip` feature for
/// the whole build, and reqwest would then inflate gzip answers itself and drop
/// `Content-Encoding`, so that every "bytes (gzip)" figure would count uncompressed bytes.
/// Whoever wants gzip asks for it (`Accept-Encoding: gzip`) and inflates it ([`gunzip`]).
fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .no_proxy()
        .no_gzip()
        .build()
        .expect("an HTTP client")
}

/// The answer's `Content-Encoding` (`identity` when it has none).
fn content_encoding(resp: &reqwest::Response) -> String {
    resp.headers().get("content-encoding").map_or_else(
        || "identity".to_string(),
        |v| String::from_utf8_lossy(v.as_bytes()).into_owned(),
    )
}

/// One scrape as Prometheus makes it: (time to the whole body, its bytes on the wire, which
/// are gzip, the body inflated), or why it failed. Every exporter scraped here answers
/// gzip when asked (kube-state-metrics with `--enable-gzip-encoding`): a successful answer
/// without it panics, since its bytes would not be the "bytes (gzip)" the report names.
async fn scrape(client: &reqwest::Client, url: &str) -> Result<(Duration, usize, String), String> {
    let t = Instant::now();
    let resp = client
        .get(url)
        .header("Accept", PROM_ACCEPT)
        .header("Accept-Encoding", "gzip")
        .send()
        .await
        .map_err(|e| format!("GET {url}: {e}"))?;
    let status = resp.status();
    let encoding = content_encoding(&resp);
    let body = resp.bytes().await.map_err(|e| format!("GET {url}: {e}"))?;
    let took = t.elapsed();
    if !status.is_success() {
        return Err(format!("GET {url}: {status}"));
    }
    assert_eq!(
        encoding, "gzip",
        "GET {url} with Accept-Encoding: gzip answered Content-Encoding: {encoding}: the \
         report's gzip bytes would be uncompressed"
    );
    Ok((took, body.len(), gunzip(&body, true)?))
}

fn gunzip(body: &[u8], gzip: bool) -> Result<String, String> {
    if !gzip {
        return String::from_utf8(body.to_vec()).map_err(|e| e.to_string());
    }
    let mut text = String::new();
    flate2::read::GzDecoder::new(body)
        .read_to_string(&mut text)
        .map_err(|e| format!("gunzip: {e}"))?;
    Ok(text)
}

/// Samples in an exposition (lines that are not comments or empty).
fn series(text: &str) -> usize {
    text.lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .count()
}

/// The samples of family `name` (exact name, any labels): (labels, value).
fn samples<'a>(text: &'a str, name: &str) -> Vec<(&'a str, f64)> {
    text.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(name)?;
            let (labels, value) = if let Some(r) = rest.strip_prefix('{') {
                let end = r.rfind('}')?;
                (&r[..end], r[end + 1..].trim())
            } else if rest.starts_with(' ') {
                ("", rest.trim())
            } else {
                return None;
            };
            let value = value.split_whitespace().next()?.parse().ok()?;
            Some((labels, value))
        })
        .collect()
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` does not: then do nothing.
    if !std::env::args().any(|a| a == "--bench") {
        println!("peers: benchmark only; run `cargo bench --bench peers`");
        return;
    }
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let s = settings();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let mut report = Report {
        started: first_line_of("date", &["-u", "+%Y-%m-%d %H:%M UTC"]),
        commit: common::commit(),
        load_start: loadavg(),
        ..Report::default()
    };
    for (k, v) in machine_info() {
        eprintln!("{k}: {v}");
    }
    eprintln!("load average at start: {}", report.load_start);
    let scratch = tempfile::Builder::new()
        .prefix("kube-prober-peers-")
        .tempdir()
        .expect("a temp dir");

    report.host = rt.block_on(host_phase(&s, scratch.path()));
    let t = Instant::now();
    let mut cp = ControlPlane::start_with(Options::bare(), s.heartbeat);
    report.control_plane_up = t.elapsed();
    let client = rt.block_on(populate::kube_client(&cp.admin_kubeconfig));
    report.populate = rt.block_on(populate::populate(
        &client,
        s.nodes,
        s.pods_per_node,
        s.create_concurrency,
    ));
    report.cluster = rt.block_on(cluster_phase(&s, &cp, &client, scratch.path()));
    if s.relist {
        report.relist = rt.block_on(relist::relist_phase(&s, &mut cp, scratch.path()));
    }
    report.watcher = rt.block_on(watcher_phase(&s, &cp, scratch.path()));
    report.load_end = loadavg();
    print_report(&s, &report);
    let record = plots::record(&s, &report, &report.commit);
    plots::draw(&support::plot::plots_dir(), &record);
}

fn first_line_of(cmd: &str, args: &[&str]) -> String {
    common::first_line(cmd, args)
}

// ---- 1. host role vs node_exporter ----

/// One exporter's figures in the host phase.
#[derive(Debug, Default, Clone)]
struct HostFigures {
    name: String,
    rss: f64,
    hwm: f64,
    /// (RssAnon, RssFile) MiB at the end.
    split: (f64, f64),
    cpu_per_15s_ms: f64,
    cpu_per_scrape_ms: f64,
    bytes: usize,
    series: usize,
}

fn start_host_peers(dir: &Path) -> Vec<Peer> {
    let kp_port = free_port();
    let mut kp = Command::new(env!("CARGO_BIN_EXE_kube-prober"));
    kp.args([
        "--role",
        "host",
        "--node-name",
        "bench",
        "--log-format",
        "json",
    ])
    .arg(format!("--listen=127.0.0.1:{kp_port}"))
    .env_remove("KUBECONFIG");
    assert!(
        Path::new(NODE_EXPORTER).exists(),
        "{NODE_EXPORTER} is missing: apt-get install prometheus-node-exporter"
    );
    let mut peers = vec![Peer::start(
        "kube-prober host role",
        kp,
        format!("http://127.0.0.1:{kp_port}"),
        dir,
    )];
    for (name, extra) in [
        ("node_exporter (defaults)", &[][..]),
        ("node_exporter (equal work)", &NE_EQUAL[..]),
    ] {
        let port = free_port();
        let mut ne = Command::new(NODE_EXPORTER);
        ne.arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .args(extra);
        peers.push(Peer::start(
            name,
            ne,
            format!("http://127.0.0.1:{port}"),
            dir,
        ));
    }
    peers
}

/// Waits until `peer`'s `path` answers 200, for at most `within`.
async fn wait_200(client: &reqwest::Client, peer: &mut Peer, path: &str, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        peer.assert_running();
        if let Ok(r) = client.get(format!("{}{path}", peer.url)).send().await
            && r.status().is_success()
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{}: {path} not 200 within {within:?}",
            peer.name
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn host_phase(s: &Settings, dir: &Path) -> Vec<HostFigures> {
    eprintln!("host role vs node_exporter");
    let client = http();
    let mut peers = start_host_peers(dir);
    for p in &mut peers {
        wait_200(&client, p, "/metrics", Duration::from_secs(30)).await;
    }
    // kube-prober's first tick fills the node load families.
    tokio::time::sleep(Duration::from_secs(15)).await;
    let pids: Vec<u32> = peers.iter().map(Peer::pid).collect();
    // A scrape each every 15 s, as Prometheus at its default interval.
    let rounds = (s.host_window.as_secs() / 15).max(1);
    let w = CpuWindow::start(&pids);
    for round in 0..rounds {
        for p in &peers {
            let url = format!("{}/metrics", p.url);
            scrape(&client, &url)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
        }
        if round + 1 < rounds {
            tokio::time::sleep(Duration::from_secs(15)).await;
        }
    }
    tokio::time::sleep(Duration::from_secs(15)).await;
    let per_15s = w.end(&pids);
    let mut out = Vec::new();
    for (i, p) in peers.iter().enumerate() {
        let url = format!("{}/metrics", p.url);
        let w = CpuWindow::start(&[p.pid()]);
        let mut last = (0, String::new());
        for _ in 0..s.host_scrapes.max(1) {
            let (_, bytes, text) = scrape(&client, &url)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            last = (bytes, text);
        }
        let (_, ms) = w.end(&[p.pid()])[0];
        let (rss, hwm) = rss(p);
        let (anon, file) = rss_split_kib(p.pid());
        out.push(HostFigures {
            name: p.name.to_string(),
            rss,
            hwm,
            split: (mib(anon), mib(file)),
            cpu_per_15s_ms: per_15s[i].1 / rounds as f64,
            cpu_per_scrape_ms: ms / s.host_scrapes.max(1) as f64,
            bytes: last.0,
            series: series(&last.1),
        });
    }
    out
}

// ---- 2. cluster role vs kube-state-metrics ----

/// One exporter's figures in the cluster phase.
#[derive(Debug, Default, Clone)]
struct ClusterFigures {
    name: String,
    first_full: Duration,
    idle_cpu: f64,
    /// CPU ms/s at each churn rate, in the order of `Settings::churn`.
    churn_cpu: Vec<f64>,
    rss_steady: f64,
    hwm: f64,
    scrape_ms: Vec<f64>,
    bytes: usize,
    series: usize,
}

/// The control plane's own processes, measured over the same windows.
const CONTROL_PLANE: [&str; 4] = ["etcd", "kube-apiserver", "kwok", "metrics-server"];

#[derive(Debug, Default, Clone)]
struct ClusterPhase {
    peers: Vec<ClusterFigures>,
    /// Achieved changes a second at each churn rate.
    churn_achieved: Vec<f64>,
    /// (name, idle CPU ms/s, CPU ms/s at each churn rate, RSS MiB) of the control plane.
    control_plane: Vec<(String, f64, Vec<f64>, f64)>,
}

fn ksm(cp: &ControlPlane, name: &'static str, extra: &[String], dir: &Path) -> Peer {
    let port = free_port();
    let mut cmd = Command::new(control_plane::upstream("kube-state-metrics"));
    cmd.arg(format!("--kubeconfig={}", cp.admin_kubeconfig.display()))
        .args(["--host=127.0.0.1", "--telemetry-host=127.0.0.1"])
        .arg(format!("--port={port}"))
        .arg(format!("--telemetry-port={}", free_port()))
        .arg("--enable-gzip-encoding")
        .args(extra);
    Peer::start(name, cmd, format!("http://127.0.0.1:{port}"), dir)
}

/// kube-prober's cluster role with manifests/base's arguments (listening on 127.0.0.1), then
/// `args`, with `env`.
fn kube_prober_cluster(
    cp: &ControlPlane,
    name: &'static str,
    args: &[String],
    env: &[(&str, &str)],
    dir: &Path,
) -> Peer {
    let port = free_port();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kube-prober"));
    cmd.args([
        "--role=cluster",
        "--log-format=json",
        "--shutdown-timeout=15s",
    ])
    .arg(format!("--listen=127.0.0.1:{port}"))
    .args(args)
    .env("KUBECONFIG", &cp.admin_kubeconfig)
    .envs(env.iter().copied());
    Peer::start(name, cmd, format!("http://127.0.0.1:{port}"), dir)
}

/// kube-state-metrics' arguments for equal work (docs/benchmarks.md, "Equal work").
fn ksm_equal_args() -> Vec<String> {
    vec![
        format!("--resources={KSM_EQUAL_RESOURCES}"),
        format!("--metric-allowlist={}", KSM_EQUAL_FAMILIES.join(",")),
        format!("--metric-labels-allowlist={KSM_EQUAL_LABELS}"),
        format!("--metric-annotations-allowlist={KSM_EQUAL_ANNOTATIONS}"),
    ]
}

fn start_cluster_peers(cp: &ControlPlane, dir: &Path) -> Vec<Peer> {
    let equal = ksm_equal_args();
    vec![
        // The cluster DNS probe off: it would ask the machine's resolver, off loopback.
        kube_prober_cluster(
            cp,
            "kube-prober cluster role",
            &["--disable-probes=cluster_dns".into()],
            &[],
            dir,
        ),
        ksm(cp, "kube-state-metrics (equal work)", &equal, dir),
        ksm(cp, "kube-state-metrics (defaults)", &[], dir),
    ]
}

/// Whether a scrape holds every node and pod: kube-prober's per-node pod counts, KSM's
/// `kube_pod_info` and Ready conditions.
fn full(text: &str, s: &Settings) -> bool {
    let kp = samples(text, "kube_prober_node_pods");
    if !kp.is_empty() {
        let pods: f64 = kp.iter().map(|(_, v)| v).sum();
        return kp.len() == s.nodes && pods as usize == s.pods();
    }
    let pods = samples(text, "kube_pod_info").len();
    let ready = samples(text, "kube_node_status_condition")
        .iter()
        .filter(|(l, v)| {
            *v == 1.0 && l.contains(r#"condition="Ready""#) && l.contains(r#"status="true""#)
        })
        .count();
    pods == s.pods() && ready == s.nodes
}

/// Time from `peer`'s start to its first full scrape (15 minutes at most).
async fn first_full(
    client: &reqwest::Client,
    name: &str,
    url: &str,
    started: Instant,
    s: &Settings,
) -> Duration {
    let deadline = started + Duration::from_secs(900);
    loop {
        if let Ok((_, _, text)) = scrape(client, url).await
            && full(&text, s)
        {
            return started.elapsed();
        }
        assert!(
            Instant::now() < deadline,
            "{name}: no full scrape within 15 minutes"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// `rate` pod updates a second for `window` (a label merge patch on each pod in turn), 64 in
/// flight at most: the changes a second the API server took.
async fn churn(client: &kube::Client, s: &Settings, rate: u64, window: Duration) -> f64 {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let per = s.pods_per_node.max(1);
    let total = s.pods().max(1) as u64;
    let permits = Arc::new(tokio::sync::Semaphore::new(64));
    let done = Arc::new(AtomicU64::new(0));
    let t = Instant::now();
    let mut issued = 0u64;
    while t.elapsed() < window {
        let due = (t.elapsed().as_secs_f64() * rate as f64) as u64;
        while issued < due && t.elapsed() < window {
            let Ok(permit) = permits.clone().acquire_owned().await else {
                break;
            };
            let k = (issued % total) as usize;
            let name = format!("usage-{}-{}", node_name(k / per), k % per);
            let patch = json!({"metadata": {"labels": {"churn": format!("c{rate}-{issued}")}}});
            let (pods, done) = (pods.clone(), done.clone());
            tokio::spawn(async move {
                if pods
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .is_ok()
                {
                    done.fetch_add(1, Ordering::Relaxed);
                }
                drop(permit);
            });
            issued += 1;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let _ = permits.acquire_many(64).await;
    done.load(Ordering::Relaxed) as f64 / t.elapsed().as_secs_f64()
}

async fn cluster_phase(
    s: &Settings,
    cp: &ControlPlane,
    kube: &kube::Client,
    dir: &Path,
) -> ClusterPhase {
    eprintln!("cluster role vs kube-state-metrics");
    let client = http();
    let mut peers = start_cluster_peers(cp, dir);
    let firsts = futures_util::future::join_all(peers.iter().map(|p| {
        let url = format!("{}/metrics", p.url);
        let client = &client;
        async move { first_full(client, p.name, &url, p.started, s).await }
    }))
    .await;
    for p in &mut peers {
        p.assert_running();
    }
    let cp_pids: Vec<u32> = CONTROL_PLANE
        .iter()
        .map(|n| {
            cp.pid(n)
                .unwrap_or_else(|| panic!("no {n} in the control plane"))
        })
        .collect();
    let pids: Vec<u32> = peers
        .iter()
        .map(Peer::pid)
        .chain(cp_pids.iter().copied())
        .collect();
    let mut out: Vec<ClusterFigures> = peers
        .iter()
        .zip(&firsts)
        .map(|(p, f)| ClusterFigures {
            name: p.name.to_string(),
            first_full: *f,
            ..ClusterFigures::default()
        })
        .collect();
    // Settle: the start-up's garbage and the first scrapes behind.
    tokio::time::sleep(Duration::from_secs(10)).await;
    eprintln!("  idle window ({} s)", s.window.as_secs());
    let w = CpuWindow::start(&pids);
    tokio::time::sleep(s.window).await;
    let idle = w.end(&pids);
    for (i, (f, p)) in out.iter_mut().zip(&peers).enumerate() {
        f.idle_cpu = idle[i].0;
        f.rss_steady = rss(p).0;
    }
    scrape_rounds(s, &client, &peers, &mut out).await;
    let mut phase = ClusterPhase {
        control_plane: CONTROL_PLANE
            .iter()
            .zip(&cp_pids)
            .enumerate()
            .map(|(i, (n, pid))| {
                (
                    n.to_string(),
                    idle[peers.len() + i].0,
                    Vec::new(),
                    mib(rss_kib(*pid).0),
                )
            })
            .collect(),
        ..ClusterPhase::default()
    };
    churn_windows(s, kube, &pids, &mut out, &mut phase).await;
    for (f, p) in out.iter_mut().zip(&mut peers) {
        p.assert_running();
        f.hwm = rss(p).1;
    }
    phase.peers = out;
    phase
}

/// CPU of every process over a window of pod churn at each rate of `CHURN`.
async fn churn_windows(
    s: &Settings,
    kube: &kube::Client,
    pids: &[u32],
    out: &mut [ClusterFigures],
    phase: &mut ClusterPhase,
) {
    let peers = out.len();
    for &rate in &s.churn {
        eprintln!("  churn at {rate} pod changes/s ({} s)", s.window.as_secs());
        let w = CpuWindow::start(pids);
        let achieved = churn(kube, s, rate, s.window).await;
        let cpu = w.end(pids);
        phase.churn_achieved.push(achieved);
        for (i, f) in out.iter_mut().enumerate() {
            f.churn_cpu.push(cpu[i].0);
        }
        for (i, c) in phase.control_plane.iter_mut().enumerate() {
            c.2.push(cpu[peers + i].0);
        }
    }
}

/// `scrapes` rounds of one scrape each, one exporter at a time: times, bytes and series.
async fn scrape_rounds(
    s: &Settings,
    client: &reqwest::Client,
    peers: &[Peer],
    out: &mut [ClusterFigures],
) {
    for _ in 0..s.scrapes.max(1) {
        for (p, f) in peers.iter().zip(out.iter_mut()) {
            let (took, bytes, text) = scrape(client, &format!("{}/metrics", p.url))
                .await
                .unwrap_or_else(|e| panic!("{}: {e}", p.name));
            f.scrape_ms.push(took.as_secs_f64() * 1000.0);
            f.bytes = bytes;
            f.series = series(&text);
        }
    }
    for f in out.iter_mut() {
        f.scrape_ms.sort_by(f64::total_cmp);
    }
}

// ---- 3. /watcher: kube-prober vs load-watcher ----

/// load-watcher's port: fixed, on every address.
const LOAD_WATCHER_PORT: u16 = 2020;
/// Fetches of metrics-server a minute load-watcher makes: one per window it caches (15, 10 and
/// 5 minutes).
const LOAD_WATCHER_FETCHES_PER_MIN: f64 = 3.0;

#[derive(Debug, Default, Clone)]
struct WatcherFigures {
    name: String,
    hosts: usize,
    rss: f64,
    hwm: f64,
    cpu: f64,
    fetches: f64,
    cpu_per_fetch_ms: f64,
    /// Ages (s) of the answers read during the window, sorted.
    ages: Vec<f64>,
    answers_per_s: f64,
    p50_ms: f64,
    p99_ms: f64,
    /// Bytes on the wire of one answer to a request asking gzip, and its `Content-Encoding`.
    bytes: usize,
    encoding: String,
}

#[derive(Debug, Default, Clone)]
struct WatcherPhase {
    node_metrics: usize,
    peers: Vec<WatcherFigures>,
}

/// GET `/watcher` as Go's client asks (gzip): (the parsed answer, bytes on the wire).
/// load-watcher never compresses (it writes its JSON as is); kube-prober does when asked.
async fn watcher(client: &reqwest::Client, base: &str) -> Option<(Value, usize)> {
    let resp = client
        .get(format!("{base}/watcher"))
        .header("Accept-Encoding", "gzip")
        .send()
        .await
        .ok()?;
    if !resp.status().is_success() {
        return None;
    }
    let gzip = content_encoding(&resp) == "gzip";
    let body = resp.bytes().await.ok()?;
    let text = gunzip(&body, gzip).ok()?;
    Some((serde_json::from_str(&text).ok()?, body.len()))
}

fn hosts(v: &Value) -> usize {
    v["data"]["NodeMetricsMap"]
        .as_object()
        .map_or(0, |m| m.len())
}

/// `kube_prober_source_runs_total` of the metrics-server source, every outcome.
async fn source_runs(client: &reqwest::Client, base: &str) -> f64 {
    let Ok((_, _, text)) = scrape(client, &format!("{base}/metrics")).await else {
        return 0.0;
    };
    samples(&text, "kube_prober_source_runs_total")
        .iter()
        .filter(|(l, _)| l.contains(r#"source="metrics_server""#))
        .map(|(_, v)| v)
        .sum()
}

/// Sockets listening on `port` on any address (/proc/net/tcp and tcp6: state 0A).
fn listeners(port: u16) -> Vec<String> {
    let want = format!(":{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .flat_map(|t| {
            t.lines()
                .filter_map(|l| {
                    let f: Vec<&str> = l.split_whitespace().collect();
                    (f.len() > 3 && f[1].ends_with(&want) && f[3] == "0A").then(|| f[1].to_string())
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Waits (up to `PORT_WAIT_SECS`, default 600) until nothing listens on load-watcher's port:
/// it binds it on every address, so any other listener on that port makes it fail.
async fn wait_port_free(port: u16) {
    let wait = Duration::from_secs(env_usize("PORT_WAIT_SECS", 600) as u64);
    let deadline = Instant::now() + wait;
    loop {
        let held = listeners(port);
        if held.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "port {port} is still held after {wait:?} (local addresses {held:?}, hex): \
             load-watcher binds it on every address and has no flag to change it"
        );
        eprintln!("  port {port} is held ({held:?}); waiting");
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
}

fn start_watcher_peers(cp: &ControlPlane, dir: &Path) -> Vec<Peer> {
    let provider = ("METRICS_PROVIDER_NAME", "KubernetesMetricsServer");
    // The lean drop-in as `manifests/overlays/load-watcher` runs it: the base's arguments and
    // the ones `components/load-watcher-lean` appends, read from that file, so the bench runs
    // what the overlay deploys.
    let kp = kube_prober_cluster(
        cp,
        "kube-prober (lean load-watcher drop-in)",
        &support::deploy::component_args("load-watcher-lean"),
        &[provider],
        dir,
    );
    let mut lw = Command::new(control_plane::upstream("load-watcher"));
    lw.env(provider.0, provider.1)
        .env("KUBE_CONFIG", &cp.admin_kubeconfig);
    let lw = Peer::start(
        "load-watcher",
        lw,
        format!("http://127.0.0.1:{LOAD_WATCHER_PORT}"),
        dir,
    );
    vec![kp, lw]
}

async fn watcher_phase(s: &Settings, cp: &ControlPlane, dir: &Path) -> WatcherPhase {
    eprintln!("/watcher: kube-prober vs load-watcher");
    let wait = Duration::from_secs(env_usize("METRICS_WAIT_SECS", 300) as u64);
    let deadline = Instant::now() + wait;
    let mut have = cp.node_metrics().len();
    while have < s.nodes && Instant::now() < deadline {
        eprintln!("  NodeMetrics for {have} of {} nodes", s.nodes);
        tokio::time::sleep(Duration::from_secs(5)).await;
        have = cp.node_metrics().len();
    }
    assert!(
        have > 0,
        "no NodeMetrics:\n{}",
        cp.log_tail("metrics-server", 30)
    );
    let client = http();
    // The machine-wide lock the tests that bind :2020 take (held until this phase returns),
    // then a wait for anything else on the port, which a process outside the tests may hold.
    let _port = tokio::task::spawn_blocking(control_plane::lock_port_2020)
        .await
        .expect("taking the :2020 lock");
    wait_port_free(LOAD_WATCHER_PORT).await;
    let mut peers = start_watcher_peers(cp, dir);
    for p in &mut peers {
        let deadline = Instant::now() + Duration::from_secs(180);
        loop {
            p.assert_running();
            let log = std::fs::read_to_string(&p.log).unwrap_or_default();
            assert!(
                !log.contains("bind: address already in use"),
                "{}: its port was taken:\n{log}",
                p.name
            );
            if let Some((v, _)) = watcher(&client, &p.url).await
                && hosts(&v) >= have
            {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{}: /watcher without {have} hosts after 180 s",
                p.name
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    let mut out = watch_window(s, &client, &peers).await;
    for (f, p) in out.iter_mut().zip(&mut peers) {
        p.assert_running();
        (f.rss, f.hwm) = rss(p);
        let l = load(&client, &p.url, s.connections, s.load).await;
        // load-watcher never compresses; kube-prober must, when asked, or its bytes are not
        // the compressed bytes the report shows.
        assert!(
            !p.name.starts_with("kube-prober") || l.encoding == "gzip",
            "{}: GET /watcher with Accept-Encoding: gzip answered Content-Encoding: {}",
            p.name,
            l.encoding
        );
        (f.answers_per_s, f.p50_ms, f.p99_ms) = (l.per_s, l.p50_ms, l.p99_ms);
        (f.bytes, f.encoding) = (l.bytes, l.encoding);
    }
    WatcherPhase {
        node_metrics: have,
        peers: out,
    }
}

/// CPU per fetch and the age of every answer read every 2 s over the window.
async fn watch_window(
    s: &Settings,
    client: &reqwest::Client,
    peers: &[Peer],
) -> Vec<WatcherFigures> {
    eprintln!("  watcher window ({} s)", s.watcher_window.as_secs());
    let pids: Vec<u32> = peers.iter().map(Peer::pid).collect();
    let runs0 = source_runs(client, &peers[0].url).await;
    let w = CpuWindow::start(&pids);
    let mut ages: Vec<Vec<f64>> = vec![Vec::new(); peers.len()];
    let mut host_counts = vec![0; peers.len()];
    while w.at.elapsed() < s.watcher_window {
        for (i, p) in peers.iter().enumerate() {
            if let Some((v, _)) = watcher(client, &p.url).await
                && let Some(end) = v["window"]["end"].as_f64()
            {
                ages[i].push(unix_now() - end);
                host_counts[i] = hosts(&v);
            }
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let cpu = w.end(&pids);
    let secs = w.at.elapsed().as_secs_f64();
    let runs = source_runs(client, &peers[0].url).await - runs0;
    let fetches = [runs, LOAD_WATCHER_FETCHES_PER_MIN * secs / 60.0];
    peers
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let mut a = std::mem::take(&mut ages[i]);
            a.sort_by(f64::total_cmp);
            WatcherFigures {
                name: p.name.to_string(),
                hosts: host_counts[i],
                cpu: cpu[i].0,
                fetches: fetches[i],
                cpu_per_fetch_ms: cpu[i].1 / fetches[i].max(1.0),
                ages: a,
                ..WatcherFigures::default()
            }
        })
        .collect()
}

/// What [`load`] measured.
struct Load {
    per_s: f64,
    p50_ms: f64,
    p99_ms: f64,
    /// Bytes on the wire of one answer.
    bytes: usize,
    /// Its `Content-Encoding` (`identity`: none).
    encoding: String,
}

/// `connections` keep-alive connections asking `/watcher` (gzip) for `secs`.
async fn load(client: &reqwest::Client, base: &str, connections: usize, secs: Duration) -> Load {
    let url = format!("{base}/watcher");
    let t = Instant::now();
    let runs = (0..connections.max(1)).map(|_| {
        let (client, url) = (client.clone(), url.clone());
        async move {
            let mut lat = Vec::new();
            let mut last = (0, String::new());
            while t.elapsed() < secs {
                let q = Instant::now();
                let Ok(resp) = client
                    .get(&url)
                    .header("Accept-Encoding", "gzip")
                    .send()
                    .await
                else {
                    continue;
                };
                let encoding = content_encoding(&resp);
                if let Ok(b) = resp.bytes().await {
                    last = (b.len(), encoding);
                    lat.push(q.elapsed().as_secs_f64() * 1000.0);
                }
            }
            (lat, last)
        }
    });
    let results = futures_util::future::join_all(runs).await;
    let took = t.elapsed().as_secs_f64();
    let (bytes, encoding) = results
        .iter()
        .map(|r| r.1.clone())
        .max()
        .unwrap_or_default();
    let mut lat: Vec<f64> = results.into_iter().flat_map(|r| r.0).collect();
    lat.sort_by(f64::total_cmp);
    Load {
        per_s: lat.len() as f64 / took,
        p50_ms: percentile(&lat, 0.5),
        p99_ms: percentile(&lat, 0.99),
        bytes,
        encoding,
    }
}

// ---- the report ----

#[derive(Debug, Default)]
struct Report {
    started: String,
    commit: String,
    load_start: String,
    load_end: String,
    control_plane_up: Duration,
    populate: Populated,
    host: Vec<HostFigures>,
    cluster: ClusterPhase,
    relist: Vec<relist::RelistFigures>,
    watcher: WatcherPhase,
}

/// One row of the ratio table: what, kube-prober's figure, the peer's, the goal (≤).
struct Ratio {
    what: String,
    kp: f64,
    peer: f64,
    unit: &'static str,
    goal: Option<f64>,
}

fn ratio(
    what: impl Into<String>,
    kp: f64,
    peer: f64,
    unit: &'static str,
    goal: Option<f64>,
) -> Ratio {
    Ratio {
        what: what.into(),
        kp,
        peer,
        unit,
        goal,
    }
}

fn ratios(s: &Settings, r: &Report) -> Vec<Ratio> {
    let mut v = Vec::new();
    cluster_ratios(s, r, &mut v);
    watcher_ratios(r, &mut v);
    host_ratios(r, &mut v);
    v
}

fn cluster_ratios(s: &Settings, r: &Report, v: &mut Vec<Ratio>) {
    if let [kp, eq, def] = &r.cluster.peers[..] {
        let ksm = "kube-state-metrics (equal work)";
        v.push(ratio(
            format!("peak RSS vs {ksm}"),
            kp.hwm,
            eq.hwm,
            "MiB",
            Some(0.1),
        ));
        v.push(ratio(
            "peak RSS vs kube-state-metrics (defaults)",
            kp.hwm,
            def.hwm,
            "MiB",
            None,
        ));
        v.push(ratio(
            format!("steady RSS vs {ksm}"),
            kp.rss_steady,
            eq.rss_steady,
            "MiB",
            None,
        ));
        v.push(ratio(
            format!("idle CPU vs {ksm}"),
            kp.idle_cpu,
            eq.idle_cpu,
            "ms/s",
            None,
        ));
        for (i, rate) in s.churn.iter().enumerate() {
            let goal = (*rate >= 1000).then_some(0.25);
            let what = format!("CPU under {rate} pod changes/s vs {ksm}");
            v.push(ratio(what, kp.churn_cpu[i], eq.churn_cpu[i], "ms/s", goal));
        }
        let (a, b) = (
            percentile(&kp.scrape_ms, 0.5),
            percentile(&eq.scrape_ms, 0.5),
        );
        v.push(ratio(
            format!("scrape time (median, gzip) vs {ksm}"),
            a,
            b,
            "ms",
            Some(0.25),
        ));
        v.push(ratio(
            format!("scrape bytes (gzip) vs {ksm}"),
            kp.bytes as f64,
            eq.bytes as f64,
            "B",
            None,
        ));
        v.push(ratio(
            format!("series vs {ksm}"),
            kp.series as f64,
            eq.series as f64,
            "",
            None,
        ));
        let (a, b) = (kp.first_full.as_secs_f64(), eq.first_full.as_secs_f64());
        v.push(ratio(
            format!("start to first full scrape vs {ksm}"),
            a,
            b,
            "s",
            None,
        ));
    }
}

fn watcher_ratios(r: &Report, v: &mut Vec<Ratio>) {
    if let [kp, lw] = &r.watcher.peers[..] {
        v.push(ratio(
            "RSS vs load-watcher",
            kp.rss,
            lw.rss,
            "MiB",
            Some(0.3),
        ));
        v.push(ratio(
            "`/watcher` p99 latency vs load-watcher",
            kp.p99_ms,
            lw.p99_ms,
            "ms",
            Some(1.0),
        ));
        let (a, b) = (percentile(&kp.ages, 0.5), percentile(&lw.ages, 0.5));
        v.push(ratio(
            "staleness of `/watcher` (median age) vs load-watcher",
            a,
            b,
            "s",
            Some(1.0),
        ));
        let (a, b) = (percentile(&kp.ages, 1.0), percentile(&lw.ages, 1.0));
        v.push(ratio(
            "staleness of `/watcher` (oldest answer) vs load-watcher",
            a,
            b,
            "s",
            None,
        ));
        let what = "`/watcher` answers/s vs load-watcher (higher is better)";
        v.push(ratio(what, kp.answers_per_s, lw.answers_per_s, "/s", None));
        v.push(ratio(
            "CPU per metrics-server fetch vs load-watcher",
            kp.cpu_per_fetch_ms,
            lw.cpu_per_fetch_ms,
            "ms",
            None,
        ));
    }
}

fn host_ratios(r: &Report, v: &mut Vec<Ratio>) {
    if let [kp, def, eq] = &r.host[..] {
        v.push(ratio(
            "host role RSS vs node_exporter (equal work)",
            kp.rss,
            eq.rss,
            "MiB",
            Some(0.25),
        ));
        v.push(ratio(
            "host role CPU per 15 s vs node_exporter (equal work)",
            kp.cpu_per_15s_ms,
            eq.cpu_per_15s_ms,
            "ms",
            Some(0.25),
        ));
        v.push(ratio(
            "host role RSS vs node_exporter (defaults)",
            kp.rss,
            def.rss,
            "MiB",
            None,
        ));
        v.push(ratio(
            "host role CPU per 15 s vs node_exporter (defaults)",
            kp.cpu_per_15s_ms,
            def.cpu_per_15s_ms,
            "ms",
            None,
        ));
    }
}

fn fmt(x: f64) -> String {
    if !x.is_finite() {
        "–".into()
    } else if x >= 100.0 {
        format!("{x:.0}")
    } else if x >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

fn print_ratios(s: &Settings, r: &Report) {
    println!("| kube-prober ÷ peer | kube-prober | peer | ratio | goal |");
    println!("|---|---:|---:|---:|---|");
    for x in ratios(s, r) {
        let q = x.kp / x.peer;
        let goal = match x.goal {
            Some(g) if q <= g => format!("≤ {g}: met"),
            Some(g) => format!("≤ {g}: **missed**"),
            None => "–".into(),
        };
        let u = if x.unit.is_empty() {
            String::new()
        } else {
            format!(" {}", x.unit)
        };
        println!(
            "| {} | {}{u} | {}{u} | {} | {goal} |",
            x.what,
            fmt(x.kp),
            fmt(x.peer),
            fmt(q)
        );
    }
}

fn print_cluster(s: &Settings, c: &ClusterPhase) {
    let churn: Vec<String> = s
        .churn
        .iter()
        .zip(&c.churn_achieved)
        .map(|(r, a)| format!("CPU at {r}/s (took {a:.0}/s)"))
        .collect();
    println!(
        "\n### Cluster role vs kube-state-metrics ({} nodes, {} pods)\n",
        s.nodes,
        s.pods()
    );
    println!(
        "| process | start to full scrape | RSS steady (peak) | idle CPU | {} | scrape p50 / max (gzip) | bytes | series |",
        churn.join(" | ")
    );
    println!(
        "|---|---:|---:|---:|{}---:|---:|---:|",
        "---:|".repeat(churn.len())
    );
    for f in &c.peers {
        let cpu: Vec<String> = f.churn_cpu.iter().map(|x| format!("{x:.1} ms/s")).collect();
        println!(
            "| {} | {:.1} s | {:.1} MiB ({:.1}) | {:.1} ms/s | {} | {:.1} / {:.1} ms | {} | {} |",
            f.name,
            f.first_full.as_secs_f64(),
            f.rss_steady,
            f.hwm,
            f.idle_cpu,
            cpu.join(" | "),
            percentile(&f.scrape_ms, 0.5),
            percentile(&f.scrape_ms, 1.0),
            f.bytes,
            f.series
        );
    }
    println!("\nThe control plane over the same windows:\n");
    println!("| process | RSS | idle CPU | {} |", churn.join(" | "));
    println!("|---|---:|---:|{}", "---:|".repeat(churn.len()));
    for (name, idle, cpu, rss) in &c.control_plane {
        let cpu: Vec<String> = cpu.iter().map(|x| format!("{x:.1} ms/s")).collect();
        println!(
            "| {name} | {rss:.1} MiB | {idle:.1} ms/s | {} |",
            cpu.join(" | ")
        );
    }
}

fn print_watcher(w: &WatcherPhase) {
    println!(
        "\n### `/watcher`: kube-prober vs load-watcher ({} nodes with NodeMetrics)\n",
        w.node_metrics
    );
    println!(
        "| process | hosts | RSS (peak) | CPU | fetches | CPU per fetch | age p50 / max | answers/s | p50 / p99 | bytes on the wire, gzip asked (as sent) |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for f in &w.peers {
        println!(
            "| {} | {} | {:.1} MiB ({:.1}) | {:.1} ms/s | {:.1} | {:.1} ms | {:.0} / {:.0} s | {:.0} | {:.2} / {:.2} ms | {} ({}) |",
            f.name,
            f.hosts,
            f.rss,
            f.hwm,
            f.cpu,
            f.fetches,
            f.cpu_per_fetch_ms,
            percentile(&f.ages, 0.5),
            percentile(&f.ages, 1.0),
            f.answers_per_s,
            f.p50_ms,
            f.p99_ms,
            f.bytes,
            f.encoding
        );
    }
}

fn print_host(h: &[HostFigures]) {
    println!("\n### Host role vs node_exporter\n");
    println!(
        "| process | RSS (peak) | of it heap and stacks / mapped files | CPU per 15 s (one scrape) | CPU per scrape | bytes (gzip) | series |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for f in h {
        println!(
            "| {} | {:.1} MiB ({:.1}) | {:.1} / {:.1} MiB | {:.2} ms | {:.2} ms | {} | {} |",
            f.name,
            f.rss,
            f.hwm,
            f.split.0,
            f.split.1,
            f.cpu_per_15s_ms,
            f.cpu_per_scrape_ms,
            f.bytes,
            f.series
        );
    }
}

fn print_report(s: &Settings, r: &Report) {
    let hb = match s.heartbeat {
        Heartbeat::Status => "`node/heartbeat` (every node's status every 20–45 s)",
        Heartbeat::Lease => {
            "`node/heartbeat-with-lease` (a Lease per node, status every 10–20 min)"
        }
    };
    let machine: Vec<String> = machine_info()
        .into_iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    println!(
        "## peers: {} kwok nodes × {} pods, kwok {hb}\n",
        s.nodes, s.pods_per_node
    );
    println!(
        "Run {} on {}; {}; load average {} at the start, {} at the end.\n",
        r.started,
        r.commit,
        machine.join(", "),
        r.load_start,
        r.load_end
    );
    let accounting = match IN_TICKS.load(Ordering::Relaxed) {
        0 => "each peer's CPU counted by a cgroup of its own, in nanoseconds".to_string(),
        n => format!(
            "CPU of {n} of {} peers in clock ticks (no cgroup could be made for them)",
            n + IN_CGROUP.load(Ordering::Relaxed)
        ),
    };
    println!("CPU accounting: {accounting}.\n");
    print_ratios(s, r);
    let p = &r.populate;
    println!(
        "\nControl plane up in {:.1} s; {} nodes created in {:.1} s, Ready at {:.1} s; {} pods created at {:.1} s ({:.0} pods/s), Running at {:.1} s.",
        r.control_plane_up.as_secs_f64(),
        s.nodes,
        p.nodes_created.as_secs_f64(),
        p.nodes_ready.as_secs_f64(),
        s.pods(),
        p.pods_created.as_secs_f64(),
        s.pods() as f64 / (p.pods_created - p.nodes_ready).as_secs_f64().max(0.001),
        p.pods_running.as_secs_f64()
    );
    print_cluster(s, &r.cluster);
    if !r.relist.is_empty() {
        relist::print_relist(&r.relist);
    }
    print_watcher(&r.watcher);
    print_host(&r.host);
    let ms: BTreeMap<&str, String> = BTreeMap::from([
        ("kube-state-metrics", "v2.20.0".to_string()),
        ("load-watcher", "v0.2.4".to_string()),
        (
            "node_exporter",
            common::first_line(NODE_EXPORTER, &["--version"]),
        ),
    ]);
    let peers: Vec<String> = ms.iter().map(|(k, v)| format!("{k} {v}")).collect();
    println!(
        "\nPeers: {}.\n\nCommand: `{}`",
        peers.join("; "),
        s.command()
    );
}
