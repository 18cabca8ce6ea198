//! A stand-in Kubernetes API server with a generated GKE-like cluster, for benchmarks and demos.
//!
//! ```text
//! cargo run --release --example fake_apiserver -- --nodes 5000 --pods-per-node 30 --listen 127.0.0.1:0
//! ```
//!
//! It prints `url: <server>` and `kubeconfig: <path>` (a kubeconfig it wrote for that server)
//! once the cluster is generated, then serves until Ctrl-C or SIGTERM. LIST, WATCH (with
//! bookmarks, resumption and 410s), field and label selectors, Leases and metrics.k8s.io behave
//! as described in `tests/support/apiserver.rs`; `--churn` keeps modifying pods.

use support::apiserver;

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use apiserver::{GenerateOptions, Options};
use clap::Parser;

#[derive(Debug, Parser)]
#[command(about = "A stand-in Kubernetes API server with a generated cluster")]
struct Args {
    /// Nodes to generate (3 zones, 2 node pools).
    #[arg(long, default_value_t = 100)]
    nodes: usize,
    /// Pods per node: 4 addon DaemonSet pods, the rest from Deployments.
    #[arg(long, default_value_t = 30)]
    pods_per_node: usize,
    /// Address to listen on; port 0 picks a free one.
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Where to write the kubeconfig (default: a file in the temp dir, removed on exit).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Pod changes per second in the background (restarts, phase flips); 0 for none.
    #[arg(long, default_value_t = 0.0)]
    churn: f64,
    /// BOOKMARK interval for watches that ask for them (the real server: about a minute).
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    bookmark_interval: Duration,
    /// Events kept per kind for watch resumption; older resource versions get 410 Gone.
    #[arg(long, default_value_t = 10_000)]
    history: usize,
    /// Added latency for every resource request.
    #[arg(long, value_parser = humantime::parse_duration)]
    latency: Option<Duration>,
    /// Also generate a PodMetrics per pod (metrics.k8s.io).
    #[arg(long)]
    pod_metrics: bool,
    /// Generate no NodeMetrics.
    #[arg(long)]
    no_node_metrics: bool,
    /// Seed for the generated values.
    #[arg(long, default_value_t = 42)]
    seed: u64,
}

/// This process's resident memory, from /proc (Linux).
fn rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib / 1024.0)
}

async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let args = Args::parse();
    let api = apiserver::start_with(Options {
        listen: args.listen,
        bookmark_interval: args.bookmark_interval,
        history_limit: args.history,
    })
    .await;
    if let Some(latency) = args.latency {
        api.set_latency(latency);
    }

    let started = Instant::now();
    let made = api.generate_with(&GenerateOptions {
        nodes: args.nodes,
        pods_per_node: args.pods_per_node,
        node_metrics: !args.no_node_metrics,
        pod_metrics: args.pod_metrics,
        seed: args.seed,
    });
    let took = started.elapsed();

    let default_path = args.kubeconfig.is_none();
    let kubeconfig = args.kubeconfig.unwrap_or_else(|| {
        std::env::temp_dir().join(format!("fake-apiserver-{}.kubeconfig", api.addr.port()))
    });
    api.write_kubeconfig(&kubeconfig)?;

    let mut out = std::io::stdout().lock();
    writeln!(out, "url: {}", api.url)?;
    writeln!(out, "kubeconfig: {}", kubeconfig.display())?;
    writeln!(
        out,
        "generated: {} nodes, {} pods, {} daemonsets, {} deployments, {} replicasets, {} namespaces, {} node metrics, {} pod metrics in {took:.2?} (resourceVersion {}{})",
        made.nodes,
        made.pods,
        made.daemon_sets,
        made.deployments,
        made.replica_sets,
        made.namespaces,
        made.node_metrics,
        made.pod_metrics,
        api.resource_version(),
        rss_mib()
            .map(|m| format!(", RSS {m:.0} MiB"))
            .unwrap_or_default(),
    )?;
    out.flush()?;
    drop(out);

    if args.churn > 0.0 {
        // Effectively forever; stops with the server.
        api.churn(args.churn, Duration::from_secs(365 * 24 * 3600));
    }
    shutdown_signal().await;
    if default_path {
        let _ = std::fs::remove_file(&kubeconfig);
    }
    Ok(())
}
