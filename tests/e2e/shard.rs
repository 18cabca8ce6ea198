//! Sharding of the cluster role and the metric allow/denylist, with the binary against the
//! stand-in API server over real HTTP: the union of three shards' `/metrics` is one unsharded
//! instance's (self-metrics aside) with no series twice, a restarted shard comes back with the
//! same series, every replica serves the whole `/watcher`, the StatefulSet mode re-shards in
//! place when replicas change, and the denylist/allowlist remove families.

use support::apiserver;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube_prober::outputs::families::{self, Family};
use kube_prober::outputs::select;
use support::{Prober, get, run_binary, wait_ready};

/// The family a sample belongs to (longest name that is the sample's name or its prefix + `_`).
fn family_of(sample: &str) -> Option<&'static Family> {
    families::ALL
        .iter()
        .chain(families::SERVER)
        .filter(|f| sample == f.name || sample.starts_with(&format!("{}_", f.name)))
        .max_by_key(|f| f.name.len())
}

/// Series of a text exposition: `name{labels}` -> value.
fn parse(body: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for line in body
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (key, value) = line.rsplit_once(' ').expect("a sample line");
        assert!(
            out.insert(key.to_string(), value.to_string()).is_none(),
            "series twice in one body: {key}"
        );
    }
    out
}

fn sample_name(key: &str) -> &str {
    key.split(['{', ' ']).next().unwrap_or_default()
}

/// Families whose values depend on when an instance fetched (usage windows, sample counts,
/// timestamps): compared by series, not by value.
fn timing_dependent(f: &Family) -> bool {
    f.name.contains("utilization")
        || f.name.contains("_usage_")
        || f.name.contains("bytes_per_second")
}

/// The series a shard must share with the unsharded instance: everything but the families every
/// replica emits for itself and the probes (their runs depend on timing; shard 0 only).
fn shared(series: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    series
        .iter()
        .filter_map(|(k, v)| {
            let f = family_of(sample_name(k))?;
            if select::every_shard_emits(f) || f.name.starts_with("kube_prober_probe_") {
                return None;
            }
            let v = if timing_dependent(f) { "*" } else { v.as_str() };
            Some((k.clone(), v.to_string()))
        })
        .collect()
}

/// Equal values; sums of pod requests may differ in the last bits, since the per-node sums add
/// pods in the order they arrived (see the report on summation order).
fn same(got: Option<&String>, want: &str) -> bool {
    let Some(got) = got else { return false };
    match (got.parse::<f64>(), want.parse::<f64>()) {
        (Ok(a), Ok(b)) => a == b || (a - b).abs() <= 1e-9 * a.abs().max(b.abs()),
        _ => got == want,
    }
}

fn node_label(key: &str) -> Option<&str> {
    let rest = key.split("node=\"").nth(1)?;
    rest.split('"').next()
}

async fn metrics(p: &Prober) -> BTreeMap<String, String> {
    let (code, body) = get(&p.url("/metrics")).await;
    assert_eq!(code, 200);
    parse(&body)
}

/// Waits (bounded) until `f` holds for the prober's `/metrics`, then answers them.
async fn metrics_until(
    p: &Prober,
    what: &str,
    f: impl Fn(&BTreeMap<String, String>) -> bool,
) -> BTreeMap<String, String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let m = metrics(p).await;
        if f(&m) {
            return m;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

struct Cluster {
    api: apiserver::ApiServer,
    _dir: tempfile::TempDir,
    kubeconfig: String,
}

async fn cluster(nodes: usize) -> Cluster {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let api = apiserver::start().await;
    api.generate(nodes, 6);
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    api.write_kubeconfig(&kc).unwrap();
    Cluster {
        api,
        kubeconfig: kc.to_str().unwrap().to_string(),
        _dir: dir,
    }
}

impl Cluster {
    fn start(&self, extra: &[&str], env: &[(&str, &str)]) -> Prober {
        let mut args = vec![
            "--role",
            "cluster",
            "--cluster-name",
            "c1",
            "--tick-interval",
            "1s",
            "--disable-probes",
            "cluster_dns,metrics_server",
        ];
        args.extend(extra);
        let mut e = vec![("KUBECONFIG", self.kubeconfig.as_str())];
        e.extend(env);
        Prober::start_with_env(&args, &e)
    }
}

/// Every node has its usage series (the metrics server fetch went through) and its facts.
fn complete(m: &BTreeMap<String, String>, nodes: &BTreeSet<String>, family: &str) -> bool {
    let seen: BTreeSet<&str> = m
        .keys()
        .filter(|k| sample_name(k) == family)
        .filter_map(|k| node_label(k))
        .collect();
    nodes.iter().all(|n| seen.contains(n.as_str()))
}

const USAGE: &str = "kube_prober_node_cpu_utilization_ratio";
const AVAILABLE: &str = "kube_prober_node_available";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_shards_add_up_to_one_instance_and_a_restart_loses_nothing() {
    let c = cluster(12).await;
    let all_nodes: BTreeSet<String> = c
        .api
        .objects::<k8s_openapi::api::core::v1::Node>()
        .into_iter()
        .map(|n| n.metadata.name.unwrap())
        .collect();
    assert_eq!(all_nodes.len(), 12);
    let whole = c.start(&[], &[]);
    let shards: Vec<Prober> = (0..3)
        .map(|i| c.start(&["--shard", &i.to_string(), "--total-shards", "3"], &[]))
        .collect();
    wait_ready(&whole).await;
    for s in &shards {
        wait_ready(s).await;
    }
    let owned = |i: u32| -> BTreeSet<String> {
        all_nodes
            .iter()
            .filter(|n| select::shard_of(n, 3) == i)
            .cloned()
            .collect()
    };
    let reference = metrics_until(&whole, "every node's usage", |m| {
        complete(m, &all_nodes, USAGE) && complete(m, &all_nodes, AVAILABLE)
    })
    .await;
    let mut bodies = Vec::new();
    for (i, s) in shards.iter().enumerate() {
        let mine = owned(i as u32);
        assert!(!mine.is_empty(), "12 nodes leave no shard of 3 empty");
        bodies.push(
            metrics_until(s, "the shard's nodes' usage", |m| {
                complete(m, &mine, USAGE) && complete(m, &mine, AVAILABLE)
            })
            .await,
        );
    }

    // The union is the unsharded body, and no series comes from two shards.
    let mut union = BTreeMap::new();
    for (i, b) in bodies.iter().enumerate() {
        assert!(
            b.contains_key(&format!(
                "kube_prober_shard_info{{shard=\"{i}\",total=\"3\"}}"
            )),
            "shard {i} names itself"
        );
        for (k, v) in shared(b) {
            if let Some(node) = node_label(&k).filter(|n| !n.is_empty()) {
                assert_eq!(select::shard_of(node, 3), i as u32, "{k} on shard {i}");
            }
            assert!(union.insert(k.clone(), v).is_none(), "{k} on two shards");
        }
        // Probes and cluster-level counts: shard 0 only.
        if i > 0 {
            assert!(
                !b.keys().any(|k| k.starts_with("kube_prober_probe_")
                    || k.starts_with("kube_prober_cluster_nodes")),
                "shard {i} emits cluster-level series"
            );
        }
    }
    let want = shared(&reference);
    let missing: Vec<_> = want
        .keys()
        .filter(|k| !union.contains_key(*k))
        .take(5)
        .collect();
    let extra: Vec<_> = union
        .keys()
        .filter(|k| !want.contains_key(*k))
        .take(5)
        .collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "missing {missing:?}, extra {extra:?}"
    );
    let differ: Vec<_> = want
        .iter()
        .filter(|(k, v)| !same(union.get(*k), v))
        .map(|(k, v)| format!("{k}: unsharded {v}, shards {:?}", union.get(k)))
        .take(5)
        .collect();
    assert!(differ.is_empty(), "values differ: {differ:#?}");
    assert!(!reference.contains_key("kube_prober_shard_info"));

    // Every replica serves the whole /watcher: the same hosts with the same metrics.
    let shape = |body: &str| -> BTreeMap<String, usize> {
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        v["data"]["NodeMetricsMap"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(host, m)| (host.clone(), m["metrics"].as_array().map_or(0, Vec::len)))
            .collect()
    };
    let (code, w0) = get(&whole.url("/watcher")).await;
    assert_eq!(code, 200);
    let want = shape(&w0);
    assert_eq!(want.keys().cloned().collect::<BTreeSet<_>>(), all_nodes);
    for s in &shards {
        let (code, w) = get(&s.url("/watcher")).await;
        assert_eq!(code, 200);
        assert_eq!(shape(&w), want);
    }

    // Restart shard 1: the same series come back.
    let before = shared(&bodies[1]);
    let mut shards = shards;
    let old = shards.remove(1);
    assert_eq!(old.terminate(), 0);
    let again = c.start(&["--shard", "1", "--total-shards", "3"], &[]);
    wait_ready(&again).await;
    let mine = owned(1);
    let after = metrics_until(&again, "the restarted shard's series", |m| {
        complete(m, &mine, USAGE) && complete(m, &mine, AVAILABLE)
    })
    .await;
    let after = shared(&after);
    assert_eq!(
        after.keys().collect::<Vec<_>>(),
        before.keys().collect::<Vec<_>>(),
        "a restarted shard emits the series it emitted before"
    );
    for (k, v) in &before {
        assert!(
            same(after.get(k), v),
            "{k}: before {v}, after {:?}",
            after.get(k)
        );
    }
}

fn statefulset(replicas: i32) -> StatefulSet {
    StatefulSet {
        metadata: ObjectMeta {
            name: Some("kp".into()),
            namespace: Some("monitoring".into()),
            ..Default::default()
        },
        spec: StatefulSetSpec {
            replicas: Some(replicas),
            service_name: Some("kp".into()),
            ..Default::default()
        },
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statefulset_shards_follow_replica_changes_in_place() {
    let c = cluster(9).await;
    let nodes: BTreeSet<String> = c
        .api
        .objects::<k8s_openapi::api::core::v1::Node>()
        .into_iter()
        .map(|n| n.metadata.name.unwrap())
        .collect();
    c.api.upsert(&statefulset(2));
    let p = c.start(
        &["--shard-from-statefulset"],
        &[("POD_NAME", "kp-1"), ("POD_NAMESPACE", "monitoring")],
    );
    wait_ready(&p).await;
    let owned = |total: u32| -> BTreeSet<String> {
        nodes
            .iter()
            .filter(|n| select::shard_of(n, total) == 1)
            .cloned()
            .collect()
    };
    let node_set = |m: &BTreeMap<String, String>| -> BTreeSet<String> {
        m.keys()
            .filter(|k| sample_name(k) == AVAILABLE)
            .filter_map(|k| node_label(k).map(str::to_string))
            .collect()
    };
    let m = metrics_until(&p, "shard 1 of 2", |m| {
        m.contains_key("kube_prober_shard_info{shard=\"1\",total=\"2\"}") && node_set(m) == owned(2)
    })
    .await;
    assert!(!m.keys().any(|k| k.starts_with("kube_prober_cluster_nodes")));
    // Scale to 3: the same process re-shards.
    c.api.upsert(&statefulset(3));
    metrics_until(&p, "shard 1 of 3", |m| {
        m.contains_key("kube_prober_shard_info{shard=\"1\",total=\"3\"}") && node_set(m) == owned(3)
    })
    .await;
    assert_eq!(p.terminate(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metric_lists_remove_families_and_bad_lists_exit_2() {
    let c = cluster(3).await;
    let deny = c.start(
        &[
            "--metric-denylist",
            "kube_prober_node_condition,kube_prober_.*_utilization_ratio",
        ],
        &[],
    );
    let allow = c.start(&["--metric-allowlist", "kube_prober_node_available"], &[]);
    wait_ready(&deny).await;
    wait_ready(&allow).await;
    let m = metrics_until(&deny, "node facts", |m| {
        m.keys().any(|k| sample_name(k) == AVAILABLE)
    })
    .await;
    assert!(
        !m.keys().any(|k| {
            let s = sample_name(k);
            s == "kube_prober_node_condition" || s.ends_with("_utilization_ratio")
        }),
        "denied families are gone"
    );
    assert!(
        m.keys()
            .any(|k| sample_name(k) == "kube_prober_cluster_node_conditions")
    );
    let m = metrics_until(&allow, "node facts", |m| {
        m.keys().any(|k| sample_name(k) == AVAILABLE)
    })
    .await;
    let families: BTreeSet<&str> = m.keys().map(|k| sample_name(k)).collect();
    assert_eq!(families, BTreeSet::from([AVAILABLE]));

    for (args, words) in [
        (
            vec!["--metric-allowlist", "kube_prober_(x"],
            "regular expression",
        ),
        (
            vec!["--metric-allowlist", "a", "--metric-denylist", "b"],
            "exclusive",
        ),
        (vec!["--shard", "3", "--total-shards", "3"], "--shard"),
        (
            vec![
                "--role",
                "host",
                "--listen",
                "127.0.0.1:0",
                "--shard",
                "0",
                "--total-shards",
                "2",
            ],
            "cluster role",
        ),
    ] {
        let (code, err) = run_binary(&args, &[("KUBE_PROBER_PROCFS", "/proc")]);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(words), "{args:?}: {err}");
    }
}

/// An HTTP target that answers `200 ok` and counts the requests it got.
async fn counting_target() -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/probe", listener.local_addr().unwrap());
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = hits.clone();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let counted = counted.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                if conn.read(&mut buf).await.is_ok_and(|n| n > 0) {
                    counted.fetch_add(1, Ordering::SeqCst);
                    let _ = conn
                        .write_all(
                            b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok",
                        )
                        .await;
                }
            });
        }
    });
    (url, hits)
}

/// Probe series come from shard 0 only, so shards above 0 do not run the probes at all (no
/// requests to their targets), while shard 0 runs them; both still serve their share.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_shard_0_runs_the_probes() {
    use std::sync::atomic::Ordering;
    let c = cluster(3).await;
    let (url1, hits1) = counting_target().await;
    let (url0, hits0) = counting_target().await;
    let common = ["--total-shards", "2", "--probe-interval", "1s"];
    let start = |shard: &str, url: &str| {
        let mut args = common.to_vec();
        args.extend(["--shard", shard, "--probe-urls", url]);
        c.start(&args, &[])
    };
    // Shard 1 first: by the time shard 0 has probed twice, shard 1 has had as long to probe.
    let shard1 = start("1", &url1);
    wait_ready(&shard1).await;
    let shard0 = start("0", &url0);
    wait_ready(&shard0).await;
    metrics_until(&shard0, "shard 0 runs its probes", |m| {
        m.keys().any(|k| {
            k.starts_with("kube_prober_probe_runs_total{") && k.contains("probe=\"http_get\"")
        }) && hits0.load(Ordering::SeqCst) >= 2
    })
    .await;
    assert_eq!(
        hits1.load(Ordering::SeqCst),
        0,
        "shard 1 ran the http_get probe it never emits"
    );
    let m1 = metrics(&shard1).await;
    assert!(m1.contains_key("kube_prober_shard_info{shard=\"1\",total=\"2\"}"));
    assert!(!m1.keys().any(|k| k.starts_with("kube_prober_probe_")));
    assert_eq!(shard1.terminate(), 0);
    assert_eq!(shard0.terminate(), 0);
}

/// Holds the first event the StatefulSet watcher's task logs until released, so that task is
/// still in the middle of its work when shutdown starts. The hold is on the task's own worker
/// thread (`block_in_place`), so the rest of the runtime goes on.
struct HoldShardWatcher {
    held: std::sync::Mutex<Option<std::sync::mpsc::Sender<()>>>,
    release: std::sync::Mutex<Option<std::sync::mpsc::Receiver<()>>>,
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for HoldShardWatcher {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        if event.metadata().target() != "kube_prober::sources::cluster::shard" {
            return;
        }
        let Some(release) = self.release.lock().unwrap().take() else {
            return;
        };
        if let Some(held) = self.held.lock().unwrap().take() {
            let _ = held.send(());
        }
        tokio::task::block_in_place(|| {
            let _ = release.recv();
        });
    }
}

/// Issue #25: shutdown waits for the `--shard-from-statefulset` watcher like every other watch
/// task; `run_until` does not return while that task is still running.
#[test]
fn shutdown_waits_for_the_statefulset_watcher() {
    use clap::Parser;
    use tracing_subscriber::layer::SubscriberExt;
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let (release_tx, release_rx) = std::sync::mpsc::channel();
    let hold = tracing::Dispatch::new(tracing_subscriber::registry().with(HoldShardWatcher {
        held: std::sync::Mutex::new(Some(held_tx)),
        release: std::sync::Mutex::new(Some(release_rx)),
    }));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(3)
        .enable_all()
        .on_thread_start(move || {
            // This runtime's threads only: other tests in this binary keep their own logging.
            std::mem::forget(tracing::dispatcher::set_default(&hold));
        })
        .build()
        .unwrap();
    rt.block_on(async move {
        let c = cluster(3).await;
        c.api.upsert(&statefulset(2));
        let cli = kube_prober::config::cli::Cli::try_parse_from([
            "kube-prober",
            "--role",
            "cluster",
            "--cluster-name",
            "c1",
            "--listen",
            "127.0.0.1:0",
            "--kubeconfig",
            &c.kubeconfig,
            "--disable-probes",
            "cluster_dns,metrics_server",
            "--shard-from-statefulset",
            "--pod-name",
            "kp-1",
            "--leader-elect-namespace",
            "monitoring",
        ])
        .unwrap();
        let cfg = kube_prober::config::Config::load(cli).unwrap();
        let cancel = tokio_util::sync::CancellationToken::new();
        let mut run = tokio::spawn(kube_prober::app::run_until(cfg, cancel.clone()));
        tokio::task::spawn_blocking(move || held_rx.recv_timeout(Duration::from_secs(60)))
            .await
            .unwrap()
            .expect("the StatefulSet watcher logged its shard");
        cancel.cancel();
        // Every other task ends at once on `cancel`; only the held watcher can keep run_until.
        let early = tokio::time::timeout(Duration::from_secs(3), &mut run).await;
        release_tx.send(()).unwrap();
        assert!(
            early.is_err(),
            "run_until returned while the StatefulSet watcher was still running: {early:?}"
        );
        tokio::time::timeout(Duration::from_secs(30), run)
            .await
            .expect("run_until returns once the watcher is released")
            .unwrap()
            .unwrap();
    });
}
