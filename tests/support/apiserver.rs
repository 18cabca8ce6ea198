//! A stand-in Kubernetes API server on 127.0.0.1 for tests that go through a real `kube::Client`.
//!
//! It serves, as JSON built from the official types (`k8s-openapi`, `k8s-metrics`):
//! - LIST `GET /api/v1/nodes` (a `NodeList`) and `GET /apis/metrics.k8s.io/v1beta1/nodes` (a
//!   `NodeMetricsList`), from state a test can change at any time;
//! - the discovery documents (`/version`, `/api`, `/api/v1`, `/apis`,
//!   `/apis/metrics.k8s.io/v1beta1`), which typed `Api::list` does not need but other clients do;
//! - a `Status` JSON 404 for anything else.
//!
//! A [`Fault`] makes one kind answer with a `Status` body and code instead (e.g. 503, as the
//! aggregator answers while metrics-server is down), for a number of requests or until healed.
//! Every request is logged. Watch is not served yet: `?watch=` answers 400 with a `Status`.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use axum::Router;
use axum::extract::State;
use axum::http::{Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use k8s_metrics::v1beta1::NodeMetrics;
use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeStatus};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as metav1;
use k8s_openapi::jiff::Timestamp;
use k8s_openapi::{List, Resource as _};

/// What the stand-in lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// core/v1 Nodes.
    Nodes,
    /// metrics.k8s.io/v1beta1 NodeMetrics.
    NodeMetrics,
}

/// An injected failure: the kind answers `code` with a `Status` body.
#[derive(Debug, Clone, PartialEq)]
pub struct Fault {
    pub code: u16,
    /// The `Status` reason, e.g. `ServiceUnavailable`.
    pub reason: String,
    pub message: String,
    /// Requests left to fail; `None` fails until healed.
    pub times: Option<usize>,
}

impl Fault {
    /// 503 `ServiceUnavailable`, as the API server answers for an aggregated API whose backend
    /// (metrics-server) is down.
    pub fn unavailable(message: &str) -> Fault {
        Fault {
            code: 503,
            reason: "ServiceUnavailable".into(),
            message: message.into(),
            times: None,
        }
    }

    /// 403 `Forbidden`, as for a service account without RBAC for the resource.
    pub fn forbidden(message: &str) -> Fault {
        Fault {
            code: 403,
            reason: "Forbidden".into(),
            message: message.into(),
            times: None,
        }
    }

    /// Fails only the next `n` requests.
    pub fn times(mut self, n: usize) -> Fault {
        self.times = Some(n);
        self
    }
}

/// One request the stand-in received.
#[derive(Debug, Clone, PartialEq)]
pub struct Logged {
    pub method: Method,
    pub path: String,
    pub query: Option<String>,
}

/// Everything the stand-in serves and has seen.
#[derive(Debug, Default)]
pub struct ClusterState {
    pub nodes: Vec<Node>,
    pub node_metrics: Vec<NodeMetrics>,
    pub faults: HashMap<Kind, Fault>,
    pub requests: Vec<Logged>,
    /// Bumped on every change, served as the lists' `resourceVersion`.
    pub resource_version: u64,
}

type Shared = Arc<Mutex<ClusterState>>;

fn lock(state: &Shared) -> MutexGuard<'_, ClusterState> {
    state.lock().unwrap_or_else(|p| p.into_inner())
}

/// A running stand-in; stops when dropped.
pub struct ApiServer {
    pub url: String,
    state: Shared,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts a stand-in with no nodes and no metrics.
pub async fn start() -> ApiServer {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let state = Shared::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let app = router(state.clone());
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    ApiServer { url, state, task }
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

    /// Direct access to the state, e.g. for several changes at once.
    pub fn state(&self) -> MutexGuard<'_, ClusterState> {
        lock(&self.state)
    }

    pub fn set_nodes(&self, nodes: Vec<Node>) {
        let mut st = self.state();
        st.nodes = nodes;
        st.resource_version += 1;
    }

    pub fn set_node_metrics(&self, metrics: Vec<NodeMetrics>) {
        let mut st = self.state();
        st.node_metrics = metrics;
        st.resource_version += 1;
    }

    /// Makes `kind` answer with `fault` until [`ApiServer::heal`] (or `fault.times` requests).
    pub fn fail(&self, kind: Kind, fault: Fault) {
        self.state().faults.insert(kind, fault);
    }

    pub fn heal(&self, kind: Kind) {
        self.state().faults.remove(&kind);
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Logged> {
        self.state().requests.clone()
    }

    /// How many requests went to `path`.
    pub fn hits(&self, path: &str) -> usize {
        self.state()
            .requests
            .iter()
            .filter(|r| r.path == path)
            .count()
    }
}

pub const NODES_PATH: &str = "/api/v1/nodes";
pub const NODE_METRICS_PATH: &str = "/apis/metrics.k8s.io/v1beta1/nodes";

/// The stand-in's routes.
fn router(state: Shared) -> Router {
    Router::new()
        .route(NODES_PATH, get(list_nodes))
        .route(NODE_METRICS_PATH, get(list_node_metrics))
        .route("/version", get(version))
        .route("/api", get(core_versions))
        .route("/api/v1", get(core_resources))
        .route("/apis", get(groups))
        .route("/apis/metrics.k8s.io/v1beta1", get(metrics_resources))
        .fallback(not_found)
        .with_state(state)
}

fn json<T: serde::Serialize>(code: StatusCode, body: &T) -> Response {
    let body = serde_json::to_vec(body).unwrap();
    (code, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// A `Status` answer (`kind: Status`, `apiVersion: v1`, `status: Failure`).
fn status(code: u16, reason: &str, message: &str) -> Response {
    let body = metav1::Status {
        code: Some(i32::from(code)),
        message: Some(message.into()),
        reason: Some(reason.into()),
        status: Some("Failure".into()),
        ..metav1::Status::default()
    };
    let code = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    json(code, &body)
}

/// Logs the request and answers an injected fault or an unsupported watch, if any.
fn intercept(state: &Shared, kind: Option<Kind>, method: Method, uri: &Uri) -> Option<Response> {
    let mut st = lock(state);
    st.requests.push(Logged {
        method,
        path: uri.path().to_string(),
        query: uri.query().map(str::to_string),
    });
    let kind = kind?;
    if let Some(fault) = st.faults.get_mut(&kind) {
        let answer = status(fault.code, &fault.reason, &fault.message);
        let used_up = fault.times.as_mut().is_some_and(|n| {
            *n = n.saturating_sub(1);
            *n == 0
        });
        if used_up {
            st.faults.remove(&kind);
        }
        return Some(answer);
    }
    let watching = form_urlencoded::parse(uri.query().unwrap_or_default().as_bytes())
        .any(|(k, v)| k == "watch" && (v == "true" || v == "1"));
    watching.then(|| status(400, "BadRequest", "the stand-in does not serve watch yet"))
}

fn list_meta(st: &ClusterState) -> metav1::ListMeta {
    metav1::ListMeta {
        resource_version: Some(st.resource_version.to_string()),
        ..metav1::ListMeta::default()
    }
}

async fn list_nodes(State(state): State<Shared>, method: Method, uri: Uri) -> Response {
    if let Some(r) = intercept(&state, Some(Kind::Nodes), method, &uri) {
        return r;
    }
    let st = lock(&state);
    let list = List::<Node> {
        items: st.nodes.clone(),
        metadata: list_meta(&st),
    };
    json(StatusCode::OK, &list)
}

async fn list_node_metrics(State(state): State<Shared>, method: Method, uri: Uri) -> Response {
    if let Some(r) = intercept(&state, Some(Kind::NodeMetrics), method, &uri) {
        return r;
    }
    let st = lock(&state);
    let list = List::<NodeMetrics> {
        items: st.node_metrics.clone(),
        metadata: list_meta(&st),
    };
    json(StatusCode::OK, &list)
}

async fn version(State(state): State<Shared>, method: Method, uri: Uri) -> Response {
    intercept(&state, None, method, &uri);
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
    intercept(&state, None, method, &uri);
    let versions = metav1::APIVersions {
        versions: vec!["v1".into()],
        server_address_by_client_cidrs: Vec::new(),
    };
    json(StatusCode::OK, &versions)
}

fn cluster_resource(name: &str, singular: &str, kind: &str, verbs: &[&str]) -> metav1::APIResource {
    metav1::APIResource {
        name: name.into(),
        singular_name: singular.into(),
        kind: kind.into(),
        namespaced: false,
        verbs: verbs.iter().map(|v| v.to_string()).collect(),
        ..Default::default()
    }
}

async fn core_resources(State(state): State<Shared>, method: Method, uri: Uri) -> Response {
    intercept(&state, None, method, &uri);
    let list = metav1::APIResourceList {
        group_version: "v1".into(),
        resources: vec![cluster_resource(
            "nodes",
            "node",
            Node::KIND,
            &["get", "list", "watch"],
        )],
    };
    json(StatusCode::OK, &list)
}

async fn groups(State(state): State<Shared>, method: Method, uri: Uri) -> Response {
    intercept(&state, None, method, &uri);
    let v1beta1 = metav1::GroupVersionForDiscovery {
        group_version: NodeMetrics::API_VERSION.into(),
        version: NodeMetrics::VERSION.into(),
    };
    let list = metav1::APIGroupList {
        groups: vec![metav1::APIGroup {
            name: NodeMetrics::GROUP.into(),
            preferred_version: Some(v1beta1.clone()),
            server_address_by_client_cidrs: None,
            versions: vec![v1beta1],
        }],
    };
    json(StatusCode::OK, &list)
}

async fn metrics_resources(State(state): State<Shared>, method: Method, uri: Uri) -> Response {
    intercept(&state, None, method, &uri);
    let list = metav1::APIResourceList {
        group_version: NodeMetrics::API_VERSION.into(),
        resources: vec![cluster_resource(
            "nodes",
            "",
            NodeMetrics::KIND,
            &["get", "list"],
        )],
    };
    json(StatusCode::OK, &list)
}

async fn not_found(State(state): State<Shared>, method: Method, uri: Uri) -> Response {
    let path = uri.path().to_string();
    intercept(&state, None, method, &uri);
    status(
        404,
        "NotFound",
        &format!("the server could not find the requested resource ({path})"),
    )
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

/// A node's metrics as metrics-server reports them: `cpu` and `memory` usage quantities (e.g.
/// `"487558164n"`, `"732212Ki"`) over a 20 s window ending at `timestamp`.
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

/// A stable per-name number for uids.
fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    }) & 0xffff_ffff_ffff
}
