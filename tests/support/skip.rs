//! Skips that cannot hide: a test that cannot run on this machine calls [`skip`] with the
//! prerequisite it lacks and returns (passing). The README test command (`.ci/test`) probes the
//! machine for each prerequisite on its own, lists the ones it found in
//! `KUBE_PROBER_PREREQUISITES` (comma-separated) and collects every skip from the file named by
//! `KUBE_PROBER_SKIP_LOG` into its summary. A test that skips for want of a prerequisite the
//! probe found fails instead: on such a machine a skip can only be a defect.
//!
//! Prerequisites: `cgroups` (root, and cgroups can be made under /sys/fs/cgroup),
//! `perf-cgroup` (`cgroups`, plus a perf_event cgroup hierarchy: v1 `perf_event` or a v2 mount).
#![allow(dead_code)]

use std::io::Write;

/// Records that the calling test skips for want of `prerequisite`, because `reason`; panics when
/// the machine has the prerequisite (see the module docs).
pub fn skip(prerequisite: &str, reason: &str) {
    let test = std::thread::current()
        .name()
        .unwrap_or("unnamed test")
        .to_string();
    let present = std::env::var("KUBE_PROBER_PREREQUISITES").unwrap_or_default();
    if present.split(',').any(|p| p.trim() == prerequisite) {
        panic!(
            "{test} would skip for want of `{prerequisite}` ({reason}), but the test command \
             found `{prerequisite}` on this machine: the test, not the machine, is at fault"
        );
    }
    println!("SKIPPED: {reason}");
    if let Some(path) = std::env::var_os("KUBE_PROBER_SKIP_LOG") {
        let binary = std::env::args()
            .next()
            .and_then(|a| {
                std::path::Path::new(&a)
                    .file_name()
                    .map(|f| f.to_string_lossy().into_owned())
            })
            .unwrap_or_default();
        let binary = binary
            .rsplit_once('-')
            .map_or(binary.as_str(), |(b, _)| b)
            .to_string();
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let _ = writeln!(f, "{binary} {test}: needs {prerequisite}: {reason}");
        }
    }
}
