//! The cluster source's options: which namespaces hold addons and how they are marked
//! ([`WorkloadOptions`]), which pods are watched and which shard this instance is
//! ([`ScopeOptions`]), how the load of just-bound pods is estimated ([`EstimateOptions`]).

use std::time::Duration;

use serde::{Deserialize, Deserializer};

use super::derive::{AddonKeys, DeriveConfig};
use super::estimate::EstimateConfig;
use super::watchers::{InitialList, PodScope};
use crate::model::Shard;
use crate::shared::error::Result;
use crate::shared::options::{csv, duration, invalid, is_namespace_name};
use crate::shared::quantity::parse_quantity;

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

    /// Cluster role: watch the DaemonSets and Deployments of --workload-namespaces (the addon
    /// series of workloads: desired and ready counts, versions). Off leaves them out, as the
    /// lean load-watcher drop-in does. [default: true]
    #[arg(long, env = "KUBE_PROBER_WATCH_WORKLOADS", value_name = "BOOL", num_args = 0..=1, default_missing_value = "true", value_parser = crate::shared::options::parse_bool)]
    pub watch_workloads: Option<bool>,
}

crate::merge_options!(WorkloadOptions {
    workload_namespaces,
    addon_keys,
    watch_workloads
});

/// Which pods the cluster role watches, and its shard.
#[derive(Debug, Clone, Default, PartialEq, clap::Args, serde::Deserialize)]
#[serde(default)]
pub struct ScopeOptions {
    /// Cluster role: which pods to watch. `all` (every pod: per-node requests, limits and pod
    /// counts), `workloads` (only pods in --workload-namespaces; run the node DaemonSet for the
    /// per-node pod series), `bound` (only pods bound to a node and not finished, held only
    /// while they count for the estimate of just-bound pods: no per-node pod series), `none`
    /// (no pods; addon and per-node pod series come from the node DaemonSet). [default: all]
    #[arg(
        long,
        env = "KUBE_PROBER_POD_SCOPE",
        value_name = "all|workloads|bound|none"
    )]
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

    /// How every watch gets its objects at start and after a relist: `paged` (a LIST in pages
    /// of 500, then a WATCH; every Kubernetes version) or `streaming` (one WATCH that streams the
    /// current objects first, `sendInitialEvents`: the API server's WatchList feature, on by
    /// default in 1.32 and from 1.34, off in 1.33). [default: paged]
    #[arg(
        long,
        env = "KUBE_PROBER_WATCH_INITIAL_LIST",
        value_name = "paged|streaming"
    )]
    pub watch_initial_list: Option<String>,
}

crate::merge_options!(ScopeOptions {
    pod_scope,
    shard,
    total_shards,
    shard_from_statefulset,
    pod_name,
    watch_initial_list
});

/// Where addons are looked for, as resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkloadConfig {
    /// Namespaces whose DaemonSets and Deployments are addon candidates.
    pub namespaces: Vec<String>,
    /// Addon markers, GKE's first.
    pub addon_keys: Vec<AddonKeys>,
    /// Whether the DaemonSets and Deployments of `namespaces` are watched (`--watch-workloads`).
    pub watch: bool,
}

impl WorkloadOptions {
    /// The namespaces whose DaemonSets and Deployments are addon candidates, and the addon
    /// markers (GKE's first).
    pub fn resolve(self) -> Result<WorkloadConfig> {
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
        Ok(WorkloadConfig {
            namespaces,
            addon_keys,
            watch: self.watch_workloads.unwrap_or(true),
        })
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

impl ShardMode {
    /// This instance's shard index (the StatefulSet ordinal), `None` unsharded. It never
    /// changes while the process runs.
    pub fn index(&self) -> Option<u32> {
        match self {
            ShardMode::Off => None,
            ShardMode::Static(s) => Some(s.index),
            ShardMode::StatefulSet { ordinal, .. } => Some(*ordinal),
        }
    }
}

/// What the cluster role watches and emits, as resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct ScopeConfig {
    /// Which pods the pod watcher follows.
    pub pods: PodScope,
    pub shard: ShardMode,
    /// How every watch lists.
    pub initial_list: InitialList,
}

impl ScopeOptions {
    /// The pods to watch and the shard.
    pub fn resolve(self) -> Result<ScopeConfig> {
        let pod_scope = match self.pod_scope.as_deref() {
            None => PodScope::All,
            Some(v) => PodScope::parse(v).ok_or_else(|| {
                invalid("--pod-scope", v, "expected all, workloads, bound or none")
            })?,
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
        let initial_list = match self.watch_initial_list.as_deref() {
            None => InitialList::Paged,
            Some(v) => InitialList::parse(v)
                .ok_or_else(|| invalid("--watch-initial-list", v, "expected paged or streaming"))?,
        };
        Ok(ScopeConfig {
            pods: pod_scope,
            shard: mode,
            initial_list,
        })
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

/// How the load of pods bound since the node's last usage sample is estimated (Koordinator's
/// default estimator): per resource, max(request, limit) × the factor, at most the limit; a pod
/// with neither counts the default.
#[derive(Debug, Clone, Default, PartialEq, clap::Args, serde::Deserialize)]
#[serde(default)]
pub struct EstimateOptions {
    /// The estimated load of a just-bound pod (Koordinator's estimator): this share of
    /// max(CPU request, CPU limit), at most the limit; above 0 and at most 1. [default: 0.85]
    #[arg(long, env = "KUBE_PROBER_ESTIMATE_CPU_FACTOR", value_name = "FACTOR")]
    #[serde(deserialize_with = "number_as_text")]
    pub estimate_cpu_factor: Option<String>,

    /// The same for memory: this share of max(memory request, memory limit). [default: 0.70]
    #[arg(
        long,
        env = "KUBE_PROBER_ESTIMATE_MEMORY_FACTOR",
        value_name = "FACTOR"
    )]
    #[serde(deserialize_with = "number_as_text")]
    pub estimate_memory_factor: Option<String>,

    /// CPU counted for a just-bound pod with neither CPU request nor limit (cores or a
    /// quantity such as 250m). [default: 250m]
    #[arg(
        long,
        env = "KUBE_PROBER_ESTIMATE_DEFAULT_CPU",
        value_name = "QUANTITY"
    )]
    #[serde(deserialize_with = "number_as_text")]
    pub estimate_default_cpu: Option<String>,

    /// Memory counted for a just-bound pod with neither memory request nor limit (bytes or a
    /// quantity such as 200Mi). [default: 200Mi]
    #[arg(
        long,
        env = "KUBE_PROBER_ESTIMATE_DEFAULT_MEMORY",
        value_name = "QUANTITY"
    )]
    #[serde(deserialize_with = "number_as_text")]
    pub estimate_default_memory: Option<String>,

    /// After a just-bound pod turns Ready, how long until its use shows in its node's usage
    /// samples (one metrics-server resolution). [default: 60s]
    #[arg(long, env = "KUBE_PROBER_ESTIMATE_RAMP_UP", value_name = "DURATION")]
    pub estimate_ramp_up: Option<String>,

    /// How long after binding a pod that never turns Ready is counted with its estimate;
    /// after that its node's samples are taken to show what it uses. [default: 5m]
    #[arg(
        long,
        env = "KUBE_PROBER_ESTIMATE_LONGEST_WAIT",
        value_name = "DURATION"
    )]
    pub estimate_longest_wait: Option<String>,
}

crate::merge_options!(EstimateOptions {
    estimate_cpu_factor,
    estimate_memory_factor,
    estimate_default_cpu,
    estimate_default_memory,
    estimate_ramp_up,
    estimate_longest_wait
});

/// A number or a text in the config file (`estimate_cpu_factor: 0.85`, `..._memory: 200Mi`),
/// kept as the text a flag would give, so flag and file share one parser and one message.
fn number_as_text<'de, D: Deserializer<'de>>(
    d: D,
) -> std::result::Result<Option<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum NumberOrText {
        Number(f64),
        Text(String),
    }
    Ok(Option::<NumberOrText>::deserialize(d)?.map(|v| match v {
        NumberOrText::Number(n) => n.to_string(),
        NumberOrText::Text(s) => s,
    }))
}

impl EstimateOptions {
    /// The estimator's settings, defaults applied, each value checked.
    pub fn resolve(self) -> Result<EstimateConfig> {
        let d = EstimateConfig::default();
        let secs = Duration::from_secs;
        let span = |option, v: Option<String>, default: Duration| {
            v.map_or(Ok(default), |v| {
                duration(option, &v, Duration::ZERO, secs(3600))
            })
        };
        Ok(EstimateConfig {
            cpu_factor: factor(
                "--estimate-cpu-factor",
                self.estimate_cpu_factor,
                d.cpu_factor,
            )?,
            memory_factor: factor(
                "--estimate-memory-factor",
                self.estimate_memory_factor,
                d.memory_factor,
            )?,
            default_cpu_cores: amount(
                "--estimate-default-cpu",
                self.estimate_default_cpu,
                d.default_cpu_cores,
            )?,
            default_memory_bytes: amount(
                "--estimate-default-memory",
                self.estimate_default_memory,
                d.default_memory_bytes,
            )?,
            ramp_up: span("--estimate-ramp-up", self.estimate_ramp_up, d.ramp_up)?,
            longest_wait: span(
                "--estimate-longest-wait",
                self.estimate_longest_wait,
                d.longest_wait,
            )?,
        })
    }
}

/// A scaling factor: above 0 (0 would count nothing: leave the estimate's consumer off
/// instead) and at most 1 (a pod is not expected to use more than it asks for or is allowed).
fn factor(option: &'static str, v: Option<String>, default: f64) -> Result<f64> {
    let Some(v) = v else {
        return Ok(default);
    };
    match v.trim().parse::<f64>() {
        Ok(f) if f > 0.0 && f <= 1.0 => Ok(f),
        _ => Err(invalid(
            option,
            &v,
            "expected a number above 0 and at most 1, e.g. 0.85",
        )),
    }
}

/// A Kubernetes quantity, 0 or more and finite.
fn amount(option: &'static str, v: Option<String>, default: f64) -> Result<f64> {
    let Some(v) = v else {
        return Ok(default);
    };
    match parse_quantity(v.trim()) {
        Ok(q) if q.is_finite() && q >= 0.0 => Ok(q),
        Ok(_) => Err(invalid(option, &v, "must be 0 or more")),
        Err(e) => Err(invalid(
            option,
            &v,
            format!("{e} (expected e.g. 250m, 200Mi)"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(f: impl FnOnce(&mut EstimateOptions)) -> EstimateOptions {
        let mut o = EstimateOptions::default();
        f(&mut o);
        o
    }

    /// The lean load-watcher drop-in's switches: `--pod-scope bound|none` and
    /// `--watch-workloads=false`, from flags or the file; the defaults stay the full role's.
    #[test]
    fn pod_scope_and_workload_watches_resolve_and_default_to_the_full_role() {
        let scope = |v: Option<&str>| {
            ScopeOptions {
                pod_scope: v.map(str::to_string),
                ..ScopeOptions::default()
            }
            .resolve()
            .map(|c| c.pods)
        };
        assert_eq!(scope(None).unwrap(), PodScope::All);
        assert_eq!(scope(Some("bound")).unwrap(), PodScope::Bound);
        assert_eq!(scope(Some(" None ")).unwrap(), PodScope::None);
        assert_eq!(PodScope::Bound.as_str(), "bound");
        let e = scope(Some("scheduled")).unwrap_err().to_string();
        assert!(e.contains("--pod-scope") && e.contains("bound"), "{e}");
        let full = WorkloadOptions::default().resolve().unwrap();
        assert!(full.watch);
        assert_eq!(full.namespaces, ["kube-system"]);
        let lean: WorkloadOptions = serde_yaml_ng::from_str("watch_workloads: false\n").unwrap();
        assert!(!lean.resolve().unwrap().watch);
        let on = WorkloadOptions {
            watch_workloads: Some(true),
            ..WorkloadOptions::default()
        };
        assert!(on.resolve().unwrap().watch);
    }

    /// `--watch-initial-list`: paged unless told, `streaming` from a flag or the file, anything
    /// else an error naming the flag and its values.
    #[test]
    fn watch_initial_list_resolves_and_defaults_to_paged() {
        let list = |v: Option<&str>| {
            ScopeOptions {
                watch_initial_list: v.map(str::to_string),
                ..ScopeOptions::default()
            }
            .resolve()
            .map(|c| c.initial_list)
        };
        assert_eq!(list(None).unwrap(), InitialList::Paged);
        assert_eq!(list(Some(" Streaming ")).unwrap(), InitialList::Streaming);
        assert_eq!(InitialList::Streaming.as_str(), "streaming");
        let e = list(Some("watchlist")).unwrap_err().to_string();
        assert!(
            e.contains("--watch-initial-list") && e.contains("streaming"),
            "{e}"
        );
        let file: ScopeOptions =
            serde_yaml_ng::from_str("watch_initial_list: streaming\n").unwrap();
        assert_eq!(file.resolve().unwrap().initial_list, InitialList::Streaming);
    }

    #[test]
    fn estimate_defaults_are_koordinators() {
        let c = EstimateOptions::default().resolve().unwrap();
        assert_eq!(c, EstimateConfig::default());
        assert_eq!((c.cpu_factor, c.memory_factor), (0.85, 0.70));
        assert_eq!(
            (c.default_cpu_cores, c.default_memory_bytes),
            (0.25, 209_715_200.0)
        );
        assert_eq!(
            (c.ramp_up, c.longest_wait),
            (Duration::from_secs(60), Duration::from_secs(300))
        );
    }

    #[test]
    fn estimate_options_parse_and_name_the_flag_when_bad() {
        let c = opts(|o| {
            o.estimate_cpu_factor = Some("1".into());
            o.estimate_memory_factor = Some(" 0.5 ".into());
            o.estimate_default_cpu = Some("100m".into());
            o.estimate_default_memory = Some("1Gi".into());
            o.estimate_ramp_up = Some("30s".into());
            o.estimate_longest_wait = Some("0s".into());
        })
        .resolve()
        .unwrap();
        assert_eq!((c.cpu_factor, c.memory_factor), (1.0, 0.5));
        assert_eq!(
            (c.default_cpu_cores, c.default_memory_bytes),
            (0.1, 1_073_741_824.0)
        );
        assert_eq!(
            (c.ramp_up, c.longest_wait),
            (Duration::from_secs(30), Duration::ZERO)
        );
        type Set = fn(&mut EstimateOptions);
        let bad: [(Set, &str); 8] = [
            (
                |o| o.estimate_cpu_factor = Some("0".into()),
                "--estimate-cpu-factor",
            ),
            (
                |o| o.estimate_cpu_factor = Some("1.5".into()),
                "--estimate-cpu-factor",
            ),
            (
                |o| o.estimate_memory_factor = Some("NaN".into()),
                "--estimate-memory-factor",
            ),
            (
                |o| o.estimate_memory_factor = Some("70%".into()),
                "--estimate-memory-factor",
            ),
            (
                |o| o.estimate_default_cpu = Some("-1".into()),
                "--estimate-default-cpu",
            ),
            (
                |o| o.estimate_default_memory = Some("lots".into()),
                "--estimate-default-memory",
            ),
            (
                |o| o.estimate_ramp_up = Some("2h".into()),
                "--estimate-ramp-up",
            ),
            (
                |o| o.estimate_longest_wait = Some("soon".into()),
                "--estimate-longest-wait",
            ),
        ];
        for (set, flag) in bad {
            let e = opts(set).resolve().unwrap_err().to_string();
            assert!(e.contains(flag), "{flag}: {e}");
        }
    }

    #[test]
    fn estimate_options_read_numbers_and_text_from_the_file() {
        let o: EstimateOptions = serde_yaml_ng::from_str(
            "estimate_cpu_factor: 0.9\nestimate_default_memory: 209715200\nestimate_default_cpu: 250m\n",
        )
        .unwrap();
        let c = o.resolve().unwrap();
        assert_eq!(c.cpu_factor, 0.9);
        assert_eq!(c.default_memory_bytes, 209_715_200.0);
        assert_eq!(c.default_cpu_cores, 0.25);
    }
}
