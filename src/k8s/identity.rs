//! Who we are: on GCE, project, location, cluster name and node name from the metadata
//! server. Nothing is sent unless the machine says it is a Google Compute Engine VM (DMI
//! product name) or `GCE_METADATA_HOST` names a metadata server, and the whole lookup is
//! bounded by one second.

use std::path::PathBuf;
use std::time::Duration;

/// Where to look.
#[derive(Debug, Clone, PartialEq)]
pub struct IdentityConfig {
    /// `host[:port]` of the metadata server.
    pub metadata_host: String,
    /// Set when `GCE_METADATA_HOST` named the host: then it is asked even without DMI.
    pub metadata_host_explicit: bool,
    /// DMI product name file (`Google Compute Engine` on GCE).
    pub dmi_product_name: PathBuf,
    pub timeout: Duration,
}

impl IdentityConfig {
    /// From the environment (`GCE_METADATA_HOST`) and the real DMI path.
    pub fn from_env() -> Self {
        let explicit = std::env::var("GCE_METADATA_HOST")
            .ok()
            .filter(|h| !h.is_empty());
        IdentityConfig {
            metadata_host_explicit: explicit.is_some(),
            metadata_host: explicit.unwrap_or_else(|| "169.254.169.254".into()),
            dmi_product_name: PathBuf::from("/sys/class/dmi/id/product_name"),
            timeout: Duration::from_secs(1),
        }
    }
}

/// What the metadata server said; all `None` off GCE.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Identity {
    pub on_gce: bool,
    pub project: Option<String>,
    /// `cluster-location` (a region or zone), else the instance zone.
    pub location: Option<String>,
    pub cluster_name: Option<String>,
    /// `instance/hostname` cut at the first dot.
    pub node_name: Option<String>,
}

fn on_gce(cfg: &IdentityConfig) -> bool {
    cfg.metadata_host_explicit
        || std::fs::read_to_string(&cfg.dmi_product_name)
            .is_ok_and(|p| p.trim().starts_with("Google"))
}

async fn get(client: &reqwest::Client, host: &str, path: &str) -> Option<String> {
    let url = format!("http://{host}/computeMetadata/v1/{path}");
    let resp = client
        .get(&url)
        .header("Metadata-Flavor", "Google")
        .send()
        .await
        .ok()?;
    let flavor_ok = resp
        .headers()
        .get("metadata-flavor")
        .is_some_and(|v| v == "Google");
    if !resp.status().is_success() || !flavor_ok {
        return None;
    }
    // Metadata values are a few bytes; anything past the cap is not an identity.
    let body = crate::shared::limit::read_capped(resp, METADATA_MAX_BYTES)
        .await
        .ok()?;
    let text = std::str::from_utf8(&body).ok()?.trim();
    (!text.is_empty()).then(|| text.to_string())
}

/// Largest metadata-server answer read (project id, zone, cluster name: a few bytes each).
const METADATA_MAX_BYTES: usize = 64 << 10;

/// Looks the identity up (at most `cfg.timeout`); off GCE it sends nothing.
pub async fn detect(cfg: &IdentityConfig) -> Identity {
    if !on_gce(cfg) {
        return Identity::default();
    }
    let Ok(client) = reqwest::Client::builder()
        .timeout(cfg.timeout)
        .connect_timeout(cfg.timeout)
        .no_proxy()
        .build()
    else {
        return Identity::default();
    };
    let h = cfg.metadata_host.as_str();
    let lookup = async {
        let (project, cluster_location, cluster_name, hostname, zone) = tokio::join!(
            get(&client, h, "project/project-id"),
            get(&client, h, "instance/attributes/cluster-location"),
            get(&client, h, "instance/attributes/cluster-name"),
            get(&client, h, "instance/hostname"),
            get(&client, h, "instance/zone"),
        );
        Identity {
            on_gce: true,
            project,
            location: cluster_location
                .or_else(|| zone.map(|z| z.rsplit('/').next().unwrap_or(&z).to_string())),
            cluster_name,
            node_name: hostname.map(|n| n.split('.').next().unwrap_or(&n).to_string()),
        }
    };
    match tokio::time::timeout(cfg.timeout, lookup).await {
        Ok(id) => {
            tracing::info!(project = ?id.project, location = ?id.location, cluster = ?id.cluster_name, "GCE identity from the metadata server");
            id
        }
        Err(_) => {
            tracing::warn!(
                host = h,
                "metadata server did not answer within {:?}; no GCE identity",
                cfg.timeout
            );
            Identity {
                on_gce: true,
                ..Identity::default()
            }
        }
    }
}
