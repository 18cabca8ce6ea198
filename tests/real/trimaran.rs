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
//! unit tests in tests/standins/trimaran.rs use scores checked here against the real plugins.
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
//! The second test, on a control plane of its own (the tests of this file run one at a time),
//! gives the same scheduler a burst of pods faster than metrics-server shows them and a node
//! whose usage stops, beside two kube-probers (`--watcher-estimate-bound-pods` `all` and
//! `before-window-end`, `--watcher-max-age=45s`) and load-watcher; its doc comment says what it
//! holds kube-prober to, and it prints load-watcher's outcome beside kube-prober's.
//!
//! load-watcher listens on `:2020`, every address of the machine, because upstream gives no
//! flag or variable to change it. Every use of that port by a test binary, from any checkout on
//! the machine, is serialized with a file lock (`kube-prober-load-watcher-2020.lock` in the temp
//! folder), and a port taken by anything else is an error naming it. Nothing sends traffic
//! anywhere but 127.0.0.1.

use support::control_plane;
use support::trimaran as scoring;

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
    watcher_as(url).await
}

/// `/watcher` of `url` decoded as `T`, when it answers 200 with JSON that decodes.
async fn watcher_as<T: serde::de::DeserializeOwned>(url: &str) -> Option<T> {
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
    wait_bound_in(cp, sched, NS, name)
}

/// The node the scheduler bound pod `name` of namespace `ns` to.
fn wait_bound_in(cp: &ControlPlane, sched: &Scheduler, ns: &str, name: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let pod = cp.get_json(&["pod", "-n", ns, name]);
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
    let _serial = serial().await;
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

// ---- a burst of pods and a node whose usage stops ----

/// Namespace of the burst and stale scenarios.
const BURST_NS: &str = "burst";
/// Every node of the burst and stale scenarios has 8 cores and 32 GiB.
const BIG_NODE_MILLIS: f64 = 8000.0;
/// The five nodes of each arm, baseline CPU in millicores: 20, 15, 10 and 5 % and idle (1m: a
/// node without pods has no NodeMetrics, so the idle node runs one pod using 1m).
const BASELINE: [u32; 5] = [1600, 1200, 800, 400, 1];
/// The nodes of the stale scenario: the one whose usage stops (60 %) and a steady one (10 %),
/// so probe pods always prefer the steady one and never bring the stale one's usage back.
const STALE: usize = 20;
const STEADY: usize = 21;
/// kube-prober's `--watcher-max-age` in the stale scenario.
const MAX_AGE_S: i64 = 45;
/// Trimaran's collector polls the watcher every 30 s.
const POLL_S: i64 = 30;

/// One arm of the burst: a plugin reading one watcher, on five nodes of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Arm {
    plugin: Plugin,
    watcher: Watcher,
}

const ARMS: [Arm; 4] = [
    Arm {
        plugin: Plugin::Lvrb,
        watcher: Watcher::KubeProber,
    },
    Arm {
        plugin: Plugin::Lvrb,
        watcher: Watcher::LoadWatcher,
    },
    Arm {
        plugin: Plugin::Tlp,
        watcher: Watcher::KubeProber,
    },
    Arm {
        plugin: Plugin::Tlp,
        watcher: Watcher::LoadWatcher,
    },
];

impl Arm {
    /// Its scheduler profile and its nodes' group label.
    fn name(self) -> String {
        profile(self.plugin, self.watcher)
    }

    fn nodes(self) -> std::ops::Range<usize> {
        let at = ARMS.iter().position(|a| *a == self).expect("an arm") * BASELINE.len();
        at..at + BASELINE.len()
    }

    /// CPU of one burst pod (request and use), millicores: LoadVariationRiskBalancing puts
    /// every pod of one poll on the same node, so its pods are small (2.5 % of a node) to keep
    /// one poll's batch within reach of the balance it aims at; TargetLoadPacking counts its
    /// own bindings and packs 6.25 % pods up to its target.
    fn pod_millis(self) -> u32 {
        match self.plugin {
            Plugin::Tlp => 500,
            _ => 200,
        }
    }

    /// How many pods, and how far apart: both kinds of arm last 90 s, three polls.
    fn pods(self) -> usize {
        match self.plugin {
            Plugin::Tlp => 20,
            _ => 30,
        }
    }

    fn spacing(self) -> Duration {
        match self.plugin {
            Plugin::Tlp => Duration::from_millis(4500),
            _ => Duration::from_secs(3),
        }
    }
}

/// Four profiles: LoadVariationRiskBalancing reading the kube-prober that folds every bound pod
/// (`all`), TargetLoadPacking reading the one that folds only pods bound over 60 s before
/// `window.end` (`before-window-end`), each also reading load-watcher.
fn burst_scheduler_config(cp: &ControlPlane, kp_all: &str, kp_before: &str) -> Value {
    let profiles: Vec<Value> = ARMS
        .iter()
        .map(|arm| {
            let address = match (arm.plugin, arm.watcher) {
                (_, Watcher::LoadWatcher) => LOAD_WATCHER,
                (Plugin::Tlp, Watcher::KubeProber) => kp_before,
                (_, Watcher::KubeProber) => kp_all,
            };
            json!({
                "schedulerName": arm.name(),
                "plugins": {"score": {"disabled": [{"name": "*"}],
                    "enabled": [{"name": arm.plugin.name()}]}},
                "pluginConfig": [{"name": arm.plugin.name(), "args": arm.plugin.args(address)}],
            })
        })
        .collect();
    json!({
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "leaderElection": {"leaderElect": false},
        "clientConnection": {"kubeconfig": cp.admin_kubeconfig},
        "profiles": profiles,
    })
}

/// A pod bound to `node` using `millis` of CPU and 256 MiB, asking 1m (limit 1m): what
/// TargetLoadPacking and kube-prober's estimator count for it stays 1m.
fn baseline_pod(node: usize, millis: u32) -> Value {
    let mut pod = control_plane::usage_pod(
        BURST_NS,
        &node_name(node),
        0,
        &format!("{millis}m"),
        "256Mi",
    );
    pod["spec"]["containers"][0]["resources"] = json!({
        "requests": {"cpu": "1m", "memory": "256Mi"}, "limits": {"cpu": "1m"}});
    pod
}

/// The arms' nodes and the stale scenario's two, labelled by group, each with its baseline pod.
fn create_burst_nodes(cp: &ControlPlane) {
    cp.kubectl(&["create", "namespace", BURST_NS]);
    cp.create_nodes(0..STEADY + 1, "8", "32Gi");
    cp.wait_nodes_ready(STEADY + 1);
    let mut docs = Vec::new();
    for arm in ARMS {
        for (i, millis) in arm.nodes().zip(BASELINE) {
            cp.kubectl(&[
                "label",
                "node",
                &node_name(i),
                &format!("{GROUP}={}", arm.name()),
            ]);
            docs.push(baseline_pod(i, millis).to_string());
        }
    }
    for (i, millis) in [(STALE, 4800), (STEADY, 800)] {
        cp.kubectl(&["label", "node", &node_name(i), &format!("{GROUP}=stale")]);
        docs.push(baseline_pod(i, millis).to_string());
    }
    cp.kubectl_stdin(&["create", "-f", "-"], Some(&docs.join("\n")));
    cp.wait_pods_running(BURST_NS, docs.len());
}

/// `/watcher` of `url` as JSON (for the keys past load-watcher's: `freshness`, `boundPods`).
async fn watcher_json(url: &str) -> Option<Value> {
    watcher_as(url).await
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs_f64()
}

/// A pod asking and using `millis` of CPU and 64 MiB (kwok's usage annotations), for `arm`'s
/// profile on `arm`'s nodes, or (`group`) another group's.
fn burst_pod(name: &str, arm: Arm, group: &str, millis: u32) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": BURST_NS, "labels": {"app": "burst"},
            "annotations": {"kwok.x-k8s.io/usage-cpu": format!("{millis}m"),
                "kwok.x-k8s.io/usage-memory": "64Mi"}},
        "spec": {
            "schedulerName": arm.name(),
            "nodeSelector": {GROUP: group},
            "containers": [{"name": "c", "image": "usage",
                "resources": {"requests": {"cpu": format!("{millis}m"), "memory": "64Mi"}}}],
        },
    })
}

/// One read of kube-prober's `/watcher` in the stale scenario.
#[derive(Debug)]
struct StaleRead {
    /// When it was read, unix seconds.
    at: f64,
    /// The stale node is served, with its `freshness.newest`.
    present: bool,
    newest: Option<i64>,
    end: i64,
    /// The oldest `freshness.newest` of the hosts served.
    oldest_newest: Option<i64>,
}

fn stale_read(v: &Value, node: &str, at: f64) -> StaleRead {
    let hosts = v["data"]["NodeMetricsMap"].as_object();
    let newest = |h: &Value| h["freshness"]["newest"].as_i64();
    let stale = hosts.and_then(|h| h.get(node));
    StaleRead {
        at,
        present: stale.is_some(),
        newest: stale.and_then(newest),
        end: v["window"]["end"].as_i64().expect("window.end"),
        oldest_newest: hosts.and_then(|h| h.values().filter_map(newest).min()),
    }
}

/// The stale node's usage pod deleted, so metrics-server omits the node from then on: reads
/// kube-prober `kp`'s `/watcher` every second until the node leaves it, noting when it leaves
/// load-watcher's and kube-prober `expiring`'s. kube-prober drops a host its backend stops
/// reporting after two successful fetches without it (`--expire-after-fetches`, default 2,
/// as `expiring` runs), which comes before any `--watcher-max-age`; `kp` runs with
/// `--expire-after-fetches=0`, so it keeps the node's last sample as it would from a backend
/// that goes on answering for a host with an old sample, and only `--watcher-max-age` removes
/// it.
async fn read_until_stale_node_leaves(
    cp: &ControlPlane,
    kp: &str,
    expiring: &str,
) -> (f64, Vec<StaleRead>) {
    let stale = node_name(STALE);
    let pod = format!("usage-{stale}-0");
    cp.kubectl(&["delete", "pod", "-n", BURST_NS, &pod, "--wait=false"]);
    let deleted = unix_now();
    let mut reads: Vec<StaleRead> = Vec::new();
    let (mut lw_left, mut expired) = (None, None);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(v) = watcher_json(kp).await {
            reads.push(stale_read(&v, &stale, unix_now()));
        }
        for (url, left) in [(LOAD_WATCHER, &mut lw_left), (expiring, &mut expired)] {
            if left.is_none()
                && watcher_body(url)
                    .await
                    .is_some_and(|w| !w.data.node_metrics_map.contains_key(&stale))
            {
                *left = Some(unix_now() - deleted);
            }
        }
        if reads.last().is_some_and(|r| !r.present) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{stale} still in kube-prober's /watcher 120 s after its usage stopped: {:?}",
            reads.last()
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let when = |left: Option<f64>| match left {
        Some(s) => format!("{s:.0} s after"),
        None => "not yet".into(),
    };
    eprintln!(
        "stale: {stale} left kube-prober's /watcher {:.0} s after its usage pod was deleted \
         (--expire-after-fetches=0, --watcher-max-age={MAX_AGE_S}s); the default expiry's {}; \
         load-watcher's {}",
        reads.last().map_or(0.0, |r| r.at - deleted),
        when(expired),
        when(lw_left)
    );
    (deleted, reads)
}

/// What the contract says of the reads: `window.end` is the oldest newest sample of the hosts
/// served and never moves back; the stale node's newest sample freezes, it is served while that
/// sample is younger than `--watcher-max-age` and gone once it is older (a 1 s tick and whole
/// seconds either side), and once it is gone `window.end` is past its last sample.
fn check_stale_reads(reads: &[StaleRead]) {
    let stale = node_name(STALE);
    let frozen = reads
        .iter()
        .filter_map(|r| r.newest)
        .max()
        .expect("the stale node was served with freshness.newest after its usage stopped");
    for (i, r) in reads.iter().enumerate() {
        assert_eq!(
            Some(r.end),
            r.oldest_newest,
            "read {i}: window.end is not the oldest freshness.newest of the hosts: {r:?}"
        );
        if i > 0 {
            assert!(
                r.end >= reads[i - 1].end,
                "window.end moved back: {:?} then {r:?}",
                reads[i - 1]
            );
        }
        let age = r.at - frozen as f64;
        if r.present {
            assert!(
                age <= (MAX_AGE_S + 3) as f64,
                "{stale} still served {age:.1} s after its newest sample: {r:?}"
            );
        } else {
            assert!(
                age >= (MAX_AGE_S - 1) as f64,
                "{stale} dropped {age:.1} s after its newest sample, before --watcher-max-age: {r:?}"
            );
            assert!(
                r.end > frozen,
                "window.end {} not past the dropped node's last sample {frozen}",
                r.end
            );
        }
    }
    let last = reads.last().expect("reads");
    eprintln!(
        "stale: kube-prober served {stale} until {:.0} s after its newest sample ({frozen}); \
         window.end {} -> {} over {} reads",
        last.at - frozen as f64,
        reads[0].end,
        last.end,
        reads.len()
    );
}

/// Probe pods for `watcher`'s LoadVariationRiskBalancing profile on the stale group, one at a
/// time, until a cycle logs `Unable to find metrics for node` for the stale node (at most
/// `secs`: the collector polls every 30 s). Returns the last cycle's lines naming the stale
/// node and whether that line was among them; every probe must land on the steady node.
fn probe_stale(
    cp: &ControlPlane,
    sched: &Scheduler,
    watcher: Watcher,
    secs: u64,
) -> (bool, String) {
    let arm = Arm {
        plugin: Plugin::Lvrb,
        watcher,
    };
    let stale = format!("nodeName=\"{}\"", node_name(STALE));
    let deadline = Instant::now() + Duration::from_secs(secs);
    for n in 0.. {
        let name = format!("probe-{}-{n}", watcher.short());
        let from = sched.log().len();
        let mut pod = burst_pod(&name, arm, "stale", 1);
        pod["metadata"]["labels"]["app"] = json!("probe");
        cp.kubectl_stdin(&["create", "-f", "-"], Some(&pod.to_string()));
        let node = wait_bound_in(cp, sched, BURST_NS, &name);
        assert_eq!(node, node_name(STEADY), "{name} left the steady node");
        let cycle = sched.log()[from..].to_string();
        let lines: Vec<&str> = cycle.lines().filter(|l| l.contains(&stale)).collect();
        let found = lines
            .iter()
            .any(|l| l.contains("\"Unable to find metrics for node\""));
        if found || Instant::now() >= deadline {
            return (found, lines.join("\n"));
        }
        std::thread::sleep(Duration::from_secs(3));
    }
    unreachable!("the probe loop returns")
}

/// The stale scenario, on kube-prober `kp` (`--watcher-max-age=45s`, no expiry by fetches),
/// kube-prober `expiring` (expiry after two fetches) and load-watcher.
async fn stale_scenario(cp: &ControlPlane, sched: &Scheduler, kp: &str, expiring: &str) {
    let (_, reads) = read_until_stale_node_leaves(cp, kp, expiring).await;
    check_stale_reads(&reads);
    let (found, lines) = probe_stale(cp, sched, Watcher::KubeProber, 45);
    assert!(
        found,
        "stale: LoadVariationRiskBalancing reading kube-prober never logged `Unable to find \
         metrics for node` for {} within 45 s of its leaving /watcher; its lines:\n{lines}",
        node_name(STALE)
    );
    eprintln!("stale: the scheduler reading kube-prober:\n{lines}");
    let lw_gone = watcher_body(LOAD_WATCHER)
        .await
        .is_some_and(|w| !w.data.node_metrics_map.contains_key(&node_name(STALE)));
    let (lw_found, lw_lines) = probe_stale(cp, sched, Watcher::LoadWatcher, 0);
    eprintln!(
        "stale: load-watcher {} the node; the scheduler reading it (one probe, {}):\n{lw_lines}",
        if lw_gone {
            "no longer serves"
        } else {
            "still serves"
        },
        if lw_found {
            "no metrics for it"
        } else {
            "still scored from its last metrics"
        }
    );
}

/// A burst pod once bound: its arm, node, and when it was bound (its `PodScheduled` time).
#[derive(Debug, Clone)]
struct BurstBound {
    arm: Arm,
    node: String,
    at: i64,
}

/// What one kube-prober's `/watcher` said of an arm's nodes' bound pods during the burst: the
/// most pods one node showed at once, the reads showing a node's pods folded into its values,
/// and each folded read's CPU against what the estimator gives for that many burst pods.
#[derive(Debug, Default)]
struct FoldSeen {
    most_pods: u64,
    folded_reads: u64,
    /// The largest |boundPods.cpu - pods x 85 % x the pod's CPU| seen, in percent of the node.
    worst_cpu_error: f64,
}

/// Notes the `boundPods` of `arm`'s nodes in kube-prober's `/watcher` body `v`.
fn note_folds(seen: &mut FoldSeen, v: &Value, arm: Arm) {
    let per_pod = 0.85 * f64::from(arm.pod_millis()) / BIG_NODE_MILLIS * 100.0;
    for i in arm.nodes() {
        let b = &v["data"]["boundPods"][node_name(i)];
        let pods = b["pods"].as_u64().unwrap_or(0);
        seen.most_pods = seen.most_pods.max(pods);
        if pods > 0 && b["folded"] == true {
            seen.folded_reads += 1;
            let cpu = b["cpu"].as_f64().unwrap_or(f64::NAN);
            let error = (cpu - pods as f64 * per_pod).abs();
            seen.worst_cpu_error =
                seen.worst_cpu_error
                    .max(if error.is_nan() { f64::INFINITY } else { error });
        }
    }
}

/// Creates every arm's pods on its schedule (all arms at once), reading both kube-probers'
/// `/watcher` every 2 s meanwhile; returns what they showed (the `all` one's LVRB arm, the
/// `before-window-end` one's TLP arm).
async fn create_burst(cp: &ControlPlane, kp_all: &str, kp_before: &str) -> [FoldSeen; 2] {
    let start = Instant::now();
    let mut next = [0usize; ARMS.len()];
    let mut seen = [FoldSeen::default(), FoldSeen::default()];
    let mut last_read: Option<Instant> = None;
    while ARMS.iter().zip(next).any(|(a, n)| n < a.pods()) {
        let mut docs = Vec::new();
        for (arm, n) in ARMS.iter().zip(next.iter_mut()) {
            if *n < arm.pods() && start + arm.spacing() * *n as u32 <= Instant::now() {
                let name = format!("{}-{n}", arm.name());
                docs.push(burst_pod(&name, *arm, &arm.name(), arm.pod_millis()).to_string());
                *n += 1;
            }
        }
        if !docs.is_empty() {
            cp.kubectl_stdin(&["create", "-f", "-"], Some(&docs.join("\n")));
        }
        if last_read.is_none_or(|t| t.elapsed() >= Duration::from_secs(2)) {
            last_read = Some(Instant::now());
            if let Some(v) = watcher_json(kp_all).await {
                note_folds(&mut seen[0], &v, ARMS[0]);
            }
            if let Some(v) = watcher_json(kp_before).await {
                note_folds(&mut seen[1], &v, ARMS[2]);
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!(
        "burst: {} pods created in {:.0} s",
        next.iter().sum::<usize>(),
        start.elapsed().as_secs_f64()
    );
    seen
}

/// Every burst pod once all are bound (at most 90 s).
fn wait_burst_bound(cp: &ControlPlane) -> Vec<BurstBound> {
    let total: usize = ARMS.iter().map(|a| a.pods()).sum();
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let pods = items(&cp.get_json(&["pods", "-n", BURST_NS, "-l", "app=burst"]));
        let bound: Vec<BurstBound> = pods
            .iter()
            .filter_map(|p| {
                let name = p["metadata"]["name"].as_str()?;
                let arm = *ARMS
                    .iter()
                    .find(|a| name.starts_with(&format!("{}-", a.name())))?;
                let node = p["spec"]["nodeName"].as_str()?.to_string();
                let at = p["status"]["conditions"]
                    .as_array()?
                    .iter()
                    .find(|c| c["type"] == "PodScheduled")?["lastTransitionTime"]
                    .as_str()?;
                let at = humantime::parse_rfc3339(at).ok()?;
                let at = at.duration_since(std::time::UNIX_EPOCH).ok()?.as_secs() as i64;
                Some(BurstBound { arm, node, at })
            })
            .collect();
        if bound.len() == total {
            return bound;
        }
        assert!(
            Instant::now() < deadline,
            "{} of {total} burst pods bound after 90 s",
            bound.len()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Where an arm's burst ended.
#[derive(Debug)]
struct ArmOutcome {
    /// Each node's final CPU use, percent of the node: its baseline and its burst pods.
    util: Vec<f64>,
    /// The most pods of the arm bound within one poll (binding times 30 s apart at most).
    per_poll: usize,
    /// What the arm is held to and the measure held to it: TargetLoadPacking's busiest node
    /// against its target plus one pod; LoadVariationRiskBalancing's spread (busiest minus
    /// idlest node) against the larger of the initial spread and one poll's pods, plus one pod.
    limit: f64,
    measure: f64,
}

/// The outcome of `arm` from the bindings. LoadVariationRiskBalancing scores a node by its risk
/// (mu + sigma) / 2, mu its use with the pod's request: it sends each pod to the least used
/// (and least varying) node, so what it aims at is equal use, and its analogue of a target is
/// the spread. It adds nothing for the pods it has just bound, so all pods of one poll land on
/// one node whatever the feed; with a feed that is current at each poll, each poll's batch
/// lands on the node least used at that poll, which then ends at most one batch above the
/// least used one, while the others stay: the spread never grows past the larger of the initial
/// spread and one batch. One pod of slack covers what a current feed still misses (the pods of
/// the last second before a poll; the estimator's 85 % of a pod's request).
fn arm_outcome(arm: Arm, bound: &[BurstBound]) -> ArmOutcome {
    let mine: Vec<&BurstBound> = bound.iter().filter(|b| b.arm == arm).collect();
    let pct = |millis: f64| millis / BIG_NODE_MILLIS * 100.0;
    let util: Vec<f64> = arm
        .nodes()
        .zip(BASELINE)
        .map(|(i, base)| {
            let n = mine.iter().filter(|b| b.node == node_name(i)).count();
            pct(f64::from(base) + n as f64 * f64::from(arm.pod_millis()))
        })
        .collect();
    let per_poll = mine
        .iter()
        .map(|a| {
            mine.iter()
                .filter(|b| b.at >= a.at && b.at - a.at <= POLL_S)
                .count()
        })
        .max()
        .unwrap_or(0);
    let pod = pct(f64::from(arm.pod_millis()));
    let max = util.iter().copied().fold(f64::MIN, f64::max);
    let min = util.iter().copied().fold(f64::MAX, f64::min);
    let (limit, measure) = match arm.plugin {
        Plugin::Tlp => (Args::default().target_utilization + pod, max),
        _ => {
            let initial = pct(f64::from(BASELINE[0] - BASELINE[4]));
            (initial.max(per_poll as f64 * pod) + pod, max - min)
        }
    };
    ArmOutcome {
        util,
        per_poll,
        limit,
        measure,
    }
}

/// Prints every arm's outcome and asserts kube-prober's.
fn check_burst(bound: &[BurstBound], seen: &[FoldSeen; 2]) {
    for arm in ARMS {
        let o = arm_outcome(arm, bound);
        let what = match arm.plugin {
            Plugin::Tlp => "busiest node",
            _ => "spread",
        };
        let order: Vec<String> = {
            let mut mine: Vec<&BurstBound> = bound.iter().filter(|b| b.arm == arm).collect();
            mine.sort_by_key(|b| b.at);
            mine.iter()
                .map(|b| b.node.trim_start_matches("kwok-node-").to_string())
                .collect()
        };
        eprintln!(
            "burst: {} reading {}: nodes end at {:?} %; {what} {:.2} % against {:.2} % ({} \
             pods in one poll); {}; placements in order: {}",
            arm.plugin.name(),
            arm.watcher.short(),
            o.util
                .iter()
                .map(|u| (u * 100.0).round() / 100.0)
                .collect::<Vec<_>>(),
            o.measure,
            o.limit,
            o.per_poll,
            if o.measure <= o.limit + 1e-9 {
                "within"
            } else {
                "OVER"
            },
            order.join(" ")
        );
        if arm.watcher == Watcher::KubeProber {
            assert!(
                o.measure <= o.limit + 1e-9,
                "burst: {} reading kube-prober: {what} {:.2} % over {:.2} %: {o:?}",
                arm.plugin.name(),
                o.measure,
                o.limit
            );
        }
    }
    eprintln!(
        "burst: kube-prober's boundPods, LVRB arm (all): {:?}; TLP arm (before-window-end): {:?}",
        seen[0], seen[1]
    );
    assert!(
        seen[0].folded_reads > 0,
        "burst: kube-prober (all) never showed a node's bound pods folded: {:?}",
        seen[0]
    );
    assert!(
        seen[0].worst_cpu_error < 0.05,
        "burst: kube-prober's boundPods.cpu is not 85 % of the bound pods' requests: {:?}",
        seen[0]
    );
}

/// The tests of this file one at a time: each runs its own control plane, a scheduler and
/// load-watcher on :2020.
async fn serial() -> tokio::sync::MutexGuard<'static, ()> {
    static LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    LOCK.lock().await
}

/// A kube-prober as the load-watcher overlay runs it, with a 1 s tick, `--watcher-max-age=45s`,
/// `--watcher-estimate-bound-pods=<estimate>` and `--expire-after-fetches=<expire>`.
fn burst_prober(cp: &ControlPlane, estimate: &str, expire: u32) -> Prober {
    let kc = cp.admin_kubeconfig.to_string_lossy().into_owned();
    let max_age = format!("--watcher-max-age={MAX_AGE_S}s");
    let estimate = format!("--watcher-estimate-bound-pods={estimate}");
    let expire = format!("--expire-after-fetches={expire}");
    Prober::start_with_env(
        &[
            "--role=cluster",
            "--shutdown-timeout=15s",
            "--tick-interval=1s",
            &max_age,
            &estimate,
            &expire,
        ],
        &[
            ("KUBECONFIG", &kc),
            ("METRICS_PROVIDER_NAME", "KubernetesMetricsServer"),
        ],
    )
}

/// Every node's baseline CPU percentage, as `wait_watcher` takes it.
fn burst_baseline() -> Vec<(usize, Option<f64>)> {
    let mut want: Vec<(usize, Option<f64>)> = ARMS
        .iter()
        .flat_map(|a| a.nodes().zip(BASELINE))
        .map(|(i, m)| (i, Some(f64::from(m) / BIG_NODE_MILLIS * 100.0)))
        .collect();
    want.extend([(STALE, Some(60.0)), (STEADY, Some(10.0))]);
    want
}

/// A burst of pods arriving faster than their use reaches metrics-server, and a node whose
/// usage stops, on one control plane with one Trimaran scheduler, two kube-probers and
/// load-watcher, every arm on nodes of its own.
///
/// Stale: the usage pod of a node at 60 % is deleted, so metrics-server omits the node.
/// kube-prober (`--watcher-max-age=45s`, and `--expire-after-fetches=0` so that the age alone
/// decides) serves it, its `freshness.newest` frozen, until that sample is 45 s old, then drops
/// it; on every read `window.end` is the oldest `freshness.newest` served and never moves back,
/// and once the node is gone it is past the node's last sample. The scheduler
/// (LoadVariationRiskBalancing reading kube-prober) then logs `Unable to find metrics for node`
/// for it. When the default expiry (two fetches without the node) and load-watcher drop it is
/// printed, with what the scheduler reading load-watcher logs.
///
/// The whole test takes about 200 s on 2 cores.
///
/// Burst: five 8-core nodes per arm at 20, 15, 10, 5 and 0 % CPU. LoadVariationRiskBalancing
/// gets 30 pods of 200m, one every 3 s; TargetLoadPacking 20 pods of 500m, one every 4.5 s; each
/// pod uses what it asks (kwok's annotations), which metrics-server (15 s resolution) shows a
/// scrape or two later. Trimaran's collector polls `/watcher` every 30 s, so nothing a feed
/// says changes the decisions within one poll; each burst lasts 90 s, three polls, so the feed
/// decides the later ones. kube-prober folds the bound pods' estimates (`all` for
/// LoadVariationRiskBalancing, `before-window-end` for TargetLoadPacking) and is held to: no
/// node ends above TargetLoadPacking's target (40 %) by more than one pod, and
/// LoadVariationRiskBalancing's spread stays within one poll's pods of its balance
/// ([`arm_outcome`]). load-watcher's outcome is printed beside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trimaran_with_kube_prober_spreads_a_burst_and_drops_a_stale_node() {
    let _serial = serial().await;
    let started = Instant::now();
    let cp = ControlPlane::start(Options {
        nodes: 0,
        pods_per_node: 0,
        scheduler: false,
        wait_node_metrics: false,
        ..Options::default()
    });
    create_burst_nodes(&cp);
    cp.wait_node_metrics(STEADY + 1, Duration::from_secs(120));
    // The stale scenario reads the first: without expiry by fetches, only --watcher-max-age
    // removes the stale node (see `read_until_stale_node_leaves`).
    let kp_all = burst_prober(&cp, "all", 0);
    let kp_before = burst_prober(&cp, "before-window-end", 2);
    let (all_url, before_url) = (
        format!("http://{}", kp_all.addr),
        format!("http://{}", kp_before.addr),
    );
    let lw = LoadWatcherProc::start(&cp);
    let want = burst_baseline();
    for url in [&all_url, &before_url, LOAD_WATCHER] {
        wait_watcher(url, &want, 90).await;
    }
    let config = burst_scheduler_config(&cp, &all_url, &before_url);
    let sched = Scheduler::start(&cp, &config, "burst");
    eprintln!(
        "burst and stale: ready after {:.0} s",
        started.elapsed().as_secs_f64()
    );

    stale_scenario(&cp, &sched, &all_url, &before_url).await;
    eprintln!("stale: done after {:.0} s", started.elapsed().as_secs_f64());

    let seen = create_burst(&cp, &all_url, &before_url).await;
    let bound = wait_burst_bound(&cp);
    check_burst(&bound, &seen);
    let log = sched.log();
    for failure in [
        "Load watcher client failed",
        "Unable to populate metrics initially",
        "Cpu metric not found",
    ] {
        assert!(!log.contains(failure), "the scheduler logged {failure:?}");
    }
    drop(sched);
    drop(lw);
    assert_eq!(kp_all.terminate(), 0);
    assert_eq!(kp_before.terminate(), 0);
    eprintln!(
        "burst and stale in {:.0} s",
        started.elapsed().as_secs_f64()
    );
}
