//! Test support for kube-prober's integration tests, benches and examples: a dev-only crate of
//! the workspace (`tests/support/Cargo.toml`), compiled once and linked into every test binary.
//! Its root holds starting and stopping the built binary (`Prober`, `run_binary`), golden
//! files, promtool and polling helpers; each module is one stand-in or one real component's
//! harness (tests/README.md lists them). Every process they start goes through [`owned`], so
//! that it ends with the test process.
#![allow(dead_code)]

pub mod apiserver;
pub mod cgroup_guard;
pub mod control_plane;
pub mod dashboards;
pub mod deploy;
pub mod fake_prom;
pub mod fake_signalfx;
pub mod gcm;
pub mod helm;
pub mod jsonnet;
pub mod kubelet;
pub mod otelcol;
pub mod otlp;
pub mod owned;
pub mod plot;
pub mod populate;
pub mod ports;
pub mod prom;
pub mod push;
pub mod skip;
pub mod soak;
pub mod task_fixture;
pub mod trimaran;

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// What the golden files hold in place of this crate's version.
pub const GOLDEN_VERSION: &str = "CRATE_VERSION";

/// `actual` with this crate's version in `kube_prober_build_info` replaced by
/// [`GOLDEN_VERSION`].
pub fn golden_version(actual: &str) -> String {
    let version = |v: &str| format!("kube_prober_build_info{{version=\"{v}\"}}");
    actual.replace(
        &version(env!("CARGO_PKG_VERSION")),
        &version(GOLDEN_VERSION),
    )
}

/// Panics when the `CI` environment variable is set: `var` (an `UPDATE_*` switch that rewrites
/// checked-in files and passes) must never turn a comparison into a rewrite there.
pub fn refuse_update_in_ci(var: &str) {
    if std::env::var_os("CI").is_some() {
        panic!(
            "{var} is set while CI is: refusing to rewrite checked-in files in CI (a rewrite \
             always passes); unset {var} to compare, or run it outside CI and commit the result"
        );
    }
}

/// Compares `actual` with `tests/golden/<name>`; `UPDATE_GOLDEN=1` rewrites the file instead
/// (refused under `CI`: there a golden file is only ever compared). The crate version in
/// `kube_prober_build_info` is written as [`GOLDEN_VERSION`], so a version bump leaves the
/// golden files alone; any other version there still differs.
pub fn assert_golden(name: &str, actual: &str) {
    let path = crate::repo_root().join("tests/golden").join(name);
    assert_generated(&path, &golden_version(actual));
}

/// Compares `actual` with the checked-in file at `path` (a golden file, or a page of docs/
/// generated from the binary); `UPDATE_GOLDEN=1` rewrites the file instead (refused under
/// `CI`). A difference names the first differing lines.
pub fn assert_generated(path: &Path, actual: &str) {
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        refuse_update_in_ci("UPDATE_GOLDEN");
        std::fs::write(path, actual).unwrap();
        return;
    }
    let want = std::fs::read_to_string(path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run with UPDATE_GOLDEN=1 to create it)",
            path.display()
        )
    });
    if want != actual {
        let diff: Vec<String> = want
            .lines()
            .zip(actual.lines())
            .enumerate()
            .filter(|(_, (a, b))| a != b)
            .take(5)
            .map(|(i, (a, b))| format!("line {}:\n  want: {a}\n  got:  {b}", i + 1))
            .collect();
        panic!(
            "{} differs (UPDATE_GOLDEN=1 to accept):\n{}\n(want {} lines, got {})",
            path.display(),
            diff.join("\n"),
            want.lines().count(),
            actual.lines().count()
        );
    }
}

/// The `promtool` binary; a clear failure when it is missing (the README test command installs it).
pub fn promtool() -> PathBuf {
    for dir in std::env::var("PATH").unwrap_or_default().split(':') {
        let p = Path::new(dir).join("promtool");
        if p.is_file() {
            return p;
        }
    }
    panic!(
        "promtool not found on PATH: run the README test command (bash .ci/test), which installs Debian's prometheus package"
    )
}

/// Runs `promtool check metrics` on `body`; returns (exit code, stderr).
pub fn promtool_check(body: &str) -> (i32, String) {
    let mut cmd = Command::new(promtool());
    cmd.args(["check", "metrics"]);
    let out = owned::output(cmd, Some(body.as_bytes())).unwrap();
    let mut text = String::from_utf8_lossy(&out.stderr).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stdout));
    (out.status.code().unwrap_or(-1), text)
}

/// The cluster role with the schedules the real-control-plane tests use: usage every 2 s
/// (bounded by 2 s), a snapshot every second.
pub const FAST_CLUSTER_ROLE: &[&str] = &[
    "--role",
    "cluster",
    "--interval",
    "2s",
    "--timeout",
    "2s",
    "--tick-interval",
    "1s",
];

/// A running kube-prober binary.
pub struct Prober {
    pub child: Child,
    pub addr: String,
    pub log: mpsc::Receiver<String>,
}

impl Prober {
    /// Starts the binary with `args` (plus `--listen 127.0.0.1:0 --log-format json`) and waits
    /// for its `listening` log line.
    pub fn start(args: &[&str]) -> Prober {
        Self::start_with_env(args, &[])
    }

    /// As `start`, with extra environment variables.
    pub fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> Prober {
        let mut cmd = Command::new(crate::binary());
        cmd.args(["--listen", "127.0.0.1:0", "--log-format", "json"])
            .args(args)
            .env_remove("KUBECONFIG")
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env("HOME", "/nonexistent")
            // The cluster role's DNS probe resolves this (from /etc/hosts) instead of
            // kubernetes.default.svc.cluster.local: no test asks the machine's resolver, which
            // is not on 127.0.0.0/8. A test may set its own.
            .env("KUBE_PROBER_PROBE_DNS_NAMES", "localhost");
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.stdout(Stdio::null()).stderr(Stdio::piped());
        let mut child = owned::spawn(cmd).unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let line = match rx.recv_timeout(left) {
                Ok(l) => l,
                Err(_) => {
                    let _ = child.kill();
                    let status = child.wait();
                    panic!(
                        "kube-prober did not log `listening` within 20 s ({status:?}); its log:\n{}",
                        seen.join("\n")
                    );
                }
            };
            seen.push(line.clone());
            let v: serde_json::Value = match serde_json::from_str(&line) {
                Ok(v) => v,
                Err(_) => continue,
            };
            if v["message"] == "listening" {
                let addr = v["addr"].as_str().unwrap().to_string();
                return Prober {
                    child,
                    addr,
                    log: rx,
                };
            }
        }
    }

    /// The child's peak resident set size so far, in MiB (VmHWM of /proc/PID/status).
    #[allow(dead_code)] // not every test file that shares this module measures memory
    pub fn peak_rss_mib(&self) -> f64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("the child's /proc status");
        let kb: f64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .expect("VmHWM in /proc/PID/status")
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .expect("VmHWM in kB");
        kb / 1024.0
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// [`Self::terminate`], then every log line (JSON) it wrote after the `listening` one.
    pub fn terminate_with_log(mut self) -> (i32, Vec<String>) {
        let code = self.stop();
        // stderr is closed now: the reader thread ends after the last line.
        let log = self.log.iter().collect();
        (code, log)
    }

    /// Sends SIGTERM and waits (bounded) for the exit code.
    pub fn terminate(mut self) -> i32 {
        self.stop()
    }

    fn stop(&mut self) -> i32 {
        let pid = self.child.id().to_string();
        let status = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        assert!(status.success());
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st.code().unwrap_or(-1);
            }
            if std::time::Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("kube-prober did not exit within 20 s of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Prober {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs the binary to completion with `args`; returns (exit code, stderr).
pub fn run_binary(args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let mut cmd = Command::new(crate::binary());
    cmd.args(args)
        .env_remove("KUBECONFIG")
        .env("HOME", "/nonexistent")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = owned::spawn(cmd).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            let mut err = String::new();
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            return (st.code().unwrap_or(-1), err);
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("kube-prober {args:?} did not exit within 20 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// GET `url` (5 s timeout): status and body.
pub async fn get(url: &str) -> (u16, String) {
    let r = reqwest::Client::new()
        .get(url)
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

/// Polls `/readyz` until 200 (at most 30 s).
pub async fn wait_ready(p: &Prober) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while get(&p.url("/readyz")).await.0 != 200 {
        assert!(
            std::time::Instant::now() < deadline,
            "not ready within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Polls `p`'s /metrics until `ok` holds for the body (at most 30 s), else panics with `what`
/// and the last body.
pub async fn wait_metrics(p: &Prober, what: &str, ok: impl Fn(&str) -> bool) -> String {
    wait_body(p, "/metrics", 30, what, ok).await
}

/// Polls `p`'s `path` until it answers 200 and `ok` holds for the body (at most `secs`), else
/// panics with `what` and the last body.
pub async fn wait_body(
    p: &Prober,
    path: &str,
    secs: u64,
    what: &str,
    ok: impl Fn(&str) -> bool,
) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    loop {
        let (status, body) = get(&p.url(path)).await;
        if status == 200 && ok(&body) {
            return body;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{what} within {secs} s; last {path} ({status}):\n{body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Polls `p`'s `path` until it answers `want` (at most `secs`), else panics with `what`.
pub async fn wait_status(p: &Prober, path: &str, want: u16, secs: u64, what: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    loop {
        let (status, body) = get(&p.url(path)).await;
        if status == want {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{what} within {secs} s; last {path} ({status}):\n{body}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A Burstable pod's cgroup and its containerd container's cgroup (cgroup v2, systemd driver)
/// under the fixture root `root`, with values seeded from `seed` and `seed + 1`.
pub fn write_task_cgroups(root: &Path, uid: &str, container_id: &str, seed: u64) {
    use crate::task_fixture::{self as fixture, Driver, Layout, Runtime, Values};
    let pdir = fixture::pod_dir(Driver::Systemd, "burstable", uid);
    fixture::write_cgroup(root, Layout::V2, &pdir, &Values::seeded(seed)).unwrap();
    let c = pdir.join(fixture::container_dir(
        Driver::Systemd,
        Runtime::Containerd,
        container_id,
    ));
    fixture::write_cgroup(root, Layout::V2, &c, &Values::seeded(seed + 1)).unwrap();
}

/// A sysfs fixture under `sys`: two CPUs of one core each on one package, one NUMA node with
/// 1000 kB of memory, 400 kB free.
pub fn write_sysfs_fixture(sys: &Path) {
    let cpu = sys.join("devices/system/cpu");
    for c in 0..2 {
        let t = cpu.join(format!("cpu{c}/topology"));
        std::fs::create_dir_all(&t).unwrap();
        std::fs::write(t.join("physical_package_id"), "0\n").unwrap();
        std::fs::write(t.join("core_id"), format!("{c}\n")).unwrap();
    }
    std::fs::write(cpu.join("online"), "0-1\n").unwrap();
    let node = sys.join("devices/system/node/node0");
    std::fs::create_dir_all(&node).unwrap();
    std::fs::write(sys.join("devices/system/node/online"), "0\n").unwrap();
    std::fs::write(
        node.join("meminfo"),
        "Node 0 MemTotal: 1000 kB\nNode 0 MemFree: 400 kB\n",
    )
    .unwrap();
}

/// The repository root (this crate lives in `tests/support`).
pub fn repo_root() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    here.ancestors().nth(2).unwrap_or(here).to_path_buf()
}

/// The `kube-prober` executable Cargo built beside the running test, bench or example: Cargo
/// builds the package's binary for its integration tests and benches into the profile folder
/// whose `deps/` holds them (what `CARGO_BIN_EXE_kube-prober` names at their compile time; a
/// library crate is not given that variable).
pub fn binary() -> PathBuf {
    let exe = std::env::current_exe().expect("the path of the running test executable");
    let mut dir = exe.parent().expect("a test executable's folder");
    if dir.ends_with("deps") || dir.ends_with("examples") {
        dir = dir.parent().expect("the profile folder");
    }
    let bin = dir.join(format!("kube-prober{}", std::env::consts::EXE_SUFFIX));
    assert!(
        bin.exists(),
        "{} is missing: run the tests with `cargo test` (Cargo builds the binary for them)",
        bin.display()
    );
    bin
}

/// Cargo's scratch folder for tests (`target/tmp`, what `CARGO_TARGET_TMPDIR` names for an
/// integration test), beside the profile folder of the running executable.
pub fn target_tmpdir() -> PathBuf {
    let exe = std::env::current_exe().expect("the path of the running test executable");
    let target = exe.ancestors().nth(3).expect("the target folder");
    let dir = target.join("tmp");
    std::fs::create_dir_all(&dir).expect("creating target/tmp");
    dir
}

/// The name libtest gives test function `name` of the module whose `module_path!()` is
/// `module`: the path without the test binary's crate name (`kernel::task` and `child_worker`
/// give `task::child_worker`). For tests that run one test of their own binary again as a child
/// process with `--exact`, which must name the test as libtest lists it.
pub fn test_name(module: &str, name: &str) -> String {
    match module.split_once("::") {
        Some((_, path)) => format!("{path}::{name}"),
        None => name.to_string(),
    }
}
