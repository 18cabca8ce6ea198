//! Google Cloud Monitoring output: gke-prober's metrics, pushed with `CreateTimeSeries`.
//!
//! The series are gke-prober's (`workload.googleapis.com/<prefix>/<suffix>`, its label keys
//! from [`names::GKE_PROBER`], `True`/`False` booleans), so its dashboards keep working, with
//! its bugs fixed: every pod of an addon counts, restarts are real cumulative counters per
//! container, requests are split at 200 series, and no error is dropped: failed and partly
//! failed requests are logged with the points they lost, counted by reason and returned.
//!
//! Cloud Monitoring takes at most one point per series per request and rejects a point less
//! than the metric's sampling period (10 s) after the previous one of its series. The sink
//! remembers when it last wrote each series and leaves out (and counts) those written too
//! recently, so a fast ticker never produces write errors.
//!
//! Credentials are the Application Default Credentials through gcloud-sdk (a key file named
//! by `GOOGLE_APPLICATION_CREDENTIALS`, gcloud's user credentials, or the metadata server,
//! which is Workload Identity on GKE); `anonymous` sends none, for stand-ins and emulators.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use futures_util::stream::{self, StreamExt};
use gcloud_sdk::google::api::metric_descriptor::{MetricKind, ValueType};
use gcloud_sdk::google::api::{Metric, MonitoredResource};
use gcloud_sdk::google::monitoring::v3::metric_service_client::MetricServiceClient;
use gcloud_sdk::google::monitoring::v3::{
    CreateTimeSeriesRequest, CreateTimeSeriesSummary, DeleteMetricDescriptorRequest,
    ListMetricDescriptorsRequest, Point, TimeInterval, TimeSeries, TypedValue, typed_value,
};
use gcloud_sdk::{GoogleAuthHeaders, GoogleAuthMiddleware};
use prost::Message;
use tonic::Code;
use tonic::transport::{Channel, ClientTlsConfig};

use super::names::{self, GkeProberMetric};
use super::{PushError, PushReport, PushScope, Sink};
use crate::model::{ClusterState, NodeFacts, Snapshot};
use crate::shared::error::{Error, Result};

/// Cloud Monitoring's public endpoint.
pub const DEFAULT_ENDPOINT: &str = "https://monitoring.googleapis.com";
/// The metric type prefix when none is configured: `workload.googleapis.com/kube-prober/...`,
/// what gke-prober's manifests set.
pub const DEFAULT_PREFIX: &str = "kube-prober";
/// Cloud Monitoring's limit of time series per `CreateTimeSeries` request.
pub const MAX_SERIES_PER_REQUEST: usize = 200;
/// The shortest interval between two points of one series Cloud Monitoring accepts for
/// user-defined metrics.
pub const DEFAULT_MIN_SAMPLING_PERIOD: Duration = Duration::from_secs(10);

const SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";
const USER_AGENT: &str = concat!("kube-prober/", env!("CARGO_PKG_VERSION"));

/// How to reach Cloud Monitoring; shared by the sink and the descriptor commands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GcmClientConfig {
    /// `https://host[:port]` (TLS with the webpki roots) or `http://host:port` (plaintext, for
    /// stand-ins and emulators). `None`: [`DEFAULT_ENDPOINT`].
    pub endpoint: Option<String>,
    /// Send no credentials (stand-ins, emulators). Otherwise the Application Default
    /// Credentials.
    pub anonymous: bool,
    /// Bound on opening the connection.
    pub connect_timeout: Duration,
}

impl Default for GcmClientConfig {
    fn default() -> Self {
        GcmClientConfig {
            endpoint: None,
            anonymous: false,
            connect_timeout: Duration::from_secs(10),
        }
    }
}

impl GcmClientConfig {
    /// The endpoint in use.
    pub fn endpoint(&self) -> &str {
        self.endpoint.as_deref().unwrap_or(DEFAULT_ENDPOINT)
    }
}

/// The Cloud Monitoring output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GcmConfig {
    pub client: GcmClientConfig,
    /// Monitored-resource labels; each falls back to the snapshot's [`crate::model::ClusterInfo`].
    pub project: Option<String>,
    pub location: Option<String>,
    pub cluster: Option<String>,
    /// Metric types are `workload.googleapis.com/<prefix>/<gke-prober suffix>`.
    pub prefix: String,
    /// Node role: the node whose `node/*`, `addon/*` series this instance writes (only its
    /// own); `cluster/*` series are then left to the cluster role. `None` in the cluster role
    /// (every node of the cluster state). A snapshot whose role is `node` is treated as the
    /// node role even without a name.
    pub own_node: Option<String>,
    /// Cluster role: also write `node/*` and `addon/*` for every node. Off when a node-role
    /// DaemonSet writes them, which would otherwise collide with ours. Ignored in the node role.
    pub node_series: bool,
    /// Never write a point of a series sooner than this after its previous one.
    pub min_sampling_period: Duration,
    /// Series per request, 1..=200.
    pub max_series_per_request: usize,
    /// Requests in flight at once within one push.
    pub concurrency: usize,
    /// Bound on one push, retries included; keep it below the runner's push timeout.
    pub push_deadline: Duration,
    /// First retry delay; doubled per retry up to `retry_max`, with jitter.
    pub retry_initial: Duration,
    pub retry_max: Duration,
}

impl Default for GcmConfig {
    fn default() -> Self {
        GcmConfig {
            client: GcmClientConfig::default(),
            project: None,
            location: None,
            cluster: None,
            prefix: DEFAULT_PREFIX.to_string(),
            own_node: None,
            node_series: true,
            min_sampling_period: DEFAULT_MIN_SAMPLING_PERIOD,
            max_series_per_request: MAX_SERIES_PER_REQUEST,
            concurrency: 4,
            push_deadline: Duration::from_secs(45),
            retry_initial: Duration::from_secs(1),
            retry_max: Duration::from_secs(16),
        }
    }
}

fn config_error(option: &'static str, value: impl ToString, reason: &str) -> Error {
    Error::Config {
        option,
        value: value.to_string(),
        reason: reason.to_string(),
    }
}

/// A metric type prefix must be a non-empty path below `workload.googleapis.com/`.
fn validate_prefix(prefix: &str) -> Result<()> {
    let ok_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/');
    if prefix.is_empty()
        || prefix.starts_with('/')
        || prefix.ends_with('/')
        || prefix.contains("//")
        || !prefix.chars().all(ok_char)
    {
        return Err(config_error(
            "gcm prefix",
            prefix,
            "must be non-empty, letters, digits, '_', '-', '.' and inner '/' only",
        ));
    }
    Ok(())
}

impl GcmConfig {
    /// Every bad value is a clear error before the first push.
    pub fn validate(&self) -> Result<()> {
        validate_prefix(&self.prefix)?;
        if !(1..=MAX_SERIES_PER_REQUEST).contains(&self.max_series_per_request) {
            return Err(config_error(
                "gcm max_series_per_request",
                self.max_series_per_request,
                "must be 1..=200 (Cloud Monitoring's limit)",
            ));
        }
        if self.concurrency == 0 {
            return Err(config_error("gcm concurrency", 0, "must be at least 1"));
        }
        if self.push_deadline.is_zero() {
            return Err(config_error("gcm push_deadline", "0s", "must be positive"));
        }
        if self.retry_initial.is_zero() || self.retry_max < self.retry_initial {
            return Err(config_error(
                "gcm retry",
                format!("{:?}..{:?}", self.retry_initial, self.retry_max),
                "initial must be positive and not above max",
            ));
        }
        for (option, v) in [
            ("gcm project", &self.project),
            ("gcm location", &self.location),
            ("gcm cluster", &self.cluster),
        ] {
            if v.as_deref().is_some_and(str::is_empty) {
                return Err(config_error(option, "", "must not be empty when set"));
            }
        }
        check_endpoint(self.client.endpoint())?;
        Ok(())
    }

    /// `workload.googleapis.com/<prefix>/<suffix>`.
    pub fn metric_type(&self, suffix: &str) -> String {
        metric_type(&self.prefix, suffix)
    }
}

fn metric_type(prefix: &str, suffix: &str) -> String {
    format!("workload.googleapis.com/{prefix}/{suffix}")
}

/// The TLS server name for `https` endpoints, `None` for `http`.
fn check_endpoint(endpoint: &str) -> Result<Option<String>> {
    let uri: http::Uri = endpoint
        .parse()
        .map_err(|e| config_error("gcm endpoint", endpoint, &format!("not a URL: {e}")))?;
    let host = uri
        .host()
        .filter(|h| !h.is_empty())
        .ok_or_else(|| config_error("gcm endpoint", endpoint, "has no host"))?;
    match uri.scheme_str() {
        Some("https") => Ok(Some(
            host.trim_start_matches('[')
                .trim_end_matches(']')
                .to_string(),
        )),
        Some("http") => Ok(None),
        _ => Err(config_error(
            "gcm endpoint",
            endpoint,
            "must start with https:// or http://",
        )),
    }
}

/// The gcloud-sdk Cloud Monitoring client, with its credentials middleware.
pub type GcmClient = MetricServiceClient<GoogleAuthMiddleware>;

/// A Cloud Monitoring client. The connection is opened on first use, so a sink can be made
/// while the network is still coming up; credentials are resolved here (a broken key file is
/// an error now) and tokens fetched per request (the metadata server on GKE).
pub async fn connect(cfg: &GcmClientConfig) -> Result<GcmClient> {
    let endpoint = cfg.endpoint();
    let tls_name = check_endpoint(endpoint)?;
    let mut ep = Channel::from_shared(endpoint.to_string())
        .map_err(|e| config_error("gcm endpoint", endpoint, &e.to_string()))?
        .connect_timeout(cfg.connect_timeout)
        .tcp_keepalive(Some(Duration::from_secs(60)))
        .http2_keep_alive_interval(Duration::from_secs(60))
        .keep_alive_timeout(Duration::from_secs(20));
    if let Some(name) = tls_name {
        let tls = ClientTlsConfig::new().with_webpki_roots().domain_name(name);
        ep = ep
            .tls_config(tls)
            .map_err(|e| config_error("gcm endpoint", endpoint, &format!("TLS: {e}")))?;
    }
    let channel = ep.connect_lazy();
    let headers = if cfg.anonymous {
        GoogleAuthHeaders::from(
            gcloud_sdk::google_cloud_auth::credentials::anonymous::Builder::new().build(),
        )
    } else {
        GoogleAuthHeaders::from_adc_with_scopes(vec![SCOPE.to_string()])
            .await
            .map_err(|e| Error::Http {
                what: "Cloud Monitoring credentials (Application Default Credentials)".into(),
                reason: e.to_string(),
            })?
    };
    let mut svc =
        GoogleAuthMiddleware::new(channel, Arc::new(headers), None).map_err(|e| Error::Http {
            what: "Cloud Monitoring client".into(),
            reason: e.to_string(),
        })?;
    svc.set_user_agent(USER_AGENT.to_string())
        .map_err(|e| Error::Http {
            what: "Cloud Monitoring client".into(),
            reason: e.to_string(),
        })?;
    // Big descriptor lists stay well within 16 MiB.
    Ok(MetricServiceClient::new(svc).max_decoding_message_size(16 << 20))
}

// ---------------------------------------------------------------------------------------
// Series: what one snapshot says, in gke-prober's names.

/// The monitored resource a series belongs to (project, location and cluster are common).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Res {
    Cluster,
    Node(String),
    Pod { namespace: String, pod: String },
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Value {
    Int(i64),
    #[allow(dead_code)]
    Double(f64),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Gauge,
    Cumulative,
}

/// A series chosen for this push: its key, the end time of its previous point, the series and
/// the interval of its new point.
type Selected = (String, Option<SystemTime>, Draft, TimeInterval);

/// One series as the snapshot gives it, before timing.
#[derive(Debug, Clone, PartialEq)]
struct Draft {
    suffix: &'static str,
    /// gke-prober's label keys, in its order, with values.
    labels: Vec<(&'static str, String)>,
    res: Res,
    kind: Kind,
    value: Value,
}

impl Draft {
    /// Identifies the series across pushes.
    fn key(&self) -> String {
        let mut k = String::with_capacity(96);
        k.push_str(self.suffix);
        match &self.res {
            Res::Cluster => k.push_str("|c"),
            Res::Node(n) => {
                k.push_str("|n=");
                k.push_str(n);
            }
            Res::Pod { namespace, pod } => {
                k.push_str("|p=");
                k.push_str(namespace);
                k.push('/');
                k.push_str(pod);
            }
        }
        for (key, v) in &self.labels {
            k.push('|');
            k.push_str(key);
            k.push('=');
            k.push_str(v);
        }
        k
    }
}

fn tf(b: bool) -> &'static str {
    if b { "True" } else { "False" }
}

fn gke(suffix: &str) -> Option<&'static GkeProberMetric> {
    names::GKE_PROBER.iter().find(|m| m.suffix == suffix)
}

/// Collects drafts, mapping our label names to gke-prober's keys through
/// [`names::GKE_PROBER`]; identical series are merged (counts add up).
#[derive(Default)]
struct Drafts {
    by_key: BTreeMap<String, Draft>,
}

impl Drafts {
    /// Adds a count: an identical series adds up.
    fn add(&mut self, suffix: &'static str, res: Res, ours: &[(&str, &str)], value: i64) {
        self.put(suffix, res, ours, value, true);
    }

    /// Adds a series whose value stands alone: an identical one is not added again.
    fn add_once(&mut self, suffix: &'static str, res: Res, ours: &[(&str, &str)], value: i64) {
        self.put(suffix, res, ours, value, false);
    }

    fn put(
        &mut self,
        suffix: &'static str,
        res: Res,
        ours: &[(&str, &str)],
        value: i64,
        sum: bool,
    ) {
        let Some(m) = gke(suffix) else {
            tracing::error!(suffix, "no gke-prober mapping for this metric; not written");
            return;
        };
        let labels = m
            .labels
            .iter()
            .map(|(key, our)| {
                let v = ours
                    .iter()
                    .find(|(k, _)| k == our)
                    .map(|(_, v)| (*v).to_string())
                    .unwrap_or_default();
                (*key, v)
            })
            .collect();
        let kind = if m.kind == "CUMULATIVE" {
            Kind::Cumulative
        } else {
            Kind::Gauge
        };
        let d = Draft {
            suffix: m.suffix,
            labels,
            res,
            kind,
            value: Value::Int(value),
        };
        match self.by_key.entry(d.key()) {
            std::collections::btree_map::Entry::Vacant(e) => {
                e.insert(d);
            }
            std::collections::btree_map::Entry::Occupied(mut e) => {
                if let (true, Value::Int(a), Value::Int(b)) = (sum, &mut e.get_mut().value, d.value)
                {
                    *a += b;
                } else {
                    tracing::debug!(series = %e.key(), "duplicate series in the snapshot; written once");
                }
            }
        }
    }
}

/// Everything this instance writes for one snapshot, in a stable order.
fn drafts(snap: &Snapshot, own_node: Option<&str>, node_series: bool) -> Vec<Draft> {
    let node_mode = own_node.is_some() || snap.cluster.role == "node";
    let mut out = Drafts::default();
    if let Some(cs) = &snap.cluster_state {
        if !node_mode {
            cluster_drafts(&mut out, cs);
        }
        if node_mode || node_series {
            node_drafts(&mut out, cs, own_node);
        }
    }
    if !node_mode {
        probe_drafts(&mut out, snap);
    }
    let sel = &snap.selection;
    // Pod series follow their pod's node (only looked up when sharded).
    let pod_nodes: HashMap<(&str, &str), &str> = match (&snap.cluster_state, sel.shard) {
        (Some(cs), Some(_)) => cs
            .restarts
            .iter()
            .filter_map(|p| Some(((p.namespace.as_ref(), p.pod.as_ref()), p.node.as_deref()?)))
            .collect(),
        _ => HashMap::new(),
    };
    let pod_node =
        |namespace: &str, pod: &str| pod_nodes.get(&(namespace, pod)).map(|n| (*n).to_string());
    out.by_key
        .into_values()
        .filter(|d| {
            let Some(family) =
                gke(d.suffix).and_then(|m| names::ALL.iter().find(|f| f.name == m.family))
            else {
                return true;
            };
            let node = match &d.res {
                Res::Cluster => None,
                Res::Node(n) => Some(n.clone()),
                Res::Pod { namespace, pod } => pod_node(namespace, pod),
            };
            let labels: Vec<(&str, &str)> = node.iter().map(|n| ("node", n.as_str())).collect();
            super::select::family_allowed(sel, family)
                && super::select::emits_row(sel, family, &labels)
        })
        .collect()
}

fn cluster_drafts(out: &mut Drafts, cs: &ClusterState) {
    for ((pl, t, st), n) in crate::model::cluster::node_condition_counts(&cs.nodes) {
        out.add(
            "cluster/node_condition",
            Res::Cluster,
            &[
                ("pool", &pl.pool),
                ("zone", &pl.zone),
                ("condition", &t),
                ("status", &st),
            ],
            i64::from(n),
        );
    }
    for ((pl, (r, s, d, a)), n) in crate::model::cluster::node_availability_counts(&cs.nodes) {
        out.add(
            "cluster/node_available",
            Res::Cluster,
            &[
                ("pool", &pl.pool),
                ("zone", &pl.zone),
                ("ready", tf(r)),
                ("schedulable", tf(s)),
                ("done_warming", tf(d)),
                ("available", tf(a)),
            ],
            i64::from(n),
        );
    }
    // Several controllers of one addon version add up.
    for e in &cs.expected {
        out.add(
            "cluster/addons_expected",
            Res::Cluster,
            &[
                ("addon", &e.addon.name),
                ("version", &e.addon.version),
                ("controller", e.addon.controller.as_str()),
            ],
            i64::from(e.expected),
        );
    }
}

fn node_drafts(out: &mut Drafts, cs: &ClusterState, own_node: Option<&str>) {
    let mine = |name: &str| own_node.is_none_or(|o| o == name);
    for n in cs.nodes.iter().filter(|n| mine(&n.name)) {
        let addons_ok = cs
            .addons
            .get(n.name.as_str())
            .is_none_or(|list| list.iter().all(|a| a.available()));
        node_facts_drafts(out, n, addons_ok);
    }
    addon_drafts(out, cs, mine);
    restart_drafts(out, cs, own_node);
}

/// A node's conditions, availability and its control plane's availability.
fn node_facts_drafts(out: &mut Drafts, n: &NodeFacts, addons_ok: bool) {
    let res = || Res::Node(n.name.clone());
    let (pool, zone) = (n.placement.pool.as_str(), n.placement.zone.as_str());
    for (t, st) in &n.conditions {
        out.add_once(
            "node/condition",
            res(),
            &[
                ("pool", pool),
                ("zone", zone),
                ("condition", t),
                ("status", st),
            ],
            1,
        );
    }
    out.add_once(
        "node/available",
        res(),
        &[
            ("pool", pool),
            ("zone", zone),
            ("available", tf(n.available())),
            ("ready", tf(n.ready)),
            ("schedulable", tf(n.schedulable)),
            ("done_warming", tf(n.done_warming)),
        ],
        1,
    );
    out.add_once(
        "addon/control_plane_available",
        res(),
        &[
            ("pool", pool),
            ("zone", zone),
            ("available", tf(n.available() && addons_ok)),
        ],
        1,
    );
}

/// The addons on the nodes `mine` accepts. Addons on nodes without facts still count, with
/// an unknown pool and zone.
fn addon_drafts(out: &mut Drafts, cs: &ClusterState, mine: impl Fn(&str) -> bool) {
    let facts: HashMap<&str, &NodeFacts> = cs.nodes.iter().map(|n| (n.name.as_str(), n)).collect();
    const UNKNOWN: &str = "unknown";
    let placement = |node: &str| {
        facts.get(node).map_or((UNKNOWN, UNKNOWN), |n| {
            (n.placement.pool.as_str(), n.placement.zone.as_str())
        })
    };
    for (node, list) in cs.addons.iter().filter(|(node, _)| mine(node)) {
        let (pool, zone) = placement(node);
        for a in list {
            out.add(
                "addon/available",
                Res::Node(node.to_string()),
                &[
                    ("pool", pool),
                    ("zone", zone),
                    ("addon", &a.addon.name),
                    ("version", &a.addon.version),
                    ("controller", a.addon.controller.as_str()),
                    ("available", tf(a.available())),
                ],
                i64::from(a.pods),
            );
        }
    }
}

/// The restarts of every container of the addon pods (on `own_node` only, when set).
fn restart_drafts(out: &mut Drafts, cs: &ClusterState, own_node: Option<&str>) {
    for p in &cs.restarts {
        if own_node.is_some() && p.node.as_deref() != own_node {
            continue;
        }
        let addon = p.addon.as_ref().map_or("", |a| a.name.as_ref());
        for c in &p.containers {
            out.add_once(
                "addon/restart",
                Res::Pod {
                    namespace: p.namespace.to_string(),
                    pod: p.pod.to_string(),
                },
                &[("container", &c.name), ("addon", addon)],
                i64::from(c.restarts),
            );
        }
    }
}

/// gke-prober's cluster probes: our probe name -> its `name` label and success text.
const ADDON_PROBES: &[(&str, &str, &str)] = &[
    (
        "metrics_server",
        "metrics_server",
        "Metrics-server is operational",
    ),
    ("cluster_dns", "kube_dns", "Kube-dns is operational"),
];

fn probe_drafts(out: &mut Drafts, snap: &Snapshot) {
    for p in &snap.probes {
        let Some((_, name, ok_text)) = ADDON_PROBES.iter().find(|(ours, _, _)| *ours == p.probe)
        else {
            continue;
        };
        let (condition, reason) = match &p.failure {
            None => ("Healthy", *ok_text),
            Some(r) => ("Unhealthy", r.as_str()),
        };
        // A second target with the same outcome is the same series.
        out.add_once(
            "cluster/probe/addons_condition",
            Res::Cluster,
            &[("probe", *name), ("success", condition), ("reason", reason)],
            1,
        );
    }
}

// ---------------------------------------------------------------------------------------
// The sink.

/// What the sink remembers of one series.
#[derive(Debug, Clone, Copy)]
struct Memo {
    /// End time of the newest point sent (or in flight).
    last_end: Option<SystemTime>,
    /// CUMULATIVE: the start time all its points carry until the counter goes down.
    start: Option<SystemTime>,
    last_value: Option<i64>,
}

#[derive(Debug, Default)]
struct State {
    series: HashMap<String, Memo>,
    last_push_at: Option<SystemTime>,
}

/// Counters of the sink's life, beyond what [`PushReport`] carries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GcmStats {
    pub pushes: u64,
    /// Points Cloud Monitoring accepted.
    pub points: u64,
    /// `CreateTimeSeries` calls, retries included.
    pub requests: u64,
    /// Calls retried after UNAVAILABLE, DEADLINE_EXCEEDED or RESOURCE_EXHAUSTED.
    pub retries: u64,
    /// Series left out because their previous point is younger than the sampling period.
    pub skipped_series: u64,
    /// The same, in the newest push.
    pub last_skipped: u64,
    /// Points lost, by reason (`invalid_argument`, `unavailable`, ...).
    pub failed_points: BTreeMap<String, u64>,
    /// Series the sink remembers.
    pub tracked_series: usize,
}

/// The Cloud Monitoring output.
pub struct GcmSink {
    cfg: GcmConfig,
    client: GcmClient,
    started: SystemTime,
    state: Mutex<State>,
    stats: Mutex<GcmStats>,
}

impl std::fmt::Debug for GcmSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GcmSink").field("cfg", &self.cfg).finish()
    }
}

/// The failure to report when an attempt ends with `status`: a retry the push deadline cut
/// short (the request carries the time left as its gRPC timeout, so the server answers
/// CANCELLED or DEADLINE_EXCEEDED when it runs out) lost the points because of the failure
/// that made us retry, `last`, not because of the cut.
fn cut_short(status: tonic::Status, last: Option<tonic::Status>) -> tonic::Status {
    match (status.code(), last) {
        (Code::Cancelled | Code::DeadlineExceeded, Some(last)) => last,
        _ => status,
    }
}

/// The outcome of one request (after retries).
struct Sent {
    keys: Vec<(String, Option<SystemTime>)>,
    points: u64,
    attempts: u64,
    /// Attempts the server answered (a status of its own): what `requests` counts.
    answered: u64,
    result: std::result::Result<(), tonic::Status>,
}

/// gRPC code in snake_case: the `reason` of failures.
pub fn code_reason(code: Code) -> &'static str {
    match code {
        Code::Ok => "ok",
        Code::Cancelled => "cancelled",
        Code::Unknown => "unknown",
        Code::InvalidArgument => "invalid_argument",
        Code::DeadlineExceeded => "deadline_exceeded",
        Code::NotFound => "not_found",
        Code::AlreadyExists => "already_exists",
        Code::PermissionDenied => "permission_denied",
        Code::ResourceExhausted => "resource_exhausted",
        Code::FailedPrecondition => "failed_precondition",
        Code::Aborted => "aborted",
        Code::OutOfRange => "out_of_range",
        Code::Unimplemented => "unimplemented",
        Code::Internal => "internal",
        Code::Unavailable => "unavailable",
        Code::DataLoss => "data_loss",
        Code::Unauthenticated => "unauthenticated",
    }
}

fn retryable(code: Code) -> bool {
    matches!(
        code,
        Code::Unavailable | Code::DeadlineExceeded | Code::ResourceExhausted
    )
}

/// The credentials error behind a status, when the request failed before it was sent because
/// no token could be had (no ADC, metadata server unreachable, key refused).
fn credentials_error(status: &tonic::Status) -> Option<&gcloud_sdk::error::ErrorKind> {
    let mut e: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(status);
    while let Some(err) = e {
        let found = err
            .downcast_ref::<gcloud_sdk::error::Error>()
            .or_else(|| {
                err.downcast_ref::<Box<gcloud_sdk::error::Error>>()
                    .map(|b| b.as_ref())
            })
            .map(|g| g.kind());
        if let Some(kind) = found {
            use gcloud_sdk::error::ErrorKind as K;
            return matches!(
                kind,
                K::Credentials(_) | K::CredentialsBuild(_) | K::CryptoProviderMissing
            )
            .then_some(kind);
        }
        e = err.source();
    }
    None
}

/// The low-cardinality reason of a failed request: `credentials`, or the gRPC code.
fn failure_reason(status: &tonic::Status) -> &'static str {
    if credentials_error(status).is_some() {
        "credentials"
    } else {
        code_reason(status.code())
    }
}

/// Worth another attempt: the retryable codes, and token failures the credentials call
/// transient (a metadata server hiccup).
fn should_retry(status: &tonic::Status) -> bool {
    match credentials_error(status) {
        Some(gcloud_sdk::error::ErrorKind::Credentials(c)) => c.is_transient(),
        Some(_) => false,
        None => retryable(status.code()),
    }
}

/// Whether Cloud Monitoring (or a proxy in front of it) sent this status. tonic attaches the
/// transport error as the `source` of statuses it makes up itself (connection refused or
/// reset, TLS, DNS); statuses read from the server's trailers or HTTP status have none. A
/// token that could not be had fails before the request is sent.
fn answered_by_server(status: &tonic::Status) -> bool {
    std::error::Error::source(status).is_none() && credentials_error(status).is_none()
}

/// The failure certainly wrote nothing, so the series may be written again at once.
fn nothing_written(status: &tonic::Status) -> bool {
    credentials_error(status).is_some()
        || summary_of(status).is_none()
            && matches!(
                status.code(),
                Code::Unavailable
                    | Code::ResourceExhausted
                    | Code::Unauthenticated
                    | Code::PermissionDenied
                    | Code::InvalidArgument
                    | Code::NotFound
                    | Code::Unimplemented
                    | Code::FailedPrecondition
            )
}

/// The `CreateTimeSeriesSummary` Cloud Monitoring puts in the status details of a partly
/// (or wholly) failed `CreateTimeSeries`.
pub fn summary_of(status: &tonic::Status) -> Option<CreateTimeSeriesSummary> {
    let details = status.details();
    if details.is_empty() {
        return None;
    }
    let rpc = gcloud_sdk::google::rpc::Status::decode(details).ok()?;
    rpc.details
        .iter()
        .find(|a| {
            a.type_url
                .ends_with("google.monitoring.v3.CreateTimeSeriesSummary")
        })
        .and_then(|a| CreateTimeSeriesSummary::decode(a.value.as_slice()).ok())
}

fn timestamp(t: SystemTime) -> prost_types::Timestamp {
    let d = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or(Duration::ZERO);
    prost_types::Timestamp {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        // Below one billion by construction.
        nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
    }
}

/// Milliseconds are enough, and keep times comparable after a round trip.
fn truncate_ms(t: SystemTime) -> SystemTime {
    let d = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or(Duration::ZERO);
    SystemTime::UNIX_EPOCH + Duration::from_millis(u64::try_from(d.as_millis()).unwrap_or(0))
}

/// One millisecond earlier (the times sent are whole milliseconds).
fn just_before(t: SystemTime) -> SystemTime {
    t.checked_sub(Duration::from_millis(1)).unwrap_or(t)
}

/// A number in [0, 1) that differs per call, for jitter.
fn jitter_fraction() -> f64 {
    use std::hash::BuildHasher;
    let h = std::collections::hash_map::RandomState::new().hash_one(Instant::now());
    (h % 10_000) as f64 / 10_000.0
}

impl GcmSink {
    /// Validates `cfg` and makes the client (see [`connect`]).
    pub async fn new(cfg: GcmConfig) -> Result<Self> {
        cfg.validate()?;
        let client = connect(&cfg.client).await?;
        Ok(GcmSink {
            cfg,
            client,
            started: truncate_ms(SystemTime::now()),
            state: Mutex::new(State::default()),
            stats: Mutex::new(GcmStats::default()),
        })
    }

    pub fn config(&self) -> &GcmConfig {
        &self.cfg
    }

    /// Counters so far.
    pub fn stats(&self) -> GcmStats {
        let mut s = self
            .stats
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        s.tracked_series = self
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .series
            .len();
        s
    }

    fn resource_labels(
        &self,
        snap: &Snapshot,
    ) -> std::result::Result<[(&'static str, String); 3], PushError> {
        let pick = |cfg: &Option<String>, ours: &str, what: &str| {
            cfg.clone()
                .filter(|v| !v.is_empty())
                .or_else(|| (!ours.is_empty()).then(|| ours.to_string()))
                .ok_or_else(|| PushError {
                    reason: "config".into(),
                    message: format!(
                        "Cloud Monitoring needs the {what}: set it in the gcm config (not known from the environment)"
                    ),
                    sent: PushReport::default(),
                })
        };
        Ok([
            (
                "project_id",
                pick(&self.cfg.project, &snap.cluster.project, "project")?,
            ),
            (
                "location",
                pick(&self.cfg.location, &snap.cluster.location, "location")?,
            ),
            (
                "cluster_name",
                pick(
                    &self.cfg.cluster,
                    &snap.cluster.cluster_name,
                    "cluster name",
                )?,
            ),
        ])
    }

    /// Chooses the series to send now with their point intervals; marks them as sent at
    /// `now` (undone if a request certainly wrote nothing).
    fn select(&self, drafts: Vec<Draft>, now: SystemTime) -> (Vec<Selected>, u64) {
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        // A counter first seen now started counting after our previous look.
        let new_start = match st.last_push_at {
            Some(t) if t < now => t,
            Some(_) => just_before(now),
            None => self.started.min(just_before(now)),
        };
        let period = self.cfg.min_sampling_period;
        let mut out = Vec::with_capacity(drafts.len());
        let mut skipped = 0u64;
        let mut seen = std::collections::HashSet::with_capacity(drafts.len());
        for d in drafts {
            let key = d.key();
            let memo = st.series.entry(key.clone()).or_insert(Memo {
                last_end: None,
                start: None,
                last_value: None,
            });
            seen.insert(key.clone());
            if let Some(last) = memo.last_end
                && (now <= last || now.duration_since(last).unwrap_or(Duration::ZERO) < period)
            {
                skipped += 1;
                continue;
            }
            let interval = match d.kind {
                Kind::Gauge => TimeInterval {
                    end_time: Some(timestamp(now)),
                    start_time: None,
                },
                Kind::Cumulative => {
                    let v = match d.value {
                        Value::Int(v) => Some(v),
                        Value::Double(_) => None,
                    };
                    let reset = matches!((memo.last_value, v), (Some(a), Some(b)) if b < a);
                    let start = match (memo.start, reset) {
                        (Some(s), false) => s,
                        // A reset: the new counter began after the previous point.
                        (Some(_), true) => memo
                            .last_end
                            .and_then(|e| e.checked_add(Duration::from_millis(1)))
                            .filter(|s| *s < now)
                            .unwrap_or(just_before(now)),
                        (None, _) => new_start,
                    };
                    memo.start = Some(start);
                    memo.last_value = v;
                    TimeInterval {
                        end_time: Some(timestamp(now)),
                        start_time: Some(timestamp(start)),
                    }
                }
            };
            let previous = memo.last_end;
            memo.last_end = Some(now);
            out.push((key, previous, d, interval));
        }
        // Forget series that are gone and whose period has passed.
        st.series.retain(|k, m| {
            seen.contains(k)
                || m.last_end
                    .is_some_and(|e| now.duration_since(e).unwrap_or(Duration::ZERO) < period)
        });
        st.last_push_at = Some(now);
        (out, skipped)
    }

    fn time_series(
        &self,
        d: &Draft,
        common: &[(&'static str, String); 3],
        interval: TimeInterval,
    ) -> TimeSeries {
        let mut labels: HashMap<String, String> = common
            .iter()
            .map(|(k, v)| ((*k).to_string(), v.clone()))
            .collect();
        let resource_type = match &d.res {
            Res::Cluster => "k8s_cluster",
            Res::Node(n) => {
                labels.insert("node_name".into(), n.clone());
                "k8s_node"
            }
            Res::Pod { namespace, pod } => {
                labels.insert("namespace_name".into(), namespace.clone());
                labels.insert("pod_name".into(), pod.clone());
                "k8s_pod"
            }
        };
        let (value_type, value) = match d.value {
            Value::Int(v) => (ValueType::Int64, typed_value::Value::Int64Value(v)),
            Value::Double(v) => (ValueType::Double, typed_value::Value::DoubleValue(v)),
        };
        TimeSeries {
            metric: Some(Metric {
                r#type: self.cfg.metric_type(d.suffix),
                labels: d
                    .labels
                    .iter()
                    .map(|(k, v)| ((*k).to_string(), v.clone()))
                    .collect(),
            }),
            resource: Some(MonitoredResource {
                r#type: resource_type.to_string(),
                labels,
            }),
            metric_kind: match d.kind {
                Kind::Gauge => MetricKind::Gauge as i32,
                Kind::Cumulative => MetricKind::Cumulative as i32,
            },
            value_type: value_type as i32,
            points: vec![Point {
                interval: Some(interval),
                value: Some(TypedValue { value: Some(value) }),
            }],
            ..Default::default()
        }
    }

    /// One request, retried with exponential backoff and jitter on UNAVAILABLE,
    /// DEADLINE_EXCEEDED and RESOURCE_EXHAUSTED while the push deadline allows.
    /// Returns the result, the attempts and how many of them the server answered.
    async fn send(
        &self,
        req: CreateTimeSeriesRequest,
        deadline: Instant,
    ) -> (Result<(), tonic::Status>, u64, u64) {
        let mut backoff = self.cfg.retry_initial;
        let mut attempts = 0u64;
        let mut answered = 0u64;
        // The failure that made us wait: when a backoff sleep overshoots the deadline, that
        // failure (not a made-up DEADLINE_EXCEEDED) is why the points were lost.
        let mut last: Option<tonic::Status> = None;
        loop {
            let Some(left) = deadline
                .checked_duration_since(Instant::now())
                .filter(|d| !d.is_zero())
            else {
                let status = last.unwrap_or_else(|| {
                    tonic::Status::deadline_exceeded("push deadline passed before the request")
                });
                return (Err(status), attempts, answered);
            };
            attempts += 1;
            let mut r = tonic::Request::new(req.clone());
            r.set_timeout(left);
            let mut client = self.client.clone();
            let status = match tokio::time::timeout(left, client.create_time_series(r)).await {
                Ok(Ok(_)) => return (Ok(()), attempts, answered + 1),
                Ok(Err(s)) => {
                    if answered_by_server(&s) {
                        answered += 1;
                    }
                    s
                }
                Err(_) => {
                    let status = last.unwrap_or_else(|| {
                        tonic::Status::deadline_exceeded(format!(
                            "no answer within the push deadline ({:?})",
                            self.cfg.push_deadline
                        ))
                    });
                    return (Err(status), attempts, answered);
                }
            };
            if !should_retry(&status) {
                return (Err(cut_short(status, last)), attempts, answered);
            }
            let wait = backoff.mul_f64(0.5 + 0.5 * jitter_fraction());
            if Instant::now() + wait >= deadline {
                return (Err(status), attempts, answered);
            }
            tracing::debug!(code = ?status.code(), error = %status.message(), ?wait, "CreateTimeSeries failed; retrying");
            self.stats
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .retries += 1;
            tokio::time::sleep(wait).await;
            last = Some(status);
            backoff = backoff
                .checked_mul(2)
                .unwrap_or(self.cfg.retry_max)
                .min(self.cfg.retry_max);
        }
    }

    async fn push_all(&self, snap: &Snapshot) -> Result<PushReport, PushError> {
        let started = Instant::now();
        let deadline = started + self.cfg.push_deadline;
        let common = self.resource_labels(snap)?;
        let drafts = drafts(snap, self.cfg.own_node.as_deref(), self.cfg.node_series);
        let now = truncate_ms(SystemTime::now());
        let (selected, skipped) = self.select(drafts, now);
        if skipped > 0 {
            tracing::debug!(
                sink = "gcm",
                skipped,
                period = ?self.cfg.min_sampling_period,
                "series left out: written less than the sampling period ago"
            );
        }
        let name = format!("projects/{}", common[0].1);
        let mut batches = Vec::new();
        let mut it = selected.into_iter().peekable();
        while it.peek().is_some() {
            let chunk: Vec<_> = it.by_ref().take(self.cfg.max_series_per_request).collect();
            let mut keys = Vec::with_capacity(chunk.len());
            let mut drafts = Vec::with_capacity(chunk.len());
            for (k, prev, d, interval) in chunk {
                keys.push((k, prev));
                drafts.push((d, interval));
            }
            batches.push((keys, drafts));
        }
        // Requests are built as they are sent (at most `concurrency` at a time): at 5,000 nodes
        // all 75,000 series as messages at once were ~150 MB.
        let common = &common;
        let sent: Vec<Sent> = stream::iter(batches.into_iter().map(|(keys, drafts)| {
            let points = drafts.len() as u64;
            let name = name.clone();
            async move {
                let req = CreateTimeSeriesRequest {
                    name,
                    time_series: drafts
                        .iter()
                        .map(|(d, interval)| self.time_series(d, common, *interval))
                        .collect(),
                };
                drop(drafts);
                let (result, attempts, answered) = self.send(req, deadline).await;
                Sent {
                    keys,
                    points,
                    attempts,
                    answered,
                    result,
                }
            }
        }))
        .buffer_unordered(self.cfg.concurrency)
        .collect()
        .await;
        self.account(sent, skipped, now)
    }

    /// Counts what the requests did, undoes the marks of requests that wrote nothing, and
    /// turns failures into one [`PushError`].
    fn account(
        &self,
        sent: Vec<Sent>,
        skipped: u64,
        now: SystemTime,
    ) -> Result<PushReport, PushError> {
        let mut tally = Tally::default();
        for s in sent {
            tally.add(s);
        }
        if !tally.undo.is_empty() {
            let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            for (k, prev) in std::mem::take(&mut tally.undo) {
                if let Some(m) = st.series.get_mut(&k)
                    && m.last_end == Some(now)
                {
                    m.last_end = prev;
                }
            }
        }
        {
            let mut stats = self.stats.lock().unwrap_or_else(PoisonError::into_inner);
            stats.pushes += 1;
            stats.points += tally.report.points;
            stats.requests += tally.report.requests;
            stats.skipped_series += skipped;
            stats.last_skipped = skipped;
            for (r, n) in &tally.lost {
                *stats.failed_points.entry(r.clone()).or_default() += n;
            }
        }
        tally.into_result()
    }
}

/// What the requests of one push did, added up.
#[derive(Default)]
struct Tally {
    report: PushReport,
    /// Points lost, by reason.
    lost: BTreeMap<String, u64>,
    /// The reason and message of the first failed request.
    first_failure: Option<(String, String)>,
    /// Some failed request still wrote points.
    partial: bool,
    failed_requests: u64,
    /// The series of requests that certainly wrote nothing, with their previous end times.
    undo: Vec<(String, Option<SystemTime>)>,
}

impl Tally {
    fn add(&mut self, s: Sent) {
        // Requests the server answered; attempts that never reached it are not requests.
        self.report.requests += s.answered;
        let status = match s.result {
            Ok(()) => {
                self.report.points += s.points;
                return;
            }
            Err(status) => status,
        };
        self.failed_requests += 1;
        let code = failure_reason(&status);
        let lost_here = self.lose(&status, code, s.points);
        tracing::warn!(
            sink = "gcm",
            code,
            points_lost = lost_here,
            series = s.points,
            attempts = s.attempts,
            error = %status.message(),
            "CreateTimeSeries failed"
        );
        // Never sent (deadline), or certainly not written: no wait needed.
        if s.attempts == 0 || nothing_written(&status) {
            self.undo.extend(s.keys);
        }
        if self.first_failure.is_none() {
            self.first_failure = Some((code.to_string(), status.message().to_string()));
        }
    }

    /// Counts the points a failed request of `points` lost, by reason (from Cloud
    /// Monitoring's summary where it sent one, else all of them as `code`); returns them.
    fn lose(&mut self, status: &tonic::Status, code: &'static str, points: u64) -> u64 {
        let Some(sum) = summary_of(status) else {
            *self.lost.entry(code.to_string()).or_default() += points;
            return points;
        };
        let mut lost_here = 0u64;
        let ok = u64::try_from(sum.success_point_count).unwrap_or(0);
        self.report.points += ok;
        self.partial |= ok > 0;
        for e in &sum.errors {
            let c = e
                .status
                .as_ref()
                .map_or(code, |st| code_reason(Code::from(st.code)));
            let n = u64::try_from(e.point_count).unwrap_or(0);
            *self.lost.entry(c.to_string()).or_default() += n;
            lost_here += n;
        }
        // Points the summary does not explain.
        let total = u64::try_from(sum.total_point_count).unwrap_or(points);
        let rest = total.saturating_sub(ok + lost_here);
        if rest > 0 {
            *self.lost.entry(code.to_string()).or_default() += rest;
            lost_here += rest;
        }
        lost_here
    }

    /// The report, or one [`PushError`] for every failure.
    fn into_result(self) -> Result<PushReport, PushError> {
        let Some((code, message)) = self.first_failure else {
            return Ok(self.report);
        };
        let lost_total: u64 = self.lost.values().sum();
        let by_reason = self
            .lost
            .iter()
            .map(|(r, n)| format!("{r}={n}"))
            .collect::<Vec<_>>()
            .join(", ");
        let failed_requests = self.failed_requests;
        Err(PushError {
            reason: if self.partial { "partial".into() } else { code },
            message: format!(
                "{failed_requests} request(s) failed, {lost_total} point(s) lost ({by_reason}): {message}"
            ),
            sent: self.report,
        })
    }
}

impl Sink for GcmSink {
    fn name(&self) -> &'static str {
        "gcm"
    }

    /// Until every series written may be written again (its sampling period after its last
    /// point), plus a millisecond for the truncation of point times.
    fn ready_in(&self) -> Duration {
        let now = SystemTime::now();
        let period = self.cfg.min_sampling_period;
        let st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        st.series
            .values()
            .filter_map(|m| m.last_end?.checked_add(period))
            .filter_map(|due| due.duration_since(now).ok())
            .max()
            .map_or(Duration::ZERO, |d| d + Duration::from_millis(1))
    }

    async fn push(
        &self,
        snapshot: Arc<Snapshot>,
        scope: PushScope,
    ) -> Result<PushReport, PushError> {
        match scope {
            // Every gke-prober metric describes the cluster: the leader writes them.
            PushScope::InstanceOnly => Ok(PushReport::default()),
            PushScope::All => self.push_all(&snapshot).await,
        }
    }
}

// ---------------------------------------------------------------------------------------
// Descriptors (gke-prober's listmd).

fn rpc_error(what: &str, s: &tonic::Status) -> Error {
    Error::Http {
        what: format!("Cloud Monitoring {what}"),
        reason: format!("{}: {}", code_reason(s.code()), s.message()),
    }
}

/// Metric descriptor types of this project under `workload.googleapis.com/<prefix>/`.
pub async fn list_descriptors(
    cfg: &GcmClientConfig,
    project: &str,
    prefix: &str,
) -> Result<Vec<String>> {
    let mut client = connect(cfg).await?;
    list_with(&mut client, project, prefix).await
}

async fn list_with(client: &mut GcmClient, project: &str, prefix: &str) -> Result<Vec<String>> {
    validate_prefix(prefix)?;
    if project.is_empty() {
        return Err(config_error("gcm project", "", "must not be empty"));
    }
    // The trailing '/' matters: `kube-prober` must not match `kube-prober-old/...`
    // (gke-prober's listmd compared without it).
    let want = format!("workload.googleapis.com/{prefix}/");
    let mut out = Vec::new();
    let mut page_token = String::new();
    loop {
        let req = ListMetricDescriptorsRequest {
            name: format!("projects/{project}"),
            filter: format!("metric.type = starts_with(\"{want}\")"),
            page_size: 500,
            page_token: page_token.clone(),
            active_only: false,
        };
        let resp = client
            .list_metric_descriptors(req)
            .await
            .map_err(|s| rpc_error("ListMetricDescriptors", &s))?
            .into_inner();
        out.extend(
            resp.metric_descriptors
                .into_iter()
                .map(|d| d.r#type)
                .filter(|t| t.starts_with(&want)),
        );
        if resp.next_page_token.is_empty() || resp.next_page_token == page_token {
            break;
        }
        page_token = resp.next_page_token;
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// Deletes the descriptors [`list_descriptors`] finds (and with them their data); returns the
/// deleted types. Stops at the first failure, naming what was deleted before it.
pub async fn delete_descriptors(
    cfg: &GcmClientConfig,
    project: &str,
    prefix: &str,
) -> Result<Vec<String>> {
    let mut client = connect(cfg).await?;
    let types = list_with(&mut client, project, prefix).await?;
    let mut deleted = Vec::with_capacity(types.len());
    for t in types {
        let req = DeleteMetricDescriptorRequest {
            name: format!("projects/{project}/metricDescriptors/{t}"),
        };
        if let Err(s) = client.delete_metric_descriptor(req).await {
            let mut e = rpc_error(&format!("DeleteMetricDescriptor {t}"), &s);
            if let Error::Http { reason, .. } = &mut e {
                reason.push_str(&format!(
                    " (deleted before: {})",
                    if deleted.is_empty() {
                        "none".to_string()
                    } else {
                        deleted.join(", ")
                    }
                ));
            }
            return Err(e);
        }
        deleted.push(t);
    }
    Ok(deleted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{
        Addon, AddonExpected, AddonOnNode, ClusterInfo, ContainerRestarts, Controller, Placement,
        PodRestarts, ProbeState,
    };

    /// A retry the push deadline cut short reports the failure that made us retry; a first
    /// attempt cut short, or any other failure, reports itself.
    #[test]
    fn a_retry_cut_short_by_the_deadline_reports_the_failure_before_it() {
        let unavailable = || tonic::Status::unavailable("down");
        for cut in [Code::Cancelled, Code::DeadlineExceeded] {
            let s = tonic::Status::new(cut, "Timeout expired");
            assert_eq!(
                cut_short(s.clone(), Some(unavailable())).code(),
                Code::Unavailable
            );
            assert_eq!(cut_short(s, None).code(), cut);
        }
        let denied = tonic::Status::permission_denied("no");
        assert_eq!(
            cut_short(denied, Some(unavailable())).code(),
            Code::PermissionDenied
        );
    }

    fn facts(name: &str, ready: bool) -> NodeFacts {
        NodeFacts {
            name: name.into(),
            placement: Placement {
                pool: "p".into(),
                zone: "z".into(),
            },
            conditions: vec![("Ready".into(), tf(ready).into())],
            ready,
            schedulable: true,
            done_warming: true,
            created: None,
            capacity: None,
            allocatable: None,
        }
    }

    fn snap(role: &str) -> Snapshot {
        let addon = Addon {
            name: "fluentbit".into(),
            version: "1".into(),
            controller: Controller::DaemonSet,
        };
        let mut cs = ClusterState {
            nodes: vec![facts("a", true), facts("b", false)],
            ..Default::default()
        };
        cs.expected.push(AddonExpected {
            addon: addon.clone(),
            namespace: "kube-system".into(),
            workload: "fb".into(),
            expected: 2,
        });
        for n in ["a", "b", "ghost"] {
            cs.addons.insert(
                n.into(),
                vec![AddonOnNode {
                    addon: addon.clone(),
                    pods: 1,
                    ready: 1,
                }],
            );
        }
        cs.restarts.push(Arc::new(PodRestarts {
            namespace: "kube-system".into(),
            pod: "fb-1".into(),
            node: Some("b".into()),
            addon: Some(addon),
            containers: vec![ContainerRestarts {
                name: "fb".into(),
                restarts: 2,
                last_reason: None,
                last_exit_code: None,
            }],
        }));
        let mut s = Snapshot::empty(SystemTime::now());
        s.cluster = ClusterInfo {
            cluster_name: "c".into(),
            role: role.into(),
            project: "p".into(),
            location: "l".into(),
        };
        s.cluster_state = Some(Arc::new(cs));
        for (probe, failure) in [("metrics_server", None), ("cluster_dns", Some("refused"))] {
            s.probes.push(ProbeState {
                probe: probe.into(),
                target: "t".into(),
                at: SystemTime::now(),
                duration: Duration::ZERO,
                failure: failure.map(String::from),
                runs: 1,
                failures: BTreeMap::new(),
                buckets: vec![],
                duration_sum: 0.0,
            });
        }
        s
    }

    #[test]
    fn every_gke_prober_metric_is_written_with_all_its_label_keys() {
        let d = drafts(&snap("cluster"), None, true);
        for m in names::GKE_PROBER {
            let of: Vec<_> = d.iter().filter(|x| x.suffix == m.suffix).collect();
            assert!(!of.is_empty(), "{} not written", m.suffix);
            for x in of {
                let keys: Vec<_> = x.labels.iter().map(|(k, _)| *k).collect();
                let want: Vec<_> = m.labels.iter().map(|(k, _)| *k).collect();
                assert_eq!(keys, want, "{}", m.suffix);
                assert!(
                    x.labels.iter().all(|(_, v)| !v.is_empty()),
                    "{}: every label has a value: {:?}",
                    m.suffix,
                    x.labels
                );
                assert_eq!(
                    x.kind == Kind::Cumulative,
                    m.kind == "CUMULATIVE",
                    "{}",
                    m.suffix
                );
            }
        }
        // The addon on a node without facts is still written, with an unknown placement.
        let ghost: Vec<_> = d
            .iter()
            .filter(|x| x.res == Res::Node("ghost".into()))
            .collect();
        assert_eq!(ghost.len(), 1);
        assert_eq!(ghost[0].labels[0], ("nodepool", "unknown".to_string()));
    }

    #[test]
    fn shards_write_disjoint_shares_that_add_up_and_the_denylist_holds() {
        use crate::model::{Selection, Shard};
        use crate::outputs::select::shard_of;
        let all = drafts(&snap("cluster"), None, true);
        let mut union = Vec::new();
        for index in 0..2 {
            let mut s = snap("cluster");
            s.selection = Arc::new(Selection {
                shard: Some(Shard { index, total: 2 }),
                ..Selection::default()
            });
            let d = drafts(&s, None, true);
            for x in &d {
                match &x.res {
                    // Pods follow their node: fb-1 is on b.
                    Res::Node(n) => assert_eq!(shard_of(n, 2), index, "{}", x.key()),
                    Res::Pod { .. } => assert_eq!(shard_of("b", 2), index),
                    Res::Cluster => assert_eq!(index, 0, "{}", x.key()),
                }
            }
            union.extend(d.into_iter().map(|x| x.key()));
        }
        union.sort();
        let mut want: Vec<_> = all.iter().map(Draft::key).collect();
        want.sort();
        assert_eq!(union, want, "each series from exactly one shard");

        let mut s = snap("cluster");
        s.selection = Arc::new(Selection {
            shard: None,
            excluded_families: ["kube_prober_node_condition".to_string()].into(),
        });
        let d = drafts(&s, None, true);
        assert!(d.iter().all(|x| x.suffix != "node/condition"));
        assert_eq!(
            d.len(),
            all.iter().filter(|x| x.suffix != "node/condition").count()
        );
    }

    #[test]
    fn without_node_series_the_cluster_role_writes_only_cluster_series() {
        let all = drafts(&snap("cluster"), None, true);
        let d = drafts(&snap("cluster"), None, false);
        assert!(!d.is_empty());
        assert!(d.iter().all(|x| x.suffix.starts_with("cluster/")));
        assert!(d.iter().all(|x| matches!(x.res, Res::Cluster)));
        assert_eq!(
            d.len(),
            all.iter()
                .filter(|x| x.suffix.starts_with("cluster/"))
                .count()
        );
    }

    #[test]
    fn the_node_role_keeps_to_its_node() {
        let d = drafts(&snap("node"), Some("b"), true);
        assert!(d.iter().all(|x| !x.suffix.starts_with("cluster/")));
        assert!(d.iter().all(|x| match &x.res {
            Res::Node(n) => n == "b",
            Res::Pod { pod, .. } => pod == "fb-1",
            Res::Cluster => false,
        }));
        assert_eq!(d.len(), 5);
        // Role `node` without a name: no cluster series either.
        assert!(
            drafts(&snap("node"), None, false)
                .iter()
                .all(|x| !x.suffix.starts_with("cluster/"))
        );
    }

    #[test]
    fn identical_counts_add_up_and_single_series_stay_single() {
        let mut s = snap("cluster");
        let cs = Arc::make_mut(s.cluster_state.as_mut().unwrap());
        let again = cs.expected[0].clone();
        cs.expected.push(again);
        s.probes.push(s.probes[0].clone());
        let d = drafts(&s, None, true);
        let expected: Vec<_> = d
            .iter()
            .filter(|x| x.suffix == "cluster/addons_expected")
            .collect();
        assert_eq!(expected.len(), 1);
        assert_eq!(expected[0].value, Value::Int(4));
        let ms: Vec<_> = d
            .iter()
            .filter(|x| {
                x.suffix == "cluster/probe/addons_condition" && x.labels[0].1 == "metrics_server"
            })
            .collect();
        assert_eq!(ms.len(), 1);
        assert_eq!(ms[0].value, Value::Int(1));
        assert_eq!(ms[0].labels[1].1, "Healthy");
    }

    #[test]
    fn summaries_are_read_from_the_status_details() {
        let sum = CreateTimeSeriesSummary {
            total_point_count: 5,
            success_point_count: 3,
            errors: vec![],
        };
        let rpc = gcloud_sdk::google::rpc::Status {
            code: 3,
            message: "m".into(),
            details: vec![prost_types::Any {
                type_url: "type.googleapis.com/google.monitoring.v3.CreateTimeSeriesSummary".into(),
                value: sum.encode_to_vec(),
            }],
        };
        let st =
            tonic::Status::with_details(Code::InvalidArgument, "m", rpc.encode_to_vec().into());
        assert_eq!(summary_of(&st), Some(sum));
        assert!(!nothing_written(&st));
        assert_eq!(summary_of(&tonic::Status::invalid_argument("x")), None);
        assert!(nothing_written(&tonic::Status::invalid_argument("x")));
        assert!(!nothing_written(&tonic::Status::deadline_exceeded("x")));
        // Garbage details are no summary, not a panic.
        let junk = tonic::Status::with_details(Code::Internal, "j", vec![0xff, 0x01].into());
        assert_eq!(summary_of(&junk), None);
    }

    #[test]
    fn config_checks() {
        assert!(GcmConfig::default().validate().is_ok());
        for p in ["", "/a", "a/", "a//b", "a b", "ä"] {
            assert!(validate_prefix(p).is_err(), "{p:?}");
        }
        assert!(validate_prefix("kube-prober/v2").is_ok());
        assert_eq!(
            check_endpoint("https://monitoring.googleapis.com").unwrap(),
            Some("monitoring.googleapis.com".into())
        );
        assert_eq!(check_endpoint("http://127.0.0.1:9").unwrap(), None);
        for e in ["monitoring.googleapis.com", "ftp://x", "https://", ""] {
            assert!(check_endpoint(e).is_err(), "{e:?}");
        }
        assert_eq!(
            GcmConfig::default().metric_type("node/available"),
            "workload.googleapis.com/kube-prober/node/available"
        );
        assert_eq!(code_reason(Code::ResourceExhausted), "resource_exhausted");
        assert!(retryable(Code::DeadlineExceeded) && !retryable(Code::InvalidArgument));
    }
}
