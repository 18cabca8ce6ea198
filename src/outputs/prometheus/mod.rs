//! Prometheus exposition of a [`Snapshot`], in text format 0.0.4 and OpenMetrics 1.0.
//!
//! We render from the snapshot ourselves instead of through prometheus-client's `Registry`:
//! that crate encodes OpenMetrics only (Prometheus text 0.0.4 is still what most scrapers ask
//! for by default), and its model of registered, long-lived metric objects is the opposite of
//! "series die with their objects": here every tick renders every family afresh from one
//! immutable snapshot, and the bytes are served as they are on each scrape.
//!
//! The body is split in two: a [`Renderer`]'s [`Body`] (all families but the snapshot age,
//! made at tick time) and `render_tail` (the snapshot age, which changes each second, plus
//! `# EOF` for OpenMetrics), made on each scrape. The renderer keeps what it wrote: per block
//! of nodes and family, and per whole-snapshot step, reused until that data changes, so a tick
//! costs in proportion to what changed. The body is a list of shared chunks (no 34 MB
//! concatenation), and each chunk's gzip form is made once, on first request.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::SystemTime;

use super::body::{Body, Chunk, ends_block};
use super::families::{self, Family, Kind};
use super::select;
use super::series::{self, Keyed as _, Labels, Step};
use crate::model::Snapshot;

/// An exposition format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Prometheus text format 0.0.4.
    Text,
    /// OpenMetrics 1.0 text.
    OpenMetrics,
}

impl Format {
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Text => "text/plain; version=0.0.4; charset=utf-8",
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }

    /// OpenMetrics when the `Accept` header lists it with a non-zero q, else text.
    pub fn negotiate(accept: Option<&str>) -> Format {
        let Some(accept) = accept else {
            return Format::Text;
        };
        for item in accept.split(',') {
            let mut parts = item.split(';').map(str::trim);
            let media = parts.next().unwrap_or_default();
            if !media.eq_ignore_ascii_case("application/openmetrics-text") {
                continue;
            }
            let refused = parts.any(|p| {
                p.strip_prefix("q=")
                    .and_then(|q| q.parse::<f64>().ok())
                    .is_some_and(|q| q <= 0.0)
            });
            if !refused {
                return Format::OpenMetrics;
            }
        }
        Format::Text
    }
}

struct Writer {
    out: String,
    format: Format,
}

impl Writer {
    /// `# HELP`, `# TYPE` and (OpenMetrics) `# UNIT` of a family.
    fn header(&mut self, family: &Family) {
        let sample = family.sample_name();
        let meta_name = match self.format {
            Format::OpenMetrics => family.name,
            Format::Text => sample.as_str(),
        };
        let kind = match family.kind {
            Kind::Gauge => "gauge",
            Kind::Counter => "counter",
            Kind::Histogram => "histogram",
        };
        let _ = writeln!(
            self.out,
            "# HELP {meta_name} {}",
            escape_help(family.help, self.format)
        );
        let _ = writeln!(self.out, "# TYPE {meta_name} {kind}");
        if let (Format::OpenMetrics, Some(unit)) = (self.format, family.unit) {
            let _ = writeln!(self.out, "# UNIT {} {unit}", family.name);
        }
    }

    /// A gauge or counter family; nothing at all when it has no rows.
    fn family(&mut self, family: &Family, rows: &[(Labels<'_>, f64)]) {
        if rows.is_empty() {
            return;
        }
        self.header(family);
        let sample = family.sample_name();
        for (labels, value) in rows {
            self.sample(&sample, labels, *value);
        }
    }

    /// A histogram family: per row the cumulative bucket counts for `bounds`, the sum and the
    /// count (which is also the `+Inf` bucket).
    fn histogram(
        &mut self,
        family: &Family,
        bounds: &[f64],
        rows: &[(Labels<'_>, &[u64], f64, u64)],
    ) {
        if rows.is_empty() {
            return;
        }
        self.header(family);
        self.histogram_rows(family, bounds, rows);
    }

    /// A histogram family's rows, without its header.
    fn histogram_rows(
        &mut self,
        family: &Family,
        bounds: &[f64],
        rows: &[(Labels<'_>, &[u64], f64, u64)],
    ) {
        let (bucket, sum, count) = (
            format!("{}_bucket", family.name),
            format!("{}_sum", family.name),
            format!("{}_count", family.name),
        );
        let mut le = String::new();
        for (labels, buckets, total, n) in rows {
            for (i, bound) in bounds.iter().map(Some).chain([None]).enumerate() {
                le.clear();
                match bound {
                    Some(b) => push_value(&mut le, *b),
                    None => le.push_str("+Inf"),
                }
                let v = bound.map_or(*n, |_| buckets.get(i).copied().unwrap_or(0));
                let mut l = labels.clone();
                l.push(("le", le.as_str()));
                self.sample(&bucket, &l, v as f64);
            }
            self.sample(&sum, labels, *total);
            self.sample(&count, labels, *n as f64);
        }
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                self.out.push_str(k);
                self.out.push_str("=\"");
                escape_label_value(&mut self.out, v);
                self.out.push('"');
            }
            self.out.push('}');
        }
        self.out.push(' ');
        push_value(&mut self.out, value);
        self.out.push('\n');
    }
}

impl series::Visitor for Writer {
    fn family(&mut self, family: &Family, rows: &[(Labels<'_>, f64)]) {
        Writer::family(self, family, rows);
    }
    fn histogram(
        &mut self,
        family: &Family,
        bounds: &[f64],
        rows: &[(Labels<'_>, &[u64], f64, u64)],
    ) {
        Writer::histogram(self, family, bounds, rows);
    }
}

fn escape_help(help: &str, format: Format) -> String {
    let mut s = String::with_capacity(help.len());
    for c in help.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '\n' => s.push_str("\\n"),
            '"' if format == Format::OpenMetrics => s.push_str("\\\""),
            c => s.push(c),
        }
    }
    s
}

fn escape_label_value(out: &mut String, v: &str) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

fn push_value(out: &mut String, v: f64) {
    if v.is_nan() {
        out.push_str("NaN");
    } else if v == f64::INFINITY {
        out.push_str("+Inf");
    } else if v == f64::NEG_INFINITY {
        out.push_str("-Inf");
    } else {
        let _ = write!(out, "{v}");
    }
}

/// Every family but the snapshot age, in `families::ALL` order, as one string (tests, benches).
pub fn render(snap: &Snapshot, format: Format) -> String {
    let body = Renderer::new(format).update(snap);
    let mut out = Vec::with_capacity(body.len());
    for c in body.into_plain() {
        out.extend_from_slice(&c);
    }
    // Every chunk is valid UTF-8 (written from `&str`), and so is their concatenation.
    String::from_utf8(out).unwrap_or_default()
}

/// What [`Renderer`] did so far (test hooks and self-telemetry).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RenderStats {
    /// Bodies made.
    pub bodies: u64,
    /// Blocks of keys (nodes) whose rows were written, and the keys in them.
    pub blocks: u64,
    pub keys: u64,
    /// Of those blocks, the families whose rows were written (the others' were the same).
    pub families: u64,
    /// Whole-snapshot steps written again because their data changed (the instance's own
    /// families, which change on every tick, are not counted).
    pub steps: u64,
    /// Parts (node usage, capacities, facts, addons, pod sums) kept whole because the data
    /// they are read from was the same `Arc` as the previous body's: no key visited.
    pub parts_kept: u64,
    /// Pieces of the task and platform steps (see [`PIECE_ROWS`]) written again, and those
    /// whose bytes were the same as the previous body's piece, which is kept instead.
    pub pieces_written: u64,
    pub pieces_kept: u64,
}

/// The rows of consecutive keys of a [`series::Keyed`] part, per family of the part (`None`:
/// no rows). `first` indexes the items of the snapshot it was made from.
#[derive(Debug)]
struct Block {
    first: usize,
    len: usize,
    families: Vec<Option<Arc<Chunk>>>,
}

#[derive(Debug, Default)]
struct PartCache {
    blocks: Vec<Block>,
}

/// Renders snapshots one after another, writing again only what changed since the previous
/// one: the rows of a block of nodes are kept until a node in it changes (by its data, see
/// [`series::Keyed::same`]), whole-snapshot families until their data changes.
#[derive(Debug)]
pub struct Renderer {
    format: Format,
    prev: Option<Arc<Snapshot>>,
    parts: [PartCache; 6],
    steps: HashMap<Step, Arc<Chunk>>,
    /// The steps written in pieces ([`pieced`]): their chunks in order, and by place.
    pieced: HashMap<Step, Pieces>,
    headers: HashMap<&'static str, Arc<Chunk>>,
    stats: RenderStats,
}

impl Renderer {
    pub fn new(format: Format) -> Self {
        Renderer {
            format,
            prev: None,
            parts: Default::default(),
            steps: HashMap::new(),
            pieced: HashMap::new(),
            headers: HashMap::new(),
            stats: RenderStats::default(),
        }
    }

    pub fn stats(&self) -> RenderStats {
        self.stats
    }

    /// The body of `snap`, reusing what is unchanged since the previous call.
    pub fn render(&mut self, snap: Arc<Snapshot>) -> Body {
        let body = self.update(&snap);
        self.prev = Some(snap);
        body
    }

    fn update(&mut self, snap: &Snapshot) -> Body {
        self.stats.bodies += 1;
        // A new shard or allow/denylist (a StatefulSet re-shard) changes what every part and
        // step holds: start from nothing.
        let prev = self.prev.clone().filter(|p| p.selection == snap.selection);
        if prev.is_none() {
            for part in &mut self.parts {
                part.blocks.clear();
            }
            self.steps.clear();
            self.pieced.clear();
        }
        let prev = prev.as_deref();
        self.update_parts(prev, snap);

        let mut body = Body::default();
        let mut seen = Vec::new();
        for step in series::steps(snap.cluster_state.is_some()) {
            if let Some((part, f, family)) = keyed(step) {
                if select::family_allowed(&snap.selection, family) {
                    self.push_keyed(&mut body, part, f, family);
                }
                continue;
            }
            seen.push(step);
            if pieced(step) {
                self.push_pieced(&mut body, step, prev, snap);
            } else {
                self.push_whole(&mut body, step, prev, snap);
            }
        }
        self.steps.retain(|s, _| seen.contains(s));
        self.pieced.retain(|s, _| seen.contains(s));
        body
    }

    /// Brings the blocks of every keyed part up to `snap`.
    fn update_parts(&mut self, prev: Option<&Snapshot>, snap: &Snapshot) {
        let [usage, bound, capacity, facts, addons, pods] = &mut self.parts;
        let fmt = self.format;
        let stats = &mut self.stats;
        update_part::<series::NodeUsage>(usage, prev, snap, fmt, stats);
        update_part::<series::NodeBound>(bound, prev, snap, fmt, stats);
        update_part::<series::NodeCapacities>(capacity, prev, snap, fmt, stats);
        update_part::<series::NodeFactsRows>(facts, prev, snap, fmt, stats);
        update_part::<series::NodeAddons>(addons, prev, snap, fmt, stats);
        update_part::<series::NodePodSums>(pods, prev, snap, fmt, stats);
    }

    /// Family `f` of keyed part `part`: its header and the rows of every block, if any.
    fn push_keyed(&mut self, body: &mut Body, part: usize, f: usize, family: &'static Family) {
        let rows: Vec<_> = self.parts[part]
            .blocks
            .iter()
            .filter_map(|b| b.families.get(f).cloned().flatten())
            .collect();
        if rows.is_empty() {
            return;
        }
        let fmt = self.format;
        let header = self.headers.entry(family.name).or_insert_with(|| {
            let mut w = Writer {
                out: String::new(),
                format: fmt,
            };
            w.header(family);
            Chunk::new(w.out)
        });
        body.chunks.push(header.clone());
        body.chunks.extend(rows);
    }

    /// A [`pieced`] step: its previous pieces when its data is the same, else written again
    /// piece by piece (a piece whose bytes did not change is kept).
    fn push_pieced(
        &mut self,
        body: &mut Body,
        step: Step,
        prev: Option<&Snapshot>,
        snap: &Snapshot,
    ) {
        let same = prev.is_some_and(|p| step_same(step, p, snap));
        let pieces = match self.pieced.remove(&step) {
            Some(old) if same => old,
            old => {
                self.stats.steps += 1;
                let mut w = PieceWriter {
                    format: self.format,
                    old: old.map(|o| o.by_place).unwrap_or_default(),
                    new: Pieces::default(),
                    headers: &mut self.headers,
                    scratch: String::new(),
                    stats: &mut self.stats,
                };
                series::visit_step(
                    step,
                    snap,
                    &mut select::Filter::new(&snap.selection, &mut w),
                );
                w.new
            }
        };
        body.chunks.extend(pieces.chunks.iter().cloned());
        self.pieced.insert(step, pieces);
    }

    /// A whole-snapshot step as one chunk: the previous one when its data is the same (never
    /// for the instance's own families, which change on every tick), else written again.
    fn push_whole(
        &mut self,
        body: &mut Body,
        step: Step,
        prev: Option<&Snapshot>,
        snap: &Snapshot,
    ) {
        let reuse = step != Step::Instance
            && prev.is_some_and(|p| step_same(step, p, snap))
            && self.steps.contains_key(&step);
        if !reuse {
            if step != Step::Instance {
                self.stats.steps += 1;
            }
            // Sized from the step's previous text (the task families of a node are
            // megabytes): no doubling reallocations, no unused half kept in the chunk.
            let guess = self.steps.get(&step).map_or(0, |c| {
                let n = c.len();
                n + n / 16
            });
            let mut w = Writer {
                out: String::with_capacity(guess),
                format: self.format,
            };
            series::visit_step(
                step,
                snap,
                &mut select::Filter::new(&snap.selection, &mut w),
            );
            self.steps.insert(step, Chunk::new(w.out));
        }
        if let Some(c) = self.steps.get(&step).filter(|c| !c.is_empty()) {
            body.chunks.push(c.clone());
        }
    }
}

/// A step of a keyed part: the part's index in [`Renderer`]'s parts, the family's index in
/// the part and the family; `None` for a whole-snapshot step.
fn keyed(step: Step) -> Option<(usize, usize, &'static Family)> {
    match step {
        Step::Usage(f) => Some((0, f, series::NodeUsage::FAMILIES[f].0)),
        Step::Bound(f) => Some((1, f, series::NodeBound::FAMILIES[f].0)),
        Step::Capacity(f) => Some((2, f, series::NodeCapacities::FAMILIES[f].0)),
        Step::Facts(f) => Some((3, f, series::NodeFactsRows::FAMILIES[f].0)),
        Step::Addons(f) => Some((4, f, series::NodeAddons::FAMILIES[f].0)),
        Step::Pods(f) => Some((5, f, series::NodePodSums::FAMILIES[f].0)),
        _ => None,
    }
}

/// Whether a whole-snapshot step is written in pieces of [`PIECE_ROWS`] rows per family
/// instead of one chunk: the node role's task, container and platform families (the
/// node role's RSS budget). Their text is megabytes at 110 pods and is written again on every
/// collection, but most of its rows keep their bytes (requests, limits, detail series between
/// detail reads): a piece whose bytes equal the previous body's piece at the same place is
/// not kept twice, and no single buffer the size of the step is ever allocated, so a tick
/// holds the previous body plus only what changed instead of two whole texts.
fn pieced(step: Step) -> bool {
    matches!(step, Step::Tasks | Step::Platform)
}

/// Rows per piece of a `pieced` step: about 15 KB of task rows. A family whose values move
/// (CPU and memory usage) changes in every piece however small, one whose values hold
/// (requests, limits, cpusets) in none; larger pieces cost fewer chunks and compress better
/// (each is its own deflate stream: at level 1, 64-row pieces are 12 % larger than the whole
/// text compressed at once, 32-row pieces 27 %).
pub const PIECE_ROWS: usize = 64;

/// The chunks of a [`pieced`] step, in order (family headers included), and each piece by its
/// place (family, piece number) for the next tick to compare with.
#[derive(Debug, Default)]
struct Pieces {
    chunks: Vec<Arc<Chunk>>,
    by_place: HashMap<(&'static str, usize), Arc<Chunk>>,
}

/// Writes a [`pieced`] step: each family's header (shared), then its rows [`PIECE_ROWS`] at a
/// time into one reused scratch buffer; a piece whose bytes are those of the previous body's
/// piece at the same place is that piece again, any other a new exact-size chunk.
struct PieceWriter<'a> {
    format: Format,
    old: HashMap<(&'static str, usize), Arc<Chunk>>,
    new: Pieces,
    headers: &'a mut HashMap<&'static str, Arc<Chunk>>,
    scratch: String,
    stats: &'a mut RenderStats,
}

impl PieceWriter<'_> {
    fn header(&mut self, family: &Family) {
        let format = self.format;
        let header = self.headers.entry(family.name).or_insert_with(|| {
            let mut w = Writer {
                out: String::new(),
                format,
            };
            w.header(family);
            Chunk::new(w.out)
        });
        self.new.chunks.push(header.clone());
    }

    /// The piece now in `scratch`, at `place`.
    fn piece(&mut self, place: (&'static str, usize)) {
        let chunk = match self.old.remove(&place) {
            Some(old) if old.held() == self.scratch.as_bytes() => {
                self.stats.pieces_kept += 1;
                old
            }
            _ => {
                self.stats.pieces_written += 1;
                Chunk::new(self.scratch.as_bytes().to_vec())
            }
        };
        self.new.chunks.push(chunk.clone());
        self.new.by_place.insert(place, chunk);
    }
}

impl series::Visitor for PieceWriter<'_> {
    fn family(&mut self, family: &Family, rows: &[(Labels<'_>, f64)]) {
        if rows.is_empty() {
            return;
        }
        self.header(family);
        let sample = family.sample_name();
        for (n, piece) in rows.chunks(PIECE_ROWS).enumerate() {
            let mut w = Writer {
                out: std::mem::take(&mut self.scratch),
                format: self.format,
            };
            w.out.clear();
            for (labels, value) in piece {
                w.sample(&sample, labels, *value);
            }
            self.scratch = w.out;
            self.piece((family.name, n));
        }
    }

    fn histogram(
        &mut self,
        family: &Family,
        bounds: &[f64],
        rows: &[(Labels<'_>, &[u64], f64, u64)],
    ) {
        if rows.is_empty() {
            return;
        }
        // No task or platform family is a histogram; one piece for all its rows if one is.
        self.header(family);
        let mut w = Writer {
            out: std::mem::take(&mut self.scratch),
            format: self.format,
        };
        w.out.clear();
        w.histogram_rows(family, bounds, rows);
        self.scratch = w.out;
        self.piece((family.name, 0));
    }
}

/// Whether a whole-snapshot step has the same data in both snapshots.
fn step_same(step: Step, a: &Snapshot, b: &Snapshot) -> bool {
    use series::same_in_state as cs;
    fn arc<T: PartialEq>(a: &Option<Arc<T>>, b: &Option<Arc<T>>) -> bool {
        match (a, b) {
            (Some(x), Some(y)) => Arc::ptr_eq(x, y) || x == y,
            (None, None) => true,
            _ => false,
        }
    }
    match step {
        Step::Info => a.cluster == b.cluster,
        Step::ClusterCounts => series::same_node_facts(a, b) || cs(a, b, |c| &*c.nodes),
        Step::ExpectedPods => cs(a, b, |c| &c.expected),
        Step::Restarts => cs(a, b, |c| &c.restarts),
        Step::Skipped => cs(a, b, |c| &c.skipped),
        Step::Tasks => arc(&a.tasks, &b.tasks),
        Step::Platform => arc(&a.platform, &b.platform) && arc(&a.pressure, &b.pressure),
        _ => false,
    }
}

/// Brings one part's blocks up to `snap`: a block whose keys and items are unchanged since
/// `prev` is kept; anything else is written.
fn update_part<P: series::Keyed>(
    cache: &mut PartCache,
    prev: Option<&Snapshot>,
    snap: &Snapshot,
    format: Format,
    stats: &mut RenderStats,
) {
    // Nothing this part reads changed (the same `Arc`s): every block stays, and no key is
    // visited. `prev` has the same selection, and its blocks are the ones in the cache.
    if prev.is_some_and(|p| P::unchanged(p, snap)) {
        stats.parts_kept += 1;
        return;
    }
    // Only the keys (nodes) of this instance's shard; `prev` has the same selection.
    let mut items = Vec::new();
    P::items(snap, &mut items);
    items.retain(|(key, _)| select::emits_node(&snap.selection, key));
    let mut old_items = Vec::new();
    if let Some(p) = prev {
        P::items(p, &mut old_items);
        old_items.retain(|(key, _)| select::emits_node(&p.selection, key));
    }
    let mut old: Vec<Option<Block>> = std::mem::take(&mut cache.blocks)
        .into_iter()
        .map(Some)
        .collect();
    let by_first: HashMap<&str, usize> = old
        .iter()
        .enumerate()
        .filter_map(|(i, b)| {
            let b = b.as_ref()?;
            old_items.get(b.first).map(|(k, _)| (*k, i))
        })
        .collect();
    let mut start = 0;
    for i in 0..items.len() {
        if i + 1 < items.len() && !ends_block(items[i].0) {
            continue;
        }
        let new = &items[start..=i];
        // The previous block of the same keys, with its items.
        let (before, olds) = by_first
            .get(new[0].0)
            .and_then(|&bi| {
                let b = old[bi].take()?;
                let olds = old_items.get(b.first..b.first + b.len)?;
                let keys_same =
                    olds.len() == new.len() && olds.iter().zip(new).all(|(o, n)| o.0 == n.0);
                keys_same.then_some((Some(b.families), olds))
            })
            .unwrap_or((None, &[]));
        let families = block_families::<P>(new, before, olds, format, stats);
        cache.blocks.push(Block {
            first: start,
            len: new.len(),
            families,
        });
        start = i + 1;
    }
}

/// A block's rows, one chunk per family of its part (`None`: the family has no rows there).
type BlockRows = Vec<Option<Arc<Chunk>>>;

/// The rows of block `new` per family: the previous block's (`before`, of the same keys, whose
/// items were `olds`) when every item gives the same rows, written otherwise.
fn block_families<'a, P: series::Keyed>(
    new: &[(&'a str, P::Item<'a>)],
    before: Option<BlockRows>,
    olds: &[(&str, P::Item<'_>)],
    format: Format,
    stats: &mut RenderStats,
) -> BlockRows {
    if let Some(families) = before
        && olds.iter().zip(new).all(|(o, n)| P::same(&o.1, &n.1))
    {
        return families;
    }
    stats.blocks += 1;
    stats.keys += new.len() as u64;
    stats.families += P::FAMILIES.len() as u64;
    render_block::<P>(new, format)
}

/// A block's rows of one family are held compressed from this many bytes of text: the blocks
/// of a large cluster (tens of kilobytes each), not a single node's few rows.
const COMPRESS_FROM: usize = 4096;

/// The rows of `items`, one chunk per family of the part (`None` when it has none); large
/// ones held compressed only ([`Chunk::compressed`]).
fn render_block<'a, P: series::Keyed>(
    items: &[(&'a str, P::Item<'a>)],
    format: Format,
) -> Vec<Option<Arc<Chunk>>> {
    let mut rows = Vec::new();
    // Made on the first chunk large enough to hold compressed (a compressor's state is about
    // 300 KB: the node role, whose blocks are its one node's rows, never makes one).
    let mut compress = None;
    P::FAMILIES
        .iter()
        .enumerate()
        .map(|(f, (family, _))| {
            rows.clear();
            for (key, item) in items {
                P::rows(f, key, item, &mut rows);
            }
            if rows.is_empty() {
                return None;
            }
            let mut w = Writer {
                out: String::with_capacity(rows.len() * 96),
                format,
            };
            let sample = family.sample_name();
            for (labels, value) in &rows {
                w.sample(&sample, labels, *value);
            }
            if w.out.len() < COMPRESS_FROM {
                return Some(Chunk::new(w.out));
            }
            let c = compress
                .get_or_insert_with(|| flate2::Compress::new(flate2::Compression::fast(), false));
            Some(Chunk::compressed_with(c, w.out.as_bytes()))
        })
        .collect()
}

/// The part of the body that changes on every scrape: the snapshot's age, and `# EOF` for
/// OpenMetrics.
pub fn render_tail(snap: &Snapshot, now: SystemTime, format: Format) -> String {
    let age = now
        .duration_since(snap.generated_at)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    let mut w = Writer {
        out: String::with_capacity(256),
        format,
    };
    if super::select::family_allowed(&snap.selection, &families::SNAPSHOT_AGE) {
        w.family(&families::SNAPSHOT_AGE, &[(vec![], age)]);
    }
    if format == Format::OpenMetrics {
        w.out.push_str("# EOF\n");
    }
    w.out
}

/// Families kept outside the snapshot (the server's own counters, [`families::SERVER`]), rendered
/// on each scrape; placed before [`render_tail`], which ends an OpenMetrics body.
pub fn render_families(
    families: &[(&'static Family, Vec<(Labels<'_>, f64)>)],
    format: Format,
) -> String {
    let mut w = Writer {
        out: String::with_capacity(1024),
        format,
    };
    for (family, rows) in families {
        w.family(family, rows);
    }
    w.out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outputs::body::{FRAME_BYTES, deflate_flushed};
    use bytes::Bytes;

    #[test]
    fn negotiates_openmetrics_only_when_asked() {
        assert_eq!(Format::negotiate(None), Format::Text);
        assert_eq!(Format::negotiate(Some("text/plain")), Format::Text);
        assert_eq!(
            Format::negotiate(Some(
                "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
            )),
            Format::OpenMetrics
        );
        assert_eq!(
            Format::negotiate(Some("application/openmetrics-text; q=0, text/plain")),
            Format::Text
        );
    }

    #[test]
    fn escapes_label_values_and_help() {
        let mut s = String::new();
        escape_label_value(&mut s, "a\"b\\c\nd");
        assert_eq!(s, "a\\\"b\\\\c\\nd");
        assert_eq!(escape_help("x \"y\"\n", Format::Text), "x \"y\"\\n");
        assert_eq!(escape_help("x \"y\"", Format::OpenMetrics), "x \\\"y\\\"");
    }

    #[test]
    fn values_use_prometheus_spellings() {
        let mut s = String::new();
        for v in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 0.25, 3.0, 1e-7] {
            push_value(&mut s, v);
            s.push(' ');
        }
        assert_eq!(s, "NaN +Inf -Inf 0.25 3 0.0000001 ");
    }

    use crate::model::{
        ClusterState, CpuMem, NodeCapacity, NodeFacts, NodeLoad, NodePods, Placement, Resource,
    };

    fn load(node: &str, cpu: f64) -> Arc<NodeLoad> {
        Arc::new(NodeLoad {
            node: node.into(),
            source: "host".into(),
            latest_at: SystemTime::UNIX_EPOCH,
            latest: crate::model::ResourceMap::from([
                (Resource::Cpu, cpu),
                (Resource::Memory, 0.5),
            ]),
            windows: Arc::default(),
            capacity: Some(NodeCapacity {
                cpu_cores: 4.0,
                memory_bytes: 8e9,
            }),
            hour_max: Default::default(),
            hour_coverage: 0.0,
        })
    }

    fn facts(node: &str, ready: bool) -> NodeFacts {
        NodeFacts {
            name: node.into(),
            placement: Placement {
                pool: "p".into(),
                zone: "z".into(),
            },
            conditions: vec![("Ready".into(), if ready { "True" } else { "False" }.into())],
            ready,
            schedulable: true,
            done_warming: true,
            created: None,
            capacity: None,
            allocatable: Some(NodeCapacity {
                cpu_cores: 3.5,
                memory_bytes: 7e9,
            }),
        }
    }

    /// `n` nodes with usage and facts, as the hub hands them out.
    fn cluster(n: usize) -> Snapshot {
        let mut snap = Snapshot::empty(SystemTime::UNIX_EPOCH);
        let mut cs = ClusterState::default();
        for i in 0..n {
            let name = format!("node-{i:04}");
            Arc::make_mut(&mut snap.nodes).insert(name.as_str().into(), load(&name, 0.25));
            Arc::make_mut(&mut cs.nodes).push(facts(&name, true));
            cs.node_pods.insert(
                name.as_str().into(),
                NodePods {
                    requests: CpuMem {
                        cpu_cores: 1.0,
                        memory_bytes: 1e9,
                    },
                    limits: CpuMem::default(),
                    pods: 3,
                },
            );
        }
        snap.cluster_state = Some(Arc::new(cs));
        snap
    }

    fn text(body: &Body) -> String {
        body.chunks
            .iter()
            .map(|c| String::from_utf8(c.text().to_vec()).unwrap())
            .collect()
    }

    #[test]
    fn large_blocks_are_held_compressed_and_a_single_nodes_rows_as_text() {
        let mut r = Renderer::new(Format::Text);
        let one = r.render(Arc::new(cluster(1)));
        assert!(
            one.chunks.iter().all(|c| c.holds_text()),
            "one node's rows: no compressor made, nothing to inflate"
        );
        let mut r = Renderer::new(Format::Text);
        let snap = cluster(2000);
        let many = r.render(Arc::new(snap.clone()));
        let compressed: Vec<_> = many.chunks.iter().filter(|c| !c.holds_text()).collect();
        assert!(!compressed.is_empty());
        assert!(
            compressed
                .iter()
                .all(|c| c.len() >= COMPRESS_FROM && c.is_deflated())
        );
        // Inflated, they are the text `render` writes.
        assert_eq!(text(&many), render(&snap, Format::Text));
    }

    #[test]
    fn a_tick_without_change_writes_nothing_and_one_node_writes_its_block() {
        let mut r = Renderer::new(Format::Text);
        let snap = Arc::new(cluster(1000));
        let first = r.render(snap.clone());
        let s0 = r.stats();
        assert_eq!(
            s0.keys,
            4 * 1000,
            "capacity, usage, facts and pods of every node"
        );
        assert!(s0.blocks > 4 * 5, "{s0:?}: several blocks per part");

        // Next tick, nothing changed (a new snapshot sharing the hub's Arcs).
        let mut next = (*snap).clone();
        next.tick += 1;
        let again = r.render(Arc::new(next.clone()));
        let s1 = r.stats();
        // Only the ages of the newest samples are written again: they move with the clock.
        assert_eq!(
            (s1.blocks, s1.keys, s1.steps),
            (s0.blocks, s0.keys, s0.steps + 1)
        );
        assert!(text(&again) == render(&next, Format::Text));
        let shared = again
            .chunks
            .iter()
            .zip(&first.chunks)
            .filter(|(a, b)| Arc::ptr_eq(a, b))
            .count();
        assert!(
            shared + 2 >= first.chunks.len(),
            "only the instance chunk and the sample ages are new"
        );

        // One node's usage changes: one block of the usage part, nothing else.
        Arc::make_mut(&mut next.nodes).insert("node-0500".into(), load("node-0500", 0.75));
        let changed = r.render(Arc::new(next.clone()));
        let s2 = r.stats();
        assert_eq!(s2.blocks - s1.blocks, 1, "{s2:?}");
        assert!(
            s2.keys - s1.keys <= 64 * 8,
            "one block's keys: {}",
            s2.keys - s1.keys
        );
        assert_eq!(s2.steps, s1.steps + 1, "the sample ages");
        assert!(text(&changed) == render(&next, Format::Text));
        assert!(text(&changed).contains(
            "kube_prober_node_cpu_utilization_ratio{node=\"node-0500\",window=\"instant\",operator=\"latest\"} 0.75\n"
        ));

        // One node's facts change in a new cluster state: its facts block and the counts.
        let mut cs = (**next.cluster_state.as_ref().unwrap()).clone();
        Arc::make_mut(&mut cs.nodes)[10] = facts("node-0010", false);
        next.cluster_state = Some(Arc::new(cs));
        let changed = r.render(Arc::new(next.clone()));
        let s3 = r.stats();
        assert_eq!(s3.blocks - s2.blocks, 1, "{s3:?}");
        assert_eq!(
            s3.steps - s2.steps,
            2,
            "the cluster counts and the sample ages"
        );
        assert!(text(&changed) == render(&next, Format::Text));

        // Only pods move, the node list is shared (no Node event): the capacity and facts
        // parts are kept whole, no node of them visited; one block of pod sums is written.
        let mut cs = (**next.cluster_state.as_ref().unwrap()).clone();
        cs.node_pods.insert("node-0700".into(), NodePods::default());
        next.cluster_state = Some(Arc::new(cs));
        let changed = r.render(Arc::new(next.clone()));
        let s4 = r.stats();
        // usage, bound, capacity, facts and addons kept; the pod sums not.
        assert_eq!(s4.parts_kept - s3.parts_kept, 5, "{s4:?}");
        assert_eq!(s4.blocks - s3.blocks, 1, "{s4:?}");
        assert_eq!(s4.steps - s3.steps, 1, "the sample ages only: {s4:?}");
        assert!(text(&changed) == render(&next, Format::Text));
    }

    #[test]
    fn a_binding_writes_only_its_nodes_bound_pod_rows() {
        use crate::model::{BoundPod, BoundPods};
        let mut r = Renderer::new(Format::Text);
        let mut snap = cluster(1000);
        r.render(Arc::new(snap.clone()));
        let s0 = r.stats();
        // Nobody has an estimate: no row at all (absent means none).
        assert!(!text(&r.render(Arc::new(snap.clone()))).contains("kube_prober_node_bound_pods"));
        let bound = |pods: usize| {
            Arc::new(BoundPods {
                pods: vec![
                    BoundPod {
                        bound_at: SystemTime::UNIX_EPOCH,
                        cpu_cores: 0.5,
                        memory_bytes: 1e9,
                    };
                    pods
                ],
            })
        };
        Arc::make_mut(&mut snap.bound).insert("node-0500".into(), bound(1));
        let body = text(&r.render(Arc::new(snap.clone())));
        let s1 = r.stats();
        // One block of the estimates' part, and the usage part not even visited.
        assert_eq!((s1.blocks - s0.blocks, s1.families - s0.families), (1, 3));
        assert_eq!(s1.keys - s0.keys, 1);
        assert!(body == render(&snap, Format::Text));
        assert!(body.contains("kube_prober_node_bound_pods{node=\"node-0500\"} 1\n"));
        assert!(body.contains("kube_prober_node_bound_pods_cpu_cores{node=\"node-0500\"} 0.5\n"));

        // A second pod: the same block again; then its usage: the usage block, not the estimate.
        Arc::make_mut(&mut snap.bound).insert("node-0500".into(), bound(2));
        let body = text(&r.render(Arc::new(snap.clone())));
        let s2 = r.stats();
        assert_eq!((s2.blocks - s1.blocks, s2.families - s1.families), (1, 3));
        assert!(body.contains("kube_prober_node_bound_pods{node=\"node-0500\"} 2\n"));
        let mut both = (**snap.nodes.get("node-0500").unwrap()).clone();
        both.latest.insert(Resource::Cpu, 0.75);
        Arc::make_mut(&mut snap.nodes).insert("node-0500".into(), Arc::new(both));
        let body = text(&r.render(Arc::new(snap.clone())));
        let s3 = r.stats();
        assert_eq!(s3.blocks - s2.blocks, 1);
        assert_eq!(
            s3.families - s2.families,
            series::NodeUsage::FAMILIES.len() as u64
        );
        assert!(body == render(&snap, Format::Text));
        // Its estimate gone: its rows go.
        Arc::make_mut(&mut snap.bound).clear();
        let body = text(&r.render(Arc::new(snap.clone())));
        assert!(body == render(&snap, Format::Text));
        assert!(!body.contains("kube_prober_node_bound_pods"));
    }

    #[test]
    fn incremental_bodies_equal_fresh_ones_through_adds_and_removals() {
        for format in [Format::Text, Format::OpenMetrics] {
            let mut r = Renderer::new(format);
            let mut snap = cluster(300);
            assert!(text(&r.render(Arc::new(snap.clone()))) == render(&snap, format));
            // Remove some nodes, add others, change some: every step equals a fresh render.
            for round in 0..6 {
                let gone = format!("node-{:04}", round * 37);
                Arc::make_mut(&mut snap.nodes).remove(gone.as_str());
                let mut cs = (**snap.cluster_state.as_ref().unwrap()).clone();
                Arc::make_mut(&mut cs.nodes).retain(|n| n.name != gone);
                cs.node_pods.remove(gone.as_str());
                let added = format!("node-{:04}x", round * 53);
                Arc::make_mut(&mut cs.nodes).push(facts(&added, round % 2 == 0));
                Arc::make_mut(&mut snap.nodes).insert(added.as_str().into(), load(&added, 0.1));
                let bumped = format!("node-{:04}", round * 41 + 1);
                Arc::make_mut(&mut snap.nodes)
                    .insert(bumped.as_str().into(), load(&bumped, round as f64 / 10.0));
                snap.cluster_state = Some(Arc::new(cs));
                snap.tick += 1;
                let body = r.render(Arc::new(snap.clone()));
                assert!(text(&body) == render(&snap, format), "round {round}");
            }
            // Without a cluster state and then without nodes.
            snap.cluster_state = None;
            assert!(text(&r.render(Arc::new(snap.clone()))) == render(&snap, format));
            Arc::make_mut(&mut snap.nodes).clear();
            assert!(text(&r.render(Arc::new(snap.clone()))) == render(&snap, format));
        }
    }

    /// A node role's snapshot: `pods` tasks of two containers each, pod `bumped` with CPU
    /// `cpu` (every other value fixed), and the platform.
    fn tasks(pods: usize, bumped: usize, cpu: f64) -> Snapshot {
        use crate::model::{
            CgroupStats, ContainerSample, Platform, Pressure, TaskContainer, TaskPod, TaskSample,
            TaskSet,
        };
        let stats = |cpu: f64| CgroupStats {
            cpu_seconds: Some(cpu),
            memory_usage_bytes: Some(1e8),
            memory_limit_bytes: Some(2e8),
            pressure: vec![Pressure {
                resource: "cpu",
                kind: "some",
                seconds: 1.5,
            }],
            ..CgroupStats::default()
        };
        let tasks = (0..pods)
            .map(|i| {
                let pod = Arc::new(TaskPod {
                    uid: format!("uid-{i}"),
                    namespace: "shop".into(),
                    name: format!("pod-{i}"),
                    qos: "burstable".into(),
                    cgroup_ids: vec![format!("uid-{i}")],
                    labels: vec![],
                    containers: ["a", "b"]
                        .iter()
                        .map(|c| TaskContainer {
                            name: (*c).into(),
                            id: Some(format!("{c}{i}")),
                            ready: true,
                        })
                        .collect(),
                    requests: [("cpu".to_string(), 0.25)].into_iter().collect(),
                    limits: Default::default(),
                });
                let cpu = if i == bumped { cpu } else { 1.0 };
                TaskSample {
                    containers: ["a", "b"]
                        .iter()
                        .map(|c| ContainerSample {
                            name: (*c).into(),
                            stats: stats(0.5),
                        })
                        .collect(),
                    pod,
                    stats: Some(stats(cpu)),
                }
            })
            .collect();
        let mut snap = Snapshot::empty(SystemTime::UNIX_EPOCH);
        snap.tasks = Some(Arc::new(TaskSet {
            node: "n1".into(),
            tasks,
            collected_at: Some(SystemTime::UNIX_EPOCH),
        }));
        snap.platform = Some(Arc::new(Platform {
            node: "n1".into(),
            cpus: Some(2),
            cpu_busy_seconds: vec![(0, 5.0), (1, 6.0)],
            ..Platform::default()
        }));
        snap
    }

    /// The body of a snapshot without nodes written step by step in one string, without the
    /// renderer (its reference).
    fn whole(snap: &Snapshot, format: Format) -> String {
        let mut w = Writer {
            out: String::new(),
            format,
        };
        for step in series::steps(snap.cluster_state.is_some()) {
            series::visit_step(step, snap, &mut w);
        }
        w.out
    }

    /// The node's pressure totals share the platform step: a change of theirs alone (the
    /// platform the same `Arc`) is written, never served from the previous body.
    #[test]
    fn a_change_of_the_node_pressure_alone_is_written() {
        use crate::model::{NodePressure, Pressure};
        let pressure = |seconds: f64| {
            Some(Arc::new(NodePressure {
                node: "n1".into(),
                totals: vec![Pressure {
                    resource: "io",
                    kind: "full",
                    seconds,
                }],
            }))
        };
        for format in [Format::Text, Format::OpenMetrics] {
            let mut r = Renderer::new(format);
            let mut snap = tasks(3, 1, 1.0);
            r.render(Arc::new(snap.clone()));
            for seconds in [2.5, 7.25] {
                snap.pressure = pressure(seconds);
                let body = text(&r.render(Arc::new(snap.clone())));
                assert!(body == whole(&snap, format));
                assert!(body.contains(&format!("resource=\"io\",kind=\"full\"}} {seconds}")));
            }
        }
    }

    #[test]
    fn task_families_are_pieces_and_an_unchanged_piece_is_kept() {
        for format in [Format::Text, Format::OpenMetrics] {
            let mut r = Renderer::new(format);
            let snap = tasks(110, 57, 1.0);
            let first = r.render(Arc::new(snap.clone()));
            assert!(text(&first) == whole(&snap, format));
            let s0 = r.stats();
            // No piece near the size of the task text (1.6 MB at 110 pods on a real node).
            let largest = first.chunks.iter().map(|c| c.len()).max().unwrap();
            assert!(largest < 32 * 1024, "largest chunk {largest} B");
            assert!(first.len() > 200 * 1024, "{} B", first.len());

            // Next collection: a new task set in which one pod's CPU moved.
            let next = tasks(110, 57, 2.5);
            let again = r.render(Arc::new(next.clone()));
            assert!(text(&again) == whole(&next, format));
            assert!(text(&again).contains("pod=\"pod-57\",task_name=\"shop/pod-57\""));
            let s1 = r.stats();
            assert_eq!(s1.pieces_written - s0.pieces_written, 1, "{s1:?}");
            // The platform (2 pieces) is the same data: that step is kept whole, unvisited.
            assert_eq!(s1.pieces_kept - s0.pieces_kept, s0.pieces_written - 1 - 2);
            // Every chunk but that piece (and the instance step) is the previous body's own.
            let new_bytes: usize = again
                .chunks
                .iter()
                .filter(|c| !first.chunks.iter().any(|o| Arc::ptr_eq(o, c)))
                .map(|c| c.len())
                .sum();
            assert!(new_bytes < 32 * 1024, "{new_bytes} B new");

            // Pods leaving and coming: still exactly the whole text.
            for (n, bumped) in [(40, 3), (111, 110), (0, 0), (5, 1)] {
                let s = tasks(n, bumped, 9.0);
                assert!(
                    text(&r.render(Arc::new(s.clone()))) == whole(&s, format),
                    "{n}"
                );
            }
        }
    }

    /// A chunk's compressed form keeps no more than it holds (it lives as long as the chunk).
    #[test]
    fn a_deflated_piece_holds_no_spare_room() {
        // Text that compresses well (below the first guess) and noise that does not (past it).
        let text = "kube_prober_node_cpu_usage_ratio{node=\"node-00001\"} 0.25\n".repeat(100);
        let mut x: u32 = 7;
        let noise: Vec<u8> = (0..5000)
            .map(|_| {
                x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                (x >> 16) as u8
            })
            .collect();
        let tasks = whole(&tasks(110, 0, 1.0), Format::Text);
        for data in [
            text.as_bytes(),
            noise.as_slice(),
            tasks.as_bytes(),
            &tasks.as_bytes()[..20_000],
            b"x\n",
        ] {
            let out = deflate_flushed(data);
            assert!(!out.is_empty());
            assert_eq!(out.len(), out.capacity(), "{} bytes in", data.len());
        }
        assert!(deflate_flushed(tasks.as_bytes()).len() < tasks.len() / 4);
    }

    #[test]
    fn gzip_of_chunks_is_one_valid_stream_made_once_per_chunk() {
        use std::io::Read as _;
        let snap = Arc::new(cluster(200));
        let body = Renderer::new(Format::Text).render(snap.clone());
        assert!(!body.is_deflated());
        let extra = [Bytes::from_static(b"extra 1\n"), Bytes::new()];
        let gz: Vec<u8> = body.gzip(&extra).concat();
        assert!(body.is_deflated());
        let mut plain = String::new();
        flate2::read::GzDecoder::new(gz.as_slice())
            .read_to_string(&mut plain)
            .unwrap();
        assert!(plain == render(&snap, Format::Text) + "extra 1\n");
        // The second answer reuses every chunk's compressed bytes.
        let made: Vec<*const u8> = body
            .chunks
            .iter()
            .map(|c| c.deflated().0.as_ptr())
            .collect();
        let again = body.gzip(&[]);
        let kept: Vec<*const u8> = body
            .chunks
            .iter()
            .map(|c| c.deflated().0.as_ptr())
            .collect();
        assert_eq!(made, kept);
        let mut plain2 = Vec::new();
        flate2::read::GzDecoder::new(again.concat().as_slice())
            .read_to_end(&mut plain2)
            .unwrap();
        assert!(plain2 == render(&snap, Format::Text).into_bytes());
        // An empty body is a valid empty stream.
        let mut empty = Vec::new();
        flate2::read::GzDecoder::new(Body::default().gzip(&[]).concat().as_slice())
            .read_to_end(&mut empty)
            .unwrap();
        assert!(empty.is_empty());
    }

    #[test]
    fn answers_go_out_in_frames_of_about_frame_bytes() {
        use std::io::Read as _;
        // Many small chunks, held and compressed, and held ones of a frame's size or more,
        // as a shard's body at 65,000 nodes is a few thousand small compressed chunks.
        let mut text = Vec::new();
        let mut chunks = Vec::new();
        for i in 0..3_000usize {
            let piece: String = (0..(i % 7) * 9 + 1)
                .map(|j| format!("kube_prober_x{{node=\"n-{i}\",j=\"{j}\"}} {}\n", i * j))
                .collect();
            let big = i % 1_000 == 999;
            let piece = if big {
                piece.repeat(FRAME_BYTES / piece.len() + 1)
            } else {
                piece
            };
            text.extend_from_slice(piece.as_bytes());
            chunks.push(if big || i % 3 == 0 {
                Chunk::new(piece.into_bytes())
            } else {
                Chunk::compressed(piece.as_bytes())
            });
        }
        let body = Body { chunks };
        assert!(text.len() > 8 * FRAME_BYTES, "{}", text.len());

        let frames: Vec<Bytes> = body.clone().into_plain().collect();
        assert_eq!(frames.concat(), text);
        // A frame is closed at the first piece that takes it to FRAME_BYTES, so it is under
        // twice that; only the last one and those closed early for a large chunk passed on
        // as it is (three here) are shorter.
        let short = frames.iter().filter(|f| f.len() < FRAME_BYTES).count();
        assert!(short <= 1 + 3, "{short} short frames of {}", frames.len());
        for f in &frames {
            assert!(f.len() < 2 * FRAME_BYTES || body.chunks.iter().any(|c| c.len() == f.len()));
        }
        // A large held chunk goes out as it is (a reference count, no copy).
        let big: Vec<*const u8> = body
            .chunks
            .iter()
            .filter(|c| c.len() >= FRAME_BYTES)
            .map(|c| c.held().as_ptr())
            .collect();
        assert_eq!(big.len(), 3);
        for b in &big {
            assert!(frames.iter().any(|f| f.as_ptr() == *b));
        }

        let gz = body.gzip(&[Bytes::from_static(b"tail 1\n")]);
        assert_eq!(
            body.gzip_whole(&[Bytes::from_static(b"tail 1\n")]),
            gz.concat()
        );
        for f in &gz[..gz.len() - 1] {
            assert!(f.len() >= FRAME_BYTES, "{}", f.len());
        }
        assert!(gz.len() < body.chunks.len() / 50, "{} frames", gz.len());
        let mut plain = Vec::new();
        flate2::read::GzDecoder::new(gz.concat().as_slice())
            .read_to_end(&mut plain)
            .unwrap();
        text.extend_from_slice(b"tail 1\n");
        assert_eq!(plain, text);
    }

    #[test]
    fn counters_are_named_per_format() {
        let snap = Snapshot::empty(SystemTime::UNIX_EPOCH);
        let text = render(&snap, Format::Text);
        assert!(
            text.contains("# TYPE kube_prober_ticks_total counter\nkube_prober_ticks_total 0\n")
        );
        let om = render(&snap, Format::OpenMetrics);
        assert!(om.contains("# TYPE kube_prober_ticks counter\nkube_prober_ticks_total 0\n"));
        let tail = render_tail(&snap, SystemTime::UNIX_EPOCH, Format::OpenMetrics);
        assert!(
            tail.ends_with("kube_prober_snapshot_age_seconds 0\n# EOF\n"),
            "{tail}"
        );
        assert!(tail.contains("# UNIT kube_prober_snapshot_age_seconds seconds\n"));
    }
}
