//! The node role end to end with `--kubelet-url`: the binary takes its task pods from the
//! stand-in kubelet's `/pods` over HTTPS (token auth, TLS verified against the stand-in's CA)
//! instead of the API-server pod watch, finds their cgroups in a fixture cgroup root, and serves
//! task series that follow the kubelet's list; an oversized and an invalid answer are counted
//! as `too_large` and `parse` of source `kubelet_pods`. `promtool check metrics` passes.

use support::apiserver;
use support::kubelet;

use std::path::Path;

use support::task_fixture::{self as fixture, Layout, Values};
use support::{Prober, promtool_check, wait_ready};

const NODE: &str = "worker-7";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_role_takes_task_pods_from_the_kubelet() {
    let api = apiserver::start().await;
    api.set_nodes(vec![apiserver::node(NODE, ("4", "8Gi"), ("4", "8Gi"))]);
    let uid_a = "aaaaaaaa-1111-2222-3333-444444444444";
    let uid_b = "bbbbbbbb-1111-2222-3333-444444444444";
    let uid_api = "dddddddd-1111-2222-3333-444444444444";
    // Known to the API server only: with --kubelet-url the pod watch feeds no tasks.
    api.upsert(&apiserver::task_pod("api-only", uid_api, "c0ffee04", NODE));

    let k = kubelet::FakeKubelet::start("node-token").await;
    k.set_pods(vec![apiserver::task_pod("web-a", uid_a, "c0ffee01", NODE)]);

    let dir = tempfile::tempdir().unwrap();
    let files = k.write_files(dir.path());
    let cg = dir.path().join("cgroup");
    fixture::init(&cg, Layout::V2).unwrap();
    support::write_task_cgroups(&cg, uid_a, "c0ffee01", 1);
    support::write_task_cgroups(&cg, uid_b, "c0ffee02", 3);
    support::write_task_cgroups(&cg, uid_api, "c0ffee04", 5);
    let kc = dir.path().join("kubeconfig");
    api.write_kubeconfig(&kc).unwrap();
    let s = |p: &Path| p.to_string_lossy().into_owned();
    let (kc, cg_s, token, ca) = (s(&kc), s(&cg), s(&files.token), s(&files.ca));
    let p = Prober::start_with_env(
        &[
            "--role",
            "node",
            "--tick-interval",
            "1s",
            "--interval",
            "1s",
            "--timeout",
            "1s",
            "--cgroup-root",
            &cg_s,
            "--kubelet-url",
            &k.url,
            "--kubelet-token-file",
            &token,
            "--kubelet-ca-file",
            &ca,
            "--max-response-bytes",
            "64Ki",
        ],
        &[("KUBECONFIG", kc.as_str()), ("NODE_NAME", NODE)],
    );
    wait_ready(&p).await;

    let v = Values::seeded(1);
    let cpu_a = format!(
        "kube_prober_task_cpu_usage_seconds_total{{node=\"{NODE}\",namespace=\"shop\",pod=\"web-a\",task_name=\"shop/web-a\",task_id=\"{uid_a}\",qos=\"burstable\",ready=\"true\"}} {}",
        v.cpu_usec as f64 / 1e6
    );
    let body = support::wait_metrics(&p, "task series of web-a", |b| b.contains(&cpu_a)).await;
    assert!(
        !body.contains(uid_api),
        "a pod the kubelet does not list is no task"
    );
    assert!(body.contains(&format!(
        "kube_prober_task_resource_requests{{node=\"{NODE}\",namespace=\"shop\",pod=\"web-a\",task_name=\"shop/web-a\",task_id=\"{uid_a}\",qos=\"burstable\",ready=\"true\",resource=\"cpu\",unit=\"core\"}} 0.1"
    )), "{body}");
    assert!(
        body.contains("kube_prober_source_up{source=\"kubelet_pods\"} 1"),
        "{body}"
    );
    assert!(
        k.seen()
            .iter()
            .all(|r| r.authorized && r.bearer.as_deref() == Some("node-token")),
        "every poll authenticated with the token"
    );
    let (code, out) = promtool_check(&body);
    assert_eq!(code, 0, "promtool: {out}");

    // The kubelet's list changes between polls: web-b arrives, web-a leaves.
    k.set_pods(vec![apiserver::task_pod("web-b", uid_b, "c0ffee02", NODE)]);
    let body = support::wait_metrics(&p, "web-b replaces web-a", |b| {
        b.contains(&format!("task_id=\"{uid_b}\"")) && !b.contains(&format!("task_id=\"{uid_a}\""))
    })
    .await;
    assert!(body.contains("container=\"main\""), "{body}");

    // Oversized and invalid answers are counted; the last pods stay.
    k.set_answer(kubelet::Answer::Huge(256 * 1024));
    support::wait_metrics(&p, "too_large counted", |b| {
        b.contains("kube_prober_source_errors_total{source=\"kubelet_pods\",reason=\"too_large\"}")
    })
    .await;
    k.set_answer(kubelet::Answer::Invalid);
    let body = support::wait_metrics(&p, "parse counted", |b| {
        b.contains("kube_prober_source_errors_total{source=\"kubelet_pods\",reason=\"parse\"}")
    })
    .await;
    assert!(
        body.contains("kube_prober_source_up{source=\"kubelet_pods\"} 0"),
        "{body}"
    );
    assert!(
        body.contains(&format!("task_id=\"{uid_b}\"")),
        "the last pods stay"
    );
    let (code, out) = promtool_check(&body);
    assert_eq!(code, 0, "promtool: {out}");
    assert_eq!(p.terminate(), 0);
}

#[test]
fn kubelet_flags_are_validated() {
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let mut all = vec!["--role", "node", "--listen", "127.0.0.1:0"];
        all.extend_from_slice(args);
        support::run_binary(
            &all,
            &[
                ("KUBECONFIG", "/nonexistent/kubeconfig"),
                ("NODE_NAME", NODE),
            ],
        )
    };
    for (args, flag) in [
        (
            vec!["--kubelet-url", "ftp://10.0.0.1:10250"],
            "--kubelet-url",
        ),
        (vec!["--kubelet-url", "not a url"], "--kubelet-url"),
        (vec!["--kubelet-token-file", "/x"], "--kubelet-token-file"),
        (
            vec![
                "--kubelet-url",
                "https://10.0.0.1:10250",
                "--kubelet-client-cert-file",
                "/c",
            ],
            "--kubelet-client-key-file",
        ),
        (
            vec![
                "--kubelet-url",
                "https://10.0.0.1:10250",
                "--kubelet-insecure-skip-tls-verify",
                "--kubelet-ca-file",
                "/ca",
            ],
            "--kubelet-insecure-skip-tls-verify",
        ),
    ] {
        let (code, err) = run(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(flag), "{args:?} names {flag}: {err}");
    }
    // A CA file that is not there: a config error at start, before any connection.
    let cg = dir.path().to_string_lossy().into_owned();
    let (code, err) = run(&[
        "--cgroup-root",
        &cg,
        "--kubelet-url",
        "https://127.0.0.1:1",
        "--kubelet-ca-file",
        "/nonexistent/ca.crt",
        "--kubelet-token-file",
        "/nonexistent/token",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--kubelet-ca-file"), "{err}");
}
