//! Library components against stand-ins: the watchers, leader election, the usage backends,
//! the outputs (OTLP, Cloud Monitoring, the renderer), HTTP handlers, probes and task series,
//! each driven in process against a stand-in of the system it talks to (tests/support).
//! Needs nothing beyond `cargo test`. Index: tests/README.md.

mod apiserver_standin;
mod cluster_metrics;
mod faults_watch;
mod gcm;
mod http_api;
mod identity;
mod kubelet_pods;
mod leader;
mod metrics_server_backend;
mod otlp;
mod probes;
mod prometheus_backend;
mod push_outage;
mod render_cache;
mod signalfx_backend;
mod sinks;
mod task_perf_series;
mod task_series;
mod trimaran;
mod watcher_backend;
mod watchers;
