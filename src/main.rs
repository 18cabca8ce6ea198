use std::process::ExitCode;

use clap::Parser;
use kube_prober::telemetry::{self, LogGuard};
use kube_prober::{app, cli::Cli, config::Config, subcommand};

/// glibc's allocator, told to keep less: at 5,000 nodes the tick's transient buffers otherwise
/// stay resident as fragmented free space in one arena per thread (docs/benchmarks.md).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod heap {
    /// Two arenas instead of up to eight per core; before any other thread starts.
    pub fn limit_arenas() {
        // SAFETY: mallopt only sets a tunable of glibc's allocator; it is called before the
        // runtime starts any thread, and M_ARENA_MAX takes any positive value.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 2);
        }
    }

    /// Returns whole free pages of every arena to the kernel.
    pub fn trim() {
        // SAFETY: malloc_trim is thread-safe (it takes each arena's lock) and only releases
        // memory the allocator holds free; no pointer of ours is involved.
        unsafe {
            libc::malloc_trim(0);
        }
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
const AFTER_TICK: Option<fn()> = Some(heap::trim);
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
const AFTER_TICK: Option<fn()> = None;

fn main() -> ExitCode {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    heap::limit_arenas();
    // Bad flags: clap prints the problem and exits with 2.
    let mut cli = Cli::parse();
    let command = cli.command.take();
    let cfg = match Config::load(cli) {
        Ok(c) => c,
        Err(e) => return fail(&e, &LogGuard::direct()),
    };
    // From here on every line to stderr goes through the log queue: it never blocks on a pipe
    // nobody reads and never panics on a closed one. Dropped last, it flushes (bounded).
    let logs = match telemetry::init(&cfg.log_level, cfg.log_format) {
        Ok(g) => g,
        Err(e) => return fail(&e, &LogGuard::direct()),
    };
    // One TLS crypto provider for every client (see build notes: kube and gcloud-sdk would
    // otherwise disagree at run time). Already installed is fine.
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();

    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            logs.line(&format!("kube-prober: cannot start the async runtime: {e}"));
            return ExitCode::from(1);
        }
    };
    if let Some(command) = command {
        return match runtime.block_on(subcommand::run(command, &cfg)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(&e, &logs),
        };
    }
    match runtime.block_on(app::run(cfg, AFTER_TICK)) {
        Ok(()) => ExitCode::SUCCESS,
        // Said once, as a plain line: a log filter (`--log-level off`) must not hide why we stop.
        Err(e) => fail(&e, &logs),
    }
}

fn fail(e: &kube_prober::Error, logs: &LogGuard) -> ExitCode {
    logs.line(&format!("kube-prober: {e}"));
    ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(1))
}
