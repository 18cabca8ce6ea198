//! A stand-in kubelet on 127.0.0.1 over HTTPS: its own CA (rcgen) and a serving certificate for
//! 127.0.0.1, `GET /pods` answering a real k8s_openapi PodList to a request that carries the
//! expected bearer token or a client certificate chaining to its client CA (else 401), and
//! switchable failures (a status, a huge body, invalid JSON). It records every request.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use k8s_openapi::api::core::v1::Pod;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
};
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// What `GET /pods` answers (to an authorized request).
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// The pods as a PodList.
    Pods,
    /// This status with a short body.
    Status(u16),
    /// A 200 of this many bytes (valid JSON never reached: the cap must stop it first).
    Huge(usize),
    /// A 200 that is not JSON.
    Invalid,
    /// A 302 to this URL.
    Redirect(String),
}

/// One request as the stand-in saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub path: String,
    pub bearer: Option<String>,
    pub client_cert: bool,
    pub authorized: bool,
}

#[derive(Debug)]
struct State {
    pods: Vec<Pod>,
    answer: Answer,
    token: String,
    seen: Vec<Seen>,
}

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

/// (certificate PEM, key PEM)
fn leaf(ca: &Ca, names: Vec<String>, cn: &str, usage: ExtendedKeyUsagePurpose) -> (String, String) {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(names).unwrap();
    params.distinguished_name.push(DnType::CommonName, cn);
    params.extended_key_usages = vec![usage];
    let cert = params.signed_by(&key, &ca.issuer).unwrap();
    (cert.pem(), key.serialize_pem())
}

/// The PEM files a prober is pointed at.
#[derive(Debug, Clone)]
pub struct KubeletFiles {
    /// The CA of the kubelet's serving certificate.
    pub ca: PathBuf,
    /// A CA that did not sign it.
    pub other_ca: PathBuf,
    /// A client certificate and key the kubelet accepts.
    pub cert: PathBuf,
    pub key: PathBuf,
    /// A client certificate and key from a CA the kubelet does not trust.
    pub stranger_cert: PathBuf,
    pub stranger_key: PathBuf,
    /// The token the kubelet accepts.
    pub token: PathBuf,
}

pub struct FakeKubelet {
    /// `https://127.0.0.1:PORT`
    pub url: String,
    pub ca_pem: String,
    other_ca_pem: String,
    client: (String, String),
    stranger: (String, String),
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeKubelet {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn response(status: u16, body: impl Into<Bytes>) -> http::Response<Full<Bytes>> {
    let mut r = http::Response::new(Full::new(body.into()));
    *r.status_mut() = http::StatusCode::from_u16(status).unwrap();
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    r
}

fn answer(
    state: &Mutex<State>,
    client_cert: bool,
    req: &http::Request<hyper::body::Incoming>,
) -> http::Response<Full<Bytes>> {
    let mut st = state.lock().unwrap();
    let bearer = req
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_string);
    let authorized = client_cert || bearer.as_deref() == Some(st.token.as_str());
    st.seen.push(Seen {
        path: req.uri().path().to_string(),
        bearer,
        client_cert,
        authorized,
    });
    if !authorized {
        return response(401, "Unauthorized");
    }
    if req.method() != http::Method::GET || req.uri().path() != "/pods" {
        return response(404, "404 page not found");
    }
    match &st.answer {
        Answer::Pods => {
            let list = serde_json::json!({
                "kind": "PodList",
                "apiVersion": "v1",
                "metadata": {},
                "items": st.pods,
            });
            response(200, serde_json::to_vec(&list).unwrap())
        }
        Answer::Status(code) => response(*code, "failed"),
        Answer::Huge(n) => {
            let mut body = b"{\"kind\":\"PodList\",\"apiVersion\":\"v1\",\"items\":[\"".to_vec();
            body.resize(*n, b'x');
            response(200, body)
        }
        Answer::Invalid => response(200, "{\"kind\":\"PodList\",\"items\":[{\"metadata\":"),
        Answer::Redirect(to) => {
            let mut r = response(302, "Found");
            if let Ok(v) = http::HeaderValue::from_str(to) {
                r.headers_mut().insert(http::header::LOCATION, v);
            }
            r
        }
    }
}

fn server_config(serving: &(String, String), client_ca: &str) -> Arc<rustls::ServerConfig> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(serving.0.as_bytes())
        .collect::<Result<_, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_slice(serving.1.as_bytes()).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(client_ca.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    // As the kubelet: a client certificate is optional (a token may authenticate instead), but
    // one that is presented must chain to the client CA.
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .allow_unauthenticated()
    .build()
    .unwrap();
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)
        .unwrap();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(config)
}

impl FakeKubelet {
    /// Starts on 127.0.0.1:0, accepting `token` or a client certificate of its client CA.
    pub async fn start(token: &str) -> Self {
        let serving_ca = ca("stand-in kubelet CA");
        let client_ca = ca("stand-in kubelet client CA");
        let other = ca("some other CA");
        let serving = leaf(
            &serving_ca,
            vec!["127.0.0.1".into(), "localhost".into()],
            "kubelet",
            ExtendedKeyUsagePurpose::ServerAuth,
        );
        let client = leaf(
            &client_ca,
            vec![],
            "system:serviceaccount:kube-system:kube-prober-node",
            ExtendedKeyUsagePurpose::ClientAuth,
        );
        let stranger = leaf(
            &other,
            vec![],
            "stranger",
            ExtendedKeyUsagePurpose::ClientAuth,
        );
        let acceptor = tokio_rustls::TlsAcceptor::from(server_config(&serving, &client_ca.pem));
        let state = Arc::new(Mutex::new(State {
            pods: Vec::new(),
            answer: Answer::Pods,
            token: token.to_string(),
            seen: Vec::new(),
        }));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let st = state.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let acceptor = acceptor.clone();
                let st = st.clone();
                tokio::spawn(async move {
                    let Ok(Ok(tls)) =
                        tokio::time::timeout(Duration::from_secs(5), acceptor.accept(tcp)).await
                    else {
                        return;
                    };
                    let client_cert = tls
                        .get_ref()
                        .1
                        .peer_certificates()
                        .is_some_and(|c| !c.is_empty());
                    let svc = hyper::service::service_fn(move |req| {
                        let r = answer(&st, client_cert, &req);
                        async move { Ok::<_, std::convert::Infallible>(r) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(tls), svc)
                        .await;
                });
            }
        });
        FakeKubelet {
            url: format!("https://{addr}"),
            ca_pem: serving_ca.pem,
            other_ca_pem: other.pem,
            client,
            stranger,
            state,
            task,
        }
    }

    /// Writes the CA, client certificate and token files into `dir`.
    pub fn write_files(&self, dir: &Path) -> KubeletFiles {
        let w = |name: &str, text: &str| {
            let p = dir.join(name);
            std::fs::write(&p, text).unwrap();
            p
        };
        KubeletFiles {
            ca: w("kubelet-ca.crt", &self.ca_pem),
            other_ca: w("other-ca.crt", &self.other_ca_pem),
            cert: w("client.crt", &self.client.0),
            key: w("client.key", &self.client.1),
            stranger_cert: w("stranger.crt", &self.stranger.0),
            stranger_key: w("stranger.key", &self.stranger.1),
            token: w("token", &format!("{}\n", self.state.lock().unwrap().token)),
        }
    }

    pub fn set_pods(&self, pods: Vec<Pod>) {
        self.state.lock().unwrap().pods = pods;
    }

    pub fn set_answer(&self, a: Answer) {
        self.state.lock().unwrap().answer = a;
    }

    /// The token it accepts from now on (a rotation).
    pub fn set_token(&self, token: &str) {
        self.state.lock().unwrap().token = token.to_string();
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.state.lock().unwrap().seen.clone()
    }
}
