//! Serving safely, through the real binary on 127.0.0.1: TLS with a test CA made here (rcgen),
//! TLS 1.1 refused, rotated certificate files picked up (a bad pair keeps the old one),
//! `--auth kubernetes` against the stand-in API server's TokenReview and SubjectAccessReview
//! (401/403/200/503, caching, client certificates, open health endpoints), and a real
//! Prometheus scraping over HTTPS with a bearer token.

use support::apiserver;

use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use apiserver::ApiServer;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
};
use rustls::pki_types::{CertificateDer, ServerName};
use support::{Prober, run_binary};

// ---------------------------------------------------------------------------------------------
// A test PKI

struct Ca {
    pem: String,
    issuer: Issuer<'static, KeyPair>,
}

fn ca(name: &str) -> Ca {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    let cert = params.self_signed(&key).unwrap();
    Ca {
        pem: cert.pem(),
        issuer: Issuer::new(params, key),
    }
}

/// (certificate PEM, key PEM, certificate DER)
struct Leaf {
    cert: String,
    key: String,
    der: Vec<u8>,
}

fn server_leaf(ca: &Ca) -> Leaf {
    let key = KeyPair::generate().unwrap();
    let mut params =
        CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()]).unwrap();
    params
        .distinguished_name
        .push(DnType::CommonName, "kube-prober");
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let cert = params.signed_by(&key, &ca.issuer).unwrap();
    Leaf {
        cert: cert.pem(),
        key: key.serialize_pem(),
        der: cert.der().to_vec(),
    }
}

fn client_leaf(ca: &Ca, cn: &str, orgs: &[&str]) -> Leaf {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name.push(DnType::CommonName, cn);
    for o in orgs {
        params.distinguished_name.push(DnType::OrganizationName, *o);
    }
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let cert = params.signed_by(&key, &ca.issuer).unwrap();
    Leaf {
        cert: cert.pem(),
        key: key.serialize_pem(),
        der: cert.der().to_vec(),
    }
}

/// Writes `text` to `path` atomically (a temp file renamed over it), as a Secret volume swaps.
fn write_atomic(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

struct TlsFiles {
    dir: tempfile::TempDir,
    cert: PathBuf,
    key: PathBuf,
    ca: PathBuf,
}

fn tls_files(ca: &Ca, leaf: &Leaf) -> TlsFiles {
    let dir = tempfile::tempdir().unwrap();
    let cert = dir.path().join("tls.crt");
    let key = dir.path().join("tls.key");
    let ca_path = dir.path().join("ca.crt");
    write_atomic(&cert, &leaf.cert);
    write_atomic(&key, &leaf.key);
    write_atomic(&ca_path, &ca.pem);
    TlsFiles {
        dir,
        cert,
        key,
        ca: ca_path,
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

fn roots(ca_pem: &str) -> rustls::RootCertStore {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    roots
}

/// A rustls client trusting `ca_pem`, speaking `versions`, presenting `identity` if given.
fn client_config(
    ca_pem: &str,
    versions: &[&'static rustls::SupportedProtocolVersion],
    identity: Option<&Leaf>,
) -> rustls::ClientConfig {
    use rustls::pki_types::PrivateKeyDer;
    use rustls::pki_types::pem::PemObject;
    let b = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(versions)
        .unwrap()
        .with_root_certificates(roots(ca_pem));
    match identity {
        None => b.with_no_client_auth(),
        Some(leaf) => b
            .with_client_auth_cert(
                vec![CertificateDer::from(leaf.der.clone())],
                PrivateKeyDer::from_pem_slice(leaf.key.as_bytes()).unwrap(),
            )
            .unwrap(),
    }
}

fn https_client(ca_pem: &str, identity: Option<&Leaf>) -> reqwest::Client {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(10))
        .tls_backend_preconfigured(client_config(ca_pem, rustls::DEFAULT_VERSIONS, identity))
        .build()
        .unwrap()
}

/// The certificate the server at `addr` presents, and the TLS version agreed.
async fn served_certificate(
    addr: &str,
    ca_pem: &str,
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> (Vec<u8>, rustls::ProtocolVersion) {
    let connector =
        tokio_rustls::TlsConnector::from(Arc::new(client_config(ca_pem, versions, None)));
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let tls = connector
        .connect(ServerName::try_from("127.0.0.1").unwrap(), tcp)
        .await
        .unwrap();
    let conn = tls.get_ref().1;
    (
        conn.peer_certificates().unwrap()[0].to_vec(),
        conn.protocol_version().unwrap(),
    )
}

async fn status(client: &reqwest::Client, url: &str, token: Option<&str>) -> u16 {
    let mut req = client.get(url);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    req.send().await.unwrap().status().as_u16()
}

/// The value of the sample `name{labels}` (labels as rendered, sorted as in the exposition).
fn sample(body: &str, name_and_labels: &str) -> Option<f64> {
    body.lines()
        .find_map(|l| l.strip_prefix(name_and_labels)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

/// Polls `f` every 50 ms until it is true; panics with `what` after `timeout`.
async fn eventually<F, Fut>(timeout: Duration, what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    while !f().await {
        assert!(Instant::now() < deadline, "{what} within {timeout:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// TLS

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_a_test_ca_on_tls_1_3_and_1_2() {
    let ca = ca("test CA");
    let leaf = server_leaf(&ca);
    let f = tls_files(&ca, &leaf);
    let p = Prober::start(&[
        "--role",
        "host",
        "--tls-cert-file",
        f.cert.to_str().unwrap(),
        "--tls-key-file",
        f.key.to_str().unwrap(),
    ]);
    let (der, v13) = served_certificate(&p.addr, &ca.pem, &[&rustls::version::TLS13]).await;
    assert_eq!(der, leaf.der);
    assert_eq!(v13, rustls::ProtocolVersion::TLSv1_3);
    let (_, v12) = served_certificate(&p.addr, &ca.pem, &[&rustls::version::TLS12]).await;
    assert_eq!(v12, rustls::ProtocolVersion::TLSv1_2);

    let client = https_client(&ca.pem, None);
    let base = format!("https://{}", p.addr);
    eventually(Duration::from_secs(30), "ready over TLS", || async {
        status(&client, &format!("{base}/readyz"), None).await == 200
    })
    .await;
    let body = client
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(body.contains("kube_prober_build_info"), "{body}");
    assert_eq!(
        sample(&body, "kube_prober_tls_reloads_total{result=\"error\"}"),
        Some(0.0)
    );
    assert!(
        !body.contains("kube_prober_http_auth_decisions_total"),
        "no auth families without --auth"
    );
    let (code, out) = support::promtool_check(&body);
    assert_eq!(code, 0, "{out}");

    // Plain HTTP on the TLS port gets no answer from the handlers.
    let plain = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let r = plain.get(format!("http://{}/metrics", p.addr)).send().await;
    assert!(
        r.as_ref().map_or(true, |r| r.status().as_u16() != 200),
        "plain HTTP must not be served: {r:?}"
    );

    // A client that connects and never says hello holds up neither others nor shutdown.
    let silent = std::net::TcpStream::connect(&p.addr).unwrap();
    let (der, _) = served_certificate(&p.addr, &ca.pem, rustls::DEFAULT_VERSIONS).await;
    assert_eq!(der, leaf.der);
    let started = Instant::now();
    let code = tokio::task::spawn_blocking(move || p.terminate())
        .await
        .unwrap();
    assert_eq!(code, 0, "SIGTERM ends a TLS server cleanly");
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "shutdown waited on an idle handshake: {:?}",
        started.elapsed()
    );
    drop(silent);
    drop(f);
}

/// A TLS 1.1 ClientHello (record and client version 3.2, no supported_versions extension),
/// offering ECDHE-RSA-AES128-SHA and ECDHE-ECDSA-AES128-SHA.
fn tls11_client_hello() -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&[0x03, 0x02]); // client_version TLS 1.1
    body.extend_from_slice(&[0x42; 32]); // random
    body.push(0); // session id
    body.extend_from_slice(&[0x00, 0x04, 0xc0, 0x13, 0xc0, 0x09]); // cipher suites
    body.extend_from_slice(&[0x01, 0x00]); // compression: null
    // extensions: supported_groups (x25519, secp256r1), ec_point_formats (uncompressed)
    let ext: &[u8] = &[
        0x00, 0x0a, 0x00, 0x06, 0x00, 0x04, 0x00, 0x1d, 0x00, 0x17, //
        0x00, 0x0b, 0x00, 0x02, 0x01, 0x00,
    ];
    body.extend_from_slice(&(ext.len() as u16).to_be_bytes());
    body.extend_from_slice(ext);
    let mut hs = vec![0x01]; // ClientHello
    hs.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
    hs.extend_from_slice(&body);
    let mut rec = vec![0x16, 0x03, 0x02]; // handshake record, TLS 1.1
    rec.extend_from_slice(&(hs.len() as u16).to_be_bytes());
    rec.extend_from_slice(&hs);
    rec
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_1_1_is_refused() {
    let ca = ca("test CA");
    let leaf = server_leaf(&ca);
    let f = tls_files(&ca, &leaf);
    let p = Prober::start(&[
        "--role",
        "host",
        "--tls-cert-file",
        f.cert.to_str().unwrap(),
        "--tls-key-file",
        f.key.to_str().unwrap(),
    ]);
    let addr = p.addr.clone();
    let answer = tokio::task::spawn_blocking(move || {
        let mut s = std::net::TcpStream::connect(&addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(&tls11_client_hello()).unwrap();
        let mut buf = Vec::new();
        let mut chunk = [0u8; 512];
        loop {
            match s.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        buf
    })
    .await
    .unwrap();
    // A fatal alert record (21): handshake_failure (40) as rustls sends it when no offered
    // version is supported, or protocol_version (70); never a ServerHello (22).
    assert!(!answer.is_empty(), "the server closed without an alert");
    assert_eq!(
        answer[0], 0x15,
        "expected an alert record, got {answer:02x?}"
    );
    assert_eq!(answer.get(5), Some(&2), "fatal: {answer:02x?}");
    assert!(
        matches!(answer.get(6), Some(40 | 70)),
        "handshake_failure or protocol_version: {answer:02x?}"
    );

    // A client speaking 1.2 and 1.3 still gets in afterwards.
    let (der, _) = served_certificate(&p.addr, &ca.pem, rustls::DEFAULT_VERSIONS).await;
    assert_eq!(der, leaf.der);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotated_files_are_picked_up_and_a_bad_pair_keeps_the_old_one() {
    let ca = ca("test CA");
    let first = server_leaf(&ca);
    let f = tls_files(&ca, &first);
    let p = Prober::start(&[
        "--role",
        "host",
        "--tls-cert-file",
        f.cert.to_str().unwrap(),
        "--tls-key-file",
        f.key.to_str().unwrap(),
        "--tls-reload-interval",
        "1s",
    ]);
    let client = https_client(&ca.pem, None);
    let metrics_url = format!("https://{}/metrics", p.addr);
    let reloads = |result: &'static str| {
        let client = client.clone();
        let url = metrics_url.clone();
        async move {
            let body = client.get(url).send().await.unwrap().text().await.unwrap();
            sample(
                &body,
                &format!("kube_prober_tls_reloads_total{{result=\"{result}\"}}"),
            )
        }
    };
    assert_eq!(
        served_certificate(&p.addr, &ca.pem, rustls::DEFAULT_VERSIONS)
            .await
            .0,
        first.der
    );
    assert_eq!(reloads("success").await, Some(0.0));

    // A new certificate with the old key: not a pair. Counted once, the old one stays.
    let second = server_leaf(&ca);
    write_atomic(&f.cert, &second.cert);
    eventually(Duration::from_secs(10), "the bad pair counted", || async {
        reloads("error").await == Some(1.0)
    })
    .await;
    assert_eq!(
        served_certificate(&p.addr, &ca.pem, rustls::DEFAULT_VERSIONS)
            .await
            .0,
        first.der
    );
    // Key not PEM at all: a second distinct bad pair.
    write_atomic(&f.key, "garbage");
    eventually(
        Duration::from_secs(10),
        "the garbage key counted",
        || async { reloads("error").await == Some(2.0) },
    )
    .await;
    assert_eq!(
        served_certificate(&p.addr, &ca.pem, rustls::DEFAULT_VERSIONS)
            .await
            .0,
        first.der
    );

    // The matching key arrives: the new pair is served, without a restart.
    write_atomic(&f.key, &second.key);
    eventually(Duration::from_secs(10), "the new pair served", || async {
        served_certificate(&p.addr, &ca.pem, rustls::DEFAULT_VERSIONS)
            .await
            .0
            == second.der
    })
    .await;
    assert_eq!(reloads("success").await, Some(1.0));
    assert_eq!(
        reloads("error").await,
        Some(2.0),
        "an unchanged bad pair is not recounted"
    );
    drop(f);
}

#[test]
fn tls_and_auth_flags_are_checked_at_start() {
    let ca = ca("test CA");
    let leaf = server_leaf(&ca);
    let f = tls_files(&ca, &leaf);
    let cert = f.cert.to_str().unwrap();
    let key = f.key.to_str().unwrap();
    let cases: &[(&[&str], &str)] = &[
        (&["--tls-cert-file", cert], "needs --tls-key-file"),
        (&["--tls-key-file", key], "needs --tls-cert-file"),
        (&["--auth", "yes"], "expected none or kubernetes"),
        (&["--auth-cache-ttl", "2h"], "--auth-cache-ttl"),
        (
            &["--client-ca-file", f.ca.to_str().unwrap()],
            "client certificates need TLS",
        ),
        (
            &[
                "--tls-cert-file",
                cert,
                "--tls-key-file",
                key,
                "--client-ca-file",
                f.ca.to_str().unwrap(),
            ],
            "set --auth kubernetes",
        ),
        (
            &[
                "--tls-cert-file",
                cert,
                "--tls-key-file",
                "/nonexistent/tls.key",
            ],
            "reading /nonexistent/tls.key",
        ),
    ];
    for (args, expected) in cases {
        let mut all = vec!["--role", "host", "--listen", "127.0.0.1:0"];
        all.extend_from_slice(args);
        let (code, err) = run_binary(&all, &[]);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(expected), "{args:?}: {err}");
    }
    let other = server_leaf(&ca);
    let other_key = f.dir.path().join("other.key");
    write_atomic(&other_key, &other.key);
    let (code, err) = run_binary(
        &[
            "--role",
            "host",
            "--listen",
            "127.0.0.1:0",
            "--tls-cert-file",
            cert,
            "--tls-key-file",
            other_key.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("do not form a pair"), "{err}");
}

// ---------------------------------------------------------------------------------------------
// --auth kubernetes

/// A stand-in API server that knows two tokens: `prom-token` (user `system:serviceaccount:
/// monitoring:prometheus`, allowed `get` on /metrics) and `nobody-token` (user `nobody`, no
/// rules), plus a kubeconfig file for it.
async fn api_with_tokens() -> (ApiServer, tempfile::TempDir, PathBuf) {
    let api = apiserver::start().await;
    api.add_token(
        "prom-token",
        "system:serviceaccount:monitoring:prometheus",
        &["system:serviceaccounts", "system:authenticated"],
    );
    api.add_token("nobody-token", "nobody", &["system:authenticated"]);
    api.allow(
        "system:serviceaccount:monitoring:prometheus",
        "/metrics",
        "get",
    );
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    api.write_kubeconfig(&kubeconfig).unwrap();
    (api, dir, kubeconfig)
}

fn start_with_auth(kubeconfig: &Path, extra: &[&str]) -> Prober {
    let mut args = vec![
        "--role",
        "host",
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--auth",
        "kubernetes",
    ];
    args.extend_from_slice(extra);
    Prober::start(&args)
}

fn plain_client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

async fn metrics_with(client: &reqwest::Client, url: &str, token: &str) -> String {
    let r = client.get(url).bearer_auth(token).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    r.text().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bearer_tokens_get_401_403_or_200_and_health_stays_open() {
    let (api, _dir, kubeconfig) = api_with_tokens().await;
    let p = start_with_auth(&kubeconfig, &[]);
    let c = plain_client();
    let url = |path: &str| p.url(path);

    // Health endpoints need no credentials.
    eventually(Duration::from_secs(30), "ready", || async {
        status(&c, &url("/readyz"), None).await == 200
    })
    .await;
    assert_eq!(status(&c, &url("/healthz"), None).await, 200);

    // No, malformed or unknown credentials: 401 with a challenge.
    let r = c.get(url("/metrics")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 401);
    assert!(r.headers().contains_key("www-authenticate"));
    let basic = c
        .get(url("/metrics"))
        .header("authorization", "Basic dXNlcjpwYXNz")
        .send()
        .await
        .unwrap();
    assert_eq!(basic.status().as_u16(), 401);
    let empty = c
        .get(url("/metrics"))
        .header("authorization", "Bearer ")
        .send()
        .await
        .unwrap();
    assert_eq!(empty.status().as_u16(), 401);
    let binary = c
        .get(url("/metrics"))
        .header(
            "authorization",
            reqwest::header::HeaderValue::from_bytes(b"Bearer \xff\xfe").unwrap(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(binary.status().as_u16(), 401, "never a 500 on bad input");
    assert_eq!(status(&c, &url("/metrics"), Some("wrong-token")).await, 401);
    assert_eq!(status(&c, &url("/watcher"), None).await, 401);
    assert_eq!(status(&c, &url("/watcher/health"), None).await, 401);

    // Known but not allowed: 403.
    assert_eq!(
        status(&c, &url("/metrics"), Some("nobody-token")).await,
        403
    );
    assert_eq!(status(&c, &url("/watcher"), Some("prom-token")).await, 403);

    // Allowed: 200, the body as without auth.
    let body = metrics_with(&c, &url("/metrics"), "prom-token").await;
    assert!(body.contains("kube_prober_build_info"));

    // Trimaran's rule (a group, with RBAC's trailing wildcard) opens /watcher and its health.
    api.allow("system:authenticated", "/watcher*", "get");
    assert_ne!(
        status(&c, &url("/watcher"), Some("nobody-token")).await,
        403
    );
    assert_ne!(
        status(&c, &url("/watcher"), Some("nobody-token")).await,
        401
    );
    assert_ne!(
        status(&c, &url("/watcher/health"), Some("nobody-token")).await,
        401
    );
    assert_ne!(
        status(&c, &url("/watcher/health"), Some("nobody-token")).await,
        403
    );
    // ... with the verb from the method: POST is `create`, which the rule does not grant.
    let post = c
        .post(url("/watcher"))
        .bearer_auth("nobody-token")
        .send()
        .await
        .unwrap();
    assert_eq!(post.status().as_u16(), 403);

    // The SubjectAccessReviews carried the user, groups, path and verb.
    let asked = api.access_reviews_asked();
    assert!(asked.contains(&(
        "system:serviceaccount:monitoring:prometheus".into(),
        vec![
            "system:serviceaccounts".into(),
            "system:authenticated".into()
        ],
        "/metrics".into(),
        "get".into()
    )));
    assert!(
        asked
            .iter()
            .any(|(u, _, p, v)| u == "nobody" && p == "/watcher" && v == "create")
    );

    // Every decision is counted.
    let body = metrics_with(&c, &url("/metrics"), "prom-token").await;
    let n = |path: &str, d: &str| {
        sample(
            &body,
            &format!("kube_prober_http_auth_decisions_total{{path=\"{path}\",decision=\"{d}\"}}"),
        )
    };
    assert_eq!(n("/metrics", "unauthenticated"), Some(5.0), "{body}");
    assert_eq!(n("/metrics", "forbidden"), Some(1.0));
    assert_eq!(
        n("/metrics", "allowed"),
        Some(2.0),
        "this scrape counts too"
    );
    assert_eq!(n("/watcher", "unauthenticated"), Some(1.0));
    assert_eq!(n("/watcher", "forbidden"), Some(2.0));
    assert_eq!(n("/watcher", "allowed"), Some(2.0));
    assert_eq!(n("/watcher/health", "allowed"), Some(2.0));
    assert_eq!(n("/metrics", "unavailable"), Some(0.0));
    let (code, out) = support::promtool_check(&body);
    assert_eq!(code, 0, "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_are_cached_within_the_ttl() {
    let (api, _dir, kubeconfig) = api_with_tokens().await;
    let p = start_with_auth(&kubeconfig, &["--auth-cache-ttl", "1h"]);
    let c = plain_client();
    for _ in 0..3 {
        metrics_with(&c, &p.url("/metrics"), "prom-token").await;
    }
    assert_eq!(api.token_reviews(), 1, "one TokenReview for three requests");
    assert_eq!(
        api.access_reviews(),
        1,
        "one SubjectAccessReview for three requests"
    );
    // Negative answers are cached too.
    for _ in 0..3 {
        assert_eq!(
            status(&c, &p.url("/metrics"), Some("wrong-token")).await,
            401
        );
    }
    assert_eq!(api.token_reviews(), 2);
    let body = metrics_with(&c, &p.url("/metrics"), "prom-token").await;
    assert_eq!(
        sample(
            &body,
            "kube_prober_http_auth_cache_hits_total{review=\"token\"}"
        ),
        Some(5.0),
        "{body}"
    );
    assert_eq!(
        sample(
            &body,
            "kube_prober_http_auth_reviews_total{review=\"token\",result=\"ok\"}"
        ),
        Some(2.0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_expire_after_the_ttl() {
    let (api, _dir, kubeconfig) = api_with_tokens().await;
    let p = start_with_auth(&kubeconfig, &["--auth-cache-ttl", "1s"]);
    let c = plain_client();
    metrics_with(&c, &p.url("/metrics"), "prom-token").await;
    assert_eq!((api.token_reviews(), api.access_reviews()), (1, 1));
    tokio::time::sleep(Duration::from_millis(1200)).await;
    metrics_with(&c, &p.url("/metrics"), "prom-token").await;
    assert_eq!(
        (api.token_reviews(), api.access_reviews()),
        (2, 2),
        "after the TTL both reviews are asked again"
    );

    // With caching off every request asks.
    let p0 = start_with_auth(&kubeconfig, &["--auth-cache-ttl", "0s"]);
    metrics_with(&c, &p0.url("/metrics"), "prom-token").await;
    metrics_with(&c, &p0.url("/metrics"), "prom-token").await;
    assert_eq!((api.token_reviews(), api.access_reviews()), (4, 4));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_api_server_gives_503_and_is_counted() {
    let (api, _dir, kubeconfig) = api_with_tokens().await;
    let p = start_with_auth(&kubeconfig, &["--auth-cache-ttl", "1h"]);
    let c = plain_client();
    // Cached before the API server fails: still served from the cache.
    metrics_with(&c, &p.url("/metrics"), "prom-token").await;
    api.fail_reviews(Some(500));
    let body = metrics_with(&c, &p.url("/metrics"), "prom-token").await;
    assert!(body.contains("kube_prober_build_info"));
    // Not cached: no verdict, so 503 (retryable), never 401/403/500; and not cached either.
    for _ in 0..2 {
        let r = c
            .get(p.url("/metrics"))
            .bearer_auth("nobody-token")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 503);
        assert!(r.headers().contains_key("retry-after"));
    }
    assert_eq!(status(&c, &p.url("/healthz"), None).await, 200);
    api.fail_reviews(None);
    assert_eq!(
        status(&c, &p.url("/metrics"), Some("nobody-token")).await,
        403
    );
    let body = metrics_with(&c, &p.url("/metrics"), "prom-token").await;
    assert_eq!(
        sample(
            &body,
            "kube_prober_http_auth_decisions_total{path=\"/metrics\",decision=\"unavailable\"}"
        ),
        Some(2.0),
        "{body}"
    );
    assert_eq!(
        sample(
            &body,
            "kube_prober_http_auth_reviews_total{review=\"token\",result=\"error\"}"
        ),
        Some(2.0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_api_server_gives_503() {
    // A kubeconfig whose server is a port nobody listens on.
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: gone\n  cluster:\n    server: http://127.0.0.1:{port}\ncontexts:\n- name: gone\n  context:\n    cluster: gone\n    user: nobody\ncurrent-context: gone\nusers:\n- name: nobody\n  user: {{}}\n"
        ),
    )
    .unwrap();
    let p = start_with_auth(&kubeconfig, &[]);
    let c = plain_client();
    for path in ["/metrics", "/watcher", "/watcher/health"] {
        assert_eq!(
            status(&c, &p.url(path), Some("prom-token")).await,
            503,
            "{path}"
        );
    }
    assert_eq!(
        status(&c, &p.url("/metrics"), None).await,
        401,
        "no token: no review needed"
    );
    assert_eq!(status(&c, &p.url("/healthz"), None).await, 200);
    let ready = status(&c, &p.url("/readyz"), None).await;
    assert!(ready == 200 || ready == 503, "/readyz stays open: {ready}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificates_name_the_user_and_groups() {
    let (api, _dir, kubeconfig) = api_with_tokens().await;
    api.allow("monitoring", "/metrics", "get");
    let server_ca = ca("server CA");
    let client_ca = ca("client CA");
    let leaf = server_leaf(&server_ca);
    let f = tls_files(&server_ca, &leaf);
    let client_ca_file = f.dir.path().join("client-ca.crt");
    write_atomic(&client_ca_file, &client_ca.pem);
    let p = start_with_auth(
        &kubeconfig,
        &[
            "--tls-cert-file",
            f.cert.to_str().unwrap(),
            "--tls-key-file",
            f.key.to_str().unwrap(),
            "--client-ca-file",
            client_ca_file.to_str().unwrap(),
        ],
    );
    let base = format!("https://{}", p.addr);

    // (rcgen keeps one value per attribute type, so one O here.)
    let scraper = client_leaf(&client_ca, "scraper", &["monitoring"]);
    let c = https_client(&server_ca.pem, Some(&scraper));
    assert_eq!(status(&c, &format!("{base}/metrics"), None).await, 200);
    assert_eq!(api.token_reviews(), 0, "a certificate needs no TokenReview");
    assert!(api.access_reviews_asked().contains(&(
        "scraper".into(),
        vec!["monitoring".into()],
        "/metrics".into(),
        "get".into()
    )));

    let other = client_leaf(&client_ca, "other", &[]);
    let c_other = https_client(&server_ca.pem, Some(&other));
    assert_eq!(
        status(&c_other, &format!("{base}/metrics"), None).await,
        403
    );

    // No certificate: a bearer token still works over the same listener.
    let c_none = https_client(&server_ca.pem, None);
    assert_eq!(status(&c_none, &format!("{base}/metrics"), None).await, 401);
    assert_eq!(
        status(&c_none, &format!("{base}/metrics"), Some("prom-token")).await,
        200
    );
    assert_eq!(status(&c_none, &format!("{base}/healthz"), None).await, 200);

    // A certificate from a CA the server does not trust is refused in the handshake.
    let stranger = client_leaf(&ca("stranger CA"), "scraper", &["monitoring"]);
    let c_stranger = https_client(&server_ca.pem, Some(&stranger));
    let r = c_stranger.get(format!("{base}/metrics")).send().await;
    assert!(r.is_err(), "untrusted client certificate accepted: {r:?}");
    drop(f);
}

// ---------------------------------------------------------------------------------------------
// A real Prometheus scraping over HTTPS with a bearer token

use support::ports::free_port;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_over_tls_with_a_bearer_token() {
    let (api, _dir, kubeconfig) = api_with_tokens().await;
    let ca = ca("test CA");
    let leaf = server_leaf(&ca);
    let f = tls_files(&ca, &leaf);
    let p = start_with_auth(
        &kubeconfig,
        &[
            "--tls-cert-file",
            f.cert.to_str().unwrap(),
            "--tls-key-file",
            f.key.to_str().unwrap(),
        ],
    );
    let token_file = f.dir.path().join("token");
    std::fs::write(&token_file, "prom-token").unwrap();
    let config = format!(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n\
         scrape_configs:\n\
         \x20 - job_name: kube-prober\n\
         \x20   scheme: https\n\
         \x20   authorization:\n\
         \x20     credentials_file: {token}\n\
         \x20   tls_config:\n\
         \x20     ca_file: {ca}\n\
         \x20   static_configs:\n\
         \x20     - targets: ['{addr}']\n\
         \x20 - job_name: no-token\n\
         \x20   scheme: https\n\
         \x20   tls_config:\n\
         \x20     ca_file: {ca}\n\
         \x20   static_configs:\n\
         \x20     - targets: ['{addr}']\n",
        token = token_file.display(),
        ca = f.ca.display(),
        addr = p.addr,
    );
    let config_path = f.dir.path().join("prometheus.yml");
    std::fs::write(&config_path, config).unwrap();
    let port = free_port();
    let log = std::fs::File::create(f.dir.path().join("prometheus.log")).unwrap();
    let mut prom = std::process::Command::new("prometheus");
    prom.arg(format!("--config.file={}", config_path.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            f.dir.path().join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(log.try_clone().unwrap())
        .stderr(log);
    let prom =
        support::owned::spawn(prom).expect("prometheus (Debian package `prometheus`) on PATH");
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _guard = Kill(prom);

    let c = plain_client();
    let targets_url = format!("http://127.0.0.1:{port}/api/v1/targets");
    let mut last = String::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    let (up, down_error) = loop {
        assert!(
            Instant::now() < deadline,
            "Prometheus did not report both targets within 60 s: {last}\n{}",
            std::fs::read_to_string(f.dir.path().join("prometheus.log")).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        let Ok(r) = c.get(&targets_url).send().await else {
            continue;
        };
        last = r.text().await.unwrap_or_default();
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&last) else {
            continue;
        };
        let targets = v["data"]["activeTargets"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let health = |job: &str| {
            targets.iter().find(|t| t["labels"]["job"] == job).map(|t| {
                (
                    t["health"].as_str().unwrap_or("").to_string(),
                    t["lastError"].as_str().unwrap_or("").to_string(),
                )
            })
        };
        if let (Some(with), Some(without)) = (health("kube-prober"), health("no-token"))
            && with.0 != "unknown"
            && without.0 != "unknown"
        {
            break (with, without);
        }
    };
    assert_eq!(up.0, "up", "scrape with the token: {up:?}");
    assert_eq!(down_error.0, "down");
    assert!(down_error.1.contains("401"), "{down_error:?}");
    assert!(api.token_reviews() >= 1);
    assert!(api.access_reviews_asked().iter().any(|(u, _, p, v)| {
        u == "system:serviceaccount:monitoring:prometheus" && p == "/metrics" && v == "get"
    }));
    drop(f);
}
