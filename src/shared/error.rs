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
    #[error("config file {path}: {source}")]
    ConfigFile {
        path: PathBuf,
        #[source]
        source: Cause,
    },

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
    #[error("{what}: {source}")]
    Http {
        what: String,
        #[source]
        source: Cause,
    },

    /// Talking to the Kubernetes API failed (config, client, request).
    #[error("{what}: {source}")]
    Kube {
        what: String,
        #[source]
        source: Cause,
    },

    /// A role that this build cannot run.
    #[error("role '{role}' is not available: {reason}")]
    RoleUnavailable { role: String, reason: String },

    /// A peer's answer arrived but could not be decoded (invalid JSON, an unexpected shape).
    #[error("{what}: {source}")]
    Parse {
        what: String,
        #[source]
        source: Cause,
    },

    /// An answer from outside the process was larger than `--max-response-bytes`.
    #[error("{what}: {source}")]
    TooLarge {
        what: String,
        #[source]
        source: Oversize,
    },

    /// A source or operation ran past its deadline.
    #[error("{what} timed out after {after:?}")]
    Timeout {
        what: String,
        after: std::time::Duration,
    },
}

/// A boxed error of any type: [`Cause::Other`] and [`Cause::Context`] keep the concrete type
/// under it (`downcast_ref` finds it while walking [`std::error::Error::source`]).
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What lies under an [`Error::Http`], [`Error::Kube`] or [`Error::Parse`]: the typed error of
/// the library that failed, or a fact of ours. Its `Display` is the text the message has
/// always had; code that classifies a failure matches on this enum or walks the
/// [`std::error::Error::source`] chain with `downcast_ref`, never reads the text.
#[derive(Debug, thiserror::Error)]
pub enum Cause {
    /// An error of another library (reqwest, serde_json, kube's config, gcloud-sdk, ...): its
    /// own text.
    #[error("{0}")]
    Other(#[source] BoxError),
    /// An error of another library, shown with its whole chain (`a: b: c`, a cause whose text
    /// is already there left out).
    #[error("{}", chain(.0.as_ref()))]
    Chain(#[source] BoxError),
    /// What we were doing when `source` happened: `timed out: ...`, `reading the body: ...`.
    #[error("{context}: {source}")]
    Context {
        context: String,
        #[source]
        source: BoxError,
    },
    /// The Kubernetes client's error: the API server's `Status` (`status 403 Forbidden: ...`),
    /// or the error's chain.
    #[error("{}", kube_text(.0))]
    KubeClient(#[source] kube::Error),
    /// A peer answered with a status that is not success, and the start of its body.
    #[error("status {code}: {body}")]
    Status { code: u16, body: String },
    /// A gRPC call failed.
    #[error("{0}")]
    Grpc(#[source] GrpcFailure),
    /// A fact of ours with no error under it (`no Kubernetes client was built`).
    #[error("{0}")]
    Message(String),
}

impl Cause {
    /// `e` kept with its type, shown as its own text.
    pub fn other(e: impl Into<BoxError>) -> Self {
        Cause::Other(e.into())
    }

    /// `e` kept with its type, shown with its chain.
    pub fn chain(e: impl Into<BoxError>) -> Self {
        Cause::Chain(e.into())
    }

    /// `e` kept with its type, shown after `context` and `: `.
    pub fn context(context: impl Into<String>, e: impl Into<BoxError>) -> Self {
        Cause::Context {
            context: context.into(),
            source: e.into(),
        }
    }

    pub fn message(m: impl Into<String>) -> Self {
        Cause::Message(m.into())
    }
}

/// What was larger than `--max-response-bytes`.
#[derive(Debug, thiserror::Error)]
pub enum Oversize {
    /// A whole body (or one watch event) past the client's cap.
    #[error("{0}")]
    Cap(#[from] crate::shared::limit::TooLarge),
    /// One item of a streamed list (`Node 3: 70000 bytes, over the 65536-byte limit`).
    #[error("{kind} {index}: {len} bytes, over the {limit}-byte limit (--max-response-bytes)")]
    Item {
        kind: &'static str,
        index: u64,
        len: u64,
        limit: usize,
    },
}

/// A gRPC call's status, shown as its code in snake_case and its message; for one of a run of
/// deletions, with what the run had deleted before it. Its source is the [`tonic::Status`].
#[derive(Debug)]
pub struct GrpcFailure {
    pub status: Box<tonic::Status>,
    pub deleted_before: Option<Vec<String>>,
}

impl GrpcFailure {
    pub fn new(status: tonic::Status) -> Self {
        GrpcFailure {
            status: Box::new(status),
            deleted_before: None,
        }
    }

    /// The failure of one of a run of calls, after `done` succeeded.
    pub fn after(mut self, done: Vec<String>) -> Self {
        self.deleted_before = Some(done);
        self
    }
}

impl std::fmt::Display for GrpcFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let code = grpc_code_name(self.status.code());
        write!(f, "{code}: {}", self.status.message())?;
        write!(f, "{}", DeletedBefore(self.deleted_before.as_deref()))
    }
}

impl std::error::Error for GrpcFailure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(self.status.as_ref())
    }
}

/// ` (deleted before: a, b)`, ` (deleted before: none)`, or nothing.
struct DeletedBefore<'a>(Option<&'a [String]>);

impl std::fmt::Display for DeletedBefore<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            None => Ok(()),
            Some([]) => f.write_str(" (deleted before: none)"),
            Some(done) => write!(f, " (deleted before: {})", done.join(", ")),
        }
    }
}

/// `e` and its sources as `a: b: c`, a source whose text is already there left out.
pub fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = c.source();
    }
    s
}

/// A kube error's text: the API server's `Status` as `status <code> <reason>: <message>`,
/// anything else as its chain.
fn kube_text(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => {
            let mut r = format!("status {}", s.code);
            if !s.reason.is_empty() {
                r.push(' ');
                r.push_str(&s.reason);
            }
            if !s.message.is_empty() {
                r.push_str(": ");
                r.push_str(&s.message);
            }
            r
        }
        other => chain(other),
    }
}

/// A gRPC code in snake_case: the `reason` of failures.
pub fn grpc_code_name(code: tonic::Code) -> &'static str {
    use tonic::Code;
    match code {
        Code::Ok => "ok",
        Code::Cancelled => "cancelled",
        Code::Unknown => "unknown",
        Code::InvalidArgument => "invalid_argument",
        Code::DeadlineExceeded => "deadline_exceeded",
        Code::NotFound => "not_found",
        Code::AlreadyExists => "already_exists",
        Code::PermissionDenied => "permission_denied",
        Code::ResourceExhausted => "resource_exhausted",
        Code::FailedPrecondition => "failed_precondition",
        Code::Aborted => "aborted",
        Code::OutOfRange => "out_of_range",
        Code::Unimplemented => "unimplemented",
        Code::Internal => "internal",
        Code::Unavailable => "unavailable",
        Code::DataLoss => "data_loss",
        Code::Unauthenticated => "unauthenticated",
    }
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

    /// An [`Error::Http`] about `what`.
    pub fn http(what: impl Into<String>, source: Cause) -> Self {
        Error::Http {
            what: what.into(),
            source,
        }
    }

    /// An [`Error::Kube`] about `what`.
    pub fn kube(what: impl Into<String>, source: Cause) -> Self {
        Error::Kube {
            what: what.into(),
            source,
        }
    }

    /// An [`Error::Parse`] about `what`.
    pub fn parse(what: impl Into<String>, source: Cause) -> Self {
        Error::Parse {
            what: what.into(),
            source,
        }
    }

    /// An [`Error::TooLarge`] about `what`.
    pub fn too_large(what: impl Into<String>, source: impl Into<Oversize>) -> Self {
        Error::TooLarge {
            what: what.into(),
            source: source.into(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    /// The messages read as they did when causes were strings.
    #[test]
    fn the_text_is_what_it_was() {
        let json = serde_json::from_str::<serde_json::Value>("{").unwrap_err();
        let e = Error::parse("GET /x", Cause::context("not a PodList", json));
        assert_eq!(
            e.to_string(),
            "GET /x: not a PodList: EOF while parsing an object at line 1 column 1"
        );
        let e = Error::too_large(
            "LIST nodes",
            Oversize::Item {
                kind: "Node",
                index: 3,
                len: 70_000,
                limit: 65_536,
            },
        );
        assert_eq!(
            e.to_string(),
            "LIST nodes: Node 3: 70000 bytes, over the 65536-byte limit (--max-response-bytes)"
        );
        let status = Cause::Status {
            code: 503,
            body: "down".into(),
        };
        assert_eq!(Error::http("q", status).to_string(), "q: status 503: down");
        let api = kube::core::Status::failure("no", "Forbidden").with_code(403);
        let e = Error::http(
            "LIST pods",
            Cause::KubeClient(kube::Error::Api(api.boxed())),
        );
        assert_eq!(e.to_string(), "LIST pods: status 403 Forbidden: no");
    }

    /// A failed delete says what the run deleted before it, and keeps the gRPC status (its
    /// code readable by type).
    #[test]
    fn a_grpc_failure_keeps_its_status_and_what_was_done_before() {
        let denied = || tonic::Status::permission_denied("no");
        let first = Error::http(
            "delete a",
            Cause::Grpc(GrpcFailure::new(denied()).after(vec![])),
        );
        assert_eq!(
            first.to_string(),
            "delete a: permission_denied: no (deleted before: none)"
        );
        let later = GrpcFailure::new(denied()).after(vec!["a".into(), "b".into()]);
        let e = Error::http("delete c", Cause::Grpc(later));
        assert_eq!(
            e.to_string(),
            "delete c: permission_denied: no (deleted before: a, b)"
        );
        let list = Error::http("list", Cause::Grpc(GrpcFailure::new(denied())));
        assert_eq!(list.to_string(), "list: permission_denied: no");
        let mut cur = e.source();
        let mut code = None;
        while let Some(c) = cur {
            if let Some(s) = c.downcast_ref::<tonic::Status>() {
                code = Some(s.code());
            }
            cur = c.source();
        }
        assert_eq!(code, Some(tonic::Code::PermissionDenied));
    }

    /// Boxed causes keep their concrete type one step down the chain.
    #[test]
    fn boxed_causes_are_found_by_type() {
        let io = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let e = Error::kube("in-cluster config", Cause::context("reading", io));
        let cause = e.source().expect("the cause");
        assert!(cause.is::<Cause>());
        let io = cause
            .source()
            .and_then(|s| s.downcast_ref::<std::io::Error>());
        assert_eq!(
            io.map(std::io::Error::kind),
            Some(std::io::ErrorKind::ConnectionRefused)
        );
        let cap = crate::shared::limit::TooLarge {
            limit: 10,
            what: "response body",
        };
        let e = Error::too_large("GET /x", cap.clone());
        assert_eq!(crate::shared::limit::find_too_large(&e), Some(&cap));
        assert_eq!(e.metric_label(), "too_large");
    }
}
