//! The push runner's options: which push outputs run (`--sink`) and their shared schedule
//! (`--sink-interval`, `--sink-timeout`).

use std::time::Duration;

use crate::shared::error::Result;
use crate::shared::options::{duration, hint, invalid};

/// The push outputs and their schedule.
#[derive(Debug, Clone, Default, PartialEq, clap::Args, serde::Deserialize)]
#[serde(default)]
pub struct PushOptions {
    /// Push outputs to run, repeatable or comma-separated: `otlp`, `gcm` (Google Cloud
    /// Monitoring). [default: none]
    #[arg(
        long = "sink",
        env = "KUBE_PROBER_SINKS",
        value_name = "NAME",
        value_delimiter = ','
    )]
    pub sinks: Option<Vec<String>>,

    /// How often each push output pushes. [default: 60s]
    #[arg(long, env = "KUBE_PROBER_SINK_INTERVAL", value_name = "DURATION")]
    pub sink_interval: Option<String>,

    /// Deadline of one push, retries included; at most --sink-interval. [default: 30s, or the interval if shorter]
    #[arg(long, env = "KUBE_PROBER_SINK_TIMEOUT", value_name = "DURATION")]
    pub sink_timeout: Option<String>,
}

crate::merge_options!(PushOptions {
    sinks,
    sink_interval,
    sink_timeout
});

/// A push output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum SinkKind {
    Otlp,
    Gcm,
}

impl SinkKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SinkKind::Otlp => "otlp",
            SinkKind::Gcm => "gcm",
        }
    }
}

/// The push outputs to run, each once in the order given, and their schedule.
#[derive(Debug, Clone, PartialEq)]
pub struct PushConfig {
    pub kinds: Vec<SinkKind>,
    pub interval: Duration,
    pub timeout: Duration,
}

impl PushOptions {
    pub fn resolve(self) -> Result<PushConfig> {
        let kinds = sink_kinds(self.sinks.unwrap_or_default())?;
        let secs = Duration::from_secs;
        let interval_s = self.sink_interval.unwrap_or_else(|| "60s".into());
        let interval = duration("--sink-interval", &interval_s, secs(1), secs(3600))?;
        let timeout = match self.sink_timeout {
            Some(t) => {
                let d = duration("--sink-timeout", &t, Duration::from_millis(100), secs(3600))?;
                if d > interval {
                    return Err(invalid(
                        "--sink-timeout",
                        &t,
                        format!("must not exceed --sink-interval ({interval_s})"),
                    ));
                }
                d
            }
            None => interval.min(secs(30)),
        };
        Ok(PushConfig {
            kinds,
            interval,
            timeout,
        })
    }
}

/// `--sink`: the push outputs, each once, in the order given.
fn sink_kinds(names: Vec<String>) -> Result<Vec<SinkKind>> {
    let mut kinds = Vec::new();
    for name in names.iter().map(|s| s.trim()).filter(|s| !s.is_empty()) {
        let kind = match name.to_ascii_lowercase().as_str() {
            "otlp" => SinkKind::Otlp,
            "gcm" | "cloud-monitoring" | "stackdriver" => SinkKind::Gcm,
            _ => {
                return Err(invalid(
                    "--sink",
                    name,
                    format!(
                        "unknown sink (known: otlp, gcm){}",
                        hint(name, ["otlp", "gcm", "cloud-monitoring", "stackdriver"])
                    ),
                ));
            }
        };
        if !kinds.contains(&kind) {
            kinds.push(kind);
        }
    }
    Ok(kinds)
}
