//! kube-prober: one prober for Kubernetes clusters and hosts.
//!
//! Sources (`fetch`) record into the hub (`provider`), which makes an immutable
//! [`model::Snapshot`] on every tick; outputs (`sink`, `api`) only ever read snapshots.

#![forbid(unsafe_code)]

pub mod api;
pub mod app;
pub mod cli;
pub mod config;
pub mod error;
pub mod fetch;
pub mod identity;
pub mod kubeclient;
pub mod leader;
pub mod limit;
pub mod model;
pub mod output;
pub mod probe;
pub mod provider;
pub mod quantity;
pub mod role;
pub mod sink;
pub mod subcommand;
pub mod task;
pub mod telemetry;
pub mod watch;

pub use api::watcher;
pub use error::{Error, Result};
