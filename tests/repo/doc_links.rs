//! Every relative link in README.md, ARCHITECTURE.md and docs/*.md points at a file that exists,
//! and every `#anchor` at a heading of that file (GitHub's heading slugs), so moving a section
//! between pages cannot leave a dead link behind.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The pages checked: the top-level Markdown files and everything under docs/.
fn pages() -> Vec<PathBuf> {
    let mut out = Vec::new();
    for dir in [root(), root().join("docs")] {
        for e in std::fs::read_dir(&dir).expect("read a docs folder") {
            let p = e.expect("a directory entry").path();
            if p.extension().is_some_and(|x| x == "md") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// GitHub's anchor for a heading: lower case, punctuation other than `-` and `_` removed,
/// spaces turned into `-`; a repeated heading gets `-1`, `-2`, ...
fn slugs(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        }
        let Some(title) = line.strip_prefix('#').filter(|_| !fenced) else {
            continue;
        };
        let title = title.trim_start_matches('#').trim();
        let slug: String = title
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let n = seen.entry(slug.clone()).or_insert(0);
        out.insert(if *n == 0 {
            slug.clone()
        } else {
            format!("{slug}-{n}")
        });
        *n += 1;
    }
    out
}

/// The targets of the inline links `[text](target)` outside code blocks and code spans.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        // Drop code spans, whose brackets are code, not links.
        let plain: String = line.split('`').step_by(2).collect::<Vec<_>>().join(" ");
        let mut rest = plain.as_str();
        while let Some(i) = rest.find("](") {
            let after = &rest[i + 2..];
            let Some(end) = after.find(')') else { break };
            out.push(after[..end].to_string());
            rest = &after[end..];
        }
    }
    out
}

fn check(page: &Path, target: &str) -> Option<String> {
    if target.contains("://") || target.starts_with("mailto:") {
        return None;
    }
    let (file, anchor) = target.split_once('#').unwrap_or((target, ""));
    let dest = if file.is_empty() {
        page.to_path_buf()
    } else {
        page.parent().expect("a page's folder").join(file)
    };
    if !dest.exists() {
        return Some(format!("{target}: no file {}", dest.display()));
    }
    if anchor.is_empty() || dest.extension().is_none_or(|x| x != "md") {
        return None;
    }
    let text = std::fs::read_to_string(&dest).expect("read the linked page");
    (!slugs(&text).contains(anchor)).then(|| format!("{target}: no heading #{anchor}"))
}

#[test]
fn every_relative_link_and_anchor_in_the_docs_resolves() {
    let mut dead = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).expect("read a page");
        for target in links(&text) {
            if let Some(why) = check(&page, &target) {
                let name = page.strip_prefix(root()).unwrap_or(&page).display();
                dead.push(format!("{name}: {why}"));
            }
        }
    }
    assert!(dead.is_empty(), "dead links:\n{}", dead.join("\n"));
}

#[test]
fn the_checker_sees_a_dead_anchor_and_a_missing_file() {
    let readme = root().join("README.md");
    assert!(check(&readme, "docs/metrics.md").is_none());
    assert!(check(&readme, "docs/no-such-page.md").is_some());
    assert!(check(&readme, "docs/metrics.md#no-such-heading").is_some());
    assert_eq!(
        slugs("# Which `--pod-scope`\n## `/watcher` for Trimaran\n# A\n# A"),
        ["which---pod-scope", "watcher-for-trimaran", "a", "a-1"]
            .map(String::from)
            .into()
    );
    assert_eq!(links("see [x](a.md#b) and `[y](z)`"), ["a.md#b"]);
}
