//! Outputs. Each reads only a [`crate::model::Snapshot`]; none knows the sources.

pub mod names;
pub mod prometheus;
