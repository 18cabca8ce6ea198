//! The Cloud Monitoring output started from its resolved [`GcmConfig`]: the project and
//! location the flags leave out come from the metadata server, the cluster and (node role)
//! the node it writes from the wiring ([`PushStart`]).

use std::sync::Arc;

use super::{GcmConfig, GcmSink};
use crate::outputs::PushStart;
use crate::shared::error::{Error, Result};

/// The Cloud Monitoring sink; project and location come from the flags or the metadata server.
pub async fn start(cfg: &GcmConfig, ctx: &PushStart<'_>) -> Result<Arc<GcmSink>> {
    let g = cfg;
    // Given, or found by the metadata server; neither is a configuration error.
    let needed = |value: Option<String>, option: &'static str, reason: &str| match value {
        Some(v) => Ok(Some(v)),
        None => Err(Error::Config {
            option,
            value: String::new(),
            reason: reason.into(),
        }),
    };
    let project = needed(
        g.project
            .clone()
            .or_else(|| ctx.project.map(str::to_string)),
        "--gcm-project",
        "the Cloud Monitoring sink needs a project: set --gcm-project (not on GCE, or the metadata server did not answer)",
    )?;
    let location = needed(
        g.location
            .clone()
            .or_else(|| ctx.location.map(str::to_string)),
        "--gcm-location",
        "the Cloud Monitoring sink needs the cluster location (k8s_* resources): set --gcm-location",
    )?;
    let gc = GcmConfig {
        project,
        location,
        cluster: Some(ctx.cluster_name.to_string()),
        own_node: (ctx.role == "node").then(|| ctx.node_name.to_string()),
        ..g.clone()
    };
    Ok(Arc::new(GcmSink::new(gc).await?))
}
