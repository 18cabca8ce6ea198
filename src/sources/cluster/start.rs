//! The Kubernetes watchers of a role started from their resolved configs (the workload
//! namespaces and addon keys, the pod scope, the estimate of just-bound pods): every Node, the
//! pods `--pod-scope` names and the workloads in the cluster role; this node and its pods in the
//! node role. The wiring hands over only what it alone knows ([`StartContext`]).

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::derive::DeriveConfig;
use super::estimate::EstimateConfig;
use super::options::{ScopeConfig, WorkloadConfig};
use super::watchers::{self, PodScope, Scope, Stores, WatchConfig};
use crate::hub::Provider;
use crate::k8s::lean::PodFollower;
use crate::k8s::role::Role;

/// What the watchers need from the wiring, beside their own configs.
pub struct StartContext {
    pub role: Role,
    /// This node's name (the node role watches it and the pods on it).
    pub node_name: String,
    /// `--tick-interval`: how often the cluster state is derived from the watchers' stores.
    pub interval: Duration,
    pub client: kube::Client,
    /// What the pod watch also feeds (the node role's task pods), when it feeds anything.
    pub pods_follower: Option<Arc<dyn PodFollower>>,
}

/// Starts the watchers of `ctx.role` (the cluster or the node role) and the loop deriving the
/// cluster state; returns their stores and tasks. `--pod-scope` applies to the cluster role
/// only: the node role warns and watches the pods on its node.
pub fn spawn(
    workloads: &WorkloadConfig,
    scope: &ScopeConfig,
    estimate: EstimateConfig,
    ctx: StartContext,
    provider: Arc<dyn Provider>,
    cancel: &CancellationToken,
) -> (Stores, Vec<JoinHandle<()>>) {
    let watch = match ctx.role {
        Role::Node => Scope::Node {
            name: ctx.node_name,
        },
        _ => Scope::Cluster {
            namespaces: workloads.namespaces.clone(),
            pods: scope.pods,
            workloads: workloads.watch,
        },
    };
    if ctx.role == Role::Node && scope.pods != PodScope::All {
        tracing::warn!(
            pod_scope = scope.pods.as_str(),
            "--pod-scope applies to the cluster role only; the node role watches the pods on its node"
        );
    }
    let wc = WatchConfig {
        scope: watch,
        derive: DeriveConfig {
            addon_keys: workloads.addon_keys.clone(),
            estimate,
            ..DeriveConfig::default()
        },
        interval: ctx.interval,
        initial_list: scope.initial_list,
    };
    watchers::spawn_with_tasks(ctx.client, wc, provider, cancel.clone(), ctx.pods_follower)
}
