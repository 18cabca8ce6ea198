//! Task, container and platform data as series: the Prometheus text (absent values stay
//! absent, labels, promtool-clean) and the OTLP metrics (semantic-convention names and kinds).

use support::otlp as otlp_support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use kube_prober::model::{
    CgroupStats, ContainerSample, NumaMemory, Platform, Pressure, Snapshot, TaskContainer, TaskPod,
    TaskSample, TaskSet,
};
use kube_prober::outputs::otlp::{OTLP_METRICS, OtlpBounds, OtlpOptions, OtlpResource, OtlpSink};
use kube_prober::outputs::prometheus::{Format, render};
use kube_prober::outputs::{PushScope, Sink};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyV;
use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use otlp_support::OtlpReceiver;
use support::promtool_check;

fn pod(name: &str, uid: &str, ready: bool) -> Arc<TaskPod> {
    Arc::new(TaskPod {
        uid: uid.into(),
        namespace: "shop".into(),
        name: name.into(),
        qos: "burstable".into(),
        cgroup_ids: vec![uid.into()],
        labels: vec![("app", "web".into()), ("label_3tier", "x".into())],
        containers: vec![TaskContainer {
            name: "main".into(),
            id: Some("abc".into()),
            ready,
        }],
        requests: [
            ("cpu".to_string(), 0.25),
            ("memory".to_string(), 1e9),
            ("nvidia.com/gpu".to_string(), 1.0),
        ]
        .into_iter()
        .collect(),
        limits: BTreeMap::new(),
    })
}

fn snapshot() -> Snapshot {
    let full = CgroupStats {
        cpu_seconds: Some(12.5),
        cpu_periods: Some(10),
        cpu_throttled_periods: Some(2),
        cpu_throttled_seconds: Some(0.5),
        memory_usage_bytes: Some(1000.0),
        memory_working_set_bytes: Some(800.0),
        memory_rss_bytes: Some(600.0),
        memory_cache_bytes: Some(300.0),
        memory_limit_bytes: None,
        page_faults: Some(7),
        major_page_faults: Some(1),
        oom_kills: Some(0),
        cpuset_cpus: Some(4),
        cpuset_memory_nodes: Some(1),
        pressure: vec![Pressure {
            resource: "cpu",
            kind: "some",
            seconds: 1.5,
        }],
        numa_bytes: vec![(0, 4096.0)],
    };
    let mut snap = Snapshot::empty(SystemTime::now());
    snap.tasks = Some(Arc::new(TaskSet {
        node: "n1".into(),
        tasks: vec![
            TaskSample {
                pod: pod("web", "uid-1", true),
                stats: Some(full.clone()),
                containers: vec![ContainerSample {
                    name: "main".into(),
                    stats: CgroupStats {
                        cpu_seconds: Some(10.0),
                        ..CgroupStats::default()
                    },
                }],
            },
            TaskSample {
                pod: pod("pending", "uid-2", false),
                stats: None,
                containers: vec![],
            },
        ],
        collected_at: Some(SystemTime::now()),
    }));
    snap.platform = Some(Arc::new(Platform {
        node: "n1".into(),
        sockets: Some(1),
        cores: Some(2),
        cpus: Some(4),
        numa_nodes: Some(1),
        numa_memory: vec![NumaMemory {
            node: 0,
            total_bytes: 100.0,
            free_bytes: 40.0,
        }],
        cpu_busy_seconds: vec![(0, 5.0), (1, 6.0)],
        memory_usage_bytes: None,
        vmstat: vec![("pgfault", 9.0)],
    }));
    snap
}

const WEB: &str = "node=\"n1\",namespace=\"shop\",pod=\"web\",task_name=\"shop/web\",task_id=\"uid-1\",qos=\"burstable\",ready=\"true\",app=\"web\",label_3tier=\"x\"";

#[test]
fn prometheus_text() {
    let body = render(&snapshot(), Format::Text);
    for want in [
        format!("kube_prober_task_up{{{WEB}}} 1"),
        "kube_prober_task_up{node=\"n1\",namespace=\"shop\",pod=\"pending\",task_name=\"shop/pending\",task_id=\"uid-2\",qos=\"burstable\",ready=\"false\",app=\"web\",label_3tier=\"x\"} 0".to_string(),
        format!("kube_prober_task_cpu_usage_seconds_total{{{WEB}}} 12.5"),
        format!("kube_prober_task_memory_working_set_bytes{{{WEB}}} 800"),
        format!("kube_prober_task_pressure_stalled_seconds_total{{{WEB},resource=\"cpu\",kind=\"some\"}} 1.5"),
        format!("kube_prober_task_memory_numa_bytes{{{WEB},numa_node=\"0\"}} 4096"),
        format!("kube_prober_task_cpuset_cpus{{{WEB}}} 4"),
        format!("kube_prober_task_cpuset_memory_nodes{{{WEB}}} 1"),
        format!("kube_prober_task_resource_requests{{{WEB},resource=\"nvidia.com/gpu\",unit=\"integer\"}} 1"),
        format!("kube_prober_task_resource_requests{{{WEB},resource=\"memory\",unit=\"byte\"}} 1000000000"),
        format!("kube_prober_task_containers{{{WEB}}} 1"),
        format!("kube_prober_container_cpu_usage_seconds_total{{{WEB},container=\"main\"}} 10"),
        "kube_prober_platform_topology_cpus{node=\"n1\"} 4".to_string(),
        "kube_prober_platform_cpu_busy_seconds_total{node=\"n1\",cpu=\"1\"} 6".to_string(),
        "kube_prober_platform_memory_numa_used_bytes{node=\"n1\",numa_node=\"0\"} 60".to_string(),
        "kube_prober_platform_vmstat_total{node=\"n1\",key=\"pgfault\"} 9".to_string(),
    ] {
        assert!(body.contains(&want), "missing {want}\n{body}");
    }
    // Absent, never zero: no limit, no container memory, no cgroup for the pending pod.
    assert!(!body.contains("kube_prober_task_memory_limit_bytes{"));
    assert!(!body.contains("kube_prober_container_memory_usage_bytes{"));
    assert!(!body.contains("kube_prober_container_cpuset_cpus{"));
    assert!(!body.contains("kube_prober_platform_memory_usage_bytes{"));
    assert!(!body.contains(
        "kube_prober_task_cpu_usage_seconds_total{node=\"n1\",namespace=\"shop\",pod=\"pending\""
    ));
    let (code, out) = promtool_check(&body);
    assert_eq!(code, 0, "promtool: {out}\n{body}");
    let om = render(&snapshot(), Format::OpenMetrics);
    assert!(om.contains("# UNIT kube_prober_task_cpu_usage_seconds seconds"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otlp_names() {
    let rx = OtlpReceiver::start().await;
    let cfg = OtlpOptions {
        otlp_protocol: Some("grpc".into()),
        otlp_endpoint: Some(rx.grpc_endpoint()),
        ..Default::default()
    };
    let bounds = OtlpBounds {
        timeout: Some(Duration::from_secs(5)),
        max_response_bytes: None,
    };
    let config = cfg.resolve_with(bounds, &|_| None).unwrap();
    let sink = OtlpSink::new(
        config,
        &OtlpResource {
            cluster_name: "c".into(),
            role: "node".into(),
            node_name: Some("n1".into()),
            project: String::new(),
            location: String::new(),
            instance_id: "i".into(),
            host_id: String::new(),
        },
    )
    .unwrap();
    let report = sink
        .push(Arc::new(snapshot()), PushScope::All)
        .await
        .unwrap();
    assert!(
        rx.wait_for(report.requests as usize, Duration::from_secs(10))
            .await
    );
    let mut metrics = BTreeMap::new();
    for r in rx.received() {
        for m in r
            .request
            .resource_metrics
            .iter()
            .flat_map(|r| &r.scope_metrics)
            .flat_map(|s| &s.metrics)
        {
            metrics.insert(m.name.clone(), m.clone());
        }
    }
    for name in [
        "k8s.pod.cpu.time",
        "k8s.pod.memory.working_set",
        "k8s.pod.memory.usage",
        "container.cpu.time",
        "kube_prober.task.up",
        "kube_prober.platform.cpu.busy",
    ] {
        let m = metrics
            .get(name)
            .unwrap_or_else(|| panic!("{name} not sent"));
        let row = OTLP_METRICS.iter().find(|r| r.name == name).unwrap();
        assert_eq!(m.unit, row.unit, "{name}");
    }
    let cpu = &metrics["k8s.pod.cpu.time"];
    let Some(Data::Sum(sum)) = &cpu.data else {
        panic!("k8s.pod.cpu.time is a sum")
    };
    assert!(sum.is_monotonic);
    let p = &sum.data_points[0];
    let attr = |k: &str| {
        p.attributes
            .iter()
            .find(|a| a.key == k)
            .and_then(|a| a.value.as_ref())
            .and_then(|v| match &v.value {
                Some(AnyV::StringValue(s)) => Some(s.clone()),
                _ => None,
            })
    };
    assert_eq!(attr("k8s.pod.uid").as_deref(), Some("uid-1"));
    assert_eq!(attr("k8s.pod.name").as_deref(), Some("web"));
    assert_eq!(attr("k8s.namespace.name").as_deref(), Some("shop"));
}
