//! The node role's pods as tasks ([`TaskPod`]): identity, QoS, container ids and readiness,
//! allowlisted labels, and effective requests and limits by Kubernetes' own rule. Fed by the
//! node-role pod watcher (`cluster.rs` calls [`TaskPodIndex`] on each event); read by the task
//! source through [`TaskPodIndex::pods`].

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};

use crate::k8s::lean::{AsLeanPod, BadObject, LeanPod, PodFollower};
use crate::k8s::pod_resources::pod_resources;

use crate::model::{TaskContainer, TaskPod};

/// Which pods become tasks and which labels they carry.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TaskPodConfig {
    /// Empty: every namespace.
    pub namespaces: Vec<String>,
    /// Pod label keys copied onto task series (sanitised to label names).
    pub label_allowlist: Vec<String>,
}

/// Label keys our task series use themselves; a pod label that sanitises to one of them gets a
/// `label_` prefix instead of overwriting it.
const RESERVED: &[&str] = &[
    "task_name",
    "task_id",
    "qos",
    "ready",
    "namespace",
    "pod",
    "container",
    "node",
    "numa_node",
    "resource",
    "unit",
    "kind",
    "cpu",
    "le",
];

/// A Kubernetes label key as a Prometheus label name: WCA's rules (`.` and `-` to `_`, `/` to
/// `__`), any other character outside `[a-zA-Z0-9_]` to `_`, and a `label_` prefix for names
/// that start with a digit or `__` (WCA crashed on those) or clash with our own labels.
pub fn sanitize_label_key(key: &str) -> String {
    let mut s = String::with_capacity(key.len() + 6);
    for c in key.chars() {
        match c {
            '/' => s.push_str("__"),
            c if c.is_ascii_alphanumeric() || c == '_' => s.push(c),
            _ => s.push('_'),
        }
    }
    if s.is_empty()
        || s.starts_with(|c: char| c.is_ascii_digit())
        || s.starts_with("__")
        || RESERVED.contains(&s.as_str())
    {
        s.insert_str(0, "label_");
    }
    s
}

/// A label key with a `'static` lifetime, as series rows need. Keys come only from the
/// configured allowlist, so the set is bounded; each distinct key is allocated once.
pub fn static_key(key: &str) -> &'static str {
    static KEYS: OnceLock<Mutex<HashSet<&'static str>>> = OnceLock::new();
    let mut set = KEYS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if let Some(k) = set.get(key) {
        return k;
    }
    let k: &'static str = Box::leak(key.to_string().into_boxed_str());
    set.insert(k);
    k
}

/// `containerd://abc` -> `abc`.
fn runtime_id(id: &str) -> &str {
    id.split_once("://").map_or(id, |(_, rest)| rest)
}

/// The task a pod stands for, or `Ok(None)` when its namespace is not watched.
pub fn task_pod<P: AsLeanPod + ?Sized>(
    pod: &P,
    cfg: &TaskPodConfig,
) -> Result<Option<TaskPod>, BadObject> {
    let pod = &*pod.lean()?;
    let meta = &pod.metadata;
    let namespace = meta.namespace.clone().unwrap_or_default();
    let name = (meta.name.clone()).ok_or_else(|| BadObject::missing("pod without a name"))?;
    if !cfg.namespaces.is_empty() && !cfg.namespaces.contains(&namespace) {
        return Ok(None);
    }
    let uid = meta
        .uid
        .clone()
        .ok_or_else(|| BadObject::missing(format!("pod {namespace}/{name} has no uid")))?;
    let mut cgroup_ids = vec![uid.clone()];
    if let Some(hash) = meta
        .annotations
        .as_ref()
        .and_then(|a| a.get("kubernetes.io/config.mirror"))
        && !hash.is_empty()
        && hash != &uid
    {
        cgroup_ids.push(hash.clone());
    }
    let mut labels: Vec<(&'static str, String)> = meta
        .labels
        .iter()
        .flatten()
        .filter(|(k, _)| cfg.label_allowlist.iter().any(|a| a == *k))
        .map(|(k, v)| (static_key(&sanitize_label_key(k)), v.clone()))
        .collect();
    labels.sort();
    labels.dedup_by(|a, b| a.0 == b.0);
    let status = pod.status.as_ref();
    let qos = status
        .and_then(|s| s.qos_class.as_deref())
        .map_or_else(|| "unknown".to_string(), str::to_ascii_lowercase);
    let mut containers = Vec::new();
    if let Some(s) = status {
        for cs in s
            .container_statuses
            .iter()
            .flatten()
            .chain(s.init_container_statuses.iter().flatten())
            .chain(s.ephemeral_container_statuses.iter().flatten())
        {
            containers.push(TaskContainer {
                name: cs.name.clone(),
                id: cs
                    .container_id
                    .as_deref()
                    .map(runtime_id)
                    .filter(|i| !i.is_empty())
                    .map(str::to_string),
                ready: cs.ready,
            });
        }
    }
    let (requests, limits) =
        pod_resources(pod).map_err(|e| e.of(format!("pod {namespace}/{name}: ")))?;
    Ok(Some(TaskPod {
        uid,
        namespace,
        name,
        qos,
        cgroup_ids,
        labels,
        containers,
        requests,
        limits,
    }))
}

type TaskMap = HashMap<String, Arc<TaskPod>>;

/// Task pods by `namespace/name`, kept by the node-role pod watcher.
#[derive(Debug, Clone, Default)]
pub struct TaskPodIndex {
    cfg: Arc<TaskPodConfig>,
    live: Arc<Mutex<TaskMap>>,
    /// The map a relist is building.
    building: Arc<Mutex<Option<TaskMap>>>,
    /// Pods that could not be used (logged when they arrive).
    skipped: Arc<std::sync::atomic::AtomicU64>,
}

/// Succeeded and Failed pods hold no cgroup any more: they are no tasks.
fn finished(pod: &LeanPod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .is_some_and(|p| p == "Succeeded" || p == "Failed")
}

/// The pod watcher's events, as the node role's task pods.
impl PodFollower for TaskPodIndex {
    fn begin_relist(&self) {
        TaskPodIndex::begin_relist(self);
    }

    fn relist_apply(&self, pod: &LeanPod) {
        TaskPodIndex::relist_apply(self, pod);
    }

    fn end_relist(&self) {
        TaskPodIndex::end_relist(self);
    }

    fn apply(&self, pod: &LeanPod) {
        TaskPodIndex::apply(self, pod);
    }

    fn delete(&self, pod: &LeanPod) {
        TaskPodIndex::delete(self, pod);
    }
}

impl TaskPodIndex {
    pub fn new(cfg: TaskPodConfig) -> Self {
        TaskPodIndex {
            cfg: Arc::new(cfg),
            ..Default::default()
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, TaskMap> {
        self.live.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn key(pod: &LeanPod) -> String {
        format!(
            "{}/{}",
            pod.metadata.namespace.as_deref().unwrap_or_default(),
            pod.metadata.name.as_deref().unwrap_or_default()
        )
    }

    fn convert(&self, pod: &LeanPod) -> Option<Arc<TaskPod>> {
        match task_pod(pod, &self.cfg) {
            Ok(t) => t.map(Arc::new),
            Err(e) => {
                self.skipped
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tracing::warn!(reason = "bad_pod", error = %e, "pod left out of task metrics");
                None
            }
        }
    }

    /// A pod was added or changed. Pods that finished (Succeeded, Failed) leave.
    pub fn apply<P: AsLeanPod + ?Sized>(&self, pod: &P) {
        let Some(pod) = self.lean_or_skip(pod) else {
            return;
        };
        let pod = &*pod;
        let key = Self::key(pod);
        match self.convert(pod).filter(|_| !finished(pod)) {
            Some(t) => {
                self.lock().insert(key, t);
            }
            None => {
                self.lock().remove(&key);
            }
        }
    }

    pub fn delete<P: AsLeanPod + ?Sized>(&self, pod: &P) {
        if let Some(pod) = self.lean_or_skip(pod) {
            self.lock().remove(&Self::key(&pod));
        }
    }

    /// The pod as a [`LeanPod`]; one that does not convert is counted and logged.
    fn lean_or_skip<'a, P: AsLeanPod + ?Sized>(
        &self,
        pod: &'a P,
    ) -> Option<std::borrow::Cow<'a, LeanPod>> {
        pod.lean()
            .map_err(|e| {
                self.skipped
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tracing::warn!(reason = "bad_pod", error = %e, "pod left out of task metrics");
            })
            .ok()
    }

    /// A relist starts: pods applied with [`Self::relist_apply`] replace every pod held at
    /// [`Self::end_relist`], so pods deleted while the watch was down leave.
    pub fn begin_relist(&self) {
        *self.building.lock().unwrap_or_else(|p| p.into_inner()) = Some(HashMap::new());
    }

    pub fn relist_apply<P: AsLeanPod + ?Sized>(&self, pod: &P) {
        let Some(pod) = self.lean_or_skip(pod) else {
            return;
        };
        let pod = &*pod;
        let Some(t) = self.convert(pod).filter(|_| !finished(pod)) else {
            return;
        };
        self.building
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert_with(HashMap::new)
            .insert(Self::key(pod), t);
    }

    pub fn end_relist(&self) {
        let fresh = self
            .building
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .unwrap_or_default();
        *self.lock() = fresh;
    }

    /// The task pods now, sorted by namespace and name.
    pub fn pods(&self) -> Vec<Arc<TaskPod>> {
        let guard = self.lock();
        let mut v: Vec<_> = guard.iter().collect();
        v.sort_by(|a, b| a.0.cmp(b.0));
        v.into_iter().map(|(_, p)| p.clone()).collect()
    }

    /// Pods that could not be used so far.
    pub fn skipped(&self) -> u64 {
        self.skipped.load(std::sync::atomic::Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::k8s::pod_resources::Resources;
    use k8s_openapi::api::core::v1::{
        Container, ContainerStatus, Pod, PodSpec, PodStatus, ResourceRequirements,
    };
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use std::collections::BTreeMap;

    fn q(kv: &[(&str, &str)]) -> Option<BTreeMap<String, Quantity>> {
        (!kv.is_empty()).then(|| {
            kv.iter()
                .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                .collect()
        })
    }

    fn c(name: &str, req: &[(&str, &str)], lim: &[(&str, &str)], sidecar: bool) -> Container {
        Container {
            name: name.into(),
            resources: Some(ResourceRequirements {
                requests: q(req),
                limits: q(lim),
                ..Default::default()
            }),
            restart_policy: sidecar.then(|| "Always".to_string()),
            ..Default::default()
        }
    }

    fn pod_with(
        containers: Vec<Container>,
        init: Vec<Container>,
        overhead: &[(&str, &str)],
        pod_level: Option<PodLevel<'_>>,
    ) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                namespace: Some("default".into()),
                uid: Some("11111111-2222-3333-4444-555555555555".into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers,
                init_containers: (!init.is_empty()).then_some(init),
                overhead: q(overhead),
                resources: pod_level.map(|(r, l)| ResourceRequirements {
                    requests: q(r),
                    limits: q(l),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            status: None,
        }
    }

    /// Pod-level (requests, limits).
    type PodLevel<'a> = (&'a [(&'a str, &'a str)], &'a [(&'a str, &'a str)]);

    fn get(r: &Resources, k: &str) -> Option<f64> {
        r.get(k).copied()
    }

    const MI: f64 = 1024.0 * 1024.0;

    /// Kubernetes' documented examples: pod overhead (docs "Pod Overhead": two containers with
    /// 500m/100Mi and 1500m/100Mi plus 250m/120Mi overhead make 2250m/320Mi), init containers
    /// and sidecars (KEP-753 rule), pod-level resources (docs "Assign Pod-level CPU and memory
    /// resources"), and extended resources.
    #[test]
    fn effective_requests_and_limits() {
        // Pod overhead.
        let p = pod_with(
            vec![
                c(
                    "busybox",
                    &[("cpu", "500m"), ("memory", "100Mi")],
                    &[("cpu", "500m"), ("memory", "100Mi")],
                    false,
                ),
                c(
                    "nginx",
                    &[("cpu", "1500m"), ("memory", "100Mi")],
                    &[("cpu", "1500m"), ("memory", "100Mi")],
                    false,
                ),
            ],
            vec![],
            &[("cpu", "250m"), ("memory", "120Mi")],
            None,
        );
        let (req, lim) = pod_resources(&p).unwrap();
        assert_eq!(get(&req, "cpu"), Some(2.25));
        assert_eq!(get(&req, "memory"), Some(320.0 * MI));
        assert_eq!(get(&lim, "cpu"), Some(2.25));
        assert_eq!(get(&lim, "memory"), Some(320.0 * MI));

        // Init containers: the largest init container wins over the app containers' sum.
        let p = pod_with(
            vec![
                c("app", &[("cpu", "300m")], &[], false),
                c("app2", &[("cpu", "200m")], &[], false),
            ],
            vec![
                c("init1", &[("cpu", "1")], &[], false),
                c("init2", &[("cpu", "700m")], &[], false),
            ],
            &[],
            None,
        );
        assert_eq!(get(&pod_resources(&p).unwrap().0, "cpu"), Some(1.0));

        // Sidecars count with the app containers and under every init container after them.
        let p = pod_with(
            vec![c(
                "app",
                &[("cpu", "300m"), ("memory", "1Gi")],
                &[("memory", "1Gi")],
                false,
            )],
            vec![
                c("init1", &[("cpu", "1")], &[], false),
                c(
                    "sidecar",
                    &[("cpu", "200m"), ("memory", "64Mi")],
                    &[("memory", "64Mi")],
                    true,
                ),
                c("init2", &[("cpu", "2")], &[], false),
            ],
            &[],
            None,
        );
        let (req, lim) = pod_resources(&p).unwrap();
        assert_eq!(get(&req, "cpu"), Some(2.2), "init2 + the sidecar before it");
        assert_eq!(get(&req, "memory"), Some(1024.0 * MI + 64.0 * MI));
        assert_eq!(get(&lim, "memory"), Some(1024.0 * MI + 64.0 * MI));
        assert_eq!(get(&lim, "cpu"), None, "no container has a CPU limit");

        // Sidecar only: app + sidecar beat the init container.
        let p = pod_with(
            vec![c("app", &[("cpu", "1")], &[], false)],
            vec![
                c("sidecar", &[("cpu", "500m")], &[], true),
                c("init", &[("cpu", "1200m")], &[], false),
            ],
            &[],
            None,
        );
        assert_eq!(get(&pod_resources(&p).unwrap().0, "cpu"), Some(1.7));

        // Pod-level resources replace cpu and memory; other resources stay per container;
        // overhead on top.
        let p = pod_with(
            vec![
                c("a", &[], &[("nvidia.com/gpu", "1")], false),
                c(
                    "b",
                    &[("cpu", "100m"), ("ephemeral-storage", "1G")],
                    &[],
                    false,
                ),
            ],
            vec![],
            &[("cpu", "10m")],
            Some((
                &[("cpu", "1"), ("memory", "100Mi")],
                &[("cpu", "1"), ("memory", "200Mi")],
            )),
        );
        let (req, lim) = pod_resources(&p).unwrap();
        assert_eq!(get(&req, "cpu"), Some(1.01));
        assert_eq!(get(&req, "memory"), Some(100.0 * MI));
        assert_eq!(get(&req, "ephemeral-storage"), Some(1e9));
        assert_eq!(get(&lim, "cpu"), Some(1.01));
        assert_eq!(get(&lim, "memory"), Some(200.0 * MI));
        assert_eq!(get(&lim, "nvidia.com/gpu"), Some(1.0));

        // Every suffix WCA crashed on.
        let p = pod_with(
            vec![c(
                "x",
                &[
                    ("memory", "1k"),
                    ("ephemeral-storage", "2P"),
                    ("example.com/big", "1E"),
                    ("hugepages-2Mi", "4Mi"),
                    ("hugepages-1Gi", "1Gi"),
                    ("example.com/foo", "5"),
                    ("cpu", "1.5"),
                ],
                &[],
                false,
            )],
            vec![],
            &[],
            None,
        );
        let (req, _) = pod_resources(&p).unwrap();
        assert_eq!(get(&req, "memory"), Some(1000.0));
        assert_eq!(get(&req, "ephemeral-storage"), Some(2e15));
        assert_eq!(get(&req, "example.com/big"), Some(1e18));
        assert_eq!(get(&req, "hugepages-2Mi"), Some(4.0 * MI));
        assert_eq!(get(&req, "hugepages-1Gi"), Some(1024.0 * MI));
        assert_eq!(get(&req, "example.com/foo"), Some(5.0));
        assert_eq!(get(&req, "cpu"), Some(1.5));

        let bad = pod_with(
            vec![c("x", &[("cpu", "1x")], &[], false)],
            vec![],
            &[],
            None,
        );
        assert!(pod_resources(&bad).is_err());
    }

    #[test]
    fn label_keys_are_valid_label_names() {
        for (k, want) in [
            ("app", "app"),
            ("app.kubernetes.io/name", "app_kubernetes_io__name"),
            ("tier-x", "tier_x"),
            ("3tier", "label_3tier"),
            ("example.com/ünï", "example_com__ü_n_ï"),
            ("pod", "label_pod"),
            ("task_name", "label_task_name"),
            ("_x", "_x"),
            ("/x", "label___x"),
        ] {
            if k == "example.com/ünï" {
                // Non-ASCII letters become underscores.
                assert_eq!(sanitize_label_key(k), "example_com___n_");
                continue;
            }
            assert_eq!(sanitize_label_key(k), want, "{k}");
        }
        assert!(std::ptr::eq(static_key("abc"), static_key("abc")));
    }

    fn full_pod(ns: &str, name: &str, phase: &str) -> Pod {
        let mut p = pod_with(
            vec![c("app", &[("cpu", "1")], &[], false)],
            vec![],
            &[],
            None,
        );
        p.metadata.namespace = Some(ns.into());
        p.metadata.name = Some(name.into());
        p.metadata.uid = Some(format!("{name}-uid"));
        p.metadata.labels = Some(
            [("app", "web"), ("secret", "x"), ("3d", "y")]
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        p.metadata.annotations = Some(
            [(
                "kubernetes.io/config.mirror",
                "abcdef0123456789abcdef0123456789",
            )]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        );
        p.status = Some(PodStatus {
            phase: Some(phase.into()),
            qos_class: Some("Burstable".into()),
            container_statuses: Some(vec![ContainerStatus {
                name: "app".into(),
                container_id: Some("containerd://c0ffee".into()),
                ready: false,
                ..Default::default()
            }]),
            ..Default::default()
        });
        p
    }

    #[test]
    fn pods_become_tasks() {
        let cfg = TaskPodConfig {
            namespaces: vec!["a".into()],
            label_allowlist: vec!["app".into(), "3d".into()],
        };
        let t = task_pod(&full_pod("a", "p1", "Running"), &cfg)
            .unwrap()
            .unwrap();
        assert_eq!(t.task_name(), "a/p1");
        assert_eq!(t.qos, "burstable");
        assert_eq!(
            t.cgroup_ids,
            vec![
                "p1-uid".to_string(),
                "abcdef0123456789abcdef0123456789".into()
            ]
        );
        assert_eq!(
            t.labels,
            vec![("app", "web".to_string()), ("label_3d", "y".to_string())]
        );
        assert_eq!(t.containers[0].id.as_deref(), Some("c0ffee"));
        assert!(!t.ready(), "a task before its containers are ready");
        assert_eq!(
            task_pod(&full_pod("b", "p1", "Running"), &cfg).unwrap(),
            None
        );

        let idx = TaskPodIndex::new(TaskPodConfig::default());
        idx.begin_relist();
        idx.relist_apply(&full_pod("a", "p1", "Running"));
        idx.relist_apply(&full_pod("a", "p2", "Succeeded"));
        idx.end_relist();
        assert_eq!(idx.pods().len(), 1);
        idx.apply(&full_pod("b", "p3", "Pending"));
        assert_eq!(
            idx.pods()
                .iter()
                .map(|p| p.name.as_str())
                .collect::<Vec<_>>(),
            ["p1", "p3"]
        );
        idx.apply(&full_pod("b", "p3", "Failed"));
        idx.delete(&full_pod("a", "p1", "Running"));
        assert!(idx.pods().is_empty());
        let mut bad = full_pod("a", "p4", "Running");
        bad.metadata.uid = None;
        idx.apply(&bad);
        assert_eq!(idx.skipped(), 1);
        assert!(idx.pods().is_empty());
    }
}
