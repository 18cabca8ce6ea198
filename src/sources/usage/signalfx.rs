//! The SignalFx backend, as load-watcher queries it: for CPU and memory utilisation, the
//! time-series metadata (`/v2/metrictimeseries`) maps series ids to hosts, and the data
//! (`/v1/timeserieswindow`) over each window is averaged per series.
//!
//! Differences from load-watcher: one failed metric does not drop the other; an empty
//! `--signalfx-cluster-name` leaves the cluster filter out instead of matching `cluster:`;
//! several series of one host are averaged instead of the last one winning; null points are
//! skipped; values are stored as ratios (SignalFx reports percent).

use std::collections::BTreeMap;
use std::time::SystemTime;

use serde::Deserialize;

use super::http::{self, HttpBackend, HttpConfig};
use super::{Fetched, UsageFetcher};
use crate::model::{
    BackendValue, BackendWindow, MetricType, Operator, Resource, Window, unix_seconds,
};
use crate::shared::error::{Cause, Error, Result};

/// Settings of the SignalFx backend.
#[derive(Debug, Clone, PartialEq)]
pub struct SignalFxConfig {
    pub http: HttpConfig,
    /// Only hosts whose name ends with this (`SIGNALFX_HOST_NAME_SUFFIX`).
    pub host_name_suffix: String,
    /// Only hosts of this cluster (`SIGNALFX_CLUSTER_NAME`); empty: no cluster filter.
    pub cluster_name: String,
}

/// The two series load-watcher reads, with their types.
pub const METRICS: [(&str, MetricType, Resource); 2] = [
    (
        "sf_metric:\"cpu.utilization\"",
        MetricType::Cpu,
        Resource::Cpu,
    ),
    (
        "sf_metric:\"memory.utilization\"",
        MetricType::Memory,
        Resource::Memory,
    ),
];

pub struct SignalFxFetcher {
    cfg: SignalFxConfig,
    http: HttpBackend,
}

#[derive(Deserialize)]
struct Metadata {
    #[serde(default)]
    results: Vec<SeriesMeta>,
}

#[derive(Deserialize)]
struct SeriesMeta {
    id: String,
    #[serde(default)]
    dimensions: BTreeMap<String, serde_json::Value>,
}

#[derive(Deserialize)]
struct WindowData {
    #[serde(default)]
    data: BTreeMap<String, Vec<(f64, Option<f64>)>>,
}

/// The SignalFx search for one metric.
pub fn search(cfg: &SignalFxConfig, metric: &str) -> String {
    let mut q = format!("host:*{}", cfg.host_name_suffix);
    if !cfg.cluster_name.is_empty() {
        q.push_str(&format!(" AND cluster:{}", cfg.cluster_name));
    }
    q.push_str(" AND ");
    q.push_str(metric);
    q
}

/// `test1.dev.com` -> `test1`.
pub fn short_host(host: &str) -> &str {
    host.split('.').next().unwrap_or(host)
}

/// A SignalFx answer that did not decode.
#[derive(Debug, thiserror::Error)]
pub enum BadAnswer {
    #[error("malformed metadata JSON: {0}")]
    Metadata(#[source] serde_json::Error),
    #[error("malformed timeserieswindow JSON: {0}")]
    Window(#[source] serde_json::Error),
}

/// Series id -> host (cut at the first dot) from a `/v2/metrictimeseries` body.
pub fn parse_metadata(body: &[u8]) -> std::result::Result<BTreeMap<String, String>, BadAnswer> {
    let m: Metadata = serde_json::from_slice(body).map_err(BadAnswer::Metadata)?;
    Ok(m.results
        .into_iter()
        .filter_map(|r| {
            let host = r.dimensions.get("host")?.as_str()?.to_string();
            Some((r.id, short_host(&host).to_string()))
        })
        .collect())
}

/// Host -> mean of its points (averaged over its series) from a `/v1/timeserieswindow` body.
pub fn parse_window(
    body: &[u8],
    hosts: &BTreeMap<String, String>,
) -> std::result::Result<BTreeMap<String, f64>, BadAnswer> {
    let w: WindowData = serde_json::from_slice(body).map_err(BadAnswer::Window)?;
    let mut per_host: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for (id, points) in w.data {
        let Some(host) = hosts.get(&id) else { continue };
        let values: Vec<f64> = points.iter().filter_map(|&(_, v)| v).collect();
        if values.is_empty() {
            continue;
        }
        per_host
            .entry(host.clone())
            .or_default()
            .push(mean(&values));
    }
    Ok(per_host
        .into_iter()
        .map(|(h, means)| (h, mean(&means)))
        .collect())
}

/// The mean of finite values without overflow: the sum is taken of the values scaled by the
/// largest magnitude (each in [-1, 1], so the scaled mean is too), then scaled back; points near
/// `f64::MAX` average to themselves instead of infinity.
fn mean(values: &[f64]) -> f64 {
    let n = values.len() as f64;
    let scale = values.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    if scale == 0.0 || !scale.is_finite() {
        return values.iter().sum::<f64>() / n;
    }
    scale * (values.iter().map(|v| v / scale).sum::<f64>() / n)
}

impl SignalFxFetcher {
    pub fn new(cfg: SignalFxConfig) -> Result<Self> {
        if cfg.http.token.is_none() {
            return Err(Error::Config {
                option: "--metrics-provider-token",
                value: String::new(),
                reason: "SignalFx needs an access token (METRICS_PROVIDER_TOKEN)".into(),
            });
        }
        let http = HttpBackend::new(cfg.http.clone())?;
        Ok(SignalFxFetcher { cfg, http })
    }

    async fn get(&self, what: &str, path: &str, params: &[(&str, String)]) -> Result<Vec<u8>> {
        let url = self.http.url(path);
        let a = self
            .http
            .send(what, "x-sf-token", http::plain, |c| {
                c.get(&url)
                    .header("content-type", "application/json")
                    .query(params)
            })
            .await?;
        if !a.status.is_success() {
            let body = String::from_utf8_lossy(&a.body);
            return Err(Error::http(
                what,
                Cause::Status {
                    code: a.status.as_u16(),
                    body: body.chars().take(200).collect(),
                },
            ));
        }
        Ok(a.body.to_vec())
    }

    /// Host -> mean over `window` ending at `end` for one metric.
    async fn one(
        &self,
        metric: &str,
        window: Window,
        end: SystemTime,
    ) -> Result<BTreeMap<String, f64>> {
        let q = search(&self.cfg, metric);
        let end_ms = (unix_seconds(end) * 1000.0) as i64;
        let start_ms = end_ms - window.duration().as_millis() as i64;
        let meta = self
            .get(
                &format!("SignalFx metadata for {metric}"),
                "/v2/metrictimeseries",
                &[("query", q.clone()), ("limit", "10000".into())],
            )
            .await?;
        let hosts = parse_metadata(&meta).map_err(|e| {
            Error::parse(format!("SignalFx metadata for {metric}"), Cause::other(e))
        })?;
        let data = self
            .get(
                &format!("SignalFx data for {metric} over {}", window.as_str()),
                "/v1/timeserieswindow",
                &[
                    ("query", q),
                    ("startMs", start_ms.to_string()),
                    ("endMs", end_ms.to_string()),
                    ("resolution", "60000".into()),
                ],
            )
            .await?;
        parse_window(&data, &hosts)
            .map_err(|e| Error::parse(format!("SignalFx data for {metric}"), Cause::other(e)))
    }
}

impl UsageFetcher for SignalFxFetcher {
    fn name(&self) -> &'static str {
        "signalfx"
    }

    async fn fetch(&mut self) -> Fetched {
        let now = SystemTime::now();
        let mut fetched = Fetched::default();
        let mut per: BTreeMap<(String, Window), Vec<BackendValue>> = BTreeMap::new();
        for window in Window::ALL {
            for (metric, kind, resource) in METRICS {
                match self.one(metric, window, now).await {
                    Ok(hosts) => {
                        for (host, percent) in hosts {
                            per.entry((host, window)).or_default().push(BackendValue {
                                name: metric.into(),
                                kind,
                                resource: Some(resource),
                                operator: Operator::Avg,
                                value: percent / 100.0,
                            });
                        }
                    }
                    Err(e) => fetched.errors.push(e),
                }
            }
        }
        for ((node, window), values) in per {
            fetched.windows.push(BackendWindow {
                node,
                window,
                start: now.checked_sub(window.duration()).unwrap_or(now),
                end: now,
                values,
            });
        }
        fetched
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn search_strings() {
        let mut cfg = SignalFxConfig {
            http: HttpConfig::new("http://x"),
            host_name_suffix: ".dev.com".into(),
            cluster_name: "c1".into(),
        };
        assert_eq!(
            search(&cfg, METRICS[0].0),
            "host:*.dev.com AND cluster:c1 AND sf_metric:\"cpu.utilization\""
        );
        cfg.cluster_name.clear();
        assert_eq!(
            search(&cfg, METRICS[1].0),
            "host:*.dev.com AND sf_metric:\"memory.utilization\""
        );
    }

    #[test]
    fn hosts_are_cut_and_points_averaged() {
        let meta = br#"{"count":3,"results":[
            {"id":"Ehql_bxBgAc","dimensions":{"host":"test1.dev.com"}},
            {"id":"EuXgJm7BkAA","dimensions":{"host":"test2.dev.com"}},
            {"id":"nohost","dimensions":{}}]}"#;
        let hosts = parse_metadata(meta).unwrap();
        assert_eq!(hosts.len(), 2);
        assert_eq!(hosts["Ehql_bxBgAc"], "test1");
        let data = br#"{"data":{"Ehql_bxBgAc":[[1,80.0],[2,90.0],[3,null]],"EuXgJm7BkAA":[[1,5.0]],"unknown":[[1,1.0]]},"errors":[]}"#;
        let v = parse_window(data, &hosts).unwrap();
        assert_eq!(v["test1"], 85.0);
        assert_eq!(v["test2"], 5.0);
        assert_eq!(v.len(), 2);
        assert!(
            parse_window(b"{", &hosts)
                .unwrap_err()
                .to_string()
                .contains("malformed")
        );
    }

    #[test]
    fn a_token_is_required() {
        let cfg = SignalFxConfig {
            http: HttpConfig::new("http://x"),
            host_name_suffix: String::new(),
            cluster_name: String::new(),
        };
        let e = SignalFxFetcher::new(cfg).err().unwrap().to_string();
        assert!(e.contains("--metrics-provider-token"), "{e}");
    }
}
