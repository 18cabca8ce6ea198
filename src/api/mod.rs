//! The HTTP side: the axum server and the load-watcher `/watcher` format.

pub mod auth;
pub mod server;
pub mod tls;
pub mod watcher;
