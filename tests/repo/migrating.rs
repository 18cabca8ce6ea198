//! docs/migrating.md's mapping tables against the program: every name in a `kube-prober` cell
//! exists (a flag in `kube-prober --help` as docs/cli.md holds it, a command there, an
//! environment variable the code reads, a config file key of tests/golden/config-keys.txt, a
//! metric family of `families::ALL`, an OTLP name, an endpoint of docs/endpoints.md), and a row
//! without one says "no equivalent" and why. A rename fails here until the page follows.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use kube_prober::outputs::families::{self, Semconv};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// One row of a mapping table: (section, theirs, kube-prober cell, notes).
type Row = (String, String, String, String);

/// Every row of every `| theirs | what | kube-prober | notes |` table, with the `##` section it
/// is under.
fn mapping_rows(doc: &str) -> Vec<Row> {
    let mut rows = Vec::new();
    let (mut section, mut in_table) = (String::new(), false);
    for line in doc.lines() {
        if let Some(title) = line.strip_prefix("## ") {
            section = title.to_string();
        }
        if line.starts_with("| theirs | what | kube-prober | notes |") {
            in_table = true;
            continue;
        }
        if !line.starts_with('|') {
            in_table = false;
            continue;
        }
        if !in_table || line.starts_with("|---") {
            continue;
        }
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        assert_eq!(cells.len(), 4, "docs/migrating.md: not four cells: {line}");
        rows.push((
            section.clone(),
            cells[0].to_string(),
            cells[2].to_string(),
            cells[3].to_string(),
        ));
    }
    rows
}

/// The code spans of a cell.
fn spans(cell: &str) -> Vec<&str> {
    cell.split('`').skip(1).step_by(2).collect()
}

/// What the program has, to look names up in.
struct Known {
    cli: String,
    config_keys: BTreeSet<String>,
    env_literals: String,
    families: BTreeSet<String>,
    otlp: BTreeSet<&'static str>,
    endpoints: String,
}

impl Known {
    fn load() -> Known {
        let mut src = String::new();
        collect_rs(&root().join("src"), &mut src);
        let config_keys = read(&root().join("tests/golden/config-keys.txt"))
            .lines()
            .filter(|l| !l.starts_with('#') && !l.starts_with(' ') && !l.is_empty())
            .map(str::to_string)
            .collect();
        let families = families::ALL
            .iter()
            .flat_map(|f| [f.name.to_string(), f.sample_name()])
            .chain(families::SERVER.iter().map(|f| f.sample_name()))
            .collect();
        let otlp = Semconv::ALL
            .iter()
            .flat_map(|s| s.metrics().iter().map(|m| m.name))
            .collect();
        Known {
            cli: read(&root().join("docs/cli.md")),
            config_keys,
            env_literals: src,
            families,
            otlp,
            endpoints: read(&root().join("docs/endpoints.md")),
        }
    }

    /// Why `name` (a code span of a `kube-prober` cell) does not exist, or `None` when it does.
    fn missing(&self, name: &str) -> Option<String> {
        if let Some(command) = name.strip_prefix("kube-prober ") {
            let heading = format!("## `kube-prober {command} --help`");
            return (!self.cli.contains(&heading))
                .then(|| format!("command `{name}` has no `--help` in docs/cli.md"));
        }
        if name.starts_with("--") {
            let flag = name.split([' ', '=']).next().unwrap_or(name);
            let listed = self.cli.contains(&format!("{flag} <"))
                || self.cli.contains(&format!("{flag}\n"))
                || self.cli.contains(&format!("{flag} "));
            return (!listed).then(|| format!("flag `{flag}` is not in docs/cli.md"));
        }
        if name.starts_with('/') {
            let path = name.split([' ', '?']).next().unwrap_or(name);
            return (!self.endpoints.contains(&format!("{path}`")))
                .then(|| format!("endpoint `{path}` is not in docs/endpoints.md"));
        }
        if name.starts_with("kube_prober_") {
            let family = name.split('{').next().unwrap_or(name);
            return (!self.families.contains(family))
                .then(|| format!("metric family `{family}` is not declared"));
        }
        if name.contains('.') {
            return (!self.otlp.contains(name))
                .then(|| format!("OTLP metric `{name}` is not sent under any --otlp-semconv"));
        }
        let variable = name.split('=').next().unwrap_or(name);
        if !variable.is_empty()
            && variable
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
        {
            return (!self.env_literals.contains(&format!("\"{variable}\"")))
                .then(|| format!("environment variable `{variable}` is not read in src/"));
        }
        if name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        {
            return (!self.config_keys.contains(name))
                .then(|| format!("config key `{name}` is not in tests/golden/config-keys.txt"));
        }
        Some(format!("`{name}` is no kind of name this check knows"))
    }
}

fn collect_rs(dir: &Path, out: &mut String) {
    for e in std::fs::read_dir(dir).expect("read src") {
        let p = e.expect("a directory entry").path();
        if p.is_dir() {
            collect_rs(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push_str(&read(&p));
        }
    }
}

/// What is wrong with `rows`, one message each.
fn problems(rows: &[Row], known: &Known) -> Vec<String> {
    let mut out = Vec::new();
    for (section, theirs, ours, notes) in rows {
        let at = format!("docs/migrating.md, {section}, {theirs}");
        let names = spans(ours);
        if names.is_empty() {
            if ours != "no equivalent" {
                out.push(format!(
                    "{at}: `{ours}` names nothing and is not \"no equivalent\""
                ));
            } else if !notes.starts_with("because ") {
                out.push(format!("{at}: \"no equivalent\" without \"because ...\""));
            }
            continue;
        }
        for n in names {
            if let Some(why) = known.missing(n) {
                out.push(format!("{at}: {why}"));
            }
        }
    }
    out
}

#[test]
fn every_mapped_name_exists_and_every_gap_says_why() {
    let doc = read(&root().join("docs/migrating.md"));
    let rows = mapping_rows(&doc);
    for section in [
        "From gke-prober",
        "From WCA's Kubernetes integration",
        "From load-watcher",
    ] {
        let n = rows.iter().filter(|r| r.0 == section).count();
        assert!(n >= 10, "docs/migrating.md: {n} rows under {section}");
    }
    let bad = problems(&rows, &Known::load());
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// The check itself: a renamed flag, variable, key, family, command, endpoint and OTLP name
/// are each reported, and so is a gap without a reason.
#[test]
fn the_mapping_check_names_each_stale_name() {
    let known = Known::load();
    let row = |ours: &str, notes: &str| {
        (
            "S".to_string(),
            "x".to_string(),
            ours.to_string(),
            notes.to_string(),
        )
    };
    let rows = vec![
        row("`--interval`, `KUBE_PROBER_INTERVAL`, `interval`", ""),
        row(
            "`kube_prober_task_up`, `kube_prober_probe_duration_seconds{probe=\"x\"}`",
            "",
        ),
        row(
            "`/watcher/health`, `kube-prober gcm descriptors delete`",
            "",
        ),
        row("`k8s.node.cpu.allocatable`, `k8s.node.allocatable_cpu`", ""),
        row("no equivalent", "because it is gone"),
        row("`--intervall`", ""),
        row("`KUBE_PROBER_INTERVALL`", ""),
        row("`intervall`", ""),
        row("`kube_prober_task_upp`", ""),
        row("`kube-prober gcm descriptors purge`", ""),
        row("`/watcherz`", ""),
        row("`k8s.node.allocatable.cpu`", ""),
        row("no equivalent", "it is gone"),
        row("nothing", ""),
        row("`Mixed-Case`", ""),
    ];
    let bad = problems(&rows, &known);
    let want = [
        "flag `--intervall`",
        "environment variable `KUBE_PROBER_INTERVALL`",
        "config key `intervall`",
        "metric family `kube_prober_task_upp`",
        "command `kube-prober gcm descriptors purge`",
        "endpoint `/watcherz`",
        "OTLP metric `k8s.node.allocatable.cpu`",
        "without \"because ...\"",
        "names nothing",
        "no kind of name",
    ];
    assert_eq!(bad.len(), want.len(), "{bad:#?}");
    for (b, w) in bad.iter().zip(want) {
        assert!(b.contains(w), "{b} should name {w}");
    }
}
