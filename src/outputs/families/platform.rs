//! The families of platform.

use super::rows::*;
use super::*;
use crate::model::*;

pub const PLATFORM_SOCKETS: Family = gauge(
    "kube_prober_platform_topology_sockets",
    "CPU packages with an online CPU (sysfs topology/physical_package_id).",
    None,
)
.otel(&[o("kube_prober.platform.topology.sockets", "{socket}", G)]);
pub const PLATFORM_CORES: Family = gauge(
    "kube_prober_platform_topology_cores",
    "Physical cores with an online CPU (distinct package and core_id).",
    None,
)
.otel(&[o("kube_prober.platform.topology.cores", "{core}", G)]);
pub const PLATFORM_CPUS: Family = gauge(
    "kube_prober_platform_topology_cpus",
    "Online logical CPUs (/sys/devices/system/cpu/online).",
    None,
)
.otel(&[o("kube_prober.platform.topology.cpus", "{cpu}", G)]);
pub const PLATFORM_NUMA_NODES: Family = gauge(
    "kube_prober_platform_topology_numa_nodes",
    "Online NUMA nodes (/sys/devices/system/node/online).",
    None,
)
.otel(&[o("kube_prober.platform.topology.numa_nodes", "{node}", G)]);
pub const PLATFORM_CPU_BUSY: Family = counter(
    "kube_prober_platform_cpu_busy_seconds",
    "Busy time of each logical CPU: user+nice+system+irq+softirq+steal from /proc/stat, in seconds.",
    Some("seconds"),
)
.otel(&[o("kube_prober.platform.cpu.busy", "s", C)]);
pub const PLATFORM_MEMORY_USAGE: Family = gauge(
    "kube_prober_platform_memory_usage_bytes",
    "Memory used, MemTotal - MemAvailable from /proc/meminfo (kernels without MemAvailable: MemTotal - MemFree - Buffers - Cached), the figure the node memory utilization divides by MemTotal.",
    Some("bytes"),
)
.otel(&[o("kube_prober.platform.memory.usage", "By", G)]);
pub const PLATFORM_NUMA_TOTAL: Family = gauge(
    "kube_prober_platform_memory_numa_total_bytes",
    "Memory of each NUMA node (sysfs nodeN/meminfo MemTotal).",
    Some("bytes"),
)
.otel(&[o("kube_prober.platform.memory.numa_capacity", "By", G)]);
pub const PLATFORM_NUMA_FREE: Family = gauge(
    "kube_prober_platform_memory_numa_free_bytes",
    "Free memory of each NUMA node (MemFree).",
    Some("bytes"),
)
.otel(&[o("kube_prober.platform.memory.numa_free", "By", G)]);
pub const PLATFORM_NUMA_USED: Family = gauge(
    "kube_prober_platform_memory_numa_used_bytes",
    "Used memory of each NUMA node (MemTotal - MemFree).",
    Some("bytes"),
)
.otel(&[o("kube_prober.platform.memory.numa_used", "By", G)]);
pub const PLATFORM_VMSTAT: Family = counter(
    "kube_prober_platform_vmstat",
    "Counters of /proc/vmstat by key: pgfault, pgmajfault, pswpin, pswpout, oom_kill.",
    None,
)
.otel(&[o("kube_prober.platform.vmstat", "{event}", C)]);

pub const NODE_PRESSURE: Family = counter(
    "kube_prober_node_pressure_stalled_seconds",
    "Pressure stall time of the whole node (/proc/pressure/cpu, memory and io: total, some or full), read by the host usage source (node and host roles).",
    Some("seconds"),
)
.otel(&[o("kube_prober.node.pressure.stalled", "s", C)]);

/// This node's platform (step `Platform`).
pub const PLATFORM: &[Family] = &[
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
    NODE_PRESSURE,
];

/// The node's platform families (node role).
fn platform<V: Visitor>(w: &mut V, p: Option<&Platform>) {
    let empty = Platform::default();
    let p = p.unwrap_or(&empty);
    let node = p.node.as_str();
    let one = |v: Option<u32>| -> Vec<(Labels<'_>, f64)> {
        v.map(|v| (vec![("node", node)], f64::from(v)))
            .into_iter()
            .collect()
    };
    w.family(&PLATFORM_SOCKETS, &one(p.sockets));
    w.family(&PLATFORM_CORES, &one(p.cores));
    w.family(&PLATFORM_CPUS, &one(p.cpus));
    w.family(&PLATFORM_NUMA_NODES, &one(p.numa_nodes));
    let cpu_ids: Vec<String> = p
        .cpu_busy_seconds
        .iter()
        .map(|(c, _)| c.to_string())
        .collect();
    let rows: Vec<_> = p
        .cpu_busy_seconds
        .iter()
        .zip(&cpu_ids)
        .map(|((_, v), id)| (vec![("node", node), ("cpu", id.as_str())], *v))
        .collect();
    w.family(&PLATFORM_CPU_BUSY, &rows);
    let rows: Vec<_> = p
        .memory_usage_bytes
        .map(|v| (vec![("node", node)], v))
        .into_iter()
        .collect();
    w.family(&PLATFORM_MEMORY_USAGE, &rows);
    let ids: Vec<String> = p.numa_memory.iter().map(|n| n.node.to_string()).collect();
    let numa = |f: fn(&crate::model::NumaMemory) -> f64| -> Vec<(Labels<'_>, f64)> {
        p.numa_memory
            .iter()
            .zip(&ids)
            .map(|(n, id)| (vec![("node", node), ("numa_node", id.as_str())], f(n)))
            .collect()
    };
    w.family(&PLATFORM_NUMA_TOTAL, &numa(|n| n.total_bytes));
    w.family(&PLATFORM_NUMA_FREE, &numa(|n| n.free_bytes));
    w.family(
        &PLATFORM_NUMA_USED,
        &numa(|n| (n.total_bytes - n.free_bytes).max(0.0)),
    );
    let rows: Vec<_> = p
        .vmstat
        .iter()
        .map(|(k, v)| (vec![("node", node), ("key", *k)], *v))
        .collect();
    w.family(&PLATFORM_VMSTAT, &rows);
}

/// This node's pressure stall totals (host usage source).
fn pressure<V: Visitor>(w: &mut V, p: Option<&NodePressure>) {
    let rows: Vec<_> = p
        .into_iter()
        .flat_map(|p| {
            p.totals.iter().map(|t| {
                let labels = vec![
                    ("node", p.node.as_str()),
                    ("resource", t.resource),
                    ("kind", t.kind),
                ];
                (labels, t.seconds)
            })
        })
        .collect();
    w.family(&NODE_PRESSURE, &rows);
}

/// This node's platform: topology, CPU, memory per NUMA node and vmstat counters; and its
/// pressure stall totals.
pub fn visit_platform<V: Visitor>(w: &mut V, snap: &Snapshot) {
    platform(w, snap.platform.as_deref());
    pressure(w, snap.pressure.as_deref());
}
