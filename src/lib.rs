//! kube-prober: one prober for Kubernetes clusters and hosts.
//!
//! The tree follows the data: [`sources`] record into the [`hub`], which makes an immutable
//! [`model::Snapshot`] on every tick; [`outputs`] only ever read snapshots, and [`serve`] hands
//! the pull outputs' bodies out over HTTP. [`config`] resolves every option, and [`app`] wires
//! it all together.
//!
//! Layers, bottom up; a module imports only from the layers below it (and its own room):
//!
//! 1. [`shared`]: errors, byte caps, quantities, typo hints, `Retry-After`, logging.
//! 2. [`model`]: the data types the hub holds and the snapshot outputs read.
//! 3. [`hub`]: the store sources record into and the snapshot it makes.
//! 4. [`k8s`]: the Kubernetes client, its backoff, lean API types, leader election, role and
//!    identity detection.
//! 5. [`sources`]: usage backends, cluster watchers, probes, the task source.
//! 6. [`outputs`]: Prometheus, `/watcher`, OTLP, Cloud Monitoring, the push runner.
//! 7. [`serve`]: the HTTP server, its TLS and auth.
//! 8. [`config`]: flags, environment and config file, resolved into each component's config.
//! 9. [`app`]: the wiring: role, sources, hub, outputs, server, ticks, shutdown.

#![forbid(unsafe_code)]

pub mod app;
pub mod config;
pub mod hub;
pub mod k8s;
pub mod model;
pub mod outputs;
pub mod serve;
pub mod shared;
pub mod sources;

pub use outputs::watcher;
pub use shared::error::{Error, Result};
