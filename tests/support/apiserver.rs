//! A stand-in Kubernetes API server on 127.0.0.1 for tests, benchmarks and demos that go through
//! a real `kube::Client` (plain HTTP, JSON only, no authentication).
//!
//! It serves, at the real server's paths:
//! - core/v1 Nodes (cluster-scoped) and Pods, apps/v1 DaemonSets, Deployments and ReplicaSets,
//!   coordination.k8s.io/v1 Leases: LIST (all namespaces or one), single-object GET, WATCH, and
//!   POST/PUT/PATCH/DELETE;
//! - metrics.k8s.io/v1beta1 NodeMetrics and PodMetrics: LIST and GET only, every LIST answered
//!   whole (`limit` and `continue` ignored), as metrics-server does; generated NodeMetrics carry
//!   their node's labels (GKE's 25), as metrics-server copies them ([`node_metrics_for`],
//!   [`gke_node_labels`]: where each shape comes from);
//! - the discovery documents (`/version`, `/api`, `/api/v1`, `/apis`, `/apis/<group>/<version>`)
//!   and the health endpoints (`/readyz`, `/livez`, `/healthz`: `ok`, or 500 after
//!   [`ApiServer::set_healthy`]`(false)`);
//! - authentication.k8s.io/v1 TokenReview and authorization.k8s.io/v1 SubjectAccessReview
//!   (create only) against configurable known tokens and allowed (subject, path, verb) rules
//!   ([`ApiServer::add_token`], [`ApiServer::allow`]), each review counted;
//! - a `Status` JSON 404 for anything else.
//!
//! Protocol behaviour kept faithful to kube-apiserver:
//! - one global resourceVersion counter (etcd's revision) that every write bumps; each object
//!   carries the RV of its last write in `metadata.resourceVersion` (metrics objects excepted, as
//!   metrics-server sets none); a bounded per-kind event history serves watch resumption;
//! - LIST: `resourceVersion` unset/"" = most recent, "0" = any, `N` with `resourceVersionMatch`
//!   `NotOlderThan` (or unset without `limit`) = current state, `Exact` (or unset with `limit`)
//!   = the state at `N` rebuilt from the history, 410 `Expired` once `N` is older than the
//!   compaction point, 504 `Timeout` for an RV from the future; `limit`/`continue` pagination over
//!   a consistent snapshot (the token holds the snapshot RV and the last key; an expired token is
//!   410); items sorted by namespace/name;
//! - WATCH (`watch=true|1`): a chunked `application/json` stream of one `{"type","object"}` per
//!   line, replaying history newer than `resourceVersion` (unset/"0": synthetic ADDED for the
//!   current state first; older than the compaction point: one `ERROR` event with a 410 `Expired`
//!   `Status`, then the stream ends), `allowWatchBookmarks` (BOOKMARK every
//!   [`Options::bookmark_interval`]), `timeoutSeconds`, `sendInitialEvents` (initial state then a
//!   bookmark annotated `k8s.io/initial-events-end`); a watcher that falls out of the history gets
//!   the 410 as well;
//! - `fieldSelector` (`metadata.name`, `metadata.namespace`, pods' `spec.nodeName` and
//!   `status.phase`, nodes' `spec.unschedulable`; `=`, `==`, `!=`) and `labelSelector` (`k=v`,
//!   `k==v`, `k!=v`, `k`, `!k`, `k in (..)`, `k notin (..)`) on LIST and WATCH; a MODIFIED that
//!   moves an object out of a watch's selector is sent as DELETED, into it as ADDED;
//! - writes: POST (409 `AlreadyExists`), PUT with optimistic concurrency (409 `Conflict` on a stale
//!   `metadata.resourceVersion`, 404 when absent), PATCH (merge patch; strategic merge and apply
//!   patches are approximated by a merge patch, apply creating a missing object), DELETE.
//!
//! Controls on [`ApiServer`] (or on [`ClusterState`] through [`ApiServer::state`] for several
//! changes under one lock): upsert/delete objects of any kind, [`ApiServer::drop_watches`],
//! [`ApiServer::compact`], faults per kind and verb (a `Status` with any code, 429 with
//! `Retry-After`), latency, bookmark interval, history size, the request log, the metrics.k8s.io
//! answers sent to their last byte ([`ApiServer::answered`]), bulk generation of
//! a realistic GKE-like cluster ([`ApiServer::generate`]) and background pod churn
//! ([`ApiServer::churn`]).
//!
//! [`ClusterState::compact`] takes a resource version of its own and expires everything before
//! it. Bookmarks carry the global resource version, so a watch that receives a bookmark after
//! `compact()` resumes without a 410, as it would from a real server; a test that needs the 410
//! for certain uses a long [`Options::bookmark_interval`].
//!
//! Objects are serialized once per write and kept as JSON bytes with a small parsed index (name,
//! namespace, labels, the selectable fields), so LIST of 150,000 pods is a concatenation. The
//! bytes lack `apiVersion`/`kind`, as the real server's list items do; single-object answers and
//! watch event objects get them prepended.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::ops::{Bound, ControlFlow};
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use k8s_metrics::v1beta1::{NodeMetrics, PodMetrics};
use k8s_openapi::api::apps::v1::{
    DaemonSet, DaemonSetSpec, DaemonSetStatus, Deployment, DeploymentSpec, DeploymentStatus,
    ReplicaSet, ReplicaSetSpec, ReplicaSetStatus,
};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus, HostIP, Node, NodeCondition, NodeStatus, Pod,
    PodCondition, PodIP, PodSpec, PodStatus, PodTemplateSpec, ResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as metav1;
use k8s_openapi::jiff::Timestamp;
use k8s_openapi::{Metadata, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::time::Instant;

// ---------------------------------------------------------------------------------------------
// Kinds, verbs, faults

/// What the stand-in serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// core/v1 Nodes (cluster-scoped).
    Nodes,
    /// metrics.k8s.io/v1beta1 NodeMetrics (cluster-scoped, get/list only).
    NodeMetrics,
    /// core/v1 Pods.
    Pods,
    /// metrics.k8s.io/v1beta1 PodMetrics (get/list only).
    PodMetrics,
    /// apps/v1 DaemonSets.
    DaemonSets,
    /// apps/v1 Deployments.
    Deployments,
    /// apps/v1 ReplicaSets.
    ReplicaSets,
    /// coordination.k8s.io/v1 Leases.
    Leases,
    /// apps/v1 StatefulSets (`--shard-from-statefulset`).
    StatefulSets,
}

/// How the API names a kind.
#[derive(Debug)]
struct KindInfo {
    group: &'static str,
    version: &'static str,
    api_version: &'static str,
    kind: &'static str,
    list_kind: &'static str,
    plural: &'static str,
    singular: &'static str,
    namespaced: bool,
    /// Served by metrics-server through the aggregator: get and list only, no resourceVersion on
    /// the objects.
    metrics: bool,
}

/// In `Kind` order.
const KINDS: [KindInfo; 9] = [
    KindInfo {
        group: "",
        version: "v1",
        api_version: "v1",
        kind: "Node",
        list_kind: "NodeList",
        plural: "nodes",
        singular: "node",
        namespaced: false,
        metrics: false,
    },
    KindInfo {
        group: "metrics.k8s.io",
        version: "v1beta1",
        api_version: "metrics.k8s.io/v1beta1",
        kind: "NodeMetrics",
        list_kind: "NodeMetricsList",
        plural: "nodes",
        singular: "",
        namespaced: false,
        metrics: true,
    },
    KindInfo {
        group: "",
        version: "v1",
        api_version: "v1",
        kind: "Pod",
        list_kind: "PodList",
        plural: "pods",
        singular: "pod",
        namespaced: true,
        metrics: false,
    },
    KindInfo {
        group: "metrics.k8s.io",
        version: "v1beta1",
        api_version: "metrics.k8s.io/v1beta1",
        kind: "PodMetrics",
        list_kind: "PodMetricsList",
        plural: "pods",
        singular: "",
        namespaced: true,
        metrics: true,
    },
    KindInfo {
        group: "apps",
        version: "v1",
        api_version: "apps/v1",
        kind: "DaemonSet",
        list_kind: "DaemonSetList",
        plural: "daemonsets",
        singular: "daemonset",
        namespaced: true,
        metrics: false,
    },
    KindInfo {
        group: "apps",
        version: "v1",
        api_version: "apps/v1",
        kind: "Deployment",
        list_kind: "DeploymentList",
        plural: "deployments",
        singular: "deployment",
        namespaced: true,
        metrics: false,
    },
    KindInfo {
        group: "apps",
        version: "v1",
        api_version: "apps/v1",
        kind: "ReplicaSet",
        list_kind: "ReplicaSetList",
        plural: "replicasets",
        singular: "replicaset",
        namespaced: true,
        metrics: false,
    },
    KindInfo {
        group: "coordination.k8s.io",
        version: "v1",
        api_version: "coordination.k8s.io/v1",
        kind: "Lease",
        list_kind: "LeaseList",
        plural: "leases",
        singular: "lease",
        namespaced: true,
        metrics: false,
    },
    KindInfo {
        group: "apps",
        version: "v1",
        api_version: "apps/v1",
        kind: "StatefulSet",
        list_kind: "StatefulSetList",
        plural: "statefulsets",
        singular: "statefulset",
        namespaced: true,
        metrics: false,
    },
];

impl Kind {
    /// Every kind, in declaration order.
    pub const ALL: [Kind; 9] = [
        Kind::Nodes,
        Kind::NodeMetrics,
        Kind::Pods,
        Kind::PodMetrics,
        Kind::DaemonSets,
        Kind::Deployments,
        Kind::ReplicaSets,
        Kind::Leases,
        Kind::StatefulSets,
    ];

    fn info(self) -> &'static KindInfo {
        &KINDS[self as usize]
    }

    /// The kind of a typed object, e.g. `Kind::of::<Pod>()`; panics for a type the stand-in
    /// does not serve.
    pub fn of<K: Resource>() -> Kind {
        Kind::ALL
            .into_iter()
            .find(|k| k.info().api_version == K::API_VERSION && k.info().kind == K::KIND)
            .unwrap_or_else(|| panic!("the stand-in does not serve {}", K::KIND))
    }

    /// The URL segment, e.g. `pods`.
    pub fn plural(self) -> &'static str {
        self.info().plural
    }

    /// The group-qualified resource as in error messages, e.g. `leases.coordination.k8s.io`.
    pub fn resource(self) -> String {
        let info = self.info();
        if info.group.is_empty() {
            info.plural.to_string()
        } else {
            format!("{}.{}", info.plural, info.group)
        }
    }

    /// The collection path, all namespaces, e.g. `/apis/apps/v1/daemonsets`.
    pub fn path(self) -> String {
        let info = self.info();
        format!("{}/{}", group_version_path(info), info.plural)
    }

    /// The collection path in one namespace (the cluster path for cluster-scoped kinds).
    pub fn namespaced_path(self, namespace: &str) -> String {
        let info = self.info();
        if info.namespaced {
            format!(
                "{}/namespaces/{namespace}/{}",
                group_version_path(info),
                info.plural
            )
        } else {
            self.path()
        }
    }
}

fn group_version_path(info: &KindInfo) -> String {
    if info.group.is_empty() {
        format!("/api/{}", info.version)
    } else {
        format!("/apis/{}/{}", info.group, info.version)
    }
}

/// The API verbs, for faults per kind and verb.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verb {
    Get,
    List,
    Watch,
    Create,
    Update,
    Patch,
    Delete,
}

/// An injected failure: the request answers `code` with a `Status` body.
#[derive(Debug, Clone, PartialEq)]
pub struct Fault {
    pub code: u16,
    /// The `Status` reason, e.g. `ServiceUnavailable`.
    pub reason: String,
    pub message: String,
    /// Requests left to fail; `None` fails until healed.
    pub times: Option<usize>,
    /// Sent as the `Retry-After` header and `details.retryAfterSeconds`.
    pub retry_after: Option<u64>,
}

impl Fault {
    /// Any `Status` answer.
    pub fn status(code: u16, reason: &str, message: &str) -> Fault {
        Fault {
            code,
            reason: reason.into(),
            message: message.into(),
            times: None,
            retry_after: None,
        }
    }

    /// 503 `ServiceUnavailable`, as the API server answers for an aggregated API whose backend
    /// (metrics-server) is down.
    pub fn unavailable(message: &str) -> Fault {
        Fault::status(503, "ServiceUnavailable", message)
    }

    /// 403 `Forbidden`, as for a service account without RBAC for the resource.
    pub fn forbidden(message: &str) -> Fault {
        Fault::status(403, "Forbidden", message)
    }

    /// 500 `InternalError`.
    pub fn internal(message: &str) -> Fault {
        Fault::status(500, "InternalError", message)
    }

    /// 429 `TooManyRequests` with `Retry-After: secs`, as API Priority and Fairness rejects.
    pub fn too_many_requests(retry_after_secs: u64) -> Fault {
        let mut f = Fault::status(
            429,
            "TooManyRequests",
            "Too many requests, please try again later.",
        );
        f.retry_after = Some(retry_after_secs);
        f
    }

    /// Fails only the next `n` requests.
    pub fn times(mut self, n: usize) -> Fault {
        self.times = Some(n);
        self
    }

    fn error(&self) -> ApiError {
        let mut e = ApiError::new(self.code, &self.reason, self.message.clone());
        if let Some(secs) = self.retry_after {
            e.retry_after = Some(secs);
            e.details = Some(Box::new(metav1::StatusDetails {
                retry_after_seconds: Some(i32::try_from(secs).unwrap_or(i32::MAX)),
                ..Default::default()
            }));
        }
        e
    }
}

/// One request the stand-in received.
#[derive(Debug, Clone, PartialEq)]
pub struct Logged {
    pub method: Method,
    pub path: String,
    pub query: Option<String>,
}

/// What an RBAC authorizer sees of a request: kube-apiserver's request attributes
/// (`k8s.io/apiserver/pkg/endpoints/request.RequestInfo`), derived from the path, method and
/// query the stand-in logged. For a non-resource request (`/readyz`, `/version`, discovery)
/// `resource` is empty and `path` carries the URL path.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestAttributes {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`.
    pub verb: String,
    /// API group, empty for the core group.
    pub group: String,
    pub resource: String,
    pub subresource: String,
    /// Empty for cluster-scoped requests and for requests across all namespaces.
    pub namespace: String,
    /// Object name, empty for collections.
    pub name: String,
    /// The URL path of a non-resource request, else empty.
    pub path: String,
}

impl RequestAttributes {
    pub fn is_resource(&self) -> bool {
        self.path.is_empty()
    }
}

impl Logged {
    /// The request's RBAC attributes, parsed as kube-apiserver parses them.
    pub fn attributes(&self) -> RequestAttributes {
        let segments: Vec<&str> = self.path.split('/').filter(|s| !s.is_empty()).collect();
        let rest: Option<(&str, &[&str])> = match segments.as_slice() {
            ["api", _version, rest @ ..] if !rest.is_empty() => Some(("", rest)),
            ["apis", group, _version, rest @ ..] if !rest.is_empty() => Some((group, rest)),
            _ => None,
        };
        let method_verb = match self.method {
            Method::POST => "create",
            Method::PUT => "update",
            Method::PATCH => "patch",
            Method::DELETE => "delete",
            _ => "get",
        };
        let Some((group, mut rest)) = rest else {
            return RequestAttributes {
                verb: method_verb.to_string(),
                group: String::new(),
                resource: String::new(),
                subresource: String::new(),
                namespace: String::new(),
                name: String::new(),
                path: self.path.clone(),
            };
        };
        let mut namespace = "";
        if rest.len() >= 3 && rest[0] == "namespaces" {
            namespace = rest[1];
            rest = &rest[2..];
        } else if rest.len() == 2 && rest[0] == "namespaces" {
            // GET /api/v1/namespaces/NAME: the namespace object itself.
            namespace = rest[1];
        }
        let resource = rest.first().copied().unwrap_or_default();
        let name = rest.get(1).copied().unwrap_or_default();
        let subresource = rest.get(2..).map(|s| s.join("/")).unwrap_or_default();
        let watch = self
            .query
            .as_deref()
            .is_some_and(|q| q.split('&').any(|kv| kv == "watch=true" || kv == "watch=1"));
        let verb = match (method_verb, name.is_empty()) {
            ("get", true) if watch => "watch",
            ("get", true) => "list",
            ("get", false) if watch => "watch",
            ("delete", true) => "deletecollection",
            (v, _) => v,
        };
        // As kube-apiserver's RequestInfo: a list or watch whose field selector requires
        // `metadata.name` to equal one value is a request for that name (RBAC `resourceNames`).
        let mut name = name.to_string();
        if name.is_empty() && matches!(verb, "list" | "watch") {
            let query = self.query.as_deref().unwrap_or_default();
            for (k, v) in form_urlencoded::parse(query.as_bytes()) {
                if k == "fieldSelector" {
                    for term in v.split(',') {
                        let exact = term
                            .strip_prefix("metadata.name==")
                            .or_else(|| term.strip_prefix("metadata.name="));
                        if let Some(n) = exact.filter(|n| !n.starts_with('=')) {
                            name = n.to_string();
                        }
                    }
                }
            }
        }
        RequestAttributes {
            verb: verb.to_string(),
            group: group.to_string(),
            resource: resource.to_string(),
            subresource,
            namespace: namespace.to_string(),
            name,
            path: String::new(),
        }
    }
}

/// How to start a stand-in.
#[derive(Debug, Clone)]
pub struct Options {
    /// Where to listen; port 0 picks a free one.
    pub listen: SocketAddr,
    /// How often a watch with `allowWatchBookmarks=true` gets a BOOKMARK (the real server: about
    /// a minute).
    pub bookmark_interval: Duration,
    /// Events kept per kind for watch resumption and consistent pagination; older resource
    /// versions get 410 Gone.
    pub history_limit: usize,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            bookmark_interval: Duration::from_secs(1),
            history_limit: 10_000,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The store

/// `(namespace, name)`; the namespace is empty for cluster-scoped kinds.
type Key = (String, String);

/// One stored version of an object: its JSON, serialized once, and what selectors look at.
#[derive(Debug)]
struct Obj {
    rv: u64,
    json: Bytes,
    labels: Vec<(String, String)>,
    fields: Fields,
}

/// The selectable fields besides name and namespace.
#[derive(Debug, Clone, Default)]
struct Fields {
    node_name: Option<String>,
    phase: Option<String>,
    unschedulable: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EventType {
    Added,
    Modified,
    Deleted,
}

/// One change, as the watch cache keeps it.
#[derive(Debug)]
struct Event {
    rv: u64,
    ty: EventType,
    key: Key,
    /// The object after the change (for a deletion: its last state, with the deletion's RV).
    obj: Arc<Obj>,
    /// The object before the change.
    prev: Option<Arc<Obj>>,
}

#[derive(Debug, Default)]
struct KindStore {
    objects: BTreeMap<Key, Arc<Obj>>,
    /// Oldest first, resource versions increasing.
    history: VecDeque<Event>,
    /// Requests from an older resource version get 410 Gone.
    compacted: u64,
    /// The newest event dropped from the history: an open watch behind it has missed events.
    evicted: u64,
}

/// How a write treats an existing object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WriteMode {
    Create,
    Update { expected: Option<u64> },
    Upsert,
}

/// Everything the stand-in serves and has seen.
#[derive(Debug)]
pub struct ClusterState {
    /// Faults for every verb of a kind.
    pub faults: HashMap<Kind, Fault>,
    /// Faults for one verb of a kind; checked before `faults`.
    pub verb_faults: HashMap<(Kind, Verb), Fault>,
    /// Faults answered in turn, one per request, for one verb of a kind; checked first.
    pub fault_queues: HashMap<(Kind, Verb), VecDeque<Fault>>,
    /// A LIST of the kind answers 200 with this body as it is (e.g. invalid JSON).
    pub raw_lists: HashMap<Kind, String>,
    pub requests: Vec<Logged>,
    /// The global resource version (etcd's revision), bumped by every write.
    pub resource_version: u64,
    /// Added before answering every resource request.
    pub latency: Duration,
    /// Added before answering requests for one kind (instead of `latency`).
    pub kind_latency: HashMap<Kind, Duration>,
    pub bookmark_interval: Duration,
    /// What `/readyz`, `/livez` and `/healthz` say: `ok`, or a 500 with a failed etcd check.
    pub healthy: bool,
    history_limit: usize,
    stores: Vec<KindStore>,
    rv_tx: watch::Sender<u64>,
    epoch_tx: watch::Sender<u64>,
    /// The epoch whose start ends streams with a cut (half an event, then a failed body) rather
    /// than cleanly; see [`ApiServer::cut_watches`].
    cut_epoch: Arc<AtomicU64>,
    /// When each request in `requests` came.
    request_times: Vec<Instant>,
    /// metrics.k8s.io LIST answers handed out whole, in the order they ended.
    answered: Vec<Answered>,
    open_watches: Arc<AtomicUsize>,
}

/// A metrics.k8s.io LIST answer the stand-in handed out to its last byte.
#[derive(Debug, Clone, PartialEq)]
pub struct Answered {
    pub path: String,
    /// The body's length.
    pub bytes: usize,
    /// When the server took the body's last piece (to write it to the connection).
    pub at: Instant,
}

type Shared = Arc<Mutex<ClusterState>>;

fn lock(state: &Shared) -> MutexGuard<'_, ClusterState> {
    state.lock().unwrap_or_else(|p| p.into_inner())
}

impl ClusterState {
    fn new(options: &Options) -> ClusterState {
        ClusterState {
            faults: HashMap::new(),
            verb_faults: HashMap::new(),
            fault_queues: HashMap::new(),
            raw_lists: HashMap::new(),
            requests: Vec::new(),
            resource_version: 1,
            latency: Duration::ZERO,
            kind_latency: HashMap::new(),
            bookmark_interval: options.bookmark_interval,
            healthy: true,
            history_limit: options.history_limit,
            stores: Kind::ALL.iter().map(|_| KindStore::default()).collect(),
            rv_tx: watch::channel(1).0,
            epoch_tx: watch::channel(0).0,
            cut_epoch: Arc::new(AtomicU64::new(u64::MAX)),
            request_times: Vec::new(),
            answered: Vec::new(),
            open_watches: Arc::default(),
        }
    }

    fn store(&self, kind: Kind) -> &KindStore {
        &self.stores[kind as usize]
    }

    fn bump(&mut self) -> u64 {
        self.resource_version += 1;
        self.resource_version
    }

    /// Applies a change to the objects and appends it to the history.
    fn commit(
        &mut self,
        kind: Kind,
        key: Key,
        ty: EventType,
        obj: Arc<Obj>,
        prev: Option<Arc<Obj>>,
    ) {
        let limit = self.history_limit;
        let store = &mut self.stores[kind as usize];
        if ty == EventType::Deleted {
            store.objects.remove(&key);
        } else {
            store.objects.insert(key.clone(), obj.clone());
        }
        store.history.push_back(Event {
            rv: obj.rv,
            ty,
            key,
            obj,
            prev,
        });
        trim_history(store, limit);
        self.rv_tx.send_replace(self.resource_version);
    }

    /// Stores `v` as an object of `kind`: drops apiVersion/kind (see the module docs), sets the
    /// namespace (`url_namespace`, else the body's, else `default`), resourceVersion, uid and
    /// creationTimestamp (kept from the stored object on updates).
    fn write(
        &mut self,
        kind: Kind,
        mut v: Value,
        mode: WriteMode,
        url_namespace: Option<&str>,
    ) -> Result<Arc<Obj>, ApiError> {
        let info = kind.info();
        let Some(map) = v.as_object_mut() else {
            return Err(ApiError::bad_request("the object is not a JSON object"));
        };
        // Stored without apiVersion/kind, as list items are served.
        map.remove("apiVersion");
        map.remove("kind");
        let meta = map.entry("metadata").or_insert_with(|| json!({}));
        let Some(meta) = meta.as_object_mut() else {
            return Err(ApiError::bad_request("metadata is not a JSON object"));
        };
        let body_ns = meta
            .get("namespace")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_string);
        let namespace = if info.namespaced {
            let ns = match (url_namespace, body_ns) {
                (Some(u), Some(b)) if u != b => {
                    return Err(ApiError::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ));
                }
                (Some(u), _) => u.to_string(),
                (None, Some(b)) => b,
                (None, None) => "default".to_string(),
            };
            meta.insert("namespace".into(), ns.clone().into());
            ns
        } else {
            meta.remove("namespace");
            String::new()
        };
        let mut name = meta
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        if name.is_empty()
            && matches!(mode, WriteMode::Create | WriteMode::Upsert)
            && let Some(prefix) = meta.get("generateName").and_then(Value::as_str)
        {
            let salt = fnv64(&format!("{prefix}/{}", self.resource_version));
            name = format!("{prefix}{}", suffix(salt, 5));
            meta.insert("name".into(), name.clone().into());
        }
        if name.is_empty() {
            return Err(ApiError::new(
                422,
                "Invalid",
                format!(
                    "{} is invalid: metadata.name: Required value: name or generateName is required",
                    kind.resource()
                ),
            ));
        }
        let key = (namespace, name);
        let existing = self.store(kind).objects.get(&key).cloned();
        match (mode, &existing) {
            (WriteMode::Create, Some(_)) => return Err(ApiError::already_exists(kind, &key.1)),
            (WriteMode::Update { .. }, None) => return Err(ApiError::not_found(kind, &key.1)),
            (
                WriteMode::Update {
                    expected: Some(want),
                },
                Some(cur),
            ) if cur.rv != want => {
                return Err(ApiError::conflict(kind, &key.1));
            }
            _ => {}
        }
        let rv = self.bump();
        if !info.metrics {
            meta.insert("resourceVersion".into(), rv.to_string().into());
            if let Some(cur) = &existing {
                let kept: KeptMeta = serde_json::from_slice(&cur.json).unwrap_or_default();
                for (field, value) in [
                    ("uid", kept.metadata.uid),
                    ("creationTimestamp", kept.metadata.creation_timestamp),
                ] {
                    if let Some(value) = value {
                        meta.insert(field.into(), value.into());
                    }
                }
            } else {
                meta.entry("uid")
                    .or_insert_with(|| uid_for(kind, &key.0, &key.1, rv).into());
                meta.entry("creationTimestamp")
                    .or_insert_with(|| serde_json::to_value(api_time(SystemTime::now())).unwrap());
            }
        }
        let obj = Arc::new(Obj {
            rv,
            labels: labels_of(&v),
            fields: fields_of(&v),
            json: frozen(serde_json::to_vec(&v).unwrap()),
        });
        let ty = if existing.is_some() {
            EventType::Modified
        } else {
            EventType::Added
        };
        self.commit(kind, key, ty, obj.clone(), existing);
        Ok(obj)
    }

    /// Stores a typed object as it is (bulk path: no JSON round trip); the caller sets uid and
    /// timestamps, this sets the resourceVersion.
    fn put_typed<K>(&mut self, kind: Kind, mut obj: K, fields: Fields)
    where
        K: Serialize + Metadata<Ty = metav1::ObjectMeta>,
    {
        let info = kind.info();
        let meta = obj.metadata();
        let key = (
            meta.namespace.clone().unwrap_or_default(),
            meta.name.clone().unwrap_or_default(),
        );
        let labels = meta
            .labels
            .iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        self.put_json(kind, key, labels, fields, |rv| {
            if !info.metrics {
                obj.metadata_mut().resource_version = Some(rv.to_string());
            }
            // Stored without apiVersion/kind, as list items are served: k8s-openapi writes
            // them first (the metrics types not at all).
            let mut json = serde_json::to_vec(&obj).unwrap();
            let type_meta = type_meta_prefix(info);
            if json.starts_with(type_meta.as_bytes()) {
                json.drain(1..type_meta.len());
            } else if !info.metrics {
                let mut v = serde_json::to_value(&obj).unwrap();
                if let Some(map) = v.as_object_mut() {
                    map.remove("apiVersion");
                    map.remove("kind");
                }
                json = serde_json::to_vec(&v).unwrap();
            }
            json
        });
    }

    /// Stores an object under `key` whose JSON (without apiVersion/kind, as list items are
    /// served) `json` writes for the resource version it is given (the bulk path: no JSON
    /// round trip); `labels` index it for selectors.
    fn put_json(
        &mut self,
        kind: Kind,
        key: Key,
        labels: Vec<(String, String)>,
        fields: Fields,
        json: impl FnOnce(u64) -> Vec<u8>,
    ) {
        let rv = self.bump();
        let obj = Arc::new(Obj {
            rv,
            json: frozen(json(rv)),
            labels,
            fields,
        });
        let prev = self.store(kind).objects.get(&key).cloned();
        let ty = if prev.is_some() {
            EventType::Modified
        } else {
            EventType::Added
        };
        self.commit(kind, key, ty, obj, prev);
    }

    /// Deletes an object; the deletion gets a resource version, as in etcd. Returns the object's
    /// last state (with the deletion's RV), as DELETE answers.
    fn remove(&mut self, kind: Kind, namespace: &str, name: &str) -> Option<Arc<Obj>> {
        let key = (namespace.to_string(), name.to_string());
        let prev = self.store(kind).objects.get(&key)?.clone();
        let rv = self.bump();
        let json = if kind.info().metrics {
            prev.json.clone()
        } else {
            let mut v: Value = serde_json::from_slice(&prev.json).unwrap();
            v["metadata"]["resourceVersion"] = rv.to_string().into();
            frozen(serde_json::to_vec(&v).unwrap())
        };
        let tomb = Arc::new(Obj {
            rv,
            json,
            labels: prev.labels.clone(),
            fields: prev.fields.clone(),
        });
        self.commit(kind, key, EventType::Deleted, tomb.clone(), Some(prev));
        Some(tomb)
    }

    /// Creates or replaces a typed object (e.g. a `Pod`, `Lease` or `NodeMetrics`); returns the
    /// new resource version. Namespaced objects without a namespace go to `default`.
    pub fn upsert<K: Resource + Serialize>(&mut self, obj: &K) -> u64 {
        self.upsert_json(Kind::of::<K>(), serde_json::to_value(obj).unwrap())
    }

    /// Creates or replaces an object given as JSON; returns the new resource version.
    pub fn upsert_json(&mut self, kind: Kind, obj: Value) -> u64 {
        match self.write(kind, obj, WriteMode::Upsert, None) {
            Ok(o) => o.rv,
            Err(e) => panic!("upsert {kind:?}: {}", e.message),
        }
    }

    /// Deletes a typed object by namespace ("" for cluster-scoped) and name; false if absent.
    pub fn delete<K: Resource>(&mut self, namespace: &str, name: &str) -> bool {
        self.delete_kind(Kind::of::<K>(), namespace, name)
    }

    pub fn delete_kind(&mut self, kind: Kind, namespace: &str, name: &str) -> bool {
        self.remove(kind, namespace, name).is_some()
    }

    /// Makes the objects of `K` exactly `items`: deletes the others, upserts these.
    /// Moves every NodeMetrics to `at`, with CPU and memory usage 5 % up on an odd `step` and
    /// back down on an even one, as metrics-server's next scrape would (benches fill the hub's
    /// 15-minute windows with it). Returns how many were changed.
    pub fn step_node_metrics(&mut self, step: u64, at: SystemTime) -> usize {
        fn scaled(q: &Quantity, up: bool) -> Quantity {
            let s = q.0.as_str();
            let digits = s.trim_end_matches(|c: char| !c.is_ascii_digit());
            let suffix = &s[digits.len()..];
            match digits.parse::<u64>() {
                Ok(n) if up => Quantity(format!("{}{suffix}", n + n / 20)),
                Ok(n) => Quantity(format!("{}{suffix}", n - n / 21)),
                Err(_) => q.clone(),
            }
        }
        let items: Vec<NodeMetrics> = self
            .store(Kind::NodeMetrics)
            .objects
            .values()
            .filter_map(|o| serde_json::from_slice(&o.json).ok())
            .collect();
        let n = items.len();
        for mut m in items {
            m.timestamp = api_time(at);
            m.usage.cpu = scaled(&m.usage.cpu, step % 2 == 1);
            m.usage.memory = scaled(&m.usage.memory, step % 2 == 1);
            self.put_typed(Kind::NodeMetrics, m, Fields::default());
        }
        n
    }

    pub fn replace_all<K: Resource + Serialize>(&mut self, items: &[K]) {
        let kind = Kind::of::<K>();
        let values: Vec<Value> = items
            .iter()
            .map(|o| serde_json::to_value(o).unwrap())
            .collect();
        let keep: std::collections::BTreeSet<Key> = values
            .iter()
            .map(|v| {
                let ns = if kind.info().namespaced {
                    v.pointer("/metadata/namespace")
                        .and_then(Value::as_str)
                        .filter(|s| !s.is_empty())
                        .unwrap_or("default")
                } else {
                    ""
                };
                let name = v.pointer("/metadata/name").and_then(Value::as_str);
                (ns.to_string(), name.unwrap_or_default().to_string())
            })
            .collect();
        let gone: Vec<Key> = self
            .store(kind)
            .objects
            .keys()
            .filter(|k| !keep.contains(k))
            .cloned()
            .collect();
        for (ns, name) in gone {
            self.remove(kind, &ns, &name);
        }
        for v in values {
            self.upsert_json(kind, v);
        }
    }

    /// One object as stored.
    pub fn get<K: Resource + DeserializeOwned>(&self, namespace: &str, name: &str) -> Option<K> {
        let key = (namespace.to_string(), name.to_string());
        let obj = self.store(Kind::of::<K>()).objects.get(&key)?;
        Some(serde_json::from_slice(&obj.json).unwrap())
    }

    /// Every object of `K`, sorted by namespace and name.
    pub fn objects<K: Resource + DeserializeOwned>(&self) -> Vec<K> {
        self.store(Kind::of::<K>())
            .objects
            .values()
            .map(|o| serde_json::from_slice(&o.json).unwrap())
            .collect()
    }

    /// How many objects of `kind` exist.
    pub fn count(&self, kind: Kind) -> usize {
        self.store(kind).objects.len()
    }

    /// `(namespace, name, resourceVersion)` of every object of `kind`, sorted.
    pub fn versions(&self, kind: Kind) -> Vec<(String, String, u64)> {
        self.store(kind)
            .objects
            .iter()
            .map(|((ns, name), o)| (ns.clone(), name.clone(), o.rv))
            .collect()
    }

    /// Forgets all history up to now, like an etcd compaction: a LIST `Exact`, a `continue` or a
    /// WATCH from any resource version issued before this call gets 410 Gone. Open watches that
    /// are caught up carry on, as etcd's do. Takes a resource version of its own so that the
    /// current one stays usable.
    pub fn compact(&mut self) {
        let rv = self.bump();
        for store in &mut self.stores {
            if let Some(last) = store.history.back() {
                store.evicted = store.evicted.max(last.rv);
            }
            store.history.clear();
            store.compacted = rv;
        }
        self.rv_tx.send_replace(rv);
    }

    /// Ends every open watch stream now (cleanly, as when the server's watch timeout expires):
    /// no event written after this call goes out on a stream opened before it.
    pub fn drop_watches(&mut self) {
        self.epoch_tx.send_modify(|e| *e += 1);
    }

    /// Ends every open watch stream now by breaking it: half an event line, then the body
    /// fails (as a connection lost mid-event). As with `drop_watches`, no write made after
    /// this call goes out on a stream opened before it.
    pub fn cut_watches(&mut self) {
        let next = *self.epoch_tx.borrow() + 1;
        self.cut_epoch.store(next, Ordering::SeqCst);
        self.epoch_tx.send_replace(next);
    }

    /// Sets how many events are kept per kind; trims now.
    pub fn set_history_limit(&mut self, limit: usize) {
        self.history_limit = limit;
        for store in &mut self.stores {
            trim_history(store, limit);
        }
    }

    fn log(&mut self, method: &Method, uri: &Uri) {
        self.request_times.push(Instant::now());
        self.requests.push(Logged {
            method: method.clone(),
            path: uri.path().to_string(),
            query: uri.query().map(str::to_string),
        });
    }

    /// The injected failure for this request, if any (and counts it down).
    fn take_fault(&mut self, kind: Kind, verb: Verb) -> Option<ApiError> {
        if let Some(q) = self.fault_queues.get_mut(&(kind, verb))
            && let Some(fault) = q.pop_front()
        {
            return Some(fault.error());
        }
        if let Some(fault) = self.verb_faults.get_mut(&(kind, verb)) {
            let error = fault.error();
            if use_up(fault) {
                self.verb_faults.remove(&(kind, verb));
            }
            return Some(error);
        }
        let fault = self.faults.get_mut(&kind)?;
        let error = fault.error();
        if use_up(fault) {
            self.faults.remove(&kind);
        }
        Some(error)
    }

    /// Visits the objects of `kind` as they were at `at`, in key order, after `after` and in
    /// `namespace` if given. The state at `at` is the current one with the history newer than
    /// `at` undone.
    fn visit<'a>(
        &'a self,
        kind: Kind,
        at: u64,
        after: Option<&Key>,
        namespace: Option<&str>,
        mut f: impl FnMut(&'a Key, &'a Arc<Obj>) -> ControlFlow<()>,
    ) {
        let store = self.store(kind);
        let newer = store.history.partition_point(|e| e.rv <= at);
        let mut undo: BTreeMap<&Key, Option<&Arc<Obj>>> = BTreeMap::new();
        for e in store.history.range(newer..) {
            undo.entry(&e.key).or_insert(e.prev.as_ref());
        }
        let ns_start = namespace.map(|ns| (ns.to_string(), String::new()));
        let lower: Bound<&Key> = match (after, &ns_start) {
            (Some(a), Some(s)) if a < s => Bound::Included(s),
            (Some(a), _) => Bound::Excluded(a),
            (None, Some(s)) => Bound::Included(s),
            (None, None) => Bound::Unbounded,
        };
        let mut now = store
            .objects
            .range::<Key, _>((lower, Bound::Unbounded))
            .peekable();
        let in_range = |k: &Key| match lower {
            Bound::Included(b) => k >= b,
            Bound::Excluded(b) => k > b,
            Bound::Unbounded => true,
        };
        let mut then = undo.into_iter().filter(|(k, _)| in_range(k)).peekable();
        loop {
            let take_now = match (now.peek(), then.peek()) {
                (None, None) => break,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (Some((a, _)), Some((b, _))) => {
                    if *a == *b {
                        now.next();
                        false
                    } else {
                        *a < *b
                    }
                }
            };
            let (key, obj): (&'a Key, Option<&'a Arc<Obj>>) = if take_now {
                let (k, o) = now.next().unwrap();
                (k, Some(o))
            } else {
                then.next().unwrap()
            };
            let Some(obj) = obj else { continue };
            if let Some(ns) = namespace
                && key.0 != ns
            {
                if key.0.as_str() > ns {
                    break;
                }
                continue;
            }
            if f(key, obj).is_break() {
                break;
            }
        }
    }

    /// A LIST: the items' JSON, the list's resourceVersion and continue token.
    fn list_parts(&self, route: &Route, q: &Query) -> Result<ListParts, ApiError> {
        let kind = route.kind;
        let selectors = Selectors::parse(kind, q)?;
        // metrics-server (metrics.k8s.io) answers every LIST whole: `limit` and `continue` are
        // ignored, as its storage ignores them (sigs.k8s.io/metrics-server pkg/api).
        let whole = matches!(kind, Kind::NodeMetrics | Kind::PodMetrics);
        let limit = match q.get("limit").filter(|s| !s.is_empty() && !whole) {
            None => None,
            Some(s) => match s.parse::<usize>() {
                Ok(0) => None,
                Ok(n) => Some(n),
                Err(_) => return Err(ApiError::bad_request(format!("invalid limit: {s:?}"))),
            },
        };
        let store = self.store(kind);
        let current = self.resource_version;
        let rv = q.get("resourceVersion").filter(|s| !s.is_empty());
        let rv_match = q.get("resourceVersionMatch").filter(|s| !s.is_empty());
        let (at, after) = if let Some(token) = q.get("continue").filter(|s| !s.is_empty() && !whole)
        {
            if rv.is_some_and(|r| r != "0") {
                return Err(ApiError::bad_request(
                    "specifying resource version is not allowed when using continue",
                ));
            }
            let Some((at, key)) = decode_continue(token) else {
                return Err(ApiError::bad_request(format!(
                    "continue key is not valid: {token:?}"
                )));
            };
            if at < store.compacted || at > current {
                return Err(ApiError::expired(
                    "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.",
                ));
            }
            (at, Some(key))
        } else {
            let at = match (rv, rv_match) {
                (None, Some(_)) => {
                    return Err(ApiError::bad_request(
                        "resourceVersionMatch is forbidden unless resourceVersion is provided",
                    ));
                }
                (Some("0"), Some("Exact")) => {
                    return Err(ApiError::bad_request(
                        "resourceVersionMatch \"Exact\" is forbidden for resourceVersion \"0\"",
                    ));
                }
                (None, None) | (Some("0"), _) => current,
                (Some(r), m) => {
                    let exact = match m {
                        Some("Exact") => true,
                        Some("NotOlderThan") => false,
                        None => limit.is_some(),
                        Some(other) => {
                            return Err(ApiError::bad_request(format!(
                                "resourceVersionMatch: Unsupported value: {other:?}"
                            )));
                        }
                    };
                    let Ok(x) = r.parse::<u64>() else {
                        return Err(ApiError::bad_request(format!(
                            "resourceVersion: Invalid value: {r:?}"
                        )));
                    };
                    if x > current {
                        return Err(ApiError::too_large(x, current));
                    }
                    if exact && x < store.compacted {
                        return Err(ApiError::expired(format!(
                            "too old resource version: {x} ({})",
                            store.compacted
                        )));
                    }
                    if exact { x } else { current }
                }
            };
            (at, None)
        };
        let mut items = Vec::new();
        let mut last: Option<&Key> = None;
        let mut more = false;
        self.visit(
            kind,
            at,
            after.as_ref(),
            route.namespace.as_deref(),
            |key, obj| {
                if !selectors.matches(key, obj) {
                    return ControlFlow::Continue(());
                }
                if limit.is_some_and(|l| items.len() >= l) {
                    more = true;
                    return ControlFlow::Break(());
                }
                items.push(obj.json.clone());
                last = Some(key);
                ControlFlow::Continue(())
            },
        );
        let continue_token = if more {
            last.map(|k| encode_continue(at, k))
        } else {
            None
        };
        Ok(ListParts {
            items,
            resource_version: at,
            continue_token,
        })
    }
}

/// A serialized object as stored: without the spare capacity serialization leaves.
fn frozen(mut json: Vec<u8>) -> Bytes {
    json.shrink_to_fit();
    Bytes::from(json)
}

fn use_up(fault: &mut Fault) -> bool {
    fault.times.as_mut().is_some_and(|n| {
        *n = n.saturating_sub(1);
        *n == 0
    })
}

fn trim_history(store: &mut KindStore, limit: usize) {
    while store.history.len() > limit {
        let e = store.history.pop_front().unwrap();
        store.compacted = store.compacted.max(e.rv);
        store.evicted = store.evicted.max(e.rv);
    }
}

struct ListParts {
    items: Vec<Bytes>,
    resource_version: u64,
    continue_token: Option<String>,
}

/// What an update keeps from the stored object.
#[derive(serde::Deserialize, Default)]
struct KeptMeta {
    #[serde(default)]
    metadata: KeptMetaFields,
}

#[derive(serde::Deserialize, Default)]
struct KeptMetaFields {
    uid: Option<String>,
    #[serde(rename = "creationTimestamp")]
    creation_timestamp: Option<String>,
}

/// `{"apiVersion":"…","kind":"…",`: what a stored object lacks to stand alone.
fn type_meta_prefix(info: &KindInfo) -> String {
    format!(
        r#"{{"apiVersion":"{}","kind":"{}","#,
        info.api_version, info.kind
    )
}

/// Writes a stored object with its apiVersion and kind, as GET, writes and watch events serve
/// it (list items go without).
fn push_object(out: &mut Vec<u8>, kind: Kind, stored: &[u8]) {
    let prefix = type_meta_prefix(kind.info());
    match stored.strip_prefix(b"{") {
        Some(rest) if rest.len() > 1 => {
            out.extend_from_slice(prefix.as_bytes());
            out.extend_from_slice(rest);
        }
        _ => {
            out.extend_from_slice(&prefix.as_bytes()[..prefix.len() - 1]);
            out.push(b'}');
        }
    }
}

fn labels_of(v: &Value) -> Vec<(String, String)> {
    v.pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect()
        })
        .unwrap_or_default()
}

fn fields_of(v: &Value) -> Fields {
    let text = |p: &str| v.pointer(p).and_then(Value::as_str).map(str::to_string);
    Fields {
        node_name: text("/spec/nodeName"),
        phase: text("/status/phase"),
        unschedulable: v
            .pointer("/spec/unschedulable")
            .and_then(Value::as_bool)
            .unwrap_or(false),
    }
}

fn pod_fields(pod: &Pod) -> Fields {
    Fields {
        node_name: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
        phase: pod.status.as_ref().and_then(|s| s.phase.clone()),
        unschedulable: false,
    }
}

// ---------------------------------------------------------------------------------------------
// Errors, selectors, continue tokens

/// A `Status` answer.
#[derive(Debug, Clone)]
struct ApiError {
    code: u16,
    reason: String,
    message: String,
    details: Option<Box<metav1::StatusDetails>>,
    retry_after: Option<u64>,
}

impl ApiError {
    fn new(code: u16, reason: &str, message: impl Into<String>) -> ApiError {
        ApiError {
            code,
            reason: reason.into(),
            message: message.into(),
            details: None,
            retry_after: None,
        }
    }

    fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(400, "BadRequest", message)
    }

    fn expired(message: impl Into<String>) -> ApiError {
        ApiError::new(410, "Expired", message)
    }

    fn method_not_allowed() -> ApiError {
        ApiError::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )
    }

    fn with_object(mut self, kind: Kind, name: &str) -> ApiError {
        let info = kind.info();
        self.details = Some(Box::new(metav1::StatusDetails {
            name: Some(name.into()),
            group: (!info.group.is_empty()).then(|| info.group.to_string()),
            kind: Some(info.plural.into()),
            ..Default::default()
        }));
        self
    }

    fn not_found(kind: Kind, name: &str) -> ApiError {
        let message = format!("{} \"{name}\" not found", kind.resource());
        ApiError::new(404, "NotFound", message).with_object(kind, name)
    }

    fn already_exists(kind: Kind, name: &str) -> ApiError {
        let message = format!("{} \"{name}\" already exists", kind.resource());
        ApiError::new(409, "AlreadyExists", message).with_object(kind, name)
    }

    fn conflict(kind: Kind, name: &str) -> ApiError {
        let message = format!(
            "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
            kind.resource()
        );
        ApiError::new(409, "Conflict", message).with_object(kind, name)
    }

    /// A resource version from the future, after the real server's 3 s wait.
    fn too_large(rv: u64, current: u64) -> ApiError {
        let mut e = ApiError::new(
            504,
            "Timeout",
            format!("Too large resource version: {rv}, current: {current}"),
        );
        e.details = Some(Box::new(metav1::StatusDetails {
            causes: Some(vec![metav1::StatusCause {
                reason: Some("ResourceVersionTooLarge".into()),
                message: Some("Too large resource version".into()),
                field: None,
            }]),
            retry_after_seconds: Some(1),
            ..Default::default()
        }));
        e
    }

    fn status(&self) -> metav1::Status {
        metav1::Status {
            code: Some(i32::from(self.code)),
            message: Some(self.message.clone()),
            reason: Some(self.reason.clone()),
            status: Some("Failure".into()),
            details: self.details.as_deref().cloned(),
            ..metav1::Status::default()
        }
    }

    fn response(&self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut r = json(code, &self.status());
        if let Some(secs) = self.retry_after {
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        r
    }
}

/// A parsed query string.
#[derive(Debug, Default)]
struct Query(HashMap<String, String>);

impl Query {
    fn parse(query: Option<&str>) -> Query {
        Query(
            form_urlencoded::parse(query.unwrap_or_default().as_bytes())
                .into_owned()
                .collect(),
        )
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    fn flag(&self, key: &str) -> bool {
        matches!(self.get(key), Some("true" | "1"))
    }
}

#[derive(Debug, Clone)]
enum LabelReq {
    Eq(String, String),
    NotEq(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Name,
    Namespace,
    NodeName,
    Phase,
    Unschedulable,
}

#[derive(Debug, Clone)]
struct FieldReq {
    field: Field,
    value: String,
    negate: bool,
}

/// A request's `labelSelector` and `fieldSelector`.
#[derive(Debug, Clone, Default)]
struct Selectors {
    labels: Vec<LabelReq>,
    fields: Vec<FieldReq>,
}

impl Selectors {
    fn parse(kind: Kind, q: &Query) -> Result<Selectors, ApiError> {
        let mut s = Selectors::default();
        for term in split_top_level(q.get("labelSelector").unwrap_or_default()) {
            s.labels.push(parse_label_req(term)?);
        }
        for term in split_top_level(q.get("fieldSelector").unwrap_or_default()) {
            s.fields.push(parse_field_req(kind, term)?);
        }
        Ok(s)
    }

    fn matches(&self, key: &Key, obj: &Obj) -> bool {
        let label = |k: &str| {
            obj.labels
                .iter()
                .find(|(lk, _)| lk == k)
                .map(|(_, v)| v.as_str())
        };
        let labels_ok = self.labels.iter().all(|r| match r {
            LabelReq::Eq(k, v) => label(k) == Some(v.as_str()),
            LabelReq::NotEq(k, v) => label(k) != Some(v.as_str()),
            LabelReq::In(k, vs) => label(k).is_some_and(|l| vs.iter().any(|v| v == l)),
            LabelReq::NotIn(k, vs) => !label(k).is_some_and(|l| vs.iter().any(|v| v == l)),
            LabelReq::Exists(k) => label(k).is_some(),
            LabelReq::NotExists(k) => label(k).is_none(),
        });
        labels_ok
            && self.fields.iter().all(|r| {
                let value = match r.field {
                    Field::Name => key.1.as_str(),
                    Field::Namespace => key.0.as_str(),
                    Field::NodeName => obj.fields.node_name.as_deref().unwrap_or_default(),
                    Field::Phase => obj.fields.phase.as_deref().unwrap_or_default(),
                    Field::Unschedulable => {
                        if obj.fields.unschedulable {
                            "true"
                        } else {
                            "false"
                        }
                    }
                };
                (value == r.value) != r.negate
            })
    }
}

/// Splits a selector on commas outside parentheses; drops empty terms.
fn split_top_level(s: &str) -> Vec<&str> {
    let mut terms = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                terms.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    terms.push(&s[start..]);
    terms
        .into_iter()
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .collect()
}

fn label_key_ok(k: &str) -> bool {
    !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

fn label_value_ok(v: &str) -> bool {
    v.chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

fn parse_label_req(term: &str) -> Result<LabelReq, ApiError> {
    let bad = || ApiError::bad_request(format!("unable to parse requirement: {term:?}"));
    let checked = |k: &str, v: &str| {
        let (k, v) = (k.trim(), v.trim());
        if label_key_ok(k) && label_value_ok(v) {
            Ok((k.to_string(), v.to_string()))
        } else {
            Err(bad())
        }
    };
    if let Some(k) = term.strip_prefix('!') {
        let k = k.trim();
        return if label_key_ok(k) {
            Ok(LabelReq::NotExists(k.into()))
        } else {
            Err(bad())
        };
    }
    if let Some(open) = term.find('(') {
        let inner = term[open + 1..].strip_suffix(')').ok_or_else(bad)?;
        let mut head = term[..open].split_whitespace();
        let (Some(key), Some(op), None) = (head.next(), head.next(), head.next()) else {
            return Err(bad());
        };
        let values: Vec<String> = inner
            .split(',')
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
            .collect();
        if !label_key_ok(key) || values.is_empty() || !values.iter().all(|v| label_value_ok(v)) {
            return Err(bad());
        }
        return match op {
            "in" => Ok(LabelReq::In(key.into(), values)),
            "notin" => Ok(LabelReq::NotIn(key.into(), values)),
            _ => Err(bad()),
        };
    }
    if let Some((k, v)) = term.split_once("!=") {
        let (k, v) = checked(k, v)?;
        return Ok(LabelReq::NotEq(k, v));
    }
    if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
        let (k, v) = checked(k, v)?;
        return Ok(LabelReq::Eq(k, v));
    }
    if label_key_ok(term) {
        Ok(LabelReq::Exists(term.into()))
    } else {
        Err(bad())
    }
}

fn parse_field_req(kind: Kind, term: &str) -> Result<FieldReq, ApiError> {
    let (name, value, negate) = if let Some((k, v)) = term.split_once("!=") {
        (k, v, true)
    } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
        (k, v, false)
    } else {
        return Err(ApiError::bad_request(format!(
            "invalid selector: '{term}'; can't understand '{term}'"
        )));
    };
    let field = match (kind, name.trim()) {
        (_, "metadata.name") => Field::Name,
        (_, "metadata.namespace") => Field::Namespace,
        (Kind::Pods, "spec.nodeName") => Field::NodeName,
        (Kind::Pods, "status.phase") => Field::Phase,
        (Kind::Nodes, "spec.unschedulable") => Field::Unschedulable,
        (_, other) => {
            return Err(ApiError::bad_request(format!(
                "field label not supported: {other}"
            )));
        }
    };
    Ok(FieldReq {
        field,
        value: value.trim().to_string(),
        negate,
    })
}

/// The continue token: the snapshot's resource version and the last key returned, as the real
/// server's (which base64-encodes JSON; this one hex-encodes it).
fn encode_continue(rv: u64, key: &Key) -> String {
    let token = json!({"v": "meta.k8s.io/v1", "rv": rv, "start": format!("{}/{}", key.0, key.1)});
    token
        .to_string()
        .bytes()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn decode_continue(token: &str) -> Option<(u64, Key)> {
    if !token.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Vec<u8> = (0..token.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(token.get(i..i + 2)?, 16).ok())
        .collect::<Option<_>>()?;
    let v: Value = serde_json::from_slice(&bytes).ok()?;
    let rv = v.get("rv")?.as_u64()?;
    let (ns, name) = v.get("start")?.as_str()?.split_once('/')?;
    Some((rv, (ns.to_string(), name.to_string())))
}

// ---------------------------------------------------------------------------------------------
// The server

/// A running stand-in; stops when dropped (its watch streams end, its churn tasks stop).
pub struct ApiServer {
    pub url: String,
    pub addr: SocketAddr,
    state: Shared,
    /// TokenReview and SubjectAccessReview (see the "Authentication and authorization" section).
    reviews: ReviewsShared,
    task: tokio::task::JoinHandle<()>,
    background: Mutex<Vec<tokio::task::AbortHandle>>,
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.task.abort();
        for task in self
            .background
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
        {
            task.abort();
        }
        self.state().drop_watches();
    }
}

/// Starts a stand-in with no objects, on 127.0.0.1 with the default [`Options`].
pub async fn start() -> ApiServer {
    start_with(Options::default()).await
}

/// Starts a stand-in with `options`.
pub async fn start_with(options: Options) -> ApiServer {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let state = Arc::new(Mutex::new(ClusterState::new(&options)));
    let listener = tokio::net::TcpListener::bind(options.listen)
        .await
        .unwrap_or_else(|e| panic!("bind {}: {e}", options.listen));
    let addr = listener.local_addr().unwrap();
    let url = format!("http://{addr}");
    let reviews = ReviewsShared::default();
    let app = with_reviews(router(state.clone()), reviews.clone());
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    ApiServer {
        url,
        addr,
        state,
        reviews,
        task,
        background: Mutex::default(),
    }
}

impl ApiServer {
    /// A kube config for this server: plain HTTP, no credentials, and kube's default retry of
    /// 429/503/504 turned off so that an injected fault answers at once (that policy backs off
    /// from 5 ms for up to 15 attempts).
    pub fn config(&self) -> kube::Config {
        let mut config = kube::Config::new(self.url.parse().unwrap());
        config.default_retry = false;
        config
    }

    /// A client for this server (see [`ApiServer::config`]).
    pub fn client(&self) -> kube::Client {
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        kube::Client::try_from(self.config()).unwrap()
    }

    /// A client with kube's defaults, retries included.
    pub fn client_with_default_retry(&self) -> kube::Client {
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        let mut config = self.config();
        config.default_retry = true;
        kube::Client::try_from(config).unwrap()
    }

    /// A kubeconfig for this server (cluster `stand-in`, no credentials).
    pub fn kubeconfig_yaml(&self) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: stand-in\n  cluster:\n    server: {}\ncontexts:\n- name: stand-in\n  context:\n    cluster: stand-in\n    user: nobody\ncurrent-context: stand-in\nusers:\n- name: nobody\n  user: {{}}\n",
            self.url
        )
    }

    /// Writes [`ApiServer::kubeconfig_yaml`] to `path`.
    pub fn write_kubeconfig(&self, path: &Path) -> std::io::Result<()> {
        std::fs::write(path, self.kubeconfig_yaml())
    }

    /// Direct access to the state, e.g. for several changes at once.
    pub fn state(&self) -> MutexGuard<'_, ClusterState> {
        lock(&self.state)
    }

    /// Makes the nodes exactly `nodes` (deleting the others).
    pub fn set_nodes(&self, nodes: Vec<Node>) {
        self.state().replace_all(&nodes);
    }

    /// Makes the node metrics exactly `metrics`.
    pub fn set_node_metrics(&self, metrics: Vec<NodeMetrics>) {
        self.state().replace_all(&metrics);
    }

    /// See [`ClusterState::step_node_metrics`].
    pub fn step_node_metrics(&self, step: u64, at: SystemTime) -> usize {
        self.state().step_node_metrics(step, at)
    }

    /// Makes the pod metrics exactly `metrics`.
    pub fn set_pod_metrics(&self, metrics: Vec<PodMetrics>) {
        self.state().replace_all(&metrics);
    }

    /// See [`ClusterState::upsert`].
    pub fn upsert<K: Resource + Serialize>(&self, obj: &K) -> u64 {
        self.state().upsert(obj)
    }

    /// See [`ClusterState::upsert_json`].
    pub fn upsert_json(&self, kind: Kind, obj: Value) -> u64 {
        self.state().upsert_json(kind, obj)
    }

    /// See [`ClusterState::delete`].
    pub fn delete<K: Resource>(&self, namespace: &str, name: &str) -> bool {
        self.state().delete::<K>(namespace, name)
    }

    pub fn delete_kind(&self, kind: Kind, namespace: &str, name: &str) -> bool {
        self.state().delete_kind(kind, namespace, name)
    }

    /// See [`ClusterState::get`].
    pub fn get<K: Resource + DeserializeOwned>(&self, namespace: &str, name: &str) -> Option<K> {
        self.state().get(namespace, name)
    }

    /// See [`ClusterState::objects`].
    pub fn objects<K: Resource + DeserializeOwned>(&self) -> Vec<K> {
        self.state().objects()
    }

    pub fn count(&self, kind: Kind) -> usize {
        self.state().count(kind)
    }

    /// See [`ClusterState::versions`].
    pub fn versions(&self, kind: Kind) -> Vec<(String, String, u64)> {
        self.state().versions(kind)
    }

    /// The current global resource version.
    pub fn resource_version(&self) -> u64 {
        self.state().resource_version
    }

    /// See [`ClusterState::compact`].
    pub fn compact(&self) {
        self.state().compact();
    }

    /// See [`ClusterState::drop_watches`].
    pub fn drop_watches(&self) {
        self.state().drop_watches();
    }

    /// Answers the next requests of `verb` on `kind` with `faults`, one each, in order.
    pub fn fail_in_turn(&self, kind: Kind, verb: Verb, faults: Vec<Fault>) {
        self.state()
            .fault_queues
            .insert((kind, verb), faults.into());
    }

    /// See [`ClusterState::cut_watches`].
    pub fn cut_watches(&self) {
        self.state().cut_watches();
    }

    /// Every request so far with the time it came.
    pub fn timed_requests(&self) -> Vec<(Instant, Logged)> {
        let st = self.state();
        st.request_times
            .iter()
            .copied()
            .zip(st.requests.iter().cloned())
            .collect()
    }

    /// Watch streams open now.
    pub fn open_watches(&self) -> usize {
        self.state().open_watches.load(Ordering::SeqCst)
    }

    /// Bookmark interval, counted from each watch's last bookmark (or its start), open ones
    /// included: once this returns, no watch sends a bookmark before the new interval has
    /// passed (a longer interval holds back bookmarks at once; a shorter one applies from each
    /// watch's next wake-up).
    pub fn set_bookmark_interval(&self, interval: Duration) {
        self.state().bookmark_interval = interval;
    }

    /// See [`ClusterState::set_history_limit`].
    pub fn set_history_limit(&self, limit: usize) {
        self.state().set_history_limit(limit);
    }

    /// Makes every verb of `kind` answer with `fault` until [`ApiServer::heal`] (or
    /// `fault.times` requests).
    pub fn fail(&self, kind: Kind, fault: Fault) {
        self.state().faults.insert(kind, fault);
    }

    /// Makes one verb of `kind` answer with `fault`.
    pub fn fail_verb(&self, kind: Kind, verb: Verb, fault: Fault) {
        self.state().verb_faults.insert((kind, verb), fault);
    }

    /// Makes every LIST of `kind` answer 200 with `body` as it is (`None`: normal answers).
    pub fn set_raw_list(&self, kind: Kind, body: Option<&str>) {
        let mut st = self.state();
        match body {
            Some(b) => st.raw_lists.insert(kind, b.to_string()),
            None => st.raw_lists.remove(&kind),
        };
    }

    /// Removes the faults of `kind`, all verbs.
    pub fn heal(&self, kind: Kind) {
        let mut st = self.state();
        st.faults.remove(&kind);
        st.verb_faults.retain(|(k, _), _| *k != kind);
        st.fault_queues.retain(|(k, _), _| *k != kind);
    }

    /// Makes `/readyz`, `/livez` and `/healthz` answer `ok` (true) or 500 (false).
    pub fn set_healthy(&self, healthy: bool) {
        self.state().healthy = healthy;
    }

    /// Delays every resource request by `latency`.
    pub fn set_latency(&self, latency: Duration) {
        self.state().latency = latency;
    }

    /// Delays requests for `kind` by `latency` (instead of the global latency).
    pub fn set_kind_latency(&self, kind: Kind, latency: Duration) {
        self.state().kind_latency.insert(kind, latency);
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Logged> {
        self.state().requests.clone()
    }

    pub fn clear_requests(&self) {
        let mut st = self.state();
        st.requests.clear();
        st.request_times.clear();
    }

    /// The metrics.k8s.io (NodeMetrics, PodMetrics) LIST answers sent to their last byte so far:
    /// how a bench knows that a fetch's answer is out, and how large it was.
    pub fn answered(&self) -> Vec<Answered> {
        self.state().answered.clone()
    }

    /// How many requests went to `path`.
    pub fn hits(&self, path: &str) -> usize {
        self.state()
            .requests
            .iter()
            .filter(|r| r.path == path)
            .count()
    }

    /// See [`ClusterState::generate`].
    pub fn generate(&self, nodes: usize, pods_per_node: usize) -> Generated {
        self.state().generate(nodes, pods_per_node)
    }

    /// See [`ClusterState::generate_with`].
    pub fn generate_with(&self, options: &GenerateOptions) -> Generated {
        self.state().generate_with(options)
    }

    /// Modifies random pods (container restarts, phase flips between Running and Pending) at
    /// `per_second` for `duration`, in the background; the task answers how many changes it made.
    /// Stops early when the server is dropped.
    pub fn churn(&self, per_second: f64, duration: Duration) -> tokio::task::JoinHandle<usize> {
        let state = self.state.clone();
        let task = tokio::spawn(churn_task(state, per_second, duration));
        self.background
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(task.abort_handle());
        task
    }

    /// Pod churn with creations and deletions as well as updates (see [`ChurnOptions`]), in the
    /// background; the task answers what it did. Stops early when the server is dropped.
    pub fn churn_with(&self, options: ChurnOptions) -> tokio::task::JoinHandle<ChurnCounts> {
        let state = self.state.clone();
        let task = tokio::spawn(churn_mixed_task(state, options));
        self.background
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(task.abort_handle());
        task
    }

    /// Makes every watcher relist everything, as after an etcd compaction it fell behind:
    /// compacts the history and ends every open watch under one lock, so each watcher resumes
    /// from a resource version older than the compaction point, gets 410 Gone (`Expired`) and
    /// starts over with a full LIST. Answers the compaction's resource version.
    pub fn force_relist(&self) -> u64 {
        let mut st = self.state();
        st.compact();
        st.drop_watches();
        st.resource_version
    }
}

pub const NODES_PATH: &str = "/api/v1/nodes";
pub const PODS_PATH: &str = "/api/v1/pods";
pub const NODE_METRICS_PATH: &str = "/apis/metrics.k8s.io/v1beta1/nodes";
pub const POD_METRICS_PATH: &str = "/apis/metrics.k8s.io/v1beta1/pods";

/// The stand-in's routes: discovery explicitly, resources by parsing the path.
fn router(state: Shared) -> Router {
    let mut app = Router::new()
        .route("/version", get(version))
        .route("/api", get(core_versions))
        .route("/apis", get(groups))
        .route("/readyz", get(health))
        .route("/livez", get(health))
        .route("/healthz", get(health));
    let mut group_versions: Vec<String> = KINDS.iter().map(group_version_path).collect();
    group_versions.sort();
    group_versions.dedup();
    for path in group_versions {
        app = app.route(&path, get(group_resources));
    }
    app.fallback(resource).with_state(state)
}

fn json<T: serde::Serialize>(code: StatusCode, body: &T) -> Response {
    json_bytes(code, serde_json::to_vec(body).unwrap())
}

fn json_bytes(code: StatusCode, body: impl Into<Body>) -> Response {
    (
        code,
        [(header::CONTENT_TYPE, "application/json")],
        body.into(),
    )
        .into_response()
}

/// A `Status` answer (`kind: Status`, `apiVersion: v1`, `status: Failure`).
fn status(code: u16, reason: &str, message: &str) -> Response {
    ApiError::new(code, reason, message).response()
}

/// Where a resource request goes.
#[derive(Debug, Clone)]
struct Route {
    kind: Kind,
    namespace: Option<String>,
    name: Option<String>,
}

fn parse_route(path: &str) -> Option<Route> {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest) = match segments.as_slice() {
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return None,
    };
    let (namespace, plural, name) = match rest {
        [plural] => (None, *plural, None),
        [plural, name] => (None, *plural, Some(*name)),
        ["namespaces", ns, plural] => (Some(*ns), *plural, None),
        ["namespaces", ns, plural, name] => (Some(*ns), *plural, Some(*name)),
        _ => return None,
    };
    let kind = Kind::ALL.into_iter().find(|k| {
        let info = k.info();
        info.group == group && info.version == version && info.plural == plural
    })?;
    let info = kind.info();
    let scoped_right = !matches!(
        (info.namespaced, namespace, name),
        (false, Some(_), _) | (true, None, Some(_))
    );
    if !scoped_right || [namespace, name].iter().flatten().any(|s| s.is_empty()) {
        return None;
    }
    Some(Route {
        kind,
        namespace: namespace.map(str::to_string),
        name: name.map(str::to_string),
    })
}

fn verb_of(method: &Method, route: &Route, q: &Query) -> Option<Verb> {
    let named = route.name.is_some();
    let verb = match *method {
        Method::GET if named => Verb::Get,
        Method::GET if q.flag("watch") => Verb::Watch,
        Method::GET => Verb::List,
        Method::POST if !named => Verb::Create,
        Method::PUT if named => Verb::Update,
        Method::PATCH if named => Verb::Patch,
        Method::DELETE if named => Verb::Delete,
        _ => return None,
    };
    let read_only = route.kind.info().metrics;
    (!read_only || matches!(verb, Verb::Get | Verb::List)).then_some(verb)
}

/// Every request for a resource: logged, then faults, latency, and the verb.
async fn resource(
    State(state): State<Shared>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let query = Query::parse(uri.query());
    let decided = {
        let mut st = lock(&state);
        st.log(&method, &uri);
        decide(&mut st, &method, &uri, &query)
    };
    let (route, verb, delay) = match decided {
        Ok(d) => d,
        Err(e) => return e.response(),
    };
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    if verb == Verb::List {
        let raw = lock(&state).raw_lists.get(&route.kind).cloned();
        if let Some(raw) = raw {
            return json_bytes(StatusCode::OK, raw);
        }
    }
    let result = match verb {
        Verb::Watch => return start_watch(&state, route, &query),
        Verb::List => return list(&state, &route, &query),
        Verb::Get => get_one(&state, &route),
        Verb::Create | Verb::Update | Verb::Patch => {
            write_request(&mut lock(&state), &route, verb, &headers, &body)
        }
        Verb::Delete => {
            let ns = route.namespace.as_deref().unwrap_or_default();
            let name = route.name.as_deref().unwrap_or_default();
            lock(&state)
                .remove(route.kind, ns, name)
                .map(|o| (StatusCode::OK, o))
                .ok_or_else(|| ApiError::not_found(route.kind, name))
        }
    };
    match result {
        Ok((code, obj)) => {
            let mut body = Vec::with_capacity(obj.json.len() + 64);
            push_object(&mut body, route.kind, &obj.json);
            json_bytes(code, body)
        }
        Err(e) => e.response(),
    }
}

fn decide(
    st: &mut ClusterState,
    method: &Method,
    uri: &Uri,
    query: &Query,
) -> Result<(Route, Verb, Duration), ApiError> {
    let Some(route) = parse_route(uri.path()) else {
        return Err(ApiError::new(
            404,
            "NotFound",
            format!(
                "the server could not find the requested resource ({})",
                uri.path()
            ),
        ));
    };
    let verb = verb_of(method, &route, query).ok_or_else(ApiError::method_not_allowed)?;
    if let Some(e) = st.take_fault(route.kind, verb) {
        return Err(e);
    }
    let delay = st
        .kind_latency
        .get(&route.kind)
        .copied()
        .unwrap_or(st.latency);
    Ok((route, verb, delay))
}

fn list(state: &Shared, route: &Route, q: &Query) -> Response {
    let parts = match lock(state).list_parts(route, q) {
        Ok(p) => p,
        Err(e) => return e.response(),
    };
    let info = route.kind.info();
    let meta = metav1::ListMeta {
        resource_version: Some(parts.resource_version.to_string()),
        continue_: parts.continue_token,
        ..Default::default()
    };
    let head = format!(
        r#"{{"kind":"{}","apiVersion":"{}","metadata":{},"items":["#,
        info.list_kind,
        info.api_version,
        serde_json::to_string(&meta).unwrap()
    );
    let size = head.len() + parts.items.iter().map(|i| i.len() + 1).sum::<usize>() + 2;
    let mut body = Vec::with_capacity(size);
    body.extend_from_slice(head.as_bytes());
    for (i, item) in parts.items.iter().enumerate() {
        if i > 0 {
            body.push(b',');
        }
        body.extend_from_slice(item);
    }
    body.extend_from_slice(b"]}");
    if !info.metrics {
        return json_bytes(StatusCode::OK, body);
    }
    let (state, path) = (state.clone(), route_path(route));
    let answer = Answer::new(Bytes::from(body), move |bytes| {
        lock(&state).answered.push(Answered {
            path,
            bytes,
            at: Instant::now(),
        });
    });
    json_bytes(StatusCode::OK, Body::new(answer))
}

/// The path a route was asked at (without the query).
fn route_path(route: &Route) -> String {
    match &route.namespace {
        Some(ns) => route.kind.namespaced_path(ns),
        None => route.kind.path(),
    }
}

/// A whole answer handed to the server in pieces, with its exact length (so it keeps its
/// `Content-Length`), that calls `on_end` with that length once the server has taken the last
/// piece: the moment the answer is out, short of the last piece and the socket's buffers.
struct Answer {
    rest: Bytes,
    len: usize,
    on_end: Option<Box<dyn FnOnce(usize) + Send>>,
}

impl Answer {
    /// Pieces of 256 KiB: the server asks for the next once it has room for it.
    const PIECE: usize = 256 << 10;

    fn new(body: Bytes, on_end: impl FnOnce(usize) + Send + 'static) -> Answer {
        Answer {
            len: body.len(),
            rest: body,
            on_end: Some(Box::new(on_end)),
        }
    }
}

impl http_body::Body for Answer {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        let n = self.rest.len().min(Self::PIECE);
        let piece = self.rest.split_to(n);
        // hyper stops asking once it has the length it announced: the last piece is the end.
        if self.rest.is_empty()
            && let Some(on_end) = self.on_end.take()
        {
            on_end(self.len);
        }
        if piece.is_empty() {
            return std::task::Poll::Ready(None);
        }
        std::task::Poll::Ready(Some(Ok(http_body::Frame::data(piece))))
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_empty()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.rest.len() as u64)
    }
}

fn get_one(state: &Shared, route: &Route) -> Result<(StatusCode, Arc<Obj>), ApiError> {
    let name = route.name.clone().unwrap_or_default();
    let key = (route.namespace.clone().unwrap_or_default(), name);
    lock(state)
        .store(route.kind)
        .objects
        .get(&key)
        .map(|o| (StatusCode::OK, o.clone()))
        .ok_or_else(|| ApiError::not_found(route.kind, &key.1))
}

fn write_request(
    st: &mut ClusterState,
    route: &Route,
    verb: Verb,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<(StatusCode, Arc<Obj>), ApiError> {
    let kind = route.kind;
    let ns = route.namespace.as_deref();
    let mut v: Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!("couldn't get version/kind; json parse error: {e}"))
    })?;
    let url_name = route.name.as_deref().unwrap_or_default();
    match verb {
        Verb::Create => st
            .write(kind, v, WriteMode::Create, ns)
            .map(|o| (StatusCode::CREATED, o)),
        Verb::Update => {
            let body_name = v.pointer("/metadata/name").and_then(Value::as_str);
            match body_name {
                Some(n) if !n.is_empty() && n != url_name => {
                    return Err(ApiError::bad_request(format!(
                        "the name of the object ({n}) does not match the name on the URL ({url_name})"
                    )));
                }
                Some(n) if !n.is_empty() => {}
                _ => v["metadata"]["name"] = url_name.into(),
            }
            let expected = match v
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
            {
                None => None,
                Some(s) => Some(s.parse::<u64>().map_err(|_| {
                    ApiError::bad_request(format!("metadata.resourceVersion: Invalid value: {s:?}"))
                })?),
            };
            st.write(kind, v, WriteMode::Update { expected }, ns)
                .map(|o| (StatusCode::OK, o))
        }
        _ => {
            let content_type = headers
                .get(header::CONTENT_TYPE)
                .and_then(|h| h.to_str().ok())
                .unwrap_or_default();
            let apply = content_type.starts_with("application/apply-patch");
            let merge = content_type.starts_with("application/merge-patch+json")
                || content_type.starts_with("application/strategic-merge-patch+json");
            if !apply && !merge {
                return Err(ApiError::new(
                    415,
                    "UnsupportedMediaType",
                    format!(
                        "the body of the request was in an unknown format ({content_type}) - accepted media types include: application/merge-patch+json, application/strategic-merge-patch+json, application/apply-patch+yaml"
                    ),
                ));
            }
            let key = (ns.unwrap_or_default().to_string(), url_name.to_string());
            let Some(current) = st.store(kind).objects.get(&key).cloned() else {
                if apply {
                    v["metadata"]["name"] = url_name.into();
                    return st
                        .write(kind, v, WriteMode::Create, ns)
                        .map(|o| (StatusCode::CREATED, o));
                }
                return Err(ApiError::not_found(kind, url_name));
            };
            if let Some(want) = v
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                && want != current.rv.to_string()
            {
                return Err(ApiError::conflict(kind, url_name));
            }
            let mut merged: Value = serde_json::from_slice(&current.json).unwrap();
            merge_patch(&mut merged, &v);
            merged["metadata"]["name"] = url_name.into();
            st.write(kind, merged, WriteMode::Update { expected: None }, ns)
                .map(|o| (StatusCode::OK, o))
        }
    }
}

/// RFC 7386 JSON merge patch.
fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    let target = target.as_object_mut().unwrap();
    for (k, v) in patch {
        if v.is_null() {
            target.remove(k);
        } else {
            merge_patch(target.entry(k.clone()).or_insert(Value::Null), v);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Watch

/// Counts an open watch stream while it lives.
struct OpenWatch(Arc<AtomicUsize>);

impl Drop for OpenWatch {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// One open watch stream.
struct WatchCursor {
    state: Shared,
    kind: Kind,
    namespace: Option<String>,
    selectors: Selectors,
    /// Every event of the kind up to here has been considered.
    last_rv: u64,
    bookmarks: bool,
    /// The last bookmark (or the start): the next is due the bookmark interval after it, as
    /// the interval is when it comes due (see [`ApiServer::set_bookmark_interval`]).
    bookmark_armed: Instant,
    deadline: Instant,
    rv_rx: watch::Receiver<u64>,
    epoch_rx: watch::Receiver<u64>,
    pending: VecDeque<Bytes>,
    finished: bool,
    cut_epoch: Arc<AtomicU64>,
    /// The stream was cut: its next item is the body error.
    cut: bool,
    _open: OpenWatch,
}

/// Default server-side watch timeout when the client sets none (the real one: 30–60 min).
const DEFAULT_WATCH_TIMEOUT: Duration = Duration::from_secs(1800);
/// Chunk size for a watch's initial events.
const INITIAL_CHUNK: usize = 1 << 20;

fn start_watch(state: &Shared, route: Route, q: &Query) -> Response {
    let st = lock(state);
    let kind = route.kind;
    let selectors = match Selectors::parse(kind, q) {
        Ok(s) => s,
        Err(e) => return e.response(),
    };
    let timeout = match q.get("timeoutSeconds").filter(|s| !s.is_empty()) {
        None => DEFAULT_WATCH_TIMEOUT,
        Some(s) => match s.parse::<u64>() {
            Ok(0) => DEFAULT_WATCH_TIMEOUT,
            Ok(secs) => Duration::from_secs(secs),
            Err(_) => {
                return ApiError::bad_request(format!("invalid timeoutSeconds: {s:?}")).response();
            }
        },
    };
    let rv = q.get("resourceVersion").filter(|s| !s.is_empty());
    let start_rv = match rv {
        None | Some("0") => None,
        Some(r) => match r.parse::<u64>() {
            Ok(x) => Some(x),
            Err(_) => {
                return ApiError::bad_request(format!("resourceVersion: Invalid value: {r:?}"))
                    .response();
            }
        },
    };
    let bookmarks = q.flag("allowWatchBookmarks");
    let open = st.open_watches.clone();
    open.fetch_add(1, Ordering::SeqCst);
    let now = Instant::now();
    let mut epoch_rx = st.epoch_tx.subscribe();
    epoch_rx.borrow_and_update();
    let mut cursor = WatchCursor {
        state: state.clone(),
        kind,
        namespace: route.namespace,
        selectors,
        last_rv: st.resource_version,
        bookmarks,
        bookmark_armed: now,
        deadline: now + timeout,
        rv_rx: st.rv_tx.subscribe(),
        epoch_rx,
        pending: VecDeque::new(),
        finished: false,
        cut_epoch: st.cut_epoch.clone(),
        cut: false,
        _open: OpenWatch(open),
    };
    match start_rv {
        Some(x) if x < st.store(kind).compacted => {
            let message = format!(
                "too old resource version: {x} ({})",
                st.store(kind).compacted
            );
            cursor
                .pending
                .push_back(error_line(&ApiError::expired(message)).into());
            cursor.finished = true;
        }
        Some(x) => cursor.last_rv = x,
        None => {
            // Unset or "0": the current state as synthetic ADDED events first.
            let mut chunk = Vec::new();
            st.visit(
                kind,
                st.resource_version,
                None,
                cursor.namespace.as_deref(),
                |key, obj| {
                    if cursor.selectors.matches(key, obj) {
                        push_event(&mut chunk, "ADDED", kind, &obj.json);
                        if chunk.len() >= INITIAL_CHUNK {
                            cursor.pending.push_back(std::mem::take(&mut chunk).into());
                        }
                    }
                    ControlFlow::Continue(())
                },
            );
            if q.flag("sendInitialEvents") && bookmarks {
                push_bookmark(&mut chunk, kind, st.resource_version, true);
            }
            if !chunk.is_empty() {
                cursor.pending.push_back(chunk.into());
            }
        }
    }
    drop(st);
    let stream = futures_util::stream::unfold(cursor, |mut c| async move {
        if c.cut {
            if c.finished {
                return None;
            }
            c.finished = true;
            return Some((Err(std::io::Error::other("watch cut mid-event")), c));
        }
        let chunk = c.next_chunk().await?;
        Some((Ok::<Bytes, std::io::Error>(chunk), c))
    });
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from_stream(stream))
        .unwrap()
}

impl WatchCursor {
    /// The next chunk of event lines, or `None` to end the stream.
    async fn next_chunk(&mut self) -> Option<Bytes> {
        loop {
            if let Some(chunk) = self.pending.pop_front() {
                return Some(chunk);
            }
            if self.dropped() {
                return self.ended();
            }
            if self.finished || Instant::now() >= self.deadline {
                return None;
            }
            self.rv_rx.borrow_and_update();
            let state = self.state.clone();
            let (out, bookmark_at) = {
                let st = lock(&state);
                // Checked under the lock `drop_watches` takes: a stream open before it never
                // carries an event written after it (without this, a write racing the drop
                // could still go out on the old stream).
                if self.dropped() {
                    return self.ended();
                }
                (self.drain(&st), self.bookmark_armed + st.bookmark_interval)
            };
            if !out.is_empty() {
                return Some(out.into());
            }
            if self.finished {
                continue;
            }
            tokio::select! {
                changed = self.rv_rx.changed() => {
                    if changed.is_err() {
                        return None;
                    }
                }
                _ = self.epoch_rx.changed() => return self.ended(),
                _ = tokio::time::sleep_until(self.deadline) => return None,
                _ = tokio::time::sleep_until(bookmark_at), if self.bookmarks => {
                    let state = self.state.clone();
                    let out = {
                        let st = lock(&state);
                        if self.dropped() {
                            return self.ended();
                        }
                        let mut out = self.drain(&st);
                        // Due by the interval as it is now: `set_bookmark_interval` may have
                        // lengthened it while this timer ran.
                        let now = Instant::now();
                        if now >= self.bookmark_armed + st.bookmark_interval {
                            if out.is_empty() && !self.finished {
                                self.last_rv = self.last_rv.max(st.resource_version);
                                push_bookmark(&mut out, self.kind, st.resource_version, false);
                            }
                            self.bookmark_armed = now;
                        }
                        out
                    };
                    if !out.is_empty() {
                        return Some(out.into());
                    }
                }
            }
        }
    }

    /// How a stream ends once [`Self::dropped`]: cleanly, or after `cut_watches` with half an
    /// event line followed by a body error.
    fn ended(&mut self) -> Option<Bytes> {
        let epoch = *self.epoch_rx.borrow();
        if !self.cut && !self.finished && epoch == self.cut_epoch.load(Ordering::SeqCst) {
            self.cut = true;
            return Some(Bytes::from_static(
                b"{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"na",
            ));
        }
        None
    }

    /// Whether [`ClusterState::drop_watches`] ended this stream (or the server is gone).
    fn dropped(&self) -> bool {
        self.epoch_rx.has_changed().unwrap_or(true)
    }

    /// The lines for the events newer than `last_rv`, or the 410 if some were dropped from the
    /// history before this watch saw them.
    fn drain(&mut self, st: &ClusterState) -> Vec<u8> {
        let store = st.store(self.kind);
        let mut out = Vec::new();
        if self.last_rv < store.evicted {
            let message = format!(
                "too old resource version: {} ({})",
                self.last_rv, store.compacted
            );
            self.finished = true;
            return error_line(&ApiError::expired(message));
        }
        let newer = store.history.partition_point(|e| e.rv <= self.last_rv);
        for e in store.history.range(newer..) {
            self.last_rv = e.rv;
            if let Some(ns) = &self.namespace
                && &e.key.0 != ns
            {
                continue;
            }
            let now = self.selectors.matches(&e.key, &e.obj);
            let ty = match e.ty {
                EventType::Added => now.then_some("ADDED"),
                EventType::Deleted => now.then_some("DELETED"),
                EventType::Modified => {
                    let before = e
                        .prev
                        .as_ref()
                        .is_some_and(|p| self.selectors.matches(&e.key, p));
                    match (before, now) {
                        (true, true) => Some("MODIFIED"),
                        (false, true) => Some("ADDED"),
                        (true, false) => Some("DELETED"),
                        (false, false) => None,
                    }
                }
            };
            if let Some(ty) = ty {
                push_event(&mut out, ty, self.kind, &e.obj.json);
            }
        }
        out
    }
}

/// One watch event line for a stored object.
fn push_event(out: &mut Vec<u8>, ty: &str, kind: Kind, stored: &[u8]) {
    out.extend_from_slice(br#"{"type":""#);
    out.extend_from_slice(ty.as_bytes());
    out.extend_from_slice(br#"","object":"#);
    push_object(out, kind, stored);
    out.extend_from_slice(b"}\n");
}

/// One watch event line for a complete object (a bookmark, a `Status`).
fn push_raw_event(out: &mut Vec<u8>, ty: &str, object: &[u8]) {
    out.extend_from_slice(br#"{"type":""#);
    out.extend_from_slice(ty.as_bytes());
    out.extend_from_slice(br#"","object":"#);
    out.extend_from_slice(object);
    out.extend_from_slice(b"}\n");
}

fn push_bookmark(out: &mut Vec<u8>, kind: Kind, rv: u64, initial_events_end: bool) {
    let info = kind.info();
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if initial_events_end {
        metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    let object = json!({"kind": info.kind, "apiVersion": info.api_version, "metadata": metadata});
    push_raw_event(out, "BOOKMARK", object.to_string().as_bytes());
}

fn error_line(e: &ApiError) -> Vec<u8> {
    let mut out = Vec::new();
    push_raw_event(&mut out, "ERROR", &serde_json::to_vec(&e.status()).unwrap());
    out
}

// ---------------------------------------------------------------------------------------------
// Health and discovery

/// `/readyz`, `/livez`, `/healthz`: `ok`, or what the real server says when etcd is down.
async fn health(State(state): State<Shared>, method: Method, uri: Uri) -> Response {
    let healthy = {
        let mut st = lock(&state);
        st.log(&method, &uri);
        st.healthy
    };
    let text_plain = [(header::CONTENT_TYPE, "text/plain; charset=utf-8")];
    if healthy {
        (StatusCode::OK, text_plain, "ok").into_response()
    } else {
        let check = uri.path().trim_start_matches('/');
        let body = format!("[+]ping ok\n[-]etcd failed: reason withheld\n{check} check failed\n");
        (StatusCode::INTERNAL_SERVER_ERROR, text_plain, body).into_response()
    }
}

async fn version(State(state): State<Shared>, method: Method, uri: Uri) -> Response {
    lock(&state).log(&method, &uri);
    let info = k8s_openapi::apimachinery::pkg::version::Info {
        major: "1".into(),
        minor: "37".into(),
        git_version: "v1.37.0-stand-in".into(),
        platform: "linux/amd64".into(),
        ..Default::default()
    };
    json(StatusCode::OK, &info)
}

async fn core_versions(State(state): State<Shared>, method: Method, uri: Uri) -> Response {
    lock(&state).log(&method, &uri);
    let versions = metav1::APIVersions {
        versions: vec!["v1".into()],
        server_address_by_client_cidrs: Vec::new(),
    };
    json(StatusCode::OK, &versions)
}

async fn groups(State(state): State<Shared>, method: Method, uri: Uri) -> Response {
    lock(&state).log(&method, &uri);
    let mut groups: Vec<metav1::APIGroup> = Vec::new();
    for info in KINDS.iter().filter(|i| !i.group.is_empty()) {
        if groups.iter().any(|g| g.name == info.group) {
            continue;
        }
        let version = metav1::GroupVersionForDiscovery {
            group_version: info.api_version.into(),
            version: info.version.into(),
        };
        groups.push(metav1::APIGroup {
            name: info.group.into(),
            preferred_version: Some(version.clone()),
            server_address_by_client_cidrs: None,
            versions: vec![version],
        });
    }
    json(StatusCode::OK, &metav1::APIGroupList { groups })
}

async fn group_resources(State(state): State<Shared>, method: Method, uri: Uri) -> Response {
    lock(&state).log(&method, &uri);
    let resources = KINDS
        .iter()
        .filter(|info| group_version_path(info) == uri.path())
        .map(|info| {
            let verbs: &[&str] = if info.metrics {
                &["get", "list"]
            } else {
                &[
                    "create", "delete", "get", "list", "patch", "update", "watch",
                ]
            };
            metav1::APIResource {
                name: info.plural.into(),
                singular_name: info.singular.into(),
                kind: info.kind.into(),
                namespaced: info.namespaced,
                verbs: verbs.iter().map(|v| v.to_string()).collect(),
                ..Default::default()
            }
        })
        .collect();
    let group_version = uri
        .path()
        .trim_start_matches("/apis/")
        .trim_start_matches("/api/")
        .to_string();
    json(
        StatusCode::OK,
        &metav1::APIResourceList {
            group_version,
            resources,
        },
    )
}

// ---------------------------------------------------------------------------------------------
// Bulk generation and churn

/// What [`ClusterState::generate_with`] makes.
#[derive(Debug, Clone)]
pub struct GenerateOptions {
    pub nodes: usize,
    /// Pods on every node: one per addon DaemonSet (up to 4), the rest from Deployments.
    pub pods_per_node: usize,
    /// A NodeMetrics per node.
    pub node_metrics: bool,
    /// A PodMetrics per pod (about 300 bytes each).
    pub pod_metrics: bool,
    pub seed: u64,
}

impl GenerateOptions {
    pub fn new(nodes: usize, pods_per_node: usize) -> GenerateOptions {
        GenerateOptions {
            nodes,
            pods_per_node,
            node_metrics: true,
            pod_metrics: false,
            seed: 42,
        }
    }
}

/// What a generation made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Generated {
    pub nodes: usize,
    pub pods: usize,
    pub daemon_sets: usize,
    pub deployments: usize,
    pub replica_sets: usize,
    pub namespaces: usize,
    pub node_metrics: usize,
    pub pod_metrics: usize,
}

pub const ZONES: [&str; 3] = ["us-central1-a", "us-central1-b", "us-central1-c"];
pub const NODE_POOLS: [&str; 2] = ["default-pool", "highmem-pool"];
/// Annotations GKE puts on its addon pods.
pub const COMPONENT_NAME: &str = "components.gke.io/component-name";
pub const COMPONENT_VERSION: &str = "components.gke.io/component-version";

struct PoolShape {
    machine: &'static str,
    capacity: (&'static str, &'static str),
    allocatable: (&'static str, &'static str),
    cores: f64,
    memory_ki: f64,
    /// GKE's `cloud.google.com/gke-cpu-scaling-level` and `gke-memory-gb-scaling-level`
    /// labels: the machine's vCPUs and GB of memory.
    cpu_scaling_level: &'static str,
    memory_gb_scaling_level: &'static str,
}

const POOL_SHAPES: [PoolShape; 2] = [
    PoolShape {
        machine: "e2-standard-8",
        capacity: ("8", "32882452Ki"),
        allocatable: ("7910m", "29130516Ki"),
        cores: 8.0,
        memory_ki: 32_882_452.0,
        cpu_scaling_level: "8",
        memory_gb_scaling_level: "32",
    },
    PoolShape {
        machine: "n2-highmem-16",
        capacity: ("16", "131916972Ki"),
        allocatable: ("15890m", "123472588Ki"),
        cores: 16.0,
        memory_ki: 131_916_972.0,
        cpu_scaling_level: "16",
        memory_gb_scaling_level: "128",
    },
];

/// A GKE addon workload.
struct Addon {
    name: &'static str,
    component: &'static str,
    version: &'static str,
    image: &'static str,
    cpu: &'static str,
    memory: &'static str,
    replicas: usize,
}

const ADDON_DAEMONSETS: [Addon; 4] = [
    Addon {
        name: "fluentbit-gke",
        component: "fluentbit",
        version: "1.30.4-gke.2",
        image: "gke.gcr.io/fluent-bit:v1.8.12-gke.35",
        cpu: "100m",
        memory: "200Mi",
        replicas: 0,
    },
    Addon {
        name: "gke-metrics-agent",
        component: "gke-metrics-agent",
        version: "1.16.3-gke.0",
        image: "gke.gcr.io/gke-metrics-agent:1.16.3-gke.0",
        cpu: "8m",
        memory: "60Mi",
        replicas: 0,
    },
    Addon {
        name: "pdcsi-node",
        component: "pdcsi-node",
        version: "1.17.4-gke.0",
        image: "gke.gcr.io/gcp-compute-persistent-disk-csi-driver:v1.17.4-gke.0",
        cpu: "10m",
        memory: "20Mi",
        replicas: 0,
    },
    Addon {
        name: "netd",
        component: "netd",
        version: "0.5.3-gke.1",
        image: "gke.gcr.io/netd:v0.5.3-gke.1",
        cpu: "5m",
        memory: "30Mi",
        replicas: 0,
    },
];

const ADDON_DEPLOYMENTS: [Addon; 4] = [
    Addon {
        name: "kube-dns",
        component: "kubedns",
        version: "1.31.4-gke.1",
        image: "gke.gcr.io/k8s-dns-kube-dns:1.23.0-gke.9",
        cpu: "100m",
        memory: "70Mi",
        replicas: 2,
    },
    Addon {
        name: "metrics-server-v1.33.0",
        component: "metrics-server",
        version: "1.33.0-gke.2",
        image: "gke.gcr.io/metrics-server:v0.7.2-gke.12",
        cpu: "48m",
        memory: "105Mi",
        replicas: 1,
    },
    Addon {
        name: "konnectivity-agent",
        component: "konnectivity-agent",
        version: "1.6.2-gke.0",
        image: "gke.gcr.io/proxy-agent:v0.31.0-gke.3",
        cpu: "10m",
        memory: "30Mi",
        replicas: 3,
    },
    Addon {
        name: "event-exporter-gke",
        component: "event-exporter",
        version: "0.4.0-gke.1",
        image: "gke.gcr.io/event-exporter:v0.4.0-gke.34",
        cpu: "10m",
        memory: "15Mi",
        replicas: 1,
    },
];

/// Deployments per namespace for the generated workloads (about 1,300 pods a namespace, under
/// the 3,000 pods-per-namespace threshold).
const DEPLOYMENTS_PER_NAMESPACE: usize = 200;
/// When the generated cluster was created.
const T0: i64 = 1_760_000_000;

/// A small deterministic PRNG (xorshift64*).
#[derive(Debug, Clone)]
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng((seed ^ 0x9e37_79b9_7f4a_7c15) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn fraction(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A Deployment to generate.
struct DeploymentPlan {
    namespace: String,
    name: String,
    template_hash: String,
    replicas: usize,
    addon: Option<&'static Addon>,
    cpu: &'static str,
    memory: &'static str,
}

impl ClusterState {
    /// Generates a realistic GKE-like cluster (see [`GenerateOptions::new`]).
    pub fn generate(&mut self, nodes: usize, pods_per_node: usize) -> Generated {
        self.generate_with(&GenerateOptions::new(nodes, pods_per_node))
    }

    /// Generates, in addition to what exists (names depend only on the counts, so generating
    /// again overwrites the same objects):
    /// - `nodes` Nodes in 3 zones and 2 node pools, Ready, with GKE's labels, capacity and
    ///   allocatable;
    /// - 4 addon DaemonSets in kube-system with a pod on every node (fewer when
    ///   `pods_per_node < 4`), 4 addon Deployments in kube-system, then application Deployments
    ///   (3–10 replicas) in `team-NNN` namespaces filling every node to `pods_per_node`, each with
    ///   its ReplicaSet; addon pods carry the `components.gke.io/component-name`/`-version`
    ///   annotations; pods have owner references, requests and limits, container statuses with
    ///   restart counts (most 0);
    /// - a NodeMetrics per node if asked, shaped as the real metrics-server sends it (the node's
    ///   25 GKE labels, about 1,350 bytes: [`node_metrics_for`]), and a PodMetrics per pod if
    ///   asked.
    pub fn generate_with(&mut self, options: &GenerateOptions) -> Generated {
        let mut made = Generated::default();
        let n = options.nodes;
        if n == 0 {
            return made;
        }
        let mut rng = Rng::new(options.seed);
        let node_names: Vec<String> = (0..n)
            .map(|i| {
                let pool = NODE_POOLS[i % 2];
                let group = fnv64(&format!("{pool}/{}", ZONES[(i / 2) % 3])) & 0xffff_ffff;
                format!("gke-standin-{pool}-{group:08x}-{}", suffix(i as u64, 4))
            })
            .collect();
        let now = api_time_text(SystemTime::now());
        for (i, name) in node_names.iter().enumerate() {
            let labels: Vec<(String, String)> = gke_node_labels(i, name).into_iter().collect();
            let key = (String::new(), name.clone());
            self.put_json(
                Kind::Nodes,
                key.clone(),
                labels.clone(),
                Fields::default(),
                |rv| generated_node_json(i, name, &labels, rv).into_bytes(),
            );
            made.nodes += 1;
            if options.node_metrics {
                let shape = &POOL_SHAPES[i % 2];
                let cpu = shape.cores * (0.1 + 0.6 * rng.fraction());
                let mem = shape.memory_ki * (0.2 + 0.5 * rng.fraction());
                let usage = (
                    format!("{}n", (cpu * 1e9) as u64),
                    format!("{}Ki", mem as u64),
                );
                let json = node_metrics_json(name, &labels, &usage, &now);
                self.put_json(Kind::NodeMetrics, key, labels, Fields::default(), |_| {
                    json.into_bytes()
                });
                made.node_metrics += 1;
            }
        }

        let ds_per_node = options.pods_per_node.min(ADDON_DAEMONSETS.len());
        for addon in &ADDON_DAEMONSETS[..ds_per_node] {
            self.put_typed(
                Kind::DaemonSets,
                generated_daemon_set(addon, n),
                Fields::default(),
            );
            made.daemon_sets += 1;
        }
        let mut plans = Vec::new();
        let mut left = n * (options.pods_per_node - ds_per_node);
        for addon in &ADDON_DEPLOYMENTS {
            if left == 0 {
                break;
            }
            let replicas = addon.replicas.min(left);
            left -= replicas;
            plans.push(DeploymentPlan {
                namespace: "kube-system".into(),
                name: addon.name.into(),
                template_hash: suffix(fnv64(addon.name), 10),
                replicas,
                addon: Some(addon),
                cpu: addon.cpu,
                memory: addon.memory,
            });
        }
        let mut app = 0usize;
        while left > 0 {
            let replicas = (3 + rng.below(8)).min(left);
            left -= replicas;
            let name = format!("app-{app:05}");
            plans.push(DeploymentPlan {
                namespace: format!("team-{:03}", app / DEPLOYMENTS_PER_NAMESPACE),
                template_hash: suffix(fnv64(&name), 10),
                name,
                replicas,
                addon: None,
                cpu: ["50m", "100m", "250m", "500m"][rng.below(4)],
                memory: ["64Mi", "128Mi", "256Mi", "512Mi"][rng.below(4)],
            });
            app += 1;
        }
        made.namespaces = 1 + app.div_ceil(DEPLOYMENTS_PER_NAMESPACE);
        for plan in &plans {
            self.put_typed(
                Kind::Deployments,
                generated_deployment(plan),
                Fields::default(),
            );
            self.put_typed(
                Kind::ReplicaSets,
                generated_replica_set(plan),
                Fields::default(),
            );
            made.deployments += 1;
            made.replica_sets += 1;
        }

        let mut slot_on_node = vec![0usize; n];
        let mut place = |node: usize| {
            slot_on_node[node] += 1;
            slot_on_node[node]
        };
        for (i, node) in node_names.iter().enumerate() {
            for addon in &ADDON_DAEMONSETS[..ds_per_node] {
                let pod = PodPlan {
                    namespace: "kube-system",
                    name: format!(
                        "{}-{}",
                        addon.name,
                        suffix(
                            (i as u64 * 7_919 + fnv64(addon.name) % NAME_SPACE) % NAME_SPACE,
                            5
                        )
                    ),
                    node,
                    node_index: i,
                    slot: place(i),
                    labels: vec![
                        ("k8s-app", addon.name.to_string()),
                        ("controller-revision-hash", suffix(fnv64(addon.version), 10)),
                        ("pod-template-generation", "1".to_string()),
                    ],
                    owner: ("DaemonSet", addon.name.to_string()),
                    addon: Some(addon),
                    image: addon.image.to_string(),
                    cpu: addon.cpu,
                    memory: addon.memory,
                    restarts: restarts(&mut rng),
                    created: T0 + 600 + i as i64,
                };
                self.put_pod(pod, options, &mut rng, &mut made);
            }
        }
        let mut j = 0usize;
        for plan in &plans {
            let rs = format!("{}-{}", plan.name, plan.template_hash);
            for r in 0..plan.replicas {
                let node_index = j % n;
                j += 1;
                let label_key = if plan.addon.is_some() {
                    "k8s-app"
                } else {
                    "app"
                };
                let pod = PodPlan {
                    namespace: &plan.namespace,
                    name: format!(
                        "{rs}-{}",
                        suffix((r as u64 * 7_919 + fnv64(&rs) % NAME_SPACE) % NAME_SPACE, 5)
                    ),
                    node: &node_names[node_index],
                    node_index,
                    slot: place(node_index),
                    labels: vec![
                        (label_key, plan.name.clone()),
                        ("pod-template-hash", plan.template_hash.clone()),
                    ],
                    owner: ("ReplicaSet", rs.clone()),
                    addon: plan.addon,
                    image: plan.addon.map_or_else(
                        || format!("us-docker.pkg.dev/standin/apps/{}:1.4.2", plan.name),
                        |a| a.image.to_string(),
                    ),
                    cpu: plan.cpu,
                    memory: plan.memory,
                    restarts: restarts(&mut rng),
                    created: T0 + 3_600 + j as i64,
                };
                self.put_pod(pod, options, &mut rng, &mut made);
            }
        }
        made
    }

    fn put_pod(
        &mut self,
        plan: PodPlan<'_>,
        options: &GenerateOptions,
        rng: &mut Rng,
        made: &mut Generated,
    ) {
        let pod = generated_pod(&plan);
        let fields = pod_fields(&pod);
        if options.pod_metrics {
            let containers: Vec<(String, String, String)> = pod
                .spec
                .iter()
                .flat_map(|s| &s.containers)
                .map(|c| {
                    let cpu = format!("{}n", 1_000_000 + rng.below(200_000_000));
                    let mem = format!("{}Ki", 10_000 + rng.below(400_000));
                    (c.name.clone(), cpu, mem)
                })
                .collect();
            let containers: Vec<(&str, &str, &str)> = containers
                .iter()
                .map(|(a, b, c)| (a.as_str(), b.as_str(), c.as_str()))
                .collect();
            let m = pod_metrics(plan.namespace, &plan.name, &containers, SystemTime::now());
            self.put_typed(Kind::PodMetrics, m, Fields::default());
            made.pod_metrics += 1;
        }
        self.put_typed(Kind::Pods, pod, fields);
        made.pods += 1;
    }

    /// Modifies one pod as churn does: mostly a container restart, sometimes a phase flip.
    fn churn_pod(&mut self, key: &Key, rng: &mut Rng) -> bool {
        let Some(obj) = self.store(Kind::Pods).objects.get(key) else {
            return false;
        };
        let Ok(mut pod) = serde_json::from_slice::<Pod>(&obj.json) else {
            return false;
        };
        let now = api_time(SystemTime::now());
        let status = pod.status.get_or_insert_with(PodStatus::default);
        let running = status.phase.as_deref() == Some("Running");
        let restart = running && rng.below(5) > 0;
        let ready = if restart || !running { "True" } else { "False" };
        for cs in status.container_statuses.iter_mut().flatten() {
            if restart {
                cs.restart_count += 1;
                let oom = rng.below(3) == 0;
                cs.last_state = Some(ContainerState {
                    terminated: Some(ContainerStateTerminated {
                        exit_code: if oom { 137 } else { 1 },
                        reason: Some(if oom { "OOMKilled" } else { "Error" }.into()),
                        started_at: cs
                            .state
                            .as_ref()
                            .and_then(|s| s.running.as_ref())
                            .and_then(|r| r.started_at.clone()),
                        finished_at: Some(now.clone()),
                        container_id: cs.container_id.clone(),
                        ..Default::default()
                    }),
                    ..Default::default()
                });
            }
            if ready == "True" {
                cs.ready = true;
                cs.started = Some(true);
                cs.state = Some(ContainerState {
                    running: Some(ContainerStateRunning {
                        started_at: Some(now.clone()),
                    }),
                    ..Default::default()
                });
            } else {
                cs.ready = false;
                cs.started = Some(false);
                cs.state = Some(ContainerState {
                    waiting: Some(ContainerStateWaiting {
                        reason: Some("CrashLoopBackOff".into()),
                        message: Some("back-off 10s restarting failed container".into()),
                    }),
                    ..Default::default()
                });
            }
        }
        status.phase = Some(
            if ready == "True" {
                "Running"
            } else {
                "Pending"
            }
            .into(),
        );
        for c in status.conditions.iter_mut().flatten() {
            if (c.type_ == "Ready" || c.type_ == "ContainersReady") && c.status != ready {
                c.status = ready.into();
                c.last_transition_time = Some(now.clone());
                c.reason = (ready == "False").then(|| "ContainersNotReady".into());
            }
        }
        let fields = pod_fields(&pod);
        self.put_typed(Kind::Pods, pod, fields);
        true
    }
}

fn restarts(rng: &mut Rng) -> i32 {
    if rng.below(10) == 0 {
        1 + rng.below(5) as i32
    } else {
        0
    }
}

async fn churn_task(state: Shared, per_second: f64, duration: Duration) -> usize {
    let keys: Vec<Key> = lock(&state)
        .store(Kind::Pods)
        .objects
        .keys()
        .cloned()
        .collect();
    if keys.is_empty() || per_second <= 0.0 {
        return 0;
    }
    let mut rng = Rng::new(fnv64(&format!("{per_second}/{duration:?}/{}", keys.len())));
    let start = Instant::now();
    let mut done = 0usize;
    let mut tick = tokio::time::interval(Duration::from_millis(20));
    loop {
        tick.tick().await;
        let elapsed = start.elapsed().min(duration);
        let due = (elapsed.as_secs_f64() * per_second) as usize;
        {
            let mut st = lock(&state);
            while done < due {
                let key = &keys[rng.below(keys.len())];
                st.churn_pod(key, &mut rng);
                done += 1;
            }
        }
        if elapsed >= duration {
            return done;
        }
    }
}

/// Background churn with every kind of pod change (see [`ApiServer::churn_with`]).
#[derive(Debug, Clone)]
pub struct ChurnOptions {
    /// Pod changes (events) per second, spread evenly in 20 ms steps.
    pub per_second: f64,
    pub duration: Duration,
    /// Percent of the changes that are a deletion or a creation (0–100); the rest update a pod
    /// as [`ApiServer::churn`] does. Deletions and creations alternate, so the pod count stays
    /// within one of where it started: a deleted pod is replaced, as a controller does, by a
    /// new pod with a new name and uid on the same node, in phase Pending with no restarts.
    pub replace_percent: u32,
    pub seed: u64,
}

impl ChurnOptions {
    pub fn new(per_second: f64, duration: Duration) -> ChurnOptions {
        ChurnOptions {
            per_second,
            duration,
            replace_percent: 20,
            seed: 7,
        }
    }
}

/// What a [`ApiServer::churn_with`] task did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChurnCounts {
    pub updates: usize,
    pub creates: usize,
    pub deletes: usize,
}

impl ChurnCounts {
    /// Every change, i.e. every watch event it caused on an all-pods watch.
    pub fn total(&self) -> usize {
        self.updates + self.creates + self.deletes
    }
}

impl ClusterState {
    /// Replaces a deleted pod (its last stored JSON) with a new one, as its controller would.
    fn recreate_pod(&mut self, gone: &Bytes, rng: &mut Rng) -> Option<Key> {
        let mut v: Value = serde_json::from_slice(gone).ok()?;
        let meta = v.get_mut("metadata")?.as_object_mut()?;
        let old = meta.get("name")?.as_str()?.to_string();
        let stem = old.rsplit_once('-').map_or(old.as_str(), |(s, _)| s);
        let name = format!("{stem}-{}", suffix(rng.next() % NAME_SPACE, 5));
        meta.insert("name".into(), name.into());
        for field in ["uid", "resourceVersion", "creationTimestamp"] {
            meta.remove(field);
        }
        if let Some(status) = v.get_mut("status").and_then(Value::as_object_mut) {
            status.insert("phase".into(), "Pending".into());
            // Scheduled now and not ready yet, as a new pod is: a just-bound pod for the
            // estimate of bound pods (issue #34).
            let now = api_time_text(SystemTime::now());
            if let Some(cs) = status.get_mut("conditions").and_then(Value::as_array_mut) {
                for c in cs.iter_mut().filter_map(Value::as_object_mut) {
                    let scheduled = c.get("type").and_then(Value::as_str) == Some("PodScheduled");
                    if !scheduled {
                        c.insert("status".into(), "False".into());
                    }
                    c.insert("lastTransitionTime".into(), now.clone().into());
                }
            }
            if let Some(cs) = status
                .get_mut("containerStatuses")
                .and_then(Value::as_array_mut)
            {
                for c in cs.iter_mut().filter_map(Value::as_object_mut) {
                    c.insert("restartCount".into(), 0.into());
                    c.insert("ready".into(), false.into());
                    c.remove("lastState");
                }
            }
        }
        let obj = self.write(Kind::Pods, v, WriteMode::Create, None).ok()?;
        let meta: KeptMetaName = serde_json::from_slice(&obj.json).ok()?;
        Some((meta.metadata.namespace, meta.metadata.name))
    }
}

#[derive(serde::Deserialize)]
struct KeptMetaName {
    metadata: KeptName,
}

#[derive(serde::Deserialize)]
struct KeptName {
    #[serde(default)]
    namespace: String,
    name: String,
}

async fn churn_mixed_task(state: Shared, options: ChurnOptions) -> ChurnCounts {
    let mut keys: Vec<Key> = lock(&state)
        .store(Kind::Pods)
        .objects
        .keys()
        .cloned()
        .collect();
    let mut counts = ChurnCounts::default();
    if keys.is_empty() || options.per_second <= 0.0 {
        return counts;
    }
    let mut rng = Rng::new(options.seed);
    let replace = options.replace_percent.min(100) as usize;
    // A deleted pod waiting for its replacement.
    let mut gone: Option<Bytes> = None;
    let start = Instant::now();
    let mut done = 0usize;
    let mut tick = tokio::time::interval(Duration::from_millis(20));
    loop {
        tick.tick().await;
        let elapsed = start.elapsed().min(options.duration);
        let due = (elapsed.as_secs_f64() * options.per_second) as usize;
        {
            let mut st = lock(&state);
            while done < due && !keys.is_empty() {
                done += 1;
                if rng.below(100) < replace {
                    if let Some(json) = gone.take() {
                        if let Some(key) = st.recreate_pod(&json, &mut rng) {
                            keys.push(key);
                            counts.creates += 1;
                        }
                    } else {
                        let i = rng.below(keys.len());
                        let key = keys.swap_remove(i);
                        if let Some(last) = st.remove(Kind::Pods, &key.0, &key.1) {
                            gone = Some(last.json.clone());
                            counts.deletes += 1;
                        }
                    }
                } else {
                    let key = &keys[rng.below(keys.len())];
                    if st.churn_pod(key, &mut rng) {
                        counts.updates += 1;
                    }
                }
            }
        }
        if elapsed >= options.duration {
            return counts;
        }
    }
}

/// A pod to generate.
struct PodPlan<'a> {
    namespace: &'a str,
    name: String,
    node: &'a str,
    node_index: usize,
    /// 1-based place on the node, for the pod IP.
    slot: usize,
    labels: Vec<(&'static str, String)>,
    /// Controller kind and name.
    owner: (&'static str, String),
    addon: Option<&'static Addon>,
    image: String,
    cpu: &'static str,
    memory: &'static str,
    restarts: i32,
    created: i64,
}

fn at(secs: i64) -> metav1::Time {
    metav1::Time(Timestamp::from_second(secs).unwrap())
}

fn string_map<'a>(pairs: impl IntoIterator<Item = (&'a str, String)>) -> BTreeMap<String, String> {
    pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

fn node_ip(i: usize) -> String {
    format!("10.128.{}.{}", (i / 250) % 250, 2 + i % 250)
}

/// The `i`th node `generate_with` makes (named `name`): what the benchmarks' nodes look like.
pub fn standin_node(i: usize, name: &str) -> Node {
    generated_node(i, name)
}

/// The labels of the `i`th generated node (named `name`): the 25 a GKE node of a standard
/// cluster carries, on GKE's own node names (`gke-<cluster>-<pool>-<group>-<suffix>`).
///
/// Where the set comes from: the 21 labels of `NODE_LABELS=cloud` in
/// benches/real_metrics_server.rs, modelled on a GKE node's (instance type, zone and region,
/// node pool, machine family, OS, boot disk, container runtime, the scaling levels, logging
/// variant, max pods, provisioning, stack type, private node), plus `kubernetes.io/hostname`,
/// `-os` and `-arch` as every kubelet registers them, plus `cloud.google.com/gke-netd-ready`,
/// which GKE sets once the netd DaemonSet (one of the generated addons) runs on the node.
/// kwok's `type=kwok` of that bench's 25 is not a GKE label and is left out. GKE sets three
/// more readiness labels only when their optional addon runs on the node
/// (`node.kubernetes.io/masq-agent-ds-ready` with ip-masq-agent,
/// `addon.gke.io/node-local-dns-ds-ready` with NodeLocal DNSCache,
/// `iam.gke.io/gke-metadata-server-enabled` with Workload Identity); the generated cluster runs
/// none of those, and they would add about 136 bytes to each NodeMetrics.
/// The values are those of the node's pool ([`POOL_SHAPES`]) and zone ([`ZONES`]).
pub fn gke_node_labels(i: usize, name: &str) -> BTreeMap<String, String> {
    let pool = NODE_POOLS[i % 2];
    let shape = &POOL_SHAPES[i % 2];
    let zone = ZONES[(i / 2) % 3];
    string_map([
        ("beta.kubernetes.io/arch", "amd64".into()),
        ("beta.kubernetes.io/instance-type", shape.machine.into()),
        ("beta.kubernetes.io/os", "linux".into()),
        ("cloud.google.com/gke-boot-disk", "pd-balanced".into()),
        (
            "cloud.google.com/gke-container-runtime",
            "containerd".into(),
        ),
        (
            "cloud.google.com/gke-cpu-scaling-level",
            shape.cpu_scaling_level.into(),
        ),
        ("cloud.google.com/gke-logging-variant", "DEFAULT".into()),
        ("cloud.google.com/gke-max-pods-per-node", "110".into()),
        (
            "cloud.google.com/gke-memory-gb-scaling-level",
            shape.memory_gb_scaling_level.into(),
        ),
        ("cloud.google.com/gke-netd-ready", "true".into()),
        ("cloud.google.com/gke-nodepool", pool.into()),
        ("cloud.google.com/gke-os-distribution", "cos".into()),
        ("cloud.google.com/gke-provisioning", "standard".into()),
        ("cloud.google.com/gke-stack-type", "IPV4".into()),
        ("cloud.google.com/machine-family", shape.machine[..2].into()),
        ("cloud.google.com/private-node", "false".into()),
        (
            "failure-domain.beta.kubernetes.io/region",
            "us-central1".into(),
        ),
        ("failure-domain.beta.kubernetes.io/zone", zone.into()),
        ("kubernetes.io/arch", "amd64".into()),
        ("kubernetes.io/hostname", name.into()),
        ("kubernetes.io/os", "linux".into()),
        ("node.kubernetes.io/instance-type", shape.machine.into()),
        ("topology.gke.io/zone", zone.into()),
        ("topology.kubernetes.io/region", "us-central1".into()),
        ("topology.kubernetes.io/zone", zone.into()),
    ])
}

fn generated_node(i: usize, name: &str) -> Node {
    let labels: Vec<(String, String)> = gke_node_labels(i, name).into_iter().collect();
    serde_json::from_str(&generated_node_json(i, name, &labels, 1)).unwrap()
}

/// The JSON of the `i`th generated node named `name` with `labels` ([`gke_node_labels`]) at
/// resource version `rv`, as the stand-in stores it (no apiVersion/kind): Ready, in its pool's
/// shape and zone, with GKE's annotations, addresses, conditions and node info. Written out
/// directly rather than built as a `Node` and serialized: in a debug build serde_json is not
/// optimized, and serializing took most of the time of generating 30,000 nodes.
fn generated_node_json(i: usize, name: &str, labels: &[(String, String)], rv: u64) -> String {
    let shape = &POOL_SHAPES[i % 2];
    let zone = ZONES[(i / 2) % 3];
    let created = api_time_text_secs(T0 + i as i64);
    let heartbeat = api_time_text_secs(T0 + 86_400);
    let since = api_time_text_secs(T0 + i as i64 + 30);
    let cidr = format!("10.{}.{}.0/24", 64 + (i / 256) % 64, i % 256);
    let mut out = String::with_capacity(4_096);
    out.push_str(r#"{"metadata":{"annotations":"#);
    let instance_id = format!("{}", fnv64(name) % 10_000_000_000_000_000_000);
    push_json_object(
        &mut out,
        [
            ("container.googleapis.com/instance_id", instance_id.as_str()),
            ("node.alpha.kubernetes.io/ttl", "0"),
            (
                "volumes.kubernetes.io/controller-managed-attach-detach",
                "true",
            ),
        ],
    );
    out.push_str(&format!(r#","creationTimestamp":"{created}","labels":"#));
    push_json_object(
        &mut out,
        labels.iter().map(|(k, v)| (k.as_str(), v.as_str())),
    );
    let uid = uid_for(Kind::Nodes, "", name, 0);
    out.push_str(&format!(
        r#","name":"{name}","resourceVersion":"{rv}","uid":"{uid}"}},"spec":{{"podCIDR":"{cidr}","podCIDRs":["{cidr}"],"providerID":"gce://standin-project/{zone}/{name}"}},"status":{{"addresses":[{{"address":"{ip}","type":"InternalIP"}},{{"address":"{name}","type":"Hostname"}}],"allocatable":{allocatable},"capacity":{capacity},"conditions":["#,
        ip = node_ip(i),
        allocatable = quantities_json(shape.allocatable),
        capacity = quantities_json(shape.capacity),
    ));
    for (n, (type_, status, reason, message)) in NODE_CONDITIONS.iter().enumerate() {
        if n > 0 {
            out.push(',');
        }
        out.push_str(&format!(
            r#"{{"lastHeartbeatTime":"{heartbeat}","lastTransitionTime":"{since}","message":"{message}","reason":"{reason}","status":"{status}","type":"{type_}"}}"#
        ));
    }
    out.push_str(&format!(
        r#"],"daemonEndpoints":{{"kubeletEndpoint":{{"Port":10250}}}},"nodeInfo":{{"architecture":"amd64","bootID":"{boot}","containerRuntimeVersion":"containerd://2.0.4","kernelVersion":"6.6.87+","kubeProxyVersion":"v1.37.0-gke.1200","kubeletVersion":"v1.37.0-gke.1200","machineID":"{machine:016x}{zone_hash:016x}","operatingSystem":"linux","osImage":"Container-Optimized OS from Google","systemUUID":"{system}"}}}}}}"#,
        boot = uid_for(Kind::Nodes, "boot", name, 1),
        machine = fnv64(name),
        zone_hash = fnv64(zone),
        system = uid_for(Kind::Nodes, "system", name, 2),
    ));
    out
}

/// The conditions of a generated node: (type, status, reason, message).
const NODE_CONDITIONS: [(&str, &str, &str, &str); 5] = [
    (
        "NetworkUnavailable",
        "False",
        "RouteCreated",
        "NodeController create implicit route",
    ),
    (
        "MemoryPressure",
        "False",
        "KubeletHasSufficientMemory",
        "kubelet has sufficient memory available",
    ),
    (
        "DiskPressure",
        "False",
        "KubeletHasNoDiskPressure",
        "kubelet has no disk pressure",
    ),
    (
        "PIDPressure",
        "False",
        "KubeletHasSufficientPID",
        "kubelet has sufficient PID available",
    ),
    (
        "Ready",
        "True",
        "KubeletReady",
        "kubelet is posting ready status",
    ),
];

/// [`quantities`] as JSON.
fn quantities_json((cpu, memory): (&str, &str)) -> String {
    format!(
        r#"{{"cpu":"{cpu}","ephemeral-storage":"101430960Ki","memory":"{memory}","pods":"110"}}"#
    )
}

/// The JSON of a generated node's NodeMetrics as metrics-server v0.8.0 writes it (fields in
/// its order: name, creationTimestamp, labels; then timestamp, window, usage): what
/// [`node_metrics_for`] makes, written out directly (see [`generated_node_json`]), with the
/// window as Go writes a `metav1.Duration`.
fn node_metrics_json(
    name: &str,
    labels: &[(String, String)],
    (cpu, memory): &(String, String),
    at: &str,
) -> String {
    let mut out = String::with_capacity(1_536);
    out.push_str(&format!(
        r#"{{"metadata":{{"name":"{name}","creationTimestamp":"{at}","labels":"#
    ));
    push_json_object(
        &mut out,
        labels.iter().map(|(k, v)| (k.as_str(), v.as_str())),
    );
    out.push_str(&format!(
        r#"}},"timestamp":"{at}","window":"20s","usage":{{"cpu":"{cpu}","memory":"{memory}"}}}}"#
    ));
    out
}

/// Appends `pairs` as a JSON object. Keys and values are generated names and constants: they
/// need no escaping, which is checked for quotes and backslashes (with `memchr`, so that
/// debug builds stay fast).
fn push_json_object<'a>(out: &mut String, pairs: impl IntoIterator<Item = (&'a str, &'a str)>) {
    out.push('{');
    for (n, (k, v)) in pairs.into_iter().enumerate() {
        if n > 0 {
            out.push(',');
        }
        for s in [k, v] {
            let b = s.as_bytes();
            assert!(
                !b.contains(&b'"') && !b.contains(&b'\\'),
                "needs escaping: {s:?}"
            );
        }
        out.push('"');
        out.push_str(k);
        out.push_str("\":\"");
        out.push_str(v);
        out.push('"');
    }
    out.push('}');
}

/// `t` as the API writes times (`2025-10-09T08:53:20Z`, whole seconds).
fn api_time_text(t: SystemTime) -> String {
    let secs = t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs();
    api_time_text_secs(secs as i64)
}

/// `secs` since the epoch as the API writes times, without jiff's formatter (which in a debug
/// build costs more than the rest of a generated object): the civil date by Howard Hinnant's
/// `civil_from_days`.
fn api_time_text_secs(secs: i64) -> String {
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let (era, doe) = (z.div_euclid(146_097), z.rem_euclid(146_097));
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3_600,
        rem / 60 % 60,
        rem % 60
    )
}

fn owner(kind: Kind, namespace: &str, name: &str) -> metav1::OwnerReference {
    let info = kind.info();
    metav1::OwnerReference {
        api_version: info.api_version.into(),
        kind: info.kind.into(),
        name: name.into(),
        uid: uid_for(kind, namespace, name, 0),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

fn container(name: &str, image: &str, cpu: &str, memory: &str) -> Container {
    let limit = Quantity(memory.to_string());
    Container {
        name: name.into(),
        image: Some(image.into()),
        image_pull_policy: Some("IfNotPresent".into()),
        resources: Some(ResourceRequirements {
            requests: Some(BTreeMap::from([
                ("cpu".to_string(), Quantity(cpu.into())),
                ("memory".to_string(), Quantity(memory.into())),
            ])),
            limits: Some(BTreeMap::from([("memory".to_string(), limit)])),
            ..Default::default()
        }),
        termination_message_path: Some("/dev/termination-log".into()),
        termination_message_policy: Some("File".into()),
        ..Default::default()
    }
}

fn template(labels: BTreeMap<String, String>, c: Container) -> PodTemplateSpec {
    PodTemplateSpec {
        metadata: Some(metav1::ObjectMeta {
            labels: Some(labels),
            ..Default::default()
        }),
        spec: Some(PodSpec {
            containers: vec![c],
            ..Default::default()
        }),
    }
}

fn selector(labels: &BTreeMap<String, String>) -> metav1::LabelSelector {
    metav1::LabelSelector {
        match_labels: Some(labels.clone()),
        ..Default::default()
    }
}

fn addon_meta(
    kind: Kind,
    namespace: &str,
    name: &str,
    labels: BTreeMap<String, String>,
) -> metav1::ObjectMeta {
    metav1::ObjectMeta {
        name: Some(name.into()),
        namespace: Some(namespace.into()),
        uid: Some(uid_for(kind, namespace, name, 0)),
        creation_timestamp: Some(at(T0 + 300)),
        generation: Some(1),
        labels: Some(labels),
        ..Default::default()
    }
}

fn generated_daemon_set(addon: &Addon, nodes: usize) -> DaemonSet {
    let labels = string_map([("k8s-app", addon.name.to_string())]);
    let mut meta = addon_meta(Kind::DaemonSets, "kube-system", addon.name, labels.clone());
    meta.annotations = Some(string_map([
        (COMPONENT_NAME, addon.component.into()),
        (COMPONENT_VERSION, addon.version.into()),
    ]));
    let n = nodes as i32;
    DaemonSet {
        metadata: meta,
        spec: DaemonSetSpec {
            selector: selector(&labels),
            template: template(
                labels,
                container(addon.name, addon.image, addon.cpu, addon.memory),
            ),
            ..Default::default()
        },
        status: Some(DaemonSetStatus {
            current_number_scheduled: n,
            desired_number_scheduled: n,
            number_available: Some(n),
            number_misscheduled: 0,
            number_ready: n,
            updated_number_scheduled: Some(n),
            observed_generation: Some(1),
            ..Default::default()
        }),
    }
}

fn plan_labels(plan: &DeploymentPlan) -> BTreeMap<String, String> {
    let key = if plan.addon.is_some() {
        "k8s-app"
    } else {
        "app"
    };
    string_map([(key, plan.name.clone())])
}

fn plan_container(plan: &DeploymentPlan) -> Container {
    let image = plan.addon.map_or_else(
        || format!("us-docker.pkg.dev/standin/apps/{}:1.4.2", plan.name),
        |a| a.image.to_string(),
    );
    container(&plan.name, &image, plan.cpu, plan.memory)
}

fn plan_meta(kind: Kind, plan: &DeploymentPlan, name: &str) -> metav1::ObjectMeta {
    let mut labels = plan_labels(plan);
    if kind == Kind::ReplicaSets {
        labels.insert("pod-template-hash".into(), plan.template_hash.clone());
    }
    let mut meta = addon_meta(kind, &plan.namespace, name, labels);
    if let Some(addon) = plan.addon {
        meta.annotations = Some(string_map([
            (COMPONENT_NAME, addon.component.into()),
            (COMPONENT_VERSION, addon.version.into()),
        ]));
    }
    meta
}

fn generated_deployment(plan: &DeploymentPlan) -> Deployment {
    let labels = plan_labels(plan);
    let r = plan.replicas as i32;
    Deployment {
        metadata: plan_meta(Kind::Deployments, plan, &plan.name),
        spec: DeploymentSpec {
            replicas: Some(r),
            selector: selector(&labels),
            template: template(labels, plan_container(plan)),
            ..Default::default()
        },
        status: Some(DeploymentStatus {
            replicas: Some(r),
            ready_replicas: Some(r),
            available_replicas: Some(r),
            updated_replicas: Some(r),
            observed_generation: Some(1),
            ..Default::default()
        }),
    }
}

fn generated_replica_set(plan: &DeploymentPlan) -> ReplicaSet {
    let mut labels = plan_labels(plan);
    labels.insert("pod-template-hash".into(), plan.template_hash.clone());
    let name = format!("{}-{}", plan.name, plan.template_hash);
    let mut meta = plan_meta(Kind::ReplicaSets, plan, &name);
    meta.owner_references = Some(vec![owner(Kind::Deployments, &plan.namespace, &plan.name)]);
    let r = plan.replicas as i32;
    ReplicaSet {
        metadata: meta,
        spec: ReplicaSetSpec {
            replicas: Some(r),
            selector: selector(&labels),
            template: Some(template(labels, plan_container(plan))),
            ..Default::default()
        },
        status: Some(ReplicaSetStatus {
            replicas: r,
            ready_replicas: Some(r),
            available_replicas: Some(r),
            fully_labeled_replicas: Some(r),
            observed_generation: Some(1),
            ..Default::default()
        }),
    }
}

fn generated_pod(p: &PodPlan<'_>) -> Pod {
    let owner_kind = if p.owner.0 == "DaemonSet" {
        Kind::DaemonSets
    } else {
        Kind::ReplicaSets
    };
    let container_name = p.labels[0].1.clone();
    let created = at(p.created);
    let started = at(p.created + 5);
    let ip = format!(
        "10.{}.{}.{}",
        64 + (p.node_index / 256) % 64,
        p.node_index % 256,
        1 + p.slot % 254
    );
    let host_ip = node_ip(p.node_index);
    let condition = |type_: &str| PodCondition {
        type_: type_.into(),
        status: "True".into(),
        last_transition_time: Some(started.clone()),
        ..Default::default()
    };
    let container_id = format!(
        "containerd://{:016x}{:016x}{:016x}{:016x}",
        fnv64(&p.name),
        fnv64(p.namespace),
        fnv64(p.node),
        fnv64(&container_name)
    );
    Pod {
        metadata: metav1::ObjectMeta {
            name: Some(p.name.clone()),
            generate_name: Some(format!("{}-", p.owner.1)),
            namespace: Some(p.namespace.into()),
            uid: Some(uid_for(Kind::Pods, p.namespace, &p.name, 0)),
            creation_timestamp: Some(created),
            labels: Some(string_map(p.labels.iter().cloned())),
            annotations: p.addon.map(|a| {
                string_map([
                    (COMPONENT_NAME, a.component.into()),
                    (COMPONENT_VERSION, a.version.into()),
                ])
            }),
            owner_references: Some(vec![owner(owner_kind, p.namespace, &p.owner.1)]),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![container(&container_name, &p.image, p.cpu, p.memory)],
            node_name: Some(p.node.into()),
            restart_policy: Some("Always".into()),
            scheduler_name: Some("default-scheduler".into()),
            service_account_name: Some("default".into()),
            termination_grace_period_seconds: Some(30),
            dns_policy: Some("ClusterFirst".into()),
            priority: Some(if p.addon.is_some() { 2_000_000_000 } else { 0 }),
            priority_class_name: p.addon.map(|_| "system-node-critical".into()),
            ..Default::default()
        }),
        status: Some(PodStatus {
            phase: Some("Running".into()),
            conditions: Some(
                [
                    "PodReadyToStartContainers",
                    "Initialized",
                    "Ready",
                    "ContainersReady",
                    "PodScheduled",
                ]
                .into_iter()
                .map(condition)
                .collect(),
            ),
            host_ip: Some(host_ip.clone()),
            host_ips: Some(vec![HostIP { ip: host_ip }]),
            pod_ip: Some(ip.clone()),
            pod_ips: Some(vec![PodIP { ip }]),
            start_time: Some(started.clone()),
            qos_class: Some("Burstable".into()),
            container_statuses: Some(vec![ContainerStatus {
                name: container_name,
                image: p.image.clone(),
                image_id: format!("{}@sha256:{:016x}", p.image, fnv64(&p.image)),
                container_id: Some(container_id),
                ready: true,
                started: Some(true),
                restart_count: p.restarts,
                state: Some(ContainerState {
                    running: Some(ContainerStateRunning {
                        started_at: Some(started),
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }]),
            ..Default::default()
        }),
    }
}

// ---------------------------------------------------------------------------------------------
// Test objects

/// `t` as an API time.
pub fn api_time(t: SystemTime) -> metav1::Time {
    let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap();
    metav1::Time(Timestamp::new(d.as_secs() as i64, d.subsec_nanos() as i32).unwrap())
}

fn quantities(cpu: &str, memory: &str) -> BTreeMap<String, Quantity> {
    BTreeMap::from([
        ("cpu".to_string(), Quantity(cpu.into())),
        ("memory".to_string(), Quantity(memory.into())),
        (
            "ephemeral-storage".to_string(),
            Quantity("101430960Ki".into()),
        ),
        ("pods".to_string(), Quantity("110".into())),
    ])
}

/// A Ready node as the kubelet registers it, with `(cpu, memory)` capacity and allocatable
/// quantities (e.g. `("4", "8Gi")` and `("3920m", "7Gi")`).
pub fn node(name: &str, capacity: (&str, &str), allocatable: (&str, &str)) -> Node {
    Node {
        metadata: metav1::ObjectMeta {
            name: Some(name.into()),
            uid: Some(format!("00000000-0000-4000-8000-{:012x}", fnv(name))),
            resource_version: Some("1".into()),
            creation_timestamp: Some(api_time(
                SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000),
            )),
            labels: Some(BTreeMap::from([
                ("kubernetes.io/hostname".to_string(), name.to_string()),
                ("kubernetes.io/os".to_string(), "linux".to_string()),
            ])),
            ..metav1::ObjectMeta::default()
        },
        status: Some(NodeStatus {
            capacity: Some(quantities(capacity.0, capacity.1)),
            allocatable: Some(quantities(allocatable.0, allocatable.1)),
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: "True".into(),
                reason: Some("KubeletReady".into()),
                message: Some("kubelet is posting ready status".into()),
                ..NodeCondition::default()
            }]),
            ..NodeStatus::default()
        }),
        ..Node::default()
    }
}

/// A node's metrics with `cpu` and `memory` usage quantities (e.g. `"487558164n"`,
/// `"732212Ki"`) over a 20 s window ending at `timestamp`, and one label
/// (`kubernetes.io/hostname`): about 236 bytes of JSON, a small item for tests about values.
/// For the shape the real metrics-server sends, with every label of the node, see
/// [`node_metrics_for`].
pub fn node_metrics(name: &str, cpu: &str, memory: &str, timestamp: SystemTime) -> NodeMetrics {
    let mut m = NodeMetrics::default();
    m.metadata.name = Some(name.into());
    m.metadata.labels = Some(BTreeMap::from([(
        "kubernetes.io/hostname".to_string(),
        name.to_string(),
    )]));
    m.timestamp = api_time(timestamp);
    m.window = std::time::Duration::from_secs(20);
    m.usage.cpu = Quantity(cpu.into());
    m.usage.memory = Quantity(memory.into());
    m
}

/// `node`'s metrics as the real metrics-server (v0.8.0) answers them: metadata with the node's
/// name, a copy of every label of the node and a `creationTimestamp` (metrics-server's
/// pkg/storage/node.go: `Labels: node.Labels, CreationTimestamp: metav1.NewTime(time.Now())`,
/// the time it built the answer; here `timestamp`), then `timestamp`, `window` (20 s) and
/// `usage` (`cpu`, `memory`). metrics-server copies the node's labels, so they set the item's
/// size: for a generated node ([`standin_node`], GKE's 25 labels of [`gke_node_labels`]) an
/// item is about 1,350 bytes of JSON, against the 1,266.7 bytes per item measured from the
/// real metrics-server with kwok nodes of 25 labels and shorter names (docs/benchmarks.md,
/// "The cluster role with the real metrics-server").
pub fn node_metrics_for(
    node: &Node,
    cpu: &str,
    memory: &str,
    timestamp: SystemTime,
) -> NodeMetrics {
    let mut m = NodeMetrics::default();
    m.metadata.name = node.metadata.name.clone();
    m.metadata.labels = node.metadata.labels.clone();
    m.metadata.creation_timestamp = Some(api_time(timestamp));
    m.timestamp = api_time(timestamp);
    m.window = std::time::Duration::from_secs(20);
    m.usage.cpu = Quantity(cpu.into());
    m.usage.memory = Quantity(memory.into());
    m
}

/// A pod's metrics as metrics-server reports them: `(container, cpu, memory)` usage per
/// container over a 15 s window ending at `timestamp`.
pub fn pod_metrics(
    namespace: &str,
    name: &str,
    containers: &[(&str, &str, &str)],
    timestamp: SystemTime,
) -> PodMetrics {
    let mut m = PodMetrics::default();
    m.metadata.name = Some(name.into());
    m.metadata.namespace = Some(namespace.into());
    m.timestamp = api_time(timestamp);
    m.window = std::time::Duration::from_secs(15);
    m.containers = containers
        .iter()
        .map(|(c, cpu, memory)| k8s_metrics::v1beta1::Container {
            name: c.to_string(),
            usage: k8s_metrics::v1beta1::Usage {
                cpu: Quantity(cpu.to_string()),
                memory: Quantity(memory.to_string()),
            },
        })
        .collect();
    m
}

/// A Running, Ready pod on `node_name` (empty: unscheduled, Pending) with one container
/// requesting 100m/128Mi, labelled `app: <name>`.
/// A Burstable pod of namespace `shop` on `node` with uid `uid` whose first container runs
/// as containerd container `container_id` (the node-role task tests).
pub fn task_pod(name: &str, uid: &str, container_id: &str, node: &str) -> Pod {
    let mut p = pod("shop", name, node);
    p.metadata.uid = Some(uid.to_string());
    if let Some(status) = p.status.as_mut() {
        status.qos_class = Some("Burstable".into());
        if let Some(cs) = status.container_statuses.as_mut() {
            cs[0].container_id = Some(format!("containerd://{container_id}"));
        }
    }
    p
}

pub fn pod(namespace: &str, name: &str, node_name: &str) -> Pod {
    let scheduled = !node_name.is_empty();
    let started = api_time(SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000));
    Pod {
        metadata: metav1::ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            labels: Some(string_map([("app", name.to_string())])),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![container(
                "main",
                "registry.k8s.io/pause:3.10",
                "100m",
                "128Mi",
            )],
            node_name: scheduled.then(|| node_name.to_string()),
            ..Default::default()
        }),
        status: Some(PodStatus {
            phase: Some(if scheduled { "Running" } else { "Pending" }.into()),
            container_statuses: scheduled.then(|| {
                vec![ContainerStatus {
                    name: "main".into(),
                    image: "registry.k8s.io/pause:3.10".into(),
                    image_id: String::new(),
                    ready: true,
                    restart_count: 0,
                    state: Some(ContainerState {
                        running: Some(ContainerStateRunning {
                            started_at: Some(started),
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }]
            }),
            ..Default::default()
        }),
    }
}

/// A Lease held by `holder` for 15 s, renewed now.
pub fn lease(namespace: &str, name: &str, holder: &str) -> Lease {
    let now = metav1::MicroTime(api_time(SystemTime::now()).0);
    Lease {
        metadata: metav1::ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(holder.into()),
            lease_duration_seconds: Some(15),
            acquire_time: Some(now.clone()),
            renew_time: Some(now),
            lease_transitions: Some(0),
            ..Default::default()
        }),
    }
}

/// A uid in the UUIDv4 layout, stable for `(kind, namespace, name, salt)`.
fn uid_for(kind: Kind, namespace: &str, name: &str, salt: u64) -> String {
    let a = fnv64(&format!("{}/{namespace}/{name}/{salt}", kind.plural()));
    let b = fnv64(&format!("{salt}/{name}/{namespace}/{}", kind.plural()));
    format!(
        "{:08x}-{:04x}-4{:03x}-{:x}{:03x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xfff,
        8 + (b >> 62),
        (b >> 48) & 0xfff,
        b & 0xffff_ffff_ffff
    )
}

/// Distinct 5-character suffixes: 27^5. Multiplying an index by 7,919 (prime, not 3) permutes
/// them, so generated names stay unique while looking random.
const NAME_SPACE: u64 = 14_348_907;

/// The alphabet of generated name suffixes (no vowels, as Kubernetes').
const SUFFIX_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// `len` characters from [`SUFFIX_ALPHABET`], distinct for distinct `n` below 27^len.
fn suffix(mut n: u64, len: usize) -> String {
    (0..len)
        .map(|_| {
            let c = SUFFIX_ALPHABET[(n % 27) as usize];
            n /= 27;
            c as char
        })
        .collect()
}

fn fnv64(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A stable per-name number for uids.
fn fnv(s: &str) -> u64 {
    fnv64(s) & 0xffff_ffff_ffff
}

// ---------------------------------------------------------------------------------------------
// Authentication and authorization: TokenReview and SubjectAccessReview (create)

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewStatus, UserInfo};
use k8s_openapi::api::authorization::v1::{SubjectAccessReview, SubjectAccessReviewStatus};

pub const TOKEN_REVIEWS_PATH: &str = "/apis/authentication.k8s.io/v1/tokenreviews";
pub const ACCESS_REVIEWS_PATH: &str = "/apis/authorization.k8s.io/v1/subjectaccessreviews";

/// What the review endpoints know and how often they were asked.
#[derive(Debug, Default)]
pub struct Reviews {
    /// token -> (user, groups)
    tokens: HashMap<String, (String, Vec<String>)>,
    /// (user or group, non-resource path, verb) that are allowed. A path ending in `*` matches
    /// the prefix, verb `*` any verb, as RBAC's nonResourceURLs.
    rules: Vec<(String, String, String)>,
    token_reviews: usize,
    access_reviews: usize,
    /// The SubjectAccessReviews received, as (user, groups, path, verb).
    asked: Vec<(String, Vec<String>, String, String)>,
    /// Answer every review with this status code instead (counted all the same).
    failing: Option<u16>,
}

type ReviewsShared = Arc<Mutex<Reviews>>;

fn with_reviews(app: Router, reviews: ReviewsShared) -> Router {
    let reviews_router = Router::new()
        .route(TOKEN_REVIEWS_PATH, axum::routing::post(token_review))
        .route(ACCESS_REVIEWS_PATH, axum::routing::post(access_review))
        .with_state(reviews);
    app.merge(reviews_router)
}

async fn token_review(State(reviews): State<ReviewsShared>, body: Bytes) -> Response {
    let Ok(mut review) = serde_json::from_slice::<TokenReview>(&body) else {
        return status(400, "BadRequest", "not a TokenReview");
    };
    let mut r = reviews.lock().unwrap_or_else(|p| p.into_inner());
    r.token_reviews += 1;
    if let Some(code) = r.failing {
        return status(code, "InternalError", "injected review failure");
    }
    let known = r.tokens.get(&review.spec.token).cloned();
    review.status = Some(match known {
        Some((user, groups)) => TokenReviewStatus {
            authenticated: Some(true),
            user: Some(UserInfo {
                username: Some(user.clone()),
                uid: Some(format!("uid-{user}")),
                groups: Some(groups),
                extra: None,
            }),
            ..Default::default()
        },
        None => TokenReviewStatus {
            authenticated: Some(false),
            error: Some("invalid bearer token".into()),
            ..Default::default()
        },
    });
    json(StatusCode::CREATED, &review)
}

async fn access_review(State(reviews): State<ReviewsShared>, body: Bytes) -> Response {
    let Ok(mut review) = serde_json::from_slice::<SubjectAccessReview>(&body) else {
        return status(400, "BadRequest", "not a SubjectAccessReview");
    };
    let Some(attrs) = review.spec.non_resource_attributes.clone() else {
        return status(
            400,
            "BadRequest",
            "only nonResourceAttributes are served here",
        );
    };
    let user = review.spec.user.clone().unwrap_or_default();
    let groups = review.spec.groups.clone().unwrap_or_default();
    let path = attrs.path.unwrap_or_default();
    let verb = attrs.verb.unwrap_or_default();
    let mut r = reviews.lock().unwrap_or_else(|p| p.into_inner());
    r.access_reviews += 1;
    if let Some(code) = r.failing {
        return status(code, "InternalError", "injected review failure");
    }
    r.asked
        .push((user.clone(), groups.clone(), path.clone(), verb.clone()));
    let allowed = r.rules.iter().any(|(subject, p, v)| {
        (subject == &user || groups.contains(subject))
            && (p == &path || p.strip_suffix('*').is_some_and(|pre| path.starts_with(pre)))
            && (v == &verb || v == "*")
    });
    review.status = Some(SubjectAccessReviewStatus {
        allowed,
        reason: Some(if allowed {
            "allowed by a stand-in rule".into()
        } else {
            "no stand-in rule allows it".into()
        }),
        ..Default::default()
    });
    json(StatusCode::CREATED, &review)
}

impl ApiServer {
    fn reviews(&self) -> MutexGuard<'_, Reviews> {
        self.reviews.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A bearer token the TokenReview endpoint accepts, for `user` in `groups`.
    pub fn add_token(&self, token: &str, user: &str, groups: &[&str]) {
        self.reviews().tokens.insert(
            token.into(),
            (user.into(), groups.iter().map(|g| g.to_string()).collect()),
        );
    }

    /// Lets `subject` (a user or group) `verb` the non-resource URL `path`.
    pub fn allow(&self, subject: &str, path: &str, verb: &str) {
        self.reviews()
            .rules
            .push((subject.into(), path.into(), verb.into()));
    }

    /// Answers every TokenReview and SubjectAccessReview with `code` (`None`: answer again).
    pub fn fail_reviews(&self, code: Option<u16>) {
        self.reviews().failing = code;
    }

    /// TokenReviews received so far.
    pub fn token_reviews(&self) -> usize {
        self.reviews().token_reviews
    }

    /// SubjectAccessReviews received so far.
    pub fn access_reviews(&self) -> usize {
        self.reviews().access_reviews
    }

    /// The SubjectAccessReviews received, as (user, groups, path, verb).
    pub fn access_reviews_asked(&self) -> Vec<(String, Vec<String>, String, String)> {
        self.reviews().asked.clone()
    }
}
