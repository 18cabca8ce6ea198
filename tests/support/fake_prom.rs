//! A stand-in Prometheus HTTP API (`/api/v1/query`) on 127.0.0.1 for fault tests: it answers
//! like Prometheus does (JSON vectors and error bodies) and can be told to misbehave. A query of
//! `timestamp(...)` (each node's newest sample) is answered, for the same instances, with the
//! query's own `time`: every series is fresh.
#![allow(dead_code)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{RawQuery, State};
use axum::http::{Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::any;

/// How the stand-in answers.
#[derive(Debug, Clone, PartialEq)]
pub enum Behaviour {
    /// Every query: one series per `(instance, value)`.
    Answer(Vec<(String, f64)>),
    /// Every query: this status and body as they are (an answer a real Prometheus gave); a
    /// `timestamp(...)` query gets, for each instance the body's vector names, the query's
    /// time.
    Body(u16, String),
    /// As `Answer`, but POST gets 405 (some proxies), so the client must use GET.
    NoPost(Vec<(String, f64)>),
    /// 500 with a Prometheus error body for queries containing the string; others as `Answer`.
    FailMatching(String, Vec<(String, f64)>),
    /// Invalid JSON.
    Malformed,
    /// A body of this many bytes.
    Huge(usize),
    /// Answer after this long.
    Stall(Duration),
    /// 503 for everything.
    Down,
}

#[derive(Debug, Default)]
pub struct Log {
    pub requests: Vec<(Method, String)>,
}

#[derive(Clone)]
struct St {
    behaviour: Arc<Mutex<Behaviour>>,
    log: Arc<Mutex<Log>>,
}

pub struct FakePrometheus {
    pub url: String,
    behaviour: Arc<Mutex<Behaviour>>,
    pub log: Arc<Mutex<Log>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakePrometheus {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakePrometheus {
    pub async fn start(b: Behaviour) -> FakePrometheus {
        let behaviour = Arc::new(Mutex::new(b));
        let log = Arc::new(Mutex::new(Log::default()));
        let st = St {
            behaviour: behaviour.clone(),
            log: log.clone(),
        };
        let app = Router::new()
            .route("/api/v1/query", any(query))
            .with_state(st);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakePrometheus {
            url,
            behaviour,
            log,
            task,
        }
    }

    pub fn set(&self, b: Behaviour) {
        *self.behaviour.lock().unwrap() = b;
    }

    pub fn requests(&self) -> Vec<(Method, String)> {
        self.log.lock().unwrap().requests.clone()
    }
}

/// `series` as they answer `promql` at `time`: a `timestamp(...)` query gets `time` for each.
fn answer(promql: &str, time: Option<f64>, series: &[(String, f64)]) -> String {
    match time {
        Some(t) if promql.contains("timestamp(") => {
            let dated: Vec<(String, f64)> = series.iter().map(|(i, _)| (i.clone(), t)).collect();
            vector(&dated)
        }
        _ => vector(series),
    }
}

/// The `instance` labels of a vector answer's series (none for any other body).
fn instances(body: &str) -> Vec<String> {
    let v: serde_json::Value = serde_json::from_str(body).unwrap_or_default();
    v["data"]["result"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["metric"]["instance"].as_str().map(str::to_string))
        .collect()
}

/// A value as Prometheus writes it (Go's `strconv.FormatFloat(v, 'f', -1, 64)`): `NaN`,
/// `+Inf`, `-Inf` and the shortest decimal otherwise.
fn prom_value(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else {
        format!("{v}")
    }
}

fn vector(series: &[(String, f64)]) -> String {
    let result: Vec<String> = series
        .iter()
        .map(|(inst, v)| {
            let v = prom_value(*v);
            format!(r#"{{"metric":{{"instance":"{inst}"}},"value":[1700000000.123,"{v}"]}}"#)
        })
        .collect();
    format!(
        r#"{{"status":"success","data":{{"resultType":"vector","result":[{}]}}}}"#,
        result.join(",")
    )
}

fn json(status: StatusCode, body: String) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

async fn query(
    State(st): State<St>,
    method: Method,
    RawQuery(q): RawQuery,
    body: Bytes,
) -> Response {
    let params = if method == Method::POST {
        String::from_utf8_lossy(&body).into_owned()
    } else {
        q.unwrap_or_default()
    };
    let param = |name: &str| {
        form_urlencoded::parse(params.as_bytes())
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.into_owned())
    };
    let promql = param("query").unwrap_or_default();
    let time = param("time").and_then(|t| t.parse::<f64>().ok());
    st.log
        .lock()
        .unwrap()
        .requests
        .push((method.clone(), promql.clone()));
    let b = st.behaviour.lock().unwrap().clone();
    match b {
        Behaviour::Answer(s) => json(StatusCode::OK, answer(&promql, time, &s)),
        Behaviour::Body(status, body) => match time {
            Some(t) if promql.contains("timestamp(") => {
                let dated: Vec<(String, f64)> =
                    instances(&body).into_iter().map(|i| (i, t)).collect();
                json(StatusCode::OK, vector(&dated))
            }
            _ => json(
                StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
                body,
            ),
        },
        Behaviour::NoPost(s) => {
            if method == Method::POST {
                (StatusCode::METHOD_NOT_ALLOWED, "").into_response()
            } else {
                json(StatusCode::OK, answer(&promql, time, &s))
            }
        }
        Behaviour::FailMatching(needle, s) => {
            if promql.contains(&needle) {
                json(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    r#"{"status":"error","errorType":"internal","error":"injected"}"#.into(),
                )
            } else {
                json(StatusCode::OK, answer(&promql, time, &s))
            }
        }
        Behaviour::Malformed => json(StatusCode::OK, "{\"status\":\"success\",\"data\":".into()),
        Behaviour::Huge(n) => json(StatusCode::OK, " ".repeat(n)),
        Behaviour::Stall(d) => {
            tokio::time::sleep(d).await;
            json(StatusCode::OK, vector(&[]))
        }
        Behaviour::Down => (StatusCode::SERVICE_UNAVAILABLE, "down").into_response(),
    }
}
