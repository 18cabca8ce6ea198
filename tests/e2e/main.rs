//! The built binary end to end against stand-ins: command line and first use, every role and
//! backend, the push outputs, the fault suite's bounds, TLS and authentication, sharding and the
//! node role's task sources on fixture trees; and that every process a test starts ends with
//! it. Needs promtool and a real Prometheus for a few checks (installed by `bash .ci/test`).
//! Index: tests/README.md.

mod backends;
mod cli;
mod cluster;
mod faults_bounds;
mod faults_usage;
mod first_use;
mod host;
mod kubelet_node;
mod lean_drop_in;
mod owned;
mod pod_scope;
mod serve_auth;
mod serve_limits;
mod shard;
mod sinks;
mod surface;
mod task_node;
mod task_perf;
