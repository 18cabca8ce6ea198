//! The kubelet's `GET /pods` (a PodList) as the node role's task pod source (`--kubelet-url`).
//!
//! When set, it replaces the API-server pod watch as the source of *tasks*: every poll lists the
//! kubelet's pods and swaps them into a [`TaskPodIndex`] as a relist would, through the one
//! conversion the watch path uses ([`super::pods::task_pod`]: namespaces, labels, QoS,
//! effective requests and limits). The node role's pod watch on the API server still runs for the
//! node's own facts (per-node requests); it just no longer feeds the task source.
//!
//! Authentication: the service-account token (`--kubelet-token-file`, re-read on every poll so
//! a rotated token is picked up) or a client certificate (`--kubelet-client-cert-file` and
//! `--kubelet-client-key-file`). TLS is verified against `--kubelet-ca-file` only (default: the
//! service-account `ca.crt`), unless `--kubelet-insecure-skip-tls-verify` says otherwise. The CA,
//! certificate and key files are compared with what the client was built from on every poll;
//! a change rebuilds the client. The body is capped at `--max-response-bytes`. The client
//! never follows redirects (a 3xx is a counted failure, so the token is never sent elsewhere)
//! and never uses a proxy from the environment.
//!
//! The kubelet authorizes `/pods` as `get` on the `nodes/proxy` subresource (`nodes/pods` with the
//! `KubeletFineGrainedAuthz` feature), see docs/node-role.md.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::pods::TaskPodIndex;
use crate::hub::{Provider, RunOutcome};
use crate::shared::error::{Cause, Error, Result, chain};
use crate::sources::runner::{self, Pace, SourceRun};

/// The source name in the self-metrics (`kube_prober_source_*{source="kubelet_pods"}`).
pub const KUBELET_SOURCE: &str = "kubelet_pods";
/// The in-cluster service-account token: `--kubelet-token-file`'s default.
pub const DEFAULT_TOKEN_FILE: &str = crate::k8s::role::SERVICE_ACCOUNT_TOKEN;
/// The in-cluster service-account CA: `--kubelet-ca-file`'s default.
pub const DEFAULT_CA_FILE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt";

/// How the kubelet is told who we are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KubeletAuth {
    /// `Authorization: Bearer <file content>`, read on every poll.
    TokenFile(PathBuf),
    /// A client certificate and its key (PEM files).
    ClientCert { cert: PathBuf, key: PathBuf },
}

/// `--kubelet-*` as resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeletConfig {
    /// Base URL, e.g. `https://10.0.0.5:10250`; `/pods` is appended.
    pub url: String,
    pub auth: KubeletAuth,
    /// The only roots trusted for the kubelet's serving certificate; `None` with
    /// `insecure_skip_verify`.
    pub ca_file: Option<PathBuf>,
    pub insecure_skip_verify: bool,
}

/// The files the TLS client is built from, as read.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct TlsFiles {
    ca: Option<Vec<u8>>,
    identity: Option<Vec<u8>>,
}

fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })
}

impl TlsFiles {
    fn load(s: &KubeletConfig) -> Result<Self> {
        let ca = match (&s.ca_file, s.insecure_skip_verify) {
            (Some(p), false) => Some(read(p)?),
            _ => None,
        };
        let identity = match &s.auth {
            KubeletAuth::ClientCert { cert, key } => {
                let mut pem = read(cert)?;
                pem.push(b'\n');
                pem.extend(read(key)?);
                Some(pem)
            }
            KubeletAuth::TokenFile(_) => None,
        };
        Ok(TlsFiles { ca, identity })
    }
}

/// A TLS file the kubelet client cannot use: which one, by type, so the start names its flag.
#[derive(Debug, thiserror::Error)]
enum BadTlsFile {
    #[error("not a PEM certificate bundle")]
    CaBundle,
    /// reqwest hides rustls's reason two levels down: the text is the whole chain.
    #[error("not a PEM certificate and private key: {}", chain(.0))]
    Identity(#[source] reqwest::Error),
}

impl BadTlsFile {
    /// The flag of the file `e` is about, when it is one of these.
    fn flag_of(e: &Error) -> Option<&'static str> {
        let Error::Parse {
            source: Cause::Other(inner),
            ..
        } = e
        else {
            return None;
        };
        match inner.downcast_ref::<BadTlsFile>()? {
            BadTlsFile::CaBundle => Some("--kubelet-ca-file"),
            BadTlsFile::Identity(_) => Some("--kubelet-client-cert-file"),
        }
    }
}

/// Builds the client for `files`. Errors name the file at fault (`Parse`); the caller decides
/// whether that stops the start (a config error) or is counted (a rotated file gone bad).
fn build_client(s: &KubeletConfig, files: &TlsFiles, timeout: Duration) -> Result<reqwest::Client> {
    // Never follow a redirect (it would carry the request, and with some policies the bearer
    // token, to wherever the answer points: a 3xx is a counted failure) and never go through
    // HTTP(S)_PROXY/ALL_PROXY from the environment (the kubelet is reached directly).
    let mut b = reqwest::Client::builder()
        .timeout(timeout)
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .danger_accept_invalid_certs(s.insecure_skip_verify);
    if let (Some(pem), Some(path)) = (&files.ca, &s.ca_file) {
        let certs = reqwest::Certificate::from_pem_bundle(pem)
            .ok()
            .filter(|c| !c.is_empty())
            .ok_or_else(|| {
                Error::parse(
                    format!("--kubelet-ca-file {}", path.display()),
                    Cause::other(BadTlsFile::CaBundle),
                )
            })?;
        b = b.tls_certs_only(certs);
    }
    if let Some(pem) = &files.identity {
        let id = reqwest::Identity::from_pem(pem).map_err(|e| {
            Error::parse(
                "--kubelet-client-cert-file/--kubelet-client-key-file",
                Cause::other(BadTlsFile::Identity(e)),
            )
        })?;
        b = b.identity(id);
    }
    b.build()
        .map_err(|e| Error::http("building the kubelet client", Cause::chain(e)))
}

/// The kubelet's answer: `{"kind":"PodList","apiVersion":"v1","items":[...]}`.
pub type PodList = k8s_openapi::List<Pod>;

/// Polls the kubelet's `/pods`.
#[derive(Debug)]
pub struct KubeletPods {
    settings: KubeletConfig,
    url: String,
    timeout: Duration,
    max_body_bytes: usize,
    files: TlsFiles,
    client: reqwest::Client,
}

impl KubeletPods {
    /// Reads the TLS files and builds the client; any problem is a config error naming the flag
    /// (exit 2). A missing token file is one too: without it no poll could succeed.
    pub fn new(settings: KubeletConfig, timeout: Duration, max_body_bytes: usize) -> Result<Self> {
        let cfg_err = |option: &'static str, value: String, e: Error| Error::Config {
            option,
            value,
            reason: e.to_string(),
        };
        let files = TlsFiles::load(&settings).map_err(|e| {
            let (option, path) = match &e {
                Error::Io { path, .. } => (flag_of(&settings, path), path.display().to_string()),
                _ => ("--kubelet-url", settings.url.clone()),
            };
            cfg_err(option, path, e)
        })?;
        let client = build_client(&settings, &files, timeout).map_err(|e| {
            let option = BadTlsFile::flag_of(&e).unwrap_or("--kubelet-url");
            cfg_err(option, settings.url.clone(), e)
        })?;
        if let KubeletAuth::TokenFile(p) = &settings.auth {
            read(p).map_err(|e| cfg_err("--kubelet-token-file", p.display().to_string(), e))?;
        }
        let url = format!("{}/pods", settings.url.trim_end_matches('/'));
        Ok(KubeletPods {
            settings,
            url,
            timeout,
            max_body_bytes,
            files,
            client,
        })
    }

    pub fn settings(&self) -> &KubeletConfig {
        &self.settings
    }

    /// Rebuilds the client when the CA, certificate or key file changed since it was built.
    fn refresh_tls(&mut self) -> Result<()> {
        let now = TlsFiles::load(&self.settings)?;
        if now != self.files {
            self.client = build_client(&self.settings, &now, self.timeout)?;
            self.files = now;
            tracing::info!(url = %self.settings.url, "kubelet TLS files changed; client rebuilt");
        }
        Ok(())
    }

    /// One `GET /pods`: the kubelet's PodList.
    pub async fn fetch(&mut self) -> Result<PodList> {
        self.refresh_tls()?;
        let what = format!("kubelet GET {}", self.url);
        let mut req = self
            .client
            .get(&self.url)
            .header(http::header::ACCEPT, "application/json");
        if let KubeletAuth::TokenFile(p) = &self.settings.auth {
            let token = String::from_utf8_lossy(&read(p)?).trim().to_string();
            req = req.bearer_auth(token);
        }
        let resp = req.send().await.map_err(|e| {
            if e.is_timeout() {
                Error::Timeout {
                    what: what.clone(),
                    after: self.timeout,
                }
            } else {
                Error::http(what.clone(), Cause::chain(e))
            }
        })?;
        let status = resp.status();
        if status.is_redirection() {
            let to = resp
                .headers()
                .get(http::header::LOCATION)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("(no Location)");
            return Err(Error::http(
                what,
                Cause::message(format!(
                    "HTTP {status}: a redirect to {to}, not followed (the kubelet is asked directly; the token goes nowhere else)"
                )),
            ));
        }
        if !status.is_success() {
            let hint = match status.as_u16() {
                401 => {
                    " (the kubelet did not accept the token or client certificate; service-account tokens need the kubelet's webhook authentication)"
                }
                403 => {
                    " (RBAC: the kubelet authorizes /pods as get on nodes/proxy, or nodes/pods with KubeletFineGrainedAuthz)"
                }
                _ => "",
            };
            return Err(Error::http(
                what,
                Cause::message(format!("HTTP {status}{hint}")),
            ));
        }
        let body = crate::shared::limit::read_capped(resp, self.max_body_bytes)
            .await
            .map_err(|e| match e {
                crate::shared::limit::ReadError::TooLarge(t) => Error::too_large(what.clone(), t),
                crate::shared::limit::ReadError::Read(e) if e.is_timeout() => Error::Timeout {
                    what: what.clone(),
                    after: self.timeout,
                },
                crate::shared::limit::ReadError::Read(e) => Error::http(
                    what.clone(),
                    Cause::context("reading the body", Cause::chain(e)),
                ),
            })?;
        serde_json::from_slice::<PodList>(&body)
            .map_err(|e| Error::parse(what, Cause::context("not a PodList", e)))
    }

    /// One poll into `index`: on success the kubelet's pods replace the index's (finished pods
    /// and pods outside `--task-namespaces` leave out, bad ones are counted and logged by the
    /// index); on failure the last good pods stay.
    pub async fn poll_into(&mut self, index: &TaskPodIndex) -> RunOutcome {
        match self.fetch().await {
            Ok(list) => {
                index.begin_relist();
                for p in &list.items {
                    index.relist_apply(p);
                }
                index.end_relist();
                if list.items.is_empty() {
                    RunOutcome::NoData
                } else {
                    RunOutcome::Ok
                }
            }
            Err(e) => {
                // Logged by the runner: the first failure and each new reason at WARN.
                RunOutcome::Failed {
                    reason: e.metric_label().into(),
                    message: e.to_string(),
                }
            }
        }
    }
}

/// The flag whose file `path` is.
fn flag_of(s: &KubeletConfig, path: &Path) -> &'static str {
    match &s.auth {
        KubeletAuth::ClientCert { cert, .. } if cert == path => return "--kubelet-client-cert-file",
        KubeletAuth::ClientCert { key, .. } if key == path => return "--kubelet-client-key-file",
        _ => {}
    }
    "--kubelet-ca-file"
}

/// Polls every `interval` into `index` until cancelled; each poll is a run of
/// [`KUBELET_SOURCE`] (readiness waits for the first, successful or not).
pub fn spawn(
    mut source: KubeletPods,
    index: TaskPodIndex,
    interval: Duration,
    provider: Arc<dyn Provider>,
    cancel: CancellationToken,
) -> JoinHandle<()> {
    let mut run = SourceRun::register(KUBELET_SOURCE, provider);
    if source.settings.insecure_skip_verify {
        tracing::warn!(url = %source.settings.url, "--kubelet-insecure-skip-tls-verify: the kubelet's serving certificate is not verified; anyone on the path can impersonate it and read the token");
    }
    tokio::spawn(async move {
        let mut pace = Pace::every(interval);
        while pace.next(&cancel).await {
            let started = Instant::now();
            let Some(outcome) = runner::until_cancelled(&cancel, source.poll_into(&index)).await
            else {
                break;
            };
            run.record(started.elapsed(), outcome);
        }
    })
}
