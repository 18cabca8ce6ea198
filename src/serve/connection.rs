//! One connection of the listener ([`super::listener`]): where it stands between requests, and
//! the clock of each stage, enforced from outside hyper.
//!
//! A connection is always in one of four phases, and each phase has its own deadline:
//!
//! | phase | from | until | deadline | shed as |
//! |---|---|---|---|---|
//! | `First` | accept | the first byte of the first request (TLS handshake included) | header | `header_timeout` |
//! | `Head` | that byte (on a new connection: accept) | the request line and headers are read | header | `header_timeout` |
//! | `Busy` | headers read (the handler is called) | the answer is written out | write | `write_timeout` |
//! | `Waiting` | the answer is written out | the first byte of the next request | idle | `idle_timeout` |
//!
//! as Go's `net/http` counts `ReadHeaderTimeout`, `WriteTimeout` and `IdleTimeout`. hyper's own
//! `header_read_timeout` is off: it starts when hyper waits for a head, so on a kept-alive
//! connection it also bounds the wait for the next request, and there would be no idle timeout
//! apart from the header one.
//!
//! Three pieces see the phases change, all in the connection's own task: [`Tracked`] (the
//! stream under hyper) sees the first byte of a request and the writes that block, the service
//! wrapper [`TrackedService`] sees the head handed to the handler, and [`TrackedBody`] sees the
//! answer's body finished. [`Watched`] polls hyper and arms one timer for the current phase's
//! deadline. The request line is scanned by [`Tracked`] too: past its cap it answers 414
//! itself and ends the stream (hyper answers 431 for the head as a whole, but 414 only past
//! 64 KiB of target, and only once the head is whole).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use axum::Router;
use bytes::Bytes;
use futures_util::task::AtomicWaker;
use http::{Request, Response};
use hyper::body::Incoming;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

use super::listener::{ListenerLimits, Shed};

/// What a connection is doing (see the module's table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum Phase {
    First = 0,
    Head = 1,
    Busy = 2,
    Waiting = 3,
}

impl Phase {
    fn from_u8(v: u8) -> Phase {
        match v {
            0 => Phase::First,
            1 => Phase::Head,
            2 => Phase::Busy,
            _ => Phase::Waiting,
        }
    }
}

/// One connection's state, shared by its task and the listener's registry (which reads the
/// phase to choose whom to evict, and evicts through [`Conn::kill`]).
#[derive(Debug)]
pub(super) struct Conn {
    epoch: Instant,
    phase: AtomicU8,
    /// Milliseconds since `epoch` at which the current phase's clock started.
    since_ms: AtomicU64,
    /// Milliseconds since `epoch` since which the connection has waited without sending a
    /// whole request: its accept, else the end of its last answer.
    waiting_since_ms: AtomicU64,
    /// The answer's body has been sent to hyper whole (or dropped).
    body_done: AtomicBool,
    /// The newest write (or flush) could not go through: the peer is not reading.
    write_blocked: AtomicBool,
    /// [`Tracked`] answered 414.
    line_rejected: AtomicBool,
    /// The registry closed it to make room.
    killed: AtomicBool,
    /// Close with a reset (SO_LINGER 0), dropping what the kernel still holds for the peer.
    abort: AtomicBool,
    waker: AtomicWaker,
}

impl Conn {
    /// A connection accepted now, at `epoch + now`.
    pub(super) fn new(epoch: Instant) -> Conn {
        let c = Conn {
            epoch,
            phase: AtomicU8::new(Phase::First as u8),
            since_ms: AtomicU64::new(0),
            waiting_since_ms: AtomicU64::new(0),
            body_done: AtomicBool::new(false),
            write_blocked: AtomicBool::new(false),
            line_rejected: AtomicBool::new(false),
            killed: AtomicBool::new(false),
            abort: AtomicBool::new(false),
            waker: AtomicWaker::new(),
        };
        let now = c.now_ms();
        c.since_ms.store(now, Ordering::Relaxed);
        c.waiting_since_ms.store(now, Ordering::Relaxed);
        c
    }

    fn now_ms(&self) -> u64 {
        Instant::now()
            .saturating_duration_since(self.epoch)
            .as_millis() as u64
    }

    pub(super) fn phase(&self) -> Phase {
        Phase::from_u8(self.phase.load(Ordering::Relaxed))
    }

    fn enter(&self, phase: Phase) {
        self.since_ms.store(self.now_ms(), Ordering::Relaxed);
        self.phase.store(phase as u8, Ordering::Relaxed);
    }

    /// Since when it has waited without sending a whole request, for the registry.
    pub(super) fn waiting_since_ms(&self) -> u64 {
        self.waiting_since_ms.load(Ordering::Relaxed)
    }

    /// Bytes of a request arrived while it waited for one.
    fn head_started(&self) {
        match self.phase() {
            // The first request's clock runs from the accept, as Go's ReadHeaderTimeout.
            Phase::First => self.phase.store(Phase::Head as u8, Ordering::Relaxed),
            Phase::Waiting => self.enter(Phase::Head),
            Phase::Head | Phase::Busy => {}
        }
    }

    /// The head is read and goes to the handler.
    pub(super) fn request_read(&self) {
        self.body_done.store(false, Ordering::Relaxed);
        self.enter(Phase::Busy);
    }

    /// An answer that is written out returns the connection to waiting for the next request.
    fn settle(&self) {
        if self.phase() == Phase::Busy
            && self.body_done.load(Ordering::Relaxed)
            && !self.write_blocked.load(Ordering::Relaxed)
        {
            let now = self.now_ms();
            self.waiting_since_ms.store(now, Ordering::Relaxed);
            self.since_ms.store(now, Ordering::Relaxed);
            self.phase.store(Phase::Waiting as u8, Ordering::Relaxed);
        }
    }

    /// The current phase's deadline and what passing it is counted as.
    fn deadline(&self, limits: &ListenerLimits) -> (Instant, Shed) {
        let (timeout, reason) = match self.phase() {
            Phase::First | Phase::Head => (limits.header_timeout, Shed::HeaderTimeout),
            Phase::Busy => (limits.write_timeout, Shed::WriteTimeout),
            Phase::Waiting => (limits.idle_timeout, Shed::IdleTimeout),
        };
        let since = Duration::from_millis(self.since_ms.load(Ordering::Relaxed));
        (self.epoch + since + timeout, reason)
    }

    /// Closes it from outside (the registry, making room).
    pub(super) fn kill(&self) {
        self.killed.store(true, Ordering::Relaxed);
        self.waker.wake();
    }

    pub(super) fn is_killed(&self) -> bool {
        self.killed.load(Ordering::Relaxed)
    }

    pub(super) fn line_rejected(&self) -> bool {
        self.line_rejected.load(Ordering::Relaxed)
    }

    /// The socket is closed with a reset when it is dropped.
    pub(super) fn abort(&self) {
        self.abort.store(true, Ordering::Relaxed);
    }
}

/// The accepted socket: closed with a reset when its connection was shed ([`Conn::abort`]), so
/// that what the kernel still holds for a peer that stopped reading is dropped at once instead
/// of lingering after a FIN.
pub(super) struct Socket {
    tcp: TcpStream,
    conn: Arc<Conn>,
}

impl Socket {
    pub(super) fn new(tcp: TcpStream, conn: Arc<Conn>) -> Socket {
        Socket { tcp, conn }
    }
}

impl Drop for Socket {
    fn drop(&mut self) {
        if self.conn.abort.load(Ordering::Relaxed) {
            let _ = self.tcp.set_zero_linger();
        }
    }
}

impl AsyncRead for Socket {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_read(cx, buf)
    }
}

impl AsyncWrite for Socket {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_shutdown(cx)
    }
}

/// What [`Tracked`] answers when a request line passes its cap; the connection then ends.
const REPLY_414: &[u8] =
    b"HTTP/1.1 414 URI Too Long\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";

/// The (plaintext) stream hyper reads and writes: marks the first byte of each request, caps
/// the request line, and records whether the newest write went through.
pub(super) struct Tracked<I> {
    io: I,
    conn: Arc<Conn>,
    max_request_line: usize,
    /// Bytes of the current request line so far; `None` once its end was seen.
    line: Option<usize>,
    /// Bytes of [`REPLY_414`] written, once the line was refused.
    reply: Option<usize>,
}

impl<I> Tracked<I> {
    pub(super) fn new(io: I, conn: Arc<Conn>, max_request_line: usize) -> Tracked<I> {
        Tracked {
            io,
            conn,
            max_request_line,
            line: None,
            reply: None,
        }
    }
}

impl<I: AsyncRead + AsyncWrite + Unpin> Tracked<I> {
    /// Writes the 414 answer, flushes and shuts the write side; then hyper reads the end of
    /// the stream.
    fn poll_reply(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut sent = self.reply.unwrap_or(0);
        while sent < REPLY_414.len() {
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, &REPLY_414[sent..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            sent += n;
            self.reply = Some(sent);
        }
        ready!(Pin::new(&mut self.io).poll_flush(cx))?;
        let _ = ready!(Pin::new(&mut self.io).poll_shutdown(cx));
        Poll::Ready(Ok(()))
    }

    /// Counts `got`, the bytes just read, against the request line's cap; true when the line
    /// passes it.
    fn line_too_long(&mut self, got: &[u8]) -> bool {
        if matches!(self.conn.phase(), Phase::First | Phase::Waiting) {
            self.conn.head_started();
            self.line = Some(0);
        }
        let Some(len) = self.line else {
            return false;
        };
        let len = match memchr::memchr(b'\n', got) {
            Some(i) => {
                self.line = None;
                len + i
            }
            None => {
                self.line = Some(len + got.len());
                len + got.len()
            }
        };
        len > self.max_request_line
    }

    fn blocked<T>(&self, r: Poll<T>) -> Poll<T> {
        self.conn
            .write_blocked
            .store(r.is_pending(), Ordering::Relaxed);
        r
    }
}

impl<I: AsyncRead + AsyncWrite + Unpin> AsyncRead for Tracked<I> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.reply.is_some() {
            return this.poll_reply(cx);
        }
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.io).poll_read(cx, buf))?;
        if buf.filled().len() == before || this.conn.phase() == Phase::Busy {
            return Poll::Ready(Ok(()));
        }
        if this.line_too_long(&buf.filled()[before..]) {
            // hyper never sees these bytes: it would answer 431 for them on its own.
            buf.set_filled(before);
            this.conn.line_rejected.store(true, Ordering::Relaxed);
            this.reply = Some(0);
            return this.poll_reply(cx);
        }
        Poll::Ready(Ok(()))
    }
}

impl<I: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Tracked<I> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.io).poll_write(cx, buf);
        this.blocked(r)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        this.blocked(r)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.io).poll_flush(cx);
        this.blocked(r)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// The router as hyper calls it, marking the head read and wrapping the answer's body.
#[derive(Clone)]
pub(super) struct TrackedService {
    router: Router,
    conn: Arc<Conn>,
}

impl TrackedService {
    pub(super) fn new(router: Router, conn: Arc<Conn>) -> TrackedService {
        TrackedService { router, conn }
    }
}

type Answer = Result<Response<TrackedBody>, std::convert::Infallible>;

impl hyper::service::Service<Request<Incoming>> for TrackedService {
    type Response = Response<TrackedBody>;
    type Error = std::convert::Infallible;
    type Future = Pin<Box<dyn Future<Output = Answer> + Send>>;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        use tower_service::Service as _;
        self.conn.request_read();
        let conn = self.conn.clone();
        // A Router is always ready (its poll_ready is Ready(Ok)).
        let answer = self.router.clone().call(req.map(axum::body::Body::new));
        Box::pin(async move {
            let resp = answer.await?;
            Ok(resp.map(|inner| TrackedBody {
                inner,
                conn,
                since_yield: 0,
            }))
        })
    }
}

/// A connection's task lets the other tasks run after this many bytes of an answer's body.
/// Making a body can cost CPU as it is sent (a plain `/metrics` is inflated frame by frame),
/// and hyper asks for frames until the socket is full: several MiB on loopback, tens of
/// milliseconds of one worker, during which a `/healthz` on another connection would wait.
const YIELD_BYTES: usize = 256 * 1024;

/// An answer's body; its drop (hyper has sent it whole, or gave up) ends the handler's part of
/// the request. Yields the worker every [`YIELD_BYTES`].
pub(super) struct TrackedBody {
    inner: axum::body::Body,
    conn: Arc<Conn>,
    since_yield: usize,
}

impl Drop for TrackedBody {
    fn drop(&mut self) {
        self.conn.body_done.store(true, Ordering::Relaxed);
    }
}

impl http_body::Body for TrackedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        let this = self.get_mut();
        if this.since_yield >= YIELD_BYTES {
            // As tokio's yield_now: woken during its own poll, the task goes to the back of
            // the queue (hyper flushes what it holds meanwhile).
            this.since_yield = 0;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        let frame = Pin::new(&mut this.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(f))) = &frame {
            this.since_yield += f.data_ref().map_or(0, Bytes::len);
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// `inner` (a TLS handshake, then hyper's connection) under the connection's clock: ends with
/// `Err(reason)` when the current phase passes its deadline or the registry kills it.
pub(super) struct Watched<F> {
    inner: Pin<Box<F>>,
    conn: Arc<Conn>,
    limits: ListenerLimits,
    sleep: Pin<Box<Sleep>>,
    armed: Instant,
}

impl<F: Future> Watched<F> {
    pub(super) fn new(inner: F, conn: Arc<Conn>, limits: ListenerLimits) -> Watched<F> {
        let (deadline, _) = conn.deadline(&limits);
        Watched {
            inner: Box::pin(inner),
            conn,
            limits,
            sleep: Box::pin(tokio::time::sleep_until(deadline)),
            armed: deadline,
        }
    }

    pub(super) fn inner(&mut self) -> Pin<&mut F> {
        self.inner.as_mut()
    }
}

impl<F: Future> Future for Watched<F> {
    type Output = Result<F::Output, Shed>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        this.conn.waker.register(cx.waker());
        if this.conn.is_killed() {
            return Poll::Ready(Err(Shed::Evicted));
        }
        if let Poll::Ready(out) = this.inner.as_mut().poll(cx) {
            return Poll::Ready(Ok(out));
        }
        this.conn.settle();
        loop {
            let (deadline, reason) = this.conn.deadline(&this.limits);
            if Instant::now() >= deadline {
                return Poll::Ready(Err(reason));
            }
            if deadline != this.armed {
                this.sleep.as_mut().reset(deadline);
                this.armed = deadline;
            }
            if this.sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> ListenerLimits {
        ListenerLimits {
            header_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(300),
            write_timeout: Duration::from_secs(60),
            max_connections: 10,
            max_header_bytes: 16 * 1024,
            max_request_line_bytes: 32,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn each_phase_runs_its_own_clock() {
        let l = limits();
        let c = Conn::new(Instant::now());
        let t0 = Instant::now();
        assert_eq!(c.deadline(&l), (t0 + l.header_timeout, Shed::HeaderTimeout));
        tokio::time::advance(Duration::from_secs(2)).await;
        c.head_started();
        assert_eq!(c.phase(), Phase::Head);
        assert_eq!(
            c.deadline(&l).0,
            t0 + l.header_timeout,
            "the first request's head counts from the accept"
        );
        c.request_read();
        let t1 = Instant::now();
        assert_eq!(c.deadline(&l), (t1 + l.write_timeout, Shed::WriteTimeout));
        c.settle();
        assert_eq!(c.phase(), Phase::Busy, "the body is not sent yet");
        c.body_done.store(true, Ordering::Relaxed);
        c.write_blocked.store(true, Ordering::Relaxed);
        c.settle();
        assert_eq!(c.phase(), Phase::Busy, "the last write did not go through");
        c.write_blocked.store(false, Ordering::Relaxed);
        tokio::time::advance(Duration::from_secs(1)).await;
        c.settle();
        let t2 = Instant::now();
        assert_eq!(c.phase(), Phase::Waiting);
        assert_eq!(c.deadline(&l), (t2 + l.idle_timeout, Shed::IdleTimeout));
        assert_eq!(c.waiting_since_ms(), 3000);
        tokio::time::advance(Duration::from_secs(7)).await;
        c.head_started();
        assert_eq!(
            c.deadline(&l),
            (Instant::now() + l.header_timeout, Shed::HeaderTimeout),
            "a later request's head counts from its first byte"
        );
    }

    #[test]
    fn a_large_body_yields_its_worker_every_256_kib_and_its_end_is_seen() {
        use http_body::Body as _;
        struct Wakes(std::sync::atomic::AtomicUsize);
        impl std::task::Wake for Wakes {
            fn wake(self: Arc<Self>) {
                self.0.fetch_add(1, Ordering::Relaxed);
            }
        }
        let wakes = Arc::new(Wakes(Default::default()));
        let waker = std::task::Waker::from(wakes.clone());
        let mut cx = Context::from_waker(&waker);
        let frames =
            (0..6).map(|_| Ok::<_, std::convert::Infallible>(Bytes::from(vec![0u8; 128 * 1024])));
        let conn = Arc::new(Conn::new(Instant::now()));
        let mut body = TrackedBody {
            inner: axum::body::Body::from_stream(futures_util::stream::iter(frames)),
            conn: conn.clone(),
            since_yield: 0,
        };
        let mut seen = Vec::new();
        loop {
            match Pin::new(&mut body).poll_frame(&mut cx) {
                Poll::Ready(Some(f)) => seen.push(f.unwrap().into_data().unwrap().len() / 1024),
                Poll::Ready(None) => break,
                Poll::Pending => seen.push(0),
            }
        }
        // A pause at the end too: the body does not know it is done before it is asked.
        assert_eq!(seen, [128, 128, 0, 128, 128, 0, 128, 128, 0]);
        assert_eq!(
            wakes.0.load(Ordering::Relaxed),
            3,
            "each pause wakes the task again"
        );
        assert!(!conn.body_done.load(Ordering::Relaxed));
        drop(body);
        assert!(conn.body_done.load(Ordering::Relaxed));
    }

    #[tokio::test]
    async fn a_long_request_line_is_answered_414_unseen_by_hyper() {
        let (client, server) = tokio::io::duplex(4096);
        let conn = Arc::new(Conn::new(Instant::now()));
        let mut t = Tracked::new(server, conn.clone(), 32);
        let (mut rd, mut wr) = tokio::io::split(client);
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        wr.write_all(b"GET /short HTTP/1.1\r\nHost: x\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 256];
        let n = t.read(&mut buf).await.unwrap();
        assert_eq!(n, 30, "a line within the cap passes whole");
        assert_eq!(conn.phase(), Phase::Head);
        conn.request_read();
        conn.body_done.store(true, Ordering::Relaxed);
        conn.settle();
        wr.write_all(b"GET /").await.unwrap();
        assert_eq!(t.read(&mut buf).await.unwrap(), 5);
        wr.write_all(&[b'a'; 40]).await.unwrap();
        assert_eq!(t.read(&mut buf).await.unwrap(), 0, "hyper reads the end");
        assert!(conn.line_rejected());
        let mut answer = Vec::new();
        rd.read_to_end(&mut answer).await.unwrap();
        assert_eq!(answer, REPLY_414);
    }
}
