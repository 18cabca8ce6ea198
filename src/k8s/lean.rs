//! Pods and Nodes as the watchers decode them. Pods: only the fields [`crate::sources::cluster::derive`] and
//! [`crate::sources::task::pods`] read, with the same names and shapes as k8s-openapi's `Pod` so the
//! derivation reads either. Everything else in the JSON (managedFields, env, volumes, probes,
//! images, most annotations' neighbours...) is skipped by the parser without being allocated,
//! so a 650,000-pod list or 1,000 pod changes a second cost a fraction of decoding whole
//! `Pod`s. Every field may be missing (a missing name is a counted skip in `derive`, never a
//! parse error that would stall the watch).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use serde::{Deserialize, Deserializer};

/// Makes a lean type (one with a `metadata: ObjectMeta` field) the same API object as the whole
/// k8s-openapi type `$whole` (group, version, kind, path, scope), so kube's `Api`, watcher and
/// reflector list and watch it exactly as they would `$whole`.
macro_rules! lean_resource {
    ($lean:ty, $whole:ty, $scope:ident) => {
        impl k8s_openapi::Resource for $lean {
            const API_VERSION: &'static str = <$whole as k8s_openapi::Resource>::API_VERSION;
            const GROUP: &'static str = <$whole as k8s_openapi::Resource>::GROUP;
            const KIND: &'static str = <$whole as k8s_openapi::Resource>::KIND;
            const VERSION: &'static str = <$whole as k8s_openapi::Resource>::VERSION;
            const URL_PATH_SEGMENT: &'static str =
                <$whole as k8s_openapi::Resource>::URL_PATH_SEGMENT;
            type Scope = k8s_openapi::$scope;
        }

        impl k8s_openapi::Metadata for $lean {
            type Ty = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
            fn metadata(&self) -> &Self::Ty {
                &self.metadata
            }
            fn metadata_mut(&mut self) -> &mut Self::Ty {
                &mut self.metadata
            }
        }
    };
}
pub(crate) use lean_resource;

/// Why an object from the API cannot be read into the facts kept of it (logged and counted as a
/// skipped object, never guessed).
#[derive(Debug, thiserror::Error)]
pub enum BadObject {
    /// A whole k8s-openapi object that does not convert to its lean shape: serde's error.
    #[error("{what} does not convert: {source}")]
    NotLean {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
    /// A quantity that does not parse (`cpu: invalid quantity "1x": ...`).
    #[error("{resource}: {reason}")]
    Quantity { resource: String, reason: String },
    /// A field the object must have (`pod without a name`).
    #[error("{0}")]
    Missing(String),
    /// One of these about the object named (`pod ns/name: ...`, `node n capacity ...`).
    #[error("{object}{source}")]
    Of {
        /// The object and what of it, with the separator its message has always had.
        object: String,
        #[source]
        source: Box<BadObject>,
    },
}

impl BadObject {
    /// `self` about `object` (`object` ends with its separator: `pod ns/n: `).
    pub fn of(self, object: impl Into<String>) -> Self {
        BadObject::Of {
            object: object.into(),
            source: Box::new(self),
        }
    }

    pub fn missing(what: impl Into<String>) -> Self {
        BadObject::Missing(what.into())
    }
}

/// Defines `$trait`: a value seen as the lean `$lean`, borrowed as is, or converted from the
/// whole k8s-openapi `$whole` through its JSON with the same parser the watchers use.
macro_rules! as_lean {
    ($(#[$doc:meta])* $trait:ident, $lean:ty, $whole:ty, $what:literal) => {
        $(#[$doc])*
        pub trait $trait {
            fn lean(&self) -> Result<Cow<'_, $lean>, BadObject>;
        }

        impl $trait for $lean {
            fn lean(&self) -> Result<Cow<'_, $lean>, BadObject> {
                Ok(Cow::Borrowed(self))
            }
        }

        impl $trait for $whole {
            fn lean(&self) -> Result<Cow<'_, $lean>, BadObject> {
                serde_json::to_value(self)
                    .and_then(serde_json::from_value)
                    .map(Cow::Owned)
                    .map_err(|source| BadObject::NotLean { what: $what, source })
            }
        }

        impl<T: $trait + ?Sized> $trait for &T {
            fn lean(&self) -> Result<Cow<'_, $lean>, BadObject> {
                (**self).lean()
            }
        }
    };
}

/// A pod with the fields we use.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeanPod {
    /// Name, namespace, uid, resourceVersion (the watcher resumes from it), labels,
    /// annotations and owner references; the rest of the metadata is skipped.
    #[serde(default, deserialize_with = "lean_meta")]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: Option<PodSpec>,
    #[serde(default)]
    pub status: Option<PodStatus>,
}

lean_resource!(LeanPod, Pod, NamespaceResourceScope);

type Quantities = Option<BTreeMap<String, Quantity>>;

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSpec {
    #[serde(default)]
    pub node_name: Option<String>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub containers: Vec<Container>,
    #[serde(default)]
    pub init_containers: Option<Vec<Container>>,
    /// Pod-level resources (KEP-2837).
    #[serde(default)]
    pub resources: Option<ResourceRequirements>,
    #[serde(default)]
    pub overhead: Quantities,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Container {
    /// Matches the container's status, whose resources an in-place resize changes.
    #[serde(default, deserialize_with = "null_as_default")]
    pub name: String,
    #[serde(default)]
    pub resources: Option<ResourceRequirements>,
    /// `Always` on an init container: a sidecar.
    #[serde(default)]
    pub restart_policy: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct ResourceRequirements {
    #[serde(default)]
    pub requests: Quantities,
    #[serde(default)]
    pub limits: Quantities,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodStatus {
    #[serde(default)]
    pub phase: Option<String>,
    #[serde(default)]
    pub qos_class: Option<String>,
    #[serde(default)]
    pub conditions: Option<Vec<PodCondition>>,
    #[serde(default)]
    pub container_statuses: Option<Vec<ContainerStatus>>,
    #[serde(default)]
    pub init_container_statuses: Option<Vec<ContainerStatus>>,
    #[serde(default)]
    pub ephemeral_container_statuses: Option<Vec<ContainerStatus>>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodCondition {
    #[serde(rename = "type", default, deserialize_with = "null_as_default")]
    pub type_: String,
    #[serde(default, deserialize_with = "null_as_default")]
    pub status: String,
    /// Whether the reason is `Infeasible` (read in place: no reason is kept), which on the
    /// `PodResizePending` condition says that an in-place resize cannot be done on this node.
    #[serde(rename = "reason", default, deserialize_with = "is_infeasible")]
    pub infeasible: bool,
    /// When the condition last changed status (message and probe times are skipped).
    #[serde(default, deserialize_with = "transition_time")]
    pub last_transition_time: TransitionTime,
}

/// A condition's `lastTransitionTime`, read in place (no string is kept): whole seconds since
/// the Unix epoch, as the API server writes it. A value that is not an RFC 3339 time is kept
/// apart from a missing one, so the reader can count it; it never fails the pod's decode (one
/// bad pod must not stall the watch).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum TransitionTime {
    /// Missing or `null`.
    #[default]
    Absent,
    /// Seconds since the Unix epoch.
    At(i64),
    /// Present but not a time.
    Unreadable,
}

impl TransitionTime {
    /// The time (`None` when absent); an error when unreadable or out of `SystemTime`'s range.
    pub fn get(self) -> Result<Option<std::time::SystemTime>, &'static str> {
        use std::time::{Duration, UNIX_EPOCH};
        match self {
            TransitionTime::Absent => Ok(None),
            TransitionTime::Unreadable => Err("lastTransitionTime is not a time"),
            TransitionTime::At(s) => {
                let d = Duration::from_secs(s.unsigned_abs());
                let t = if s >= 0 {
                    UNIX_EPOCH.checked_add(d)
                } else {
                    UNIX_EPOCH.checked_sub(d)
                };
                t.map(Some).ok_or("lastTransitionTime is out of range")
            }
        }
    }
}

/// Reads a [`TransitionTime`] from a string (parsed where it lies), `null`, or anything else
/// (skipped, [`TransitionTime::Unreadable`]).
/// A condition's `reason`, compared with `Infeasible` in place; anything else (missing, `null`,
/// another reason or type) is `false`.
fn is_infeasible<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    struct V;
    impl serde::de::Visitor<'_> for V {
        type Value = bool;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a reason")
        }
        fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<bool, E> {
            Ok(s == "Infeasible")
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<bool, E> {
            Ok(false)
        }
    }
    d.deserialize_any(V)
}

fn transition_time<'de, D: Deserializer<'de>>(d: D) -> Result<TransitionTime, D::Error> {
    use serde::de::{IgnoredAny, MapAccess, SeqAccess, Visitor};
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = TransitionTime;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a time")
        }
        fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<TransitionTime, E> {
            Ok(s.parse::<k8s_openapi::jiff::Timestamp>()
                .map_or(TransitionTime::Unreadable, |t| {
                    TransitionTime::At(t.as_second())
                }))
        }
        fn visit_none<E: serde::de::Error>(self) -> Result<TransitionTime, E> {
            Ok(TransitionTime::Absent)
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<TransitionTime, E> {
            Ok(TransitionTime::Absent)
        }
        fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> Result<TransitionTime, D2::Error> {
            d.deserialize_any(V)
        }
        fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<TransitionTime, E> {
            Ok(TransitionTime::Unreadable)
        }
        fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<TransitionTime, E> {
            Ok(TransitionTime::Unreadable)
        }
        fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<TransitionTime, E> {
            Ok(TransitionTime::Unreadable)
        }
        fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<TransitionTime, E> {
            Ok(TransitionTime::Unreadable)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<TransitionTime, A::Error> {
            while a.next_element::<IgnoredAny>()?.is_some() {}
            Ok(TransitionTime::Unreadable)
        }
        fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<TransitionTime, A::Error> {
            while a.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            Ok(TransitionTime::Unreadable)
        }
    }
    d.deserialize_option(V)
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStatus {
    #[serde(default, deserialize_with = "null_as_default")]
    pub name: String,
    #[serde(default, deserialize_with = "null_as_default")]
    pub restart_count: i32,
    #[serde(default, deserialize_with = "null_as_default")]
    pub ready: bool,
    #[serde(rename = "containerID", default)]
    pub container_id: Option<String>,
    #[serde(default)]
    pub last_state: Option<ContainerState>,
    /// The resources the container runs with (the kubelet reports them since in-place resize,
    /// KEP-1287); `None` where it does not.
    #[serde(default)]
    pub resources: Option<ResourceRequirements>,
    /// The resources the node allocated to the container.
    #[serde(default)]
    pub allocated_resources: Quantities,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct ContainerState {
    #[serde(default)]
    pub terminated: Option<ContainerStateTerminated>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStateTerminated {
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub exit_code: i32,
}

/// `null` where a value is expected reads as the default, as a missing field does.
fn null_as_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct Meta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    uid: Option<String>,
    #[serde(default)]
    resource_version: Option<String>,
    #[serde(default)]
    labels: Option<BTreeMap<String, String>>,
    #[serde(default)]
    annotations: Option<BTreeMap<String, String>>,
    #[serde(default)]
    owner_references: Option<Vec<Owner>>,
    /// Set once the pod is being deleted (it then arrives MODIFIED, possibly still Ready).
    #[serde(default)]
    deletion_timestamp: Option<Time>,
}

#[derive(Deserialize, Default)]
struct Owner {
    #[serde(default, deserialize_with = "null_as_default")]
    kind: String,
    #[serde(default, deserialize_with = "null_as_default")]
    name: String,
    #[serde(default)]
    controller: Option<bool>,
}

/// The metadata fields we read, into k8s-openapi's `ObjectMeta` (what kube's `Resource` hands
/// out); managedFields and the rest are skipped unallocated.
fn lean_meta<'de, D: Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    let m = Option::<Meta>::deserialize(d)?.unwrap_or_default();
    Ok(ObjectMeta {
        name: m.name,
        namespace: m.namespace,
        uid: m.uid,
        resource_version: m.resource_version,
        labels: m.labels,
        annotations: m.annotations,
        owner_references: m.owner_references.map(|v| {
            v.into_iter()
                .map(|o| OwnerReference {
                    kind: o.kind,
                    name: o.name,
                    controller: o.controller,
                    ..OwnerReference::default()
                })
                .collect()
        }),
        deletion_timestamp: m.deletion_timestamp,
        ..ObjectMeta::default()
    })
}

as_lean!(
    /// A pod in either shape, seen as a [`LeanPod`]: borrowed as is, or converted from a whole
    /// k8s-openapi `Pod` (tests, benchmarks and callers holding whole objects) through its JSON,
    /// the same parser the watchers use.
    AsLeanPod, LeanPod, Pod, "pod"
);

/// A Node with only what [`crate::sources::cluster::derive::node_facts`], [`crate::sources::cluster::watchers::Stores::node_addresses`]
/// and the metrics-server backend read: name, uid, resourceVersion (the watcher resumes from
/// it) and creation time; labels; `spec.unschedulable` and taint keys; condition types and
/// statuses; cpu and memory of capacity and allocatable; addresses. Everything else
/// (`status.images`, managedFields, annotations, nodeInfo, condition messages, unknown fields)
/// is skipped by the parser without being allocated. A missing or `null` field reads as
/// absent; a field of the wrong type is a decode error, as with k8s-openapi's `Node`.
///
/// The shared strings are `Arc<str>` so the node watcher can intern them
/// ([`crate::sources::cluster::watchers::trim_node`]): 65,000 nodes hold one copy of "Ready", "True" and each pool
/// and zone name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LeanNode {
    /// Name, uid, resourceVersion and creationTimestamp; labels are in [`LeanNode::labels`].
    pub metadata: ObjectMeta,
    /// Labels as (key, value), sorted by key. The node watcher keeps only the pool and zone
    /// keys derive reads.
    pub labels: Vec<(Arc<str>, Arc<str>)>,
    pub spec: Option<NodeSpec>,
    pub status: Option<NodeStatus>,
}

impl LeanNode {
    /// The value of label `key`, if present.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .binary_search_by(|(k, _)| (**k).cmp(key))
            .ok()
            .map(|i| &*self.labels[i].1)
    }
}

lean_resource!(LeanNode, Node, ClusterResourceScope);

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct NodeSpec {
    #[serde(default)]
    pub unschedulable: Option<bool>,
    #[serde(default)]
    pub taints: Option<Vec<Taint>>,
}

/// A taint's key (the rest is skipped).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct Taint {
    #[serde(default, deserialize_with = "null_as_default")]
    pub key: String,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeStatus {
    pub conditions: Option<Vec<NodeCondition>>,
    pub capacity: Option<Resources>,
    pub allocatable: Option<Resources>,
    pub addresses: Option<Vec<NodeAddress>>,
}

/// A condition's type and status (reason, message and times are skipped: nothing reads them).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeCondition {
    pub type_: Arc<str>,
    pub status: Arc<str>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeAddress {
    pub type_: Arc<str>,
    pub address: Box<str>,
}

/// The cpu and memory quantities of a resource list (capacity, allocatable); the other
/// resources (pods, ephemeral-storage, hugepages, devices) are skipped.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct Resources {
    #[serde(default)]
    pub cpu: Option<Quantity>,
    #[serde(default)]
    pub memory: Option<Quantity>,
}

impl Resources {
    /// The quantity of `resource` (`cpu` or `memory`; anything else is not kept).
    pub fn get(&self, resource: &str) -> Option<&Quantity> {
        match resource {
            "cpu" => self.cpu.as_ref(),
            "memory" => self.memory.as_ref(),
            _ => None,
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct RawNodeMeta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    uid: Option<String>,
    #[serde(default)]
    resource_version: Option<String>,
    #[serde(default)]
    creation_timestamp: Option<Time>,
    #[serde(default)]
    labels: Option<BTreeMap<String, String>>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct RawNodeStatus {
    #[serde(default)]
    conditions: Option<Vec<RawPair>>,
    #[serde(default)]
    capacity: Option<Resources>,
    #[serde(default)]
    allocatable: Option<Resources>,
    #[serde(default)]
    addresses: Option<Vec<RawAddress>>,
}

#[derive(Deserialize, Default)]
struct RawPair {
    #[serde(rename = "type", default, deserialize_with = "null_as_default")]
    type_: String,
    #[serde(default, deserialize_with = "null_as_default")]
    status: String,
}

#[derive(Deserialize, Default)]
struct RawAddress {
    #[serde(rename = "type", default, deserialize_with = "null_as_default")]
    type_: String,
    #[serde(default, deserialize_with = "null_as_default")]
    address: String,
}

#[derive(Deserialize, Default)]
struct RawNode {
    #[serde(default, deserialize_with = "null_as_default")]
    metadata: RawNodeMeta,
    #[serde(default)]
    spec: Option<NodeSpec>,
    #[serde(default)]
    status: Option<RawNodeStatus>,
}

impl<'de> Deserialize<'de> for LeanNode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = RawNode::deserialize(d)?;
        let m = raw.metadata;
        let mut labels: Vec<(Arc<str>, Arc<str>)> = m
            .labels
            .into_iter()
            .flatten()
            .map(|(k, v)| (Arc::from(k), Arc::from(v)))
            .collect();
        labels.shrink_to_fit();
        Ok(LeanNode {
            metadata: ObjectMeta {
                name: m.name,
                uid: m.uid,
                resource_version: m.resource_version,
                creation_timestamp: m.creation_timestamp,
                ..ObjectMeta::default()
            },
            labels,
            spec: raw.spec,
            status: raw.status.map(|s| NodeStatus {
                conditions: s.conditions.map(|c| {
                    c.into_iter()
                        .map(|c| NodeCondition {
                            type_: c.type_.into(),
                            status: c.status.into(),
                        })
                        .collect()
                }),
                capacity: s.capacity,
                allocatable: s.allocatable,
                addresses: s.addresses.map(|a| {
                    a.into_iter()
                        .map(|a| NodeAddress {
                            type_: a.type_.into(),
                            address: a.address.into(),
                        })
                        .collect()
                }),
            }),
        })
    }
}

as_lean!(
    /// A node in either shape, seen as a [`LeanNode`]: borrowed as is, or converted from a whole
    /// k8s-openapi `Node` (tests and callers holding whole objects) through its JSON, the same
    /// parser the watcher uses.
    AsLeanNode, LeanNode, Node, "node"
);

impl<T: AsLeanNode + ?Sized> AsLeanNode for Arc<T> {
    fn lean(&self) -> Result<Cow<'_, LeanNode>, BadObject> {
        (**self).lean()
    }
}

/// What follows a pod watcher's events besides the watcher itself (the node role's task pod
/// index): a relist (begin, each pod, end) replaces every pod held, then single changes.
pub trait PodFollower: Send + Sync {
    fn begin_relist(&self);
    fn relist_apply(&self, pod: &LeanPod);
    fn end_relist(&self);
    fn apply(&self, pod: &LeanPod);
    fn delete(&self, pod: &LeanPod);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_what_we_read_and_skips_the_rest() {
        let json = serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "p", "namespace": "ns", "uid": "u-1", "resourceVersion": "42",
                "labels": {"app": "a"},
                "annotations": {"components.gke.io/component-name": "x"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "o", "controller": true}],
                "managedFields": [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}],
                "creationTimestamp": "2025-01-01T00:00:00Z",
            },
            "spec": {
                "nodeName": "n1",
                "containers": [{"name": "c", "image": "i", "env": [{"name": "A", "value": "1"}],
                    "resources": {"requests": {"cpu": "100m"}, "limits": {"memory": "1Gi"}}}],
                "initContainers": [{"name": "s", "restartPolicy": "Always"}],
                "volumes": [{"name": "v", "emptyDir": {}}],
                "overhead": {"cpu": "10m"},
                "someFutureField": {"x": [1, 2, 3]},
            },
            "status": {
                "phase": "Running", "qosClass": "Burstable",
                "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": null}],
                "containerStatuses": [{"name": "c", "restartCount": 2, "ready": true,
                    "containerID": "containerd://abc", "image": "i", "imageID": "x",
                    "lastState": {"terminated": {"reason": "OOMKilled", "exitCode": 137}}}],
            },
        });
        let p: LeanPod = serde_json::from_value(json).unwrap();
        assert_eq!(p.metadata.name.as_deref(), Some("p"));
        assert_eq!(p.metadata.resource_version.as_deref(), Some("42"));
        assert!(p.metadata.managed_fields.is_none());
        assert!(p.metadata.creation_timestamp.is_none());
        let o = &p.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!((o.kind.as_str(), o.controller), ("ReplicaSet", Some(true)));
        let spec = p.spec.as_ref().unwrap();
        assert_eq!(spec.node_name.as_deref(), Some("n1"));
        assert_eq!(
            spec.containers[0]
                .resources
                .as_ref()
                .unwrap()
                .requests
                .as_ref()
                .unwrap()["cpu"]
                .0,
            "100m"
        );
        assert_eq!(
            spec.init_containers.as_ref().unwrap()[0]
                .restart_policy
                .as_deref(),
            Some("Always")
        );
        let cs = &p
            .status
            .as_ref()
            .unwrap()
            .container_statuses
            .as_ref()
            .unwrap()[0];
        assert_eq!((cs.restart_count, cs.ready), (2, true));
        assert_eq!(
            cs.last_state
                .as_ref()
                .unwrap()
                .terminated
                .as_ref()
                .unwrap()
                .exit_code,
            137
        );
    }

    /// A condition's `lastTransitionTime` reads as seconds, absent when missing or `null`, and
    /// unreadable (never a decode error) when it is not a time.
    #[test]
    fn condition_times_read_in_place_and_bad_ones_are_marked() {
        let p: LeanPod = serde_json::from_value(serde_json::json!({"status": {"conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-01T00:00:10Z",
                "lastProbeTime": null, "reason": "x", "message": "y"},
            {"type": "Ready", "status": "True", "lastTransitionTime": null},
            {"type": "Initialized", "status": "True"},
            {"type": "A", "status": "True", "lastTransitionTime": "yesterday"},
            {"type": "B", "status": "True", "lastTransitionTime": 5},
            {"type": "C", "status": "True", "lastTransitionTime": {"x": [1]}},
            {"type": "D", "status": "True", "lastTransitionTime": "2026-01-01T00:00:10.5+01:00"},
        ]}}))
        .unwrap();
        let times: Vec<_> = p
            .status
            .unwrap()
            .conditions
            .unwrap()
            .iter()
            .map(|c| c.last_transition_time)
            .collect();
        use TransitionTime::*;
        assert_eq!(
            times,
            [
                At(1_767_225_610),
                Absent,
                Absent,
                Unreadable,
                Unreadable,
                Unreadable,
                At(1_767_222_010)
            ]
        );
        let t = At(1_767_225_610).get().unwrap().unwrap();
        assert_eq!(
            t,
            std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_767_225_610)
        );
        assert_eq!(Absent.get(), Ok(None));
        assert!(Unreadable.get().is_err());
    }

    #[test]
    fn missing_and_null_fields_read_as_absent() {
        for json in [
            serde_json::json!({}),
            serde_json::json!({"metadata": null, "spec": null, "status": null}),
            serde_json::json!({"metadata": {"ownerReferences": [{}]},
                "spec": {"containers": null},
                "status": {"containerStatuses": [{"name": null, "restartCount": null}],
                    "conditions": [{}]}}),
        ] {
            let p: LeanPod = serde_json::from_value(json.clone()).unwrap();
            assert!(p.metadata.name.is_none(), "{json}");
        }
    }

    #[test]
    fn a_whole_pod_converts_to_the_same_lean_pod_as_its_json() {
        let whole = Pod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                namespace: Some("ns".into()),
                ..Default::default()
            },
            spec: Some(k8s_openapi::api::core::v1::PodSpec {
                node_name: Some("n".into()),
                ..Default::default()
            }),
            status: None,
        };
        let lean = whole.lean().unwrap().into_owned();
        let from_json: LeanPod =
            serde_json::from_value(serde_json::to_value(&whole).unwrap()).unwrap();
        assert_eq!(lean, from_json);
        assert_eq!(lean.spec.unwrap().node_name.as_deref(), Some("n"));
    }

    /// A Node as a GKE kubelet and the control plane write it, with everything we skip.
    fn full_node_json() -> serde_json::Value {
        serde_json::json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {
                "name": "gke-c-pool-1-abcd", "uid": "u-1", "resourceVersion": "42",
                "creationTimestamp": "2025-01-01T00:00:00Z",
                "labels": {"cloud.google.com/gke-nodepool": "pool-1",
                    "topology.kubernetes.io/zone": "us-central1-a",
                    "kubernetes.io/hostname": "gke-c-pool-1-abcd"},
                "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
                "managedFields": [{"manager": "kubelet", "operation": "Update",
                    "fieldsV1": {"f:status": {"f:images": {}}}}],
                "finalizers": ["x"],
            },
            "spec": {
                "podCIDR": "10.0.0.0/24", "podCIDRs": ["10.0.0.0/24"],
                "providerID": "gce://p/z/n", "unschedulable": true,
                "taints": [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule",
                    "timeAdded": "2025-01-01T00:00:00Z"}],
                "someFutureField": {"a": [1, 2]},
            },
            "status": {
                "capacity": {"cpu": "4", "memory": "16Gi", "pods": "110",
                    "ephemeral-storage": "100Gi", "nvidia.com/gpu": "1"},
                "allocatable": {"cpu": "3920m", "memory": "14Gi", "pods": "110"},
                "conditions": [
                    {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory",
                        "message": "kubelet has sufficient memory available",
                        "lastHeartbeatTime": "2025-01-01T00:00:00Z",
                        "lastTransitionTime": "2025-01-01T00:00:00Z"},
                    {"type": "Ready", "status": "True", "reason": "KubeletReady",
                        "message": "kubelet is posting ready status"},
                ],
                "addresses": [{"type": "InternalIP", "address": "10.128.0.7"},
                    {"type": "Hostname", "address": "gke-c-pool-1-abcd"}],
                "images": (0..50).map(|i| serde_json::json!({
                    "names": [format!("registry.example/image-{i}@sha256:0123"), format!("registry.example/image-{i}:v1")],
                    "sizeBytes": 123456789})).collect::<Vec<_>>(),
                "nodeInfo": {"kubeletVersion": "v1.33.0", "osImage": "COS", "machineID": "m"},
                "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                "volumesInUse": ["v"], "config": {}, "features": {}, "runtimeHandlers": [],
                "someFutureStatus": [{"x": null}],
            },
        })
    }

    #[test]
    fn a_node_with_everything_decodes_to_what_derive_reads() {
        let n: LeanNode = serde_json::from_value(full_node_json()).unwrap();
        let m = &n.metadata;
        assert_eq!(m.name.as_deref(), Some("gke-c-pool-1-abcd"));
        assert_eq!(m.uid.as_deref(), Some("u-1"));
        assert_eq!(m.resource_version.as_deref(), Some("42"));
        assert!(m.creation_timestamp.is_some());
        assert!(m.labels.is_none() && m.annotations.is_none() && m.managed_fields.is_none());
        assert!(m.finalizers.is_none());
        assert_eq!(n.label("cloud.google.com/gke-nodepool"), Some("pool-1"));
        assert_eq!(
            n.label("topology.kubernetes.io/zone"),
            Some("us-central1-a")
        );
        assert_eq!(n.label("missing"), None);
        assert_eq!(
            n.labels.len(),
            3,
            "sorted, all labels until the watcher trims them"
        );
        let spec = n.spec.as_ref().unwrap();
        assert_eq!(spec.unschedulable, Some(true));
        assert_eq!(
            spec.taints.as_ref().unwrap()[0].key,
            "node.kubernetes.io/unschedulable"
        );
        let st = n.status.as_ref().unwrap();
        let cap = st.capacity.as_ref().unwrap();
        assert_eq!(cap.get("cpu").unwrap().0, "4");
        assert_eq!(cap.get("memory").unwrap().0, "16Gi");
        assert!(cap.get("pods").is_none(), "only cpu and memory are kept");
        assert_eq!(
            st.allocatable.as_ref().unwrap().cpu.as_ref().unwrap().0,
            "3920m"
        );
        let conds: Vec<_> = st
            .conditions
            .iter()
            .flatten()
            .map(|c| (&*c.type_, &*c.status))
            .collect();
        assert_eq!(conds, [("MemoryPressure", "False"), ("Ready", "True")]);
        let addrs: Vec<_> = st
            .addresses
            .iter()
            .flatten()
            .map(|a| (&*a.type_, &*a.address))
            .collect();
        assert_eq!(
            addrs,
            [
                ("InternalIP", "10.128.0.7"),
                ("Hostname", "gke-c-pool-1-abcd")
            ]
        );
    }

    #[test]
    fn a_whole_node_converts_to_the_same_lean_node_as_its_json() {
        let whole: Node = serde_json::from_value(full_node_json()).unwrap();
        let lean = whole.lean().unwrap().into_owned();
        let from_json: LeanNode = serde_json::from_value(full_node_json()).unwrap();
        assert_eq!(lean, from_json);
    }

    #[test]
    fn missing_and_null_node_fields_read_as_absent() {
        for json in [
            serde_json::json!({}),
            serde_json::json!({"metadata": null, "spec": null, "status": null}),
            serde_json::json!({"metadata": {"labels": null, "name": null},
                "spec": {"taints": [{}], "unschedulable": null},
                "status": {"conditions": [{}, {"type": null, "status": null}],
                    "capacity": {"cpu": null}, "allocatable": null, "addresses": [{}]}}),
        ] {
            let n: LeanNode = serde_json::from_value(json.clone()).unwrap();
            assert!(n.metadata.name.is_none(), "{json}");
        }
    }

    #[test]
    fn malformed_node_fields_are_clear_decode_errors() {
        for (json, field) in [
            (serde_json::json!({"metadata": {"name": 5}}), "integer"),
            (
                serde_json::json!({"metadata": {"creationTimestamp": "yesterday"}}),
                "year",
            ),
            (
                serde_json::json!({"metadata": {"labels": ["a"]}}),
                "sequence",
            ),
            (serde_json::json!({"spec": {"unschedulable": "yes"}}), "yes"),
            (serde_json::json!({"status": {"capacity": "4"}}), "string"),
            (
                serde_json::json!({"status": {"conditions": {"type": "Ready"}}}),
                "map",
            ),
            (
                serde_json::json!({"status": {"addresses": [{"address": false}]}}),
                "boolean",
            ),
            (serde_json::json!("node"), "string"),
        ] {
            let e = serde_json::from_value::<LeanNode>(json.clone()).unwrap_err();
            assert!(e.to_string().contains(field), "{json}: {e}");
        }
        // Fields nobody reads cannot fail the decode, whatever they hold.
        let n: LeanNode = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n", "annotations": 7, "managedFields": "x"},
            "spec": {"podCIDR": [1], "taints": [{"key": "k", "effect": 3}]},
            "status": {"images": {"not": "a list"}, "nodeInfo": 1,
                "capacity": {"pods": [1], "cpu": "1"},
                "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": 5}]},
        }))
        .unwrap();
        assert_eq!(n.metadata.name.as_deref(), Some("n"));
    }
}
