//! Every metric family this program exposes: name, help, type and unit, in one place.
//! docs/metrics.md lists each of them; `tests/docs.rs` fails when the two drift apart.

/// The kind of a metric family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Gauge,
    /// Samples carry the `_total` suffix; `name` here has none.
    Counter,
}

/// One metric family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Family {
    pub name: &'static str,
    pub help: &'static str,
    pub kind: Kind,
    /// The base unit, which is also the name's suffix (OpenMetrics `# UNIT`).
    pub unit: Option<&'static str>,
}

impl Family {
    /// The name samples carry: with `_total` for counters.
    pub fn sample_name(&self) -> String {
        match self.kind {
            Kind::Counter => format!("{}_total", self.name),
            Kind::Gauge => self.name.to_string(),
        }
    }
}

const fn gauge(name: &'static str, help: &'static str, unit: Option<&'static str>) -> Family {
    Family {
        name,
        help,
        kind: Kind::Gauge,
        unit,
    }
}

const fn counter(name: &'static str, help: &'static str, unit: Option<&'static str>) -> Family {
    Family {
        name,
        help,
        kind: Kind::Counter,
        unit,
    }
}

pub const BUILD_INFO: Family = gauge(
    "kube_prober_build_info",
    "Always 1; labels give the kube-prober version.",
    None,
);
pub const CLUSTER_INFO: Family = gauge(
    "kube_prober_cluster_info",
    "Always 1; labels give the cluster name and the role this instance runs.",
    None,
);

pub const NODE_CPU_UTILIZATION: Family = gauge(
    "kube_prober_node_cpu_utilization_ratio",
    "Busy fraction of the node's CPUs (0-1): the latest sample (window=\"instant\", operator=\"latest\") and the mean (avg) and population standard deviation (std) over the trailing window.",
    Some("ratio"),
);
pub const NODE_MEMORY_UTILIZATION: Family = gauge(
    "kube_prober_node_memory_utilization_ratio",
    "Used fraction of the node's memory, 1 - MemAvailable/MemTotal (0-1): latest, and avg/std over the trailing window.",
    Some("ratio"),
);
pub const NODE_NETWORK_RECEIVE: Family = gauge(
    "kube_prober_node_network_receive_bytes_per_second",
    "Bytes per second received on all interfaces but loopback: latest, and avg/std over the trailing window.",
    Some("bytes_per_second"),
);
pub const NODE_NETWORK_TRANSMIT: Family = gauge(
    "kube_prober_node_network_transmit_bytes_per_second",
    "Bytes per second transmitted on all interfaces but loopback: latest, and avg/std over the trailing window.",
    Some("bytes_per_second"),
);
pub const NODE_DISK_IO_UTILIZATION: Family = gauge(
    "kube_prober_node_disk_io_utilization_ratio",
    "Fraction of time the node's busiest whole disk was doing I/O (0-1): latest, and avg/std over the trailing window.",
    Some("ratio"),
);
pub const NODE_BACKEND_VALUE: Family = gauge(
    "kube_prober_node_backend_value",
    "Values a usage backend aggregated over a window that have no family of their own (network drops per second, energy), in the backend's own unit; metric is the backend's series name, type its load-watcher type.",
    None,
);
pub const NODE_USAGE_SAMPLES: Family = gauge(
    "kube_prober_node_usage_samples",
    "Number of usage samples in each trailing window, per node and resource.",
    None,
);
pub const NODE_USAGE_TIMESTAMP: Family = gauge(
    "kube_prober_node_usage_timestamp_seconds",
    "Unix time of the newest usage sample of the node.",
    Some("seconds"),
);
pub const NODE_CPU_CAPACITY: Family = gauge(
    "kube_prober_node_cpu_capacity_cores",
    "CPU cores the node has.",
    Some("cores"),
);
pub const NODE_MEMORY_CAPACITY: Family = gauge(
    "kube_prober_node_memory_capacity_bytes",
    "Memory the node has, in bytes.",
    Some("bytes"),
);

pub const PROBE_SUCCESS: Family = gauge(
    "kube_prober_probe_success",
    "1 if the newest run of the probe against the target succeeded, else 0.",
    None,
);
pub const PROBE_DURATION: Family = gauge(
    "kube_prober_probe_duration_seconds",
    "How long the newest run of the probe took.",
    Some("seconds"),
);
pub const PROBE_RUNS: Family = counter(
    "kube_prober_probe_runs",
    "Probe runs, by probe and target.",
    None,
);
pub const PROBE_FAILURES: Family = counter(
    "kube_prober_probe_failures",
    "Failed probe runs, by probe and target.",
    None,
);

pub const SOURCE_UP: Family = gauge(
    "kube_prober_source_up",
    "1 if the newest run of the source (fetcher, watcher or probe loop) succeeded, else 0.",
    None,
);
pub const SOURCE_RUNS: Family = counter(
    "kube_prober_source_runs",
    "Runs of each source, successful or not.",
    None,
);
pub const SOURCE_ERRORS: Family = counter(
    "kube_prober_source_errors",
    "Failed runs of each source, by reason.",
    None,
);
pub const SOURCE_NO_DATA: Family = counter(
    "kube_prober_source_no_data",
    "Runs of each source that succeeded but had nothing to report.",
    None,
);
pub const SOURCE_DROPPED_VALUES: Family = counter(
    "kube_prober_source_dropped_values",
    "Values a source reported that were rejected (non_finite, negative), by reason.",
    None,
);
pub const SOURCE_LAST_RUN_DURATION: Family = gauge(
    "kube_prober_source_last_run_duration_seconds",
    "How long the newest run of each source took.",
    Some("seconds"),
);
pub const SOURCE_LAST_SUCCESS: Family = gauge(
    "kube_prober_source_last_success_timestamp_seconds",
    "Unix time of the newest successful run of each source (absent before the first).",
    Some("seconds"),
);

pub const TICKS: Family = counter(
    "kube_prober_ticks",
    "Snapshots made by the tick loop.",
    None,
);
pub const TICK_DURATION: Family = gauge(
    "kube_prober_tick_duration_seconds",
    "How long the previous tick took to make and render its snapshot.",
    Some("seconds"),
);
pub const SNAPSHOT_AGE: Family = gauge(
    "kube_prober_snapshot_age_seconds",
    "Seconds since the snapshot this scrape was rendered from was made.",
    Some("seconds"),
);

/// Every family, in exposition order.
pub const ALL: &[Family] = &[
    BUILD_INFO,
    CLUSTER_INFO,
    NODE_CPU_UTILIZATION,
    NODE_MEMORY_UTILIZATION,
    NODE_NETWORK_RECEIVE,
    NODE_NETWORK_TRANSMIT,
    NODE_DISK_IO_UTILIZATION,
    NODE_BACKEND_VALUE,
    NODE_USAGE_SAMPLES,
    NODE_USAGE_TIMESTAMP,
    NODE_CPU_CAPACITY,
    NODE_MEMORY_CAPACITY,
    PROBE_SUCCESS,
    PROBE_DURATION,
    PROBE_RUNS,
    PROBE_FAILURES,
    SOURCE_UP,
    SOURCE_RUNS,
    SOURCE_ERRORS,
    SOURCE_NO_DATA,
    SOURCE_DROPPED_VALUES,
    SOURCE_LAST_RUN_DURATION,
    SOURCE_LAST_SUCCESS,
    TICKS,
    TICK_DURATION,
    SNAPSHOT_AGE,
];

/// The family that carries a node resource.
pub fn node_resource_family(r: crate::model::Resource) -> &'static Family {
    use crate::model::Resource;
    match r {
        Resource::Cpu => &NODE_CPU_UTILIZATION,
        Resource::Memory => &NODE_MEMORY_UTILIZATION,
        Resource::NetworkReceive => &NODE_NETWORK_RECEIVE,
        Resource::NetworkTransmit => &NODE_NETWORK_TRANSMIT,
        Resource::DiskIo => &NODE_DISK_IO_UTILIZATION,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
