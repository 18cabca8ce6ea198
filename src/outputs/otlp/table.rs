//! The OTLP name of every family: one table, listed in docs/metrics.md ("## OTLP names").

use crate::outputs::names::{self, Family};

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
}

/// One OTLP metric: the family it comes from, its OTel name, UCUM unit and kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OtelMetric {
    pub family: &'static str,
    pub name: &'static str,
    pub unit: &'static str,
    pub kind: OtelKind,
    pub derivation: Derivation,
}

const fn m(family: &Family, name: &'static str, unit: &'static str, kind: OtelKind) -> OtelMetric {
    OtelMetric {
        family: family.name,
        name,
        unit,
        kind,
        derivation: Derivation::Rows,
    }
}

use OtelKind::{Counter as C, Gauge as G, Histogram as H, UpDownCounter as U};

/// Every OTLP metric, in the order of `names::ALL` (derived metrics after their family).
/// Semantic-convention names where one exists and means the same; `kube_prober.*` otherwise.
/// docs/metrics.md ("## OTLP names") lists this table; tests/standins/otlp.rs checks they agree.
pub const OTLP_METRICS: &[OtelMetric] = &[
    m(&names::BUILD_INFO, "kube_prober.build.info", "", G),
    m(&names::CLUSTER_INFO, "kube_prober.cluster.info", "", G),
    m(
        &names::NODE_CPU_UTILIZATION,
        "kube_prober.node.cpu.utilization",
        "1",
        G,
    ),
    OtelMetric {
        family: names::NODE_CPU_UTILIZATION.name,
        name: "k8s.node.cpu.usage",
        unit: "{cpu}",
        kind: G,
        derivation: Derivation::LatestTimesCapacity {
            capacity: names::NODE_CPU_CAPACITY.name,
        },
    },
    m(
        &names::NODE_MEMORY_UTILIZATION,
        "kube_prober.node.memory.utilization",
        "1",
        G,
    ),
    OtelMetric {
        family: names::NODE_MEMORY_UTILIZATION.name,
        name: "k8s.node.memory.working_set",
        unit: "By",
        kind: U,
        derivation: Derivation::LatestTimesCapacity {
            capacity: names::NODE_MEMORY_CAPACITY.name,
        },
    },
    m(
        &names::NODE_NETWORK_RECEIVE,
        "kube_prober.node.network.receive.rate",
        "By/s",
        G,
    ),
    m(
        &names::NODE_NETWORK_TRANSMIT,
        "kube_prober.node.network.transmit.rate",
        "By/s",
        G,
    ),
    m(
        &names::NODE_DISK_IO_UTILIZATION,
        "kube_prober.node.disk.io.utilization",
        "1",
        G,
    ),
    m(
        &names::NODE_BACKEND_VALUE,
        "kube_prober.node.backend.value",
        "",
        G,
    ),
    m(
        &names::NODE_USAGE_SAMPLES,
        "kube_prober.node.usage.samples",
        "{sample}",
        G,
    ),
    m(
        &names::NODE_USAGE_TIMESTAMP,
        "kube_prober.node.usage.timestamp",
        "s",
        G,
    ),
    m(
        &names::NODE_USAGE_QUANTILE,
        "kube_prober.node.usage.quantile",
        "1",
        G,
    ),
    m(
        &names::NODE_BOUND_PODS,
        "kube_prober.node.bound_pods",
        "{pod}",
        G,
    ),
    m(
        &names::NODE_BOUND_PODS_CPU,
        "kube_prober.node.bound_pods.cpu",
        "{cpu}",
        G,
    ),
    m(
        &names::NODE_BOUND_PODS_MEMORY,
        "kube_prober.node.bound_pods.memory",
        "By",
        G,
    ),
    m(&names::NODE_USAGE_AGE, "kube_prober.node.usage.age", "s", G),
    m(
        &names::WATCHER_STALE_HOSTS,
        "kube_prober.watcher.stale_hosts",
        "{node}",
        G,
    ),
    m(
        &names::NODE_CPU_CAPACITY,
        "kube_prober.node.cpu.capacity",
        "{cpu}",
        G,
    ),
    m(
        &names::NODE_MEMORY_CAPACITY,
        "kube_prober.node.memory.capacity",
        "By",
        G,
    ),
    m(
        &names::NODE_ALLOCATABLE_CPU,
        "k8s.node.cpu.allocatable",
        "{cpu}",
        U,
    ),
    m(
        &names::NODE_ALLOCATABLE_MEMORY,
        "k8s.node.memory.allocatable",
        "By",
        U,
    ),
    m(
        &names::CLUSTER_NODES,
        "kube_prober.cluster.nodes",
        "{node}",
        G,
    ),
    m(
        &names::CLUSTER_NODE_CONDITIONS,
        "kube_prober.cluster.node.conditions",
        "{node}",
        G,
    ),
    OtelMetric {
        family: names::NODE_CONDITION.name,
        name: "k8s.node.condition.status",
        unit: "{node}",
        kind: U,
        derivation: Derivation::AllConditionStatuses,
    },
    m(&names::NODE_AVAILABLE, "kube_prober.node.available", "", G),
    m(
        &names::NODE_ADDONS_AVAILABLE,
        "kube_prober.node.addons.available",
        "",
        G,
    ),
    m(
        &names::ADDON_EXPECTED_PODS,
        "kube_prober.addon.expected_pods",
        "{pod}",
        G,
    ),
    m(&names::ADDON_PODS, "kube_prober.addon.pods", "{pod}", G),
    m(
        &names::ADDON_READY_PODS,
        "kube_prober.addon.ready_pods",
        "{pod}",
        G,
    ),
    m(
        &names::ADDON_AVAILABLE,
        "kube_prober.addon.available",
        "",
        G,
    ),
    m(
        &names::NODE_POD_REQUESTS_CPU,
        "kube_prober.node.pod.requests.cpu",
        "{cpu}",
        G,
    ),
    m(
        &names::NODE_POD_REQUESTS_MEMORY,
        "kube_prober.node.pod.requests.memory",
        "By",
        G,
    ),
    m(
        &names::NODE_POD_LIMITS_CPU,
        "kube_prober.node.pod.limits.cpu",
        "{cpu}",
        G,
    ),
    m(
        &names::NODE_POD_LIMITS_MEMORY,
        "kube_prober.node.pod.limits.memory",
        "By",
        G,
    ),
    m(&names::NODE_PODS, "kube_prober.node.pods", "{pod}", G),
    m(
        &names::CONTAINER_RESTARTS,
        "k8s.container.restart.count",
        "{restart}",
        U,
    ),
    m(
        &names::CONTAINER_LAST_TERMINATION,
        "kube_prober.container.last_termination",
        "",
        G,
    ),
    m(
        &names::CLUSTER_SKIPPED_OBJECTS,
        "kube_prober.cluster.skipped_objects",
        "{object}",
        G,
    ),
    m(&names::TASK_UP, "kube_prober.task.up", "", G),
    m(
        &names::TASK_CONTAINERS,
        "kube_prober.task.containers",
        "{container}",
        G,
    ),
    m(
        &names::TASK_RESOURCE_REQUESTS,
        "kube_prober.task.resource.requests",
        "",
        G,
    ),
    m(
        &names::TASK_RESOURCE_LIMITS,
        "kube_prober.task.resource.limits",
        "",
        G,
    ),
    m(&names::TASK_CPU_USAGE, "k8s.pod.cpu.time", "s", C),
    m(
        &names::TASK_CPU_PERIODS,
        "kube_prober.task.cpu.periods",
        "{period}",
        C,
    ),
    m(
        &names::TASK_CPU_THROTTLED_PERIODS,
        "kube_prober.task.cpu.throttled_periods",
        "{period}",
        C,
    ),
    m(
        &names::TASK_CPU_THROTTLED,
        "kube_prober.task.cpu.throttled",
        "s",
        C,
    ),
    m(&names::TASK_MEMORY_USAGE, "k8s.pod.memory.usage", "By", U),
    m(
        &names::TASK_MEMORY_WORKING_SET,
        "k8s.pod.memory.working_set",
        "By",
        U,
    ),
    m(&names::TASK_MEMORY_RSS, "k8s.pod.memory.rss", "By", U),
    m(
        &names::TASK_MEMORY_CACHE,
        "kube_prober.task.memory.cache",
        "By",
        G,
    ),
    m(
        &names::TASK_MEMORY_LIMIT,
        "kube_prober.task.memory.limit",
        "By",
        G,
    ),
    m(
        &names::TASK_PAGE_FAULTS,
        "kube_prober.task.memory.page_faults",
        "{fault}",
        C,
    ),
    m(
        &names::TASK_MAJOR_PAGE_FAULTS,
        "kube_prober.task.memory.major_page_faults",
        "{fault}",
        C,
    ),
    m(
        &names::TASK_OOM_KILLS,
        "kube_prober.task.memory.oom_kills",
        "{kill}",
        C,
    ),
    m(
        &names::TASK_PRESSURE,
        "kube_prober.task.pressure.stalled",
        "s",
        C,
    ),
    m(
        &names::TASK_MEMORY_NUMA,
        "kube_prober.task.memory.numa",
        "By",
        G,
    ),
    m(
        &names::TASK_CPUSET_CPUS,
        "kube_prober.task.cpuset.cpus",
        "{cpu}",
        G,
    ),
    m(
        &names::TASK_CPUSET_MEMORY_NODES,
        "kube_prober.task.cpuset.memory_nodes",
        "{node}",
        G,
    ),
    m(&names::CONTAINER_CPU_USAGE, "container.cpu.time", "s", C),
    m(
        &names::CONTAINER_CPU_PERIODS,
        "kube_prober.container.cpu.periods",
        "{period}",
        C,
    ),
    m(
        &names::CONTAINER_CPU_THROTTLED_PERIODS,
        "kube_prober.container.cpu.throttled_periods",
        "{period}",
        C,
    ),
    m(
        &names::CONTAINER_CPU_THROTTLED,
        "kube_prober.container.cpu.throttled",
        "s",
        C,
    ),
    m(
        &names::CONTAINER_MEMORY_USAGE,
        "kube_prober.container.memory.usage",
        "By",
        G,
    ),
    m(
        &names::CONTAINER_MEMORY_WORKING_SET,
        "kube_prober.container.memory.working_set",
        "By",
        G,
    ),
    m(
        &names::CONTAINER_MEMORY_RSS,
        "kube_prober.container.memory.rss",
        "By",
        G,
    ),
    m(
        &names::CONTAINER_MEMORY_CACHE,
        "kube_prober.container.memory.cache",
        "By",
        G,
    ),
    m(
        &names::CONTAINER_MEMORY_LIMIT,
        "kube_prober.container.memory.limit",
        "By",
        G,
    ),
    m(
        &names::CONTAINER_PAGE_FAULTS,
        "kube_prober.container.memory.page_faults",
        "{fault}",
        C,
    ),
    m(
        &names::CONTAINER_MAJOR_PAGE_FAULTS,
        "kube_prober.container.memory.major_page_faults",
        "{fault}",
        C,
    ),
    m(
        &names::CONTAINER_OOM_KILLS,
        "kube_prober.container.memory.oom_kills",
        "{kill}",
        C,
    ),
    m(
        &names::CONTAINER_PRESSURE,
        "kube_prober.container.pressure.stalled",
        "s",
        C,
    ),
    m(
        &names::CONTAINER_MEMORY_NUMA,
        "kube_prober.container.memory.numa",
        "By",
        G,
    ),
    m(
        &names::CONTAINER_CPUSET_CPUS,
        "kube_prober.container.cpuset.cpus",
        "{cpu}",
        G,
    ),
    m(
        &names::CONTAINER_CPUSET_MEMORY_NODES,
        "kube_prober.container.cpuset.memory_nodes",
        "{node}",
        G,
    ),
    m(
        &names::TASK_PERF_CYCLES,
        "kube_prober.task.perf.cycles",
        "{cycle}",
        C,
    ),
    m(
        &names::TASK_PERF_INSTRUCTIONS,
        "kube_prober.task.perf.instructions",
        "{instruction}",
        C,
    ),
    m(
        &names::TASK_PERF_CACHE_REFERENCES,
        "kube_prober.task.perf.cache.references",
        "{reference}",
        C,
    ),
    m(
        &names::TASK_PERF_CACHE_MISSES,
        "kube_prober.task.perf.cache.misses",
        "{miss}",
        C,
    ),
    m(
        &names::TASK_PERF_TASK_CLOCK,
        "kube_prober.task.perf.task_clock",
        "s",
        C,
    ),
    m(
        &names::TASK_PERF_CONTEXT_SWITCHES,
        "kube_prober.task.perf.context_switches",
        "{switch}",
        C,
    ),
    m(
        &names::TASK_PERF_PAGE_FAULTS,
        "kube_prober.task.perf.page_faults",
        "{fault}",
        C,
    ),
    m(
        &names::TASK_PERF_IPC,
        "kube_prober.task.perf.instructions_per_cycle",
        "1",
        G,
    ),
    m(
        &names::TASK_PERF_CACHE_MPKI,
        "kube_prober.task.perf.cache.misses_per_kilo_instructions",
        "1",
        G,
    ),
    m(
        &names::TASK_PERF_SCALING,
        "kube_prober.task.perf.scaling_factor",
        "1",
        G,
    ),
    m(
        &names::TASK_PERF_EVENT_SET,
        "kube_prober.task.perf.event_set",
        "",
        G,
    ),
    m(
        &names::TASK_PERF_OPEN_FAILURES,
        "kube_prober.task.perf.open_failures",
        "{failure}",
        C,
    ),
    m(
        &names::TASK_PERF_OPEN_COUNTERS,
        "kube_prober.task.perf.open_counters",
        "{descriptor}",
        G,
    ),
    m(
        &names::PLATFORM_SOCKETS,
        "kube_prober.platform.topology.sockets",
        "{socket}",
        G,
    ),
    m(
        &names::PLATFORM_CORES,
        "kube_prober.platform.topology.cores",
        "{core}",
        G,
    ),
    m(
        &names::PLATFORM_CPUS,
        "kube_prober.platform.topology.cpus",
        "{cpu}",
        G,
    ),
    m(
        &names::PLATFORM_NUMA_NODES,
        "kube_prober.platform.topology.numa_nodes",
        "{node}",
        G,
    ),
    m(
        &names::PLATFORM_CPU_BUSY,
        "kube_prober.platform.cpu.busy",
        "s",
        C,
    ),
    m(
        &names::PLATFORM_MEMORY_USAGE,
        "kube_prober.platform.memory.usage",
        "By",
        G,
    ),
    m(
        &names::PLATFORM_NUMA_TOTAL,
        "kube_prober.platform.memory.numa_capacity",
        "By",
        G,
    ),
    m(
        &names::PLATFORM_NUMA_FREE,
        "kube_prober.platform.memory.numa_free",
        "By",
        G,
    ),
    m(
        &names::PLATFORM_NUMA_USED,
        "kube_prober.platform.memory.numa_used",
        "By",
        G,
    ),
    m(
        &names::PLATFORM_VMSTAT,
        "kube_prober.platform.vmstat",
        "{event}",
        C,
    ),
    m(&names::PROBE_SUCCESS, "kube_prober.probe.success", "", G),
    m(&names::PROBE_DURATION, "kube_prober.probe.duration", "s", H),
    m(&names::PROBE_RUNS, "kube_prober.probe.runs", "{run}", C),
    m(
        &names::PROBE_FAILURES,
        "kube_prober.probe.failures",
        "{failure}",
        C,
    ),
    m(&names::SOURCE_UP, "kube_prober.source.up", "", G),
    m(&names::SOURCE_RUNS, "kube_prober.source.runs", "{run}", C),
    m(
        &names::SOURCE_ERRORS,
        "kube_prober.source.errors",
        "{error}",
        C,
    ),
    m(
        &names::SOURCE_NO_DATA,
        "kube_prober.source.no_data",
        "{run}",
        C,
    ),
    m(
        &names::SOURCE_DROPPED_VALUES,
        "kube_prober.source.dropped_values",
        "{value}",
        C,
    ),
    m(
        &names::SOURCE_EXPIRED_NODES,
        "kube_prober.source.expired_nodes",
        "{node}",
        C,
    ),
    m(
        &names::USAGE_UNMATCHED,
        "kube_prober.usage.unmatched",
        "1",
        G,
    ),
    m(
        &names::SOURCE_LAST_RUN_DURATION,
        "kube_prober.source.last_run.duration",
        "s",
        G,
    ),
    m(
        &names::SOURCE_LAST_SUCCESS,
        "kube_prober.source.last_success.timestamp",
        "s",
        G,
    ),
    m(
        &names::WATCH_RESTARTS,
        "kube_prober.watch.restarts",
        "{restart}",
        C,
    ),
    m(
        &names::WATCH_RELISTS,
        "kube_prober.watch.relists",
        "{list}",
        C,
    ),
    m(&names::SINK_PUSHES, "kube_prober.sink.pushes", "{push}", C),
    m(
        &names::SINK_FAILURES,
        "kube_prober.sink.failures",
        "{failure}",
        C,
    ),
    m(
        &names::SINK_SKIPPED_TICKS,
        "kube_prober.sink.skipped_ticks",
        "{tick}",
        C,
    ),
    m(&names::SINK_POINTS, "kube_prober.sink.points", "{point}", C),
    m(
        &names::SINK_REQUESTS,
        "kube_prober.sink.requests",
        "{request}",
        C,
    ),
    m(
        &names::SINK_LAST_SUCCESS,
        "kube_prober.sink.last_success.timestamp",
        "s",
        G,
    ),
    m(
        &names::SINK_PUSH_DURATION,
        "kube_prober.sink.push.duration",
        "s",
        G,
    ),
    m(&names::LEADER, "kube_prober.leader", "", G),
    m(
        &names::LEADER_ACQUIRED,
        "kube_prober.leader.acquired",
        "{acquisition}",
        C,
    ),
    m(&names::SHARD_INFO, "kube_prober.shard.info", "", G),
    m(&names::TICKS, "kube_prober.ticks", "{tick}", C),
    m(&names::TICK_DURATION, "kube_prober.tick.duration", "s", G),
    m(&names::SNAPSHOT_AGE, "kube_prober.snapshot.age", "s", G),
];

/// Our label key as an OTel attribute key: the Kubernetes object names get their semconv keys,
/// every other label keeps its key.
pub fn attribute_key(label: &'static str) -> &'static str {
    match label {
        "node" => "k8s.node.name",
        "namespace" => "k8s.namespace.name",
        "pod" => "k8s.pod.name",
        "container" => "k8s.container.name",
        "task_id" => "k8s.pod.uid",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outputs::series;

    #[test]
    fn every_family_has_an_otlp_name_and_names_are_valid() {
        for f in names::ALL {
            assert!(
                OTLP_METRICS.iter().any(|m| m.family == f.name),
                "{} has no OTLP name",
                f.name
            );
        }
        let mut seen = std::collections::HashSet::new();
        for m in OTLP_METRICS {
            assert!(seen.insert(m.name), "duplicate {}", m.name);
            assert!(
                names::ALL.iter().any(|f| f.name == m.family),
                "{}",
                m.family
            );
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
            let fam = names::ALL.iter().find(|f| f.name == m.family);
            if m.kind == OtelKind::Histogram {
                assert_eq!(fam.map(|f| f.kind), Some(names::Kind::Histogram));
                // The sync histogram cannot hide series, so it must be instance-level.
                assert!(fam.is_some_and(series::is_instance_level));
            }
        }
    }
}
