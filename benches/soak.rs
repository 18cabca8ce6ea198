//! The soak, as a benchmark (docs/reliability.md, "The soak"): kube-prober's cluster role on
//! the real control plane of tests/support/control_plane.rs (etcd, kube-apiserver, kwok,
//! metrics-server) with `NODES` kwok nodes × `PODS_PER_NODE` pods, pushing OTLP/gRPC every
//! `PUSH_SECS` into the real OpenTelemetry Collector, for `SOAK_SECS` while:
//!
//! - pods churn at `CHURN` changes a second (a pod deleted and another created in its place,
//!   under a new name, on the same node);
//! - metrics-server is restarted every `METRICS_SERVER_RESTART_SECS`;
//! - the API server is SIGKILLed and started again every `APISERVER_KILL_SECS`;
//! - the Collector is down for `COLLECTOR_DOWN_SECS` at the end of every `COLLECTOR_CYCLE_SECS`.
//!
//! Every `SAMPLE_SECS` it reads kube-prober's RSS, open fds and threads (/proc) and, from
//! `/metrics`, the series count, the runtime's alive tasks and the push counters. It reports
//! the least-squares slope of each (per hour, over the samples after the first `WARMUP_SECS`)
//! with the noise (the residuals' standard deviation) and a verdict: flat when the fitted line
//! grows over the run by no more than twice the noise, or than the quantity's floor (RSS 2% of
//! its mean, fds 2, tasks 2, threads 1, series 0.5% of the mean). Then the points: those
//! kube-prober counts as sent against those the Collector exported over all its lives, with
//! the failed pushes (and the dropped points, when the binary counts them). The code is
//! `tests/support/soak.rs`, which `tests/real/soak.rs` also runs for three minutes at 50 × 5.
//!
//! Run with `cargo bench --bench soak`. The defaults are the issue's: `SOAK_SECS=7200`,
//! `NODES=1000`, `PODS_PER_NODE=30`, `CHURN=5`, `METRICS_SERVER_RESTART_SECS=900`,
//! `APISERVER_KILL_SECS=1800`, `COLLECTOR_CYCLE_SECS=1800`, `COLLECTOR_DOWN_SECS=600`,
//! `SAMPLE_SECS=10`, `PUSH_SECS=30`, `WARMUP_SECS=900` (the usage windows of 10 and 15
//! minutes fill during the first 15 minutes), `CREATE_CONCURRENCY=32`,
//! `METRIC_RESOLUTION_SECS=15` (metrics-server's `--metric-resolution`). Under
//! `cargo test --benches` (no `--bench` argument) it does nothing. Needs the upstream binaries
//! of `tests/upstream/build.sh`. The report (markdown, on stdout) ends with the command.

mod common;

use std::time::Duration;

use common::{env_usize, loadavg, machine_info};
use support::plot::{self, Chart, Series};
use support::soak::{self, Outcome, Settings, Slope};

fn settings() -> (Settings, f64) {
    let secs = |name: &str, default: usize| Duration::from_secs(env_usize(name, default) as u64);
    let churn = std::env::var("CHURN").map_or(5.0, |v| {
        v.trim()
            .parse()
            .unwrap_or_else(|_| panic!("CHURN={v:?} is not a number"))
    });
    let s = Settings {
        duration: secs("SOAK_SECS", 7200),
        nodes: env_usize("NODES", 1000),
        pods_per_node: env_usize("PODS_PER_NODE", 30),
        churn,
        metrics_server_restart: secs("METRICS_SERVER_RESTART_SECS", 900),
        apiserver_kill: secs("APISERVER_KILL_SECS", 1800),
        collector_cycle: secs("COLLECTOR_CYCLE_SECS", 1800),
        collector_down: secs("COLLECTOR_DOWN_SECS", 600),
        sample: secs("SAMPLE_SECS", 10),
        push_interval: secs("PUSH_SECS", 30),
        create_concurrency: env_usize("CREATE_CONCURRENCY", 32),
        metric_resolution: secs("METRIC_RESOLUTION_SECS", 15),
    };
    (s, env_usize("WARMUP_SECS", 900) as f64)
}

fn command(s: &Settings, warmup: f64) -> String {
    format!(
        "SOAK_SECS={} NODES={} PODS_PER_NODE={} CHURN={} METRICS_SERVER_RESTART_SECS={} \
         APISERVER_KILL_SECS={} COLLECTOR_CYCLE_SECS={} COLLECTOR_DOWN_SECS={} SAMPLE_SECS={} \
         PUSH_SECS={} METRIC_RESOLUTION_SECS={} WARMUP_SECS={warmup} cargo bench --bench soak",
        s.duration.as_secs(),
        s.nodes,
        s.pods_per_node,
        s.churn,
        s.metrics_server_restart.as_secs(),
        s.apiserver_kill.as_secs(),
        s.collector_cycle.as_secs(),
        s.collector_down.as_secs(),
        s.sample.as_secs(),
        s.push_interval.as_secs(),
        s.metric_resolution.as_secs(),
    )
}

/// One quantity of the report: its name, unit, the floor of its verdict and how to read it.
struct Quantity {
    name: &'static str,
    unit: &'static str,
    /// The growth below which it is flat whatever the noise: (absolute, fraction of the mean).
    floor: (f64, f64),
    read: fn(&soak::Sample) -> Option<f64>,
}

const QUANTITIES: [Quantity; 5] = [
    Quantity {
        name: "RSS",
        unit: "MiB",
        floor: (0.0, 0.02),
        read: |x| Some(x.rss_kib as f64 / 1024.0),
    },
    Quantity {
        name: "open fds",
        unit: "fds",
        floor: (2.0, 0.0),
        read: |x| Some(x.fds as f64),
    },
    Quantity {
        name: "alive tokio tasks",
        unit: "tasks",
        floor: (2.0, 0.0),
        read: |x| x.scraped.map(|c| c.alive_tasks),
    },
    Quantity {
        name: "series on /metrics",
        unit: "series",
        floor: (0.0, 0.005),
        read: |x| x.scraped.map(|c| c.series as f64),
    },
    Quantity {
        name: "threads",
        unit: "threads",
        floor: (1.0, 0.0),
        read: |x| Some(x.threads as f64),
    },
];

fn print_slopes(out: &Outcome, warmup: f64) {
    println!("| quantity | mean | slope per hour | noise (σ) | growth over the run | verdict |");
    println!("|---|---|---|---|---|---|");
    for q in &QUANTITIES {
        let fit = Slope::fit(&soak::series_of(out, warmup, q.read));
        let floor = q.floor.0.max(q.floor.1 * fit.mean);
        let verdict = if fit.flat(floor) {
            "flat".to_string()
        } else {
            format!("**grows** (> max(2σ, {floor:.1}))")
        };
        println!(
            "| {} | {:.1} {} | {:+.2} | {:.2} | {:+.2} over {:.2} h | {verdict} |",
            q.name,
            fit.mean,
            q.unit,
            fit.per_hour,
            fit.noise,
            fit.growth(),
            fit.hours,
        );
    }
}

fn print_points(out: &Outcome) {
    let c = &out.settled;
    println!("\n### Points\n");
    println!("| | |");
    println!("|---|---|");
    println!("| pushes | {:.0} |", c.pushes);
    println!("| failed pushes | {:.0} |", c.push_failures);
    println!(
        "| skipped ticks (a push still running: the runner has no queue) | {:.0} |",
        c.skipped_ticks
    );
    println!("| points kube-prober counts as sent | {:.0} |", c.points);
    println!(
        "| points the Collector exported, over its {} lives | {} |",
        out.collector_lives, out.accepted
    );
    println!(
        "| points kube-prober counts as dropped (failed pushes, skipped ticks) | {:.0} |",
        c.dropped
    );
    let verdict = if c.points == out.accepted as f64 {
        "every point the Collector took is counted as sent, and none counted as sent is missing"
    } else {
        "**mismatch**"
    };
    println!("| sent vs exported | {verdict} |");
}

fn print_report(s: &Settings, warmup: f64, out: &Outcome, started: &str, load: (String, String)) {
    println!(
        "## The soak: {} nodes × {} pods, {} s\n",
        s.nodes,
        s.pods_per_node,
        s.duration.as_secs()
    );
    println!(
        "Started {started}; load average {} at the start, {} at the end.",
        load.0, load.1
    );
    for (k, v) in machine_info() {
        println!("- {k}: {v}");
    }
    let p = &out.populated;
    println!(
        "\nSet-up {:.0} s (nodes Ready after {:.0} s, pods Running after {:.0} s); {} samples; \
         {} pod changes ({} requests tried again).\n",
        out.set_up_secs,
        p.nodes_ready.as_secs_f64(),
        p.pods_running.as_secs_f64(),
        out.samples.len(),
        out.churn_done,
        out.churn_retried,
    );
    println!("### Slopes (samples after the first {warmup:.0} s)\n");
    print_slopes(out, warmup);
    let (fds, tasks, series) = out.baseline;
    println!("\nUndisturbed baseline: {fds} fds, {tasks:.0} tasks, {series} series.");
    match out.recovered {
        Some((f, t, n, secs)) => println!(
            "After the run, the Collector back: {f} fds, {t:.0} tasks, {n} series, {secs:.0} s after the end."
        ),
        None => println!("After the run: fds and tasks **not back** to the baseline within 120 s."),
    }
    print_points(out);
    println!("\n### Disturbances\n");
    for e in &out.events {
        println!("- {:.0} s: {}", e.at, e.what);
    }
    println!("\n### kube-prober's warnings and errors\n");
    for (w, n) in &out.warnings {
        println!("- {n} × {w}");
    }
    println!("\nCommand: `{}`", command(s, warmup));
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` does not: then do nothing.
    if !std::env::args().any(|a| a == "--bench") {
        println!("soak: benchmark only; run `cargo bench --bench soak`");
        return;
    }
    let (s, warmup) = settings();
    let started = common::first_line("date", &["-u", "+%Y-%m-%d %H:%M UTC"]);
    let load_start = loadavg();
    let commit = common::commit();
    let out = soak::run(&s);
    print_report(&s, warmup, &out, &started, (load_start, loadavg()));
    println!("Commit: {commit}.");
    draw(&s, &out, &commit);
}

/// `soak-memory.svg` (RSS) and `soak-handles.svg` (fds, alive tasks, threads) over the run, in
/// `PLOTS_DIR` (docs/reliability.md shows them).
fn draw(s: &Settings, out: &Outcome, commit: &str) {
    let dir = plot::plots_dir();
    let minutes = |f: fn(&soak::Sample) -> Option<f64>| -> Vec<(f64, f64)> {
        soak::series_of(out, f64::NEG_INFINITY, f)
            .into_iter()
            .map(|(at, v)| (at / 60.0, v))
            .collect()
    };
    let title = |what: &str| {
        format!(
            "The soak: {what} ({} nodes × {} pods, {} h)",
            s.nodes,
            s.pods_per_node,
            s.duration.as_secs_f64() / 3600.0
        )
    };
    let note = format!("measured on {commit}: cargo bench --bench soak");
    let x = "minutes from the start of the disturbed run";
    let rss = Chart::new(title("memory"), x, "RSS, MiB")
        .series(Series::new(
            "kube-prober RSS",
            minutes(|m| Some(m.rss_kib as f64 / 1024.0)),
        ))
        .note(note.clone());
    plot::write(&dir, "soak-memory", &rss);
    let handles = Chart::new(title("fds, tasks, threads"), x, "count")
        .series(Series::new("open fds", minutes(|m| Some(m.fds as f64))))
        .series(Series::new(
            "alive async tasks",
            minutes(|m| m.scraped.map(|c| c.alive_tasks)),
        ))
        .series(Series::new("threads", minutes(|m| Some(m.threads as f64))))
        .note(note);
    plot::write(&dir, "soak-handles", &handles);
}
