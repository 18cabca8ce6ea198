//! The host role's systemd unit (manifests/systemd/kube-prober.service): `systemd-analyze
//! verify` accepts it, `systemd-analyze security --offline=yes` scores its exposure at most
//! 2.0 ("OK"), it carries the hardening the README promises, its stop timeout exceeds
//! --shutdown-timeout, and the binary started with its ExecStart arguments turns ready.

use support::deploy;

use std::process::Command;
use std::time::Duration;

const UNIT: &str = "manifests/systemd/kube-prober.service";
const INSTALLED: &str = "/usr/local/bin/kube-prober";

fn unit_text() -> String {
    std::fs::read_to_string(deploy::repo().join(UNIT)).expect(UNIT)
}

/// `Key=value` lines of the unit (comments and sections skipped), in order.
fn settings(text: &str) -> Vec<(String, String)> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with('['))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The unit with ExecStart pointing at this build's binary (verify checks that it exists),
/// written as kube-prober.service into a temp dir.
fn unit_for_this_build(dir: &std::path::Path) -> std::path::PathBuf {
    let text = unit_text().replace(INSTALLED, env!("CARGO_BIN_EXE_kube-prober"));
    let path = dir.join("kube-prober.service");
    std::fs::write(&path, text).unwrap();
    path
}

fn systemd_analyze() -> &'static str {
    assert!(
        std::path::Path::new("/usr/bin/systemd-analyze").is_file(),
        "systemd-analyze not found: run `bash .ci/test`, which installs Debian's systemd"
    );
    "/usr/bin/systemd-analyze"
}

#[test]
fn unit_verifies_and_scores_ok() {
    let dir = tempfile::tempdir().unwrap();
    let unit = unit_for_this_build(dir.path());
    let out = Command::new(systemd_analyze())
        .arg("verify")
        .arg(&unit)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && text.trim().is_empty(),
        "systemd-analyze verify:\n{text}"
    );

    let out = Command::new(systemd_analyze())
        .args(["security", "--offline=yes", "--no-pager"])
        .arg(&unit)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let score: f64 = text
        .lines()
        .find_map(|l| {
            l.split("Overall exposure level for kube-prober.service: ")
                .nth(1)
        })
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            panic!(
                "no exposure score in:\n{text}{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    eprintln!("systemd-analyze security --offline=yes: exposure {score}");
    assert!(score <= 2.0, "exposure {score} > 2.0:\n{text}");
}

#[test]
fn unit_is_hardened_as_documented() {
    let s = settings(&unit_text());
    let get = |k: &str| {
        s.iter()
            .filter(|(x, _)| x == k)
            .map(|(_, v)| v.as_str())
            .collect::<Vec<_>>()
    };
    for (k, v) in [
        ("DynamicUser", "yes"),
        ("ProtectSystem", "strict"),
        ("NoNewPrivileges", "yes"),
        ("CapabilityBoundingSet", ""),
        ("AmbientCapabilities", ""),
        ("ProtectHome", "yes"),
        ("PrivateTmp", "yes"),
    ] {
        assert_eq!(get(k), vec![v], "{k}");
    }
    assert!(get("User").is_empty(), "no fixed user: DynamicUser");
    assert!(
        get("ReadWritePaths").is_empty() && get("StateDirectory").is_empty(),
        "nothing writable"
    );
    let exec = get("ExecStart")[0];
    assert!(exec.starts_with(INSTALLED), "{exec}");
    assert!(exec.contains("--role=host"));
    let shutdown = exec
        .split_whitespace()
        .find_map(|a| a.strip_prefix("--shutdown-timeout="))
        .map(|v| humantime::parse_duration(v).unwrap())
        .unwrap_or(Duration::from_secs(10));
    let stop = humantime::parse_duration(get("TimeoutStopSec")[0]).unwrap();
    assert!(
        stop > shutdown,
        "TimeoutStopSec {stop:?} must exceed --shutdown-timeout {shutdown:?}"
    );
}

/// The ExecStart arguments are the binary's (listen moved to a free loopback port).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_start_arguments_run_the_host_role() {
    let exec = settings(&unit_text())
        .into_iter()
        .find(|(k, _)| k == "ExecStart")
        .unwrap()
        .1;
    let mut args: Vec<String> = exec.split_whitespace().skip(1).map(String::from).collect();
    deploy::local_listen(&mut args);
    let p = deploy::spawn(&args, &[]);
    support::wait_ready(&p).await;
    let (status, body) = support::get(&p.url("/metrics")).await;
    assert_eq!(status, 200);
    assert!(body.contains("role=\"host\""), "{body}");
    assert_eq!(p.terminate(), 0);
}
