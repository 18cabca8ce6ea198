//! Real-world inputs: every file of `tests/fixtures/corpus/` (captured on real systems or
//! written from the formats' documentation; its README.md says which, file by file) run through
//! the parser of its kind. Each file has its expected outcome in a table of the module of its
//! kind: a value (the exact parsed value of the fields that matter) or a skip or error with its
//! reason. Where the values go through the hub, they are recorded into a `Store` and the
//! dropped values are asserted by reason in its snapshot. A file without a row, or a row
//! without a file, fails the walk.

mod cgroup;
mod kubernetes;
mod node_metrics;
mod proc;
mod prometheus;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The corpus folder of one kind (`proc`, `cgroup-v1`, ...).
pub fn folder(kind: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/corpus")
        .join(kind)
}

/// The bytes of one corpus file.
pub fn read(kind: &str, name: &str) -> Vec<u8> {
    let p = folder(kind).join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The names of the entries (files or case folders) of a kind's folder, sorted.
pub fn entries(kind: &str) -> Vec<String> {
    let dir = folder(kind);
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Every entry of `kind` has a row in `rows` and every row an entry.
pub fn assert_every_entry_has_a_row<'a>(kind: &str, rows: impl IntoIterator<Item = &'a str>) {
    let rows: BTreeSet<&str> = rows.into_iter().collect();
    let on_disk = entries(kind);
    let on_disk: BTreeSet<&str> = on_disk.iter().map(String::as_str).collect();
    let no_row: Vec<_> = on_disk.difference(&rows).collect();
    let no_file: Vec<_> = rows.difference(&on_disk).collect();
    assert!(
        no_row.is_empty() && no_file.is_empty(),
        "{kind}: files without an expected outcome {no_row:?}, outcomes without a file {no_file:?}"
    );
}

/// Every file under `dir`, as paths relative to `base`, sorted.
fn files_under(base: &Path, dir: &Path, out: &mut Vec<String>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            files_under(base, &p, out);
        } else {
            out.push(p.strip_prefix(base).unwrap().to_string_lossy().into_owned());
        }
    }
}

/// The corpus README names where every file comes from: each file, or the case folder holding
/// it, has a row.
#[test]
fn the_readme_names_the_origin_of_every_file() {
    let base = folder("");
    let readme = std::fs::read_to_string(base.join("README.md")).unwrap();
    let mut files = Vec::new();
    files_under(&base, &base, &mut files);
    files.sort();
    let unnamed: Vec<&String> = files
        .iter()
        .filter(|f| f.as_str() != "README.md")
        .filter(|f| {
            // `cgroup-v1/case/memory/memory.stat` is named by its case, `cgroup-v1/case/`.
            let parts: Vec<&str> = f.split('/').collect();
            let entry = format!("`{}`", parts[..2].join("/"));
            let case = format!("`{}/`", parts[..2].join("/"));
            !readme.contains(&entry) && !readme.contains(&case)
        })
        .collect();
    assert!(
        unnamed.is_empty(),
        "files the README does not name: {unnamed:?}"
    );
}
