//! The result of one probe run.

use std::time::{Duration, SystemTime};

#[derive(Debug, Clone, PartialEq)]
pub struct ProbeOutcome {
    /// Probe kind, e.g. `kubelet_healthz`.
    pub probe: String,
    /// What was probed (a node name, a URL, an addon); low cardinality by construction.
    pub target: String,
    pub at: SystemTime,
    pub duration: Duration,
    /// `None` on success, else a short reason such as `timeout`, `refused`, `status_503`.
    pub failure: Option<String>,
}

/// Upper bounds (seconds) of the probe duration histogram buckets; `+Inf` is implied.
pub const PROBE_BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];
