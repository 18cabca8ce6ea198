//! Pure functions from Kubernetes objects to [`crate::model`] facts, and the per-tick counts
//! gke-prober reports, with its bugs fixed: `schedulable` honours `spec.unschedulable`; every
//! pod of an addon counts; ReplicaSet owners resolve to their Deployment; DaemonSet expected
//! counts come from `status.desiredNumberScheduled`; nothing panics on missing fields.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

pub use crate::model::cluster::{Availability, node_availability_counts, node_condition_counts};
use crate::model::{
    Addon, AddonExpected, AddonOnNode, ClusterState, ContainerRestarts, Controller, CpuMem,
    NodeCapacity, NodeFacts, NodePods, Owner, Placement, PodFacts, PodRestarts,
};
use crate::shared::quantity::parse_quantity;

use crate::k8s::lean::{AsLeanNode, AsLeanPod, BadObject, LeanNode, LeanPod, Resources};

/// A pair of keys naming an addon and its version, looked up in annotations, then labels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddonKeys {
    pub name: String,
    pub version: String,
}

/// What derivation looks at.
#[derive(Debug, Clone, PartialEq)]
pub struct DeriveConfig {
    /// A node younger than this is still warming up (gke-prober: 5 minutes).
    pub warming: Duration,
    /// Node labels naming the pool, first match wins.
    pub pool_labels: Vec<String>,
    /// Node labels naming the zone, first match wins.
    pub zone_labels: Vec<String>,
    /// Addon markers, first match wins.
    pub addon_keys: Vec<AddonKeys>,
    /// How the pod watcher estimates the load of just-bound pods (see [`super::estimate`]).
    pub estimate: super::estimate::EstimateConfig,
}

impl Default for DeriveConfig {
    fn default() -> Self {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect();
        DeriveConfig {
            warming: Duration::from_secs(300),
            pool_labels: s(&[
                "cloud.google.com/gke-nodepool",
                "eks.amazonaws.com/nodegroup",
                "kubernetes.azure.com/agentpool",
                "agentpool",
            ]),
            zone_labels: s(&[
                "topology.kubernetes.io/zone",
                "failure-domain.beta.kubernetes.io/zone",
            ]),
            addon_keys: vec![AddonKeys {
                name: "components.gke.io/component-name".into(),
                version: "components.gke.io/component-version".into(),
            }],
            estimate: Default::default(),
        }
    }
}

/// Label value for anything we could not find.
pub const UNKNOWN: &str = "unknown";

fn first_label(meta: &ObjectMeta, keys: &[String]) -> String {
    let labels = meta.labels.as_ref();
    keys.iter()
        .find_map(|k| labels.and_then(|l| l.get(k)).filter(|v| !v.is_empty()))
        .cloned()
        .unwrap_or_else(|| UNKNOWN.to_string())
}

/// Pool and zone of a node from its labels.
pub fn placement(meta: &ObjectMeta, cfg: &DeriveConfig) -> Placement {
    Placement {
        pool: first_label(meta, &cfg.pool_labels),
        zone: first_label(meta, &cfg.zone_labels),
    }
}

fn first_node_label(node: &LeanNode, keys: &[String]) -> String {
    keys.iter()
        .find_map(|k| node.label(k).filter(|v| !v.is_empty()))
        .unwrap_or(UNKNOWN)
        .to_string()
}

/// Pool and zone of a node from its labels, as [`placement`].
pub fn node_placement(node: &LeanNode, cfg: &DeriveConfig) -> Placement {
    Placement {
        pool: first_node_label(node, &cfg.pool_labels),
        zone: first_node_label(node, &cfg.zone_labels),
    }
}

/// The cpu and memory of a node's resource list: `None` unless it has both (a list of only
/// `pods`, as a virtual node reports, has no CPU or memory to serve, not zero of each).
fn node_cpu_mem(r: Option<&Resources>) -> Result<Option<CpuMem>, BadObject> {
    let Some(r) = r else { return Ok(None) };
    let get = |k: &str| -> Result<Option<f64>, BadObject> {
        r.get(k)
            .map(|q| {
                parse_quantity(&q.0).map_err(|reason| BadObject::Quantity {
                    resource: k.to_string(),
                    reason,
                })
            })
            .transpose()
    };
    let (cpu, memory) = (get("cpu")?, get("memory")?);
    Ok(cpu.zip(memory).map(|(cpu_cores, memory_bytes)| CpuMem {
        cpu_cores,
        memory_bytes,
    }))
}

fn capacity(c: Option<CpuMem>) -> Option<NodeCapacity> {
    c.map(|c| NodeCapacity {
        cpu_cores: c.cpu_cores,
        memory_bytes: c.memory_bytes,
    })
}

/// Facts of a node (a [`LeanNode`] as watched, or a whole `Node`); `Err` only for an object
/// with no name or unparsable quantities.
pub fn node_facts<N: AsLeanNode + ?Sized>(
    node: &N,
    now: SystemTime,
    cfg: &DeriveConfig,
) -> Result<NodeFacts, BadObject> {
    let node = node.lean()?;
    let node = node.as_ref();
    let name = node
        .metadata
        .name
        .clone()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| BadObject::missing("node without a name"))?;
    let status = node.status.as_ref();
    let mut conditions: BTreeMap<&str, (&Arc<str>, &Arc<str>)> = BTreeMap::new();
    for c in status
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
    {
        conditions.insert(&c.type_, (&c.type_, &c.status));
    }
    let ready = conditions
        .get("Ready")
        .is_some_and(|(_, s)| &***s == "True");
    let spec = node.spec.as_ref();
    let cordoned = spec.and_then(|s| s.unschedulable).unwrap_or(false);
    let tainted = spec.and_then(|s| s.taints.as_ref()).is_some_and(|t| {
        t.iter()
            .any(|t| t.key == "node.kubernetes.io/unschedulable")
    });
    let created = node
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| SystemTime::from(t.0));
    let done_warming =
        created.is_some_and(|c| now.duration_since(c).unwrap_or_default() >= cfg.warming);
    let cap = node_cpu_mem(status.and_then(|s| s.capacity.as_ref()))
        .map_err(|e| e.of(format!("node {name} capacity ")))?;
    let alloc = node_cpu_mem(status.and_then(|s| s.allocatable.as_ref()))
        .map_err(|e| e.of(format!("node {name} allocatable ")))?;
    Ok(NodeFacts {
        placement: node_placement(node, cfg),
        name,
        conditions: conditions
            .into_values()
            .map(|(t, s)| (t.clone(), s.clone()))
            .collect(),
        ready,
        schedulable: !cordoned && !tainted,
        done_warming,
        created,
        capacity: capacity(cap),
        allocatable: capacity(alloc),
    })
}

/// The addon a set of annotations and labels marks, if any. The version defaults to `unknown`
/// (label-based markers such as `app.kubernetes.io/version` are often missing).
pub fn addon_marker(
    metas: &[Option<&ObjectMeta>],
    cfg: &DeriveConfig,
) -> Option<(Arc<str>, Arc<str>)> {
    for keys in &cfg.addon_keys {
        for meta in metas.iter().flatten() {
            for map in [meta.annotations.as_ref(), meta.labels.as_ref()]
                .into_iter()
                .flatten()
            {
                if let Some(name) = map.get(&keys.name).filter(|n| !n.is_empty()) {
                    let version = map
                        .get(&keys.version)
                        .filter(|v| !v.is_empty())
                        .map_or(UNKNOWN, String::as_str);
                    return Some((name.as_str().into(), version.into()));
                }
            }
        }
    }
    None
}

/// The addon a DaemonSet runs and how many pods it wants (`status.desiredNumberScheduled`).
pub fn daemonset_expected(ds: &DaemonSet, cfg: &DeriveConfig) -> Option<AddonExpected> {
    let template = ds.spec.template.metadata.as_ref();
    let (name, version) = addon_marker(&[template, Some(&ds.metadata)], cfg)?;
    Some(AddonExpected {
        addon: Addon {
            name,
            version,
            controller: Controller::DaemonSet,
        },
        namespace: ds.metadata.namespace.clone().unwrap_or_default(),
        workload: ds.metadata.name.clone().unwrap_or_default(),
        expected: ds
            .status
            .as_ref()
            .map(|s| u32::try_from(s.desired_number_scheduled).unwrap_or(0))
            .unwrap_or(0),
    })
}

/// The addon a Deployment runs and how many pods it wants (`spec.replicas`, 1 when unset).
pub fn deployment_expected(d: &Deployment, cfg: &DeriveConfig) -> Option<AddonExpected> {
    let template = d.spec.template.metadata.as_ref();
    let (name, version) = addon_marker(&[template, Some(&d.metadata)], cfg)?;
    Some(AddonExpected {
        addon: Addon {
            name,
            version,
            controller: Controller::Deployment,
        },
        namespace: d.metadata.namespace.clone().unwrap_or_default(),
        workload: d.metadata.name.clone().unwrap_or_default(),
        expected: d.spec.replicas.map_or(1, |r| u32::try_from(r).unwrap_or(0)),
    })
}

/// The pod's controlling owner, with a ReplicaSet resolved to its Deployment through the
/// `pod-template-hash` label (a Deployment's ReplicaSet is named `<deployment>-<hash>`).
pub fn owner<P: AsLeanPod + ?Sized>(pod: &P) -> Option<Owner> {
    owner_of(&*pod.lean().ok()?)
}

fn owner_of(pod: &LeanPod) -> Option<Owner> {
    let refs = pod.metadata.owner_references.as_ref()?;
    let r = refs
        .iter()
        .find(|r| r.controller == Some(true))
        .or_else(|| refs.first())?;
    if r.kind == "ReplicaSet" {
        let hash = pod
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("pod-template-hash"));
        if let Some(deployment) = hash.and_then(|h| r.name.strip_suffix(&format!("-{h}"))) {
            return Some(Owner {
                kind: "Deployment".into(),
                name: deployment.into(),
            });
        }
    }
    Some(Owner {
        kind: r.kind.as_str().into(),
        name: r.name.as_str().into(),
    })
}

/// A pod phase: Kubernetes' five borrowed, anything else copied.
fn phase(p: Option<&str>) -> std::borrow::Cow<'static, str> {
    const KNOWN: [&str; 5] = ["Pending", "Running", "Succeeded", "Failed", "Unknown"];
    match p {
        None => "Unknown".into(),
        Some(p) => KNOWN
            .iter()
            .find(|k| **k == p)
            .map_or_else(|| p.to_string().into(), |k| (*k).into()),
    }
}

/// Facts of a pod (as decoded by the watchers, or a whole k8s-openapi `Pod`); `Err` for a
/// nameless pod or an unparsable quantity (counted, never guessed).
pub fn pod_facts<P: AsLeanPod + ?Sized>(
    pod: &P,
    cfg: &DeriveConfig,
) -> Result<PodFacts, BadObject> {
    facts_of(&*pod.lean()?, cfg)
}

fn facts_of(pod: &LeanPod, cfg: &DeriveConfig) -> Result<PodFacts, BadObject> {
    let name =
        (pod.metadata.name.clone()).ok_or_else(|| BadObject::missing("pod without a name"))?;
    let namespace: Arc<str> = pod.metadata.namespace.as_deref().unwrap_or_default().into();
    let spec = pod.spec.as_ref();
    let status = pod.status.as_ref();
    // Kubernetes' effective requests and limits (sidecars, init containers, pod-level
    // resources, overhead): the same rule the node role's task metrics use.
    let (req, lim) = crate::k8s::pod_resources::pod_resources(pod)
        .map_err(|e| e.of(format!("pod {namespace}/{name}: ")))?;
    let cpu_mem_of = |r: &BTreeMap<String, f64>| CpuMem {
        cpu_cores: r.get("cpu").copied().unwrap_or(0.0),
        memory_bytes: r.get("memory").copied().unwrap_or(0.0),
    };
    let (requests, limits) = (cpu_mem_of(&req), cpu_mem_of(&lim));
    let owner = owner_of(pod);
    // A terminating pod (deletionTimestamp set; it may still say Ready) is on its way out: as
    // the ReplicaSet and DaemonSet controllers do, it no longer counts as one of its addon's
    // pods, and it is not ready (EndpointSlices stop sending it traffic). It still holds its
    // requests on the node until it is gone, as the scheduler counts it.
    let terminating = pod.metadata.deletion_timestamp.is_some();
    let addon = owner
        .as_ref()
        .filter(|_| !terminating)
        .and_then(|o| addon_of(pod, o, cfg));
    let ready = !terminating
        && status
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    let containers = if addon.is_some() {
        container_restarts(pod)
    } else {
        Vec::new()
    };
    let name: Arc<str> = name.into();
    let node: Option<Arc<str>> = spec
        .and_then(|s| s.node_name.as_deref())
        .filter(|n| !n.is_empty())
        .map(Arc::from);
    let restarts = addon.as_ref().map(|a| {
        Arc::new(PodRestarts {
            namespace: namespace.clone(),
            pod: name.clone(),
            node: node.clone(),
            addon: Some(a.clone()),
            containers,
        })
    });
    Ok(PodFacts {
        node,
        phase: phase(status.and_then(|s| s.phase.as_deref())),
        namespace,
        name,
        ready,
        owner,
        addon,
        requests,
        limits,
        restarts,
    })
}

/// The addon a pod of a DaemonSet or Deployment (its `owner`) belongs to, by its marker.
fn addon_of(pod: &LeanPod, owner: &Owner, cfg: &DeriveConfig) -> Option<Addon> {
    let controller = match &*owner.kind {
        "DaemonSet" => Controller::DaemonSet,
        "Deployment" => Controller::Deployment,
        _ => return None,
    };
    let (name, version) = addon_marker(&[Some(&pod.metadata)], cfg)?;
    Some(Addon {
        name,
        version,
        controller,
    })
}

/// Each container's restarts and its last termination's reason and exit code.
fn container_restarts(pod: &LeanPod) -> Vec<ContainerRestarts> {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .flatten()
        .map(|cs| {
            let term = cs.last_state.as_ref().and_then(|s| s.terminated.as_ref());
            ContainerRestarts {
                name: cs.name.as_str().into(),
                restarts: u32::try_from(cs.restart_count).unwrap_or(0),
                last_reason: term.and_then(|t| t.reason.as_deref()).map(Arc::from),
                last_exit_code: term.map(|t| t.exit_code),
            }
        })
        .collect()
}

/// Requests and limits of the pods that hold resources on each node (not Succeeded/Failed).
///
/// Summed in fixed point (nano-units, the finest a Kubernetes quantity has) so the sums do not
/// depend on the order pods are visited in: the cluster role (all pods, hash order) and a
/// node role (its node's pods) give the same bits for the same node.
pub fn node_pod_sums<'a>(
    pods: impl IntoIterator<Item = &'a PodFacts>,
) -> BTreeMap<Arc<str>, NodePods> {
    const NANO: f64 = 1e9;
    #[derive(Default)]
    struct Sum([i128; 4], u32);
    // Quantities are capped at 2^63-1, so a value in nano-units fits an i128 many times over.
    let fixed = |v: f64| (v * NANO).round() as i128;
    let mut sums: BTreeMap<&Arc<str>, Sum> = BTreeMap::new();
    for p in pods {
        if p.phase == "Succeeded" || p.phase == "Failed" {
            continue;
        }
        let Some(node) = &p.node else { continue };
        let e = sums.entry(node).or_default();
        for (acc, v) in e.0.iter_mut().zip([
            p.requests.cpu_cores,
            p.requests.memory_bytes,
            p.limits.cpu_cores,
            p.limits.memory_bytes,
        ]) {
            *acc = acc.saturating_add(fixed(v));
        }
        e.1 += 1;
    }
    let float = |v: i128| v as f64 / NANO;
    sums.into_iter()
        .map(|(node, Sum([rc, rm, lc, lm], pods))| {
            let np = NodePods {
                requests: CpuMem {
                    cpu_cores: float(rc),
                    memory_bytes: float(rm),
                },
                limits: CpuMem {
                    cpu_cores: float(lc),
                    memory_bytes: float(lm),
                },
                pods,
            };
            (node.clone(), np)
        })
        .collect()
}

/// Everything the cluster metrics need, from the watchers' objects. Objects that cannot be
/// used are skipped, logged and counted by reason; they never become a made-up number.
pub fn cluster_state<'a, N: AsLeanNode + 'a, P: AsLeanPod + 'a>(
    nodes: impl IntoIterator<Item = &'a N>,
    pods: impl IntoIterator<Item = &'a P>,
    daemonsets: impl IntoIterator<Item = &'a DaemonSet>,
    deployments: impl IntoIterator<Item = &'a Deployment>,
    now: SystemTime,
    cfg: &DeriveConfig,
) -> ClusterState {
    let mut bad_pods = 0;
    let mut facts = Vec::new();
    for p in pods {
        match pod_facts(p, cfg) {
            Ok(f) => facts.push(f),
            Err(e) => {
                tracing::warn!(reason = "bad_pod", error = %e, "object skipped");
                bad_pods += 1;
            }
        }
    }
    cluster_state_from_facts(nodes, &facts, bad_pods, daemonsets, deployments, now, cfg)
}

/// Every node's facts, by name, and how many nodes could not be used (each logged).
pub fn nodes_facts<'a, N: AsLeanNode + 'a>(
    nodes: impl IntoIterator<Item = &'a N>,
    now: SystemTime,
    cfg: &DeriveConfig,
) -> (Vec<NodeFacts>, u64) {
    let mut facts = Vec::new();
    let mut bad = 0;
    for n in nodes {
        match node_facts(n, now, cfg) {
            Ok(f) => facts.push(f),
            Err(e) => {
                tracing::warn!(reason = "bad_node", error = %e, "object skipped");
                bad += 1;
            }
        }
    }
    // By name, as every output lists nodes (and so the addons, kept by name, join in one pass).
    facts.sort_unstable_by(|a, b| a.name.cmp(&b.name));
    (facts, bad)
}

/// As [`cluster_state`], from pod facts derived earlier (the watchers keep facts, not Pods);
/// `bad_pods` is how many pods could not be used.
pub fn cluster_state_from_facts<'a, 'p, N: AsLeanNode + 'a>(
    nodes: impl IntoIterator<Item = &'a N>,
    pods: impl IntoIterator<Item = &'p PodFacts> + Clone,
    bad_pods: u64,
    daemonsets: impl IntoIterator<Item = &'a DaemonSet>,
    deployments: impl IntoIterator<Item = &'a Deployment>,
    now: SystemTime,
    cfg: &DeriveConfig,
) -> ClusterState {
    let (facts, bad_nodes) = nodes_facts(nodes, now, cfg);
    let nodes = (Arc::new(facts), bad_nodes);
    cluster_state_with_nodes(nodes, pods, bad_pods, daemonsets, deployments, cfg)
}

/// As [`cluster_state_from_facts`], with the nodes' facts made already (by name, as
/// [`nodes_facts`] gives them) and how many nodes could not be used.
pub fn cluster_state_with_nodes<'a, 'p>(
    (nodes, bad_nodes): (Arc<Vec<NodeFacts>>, u64),
    pods: impl IntoIterator<Item = &'p PodFacts> + Clone,
    bad_pods: u64,
    daemonsets: impl IntoIterator<Item = &'a DaemonSet>,
    deployments: impl IntoIterator<Item = &'a Deployment>,
    cfg: &DeriveConfig,
) -> ClusterState {
    let mut st = ClusterState {
        nodes,
        ..ClusterState::default()
    };
    if bad_nodes > 0 {
        st.skipped.insert("bad_node".into(), bad_nodes);
    }
    if bad_pods > 0 {
        st.skipped.insert("bad_pod".into(), bad_pods);
    }
    st.expected.extend(
        daemonsets
            .into_iter()
            .filter_map(|d| daemonset_expected(d, cfg)),
    );
    st.expected.extend(
        deployments
            .into_iter()
            .filter_map(|d| deployment_expected(d, cfg)),
    );
    st.node_pods = node_pod_sums(pods.clone());
    let mut by_node: BTreeMap<Arc<str>, Vec<&'p PodFacts>> = BTreeMap::new();
    for f in pods.clone() {
        if let (Some(node), Some(_)) = (&f.node, &f.addon) {
            by_node.entry(node.clone()).or_default().push(f);
        }
    }
    st.addons = by_node
        .into_iter()
        .map(|(node, pods)| (node, addons_on_node(pods)))
        .collect();
    st.restarts = pods
        .into_iter()
        .filter_map(|f| f.restarts.clone())
        .collect();
    st
}

/// The addons on one node, from the pods on it.
pub fn addons_on_node<'a>(pods: impl IntoIterator<Item = &'a PodFacts>) -> Vec<AddonOnNode> {
    let mut by: BTreeMap<Addon, (u32, u32)> = BTreeMap::new();
    for p in pods {
        if let Some(a) = &p.addon {
            let e = by.entry(a.clone()).or_default();
            e.0 += 1;
            e.1 += u32::from(p.ready);
        }
    }
    by.into_iter()
        .map(|(addon, (pods, ready))| AddonOnNode { addon, pods, ready })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::{DaemonSetSpec, DaemonSetStatus, DeploymentSpec};
    use k8s_openapi::api::core::v1::{
        Container, ContainerState, ContainerStateTerminated, ContainerStatus, Node, NodeCondition,
        NodeSpec, NodeStatus, Pod, PodCondition, PodSpec, PodStatus, PodTemplateSpec,
        ResourceRequirements, Taint,
    };
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};

    fn map(kv: &[(&str, &str)]) -> Option<BTreeMap<String, String>> {
        Some(
            kv.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    fn q(kv: &[(&str, &str)]) -> Option<BTreeMap<String, Quantity>> {
        Some(
            kv.iter()
                .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                .collect(),
        )
    }

    const NOW: u64 = 1_800_000_000;

    fn at(s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(s)
    }

    fn node(name: &str, labels: &[(&str, &str)], conds: &[(&str, &str)], age: u64) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: map(labels),
                creation_timestamp: Some(Time(
                    k8s_openapi::jiff::Timestamp::from_second((NOW - age) as i64).unwrap(),
                )),
                ..Default::default()
            },
            spec: Some(NodeSpec::default()),
            status: Some(NodeStatus {
                conditions: Some(
                    conds
                        .iter()
                        .map(|(t, s)| NodeCondition {
                            type_: t.to_string(),
                            status: s.to_string(),
                            ..Default::default()
                        })
                        .collect(),
                ),
                capacity: q(&[("cpu", "4"), ("memory", "16Gi"), ("pods", "110")]),
                allocatable: q(&[("cpu", "3920m"), ("memory", "14Gi")]),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn node_table() {
        let cfg = DeriveConfig::default();
        let gke = [
            ("cloud.google.com/gke-nodepool", "pool-1"),
            ("topology.kubernetes.io/zone", "us-c1-a"),
        ];
        struct Case {
            what: &'static str,
            node: Node,
            want: (bool, bool, bool, bool),
            placement: (&'static str, &'static str),
        }
        let mut cordoned = node("n", &gke, &[("Ready", "True")], 3600);
        cordoned.spec.as_mut().unwrap().unschedulable = Some(true);
        let mut tainted = node("n", &gke, &[("Ready", "True")], 3600);
        tainted.spec.as_mut().unwrap().taints = Some(vec![Taint {
            key: "node.kubernetes.io/unschedulable".into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        }]);
        let cases = vec![
            Case {
                what: "healthy GKE node",
                node: node(
                    "n",
                    &gke,
                    &[("Ready", "True"), ("MemoryPressure", "False")],
                    3600,
                ),
                want: (true, true, true, true),
                placement: ("pool-1", "us-c1-a"),
            },
            Case {
                what: "not ready",
                node: node("n", &gke, &[("Ready", "False")], 3600),
                want: (false, true, true, false),
                placement: ("pool-1", "us-c1-a"),
            },
            Case {
                what: "ready Unknown",
                node: node("n", &gke, &[("Ready", "Unknown")], 3600),
                want: (false, true, true, false),
                placement: ("pool-1", "us-c1-a"),
            },
            Case {
                what: "no conditions",
                node: node("n", &[], &[], 3600),
                want: (false, true, true, false),
                placement: ("unknown", "unknown"),
            },
            Case {
                what: "warming",
                node: node("n", &gke, &[("Ready", "True")], 60),
                want: (true, true, false, false),
                placement: ("pool-1", "us-c1-a"),
            },
            Case {
                what: "spec.unschedulable (gke-prober missed it)",
                node: cordoned,
                want: (true, false, true, false),
                placement: ("pool-1", "us-c1-a"),
            },
            Case {
                what: "unschedulable taint",
                node: tainted,
                want: (true, false, true, false),
                placement: ("pool-1", "us-c1-a"),
            },
            Case {
                what: "EKS labels",
                node: node(
                    "n",
                    &[
                        ("eks.amazonaws.com/nodegroup", "ng-1"),
                        ("failure-domain.beta.kubernetes.io/zone", "eu-west-1b"),
                    ],
                    &[("Ready", "True")],
                    3600,
                ),
                want: (true, true, true, true),
                placement: ("ng-1", "eu-west-1b"),
            },
            Case {
                what: "AKS labels",
                node: node(
                    "n",
                    &[
                        ("kubernetes.azure.com/agentpool", "nodepool1"),
                        ("topology.kubernetes.io/zone", "westeurope-1"),
                    ],
                    &[("Ready", "True")],
                    3600,
                ),
                want: (true, true, true, true),
                placement: ("nodepool1", "westeurope-1"),
            },
        ];
        for c in cases {
            let f = node_facts(&c.node, at(NOW), &cfg).unwrap();
            assert_eq!(
                (f.ready, f.schedulable, f.done_warming, f.available()),
                c.want,
                "{}",
                c.what
            );
            assert_eq!(
                (f.placement.pool.as_str(), f.placement.zone.as_str()),
                c.placement,
                "{}",
                c.what
            );
        }
        let f = node_facts(&node("n", &gke, &[("Ready", "True")], 3600), at(NOW), &cfg).unwrap();
        assert_eq!(
            f.capacity.unwrap().memory_bytes,
            16.0 * 1024.0 * 1024.0 * 1024.0
        );
        assert_eq!(f.allocatable.unwrap().cpu_cores, 3.92);
        assert!(
            node_facts(&Node::default(), at(NOW), &cfg).is_err(),
            "nameless node is an error, not a panic"
        );
        // Conditions in type order, the last of a repeated type kept, and the strings shared
        // with the watched Node's (no copy per node and derivation: 65,000 nodes a tick).
        use crate::k8s::lean::AsLeanNode;
        let n = node(
            "n",
            &gke,
            &[
                ("Ready", "False"),
                ("DiskPressure", "False"),
                ("Ready", "True"),
            ],
            3600,
        );
        let lean = n.lean().unwrap().into_owned();
        let f = node_facts(&lean, at(NOW), &cfg).unwrap();
        let got: Vec<(&str, &str)> = f.conditions.iter().map(|(t, s)| (&**t, &**s)).collect();
        assert_eq!(got, [("DiskPressure", "False"), ("Ready", "True")]);
        assert!(f.ready);
        let held = lean
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .unwrap();
        assert!(Arc::ptr_eq(&f.conditions[1].0, &held[2].type_));
        assert!(Arc::ptr_eq(&f.conditions[1].1, &held[2].status));
    }

    fn owner_ref(kind: &str, name: &str) -> OwnerReference {
        OwnerReference {
            api_version: "apps/v1".into(),
            kind: kind.into(),
            name: name.into(),
            uid: "u".into(),
            controller: Some(true),
            ..Default::default()
        }
    }

    fn pod(
        name: &str,
        node: &str,
        owner: Option<OwnerReference>,
        ann: &[(&str, &str)],
        labels: &[(&str, &str)],
        ready: bool,
    ) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("kube-system".into()),
                annotations: map(ann),
                labels: map(labels),
                owner_references: owner.map(|o| vec![o]),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: Some(node.into()),
                containers: vec![
                    Container {
                        name: "a".into(),
                        resources: Some(ResourceRequirements {
                            requests: q(&[("cpu", "100m"), ("memory", "128Mi")]),
                            limits: q(&[("cpu", "500m"), ("memory", "256Mi")]),
                            ..Default::default()
                        }),
                        ..Default::default()
                    },
                    Container {
                        name: "b".into(),
                        resources: Some(ResourceRequirements {
                            requests: q(&[("cpu", "50m")]),
                            ..Default::default()
                        }),
                        ..Default::default()
                    },
                ],
                init_containers: Some(vec![Container {
                    name: "init".into(),
                    resources: Some(ResourceRequirements {
                        requests: q(&[("cpu", "1"), ("memory", "64Mi")]),
                        ..Default::default()
                    }),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: Some("Running".into()),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: if ready { "True" } else { "False" }.into(),
                    ..Default::default()
                }]),
                container_statuses: Some(vec![ContainerStatus {
                    name: "a".into(),
                    restart_count: 3,
                    last_state: Some(ContainerState {
                        terminated: Some(ContainerStateTerminated {
                            reason: Some("OOMKilled".into()),
                            exit_code: 137,
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        }
    }

    const GKE_ADDON: [(&str, &str); 2] = [
        ("components.gke.io/component-name", "fluentbit"),
        ("components.gke.io/component-version", "1.8.12"),
    ];

    #[test]
    fn pod_table() {
        let cfg = DeriveConfig::default();
        let p = pod(
            "fluentbit-x",
            "n1",
            Some(owner_ref("DaemonSet", "fluentbit")),
            &GKE_ADDON,
            &[],
            true,
        );
        let f = pod_facts(&p, &cfg).unwrap();
        assert_eq!(&*f.addon.as_ref().unwrap().name, "fluentbit");
        assert_eq!(f.addon.as_ref().unwrap().controller, Controller::DaemonSet);
        assert_eq!(f.node.as_deref(), Some("n1"));
        // requests: max(100m + 50m, init 1) = 1 core; memory max(128Mi, 64Mi).
        assert_eq!(f.requests.cpu_cores, 1.0);
        assert_eq!(f.requests.memory_bytes, 128.0 * 1024.0 * 1024.0);
        assert_eq!(f.limits.cpu_cores, 0.5);
        assert_eq!(
            f.restarts.as_ref().unwrap().containers,
            vec![ContainerRestarts {
                name: "a".into(),
                restarts: 3,
                last_reason: Some("OOMKilled".into()),
                last_exit_code: Some(137)
            }]
        );

        // A ReplicaSet owner resolves to its Deployment through pod-template-hash.
        let p = pod(
            "kube-dns-5f7d-abcde",
            "n1",
            Some(owner_ref("ReplicaSet", "kube-dns-5f7d")),
            &[("components.gke.io/component-name", "kubedns")],
            &[("pod-template-hash", "5f7d")],
            false,
        );
        let f = pod_facts(&p, &cfg).unwrap();
        assert_eq!(
            f.owner,
            Some(Owner {
                kind: "Deployment".into(),
                name: "kube-dns".into()
            })
        );
        let a = f.addon.unwrap();
        assert_eq!(
            (&*a.name, &*a.version, a.controller),
            ("kubedns", "unknown", Controller::Deployment)
        );

        // A ReplicaSet without the hash label stays a ReplicaSet; no addon for it.
        let p = pod(
            "x",
            "n1",
            Some(owner_ref("ReplicaSet", "rs-1")),
            &GKE_ADDON,
            &[],
            true,
        );
        let f = pod_facts(&p, &cfg).unwrap();
        assert_eq!(&*f.owner.unwrap().kind, "ReplicaSet");
        assert!(f.addon.is_none());
        assert!(
            f.restarts.is_none(),
            "restarts are kept for addon pods only"
        );
        assert_eq!(f.phase, "Running");
        assert!(matches!(f.phase, std::borrow::Cow::Borrowed(_)));

        // No owner, no controller flag: no panic; no addon.
        let mut o = owner_ref("DaemonSet", "d");
        o.controller = None;
        let f = pod_facts(&pod("y", "n1", Some(o), &GKE_ADDON, &[], true), &cfg).unwrap();
        assert_eq!(
            &*f.owner.unwrap().kind,
            "DaemonSet",
            "falls back to the first owner"
        );
        assert!(
            pod_facts(&pod("z", "n1", None, &GKE_ADDON, &[], true), &cfg)
                .unwrap()
                .addon
                .is_none()
        );

        // Configurable label keys.
        let mut cfg2 = DeriveConfig::default();
        cfg2.addon_keys.push(AddonKeys {
            name: "app.kubernetes.io/name".into(),
            version: "app.kubernetes.io/version".into(),
        });
        let p = pod(
            "c",
            "n1",
            Some(owner_ref("DaemonSet", "cilium")),
            &[],
            &[
                ("app.kubernetes.io/name", "cilium"),
                ("app.kubernetes.io/version", "1.15"),
            ],
            true,
        );
        let a = pod_facts(&p, &cfg2).unwrap().addon.unwrap();
        assert_eq!((&*a.name, &*a.version), ("cilium", "1.15"));
        assert!(pod_facts(&p, &cfg).unwrap().addon.is_none());

        // A bad quantity is an error, never a silent zero.
        let mut bad = pod("b", "n1", None, &[], &[], true);
        bad.spec.as_mut().unwrap().containers[0]
            .resources
            .as_mut()
            .unwrap()
            .requests = q(&[("cpu", "lots")]);
        let e = pod_facts(&bad, &cfg).unwrap_err();
        assert!(e.to_string().contains("cpu"), "{e}");
    }

    /// A deleted pod first arrives MODIFIED with `deletionTimestamp` set while still Ready: it
    /// leaves its addon's counts (as the controllers count) and is not ready, and it still holds
    /// its requests on the node until it is gone.
    #[test]
    fn a_terminating_pod_leaves_its_addon_and_keeps_its_requests() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        let cfg = DeriveConfig::default();
        let ds = || Some(owner_ref("DaemonSet", "fb"));
        let running = pod("p0", "n1", ds(), &GKE_ADDON, &[], true);
        let mut going = pod("p1", "n1", ds(), &GKE_ADDON, &[], true);
        going.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        let facts: Vec<PodFacts> = [&running, &going]
            .iter()
            .map(|p| pod_facts(*p, &cfg).unwrap())
            .collect();
        assert!(!facts[1].ready && facts[1].addon.is_none() && facts[1].restarts.is_none());
        let a = addons_on_node(&facts);
        assert_eq!((a[0].pods, a[0].ready, a[0].available()), (1, 1, true));
        let sums = node_pod_sums(&facts);
        assert_eq!(sums["n1"].pods, 2, "both still hold resources");
        // The same through the watchers' lean decoding of the JSON the API server sends.
        let mut json = serde_json::to_value(&going).unwrap();
        json["metadata"]["deletionTimestamp"] = "2026-11-26T18:00:00Z".into();
        let lean: crate::k8s::lean::LeanPod = serde_json::from_value(json).unwrap();
        let f = pod_facts(&lean, &cfg).unwrap();
        assert!(!f.ready && f.addon.is_none());
    }

    #[test]
    fn every_pod_of_an_addon_on_a_node_counts() {
        let cfg = DeriveConfig::default();
        let pods: Vec<PodFacts> = [true, false, true]
            .iter()
            .enumerate()
            .map(|(i, r)| {
                pod_facts(
                    &pod(
                        &format!("p{i}"),
                        "n1",
                        Some(owner_ref("DaemonSet", "fb")),
                        &GKE_ADDON,
                        &[],
                        *r,
                    ),
                    &cfg,
                )
                .unwrap()
            })
            .collect();
        let a = addons_on_node(&pods);
        assert_eq!(a.len(), 1);
        assert_eq!((a[0].pods, a[0].ready, a[0].available()), (3, 2, false));
        let sums = node_pod_sums(&pods);
        assert_eq!(sums["n1"].pods, 3);
        assert_eq!(sums["n1"].requests.cpu_cores, 3.0);
    }

    #[test]
    fn node_sums_do_not_depend_on_the_order_of_pods() {
        let cfg = DeriveConfig::default();
        let cpus = ["0.1", "0.2", "0.3", "0.007", "1.333", "0.25", "0.001"];
        let facts: Vec<PodFacts> = cpus
            .iter()
            .enumerate()
            .map(|(i, cpu)| {
                let mut p = pod(&format!("p{i}"), "n1", None, &[], &[], true);
                let spec = p.spec.as_mut().unwrap();
                spec.init_containers = None;
                spec.containers.truncate(1);
                spec.containers[0].resources.as_mut().unwrap().requests =
                    q(&[("cpu", cpu), ("memory", "1.5Ki")]);
                pod_facts(&p, &cfg).unwrap()
            })
            .collect();
        let forward = node_pod_sums(&facts)["n1"];
        let backward = node_pod_sums(facts.iter().rev())["n1"];
        assert_eq!(forward, backward);
        assert_eq!(forward.requests.cpu_cores, 2.191);
        assert_eq!(forward.requests.memory_bytes, 7.0 * 1536.0);
        assert_eq!(forward.pods, 7);
    }

    #[test]
    fn workloads_expected_from_their_own_fields() {
        let cfg = DeriveConfig::default();
        let template = PodTemplateSpec {
            metadata: Some(ObjectMeta {
                annotations: map(&GKE_ADDON),
                ..Default::default()
            }),
            spec: None,
        };
        let ds = DaemonSet {
            metadata: ObjectMeta {
                name: Some("fluentbit".into()),
                namespace: Some("kube-system".into()),
                ..Default::default()
            },
            spec: DaemonSetSpec {
                template: template.clone(),
                ..Default::default()
            },
            status: Some(DaemonSetStatus {
                desired_number_scheduled: 7,
                ..Default::default()
            }),
        };
        let e = daemonset_expected(&ds, &cfg).unwrap();
        assert_eq!(
            (e.expected, e.addon.controller, e.workload.as_str()),
            (7, Controller::DaemonSet, "fluentbit")
        );
        let mut d = Deployment {
            metadata: ObjectMeta {
                name: Some("metrics-server".into()),
                ..Default::default()
            },
            spec: DeploymentSpec {
                template,
                replicas: Some(2),
                ..Default::default()
            },
            status: None,
        };
        assert_eq!(deployment_expected(&d, &cfg).unwrap().expected, 2);
        d.spec.replicas = None;
        assert_eq!(
            deployment_expected(&d, &cfg).unwrap().expected,
            1,
            "replicas defaults to 1"
        );
        let plain = DaemonSet::default();
        assert!(daemonset_expected(&plain, &cfg).is_none());
    }

    #[test]
    fn cluster_state_from_objects() {
        let cfg = DeriveConfig::default();
        let gke = [
            ("cloud.google.com/gke-nodepool", "p"),
            ("topology.kubernetes.io/zone", "z"),
        ];
        let nodes = vec![
            node("n1", &gke, &[("Ready", "True")], 3600),
            Node::default(),
        ];
        let mut bad = pod("bad", "n1", None, &[], &[], true);
        bad.spec.as_mut().unwrap().containers[0]
            .resources
            .as_mut()
            .unwrap()
            .requests = q(&[("memory", "??")]);
        let pods = vec![
            pod(
                "fb-1",
                "n1",
                Some(owner_ref("DaemonSet", "fb")),
                &GKE_ADDON,
                &[],
                true,
            ),
            pod(
                "app-1",
                "n1",
                Some(owner_ref("ReplicaSet", "app-7c9")),
                &[],
                &[("pod-template-hash", "7c9")],
                true,
            ),
            bad,
        ];
        let st = cluster_state(&nodes, &pods, &[], &[], at(NOW), &cfg);
        assert_eq!(st.nodes.len(), 1);
        assert_eq!(st.skipped["bad_node"], 1);
        assert_eq!(st.skipped["bad_pod"], 1);
        assert_eq!(st.node_pods["n1"].pods, 2);
        assert_eq!(st.addons["n1"].len(), 1);
        assert_eq!(st.restarts.len(), 1, "only addon pods carry restart series");
        assert_eq!(st.restarts[0].containers[0].restarts, 3);
    }

    /// A resource list without cpu or memory (a virtual node listing only `pods`) gives no
    /// capacity: a capacity of 0 cores and 0 bytes would be served as the node's.
    #[test]
    fn a_resource_list_without_cpu_or_memory_is_no_capacity() {
        let cfg = DeriveConfig::default();
        let with = |capacity, allocatable| {
            let mut n = node("v", &[], &[("Ready", "True")], 3600);
            let status = n.status.as_mut().unwrap();
            status.capacity = capacity;
            status.allocatable = allocatable;
            node_facts(&n, at(NOW), &cfg).unwrap()
        };
        let pods_only = with(q(&[("pods", "1k")]), q(&[("pods", "1k")]));
        assert_eq!((pods_only.capacity, pods_only.allocatable), (None, None));
        let no_memory = with(q(&[("cpu", "4"), ("pods", "110")]), None);
        assert_eq!(no_memory.capacity, None);
        let both = with(
            q(&[("cpu", "4"), ("memory", "16Gi")]),
            q(&[("memory", "1Gi")]),
        );
        assert_eq!(
            both.capacity,
            Some(NodeCapacity {
                cpu_cores: 4.0,
                memory_bytes: 16.0 * 1024.0 * 1024.0 * 1024.0
            })
        );
        assert_eq!(both.allocatable, None);
    }

    #[test]
    fn counts_group_identical_label_sets() {
        let cfg = DeriveConfig::default();
        let gke = [
            ("cloud.google.com/gke-nodepool", "p"),
            ("topology.kubernetes.io/zone", "z"),
        ];
        let nodes: Vec<NodeFacts> = [("Ready", "True"), ("Ready", "True"), ("Ready", "False")]
            .iter()
            .enumerate()
            .map(|(i, c)| {
                node_facts(&node(&format!("n{i}"), &gke, &[*c], 3600), at(NOW), &cfg).unwrap()
            })
            .collect();
        let cond = node_condition_counts(&nodes);
        let pl = Placement {
            pool: "p".into(),
            zone: "z".into(),
        };
        assert_eq!(cond[&(pl.clone(), "Ready".into(), "True".into())], 2);
        assert_eq!(cond[&(pl.clone(), "Ready".into(), "False".into())], 1);
        let av = node_availability_counts(&nodes);
        assert_eq!(av[&(pl.clone(), (true, true, true, true))], 2);
        assert_eq!(av[&(pl, (false, true, true, false))], 1);
    }
}
