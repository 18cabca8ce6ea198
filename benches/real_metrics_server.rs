//! The cluster role's peak RSS with the real metrics-server answering the whole NodeMetrics
//! list in one piece: the control plane of tests/support/control_plane.rs (etcd,
//! kube-apiserver, kwok, metrics-server through the aggregation layer; no controller-manager or
//! scheduler: the usage pods are bound to their nodes) with `NODES` kwok nodes and one usage pod
//! each, and the release kube-prober (`--role cluster`, default `--interval 15s`) against its
//! admin kubeconfig.
//!
//! Run with `cargo bench --bench real_metrics_server`. Environment:
//! - `NODES` (default 1000): kwok nodes, each with one pod using 500m and 1Gi;
//! - `FETCHES` (default 4): metrics-server fetches kube-prober makes after `/watcher` first has
//!   every node with NodeMetrics, before the figures are read;
//! - `METRICS_WAIT_SECS` (default 600): how long to wait for NodeMetrics of every node (at
//!   1,000 nodes on 2 cores metrics-server may miss some kwok scrapes: the report says how many
//!   it had);
//! - `NODE_LABELS=cloud`: give every node 21 more labels, modelled on those a GKE node carries
//!   (instance type, node pool, zone and region, OS and runtime, ...); metrics-server copies a
//!   node's labels into its NodeMetrics, so they set the size of the answer. Default: the 4
//!   labels of tests/support/control_plane.rs;
//! - `KUBE_PROBER_BIN`: another kube-prober binary (default: the one cargo built for the bench).
//!
//! Prints how long the control plane took to come up (API server; nodes Ready; pods Running;
//! NodeMetrics), the size of one NodeMetrics list answer (bytes, as
//! `kubectl get --raw /apis/metrics.k8s.io/v1beta1/nodes` reads it), kube-prober's time to a
//! `/watcher` with every such node, and its VmRSS and VmHWM (peak RSS) after `FETCHES` fetches.
//! Under `cargo test --benches` (no `--bench` argument) it does nothing. Needs the upstream
//! binaries of `tests/upstream/build.sh` and curl.

mod common;
use support::control_plane;

use std::collections::BTreeSet;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{env_usize, loadavg, machine_info, mib, rss_kib};
use control_plane::{ControlPlane, Options, items, node_name, usage_pod};
use serde_json::Value;

const CHUNK: usize = 200;
/// `NODE_LABELS=cloud`: labels modelled on a GKE node's, beside the control plane's 4.
const CLOUD_LABELS: [&str; 21] = [
    "beta.kubernetes.io/arch=amd64",
    "beta.kubernetes.io/instance-type=e2-standard-4",
    "beta.kubernetes.io/os=linux",
    "cloud.google.com/gke-boot-disk=pd-balanced",
    "cloud.google.com/gke-container-runtime=containerd",
    "cloud.google.com/gke-cpu-scaling-level=4",
    "cloud.google.com/gke-logging-variant=DEFAULT",
    "cloud.google.com/gke-max-pods-per-node=110",
    "cloud.google.com/gke-memory-gb-scaling-level=16",
    "cloud.google.com/gke-nodepool=default-pool",
    "cloud.google.com/gke-os-distribution=cos",
    "cloud.google.com/gke-provisioning=standard",
    "cloud.google.com/gke-stack-type=IPV4",
    "cloud.google.com/machine-family=e2",
    "cloud.google.com/private-node=false",
    "failure-domain.beta.kubernetes.io/region=us-central1",
    "failure-domain.beta.kubernetes.io/zone=us-central1-a",
    "node.kubernetes.io/instance-type=e2-standard-4",
    "topology.gke.io/zone=us-central1-a",
    "topology.kubernetes.io/region=us-central1",
    "topology.kubernetes.io/zone=us-central1-a",
];
/// kubectl streams creating objects at once.
const STREAMS: usize = 4;

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` does not: then do nothing.
    if !std::env::args().any(|a| a == "--bench") {
        println!(
            "real_metrics_server: benchmark only; run `cargo bench --bench real_metrics_server`"
        );
        return;
    }
    let nodes = env_usize("NODES", 1000);
    let fetches = env_usize("FETCHES", 4);
    let metrics_wait = Duration::from_secs(env_usize("METRICS_WAIT_SECS", 600) as u64);
    for (k, v) in machine_info() {
        eprintln!("{k}: {v}");
    }
    eprintln!("load average at start: {}", loadavg());

    let started = Instant::now();
    let cp = ControlPlane::start(Options::bare());
    let t_api = started.elapsed();

    // Nodes, STREAMS kubectl streams of CHUNK each.
    let ranges: Vec<std::ops::Range<usize>> = (0..nodes)
        .step_by(CHUNK)
        .map(|a| a..(a + CHUNK).min(nodes))
        .collect();
    parallel(&ranges, |r| cp.create_nodes(r.clone(), "4", "16Gi"));
    let t_created = started.elapsed();
    poll(
        &format!("{nodes} nodes Ready"),
        Duration::from_secs(900),
        || {
            let ready = ready_nodes(&cp);
            eprintln!("  {ready} of {nodes} nodes Ready");
            ready >= nodes
        },
    );
    let t_ready = started.elapsed();
    let labels = std::env::var("NODE_LABELS").unwrap_or_default();
    let label_note = match labels.as_str() {
        "" => "4 labels a node",
        "cloud" => {
            let mut args = vec!["label", "nodes", "-l", "type=kwok", "--overwrite"];
            args.extend(CLOUD_LABELS);
            cp.kubectl(&args);
            "25 labels a node (`NODE_LABELS=cloud`)"
        }
        other => panic!("NODE_LABELS={other:?}: only `cloud` is known"),
    };
    parallel(&ranges, |r| {
        let docs: Vec<String> = r
            .clone()
            .map(|i| usage_pod("default", &node_name(i), 0, "500m", "1Gi").to_string())
            .collect();
        cp.kubectl_stdin(&["create", "-f", "-"], Some(&docs.join("\n")));
    });
    poll(
        &format!("{nodes} pods Running"),
        Duration::from_secs(900),
        || {
            let running = running_pods(&cp);
            eprintln!("  {running} of {nodes} pods Running");
            running >= nodes
        },
    );
    let t_pods = started.elapsed();

    // NodeMetrics of every node, or as many as metrics-server has when the wait ends.
    let deadline = Instant::now() + metrics_wait;
    let mut have = 0;
    while Instant::now() < deadline {
        have = node_metrics_names(&cp).map(|n| n.len()).unwrap_or(0);
        eprintln!(
            "  NodeMetrics for {have} of {nodes} nodes ({:.0} s)",
            started.elapsed().as_secs_f64()
        );
        if have >= nodes {
            break;
        }
        std::thread::sleep(Duration::from_secs(5));
    }
    let t_metrics = started.elapsed();
    assert!(
        have > 0,
        "no NodeMetrics at all:\n{}",
        cp.log_tail("metrics-server", 30)
    );

    // One whole answer: bytes and items.
    let body = cp.kubectl(&["get", "--raw", "/apis/metrics.k8s.io/v1beta1/nodes"]);
    let v: Value = serde_json::from_str(&body).expect("NodeMetrics JSON");
    let answer_items = items(&v).len();
    let answer_bytes = body.len();
    let item_bytes: Vec<usize> = items(&v).iter().map(|m| m.to_string().len()).collect();
    let continue_ = v["metadata"]["continue"].as_str().unwrap_or("").to_string();
    eprintln!("one NodeMetrics item: {}", items(&v)[0]);

    // kube-prober.
    let port = control_plane::free_port();
    let bin = std::env::var("KUBE_PROBER_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_kube-prober").to_string());
    let log = cp.dir().join("kube-prober.log");
    let mut cmd = Command::new(&bin);
    cmd.args([
        "--role",
        "cluster",
        "--listen",
        &format!("127.0.0.1:{port}"),
        "--log-format",
        "json",
        "--disable-probes",
        "cluster_dns,metrics_server,apiserver_readyz",
    ])
    .env("KUBECONFIG", &cp.admin_kubeconfig)
    .env("HOME", "/nonexistent");
    let child = control_plane::spawn_owned(cmd, &log);
    let mut kp = Kp(child);
    let pid = kp.0.id();
    let kp_started = Instant::now();
    let url = format!("http://127.0.0.1:{port}");

    // /watcher with every node that has NodeMetrics now.
    let mut watcher_nodes = 0;
    poll(
        "kube-prober's /watcher with every node that has NodeMetrics",
        Duration::from_secs(300),
        || {
            assert!(
                kp.0.try_wait().ok().flatten().is_none(),
                "kube-prober exited:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
            let Some(want) = node_metrics_names(&cp) else {
                return false;
            };
            let got = watcher_hosts(&url);
            watcher_nodes = got.len();
            eprintln!(
                "  /watcher: {} hosts, NodeMetrics: {} nodes",
                got.len(),
                want.len()
            );
            !want.is_empty() && want.is_subset(&got)
        },
    );
    let t_watcher = kp_started.elapsed();
    let (_, hwm_watcher) = rss_kib(pid);

    // FETCHES more fetches, counted by kube-prober's own runs of the source.
    let runs0 = source_runs(&url);
    poll(
        &format!("{fetches} more metrics-server fetches"),
        Duration::from_secs(60 + 30 * fetches as u64),
        || source_runs(&url) >= runs0 + fetches as f64,
    );
    let runs = source_runs(&url);
    let (rss, hwm) = rss_kib(pid);
    let watcher_nodes_end = watcher_hosts(&url).len();
    let (_, code, _) = http_get(&format!("{url}/watcher/health"));
    let elapsed_kp = kp_started.elapsed();
    kp.stop();

    let per_item = answer_bytes as f64 / answer_items.max(1) as f64;
    let min_item = item_bytes.iter().min().copied().unwrap_or(0);
    let max_item = item_bytes.iter().max().copied().unwrap_or(0);
    let cap = 32.0 * 1024.0 * 1024.0;
    println!("## real_metrics_server: {nodes} kwok nodes, one usage pod each, {label_note}\n");
    println!("| figure | value |");
    println!("|---|---:|");
    println!(
        "| control plane: etcd + kube-apiserver + kwok + metrics-server (APIService Available) | {:.1} s |",
        t_api.as_secs_f64()
    );
    println!(
        "| {nodes} nodes created / Ready | {:.1} s / {:.1} s |",
        t_created.as_secs_f64(),
        t_ready.as_secs_f64()
    );
    println!("| {nodes} pods Running | {:.1} s |", t_pods.as_secs_f64());
    println!(
        "| NodeMetrics for {have} of {nodes} nodes | {:.1} s |",
        t_metrics.as_secs_f64()
    );
    println!(
        "| one NodeMetrics list answer | {answer_bytes} bytes, {answer_items} items, continue {:?} |",
        continue_
    );
    println!(
        "| bytes per node (answer ÷ items; one item alone {min_item}–{max_item}) | {per_item:.1} |"
    );
    println!(
        "| nodes at which the whole answer passes 32 MiB (`--max-response-bytes` default) | {:.0} |",
        cap / per_item
    );
    println!(
        "| the answer at 65,000 nodes (estimate: bytes per node × 65,000) | {:.1} MiB |",
        per_item * 65_000.0 / 1024.0 / 1024.0
    );
    println!(
        "| kube-prober start to `/watcher` with every node with NodeMetrics ({watcher_nodes} hosts) | {:.1} s (VmHWM then {:.1} MiB) |",
        t_watcher.as_secs_f64(),
        mib(hwm_watcher)
    );
    println!(
        "| metrics-server fetches counted (`kube_prober_source_runs_total`) | {runs} after {:.0} s |",
        elapsed_kp.as_secs_f64()
    );
    println!("| `/watcher` hosts at the end; `/watcher/health` | {watcher_nodes_end}; {code} |");
    println!("| kube-prober VmRSS at the end | {:.1} MiB |", mib(rss));
    println!(
        "| **kube-prober peak RSS (VmHWM)** | **{:.1} MiB** |",
        mib(hwm)
    );
    println!("\nload average at the end: {}", loadavg());
}

/// Runs `f` on every item, `STREAMS` at a time.
fn parallel<T: Sync>(work: &[T], f: impl Fn(&T) + Sync) {
    for group in work.chunks(STREAMS) {
        std::thread::scope(|s| {
            for item in group {
                let f = &f;
                s.spawn(move || f(item));
            }
        });
    }
}

/// Polls `ok` every 2 s until it holds; panics after `within`.
fn poll(what: &str, within: Duration, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !ok() {
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        std::thread::sleep(Duration::from_secs(2));
    }
}

fn ready_nodes(cp: &ControlPlane) -> usize {
    let out = cp.kubectl(&[
        "get",
        "nodes",
        "-o",
        r#"jsonpath={range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}"#,
    ]);
    out.lines().filter(|l| *l == "True").count()
}

fn running_pods(cp: &ControlPlane) -> usize {
    let out = cp.kubectl(&[
        "get",
        "pods",
        "-n",
        "default",
        "-o",
        r#"jsonpath={range .items[*]}{.status.phase}{"\n"}{end}"#,
    ]);
    out.lines().filter(|l| *l == "Running").count()
}

/// The nodes metrics-server has NodeMetrics for (`None` while the API does not answer).
fn node_metrics_names(cp: &ControlPlane) -> Option<BTreeSet<String>> {
    let out = cp.kubectl_output(
        &["get", "--raw", "/apis/metrics.k8s.io/v1beta1/nodes"],
        None,
    );
    if !out.status.success() {
        return None;
    }
    let v: Value = serde_json::from_slice(&out.stdout).ok()?;
    Some(
        items(&v)
            .iter()
            .filter_map(|m| m["metadata"]["name"].as_str().map(str::to_string))
            .collect(),
    )
}

/// (body, status code, ok) of a plain GET with curl.
fn http_get(url: &str) -> (String, u16, bool) {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "20", "-w", "\n%{http_code}", url])
        .stdin(Stdio::null())
        .output()
        .expect("running curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    let code: u16 = code.trim().parse().unwrap_or(0);
    (body.to_string(), code, out.status.success())
}

/// The hosts of kube-prober's `/watcher`.
fn watcher_hosts(url: &str) -> BTreeSet<String> {
    let (body, code, _) = http_get(&format!("{url}/watcher"));
    if code != 200 {
        return BTreeSet::new();
    }
    let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    v["data"]["NodeMetricsMap"]
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}

/// `kube_prober_source_runs_total` of the metrics-server source, every outcome.
fn source_runs(url: &str) -> f64 {
    let (body, _, _) = http_get(&format!("{url}/metrics"));
    body.lines()
        .filter(|l| {
            l.starts_with("kube_prober_source_runs_total{")
                && l.contains(r#"source="metrics_server""#)
        })
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

/// kube-prober, stopped with SIGTERM when dropped.
struct Kp(Child);

impl Kp {
    fn stop(&mut self) {
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let _ = self.0.wait();
    }
}

impl Drop for Kp {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            self.stop();
        }
    }
}
