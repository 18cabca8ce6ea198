//! The HTTP side: the axum server that hands out the pull outputs' pre-rendered bodies
//! (`/metrics`, `/watcher`, health), the one accept loop with its limits (plain and TLS), TLS
//! and authentication.
//!
//! May import: [`crate::shared`], [`crate::model`], [`crate::outputs`]; never sources or
//! config.

pub mod auth;
mod connection;
pub mod listener;
pub mod options;
pub mod server;
pub mod tls;
