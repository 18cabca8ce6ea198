//! Every series the program exposes, read off one [`Snapshot`] in `families::ALL` order: the
//! steps of the exposition, each the rows of one table of families (`families/`, where each
//! family's rows are made beside its declaration). The Prometheus exposition writes these rows
//! as text; the push outputs turn the same rows into their own messages, so all outputs agree.

use super::families::{self, Family};
pub use super::families::{
    Keyed, Labels, NodeAddons, NodeBound, NodeCapacities, NodeFactsRows, NodePodSums, NodeUsage,
    Row, RowsOf, Visitor, same_in_state, same_node_facts,
};
use crate::model::Snapshot;

/// True for the families that describe this instance itself (build, probes it ran, its sources,
/// push outputs and ticks) rather than the cluster or its nodes: what a replica that does not
/// lead may still push ([`families::Scope::instance_level`]).
pub fn is_instance_level(family: &Family) -> bool {
    family.scope.instance_level()
}

/// One step of the exposition, in `families::ALL` order: the families of a [`Keyed`] part one
/// by one, or a group of families read off the snapshot as a whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Step {
    /// Build and cluster info.
    Info,
    Usage(usize),
    /// The estimates of just-bound pods ([`NodeBound`]).
    Bound(usize),
    /// The ages of the nodes' newest samples, and the stale ones.
    Freshness,
    Capacity(usize),
    /// `NodeFactsRows`' first `families::ALLOCATABLE_LEN` families come before the cluster
    /// counts, the rest after them.
    Facts(usize),
    /// Nodes per placement and availability, and per condition.
    ClusterCounts,
    ExpectedPods,
    Addons(usize),
    Pods(usize),
    /// Container restarts and last terminations (addon pods).
    Restarts,
    Skipped,
    Tasks,
    Platform,
    /// Probes, sources, sinks, leadership and ticks: this instance's own families.
    Instance,
}

/// The steps of a snapshot with (or without) a cluster state, in output order.
pub fn steps(has_cluster: bool) -> Vec<Step> {
    let mut s = vec![Step::Info];
    s.extend((0..NodeUsage::FAMILIES.len()).map(Step::Usage));
    s.extend((0..NodeBound::FAMILIES.len()).map(Step::Bound));
    s.push(Step::Freshness);
    s.extend((0..NodeCapacities::FAMILIES.len()).map(Step::Capacity));
    if has_cluster {
        s.extend((0..families::ALLOCATABLE_LEN).map(Step::Facts));
        s.push(Step::ClusterCounts);
        s.extend((families::ALLOCATABLE_LEN..NodeFactsRows::FAMILIES.len()).map(Step::Facts));
        s.push(Step::ExpectedPods);
        s.extend((0..NodeAddons::FAMILIES.len()).map(Step::Addons));
        s.extend((0..NodePodSums::FAMILIES.len()).map(Step::Pods));
        s.extend([Step::Restarts, Step::Skipped]);
    }
    s.extend([Step::Tasks, Step::Platform, Step::Instance]);
    s
}

/// Every row of one family of a [`Keyed`] part, all keys in order.
fn keyed_rows<'a, P: Keyed>(family: usize, items: &[(&'a str, P::Item<'a>)]) -> Vec<Row<'a>> {
    let mut rows = Vec::new();
    for (key, item) in items {
        P::rows(family, key, item, &mut rows);
    }
    rows
}

/// Passes a whole-snapshot step (one that is not [`Keyed`]) to `w`; keyed steps pass nothing.
pub fn visit_step<V: Visitor>(step: Step, snap: &Snapshot, w: &mut V) {
    match step {
        Step::Info => families::visit_info(w, snap),
        Step::Freshness => families::visit_freshness(w, snap),
        Step::ClusterCounts => families::visit_cluster_counts(w, snap),
        Step::ExpectedPods => families::visit_expected_pods(w, snap),
        Step::Restarts => families::visit_restarts(w, snap),
        Step::Skipped => families::visit_skipped(w, snap),
        Step::Tasks => families::visit_tasks(w, snap),
        Step::Platform => families::visit_platform(w, snap),
        Step::Instance => families::visit_instance(w, snap),
        Step::Usage(_)
        | Step::Bound(_)
        | Step::Capacity(_)
        | Step::Facts(_)
        | Step::Addons(_)
        | Step::Pods(_) => {}
    }
}

/// The family of a keyed step, and its rows over every key of `snap`.
fn visit_keyed<V: Visitor>(step: Step, snap: &Snapshot, w: &mut V) {
    fn one<P: Keyed, V: Visitor>(family: usize, snap: &Snapshot, w: &mut V) {
        let mut items = Vec::new();
        P::items(snap, &mut items);
        w.family(P::FAMILIES[family].0, &keyed_rows::<P>(family, &items));
    }
    match step {
        Step::Usage(f) => one::<NodeUsage, V>(f, snap, w),
        Step::Bound(f) => one::<NodeBound, V>(f, snap, w),
        Step::Capacity(f) => one::<NodeCapacities, V>(f, snap, w),
        Step::Facts(f) => one::<NodeFactsRows, V>(f, snap, w),
        Step::Addons(f) => one::<NodeAddons, V>(f, snap, w),
        Step::Pods(f) => one::<NodePodSums, V>(f, snap, w),
        other => visit_step(other, snap, w),
    }
}

/// Every family but the snapshot age (which depends on the reader's clock), in `families::ALL`
/// order.
pub fn visit<V: Visitor>(snap: &Snapshot, w: &mut V) {
    for step in steps(snap.cluster_state.is_some()) {
        visit_keyed(step, snap, w);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table of families a step writes: one family of a keyed part, or a whole table.
    fn step_families(step: Step) -> &'static [Family] {
        fn one<P: Keyed>(f: usize) -> &'static [Family] {
            std::slice::from_ref(P::FAMILIES[f].0)
        }
        match step {
            Step::Info => families::INFO,
            Step::Usage(f) => one::<NodeUsage>(f),
            Step::Bound(f) => one::<NodeBound>(f),
            Step::Freshness => families::FRESHNESS,
            Step::Capacity(f) => one::<NodeCapacities>(f),
            Step::Facts(f) => one::<NodeFactsRows>(f),
            Step::ClusterCounts => families::COUNTS,
            Step::ExpectedPods => families::EXPECTED,
            Step::Addons(f) => one::<NodeAddons>(f),
            Step::Pods(f) => one::<NodePodSums>(f),
            Step::Restarts => families::RESTARTS,
            Step::Skipped => families::SKIPPED,
            Step::Tasks => families::TASKS,
            Step::Platform => families::PLATFORM,
            Step::Instance => families::INSTANCE,
        }
    }

    /// Records the families a visit passes.
    struct Names(Vec<&'static str>);

    impl Visitor for Names {
        fn family(&mut self, family: &Family, _rows: &[(Labels<'_>, f64)]) {
            self.0.push(family.name);
        }
        fn histogram(&mut self, family: &Family, _: &[f64], _: &[(Labels<'_>, &[u64], f64, u64)]) {
            self.0.push(family.name);
        }
    }

    /// The steps, each with its table, are `families::ALL` in order: the exposition order
    /// comes from the tables.
    #[test]
    fn the_steps_tables_are_all_in_order() {
        let names: Vec<_> = steps(true)
            .into_iter()
            .flat_map(step_families)
            .map(|f| f.name)
            .collect();
        let all: Vec<_> = families::ALL.iter().map(|f| f.name).collect();
        assert_eq!(names, all);
    }

    /// Every whole-snapshot step passes only its own table's families, in the table's order.
    #[test]
    fn each_step_writes_only_its_own_table() {
        let mut snap = Snapshot::empty(std::time::SystemTime::UNIX_EPOCH);
        snap.cluster_state = Some(Default::default());
        for step in steps(true) {
            let mut seen = Names(Vec::new());
            visit_step(step, &snap, &mut seen);
            let table: Vec<_> = step_families(step).iter().map(|f| f.name).collect();
            let mut rest = table.iter();
            for name in &seen.0 {
                assert!(
                    rest.any(|t| t == name),
                    "{step:?} wrote {name}, not in its table {table:?} (or out of order)"
                );
            }
        }
    }
}
