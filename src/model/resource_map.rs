//! A map keyed by [`Resource`], held inline: one slot per resource, no heap allocation. A
//! node's latest values, window statistics and rings each used to be a `BTreeMap` of a few
//! entries, whose smallest node is a few hundred bytes; at 65,000 nodes that was tens of MiB.

use std::fmt;

use super::node::Resource;

/// Every resource, in slot order (a `static`, so iterators can hand out `&'static Resource`).
static KEYS: [Resource; Resource::ALL.len()] = Resource::ALL;

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
    slots: [Option<V>; Resource::ALL.len()],
}

impl<V> Default for ResourceMap<V> {
    fn default() -> Self {
        ResourceMap {
            slots: std::array::from_fn(|_| None),
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

    pub fn get(&self, r: &Resource) -> Option<&V> {
        self.slots[slot(*r)].as_ref()
    }

    pub fn get_mut(&mut self, r: &Resource) -> Option<&mut V> {
        self.slots[slot(*r)].as_mut()
    }

    /// Sets `r`'s value, returning the one it had.
    pub fn insert(&mut self, r: Resource, v: V) -> Option<V> {
        self.slots[slot(r)].replace(v)
    }

    pub fn remove(&mut self, r: &Resource) -> Option<V> {
        self.slots[slot(*r)].take()
    }

    /// `r`'s value, made by `f` first when there is none.
    pub fn get_or_insert_with(&mut self, r: Resource, f: impl FnOnce() -> V) -> &mut V {
        self.slots[slot(r)].get_or_insert_with(f)
    }

    pub fn contains_key(&self, r: &Resource) -> bool {
        self.slots[slot(*r)].is_some()
    }

    pub fn len(&self) -> usize {
        self.slots.iter().filter(|s| s.is_some()).count()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.iter().all(Option::is_none)
    }

    /// Resources with their values, in `Resource::ALL` order.
    pub fn iter(&self) -> impl Iterator<Item = (&Resource, &V)> {
        KEYS.iter()
            .zip(&self.slots)
            .filter_map(|(k, v)| v.as_ref().map(|v| (k, v)))
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&Resource, &mut V)> {
        KEYS.iter()
            .zip(&mut self.slots)
            .filter_map(|(k, v)| v.as_mut().map(|v| (k, v)))
    }

    pub fn keys(&self) -> impl Iterator<Item = &Resource> {
        self.iter().map(|(k, _)| k)
    }

    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.slots.iter().filter_map(Option::as_ref)
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
    fn no_heap_and_smaller_than_a_btreemap_node() {
        // Five slots of a window statistic inline, against a B-tree leaf allocated per map.
        assert!(std::mem::size_of::<ResourceMap<f64>>() <= 80);
        let mut m: ResourceMap<u8> = [(Resource::DiskIo, 1), (Resource::Cpu, 2)].into();
        *m.get_or_insert_with(Resource::Memory, || 0) += 3;
        assert_eq!(
            m.keys().copied().collect::<Vec<_>>(),
            [Resource::Cpu, Resource::Memory, Resource::DiskIo]
        );
        assert_eq!(m[&Resource::Memory], 3);
    }
}
