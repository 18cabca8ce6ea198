//! `corpus/kubernetes/`: Nodes, Pods, DaemonSets and Deployments with optional fields left
//! out, decoded as the watchers decode them (`src/k8s/lean.rs`, k8s-openapi for the workloads)
//! and turned into the facts the cluster metrics and the task source are made of
//! (`src/sources/cluster/derive.rs`, `src/sources/task/pods.rs`); then all of them at once
//! into one cluster state, whose skipped objects are counted by reason.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::SystemTime;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::jiff::Timestamp;
use kube_prober::k8s::lean::{LeanNode, LeanPod};
use kube_prober::model::{
    Addon, AddonExpected, ContainerRestarts, Controller, CpuMem, NodeCapacity, NodeFacts, Owner,
    Placement, PodFacts,
};
use kube_prober::sources::cluster::derive::{
    DeriveConfig, cluster_state, daemonset_expected, deployment_expected, node_facts, pod_facts,
};
use kube_prober::sources::task::pods::{TaskPodConfig, task_pod};
use serde_json::Value;

use super::{assert_every_entry_has_a_row, read};

const KIND: &str = "kubernetes";
const KI: f64 = 1024.0;
const MI: f64 = KI * KI;
const GI: f64 = MI * KI;

fn at(rfc3339: &str) -> SystemTime {
    SystemTime::from(rfc3339.parse::<Timestamp>().unwrap())
}

/// The time the facts are derived at: every node here is older than the warming period.
fn now() -> SystemTime {
    at("2026-11-29T07:00:00Z")
}

/// What one object gives.
enum Want {
    Node(Box<NodeFacts>),
    /// The pod's facts, and its task's QoS class and cgroup ids.
    Pod(Box<PodFacts>, &'static str, &'static [&'static str]),
    /// A DaemonSet or Deployment: the addon it runs and how many pods it wants.
    Workload(Option<AddonExpected>),
}

fn cap(cpu_cores: f64, memory_bytes: f64) -> Option<NodeCapacity> {
    Some(NodeCapacity {
        cpu_cores,
        memory_bytes,
    })
}

fn conditions(c: &[(&str, &str)]) -> Vec<(Arc<str>, Arc<str>)> {
    c.iter()
        .map(|(t, s)| (Arc::from(*t), Arc::from(*s)))
        .collect()
}

fn placement(pool: &str, zone: &str) -> Placement {
    Placement {
        pool: pool.into(),
        zone: zone.into(),
    }
}

fn node(name: &str, ready: bool, schedulable: bool) -> NodeFacts {
    NodeFacts {
        name: name.into(),
        placement: placement("unknown", "unknown"),
        conditions: Vec::new(),
        ready,
        schedulable,
        done_warming: true,
        created: Some(at("2026-11-28T06:00:00Z")),
        capacity: None,
        allocatable: None,
    }
}

fn cpu_mem(cpu_cores: f64, memory_bytes: f64) -> CpuMem {
    CpuMem {
        cpu_cores,
        memory_bytes,
    }
}

fn pod(namespace: &str, name: &str, node: Option<&str>, phase: &'static str) -> PodFacts {
    PodFacts {
        namespace: namespace.into(),
        name: name.into(),
        node: node.map(Arc::from),
        phase: Cow::Borrowed(phase),
        ready: false,
        owner: None,
        addon: None,
        requests: cpu_mem(0.0, 0.0),
        limits: cpu_mem(0.0, 0.0),
        restarts: None,
    }
}

fn owner(kind: &str, name: &str) -> Option<Owner> {
    Some(Owner {
        kind: kind.into(),
        name: name.into(),
    })
}

fn addon(name: &str, version: &str, controller: Controller) -> Addon {
    Addon {
        name: name.into(),
        version: version.into(),
        controller,
    }
}

fn expected(a: Addon, workload: &str, expected: u32) -> Option<AddonExpected> {
    Some(AddonExpected {
        addon: a,
        namespace: "kube-system".into(),
        workload: workload.into(),
        expected,
    })
}

fn nodes() -> Vec<(&'static str, Want)> {
    vec![
        // Created by a client before any kubelet reported: no status at all.
        ("node-registered-no-status.json", {
            let mut n = node("node-registered", false, true);
            n.created = Some(at("2026-11-29T06:00:00Z"));
            Want::Node(Box::new(n))
        }),
        // No allocatable: none served (not the capacity, not a zero).
        ("node-no-allocatable.json", {
            let mut n = node("node-capacity-only", false, false);
            n.placement = placement("pool1", "zone-a");
            n.conditions = conditions(&[("MemoryPressure", "False"), ("Ready", "Unknown")]);
            n.capacity = cap(8.0, 32.0 * GI);
            Want::Node(Box::new(n))
        }),
        // Capacity without cpu or memory (a virtual node listing only pods): no capacity,
        // never a capacity of zero cores and zero bytes.
        ("node-capacity-pods-only.json", {
            let mut n = node("virtual-node", true, true);
            n.conditions = conditions(&[("Ready", "True")]);
            Want::Node(Box::new(n))
        }),
        ("node-unusual-quantities.json", {
            let mut n = node("node-quantities", true, false);
            n.placement = placement("pool-b", "us-central1-b");
            n.conditions = conditions(&[("Ready", "True")]);
            n.capacity = cap(1.5, 1.5 * GI);
            n.allocatable = cap(250e-6, 1e9);
            Want::Node(Box::new(n))
        }),
    ]
}

fn pods() -> Vec<(&'static str, Want)> {
    const ADDON_UID: &[&str] = &["a3b4c5d6-e7f8-4091-a2b3-c4d5e6f7a8b9"];
    vec![
        // No status: phase unknown, not ready, its requests still count where it runs.
        ("pod-no-status.json", {
            let mut p = pod("default", "web-0", None, "Unknown");
            p.requests = cpu_mem(0.1, 64.0 * MI);
            Want::Pod(
                Box::new(p),
                "unknown",
                &["5e6f7081-92a3-4b4c-8d5e-6f708192a3b4"],
            )
        }),
        ("pod-pending-unscheduled.json", {
            let mut p = pod("jobs", "batch-7xk2p", None, "Pending");
            p.owner = owner("Job", "batch");
            p.requests = cpu_mem(2.0, GI);
            p.limits = cpu_mem(2.0, GI);
            Want::Pod(
                Box::new(p),
                "guaranteed",
                &["6f708192-a3b4-4c5d-8e6f-708192a3b4c5"],
            )
        }),
        ("pod-no-resources.json", {
            let mut p = pod("default", "shell", Some("gke-pool-a-1"), "Running");
            p.ready = true;
            Want::Pod(
                Box::new(p),
                "besteffort",
                &["8192a3b4-c5d6-4e7f-8081-92a3b4c5d6e7"],
            )
        }),
        // A mirror pod without container statuses or conditions; its cgroup is named by the
        // static pod's hash too.
        ("pod-running-no-container-statuses.json", {
            let mut p = pod(
                "kube-system",
                "kube-proxy-gke-pool-a-1",
                Some("gke-pool-a-1"),
                "Running",
            );
            p.owner = owner("Node", "gke-pool-a-1");
            p.requests = cpu_mem(0.1, 0.0);
            Want::Pod(
                Box::new(p),
                "burstable",
                &[
                    "92a3b4c5-d6e7-4f80-9192-a3b4c5d6e7f8",
                    "0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e",
                ],
            )
        }),
        ("pod-daemonset-addon-restarted.json", {
            let mut p = pod(
                "kube-system",
                "fluentbit-gke-8kx2z",
                Some("gke-pool-a-1"),
                "Running",
            );
            p.owner = owner("DaemonSet", "fluentbit-gke");
            p.addon = Some(addon("fluentbit", "1.8.12", Controller::DaemonSet));
            p.requests = cpu_mem(0.05 + 0.005, 130.0 * MI);
            p.limits = cpu_mem(0.0, 250.0 * MI);
            p.restarts = Some(Arc::new(kube_prober::model::PodRestarts {
                namespace: "kube-system".into(),
                pod: "fluentbit-gke-8kx2z".into(),
                node: Some("gke-pool-a-1".into()),
                addon: p.addon.clone(),
                containers: vec![
                    ContainerRestarts {
                        name: "fluentbit".into(),
                        restarts: 4,
                        last_reason: Some("OOMKilled".into()),
                        last_exit_code: Some(137),
                    },
                    ContainerRestarts {
                        name: "fluentbit-gke".into(),
                        restarts: 0,
                        last_reason: None,
                        last_exit_code: None,
                    },
                ],
            }));
            Want::Pod(Box::new(p), "burstable", ADDON_UID)
        }),
    ]
}

fn workloads() -> Vec<(&'static str, Want)> {
    let ds = |name: &str, version: &str| addon(name, version, Controller::DaemonSet);
    vec![
        // Before the controller wrote a status: no pods wanted yet.
        (
            "daemonset-no-status.json",
            Want::Workload(expected(ds("fluentbit", "1.8.12"), "fluentbit-gke", 0)),
        ),
        (
            "daemonset-status-without-numbers.json",
            Want::Workload(expected(
                ds("gke-metrics-agent", "unknown"),
                "gke-metrics-agent",
                0,
            )),
        ),
        // No spec.replicas: the API's default, 1.
        (
            "deployment-no-replicas.json",
            Want::Workload(expected(
                addon("kubedns", "unknown", Controller::Deployment),
                "kube-dns",
                1,
            )),
        ),
    ]
}

fn rows() -> Vec<(&'static str, Want)> {
    let mut rows = nodes();
    rows.extend(pods());
    rows.extend(workloads());
    rows
}

fn json(name: &str) -> Value {
    serde_json::from_slice(&read(KIND, name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// What `name` gives, against `want`; `Err` says how they differ.
fn check(name: &str, want: &Want, cfg: &DeriveConfig) -> Result<(), String> {
    let v = json(name);
    let differ = |got: &dyn std::fmt::Debug, want: &dyn std::fmt::Debug| {
        Err(format!("{name}:\n got {got:?}\nwant {want:?}"))
    };
    match want {
        Want::Node(want) => {
            let lean: LeanNode = serde_json::from_value(v).map_err(|e| format!("{name}: {e}"))?;
            let got = node_facts(&lean, now(), cfg).map_err(|e| format!("{name}: {e}"))?;
            if got != **want {
                return differ(&got, want);
            }
        }
        Want::Pod(want, qos, ids) => {
            let lean: LeanPod = serde_json::from_value(v).map_err(|e| format!("{name}: {e}"))?;
            let got = pod_facts(&lean, cfg).map_err(|e| format!("{name}: {e}"))?;
            if got != **want {
                return differ(&got, want);
            }
            let task = task_pod(&lean, &TaskPodConfig::default())
                .map_err(|e| format!("{name}: {e}"))?
                .ok_or_else(|| format!("{name}: no task"))?;
            let ids: Vec<String> = ids.iter().map(|s| s.to_string()).collect();
            if task.qos != *qos || task.cgroup_ids != ids {
                return differ(&(task.qos, task.cgroup_ids), &(qos, ids));
            }
        }
        Want::Workload(want) => {
            let got = match v["kind"].as_str() {
                Some("DaemonSet") => {
                    let ds: DaemonSet =
                        serde_json::from_value(v).map_err(|e| format!("{name}: {e}"))?;
                    daemonset_expected(&ds, cfg)
                }
                _ => {
                    let d: Deployment =
                        serde_json::from_value(v).map_err(|e| format!("{name}: {e}"))?;
                    deployment_expected(&d, cfg)
                }
            };
            if got != *want {
                return differ(&got, want);
            }
        }
    }
    Ok(())
}

#[test]
fn every_kubernetes_object_gives_its_expected_facts() {
    let rows = rows();
    assert_every_entry_has_a_row(KIND, rows.iter().map(|(name, _)| *name));
    let cfg = DeriveConfig::default();
    let wrong: Vec<String> = rows
        .iter()
        .filter_map(|(name, want)| check(name, want, &cfg).err())
        .collect();
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Every object of the corpus at once, as the watchers hold them: nothing skipped, the pods'
/// requests summed on their node, the addon's pods counted against what its DaemonSet wants.
#[test]
fn the_whole_corpus_makes_one_cluster_state_without_skips() {
    let of_kind = |kind: &str| -> Vec<Value> {
        super::entries(KIND)
            .iter()
            .map(|n| json(n))
            .filter(|v| v["kind"] == kind)
            .collect()
    };
    let nodes: Vec<LeanNode> = of_kind("Node")
        .into_iter()
        .map(|v| serde_json::from_value(v).unwrap())
        .collect();
    let pods: Vec<LeanPod> = of_kind("Pod")
        .into_iter()
        .map(|v| serde_json::from_value(v).unwrap())
        .collect();
    let daemonsets: Vec<DaemonSet> = of_kind("DaemonSet")
        .into_iter()
        .map(|v| serde_json::from_value(v).unwrap())
        .collect();
    let deployments: Vec<Deployment> = of_kind("Deployment")
        .into_iter()
        .map(|v| serde_json::from_value(v).unwrap())
        .collect();
    let st = cluster_state(
        &nodes,
        &pods,
        &daemonsets,
        &deployments,
        now(),
        &DeriveConfig::default(),
    );
    assert!(st.skipped.is_empty(), "{:?}", st.skipped);
    assert_eq!(st.nodes.len(), 4);
    let on_node = &st.node_pods["gke-pool-a-1"];
    assert_eq!(on_node.pods, 3);
    assert_eq!(on_node.requests, cpu_mem(0.155, 130.0 * MI));
    assert_eq!(on_node.limits, cpu_mem(0.0, 250.0 * MI));
    // Unscheduled pods are on no node.
    assert_eq!(st.node_pods.len(), 1);
    let addons = &st.addons["gke-pool-a-1"];
    assert_eq!(addons.len(), 1);
    assert_eq!((addons[0].pods, addons[0].ready), (1, 0));
    let mut wanted: Vec<(&str, u32)> = st
        .expected
        .iter()
        .map(|e| (e.workload.as_str(), e.expected))
        .collect();
    wanted.sort();
    assert_eq!(
        wanted,
        [
            ("fluentbit-gke", 0),
            ("gke-metrics-agent", 0),
            ("kube-dns", 1)
        ]
    );
}
