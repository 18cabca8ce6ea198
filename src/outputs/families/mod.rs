//! Every metric family this program exposes, declared once: name, help, type, unit, scope,
//! its OTLP metrics and its gke-prober metric for Cloud Monitoring, in tables grouped by what
//! they describe (one file each: `usage`, `node`, `cluster`, `addon`, `task`, `platform`,
//! `instance`). [`ALL`], [`OTLP_METRICS`], [`OTLP_METRICS_LEGACY`] and [`GKE_PROBER`] are made
//! from those tables.
//! docs/metrics.md lists each family; `tests/repo/docs.rs` fails when the two drift apart.

mod addon;
mod cluster;
mod instance;
mod node;
mod platform;
mod rows;
mod task;
mod usage;

pub use addon::*;
pub use cluster::*;
pub use instance::*;
pub use node::*;
pub use platform::*;
pub use rows::{Keyed, Labels, Row, RowsOf, Visitor, same_in_state, same_node_facts};
pub use task::*;
pub use usage::*;

/// The kind of a metric family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Gauge,
    /// Samples carry the `_total` suffix; `name` here has none.
    Counter,
    /// Samples `_bucket{le}`, `_sum`, `_count`.
    Histogram,
}

/// One metric family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Family {
    pub name: &'static str,
    pub help: &'static str,
    pub kind: Kind,
    /// The base unit, which is also the name's suffix (OpenMetrics `# UNIT`).
    pub unit: Option<&'static str>,
    /// What it describes, which decides which instances emit it and push it.
    pub scope: Scope,
    /// What the OTLP output sends it as: one metric, or more when some are derived from it.
    pub otel: &'static [Otel],
    /// What it sends instead under `--otlp-semconv legacy` ([`Semconv::Legacy`]); empty when
    /// the names are the same in both.
    pub otel_legacy: &'static [Otel],
    /// The gke-prober metric the Cloud Monitoring output writes from it, if any.
    pub gke: Option<GkeProber>,
}

/// What a family describes: which shard emits its rows, and whether a replica that does not
/// lead still pushes them. Declared with the family, never worked out from its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The cluster or its nodes: a row of a node comes from that node's shard, a row of no node
    /// from shard 0; only the leader pushes it.
    Cluster,
    /// The cluster's identity (`kube_prober_cluster_info`): every shard emits it whole, so
    /// each shard's series can be joined with it; only the leader pushes it.
    ClusterIdentity,
    /// This instance itself (build, sources, push outputs, ticks, leadership, its shard, what
    /// its usage data is worth): every shard emits it, and every replica pushes it.
    Instance,
    /// The probes this instance ran: every replica pushes them like [`Scope::Instance`], but
    /// their results describe the cluster, so of the shards only shard 0 emits them.
    Probe,
}

impl Scope {
    /// Describes this instance: pushed by every replica, leader or not.
    pub const fn instance_level(self) -> bool {
        matches!(self, Scope::Instance | Scope::Probe)
    }

    /// Emitted whole by every shard (no row is left to another shard).
    pub const fn every_shard(self) -> bool {
        matches!(self, Scope::Instance | Scope::ClusterIdentity)
    }
}

impl Family {
    /// The name samples carry: with `_total` for counters.
    pub fn sample_name(&self) -> String {
        match self.kind {
            Kind::Counter => format!("{}_total", self.name),
            Kind::Gauge | Kind::Histogram => self.name.to_string(),
        }
    }

    /// The same family in scope `scope` (every constructor gives [`Scope::Cluster`]).
    const fn in_scope(self, scope: Scope) -> Family {
        Family { scope, ..self }
    }

    /// The same family sent over OTLP as `otel`.
    const fn otel(self, otel: &'static [Otel]) -> Family {
        Family { otel, ..self }
    }

    /// The same family sent over OTLP as `legacy` (in place of its `otel` metrics) under
    /// `--otlp-semconv legacy`: the names, units and kinds the Collector's receivers send
    /// without the `semconv.k8s.enableStable` feature gate.
    const fn legacy(self, legacy: &'static [Otel]) -> Family {
        Family {
            otel_legacy: legacy,
            ..self
        }
    }

    /// Its OTLP metrics under `semconv`.
    pub const fn otel_as(&self, semconv: Semconv) -> &'static [Otel] {
        match semconv {
            Semconv::Legacy if !self.otel_legacy.is_empty() => self.otel_legacy,
            _ => self.otel,
        }
    }

    /// The same family written to Cloud Monitoring as gke-prober's `gke`.
    const fn gke(self, gke: GkeProber) -> Family {
        Family {
            gke: Some(gke),
            ..self
        }
    }
}

const fn family(
    name: &'static str,
    help: &'static str,
    kind: Kind,
    unit: Option<&'static str>,
) -> Family {
    Family {
        name,
        help,
        kind,
        unit,
        scope: Scope::Cluster,
        otel: &[],
        otel_legacy: &[],
        gke: None,
    }
}

const fn gauge(name: &'static str, help: &'static str, unit: Option<&'static str>) -> Family {
    family(name, help, Kind::Gauge, unit)
}

const fn counter(name: &'static str, help: &'static str, unit: Option<&'static str>) -> Family {
    family(name, help, Kind::Counter, unit)
}

const fn histogram(name: &'static str, help: &'static str, unit: Option<&'static str>) -> Family {
    family(name, help, Kind::Histogram, unit)
}

/// What kind of OTLP data a family is sent as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OtelKind {
    /// Gauge data points.
    Gauge,
    /// Monotonic cumulative sum.
    Counter,
    /// Non-monotonic cumulative sum (what semantic conventions call an UpDownCounter).
    UpDownCounter,
    /// Explicit-bucket cumulative histogram.
    Histogram,
}

impl OtelKind {
    /// The spelling docs/metrics.md uses.
    pub fn as_str(self) -> &'static str {
        match self {
            OtelKind::Gauge => "gauge",
            OtelKind::Counter => "counter",
            OtelKind::UpDownCounter => "updowncounter",
            OtelKind::Histogram => "histogram",
        }
    }
}

/// How a metric's values come from its family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Derivation {
    /// The family's rows, with attribute keys renamed.
    Rows,
    /// The family's latest (`window="instant"`) value per node times the node's capacity from
    /// `capacity` (a family name); only nodes with a known capacity.
    LatestTimesCapacity { capacity: &'static str },
    /// `kube_prober_node_condition` as semconv's `k8s.node.condition.status`: per node and
    /// condition type, one point per status (`true`, `false`, `unknown`), 1 for the current one.
    AllConditionStatuses,
    /// `kube_prober_node_condition`'s rows of the condition type `condition` as the
    /// Collector's legacy `k8s.node.condition_<type>`: one point per node, 1 for `True`, 0 for
    /// `False`, -1 otherwise; without the `condition` and `status` attributes.
    ConditionValue { condition: &'static str },
}

/// Which names the OTLP output sends the Kubernetes metrics under (`--otlp-semconv`), as the
/// OpenTelemetry Collector's `semconv.k8s.enableStable` feature gate chooses them for its
/// k8scluster and kubeletstats receivers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Semconv {
    /// The semantic conventions' names, units, kinds and attributes (`k8s.node.cpu.allocatable`,
    /// `k8s.node.condition.status`, ...): what the Collector sends with the gate enabled.
    #[default]
    Stable,
    /// The Collector's names without the gate (`k8s.node.allocatable_cpu`,
    /// `k8s.node.condition_ready`, ...), from each family's [`Family::otel_legacy`].
    Legacy,
}

impl Semconv {
    /// Every value, in the order `--help` lists them.
    pub const ALL: [Semconv; 2] = [Semconv::Stable, Semconv::Legacy];

    /// The option's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Semconv::Stable => "stable",
            Semconv::Legacy => "legacy",
        }
    }

    /// Every OTLP metric sent under this choice, in the order of [`ALL`].
    pub fn metrics(self) -> &'static [OtelMetric] {
        match self {
            Semconv::Stable => OTLP_METRICS,
            Semconv::Legacy => OTLP_METRICS_LEGACY,
        }
    }
}

/// One OTLP metric of a family: its OTel name, UCUM unit, kind and how its values come from
/// the family's rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Otel {
    pub name: &'static str,
    pub unit: &'static str,
    pub kind: OtelKind,
    pub derivation: Derivation,
}

/// One OTLP metric with the family it comes from (the rows of [`OTLP_METRICS`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OtelMetric {
    pub family: &'static str,
    pub name: &'static str,
    pub unit: &'static str,
    pub kind: OtelKind,
    pub derivation: Derivation,
}

/// An OTLP metric made of the family's rows as they are.
const fn o(name: &'static str, unit: &'static str, kind: OtelKind) -> Otel {
    Otel {
        name,
        unit,
        kind,
        derivation: Derivation::Rows,
    }
}

use OtelKind::{Counter as C, Gauge as G, Histogram as H, UpDownCounter as U};

/// One gke-prober metric and where its data is here: the Cloud Monitoring output writes
/// `<prefix>/<suffix>` with gke-prober's label keys, so its dashboards keep working.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GkeProberMetric {
    /// gke-prober's metric type suffix.
    pub suffix: &'static str,
    /// Our family.
    pub family: &'static str,
    /// (gke-prober label key, our label), in gke-prober's order.
    pub labels: &'static [(&'static str, &'static str)],
    /// GCM metric kind: `GAUGE` or `CUMULATIVE`.
    pub kind: &'static str,
}

/// A family's gke-prober metric ([`GkeProberMetric`] without the family).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GkeProber {
    /// gke-prober's metric type suffix.
    pub suffix: &'static str,
    /// (gke-prober label key, our label), in gke-prober's order.
    pub labels: &'static [(&'static str, &'static str)],
    /// GCM metric kind: `GAUGE` or `CUMULATIVE`.
    pub kind: &'static str,
}

/// gke-prober's label keys of both its node condition metrics (`cluster/node_condition`,
/// `node/condition`), mapped to ours.
const GKE_CONDITION_LABELS: &[(&str, &str)] = &[
    ("nodepool", "pool"),
    ("zone", "zone"),
    ("type", "condition"),
    ("status", "status"),
];

/// The tables of families in exposition order (each a step of `series::steps`).
const PARTS: &[&[Family]] = &[
    INFO,
    USAGE,
    BOUND,
    FRESHNESS,
    CAPACITY,
    ALLOCATABLE,
    COUNTS,
    FACTS,
    EXPECTED,
    ADDONS,
    POD_SUMS,
    RESTARTS,
    SKIPPED,
    TASKS,
    PLATFORM,
    INSTANCE,
];

/// Every family, in exposition order: the tables of [`PARTS`] one after another.
pub const ALL: &[Family] = &concat::<{ count(PARTS) }>(PARTS);

/// Every OTLP metric, in the order of [`ALL`] (derived metrics after their family).
/// Semantic-convention names where one exists and means the same; `kube_prober.*` otherwise.
/// docs/metrics.md ("## OTLP names") lists them; tests/standins/otlp.rs checks they agree.
pub const OTLP_METRICS: &[OtelMetric] =
    &otel_metrics::<{ otel_count(ALL, Semconv::Stable) }>(ALL, Semconv::Stable);

/// Every OTLP metric under `--otlp-semconv legacy`: [`OTLP_METRICS`] with each family's
/// [`Family::otel_legacy`] in place of its stable metrics. docs/metrics.md ("## OTLP names
/// under `--otlp-semconv legacy`") lists what differs.
pub const OTLP_METRICS_LEGACY: &[OtelMetric] =
    &otel_metrics::<{ otel_count(ALL, Semconv::Legacy) }>(ALL, Semconv::Legacy);

/// gke-prober's names and label keys (including its `scheduleable` spelling on
/// node/available), mapped to ours: every family's [`Family::gke`].
pub const GKE_PROBER: &[GkeProberMetric] = &gke_metrics::<{ gke_count(ALL) }>(ALL);

const PLACEHOLDER: Family = gauge("", "", None);

const fn count(parts: &[&[Family]]) -> usize {
    let (mut n, mut i) = (0, 0);
    while i < parts.len() {
        n += parts[i].len();
        i += 1;
    }
    n
}

const fn concat<const N: usize>(parts: &[&[Family]]) -> [Family; N] {
    let mut out = [PLACEHOLDER; N];
    let (mut k, mut i) = (0, 0);
    while i < parts.len() {
        let mut j = 0;
        while j < parts[i].len() {
            out[k] = parts[i][j];
            k += 1;
            j += 1;
        }
        i += 1;
    }
    out
}

const fn otel_count(all: &[Family], semconv: Semconv) -> usize {
    let (mut n, mut i) = (0, 0);
    while i < all.len() {
        n += all[i].otel_as(semconv).len();
        i += 1;
    }
    n
}

const fn otel_metrics<const N: usize>(all: &[Family], semconv: Semconv) -> [OtelMetric; N] {
    let mut out = [OtelMetric {
        family: "",
        name: "",
        unit: "",
        kind: OtelKind::Gauge,
        derivation: Derivation::Rows,
    }; N];
    let (mut k, mut i) = (0, 0);
    while i < all.len() {
        let mut j = 0;
        let otel = all[i].otel_as(semconv);
        while j < otel.len() {
            let o = otel[j];
            out[k] = OtelMetric {
                family: all[i].name,
                name: o.name,
                unit: o.unit,
                kind: o.kind,
                derivation: o.derivation,
            };
            k += 1;
            j += 1;
        }
        i += 1;
    }
    out
}

const fn gke_count(all: &[Family]) -> usize {
    let (mut n, mut i) = (0, 0);
    while i < all.len() {
        if all[i].gke.is_some() {
            n += 1;
        }
        i += 1;
    }
    n
}

const fn gke_metrics<const N: usize>(all: &[Family]) -> [GkeProberMetric; N] {
    let mut out = [GkeProberMetric {
        suffix: "",
        family: "",
        labels: &[],
        kind: "",
    }; N];
    let (mut k, mut i) = (0, 0);
    while i < all.len() {
        if let Some(g) = all[i].gke {
            out[k] = GkeProberMetric {
                suffix: g.suffix,
                family: all[i].name,
                labels: g.labels,
                kind: g.kind,
            };
            k += 1;
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outputs::series;

    #[test]
    fn every_gke_prober_metric_maps_to_one_of_ours() {
        for g in GKE_PROBER {
            assert!(
                ALL.iter().any(|f| f.name == g.family),
                "{} -> {}",
                g.suffix,
                g.family
            );
            assert!(matches!(g.kind, "GAUGE" | "CUMULATIVE"));
        }
        assert_eq!(GKE_PROBER.len(), 9);
    }

    #[test]
    fn names_follow_prometheus_conventions() {
        let mut seen = std::collections::HashSet::new();
        for f in ALL {
            assert!(f.name.starts_with("kube_prober_"), "{}", f.name);
            assert!(
                f.name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
                "{}",
                f.name
            );
            assert!(
                !f.name.ends_with("_total"),
                "{}: counters get _total on samples",
                f.name
            );
            if let Some(u) = f.unit {
                assert!(
                    f.name.ends_with(&format!("_{u}")),
                    "{} must end with its unit {u}",
                    f.name
                );
            }
            assert!(seen.insert(f.name), "duplicate family {}", f.name);
        }
    }

    #[test]
    fn every_family_has_an_otlp_name_and_names_are_valid() {
        for semconv in Semconv::ALL {
            check_otlp_names(semconv.metrics(), semconv);
        }
    }

    fn check_otlp_names(metrics: &[OtelMetric], semconv: Semconv) {
        for f in ALL {
            assert!(
                metrics.iter().any(|m| m.family == f.name),
                "{} has no OTLP name under {semconv:?}",
                f.name
            );
        }
        let mut seen = std::collections::HashSet::new();
        for m in metrics {
            assert!(seen.insert(m.name), "duplicate {}", m.name);
            assert!(ALL.iter().any(|f| f.name == m.family), "{}", m.family);
            assert!(m.name.len() <= 255 && m.name.starts_with(|c: char| c.is_ascii_lowercase()));
            assert!(
                m.name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._".contains(c)),
                "{}",
                m.name
            );
            assert!(
                m.name.starts_with("kube_prober.")
                    || m.name.starts_with("k8s.")
                    || m.name.starts_with("container."),
                "{}",
                m.name
            );
            // Units go in `unit`, never in the name: a Collector that exports to Prometheus
            // adds the unit and `_total` itself (it would make `..._total_total`).
            for suffix in ["_total", "_seconds", "_bytes", "_ratio", ".total"] {
                assert!(!m.name.ends_with(suffix), "{}: Prometheus suffix", m.name);
            }
            let fam = ALL.iter().find(|f| f.name == m.family);
            if m.kind == OtelKind::Histogram {
                assert_eq!(fam.map(|f| f.kind), Some(Kind::Histogram));
                // The sync histogram cannot hide series, so it must be instance-level.
                assert!(fam.is_some_and(series::is_instance_level));
            }
        }
    }

    #[test]
    fn legacy_names_differ_only_where_a_family_declares_them() {
        let declared: Vec<&Family> = ALL.iter().filter(|f| !f.otel_legacy.is_empty()).collect();
        for f in ALL {
            let of = |table: &[OtelMetric]| -> Vec<OtelMetric> {
                table
                    .iter()
                    .filter(|m| m.family == f.name)
                    .copied()
                    .collect()
            };
            let (stable, legacy) = (of(OTLP_METRICS), of(OTLP_METRICS_LEGACY));
            if f.otel_legacy.is_empty() {
                assert_eq!(stable, legacy, "{}", f.name);
            } else {
                assert_ne!(
                    stable, legacy,
                    "{}: a legacy list like the stable one",
                    f.name
                );
                let names: Vec<&str> = legacy.iter().map(|m| m.name).collect();
                let want: Vec<&str> = f.otel_legacy.iter().map(|o| o.name).collect();
                assert_eq!(names, want, "{}", f.name);
            }
        }
        // The families whose stable names are semconv's k8s names the Collector renamed or
        // retyped behind its gate; every other family is sent alike in both.
        let mut names: Vec<&str> = declared.iter().map(|f| f.name).collect();
        names.sort_unstable();
        assert_eq!(
            names,
            [
                "kube_prober_container_restarts",
                "kube_prober_node_allocatable_cpu_cores",
                "kube_prober_node_allocatable_memory_bytes",
                "kube_prober_node_condition",
                "kube_prober_node_memory_utilization_ratio",
                "kube_prober_task_memory_rss_bytes",
                "kube_prober_task_memory_usage_bytes",
                "kube_prober_task_memory_working_set_bytes",
            ]
        );
        // No legacy metric is an up-down counter: the Collector's pre-gate k8s metrics are
        // gauges (or, for CPU time, monotonic sums).
        for m in OTLP_METRICS_LEGACY {
            let declared_here = declared.iter().any(|f| f.name == m.family);
            if declared_here && m.name.starts_with("k8s.") {
                assert_ne!(m.kind, OtelKind::UpDownCounter, "{}", m.name);
            }
        }
    }
}
