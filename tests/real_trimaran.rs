//! Trimaran end to end: the real scheduler (`sigs.k8s.io/scheduler-plugins` v0.34.7,
//! `cmd/scheduler`) on the real control plane (tests/support/control_plane.rs) places pods with
//! TargetLoadPacking, LoadVariationRiskBalancing and LowRiskOverCommitment, once reading
//! kube-prober's `/watcher` and once reading paypal/load-watcher v0.2.4's, both fed by the same
//! metrics-server. kwok nodes run at known, different CPU usage (pod annotations).
//!
//! For every plugin and both watchers, the pod lands on the node that the plugin's documented
//! score (tests/support/trimaran.rs) picks from that watcher's body, and the scheduler's log
//! (`-v=6`) shows the score of every node with metrics as computed from that body, `Unable to
//! find metrics for node` only for the nodes without metrics, and no failed fetch. So the fast
//! unit tests in tests/trimaran.rs use scores checked here against the real plugins.
//!
//! Phases, one control plane and one kube-prober for all:
//! 1. steady usage, with a node of each group that has no metrics yet (no pods, so no
//!    NodeMetrics): both watchers give the same decisions;
//! 2. the node LoadVariationRiskBalancing picked is deleted while the scheduler runs (its
//!    collectors still hold the node's metrics from the last fetch): both land on the best
//!    remaining node, and the node leaves kube-prober's `/watcher` by its next tick;
//! 3. usage moves (one node per group falls from 90 % to 5 % and from 60 % to 10 %): TargetLoadPacking
//!    decides as with load-watcher; LoadVariationRiskBalancing and LowRiskOverCommitment do
//!    not. load-watcher's metrics-server provider serves only the newest value (`Latest`, no
//!    `STD`), so these two risk-aware plugins see a node that dropped seconds ago as idle and
//!    steady; kube-prober serves the window's `AVG` and `STD` as well (the inputs the plugins
//!    are written for, which load-watcher gives only from Prometheus), so they still see its
//!    recent load and its variation, and keep the pod on the steady node.
//!
//! load-watcher listens on `:2020`, every address of the machine, because upstream gives no
//! flag or variable to change it. Every use of that port by a test binary, from any checkout on
//! the machine, is serialized with a file lock (`kube-prober-load-watcher-2020.lock` in the temp
//! folder), and a port taken by anything else is an error naming it. Nothing sends traffic
//! anywhere but 127.0.0.1.

#[path = "support/control_plane.rs"]
mod control_plane;
#[path = "support/trimaran.rs"]
mod scoring;
mod support;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use control_plane::{ControlPlane, Options, items, node_name, quantity, spawn_owned, upstream};
use kube_prober::watcher::{Metric, WatcherMetrics};
use scoring::{Args, NodePod};
use serde_json::{Value, json};
use support::{Prober, get};

const NS: &str = "trimaran";
const GROUP: &str = "trimaran.test/group";
/// Nodes for TargetLoadPacking and LoadVariationRiskBalancing: usage pods with 1m CPU limits,
/// so the "missing utilisation" TargetLoadPacking adds for recently bound pods stays 1m each.
const LOAD: &str = "load";
/// Nodes for LowRiskOverCommitment: usage pods with CPU requests and limits that it weighs.
const OVERCOMMIT: &str = "overcommit";
const LOAD_WATCHER: &str = "http://127.0.0.1:2020";

/// Per node: group, and (usage CPU, request CPU, limit CPU) of its one pod, or no pod (no
/// NodeMetrics). Every node has 4 cores and 16 GiB; every usage pod uses 1 GiB of memory.
/// A usage pod: (usage CPU, request CPU, limit CPU).
type Usage = (&'static str, &'static str, &'static str);

const NODES: [(&str, Option<Usage>); 7] = [
    (LOAD, Some(("3600m", "1m", "1m"))),             // 90 %
    (LOAD, Some(("1400m", "1m", "1m"))),             // 35 %: TargetLoadPacking's choice
    (LOAD, None),                                    // no metrics yet
    (LOAD, Some(("400m", "1m", "1m"))),              // 10 %: LoadVariationRiskBalancing's
    (OVERCOMMIT, Some(("800m", "1600m", "4300m"))),  // 20 % under its requests, limits over
    (OVERCOMMIT, Some(("2400m", "1600m", "4000m"))), // 60 %, over its requests
    (OVERCOMMIT, None),                              // no metrics yet
];

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Plugin {
    Tlp,
    Lvrb,
    Lro,
}

const PLUGINS: [Plugin; 3] = [Plugin::Tlp, Plugin::Lvrb, Plugin::Lro];

impl Plugin {
    fn name(self) -> &'static str {
        match self {
            Plugin::Tlp => "TargetLoadPacking",
            Plugin::Lvrb => "LoadVariationRiskBalancing",
            Plugin::Lro => "LowRiskOverCommitment",
        }
    }

    fn short(self) -> &'static str {
        match self {
            Plugin::Tlp => "tlp",
            Plugin::Lvrb => "lvrb",
            Plugin::Lro => "lro",
        }
    }

    fn group(self) -> &'static str {
        if self == Plugin::Lro {
            OVERCOMMIT
        } else {
            LOAD
        }
    }

    /// The plugin's arguments as the profiles set them (the plugins' defaults, written out).
    fn args(self, watcher: &str) -> Value {
        match self {
            Plugin::Tlp => json!({"watcherAddress": watcher, "targetUtilization": 40,
                "defaultRequests": {"cpu": "1000m"}, "defaultRequestsMultiplier": "1"}),
            Plugin::Lvrb => json!({"watcherAddress": watcher, "safeVarianceMargin": 1,
                "safeVarianceSensitivity": 1}),
            Plugin::Lro => json!({"watcherAddress": watcher, "smoothingWindowSize": 5,
                "riskLimitWeights": {"cpu": 0.5, "memory": 0.5}}),
        }
    }

    fn score(self, metrics: Option<&[Metric]>, np: &NodePod) -> i64 {
        let args = Args::default();
        match self {
            Plugin::Tlp => scoring::tlp_score(metrics, &args, np),
            Plugin::Lvrb => scoring::lvrb_score(metrics, &args, np),
            Plugin::Lro => scoring::lro_score(metrics, &args, np),
        }
    }

    /// The score of each node in one scheduling cycle's log lines.
    fn logged_scores(self, log: &str) -> BTreeMap<String, i64> {
        let mut scores = BTreeMap::new();
        for line in log.lines().filter(|l| l.contains(self.name())) {
            let key = match self {
                Plugin::Tlp if line.contains("\"Penalised score for host\"") => "penalisedScore",
                Plugin::Tlp if line.contains("\"Score for host\"") => "score",
                Plugin::Lvrb | Plugin::Lro if line.contains("\"Calculating totalScore\"") => {
                    "totalScore"
                }
                _ => continue,
            };
            if let (Some(node), Some(score)) = (field(line, "nodeName"), field(line, key)) {
                scores.insert(node.to_string(), score.parse().expect("a logged score"));
            }
        }
        scores
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Watcher {
    KubeProber,
    LoadWatcher,
}

const WATCHERS: [Watcher; 2] = [Watcher::KubeProber, Watcher::LoadWatcher];

impl Watcher {
    fn short(self) -> &'static str {
        match self {
            Watcher::KubeProber => "kube-prober",
            Watcher::LoadWatcher => "load-watcher",
        }
    }
}

/// `key=value` or `key="value"` of a klog structured line.
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let at = line.find(&format!(" {key}="))? + key.len() + 2;
    let rest = &line[at..];
    match rest.strip_prefix('"') {
        Some(quoted) => quoted.split('"').next(),
        None => rest.split_whitespace().next(),
    }
}

fn profile(plugin: Plugin, watcher: Watcher) -> String {
    format!("{}-{}", plugin.short(), watcher.short())
}

/// Six profiles, one per plugin and watcher, each scoring with its plugin alone.
fn scheduler_config(cp: &ControlPlane, kube_prober: &str) -> Value {
    let mut profiles = Vec::new();
    for plugin in PLUGINS {
        for watcher in WATCHERS {
            let address = match watcher {
                Watcher::KubeProber => kube_prober,
                Watcher::LoadWatcher => LOAD_WATCHER,
            };
            let mut plugins = json!({"score": {"disabled": [{"name": "*"}],
                "enabled": [{"name": plugin.name()}]}});
            if plugin == Plugin::Lro {
                plugins["preScore"] = json!({"enabled": [{"name": plugin.name()}]});
            }
            profiles.push(json!({
                "schedulerName": profile(plugin, watcher),
                "plugins": plugins,
                "pluginConfig": [{"name": plugin.name(), "args": plugin.args(address)}],
            }));
        }
    }
    json!({
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "leaderElection": {"leaderElect": false},
        "clientConnection": {"kubeconfig": cp.admin_kubeconfig},
        "profiles": profiles,
    })
}

/// The Trimaran scheduler; each start reads both watchers at once (every plugin's collector
/// fetches when it is built, then every 30 s).
struct Scheduler {
    child: Child,
    log: PathBuf,
}

impl Scheduler {
    fn start(cp: &ControlPlane, config: &Value, phase: &str) -> Scheduler {
        let path = cp.dir().join("trimaran-scheduler.json");
        std::fs::write(&path, config.to_string()).expect("writing the scheduler config");
        let log = cp.dir().join(format!("trimaran-scheduler-{phase}.log"));
        let mut cmd = Command::new(upstream("trimaran-scheduler"));
        cmd.arg(format!("--config={}", path.display())).args([
            "--secure-port=0",
            "--authentication-skip-lookup",
            "-v=6",
        ]);
        let child = spawn_owned(cmd, &log);
        Scheduler { child, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn wait_log(&self, what: &str, ok: impl Fn(&str) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !ok(&self.log()) {
            assert!(
                Instant::now() < deadline,
                "{what} not in the scheduler log within 60 s"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Scheduler {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// paypal/load-watcher on `:2020`, holding the file lock that serializes the port.
struct LoadWatcherProc {
    child: Child,
    _lock: std::fs::File,
}

impl LoadWatcherProc {
    fn start(cp: &ControlPlane) -> LoadWatcherProc {
        let lock = control_plane::lock_port_2020();
        if let Err(e) = std::net::TcpListener::bind("0.0.0.0:2020") {
            panic!(
                "port 2020 is taken by another process ({e}): load-watcher binds :2020 with no \
                 flag to change it, so stop whatever listens there (`ss -ltnp 'sport = 2020'`)"
            );
        }
        let child = Self::spawn(cp);
        LoadWatcherProc { child, _lock: lock }
    }

    fn spawn(cp: &ControlPlane) -> Child {
        let mut cmd = Command::new(upstream("load-watcher"));
        cmd.env_clear()
            .env("METRICS_PROVIDER_NAME", "KubernetesMetricsServer")
            .env("KUBE_CONFIG", &cp.admin_kubeconfig);
        spawn_owned(cmd, &cp.dir().join("load-watcher.log"))
    }

    /// Restarts it: it fetches at once on start, else only once a minute.
    fn restart(&mut self, cp: &ControlPlane) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.child = Self::spawn(cp);
    }
}

impl Drop for LoadWatcherProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `/watcher` of `url` (`http://host:port`), when it answers 200 with JSON.
async fn watcher_body(url: &str) -> Option<WatcherMetrics> {
    let r = reqwest::Client::new()
        .get(format!("{url}/watcher"))
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .ok()?;
    if r.status() != 200 {
        return None;
    }
    serde_json::from_str(&r.text().await.ok()?).ok()
}

/// The newest (`Latest`) CPU percentage of `node`.
fn latest_cpu(w: &WatcherMetrics, node: &str) -> Option<f64> {
    w.data
        .node_metrics_map
        .get(node)?
        .metrics
        .iter()
        .find(|m| m.kind == "CPU" && m.operator == "Latest")
        .map(|m| m.value)
}

/// Polls `url`'s `/watcher` until every `(node, CPU %)` of `want` is its `Latest` (within 0.5
/// points; `None`: the node is absent or has no metrics).
async fn wait_watcher(url: &str, want: &[(usize, Option<f64>)], secs: u64) -> WatcherMetrics {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let body = watcher_body(url).await;
        if let Some(w) = &body {
            let ok = want.iter().all(|(i, cpu)| match cpu {
                Some(c) => latest_cpu(w, &node_name(*i)).is_some_and(|v| (v - c).abs() <= 0.5),
                None => w
                    .data
                    .node_metrics_map
                    .get(&node_name(*i))
                    .is_none_or(|n| n.metrics.is_empty()),
            });
            if ok {
                return body.expect("checked");
            }
        }
        assert!(
            Instant::now() < deadline,
            "{url}/watcher not {want:?} within {secs} s: {body:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// What each node's pods ask for, as the scheduler sums them, with the pod to schedule (1m CPU
/// request and limit) and TargetLoadPacking's prediction of every pod on the node counted as
/// missing utilisation (right after the scheduler starts every bound pod counts; a 1m limit
/// each, so whether it counts moves a score by well under a point).
fn node_pods(cp: &ControlPlane) -> BTreeMap<String, NodePod> {
    let mut out: BTreeMap<String, NodePod> = BTreeMap::new();
    for i in 0..NODES.len() {
        out.insert(
            node_name(i),
            NodePod {
                cpu_capacity_millis: 4000.0,
                cpu_allocatable_millis: 4000.0,
                memory_allocatable_bytes: 16.0 * 1024.0 * 1024.0 * 1024.0,
                pod_cpu_request: 1.0,
                pod_cpu_limit: 1.0,
                tlp_pod_millis: 1.0,
                ..NodePod::default()
            },
        );
    }
    for pod in items(&cp.get_json(&["pods", "-A"])) {
        let Some(np) = pod["spec"]["nodeName"]
            .as_str()
            .and_then(|n| out.get_mut(n))
        else {
            continue;
        };
        for c in pod["spec"]["containers"].as_array().into_iter().flatten() {
            let r = &c["resources"];
            let q = |v: &Value| v.as_str().map(quantity);
            let (cpu_req, cpu_lim) = (q(&r["requests"]["cpu"]), q(&r["limits"]["cpu"]));
            let (mem_req, mem_lim) = (q(&r["requests"]["memory"]), q(&r["limits"]["memory"]));
            let cpu_req = cpu_req.or(cpu_lim).unwrap_or(0.0) * 1000.0;
            let mem_req = mem_req.or(mem_lim).unwrap_or(0.0);
            np.node_cpu_requests += cpu_req;
            np.node_cpu_limits += (cpu_lim.unwrap_or(0.0) * 1000.0).max(cpu_req);
            np.node_memory_requests += mem_req;
            np.node_memory_limits += mem_lim.unwrap_or(0.0).max(mem_req);
            np.tlp_missing_millis += match (cpu_lim, q(&r["requests"]["cpu"])) {
                (Some(l), _) => l * 1000.0,
                (None, Some(req)) => req * 1000.0,
                (None, None) => 1000.0,
            };
        }
    }
    out
}

/// A pod for `plugin`'s profile reading `watcher`, restricted to the plugin's node group.
fn test_pod(name: &str, plugin: Plugin, watcher: Watcher) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "schedulerName": profile(plugin, watcher),
            "nodeSelector": {GROUP: plugin.group()},
            "containers": [{"name": "c", "image": "pause",
                "resources": {"requests": {"cpu": "1m"}, "limits": {"cpu": "1m"}}}],
        },
    })
}

/// The node the scheduler bound pod `name` to.
fn wait_bound(cp: &ControlPlane, sched: &Scheduler, name: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let pod = cp.get_json(&["pod", "-n", NS, name]);
        if let Some(node) = pod["spec"]["nodeName"].as_str() {
            return node.to_string();
        }
        assert!(
            Instant::now() < deadline,
            "{name} not bound within 60 s: {}\nscheduler log tail:\n{}",
            pod["status"],
            sched
                .log()
                .lines()
                .rev()
                .take(40)
                .collect::<Vec<_>>()
                .join("\n")
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// One pod's placement: the node, and the scheduler's log lines of its cycle.
struct Placement {
    plugin: Plugin,
    watcher: Watcher,
    node: String,
    cycle: String,
    pods: BTreeMap<String, NodePod>,
}

/// Both watchers' bodies now.
async fn bodies(kube_prober: &str) -> BTreeMap<Watcher, WatcherMetrics> {
    let mut out = BTreeMap::new();
    for (w, url) in [
        (Watcher::KubeProber, kube_prober),
        (Watcher::LoadWatcher, LOAD_WATCHER),
    ] {
        out.insert(
            w,
            watcher_body(url)
                .await
                .unwrap_or_else(|| panic!("{url}/watcher")),
        );
    }
    out
}

/// Every node of `plugin`'s group that still exists, with its documented score from `body`.
fn scores(
    plugin: Plugin,
    body: &WatcherMetrics,
    pods: &BTreeMap<String, NodePod>,
    gone: &[usize],
) -> Vec<(String, i64)> {
    (0..NODES.len())
        .filter(|i| NODES[*i].0 == plugin.group() && !gone.contains(i))
        .map(|i| {
            let node = node_name(i);
            let metrics = body
                .data
                .node_metrics_map
                .get(&node)
                .map(|n| &n.metrics[..]);
            let score = plugin.score(metrics, &pods[&node]);
            (node, score)
        })
        .collect()
}

/// Schedules one pod per plugin and watcher (one at a time, so each cycle's log lines are its
/// own) and checks each against the documented scores of the bodies read before and after:
/// the pod is on the best node, and every logged score is the documented one (within a point:
/// metrics-server's readings move by hundredths of a percent, and TargetLoadPacking counts
/// recently bound pods of 1m). Returns the node of each (plugin, watcher).
async fn place_all(
    cp: &ControlPlane,
    sched: &Scheduler,
    kube_prober: &str,
    phase: &str,
    gone: &[usize],
) -> BTreeMap<(Plugin, Watcher), String> {
    let before = bodies(kube_prober).await;
    let mut placements = Vec::new();
    for plugin in PLUGINS {
        for watcher in WATCHERS {
            let pods = node_pods(cp);
            let name = format!("{phase}-{}-{}", plugin.short(), watcher.short());
            let from = sched.log().len();
            cp.kubectl_stdin(
                &["create", "-f", "-"],
                Some(&test_pod(&name, plugin, watcher).to_string()),
            );
            let node = wait_bound(cp, sched, &name);
            let cycle = sched.log()[from..].to_string();
            placements.push(Placement {
                plugin,
                watcher,
                node,
                cycle,
                pods,
            });
        }
    }
    let after = bodies(kube_prober).await;
    let mut placed = BTreeMap::new();
    for p in placements {
        check(&p, &before[&p.watcher], &after[&p.watcher], phase, gone);
        placed.insert((p.plugin, p.watcher), p.node);
    }
    placed
}

fn check(
    p: &Placement,
    before: &WatcherMetrics,
    after: &WatcherMetrics,
    phase: &str,
    gone: &[usize],
) {
    let what = format!("{phase}: {} reading {}", p.plugin.name(), p.watcher.short());
    let (sb, sa) = (
        scores(p.plugin, before, &p.pods, gone),
        scores(p.plugin, after, &p.pods, gone),
    );
    let best = scoring::unique_best(&sb);
    assert!(
        best.is_some(),
        "{what}: a tie in the documented scores {sb:?}"
    );
    assert_eq!(
        best,
        scoring::unique_best(&sa),
        "{what}: the watcher's data changed the decision during the phase: {sb:?} then {sa:?}"
    );
    let logged = p.plugin.logged_scores(&p.cycle);
    eprintln!(
        "{what}: on {}; documented scores {sb:?}, logged {logged:?}",
        p.node
    );
    assert_eq!(
        Some(&p.node),
        best.as_ref(),
        "{what}: bound to {}, the documented scores {sb:?} pick {best:?}; logged {logged:?}",
        p.node
    );
    for ((node, b), (_, a)) in sb.iter().zip(&sa) {
        let has_metrics = before
            .data
            .node_metrics_map
            .get(node)
            .is_some_and(|n| !n.metrics.is_empty());
        if has_metrics {
            let got = logged.get(node).copied();
            assert!(
                got.is_some_and(|g| g >= b.min(a) - 1 && g <= b.max(a) + 1),
                "{what}: {node} scored {got:?} by the plugin, documented {b} (then {a}); cycle log:\n{}",
                p.cycle
            );
        } else {
            assert!(
                p.cycle
                    .lines()
                    .any(|l| (l.contains("\"Unable to find metrics for node\"")
                        || l.contains("\"Failed to get metrics for node; using minimum score\""))
                        && l.contains(&format!("nodeName=\"{node}\""))),
                "{what}: {node} has no metrics, yet the plugin did not say so; cycle log:\n{}",
                p.cycle
            );
        }
    }
    for n in gone {
        let gone = format!("nodeName=\"{}\"", node_name(*n));
        assert!(
            !p.cycle
                .lines()
                .any(|l| l.contains(p.plugin.name()) && l.contains(&gone)),
            "{what}: the deleted {} was scored; cycle log:\n{}",
            node_name(*n),
            p.cycle
        );
    }
}

/// The nodes and their usage pods (one per node with usage).
fn create_nodes(cp: &ControlPlane) {
    cp.kubectl(&["create", "namespace", NS]);
    cp.create_nodes(0..NODES.len(), "4", "16Gi");
    cp.wait_nodes_ready(NODES.len());
    let mut docs = Vec::new();
    for (i, (group, usage)) in NODES.iter().enumerate() {
        cp.kubectl(&["label", "node", &node_name(i), &format!("{GROUP}={group}")]);
        if let Some((cpu, request, limit)) = usage {
            let mut pod = control_plane::usage_pod(NS, &node_name(i), 0, cpu, "1Gi");
            pod["spec"]["containers"][0]["resources"] =
                json!({"requests": {"cpu": request}, "limits": {"cpu": limit}});
            docs.push(pod.to_string());
        }
    }
    cp.kubectl_stdin(&["create", "-f", "-"], Some(&docs.join("\n")));
    cp.wait_pods_running(NS, docs.len());
}

/// Samples of node `node`'s CPU in kube-prober's longest window with data.
async fn samples(kp: &Prober, node: &str) -> u64 {
    let (_, body) = get(&kp.url("/metrics")).await;
    body.lines()
        .filter(|l| {
            l.starts_with("kube_prober_node_usage_samples{")
                && l.contains(&format!("node=\"{node}\""))
                && l.contains("resource=\"cpu\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .fold(0.0, f64::max) as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trimaran_places_pods_from_kube_prober_as_documented_and_as_with_load_watcher() {
    let started = Instant::now();
    let cp = ControlPlane::start(Options {
        nodes: 0,
        pods_per_node: 0,
        scheduler: false,
        wait_node_metrics: false,
        ..Options::default()
    });
    create_nodes(&cp);
    cp.wait_node_metrics(5, Duration::from_secs(120));
    // kube-prober as manifests/overlays/load-watcher runs it (its args and environment).
    let kc = cp.admin_kubeconfig.to_string_lossy().into_owned();
    let kp = Prober::start_with_env(
        &["--role=cluster", "--shutdown-timeout=15s"],
        &[
            ("KUBECONFIG", &kc),
            ("METRICS_PROVIDER_NAME", "KubernetesMetricsServer"),
        ],
    );
    let kp_url = format!("http://{}", kp.addr);
    let steady = [
        (0, Some(90.0)),
        (1, Some(35.0)),
        (2, None),
        (3, Some(10.0)),
        (4, Some(20.0)),
        (5, Some(60.0)),
        (6, None),
    ];
    wait_watcher(&kp_url, &steady, 90).await;
    let mut lw = LoadWatcherProc::start(&cp);
    wait_watcher(LOAD_WATCHER, &steady, 90).await;
    eprintln!(
        "both watchers serve the steady usage after {:.0} s",
        started.elapsed().as_secs_f64()
    );

    // 1. Steady usage, a node per group without metrics.
    let config = scheduler_config(&cp, &kp_url);
    let sched = Scheduler::start(&cp, &config, "steady");
    let steady_placed = place_all(&cp, &sched, &kp_url, "steady", &[]).await;
    let want = [(Plugin::Tlp, 1), (Plugin::Lvrb, 3), (Plugin::Lro, 4)];
    for (plugin, node) in want {
        for w in WATCHERS {
            assert_eq!(
                steady_placed[&(plugin, w)],
                node_name(node),
                "steady: {plugin:?} with {w:?}"
            );
        }
    }

    // 2. LoadVariationRiskBalancing's node deleted while the collectors hold its metrics.
    cp.kubectl(&["delete", "node", &node_name(3)]);
    sched.wait_log("the scheduler's delete event for kwok-node-3", |l| {
        l.lines()
            .any(|l| l.contains("\"Delete event for node\"") && l.contains("kwok-node-3"))
    });
    let deleted_placed = place_all(&cp, &sched, &kp_url, "deleted", &[3]).await;
    for (plugin, node) in [(Plugin::Tlp, 1), (Plugin::Lvrb, 1), (Plugin::Lro, 4)] {
        for w in WATCHERS {
            assert_eq!(
                deleted_placed[&(plugin, w)],
                node_name(node),
                "deleted: {plugin:?} with {w:?}"
            );
        }
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while watcher_body(&kp_url)
        .await
        .is_none_or(|w| w.data.node_metrics_map.contains_key(&node_name(3)))
    {
        assert!(
            Instant::now() < deadline,
            "kwok-node-3 still in kube-prober's /watcher 60 s after its deletion"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    drop(sched);

    // 3. Usage moves: kwok-node-0 falls from 90 % to 5 %, kwok-node-5 from 60 % to 10 %, after
    // kube-prober's window holds at least eight samples of the steady usage.
    let deadline = Instant::now() + Duration::from_secs(180);
    while samples(&kp, &node_name(0)).await < 8 {
        assert!(
            Instant::now() < deadline,
            "kube-prober's window holds fewer than 8 samples after 180 s"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    for (i, cpu) in [(0, "200m"), (5, "400m")] {
        let pod = format!("usage-{}-0", node_name(i));
        cp.kubectl(&[
            "annotate",
            "pod",
            "-n",
            NS,
            &pod,
            &format!("kwok.x-k8s.io/usage-cpu={cpu}"),
            "--overwrite",
        ]);
    }
    let moved = [
        (0, Some(5.0)),
        (1, Some(35.0)),
        (4, Some(20.0)),
        (5, Some(10.0)),
    ];
    let w = wait_watcher(&kp_url, &moved, 120).await;
    for node in [node_name(0), node_name(5)] {
        let m = &w.data.node_metrics_map[&node].metrics;
        let (avg, std) = scoring::resource_data(m, "CPU").expect("CPU");
        eprintln!(
            "moved: kube-prober serves {node} AVG {avg:.2} STD {std:.2} ({:?})",
            m
        );
        assert!(std > 5.0, "{node}: the moved usage shows in STD");
    }
    lw.restart(&cp);
    wait_watcher(LOAD_WATCHER, &moved, 90).await;
    let sched = Scheduler::start(&cp, &config, "moved");
    let moved_placed = place_all(&cp, &sched, &kp_url, "moved", &[3]).await;
    let want = [
        (Plugin::Tlp, Watcher::KubeProber, 1),
        (Plugin::Tlp, Watcher::LoadWatcher, 1),
        (Plugin::Lvrb, Watcher::KubeProber, 1),
        (Plugin::Lvrb, Watcher::LoadWatcher, 0),
        (Plugin::Lro, Watcher::KubeProber, 4),
        (Plugin::Lro, Watcher::LoadWatcher, 5),
    ];
    for (plugin, w, node) in want {
        assert_eq!(
            moved_placed[&(plugin, w)],
            node_name(node),
            "moved: {plugin:?} with {w:?}"
        );
    }

    for (phase, log) in [
        (
            "steady and deleted",
            std::fs::read_to_string(cp.dir().join("trimaran-scheduler-steady.log"))
                .unwrap_or_default(),
        ),
        ("moved", sched.log()),
    ] {
        for failure in [
            "Load watcher client failed",
            "Unable to populate metrics initially",
            "Unable to update metrics",
            "Metrics not available from watcher",
            "Cpu metric not found",
        ] {
            assert!(
                !log.contains(failure),
                "{phase}: the scheduler logged {failure:?}"
            );
        }
    }
    drop(sched);
    drop(lw);
    assert_eq!(kp.terminate(), 0);
    eprintln!(
        "Trimaran end to end in {:.0} s",
        started.elapsed().as_secs_f64()
    );
}
