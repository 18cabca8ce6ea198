//! What we ship, tested like code: the kustomize overlays rendered and validated, RBAC checked
//! against every request, the workloads run as their containers would (bubblewrap), the
//! Dockerfile's contract, the systemd unit, the Helm chart, dashboards and alerts on a real
//! Prometheus, and the monitoring mixin they are generated from. Index: tests/README.md.

mod alerts;
mod dashboards;
mod helm_chart;
mod image;
mod manifests;
mod mixin;
mod prometheus;
mod rbac;
mod systemd;
