//! Hostile input: property tests for every parser of outside input. Each property: no panic,
//! nothing allocated by a size the input claims, a clear error or a counted skip, and where it
//! is cheap an independent oracle.
//!
//! Bounded: a fixed case count (`CASES`, or `PROPTEST_CASES`) and a fixed seed (or
//! `PROPTEST_RNG_SEED`), so CI runs the same cases in a few seconds in debug; failures found on
//! the way are kept below as plain regression tests.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube_prober::config::cli::Cli;
use kube_prober::config::{BadConfigText, Config, FileConfig, Options};
use kube_prober::k8s::lean::{BadObject, LeanNode, LeanPod};
use kube_prober::model::Resource;
use kube_prober::shared::json_items::{ItemSplitter, Piece};
use kube_prober::shared::quantity::{MAX_MAGNITUDE, parse_quantity};
use kube_prober::sources::cluster::derive::{
    DeriveConfig, daemonset_expected, deployment_expected, node_facts, node_pod_sums, owner,
    pod_facts,
};
use kube_prober::sources::cluster::watchers::{Interner, node_label_keys, trim_node};
use kube_prober::sources::procfs;
use kube_prober::sources::task::platform::read_platform;
use kube_prober::sources::task::pods::{TaskPodConfig, task_pod};
use kube_prober::sources::usage::UsageFetcher;
use kube_prober::sources::usage::host::{HostConfig, HostFetcher};
use kube_prober::sources::usage::prometheus::{parse_vector, strip_port};
use kube_prober::sources::usage::signalfx::{parse_metadata, parse_window};
use proptest::prelude::*;
use proptest::test_runner::{Config as PtConfig, RngSeed};
use serde_json::{Value, json};

/// Flags as if given on the command line, without the environment.
fn flags(f: impl FnOnce(&mut Options)) -> Cli {
    let mut c = Cli::default();
    f(&mut c.options);
    c
}

const CASES: u32 = 256;

fn config(cases: u32) -> PtConfig {
    let env = PtConfig::default();
    PtConfig {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|c| c.parse().ok())
            .unwrap_or(cases),
        rng_seed: match env.rng_seed {
            RngSeed::Random => RngSeed::Fixed(0x6b75_6265_7072_6f62),
            fixed => fixed,
        },
        // Regressions are kept as plain tests in this file instead.
        failure_persistence: None,
        max_shrink_iters: 2048,
        ..env
    }
}

/// Text that looks like a quantity often and like garbage sometimes.
fn quantity_like() -> impl Strategy<Value = String> {
    prop_oneof![
        "[-+]?[0-9]{0,25}(\\.[0-9]{0,25})?(n|u|m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei|[eE][-+]?[0-9]{1,25})?",
        "[0-9.eEiKMGTPn+-]{0,30}",
        any::<String>(),
        Just("1e999999999999999999999999".to_string()),
        "[1-9]e30[0-8]",
        Just("1e308".to_string()),
        "[1-9]e1[89]",
        Just("9".repeat(400) + "Ei"),
    ]
}

/// `10^k` exactly, k <= 38.
fn pow10(k: u32) -> u128 {
    10u128.pow(k)
}

proptest! {
    #![proptest_config(config(CASES))]

    // --------------------------------------------------------------------------------------
    // Kubernetes quantities (src/shared/quantity.rs)
    // --------------------------------------------------------------------------------------

    #[test]
    fn quantity_never_panics_and_is_finite(s in quantity_like()) {
        if let Ok(v) = parse_quantity(&s) {
            prop_assert!(v.is_finite() && v.abs() <= MAX_MAGNITUDE, "{s:?} -> {v}");
        }
    }

    /// Oracle: the quantity's exact decimal value, from integers, correctly rounded once.
    #[test]
    fn decimal_quantities_match_an_exact_decimal_oracle(
        int in 0u64..1_000_000_000,
        frac in "[0-9]{0,6}",
        suffix in prop::sample::select(vec![
            ("n", -9i32), ("u", -6), ("m", -3), ("", 0), ("k", 3), ("M", 6), ("G", 9),
            ("T", 12), ("P", 15), ("E", 18), ("e-7", -7), ("E2", 2), ("e+5", 5), ("e0", 0),
        ]),
        negative in any::<bool>(),
    ) {
        let (sfx, exp) = suffix;
        let text = if frac.is_empty() { format!("{int}{sfx}") } else { format!("{int}.{frac}{sfx}") };
        let frac_n: u128 = if frac.is_empty() { 0 } else { frac.parse().unwrap() };
        // N * 10^e with N < 10^15 < 2^53 (exact in f64).
        let n = u128::from(int) * pow10(frac.len() as u32) + frac_n;
        let e = exp - frac.len() as i32;
        let want = if e >= 0 {
            (n * pow10(e as u32)) as f64
        } else {
            // Both exact in f64 (10^k for k <= 22): IEEE division rounds correctly once.
            n as f64 / pow10((-e) as u32) as f64
        };
        let got = parse_quantity(&text);
        if want > MAX_MAGNITUDE {
            prop_assert!(got.is_err(), "{} -> {:?}", text, got);
            return Ok(());
        }
        prop_assert_eq!(got.clone(), Ok(want), "{}", text);
        if negative {
            prop_assert_eq!(parse_quantity(&format!("-{text}")), Ok(-want));
        }
    }

    #[test]
    fn binary_quantities_are_exact(m in 0u64..(1 << 40), p in 1i32..=6) {
        let sfx = ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][(p - 1) as usize];
        let want = m as f64 * 2f64.powi(10 * p);
        let got = parse_quantity(&format!("{m}{sfx}"));
        if want > MAX_MAGNITUDE {
            prop_assert!(got.is_err());
        } else {
            prop_assert_eq!(got, Ok(want));
        }
    }

    // --------------------------------------------------------------------------------------
    // kernel id lists: cpusets, online CPUs and nodes (src/sources/procfs.rs)
    // --------------------------------------------------------------------------------------

    #[test]
    fn id_lists_never_panic_and_stay_bounded(
        input in prop_oneof![
            prop::collection::vec(any::<u8>(), 0..512),
            "[0-9,-]{0,64}".prop_map(String::into_bytes),
            "([0-9]{1,7}(-[0-9]{1,7})?,){0,20}[0-9]{1,7}\n?".prop_map(String::into_bytes),
        ],
    ) {
        if let Some(n) = procfs::parse_id_list_len(&input) {
            prop_assert!(n <= procfs::MAX_SET_ID + 1, "{n}");
            let ids = procfs::parse_id_list(&input).map(|ids| ids.len());
            prop_assert_eq!(ids, Some(n as usize), "the list has the ids the count says");
        } else {
            prop_assert_eq!(procfs::parse_id_list(&input), None);
        }
    }

    /// Oracle: ascending, disjoint ranges formatted as the kernel prints them count exactly.
    #[test]
    fn id_lists_count_their_ids(
        gaps in prop::collection::vec((0u32..50, 0u32..50), 0..40),
    ) {
        let mut next = 0u32;
        let mut parts = Vec::new();
        let mut want = 0u32;
        for (gap, len) in gaps {
            let lo = next + gap;
            let hi = lo + len;
            parts.push(if lo == hi { lo.to_string() } else { format!("{lo}-{hi}") });
            want += len + 1;
            next = hi + 1;
        }
        let text = format!("{}\n", parts.join(","));
        prop_assert_eq!(procfs::parse_id_list_len(text.as_bytes()), Some(want), "{}", text);
    }

    // --------------------------------------------------------------------------------------
    // procfs (src/sources/procfs.rs)
    // --------------------------------------------------------------------------------------

    #[test]
    fn procfs_parsers_never_panic_on_bytes(input in prop::collection::vec(any::<u8>(), 0..2048)) {
        let _ = procfs::parse_stat(&input);
        let _ = procfs::parse_meminfo(&input);
        let _ = procfs::parse_vmstat(&input);
        let _ = procfs::parse_node_meminfo(&input);
        let _ = procfs::parse_auxv_page_size(&input);
        let _ = procfs::parse_net_dev(&input);
        let _ = procfs::parse_diskstats(&input);
    }

    #[test]
    fn procfs_parsers_never_panic_on_near_miss_text(
        lines in prop::collection::vec(
            prop_oneof![
                "cpu[0-9]{0,12} ( [0-9]{1,21}){0,12}",
                "(MemTotal|MemFree|MemAvailable|Buffers|Cached): *[0-9]{0,22}( kB| MB)?( x)?",
                "(pgfault|pgmajfault|pswpin|pswpout|oom_kill|nr_free_pages)( -?[0-9]{0,22})?( x)?",
                " *[a-z0-9]{0,6}:( ?[0-9]{1,21}){0,18}",
                " *[0-9]{1,4} +[0-9]{1,4} [a-z]{1,4}[0-9]{0,3}( [0-9]{1,21}){0,18}",
                "[ -~]{0,40}",
            ],
            0..12,
        ),
    ) {
        let text = lines.join("\n");
        let input = text.as_bytes();
        if let Ok(stat) = procfs::parse_stat(input) {
            prop_assert!(stat.aggregate.is_some() || !stat.per_cpu.is_empty());
            let u = procfs::cpu_utilization(&stat, &stat);
            prop_assert!(u.is_none(), "no elapsed jiffies, no ratio: {u:?}");
        }
        if let Ok(m) = procfs::parse_meminfo(input) {
            prop_assert!(m.used_bytes() <= m.total_bytes);
            if let Some(r) = m.used_ratio() {
                prop_assert!((0.0..=1.0).contains(&r));
            }
        }
        if let Ok(v) = procfs::parse_vmstat(input) {
            let keys: Vec<&str> = v.iter().map(|(k, _)| *k).collect();
            let mut documented = procfs::VMSTAT_KEYS.to_vec();
            documented.retain(|k| keys.contains(k));
            prop_assert_eq!(keys, documented, "documented keys, once each, in order");
        }
        let _ = procfs::parse_net_dev(input);
        let _ = procfs::parse_diskstats(input);
    }

    /// Oracle: a well-formed /proc/stat round-trips.
    #[test]
    fn stat_lines_round_trip(
        cpus in prop::collection::btree_map(0u32..4096, prop::array::uniform8(any::<u64>()), 1..8),
        agg in prop::array::uniform8(any::<u64>()),
    ) {
        let line = |label: String, v: &[u64; 8]| {
            let cols: Vec<String> = v.iter().map(u64::to_string).collect();
            format!("{label} {} 0 0\n", cols.join(" "))
        };
        let mut text = line("cpu".into(), &agg);
        for (id, v) in &cpus {
            text.push_str(&line(format!("cpu{id}"), v));
        }
        text.push_str("intr 1 2 3\nctxt 42\n");
        let stat = procfs::parse_stat(text.as_bytes()).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let times = |v: &[u64; 8]| procfs::CpuTimes {
            user: v[0], nice: v[1], system: v[2], idle: v[3],
            iowait: v[4], irq: v[5], softirq: v[6], steal: v[7],
        };
        prop_assert_eq!(stat.aggregate, Some(times(&agg)));
        prop_assert_eq!(stat.per_cpu.len(), cpus.len());
        for (id, v) in &cpus {
            prop_assert_eq!(stat.per_cpu.get(id), Some(&times(v)));
        }
    }

    #[test]
    fn cpu_utilization_is_a_ratio_or_none(
        a in prop::collection::btree_map(0u32..8, prop::array::uniform8(any::<u64>()), 0..4),
        b in prop::collection::btree_map(0u32..8, prop::array::uniform8(any::<u64>()), 0..4),
    ) {
        let stat = |m: &BTreeMap<u32, [u64; 8]>| procfs::CpuStat {
            aggregate: m.values().next().map(|v| procfs::CpuTimes {
                user: v[0], nice: v[1], system: v[2], idle: v[3],
                iowait: v[4], irq: v[5], softirq: v[6], steal: v[7],
            }),
            per_cpu: m.iter().map(|(k, v)| (*k, procfs::CpuTimes {
                user: v[0], nice: v[1], system: v[2], idle: v[3],
                iowait: v[4], irq: v[5], softirq: v[6], steal: v[7],
            })).collect(),
        };
        if let Some(u) = procfs::cpu_utilization(&stat(&a), &stat(&b)) {
            prop_assert!((0.0..=1.0).contains(&u), "{u}");
        }
    }

    /// Oracle: meminfo values are kB; bytes are exactly 1024 times, or a clear overflow error.
    #[test]
    fn meminfo_converts_kb_exactly(total in any::<u64>(), avail in any::<u64>()) {
        let text = format!("MemTotal: {total} kB\nMemFree: 1 kB\nMemAvailable: {avail} kB\n");
        match (total.checked_mul(1024), avail.checked_mul(1024)) {
            (Some(t), Some(a)) => {
                let m = procfs::parse_meminfo(text.as_bytes()).map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert_eq!((m.total_bytes, m.available_bytes), (t, a));
            }
            _ => {
                let e = procfs::parse_meminfo(text.as_bytes()).unwrap_err().to_string();
                prop_assert!(e.contains("overflows"), "{}", e);
            }
        }
    }

    /// Oracle: memory used is MemTotal - MemAvailable in bytes, floored at 0, and the host's
    /// ratio is that figure over MemTotal.
    #[test]
    fn meminfo_used_is_total_minus_available(total in 0u64..1 << 40, avail in 0u64..1 << 40) {
        let text = format!("MemTotal: {total} kB\nMemFree: 1 kB\nMemAvailable: {avail} kB\n");
        let m = procfs::parse_meminfo(text.as_bytes()).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(m.used_bytes(), total.saturating_sub(avail) * 1024);
        if total > 0 {
            let r = m.used_ratio().unwrap_or(f64::NAN);
            let want = (total.saturating_sub(avail) as f64 / total as f64).clamp(0.0, 1.0);
            prop_assert!((r - want).abs() < 1e-12, "{} vs {}", r, want);
        }
    }

    #[test]
    fn disk_names_and_counter_deltas_never_panic(
        name in any::<String>(),
        prev in prop::collection::btree_map("[a-z]{1,3}", any::<u64>(), 0..6),
        cur in prop::collection::btree_map("[a-z]{1,3}", any::<u64>(), 0..6),
    ) {
        let _ = procfs::is_whole_disk(&name);
        let d = procfs::counter_deltas(&prev, &cur);
        prop_assert!(d.keys + d.reset.len() <= prev.len().min(cur.len()));
        let (max, reset) = procfs::counter_delta_max(&prev, &cur);
        prop_assert_eq!(reset, d.reset);
        if let Some(m) = max {
            prop_assert!(m <= d.sum);
        }
    }

    // --------------------------------------------------------------------------------------
    // Streamed lists (src/shared/json_items.rs): the NodeMetrics list, split as it arrives
    // --------------------------------------------------------------------------------------

    #[test]
    fn list_splitting_never_panics_on_bytes(
        body in prop::collection::vec(any::<u8>(), 0..1024),
        chunk in 1usize..64,
        max_item in 1usize..256,
    ) {
        let mut s = ItemSplitter::new(&["items"], max_item, 256);
        let mut failed = false;
        for c in body.chunks(chunk) {
            if s.feed(c, |p| {
                if let Piece::Item { bytes, .. } = p {
                    assert!(bytes.len() <= max_item);
                }
            }).is_err() {
                failed = true;
                break;
            }
        }
        if !failed {
            let _ = s.finish();
        }
    }

    #[test]
    fn list_splitting_never_panics_on_near_miss_lists(
        items in prop::collection::vec(json_object(), 1..5),
        at in any::<prop::sample::Index>(),
        byte in any::<u8>(),
        cut in any::<bool>(),
        chunk in 1usize..41,
    ) {
        let mut text = serde_json::to_vec(&json!({"kind": "L", "items": items})).unwrap();
        let i = at.index(text.len());
        if cut {
            text.truncate(i);
        } else {
            text[i] = byte;
        }
        let mut s = ItemSplitter::new(&["items"], 64, 128);
        let mut ok = true;
        for c in text.chunks(chunk) {
            if s.feed(c, |_| {}).is_err() {
                ok = false;
                break;
            }
        }
        if ok {
            let _ = s.finish();
        }
    }

    #[test]
    fn list_splitting_gives_what_serde_reads_in_any_chunking(
        items in prop::collection::vec(json_object(), 0..8),
        before in prop::collection::btree_map("[a-z]{1,6}", json_value(), 0..3),
        pretty in any::<bool>(),
        chunk in 1usize..97,
    ) {
        let mut doc = serde_json::Map::new();
        for (k, v) in &before {
            doc.insert(k.clone(), v.clone());
        }
        doc.insert("items".into(), Value::Array(items.clone()));
        doc.insert("metadata".into(), json!({"continue": "tok\"en", "items": [1]}));
        let doc = Value::Object(doc);
        let text = if pretty {
            serde_json::to_vec_pretty(&doc).unwrap()
        } else {
            serde_json::to_vec(&doc).unwrap()
        };
        let mut s = ItemSplitter::new(&["items"], 1 << 20, 1 << 20);
        let mut got = Vec::new();
        for c in text.chunks(chunk) {
            s.feed(c, |p| match p {
                Piece::Item { index, offset, bytes } => {
                    assert_eq!(index as usize, got.len());
                    assert_eq!(text[offset as usize], bytes[0]);
                    got.push(serde_json::from_slice::<Value>(bytes).unwrap());
                }
                Piece::Oversized { .. } => panic!("no item is over 1 MiB"),
            }).unwrap();
        }
        let envelope: Value = serde_json::from_slice(&s.finish().unwrap()).unwrap();
        // The oracle: serde's own reading of the whole document (floats read back as serde
        // reads them, which need not be the value written).
        let mut whole: Value = serde_json::from_slice(&text).unwrap();
        prop_assert_eq!(got.len(), items.len());
        prop_assert_eq!(&Value::Array(got), &whole["items"]);
        whole["items"] = json!([]);
        prop_assert_eq!(envelope, whole);
    }

    // --------------------------------------------------------------------------------------
    // Prometheus answers (src/sources/usage/prometheus.rs)
    // --------------------------------------------------------------------------------------

    #[test]
    fn prometheus_answers_never_panic_on_bytes(body in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = parse_vector(&body, "instance", true);
    }

    #[test]
    fn prometheus_vectors_count_every_series(
        series in prop::collection::vec(
            (
                prop::option::of(prop_oneof![
                    "[a-z0-9.-]{0,12}(:[0-9]{1,5})?",
                    "\\[[0-9a-f:]{0,12}\\](:[0-9]{1,5})?",
                    any::<String>(),
                ]),
                prop_oneof![
                    "-?[0-9]{1,20}(\\.[0-9]{0,10})?(e-?[0-9]{1,4})?",
                    Just("NaN".to_string()),
                    Just("+Inf".to_string()),
                    any::<String>(),
                ],
                any::<f64>().prop_filter("JSON numbers are finite", |t| t.is_finite()),
            ),
            0..20,
        ),
        status in prop_oneof![Just("success"), Just("error"), Just("")],
        result_type in prop_oneof![Just("vector"), Just("matrix"), Just("scalar")],
    ) {
        let result: Vec<Value> = series
            .iter()
            .map(|(node, value, t)| {
                let mut metric = serde_json::Map::new();
                if let Some(n) = node {
                    metric.insert("instance".into(), json!(n));
                }
                metric.insert("__name__".into(), json!("x"));
                json!({"metric": metric, "value": [t, value]})
            })
            .collect();
        let body = json!({"status": status, "data": {"resultType": result_type, "result": result}});
        let bytes = serde_json::to_vec(&body).unwrap();
        match parse_vector(&bytes, "instance", true) {
            Ok((samples, unlabelled, not_numbers)) => {
                prop_assert_eq!(status, "success");
                prop_assert_eq!(result_type, "vector");
                prop_assert_eq!(samples.len() + unlabelled + not_numbers.len(), series.len());
                let want_unlabelled = series
                    .iter()
                    .filter(|(n, _, _)| n.as_deref().is_none_or(str::is_empty))
                    .count();
                prop_assert_eq!(unlabelled, want_unlabelled);
            }
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
    }

    #[test]
    fn strip_port_returns_part_of_its_input(s in any::<String>(), host in "[a-z0-9.-]{0,20}", port in any::<u16>()) {
        let out = strip_port(&s);
        prop_assert!(s.contains(out));
        if !host.is_empty() {
            let with_port = format!("{host}:{port}");
            prop_assert_eq!(strip_port(&with_port), host.as_str());
        }
    }

    // --------------------------------------------------------------------------------------
    // SignalFx answers (src/sources/usage/signalfx.rs)
    // --------------------------------------------------------------------------------------

    #[test]
    fn signalfx_answers_never_panic_on_bytes(body in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = parse_metadata(&body);
        let _ = parse_window(&body, &BTreeMap::new());
    }

    /// Finite points give finite means, never between the extremes' overflow; unknown series
    /// and series without points are skipped.
    #[test]
    fn signalfx_window_means_are_finite_and_bounded(
        series in prop::collection::btree_map(
            "[a-z]{1,4}",
            (
                prop::option::of("[a-z]{1,3}(\\.[a-z]{1,4}){0,2}"),
                prop::collection::vec(
                    (any::<i64>(), prop::option::of(prop_oneof![
                        any::<f64>().prop_filter("finite", |v| v.is_finite()),
                        Just(f64::MAX),
                        Just(-f64::MAX),
                    ])),
                    0..8,
                ),
            ),
            0..8,
        ),
    ) {
        let results: Vec<Value> = series
            .iter()
            .map(|(id, (host, _))| match host {
                Some(h) => json!({"id": id, "dimensions": {"host": h}}),
                None => json!({"id": id, "dimensions": {}}),
            })
            .collect();
        let meta = serde_json::to_vec(&json!({"results": results})).unwrap();
        let hosts = parse_metadata(&meta).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let data: BTreeMap<&String, Value> = series
            .iter()
            .map(|(id, (_, points))| (id, json!(points)))
            .collect();
        let window = serde_json::to_vec(&json!({"data": data})).unwrap();
        let means = parse_window(&window, &hosts).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let (lo, hi) = series
            .values()
            .flat_map(|(_, p)| p.iter().filter_map(|(_, v)| *v))
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)));
        // Scaling may round by a few ulps.
        let slack = |x: f64| x.abs() * 1e-12;
        for (host, mean) in &means {
            prop_assert!(mean.is_finite(), "{host}: {mean}");
            prop_assert!(
                *mean >= lo - slack(lo) && *mean <= hi + slack(hi),
                "{host}: {mean} outside [{lo}, {hi}]"
            );
            prop_assert!(!host.contains('.'));
        }
    }

    // --------------------------------------------------------------------------------------
    // The config file and flag values (src/config/mod.rs)
    // --------------------------------------------------------------------------------------

    #[test]
    fn config_files_never_panic(text in prop_oneof![
        any::<String>(),
        "([a-z_]{1,24}: [ -~]{0,24}\n){0,8}",
        "(probes:\n  [a-z_]{1,16}: \\{(enabled|interval|timeout|x): [a-z0-9]{0,4}\\}\n){0,2}",
    ]) {
        if let Ok(file) = FileConfig::parse(&text) {
            let _ = Config::resolve(Cli::default(), file);
        }
    }

    #[test]
    fn every_flag_value_is_accepted_or_a_clear_error(
        values in prop::collection::vec(prop::option::of(prop_oneof![
            any::<String>(),
            "[0-9]{0,22}(ns|ms|s|m|h|d|y)?",
            "[a-z_=,.:/0-9$-]{0,30}",
        ]), 14),
    ) {
        let v = |i: usize| values[i].clone();
        let cli = flags(|o| {
            o.instance.listen = v(0);
            o.schedule.interval = v(1);
            o.schedule.timeout = v(2);
            o.schedule.tick_interval = v(3);
            o.log.log_level = v(4);
            o.workloads.workload_namespaces = v(5);
            o.workloads.addon_keys = v(6);
            o.probes.disable_probes = v(7);
            o.probes.probe_urls = v(8);
            o.probes.addon_endpoints = v(9);
            o.gcm.gcm_prefix = v(10);
            o.push.sinks = v(11).map(|s| s.split(',').map(str::to_string).collect());
            o.leader.leader_elect_lease_duration = v(12);
            o.backends.prometheus_fallback_resolution = v(13);
        });
        if let Err(e) = Config::resolve(cli, FileConfig::default()) {
            let text = e.to_string();
            prop_assert!(text.contains("--") || text.contains("probes"), "names no option: {text}");
            prop_assert_eq!(e.exit_code(), 2);
        }
    }

    // --------------------------------------------------------------------------------------
    // Kubernetes objects with missing or absurd fields (src/sources/cluster/derive.rs)
    // --------------------------------------------------------------------------------------

    #[test]
    fn nodes_with_missing_or_absurd_fields(node in node_json()) {
        // The watcher's lean decoding: never a panic; it reads whatever a whole Node reads.
        let lean = serde_json::from_value::<LeanNode>(node.clone());
        let Ok(whole) = serde_json::from_value::<Node>(node) else { return Ok(()) };
        let Ok(mut lean) = lean else {
            return Err(TestCaseError::fail(format!("a Node that decodes whole fails lean: {lean:?}")));
        };
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let cfg = DeriveConfig::default();
        let facts = as_text(node_facts(&whole, now, &cfg));
        prop_assert_eq!(&facts, &as_text(node_facts(&lean, now, &cfg)));
        // Trimmed as the node store keeps it: the same facts.
        trim_node(&mut lean, &node_label_keys(&cfg), &mut Interner::default());
        prop_assert_eq!(&facts, &as_text(node_facts(&lean, now, &cfg)));
        if let Ok(f) = facts {
            prop_assert!(!f.name.is_empty());
            for c in [f.capacity, f.allocatable].into_iter().flatten() {
                prop_assert!(c.cpu_cores.is_finite() && c.memory_bytes.is_finite());
            }
        }
    }

    #[test]
    fn pods_with_missing_or_absurd_fields(pods in prop::collection::vec(pod_json(), 0..6)) {
        let cfg = DeriveConfig::default();
        let pods: Vec<Pod> = pods.into_iter().filter_map(|p| serde_json::from_value(p).ok()).collect();
        let mut facts = Vec::new();
        for p in &pods {
            let _ = owner(p);
            if let Ok(f) = pod_facts(p, &cfg) {
                for x in [f.requests.cpu_cores, f.requests.memory_bytes, f.limits.cpu_cores, f.limits.memory_bytes] {
                    prop_assert!(x.is_finite(), "{x}");
                }
                facts.push(f);
            }
        }
        for (node, sums) in node_pod_sums(&facts) {
            prop_assert!(!node.is_empty() || facts.iter().any(|f| f.node.as_deref() == Some("")));
            prop_assert!(sums.pods as usize <= facts.len());
            for x in [sums.requests.cpu_cores, sums.requests.memory_bytes, sums.limits.cpu_cores, sums.limits.memory_bytes] {
                prop_assert!(x.is_finite(), "{node}: sum {x}");
            }
        }
    }

    /// The watchers decode pods into `LeanPod`: it reads every pod the whole k8s-openapi type
    /// reads (and more: unread fields of the wrong type, missing required ones), derives the
    /// same facts from it, and never panics on what it reads.
    #[test]
    fn lean_pods_read_what_whole_pods_read_and_derive_the_same(pods in prop::collection::vec(pod_json(), 0..6)) {
        let cfg = DeriveConfig::default();
        for p in pods {
            let lean = serde_json::from_value::<LeanPod>(p.clone());
            if let Ok(whole) = serde_json::from_value::<Pod>(p.clone()) {
                let Ok(lean) = &lean else {
                    return Err(TestCaseError::fail(format!("LeanPod refused a Pod: {lean:?}")));
                };
                prop_assert_eq!(as_text(pod_facts(&whole, &cfg)), as_text(pod_facts(lean, &cfg)));
                prop_assert_eq!(
                    as_text(task_pod(&whole, &TaskPodConfig::default())),
                    as_text(task_pod(lean, &TaskPodConfig::default()))
                );
            }
            if let Ok(lean) = lean {
                let _ = owner(&lean);
                if let Ok(f) = pod_facts(&lean, &cfg) {
                    prop_assert!(f.requests.cpu_cores.is_finite() && f.limits.memory_bytes.is_finite());
                }
                let _ = task_pod(&lean, &TaskPodConfig::default());
            }
        }
    }

    #[test]
    fn workloads_with_missing_or_absurd_fields(obj in workload_json()) {
        let cfg = DeriveConfig::default();
        if let Ok(ds) = serde_json::from_value::<DaemonSet>(obj.clone())
            && let Some(e) = daemonset_expected(&ds, &cfg)
        {
            prop_assert!(e.expected <= i32::MAX as u32);
        }
        if let Ok(d) = serde_json::from_value::<Deployment>(obj)
            && let Some(e) = deployment_expected(&d, &cfg)
        {
            prop_assert!(e.expected <= i32::MAX as u32);
        }
    }
}

fn opt<T: std::fmt::Debug + Clone + 'static>(
    s: impl Strategy<Value = T> + 'static,
) -> impl Strategy<Value = Option<T>> {
    prop::option::weighted(0.7, s)
}

/// Any JSON value, strings with escapes and non-ASCII included, a few levels deep.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        (-1e12f64..1e12).prop_map(|f| json!(f)),
        "[ -~\\u{e9}\\u{1F600}\"\\\\\n\t]{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z\"\\\\]{0,5}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A JSON object, as each list item is.
fn json_object() -> impl Strategy<Value = Value> {
    prop::collection::btree_map("[a-z_\"]{0,6}", json_value(), 0..5)
        .prop_map(|m| Value::Object(m.into_iter().collect()))
}

fn resources_json() -> impl Strategy<Value = Value> {
    prop::collection::btree_map(
        prop_oneof![
            Just("cpu".to_string()),
            Just("memory".to_string()),
            "[a-z./-]{1,12}"
        ],
        quantity_like(),
        0..3,
    )
    .prop_map(|m| json!(m))
}

fn timestamp() -> impl Strategy<Value = String> {
    prop_oneof![
        (0i64..253_402_300_799).prop_map(|s| {
            // RFC 3339 by hand, through the civil calendar of the seconds.
            let days = s.div_euclid(86_400);
            let rem = s.rem_euclid(86_400);
            let (y, m, d) = civil(days);
            format!(
                "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
                rem / 3600,
                rem / 60 % 60,
                rem % 60
            )
        }),
        "[0-9TZ:-]{0,25}",
    ]
}

/// Days since 1970-01-01 to (year, month, day) (Howard Hinnant's algorithm).
fn civil(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

fn labels_json() -> impl Strategy<Value = Value> {
    prop::collection::btree_map(
        prop_oneof![
            Just("cloud.google.com/gke-nodepool".to_string()),
            Just("topology.kubernetes.io/zone".to_string()),
            Just("components.gke.io/component-name".to_string()),
            Just("components.gke.io/component-version".to_string()),
            "[a-z./-]{1,12}",
        ],
        "[ -~]{0,12}",
        0..4,
    )
    .prop_map(|m| json!(m))
}

fn meta_json() -> impl Strategy<Value = Value> {
    (
        opt("[a-z0-9.-]{0,20}"),
        opt("[a-z0-9-]{0,10}"),
        opt(timestamp()),
        opt(labels_json()),
        opt(labels_json()),
    )
        .prop_map(|(name, ns, created, labels, annotations)| {
            let mut m = serde_json::Map::new();
            let mut put = |k: &str, v: Option<Value>| {
                if let Some(v) = v {
                    m.insert(k.into(), v);
                }
            };
            put("name", name.map(Value::from));
            put("namespace", ns.map(Value::from));
            put("creationTimestamp", created.map(Value::from));
            put("labels", labels);
            put("annotations", annotations);
            Value::Object(m)
        })
}

fn node_json() -> impl Strategy<Value = Value> {
    (
        meta_json(),
        opt(any::<bool>()),
        opt(prop::collection::vec(
            prop_oneof![
                Just("node.kubernetes.io/unschedulable".to_string()),
                "[a-z./]{0,10}"
            ],
            0..3,
        )),
        opt(resources_json()),
        opt(resources_json()),
        opt(prop::collection::vec(
            (
                "[A-Za-z]{0,10}",
                prop_oneof!["True", "False", "Unknown", "[a-z]{0,4}"],
            ),
            0..4,
        )),
    )
        .prop_map(|(meta, unsched, taints, cap, alloc, conds)| {
            let taints: Option<Vec<Value>> = taints.map(|t| {
                t.into_iter()
                    .map(|k| json!({"key": k, "effect": "NoSchedule"}))
                    .collect()
            });
            let conds: Option<Vec<Value>> = conds.map(|c| {
                c.into_iter()
                    .map(|(t, s)| json!({"type": t, "status": s}))
                    .collect()
            });
            json!({
                "metadata": meta,
                "spec": {"unschedulable": unsched, "taints": taints},
                "status": {"capacity": cap, "allocatable": alloc, "conditions": conds},
            })
        })
}

fn pod_json() -> impl Strategy<Value = Value> {
    (
        meta_json(),
        // Few node names, so pods share nodes and their sums are exercised.
        opt(prop_oneof!["[ab]", "[a-z0-9-]{0,8}"]),
        opt(prop_oneof![
            "Pending",
            "Running",
            "Succeeded",
            "Failed",
            "[A-Za-z]{0,8}"
        ]),
        prop::collection::vec((opt(resources_json()), opt(resources_json())), 0..3),
        prop::collection::vec(any::<i32>(), 0..3),
        opt(prop::collection::vec(
            (
                prop_oneof!["DaemonSet", "ReplicaSet", "[A-Za-z]{0,8}"],
                "[a-z0-9-]{0,20}",
                opt(any::<bool>()),
            ),
            0..3,
        )),
    )
        .prop_map(|(mut meta, node, phase, containers, restarts, owners)| {
            if let Some(o) = owners {
                let refs: Vec<Value> = o
                    .into_iter()
                    .map(|(kind, name, controller)| {
                        json!({"apiVersion": "apps/v1", "kind": kind, "name": name, "uid": "u", "controller": controller})
                    })
                    .collect();
                meta["ownerReferences"] = json!(refs);
            }
            let containers: Vec<Value> = containers
                .into_iter()
                .enumerate()
                .map(|(i, (req, lim))| {
                    json!({"name": format!("c{i}"), "resources": {"requests": req, "limits": lim}})
                })
                .collect();
            let statuses: Vec<Value> = restarts
                .into_iter()
                .enumerate()
                .map(|(i, r)| {
                    json!({"name": format!("c{i}"), "restartCount": r, "ready": true, "image": "i", "imageID": ""})
                })
                .collect();
            json!({
                "metadata": meta,
                "spec": {"nodeName": node, "containers": containers},
                "status": {"phase": phase, "containerStatuses": statuses},
            })
        })
}

fn workload_json() -> impl Strategy<Value = Value> {
    (
        meta_json(),
        meta_json(),
        opt(any::<i32>()),
        any::<i32>(),
        any::<i32>(),
    )
        .prop_map(|(meta, template_meta, replicas, desired, available)| {
            json!({
                "metadata": meta,
                "spec": {
                    "replicas": replicas,
                    "selector": {},
                    "template": {"metadata": template_meta},
                },
                "status": {
                    "desiredNumberScheduled": desired,
                    "currentNumberScheduled": 0,
                    "numberMisscheduled": 0,
                    "numberReady": 0,
                    "availableReplicas": available,
                },
            })
        })
}

// ------------------------------------------------------------------------------------------
// Plain regression tests: inputs that once broke a parser, or that are too big to generate.
// ------------------------------------------------------------------------------------------

/// Found here: 100,000 `[` took the YAML parser 55 s (quadratic); now refused at once.
#[test]
fn deeply_nested_config_yaml_is_an_error_quickly() {
    for text in [
        "listen: ".to_string() + &"[".repeat(100_000),
        "probes: ".to_string() + &"{a: ".repeat(100_000),
        "probes:\n".to_string() + &"- ".repeat(50_000) + "x\n",
    ] {
        let started = std::time::Instant::now();
        let e = FileConfig::parse(&text).unwrap_err();
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?} for {e}",
            started.elapsed()
        );
    }
    let e = FileConfig::parse(&("listen: ".to_string() + &"[".repeat(65))).unwrap_err();
    assert!(matches!(e, BadConfigText::TooDeep), "{e:?}");
    assert!(e.to_string().contains("nested deeper than 64"), "{e}");
    // Ordinary brackets are fine.
    let ok = "prometheus_metrics:\n- {name: a, type: CPU, fallback: \"sum(rate(x[5m]))\"}\n";
    assert!(FileConfig::parse(ok).is_ok());
}

#[test]
fn an_oversized_config_file_is_refused_unread() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.yaml");
    let line = "# padding padding padding padding padding padding padding padding\n";
    std::fs::write(&path, line.repeat((1 << 20) / line.len() + 1)).unwrap();
    let e = FileConfig::read(&path).unwrap_err().to_string();
    assert!(e.contains("big.yaml") && e.contains("larger than"), "{e}");
}

/// Found here: two SignalFx points near f64::MAX averaged to infinity.
#[test]
fn signalfx_means_of_huge_points_stay_finite() {
    let hosts =
        parse_metadata(br#"{"results":[{"id":"s1","dimensions":{"host":"n1.x"}}]}"#).unwrap();
    let body = br#"{"data":{"s1":[[0,1.7976931348623157e308],[1,1.7976931348623157e308],[2,1.7976931348623157e308]]}}"#;
    let means = parse_window(body, &hosts).unwrap();
    assert_eq!(means.get("n1"), Some(&f64::MAX));
}

#[test]
fn huge_quantity_exponents_and_mantissas_are_errors_quickly() {
    for s in [
        "1e9223372036854775807",
        "1e99999999999999999999999999",
        "1e400",
        "2Ei0",
    ] {
        let started = std::time::Instant::now();
        let r = parse_quantity(s);
        assert!(r.is_err(), "{s}: {r:?}");
        assert!(started.elapsed() < Duration::from_millis(100), "{s}");
    }
    let long = "9".repeat(100_000);
    assert!(parse_quantity(&long).is_ok_and(f64::is_finite) || parse_quantity(&long).is_err());
    // Underflow is zero, as Kubernetes rounds a tiny quantity down.
    assert_eq!(parse_quantity("1e-400"), Ok(0.0));
    assert_eq!(parse_quantity("1e-9223372036854775808"), Ok(0.0));
}

#[test]
fn absurd_cpu_numbers_and_counts_are_errors() {
    assert!(procfs::parse_stat(b"cpu99999999999 1 2 3 4\n").is_err());
    assert!(procfs::parse_stat(b"cpu 18446744073709551616 1 2 3\n").is_err());
    assert!(procfs::parse_meminfo(b"MemTotal: 18446744073709551615 kB\nMemFree: 1 kB\n").is_err());
}

/// Found here: two pods requesting 1e308 cores each summed to infinity on their node. Such a
/// quantity is now an error (Kubernetes caps quantities at 2^63-1), the pods are skipped.
#[test]
fn pods_requesting_absurd_amounts_never_sum_to_infinity() {
    let pod = |name: &str| {
        serde_json::from_value::<Pod>(json!({
            "metadata": {"name": name, "namespace": "x"},
            "spec": {"nodeName": "a", "containers": [
                {"name": "c", "resources": {"requests": {"cpu": "1e308", "memory": "1e308"}}},
            ]},
            "status": {"phase": "Running"},
        }))
        .unwrap()
    };
    let cfg = DeriveConfig::default();
    let e = pod_facts(&pod("p1"), &cfg).unwrap_err();
    let BadObject::Of { object, source } = &e else {
        panic!("{e:?}")
    };
    assert_eq!(object, "pod x/p1: ");
    assert!(matches!(**source, BadObject::Quantity { .. }), "{e:?}");
    let e = e.to_string();
    assert!(e.contains("x/p1") && e.contains("out of range"), "{e}");
    let facts: Vec<_> = [pod("p1"), pod("p2")]
        .iter()
        .filter_map(|p| pod_facts(p, &cfg).ok())
        .collect();
    for (node, sums) in node_pod_sums(&facts) {
        assert!(
            sums.requests.cpu_cores.is_finite() && sums.requests.memory_bytes.is_finite(),
            "{node}: {:?}",
            sums.requests
        );
    }
}

/// A pod with a field we never read in an unexpected shape, and required fields missing: the
/// whole type refuses it (before, the watch event failed to decode), the lean type reads it and
/// the nameless one is a counted skip in `derive`, not a panic.
#[test]
fn lean_pods_skip_what_they_do_not_read() {
    let odd = json!({
        "metadata": {"name": "p", "namespace": "x", "managedFields": "not a list"},
        "spec": {"nodeName": "a", "containers": [
            {"image": 5, "resources": {"requests": {"cpu": "250m"}}},
        ]},
        "status": {"phase": "Running", "containerStatuses": [{"image": ["?"]}]},
    });
    assert!(serde_json::from_value::<Pod>(odd.clone()).is_err());
    let lean: LeanPod = serde_json::from_value(odd).unwrap();
    let f = pod_facts(&lean, &DeriveConfig::default()).unwrap();
    assert_eq!((f.node.as_deref(), f.requests.cpu_cores), (Some("a"), 0.25));
    let nameless: LeanPod = serde_json::from_value(json!({"spec": {}})).unwrap();
    let e = pod_facts(&nameless, &DeriveConfig::default()).unwrap_err();
    assert!(matches!(e, BadObject::Missing(_)), "{e:?}");
    assert!(e.to_string().contains("without a name"), "{e}");
}

// Memory used has one definition: the host usage source's memory utilization and the platform
// facts' memory usage, read from the same `/proc/meminfo`, are the same figure (the platform's
// bytes are the host's ratio times the host's capacity), MemTotal - MemAvailable.

fn procfs_fixture(name: &str) -> Vec<u8> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/procfs")
        .join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// (the host's memory ratio, the host's memory capacity, the platform's memory usage) from a
/// procfs root holding `meminfo` and a `stat`.
async fn both_readings(meminfo: &[u8]) -> (f64, f64, f64) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("meminfo"), meminfo).unwrap();
    std::fs::write(dir.path().join("stat"), procfs_fixture("stat_4cpu_a")).unwrap();
    let mut host = HostFetcher::new(HostConfig {
        procfs: dir.path().to_path_buf(),
        node_name: "n1".into(),
    });
    let got = host.fetch().await;
    let ratio = got.samples[0]
        .values
        .iter()
        .find_map(|&(r, v)| (r == Resource::Memory).then_some(v))
        .expect("a memory ratio");
    let capacity = got.capacities[0].1.memory_bytes;
    let (platform, errors) = read_platform("n1", &dir.path().join("no-sysfs"), dir.path());
    assert!(errors.is_empty(), "{errors:?}");
    let used = platform.memory_usage_bytes.expect("a memory usage");
    (ratio, capacity, used)
}

#[tokio::test(start_paused = true)]
async fn host_and_platform_get_the_same_memory_used_from_the_same_meminfo() {
    let hand_made = b"MemTotal: 1000 kB\nMemFree: 600 kB\nMemAvailable: 250 kB\nBuffers: 300 kB\nCached: 400 kB\n";
    let cases: [(&str, Vec<u8>, u64); 4] = [
        // MemAvailable present: 24684084 - 23939712 kB. WCA's MemTotal - MemFree - Buffers -
        // Cached would say 554388 kB; both users now say 744372 kB.
        ("modern", procfs_fixture("meminfo_modern"), 744_372),
        // Before kernel 3.14: MemTotal - MemFree - Buffers - Cached.
        (
            "no MemAvailable",
            procfs_fixture("meminfo_no_memavailable"),
            8_058_880 - 1_234_560 - 204_800 - 3_072_000,
        ),
        // MemAvailable wins over MemFree + Buffers + Cached (which exceed the total here).
        ("hand-made", hand_made.to_vec(), 750),
        // Free, buffers and cached past the total, no MemAvailable: floored at 0.
        (
            "floored",
            b"MemTotal: 1000 kB\nMemFree: 600 kB\nBuffers: 300 kB\nCached: 400 kB\n".to_vec(),
            0,
        ),
    ];
    for (name, meminfo, want_kib) in cases {
        let parsed = procfs::parse_meminfo(&meminfo).unwrap();
        assert_eq!(parsed.used_bytes(), want_kib * 1024, "{name}");
        let (ratio, capacity, used) = both_readings(&meminfo).await;
        assert_eq!(used, (want_kib * 1024) as f64, "{name}: platform bytes");
        assert_eq!(capacity, parsed.total_bytes as f64, "{name}: host capacity");
        assert_eq!(
            ratio,
            used / capacity,
            "{name}: host ratio is platform bytes / MemTotal"
        );
    }
}

/// A result with its error as text: two shapes of one object fail alike.
fn as_text<T>(r: Result<T, BadObject>) -> Result<T, String> {
    r.map_err(|e| e.to_string())
}
