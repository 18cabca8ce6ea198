//! Rendering in proportion to change: a tick without change writes nothing again, one changed
//! node writes one block, and the gzip forms of `/metrics` and `/watcher` are made once per
//! body (issue 12, item 4), over real HTTP on 127.0.0.1.

use std::io::Read;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use kube_prober::hub::{Provider, RunOutcome, Store};
use kube_prober::model::{NodeCapacity, Resource, UsageSample};
use kube_prober::outputs::body::Body;
use kube_prober::outputs::published::{Published, Renderers};
use kube_prober::serve::server::{self, AppState};
use kube_prober::watcher::{Client, WatcherMetrics};
use tokio::sync::watch;

const T0: u64 = 1_700_000_000;

fn at(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
}

fn sample(node: &str, t: u64, cpu: f64) -> UsageSample {
    UsageSample {
        node: node.into(),
        at: at(t),
        values: vec![(Resource::Cpu, cpu), (Resource::Memory, 0.5)],
    }
}

/// `n` nodes with 15 minutes of samples, as the host or metrics-server source records them.
fn store(n: usize) -> Store {
    let s = Store::new();
    s.source().register_source("host");
    for i in 0..n {
        let node = format!("node-{i:03}");
        for k in 0..15 {
            s.node()
                .record_node_usage("host", sample(&node, T0 + k * 60, 0.1 + k as f64 / 100.0));
        }
        s.node().record_node_capacity(
            &node,
            NodeCapacity {
                cpu_cores: 4.0,
                memory_bytes: 8e9,
            },
        );
    }
    s.source().record_source_run(
        "host",
        at(T0 + 900),
        Duration::from_millis(3),
        RunOutcome::Ok,
    );
    s
}

async fn serve(published: Arc<Published>) -> (String, tokio::task::JoinHandle<()>) {
    let (tx, rx) = watch::channel(published);
    let state = AppState {
        published: rx,
        stale_after: Duration::from_secs(3600 * 24 * 365 * 100),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let _tx = tx;
        axum::serve(listener, server::router(state)).await.unwrap();
    });
    (format!("http://{addr}"), task)
}

fn gunzip(b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(b)
        .read_to_end(&mut out)
        .unwrap();
    out
}

#[test]
fn a_tick_without_change_renders_nothing_and_one_node_renders_its_own() {
    let s = store(300);
    let renderers = Arc::new(Renderers::default());
    let tick = |t: u64| {
        Published::render_next(
            &renderers,
            Arc::new(s.snapshot(at(t))),
            "host",
            Default::default(),
        )
    };
    let first = tick(T0 + 901);
    let (m0, w0) = (renderers.text_stats(), renderers.watcher_entries_rendered());
    assert_eq!(w0, 300);
    assert_eq!(m0.keys, 2 * 300, "usage and capacity of every node");

    // Nothing recorded: nothing is written again (but the tick's own counters and the ages
    // of the newest samples, which move with the clock).
    let second = tick(T0 + 911);
    let (m1, w1) = (renderers.text_stats(), renderers.watcher_entries_rendered());
    assert_eq!(
        (m1.blocks, m1.keys, m1.steps, w1),
        (m0.blocks, m0.keys, m0.steps + 1, w0)
    );
    let text =
        |p: &Published| -> Vec<u8> { p.metrics_text.clone().into_plain().flatten().collect() };
    let fresh = Published::render(second.snapshot.clone(), "host");
    assert_eq!(text(&second), text(&fresh));
    assert_eq!(second.watcher, fresh.watcher);
    assert_ne!(text(&first), text(&second), "the tick counter moved");
    // Not a node visited: every part kept whole by pointer, the /watcher entries shared (and
    // so compressed once for both bodies), only its head (the timestamp) new.
    assert_eq!(m1.parts_kept - m0.parts_kept, 6, "{m1:?}");
    let (w_first, w_second) = (
        first.watcher.as_ref().unwrap(),
        second.watcher.as_ref().unwrap(),
    );
    assert!(w_second.shares_entries_with(w_first));
    assert_ne!(w_first.all(), w_second.all(), "the timestamp moved");

    // A source reporting the same sample again changes nothing either.
    s.node()
        .record_node_usage("host", sample("node-007", T0 + 14 * 60, 0.1 + 14.0 / 100.0));
    tick(T0 + 921);
    let (m2, w2) = (renderers.text_stats(), renderers.watcher_entries_rendered());
    assert_eq!((m2.blocks, m2.keys, w2), (m1.blocks, m1.keys, w1));

    // One node gets a new sample: its own /watcher block of entries and its usage block only.
    s.node()
        .record_node_usage("host", sample("node-007", T0 + 15 * 60, 0.9));
    let changed = tick(T0 + 931);
    let (m3, w3) = (renderers.text_stats(), renderers.watcher_entries_rendered());
    let (shared, blocks) = changed
        .watcher
        .as_ref()
        .unwrap()
        .blocks_shared_with(w_second);
    assert_eq!((shared, blocks), (blocks - 1, blocks), "one block written");
    assert!(blocks > 1 && (1..300).contains(&(w3 - w2)), "{w3} - {w2}");
    // The usage part is walked (one block written); the capacity part reads the nodes too;
    // the estimates (none here) and the three parts of the cluster state (none) are kept.
    assert_eq!(m3.parts_kept - m2.parts_kept, 4, "{m3:?}");
    assert!(
        !changed
            .watcher
            .as_ref()
            .unwrap()
            .shares_entries_with(w_second)
    );
    assert_eq!(m3.blocks - m2.blocks, 1, "{m3:?}");
    assert!(m3.keys - m2.keys < 300, "one block, not every node");
    let fresh = Published::render(changed.snapshot.clone(), "host");
    assert_eq!(text(&changed), text(&fresh));
    assert_eq!(changed.watcher, fresh.watcher);

    // A pod bound: the node map stays the same `Arc`, so neither the usage part nor a
    // /watcher block is visited; the estimates' part writes its one block of one node, and
    // /watcher its small tail.
    s.node().record_binding(kube_prober::model::Binding {
        pod: "default/web-1".into(),
        node: "node-042".into(),
        bound_at: at(T0 + 935),
        shows_from: at(T0 + 1000),
        cpu_cores: 0.5,
        memory_bytes: 1e9,
    });
    let bound = tick(T0 + 941);
    let (m4, w4) = (renderers.text_stats(), renderers.watcher_entries_rendered());
    assert!(Arc::ptr_eq(&bound.snapshot.nodes, &changed.snapshot.nodes));
    assert_eq!((m4.blocks - m3.blocks, m4.keys - m3.keys), (1, 1), "{m4:?}");
    assert_eq!(w4, w3, "no /watcher entry written");
    let w_bound = bound.watcher.as_ref().unwrap();
    assert!(w_bound.shares_entries_with(changed.watcher.as_ref().unwrap()));
    let decoded: WatcherMetrics = serde_json::from_slice(&w_bound.all()).unwrap();
    let b = &decoded.data.bound_pods["node-042"];
    assert_eq!((b.pods, b.cpu_cores, b.cpu), (1, 0.5, Some(12.5)));
    let body = String::from_utf8(text(&bound)).unwrap();
    assert!(body.contains("kube_prober_node_bound_pods{node=\"node-042\"} 1\n"));
    let fresh = Published::render(bound.snapshot.clone(), "host");
    assert_eq!(text(&bound), text(&fresh));
    assert_eq!(bound.watcher, fresh.watcher);
}

#[tokio::test]
async fn watcher_is_gzipped_once_per_body_for_clients_that_accept_it() {
    let s = store(50);
    let published = Arc::new(Published::render(
        Arc::new(s.snapshot(at(T0 + 901))),
        "host",
    ));
    let (base, _task) = serve(published.clone()).await;
    let http = reqwest::Client::builder()
        .no_proxy()
        .no_gzip()
        .build()
        .unwrap();
    let url = format!("{base}/watcher");

    // Go's net/http client asks for gzip and decompresses transparently (as Trimaran does).
    let mut bodies = Vec::new();
    for _ in 0..3 {
        let r = http
            .get(&url)
            .header("accept-encoding", "gzip")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["content-encoding"], "gzip");
        assert_eq!(r.headers()["vary"], "Accept-Encoding");
        assert_eq!(r.headers()["content-type"], "application/json");
        bodies.push(gunzip(&r.bytes().await.unwrap()));
    }
    let w = published.watcher.as_ref().unwrap();
    assert_eq!(w.gzip_count(), 1, "compressed once for three requests");
    assert!(bodies.iter().all(|b| b == &bodies[0]));
    assert_eq!(bodies[0], w.all().to_vec());

    // The load-watcher client (no gzip) decodes the same JSON.
    let client = Client::new(&base, Duration::from_secs(5)).unwrap();
    let plain = client.get_latest_watcher_metrics().await.unwrap();
    let unzipped: WatcherMetrics = serde_json::from_slice(&bodies[0]).unwrap();
    assert_eq!(plain, unzipped);
    assert_eq!(plain.data.node_metrics_map.len(), 50);

    // gzip refused with q=0, or not offered: identity.
    for ae in ["gzip;q=0", "identity", "br"] {
        let r = http
            .get(&url)
            .header("accept-encoding", ae)
            .send()
            .await
            .unwrap();
        assert!(r.headers().get("content-encoding").is_none(), "{ae}");
        assert_eq!(r.headers()["vary"], "Accept-Encoding");
        assert_eq!(r.bytes().await.unwrap(), w.all(), "{ae}");
    }
    assert_eq!(w.gzip_count(), 1);

    // ?host= answers as before.
    let one = client.get_host_metrics("node-003").await.unwrap();
    assert_eq!(
        one.data.node_metrics_map.keys().collect::<Vec<_>>(),
        ["node-003"]
    );
    assert_eq!(
        one.data.node_metrics_map["node-003"],
        plain.data.node_metrics_map["node-003"]
    );
    assert_eq!(
        (one.timestamp, &one.window),
        (plain.timestamp, &plain.window)
    );
    let r = http
        .get(format!("{url}?host=nope"))
        .header("accept-encoding", "gzip")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
}

#[tokio::test]
async fn metrics_gzip_is_made_once_per_chunk_and_decodes_to_the_text() {
    let s = store(200);
    let published = Arc::new(Published::render(
        Arc::new(s.snapshot(at(T0 + 901))),
        "host",
    ));
    let (base, _task) = serve(published.clone()).await;
    let http = reqwest::Client::builder()
        .no_proxy()
        .no_gzip()
        .build()
        .unwrap();
    let url = format!("{base}/metrics");
    let get = |gzip: bool| {
        let mut req = http.get(&url);
        if gzip {
            req = req.header("accept-encoding", "gzip");
        }
        async move {
            let r = req.send().await.unwrap();
            let enc = r.headers().get("content-encoding").cloned();
            let b = r.bytes().await.unwrap();
            let text = match enc {
                Some(e) if e == "gzip" => gunzip(&b),
                _ => b.to_vec(),
            };
            // The snapshot age line changes from scrape to scrape.
            String::from_utf8(text)
                .unwrap()
                .lines()
                .filter(|l| !l.starts_with("kube_prober_snapshot_age_seconds "))
                .collect::<Vec<_>>()
                .join("\n")
        }
    };
    let plain = get(false).await;
    assert!(!published.metrics_text.is_deflated());
    let zipped = get(true).await;
    assert_eq!(zipped, plain);
    assert!(published.metrics_text.is_deflated());
    // The compressed pieces are the chunks' own, made once and kept: the same bytes (by
    // address) after another gzip scrape, and the answer is the gzip header followed by them,
    // in order (small ones are copied into frames of ~128 KB, so addresses in the answer are
    // not theirs). (Not the process-wide counter: other tests compress in parallel.)
    let made = |b: &Body| -> Vec<Option<usize>> {
        b.chunks
            .iter()
            .map(|c| c.deflated_form().map(|d| d.as_ptr() as usize))
            .collect()
    };
    let before = made(&published.metrics_text);
    let n = before.len();
    assert!(n > 3, "{n} chunks");
    assert!(before.iter().all(Option::is_some), "{before:?}");
    let answer = http
        .get(&url)
        .header("accept-encoding", "gzip")
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(
        made(&published.metrics_text),
        before,
        "the second gzip scrape compresses no chunk again"
    );
    let forms: Vec<u8> = published
        .metrics_text
        .chunks
        .iter()
        .flat_map(|c| c.deflated_form().unwrap().to_vec())
        .collect();
    assert_eq!(answer[..2], [0x1f, 0x8b]);
    assert!(
        answer[10..].starts_with(&forms),
        "the answer carries the chunks' own forms"
    );
    let text = String::from_utf8(gunzip(&answer)).unwrap();
    let text: Vec<&str> = text
        .lines()
        .filter(|l| !l.starts_with("kube_prober_snapshot_age_seconds "))
        .collect();
    assert_eq!(text.join("\n"), plain);
}
