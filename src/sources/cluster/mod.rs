//! The cluster role's Kubernetes source: the watchers of nodes, pods and workloads
//! (`watchers`), the pure derivation of facts from API objects (`derive`), their per-node
//! aggregation (`aggregate`), the bindings of just-bound pods and their estimated load
//! (`estimate`) and the live shard of a StatefulSet (`shard`); `start` starts the watchers of a
//! role from their resolved configs.
//!
//! May import: [`crate::shared`], [`crate::model`], [`crate::hub`], [`crate::k8s`].

pub mod aggregate;
pub mod derive;
pub mod estimate;
pub mod options;
pub mod shard;
pub mod start;
pub mod watchers;
