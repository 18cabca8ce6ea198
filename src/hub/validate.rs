//! The one rule every usage value and capacity passes before the hub keeps it.
//!
//! The hub ([`super::Store`]) applies it to everything a source records, so every source gets
//! the same rule; a fetcher that divides by a capacity (metrics-server) asks [`cpu_cores`] and
//! [`memory_bytes`] first instead of dividing by an impossible one. A value that fails is
//! dropped on its own (the node's other values and every other node are untouched), counted in
//! `kube_prober_source_dropped_values_total{reason}` and logged at most once per node per run.

use crate::model::{BackendValue, Resource};

/// How far above 100 % a utilization may read and still be served (as 100 %): usage and
/// capacity are sampled at slightly different instants, so metrics-server can report, say,
/// 4.02 cores busy on a 4-core node. Anything above is dropped as `above_capacity`.
pub const RATIO_TOLERANCE: f64 = 0.05;
/// More cores than any machine has (the largest today have a few thousand).
pub const MAX_CPU_CORES: f64 = 65_536.0;
/// More memory than any machine has: 1 PiB.
pub const MAX_MEMORY_BYTES: f64 = 1024.0 * 1024.0 * 1024.0 * 1024.0 * 1024.0;

/// Why a value never reached an output: the `reason` label of
/// `kube_prober_source_dropped_values_total`. Add a variant here and to [`DropReason::ALL`];
/// docs/metrics.md must list it (tests/repo/docs.rs checks both ways).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DropReason {
    /// NaN or ±Inf.
    NonFinite,
    /// Below zero.
    Negative,
    /// A utilization above 100 % + [`RATIO_TOLERANCE`] (usage above capacity).
    AboveCapacity,
    /// A capacity that is missing, zero, negative, non-finite or absurd (above
    /// [`MAX_CPU_CORES`] / [`MAX_MEMORY_BYTES`]); ratios over it are not computed.
    BadCapacity,
    /// A value the backend sent that is not a number or quantity at all (or an item of a list
    /// that does not decode).
    Unparsable,
    /// An item of a streamed list (one node's NodeMetrics) over `--max-response-bytes`.
    TooLarge,
}

impl DropReason {
    pub const ALL: [DropReason; 6] = [
        DropReason::NonFinite,
        DropReason::Negative,
        DropReason::AboveCapacity,
        DropReason::BadCapacity,
        DropReason::Unparsable,
        DropReason::TooLarge,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::NonFinite => "non_finite",
            DropReason::Negative => "negative",
            DropReason::AboveCapacity => "above_capacity",
            DropReason::BadCapacity => "bad_capacity",
            DropReason::Unparsable => "unparsable",
            DropReason::TooLarge => "too_large",
        }
    }
}

/// Every `reason` value `kube_prober_source_dropped_values_total` can carry.
pub fn dropped_reasons() -> impl Iterator<Item = &'static str> {
    DropReason::ALL.iter().map(|r| r.as_str())
}

/// Whether the hub stores `resource` as a fraction (0..=1).
pub fn is_ratio(resource: Resource) -> bool {
    matches!(
        resource,
        Resource::Cpu | Resource::Memory | Resource::DiskIo
    )
}

/// A value as served: finite, not negative, and for a ratio at most 1 (values up to
/// 1 + [`RATIO_TOLERANCE`] are served as 1).
pub fn value(ratio: bool, v: f64) -> Result<f64, DropReason> {
    if !v.is_finite() {
        return Err(DropReason::NonFinite);
    }
    if v < 0.0 {
        return Err(DropReason::Negative);
    }
    if ratio && v > 1.0 {
        return if v <= 1.0 + RATIO_TOLERANCE {
            Ok(1.0)
        } else {
            Err(DropReason::AboveCapacity)
        };
    }
    Ok(v)
}

/// [`value`] for one of the hub's resources.
pub fn usage(resource: Resource, v: f64) -> Result<f64, DropReason> {
    value(is_ratio(resource), v)
}

/// [`value`] for a backend-aggregated value: a ratio when its quantity or metric type is one.
pub fn backend(v: &BackendValue) -> Result<f64, DropReason> {
    let ratio = v.resource.map_or(v.kind.is_ratio(), is_ratio);
    value(ratio, v.value)
}

fn capacity(v: f64, max: f64) -> Result<f64, DropReason> {
    if v.is_finite() && v > 0.0 && v <= max {
        Ok(v)
    } else {
        Err(DropReason::BadCapacity)
    }
}

/// A CPU capacity (or allocatable) in cores that usage can be divided by.
pub fn cpu_cores(v: f64) -> Result<f64, DropReason> {
    capacity(v, MAX_CPU_CORES)
}

/// A memory capacity (or allocatable) in bytes that usage can be divided by.
pub fn memory_bytes(v: f64) -> Result<f64, DropReason> {
    capacity(v, MAX_MEMORY_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_are_bounded_with_a_small_tolerance() {
        assert_eq!(usage(Resource::Cpu, 0.5), Ok(0.5));
        assert_eq!(usage(Resource::Cpu, 1.0), Ok(1.0));
        assert_eq!(usage(Resource::Cpu, 1.04), Ok(1.0));
        assert_eq!(usage(Resource::Cpu, 1.06), Err(DropReason::AboveCapacity));
        assert_eq!(
            usage(Resource::Memory, 100.0),
            Err(DropReason::AboveCapacity)
        );
        assert_eq!(usage(Resource::DiskIo, -0.1), Err(DropReason::Negative));
        assert_eq!(usage(Resource::Cpu, f64::NAN), Err(DropReason::NonFinite));
        // Rates are not ratios: any finite, non-negative rate is served.
        assert_eq!(usage(Resource::NetworkReceive, 1e9), Ok(1e9));
        assert_eq!(
            usage(Resource::NetworkTransmit, f64::INFINITY),
            Err(DropReason::NonFinite)
        );
    }

    #[test]
    fn impossible_capacities() {
        for bad in [0.0, -4.0, f64::NAN, f64::INFINITY, 1e9] {
            assert_eq!(cpu_cores(bad), Err(DropReason::BadCapacity), "{bad}");
        }
        assert_eq!(cpu_cores(4.0), Ok(4.0));
        assert!(memory_bytes(8.0 * 1024.0 * 1024.0 * 1024.0).is_ok());
        assert_eq!(memory_bytes(1e18), Err(DropReason::BadCapacity));
    }

    #[test]
    fn reasons_are_distinct() {
        let all: std::collections::BTreeSet<_> = dropped_reasons().collect();
        assert_eq!(all.len(), DropReason::ALL.len());
    }
}
