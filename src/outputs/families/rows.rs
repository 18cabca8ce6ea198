//! What every family's rows are made of, and the contract of the parts whose rows come per node.

use super::Family;
use crate::model::{ClusterState, Operator, Snapshot};

/// Label pairs of one row: our label key, its value.
pub type Labels<'a> = Vec<(&'static str, &'a str)>;

/// Receives every family of a snapshot, in order. A family with no rows may be passed.
pub trait Visitor {
    /// A gauge or counter family (see `family.kind`): one value per row.
    fn family(&mut self, family: &Family, rows: &[(Labels<'_>, f64)]);
    /// A histogram family: per row the cumulative bucket counts for `bounds` (one per bound;
    /// `+Inf` is the count), the sum and the count.
    fn histogram(
        &mut self,
        family: &Family,
        bounds: &[f64],
        rows: &[(Labels<'_>, &[u64], f64, u64)],
    );
    /// Whether a row of `family` whose `node` label is `node` (`""`: none) would be kept, so a
    /// visit can skip making rows nobody takes (a shard's filter drops most per-node rows).
    /// Only a hint: rows it says yes to may still be dropped.
    fn keeps(&self, _family: &Family, _node: &str) -> bool {
        true
    }
}

pub(super) fn flag(b: bool) -> &'static str {
    if b { "true" } else { "false" }
}

pub(super) fn one_if(b: bool) -> f64 {
    if b { 1.0 } else { 0.0 }
}

/// One row of a gauge or counter family: labels and value.
pub type Row<'a> = (Labels<'a>, f64);

/// How a [`Keyed`] part makes one family's rows of one key from the key's item.
pub type RowsOf<P> = for<'a> fn(&'a str, &<P as Keyed>::Item<'a>, &mut Vec<Row<'a>>);

/// Families whose rows come per key (a node) from that key's data alone: the rows of one key
/// depend only on the key and its item, so an output may keep what it made of a key until the
/// item changes ([`Keyed::same`]), and a filter may drop a key or a family.
pub trait Keyed: Sized + 'static {
    /// What the rows of one key are made from.
    type Item<'a>;
    /// The families in `families::ALL` order, each with the function that makes its rows of
    /// one key: the one place that says which value of the item a family carries.
    const FAMILIES: &'static [(&'static Family, RowsOf<Self>)];
    /// Every key with its item, in output order.
    fn items<'a>(snap: &'a Snapshot, out: &mut Vec<(&'a str, Self::Item<'a>)>);
    /// The rows of `key` in `Self::FAMILIES[family]`.
    fn rows<'a>(family: usize, key: &'a str, item: &Self::Item<'a>, out: &mut Vec<Row<'a>>) {
        (Self::FAMILIES[family].1)(key, item, out)
    }
    /// Whether two items give the same rows (for the same key).
    fn same(a: &Self::Item<'_>, b: &Self::Item<'_>) -> bool;
    /// True when every key and item of `b` is certainly those of `a`, found without visiting
    /// them (the snapshots share the data the items are read from): an output then keeps all
    /// it made of `a`. False says nothing.
    fn unchanged(a: &Snapshot, b: &Snapshot) -> bool;
}

/// Both absent, or the same `Arc`.
pub(super) fn same_arc<T>(a: &Option<std::sync::Arc<T>>, b: &Option<std::sync::Arc<T>>) -> bool {
    match (a, b) {
        (Some(x), Some(y)) => std::sync::Arc::ptr_eq(x, y),
        (None, None) => true,
        _ => false,
    }
}

/// Whether two snapshots hold the same Node facts: the same `Arc` (the watchers share it
/// while no Node changed), or no cluster state in either.
pub fn same_node_facts(a: &Snapshot, b: &Snapshot) -> bool {
    match (&a.cluster_state, &b.cluster_state) {
        (Some(x), Some(y)) => std::sync::Arc::ptr_eq(&x.nodes, &y.nodes),
        (None, None) => true,
        _ => false,
    }
}

/// Whether what `f` reads of the cluster state is the same in two snapshots: the same state
/// (`Arc`), equal values, or no state in either.
pub fn same_in_state<T: PartialEq + ?Sized>(
    a: &Snapshot,
    b: &Snapshot,
    f: impl Fn(&ClusterState) -> &T,
) -> bool {
    match (&a.cluster_state, &b.cluster_state) {
        (Some(x), Some(y)) => std::sync::Arc::ptr_eq(x, y) || f(x) == f(y),
        (None, None) => true,
        _ => false,
    }
}

/// Looks names up in a map keyed by name, at about one comparison a name while they come in
/// ascending order (the nodes do: by name); a name out of order seeks from the top again.
pub(super) struct ByName<'a, V> {
    map: &'a std::collections::BTreeMap<std::sync::Arc<str>, V>,
    rest: std::iter::Peekable<std::collections::btree_map::Range<'a, std::sync::Arc<str>, V>>,
    last: &'a str,
}

impl<'a, V> ByName<'a, V> {
    pub(super) fn new(map: &'a std::collections::BTreeMap<std::sync::Arc<str>, V>) -> Self {
        ByName {
            map,
            rest: map.range::<str, _>(..).peekable(),
            last: "",
        }
    }

    pub(super) fn get(&mut self, name: &'a str) -> Option<&'a V> {
        if name < self.last {
            let from = (std::ops::Bound::Included(name), std::ops::Bound::Unbounded);
            self.rest = self.map.range::<str, _>(from).peekable();
        }
        self.last = name;
        while self.rest.next_if(|(k, _)| &***k < name).is_some() {}
        self.rest
            .peek()
            .filter(|(k, _)| &***k == name)
            .map(|(_, v)| *v)
    }
}

pub(super) fn operator_label(op: Operator) -> &'static str {
    match op {
        Operator::Avg => "avg",
        Operator::Std => "std",
    }
}

/// The families of a [`Keyed`] part's table, for [`super::ALL`].
pub(super) const fn families_of<const N: usize, T: Copy>(
    table: &[(&'static Family, T)],
) -> [Family; N] {
    let mut out = [super::PLACEHOLDER; N];
    let mut i = 0;
    while i < N {
        out[i] = *table[i].0;
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `ByName` finds what `BTreeMap::get` finds, for names in order, out of order, absent,
    /// before the first key and after the last.
    #[test]
    fn by_name_finds_what_get_finds_in_any_order() {
        let map: std::collections::BTreeMap<std::sync::Arc<str>, u32> =
            [("b", 1), ("d", 2), ("f", 3)]
                .into_iter()
                .map(|(k, v)| (k.into(), v))
                .collect();
        let asks = [
            "a", "b", "c", "d", "d", "e", "f", "g", "b", "a", "f", "c", "d",
        ];
        let mut by = ByName::new(&map);
        for name in asks {
            assert_eq!(by.get(name), map.get(name), "{name}");
        }
    }
}
