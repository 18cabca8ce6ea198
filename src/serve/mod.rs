//! The HTTP side: the axum server that hands out the pull outputs' pre-rendered bodies
//! (`/metrics`, `/watcher`, health), its TLS and its authentication.
//!
//! May import: [`crate::shared`], [`crate::model`], [`crate::outputs`]; never sources or
//! config.

pub mod auth;
pub mod options;
pub mod server;
pub mod tls;
