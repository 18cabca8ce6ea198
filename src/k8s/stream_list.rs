//! A Kubernetes LIST read as a stream of items: each item is handed over as it arrives, and
//! neither the body nor the decoded list is ever held whole.
//!
//! For the one answer that grows with the cluster and cannot be paged: metrics-server serves
//! the NodeMetrics list whole whatever `limit` says (at 65,000 GKE nodes about 80 MiB). kube's
//! `Api::list` collects the whole body, copies it and decodes every item before the first can be
//! used, and on a decode error logs the entire body; this reader splits the body into items with
//! [`crate::shared::json_items`] as the frames arrive. `--max-response-bytes` caps each item
//! here (as it caps each event of a watch), not the answer: the request carries
//! [`CappedPerItem`], which the client's byte-cap layer reads.
//!
//! An implementation that does page (`continue` in the list's metadata) is followed page by
//! page. A failed request (429, 5xx, a transport error) is tried again, with back-off, only
//! before any item of the page was handed over.

use std::pin::pin;
use std::time::Duration;

use http_body::Body as _;
use kube::api::ListParams;
use serde::Deserialize;

use crate::shared::error::{Cause, Error};
use crate::shared::json_items::{ItemSplitter, Piece, SplitError};
use crate::shared::limit::CappedPerItem;

/// The NodeMetrics list (metrics.k8s.io), which metrics-server answers whole.
pub const NODE_METRICS_PATH: &str = "/apis/metrics.k8s.io/v1beta1/nodes";
/// The core Node list, which the API server pages.
pub const NODES_PATH: &str = "/api/v1/nodes";

/// Retries of a failed request, from [`BACKOFF`], doubling.
const RETRIES: u32 = 2;
const BACKOFF: Duration = Duration::from_millis(200);
/// The list outside its items (`kind`, `apiVersion`, `metadata`): a few hundred bytes.
const ENVELOPE_BYTES: usize = 64 << 10;
/// How much of an error answer is read for its `Status`.
const STATUS_BYTES: usize = 64 << 10;

/// Why a streamed LIST failed.
#[derive(Debug)]
pub enum ListError {
    /// The request failed, or the answer broke off after `items` items (a status, a transport
    /// error, the client's byte cap): kube's error, for the caller to classify.
    Kube { error: kube::Error, items: u64 },
    /// The answer is not a list: where and why (the splitter's or serde_json's error), never
    /// quoting it.
    Parse(Cause),
}

impl ListError {
    /// As the library's error, with `what` naming the request.
    pub fn into_error(self, what: &str) -> Error {
        match self {
            ListError::Kube { error, items: 0 } => crate::k8s::client::kube_error(what, error),
            ListError::Kube { error, items } => match crate::k8s::client::kube_error(what, error) {
                Error::Http { what, source } => Error::http(
                    what,
                    Cause::context(format!("after {items} items had been read"), source),
                ),
                other => other,
            },
            ListError::Parse(cause) => Error::parse(what, cause),
        }
    }
}

/// A page that is not JSON of a list's shape, after `items` items of the list.
#[derive(Debug, thiserror::Error)]
#[error("{source} (after {items} items)")]
pub struct BadPage {
    #[source]
    pub source: SplitError,
    pub items: u64,
}

/// What a streamed LIST went through.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Listed {
    pub pages: u32,
    pub items: u64,
    pub bytes: u64,
}

#[derive(Deserialize)]
struct Envelope {
    #[serde(default)]
    metadata: EnvelopeMeta,
}

#[derive(Deserialize, Default)]
struct EnvelopeMeta {
    #[serde(default, rename = "continue")]
    continue_: Option<String>,
}

/// How much of a list to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reading {
    /// Items over this many bytes come as [`Piece::Oversized`].
    pub max_item: usize,
    /// Stop (and drop the connection) once this many items were handed over: a probe that
    /// only asks whether there is one. `None`: every item.
    pub stop_after: Option<u64>,
    /// Items per page asked for (`limit`); metrics-server ignores it and answers whole.
    pub page: Option<u32>,
}

/// Every item of the LIST at `url_path` (e.g. `/apis/metrics.k8s.io/v1beta1/nodes`), page by
/// page, handed to `each` as it arrives. On an error, the items handed over before it stay
/// handed over.
pub async fn list_items(
    client: &kube::Client,
    url_path: &str,
    reading: Reading,
    each: &mut (dyn FnMut(Piece<'_>) + Send),
) -> Result<Listed, ListError> {
    let mut listed = Listed::default();
    let mut token: Option<String> = None;
    loop {
        let mut params = ListParams::default();
        if let Some(limit) = reading.page {
            params = params.limit(limit);
        }
        if let Some(t) = &token {
            params = params.continue_token(t);
        }
        let body = send(client, url_path, &params)
            .await
            .map_err(|error| ListError::Kube {
                error,
                items: listed.items,
            })?;
        let wanted = reading.stop_after.map(|n| n.saturating_sub(listed.items));
        let (next, items, bytes) =
            read_page(body, reading.max_item, wanted, listed.items, each).await?;
        listed.pages += 1;
        listed.items += items;
        listed.bytes += bytes;
        if reading.stop_after.is_some_and(|n| listed.items >= n) {
            return Ok(listed);
        }
        match next.filter(|c| !c.is_empty()) {
            Some(t) => token = Some(t),
            None => return Ok(listed),
        }
    }
}

/// The answer's body once its status is 2xx, retrying transient failures.
async fn send(
    client: &kube::Client,
    url_path: &str,
    params: &ListParams,
) -> Result<kube::client::Body, kube::Error> {
    let mut pause = BACKOFF;
    let mut tries = 0;
    loop {
        let err = match try_send(client, url_path, params).await {
            Ok(body) => return Ok(body),
            Err(e) => e,
        };
        if tries >= RETRIES || !transient(&err) {
            return Err(err);
        }
        tries += 1;
        tracing::debug!(url_path, error = %err, tries, "LIST failed; retrying");
        tokio::time::sleep(pause).await;
        pause *= 2;
    }
}

async fn try_send(
    client: &kube::Client,
    url_path: &str,
    params: &ListParams,
) -> Result<kube::client::Body, kube::Error> {
    let mut req = kube::core::Request::new(url_path)
        .list(params)
        .map_err(kube::Error::BuildRequest)?
        .map(kube::client::Body::from);
    req.extensions_mut().insert(CappedPerItem);
    let resp = client.send(req).await?;
    let status = resp.status();
    if status.is_success() {
        return Ok(resp.into_body());
    }
    // As kube's own requests read an error answer: its `Status`, or its text under the
    // reason kube gives it, so that a failure reads the same through either path.
    let body = read_head(resp.into_body(), STATUS_BYTES).await;
    let status = match serde_json::from_slice::<kube::core::Status>(&body) {
        Ok(mut s) => {
            if s.code == 0 {
                s.code = status.as_u16();
            }
            s
        }
        Err(_) => kube::core::Status::failure(
            String::from_utf8_lossy(&body).trim(),
            "Failed to parse error data",
        )
        .with_code(status.as_u16()),
    };
    Err(kube::Error::Api(status.boxed()))
}

/// Whether a failed request is worth another try: 429, 5xx or a transport error, never an
/// answer past the byte cap (it would only be read again).
fn transient(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => s.code == 429 || s.code >= 500,
        kube::Error::HyperError(_) => true,
        kube::Error::Service(_) => crate::shared::limit::find_too_large(e).is_none(),
        _ => false,
    }
}

/// At most `limit` bytes of `body` (an error answer's `Status`); a read error ends it.
async fn read_head(body: kube::client::Body, limit: usize) -> Vec<u8> {
    let mut body = pin!(body);
    let mut out = Vec::new();
    while out.len() < limit {
        match std::future::poll_fn(|cx| body.as_mut().poll_frame(cx)).await {
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    let take = data.len().min(limit - out.len());
                    out.extend_from_slice(&data[..take]);
                }
            }
            Some(Err(_)) | None => break,
        }
    }
    out
}

/// One page's items to `each` as its frames arrive, until `wanted` items (if given): the
/// `continue` token, the items and the bytes read.
async fn read_page(
    body: kube::client::Body,
    max_item: usize,
    wanted: Option<u64>,
    before: u64,
    each: &mut (dyn FnMut(Piece<'_>) + Send),
) -> Result<(Option<String>, u64, u64), ListError> {
    let mut body = pin!(body);
    let mut splitter = ItemSplitter::new(&["items"], max_item, ENVELOPE_BYTES);
    let parse = |source, items| ListError::Parse(Cause::other(BadPage { source, items }));
    while let Some(frame) = std::future::poll_fn(|cx| body.as_mut().poll_frame(cx)).await {
        let frame = match frame {
            Ok(f) => f,
            Err(error) => {
                return Err(ListError::Kube {
                    error,
                    items: before + splitter.items(),
                });
            }
        };
        if let Ok(data) = frame.into_data() {
            splitter
                .feed(&data, &mut *each)
                .map_err(|e| parse(e, splitter.items()))?;
            if wanted.is_some_and(|n| splitter.items() >= n) {
                return Ok((None, splitter.items(), splitter.offset()));
            }
        }
    }
    let (items, bytes) = (splitter.items(), splitter.offset());
    let envelope = splitter.finish().map_err(|e| parse(e, items))?;
    let envelope: Envelope = serde_json::from_slice(&envelope).map_err(|e| {
        ListError::Parse(Cause::context("the list's own fields (not its items)", e))
    })?;
    Ok((envelope.metadata.continue_, items, bytes))
}
