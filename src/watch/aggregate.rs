//! Per-node pod sums and addon counts kept up to date pod by pod: each watch event adds the
//! new facts of one pod and takes its old ones away, so a derivation reads one entry per node
//! instead of visiting every pod. The sums are the fixed-point ones of
//! [`super::derive::node_pod_sums`] (integers: taking a pod away is exact), so the result is
//! the same bits as summing every pod again.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::model::{Addon, AddonOnNode, CpuMem, NodePods, PodFacts};

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
    sums: HashMap<Arc<str>, Sum>,
    /// Node -> addon -> (pods, ready pods).
    addons: HashMap<Arc<str>, BTreeMap<Addon, (u32, u32)>>,
    /// Pods that could not be used.
    bad: u64,
}

impl PodAggregates {
    /// Counts a pod's facts in (`None`: a pod that could not be used).
    pub fn add(&mut self, facts: Option<&PodFacts>) {
        self.apply(facts, 1);
    }

    /// Takes a pod's facts, as counted in by [`Self::add`], out again.
    pub fn remove(&mut self, facts: Option<&PodFacts>) {
        self.apply(facts, -1);
    }

    fn apply(&mut self, facts: Option<&PodFacts>, sign: i8) {
        let Some(f) = facts else {
            self.bad = if sign > 0 {
                self.bad + 1
            } else {
                self.bad.saturating_sub(1)
            };
            return;
        };
        let Some(node) = &f.node else { return };
        if f.phase != "Succeeded" && f.phase != "Failed" {
            let e = self.sums.entry(node.clone()).or_default();
            for (acc, v) in e.0.iter_mut().zip([
                f.requests.cpu_cores,
                f.requests.memory_bytes,
                f.limits.cpu_cores,
                f.limits.memory_bytes,
            ]) {
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
        if let Some(a) = &f.addon {
            let on = self.addons.entry(node.clone()).or_default();
            let e = on.entry(a.clone()).or_default();
            let ready = u32::from(f.ready);
            if sign > 0 {
                e.0 += 1;
                e.1 += ready;
            } else {
                e.0 = e.0.saturating_sub(1);
                e.1 = e.1.saturating_sub(ready);
            }
            if e.0 == 0 {
                on.remove(a);
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
    pub fn node_pods(&self) -> BTreeMap<String, NodePods> {
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
                (node.to_string(), np)
            })
            .collect()
    }

    /// The addons on each node, merged over several aggregates (one per pod watch), as
    /// [`super::derive::addons_on_node`] gives them.
    pub fn addons_on_nodes<'a>(
        all: impl IntoIterator<Item = &'a PodAggregates>,
    ) -> BTreeMap<String, Vec<AddonOnNode>> {
        let mut merged: BTreeMap<&str, BTreeMap<&Addon, (u32, u32)>> = BTreeMap::new();
        for agg in all {
            for (node, addons) in &agg.addons {
                let on = merged.entry(&**node).or_default();
                for (a, (pods, ready)) in addons {
                    let e = on.entry(a).or_default();
                    e.0 += pods;
                    e.1 += ready;
                }
            }
        }
        merged
            .into_iter()
            .map(|(node, addons)| {
                let list = addons
                    .into_iter()
                    .map(|(addon, (pods, ready))| AddonOnNode {
                        addon: addon.clone(),
                        pods,
                        ready,
                    })
                    .collect();
                (node.to_string(), list)
            })
            .collect()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::model::Controller;
    use crate::watch::derive::{addons_on_node, node_pod_sums};

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
                name: format!("addon-{}", n % 2),
                version: "1".into(),
                controller: if n == 3 {
                    Controller::Deployment
                } else {
                    Controller::DaemonSet
                },
            }),
        };
        PodFacts {
            namespace: "ns".into(),
            name,
            node: (rng.below(8) != 0).then(|| Arc::from(format!("n{}", rng.below(5)))),
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
            containers: Vec::new(),
        }
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
                        agg.remove(old.as_ref());
                    }
                } else {
                    let new = (rng.below(10) != 0).then(|| random_facts(&mut rng, key.clone()));
                    agg.add(new.as_ref());
                    if let Some(old) = pods.insert(key, new) {
                        agg.remove(old.as_ref());
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
                let mut by_node: BTreeMap<String, Vec<&PodFacts>> = BTreeMap::new();
                for f in &facts {
                    if let (Some(n), Some(_)) = (&f.node, &f.addon) {
                        by_node.entry(n.to_string()).or_default().push(f);
                    }
                }
                let full: BTreeMap<String, Vec<AddonOnNode>> = by_node
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
                agg.remove(old.as_ref());
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
            containers: Vec::new(),
        };
        let (mut x, mut y) = (PodAggregates::default(), PodAggregates::default());
        x.add(Some(&pod(true)));
        y.add(Some(&pod(false)));
        let m = PodAggregates::addons_on_nodes([&x, &y]);
        assert_eq!((m["n1"][0].pods, m["n1"][0].ready), (2, 1));
    }
}
