//! What the outputs that push (OTLP, Cloud Monitoring) report about themselves.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

/// How one push went.
#[derive(Debug, Clone, PartialEq)]
pub struct SinkPush {
    pub at: SystemTime,
    pub duration: Duration,
    /// Points and requests sent, failed pushes included (a partial failure still sent some).
    pub points: u64,
    pub requests: u64,
    /// `None` on success, else a low-cardinality reason (`timeout`, `unavailable`, ...).
    pub failure: Option<String>,
}

/// This replica's part in leader election (cluster role with push outputs).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Leadership {
    /// `namespace/name` of the Lease.
    pub lease: String,
    pub leading: bool,
    /// Times this replica became the leader.
    pub acquired: u64,
}

/// Counters of one sink.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SinkStatus {
    pub name: String,
    pub pushes: u64,
    pub failures: BTreeMap<String, u64>,
    /// Ticks skipped because the previous push was still running.
    pub skipped: u64,
    pub points: u64,
    pub requests: u64,
    pub last_duration: Duration,
    pub last_success: Option<SystemTime>,
}
