//! Helpers shared by the benchmarks: the first line a command prints, and machine facts.
// Each bench binary compiles this module on its own and uses only part of it.
#![allow(dead_code)]

use std::process::Command;

/// The first line `cmd args` prints on stdout or stderr (`unknown` if it cannot run).
pub fn first_line(cmd: &str, args: &[&str]) -> String {
    Command::new(cmd)
        .args(args)
        .output()
        .ok()
        .map(|o| {
            // node_exporter prints its version on stderr in some releases, stdout in others.
            let mut s = String::from_utf8_lossy(&o.stdout).into_owned();
            s.push_str(&String::from_utf8_lossy(&o.stderr));
            s.lines().next().unwrap_or("").trim().to_string()
        })
        .unwrap_or_else(|| "unknown".to_string())
}

/// nproc, kernel, CPU model and memory, for the report.
pub fn machine_info() -> Vec<(&'static str, String)> {
    let nproc = Command::new("nproc")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.to_string())
                .unwrap_or_else(|_| "unknown".into())
        });
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into());
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map(|kib| format!("{:.1} GiB", kib as f64 / 1024.0 / 1024.0))
        .unwrap_or_else(|| "unknown".into());
    vec![
        ("nproc", nproc),
        ("kernel", kernel),
        ("CPU", cpu),
        ("memory", mem),
    ]
}
