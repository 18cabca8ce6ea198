//! RBAC proven least-privilege: each role runs end to end with its manifest's args and env
//! against the stand-in API server (the cluster role as two replicas electing a leader, every
//! probe running, the leader releasing the Lease at shutdown; the node role), the stand-in
//! records every request, and each request's attributes (verb, group, resource, subresource,
//! namespace, name) are checked against the rules the rendered overlay grants that role's
//! ServiceAccount: every request is allowed, and every verb on every resource of every rule is
//! used by some request.

use support::apiserver;
use support::deploy;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use apiserver::RequestAttributes;
use deploy::{Downward, Grant, kind, name, namespace};
use k8s_openapi::api::coordination::v1::Lease;
use serde_json::Value;
use support::get;

/// Non-resource paths every authenticated client may GET through the default ClusterRoles
/// `system:public-info-viewer` (/healthz, /livez, /readyz, /version) and `system:discovery`
/// (/api, /apis and their versions): kube-prober's ClusterRole grants no nonResourceURLs.
fn allowed_by_default_roles(a: &RequestAttributes) -> bool {
    a.verb == "get"
        && (matches!(
            a.path.as_str(),
            "/healthz" | "/livez" | "/readyz" | "/version" | "/api" | "/apis"
        ) || a.path.starts_with("/api/")
            || a.path.starts_with("/apis/"))
}

fn allows(g: &Grant, a: &RequestAttributes) -> bool {
    let any = |list: &[String], v: &str| list.iter().any(|x| x == "*" || x == v);
    let resource = if a.subresource.is_empty() {
        a.resource.clone()
    } else {
        format!("{}/{}", a.resource, a.subresource)
    };
    a.is_resource()
        && any(&g.groups, &a.group)
        && any(&g.resources, &resource)
        && any(&g.verbs, &a.verb)
        && (g.resource_names.is_empty() || g.resource_names.contains(&a.name))
        && g.namespace.as_ref().is_none_or(|ns| *ns == a.namespace)
}

/// Checks `requests` against `grants`: every request allowed; every (group, resource, verb) of
/// every rule used by a request that rule allows.
fn check(role: &str, grants: &[Grant], requests: &[RequestAttributes]) {
    assert!(!grants.is_empty(), "{role}: no rules bound");
    let mut denied = BTreeSet::new();
    for a in requests {
        if a.is_resource() {
            if !grants.iter().any(|g| allows(g, a)) {
                denied.insert(format!("{a:?}"));
            }
        } else if !allowed_by_default_roles(a) {
            denied.insert(format!("non-resource {} {}", a.verb, a.path));
        }
    }
    assert!(
        denied.is_empty(),
        "{role}: requests the manifests' RBAC would deny:\n{}",
        denied.into_iter().collect::<Vec<_>>().join("\n")
    );
    let mut unused = Vec::new();
    for g in grants {
        for group in &g.groups {
            for resource in &g.resources {
                for verb in &g.verbs {
                    let narrowed = Grant {
                        groups: vec![group.clone()],
                        resources: vec![resource.clone()],
                        verbs: vec![verb.clone()],
                        ..g.clone()
                    };
                    if !requests.iter().any(|a| allows(&narrowed, a)) {
                        unused.push(format!(
                            "{} ns={:?}: {verb} {group}/{resource} {:?}",
                            g.source, g.namespace, g.resource_names
                        ));
                    }
                }
            }
        }
    }
    assert!(
        unused.is_empty(),
        "{role}: rules no request needs (least privilege):\n{}",
        unused.join("\n")
    );
}

/// The stand-in's requests as RBAC attributes, deduplicated.
fn attributes(api: &apiserver::ApiServer) -> Vec<RequestAttributes> {
    let set: BTreeSet<RequestAttributes> = api.requests().iter().map(|r| r.attributes()).collect();
    set.into_iter().collect()
}

fn counter(body: &str, family: &str, label: (&str, &str)) -> f64 {
    deploy::samples(body, family)
        .into_iter()
        .filter(|(l, _)| l.get(label.0).map(String::as_str) == Some(label.1))
        .map(|(_, v)| v)
        .sum()
}

/// The role's processes, started from the workload's container as the manifest gives it.
fn start_workload(
    w: &Value,
    api: &apiserver::ApiServer,
    kubeconfig: &str,
    replicas: usize,
    node: &str,
) -> Vec<support::Prober> {
    (0..replicas)
        .map(|i| {
            let downward = Downward {
                pod_name: format!("{}-{i}", name(w)),
                pod_namespace: namespace(w).to_string(),
                node_name: node.to_string(),
                host_ip: "127.0.0.1".into(),
            };
            let (args, mut env, _) =
                deploy::local_pod_command(w, &downward, std::path::Path::new(kubeconfig));
            // Fast probes and elections so every probe and every Lease verb happen within seconds.
            env.push(("KUBE_PROBER_PROBE_INTERVAL".into(), "1s".into()));
            env.push(("KUBE_PROBER_PROBE_TIMEOUT".into(), "1s".into()));
            env.push((
                "KUBE_PROBER_LEADER_ELECT_RETRY_PERIOD".into(),
                "500ms".into(),
            ));
            let _ = api;
            deploy::spawn(&args, &env)
        })
        .collect()
}

async fn wait_ready(p: &support::Prober, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, body) = get(&p.url("/readyz")).await;
        if status == 200 {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: not ready: {body}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Runs every workload of `overlay` against its own stand-in and checks its requests.
async fn prove(overlay: &str) {
    let objs = deploy::render(overlay);
    for w in deploy::workloads(&objs) {
        let role = format!("{overlay}: {} {}", kind(w), name(w));
        let sa = w["spec"]["template"]["spec"]["serviceAccountName"]
            .as_str()
            .expect("serviceAccountName");
        let grants = deploy::grants(&objs, namespace(w), sa);
        let api = apiserver::start().await;
        let nodes = deploy::populate(&api);
        let dir = tempfile::tempdir().unwrap();
        let kc = dir.path().join("kubeconfig");
        api.write_kubeconfig(&kc).unwrap();
        let replicas = w["spec"]["replicas"].as_u64().unwrap_or(1) as usize;
        if kind(w) == "StatefulSet" {
            // The overlay's own StatefulSet, as `kubectl apply` would create it: each replica
            // reads its shard count from it (--shard-from-statefulset).
            api.upsert_json(apiserver::Kind::StatefulSets, w.clone());
        }
        let procs = start_workload(w, &api, &kc.to_string_lossy(), replicas, &nodes[0]);
        for p in &procs {
            wait_ready(p, &role).await;
        }
        let (args, _) = deploy::container_command(
            w,
            &Downward {
                pod_name: String::new(),
                pod_namespace: String::new(),
                node_name: String::new(),
                host_ip: String::new(),
            },
        );
        let cluster = kind(w) != "DaemonSet";
        let elects = args.iter().any(|a| a == "--leader-elect=true");
        let sharded = args.iter().any(|a| a == "--shard-from-statefulset");
        if sharded {
            // Each replica took its shard from its ordinal and the total from the StatefulSet.
            let deadline = Instant::now() + Duration::from_secs(30);
            for (i, p) in procs.iter().enumerate() {
                let want =
                    format!("kube_prober_shard_info{{shard=\"{i}\",total=\"{replicas}\"}} 1");
                loop {
                    let (_, body) = get(&p.url("/metrics")).await;
                    let infos: Vec<&str> = body
                        .lines()
                        .filter(|l| l.starts_with("kube_prober_shard_info{"))
                        .collect();
                    if infos == [want.as_str()] {
                        break;
                    }
                    assert!(
                        Instant::now() < deadline,
                        "{role}: replica {i}: want {want}, have {infos:?}"
                    );
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
        // Every probe of the role has run (the cluster role's probes are the ones that call the
        // API server: metrics_server, apiserver_readyz), on every replica; when sharded, the
        // probe series come from shard 0 only.
        let role_probes: &[&str] = if cluster {
            &["metrics_server", "apiserver_readyz", "cluster_dns"]
        } else {
            &["kubelet_healthz", "addon_http"]
        };
        let disabled: Vec<&str> = args
            .iter()
            .filter_map(|a| a.strip_prefix("--disable-probes="))
            .flat_map(|l| l.split(','))
            .collect();
        let probes: Vec<&str> = role_probes
            .iter()
            .copied()
            .filter(|p| !disabled.contains(p))
            .collect();
        let deadline = Instant::now() + Duration::from_secs(30);
        for (i, p) in procs.iter().enumerate() {
            if sharded && i > 0 {
                continue;
            }
            loop {
                let (_, body) = get(&p.url("/metrics")).await;
                if probes.iter().all(|probe| {
                    counter(&body, "kube_prober_probe_runs_total", ("probe", probe)) >= 1.0
                }) {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "{role}: probes did not all run:\n{body}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        if sharded {
            // Shard 0 has run every probe (above) and every replica has its shard (further
            // above): the other shards emit no probe series at all.
            for (i, p) in procs.iter().enumerate().skip(1) {
                let (_, body) = get(&p.url("/metrics")).await;
                let probe_series: Vec<&str> = body
                    .lines()
                    .filter(|l| l.starts_with("kube_prober_probe_"))
                    .collect();
                assert!(
                    probe_series.is_empty(),
                    "{role}: shard {i} emits probe series:\n{}",
                    probe_series.join("\n")
                );
            }
        }
        if elects {
            // A leader holds the Lease and has renewed it at least once (get, create, update).
            let ns = namespace(w);
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let lease: Option<Lease> = api.get(ns, "kube-prober");
                let renewed = lease
                    .as_ref()
                    .and_then(|l| l.spec.as_ref())
                    .is_some_and(|s| {
                        s.holder_identity.is_some()
                            && s.renew_time.is_some()
                            && s.acquire_time != s.renew_time
                    });
                if renewed {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "{role}: no leader renewed the Lease: {lease:?}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        // SIGTERM: the leader releases the Lease (an update) and every replica exits cleanly.
        for p in procs {
            assert_eq!(p.terminate(), 0, "{role}: exit code");
        }
        if elects {
            let lease: Lease = api.get(namespace(w), "kube-prober").expect("the Lease");
            let holder = lease
                .spec
                .and_then(|s| s.holder_identity)
                .unwrap_or_default();
            assert!(
                holder.is_empty(),
                "{role}: the Lease was released at shutdown, holder {holder:?}"
            );
        }
        let requests = attributes(&api);
        if sharded {
            // The StatefulSet was listed and watched in the pods' namespace.
            for verb in ["list", "watch"] {
                assert!(
                    requests.iter().any(|a| a.verb == verb
                        && a.group == "apps"
                        && a.resource == "statefulsets"
                        && a.namespace == namespace(w)),
                    "{role}: no {verb} of the StatefulSet: {requests:#?}"
                );
            }
        }
        check(&role, &grants, &requests);
        eprintln!(
            "{role}: {} distinct requests allowed by {} rules, every rule used",
            requests.len(),
            grants.len()
        );
    }
}

/// The overlay with the most RBAC: cluster role with leader election (a sink) and the node
/// DaemonSet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_role_with_leader_election_and_node_role_use_exactly_their_rbac() {
    prove("otlp").await;
}

/// Without a sink there is no election and no Lease Role: still every rule used, nothing denied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_role_without_a_sink_uses_exactly_its_rbac() {
    prove("cluster").await;
}

/// The lean load-watcher drop-in: Nodes and NodeMetrics only. Every request it makes is allowed
/// by a ClusterRole that grants no pods, DaemonSets or Deployments (so it asks for none), and
/// every rule of it is used.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lean_load_watcher_drop_in_uses_exactly_its_rbac() {
    prove("load-watcher").await;
}

/// The cluster role as the sharded overlay's StatefulSet: every replica (`<sts>-<ordinal>`,
/// `--shard-from-statefulset`) reads its StatefulSet, takes its shard, and together they use
/// exactly the ClusterRole and the Role on statefulsets; probe series come from shard 0 only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharded_statefulset_replicas_use_exactly_their_rbac() {
    prove("sharded").await;
}

/// The checker itself: a request outside the rules is denied, and a rule nothing uses is found.
#[test]
fn the_checker_finds_denied_requests_and_unused_rules() {
    let grant = Grant {
        source: "ClusterRole/x".into(),
        namespace: None,
        groups: vec!["".into()],
        resources: vec!["pods".into()],
        verbs: vec!["list".into(), "watch".into()],
        resource_names: vec![],
        non_resource_urls: vec![],
    };
    let req = |method: &str, path: &str, query: Option<&str>| {
        apiserver::Logged {
            method: method.parse().unwrap(),
            path: path.into(),
            query: query.map(str::to_string),
        }
        .attributes()
    };
    let list = req("GET", "/api/v1/pods", None);
    let watch = req("GET", "/api/v1/pods", Some("watch=true&resourceVersion=1"));
    // A list or watch of one name by field selector carries the name, as kube-apiserver's
    // RequestInfo gives it to RBAC (`resourceNames` rules).
    let by_name = req(
        "GET",
        "/apis/apps/v1/namespaces/kube-system/statefulsets",
        Some("watch=true&fieldSelector=metadata.name%3Dkube-prober-shard"),
    );
    assert_eq!(
        (by_name.verb.as_str(), by_name.name.as_str()),
        ("watch", "kube-prober-shard")
    );
    let other_field = req(
        "GET",
        "/api/v1/pods",
        Some("fieldSelector=spec.nodeName%3Dn1"),
    );
    assert_eq!(
        (other_field.verb.as_str(), other_field.name.as_str()),
        ("list", "")
    );
    assert_eq!(
        (list.verb.as_str(), list.resource.as_str()),
        ("list", "pods")
    );
    assert_eq!(watch.verb, "watch");
    let get_one = req("GET", "/api/v1/namespaces/kube-system/pods/p1", None);
    assert_eq!(
        (
            get_one.verb.as_str(),
            get_one.namespace.as_str(),
            get_one.name.as_str()
        ),
        ("get", "kube-system", "p1")
    );
    let lease = req(
        "PUT",
        "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kube-prober",
        None,
    );
    assert_eq!(
        (
            lease.verb.as_str(),
            lease.group.as_str(),
            lease.resource.as_str()
        ),
        ("update", "coordination.k8s.io", "leases")
    );
    let status = req("PATCH", "/api/v1/nodes/n1/status", None);
    assert_eq!(
        (status.resource.as_str(), status.subresource.as_str()),
        ("nodes", "status")
    );
    assert!(req("GET", "/readyz", None).path == "/readyz");
    // Allowed and complete.
    check(
        "ok",
        std::slice::from_ref(&grant),
        &[list.clone(), watch.clone()],
    );
    // A get is denied.
    let denied = std::panic::catch_unwind(|| {
        check(
            "deny",
            std::slice::from_ref(&grant),
            &[list.clone(), watch.clone(), get_one.clone()],
        )
    });
    assert!(denied.is_err());
    // watch granted but never used.
    let unused = std::panic::catch_unwind(|| {
        check(
            "unused",
            std::slice::from_ref(&grant),
            std::slice::from_ref(&list),
        )
    });
    assert!(unused.is_err());
    // A namespaced grant does not allow a cluster-wide list.
    let ns_grant = Grant {
        namespace: Some("kube-system".into()),
        ..grant
    };
    assert!(!allows(&ns_grant, &list));
    assert!(allows(
        &ns_grant,
        &req("GET", "/api/v1/namespaces/kube-system/pods", None)
    ));
}
