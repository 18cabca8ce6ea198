//! Every process a test, bench or example starts that may outlive one call goes through here,
//! so that it ends with the process that started it: on a normal end, on a panic (unwound or
//! aborted), on `std::process::exit` and when the test process is killed.
//!
//! - **The kernel**: each child asks for SIGKILL when its parent dies (`PR_SET_PDEATHSIG`). The
//!   "parent" is the *thread* that forked it, so every child is forked by one spawner thread
//!   that lives as long as the process; a child forked by a test thread would be killed when
//!   that thread ended. This holds when the process aborts or is killed by a signal.
//! - **At exit** (the end of `main`, libtest's exit, `std::process::exit`): an `atexit` handler
//!   SIGKILLs every owned child still running. A child is recognised by its pid and its start
//!   time, so a pid the kernel has reused for someone else's process is never signalled.
//! - **A run marker**: every owned child gets [`RUN_MARKER`] in its environment (the value the
//!   test process inherited, else one made from its pid and the time), and passes it on to
//!   whatever it starts, even past `env_clear()`. After a run, any process still carrying the
//!   marker is a leftover: [`leftovers`] names them, and `.ci/leftovers` fails CI's bench step
//!   on them.
//!
//! What PDEATHSIG cannot reach is a grandchild: start the program itself, never a shell that
//! starts it (a shell's child outlives the shell).
#![allow(dead_code)]

use std::ffi::OsStr;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock, mpsc};
use std::time::{Duration, Instant};

/// The environment variable that names the run every owned child belongs to.
pub const RUN_MARKER: &str = "KUBE_PROBER_TEST_RUN";

/// This process's run marker: the one it inherited (set by `.ci/test`, or by the test that
/// started it), else `<pid>-<nanoseconds since the epoch>`.
pub fn run_marker() -> &'static str {
    static MARKER: OnceLock<String> = OnceLock::new();
    MARKER.get_or_init(|| match std::env::var(RUN_MARKER) {
        Ok(v) if !v.is_empty() => v,
        _ => fresh_marker(),
    })
}

/// A marker no other run uses: `<pid>-<nanoseconds since the epoch>-<count>`.
pub fn fresh_marker() -> String {
    static COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let n = COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{}-{nanos}-{n}", std::process::id())
}

// ---- spawning ----

type SpawnRequest = (Command, mpsc::Sender<std::io::Result<Child>>);

fn spawner() -> &'static Mutex<mpsc::Sender<SpawnRequest>> {
    static TX: OnceLock<Mutex<mpsc::Sender<SpawnRequest>>> = OnceLock::new();
    TX.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("owned-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let child = cmd.spawn();
                    // The parent's copies of the child's stdio go before the caller has it.
                    drop(cmd);
                    let _ = reply.send(child);
                }
                // Never returns while the process lives: PR_SET_PDEATHSIG fires when the
                // thread that forked a child exits, so the spawner outlives every test thread.
                loop {
                    std::thread::park();
                }
            })
            .expect("starting the spawner thread");
        Mutex::new(tx)
    })
}

/// Starts `cmd` so that it ends with this process (module docs); stdio as `cmd` sets it.
pub fn spawn(mut cmd: Command) -> std::io::Result<Child> {
    // An explicit value (a test naming a run of its own) wins; otherwise this run's.
    if !cmd
        .get_envs()
        .any(|(k, v)| k == OsStr::new(RUN_MARKER) && v.is_some())
    {
        cmd.env(RUN_MARKER, run_marker());
    }
    let parent = std::process::id();
    // SAFETY: prctl and getppid are async-signal-safe, and nothing is allocated between fork
    // and exec.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent died between fork and prctl: no signal would come.
            if libc::getppid() as u32 != parent {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
    let (tx, rx) = mpsc::channel();
    lock(spawner())
        .send((cmd, tx))
        .map_err(|_| std::io::Error::other("the spawner thread is gone"))?;
    let child = rx
        .recv()
        .map_err(|_| std::io::Error::other("the spawner thread is gone"))??;
    register(child.id());
    Ok(child)
}

/// [`spawn`], stdin from /dev/null and stdout and stderr appended to `log` (a restarted
/// component's earlier lines stay in the same log); panics naming the program if it cannot
/// start.
pub fn spawn_owned(mut cmd: Command, log: &Path) -> Child {
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap_or_else(|e| panic!("opening {}: {e}", log.display()));
    let err = out.try_clone().expect("cloning a log file");
    cmd.stdin(Stdio::null()).stdout(out).stderr(err);
    let program = cmd.get_program().to_string_lossy().into_owned();
    spawn(cmd).unwrap_or_else(|e| panic!("starting {program}: {e}"))
}

/// `cmd.output()` through [`spawn`]: stdout and stderr captured, `stdin` written to the child
/// and closed first when given (else /dev/null).
pub fn output(mut cmd: Command, stdin: Option<&[u8]>) -> std::io::Result<Output> {
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = spawn(cmd)?;
    if let (Some(bytes), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(bytes)?;
    }
    child.wait_with_output()
}

// ---- killing what is left at exit ----

/// Owned children (pid, start time) and folders to remove at process exit.
#[derive(Default)]
struct Registry {
    children: Vec<(u32, u64)>,
    dirs: Vec<PathBuf>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn registry() -> &'static Mutex<Registry> {
    static R: OnceLock<Mutex<Registry>> = OnceLock::new();
    R.get_or_init(|| {
        // SAFETY: registers a plain extern "C" function with no arguments.
        unsafe { libc::atexit(at_exit) };
        Mutex::new(Registry::default())
    })
}

extern "C" fn at_exit() {
    // Another thread may hold the lock as the process exits: wait a little, never forever
    // (the kernel's PR_SET_PDEATHSIG still ends the children).
    let deadline = Instant::now() + Duration::from_secs(1);
    let r = loop {
        match registry().try_lock() {
            Ok(r) => break r,
            Err(std::sync::TryLockError::Poisoned(e)) => break e.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(std::sync::TryLockError::WouldBlock) => return,
        }
    };
    for &(pid, started) in &r.children {
        if start_time(pid) == Some(started) {
            // SAFETY: kill(2) on a pid checked to be our child's (same start time).
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
    }
    for dir in &r.dirs {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// Field 22 of /proc/PID/stat (start time in clock ticks since boot); `None` when the process
/// is gone or a zombie.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    if fields.next()? == "Z" {
        return None;
    }
    // rest starts at field 3 (state); the start time is field 22.
    fields.nth(18)?.parse().ok()
}

fn register(pid: u32) {
    let mut r = lock(registry());
    // Children that ended are forgotten, so the list stays as long as what runs.
    r.children.retain(|&(p, s)| start_time(p) == Some(s));
    if let Some(started) = start_time(pid) {
        r.children.push((pid, started));
    }
}

/// Removes `dir` at process exit (for what a value kept in a static holds: it is never
/// dropped).
pub fn remove_at_exit(dir: &Path) {
    lock(registry()).dirs.push(dir.to_path_buf());
}

// ---- finding leftovers ----

/// Every process but this one that carries `marker` as its [`RUN_MARKER`]: `pid: command
/// line`. A zombie has no environment left and is not counted.
pub fn leftovers(marker: &str) -> Vec<String> {
    let want = format!("{RUN_MARKER}={marker}");
    let me = std::process::id().to_string();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out: Vec<String> = dir
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|pid| pid.bytes().all(|b| b.is_ascii_digit()) && *pid != me)
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|&b| b == 0).any(|kv| kv == want.as_bytes()))
        })
        .map(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let cmdline: Vec<String> = cmdline
                .split(|&b| b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            format!("{pid}: {}", cmdline.join(" "))
        })
        .collect();
    out.sort();
    out
}

/// Waits (polling, at most `within`) until no process carries `marker`; the leftovers when
/// some still do.
pub fn wait_no_leftovers(marker: &str, within: Duration) -> Result<(), Vec<String>> {
    let deadline = Instant::now() + within;
    loop {
        let left = leftovers(marker);
        if left.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(left);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
