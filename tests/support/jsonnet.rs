//! go-jsonnet's `jsonnet` (tests/upstream/jsonnet), which evaluates the monitoring mixin
//! (`mixin/`) into the files under `dashboards/`. Built from its pinned Go module by
//! `tests/upstream/build.sh jsonnet`, linked into `target/upstream/bin` or
//! `$KUBE_PROBER_UPSTREAM_BIN`; a missing binary is a failure naming the script, never a skip.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;

/// The `jsonnet` binary (go-jsonnet v0.22.0). Missing is a failure naming the script that
/// builds it.
pub fn jsonnet() -> PathBuf {
    let p = crate::helm::upstream_bin().join("jsonnet");
    assert!(
        p.is_file(),
        "{} not found: build it with `tests/upstream/build.sh jsonnet` (Go >= 1.26; it builds \
         go-jsonnet from the module pinned in tests/upstream/jsonnet and links it there; \
         KUBE_PROBER_UPSTREAM_BIN names another folder)",
        p.display()
    );
    p
}

/// Runs `jsonnet ARGS...` in the repository root; its standard output, or a panic with its
/// standard error.
pub fn run(args: &[&str]) -> String {
    let mut cmd = Command::new(jsonnet());
    cmd.args(args).current_dir(crate::repo_root());
    let what = format!("{cmd:?}");
    let out = crate::owned::output(cmd, None).unwrap_or_else(|e| panic!("running {what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap_or_else(|e| panic!("{what}: output not UTF-8: {e}"))
}
