//! Kubernetes sources: pure derivation of facts from API objects (`derive`); the reflectors
//! that feed it come next.

pub mod aggregate;
pub mod backoff;
pub mod cluster;
pub mod derive;
pub mod kubelet;
pub mod lean;
pub mod shard;
pub mod task_pods;
