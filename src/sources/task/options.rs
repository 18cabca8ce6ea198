//! The task source's options: where cgroups and sysfs are, which pods and labels, perf
//! counters and read scheduling ([`TaskOptions`]), and the kubelet as the source of task pods
//! ([`KubeletOptions`]); resolved together into [`TaskConfig`].

use std::path::PathBuf;

use super::cgroup::{DEFAULT_DETAIL_EVERY, MAX_DETAIL_EVERY};
use super::kubelet::{DEFAULT_CA_FILE, DEFAULT_TOKEN_FILE, KubeletAuth, KubeletConfig};
use crate::model::PerfMode;
use crate::shared::error::Result;
use crate::shared::options::{csv, invalid, is_namespace_name, path};

/// The node role's task metrics.
#[derive(Debug, Clone, Default, PartialEq, clap::Args, serde::Deserialize)]
#[serde(default)]
pub struct TaskOptions {
    /// Where the cgroup hierarchies are mounted; the node role reads pod and container
    /// cgroups there, never writes (in a container: /host/sys/fs/cgroup). [default: /sys/fs/cgroup]
    #[arg(long, env = "KUBE_PROBER_CGROUP_ROOT", value_name = "DIR")]
    pub cgroup_root: Option<PathBuf>,

    /// sysfs root the node role reads CPU and NUMA topology from (in a container: /host/sys).
    /// [default: /sys]
    #[arg(long, env = "KUBE_PROBER_SYSFS", value_name = "DIR")]
    pub sysfs: Option<PathBuf>,

    /// Namespaces whose pods get task metrics (comma-separated; WCA's monitored_namespaces).
    /// [default: all]
    #[arg(long, env = "KUBE_PROBER_TASK_NAMESPACES", value_name = "NS,...")]
    pub task_namespaces: Option<String>,

    /// Pod label keys copied onto task metrics as labels (comma-separated), e.g.
    /// app.kubernetes.io/name. [default: none]
    #[arg(long, env = "KUBE_PROBER_TASK_LABEL_ALLOWLIST", value_name = "KEY,...")]
    pub task_label_allowlist: Option<String>,

    /// Per-pod perf counters through perf_event_open in cgroup mode (node role): `off`, `auto`
    /// (hardware events where allowed, else software events), `hardware` or `software`; the
    /// flag alone means `auto`. Needs CAP_PERFMON or CAP_SYS_ADMIN. [default: off]
    #[arg(long, env = "KUBE_PROBER_TASK_PERF_EVENTS", value_name = "MODE", num_args = 0..=1, default_missing_value = "auto")]
    pub task_perf_events: Option<String>,

    /// Node role: read each cgroup's detail files (v1 cpu.stat throttling, OOM kills,
    /// memory.stat, NUMA stat, pressure, memory limit, cpuset) once every N collections,
    /// staggered over the cgroups (1..=60; 1: every collection). CPU and memory usage are read
    /// on every collection (and v2 throttling, from the same cpu.stat). [default: 4]
    #[arg(long, env = "KUBE_PROBER_TASK_DETAIL_EVERY", value_name = "N")]
    #[serde(deserialize_with = "crate::shared::options::u32_as_text")]
    pub task_detail_every: Option<String>,

    /// Node role: read each container cgroup's detail files once every M collections,
    /// staggered over the containers (1..=60); pod cgroups follow --task-detail-every.
    /// Containers' CPU and memory usage are read on every collection. [default: twice
    /// --task-detail-every, at most 60]
    #[arg(
        long,
        env = "KUBE_PROBER_TASK_CONTAINER_DETAIL_EVERY",
        value_name = "M"
    )]
    #[serde(deserialize_with = "crate::shared::options::u32_as_text")]
    pub task_container_detail_every: Option<String>,
}

crate::merge_options!(TaskOptions {
    cgroup_root,
    sysfs,
    task_namespaces,
    task_label_allowlist,
    task_perf_events,
    task_detail_every,
    task_container_detail_every
});

/// Task pods from the kubelet's `/pods` instead of the API server.
#[derive(Debug, Clone, Default, PartialEq, clap::Args, serde::Deserialize)]
#[serde(default)]
pub struct KubeletOptions {
    /// Node role: take task pods from this kubelet's GET /pods (e.g. https://$(NODE_IP):10250)
    /// instead of the API-server pod watch. [default: none]
    #[arg(long, env = "KUBE_PROBER_KUBELET_URL", value_name = "URL")]
    pub kubelet_url: Option<String>,

    /// Bearer token file for the kubelet, re-read on every poll.
    /// [default: /var/run/secrets/kubernetes.io/serviceaccount/token]
    #[arg(long, env = "KUBE_PROBER_KUBELET_TOKEN_FILE", value_name = "FILE")]
    pub kubelet_token_file: Option<PathBuf>,

    /// Client certificate (PEM) for the kubelet instead of the token; needs
    /// --kubelet-client-key-file.
    #[arg(
        long,
        env = "KUBE_PROBER_KUBELET_CLIENT_CERT_FILE",
        value_name = "FILE"
    )]
    pub kubelet_client_cert_file: Option<PathBuf>,

    /// Private key (PEM) of --kubelet-client-cert-file.
    #[arg(long, env = "KUBE_PROBER_KUBELET_CLIENT_KEY_FILE", value_name = "FILE")]
    pub kubelet_client_key_file: Option<PathBuf>,

    /// The only CA trusted for the kubelet's serving certificate.
    /// [default: /var/run/secrets/kubernetes.io/serviceaccount/ca.crt]
    #[arg(long, env = "KUBE_PROBER_KUBELET_CA_FILE", value_name = "FILE")]
    pub kubelet_ca_file: Option<PathBuf>,

    /// Do not verify the kubelet's serving certificate (self-signed kubelet certificates, as
    /// metrics-server's --kubelet-insecure-tls). [default: false]
    #[arg(long, env = "KUBE_PROBER_KUBELET_INSECURE_SKIP_TLS_VERIFY", value_name = "BOOL", num_args = 0..=1, default_missing_value = "true", value_parser = crate::shared::options::parse_bool)]
    pub kubelet_insecure_skip_tls_verify: Option<bool>,
}

crate::merge_options!(KubeletOptions {
    kubelet_url,
    kubelet_token_file,
    kubelet_client_cert_file,
    kubelet_client_key_file,
    kubelet_ca_file,
    kubelet_insecure_skip_tls_verify
});

/// The node role's task source: where cgroups and sysfs are, which pods, which labels.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskConfig {
    pub cgroup_root: PathBuf,
    pub sysfs: PathBuf,
    /// Empty: every namespace.
    pub namespaces: Vec<String>,
    pub label_allowlist: Vec<String>,
    /// `--kubelet-url` and its auth: task pods from the kubelet instead of the pod watch.
    pub kubelet: Option<KubeletConfig>,
    /// `--task-perf-events`.
    pub perf_events: PerfMode,
    /// `--task-detail-every`: collections between two reads of a cgroup's detail files.
    pub detail_every: u64,
    /// `--task-container-detail-every`: the same for container cgroups (default twice
    /// `detail_every`, at most `MAX_DETAIL_EVERY`).
    pub container_detail_every: u64,
}

impl TaskOptions {
    pub fn resolve(mut self, kubelet: KubeletOptions) -> Result<TaskConfig> {
        let dir = |option: &'static str, v: Option<PathBuf>, default: &str| -> Result<PathBuf> {
            let p = v.unwrap_or_else(|| PathBuf::from(default));
            if p.as_os_str().is_empty() {
                return Err(invalid(option, "", "must not be empty"));
            }
            Ok(p)
        };
        let cgroup_root = dir("--cgroup-root", self.cgroup_root.take(), "/sys/fs/cgroup")?;
        let sysfs = dir("--sysfs", self.sysfs.take(), "/sys")?;
        let ns_s = self.task_namespaces.take().unwrap_or_default();
        let namespaces = csv(&ns_s);
        if !namespaces.iter().all(|n| is_namespace_name(n)) {
            return Err(invalid(
                "--task-namespaces",
                &ns_s,
                "expected comma-separated namespace names",
            ));
        }
        let label_allowlist = label_keys(self.task_label_allowlist.take())?;
        let kubelet = kubelet.resolve()?;
        let perf_events = match self.task_perf_events.as_deref() {
            None => PerfMode::Off,
            Some(v) => PerfMode::parse(v).ok_or_else(|| {
                invalid(
                    "--task-perf-events",
                    v,
                    "expected off, auto, hardware or software",
                )
            })?,
        };
        let (detail_every, container_detail_every) = self.detail_every()?;
        Ok(TaskConfig {
            cgroup_root,
            sysfs,
            namespaces,
            label_allowlist,
            kubelet,
            perf_events,
            detail_every,
            container_detail_every,
        })
    }

    /// `--task-detail-every` and `--task-container-detail-every`.
    fn detail_every(&mut self) -> Result<(u64, u64)> {
        let max = MAX_DETAIL_EVERY;
        let every = |option: &'static str, v: String| {
            v.trim()
                .parse::<u64>()
                .map_err(|_| invalid(option, &v, format!("expected 1..={max}")))
        };
        let in_range = |option: &'static str, n: u64| {
            if (1..=max).contains(&n) {
                Ok(n)
            } else {
                Err(invalid(
                    option,
                    &n.to_string(),
                    format!("expected 1..={max} collections"),
                ))
            }
        };
        const POD: &str = "--task-detail-every";
        const CONTAINER: &str = "--task-container-detail-every";
        let detail_every = match self.task_detail_every.take() {
            Some(s) => every(POD, s)?,
            None => DEFAULT_DETAIL_EVERY,
        };
        let detail_every = in_range(POD, detail_every)?;
        let container = match self.task_container_detail_every.take() {
            Some(s) => every(CONTAINER, s)?,
            None => (2 * detail_every).min(max),
        };
        Ok((detail_every, in_range(CONTAINER, container)?))
    }
}

/// `--task-label-allowlist`: Kubernetes label keys (an optional DNS prefix and `/`, then a
/// name of at most 63 characters of `[A-Za-z0-9-_.]`).
fn label_keys(list: Option<String>) -> Result<Vec<String>> {
    let keys = csv(&list.unwrap_or_default());
    let valid_key = |k: &String| {
        let name = k.rsplit_once('/').map_or(k.as_str(), |(_, n)| n);
        !name.is_empty()
            && name.len() <= 63
            && k.len() <= 317
            && k.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
    };
    if let Some(bad) = keys.iter().find(|k| !valid_key(k)) {
        return Err(invalid(
            "--task-label-allowlist",
            bad,
            "not a Kubernetes label key",
        ));
    }
    Ok(keys)
}

impl KubeletOptions {
    /// `None` without `--kubelet-url` (the other `--kubelet-*` flags then are an error).
    pub fn resolve(self) -> Result<Option<KubeletConfig>> {
        let token = path("--kubelet-token-file", self.kubelet_token_file)?;
        let cert = path("--kubelet-client-cert-file", self.kubelet_client_cert_file)?;
        let key = path("--kubelet-client-key-file", self.kubelet_client_key_file)?;
        let ca = path("--kubelet-ca-file", self.kubelet_ca_file)?;
        let insecure = self.kubelet_insecure_skip_tls_verify.unwrap_or(false);
        let Some(url) = self.kubelet_url else {
            let stray = [
                ("--kubelet-token-file", token.is_some()),
                ("--kubelet-client-cert-file", cert.is_some()),
                ("--kubelet-client-key-file", key.is_some()),
                ("--kubelet-ca-file", ca.is_some()),
                ("--kubelet-insecure-skip-tls-verify", insecure),
            ];
            if let Some((option, _)) = stray.iter().find(|(_, set)| *set) {
                return Err(invalid(option, "", "needs --kubelet-url"));
            }
            return Ok(None);
        };
        let url = kubelet_base_url(&url)?;
        let auth = kubelet_auth(token, cert, key)?;
        if insecure && ca.is_some() {
            return Err(invalid(
                "--kubelet-insecure-skip-tls-verify",
                "true",
                "conflicts with --kubelet-ca-file (verify against the CA, or do not verify)",
            ));
        }
        let ca_file = (!insecure).then(|| ca.unwrap_or_else(|| PathBuf::from(DEFAULT_CA_FILE)));
        Ok(Some(KubeletConfig {
            url,
            auth,
            ca_file,
            insecure_skip_verify: insecure,
        }))
    }
}

/// `--kubelet-url`, checked: an http:// or https:// base URL.
fn kubelet_base_url(url: &str) -> Result<String> {
    let url = url.trim().to_string();
    let parsed = reqwest::Url::parse(&url).map_err(|e| {
        invalid(
            "--kubelet-url",
            &url,
            format!("not a URL ({e}); expected e.g. https://$(NODE_IP):10250"),
        )
    })?;
    if !matches!(parsed.scheme(), "https" | "http")
        || parsed.host_str().is_none_or(str::is_empty)
        || parsed.query().is_some()
        || parsed.fragment().is_some()
    {
        return Err(invalid(
            "--kubelet-url",
            &url,
            "expected an http:// or https:// base URL without query, e.g. https://$(NODE_IP):10250",
        ));
    }
    Ok(url)
}

/// How the kubelet is authenticated: a client certificate, or a token file (the service
/// account's by default).
fn kubelet_auth(
    token: Option<PathBuf>,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
) -> Result<KubeletAuth> {
    match (cert, key) {
        (Some(_), Some(_)) if token.is_some() => Err(invalid(
            "--kubelet-token-file",
            "",
            "give a token file or a client certificate, not both",
        )),
        (Some(cert), Some(key)) => Ok(KubeletAuth::ClientCert { cert, key }),
        (None, None) => Ok(KubeletAuth::TokenFile(
            token.unwrap_or_else(|| PathBuf::from(DEFAULT_TOKEN_FILE)),
        )),
        (Some(_), None) => Err(invalid(
            "--kubelet-client-key-file",
            "",
            "--kubelet-client-cert-file needs --kubelet-client-key-file (both or neither)",
        )),
        (None, Some(_)) => Err(invalid(
            "--kubelet-client-cert-file",
            "",
            "--kubelet-client-key-file needs --kubelet-client-cert-file (both or neither)",
        )),
    }
}
