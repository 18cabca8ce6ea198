//! Three minutes of the soak (`support::soak`; `benches/soak.rs` runs it for hours at 1,000
//! nodes × 30 pods, docs/reliability.md "The soak"): kube-prober's cluster role on the real
//! control plane at 50 nodes × 5 pods, pods churning at 5 changes a second, metrics-server
//! restarted every 45 s, the API server SIGKILLed and started again at 90 s, the real Collector
//! down 30 s of every 60, a push every 5 s, a sample every 2 s. Asserted, coarsely:
//!
//! - every disturbance happened, and kube-prober saw them (failed pushes, watch restarts or
//!   relists);
//! - every point is accepted or counted: once no push is in flight, the points kube-prober
//!   counts as sent are exactly the points the Collector exported over its four lives, and
//!   pushes went through between and after the outages;
//! - after the disturbances, with the Collector back, open fds and the runtime's alive tasks
//!   come back to their undisturbed baseline (within two minutes), and no sample on the way
//!   passed the baseline by more than [`FD_SLACK`] fds or [`TASK_SLACK`] tasks;
//! - the series count comes back to the baseline's (the churn keeps the pod count), within
//!   [`SERIES_SLACK_PER_NODE`] a node (the estimate of just-bound pods: three families a node
//!   while pods keep being bound) and [`SERIES_SLACK`] counters of failure reasons that the
//!   disturbances add;
//! - RSS after the first minute grows by no more than [`RSS_GROWTH_MIB`] over the run's fitted
//!   line, and ends within [`RSS_END_RATIO`] of the undisturbed RSS.

use support::soak::{self, Outcome, Settings, Slope};

/// Open fds a sample may hold above the undisturbed baseline while a disturbance lasts
/// (connections being re-established to a restarted API server and Collector).
const FD_SLACK: u64 = 16;
/// Alive tasks a sample may hold above the baseline while a disturbance lasts.
const TASK_SLACK: f64 = 16.0;
/// Series a node may hold beyond the baseline: its three families of just-bound pods.
const SERIES_SLACK_PER_NODE: u64 = 3;
/// Series beyond the baseline for the counters the disturbances add, one per failure reason
/// (pushes, watches, sources, probes).
const SERIES_SLACK: u64 = 50;
/// What the fitted RSS line may grow over the run after the first minute, MiB.
const RSS_GROWTH_MIB: f64 = 8.0;
/// The last sample's RSS over the largest undisturbed one at most.
const RSS_END_RATIO: f64 = 1.3;

fn print(out: &Outcome, s: &Settings) {
    for e in &out.events {
        eprintln!("  {:7.1} s  {}", e.at, e.what);
    }
    let from = s.duration.as_secs_f64() / 3.0;
    let rss = Slope::fit(&soak::series_of(out, from, |x| {
        Some(x.rss_kib as f64 / 1024.0)
    }));
    let fds = Slope::fit(&soak::series_of(out, from, |x| Some(x.fds as f64)));
    let tasks = Slope::fit(&soak::series_of(out, from, |x| {
        x.scraped.map(|c| c.alive_tasks)
    }));
    eprintln!(
        "soak: set_up_s={:.0} samples={} churn_done={} churn_retried={} baseline={:?} \
         recovered={:?} accepted={} settled={:?} lives={} rss_mib_per_h={:.1} \
         rss_growth_mib={:.2} rss_noise_mib={:.2} fds_per_h={:.1} tasks_per_h={:.1}",
        out.set_up_secs,
        out.samples.len(),
        out.churn_done,
        out.churn_retried,
        out.baseline,
        out.recovered,
        out.accepted,
        out.settled,
        out.collector_lives,
        rss.per_hour,
        rss.growth(),
        rss.noise,
        fds.per_hour,
        tasks.per_hour,
    );
    for (w, n) in &out.warnings {
        eprintln!("  {n:5} × {w}");
    }
}

#[test]
fn three_minutes_of_churn_restarts_kills_and_outages_leak_nothing_and_lose_no_point_uncounted() {
    let s = Settings::ci();
    let out = soak::run(&s);
    print(&out, &s);
    let count = |what: &str| {
        out.events
            .iter()
            .filter(|e| e.what.starts_with(what))
            .count()
    };

    // The disturbances happened, and kube-prober saw them.
    assert_eq!(count("metrics-server restarted"), 3, "{:?}", out.events);
    assert_eq!(count("kube-apiserver SIGKILLed"), 1, "{:?}", out.events);
    assert_eq!(count("kube-apiserver ready"), 1, "{:?}", out.events);
    assert_eq!(count("Collector stopped ("), 3, "{:?}", out.events);
    assert_eq!(out.collector_lives, 4, "three outages and the start");
    let settled = out.settled;
    assert!(
        settled.push_failures >= 3.0,
        "no failed push while the Collector was down: {settled:?}"
    );
    assert!(
        settled.watch_restarts + settled.relists >= 1.0,
        "kube-prober's watches did not notice the API server's death: {settled:?}"
    );
    // The churn needs the API server: count on it only while the API server was up (on a busy
    // machine the killed one can take minutes to be ready again).
    let at = |what: &str| {
        out.events
            .iter()
            .find(|e| e.what.starts_with(what))
            .map(|e| e.at)
    };
    let down = match (at("kube-apiserver SIGKILLed"), at("kube-apiserver ready")) {
        (Some(killed), Some(ready)) => (ready.min(s.duration.as_secs_f64()) - killed).max(0.0),
        _ => 0.0,
    };
    let up = (s.duration.as_secs_f64() - down).max(0.0);
    assert!(
        out.churn_done as f64 >= s.churn * up / 3.0,
        "the churn stalled: {} changes in {up:.0} s of the API server up",
        out.churn_done
    );

    // Every point accepted or counted.
    assert!(
        settled.pushes - settled.push_failures >= 6.0,
        "too few pushes went through: {settled:?}"
    );
    assert_eq!(
        settled.points, out.accepted as f64,
        "points kube-prober counts as sent vs points the Collector exported: {settled:?}"
    );
    // A push that failed lost its whole tick, counted: about as many points as one that went
    // through (the series count moves a little with churn).
    let per_sent = settled.points / (settled.pushes - settled.push_failures);
    let per_lost = settled.dropped / (settled.push_failures + settled.skipped_ticks);
    assert!(
        (per_lost / per_sent - 1.0).abs() < 0.25,
        "points counted as dropped per lost tick ({per_lost:.0}) vs sent per push \
         ({per_sent:.0}): {settled:?}"
    );

    // Back to the baseline, and bounded on the way.
    let (base_fds, base_tasks, base_series) = out.baseline;
    assert!(
        base_fds > 0 && base_tasks > 0.0 && base_series > 0,
        "{:?}",
        out.baseline
    );
    let Some((fds, tasks, series, secs)) = out.recovered else {
        panic!(
            "fds and tasks did not come back to the baseline {:?} within 120 s; last sample: {:?}",
            out.baseline,
            out.samples.last()
        );
    };
    eprintln!("soak: recovered in {secs:.0} s: fds {fds}, tasks {tasks}, series {series}");
    for x in &out.samples {
        assert!(
            x.fds <= base_fds + FD_SLACK,
            "{:.0} s: {} fds, the baseline {base_fds}",
            x.at,
            x.fds
        );
        if let Some(c) = x.scraped {
            assert!(
                c.alive_tasks <= base_tasks + TASK_SLACK,
                "{:.0} s: {} tasks, the baseline {base_tasks}",
                x.at,
                c.alive_tasks
            );
        }
    }
    let slack = SERIES_SLACK_PER_NODE * s.nodes as u64 + SERIES_SLACK;
    assert!(
        series.abs_diff(base_series) <= slack,
        "series: {series} after the run, {base_series} before it (slack {slack})"
    );

    // RSS: no growth past noise after the first minute.
    let rss = Slope::fit(&soak::series_of(&out, 60.0, |x| {
        Some(x.rss_kib as f64 / 1024.0)
    }));
    assert!(
        rss.flat(RSS_GROWTH_MIB),
        "RSS grows {:.2} MiB over the run ({:.1} MiB/h, noise {:.2} MiB)",
        rss.growth(),
        rss.per_hour,
        rss.noise
    );
    let undisturbed = out
        .samples
        .iter()
        .filter(|x| x.at < 30.0)
        .map(|x| x.rss_kib)
        .max()
        .unwrap_or(0) as f64;
    let last = out.samples.last().map_or(0, |x| x.rss_kib) as f64;
    assert!(
        last <= undisturbed * RSS_END_RATIO,
        "RSS {:.1} MiB at the end, {:.1} MiB undisturbed",
        last / 1024.0,
        undisturbed / 1024.0
    );
}
