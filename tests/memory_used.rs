//! Memory used has one definition: the host usage source's memory utilization and the platform
//! facts' memory usage, read from the same `/proc/meminfo`, are the same figure (the platform's
//! bytes are the host's ratio times the host's capacity), MemTotal - MemAvailable.

use std::path::Path;

use kube_prober::model::Resource;
use kube_prober::sources::procfs;
use kube_prober::sources::task::platform::read_platform;
use kube_prober::sources::usage::UsageFetcher;
use kube_prober::sources::usage::host::{HostConfig, HostFetcher};

fn fixture(name: &str) -> Vec<u8> {
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
    std::fs::write(dir.path().join("stat"), fixture("stat_4cpu_a")).unwrap();
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
        ("modern", fixture("meminfo_modern"), 744_372),
        // Before kernel 3.14: MemTotal - MemFree - Buffers - Cached.
        (
            "no MemAvailable",
            fixture("meminfo_no_memavailable"),
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
