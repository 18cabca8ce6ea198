//! How the OTLP output names what it sends: the metrics come from each family's declaration
//! ([`families::OTLP_METRICS`]); the attribute keys from our labels here.

#[cfg(doc)]
use crate::outputs::families;

/// Our label key as an OTel attribute key: the Kubernetes object names get their semconv keys,
/// every other label keeps its key.
pub fn attribute_key(label: &'static str) -> &'static str {
    match label {
        "node" => "k8s.node.name",
        "namespace" => "k8s.namespace.name",
        "pod" => "k8s.pod.name",
        "container" => "k8s.container.name",
        "task_id" => "k8s.pod.uid",
        other => other,
    }
}
