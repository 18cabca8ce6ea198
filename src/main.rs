use std::process::ExitCode;

use clap::Parser;
use kube_prober::{app, cli::Cli, config::Config, subcommand, telemetry};

fn main() -> ExitCode {
    // Bad flags: clap prints the problem and exits with 2.
    let mut cli = Cli::parse();
    let command = cli.command.take();
    let cfg = match Config::load(cli) {
        Ok(c) => c,
        Err(e) => return fail(&e),
    };
    if let Err(e) = telemetry::init(&cfg.log_level, cfg.log_format) {
        return fail(&e);
    }
    // One TLS crypto provider for every client (see build notes: kube and gcloud-sdk would
    // otherwise disagree at run time). Already installed is fine.
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();

    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("kube-prober: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    if let Some(command) = command {
        return match runtime.block_on(subcommand::run(command, &cfg)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(&e),
        };
    }
    match runtime.block_on(app::run(cfg)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "kube-prober stopped");
            fail(&e)
        }
    }
}

fn fail(e: &kube_prober::Error) -> ExitCode {
    eprintln!("kube-prober: {e}");
    ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(1))
}
