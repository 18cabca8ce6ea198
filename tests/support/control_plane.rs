//! A real Kubernetes control plane on 127.0.0.1, for the tests that must hold against the
//! upstream components and not only against the stand-ins: etcd, kube-apiserver (RBAC, the
//! service-account issuer, the aggregation layer), kube-controller-manager, a scheduler, kwok
//! managing fake nodes and metrics-server scraping kwok's kubelet endpoints, registered as
//! APIService `v1beta1.metrics.k8s.io`.
//!
//! The binaries come from `tests/upstream/build.sh` (pinned Go modules), linked into
//! `target/upstream/bin` or `$KUBE_PROBER_UPSTREAM_BIN`; a missing one is a failure naming the
//! script, never a skip. Ports are free ports of 127.0.0.1, certificates are made per run
//! (rcgen), pod IPs lie in 127.1.0.0/16, and every process is killed and every file removed when
//! the `ControlPlane` is dropped, when the test binary exits (for one kept in a static) and, by
//! the kernel, when the test process dies: every process is started through [`crate::owned`].
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
};
use serde_json::{Value, json};

/// The folder of upstream binaries `tests/upstream/build.sh` links.
pub fn upstream_bin() -> PathBuf {
    std::env::var_os("KUBE_PROBER_UPSTREAM_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::repo_root().join("target/upstream/bin"))
}

/// The path of upstream binary (or data folder) `name`; panics naming the build script.
pub fn upstream(name: &str) -> PathBuf {
    let p = upstream_bin().join(name);
    assert!(
        p.exists(),
        "{} is missing: build the upstream components with `tests/upstream/build.sh` \
         (needs Go >= 1.26; README.md, 'Test it' runs it for you)",
        p.display()
    );
    p
}

pub use crate::ports::free_port;

// ---- processes: every one through `crate::owned`, which ends them with the test process ----

pub use crate::owned::spawn_owned;

/// One process of the control plane: restartable with the same command line.
struct Proc {
    child: Child,
    program: PathBuf,
    args: Vec<String>,
    log: PathBuf,
}

impl Proc {
    fn start(program: PathBuf, args: Vec<String>, log: PathBuf) -> Proc {
        let mut cmd = Command::new(&program);
        cmd.args(&args);
        let child = spawn_owned(cmd, &log);
        Proc {
            child,
            program,
            args,
            log,
        }
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn restart(&mut self) {
        self.kill();
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.args);
        self.child = spawn_owned(cmd, &self.log);
    }

    fn tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

// ---- certificates ----

struct Ca {
    pem: String,
    key_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

fn ca(name: &str) -> Ca {
    let key = KeyPair::generate().expect("key");
    let key_pem = key.serialize_pem();
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    let cert = params.self_signed(&key).expect("self-signed CA");
    Ca {
        pem: cert.pem(),
        key_pem,
        issuer: Issuer::new(params, key),
    }
}

/// (certificate PEM, key PEM) signed by `ca`: a server certificate for 127.0.0.1 when
/// `server`, else a client certificate for CN `cn` and groups `orgs`.
fn leaf(ca: &Ca, cn: &str, orgs: &[&str], server: bool) -> (String, String) {
    let key = KeyPair::generate().expect("key");
    let sans = if server {
        vec!["127.0.0.1".to_string(), "localhost".to_string()]
    } else {
        Vec::new()
    };
    let mut params = CertificateParams::new(sans).expect("params");
    params.distinguished_name.push(DnType::CommonName, cn);
    for o in orgs {
        params.distinguished_name.push(DnType::OrganizationName, *o);
    }
    params.extended_key_usages = vec![if server {
        ExtendedKeyUsagePurpose::ServerAuth
    } else {
        ExtendedKeyUsagePurpose::ClientAuth
    }];
    let cert = params.signed_by(&key, &ca.issuer).expect("signed leaf");
    (cert.pem(), key.serialize_pem())
}

/// What to start.
#[derive(Debug, Clone)]
pub struct Options {
    /// kwok nodes created at start (`kwok-node-0` ...), each with `pods_per_node` pods carrying
    /// usage annotations so that metrics-server has NodeMetrics for them.
    pub nodes: usize,
    pub pods_per_node: usize,
    pub controller_manager: bool,
    pub scheduler: bool,
    pub metrics_server: bool,
    /// Wait until metrics-server serves NodeMetrics for every node with pods.
    pub wait_node_metrics: bool,
    /// Extra kube-apiserver flags.
    pub apiserver_args: Vec<String>,
    /// The pods' IP range (kwok's `--cidr`). On loopback by default; a test that needs pod IPs
    /// the API server accepts in Endpoints (it refuses loopback ones) takes another range inside
    /// a network namespace of its own ([`run_in_own_network`]).
    pub pod_cidr: String,
    /// metrics-server's `--metric-resolution` (its default, 15 s). At 1,000 kwok nodes × 30 pods
    /// on 2 busy cores kwok cannot answer every node's `/metrics/resource` that often: a slower
    /// resolution keeps it from falling behind for good.
    pub metric_resolution: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            nodes: 3,
            pods_per_node: 1,
            controller_manager: true,
            scheduler: true,
            metrics_server: true,
            wait_node_metrics: true,
            apiserver_args: Vec::new(),
            pod_cidr: "127.1.0.0/16".into(),
            metric_resolution: Duration::from_secs(15),
        }
    }
}

/// Which of kwok's node heartbeat stages the control plane runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Heartbeat {
    /// `stage/node/heartbeat`: every node's status is rewritten every 20–45 s (at 1,000 nodes
    /// about 30 node updates a second, more than real kubelets make).
    Status,
    /// `stage/node/heartbeat-with-lease`: a Lease in `kube-node-lease` renewed per node, the
    /// status rewritten every 10–20 minutes: the closer model of real kubelets.
    Lease,
}

impl Heartbeat {
    /// The folder of kwok's stage, under `kustomize/stage/`.
    pub fn stage(self) -> &'static str {
        match self {
            Heartbeat::Status => "stage/node/heartbeat",
            Heartbeat::Lease => "stage/node/heartbeat-with-lease",
        }
    }
}

impl Options {
    /// etcd, kube-apiserver, kwok and metrics-server only: no nodes or pods yet, no
    /// controller-manager or scheduler (the benches create and bind what they measure).
    pub fn bare() -> Options {
        Options {
            nodes: 0,
            pods_per_node: 0,
            controller_manager: false,
            scheduler: false,
            wait_node_metrics: false,
            ..Options::default()
        }
    }
}

/// Where the files of one control plane live.
struct Files {
    dir: PathBuf,
}

impl Files {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
    fn write(&self, name: &str, text: &str) -> String {
        let p = self.path(name);
        std::fs::write(&p, text).unwrap_or_else(|e| panic!("writing {}: {e}", p.display()));
        p.to_string_lossy().into_owned()
    }
}

/// A running control plane; dropped, it stops everything and removes its files.
pub struct ControlPlane {
    _tmp: tempfile::TempDir,
    files: Files,
    /// `https://127.0.0.1:PORT`
    pub api_url: String,
    pub api_port: u16,
    /// etcd's client URL (`http://127.0.0.1:PORT`).
    pub etcd_url: String,
    /// The admin kubeconfig (O=system:masters client certificate).
    pub admin_kubeconfig: PathBuf,
    /// The cluster CA (PEM file).
    pub ca_file: PathBuf,
    ca_pem: String,
    procs: Mutex<BTreeMap<&'static str, Proc>>,
    pub options: Options,
    pub kwok_port: u16,
    pub metrics_server_port: u16,
    heartbeat: Heartbeat,
}

impl ControlPlane {
    /// Starts everything `options` asks for and waits until it is usable; prints the start-up
    /// time.
    pub fn start(options: Options) -> ControlPlane {
        ControlPlane::start_with(options, Heartbeat::Status)
    }

    /// [`ControlPlane::start`] with kwok's node heartbeat stage `heartbeat`.
    pub fn start_with(options: Options, heartbeat: Heartbeat) -> ControlPlane {
        let started = Instant::now();
        let tmp = tempfile::Builder::new()
            .prefix("kube-prober-cp-")
            .tempdir()
            .expect("temp dir");
        crate::owned::remove_at_exit(tmp.path());
        let files = Files {
            dir: tmp.path().to_path_buf(),
        };
        let cluster_ca = ca("kube-prober-test-ca");
        let ca_file = PathBuf::from(files.write("ca.crt", &cluster_ca.pem));
        let api_port = free_port();
        let api_url = format!("https://127.0.0.1:{api_port}");
        let mut cp = ControlPlane {
            _tmp: tmp,
            api_url,
            api_port,
            etcd_url: String::new(),
            admin_kubeconfig: PathBuf::new(),
            ca_file,
            ca_pem: cluster_ca.pem.clone(),
            procs: Mutex::new(BTreeMap::new()),
            options: options.clone(),
            kwok_port: free_port(),
            metrics_server_port: free_port(),
            heartbeat,
            files,
        };
        cp.start_etcd();
        cp.write_certificates(&cluster_ca);
        cp.start_apiserver();
        cp.wait_apiserver(Duration::from_secs(60));
        eprintln!(
            "control plane: etcd and kube-apiserver ready after {:.1} s",
            started.elapsed().as_secs_f64()
        );
        cp.start_rest(&cluster_ca);
        eprintln!(
            "control plane: {} kwok nodes{} ready after {:.1} s ({})",
            options.nodes,
            if options.wait_node_metrics && options.metrics_server {
                " with NodeMetrics"
            } else {
                ""
            },
            started.elapsed().as_secs_f64(),
            cp.files.dir.display()
        );
        cp
    }

    fn start_rest(&mut self, cluster_ca: &Ca) {
        let opts = self.options.clone();
        if opts.controller_manager {
            self.start_controller_manager();
        }
        if opts.scheduler {
            self.start_scheduler();
        }
        self.start_kwok(cluster_ca);
        if opts.metrics_server {
            self.start_metrics_server();
        }
        if opts.nodes > 0 {
            self.create_nodes(0..opts.nodes, "4", "16Gi");
            self.wait_nodes_ready(opts.nodes);
            if opts.pods_per_node > 0 {
                self.create_usage_pods("default", 0..opts.nodes, opts.pods_per_node, "500m", "1Gi");
            }
        }
        if opts.metrics_server {
            self.wait_apiservice_available();
            if opts.wait_node_metrics && opts.pods_per_node > 0 && opts.nodes > 0 {
                self.wait_node_metrics(opts.nodes, Duration::from_secs(120));
            }
        }
    }

    fn start_etcd(&mut self) {
        let client = free_port();
        let peer = free_port();
        self.etcd_url = format!("http://127.0.0.1:{client}");
        let data = self.files.path("etcd");
        let args = vec![
            "--name=test".to_string(),
            format!("--data-dir={}", data.display()),
            format!("--listen-client-urls={}", self.etcd_url),
            format!("--advertise-client-urls={}", self.etcd_url),
            format!("--listen-peer-urls=http://127.0.0.1:{peer}"),
            format!("--initial-advertise-peer-urls=http://127.0.0.1:{peer}"),
            format!("--initial-cluster=test=http://127.0.0.1:{peer}"),
            "--unsafe-no-fsync".into(),
            "--log-level=warn".into(),
        ];
        self.add("etcd", upstream("etcd"), args);
        let deadline = Instant::now() + Duration::from_secs(30);
        while self
            .etcd_post("/v3/kv/range", json!({"key": "AA=="}))
            .is_err()
        {
            assert!(
                Instant::now() < deadline,
                "etcd not ready within 30 s:\n{}",
                self.log_tail("etcd", 30)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn write_certificates(&mut self, cluster_ca: &Ca) {
        let f = &self.files;
        let (c, k) = leaf(cluster_ca, "kube-apiserver", &[], true);
        f.write("apiserver.crt", &c);
        f.write("apiserver.key", &k);
        let (c, k) = leaf(
            cluster_ca,
            "kube-prober-test-admin",
            &["system:masters"],
            false,
        );
        f.write("admin.crt", &c);
        f.write("admin.key", &k);
        let front = ca("kube-prober-test-front-proxy-ca");
        f.write("front-proxy-ca.crt", &front.pem);
        let (c, k) = leaf(&front, "front-proxy-client", &[], false);
        f.write("front-proxy-client.crt", &c);
        f.write("front-proxy-client.key", &k);
        let sa = KeyPair::generate().expect("service-account key");
        f.write("sa.key", &sa.serialize_pem());
        f.write("sa.pub", &sa.public_key_pem());
        f.write("ca.key", &cluster_ca.key_pem);
        let kc = self.kubeconfig_with(
            "admin",
            json!({
                "client-certificate": f.path("admin.crt"),
                "client-key": f.path("admin.key"),
            }),
        );
        self.admin_kubeconfig = kc;
    }

    /// A kubeconfig named `name` for this API server with `user` (kubeconfig user fields).
    pub fn kubeconfig_with(&self, name: &str, user: Value) -> PathBuf {
        let kc = json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "test", "cluster": {
                "server": self.api_url,
                "certificate-authority": self.ca_file,
            }}],
            "users": [{"name": name, "user": user}],
            "contexts": [{"name": name, "context": {"cluster": "test", "user": name}}],
            "current-context": name,
        });
        PathBuf::from(
            self.files
                .write(&format!("{name}.kubeconfig"), &kc.to_string()),
        )
    }

    /// The kube-apiserver command line (also for a second instance on the same etcd).
    fn apiserver_args(&self, port: u16) -> Vec<String> {
        let f = |n: &str| self.files.path(n).to_string_lossy().into_owned();
        let mut args = vec![
            format!("--etcd-servers={}", self.etcd_url),
            "--bind-address=127.0.0.1".into(),
            "--advertise-address=127.0.0.1".into(),
            format!("--secure-port={port}"),
            format!("--tls-cert-file={}", f("apiserver.crt")),
            format!("--tls-private-key-file={}", f("apiserver.key")),
            format!("--client-ca-file={}", f("ca.crt")),
            "--authorization-mode=Node,RBAC".into(),
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
            format!("--service-account-key-file={}", f("sa.pub")),
            format!("--service-account-signing-key-file={}", f("sa.key")),
            "--service-cluster-ip-range=10.96.0.0/16".into(),
            format!("--requestheader-client-ca-file={}", f("front-proxy-ca.crt")),
            "--requestheader-allowed-names=front-proxy-client".into(),
            "--requestheader-username-headers=X-Remote-User".into(),
            "--requestheader-group-headers=X-Remote-Group".into(),
            "--requestheader-extra-headers-prefix=X-Remote-Extra-".into(),
            format!("--proxy-client-cert-file={}", f("front-proxy-client.crt")),
            format!("--proxy-client-key-file={}", f("front-proxy-client.key")),
            "--endpoint-reconciler-type=none".into(),
            "--v=1".into(),
        ];
        if !self.options.controller_manager {
            args.push("--disable-admission-plugins=ServiceAccount".into());
        }
        args.extend(self.options.apiserver_args.iter().cloned());
        args
    }

    fn start_apiserver(&mut self) {
        let args = self.apiserver_args(self.api_port);
        self.add("kube-apiserver", upstream("kube-apiserver"), args);
    }

    /// Waits for `/readyz` of the API server.
    pub fn wait_apiserver(&self, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let out = self.kubectl_output(&["get", "--raw", "/readyz"], None);
            if out.status.success() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "kube-apiserver not ready within {within:?}: {}\n{}",
                String::from_utf8_lossy(&out.stderr),
                self.log_tail("kube-apiserver", 40)
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    fn start_controller_manager(&mut self) {
        let kc = self.admin_kubeconfig.to_string_lossy().into_owned();
        let f = |n: &str| self.files.path(n).to_string_lossy().into_owned();
        let args = vec![
            format!("--kubeconfig={kc}"),
            format!("--authentication-kubeconfig={kc}"),
            format!("--authorization-kubeconfig={kc}"),
            "--leader-elect=false".into(),
            "--secure-port=0".into(),
            format!("--service-account-private-key-file={}", f("sa.key")),
            format!("--root-ca-file={}", f("ca.crt")),
            "--use-service-account-credentials=false".into(),
            "--controllers=deployment,replicaset,daemonset,statefulset,nodelifecycle,podgc,\
             serviceaccount,serviceaccount-token,endpoint,endpointslice,namespace,\
             garbagecollector"
                .into(),
            // The pod-GC controller deletes the pods of a deleted node at once; terminated pods
            // are kept (the default threshold).
            "--v=1".into(),
        ];
        self.add(
            "kube-controller-manager",
            upstream("kube-controller-manager"),
            args,
        );
    }

    fn start_scheduler(&mut self) {
        let config = json!({
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "leaderElection": {"leaderElect": false},
            "clientConnection": {"kubeconfig": self.admin_kubeconfig},
            "profiles": [{"schedulerName": "default-scheduler"}],
        });
        let path = self.files.write("scheduler.yaml", &config.to_string());
        let args = vec![
            format!("--config={path}"),
            "--secure-port=0".into(),
            "--authentication-skip-lookup".into(),
            "--v=1".into(),
        ];
        self.add("scheduler", upstream("trimaran-scheduler"), args);
    }

    /// kwok's configuration: options, the fast node and pod stages, the heartbeat stage, the
    /// node-not-ready chaos stage (nodes labelled `node-not-ready.stage.kwok.x-k8s.io=true`),
    /// the kubelet resource metrics and usage from pod annotations.
    fn kwok_config(&self) -> String {
        let k = upstream("kwok-kustomize");
        let mut docs = vec![
            "apiVersion: config.kwok.x-k8s.io/v1alpha1\nkind: KwokConfiguration\noptions:\n  \
             podPlayStageParallelism: 8\n  nodePlayStageParallelism: 8\n  \
             nodeLeaseParallelism: 8\n  podsOnNodeSyncParallelism: 8\n"
                .to_string(),
        ];
        for folder in [
            "stage/node/fast",
            self.heartbeat.stage(),
            "stage/pod/fast",
            "metrics/resource",
            "metrics/usage",
        ] {
            docs.extend(yaml_files(&k.join(folder)));
        }
        docs.extend(
            yaml_files(&k.join("stage/node/chaos"))
                .into_iter()
                .filter(|d| d.contains("node-not-ready")),
        );
        docs.push(RESTARTS_STAGE.to_string());
        docs.join("\n---\n")
    }

    fn start_kwok(&mut self, cluster_ca: &Ca) {
        let config = self.kwok_config();
        let config = self.files.write("kwok.yaml", &config);
        let (c, k) = leaf(cluster_ca, "kwok", &[], true);
        let cert = self.files.write("kwok.crt", &c);
        let key = self.files.write("kwok.key", &k);
        let port = self.kwok_port;
        let args = vec![
            format!("--kubeconfig={}", self.admin_kubeconfig.display()),
            format!("--config={config}"),
            "--manage-all-nodes=false".into(),
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake".into(),
            "--node-ip=127.0.0.1".into(),
            format!("--node-port={port}"),
            format!("--server-address=127.0.0.1:{port}"),
            format!("--tls-cert-file={cert}"),
            format!("--tls-private-key-file={key}"),
            format!("--cidr={}", self.options.pod_cidr),
            "--node-lease-duration-seconds=40".into(),
        ];
        self.add("kwok", upstream("kwok"), args);
    }

    fn start_metrics_server(&mut self) {
        let kc = self.admin_kubeconfig.to_string_lossy().into_owned();
        let port = self.metrics_server_port;
        let args = vec![
            format!("--kubeconfig={kc}"),
            format!("--authentication-kubeconfig={kc}"),
            format!("--authorization-kubeconfig={kc}"),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={port}"),
            format!("--cert-dir={}", self.files.path("metrics-server").display()),
            "--kubelet-insecure-tls".into(),
            // A node's ExternalIP is kwok's address when the node has an address of its own
            // (create_nodes_at); kwok's own nodes have only their InternalIP 127.0.0.1.
            "--kubelet-preferred-address-types=ExternalIP,InternalIP".into(),
            "--kubelet-use-node-status-port".into(),
            format!(
                "--metric-resolution={}s",
                self.options.metric_resolution.as_secs().max(10)
            ),
        ];
        self.add("metrics-server", upstream("metrics-server"), args);
        self.apply(&format!(
            r#"
apiVersion: v1
kind: Service
metadata: {{name: metrics-server, namespace: kube-system}}
spec: {{type: ExternalName, externalName: 127.0.0.1, ports: [{{name: https, port: {port}}}]}}
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {{name: v1beta1.metrics.k8s.io}}
spec:
  service: {{name: metrics-server, namespace: kube-system, port: {port}}}
  group: metrics.k8s.io
  version: v1beta1
  insecureSkipTLSVerify: true
  groupPriorityMinimum: 100
  versionPriority: 100
"#
        ));
    }

    fn add(&mut self, name: &'static str, program: PathBuf, args: Vec<String>) {
        let log = self.files.path(&format!("{name}.log"));
        let p = Proc::start(program, args, log);
        self.procs.lock().expect("procs").insert(name, p);
    }

    /// The last `lines` of component `name`'s log.
    pub fn log_tail(&self, name: &str, lines: usize) -> String {
        self.procs
            .lock()
            .expect("procs")
            .get(name)
            .map(|p| p.tail(lines))
            .unwrap_or_default()
    }

    /// The whole log of component `name`.
    pub fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.files.path(&format!("{name}.log"))).unwrap_or_default()
    }

    /// The pid of component `name` (`kube-apiserver`, `etcd`, `kwok`, `metrics-server`, ...).
    pub fn pid(&self, name: &str) -> Option<u32> {
        self.procs
            .lock()
            .expect("procs")
            .get(name)
            .map(|p| p.child.id())
    }

    /// SIGKILLs component `name` (`kube-apiserver`, `etcd`, `metrics-server`, `kwok`, ...).
    pub fn kill(&self, name: &str) {
        if let Some(p) = self.procs.lock().expect("procs").get_mut(name) {
            p.kill();
        }
    }

    /// Starts component `name` again with the same command line (killing it first).
    pub fn restart(&self, name: &str) {
        let mut procs = self.procs.lock().expect("procs");
        let p = procs
            .get_mut(name)
            .unwrap_or_else(|| panic!("no component {name}"));
        p.restart();
    }

    /// Starts component `name` again if it has exited, as a kubelet's `restartPolicy: Always`
    /// would (metrics-server exits when it starts while the API server is down); returns the
    /// exit status it had, `None` while it runs.
    pub fn restart_if_exited(&self, name: &str) -> Option<std::process::ExitStatus> {
        let mut procs = self.procs.lock().expect("procs");
        let p = procs
            .get_mut(name)
            .unwrap_or_else(|| panic!("no component {name}"));
        let status = p.child.try_wait().ok().flatten()?;
        p.restart();
        Some(status)
    }

    /// A second kube-apiserver on the same etcd (another port, the same certificates): to change
    /// the cluster while "the" API server is down. Returns its admin kubeconfig.
    pub fn start_second_apiserver(&mut self) -> PathBuf {
        let port = free_port();
        let args = self.apiserver_args(port);
        self.add("kube-apiserver-2", upstream("kube-apiserver"), args);
        let f = &self.files;
        let kc = json!({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "second", "cluster": {
                "server": format!("https://127.0.0.1:{port}"),
                "certificate-authority": self.ca_file}}],
            "users": [{"name": "admin", "user": {
                "client-certificate": f.path("admin.crt"),
                "client-key": f.path("admin.key")}}],
            "contexts": [{"name": "second", "context": {"cluster": "second", "user": "admin"}}],
            "current-context": "second",
        });
        let path = PathBuf::from(f.write("second.kubeconfig", &kc.to_string()));
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let out = kubectl_with(&path, &["get", "--raw", "/readyz"], None);
            if out.status.success() {
                return path;
            }
            assert!(
                Instant::now() < deadline,
                "second kube-apiserver not ready:\n{}",
                self.log_tail("kube-apiserver-2", 30)
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    // ---- kubectl and objects ----

    /// Runs kubectl with the admin kubeconfig; `stdin` fed when given.
    pub fn kubectl_output(&self, args: &[&str], stdin: Option<&str>) -> Output {
        kubectl_with(&self.admin_kubeconfig, args, stdin)
    }

    /// Runs kubectl with the admin kubeconfig and panics (with stderr) unless it succeeds;
    /// returns stdout.
    pub fn kubectl(&self, args: &[&str]) -> String {
        self.kubectl_stdin(args, None)
    }

    pub fn kubectl_stdin(&self, args: &[&str], stdin: Option<&str>) -> String {
        let out = self.kubectl_output(args, stdin);
        assert!(
            out.status.success(),
            "kubectl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `kubectl apply -f -` of a YAML text (server-side, so CRDs and large objects fit).
    pub fn apply(&self, yaml: &str) -> String {
        self.kubectl_stdin(
            &["apply", "--server-side", "--force-conflicts", "-f", "-"],
            Some(yaml),
        )
    }

    /// `kubectl get ... -o json` parsed.
    pub fn get_json(&self, args: &[&str]) -> Value {
        let mut a: Vec<&str> = vec!["get"];
        a.extend_from_slice(args);
        a.extend_from_slice(&["-o", "json"]);
        serde_json::from_str(&self.kubectl(&a)).expect("kubectl JSON")
    }

    /// Creates kwok nodes `kwok-node-<i>` for `range`, with `cpu` and `memory` as capacity and
    /// allocatable.
    pub fn create_nodes(&self, range: std::ops::Range<usize>, cpu: &str, memory: &str) {
        self.create_nodes_at(range, cpu, memory, None);
    }

    /// [`create_nodes`](Self::create_nodes), each node with its own address `ip(i)` (a
    /// 127.x.y.z) as InternalIP when `ip` is given (else kwok's 127.0.0.1): the address kwok
    /// gives the node's host-network pods (`status.hostIP`, `status.podIP`). kwok serves every
    /// node's kubelet on 127.0.0.1, so that is the node's ExternalIP, the address metrics-server
    /// prefers.
    pub fn create_nodes_at(
        &self,
        range: std::ops::Range<usize>,
        cpu: &str,
        memory: &str,
        ip: Option<&dyn Fn(usize) -> String>,
    ) {
        let docs: Vec<String> = range
            .map(|i| {
                let name = node_name(i);
                let mut node = node_object(&name, cpu, memory);
                if let Some(ip) = ip {
                    node["status"]["addresses"] = json!([
                        {"type": "InternalIP", "address": ip(i)},
                        {"type": "ExternalIP", "address": "127.0.0.1"},
                        {"type": "Hostname", "address": name},
                    ]);
                }
                node.to_string()
            })
            .collect();
        for chunk in docs.chunks(200) {
            self.kubectl_stdin(&["create", "-f", "-"], Some(&chunk.join("\n")));
        }
    }

    /// Waits until `n` nodes report Ready=True.
    pub fn wait_nodes_ready(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let nodes = self.get_json(&["nodes"]);
            let ready = items(&nodes)
                .iter()
                .filter(|n| condition(n, "Ready") == Some("True"))
                .count();
            if ready >= n {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{ready} of {n} kwok nodes Ready after 120 s:\n{}",
                self.log_tail("kwok", 30)
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// Creates `per_node` pods bound to each node of `range` in namespace `ns`
    /// (`usage-<node>-<j>`), each asking `cpu`/`memory` and using the same through kwok's usage
    /// annotations, and waits until they run.
    pub fn create_usage_pods(
        &self,
        ns: &str,
        range: std::ops::Range<usize>,
        per_node: usize,
        cpu: &str,
        memory: &str,
    ) {
        let mut docs = Vec::new();
        for i in range {
            for j in 0..per_node {
                docs.push(usage_pod(ns, &node_name(i), j, cpu, memory).to_string());
            }
        }
        let total = docs.len();
        for chunk in docs.chunks(200) {
            self.kubectl_stdin(&["create", "-f", "-"], Some(&chunk.join("\n")));
        }
        self.wait_pods_running(ns, total);
    }

    /// Waits until at least `n` pods of `ns` are Running.
    pub fn wait_pods_running(&self, ns: &str, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let pods = self.get_json(&["pods", "-n", ns]);
            let running = items(&pods)
                .iter()
                .filter(|p| p["status"]["phase"] == "Running")
                .count();
            if running >= n {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{running} of {n} pods Running in {ns} after 120 s"
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    fn wait_apiservice_available(&self) {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let s = self.get_json(&["apiservice", "v1beta1.metrics.k8s.io"]);
            if condition(&s, "Available") == Some("True") {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "APIService v1beta1.metrics.k8s.io not Available: {}\n{}",
                s["status"],
                self.log_tail("metrics-server", 30)
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// NodeMetrics through the aggregation layer: node name → (CPU cores, memory bytes).
    pub fn node_metrics(&self) -> BTreeMap<String, (f64, f64)> {
        let out = self.kubectl_output(
            &["get", "--raw", "/apis/metrics.k8s.io/v1beta1/nodes"],
            None,
        );
        if !out.status.success() {
            return BTreeMap::new();
        }
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        items(&v)
            .iter()
            .map(|m| {
                let name = m["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                let cpu = quantity(m["usage"]["cpu"].as_str().unwrap_or("0"));
                let mem = quantity(m["usage"]["memory"].as_str().unwrap_or("0"));
                (name, (cpu, mem))
            })
            .collect()
    }

    /// Waits until metrics-server serves NodeMetrics for at least `n` nodes.
    pub fn wait_node_metrics(&self, n: usize, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let have = self.node_metrics().len();
            if have >= n {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "metrics-server has NodeMetrics for {have} of {n} nodes after {within:?}:\n{}",
                self.log_tail("metrics-server", 30)
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// A kubeconfig for ServiceAccount `ns/sa` with a token from the TokenRequest API.
    pub fn service_account_kubeconfig(&self, ns: &str, sa: &str) -> PathBuf {
        let token = self.token(ns, sa);
        self.kubeconfig_with(&format!("sa-{ns}-{sa}"), json!({ "token": token }))
    }

    /// A token for ServiceAccount `ns/sa` (TokenRequest, one hour).
    pub fn token(&self, ns: &str, sa: &str) -> String {
        self.kubectl(&["create", "token", sa, "-n", ns, "--duration=1h"])
            .trim()
            .to_string()
    }

    // ---- etcd ----

    fn etcd_post(&self, path: &str, body: Value) -> Result<Value, String> {
        let out = Command::new("curl")
            .args(["-sS", "--max-time", "5", "-X", "POST", "-d"])
            .arg(body.to_string())
            .arg(format!("{}{path}", self.etcd_url))
            .output()
            .map_err(|e| format!("curl: {e}"))?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())
    }

    /// etcd's head revision.
    pub fn etcd_revision(&self) -> u64 {
        let v = self
            .etcd_post("/v3/kv/range", json!({"key": "AA=="}))
            .expect("etcd range");
        v["header"]["revision"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .expect("etcd header.revision")
    }

    /// Compacts etcd at its head revision (physical): older resourceVersions are gone.
    pub fn compact_etcd(&self) -> u64 {
        let rev = self.etcd_revision();
        self.etcd_post(
            "/v3/kv/compaction",
            json!({"revision": rev.to_string(), "physical": true}),
        )
        .expect("etcd compaction");
        rev
    }

    /// The cluster CA, PEM.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The folder holding this control plane's files.
    pub fn dir(&self) -> &Path {
        &self.files.dir
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        if let Ok(mut procs) = self.procs.lock() {
            // Clients first, the API server, etcd last.
            let order = [
                "metrics-server",
                "kwok",
                "scheduler",
                "kube-controller-manager",
                "kube-apiserver-2",
                "kube-apiserver",
                "etcd",
            ];
            for name in order {
                if let Some(p) = procs.get_mut(name) {
                    p.kill();
                }
            }
            for p in procs.values_mut() {
                p.kill();
            }
        }
    }
}

/// kubectl (the machine's /usr/bin/kubectl) with `kubeconfig`.
pub fn kubectl_with(kubeconfig: &Path, args: &[&str], stdin: Option<&str>) -> Output {
    let mut cmd = Command::new("/usr/bin/kubectl");
    cmd.arg(format!("--kubeconfig={}", kubeconfig.display()))
        .arg("--request-timeout=20s")
        .args(args);
    crate::owned::output(cmd, stdin.map(str::as_bytes)).expect("running /usr/bin/kubectl")
}

/// The annotation whose value kwok reports as every container's `restartCount` of a running
/// pod ([`RESTARTS_STAGE`]), with an OOM kill as the last termination.
pub const RESTARTS_ANNOTATION: &str = "kube-prober.test/restarts";

/// Deployment `kube-system/test-restarts`, an addon (GKE's component labels, version 3.0) whose
/// containers `app` and `sidecar` kwok reports restarted `restarts` times ([`RESTARTS_ANNOTATION`]);
/// with `tolerate_all`, its pod tolerates every taint.
pub fn restarting_addon(restarts: u32, tolerate_all: bool) -> String {
    let tolerations = if tolerate_all {
        "\n      tolerations: [{operator: Exists}]"
    } else {
        ""
    };
    format!(
        r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: test-restarts
  namespace: kube-system
  labels: {{components.gke.io/component-name: test-restarts, components.gke.io/component-version: "3.0"}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: test-restarts}}}}
  template:
    metadata:
      labels: {{app: test-restarts, components.gke.io/component-name: test-restarts, components.gke.io/component-version: "3.0"}}
      annotations: {{{RESTARTS_ANNOTATION}: "{restarts}"}}
    spec:{tolerations}
      containers: [{{name: app, image: app}}, {{name: sidecar, image: sidecar}}]
"#
    )
}

/// A kwok stage of ours: a kubelet that restarted a pod's containers, as many times as the
/// pod's `kube-prober.test/restarts` annotation says (kwok's own stages never restart). The
/// status it writes depends only on the pod, so applying it again changes nothing.
const RESTARTS_STAGE: &str = r#"apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: kube-prober-test-container-restarts
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.annotations["kube-prober.test/restarts"]'
      operator: 'Exists'
    - key: '.metadata.deletionTimestamp'
      operator: 'DoesNotExist'
    - key: '.status.phase'
      operator: 'In'
      values: ['Running']
  next:
    statusTemplate: |
      {{ $restarts := index .metadata.annotations "kube-prober.test/restarts" }}
      {{ $started := .status.startTime }}
      containerStatuses:
      {{ range $index, $item := .spec.containers }}
      - image: {{ $item.image | Quote }}
        name: {{ $item.name | Quote }}
        ready: true
        started: true
        restartCount: {{ $restarts }}
        lastState:
          terminated:
            exitCode: 137
            reason: OOMKilled
            startedAt: {{ $started | Quote }}
            finishedAt: {{ $started | Quote }}
        state:
          running:
            startedAt: {{ $started | Quote }}
      {{ end }}
"#;

/// `kwok-node-<i>`.
pub fn node_name(i: usize) -> String {
    format!("kwok-node-{i}")
}

/// A kwok Node named `name` with `cpu` and `memory` as capacity and allocatable, whose
/// resource metrics metrics-server reads from kwok.
pub fn node_object(name: &str, cpu: &str, memory: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"type": "kwok", "kubernetes.io/hostname": name,
                       "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"},
            "annotations": {
                "kwok.x-k8s.io/node": "fake",
                "node.alpha.kubernetes.io/ttl": "0",
                "metrics.k8s.io/resource-metrics-path":
                    format!("/metrics/nodes/{name}/metrics/resource"),
            },
        },
        "status": {
            "allocatable": {"cpu": cpu, "memory": memory, "pods": "110"},
            "capacity": {"cpu": cpu, "memory": memory, "pods": "110"},
        },
    })
}

/// A pod bound to `node` that asks for and (through kwok's usage annotations) uses `cpu` and
/// `memory`.
pub fn usage_pod(ns: &str, node: &str, j: usize, cpu: &str, memory: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": format!("usage-{node}-{j}"),
            "namespace": ns,
            "labels": {"app": "usage"},
            "annotations": {
                "kwok.x-k8s.io/usage-cpu": cpu,
                "kwok.x-k8s.io/usage-memory": memory,
            },
        },
        "spec": {
            "nodeName": node,
            "containers": [{"name": "c", "image": "usage",
                "resources": {"requests": {"cpu": cpu, "memory": memory}}}],
            "tolerations": [{"operator": "Exists"}],
        },
    })
}

/// `.items` of a list.
pub fn items(v: &Value) -> Vec<Value> {
    v["items"].as_array().cloned().unwrap_or_default()
}

/// The status of condition `kind` of an object.
pub fn condition<'a>(o: &'a Value, kind: &str) -> Option<&'a str> {
    o["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)?["status"]
        .as_str()
}

/// A Kubernetes quantity as a number (cores for CPU, bytes for memory).
pub fn quantity(q: &str) -> f64 {
    let (num, mult) = match q {
        s if s.ends_with("Ki") => (&s[..s.len() - 2], 1024.0),
        s if s.ends_with("Mi") => (&s[..s.len() - 2], 1024.0 * 1024.0),
        s if s.ends_with("Gi") => (&s[..s.len() - 2], 1024.0 * 1024.0 * 1024.0),
        s if s.ends_with('n') => (&s[..s.len() - 1], 1e-9),
        s if s.ends_with('u') => (&s[..s.len() - 1], 1e-6),
        s if s.ends_with('m') => (&s[..s.len() - 1], 1e-3),
        s if s.ends_with('k') => (&s[..s.len() - 1], 1e3),
        s if s.ends_with('M') => (&s[..s.len() - 1], 1e6),
        s if s.ends_with('G') => (&s[..s.len() - 1], 1e9),
        s => (s, 1.0),
    };
    num.parse::<f64>()
        .unwrap_or_else(|_| panic!("quantity {q:?}"))
        * mult
}

/// The YAML files of `dir` (sorted), each file's text.
fn yaml_files(dir: &Path) -> Vec<String> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.extension().is_some_and(|x| x == "yaml") && !p.ends_with("kustomization.yaml")
        })
        .collect();
    paths.sort();
    paths
        .iter()
        .map(|p| std::fs::read_to_string(p).expect("kwok config file"))
        .collect()
}

/// The machine-wide lock of port 2020, held by every test that binds it on any address:
/// load-watcher binds `:2020` (every address, no flag to change it) and the manifests' cluster
/// role listens on 2020 too. The lock is a file in the temp folder, so test binaries of every
/// checkout on the machine take turns; it is released when the returned file is dropped.
pub fn lock_port_2020() -> std::fs::File {
    use std::os::fd::AsRawFd;
    let path = std::env::temp_dir().join("kube-prober-load-watcher-2020.lock");
    let lock = std::fs::File::create(&path).expect("creating the :2020 lock file");
    // SAFETY: flock on a descriptor this function owns; blocks while another test holds it.
    let rc = unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) };
    assert_eq!(rc, 0, "flock {}", path.display());
    lock
}

/// Set in the copy of a test that [`run_in_own_network`] starts.
const OWN_NETWORK: &str = "KUBE_PROBER_TEST_OWN_NETWORK";

/// Runs the calling test `test` (its full name) again, alone, in a network namespace of its own
/// (`unshare --net`; with `--user --map-root-user` when not root) whose loopback device also
/// answers for every address of `local` (e.g. pod IPs in 10.244.0.0/16), so nothing the test
/// sends can leave the namespace. Returns true in that copy, which runs the test's body; false
/// in the caller once the copy has passed (its output is printed), and panics if it failed.
pub fn run_in_own_network(test: &str, local: &str) -> bool {
    if std::env::var_os(OWN_NETWORK).is_some() {
        for args in [
            &["link", "set", "lo", "up"][..],
            &[
                "route", "add", "local", local, "dev", "lo", "table", "local",
            ],
        ] {
            let st = Command::new("ip")
                .args(args)
                .status()
                .expect("running ip (iproute2)");
            assert!(st.success(), "ip {}: {st}", args.join(" "));
        }
        return true;
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut cmd = Command::new("unshare");
    // SAFETY: geteuid only reads this process's effective user id.
    if unsafe { libc::geteuid() } != 0 {
        cmd.args(["--user", "--map-root-user"]);
    }
    cmd.arg("--net")
        .arg("--")
        .arg(exe)
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(OWN_NETWORK, "1");
    let log = std::env::temp_dir().join(format!("kube-prober-netns-{}.log", std::process::id()));
    let mut child = spawn_owned(cmd, &log);
    let status = child
        .wait()
        .expect("waiting for the test in its own network");
    let out = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    eprintln!("{out}");
    assert!(
        status.success(),
        "{test} in its own network namespace: {status}"
    );
    false
}
