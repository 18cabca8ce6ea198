//! OTLP into the real OpenTelemetry Collector (v0.165.0, `tests/upstream/otelcol`), over gRPC and
//! HTTP/protobuf at once, from the cluster, node and host roles of the binary. For each role three
//! instances push to one Collector: one per transport with the default `--otlp-semconv`
//! (`stable`), and one over gRPC with `--otlp-semconv legacy`. Asserted:
//!
//! - the Collector's OTLP receiver accepted points on both transports and refused and failed
//!   none (`otelcol_receiver_*_metric_points`, `level: detailed`), and neither instance
//!   counted a failed push; every accepted point reached the exporter, and the Collector logged
//!   no warning or error;
//! - what the Collector decoded holds exactly the names, units and kinds of docs/metrics.md's
//!   "OTLP names" table: every metric sent is a row of it, and one push carries the OTLP
//!   names of exactly the families the instance serves on /metrics before and after it;
//! - the `legacy` instance sends the names of docs/metrics.md's "OTLP names under
//!   `--otlp-semconv legacy`" table in place of the stable ones it maps (and none of those), its
//!   condition metrics valued as the Collector's (1, 0 or -1, no condition attributes);
//! - no name carries a Prometheus suffix;
//! - the resource attributes are those the docs promise for the role, with their values.

use support::apiserver;
use support::kubelet;
use support::otelcol;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use otelcol::{Collector, Decoded};
use serde_json::Value;
use support::task_fixture::{self as fixture, Layout};
use support::{Prober, wait_ready};

const NODE: &str = "worker-7";
const CLUSTER: &str = "c1";
const TRANSPORTS: [(&str, &str); 2] = [("grpc", "grpc"), ("http", "http/protobuf")];
/// Each role's instances: (label, transport, protocol, `--otlp-semconv legacy`?).
const INSTANCES: [(&str, &str, &str, bool); 3] = [
    ("grpc", "grpc", "grpc", false),
    ("http", "http", "http/protobuf", false),
    ("grpc-legacy", "grpc", "grpc", true),
];

fn crypto() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
}

/// What docs/metrics.md's "## OTLP names" section promises.
struct Promised {
    /// OTLP name → (unit, kind); `-` in the table is the empty unit.
    rows: BTreeMap<String, (String, String)>,
    /// Prometheus family (as its samples are named) → its OTLP names.
    of_family: BTreeMap<String, BTreeSet<String>>,
    /// Every resource attribute key the section names.
    resource_keys: BTreeSet<String>,
    /// The rows of "OTLP names under `--otlp-semconv legacy`": (family, stable name, legacy
    /// name, unit, kind).
    legacy: Vec<[String; 5]>,
}

impl Promised {
    /// What the docs promise under `--otlp-semconv legacy`: each mapped stable name replaced by
    /// its legacy names.
    fn as_legacy(&self) -> Promised {
        let mut p = Promised {
            rows: self.rows.clone(),
            of_family: self.of_family.clone(),
            resource_keys: self.resource_keys.clone(),
            legacy: self.legacy.clone(),
        };
        for [family, stable, ..] in &self.legacy {
            p.rows.remove(stable);
            if let Some(names) = p.of_family.get_mut(family) {
                names.remove(stable);
            }
        }
        for [family, _, legacy, unit, kind] in &self.legacy {
            p.rows.insert(legacy.clone(), (unit.clone(), kind.clone()));
            p.of_family
                .entry(family.clone())
                .or_default()
                .insert(legacy.clone());
        }
        p
    }

    /// `names` under `--otlp-semconv legacy`: a mapped stable name becomes its legacy names.
    fn legacy_names(&self, names: &[&str]) -> Vec<String> {
        let mut out = Vec::new();
        for n in names {
            let mapped: Vec<String> = self
                .legacy
                .iter()
                .filter(|r| r[1] == *n)
                .map(|r| r[2].clone())
                .collect();
            if mapped.is_empty() {
                out.push(n.to_string());
            }
            out.extend(mapped);
        }
        out
    }
}

/// The rows of docs/metrics.md's "## OTLP names under `--otlp-semconv legacy`" table.
fn legacy_rows(doc: &str) -> Vec<[String; 5]> {
    let section = doc
        .split("\n## OTLP names under `--otlp-semconv legacy`")
        .nth(1)
        .expect("docs/metrics.md has a '## OTLP names under `--otlp-semconv legacy`' section");
    let section = section.split("\n## ").next().unwrap_or(section);
    let clean = |s: &str| s.trim().trim_matches('`').to_string();
    let rows: Vec<[String; 5]> = section
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| {
            let cells: Vec<String> = l.trim_matches('|').split('|').map(clean).collect();
            assert_eq!(cells.len(), 6, "{l}");
            let unit = if cells[3] == "-" { "" } else { &cells[3] };
            [
                cells[0].clone(),
                cells[1].clone(),
                cells[2].clone(),
                unit.to_string(),
                cells[4].clone(),
            ]
        })
        .collect();
    assert!(rows.len() >= 5, "{rows:?}");
    rows
}

fn promised() -> Promised {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/metrics.md"))
        .expect("docs/metrics.md");
    let section = doc
        .split("\n## OTLP names")
        .nth(1)
        .expect("docs/metrics.md has a '## OTLP names' section");
    let section = section.split("\n## ").next().unwrap_or(section);
    let clean = |s: &str| s.trim().trim_matches('`').to_string();
    let mut p = Promised {
        rows: BTreeMap::new(),
        of_family: BTreeMap::new(),
        resource_keys: BTreeSet::new(),
        legacy: legacy_rows(&doc),
    };
    for l in section.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<String> = l.trim_matches('|').split('|').map(clean).collect();
        assert_eq!(cells.len(), 4, "{l}");
        let unit = if cells[2] == "-" { "" } else { &cells[2] };
        p.rows
            .insert(cells[1].clone(), (unit.to_string(), cells[3].clone()));
        p.of_family
            .entry(cells[0].clone())
            .or_default()
            .insert(cells[1].clone());
    }
    let resource = section
        .split("\nResource attributes:")
        .nth(1)
        .expect("a 'Resource attributes:' paragraph")
        .split("\n\n")
        .next()
        .unwrap_or_default();
    for code in resource.split('`').skip(1).step_by(2) {
        let key = code.split('=').next().unwrap_or_default();
        let is_key = key.contains('.')
            && key
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._".contains(c));
        if is_key {
            p.resource_keys.insert(key.to_string());
        }
    }
    assert!(p.rows.len() > 50 && p.resource_keys.contains("service.name"));
    p
}

/// The families with samples in a Prometheus text body, histograms by their family name.
fn families(body: &str) -> BTreeSet<String> {
    let mut kinds = BTreeMap::new();
    for l in body.lines() {
        if let Some(rest) = l.strip_prefix("# TYPE ") {
            let mut it = rest.split(' ');
            if let (Some(n), Some(k)) = (it.next(), it.next()) {
                kinds.insert(n.to_string(), k.to_string());
            }
        }
    }
    let mut out = BTreeSet::new();
    for l in body
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let name = l.split(['{', ' ']).next().unwrap_or_default();
        if kinds.contains_key(name) {
            out.insert(name.to_string());
            continue;
        }
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s))
            .filter(|f| kinds.get(*f).is_some_and(|k| k == "histogram"));
        out.insert(family.unwrap_or(name).to_string());
    }
    out
}

/// One instance's pushes as the Collector decoded them: push time → (resource, metrics).
#[derive(Default, Debug)]
struct Pushes {
    by_time: BTreeMap<u64, (BTreeMap<String, String>, BTreeSet<Decoded>)>,
}

fn point_time(metric: &Value) -> u64 {
    let data = ["gauge", "sum", "histogram"]
        .iter()
        .find_map(|k| metric.get(*k))
        .unwrap_or_else(|| panic!("no data in {metric}"));
    let t = &data["dataPoints"][0]["timeUnixNano"];
    t.as_str()
        .and_then(|s| s.parse().ok())
        .or_else(|| t.as_u64())
        .unwrap_or_else(|| panic!("no point time in {metric}"))
}

/// The pushes of the instance with pid `pid` (its `service.instance.id` is `HOST_PID`).
fn pushes_of(col: &Collector, pid: u32) -> Pushes {
    let suffix = format!("_{pid}");
    let mut out = Pushes::default();
    for (res, m) in otelcol::metrics(&col.batches()) {
        if !res
            .get("service.instance.id")
            .is_some_and(|id| id.ends_with(&suffix))
        {
            continue;
        }
        let slot = out.by_time.entry(point_time(m)).or_default();
        if slot.0.is_empty() {
            slot.0 = res.clone();
        }
        assert_eq!(slot.0, res, "one push, one resource");
        slot.1.insert(otelcol::decoded(m));
    }
    out
}

/// A role's set-up: the instances' arguments and environment beside the sink's.
struct Role {
    name: &'static str,
    args: Vec<String>,
    env: Vec<(String, String)>,
    /// Resource attributes the role sends (value `None`: any non-empty value).
    resource: Vec<(&'static str, Option<String>)>,
    /// OTLP names that must be sent (beyond what /metrics shows).
    must_send: &'static [&'static str],
    /// Point attribute keys that some point must carry.
    point_keys: &'static [&'static str],
}

fn common_resource() -> Vec<(&'static str, Option<String>)> {
    vec![
        ("service.name", Some("kube-prober".into())),
        ("service.version", Some(env!("CARGO_PKG_VERSION").into())),
        ("service.instance.id", None),
        ("telemetry.sdk.name", Some("kube-prober".into())),
        ("telemetry.sdk.language", Some("rust".into())),
        (
            "telemetry.sdk.version",
            Some(env!("CARGO_PKG_VERSION").into()),
        ),
    ]
}

fn start_instance(
    role: &Role,
    col: &Collector,
    (label, transport, protocol, legacy): (&str, &str, &str, bool),
) -> Prober {
    let endpoint = match transport {
        "grpc" => col.grpc_endpoint.clone(),
        _ => col.http_endpoint.clone(),
    };
    let mut args: Vec<String> = role.args.clone();
    args.extend(
        [
            "--sink",
            "otlp",
            "--otlp-endpoint",
            &endpoint,
            "--sink-interval",
            "1s",
        ]
        .map(String::from),
    );
    if legacy {
        args.extend(["--otlp-semconv".into(), "legacy".into()]);
    }
    if role.name == "cluster" {
        // Each instance leads its own Lease: each pushes the cluster-level series.
        args.extend(["--leader-elect-lease-name".into(), format!("lease-{label}")]);
    }
    let mut env = role.env.clone();
    env.push(("OTEL_EXPORTER_OTLP_PROTOCOL".into(), protocol.into()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    Prober::start_with_env(&args, &env)
}

/// The names `families` are sent under. The families the HTTP server renders from its own
/// counters (`families::SERVER`: the listener's, auth and TLS) are not in snapshots, so no push
/// carries them.
fn expected_names(p: &Promised, families: &BTreeSet<String>) -> BTreeSet<String> {
    let server: BTreeSet<String> = kube_prober::outputs::families::SERVER
        .iter()
        .map(|f| f.sample_name())
        .collect();
    families
        .iter()
        .filter(|f| !server.contains(*f))
        .flat_map(|f| {
            p.of_family
                .get(f)
                .unwrap_or_else(|| panic!("{f} is served but has no row in the OTLP table"))
                .iter()
                .cloned()
        })
        .collect()
}

/// Waits (bounded) until the instance's pushes hold one that started after `after` and a later
/// one (so the first is complete); returns the first.
async fn complete_push_after(
    col: &Collector,
    pid: u32,
    after: u64,
) -> (BTreeMap<String, String>, BTreeSet<Decoded>) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut later = pushes_of(col, pid)
            .by_time
            .into_iter()
            .filter(|(t, _)| *t > after);
        if let (Some((_, first)), Some(_)) = (later.next(), later.next()) {
            return first;
        }
        assert!(
            Instant::now() < deadline,
            "instance {pid}: no two pushes after {after} within 30 s; Collector log:\n{}",
            col.stderr()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn now_nanos() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// Checks one instance: its /metrics families against one complete push that followed; `p` is
/// what the docs promise under its `--otlp-semconv`.
async fn check_instance(
    p: &Promised,
    role: &Role,
    col: &Collector,
    inst: &Prober,
    (transport, legacy): (&str, bool),
) {
    let pid = inst.child.id();
    let must_send: Vec<String> = if legacy {
        p.legacy_names(role.must_send)
    } else {
        role.must_send.iter().map(|n| n.to_string()).collect()
    };
    for n in &must_send {
        assert!(p.rows.contains_key(n), "{n} is not in docs/metrics.md");
    }
    // Steady state first: a few pushes arrived and the instance reports no failed push.
    let deadline = Instant::now() + Duration::from_secs(30);
    let body = loop {
        let (_, body) = support::get(&inst.url("/metrics")).await;
        let steady = pushes_of(col, pid).by_time.len() >= 3
            && body.contains("kube_prober_sink_pushes_total{sink=\"otlp\"}")
            && must_send.iter().all(|n| {
                let fam = p.of_family.iter().find(|(_, ns)| ns.contains(n));
                fam.is_some_and(|(f, _)| families(&body).contains(f))
            });
        if steady {
            break body;
        }
        assert!(
            Instant::now() < deadline,
            "{} over {transport}: not steady within 30 s:\n{body}\nCollector log:\n{}",
            role.name,
            col.stderr()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(
        !body.contains("kube_prober_sink_failures_total{sink=\"otlp\""),
        "{} over {transport}: a failed push:\n{body}",
        role.name
    );
    let before = families(&body);
    let (resource, sent) = complete_push_after(col, pid, now_nanos()).await;
    let (_, body) = support::get(&inst.url("/metrics")).await;
    let after = families(&body);
    let what = format!("{} over {transport}", role.name);

    // Names, units, kinds: rows of the table, and exactly the served families' names (served
    // before and after the push; one that came or went in between, say a skipped tick on a
    // busy machine, may be there or not).
    for d in &sent {
        let (unit, kind) = p
            .rows
            .get(&d.name)
            .unwrap_or_else(|| panic!("{what}: {} is not in docs/metrics.md", d.name));
        assert_eq!(
            (&d.unit, &d.kind),
            (unit, kind),
            "{what}: {} (unit, kind) differs from docs/metrics.md",
            d.name
        );
        for suffix in ["_total", "_seconds", "_bytes"] {
            assert!(
                !d.name.ends_with(suffix),
                "{what}: {} has a Prometheus suffix",
                d.name
            );
        }
    }
    let names: BTreeSet<String> = sent.iter().map(|d| d.name.clone()).collect();
    let mut must = expected_names(p, &before.intersection(&after).cloned().collect());
    let may = expected_names(p, &before.union(&after).cloned().collect());
    if legacy {
        // One legacy metric per kubelet condition type: only the types the nodes have are sent
        // (the node role's Node has `Ready` alone), so of those at least one.
        let per_condition: BTreeSet<String> = must
            .iter()
            .filter(|n| n.starts_with("k8s.node.condition_"))
            .cloned()
            .collect();
        if !per_condition.is_empty() {
            assert!(
                names.iter().any(|n| per_condition.contains(n)),
                "{what}: none of {per_condition:?} sent"
            );
            must.retain(|n| !per_condition.contains(n));
        }
    }
    assert!(
        must.is_subset(&names) && names.is_subset(&may),
        "{what}: sent {:?} beyond /metrics, missing {:?}",
        names.difference(&may).collect::<Vec<_>>(),
        must.difference(&names).collect::<Vec<_>>()
    );
    for n in &must_send {
        assert!(names.contains(n), "{what}: {n} not sent");
    }

    // Point attributes: the Prometheus label keys the docs rename arrive under their new names.
    let mut all_keys = BTreeSet::new();
    for (res, m) in otelcol::metrics(&col.batches()) {
        if res.get("service.instance.id") != resource.get("service.instance.id") {
            continue;
        }
        let keys = otelcol::point_attribute_keys(m);
        if legacy {
            check_legacy_condition(&what, m, &keys);
        }
        all_keys.extend(keys.iter().cloned());
        for renamed in ["node", "namespace", "pod", "container", "task_id"] {
            assert!(
                !keys.contains(renamed),
                "{what}: {} has attribute `{renamed}`",
                m["name"]
            );
        }
    }
    for k in role.point_keys {
        // The legacy condition metrics carry no condition attributes.
        if legacy && k.starts_with("k8s.node.condition.") {
            assert!(!all_keys.contains(*k), "{what}: a point has `{k}`");
            continue;
        }
        assert!(all_keys.contains(*k), "{what}: no point has `{k}`");
    }

    // Resource: the role's attributes, no other, all of them documented.
    let keys: BTreeSet<&str> = resource.keys().map(String::as_str).collect();
    let want_keys: BTreeSet<&str> = role.resource.iter().map(|(k, _)| *k).collect();
    assert_eq!(keys, want_keys, "{what}: resource {resource:?}");
    for (k, v) in &role.resource {
        assert!(p.resource_keys.contains(*k), "{k} is not documented");
        match v {
            Some(v) => assert_eq!(&resource[*k], v, "{what}: {k}"),
            None => assert!(!resource[*k].is_empty(), "{what}: {k} empty"),
        }
    }
    assert!(
        resource["service.instance.id"].ends_with(&format!("_{pid}")),
        "{what}: {resource:?}"
    );
}

/// A legacy instance's metric: a `k8s.node.condition_*` one is a gauge whose points are 1, 0
/// or -1 and carry no condition or status attribute; the generated nodes are `Ready` and under
/// no pressure.
fn check_legacy_condition(what: &str, m: &Value, keys: &BTreeSet<String>) {
    let name = m["name"].as_str().unwrap_or_default();
    let Some(condition) = name.strip_prefix("k8s.node.condition_") else {
        return;
    };
    for k in [
        "condition",
        "status",
        "k8s.node.condition.type",
        "k8s.node.condition.status",
    ] {
        assert!(!keys.contains(k), "{what}: {name} has attribute `{k}`");
    }
    let points = m["gauge"]["dataPoints"]
        .as_array()
        .unwrap_or_else(|| panic!("{what}: {name} is not a gauge: {m}"));
    let want = if condition == "ready" { 1.0 } else { 0.0 };
    for point in points {
        let v = point["asDouble"]
            .as_f64()
            .or_else(|| point["asInt"].as_str().and_then(|s| s.parse().ok()))
            .unwrap_or_else(|| panic!("{what}: {name} point without a value: {point}"));
        assert_eq!(v, want, "{what}: {name} {point}");
    }
}

/// Runs `role` with its [`INSTANCES`] against one Collector and checks each, then the
/// Collector's receiver counters.
async fn check_role(role: Role) {
    let p = promised();
    let legacy_p = p.as_legacy();
    let col = Collector::start().await;
    let instances: Vec<((&str, bool), Prober)> = INSTANCES
        .iter()
        .map(|i| ((i.0, i.3), start_instance(&role, &col, *i)))
        .collect();
    for (_, inst) in &instances {
        wait_ready(inst).await;
    }
    for ((label, legacy), inst) in &instances {
        let promised = if *legacy { &legacy_p } else { &p };
        check_instance(promised, &role, &col, inst, (*label, *legacy)).await;
    }
    // Each instance's last push goes out on SIGTERM; then nothing is in flight.
    for (_, inst) in instances {
        assert_eq!(inst.terminate(), 0);
    }
    let points = col.receiver_points().await;
    for (t, _) in TRANSPORTS {
        let got = points.get(t).copied().unwrap_or_default();
        assert!(
            got.accepted.is_some_and(|n| n > 0.0)
                && got.refused == Some(0.0)
                && got.failed == Some(0.0),
            "{} over {t}: receiver {got:?} (all: {points:?}); Collector log:\n{}",
            role.name,
            col.stderr()
        );
    }
    assert!(
        points
            .keys()
            .all(|t| TRANSPORTS.iter().any(|(k, _)| k == t)),
        "{points:?}"
    );
    // Nothing the Collector had to warn about (a partial success, a dropped point).
    let log = col.stderr();
    let bad: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("\twarn\t") || l.contains("\terror\t"))
        .collect();
    assert!(
        bad.is_empty(),
        "{}: the Collector logged {bad:#?}",
        role.name
    );
    // Every point accepted reached the exporter: the receiver's count is the file's.
    let accepted: f64 = points.values().filter_map(|p| p.accepted).sum();
    assert_eq!(
        accepted as usize,
        otelcol::point_count(&col.batches()),
        "{}: points accepted vs. points exported",
        role.name
    );
}

#[test]
fn receiver_points_are_read_per_transport() {
    let text = "\
# TYPE otelcol_receiver_accepted_metric_points counter
otelcol_receiver_accepted_metric_points{receiver=\"otlp\",transport=\"http\"} 7
otelcol_receiver_accepted_metric_points{receiver=\"otlp\",transport=\"grpc\"} 3
otelcol_receiver_failed_metric_points{receiver=\"otlp\",transport=\"http\"} 0
otelcol_receiver_refused_metric_points{receiver=\"otlp\",transport=\"http\"} 1
otelcol_receiver_accepted_metric_points{receiver=\"other\",transport=\"http\"} 100
otelcol_exporter_sent_metric_points{exporter=\"jsonfile\"} 10
";
    let p = otelcol::receiver_points(text);
    assert_eq!(p.len(), 2);
    assert_eq!(p["http"].accepted, Some(7.0));
    assert_eq!(p["http"].refused, Some(1.0));
    assert_eq!(p["http"].failed, Some(0.0));
    assert_eq!(p["grpc"].accepted, Some(3.0));
    assert_eq!(p["grpc"].refused, None, "absent is not 0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_role_into_the_collector_over_grpc_and_http() {
    crypto();
    let api = apiserver::start().await;
    api.generate(3, 6);
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    api.write_kubeconfig(&kc).unwrap();
    let mut resource = common_resource();
    resource.push(("k8s.cluster.name", Some(CLUSTER.into())));
    check_role(Role {
        name: "cluster",
        args: [
            "--role",
            "cluster",
            "--cluster-name",
            CLUSTER,
            "--interval",
            "1s",
            "--timeout",
            "1s",
            "--tick-interval",
            "1s",
            "--probe-interval",
            "1s",
            // The DNS probe would ask the machine's resolver: off here.
            "--disable-probes",
            "cluster_dns",
        ]
        .map(String::from)
        .to_vec(),
        env: vec![("KUBECONFIG".into(), kc.to_string_lossy().into_owned())],
        resource,
        must_send: &[
            "kube_prober.cluster.nodes",
            "k8s.node.condition.status",
            "k8s.node.cpu.usage",
            "k8s.node.memory.working_set",
            "k8s.node.cpu.allocatable",
            "kube_prober.addon.pods",
            "kube_prober.probe.duration",
            "kube_prober.sink.pushes",
        ],
        point_keys: &["k8s.node.name", "k8s.node.condition.type"],
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_role_into_the_collector_over_grpc_and_http() {
    crypto();
    let api = apiserver::start().await;
    api.set_nodes(vec![apiserver::node(NODE, ("4", "8Gi"), ("4", "8Gi"))]);
    let uid = "aaaaaaaa-1111-2222-3333-444444444444";
    let k = kubelet::FakeKubelet::start("node-token").await;
    k.set_pods(vec![apiserver::task_pod("web-a", uid, "c0ffee01", NODE)]);
    let dir = tempfile::tempdir().unwrap();
    let files = k.write_files(dir.path());
    let (cg, sys, kc) = (
        dir.path().join("cgroup"),
        dir.path().join("sys"),
        dir.path().join("kubeconfig"),
    );
    fixture::init(&cg, Layout::V2).unwrap();
    support::write_task_cgroups(&cg, uid, "c0ffee01", 1);
    support::write_sysfs_fixture(&sys);
    api.write_kubeconfig(&kc).unwrap();
    let s = |p: &Path| p.to_string_lossy().into_owned();
    let mut resource = common_resource();
    resource.push(("k8s.cluster.name", Some(CLUSTER.into())));
    resource.push(("k8s.node.name", Some(NODE.into())));
    let healthz = format!("{}/healthz", k.url);
    check_role(Role {
        name: "node",
        args: vec![
            "--role".into(),
            "node".into(),
            "--cluster-name".into(),
            CLUSTER.into(),
            "--tick-interval".into(),
            "1s".into(),
            "--interval".into(),
            "1s".into(),
            "--timeout".into(),
            "1s".into(),
            "--cgroup-root".into(),
            s(&cg),
            "--sysfs".into(),
            s(&sys),
            "--kubelet-url".into(),
            k.url.clone(),
            "--kubelet-token-file".into(),
            s(&files.token),
            "--kubelet-ca-file".into(),
            s(&files.ca),
            // The health probe asks the stand-in, not whatever listens on 127.0.0.1:10248.
            "--kubelet-healthz-url".into(),
            healthz,
        ],
        env: vec![
            ("KUBECONFIG".into(), s(&kc)),
            ("NODE_NAME".into(), NODE.into()),
        ],
        resource,
        must_send: &[
            "k8s.pod.cpu.time",
            "container.cpu.time",
            "k8s.pod.memory.working_set",
            "kube_prober.task.up",
            "kube_prober.platform.topology.cores",
            "kube_prober.platform.memory.numa_capacity",
            "kube_prober.platform.memory.numa_used",
            "kube_prober.sink.pushes",
        ],
        point_keys: &[
            "k8s.node.name",
            "k8s.namespace.name",
            "k8s.pod.name",
            "k8s.pod.uid",
            "k8s.container.name",
        ],
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_role_into_the_collector_over_grpc_and_http() {
    crypto();
    let mut resource = common_resource();
    // No --cluster-name: the documented default (README, docs/metrics.md `cluster_info`).
    resource.push(("k8s.cluster.name", Some("unknown".into())));
    resource.push(("host.name", Some("host-1".into())));
    resource.push(("host.arch", None));
    resource.push(("os.type", Some("linux".into())));
    if std::fs::read_to_string("/etc/machine-id").is_ok_and(|s| !s.trim().is_empty()) {
        resource.push(("host.id", None));
    }
    check_role(Role {
        name: "host",
        args: [
            "--role",
            "host",
            "--node-name",
            "host-1",
            "--interval",
            "1s",
            "--timeout",
            "1s",
            "--tick-interval",
            "1s",
        ]
        .map(String::from)
        .to_vec(),
        env: Vec::new(),
        resource,
        must_send: &[
            "kube_prober.node.cpu.utilization",
            "k8s.node.cpu.usage",
            "kube_prober.node.memory.capacity",
            "kube_prober.sink.pushes",
        ],
        point_keys: &["k8s.node.name"],
    })
    .await;
}

/// The library's OTLP sinks (gRPC and HTTP at once) through the push runner into a Collector
/// that is killed and started again on the same ports, pushing one fixed snapshot (every push
/// the same points). While it is down every point of every tick is counted lost (`unavailable`
/// over gRPC, `transport` over HTTP) and none accepted; once it is back, every push delivers
/// exactly one tick's points, all accepted by its receiver, and no push carries more (nothing
/// queued during the outage is sent as a burst).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_stopped_and_started_again_gets_one_ticks_points_per_push() {
    use kube_prober::outputs::otlp::{OtlpBounds, OtlpOptions, OtlpResource, OtlpSink};
    use kube_prober::outputs::push::SinkSchedule;
    use support::push;

    crypto();
    let mut col = Collector::start().await;
    let published = push::fixture(4);
    let sink = |protocol: &str, endpoint: &str, instance: &str| {
        let config = OtlpOptions {
            otlp_protocol: Some(protocol.into()),
            otlp_endpoint: Some(endpoint.into()),
            ..Default::default()
        }
        .resolve_with(
            OtlpBounds {
                timeout: Some(Duration::from_secs(2)),
                max_response_bytes: None,
            },
            &|_| None,
        )
        .expect("config");
        let resource = OtlpResource {
            instance_id: instance.into(),
            ..Default::default()
        };
        std::sync::Arc::new(OtlpSink::new(config, &resource).expect("sink"))
    };
    let grpc = sink("grpc", &col.grpc_endpoint, "outage-grpc");
    let http = sink("http/protobuf", &col.http_endpoint, "outage-http");
    let schedule = SinkSchedule {
        interval: Duration::from_millis(500),
        timeout: Duration::from_secs(3),
        final_push: Duration::from_secs(3),
    };
    // Up: the points of one push.
    let (g, h) = tokio::join!(
        push::run(&grpc, &published, schedule, 2),
        push::run(&http, &published, schedule, 2)
    );
    assert!(
        g.failures.is_empty() && h.failures.is_empty(),
        "{g:?} {h:?}"
    );
    let n = g.points / g.pushes;
    assert_eq!(g.points, g.pushes * n, "{g:?}");
    assert_eq!(h.points, h.pushes * n, "{h:?}");

    // Down: every point of every tick lost, by reason.
    col.stop().await;
    let (g, h) = tokio::join!(
        push::run(&grpc, &published, schedule, 3),
        push::run(&http, &published, schedule, 3)
    );
    for (st, reason) in [(&g, "unavailable"), (&h, "transport")] {
        assert_eq!(st.points, 0, "{st:?}");
        let mut want = BTreeMap::from([(reason.to_string(), st.pushes * n)]);
        if st.skipped > 0 {
            want.insert("tick_skipped".into(), st.skipped * n);
        }
        assert_eq!(st.dropped, want, "{st:?}");
    }

    // Back: one tick's points per push, each accepted by the Collector.
    col.start_again().await;
    let before = col.batches().len();
    let (g, h) = tokio::join!(
        push::run(&grpc, &published, schedule, 3),
        push::run(&http, &published, schedule, 3)
    );
    for st in [&g, &h] {
        assert!(st.failures.is_empty(), "{st:?}");
        assert_eq!(st.points, st.pushes * n, "{st:?}");
        // Only ticks skipped behind a push that outlasted its interval on a busy machine.
        assert!(
            st.dropped.keys().all(|r| r == "tick_skipped")
                && st.dropped.values().sum::<u64>() == st.skipped * n,
            "{st:?}"
        );
    }
    let batches = col.batches()[before..].to_vec();
    for (instance, st) in [("outage-grpc", &g), ("outage-http", &h)] {
        let mut by_push: BTreeMap<u64, u64> = BTreeMap::new();
        for (res, m) in otelcol::metrics(&batches) {
            if res.get("service.instance.id").map(String::as_str) != Some(instance) {
                continue;
            }
            let points = otelcol::point_count(&[serde_json::json!({
                "resourceMetrics": [{"scopeMetrics": [{"metrics": [m]}]}]
            })]) as u64;
            *by_push.entry(point_time(m)).or_default() += points;
        }
        assert_eq!(by_push.len() as u64, st.pushes, "{instance}: {by_push:?}");
        assert!(
            by_push.values().all(|p| *p == n),
            "{instance}: one tick's {n} points per push: {by_push:?}"
        );
    }
    let accepted = col.receiver_points().await;
    let total: f64 = accepted.values().filter_map(|p| p.accepted).sum();
    assert_eq!(total as u64, (g.pushes + h.pushes) * n, "{accepted:?}");
    assert!(
        accepted
            .values()
            .all(|p| p.refused.unwrap_or(0.0) == 0.0 && p.failed.unwrap_or(0.0) == 0.0),
        "{accepted:?}"
    );
}
