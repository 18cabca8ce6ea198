//! Every metric family this program exposes: name, help, type and unit, in one place.
//! docs/metrics.md lists each of them; `tests/repo/docs.rs` fails when the two drift apart.

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
}

const fn gauge(name: &'static str, help: &'static str, unit: Option<&'static str>) -> Family {
    Family {
        name,
        help,
        kind: Kind::Gauge,
        unit,
        scope: Scope::Cluster,
    }
}

const fn counter(name: &'static str, help: &'static str, unit: Option<&'static str>) -> Family {
    Family {
        name,
        help,
        kind: Kind::Counter,
        unit,
        scope: Scope::Cluster,
    }
}

pub const BUILD_INFO: Family = gauge(
    "kube_prober_build_info",
    "Always 1; labels give the kube-prober version.",
    None,
)
.in_scope(Scope::Instance);
pub const CLUSTER_INFO: Family = gauge(
    "kube_prober_cluster_info",
    "Always 1; labels give the cluster name, the role this instance runs, and on GCE the project and location.",
    None,
)
.in_scope(Scope::ClusterIdentity);

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
pub const NODE_USAGE_QUANTILE: Family = gauge(
    "kube_prober_node_usage_quantile_ratio",
    "CPU and memory percentiles (50, 90, 95, 99) over each trailing window, and the largest sample of the last hour (window=\"1h\", percentile=\"100\"), reported when samples cover at least half of the window. Off unless --metric-allowlist names it: 26 series a node.",
    Some("ratio"),
);
pub const NODE_BOUND_PODS: Family = gauge(
    "kube_prober_node_bound_pods",
    "Pods bound to the node whose use its newest usage sample cannot show yet (bound since, or still ramping up).",
    None,
);
pub const NODE_BOUND_PODS_CPU: Family = gauge(
    "kube_prober_node_bound_pods_cpu_cores",
    "Estimated CPU use of the node's bound pods that its newest usage sample cannot show yet.",
    Some("cores"),
);
pub const NODE_BOUND_PODS_MEMORY: Family = gauge(
    "kube_prober_node_bound_pods_memory_bytes",
    "Estimated memory use of the node's bound pods that its newest usage sample cannot show yet.",
    Some("bytes"),
);
pub const NODE_USAGE_AGE: Family = gauge(
    "kube_prober_node_usage_age_seconds",
    "Age of the nodes' newest usage samples at the tick: percentiles 50, 90 and 99 and the oldest (percentile=\"100\") over the nodes with usage.",
    Some("seconds"),
)
.in_scope(Scope::Instance);
pub const WATCHER_STALE_HOSTS: Family = gauge(
    "kube_prober_watcher_stale_hosts",
    "Nodes with usage whose newest sample is older than --watcher-max-age: left out of /watcher.",
    None,
)
.in_scope(Scope::Instance);
pub const USAGE_UNMATCHED: Family = gauge(
    "kube_prober_usage_unmatched",
    "The usage backend's self-check at its latest fetch: the cluster's nodes without usage (what=\"nodes_without_usage\") and the series whose node label names no node (what=\"series_without_node\").",
    None,
);
/// The bounds of [`NODE_USAGE_AGE`], seconds.
pub const USAGE_AGE_BUCKETS: [f64; 9] =
    [15.0, 30.0, 60.0, 120.0, 180.0, 300.0, 600.0, 1800.0, 3600.0];
/// Families emitted only when `--metric-allowlist` names them (their series grow with the
/// nodes many times over).
pub const OPT_IN: &[Family] = &[NODE_USAGE_QUANTILE];
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

pub const CLUSTER_NODES: Family = gauge(
    "kube_prober_cluster_nodes",
    "Nodes per pool, zone and availability flags (ready, schedulable, done_warming, available = all three); gke-prober's cluster/node_available.",
    None,
);
pub const CLUSTER_NODE_CONDITIONS: Family = gauge(
    "kube_prober_cluster_node_conditions",
    "Nodes per pool, zone, condition type and status; gke-prober's cluster/node_condition.",
    None,
);
pub const NODE_CONDITION: Family = gauge(
    "kube_prober_node_condition",
    "1 per node and condition type, with the condition's status as a label; gke-prober's node/condition.",
    None,
);
pub const NODE_AVAILABLE: Family = gauge(
    "kube_prober_node_available",
    "1 if the node is ready, schedulable (no spec.unschedulable, no unschedulable taint) and done warming, else 0; the three flags are labels.",
    None,
);
pub const NODE_ADDONS_AVAILABLE: Family = gauge(
    "kube_prober_node_addons_available",
    "1 if the node is available and every addon pod on it is ready, else 0; gke-prober's addon/control_plane_available.",
    None,
);
pub const ADDON_EXPECTED_PODS: Family = gauge(
    "kube_prober_addon_expected_pods",
    "Pods an addon's controller wants: DaemonSet status.desiredNumberScheduled, Deployment spec.replicas; gke-prober's cluster/addons_expected.",
    None,
);
pub const ADDON_PODS: Family = gauge(
    "kube_prober_addon_pods",
    "Pods of an addon on a node (every pod counts); gke-prober's addon/available.",
    None,
);
pub const ADDON_READY_PODS: Family = gauge(
    "kube_prober_addon_ready_pods",
    "Pods of an addon on a node whose Ready condition is True.",
    None,
);
pub const ADDON_AVAILABLE: Family = gauge(
    "kube_prober_addon_available",
    "1 if every pod of the addon on the node is ready, else 0.",
    None,
);
pub const NODE_POD_REQUESTS_CPU: Family = gauge(
    "kube_prober_node_pod_requests_cpu_cores",
    "CPU requested by the pods holding resources on the node (max of containers' sum and the largest init container, plus overhead).",
    Some("cores"),
);
pub const NODE_POD_REQUESTS_MEMORY: Family = gauge(
    "kube_prober_node_pod_requests_memory_bytes",
    "Memory requested by the pods holding resources on the node.",
    Some("bytes"),
);
pub const NODE_POD_LIMITS_CPU: Family = gauge(
    "kube_prober_node_pod_limits_cpu_cores",
    "CPU limits of the pods holding resources on the node.",
    Some("cores"),
);
pub const NODE_POD_LIMITS_MEMORY: Family = gauge(
    "kube_prober_node_pod_limits_memory_bytes",
    "Memory limits of the pods holding resources on the node.",
    Some("bytes"),
);
pub const NODE_PODS: Family = gauge(
    "kube_prober_node_pods",
    "Pods holding resources on the node (not Succeeded or Failed).",
    None,
);
pub const NODE_ALLOCATABLE_CPU: Family = gauge(
    "kube_prober_node_allocatable_cpu_cores",
    "CPU cores the node offers to pods (status.allocatable).",
    Some("cores"),
);
pub const NODE_ALLOCATABLE_MEMORY: Family = gauge(
    "kube_prober_node_allocatable_memory_bytes",
    "Memory the node offers to pods (status.allocatable).",
    Some("bytes"),
);
pub const CONTAINER_RESTARTS: Family = counter(
    "kube_prober_container_restarts",
    "Restarts of each container of addon pods (the kubelet's restartCount); gke-prober's addon/restart.",
    None,
);
pub const CONTAINER_LAST_TERMINATION: Family = gauge(
    "kube_prober_container_last_termination",
    "1 per container of addon pods that has ended before, with its node and the reason and exit code of its last termination.",
    None,
);
pub const CLUSTER_SKIPPED_OBJECTS: Family = gauge(
    "kube_prober_cluster_skipped_objects",
    "Kubernetes objects left out of the cluster metrics at the last tick because they could not be used, by reason (each is logged).",
    None,
);

// Node role: per-pod task metrics (Intel WCA's task_*) and platform facts (platform_*).

pub const TASK_UP: Family = gauge(
    "kube_prober_task_up",
    "1 per pod on this node (a task, WCA's term) whose pod cgroup was found and read, 0 while it has none (e.g. not started yet); ready tells pods whose containers are all ready apart.",
    None,
);
pub const TASK_CONTAINERS: Family = gauge(
    "kube_prober_task_containers",
    "Container cgroups found in the pod cgroup (WCA's task_subcontainers).",
    None,
);
pub const TASK_RESOURCE_REQUESTS: Family = gauge(
    "kube_prober_task_resource_requests",
    "The pod's effective request per resource by Kubernetes' rule (containers and sidecars summed, the larger of that and each init container with the sidecars before it, pod-level resources where set, plus overhead); unit core, byte or integer.",
    None,
);
pub const TASK_RESOURCE_LIMITS: Family = gauge(
    "kube_prober_task_resource_limits",
    "The pod's effective limit per resource, counted as Kubernetes' PodLimits does (overhead added only where a limit exists).",
    None,
);
pub const TASK_CPU_USAGE: Family = counter(
    "kube_prober_task_cpu_usage_seconds",
    "CPU time used, of the pod cgroup (pause container and overhead included).",
    Some("seconds"),
);
pub const TASK_CPU_PERIODS: Family = counter(
    "kube_prober_task_cpu_periods",
    "CFS bandwidth periods (cpu.cfs_period_us, usually 100 ms) that elapsed while the cgroup had a CPU quota of its own and used CPU (the kernel's nr_periods: 0 without a CPU limit on this cgroup), of the pod cgroup (pause container and overhead included).",
    None,
);
pub const TASK_CPU_THROTTLED_PERIODS: Family = counter(
    "kube_prober_task_cpu_throttled_periods",
    "CFS periods in which the cgroup was throttled, of the pod cgroup (pause container and overhead included).",
    None,
);
pub const TASK_CPU_THROTTLED: Family = counter(
    "kube_prober_task_cpu_throttled_seconds",
    "Time the cgroup was throttled by its CFS quota, of the pod cgroup (pause container and overhead included).",
    Some("seconds"),
);
pub const TASK_MEMORY_USAGE: Family = gauge(
    "kube_prober_task_memory_usage_bytes",
    "Memory charged to the cgroup (v1 memory.usage_in_bytes, v2 memory.current), of the pod cgroup (pause container and overhead included).",
    Some("bytes"),
);
pub const TASK_MEMORY_WORKING_SET: Family = gauge(
    "kube_prober_task_memory_working_set_bytes",
    "Memory usage minus inactive file pages, floored at 0, as the kubelet computes the working set, of the pod cgroup (pause container and overhead included).",
    Some("bytes"),
);
pub const TASK_MEMORY_RSS: Family = gauge(
    "kube_prober_task_memory_rss_bytes",
    "Anonymous memory (v1 total_rss, v2 anon), of the pod cgroup (pause container and overhead included).",
    Some("bytes"),
);
pub const TASK_MEMORY_CACHE: Family = gauge(
    "kube_prober_task_memory_cache_bytes",
    "Page cache (v1 total_cache, v2 file), of the pod cgroup (pause container and overhead included).",
    Some("bytes"),
);
pub const TASK_MEMORY_LIMIT: Family = gauge(
    "kube_prober_task_memory_limit_bytes",
    "Memory limit of the cgroup; absent when it has none, of the pod cgroup (pause container and overhead included).",
    Some("bytes"),
);
pub const TASK_PAGE_FAULTS: Family = counter(
    "kube_prober_task_memory_page_faults",
    "Page faults (pgfault, minor and major), of the pod cgroup (pause container and overhead included).",
    None,
);
pub const TASK_MAJOR_PAGE_FAULTS: Family = counter(
    "kube_prober_task_memory_major_page_faults",
    "Major page faults (pgmajfault), of the pod cgroup (pause container and overhead included).",
    None,
);
pub const TASK_OOM_KILLS: Family = counter(
    "kube_prober_task_memory_oom_kills",
    "Processes the OOM killer killed in the cgroup, of the pod cgroup (pause container and overhead included).",
    None,
);
pub const TASK_PRESSURE: Family = counter(
    "kube_prober_task_pressure_stalled_seconds",
    "Pressure stall time (cgroup v2 cpu, memory and io .pressure total, some or full), of the pod cgroup (pause container and overhead included).",
    Some("seconds"),
);
pub const TASK_MEMORY_NUMA: Family = gauge(
    "kube_prober_task_memory_numa_bytes",
    "Memory of the cgroup on each NUMA node (memory.numa_stat: v1 hierarchical_total pages times the page size, v2 anon+file+unevictable), of the pod cgroup (pause container and overhead included).",
    Some("bytes"),
);
pub const TASK_CPUSET_CPUS: Family = gauge(
    "kube_prober_task_cpuset_cpus",
    "CPUs in the effective cpuset (v1 cpuset.effective_cpus, v2 cpuset.cpus.effective; read when the cgroup is found and then once every --task-detail-every collections), of the pod cgroup (pause container and overhead included).",
    None,
);
pub const TASK_CPUSET_MEMORY_NODES: Family = gauge(
    "kube_prober_task_cpuset_memory_nodes",
    "Memory nodes in the effective cpuset (v1 cpuset.effective_mems, v2 cpuset.mems.effective; read when the cgroup is found and then once every --task-detail-every collections), of the pod cgroup (pause container and overhead included).",
    None,
);
// `--task-perf-events`: perf_event_open in cgroup mode on the pod cgroup, per CPU, scaled by
// time enabled / time running and summed over CPUs.
pub const TASK_PERF_CYCLES: Family = counter(
    "kube_prober_task_perf_cycles",
    "CPU cycles (hardware event set), of the pod cgroup, scaled for multiplexing and summed over CPUs.",
    None,
);
pub const TASK_PERF_INSTRUCTIONS: Family = counter(
    "kube_prober_task_perf_instructions",
    "Instructions retired (hardware event set), of the pod cgroup, scaled for multiplexing and summed over CPUs.",
    None,
);
pub const TASK_PERF_CACHE_REFERENCES: Family = counter(
    "kube_prober_task_perf_cache_references",
    "Last-level cache references (hardware event set), of the pod cgroup, scaled for multiplexing and summed over CPUs.",
    None,
);
pub const TASK_PERF_CACHE_MISSES: Family = counter(
    "kube_prober_task_perf_cache_misses",
    "Last-level cache misses (hardware event set), of the pod cgroup, scaled for multiplexing and summed over CPUs.",
    None,
);
pub const TASK_PERF_TASK_CLOCK: Family = counter(
    "kube_prober_task_perf_task_clock_seconds",
    "CPU time counted by the task-clock software event (software event set), of the pod cgroup, summed over CPUs.",
    Some("seconds"),
);
pub const TASK_PERF_CONTEXT_SWITCHES: Family = counter(
    "kube_prober_task_perf_context_switches",
    "Context switches (software event set), of the pod cgroup, summed over CPUs.",
    None,
);
pub const TASK_PERF_PAGE_FAULTS: Family = counter(
    "kube_prober_task_perf_page_faults",
    "Page faults counted by the page-faults software event (software event set), of the pod cgroup, summed over CPUs.",
    None,
);
pub const TASK_PERF_IPC: Family = gauge(
    "kube_prober_task_perf_instructions_per_cycle",
    "Instructions per cycle over the last collection interval, from the pod's summed counts (absent when no cycle was counted).",
    None,
);
pub const TASK_PERF_CACHE_MPKI: Family = gauge(
    "kube_prober_task_perf_cache_misses_per_kilo_instructions",
    "Cache misses per 1000 instructions over the last collection interval, from the pod's summed counts (absent when no instruction was counted).",
    None,
);
pub const TASK_PERF_SCALING: Family = gauge(
    "kube_prober_task_perf_scaling_factor",
    "The largest time enabled / time running over the pod's per-CPU counter groups: 1 when never multiplexed; counts are scaled by it.",
    None,
);
pub const TASK_PERF_EVENT_SET: Family = gauge(
    "kube_prober_task_perf_event_set",
    "1 for the perf event set being counted (set: hardware, software, or none when neither could be opened), 0 for the others; only with --task-perf-events.",
    None,
);
pub const TASK_PERF_OPEN_FAILURES: Family = counter(
    "kube_prober_task_perf_open_failures",
    "Failed perf_event_open calls (start-up probe and per pod) by reason.",
    None,
);
pub const TASK_PERF_OPEN_COUNTERS: Family = gauge(
    "kube_prober_task_perf_open_counters",
    "Perf file descriptors open now: pods × online CPUs × events of the set.",
    None,
);
pub const CONTAINER_CPU_USAGE: Family = counter(
    "kube_prober_container_cpu_usage_seconds",
    "CPU time used, of the container's cgroup.",
    Some("seconds"),
);
pub const CONTAINER_CPU_PERIODS: Family = counter(
    "kube_prober_container_cpu_periods",
    "CFS bandwidth periods (cpu.cfs_period_us, usually 100 ms) that elapsed while the cgroup had a CPU quota of its own and used CPU (the kernel's nr_periods: 0 without a CPU limit on this cgroup), of the container's cgroup.",
    None,
);
pub const CONTAINER_CPU_THROTTLED_PERIODS: Family = counter(
    "kube_prober_container_cpu_throttled_periods",
    "CFS periods in which the cgroup was throttled, of the container's cgroup.",
    None,
);
pub const CONTAINER_CPU_THROTTLED: Family = counter(
    "kube_prober_container_cpu_throttled_seconds",
    "Time the cgroup was throttled by its CFS quota, of the container's cgroup.",
    Some("seconds"),
);
pub const CONTAINER_MEMORY_USAGE: Family = gauge(
    "kube_prober_container_memory_usage_bytes",
    "Memory charged to the cgroup (v1 memory.usage_in_bytes, v2 memory.current), of the container's cgroup.",
    Some("bytes"),
);
pub const CONTAINER_MEMORY_WORKING_SET: Family = gauge(
    "kube_prober_container_memory_working_set_bytes",
    "Memory usage minus inactive file pages, floored at 0, as the kubelet computes the working set, of the container's cgroup.",
    Some("bytes"),
);
pub const CONTAINER_MEMORY_RSS: Family = gauge(
    "kube_prober_container_memory_rss_bytes",
    "Anonymous memory (v1 total_rss, v2 anon), of the container's cgroup.",
    Some("bytes"),
);
pub const CONTAINER_MEMORY_CACHE: Family = gauge(
    "kube_prober_container_memory_cache_bytes",
    "Page cache (v1 total_cache, v2 file), of the container's cgroup.",
    Some("bytes"),
);
pub const CONTAINER_MEMORY_LIMIT: Family = gauge(
    "kube_prober_container_memory_limit_bytes",
    "Memory limit of the cgroup; absent when it has none, of the container's cgroup.",
    Some("bytes"),
);
pub const CONTAINER_PAGE_FAULTS: Family = counter(
    "kube_prober_container_memory_page_faults",
    "Page faults (pgfault, minor and major), of the container's cgroup.",
    None,
);
pub const CONTAINER_MAJOR_PAGE_FAULTS: Family = counter(
    "kube_prober_container_memory_major_page_faults",
    "Major page faults (pgmajfault), of the container's cgroup.",
    None,
);
pub const CONTAINER_OOM_KILLS: Family = counter(
    "kube_prober_container_memory_oom_kills",
    "Processes the OOM killer killed in the cgroup, of the container's cgroup.",
    None,
);
pub const CONTAINER_PRESSURE: Family = counter(
    "kube_prober_container_pressure_stalled_seconds",
    "Pressure stall time (cgroup v2 cpu, memory and io .pressure total, some or full), of the container's cgroup.",
    Some("seconds"),
);
pub const CONTAINER_MEMORY_NUMA: Family = gauge(
    "kube_prober_container_memory_numa_bytes",
    "Memory of the cgroup on each NUMA node (memory.numa_stat: v1 hierarchical_total pages times the page size, v2 anon+file+unevictable), of the container's cgroup.",
    Some("bytes"),
);
pub const CONTAINER_CPUSET_CPUS: Family = gauge(
    "kube_prober_container_cpuset_cpus",
    "CPUs in the effective cpuset (v1 cpuset.effective_cpus, v2 cpuset.cpus.effective; read when the cgroup is found and then once every --task-container-detail-every collections), of the container's cgroup.",
    None,
);
pub const CONTAINER_CPUSET_MEMORY_NODES: Family = gauge(
    "kube_prober_container_cpuset_memory_nodes",
    "Memory nodes in the effective cpuset (v1 cpuset.effective_mems, v2 cpuset.mems.effective; read when the cgroup is found and then once every --task-container-detail-every collections), of the container's cgroup.",
    None,
);
pub const PLATFORM_SOCKETS: Family = gauge(
    "kube_prober_platform_topology_sockets",
    "CPU packages with an online CPU (sysfs topology/physical_package_id).",
    None,
);
pub const PLATFORM_CORES: Family = gauge(
    "kube_prober_platform_topology_cores",
    "Physical cores with an online CPU (distinct package and core_id).",
    None,
);
pub const PLATFORM_CPUS: Family = gauge(
    "kube_prober_platform_topology_cpus",
    "Online logical CPUs (/sys/devices/system/cpu/online).",
    None,
);
pub const PLATFORM_NUMA_NODES: Family = gauge(
    "kube_prober_platform_topology_numa_nodes",
    "Online NUMA nodes (/sys/devices/system/node/online).",
    None,
);
pub const PLATFORM_CPU_BUSY: Family = counter(
    "kube_prober_platform_cpu_busy_seconds",
    "Busy time of each logical CPU: user+nice+system+irq+softirq+steal from /proc/stat, in seconds.",
    Some("seconds"),
);
pub const PLATFORM_MEMORY_USAGE: Family = gauge(
    "kube_prober_platform_memory_usage_bytes",
    "Memory used, MemTotal - MemAvailable from /proc/meminfo (kernels without MemAvailable: MemTotal - MemFree - Buffers - Cached), the figure the node memory utilization divides by MemTotal.",
    Some("bytes"),
);
pub const PLATFORM_NUMA_TOTAL: Family = gauge(
    "kube_prober_platform_memory_numa_total_bytes",
    "Memory of each NUMA node (sysfs nodeN/meminfo MemTotal).",
    Some("bytes"),
);
pub const PLATFORM_NUMA_FREE: Family = gauge(
    "kube_prober_platform_memory_numa_free_bytes",
    "Free memory of each NUMA node (MemFree).",
    Some("bytes"),
);
pub const PLATFORM_NUMA_USED: Family = gauge(
    "kube_prober_platform_memory_numa_used_bytes",
    "Used memory of each NUMA node (MemTotal - MemFree).",
    Some("bytes"),
);
pub const PLATFORM_VMSTAT: Family = counter(
    "kube_prober_platform_vmstat",
    "Counters of /proc/vmstat by key: pgfault, pgmajfault, pswpin, pswpout, oom_kill.",
    None,
);

pub const PROBE_SUCCESS: Family = gauge(
    "kube_prober_probe_success",
    "1 if the newest run of the probe against the target succeeded, else 0.",
    None,
)
.in_scope(Scope::Probe);
pub const PROBE_DURATION: Family = Family {
    name: "kube_prober_probe_duration_seconds",
    help: "How long probe runs took, failed ones included.",
    kind: Kind::Histogram,
    unit: Some("seconds"),
    scope: Scope::Probe,
};
pub const PROBE_RUNS: Family = counter(
    "kube_prober_probe_runs",
    "Probe runs, by probe and target.",
    None,
)
.in_scope(Scope::Probe);
pub const PROBE_FAILURES: Family = counter(
    "kube_prober_probe_failures",
    "Failed probe runs, by probe, target and reason (timeout, refused, dns, status_<code>, bad_body, no_items, too_large, error).",
    None,
)
.in_scope(Scope::Probe);

pub const SOURCE_UP: Family = gauge(
    "kube_prober_source_up",
    "1 if the newest run of the source (fetcher, watcher or probe loop) succeeded, else 0.",
    None,
)
.in_scope(Scope::Instance);
pub const SOURCE_RUNS: Family = counter(
    "kube_prober_source_runs",
    "Runs of each source, successful or not.",
    None,
)
.in_scope(Scope::Instance);
pub const SOURCE_ERRORS: Family = counter(
    "kube_prober_source_errors",
    "Failed runs of each source, by reason.",
    None,
)
.in_scope(Scope::Instance);
pub const SOURCE_NO_DATA: Family = counter(
    "kube_prober_source_no_data",
    "Runs of each source that succeeded but had nothing to report.",
    None,
)
.in_scope(Scope::Instance);
pub const SOURCE_DROPPED_VALUES: Family = counter(
    "kube_prober_source_dropped_values",
    "Values a source reported that were rejected (non_finite, negative, above_capacity, bad_capacity, unparsable), by reason.",
    None,
)
.in_scope(Scope::Instance);
pub const SOURCE_EXPIRED_NODES: Family = counter(
    "kube_prober_source_expired_nodes",
    "Nodes whose usage left every output because the source stopped reporting them.",
    None,
)
.in_scope(Scope::Instance);
pub const SOURCE_LAST_RUN_DURATION: Family = gauge(
    "kube_prober_source_last_run_duration_seconds",
    "How long the newest run of each source took.",
    Some("seconds"),
)
.in_scope(Scope::Instance);
pub const SOURCE_LAST_SUCCESS: Family = gauge(
    "kube_prober_source_last_success_timestamp_seconds",
    "Unix time of the newest successful run of each source (absent before the first).",
    Some("seconds"),
)
.in_scope(Scope::Instance);
pub const WATCH_RESTARTS: Family = counter(
    "kube_prober_watch_restarts",
    "WATCH requests a Kubernetes watcher sent again without relisting, by resource and why the previous watch ended (closed, error).",
    None,
);
pub const WATCH_RELISTS: Family = counter(
    "kube_prober_watch_relists",
    "Lists a Kubernetes watcher made after its first, by resource and reason (expired, list_failed, no_resource_version).",
    None,
);

pub const SINK_PUSHES: Family = counter(
    "kube_prober_sink_pushes",
    "Pushes of each push output (OTLP, Cloud Monitoring), successful or not.",
    None,
)
.in_scope(Scope::Instance);
pub const SINK_FAILURES: Family = counter(
    "kube_prober_sink_failures",
    "Failed pushes by reason.",
    None,
)
.in_scope(Scope::Instance);
pub const SINK_SKIPPED_TICKS: Family = counter(
    "kube_prober_sink_skipped_ticks",
    "Ticks skipped because the previous push was still running.",
    None,
)
.in_scope(Scope::Instance);
pub const SINK_POINTS: Family = counter(
    "kube_prober_sink_points",
    "Points sent by each push output.",
    None,
)
.in_scope(Scope::Instance);
pub const SINK_REQUESTS: Family = counter(
    "kube_prober_sink_requests",
    "Requests of each push output that the receiver answered (successfully or not).",
    None,
)
.in_scope(Scope::Instance);
pub const SINK_LAST_SUCCESS: Family = gauge(
    "kube_prober_sink_last_success_timestamp_seconds",
    "Unix time of the newest successful push.",
    Some("seconds"),
)
.in_scope(Scope::Instance);
pub const SINK_PUSH_DURATION: Family = gauge(
    "kube_prober_sink_push_duration_seconds",
    "How long the newest push took.",
    Some("seconds"),
)
.in_scope(Scope::Instance);

pub const LEADER: Family = gauge(
    "kube_prober_leader",
    "1 while this replica holds the leader Lease and pushes cluster-level series, else 0 (cluster role with push outputs).",
    None,
)
.in_scope(Scope::Instance);
pub const LEADER_ACQUIRED: Family = counter(
    "kube_prober_leader_acquired",
    "Times this replica became the holder of the leader Lease.",
    None,
)
.in_scope(Scope::Instance);

pub const SHARD_INFO: Family = gauge(
    "kube_prober_shard_info",
    "Always 1 on a sharded cluster-role instance; labels give its shard and the total (total=\"0\" while the StatefulSet's replica count is not known yet: only self-metrics are emitted then).",
    None,
)
.in_scope(Scope::Instance);

pub const TICKS: Family = counter(
    "kube_prober_ticks",
    "Snapshots made by the tick loop.",
    None,
)
.in_scope(Scope::Instance);
pub const TICK_DURATION: Family = gauge(
    "kube_prober_tick_duration_seconds",
    "How long the previous tick took to make and render its snapshot.",
    Some("seconds"),
)
.in_scope(Scope::Instance);
pub const SNAPSHOT_AGE: Family = gauge(
    "kube_prober_snapshot_age_seconds",
    "Seconds since the snapshot this scrape was rendered from was made.",
    Some("seconds"),
)
.in_scope(Scope::Instance);

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
    NODE_USAGE_QUANTILE,
    NODE_BOUND_PODS,
    NODE_BOUND_PODS_CPU,
    NODE_BOUND_PODS_MEMORY,
    NODE_USAGE_AGE,
    WATCHER_STALE_HOSTS,
    NODE_CPU_CAPACITY,
    NODE_MEMORY_CAPACITY,
    NODE_ALLOCATABLE_CPU,
    NODE_ALLOCATABLE_MEMORY,
    CLUSTER_NODES,
    CLUSTER_NODE_CONDITIONS,
    NODE_CONDITION,
    NODE_AVAILABLE,
    NODE_ADDONS_AVAILABLE,
    ADDON_EXPECTED_PODS,
    ADDON_PODS,
    ADDON_READY_PODS,
    ADDON_AVAILABLE,
    NODE_POD_REQUESTS_CPU,
    NODE_POD_REQUESTS_MEMORY,
    NODE_POD_LIMITS_CPU,
    NODE_POD_LIMITS_MEMORY,
    NODE_PODS,
    CONTAINER_RESTARTS,
    CONTAINER_LAST_TERMINATION,
    CLUSTER_SKIPPED_OBJECTS,
    TASK_UP,
    TASK_CONTAINERS,
    TASK_RESOURCE_REQUESTS,
    TASK_RESOURCE_LIMITS,
    TASK_CPU_USAGE,
    TASK_CPU_PERIODS,
    TASK_CPU_THROTTLED_PERIODS,
    TASK_CPU_THROTTLED,
    TASK_MEMORY_USAGE,
    TASK_MEMORY_WORKING_SET,
    TASK_MEMORY_RSS,
    TASK_MEMORY_CACHE,
    TASK_MEMORY_LIMIT,
    TASK_PAGE_FAULTS,
    TASK_MAJOR_PAGE_FAULTS,
    TASK_OOM_KILLS,
    TASK_PRESSURE,
    TASK_MEMORY_NUMA,
    TASK_CPUSET_CPUS,
    TASK_CPUSET_MEMORY_NODES,
    CONTAINER_CPU_USAGE,
    CONTAINER_CPU_PERIODS,
    CONTAINER_CPU_THROTTLED_PERIODS,
    CONTAINER_CPU_THROTTLED,
    CONTAINER_MEMORY_USAGE,
    CONTAINER_MEMORY_WORKING_SET,
    CONTAINER_MEMORY_RSS,
    CONTAINER_MEMORY_CACHE,
    CONTAINER_MEMORY_LIMIT,
    CONTAINER_PAGE_FAULTS,
    CONTAINER_MAJOR_PAGE_FAULTS,
    CONTAINER_OOM_KILLS,
    CONTAINER_PRESSURE,
    CONTAINER_MEMORY_NUMA,
    CONTAINER_CPUSET_CPUS,
    CONTAINER_CPUSET_MEMORY_NODES,
    TASK_PERF_CYCLES,
    TASK_PERF_INSTRUCTIONS,
    TASK_PERF_CACHE_REFERENCES,
    TASK_PERF_CACHE_MISSES,
    TASK_PERF_TASK_CLOCK,
    TASK_PERF_CONTEXT_SWITCHES,
    TASK_PERF_PAGE_FAULTS,
    TASK_PERF_IPC,
    TASK_PERF_CACHE_MPKI,
    TASK_PERF_SCALING,
    TASK_PERF_EVENT_SET,
    TASK_PERF_OPEN_FAILURES,
    TASK_PERF_OPEN_COUNTERS,
    PLATFORM_SOCKETS,
    PLATFORM_CORES,
    PLATFORM_CPUS,
    PLATFORM_NUMA_NODES,
    PLATFORM_CPU_BUSY,
    PLATFORM_MEMORY_USAGE,
    PLATFORM_NUMA_TOTAL,
    PLATFORM_NUMA_FREE,
    PLATFORM_NUMA_USED,
    PLATFORM_VMSTAT,
    PROBE_SUCCESS,
    PROBE_DURATION,
    PROBE_RUNS,
    PROBE_FAILURES,
    SOURCE_UP,
    SOURCE_RUNS,
    SOURCE_ERRORS,
    SOURCE_NO_DATA,
    SOURCE_DROPPED_VALUES,
    SOURCE_EXPIRED_NODES,
    USAGE_UNMATCHED,
    SOURCE_LAST_RUN_DURATION,
    SOURCE_LAST_SUCCESS,
    WATCH_RESTARTS,
    WATCH_RELISTS,
    SINK_PUSHES,
    SINK_FAILURES,
    SINK_SKIPPED_TICKS,
    SINK_POINTS,
    SINK_REQUESTS,
    SINK_LAST_SUCCESS,
    SINK_PUSH_DURATION,
    LEADER,
    LEADER_ACQUIRED,
    SHARD_INFO,
    TICKS,
    TICK_DURATION,
    SNAPSHOT_AGE,
];

/// `--auth kubernetes`: requests to the protected paths by outcome.
pub const HTTP_AUTH_DECISIONS: Family = counter(
    "kube_prober_http_auth_decisions",
    "Requests to /metrics, /watcher and /watcher/health by path and decision (allowed; unauthenticated: 401; forbidden: 403; unavailable: 503, the API server did not answer a review).",
    None,
);
pub const HTTP_AUTH_REVIEWS: Family = counter(
    "kube_prober_http_auth_reviews",
    "TokenReviews (review=token) and SubjectAccessReviews (review=access) sent to the API server, by result (ok: an answer; error: none, or an error status).",
    None,
);
pub const HTTP_AUTH_CACHE_HITS: Family = counter(
    "kube_prober_http_auth_cache_hits",
    "Reviews answered from the cache (--auth-cache-ttl) instead of the API server.",
    None,
);
/// TLS on the listener.
pub const TLS_RELOADS: Family = counter(
    "kube_prober_tls_reloads",
    "Changed --tls-cert-file/--tls-key-file pairs by result (success: now served; error: rejected, the previous pair is still served).",
    None,
);

/// Families the HTTP server renders from its own counters on every scrape of `/metrics` (only
/// when TLS or auth is on); not in snapshots, so the push outputs do not carry them.
pub const SERVER: &[Family] = &[
    HTTP_AUTH_DECISIONS,
    HTTP_AUTH_REVIEWS,
    HTTP_AUTH_CACHE_HITS,
    TLS_RELOADS,
];

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

/// gke-prober's names and label keys (including its `scheduleable` spelling on
/// node/available), mapped to ours.
pub const GKE_PROBER: &[GkeProberMetric] = &[
    GkeProberMetric {
        suffix: "cluster/node_condition",
        family: "kube_prober_cluster_node_conditions",
        labels: &[
            ("nodepool", "pool"),
            ("zone", "zone"),
            ("type", "condition"),
            ("status", "status"),
        ],
        kind: "GAUGE",
    },
    GkeProberMetric {
        suffix: "cluster/node_available",
        family: "kube_prober_cluster_nodes",
        labels: &[
            ("nodepool", "pool"),
            ("zone", "zone"),
            ("ready", "ready"),
            ("schedulable", "schedulable"),
            ("done_warming", "done_warming"),
            ("available", "available"),
        ],
        kind: "GAUGE",
    },
    GkeProberMetric {
        suffix: "cluster/addons_expected",
        family: "kube_prober_addon_expected_pods",
        labels: &[
            ("addon", "addon"),
            ("version", "version"),
            ("controller", "controller"),
        ],
        kind: "GAUGE",
    },
    GkeProberMetric {
        suffix: "cluster/probe/addons_condition",
        family: "kube_prober_probe_success",
        labels: &[
            ("name", "probe"),
            ("condition", "success"),
            ("reason", "reason"),
        ],
        kind: "GAUGE",
    },
    GkeProberMetric {
        suffix: "node/condition",
        family: "kube_prober_node_condition",
        labels: &[
            ("nodepool", "pool"),
            ("zone", "zone"),
            ("type", "condition"),
            ("status", "status"),
        ],
        kind: "GAUGE",
    },
    GkeProberMetric {
        suffix: "node/available",
        family: "kube_prober_node_available",
        labels: &[
            ("nodepool", "pool"),
            ("zone", "zone"),
            ("available", "available"),
            ("ready", "ready"),
            ("scheduleable", "schedulable"),
            ("done_warming", "done_warming"),
        ],
        kind: "GAUGE",
    },
    GkeProberMetric {
        suffix: "addon/available",
        family: "kube_prober_addon_pods",
        labels: &[
            ("nodepool", "pool"),
            ("zone", "zone"),
            ("addon", "addon"),
            ("version", "version"),
            ("controller", "controller"),
            ("available", "available"),
        ],
        kind: "GAUGE",
    },
    GkeProberMetric {
        suffix: "addon/control_plane_available",
        family: "kube_prober_node_addons_available",
        labels: &[
            ("nodepool", "pool"),
            ("zone", "zone"),
            ("available", "available"),
        ],
        kind: "GAUGE",
    },
    GkeProberMetric {
        suffix: "addon/restart",
        family: "kube_prober_container_restarts",
        labels: &[("container_name", "container"), ("addon", "addon")],
        kind: "CUMULATIVE",
    },
];

/// The family that carries a node resource.
pub const fn node_resource_family(r: crate::model::Resource) -> &'static Family {
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
}
