//! A rendered body as shared pieces: each [`Chunk`] holds its text and, made on the first gzip
//! request, the same text as raw deflate ending in a full flush, so a gzip answer is joined from
//! pieces compressed once and most pieces are shared with the previous tick's body.

use std::sync::{Arc, OnceLock};

use bytes::Bytes;

/// One piece of a body: its bytes, and the same bytes as raw deflate ending in a full flush,
/// made on the first gzip request, so a gzip stream can be joined from pieces compressed once.
/// The rows of a block of nodes are held compressed only ([`Chunk::compressed`]).
#[derive(Debug)]
pub struct Chunk {
    /// The text; `None` for a chunk held compressed only.
    plain: Option<Bytes>,
    deflated: OnceLock<(Bytes, flate2::Crc)>,
}

impl Chunk {
    /// A chunk of `plain`; its unused capacity is given back first (`Bytes` keeps a `String`'s
    /// whole allocation).
    pub fn new(plain: impl Into<Vec<u8>>) -> Arc<Chunk> {
        let mut plain: Vec<u8> = plain.into();
        if plain.capacity() - plain.len() > plain.len() / 16 {
            plain.shrink_to_fit();
        }
        Arc::new(Chunk {
            plain: Some(Bytes::from(plain)),
            deflated: OnceLock::new(),
        })
    }

    /// A chunk of `text` held only as its raw deflate (about a tenth of it), made now: the rows
    /// of a block of nodes, which at 65,000 nodes (a shard of them) or at 5,000 unsharded are
    /// tens of megabytes of text, written again only when one of the block's nodes changes.
    /// Prometheus asks for gzip, which then copies nothing; a plain answer inflates the chunk
    /// as it is sent ([`Body::into_plain`]).
    pub fn compressed(text: &[u8]) -> Arc<Chunk> {
        Self::compressed_with(
            &mut flate2::Compress::new(flate2::Compression::fast(), false),
            text,
        )
    }

    /// As [`Chunk::compressed`], with `c` (reset first, so the piece stands alone; reused by
    /// the caller to spare a compressor's set-up per chunk).
    pub fn compressed_with(c: &mut flate2::Compress, text: &[u8]) -> Arc<Chunk> {
        let mut crc = flate2::Crc::new();
        crc.update(text);
        c.reset();
        let mut out = Vec::with_capacity(text.len() / 4 + 64);
        if !deflate_flushed_into(c, text, &mut out) {
            // Not seen with a reset stream: the text is kept rather than lost.
            return Chunk::new(text.to_vec());
        }
        out.shrink_to_fit();
        Arc::new(Chunk {
            plain: None,
            deflated: OnceLock::from((Bytes::from(out), crc)),
        })
    }

    /// Length of the text.
    pub fn len(&self) -> usize {
        match (&self.plain, self.deflated.get()) {
            (Some(p), _) => p.len(),
            (None, Some((_, crc))) => crc.amount() as usize,
            (None, None) => 0,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The text: the bytes held (a reference count) or, for a compressed chunk, inflated now.
    /// An error is a compressed chunk that does not inflate (not seen: the bytes are our own).
    pub fn try_text(&self) -> std::io::Result<Bytes> {
        match (&self.plain, self.deflated.get()) {
            (Some(p), _) => Ok(p.clone()),
            (None, Some((deflated, crc))) => {
                inflate_flushed(deflated, crc.amount() as usize).map(Bytes::from)
            }
            (None, None) => Ok(Bytes::new()),
        }
    }

    /// [`Chunk::try_text`], empty (and logged) when the chunk does not inflate.
    pub fn text(&self) -> Bytes {
        self.try_text().unwrap_or_else(|e| {
            tracing::error!(error = %e, "a compressed chunk did not inflate");
            Bytes::new()
        })
    }

    /// Whether the compressed form is made.
    pub fn is_deflated(&self) -> bool {
        self.deflated.get().is_some()
    }

    /// The compressed form (raw deflate ending in a full flush) if it is made; makes nothing.
    pub fn deflated_form(&self) -> Option<&Bytes> {
        self.deflated.get().map(|(d, _)| d)
    }

    /// Whether the chunk holds its text (not only its compressed form).
    pub fn holds_text(&self) -> bool {
        self.plain.is_some()
    }

    /// The text held, for chunks made by [`Chunk::new`] (empty for a compressed one).
    pub(crate) fn held(&self) -> &[u8] {
        self.plain.as_deref().unwrap_or_default()
    }

    pub(crate) fn deflated(&self) -> &(Bytes, flate2::Crc) {
        self.deflated.get_or_init(|| {
            let plain = self.held();
            let mut crc = flate2::Crc::new();
            crc.update(plain);
            (Bytes::from(deflate_flushed(plain)), crc)
        })
    }
}

/// Inflates a piece made by [`deflate_flushed`] (raw deflate ending in a full flush, no final
/// block) whose text is `len` bytes.
fn inflate_flushed(deflated: &[u8], len: usize) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    inflate_flushed_into(deflated, len, &mut out)?;
    Ok(out)
}

/// [`inflate_flushed`], appending to `out`; on an error `out` is left as it was.
fn inflate_flushed_into(deflated: &[u8], len: usize, out: &mut Vec<u8>) -> std::io::Result<()> {
    let start = out.len();
    let end = start.saturating_add(len);
    out.reserve(len);
    let mut d = flate2::Decompress::new(false);
    let mut result = Ok(());
    while out.len() < end {
        let from = usize::try_from(d.total_in())
            .unwrap_or(usize::MAX)
            .min(deflated.len());
        let before = (d.total_in(), out.len());
        if let Err(e) = d.decompress_vec(&deflated[from..], out, flate2::FlushDecompress::Sync) {
            result = Err(std::io::Error::other(e));
            break;
        }
        if (d.total_in(), out.len()) == before {
            break;
        }
    }
    if result.is_ok() && out.len() != end {
        result = Err(std::io::Error::other(format!(
            "a compressed piece inflated to {} bytes, not {len}",
            out.len() - start
        )));
    }
    if result.is_err() {
        out.truncate(start);
    }
    result
}

/// Raw deflate of `data`, ending in a full flush: byte-aligned, no final block and no back
/// references into it, so such pieces can follow one another in one deflate stream.
pub(crate) fn deflate_flushed(data: &[u8]) -> Vec<u8> {
    let mut c = flate2::Compress::new(flate2::Compression::fast(), false);
    let mut out = Vec::with_capacity(data.len() / 4 + 64);
    if !deflate_flushed_into(&mut c, data, &mut out) {
        // Cannot happen with a fresh stream and a flush; an empty piece keeps the stream valid.
        return Vec::new();
    }
    // Held for as long as the chunk is: the spare room of the guess above (up to half of it
    // after a doubling) would otherwise stay with it.
    out.shrink_to_fit();
    out
}

/// Appends the raw deflate of `data`, ending in a full flush, to `out`, with `c` (a stream
/// that is new or reset, so the piece stands alone; reused to spare its allocation). False
/// when the compressor failed (not seen with a new or reset stream).
fn deflate_flushed_into(c: &mut flate2::Compress, data: &[u8], out: &mut Vec<u8>) -> bool {
    let start = c.total_in();
    let consumed = |c: &flate2::Compress| usize::try_from(c.total_in() - start).ok();
    loop {
        if out.capacity() - out.len() < 64 {
            out.reserve(out.capacity().max(1024));
        }
        let from = consumed(c).unwrap_or(data.len()).min(data.len());
        if c.compress_vec(&data[from..], out, flate2::FlushCompress::Full)
            .is_err()
        {
            return false;
        }
        let done = consumed(c).is_some_and(|n| n >= data.len());
        // The flush is complete once it leaves room in `out`.
        if done && out.len() < out.capacity() {
            return true;
        }
    }
}

/// A body as chunks, in order; most are shared with the previous tick's body.
#[derive(Debug, Clone, Default)]
pub struct Body {
    pub chunks: Vec<Arc<Chunk>>,
}

impl Body {
    /// Total bytes.
    pub fn len(&self) -> usize {
        self.chunks.iter().map(|c| c.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.chunks.iter().all(|c| c.is_empty())
    }

    /// The chunks' text in frames of about [`FRAME_BYTES`], each made when it is asked for:
    /// chunks held compressed are inflated then, straight into the frame, and small chunks
    /// are copied into it; a held chunk of a frame's size or more is passed on as a reference
    /// count. A plain answer so never holds the whole text at once.
    pub fn into_plain(self) -> impl Iterator<Item = Bytes> + Send + 'static {
        let mut chunks = self.chunks.into_iter();
        let mut pending: Option<Bytes> = None;
        std::iter::from_fn(move || {
            if let Some(p) = pending.take() {
                return Some(p);
            }
            let mut frame: Vec<u8> = Vec::new();
            for c in chunks.by_ref() {
                match (&c.plain, c.deflated.get()) {
                    (Some(text), _) if text.len() >= FRAME_BYTES => {
                        if frame.is_empty() {
                            return Some(text.clone());
                        }
                        pending = Some(text.clone());
                        return Some(Bytes::from(frame));
                    }
                    (Some(text), _) => frame.extend_from_slice(text),
                    (None, Some((deflated, crc))) => {
                        if frame.capacity() == 0 {
                            frame.reserve(FRAME_BYTES + FRAME_BYTES / 4);
                        }
                        if let Err(e) =
                            inflate_flushed_into(deflated, crc.amount() as usize, &mut frame)
                        {
                            tracing::error!(error = %e, "a compressed chunk did not inflate");
                        }
                    }
                    (None, None) => {}
                }
                if frame.len() >= FRAME_BYTES {
                    break;
                }
            }
            (!frame.is_empty()).then(|| Bytes::from(frame))
        })
    }

    /// Whether every chunk's compressed form is made (a gzip answer then copies nothing).
    pub fn is_deflated(&self) -> bool {
        self.chunks.iter().all(|c| c.is_deflated())
    }

    /// This body followed by `extra` (made per request) as one gzip stream in frames of
    /// about [`FRAME_BYTES`]: the chunks' compressed forms (made on first use, then shared;
    /// small ones copied into a frame, one of a frame's size passed on as a reference count),
    /// `extra` compressed now, an empty final block and the trailer.
    pub fn gzip(&self, extra: &[Bytes]) -> Vec<Bytes> {
        let mut frames = Frames::default();
        self.gzip_pieces(extra, |p| frames.push(p));
        frames.finish()
    }

    /// [`Body::gzip`] as one piece, copied once into a buffer of its exact size (for a body
    /// held whole, such as `/watcher`'s of a tick).
    pub fn gzip_whole(&self, extra: &[Bytes]) -> Bytes {
        let mut pieces = Vec::with_capacity(self.chunks.len() + extra.len() + 2);
        self.gzip_pieces(extra, |p| pieces.push(p.clone()));
        Bytes::from(pieces.concat())
    }

    /// The pieces of the gzip stream of [`Body::gzip`], in order, each handed to `push`.
    fn gzip_pieces(&self, extra: &[Bytes], mut push: impl FnMut(&Bytes)) {
        const HEADER: [u8; 10] = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];
        push(&Bytes::from_static(&HEADER));
        let mut crc = flate2::Crc::new();
        for c in &self.chunks {
            let (d, c_crc) = c.deflated();
            crc.combine(c_crc);
            push(d);
        }
        for e in extra {
            crc.update(e);
            push(&Bytes::from(deflate_flushed(e)));
        }
        // An empty final block with fixed codes (BFINAL=1, BTYPE=01, end of block).
        let mut tail = vec![0x03, 0x00];
        tail.extend_from_slice(&crc.sum().to_le_bytes());
        tail.extend_from_slice(&crc.amount().to_le_bytes());
        push(&Bytes::from(tail));
    }
}

/// Pieces of an answer are sent in frames of about this size. A `/metrics` answer is a few
/// thousand chunks at 65,000 nodes (a shard of 10), one family's rows of a block of nodes
/// each, about 1.4 KB compressed; a client that hands every HTTP frame from its connection
/// task to its reader (hyper's, under reqwest) pays a wake-up per frame, and one frame per
/// chunk cost it ~130 ms a scrape (docs/benchmarks.md, "The shard scrape at 65,000 nodes").
pub const FRAME_BYTES: usize = 128 * 1024;

/// Pieces joined into frames of at least [`FRAME_BYTES`] (the last may be shorter): small
/// pieces are copied, a piece of a frame's size or more is kept as it is.
#[derive(Debug, Default)]
struct Frames {
    out: Vec<Bytes>,
    frame: Vec<u8>,
}

impl Frames {
    fn push(&mut self, piece: &Bytes) {
        if piece.len() >= FRAME_BYTES {
            self.flush();
            self.out.push(piece.clone());
            return;
        }
        if self.frame.capacity() == 0 {
            self.frame.reserve(FRAME_BYTES * 2);
        }
        self.frame.extend_from_slice(piece);
        if self.frame.len() >= FRAME_BYTES {
            self.flush();
        }
    }

    fn flush(&mut self) {
        if !self.frame.is_empty() {
            self.out.push(Bytes::from(std::mem::take(&mut self.frame)));
        }
    }

    fn finish(mut self) -> Vec<Bytes> {
        self.flush();
        self.out
    }
}

/// Keys per block, on average: a block's boundaries come from its keys' names (a key whose
/// hash is a multiple of this ends a block), so adding or removing a node changes one block.
const BLOCK_KEYS: u64 = 64;

pub(crate) fn ends_block(key: &str) -> bool {
    // FNV-1a: stable across runs and builds.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h.is_multiple_of(BLOCK_KEYS)
}
