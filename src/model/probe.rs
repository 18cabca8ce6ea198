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
