//! Which series this instance emits: the small predicates every output asks, and a
//! [`Visitor`] adapter that applies them to the rows of [`super::series::visit`].
//!
//! **Sharding** (cluster role, `--shard`/`--total-shards` or `--shard-from-statefulset`), the
//! way kube-state-metrics shards, by object:
//! - a row with a non-empty `node` label belongs to shard `fnv1a64(node) % total`
//!   ([`shard_of`]): FNV-1a, 64 bit, over the node name's UTF-8 bytes; it depends on neither
//!   the process, the Rust version nor a hasher seed, so every replica agrees, and a restarted
//!   replica owns exactly the nodes it owned before;
//! - every other row of a cluster-level family (counts per pool and zone, addon expectations,
//!   restarts of unscheduled pods, skipped objects, probes) comes from shard 0 only;
//! - families that describe the instance itself ([`every_shard_emits`]: build, cluster info,
//!   its sources, sinks, leadership, ticks, shard) come from every replica whole.
//!
//! `/watcher` is not filtered: every replica serves the whole cluster (Trimaran has one
//! `watcherAddress`).
//!
//! **Allow/denylist** (`--metric-allowlist`, `--metric-denylist`): comma-separated regular
//! expressions, each anchored at both ends, matched against the family name (with or
//! without `_total` for counters); evaluated once at start against every family of
//! `families::ALL` and `families::SERVER`, so the outputs only look a name up in a set.

use std::collections::BTreeSet;

use super::families::{self, Family};
use super::series::{Labels, Visitor};
use crate::model::{Selection, Shard};

/// FNV-1a, 64 bit (offset basis 0xcbf29ce484222325, prime 0x100000001b3).
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The shard that owns `node` among `total` (0 when `total` is 0).
pub fn shard_of(node: &str, total: u32) -> u32 {
    if total == 0 {
        return 0;
    }
    (fnv1a64(node.as_bytes()) % u64::from(total)) as u32
}

/// Whether this instance emits the per-node series of `node`.
pub fn emits_node(sel: &Selection, node: &str) -> bool {
    match sel.shard {
        None => true,
        Some(Shard { total: 0, .. }) => false,
        Some(Shard { index, total }) => shard_of(node, total) == index,
    }
}

/// Whether this instance emits cluster-level series (those of no node): shard 0 only.
pub fn emits_cluster(sel: &Selection) -> bool {
    match sel.shard {
        None => true,
        Some(Shard { index, total }) => total > 0 && index == 0,
    }
}

/// Whether the allow/denylist lets `family` through.
pub fn family_allowed(sel: &Selection, family: &Family) -> bool {
    sel.excluded_families.is_empty() || !sel.excluded_families.contains(family.name)
}

/// Families every shard emits whole, as their declared scope says
/// ([`families::Scope::every_shard`]): the instance's own and the cluster's identity, but not the
/// probes, whose results describe the cluster and come from shard 0 like every cluster-level
/// series.
pub fn every_shard_emits(family: &Family) -> bool {
    family.scope.every_shard()
}

/// Whether this instance emits the row with `labels` of `family` (the family filter aside).
pub fn emits_row(sel: &Selection, family: &Family, labels: &[(&str, &str)]) -> bool {
    if sel.shard.is_none() || every_shard_emits(family) {
        return true;
    }
    match labels.iter().find(|(k, _)| *k == "node").map(|(_, v)| *v) {
        Some(node) if !node.is_empty() => emits_node(sel, node),
        _ => emits_cluster(sel),
    }
}

/// A [`Visitor`] that passes on only the rows this instance emits; a family left out by the
/// allow/denylist is passed on with no rows.
pub struct Filter<'a, V> {
    sel: &'a Selection,
    inner: &'a mut V,
}

impl<'a, V: Visitor> Filter<'a, V> {
    pub fn new(sel: &'a Selection, inner: &'a mut V) -> Self {
        Filter { sel, inner }
    }

    /// Whether the selection can change anything: when not, rows pass without a copy.
    fn passes_all(&self, family: &Family) -> bool {
        self.sel.shard.is_none() || every_shard_emits(family)
    }
}

impl<V: Visitor> Visitor for Filter<'_, V> {
    fn keeps(&self, family: &Family, node: &str) -> bool {
        let emits = self.passes_all(family)
            || if node.is_empty() {
                emits_cluster(self.sel)
            } else {
                emits_node(self.sel, node)
            };
        family_allowed(self.sel, family) && emits && self.inner.keeps(family, node)
    }

    fn family(&mut self, family: &Family, rows: &[(Labels<'_>, f64)]) {
        if !family_allowed(self.sel, family) {
            return self.inner.family(family, &[]);
        }
        if self.passes_all(family) {
            return self.inner.family(family, rows);
        }
        let kept: Vec<_> = rows
            .iter()
            .filter(|(l, _)| emits_row(self.sel, family, l))
            .cloned()
            .collect();
        self.inner.family(family, &kept);
    }

    fn histogram(
        &mut self,
        family: &Family,
        bounds: &[f64],
        rows: &[(Labels<'_>, &[u64], f64, u64)],
    ) {
        if !family_allowed(self.sel, family) {
            return self.inner.histogram(family, bounds, &[]);
        }
        if self.passes_all(family) {
            return self.inner.histogram(family, bounds, rows);
        }
        let kept: Vec<_> = rows
            .iter()
            .filter(|(l, ..)| emits_row(self.sel, family, l))
            .cloned()
            .collect();
        self.inner.histogram(family, bounds, &kept);
    }
}

/// Every family the allow/denylist is matched against.
fn all_families() -> impl Iterator<Item = &'static Family> {
    families::ALL.iter().chain(families::SERVER)
}

/// Compiles one list: comma-separated patterns, each anchored (`^(?:p)$`). An error names the
/// pattern and why.
fn compile(list: &str) -> Result<Vec<(String, regex::Regex)>, String> {
    list.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| {
            regex::Regex::new(&format!("^(?:{p})$"))
                .map(|r| (p.to_string(), r))
                .map_err(|e| format!("pattern `{p}` is not a regular expression: {e}"))
        })
        .collect()
}

/// The families left out by `allow` (everything not matched) or `deny` (everything matched);
/// at most one may be given. A pattern that matches no family is an error too (a typo would
/// otherwise silently drop everything, or nothing).
pub fn excluded_families(
    allow: Option<&str>,
    deny: Option<&str>,
) -> Result<BTreeSet<String>, String> {
    let (list, keep_matches) = match (allow, deny) {
        (Some(_), Some(_)) => {
            return Err(
                "--metric-allowlist and --metric-denylist are exclusive; give one".to_string(),
            );
        }
        (Some(a), None) => (a, true),
        (None, Some(d)) => (d, false),
        (None, None) => return Ok(opt_in().collect()),
    };
    let patterns = compile(list)?;
    if patterns.is_empty() {
        return Err("no pattern given".to_string());
    }
    let matches = |f: &Family, r: &regex::Regex| r.is_match(f.name) || r.is_match(&f.sample_name());
    if let Some((p, _)) = patterns
        .iter()
        .find(|(_, r)| !all_families().any(|f| matches(f, r)))
    {
        return Err(format!(
            "pattern `{p}` matches no metric family (names in docs/metrics.md)"
        ));
    }
    let mut out: BTreeSet<String> = all_families()
        .filter(|f| patterns.iter().any(|(_, r)| matches(f, r)) != keep_matches)
        .map(|f| f.name.to_string())
        .collect();
    if !keep_matches {
        out.extend(opt_in());
    }
    Ok(out)
}

/// The opt-in families' names: left out unless the allowlist names them.
fn opt_in() -> impl Iterator<Item = String> {
    families::OPT_IN.iter().map(|f| f.name.to_string())
}

/// `--metric-allowlist` and `--metric-denylist`: which families are emitted.
#[derive(Debug, Clone, Default, PartialEq, clap::Args, serde::Deserialize)]
#[serde(default)]
pub struct SelectOptions {
    /// Only the metric families matching one of these comma-separated regular expressions
    /// (each anchored) are emitted on /metrics and pushed. [default: all]
    #[arg(long, env = "KUBE_PROBER_METRIC_ALLOWLIST", value_name = "REGEX,...")]
    pub metric_allowlist: Option<String>,

    /// Metric families matching one of these comma-separated regular expressions (each
    /// anchored) are left out of /metrics and the pushes; exclusive with --metric-allowlist.
    #[arg(long, env = "KUBE_PROBER_METRIC_DENYLIST", value_name = "REGEX,...")]
    pub metric_denylist: Option<String>,
}

crate::merge_options!(SelectOptions {
    metric_allowlist,
    metric_denylist
});

/// The resolved metric selection: what `--metric-allowlist`/`--metric-denylist` leave out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SelectConfig {
    /// The families left out (the opt-in ones unless the allowlist names them).
    pub excluded_families: BTreeSet<String>,
}

impl SelectOptions {
    /// The families to leave out; a bad list is an error naming the flag that holds it.
    pub fn resolve(self) -> crate::shared::error::Result<SelectConfig> {
        let (allow, deny) = (self.metric_allowlist, self.metric_denylist);
        let excluded = excluded_families(allow.as_deref(), deny.as_deref()).map_err(|reason| {
            let (option, value) = match (&allow, &deny) {
                (Some(a), None) => ("--metric-allowlist", a.as_str()),
                (None, Some(d)) => ("--metric-denylist", d.as_str()),
                _ => ("--metric-allowlist", allow.as_deref().unwrap_or_default()),
            };
            crate::shared::options::invalid(option, value, reason)
        })?;
        Ok(SelectConfig {
            excluded_families: excluded,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a64_is_the_published_function() {
        // Test vectors of the FNV reference (draft-eastlake-fnv).
        assert_eq!(fnv1a64(b""), 0xcbf29ce484222325);
        assert_eq!(fnv1a64(b"a"), 0xaf63dc4c8601ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x85944171f73967e8);
    }

    #[test]
    fn shard_of_is_pinned() {
        // Fixed forever: a change would move every node to another shard on upgrade.
        let got: Vec<u32> = ["node-0", "node-1", "node-2", "gke-pool-1-abcd", "a"]
            .iter()
            .map(|n| shard_of(n, 3))
            .collect();
        let want: Vec<u32> = ["node-0", "node-1", "node-2", "gke-pool-1-abcd", "a"]
            .iter()
            .map(|n| (fnv1a64(n.as_bytes()) % 3) as u32)
            .collect();
        assert_eq!(got, want);
        assert_eq!(got, [2, 0, 1, 0, 1]);
        assert_eq!(shard_of("x", 0), 0);
        assert_eq!(shard_of("x", 1), 0);
    }

    fn sel(shard: Option<(u32, u32)>) -> Selection {
        Selection {
            shard: shard.map(|(index, total)| Shard { index, total }),
            excluded_families: BTreeSet::new(),
            stale_after: None,
        }
    }

    #[test]
    fn every_node_has_exactly_one_shard_and_cluster_rows_one_owner() {
        for total in 1..=7u32 {
            for i in 0..200 {
                let node = format!("node-{i}");
                let owners = (0..total)
                    .filter(|&s| emits_node(&sel(Some((s, total))), &node))
                    .count();
                assert_eq!(owners, 1, "{node} of {total}");
            }
            let owners = (0..total)
                .filter(|&s| emits_cluster(&sel(Some((s, total)))))
                .count();
            assert_eq!(owners, 1);
        }
        assert!(emits_node(&sel(None), "x") && emits_cluster(&sel(None)));
        // Total not known yet: nothing but self-metrics.
        assert!(!emits_node(&sel(Some((0, 0))), "x"));
        assert!(!emits_cluster(&sel(Some((0, 0)))));
    }

    #[test]
    fn rows_follow_their_node_and_self_metrics_every_shard() {
        let s1 = sel(Some((1, 2)));
        let node = (0..50)
            .map(|i| format!("n{i}"))
            .find(|n| shard_of(n, 2) == 1)
            .unwrap();
        let labels = [("node", node.as_str())];
        assert!(emits_row(&s1, &families::NODE_AVAILABLE, &labels));
        assert!(!emits_row(
            &sel(Some((0, 2))),
            &families::NODE_AVAILABLE,
            &labels
        ));
        // No node, or an empty one (an unscheduled pod): shard 0.
        assert!(!emits_row(&s1, &families::CLUSTER_NODES, &[("pool", "p")]));
        assert!(!emits_row(
            &s1,
            &families::CONTAINER_RESTARTS,
            &[("node", "")]
        ));
        assert!(!emits_row(
            &s1,
            &families::PROBE_SUCCESS,
            &[("probe", "dns")]
        ));
        assert!(emits_row(&s1, &families::TICKS, &[]));
        assert!(emits_row(&s1, &families::CLUSTER_INFO, &[]));
        assert!(emits_row(&s1, &families::SHARD_INFO, &[]));
    }

    #[test]
    fn lists_are_anchored_exclusive_and_checked() {
        let ex = excluded_families(Some("kube_prober_node_.*"), None).unwrap();
        assert!(!ex.contains(families::NODE_AVAILABLE.name));
        assert!(ex.contains(families::CLUSTER_NODES.name));
        assert!(ex.contains(families::TICKS.name));
        // Anchored: `node` alone matches nothing.
        let err = excluded_families(None, Some("node")).unwrap_err();
        assert!(err.contains("matches no metric family"), "{err}");
        // Counters by either name.
        let ex =
            excluded_families(None, Some("kube_prober_ticks_total, kube_prober_leader")).unwrap();
        assert_eq!(
            ex,
            BTreeSet::from([
                "kube_prober_ticks".to_string(),
                "kube_prober_leader".to_string(),
                families::NODE_USAGE_QUANTILE.name.to_string(),
            ]),
            "the denied ones, and the opt-in ones the allowlist did not name"
        );
        let err = excluded_families(Some("a"), Some("b")).unwrap_err();
        assert!(err.contains("exclusive"), "{err}");
        let err = excluded_families(Some("kube_prober_(node"), None).unwrap_err();
        assert!(err.contains("not a regular expression"), "{err}");
        let opt_in = BTreeSet::from([families::NODE_USAGE_QUANTILE.name.to_string()]);
        assert_eq!(excluded_families(None, None).unwrap(), opt_in);
        let named = excluded_families(Some("kube_prober_node_usage_.*"), None).unwrap();
        assert!(!named.contains(families::NODE_USAGE_QUANTILE.name));
        assert!(excluded_families(Some(" , "), None).is_err());
    }

    #[test]
    fn filter_drops_excluded_families_and_foreign_rows() {
        struct Seen(Vec<(String, usize)>);
        impl Visitor for Seen {
            fn family(&mut self, f: &Family, rows: &[(Labels<'_>, f64)]) {
                self.0.push((f.name.to_string(), rows.len()));
            }
            fn histogram(
                &mut self,
                f: &Family,
                _: &[f64],
                rows: &[(Labels<'_>, &[u64], f64, u64)],
            ) {
                self.0.push((f.name.to_string(), rows.len()));
            }
        }
        let mut s = sel(Some((0, 2)));
        s.excluded_families
            .insert(families::NODE_PODS.name.to_string());
        let (a, b) = ["n0", "n1", "n2", "n3", "n4", "n5"]
            .iter()
            .partition::<Vec<&str>, _>(|n| shard_of(n, 2) == 0);
        let rows: Vec<(Labels<'_>, f64)> = a
            .iter()
            .chain(&b)
            .map(|n| (vec![("node", *n)], 1.0))
            .collect();
        let mut seen = Seen(vec![]);
        let mut f = Filter::new(&s, &mut seen);
        f.family(&families::NODE_AVAILABLE, &rows);
        f.family(&families::NODE_PODS, &rows);
        f.family(&families::TICKS, &[(vec![], 1.0)]);
        assert_eq!(
            seen.0,
            vec![
                (families::NODE_AVAILABLE.name.to_string(), a.len()),
                (families::NODE_PODS.name.to_string(), 0),
                (families::TICKS.name.to_string(), 1),
            ]
        );
    }

    /// `keeps` (the hint a visit uses to skip rows) says yes exactly when the filter would
    /// pass a row of that family and node, for every family, sharded or not, with and
    /// without the family excluded.
    #[test]
    fn keeps_agrees_with_the_rows_the_filter_passes() {
        struct Count(usize);
        impl Visitor for Count {
            fn family(&mut self, _: &Family, rows: &[(Labels<'_>, f64)]) {
                self.0 += rows.len();
            }
            fn histogram(&mut self, _: &Family, _: &[f64], r: &[(Labels<'_>, &[u64], f64, u64)]) {
                self.0 += r.len();
            }
        }
        let nodes = ["", "n0", "n1", "n2", "n3", "n4", "n5", "gke-a-1"];
        for shard in [None, Some((0, 3)), Some((1, 3)), Some((2, 3)), Some((0, 0))] {
            for exclude in [false, true] {
                for family in families::ALL {
                    let mut s = sel(shard);
                    if exclude {
                        s.excluded_families.insert(family.name.to_string());
                    }
                    for node in nodes {
                        let mut count = Count(0);
                        let mut f = Filter::new(&s, &mut count);
                        let keeps = f.keeps(family, node);
                        f.family(family, &[(vec![("node", node)], 1.0)]);
                        assert_eq!(
                            keeps,
                            count.0 == 1,
                            "{} {node:?} {shard:?} excluded {exclude}",
                            family.name
                        );
                    }
                }
            }
        }
    }
}
