//! Logging: tracing with an env-filter, as text or JSON lines on stderr.
//!
//! Two rules make logging safe whatever stderr is (docs/configuration.md, "Configuration"):
//! - colour escapes only when stderr is a terminal and `NO_COLOR` is unset or empty, so
//!   `kubectl logs` and log collectors get plain text;
//! - logging never blocks or panics: lines go through a bounded queue to one writer thread;
//!   when stderr is not read (a full pipe) lines are dropped and counted, when it is closed
//!   write errors are ignored. A slow or gone reader cannot stop the runtime or SIGTERM.

use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::time::Duration;

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;

use crate::shared::error::{Error, Result};
use clap::ValueEnum;
use serde::Deserialize;

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// The level names `--log-level` accepts (also as `target=LEVEL`).
pub const LEVELS: [&str; 6] = ["trace", "debug", "info", "warn", "error", "off"];

/// Lines waiting for the writer thread at most; more are dropped (and counted).
const QUEUE_LINES: usize = 1024;
/// How long exit waits for queued lines to reach stderr.
const FLUSH_WAIT: Duration = Duration::from_millis(500);

/// Words other tools use for a level, and ours.
const LEVEL_ALIASES: [(&str, &str); 10] = [
    ("verbose", "debug"),
    ("warning", "warn"),
    ("fatal", "error"),
    ("critical", "error"),
    ("crit", "error"),
    ("err", "error"),
    ("all", "trace"),
    ("none", "off"),
    ("quiet", "off"),
    ("silent", "off"),
];

fn is_level(s: &str) -> bool {
    let s = s.trim().to_ascii_lowercase();
    LEVELS.contains(&s.as_str()) || matches!(s.as_str(), "0" | "1" | "2" | "3" | "4" | "5")
}

fn unknown_level(value: &str, word: &str) -> Error {
    let lower = word.trim().to_ascii_lowercase();
    let hint = LEVEL_ALIASES
        .iter()
        .find(|(alias, _)| *alias == lower)
        .map(|(_, level)| *level)
        .or_else(|| crate::shared::suggest::did_you_mean(word, LEVELS))
        .map(|l| format!("; did you mean `{l}`?"))
        .unwrap_or_default();
    Error::Config {
        option: "--log-level",
        value: value.to_string(),
        reason: format!(
            "unknown level `{word}` (valid levels: {}; or per target, e.g. kube_prober=debug,warn){hint}",
            LEVELS.join(", ")
        ),
    }
}

/// Parses `--log-level`: a level, or a comma-separated list of tracing directives. A bare word
/// must be a level (tracing would take `verbose` as a target name and log nothing), and the
/// level after `=` must be one too.
pub fn parse_filter(level: &str) -> Result<EnvFilter> {
    if level.trim().is_empty() {
        return Err(Error::Config {
            option: "--log-level",
            value: level.to_string(),
            reason: format!("must not be empty (valid levels: {})", LEVELS.join(", ")),
        });
    }
    for directive in level.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        if directive.ends_with(']') {
            // `target[span{field=value}]`: every level; tracing's parser checks the rest.
            continue;
        }
        let word = directive.rsplit_once('=').map_or(directive, |(_, lvl)| lvl);
        if word.trim().is_empty() {
            return Err(Error::Config {
                option: "--log-level",
                value: level.to_string(),
                reason: format!(
                    "`{directive}` has no level (valid levels: {})",
                    LEVELS.join(", ")
                ),
            });
        }
        if !is_level(word) {
            return Err(unknown_level(level, word));
        }
    }
    EnvFilter::builder()
        .parse(level)
        .map_err(|e| Error::Config {
            option: "--log-level",
            value: level.to_string(),
            reason: format!(
                "{e} (valid levels: {}; or per target, e.g. kube_prober=debug,warn)",
                LEVELS.join(", ")
            ),
        })
}

/// Colour escapes in text logs: only on a terminal, and never with `NO_COLOR` set
/// (https://no-color.org: any non-empty value).
pub fn use_colour(stderr_is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    stderr_is_terminal && no_color.is_none_or(|v| v.is_empty())
}

struct Queue {
    tx: SyncSender<Vec<u8>>,
    dropped: AtomicU64,
}

/// The writer the fmt layer gets for each event: the line collects here and is queued whole
/// when the layer drops it.
pub struct QueuedLine<'a> {
    queue: &'a Queue,
    buf: Vec<u8>,
}

impl Write for QueuedLine<'_> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for QueuedLine<'_> {
    fn drop(&mut self) {
        if self.buf.is_empty() {
            return;
        }
        let line = std::mem::take(&mut self.buf);
        match self.queue.tx.try_send(line) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.queue.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// The `MakeWriter` over the queue.
#[derive(Clone)]
pub struct QueueWriter(Arc<Queue>);

impl<'a> MakeWriter<'a> for QueueWriter {
    type Writer = QueuedLine<'a>;
    fn make_writer(&'a self) -> Self::Writer {
        QueuedLine {
            queue: &self.0,
            buf: Vec::new(),
        }
    }
}

/// Keeps the log writer; on drop, waits a bounded time for queued lines to reach stderr.
pub struct LogGuard {
    queue: Option<Arc<Queue>>,
    done: Option<Receiver<()>>,
}

impl LogGuard {
    /// Writes one line to stderr the safe way: through the queue when logging runs, else
    /// directly, ignoring a closed stderr. For the last words of `main`.
    pub fn line(&self, text: &str) {
        let line = format!("{text}\n").into_bytes();
        match &self.queue {
            Some(q) => {
                if q.tx.try_send(line).is_err() {
                    q.dropped.fetch_add(1, Ordering::Relaxed);
                }
            }
            None => {
                let _ = std::io::stderr().write_all(&line);
            }
        }
    }

    /// Lines dropped so far because stderr was not keeping up.
    pub fn dropped(&self) -> u64 {
        self.queue
            .as_ref()
            .map_or(0, |q| q.dropped.load(Ordering::Relaxed))
    }

    /// No logger of ours (before `init`, or a test harness installed its own).
    pub fn direct() -> Self {
        LogGuard {
            queue: None,
            done: None,
        }
    }
}

impl Drop for LogGuard {
    fn drop(&mut self) {
        // The writer thread ends when every sender is gone; the subscriber keeps one, so wait
        // for the queue to drain instead, bounded (stderr may be a pipe nobody reads).
        let Some(queue) = self.queue.take() else {
            return;
        };
        // An empty line marks "everything before me is written".
        if queue.tx.try_send(Vec::new()).is_ok()
            && let Some(done) = &self.done
        {
            let _ = done.recv_timeout(FLUSH_WAIT);
        }
    }
}

fn spawn_writer(rx: Receiver<Vec<u8>>, queue: Arc<Queue>) -> Option<Receiver<()>> {
    let (done_tx, done_rx) = sync_channel::<()>(1);
    let spawned = std::thread::Builder::new()
        .name("log-writer".into())
        .spawn(move || {
            let mut reported = 0u64;
            for line in rx {
                if line.is_empty() {
                    let _ = done_tx.try_send(());
                    continue;
                }
                let mut err = std::io::stderr().lock();
                // A closed stderr (EPIPE) is ignored: there is nobody to tell.
                let _ = err.write_all(&line);
                let dropped = queue.dropped.load(Ordering::Relaxed);
                if dropped > reported {
                    let _ = writeln!(
                        err,
                        "kube-prober: {} log lines dropped: stderr was not read fast enough",
                        dropped - reported
                    );
                    reported = dropped;
                }
            }
        });
    spawned.ok().map(|_| done_rx)
}

/// Installs the global subscriber. `level` is a level or a tracing filter directive list.
pub fn init(level: &str, format: LogFormat) -> Result<LogGuard> {
    let filter = parse_filter(level)?;
    let (tx, rx) = sync_channel(QUEUE_LINES);
    let queue = Arc::new(Queue {
        tx,
        dropped: AtomicU64::new(0),
    });
    let Some(done) = spawn_writer(rx, queue.clone()) else {
        // No thread: log straight to stderr (never expected; still never panics on EPIPE).
        let builder = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(false)
            .log_internal_errors(false)
            .with_writer(std::io::stderr);
        let _ = match format {
            LogFormat::Text => builder.try_init(),
            LogFormat::Json => builder.json().flatten_event(true).try_init(),
        };
        return Ok(LogGuard::direct());
    };
    let colour = format == LogFormat::Text
        && use_colour(
            std::io::stderr().is_terminal(),
            std::env::var_os("NO_COLOR").as_deref(),
        );
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour)
        // Its own eprintln! on a failed write would panic on a closed stderr.
        .log_internal_errors(false)
        .with_writer(QueueWriter(queue.clone()));
    let installed = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
    // Already installed (a test harness did it) is fine.
    let _ = installed;
    Ok(LogGuard {
        queue: Some(queue),
        done: Some(done),
    })
}

/// Logging: `--log-level` and `--log-format`.
#[derive(Debug, Clone, Default, PartialEq, clap::Args, serde::Deserialize)]
#[serde(default)]
pub struct LogOptions {
    /// Log level or tracing filter, e.g. `info`, `debug`, `kube_prober=debug,warn`. [default: info]
    #[arg(long, env = "LOG_LEVEL", value_name = "LEVEL")]
    pub log_level: Option<String>,

    /// Log format. [default: text]
    #[arg(long, env = "KUBE_PROBER_LOG_FORMAT", value_enum)]
    pub log_format: Option<LogFormat>,
}

crate::merge_options!(LogOptions {
    log_level,
    log_format
});

/// The logs as resolved: what [`init`] takes.
#[derive(Debug, Clone, PartialEq)]
pub struct LogConfig {
    /// A level or a list of tracing directives (checked).
    pub level: String,
    pub format: LogFormat,
}

impl LogOptions {
    /// The level or filter (checked) and the format.
    pub fn resolve(self) -> Result<LogConfig, crate::shared::error::Error> {
        let level = self.log_level.unwrap_or_else(|| "info".into());
        parse_filter(&level)?;
        Ok(LogConfig {
            level,
            format: self.log_format.unwrap_or_default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_and_filters() {
        for ok in [
            "info",
            "DEBUG",
            "warn,kube_prober=debug",
            "kube_prober=trace",
            "kube=off,info",
            "3",
            "kube_prober[tick]=debug",
        ] {
            assert!(parse_filter(ok).is_ok(), "{ok}");
        }
        let e = parse_filter("verbose").unwrap_err().to_string();
        assert!(e.contains("--log-level") && e.contains("'verbose'"), "{e}");
        assert!(
            e.contains("trace, debug, info, warn, error, off"),
            "lists the levels: {e}"
        );
        assert!(e.contains("did you mean `debug`"), "{e}");
        let e = parse_filter("inof").unwrap_err().to_string();
        assert!(e.contains("did you mean `info`"), "{e}");
        let e = parse_filter("kube_prober=loud").unwrap_err().to_string();
        assert!(e.contains("unknown level `loud`"), "{e}");
        let e = parse_filter("warning,kube=debug").unwrap_err().to_string();
        assert!(e.contains("did you mean `warn`"), "{e}");
        assert!(parse_filter(" ").is_err());
        assert!(parse_filter("=?=").is_err());
    }

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        use std::ffi::OsStr;
        assert!(use_colour(true, None));
        assert!(use_colour(true, Some(OsStr::new(""))));
        assert!(!use_colour(true, Some(OsStr::new("1"))));
        assert!(!use_colour(false, None));
    }

    #[test]
    fn a_full_queue_drops_and_counts_never_blocks() {
        // No writer thread: nothing drains, so the queue fills.
        let (tx, _rx) = sync_channel(2);
        let queue = Arc::new(Queue {
            tx,
            dropped: AtomicU64::new(0),
        });
        let w = QueueWriter(queue.clone());
        for _ in 0..5 {
            let mut line = w.make_writer();
            line.write_all(b"x\n").unwrap();
        }
        assert_eq!(queue.dropped.load(Ordering::Relaxed), 3);
    }
}
