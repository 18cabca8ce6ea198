//! The one [`Provider`] implementation: latest values, usage rings and counters behind a mutex,
//! turned into an immutable [`Snapshot`] on every tick.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use super::validate::{self, DropReason};
use super::window::{DEFAULT_CAP, HourMax, MIN_COVERAGE, Rings};
use super::{
    ClusterRecorder, NodeRecorder, ProbeRecorder, Provider, RunOutcome, SinkRecorder,
    SourceRecorder, TaskRecorder,
};
use crate::model::PROBE_BUCKETS;
use crate::model::{
    BackendStat, BackendWindow, Binding, BoundMap, BoundPod, BoundPods, ClusterInfo, ClusterState,
    NodeCapacity, NodeLoad, NodeMap, ProbeOutcome, ProbeState, Resource, ResourceMap, SinkPush,
    SinkStatus, Snapshot, SourceStatus, UsageSample, Window, WindowStats, unix_seconds,
};

#[derive(Debug)]
struct NodeState {
    /// The node's name, shared with the published [`NodeMap`] (no copy per snapshot).
    key: Arc<str>,
    /// The source's name, one copy for every node of that source (see [`interned`]).
    source: Arc<str>,
    /// Newest time any data of this node stands for.
    latest_at: SystemTime,
    /// Newest ring sample.
    sampled_at: Option<SystemTime>,
    latest: ResourceMap<f64>,
    /// Usage samples of every resource, one row per sample time.
    rings: Rings,
    /// The largest CPU and memory sample of each five-minute slot of the last hour.
    hour: HourMax,
    /// Backend-aggregated values per window, one per (name, operator), in first-seen order.
    backend: BTreeMap<Window, Vec<BackendStat>>,
    capacity: Option<NodeCapacity>,
    /// A cluster state has listed this node: when one no longer does, it was deleted.
    in_cluster: bool,
    /// A value of this node was accepted since its source's last fetch ended.
    reported: bool,
    /// Successful fetches of its source in a row that gave it no valid value.
    missed: u32,
    /// The [`NodeLoad`] handed out last; the next snapshot shares it (the same `Arc`) unless
    /// something of this node changed, so outputs can tell unchanged nodes by pointer.
    load: Option<Arc<NodeLoad>>,
    /// A value of this node was recorded since `load` was made.
    dirty: bool,
}

impl NodeState {
    fn new(name: &str, source: Arc<str>, at: SystemTime) -> Self {
        NodeState {
            key: Arc::from(name),
            source,
            latest_at: at,
            sampled_at: None,
            latest: ResourceMap::new(),
            rings: Rings::new(Window::FifteenMinutes.duration(), DEFAULT_CAP),
            hour: HourMax::default(),
            backend: BTreeMap::new(),
            capacity: None,
            in_cluster: false,
            reported: false,
            missed: 0,
            load: None,
            dirty: true,
        }
    }

    /// This node's load for a snapshot: the previous one when nothing was recorded since, or
    /// when what was recorded left it equal (a backend re-reporting the same sample).
    fn load(&mut self, scratch: &mut Vec<f64>) -> Arc<NodeLoad> {
        if let Some(load) = self.load.as_ref().filter(|_| !self.dirty) {
            return load.clone();
        }
        self.dirty = false;
        let fresh = node_load(self, scratch);
        match &self.load {
            Some(old) if **old == fresh => old.clone(),
            _ => {
                let fresh = Arc::new(fresh);
                self.load = Some(fresh.clone());
                fresh
            }
        }
    }
}

/// The state of node `name`, made when the hub has none (boxed and keyed by its shared name;
/// looked up by `&str` first, so a known node's name is not copied), and whether it is new.
fn state_of<'a>(
    nodes: &'a mut HashMap<Arc<str>, Box<NodeState>>,
    name: &str,
    source: &Arc<str>,
    at: SystemTime,
) -> Option<(&'a mut NodeState, bool)> {
    let new = !nodes.contains_key(name);
    if new {
        let st = Box::new(NodeState::new(name, source.clone(), at));
        nodes.insert(st.key.clone(), st);
    }
    nodes.get_mut(name).map(|st| (&mut **st, new))
}

/// The one shared copy of a source's name (a handful of sources; every node state and every
/// load handed out shares it instead of holding its own `String`: 65,000 of them).
fn interned(names: &mut Vec<Arc<str>>, source: &str) -> Arc<str> {
    match names.iter().find(|n| ***n == *source) {
        Some(n) => n.clone(),
        None => {
            let n: Arc<str> = Arc::from(source);
            names.push(n.clone());
            n
        }
    }
}

/// How long a node the cluster deleted is refused usage (a backend keeps reporting a gone host
/// for up to its longest window: Prometheus' `avg_over_time(...[15m])`).
const TOMBSTONE_FOR: Duration = Duration::from_secs(15 * 60);
/// Whether usage of `node` is refused at `now`: the cluster deleted it less than
/// [`TOMBSTONE_FOR`] ago. Checked against the clock, not only swept by the next cluster state:
/// the watchers record a state only when something changed.
fn tombstoned(gone: &HashMap<String, SystemTime>, node: &str, now: SystemTime) -> bool {
    gone.get(node)
        .is_some_and(|at| now.duration_since(*at).unwrap_or_default() < TOMBSTONE_FOR)
}

/// Per-node warnings about dropped values per source run; the rest are summed up in one line.
const DROP_LOG_NODES: usize = 20;

/// Which nodes had a dropped value logged in the current run of a source.
#[derive(Debug, Default)]
struct DropLog {
    logged: HashSet<String>,
    suppressed_nodes: u64,
    suppressed_values: u64,
}

#[derive(Debug, Default)]
struct Inner {
    cluster: ClusterInfo,
    cluster_state: Option<Arc<ClusterState>>,
    /// Keyed by the node's shared name; each state boxed: at 65,000 nodes an inline state
    /// (about 480 bytes) made the table's free slots alone tens of megabytes.
    nodes: HashMap<Arc<str>, Box<NodeState>>,
    /// The node map the last snapshot handed out; the next one shares it (the same `Arc`)
    /// when no node changed, and otherwise patches only the nodes that did.
    published: Arc<NodeMap>,
    /// A node was added or marked dirty since `published` was made.
    nodes_changed: bool,
    /// A node may have been removed since `published` was made.
    nodes_removed: bool,
    /// The estimates of just-bound pods the last snapshot handed out: only nodes of
    /// `published` with one. Shared by the next snapshot unless an estimate changed.
    bound_published: Arc<BoundMap>,
    /// Nodes whose estimate is to be made again for the next snapshot: a pod bound or gone,
    /// or a sample that may show some of its pods.
    bound_dirty: HashSet<Arc<str>>,
    sources: BTreeMap<String, SourceStatus>,
    /// Source names shared by node states (see [`interned`]).
    source_names: Vec<Arc<str>>,
    probes: BTreeMap<(String, String), ProbeState>,
    sinks: BTreeMap<String, SinkStatus>,
    leadership: Option<crate::model::Leadership>,
    /// Nodes the cluster deleted, with when: usage for them is refused until they return.
    gone: HashMap<String, SystemTime>,
    /// Per node, the pods bound to it whose use its samples may not show yet.
    bindings: HashMap<Arc<str>, Vec<Binding>>,
    /// The node each pod of `bindings` is bound to.
    bound_to: HashMap<Arc<str>, Arc<str>>,
    /// Per source: dropped-value logging of its current run.
    drop_log: HashMap<String, DropLog>,
    tasks: Option<Arc<crate::model::TaskSet>>,
    platform: Option<Arc<crate::model::Platform>>,
    pressure: Option<Arc<crate::model::NodePressure>>,
    task_perf: Option<Arc<crate::model::TaskPerfSet>>,
    selection: Arc<crate::model::Selection>,
    ticks: u64,
    last_tick_duration: Duration,
    alive_tasks: u64,
}

/// The hub's state. Cheap to share behind an `Arc`; every method holds the lock only briefly.
#[derive(Debug, Default)]
pub struct Store {
    inner: Mutex<Inner>,
}

impl Store {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave the data half-written in a way that matters
        // more than stopping every output, so keep serving what is there.
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Notes how long the last tick took; shown in the next snapshot.
    pub fn record_tick(&self, took: Duration) {
        self.lock().last_tick_duration = took;
    }

    /// Notes how many tasks the async runtime had alive at the end of the last tick; shown in
    /// the next snapshot.
    pub fn record_alive_tasks(&self, tasks: u64) {
        self.lock().alive_tasks = tasks;
    }

    /// `--watcher-max-age`, for the outputs' count of stale nodes (set once at start).
    pub fn set_stale_after(&self, stale_after: Option<Duration>) {
        let mut inner = self.lock();
        let mut sel = (*inner.selection).clone();
        sel.stale_after = stale_after;
        inner.selection = Arc::new(sel);
    }

    /// The families the metric allow/denylist leaves out of every output (set once at start).
    pub fn set_excluded_families(&self, excluded: std::collections::BTreeSet<String>) {
        let mut inner = self.lock();
        let mut sel = (*inner.selection).clone();
        sel.excluded_families = excluded;
        inner.selection = Arc::new(sel);
    }

    /// The immutable picture at `now`. Each call counts as one tick.
    pub fn snapshot(&self, now: SystemTime) -> Snapshot {
        let mut inner = self.lock();
        inner.ticks += 1;
        let nodes = publish_nodes(&mut inner);
        let bound = publish_bound(&mut inner);
        let sources_synced = inner.sources.values().all(SourceStatus::synced);
        Snapshot {
            generated_at: now,
            tick: inner.ticks,
            last_tick_duration: inner.last_tick_duration,
            alive_tasks: inner.alive_tasks,
            sources_synced,
            cluster: inner.cluster.clone(),
            cluster_state: inner.cluster_state.clone(),
            nodes,
            bound,
            sources: inner.sources.clone(),
            probes: inner.probes.values().cloned().collect(),
            sinks: inner.sinks.clone(),
            leadership: inner.leadership.clone(),
            tasks: inner.tasks.clone(),
            platform: inner.platform.clone(),
            pressure: inner.pressure.clone(),
            task_perf: inner.task_perf.clone(),
            selection: inner.selection.clone(),
        }
    }
}

/// The node map for the next snapshot: the published one when no node changed, else that map
/// with the changed nodes replaced and the removed ones taken out (a copy of the map's spine
/// only when something differs, while an older snapshot still holds it; names are shared).
fn publish_nodes(inner: &mut Inner) -> Arc<NodeMap> {
    let Inner {
        nodes,
        published,
        nodes_changed,
        nodes_removed,
        bindings,
        bound_published,
        bound_dirty,
        ..
    } = inner;
    let mut scratch = Vec::new();
    if std::mem::take(nodes_removed) && published.keys().any(|k| !nodes.contains_key(&**k)) {
        Arc::make_mut(published).retain(|k, _| nodes.contains_key(&**k));
        if bound_published.keys().any(|k| !nodes.contains_key(&**k)) {
            Arc::make_mut(bound_published).retain(|k, _| nodes.contains_key(&**k));
        }
    }
    if std::mem::take(nodes_changed) {
        let fresh: Vec<(Arc<str>, Arc<NodeLoad>)> = nodes
            .values_mut()
            .filter(|st| st.dirty || st.load.is_none())
            .filter_map(|st| {
                // A new sample may show some of its bound pods; a new node may have some.
                if bindings.contains_key(&st.key) || bound_published.contains_key(&st.key) {
                    bound_dirty.insert(st.key.clone());
                }
                let load = st.load(&mut scratch);
                let same = published
                    .get(&st.key)
                    .is_some_and(|p| Arc::ptr_eq(p, &load));
                (!same).then(|| (st.key.clone(), load))
            })
            .collect();
        if !fresh.is_empty() {
            Arc::make_mut(published).extend(fresh);
        }
    }
    published.clone()
}

/// The estimates for the next snapshot: the published map when none is to be made again,
/// else that map with the nodes of `bound_dirty` made again (a copy of the small map's spine
/// only when an estimate differs). Only nodes the hub holds have one.
fn publish_bound(inner: &mut Inner) -> Arc<BoundMap> {
    let Inner {
        nodes,
        bindings,
        bound_to,
        bound_published,
        bound_dirty,
        ..
    } = inner;
    for key in bound_dirty.drain() {
        let sampled = nodes.get(&key).map(|st| st.sampled_at);
        let bound = match (sampled, bindings.get_mut(&key)) {
            (Some(sampled), Some(held)) => {
                let bound = bound_pods(held, sampled);
                // The pods its samples show now are no one's bindings any more.
                if let Some(at) = sampled {
                    drop_bindings(held, bound_to, |b| b.shows_from <= at);
                }
                if held.is_empty() {
                    bindings.remove(&key);
                }
                bound
            }
            _ => None,
        };
        match (bound, bound_published.get(&key)) {
            (None, None) => {}
            (Some(new), Some(old)) if *new == **old => {}
            (Some(new), _) => {
                Arc::make_mut(bound_published).insert(key, new);
            }
            (None, Some(_)) => {
                Arc::make_mut(bound_published).remove(&key);
            }
        }
    }
    bound_published.clone()
}

/// Counts a value that never reaches an output, and logs it once per node per source run
/// (after [`DROP_LOG_NODES`] nodes, only a summary at the end of the run).
fn count_dropped(
    inner: &mut Inner,
    source: &str,
    node: &str,
    what: &str,
    value: Option<f64>,
    reason: DropReason,
) {
    let status = inner.sources.entry(source.to_string()).or_default();
    status.name = source.to_string();
    *status
        .dropped
        .entry(reason.as_str().to_string())
        .or_default() += 1;
    let log = inner.drop_log.entry(source.to_string()).or_default();
    if log.logged.contains(node) {
        return;
    }
    if log.logged.len() >= DROP_LOG_NODES {
        log.suppressed_values += 1;
        if log.logged.insert(node.to_string()) {
            log.suppressed_nodes += 1;
        }
        return;
    }
    log.logged.insert(node.to_string());
    let reason = reason.as_str();
    match value {
        Some(value) => tracing::warn!(source, node, what, value, reason, "dropped a value"),
        None => tracing::warn!(source, node, what, reason, "dropped a value"),
    }
}

/// Ends a source run's dropped-value logging: one summary line for the nodes not logged.
fn end_drop_log(inner: &mut Inner, source: &str) {
    let Some(log) = inner.drop_log.remove(source) else {
        return;
    };
    if log.suppressed_nodes > 0 {
        tracing::warn!(
            source,
            nodes = log.suppressed_nodes,
            values = log.suppressed_values,
            "dropped values of more nodes (not logged one by one)"
        );
    }
}

/// How long a binding is kept for a node whose samples never show it (a node without usage).
const BINDING_KEPT: Duration = Duration::from_secs(30 * 60);

/// Takes pod `pod`'s binding out of the node it was bound to, if any.
fn unbind(inner: &mut Inner, pod: &str) {
    let Some(node) = inner.bound_to.remove(pod) else {
        return;
    };
    if let Some(held) = inner.bindings.get_mut(&node) {
        held.retain(|b| &*b.pod != pod);
        if held.is_empty() {
            inner.bindings.remove(&node);
        }
    }
    mark_bound_dirty(inner, &node);
}

/// Takes the bindings `gone` says out of `held` (one node's), and their pods out of `bound_to`.
fn drop_bindings(
    held: &mut Vec<Binding>,
    bound_to: &mut HashMap<Arc<str>, Arc<str>>,
    gone: impl Fn(&Binding) -> bool,
) {
    held.retain(|b| {
        let drop = gone(b);
        if drop {
            bound_to.remove(&b.pod);
        }
        !drop
    });
}

/// Node `node`'s estimate of its bound pods is to be made again for the next snapshot (if
/// the hub holds the node; a node's first load marks it too).
fn mark_bound_dirty(inner: &mut Inner, node: &str) {
    if let Some(st) = inner.nodes.get(node) {
        inner.bound_dirty.insert(st.key.clone());
    }
}

/// Validates a capacity; counts each impossible field under `source`.
fn check_capacity(inner: &mut Inner, source: &str, node: &str, c: NodeCapacity) -> bool {
    let mut ok = true;
    if let Err(r) = validate::cpu_cores(c.cpu_cores) {
        count_dropped(inner, source, node, "cpu capacity", Some(c.cpu_cores), r);
        ok = false;
    }
    if let Err(r) = validate::memory_bytes(c.memory_bytes) {
        count_dropped(
            inner,
            source,
            node,
            "memory capacity",
            Some(c.memory_bytes),
            r,
        );
        ok = false;
    }
    ok
}

fn node_load(st: &NodeState, scratch: &mut Vec<f64>) -> NodeLoad {
    // Held with room for exactly the windows (a slice, not a `Vec` of spare capacity): two
    // snapshots are alive while one is rendered.
    let windows: Arc<[WindowStats]> = Window::ALL
        .iter()
        .filter_map(|&w| window_stats(st, w, scratch))
        .collect();
    let mut hour_max = ResourceMap::new();
    let mut hour_coverage: f32 = 0.0;
    for r in [Resource::Cpu, Resource::Memory] {
        if let Some((max, coverage)) = st.hour.max(r) {
            hour_coverage = hour_coverage.max(coverage);
            if f64::from(coverage) >= MIN_COVERAGE {
                hour_max.insert(r, max);
            }
        }
    }
    NodeLoad {
        node: st.key.clone(),
        source: st.source.clone(),
        latest_at: st.latest_at,
        latest: st.latest.clone(),
        windows,
        capacity: st.capacity,
        hour_max,
        hour_coverage,
    }
}

/// One window's statistics of node `st`, or `None` when it has no sample in it.
fn window_stats(st: &NodeState, w: Window, scratch: &mut Vec<f64>) -> Option<WindowStats> {
    let stats: ResourceMap<_> = Resource::ALL
        .into_iter()
        .filter_map(|r| st.rings.stat(r, w.duration()).map(|s| (r, s)))
        .collect();
    let backend = st.backend.get(&w).cloned().unwrap_or_default();
    let ring_end = st.sampled_at.filter(|_| !stats.is_empty());
    let end = ring_end
        .into_iter()
        .chain(backend.iter().map(|b| b.end))
        .min()?;
    let coverage = if stats.is_empty() {
        0.0
    } else {
        st.rings.coverage(w.duration())
    };
    let quantiles = if coverage >= MIN_COVERAGE {
        [Resource::Cpu, Resource::Memory]
            .into_iter()
            .filter_map(|r| Some((r, st.rings.quantiles(r, w.duration(), scratch)?)))
            .collect()
    } else {
        ResourceMap::new()
    };
    Some(WindowStats {
        window: w,
        start: end.checked_sub(w.duration()).unwrap_or(end),
        end,
        stats,
        backend,
        coverage: coverage as f32,
        quantiles,
    })
}

/// The estimate of the pods of `bindings` that a sample taken at `sampled` cannot show (all of
/// them when the node has no sample yet); `None` when there are none.
fn bound_pods(bindings: &[Binding], sampled: Option<SystemTime>) -> Option<Arc<BoundPods>> {
    let mut pods: Vec<BoundPod> = bindings
        .iter()
        .filter(|b| sampled.is_none_or(|at| b.shows_from > at))
        .map(|b| BoundPod {
            bound_at: b.bound_at,
            cpu_cores: b.cpu_cores,
            memory_bytes: b.memory_bytes,
        })
        .collect();
    if pods.is_empty() {
        return None;
    }
    pods.sort_by_key(|p| p.bound_at);
    Some(Arc::new(BoundPods { pods }))
}

impl ClusterRecorder for Store {
    fn record_cluster_info(&self, info: ClusterInfo) {
        self.lock().cluster = info;
    }

    fn record_shard(&self, shard: Option<crate::model::Shard>) {
        let mut inner = self.lock();
        if inner.selection.shard != shard {
            let mut sel = (*inner.selection).clone();
            sel.shard = shard;
            inner.selection = Arc::new(sel);
        }
    }

    fn record_cluster_state(&self, state: ClusterState) {
        let now = SystemTime::now();
        let mut inner = self.lock();
        let inner = &mut *inner;
        // The same Nodes as the state before (the same `Arc`: only pods changed), and every
        // node the hub holds was listed by it: nothing was deleted or is to be marked listed,
        // so only tombstones may have run out (the 65,000 names are not gone through).
        let same_nodes = inner
            .cluster_state
            .as_ref()
            .is_some_and(|p| Arc::ptr_eq(&p.nodes, &state.nodes));
        if same_nodes && inner.nodes.values().all(|st| st.in_cluster) {
            let ran_out =
                |at: &SystemTime| now.duration_since(*at).unwrap_or_default() >= TOMBSTONE_FOR;
            inner.gone.retain(|_, at| !ran_out(at));
        } else {
            note_listed_nodes(inner, &state, now);
        }
        // An unchanged state (the watchers derive one every interval, changed or not) keeps
        // the previous `Arc`, so outputs can skip it by pointer.
        if inner.cluster_state.as_deref() != Some(&state) {
            inner.cluster_state = Some(Arc::new(state));
        }
    }
}

/// What a cluster state's node list means for the hub's nodes: tombstones for the nodes
/// deleted since the state before, the listed ones marked so.
fn note_listed_nodes(inner: &mut Inner, state: &ClusterState, now: SystemTime) {
    let listed: HashSet<&str> = state.nodes.iter().map(|n| n.name.as_str()).collect();
    inner.gone.retain(|name, at| {
        !listed.contains(name.as_str())
            && now.duration_since(*at).unwrap_or_default() < TOMBSTONE_FOR
    });
    // A node a cluster state listed before and this one does not was deleted (by a watch
    // event or found missing on a relist). A node no state has listed yet stays: a
    // backend may report a new node a moment before the Node watcher has it, and a
    // backend's host names need not be Node names at all (those expire by fetches).
    let gone = &mut inner.gone;
    // Deleted even when the hub had already let its usage go (a fetch that stopped seeing
    // the Node expired it first): a backend still reporting the host must not bring it back.
    if let Some(previous) = &inner.cluster_state {
        for n in previous.nodes.iter() {
            if !listed.contains(n.name.as_str()) {
                gone.insert(n.name.clone(), now);
            }
        }
    }
    let before = inner.nodes.len();
    inner.nodes.retain(|name, st| {
        if listed.contains(&**name) {
            st.in_cluster = true;
            true
        } else if st.in_cluster || gone.contains_key(&**name) {
            tracing::info!(node = %name, source = %st.source, "node deleted; its usage leaves every output");
            gone.insert(name.to_string(), now);
            false
        } else {
            true
        }
    });
    inner.nodes_removed |= inner.nodes.len() != before;
}

impl NodeRecorder for Store {
    fn record_node_usage(&self, source: &str, sample: UsageSample) {
        let mut inner = self.lock();
        if tombstoned(&inner.gone, &sample.node, SystemTime::now()) {
            tracing::debug!(source, node = %sample.node, "usage of a deleted node ignored");
            return;
        }
        let mut dropped: Vec<(Resource, f64, DropReason)> = Vec::new();
        let t = unix_seconds(sample.at);
        let inner = &mut *inner;
        let src = interned(&mut inner.source_names, source);
        let Some((st, new)) = state_of(&mut inner.nodes, &sample.node, &src, sample.at) else {
            return;
        };
        inner.nodes_changed |= new;
        // Dirty only when something the node's load is made of changed: a backend reporting
        // the very same sample again (metrics-server between two of its scrapes) leaves the
        // load, and the work of making it, as they were.
        let mut changed = false;
        if *st.source != *source {
            st.source = src.clone();
            changed = true;
        }
        let (latest_at, sampled_at) = (
            st.latest_at.max(sample.at),
            Some(st.sampled_at.map_or(sample.at, |t| t.max(sample.at))),
        );
        changed |= latest_at != st.latest_at || sampled_at != st.sampled_at;
        (st.latest_at, st.sampled_at) = (latest_at, sampled_at);
        for (resource, raw) in sample.values {
            let value = match validate::usage(resource, raw) {
                Ok(v) => v,
                Err(reason) => {
                    dropped.push((resource, raw, reason));
                    continue;
                }
            };
            st.reported = true;
            let old = st.latest.insert(resource, value);
            changed |= old.is_none_or(|o| o.to_bits() != value.to_bits());
            changed |= st.rings.push(resource, t, value);
            changed |= st.hour.push(resource, t, value);
        }
        st.dirty |= changed;
        inner.nodes_changed |= changed;
        for (resource, value, reason) in dropped {
            let what = resource.as_str();
            count_dropped(inner, source, &sample.node, what, Some(value), reason);
        }
    }

    fn record_node_window(&self, source: &str, w: BackendWindow) {
        let mut inner = self.lock();
        if tombstoned(&inner.gone, &w.node, SystemTime::now()) {
            tracing::debug!(source, node = %w.node, "usage of a deleted node ignored");
            return;
        }
        let mut dropped = Vec::new();
        inner.nodes_changed = true;
        let src = interned(&mut inner.source_names, source);
        let Some((st, _)) = state_of(&mut inner.nodes, &w.node, &src, w.end) else {
            return;
        };
        st.dirty = true;
        st.source = src;
        st.latest_at = st.latest_at.max(w.end);
        let served = st.backend.entry(w.window).or_default();
        for mut value in w.values {
            match validate::backend(&value) {
                Ok(v) => value.value = v,
                Err(reason) => {
                    dropped.push((value.name, value.value, reason));
                    continue;
                }
            }
            st.reported = true;
            let stat = BackendStat {
                value,
                start: w.start,
                end: w.end,
            };
            let same = |b: &&mut BackendStat| {
                b.value.name == stat.value.name && b.value.operator == stat.value.operator
            };
            match served.iter_mut().find(same) {
                Some(old) => *old = stat,
                None => served.push(stat),
            }
        }
        for (name, value, reason) in dropped {
            count_dropped(&mut inner, source, &w.node, &name, Some(value), reason);
        }
    }

    fn record_binding(&self, binding: Binding) {
        let mut inner = self.lock();
        let inner = &mut *inner;
        unbind(inner, &binding.pod);
        let node = binding.node.clone();
        let Inner {
            bindings, bound_to, ..
        } = &mut *inner;
        let held = bindings.entry(node.clone()).or_default();
        // A node that never reports usage keeps no binding past half an hour of it.
        let old = SystemTime::now() - BINDING_KEPT;
        drop_bindings(held, bound_to, |b| b.shows_from <= old);
        bound_to.insert(binding.pod.clone(), node.clone());
        held.push(binding);
        mark_bound_dirty(inner, &node);
    }

    fn forget_binding(&self, pod: &str) {
        let mut inner = self.lock();
        unbind(&mut inner, pod);
    }

    fn record_node_capacity(&self, node: &str, capacity: NodeCapacity) {
        let mut inner = self.lock();
        let source = match inner.nodes.get(node) {
            None => return,
            // The capacity it holds already (held only after it passed the check, so finite
            // and positive: `==` is exact): nothing to check, count or copy again (a backend
            // sends every node's on every fetch).
            Some(st) if st.capacity == Some(capacity) => return,
            Some(st) => st.source.clone(),
        };
        let ok = check_capacity(&mut inner, &source, node, capacity);
        if let Some(st) = inner.nodes.get_mut(node) {
            let capacity = ok.then_some(capacity);
            let changed = st.capacity != capacity;
            st.dirty |= changed;
            st.capacity = capacity;
            inner.nodes_changed |= changed;
        }
    }

    fn record_node_pressure(&self, pressure: crate::model::NodePressure) {
        self.lock().pressure = Some(Arc::new(pressure));
    }

    fn forget_node(&self, node: &str) {
        let mut inner = self.lock();
        inner.nodes_removed |= inner.nodes.remove(node).is_some();
    }

    fn record_dropped(&self, source: &str, node: &str, what: &str, reason: DropReason) {
        count_dropped(&mut self.lock(), source, node, what, None, reason);
    }

    fn record_fetch_end(&self, source: &str, successful: bool, expire_after: u32) {
        let mut inner = self.lock();
        end_drop_log(&mut inner, source);
        let mut expired = 0u64;
        let inner = &mut *inner;
        inner.nodes.retain(|name, st| {
            if *st.source != *source {
                return true;
            }
            if std::mem::take(&mut st.reported) {
                st.missed = 0;
                return true;
            }
            if !successful {
                return true;
            }
            st.missed += 1;
            if expire_after > 0 && st.missed >= expire_after {
                tracing::info!(source, node = %name, fetches = st.missed, "node no longer reported; its usage leaves every output");
                expired += 1;
                return false;
            }
            true
        });
        inner.nodes_removed |= expired > 0;
        if expired > 0 {
            let status = inner.sources.entry(source.to_string()).or_default();
            status.name = source.to_string();
            status.expired += expired;
        }
    }
}

impl ProbeRecorder for Store {
    fn record_probe_outcome(&self, o: ProbeOutcome) {
        let mut inner = self.lock();
        let key = (o.probe.clone(), o.target.clone());
        let st = inner.probes.entry(key).or_insert_with(|| ProbeState {
            probe: o.probe.clone(),
            target: o.target.clone(),
            at: o.at,
            duration: o.duration,
            failure: None,
            runs: 0,
            failures: BTreeMap::new(),
            buckets: vec![0; PROBE_BUCKETS.len()],
            duration_sum: 0.0,
        });
        let secs = o.duration.as_secs_f64();
        for (count, bound) in st.buckets.iter_mut().zip(PROBE_BUCKETS) {
            *count += u64::from(secs <= bound);
        }
        st.duration_sum += secs;
        st.at = o.at;
        st.duration = o.duration;
        if let Some(reason) = &o.failure {
            *st.failures.entry(reason.clone()).or_default() += 1;
        }
        st.failure = o.failure;
        st.runs += 1;
    }
}

impl SourceRecorder for Store {
    fn register_source(&self, source: &str) {
        let mut inner = self.lock();
        let st = inner.sources.entry(source.to_string()).or_default();
        st.name = source.to_string();
    }

    fn record_source_run(
        &self,
        source: &str,
        finished_at: SystemTime,
        duration: Duration,
        outcome: RunOutcome,
    ) {
        let mut inner = self.lock();
        let st = inner.sources.entry(source.to_string()).or_default();
        st.name = source.to_string();
        st.runs += 1;
        st.last_duration = duration;
        match outcome {
            RunOutcome::Ok | RunOutcome::NoData => {
                if outcome == RunOutcome::NoData {
                    st.no_data += 1;
                }
                st.up = true;
                st.last_success = Some(finished_at);
                st.last_error = None;
            }
            RunOutcome::Failed { reason, message } => {
                st.up = false;
                *st.errors.entry(reason).or_default() += 1;
                st.last_error = Some(message);
            }
        }
    }

    fn register_watch(&self, source: &str, resource: &str) {
        let mut inner = self.lock();
        let st = Self::source_mut(&mut inner, source);
        st.resource = Some(resource.to_string());
        st.needs_success = true;
    }

    fn record_watch_restart(&self, source: &str, reason: &str) {
        let mut inner = self.lock();
        let st = Self::source_mut(&mut inner, source);
        *st.watch_restarts.entry(reason.to_string()).or_default() += 1;
    }

    fn record_usage_match(&self, source: &str, m: crate::model::UsageMatch) {
        let mut inner = self.lock();
        let status = Self::source_mut(&mut inner, source);
        status.usage_match = Some(m);
    }

    fn record_relist(&self, source: &str, reason: &str) {
        let mut inner = self.lock();
        let st = Self::source_mut(&mut inner, source);
        *st.relists.entry(reason.to_string()).or_default() += 1;
    }
}

impl Store {
    fn source_mut<'a>(inner: &'a mut Inner, source: &str) -> &'a mut SourceStatus {
        let st = inner.sources.entry(source.to_string()).or_default();
        st.name = source.to_string();
        st
    }
}

impl SinkRecorder for Store {
    fn record_sink_push(&self, sink: &str, push: SinkPush) {
        let mut inner = self.lock();
        let st = inner.sinks.entry(sink.to_string()).or_default();
        st.name = sink.to_string();
        st.pushes += 1;
        st.points += push.points;
        st.requests += push.requests;
        st.last_duration = push.duration;
        for (reason, n) in push.dropped.into_iter().filter(|(_, n)| *n > 0) {
            *st.dropped.entry(reason.to_string()).or_default() += n;
        }
        match push.failure {
            None => st.last_success = Some(push.at),
            Some(reason) => *st.failures.entry(reason).or_default() += 1,
        }
    }

    fn record_sink_skipped(&self, sink: &str, points: u64) {
        let mut inner = self.lock();
        let st = inner.sinks.entry(sink.to_string()).or_default();
        st.name = sink.to_string();
        st.skipped += 1;
        if points > 0 {
            *st.dropped
                .entry(crate::model::TICK_SKIPPED.to_string())
                .or_default() += points;
        }
    }

    fn record_leadership(&self, lease: &str, leading: bool) {
        let mut inner = self.lock();
        let l = inner.leadership.get_or_insert_with(Default::default);
        if leading && !l.leading {
            l.acquired += 1;
        }
        l.lease = lease.to_string();
        l.leading = leading;
    }
}

impl TaskRecorder for Store {
    fn record_tasks(&self, tasks: crate::model::TaskSet) {
        self.lock().tasks = Some(Arc::new(tasks));
    }

    fn record_platform(&self, platform: crate::model::Platform) {
        self.lock().platform = Some(Arc::new(platform));
    }

    fn record_task_perf(&self, perf: crate::model::TaskPerfSet) {
        self.lock().task_perf = Some(Arc::new(perf));
    }
}

impl Provider for Store {
    fn cluster(&self) -> &dyn ClusterRecorder {
        self
    }
    fn node(&self) -> &dyn NodeRecorder {
        self
    }
    fn probe(&self) -> &dyn ProbeRecorder {
        self
    }
    fn source(&self) -> &dyn SourceRecorder {
        self
    }
    fn sink(&self) -> &dyn SinkRecorder {
        self
    }
    fn task(&self) -> &dyn TaskRecorder {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn sample(node: &str, t: u64, cpu: f64, mem: f64) -> UsageSample {
        UsageSample {
            node: node.into(),
            at: at(t),
            values: vec![(Resource::Cpu, cpu), (Resource::Memory, mem)],
        }
    }

    #[test]
    fn snapshot_has_latest_and_windows() {
        let s = Store::new();
        s.register_source("host");
        s.node()
            .record_node_usage("host", sample("n1", 1000, 0.2, 0.5));
        s.node()
            .record_node_usage("host", sample("n1", 1060, 0.4, 0.5));
        let snap = s.snapshot(at(1061));
        assert_eq!(snap.tick, 1);
        let n = &snap.nodes["n1"];
        assert_eq!(&*n.source, "host");
        assert_eq!(n.latest_at, at(1060));
        assert_eq!(n.latest[&Resource::Cpu], 0.4);
        assert_eq!(n.windows.len(), 3);
        let w15 = &n.windows[0];
        assert_eq!(w15.window, Window::FifteenMinutes);
        assert_eq!(w15.end, at(1060));
        assert_eq!(w15.start, at(1060 - 900));
        let cpu = w15.stats[&Resource::Cpu];
        assert!((cpu.avg - 0.3).abs() < 1e-12);
        assert!((cpu.std - 0.1).abs() < 1e-12);
        assert_eq!(w15.stats[&Resource::Memory].std, 0.0);
    }

    #[test]
    fn non_finite_and_negative_values_are_dropped_and_counted() {
        let s = Store::new();
        s.node().record_node_usage(
            "host",
            UsageSample {
                node: "n1".into(),
                at: at(10),
                values: vec![
                    (Resource::Cpu, f64::NAN),
                    (Resource::Memory, f64::INFINITY),
                    (Resource::DiskIo, -0.5),
                    (Resource::NetworkReceive, 12.0),
                ],
            },
        );
        let snap = s.snapshot(at(11));
        let n = &snap.nodes["n1"];
        assert_eq!(n.latest.len(), 1);
        assert_eq!(n.latest[&Resource::NetworkReceive], 12.0);
        let src = &snap.sources["host"];
        assert_eq!(src.dropped["non_finite"], 2);
        assert_eq!(src.dropped["negative"], 1);
    }

    #[test]
    fn one_rule_drops_absurd_values_per_value_and_per_node() {
        let s = Store::new();
        s.node().record_node_usage(
            "ms",
            UsageSample {
                node: "liar".into(),
                at: at(10),
                values: vec![(Resource::Cpu, 100.0), (Resource::Memory, 0.5)],
            },
        );
        s.node()
            .record_node_usage("ms", sample("honest", 10, 0.3, 1.03));
        s.node().record_node_window(
            "ms",
            BackendWindow {
                node: "honest".into(),
                window: Window::FiveMinutes,
                start: at(0),
                end: at(10),
                values: vec![crate::model::BackendValue {
                    name: "cpu".into(),
                    kind: crate::model::MetricType::Cpu,
                    resource: None,
                    operator: crate::model::Operator::Avg,
                    value: 2.0,
                }],
            },
        );
        s.node().record_node_capacity(
            "liar",
            NodeCapacity {
                cpu_cores: 0.0,
                memory_bytes: 8.0,
            },
        );
        s.node()
            .record_dropped("ms", "honest", "cpu usage", DropReason::Unparsable);
        let snap = s.snapshot(at(11));
        let liar = &snap.nodes["liar"];
        assert_eq!(liar.latest.len(), 1, "only the valid value is served");
        assert_eq!(liar.latest[&Resource::Memory], 0.5);
        assert_eq!(liar.capacity, None);
        let honest = &snap.nodes["honest"];
        assert_eq!(honest.latest[&Resource::Cpu], 0.3);
        assert_eq!(
            honest.latest[&Resource::Memory],
            1.0,
            "within the tolerance: served as 100 %"
        );
        assert!(honest.windows.iter().all(|w| w.backend.is_empty()));
        let dropped = &snap.sources["ms"].dropped;
        assert_eq!(dropped["above_capacity"], 2);
        assert_eq!(dropped["bad_capacity"], 1);
        assert_eq!(dropped["unparsable"], 1);
        assert!(snap.sources["ms"].errors.is_empty());
    }

    fn facts(name: &str) -> crate::model::NodeFacts {
        crate::model::NodeFacts::ready_for_test(name)
    }

    fn state(names: &[&str]) -> ClusterState {
        ClusterState {
            nodes: Arc::new(names.iter().map(|n| facts(n)).collect()),
            ..ClusterState::default()
        }
    }

    #[test]
    fn nodes_the_cluster_deleted_leave_and_stay_out() {
        let s = Store::new();
        for n in ["a", "b"] {
            s.node().record_node_usage("ms", sample(n, 10, 0.1, 0.1));
        }
        s.cluster().record_cluster_state(state(&["a", "b"]));
        // Reported by the backend a moment before the Node watcher has it: kept.
        s.node()
            .record_node_usage("ms", sample("new", 11, 0.1, 0.1));
        s.cluster().record_cluster_state(state(&["a"]));
        let snap = s.snapshot(at(12));
        let names: Vec<&str> = snap.nodes.keys().map(|k| &**k).collect();
        assert_eq!(names, ["a", "new"]);
        // A backend still reporting the deleted node (its 15m window) does not bring it back.
        s.node().record_node_usage("ms", sample("b", 13, 0.1, 0.1));
        assert!(!s.snapshot(at(14)).nodes.contains_key("b"));
        // Expired by its backend first, then deleted: still refused afterwards.
        s.node().record_node_usage("ms", sample("c", 13, 0.1, 0.1));
        s.cluster().record_cluster_state(state(&["a", "c"]));
        s.node().record_fetch_end("ms", true, 1);
        s.node().record_node_usage("ms", sample("a", 13, 0.1, 0.1));
        s.node().record_fetch_end("ms", true, 1);
        assert!(!s.snapshot(at(14)).nodes.contains_key("c"));
        s.cluster().record_cluster_state(state(&["a"]));
        s.node().record_node_usage("ms", sample("c", 14, 0.1, 0.1));
        assert!(!s.snapshot(at(14)).nodes.contains_key("c"));
        // Re-created under the same name: welcome again.
        s.cluster().record_cluster_state(state(&["a", "b", "new"]));
        s.node().record_node_usage("ms", sample("b", 15, 0.2, 0.2));
        assert_eq!(s.snapshot(at(16)).nodes["b"].latest[&Resource::Cpu], 0.2);
    }

    /// A state sharing the node list of the one before (only pods changed) changes no node:
    /// a host the backend reports before its Node is listed stays, the listed ones stay, and
    /// the next list without a node still deletes it.
    #[test]
    fn a_state_with_the_same_node_list_keeps_every_node() {
        let s = Store::new();
        for n in ["a", "b"] {
            s.node().record_node_usage("ms", sample(n, 10, 0.1, 0.1));
        }
        let first = state(&["a", "b"]);
        let nodes = first.nodes.clone();
        s.cluster().record_cluster_state(first);
        s.node()
            .record_node_usage("ms", sample("new", 11, 0.1, 0.1));
        let mut pods_moved = ClusterState {
            nodes: nodes.clone(),
            ..ClusterState::default()
        };
        pods_moved.skipped.insert("bad_pod".into(), 1);
        s.cluster().record_cluster_state(pods_moved);
        let snap = s.snapshot(at(12));
        let names: Vec<&str> = snap.nodes.keys().map(|k| &**k).collect();
        assert_eq!(names, ["a", "b", "new"]);
        let cs = snap.cluster_state.as_ref().expect("a cluster state");
        assert!(Arc::ptr_eq(&cs.nodes, &nodes), "the list is shared");
        assert_eq!(cs.skipped["bad_pod"], 1, "the new state is kept");
        s.cluster().record_cluster_state(state(&["a", "new"]));
        let names: Vec<String> = s
            .snapshot(at(13))
            .nodes
            .keys()
            .map(|k| k.to_string())
            .collect();
        assert_eq!(names, ["a", "new"], "b deleted");
    }

    #[test]
    fn tombstones_expire_by_the_clock_without_a_new_cluster_state() {
        let mut gone = HashMap::new();
        gone.insert("x".to_string(), at(1_000));
        assert!(tombstoned(&gone, "x", at(1_000)));
        assert!(tombstoned(&gone, "x", at(1_000 + 15 * 60 - 1)));
        assert!(!tombstoned(&gone, "x", at(1_000 + 15 * 60)));
        assert!(!tombstoned(&gone, "y", at(1_000)));
        assert!(tombstoned(&gone, "x", at(999)), "a clock set back keeps it");
    }

    #[test]
    fn hosts_expire_after_successful_fetches_without_them() {
        let s = Store::new();
        let fetch = |hosts: &[&str], ok: bool| {
            for h in hosts {
                s.node().record_node_usage("prom", sample(h, 10, 0.1, 0.1));
            }
            s.node().record_fetch_end("prom", ok, 2);
        };
        fetch(&["a", "b"], true);
        fetch(&["a"], true);
        assert!(
            s.snapshot(at(11)).nodes.contains_key("b"),
            "one miss tolerated"
        );
        fetch(&[], false);
        fetch(&[], false);
        assert!(
            s.snapshot(at(12)).nodes.contains_key("b"),
            "failed fetches expire nothing"
        );
        // Another source's fetches do not count for b.
        s.node().record_fetch_end("other", true, 1);
        fetch(&["a"], true);
        let snap = s.snapshot(at(13));
        assert!(!snap.nodes.contains_key("b"));
        assert!(snap.nodes.contains_key("a"));
        assert_eq!(snap.sources["prom"].expired, 1);
        // 0 never expires.
        s.node().record_fetch_end("prom", true, 0);
        s.node().record_fetch_end("prom", true, 0);
        s.node().record_fetch_end("prom", true, 0);
        assert!(s.snapshot(at(14)).nodes.contains_key("a"));
    }

    #[test]
    fn readiness_waits_for_every_registered_source() {
        let s = Store::new();
        s.register_source("a");
        s.register_source("b");
        s.record_source_run("a", at(1), Duration::from_millis(5), RunOutcome::Ok);
        assert!(!s.snapshot(at(1)).sources_synced);
        s.record_source_run(
            "b",
            at(1),
            Duration::from_millis(5),
            RunOutcome::Failed {
                reason: "io".into(),
                message: "boom".into(),
            },
        );
        let snap = s.snapshot(at(2));
        assert!(snap.sources_synced);
        let b = &snap.sources["b"];
        assert!(!b.up);
        assert_eq!(b.errors["io"], 1);
        assert_eq!(b.last_error.as_deref(), Some("boom"));
        s.record_source_run("b", at(2), Duration::from_millis(1), RunOutcome::NoData);
        let b = s.snapshot(at(3)).sources["b"].clone();
        assert!(b.up);
        assert_eq!((b.runs, b.no_data), (2, 1));
    }

    #[test]
    fn unchanged_nodes_and_cluster_state_keep_their_arc() {
        let s = Store::new();
        for n in ["a", "b"] {
            s.node().record_node_usage("ms", sample(n, 10, 0.1, 0.2));
        }
        s.cluster().record_cluster_state(state(&["a", "b"]));
        let first = s.snapshot(at(11));
        let second = s.snapshot(at(12));
        for n in ["a", "b"] {
            assert!(Arc::ptr_eq(&first.nodes[n], &second.nodes[n]), "{n}");
        }
        // The same sample again (metrics-server between scrapes) and the same cluster state.
        s.node().record_node_usage("ms", sample("a", 10, 0.1, 0.2));
        s.cluster().record_cluster_state(state(&["a", "b"]));
        let third = s.snapshot(at(13));
        assert!(Arc::ptr_eq(&first.nodes["a"], &third.nodes["a"]));
        let cs = |x: &Snapshot| x.cluster_state.clone().unwrap();
        assert!(Arc::ptr_eq(&cs(&first), &cs(&third)));
        // A new value: a new Arc for that node only.
        s.node().record_node_usage("ms", sample("a", 20, 0.3, 0.2));
        let fourth = s.snapshot(at(21));
        assert!(!Arc::ptr_eq(&first.nodes["a"], &fourth.nodes["a"]));
        assert_eq!(fourth.nodes["a"].latest[&Resource::Cpu], 0.3);
        assert!(Arc::ptr_eq(&first.nodes["b"], &fourth.nodes["b"]));
        s.cluster().record_cluster_state(state(&["a", "b", "c"]));
        assert!(!Arc::ptr_eq(&cs(&first), &cs(&s.snapshot(at(22)))));
    }

    /// The whole node map is the same `Arc` until a node changes, is added or leaves; then
    /// the new map equals one built from scratch and shares every unchanged node.
    #[test]
    fn the_node_map_is_shared_until_a_node_changes() {
        let s = Store::new();
        for n in ["a", "b", "c"] {
            s.node().record_node_usage("ms", sample(n, 10, 0.1, 0.2));
        }
        s.cluster().record_cluster_state(state(&["a", "b", "c"]));
        let first = s.snapshot(at(11));
        let names = |x: &Snapshot| x.nodes.keys().map(|k| k.to_string()).collect::<Vec<_>>();
        assert_eq!(names(&first), ["a", "b", "c"]);
        // Nothing, the same sample again, the same capacity twice, the same cluster state.
        let cap = NodeCapacity {
            cpu_cores: 4.0,
            memory_bytes: 8e9,
        };
        s.node().record_node_capacity("b", cap);
        let with_cap = s.snapshot(at(12));
        assert!(
            !Arc::ptr_eq(&first.nodes, &with_cap.nodes),
            "a new capacity"
        );
        s.node().record_node_usage("ms", sample("a", 10, 0.1, 0.2));
        s.node().record_node_capacity("b", cap);
        s.cluster().record_cluster_state(state(&["a", "b", "c"]));
        s.node().record_fetch_end("ms", false, 2);
        let idle = s.snapshot(at(13));
        assert!(Arc::ptr_eq(&with_cap.nodes, &idle.nodes), "nothing changed");
        assert!(Arc::ptr_eq(&idle.nodes, &s.snapshot(at(14)).nodes));
        // One new value: a new map, the others' loads shared, the old snapshot untouched.
        s.node().record_node_usage("ms", sample("c", 20, 0.5, 0.2));
        let changed = s.snapshot(at(21));
        assert!(!Arc::ptr_eq(&idle.nodes, &changed.nodes));
        assert!(Arc::ptr_eq(&idle.nodes["a"], &changed.nodes["a"]));
        assert!(Arc::ptr_eq(&idle.nodes["b"], &changed.nodes["b"]));
        assert_eq!(changed.nodes["c"].latest[&Resource::Cpu], 0.5);
        assert_eq!(idle.nodes["c"].latest[&Resource::Cpu], 0.1);
        // A node deleted in the cluster, a host forgotten, a new host: each shows at once.
        s.cluster().record_cluster_state(state(&["a", "c"]));
        let deleted = s.snapshot(at(22));
        assert_eq!(names(&deleted), ["a", "c"]);
        assert_eq!(
            names(&changed),
            ["a", "b", "c"],
            "an older snapshot keeps its map"
        );
        s.node().forget_node("a");
        s.node().record_node_usage("ms", sample("d", 23, 0.1, 0.1));
        let moved = s.snapshot(at(23));
        assert_eq!(names(&moved), ["c", "d"]);
        // Every step equals a map made from scratch of the hub's nodes.
        let mut inner = s.lock();
        let fresh: NodeMap = inner
            .nodes
            .values_mut()
            .map(|st| (st.key.clone(), st.load(&mut Vec::new())))
            .collect();
        assert_eq!(*moved.nodes, fresh);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
        /// Through any sequence of recordings, every snapshot's node map and estimates equal
        /// ones made from scratch, and the node map is the previous `Arc` exactly when every
        /// node in it is.
        #[test]
        fn the_patched_node_map_equals_a_fresh_one(
            ops in proptest::collection::vec((0u8..8, 0usize..5, 0u64..4, 0u8..8), 1..60)
        ) {
            let s = Store::new();
            let name = |i: usize| format!("n{i}");
            let mut t = 10;
            let mut prev: Option<Snapshot> = None;
            for (op, node, dt, v) in ops {
                t += dt;
                match op {
                    0 | 1 => s.node().record_node_usage(
                        "ms",
                        sample(&name(node), t, f64::from(v) / 10.0, 0.2),
                    ),
                    2 => s.node().record_node_capacity(
                        &name(node),
                        NodeCapacity { cpu_cores: f64::from(v % 3 + 1), memory_bytes: 8e9 },
                    ),
                    3 => {
                        let listed: Vec<String> =
                            (0..5).filter(|i| (v >> (i % 3)) & 1 == 1).map(name).collect();
                        let listed: Vec<&str> = listed.iter().map(String::as_str).collect();
                        s.cluster().record_cluster_state(state(&listed));
                    }
                    4 => s.node().forget_node(&name(node)),
                    5 => s.node().record_fetch_end("ms", v % 2 == 0, 2),
                    6 => s.record_binding(crate::model::Binding {
                        pod: format!("ns/p{}", v % 3).into(),
                        node: name(node).into(),
                        bound_at: at(t),
                        // Half shown by a later sample; half never shown (nor ever old).
                        shows_from: if v % 2 == 0 {
                            at(t + u64::from(v))
                        } else {
                            SystemTime::now() + Duration::from_secs(3600)
                        },
                        cpu_cores: 0.25,
                        memory_bytes: 1e8,
                    }),
                    _ => s.forget_binding(&format!("ns/p{}", v % 3)),
                }
                let snap = s.snapshot(at(t));
                let (fresh, fresh_bound): (NodeMap, BoundMap) = {
                    let mut inner = s.lock();
                    let inner = &mut *inner;
                    let loads = inner.nodes.values_mut().map(|st| (st.key.clone(), st.load(&mut Vec::new()))).collect();
                    let bound = inner.nodes.values().filter_map(|st| {
                        let held = inner.bindings.get(&st.key)?;
                        Some((st.key.clone(), bound_pods(held, st.sampled_at)?))
                    }).collect();
                    (loads, bound)
                };
                proptest::prop_assert_eq!(&*snap.nodes, &fresh);
                proptest::prop_assert_eq!(&*snap.bound, &fresh_bound);
                // Each pod held as a binding once, on the node `bound_to` names, and no other.
                {
                    let inner = s.lock();
                    let mut held = 0;
                    for (node, pods) in &inner.bindings {
                        for b in pods {
                            proptest::prop_assert_eq!(inner.bound_to.get(&b.pod), Some(node));
                            held += 1;
                        }
                    }
                    proptest::prop_assert_eq!(held, inner.bound_to.len());
                }
                // Every node the same `Arc` as before: no new map either (no copy, and the
                // outputs skip the whole map by pointer).
                if let Some(p) = &prev {
                    let same_nodes = p.nodes.len() == snap.nodes.len()
                        && p.nodes.iter().zip(snap.nodes.iter()).all(|((ka, a), (kb, b))| {
                            ka == kb && Arc::ptr_eq(a, b)
                        });
                    proptest::prop_assert_eq!(same_nodes, Arc::ptr_eq(&p.nodes, &snap.nodes));
                }
                prev = Some(snap);
            }
        }
    }

    #[test]
    fn a_binding_remakes_only_the_estimate_of_its_node() {
        let s = Store::new();
        s.node().record_node_usage("ms", sample("a", 10, 0.1, 0.2));
        s.node().record_node_usage("ms", sample("b", 10, 0.1, 0.2));
        let first = s.snapshot(at(11));
        s.record_binding(crate::model::Binding {
            pod: "ns/p".into(),
            node: "a".into(),
            bound_at: at(12),
            shows_from: at(30),
            cpu_cores: 0.5,
            memory_bytes: 1e9,
        });
        {
            let inner = s.lock();
            assert!(!inner.nodes["a"].dirty, "no window to compute again");
            assert!(!inner.nodes_changed, "no node to look at again");
        }
        let bound = s.snapshot(at(13));
        // The node map is the same `Arc`: nothing made of it is made again.
        assert!(Arc::ptr_eq(&first.nodes, &bound.nodes));
        assert_eq!(bound.bound.len(), 1);
        assert_eq!(bound.bound["a"].sum(None), (0.5, 1e9));
        // A tick with no binding or sample since shares the estimates as well.
        let again = s.snapshot(at(13));
        assert!(Arc::ptr_eq(&bound.bound, &again.bound));
        // Forgotten: the estimate goes, the usage is still the same.
        s.forget_binding("ns/p");
        let forgotten = s.snapshot(at(14));
        assert!(forgotten.bound.is_empty() && Arc::ptr_eq(&first.nodes, &forgotten.nodes));
        // A sample that shows the pod ends its estimate as well.
        s.record_binding(crate::model::Binding {
            pod: "ns/q".into(),
            node: "a".into(),
            bound_at: at(15),
            shows_from: at(30),
            cpu_cores: 0.5,
            memory_bytes: 1e9,
        });
        assert!(s.snapshot(at(16)).bound.contains_key("a"));
        s.node().record_node_usage("ms", sample("a", 31, 0.1, 0.2));
        assert!(s.snapshot(at(32)).bound.is_empty());
        // A node the hub drops takes its estimate along; back, it has it again.
        s.record_binding(crate::model::Binding {
            pod: "ns/r".into(),
            node: "b".into(),
            bound_at: at(33),
            shows_from: at(60),
            cpu_cores: 0.25,
            memory_bytes: 1e8,
        });
        assert!(s.snapshot(at(34)).bound.contains_key("b"));
        s.node().forget_node("b");
        assert!(s.snapshot(at(35)).bound.is_empty());
        s.node().record_node_usage("ms", sample("b", 36, 0.1, 0.2));
        assert_eq!(s.snapshot(at(37)).bound["b"].pods.len(), 1);
    }

    #[test]
    fn a_repeated_sample_or_capacity_makes_no_work_but_a_new_equal_value_does() {
        let s = Store::new();
        let cap = NodeCapacity {
            cpu_cores: 4.0,
            memory_bytes: 8e9,
        };
        s.node().record_node_usage("ms", sample("a", 10, 0.1, 0.2));
        s.node().record_node_capacity("a", cap);
        let first = s.snapshot(at(11));
        let dirty = |s: &Store| s.lock().nodes["a"].dirty;
        assert!(!dirty(&s));
        // metrics-server between two of its scrapes: the same sample and capacity again.
        s.node().record_node_usage("ms", sample("a", 10, 0.1, 0.2));
        s.node().record_node_capacity("a", cap);
        assert!(!dirty(&s), "nothing of the node's load changed");
        assert!(Arc::ptr_eq(
            &first.nodes["a"],
            &s.snapshot(at(12)).nodes["a"]
        ));
        // A newer sample with equal values is still a sample of the windows.
        s.node().record_node_usage("ms", sample("a", 25, 0.1, 0.2));
        assert!(dirty(&s));
        let next = s.snapshot(at(26));
        let w = &next.nodes["a"].windows[0];
        assert_eq!(w.stats[&Resource::Cpu].samples.get(), 2);
        s.node().record_node_capacity(
            "a",
            NodeCapacity {
                cpu_cores: 8.0,
                ..cap
            },
        );
        assert!(dirty(&s), "a new capacity");
        // An impossible capacity is dropped and counted each time it is sent, the one held
        // before included; the valid one sent again is held again.
        let bad = NodeCapacity {
            cpu_cores: -1.0,
            ..cap
        };
        let dropped = |s: &Store, at_s| {
            s.snapshot(at(at_s)).sources["ms"]
                .dropped
                .get("bad_capacity")
                .copied()
                .unwrap_or(0)
        };
        s.node().record_node_capacity("a", bad);
        assert_eq!(dropped(&s, 27), 1);
        s.node().record_node_capacity("a", bad);
        assert_eq!(dropped(&s, 28), 2);
        assert_eq!(s.snapshot(at(29)).nodes["a"].capacity, None);
        s.node().record_node_capacity("a", cap);
        s.node().record_node_capacity("a", cap);
        assert_eq!(s.snapshot(at(30)).nodes["a"].capacity, Some(cap));
        assert_eq!(dropped(&s, 31), 2);
    }

    #[test]
    fn forgotten_nodes_leave_the_snapshot() {
        let s = Store::new();
        s.node()
            .record_node_usage("host", sample("n1", 10, 0.1, 0.1));
        s.node().record_node_capacity(
            "n1",
            NodeCapacity {
                cpu_cores: 4.0,
                memory_bytes: 8.0,
            },
        );
        assert_eq!(
            s.snapshot(at(11)).nodes["n1"].capacity.unwrap().cpu_cores,
            4.0
        );
        s.node().forget_node("n1");
        assert!(s.snapshot(at(12)).nodes.is_empty());
    }

    #[test]
    fn probe_outcomes_keep_latest_and_counts() {
        let s = Store::new();
        for failure in [None, Some("timeout".to_string())] {
            s.probe().record_probe_outcome(ProbeOutcome {
                probe: "dns".into(),
                target: "kubernetes.default".into(),
                at: at(5),
                duration: Duration::from_millis(3),
                failure,
            });
        }
        let snap = s.snapshot(at(6));
        assert_eq!(snap.probes.len(), 1);
        let p = &snap.probes[0];
        assert_eq!(p.runs, 2);
        assert_eq!(p.failures["timeout"], 1);
        // 3 ms: above the 1 and 2.5 ms bounds, inside every other.
        assert_eq!(p.buckets[..3], [0, 0, 2]);
        assert_eq!(*p.buckets.last().unwrap(), 2);
        assert!((p.duration_sum - 0.006).abs() < 1e-12);
        assert_eq!(p.failure.as_deref(), Some("timeout"));
    }
}
