//! Bad flags and bad config files fail at start with exit code 2 and a message naming the option.

mod support;
use support::run_binary;

fn assert_exit2(args: &[&str], env: &[(&str, &str)], needles: &[&str]) {
    let (code, err) = run_binary(args, env);
    assert_eq!(code, 2, "{args:?}: exit {code}, stderr:\n{err}");
    for n in needles {
        assert!(err.contains(n), "{args:?}: stderr lacks {n:?}:\n{err}");
    }
}

#[test]
fn bad_flags_exit_2_naming_the_option() {
    assert_exit2(&["--listen", "nope"], &[], &["--listen", "'nope'"]);
    assert_exit2(&["--role", "admiral"], &[], &["--role", "admiral"]);
    assert_exit2(&["--interval", "soon"], &[], &["--interval", "'soon'"]);
    assert_exit2(
        &["--interval", "10s", "--timeout", "1m"],
        &[],
        &["--timeout", "must not exceed"],
    );
    assert_exit2(&["--log-format", "xml"], &[], &["--log-format", "xml"]);
    assert_exit2(&["--no-such-flag"], &[], &["--no-such-flag"]);
    assert_exit2(
        &[
            "--role",
            "host",
            "--procfs",
            "/no/such/dir",
            "--listen",
            "127.0.0.1:0",
        ],
        &[],
        &["--procfs", "/no/such/dir", "not a directory"],
    );
    assert_exit2(
        &["--kubeconfig", "/no/such/kubeconfig"],
        &[],
        &["--kubeconfig", "/no/such/kubeconfig"],
    );
}

#[test]
fn environment_fallbacks_are_validated_too() {
    assert_exit2(
        &[],
        &[("KUBE_PROBER_LISTEN", "1.2.3.4")],
        &["--listen", "'1.2.3.4'"],
    );
    assert_exit2(&[], &[("LOG_LEVEL", "=?=")], &["--log-level"]);
}

#[test]
fn bad_config_files_exit_2_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.to_string_lossy().into_owned()
    };
    let typo = write("typo.yaml", "lisen: 127.0.0.1:1\n");
    assert_exit2(
        &["--config", &typo],
        &[],
        &["unknown field `lisen`", "typo.yaml"],
    );
    let bad = write("bad.yaml", "tick_interval: forever\n");
    assert_exit2(&["--config", &bad], &[], &["--tick-interval", "'forever'"]);
    let broken = write("broken.yaml", "listen: [\n");
    assert_exit2(&["--config", &broken], &[], &["broken.yaml"]);
    assert_exit2(
        &["--config", "/no/such/file.yaml"],
        &[],
        &["/no/such/file.yaml"],
    );
}

#[test]
fn help_documents_every_option() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kube-prober"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--config",
        "--role",
        "--listen",
        "--node-name",
        "--cluster-name",
        "--kubeconfig",
        "--procfs",
        "--interval",
        "--timeout",
        "--tick-interval",
        "--shutdown-timeout",
        "--log-level",
        "--log-format",
    ] {
        assert!(help.contains(flag), "--help lacks {flag}");
    }
}
