//! First use, as a new user meets it: bad log levels, colour in piped logs, a stderr that is
//! closed or never read, a port already in use. Each runs the built binary.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use support::{owned, run_binary};

fn prober() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kube-prober"));
    cmd.args(["--role", "host", "--listen", "127.0.0.1:0"])
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("NO_COLOR")
        .env_remove("LOG_LEVEL")
        .env("HOME", "/nonexistent")
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    cmd
}

/// The TCP port `pid` listens on, from its socket inodes and /proc/PID/net/tcp (no log needed:
/// these tests take stderr away from the prober).
fn listening_port(pid: u32) -> Option<u16> {
    let mut inodes = Vec::new();
    for fd in std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.flatten() {
        if let Ok(target) = std::fs::read_link(fd.path()) {
            let t = target.to_string_lossy().into_owned();
            if let Some(inode) = t.strip_prefix("socket:[").and_then(|r| r.strip_suffix(']')) {
                inodes.push(inode.to_string());
            }
        }
    }
    let table = std::fs::read_to_string(format!("/proc/{pid}/net/tcp")).ok()?;
    table.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        // local_address, st (0A = LISTEN), inode
        let (local, st, inode) = (f.get(1)?, f.get(3)?, f.get(9)?);
        if *st != "0A" || !inodes.iter().any(|i| i == inode) {
            return None;
        }
        u16::from_str_radix(local.split(':').nth(1)?, 16).ok()
    })
}

/// GET /healthz answered 200 within `within`.
fn wait_healthy(child: &mut Child, within: Duration) -> Result<(), String> {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if let Ok(Some(st)) = child.try_wait() {
            return Err(format!("exited early: {st}"));
        }
        if let Some(port) = listening_port(child.id())
            && let Ok(mut s) = TcpStream::connect(("127.0.0.1", port))
        {
            let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
            let _ = s.write_all(b"GET /healthz HTTP/1.0\r\nHost: x\r\n\r\n");
            let mut answer = String::new();
            let _ = s.read_to_string(&mut answer);
            if answer.starts_with("HTTP/1.1 200") || answer.starts_with("HTTP/1.0 200") {
                return Ok(());
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(format!("/healthz not 200 within {within:?}"))
}

/// SIGTERM, then the exit code within `within` (the child is killed on timeout).
fn terminate(child: &mut Child, within: Duration) -> Result<i32, String> {
    // SAFETY: kill(2) on our own child's pid with a valid signal number.
    let rc = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    assert_eq!(rc, 0, "kill -TERM");
    let deadline = Instant::now() + within;
    loop {
        if let Some(st) = child.try_wait().map_err(|e| e.to_string())? {
            return Ok(st.code().unwrap_or(-1));
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("no exit within {within:?} of SIGTERM"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn an_unknown_log_level_is_a_start_up_error_listing_the_levels() {
    for (args, env) in [
        (vec!["--log-level", "verbose"], vec![]),
        (vec![], vec![("LOG_LEVEL", "verbose")]),
    ] {
        let mut all = vec!["--role", "host", "--listen", "127.0.0.1:0"];
        all.extend(args);
        let (code, err) = run_binary(&all, &env);
        assert_eq!(code, 2, "{all:?} {env:?}: exit {code}\n{err}");
        for needle in [
            "--log-level",
            "'verbose'",
            "trace, debug, info, warn, error, off",
            "did you mean `debug`?",
        ] {
            assert!(err.contains(needle), "stderr lacks {needle:?}:\n{err}");
        }
    }
    let (code, err) = run_binary(
        &["--role", "host", "--log-level", "kube_prober=loud,info"],
        &[],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("unknown level `loud`"), "{err}");
}

/// Starts the prober with stderr on `stderr`, reads until the "role chosen" line; returns
/// what was read.
fn first_lines(cmd: Command, mut read: impl Read + Send + 'static) -> String {
    let mut child = owned::spawn(cmd).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match read.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    seen.extend_from_slice(&buf[..n]);
                    if String::from_utf8_lossy(&seen).contains("role chosen") {
                        break;
                    }
                }
            }
        }
        let _ = tx.send(seen);
    });
    let seen = rx.recv_timeout(Duration::from_secs(20));
    assert_eq!(terminate(&mut child, Duration::from_secs(20)), Ok(0));
    String::from_utf8_lossy(&seen.expect("no `role chosen` line within 20 s")).into_owned()
}

#[test]
fn text_logs_have_no_colour_when_stderr_is_not_a_terminal() {
    let mut cmd = prober();
    cmd.args(["--log-format", "text"]).stderr(Stdio::piped());
    let mut child = owned::spawn(cmd).unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = Vec::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        let done = line.contains("role chosen");
        seen.push(line);
        if done {
            break;
        }
    }
    assert_eq!(terminate(&mut child, Duration::from_secs(20)), Ok(0));
    let text = seen.join("\n");
    assert!(text.contains("role chosen"), "{text}");
    assert!(text.contains(" INFO "), "{text}");
    assert!(
        !text.contains('\x1b'),
        "escape codes in piped logs:\n{text:?}"
    );
}

/// A pseudo-terminal: (controller, terminal side for the child's stderr).
fn pty() -> (std::fs::File, OwnedFd) {
    let (mut controller, mut terminal) = (0, 0);
    // SAFETY: openpty writes two fds into the given ints; null name/termios/winsize are allowed.
    let rc = unsafe {
        libc::openpty(
            &mut controller,
            &mut terminal,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(rc, 0, "openpty");
    // SAFETY: both fds were just opened by openpty and are owned by nobody else.
    unsafe {
        (
            std::fs::File::from_raw_fd(controller),
            OwnedFd::from_raw_fd(terminal),
        )
    }
}

#[test]
fn text_logs_are_coloured_on_a_terminal_unless_no_color() {
    for (no_color, want_colour) in [(None, true), (Some("1"), false)] {
        let (controller, terminal) = pty();
        let mut cmd = prober();
        cmd.args(["--log-format", "text"])
            .stderr(Stdio::from(terminal));
        if let Some(v) = no_color {
            cmd.env("NO_COLOR", v);
        }
        let text = first_lines(cmd, controller);
        assert!(text.contains("role chosen"), "{text:?}");
        assert_eq!(
            text.contains("\x1b["),
            want_colour,
            "NO_COLOR={no_color:?}: {text:?}"
        );
    }
}

#[test]
fn a_closed_stderr_neither_panics_nor_blocks_sigterm() {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let mut cmd = prober();
    cmd.args(["--log-level", "debug", "--tick-interval", "1s"])
        .stderr(Stdio::from(OwnedFd::from(writer)));
    let mut child = owned::spawn(cmd).unwrap();
    if let Err(e) = wait_healthy(&mut child, Duration::from_secs(20)) {
        let _ = child.kill();
        let _ = child.wait();
        panic!("{e}");
    }
    assert_eq!(terminate(&mut child, Duration::from_secs(10)), Ok(0));
}

#[test]
fn a_stderr_nobody_reads_neither_blocks_serving_nor_sigterm() {
    let (reader, writer) = std::io::pipe().unwrap();
    let fd = writer.as_raw_fd();
    // Fill the pipe before the child starts: every write of the child would block.
    // SAFETY: fcntl on a pipe fd we own; F_SETPIPE_SZ/F_GETFL/F_SETFL take an int argument.
    unsafe {
        libc::fcntl(fd, libc::F_SETPIPE_SZ, 4096);
        let flags = libc::fcntl(fd, libc::F_GETFL);
        assert_eq!(libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK), 0);
    }
    let mut w = &writer;
    let chunk = [b'.'; 512];
    let mut filled = 0usize;
    loop {
        match w.write(&chunk) {
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) => panic!("filling the pipe: {e}"),
        }
        assert!(filled < 16 << 20, "pipe never filled");
    }
    // SAFETY: as above; the child must inherit a blocking pipe.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        assert_eq!(libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK), 0);
    }
    let mut cmd = prober();
    cmd.args(["--log-level", "debug", "--tick-interval", "1s"])
        .stderr(Stdio::from(OwnedFd::from(writer)));
    let mut child = owned::spawn(cmd).unwrap();
    if let Err(e) = wait_healthy(&mut child, Duration::from_secs(20)) {
        let _ = child.kill();
        let _ = child.wait();
        panic!("{e}");
    }
    assert_eq!(terminate(&mut child, Duration::from_secs(10)), Ok(0));
    drop(reader);
}

#[test]
fn a_port_in_use_is_said_once_exit_2_naming_listen() {
    let held = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = held.local_addr().unwrap().to_string();
    let (code, err) = run_binary(&["--role", "host", "--listen", &addr], &[]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--listen") && err.contains(&addr), "{err}");
    assert_eq!(
        err.matches("Address already in use").count(),
        1,
        "said once:\n{err}"
    );
    drop(held);
}
