//! A map keyed by [`Resource`]: its entries in `Resource::ALL` order, two of them inline (no
//! heap allocation for the CPU and memory that every backend but the host reports), more on
//! the heap. A node's latest values and window statistics each used to be a `BTreeMap` of a
//! few entries, whose smallest node is a few hundred bytes; then five inline slots (120 bytes
//! a window statistic, 72 of them empty for metrics-server's nodes); at 65,000 nodes with two
//! snapshots alive while one is rendered, each byte per map is about half a megabyte.

use std::fmt;

use smallvec::SmallVec;

use super::node::Resource;

fn slot(r: Resource) -> usize {
    match r {
        Resource::Cpu => 0,
        Resource::Memory => 1,
        Resource::NetworkReceive => 2,
        Resource::NetworkTransmit => 3,
        Resource::DiskIo => 4,
    }
}

/// A map from [`Resource`] to `V` with the part of `BTreeMap`'s interface the model uses.
/// Iteration is in `Resource::ALL` order, which is `Resource`'s `Ord` order, as a `BTreeMap`'s.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ResourceMap<V> {
    /// Sorted by [`slot`], one entry per resource at most.
    entries: SmallVec<[(Resource, V); 2]>,
}

impl<V> Default for ResourceMap<V> {
    fn default() -> Self {
        ResourceMap {
            entries: SmallVec::new(),
        }
    }
}

impl<V: fmt::Debug> fmt::Debug for ResourceMap<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<V> ResourceMap<V> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Where `r`'s entry is, or where it would go.
    fn find(&self, r: Resource) -> Result<usize, usize> {
        self.entries
            .binary_search_by_key(&slot(r), |(k, _)| slot(*k))
    }

    pub fn get(&self, r: &Resource) -> Option<&V> {
        self.find(*r).ok().map(|i| &self.entries[i].1)
    }

    pub fn get_mut(&mut self, r: &Resource) -> Option<&mut V> {
        self.find(*r).ok().map(|i| &mut self.entries[i].1)
    }

    /// Sets `r`'s value, returning the one it had.
    pub fn insert(&mut self, r: Resource, v: V) -> Option<V> {
        match self.find(r) {
            Ok(i) => Some(std::mem::replace(&mut self.entries[i].1, v)),
            Err(i) => {
                self.entries.insert(i, (r, v));
                None
            }
        }
    }

    pub fn remove(&mut self, r: &Resource) -> Option<V> {
        self.find(*r).ok().map(|i| self.entries.remove(i).1)
    }

    /// `r`'s value, made by `f` first when there is none.
    pub fn get_or_insert_with(&mut self, r: Resource, f: impl FnOnce() -> V) -> &mut V {
        let i = match self.find(r) {
            Ok(i) => i,
            Err(i) => {
                self.entries.insert(i, (r, f()));
                i
            }
        };
        &mut self.entries[i].1
    }

    pub fn contains_key(&self, r: &Resource) -> bool {
        self.find(*r).is_ok()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Resources with their values, in `Resource::ALL` order.
    pub fn iter(&self) -> impl Iterator<Item = (&Resource, &V)> {
        self.entries.iter().map(|(k, v)| (k, v))
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&Resource, &mut V)> {
        self.entries.iter_mut().map(|(k, v)| (&*k, v))
    }

    pub fn keys(&self) -> impl Iterator<Item = &Resource> {
        self.entries.iter().map(|(k, _)| k)
    }

    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.entries.iter().map(|(_, v)| v)
    }
}

impl<V> FromIterator<(Resource, V)> for ResourceMap<V> {
    fn from_iter<I: IntoIterator<Item = (Resource, V)>>(iter: I) -> Self {
        let mut m = Self::default();
        m.extend(iter);
        m
    }
}

impl<V> Extend<(Resource, V)> for ResourceMap<V> {
    fn extend<I: IntoIterator<Item = (Resource, V)>>(&mut self, iter: I) {
        for (r, v) in iter {
            self.insert(r, v);
        }
    }
}

impl<V, const N: usize> From<[(Resource, V); N]> for ResourceMap<V> {
    fn from(entries: [(Resource, V); N]) -> Self {
        entries.into_iter().collect()
    }
}

impl<V> std::ops::Index<&Resource> for ResourceMap<V> {
    type Output = V;

    /// Panics when `r` has no value, as `BTreeMap`'s index (tests and checked callers only).
    fn index(&self, r: &Resource) -> &V {
        match self.get(r) {
            Some(v) => v,
            None => panic!("no value for resource {}", r.as_str()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    proptest::proptest! {
        /// Behaves as a `BTreeMap<Resource, V>` through any inserts and removals.
        #[test]
        fn behaves_as_a_btreemap(ops in proptest::collection::vec((0usize..5, proptest::option::of(0u32..100)), 0..40)) {
            let mut ours = ResourceMap::new();
            let mut theirs = BTreeMap::new();
            for (i, v) in ops {
                let r = Resource::ALL[i];
                match v {
                    Some(v) => proptest::prop_assert_eq!(ours.insert(r, v), theirs.insert(r, v)),
                    None => proptest::prop_assert_eq!(ours.remove(&r), theirs.remove(&r)),
                }
                proptest::prop_assert_eq!(ours.len(), theirs.len());
                proptest::prop_assert_eq!(ours.is_empty(), theirs.is_empty());
                proptest::prop_assert!(ours.iter().map(|(k, v)| (*k, *v)).eq(theirs.iter().map(|(k, v)| (*k, *v))));
                proptest::prop_assert_eq!(ours.get(&r), theirs.get(&r));
                proptest::prop_assert_eq!(format!("{ours:?}"), format!("{theirs:?}"));
            }
        }
    }

    #[test]
    fn two_entries_inline_and_smaller_than_five_slots() {
        // A window statistic of CPU and memory inline (72 bytes, was five slots: 120), against
        // a B-tree leaf allocated per map before that.
        assert!(std::mem::size_of::<ResourceMap<crate::model::Stat>>() <= 72);
        assert!(std::mem::size_of::<ResourceMap<f64>>() <= 40);
        let two: ResourceMap<f64> = [(Resource::Memory, 1.0), (Resource::Cpu, 2.0)].into();
        assert!(!two.entries.spilled(), "CPU and memory are held inline");
        let mut m: ResourceMap<u8> = [(Resource::DiskIo, 1), (Resource::Cpu, 2)].into();
        *m.get_or_insert_with(Resource::Memory, || 0) += 3;
        assert_eq!(
            m.keys().copied().collect::<Vec<_>>(),
            [Resource::Cpu, Resource::Memory, Resource::DiskIo]
        );
        assert_eq!(m[&Resource::Memory], 3);
    }
}
