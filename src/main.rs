use std::process::ExitCode;

use clap::Parser;
use kube_prober::app::{self, subcommand};
use kube_prober::config::{Config, cli::Cli};
use kube_prober::shared::telemetry::{self, LogGuard};

mod memory;

fn main() -> ExitCode {
    // Bad flags: clap prints the problem and exits with 2.
    let mut cli = Cli::parse();
    let command = cli.command.take();
    let cfg = match Config::load(cli) {
        Ok(c) => c,
        Err(e) => return fail(&e, &LogGuard::direct()),
    };
    // Still the only thread: the log writer and the runtime start below.
    memory::limit_arenas(cfg.role);
    // From here on every line to stderr goes through the log queue: it never blocks on a pipe
    // nobody reads and never panics on a closed one. Dropped last, it flushes (bounded).
    let logs = match telemetry::init(&cfg.log.level, cfg.log.format) {
        Ok(g) => g,
        Err(e) => return fail(&e, &LogGuard::direct()),
    };
    // One TLS crypto provider for every client (see build notes: kube and gcloud-sdk would
    // otherwise disagree at run time). Already installed is fine.
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();

    let runtime = match runtime_builder(cfg.role).enable_all().build() {
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
    // Flag, environment and config-file parsing and the logger's set-up are done: their code
    // (clap, the config file's YAML) is not needed again. Handing it back before the roles
    // start keeps it out of the start-up peak (the node role's VmHWM budget).
    memory::release_startup_pages();
    let hooks = app::Hooks {
        after_tick: memory::AFTER_TICK,
        after_setup: memory::AFTER_SETUP,
    };
    match runtime.block_on(app::run_with(cfg, hooks)) {
        Ok(()) => ExitCode::SUCCESS,
        // Said once, as a plain line: a log filter (`--log-level off`) must not hide why we stop.
        Err(e) => fail(&e, &logs),
    }
}

/// Async workers for the node role: one, on any node size (tokio's default is one per CPU:
/// 64 threads and their stacks on a 64-core node). Its async work is light (the watches of
/// one node and its pods, scrapes served from rendered bytes, node probes); the collection,
/// the tick's render and gzip run on the blocking pool.
const NODE_WORKERS: usize = 1;
/// Blocking threads for the node role (tokio's default allows 512): a collection, a tick's
/// render and a gzip answer can run at once with room for a slow DNS lookup (tokio and
/// hyper resolve names on this pool); a thread is only started when needed and leaves after
/// 10 s idle (the node role's RSS: each one keeps 80-100 KiB of touched stack).
const NODE_MAX_BLOCKING: usize = 4;

/// The runtime: the node role with [`NODE_WORKERS`] workers and at most [`NODE_MAX_BLOCKING`]
/// blocking threads, the other roles with tokio's defaults.
fn runtime_builder(role: Option<kube_prober::k8s::role::Role>) -> tokio::runtime::Builder {
    let mut b = tokio::runtime::Builder::new_multi_thread();
    if role == Some(kube_prober::k8s::role::Role::Node) {
        b.worker_threads(NODE_WORKERS)
            .max_blocking_threads(NODE_MAX_BLOCKING);
    }
    b
}

fn fail(e: &kube_prober::Error, logs: &LogGuard) -> ExitCode {
    logs.line(&format!("kube-prober: {e}"));
    ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(1))
}
