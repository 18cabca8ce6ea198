//! Logging: tracing with an env-filter, as text or JSON lines on stderr.

use tracing_subscriber::EnvFilter;

use crate::cli::LogFormat;
use crate::error::{Error, Result};

/// Installs the global subscriber. `level` is a level or a tracing filter directive list.
pub fn init(level: &str, format: LogFormat) -> Result<()> {
    let filter = EnvFilter::builder()
        .parse(level)
        .map_err(|e| Error::Config {
            option: "--log-level",
            value: level.to_string(),
            reason: e.to_string(),
        })?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let installed = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
    // Already installed (a test harness did it) is fine.
    let _ = installed;
    Ok(())
}
