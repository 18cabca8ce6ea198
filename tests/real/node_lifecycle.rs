//! The real node-lifecycle controller (kube-controller-manager) on the real control plane
//! (tests/support/control_plane.rs): when the kubelets (kwok here) go silent, it turns every
//! node's Ready condition Unknown after the grace period, and kube-prober reports exactly that;
//! when they are back, Ready again. Its own control plane: stopping kwok stops every node.

use support::control_plane;
use support::deploy;

use std::time::Instant;

use control_plane::{ControlPlane, Options};
use deploy::sum as counter;
use support::{Prober, wait_body};

const NODES: usize = 3;

fn admin(cp: &ControlPlane) -> String {
    cp.admin_kubeconfig.to_string_lossy().into_owned()
}

fn start_with(kubeconfig: &str) -> Prober {
    Prober::start_with_env(
        &["--role", "cluster", "--tick-interval", "1s"],
        &[("KUBECONFIG", kubeconfig)],
    )
}

/// kwok, the kubelet of every node here, stops: no node status and no node Lease is renewed,
/// and after the grace period (50 s) the real node-lifecycle controller sets every node's Ready
/// condition to Unknown; kube-prober reports exactly that. kwok back: Ready again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelets_silent_nodes_turn_unknown_through_the_node_lifecycle_controller() {
    let cp = ControlPlane::start(Options {
        nodes: NODES,
        pods_per_node: 1,
        metrics_server: false,
        ..Options::default()
    });
    let p = start_with(&admin(&cp));
    support::wait_ready(&p).await;
    let nodes: Vec<String> = (0..NODES).map(control_plane::node_name).collect();
    let all_ready = |status: &'static str| {
        let nodes = nodes.clone();
        move |b: &str| {
            nodes.iter().all(|n| {
                counter(
                    b,
                    "kube_prober_node_condition",
                    &[("node", n), ("condition", "Ready"), ("status", status)],
                ) == 1.0
            })
        }
    };
    wait_body(&p, "/metrics", 30, "every node Ready", all_ready("True")).await;
    cp.kill("kwok");
    let killed = Instant::now();
    // The grace period (50 s) from the last heartbeat, plus the controller's 5 s monitor period.
    wait_body(
        &p,
        "/metrics",
        120,
        "every node Ready=Unknown",
        all_ready("Unknown"),
    )
    .await;
    eprintln!(
        "node-lifecycle: every node Unknown {:?} after kwok stopped",
        killed.elapsed()
    );
    let api_view = cp.get_json(&["nodes"]);
    for n in control_plane::items(&api_view) {
        let name = n["metadata"]["name"].as_str().unwrap_or_default();
        if nodes.iter().any(|x| x == name) {
            assert_eq!(
                control_plane::condition(&n, "Ready"),
                Some("Unknown"),
                "{name} in the API"
            );
        }
    }
    cp.restart("kwok");
    wait_body(
        &p,
        "/metrics",
        120,
        "every node Ready again",
        all_ready("True"),
    )
    .await;
    assert_eq!(p.terminate(), 0);
}
