//! A real Prometheus scraping a real node_exporter on 127.0.0.1, with and without the recording
//! rules load-watcher queries (`tests/support/prom.rs`), plus exact checks of those rules with
//! `promtool test rules`.

use support::prom;

use prom::{RECORDING_RULES, RealPrometheus};
use std::process::Command;
use std::time::{Duration, Instant};

/// Every series the rules record, as load-watcher queries them.
const RECORDED: [&str; 7] = [
    "instance:node_cpu:ratio",
    "instance:node_memory_utilisation:ratio",
    "instance:node_network_receive_bytes:rate:sum",
    "instance:node_network_transmit_bytes:rate:sum",
    "instance:node_network_receive_drop_excluding_lo:rate5m",
    "instance:node_network_transmit_drop_excluding_lo:rate5m",
    "instance_device:node_disk_io_time_seconds:rate5m",
];

/// 1 - MemAvailable/MemTotal from this machine's /proc/meminfo.
fn meminfo_utilisation() -> f64 {
    let text = std::fs::read_to_string("/proc/meminfo").unwrap();
    let field = |name: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("/proc/meminfo has no {name}"))
    };
    1.0 - field("MemAvailable") / field("MemTotal")
}

#[test]
fn recording_rules_record_every_load_watcher_series_from_node_exporter() {
    let prom = RealPrometheus::start(true);
    let instance = prom.node_exporter_instance.clone();
    let deadline = Instant::now() + Duration::from_secs(40);

    for name in RECORDED {
        prom.wait_for(name, deadline.saturating_duration_since(Instant::now()));
        let samples = prom.query(name);
        assert!(!samples.is_empty(), "{name} vanished");
        for (labels, value) in &samples {
            assert_eq!(
                labels.get("instance"),
                Some(&instance),
                "{name} {labels:?} lost its instance label"
            );
            assert!(
                value.is_finite() && *value >= 0.0,
                "{name} {labels:?} = {value}"
            );
        }
        if name.starts_with("instance:") {
            assert_eq!(samples.len(), 1, "{name} should be one series: {samples:?}");
        } else {
            assert!(
                samples.iter().all(|(l, _)| l.contains_key("device")),
                "{name} should keep the device label: {samples:?}"
            );
        }
    }

    let cpu = prom.query("instance:node_cpu:ratio")[0].1;
    assert!(
        (0.0..=1.0).contains(&cpu),
        "instance:node_cpu:ratio = {cpu}"
    );

    // This machine's real value, read around the query (the recorded one is up to ~2 s old).
    let before = meminfo_utilisation();
    let memory = prom.query("instance:node_memory_utilisation:ratio");
    let after = meminfo_utilisation();
    let (labels, mem) = &memory[0];
    assert_eq!(labels.get("instance"), Some(&instance));
    assert!(
        *mem > 0.0 && *mem < 1.0,
        "instance:node_memory_utilisation:ratio = {mem}"
    );
    assert!(
        (before.min(after) - 0.1..=before.max(after) + 0.1).contains(mem),
        "instance:node_memory_utilisation:ratio = {mem}, /proc/meminfo says {before} then {after}"
    );

    // The queries load-watcher sends: over all hosts, and for one host by its instance label.
    for metric in [
        "instance:node_cpu:ratio",
        "instance:node_memory_utilisation:ratio",
    ] {
        for selector in [String::new(), format!("{{instance=\"{instance}\"}}")] {
            let avg = format!("avg_over_time({metric}{selector}[15m])");
            let avg_value = prom.wait_for(&avg, Duration::from_secs(5));
            assert!((0.0..=1.0).contains(&avg_value), "{avg} = {avg_value}");
            let stddev = format!("stddev_over_time({metric}{selector}[15m])");
            let samples = prom.query(&stddev);
            assert_eq!(samples.len(), 1, "{stddev}: {samples:?}");
            let (labels, value) = &samples[0];
            assert_eq!(labels.get("instance"), Some(&instance), "{stddev}");
            assert!(
                value.is_finite() && (0.0..=0.5).contains(value),
                "{stddev} = {value}"
            );
        }
    }
    let other =
        prom.query("avg_over_time(instance:node_cpu:ratio{instance=\"no-such-host\"}[15m])");
    assert!(other.is_empty(), "{other:?}");
}

#[test]
fn without_rules_nothing_is_recorded() {
    let prom = RealPrometheus::start(false);
    prom.wait_for("node_cpu_seconds_total", Duration::from_secs(30));

    let up = prom.query("up");
    assert_eq!(up.len(), 1, "{up:?}");
    assert_eq!(up[0].0.get("instance"), Some(&prom.node_exporter_instance));
    assert_eq!(up[0].1, 1.0);
    // The raw series the rules are written over are all scraped.
    for raw in [
        "node_memory_MemAvailable_bytes",
        "node_memory_MemTotal_bytes",
        "node_network_receive_bytes_total{device!=\"lo\"}",
        "node_network_transmit_bytes_total{device!=\"lo\"}",
        "node_network_receive_drop_total{device!=\"lo\"}",
        "node_network_transmit_drop_total{device!=\"lo\"}",
        "node_disk_io_time_seconds_total",
    ] {
        assert!(!prom.query(raw).is_empty(), "{raw} is not scraped");
    }

    for name in RECORDED {
        let samples = prom.query(name);
        assert!(samples.is_empty(), "{name} without rules: {samples:?}");
    }
    let avg = prom.query("avg_over_time(instance:node_cpu:ratio[15m])");
    assert!(avg.is_empty(), "{avg:?}");
}

/// Exact values of every rule over synthetic series, via `promtool test rules`. Rates are picked
/// so every intermediate value is exact in binary floating point.
const RULE_TESTS: &str = r#"rule_files:
  - rules.yml
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      # cpu 0: user 0.25, system 0.25, idle 0.5; cpu 1: idle 0.75, steal 0.25 -> 0.5 busy of 2.
      - series: 'node_cpu_seconds_total{instance="n1:9100",job="node",cpu="0",mode="user"}'
        values: '0+15x10'
      - series: 'node_cpu_seconds_total{instance="n1:9100",job="node",cpu="0",mode="system"}'
        values: '0+15x10'
      - series: 'node_cpu_seconds_total{instance="n1:9100",job="node",cpu="0",mode="idle"}'
        values: '0+30x10'
      - series: 'node_cpu_seconds_total{instance="n1:9100",job="node",cpu="1",mode="idle"}'
        values: '0+45x10'
      - series: 'node_cpu_seconds_total{instance="n1:9100",job="node",cpu="1",mode="steal"}'
        values: '0+15x10'
      # n2: iowait is not busy either.
      - series: 'node_cpu_seconds_total{instance="n2:9100",job="node",cpu="0",mode="iowait"}'
        values: '0+30x10'
      - series: 'node_cpu_seconds_total{instance="n2:9100",job="node",cpu="0",mode="softirq"}'
        values: '0+30x10'
      - series: 'node_memory_MemAvailable_bytes{instance="n1:9100",job="node"}'
        values: '3221225472x10'
      - series: 'node_memory_MemTotal_bytes{instance="n1:9100",job="node"}'
        values: '4294967296x10'
      - series: 'node_memory_MemAvailable_bytes{instance="n2:9100",job="node"}'
        values: '1073741824x10'
      - series: 'node_memory_MemTotal_bytes{instance="n2:9100",job="node"}'
        values: '4294967296x10'
      - series: 'node_network_receive_bytes_total{instance="n1:9100",job="node",device="eth0"}'
        values: '0+600x10'
      - series: 'node_network_receive_bytes_total{instance="n1:9100",job="node",device="eth1"}'
        values: '0+1200x10'
      - series: 'node_network_receive_bytes_total{instance="n1:9100",job="node",device="lo"}'
        values: '0+6000x10'
      - series: 'node_network_transmit_bytes_total{instance="n1:9100",job="node",device="eth0"}'
        values: '0+300x10'
      - series: 'node_network_transmit_bytes_total{instance="n1:9100",job="node",device="eth1"}'
        values: '0+900x10'
      - series: 'node_network_transmit_bytes_total{instance="n1:9100",job="node",device="lo"}'
        values: '0+6000x10'
      - series: 'node_network_receive_drop_total{instance="n1:9100",job="node",device="eth0"}'
        values: '0+60x10'
      - series: 'node_network_receive_drop_total{instance="n1:9100",job="node",device="eth1"}'
        values: '0+30x10'
      - series: 'node_network_receive_drop_total{instance="n1:9100",job="node",device="lo"}'
        values: '0+600x10'
      - series: 'node_network_transmit_drop_total{instance="n1:9100",job="node",device="eth0"}'
        values: '0+15x10'
      - series: 'node_network_transmit_drop_total{instance="n1:9100",job="node",device="lo"}'
        values: '0+600x10'
      - series: 'node_disk_io_time_seconds_total{instance="n1:9100",job="node",device="vda"}'
        values: '0+30x10'
      - series: 'node_disk_io_time_seconds_total{instance="n1:9100",job="node",device="sdb"}'
        values: '0+15x10'
    promql_expr_test:
      - expr: instance:node_cpu:ratio
        eval_time: 10m
        exp_samples:
          - labels: 'instance:node_cpu:ratio{instance="n1:9100",job="node"}'
            value: 0.25
          - labels: 'instance:node_cpu:ratio{instance="n2:9100",job="node"}'
            value: 0.5
      - expr: instance:node_memory_utilisation:ratio
        eval_time: 10m
        exp_samples:
          - labels: 'instance:node_memory_utilisation:ratio{instance="n1:9100",job="node"}'
            value: 0.25
          - labels: 'instance:node_memory_utilisation:ratio{instance="n2:9100",job="node"}'
            value: 0.75
      - expr: instance:node_network_receive_bytes:rate:sum
        eval_time: 10m
        exp_samples:
          - labels: 'instance:node_network_receive_bytes:rate:sum{instance="n1:9100",job="node"}'
            value: 30
      - expr: instance:node_network_transmit_bytes:rate:sum
        eval_time: 10m
        exp_samples:
          - labels: 'instance:node_network_transmit_bytes:rate:sum{instance="n1:9100",job="node"}'
            value: 20
      - expr: instance:node_network_receive_drop_excluding_lo:rate5m
        eval_time: 10m
        exp_samples:
          - labels: 'instance:node_network_receive_drop_excluding_lo:rate5m{instance="n1:9100",job="node"}'
            value: 1.5
      - expr: instance:node_network_transmit_drop_excluding_lo:rate5m
        eval_time: 10m
        exp_samples:
          - labels: 'instance:node_network_transmit_drop_excluding_lo:rate5m{instance="n1:9100",job="node"}'
            value: 0.25
      - expr: instance_device:node_disk_io_time_seconds:rate5m
        eval_time: 10m
        exp_samples:
          - labels: 'instance_device:node_disk_io_time_seconds:rate5m{instance="n1:9100",job="node",device="vda"}'
            value: 0.5
          - labels: 'instance_device:node_disk_io_time_seconds:rate5m{instance="n1:9100",job="node",device="sdb"}'
            value: 0.25
"#;

#[test]
fn recording_rules_compute_exact_values_under_promtool() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("rules.yml"), RECORDING_RULES).unwrap();
    std::fs::write(dir.path().join("tests.yml"), RULE_TESTS).unwrap();
    let out = Command::new(prom::binary("promtool"))
        .args(["test", "rules", "tests.yml"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "promtool test rules failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// docs/configuration.md shows users the recording rules these tests check, word for word.
#[test]
fn the_documented_recording_rules_are_the_tested_ones() {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/configuration.md"
    ))
    .unwrap();
    let start = doc
        .find("```yaml\ngroups:\n  - name: kube-prober-load-watcher\n")
        .expect("docs/configuration.md shows the recording rules in a ```yaml block")
        + "```yaml\n".len();
    let len = doc[start..].find("```").expect("the block ends");
    assert_eq!(&doc[start..start + len], RECORDING_RULES);
}
