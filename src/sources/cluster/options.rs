//! The cluster source's options: which namespaces hold addons and how they are marked
//! ([`WorkloadOptions`]), which pods are watched and which shard this instance is
//! ([`ScopeOptions`]).

use super::derive::{AddonKeys, DeriveConfig};
use super::watchers::PodScope;
use crate::model::Shard;
use crate::shared::error::Result;
use crate::shared::options::{csv, invalid, is_namespace_name};

/// The addon candidates: namespaces and markers.
#[derive(Debug, Clone, Default, PartialEq, clap::Args, serde::Deserialize)]
#[serde(default)]
pub struct WorkloadOptions {
    /// Namespaces whose DaemonSets and Deployments are watched for addons (comma-separated).
    /// [default: kube-system]
    #[arg(long, env = "KUBE_PROBER_WORKLOAD_NAMESPACES", value_name = "NS,...")]
    pub workload_namespaces: Option<String>,

    /// More addon markers besides GKE's components.gke.io/component-name/-version, as
    /// NAME_KEY=VERSION_KEY pairs, comma-separated (annotations, then labels), e.g.
    /// app.kubernetes.io/name=app.kubernetes.io/version.
    #[arg(
        long,
        env = "KUBE_PROBER_ADDON_KEYS",
        value_name = "NAME_KEY=VERSION_KEY,..."
    )]
    pub addon_keys: Option<String>,
}

crate::merge_options!(WorkloadOptions {
    workload_namespaces,
    addon_keys
});

/// Which pods the cluster role watches, and its shard.
#[derive(Debug, Clone, Default, PartialEq, clap::Args, serde::Deserialize)]
#[serde(default)]
pub struct ScopeOptions {
    /// Cluster role: which pods to watch. `all` (every pod: per-node requests, limits and pod
    /// counts), `workloads` (only pods in --workload-namespaces; run the node DaemonSet for the
    /// per-node pod series), `none` (no pods; addon and per-node pod series come from the node
    /// DaemonSet). [default: all]
    #[arg(long, env = "KUBE_PROBER_POD_SCOPE", value_name = "all|workloads|none")]
    pub pod_scope: Option<String>,

    /// This instance's shard of the cluster role (0-based; with --total-shards): it emits the
    /// per-node series of the nodes whose name hashes to it, and shard 0 the cluster-level ones.
    /// [default: unsharded]
    #[arg(long, env = "KUBE_PROBER_SHARD", value_name = "N")]
    #[serde(deserialize_with = "crate::shared::options::u32_as_text")]
    pub shard: Option<String>,

    /// How many shards the cluster role is split into (with --shard). [default: 1]
    #[arg(long, env = "KUBE_PROBER_TOTAL_SHARDS", value_name = "N")]
    #[serde(deserialize_with = "crate::shared::options::u32_as_text")]
    pub total_shards: Option<String>,

    /// Shard from the StatefulSet this pod belongs to: the ordinal of --pod-name is the shard,
    /// the StatefulSet's spec.replicas the total, followed live (a change re-shards in place).
    #[arg(long, env = "KUBE_PROBER_SHARD_FROM_STATEFULSET", value_name = "BOOL", num_args = 0..=1, default_missing_value = "true", value_parser = crate::shared::options::parse_bool)]
    pub shard_from_statefulset: Option<bool>,

    /// This pod's name (downward API `metadata.name`), `<statefulset>-<ordinal>`; read by
    /// --shard-from-statefulset.
    #[arg(long, env = "POD_NAME", value_name = "NAME")]
    pub pod_name: Option<String>,
}

crate::merge_options!(ScopeOptions {
    pod_scope,
    shard,
    total_shards,
    shard_from_statefulset,
    pod_name
});

impl WorkloadOptions {
    /// The namespaces whose DaemonSets and Deployments are addon candidates, and the addon
    /// markers (GKE's first).
    pub fn resolve(self) -> Result<(Vec<String>, Vec<AddonKeys>)> {
        let ns_s = self
            .workload_namespaces
            .unwrap_or_else(|| "kube-system".into());
        let namespaces = csv(&ns_s);
        if namespaces.is_empty() || !namespaces.iter().all(|n| is_namespace_name(n)) {
            return Err(invalid(
                "--workload-namespaces",
                &ns_s,
                "expected comma-separated namespace names",
            ));
        }
        let mut addon_keys = DeriveConfig::default().addon_keys;
        if let Some(k) = self.addon_keys {
            for pair in k.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                let (name, version) = pair
                    .split_once('=')
                    .filter(|(n, v)| !n.is_empty() && !v.is_empty())
                    .ok_or_else(|| {
                        invalid("--addon-keys", &k, "expected NAME_KEY=VERSION_KEY pairs")
                    })?;
                addon_keys.push(AddonKeys {
                    name: name.trim().into(),
                    version: version.trim().into(),
                });
            }
        }
        Ok((namespaces, addon_keys))
    }
}

/// How the cluster role is sharded (see `crate::outputs::select`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ShardMode {
    /// One instance emits everything.
    #[default]
    Off,
    /// `--shard`/`--total-shards`.
    Static(Shard),
    /// `--shard-from-statefulset`: `ordinal` from the pod name, the total from the
    /// StatefulSet `statefulset`'s spec.replicas, followed live.
    StatefulSet { statefulset: String, ordinal: u32 },
}

impl ScopeOptions {
    /// The pods to watch and the shard.
    pub fn resolve(self) -> Result<(PodScope, ShardMode)> {
        let pod_scope = match self.pod_scope.as_deref() {
            None => PodScope::All,
            Some(v) => PodScope::parse(v)
                .ok_or_else(|| invalid("--pod-scope", v, "expected all, workloads or none"))?,
        };
        let number = |option: &'static str, v: Option<String>| {
            v.map(|s| {
                s.trim()
                    .parse::<u32>()
                    .map_err(|_| invalid(option, &s, "must be a whole number"))
            })
            .transpose()
        };
        let shard = number("--shard", self.shard)?;
        let total = number("--total-shards", self.total_shards)?;
        let from_sts = self.shard_from_statefulset.unwrap_or(false);
        let mode = shard_mode(shard, total, from_sts, self.pod_name)?;
        Ok((pod_scope, mode))
    }
}

/// How the cluster role is sharded, from `--shard`, `--total-shards`,
/// `--shard-from-statefulset` and `--pod-name`.
fn shard_mode(
    shard: Option<u32>,
    total: Option<u32>,
    from_sts: bool,
    pod_name: Option<String>,
) -> Result<ShardMode> {
    match (shard, total, from_sts) {
        (Some(_), _, true) | (_, Some(_), true) => Err(invalid(
            "--shard-from-statefulset",
            "true",
            "exclusive with --shard and --total-shards",
        )),
        (None, None, false) => Ok(ShardMode::Off),
        (Some(s), None, false) => Err(invalid("--shard", &s.to_string(), "needs --total-shards")),
        (index, Some(total), false) => static_shard(index.unwrap_or(0), total),
        (None, None, true) => statefulset_shard(pod_name.unwrap_or_default()),
    }
}

/// `--shard N --total-shards M`: one shard is no sharding.
fn static_shard(index: u32, total: u32) -> Result<ShardMode> {
    if total == 0 {
        return Err(invalid("--total-shards", "0", "must be at least 1"));
    }
    if index >= total {
        return Err(invalid(
            "--shard",
            &index.to_string(),
            format!("must be below --total-shards ({total}); shards count from 0"),
        ));
    }
    Ok(if total == 1 {
        ShardMode::Off
    } else {
        ShardMode::Static(Shard { index, total })
    })
}

/// `--shard-from-statefulset`: the StatefulSet and ordinal from `<statefulset>-<ordinal>`.
fn statefulset_shard(name: String) -> Result<ShardMode> {
    let parsed = name
        .rsplit_once('-')
        .filter(|(sts, _)| !sts.is_empty())
        .and_then(|(sts, n)| {
            let all_digits = !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit());
            all_digits
                .then(|| n.parse::<u32>().ok())
                .flatten()
                .map(|n| (sts.to_string(), n))
        });
    let Some((statefulset, ordinal)) = parsed else {
        return Err(invalid(
            "--pod-name",
            &name,
            "--shard-from-statefulset needs the pod name `<statefulset>-<ordinal>` (set POD_NAME from the downward API metadata.name)",
        ));
    };
    Ok(ShardMode::StatefulSet {
        statefulset,
        ordinal,
    })
}
