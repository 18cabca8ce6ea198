//! Every process a test or bench starts through `support::owned` ends with it. Each test here
//! runs `owned_child` of this binary in a child process of its own, which starts `sleep 600`
//! through `support::owned` and then ends one way: a panic (libtest unwinds and exits 101), an
//! abort (no unwinding, no exit handlers), `std::process::exit` (what a `harness = false`
//! bench's `main` may do), or SIGKILL from outside. Afterwards no process may carry the child's
//! run marker (`KUBE_PROBER_TEST_RUN`), the `sleep` included: a bounded poll, no fixed sleep.
//! And a child started from a thread that has ended still runs until the process ends.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use support::owned;

/// How `owned_child` ends; set only in the child process.
const MODE: &str = "KUBE_PROBER_TEST_OWNED_MODE";
/// Where `owned_child` writes the pid of its `sleep`.
const PID_FILE: &str = "KUBE_PROBER_TEST_OWNED_PID_FILE";
/// How long a killed process may take to leave, at most.
const GONE_WITHIN: Duration = Duration::from_secs(10);

fn start_sleep() -> Child {
    let mut cmd = Command::new("sleep");
    cmd.arg("600")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    owned::spawn(cmd).expect("starting sleep")
}

/// Starts `cat` from a thread of its own, waits until that thread is gone from the kernel
/// (a parent-death signal tied to it would have been sent by then), and checks that `cat`
/// still echoes a line.
fn spawn_from_an_ended_thread() {
    let (tid, mut cat) = std::thread::spawn(|| {
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() };
        let mut cmd = Command::new("cat");
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped());
        (tid, owned::spawn(cmd).expect("starting cat"))
    })
    .join()
    .expect("the spawning thread");
    let task = format!("/proc/self/task/{tid}");
    let deadline = Instant::now() + GONE_WITHIN;
    while std::path::Path::new(&task).exists() {
        assert!(Instant::now() < deadline, "{task} still there");
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut stdin = cat.stdin.take().expect("cat's stdin");
    let mut stdout = BufReader::new(cat.stdout.take().expect("cat's stdout"));
    // A dead cat: the write fails or the read meets the end of its output.
    let _ = stdin.write_all(b"still here\n");
    let mut line = String::new();
    let _ = stdout.read_line(&mut line);
    assert_eq!(
        line, "still here\n",
        "a child started from a thread that ended was killed with that thread"
    );
    let _ = cat.kill();
    let _ = cat.wait();
}

#[test]
#[ignore = "run by the other tests of this file, in a child process"]
// The sleep is never waited for on purpose: this process ends with it running.
#[allow(clippy::zombie_processes)]
fn owned_child() {
    let (Ok(mode), Ok(pid_file)) = (std::env::var(MODE), std::env::var(PID_FILE)) else {
        return;
    };
    if mode == "thread" {
        spawn_from_an_ended_thread();
    }
    let sleep = start_sleep();
    // The marker scan is not vacuous: it finds what runs. Polled: the parent learns that exec
    // succeeded a moment before the kernel sets up the new environment, which reads empty until
    // then.
    let me = format!("{}: ", sleep.id());
    let deadline = Instant::now() + GONE_WITHIN;
    loop {
        let found = owned::leftovers(owned::run_marker());
        if found.iter().any(|l| l.starts_with(&me)) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "sleep {} not found by its run marker: {found:?}",
            sleep.id()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let tmp = format!("{pid_file}.tmp");
    std::fs::write(&tmp, sleep.id().to_string()).expect("writing the pid file");
    std::fs::rename(&tmp, &pid_file).expect("renaming the pid file");
    eprintln!("owned child: ending by {mode}");
    match mode.as_str() {
        "abort" => {
            // No core file for this deliberate abort.
            let none = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            // SAFETY: setrlimit with a valid struct.
            unsafe { libc::setrlimit(libc::RLIMIT_CORE, &none) };
            std::process::abort()
        }
        "exit" => std::process::exit(3),
        "killed" => loop {
            std::thread::park();
        },
        _ => panic!(
            "owned child: a deliberate panic with sleep {} running",
            sleep.id()
        ),
    }
}

/// Runs `owned_child` in `mode`; SIGKILLs it once its `sleep` runs when `kill`. Checks that
/// nothing it started (its `sleep` included: the child found it by the marker) is left within
/// [`GONE_WITHIN`]; returns its exit status and its output.
fn run_child(mode: &str, kill: bool) -> (ExitStatus, String) {
    let dir = tempfile::tempdir().expect("a temp dir");
    let pid_file = dir.path().join("sleep.pid");
    let log = dir.path().join("child.log");
    let marker = owned::fresh_marker();
    let mut cmd = Command::new(std::env::current_exe().expect("this test binary"));
    cmd.args([
        "--exact",
        &support::test_name(module_path!(), "owned_child"),
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(MODE, mode)
    .env(PID_FILE, &pid_file)
    .env(owned::RUN_MARKER, &marker);
    let mut child = owned::spawn_owned(cmd, &log);
    let output = || std::fs::read_to_string(&log).unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if kill && pid_file.exists() {
            let _ = child.kill();
        }
        if let Some(status) = child.try_wait().expect("waiting for the child") {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the {mode} child did not end within 60 s:\n{}",
            output()
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    let pid = std::fs::read_to_string(&pid_file)
        .unwrap_or_else(|e| panic!("no pid file from the {mode} child ({e}):\n{}", output()));
    if let Err(left) = owned::wait_no_leftovers(&marker, GONE_WITHIN) {
        // Named below, and not left behind by this failure.
        for pid in left
            .iter()
            .filter_map(|l| l.split(':').next()?.parse::<i32>().ok())
        {
            // SAFETY: kill(2) on a process that carries this test's own run marker.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        panic!(
            "{mode}: processes the child started (its sleep: {pid}) outlived it by \
             {GONE_WITHIN:?}:\n{}\nits output:\n{}",
            left.join("\n"),
            output()
        );
    }
    (status, output())
}

#[test]
fn a_panicking_test_takes_what_it_started_with_it() {
    let (status, out) = run_child("panic", false);
    assert_eq!(status.code(), Some(101), "libtest's failure code:\n{out}");
    assert!(out.contains("a deliberate panic with sleep"), "{out}");
}

#[test]
fn an_aborting_test_process_takes_what_it_started_with_it() {
    use std::os::unix::process::ExitStatusExt;
    let (status, out) = run_child("abort", false);
    assert_eq!(status.signal(), Some(libc::SIGABRT), "{status}:\n{out}");
    assert!(out.contains("ending by abort"), "{out}");
}

#[test]
fn process_exit_takes_what_it_started_with_it() {
    let (status, out) = run_child("exit", false);
    assert_eq!(status.code(), Some(3), "{out}");
}

#[test]
fn a_killed_test_process_takes_what_it_started_with_it() {
    use std::os::unix::process::ExitStatusExt;
    let (status, out) = run_child("killed", true);
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{status}:\n{out}");
}

#[test]
fn a_child_started_from_a_thread_that_ended_lives_until_the_process_ends() {
    let (status, out) = run_child("thread", false);
    assert!(
        !out.contains("was killed with that thread"),
        "the child died with its thread:\n{out}"
    );
    assert_eq!(status.code(), Some(101), "{out}");
    assert!(out.contains("a deliberate panic with sleep"), "{out}");
}
