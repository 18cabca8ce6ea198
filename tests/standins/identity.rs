//! GCE identity from a stand-in metadata server on 127.0.0.1: found on GCE, never asked off it,
//! and bounded in time when it stalls.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use kube_prober::k8s::identity::{IdentityConfig, detect};

#[derive(Clone)]
struct St {
    hits: Arc<AtomicUsize>,
    stall: bool,
}

async fn md(State(st): State<St>, Path(path): Path<String>, h: HeaderMap) -> Response {
    st.hits.fetch_add(1, Ordering::SeqCst);
    if st.stall {
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    if h.get("metadata-flavor").is_none_or(|v| v != "Google") {
        return (StatusCode::FORBIDDEN, "missing Metadata-Flavor").into_response();
    }
    let body = match path.as_str() {
        "project/project-id" => "my-project",
        "instance/attributes/cluster-location" => "us-central1",
        "instance/attributes/cluster-name" => "prod-1",
        "instance/hostname" => "gke-prod-1-pool-1-abcd.c.my-project.internal",
        "instance/zone" => "projects/123/zones/us-central1-b",
        _ => return (StatusCode::NOT_FOUND, "").into_response(),
    };
    ([("Metadata-Flavor", "Google")], body).into_response()
}

async fn server(stall: bool) -> (String, Arc<AtomicUsize>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let app = Router::new()
        .route("/computeMetadata/v1/{*path}", get(md))
        .with_state(St {
            hits: hits.clone(),
            stall,
        });
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        let _ = axum::serve(l, app).await;
    });
    (addr, hits)
}

fn cfg(host: &str, dmi: &std::path::Path, explicit: bool) -> IdentityConfig {
    IdentityConfig {
        metadata_host: host.into(),
        metadata_host_explicit: explicit,
        dmi_product_name: dmi.to_path_buf(),
        timeout: Duration::from_secs(1),
    }
}

#[tokio::test]
async fn on_gce_the_metadata_server_names_everything() {
    let (host, _) = server(false).await;
    let dir = tempfile::tempdir().unwrap();
    let dmi = dir.path().join("product_name");
    std::fs::write(&dmi, "Google Compute Engine\n").unwrap();
    let id = detect(&cfg(&host, &dmi, false)).await;
    assert!(id.on_gce);
    assert_eq!(id.project.as_deref(), Some("my-project"));
    assert_eq!(id.location.as_deref(), Some("us-central1"));
    assert_eq!(id.cluster_name.as_deref(), Some("prod-1"));
    assert_eq!(id.node_name.as_deref(), Some("gke-prod-1-pool-1-abcd"));
}

#[tokio::test]
async fn off_gce_nothing_is_asked() {
    let (host, hits) = server(false).await;
    let dir = tempfile::tempdir().unwrap();
    let dmi = dir.path().join("product_name");
    std::fs::write(&dmi, "Standard PC (Q35 + ICH9, 2009)\n").unwrap();
    let id = detect(&cfg(&host, &dmi, false)).await;
    assert!(!id.on_gce && id.project.is_none());
    let id = detect(&cfg(&host, &dir.path().join("missing"), false)).await;
    assert!(!id.on_gce);
    assert_eq!(hits.load(Ordering::SeqCst), 0, "no request off GCE");
}

#[tokio::test]
async fn a_stalled_metadata_server_costs_at_most_a_second() {
    let (host, _) = server(true).await;
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let id = detect(&cfg(&host, &dir.path().join("none"), true)).await;
    assert!(
        started.elapsed() < Duration::from_millis(1900),
        "{:?}",
        started.elapsed()
    );
    assert!(id.on_gce && id.cluster_name.is_none());
}
