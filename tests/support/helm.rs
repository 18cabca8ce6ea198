//! Shared by the Helm tests (tests/helm_*.rs): where the Helm binary is (built from its Go module
//! by tests/upstream/build.sh, never a skip when missing) and running it with its own state
//! folders, so a developer's repositories, plugins and kubeconfig never leak in.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The repository root.
pub fn repo() -> PathBuf {
    crate::repo_root()
}

/// The chart.
pub fn chart() -> PathBuf {
    repo().join("charts/kube-prober")
}

/// Where tests/upstream/build.sh links the upstream binaries: `KUBE_PROBER_UPSTREAM_BIN`, else
/// `target/upstream/bin` of this checkout (the script's default).
pub fn upstream_bin() -> PathBuf {
    match std::env::var_os("KUBE_PROBER_UPSTREAM_BIN") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => repo().join("target/upstream/bin"),
    }
}

/// The Helm binary (v3.22.0, tests/upstream/helm). Missing is a failure naming the script that
/// builds it.
pub fn helm() -> PathBuf {
    let p = upstream_bin().join("helm");
    assert!(
        p.is_file(),
        "{} not found: build it with `tests/upstream/build.sh helm` (Go >= 1.26; it builds Helm \
         from the module pinned in tests/upstream/helm and links it there; \
         KUBE_PROBER_UPSTREAM_BIN names another folder)",
        p.display()
    );
    p
}

/// A `helm` command with its config, cache and data folders under `state` (created), no
/// kubeconfig unless the caller sets one, and no colour.
pub fn helm_command(state: &Path) -> Command {
    for d in ["config", "cache", "data"] {
        std::fs::create_dir_all(state.join(d)).expect("helm state folders");
    }
    let mut cmd = Command::new(helm());
    cmd.env("HELM_CONFIG_HOME", state.join("config"))
        .env("HELM_CACHE_HOME", state.join("cache"))
        .env("HELM_DATA_HOME", state.join("data"))
        .env("KUBECONFIG", state.join("no-kubeconfig"))
        .env("NO_COLOR", "1")
        .env_remove("HELM_NAMESPACE")
        .env_remove("HELM_KUBECONTEXT");
    cmd
}

/// A folder for Helm's state, unique per call, under the test target's temporary folder.
pub fn state_dir(tag: &str) -> PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    let d = crate::target_tmpdir().join(format!(
        "helm-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&d).expect("state dir");
    d
}

/// Runs a prepared command; the output.
pub fn run(cmd: Command) -> Output {
    let what = format!("{cmd:?}");
    crate::owned::output(cmd, None).unwrap_or_else(|e| panic!("running {what}: {e}"))
}

/// `helm template RELEASE charts/kube-prober --namespace NAMESPACE -f FILE... --set S...`:
/// the rendered text, or Helm's error text when it refuses.
pub fn template(
    release: &str,
    namespace: &str,
    values_files: &[PathBuf],
    set: &[&str],
) -> Result<String, String> {
    let state = state_dir("template");
    let mut cmd = helm_command(&state);
    cmd.arg("template")
        .arg(release)
        .arg(chart())
        .args(["--namespace", namespace]);
    for f in values_files {
        cmd.arg("--values").arg(f);
    }
    for s in set {
        cmd.args(["--set", s]);
    }
    let out = run(cmd);
    let _ = std::fs::remove_dir_all(&state);
    if out.status.success() {
        Ok(String::from_utf8(out.stdout).expect("utf-8 render"))
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}
