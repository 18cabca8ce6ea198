//! A moving load under the real Trimaran scheduler: kube-prober against load-watcher in one run.
//!
//! The real control plane of tests/support/control_plane.rs (etcd, kube-apiserver, kwok,
//! metrics-server at its 15 s resolution) with two groups of `TRACE_NODES` kwok nodes (8 cores,
//! 32 GiB each), and the real scheduler (scheduler-plugins v0.34.7) with two
//! LoadVariationRiskBalancing profiles: one reading kube-prober (`--watcher-estimate-bound-pods
//! =all`, a 1 s tick), one reading paypal/load-watcher v0.2.4 (metrics-server provider). Each
//! group gets the same trace at the same times: a day compressed into `TRACE_MINUTES` (CPU
//! demand from 20 % of the group at night to 55 % at midday and back, as pods of 500m that use
//! what they ask through kwok's annotations, added when demand rises and the oldest deleted when
//! it falls), and two bursts (`BURST_PODS` pods, one every `BURST_SPACING_SECS`, at 30 % and
//! 70 % of the day, each living 15 % of it). The scheduler places every added pod; nothing else
//! does. Trimaran's collector polls every 30 s and LoadVariationRiskBalancing puts every pod of
//! one poll on one node whatever the feed, so the defaults (4 nodes, 12 burst pods 6 s apart)
//! keep one poll's arrivals near a quarter of a node: what then differs is how soon each feed
//! shows the last poll's pods.
//!
//! Every `SAMPLE_SECS` the bench lists the pods and sums each node's use (the pods' own
//! annotations: the truth, not what any feed reports). It reports, per arm, the node-seconds
//! spent above `TARGET_PERCENT` (default 65, Koordinator's default CPU threshold) and the p99
//! of node utilisation over every node and sample, prints them, and draws each node's
//! utilisation over the day (an SVG written by hand) to `TRACE_SVG` (default
//! `target/trimaran-trace.svg`).
//!
//! A compressed day moves faster than the windows a feed serves: kube-prober serves its
//! window's AVG and STD (the inputs LoadVariationRiskBalancing is written for), so a day of a
//! few minutes mostly measures how each feed follows fast moves; the bursts are what the
//! bound-pod estimates are for.
//!
//! Run with `cargo bench --bench trimaran_trace` (about 9 minutes at the default
//! `TRACE_MINUTES=8`; `TRACE_MINUTES=3` for a quick look). Other settings: `TRACE_NODES` (4),
//! `BURST_PODS` (12), `BURST_SPACING_SECS` (6), `TARGET_PERCENT` (65), `SAMPLE_SECS` (5),
//! `TRACE_SVG`. A pod left unscheduled for over 60 s stops the run with the scheduler's log.
//! Under `cargo test --benches` (no `--bench` argument) it does nothing. Needs the upstream
//! binaries of `tests/upstream/build.sh`; load-watcher binds `:2020`, taken in turns with the
//! tests through the machine-wide lock file.

mod common;
use support::control_plane;

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use common::env_usize;
use control_plane::{ControlPlane, Options, free_port, node_name, spawn_owned, upstream};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::{Value, json};

const NS: &str = "trace";
const GROUP: &str = "trace.test/group";
const NODE_MILLIS: f64 = 8000.0;
const POD_MILLIS: f64 = 500.0;
const LOAD_WATCHER: &str = "http://127.0.0.1:2020";
/// The day's demand, percent of a group's CPU: night and midday.
const NIGHT: f64 = 20.0;
const MIDDAY: f64 = 55.0;

const SCHEDULER_LOG: &str = "trace-scheduler.log";
/// The two arms: name (scheduler profile and node group) and where its plugin reads.
const ARMS: [&str; 2] = ["kube-prober", "load-watcher"];

struct Settings {
    day: Duration,
    nodes: usize,
    burst_pods: usize,
    burst_spacing: usize,
    target: f64,
    sample: Duration,
    svg: PathBuf,
}

fn settings() -> Settings {
    let svg = std::env::var_os("TRACE_SVG")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/trimaran-trace.svg")
        });
    Settings {
        day: Duration::from_secs(60 * env_usize("TRACE_MINUTES", 8) as u64),
        nodes: env_usize("TRACE_NODES", 4),
        burst_pods: env_usize("BURST_PODS", 12),
        burst_spacing: env_usize("BURST_SPACING_SECS", 6).max(1),
        target: env_usize("TARGET_PERCENT", 65) as f64,
        sample: Duration::from_secs(env_usize("SAMPLE_SECS", 5).max(1) as u64),
        svg,
    }
}

impl Settings {
    /// Pods of the day's curve at `t` in one group.
    fn curve_pods(&self, t: Duration) -> usize {
        let phase = t.as_secs_f64() / self.day.as_secs_f64();
        let demand = NIGHT + (MIDDAY - NIGHT) * (1.0 - (std::f64::consts::TAU * phase).cos()) / 2.0;
        (demand / 100.0 * self.nodes as f64 * NODE_MILLIS / POD_MILLIS).round() as usize
    }

    /// The nodes of arm `a` (its index in [`ARMS`]).
    fn nodes_of(&self, a: usize) -> std::ops::Range<usize> {
        a * self.nodes..(a + 1) * self.nodes
    }
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` does not: then do nothing.
    if !std::env::args().any(|a| a == "--bench") {
        println!("trimaran_trace: benchmark only; run `cargo bench --bench trimaran_trace`");
        return;
    }
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let s = settings();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let started = Instant::now();
    // The controller-manager's node lifecycle lifts the not-ready taint the nodes are created
    // with; the scheduler is ours.
    let cp = ControlPlane::start(Options {
        nodes: 0,
        pods_per_node: 0,
        scheduler: false,
        wait_node_metrics: false,
        ..Options::default()
    });
    let client = rt.block_on(kube_client(&cp));
    let pods: Api<Pod> = Api::namespaced(client, NS);
    let peers = rt.block_on(setup(&s, &cp, &pods));
    eprintln!(
        "ready after {:.0} s; the day runs {:.0} s",
        started.elapsed().as_secs_f64(),
        s.day.as_secs_f64()
    );
    let samples = rt.block_on(run_day(&s, &pods, &cp.dir().join(SCHEDULER_LOG)));
    drop(peers);
    let report = report(&s, &samples);
    print!("{report}");
    let svg = plot(&s, &samples);
    std::fs::write(&s.svg, svg).unwrap_or_else(|e| panic!("writing {}: {e}", s.svg.display()));
    println!("plot: {}", s.svg.display());
    println!(
        "total {:.0} s; command: TRACE_MINUTES={} cargo bench --bench trimaran_trace",
        started.elapsed().as_secs_f64(),
        s.day.as_secs() / 60
    );
}

async fn kube_client(cp: &ControlPlane) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(&cp.admin_kubeconfig).expect("the kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("a kube config from the admin kubeconfig");
    kube::Client::try_from(config).expect("a kube client")
}

// ---- the cluster, the feeds and the scheduler ----

/// The processes of a run, killed when dropped (load-watcher's :2020 lock released last).
struct Peers {
    children: Vec<Child>,
    _lock: std::fs::File,
}

impl Drop for Peers {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The nodes, their labels, the night's pods bound evenly; kube-prober, load-watcher and the
/// scheduler once both feeds serve every node.
async fn setup(s: &Settings, cp: &ControlPlane, pods: &Api<Pod>) -> Peers {
    let all = 2 * s.nodes;
    cp.kubectl(&["create", "namespace", NS]);
    cp.create_nodes(0..all, "8", "32Gi");
    cp.wait_nodes_ready(all);
    for (a, arm) in ARMS.iter().enumerate() {
        for i in s.nodes_of(a) {
            cp.kubectl(&["label", "node", &node_name(i), &format!("{GROUP}={arm}")]);
        }
    }
    let night = s.curve_pods(Duration::ZERO);
    for (a, arm) in ARMS.iter().enumerate() {
        for n in 0..night {
            let node = node_name(s.nodes_of(a).start + n % s.nodes);
            create(
                pods,
                trace_pod(&format!("{arm}-night-{n}"), arm, Some(&node)),
            )
            .await;
        }
    }
    cp.wait_pods_running(NS, 2 * night);
    cp.wait_node_metrics(all, Duration::from_secs(180));
    let lock = control_plane::lock_port_2020();
    let kp_port = free_port();
    let children = vec![
        start_kube_prober(cp, kp_port),
        start_load_watcher(cp),
        start_scheduler(cp, kp_port),
    ];
    let peers = Peers {
        children,
        _lock: lock,
    };
    for url in [
        format!("http://127.0.0.1:{kp_port}"),
        LOAD_WATCHER.to_string(),
    ] {
        wait_all_nodes(&url, all).await;
    }
    peers
}

fn start_kube_prober(cp: &ControlPlane, port: u16) -> Child {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kube-prober"));
    cmd.args([
        "--role=cluster",
        "--tick-interval=1s",
        "--watcher-estimate-bound-pods=all",
        "--log-format=json",
    ])
    .arg(format!("--listen=127.0.0.1:{port}"))
    .env("KUBECONFIG", &cp.admin_kubeconfig)
    .env("METRICS_PROVIDER_NAME", "KubernetesMetricsServer")
    .env("KUBE_PROBER_PROBE_DNS_NAMES", "localhost")
    .env("HOME", "/nonexistent");
    spawn_owned(cmd, &cp.dir().join("kube-prober.log"))
}

fn start_load_watcher(cp: &ControlPlane) -> Child {
    let mut cmd = Command::new(upstream("load-watcher"));
    cmd.env_clear()
        .env("METRICS_PROVIDER_NAME", "KubernetesMetricsServer")
        .env("KUBE_CONFIG", &cp.admin_kubeconfig);
    spawn_owned(cmd, &cp.dir().join("load-watcher.log"))
}

/// The scheduler with one LoadVariationRiskBalancing profile per arm (its plugin's defaults).
fn start_scheduler(cp: &ControlPlane, kp_port: u16) -> Child {
    let profiles: Vec<Value> = ARMS
        .iter()
        .map(|arm| {
            let watcher = match *arm {
                "kube-prober" => format!("http://127.0.0.1:{kp_port}"),
                _ => LOAD_WATCHER.to_string(),
            };
            json!({
                "schedulerName": arm,
                "plugins": {"score": {"disabled": [{"name": "*"}],
                    "enabled": [{"name": "LoadVariationRiskBalancing"}]}},
                "pluginConfig": [{"name": "LoadVariationRiskBalancing", "args":
                    {"watcherAddress": watcher, "safeVarianceMargin": 1,
                     "safeVarianceSensitivity": 1}}],
            })
        })
        .collect();
    let config = json!({
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "leaderElection": {"leaderElect": false},
        "clientConnection": {"kubeconfig": cp.admin_kubeconfig},
        "profiles": profiles,
    });
    let path = cp.dir().join("trace-scheduler.json");
    std::fs::write(&path, config.to_string()).expect("writing the scheduler config");
    let mut cmd = Command::new(upstream("trimaran-scheduler"));
    cmd.arg(format!("--config={}", path.display())).args([
        "--secure-port=0",
        "--authentication-skip-lookup",
        "-v=2",
    ]);
    spawn_owned(cmd, &cp.dir().join(SCHEDULER_LOG))
}

/// Waits (at most 120 s) until `url`'s `/watcher` has metrics for `n` nodes.
async fn wait_all_nodes(url: &str, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let hosts = watcher_hosts(url).await;
        if hosts >= n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{url}/watcher serves {hosts} of {n} nodes after 120 s"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn watcher_hosts(url: &str) -> usize {
    let Ok(r) = reqwest::Client::new()
        .get(format!("{url}/watcher"))
        .timeout(Duration::from_secs(5))
        .send()
        .await
    else {
        return 0;
    };
    let v: Value = r.json().await.unwrap_or(Value::Null);
    v["data"]["NodeMetricsMap"].as_object().map_or(0, |m| {
        m.values()
            .filter(|h| h["metrics"].as_array().is_some_and(|a| !a.is_empty()))
            .count()
    })
}

/// A pod of arm `arm` using and asking 500m and 64 MiB; bound to `node` when given, else left
/// to the arm's scheduler profile on the arm's nodes.
fn trace_pod(name: &str, arm: &str, node: Option<&str>) -> Pod {
    let mut spec = json!({
        "schedulerName": arm,
        "nodeSelector": {GROUP: arm},
        "containers": [{"name": "c", "image": "usage",
            "resources": {"requests": {"cpu": format!("{POD_MILLIS}m"), "memory": "64Mi"}}}],
    });
    if let Some(node) = node {
        spec["nodeName"] = json!(node);
    }
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": {"app": "trace", "arm": arm},
            "annotations": {"kwok.x-k8s.io/usage-cpu": format!("{POD_MILLIS}m"),
                "kwok.x-k8s.io/usage-memory": "64Mi"}},
        "spec": spec,
    }))
    .expect("a Pod")
}

async fn create(pods: &Api<Pod>, pod: Pod) {
    pods.create(&PostParams::default(), &pod)
        .await
        .unwrap_or_else(|e| panic!("creating a pod: {e}"));
}

async fn delete(pods: &Api<Pod>, name: &str) {
    if let Err(e) = pods.delete(name, &DeleteParams::default()).await {
        panic!("deleting {name}: {e}");
    }
}

// ---- the day ----

/// One sample: seconds into the day, then per arm each node's use in percent.
struct Sample {
    t: f64,
    util: [Vec<f64>; 2],
}

/// The pods of one arm that the trace added and has not deleted yet, oldest first.
#[derive(Default)]
struct Live {
    curve: VecDeque<String>,
    /// Burst pods with the time each expires.
    bursts: VecDeque<(Duration, String)>,
    /// Pods made so far of each burst.
    burst_made: [usize; 2],
}

/// Runs the day: every second the curve's pods follow demand in both arms, bursts arrive and
/// expire; every `sample` the nodes' use is read.
async fn run_day(s: &Settings, pods: &Api<Pod>, scheduler_log: &Path) -> Vec<Sample> {
    let night = s.curve_pods(Duration::ZERO);
    let mut live: [Live; 2] = Default::default();
    for (a, arm) in ARMS.iter().enumerate() {
        live[a].curve = (0..night).map(|n| format!("{arm}-night-{n}")).collect();
    }
    let bursts = [s.day.mul_f64(0.3), s.day.mul_f64(0.7)];
    let burst_life = s.day.mul_f64(0.15);
    let start = Instant::now();
    let (mut made, mut samples, mut next_sample) = (0usize, Vec::new(), Duration::ZERO);
    while start.elapsed() < s.day {
        let t = start.elapsed();
        let want = s.curve_pods(t);
        let burst_due: Vec<(usize, usize)> = bursts
            .iter()
            .enumerate()
            .map(|(b, at)| {
                let due = t
                    .checked_sub(*at)
                    .map_or(0, |d| d.as_secs() as usize / s.burst_spacing + 1);
                (b, due.min(s.burst_pods))
            })
            .collect();
        for (a, arm) in ARMS.iter().enumerate() {
            made += step_arm(pods, arm, &mut live[a], want, &burst_due, t, burst_life).await;
        }
        if t >= next_sample {
            samples.push(sample(s, pods, t, scheduler_log).await);
            next_sample += s.sample;
        }
        let tick = Duration::from_secs(t.as_secs() + 1);
        tokio::time::sleep(tick.saturating_sub(start.elapsed())).await;
    }
    eprintln!("day over: {made} pods added, {} samples", samples.len());
    samples
}

/// One second of one arm: at most one curve pod added or the oldest deleted, the bursts' due
/// pods added, expired burst pods deleted. Returns the pods added.
async fn step_arm(
    pods: &Api<Pod>,
    arm: &str,
    live: &mut Live,
    want: usize,
    burst_due: &[(usize, usize)],
    t: Duration,
    burst_life: Duration,
) -> usize {
    let mut added = 0;
    if live.curve.len() < want {
        let name = format!("{arm}-curve-{}", t.as_secs());
        create(pods, trace_pod(&name, arm, None)).await;
        live.curve.push_back(name);
        added += 1;
    } else if live.curve.len() > want
        && let Some(oldest) = live.curve.pop_front()
    {
        delete(pods, &oldest).await;
    }
    for &(b, due) in burst_due {
        while live.burst_made[b] < due {
            let name = format!("{arm}-burst{b}-{}", live.burst_made[b]);
            create(pods, trace_pod(&name, arm, None)).await;
            live.bursts.push_back((t + burst_life, name));
            live.burst_made[b] += 1;
            added += 1;
        }
    }
    while live.bursts.front().is_some_and(|(until, _)| *until <= t) {
        if let Some((_, name)) = live.bursts.pop_front() {
            delete(pods, &name).await;
        }
    }
    added
}

/// Each node's use now, per arm: the pods bound to it and not being deleted, percent.
/// Panics, with the scheduler's log, when a pod waits over 60 s for a node.
async fn sample(s: &Settings, pods: &Api<Pod>, t: Duration, scheduler_log: &Path) -> Sample {
    let list = pods
        .list(&ListParams::default().labels("app=trace"))
        .await
        .unwrap_or_else(|e| panic!("listing the pods: {e}"));
    let mut millis: BTreeMap<String, f64> = BTreeMap::new();
    let mut waiting = Vec::new();
    let now = k8s_openapi::jiff::Timestamp::now().as_second();
    for p in list.items {
        let deleting = p.metadata.deletion_timestamp.is_some();
        let created = p.metadata.creation_timestamp.as_ref().map(|c| c.0);
        match p.spec.and_then(|s| s.node_name) {
            Some(node) if !deleting => *millis.entry(node).or_default() += POD_MILLIS,
            None if !deleting && created.is_some_and(|c| now - c.as_second() > 60) => {
                waiting.push(p.metadata.name.unwrap_or_default());
            }
            _ => {}
        }
    }
    assert!(
        waiting.is_empty(),
        "pods unscheduled for over 60 s: {waiting:?}; the scheduler's log ends:\n{}",
        tail(scheduler_log, 30)
    );
    let util = |a: usize| -> Vec<f64> {
        s.nodes_of(a)
            .map(|i| millis.get(&node_name(i)).copied().unwrap_or(0.0) / NODE_MILLIS * 100.0)
            .collect()
    };
    Sample {
        t: t.as_secs_f64(),
        util: [util(0), util(1)],
    }
}

// ---- the report and the plot ----

/// Per arm: node-seconds above the target, p99, max and mean of node utilisation.
fn figures(s: &Settings, samples: &[Sample], a: usize) -> (f64, f64, f64, f64) {
    let step = s.sample.as_secs_f64();
    let above: f64 = samples
        .iter()
        .map(|x| x.util[a].iter().filter(|u| **u > s.target).count() as f64 * step)
        .sum();
    let mut all: Vec<f64> = samples
        .iter()
        .flat_map(|x| x.util[a].iter().copied())
        .collect();
    all.sort_by(f64::total_cmp);
    let p99 = all
        .get(((all.len() as f64 * 0.99).ceil() as usize).saturating_sub(1))
        .copied()
        .unwrap_or(0.0);
    let max = all.last().copied().unwrap_or(0.0);
    let mean = all.iter().sum::<f64>() / all.len().max(1) as f64;
    (above, p99, max, mean)
}

fn report(s: &Settings, samples: &[Sample]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n## Trimaran trace: LoadVariationRiskBalancing, {} nodes of 8 cores per arm, a day of \
         {} s, bursts of {} pods {} s apart, target {} %\n",
        s.nodes,
        s.day.as_secs(),
        s.burst_pods,
        s.burst_spacing,
        s.target
    );
    let _ = writeln!(
        out,
        "| feed | node-seconds above {} % | p99 node utilisation | max | mean |",
        s.target
    );
    let _ = writeln!(out, "|---|---|---|---|---|");
    for (a, arm) in ARMS.iter().enumerate() {
        let (above, p99, max, mean) = figures(s, samples, a);
        let _ = writeln!(
            out,
            "| {arm} | {above:.0} | {p99:.1} % | {max:.1} % | {mean:.1} % |"
        );
    }
    out
}

const W: f64 = 960.0;
const PANEL_H: f64 = 240.0;
const LEFT: f64 = 60.0;
const TOP: f64 = 40.0;
const GAP: f64 = 50.0;
const COLOURS: [&str; 8] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

/// Two panels, one per arm: each node's utilisation over the day, the arm's mean, the target.
fn plot(s: &Settings, samples: &[Sample]) -> String {
    let height = TOP + 2.0 * PANEL_H + GAP + 40.0;
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{height}\" \
         font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" \
         fill=\"white\"/>\n<text x=\"{LEFT}\" y=\"20\" font-size=\"14\">LoadVariationRiskBalancing \
         under a compressed day with bursts: node CPU utilisation (%), target {} %</text>\n",
        s.target
    );
    for (a, arm) in ARMS.iter().enumerate() {
        let top = TOP + a as f64 * (PANEL_H + GAP);
        panel(&mut svg, s, samples, a, arm, top);
    }
    svg.push_str("</svg>\n");
    svg
}

fn panel(svg: &mut String, s: &Settings, samples: &[Sample], a: usize, arm: &str, top: f64) {
    let right = W - 20.0;
    let day = s.day.as_secs_f64();
    let x = |t: f64| LEFT + (right - LEFT) * t / day;
    let y = |u: f64| top + PANEL_H * (1.0 - u.clamp(0.0, 100.0) / 100.0);
    let (above, p99, _, _) = figures(s, samples, a);
    let _ = writeln!(
        svg,
        "<text x=\"{LEFT}\" y=\"{}\">{arm}: {above:.0} node-seconds above target, p99 \
         {p99:.1} %</text>",
        top - 6.0
    );
    let _ = writeln!(
        svg,
        "<rect x=\"{LEFT}\" y=\"{top}\" width=\"{}\" height=\"{PANEL_H}\" fill=\"none\" \
         stroke=\"#999\"/>",
        right - LEFT
    );
    for u in [0.0, 25.0, 50.0, 75.0, 100.0] {
        let _ = writeln!(
            svg,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{u}</text>",
            LEFT - 6.0,
            y(u) + 4.0
        );
    }
    for n in 0..s.nodes {
        let points: Vec<String> = samples
            .iter()
            .map(|p| format!("{:.1},{:.1}", x(p.t), y(p.util[a][n])))
            .collect();
        let _ = writeln!(
            svg,
            "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.2\" points=\"{}\"/>",
            COLOURS[n % COLOURS.len()],
            points.join(" ")
        );
    }
    let mean: Vec<String> = samples
        .iter()
        .map(|p| {
            let m = p.util[a].iter().sum::<f64>() / s.nodes as f64;
            format!("{:.1},{:.1}", x(p.t), y(m))
        })
        .collect();
    let _ = writeln!(
        svg,
        "<polyline fill=\"none\" stroke=\"black\" stroke-width=\"2.5\" points=\"{}\"/>\n\
         <line x1=\"{LEFT}\" x2=\"{right}\" y1=\"{t}\" y2=\"{t}\" stroke=\"red\" \
         stroke-dasharray=\"6 4\"/>",
        mean.join(" "),
        t = y(s.target)
    );
    let _ = writeln!(
        svg,
        "<text x=\"{right}\" y=\"{}\" text-anchor=\"end\">seconds into the day: 0 to {day:.0}; \
         black: mean, red: target</text>",
        top + PANEL_H + 16.0
    );
}

/// The last `n` lines of the file at `path`.
fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
