//! docs/compatibility.md against the pins CI builds: every folder of `tests/upstream/` has a
//! row whose version is its `build.env`'s `VERSION`, a row naming a module of a `go.mod` has
//! that module's version, the Go row is every `go.mod`'s `go` directive, the Rust row is
//! `Cargo.toml`'s `rust-version`, and every file a row names exists. Folders are found, not
//! listed here: a new one fails until its row is written.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// One row of the matrix: component, version and the "pinned in" cell, all without backticks
/// around the version.
#[derive(Debug, Clone)]
struct Row {
    component: String,
    version: String,
    pinned_in: String,
}

impl Row {
    /// The code spans of the "pinned in" cell: the file first, then what in it (a module, a
    /// directive). None when the cell does not start with a file (the machine's packages).
    fn spans(&self) -> Vec<&str> {
        if !self.pinned_in.starts_with('`') {
            return Vec::new();
        }
        self.pinned_in.split('`').skip(1).step_by(2).collect()
    }
}

/// The rows of the matrix table (`| component | version | pinned in | ... |`).
fn matrix(doc: &str) -> Vec<Row> {
    let mut rows = Vec::new();
    let mut in_table = false;
    for line in doc.lines() {
        if line.starts_with("| component | version | pinned in |") {
            in_table = true;
            continue;
        }
        if !in_table || line.starts_with("|---") {
            continue;
        }
        if !line.starts_with('|') {
            break;
        }
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        assert!(cells.len() >= 4, "docs/compatibility.md: short row {line}");
        rows.push(Row {
            component: cells[0].to_string(),
            version: cells[1].trim_matches('`').to_string(),
            pinned_in: cells[2].to_string(),
        });
    }
    assert!(
        !rows.is_empty(),
        "docs/compatibility.md has no matrix table"
    );
    rows
}

fn doc_rows() -> Vec<Row> {
    matrix(&read(&root().join("docs/compatibility.md")))
}

/// `KEY=value` of a `build.env` (the value unquoted).
fn env_value(text: &str, key: &str) -> Option<String> {
    text.lines()
        .filter_map(|l| l.trim().strip_prefix(&format!("{key}=")))
        .map(|v| v.trim().trim_matches('"').to_string())
        .next()
}

/// The version a `go.mod` requires of `module` (a `replace` to a version wins).
fn module_version(go_mod: &str, module: &str) -> Option<String> {
    let mut required = None;
    let mut replaced = None;
    for line in go_mod.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let words = match words.first() {
            Some(&"require") | Some(&"replace") => &words[1..],
            _ => &words[..],
        };
        match words {
            [m, "=>", _, v, ..] if *m == module => replaced = Some(v.to_string()),
            [m, v, ..] if *m == module && v.starts_with('v') => required = Some(v.to_string()),
            _ => {}
        }
    }
    replaced.or(required)
}

/// The `go` directive of a `go.mod`, as major.minor.
fn go_directive(go_mod: &str) -> Option<String> {
    let v = go_mod
        .lines()
        .find_map(|l| l.strip_prefix("go "))?
        .trim()
        .to_string();
    Some(v.split('.').take(2).collect::<Vec<_>>().join("."))
}

/// The folders of `tests/upstream/` that hold a `build.env`, by name.
fn upstream_folders() -> BTreeMap<String, PathBuf> {
    let dir = root().join("tests/upstream");
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(&dir).expect("tests/upstream") {
        let p = e.expect("a directory entry").path();
        if p.join("build.env").is_file() {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            out.insert(name, p);
        }
    }
    assert!(out.len() >= 5, "{out:?}");
    out
}

/// The mismatches of `rows` against the repository's files, one message each.
fn mismatches(rows: &[Row]) -> Vec<String> {
    let mut out = Vec::new();
    for (name, dir) in upstream_folders() {
        let file = format!("tests/upstream/{name}/build.env");
        let version = env_value(&read(&dir.join("build.env")), "VERSION")
            .unwrap_or_else(|| panic!("{file} sets no VERSION"));
        let mine: Vec<&Row> = rows
            .iter()
            .filter(|r| r.spans().first() == Some(&file.as_str()))
            .collect();
        if mine.is_empty() {
            out.push(format!(
                "tests/upstream/{name} has no row in docs/compatibility.md: add \
                 `| <component> | `{version}` | `{file}` | <what the tests do with it> |`"
            ));
        }
        for r in mine {
            if r.version != version {
                out.push(format!(
                    "docs/compatibility.md, {}: `{}` but {file} has VERSION={version}",
                    r.component, r.version
                ));
            }
        }
    }
    for r in rows {
        out.extend(check_row(r));
    }
    out
}

/// One row against the file it names (build.env rows are checked per folder above).
fn check_row(r: &Row) -> Vec<String> {
    let spans = r.spans();
    let Some(file) = spans.first() else {
        return Vec::new();
    };
    let what = spans.get(1).copied();
    let at = |got: Option<String>| match got {
        Some(v) if v == r.version => None,
        got => Some(format!(
            "docs/compatibility.md, {}: `{}` but `{file}` {} has {got:?}",
            r.component,
            r.version,
            what.unwrap_or_default()
        )),
    };
    if *file == "tests/upstream/*/go.mod" {
        return upstream_folders()
            .values()
            .filter_map(|d| {
                let got = go_directive(&read(&d.join("go.mod")));
                at(got).map(|m| format!("{m} ({})", d.display()))
            })
            .collect();
    }
    let path = root().join(file);
    if !path.exists() {
        return vec![format!(
            "docs/compatibility.md, {}: `{file}` does not exist",
            r.component
        )];
    }
    let got = match (file.rsplit('/').next(), what) {
        (Some("go.mod"), Some(module)) => module_version(&read(&path), module),
        (Some("Cargo.toml"), Some("rust-version")) => read(&path)
            .lines()
            .find_map(|l| l.strip_prefix("rust-version = "))
            .map(|v| v.trim_matches('"').to_string()),
        (Some("test"), None) if file.starts_with(".ci/") => {
            let text = read(&path);
            let needle = format!("kubectl {}", r.version);
            return if text.contains(&needle) {
                Vec::new()
            } else {
                vec![format!(
                    "docs/compatibility.md, {}: `{file}` does not say `{needle}`",
                    r.component
                )]
            };
        }
        _ => return Vec::new(),
    };
    at(got).into_iter().collect()
}

#[test]
fn the_compatibility_matrix_matches_what_ci_builds() {
    let rows = doc_rows();
    let bad = mismatches(&rows);
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    // The rows the matrix must have beside the folders'.
    for (component, pinned) in [
        ("Trimaran", "sigs.k8s.io/scheduler-plugins"),
        ("Go", "go"),
        ("Rust", "rust-version"),
        ("kubectl", ".ci/test"),
    ] {
        assert!(
            rows.iter()
                .any(|r| r.component.contains(component) && r.spans().contains(&pinned)),
            "docs/compatibility.md has no {component} row pinned in `{pinned}`"
        );
    }
}

/// The check itself: a wrong version, a missing folder row and a file that is gone are each
/// reported, with the row to add.
#[test]
fn the_matrix_check_names_each_drift() {
    let mut rows = doc_rows();
    let etcd = rows
        .iter_mut()
        .find(|r| r.pinned_in.contains("tests/upstream/etcd/build.env"))
        .expect("an etcd row");
    etcd.version = "v0.0.1".into();
    let kwok_at = rows
        .iter()
        .position(|r| r.pinned_in.contains("tests/upstream/kwok/build.env"))
        .expect("a kwok row");
    rows.remove(kwok_at);
    let trimaran = rows
        .iter_mut()
        .find(|r| r.pinned_in.contains("sigs.k8s.io/scheduler-plugins"))
        .expect("a Trimaran row");
    trimaran.version = "v0.0.2".into();
    rows.push(Row {
        component: "gone".into(),
        version: "v1".into(),
        pinned_in: "`tests/upstream/gone/go.mod`: `example.com/gone`".into(),
    });
    let bad = mismatches(&rows).join("\n");
    assert!(
        bad.contains("etcd")
            && bad.contains("`v0.0.1` but tests/upstream/etcd/build.env has VERSION="),
        "{bad}"
    );
    assert!(
        bad.contains("tests/upstream/kwok has no row in docs/compatibility.md: add")
            && bad.contains("`tests/upstream/kwok/build.env`"),
        "{bad}"
    );
    assert!(
        bad.contains("`v0.0.2` but `tests/upstream/kubernetes/go.mod`"),
        "{bad}"
    );
    assert!(
        bad.contains("`tests/upstream/gone/go.mod` does not exist"),
        "{bad}"
    );
    assert_eq!(bad.lines().count(), 4, "{bad}");
}

#[test]
fn go_mod_versions_are_read_with_replaces_winning() {
    let go_mod = "module m\n\ngo 1.26.0\n\nrequire (\n\tk8s.io/kubernetes v1.34.7 // indirect\n\tsigs.k8s.io/x v0.1.0\n)\n\nrequire example.com/one v1.2.3\n\nreplace (\n\tk8s.io/kubernetes => k8s.io/kubernetes v1.34.4\n)\n";
    assert_eq!(
        module_version(go_mod, "k8s.io/kubernetes").as_deref(),
        Some("v1.34.4")
    );
    assert_eq!(
        module_version(go_mod, "sigs.k8s.io/x").as_deref(),
        Some("v0.1.0")
    );
    assert_eq!(
        module_version(go_mod, "example.com/one").as_deref(),
        Some("v1.2.3")
    );
    assert_eq!(module_version(go_mod, "example.com/none"), None);
    assert_eq!(go_directive(go_mod).as_deref(), Some("1.26"));
    assert_eq!(
        env_value("# c\nVERSION=v3.6.6\nBINARIES=\"a=b\"\n", "VERSION").as_deref(),
        Some("v3.6.6")
    );
}
