//! The real OpenTelemetry Collector (core modules, `tests/upstream/otelcol`) on 127.0.0.1: its
//! OTLP receiver on a free gRPC and a free HTTP port, every batch appended by the `jsonfile`
//! exporter of that folder's main.go as one line of OTLP/JSON to a file of a temporary folder,
//! and the Collector's own metrics (`level: detailed`) on a free port in the Prometheus text
//! format. [`Collector::stop`] and [`Collector::start_again`] take it down and bring it back on
//! the same ports, each life's batches in a file of its own, and [`Collector::exported_points`]
//! counts every point exported over all lives (the soak of `soak.rs`). The binary comes from
//! `tests/upstream/build.sh`, linked into `target/upstream/bin` or `$KUBE_PROBER_UPSTREAM_BIN`;
//! a missing one is a failure naming the script, never a skip.
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

/// A running Collector (or, between [`Collector::stop`] and [`Collector::start_again`], a
/// stopped one that keeps its ports).
pub struct Collector {
    child: Child,
    stderr: Arc<Mutex<String>>,
    out: PathBuf,
    /// For `--otlp-endpoint` with `grpc`: `http://127.0.0.1:PORT`.
    pub grpc_endpoint: String,
    /// For `--otlp-endpoint` with `http/protobuf`: `http://127.0.0.1:PORT/v1/metrics`.
    pub http_endpoint: String,
    telemetry_url: String,
    ports: [u16; 3],
    /// How many times it was started: each start writes a file of its own.
    lives: u32,
    /// Points the exporter wrote in the lives that ended (their files counted and removed).
    exported_before: u64,
    _dir: tempfile::TempDir,
}

impl Drop for Collector {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The exporter's file of life `life` (the first is `metrics.jsonl`, as [`Collector::batches`]
/// reads it).
fn out_file(dir: &Path, life: u32) -> PathBuf {
    if life <= 1 {
        dir.join("metrics.jsonl")
    } else {
        dir.join(format!("metrics-{life}.jsonl"))
    }
}

/// Starts the Collector on `ports` with `dir/config.yaml` written for `out`; its stderr is
/// appended to `stderr`.
fn spawn_collector(
    bin: &Path,
    dir: &Path,
    ports: [u16; 3],
    out: &Path,
    stderr: &Arc<Mutex<String>>,
) -> Result<Child, String> {
    let [grpc, http, telemetry] = ports;
    let cfg = dir.join("config.yaml");
    std::fs::write(&cfg, config(grpc, http, telemetry, out)).expect("writing the config");
    let mut cmd = Command::new(bin);
    cmd.arg("--config")
        .arg(&cfg)
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

/// The data points in a file of OTLP/JSON lines, read in pieces: each point carries exactly one
/// `"timeUnixNano"` key (a sum's start time is `"startTimeUnixNano"`; no exemplars are sent).
pub fn count_points_in_file(path: &Path) -> u64 {
    const KEY: &[u8] = b"\"timeUnixNano\"";
    let mut file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return 0,
        Err(e) => panic!("{}: {e}", path.display()),
    };
    let mut buf = vec![0u8; 8 << 20];
    // The last KEY.len() - 1 bytes of the previous piece, which a key may straddle.
    let mut carry = 0usize;
    let mut n = 0u64;
    loop {
        let got = file
            .read(&mut buf[carry..])
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        if got == 0 {
            return n;
        }
        let end = carry + got;
        n += buf[..end].windows(KEY.len()).filter(|w| *w == KEY).count() as u64;
        let keep = (KEY.len() - 1).min(end);
        buf.copy_within(end - keep..end, 0);
        carry = keep;
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
        let ports = free_ports();
        let [grpc, http, telemetry] = ports;
        let out = out_file(dir.path(), 1);
        let stderr = Arc::new(Mutex::new(String::new()));
        let child = spawn_collector(bin, dir.path(), ports, &out, &stderr)?;
        let mut c = Collector {
            child,
            stderr,
            out,
            grpc_endpoint: format!("http://127.0.0.1:{grpc}"),
            http_endpoint: format!("http://127.0.0.1:{http}/v1/metrics"),
            telemetry_url: format!("http://127.0.0.1:{telemetry}/metrics"),
            ports,
            lives: 1,
            exported_before: 0,
            _dir: dir,
        };
        c.wait_ready([grpc, http]).await?;
        Ok(c)
    }

    /// Stops the Collector with SIGTERM and waits (30 s, then SIGKILL) until it has exited: its
    /// receiver has answered the requests it took and its exporter has closed its file. The
    /// points of that file are added to [`Collector::exported_points`] and the file removed.
    /// Returns the points this life exported.
    pub async fn stop(&mut self) -> u64 {
        if !matches!(self.child.try_wait(), Ok(None)) {
            return 0;
        }
        // SAFETY: kill(2) on the pid of a child this struct owns and has not reaped.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(30);
        while matches!(self.child.try_wait(), Ok(None)) {
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "the Collector did not exit within 30 s of SIGTERM:\n{}",
                    self.stderr()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let n = count_points_in_file(&self.out);
        let _ = std::fs::remove_file(&self.out);
        self.exported_before += n;
        n
    }

    /// Starts the stopped Collector again on the same ports (the same endpoints), its exporter
    /// writing a new file, and waits (bounded) until it answers. A port another process took in
    /// between fails the call.
    pub async fn start_again(&mut self) {
        assert!(
            !matches!(self.child.try_wait(), Ok(None)),
            "start_again: the Collector is running"
        );
        self.lives += 1;
        self.out = out_file(self._dir.path(), self.lives);
        let [grpc, http, _] = self.ports;
        let mut last = String::new();
        // The ports were just freed: a socket of the old process may linger briefly.
        for _ in 0..3 {
            let child = spawn_collector(
                &otelcol_binary(),
                self._dir.path(),
                self.ports,
                &self.out,
                &self.stderr,
            )
            .unwrap_or_else(|e| panic!("restarting the Collector: {e}"));
            self.child = child;
            match self.wait_ready([grpc, http]).await {
                Ok(()) => return,
                Err(e) => last = e,
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        panic!("the Collector did not start again on its ports: {last}");
    }

    /// Every point the exporter wrote, over every life: the lives that ended and the file of the
    /// running one so far.
    pub fn exported_points(&self) -> u64 {
        // A stopped life's file is already counted and removed: it reads as 0.
        self.exported_before + count_points_in_file(&self.out)
    }

    /// Whether the Collector is running (not stopped, not exited).
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// How many times the Collector was started.
    pub fn lives(&self) -> u32 {
        self.lives
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
