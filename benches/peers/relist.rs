//! Phase 3 of the peers bench: memory at start and at a forced relist (issue: kube-state-metrics
//! users report memory spiking 20× on restart, kube-state-metrics #2302).
//!
//! Fresh peers started at once on the populated cluster: kube-prober's cluster role listing in
//! pages (the default), the same with `--watch-initial-list=streaming` (WatchList:
//! `sendInitialEvents`, on by default in kube-apiserver 1.34), and kube-state-metrics with its
//! defaults and at equal work (as phase 2 starts them). Measured for each:
//! - **start peak**: VmHWM once its first full scrape came (the start's lists all done);
//! - **steady**: VmRSS after 10 s more and two scrapes;
//! - **relist peak**: VmHWM reset to VmRSS (`clear_refs`), then every watch is made to relist:
//!   the API server is SIGKILLed, a ConfigMap is created through a second API server on the same
//!   etcd (the head moves past every watcher's resourceVersion), etcd is compacted at its head
//!   and the API server restarted, so each watch resumes from a compacted resourceVersion, gets
//!   410 Gone and lists everything again (as `tests/real_faults.rs` proves for kube-prober);
//!   VmHWM once every peer has counted more lists (kube-prober's relists for `expired`,
//!   kube-state-metrics' lists and watches), scrapes full again, and 15 s more have passed;
//! - the relist's time: from the API server's restart to that full scrape.

use std::path::Path;
use std::time::{Duration, Instant};

use super::common::reset_peak_rss;
use super::control_plane::{self, ControlPlane};
use super::{Peer, Settings, first_full, http, kube_prober_cluster, rss, samples, scrape};

/// One peer's memory at start and at the forced relist, in MiB.
#[derive(Debug, Default, Clone)]
pub struct RelistFigures {
    pub name: String,
    pub start_peak: f64,
    pub steady: f64,
    pub before_relist: f64,
    pub relist_peak: f64,
    /// From the API server's return to the first full scrape after it.
    pub relisted_in: Duration,
}

fn start_peers(cp: &ControlPlane, dir: &Path) -> Vec<Peer> {
    let equal = super::ksm_equal_args();
    vec![
        kube_prober_cluster(
            cp,
            "kube-prober, paged lists",
            &["--disable-probes=cluster_dns".into()],
            &[],
            dir,
        ),
        kube_prober_cluster(
            cp,
            "kube-prober, streaming lists",
            &[
                "--disable-probes=cluster_dns".into(),
                "--watch-initial-list=streaming".into(),
            ],
            &[],
            dir,
        ),
        super::ksm(cp, "kube-state-metrics (equal work)", &equal, dir),
        super::ksm(cp, "kube-state-metrics (defaults)", &[], dir),
    ]
}

/// How many lists `peer` has done, by its own count: kube-prober's relists counted as `expired`
/// (a 410 Gone), summed over its watches; kube-state-metrics' successful lists and watches
/// (`kube_state_metrics_list_total`, `kube_state_metrics_watch_total` on its telemetry port,
/// read from its command line). kube-state-metrics v2.20.0 is built with client-go v0.36, whose
/// reflectors list through a streaming WATCH (WatchList), so its lists are counted as watches.
async fn lists(client: &reqwest::Client, peer: &Peer) -> Option<f64> {
    let ksm = telemetry_port(peer.pid());
    let (url, families, label) = match ksm {
        Some(port) => (
            format!("http://127.0.0.1:{port}/metrics"),
            &[
                "kube_state_metrics_list_total",
                "kube_state_metrics_watch_total",
            ][..],
            r#"result="success""#,
        ),
        None => (
            format!("{}/metrics", peer.url),
            &["kube_prober_watch_relists_total"][..],
            r#"reason="expired""#,
        ),
    };
    let text = match ksm {
        // The telemetry port answers plain text, never gzip.
        Some(_) => client.get(&url).send().await.ok()?.text().await.ok()?,
        None => scrape(client, &url).await.ok()?.2,
    };
    let rows: Vec<(&str, f64)> = families.iter().flat_map(|f| samples(&text, f)).collect();
    // kube-prober's family has no row before its first relist; kube-state-metrics' always has.
    if rows.is_empty() && ksm.is_some() {
        return None;
    }
    Some(
        rows.iter()
            .filter(|(labels, _)| labels.contains(label))
            .map(|(_, v)| v)
            .sum(),
    )
}

/// kube-state-metrics' `--telemetry-port`, from /proc/PID/cmdline (`None` for kube-prober).
fn telemetry_port(pid: u32) -> Option<u16> {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    cmdline
        .split(|b| *b == 0)
        .filter_map(|a| std::str::from_utf8(a).ok())
        .find_map(|a| a.strip_prefix("--telemetry-port="))
        .and_then(|p| p.parse().ok())
}

/// Every watch of every peer made to relist through a real 410 Gone (see the module's text);
/// returns when the API server was started again.
fn force_relist(cp: &mut ControlPlane) -> Instant {
    let second = cp.start_second_apiserver();
    cp.kill("kube-apiserver");
    let cm = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": format!("relist-{}", std::process::id()), "namespace": "default"}});
    let out = control_plane::kubectl_with(&second, &["create", "-f", "-"], Some(&cm.to_string()));
    assert!(
        out.status.success(),
        "a write through the second API server: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rev = cp.compact_etcd();
    eprintln!("  etcd compacted at revision {rev}");
    cp.kill("kube-apiserver-2");
    let back = Instant::now();
    cp.restart("kube-apiserver");
    cp.wait_apiserver(Duration::from_secs(120));
    back
}

pub async fn relist_phase(s: &Settings, cp: &mut ControlPlane, dir: &Path) -> Vec<RelistFigures> {
    eprintln!("memory at start and at a forced relist");
    let client = http();
    let mut peers = start_peers(cp, dir);
    let mut out: Vec<RelistFigures> = Vec::new();
    for p in &peers {
        let url = format!("{}/metrics", p.url);
        first_full(&client, p.name, &url, p.started, s).await;
        out.push(RelistFigures {
            name: p.name.to_string(),
            start_peak: rss(p).1,
            ..RelistFigures::default()
        });
    }
    tokio::time::sleep(Duration::from_secs(10)).await;
    for (p, f) in peers.iter_mut().zip(&mut out) {
        p.assert_running();
        for _ in 0..2 {
            let _ = scrape(&client, &format!("{}/metrics", p.url)).await;
        }
        f.steady = rss(p).0;
    }
    let mut lists_before = Vec::new();
    for (p, f) in peers.iter().zip(&mut out) {
        let before = lists(&client, p).await;
        assert!(before.is_some(), "{}: no count of its lists", p.name);
        lists_before.push(before.unwrap_or_default());
        reset_peak_rss(p.pid()).unwrap_or_else(|e| panic!("{}: {e}", p.name));
        f.before_relist = rss(p).0;
    }
    let back = force_relist(cp);
    for ((p, f), before) in peers.iter().zip(&mut out).zip(&lists_before) {
        wait_relisted(&client, p, *before, s).await;
        f.relisted_in = back.elapsed();
    }
    tokio::time::sleep(Duration::from_secs(15)).await;
    for (p, f) in peers.iter_mut().zip(&mut out) {
        p.assert_running();
        f.relist_peak = rss(p).1;
    }
    out
}

/// Until `peer` counts more lists than `before` and scrapes full again (10 minutes at most).
async fn wait_relisted(client: &reqwest::Client, peer: &Peer, before: f64, s: &Settings) {
    let deadline = Instant::now() + Duration::from_secs(600);
    let url = format!("{}/metrics", peer.url);
    loop {
        let relisted = lists(client, peer).await.is_some_and(|n| n > before);
        if relisted
            && let Ok((_, _, text)) = scrape(client, &url).await
            && super::full(&text, s)
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{}: not relisted and full within 10 minutes",
            peer.name
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

pub fn print_relist(figures: &[RelistFigures]) {
    println!("\n### Memory at start and at a forced relist (410 Gone on every watch)\n");
    println!(
        "| process | start peak | steady | start peak / steady | before the relist | relist peak | relist peak / before | full again after |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for f in figures {
        println!(
            "| {} | {:.1} MiB | {:.1} MiB | {:.2} | {:.1} MiB | {:.1} MiB | {:.2} | {:.1} s |",
            f.name,
            f.start_peak,
            f.steady,
            f.start_peak / f.steady.max(0.1),
            f.before_relist,
            f.relist_peak,
            f.relist_peak / f.before_relist.max(0.1),
            f.relisted_in.as_secs_f64()
        );
    }
}
