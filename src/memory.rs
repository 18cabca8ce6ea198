//! The process's memory tuning (the node role's RSS budget): glibc's allocator told to keep
//! fewer arenas and to return free pages after each tick, and the code pages only start-up
//! used handed back at the start's fixed points. Part of the binary, not the library (which
//! forbids `unsafe` and only calls the hooks `main` gives it: [`AFTER_TICK`], [`AFTER_SETUP`]);
//! a no-op off glibc Linux.

use kube_prober::k8s::role::Role;

/// glibc's allocator, told to keep less: at 5,000 nodes the tick's transient buffers otherwise
/// stay resident as fragmented free space in one arena per thread (docs/benchmarks.md).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod heap {
    /// `arenas` arenas instead of up to eight per core; before any other thread starts.
    pub fn limit_arenas(arenas: i32) {
        // SAFETY: mallopt only sets a tunable of glibc's allocator; it is called before the
        // runtime starts any thread, and M_ARENA_MAX takes any positive value.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, arenas.max(1));
        }
    }

    /// Arenas for a role: one for the node role (the node role's RSS: its threads rarely
    /// allocate at the same time, and with a second arena each tick's rendered pieces and
    /// collected samples were spread over two heaps, each keeping pages the other's free
    /// space could have held: 0.3-0.5 MiB more on average in `benches/task_collect.rs`); two
    /// for the others (the cluster role renders megabytes per tick beside its watchers).
    pub fn arenas(role: Option<super::Role>) -> i32 {
        if role == Some(super::Role::Node) {
            1
        } else {
            2
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

/// Pages of the binary (and of the shared libraries) that only start-up used, handed back at
/// the start's fixed points (the node role's RSS).
///
/// A read fault on the binary maps up to 64 KiB of its neighbouring code (the kernel's
/// `fault_around_bytes`), and start-up runs code all over it (flag and config parsing, the
/// kubeconfig's YAML, TLS set-up), so after start most of the 20 MB of code and read-only data
/// is resident although the steady state runs a fraction of it (the same holds, smaller, for
/// libc, libm and ld.so). `MADV_PAGEOUT` on the read-only and executable file mappings unmaps
/// their pages and lets the kernel reclaim them (pages other processes map stay cached); it
/// never changes their contents (they are clean file pages: the writable and relocated
/// mappings are left alone), and whatever runs later faults its pages back in from the file.
///
/// The kernel only pages out file pages of a file the caller owns or could open for writing
/// (`can_do_pageout`); the image runs as user 65532 and its binary belongs to root, so there
/// `MADV_PAGEOUT` is accepted and does nothing (measured: RssFile stayed at 13.8 MiB, VmRSS
/// ~20 MiB in the node role). `MADV_DONTNEED` follows it: on a read-only private file mapping it
/// only unmaps the pages from this process (they stay in the page cache, and no copy-on-write
/// page exists to lose: mappings with anonymous pages are skipped), which any user may do, so
/// the resident set drops the same way.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod code {
    use std::sync::atomic::{AtomicU32, Ordering};

    /// Ticks after which the start-up pages are handed back (besides once before the runtime
    /// runs the roles, see `main`, and at the set-up points, see `after_setup`): the first
    /// (the kube client, TLS and kubeconfig set-up, the watches' first lists and the first
    /// collection and render have run: what they faulted in would otherwise stay resident
    /// through the second tick, where the start-up peak formed) and the third (whatever
    /// start-up work the first ticks still did).
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

    /// `MADV_PAGEOUT`, then `MADV_DONTNEED`, on every file mapping (our own executable and the
    /// shared libraries: libc, libm, ld.so, libgcc_s) that is not writable and has no
    /// anonymous (copied-on-write) pages; returns the bytes the kernel accepted the advice
    /// for. The libraries' start-up pages count too: the dynamic loader's relocation work,
    /// libc's and libm's code that only the start ran, each kept 64 KiB around every fault
    /// (node role: 2.1 MiB of libc, libm and ld.so stayed resident, 1.4 MiB of libc alone).
    /// Best effort: an older kernel's EINVAL or an unreadable /proc only means the pages stay.
    pub fn release_startup_pages() -> usize {
        advise_clean_file_mappings(&[libc::MADV_PAGEOUT, libc::MADV_DONTNEED])
    }

    /// Each of `advice` in turn on every mapping of a file that is not writable and has no
    /// anonymous pages; the bytes of the first advice the kernel accepted per mapping.
    pub(crate) fn advise_clean_file_mappings(advice: &[libc::c_int]) -> usize {
        let mut advised = 0;
        let Ok(smaps) = std::fs::read_to_string("/proc/self/smaps") else {
            return advised;
        };
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
                    // A file (not [heap], [stack], [vdso] or an anon_inode), never writable.
                    (Ok(lo), Ok(hi))
                        if path.starts_with('/') && !perms.contains('w') && hi > lo =>
                    {
                        Some((lo, hi))
                    }
                    _ => None,
                };
            } else if first == "Anonymous:"
                && let Some((lo, hi)) = current.take()
                && f.next() == Some("0")
            {
                let mut accepted = false;
                for &a in advice {
                    // SAFETY: [lo, hi) is a whole mapping of a file (our executable or a
                    // shared library), page-aligned as /proc reports it, read-only and without
                    // anonymous pages, i.e. clean pages of the file (for a shared mapping the
                    // page cache holds them). MADV_PAGEOUT is advisory; MADV_DONTNEED on such a
                    // private file mapping only drops the page table entries, and the next
                    // access maps the same file page again. Neither changes what a later
                    // access reads, only whether the page is resident.
                    let rc = unsafe { libc::madvise(lo as *mut libc::c_void, hi - lo, a) };
                    accepted |= rc == 0;
                }
                if accepted {
                    advised += hi - lo;
                }
            }
        }
        advised
    }

    #[cfg(test)]
    mod tests {
        /// The tests that drop and measure resident code run one at a time (one would
        /// otherwise drop the pages the other is measuring).
        static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

        /// Resident KiB of the mapping of this process that starts at address `lo`.
        fn mapping_rss_kib(lo: usize) -> u64 {
            let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
            let head = format!("{lo:x}-");
            let mut lines = smaps.lines().skip_while(|l| !l.starts_with(&head));
            lines
                .find_map(|l| l.strip_prefix("Rss:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
                .unwrap_or(0)
        }

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

        /// Reads one byte of every page of this executable's executable mapping(s), so that
        /// all of it is resident whatever another test handed back just before.
        fn touch_exe_text() {
            let exe = std::fs::read_link("/proc/self/exe").unwrap();
            let exe = exe.to_string_lossy();
            let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
            for line in maps.lines() {
                let f: Vec<&str> = line.split_whitespace().collect();
                if !(f.get(1).is_some_and(|p| p.contains('x')) && f.get(5) == Some(&&*exe)) {
                    continue;
                }
                let Some((lo, hi)) = f[0].split_once('-') else {
                    continue;
                };
                let (lo, hi) = (
                    usize::from_str_radix(lo, 16).unwrap(),
                    usize::from_str_radix(hi, 16).unwrap(),
                );
                for page in (lo..hi).step_by(4096) {
                    // SAFETY: a readable (r-x) mapping of our own executable, which stays
                    // mapped for the life of the process; reading it has no effect but
                    // making the page resident.
                    unsafe { std::ptr::read_volatile(page as *const u8) };
                }
            }
        }

        /// Start-up pages are handed back after the first and the third tick only (and once
        /// before the roles start, in `main`, and at the set-up points, `after_setup`), never
        /// on every tick.
        #[test]
        fn pages_out_after_the_first_and_third_tick_only() {
            let due: Vec<u32> = (1..=100).filter(|&t| super::due(t)).collect();
            assert_eq!(due, vec![1, 3]);
        }

        /// The code pages go, the process keeps running the same code (the pages fault back
        /// in from the file), and a second call is harmless.
        #[test]
        fn pages_out_the_clean_code_and_keeps_running() {
            let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
            touch_exe_text();
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

        /// `MADV_DONTNEED` alone (what a process that does not own its binary gets: the
        /// kernel ignores its `MADV_PAGEOUT` of file pages) drops resident pages of the
        /// executable. Measured on a second read-only mapping of the executable's file, which
        /// no code runs from (the test binary's own code is small enough that the measuring
        /// code alone faults all of it back in, 64 KiB around each fault, from the page cache
        /// that `MADV_DONTNEED` leaves).
        #[test]
        fn dontneed_alone_drops_the_resident_pages() {
            use std::os::fd::AsRawFd as _;
            let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
            let file = std::fs::File::open("/proc/self/exe").unwrap();
            let len = (file.metadata().unwrap().len() as usize).min(4 << 20) & !4095;
            // SAFETY: a fresh private read-only mapping of a file we opened; unmapped below.
            let at = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ,
                    libc::MAP_PRIVATE,
                    file.as_raw_fd(),
                    0,
                )
            };
            assert_ne!(at, libc::MAP_FAILED);
            let lo = at as usize;
            let rss = || mapping_rss_kib(lo);
            for page in (lo..lo + len).step_by(4096) {
                // SAFETY: inside the mapping made above.
                unsafe { std::ptr::read_volatile(page as *const u8) };
            }
            let before = rss();
            let advised = super::advise_clean_file_mappings(&[libc::MADV_DONTNEED]);
            let after = rss();
            // SAFETY: the mapping made above, no longer used.
            unsafe { libc::munmap(at, len) };
            assert!(advised >= len, "MADV_DONTNEED refused ({advised} B)");
            assert!(
                before as usize >= len / 1024,
                "{before} KiB resident of {len} B"
            );
            assert_eq!(after, 0, "resident {before} KiB before, {after} KiB after");
        }

        /// Any clean file mapping goes (a shared library's as much as the executable's: here a
        /// temp file's), while a private mapping with copied-on-write pages keeps them and
        /// their contents.
        #[test]
        fn clean_mappings_of_any_file_go_and_written_copies_stay() {
            use std::os::fd::AsRawFd as _;
            let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
            let len = 256 * 4096;
            let mut file = tempfile::tempfile().unwrap();
            std::io::Write::write_all(&mut file, &vec![7u8; len]).unwrap();
            let map = |prot| {
                // SAFETY: a fresh private mapping of a file we made; unmapped below.
                let at = unsafe {
                    libc::mmap(
                        std::ptr::null_mut(),
                        len,
                        prot,
                        libc::MAP_PRIVATE,
                        file.as_raw_fd(),
                        0,
                    )
                };
                assert_ne!(at, libc::MAP_FAILED);
                at as usize
            };
            let clean = map(libc::PROT_READ);
            let written = map(libc::PROT_READ | libc::PROT_WRITE);
            for page in (0..len).step_by(4096) {
                // SAFETY: inside the mappings made above; the second one is writable.
                unsafe {
                    std::ptr::read_volatile((clean + page) as *const u8);
                    std::ptr::write_volatile((written + page) as *mut u8, 9);
                }
            }
            let rss = mapping_rss_kib;
            let before = (rss(clean), rss(written));
            super::release_startup_pages();
            let after = (rss(clean), rss(written));
            // SAFETY: reads inside the writable mapping, then both mappings go.
            let kept = (0..len)
                .step_by(4096)
                .all(|p| unsafe { std::ptr::read_volatile((written + p) as *const u8) } == 9);
            unsafe {
                libc::munmap(clean as *mut libc::c_void, len);
                libc::munmap(written as *mut libc::c_void, len);
            }
            assert_eq!(before, (len as u64 / 1024, len as u64 / 1024));
            assert_eq!(after, (0, len as u64 / 1024), "before {before:?}");
            assert!(kept, "a written page lost its contents");
        }

        /// One arena and a small runtime for the node role only.
        #[test]
        fn node_role_gets_one_arena_and_few_threads() {
            // Starting runtimes runs code all over the binary: not while another test here
            // measures which of its pages are resident.
            let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
            use kube_prober::k8s::role::Role;
            assert_eq!(crate::memory::heap::arenas(Some(Role::Node)), 1);
            for r in [Some(Role::Cluster), Some(Role::Host), None] {
                assert_eq!(crate::memory::heap::arenas(r), 2);
            }
            let rt = crate::runtime_builder(Some(Role::Node))
                .enable_all()
                .build()
                .unwrap();
            assert_eq!(rt.metrics().num_workers(), crate::NODE_WORKERS);
            let rt = crate::runtime_builder(Some(Role::Cluster))
                .enable_all()
                .build()
                .unwrap();
            assert_eq!(
                rt.metrics().num_workers(),
                std::thread::available_parallelism().map_or(1, |n| n.get())
            );
        }
    }
}

/// The library's hook after each tick.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub const AFTER_TICK: Option<fn()> = Some(after_tick);

/// After each snapshot: the allocator's free pages back to the kernel; once, start-up code.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn after_tick() {
    heap::trim();
    code::after_tick();
}
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub const AFTER_TICK: Option<fn()> = None;

/// The library's hook at the start's set-up points.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub const AFTER_SETUP: Option<fn(&'static str)> = Some(after_setup);

/// At the points of the start `app` names (the Kubernetes client built; every role started):
/// the start-up's code and free heap handed back before the next step faults in its own
/// (the node role's VmHWM). The start-up runs its steps one after another, each touching
/// code the others do not (the kubeconfig's YAML and the TLS trust anchors; then the watches'
/// first lists, the probes' and sinks' set-up and the first render), and with one hand-back
/// only before the roles start all of it was resident at once, up to the first tick's
/// hand-back: that was the start-up peak. What a later step needs again faults back in.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn after_setup(point: &'static str) {
    heap::trim();
    let bytes = code::release_startup_pages();
    tracing::debug!(point, bytes, "start-up pages handed back");
}
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub const AFTER_SETUP: Option<fn(&'static str)> = None;

/// Before any other thread starts: glibc's arenas for `role` (see `heap::arenas`).
pub fn limit_arenas(role: Option<Role>) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    heap::limit_arenas(heap::arenas(role));
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = role;
}

/// Hands back the code pages only start-up used (see `code::release_startup_pages`).
pub fn release_startup_pages() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    code::release_startup_pages();
}
