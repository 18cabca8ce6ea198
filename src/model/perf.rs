//! Per-pod perf counters (the node role's opt-in `--task-perf-events`): what the kernel's
//! `perf_event_open` counted for each pod cgroup, summed over CPUs, and the state of the
//! counters themselves. Plain data: the task source fills it, the hub stores it, outputs render it.

use std::sync::Arc;

use super::task::TaskPod;

/// What `--task-perf-events` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PerfMode {
    /// No perf counters (the default).
    #[default]
    Off,
    /// Hardware events where the kernel and the machine allow them, else software events.
    Auto,
    /// Hardware events only.
    Hardware,
    /// Software events only (they work in VMs).
    Software,
}

impl PerfMode {
    /// Parses `off`, `auto`, `hardware`, `software` (and `true`/`false` as `auto`/`off`).
    pub fn parse(s: &str) -> Option<PerfMode> {
        match s.trim().to_ascii_lowercase().as_str() {
            "off" | "false" | "0" | "no" | "none" => Some(PerfMode::Off),
            "auto" | "true" | "1" | "yes" | "on" => Some(PerfMode::Auto),
            "hardware" => Some(PerfMode::Hardware),
            "software" => Some(PerfMode::Software),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            PerfMode::Off => "off",
            PerfMode::Auto => "auto",
            PerfMode::Hardware => "hardware",
            PerfMode::Software => "software",
        }
    }
}

/// The set of events that is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PerfEventSet {
    /// cycles, instructions, cache references, cache misses.
    Hardware,
    /// task-clock, context switches, page faults.
    Software,
}

impl PerfEventSet {
    pub fn as_str(self) -> &'static str {
        match self {
            PerfEventSet::Hardware => "hardware",
            PerfEventSet::Software => "software",
        }
    }
}

/// A pod's counts since its counters were opened, summed over CPUs, each scaled by
/// time enabled / time running. `None`: not in the active event set.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct PerfCounts {
    pub cycles: Option<f64>,
    pub instructions: Option<f64>,
    pub cache_references: Option<f64>,
    pub cache_misses: Option<f64>,
    /// task-clock, in seconds.
    pub task_clock_seconds: Option<f64>,
    pub context_switches: Option<f64>,
    pub page_faults: Option<f64>,
}

/// One pod's perf values at one collection.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskPerfSample {
    pub pod: Arc<TaskPod>,
    pub counts: PerfCounts,
    /// Instructions per cycle over the last collection interval, from the pod's sums;
    /// `None` when no cycle was counted in it (or before the second collection).
    pub ipc: Option<f64>,
    /// Cache misses per 1000 instructions over the last interval, from the pod's sums;
    /// `None` when no instruction was counted in it.
    pub cache_mpki: Option<f64>,
    /// The largest time enabled / time running over the pod's CPU groups (1: never
    /// multiplexed); `None` when no group has run yet.
    pub scaling_factor: Option<f64>,
}

/// Every pod's perf values, and the counters' state. Replaces the previous set.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TaskPerfSet {
    pub node: String,
    /// The event set being counted; `None` when neither could be opened.
    pub event_set: Option<PerfEventSet>,
    pub tasks: Vec<TaskPerfSample>,
    /// Failed `perf_event_open` calls since start, by reason (sorted).
    pub open_failures: Vec<(&'static str, u64)>,
    /// Open perf file descriptors now (pods × CPUs × events).
    pub open_counters: u64,
}
