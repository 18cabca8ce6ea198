//! The probes of a role, started with what only the wiring knows.

use super::*;

/// Whether this instance runs probes: all but a cluster-role shard above 0, whose probe series
/// are never emitted (they come from shard 0 only, `outputs::select`). A StatefulSet pod's ordinal
/// never changes, so this holds for the life of the process even when replicas change.
pub(super) fn runs_probes(shard: &crate::sources::cluster::options::ShardMode) -> bool {
    shard.index().is_none_or(|i| i == 0)
}

/// The probes of a role ([`probe::start::spawn`]).
pub(super) fn spawn_probes(
    cfg: &Config,
    role: Role,
    on_gce: bool,
    client: Option<&kube::Client>,
    provider: Arc<dyn Provider>,
    cancel: &CancellationToken,
) -> Result<Vec<JoinHandle<()>>> {
    let ctx = probe::start::StartContext {
        role,
        runs: runs_probes(&cfg.scope.shard),
        on_gce,
        metadata_host: IdentityConfig::from_env().metadata_host,
        client,
        max_response_bytes: cfg.limit.max_response_bytes,
    };
    probe::start::spawn(&cfg.probes, &ctx, &provider, cancel)
}
