//! The probes' options (`--probe-*`, `--disable-probes`, the node role's kubelet and addon
//! endpoints, and the config file's per-probe `probes:`), resolved into [`ProbeConfig`].

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use crate::shared::error::Result;
use crate::shared::options::{csv, duration, hint, invalid};

/// When the probes run and what the configurable ones check.
#[derive(Debug, Clone, Default, PartialEq, clap::Args, serde::Deserialize)]
#[serde(default)]
pub struct ProbeOptions {
    /// Probes to turn off, comma-separated: metrics_server, cluster_dns, apiserver_readyz,
    /// kubelet_healthz, addon_http, gce_metadata, http_get, dns_lookup.
    #[arg(long, env = "KUBE_PROBER_DISABLE_PROBES", value_name = "NAME,...")]
    pub disable_probes: Option<String>,

    /// How often each probe runs (per probe: `probes:` in the config file). [default: 30s]
    #[arg(long, env = "KUBE_PROBER_PROBE_INTERVAL", value_name = "DURATION")]
    pub probe_interval: Option<String>,

    /// Deadline of one probe run. [default: 5s]
    #[arg(long, env = "KUBE_PROBER_PROBE_TIMEOUT", value_name = "DURATION")]
    pub probe_timeout: Option<String>,

    /// URLs to GET as connectivity probes (`http_get`), comma-separated.
    #[arg(long, env = "KUBE_PROBER_PROBE_URLS", value_name = "URL,...")]
    pub probe_urls: Option<String>,

    /// Names to resolve as DNS probes, comma-separated. In the cluster role the first is the
    /// `cluster_dns` probe. [default: kubernetes.default.svc.cluster.local in the cluster role]
    #[arg(long, env = "KUBE_PROBER_PROBE_DNS_NAMES", value_name = "NAME,...")]
    pub probe_dns_names: Option<String>,

    /// Node role: the kubelet's health endpoint (it listens on 127.0.0.1 by default, so the
    /// DaemonSet needs hostNetwork, or point this at the node IP). [default: http://127.0.0.1:10248/healthz]
    #[arg(long, env = "KUBE_PROBER_KUBELET_HEALTHZ_URL", value_name = "URL")]
    pub kubelet_healthz_url: Option<String>,

    /// Node role: addon HTTP endpoints as NAME=URL pairs, comma-separated; `$NODE_IP` is
    /// replaced by the NODE_IP environment variable. [default: fluentbit=http://$NODE_IP:2020/api/v1/uptime]
    #[arg(long, env = "KUBE_PROBER_ADDON_ENDPOINTS", value_name = "NAME=URL,...")]
    pub addon_endpoints: Option<String>,

    /// Config file only: per-probe settings by probe name.
    #[arg(skip)]
    pub probes: Option<BTreeMap<String, ProbeFileSettings>>,
}

crate::merge_options!(ProbeOptions {
    disable_probes,
    probe_interval,
    probe_timeout,
    probe_urls,
    probe_dns_names,
    kubelet_healthz_url,
    addon_endpoints,
    probes,
});

/// One entry of `probes` in the config file.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ProbeFileSettings {
    pub enabled: Option<bool>,
    pub interval: Option<String>,
    pub timeout: Option<String>,
}

/// Every probe name, for validation.
pub const PROBE_NAMES: [&str; 8] = [
    "metrics_server",
    "cluster_dns",
    "apiserver_readyz",
    "kubelet_healthz",
    "addon_http",
    "gce_metadata",
    "http_get",
    "dns_lookup",
];

/// When each probe runs, and what the configurable ones check.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeConfig {
    /// Probe name -> (interval, timeout); a disabled probe is absent.
    pub schedules: BTreeMap<String, (Duration, Duration)>,
    pub urls: Vec<String>,
    /// `None`: the role's default.
    pub dns_names: Option<Vec<String>>,
    pub kubelet_healthz_url: String,
    pub addon_endpoints: Vec<(String, String)>,
}

fn url_ok(u: &str) -> bool {
    u.starts_with("http://") || u.starts_with("https://")
}

impl ProbeOptions {
    pub fn resolve(mut self) -> Result<ProbeConfig> {
        let schedules = self.schedules()?;
        let urls = csv(&self.probe_urls.unwrap_or_default());
        if let Some(bad) = urls.iter().find(|u| !url_ok(u)) {
            return Err(invalid(
                "--probe-urls",
                bad,
                "must be an http:// or https:// URL",
            ));
        }
        let dns_names = self.probe_dns_names.map(|s| csv(&s));
        let kubelet_healthz_url = self
            .kubelet_healthz_url
            .unwrap_or_else(|| "http://127.0.0.1:10248/healthz".into());
        if !url_ok(&kubelet_healthz_url) {
            return Err(invalid(
                "--kubelet-healthz-url",
                &kubelet_healthz_url,
                "must be an http:// or https:// URL",
            ));
        }
        let ep_s = self
            .addon_endpoints
            .unwrap_or_else(|| "fluentbit=http://$NODE_IP:2020/api/v1/uptime".into());
        let mut addon_endpoints = Vec::new();
        for pair in csv(&ep_s) {
            let (name, url) = pair
                .split_once('=')
                .filter(|(n, u)| !n.is_empty() && url_ok(u))
                .ok_or_else(|| {
                    invalid("--addon-endpoints", &pair, "expected NAME=http(s)://URL")
                })?;
            addon_endpoints.push((name.to_string(), url.to_string()));
        }
        Ok(ProbeConfig {
            schedules,
            urls,
            dns_names,
            kubelet_healthz_url,
            addon_endpoints,
        })
    }

    /// `--probe-interval`, `--probe-timeout`, `--disable-probes` and the file's `probes`: when
    /// each probe runs.
    fn schedules(&mut self) -> Result<BTreeMap<String, (Duration, Duration)>> {
        let secs = Duration::from_secs;
        let interval_s = self.probe_interval.take().unwrap_or_else(|| "30s".into());
        let interval = duration("--probe-interval", &interval_s, secs(1), secs(3600))?;
        let timeout_s = self.probe_timeout.take().unwrap_or_else(|| "5s".into());
        let timeout = duration(
            "--probe-timeout",
            &timeout_s,
            Duration::from_millis(10),
            secs(600),
        )?;
        let disabled = csv(&self.disable_probes.take().unwrap_or_default());
        if let Some(d) = disabled.iter().find(|d| !PROBE_NAMES.contains(&d.as_str())) {
            return Err(unknown_probe("--disable-probes", d));
        }
        let per = self.probes.take().unwrap_or_default();
        let mut schedules = BTreeMap::new();
        for name in PROBE_NAMES {
            let s = per.get(name).cloned().unwrap_or_default();
            if disabled.iter().any(|d| d == name) || s.enabled == Some(false) {
                continue;
            }
            let i = s
                .interval
                .as_deref()
                .map(|v| duration("probes[].interval", v, secs(1), secs(3600)))
                .transpose()?
                .unwrap_or(interval);
            let t = s
                .timeout
                .as_deref()
                .map(|v| duration("probes[].timeout", v, Duration::from_millis(10), secs(600)))
                .transpose()?
                .unwrap_or(timeout);
            schedules.insert(name.to_string(), (i, t));
        }
        if let Some(unknown) = per.keys().find(|k| !PROBE_NAMES.contains(&k.as_str())) {
            return Err(unknown_probe("probes", unknown));
        }
        Ok(schedules)
    }
}

fn unknown_probe(option: &'static str, name: &str) -> crate::shared::error::Error {
    invalid(
        option,
        name,
        format!(
            "unknown probe (known: {}){}",
            PROBE_NAMES.join(", "),
            hint(name, PROBE_NAMES)
        ),
    )
}
