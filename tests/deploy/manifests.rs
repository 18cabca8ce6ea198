//! The Kubernetes manifests (manifests/): every overlay renders with kubectl's kustomize,
//! validates strictly against the Kubernetes OpenAPI schemas (PyPI kubernetes-validate) and, for
//! the Prometheus Operator objects, against their CRD schemas (npm
//! @kubernetes-models/prometheus-operator); every container is hardened; and the binary, started
//! with each workload's args and env as the kubelet would pass them, runs without a
//! configuration error and turns ready.

use support::apiserver;
use support::deploy;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

use deploy::{Downward, kind, name, namespace};
use serde_json::Value;

fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
}

fn is_prometheus_operator(o: &Value) -> bool {
    o["apiVersion"]
        .as_str()
        .is_some_and(|a| a.starts_with("monitoring.coreos.com/"))
}

#[test]
fn every_overlay_renders_and_validates_strictly() {
    let validate = on_path("kubernetes-validate").expect(
        "kubernetes-validate not found on PATH: run `bash .ci/test`, which installs it from PyPI",
    );
    let dir = tempfile::tempdir().unwrap();
    let mut crd_objects = Vec::new();
    for overlay in deploy::overlays() {
        let objs = deploy::render(&overlay);
        assert!(!objs.is_empty(), "{overlay}: renders nothing");
        let (crds, core): (Vec<Value>, Vec<Value>) =
            objs.into_iter().partition(is_prometheus_operator);
        crd_objects.extend(crds);
        validate_strictly(&validate, dir.path(), &overlay, &core);
    }
    // The Prometheus Operator objects against their CRD schemas.
    assert!(
        crd_objects.iter().any(|o| kind(o) == "PrometheusRule")
            && crd_objects.iter().any(|o| kind(o) == "ServiceMonitor")
            && crd_objects.iter().any(|o| kind(o) == "PodMonitor"),
        "an overlay carries the ServiceMonitor, PodMonitor and PrometheusRule"
    );
    let modules = npm_models();
    let mut node = Command::new("node");
    node.arg(deploy::repo().join("tests/deploy_validate_crds.mjs"))
        .arg(&modules);
    let objects = serde_json::to_string(&crd_objects).unwrap();
    let out = support::owned::output(node, Some(objects.as_bytes()))
        .expect("node (npm's runtime) is needed to validate the Prometheus Operator objects");
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "CRD validation failed:\n{report}");
    assert_eq!(report.matches("ok ").count(), crd_objects.len(), "{report}");
}

/// `kubernetes-validate --strict` on `objs` (written under `dir` as `NAME.yaml`): every object
/// passes against a known schema, none skipped, no warning.
fn validate_strictly(validate: &Path, dir: &Path, name: &str, objs: &[Value]) {
    let file = dir.join(format!("{name}.yaml"));
    let text: String = objs
        .iter()
        .map(|o| format!("---\n{}", serde_yaml_ng::to_string(o).unwrap()))
        .collect();
    std::fs::write(&file, text).unwrap();
    let out = Command::new(validate)
        .arg("--strict")
        .arg(&file)
        .output()
        .expect("running kubernetes-validate");
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "{name}: kubernetes-validate failed:\n{report}"
    );
    let passed = report.matches(" passed for resource ").count();
    assert_eq!(
        passed,
        objs.len(),
        "{name}: every object must pass against a known schema (none skipped):\n{report}"
    );
    assert!(
        !report.contains("WARN") && !report.contains("ERROR"),
        "{name}: {report}"
    );
}

/// The opt-in components no overlay includes (`kubelet-pods`, `node-perf`) render on top of the
/// `cluster-node` overlay, validate strictly, and make the change they document on the node
/// DaemonSet.
#[test]
fn opt_in_components_render_on_the_node_overlay_and_validate_strictly() {
    let validate = on_path("kubernetes-validate").expect(
        "kubernetes-validate not found on PATH: run `bash .ci/test`, which installs it from PyPI",
    );
    let repo = deploy::repo();
    let used: String = deploy::overlays()
        .iter()
        .map(|o| {
            std::fs::read_to_string(
                repo.join("manifests/overlays")
                    .join(o)
                    .join("kustomization.yaml"),
            )
            .unwrap()
        })
        .collect();
    let mut opt_in: Vec<String> = std::fs::read_dir(repo.join("manifests/components"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|c| !used.contains(&format!("components/{c}")))
        .collect();
    opt_in.sort();
    assert_eq!(
        opt_in,
        ["kubelet-pods", "node-perf"],
        "components in no overlay"
    );
    let expected_arg = |c: &str| match c {
        "kubelet-pods" => "--kubelet-url=https://$(NODE_IP):10250",
        _ => "--task-perf-events=auto",
    };
    let dir = tempfile::tempdir().unwrap();
    for c in &opt_in {
        // kustomize takes bases and components only by relative path; a kustomization in a
        // temp dir that climbs to `/` and down to the repository keeps the repository untouched.
        let k = dir.path().join(c);
        std::fs::create_dir(&k).unwrap();
        let up = "../".repeat(k.components().count() - 1);
        let rel = |p: PathBuf| format!("{up}{}", p.strip_prefix("/").unwrap().display());
        std::fs::write(
            k.join("kustomization.yaml"),
            format!(
                "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - {}\ncomponents:\n  - {}\n",
                rel(repo.join("manifests/overlays/cluster-node")),
                rel(repo.join("manifests/components").join(c))
            ),
        )
        .unwrap();
        let out = Command::new(deploy::kubectl())
            .arg("kustomize")
            .arg(&k)
            .output()
            .expect("running kubectl kustomize");
        assert!(
            out.status.success(),
            "{c}: kubectl kustomize: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let objs = deploy::yaml_docs(&String::from_utf8(out.stdout).unwrap());
        let (_, core): (Vec<Value>, Vec<Value>) =
            objs.into_iter().partition(is_prometheus_operator);
        let ds = core
            .iter()
            .find(|o| kind(o) == "DaemonSet")
            .unwrap_or_else(|| panic!("{c}: no node DaemonSet"));
        let args = &ds["spec"]["template"]["spec"]["containers"][0]["args"];
        assert!(
            args.as_array()
                .is_some_and(|a| a.iter().any(|v| v == expected_arg(c))),
            "{c}: the node container gets {}: {args}",
            expected_arg(c)
        );
        validate_strictly(&validate, dir.path(), c, &core);
    }
}

/// The validating models of npm's `@kubernetes-models/prometheus-operator`, installed once into
/// this build's test scratch directory (target/tmp; `bash .ci/test` installs them first).
fn npm_models() -> PathBuf {
    let prefix = Path::new(env!("CARGO_TARGET_TMPDIR")).join("deploy-npm");
    let modules = prefix.join("node_modules");
    if !modules
        .join("@kubernetes-models/prometheus-operator/package.json")
        .is_file()
    {
        std::fs::create_dir_all(&prefix).unwrap();
        let st = Command::new("npm")
            .args(["install", "--silent", "--no-audit", "--no-fund", "--prefix"])
            .arg(&prefix)
            .arg("@kubernetes-models/prometheus-operator@6")
            .status()
            .expect("npm is needed to install @kubernetes-models/prometheus-operator");
        assert!(
            st.success(),
            "npm install @kubernetes-models/prometheus-operator failed"
        );
    }
    modules
}

/// `--shutdown-timeout` of a container's args (the binary's default when absent).
fn shutdown_timeout(args: &[String]) -> Duration {
    args.iter()
        .find_map(|a| a.strip_prefix("--shutdown-timeout="))
        .map(|v| humantime::parse_duration(v).expect("a valid duration"))
        .unwrap_or(Duration::from_secs(10))
}

#[test]
fn every_workload_is_hardened_probed_and_sized() {
    let downward = Downward {
        pod_name: "p".into(),
        pod_namespace: "kube-system".into(),
        node_name: "n".into(),
        host_ip: "10.0.0.1".into(),
    };
    let mut seen = 0;
    for overlay in deploy::overlays() {
        let objs = deploy::render(&overlay);
        for w in deploy::workloads(&objs) {
            let at = format!("{overlay}: {} {}", kind(w), name(w));
            let pod = &w["spec"]["template"]["spec"];
            assert_eq!(pod["securityContext"]["runAsNonRoot"], true, "{at}");
            assert!(
                pod["securityContext"]["runAsUser"].as_u64().unwrap_or(0) > 0,
                "{at}: numeric non-root uid"
            );
            assert_eq!(
                pod["securityContext"]["seccompProfile"]["type"], "RuntimeDefault",
                "{at}"
            );
            let containers = pod["containers"].as_array().unwrap();
            assert_eq!(containers.len(), 1, "{at}");
            assert!(pod["initContainers"].is_null(), "{at}");
            let c = &containers[0];
            let sc = &c["securityContext"];
            assert_eq!(sc["runAsNonRoot"], true, "{at}");
            assert_eq!(sc["readOnlyRootFilesystem"], true, "{at}");
            assert_eq!(sc["allowPrivilegeEscalation"], false, "{at}");
            assert_eq!(
                sc["capabilities"]["drop"],
                serde_json::json!(["ALL"]),
                "{at}"
            );
            assert!(sc["capabilities"]["add"].is_null(), "{at}");
            assert!(
                sc["privileged"].is_null() || sc["privileged"] == false,
                "{at}"
            );
            assert_eq!(sc["seccompProfile"]["type"], "RuntimeDefault", "{at}");
            assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz", "{at}");
            assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz", "{at}");
            for probe in ["livenessProbe", "readinessProbe"] {
                assert_eq!(
                    c[probe]["httpGet"]["port"], "http",
                    "{at}: {probe} on the named port"
                );
            }
            for r in ["requests", "limits"] {
                for res in ["cpu", "memory"] {
                    assert!(
                        c["resources"][r][res].is_string(),
                        "{at}: resources.{r}.{res}"
                    );
                }
            }
            let (args, env) = deploy::container_command(w, &downward);
            let grace = pod["terminationGracePeriodSeconds"]
                .as_u64()
                .expect("terminationGracePeriodSeconds");
            assert!(
                Duration::from_secs(grace) > shutdown_timeout(&args),
                "{at}: terminationGracePeriodSeconds {grace} must exceed --shutdown-timeout"
            );
            // The named port is the one --listen binds.
            let listen = args
                .iter()
                .find_map(|a| a.strip_prefix("--listen="))
                .expect("--listen");
            let port = c["ports"][0]["containerPort"].as_u64().unwrap();
            assert_eq!(c["ports"][0]["name"], "http", "{at}");
            assert!(
                listen.ends_with(&format!(":{port}")),
                "{at}: --listen {listen} vs containerPort {port}"
            );
            assert!(args.contains(&"--log-format=json".to_string()), "{at}");
            assert!(!c["image"].as_str().unwrap().is_empty(), "{at}");
            match kind(w) {
                "Deployment" => {
                    assert_eq!(w["spec"]["replicas"], 2, "{at}");
                    assert!(args.contains(&"--role=cluster".into()), "{at}");
                    assert!(
                        pod["topologySpreadConstraints"]
                            .as_array()
                            .is_some_and(|t| !t.is_empty()),
                        "{at}"
                    );
                    let pdb = objs
                        .iter()
                        .find(|o| kind(o) == "PodDisruptionBudget")
                        .expect("a PDB");
                    assert_eq!(
                        pdb["spec"]["selector"]["matchLabels"],
                        w["spec"]["selector"]["matchLabels"],
                        "{at}"
                    );
                    let svc = objs
                        .iter()
                        .find(|o| kind(o) == "Service" && name(o) == "kube-prober")
                        .expect("Service kube-prober");
                    assert_eq!(svc["spec"]["ports"][0]["port"], 2020, "{at}");
                    assert_eq!(svc["spec"]["ports"][0]["targetPort"], "http", "{at}");
                    assert_eq!(
                        svc["spec"]["selector"], w["spec"]["selector"]["matchLabels"],
                        "{at}"
                    );
                    let has_node = objs.iter().any(|o| kind(o) == "DaemonSet");
                    assert_eq!(
                        args.contains(&"--gcm-node-series=false".into()),
                        has_node,
                        "{at}: --gcm-node-series=false exactly when the node DaemonSet is deployed"
                    );
                    assert_eq!(
                        args.contains(&"--pod-scope=workloads".into()),
                        has_node,
                        "{at}: --pod-scope=workloads exactly when the node DaemonSet serves the per-node pod series"
                    );
                    let has_sink = args.iter().any(|a| a.starts_with("--sink="));
                    assert_eq!(
                        args.contains(&"--leader-elect=true".into()),
                        has_sink,
                        "{at}: leader election with a sink"
                    );
                    let lease_role = objs
                        .iter()
                        .any(|o| kind(o) == "Role" && name(o) == "kube-prober-leader-election");
                    assert_eq!(
                        lease_role, has_sink,
                        "{at}: the Lease Role exactly when leader election runs"
                    );
                    for var in ["POD_NAME", "POD_NAMESPACE"] {
                        assert!(env.iter().any(|(k, _)| k == var), "{at}: {var}");
                    }
                }
                "StatefulSet" => {
                    // The sharded cluster role: shard and total from the StatefulSet itself.
                    assert!(args.contains(&"--role=cluster".into()), "{at}");
                    assert!(args.contains(&"--shard-from-statefulset".into()), "{at}");
                    assert!(w["spec"]["replicas"].as_u64().unwrap_or(0) >= 2, "{at}");
                    assert_eq!(
                        env.iter()
                            .find(|(k, _)| k == "POD_NAME")
                            .map(|(_, v)| v.as_str()),
                        Some("p"),
                        "{at}: POD_NAME from the downward API (the ordinal)"
                    );
                    let svc_name = w["spec"]["serviceName"].as_str().unwrap_or_default();
                    let headless = objs
                        .iter()
                        .find(|o| kind(o) == "Service" && name(o) == svc_name)
                        .unwrap_or_else(|| panic!("{at}: governing Service {svc_name}"));
                    assert_eq!(headless["spec"]["clusterIP"], "None", "{at}");
                    assert_eq!(
                        headless["spec"]["selector"], w["spec"]["selector"]["matchLabels"],
                        "{at}"
                    );
                    // Every replica is scraped, and /watcher is served by any of them.
                    assert_eq!(
                        w["spec"]["template"]["metadata"]["annotations"]["prometheus.io/scrape"],
                        "true",
                        "{at}"
                    );
                    let svc = objs
                        .iter()
                        .find(|o| kind(o) == "Service" && name(o) == "kube-prober")
                        .expect("Service kube-prober");
                    assert_eq!(
                        svc["spec"]["selector"], w["spec"]["selector"]["matchLabels"],
                        "{at}"
                    );
                    let pdb = objs
                        .iter()
                        .find(|o| kind(o) == "PodDisruptionBudget")
                        .expect("a PDB");
                    assert_eq!(
                        pdb["spec"]["maxUnavailable"], 1,
                        "{at}: one shard at a time"
                    );
                    assert_eq!(
                        pdb["spec"]["selector"]["matchLabels"],
                        w["spec"]["selector"]["matchLabels"],
                        "{at}"
                    );
                    let reads_statefulsets = deploy::grants(&objs, namespace(w), "kube-prober")
                        .iter()
                        .any(|g| g.resources.iter().any(|r| r == "statefulsets"));
                    assert!(reads_statefulsets, "{at}: may watch its StatefulSet");
                    assert!(
                        !objs.iter().any(|o| kind(o) == "Deployment"),
                        "{at}: the StatefulSet replaces the Deployment"
                    );
                }
                "DaemonSet" => {
                    assert!(args.contains(&"--role=node".into()), "{at}");
                    assert!(args.contains(&"--procfs=/host/proc".into()), "{at}");
                    assert_eq!(
                        listen, "10.0.0.1:2021",
                        "{at}: the node's IP, port 2021 (2020 is fluentbit's hostPort)"
                    );
                    assert_eq!(pod["hostNetwork"], true, "{at}");
                    assert_eq!(pod["dnsPolicy"], "ClusterFirstWithHostNet", "{at}");
                    assert_eq!(
                        pod["tolerations"],
                        serde_json::json!([{"operator": "Exists"}]),
                        "{at}"
                    );
                    for (var, want) in [("NODE_NAME", "n"), ("NODE_IP", "10.0.0.1")] {
                        assert!(
                            env.contains(&(var.to_string(), want.to_string())),
                            "{at}: {var} from the downward API"
                        );
                    }
                    let mounts = c["volumeMounts"].as_array().unwrap();
                    for (path, host) in [("/host/proc", "/proc"), ("/host/sys", "/sys")] {
                        let m = mounts
                            .iter()
                            .find(|m| m["mountPath"] == path)
                            .unwrap_or_else(|| panic!("{at}: {path}"));
                        assert_eq!(m["readOnly"], true, "{at}: {path} read-only");
                        let vol = pod["volumes"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .find(|v| v["name"] == m["name"])
                            .unwrap();
                        assert_eq!(vol["hostPath"]["path"], host, "{at}");
                    }
                }
                other => panic!("{other}"),
            }
            seen += 1;
        }
    }
    assert!(seen >= 10, "workloads checked: {seen}");
}

/// Where the test mounts the stand-in's kubeconfig (the pods use the in-cluster service
/// account instead; the stand-in speaks plain HTTP, which in-cluster config never does).
const KUBECONFIG_DIR: &str = "/var/run/secrets/kube-prober-test";

/// A GCE metadata server stand-in for the gke overlay (the pods get the real one).
async fn metadata_server() -> String {
    use axum::extract::Path as AxPath;
    use axum::http::HeaderMap;
    use axum::routing::get;
    async fn md(
        AxPath(path): AxPath<String>,
        h: HeaderMap,
    ) -> (
        axum::http::StatusCode,
        [(&'static str, &'static str); 1],
        &'static str,
    ) {
        let ok = h.get("metadata-flavor").is_some_and(|v| v == "Google");
        let body = match path.as_str() {
            _ if !ok => "",
            "project/project-id" => "my-project",
            "instance/attributes/cluster-location" => "us-central1",
            "instance/attributes/cluster-name" => "prod-1",
            "instance/hostname" => "node-a.c.my-project.internal",
            "instance/zone" => "projects/1/zones/us-central1-b",
            "instance/service-accounts/default/email" => {
                "kube-prober@my-project.iam.gserviceaccount.com"
            }
            _ => {
                return (
                    axum::http::StatusCode::NOT_FOUND,
                    [("Metadata-Flavor", "Google")],
                    "",
                );
            }
        };
        (
            axum::http::StatusCode::OK,
            [("Metadata-Flavor", "Google")],
            body,
        )
    }
    let app = axum::Router::new().route("/computeMetadata/v1/{*path}", get(md));
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        let _ = axum::serve(l, app).await;
    });
    addr
}

/// Every workload of every overlay, started as its container would be (the image's runtime
/// contract, proven with bubblewrap: uid 65532, no capabilities, read-only root with only the
/// binary and its C runtime, only the manifest's hostPath mounts, read-only, only the manifest's
/// env) with its own args and env (downward API values, `$(VAR)` expansion): no configuration
/// error, ready. What a pod gets from its surroundings is
/// given as the environment would: the in-cluster API server (here a kubeconfig to the
/// stand-in), the GKE metadata server (a stand-in named by GCE_METADATA_HOST) and Cloud
/// Monitoring credentials (anonymous, to a closed port).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manifest_args_and_env_start_the_binary_without_configuration_error() {
    let api = apiserver::start().await;
    let now = SystemTime::now();
    api.set_nodes(vec![apiserver::node("node-a", ("4", "8Gi"), ("4", "8Gi"))]);
    api.set_node_metrics(vec![apiserver::node_metrics("node-a", "1", "2Gi", now)]);
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    api.write_kubeconfig(&kc).unwrap();
    let metadata = metadata_server().await;
    let mut started = 0;
    for overlay in deploy::overlays() {
        let objs = deploy::render(&overlay);
        for w in deploy::workloads(&objs) {
            let at = format!("{overlay}: {} {}", kind(w), name(w));
            let downward = Downward {
                pod_name: format!("{}-0", name(w)),
                pod_namespace: namespace(w).to_string(),
                node_name: "node-a".into(),
                host_ip: "127.0.0.1".into(),
            };
            let (mut args, mut env) = deploy::container_command(w, &downward);
            deploy::local_listen(&mut args);
            let mut mounts = deploy::host_mounts(w);
            mounts.push(deploy::Mount {
                source: dir.path().to_path_buf(),
                dest: KUBECONFIG_DIR.into(),
            });
            env.push(("KUBECONFIG".into(), format!("{KUBECONFIG_DIR}/kubeconfig")));
            if args.iter().any(|a| a == "--sink=gcm") {
                env.push(("GCE_METADATA_HOST".into(), metadata.clone()));
                env.push((
                    "KUBE_PROBER_GCM_ENDPOINT".into(),
                    "http://127.0.0.1:9".into(),
                ));
                env.push(("KUBE_PROBER_GCM_ANONYMOUS".into(), "true".into()));
            }
            let p = deploy::spawn_contained(&args, &env, &mounts);
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            loop {
                let (status, body) = support::get(&p.url("/readyz")).await;
                if status == 200 {
                    break;
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "{at}: not ready: {body}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            // The runtime contract, as the kernel sees the process.
            let pid = deploy::contained_pid(p.child.id());
            let (uid, caps, writable, names) = deploy::contained_facts(pid);
            assert_eq!(uid, deploy::IMAGE_UID, "{at}: runs as the image's user");
            assert_eq!(caps, 0, "{at}: no capabilities");
            assert!(writable.is_empty(), "{at}: writable mounts {writable:?}");
            let mut want: Vec<String> = env.iter().map(|(k, _)| k.clone()).collect();
            // bwrap sets PWD as a runtime sets PATH and HOSTNAME; nothing else comes in.
            let mut names: Vec<String> = names.into_iter().filter(|n| n != "PWD").collect();
            want.sort();
            names.sort();
            assert_eq!(names, want, "{at}: only the manifest's environment");
            // No error was logged about the configuration on the way.
            let log: Vec<String> = p.log.try_iter().collect();
            for line in &log {
                let v: Value = serde_json::from_str(line).unwrap_or_default();
                assert!(
                    !(v["level"] == "ERROR" && line.contains("config")),
                    "{at}: {line}"
                );
            }
            drop(p);
            started += 1;
        }
    }
    assert!(started >= 10, "{started}");
}

/// The plain-Prometheus scrape job is a valid Prometheus configuration.
#[test]
fn scrape_config_snippet_passes_promtool() {
    // Debian's Prometheus is built without Kubernetes service discovery, so promtool checks the
    // job with its kubernetes_sd_configs swapped for a static target; the relabelling (regexes,
    // actions, labels) is checked as written.
    let file =
        deploy::repo().join("manifests/components/prometheus-annotations/scrape-config.yaml");
    let mut cfg = deploy::yaml_docs(&std::fs::read_to_string(&file).unwrap()).remove(0);
    let jobs = cfg["scrape_configs"].as_array_mut().unwrap();
    assert_eq!(jobs.len(), 1);
    let job = jobs[0].as_object_mut().unwrap();
    let sd = job
        .remove("kubernetes_sd_configs")
        .expect("kubernetes_sd_configs");
    assert_eq!(sd[0]["role"], "pod");
    job.insert(
        "static_configs".into(),
        serde_json::json!([{"targets": ["127.0.0.1:2020"]}]),
    );
    let dir = tempfile::tempdir().unwrap();
    let checked = dir.path().join("prometheus.yml");
    std::fs::write(&checked, serde_yaml_ng::to_string(&cfg).unwrap()).unwrap();
    let out = Command::new(support::promtool())
        .args(["check", "config", "--syntax-only"])
        .arg(&checked)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // The ports it reads from the annotations are the ones the workloads listen on.
    let objs = deploy::render("cluster-node");
    for w in deploy::workloads(&objs) {
        let ann = &w["spec"]["template"]["metadata"]["annotations"];
        let port = &w["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"];
        assert_eq!(ann["prometheus.io/port"], port.to_string(), "{}", name(w));
        assert_eq!(ann["prometheus.io/scrape"], "true");
    }
}

/// The load-watcher drop-in: the example scheduler configuration names the Service the overlay
/// creates, which aliases kube-prober's Service on load-watcher's port.
#[test]
fn load_watcher_drop_in_matches_the_scheduler_config() {
    let objs = deploy::render("load-watcher");
    let alias = objs
        .iter()
        .find(|o| kind(o) == "Service" && name(o) == "load-watcher")
        .expect("Service load-watcher");
    let target = objs
        .iter()
        .find(|o| kind(o) == "Service" && name(o) == "kube-prober")
        .expect("Service kube-prober");
    assert_eq!(
        alias["spec"]["externalName"],
        format!("{}.{}.svc.cluster.local", name(target), namespace(target))
    );
    assert_eq!(alias["spec"]["ports"][0]["port"], 2020);
    assert_eq!(target["spec"]["ports"][0]["port"], 2020);
    let want = format!(
        "http://{}.{}.svc.cluster.local:2020",
        name(alias),
        namespace(alias)
    );
    let cfg_text = std::fs::read_to_string(
        deploy::repo().join("manifests/components/load-watcher/scheduler-config.yaml"),
    )
    .unwrap();
    let cfg = &deploy::yaml_docs(&cfg_text)[0];
    assert_eq!(cfg["kind"], "KubeSchedulerConfiguration");
    let mut addresses = 0;
    for profile in cfg["profiles"].as_array().unwrap() {
        for pc in profile["pluginConfig"].as_array().unwrap() {
            assert_eq!(pc["args"]["watcherAddress"], want, "{}", pc["name"]);
            addresses += 1;
        }
    }
    assert!(addresses >= 2);
    let d = deploy::workloads(&objs)[0];
    let env = &d["spec"]["template"]["spec"]["containers"][0]["env"];
    assert!(
        env.as_array().unwrap().iter().any(
            |e| e["name"] == "METRICS_PROVIDER_NAME" && e["value"] == "KubernetesMetricsServer"
        ),
        "load-watcher's environment"
    );
    // Lean: the cluster role with the lean component's arguments, and RBAC on Nodes and
    // NodeMetrics only (tests/deploy/rbac.rs proves it is all the drop-in uses).
    let args: Vec<&str> = d["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let lean = deploy::component_args("load-watcher-lean");
    assert!(!lean.is_empty());
    assert_eq!(args[args.len() - lean.len()..], lean, "{args:?}");
    let grants = deploy::grants(&objs, namespace(d), "kube-prober");
    let mut granted: Vec<String> = grants
        .iter()
        .flat_map(|g| {
            let group = g.groups.join(",");
            g.resources.iter().flat_map(move |r| {
                let group = group.clone();
                g.verbs.iter().map(move |v| format!("{group}/{r}:{v}"))
            })
        })
        .collect();
    granted.sort();
    assert_eq!(
        granted,
        ["/nodes:list", "/nodes:watch", "metrics.k8s.io/nodes:list"],
        "the lean drop-in's RBAC"
    );
}

/// Every object of every overlay carries `app.kubernetes.io/part-of`, and every workload runs
/// the one tagged image that components/release sets: the node DaemonSet and the sharded
/// StatefulSet too (a base's own `images:` did not reach them, so they ran `:latest`).
#[test]
fn every_object_is_labelled_and_every_workload_runs_the_release_image() {
    let release = std::fs::read_to_string(
        deploy::repo().join("manifests/components/release/kustomization.yaml"),
    )
    .expect("manifests/components/release");
    let tag = release
        .lines()
        .find_map(|l| l.trim().strip_prefix("newTag: "))
        .expect("components/release sets newTag");
    for overlay in deploy::overlays() {
        let objs = deploy::render(&overlay);
        for o in &objs {
            assert_eq!(
                o["metadata"]["labels"]["app.kubernetes.io/part-of"],
                "kube-prober",
                "{overlay}: {} {} lacks the part-of label",
                kind(o),
                name(o)
            );
        }
        for w in deploy::workloads(&objs) {
            let image = &w["spec"]["template"]["spec"]["containers"][0]["image"];
            assert_eq!(
                image.as_str(),
                Some(format!("kube-prober:{tag}").as_str()),
                "{overlay}: {} {}",
                kind(w),
                name(w)
            );
        }
    }
}
