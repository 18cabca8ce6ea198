//! A stand-in SignalFx API (`/v2/metrictimeseries`, `/v1/timeserieswindow`) on 127.0.0.1,
//! answering in SignalFx's JSON shapes, checking the token, and recording the queries.
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

/// One series: id, host dimension, metric (`cpu.utilization` / `memory.utilization`), points.
#[derive(Debug, Clone)]
pub struct Series {
    pub id: String,
    pub host: String,
    pub metric: String,
    pub points: Vec<(i64, Option<f64>)>,
}

#[derive(Default)]
pub struct Inner {
    pub series: Vec<Series>,
    pub queries: Vec<HashMap<String, String>>,
    /// Answer every data request with this status instead.
    pub fail_data: Option<u16>,
}

pub struct FakeSignalFx {
    pub url: String,
    pub inner: Arc<Mutex<Inner>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeSignalFx {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub const TOKEN: &str = "sfx-test-token";

fn authorised(h: &HeaderMap) -> bool {
    h.get("x-sf-token").and_then(|v| v.to_str().ok()) == Some(TOKEN)
}

fn json(v: serde_json::Value) -> Response {
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        v.to_string(),
    )
        .into_response()
}

fn metric_of(query: &str) -> Option<&'static str> {
    if query.contains("sf_metric:\"cpu.utilization\"") {
        Some("cpu.utilization")
    } else if query.contains("sf_metric:\"memory.utilization\"") {
        Some("memory.utilization")
    } else {
        None
    }
}

async fn metadata(
    State(st): State<Arc<Mutex<Inner>>>,
    h: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    if !authorised(&h) {
        return (StatusCode::UNAUTHORIZED, "bad token").into_response();
    }
    let mut inner = st.lock().unwrap();
    inner.queries.push(q.clone());
    let metric = metric_of(q.get("query").map(String::as_str).unwrap_or_default());
    let results: Vec<serde_json::Value> = inner
        .series
        .iter()
        .filter(|s| Some(s.metric.as_str()) == metric)
        .map(|s| serde_json::json!({"id": s.id, "dimensions": {"host": s.host, "sf_metric": s.metric}}))
        .collect();
    json(serde_json::json!({"count": results.len(), "results": results}))
}

async fn window(
    State(st): State<Arc<Mutex<Inner>>>,
    h: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    if !authorised(&h) {
        return (StatusCode::UNAUTHORIZED, "bad token").into_response();
    }
    let mut inner = st.lock().unwrap();
    inner.queries.push(q.clone());
    if let Some(code) = inner.fail_data {
        return (StatusCode::from_u16(code).unwrap(), "injected").into_response();
    }
    let metric = metric_of(q.get("query").map(String::as_str).unwrap_or_default());
    let mut data = serde_json::Map::new();
    for s in inner
        .series
        .iter()
        .filter(|s| Some(s.metric.as_str()) == metric)
    {
        data.insert(s.id.clone(), serde_json::json!(s.points));
    }
    json(serde_json::json!({"data": data, "errors": []}))
}

impl FakeSignalFx {
    pub async fn start(series: Vec<Series>) -> FakeSignalFx {
        let inner = Arc::new(Mutex::new(Inner {
            series,
            ..Inner::default()
        }));
        let app = Router::new()
            .route("/v2/metrictimeseries", get(metadata))
            .route("/v1/timeserieswindow", get(window))
            .with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeSignalFx { url, inner, task }
    }
}
