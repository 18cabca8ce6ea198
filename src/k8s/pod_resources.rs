//! A pod's effective requests and limits by Kubernetes' own rule (`PodRequests`/`PodLimits`
//! of k8s.io/component-helpers/resource), for the cluster watchers and the task source alike.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::k8s::lean::{AsLeanPod, BadObject, Container, LeanPod, ResourceRequirements};
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

/// One side (requests or limits) of Kubernetes' `PodRequests`/`PodLimits`
/// (k8s.io/component-helpers/resource): app containers and sidecars summed; each regular init
/// container plus the sidecars started before it; the larger of the two per resource;
/// pod-level values where set; overhead added (to limits only where a limit exists).
fn effective(
    pod: &LeanPod,
    side: fn(&ResourceRequirements) -> Option<&BTreeMap<String, Quantity>>,
    limits: bool,
) -> Result<Resources, BadObject> {
    let Some(spec) = pod.spec.as_ref() else {
        return Ok(Resources::new());
    };
    let of = |c: &Container| parse_list(c.resources.as_ref().and_then(side));
    let mut total = Resources::new();
    for c in &spec.containers {
        add(&mut total, &of(c)?);
    }
    let mut sidecars = Resources::new();
    let mut init = Resources::new();
    for c in spec.init_containers.iter().flatten() {
        let r = of(c)?;
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
