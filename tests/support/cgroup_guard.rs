//! Cgroups and worker processes made by the real-kernel tests, removed on drop (also when a
//! test fails): children first, then the directories, deepest first.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout};
use std::time::Duration;

/// Cgroups and children made by the test; removed on drop, children first.
#[derive(Default)]
pub struct CgroupGuard {
    pub dirs: Vec<PathBuf>,
    pub children: Vec<Child>,
}

impl Drop for CgroupGuard {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        // Deepest first.
        let mut dirs = self.dirs.clone();
        dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
        for d in dirs {
            for _ in 0..50 {
                if std::fs::remove_dir(&d).is_ok() || !d.exists() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            if d.exists() {
                eprintln!("could not remove {}", d.display());
            }
        }
    }
}

impl CgroupGuard {
    /// Makes `rel` (and its parents) under every root in `roots`, remembering what it made.
    pub fn mkdirs(&mut self, roots: &[&Path], rel: &Path) -> std::io::Result<()> {
        for root in roots {
            let mut p = root.to_path_buf();
            for comp in rel.components() {
                p.push(comp);
                if !p.exists() {
                    std::fs::create_dir(&p)?;
                    self.dirs.push(p.clone());
                }
            }
        }
        Ok(())
    }
}

/// Reads a worker's stdout until it prints a line ending in `done`.
pub fn wait_done(out: &mut BufReader<ChildStdout>) {
    let mut line = String::new();
    loop {
        line.clear();
        let n = out.read_line(&mut line).unwrap();
        assert!(n > 0, "worker exited before it was done");
        if line.trim_end().ends_with("done") {
            return;
        }
    }
}

/// CPU time (utime + stime) of process `pid` (or `self`) in seconds, from /proc/PID/stat
/// (USER_HZ = 100).
pub fn proc_cpu_seconds(pid: &str) -> Option<f64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ut: f64 = f.get(11)?.parse().ok()?;
    let st: f64 = f.get(12)?.parse().ok()?;
    Some((ut + st) / 100.0)
}
