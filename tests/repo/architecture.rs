//! ARCHITECTURE.md against the tree, so the picture a newcomer reads cannot fall behind it.
//!
//! - Every folder of `src/` is named in ARCHITECTURE.md.
//! - Tests, benches and examples start processes only through `support::owned`.
//! - Every import of the library follows the document's table of layers: a layer imports only
//!   the layers its row's "may import" cell names (all of them below it), sources never import
//!   outputs and outputs never import sources, and inside a layer of rooms (sources, outputs) a
//!   room imports only itself and what the rooms share, but for the exceptions the row states
//!   (`published.rs` renders `prometheus/` and `watcher/`, `push/` reads `published.rs`).
//!
//! The layers are read from the table itself: each row's number, its folder, and the layer
//! names before the `;` of its "may import" cell ("nothing of ours", "every layer below",
//! "everything", or a list such as "shared, model"). What the free text after the `;` says about
//! the rooms of a layer is written out once, in [`ROOMS`], with the row's own words; a test
//! checks those words, every room and shared file it names against the row and against the
//! folder on disk, so neither the document nor this file can change alone.
//!
//! An import is any path into the crate the code writes: `use crate::…`, `use super::…` and
//! `use self::…` (trees expanded), paths through a child module the file declares, the same
//! paths inline in code (`crate::hub::Store::default()`, `super::push_json_string(…)`), and paths
//! written as strings in attributes (`deserialize_with = "crate::…"`). Comments, doc comments
//! and their intra-doc links are not imports. `#[cfg(test)]` code follows the same rules as the
//! rest: ARCHITECTURE.md makes no exception for tests (a violation there is marked
//! `[test code]`). The binary (`main.rs` and the modules it declares) is outside the table; the
//! compiler keeps the library from importing it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

fn folders(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("read a src folder") {
        let p = e.expect("a directory entry").path();
        if p.is_dir() {
            out.push(p.clone());
            folders(&p, out);
        }
    }
}

#[test]
fn every_src_folder_is_in_architecture_md() {
    let root = root();
    let doc = read(&root.join("ARCHITECTURE.md"));
    let mut all = Vec::new();
    folders(&root.join("src"), &mut all);
    let missing: Vec<String> = all
        .iter()
        .map(|p| format!("{}/", p.strip_prefix(root).unwrap_or(p).display()))
        .filter(|name| !doc.contains(name.as_str()))
        .collect();
    assert!(
        !all.is_empty() && missing.is_empty(),
        "ARCHITECTURE.md does not name these folders of src/: {missing:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// The rules: ARCHITECTURE.md's table of layers, and the rooms its free text describes.

/// One row of ARCHITECTURE.md's table of layers.
#[derive(Debug)]
struct Layer {
    number: u32,
    /// Its folders as module paths: `src/sources/` is `["sources"]`.
    folders: Vec<Vec<String>>,
    /// What the other rows call it: its folders' last names (`sources`).
    names: Vec<String>,
    /// The numbers of the layers it may import.
    may_import: BTreeSet<u32>,
    /// Its "what it holds" cell, as written.
    holds: String,
    /// Its "may import" cell, as written: quoted in every message.
    rule: String,
}

impl Layer {
    fn name(&self) -> String {
        self.names.join(", ")
    }
}

const TABLE_HEADER: &str = "| layer | folder | what it holds | may import |";

/// The rows of the table of layers, as trimmed cells.
fn table_rows(doc: &str) -> Vec<Vec<String>> {
    let mut lines = doc.lines().skip_while(|l| l.trim() != TABLE_HEADER);
    assert!(
        lines.next().is_some(),
        "ARCHITECTURE.md has no table headed `{TABLE_HEADER}`"
    );
    let rows: Vec<Vec<String>> = lines
        .map(str::trim)
        .take_while(|l| l.starts_with('|'))
        .filter(|l| !l.starts_with("|---"))
        .map(|l| {
            l.trim_matches('|')
                .split('|')
                .map(|c| c.trim().to_string())
                .collect()
        })
        .collect();
    assert!(
        !rows.is_empty(),
        "ARCHITECTURE.md's table of layers has no rows"
    );
    for r in &rows {
        assert_eq!(
            r.len(),
            4,
            "a row of ARCHITECTURE.md's table of layers has not 4 cells: {r:?}"
        );
    }
    rows
}

/// The pieces of `text` written in backticks.
fn backticked(text: &str) -> impl Iterator<Item = &str> {
    text.split('`').skip(1).step_by(2)
}

/// `src/sources/` as the module path `["sources"]`.
fn folder_path(folder: &str) -> Vec<String> {
    let inner = folder
        .strip_prefix("src/")
        .and_then(|f| f.strip_suffix('/'));
    let inner = inner.unwrap_or_else(|| {
        panic!("ARCHITECTURE.md's table names `{folder}` as a folder; write folders `src/<name>/`")
    });
    inner.split('/').map(String::from).collect()
}

/// ARCHITECTURE.md's table of layers, read.
fn read_layers(doc: &str) -> Vec<Layer> {
    let mut layers: Vec<Layer> = table_rows(doc)
        .into_iter()
        .map(|r| {
            let number = r[0].parse::<u32>().unwrap_or_else(|_| {
                panic!(
                    "`{}` in ARCHITECTURE.md's table of layers is no layer number",
                    r[0]
                )
            });
            let folders: Vec<Vec<String>> = backticked(&r[1]).map(folder_path).collect();
            assert!(
                !folders.is_empty(),
                "layer {number} of ARCHITECTURE.md names no folder"
            );
            let names = folders.iter().filter_map(|f| f.last().cloned()).collect();
            let (holds, rule) = (r[2].clone(), r[3].clone());
            let may_import = BTreeSet::new();
            Layer {
                number,
                folders,
                names,
                may_import,
                holds,
                rule,
            }
        })
        .collect();
    let allowed: Vec<BTreeSet<u32>> = layers.iter().map(|l| may_import(&layers, l)).collect();
    for (layer, allowed) in layers.iter_mut().zip(allowed) {
        layer.may_import = allowed;
    }
    layers
}

/// The layers a row's "may import" cell allows: the words before its `;`.
fn may_import(layers: &[Layer], layer: &Layer) -> BTreeSet<u32> {
    let head = layer
        .rule
        .split_once(';')
        .map_or(layer.rule.as_str(), |(h, _)| h)
        .trim();
    let others = layers
        .iter()
        .map(|l| l.number)
        .filter(|&n| n != layer.number);
    match head {
        "nothing of ours" => BTreeSet::new(),
        "everything" => others.collect(),
        "every layer below" => others.filter(|&n| n < layer.number).collect(),
        list => list
            .split(',')
            .map(str::trim)
            .map(|name| {
                let named = layers.iter().find(|l| l.names.iter().any(|n| n == name));
                named.map(|l| l.number).unwrap_or_else(|| {
                    panic!(
                        "layer {}'s \"may import\" cell in ARCHITECTURE.md names `{name}`, which \
                         is no layer; before its `;` write layer names, \"nothing of ours\", \
                         \"every layer below\" or \"everything\"",
                        layer.number
                    )
                })
            })
            .collect(),
    }
}

fn layers_of_doc() -> Vec<Layer> {
    read_layers(&read(&root().join("ARCHITECTURE.md")))
}

/// A layer whose folder holds rooms, and what its row says about imports between them.
struct Rooms {
    /// The layer, by its name in the table.
    layer: &'static str,
    /// Its rooms: folders (`usage/`) or files (`published.rs`) directly in the layer's folder.
    rooms: &'static [&'static str],
    /// What the rooms share: files every room may import (so may the layer's `mod.rs`).
    shared: &'static [&'static str],
    /// The imports from one room into another that the row allows, as (from, to).
    exceptions: &'static [(&'static str, &'static str)],
    /// The words of the row's "may import" cell that these rooms encode.
    rule: &'static str,
}

/// The table's free text, written out. A room imports its own room, the layer's `mod.rs` and
/// the shared files, and another room only where an exception says so. What the rooms share
/// stands below them: it imports no room (else a room would reach another through it).
const ROOMS: &[Rooms] = &[
    Rooms {
        layer: "sources",
        rooms: &["usage/", "cluster/", "probe/", "task/"],
        shared: &["procfs.rs", "runner.rs"],
        exceptions: &[],
        rule: "never another source",
    },
    Rooms {
        layer: "outputs",
        rooms: &[
            "prometheus/",
            "watcher/",
            "otlp/",
            "gcm/",
            "push/",
            "published.rs",
        ],
        shared: &["families/", "series.rs", "select.rs", "body.rs"],
        exceptions: &[
            ("published.rs", "prometheus/"),
            ("published.rs", "watcher/"),
            ("push/", "published.rs"),
        ],
        rule: "an output imports the shared vocabulary beside it, never another output (but \
               `published.rs`, which renders `prometheus/` and `watcher/` each tick, and \
               `push/`, which reads `published.rs`)",
    },
];

fn rooms_of(layer: &Layer) -> Option<&'static Rooms> {
    ROOMS
        .iter()
        .find(|r| layer.names.iter().any(|n| n == r.layer))
}

/// The entries directly in a folder: `name/` for folders, `name.rs` for Rust files.
fn entries(dir: &Path) -> BTreeSet<String> {
    let read = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display()));
    read.map(|e| {
        e.unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
            .path()
    })
    .filter_map(|p| {
        let name = p.file_name()?.to_str()?.to_string();
        if p.is_dir() {
            Some(format!("{name}/"))
        } else {
            name.ends_with(".rs").then_some(name)
        }
    })
    .collect()
}

#[test]
fn the_table_of_layers_reads_and_points_down() {
    let layers = layers_of_doc();
    let mut wrong = Vec::new();
    for (row, l) in layers.iter().enumerate() {
        if l.number as usize != row + 1 {
            wrong.push(format!(
                "layer {} is row {} of the table; number rows 1, 2, ...",
                l.number,
                row + 1
            ));
        }
        if let Some(up) = l.may_import.iter().find(|&&n| n >= l.number) {
            let rule = &l.rule;
            wrong.push(format!(
                "layer {} ({}) may import layer {up}, not below it: imports go down the layers (\"{rule}\")",
                l.number,
                l.name()
            ));
        }
        for f in &l.folders {
            if !root().join("src").join(f.join("/")).is_dir() {
                wrong.push(format!(
                    "layer {}'s folder src/{}/ is not in the tree",
                    l.number,
                    f.join("/")
                ));
            }
        }
    }
    for e in entries(&root().join("src"))
        .iter()
        .filter_map(|e| e.strip_suffix('/'))
    {
        if !layers
            .iter()
            .any(|l| l.folders.iter().any(|f| f.len() == 1 && f[0] == e))
        {
            wrong.push(format!(
                "src/{e}/ is the folder of no layer in ARCHITECTURE.md's table"
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "ARCHITECTURE.md's table of layers:\n{}",
        wrong.join("\n")
    );
}

/// Where `ROOMS` and the row of its layer (or the folder on disk) disagree.
fn room_drift(r: &Rooms, l: &Layer) -> Vec<String> {
    let mut drift = Vec::new();
    let at = format!("layer {} ({})", l.number, l.name());
    if !l.rule.contains(r.rule) {
        drift.push(format!(
            "{at}: its \"may import\" cell no longer says \"{}\"",
            r.rule
        ));
    }
    let quoted: BTreeSet<&str> = backticked(&l.holds).chain(backticked(&l.rule)).collect();
    let exceptions = r.exceptions.iter().flat_map(|(a, b)| [a, b]);
    for name in r.rooms.iter().chain(r.shared).chain(exceptions) {
        if !quoted.contains(name) {
            drift.push(format!(
                "{at}: ROOMS names `{name}`, which its row does not quote"
            ));
        }
    }
    for folder in l.folders.iter().map(|f| f.join("/")) {
        let on_disk = entries(&root().join("src").join(&folder));
        for e in on_disk.iter().filter(|e| *e != "mod.rs") {
            if !r.rooms.contains(&e.as_str()) && !r.shared.contains(&e.as_str()) {
                drift.push(format!(
                    "src/{folder}/{e} is neither a room nor shared in ROOMS: say in \
                     ARCHITECTURE.md's table what it is, then here"
                ));
            }
        }
        for name in r.rooms.iter().chain(r.shared) {
            if !on_disk.contains(*name) {
                drift.push(format!(
                    "{at}: ROOMS names `{name}`, which src/{folder}/ has not"
                ));
            }
        }
    }
    drift
}

#[test]
fn the_rooms_written_here_are_architecture_mds() {
    let layers = layers_of_doc();
    let mut drift = Vec::new();
    for l in layers.iter().filter(|l| l.holds.contains("one room per")) {
        if rooms_of(l).is_none() {
            let at = format!("layer {} ({})", l.number, l.name());
            drift.push(format!(
                "{at} holds rooms, says ARCHITECTURE.md, but ROOMS does not list it"
            ));
        }
    }
    for r in ROOMS {
        match layers.iter().find(|l| l.names.iter().any(|n| n == r.layer)) {
            Some(l) => drift.extend(room_drift(r, l)),
            None => drift.push(format!(
                "ROOMS names the layer `{}`, not in the table",
                r.layer
            )),
        }
    }
    assert!(
        drift.is_empty(),
        "ROOMS in tests/repo/architecture.rs and ARCHITECTURE.md disagree:\n{}",
        drift.join("\n")
    );
}

// ---------------------------------------------------------------------------------------------
// Reading the code: tokens without comments, then the paths into the crate.

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    /// `::`
    Sep,
    Punct(char),
    /// A string literal's contents.
    Str(String),
}

struct Token {
    tok: Tok,
    line: usize,
}

/// The end of the block comment (nested ones too) that starts at `i`.
fn block_comment_end(c: &[char], i: usize) -> usize {
    let (mut depth, mut k) = (0usize, i);
    while k + 1 < c.len() {
        match (c[k], c[k + 1]) {
            ('/', '*') => (depth, k) = (depth + 1, k + 2),
            ('*', '/') => {
                (depth, k) = (depth - 1, k + 2);
                if depth == 0 {
                    return k;
                }
            }
            _ => k += 1,
        }
    }
    c.len()
}

/// The string literal starting at `i` (`"…"`, `b"…"`, `r#"…"#`, `br"…"`, `c"…"`): its contents
/// and where it ends.
fn string_at(c: &[char], i: usize) -> Option<(String, usize)> {
    let mut j = i;
    if matches!(c.get(j), Some('b' | 'c')) {
        j += 1;
    }
    let raw = c.get(j) == Some(&'r');
    if raw {
        j += 1;
    }
    let hashes = c.get(j..)?.iter().take_while(|&&x| x == '#').count();
    if (hashes > 0 && !raw) || c.get(j + hashes) != Some(&'"') {
        return None;
    }
    let open = j + hashes;
    let mut k = open + 1;
    loop {
        match c.get(k)? {
            '\\' if !raw => k += 2,
            '"' if c
                .get(k + 1..k + 1 + hashes)
                .is_some_and(|h| h.iter().all(|&x| x == '#')) =>
            {
                return Some((c[open + 1..k].iter().collect(), k + 1 + hashes));
            }
            _ => k += 1,
        }
    }
}

/// The end of the char literal at `i`, or of a lifetime's quote.
fn quote_end(c: &[char], i: usize) -> usize {
    match (c.get(i + 1), c.get(i + 2)) {
        (Some('\\'), _) => {
            let close = c
                .get(i + 3..)
                .and_then(|rest| rest.iter().position(|&x| x == '\''));
            close.map_or(c.len(), |n| i + 3 + n + 1)
        }
        (Some(_), Some('\'')) => i + 3,
        _ => i + 1,
    }
}

/// Rust source as tokens, without comments, whitespace, char literals and lifetimes' quotes.
fn lex(src: &str) -> Vec<Token> {
    let c: Vec<char> = src.chars().collect();
    let (mut i, mut line, mut out) = (0, 1, Vec::new());
    while let Some(&ch) = c.get(i) {
        let (start, next) = (i, c.get(i + 1).copied());
        let tok = if ch == '/' && next == Some('/') {
            i = c[i..]
                .iter()
                .position(|&x| x == '\n')
                .map_or(c.len(), |n| i + n);
            None
        } else if ch == '/' && next == Some('*') {
            i = block_comment_end(&c, i);
            None
        } else if let Some((body, end)) = string_at(&c, i) {
            i = end;
            Some(Tok::Str(body))
        } else if ch == '\'' || (ch == 'b' && next == Some('\'')) {
            i = quote_end(&c, if ch == 'b' { i + 1 } else { i });
            None
        } else if ch.is_alphanumeric() || ch == '_' {
            while c.get(i).is_some_and(|x| x.is_alphanumeric() || *x == '_') {
                i += 1;
            }
            Some(Tok::Ident(c[start..i].iter().collect()))
        } else if ch == ':' && next == Some(':') {
            i += 2;
            Some(Tok::Sep)
        } else {
            i += 1;
            (!ch.is_whitespace()).then_some(Tok::Punct(ch))
        };
        if let Some(tok) = tok {
            out.push(Token { tok, line });
        }
        line += c[start..i].iter().filter(|&&x| x == '\n').count();
    }
    out
}

/// One leaf of a `use` tree: its path as written, the name it brings in, and its line.
struct Leaf {
    segs: Vec<String>,
    name: String,
    line: usize,
}

/// Reads one `use` tree from `t[*i]` on, below `prefix`, into leaves.
fn use_tree(t: &[Token], i: &mut usize, prefix: &[String], out: &mut Vec<Leaf>) {
    let mut segs = prefix.to_vec();
    let (mut line, mut alias, mut any) = (0, None, false);
    while let Some(tok) = t.get(*i) {
        match &tok.tok {
            Tok::Ident(w) if w == "as" => {
                alias = match t.get(*i + 1).map(|n| &n.tok) {
                    Some(Tok::Ident(a)) => Some(a.clone()),
                    _ => None,
                };
                *i += 2;
            }
            Tok::Ident(w) => {
                // `{self, X}` names the prefix itself; a leading `self::` is the current module.
                if w != "self" || segs.is_empty() {
                    segs.push(w.clone());
                }
                (line, any) = (tok.line, true);
                *i += 1;
            }
            Tok::Sep | Tok::Punct('$') => *i += 1,
            Tok::Punct('*') => {
                (line, any) = (tok.line, true);
                *i += 1;
            }
            Tok::Punct('{') => {
                *i += 1;
                use_list(t, i, &segs, out);
                return;
            }
            _ => break,
        }
    }
    if any {
        let name = alias.or_else(|| segs.last().cloned()).unwrap_or_default();
        out.push(Leaf { segs, name, line });
    }
}

/// Reads the trees of a `{…}` list, up to and past its `}`.
fn use_list(t: &[Token], i: &mut usize, prefix: &[String], out: &mut Vec<Leaf>) {
    while let Some(tok) = t.get(*i) {
        match &tok.tok {
            Tok::Punct('}') => {
                *i += 1;
                return;
            }
            Tok::Punct(',') => *i += 1,
            _ => {
                let before = *i;
                use_tree(t, i, prefix, out);
                if *i == before {
                    *i += 1;
                }
            }
        }
    }
}

/// A path the source writes, and where.
struct Mention {
    line: usize,
    /// Its segments as written (`super`, `select`).
    segs: Vec<String>,
    /// How it is written, for messages.
    shown: String,
    /// The name it brings in (a `use` leaf's alias or last segment).
    name: String,
    is_use: bool,
    /// The module it is written in.
    scope: Vec<String>,
}

/// What one file says about the crate's modules.
#[derive(Default)]
struct FileScan {
    mentions: Vec<Mention>,
    /// The modules it declares (`mod x;`, `mod x { … }`), and whether under `#[cfg(test)]`.
    modules: Vec<(Vec<String>, bool)>,
    /// The macros it exports at the crate's root (`#[macro_export]`), with their module.
    macros: Vec<(String, Vec<String>)>,
}

struct Scanner<'a> {
    toks: &'a [Token],
    i: usize,
    file: &'a [String],
    /// One entry per open brace: the inline module it opens, if any.
    braces: Vec<Option<String>>,
    /// The outer attributes read since the last item boundary, as text (`cfg(test)`).
    attrs: Vec<String>,
    /// `mod name` read, its `{` not yet.
    pending_mod: Option<String>,
    out: FileScan,
}

fn tok_text(t: &Tok) -> String {
    match t {
        Tok::Ident(s) => s.clone(),
        Tok::Sep => "::".into(),
        Tok::Punct(c) => c.to_string(),
        Tok::Str(s) => format!("{s:?}"),
    }
}

/// Reads every path into the crate that a file of module `file` writes.
fn scan(text: &str, file: &[String]) -> FileScan {
    let toks = lex(text);
    let mut s = Scanner {
        toks: &toks,
        i: 0,
        file,
        braces: Vec::new(),
        attrs: Vec::new(),
        pending_mod: None,
        out: FileScan::default(),
    };
    while s.i < toks.len() {
        s.step();
    }
    s.out
}

impl<'a> Scanner<'a> {
    fn tok(&self, k: usize) -> Option<&'a Tok> {
        self.toks.get(k).map(|t| &t.tok)
    }

    fn scope(&self) -> Vec<String> {
        self.file
            .iter()
            .chain(self.braces.iter().flatten())
            .cloned()
            .collect()
    }

    fn step(&mut self) {
        let Some(tok) = self.tok(self.i) else { return };
        match tok {
            Tok::Punct('#') => self.attribute(),
            Tok::Ident(w) if w == "use" => self.use_decl(),
            Tok::Ident(w) if w == "mod" => self.mod_decl(),
            Tok::Ident(_) if self.path_start() => self.inline_path(),
            _ => {
                self.boundary(tok);
                self.i += 1;
            }
        }
    }

    /// Braces open and close scopes (an inline module's, or a plain block); `{`, `}` and `;`
    /// end an item, and with it the attributes read before it.
    fn boundary(&mut self, tok: &Tok) {
        match tok {
            Tok::Punct('{') => {
                let module = self.pending_mod.take();
                self.braces.push(module);
            }
            Tok::Punct('}') => {
                self.braces.pop();
                self.pending_mod = None;
            }
            Tok::Punct(';') => self.pending_mod = None,
            Tok::Ident(w) if w == "macro_rules" => {
                self.macro_decl();
                return;
            }
            _ => return,
        }
        self.attrs.clear();
    }

    fn record(
        &mut self,
        segs: Vec<String>,
        shown: String,
        line: usize,
        name: String,
        is_use: bool,
    ) {
        let scope = self.scope();
        self.out.mentions.push(Mention {
            line,
            segs,
            shown,
            name,
            is_use,
            scope,
        });
    }

    /// `#[…]`: kept as text for the next item; a path written as a string in it is a mention.
    fn attribute(&mut self) {
        let inner = self.tok(self.i + 1) == Some(&Tok::Punct('!'));
        let mut k = self.i + if inner { 2 } else { 1 };
        if self.tok(k) != Some(&Tok::Punct('[')) {
            self.i += 1;
            return;
        }
        let (toks, mut depth, mut text) = (self.toks, 0usize, String::new());
        while let Some(t) = toks.get(k) {
            k += 1;
            match &t.tok {
                Tok::Punct('[') if depth == 0 => {
                    depth = 1;
                    continue;
                }
                Tok::Punct('[') => depth += 1,
                Tok::Punct(']') if depth == 1 => break,
                Tok::Punct(']') => depth -= 1,
                Tok::Str(s) => self.string_path(s, t.line),
                _ => {}
            }
            text.push_str(&tok_text(&t.tok));
        }
        if !inner {
            self.attrs.push(text);
        }
        self.i = k;
    }

    fn string_path(&mut self, s: &str, line: usize) {
        let segs: Vec<String> = s.split("::").map(String::from).collect();
        let idents = segs
            .iter()
            .all(|x| !x.is_empty() && x.chars().all(|c| c.is_alphanumeric() || c == '_'));
        if segs.len() >= 2 && idents && ["crate", "super", "self"].contains(&segs[0].as_str()) {
            let name = segs.last().cloned().unwrap_or_default();
            self.record(segs, format!("\"{s}\""), line, name, false);
        }
    }

    fn use_decl(&mut self) {
        let start = self.i + 1;
        let len = self.toks[start..]
            .iter()
            .position(|t| t.tok == Tok::Punct(';'));
        let end = len.map_or(self.toks.len(), |n| start + n);
        let mut leaves = Vec::new();
        let mut k = 0;
        while k < end - start {
            let before = k;
            use_tree(&self.toks[start..end], &mut k, &[], &mut leaves);
            k = k.max(before + 1);
        }
        for leaf in leaves {
            let shown = format!("use {}", leaf.segs.join("::"));
            self.record(leaf.segs, shown, leaf.line, leaf.name, true);
        }
        self.attrs.clear();
        self.i = end + 1;
    }

    fn mod_decl(&mut self) {
        if let Some(Tok::Ident(name)) = self.tok(self.i + 1) {
            let mut path = self.scope();
            path.push(name.clone());
            let test = self.attrs.iter().any(|a| a == "cfg(test)");
            self.out.modules.push((path, test));
            if self.tok(self.i + 2) == Some(&Tok::Punct('{')) {
                self.pending_mod = Some(name.clone());
            }
        }
        self.i += 2;
    }

    fn macro_decl(&mut self) {
        if let Some(Tok::Ident(name)) = self.tok(self.i + 2)
            && self.attrs.iter().any(|a| a == "macro_export")
        {
            let scope = self.scope();
            self.out.macros.push((name.clone(), scope));
        }
    }

    /// An identifier that starts a path: not after `::`, followed by `::` and a name.
    fn path_start(&self) -> bool {
        let after_sep = self.i > 0 && self.tok(self.i - 1) == Some(&Tok::Sep);
        let sep_next = self.tok(self.i + 1) == Some(&Tok::Sep);
        !after_sep && sep_next && matches!(self.tok(self.i + 2), Some(Tok::Ident(_)))
    }

    fn inline_path(&mut self) {
        let line = self.toks[self.i].line;
        let mut segs = Vec::new();
        while let Some(Tok::Ident(w)) = self.tok(self.i) {
            segs.push(w.clone());
            self.i += 1;
            if self.tok(self.i) != Some(&Tok::Sep)
                || !matches!(self.tok(self.i + 1), Some(Tok::Ident(_)))
            {
                break;
            }
            self.i += 1;
        }
        let lower = segs[0].starts_with(|c: char| c.is_lowercase());
        if lower {
            let (shown, name) = (segs.join("::"), segs.last().cloned().unwrap_or_default());
            self.record(segs, shown, line, name, false);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The crate: its files, their modules, and where each path leads.

struct SrcFile {
    /// `src/hub/store.rs`
    rel: String,
    text: String,
}

/// The module path of a file: `src/hub/mod.rs` and `src/hub.rs` are `["hub"]`, `src/lib.rs` `[]`.
fn module_of(rel: &str) -> Vec<String> {
    let inner = rel.strip_prefix("src/").and_then(|r| r.strip_suffix(".rs"));
    let inner = inner.unwrap_or_else(|| panic!("{rel} is no Rust file under src/"));
    let mut segs: Vec<String> = inner.split('/').map(String::from).collect();
    if segs.last().is_some_and(|s| s == "mod") || segs == ["lib"] {
        segs.pop();
    }
    segs
}

fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let read = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display()));
    for e in read {
        let p = e
            .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
            .path();
        if p.is_dir() {
            rs_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Every file of the library: all of `src/` but `main.rs` and the modules it declares.
fn library_files() -> Vec<SrcFile> {
    let src = root().join("src");
    let binary = scan(&read(&src.join("main.rs")), &[]);
    let mut paths = Vec::new();
    rs_files(&src, &mut paths);
    paths.sort();
    paths
        .into_iter()
        .map(|p| {
            let rel = p
                .strip_prefix(root())
                .expect("a file under the crate's root");
            let rel = rel
                .to_str()
                .expect("a UTF-8 path under src/")
                .replace('\\', "/");
            (rel, p)
        })
        .filter(|(rel, _)| {
            let module = module_of(rel);
            rel != "src/main.rs" && !binary.modules.iter().any(|(m, _)| module.starts_with(m))
        })
        .map(|(rel, p)| SrcFile {
            rel,
            text: read(&p),
        })
        .collect()
}

#[derive(Default)]
struct Crate {
    files: Vec<(String, FileScan)>,
    modules: BTreeSet<Vec<String>>,
    test_modules: BTreeSet<Vec<String>>,
    /// What `crate::<name>` means when `name` is no module: `lib.rs`'s re-exports and the
    /// exported macros.
    root_names: BTreeMap<String, Vec<String>>,
}

impl Crate {
    fn scan(files: &[SrcFile]) -> Crate {
        let mut c = Crate::default();
        for f in files {
            let scan = scan(&f.text, &module_of(&f.rel));
            for (m, test) in &scan.modules {
                c.modules.insert(m.clone());
                if *test {
                    c.test_modules.insert(m.clone());
                }
            }
            for (name, module) in &scan.macros {
                c.root_names.insert(name.clone(), module.clone());
            }
            c.files.push((f.rel.clone(), scan));
        }
        let lib = c.files.iter().find(|(rel, _)| rel == "src/lib.rs");
        let reexports =
            lib.map(|(_, s)| s.mentions.iter().filter(|m| m.is_use && m.scope.is_empty()));
        let names: Vec<(String, Vec<String>)> = reexports
            .into_iter()
            .flatten()
            .filter_map(|m| Some((m.name.clone(), c.resolve(m)?)))
            .collect();
        c.root_names.extend(names);
        c
    }

    /// Where a mention leads, from the crate's root; `None` for paths out of the crate.
    fn resolve(&self, m: &Mention) -> Option<Vec<String>> {
        let (first, rest) = m.segs.split_first()?;
        let mut path = match first.as_str() {
            "crate" => return Some(self.rooted(rest)),
            "self" => m.scope.clone(),
            "super" => {
                let mut p = m.scope.clone();
                p.pop()?;
                p
            }
            _ => {
                let child: Vec<String> = m.scope.iter().chain([first]).cloned().collect();
                self.modules.contains(&child).then_some(child)?
            }
        };
        for s in rest {
            match s.as_str() {
                "super" => {
                    path.pop()?;
                }
                _ => path.push(s.clone()),
            }
        }
        Some(path)
    }

    /// A path written from `crate::`, through `lib.rs`'s re-exports and the exported macros.
    fn rooted(&self, rest: &[String]) -> Vec<String> {
        match rest.split_first() {
            Some((first, tail)) if !self.modules.contains(std::slice::from_ref(first)) => {
                match self.root_names.get(first) {
                    Some(p) => p.iter().chain(tail).cloned().collect(),
                    None => rest.to_vec(),
                }
            }
            _ => rest.to_vec(),
        }
    }

    fn in_test(&self, scope: &[String]) -> bool {
        (1..=scope.len()).any(|n| self.test_modules.contains(&scope[..n]))
    }
}

// ---------------------------------------------------------------------------------------------
// The check.

/// Where a module sits in the table: its layer, and its part of a layer of rooms.
#[derive(Clone, Debug, PartialEq)]
struct Place {
    layer: usize,
    part: Part,
}

#[derive(Clone, Debug, PartialEq)]
enum Part {
    Whole,
    Room(&'static str),
    /// What the rooms share: a shared file, or the layer's `mod.rs`.
    Shared(&'static str),
}

/// The part of a layer of rooms that its child `next` (none: the layer's `mod.rs`) is.
fn part_in(r: &'static Rooms, next: Option<&String>) -> Part {
    let Some(name) = next else {
        return Part::Shared("mod.rs");
    };
    let (dir, file) = (format!("{name}/"), format!("{name}.rs"));
    if let Some(room) = r.rooms.iter().find(|x| **x == dir || **x == file).copied() {
        return Part::Room(room);
    }
    // Not a shared file: an item of the layer's `mod.rs` (`crate::outputs::Sink`).
    Part::Shared(
        r.shared
            .iter()
            .find(|x| **x == file)
            .copied()
            .unwrap_or("mod.rs"),
    )
}

fn place(layers: &[Layer], module: &[String]) -> Option<Place> {
    let folders = layers
        .iter()
        .enumerate()
        .flat_map(|(i, l)| l.folders.iter().map(move |f| (i, l, f)));
    let (layer, l, folder) = folders
        .filter(|(_, _, f)| module.starts_with(f))
        .max_by_key(|(_, _, f)| f.len())?;
    let part = rooms_of(l).map_or(Part::Whole, |r| part_in(r, module.get(folder.len())));
    Some(Place { layer, part })
}

/// The rule an import from `from` to `to` breaks, quoting ARCHITECTURE.md.
fn broken_rule(layers: &[Layer], from: &Place, to: &Place) -> Option<String> {
    let (a, b) = (&layers[from.layer], &layers[to.layer]);
    if from.layer != to.layer {
        return (!a.may_import.contains(&b.number)).then(|| {
            let (an, bn) = (a.name(), b.name());
            format!(
                "{an} (layer {}) may not import {bn} (layer {}): ARCHITECTURE.md says {an} may \
                 import \"{}\"",
                a.number, b.number, a.rule
            )
        });
    }
    let rooms = rooms_of(a)?;
    let quote = format!(
        "ARCHITECTURE.md says {} may import \"{}\"",
        a.name(),
        a.rule
    );
    match (&from.part, &to.part) {
        (Part::Room(x), Part::Room(y)) if x == y || rooms.exceptions.contains(&(*x, *y)) => None,
        (Part::Room(x), Part::Room(y)) => Some(format!(
            "the room `{x}` of {} may not import the room `{y}`: {quote}",
            a.name()
        )),
        (Part::Shared(x), Part::Room(y)) => Some(format!(
            "`{x}` is what the rooms of {} share, below them, and may not import the room `{y}` \
             (else rooms reach each other through it): {quote}",
            a.name()
        )),
        _ => None,
    }
}

/// Every import of the crate against the table, as messages; and how many imports were read.
fn violations(layers: &[Layer], krate: &Crate) -> (Vec<String>, usize) {
    let (mut out, mut read) = (Vec::new(), 0);
    for (rel, scan) in krate.files.iter().filter(|(rel, _)| rel != "src/lib.rs") {
        let Some(from) = place(layers, &module_of(rel)) else {
            out.push(format!("{rel}: in no layer of ARCHITECTURE.md's table"));
            continue;
        };
        for m in &scan.mentions {
            let Some(path) = krate.resolve(m) else {
                continue;
            };
            read += 1;
            let target = format!("crate::{}", path.join("::"));
            let shown = if m.shown.contains(&target) {
                format!("`{}`", m.shown)
            } else {
                format!("`{}` (= {target})", m.shown)
            };
            let test = if krate.in_test(&m.scope) {
                " [test code]"
            } else {
                ""
            };
            let at = format!("{rel}:{}: {shown}{test}", m.line);
            match place(layers, &path) {
                None => out.push(format!(
                    "{at}: {target} is in no layer of ARCHITECTURE.md's table"
                )),
                Some(to) => {
                    out.extend(broken_rule(layers, &from, &to).map(|r| format!("{at}: {r}")))
                }
            }
        }
    }
    (out, read)
}

#[test]
fn imports_follow_the_layers_of_architecture_md() {
    let layers = layers_of_doc();
    let krate = Crate::scan(&library_files());
    let (found, read) = violations(&layers, &krate);
    assert!(
        read > 100,
        "only {read} imports into the crate read: the scanner is broken"
    );
    assert!(
        found.is_empty(),
        "{} import(s) against ARCHITECTURE.md's table of layers:\n{}",
        found.len(),
        found.join("\n")
    );
}

/// The check itself, on made-up files: what breaks a rule is reported with its file, line and
/// rule; what does not (comments, strings, allowed imports) is not.
#[test]
fn forbidden_imports_are_reported() {
    let file = |rel: &str, text: &str| SrcFile {
        rel: rel.into(),
        text: text.into(),
    };
    let files = [
        file(
            "src/sources/usage/fake.rs",
            "//! [`crate::outputs::families`] in a doc comment is no import\n\
             use crate::hub::Provider;\n\
             use crate::outputs::{families, series::Labels};\n\
             use super::super::cluster::derive;\n\
             use super::super::procfs::CpuStat;\n\
             fn g() -> (char, &'static str) { ('\"', \"use crate::outputs::families;\") }\n\
             const R: &str = r#\"crate::outputs::families\"#; /* crate::outputs::x */\n\
             #[serde(deserialize_with = \"crate::outputs::select::x\")]\n\
             struct S;\n",
        ),
        file(
            "src/outputs/otlp/fake.rs",
            "fn f() { crate::outputs::gcm::connect(); crate::outputs::families::x(); }\n\
             #[cfg(test)]\n\
             mod tests {\n\
             \x20   use super::super::super::prometheus::Format;\n\
             \x20   use crate::outputs::published::Published;\n\
             }\n",
        ),
        file(
            "src/outputs/push/fake.rs",
            "use crate::outputs::published::Published;\nuse crate::hub::Store;\n",
        ),
        file(
            "src/outputs/families/mod.rs",
            "use super::otlp::X;\nuse super::series;\n",
        ),
    ];
    let (found, _) = violations(&layers_of_doc(), &Crate::scan(&files));
    let at: Vec<&str> = found
        .iter()
        .map(|f| f.split(": ").next().unwrap_or_default())
        .collect();
    let want = [
        "src/sources/usage/fake.rs:3",
        "src/sources/usage/fake.rs:3",
        "src/sources/usage/fake.rs:4",
        "src/sources/usage/fake.rs:8",
        "src/outputs/otlp/fake.rs:1",
        "src/outputs/otlp/fake.rs:4",
        "src/outputs/otlp/fake.rs:5",
        "src/outputs/families/mod.rs:1",
    ];
    assert_eq!(at, want, "reported:\n{}", found.join("\n"));
    let never = "shared, model, hub, k8s; never another source, an output or config";
    assert!(
        found[0].contains("`use crate::outputs::families`") && found[0].contains(never),
        "{}",
        found[0]
    );
    assert!(
        found[2].contains("room `usage/`") && found[2].contains("room `cluster/`"),
        "{}",
        found[2]
    );
    assert!(
        found[5].contains("[test code]") && found[5].contains("never another output"),
        "{}",
        found[5]
    );
}

/// The code of `text`, its `//` comments and doc comments left out (a name in a comment is no
/// call).
fn code_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.split("//").next().unwrap_or("")))
}

/// What only the source runner (`src/sources/runner.rs`) may write in the library, and why.
const RUNNER_ONLY: &[(&str, &str)] = &[
    (
        "record_source_run(",
        "a source run reaches the hub through sources::runner::record or SourceRun",
    ),
    (
        "register_source(",
        "a periodic source registers through SourceRun::register",
    ),
    (
        "time::interval(",
        "a loop is paced by sources::runner::Pace",
    ),
    (
        "MissedTickBehavior",
        "a loop is paced by sources::runner::Pace",
    ),
];

/// Every source runs through the one runner: no source records a run, registers itself or
/// paces its loop but through `src/sources/runner.rs` (the hub declares and implements the
/// recorder; the push runner of the outputs paces the pushes).
#[test]
fn every_source_runs_through_the_one_runner() {
    let mut files = Vec::new();
    rs_files(&root().join("src/sources"), &mut files);
    rs_files(&root().join("src/app"), &mut files);
    assert!(files.len() > 20, "the sources' files are read");
    let mut found = Vec::new();
    for path in &files {
        if path.ends_with("sources/runner.rs") {
            continue;
        }
        let text = read(path);
        for (n, line) in code_lines(&text) {
            for (needle, why) in RUNNER_ONLY {
                if line.contains(needle) {
                    found.push(format!("{}:{n}: `{needle}`: {why}", path.display()));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "outside the source runner:\n{}",
        found.join("\n")
    );
    let runner = read(&root().join("src/sources/runner.rs"));
    for (needle, _) in RUNNER_ONLY {
        assert!(
            code_lines(&runner).any(|(_, l)| l.contains(needle)),
            "the runner itself no longer writes `{needle}`: update this test"
        );
    }
}

/// Every process a test, bench or example starts goes through `support::owned`
/// (tests/support/owned.rs), which ends it with the test process however that ends: nowhere
/// else does a `Command` spawn itself (a `Command`'s `.output()` or `.status()` of a quick local
/// tool, which ends within the call, may still run directly).
#[test]
fn only_support_owned_spawns_processes() {
    // Written in two pieces, so that this file does not find itself.
    const SPAWN: &str = concat!(".spawn", "()");
    let owned = root().join("tests/support/owned.rs");
    let mut files = Vec::new();
    for dir in ["tests", "benches", "examples"] {
        rs_files(&root().join(dir), &mut files);
    }
    assert!(files.len() > 50, "the tests' and benches' files are read");
    let mut found = Vec::new();
    for path in files.iter().filter(|p| **p != owned) {
        for (n, line) in code_lines(&read(path)) {
            if line.contains(SPAWN) {
                found.push(format!("{}:{n}: {}", path.display(), line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "start processes with support::owned::spawn (or spawn_owned, output), not `{SPAWN}`:\n{}",
        found.join("\n")
    );
    assert!(
        code_lines(&read(&owned)).any(|(_, l)| l.contains(SPAWN)),
        "tests/support/owned.rs itself no longer writes `{SPAWN}`: update this test"
    );
}
