//! Probes against local servers on 127.0.0.1: success, timeout, refused connection, bad body,
//! wrong status; and through the Kubernetes API to the stand-in.

use support::apiserver;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::Router;
use axum::http::StatusCode;
use axum::routing::get;
use kube_prober::hub::Store;
use kube_prober::outputs::prometheus::{Format, render};
use kube_prober::sources::probe::dns::DnsProbe;
use kube_prober::sources::probe::http::HttpProbe;
use kube_prober::sources::probe::kube::{ApiServerReadyProbe, MetricsServerProbe};
use kube_prober::sources::probe::run_once;

async fn serve(app: Router) -> String {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(l, app).await;
    });
    format!("http://{addr}")
}

async fn outcome_of(p: HttpProbe, timeout: Duration, store: &Store) -> Option<String> {
    run_once(&p, timeout, store).await.failure
}

#[tokio::test]
async fn http_probe_outcomes() {
    let base = serve(
        Router::new()
            .route("/healthz", get(|| async { "ok" }))
            .route("/uptime", get(|| async { r#"{"uptime_sec":42}"# }))
            .route(
                "/broken",
                get(|| async { (StatusCode::SERVICE_UNAVAILABLE, "no") }),
            )
            .route("/wrong", get(|| async { "not healthy" }))
            .route(
                "/slow",
                get(|| async {
                    tokio::time::sleep(Duration::from_secs(3)).await;
                    "ok"
                }),
            ),
    )
    .await;
    // A port nothing listens on: bind, read the port, close.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let store = Store::new();
    let t = Duration::from_millis(500);
    let probe =
        |path: &str| HttpProbe::new("kubelet_healthz", &format!("{base}{path}"), t).unwrap();
    assert_eq!(
        outcome_of(probe("/healthz").body_contains("ok"), t, &store).await,
        None
    );
    assert_eq!(outcome_of(probe("/uptime"), t, &store).await, None);
    assert_eq!(
        outcome_of(probe("/broken"), t, &store).await.as_deref(),
        Some("status_503")
    );
    assert_eq!(
        outcome_of(
            probe("/wrong")
                .body_contains("ok\n")
                .body_contains("\"ok\""),
            t,
            &store
        )
        .await
        .as_deref(),
        Some("bad_body")
    );
    assert_eq!(
        outcome_of(probe("/slow"), t, &store).await.as_deref(),
        Some("timeout")
    );
    let refused = HttpProbe::new("addon_http", &format!("http://127.0.0.1:{closed}/x"), t).unwrap();
    assert_eq!(
        outcome_of(refused, t, &store).await.as_deref(),
        Some("refused")
    );
    assert!(HttpProbe::new("x", "ftp://127.0.0.1/", t).is_err());

    // Outcomes reach /metrics: success, reasons and the duration histogram.
    let text = render(&store.snapshot(SystemTime::now()), Format::Text);
    let healthz = format!("{base}/healthz");
    assert!(text.contains(&format!(
        "kube_prober_probe_success{{probe=\"kubelet_healthz\",target=\"{healthz}\"}} 1\n"
    )));
    assert!(text.contains(&format!("kube_prober_probe_failures_total{{probe=\"kubelet_healthz\",target=\"{base}/slow\",reason=\"timeout\"}} 1\n")));
    assert!(text.contains(&format!("kube_prober_probe_duration_seconds_count{{probe=\"kubelet_healthz\",target=\"{healthz}\"}} 1\n")));
}

#[tokio::test]
async fn dns_probe_resolves_localhost() {
    let store = Store::new();
    let o = run_once(
        &DnsProbe::new("dns_lookup", "localhost"),
        Duration::from_secs(2),
        &store,
    )
    .await;
    assert_eq!(o.failure, None);
    assert_eq!(
        (o.probe.as_str(), o.target.as_str()),
        ("dns_lookup", "localhost")
    );
}

#[tokio::test]
async fn kube_probes_through_the_stand_in() {
    let api = apiserver::start().await;
    let store = Arc::new(Store::new());
    let ms = MetricsServerProbe::new(api.client());
    let t = Duration::from_secs(2);
    assert_eq!(
        run_once(&ms, t, store.as_ref()).await.failure.as_deref(),
        Some("no_items")
    );
    api.set_node_metrics(vec![apiserver::node_metrics(
        "n1",
        "1",
        "1Gi",
        SystemTime::now(),
    )]);
    assert_eq!(run_once(&ms, t, store.as_ref()).await.failure, None);
    api.fail(
        apiserver::Kind::of::<k8s_metrics::v1beta1::NodeMetrics>(),
        apiserver::Fault::unavailable("down"),
    );
    assert_eq!(
        run_once(&ms, t, store.as_ref()).await.failure.as_deref(),
        Some("status_503")
    );

    let ready = ApiServerReadyProbe::new(api.client());
    let o = run_once(&ready, t, store.as_ref()).await;
    assert_eq!(o.failure, None, "{o:?}");
}
