//! Splits one JSON document into the items of one array inside it, chunk by chunk, as the
//! bytes arrive: the NodeMetrics list that metrics-server answers whole (`items`), so that an
//! answer of any size is decoded one item at a time and never held whole.
//!
//! The [`ItemSplitter`] is a byte-level scanner of JSON's structure (strings and escapes,
//! objects, arrays, scalars, `:` and `,` in their places). It hands each element of the array
//! at its key path (`["items"]`, `["data", "result"]`) to a callback as one slice, to be decoded
//! by serde on its own; everything outside that array (`kind`, `metadata`, ...) is kept as the
//! *envelope*, the document with the array left empty (`"items":[]`), for the caller to decode
//! once the end is reached. Memory is bounded by one item (`max_item`) plus the envelope
//! (`max_envelope`): an item over its cap is reported as [`Piece::Oversized`] with its first
//! bytes and its length, and scanned to its end without being kept; an envelope over its cap is
//! an error. Values are not validated here (numbers and literals are only delimited): serde
//! checks each item and the envelope when it decodes them, and this scanner refuses what would
//! make the split itself wrong (an unbalanced or misplaced bracket, a missing `:` or `,`,
//! bytes after the document).
//!
//! Errors name the byte offset in the document and never quote it.

use memchr::memchr2;

/// One element of the array, as [`ItemSplitter::feed`] hands it over.
#[derive(Debug, PartialEq, Eq)]
pub enum Piece<'a> {
    /// The element's bytes, whole.
    Item {
        /// 0-based place in the array.
        index: u64,
        /// Byte offset of its first byte in the document.
        offset: u64,
        bytes: &'a [u8],
    },
    /// An element longer than `max_item`: its first [`HEAD_BYTES`] bytes (to find a name in)
    /// and its length. Nothing else of it was kept.
    Oversized {
        index: u64,
        offset: u64,
        len: u64,
        head: &'a [u8],
    },
}

/// How much of an oversized element [`Piece::Oversized`] keeps.
pub const HEAD_BYTES: usize = 1024;

/// The longest key compared with the path.
const MAX_KEY: usize = 256;

/// The document is not JSON of the shape the splitter needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitError {
    /// Byte offset in the document where it went wrong.
    pub offset: u64,
    pub what: &'static str,
}

impl std::fmt::Display for SplitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "invalid JSON at byte {}: {}", self.offset, self.what)
    }
}

impl std::error::Error for SplitError {}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// A value (the document's, after `:`, after `,` in an array).
    Value,
    /// A value or `]`: just after `[`.
    ValueOrClose,
    /// A key or `}`: just after `{`.
    KeyOrClose,
    /// A key: after `,` in an object.
    Key,
    Colon,
    /// `,` or the container's close.
    AfterValue,
    String {
        key: bool,
        escaped: bool,
    },
    Scalar,
    /// After the document: whitespace only.
    End,
}

/// Where a byte goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dest {
    Item,
    Envelope,
    /// Separators between the array's elements.
    Drop,
}

/// See the module documentation.
#[derive(Debug)]
pub struct ItemSplitter {
    path: &'static [&'static str],
    max_item: usize,
    max_envelope: usize,
    state: State,
    /// Open containers: `true` for an object.
    stack: Vec<bool>,
    /// How many of the outermost open containers lie on the path.
    on_path: usize,
    /// The key just read in the innermost container on the path is its next path key.
    key_hit: bool,
    key: Vec<u8>,
    /// Depth (stack length) inside the array of items; 0 when not in it.
    items_depth: usize,
    in_item: bool,
    item: Vec<u8>,
    item_len: u64,
    item_offset: u64,
    next_index: u64,
    envelope: Vec<u8>,
    offset: u64,
}

impl ItemSplitter {
    /// A splitter for the array at `path` (keys from the root object; empty: the root is the
    /// array), keeping at most `max_item` bytes of one element and `max_envelope` of the rest.
    pub fn new(path: &'static [&'static str], max_item: usize, max_envelope: usize) -> Self {
        ItemSplitter {
            path,
            max_item,
            max_envelope,
            state: State::Value,
            stack: Vec::new(),
            on_path: 0,
            key_hit: false,
            key: Vec::new(),
            items_depth: 0,
            in_item: false,
            item: Vec::new(),
            item_len: 0,
            item_offset: 0,
            next_index: 0,
            envelope: Vec::new(),
            offset: 0,
        }
    }

    /// How many elements were handed over so far (oversized ones included).
    pub fn items(&self) -> u64 {
        self.next_index
    }

    /// Bytes read so far.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Scans the next `chunk`, handing every element that ends in it to `each`.
    pub fn feed(
        &mut self,
        chunk: &[u8],
        mut each: impl FnMut(Piece<'_>),
    ) -> Result<(), SplitError> {
        let mut i = 0;
        while i < chunk.len() {
            if let State::String { escaped: false, .. } = self.state {
                // Most of a document is inside strings: copy up to the next quote or backslash
                // at once.
                let rest = &chunk[i..];
                let run = memchr2(b'"', b'\\', rest).unwrap_or(rest.len());
                if run > 0 {
                    self.keep(&rest[..run])?;
                    self.offset += run as u64;
                    i += run;
                    continue;
                }
            }
            let b = chunk[i];
            self.byte(b, &mut each)?;
            self.offset += 1;
            i += 1;
        }
        Ok(())
    }

    /// The end of the document: the envelope (the document with the array left empty).
    pub fn finish(mut self) -> Result<Vec<u8>, SplitError> {
        if self.state == State::Scalar && self.stack.is_empty() {
            self.state = State::End;
        }
        match self.state {
            State::End => Ok(std::mem::take(&mut self.envelope)),
            _ => Err(self.error("the document ends early")),
        }
    }

    fn error(&self, what: &'static str) -> SplitError {
        SplitError {
            offset: self.offset,
            what,
        }
    }

    fn dest(&self, b: u8) -> Dest {
        if self.in_item {
            Dest::Item
        } else if self.items_depth != 0 && self.stack.len() == self.items_depth && b != b']' {
            Dest::Drop
        } else {
            Dest::Envelope
        }
    }

    /// Keeps `bytes` (all of one destination: a run inside a string) where they belong.
    fn keep(&mut self, bytes: &[u8]) -> Result<(), SplitError> {
        match self.dest(b'"') {
            Dest::Item => self.push_item(bytes),
            Dest::Envelope => self.push_envelope(bytes)?,
            Dest::Drop => {}
        }
        if let State::String { key: true, .. } = self.state
            && self.key.len() < MAX_KEY
        {
            self.key
                .extend_from_slice(&bytes[..bytes.len().min(MAX_KEY)]);
        }
        Ok(())
    }

    /// Adds to the element being read: whole up to `max_item`, then only its head.
    fn push_item(&mut self, bytes: &[u8]) {
        self.item_len += bytes.len() as u64;
        if self.item_len <= self.max_item as u64 {
            self.item.extend_from_slice(bytes);
            return;
        }
        if self.item.len() < HEAD_BYTES {
            let take = (HEAD_BYTES - self.item.len()).min(bytes.len());
            self.item.extend_from_slice(&bytes[..take]);
        }
        self.item.truncate(HEAD_BYTES);
    }

    fn push_envelope(&mut self, bytes: &[u8]) -> Result<(), SplitError> {
        if self.envelope.len() + bytes.len() > self.max_envelope {
            return Err(self.error("the document outside its list of items is too large"));
        }
        self.envelope.extend_from_slice(bytes);
        Ok(())
    }

    fn byte(&mut self, b: u8, each: &mut impl FnMut(Piece<'_>)) -> Result<(), SplitError> {
        let is_space = matches!(b, b' ' | b'\t' | b'\n' | b'\r');
        if self.state == State::Scalar && (is_space || matches!(b, b',' | b']' | b'}')) {
            self.value_done(each);
        }
        if is_space && !matches!(self.state, State::String { .. }) {
            // Whitespace between tokens: kept where it stands (an item's inner whitespace),
            // never needed elsewhere.
            if self.in_item {
                self.keep_byte(b)?;
            }
            return Ok(());
        }
        let starts_item = !self.in_item
            && self.items_depth != 0
            && self.stack.len() == self.items_depth
            && matches!(self.state, State::Value | State::ValueOrClose)
            && b != b']';
        if starts_item {
            if b != b'{' && b != b'[' {
                return Err(self.error("an element of the list is not an object"));
            }
            self.in_item = true;
            self.item.clear();
            self.item_len = 0;
            self.item_offset = self.offset;
        }
        self.keep_byte(b)?;
        self.step(b, each)
    }

    fn keep_byte(&mut self, b: u8) -> Result<(), SplitError> {
        match self.dest(b) {
            Dest::Item => self.push_item(&[b]),
            Dest::Envelope => self.push_envelope(&[b])?,
            Dest::Drop => {}
        }
        Ok(())
    }

    /// The structural step for one byte that is not whitespace between tokens.
    fn step(&mut self, b: u8, each: &mut impl FnMut(Piece<'_>)) -> Result<(), SplitError> {
        match self.state {
            State::String { key, escaped } => {
                if escaped {
                    self.state = State::String {
                        key,
                        escaped: false,
                    };
                } else if b == b'\\' {
                    self.state = State::String { key, escaped: true };
                } else if b == b'"' {
                    if key {
                        self.key_read();
                        self.state = State::Colon;
                    } else {
                        self.value_done(each);
                    }
                }
                // Other bytes of a string arrive through `keep` in runs.
                Ok(())
            }
            State::Value | State::ValueOrClose => self.value_start(b, each),
            State::KeyOrClose | State::Key => match b {
                b'"' => {
                    self.key.clear();
                    self.state = State::String {
                        key: true,
                        escaped: false,
                    };
                    Ok(())
                }
                b'}' if self.state == State::KeyOrClose => self.close(true, each),
                _ => Err(self.error("expected a key")),
            },
            State::Colon if b == b':' => {
                self.state = State::Value;
                Ok(())
            }
            State::Colon => Err(self.error("expected ':' after a key")),
            State::AfterValue => match (b, self.stack.last()) {
                (b',', Some(true)) => {
                    self.state = State::Key;
                    self.key_hit = false;
                    Ok(())
                }
                (b',', Some(false)) => {
                    self.state = State::Value;
                    Ok(())
                }
                (b'}', _) => self.close(true, each),
                (b']', _) => self.close(false, each),
                _ => Err(self.error("expected ',' or the end of an object or array")),
            },
            State::Scalar => {
                if b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.') {
                    Ok(())
                } else {
                    Err(self.error("unexpected byte in a number or literal"))
                }
            }
            State::End => Err(self.error("bytes after the end of the document")),
        }
    }

    fn value_start(&mut self, b: u8, each: &mut impl FnMut(Piece<'_>)) -> Result<(), SplitError> {
        match b {
            b'{' | b'[' => {
                let object = b == b'{';
                let depth = self.stack.len();
                if depth == 0 && object && !self.path.is_empty() {
                    self.on_path = 1;
                } else if self.on_path == depth && depth > 0 && self.key_hit {
                    self.on_path = depth + 1;
                    if depth == self.path.len() && !object {
                        self.items_depth = depth + 1;
                    }
                } else if depth == 0 && !object && self.path.is_empty() {
                    self.items_depth = 1;
                }
                self.key_hit = false;
                self.stack.push(object);
                self.state = if object {
                    State::KeyOrClose
                } else {
                    State::ValueOrClose
                };
                Ok(())
            }
            b']' if self.state == State::ValueOrClose => self.close(false, each),
            b'"' => {
                self.state = State::String {
                    key: false,
                    escaped: false,
                };
                Ok(())
            }
            b'-' | b'0'..=b'9' | b'a'..=b'z' => {
                self.state = State::Scalar;
                Ok(())
            }
            _ => Err(self.error("expected a value")),
        }
    }

    fn key_read(&mut self) {
        let depth = self.stack.len();
        self.key_hit = self.on_path == depth
            && depth <= self.path.len()
            && self.path[depth - 1].as_bytes() == self.key.as_slice();
    }

    fn close(&mut self, object: bool, each: &mut impl FnMut(Piece<'_>)) -> Result<(), SplitError> {
        match self.stack.last() {
            Some(&o) if o == object => {}
            _ => return Err(self.error("a bracket closes what it did not open")),
        }
        let depth = self.stack.len();
        self.stack.pop();
        if self.items_depth == depth {
            self.items_depth = 0;
        }
        self.on_path = self.on_path.min(self.stack.len());
        self.value_done(each);
        Ok(())
    }

    /// A value ended (string, scalar or container): the next state, and the element handed
    /// over when it was one.
    fn value_done(&mut self, each: &mut impl FnMut(Piece<'_>)) {
        self.key_hit = false;
        self.state = if self.stack.is_empty() {
            State::End
        } else {
            State::AfterValue
        };
        if self.in_item && self.stack.len() == self.items_depth {
            self.in_item = false;
            let index = self.next_index;
            self.next_index += 1;
            let piece = if self.item_len > self.max_item as u64 {
                Piece::Oversized {
                    index,
                    offset: self.item_offset,
                    len: self.item_len,
                    head: &self.item[..self.item.len().min(HEAD_BYTES)],
                }
            } else {
                Piece::Item {
                    index,
                    offset: self.item_offset,
                    bytes: &self.item,
                }
            };
            each(piece);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq)]
    enum Got {
        Item(u64, u64, String),
        Over(u64, u64, u64, String),
    }

    /// Splits `doc` fed in chunks of `chunk` bytes.
    fn split(
        doc: &str,
        path: &'static [&'static str],
        chunk: usize,
        max_item: usize,
    ) -> Result<(Vec<Got>, String), SplitError> {
        let mut s = ItemSplitter::new(path, max_item, 4096);
        let mut got = Vec::new();
        for c in doc.as_bytes().chunks(chunk.max(1)) {
            s.feed(c, |p| {
                got.push(match p {
                    Piece::Item {
                        index,
                        offset,
                        bytes,
                    } => Got::Item(index, offset, String::from_utf8_lossy(bytes).into()),
                    Piece::Oversized {
                        index,
                        offset,
                        len,
                        head,
                    } => Got::Over(index, offset, len, String::from_utf8_lossy(head).into()),
                })
            })?;
        }
        let envelope = s.finish()?;
        Ok((got, String::from_utf8(envelope).unwrap()))
    }

    const LIST: &str = r#"{"kind":"NodeMetricsList","apiVersion":"metrics.k8s.io/v1beta1","metadata":{"resourceVersion":""},"items":[{"metadata":{"name":"a","labels":{"items":"[{\"x\"]"}},"usage":{"cpu":"1"}}, {"metadata":{"name":"b"},"n":[1,2.5e3,true,null]}]}"#;

    #[test]
    fn items_are_handed_over_whole_in_every_chunking_and_the_envelope_keeps_the_rest() {
        for chunk in [1, 2, 3, 7, 64, LIST.len()] {
            let (got, envelope) = split(LIST, &["items"], chunk, 1 << 20).unwrap();
            assert_eq!(
                got,
                [
                    Got::Item(
                        0,
                        107,
                        r#"{"metadata":{"name":"a","labels":{"items":"[{\"x\"]"}},"usage":{"cpu":"1"}}"#
                            .into()
                    ),
                    Got::Item(
                        1,
                        184,
                        r#"{"metadata":{"name":"b"},"n":[1,2.5e3,true,null]}"#.into()
                    ),
                ],
                "chunk {chunk}"
            );
            assert_eq!(
                envelope,
                r#"{"kind":"NodeMetricsList","apiVersion":"metrics.k8s.io/v1beta1","metadata":{"resourceVersion":""},"items":[]}"#
            );
            let item: serde_json::Value = serde_json::from_str(match &got[0] {
                Got::Item(_, _, s) => s,
                Got::Over(..) => unreachable!(),
            })
            .unwrap();
            assert_eq!(item["metadata"]["name"], "a");
        }
        assert_eq!(&LIST[107..108], "{");
        assert_eq!(&LIST[184..185], "{");
    }

    #[test]
    fn a_nested_path_and_items_before_the_rest() {
        let doc = r#" {"data":{"result":[{"metric":{"instance":"n1"},"value":[1,"0.5"]}],"resultType":"vector"},"status":"success"} "#;
        let (got, envelope) = split(doc, &["data", "result"], 5, 1 << 20).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(
            envelope,
            r#"{"data":{"result":[],"resultType":"vector"},"status":"success"}"#
        );
        // The same key elsewhere is not the path.
        let doc = r#"{"result":[{"a":1}],"data":{"x":{"result":[{"b":2}]}}}"#;
        let (got, _) = split(doc, &["data", "result"], 3, 1 << 20).unwrap();
        assert!(got.is_empty(), "{got:?}");
    }

    #[test]
    fn an_item_over_the_cap_is_reported_with_its_head_and_the_next_one_is_whole() {
        let big = format!(
            r#"{{"metadata":{{"name":"big"}},"pad":"{}"}}"#,
            "x".repeat(5000)
        );
        let doc = format!(r#"{{"items":[{big},{{"metadata":{{"name":"small"}}}}]}}"#);
        for chunk in [1, 100, doc.len()] {
            let (got, envelope) = split(&doc, &["items"], chunk, 2000).unwrap();
            assert_eq!(got.len(), 2);
            match &got[0] {
                Got::Over(0, 10, len, head) => {
                    assert_eq!(*len, big.len() as u64);
                    assert_eq!(head.len(), HEAD_BYTES);
                    assert!(head.starts_with(r#"{"metadata":{"name":"big"}"#));
                }
                other => panic!("{other:?}"),
            }
            assert_eq!(
                got[1],
                Got::Item(
                    1,
                    11 + big.len() as u64,
                    r#"{"metadata":{"name":"small"}}"#.into()
                )
            );
            assert_eq!(envelope, r#"{"items":[]}"#);
        }
    }

    #[test]
    fn empty_and_absent_lists() {
        let (got, env) = split(r#"{"items":[],"metadata":{}}"#, &["items"], 1, 10).unwrap();
        assert!(got.is_empty());
        assert_eq!(env, r#"{"items":[],"metadata":{}}"#);
        let (got, env) = split(r#"{"kind":"Status","code":500}"#, &["items"], 2, 10).unwrap();
        assert!(got.is_empty());
        assert_eq!(env, r#"{"kind":"Status","code":500}"#);
        let (got, env) = split(r#"{"items":null}"#, &["items"], 2, 10).unwrap();
        assert!(got.is_empty());
        assert_eq!(env, r#"{"items":null}"#);
    }

    #[test]
    fn broken_documents_name_the_byte_and_never_quote_it() {
        for (doc, offset, what) in [
            (
                r#"{"items":[{"a":1}}"#,
                17,
                "a bracket closes what it did not open",
            ),
            (
                r#"{"items":[{"a":1} {"b":2}]}"#,
                18,
                "expected ',' or the end of an object or array",
            ),
            (r#"{"items":[{"a" 1}]}"#, 15, "expected ':' after a key"),
            (
                r#"{"items":[1,2]}"#,
                10,
                "an element of the list is not an object",
            ),
            (
                r#"{"items":[{"a":1}]}x"#,
                19,
                "bytes after the end of the document",
            ),
            (r#"{"items":[{"a":"secret"#, 22, "the document ends early"),
            (r#"{"items":[{"a":@}]}"#, 15, "expected a value"),
            (r#"{1:2}"#, 1, "expected a key"),
            ("", 0, "the document ends early"),
        ] {
            let e = split(doc, &["items"], 1, 100).unwrap_err();
            assert_eq!((e.offset, e.what), (offset, what), "{doc}");
            assert!(!e.to_string().contains("secret"));
        }
    }

    #[test]
    fn an_envelope_over_its_cap_is_an_error() {
        let doc = format!(
            r#"{{"metadata":{{"x":"{}"}},"items":[]}}"#,
            "y".repeat(5000)
        );
        let e = split(&doc, &["items"], 64, 100).unwrap_err();
        assert_eq!(
            e.what,
            "the document outside its list of items is too large"
        );
    }

    #[test]
    fn the_root_array_with_an_empty_path() {
        let (got, env) = split(r#"[{"a":1},{"b":[2]}]"#, &[], 4, 100).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(env, "[]");
    }
}
