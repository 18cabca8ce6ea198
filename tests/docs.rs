//! docs/metrics.md lists exactly the metric families in src/sink/names.rs.

use std::collections::BTreeSet;

use kube_prober::sink::names;

#[test]
fn every_metric_is_documented_and_every_documented_metric_exists() {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/metrics.md")).unwrap();
    let code: BTreeSet<String> = names::ALL
        .iter()
        .chain(names::SERVER)
        .map(|f| f.sample_name())
        .collect();
    let documented: BTreeSet<String> = doc
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("kube_prober_") && w.len() > "kube_prober_".len())
        .map(str::to_string)
        .collect();
    let missing: Vec<_> = code.difference(&documented).collect();
    assert!(missing.is_empty(), "not in docs/metrics.md: {missing:?}");
    let stale: Vec<_> = documented.difference(&code).collect();
    assert!(
        stale.is_empty(),
        "docs/metrics.md names metrics the code does not have: {stale:?}"
    );
}
