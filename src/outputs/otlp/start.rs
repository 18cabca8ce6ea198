//! The OTLP output started from its resolved config, with this instance's resource attributes from what
//! only the wiring knows ([`PushStart`]).

use std::sync::Arc;

use super::{OtlpConfig, OtlpResource, OtlpSink};
use crate::outputs::PushStart;
use crate::shared::error::Result;

/// The OTLP sink, with this instance's resource attributes: the node's name in the node and
/// host roles, the machine's id (`host.id`) in the host role.
pub fn start(cfg: &OtlpConfig, ctx: &PushStart<'_>) -> Result<Arc<OtlpSink>> {
    let resource = OtlpResource {
        cluster_name: ctx.cluster_name.to_string(),
        role: ctx.role.to_string(),
        node_name: matches!(ctx.role, "node" | "host").then(|| ctx.node_name.to_string()),
        project: ctx.project.unwrap_or_default().to_string(),
        location: ctx.location.unwrap_or_default().to_string(),
        instance_id: ctx.instance_id.to_string(),
        host_id: if ctx.role == "host" {
            machine_id()
        } else {
            String::new()
        },
    };
    let sink = OtlpSink::new(cfg.clone(), &resource)?;
    tracing::info!(
        protocol = sink.config().protocol.as_str(),
        endpoint = %sink.config().endpoint,
        "OTLP sink configured"
    );
    Ok(Arc::new(sink))
}

/// This machine's id for OTLP's `host.id` (host role): `/etc/machine-id`, empty when unreadable.
fn machine_id() -> String {
    std::fs::read_to_string("/etc/machine-id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}
