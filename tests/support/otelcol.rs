//! The real OpenTelemetry Collector (core modules, `tests/upstream/otelcol`) on 127.0.0.1: its
//! OTLP receiver on a free gRPC and a free HTTP port, every batch appended by the `jsonfile`
//! exporter of that folder's main.go as one line of OTLP/JSON to a file of a temporary folder,
//! and the Collector's own metrics (`level: detailed`) on a free port in the Prometheus text
//! format. The binary comes from `tests/upstream/build.sh`, linked into `target/upstream/bin`
//! or `$KUBE_PROBER_UPSTREAM_BIN`; a missing one is a failure naming the script, never a skip.
//! The process is killed when the [`Collector`] is dropped, also when a test fails.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::Read;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The folder of upstream binaries `tests/upstream/build.sh` links.
pub fn upstream_bin() -> PathBuf {
    std::env::var_os("KUBE_PROBER_UPSTREAM_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::repo_root().join("target/upstream/bin"))
}

/// The `otelcol` binary; panics naming the build script when it is missing.
pub fn otelcol_binary() -> PathBuf {
    let p = upstream_bin().join("otelcol");
    assert!(
        p.is_file(),
        "{} is missing: build it with `tests/upstream/build.sh otelcol` (needs Go >= 1.26 and \
         the Go module proxy)",
        p.display()
    );
    p
}

pub use crate::ports::free_port;

/// Three distinct free ports of 127.0.0.1.
fn free_ports() -> [u16; 3] {
    [free_port(), free_port(), free_port()]
}

fn config(grpc: u16, http: u16, telemetry: u16, out: &Path) -> String {
    format!(
        "receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:{grpc}
      http:
        endpoint: 127.0.0.1:{http}
exporters:
  jsonfile:
    path: {out}
service:
  telemetry:
    logs:
      level: info
    metrics:
      level: detailed
      readers:
        - pull:
            exporter:
              prometheus:
                host: 127.0.0.1
                port: {telemetry}
  pipelines:
    metrics:
      receivers: [otlp]
      exporters: [jsonfile]
",
        out = out.display()
    )
}

/// A running Collector.
pub struct Collector {
    child: Child,
    stderr: Arc<Mutex<String>>,
    out: PathBuf,
    /// For `--otlp-endpoint` with `grpc`: `http://127.0.0.1:PORT`.
    pub grpc_endpoint: String,
    /// For `--otlp-endpoint` with `http/protobuf`: `http://127.0.0.1:PORT/v1/metrics`.
    pub http_endpoint: String,
    telemetry_url: String,
    /// The config file and the receiver's two ports, to start it again on them.
    cfg: PathBuf,
    ports: [u16; 2],
    _dir: tempfile::TempDir,
}

impl Drop for Collector {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The receiver's point counts of one transport (`grpc`, `http`), from the Collector's metrics;
/// `None`: the Collector does not show that counter.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ReceiverPoints {
    pub accepted: Option<f64>,
    pub refused: Option<f64>,
    pub failed: Option<f64>,
}

impl Collector {
    /// Starts the Collector and waits (bounded) until its receiver ports and its metrics answer.
    /// A port taken between choosing and binding makes the Collector exit: then it is tried
    /// again on other ports, three times at most.
    pub async fn start() -> Collector {
        let bin = otelcol_binary();
        let mut last = String::new();
        for _ in 0..3 {
            match Self::try_start(&bin).await {
                Ok(c) => return c,
                Err(e) => last = e,
            }
        }
        panic!("the OpenTelemetry Collector did not start: {last}");
    }

    async fn try_start(bin: &Path) -> Result<Collector, String> {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let [grpc, http, telemetry] = free_ports();
        let out = dir.path().join("metrics.jsonl");
        let cfg = dir.path().join("config.yaml");
        std::fs::write(&cfg, config(grpc, http, telemetry, &out)).expect("writing the config");
        let stderr = Arc::new(Mutex::new(String::new()));
        let child = spawn(bin, &cfg, &stderr)?;
        let mut c = Collector {
            child,
            stderr,
            out,
            grpc_endpoint: format!("http://127.0.0.1:{grpc}"),
            http_endpoint: format!("http://127.0.0.1:{http}/v1/metrics"),
            telemetry_url: format!("http://127.0.0.1:{telemetry}/metrics"),
            cfg,
            ports: [grpc, http],
            _dir: dir,
        };
        c.wait_ready([grpc, http]).await?;
        Ok(c)
    }

    /// Kills the Collector, as a Collector that died: its ports refuse connections until
    /// [`Collector::restart`].
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts the Collector again with the same config: the same ports, the exporter
    /// appending to the same file; waits (bounded) until it is ready.
    pub async fn restart(&mut self) {
        self.stop();
        let bin = otelcol_binary();
        self.child = spawn(&bin, &self.cfg, &self.stderr)
            .unwrap_or_else(|e| panic!("restarting the Collector: {e}"));
        let ports = self.ports;
        if let Err(e) = self.wait_ready(ports).await {
            panic!("the restarted Collector: {e}");
        }
    }

    async fn wait_ready(&mut self, ports: [u16; 2]) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(st)) = self.child.try_wait() {
                return Err(format!("it exited ({st}):\n{}", self.stderr()));
            }
            let listening = ports.iter().all(|p| {
                TcpStream::connect_timeout(&([127, 0, 0, 1], *p).into(), Duration::from_secs(1))
                    .is_ok()
            });
            if listening && self.telemetry().await.is_ok() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!("not ready within 30 s:\n{}", self.stderr()));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// What the Collector logged so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// The Collector's own metrics (Prometheus text).
    pub async fn telemetry(&self) -> Result<String, String> {
        let r = reqwest::Client::new()
            .get(&self.telemetry_url)
            .timeout(Duration::from_secs(5))
            .send()
            .await
            .map_err(|e| e.to_string())?;
        if !r.status().is_success() {
            return Err(format!("status {}", r.status()));
        }
        r.text().await.map_err(|e| e.to_string())
    }

    /// `otelcol_receiver_{accepted,refused,failed}_metric_points` of the OTLP receiver, summed
    /// per transport.
    pub async fn receiver_points(&self) -> BTreeMap<String, ReceiverPoints> {
        let text = self
            .telemetry()
            .await
            .unwrap_or_else(|e| panic!("the Collector's metrics: {e}"));
        receiver_points(&text)
    }

    /// Every batch the exporter wrote so far, as OTLP/JSON `{"resourceMetrics": [...]}`; a last
    /// line still being written is left for the next call.
    pub fn batches(&self) -> Vec<Value> {
        let text = match std::fs::read_to_string(&self.out) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
            Err(e) => panic!("{}: {e}", self.out.display()),
        };
        let complete = text.rfind('\n').map_or("", |i| &text[..i]);
        complete
            .lines()
            .map(|l| {
                serde_json::from_str(l)
                    .unwrap_or_else(|e| panic!("the exporter wrote a line that is no JSON: {e}"))
            })
            .collect()
    }
}

/// Starts `bin` with `cfg`, its stderr appended to `stderr` by a thread of its own.
fn spawn(bin: &Path, cfg: &Path, stderr: &Arc<Mutex<String>>) -> Result<Child, String> {
    let mut cmd = Command::new(bin);
    cmd.arg("--config")
        .arg(cfg)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child =
        crate::owned::spawn(cmd).map_err(|e| format!("spawning {}: {e}", bin.display()))?;
    let mut pipe = child.stderr.take().expect("piped stderr");
    let sink = stderr.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 8192];
        while let Ok(n) = pipe.read(&mut buf) {
            if n == 0 {
                break;
            }
            sink.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    Ok(child)
}

/// Parses the receiver counters out of the Collector's Prometheus text: one entry per
/// `transport` label value.
pub fn receiver_points(text: &str) -> BTreeMap<String, ReceiverPoints> {
    let mut out: BTreeMap<String, ReceiverPoints> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let name = line.split(['{', ' ']).next().unwrap_or_default();
        let Some(rest) = name.strip_prefix("otelcol_receiver_") else {
            continue;
        };
        let outcome = rest.split('_').next().unwrap_or_default();
        if !rest[outcome.len()..].starts_with("_metric_points")
            || !line.contains("receiver=\"otlp\"")
        {
            continue;
        }
        let Some(transport) = line
            .split("transport=\"")
            .nth(1)
            .and_then(|s| s.split('"').next())
        else {
            continue;
        };
        let value: f64 = line
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no value in {line:?}"));
        let slot = out.entry(transport.to_string()).or_default();
        let field = match outcome {
            "accepted" => &mut slot.accepted,
            "refused" => &mut slot.refused,
            "failed" => &mut slot.failed,
            _ => continue,
        };
        *field = Some(field.unwrap_or(0.0) + value);
    }
    out
}

/// One metric as the Collector decoded it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Decoded {
    pub name: String,
    pub unit: String,
    /// `gauge`, `counter` (monotonic cumulative sum), `updowncounter` (non-monotonic
    /// cumulative sum), `histogram` (cumulative) or what else arrived, spelled out.
    pub kind: String,
}

fn temporality(data: &Value) -> &'static str {
    // OTLP/JSON: the enum as its number (2 = cumulative) or its name.
    match &data["aggregationTemporality"] {
        Value::Number(n) if n.as_u64() == Some(2) => "cumulative",
        Value::String(s) if s == "AGGREGATION_TEMPORALITY_CUMULATIVE" => "cumulative",
        Value::Number(n) if n.as_u64() == Some(1) => "delta",
        _ => "unspecified",
    }
}

/// The kind of one OTLP/JSON metric, in docs/metrics.md's words.
pub fn kind_of(metric: &Value) -> String {
    if metric.get("gauge").is_some() {
        return "gauge".into();
    }
    if let Some(sum) = metric.get("sum") {
        let monotonic = sum["isMonotonic"].as_bool().unwrap_or(false);
        return match (temporality(sum), monotonic) {
            ("cumulative", true) => "counter".into(),
            ("cumulative", false) => "updowncounter".into(),
            (t, m) => format!("sum(temporality={t}, monotonic={m})"),
        };
    }
    if let Some(h) = metric.get("histogram") {
        return match temporality(h) {
            "cumulative" => "histogram".into(),
            t => format!("histogram(temporality={t})"),
        };
    }
    let keys: Vec<&String> = metric
        .as_object()
        .map(|o| o.keys().collect())
        .unwrap_or_default();
    format!("other({keys:?})")
}

/// The string form of an OTLP/JSON AnyValue.
pub fn any_value(v: &Value) -> String {
    for key in ["stringValue", "intValue", "doubleValue", "boolValue"] {
        match v.get(key) {
            Some(Value::String(s)) => return s.clone(),
            Some(other) => return other.to_string(),
            None => {}
        }
    }
    v.to_string()
}

/// `attributes` of an OTLP/JSON object as key → value.
pub fn attributes(obj: &Value) -> BTreeMap<String, String> {
    obj["attributes"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|kv| {
                    (
                        kv["key"].as_str().unwrap_or_default().to_string(),
                        any_value(&kv["value"]),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Every (resource attributes, metric) pair of some batches.
pub fn metrics(batches: &[Value]) -> Vec<(BTreeMap<String, String>, &Value)> {
    let mut out = Vec::new();
    for b in batches {
        for rm in b["resourceMetrics"].as_array().into_iter().flatten() {
            let res = attributes(&rm["resource"]);
            for sm in rm["scopeMetrics"].as_array().into_iter().flatten() {
                for m in sm["metrics"].as_array().into_iter().flatten() {
                    out.push((res.clone(), m));
                }
            }
        }
    }
    out
}

/// The decoded name, unit and kind of an OTLP/JSON metric.
pub fn decoded(metric: &Value) -> Decoded {
    Decoded {
        name: metric["name"].as_str().unwrap_or_default().to_string(),
        unit: metric["unit"].as_str().unwrap_or_default().to_string(),
        kind: kind_of(metric),
    }
}

/// The number of data points in some batches (what the receiver counts as metric points).
pub fn point_count(batches: &[Value]) -> usize {
    metrics(batches)
        .iter()
        .map(|(_, m)| {
            [
                "gauge",
                "sum",
                "histogram",
                "exponentialHistogram",
                "summary",
            ]
            .iter()
            .filter_map(|k| m.get(*k))
            .map(|d| d["dataPoints"].as_array().map_or(0, Vec::len))
            .sum::<usize>()
        })
        .sum()
}

/// The attribute keys of every data point of an OTLP/JSON metric.
pub fn point_attribute_keys(metric: &Value) -> std::collections::BTreeSet<String> {
    ["gauge", "sum", "histogram"]
        .iter()
        .filter_map(|k| metric.get(*k))
        .flat_map(|d| d["dataPoints"].as_array().into_iter().flatten())
        .flat_map(|p| attributes(p).into_keys())
        .collect()
}
