//! The Cloud Monitoring output's options (`--gcm-*`), resolved into the [`GcmConfig`] the sink
//! starts from; the project and location the flags leave out come from the metadata server at
//! start (`start.rs`, given them by the wiring).

use super::{DEFAULT_PREFIX, GcmClientConfig, GcmConfig, validate_prefix};
use crate::shared::error::Result;
use crate::shared::options::{invalid, non_empty};

/// Cloud Monitoring (`--sink gcm`).
#[derive(Debug, Clone, Default, PartialEq, clap::Args, serde::Deserialize)]
#[serde(default)]
pub struct GcmOptions {
    /// Cloud Monitoring project. [default: the GCE metadata server's project]
    #[arg(long, env = "KUBE_PROBER_GCM_PROJECT", value_name = "PROJECT")]
    pub gcm_project: Option<String>,

    /// Cloud Monitoring `location` resource label. [default: the GCE metadata server's cluster location]
    #[arg(long, env = "KUBE_PROBER_GCM_LOCATION", value_name = "LOCATION")]
    pub gcm_location: Option<String>,

    /// Metric type prefix: types are workload.googleapis.com/PREFIX/... (gke-prober's
    /// METRIC_PREFIX). [default: kube-prober]
    #[arg(long, env = "METRIC_PREFIX", value_name = "PREFIX")]
    pub gcm_prefix: Option<String>,

    /// Cloud Monitoring API endpoint (tests, emulators). [default: https://monitoring.googleapis.com]
    #[arg(long, env = "KUBE_PROBER_GCM_ENDPOINT", value_name = "URL")]
    pub gcm_endpoint: Option<String>,

    /// Cluster role: also write node/* and addon/* for every node to Cloud Monitoring. Set false
    /// when a node-role DaemonSet writes them too (they would collide). [default: true]
    #[arg(long, env = "KUBE_PROBER_GCM_NODE_SERIES", value_name = "BOOL", num_args = 0..=1, default_missing_value = "true", value_parser = crate::shared::options::parse_bool)]
    pub gcm_node_series: Option<bool>,

    /// Send no credentials to Cloud Monitoring (only for a local emulator). [default: false]
    #[arg(long, env = "KUBE_PROBER_GCM_ANONYMOUS", value_name = "BOOL", num_args = 0..=1, default_missing_value = "true", value_parser = crate::shared::options::parse_bool, hide = true)]
    pub gcm_anonymous: Option<bool>,
}

crate::merge_options!(GcmOptions {
    gcm_project,
    gcm_location,
    gcm_prefix,
    gcm_endpoint,
    gcm_node_series,
    gcm_anonymous
});

impl GcmOptions {
    /// Checks the values and makes the sink's config; `project` and `location` stay `None`
    /// when not given.
    pub fn resolve(self) -> Result<GcmConfig> {
        let prefix = self.gcm_prefix.unwrap_or_else(|| DEFAULT_PREFIX.into());
        validate_prefix("--gcm-prefix", &prefix)?;
        let project = non_empty("--gcm-project", self.gcm_project)?;
        let location = non_empty("--gcm-location", self.gcm_location)?;
        if let Some(e) = &self.gcm_endpoint
            && !(e.starts_with("http://") || e.starts_with("https://"))
        {
            return Err(invalid(
                "--gcm-endpoint",
                e,
                "must be an http:// or https:// URL",
            ));
        }
        Ok(GcmConfig {
            client: GcmClientConfig {
                endpoint: self.gcm_endpoint,
                anonymous: self.gcm_anonymous.unwrap_or(false),
                ..GcmClientConfig::default()
            },
            project,
            location,
            prefix,
            node_series: self.gcm_node_series.unwrap_or(true),
            ..GcmConfig::default()
        })
    }
}
