//! docs/metrics.md lists exactly the metric families declared in src/outputs/families/, and exactly the
//! `reason` values the source counters can carry; each documented reason is provoked here from
//! real input (stand-ins over HTTP, a procfs directory), so a reason that is never produced or
//! one produced but undocumented fails a test.

use support::apiserver;
use support::fake_prom;

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime};

use apiserver::{node, node_metrics};
use fake_prom::{Behaviour, FakePrometheus};
use kube_prober::hub::{RunOutcome, Store, validate};
use kube_prober::outputs::families;
use kube_prober::sources::usage::host::{HostConfig, HostFetcher};
use kube_prober::sources::usage::http::HttpConfig;
use kube_prober::sources::usage::metrics_server::{MetricsServerConfig, MetricsServerFetcher};
use kube_prober::sources::usage::prometheus::{PrometheusConfig, PrometheusFetcher};
use kube_prober::sources::usage::run_once;

fn doc() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/metrics.md")).unwrap()
}

#[test]
fn every_metric_is_documented_and_every_documented_metric_exists() {
    let doc = doc();
    let code: BTreeSet<String> = families::ALL
        .iter()
        .chain(families::SERVER)
        .map(|f| f.sample_name())
        .collect();
    let documented: BTreeSet<String> = doc
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("kube_prober_") && w.len() > "kube_prober_".len())
        .map(str::to_string)
        .collect();
    let missing: Vec<_> = code.difference(&documented).collect();
    assert!(missing.is_empty(), "not in docs/metrics.md: {missing:?}");
    let stale: Vec<_> = documented.difference(&code).collect();
    assert!(
        stale.is_empty(),
        "docs/metrics.md names metrics the code does not have: {stale:?}"
    );
}

/// The `reason` values the metrics table documents for `family`: every `code` span of the
/// meaning column that is a plain label value.
fn documented_reasons(family: &str) -> BTreeSet<String> {
    let doc = doc();
    let row = doc
        .lines()
        .find(|l| l.starts_with(&format!("| `{family}` |")))
        .unwrap_or_else(|| panic!("no row for {family} in docs/metrics.md"));
    let meaning = row.split('|').nth(4).unwrap_or_default();
    meaning
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|w| !w.is_empty() && w.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
        .map(str::to_string)
        .collect()
}

fn prometheus(url: &str) -> PrometheusFetcher {
    let mut h = HttpConfig::new(url);
    h.retries = 0;
    h.timeout = Duration::from_secs(3);
    PrometheusFetcher::new(PrometheusConfig::new(h)).unwrap()
}

fn reason(outcome: RunOutcome) -> String {
    match outcome {
        RunOutcome::Failed { reason, .. } => reason,
        other => panic!("expected a failed run, got {other:?}"),
    }
}

/// One row per documented source error reason: the real input that produces it.
#[tokio::test]
async fn every_source_error_reason_is_documented_and_produced() {
    let code: BTreeSet<String> = kube_prober::shared::error::SOURCE_ERROR_REASONS
        .iter()
        .map(|s| s.to_string())
        .collect();
    let documented = documented_reasons("kube_prober_source_errors_total");
    assert_eq!(
        documented, code,
        "docs/metrics.md and error::SOURCE_ERROR_REASONS disagree"
    );

    let mut produced = BTreeSet::new();
    let t = Duration::from_secs(10);
    // http: a backend answering 503.
    let down = FakePrometheus::start(Behaviour::Down).await;
    produced.insert(reason(
        run_once(&mut prometheus(&down.url), &Store::new(), t).await,
    ));
    // parse: a 200 answer that is not JSON.
    let bad = FakePrometheus::start(Behaviour::Malformed).await;
    produced.insert(reason(
        run_once(&mut prometheus(&bad.url), &Store::new(), t).await,
    ));
    // timeout: a backend that answers after the run's deadline.
    let slow = FakePrometheus::start(Behaviour::Stall(Duration::from_secs(5))).await;
    let short = Duration::from_millis(200);
    produced.insert(reason(
        run_once(&mut prometheus(&slow.url), &Store::new(), short).await,
    ));
    // too_large: an answer past the byte cap.
    let huge = FakePrometheus::start(Behaviour::Huge(256 * 1024)).await;
    let mut capped = HttpConfig::new(&huge.url);
    capped.retries = 0;
    capped.timeout = Duration::from_secs(3);
    capped.max_body_bytes = 64 * 1024;
    let mut capped = PrometheusFetcher::new(PrometheusConfig::new(capped)).unwrap();
    produced.insert(reason(run_once(&mut capped, &Store::new(), t).await));
    // io: a procfs that is not there.
    let dir = tempfile::tempdir().unwrap();
    let mut host = HostFetcher::new(HostConfig {
        procfs: dir.path().join("missing"),
        node_name: "h".into(),
    });
    produced.insert(reason(run_once(&mut host, &Store::new(), t).await));
    assert_eq!(produced, code, "reasons produced by real input");
}

/// One row per documented dropped-value reason, each from real backend answers.
#[tokio::test]
async fn every_dropped_value_reason_is_documented_and_produced() {
    let code: BTreeSet<String> = validate::dropped_reasons().map(str::to_string).collect();
    let documented = documented_reasons("kube_prober_source_dropped_values_total");
    assert_eq!(
        documented, code,
        "docs/metrics.md and validate::DropReason disagree"
    );

    let store = Store::new();
    let t = Duration::from_secs(10);
    let api = apiserver::start().await;
    let now = SystemTime::now();
    api.set_nodes(vec![
        node("liar", ("4", "8Gi"), ("4", "8Gi")),
        node("negative", ("4", "8Gi"), ("4", "8Gi")),
        node("zero-cpu", ("0", "8Gi"), ("0", "8Gi")),
        node("garbled", ("4", "8Gi"), ("4", "8Gi")),
    ]);
    api.set_node_metrics(vec![
        node_metrics("liar", "400", "2Gi", now),    // above_capacity
        node_metrics("negative", "1", "-2Gi", now), // negative
        node_metrics("zero-cpu", "1", "2Gi", now),  // bad_capacity
        node_metrics("garbled", "1 core", "2Gi", now), // unparsable
    ]);
    let mut ms = MetricsServerFetcher::new(api.client(), MetricsServerConfig::default());
    assert_eq!(run_once(&mut ms, &store, t).await, RunOutcome::Ok);
    // non_finite: Prometheus answering NaN.
    let nan = FakePrometheus::start(Behaviour::Answer(vec![("n1:9100".into(), f64::NAN)])).await;
    assert_eq!(
        run_once(&mut prometheus(&nan.url), &store, t).await,
        RunOutcome::Ok
    );
    // too_large: NodeMetrics items over the per-item cap (`--max-response-bytes`).
    let small = Store::new();
    let capped = MetricsServerConfig {
        max_item_bytes: 100,
        ..MetricsServerConfig::default()
    };
    // The Nodes as the cluster role's watcher holds them: the 100-byte cap is for the
    // NodeMetrics items alone (a Node listed by the fetch itself is capped the same way).
    let nodes: kube::Api<kube_prober::k8s::lean::LeanNode> = kube::Api::all(api.client());
    let watched: std::collections::HashMap<_, _> = nodes
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|n| (n.metadata.name.clone().unwrap(), std::sync::Arc::new(n)))
        .collect();
    let mut ms = MetricsServerFetcher::new(api.client(), capped)
        .with_node_source(std::sync::Arc::new(watched), Box::pin(async { true }));
    assert_eq!(run_once(&mut ms, &small, t).await, RunOutcome::NoData);
    let snap = store.snapshot(SystemTime::now());
    let produced: BTreeSet<String> = snap
        .sources
        .values()
        .chain(small.snapshot(SystemTime::now()).sources.values())
        .flat_map(|s| s.dropped.keys().cloned())
        .collect();
    assert_eq!(produced, code, "reasons produced by real input");
    let ms = &snap.sources["metrics_server"];
    for r in ["above_capacity", "negative", "bad_capacity", "unparsable"] {
        assert_eq!(ms.dropped[r], 1, "{r}: {:?}", ms.dropped);
    }
}

/// The perf open-failure reasons documented are exactly the ones the classifier can give
/// (`task::perf::tests::error_classification` maps each errno to one).
#[test]
fn every_perf_open_failure_reason_is_documented() {
    let documented = documented_reasons("kube_prober_task_perf_open_failures_total");
    let code: BTreeSet<String> = kube_prober::sources::task::perf::FAILURE_REASONS
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(documented, code);
}

/// The reasons listed in `file` (under the repository root) after `marker`, up to `end`: the
/// `code` spans that are label values (`status_<code>` included, flags such as
/// `--max-response-bytes` left out).
fn listed_reasons(file: &str, marker: &str, end: &str) -> BTreeSet<String> {
    let path = format!("{}/{file}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap();
    let start = text
        .find(marker)
        .unwrap_or_else(|| panic!("{file} no longer says {marker:?}"))
        + marker.len();
    let list = &text[start..];
    let list = &list[..list.find(end).unwrap_or(list.len())];
    list.split('`')
        .skip(1)
        .step_by(2)
        .filter(|w| {
            let w = w.strip_suffix("<code>").unwrap_or(w);
            !w.is_empty() && w.chars().all(|c| c.is_ascii_lowercase() || c == '_')
        })
        .map(str::to_string)
        .collect()
}

/// The string literals of `code` that a Rust expression starting there evaluates to: a literal
/// (`"dns"`), a `format!` whose format starts with a literal part (`status_{}` as
/// `status_<code>`), or a variable, through its `let` in `file_text` (every literal up to the
/// `;`). A call (`io_reason(&e)`) gives nothing here: its literals are read where it is defined.
fn reason_literals(code: &str, file_text: &str) -> Vec<String> {
    let code = code.trim_start();
    let literals = |s: &str| -> Vec<String> {
        s.split('"')
            .skip(1)
            .step_by(2)
            .map(|l| match l.split_once('{') {
                Some((head, _)) => format!("{head}<code>"),
                None => l.to_string(),
            })
            .collect()
    };
    if let Some(rest) = code.strip_prefix('"') {
        return vec![rest[..rest.find('"').unwrap()].to_string()];
    }
    if code.starts_with("format!(") {
        return literals(&code[..code.find(')').unwrap()])
            .into_iter()
            .take(1)
            .collect();
    }
    let ident: String = code
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    if code[ident.len()..].trim_start().starts_with('(') {
        return Vec::new();
    }
    let binding = format!("let {ident} =");
    let at = file_text
        .find(&binding)
        .unwrap_or_else(|| panic!("a failure reason `{ident}` without a `let`"));
    let rest = &file_text[at..];
    literals(&rest[..rest.find(';').unwrap()])
}

/// Every reason the probes' code can record: the first argument of each `Failure::new` in
/// src/sources/probe/ (its unit tests aside) and what `io_reason` returns.
fn probe_reasons_in_code() -> BTreeSet<String> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/sources/probe");
    let mut reasons = BTreeSet::new();
    let mut calls = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let text = text.split("#[cfg(test)]").next().unwrap_or_default();
        for (i, _) in text.match_indices("Failure::new(") {
            calls += 1;
            reasons.extend(reason_literals(&text[i + "Failure::new(".len()..], text));
        }
        if let Some(at) = text.find("pub fn io_reason(") {
            let body = &text[at..];
            let body = &body[..body.find("\n}\n").unwrap()];
            for l in body.split('"').skip(1).step_by(2) {
                reasons.insert(l.to_string());
            }
        }
    }
    assert!(
        calls >= 10,
        "found only {calls} Failure::new calls in {dir}"
    );
    reasons
}

/// The probes' failure reasons: every reason the code can record is in
/// `probe::FAILURE_REASONS`, and the list in docs/configuration.md, docs/alerts.md and
/// docs/metrics.md is exactly that list.
#[test]
fn every_probe_failure_reason_is_documented() {
    let list: BTreeSet<String> = kube_prober::sources::probe::FAILURE_REASONS
        .iter()
        .map(|s| s.to_string())
        .collect();
    let code = probe_reasons_in_code();
    for known in [
        "timeout",
        "refused",
        "dns",
        "status_<code>",
        "too_large",
        "error",
    ] {
        assert!(
            code.contains(known),
            "the scan of the probes missed {known}: {code:?}"
        );
    }
    let unlisted: Vec<_> = code.difference(&list).collect();
    assert!(
        unlisted.is_empty(),
        "probe failure reasons in the code but not in probe::FAILURE_REASONS: {unlisted:?}"
    );
    for (file, marker, end) in [
        ("docs/configuration.md", "fixed set (", ")"),
        (
            "docs/alerts.md",
            "`kube_prober_probe_failures_total{reason}` (",
            ";",
        ),
        (
            "docs/metrics.md",
            "| `kube_prober_probe_failures_total` | counter | probe, target, reason | ",
            " |\n",
        ),
    ] {
        assert_eq!(
            listed_reasons(file, marker, end),
            list,
            "{file}'s probe failure reasons and probe::FAILURE_REASONS disagree"
        );
    }
}

/// The scan above reads a reason given as a literal, as a `format!` and through a `let`, and
/// leaves a call to the function that holds its own literals.
#[test]
fn the_probe_reason_scan_reads_literals_formats_and_bindings() {
    let file = "let reason = if slow { \"timeout\" } else { io_reason(&e) };";
    assert_eq!(reason_literals("\"dns\", e.to_string())", file), ["dns"]);
    assert_eq!(
        reason_literals("\n  format!(\"status_{}\", s.code), d)", file),
        ["status_<code>"]
    );
    assert_eq!(reason_literals("reason, e.to_string())", file), ["timeout"]);
    assert!(reason_literals("io_reason(&e), d)", file).is_empty());
}

// ---------------------------------------------------------------------------------------------
// Series per family: the formulas of docs/metrics.md's "Series per family" table, evaluated
// with the counts of small known snapshots, against the series the renderer writes.

mod counts {
    use std::collections::{BTreeMap, BTreeSet};
    use std::sync::Arc;
    use std::time::{Duration, SystemTime};

    use kube_prober::model::{
        Addon, AddonExpected, AddonOnNode, BackendStat, BackendValue, CgroupStats, ClusterState,
        ContainerRestarts, ContainerSample, Controller, CpuMem, Leadership, MetricType,
        NodeCapacity, NodeFacts, NodeLoad, NodePods, NumaMemory, Operator, PROBE_BUCKETS,
        PerfCounts, PerfEventSet, Placement, Platform, PodRestarts, Pressure, ProbeState, Resource,
        Selection, Shard, SinkStatus, Snapshot, SourceStatus, Stat, TaskContainer, TaskPerfSample,
        TaskPerfSet, TaskPod, TaskSample, TaskSet, Window, WindowStats,
    };
    use kube_prober::outputs::families::{self, Family, Kind};
    use kube_prober::outputs::prometheus::{Format, render, render_families, render_tail};

    /// The `series` formula of each family row of the "Series per family" section.
    pub fn documented_formulas(doc: &str) -> BTreeMap<String, String> {
        let start = doc
            .find("\n## Series per family\n")
            .expect("docs/metrics.md has no \"## Series per family\" section");
        let section = &doc[start + 1..];
        let end = section[3..].find("\n## ").map_or(section.len(), |i| i + 3);
        let mut out = BTreeMap::new();
        for line in section[..end].lines() {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            // | `family` | `formula` | scale |
            if cells.len() < 4 || !cells[1].starts_with("`kube_prober_") {
                continue;
            }
            let family = cells[1].trim_matches('`').to_string();
            let formula = cells[2].trim_matches('`').to_string();
            assert!(
                out.insert(family.clone(), formula).is_none(),
                "{family} twice in the series table"
            );
        }
        out
    }

    #[derive(Debug, Clone, PartialEq)]
    enum Tok {
        Num(f64),
        Var(String),
        Times,
        Plus,
        Open,
        Close,
    }

    fn lex(s: &str) -> Result<Vec<Tok>, String> {
        let mut out = vec![];
        let mut chars = s.chars().peekable();
        while let Some(&c) = chars.peek() {
            match c {
                ' ' => {
                    chars.next();
                }
                '×' | '*' => {
                    chars.next();
                    out.push(Tok::Times);
                }
                '+' => {
                    chars.next();
                    out.push(Tok::Plus);
                }
                '(' => {
                    chars.next();
                    out.push(Tok::Open);
                }
                ')' => {
                    chars.next();
                    out.push(Tok::Close);
                }
                '0'..='9' => {
                    let mut n = String::new();
                    while let Some(&d) = chars.peek().filter(|d| d.is_ascii_digit()) {
                        n.push(d);
                        chars.next();
                    }
                    out.push(Tok::Num(n.parse().map_err(|e| format!("{n}: {e}"))?));
                }
                'a'..='z' | '_' => {
                    let mut n = String::new();
                    while let Some(&d) = chars
                        .peek()
                        .filter(|d| d.is_ascii_lowercase() || **d == '_' || d.is_ascii_digit())
                    {
                        n.push(d);
                        chars.next();
                    }
                    out.push(Tok::Var(n));
                }
                other => return Err(format!("unexpected {other:?} in {s:?}")),
            }
        }
        Ok(out)
    }

    /// Evaluates `+`/`×` expressions with parentheses; an unknown count is an error.
    pub fn eval(formula: &str, vars: &BTreeMap<&str, f64>) -> Result<f64, String> {
        fn sum(t: &[Tok], i: &mut usize, v: &BTreeMap<&str, f64>) -> Result<f64, String> {
            let mut acc = product(t, i, v)?;
            while t.get(*i) == Some(&Tok::Plus) {
                *i += 1;
                acc += product(t, i, v)?;
            }
            Ok(acc)
        }
        fn product(t: &[Tok], i: &mut usize, v: &BTreeMap<&str, f64>) -> Result<f64, String> {
            let mut acc = atom(t, i, v)?;
            while t.get(*i) == Some(&Tok::Times) {
                *i += 1;
                acc *= atom(t, i, v)?;
            }
            Ok(acc)
        }
        fn atom(t: &[Tok], i: &mut usize, v: &BTreeMap<&str, f64>) -> Result<f64, String> {
            let tok = t.get(*i).cloned().ok_or("formula ends too early")?;
            *i += 1;
            match tok {
                Tok::Num(n) => Ok(n),
                Tok::Var(name) => v
                    .get(name.as_str())
                    .copied()
                    .ok_or_else(|| format!("unknown count {name}")),
                Tok::Open => {
                    let x = sum(t, i, v)?;
                    if t.get(*i) != Some(&Tok::Close) {
                        return Err("missing )".into());
                    }
                    *i += 1;
                    Ok(x)
                }
                other => Err(format!("unexpected {other:?}")),
            }
        }
        let toks = lex(formula)?;
        let mut i = 0;
        let x = sum(&toks, &mut i, vars)?;
        if i != toks.len() {
            return Err(format!("trailing tokens in {formula:?}"));
        }
        Ok(x)
    }

    /// Series (sample lines) per family in a text exposition, keyed by the family's
    /// documented name (counters with `_total`).
    pub fn series_per_family(body: &str) -> BTreeMap<String, u64> {
        let mut by_sample: BTreeMap<String, String> = BTreeMap::new();
        for f in families::ALL.iter().chain(families::SERVER) {
            let doc_name = f.sample_name();
            if f.kind == Kind::Histogram {
                for suffix in ["_bucket", "_sum", "_count"] {
                    by_sample.insert(format!("{}{suffix}", f.name), doc_name.clone());
                }
            } else {
                by_sample.insert(doc_name.clone(), doc_name);
            }
        }
        let mut out = BTreeMap::new();
        for line in body
            .lines()
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
        {
            let name = line.split(['{', ' ']).next().unwrap_or_default();
            let family = by_sample
                .get(name)
                .unwrap_or_else(|| panic!("sample {name} of no family: {line}"));
            *out.entry(family.clone()).or_insert(0) += 1;
        }
        out
    }

    /// The size of one fixture; every count of the table is derived from what is built.
    pub struct Shape {
        pub nodes: usize,
        /// Of them, how many have usage from the hub, and how many of those measure network and disk.
        pub usage_nodes: usize,
        pub host_nodes: usize,
        pub windows: usize,
        pub pods: usize,
        pub containers_per_pod: usize,
        pub numa_nodes: usize,
        pub cpus: usize,
        pub daemonsets: usize,
        pub probes: usize,
        pub sinks: usize,
        /// The perf event set counted: software instead of hardware.
        pub software: bool,
    }

    fn stats(limited: bool, cpu_stat: bool, numa: usize) -> CgroupStats {
        CgroupStats {
            cpu_seconds: Some(1.0),
            cpu_periods: cpu_stat.then_some(10),
            cpu_throttled_periods: cpu_stat.then_some(1),
            cpu_throttled_seconds: cpu_stat.then_some(0.1),
            memory_usage_bytes: Some(1e6),
            memory_working_set_bytes: Some(9e5),
            memory_rss_bytes: Some(5e5),
            memory_cache_bytes: Some(1e5),
            memory_limit_bytes: limited.then_some(2e6),
            page_faults: Some(5),
            major_page_faults: Some(0),
            oom_kills: Some(0),
            pressure: ["cpu", "memory", "io"]
                .into_iter()
                .flat_map(|r| {
                    ["some", "full"].map(|kind| Pressure {
                        resource: r,
                        kind,
                        seconds: 0.5,
                    })
                })
                .collect(),
            numa_bytes: (0..numa as u32).map(|n| (n, 1e5)).collect(),
            cpuset_cpus: Some(2),
            cpuset_memory_nodes: Some(1),
        }
    }

    /// A snapshot holding every kind of data at once (the cluster role's and the node role's),
    /// and the counts of the table for it.
    pub fn fixture(s: &Shape) -> (Snapshot, BTreeMap<&'static str, f64>) {
        let now = SystemTime::now();
        let mut v: BTreeMap<&'static str, f64> = BTreeMap::new();
        let mut snap = Snapshot::empty(now);
        snap.tick = 3;

        // Usage: the first `usage_nodes` nodes; the first `host_nodes` of them measure all five
        // resources; node 0 also has one backend-only value per window.
        let node_name = |i: usize| format!("node-{i}");
        let mut backend_values = 0;
        for i in 0..s.usage_nodes {
            let resources: &[Resource] = if i < s.host_nodes {
                &Resource::ALL
            } else {
                &[Resource::Cpu, Resource::Memory]
            };
            let windows = Window::ALL[..s.windows]
                .iter()
                .map(|&window| {
                    let backend: Vec<BackendStat> = if i == 0 {
                        backend_values += 1;
                        vec![BackendStat {
                            value: BackendValue {
                                name: "node_network_drop_rate".into(),
                                kind: MetricType::Bandwidth,
                                resource: None,
                                operator: Operator::Avg,
                                value: 0.0,
                            },
                            start: now - window.duration(),
                            end: now,
                        }]
                    } else {
                        vec![]
                    };
                    WindowStats {
                        window,
                        start: now - window.duration(),
                        end: now,
                        stats: resources
                            .iter()
                            .map(|&r| {
                                let st = Stat {
                                    avg: 0.5,
                                    std: 0.1,
                                    samples: std::num::NonZeroU32::new(10).unwrap(),
                                };
                                (r, st)
                            })
                            .collect(),
                        backend,
                        coverage: 1.0,
                        quantiles: resources
                            .iter()
                            .filter(|r| matches!(r, Resource::Cpu | Resource::Memory))
                            .map(|&r| (r, [0.5, 0.6, 0.7, 0.8]))
                            .collect(),
                    }
                })
                .collect();
            let load = NodeLoad {
                node: node_name(i).into(),
                source: "host".into(),
                latest_at: now,
                latest: resources.iter().map(|&r| (r, 0.5)).collect(),
                windows,
                capacity: (i % 2 == 0).then_some(NodeCapacity {
                    cpu_cores: 4.0,
                    memory_bytes: 8e9,
                }),
                hour_max: resources
                    .iter()
                    .filter(|r| matches!(r, Resource::Cpu | Resource::Memory))
                    .map(|&r| (r, 0.9))
                    .collect(),
                hour_coverage: 1.0,
            };
            Arc::make_mut(&mut snap.nodes).insert(node_name(i).into(), Arc::new(load));
        }
        // An estimate of just-bound pods on node 0 alone: only nodes with one have rows.
        if s.usage_nodes > 0 {
            let pods = vec![
                kube_prober::model::BoundPod {
                    bound_at: now,
                    cpu_cores: 0.5,
                    memory_bytes: 1e9,
                };
                2
            ];
            let bound = kube_prober::model::BoundPods { pods };
            Arc::make_mut(&mut snap.bound).insert(node_name(0).into(), Arc::new(bound));
        }
        v.insert("bound_nodes", s.usage_nodes.min(1) as f64);
        v.insert("usage_nodes", s.usage_nodes as f64);
        v.insert("host_nodes", s.host_nodes.min(s.usage_nodes) as f64);
        v.insert("windows", s.windows as f64);
        v.insert("backend_values", backend_values as f64);

        // The cluster: nodes in two pools, one cordoned node, conditions, addons.
        let conditions = ["Ready", "MemoryPressure", "DiskPressure", "PIDPressure"];
        let mut cs = ClusterState::default();
        for i in 0..s.nodes {
            let ready = i != 1;
            let status = |t: &str| {
                if t == "Ready" {
                    if ready { "True" } else { "False" }
                } else {
                    "False"
                }
            };
            std::sync::Arc::make_mut(&mut cs.nodes).push(NodeFacts {
                name: node_name(i),
                placement: Placement {
                    pool: format!("pool-{}", i % 2),
                    zone: "zone-a".into(),
                },
                conditions: conditions
                    .iter()
                    .map(|t| (Arc::from(*t), Arc::from(status(t))))
                    .collect(),
                ready,
                schedulable: i != 2,
                done_warming: true,
                created: Some(now - Duration::from_secs(3600)),
                capacity: Some(NodeCapacity {
                    cpu_cores: 4.0,
                    memory_bytes: 8e9,
                }),
                allocatable: Some(NodeCapacity {
                    cpu_cores: 3.5,
                    memory_bytes: 7e9,
                }),
            });
        }
        // Capacity: from usage where given, else from the Node object (every node has one).
        let capacity_nodes: BTreeSet<String> = snap
            .nodes
            .iter()
            .filter(|(_, l)| l.capacity.is_some())
            .map(|(n, _)| n.to_string())
            .chain(
                cs.nodes
                    .iter()
                    .filter(|n| n.capacity.is_some())
                    .map(|n| n.name.clone()),
            )
            .collect();
        v.insert("capacity_nodes", capacity_nodes.len() as f64);
        v.insert("nodes", cs.nodes.len() as f64);
        v.insert("conditions", conditions.len() as f64);
        let groups: BTreeSet<_> = cs
            .nodes
            .iter()
            .map(|n| (n.placement.clone(), n.ready, n.schedulable, n.done_warming))
            .collect();
        v.insert("node_groups", groups.len() as f64);
        let cgroups: BTreeSet<_> = cs
            .nodes
            .iter()
            .flat_map(|n| {
                n.conditions
                    .iter()
                    .map(|c| (n.placement.clone(), c.clone()))
            })
            .collect();
        v.insert("condition_groups", cgroups.len() as f64);

        let addon = |name: &str, controller| Addon {
            name: name.into(),
            version: "1.0".into(),
            controller,
        };
        for d in 0..s.daemonsets {
            cs.expected.push(AddonExpected {
                addon: addon(&format!("ds-{d}"), Controller::DaemonSet),
                namespace: "kube-system".into(),
                workload: format!("ds-{d}"),
                expected: s.nodes as u32,
            });
        }
        cs.expected.push(AddonExpected {
            addon: addon("dns", Controller::Deployment),
            namespace: "kube-system".into(),
            workload: "dns".into(),
            expected: 1,
        });
        v.insert("addon_workloads", cs.expected.len() as f64);
        let mut node_addons = 0;
        let mut addon_containers = 0;
        let mut terminated = 0;
        for i in 0..s.nodes {
            let mut list = vec![];
            for d in 0..s.daemonsets {
                list.push(AddonOnNode {
                    addon: addon(&format!("ds-{d}"), Controller::DaemonSet),
                    pods: 1,
                    ready: u32::from(i != 1),
                });
                // One container each; the first DaemonSet's pods restarted once.
                let ended = d == 0;
                cs.restarts.push(Arc::new(PodRestarts {
                    namespace: "kube-system".into(),
                    pod: format!("ds-{d}-{i}").into(),
                    node: Some(node_name(i).into()),
                    addon: Some(addon(&format!("ds-{d}"), Controller::DaemonSet)),
                    containers: vec![ContainerRestarts {
                        name: "main".into(),
                        restarts: u32::from(ended),
                        last_reason: ended.then(|| "Error".into()),
                        last_exit_code: ended.then_some(1),
                    }],
                }));
                addon_containers += 1;
                terminated += usize::from(ended);
            }
            // The Deployment's one pod (two containers) is on node 0.
            if i == 0 {
                list.push(AddonOnNode {
                    addon: addon("dns", Controller::Deployment),
                    pods: 1,
                    ready: 1,
                });
                cs.restarts.push(Arc::new(PodRestarts {
                    namespace: "kube-system".into(),
                    pod: "dns-abc".into(),
                    node: Some(node_name(0).into()),
                    addon: Some(addon("dns", Controller::Deployment)),
                    containers: ["dns", "sidecar"]
                        .iter()
                        .map(|c| ContainerRestarts {
                            name: (*c).into(),
                            restarts: 0,
                            last_reason: None,
                            last_exit_code: None,
                        })
                        .collect(),
                }));
                addon_containers += 2;
            }
            node_addons += list.len();
            cs.addons.insert(node_name(i).into(), list);
            // Every node but the last holds pods.
            if i + 1 < s.nodes {
                cs.node_pods.insert(
                    node_name(i).into(),
                    NodePods {
                        requests: CpuMem {
                            cpu_cores: 1.0,
                            memory_bytes: 1e9,
                        },
                        limits: CpuMem::default(),
                        pods: 3,
                    },
                );
            }
        }
        cs.skipped.insert("bad_pod".into(), 1);
        v.insert("node_addons", node_addons as f64);
        v.insert("pod_nodes", cs.node_pods.len() as f64);
        v.insert("addon_containers", addon_containers as f64);
        v.insert("terminated_addon_containers", terminated as f64);
        v.insert("skip_reasons", cs.skipped.len() as f64);
        snap.cluster_state = Some(Arc::new(cs));

        // The node role's tasks: pod 0 has no cgroup yet; odd pods have limits.
        let mut tasks = vec![];
        let mut perf = vec![];
        let (mut measured, mut containers) = (0, 0);
        let (mut cpu_stat_pods, mut mem_limited) = (0, 0);
        let (mut cpu_stat_c, mut mem_limited_c) = (0, 0);
        let (mut requests, mut limits) = (0, 0);
        for p in 0..s.pods {
            let limited = p % 2 == 1;
            // Every third pod's cpu.stat has no CFS period counters.
            let cpu_stat = p % 3 != 2;
            let pod = Arc::new(TaskPod {
                uid: format!("uid-{p}"),
                namespace: "shop".into(),
                name: format!("web-{p}"),
                qos: "burstable".into(),
                cgroup_ids: vec![format!("uid-{p}")],
                labels: vec![],
                containers: (0..s.containers_per_pod)
                    .map(|c| TaskContainer {
                        name: format!("c{c}"),
                        id: Some(format!("id-{p}-{c}")),
                        ready: true,
                    })
                    .collect(),
                requests: [("cpu".to_string(), 0.1), ("memory".to_string(), 1e8)]
                    .into_iter()
                    .take(1 + p % 2)
                    .collect(),
                limits: if limited {
                    [("cpu".to_string(), 1.0), ("memory".to_string(), 2e8)]
                        .into_iter()
                        .collect()
                } else {
                    BTreeMap::new()
                },
            });
            requests += pod.requests.len();
            limits += pod.limits.len();
            let started = p != 0;
            if started {
                measured += 1;
                cpu_stat_pods += usize::from(cpu_stat);
                mem_limited += usize::from(limited);
                containers += s.containers_per_pod;
                cpu_stat_c += usize::from(cpu_stat) * s.containers_per_pod;
                mem_limited_c += usize::from(limited) * s.containers_per_pod;
                // Perf counters for started pods; with the hardware set only pod 1 had
                // cycles this interval.
                let hw = !s.software;
                let counts = if hw {
                    PerfCounts {
                        cycles: Some(1e9),
                        instructions: Some(1e9),
                        cache_references: Some(1e6),
                        cache_misses: Some(1e5),
                        ..PerfCounts::default()
                    }
                } else {
                    PerfCounts {
                        task_clock_seconds: Some(1.0),
                        context_switches: Some(100.0),
                        page_faults: Some(10.0),
                        ..PerfCounts::default()
                    }
                };
                perf.push(TaskPerfSample {
                    pod: pod.clone(),
                    counts,
                    ipc: (hw && p == 1).then_some(1.0),
                    cache_mpki: (hw && p == 1).then_some(0.1),
                    scaling_factor: Some(1.0),
                });
            }
            tasks.push(TaskSample {
                pod,
                stats: started.then(|| stats(limited, cpu_stat, s.numa_nodes)),
                containers: if started {
                    (0..s.containers_per_pod)
                        .map(|c| ContainerSample {
                            name: format!("c{c}"),
                            stats: stats(limited, cpu_stat, s.numa_nodes),
                        })
                        .collect()
                } else {
                    vec![]
                },
            });
        }
        v.insert("pods", s.pods as f64);
        v.insert("measured_pods", measured as f64);
        v.insert("containers", containers as f64);
        v.insert("cpu_stat_pods", cpu_stat_pods as f64);
        v.insert("memory_limited_pods", mem_limited as f64);
        v.insert("cpu_stat_containers", cpu_stat_c as f64);
        v.insert("memory_limited_containers", mem_limited_c as f64);
        v.insert("pod_requests", requests as f64);
        v.insert("pod_limits", limits as f64);
        v.insert("pressure", 6.0);
        v.insert("numa_nodes", s.numa_nodes as f64);
        let perf_ratio_pods = perf.iter().filter(|t| t.ipc.is_some()).count();
        v.insert("perf_pods", perf.len() as f64);
        v.insert("perf_ratio_pods", perf_ratio_pods as f64);
        v.insert("perf", 1.0);
        v.insert("hardware", f64::from(!s.software));
        v.insert("software", f64::from(s.software));
        v.insert("perf_failure_reasons", 1.0);
        snap.tasks = Some(Arc::new(TaskSet {
            node: "node-0".into(),
            tasks,
            collected_at: Some(now),
        }));
        snap.task_perf = Some(Arc::new(TaskPerfSet {
            node: "node-0".into(),
            event_set: Some(if s.software {
                PerfEventSet::Software
            } else {
                PerfEventSet::Hardware
            }),
            tasks: perf,
            open_failures: vec![("unsupported", 1)],
            open_counters: 8,
        }));
        snap.platform = Some(Arc::new(Platform {
            node: "node-0".into(),
            sockets: Some(1),
            cores: Some(s.cpus as u32 / 2),
            cpus: Some(s.cpus as u32),
            numa_nodes: Some(s.numa_nodes as u32),
            numa_memory: (0..s.numa_nodes as u32)
                .map(|node| NumaMemory {
                    node,
                    total_bytes: 4e9,
                    free_bytes: 1e9,
                })
                .collect(),
            cpu_busy_seconds: (0..s.cpus as u32).map(|c| (c, 10.0)).collect(),
            memory_usage_bytes: Some(3e9),
            vmstat: vec![
                ("pgfault", 1.0),
                ("pgmajfault", 0.0),
                ("pswpin", 0.0),
                ("pswpout", 0.0),
                ("oom_kill", 0.0),
            ],
        }));
        v.insert("cpus", s.cpus as f64);
        v.insert("platform", 1.0);
        v.insert("vmstat_keys", 5.0);
        snap.pressure = Some(Arc::new(kube_prober::model::NodePressure {
            node: "node-0".into(),
            totals: ["cpu", "memory", "io"]
                .into_iter()
                .flat_map(|resource| {
                    ["some", "full"].map(|kind| Pressure {
                        resource,
                        kind,
                        seconds: 1.5,
                    })
                })
                .collect(),
        }));
        v.insert("node_pressure", 6.0);

        // Probes: the first failed once.
        for p in 0..s.probes {
            let mut buckets = vec![0; PROBE_BUCKETS.len() + 1];
            buckets[3] = 2;
            snap.probes.push(ProbeState {
                probe: "http_get".into(),
                target: format!("http://t{p}/"),
                at: now,
                duration: Duration::from_millis(8),
                failure: None,
                runs: 2,
                failures: if p == 0 {
                    [("timeout".to_string(), 1)].into_iter().collect()
                } else {
                    BTreeMap::new()
                },
                buckets,
                duration_sum: 0.016,
            });
        }
        v.insert("probe_targets", s.probes as f64);
        v.insert("probe_failure_reasons", f64::from(s.probes > 0));

        // Sources: usage (succeeded, one error reason, one dropped reason) and two watchers
        // (one never succeeded; one relisted).
        let src = |name: &str, resource: Option<&str>, ok: bool| SourceStatus {
            name: name.into(),
            runs: 3,
            up: ok,
            last_success: ok.then_some(now),
            resource: resource.map(str::to_string),
            ..SourceStatus::default()
        };
        let mut usage = src("host", None, true);
        usage.errors.insert("io".into(), 1);
        usage.dropped.insert("negative".into(), 2);
        usage.usage_match = Some(kube_prober::model::UsageMatch {
            nodes_without_usage: 1,
            series_without_node: 2,
        });
        let mut nodes_w = src("watch_nodes", Some("nodes"), true);
        nodes_w.relists.insert("expired".into(), 1);
        nodes_w.watch_restarts.insert("closed".into(), 4);
        nodes_w.watch_restarts.insert("error".into(), 1);
        let pods_w = src("watch_pods", Some("pods"), false);
        for s in [usage, nodes_w, pods_w] {
            snap.sources.insert(s.name.clone(), s);
        }
        v.insert("sources", 3.0);
        v.insert("checked_sources", 1.0);
        v.insert("succeeded_sources", 2.0);
        v.insert("source_error_reasons", 1.0);
        v.insert("dropped_reasons", 1.0);
        v.insert("watch_restart_reasons", 2.0);
        v.insert("relist_reasons", 1.0);

        for k in 0..s.sinks {
            let mut sink = SinkStatus {
                name: format!("sink-{k}"),
                pushes: 2,
                points: 10,
                requests: 2,
                last_success: (k == 0).then_some(now),
                ..SinkStatus::default()
            };
            if k + 1 == s.sinks {
                sink.failures.insert("unavailable".into(), 2);
                sink.dropped.insert("unavailable".into(), 40);
            }
            snap.sinks.insert(sink.name.clone(), sink);
        }
        v.insert("sinks", s.sinks as f64);
        v.insert("succeeded_sinks", f64::from(s.sinks > 0));
        v.insert("sink_failure_reasons", f64::from(s.sinks > 0));
        v.insert("sink_drop_reasons", f64::from(s.sinks > 0));
        snap.leadership = Some(Leadership {
            lease: "kube-system/kube-prober".into(),
            leading: true,
            acquired: 1,
        });
        v.insert("leader", 1.0);
        // Sharded as the only shard of one, so every series is still emitted.
        snap.selection = Arc::new(Selection {
            shard: Some(Shard { index: 0, total: 1 }),
            ..Selection::default()
        });
        v.insert("sharded", 1.0);
        v.insert("auth", 1.0);
        v.insert("tls", 1.0);
        (snap, v)
    }

    /// The whole `/metrics` text of `snap`, with the serving families as the server adds them.
    pub fn exposition(snap: &Snapshot) -> String {
        let auth = kube_prober::serve::auth::AuthStats::default();
        let tls = kube_prober::serve::tls::TlsStats::default();
        let listener = kube_prober::serve::listener::ListenerStats::default();
        let mut families: Vec<(&'static Family, _)> = auth.families();
        families.extend(tls.families());
        families.extend(listener.families());
        let mut body = render(snap, Format::Text);
        body.push_str(&render_families(&families, Format::Text));
        body.push_str(&render_tail(snap, SystemTime::now(), Format::Text));
        body
    }
}

#[test]
fn every_family_has_a_documented_series_count_that_matches_the_exposition() {
    use counts::{Shape, documented_formulas, eval, exposition, fixture, series_per_family};
    let formulas = documented_formulas(&doc());
    let code: BTreeSet<String> = families::ALL
        .iter()
        .chain(families::SERVER)
        .map(|f| f.sample_name())
        .collect();
    let in_table: BTreeSet<String> = formulas.keys().cloned().collect();
    let missing: Vec<_> = code.difference(&in_table).collect();
    assert!(
        missing.is_empty(),
        "no series count documented for {missing:?}"
    );
    let stale: Vec<_> = in_table.difference(&code).collect();
    assert!(
        stale.is_empty(),
        "series table names unknown families {stale:?}"
    );

    let shapes = [
        Shape {
            nodes: 2,
            usage_nodes: 2,
            host_nodes: 1,
            windows: 2,
            pods: 3,
            containers_per_pod: 1,
            numa_nodes: 1,
            cpus: 4,
            daemonsets: 2,
            probes: 1,
            sinks: 1,
            software: true,
        },
        Shape {
            nodes: 3,
            usage_nodes: 2,
            host_nodes: 2,
            windows: 3,
            pods: 5,
            containers_per_pod: 2,
            numa_nodes: 2,
            cpus: 8,
            daemonsets: 3,
            probes: 2,
            sinks: 2,
            software: false,
        },
    ];
    let mut by_size = vec![];
    for shape in &shapes {
        let (snap, vars) = fixture(shape);
        let body = exposition(&snap);
        let actual = series_per_family(&body);
        let mut wrong = vec![];
        for (family, formula) in &formulas {
            let want = eval(formula, &vars)
                .unwrap_or_else(|e| panic!("{family}: formula `{formula}`: {e}"));
            let got = actual.get(family).copied().unwrap_or(0);
            if want != got as f64 {
                wrong.push(format!("{family}: `{formula}` = {want}, rendered {got}"));
            }
        }
        assert!(
            wrong.is_empty(),
            "{} nodes / {} pods: documented counts disagree:\n{}",
            shape.nodes,
            shape.pods,
            wrong.join("\n")
        );
        by_size.push(actual);
    }
    // The fixtures exercise every family (a formula checked only at 0 proves little; the
    // perf event sets are one per fixture), and the two sizes differ where the formulas scale.
    for family in &code {
        assert!(
            by_size
                .iter()
                .any(|m| m.get(family).copied().unwrap_or(0) > 0),
            "{family} has no series in either fixture"
        );
    }
    let grew = code
        .iter()
        .filter(|f| by_size[0].get(*f) != by_size[1].get(*f))
        .count();
    assert!(grew > code.len() / 2, "only {grew} families change size");
}

#[test]
fn series_formulas_evaluate() {
    use counts::eval;
    let vars: std::collections::BTreeMap<&str, f64> = [("a", 2.0), ("b", 3.0)].into();
    assert_eq!(eval("a × (1 + 2 × b)", &vars), Ok(14.0));
    assert_eq!(eval("a * b + 1", &vars), Ok(7.0));
    assert_eq!(eval("4", &vars), Ok(4.0));
    assert!(eval("a × c", &vars).is_err());
    assert!(eval("a ×", &vars).is_err());
    assert!(eval("(a + b", &vars).is_err());
}
