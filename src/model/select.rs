//! Which series this instance emits: its shard of the cluster role, and the families the
//! metric allow/denylist leaves out. Plain data; the predicates that read it live in
//! `crate::outputs::select`.

use std::collections::BTreeSet;

/// This instance's shard: `index` of `total`. `total == 0` means "not known yet" (the
/// StatefulSet has not been read): such an instance emits only its own self-metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    pub index: u32,
    pub total: u32,
}

/// What the outputs may emit, carried by every snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Selection {
    /// `None`: unsharded, this instance emits every series.
    pub shard: Option<Shard>,
    /// Family names (without `_total`) that the allowlist or the denylist leaves out.
    pub excluded_families: BTreeSet<String>,
    /// `--watcher-max-age`: a node whose newest sample is older is stale (`None`: never).
    pub stale_after: Option<std::time::Duration>,
}
