//! The listener under abuse (issue #37), through the real binary on 127.0.0.1 with short limits
//! set by its `--server-*` flags: 1,000 connections trickling a head byte by byte, thousands of
//! silent connections (kept alive after a request, or never sending one), more connections
//! than `--server-max-connections`, an oversized head (431) and request line (414), plain and
//! over TLS, readers that stall in the middle of a large `/metrics`, and 200 concurrent gzip
//! scrapes of it. In each: `/healthz` answers within 1 s throughout, the server ends every
//! abuser by itself within its limit plus a margin (the test sees EOF or a reset), the
//! process's RSS stays within a stated bound, and `kube_prober_http_connections_shed_total`
//! counts each one under its reason.

use std::collections::BTreeMap;
use std::io::{Read as _, Write as _};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use support::{Prober, apiserver};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Slack on every "closed by the server within its limit" check: accept lag and scheduling on
/// a busy machine (CI runs several suites side by side).
const MARGIN: Duration = Duration::from_secs(3);

/// How much earlier than its limit the test may see a connection end. The test starts each
/// clock no later than the server can (before the connect, before the request is sent), so
/// this is only the servers' millisecond rounding.
const EARLY: Duration = Duration::from_millis(50);

/// `/healthz` must answer within this, throughout (issue #37).
const HEALTHZ_DEADLINE: Duration = Duration::from_secs(1);

// ---------------------------------------------------------------------------------------------
// Helpers

/// The runtime the clients run on: its threads at nice 10. Here the abusers share kube-prober's
/// CPUs, where in life they are other machines; on a busy CI machine (suites run side by side)
/// they would otherwise take CPU from the server they abuse, and the test would measure its own
/// load. The test's main thread (which starts kube-prober: a child inherits its nice value) and
/// the [`Watchdog`] keep the default.
fn abusers() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .on_thread_start(|| {
            // SAFETY: setpriority changes only the calling thread's nice value (on Linux the
            // nice value is per thread); a failure leaves it as it was.
            unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 10) };
        })
        .build()
        .unwrap()
}

/// Raises this process's soft `RLIMIT_NOFILE` to its hard limit, which the kube-prober it
/// starts inherits; fails, naming the fix, when the hard limit is below `need`.
fn raise_nofile(need: u64) {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct given.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) }, 0);
    assert!(
        l.rlim_max >= need,
        "this test opens about {need} sockets in this process and as many in kube-prober, but the \
         hard open-file limit is {} (`ulimit -Hn`): raise it (as root, `ulimit -Hn {need}` or more \
         before `cargo test`; CI runs as root)",
        l.rlim_max
    );
    if l.rlim_cur < l.rlim_max {
        l.rlim_cur = l.rlim_max;
        // SAFETY: as above.
        assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &l) }, 0);
    }
}

/// The resident set of `pid` now, in MiB (VmRSS of /proc/PID/status).
fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// One blocking HTTP/1.1 request on a new connection with `Connection: close`: the whole
/// answer (head and body), or what went wrong. Bounded by `timeout`.
fn request(addr: &str, path: &str, extra: &str, timeout: Duration) -> Result<Vec<u8>, String> {
    let mut s = std::net::TcpStream::connect(addr).map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(timeout)).unwrap();
    s.set_write_timeout(Some(timeout)).unwrap();
    let head = format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n{extra}\r\n");
    s.write_all(head.as_bytes())
        .map_err(|e| format!("write: {e}"))?;
    let mut out = Vec::new();
    s.read_to_end(&mut out).map_err(|e| format!("read: {e}"))?;
    Ok(out)
}

/// `GET /healthz` on a new connection: how long the whole answer took, or why it failed.
fn healthz(addr: &str) -> Result<Duration, String> {
    let t0 = Instant::now();
    let answer = request(addr, "/healthz", "", Duration::from_secs(5))?;
    if !answer.starts_with(b"HTTP/1.1 200") {
        return Err(format!("answer {:?}", String::from_utf8_lossy(&answer)));
    }
    Ok(t0.elapsed())
}

/// The shed counters and the open-connection gauge of `/metrics`.
#[derive(Debug, Default, PartialEq)]
struct Counters {
    shed: BTreeMap<String, u64>,
    open: u64,
}

fn counters(addr: &str) -> Counters {
    let answer = request(
        addr,
        "/metrics",
        "Accept-Encoding: identity\r\n",
        Duration::from_secs(30),
    )
    .expect("GET /metrics");
    let text = String::from_utf8_lossy(&answer);
    let mut c = Counters::default();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("kube_prober_http_connections_shed_total{reason=\"") {
            let (reason, value) = rest.split_once("\"} ").expect("a sample line");
            c.shed.insert(reason.to_string(), value.parse().unwrap());
        } else if let Some(v) = line.strip_prefix("kube_prober_http_connections ") {
            c.open = v.parse().unwrap();
        }
    }
    assert_eq!(c.shed.len(), 7, "every reason at all times:\n{text:.2000}");
    c
}

/// `want` for the named reasons, 0 for every other one.
fn shed(want: &[(&str, u64)]) -> BTreeMap<String, u64> {
    let mut m: BTreeMap<String, u64> = [
        "header_timeout",
        "idle_timeout",
        "write_timeout",
        "header_too_large",
        "request_line_too_long",
        "evicted",
        "refused",
    ]
    .iter()
    .map(|r| (r.to_string(), 0))
    .collect();
    for (r, n) in want {
        m.insert(r.to_string(), *n);
    }
    m
}

/// A thread that asks `/healthz` every 100 ms and reads kube-prober's RSS, until stopped.
struct Watchdog {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Watched>,
}

/// What a [`Watchdog`] saw.
#[derive(Debug)]
struct Watched {
    probes: usize,
    slowest: Duration,
    failures: Vec<String>,
    peak_rss_mib: f64,
}

impl Watchdog {
    fn start(p: &Prober) -> Watchdog {
        let addr = p.addr.clone();
        Watchdog::start_with(p, move || healthz(&addr))
    }

    /// As [`Watchdog::start`], asking with `probe`.
    fn start_with<F>(p: &Prober, probe: F) -> Watchdog
    where
        F: Fn() -> Result<Duration, String> + Send + 'static,
    {
        let pid = p.child.id();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut w = Watched {
                probes: 0,
                slowest: Duration::ZERO,
                failures: Vec::new(),
                peak_rss_mib: 0.0,
            };
            while !flag.load(Ordering::Relaxed) {
                match probe() {
                    Ok(d) => w.slowest = w.slowest.max(d),
                    Err(e) => w.failures.push(e),
                }
                w.probes += 1;
                w.peak_rss_mib = w.peak_rss_mib.max(rss_mib(pid));
                std::thread::sleep(Duration::from_millis(100));
            }
            w
        });
        Watchdog { stop, thread }
    }

    /// Stops it; panics unless every probe answered 200 within [`HEALTHZ_DEADLINE`] and RSS
    /// stayed under `rss_bound_mib`.
    fn finish(self, what: &str, rss_bound_mib: f64) -> Watched {
        self.stop.store(true, Ordering::Relaxed);
        let w = self.thread.join().unwrap();
        println!(
            "{what}: healthz_probes={} slowest_healthz_ms={} peak_rss_mib={:.1}",
            w.probes,
            w.slowest.as_millis(),
            w.peak_rss_mib
        );
        assert!(w.probes >= 1, "{what}: no /healthz probe: {w:?}");
        assert!(
            w.failures.is_empty(),
            "{what}: /healthz failed: {:?}",
            w.failures
        );
        assert!(
            w.slowest < HEALTHZ_DEADLINE,
            "{what}: /healthz took {:?}",
            w.slowest
        );
        assert!(
            w.peak_rss_mib < rss_bound_mib,
            "{what}: kube-prober's RSS reached {:.1} MiB (bound {rss_bound_mib} MiB)",
            w.peak_rss_mib
        );
        w
    }
}

/// Reads `s` until the server ends it (EOF or an error such as a reset), at most until
/// `deadline`; answers when it ended, `None` if it did not. What was read is dropped.
async fn ended_by_server<R: tokio::io::AsyncRead + Unpin>(
    mut s: R,
    deadline: Instant,
) -> Option<Instant> {
    let mut buf = vec![0u8; 4096];
    let left = deadline.saturating_duration_since(Instant::now());
    tokio::time::timeout(left, async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return Instant::now(),
                Ok(_) => {}
            }
        }
    })
    .await
    .ok()
}

/// Runs `abuse` on `n` new connections to `addr`, opened as fast as they go, each given its
/// stream and the moment just before it connected; answers what each one answers: when its
/// limit's clock started, and when the server ended it (`None`: not within the test's
/// deadline).
async fn on_connections<F, Fut>(addr: &str, n: usize, abuse: F) -> Vec<(Instant, Option<Instant>)>
where
    F: Fn(TcpStream, Instant) -> Fut,
    Fut: std::future::Future<Output = (Instant, Option<Instant>)> + Send + 'static,
{
    // A fast flood, but one a listener can take without dropping SYNs: 32 connects at a time.
    let in_flight = Arc::new(tokio::sync::Semaphore::new(32));
    let mut connects = Vec::with_capacity(n);
    for _ in 0..n {
        let addr = addr.to_string();
        let in_flight = in_flight.clone();
        connects.push(tokio::spawn(async move {
            let _permit = in_flight.acquire_owned().await.unwrap();
            // Before the connect: the server's clock cannot start earlier.
            let start = Instant::now();
            let s = TcpStream::connect(addr).await.expect("connect");
            (s, start)
        }));
    }
    let mut runs = Vec::with_capacity(n);
    for t in connects {
        let (s, start) = t.await.unwrap();
        runs.push(tokio::spawn(abuse(s, start)));
    }
    let mut out = Vec::with_capacity(n);
    for run in runs {
        out.push(run.await.unwrap());
    }
    out
}

/// Asserts every connection ended between `earliest` and `latest` after its `start`.
fn assert_ended(
    what: &str,
    ends: &[(Instant, Option<Instant>)],
    earliest: Duration,
    latest: Duration,
) {
    let open = ends.iter().filter(|(_, e)| e.is_none()).count();
    assert_eq!(open, 0, "{what}: {open} of {} still open", ends.len());
    let lives: Vec<Duration> = ends
        .iter()
        .map(|(s, e)| e.expect("ended").saturating_duration_since(*s))
        .collect();
    let min = lives.iter().min().copied().unwrap_or_default();
    let max = lives.iter().max().copied().unwrap_or_default();
    println!(
        "{what}: {} ended after {} to {} ms",
        ends.len(),
        min.as_millis(),
        max.as_millis()
    );
    assert!(
        min >= earliest,
        "{what}: one ended after {min:?}, before its limit ({earliest:?})"
    );
    assert!(
        max <= latest,
        "{what}: one ended only after {max:?} (limit + margin {latest:?})"
    );
}

// ---------------------------------------------------------------------------------------------
// The host role: slow heads, silence, the cap, oversized heads

/// 1,000 connections each trickle a request head, a byte every 250 ms, never finishing it:
/// each is closed by `--server-read-header-timeout` (2 s) from its accept.
#[test]
fn a_thousand_trickling_heads_are_closed_at_the_header_timeout() {
    abusers().block_on(async {
        raise_nofile(2_500);
        let p = Prober::start(&[
            "--role",
            "host",
            "--server-read-header-timeout",
            "2s",
            "--server-max-connections",
            "4000",
        ]);
        let watchdog = Watchdog::start(&p);
        let timeout = Duration::from_secs(2);
        let ends = on_connections(&p.addr, 1000, |s, start| async move {
            let (rd, mut wr) = s.into_split();
            let writer = tokio::spawn(async move {
                let head = b"GET /healthz HTTP/1.1\r\nHost: t\r\nX-Slow: ";
                for b in head.iter().copied().chain(std::iter::repeat(b'a')) {
                    if wr.write_all(&[b]).await.is_err() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            });
            let end = ended_by_server(rd, start + timeout + MARGIN).await;
            writer.abort();
            (start, end)
        })
        .await;
        assert_ended("trickling heads", &ends, timeout - EARLY, timeout + MARGIN);
        watchdog.finish("trickling heads", 80.0);
        let c = counters(&p.addr);
        assert_eq!(c.shed, shed(&[("header_timeout", 1000)]));
        assert_eq!(c.open, 1, "only the scrape itself: {c:?}");
    })
}

/// Reads one answer to a request without a body from `s` (head and a `content-length` body);
/// answers the head.
async fn read_answer(s: &mut TcpStream) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = s.read(&mut buf).await.expect("read an answer");
        assert!(n > 0, "closed before a whole answer: {got:?}");
        got.extend_from_slice(&buf[..n]);
        let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
            .map_or(0, |v| v.trim().parse().unwrap());
        if got.len() >= end + 4 + len {
            return head;
        }
    }
}

/// 3,000 connections ask `/healthz` once, keep the connection and fall silent: each is closed by
/// `--server-idle-timeout` (2 s) after its answer. 1,000 more connect and never send a byte:
/// each is closed by `--server-read-header-timeout` (3 s) from its accept.
#[test]
fn thousands_of_silent_connections_are_closed_at_the_idle_and_header_timeouts() {
    abusers().block_on(async {
        raise_nofile(4_500);
        let p = Prober::start(&[
            "--role",
            "host",
            "--server-idle-timeout",
            "2s",
            "--server-read-header-timeout",
            "3s",
            "--server-max-connections",
            "8000",
        ]);
        let watchdog = Watchdog::start(&p);
        let (idle, header) = (Duration::from_secs(2), Duration::from_secs(3));
        let kept_alive = on_connections(&p.addr, 3000, |mut s, _| async move {
            // The idle clock starts once the answer is written: after this.
            let asked = Instant::now();
            s.write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
                .await
                .unwrap();
            let head = read_answer(&mut s).await;
            assert!(head.starts_with("http/1.1 200"), "{head}");
            (asked, ended_by_server(s, asked + idle + MARGIN).await)
        });
        let silent = on_connections(&p.addr, 1000, |s, start| async move {
            (start, ended_by_server(s, start + header + MARGIN).await)
        });
        let (kept_alive, silent) = tokio::join!(kept_alive, silent);
        watchdog.finish("silent connections", 112.0);
        assert_ended(
            "silent after a request",
            &kept_alive,
            idle - EARLY,
            idle + MARGIN,
        );
        assert_ended("never a byte", &silent, header - EARLY, header + MARGIN);
        let c = counters(&p.addr);
        assert_eq!(
            c.shed,
            shed(&[("idle_timeout", 3000), ("header_timeout", 1000)])
        );
        assert_eq!(c.open, 1, "only the scrape itself: {c:?}");
    })
}

/// `--server-max-connections 100` and 300 connections that never send a byte (the header
/// timeout, 60 s, out of the way): each one past the cap closes the one that has waited
/// longest, so the oldest are reset at once and the newest 100 stay (fewer by the probes that
/// came at the cap: their own connection makes room in turn); `/healthz` answers throughout,
/// and every eviction is counted.
#[test]
fn past_the_cap_the_longest_waiting_connection_makes_room() {
    abusers().block_on(async {
        raise_nofile(1_000);
        let p = Prober::start(&[
            "--role",
            "host",
            "--server-max-connections",
            "100",
            "--server-read-header-timeout",
            "60s",
        ]);
        let watchdog = Watchdog::start(&p);
        let mut conns = Vec::new();
        for _ in 0..300 {
            // One at a time: the accept order is the connect order, so "oldest" is known.
            conns.push(TcpStream::connect(&p.addr).await.unwrap());
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let mut streams = conns;
        let survivors = still_open(&mut streams, MARGIN).await;
        let open = survivors.iter().filter(|o| **o).count();
        let first_open = survivors.iter().position(|o| *o).unwrap_or(survivors.len());
        assert!(
            survivors[first_open..].iter().all(|o| *o),
            "the evicted are the oldest: {survivors:?}"
        );
        assert!((90..=100).contains(&open), "{open} of the newest stay open");
        watchdog.finish("cap", 64.0);
        let c = counters(&p.addr);
        // The scrape may have made room too; only silent connections are ever evicted (they
        // have waited longest), so each is either evicted or still open.
        let open = still_open(&mut streams, Duration::from_millis(500))
            .await
            .iter()
            .filter(|o| **o)
            .count();
        assert_eq!(
            c.shed,
            shed(&[("evicted", 300 - open as u64)]),
            "{open} open"
        );
    })
}

/// Which of `streams` the server has not ended within `wait` (a reset from an eviction comes at
/// once).
async fn still_open(streams: &mut [TcpStream], wait: Duration) -> Vec<bool> {
    let deadline = Instant::now() + wait;
    let mut out = Vec::with_capacity(streams.len());
    for s in streams.iter_mut() {
        out.push(ended_by_server(s, deadline).await.is_none());
    }
    out
}

/// An oversized head and request line, just past the caps, 4 MiB and 64 MiB long, on the
/// defaults (16 KiB, 8 KiB): 431 and 414, and the connection ends; just under the caps is
/// served. The server never reads the rest: a client writing 64 MiB (more than the kernel's
/// buffers on both sides hold) fails before it is done, and RSS does not move.
#[test]
fn oversized_heads_are_answered_431_and_414_unread() {
    abusers().block_on(async {
        let p = Prober::start(&["--role", "host"]);
        let watchdog = Watchdog::start(&p);
        let under_line = format!("/{}", "a".repeat(8 * 1024 - 40));
        let answer = request(&p.addr, &under_line, "", Duration::from_secs(5)).unwrap();
        assert!(answer.starts_with(b"HTTP/1.1 404"), "{answer:?}");
        let under_head = format!("X-Big: {}\r\n", "a".repeat(16 * 1024 - 100));
        let answer = request(&p.addr, "/healthz", &under_head, Duration::from_secs(5)).unwrap();
        assert!(answer.starts_with(b"HTTP/1.1 200"), "{answer:?}");

        let rss_before = rss_mib(p.child.id());
        let mib = 1024 * 1024;
        let cases = [
            ("head just past the cap", header_of(17 * 1024), "431"),
            ("4 MiB head", header_of(4 * mib), "431"),
            ("64 MiB head", header_of(64 * mib), "431"),
            ("request line just past the cap", line_of(9 * 1024), "414"),
            ("4 MiB request line", line_of(4 * mib), "414"),
            ("64 MiB request line", line_of(64 * mib), "414"),
        ];
        for (what, bytes, status) in cases {
            let t0 = Instant::now();
            let huge = bytes.len() == 64 * mib;
            let s = TcpStream::connect(&p.addr).await.unwrap();
            let (mut rd, mut wr) = s.into_split();
            // The client keeps writing; the server answers as soon as the cap is passed.
            let writer = tokio::spawn(async move { wr.write_all(&bytes).await.is_ok() });
            let mut answer = Vec::new();
            let mut buf = [0u8; 1024];
            let ended = tokio::time::timeout(MARGIN, async {
                loop {
                    match rd.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => answer.extend_from_slice(&buf[..n]),
                    }
                }
            })
            .await;
            let answer = String::from_utf8_lossy(&answer);
            println!(
                "{what}: {:?} in {} ms",
                answer.lines().next(),
                t0.elapsed().as_millis()
            );
            assert!(
                ended.is_ok(),
                "{what}: the server did not end the connection"
            );
            assert!(
                answer.starts_with(&format!("HTTP/1.1 {status} ")),
                "{what}: answered {answer:?}"
            );
            if huge {
                let wrote_all = tokio::time::timeout(MARGIN, writer)
                    .await
                    .expect("the writer ends once the server is gone")
                    .unwrap();
                assert!(
                    !wrote_all,
                    "{what}: all 64 MiB went through: the server read them"
                );
            } else {
                writer.abort();
            }
        }
        let rss_after = rss_mib(p.child.id());
        println!("oversized heads: rss_before_mib={rss_before:.1} rss_after_mib={rss_after:.1}");
        assert!(
            rss_after - rss_before < 16.0,
            "RSS grew from {rss_before:.1} to {rss_after:.1} MiB: the 64 MiB were read"
        );
        watchdog.finish("oversized heads", 64.0);
        let c = counters(&p.addr);
        assert_eq!(
            c.shed,
            shed(&[("header_too_large", 3), ("request_line_too_long", 3)])
        );
    })
}

/// A request whose headers run to `len` bytes, never ending.
fn header_of(len: usize) -> Vec<u8> {
    let mut b = b"GET /healthz HTTP/1.1\r\nHost: t\r\nX-Big: ".to_vec();
    b.resize(len, b'a');
    b
}

/// A request line of `len` bytes, never ending.
fn line_of(len: usize) -> Vec<u8> {
    let mut b = b"GET /".to_vec();
    b.resize(len, b'a');
    b
}

// ---------------------------------------------------------------------------------------------
// The cluster role: a large /metrics

/// The cluster role on a stand-in API server with `nodes` nodes, ready.
async fn large_cluster(
    nodes: usize,
    extra: &[&str],
) -> (apiserver::ApiServer, tempfile::TempDir, Prober) {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let api = apiserver::start().await;
    api.generate(nodes, 6);
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    api.write_kubeconfig(&kc).unwrap();
    let mut args = vec![
        "--role",
        "cluster",
        "--cluster-name",
        "c1",
        "--disable-probes",
        "cluster_dns,metrics_server",
    ];
    args.extend(extra);
    let p = Prober::start_with_env(&args, &[("KUBECONFIG", kc.to_str().unwrap())]);
    support::wait_ready(&p).await;
    // Every node's usage and pods in: about 7 KB a node.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let metrics = request(&p.addr, "/metrics", "", Duration::from_secs(30)).unwrap();
        if metrics.len() > nodes * 6_500 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "/metrics stays at {} bytes for {nodes} nodes",
            metrics.len()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    (api, dir, p)
}

/// The body of a whole HTTP/1.1 answer `raw` (head and chunked body), de-chunked; an error when
/// the chunks do not end with the last, empty one.
fn dechunk(raw: &[u8]) -> Result<Vec<u8>, String> {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("no end of head")?;
    let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
    if !head.contains("transfer-encoding: chunked") {
        return Err(format!("not chunked: {head}"));
    }
    let mut rest = &raw[end + 4..];
    let mut body = Vec::new();
    loop {
        let line_end = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("cut in a chunk size")?;
        let size = usize::from_str_radix(std::str::from_utf8(&rest[..line_end]).unwrap_or("?"), 16)
            .map_err(|e| format!("chunk size: {e}"))?;
        rest = &rest[line_end + 2..];
        if size == 0 {
            return if rest == b"\r\n" {
                Ok(body)
            } else {
                Err("trailing bytes".into())
            };
        }
        if rest.len() < size + 2 {
            return Err(format!("cut in a chunk: {} of {size}", rest.len()));
        }
        body.extend_from_slice(&rest[..size]);
        rest = &rest[size + 2..];
    }
}

/// A `/metrics` of about 7 MB (text; 370 KB gzip): the cluster role over 1,000 nodes.
const LARGE_NODES: usize = 1000;

/// 20 clients ask for the large `/metrics` (plain text, so the answer is about 7 MB), read its
/// head and 64 KiB of body, and stop reading (a 4 KiB receive buffer: the server's writes block
/// once its send buffer is full): each connection is reset by `--server-write-timeout` (2 s)
/// from its request.
#[test]
fn readers_stalled_mid_body_are_closed_at_the_write_timeout() {
    abusers().block_on(async {
        let (_api, _dir, p) = large_cluster(LARGE_NODES, &["--server-write-timeout", "2s"]).await;
        let full = request(&p.addr, "/metrics", "", Duration::from_secs(30)).unwrap();
        assert!(
            full.len() > 6_000_000,
            "a large /metrics: {} bytes",
            full.len()
        );
        let watchdog = Watchdog::start(&p);
        let timeout = Duration::from_secs(2);
        let addr: std::net::SocketAddr = p.addr.parse().unwrap();
        let mut readers = Vec::new();
        for _ in 0..20 {
            readers.push(tokio::spawn(stall_mid_body(addr, timeout + MARGIN)));
        }
        let mut ends = Vec::new();
        for r in readers {
            let (start, end, read) = r.await.unwrap();
            assert!(
                read < full.len() / 2,
                "a stalled reader got {read} bytes of about {}",
                full.len()
            );
            ends.push((start, end));
        }
        assert_ended("stalled readers", &ends, timeout - EARLY, timeout + MARGIN);
        watchdog.finish("stalled readers", 96.0);
        let c = counters(&p.addr);
        assert_eq!(c.shed, shed(&[("write_timeout", 20)]));
    })
}

/// Asks `addr` for `/metrics`, reads 64 KiB of the answer and stops reading; answers when it
/// asked, when the server reset the connection (seen as the socket's pending error, without
/// reading), and how many bytes it got in all (what it had read, then the rest of its buffer).
async fn stall_mid_body(
    addr: std::net::SocketAddr,
    within: Duration,
) -> (Instant, Option<Instant>, usize) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut s = socket.connect(addr).await.unwrap();
    // The write clock starts once the request is read: after this.
    let asked = Instant::now();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    let mut read = 0;
    let mut buf = vec![0u8; 8192];
    while read < 64 * 1024 {
        let n = s.read(&mut buf).await.unwrap();
        assert!(n > 0, "the answer ended after {read} bytes");
        read += n;
    }
    let deadline = asked + within;
    let mut reset = None;
    while Instant::now() < deadline {
        if s.take_error().unwrap().is_some() {
            reset = Some(Instant::now());
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // What the kernel had kept for it, then the end.
    loop {
        match tokio::time::timeout(Duration::from_secs(1), s.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => read += n,
            _ => break,
        }
    }
    (asked, reset, read)
}

/// 200 clients scrape the large `/metrics` with gzip at once: every answer is whole (its chunks
/// end with the last one, its gzip members inflate with their checksums right, and the text
/// ends with the snapshot age, the last family), nothing is shed, and `/healthz` answers
/// within 1 s meanwhile.
#[test]
fn two_hundred_concurrent_gzip_scrapes_are_all_answered_whole() {
    abusers().block_on(async {
        raise_nofile(1_000);
        let (_api, _dir, p) = large_cluster(LARGE_NODES, &[]).await;
        let watchdog = Watchdog::start(&p);
        let t0 = Instant::now();
        let answers = Arc::new(std::sync::Mutex::new(Vec::new()));
        let got = answers.clone();
        let scrapes = on_connections(&p.addr, 200, move |mut s, start| {
            let got = got.clone();
            async move {
                s.write_all(
                    b"GET /metrics HTTP/1.1\r\nHost: t\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n",
                )
                .await
                .unwrap();
                let mut raw = Vec::new();
                s.read_to_end(&mut raw).await.expect("a whole answer");
                got.lock().unwrap().push(raw);
                (start, Some(Instant::now()))
            }
        })
        .await;
        let slowest = scrapes
            .iter()
            .map(|(s, e)| e.unwrap().duration_since(*s))
            .max()
            .unwrap();
        println!(
            "gzip scrapes: 200 in {} ms, the slowest {} ms",
            t0.elapsed().as_millis(),
            slowest.as_millis()
        );
        watchdog.finish("gzip scrapes", 160.0);
        // Checked once all are in: inflating is the test's work, not the server's.
        let answers = std::mem::take(&mut *answers.lock().unwrap());
        assert_eq!(answers.len(), 200);
        for raw in answers {
            let gz = dechunk(&raw).expect("whole chunks");
            let mut text = String::new();
            flate2::read::MultiGzDecoder::new(&gz[..])
                .read_to_string(&mut text)
                .expect("whole gzip members");
            assert!(text.len() > 6_000_000, "{} bytes", text.len());
            let last = text.lines().last().unwrap_or_default();
            assert!(
                last.starts_with("kube_prober_snapshot_age_seconds "),
                "ends with {last:?}"
            );
        }
        let c = counters(&p.addr);
        assert_eq!(c.shed, shed(&[]));
    })
}

// ---------------------------------------------------------------------------------------------
// TLS: the same limits

/// A self-signed certificate for 127.0.0.1 in `dir` (tls.crt, tls.key), and a client config
/// that trusts it.
fn self_signed(dir: &std::path::Path) -> Arc<rustls::ClientConfig> {
    let ck = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
    std::fs::write(dir.join("tls.crt"), ck.cert.pem()).unwrap();
    std::fs::write(dir.join("tls.key"), ck.signing_key.serialize_pem()).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ck.cert.der().clone()).unwrap();
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    Arc::new(
        rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
}

fn server_name() -> rustls::pki_types::ServerName<'static> {
    rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap()
}

/// `GET /healthz` over TLS on a new connection (blocking): how long it took, or why it failed.
fn healthz_tls(addr: &str, config: &Arc<rustls::ClientConfig>) -> Result<Duration, String> {
    let t0 = Instant::now();
    let tcp = std::net::TcpStream::connect(addr).map_err(|e| format!("connect: {e}"))?;
    tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let conn = rustls::ClientConnection::new(config.clone(), server_name()).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    tls.write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .map_err(|e| format!("write: {e}"))?;
    let mut answer = Vec::new();
    // The server closes without close_notify's wait; what matters is the answer read.
    let _ = tls.read_to_end(&mut answer);
    if !answer.starts_with(b"HTTP/1.1 200") {
        return Err(format!("answer {:?}", String::from_utf8_lossy(&answer)));
    }
    Ok(t0.elapsed())
}

/// Over TLS: 300 connections that never send a ClientHello and 300 that finish the handshake
/// and then trickle a head are closed by the header timeout (2 s from the accept, handshake
/// included); 100 kept alive after a request by the idle timeout (3 s); an oversized request
/// line and head are answered 414 and 431 inside the TLS stream.
#[test]
fn over_tls_the_same_limits_hold() {
    abusers().block_on(async {
        raise_nofile(2_000);
        let dir = tempfile::tempdir().unwrap();
        let config = self_signed(dir.path());
        let (crt, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
        let p = Prober::start(&[
            "--role",
            "host",
            "--tls-cert-file",
            crt.to_str().unwrap(),
            "--tls-key-file",
            key.to_str().unwrap(),
            "--server-read-header-timeout",
            "2s",
            "--server-idle-timeout",
            "3s",
            "--server-max-connections",
            "2000",
        ]);
        let probe_config = config.clone();
        let addr = p.addr.clone();
        let watchdog = Watchdog::start_with(&p, move || healthz_tls(&addr, &probe_config));
        let (header, idle) = (Duration::from_secs(2), Duration::from_secs(3));
        let connector = tokio_rustls::TlsConnector::from(config.clone());
        let no_hello = on_connections(&p.addr, 300, |s, start| async move {
            (start, ended_by_server(s, start + header + MARGIN).await)
        });
        let c = connector.clone();
        let trickling = on_connections(&p.addr, 300, move |s, start| {
            let c = c.clone();
            async move {
                let tls = c.connect(server_name(), s).await.expect("handshake");
                let (rd, mut wr) = tokio::io::split(tls);
                let writer = tokio::spawn(async move {
                    let head = b"GET /healthz HTTP/1.1\r\nHost: t\r\nX-Slow: ";
                    for b in head.iter().copied().chain(std::iter::repeat(b'a')) {
                        if wr.write_all(&[b]).await.is_err() || wr.flush().await.is_err() {
                            return;
                        }
                        tokio::time::sleep(Duration::from_millis(250)).await;
                    }
                });
                let end = ended_by_server(rd, start + header + MARGIN).await;
                writer.abort();
                (start, end)
            }
        });
        let c = connector.clone();
        let kept_alive = on_connections(&p.addr, 100, move |s, _| {
            let c = c.clone();
            async move {
                let mut tls = c.connect(server_name(), s).await.expect("handshake");
                let asked = Instant::now();
                tls.write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
                    .await
                    .unwrap();
                let mut got = Vec::new();
                let mut buf = [0u8; 1024];
                while !got.ends_with(b"ok\n") {
                    let n = tls.read(&mut buf).await.expect("an answer");
                    assert!(n > 0, "closed before the answer: {got:?}");
                    got.extend_from_slice(&buf[..n]);
                }
                (asked, ended_by_server(tls, asked + idle + MARGIN).await)
            }
        });
        let (no_hello, trickling, kept_alive) = tokio::join!(no_hello, trickling, kept_alive);
        assert_ended(
            "TLS, no ClientHello",
            &no_hello,
            header - EARLY,
            header + MARGIN,
        );
        assert_ended(
            "TLS, trickling heads",
            &trickling,
            header - EARLY,
            header + MARGIN,
        );
        assert_ended("TLS, kept alive", &kept_alive, idle - EARLY, idle + MARGIN);
        for (bytes, status) in [(line_of(9 * 1024), "414"), (header_of(17 * 1024), "431")] {
            let s = TcpStream::connect(&p.addr).await.unwrap();
            let mut tls = connector.connect(server_name(), s).await.unwrap();
            tls.write_all(&bytes).await.unwrap();
            tls.flush().await.unwrap();
            let mut answer = Vec::new();
            let mut buf = [0u8; 1024];
            let ended = tokio::time::timeout(MARGIN, async {
                loop {
                    match tls.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => answer.extend_from_slice(&buf[..n]),
                    }
                }
            })
            .await;
            assert!(ended.is_ok(), "{status}: not ended by the server");
            let answer = String::from_utf8_lossy(&answer);
            assert!(
                answer.starts_with(&format!("HTTP/1.1 {status} ")),
                "{answer:?}"
            );
        }
        watchdog.finish("TLS", 80.0);
        let probe_counters = request_tls_metrics(&p.addr, &config).await;
        assert_eq!(
            probe_counters,
            shed(&[
                ("header_timeout", 600),
                ("idle_timeout", 100),
                ("request_line_too_long", 1),
                ("header_too_large", 1),
            ])
        );
    })
}

/// The shed counters of `/metrics` over TLS.
async fn request_tls_metrics(
    addr: &str,
    config: &Arc<rustls::ClientConfig>,
) -> BTreeMap<String, u64> {
    let s = TcpStream::connect(addr).await.unwrap();
    let mut tls = tokio_rustls::TlsConnector::from(config.clone())
        .connect(server_name(), s)
        .await
        .unwrap();
    tls.write_all(b"GET /metrics HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut raw = Vec::new();
    let _ = tls.read_to_end(&mut raw).await;
    let text = String::from_utf8_lossy(&raw);
    text.lines()
        .filter_map(|l| l.strip_prefix("kube_prober_http_connections_shed_total{reason=\""))
        .map(|rest| {
            let (reason, value) = rest.split_once("\"} ").unwrap();
            (reason.to_string(), value.parse().unwrap())
        })
        .collect()
}
