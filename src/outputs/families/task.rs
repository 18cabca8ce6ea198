//! The families of task.

use super::rows::*;
use super::*;
use crate::model::*;

pub const TASK_UP: Family = gauge(
    "kube_prober_task_up",
    "1 per pod on this node (a task, WCA's term) whose pod cgroup was found and read, 0 while it has none (e.g. not started yet); ready tells pods whose containers are all ready apart.",
    None,
)
.otel(&[o("kube_prober.task.up", "", G)]);
pub const TASK_CONTAINERS: Family = gauge(
    "kube_prober_task_containers",
    "Container cgroups found in the pod cgroup (WCA's task_subcontainers).",
    None,
)
.otel(&[o("kube_prober.task.containers", "{container}", G)]);
pub const TASK_RESOURCE_REQUESTS: Family = gauge(
    "kube_prober_task_resource_requests",
    "The pod's effective request per resource by Kubernetes' rule (containers and sidecars summed, the larger of that and each init container with the sidecars before it, pod-level resources where set, plus overhead; with in-place resize, the larger of the desired and the running resources the kubelet reports, or the running ones while the resize is infeasible); unit core, byte or integer.",
    None,
)
.otel(&[o("kube_prober.task.resource.requests", "", G)]);
pub const TASK_RESOURCE_LIMITS: Family = gauge(
    "kube_prober_task_resource_limits",
    "The pod's effective limit per resource, counted as Kubernetes' PodLimits does (overhead added only where a limit exists).",
    None,
)
.otel(&[o("kube_prober.task.resource.limits", "", G)]);
pub const TASK_CPU_USAGE: Family = counter(
    "kube_prober_task_cpu_usage_seconds",
    "CPU time used, of the pod cgroup (pause container and overhead included).",
    Some("seconds"),
)
.otel(&[o("k8s.pod.cpu.time", "s", C)]);
pub const TASK_CPU_PERIODS: Family = counter(
    "kube_prober_task_cpu_periods",
    "CFS bandwidth periods (cpu.cfs_period_us, usually 100 ms) that elapsed while the cgroup had a CPU quota of its own and used CPU (the kernel's nr_periods: 0 without a CPU limit on this cgroup), of the pod cgroup (pause container and overhead included).",
    None,
)
.otel(&[o("kube_prober.task.cpu.periods", "{period}", C)]);
pub const TASK_CPU_THROTTLED_PERIODS: Family = counter(
    "kube_prober_task_cpu_throttled_periods",
    "CFS periods in which the cgroup was throttled, of the pod cgroup (pause container and overhead included).",
    None,
)
.otel(&[o("kube_prober.task.cpu.throttled_periods", "{period}", C)]);
pub const TASK_CPU_THROTTLED: Family = counter(
    "kube_prober_task_cpu_throttled_seconds",
    "Time the cgroup was throttled by its CFS quota, of the pod cgroup (pause container and overhead included).",
    Some("seconds"),
)
.otel(&[o("kube_prober.task.cpu.throttled", "s", C)]);
pub const TASK_MEMORY_USAGE: Family = gauge(
    "kube_prober_task_memory_usage_bytes",
    "Memory charged to the cgroup (v1 memory.usage_in_bytes, v2 memory.current), of the pod cgroup (pause container and overhead included).",
    Some("bytes"),
)
.otel(&[o("k8s.pod.memory.usage", "By", U)])
.legacy(&[o("k8s.pod.memory.usage", "By", G)]);
pub const TASK_MEMORY_WORKING_SET: Family = gauge(
    "kube_prober_task_memory_working_set_bytes",
    "Memory usage minus inactive file pages, floored at 0, as the kubelet computes the working set, of the pod cgroup (pause container and overhead included).",
    Some("bytes"),
)
.otel(&[o("k8s.pod.memory.working_set", "By", U)])
.legacy(&[o("k8s.pod.memory.working_set", "By", G)]);
pub const TASK_MEMORY_RSS: Family = gauge(
    "kube_prober_task_memory_rss_bytes",
    "Anonymous memory (v1 total_rss, v2 anon), of the pod cgroup (pause container and overhead included).",
    Some("bytes"),
)
.otel(&[o("k8s.pod.memory.rss", "By", U)])
.legacy(&[o("k8s.pod.memory.rss", "By", G)]);
pub const TASK_MEMORY_CACHE: Family = gauge(
    "kube_prober_task_memory_cache_bytes",
    "Page cache (v1 total_cache, v2 file), of the pod cgroup (pause container and overhead included).",
    Some("bytes"),
)
.otel(&[o("kube_prober.task.memory.cache", "By", G)]);
pub const TASK_MEMORY_LIMIT: Family = gauge(
    "kube_prober_task_memory_limit_bytes",
    "Memory limit of the cgroup; absent when it has none, of the pod cgroup (pause container and overhead included).",
    Some("bytes"),
)
.otel(&[o("kube_prober.task.memory.limit", "By", G)]);
pub const TASK_PAGE_FAULTS: Family = counter(
    "kube_prober_task_memory_page_faults",
    "Page faults (pgfault, minor and major), of the pod cgroup (pause container and overhead included).",
    None,
)
.otel(&[o("kube_prober.task.memory.page_faults", "{fault}", C)]);
pub const TASK_MAJOR_PAGE_FAULTS: Family = counter(
    "kube_prober_task_memory_major_page_faults",
    "Major page faults (pgmajfault), of the pod cgroup (pause container and overhead included).",
    None,
)
.otel(&[o("kube_prober.task.memory.major_page_faults", "{fault}", C)]);
pub const TASK_OOM_KILLS: Family = counter(
    "kube_prober_task_memory_oom_kills",
    "Processes the OOM killer killed in the cgroup, of the pod cgroup (pause container and overhead included).",
    None,
)
.otel(&[o("kube_prober.task.memory.oom_kills", "{kill}", C)]);
pub const TASK_PRESSURE: Family = counter(
    "kube_prober_task_pressure_stalled_seconds",
    "Pressure stall time (cgroup v2 cpu, memory and io .pressure total, some or full), of the pod cgroup (pause container and overhead included).",
    Some("seconds"),
)
.otel(&[o("kube_prober.task.pressure.stalled", "s", C)]);
pub const TASK_MEMORY_NUMA: Family = gauge(
    "kube_prober_task_memory_numa_bytes",
    "Memory of the cgroup on each NUMA node (memory.numa_stat: v1 hierarchical_total pages times the page size, v2 anon+file+unevictable), of the pod cgroup (pause container and overhead included).",
    Some("bytes"),
)
.otel(&[o("kube_prober.task.memory.numa", "By", G)]);
pub const TASK_CPUSET_CPUS: Family = gauge(
    "kube_prober_task_cpuset_cpus",
    "CPUs in the effective cpuset (v1 cpuset.effective_cpus, v2 cpuset.cpus.effective; read when the cgroup is found and then once every --task-detail-every collections), of the pod cgroup (pause container and overhead included).",
    None,
)
.otel(&[o("kube_prober.task.cpuset.cpus", "{cpu}", G)]);
pub const TASK_CPUSET_MEMORY_NODES: Family = gauge(
    "kube_prober_task_cpuset_memory_nodes",
    "Memory nodes in the effective cpuset (v1 cpuset.effective_mems, v2 cpuset.mems.effective; read when the cgroup is found and then once every --task-detail-every collections), of the pod cgroup (pause container and overhead included).",
    None,
)
.otel(&[o("kube_prober.task.cpuset.memory_nodes", "{node}", G)]);
pub const CONTAINER_CPU_USAGE: Family = counter(
    "kube_prober_container_cpu_usage_seconds",
    "CPU time used, of the container's cgroup.",
    Some("seconds"),
)
.otel(&[o("container.cpu.time", "s", C)]);
pub const CONTAINER_CPU_PERIODS: Family = counter(
    "kube_prober_container_cpu_periods",
    "CFS bandwidth periods (cpu.cfs_period_us, usually 100 ms) that elapsed while the cgroup had a CPU quota of its own and used CPU (the kernel's nr_periods: 0 without a CPU limit on this cgroup), of the container's cgroup.",
    None,
)
.otel(&[o("kube_prober.container.cpu.periods", "{period}", C)]);
pub const CONTAINER_CPU_THROTTLED_PERIODS: Family = counter(
    "kube_prober_container_cpu_throttled_periods",
    "CFS periods in which the cgroup was throttled, of the container's cgroup.",
    None,
)
.otel(&[o(
    "kube_prober.container.cpu.throttled_periods",
    "{period}",
    C,
)]);
pub const CONTAINER_CPU_THROTTLED: Family = counter(
    "kube_prober_container_cpu_throttled_seconds",
    "Time the cgroup was throttled by its CFS quota, of the container's cgroup.",
    Some("seconds"),
)
.otel(&[o("kube_prober.container.cpu.throttled", "s", C)]);
pub const CONTAINER_MEMORY_USAGE: Family = gauge(
    "kube_prober_container_memory_usage_bytes",
    "Memory charged to the cgroup (v1 memory.usage_in_bytes, v2 memory.current), of the container's cgroup.",
    Some("bytes"),
)
.otel(&[o("kube_prober.container.memory.usage", "By", G)]);
pub const CONTAINER_MEMORY_WORKING_SET: Family = gauge(
    "kube_prober_container_memory_working_set_bytes",
    "Memory usage minus inactive file pages, floored at 0, as the kubelet computes the working set, of the container's cgroup.",
    Some("bytes"),
)
.otel(&[o("kube_prober.container.memory.working_set", "By", G)]);
pub const CONTAINER_MEMORY_RSS: Family = gauge(
    "kube_prober_container_memory_rss_bytes",
    "Anonymous memory (v1 total_rss, v2 anon), of the container's cgroup.",
    Some("bytes"),
)
.otel(&[o("kube_prober.container.memory.rss", "By", G)]);
pub const CONTAINER_MEMORY_CACHE: Family = gauge(
    "kube_prober_container_memory_cache_bytes",
    "Page cache (v1 total_cache, v2 file), of the container's cgroup.",
    Some("bytes"),
)
.otel(&[o("kube_prober.container.memory.cache", "By", G)]);
pub const CONTAINER_MEMORY_LIMIT: Family = gauge(
    "kube_prober_container_memory_limit_bytes",
    "Memory limit of the cgroup; absent when it has none, of the container's cgroup.",
    Some("bytes"),
)
.otel(&[o("kube_prober.container.memory.limit", "By", G)]);
pub const CONTAINER_PAGE_FAULTS: Family = counter(
    "kube_prober_container_memory_page_faults",
    "Page faults (pgfault, minor and major), of the container's cgroup.",
    None,
)
.otel(&[o("kube_prober.container.memory.page_faults", "{fault}", C)]);
pub const CONTAINER_MAJOR_PAGE_FAULTS: Family = counter(
    "kube_prober_container_memory_major_page_faults",
    "Major page faults (pgmajfault), of the container's cgroup.",
    None,
)
.otel(&[o(
    "kube_prober.container.memory.major_page_faults",
    "{fault}",
    C,
)]);
pub const CONTAINER_OOM_KILLS: Family = counter(
    "kube_prober_container_memory_oom_kills",
    "Processes the OOM killer killed in the cgroup, of the container's cgroup.",
    None,
)
.otel(&[o("kube_prober.container.memory.oom_kills", "{kill}", C)]);
pub const CONTAINER_PRESSURE: Family = counter(
    "kube_prober_container_pressure_stalled_seconds",
    "Pressure stall time (cgroup v2 cpu, memory and io .pressure total, some or full), of the container's cgroup.",
    Some("seconds"),
)
.otel(&[o("kube_prober.container.pressure.stalled", "s", C)]);
pub const CONTAINER_MEMORY_NUMA: Family = gauge(
    "kube_prober_container_memory_numa_bytes",
    "Memory of the cgroup on each NUMA node (memory.numa_stat: v1 hierarchical_total pages times the page size, v2 anon+file+unevictable), of the container's cgroup.",
    Some("bytes"),
)
.otel(&[o("kube_prober.container.memory.numa", "By", G)]);
pub const CONTAINER_CPUSET_CPUS: Family = gauge(
    "kube_prober_container_cpuset_cpus",
    "CPUs in the effective cpuset (v1 cpuset.effective_cpus, v2 cpuset.cpus.effective; read when the cgroup is found and then once every --task-container-detail-every collections), of the container's cgroup.",
    None,
)
.otel(&[o("kube_prober.container.cpuset.cpus", "{cpu}", G)]);
pub const CONTAINER_CPUSET_MEMORY_NODES: Family = gauge(
    "kube_prober_container_cpuset_memory_nodes",
    "Memory nodes in the effective cpuset (v1 cpuset.effective_mems, v2 cpuset.mems.effective; read when the cgroup is found and then once every --task-container-detail-every collections), of the container's cgroup.",
    None,
)
.otel(&[o("kube_prober.container.cpuset.memory_nodes", "{node}", G)]);
pub const TASK_PERF_CYCLES: Family = counter(
    "kube_prober_task_perf_cycles",
    "CPU cycles (hardware event set), of the pod cgroup, scaled for multiplexing and summed over CPUs.",
    None,
)
.otel(&[o("kube_prober.task.perf.cycles", "{cycle}", C)]);
pub const TASK_PERF_INSTRUCTIONS: Family = counter(
    "kube_prober_task_perf_instructions",
    "Instructions retired (hardware event set), of the pod cgroup, scaled for multiplexing and summed over CPUs.",
    None,
)
.otel(&[o("kube_prober.task.perf.instructions", "{instruction}", C)]);
pub const TASK_PERF_CACHE_REFERENCES: Family = counter(
    "kube_prober_task_perf_cache_references",
    "Last-level cache references (hardware event set), of the pod cgroup, scaled for multiplexing and summed over CPUs.",
    None,
)
.otel(&[o("kube_prober.task.perf.cache.references", "{reference}", C)]);
pub const TASK_PERF_CACHE_MISSES: Family = counter(
    "kube_prober_task_perf_cache_misses",
    "Last-level cache misses (hardware event set), of the pod cgroup, scaled for multiplexing and summed over CPUs.",
    None,
)
.otel(&[o("kube_prober.task.perf.cache.misses", "{miss}", C)]);
pub const TASK_PERF_TASK_CLOCK: Family = counter(
    "kube_prober_task_perf_task_clock_seconds",
    "CPU time counted by the task-clock software event (software event set), of the pod cgroup, summed over CPUs.",
    Some("seconds"),
)
.otel(&[o("kube_prober.task.perf.task_clock", "s", C)]);
pub const TASK_PERF_CONTEXT_SWITCHES: Family = counter(
    "kube_prober_task_perf_context_switches",
    "Context switches (software event set), of the pod cgroup, summed over CPUs.",
    None,
)
.otel(&[o("kube_prober.task.perf.context_switches", "{switch}", C)]);
pub const TASK_PERF_PAGE_FAULTS: Family = counter(
    "kube_prober_task_perf_page_faults",
    "Page faults counted by the page-faults software event (software event set), of the pod cgroup, summed over CPUs.",
    None,
)
.otel(&[o("kube_prober.task.perf.page_faults", "{fault}", C)]);
pub const TASK_PERF_IPC: Family = gauge(
    "kube_prober_task_perf_instructions_per_cycle",
    "Instructions per cycle over the last collection interval, from the pod's summed counts (absent when no cycle was counted).",
    None,
)
.otel(&[o("kube_prober.task.perf.instructions_per_cycle", "1", G)]);
pub const TASK_PERF_CACHE_MPKI: Family = gauge(
    "kube_prober_task_perf_cache_misses_per_kilo_instructions",
    "Cache misses per 1000 instructions over the last collection interval, from the pod's summed counts (absent when no instruction was counted).",
    None,
)
.otel(&[o("kube_prober.task.perf.cache.misses_per_kilo_instructions", "1", G)]);
pub const TASK_PERF_SCALING: Family = gauge(
    "kube_prober_task_perf_scaling_factor",
    "The largest time enabled / time running over the pod's per-CPU counter groups: 1 when never multiplexed; counts are scaled by it.",
    None,
)
.otel(&[o("kube_prober.task.perf.scaling_factor", "1", G)]);
pub const TASK_PERF_EVENT_SET: Family = gauge(
    "kube_prober_task_perf_event_set",
    "1 for the perf event set being counted (set: hardware, software, or none when neither could be opened), 0 for the others; only with --task-perf-events.",
    None,
)
.otel(&[o("kube_prober.task.perf.event_set", "", G)]);
pub const TASK_PERF_OPEN_FAILURES: Family = counter(
    "kube_prober_task_perf_open_failures",
    "Failed perf_event_open calls (start-up probe and per pod) by reason.",
    None,
)
.otel(&[o("kube_prober.task.perf.open_failures", "{failure}", C)]);
pub const TASK_PERF_OPEN_COUNTERS: Family = gauge(
    "kube_prober_task_perf_open_counters",
    "Perf file descriptors open now: pods × online CPUs × events of the set.",
    None,
)
.otel(&[o("kube_prober.task.perf.open_counters", "{descriptor}", G)]);

/// The tasks (pods) on this node, their containers and perf counters (step `Tasks`).
pub const TASKS: &[Family] = &[
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
];

/// A value of one cgroup, the task family and the container family it goes to.
type CgroupValue = (
    &'static Family,
    &'static Family,
    fn(&CgroupStats) -> Option<f64>,
);

/// A count of the effective cpuset, the task family and the container family it goes to.
type CpusetValue = (
    &'static Family,
    &'static Family,
    fn(&CgroupStats) -> Option<u32>,
);

/// The scalar cgroup values, in `ALL` order.
const CGROUP_VALUES: &[CgroupValue] = &[
    (&TASK_CPU_USAGE, &CONTAINER_CPU_USAGE, |s| s.cpu_seconds),
    (&TASK_CPU_PERIODS, &CONTAINER_CPU_PERIODS, |s| {
        s.cpu_periods.map(|v| v as f64)
    }),
    (
        &TASK_CPU_THROTTLED_PERIODS,
        &CONTAINER_CPU_THROTTLED_PERIODS,
        |s| s.cpu_throttled_periods.map(|v| v as f64),
    ),
    (&TASK_CPU_THROTTLED, &CONTAINER_CPU_THROTTLED, |s| {
        s.cpu_throttled_seconds
    }),
    (&TASK_MEMORY_USAGE, &CONTAINER_MEMORY_USAGE, |s| {
        s.memory_usage_bytes
    }),
    (
        &TASK_MEMORY_WORKING_SET,
        &CONTAINER_MEMORY_WORKING_SET,
        |s| s.memory_working_set_bytes,
    ),
    (&TASK_MEMORY_RSS, &CONTAINER_MEMORY_RSS, |s| {
        s.memory_rss_bytes
    }),
    (&TASK_MEMORY_CACHE, &CONTAINER_MEMORY_CACHE, |s| {
        s.memory_cache_bytes
    }),
    (&TASK_MEMORY_LIMIT, &CONTAINER_MEMORY_LIMIT, |s| {
        s.memory_limit_bytes
    }),
    (&TASK_PAGE_FAULTS, &CONTAINER_PAGE_FAULTS, |s| {
        s.page_faults.map(|v| v as f64)
    }),
    (&TASK_MAJOR_PAGE_FAULTS, &CONTAINER_MAJOR_PAGE_FAULTS, |s| {
        s.major_page_faults.map(|v| v as f64)
    }),
    (&TASK_OOM_KILLS, &CONTAINER_OOM_KILLS, |s| {
        s.oom_kills.map(|v| v as f64)
    }),
];

/// `core` for CPU, `byte` for memory, storage and hugepages, `integer` otherwise
/// (kube-state-metrics' units).
fn resource_unit(resource: &str) -> &'static str {
    match resource {
        "cpu" => "core",
        "memory" | "ephemeral-storage" | "storage" => "byte",
        r if r.starts_with("hugepages-") => "byte",
        _ => "integer",
    }
}

/// The per-pod task families and the per-container ones (node role).
fn tasks<V: Visitor>(w: &mut V, ts: Option<&TaskSet>) {
    let empty = TaskSet::default();
    let ts = ts.unwrap_or(&empty);
    let task_names: Vec<String> = ts.tasks.iter().map(|t| t.pod.task_name()).collect();
    let base = |i: usize| -> Labels<'_> {
        let p = &ts.tasks[i].pod;
        // Room for the labels rows add (`container`, `resource` and `kind` or `unit`): no
        // reallocation per row (the node role's RSS: thousands of rows per tick).
        let mut l = Vec::with_capacity(7 + p.labels.len() + 3);
        l.extend([
            ("node", ts.node.as_str()),
            ("namespace", p.namespace.as_str()),
            ("pod", p.name.as_str()),
            ("task_name", task_names[i].as_str()),
            ("task_id", p.uid.as_str()),
            ("qos", p.qos.as_str()),
            ("ready", flag(p.ready())),
        ]);
        l.extend(p.labels.iter().map(|(k, v)| (*k, v.as_str())));
        l
    };
    let idx = 0..ts.tasks.len();
    let rows: Vec<_> = idx
        .clone()
        .map(|i| (base(i), one_if(ts.tasks[i].stats.is_some())))
        .collect();
    w.family(&TASK_UP, &rows);
    let rows: Vec<_> = idx
        .clone()
        .filter(|&i| ts.tasks[i].stats.is_some())
        .map(|i| (base(i), ts.tasks[i].containers.len() as f64))
        .collect();
    w.family(&TASK_CONTAINERS, &rows);
    for (family, get) in [
        (
            &TASK_RESOURCE_REQUESTS,
            (|p: &crate::model::TaskPod| &p.requests) as fn(&_) -> &_,
        ),
        (&TASK_RESOURCE_LIMITS, |p| &p.limits),
    ] {
        let mut rows = Vec::new();
        for i in idx.clone() {
            for (r, v) in get(&ts.tasks[i].pod) {
                let mut l = base(i);
                l.push(("resource", r.as_str()));
                l.push(("unit", resource_unit(r)));
                rows.push((l, *v));
            }
        }
        w.family(family, &rows);
    }
    // Per cgroup: (labels, stats) of every pod, then of every container.
    let pods: Vec<(Labels<'_>, &CgroupStats)> = idx
        .clone()
        .filter_map(|i| ts.tasks[i].stats.as_ref().map(|s| (base(i), s)))
        .collect();
    let containers: Vec<(Labels<'_>, &CgroupStats)> = idx
        .flat_map(|i| {
            let base = &base;
            ts.tasks[i].containers.iter().map(move |c| {
                let mut l = base(i);
                l.push(("container", c.name.as_str()));
                (l, &c.stats)
            })
        })
        .collect();
    for (set, container) in [(&pods, false), (&containers, true)] {
        visit_cgroups(w, set, container);
    }
}

/// The cgroup families of `set` (every pod's, or with `container` every container's).
fn visit_cgroups<V: Visitor>(w: &mut V, set: &[(Labels<'_>, &CgroupStats)], container: bool) {
    for (tf, cf, get) in CGROUP_VALUES {
        let rows: Vec<_> = set
            .iter()
            .filter_map(|(l, s)| get(s).map(|v| (l.clone(), v)))
            .collect();
        w.family(if container { cf } else { tf }, &rows);
    }
    let rows: Vec<_> = set
        .iter()
        .flat_map(|(l, s)| {
            s.pressure.iter().map(move |p| {
                let mut l = with_room(l, 2);
                l.push(("resource", p.resource));
                l.push(("kind", p.kind));
                (l, p.seconds)
            })
        })
        .collect();
    let fam = if container {
        &CONTAINER_PRESSURE
    } else {
        &TASK_PRESSURE
    };
    w.family(fam, &rows);
    let numa: Vec<Vec<String>> = set
        .iter()
        .map(|(_, s)| s.numa_bytes.iter().map(|(n, _)| n.to_string()).collect())
        .collect();
    let rows: Vec<_> = set
        .iter()
        .zip(&numa)
        .flat_map(|((l, s), ids)| {
            s.numa_bytes.iter().zip(ids).map(move |((_, v), id)| {
                let mut l = with_room(l, 1);
                l.push(("numa_node", id.as_str()));
                (l, *v)
            })
        })
        .collect();
    let fam = if container {
        &CONTAINER_MEMORY_NUMA
    } else {
        &TASK_MEMORY_NUMA
    };
    w.family(fam, &rows);
    // The effective cpuset's sizes, after the NUMA family as in `ALL`.
    let cpuset: [CpusetValue; 2] = [
        (&TASK_CPUSET_CPUS, &CONTAINER_CPUSET_CPUS, |s| s.cpuset_cpus),
        (
            &TASK_CPUSET_MEMORY_NODES,
            &CONTAINER_CPUSET_MEMORY_NODES,
            |s| s.cpuset_memory_nodes,
        ),
    ];
    for (tf, cf, get) in cpuset {
        let rows: Vec<_> = set
            .iter()
            .filter_map(|(l, s)| get(s).map(|v| (l.clone(), f64::from(v))))
            .collect();
        w.family(if container { cf } else { tf }, &rows);
    }
}

/// A copy of `l` with room for `more` labels (a clone has none: each push reallocates).
fn with_room<'a>(l: &Labels<'a>, more: usize) -> Labels<'a> {
    let mut out = Vec::with_capacity(l.len() + more);
    out.extend_from_slice(l);
    out
}

/// The labels of a task's series (as `visit_tasks` gives them).
fn task_labels<'a>(node: &'a str, p: &'a crate::model::TaskPod, task_name: &'a str) -> Labels<'a> {
    let mut l = vec![
        ("node", node),
        ("namespace", p.namespace.as_str()),
        ("pod", p.name.as_str()),
        ("task_name", task_name),
        ("task_id", p.uid.as_str()),
        ("qos", p.qos.as_str()),
        ("ready", flag(p.ready())),
    ];
    l.extend(p.labels.iter().map(|(k, v)| (*k, v.as_str())));
    l
}

/// A perf value of one pod and the family it goes to.
type PerfValue = (
    &'static Family,
    fn(&crate::model::TaskPerfSample) -> Option<f64>,
);

/// The per-pod perf families, in `ALL` order.
const PERF_VALUES: &[PerfValue] = &[
    (&TASK_PERF_CYCLES, |t| t.counts.cycles),
    (&TASK_PERF_INSTRUCTIONS, |t| t.counts.instructions),
    (&TASK_PERF_CACHE_REFERENCES, |t| t.counts.cache_references),
    (&TASK_PERF_CACHE_MISSES, |t| t.counts.cache_misses),
    (&TASK_PERF_TASK_CLOCK, |t| t.counts.task_clock_seconds),
    (&TASK_PERF_CONTEXT_SWITCHES, |t| t.counts.context_switches),
    (&TASK_PERF_PAGE_FAULTS, |t| t.counts.page_faults),
    (&TASK_PERF_IPC, |t| t.ipc),
    (&TASK_PERF_CACHE_MPKI, |t| t.cache_mpki),
    (&TASK_PERF_SCALING, |t| t.scaling_factor),
];

/// The perf counter families (node role, `--task-perf-events`); nothing without the flag.
fn visit_task_perf<V: Visitor>(w: &mut V, ps: Option<&crate::model::TaskPerfSet>) {
    let Some(ps) = ps else { return };
    let node = ps.node.as_str();
    let task_names: Vec<String> = ps.tasks.iter().map(|t| t.pod.task_name()).collect();
    let labels: Vec<Labels<'_>> = ps
        .tasks
        .iter()
        .zip(&task_names)
        .map(|(t, n)| task_labels(node, &t.pod, n))
        .collect();
    for (family, get) in PERF_VALUES {
        let rows: Vec<_> = ps
            .tasks
            .iter()
            .zip(&labels)
            .filter_map(|(t, l)| get(t).map(|v| (l.clone(), v)))
            .collect();
        w.family(family, &rows);
    }
    let active = ps.event_set.map_or("none", |s| s.as_str());
    let rows: Vec<_> = ["hardware", "software", "none"]
        .into_iter()
        .map(|set| (vec![("node", node), ("set", set)], one_if(set == active)))
        .collect();
    w.family(&TASK_PERF_EVENT_SET, &rows);
    let rows: Vec<_> = ps
        .open_failures
        .iter()
        .map(|(reason, n)| (vec![("node", node), ("reason", *reason)], *n as f64))
        .collect();
    w.family(&TASK_PERF_OPEN_FAILURES, &rows);
    w.family(
        &TASK_PERF_OPEN_COUNTERS,
        &[(vec![("node", node)], ps.open_counters as f64)],
    );
}

/// The tasks (pods) on this node: their cgroups, containers and perf counters.
pub fn visit_tasks<V: Visitor>(w: &mut V, snap: &Snapshot) {
    tasks(w, snap.tasks.as_deref());
    visit_task_perf(w, snap.task_perf.as_deref());
}
