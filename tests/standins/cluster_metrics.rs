//! Kubernetes objects -> derived cluster state -> hub -> /metrics: a golden exposition for a
//! small cluster, checked by promtool.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::apps::v1::{
    DaemonSet, DaemonSetSpec, DaemonSetStatus, Deployment, DeploymentSpec,
};
use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateTerminated, ContainerStatus, Node, NodeCondition,
    NodeSpec, NodeStatus, Pod, PodCondition, PodSpec, PodStatus, PodTemplateSpec,
    ResourceRequirements, Taint,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kube_prober::hub::{Provider, Store};
use kube_prober::model::ClusterInfo;
use kube_prober::outputs::prometheus::{Format, render, render_tail};
use kube_prober::sources::cluster::derive::{DeriveConfig, cluster_state};
use support::{assert_golden, promtool_check};

const NOW: u64 = 1_800_000_000;

fn map<T: Clone>(kv: &[(&str, T)]) -> Option<BTreeMap<String, T>> {
    Some(kv.iter().map(|(k, v)| (k.to_string(), v.clone())).collect())
}

fn q(kv: &[(&str, &str)]) -> Option<BTreeMap<String, Quantity>> {
    map(&kv
        .iter()
        .map(|(k, v)| (*k, Quantity(v.to_string())))
        .collect::<Vec<_>>())
}

fn node(name: &str, pool: &str, zone: &str, ready: &str, age: u64, cordoned: bool) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: map(&[
                ("cloud.google.com/gke-nodepool", pool.to_string()),
                ("topology.kubernetes.io/zone", zone.to_string()),
            ]),
            creation_timestamp: Some(Time(
                k8s_openapi::jiff::Timestamp::from_second((NOW - age) as i64).unwrap(),
            )),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            unschedulable: Some(cordoned),
            taints: cordoned.then(|| {
                vec![Taint {
                    key: "node.kubernetes.io/unschedulable".into(),
                    effect: "NoSchedule".into(),
                    ..Default::default()
                }]
            }),
            ..Default::default()
        }),
        status: Some(NodeStatus {
            conditions: Some(
                [
                    ("Ready", ready),
                    ("MemoryPressure", "False"),
                    ("DiskPressure", "False"),
                ]
                .iter()
                .map(|(t, s)| NodeCondition {
                    type_: t.to_string(),
                    status: s.to_string(),
                    ..Default::default()
                })
                .collect(),
            ),
            capacity: q(&[("cpu", "4"), ("memory", "16Gi")]),
            allocatable: q(&[("cpu", "3920m"), ("memory", "13Gi")]),
            ..Default::default()
        }),
    }
}

fn pod(
    name: &str,
    node: &str,
    owner: (&str, &str),
    addon: Option<&str>,
    ready: bool,
    restarts: i32,
) -> Pod {
    let mut labels = vec![];
    if owner.0 == "ReplicaSet" {
        labels.push(("pod-template-hash", "5f7d".to_string()));
    }
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("kube-system".into()),
            labels: map(&labels),
            annotations: addon.and_then(|a| {
                map(&[
                    ("components.gke.io/component-name", a.to_string()),
                    ("components.gke.io/component-version", "1.2.3".to_string()),
                ])
            }),
            owner_references: Some(vec![OwnerReference {
                api_version: "apps/v1".into(),
                kind: owner.0.into(),
                name: owner.1.into(),
                uid: "uid".into(),
                controller: Some(true),
                ..Default::default()
            }]),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: Some(node.into()),
            containers: vec![Container {
                name: "main".into(),
                resources: Some(ResourceRequirements {
                    requests: q(&[("cpu", "250m"), ("memory", "256Mi")]),
                    limits: q(&[("cpu", "1"), ("memory", "512Mi")]),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: Some(PodStatus {
            phase: Some("Running".into()),
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: if ready { "True" } else { "False" }.into(),
                ..Default::default()
            }]),
            container_statuses: Some(vec![ContainerStatus {
                name: "main".into(),
                restart_count: restarts,
                last_state: (restarts > 0).then(|| ContainerState {
                    terminated: Some(ContainerStateTerminated {
                        reason: Some("OOMKilled".into()),
                        exit_code: 137,
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }]),
            ..Default::default()
        }),
    }
}

fn template(addon: &str) -> PodTemplateSpec {
    PodTemplateSpec {
        metadata: Some(ObjectMeta {
            annotations: map(&[
                ("components.gke.io/component-name", addon.to_string()),
                ("components.gke.io/component-version", "1.2.3".to_string()),
            ]),
            ..Default::default()
        }),
        spec: None,
    }
}

#[test]
fn small_cluster_golden_metrics() {
    let nodes = vec![
        node("node-a", "pool-1", "us-central1-a", "True", 3600, false),
        node("node-b", "pool-1", "us-central1-b", "False", 3600, false),
        node("node-c", "pool-2", "us-central1-a", "True", 60, false),
        node("node-d", "pool-2", "us-central1-a", "True", 3600, true),
    ];
    let pods = vec![
        pod(
            "fluentbit-a",
            "node-a",
            ("DaemonSet", "fluentbit"),
            Some("fluentbit"),
            true,
            0,
        ),
        pod(
            "fluentbit-b",
            "node-b",
            ("DaemonSet", "fluentbit"),
            Some("fluentbit"),
            false,
            4,
        ),
        pod(
            "kube-dns-5f7d-x",
            "node-a",
            ("ReplicaSet", "kube-dns-5f7d"),
            Some("kubedns"),
            true,
            1,
        ),
        pod(
            "app-5f7d-y",
            "node-a",
            ("ReplicaSet", "app-5f7d"),
            None,
            true,
            9,
        ),
    ];
    let daemonsets = vec![DaemonSet {
        metadata: ObjectMeta {
            name: Some("fluentbit".into()),
            namespace: Some("kube-system".into()),
            ..Default::default()
        },
        spec: DaemonSetSpec {
            template: template("fluentbit"),
            ..Default::default()
        },
        status: Some(DaemonSetStatus {
            desired_number_scheduled: 4,
            ..Default::default()
        }),
    }];
    let deployments = vec![Deployment {
        metadata: ObjectMeta {
            name: Some("kube-dns".into()),
            namespace: Some("kube-system".into()),
            ..Default::default()
        },
        spec: DeploymentSpec {
            template: template("kubedns"),
            replicas: Some(2),
            ..Default::default()
        },
        status: None,
    }];
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(NOW);
    let state = cluster_state(
        &nodes,
        &pods,
        &daemonsets,
        &deployments,
        now,
        &DeriveConfig::default(),
    );

    let store = Store::new();
    store.cluster().record_cluster_info(ClusterInfo {
        cluster_name: "test".into(),
        role: "cluster".into(),
        ..Default::default()
    });
    store.cluster().record_cluster_state(state);
    let snap = store.snapshot(now);
    let text = render(&snap, Format::Text) + &render_tail(&snap, now, Format::Text);
    assert_golden("cluster_metrics.prom", &text);
    let (code, out) = promtool_check(&text);
    assert_eq!(code, 0, "{out}");

    // Spot checks of the gke-prober semantics, besides the golden file.
    for line in [
        // node-d is cordoned (spec.unschedulable): gke-prober would call it schedulable.
        "kube_prober_node_available{node=\"node-d\",pool=\"pool-2\",zone=\"us-central1-a\",ready=\"true\",schedulable=\"false\",done_warming=\"true\"} 0",
        "kube_prober_node_available{node=\"node-c\",pool=\"pool-2\",zone=\"us-central1-a\",ready=\"true\",schedulable=\"true\",done_warming=\"false\"} 0",
        "kube_prober_cluster_nodes{pool=\"pool-1\",zone=\"us-central1-a\",ready=\"true\",schedulable=\"true\",done_warming=\"true\",available=\"true\"} 1",
        // Expected from status.desiredNumberScheduled, not nodes x daemonsets.
        "kube_prober_addon_expected_pods{namespace=\"kube-system\",workload=\"fluentbit\",addon=\"fluentbit\",version=\"1.2.3\",controller=\"DaemonSet\"} 4",
        // The ReplicaSet resolved to its Deployment.
        "kube_prober_addon_pods{node=\"node-a\",addon=\"kubedns\",version=\"1.2.3\",controller=\"Deployment\"} 1",
        "kube_prober_addon_available{node=\"node-b\",addon=\"fluentbit\",version=\"1.2.3\",controller=\"DaemonSet\"} 0",
        "kube_prober_node_addons_available{node=\"node-a\",pool=\"pool-1\",zone=\"us-central1-a\"} 1",
        "kube_prober_container_restarts_total{namespace=\"kube-system\",pod=\"fluentbit-b\",container=\"main\",node=\"node-b\",addon=\"fluentbit\"} 4",
        "kube_prober_container_last_termination{namespace=\"kube-system\",pod=\"fluentbit-b\",container=\"main\",node=\"node-b\",reason=\"OOMKilled\",exit_code=\"137\"} 1",
        "kube_prober_node_pods{node=\"node-a\"} 3",
        "kube_prober_node_pod_requests_cpu_cores{node=\"node-a\"} 0.75",
        "kube_prober_node_allocatable_cpu_cores{node=\"node-a\"} 3.92",
        "kube_prober_node_cpu_capacity_cores{node=\"node-a\"} 4",
    ] {
        assert!(text.contains(&format!("{line}\n")), "missing: {line}");
    }
    assert!(
        !text.contains("pod=\"app-5f7d-y\""),
        "non-addon pods carry no restart series"
    );
}
