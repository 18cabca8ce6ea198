//! The stand-in API server itself, through kube's real client, watcher and reflector over HTTP on
//! 127.0.0.1: pagination, list/watch convergence, watch resumption, 410 relists, bookmarks,
//! selectors, Leases, faults and bulk generation.

use support::apiserver;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use apiserver::{ChurnOptions, Fault, Kind, Options, Verb, lease, node, pod};
use futures_util::StreamExt;
use k8s_metrics::v1beta1::NodeMetrics;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams, ResourceExt, VersionMatch};
use kube::runtime::reflector::{self, Store};
use kube::runtime::utils::Backoff;
use kube::runtime::{WatchStreamExt, watcher};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// The longest any single wait in these tests may take: a bound on a hang, not a speed (the
/// waits poll every 10 ms and end as soon as their condition holds). A debug build's watcher
/// pages 3,000 pods in 4–8 s on 2 cores shared with a control plane, so 5 s was too tight.
const WAIT: Duration = Duration::from_secs(30);

async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Retries a failed watcher step after 20 ms (kube's default backoff starts around 800 ms).
struct Quick;

impl Iterator for Quick {
    type Item = Duration;
    fn next(&mut self) -> Option<Duration> {
        Some(Duration::from_millis(20))
    }
}

impl Backoff for Quick {
    fn reset(&mut self) {}
}

/// What the watcher yielded, in order.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Seen {
    Init,
    InitApply(String),
    InitDone,
    Apply(String, String),
    Delete(String, String),
    Error(String),
}

/// A reflector over a real kube watcher, driven by a background task.
struct Reflected<K: kube::Resource<DynamicType = ()> + 'static> {
    store: Store<K>,
    seen: Arc<Mutex<Vec<Seen>>>,
    task: tokio::task::JoinHandle<()>,
}

impl<K: kube::Resource<DynamicType = ()> + 'static> Drop for Reflected<K> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl<K: kube::Resource<DynamicType = ()> + Clone + 'static> Reflected<K> {
    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    fn count(&self, what: &Seen) -> usize {
        self.seen().iter().filter(|s| *s == what).count()
    }

    /// `(namespace, name, resourceVersion)` of the store's objects, sorted.
    fn versions(&self) -> Vec<(String, String, u64)> {
        let mut v: Vec<_> = self
            .store
            .state()
            .iter()
            .map(|o| {
                (
                    o.namespace().unwrap_or_default(),
                    o.name_any(),
                    o.resource_version().unwrap().parse().unwrap(),
                )
            })
            .collect();
        v.sort();
        v
    }

    fn names(&self) -> BTreeSet<String> {
        self.store.state().iter().map(|o| o.name_any()).collect()
    }
}

fn reflect<K>(api: Api<K>, config: watcher::Config) -> Reflected<K>
where
    K: kube::Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let (store, writer) = reflector::store();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let stream = reflector::reflector(writer, watcher(api, config).backoff(Quick));
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            let id = |o: &K| (o.name_any(), o.resource_version().unwrap_or_default());
            let s = match event {
                Ok(watcher::Event::Init) => Seen::Init,
                Ok(watcher::Event::InitApply(o)) => Seen::InitApply(o.name_any()),
                Ok(watcher::Event::InitDone) => Seen::InitDone,
                Ok(watcher::Event::Apply(o)) => {
                    let (n, rv) = id(&o);
                    Seen::Apply(n, rv)
                }
                Ok(watcher::Event::Delete(o)) => {
                    let (n, rv) = id(&o);
                    Seen::Delete(n, rv)
                }
                Err(e) => Seen::Error(e.to_string()),
            };
            log.lock().unwrap().push(s);
        }
    });
    Reflected { store, seen, task }
}

fn api_error<T: Debug>(r: Result<T, kube::Error>) -> (u16, String, String) {
    match r {
        Err(kube::Error::Api(s)) => (s.code, s.reason.clone(), s.message.clone()),
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn names<K: kube::Resource>(items: &[K]) -> Vec<String> {
    items.iter().map(|o| o.name_any()).collect()
}

fn nodes(names: &[&str]) -> Vec<Node> {
    names
        .iter()
        .map(|n| node(n, ("4", "8Gi"), ("3920m", "7Gi")))
        .collect()
}

/// Reads a raw watch stream line by line.
struct Lines {
    resp: reqwest::Response,
    buf: Vec<u8>,
}

impl Lines {
    async fn open(url: &str) -> Lines {
        let resp = reqwest::Client::new().get(url).send().await.unwrap();
        Lines {
            resp,
            buf: Vec::new(),
        }
    }

    /// The next event, or `None` once the server ended the stream.
    async fn next(&mut self) -> Option<Value> {
        loop {
            if let Some(i) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=i).collect();
                return Some(serde_json::from_slice(&line).unwrap());
            }
            let chunk = tokio::time::timeout(WAIT, self.resp.chunk())
                .await
                .expect("a watch event or the end of the stream in time")
                .unwrap()?;
            self.buf.extend_from_slice(&chunk);
        }
    }
}

fn rv_of(event: &Value) -> u64 {
    event["object"]["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn node_list_pages_follow_continue_over_a_consistent_snapshot() {
    let api = apiserver::start().await;
    api.set_nodes(nodes(&["n1", "n2", "n3", "n4", "n5"]));
    let client: Api<Node> = Api::all(api.client());

    let first = client.list(&ListParams::default().limit(2)).await.unwrap();
    assert_eq!(names(&first.items), ["n1", "n2"]);
    let list_rv = first.metadata.resource_version.clone().unwrap();
    assert_eq!(list_rv, api.resource_version().to_string());
    // Changes after the first page do not show in the rest of this list.
    api.delete::<Node>("", "n5");
    api.upsert(&node("n0", ("1", "1Gi"), ("1", "1Gi")));
    api.upsert(&node("n6", ("1", "1Gi"), ("1", "1Gi")));

    let mut all = names(&first.items);
    let mut pages = 1;
    let mut token = first.metadata.continue_.clone();
    while let Some(t) = token.filter(|t| !t.is_empty()) {
        let page = client
            .list(&ListParams::default().limit(2).continue_token(&t))
            .await
            .unwrap();
        assert!(page.items.len() <= 2);
        assert_eq!(page.metadata.resource_version.as_deref(), Some(&*list_rv));
        for n in &page.items {
            let rv: u64 = n.resource_version().unwrap().parse().unwrap();
            assert!(rv <= list_rv.parse().unwrap(), "{} at {rv}", n.name_any());
        }
        all.extend(names(&page.items));
        token = page.metadata.continue_;
        pages += 1;
    }
    assert_eq!(pages, 3);
    assert_eq!(all, ["n1", "n2", "n3", "n4", "n5"]);

    // A new list sees the changes; an expired continue token is 410 Gone.
    let now = client.list(&ListParams::default()).await.unwrap();
    assert_eq!(names(&now.items), ["n0", "n1", "n2", "n3", "n4", "n6"]);
    let page = client.list(&ListParams::default().limit(2)).await.unwrap();
    api.compact();
    let token = page.metadata.continue_.unwrap();
    let (code, reason, _) = api_error(
        client
            .list(&ListParams::default().limit(2).continue_token(&token))
            .await,
    );
    assert_eq!((code, reason.as_str()), (410, "Expired"));
}

#[tokio::test]
async fn list_resource_version_semantics() {
    let api = apiserver::start().await;
    api.set_nodes(nodes(&["n1", "n2"]));
    let before = api.resource_version().to_string();
    api.delete::<Node>("", "n2");
    let client: Api<Node> = Api::all(api.client());

    // Exact: the state at that resource version, rebuilt from the history.
    let exact = ListParams::default()
        .at(&before)
        .matching(VersionMatch::Exact);
    let then = client.list(&exact).await.unwrap();
    assert_eq!(names(&then.items), ["n1", "n2"]);
    assert_eq!(then.metadata.resource_version.as_deref(), Some(&*before));
    // NotOlderThan and "0" (any): the current state.
    let not_older = ListParams::default()
        .at(&before)
        .matching(VersionMatch::NotOlderThan);
    let now = client.list(&not_older).await.unwrap();
    assert_eq!(names(&now.items), ["n1"]);
    assert_eq!(
        names(
            &client
                .list(&ListParams::default().match_any())
                .await
                .unwrap()
                .items
        ),
        ["n1"]
    );
    // From the future: 504 Timeout (ResourceVersionTooLarge); after compaction: 410 Expired.
    let future = ListParams::default()
        .at("999999")
        .matching(VersionMatch::Exact);
    assert_eq!(api_error(client.list(&future).await).0, 504);
    api.compact();
    let (code, reason, message) = api_error(client.list(&exact).await);
    assert_eq!((code, reason.as_str()), (410, "Expired"), "{message}");
    assert!(message.starts_with("too old resource version"), "{message}");
    assert_eq!(names(&client.list(&not_older).await.unwrap().items), ["n1"]);
}

#[tokio::test]
async fn watcher_and_reflector_converge_on_adds_modifies_and_deletes() {
    let api = apiserver::start().await;
    api.upsert(&pod("default", "a", "n1"));
    api.upsert(&pod("kube-system", "b", "n2"));
    let r = reflect(Api::<Pod>::all(api.client()), watcher::Config::default());
    eventually("the initial list", || r.count(&Seen::InitDone) == 1).await;
    assert_eq!(r.versions(), api.versions(Kind::Pods));

    api.upsert(&pod("default", "c", "n1"));
    let mut b: Pod = api.get("kube-system", "b").unwrap();
    b.labels_mut().insert("tier".into(), "x".into());
    api.upsert(&b);
    assert!(api.delete::<Pod>("default", "a"));
    eventually("the changes", || r.versions() == api.versions(Kind::Pods)).await;
    let b = r
        .store
        .state()
        .into_iter()
        .find(|p| p.name_any() == "b")
        .unwrap();
    assert_eq!(b.labels()["tier"], "x");
    let seen = r.seen();
    assert_eq!(seen.iter().filter(|s| **s == Seen::Init).count(), 1);
    assert!(
        seen.iter()
            .any(|s| matches!(s, Seen::Delete(n, _) if n == "a"))
    );
    assert!(
        !seen.iter().any(|s| matches!(s, Seen::Error(_))),
        "{seen:?}"
    );

    // kube's streaming-list mode (sendInitialEvents) converges as well.
    let streaming = reflect(
        Api::<Pod>::all(api.client()),
        watcher::Config::default().streaming_lists(),
    );
    eventually("the streaming list", || {
        streaming.count(&Seen::InitDone) == 1
    })
    .await;
    assert_eq!(streaming.versions(), api.versions(Kind::Pods));
    api.upsert(&pod("default", "d", "n2"));
    eventually("a change after the streaming list", || {
        streaming.versions() == api.versions(Kind::Pods)
    })
    .await;
}

#[tokio::test]
async fn a_dropped_watch_resumes_without_gaps_or_duplicates() {
    let api = apiserver::start().await;
    for (name, node) in [("a", "n1"), ("b", "n1"), ("c", "n2")] {
        api.upsert(&pod("default", name, node));
    }
    let r = reflect(Api::<Pod>::all(api.client()), watcher::Config::default());
    eventually("the watch", || {
        r.count(&Seen::InitDone) == 1 && api.open_watches() == 1
    })
    .await;
    api.upsert(&pod("default", "d", "n2"));
    eventually("d", || r.names().contains("d")).await;
    let watches_before = api
        .requests()
        .iter()
        .filter(|q| {
            q.query
                .as_deref()
                .unwrap_or_default()
                .contains("watch=true")
        })
        .count();

    api.drop_watches();
    // Changes while (or just after) the watch is down.
    api.upsert(&pod("default", "e", "n1"));
    let mut c: Pod = api.get("default", "c").unwrap();
    c.labels_mut().insert("v".into(), "2".into());
    api.upsert(&c);
    api.delete::<Pod>("default", "b");
    eventually("the changes after the drop", || {
        r.versions() == api.versions(Kind::Pods)
    })
    .await;
    eventually("the watch to reopen", || api.open_watches() == 1).await;

    let seen = r.seen();
    assert_eq!(
        seen.iter().filter(|s| **s == Seen::Init).count(),
        1,
        "no relist: {seen:?}"
    );
    let applies: Vec<&Seen> = seen
        .iter()
        .filter(|s| matches!(s, Seen::Apply(..) | Seen::Delete(..)))
        .collect();
    let unique: BTreeSet<&&Seen> = applies.iter().collect();
    assert_eq!(applies.len(), unique.len(), "duplicates: {seen:?}");
    // d, e, c modified, b deleted: each once.
    assert_eq!(applies.len(), 4, "{seen:?}");
    let resumed: Vec<_> = api
        .requests()
        .into_iter()
        .filter(|q| {
            q.query
                .as_deref()
                .unwrap_or_default()
                .contains("watch=true")
        })
        .collect();
    assert!(resumed.len() > watches_before, "{resumed:?}");
    assert!(
        resumed
            .last()
            .unwrap()
            .query
            .as_deref()
            .unwrap()
            .contains("resourceVersion="),
        "{resumed:?}"
    );
}

#[tokio::test]
async fn an_expired_resource_version_makes_the_watcher_relist() {
    // No bookmarks in this test's window, so the watcher's resource version stays behind.
    let api = apiserver::start_with(Options {
        bookmark_interval: Duration::from_secs(3600),
        ..Options::default()
    })
    .await;
    for name in ["a", "b", "c"] {
        api.upsert(&pod("default", name, "n1"));
    }
    let r = reflect(Api::<Pod>::all(api.client()), watcher::Config::default());
    eventually("the watch", || {
        r.count(&Seen::InitDone) == 1 && api.open_watches() == 1
    })
    .await;

    api.compact();
    api.drop_watches();
    api.upsert(&pod("default", "d", "n2"));
    api.delete::<Pod>("default", "a");
    let mut b: Pod = api.get("default", "b").unwrap();
    b.labels_mut().insert("v".into(), "2".into());
    api.upsert(&b);

    eventually("a second list", || r.count(&Seen::InitDone) == 2).await;
    eventually("the store to match", || {
        r.versions() == api.versions(Kind::Pods)
    })
    .await;
    let seen = r.seen();
    assert_eq!(seen.iter().filter(|s| **s == Seen::Init).count(), 2);
    assert!(
        seen.iter()
            .any(|s| matches!(s, Seen::Error(e) if e.contains("too old resource version"))),
        "{seen:?}"
    );
    assert_eq!(r.names(), BTreeSet::from(["b", "c", "d"].map(String::from)));
}

#[tokio::test]
async fn raw_watch_replays_history_streams_bookmarks_and_times_out() {
    let api = apiserver::start_with(Options {
        bookmark_interval: Duration::from_millis(100),
        ..Options::default()
    })
    .await;
    let rv0 = api.resource_version();
    api.upsert(&pod("default", "a", "n1"));
    let mut a: Pod = api.get("default", "a").unwrap();
    a.labels_mut().insert("v".into(), "2".into());
    api.upsert(&a);
    api.delete::<Pod>("default", "a");
    api.upsert(&pod("default", "b", "n1"));
    let rv1 = api.resource_version();

    let url = format!(
        "{}/api/v1/pods?watch=true&resourceVersion={rv0}&allowWatchBookmarks=true&timeoutSeconds=1",
        api.url
    );
    let started = Instant::now();
    let mut w = Lines::open(&url).await;
    assert_eq!(w.resp.status(), 200);
    assert_eq!(w.resp.headers()["content-type"], "application/json");
    assert_eq!(w.resp.headers()["transfer-encoding"], "chunked");
    let mut events = Vec::new();
    for _ in 0..4 {
        let e = w.next().await.unwrap();
        assert_eq!(
            (
                e["object"]["kind"].as_str(),
                e["object"]["apiVersion"].as_str()
            ),
            (Some("Pod"), Some("v1"))
        );
        events.push((
            e["type"].as_str().unwrap().to_string(),
            e["object"]["metadata"]["name"]
                .as_str()
                .unwrap()
                .to_string(),
            rv_of(&e),
        ));
    }
    let kinds: Vec<(&str, &str)> = events
        .iter()
        .map(|(t, n, _)| (t.as_str(), n.as_str()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("ADDED", "a"),
            ("MODIFIED", "a"),
            ("DELETED", "a"),
            ("ADDED", "b")
        ]
    );
    assert!(events.windows(2).all(|w| w[0].2 < w[1].2), "{events:?}");
    assert_eq!(events[3].2, rv1);

    // Another kind's write moves the global resource version; the bookmark carries it.
    let rv2 = api.upsert(&node("n1", ("1", "1Gi"), ("1", "1Gi")));
    let bookmark = w.next().await.expect("a bookmark before the timeout");
    assert_eq!(bookmark["type"], "BOOKMARK", "{bookmark}");
    assert_eq!(
        bookmark["object"],
        json!({"kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": rv2.to_string()}})
    );
    // timeoutSeconds=1 ends the stream.
    while let Some(e) = w.next().await {
        assert_eq!(e["type"], "BOOKMARK");
    }
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(5),
        "{took:?}"
    );

    // As the real server: list items without apiVersion/kind, single objects and watch event
    // objects with them.
    let http = reqwest::Client::new();
    let get = |path: String| {
        let http = http.clone();
        async move {
            let body = http.get(path).send().await.unwrap().bytes().await.unwrap();
            serde_json::from_slice::<Value>(&body).unwrap()
        }
    };
    let list = get(format!("{}/api/v1/pods", api.url)).await;
    assert_eq!(
        (list["kind"].as_str(), list["apiVersion"].as_str()),
        (Some("PodList"), Some("v1"))
    );
    assert_eq!(list["items"][0]["metadata"]["name"], "b");
    assert!(list["items"][0].get("kind").is_none(), "{list}");
    assert!(list["items"][0].get("apiVersion").is_none(), "{list}");
    let one = get(format!("{}/api/v1/namespaces/default/pods/b", api.url)).await;
    assert_eq!(
        (one["kind"].as_str(), one["apiVersion"].as_str()),
        (Some("Pod"), Some("v1"))
    );
    assert_eq!(one["spec"], list["items"][0]["spec"]);

    // No resourceVersion: the current state as ADDED first.
    let url = format!("{}/api/v1/pods?watch=1&timeoutSeconds=1", api.url);
    let mut w = Lines::open(&url).await;
    let e = w.next().await.unwrap();
    assert_eq!((e["type"].as_str(), rv_of(&e)), (Some("ADDED"), rv1));
    assert_eq!(e["object"]["metadata"]["name"], "b");
    assert_eq!(w.next().await, None);
}

#[tokio::test]
async fn a_watch_from_a_compacted_resource_version_gets_one_410_error_event() {
    let api = apiserver::start().await;
    let rv0 = api.resource_version();
    api.upsert(&pod("default", "a", "n1"));
    api.compact();
    let url = format!(
        "{}/api/v1/namespaces/default/pods?watch=true&resourceVersion={rv0}",
        api.url
    );
    let mut w = Lines::open(&url).await;
    assert_eq!(w.resp.status(), 200);
    let e = w.next().await.unwrap();
    assert_eq!(e["type"], "ERROR");
    let status = &e["object"];
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["apiVersion"], "v1");
    assert_eq!(status["status"], "Failure");
    assert_eq!(status["code"], 410);
    assert_eq!(status["reason"], "Expired");
    assert_eq!(w.next().await, None, "the stream ends after the error");
    // The resource version of the compaction itself is still good.
    let now = api.resource_version();
    let url = format!(
        "{}/api/v1/pods?watch=true&resourceVersion={now}&timeoutSeconds=1",
        api.url
    );
    let mut w = Lines::open(&url).await;
    assert_eq!(w.next().await, None);
}

#[tokio::test]
async fn field_selectors_filter_lists_and_watches() {
    let api = apiserver::start().await;
    api.set_nodes(nodes(&["n1", "n2", "n3"]));
    api.upsert(&pod("default", "a", "n1"));
    api.upsert(&pod("default", "b", "n2"));
    api.upsert(&pod("other", "c", "n1"));
    api.upsert(&pod("other", "pending", ""));
    let pods: Api<Pod> = Api::all(api.client());
    let list = |fields: &'static str| {
        let pods = pods.clone();
        async move {
            names(
                &pods
                    .list(&ListParams::default().fields(fields))
                    .await
                    .unwrap()
                    .items,
            )
        }
    };
    assert_eq!(list("spec.nodeName=n1").await, ["a", "c"]);
    assert_eq!(list("spec.nodeName==n1").await, ["a", "c"]);
    assert_eq!(list("spec.nodeName!=n1").await, ["b", "pending"]);
    assert_eq!(list("spec.nodeName=").await, ["pending"]);
    assert_eq!(
        list("spec.nodeName=n1,metadata.namespace=other").await,
        ["c"]
    );
    assert_eq!(list("metadata.name=b").await, ["b"]);
    assert_eq!(list("status.phase!=Running").await, ["pending"]);
    let other: Api<Pod> = Api::namespaced(api.client(), "other");
    assert_eq!(
        names(&other.list(&ListParams::default()).await.unwrap().items),
        ["c", "pending"]
    );
    let (code, _, message) = api_error(
        pods.list(&ListParams::default().fields("spec.host=n1"))
            .await,
    );
    assert_eq!(code, 400);
    assert_eq!(message, "field label not supported: spec.host");
    let node_api: Api<Node> = Api::all(api.client());
    let n1 = node_api
        .list(&ListParams::default().fields("metadata.name=n1"))
        .await
        .unwrap();
    assert_eq!(names(&n1.items), ["n1"]);

    // Watches: moving a pod onto n1 is an ADDED, moving one off it a DELETED.
    let on_n1 = reflect(
        Api::<Pod>::all(api.client()),
        watcher::Config::default().fields("spec.nodeName=n1"),
    );
    let n1_only = reflect(
        Api::<Node>::all(api.client()),
        watcher::Config::default().fields("metadata.name=n1"),
    );
    eventually("the filtered lists", || {
        on_n1.count(&Seen::InitDone) == 1 && n1_only.count(&Seen::InitDone) == 1
    })
    .await;
    assert_eq!(on_n1.names(), BTreeSet::from(["a", "c"].map(String::from)));
    assert_eq!(n1_only.names(), BTreeSet::from(["n1".to_string()]));
    api.upsert(&pod("default", "b", "n1"));
    api.upsert(&pod("default", "a", "n2"));
    let mut n2: Node = api.get("", "n2").unwrap();
    n2.labels_mut().insert("x".into(), "y".into());
    api.upsert(&n2);
    let mut n1: Node = api.get("", "n1").unwrap();
    n1.labels_mut().insert("x".into(), "z".into());
    api.upsert(&n1);
    eventually("the moves", || {
        on_n1.names() == BTreeSet::from(["b", "c"].map(String::from))
    })
    .await;
    eventually("n1's change", || {
        n1_only
            .store
            .state()
            .iter()
            .any(|n| n.labels().get("x").map(String::as_str) == Some("z"))
    })
    .await;
    let seen = on_n1.seen();
    assert!(
        seen.iter()
            .any(|s| matches!(s, Seen::Apply(n, _) if n == "b"))
    );
    assert!(
        seen.iter()
            .any(|s| matches!(s, Seen::Delete(n, _) if n == "a"))
    );
    assert_eq!(n1_only.names(), BTreeSet::from(["n1".to_string()]));
    assert!(
        !n1_only
            .seen()
            .iter()
            .any(|s| matches!(s, Seen::Apply(n, _) if n == "n2"))
    );
}

#[tokio::test]
async fn label_selectors_filter_lists() {
    let api = apiserver::start().await;
    let labelled = |name: &str, labels: &[(&str, &str)]| {
        let mut p = pod("default", name, "n1");
        p.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>(),
        );
        p
    };
    api.upsert(&labelled("front", &[("app", "web"), ("tier", "front")]));
    api.upsert(&labelled("back", &[("app", "web"), ("tier", "back")]));
    api.upsert(&labelled("db", &[("app", "db")]));
    api.upsert(&labelled("bare", &[("canary", "")]));
    let pods: Api<Pod> = Api::all(api.client());
    for (selector, want) in [
        ("app=web", &["back", "front"][..]),
        ("app==db", &["db"]),
        ("app!=web", &["bare", "db"]),
        ("app", &["back", "db", "front"]),
        ("!app", &["bare"]),
        ("canary", &["bare"]),
        ("tier in (front, back)", &["back", "front"]),
        ("tier notin (front)", &["back", "bare", "db"]),
        ("app=web,tier=back", &["back"]),
        ("app in (web,db),!tier", &["db"]),
        ("", &["back", "bare", "db", "front"]),
    ] {
        let got = pods
            .list(&ListParams::default().labels(selector))
            .await
            .unwrap();
        assert_eq!(names(&got.items), want, "{selector}");
    }
    let (code, reason, _) = api_error(pods.list(&ListParams::default().labels("app in (")).await);
    assert_eq!((code, reason.as_str()), (400, "BadRequest"));
}

#[tokio::test]
async fn leases_create_conflict_and_update() {
    let api = apiserver::start().await;
    let leases: Api<Lease> = Api::namespaced(api.client(), "kube-system");
    let pp = PostParams::default();
    let created = leases
        .create(&pp, &lease("kube-system", "kube-prober", "pod-a"))
        .await
        .unwrap();
    let rv1: u64 = created.resource_version().unwrap().parse().unwrap();
    assert!(created.uid().is_some());
    assert!(created.metadata.creation_timestamp.is_some());

    let (code, reason, message) = api_error(
        leases
            .create(&pp, &lease("kube-system", "kube-prober", "pod-b"))
            .await,
    );
    assert_eq!((code, reason.as_str()), (409, "AlreadyExists"));
    assert_eq!(
        message,
        "leases.coordination.k8s.io \"kube-prober\" already exists"
    );

    // pod-b takes over with the current version; pod-c's copy is then stale.
    let mut take = leases.get("kube-prober").await.unwrap();
    let stale = take.clone();
    take.spec.as_mut().unwrap().holder_identity = Some("pod-b".into());
    let taken = leases.replace("kube-prober", &pp, &take).await.unwrap();
    let rv2: u64 = taken.resource_version().unwrap().parse().unwrap();
    assert!(rv2 > rv1);
    assert_eq!(taken.uid(), created.uid());
    assert_eq!(
        taken.metadata.creation_timestamp,
        created.metadata.creation_timestamp
    );
    let mut late = stale;
    late.spec.as_mut().unwrap().holder_identity = Some("pod-c".into());
    let (code, reason, message) = api_error(leases.replace("kube-prober", &pp, &late).await);
    assert_eq!((code, reason.as_str()), (409, "Conflict"), "{message}");
    assert!(
        message.contains("the object has been modified"),
        "{message}"
    );

    let mut fresh = leases.get("kube-prober").await.unwrap();
    assert_eq!(
        fresh.spec.as_ref().unwrap().holder_identity.as_deref(),
        Some("pod-b")
    );
    fresh.spec.as_mut().unwrap().holder_identity = Some("pod-c".into());
    let renewed = leases.replace("kube-prober", &pp, &fresh).await.unwrap();
    assert!(renewed.resource_version().unwrap().parse::<u64>().unwrap() > rv2);

    let patched = leases
        .patch(
            "kube-prober",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"leaseTransitions": 2}})),
        )
        .await
        .unwrap();
    let spec = patched.spec.unwrap();
    assert_eq!(spec.lease_transitions, Some(2));
    assert_eq!(spec.holder_identity.as_deref(), Some("pod-c"));

    let (code, _, _) = api_error(leases.get("missing").await);
    assert_eq!(code, 404);
    let mut missing = lease("kube-system", "missing", "pod-a");
    missing.metadata.resource_version = Some("1".into());
    assert_eq!(
        api_error(leases.replace("missing", &pp, &missing).await).0,
        404
    );
    assert_eq!(
        api.get::<Lease>("kube-system", "kube-prober")
            .unwrap()
            .spec
            .unwrap()
            .holder_identity
            .as_deref(),
        Some("pod-c")
    );
}

#[tokio::test]
async fn faults_per_kind_and_verb_latency_and_retry_after() {
    let api = apiserver::start().await;
    api.upsert(&pod("default", "a", "n1"));
    api.set_nodes(nodes(&["n1"]));
    let pods: Api<Pod> = Api::all(api.client());
    let lp = ListParams::default();

    api.fail_verb(
        Kind::Pods,
        Verb::List,
        Fault::internal("etcdserver: request timed out").times(1),
    );
    let (code, reason, message) = api_error(pods.list(&lp).await);
    assert_eq!(
        (code, reason.as_str(), message.as_str()),
        (500, "InternalError", "etcdserver: request timed out")
    );
    assert_eq!(pods.list(&lp).await.unwrap().items.len(), 1);

    // One verb only, until healed.
    api.fail_verb(Kind::Pods, Verb::Get, Fault::unavailable("down"));
    let one: Api<Pod> = Api::namespaced(api.client(), "default");
    assert_eq!(api_error(one.get("a").await).0, 503);
    assert!(pods.list(&lp).await.is_ok());
    api.heal(Kind::Pods);
    assert!(one.get("a").await.is_ok());

    // 429: an error without retries, then success; kube's default retry rides it out.
    api.fail(Kind::Pods, Fault::too_many_requests(1).times(1));
    let (code, reason, _) = api_error(pods.list(&lp).await);
    assert_eq!((code, reason.as_str()), (429, "TooManyRequests"));
    assert!(pods.list(&lp).await.is_ok());
    api.fail(Kind::Pods, Fault::too_many_requests(1).times(1));
    let before = api.hits("/api/v1/pods");
    let retrying: Api<Pod> = Api::all(api.client_with_default_retry());
    assert_eq!(retrying.list(&lp).await.unwrap().items.len(), 1);
    assert_eq!(api.hits("/api/v1/pods") - before, 2);

    // The raw answer carries Retry-After.
    api.fail(Kind::Nodes, Fault::too_many_requests(7).times(1));
    let raw = reqwest::get(format!("{}/api/v1/nodes", api.url))
        .await
        .unwrap();
    assert_eq!(raw.status(), 429);
    assert_eq!(raw.headers()["retry-after"], "7");
    let body: Value = serde_json::from_slice(&raw.bytes().await.unwrap()).unwrap();
    assert_eq!(body["details"]["retryAfterSeconds"], 7);

    // Latency for one kind.
    api.set_kind_latency(Kind::Nodes, Duration::from_millis(200));
    let t = Instant::now();
    Api::<Node>::all(api.client()).list(&lp).await.unwrap();
    assert!(t.elapsed() >= Duration::from_millis(200));
}

#[tokio::test]
async fn every_kind_serves_get_list_and_not_found() {
    let api = apiserver::start().await;
    // 3 nodes x (4 addon DaemonSet pods + 4 others): 7 kube-system Deployment replicas, 5 apps.
    let made = api.generate(3, 8);
    assert_eq!((made.nodes, made.pods, made.daemon_sets), (3, 24, 4));
    let client = api.client();
    let lp = ListParams::default();

    async fn check<K>(api: Api<K>, want: usize)
    where
        K: kube::Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
    {
        let list = api.list(&ListParams::default()).await.unwrap();
        assert_eq!(list.items.len(), want, "{}", K::kind(&()));
        let first = &list.items[0];
        let got = api.get(&first.name_any()).await.unwrap();
        assert_eq!(got.name_any(), first.name_any());
        let (code, reason, message) = api_error(api.get("no-such-object").await);
        assert_eq!((code, reason.as_str()), (404, "NotFound"), "{message}");
    }
    check(Api::<Node>::all(client.clone()), 3).await;
    check(Api::<Pod>::namespaced(client.clone(), "kube-system"), 19).await;
    check(Api::<Pod>::namespaced(client.clone(), "team-000"), 5).await;
    check(
        Api::<DaemonSet>::namespaced(client.clone(), "kube-system"),
        4,
    )
    .await;
    check(
        Api::<Deployment>::namespaced(client.clone(), "kube-system"),
        4,
    )
    .await;
    check(
        Api::<ReplicaSet>::namespaced(client.clone(), "kube-system"),
        4,
    )
    .await;
    check(Api::<NodeMetrics>::all(client.clone()), 3).await;
    assert_eq!(
        Api::<Pod>::all(client.clone())
            .list(&lp)
            .await
            .unwrap()
            .items
            .len(),
        24
    );
    let lease_api: Api<Lease> = Api::all(client.clone());
    assert!(lease_api.list(&lp).await.unwrap().items.is_empty());

    let http = reqwest::Client::new();
    let status = |path: &'static str| {
        let http = http.clone();
        let url = format!("{}{path}", api.url);
        async move { http.get(url).send().await.unwrap().status().as_u16() }
    };
    assert_eq!(
        status("/apis/metrics.k8s.io/v1beta1/nodes?watch=true").await,
        405
    );
    assert_eq!(status("/api/v1/namespaces/default/configmaps").await, 404);
    assert_eq!(status("/api/v1/namespaces/default/nodes").await, 404);
    assert_eq!(status("/apis/apps/v1").await, 200);
    assert_eq!(status("/apis").await, 200);
    assert_eq!(status("/readyz").await, 200);
    let readyz = http
        .get(format!("{}/readyz", api.url))
        .send()
        .await
        .unwrap();
    assert_eq!(readyz.text().await.unwrap(), "ok");
    api.set_healthy(false);
    assert_eq!(status("/readyz").await, 500);
    assert_eq!(status("/livez").await, 500);
}

#[tokio::test]
async fn generated_cluster_is_realistic_and_lists_fast() {
    let api = apiserver::start().await;
    let t = Instant::now();
    let made = api.generate(100, 30);
    let generated = t.elapsed();
    assert_eq!((made.nodes, made.pods), (100, 3_000));
    assert_eq!(api.count(Kind::Pods), 3_000);

    let t = Instant::now();
    let pods = Api::<Pod>::all(api.client())
        .list(&ListParams::default())
        .await
        .unwrap();
    let listed = t.elapsed();
    assert_eq!(pods.items.len(), 3_000);
    let mut per_node: BTreeMap<String, usize> = BTreeMap::new();
    let mut uids = BTreeSet::new();
    let (mut addons, mut restarted) = (0, 0);
    let replica_sets: BTreeMap<String, ReplicaSet> = Api::<ReplicaSet>::all(api.client())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|rs| (rs.uid().unwrap(), rs))
        .collect();
    let daemon_sets: BTreeMap<String, DaemonSet> = Api::<DaemonSet>::all(api.client())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|ds| (ds.uid().unwrap(), ds))
        .collect();
    for p in &pods.items {
        let spec = p.spec.as_ref().unwrap();
        let status = p.status.as_ref().unwrap();
        *per_node.entry(spec.node_name.clone().unwrap()).or_default() += 1;
        assert!(uids.insert(p.uid().unwrap()), "unique uids");
        let owner = &p.owner_references()[0];
        assert_eq!(owner.controller, Some(true));
        match owner.kind.as_str() {
            "ReplicaSet" => assert_eq!(replica_sets[&owner.uid].name_any(), owner.name),
            "DaemonSet" => assert_eq!(daemon_sets[&owner.uid].name_any(), owner.name),
            other => panic!("owner kind {other}"),
        }
        let resources = spec.containers[0].resources.as_ref().unwrap();
        let requests = resources.requests.as_ref().unwrap();
        assert!(requests.contains_key("cpu") && requests.contains_key("memory"));
        assert!(resources.limits.as_ref().unwrap().contains_key("memory"));
        assert_eq!(status.phase.as_deref(), Some("Running"));
        let cs = &status.container_statuses.as_ref().unwrap()[0];
        restarted += usize::from(cs.restart_count > 0);
        if p.annotations().contains_key(apiserver::COMPONENT_NAME) {
            assert_eq!(p.namespace().as_deref(), Some("kube-system"));
            assert!(p.annotations().contains_key(apiserver::COMPONENT_VERSION));
            addons += 1;
        }
    }
    assert_eq!(per_node.len(), 100);
    assert!(per_node.values().all(|n| *n == 30), "{per_node:?}");
    assert!(addons >= 400, "{addons}");
    assert!(restarted > 0 && restarted < 3_000 / 4, "{restarted}");
    for rs in replica_sets.values() {
        assert_eq!(rs.owner_references()[0].kind, "Deployment");
    }

    let node_list = Api::<Node>::all(api.client())
        .list(&ListParams::default())
        .await
        .unwrap();
    let label_values = |key: &str| -> BTreeSet<String> {
        node_list
            .items
            .iter()
            .map(|n| n.labels()[key].clone())
            .collect()
    };
    assert_eq!(label_values("topology.kubernetes.io/zone").len(), 3);
    assert_eq!(label_values("cloud.google.com/gke-nodepool").len(), 2);
    assert_eq!(label_values("kubernetes.io/hostname").len(), 100);
    for n in &node_list.items {
        let status = n.status.as_ref().unwrap();
        let ready = status
            .conditions
            .as_ref()
            .unwrap()
            .iter()
            .find(|c| c.type_ == "Ready")
            .unwrap();
        assert_eq!(ready.status, "True");
        assert!(status.allocatable.as_ref().unwrap().contains_key("cpu"));
        assert!(status.capacity.as_ref().unwrap().contains_key("memory"));
    }

    // kube's watcher pages the initial list (500 a page) into the same 3,000.
    let r = reflect(Api::<Pod>::all(api.client()), watcher::Config::default());
    eventually("the paged initial list", || r.count(&Seen::InitDone) == 1).await;
    assert_eq!(r.versions(), api.versions(Kind::Pods));
    let pages = api
        .requests()
        .iter()
        .filter(|q| {
            q.path == "/api/v1/pods" && q.query.as_deref().unwrap_or_default().contains("limit=500")
        })
        .count();
    assert_eq!(pages, 6);
    eprintln!("generate(100, 30): {generated:?}; LIST of 3,000 pods: {listed:?}");
}

/// The bytes per NodeMetrics item measured from the real metrics-server with 25 node labels
/// (docs/benchmarks.md, "The cluster role with the real metrics-server": 1,266.7).
const MEASURED_NODE_METRICS_ITEM_BYTES: f64 = 1_267.0;

/// Generated NodeMetrics are shaped as the real metrics-server sends them on GKE: each carries
/// its node's labels (GKE's 25), a creationTimestamp, timestamp, window and usage, and weighs
/// what the real server's items weigh (within 15 %), so a test or bench at size sees a
/// real-size answer.
#[tokio::test]
async fn generated_node_metrics_have_the_real_servers_shape_and_size() {
    let api = apiserver::start().await;
    let made = api.generate_with(&apiserver::GenerateOptions::new(12, 0));
    assert_eq!((made.nodes, made.node_metrics, made.pods), (12, 12, 0));
    let url = format!("{}{}", api.url, apiserver::NODE_METRICS_PATH);
    let resp = reqwest::get(&url).await.unwrap();
    let length = resp.content_length();
    let body = resp.bytes().await.unwrap();
    // Sent whole, with its length, and noted once out.
    assert_eq!(length, Some(body.len() as u64));
    let answered = api.answered();
    assert_eq!(answered.len(), 1, "{answered:?}");
    assert_eq!(
        (answered[0].path.as_str(), answered[0].bytes),
        (apiserver::NODE_METRICS_PATH, body.len())
    );
    let list: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(list["kind"], "NodeMetricsList");
    let items = list["items"].as_array().unwrap();
    assert_eq!(items.len(), 12);
    let nodes: BTreeMap<String, Node> = api
        .objects::<Node>()
        .into_iter()
        .map(|n| (n.name_any(), n))
        .collect();
    let (low, high) = (
        MEASURED_NODE_METRICS_ITEM_BYTES * 0.85,
        MEASURED_NODE_METRICS_ITEM_BYTES * 1.15,
    );
    for item in items {
        let bytes = serde_json::to_vec(item).unwrap().len() as f64;
        assert!(
            (low..=high).contains(&bytes),
            "{bytes} bytes, want {MEASURED_NODE_METRICS_ITEM_BYTES} ± 15 %: {item}"
        );
        let meta = &item["metadata"];
        let name = meta["name"].as_str().unwrap();
        let labels = meta["labels"].as_object().unwrap();
        assert!(labels.len() >= 24, "{} labels: {item}", labels.len());
        // metrics-server copies the node's labels.
        let node_labels: serde_json::Map<String, Value> = nodes[name]
            .labels()
            .iter()
            .map(|(k, v)| (k.clone(), Value::from(v.as_str())))
            .collect();
        assert_eq!(labels, &node_labels, "{name}");
        assert_eq!(labels["kubernetes.io/hostname"], name);
        for key in [
            "cloud.google.com/gke-nodepool",
            "topology.kubernetes.io/zone",
            "node.kubernetes.io/instance-type",
            "cloud.google.com/gke-os-distribution",
            "cloud.google.com/gke-max-pods-per-node",
        ] {
            assert!(labels.contains_key(key), "{key}: {item}");
        }
        assert!(meta["creationTimestamp"].is_string(), "{item}");
        assert!(item["timestamp"].is_string(), "{item}");
        assert!(item["window"].as_str().unwrap().ends_with('s'), "{item}");
        assert!(item["usage"]["cpu"].as_str().unwrap().ends_with('n'));
        assert!(item["usage"]["memory"].as_str().unwrap().ends_with("Ki"));
    }
    // The answer as a whole: items plus the list's few bytes of envelope.
    let per_item = body.len() as f64 / 12.0;
    assert!((low..=high + 20.0).contains(&per_item), "{per_item}");
    // What k8s-metrics' client decodes: exactly what `node_metrics_for` makes of the node,
    // stamped now.
    let typed = Api::<NodeMetrics>::all(api.client())
        .list(&ListParams::default())
        .await
        .unwrap();
    assert_eq!(typed.items.len(), 12);
    for m in &typed.items {
        let stamped = std::time::SystemTime::UNIX_EPOCH
            + Duration::from_secs(m.timestamp.0.as_second() as u64);
        let age = std::time::SystemTime::now()
            .duration_since(stamped)
            .unwrap();
        assert!(age < Duration::from_secs(60), "{m:?}");
        let want = apiserver::node_metrics_for(
            &nodes[m.metadata.name.as_deref().unwrap()],
            &m.usage.cpu.0,
            &m.usage.memory.0,
            stamped,
        );
        assert_eq!(m, &want);
    }
}

#[tokio::test]
async fn churn_modifies_pods_that_watchers_see() {
    let api = apiserver::start().await;
    api.generate(10, 10);
    let r = reflect(Api::<Pod>::all(api.client()), watcher::Config::default());
    eventually("the initial list", || r.count(&Seen::InitDone) == 1).await;
    let restarts = |pods: &[Pod]| -> i32 {
        pods.iter()
            .flat_map(|p| {
                p.status
                    .as_ref()
                    .unwrap()
                    .container_statuses
                    .iter()
                    .flatten()
            })
            .map(|c| c.restart_count)
            .sum()
    };
    let restarts_before = restarts(&api.objects::<Pod>());
    let rv = api.resource_version();
    let changes = api.churn(200.0, Duration::from_millis(300)).await.unwrap();
    assert!((50..=70).contains(&changes), "{changes}");
    assert_eq!(api.resource_version(), rv + changes as u64);
    eventually("the churn", || r.versions() == api.versions(Kind::Pods)).await;
    eventually("every change as an Apply", || {
        r.seen()
            .iter()
            .filter(|s| matches!(s, Seen::Apply(..)))
            .count()
            == changes
    })
    .await;
    let pods: Vec<Pod> = api.objects();
    let changed: Vec<&Pod> = pods
        .iter()
        .filter(|p| p.resource_version().unwrap().parse::<u64>().unwrap() > rv)
        .collect();
    assert!(!changed.is_empty());
    assert!(
        restarts(&pods) > restarts_before
            || changed
                .iter()
                .any(|p| p.status.as_ref().unwrap().phase.as_deref() == Some("Pending")),
        "churn restarts containers or flips phases"
    );
}

#[tokio::test]
async fn mixed_churn_creates_deletes_and_updates_pods_that_watchers_see() {
    let api = apiserver::start().await;
    api.generate(10, 10);
    let before = api.count(Kind::Pods);
    let original: BTreeSet<String> = api.objects::<Pod>().iter().map(|p| p.name_any()).collect();
    let r = reflect(Api::<Pod>::all(api.client()), watcher::Config::default());
    eventually("the initial list", || r.count(&Seen::InitDone) == 1).await;
    let rv = api.resource_version();
    let mut options = ChurnOptions::new(400.0, Duration::from_millis(300));
    options.replace_percent = 50;
    let counts = api.churn_with(options).await.unwrap();
    assert!((100..=140).contains(&counts.total()), "{counts:?}");
    assert!(
        counts.creates > 0 && counts.deletes > 0 && counts.updates > 0,
        "{counts:?}"
    );
    // Deletions and creations alternate: the count stays within one of the start.
    assert!(counts.deletes - counts.creates <= 1, "{counts:?}");
    assert_eq!(
        api.count(Kind::Pods),
        before + counts.creates - counts.deletes
    );
    assert_eq!(api.resource_version(), rv + counts.total() as u64);
    eventually("the churn", || r.versions() == api.versions(Kind::Pods)).await;
    let deletes = r
        .seen()
        .iter()
        .filter(|s| matches!(s, Seen::Delete(..)))
        .count();
    assert_eq!(deletes, counts.deletes);
    // A replacement is a new pod (name and uid), Pending, on a node.
    let new: Vec<Pod> = api
        .objects::<Pod>()
        .into_iter()
        .filter(|p| !original.contains(&p.name_any()))
        .collect();
    // Some replacements may have been deleted or updated again since.
    assert!(
        !new.is_empty() && new.len() <= counts.creates,
        "{}",
        new.len()
    );
    assert!(
        new.iter()
            .any(|p| p.status.as_ref().unwrap().phase.as_deref() == Some("Pending"))
    );
    for p in &new {
        assert!(p.spec.as_ref().unwrap().node_name.is_some());
    }
    let uids: BTreeSet<String> = api
        .objects::<Pod>()
        .iter()
        .map(|p| p.metadata.uid.clone().unwrap())
        .collect();
    assert_eq!(uids.len(), api.count(Kind::Pods));
}

#[tokio::test]
async fn force_relist_makes_a_watcher_relist_after_410() {
    let api = apiserver::start_with(Options {
        bookmark_interval: Duration::from_secs(3600),
        ..Options::default()
    })
    .await;
    api.generate(5, 10);
    let r = reflect(
        Api::<Pod>::all(api.client()),
        watcher::Config::default().page_size(7),
    );
    eventually("the initial list", || r.count(&Seen::InitDone) == 1).await;
    api.clear_requests();
    api.force_relist();
    eventually("the relist", || r.count(&Seen::InitDone) == 2).await;
    assert!(
        r.seen()
            .iter()
            .any(|s| matches!(s, Seen::Error(e) if e.contains("410") || e.contains("Expired"))),
        "{:?}",
        r.seen()
    );
    assert_eq!(r.versions(), api.versions(Kind::Pods));
    // The relist went through every page again.
    let pages = api
        .requests()
        .iter()
        .filter(|q| {
            q.path == "/api/v1/pods" && !q.query.as_deref().unwrap_or_default().contains("watch")
        })
        .count();
    assert_eq!(pages, 50usize.div_ceil(7));
}
