use std::process::ExitCode;

use clap::Parser;
use kube_prober::telemetry::{self, LogGuard};
use kube_prober::{app, cli::Cli, config::Config, subcommand};

/// glibc's allocator, told to keep less: at 5,000 nodes the tick's transient buffers otherwise
/// stay resident as fragmented free space in one arena per thread (docs/benchmarks.md).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod heap {
    /// Two arenas instead of up to eight per core; before any other thread starts.
    pub fn limit_arenas() {
        // SAFETY: mallopt only sets a tunable of glibc's allocator; it is called before the
        // runtime starts any thread, and M_ARENA_MAX takes any positive value.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 2);
        }
    }

    /// Returns whole free pages of every arena to the kernel.
    pub fn trim() {
        // SAFETY: malloc_trim is thread-safe (it takes each arena's lock) and only releases
        // memory the allocator holds free; no pointer of ours is involved.
        unsafe {
            libc::malloc_trim(0);
        }
    }
}

/// Pages of the binary that only start-up used, handed back once (issue #11, node-role RSS).
///
/// A read fault on the binary maps up to 64 KiB of its neighbouring code (the kernel's
/// `fault_around_bytes`), and start-up runs code all over it (flag and config parsing, the
/// kubeconfig's YAML, TLS set-up), so after start most of the 20 MB of code and read-only data
/// is resident although the steady state runs a fraction of it. `MADV_PAGEOUT` on the binary's
/// read-only and executable mappings unmaps their pages and lets the kernel reclaim them; it
/// never changes their contents (they are clean file pages: the writable and relocated
/// mappings are left alone), and whatever runs later faults its pages back in from the file.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod code {
    use std::sync::atomic::{AtomicU32, Ordering};

    /// Ticks after which the start-up pages are handed back (besides once before the runtime
    /// runs the roles, see `main`): the first (the kube client, TLS and kubeconfig set-up,
    /// the watches' first lists and the first collection and render have run: what they
    /// faulted in would otherwise stay resident through the second tick, where the start-up
    /// peak formed) and the third (whatever start-up work the first ticks still did).
    const AFTER_TICKS: [u32; 2] = [1, 3];
    static TICKS: AtomicU32 = AtomicU32::new(0);

    /// True on the ticks (counted from 1) after which the start-up pages are handed back.
    pub(crate) fn due(tick: u32) -> bool {
        AFTER_TICKS.contains(&tick)
    }

    /// Counts ticks; on each of `AFTER_TICKS`, pages out the binary's start-up code.
    pub fn after_tick() {
        if due(TICKS.fetch_add(1, Ordering::Relaxed) + 1) {
            release_startup_pages();
        }
    }

    /// `MADV_PAGEOUT` on every mapping of our own executable that is not writable and has no
    /// anonymous (copied-on-write) pages; returns the bytes the kernel accepted the advice
    /// for. Best effort: an older kernel's EINVAL or an unreadable /proc only means the pages
    /// stay.
    pub fn release_startup_pages() -> usize {
        let mut advised = 0;
        let Ok(exe) = std::fs::read_link("/proc/self/exe") else {
            return advised;
        };
        let Ok(smaps) = std::fs::read_to_string("/proc/self/smaps") else {
            return advised;
        };
        let exe = exe.to_string_lossy();
        let mut current: Option<(usize, usize)> = None;
        for line in smaps.lines() {
            let mut f = line.split_whitespace();
            let first = f.next().unwrap_or("");
            if let Some((lo, hi)) = first.split_once('-')
                && !first.ends_with(':')
            {
                let perms = f.next().unwrap_or("");
                let path = f.nth(3).unwrap_or("");
                current = match (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16)) {
                    (Ok(lo), Ok(hi)) if path == exe && !perms.contains('w') && hi > lo => {
                        Some((lo, hi))
                    }
                    _ => None,
                };
            } else if first == "Anonymous:"
                && let Some((lo, hi)) = current.take()
                && f.next() == Some("0")
            {
                // SAFETY: [lo, hi) is a whole mapping of our own executable, page-aligned as
                // /proc reports it, read-only and without anonymous pages, i.e. clean pages of
                // the file. MADV_PAGEOUT is advisory and non-destructive: it never changes
                // what a later access reads, only whether the page is resident.
                let rc =
                    unsafe { libc::madvise(lo as *mut libc::c_void, hi - lo, libc::MADV_PAGEOUT) };
                if rc == 0 {
                    advised += hi - lo;
                }
            }
        }
        advised
    }

    #[cfg(test)]
    mod tests {
        /// Resident KiB of this executable's executable mapping(s).
        fn exe_text_rss_kib() -> u64 {
            let exe = std::fs::read_link("/proc/self/exe").unwrap();
            let exe = exe.to_string_lossy();
            let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
            let (mut ours, mut kib) = (false, 0);
            for line in smaps.lines() {
                let f: Vec<&str> = line.split_whitespace().collect();
                if f.first()
                    .is_some_and(|a| a.contains('-') && !a.ends_with(':'))
                {
                    ours = f.get(1).is_some_and(|p| p.contains('x'))
                        && f.get(5).is_some_and(|p| *p == exe);
                } else if ours && f.first() == Some(&"Rss:") {
                    kib += f.get(1).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
                }
            }
            kib
        }

        /// Start-up pages are handed back after the first and the third tick only (and once
        /// before the roles start, in `main`), never on every tick.
        #[test]
        fn pages_out_after_the_first_and_third_tick_only() {
            let due: Vec<u32> = (1..=100).filter(|&t| super::due(t)).collect();
            assert_eq!(due, vec![1, 3]);
        }

        /// The code pages go, the process keeps running the same code (the pages fault back
        /// in from the file), and a second call is harmless.
        #[test]
        fn pages_out_the_clean_code_and_keeps_running() {
            let before = exe_text_rss_kib();
            let advised = super::release_startup_pages();
            let after = exe_text_rss_kib();
            if advised == 0 {
                eprintln!("skipped: MADV_PAGEOUT refused (kernel older than 5.4?)");
                return;
            }
            assert!(
                after < before,
                "resident code {before} KiB before, {after} KiB after"
            );
            // Code that ran before the page-out runs again, faulted back in from the file.
            assert!(exe_text_rss_kib() > 0);
            assert!(super::release_startup_pages() > 0);
        }
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
const AFTER_TICK: Option<fn()> = Some(after_tick);

/// After each snapshot: the allocator's free pages back to the kernel; once, start-up code.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn after_tick() {
    heap::trim();
    code::after_tick();
}
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
const AFTER_TICK: Option<fn()> = None;

fn main() -> ExitCode {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    heap::limit_arenas();
    // Bad flags: clap prints the problem and exits with 2.
    let mut cli = Cli::parse();
    let command = cli.command.take();
    let cfg = match Config::load(cli) {
        Ok(c) => c,
        Err(e) => return fail(&e, &LogGuard::direct()),
    };
    // From here on every line to stderr goes through the log queue: it never blocks on a pipe
    // nobody reads and never panics on a closed one. Dropped last, it flushes (bounded).
    let logs = match telemetry::init(&cfg.log_level, cfg.log_format) {
        Ok(g) => g,
        Err(e) => return fail(&e, &LogGuard::direct()),
    };
    // One TLS crypto provider for every client (see build notes: kube and gcloud-sdk would
    // otherwise disagree at run time). Already installed is fine.
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();

    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            logs.line(&format!("kube-prober: cannot start the async runtime: {e}"));
            return ExitCode::from(1);
        }
    };
    if let Some(command) = command {
        return match runtime.block_on(subcommand::run(command, &cfg)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(&e, &logs),
        };
    }
    // Flag, environment and config-file parsing and the logger's set-up are done: their code
    // (clap, the config file's YAML) is not needed again. Handing it back before the roles
    // start keeps it out of the start-up peak (issue #11, VmHWM).
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    code::release_startup_pages();
    match runtime.block_on(app::run(cfg, AFTER_TICK)) {
        Ok(()) => ExitCode::SUCCESS,
        // Said once, as a plain line: a log filter (`--log-level off`) must not hide why we stop.
        Err(e) => fail(&e, &logs),
    }
}

fn fail(e: &kube_prober::Error, logs: &LogGuard) -> ExitCode {
    logs.line(&format!("kube-prober: {e}"));
    ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(1))
}
