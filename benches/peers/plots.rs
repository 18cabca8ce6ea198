//! The peers bench's pictures (docs/benchmarks.md and docs/trimaran.md show them), drawn from
//! the run that just ended and from the records of earlier runs at other sizes.
//!
//! Each run writes its figures as `PLOTS_DIR/peers-<nodes>x<pods per node>.json` (a run at the
//! same size replaces it), then draws into `PLOTS_DIR` (`target/plots` unless set):
//! - `peers-cpu-vs-changes.svg`: CPU against pod changes a second (idle at 0), this run;
//! - `peers-memory-vs-nodes.svg` and `peers-cpu-vs-nodes.svg`: steady RSS and idle CPU against
//!   the node count, one point per record with this run's pods per node;
//! - `watcher-staleness.svg`: the share of `/watcher` answers at most so old, kube-prober's
//!   drop-in beside load-watcher, this run.
//!
//! Every chart names the commits its points were measured on.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde_json::{Value, json};
use support::plot::{self, Chart, Series};

use super::{Report, Settings};

/// This run's figures as the record the plots read.
pub fn record(s: &Settings, r: &Report, commit: &str) -> Value {
    let cluster: Vec<Value> = r
        .cluster
        .peers
        .iter()
        .map(|f| {
            let churn: Vec<[f64; 2]> = r
                .cluster
                .churn_achieved
                .iter()
                .zip(&f.churn_cpu)
                .map(|(a, c)| [*a, *c])
                .collect();
            json!({"name": f.name, "rss_steady_mib": f.rss_steady, "idle_cpu_ms_per_s": f.idle_cpu,
                   "churn_cpu_ms_per_s": churn})
        })
        .collect();
    let watcher: Vec<Value> = r
        .watcher
        .peers
        .iter()
        .map(|f| json!({"name": f.name, "rss_mib": f.rss, "ages_s": f.ages}))
        .collect();
    json!({
        "nodes": s.nodes,
        "pods_per_node": s.pods_per_node,
        "commit": commit,
        "started": r.started,
        "command": s.command(),
        "cluster": cluster,
        "watcher": watcher,
    })
}

/// Writes this run's record and draws every chart into `dir`.
pub fn draw(dir: &Path, this: &Value) {
    let (n, p) = (num(this, "nodes"), num(this, "pods_per_node"));
    let name = format!("peers-{n}x{p}.json");
    let saved = std::fs::create_dir_all(dir).and_then(|()| {
        let text = serde_json::to_string_pretty(this).map_err(std::io::Error::other)?;
        std::fs::write(dir.join(&name), text + "\n")
    });
    if let Err(e) = saved {
        eprintln!("plot: writing {}: {e}", dir.join(&name).display());
    }
    plot::write(dir, "peers-cpu-vs-changes", &cpu_vs_changes(this));
    let records = read_records(dir, p);
    plot::write(
        dir,
        "peers-memory-vs-nodes",
        &by_nodes(&records, p, Measure::Rss),
    );
    plot::write(
        dir,
        "peers-cpu-vs-nodes",
        &by_nodes(&records, p, Measure::IdleCpu),
    );
    plot::write(dir, "watcher-staleness", &staleness(this));
}

fn num(v: &Value, key: &str) -> u64 {
    v.get(key).and_then(Value::as_u64).unwrap_or(0)
}

fn text<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

fn list<'a>(v: &'a Value, key: &str) -> &'a [Value] {
    v.get(key)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

fn f(v: &Value, key: &str) -> f64 {
    v.get(key).and_then(Value::as_f64).unwrap_or(f64::NAN)
}

fn note(commits: &BTreeSet<String>, command: &str) -> String {
    let c: Vec<&str> = commits.iter().map(String::as_str).collect();
    format!("measured on {}: {command}", c.join(", "))
}

/// CPU (ms/s) against achieved pod changes a second, idle at 0, one line per exporter.
fn cpu_vs_changes(this: &Value) -> Chart {
    let mut chart = Chart::new(
        format!(
            "CPU under pod churn ({} nodes × {} pods)",
            num(this, "nodes"),
            num(this, "pods_per_node")
        ),
        "pod changes a second (0: idle, node heartbeats only)",
        "CPU, ms per second",
    )
    .note(note(
        &BTreeSet::from([text(this, "commit").to_string()]),
        "cargo bench --bench peers",
    ));
    for peer in list(this, "cluster") {
        let mut points = vec![(0.0, f(peer, "idle_cpu_ms_per_s"))];
        for pair in list(peer, "churn_cpu_ms_per_s") {
            let at = |i: usize| pair.get(i).and_then(Value::as_f64).unwrap_or(f64::NAN);
            points.push((at(0), at(1)));
        }
        chart = chart.series(Series::new(text(peer, "name"), points));
    }
    chart
}

/// Every `peers-*x<pods_per_node>.json` record in `dir`, by node count.
fn read_records(dir: &Path, pods_per_node: u64) -> BTreeMap<u64, Value> {
    let mut out = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let file = e.file_name().to_string_lossy().into_owned();
        if !(file.starts_with("peers-") && file.ends_with(&format!("x{pods_per_node}.json"))) {
            continue;
        }
        let parsed = std::fs::read_to_string(e.path())
            .map_err(|e| e.to_string())
            .and_then(|t| serde_json::from_str::<Value>(&t).map_err(|e| e.to_string()));
        match parsed {
            Ok(v) if num(&v, "pods_per_node") == pods_per_node => {
                out.insert(num(&v, "nodes"), v);
            }
            Ok(_) => eprintln!("plot: {file}: not a record of {pods_per_node} pods per node"),
            Err(err) => eprintln!("plot: {file}: skipped, {err}"),
        }
    }
    out
}

#[derive(Clone, Copy)]
enum Measure {
    Rss,
    IdleCpu,
}

/// One exporter's line per name, one point per record.
fn by_nodes(records: &BTreeMap<u64, Value>, pods_per_node: u64, m: Measure) -> Chart {
    let (title, y, key) = match m {
        Measure::Rss => (
            "Memory against cluster size",
            "RSS, MiB (steady)",
            "rss_steady_mib",
        ),
        Measure::IdleCpu => (
            "Idle CPU against cluster size (node heartbeats)",
            "CPU, ms per second",
            "idle_cpu_ms_per_s",
        ),
    };
    let mut lines: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    let mut commits = BTreeSet::new();
    for (nodes, rec) in records {
        commits.insert(text(rec, "commit").to_string());
        for peer in list(rec, "cluster") {
            let line = lines.entry(text(peer, "name").to_string()).or_default();
            line.push((*nodes as f64, f(peer, key)));
        }
    }
    let mut chart = Chart::new(
        format!("{title}, {pods_per_node} pods per node"),
        "kwok nodes",
        y,
    )
    .note(note(&commits, "NODES=… cargo bench --bench peers"));
    for (name, points) in lines {
        chart = chart.series(Series::new(name, points));
    }
    chart
}

/// The share of `/watcher` answers no older than each age, one line per peer.
fn staleness(this: &Value) -> Chart {
    let mut chart = Chart::new(
        format!(
            "How old /watcher's answers are ({} nodes)",
            num(this, "nodes")
        ),
        "age of the answer's newest sample, s",
        "share of answers at most that old",
    )
    .note(note(
        &BTreeSet::from([text(this, "commit").to_string()]),
        "cargo bench --bench peers",
    ));
    for peer in list(this, "watcher") {
        let mut ages: Vec<f64> = list(peer, "ages_s")
            .iter()
            .filter_map(Value::as_f64)
            .collect();
        ages.sort_by(f64::total_cmp);
        chart = chart.series(Series::new(text(peer, "name"), plot::cdf(&ages)));
    }
    chart
}
