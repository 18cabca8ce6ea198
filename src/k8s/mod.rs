//! Talking to Kubernetes and finding where we run: the client with its body cap and backoff,
//! the lean API types the watchers decode, Lease-based leader election, role detection and
//! the cloud identity (GCE metadata).
//!
//! May import: [`crate::shared`] and [`crate::model`]; never sources, outputs or config.

pub mod backoff;
pub mod client;
pub mod identity;
pub mod leader;
pub mod leader_options;
pub mod lean;
pub mod pod_resources;
pub mod role;
pub mod stream_list;
