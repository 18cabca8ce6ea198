//! The load of just-bound pods: which pods the hub should hold as bindings (bound to a node
//! whose usage samples may not show them yet), from when their use shows, and what they are
//! estimated to use until then. Pure functions of a pod, the clock and the settings; the pod
//! watcher ([`super::watchers`]) calls them on every pod event.
//!
//! The estimate is Koordinator's default estimator (its LoadAwareScheduling plugin): per
//! resource, max(request, limit) × a scaling factor, capped at the limit when there is one;
//! a pod with neither request nor limit for the resource counts a default instead.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::k8s::lean::{LeanPod, PodCondition};
use crate::model::{Binding, CpuMem, PodFacts};

/// How the load of just-bound pods is estimated (`--estimate-*`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EstimateConfig {
    /// The share of max(request, limit) CPU a just-bound pod is counted with, in (0, 1].
    pub cpu_factor: f64,
    /// The same for memory.
    pub memory_factor: f64,
    /// Cores counted for a pod with neither CPU request nor limit.
    pub default_cpu_cores: f64,
    /// Bytes counted for a pod with neither memory request nor limit.
    pub default_memory_bytes: f64,
    /// After a pod turns Ready, how long until its use shows in the node's samples.
    pub ramp_up: Duration,
    /// After binding, how long a pod that is not Ready is waited for before its use is
    /// assumed to show in the samples (it runs, or it will not use much).
    pub longest_wait: Duration,
}

/// Koordinator's defaults: 85 % of CPU, 70 % of memory, 250m and 200 MiB for a pod without
/// requests or limits; one metrics-server resolution (60 s at its upstream default, also
/// koordlet's report interval) of ramp-up; five minutes of waiting for readiness.
impl Default for EstimateConfig {
    fn default() -> Self {
        EstimateConfig {
            cpu_factor: 0.85,
            memory_factor: 0.70,
            default_cpu_cores: 0.25,
            default_memory_bytes: 200.0 * 1024.0 * 1024.0,
            ramp_up: Duration::from_secs(60),
            longest_wait: Duration::from_secs(300),
        }
    }
}

/// A binding whose `shows_from` is this far in the past is over: no usage window the hub
/// keeps (5, 10 and 15 minutes) still starts before it, so the pod is not recorded (and is
/// forgotten if it was).
pub const OVER_AFTER: Duration = Duration::from_secs(15 * 60);

/// One resource's estimate: max(`request`, `limit`) × `factor`, at most `limit` when there is
/// one (above 0); `default` (unscaled) when both are 0 or absent.
pub fn estimate(request: f64, limit: f64, factor: f64, default: f64) -> f64 {
    let base = request.max(limit);
    // Not above 0: none given (NaN, which no parsed quantity is, counts as none too).
    if base.is_nan() || base <= 0.0 {
        return default;
    }
    let e = base * factor;
    if limit > 0.0 { e.min(limit) } else { e }
}

/// A pod's estimate from its effective requests and limits (as the scheduler counts them):
/// CPU rounded to whole millicores and memory to whole bytes, as Koordinator rounds.
pub fn pod_estimate(requests: CpuMem, limits: CpuMem, cfg: &EstimateConfig) -> CpuMem {
    let cpu = estimate(
        requests.cpu_cores,
        limits.cpu_cores,
        cfg.cpu_factor,
        cfg.default_cpu_cores,
    );
    let memory = estimate(
        requests.memory_bytes,
        limits.memory_bytes,
        cfg.memory_factor,
        cfg.default_memory_bytes,
    );
    CpuMem {
        cpu_cores: (cpu * 1000.0).round() / 1000.0,
        memory_bytes: memory.round(),
    }
}

/// Whether condition `type_` is True: `None` when it is not, else since when (`None` when
/// it says no time); an error when its time cannot be read.
fn true_since(
    conditions: &[PodCondition],
    type_: &str,
) -> Result<Option<Option<SystemTime>>, String> {
    let Some(c) = conditions
        .iter()
        .find(|c| c.type_ == type_ && c.status == "True")
    else {
        return Ok(None);
    };
    c.last_transition_time
        .get()
        .map(Some)
        .map_err(|e| format!("condition {type_}: {e}"))
}

/// The binding the hub should hold for pod `key` (`namespace/name`), or `None` when it holds
/// none. `facts` are the pod's facts (node, phase, effective requests and limits);
/// `seen_bound` is when the watcher first saw it bound (its binding held so far, else now).
///
/// - A pod is a binding when it has a node, is not Succeeded or Failed (it uses nothing any
///   more) and is not being deleted (its use is leaving, not arriving).
/// - `bound_at`: the time its `PodScheduled` condition turned True; a pod without one (created
///   with `spec.nodeName` set, as kwok's and static pods are) counts from `seen_bound`.
/// - `shows_from`: Ready True since t: t + the ramp-up (Ready True without a time: `bound_at`
///   + the ramp-up); not Ready: `bound_at` + the longest wait.
/// - A binding over more than [`OVER_AFTER`] before `now` is none.
///
/// An error (an unreadable time of one of those two conditions) leaves the pod without a
/// binding; the caller counts it.
pub fn binding_of(
    pod: &LeanPod,
    facts: &PodFacts,
    key: &str,
    seen_bound: SystemTime,
    now: SystemTime,
    cfg: &EstimateConfig,
) -> Result<Option<Binding>, String> {
    let Some(node) = facts.node.clone() else {
        return Ok(None);
    };
    if matches!(&*facts.phase, "Succeeded" | "Failed") || pod.metadata.deletion_timestamp.is_some()
    {
        return Ok(None);
    }
    let conditions = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default();
    let bound_at = true_since(conditions, "PodScheduled")?
        .flatten()
        .unwrap_or(seen_bound);
    let after = |d: Duration| bound_at.checked_add(d).unwrap_or(bound_at);
    let shows_from = match true_since(conditions, "Ready")? {
        Some(Some(t)) => t.checked_add(cfg.ramp_up).unwrap_or(t),
        Some(None) => after(cfg.ramp_up),
        None => after(cfg.longest_wait),
    };
    if shows_from.checked_add(OVER_AFTER).is_some_and(|t| t < now) {
        return Ok(None);
    }
    let use_ = pod_estimate(facts.requests, facts.limits, cfg);
    Ok(Some(Binding {
        pod: Arc::from(key),
        node,
        bound_at,
        shows_from,
        cpu_cores: use_.cpu_cores,
        memory_bytes: use_.memory_bytes,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::cluster::derive::{DeriveConfig, pod_facts};

    const MI: f64 = 1024.0 * 1024.0;

    fn cm(cpu_cores: f64, memory_bytes: f64) -> CpuMem {
        CpuMem {
            cpu_cores,
            memory_bytes,
        }
    }

    fn t(s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(s)
    }

    /// 2026-01-01T00:00:00Z.
    const T0: u64 = 1_767_225_600;

    fn rfc(s: u64) -> String {
        k8s_openapi::jiff::Timestamp::from_second(s as i64)
            .expect("a time")
            .to_string()
    }

    /// Hand-computed cases of Koordinator's formula with its default factors.
    #[test]
    fn the_estimate_is_koordinators_formula() {
        let d = EstimateConfig::default();
        let cases = [
            // (requests, limits, estimate)
            // Requests only: 85 % of 1 core, 70 % of 1 GiB.
            (cm(1.0, 1024.0 * MI), cm(0.0, 0.0), cm(0.85, 751_619_277.0)),
            // Limits above requests: the limit scaled (2 × 0.85; 512 Mi × 0.7 = 358.4 Mi).
            (
                cm(0.5, 256.0 * MI),
                cm(2.0, 512.0 * MI),
                cm(1.7, 375_809_638.0),
            ),
            // Requests equal to limits (Guaranteed): scaled, so below the limit.
            (
                cm(0.1, 100.0 * MI),
                cm(0.1, 100.0 * MI),
                cm(0.085, 73_400_320.0),
            ),
            // Nothing: the defaults, unscaled.
            (cm(0.0, 0.0), cm(0.0, 0.0), cm(0.25, 200.0 * MI)),
            // CPU only: memory is the default.
            (cm(0.2, 0.0), cm(0.0, 0.0), cm(0.17, 200.0 * MI)),
            // Rounding to millicores: 0.001 × 0.85 = 0.00085 -> 1m.
            (cm(0.001, 1.0), cm(0.0, 0.0), cm(0.001, 1.0)),
        ];
        for (req, lim, want) in cases {
            assert_eq!(pod_estimate(req, lim, &d), want, "{req:?} {lim:?}");
        }
        // The cap: a factor above 1 (or a request above the limit) stops at the limit.
        assert_eq!(estimate(1.0, 0.0, 1.5, 0.25), 1.5);
        assert_eq!(estimate(1.0, 1.2, 1.5, 0.25), 1.2);
        assert_eq!(estimate(2.0, 1.0, 0.85, 0.25), 1.0);
        assert_eq!(estimate(f64::NAN, 0.0, 0.85, 0.25), 0.25);
    }

    /// A pod bound to `node` (if any) with the given conditions: (type, status, time).
    fn pod(node: Option<&str>, phase: &str, conditions: &[(&str, &str, Option<u64>)]) -> LeanPod {
        let conds: Vec<_> = conditions
            .iter()
            .map(|(ty, st, at)| {
                serde_json::json!({"type": ty, "status": st,
                    "lastTransitionTime": at.map(rfc)})
            })
            .collect();
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"nodeName": node, "containers": [{"resources": {
                "requests": {"cpu": "500m", "memory": "100Mi"},
                "limits": {"cpu": "1"}}}]},
            "status": {"phase": phase, "conditions": conds},
        }))
        .expect("a lean pod")
    }

    fn decide(p: &LeanPod, seen: u64, now: u64) -> Result<Option<Binding>, String> {
        let f = pod_facts(p, &DeriveConfig::default()).expect("facts");
        binding_of(p, &f, "ns/p", t(seen), t(now), &EstimateConfig::default())
    }

    fn times(b: &Binding) -> (SystemTime, SystemTime) {
        (b.bound_at, b.shows_from)
    }

    #[test]
    fn a_scheduled_pod_is_bound_from_its_condition_and_shows_after_ready_plus_ramp_up() {
        let sched = ("PodScheduled", "True", Some(T0));
        // Not ready yet: bound + 5 minutes.
        let b = decide(&pod(Some("n1"), "Pending", &[sched]), T0 + 30, T0 + 30)
            .unwrap()
            .expect("a binding");
        assert_eq!(times(&b), (t(T0), t(T0 + 300)));
        assert_eq!((&*b.pod, &*b.node), ("ns/p", "n1"));
        // 1 core limit × 0.85; 100 Mi request × 0.7.
        assert_eq!((b.cpu_cores, b.memory_bytes), (0.85, 73_400_320.0));
        // Ready 40 s after binding: ready + 60 s.
        let ready = ("Ready", "True", Some(T0 + 40));
        let b = decide(&pod(Some("n1"), "Running", &[sched, ready]), T0, T0 + 50)
            .unwrap()
            .expect("a binding");
        assert_eq!(times(&b), (t(T0), t(T0 + 100)));
        // Ready False counts as not ready.
        let unready = ("Ready", "False", Some(T0 + 40));
        let b = decide(&pod(Some("n1"), "Running", &[sched, unready]), T0, T0 + 50)
            .unwrap()
            .expect("a binding");
        assert_eq!(times(&b), (t(T0), t(T0 + 300)));
        // Ready without a time: ready since binding.
        let b = decide(
            &pod(Some("n1"), "Running", &[sched, ("Ready", "True", None)]),
            T0,
            T0 + 50,
        )
        .unwrap()
        .expect("a binding");
        assert_eq!(times(&b), (t(T0), t(T0 + 60)));
    }

    #[test]
    fn a_pod_created_bound_counts_from_when_it_was_first_seen() {
        // kwok's pods: nodeName set at creation, no PodScheduled condition.
        let p = pod(Some("n1"), "Pending", &[]);
        let b = decide(&p, T0 + 7, T0 + 9).unwrap().expect("a binding");
        assert_eq!(times(&b), (t(T0 + 7), t(T0 + 307)));
        // A PodScheduled condition that is not True does not count either.
        let p = pod(
            Some("n1"),
            "Pending",
            &[("PodScheduled", "False", Some(T0))],
        );
        let b = decide(&p, T0 + 7, T0 + 9).unwrap().expect("a binding");
        assert_eq!(b.bound_at, t(T0 + 7));
    }

    #[test]
    fn unbound_finished_deleted_and_old_pods_are_no_bindings() {
        let sched = ("PodScheduled", "True", Some(T0));
        assert_eq!(decide(&pod(None, "Pending", &[]), T0, T0), Ok(None));
        assert_eq!(decide(&pod(Some(""), "Pending", &[]), T0, T0), Ok(None));
        for phase in ["Succeeded", "Failed"] {
            assert_eq!(decide(&pod(Some("n1"), phase, &[sched]), T0, T0), Ok(None));
        }
        let mut deleting = pod(Some("n1"), "Running", &[sched]);
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::from_second(T0 as i64).expect("a time"),
            ));
        assert_eq!(decide(&deleting, T0, T0), Ok(None));
        // Ready at T0 + 40: shows from T0 + 100, over 15 minutes later.
        let p = pod(
            Some("n1"),
            "Running",
            &[sched, ("Ready", "True", Some(T0 + 40))],
        );
        assert!(decide(&p, T0, T0 + 100 + 900).unwrap().is_some());
        assert_eq!(decide(&p, T0, T0 + 100 + 901), Ok(None));
        // Never ready: over 15 minutes after the longest wait.
        let p = pod(Some("n1"), "Pending", &[sched]);
        assert!(decide(&p, T0, T0 + 1200).unwrap().is_some());
        assert_eq!(decide(&p, T0, T0 + 1201), Ok(None));
    }

    #[test]
    fn an_unreadable_time_of_a_condition_read_is_an_error_and_others_are_ignored() {
        let mut p = pod(Some("n1"), "Running", &[("PodScheduled", "True", Some(T0))]);
        let conds = p
            .status
            .as_mut()
            .and_then(|s| s.conditions.as_mut())
            .expect("conditions");
        conds[0].last_transition_time = crate::k8s::lean::TransitionTime::Unreadable;
        let e = decide(&p, T0, T0).unwrap_err();
        assert!(e.contains("PodScheduled"), "{e}");
        // The same on a condition nothing reads: no error.
        let conds = p
            .status
            .as_mut()
            .and_then(|s| s.conditions.as_mut())
            .expect("conditions");
        conds[0].type_ = "Initialized".into();
        assert!(decide(&p, T0, T0).unwrap().is_some());
    }
}
