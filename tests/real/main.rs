//! Against the real upstream components (tests/upstream/build.sh): Helm installs, kwok node
//! lifecycles, the Prometheus Operator, Trimaran's scheduler beside load-watcher, a real
//! Prometheus with node_exporter, the OpenTelemetry Collector, three minutes of the soak (churn,
//! restarts, kills and Collector outages). Each test starts its own control
//! plane or component; the three suites that share one control plane for their whole run
//! (tests/real_cluster.rs, tests/real_faults.rs, tests/real_metrics_server.rs) are binaries of
//! their own. Index: tests/README.md.

mod helm_install;
mod node_lifecycle;
mod otlp_collector;
mod overlays;
mod prometheus;
mod prometheus_operator;
mod soak;
mod trimaran;
