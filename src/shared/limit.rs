//! Byte caps on everything read from outside the process (`--max-response-bytes`).
//!
//! - Kubernetes client: [`BodyCapLayer`] wraps every response body the kube client reads
//!   (LISTs, GETs, `/readyz`, metrics.k8s.io, error bodies) in a [`CappedBody`] that fails
//!   with [`TooLarge`] once more than the cap has arrived, or at once when `Content-Length`
//!   already says so. kube collects a whole body before parsing it (`Client::request_text`),
//!   so without the cap one answer is held in memory several times over.
//! - Streamed lists (the NodeMetrics list, which metrics-server answers whole): a request
//!   carrying [`CappedPerItem`] is read item by item by `crate::k8s::stream_list`, which caps
//!   each item; the body as a whole is not capped here.
//! - Watch streams (`?watch=true`) live for minutes and carry any number of events, so a cap
//!   on their total would cut every healthy watch. What can grow without bound there is one
//!   event: kube splits the stream into lines with no line limit. A watch body is therefore
//!   capped per line (one event) instead of in total.
//! - reqwest answers (HTTP backends, HTTP probes): [`read_capped`].
//!
//! The failure is always recognisable ([`find_too_large`]) so sources count it as
//! `too_large` and probes fail with reason `too_large`.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};

/// The error type of capped bodies (tower's `BoxError`).
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The default cap: 32 MiB.
///
/// It fits a 500-object LIST page of Nodes or Pods at up to 64 KiB per object, and a
/// Prometheus answer of one series per node at 130,000 nodes with kube-prometheus' seven
/// target labels (about 250 bytes a series; docs/reliability.md). The one answer that grows
/// without a page is the metrics.k8s.io NodeMetrics list, which metrics-server serves in one
/// piece whatever `limit` says (about 1.3 KB a node with GKE's labels: 80 MiB at 65,000
/// nodes): it is read as a stream of items, and the cap bounds each item instead
/// ([`CappedPerItem`]). A body at the cap costs a few times its size in memory while it is
/// parsed.
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 32 << 20;

/// A response (or one watch event) was larger than the cap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TooLarge {
    pub limit: usize,
    /// `response body` or `watch event`.
    pub what: &'static str,
}

impl std::fmt::Display for TooLarge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} larger than the {}-byte limit (--max-response-bytes)",
            self.what, self.limit
        )
    }
}

impl std::error::Error for TooLarge {}

/// The [`TooLarge`] somewhere in `e`'s chain, looking inside `io::Error`s and kube's
/// `Service` errors (which do not expose their payload as a `source`).
pub fn find_too_large<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a TooLarge> {
    let mut cur: Option<&'a (dyn std::error::Error + 'static)> = Some(e);
    let mut depth = 0;
    while let Some(err) = cur {
        depth += 1;
        if depth > 16 {
            return None;
        }
        if let Some(t) = err.downcast_ref::<TooLarge>() {
            return Some(t);
        }
        if let Some(inner) = err
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
        {
            let inner: &(dyn std::error::Error + 'static) = inner;
            if let Some(t) = find_too_large(inner) {
                return Some(t);
            }
        }
        if let Some(kube::Error::Service(inner)) = err.downcast_ref::<kube::Error>() {
            let inner: &(dyn std::error::Error + 'static) = inner.as_ref();
            if let Some(t) = find_too_large(inner) {
                return Some(t);
            }
        }
        if let Some(kube::Error::ReadEvents(io)) = err.downcast_ref::<kube::Error>()
            && let Some(t) = find_too_large(io)
        {
            return Some(t);
        }
        cur = err.source();
    }
    None
}

/// How a body is capped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cap {
    /// The whole body.
    Total(usize),
    /// Each newline-terminated line (one watch event).
    PerLine(usize),
    /// Not here: the reader caps each item of the list it streams ([`CappedPerItem`]).
    PerItem,
}

/// A request extension for the kube client: the answer is a list that its reader splits into
/// items as it arrives and caps item by item (`crate::k8s::stream_list`), so [`BodyCapLayer`]
/// leaves the body as a whole uncapped. Without it, every answer but a watch is capped whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CappedPerItem;

/// A body that fails with [`TooLarge`] past its cap.
pub struct CappedBody<B> {
    inner: Pin<Box<B>>,
    cap: Cap,
    /// Bytes so far (whole body), or since the last newline (per line).
    seen: usize,
    /// Failed already (e.g. by `Content-Length`): the next poll reports it, then the end.
    failed: Option<TooLarge>,
    done: bool,
}

impl<B> CappedBody<B> {
    pub fn new(inner: B, cap: Cap) -> Self {
        CappedBody {
            inner: Box::pin(inner),
            cap,
            seen: 0,
            failed: None,
            done: false,
        }
    }

    fn too_large(&self) -> TooLarge {
        match self.cap {
            Cap::Total(limit) => TooLarge {
                limit,
                what: "response body",
            },
            Cap::PerLine(limit) => TooLarge {
                limit,
                what: "watch event",
            },
            Cap::PerItem => TooLarge {
                limit: usize::MAX,
                what: "list item",
            },
        }
    }

    /// Counts `data`; false when it goes past the cap.
    fn account(&mut self, data: &[u8]) -> bool {
        match self.cap {
            Cap::Total(limit) => {
                self.seen = self.seen.saturating_add(data.len());
                self.seen <= limit
            }
            Cap::PerLine(limit) => {
                // memchr: the watch streams pass every byte through here.
                let mut start = 0;
                for nl in memchr::memchr_iter(b'\n', data) {
                    if self.seen.saturating_add(nl - start) > limit {
                        return false;
                    }
                    self.seen = 0;
                    start = nl + 1;
                }
                self.seen = self.seen.saturating_add(data.len() - start);
                self.seen <= limit
            }
            Cap::PerItem => true,
        }
    }
}

impl<B> Body for CappedBody<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        if self.done {
            return Poll::Ready(None);
        }
        if let Some(e) = self.failed.take() {
            self.done = true;
            return Poll::Ready(Some(Err(Box::new(e))));
        }
        match ready!(self.inner.as_mut().poll_frame(cx)) {
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref()
                    && !self.account(data)
                {
                    // Stop reading: the inner body (and its connection) is dropped with us.
                    self.done = true;
                    return Poll::Ready(Some(Err(Box::new(self.too_large()))));
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Some(Err(e)) => Poll::Ready(Some(Err(e.into()))),
            None => {
                self.done = true;
                Poll::Ready(None)
            }
        }
    }

    fn size_hint(&self) -> SizeHint {
        if self.done || self.failed.is_some() {
            return SizeHint::default();
        }
        self.inner.size_hint()
    }

    fn is_end_stream(&self) -> bool {
        self.done || (self.failed.is_none() && self.inner.is_end_stream())
    }
}

/// A tower layer for the kube client: caps every response body it reads.
#[derive(Debug, Clone, Copy)]
pub struct BodyCapLayer {
    pub limit: usize,
}

impl<S> tower_layer::Layer<S> for BodyCapLayer {
    type Service = BodyCap<S>;
    fn layer(&self, inner: S) -> BodyCap<S> {
        BodyCap {
            inner,
            limit: self.limit,
        }
    }
}

/// See [`BodyCapLayer`].
#[derive(Debug, Clone)]
pub struct BodyCap<S> {
    inner: S,
    limit: usize,
}

/// Whether a request URI is a watch (`watch=true` or `watch=1` in the query).
pub fn is_watch(uri: &http::Uri) -> bool {
    uri.query().is_some_and(|q| {
        q.split('&')
            .any(|kv| matches!(kv, "watch=true" | "watch=1" | "watch=True"))
    })
}

impl<S, ReqBody, ResBody> tower_service::Service<http::Request<ReqBody>> for BodyCap<S>
where
    S: tower_service::Service<http::Request<ReqBody>, Response = http::Response<ResBody>>,
    ResBody: Body<Data = Bytes>,
    ResBody::Error: Into<BoxError>,
{
    type Response = http::Response<CappedBody<ResBody>>;
    type Error = S::Error;
    type Future = CapFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<ReqBody>) -> Self::Future {
        let cap = if req.extensions().get::<CappedPerItem>().is_some() {
            Cap::PerItem
        } else if is_watch(req.uri()) {
            Cap::PerLine(self.limit)
        } else {
            Cap::Total(self.limit)
        };
        CapFuture {
            inner: Box::pin(self.inner.call(req)),
            cap,
        }
    }
}

/// The response future of [`BodyCap`].
pub struct CapFuture<F> {
    inner: Pin<Box<F>>,
    cap: Cap,
}

impl<F, ResBody, E> Future for CapFuture<F>
where
    F: Future<Output = Result<http::Response<ResBody>, E>>,
{
    type Output = Result<http::Response<CappedBody<ResBody>>, E>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let cap = self.cap;
        let res = ready!(self.inner.as_mut().poll(cx))?;
        let declared = content_length(res.headers());
        Poll::Ready(Ok(res.map(|b| {
            let mut body = CappedBody::new(b, cap);
            if let (Cap::Total(limit), Some(n)) = (cap, declared)
                && n > limit as u64
            {
                body.failed = Some(body.too_large());
            }
            body
        })))
    }
}

fn content_length(headers: &http::HeaderMap) -> Option<u64> {
    headers
        .get(http::header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Why [`read_capped`] failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{0}")]
    TooLarge(#[source] TooLarge),
    #[error("reading the body: {0}")]
    Read(#[source] reqwest::Error),
}

/// The whole body of `resp`, at most `limit` bytes (refused early on a larger
/// `Content-Length`, else as soon as more has arrived).
pub async fn read_capped(mut resp: reqwest::Response, limit: usize) -> Result<Bytes, ReadError> {
    let too_large = || {
        ReadError::TooLarge(TooLarge {
            limit,
            what: "response body",
        })
    };
    if resp.content_length().is_some_and(|n| n > limit as u64) {
        return Err(too_large());
    }
    let mut body = BytesMut::new();
    while let Some(chunk) = resp.chunk().await.map_err(ReadError::Read)? {
        if body.len() + chunk.len() > limit {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body.freeze())
}

/// `--max-response-bytes`: the cap on every answer read from outside.
#[derive(Debug, Clone, Default, PartialEq, clap::Args, serde::Deserialize)]
#[serde(default)]
pub struct LimitOptions {
    /// Largest answer read from outside (Kubernetes API incl. metrics.k8s.io, HTTP backends,
    /// probe targets), in bytes or as a quantity (32Mi); one event for watch streams, one node's
    /// item for the NodeMetrics list (read as a stream, any size). A larger answer is a
    /// `too_large` error; a larger NodeMetrics item a counted skip. [default: 32Mi]
    #[arg(long, env = "KUBE_PROBER_MAX_RESPONSE_BYTES", value_name = "BYTES")]
    pub max_response_bytes: Option<String>,
}

crate::merge_options!(LimitOptions { max_response_bytes });

/// The caps [`LimitOptions`] resolve into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitConfig {
    /// `--max-response-bytes`: the most bytes read of one answer from outside.
    pub max_response_bytes: usize,
}

impl Default for LimitConfig {
    fn default() -> Self {
        LimitConfig {
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
        }
    }
}

impl LimitOptions {
    /// The caps, checked.
    pub fn resolve(self) -> Result<LimitConfig, crate::shared::error::Error> {
        Ok(LimitConfig {
            max_response_bytes: self.max_response_bytes()?,
        })
    }

    /// `--max-response-bytes`: bytes or a quantity (`32Mi`), 64 KiB to 4 GiB.
    fn max_response_bytes(self) -> Result<usize, crate::shared::error::Error> {
        crate::shared::options::bytes(
            "--max-response-bytes",
            self.max_response_bytes,
            DEFAULT_MAX_RESPONSE_BYTES,
            (64 * 1024, 4 * 1024 * 1024 * 1024),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    fn chunks(
        parts: &[&'static [u8]],
    ) -> impl Body<Data = Bytes, Error = std::convert::Infallible> {
        let frames: Vec<Result<Frame<Bytes>, std::convert::Infallible>> = parts
            .iter()
            .map(|p| Ok(Frame::data(Bytes::from_static(p))))
            .collect();
        http_body_util::StreamBody::new(futures_util::stream::iter(frames))
    }

    async fn collect<B: Body<Data = Bytes, Error = BoxError>>(b: B) -> Result<Bytes, BoxError> {
        Ok(b.collect().await?.to_bytes())
    }

    #[tokio::test]
    async fn a_total_cap_passes_up_to_the_limit_and_fails_past_it() {
        let ok = CappedBody::new(chunks(&[b"12345", b"678"]), Cap::Total(8));
        assert_eq!(collect(ok).await.unwrap(), Bytes::from_static(b"12345678"));
        let big = CappedBody::new(chunks(&[b"12345", b"6789"]), Cap::Total(8));
        let e = collect(big).await.unwrap_err();
        let t = find_too_large(e.as_ref()).unwrap();
        assert_eq!(t.limit, 8);
        assert_eq!(t.what, "response body");
    }

    #[tokio::test]
    async fn a_line_cap_lets_a_long_stream_of_short_lines_through() {
        let parts: Vec<&'static [u8]> = [&b"abc\nde"[..], &b"f\nghi\n"[..]].repeat(100);
        let ok = CappedBody::new(chunks(&parts), Cap::PerLine(4));
        assert_eq!(collect(ok).await.unwrap().len(), 1200);
        let long = CappedBody::new(chunks(&[b"abc\nde", b"fgh\n"]), Cap::PerLine(4));
        let e = collect(long).await.unwrap_err();
        assert_eq!(find_too_large(e.as_ref()).unwrap().what, "watch event");
    }

    #[test]
    fn a_line_cap_counts_each_line_across_chunks() {
        let fits = |parts: &[&[u8]]| {
            let mut b = CappedBody::new(chunks(&[]), Cap::PerLine(4));
            parts.iter().all(|c| b.account(c))
        };
        assert!(fits(&[b"abcd\n", b"abcd"]));
        assert!(fits(&[b"ab", b"cd\nabcd\n", b"\n\n", b"abcd"]));
        assert!(fits(&[b"abcd", b"\n"]));
        assert!(!fits(&[b"abcde\n"]));
        assert!(!fits(&[b"abcd", b"e\n"]));
        assert!(!fits(&[b"ab\nabcd", b"e"]));
        assert!(!fits(&[b"ab\nabcde\nab\n"]));
    }

    #[test]
    fn watches_are_told_apart() {
        let u = |s: &str| s.parse::<http::Uri>().unwrap();
        assert!(is_watch(&u("/api/v1/nodes?watch=true&resourceVersion=5")));
        assert!(is_watch(&u(
            "/api/v1/pods?allowWatchBookmarks=true&watch=1"
        )));
        assert!(!is_watch(&u("/api/v1/nodes?limit=500")));
        assert!(!is_watch(&u("/readyz")));
    }

    #[test]
    fn found_inside_kube_and_io_errors() {
        let t = TooLarge {
            limit: 1,
            what: "response body",
        };
        let k = kube::Error::Service(Box::new(t.clone()));
        assert_eq!(find_too_large(&k), Some(&t));
        let io = std::io::Error::other(kube::Error::Service(Box::new(t.clone())));
        let k = kube::Error::ReadEvents(io);
        assert_eq!(find_too_large(&k), Some(&t));
        let other = kube::Error::Service("refused".into());
        assert_eq!(find_too_large(&other), None);
    }
}
