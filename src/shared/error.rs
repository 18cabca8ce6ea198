//! The library's one error type. Every variant carries the context a reader needs at 3 a.m.

use std::path::PathBuf;

/// `Result` with this crate's [`Error`] as the default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A configuration value (flag, environment variable or config-file key) is invalid.
    #[error("invalid value '{value}' for {option}: {reason}")]
    Config {
        option: &'static str,
        value: String,
        reason: String,
    },

    /// The config file could not be read or parsed.
    #[error("config file {path}: {reason}")]
    ConfigFile { path: PathBuf, reason: String },

    /// Reading a file (procfs, cgroup, token, CA) failed.
    #[error("reading {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// A procfs file had content we could not parse.
    #[error("parsing procfs: {0}")]
    Procfs(#[from] ParseError),

    /// The HTTP listener could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: String,
        #[source]
        source: std::io::Error,
    },

    /// An HTTP request to a peer (backend, watcher) failed.
    #[error("{what}: {reason}")]
    Http { what: String, reason: String },

    /// Talking to the Kubernetes API failed (config, client, request).
    #[error("{what}: {reason}")]
    Kube { what: String, reason: String },

    /// A role that this build cannot run.
    #[error("role '{role}' is not available: {reason}")]
    RoleUnavailable { role: String, reason: String },

    /// A peer's answer arrived but could not be decoded (invalid JSON, an unexpected shape).
    #[error("{what}: {reason}")]
    Parse { what: String, reason: String },

    /// An answer from outside the process was larger than `--max-response-bytes`.
    #[error("{what}: {reason}")]
    TooLarge { what: String, reason: String },

    /// A source or operation ran past its deadline.
    #[error("{what} timed out after {after:?}")]
    Timeout {
        what: String,
        after: std::time::Duration,
    },
}

/// Every `reason` a failed source run can carry in `kube_prober_source_errors_total` (the
/// [`Error::metric_label`] of the errors fetchers return). Add a label here when a fetcher
/// starts returning a new kind of error; docs/metrics.md must list exactly these
/// (tests/repo/docs.rs provokes each one from real input).
pub const SOURCE_ERROR_REASONS: &[&str] = &["http", "io", "parse", "timeout", "too_large"];

impl Error {
    /// A short, low-cardinality label for this error, used as the `reason` label of error counters.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Config { .. } | Error::ConfigFile { .. } => "config",
            Error::Io { .. } => "io",
            Error::Procfs(_) => "parse",
            Error::Listen { .. } => "listen",
            Error::Http { .. } => "http",
            Error::Kube { .. } => "kube",
            Error::RoleUnavailable { .. } => "role",
            Error::Timeout { .. } => "timeout",
            Error::Parse { .. } => "parse",
            Error::TooLarge { .. } => "too_large",
        }
    }

    /// Exit code for `main`: 2 for anything the user can fix in flags or config, 1 otherwise.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Config { .. } | Error::ConfigFile { .. } | Error::RoleUnavailable { .. } => 2,
            _ => 1,
        }
    }
}

/// Why a procfs file could not be parsed.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ParseError {
    /// `file` is e.g. "/proc/stat"-style short name: "stat", "meminfo", "net/dev", "diskstats"
    #[error("{file}: line {line}: {what}")]
    Line {
        file: &'static str,
        line: usize,
        what: String,
    },
    #[error("{file}: {what}")]
    Missing {
        file: &'static str,
        what: &'static str,
    },
}
