//! The `CreateTimeSeries` requests: the monitored resource's common labels, and each
//! series as a `TimeSeries` with its one point.

use std::collections::HashMap;

use gcloud_sdk::google::api::metric_descriptor::{MetricKind, ValueType};
use gcloud_sdk::google::api::{Metric, MonitoredResource};
use gcloud_sdk::google::monitoring::v3::{
    Point, TimeInterval, TimeSeries, TypedValue, typed_value,
};

use super::GcmConfig;
use super::drafts::{Draft, Kind, Res, Value};
use crate::model::Snapshot;
use crate::outputs::{PushError, PushReport};

/// The labels every series' monitored resource carries: the configured project, location
/// and cluster, each falling back to the snapshot's; an error when one is known from neither.
pub(super) fn resource_labels(
    cfg: &GcmConfig,
    snap: &Snapshot,
) -> std::result::Result<[(&'static str, String); 3], PushError> {
    let pick = |set: &Option<String>, ours: &str, what: &str| {
        set.clone()
            .filter(|v| !v.is_empty())
            .or_else(|| (!ours.is_empty()).then(|| ours.to_string()))
            .ok_or_else(|| PushError {
                reason: "config".into(),
                message: format!(
                    "Cloud Monitoring needs the {what}: set it in the gcm config (not known from the environment)"
                ),
                sent: PushReport::default(),
            })
    };
    Ok([
        (
            "project_id",
            pick(&cfg.project, &snap.cluster.project, "project")?,
        ),
        (
            "location",
            pick(&cfg.location, &snap.cluster.location, "location")?,
        ),
        (
            "cluster_name",
            pick(&cfg.cluster, &snap.cluster.cluster_name, "cluster name")?,
        ),
    ])
}

/// Series `d` as a `TimeSeries` with its one point over `interval`, on its monitored
/// resource with the `common` labels.
pub(super) fn time_series(
    cfg: &GcmConfig,
    d: &Draft,
    common: &[(&'static str, String); 3],
    interval: TimeInterval,
) -> TimeSeries {
    let mut labels: HashMap<String, String> = common
        .iter()
        .map(|(k, v)| ((*k).to_string(), v.clone()))
        .collect();
    let resource_type = match &d.res {
        Res::Cluster => "k8s_cluster",
        Res::Node(n) => {
            labels.insert("node_name".into(), n.clone());
            "k8s_node"
        }
        Res::Pod { namespace, pod } => {
            labels.insert("namespace_name".into(), namespace.clone());
            labels.insert("pod_name".into(), pod.clone());
            "k8s_pod"
        }
    };
    let (value_type, value) = match d.value {
        Value::Int(v) => (ValueType::Int64, typed_value::Value::Int64Value(v)),
        Value::Double(v) => (ValueType::Double, typed_value::Value::DoubleValue(v)),
    };
    TimeSeries {
        metric: Some(Metric {
            r#type: cfg.metric_type(d.suffix),
            labels: d
                .labels
                .iter()
                .map(|(k, v)| ((*k).to_string(), v.clone()))
                .collect(),
        }),
        resource: Some(MonitoredResource {
            r#type: resource_type.to_string(),
            labels,
        }),
        metric_kind: match d.kind {
            Kind::Gauge => MetricKind::Gauge as i32,
            Kind::Cumulative => MetricKind::Cumulative as i32,
        },
        value_type: value_type as i32,
        points: vec![Point {
            interval: Some(interval),
            value: Some(TypedValue { value: Some(value) }),
        }],
        ..Default::default()
    }
}
