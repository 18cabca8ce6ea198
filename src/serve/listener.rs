//! The one accept loop, plain HTTP and TLS alike, and the limits that keep `/healthz`,
//! `/metrics` and `/watcher` answering while clients misbehave (`--server-*`,
//! docs/endpoints.md "Listener limits"):
//!
//! - **header timeout**: a request line and headers must arrive whole within it (on a new
//!   connection, counted from the accept, TLS handshake included);
//! - **idle timeout**: a kept-alive connection may wait that long for its next request;
//! - **write timeout**: an answer must be written out within it of its request's headers, so a
//!   client that stops reading a large `/metrics` is closed;
//! - **header and request-line caps**: past them the answer is 431 (hyper's, for the head as a
//!   whole) or 414 (ours, for the request line), and nothing more is read;
//! - **a cap on connections**: past it, room is made by closing the connection that has waited
//!   longest without sending a whole request; when every connection is in the middle of a
//!   request the new one is refused instead.
//!
//! Every connection closed this way is counted by reason in
//! `kube_prober_http_connections_shed_total` and closed with a reset; the open connections
//! are `kube_prober_http_connections`. The clocks are in [`super::connection`].

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use super::connection::{Conn, Phase, Socket, Tracked, TrackedService, Watched};
use crate::outputs::families;
use crate::outputs::series::Labels;

/// The listener's limits, from `--server-*` ([`super::options`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListenerLimits {
    /// `--server-read-header-timeout`.
    pub header_timeout: Duration,
    /// `--server-idle-timeout`.
    pub idle_timeout: Duration,
    /// `--server-write-timeout`.
    pub write_timeout: Duration,
    /// `--server-max-connections`.
    pub max_connections: usize,
    /// `--server-max-header-bytes`: request line and headers together.
    pub max_header_bytes: usize,
    /// `--server-max-request-line-bytes`: below `max_header_bytes`.
    pub max_request_line_bytes: usize,
}

impl Default for ListenerLimits {
    fn default() -> Self {
        use super::options::defaults;
        ListenerLimits {
            header_timeout: defaults::HEADER_TIMEOUT,
            idle_timeout: defaults::IDLE_TIMEOUT,
            write_timeout: defaults::WRITE_TIMEOUT,
            max_connections: defaults::MAX_CONNECTIONS,
            max_header_bytes: defaults::MAX_HEADER_BYTES,
            max_request_line_bytes: defaults::MAX_REQUEST_LINE_BYTES,
        }
    }
}

/// Why the listener closed a connection on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shed {
    HeaderTimeout,
    IdleTimeout,
    WriteTimeout,
    /// 431: the request line and headers passed `--server-max-header-bytes` (or hyper's 100
    /// headers).
    HeaderTooLarge,
    /// 414: the request line passed `--server-max-request-line-bytes`.
    RequestLineTooLong,
    /// Closed to make room for a new connection at `--server-max-connections`.
    Evicted,
    /// A new connection turned away at the cap: every open one was in the middle of a request.
    Refused,
}

impl Shed {
    pub const ALL: [Shed; 7] = [
        Shed::HeaderTimeout,
        Shed::IdleTimeout,
        Shed::WriteTimeout,
        Shed::HeaderTooLarge,
        Shed::RequestLineTooLong,
        Shed::Evicted,
        Shed::Refused,
    ];

    /// The `reason` label.
    pub fn label(self) -> &'static str {
        match self {
            Shed::HeaderTimeout => "header_timeout",
            Shed::IdleTimeout => "idle_timeout",
            Shed::WriteTimeout => "write_timeout",
            Shed::HeaderTooLarge => "header_too_large",
            Shed::RequestLineTooLong => "request_line_too_long",
            Shed::Evicted => "evicted",
            Shed::Refused => "refused",
        }
    }
}

/// The listener's counters, rendered on `/metrics`.
#[derive(Debug, Default)]
pub struct ListenerStats {
    open: AtomicU64,
    shed: [AtomicU64; Shed::ALL.len()],
}

impl ListenerStats {
    fn count(&self, reason: Shed) {
        self.shed[reason as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Connections shed for `reason` so far.
    pub fn shed(&self, reason: Shed) -> u64 {
        self.shed[reason as usize].load(Ordering::Relaxed)
    }

    /// Connections open now.
    pub fn open(&self) -> u64 {
        self.open.load(Ordering::Relaxed)
    }

    /// The rows this layer adds to `/metrics`: every reason from the start (at 0).
    pub fn families(&self) -> Vec<(&'static families::Family, Vec<(Labels<'static>, f64)>)> {
        let shed = Shed::ALL
            .iter()
            .map(|r| (vec![("reason", r.label())], self.shed(*r) as f64))
            .collect();
        vec![
            (&families::HTTP_CONNECTIONS_SHED, shed),
            (
                &families::HTTP_CONNECTIONS,
                vec![(vec![], self.open() as f64)],
            ),
        ]
    }
}

/// The open connections, for the cap.
struct Registry {
    epoch: Instant,
    next_id: AtomicU64,
    conns: Mutex<Open>,
    stats: Arc<ListenerStats>,
}

/// The connections whose task has not ended, and how many of them are killed already (they
/// no longer count against the cap).
#[derive(Default)]
struct Open {
    conns: HashMap<u64, Arc<Conn>>,
    killed: usize,
}

/// A connection's place in the registry, given up when its task ends.
struct Slot {
    id: u64,
    conn: Arc<Conn>,
    registry: Arc<Registry>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.registry.lock();
        if open.conns.remove(&self.id).is_some() && self.conn.is_killed() {
            open.killed -= 1;
        }
        self.registry
            .stats
            .open
            .store(open.conns.len() as u64, Ordering::Relaxed);
    }
}

impl Registry {
    fn lock(&self) -> std::sync::MutexGuard<'_, Open> {
        self.conns.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A place for a new connection; at `cap`, the connection that has waited longest without
    /// sending a whole request is killed to make room, and when every one is busy, `None`.
    fn admit(self: &Arc<Self>, cap: usize) -> Option<Slot> {
        let mut open = self.lock();
        if open.conns.len() - open.killed >= cap {
            // Ties (the same millisecond) go to the one accepted first.
            let (_, victim) = open
                .conns
                .iter()
                .filter(|(_, c)| !c.is_killed() && c.phase() != Phase::Busy)
                .min_by_key(|(id, c)| (c.waiting_since_ms(), **id))?;
            // Only the registry kills, under this lock: the victim was alive.
            victim.kill();
            open.killed += 1;
            self.stats.count(Shed::Evicted);
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let conn = Arc::new(Conn::new(self.epoch));
        open.conns.insert(id, conn.clone());
        self.stats
            .open
            .store(open.conns.len() as u64, Ordering::Relaxed);
        Some(Slot {
            id,
            conn,
            registry: self.clone(),
        })
    }
}

/// Binds `addr` with an accept queue as long as the kernel allows (`net.core.somaxconn`, 4096
/// since Linux 5.4), as Go's `net.Listen` does: under a burst of connections tokio's default of
/// 1024 overflows, and each SYN the kernel then drops costs its client (a kubelet probe among
/// them) a retransmission a second later.
pub fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    // As std's bind on Unix: a restart may bind while old connections are in TIME_WAIT.
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    // The kernel caps it at net.core.somaxconn.
    socket.listen(65_535)
}

/// Warns when `--server-max-connections` is more than the soft `RLIMIT_NOFILE` leaves for
/// sockets: accepts would then fail (EMFILE) before the cap makes room.
fn check_fd_limit(cap: usize) {
    let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
    if let Some(soft) = soft
        && cap as u64 + 64 > soft
    {
        tracing::warn!(
            max_connections = cap,
            nofile_soft_limit = soft,
            "--server-max-connections is above what the open-file limit leaves for sockets: raise the limit (ulimit -n) or lower the cap"
        );
    }
}

/// Serves `app` on `listener` (over TLS with `tls`) under `limits` until `cancel`, then lets
/// in-flight requests finish (bounded by the caller): idle connections close at once, busy ones
/// after their answer. A failed TLS handshake is logged at debug and never stops the server.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    tls: Option<Arc<rustls::ServerConfig>>,
    limits: ListenerLimits,
    stats: Arc<ListenerStats>,
    cancel: CancellationToken,
) -> std::io::Result<()> {
    check_fd_limit(limits.max_connections);
    let acceptor = tls.map(TlsAcceptor::from);
    let registry = Arc::new(Registry {
        epoch: Instant::now(),
        next_id: AtomicU64::new(0),
        conns: Mutex::default(),
        stats: stats.clone(),
    });
    // Each connection's task holds a sender: the channel closes when the last one ends.
    let (open_tx, mut open_rx) = mpsc::channel::<()>(1);
    loop {
        let (tcp, peer) = tokio::select! {
            _ = cancel.cancelled() => break,
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    // EMFILE and friends: back off briefly instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Some(slot) = registry.admit(limits.max_connections) else {
            stats.count(Shed::Refused);
            let _ = tcp.set_zero_linger();
            tracing::debug!(%peer, "connection refused: at --server-max-connections, all busy");
            continue;
        };
        let _ = tcp.set_nodelay(true);
        let task = Connection {
            app: app.clone(),
            limits,
            stats: stats.clone(),
            shutdown: cancel.clone(),
            peer,
        };
        let acceptor = acceptor.clone();
        let open = open_tx.clone();
        tokio::spawn(async move {
            task.run(tcp, slot, acceptor).await;
            drop(open);
        });
    }
    drop(listener);
    drop(open_tx);
    let _ = open_rx.recv().await;
    Ok(())
}

/// What one connection's task needs.
struct Connection {
    app: Router,
    limits: ListenerLimits,
    stats: Arc<ListenerStats>,
    shutdown: CancellationToken,
    peer: SocketAddr,
}

impl Connection {
    /// The TLS handshake if any (under the first request's clock), then HTTP.
    async fn run(self, tcp: TcpStream, slot: Slot, acceptor: Option<TlsAcceptor>) {
        let conn = slot.conn.clone();
        let socket = Socket::new(tcp, conn.clone());
        let Some(acceptor) = acceptor else {
            let io = Tracked::new(socket, conn, self.limits.max_request_line_bytes);
            return self.http(io, &slot, self.app.clone()).await;
        };
        let mut handshake = Watched::new(acceptor.accept(socket), conn.clone(), self.limits);
        let tls = tokio::select! {
            _ = self.shutdown.cancelled() => return,
            r = &mut handshake => match r {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => {
                    tracing::debug!(peer = %self.peer, error = %e, "TLS handshake failed");
                    return;
                }
                Err(reason) => return self.shed(&conn, reason),
            },
        };
        let user = tls
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|c| c.first())
            .and_then(|leaf| super::tls::client_cert_user(leaf));
        let app = match user {
            Some(u) => self.app.clone().layer(axum::Extension(u)),
            None => self.app.clone(),
        };
        let io = Tracked::new(tls, conn, self.limits.max_request_line_bytes);
        self.http(io, &slot, app).await
    }

    /// HTTP/1.1 on `io` until the peer or a limit closes it, or shutdown finds it idle.
    async fn http<I>(&self, io: Tracked<I>, slot: &Slot, app: Router)
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let conn = &slot.conn;
        let http = hyper::server::conn::http1::Builder::new()
            // Our own clocks (super::connection) replace hyper's, which would also cut a
            // kept-alive connection's wait for its next request at the header timeout.
            .header_read_timeout(None)
            .max_header_size(self.limits.max_header_bytes)
            .serve_connection(TokioIo::new(io), TrackedService::new(app, conn.clone()));
        let mut watched = Watched::new(http, conn.clone(), self.limits);
        let mut shutting_down = false;
        let ended = loop {
            tokio::select! {
                r = &mut watched => break r,
                _ = self.shutdown.cancelled(), if !shutting_down => {
                    shutting_down = true;
                    if matches!(conn.phase(), Phase::First | Phase::Waiting) {
                        return;
                    }
                    watched.inner().graceful_shutdown();
                }
            }
        };
        match ended {
            _ if conn.line_rejected() => self.stats.count(Shed::RequestLineTooLong),
            Ok(Ok(())) => {}
            Ok(Err(e)) if e.is_parse_too_large() => self.stats.count(Shed::HeaderTooLarge),
            Ok(Err(e)) => {
                tracing::debug!(peer = %self.peer, error = %e, "connection ended with an error");
            }
            Err(reason) => self.shed(conn, reason),
        }
    }

    /// Counts `reason` (an eviction was counted when it was decided) and closes with a reset.
    fn shed(&self, conn: &Conn, reason: Shed) {
        conn.abort();
        if reason != Shed::Evicted {
            self.stats.count(reason);
        }
        tracing::debug!(peer = %self.peer, reason = reason.label(), "connection shed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registry() -> Arc<Registry> {
        Arc::new(Registry {
            epoch: Instant::now(),
            next_id: AtomicU64::new(0),
            conns: Mutex::default(),
            stats: Arc::default(),
        })
    }

    #[tokio::test(start_paused = true)]
    async fn the_cap_evicts_the_longest_waiting_and_refuses_when_all_are_busy() {
        let r = registry();
        let mut slots = Vec::new();
        for _ in 0..3 {
            slots.push(r.admit(3).expect("under the cap"));
            tokio::time::advance(Duration::from_secs(1)).await;
        }
        // The oldest is busy with a request: the next oldest waits longest.
        slots[0].conn.request_read();
        let fourth = r.admit(3).expect("room made");
        assert!(!slots[0].conn.is_killed());
        assert!(slots[1].conn.is_killed());
        assert!(!slots[2].conn.is_killed());
        assert_eq!(r.stats.shed(Shed::Evicted), 1);
        assert_eq!(
            r.stats.open(),
            4,
            "the killed one is open until its task ends"
        );
        drop(slots.remove(1));
        assert_eq!(r.stats.open(), 3);
        slots[1].conn.request_read();
        fourth.conn.request_read();
        assert!(r.admit(3).is_none(), "every connection is busy");
        assert_eq!(r.stats.shed(Shed::Evicted), 1);
        drop(fourth);
        assert!(r.admit(3).is_some(), "a place freed");
    }

    #[test]
    fn every_reason_is_rendered_from_the_start() {
        for (i, r) in Shed::ALL.iter().enumerate() {
            assert_eq!(
                *r as usize, i,
                "ALL is in declaration order: counters index by it"
            );
        }
        let s = ListenerStats::default();
        s.count(Shed::IdleTimeout);
        let f = s.families();
        assert_eq!(f[0].0.name, "kube_prober_http_connections_shed");
        assert_eq!(f[0].1.len(), Shed::ALL.len());
        let idle = f[0]
            .1
            .iter()
            .find(|(l, _)| l[0].1 == "idle_timeout")
            .unwrap();
        assert_eq!(idle.1, 1.0);
        assert_eq!(f[1].1, vec![(vec![], 0.0)]);
    }
}
