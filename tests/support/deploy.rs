//! Shared by the deploy tests (tests/deploy_*.rs): rendering the kustomize overlays, reading the
//! workloads and RBAC rules out of them, and starting the binary the way a manifest starts it.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::Prober;

/// The repository root.
pub fn repo() -> PathBuf {
    crate::repo_root()
}

/// The arguments a kustomize component appends to the container's args (its JSON patches'
/// `add` operations on `.../args/-`), in order, read from the component's file without
/// kubectl: what the lean load-watcher drop-in runs with (`load-watcher-lean`), for the tests and
/// the `peers` bench that start it, so that they cannot drift from the manifests.
pub fn component_args(component: &str) -> Vec<String> {
    let path = repo().join(format!(
        "manifests/components/{component}/kustomization.yaml"
    ));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let doc = &yaml_docs(&text)[0];
    let mut args = Vec::new();
    for patch in doc["patches"].as_array().into_iter().flatten() {
        let Some(ops) = patch["patch"].as_str() else {
            continue;
        };
        for op in yaml_docs(ops)
            .iter()
            .flat_map(|d| d.as_array().cloned().unwrap_or_default())
        {
            let appends = op["op"] == "add"
                && op["path"]
                    .as_str()
                    .is_some_and(|p| p.ends_with("/containers/0/args/-"));
            if let (true, Some(v)) = (appends, op["value"].as_str()) {
                args.push(v.to_string());
            }
        }
    }
    args
}

/// Every overlay under manifests/overlays, sorted.
pub fn overlays() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(repo().join("manifests/overlays"))
        .expect("manifests/overlays")
        .map(|e| {
            e.expect("dir entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    names.sort();
    assert!(!names.is_empty(), "no overlays");
    names
}

/// `/usr/bin/kubectl` (kubectl 1.32 with kustomize v5.5, preinstalled; Debian's
/// kubernetes-client would be too old to know `components`).
pub fn kubectl() -> PathBuf {
    let p = PathBuf::from("/usr/bin/kubectl");
    assert!(
        p.is_file(),
        "/usr/bin/kubectl not found: the manifests are rendered with kubectl's kustomize (v5)"
    );
    p
}

/// `kubectl kustomize manifests/overlays/NAME` as text.
pub fn render_text(overlay: &str) -> String {
    let dir = repo().join("manifests/overlays").join(overlay);
    let out = Command::new(kubectl())
        .arg("kustomize")
        .arg(&dir)
        .output()
        .expect("running kubectl kustomize");
    assert!(
        out.status.success(),
        "kubectl kustomize {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

/// The rendered objects of an overlay.
pub fn render(overlay: &str) -> Vec<Value> {
    yaml_docs(&render_text(overlay))
}

/// Every non-empty YAML document of a multi-document text, as JSON values.
pub fn yaml_docs(text: &str) -> Vec<Value> {
    use serde::Deserialize;
    serde_yaml_ng::Deserializer::from_str(text)
        .map(|d| Value::deserialize(d).expect("valid YAML"))
        .filter(|v| !v.is_null())
        .collect()
}

pub fn kind(o: &Value) -> &str {
    o["kind"].as_str().unwrap_or_default()
}

pub fn name(o: &Value) -> &str {
    o["metadata"]["name"].as_str().unwrap_or_default()
}

pub fn namespace(o: &Value) -> &str {
    o["metadata"]["namespace"].as_str().unwrap_or_default()
}

/// The Deployments and DaemonSets of a render.
pub fn workloads(objs: &[Value]) -> Vec<&Value> {
    objs.iter()
        .filter(|o| matches!(kind(o), "Deployment" | "DaemonSet" | "StatefulSet"))
        .collect()
}

/// The values the downward API gives a pod, for a test standing in for one replica.
#[derive(Debug, Clone)]
pub struct Downward {
    pub pod_name: String,
    pub pod_namespace: String,
    pub node_name: String,
    pub host_ip: String,
}

/// A container's args and env as the kubelet would hand them over: `fieldRef`s resolved from
/// `downward`, `$(VAR)` references in args and env values expanded from the env before them
/// (Kubernetes' rules: an unknown reference is left as written, `$$` escapes).
pub fn container_command(
    workload: &Value,
    downward: &Downward,
) -> (Vec<String>, Vec<(String, String)>) {
    let c = &workload["spec"]["template"]["spec"]["containers"][0];
    let mut env: Vec<(String, String)> = Vec::new();
    for e in c["env"].as_array().into_iter().flatten() {
        let key = e["name"].as_str().expect("env name").to_string();
        let value = if let Some(v) = e["value"].as_str() {
            expand(v, &env)
        } else if let Some(path) = e["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
            match path {
                "metadata.name" => downward.pod_name.clone(),
                "metadata.namespace" => downward.pod_namespace.clone(),
                "spec.nodeName" => downward.node_name.clone(),
                "status.hostIP" | "status.podIP" => downward.host_ip.clone(),
                other => panic!("{}: fieldRef {other} not known to the test", name(workload)),
            }
        } else {
            panic!(
                "{}: env {key} has neither value nor fieldRef",
                name(workload)
            );
        };
        env.push((key, value));
    }
    let args = c["args"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|a| expand(a.as_str().expect("string arg"), &env))
        .collect();
    (args, env)
}

/// Kubernetes' `$(VAR)` expansion.
pub fn expand(s: &str, env: &[(String, String)]) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(stripped) = after.strip_prefix('$') {
            out.push('$');
            rest = stripped;
        } else if let Some(inner) = after.strip_prefix('(')
            && let Some(end) = inner.find(')')
        {
            let var = &inner[..end];
            match env.iter().rev().find(|(k, _)| k == var) {
                Some((_, v)) => out.push_str(v),
                None => {
                    out.push_str("$(");
                    out.push_str(var);
                    out.push(')');
                }
            }
            rest = &inner[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// The manifest's `--listen=ADDR` with the port replaced by 0 (tests run side by side), keeping
/// the host the manifest binds, mapped to 127.0.0.1 when it is the wildcard. Panics when the
/// manifest has no `--listen`.
pub fn local_listen(args: &mut [String]) -> String {
    let arg = args
        .iter_mut()
        .find(|a| a.starts_with("--listen="))
        .expect("every manifest names its --listen address");
    let addr = arg.trim_start_matches("--listen=").to_string();
    let (host, _port) = addr.rsplit_once(':').expect("--listen is HOST:PORT");
    let host = if host == "0.0.0.0" { "127.0.0.1" } else { host };
    *arg = format!("--listen={host}:0");
    addr
}

/// A pod's container of `workload` as a process of this machine: the manifest's command line
/// for `downward` ([`container_command`]), listening as [`local_listen`] says, the container's
/// hostPath mounts (/host/proc, /host/sys) mapped to this machine's paths, no collector, and
/// `kubeconfig` as its credentials. Returns the args, the env and the manifest's `--listen`.
pub fn local_pod_command(
    workload: &Value,
    downward: &Downward,
    kubeconfig: &Path,
) -> (Vec<String>, Vec<(String, String)>, String) {
    let (mut args, mut env) = container_command(workload, downward);
    let listen = local_listen(&mut args);
    outside_container(&mut args, &host_mounts(workload));
    without_collector(&mut env);
    env.push((
        "KUBECONFIG".into(),
        kubeconfig.to_string_lossy().into_owned(),
    ));
    (args, env, listen)
}

/// Paths in `--flag=PATH` arguments that lie under one of the container's `mounts` (e.g.
/// `--procfs=/host/proc`, `--cgroup-root=/host/sys/fs/cgroup`), mapped to where the hostPath
/// lives on this machine, for running the manifest's command outside a sandbox.
pub fn outside_container(args: &mut [String], mounts: &[Mount]) {
    for arg in args.iter_mut() {
        let Some((flag, path)) = arg.split_once('=') else {
            continue;
        };
        for m in mounts {
            if let Some(rest) = path.strip_prefix(m.dest.as_str())
                && (rest.is_empty() || rest.starts_with('/'))
            {
                *arg = format!("{flag}={}{rest}", m.source.display());
                break;
            }
        }
    }
}

/// The uid and gid the image runs as (Dockerfile `USER`, manifests' `runAsUser`).
pub const IMAGE_UID: u32 = 65532;
/// Where the Dockerfile puts the binary.
pub const IMAGE_BINARY: &str = "/kube-prober";

/// A read-only file or directory of the host given to the sandbox at `dest`.
#[derive(Debug, Clone)]
pub struct Mount {
    pub source: PathBuf,
    pub dest: String,
}

/// The container's volume mounts of a workload, mapped to this machine: every `hostPath`
/// volume mounted read-only at its `mountPath` (the only volume type the manifests use).
pub fn host_mounts(workload: &Value) -> Vec<Mount> {
    let pod = &workload["spec"]["template"]["spec"];
    let mut out = Vec::new();
    for m in pod["containers"][0]["volumeMounts"]
        .as_array()
        .into_iter()
        .flatten()
    {
        assert_eq!(
            m["readOnly"],
            true,
            "{}: only read-only mounts",
            name(workload)
        );
        let vol = pod["volumes"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|v| v["name"] == m["name"])
            .expect("the mount's volume");
        let source = vol["hostPath"]["path"].as_str().expect("a hostPath volume");
        out.push(Mount {
            source: PathBuf::from(source),
            dest: m["mountPath"].as_str().expect("mountPath").to_string(),
        });
    }
    out
}

/// `bwrap` (Debian's bubblewrap), or a clear panic saying how to get it.
pub fn bwrap() -> PathBuf {
    ["/usr/bin/bwrap", "/usr/local/bin/bwrap"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .expect("bwrap not found: run `bash .ci/test`, which installs Debian's bubblewrap")
}

/// The sandbox that stands in for the container runtime (bubblewrap): a new user namespace in
/// which the process is uid/gid 65532 with every capability dropped; new PID, IPC and UTS
/// namespaces; a root filesystem that holds only what the runtime image holds (the binary at
/// /kube-prober, and what distroless/cc holds that it uses: glibc and libgcc from /lib, /lib64,
/// /usr/lib, the CA bundle in /etc/ssl/certs), a fresh /proc and /dev, then `mounts` read-only, all of it remounted
/// read-only: no writable path anywhere, no home. The environment is cleared and only `env`
/// is set. The network namespace is shared so the process reaches the stand-ins on 127.0.0.1.
pub fn sandbox_command(args: &[String], env: &[(String, String)], mounts: &[Mount]) -> Command {
    let mut cmd = Command::new(bwrap());
    cmd.args([
        "--unshare-user",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
    ])
    .args([
        "--uid",
        &IMAGE_UID.to_string(),
        "--gid",
        &IMAGE_UID.to_string(),
    ])
    .args(["--cap-drop", "ALL", "--die-with-parent", "--new-session"]);
    // distroless/cc also carries the CA bundle, which the kube client's rustls loads at start
    // (without any, building the client fails even for a plain-HTTP API server).
    for dir in ["/lib", "/lib64", "/usr/lib", "/etc/ssl/certs"] {
        if Path::new(dir).exists() {
            cmd.args(["--ro-bind", dir, dir]);
        }
    }
    cmd.arg("--ro-bind")
        .arg(crate::binary())
        .arg(IMAGE_BINARY)
        .args(["--proc", "/proc", "--dev", "/dev"]);
    for m in mounts {
        cmd.arg("--ro-bind").arg(&m.source).arg(&m.dest);
    }
    cmd.args(["--remount-ro", "/", "--clearenv"]);
    for (k, v) in env {
        cmd.arg("--setenv").arg(k).arg(v);
    }
    cmd.arg("--").arg(IMAGE_BINARY).args(args);
    cmd
}

/// Starts the binary in the [`sandbox_command`] and waits for its `listening` line.
pub fn spawn_contained(args: &[String], env: &[(String, String)], mounts: &[Mount]) -> Prober {
    spawn_command(sandbox_command(args, env, mounts), args)
}

/// No collector runs for these tests: an OTLP endpoint in `env` becomes a closed port of
/// 127.0.0.1, so a push fails at once.
pub fn without_collector(env: &mut [(String, String)]) {
    for (k, v) in env.iter_mut() {
        if k == "OTEL_EXPORTER_OTLP_ENDPOINT" {
            *v = "http://127.0.0.1:9".into();
        }
    }
}

/// Starts the binary with exactly `args` and `env` (plus `HOME=/nonexistent`, nothing
/// inherited that would choose a role) and waits for its `listening` line (`--log-format=json`
/// must be among the args). Panics with the log when it exits first (a configuration error
/// exits 2 before listening).
pub fn spawn(args: &[String], env: &[(String, String)]) -> Prober {
    let mut cmd = Command::new(crate::binary());
    cmd.args(args)
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .env("HOME", "/nonexistent")
        // The DNS probe resolves localhost (/etc/hosts), not a cluster name through the
        // machine's resolver (not on 127.0.0.0/8); a manifest's own setting still wins.
        .env("KUBE_PROBER_PROBE_DNS_NAMES", "localhost");
    for (k, v) in env {
        cmd.env(k, v);
    }
    spawn_command(cmd, args)
}

fn spawn_command(mut cmd: Command, args: &[String]) -> Prober {
    cmd.stdout(Stdio::null()).stderr(Stdio::piped());
    let mut child = crate::owned::spawn(cmd).expect("spawning kube-prober");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                if let Ok(v) = serde_json::from_str::<Value>(&line)
                    && v["message"] == "listening"
                {
                    let addr = v["addr"].as_str().expect("addr").to_string();
                    return Prober {
                        child,
                        addr,
                        log: rx,
                    };
                }
                seen.push(line);
            }
            Err(_) => {
                let status = child.try_wait().ok().flatten();
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "kube-prober {args:?} did not start listening (exit {status:?}):\n{}",
                    seen.join("\n")
                );
            }
        }
    }
}

/// One RBAC rule as granted to a service account, with the namespace it applies in (`None`: a
/// ClusterRole bound cluster-wide).
#[derive(Debug, Clone)]
pub struct Grant {
    pub source: String,
    pub namespace: Option<String>,
    pub groups: Vec<String>,
    pub resources: Vec<String>,
    pub verbs: Vec<String>,
    pub resource_names: Vec<String>,
    pub non_resource_urls: Vec<String>,
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_string))
        .collect()
}

/// Every rule the render grants the service account `sa_namespace/sa_name`, through
/// ClusterRoleBindings and RoleBindings (RoleBindings to ClusterRoles apply in their namespace).
pub fn grants(objs: &[Value], sa_namespace: &str, sa_name: &str) -> Vec<Grant> {
    let mut out = Vec::new();
    for b in objs
        .iter()
        .filter(|o| matches!(kind(o), "ClusterRoleBinding" | "RoleBinding"))
    {
        let binds = b["subjects"].as_array().into_iter().flatten().any(|s| {
            s["kind"] == "ServiceAccount" && s["name"] == sa_name && s["namespace"] == sa_namespace
        });
        if !binds {
            continue;
        }
        let role_kind = b["roleRef"]["kind"].as_str().unwrap_or_default();
        let role_name = b["roleRef"]["name"].as_str().unwrap_or_default();
        let binding_ns = (kind(b) == "RoleBinding").then(|| namespace(b).to_string());
        let role = objs
            .iter()
            .find(|o| {
                kind(o) == role_kind
                    && name(o) == role_name
                    && (role_kind == "ClusterRole" || Some(namespace(o)) == binding_ns.as_deref())
            })
            .unwrap_or_else(|| {
                panic!(
                    "{} {} binds a missing {role_kind} {role_name}",
                    kind(b),
                    name(b)
                )
            });
        for r in role["rules"].as_array().into_iter().flatten() {
            out.push(Grant {
                source: format!("{role_kind}/{role_name}"),
                namespace: binding_ns.clone(),
                groups: strings(&r["apiGroups"]),
                resources: strings(&r["resources"]),
                verbs: strings(&r["verbs"]),
                resource_names: strings(&r["resourceNames"]),
                non_resource_urls: strings(&r["nonResourceURLs"]),
            });
        }
    }
    out
}

/// Label values of a family on a /metrics body, as `{label: value}` maps with the sample value.
pub fn samples(body: &str, family: &str) -> Vec<(BTreeMap<String, String>, f64)> {
    let mut out = Vec::new();
    for line in body.lines() {
        let Some(rest) = line.strip_prefix(family) else {
            continue;
        };
        let (labels, value) = if let Some(rest) = rest.strip_prefix('{') {
            let Some((labels, value)) = rest.rsplit_once("} ") else {
                continue;
            };
            (labels, value)
        } else if let Some(value) = rest.strip_prefix(' ') {
            ("", value)
        } else {
            continue;
        };
        let mut map = BTreeMap::new();
        for pair in labels.split("\",").filter(|p| !p.is_empty()) {
            if let Some((k, v)) = pair.split_once("=\"") {
                map.insert(k.to_string(), v.trim_end_matches('"').to_string());
            }
        }
        let value: f64 = value
            .split_whitespace()
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(f64::NAN);
        out.push((map, value));
    }
    out
}

/// The samples of `family` whose labels include every pair of `labels`.
pub fn matching(body: &str, family: &str, labels: &[(&str, &str)]) -> Vec<f64> {
    samples(body, family)
        .into_iter()
        .filter(|(l, _)| {
            labels
                .iter()
                .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|(_, v)| v)
        .collect()
}

/// The value of the first sample of `family` matching `labels` (see [`matching`]).
pub fn sample(body: &str, family: &str, labels: &[(&str, &str)]) -> Option<f64> {
    matching(body, family, labels).first().copied()
}

/// The sum of the samples of `family` matching `labels` (see [`matching`]).
pub fn sum(body: &str, family: &str, labels: &[(&str, &str)]) -> f64 {
    matching(body, family, labels).iter().sum()
}

/// `dir` exists, or a clear panic naming it.
pub fn must_exist(dir: &Path) {
    assert!(dir.exists(), "{} is missing", dir.display());
}

/// The sandboxed kube-prober process under a [`spawn_contained`] bwrap: the descendant whose
/// command name is `kube-prober`.
pub fn contained_pid(bwrap_pid: u32) -> u32 {
    let mut queue = vec![bwrap_pid];
    while let Some(pid) = queue.pop() {
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        if comm.trim() == "kube-prober" {
            return pid;
        }
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
            .into_iter()
            .flatten();
        for t in tasks.flatten() {
            let children = std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
            queue.extend(
                children
                    .split_whitespace()
                    .filter_map(|c| c.parse::<u32>().ok()),
            );
        }
    }
    panic!("no kube-prober process under bwrap {bwrap_pid}")
}

/// What the kernel says about a contained process: (uid inside its user namespace, effective
/// capabilities, mount points writable by it, environment variable names).
pub fn contained_facts(pid: u32) -> (u32, u64, Vec<String>, Vec<String>) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let cap_eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .map(|v| u64::from_str_radix(v.trim(), 16).expect("hex"))
        .expect("CapEff");
    // uid_map: "INSIDE OUTSIDE COUNT"; the process's uid on the host is OUTSIDE.
    let host_uid: u32 = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("Uid");
    let map = std::fs::read_to_string(format!("/proc/{pid}/uid_map")).expect("uid_map");
    let inside = map
        .lines()
        .filter_map(|l| {
            let f: Vec<u32> = l
                .split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect();
            (f.len() == 3 && host_uid >= f[1] && host_uid < f[1] + f[2])
                .then(|| f[0] + host_uid - f[1])
        })
        .next()
        .expect("the process's uid is mapped");
    let mountinfo = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).expect("mountinfo");
    let writable = mountinfo
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (point, opts) = (*f.get(4)?, *f.get(5)?);
            let fstype = f
                .iter()
                .skip_while(|x| **x != "-")
                .nth(1)
                .copied()
                .unwrap_or("");
            // /proc and /dev are the runtime's, as in every container; the rest must be read-only.
            let runtime = point == "/proc"
                || point.starts_with("/proc/")
                || point == "/dev"
                || point.starts_with("/dev/");
            (!runtime && opts.split(',').any(|o| o == "rw")).then(|| format!("{point} ({fstype})"))
        })
        .collect();
    let environ = std::fs::read(format!("/proc/{pid}/environ")).expect("environ");
    let names = environ
        .split(|b| *b == 0)
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let kv = String::from_utf8_lossy(kv);
            kv.split_once('=')
                .map(|(k, _)| k.to_string())
                .unwrap_or_else(|| kv.into_owned())
        })
        .collect();
    (inside, cap_eff, writable, names)
}

/// Fills a stand-in with a small cluster that gives every dashboard query and alert something
/// to show: 3 nodes in 2 pools with GKE-style addon DaemonSets and Deployments in kube-system
/// (apiserver::generate_with), NodeMetrics, and then three faults: the first node NotReady, the
/// third cordoned (unschedulable), and one addon pod on the second node not ready after 5
/// restarts (last termination OOMKilled).
/// Returns the node names, first the NotReady one.
pub fn populate(api: &crate::apiserver::ApiServer) -> Vec<String> {
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateTerminated, Node, NodeCondition, Pod,
    };
    api.generate_with(&crate::apiserver::GenerateOptions::new(3, 6));
    let mut nodes: Vec<Node> = api.objects::<Node>();
    nodes.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let names: Vec<String> = nodes
        .iter()
        .filter_map(|n| n.metadata.name.clone())
        .collect();
    let mut sick = nodes[0].clone();
    let status = sick.status.get_or_insert_with(Default::default);
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    conditions.retain(|c| c.type_ != "Ready");
    conditions.push(NodeCondition {
        type_: "Ready".into(),
        status: "False".into(),
        reason: Some("KubeletNotReady".into()),
        ..Default::default()
    });
    api.upsert(&sick);
    let mut cordoned = nodes[2].clone();
    cordoned
        .spec
        .get_or_insert_with(Default::default)
        .unschedulable = Some(true);
    api.upsert(&cordoned);
    let pods: Vec<Pod> = api.objects::<Pod>();
    let mut addon_pod = pods
        .into_iter()
        .find(|p| {
            p.metadata.namespace.as_deref() == Some("kube-system")
                && p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(names[1].as_str())
                && p.metadata
                    .annotations
                    .as_ref()
                    .is_some_and(|a| a.contains_key(crate::apiserver::COMPONENT_NAME))
        })
        .expect("an addon pod on the second node");
    let st = addon_pod.status.get_or_insert_with(Default::default);
    for cond in st.conditions.iter_mut().flatten() {
        if cond.type_ == "Ready" || cond.type_ == "ContainersReady" {
            cond.status = "False".into();
        }
    }
    for cs in st.container_statuses.iter_mut().flatten() {
        cs.ready = false;
        cs.restart_count = 5;
        cs.last_state = Some(ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: 137,
                reason: Some("OOMKilled".into()),
                ..Default::default()
            }),
            ..Default::default()
        });
    }
    api.upsert(&addon_pod);
    names
}

/// Whether `text` names a refusal: "forbidden" (any case), "RBAC", or 403 as a number of its
/// own (not digits of a timestamp or a value).
pub fn names_a_refusal(text: &str) -> bool {
    let lower = text.to_lowercase();
    let bytes = lower.as_bytes();
    let lone_403 = lower.match_indices("403").any(|(i, _)| {
        let before = i.checked_sub(1).map(|j| bytes[j]);
        let after = bytes.get(i + 3).copied();
        !before.is_some_and(|b| b.is_ascii_digit() || b == b'.')
            && !after.is_some_and(|b| b.is_ascii_digit() || b == b'.')
    });
    lone_403 || lower.contains("forbidden") || lower.contains("rbac")
}

/// Lines that show a permission problem: a 403 answer, a Forbidden status, an RBAC denial.
pub fn permission_lines(lines: &[String]) -> Vec<&String> {
    lines.iter().filter(|l| names_a_refusal(l)).collect()
}
