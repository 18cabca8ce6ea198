//! Test helpers of the cgroup tests: task pods and fixture trees of them.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::model::{TaskContainer, TaskPod};
use support::task_fixture::{self as fixture, Driver, Layout, Runtime, Values};

/// A fixture tree of `pods` pods with two containers each; returns the pods and the
/// relative directories of every cgroup (pod first, then its containers).
pub(super) fn staggered_tree(
    root: &Path,
    layout: Layout,
    pods: usize,
    first: usize,
) -> (Vec<Arc<TaskPod>>, Vec<PathBuf>) {
    let mut out = Vec::new();
    let mut rels = Vec::new();
    for i in first..first + pods {
        let uid = format!("{i:08x}-1234-1234-1234-123456789abc");
        let rel = fixture::pod_dir(Driver::Systemd, "burstable", &uid);
        fixture::write_cgroup(root, layout, &rel, &Values::seeded(i as u64)).unwrap();
        rels.push(rel.clone());
        let ids = [format!("a{i:04x}0"), format!("a{i:04x}1")];
        for (j, id) in ids.iter().enumerate() {
            let c = rel.join(fixture::container_dir(
                Driver::Systemd,
                Runtime::Containerd,
                id,
            ));
            fixture::write_cgroup(root, layout, &c, &Values::seeded(100 + j as u64)).unwrap();
            rels.push(c);
        }
        out.push(pod(&uid, "burstable", &[&ids[0], &ids[1]]));
    }
    (out, rels)
}

pub(super) fn pod(uid: &str, qos: &str, ids: &[&str]) -> Arc<TaskPod> {
    Arc::new(TaskPod {
        uid: uid.to_string(),
        namespace: "ns".into(),
        name: format!("p-{}", &uid[..4]),
        qos: qos.into(),
        cgroup_ids: vec![uid.to_string()],
        labels: vec![],
        containers: ids
            .iter()
            .enumerate()
            .map(|(i, id)| TaskContainer {
                name: format!("c{i}"),
                id: Some(id.to_string()),
                ready: true,
            })
            .collect(),
        requests: Default::default(),
        limits: Default::default(),
    })
}
