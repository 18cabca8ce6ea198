//! The built binary in the host role on this machine: scrape /metrics (promtool must pass),
//! decode /watcher as load-watcher's structs, then SIGTERM and expect exit 0.

use std::time::{Duration, Instant};

use kube_prober::watcher::{Client, WatcherMetrics};
use support::{Prober, promtool_check};

fn get(url: &str) -> (u16, String) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let r = reqwest::Client::new()
            .get(url)
            .timeout(Duration::from_secs(5))
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    })
}

fn wait_ready(p: &Prober) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if get(&p.url("/readyz")).0 == 200 {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("not ready within 20 s");
}

#[test]
fn host_role_end_to_end() {
    let p = Prober::start(&[
        "--role",
        "host",
        "--node-name",
        "e2e-node",
        "--interval",
        "2s",
        "--timeout",
        "2s",
        "--tick-interval",
        "1s",
    ]);
    wait_ready(&p);

    let (status, body) = get(&p.url("/metrics"));
    assert_eq!(status, 200);
    let (code, out) = promtool_check(&body);
    assert_eq!(
        code, 0,
        "promtool check metrics on the live /metrics:\n{out}\n---\n{body}"
    );
    for needle in [
        "kube_prober_node_cpu_utilization_ratio{node=\"e2e-node\",window=\"instant\",operator=\"latest\"}",
        "kube_prober_node_memory_utilization_ratio{node=\"e2e-node\",window=\"15m\",operator=\"avg\"}",
        "kube_prober_source_up{source=\"host\"} 1",
        "kube_prober_cluster_info{cluster=\"unknown\",role=\"host\",project=\"\",location=\"\"} 1",
    ] {
        assert!(body.contains(needle), "/metrics lacks {needle}:\n{body}");
    }

    let (status, body) = get(&p.url("/watcher"));
    assert_eq!(status, 200);
    let m: WatcherMetrics = serde_json::from_str(&body).unwrap();
    let node = &m.data.node_metrics_map["e2e-node"];
    for kind in ["CPU", "Memory"] {
        let v = node
            .metrics
            .iter()
            .find(|x| x.kind == kind && x.operator == "Latest")
            .unwrap_or_else(|| panic!("{kind} missing: {body}"));
        assert!((0.0..=100.0).contains(&v.value), "{kind} {}", v.value);
    }
    assert!(
        node.metrics
            .iter()
            .find(|x| x.kind == "Memory")
            .unwrap()
            .value
            > 0.0
    );
    assert_eq!(m.window.duration, "15m");
    assert!(m.timestamp >= m.window.end);

    // The library client reads the same body.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = Client::new(&format!("http://{}", p.addr), Duration::from_secs(5)).unwrap();
    let via_client = rt.block_on(client.get_host_metrics("e2e-node")).unwrap();
    assert!(via_client.data.node_metrics_map.contains_key("e2e-node"));
    let err = rt.block_on(client.get_host_metrics("unknown")).unwrap_err();
    assert!(
        err.to_string().contains("received status code 404"),
        "{err}"
    );

    assert_eq!(get(&p.url("/watcher?host=unknown")).0, 404);
    assert_eq!(get(&p.url("/watcher/health")).0, 200);
    assert_eq!(get(&p.url("/healthz")).0, 200);

    assert_eq!(p.terminate(), 0, "exit code after SIGTERM");
}

/// This kernel's pressure stall totals in microseconds, by (resource, kind); empty without
/// `/proc/pressure`.
fn kernel_pressure() -> Vec<((String, String), u64)> {
    let mut out = Vec::new();
    for resource in ["cpu", "memory", "io"] {
        let Ok(text) = std::fs::read_to_string(format!("/proc/pressure/{resource}")) else {
            continue;
        };
        for line in text.lines() {
            let mut fields = line.split_ascii_whitespace();
            let kind = fields.next().unwrap().to_string();
            let total = fields
                .find_map(|f| f.strip_prefix("total="))
                .unwrap()
                .parse()
                .unwrap();
            out.push(((resource.to_string(), kind), total));
        }
    }
    out
}

/// The node's pressure stall totals on /metrics are this kernel's: every total of
/// `/proc/pressure` is there, between what the kernel said before and after the scrape.
#[test]
fn node_pressure_is_the_kernels() {
    let before = kernel_pressure();
    let p = Prober::start(&[
        "--role",
        "host",
        "--node-name",
        "psi-node",
        "--tick-interval",
        "1s",
    ]);
    wait_ready(&p);
    let (status, body) = get(&p.url("/metrics"));
    assert_eq!(status, 200);
    let after = kernel_pressure();
    let prefix = "kube_prober_node_pressure_stalled_seconds_total{node=\"psi-node\",resource=\"";
    let rows: Vec<(String, String, f64)> = body
        .lines()
        .filter_map(|l| l.strip_prefix(prefix))
        .map(|rest| {
            let (resource, rest) = rest.split_once("\",kind=\"").unwrap();
            let (kind, value) = rest.split_once("\"} ").unwrap();
            (resource.into(), kind.into(), value.parse().unwrap())
        })
        .collect();
    assert_eq!(
        rows.len(),
        before.len(),
        "one row per total of /proc/pressure ({before:?}):\n{body}"
    );
    for ((key, lo), (key_after, hi)) in before.iter().zip(&after) {
        assert_eq!(key, key_after);
        let (_, _, v) = rows
            .iter()
            .find(|(r, k, _)| (r, k) == (&key.0, &key.1))
            .unwrap_or_else(|| panic!("no row for {key:?}:\n{body}"));
        let us = (v * 1e6).round() as u64;
        assert!(
            (*lo..=*hi).contains(&us),
            "{key:?}: {us} µs on /metrics, the kernel said {lo} before and {hi} after"
        );
    }
    assert_eq!(p.terminate(), 0, "exit code after SIGTERM");
}

#[test]
fn sigint_also_stops_cleanly_before_ready() {
    let p = Prober::start(&["--role", "host", "--node-name", "early"]);
    let pid = p.child.id().to_string();
    let st = std::process::Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap();
    assert!(st.success());
    let mut p = p;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(st) = p.child.try_wait().unwrap() {
            assert_eq!(st.code(), Some(0));
            break;
        }
        assert!(Instant::now() < deadline, "no exit after SIGINT");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn an_unusable_kubeconfig_is_a_config_error() {
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("config");
    std::fs::write(&kc, "apiVersion: v1\nkind: Config\n").unwrap();
    let (code, err) = support::run_binary(
        &[
            "--listen",
            "127.0.0.1:0",
            "--kubeconfig",
            kc.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("role chosen") && err.contains("cluster"),
        "{err}"
    );
    assert!(
        err.contains("--kubeconfig") && err.contains("--role host"),
        "{err}"
    );
}
