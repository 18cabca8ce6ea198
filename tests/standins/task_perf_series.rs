//! Perf counter data as Prometheus series: the families of the active set with the task labels,
//! ratios absent where undefined (never NaN or 0), the state families, nothing without
//! `--task-perf-events`, and promtool-clean text.

use std::sync::Arc;
use std::time::SystemTime;

use kube_prober::model::{
    PerfCounts, PerfEventSet, Snapshot, TaskContainer, TaskPerfSample, TaskPerfSet, TaskPod,
};
use kube_prober::outputs::prometheus::{Format, render};
use support::promtool_check;

fn pod(name: &str, uid: &str) -> Arc<TaskPod> {
    Arc::new(TaskPod {
        uid: uid.into(),
        namespace: "shop".into(),
        name: name.into(),
        qos: "burstable".into(),
        cgroup_ids: vec![uid.into()],
        labels: vec![("app", "web".into())],
        containers: vec![TaskContainer {
            name: "main".into(),
            id: Some("abc".into()),
            ready: true,
        }],
        requests: Default::default(),
        limits: Default::default(),
    })
}

fn snapshot(set: Option<PerfEventSet>, tasks: Vec<TaskPerfSample>) -> Snapshot {
    let mut snap = Snapshot::empty(SystemTime::now());
    snap.task_perf = Some(Arc::new(TaskPerfSet {
        node: "n1".into(),
        event_set: set,
        tasks,
        open_failures: vec![("unsupported", 1)],
        open_counters: 16,
    }));
    snap
}

const WEB: &str = "node=\"n1\",namespace=\"shop\",pod=\"web\",task_name=\"shop/web\",task_id=\"uid-1\",qos=\"burstable\",ready=\"true\",app=\"web\"";

#[test]
fn hardware_set_with_ratios_and_state() {
    let counts = PerfCounts {
        cycles: Some(2e9),
        instructions: Some(3e9),
        cache_references: Some(1e6),
        cache_misses: Some(2.5e5),
        ..PerfCounts::default()
    };
    let tasks = vec![
        TaskPerfSample {
            pod: pod("web", "uid-1"),
            counts,
            ipc: Some(1.5),
            cache_mpki: Some(0.25),
            scaling_factor: Some(2.0),
        },
        // Idle pod: no cycles, no instructions in the interval.
        TaskPerfSample {
            pod: pod("idle", "uid-2"),
            counts,
            ipc: None,
            cache_mpki: None,
            scaling_factor: None,
        },
    ];
    let body = render(&snapshot(Some(PerfEventSet::Hardware), tasks), Format::Text);
    for want in [
        format!("kube_prober_task_perf_cycles_total{{{WEB}}} 2000000000"),
        format!("kube_prober_task_perf_instructions_total{{{WEB}}} 3000000000"),
        format!("kube_prober_task_perf_cache_references_total{{{WEB}}} 1000000"),
        format!("kube_prober_task_perf_cache_misses_total{{{WEB}}} 250000"),
        format!("kube_prober_task_perf_instructions_per_cycle{{{WEB}}} 1.5"),
        format!("kube_prober_task_perf_cache_misses_per_kilo_instructions{{{WEB}}} 0.25"),
        format!("kube_prober_task_perf_scaling_factor{{{WEB}}} 2"),
        "kube_prober_task_perf_event_set{node=\"n1\",set=\"hardware\"} 1".into(),
        "kube_prober_task_perf_event_set{node=\"n1\",set=\"software\"} 0".into(),
        "kube_prober_task_perf_event_set{node=\"n1\",set=\"none\"} 0".into(),
        "kube_prober_task_perf_open_failures_total{node=\"n1\",reason=\"unsupported\"} 1".into(),
        "kube_prober_task_perf_open_counters{node=\"n1\"} 16".into(),
    ] {
        assert!(body.contains(&want), "missing {want}\n{body}");
    }
    // The idle pod has counts but no ratios: absent, not NaN, not 0.
    assert!(body.contains(
        "kube_prober_task_perf_cycles_total{node=\"n1\",namespace=\"shop\",pod=\"idle\""
    ));
    assert!(!body.contains(
        "kube_prober_task_perf_instructions_per_cycle{node=\"n1\",namespace=\"shop\",pod=\"idle\""
    ));
    assert!(!body.contains("NaN"));
    // The other set's families are absent.
    assert!(!body.contains("kube_prober_task_perf_task_clock_seconds_total"));
    let (code, out) = promtool_check(&body);
    assert_eq!(code, 0, "promtool: {out}\n{body}");
}

#[test]
fn software_set_none_and_off() {
    let tasks = vec![TaskPerfSample {
        pod: pod("web", "uid-1"),
        counts: PerfCounts {
            task_clock_seconds: Some(1.25),
            context_switches: Some(40.0),
            page_faults: Some(7.0),
            ..PerfCounts::default()
        },
        ipc: None,
        cache_mpki: None,
        scaling_factor: Some(1.0),
    }];
    let body = render(&snapshot(Some(PerfEventSet::Software), tasks), Format::Text);
    assert!(body.contains(&format!(
        "kube_prober_task_perf_task_clock_seconds_total{{{WEB}}} 1.25"
    )));
    assert!(body.contains(&format!(
        "kube_prober_task_perf_context_switches_total{{{WEB}}} 40"
    )));
    assert!(body.contains(&format!(
        "kube_prober_task_perf_page_faults_total{{{WEB}}} 7"
    )));
    assert!(!body.contains("kube_prober_task_perf_cycles_total"));
    assert!(!body.contains("kube_prober_task_perf_instructions_per_cycle"));
    let (code, out) = promtool_check(&body);
    assert_eq!(code, 0, "promtool: {out}\n{body}");
    let tasks_again = vec![TaskPerfSample {
        pod: pod("web", "uid-1"),
        counts: PerfCounts {
            task_clock_seconds: Some(1.25),
            ..PerfCounts::default()
        },
        ipc: None,
        cache_mpki: None,
        scaling_factor: Some(1.0),
    }];
    let om = render(
        &snapshot(Some(PerfEventSet::Software), tasks_again),
        Format::OpenMetrics,
    );
    assert!(
        om.contains("# UNIT kube_prober_task_perf_task_clock_seconds seconds"),
        "{om}"
    );

    // Neither set: only the state.
    let body = render(&snapshot(None, vec![]), Format::Text);
    assert!(body.contains("kube_prober_task_perf_event_set{node=\"n1\",set=\"none\"} 1"));
    assert!(body.contains(
        "kube_prober_task_perf_open_failures_total{node=\"n1\",reason=\"unsupported\"} 1"
    ));

    // Without --task-perf-events: no perf family at all.
    let body = render(&Snapshot::empty(SystemTime::now()), Format::Text);
    assert!(!body.contains("kube_prober_task_perf_"));
}
