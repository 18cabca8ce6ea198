//! A pod's effective requests and limits by Kubernetes' own rule (`PodRequests`/`PodLimits`
//! of k8s.io/component-helpers/resource), for the cluster watchers and the task source alike.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::k8s::lean::{
    AsLeanPod, BadObject, Container, ContainerStatus, LeanPod, ResourceRequirements,
};
use crate::shared::quantity::parse_quantity;

/// Values by resource name.
pub type Resources = BTreeMap<String, f64>;

fn parse_list(map: Option<&BTreeMap<String, Quantity>>) -> Result<Resources, BadObject> {
    let mut out = Resources::new();
    for (k, q) in map.into_iter().flatten() {
        let v = parse_quantity(&q.0).map_err(|reason| BadObject::Quantity {
            resource: k.clone(),
            reason,
        })?;
        out.insert(k.clone(), v);
    }
    Ok(out)
}

fn add(into: &mut Resources, r: &Resources) {
    for (k, v) in r {
        *into.entry(k.clone()).or_default() += v;
    }
}

fn max_into(into: &mut Resources, r: &Resources) {
    for (k, v) in r {
        let e = into.entry(k.clone()).or_insert(*v);
        if *v > *e {
            *e = *v;
        }
    }
}

fn is_sidecar(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

/// Resources the pod level may set (KEP-2837): cpu, memory, hugepages.
fn pod_level_supported(name: &str) -> bool {
    name == "cpu" || name == "memory" || name.starts_with("hugepages-")
}

/// Which side of a container's resources, and whether it is the limits.
type Side = fn(&ResourceRequirements) -> Option<&BTreeMap<String, Quantity>>;

/// Whether the pod's in-place resize cannot be done on its node (condition `PodResizePending`
/// with reason `Infeasible`).
fn resize_infeasible(pod: &LeanPod) -> bool {
    let conditions = pod.status.as_ref().and_then(|s| s.conditions.as_ref());
    conditions
        .into_iter()
        .flatten()
        .find(|c| c.type_ == "PodResizePending")
        .is_some_and(|c| c.infeasible)
}

/// One side of one container, with in-place resize (KEP-1287) as
/// k8s.io/component-helpers/resource reads it with `UseStatusResources` (the scheduler's view
/// while the InPlacePodVerticalScaling gate is on, its default since 1.33): where the kubelet
/// reports the container's resources, requests are the largest of the spec's, the status's
/// and the allocated ones, and limits the larger of the spec's and the status's; while the
/// resize is infeasible, the spec's are left out.
fn container_side(
    c: &Container,
    status: Option<&ContainerStatus>,
    side: Side,
    limits: bool,
    infeasible: bool,
) -> Result<Resources, BadObject> {
    let spec = parse_list(c.resources.as_ref().and_then(side))?;
    let Some((status, running)) = status.and_then(|s| Some((s, s.resources.as_ref()?))) else {
        return Ok(spec);
    };
    let mut out = if infeasible { Resources::new() } else { spec };
    max_into(&mut out, &parse_list(side(running))?);
    if !limits {
        max_into(&mut out, &parse_list(status.allocated_resources.as_ref())?);
    }
    Ok(out)
}

/// The status of container `name` in `list`.
fn status_of<'a>(
    list: Option<&'a Vec<ContainerStatus>>,
    name: &str,
) -> Option<&'a ContainerStatus> {
    list.into_iter().flatten().find(|s| s.name == name)
}

/// One side (requests or limits) of Kubernetes' `PodRequests`/`PodLimits`
/// (k8s.io/component-helpers/resource): app containers and sidecars summed; each regular init
/// container plus the sidecars started before it; the larger of the two per resource;
/// pod-level values where set; overhead added (to limits only where a limit exists). App
/// containers and sidecars count what an in-place resize gave them ([`container_side`]).
fn effective(pod: &LeanPod, side: Side, limits: bool) -> Result<Resources, BadObject> {
    let Some(spec) = pod.spec.as_ref() else {
        return Ok(Resources::new());
    };
    let infeasible = resize_infeasible(pod);
    let statuses = pod.status.as_ref();
    let mut total = Resources::new();
    for c in &spec.containers {
        let status = status_of(
            statuses.and_then(|s| s.container_statuses.as_ref()),
            &c.name,
        );
        add(
            &mut total,
            &container_side(c, status, side, limits, infeasible)?,
        );
    }
    let mut sidecars = Resources::new();
    let mut init = Resources::new();
    for c in spec.init_containers.iter().flatten() {
        // Only a sidecar's status counts: a regular init container has ended.
        let status = is_sidecar(c)
            .then(|| {
                status_of(
                    statuses.and_then(|s| s.init_container_statuses.as_ref()),
                    &c.name,
                )
            })
            .flatten();
        let r = container_side(c, status, side, limits, infeasible)?;
        let step = if is_sidecar(c) {
            add(&mut total, &r);
            add(&mut sidecars, &r);
            sidecars.clone()
        } else {
            let mut t = r;
            add(&mut t, &sidecars);
            t
        };
        max_into(&mut init, &step);
    }
    max_into(&mut total, &init);
    let pod_level = parse_list(spec.resources.as_ref().and_then(side))?;
    for (k, v) in pod_level {
        if pod_level_supported(&k) {
            total.insert(k, v);
        }
    }
    for (k, v) in parse_list(spec.overhead.as_ref())? {
        if limits {
            if let Some(e) = total.get_mut(&k) {
                *e += v;
            }
        } else {
            *total.entry(k).or_default() += v;
        }
    }
    Ok(total)
}

/// Effective (requests, limits) of a pod (as decoded by the watchers, or a whole `Pod`).
pub fn pod_resources<P: AsLeanPod + ?Sized>(pod: &P) -> Result<(Resources, Resources), BadObject> {
    let pod = &*pod.lean()?;
    Ok((
        effective(pod, |r| r.requests.as_ref(), false)?,
        effective(pod, |r| r.limits.as_ref(), true)?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(v: serde_json::Value) -> LeanPod {
        serde_json::from_value(v).unwrap()
    }

    fn get(r: &Resources, k: &str) -> Option<f64> {
        r.get(k).copied()
    }

    /// A pod of one app container `app` and one sidecar `proxy`, with `status` as the kubelet
    /// wrote it and `conditions`.
    fn resized(status: serde_json::Value, conditions: serde_json::Value) -> LeanPod {
        pod(serde_json::json!({
            "spec": {
                "containers": [{"name": "app", "resources": {
                    "requests": {"cpu": "2", "memory": "1Gi"},
                    "limits": {"cpu": "4", "memory": "1Gi"}}}],
                "initContainers": [
                    {"name": "proxy", "restartPolicy": "Always",
                     "resources": {"requests": {"cpu": "100m"}}},
                    {"name": "setup", "resources": {"requests": {"cpu": "50m"}}}
                ]
            },
            "status": {"conditions": conditions, "containerStatuses": [status],
                       "initContainerStatuses": [
                           {"name": "proxy", "resources": {"requests": {"cpu": "300m"}},
                            "allocatedResources": {"cpu": "300m"}},
                           {"name": "setup", "resources": {"requests": {"cpu": "9"}}}]}
        }))
    }

    #[test]
    fn a_resize_in_progress_counts_the_larger_of_desired_running_and_allocated() {
        // Desired 2 CPUs (spec), running and allocated 1; memory shrinking from 2Gi to 1Gi.
        let p = resized(
            serde_json::json!({"name": "app",
                "resources": {"requests": {"cpu": "1", "memory": "2Gi"},
                              "limits": {"cpu": "3", "memory": "2Gi"}},
                "allocatedResources": {"cpu": "1", "memory": "2Gi"}}),
            serde_json::json!([{"type": "PodResizeInProgress", "status": "True"}]),
        );
        let (req, lim) = pod_resources(&p).unwrap();
        // app 2 + the sidecar's running 0.3; the regular init container's status is ignored.
        assert_eq!(get(&req, "cpu"), Some(2.3));
        assert_eq!(get(&req, "memory"), Some(2.0 * 1024.0 * 1024.0 * 1024.0));
        assert_eq!(get(&lim, "cpu"), Some(4.0));
        assert_eq!(get(&lim, "memory"), Some(2.0 * 1024.0 * 1024.0 * 1024.0));
    }

    #[test]
    fn an_infeasible_resize_counts_what_runs() {
        let p = resized(
            serde_json::json!({"name": "app",
                "resources": {"requests": {"cpu": "1", "memory": "1Gi"},
                              "limits": {"cpu": "3"}},
                "allocatedResources": {"cpu": "1", "memory": "1Gi"}}),
            serde_json::json!([{"type": "PodResizePending", "status": "True",
                                "reason": "Infeasible", "message": "Node didn't have enough capacity"}]),
        );
        let (req, lim) = pod_resources(&p).unwrap();
        assert_eq!(get(&req, "cpu"), Some(1.3));
        assert_eq!(get(&lim, "cpu"), Some(3.0), "the running limits only");
        assert_eq!(get(&lim, "memory"), None, "no running memory limit");
        // Deferred (the node may fit it later): the desired values count.
        let p = resized(
            serde_json::json!({"name": "app", "resources": {"requests": {"cpu": "1"}}}),
            serde_json::json!([{"type": "PodResizePending", "status": "True", "reason": "Deferred"}]),
        );
        assert_eq!(get(&pod_resources(&p).unwrap().0, "cpu"), Some(2.3));
    }

    #[test]
    fn without_status_resources_the_spec_counts() {
        // A kubelet before in-place resize reports no resources in the statuses.
        let p = resized(
            serde_json::json!({"name": "app", "ready": true}),
            serde_json::json!(null),
        );
        let (req, lim) = pod_resources(&p).unwrap();
        assert_eq!(get(&req, "cpu"), Some(2.3));
        assert_eq!(get(&lim, "cpu"), Some(4.0));
        // A status of another container changes nothing.
        let p = resized(
            serde_json::json!({"name": "other", "resources": {"requests": {"cpu": "64"}}}),
            serde_json::json!([]),
        );
        assert_eq!(get(&pod_resources(&p).unwrap().0, "cpu"), Some(2.3));
    }

    #[test]
    fn pod_level_resources_still_win_over_resized_containers() {
        let mut p = resized(
            serde_json::json!({"name": "app", "resources": {"requests": {"cpu": "6"}}}),
            serde_json::json!([]),
        );
        let spec = p.spec.as_mut().unwrap();
        spec.resources = Some(ResourceRequirements {
            requests: Some([("cpu".to_string(), Quantity("3".into()))].into()),
            limits: None,
        });
        assert_eq!(get(&pod_resources(&p).unwrap().0, "cpu"), Some(3.0));
    }

    #[test]
    fn a_bad_status_quantity_is_a_bad_object() {
        let p = resized(
            serde_json::json!({"name": "app", "allocatedResources": {"cpu": "lots"},
                               "resources": {}}),
            serde_json::json!([]),
        );
        assert!(pod_resources(&p).is_err());
    }
}
