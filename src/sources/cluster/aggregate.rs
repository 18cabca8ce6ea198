//! Per-node pod sums and addon counts kept up to date pod by pod: each watch event adds the
//! new facts of one pod and takes its old ones away, so a derivation reads one entry per node
//! instead of visiting every pod. The sums are the fixed-point ones of
//! [`super::derive::node_pod_sums`] (integers: taking a pod away is exact), so the result is
//! the same bits as summing every pod again.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::model::{Addon, AddonOnNode, CpuMem, NodePods, PodFacts, PodRestarts};

const NANO: f64 = 1e9;

/// Requests and limits (cpu, memory) in nano-units and the pod count of one node.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Sum([i128; 4], u32);

fn fixed(v: f64) -> i128 {
    (v * NANO).round() as i128
}

fn float(v: i128) -> f64 {
    v as f64 / NANO
}

/// What [`super::derive::node_pod_sums`] and the addon counts of
/// [`super::derive::cluster_state_from_facts`] make of a set of pods, maintained as pods come,
/// change and go.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct PodAggregates {
    /// By node name, in order: a derivation reads them out sorted, with no comparisons of
    /// node names to sort them again (65,000 nodes at every tick under pod churn).
    sums: BTreeMap<Arc<str>, Sum>,
    /// Node -> (addon, pods, ready pods), sorted by addon: a node runs a few addons, and a
    /// short vector of them is a fraction of a B-tree's smallest node (65,000 of these).
    addons: BTreeMap<Arc<str>, Vec<(Addon, u32, u32)>>,
    /// Pods that could not be used.
    bad: u64,
}

/// What the pod index keeps of one pod: what it adds to its node's sums and addon counts, and
/// an addon pod's restart record. About 64 bytes, held inline in the index's table: a pod that
/// is no addon's (nearly all of them) allocates nothing of its own there; its namespace and
/// name are the table's key and its node name is one shared copy.
#[derive(Debug, Clone, PartialEq)]
pub struct PodRecord {
    node: Option<Arc<str>>,
    /// Requests (cpu, memory), then limits (cpu, memory).
    res: [f64; 4],
    /// Addon pods only: the pod, its addon and its containers' restarts.
    restarts: Option<Arc<PodRestarts>>,
    /// Holds resources (not Succeeded or Failed): counted in its node's sums.
    holds: bool,
    ready: bool,
}

impl PodRecord {
    /// The record of a pod's facts. The addon and restarts come from `f.restarts`; facts with
    /// an addon but no restart record (made by hand) get one without containers.
    pub fn of(f: PodFacts) -> PodRecord {
        let restarts = match (f.restarts, f.addon) {
            (Some(r), _) => Some(r),
            (None, Some(addon)) => Some(Arc::new(PodRestarts {
                namespace: f.namespace,
                pod: f.name,
                node: f.node.clone(),
                addon: Some(addon),
                containers: Vec::new(),
            })),
            (None, None) => None,
        };
        PodRecord {
            node: f.node,
            res: [
                f.requests.cpu_cores,
                f.requests.memory_bytes,
                f.limits.cpu_cores,
                f.limits.memory_bytes,
            ],
            restarts,
            holds: f.phase != "Succeeded" && f.phase != "Failed",
            ready: f.ready,
        }
    }

    /// An addon pod's restart record.
    pub fn restarts(&self) -> Option<&Arc<PodRestarts>> {
        self.restarts.as_ref()
    }

    fn addon(&self) -> Option<&Addon> {
        self.restarts.as_ref().and_then(|r| r.addon.as_ref())
    }
}

impl PodAggregates {
    /// Counts a pod in (`None`: a pod that could not be used).
    pub fn add(&mut self, pod: Option<&PodRecord>) {
        self.apply(pod, 1);
    }

    /// Takes a pod, as counted in by [`Self::add`], out again.
    pub fn remove(&mut self, pod: Option<&PodRecord>) {
        self.apply(pod, -1);
    }

    fn apply(&mut self, pod: Option<&PodRecord>, sign: i8) {
        let Some(f) = pod else {
            self.bad = if sign > 0 {
                self.bad + 1
            } else {
                self.bad.saturating_sub(1)
            };
            return;
        };
        let Some(node) = &f.node else { return };
        if f.holds {
            let e = self.sums.entry(node.clone()).or_default();
            for (acc, v) in e.0.iter_mut().zip(f.res) {
                // Wrapping: exact in both directions (the sums never come near 2^127).
                *acc = if sign > 0 {
                    acc.wrapping_add(fixed(v))
                } else {
                    acc.wrapping_sub(fixed(v))
                };
            }
            e.1 = if sign > 0 {
                e.1 + 1
            } else {
                e.1.saturating_sub(1)
            };
            if e.1 == 0 {
                self.sums.remove(&**node);
            }
        }
        if let Some(a) = f.addon() {
            let on = self.addons.entry(node.clone()).or_default();
            let at = match on.binary_search_by(|(x, ..)| x.cmp(a)) {
                Ok(at) => at,
                Err(at) => {
                    on.insert(at, (a.clone(), 0, 0));
                    at
                }
            };
            let e = &mut on[at];
            let ready = u32::from(f.ready);
            if sign > 0 {
                e.1 += 1;
                e.2 += ready;
            } else {
                e.1 = e.1.saturating_sub(1);
                e.2 = e.2.saturating_sub(ready);
            }
            if e.1 == 0 {
                on.remove(at);
            }
            if on.is_empty() {
                self.addons.remove(&**node);
            }
        }
    }

    /// Pods that could not be used.
    pub fn bad(&self) -> u64 {
        self.bad
    }

    /// The per-node sums, as [`super::derive::node_pod_sums`] gives them.
    pub fn node_pods(&self) -> BTreeMap<Arc<str>, NodePods> {
        self.sums
            .iter()
            .map(|(node, Sum([rc, rm, lc, lm], pods))| {
                let np = NodePods {
                    requests: CpuMem {
                        cpu_cores: float(*rc),
                        memory_bytes: float(*rm),
                    },
                    limits: CpuMem {
                        cpu_cores: float(*lc),
                        memory_bytes: float(*lm),
                    },
                    pods: *pods,
                };
                (node.clone(), np)
            })
            .collect()
    }

    /// The addons on each node, merged over several aggregates (one per pod watch), as
    /// [`super::derive::addons_on_node`] gives them.
    pub fn addons_on_nodes<'a>(
        all: impl IntoIterator<Item = &'a PodAggregates>,
    ) -> BTreeMap<Arc<str>, Vec<AddonOnNode>> {
        let all: Vec<&PodAggregates> = all.into_iter().collect();
        let list = |l: &[(Addon, u32, u32)]| -> Vec<AddonOnNode> {
            l.iter()
                .map(|(addon, pods, ready)| AddonOnNode {
                    addon: addon.clone(),
                    pods: *pods,
                    ready: *ready,
                })
                .collect()
        };
        // One watch (every pod): its map as it is, read out in order (built in one pass).
        if let [one] = all[..] {
            return one
                .addons
                .iter()
                .map(|(node, l)| (node.clone(), list(l)))
                .collect();
        }
        let mut merged: BTreeMap<Arc<str>, Vec<AddonOnNode>> = BTreeMap::new();
        for agg in all {
            for (node, addons) in &agg.addons {
                let on = merged.entry(node.clone()).or_default();
                // Both sorted by addon; a node's list is a handful long.
                for (a, pods, ready) in addons {
                    match on.binary_search_by(|x| x.addon.cmp(a)) {
                        Ok(at) => {
                            on[at].pods += pods;
                            on[at].ready += ready;
                        }
                        Err(at) => on.insert(
                            at,
                            AddonOnNode {
                                addon: a.clone(),
                                pods: *pods,
                                ready: *ready,
                            },
                        ),
                    }
                }
            }
        }
        merged
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::model::Controller;
    use crate::sources::cluster::derive::{addons_on_node, node_pod_sums};
    use std::collections::HashMap;

    /// A small deterministic generator (xorshift): no extra crate for one test.
    pub(crate) struct Rng(pub(crate) u64);

    impl Rng {
        pub(crate) fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        pub(crate) fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    pub(crate) fn random_facts(rng: &mut Rng, name: String) -> PodFacts {
        let phases = ["Running", "Pending", "Succeeded", "Failed", "Unknown"];
        let cpu = [0.0, 0.1, 0.25, 0.007, 1.333, 2.0, 0.001];
        let addon = match rng.below(4) {
            0 => None,
            n => Some(Addon {
                name: format!("addon-{}", n % 2).into(),
                version: "1".into(),
                controller: if n == 3 {
                    Controller::Deployment
                } else {
                    Controller::DaemonSet
                },
            }),
        };
        let name: Arc<str> = name.into();
        let node = (rng.below(8) != 0).then(|| Arc::from(format!("n{}", rng.below(5))));
        // An addon pod's restart record, as `pod_facts` makes it.
        let restarts = addon.as_ref().map(|a| {
            Arc::new(PodRestarts {
                namespace: "ns".into(),
                pod: name.clone(),
                node: node.clone(),
                addon: Some(a.clone()),
                containers: vec![crate::model::ContainerRestarts {
                    name: "c".into(),
                    restarts: rng.below(3) as u32,
                    last_reason: None,
                    last_exit_code: None,
                }],
            })
        });
        PodFacts {
            namespace: "ns".into(),
            name,
            node,
            phase: phases[rng.below(5) as usize].into(),
            ready: rng.below(2) == 0,
            owner: None,
            addon,
            requests: CpuMem {
                cpu_cores: cpu[rng.below(7) as usize],
                memory_bytes: (rng.below(1 << 20) * 1024) as f64 + 0.5,
            },
            limits: CpuMem {
                cpu_cores: cpu[rng.below(7) as usize] * 3.0,
                memory_bytes: rng.below(1 << 30) as f64,
            },
            restarts,
        }
    }

    /// The index's record of facts (`None`: a pod that could not be used).
    pub(crate) fn record(f: &Option<PodFacts>) -> Option<PodRecord> {
        f.clone().map(PodRecord::of)
    }

    /// Incremental == full: after every step of random applies (new pods, changed pods, pods
    /// that cannot be used) and deletes, the aggregates equal what summing every pod gives.
    #[test]
    fn incremental_equals_full_over_random_event_sequences() {
        for seed in 1..=20u64 {
            let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
            let mut pods: HashMap<String, Option<PodFacts>> = HashMap::new();
            let mut agg = PodAggregates::default();
            for step in 0..400 {
                let key = format!("p{}", rng.below(40));
                if rng.below(4) == 0 {
                    if let Some(old) = pods.remove(&key) {
                        agg.remove(record(&old).as_ref());
                    }
                } else {
                    let new = (rng.below(10) != 0).then(|| random_facts(&mut rng, key.clone()));
                    agg.add(record(&new).as_ref());
                    if let Some(old) = pods.insert(key, new) {
                        agg.remove(record(&old).as_ref());
                    }
                }
                let facts: Vec<&PodFacts> = pods.values().flatten().collect();
                let bad = pods.values().filter(|v| v.is_none()).count() as u64;
                assert_eq!(agg.bad(), bad, "seed {seed} step {step}");
                assert_eq!(
                    agg.node_pods(),
                    node_pod_sums(facts.iter().copied()),
                    "seed {seed} step {step}"
                );
                let mut by_node: BTreeMap<Arc<str>, Vec<&PodFacts>> = BTreeMap::new();
                for f in &facts {
                    if let (Some(n), Some(_)) = (&f.node, &f.addon) {
                        by_node.entry(n.clone()).or_default().push(f);
                    }
                }
                let full: BTreeMap<Arc<str>, Vec<AddonOnNode>> = by_node
                    .into_iter()
                    .map(|(n, p)| (n, addons_on_node(p)))
                    .collect();
                assert_eq!(
                    PodAggregates::addons_on_nodes([&agg]),
                    full,
                    "seed {seed} step {step}"
                );
            }
            // Everything deleted: nothing left behind.
            for (_, old) in pods.drain() {
                agg.remove(record(&old).as_ref());
            }
            assert_eq!(agg, PodAggregates::default(), "seed {seed}");
        }
    }

    #[test]
    fn addons_of_several_watches_are_merged() {
        let a = Addon {
            name: "fb".into(),
            version: "1".into(),
            controller: Controller::DaemonSet,
        };
        let pod = |ready| PodFacts {
            namespace: "ns".into(),
            name: "p".into(),
            node: Some("n1".into()),
            phase: "Running".into(),
            ready,
            owner: None,
            addon: Some(a.clone()),
            requests: CpuMem::default(),
            limits: CpuMem::default(),
            restarts: None,
        };
        let (mut x, mut y) = (PodAggregates::default(), PodAggregates::default());
        x.add(Some(&PodRecord::of(pod(true))));
        y.add(Some(&PodRecord::of(pod(false))));
        let m = PodAggregates::addons_on_nodes([&x, &y]);
        assert_eq!((m["n1"][0].pods, m["n1"][0].ready), (2, 1));
    }
}
