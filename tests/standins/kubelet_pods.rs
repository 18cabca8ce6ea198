//! The kubelet's `/pods` as the task pod source, against the stand-in kubelet over HTTPS on
//! 127.0.0.1: TLS verified against the given CA (a wrong CA is a clear, counted error), token
//! and client-certificate authentication, pods that follow the kubelet's list from poll to poll
//! through the same conversion as the watch path, and the byte cap and invalid JSON as
//! `too_large` and `parse`.

use support::apiserver;
use support::kubelet;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube_prober::Error;
use kube_prober::hub::RunOutcome;
use kube_prober::sources::task::kubelet::{KubeletAuth, KubeletConfig, KubeletPods};
use kube_prober::sources::task::pods::{TaskPodConfig, TaskPodIndex, task_pod};
use kubelet::{Answer, FakeKubelet, KubeletFiles};

const TOKEN: &str = "kubelet-test-token";
const MIB: usize = 1024 * 1024;

fn pod(ns: &str, name: &str, phase: &str) -> Pod {
    let mut p = apiserver::pod(ns, name, "worker-1");
    p.metadata.uid = Some(format!("{name}-0000-1111-2222-333333333333"));
    let st = p.status.as_mut().unwrap();
    st.phase = Some(phase.into());
    st.qos_class = Some("Burstable".into());
    st.container_statuses.as_mut().unwrap()[0].container_id =
        Some(format!("containerd://{name}-cid"));
    p
}

fn token_settings(k: &FakeKubelet, f: &KubeletFiles) -> KubeletConfig {
    KubeletConfig {
        url: k.url.clone(),
        auth: KubeletAuth::TokenFile(f.token.clone()),
        ca_file: Some(f.ca.clone()),
        insecure_skip_verify: false,
    }
}

fn source(s: KubeletConfig) -> KubeletPods {
    KubeletPods::new(s, Duration::from_secs(5), 32 * MIB).unwrap()
}

fn index(namespaces: &[&str]) -> (TaskPodIndex, TaskPodConfig) {
    let cfg = TaskPodConfig {
        namespaces: namespaces.iter().map(|s| s.to_string()).collect(),
        label_allowlist: vec!["app".into()],
    };
    (TaskPodIndex::new(cfg.clone()), cfg)
}

fn names(idx: &TaskPodIndex) -> Vec<String> {
    idx.pods().iter().map(|p| p.task_name()).collect()
}

fn failed(o: RunOutcome) -> (String, String) {
    match o {
        RunOutcome::Failed { reason, message } => (reason, message),
        other => panic!("expected a failed poll, got {other:?}"),
    }
}

#[tokio::test]
async fn token_auth_pods_follow_the_kubelet_between_polls() {
    let k = FakeKubelet::start(TOKEN).await;
    let dir = tempfile::tempdir().unwrap();
    let f = k.write_files(dir.path());
    let web = pod("shop", "web", "Running");
    k.set_pods(vec![
        web.clone(),
        pod("shop", "db", "Pending"),
        pod("other", "elsewhere", "Running"),
        pod("shop", "done", "Succeeded"),
    ]);
    let (idx, cfg) = index(&["shop"]);
    let mut src = source(token_settings(&k, &f));

    assert_eq!(src.poll_into(&idx).await, RunOutcome::Ok);
    assert_eq!(
        names(&idx),
        ["shop/db", "shop/web"],
        "namespace filter, finished pods out"
    );
    let seen = k.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].path, "/pods");
    assert_eq!(seen[0].bearer.as_deref(), Some(TOKEN));
    assert!(!seen[0].client_cert);
    // The one conversion the watch path uses: identical task facts.
    let want = task_pod(&web, &cfg).unwrap().unwrap();
    let got = idx.pods().into_iter().find(|p| p.name == "web").unwrap();
    assert_eq!(*got, want);
    assert_eq!(got.requests.get("cpu"), Some(&0.1));
    assert_eq!(got.containers[0].id.as_deref(), Some("web-cid"));

    // Between polls a pod leaves and another arrives.
    k.set_pods(vec![web.clone(), pod("shop", "cache", "Running")]);
    assert_eq!(src.poll_into(&idx).await, RunOutcome::Ok);
    assert_eq!(names(&idx), ["shop/cache", "shop/web"]);

    // An empty node: no data, not an error.
    k.set_pods(vec![]);
    assert_eq!(src.poll_into(&idx).await, RunOutcome::NoData);
    assert!(idx.pods().is_empty());

    // The token rotates: the old one is refused (counted, last pods stay), the file's new
    // content is read on the next poll.
    k.set_pods(vec![web.clone()]);
    k.set_token("rotated-token");
    let (reason, msg) = failed(src.poll_into(&idx).await);
    assert_eq!(reason, "http");
    assert!(msg.contains("401") && msg.contains("token"), "{msg}");
    std::fs::write(&f.token, "rotated-token\n").unwrap();
    assert_eq!(src.poll_into(&idx).await, RunOutcome::Ok);
    assert_eq!(names(&idx), ["shop/web"]);
    assert_eq!(
        k.seen().last().unwrap().bearer.as_deref(),
        Some("rotated-token")
    );
}

#[tokio::test]
async fn client_certificate_auth() {
    let k = FakeKubelet::start(TOKEN).await;
    let dir = tempfile::tempdir().unwrap();
    let f = k.write_files(dir.path());
    k.set_pods(vec![pod("shop", "web", "Running")]);
    let (idx, _) = index(&[]);
    let mut s = token_settings(&k, &f);
    s.auth = KubeletAuth::ClientCert {
        cert: f.cert.clone(),
        key: f.key.clone(),
    };
    let mut src = source(s.clone());
    assert_eq!(src.poll_into(&idx).await, RunOutcome::Ok);
    assert_eq!(names(&idx), ["shop/web"]);
    let seen = k.seen();
    assert!(seen[0].client_cert && seen[0].bearer.is_none(), "{seen:?}");

    // A certificate from a CA the kubelet does not trust: the handshake fails, counted as http.
    s.auth = KubeletAuth::ClientCert {
        cert: f.stranger_cert.clone(),
        key: f.stranger_key.clone(),
    };
    let mut stranger = source(s.clone());
    let (reason, msg) = failed(stranger.poll_into(&idx).await);
    assert_eq!(reason, "http", "{msg}");
    assert_eq!(k.seen().len(), 1, "no request got through: {msg}");

    // The certificate files rotate: the client is rebuilt from the new ones.
    std::fs::copy(&f.cert, &f.stranger_cert).unwrap();
    std::fs::copy(&f.key, &f.stranger_key).unwrap();
    assert_eq!(stranger.poll_into(&idx).await, RunOutcome::Ok);
    assert!(k.seen().last().unwrap().client_cert);
}

#[tokio::test]
async fn tls_is_verified_against_the_given_ca_only() {
    let k = FakeKubelet::start(TOKEN).await;
    let dir = tempfile::tempdir().unwrap();
    let f = k.write_files(dir.path());
    k.set_pods(vec![pod("shop", "web", "Running")]);
    let (idx, _) = index(&[]);

    let mut s = token_settings(&k, &f);
    s.ca_file = Some(f.other_ca.clone());
    let mut wrong = source(s.clone());
    let (reason, msg) = failed(wrong.poll_into(&idx).await);
    assert_eq!(reason, "http");
    assert!(
        msg.contains("certificate") && msg.contains("UnknownIssuer"),
        "a clear TLS reason: {msg}"
    );
    assert!(k.seen().is_empty(), "the token was never sent");
    assert!(idx.pods().is_empty());

    // Explicitly not verifying (a kubelet with a self-signed serving certificate).
    s.ca_file = None;
    s.insecure_skip_verify = true;
    assert_eq!(source(s).poll_into(&idx).await, RunOutcome::Ok);
    assert_eq!(names(&idx), ["shop/web"]);
}

#[tokio::test]
async fn failures_are_counted_by_reason_and_the_last_pods_stay() {
    let k = FakeKubelet::start(TOKEN).await;
    let dir = tempfile::tempdir().unwrap();
    let f = k.write_files(dir.path());
    k.set_pods(vec![pod("shop", "web", "Running")]);
    let (idx, _) = index(&[]);
    let mut src =
        KubeletPods::new(token_settings(&k, &f), Duration::from_secs(5), 64 * 1024).unwrap();
    assert_eq!(src.poll_into(&idx).await, RunOutcome::Ok);

    k.set_answer(Answer::Huge(MIB));
    let (reason, msg) = failed(src.poll_into(&idx).await);
    assert_eq!(reason, "too_large", "{msg}");
    k.set_answer(Answer::Invalid);
    let (reason, msg) = failed(src.poll_into(&idx).await);
    assert_eq!(reason, "parse", "{msg}");
    k.set_answer(Answer::Status(403));
    let (reason, msg) = failed(src.poll_into(&idx).await);
    assert_eq!(reason, "http");
    assert!(msg.contains("403") && msg.contains("nodes/proxy"), "{msg}");
    std::fs::remove_file(&f.token).unwrap();
    let (reason, msg) = failed(src.poll_into(&idx).await);
    assert_eq!(reason, "io", "{msg}");
    assert_eq!(names(&idx), ["shop/web"], "the last good pods stay");

    // Counted as a source run in the self-metrics.
    let store = Arc::new(kube_prober::hub::store::Store::new());
    let provider: Arc<dyn kube_prober::hub::Provider> = store.clone();
    let cancel = tokio_util::sync::CancellationToken::new();
    let h = kube_prober::sources::task::kubelet::spawn(
        src,
        idx.clone(),
        Duration::from_secs(3600),
        provider,
        cancel.clone(),
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let errors = loop {
        let snap = store.snapshot(std::time::SystemTime::now());
        let s = snap
            .sources
            .get(kube_prober::sources::task::kubelet::KUBELET_SOURCE)
            .cloned();
        if let Some(s) = s.filter(|s| s.runs > 0) {
            break s.errors;
        }
        assert!(std::time::Instant::now() < deadline, "no run recorded");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(errors.get("io"), Some(&1), "{errors:?}");
    cancel.cancel();
    h.await.unwrap();
}

#[test]
fn unusable_files_are_config_errors_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "t").unwrap();
    let bad_pem = dir.path().join("bad.pem");
    std::fs::write(&bad_pem, "not a certificate").unwrap();
    let base = KubeletConfig {
        url: "https://127.0.0.1:10250".into(),
        auth: KubeletAuth::TokenFile(token.clone()),
        ca_file: Some(dir.path().join("missing-ca.crt")),
        insecure_skip_verify: false,
    };
    let option = |s: KubeletConfig| match KubeletPods::new(s, Duration::from_secs(1), MIB) {
        Err(e @ Error::Config { .. }) => {
            assert_eq!(e.exit_code(), 2);
            match e {
                Error::Config { option, .. } => option,
                _ => unreachable!(),
            }
        }
        Err(e) => panic!("not a config error: {e}"),
        Ok(_) => panic!("accepted"),
    };
    assert_eq!(option(base.clone()), "--kubelet-ca-file");
    let mut s = base.clone();
    s.ca_file = Some(bad_pem.clone());
    assert_eq!(option(s.clone()), "--kubelet-ca-file");
    s.ca_file = None;
    s.insecure_skip_verify = true;
    s.auth = KubeletAuth::TokenFile(dir.path().join("no-token"));
    assert_eq!(option(s.clone()), "--kubelet-token-file");
    s.auth = KubeletAuth::ClientCert {
        cert: bad_pem.clone(),
        key: bad_pem.clone(),
    };
    assert_eq!(option(s.clone()), "--kubelet-client-cert-file");
    s.auth = KubeletAuth::ClientCert {
        cert: bad_pem,
        key: dir.path().join("no-key"),
    };
    assert_eq!(option(s), "--kubelet-client-key-file");
}

/// A redirect from the kubelet is not followed: the poll fails with a clear, counted reason and
/// the redirect's target (a second stand-in accepting the same token) gets no request.
#[tokio::test]
async fn a_redirect_is_a_failure_and_is_not_followed() {
    let k = FakeKubelet::start(TOKEN).await;
    let elsewhere = FakeKubelet::start(TOKEN).await;
    elsewhere.set_pods(vec![pod("shop", "web", "Running")]);
    let dir = tempfile::tempdir().unwrap();
    let f = k.write_files(dir.path());
    k.set_answer(Answer::Redirect(format!("{}/pods", elsewhere.url)));
    let (idx, _) = index(&[]);
    let mut src = source(token_settings(&k, &f));
    let (reason, message) = failed(src.poll_into(&idx).await);
    assert_eq!(reason, "http", "{message}");
    assert!(
        message.contains("302") && message.contains("redirect") && message.contains(&elsewhere.url),
        "{message}"
    );
    assert!(idx.pods().is_empty());
    assert_eq!(k.seen().len(), 1, "the kubelet was asked once");
    assert!(
        elsewhere.seen().is_empty(),
        "the redirect target got a request: {:?}",
        elsewhere.seen()
    );
}

const PROXY_CHILD_ENV: &str = "KUBE_PROBER_KUBELET_PROXY_CHILD";

/// Runs only as a child of `proxy_env_is_not_used` (which sets the proxy variables for this
/// process alone): a poll of a stand-in kubelet must succeed directly.
#[tokio::test]
async fn proxy_child() {
    if std::env::var(PROXY_CHILD_ENV).is_err() {
        return;
    }
    let k = FakeKubelet::start(TOKEN).await;
    let dir = tempfile::tempdir().unwrap();
    let f = k.write_files(dir.path());
    k.set_pods(vec![pod("shop", "web", "Running")]);
    let (idx, _) = index(&[]);
    let mut src = source(token_settings(&k, &f));
    let out = src.poll_into(&idx).await;
    assert_eq!(out, RunOutcome::Ok);
    assert_eq!(names(&idx), vec!["shop/web".to_string()]);
}

/// HTTPS_PROXY, HTTP_PROXY and ALL_PROXY (both cases) pointing at a listening socket on
/// 127.0.0.1 are ignored: the kubelet is reached directly and the "proxy" gets no connection.
/// The variables are set in a child process only (this test binary re-run for
/// `proxy_child`), so no other test sees them.
#[tokio::test]
async fn proxy_env_is_not_used() {
    if std::env::var(PROXY_CHILD_ENV).is_ok() {
        return;
    }
    let proxy = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy_url = format!("http://{}", proxy.local_addr().unwrap());
    let connections = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = connections.clone();
    let accept = tokio::spawn(async move {
        while let Ok((conn, _)) = proxy.accept().await {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            drop(conn);
        }
    });
    let exe = std::env::current_exe().unwrap();
    let out = tokio::task::spawn_blocking(move || {
        let mut cmd = std::process::Command::new(exe);
        cmd.args([
            "--exact",
            &support::test_name(module_path!(), "proxy_child"),
            "--nocapture",
            "--test-threads=1",
        ])
        .env(PROXY_CHILD_ENV, "1");
        for v in ["HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY"] {
            cmd.env(v, &proxy_url).env(v.to_lowercase(), &proxy_url);
        }
        cmd.env_remove("NO_PROXY").env_remove("no_proxy");
        support::owned::output(cmd, None).unwrap()
    })
    .await
    .unwrap();
    accept.abort();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "child poll failed: {text}");
    assert!(
        text.contains("proxy_child ... ok"),
        "the child ran its test: {text}"
    );
    assert_eq!(
        connections.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "the proxy from the environment got a connection"
    );
}
