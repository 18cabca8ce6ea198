//! The reflectors: Nodes, Pods, DaemonSets and Deployments (cluster role), or this node and the
//! pods on it (node role), trimmed with `.modify()` to what `derive` reads, and the loop that
//! turns their stores into a [`crate::model::ClusterState`] for the hub.

use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use futures_util::StreamExt;
use k8s_openapi::api::apps::v1::{DaemonSet, DaemonSetSpec, Deployment, DeploymentSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, Event};
use serde::de::DeserializeOwned;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::aggregate::{PodAggregates, PodRecord};
use super::derive::{DeriveConfig, cluster_state_with_nodes, nodes_facts, pod_facts};
use super::estimate::{OVER_AFTER, binding_of};
use crate::hub::{DropReason, Provider, RunOutcome};
use crate::k8s::backoff::{ReflectorBackoff, paced};
use crate::k8s::lean::PodFollower;
use crate::k8s::lean::{LeanNode, LeanPod};
use crate::model::{Binding, ClusterState, PodFacts};
use crate::sources::runner;

/// Which pods the cluster role watches (`--pod-scope`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PodScope {
    /// Every pod in the cluster: the per-node pod series (requests, limits, pod counts) of
    /// every node, and the addon series.
    #[default]
    All,
    /// Only the pods in the workload namespaces (one watch per namespace): the addon series of
    /// those namespaces; the per-node pod series are left to the node role.
    Workloads,
    /// Only pods bound to a node and not finished ([`BOUND_PODS`]), each held only while it
    /// counts for the estimate of just-bound pods: the least pod watch that estimate needs. No
    /// per-node pod or addon series.
    Bound,
    /// No pods: the per-node pod and addon series are left to the node role.
    None,
}

impl PodScope {
    /// `all`, `workloads` or `none` (case-insensitive).
    pub fn parse(s: &str) -> Option<PodScope> {
        match s.trim().to_ascii_lowercase().as_str() {
            "all" => Some(PodScope::All),
            "workloads" => Some(PodScope::Workloads),
            "bound" => Some(PodScope::Bound),
            "none" => Some(PodScope::None),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            PodScope::All => "all",
            PodScope::Workloads => "workloads",
            PodScope::Bound => "bound",
            PodScope::None => "none",
        }
    }
}

/// How every watch gets its objects before it follows their changes (`--watch-initial-list`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum InitialList {
    /// A LIST in pages of 500, then a WATCH from the list's resourceVersion (what every
    /// Kubernetes version serves).
    #[default]
    Paged,
    /// One WATCH that first streams the current objects (`sendInitialEvents=true`, KEP-3157
    /// "WatchList", ended by the `k8s.io/initial-events-end` bookmark): no list body is ever held
    /// whole. The API server must serve it: the `WatchList` feature gate is on by default in
    /// 1.32 and from 1.34, off in 1.33 and absent before 1.27.
    Streaming,
}

impl InitialList {
    /// `paged` or `streaming` (case-insensitive).
    pub fn parse(s: &str) -> Option<InitialList> {
        match s.trim().to_ascii_lowercase().as_str() {
            "paged" => Some(InitialList::Paged),
            "streaming" => Some(InitialList::Streaming),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            InitialList::Paged => "paged",
            InitialList::Streaming => "streaming",
        }
    }

    /// `wc` with this strategy.
    pub fn apply(self, wc: watcher::Config) -> watcher::Config {
        match self {
            InitialList::Paged => wc,
            InitialList::Streaming => wc.streaming_lists(),
        }
    }
}

/// Which objects to watch.
#[derive(Debug, Clone, PartialEq)]
pub enum Scope {
    /// All nodes; the pods `pods` names; DaemonSets and Deployments in these namespaces when
    /// `workloads` (`--watch-workloads`).
    Cluster {
        namespaces: Vec<String>,
        pods: PodScope,
        workloads: bool,
    },
    /// One node (`metadata.name`) and the pods on it (`spec.nodeName`).
    Node { name: String },
}

/// Settings of the Kubernetes sources.
#[derive(Debug, Clone, PartialEq)]
pub struct WatchConfig {
    pub scope: Scope,
    pub derive: DeriveConfig,
    /// How often the cluster state is derived from the stores.
    pub interval: Duration,
    /// How every watch lists.
    pub initial_list: InitialList,
}

/// `namespace/name` -> the pod's record, in one allocation for the key; the records are held
/// inline in the table (about 64 bytes each).
type PodMap = std::collections::HashMap<Box<str>, PodEntry>;

/// One pod of a [`PodTable`]: its record (`None`: could not be used) and the relist mark.
pub(crate) struct PodEntry {
    rec: Option<PodRecord>,
    /// The table's `mark` when the pod was last written: a relist ends by removing the pods
    /// whose mark is older than its own (not listed; a list that failed half-way leaves marks
    /// of its own, which the next list's number differs from too).
    mark: u32,
}

/// The pods of one watch and what they add up to per node, kept together under one lock so
/// the sums always match the pods.
///
/// A relist updates this one table in place (mark and sweep) instead of building a second
/// one beside it: every listed pod is written with the new mark, and at the end of the list
/// the pods still carrying the old mark (deleted while the watch was gone) are removed. So a
/// relist of 650,000 pods never holds two indexes of them, and a listed pod already held
/// keeps its key: only a pod new to the table allocates one.
#[derive(Default)]
pub(crate) struct PodTable {
    map: PodMap,
    agg: PodAggregates,
    /// Bumped when a (re)list begins.
    mark: u32,
}

impl PodTable {
    /// Adds or replaces a pod: its old record leaves the sums, its new one enters them.
    pub(crate) fn insert(&mut self, key: &str, rec: Option<PodRecord>) {
        self.agg.add(rec.as_ref());
        let mark = self.mark;
        match self.map.get_mut(key) {
            Some(slot) => {
                self.agg.remove(slot.rec.as_ref());
                *slot = PodEntry { rec, mark };
            }
            None => {
                self.map.insert(key.into(), PodEntry { rec, mark });
            }
        }
    }

    pub(crate) fn remove(&mut self, key: &str) {
        if let Some(old) = self.map.remove(key) {
            self.agg.remove(old.rec.as_ref());
        }
    }

    /// A (re)list begins: pods written from now on carry the new mark.
    fn begin_relist(&mut self) {
        self.mark = self.mark.wrapping_add(1);
    }

    /// The list is complete: pods it did not name are gone. Answers how many were removed.
    fn end_relist(&mut self) -> usize {
        let (mark, agg) = (self.mark, &mut self.agg);
        let before = self.map.len();
        self.map.retain(|_, e| {
            if e.mark != mark {
                agg.remove(e.rec.as_ref());
            }
            e.mark == mark
        });
        let removed = before - self.map.len();
        // Give memory back only when the table is mostly empty now (a shrink copies it).
        if self.map.capacity() > 4 * self.map.len().max(1024) {
            self.map.shrink_to_fit();
        }
        removed
    }

    /// Every pod's record (`None`: a pod that could not be used).
    pub(crate) fn records(&self) -> impl Iterator<Item = Option<&PodRecord>> + Clone {
        self.map.values().map(|e| e.rec.as_ref())
    }
}

/// Pods as records, keyed by namespace and name: a pod is turned into a [`PodRecord`] when
/// its event arrives and the object is dropped, so memory follows the records (about 150
/// bytes a pod with its key and table slot), not the objects. `None` marks a pod that could
/// not be used.
#[derive(Clone)]
pub struct PodIndex {
    live: Arc<std::sync::Mutex<PodTable>>,
    synced: tokio::sync::watch::Receiver<bool>,
}

impl PodIndex {
    pub fn len(&self) -> usize {
        self.live.lock().map(|m| m.map.len()).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PodTable> {
        self.live.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn wait_until_ready(&self) -> bool {
        let mut rx = self.synced.clone();
        rx.wait_for(|s| *s).await.is_ok()
    }
}

/// The reflector stores.
#[derive(Clone)]
pub struct Stores {
    /// Nodes decoded lean ([`LeanNode`]) and trimmed by [`trim_node`].
    pub nodes: Store<LeanNode>,
    /// One index per pod watch: every pod, the node's pods, or one per workload namespace
    /// (`--pod-scope workloads`); none with `--pod-scope none`.
    pub pods: Vec<PodIndex>,
    /// Which pods the cluster role watches (`All` in the node role: every pod of its node).
    pub pod_scope: PodScope,
    pub daemonsets: Vec<Store<DaemonSet>>,
    pub deployments: Vec<Store<Deployment>>,
    /// Turns `true` when the Node watcher's first list has ended. Readiness is waited for on
    /// channels of our own, never on kube-runtime's `Store::wait_until_ready`: that wakes only
    /// the task that polled it last, so two waiters (the derive loop and the metrics-server
    /// fetch) left one asleep for good.
    nodes_listed: tokio::sync::watch::Receiver<bool>,
    /// The same for each DaemonSet and Deployment watcher.
    workloads_listed: Vec<tokio::sync::watch::Receiver<bool>>,
    /// Bumped after every event any watcher applied (node, pod, DaemonSet, Deployment, list
    /// start and end): the derive loop derives again only when it moved (or the clock made a
    /// node done warming).
    changes: Arc<AtomicU64>,
    /// Bumped after every event the Node watcher applied (a part of `changes`).
    node_changes: Arc<AtomicU64>,
    /// Cluster states the derive loop derived (for tests: no events, no derivations).
    derivations: Arc<AtomicU64>,
}

impl Stores {
    /// Waits until the Node watcher's first list has ended (`true`), or it stopped before
    /// (`false`). Any number of tasks may wait at once.
    pub async fn nodes_listed(&self) -> bool {
        listed(&self.nodes_listed).await
    }

    /// How many events the watchers have applied so far (any kind, any watcher).
    pub fn generation(&self) -> u64 {
        self.changes.load(Ordering::Acquire)
    }

    /// How many cluster states the derive loop has derived so far.
    pub fn derivations(&self) -> u64 {
        self.derivations.load(Ordering::Relaxed)
    }

    /// Derives the cluster state from what the stores hold now. Unless every pod is watched,
    /// the per-node pod sums are left out (a node's sums from some of its pods would be
    /// wrong); the node role serves them.
    pub fn derive(&self, now: SystemTime, cfg: &DeriveConfig) -> ClusterState {
        self.derive_reusing(now, cfg, &mut KeptNodes::default())
    }

    /// As [`Stores::derive`], with the node facts of `kept` when they are still what the Node
    /// store would give (and `kept` updated when not).
    pub fn derive_reusing(
        &self,
        now: SystemTime,
        cfg: &DeriveConfig,
        kept: &mut KeptNodes,
    ) -> ClusterState {
        // Read before the store: an event in between makes the next derivation make them again.
        let node_generation = self.node_changes.load(Ordering::Acquire);
        let nodes = kept.get(node_generation, now, cfg.warming, || {
            let nodes = self.nodes.state();
            nodes_facts(nodes.iter().map(AsRef::as_ref), now, cfg)
        });
        let ds: Vec<_> = self.daemonsets.iter().flat_map(|s| s.state()).collect();
        let deps: Vec<_> = self.deployments.iter().flat_map(|s| s.state()).collect();
        let guards: Vec<_> = self.pods.iter().map(PodIndex::lock).collect();
        // `--pod-scope bound` holds its bindings without records, which the sums would count as
        // pods that could not be used; such a pod is not held there (it is logged).
        let bad = match self.pod_scope {
            PodScope::Bound => 0,
            _ => guards.iter().map(|g| g.agg.bad()).sum(),
        };
        // Nodes and workloads here; what comes of the pods from the per-node sums the pod
        // watchers keep up to date: one entry per node, not a visit of every pod.
        let mut st = cluster_state_with_nodes(
            nodes,
            std::iter::empty::<&PodFacts>(),
            bad,
            ds.iter().map(AsRef::as_ref),
            deps.iter().map(AsRef::as_ref),
            cfg,
        );
        st.node_pods = match (&guards[..], self.pod_scope) {
            ([one], PodScope::All) => one.agg.node_pods(),
            _ => Default::default(),
        };
        st.addons = PodAggregates::addons_on_nodes(guards.iter().map(|g| &g.agg));
        // Restart series: addon pods only, in the order the pods are held (as before); a
        // pointer each, shared with the index.
        st.restarts = guards
            .iter()
            .flat_map(|g| g.records().flatten())
            .filter_map(|r| r.restarts().cloned())
            .collect();
        drop(guards);
        st.addons_elsewhere = matches!(self.pod_scope, PodScope::None | PodScope::Bound);
        st
    }

    /// Node addresses (InternalIP, ExternalIP, Hostname) -> node name, from the node store.
    pub fn node_addresses(&self) -> std::collections::HashMap<String, String> {
        let mut out = std::collections::HashMap::new();
        for n in self.nodes.state() {
            let Some(name) = n.metadata.name.as_deref() else {
                continue;
            };
            for a in n.status.iter().flat_map(|s| s.addresses.iter().flatten()) {
                out.insert(a.address.to_string(), name.to_string());
            }
        }
        out
    }

    async fn wait_until_ready(&self) -> bool {
        self.nodes_listed().await
            && futures_util::future::join_all(self.pods.iter().map(|p| p.wait_until_ready()))
                .await
                .into_iter()
                .all(|ok| ok)
            && futures_util::future::join_all(self.workloads_listed.iter().map(listed))
                .await
                .into_iter()
                .all(|ok| ok)
    }
}

/// Waits until a watcher's first list has ended (`true`), or it stopped before (`false`).
async fn listed(rx: &tokio::sync::watch::Receiver<bool>) -> bool {
    let mut rx = rx.clone();
    rx.wait_for(|listed| *listed).await.is_ok()
}

fn keep_keys(map: &mut Option<std::collections::BTreeMap<String, String>>, keep: &[String]) {
    if let Some(m) = map {
        m.retain(|k, _| keep.iter().any(|x| x == k));
        if m.is_empty() {
            *map = None;
        }
    }
}

fn addon_key_names(cfg: &DeriveConfig) -> Vec<String> {
    cfg.addon_keys
        .iter()
        .flat_map(|k| [k.name.clone(), k.version.clone()])
        .collect()
}

fn trim_meta(meta: &mut ObjectMeta, keep_annotations: &[String], keep_labels: Option<&[String]>) {
    meta.managed_fields = None;
    keep_keys(&mut meta.annotations, keep_annotations);
    if let Some(keep) = keep_labels {
        keep_keys(&mut meta.labels, keep);
    }
}

/// The node label keys derive reads: the pool and zone labels.
pub fn node_label_keys(cfg: &DeriveConfig) -> Vec<String> {
    cfg.pool_labels
        .iter()
        .chain(&cfg.zone_labels)
        .cloned()
        .collect()
}

/// What the node store keeps of a [`LeanNode`] (which holds only what `derive::node_facts`,
/// `node_addresses` and the metrics-server backend read): the labels in `keep` (the pool and
/// zone keys, [`node_label_keys`]), and one shared copy of each label, condition type and
/// status and address type, which most nodes have in common.
pub fn trim_node(n: &mut LeanNode, keep: &[String], interner: &mut Interner) {
    n.labels.retain(|(k, _)| keep.iter().any(|x| **x == **k));
    n.labels.shrink_to_fit();
    for (k, v) in &mut n.labels {
        *k = interner.get(k);
        *v = interner.get(v);
    }
    if let Some(s) = n.status.as_mut() {
        for c in s.conditions.iter_mut().flatten() {
            c.type_ = interner.get(&c.type_);
            c.status = interner.get(&c.status);
        }
        for a in s.addresses.iter_mut().flatten() {
            a.type_ = interner.get(&a.type_);
        }
    }
}

/// DaemonSets: name, addon markers on the object and its pod template, desired count.
pub fn trim_daemonset(d: &mut DaemonSet, keys: &[String]) {
    trim_meta(&mut d.metadata, keys, Some(keys));
    let mut tmeta = d.spec.template.metadata.take();
    if let Some(m) = tmeta.as_mut() {
        trim_meta(m, keys, Some(keys));
    }
    d.spec = DaemonSetSpec::default();
    d.spec.template.metadata = tmeta;
}

/// Deployments: name, addon markers, replicas.
pub fn trim_deployment(d: &mut Deployment, keys: &[String]) {
    trim_meta(&mut d.metadata, keys, Some(keys));
    let mut tmeta = d.spec.template.metadata.take();
    if let Some(m) = tmeta.as_mut() {
        trim_meta(m, keys, Some(keys));
    }
    let replicas = d.spec.replicas;
    d.spec = DeploymentSpec::default();
    d.spec.replicas = replicas;
    d.spec.template.metadata = tmeta;
    d.status = None;
}

/// One watcher's bookkeeping: relists and WATCH restarts by reason, and the client-go pause
/// after each failure. Fed by the watcher's events and by its client (every WATCH request), so
/// a stream the server closed cleanly, which kube-runtime reopens without any event, is
/// counted too.
struct WatchBook {
    source: &'static str,
    provider: Arc<dyn Provider>,
    state: std::sync::Mutex<BookState>,
}

#[derive(Default)]
struct BookState {
    /// `Event::Init`s seen: the first is the initial list, every later one a relist.
    inits: u64,
    /// A list just completed: the next WATCH is its first, not a restart.
    after_list: bool,
    restart_reason: Option<&'static str>,
    relist_reason: Option<&'static str>,
    backoff: ReflectorBackoff,
}

impl WatchBook {
    fn new(source: &'static str, resource: &'static str, provider: Arc<dyn Provider>) -> Arc<Self> {
        provider.source().register_watch(source, resource);
        Arc::new(WatchBook {
            source,
            provider,
            state: Default::default(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BookState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `client` with a `Retry-After` gate that reports this watcher's WATCH requests.
    fn client(self: &Arc<Self>, client: kube::Client) -> kube::Client {
        let book = self.clone();
        paced(client, Some(Box::new(move || book.on_watch_request()))).0
    }

    fn on_init(&self) {
        let mut st = self.lock();
        if st.inits > 0 {
            let reason = st.relist_reason.take().unwrap_or("unknown");
            tracing::info!(source = self.source, reason, "relisting");
            self.provider.source().record_relist(self.source, reason);
        }
        st.inits += 1;
    }

    fn on_listed(&self) {
        let mut st = self.lock();
        st.after_list = true;
        st.restart_reason = None;
    }

    fn on_watch_request(&self) {
        let mut st = self.lock();
        if std::mem::take(&mut st.after_list) {
            return;
        }
        let reason = st.restart_reason.take().unwrap_or("closed");
        tracing::debug!(source = self.source, reason, "watch restarted");
        self.provider
            .source()
            .record_watch_restart(self.source, reason);
    }

    /// Counts the failure as a failed run, notes what the watcher will do next (relist or
    /// re-watch) and returns the pause before polling it again.
    fn on_error(&self, e: &watcher::Error) -> Duration {
        let mut st = self.lock();
        match e {
            watcher::Error::InitialListFailed(_) => st.relist_reason = Some("list_failed"),
            watcher::Error::NoResourceVersion => st.relist_reason = Some("no_resource_version"),
            watcher::Error::WatchError(status) if status.code == 410 => {
                st.relist_reason = Some("expired")
            }
            watcher::Error::WatchError(_)
            | watcher::Error::WatchStartFailed(_)
            | watcher::Error::WatchFailed(_) => st.restart_reason = Some("error"),
        }
        let pause = st.backoff.next_delay(tokio::time::Instant::now());
        drop(st);
        tracing::warn!(source = self.source, error = %e, ?pause, "watch failed; retrying after a pause");
        runner::record(
            self.provider.as_ref(),
            self.source,
            Duration::ZERO,
            RunOutcome::Failed {
                reason: watch_error_reason(e).into(),
                message: e.to_string(),
            },
        );
        pause
    }
}

/// The documented source error reason (`error::SOURCE_ERROR_REASONS`) of a watcher failure:
/// that of the kube error inside (`http`, `parse`, `too_large`), `http` for an error event on
/// the stream, `parse` for a list without a resourceVersion.
pub fn watch_error_reason(e: &watcher::Error) -> &'static str {
    match e {
        watcher::Error::InitialListFailed(k)
        | watcher::Error::WatchStartFailed(k)
        | watcher::Error::WatchFailed(k) => crate::k8s::client::kube_error_label(k),
        watcher::Error::WatchError(_) => "http",
        watcher::Error::NoResourceVersion => "parse",
    }
}

/// Waits `pause` unless cancelled first; false when cancelled.
async fn pause_or_cancel(pause: Duration, cancel: &CancellationToken) -> bool {
    tokio::select! {
        _ = cancel.cancelled() => false,
        _ = tokio::time::sleep(pause) => true,
    }
}

/// What every watcher shares: the hub, the stop signal and the change counter.
#[derive(Clone)]
struct Shared {
    provider: Arc<dyn Provider>,
    cancel: CancellationToken,
    changes: Arc<AtomicU64>,
    /// Bumped too by the one watcher it is given to: the Node watcher's own count, which the
    /// node facts a derivation keeps ([`KeptNodes`]) depend on.
    own_changes: Option<Arc<AtomicU64>>,
}

/// What a watcher's event was, once applied to its store.
enum Seen {
    ListStart,
    ListEnd,
    Object,
}

/// Applies a watcher's events to a reflector store, relisting in place: the first list fills
/// the store as kube-runtime's reflector does (it becomes ready at its end), but a later
/// relist writes each listed object into the live store as it arrives and, at its end, deletes
/// the objects it did not list, instead of building a second store beside the first and
/// swapping (which holds every object twice: 65,000 Nodes are ~114 MiB a copy). Until the
/// relist ends the store may hold objects deleted meanwhile, as it did before the swap.
struct RelistInPlace<K>
where
    K: kube::Resource + Clone + PartialEq + 'static,
    K::DynamicType: Default + Eq + Hash + Clone,
{
    reader: Store<K>,
    writer: reflector::store::Writer<K>,
    /// Whether the first list has ended (the store is ready).
    listed: bool,
    /// During a relist, the objects it has listed so far.
    seen: Option<std::collections::HashSet<reflector::ObjectRef<K>>>,
}

impl<K> RelistInPlace<K>
where
    K: kube::Resource + Clone + PartialEq + 'static,
    K::DynamicType: Default + Eq + Hash + Clone,
{
    fn new(reader: Store<K>, writer: reflector::store::Writer<K>) -> Self {
        RelistInPlace {
            reader,
            writer,
            listed: false,
            seen: None,
        }
    }

    /// Applies `ev` to the store; whether anything derived from the store may have changed.
    /// After the first list, an update that only moves the object's resourceVersion (a kwok or
    /// kubelet heartbeat, once trimming has dropped the heartbeat times) changes nothing and
    /// is not stored, so it triggers no derivation and no render.
    fn apply(&mut self, ev: Event<K>) -> bool {
        if !self.listed {
            self.listed = matches!(ev, Event::InitDone);
            self.writer.apply_watcher_event(&ev);
            return true;
        }
        match ev {
            // A relist begins (again, if an earlier one stopped half-way).
            Event::Init => self.seen = Some(Default::default()),
            Event::InitApply(o) => {
                if let Some(seen) = &mut self.seen {
                    seen.insert(reflector::ObjectRef::from_obj(&o));
                }
                self.writer.apply_watcher_event(&Event::Apply(o));
            }
            Event::InitDone => {
                let Some(seen) = self.seen.take() else {
                    return false;
                };
                for o in self.reader.state() {
                    if !seen.contains(&reflector::ObjectRef::from_obj(&*o)) {
                        self.writer
                            .apply_watcher_event(&Event::Delete(K::clone(&o)));
                    }
                }
            }
            Event::Apply(o) if self.holds_the_same(&o) => return false,
            ev @ (Event::Apply(_) | Event::Delete(_)) => self.writer.apply_watcher_event(&ev),
        }
        true
    }

    /// Whether the store holds `o` already, but for its resourceVersion.
    fn holds_the_same(&self, o: &K) -> bool {
        let Some(held) = self.reader.get(&reflector::ObjectRef::from_obj(o)) else {
            return false;
        };
        let mut held = K::clone(&held);
        held.meta_mut().resource_version = o.meta().resource_version.clone();
        held == *o
    }
}

/// Starts one reflector; each completed (re)list counts as a run of `source`, each watch error
/// as a failed run, followed by client-go's pause (see [`super::backoff`]).
fn reflect<K>(
    api: impl FnOnce(kube::Client) -> Api<K>,
    client: kube::Client,
    wc: watcher::Config,
    (source, resource): (&'static str, &'static str),
    trim: impl FnMut(&mut K) + Send + 'static,
    shared: Shared,
) -> (Store<K>, tokio::sync::watch::Receiver<bool>, JoinHandle<()>)
where
    K: kube::Resource + Clone + PartialEq + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    let Shared {
        provider,
        cancel,
        changes,
        own_changes,
    } = shared;
    let (reader, writer) = reflector::store();
    let book = WatchBook::new(source, resource, provider.clone());
    let stream = watcher::watcher(api(book.client(client)), wc).modify(trim);
    let mut store = RelistInPlace::new(reader.clone(), writer);
    let (listed_tx, listed) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        let mut listing = Instant::now();
        loop {
            let ev = tokio::select! {
                _ = cancel.cancelled() => break,
                ev = stream.next() => ev,
            };
            // Applied to the store first, by value (no copy of the object on top of the
            // store's own); the bookkeeping below needs only the kind of event.
            let ev = ev.map(|r| {
                r.map(|e| {
                    let seen = match &e {
                        Event::Init => Seen::ListStart,
                        Event::InitDone => Seen::ListEnd,
                        _ => Seen::Object,
                    };
                    if store.apply(e) {
                        if let Some(own) = &own_changes {
                            own.fetch_add(1, Ordering::Release);
                        }
                        changes.fetch_add(1, Ordering::Release);
                    }
                    seen
                })
            });
            match ev {
                None => break,
                Some(Ok(Seen::ListStart)) => {
                    book.on_init();
                    listing = Instant::now();
                }
                Some(Ok(Seen::ListEnd)) => {
                    listed_tx.send_replace(true);
                    book.on_listed();
                    let took = listing.elapsed();
                    tracing::debug!(source, ?took, "listed");
                    runner::record(provider.as_ref(), source, took, RunOutcome::Ok);
                }
                Some(Ok(Seen::Object)) => {}
                Some(Err(e)) => {
                    let pause = book.on_error(&e);
                    if !pause_or_cancel(pause, &cancel).await {
                        break;
                    }
                }
            }
        }
    });
    (reader, listed, task)
}

/// One shared copy of each string many objects carry (node names in pod records, addon and
/// container names, condition types of nodes): at 150,000 pods on 5,000 nodes that is 5,000
/// node names instead of 150,000 copies of them. Strings nothing holds any more (deleted
/// nodes, gone addons) are dropped whenever the set has doubled since the last sweep.
#[derive(Default)]
pub struct Interner {
    set: std::collections::HashSet<Arc<str>>,
    sweep_at: usize,
}

impl Interner {
    pub fn get(&mut self, s: &Arc<str>) -> Arc<str> {
        if let Some(x) = self.set.get(&**s) {
            return x.clone();
        }
        if self.set.len() >= self.sweep_at {
            self.set.retain(|x| Arc::strong_count(x) > 1);
            self.sweep_at = (self.set.len() * 2).max(1024);
        }
        self.set.insert(s.clone());
        s.clone()
    }

    pub fn len(&self) -> usize {
        self.set.len()
    }

    pub fn is_empty(&self) -> bool {
        self.set.is_empty()
    }

    /// The index's record of `f`, its shared strings (node; an addon pod's namespace, addon
    /// and container names and reasons) replaced by the interned copies.
    pub fn record(&mut self, mut f: PodFacts) -> PodRecord {
        f.node = f.node.map(|n| self.get(&n));
        // The restart record was made with the facts and is not shared yet; if it were, its
        // own copies would stay (correct, only not shared).
        if let Some(r) = f.restarts.as_mut().and_then(Arc::get_mut) {
            r.namespace = self.get(&r.namespace);
            r.node = f.node.clone();
            if let Some(a) = &mut r.addon {
                a.name = self.get(&a.name);
                a.version = self.get(&a.version);
            }
            for c in &mut r.containers {
                c.name = self.get(&c.name);
                c.last_reason = c.last_reason.as_ref().map(|x| self.get(x));
            }
        }
        PodRecord::of(f)
    }
}

/// Watches pods into a [`PodIndex`]: a relist updates the index in place as its pages arrive
/// and removes, at `InitDone`, the pods it did not list, so deleted pods never linger and the
/// pods are never held twice; each list is a run of `watch_pods`.
fn index_pods(
    client: kube::Client,
    namespace: Option<&str>,
    (wc, bound_only): (watcher::Config, bool),
    derive: DeriveConfig,
    shared: Shared,
    tasks: Option<Arc<dyn PodFollower>>,
) -> (PodIndex, JoinHandle<()>) {
    let Shared {
        provider,
        cancel,
        changes,
        ..
    } = shared;
    let live = Arc::new(std::sync::Mutex::new(PodTable::default()));
    let (synced_tx, synced) = tokio::sync::watch::channel(false);
    let index = PodIndex {
        live: live.clone(),
        synced,
    };
    let book = WatchBook::new(PodIndexer::SOURCE, "pods", provider.clone());
    let client = book.client(client);
    let api = match namespace {
        Some(ns) => Api::<LeanPod>::namespaced(client, ns),
        None => Api::<LeanPod>::all(client),
    };
    let stream = watcher::watcher(api, wc);
    let mut indexer = PodIndexer {
        live,
        synced: synced_tx,
        book,
        derive,
        provider,
        changes,
        tasks,
        bound_only,
        interner: Interner::default(),
        key_buf: String::new(),
        listing: Instant::now(),
        bindings: Default::default(),
        next_sweep: SystemTime::UNIX_EPOCH,
    };
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        loop {
            let ev = tokio::select! {
                _ = cancel.cancelled() => break,
                ev = stream.next() => ev,
            };
            match ev {
                None => break,
                Some(Ok(ev)) => indexer.on_event(ev),
                Some(Err(e)) => {
                    // A failed relist leaves the pods it did not reach as they were; the
                    // next list's end removes those that are gone.
                    let pause = indexer.book.on_error(&e);
                    if !pause_or_cancel(pause, &cancel).await {
                        break;
                    }
                }
            }
        }
    });
    (index, task)
}

/// The pod watch's state between its events: the index they go into and what making a
/// record of a pod needs.
struct PodIndexer {
    live: Arc<std::sync::Mutex<PodTable>>,
    synced: tokio::sync::watch::Sender<bool>,
    book: Arc<WatchBook>,
    derive: DeriveConfig,
    provider: Arc<dyn Provider>,
    changes: Arc<AtomicU64>,
    tasks: Option<Arc<dyn PodFollower>>,
    /// `--pod-scope bound`: the index holds only the pods that are bindings now, without
    /// records (nothing but the estimate reads them).
    bound_only: bool,
    interner: Interner,
    /// A pod's key, written here for each event and copied only for a pod new to the index.
    key_buf: String,
    /// When the current list began.
    listing: Instant,
    /// The bindings the hub holds from this watch, by pod key (the binding's own `pod`): only
    /// pods that are bindings now (see [`binding_of`]), so an unchanged pod costs no hub
    /// call, and pods whose binding is over leave at the next sweep.
    bindings: std::collections::HashMap<Arc<str>, Binding>,
    /// When [`PodIndexer::sweep_bindings`] next looks for bindings that are over.
    next_sweep: SystemTime,
}

impl PodIndexer {
    const SOURCE: &str = "watch_pods";

    fn lock(&self) -> std::sync::MutexGuard<'_, PodTable> {
        self.live.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Applies one event to the index (and to the pod follower, if any).
    fn on_event(&mut self, ev: Event<LeanPod>) {
        match ev {
            Event::Init => {
                self.book.on_init();
                self.listing = Instant::now();
                self.lock().begin_relist();
                self.tasks.iter().for_each(|t| t.begin_relist());
            }
            Event::InitApply(p) => {
                self.tasks.iter().for_each(|t| t.relist_apply(&p));
                self.insert(&p);
            }
            Event::InitDone => self.end_list(),
            Event::Apply(p) => {
                self.tasks.iter().for_each(|t| t.apply(&p));
                self.insert(&p);
                self.changes.fetch_add(1, Ordering::Release);
            }
            Event::Delete(p) => {
                self.tasks.iter().for_each(|t| t.delete(&p));
                self.write_key(&p);
                self.lock().remove(&self.key_buf);
                self.forget_binding();
                self.changes.fetch_add(1, Ordering::Release);
            }
        }
    }

    /// A list is complete: the pods it did not list go, and the list counts as a run.
    fn end_list(&mut self) {
        self.book.on_listed();
        let mut table = self.live.lock().unwrap_or_else(|p| p.into_inner());
        let gone = table.end_relist();
        // The bindings of the pods the list did not name go with them.
        let mut unlisted = Vec::new();
        self.bindings.retain(|k, _| {
            let listed = table.map.contains_key(&**k);
            if !listed {
                unlisted.push(k.clone());
            }
            listed
        });
        drop(table);
        unlisted
            .iter()
            .for_each(|k| self.provider.node().forget_binding(k));
        tracing::debug!(
            gone,
            bindings_gone = unlisted.len(),
            "pods not in the list removed"
        );
        self.changes.fetch_add(1, Ordering::Release);
        self.tasks.iter().for_each(|t| t.end_relist());
        let _ = self.synced.send(true);
        runner::record(
            self.provider.as_ref(),
            Self::SOURCE,
            self.listing.elapsed(),
            RunOutcome::Ok,
        );
    }

    /// Puts the pod's record (`None` for a pod that could not be read) under its key, and
    /// tells the hub when its binding changed.
    fn insert(&mut self, p: &LeanPod) {
        self.write_key(p);
        let facts = pod_facts(p, &self.derive)
            .map_err(|e| tracing::warn!(reason = "bad_pod", error = %e, "pod skipped"))
            .ok();
        match &facts {
            Some(f) => self.follow_binding(p, f),
            None => self.forget_binding(),
        }
        if self.bound_only {
            // Held while a binding, so that a relist's end finds the bindings it did not list.
            match self.bindings.contains_key(self.key_buf.as_str()) {
                true => self.lock().insert(&self.key_buf, None),
                false => self.lock().remove(&self.key_buf),
            }
            return;
        }
        let rec = facts.map(|f| self.interner.record(f));
        self.lock().insert(&self.key_buf, rec);
    }

    /// Records the binding of the pod under `key_buf` when it is new or changed, forgets it
    /// when the pod is no binding any more; an unchanged pod makes no hub call. A pod whose
    /// binding time cannot be read is a logged, counted skip (`record_dropped`).
    fn follow_binding(&mut self, p: &LeanPod, f: &PodFacts) {
        let now = SystemTime::now();
        self.sweep_bindings(now);
        let held = self.bindings.get(self.key_buf.as_str());
        // A pod without a PodScheduled time counts from when it was first seen bound.
        let seen = held.map_or(now, |b| b.bound_at);
        match binding_of(p, f, &self.key_buf, seen, now, &self.derive.estimate) {
            Ok(Some(mut b)) => {
                if held == Some(&b) {
                    return;
                }
                b.node = self.interner.get(&b.node);
                if let Some(h) = held {
                    b.pod = h.pod.clone();
                }
                self.bindings.insert(b.pod.clone(), b.clone());
                self.provider.node().record_binding(b);
            }
            Ok(None) => self.forget_binding(),
            Err(e) => {
                let node = f.node.as_deref().unwrap_or_default();
                tracing::warn!(reason = "unparsable", pod = %self.key_buf, node, error = %e, "pod's binding skipped");
                self.provider.node().record_dropped(
                    Self::SOURCE,
                    node,
                    "binding",
                    DropReason::Unparsable,
                );
                self.forget_binding();
            }
        }
    }

    /// Forgets the binding of the pod under `key_buf`, if it had one.
    fn forget_binding(&mut self) {
        if self.bindings.remove(self.key_buf.as_str()).is_some() {
            self.provider.node().forget_binding(&self.key_buf);
        }
    }

    /// At most once a minute: the bindings over by now (no event came to say so) leave the
    /// map and the hub, so the map holds only current bindings and ones over since the sweep
    /// before.
    fn sweep_bindings(&mut self, now: SystemTime) {
        if now < self.next_sweep && self.next_sweep <= now + BINDING_SWEEP {
            return;
        }
        self.next_sweep = now + BINDING_SWEEP;
        let provider = &self.provider;
        // `--pod-scope bound`: a pod whose binding is over leaves the index too.
        let mut table = self
            .bound_only
            .then(|| self.live.lock().unwrap_or_else(|p| p.into_inner()));
        self.bindings.retain(|k, b| {
            let over = b
                .shows_from
                .checked_add(OVER_AFTER)
                .is_some_and(|t| t < now);
            if over {
                provider.node().forget_binding(k);
                if let Some(t) = table.as_mut() {
                    t.remove(k);
                }
            }
            !over
        });
        drop(table);
        if self.bindings.capacity() > 4 * self.bindings.len().max(256) {
            self.bindings.shrink_to_fit();
        }
    }

    /// `namespace/name`, written into `key_buf`.
    fn write_key(&mut self, p: &LeanPod) {
        let out = &mut self.key_buf;
        out.clear();
        out.push_str(p.metadata.namespace.as_deref().unwrap_or_default());
        out.push('/');
        out.push_str(p.metadata.name.as_deref().unwrap_or_default());
    }
}

/// How often the pod watcher looks for bindings that are over.
const BINDING_SWEEP: Duration = Duration::from_secs(60);

/// Starts the reflectors and the derive loop; returns the stores and the tasks.
pub fn spawn(
    client: kube::Client,
    cfg: WatchConfig,
    provider: Arc<dyn Provider>,
    cancel: CancellationToken,
) -> (Stores, Vec<JoinHandle<()>>) {
    spawn_with_tasks(client, cfg, provider, cancel, None)
}

/// [`spawn`], with the pod watcher also keeping `tasks` (the node role's task pods).
pub fn spawn_with_tasks(
    client: kube::Client,
    cfg: WatchConfig,
    provider: Arc<dyn Provider>,
    cancel: CancellationToken,
    task_pods: Option<Arc<dyn PodFollower>>,
) -> (Stores, Vec<JoinHandle<()>>) {
    let keys: Arc<[String]> = addon_key_names(&cfg.derive).into();
    let changes = Arc::new(AtomicU64::new(0));
    let node_changes = Arc::new(AtomicU64::new(0));
    let shared = Shared {
        provider: provider.clone(),
        cancel: cancel.clone(),
        changes: changes.clone(),
        own_changes: None,
    };
    let mut tasks = Vec::new();
    let (node_wc, pod_wc, pod_scope, pod_namespaces) = watch_scopes(&cfg.scope, cfg.initial_list);
    let node_keys = node_label_keys(&cfg.derive);
    let mut node_strings = Interner::default();
    let (nodes, nodes_listed, t) = reflect(
        Api::<LeanNode>::all,
        client.clone(),
        node_wc,
        ("watch_nodes", "nodes"),
        move |n: &mut LeanNode| trim_node(n, &node_keys, &mut node_strings),
        Shared {
            own_changes: Some(node_changes.clone()),
            ..shared.clone()
        },
    );
    tasks.push(t);
    let mut pods = Vec::new();
    for ns in pod_namespaces {
        let (index, t) = index_pods(
            client.clone(),
            ns,
            (pod_wc.clone(), pod_scope == PodScope::Bound),
            cfg.derive.clone(),
            shared.clone(),
            task_pods.clone(),
        );
        pods.push(index);
        tasks.push(t);
    }
    let (daemonsets, deployments, workloads_listed) = match &cfg.scope {
        Scope::Cluster {
            namespaces,
            workloads: true,
            ..
        } => watch_workloads(
            (&client, cfg.initial_list),
            namespaces,
            &keys,
            &shared,
            &mut tasks,
        ),
        _ => (Vec::new(), Vec::new(), Vec::new()),
    };
    let stores = Stores {
        nodes,
        nodes_listed,
        workloads_listed,
        pods,
        pod_scope,
        daemonsets,
        deployments,
        changes,
        node_changes,
        derivations: Arc::new(AtomicU64::new(0)),
    };
    let derive = derive_loop(stores.clone(), cfg, provider, cancel);
    tasks.push(tokio::spawn(derive));
    (stores, tasks)
}

/// `--pod-scope bound`'s field selector: pods bound to a node and not finished (the scheduler's
/// own cache of assigned pods asks the same).
pub const BOUND_PODS: &str = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed";

/// The node and pod watches' selectors and list strategy, and which pods are watched in which
/// namespaces.
fn watch_scopes(
    scope: &Scope,
    initial_list: InitialList,
) -> (
    watcher::Config,
    watcher::Config,
    PodScope,
    Vec<Option<&str>>,
) {
    let (node_wc, pod_wc) = match scope {
        Scope::Cluster { .. } => (watcher::Config::default(), watcher::Config::default()),
        Scope::Node { name } => (
            watcher::Config::default().fields(&format!("metadata.name={name}")),
            watcher::Config::default().fields(&format!("spec.nodeName={name}")),
        ),
    };
    // The pod watches: all namespaces at once, one per workload namespace, or none.
    let (pod_scope, pod_namespaces): (PodScope, Vec<Option<&str>>) = match scope {
        Scope::Cluster {
            pods: PodScope::Workloads,
            namespaces,
            ..
        } => (
            PodScope::Workloads,
            namespaces.iter().map(|n| Some(n.as_str())).collect(),
        ),
        Scope::Cluster {
            pods: PodScope::None,
            ..
        } => (PodScope::None, Vec::new()),
        Scope::Cluster {
            pods: PodScope::Bound,
            ..
        } => (PodScope::Bound, vec![None]),
        _ => (PodScope::All, vec![None]),
    };
    let pod_wc = match pod_scope {
        PodScope::Bound => pod_wc.fields(BOUND_PODS),
        _ => pod_wc,
    };
    (
        initial_list.apply(node_wc),
        initial_list.apply(pod_wc),
        pod_scope,
        pod_namespaces,
    )
}

/// The workload stores: DaemonSets, Deployments, and each watch's "listed" channel.
type Workloads = (
    Vec<Store<DaemonSet>>,
    Vec<Store<Deployment>>,
    Vec<tokio::sync::watch::Receiver<bool>>,
);

/// The DaemonSet and Deployment watches of every workload namespace, with their "listed"
/// channels; their tasks go to `tasks`.
fn watch_workloads(
    (client, initial_list): (&kube::Client, InitialList),
    namespaces: &[String],
    keys: &Arc<[String]>,
    shared: &Shared,
    tasks: &mut Vec<JoinHandle<()>>,
) -> Workloads {
    let (mut daemonsets, mut deployments) = (Vec::new(), Vec::new());
    let mut workloads_listed = Vec::new();
    for ns in namespaces {
        let (s, l, t) = reflect(
            |c| Api::<DaemonSet>::namespaced(c, ns),
            client.clone(),
            initial_list.apply(watcher::Config::default()),
            ("watch_daemonsets", "daemonsets"),
            {
                let keys = keys.clone();
                move |d: &mut DaemonSet| trim_daemonset(d, &keys)
            },
            shared.clone(),
        );
        daemonsets.push(s);
        workloads_listed.push(l);
        tasks.push(t);
        let (s, l, t) = reflect(
            |c| Api::<Deployment>::namespaced(c, ns),
            client.clone(),
            initial_list.apply(watcher::Config::default()),
            ("watch_deployments", "deployments"),
            {
                let keys = keys.clone();
                move |d: &mut Deployment| trim_deployment(d, &keys)
            },
            shared.clone(),
        );
        deployments.push(s);
        workloads_listed.push(l);
        tasks.push(t);
    }
    (daemonsets, deployments, workloads_listed)
}

/// Once every cache is synced, derives the cluster state whenever a watcher changed something
/// (or the clock makes it due), at most once per `cfg.interval`, and records it.
async fn derive_loop(
    loop_stores: Stores,
    cfg: WatchConfig,
    provider: Arc<dyn Provider>,
    cancel: CancellationToken,
) {
    let ready = tokio::select! {
        _ = cancel.cancelled() => false,
        r = loop_stores.wait_until_ready() => r,
    };
    if !ready {
        return;
    }
    tracing::info!(
        nodes = loop_stores.nodes.len(),
        pods = loop_stores.pods.iter().map(PodIndex::len).sum::<usize>(),
        pod_scope = loop_stores.pod_scope.as_str(),
        "Kubernetes caches synced"
    );
    let mut last = DeriveSchedule::default();
    let mut kept = KeptNodes::default();
    let mut pace = runner::Pace::every(cfg.interval);
    while pace.next(&cancel).await {
        let now = SystemTime::now();
        let generation = loop_stores.generation();
        if last.due(generation, now) {
            let started = Instant::now();
            let state = loop_stores.derive_reusing(now, &cfg.derive, &mut kept);
            loop_stores.derivations.fetch_add(1, Ordering::Relaxed);
            last = DeriveSchedule::after(generation, now, &kept);
            tracing::debug!(nodes = state.nodes.len(), took = ?started.elapsed(), "cluster state derived");
            provider.cluster().record_cluster_state(state);
        }
    }
}

/// The earliest time one of `nodes` finishes warming: `done_warming` is
/// `now - created >= warming`, so it flips at `created + warming`.
fn next_warm(nodes: &[crate::model::NodeFacts], warming: Duration) -> Option<SystemTime> {
    nodes
        .iter()
        .filter(|n| !n.done_warming)
        .filter_map(|n| n.created?.checked_add(warming))
        .min()
}

/// The node facts of the last derivation, kept while no Node event came and no node finished
/// warming since (and the clock did not go back), so a derivation after pod events only shares
/// them: at 65,000 nodes making them again, and the hub and the outputs comparing them, was a
/// fifth of the cluster role's CPU under pod churn.
#[derive(Debug, Default)]
pub struct KeptNodes {
    /// The Node watcher's change count they were made at, and when.
    made: Option<(u64, SystemTime)>,
    /// The earliest time one of them finishes warming.
    next_warm: Option<SystemTime>,
    facts: Arc<Vec<crate::model::NodeFacts>>,
    /// Nodes that could not be used.
    bad: u64,
}

impl KeptNodes {
    /// The facts at Node change count `generation` and time `now`: the kept ones when still
    /// true, else `make`'s (kept from now on).
    fn get(
        &mut self,
        generation: u64,
        now: SystemTime,
        warming: Duration,
        make: impl FnOnce() -> (Vec<crate::model::NodeFacts>, u64),
    ) -> (Arc<Vec<crate::model::NodeFacts>>, u64) {
        let still = self
            .made
            .is_some_and(|(g, at)| g == generation && now >= at)
            && self.next_warm.is_none_or(|w| now < w);
        if !still {
            let (facts, bad) = make();
            *self = KeptNodes {
                made: Some((generation, now)),
                next_warm: next_warm(&facts, warming),
                facts: Arc::new(facts),
                bad,
            };
        }
        (self.facts.clone(), self.bad)
    }
}

/// When the derive loop derives again: after any watcher event, and when the clock reaches the
/// next time a derived value depends on (a node done warming); never otherwise, so an idle
/// cluster costs no per-node or per-pod work.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct DeriveSchedule {
    /// The generation and time of the last derivation (`None`: never derived).
    last: Option<(u64, SystemTime)>,
    /// The earliest time a node of that state finishes warming.
    next_warm: Option<SystemTime>,
}

impl DeriveSchedule {
    /// The schedule after deriving at `now` from the stores at `generation`, with the node
    /// facts `kept` holds then.
    pub fn after(generation: u64, now: SystemTime, kept: &KeptNodes) -> Self {
        DeriveSchedule {
            last: Some((generation, now)),
            next_warm: kept.next_warm,
        }
    }

    /// Whether the stores at `generation` must be derived again at `now`.
    pub fn due(&self, generation: u64, now: SystemTime) -> bool {
        let Some((g, at)) = self.last else {
            return true;
        };
        // A clock set back can make a node warming again: derive.
        g != generation || now < at || self.next_warm.is_some_and(|w| now >= w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::cluster::derive::cluster_state_from_facts;

    fn facts(name: &str, created: Option<u64>, done_warming: bool) -> crate::model::NodeFacts {
        crate::model::NodeFacts {
            done_warming,
            created: created.map(|s| SystemTime::UNIX_EPOCH + Duration::from_secs(s)),
            ..crate::model::NodeFacts::ready_for_test(name)
        }
    }

    /// A relist in place ends with exactly the listed pods and the sums of a table built from
    /// them alone, also after an earlier list was abandoned half-way (its marks must not save
    /// a pod the next complete list does not name), and between lists the watch's own writes
    /// survive the next relist only when listed.
    #[test]
    fn relist_in_place_keeps_exactly_the_listed_pods() {
        use crate::sources::cluster::aggregate::tests::{Rng, random_facts, record};
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        let mut table = PodTable::default();
        let fresh = |rng: &mut Rng, key: &str| {
            record(&(rng.below(10) != 0).then(|| random_facts(rng, key.into())))
        };
        // The first list.
        table.begin_relist();
        for i in 0..40 {
            let key = format!("ns/p{i}");
            let f = fresh(&mut rng, &key);
            table.insert(&key, f);
        }
        assert_eq!(table.end_relist(), 0);
        for round in 0..30 {
            // Watch events between lists.
            for _ in 0..10 {
                let key = format!("ns/p{}", rng.below(60));
                if rng.below(3) == 0 {
                    table.remove(&key);
                } else {
                    let f = fresh(&mut rng, &key);
                    table.insert(&key, f);
                }
            }
            // Sometimes a list that stops half-way (its Init, some pages, no InitDone).
            if rng.below(2) == 0 {
                table.begin_relist();
                for _ in 0..rng.below(20) {
                    let key = format!("ns/p{}", rng.below(60));
                    let f = fresh(&mut rng, &key);
                    table.insert(&key, f);
                }
            }
            // A complete relist naming a random subset of the pods.
            let mut want = PodTable::default();
            table.begin_relist();
            for i in 0..60 {
                if rng.below(3) == 0 {
                    continue;
                }
                let key = format!("ns/p{i}");
                let f = fresh(&mut rng, &key);
                want.insert(&key, f.clone());
                table.insert(&key, f);
            }
            let held = table.map.len();
            let gone = table.end_relist();
            assert_eq!(held - gone, want.map.len(), "round {round}");
            let mut got_keys: Vec<_> = table.map.keys().collect();
            let mut want_keys: Vec<_> = want.map.keys().collect();
            got_keys.sort();
            want_keys.sort();
            assert_eq!(got_keys, want_keys, "round {round}");
            for (k, e) in &want.map {
                assert_eq!(table.map[k].rec, e.rec, "round {round}: {k}");
            }
            assert_eq!(table.agg, want.agg, "round {round}: sums");
        }
    }

    /// A node update that only moves resourceVersion and the heartbeat times (kwok's and the
    /// kubelet's status heartbeats) is not stored and bumps nothing; a real change is, and so
    /// is a delete.
    #[test]
    fn a_heartbeat_only_update_changes_nothing_and_a_status_change_does() {
        use crate::k8s::lean::LeanNode;
        let node = |rv: &str, beat: &str, ready: &str| -> LeanNode {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "n1", "resourceVersion": rv},
                "status": {"conditions": [{"type": "Ready", "status": ready,
                    "lastHeartbeatTime": beat,
                    "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
            }))
            .expect("a lean node")
        };
        let ready = |r: &Store<LeanNode>| {
            let n = r.state()[0].clone();
            let c = n.status.as_ref().and_then(|s| s.conditions.clone());
            (
                n.metadata.resource_version.clone(),
                c.map(|c| c[0].status.to_string()),
            )
        };
        let (reader, writer) = reflector::store();
        let mut s = RelistInPlace::new(reader.clone(), writer);
        let first = node("1", "2026-01-01T00:00:00Z", "True");
        for ev in [Event::Init, Event::InitApply(first), Event::InitDone] {
            assert!(s.apply(ev));
        }
        let beat = node("2", "2026-01-01T00:00:20Z", "True");
        assert!(!s.apply(Event::Apply(beat)), "a heartbeat changes nothing");
        assert_eq!(ready(&reader), (Some("1".into()), Some("True".into())));
        let down = node("3", "2026-01-01T00:00:40Z", "False");
        assert!(s.apply(Event::Apply(down.clone())));
        assert_eq!(ready(&reader), (Some("3".into()), Some("False".into())));
        assert!(s.apply(Event::Delete(down)));
        assert!(reader.state().is_empty());
    }

    /// The node facts are shared with the derivation before while the Node watcher applied
    /// nothing and no node finished warming, and made again (and right) otherwise: after a
    /// Node event, when a node's warming ends, and when the clock went back.
    #[test]
    fn derivations_share_node_facts_until_a_node_event_or_warming_ends() {
        use crate::k8s::lean::LeanNode;
        let node = |name: &str, created: &str| -> LeanNode {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "creationTimestamp": created},
                "status": {"conditions": [{"type": "Ready", "status": "True"}]}
            }))
            .expect("a lean node")
        };
        let (reader, mut writer) = reflector::store::<LeanNode>();
        let (_tx, synced) = tokio::sync::watch::channel(true);
        let stores = Stores {
            nodes: reader,
            nodes_listed: synced,
            workloads_listed: Vec::new(),
            pods: Vec::new(),
            pod_scope: PodScope::None,
            daemonsets: Vec::new(),
            deployments: Vec::new(),
            changes: Default::default(),
            node_changes: Default::default(),
            derivations: Default::default(),
        };
        let event = |writer: &mut reflector::store::Writer<LeanNode>, ev: Event<LeanNode>| {
            writer.apply_watcher_event(&ev);
            stores.node_changes.fetch_add(1, Ordering::Release);
        };
        // 2026-01-01T00:00:00Z, and the young node's warming (300 s) ends at +400 s.
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_600);
        let at = |s: u64| t0 + Duration::from_secs(s);
        event(&mut writer, Event::Apply(node("b", "2025-12-01T00:00:00Z")));
        event(&mut writer, Event::Apply(node("a", "2026-01-01T00:01:40Z")));
        let cfg = DeriveConfig::default();
        let mut kept = KeptNodes::default();
        let first = stores.derive_reusing(at(200), &cfg, &mut kept);
        let names: Vec<&str> = first.nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["a", "b"], "by name");
        assert!(!first.nodes[0].done_warming && first.nodes[1].done_warming);
        let again = stores.derive_reusing(at(300), &cfg, &mut kept);
        assert!(
            Arc::ptr_eq(&first.nodes, &again.nodes),
            "no Node event: shared"
        );
        // A Node event: made again, with the new node.
        event(&mut writer, Event::Apply(node("c", "2025-12-01T00:00:00Z")));
        let third = stores.derive_reusing(at(350), &cfg, &mut kept);
        assert!(!Arc::ptr_eq(&again.nodes, &third.nodes));
        assert_eq!(third.nodes.len(), 3);
        assert_eq!(*third.nodes, *stores.derive(at(350), &cfg).nodes);
        // Node a's warming ends at +400 s: made again without any event.
        let warm = stores.derive_reusing(at(400), &cfg, &mut kept);
        assert!(!Arc::ptr_eq(&third.nodes, &warm.nodes));
        assert!(warm.nodes.iter().all(|n| n.done_warming));
        let later = stores.derive_reusing(at(500), &cfg, &mut kept);
        assert!(
            Arc::ptr_eq(&warm.nodes, &later.nodes),
            "nothing left warming"
        );
        // The clock set back makes node a warming again.
        let back = stores.derive_reusing(at(250), &cfg, &mut kept);
        assert!(!Arc::ptr_eq(&later.nodes, &back.nodes));
        assert!(!back.nodes[0].done_warming);
        assert_eq!(*back.nodes, *stores.derive(at(250), &cfg).nodes);
    }

    /// The derivation from the per-node sums equals the one from every pod's facts, after
    /// random applies and deletes, for every pod scope.
    #[test]
    fn derive_from_kept_sums_equals_derive_from_every_pod() {
        use crate::sources::cluster::aggregate::tests::{Rng, random_facts, record};
        let cfg = DeriveConfig::default();
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        for scope in [PodScope::All, PodScope::Workloads] {
            let mut rng = Rng(0x2545_F491_4F6C_DD1D);
            let indexes = if scope == PodScope::All { 1 } else { 3 };
            let (_tx, synced) = tokio::sync::watch::channel(true);
            let pods: Vec<PodIndex> = (0..indexes)
                .map(|_| PodIndex {
                    live: Default::default(),
                    synced: synced.clone(),
                })
                .collect();
            let stores = Stores {
                nodes: reflector::store::<LeanNode>().0,
                nodes_listed: synced.clone(),
                workloads_listed: Vec::new(),
                pods: pods.clone(),
                pod_scope: scope,
                daemonsets: Vec::new(),
                deployments: Vec::new(),
                changes: Default::default(),
                node_changes: Default::default(),
                derivations: Default::default(),
            };
            // Each index's pods as facts, beside the records the index keeps of them.
            let mut held: Vec<std::collections::HashMap<String, Option<PodFacts>>> =
                vec![Default::default(); indexes as usize];
            for step in 0..300 {
                let i = rng.below(indexes) as usize;
                let key = format!("ns/p{}", rng.below(30));
                if rng.below(4) == 0 {
                    pods[i].lock().remove(&key);
                    held[i].remove(&key);
                } else {
                    let f = (rng.below(10) != 0).then(|| random_facts(&mut rng, key.clone()));
                    pods[i].lock().insert(&key, record(&f));
                    held[i].insert(key, f);
                }
                let got = stores.derive(now, &cfg);
                let guards: Vec<_> = pods.iter().map(PodIndex::lock).collect();
                let bad = held
                    .iter()
                    .map(|h| h.values().filter(|f| f.is_none()).count() as u64)
                    .sum();
                // In the order the indexes hold the pods (the restart rows' order).
                let facts = guards
                    .iter()
                    .zip(&held)
                    .flat_map(|(g, h)| g.map.keys().filter_map(|k| h[&**k].as_ref()));
                let mut want = cluster_state_from_facts(
                    std::iter::empty::<&LeanNode>(),
                    facts,
                    bad,
                    std::iter::empty(),
                    std::iter::empty(),
                    now,
                    &cfg,
                );
                if scope != PodScope::All {
                    want.node_pods.clear();
                }
                want.addons_elsewhere = scope == PodScope::None;
                assert_eq!(got, want, "{scope:?} step {step}");
            }
        }
    }

    /// A hub that keeps everything in a [`crate::hub::Store`] and, besides, the binding calls.
    #[derive(Default)]
    struct Bindings {
        store: crate::hub::Store,
        calls: std::sync::Mutex<Vec<(String, Option<Binding>)>>,
    }

    impl crate::hub::NodeRecorder for Bindings {
        fn record_node_usage(&self, source: &str, sample: crate::model::UsageSample) {
            self.store.record_node_usage(source, sample)
        }
        fn record_node_window(&self, source: &str, window: crate::model::BackendWindow) {
            self.store.record_node_window(source, window)
        }
        fn record_node_capacity(&self, node: &str, capacity: crate::model::NodeCapacity) {
            self.store.record_node_capacity(node, capacity)
        }
        fn forget_node(&self, node: &str) {
            self.store.forget_node(node)
        }
        fn record_dropped(&self, source: &str, node: &str, what: &str, reason: DropReason) {
            self.store.record_dropped(source, node, what, reason)
        }
        fn record_fetch_end(&self, source: &str, successful: bool, expire_after: u32) {
            self.store
                .record_fetch_end(source, successful, expire_after)
        }
        fn record_binding(&self, b: Binding) {
            let call = (b.pod.to_string(), Some(b));
            self.calls.lock().unwrap().push(call);
        }
        fn forget_binding(&self, pod: &str) {
            self.calls.lock().unwrap().push((pod.into(), None));
        }
    }

    impl Provider for Bindings {
        fn cluster(&self) -> &dyn crate::hub::ClusterRecorder {
            &self.store
        }
        fn node(&self) -> &dyn crate::hub::NodeRecorder {
            self
        }
        fn probe(&self) -> &dyn crate::hub::ProbeRecorder {
            &self.store
        }
        fn source(&self) -> &dyn crate::hub::SourceRecorder {
            &self.store
        }
        fn sink(&self) -> &dyn crate::hub::SinkRecorder {
            &self.store
        }
        fn task(&self) -> &dyn crate::hub::TaskRecorder {
            &self.store
        }
    }

    impl Bindings {
        /// The calls so far, as (pod, recorded or forgotten), emptied.
        fn take(&self) -> Vec<(String, bool)> {
            let calls = std::mem::take(&mut *self.calls.lock().unwrap());
            calls.into_iter().map(|(p, b)| (p, b.is_some())).collect()
        }
    }

    fn indexer(hub: Arc<Bindings>, bound_only: bool) -> PodIndexer {
        let provider: Arc<dyn Provider> = hub;
        PodIndexer {
            live: Default::default(),
            synced: tokio::sync::watch::channel(false).0,
            book: WatchBook::new(PodIndexer::SOURCE, "pods", provider.clone()),
            derive: DeriveConfig::default(),
            provider,
            changes: Default::default(),
            tasks: None,
            bound_only,
            interner: Interner::default(),
            key_buf: String::new(),
            listing: Instant::now(),
            bindings: Default::default(),
            next_sweep: SystemTime::UNIX_EPOCH,
        }
    }

    /// A pod on node `n1`; `scheduled`: its PodScheduled time (seconds before now), if any;
    /// `phase` its phase.
    fn lean_pod(name: &str, scheduled: Option<u64>, phase: &str) -> LeanPod {
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let conds: Vec<_> = scheduled
            .map(|ago| {
                let at = k8s_openapi::jiff::Timestamp::from_second((now - ago) as i64).unwrap();
                serde_json::json!({"type": "PodScheduled", "status": "True",
                    "lastTransitionTime": at.to_string()})
            })
            .into_iter()
            .collect();
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"nodeName": "n1", "containers": [{}]},
            "status": {"phase": phase, "conditions": conds},
        }))
        .unwrap()
    }

    /// The hub hears of a binding only when it changes; finished, deleted and unlisted pods
    /// are forgotten once; a sweep forgets bindings that are over; the map holds only
    /// bindings; a bad condition time is a counted skip.
    #[test]
    fn the_pod_watch_tells_the_hub_of_bindings_only_when_they_change() {
        let hub = Arc::new(Bindings::default());
        let mut ix = indexer(hub.clone(), false);
        let yes = |p: &str| (format!("ns/{p}"), true);
        let no = |p: &str| (format!("ns/{p}"), false);
        ix.on_event(Event::Init);
        ix.on_event(Event::InitApply(lean_pod("a", Some(10), "Running")));
        ix.on_event(Event::InitApply(lean_pod("b", None, "Pending")));
        // Bound two hours ago and never ready: over, nothing said.
        ix.on_event(Event::InitApply(lean_pod("old", Some(7200), "Running")));
        ix.on_event(Event::InitDone);
        assert_eq!(hub.take(), [yes("a"), yes("b")]);
        // Unchanged (b keeps the time it was first seen): nothing.
        ix.on_event(Event::Apply(lean_pod("a", Some(10), "Running")));
        ix.on_event(Event::Apply(lean_pod("b", None, "Pending")));
        assert_eq!(hub.take(), []);
        // Finished: forgotten, once.
        ix.on_event(Event::Apply(lean_pod("a", Some(10), "Succeeded")));
        ix.on_event(Event::Apply(lean_pod("a", Some(10), "Succeeded")));
        ix.on_event(Event::Delete(lean_pod("a", Some(10), "Succeeded")));
        assert_eq!(hub.take(), [no("a")]);
        // A relist that does not name b: b is forgotten at its end.
        ix.on_event(Event::Apply(lean_pod("c", Some(20), "Running")));
        ix.on_event(Event::Init);
        ix.on_event(Event::InitApply(lean_pod("c", Some(20), "Running")));
        ix.on_event(Event::InitDone);
        assert_eq!(hub.take(), [yes("c"), no("b")]);
        assert_eq!(ix.bindings.len(), 1);
        // An unreadable PodScheduled time: forgotten and counted.
        let mut bad = lean_pod("c", Some(20), "Running");
        bad.status.as_mut().unwrap().conditions.as_mut().unwrap()[0].last_transition_time =
            crate::k8s::lean::TransitionTime::Unreadable;
        ix.on_event(Event::Apply(bad));
        assert_eq!(hub.take(), [no("c")]);
        let snap = hub.store.snapshot(SystemTime::now());
        assert_eq!(snap.sources[PodIndexer::SOURCE].dropped["unparsable"], 1);
        // A sweep an hour on forgets what is over by then.
        ix.on_event(Event::Apply(lean_pod("d", Some(0), "Pending")));
        assert_eq!(hub.take(), [yes("d")]);
        ix.sweep_bindings(SystemTime::now() + Duration::from_secs(60));
        assert_eq!(hub.take(), []);
        ix.sweep_bindings(SystemTime::now() + Duration::from_secs(3600));
        assert_eq!(hub.take(), [no("d")]);
        assert!(ix.bindings.is_empty());
    }

    /// `--pod-scope bound`: the hub hears of the same bindings as with every pod indexed, and
    /// the index holds only the pods that are bindings now, without records.
    #[test]
    fn a_bound_scope_index_holds_only_the_bindings_now() {
        let (every_hub, bound_hub) = (Arc::<Bindings>::default(), Arc::<Bindings>::default());
        let mut every = indexer(every_hub.clone(), false);
        let mut bound = indexer(bound_hub.clone(), true);
        let held = |ix: &PodIndexer| {
            let t = ix.lock();
            assert!(t.records().all(|r| r.is_none()), "records held");
            let mut keys: Vec<String> = t.map.keys().map(|k| k.to_string()).collect();
            keys.sort();
            keys
        };
        let mut step = |events: Vec<Event<LeanPod>>, want: &[&str]| {
            for ev in events {
                every.on_event(ev.clone());
                bound.on_event(ev);
            }
            assert_eq!(every_hub.take(), bound_hub.take());
            assert_eq!(held(&bound), want);
        };
        let pod = lean_pod;
        step(
            vec![
                Event::Init,
                Event::InitApply(pod("a", Some(10), "Running")),
                Event::InitApply(pod("b", None, "Pending")),
                // Bound two hours ago and never ready: no binding now.
                Event::InitApply(pod("old", Some(7200), "Running")),
                Event::InitDone,
            ],
            &["ns/a", "ns/b"],
        );
        // Finished: out of the index.
        step(
            vec![Event::Apply(pod("a", Some(10), "Succeeded"))],
            &["ns/b"],
        );
        step(
            vec![Event::Apply(pod("d", Some(0), "Pending"))],
            &["ns/b", "ns/d"],
        );
        // A relist that does not name d: d goes.
        step(
            vec![
                Event::Init,
                Event::InitApply(pod("b", None, "Pending")),
                Event::InitDone,
            ],
            &["ns/b"],
        );
        step(vec![Event::Delete(pod("b", None, "Pending"))], &[]);
        // A sweep an hour on: bindings over leave the index with no event.
        step(vec![Event::Apply(pod("e", Some(0), "Pending"))], &["ns/e"]);
        bound.sweep_bindings(SystemTime::now() + Duration::from_secs(3600));
        assert_eq!(bound_hub.take(), [("ns/e".to_string(), false)]);
        assert!(held(&bound).is_empty());
    }

    #[test]
    fn derive_schedule_follows_events_and_the_warming_clock_only() {
        let t = |s: u64| SystemTime::UNIX_EPOCH + Duration::from_secs(s);
        let cfg = DeriveConfig::default(); // 300 s warming
        assert!(DeriveSchedule::default().due(0, t(0)), "never derived");
        let kept_of = |nodes: Vec<crate::model::NodeFacts>| {
            let mut kept = KeptNodes::default();
            kept.get(0, t(1_200), cfg.warming, || (nodes, 0));
            kept
        };
        let kept = kept_of(vec![
            facts("old", Some(0), true),
            facts("young", Some(1_000), false),
            facts("younger", Some(1_100), false),
            facts("no-time", None, false),
        ]);
        let s = DeriveSchedule::after(7, t(1_200), &kept);
        // Nothing changed: no derivation, however many ticks, until "young" is done warming.
        for now in [1_200, 1_210, 1_299] {
            assert!(!s.due(7, t(now)), "idle at {now}");
        }
        assert!(
            s.due(7, t(1_300)),
            "young is done warming at created + 300 s"
        );
        assert!(s.due(8, t(1_201)), "an event");
        assert!(s.due(7, t(1_199)), "the clock went back");
        // Every node done warming (or without a creation time): only events count.
        let kept = kept_of(vec![
            facts("old", Some(0), true),
            facts("no-time", None, false),
        ]);
        let s = DeriveSchedule::after(7, t(1_200), &kept);
        assert!(!s.due(7, t(1_000_000)));
    }

    #[test]
    fn interner_shares_one_copy_and_sweeps_unused_names() {
        let mut i = Interner::default();
        let a1: Arc<str> = "node-1".into();
        let a2: Arc<str> = "node-1".into();
        let s1 = i.get(&a1);
        let s2 = i.get(&a2);
        assert!(Arc::ptr_eq(&s1, &s2));
        assert!(Arc::ptr_eq(&s1, &a1), "the first copy is the one kept");
        drop((a1, a2, s1, s2));
        // 2,000 one-off names (Jobs): the set is swept instead of growing with them.
        let keep = i.get(&Arc::from("kept"));
        for n in 0..2000 {
            let _ = i.get(&Arc::from(format!("job-{n}").as_str()));
        }
        assert!(i.len() < 1100, "{} names held", i.len());
        assert!(Arc::ptr_eq(&keep, &i.get(&Arc::from("kept"))));
    }

    #[test]
    fn trimming_keeps_the_pool_and_zone_labels_and_shares_strings() {
        let json = |name: &str| {
            serde_json::json!({
                "metadata": {"name": name, "labels": {
                    "cloud.google.com/gke-nodepool": "pool-1",
                    "topology.kubernetes.io/zone": "zone-a",
                    "kubernetes.io/hostname": name,
                    "beta.kubernetes.io/arch": "amd64",
                }},
                "status": {
                    "conditions": [{"type": "Ready", "status": "True"}],
                    "addresses": [{"type": "InternalIP", "address": format!("10.0.0.{}", name.len())}],
                },
            })
        };
        let keys = node_label_keys(&DeriveConfig::default());
        let mut interner = Interner::default();
        let mut a: LeanNode = serde_json::from_value(json("a")).unwrap();
        let mut b: LeanNode = serde_json::from_value(json("bb")).unwrap();
        assert_eq!(a.labels.len(), 4);
        trim_node(&mut a, &keys, &mut interner);
        trim_node(&mut b, &keys, &mut interner);
        let kept: Vec<_> = a.labels.iter().map(|(k, v)| (&**k, &**v)).collect();
        assert_eq!(
            kept,
            [
                ("cloud.google.com/gke-nodepool", "pool-1"),
                ("topology.kubernetes.io/zone", "zone-a")
            ]
        );
        assert!(
            Arc::ptr_eq(&a.labels[0].1, &b.labels[0].1),
            "one copy of the pool name"
        );
        let cond =
            |n: &LeanNode| n.status.as_ref().unwrap().conditions.as_ref().unwrap()[0].clone();
        assert!(Arc::ptr_eq(&cond(&a).status, &cond(&b).status));
        let f = super::super::derive::node_facts(&a, SystemTime::now(), &DeriveConfig::default())
            .unwrap();
        assert_eq!(
            (f.placement.pool.as_str(), f.placement.zone.as_str()),
            ("pool-1", "zone-a")
        );
        assert!(f.ready);
    }
}
