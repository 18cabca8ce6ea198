//! Helpers shared by the benchmarks: the first line a command prints, and machine facts.
// Each bench binary compiles this module on its own and uses only part of it.
#![allow(dead_code)]

use std::process::Command;

pub mod cpu_group;

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

/// The commit the bench runs on (`git rev-parse --short=7 HEAD`), `+changes` when tracked files
/// differ from it; `unknown` outside a git checkout.
pub fn commit() -> String {
    let head = first_line("git", &["rev-parse", "--short=7", "HEAD"]);
    if head.is_empty() || head.contains(' ') {
        return "unknown".into();
    }
    let dirty = Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=no"])
        .output()
        .is_ok_and(|o| !o.stdout.is_empty());
    if dirty {
        format!("{head}+changes")
    } else {
        head
    }
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

/// utime + stime of a process (`self` or a pid), in clock ticks (fields 14 and 15 of
/// /proc/PID/stat).
pub fn cpu_ticks(pid: impl std::fmt::Display) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .unwrap_or_else(|e| panic!("/proc/{pid}/stat: {e}"));
    // Field 2 (comm) is in parentheses and may hold spaces or ')': split after the last ')'.
    let rest = &stat[stat.rfind(')').expect("no ')' in /proc/PID/stat") + 1..];
    // `rest` starts at field 3 (state), so field N is at index N - 3.
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| -> u64 {
        fields
            .get(n - 3)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("/proc/{pid}/stat field {n} unreadable: {stat}"))
    };
    field(14) + field(15)
}

/// The values of two `key:` lines of /proc/PID/status, in KiB.
fn status_kib(pid: u32, keys: [&str; 2]) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("/proc/{pid}/status: {e}"));
    let get = |key: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("/proc/{pid}/status lacks {key}"))
    };
    (get(keys[0]), get(keys[1]))
}

/// (VmRSS, VmHWM) in KiB from /proc/PID/status.
pub fn rss_kib(pid: u32) -> (u64, u64) {
    status_kib(pid, ["VmRSS:", "VmHWM:"])
}

/// (RssAnon, RssFile) in KiB from /proc/PID/status: the heap and stacks, and the pages of
/// the binary and libraries mapped in.
pub fn rss_split_kib(pid: u32) -> (u64, u64) {
    status_kib(pid, ["RssAnon:", "RssFile:"])
}

/// Resets the peak RSS (VmHWM) of `pid` to its RSS now: `5` into /proc/PID/clear_refs (Linux
/// 4.0 and later; needs the right to write there: the process' owner or root).
pub fn reset_peak_rss(pid: u32) -> Result<(), String> {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5")
        .map_err(|e| format!("cannot reset VmHWM through /proc/{pid}/clear_refs: {e}"))
}

/// Clock ticks per second (`getconf CLK_TCK`).
pub fn clk_tck() -> u64 {
    let out = Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .expect("cannot run `getconf CLK_TCK`");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("`getconf CLK_TCK` did not print a number")
}

/// A whole number from the environment, or `default`.
pub fn env_usize(name: &str, default: usize) -> usize {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a whole number")),
        Err(_) => default,
    }
}

/// The 1/5/15-minute load averages.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

pub fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

pub fn ms(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
