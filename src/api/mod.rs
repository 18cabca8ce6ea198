//! The HTTP side: the axum server and the load-watcher `/watcher` format.

pub mod server;
pub mod watcher;
pub mod auth;
pub mod tls;
