//! The neutral room: helpers every layer may use. It imports nothing else of the crate.

pub mod dns;
pub mod error;
pub mod json_items;
pub mod limit;
pub mod options;
pub mod quantity;
pub mod retry_after;
pub mod suggest;
pub mod telemetry;
