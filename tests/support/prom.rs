//! A real Prometheus (Debian's `prometheus`, 2.42) scraping a real node_exporter
//! (`prometheus-node-exporter`), both on 127.0.0.1, for tests of the Prometheus backend against
//! this machine's real values.
//!
//! Used as `support::prom`. It depends only on std, tempfile, serde_json, reqwest and tokio.
//! The helpers are blocking; they run their HTTP requests on a private thread with its own
//! runtime, so they work from plain `#[test]`s and from inside `#[tokio::test]`s alike.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The recording rules load-watcher queries (as `avg_over_time(<name>[15m])` and friends,
/// optionally with `{instance="..."}`), written over node_exporter metrics. Every rule keeps the
/// `instance` (and `job`) labels of its inputs.
///
/// - `instance:node_cpu:ratio`: busy fraction of all CPUs together, 0-1 (idle, iowait and steal
///   count as not busy), as busy seconds over all seconds so it stays in range even when the
///   per-CPU counters do not advance by exactly one second per second.
/// - `instance:node_memory_utilisation:ratio`: 1 - MemAvailable / MemTotal.
/// - `instance:node_network_{receive,transmit}_bytes:rate:sum`: bytes/s over every device but `lo`.
/// - `instance:node_network_{receive,transmit}_drop_excluding_lo:rate5m`: dropped packets/s over
///   every device but `lo`.
/// - `instance_device:node_disk_io_time_seconds:rate5m`: per device, seconds spent doing I/O per
///   second (0-1 for a device that serves one request at a time).
pub const RECORDING_RULES: &str = r#"groups:
  - name: kube-prober-load-watcher
    rules:
      - record: instance:node_cpu:ratio
        expr: |
          sum without (cpu, mode) (rate(node_cpu_seconds_total{mode!~"idle|iowait|steal"}[1m]))
            /
          sum without (cpu, mode) (rate(node_cpu_seconds_total[1m]))
      - record: instance:node_memory_utilisation:ratio
        expr: |
          1 - node_memory_MemAvailable_bytes / node_memory_MemTotal_bytes
      - record: instance:node_network_receive_bytes:rate:sum
        expr: |
          sum without (device) (rate(node_network_receive_bytes_total{device!="lo"}[1m]))
      - record: instance:node_network_transmit_bytes:rate:sum
        expr: |
          sum without (device) (rate(node_network_transmit_bytes_total{device!="lo"}[1m]))
      - record: instance:node_network_receive_drop_excluding_lo:rate5m
        expr: |
          sum without (device) (rate(node_network_receive_drop_total{device!="lo"}[5m]))
      - record: instance:node_network_transmit_drop_excluding_lo:rate5m
        expr: |
          sum without (device) (rate(node_network_transmit_drop_total{device!="lo"}[5m]))
      - record: instance_device:node_disk_io_time_seconds:rate5m
        expr: |
          rate(node_disk_io_time_seconds_total[5m])
"#;

/// Bound on each process becoming ready (node_exporter serving /metrics, Prometheus /-/ready).
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// Bound on each HTTP request.
const HTTP_TIMEOUT: Duration = Duration::from_secs(5);
/// Attempts when a freshly picked port turns out to be taken by the time the child binds it.
const BIND_ATTEMPTS: usize = 5;
/// Lines of a child's stderr quoted in panic messages.
const TAIL_LINES: usize = 40;

/// One (labels, value) sample of an instant-query result.
pub type Sample = (BTreeMap<String, String>, f64);

/// A real Prometheus scraping a real node_exporter; both are killed (and reaped) on drop.
pub struct RealPrometheus {
    /// `http://127.0.0.1:PORT` of Prometheus.
    pub url: String,
    /// `127.0.0.1:PORT` of node_exporter: the `instance` label of its series.
    pub node_exporter_instance: String,
    // Drop order matters: the children go first, the directory holding their files last.
    prometheus: ChildGuard,
    node_exporter: ChildGuard,
    client: reqwest::Client,
    dir: tempfile::TempDir,
}

impl RealPrometheus {
    /// Starts node_exporter and Prometheus (scrape and evaluation interval 1 s, storage in a
    /// TempDir, each on a free 127.0.0.1 port), loading [`RECORDING_RULES`] when `rules` is true,
    /// and waits (at most 30 s each) until node_exporter serves /metrics and Prometheus answers
    /// /-/ready. Panics, with the children's stderr, when either does not come up.
    pub fn start(rules: bool) -> RealPrometheus {
        RealPrometheus::start_with(rules, &[])
    }

    /// As [`RealPrometheus::start`], and for each of `instances` one more job scraping the same
    /// node_exporter with its `instance` label set to that value (`worker-b.example:9100`), as
    /// if it were another node's exporter.
    pub fn start_with(rules: bool, instances: &[&str]) -> RealPrometheus {
        let node_exporter_bin = binary("prometheus-node-exporter");
        let prometheus_bin = binary("prometheus");
        let dir = tempfile::Builder::new()
            .prefix("kube-prober-prometheus-")
            .tempdir()
            .expect("creating a temporary directory for Prometheus");
        let client = reqwest::Client::builder()
            .no_proxy()
            .timeout(HTTP_TIMEOUT)
            // Every request runs on a fresh runtime: never reuse a connection across them.
            .pool_max_idle_per_host(0)
            .build()
            .expect("building the HTTP client");

        let (node_exporter, node_exporter_instance) = spawn_listening(
            "node_exporter",
            &node_exporter_bin,
            dir.path(),
            |addr| vec![format!("--web.listen-address={addr}")],
            |addr| {
                matches!(
                    http_get(&client, &format!("http://{addr}/metrics"), &[]),
                    Ok((200, body)) if body.contains("node_cpu_seconds_total")
                )
            },
            &[],
        );

        let rules_path = dir.path().join("rules.yml");
        let config_path = dir.path().join("prometheus.yml");
        let data_path = dir.path().join("data");
        let mut config = String::from(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n",
        );
        if rules {
            std::fs::write(&rules_path, RECORDING_RULES).expect("writing rules.yml");
            config.push_str(&format!("rule_files:\n  - {}\n", rules_path.display()));
        }
        config.push_str(&format!(
            "scrape_configs:\n  - job_name: node\n    static_configs:\n      - targets: ['{node_exporter_instance}']\n"
        ));
        for (i, instance) in instances.iter().enumerate() {
            config.push_str(&format!(
                "  - job_name: node-{i}\n    static_configs:\n      - targets: ['{node_exporter_instance}']\n    relabel_configs:\n      - target_label: instance\n        replacement: '{instance}'\n"
            ));
        }
        std::fs::write(&config_path, config).expect("writing prometheus.yml");

        let (prometheus, prometheus_addr) = spawn_listening(
            "prometheus",
            &prometheus_bin,
            dir.path(),
            |addr| {
                vec![
                    format!("--config.file={}", config_path.display()),
                    format!("--storage.tsdb.path={}", data_path.display()),
                    format!("--web.listen-address={addr}"),
                ]
            },
            |addr| {
                matches!(
                    http_get(&client, &format!("http://{addr}/-/ready"), &[]),
                    Ok((200, _))
                )
            },
            &[&node_exporter],
        );

        RealPrometheus {
            url: format!("http://{prometheus_addr}"),
            node_exporter_instance,
            prometheus,
            node_exporter,
            client,
            dir,
        }
    }

    /// Polls the instant query `query` until its result vector is non-empty and returns the
    /// first sample's value. Panics with the last response (and the children's stderr) when
    /// `timeout` passes first or Prometheus exits.
    pub fn wait_for(&self, query: &str, timeout: Duration) -> f64 {
        let deadline = Instant::now() + timeout;
        loop {
            let last = match self.try_query(query) {
                Ok(samples) if !samples.is_empty() => return samples[0].1,
                Ok(_) => "an empty result".to_string(),
                Err(e) => e,
            };
            if let Some(status) = self.prometheus.exited() {
                panic!(
                    "Prometheus exited ({status}) while waiting for `{query}`; last response: {last}\n{}",
                    self.diagnostics()
                );
            }
            if Instant::now() >= deadline {
                panic!(
                    "`{query}` still had no result after {timeout:?}; last response: {last}\n{}",
                    self.diagnostics()
                );
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// One instant query; returns the (labels, value) pairs of its vector result (a scalar
    /// result gives one pair with no labels). Panics when the query fails.
    pub fn query(&self, query: &str) -> Vec<Sample> {
        self.try_query(query)
            .unwrap_or_else(|e| panic!("query `{query}` failed: {e}\n{}", self.diagnostics()))
    }

    /// One instant query; `Err` carries the response (or transport error) for messages.
    pub fn try_query(&self, query: &str) -> Result<Vec<Sample>, String> {
        let url = format!("{}/api/v1/query", self.url);
        let (status, body) = http_get(&self.client, &url, &[("query", query)])?;
        parse_query_response(status, &body)
    }

    /// Stops node_exporter (killed and reaped): Prometheus' next scrape of it fails and marks
    /// its series stale.
    pub fn stop_node_exporter(&self) {
        let mut child = self
            .node_exporter
            .child
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let _ = child.kill();
        let _ = child.wait();
    }

    /// The tails of both children's stderr, for panic messages.
    pub fn diagnostics(&self) -> String {
        format!(
            "{}\n{}",
            self.prometheus.describe(),
            self.node_exporter.describe()
        )
    }

    /// The temporary directory holding the config, rules, TSDB and the children's stderr.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

/// `name` on PATH (or in /usr/bin); panics telling how to install it when it is missing.
pub fn binary(name: &str) -> PathBuf {
    let path = std::env::var("PATH").unwrap_or_default();
    path.split(':')
        .filter(|d| !d.is_empty())
        .chain(["/usr/bin", "/usr/local/bin"])
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "`{name}` not found on PATH or in /usr/bin: run `bash .ci/test`, which installs \
                 Debian's prometheus and prometheus-node-exporter packages"
            )
        })
}

/// A child process, killed and reaped on drop, with its stdout+stderr in a file.
struct ChildGuard {
    name: &'static str,
    child: Mutex<Child>,
    log: PathBuf,
}

impl ChildGuard {
    fn exited(&self) -> Option<ExitStatus> {
        let mut child = self.child.lock().unwrap_or_else(|e| e.into_inner());
        child.try_wait().ok().flatten()
    }

    fn describe(&self) -> String {
        format!(
            "--- {} output (last {TAIL_LINES} lines of {}):\n{}",
            self.name,
            self.log.display(),
            tail(&self.log, TAIL_LINES)
        )
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let child = self.child.get_mut().unwrap_or_else(|e| e.into_inner());
        let _ = child.kill();
        let _ = child.wait();
    }
}

pub use crate::ports::free_port;

/// Starts `bin` with `args(addr)` on a free 127.0.0.1 port and waits (at most READY_TIMEOUT)
/// until `ready(addr)`; picks another port when the child reports its port taken. `others` are
/// quoted in panic messages.
fn spawn_listening(
    name: &'static str,
    bin: &Path,
    dir: &Path,
    args: impl Fn(&str) -> Vec<String>,
    ready: impl Fn(&str) -> bool,
    others: &[&ChildGuard],
) -> (ChildGuard, String) {
    let log = dir.join(format!("{name}.log"));
    for attempt in 1..=BIND_ATTEMPTS {
        let addr = format!("127.0.0.1:{}", free_port());
        let out = File::create(&log).expect("creating a child's log file");
        let err = out.try_clone().expect("cloning a file handle");
        let mut cmd = Command::new(bin);
        cmd.args(args(&addr))
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        let child =
            crate::owned::spawn(cmd).unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
        let guard = ChildGuard {
            name,
            child: Mutex::new(child),
            log: log.clone(),
        };
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(status) = guard.exited() {
                let output = tail(&log, TAIL_LINES);
                if output.contains("address already in use") && attempt < BIND_ATTEMPTS {
                    break; // another process took the port in between; try a new one
                }
                panic!(
                    "{name} exited ({status}) before becoming ready on {addr}\n{}{}",
                    guard.describe(),
                    describe_all(others)
                );
            }
            if ready(&addr) {
                return (guard, addr);
            }
            if Instant::now() >= deadline {
                panic!(
                    "{name} not ready on {addr} within {READY_TIMEOUT:?}\n{}{}",
                    guard.describe(),
                    describe_all(others)
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    unreachable!("the last attempt returns or panics")
}

fn describe_all(guards: &[&ChildGuard]) -> String {
    guards
        .iter()
        .map(|g| format!("\n{}", g.describe()))
        .collect()
}

/// The last `n` lines of the file at `path` (lossily decoded).
fn tail(path: &Path, n: usize) -> String {
    match std::fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(n)..].join("\n")
        }
        Err(e) => format!("({}: {e})", path.display()),
    }
}

/// A blocking GET with `query` parameters: (status, body), or the transport error. Runs on its
/// own thread and current-thread runtime so callers may be inside a Tokio runtime or not.
fn http_get(
    client: &reqwest::Client,
    url: &str,
    query: &[(&str, &str)],
) -> Result<(u16, String), String> {
    std::thread::scope(|s| {
        s.spawn(|| {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| format!("building a runtime: {e}"))?;
            rt.block_on(async {
                let mut req = client.get(url);
                if !query.is_empty() {
                    req = req.query(query);
                }
                let resp = req.send().await.map_err(|e| error_chain(url, &e))?;
                let status = resp.status().as_u16();
                let body = resp.text().await.map_err(|e| error_chain(url, &e))?;
                Ok((status, body))
            })
        })
        .join()
        .unwrap_or_else(|_| Err(format!("GET {url}: the request thread panicked")))
    })
}

fn error_chain(url: &str, e: &(dyn std::error::Error + 'static)) -> String {
    let mut msg = format!("GET {url}: {e}");
    let mut source = e.source();
    while let Some(s) = source {
        msg.push_str(&format!(": {s}"));
        source = s.source();
    }
    msg
}

/// Parses a `/api/v1/query` response into (labels, value) pairs.
fn parse_query_response(status: u16, body: &str) -> Result<Vec<Sample>, String> {
    let v: serde_json::Value = serde_json::from_str(body)
        .map_err(|e| format!("HTTP {status}, body is not JSON ({e}): {body}"))?;
    if status != 200 || v["status"] != "success" {
        return Err(format!("HTTP {status}: {body}"));
    }
    let data = &v["data"];
    let bad = |what: &str| format!("{what} in HTTP {status}: {body}");
    let value = |pair: &serde_json::Value| -> Result<f64, String> {
        pair[1]
            .as_str()
            .and_then(|s| s.parse::<f64>().ok())
            .ok_or_else(|| bad("a malformed sample value"))
    };
    match data["resultType"].as_str() {
        Some("vector") => data["result"]
            .as_array()
            .ok_or_else(|| bad("no result array"))?
            .iter()
            .map(|sample| {
                let labels = sample["metric"]
                    .as_object()
                    .ok_or_else(|| bad("a sample without labels"))?
                    .iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                    .collect();
                Ok((labels, value(&sample["value"])?))
            })
            .collect(),
        Some("scalar") => Ok(vec![(BTreeMap::new(), value(&data["result"])?)]),
        _ => Err(bad("not a vector or scalar result")),
    }
}

/// A real Prometheus alone, scraping what the caller configures and loading the caller's rule
/// files (the deploy tests: kube-prober's own targets, dashboards and alert rules). Scrape and
/// evaluation interval 1 s, storage in a TempDir; killed on drop.
pub struct ScrapingPrometheus {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    prometheus: ChildGuard,
    client: reqwest::Client,
    dir: tempfile::TempDir,
}

impl ScrapingPrometheus {
    /// `scrape_configs` is the YAML list under `scrape_configs:` (indented by two spaces).
    pub fn start(scrape_configs: &str, rule_files: &[&Path]) -> ScrapingPrometheus {
        let mut config = String::from(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n",
        );
        if !rule_files.is_empty() {
            config.push_str("rule_files:\n");
            for f in rule_files {
                config.push_str(&format!("  - {}\n", f.display()));
            }
        }
        config.push_str("scrape_configs:\n");
        config.push_str(scrape_configs);
        ScrapingPrometheus::start_with_config(&binary("prometheus"), &config)
    }

    /// Runs the Prometheus binary `prometheus_bin` on `config`, a whole configuration file's
    /// text, exactly as given.
    pub fn start_with_config(prometheus_bin: &Path, config: &str) -> ScrapingPrometheus {
        let dir = tempfile::Builder::new()
            .prefix("kube-prober-prometheus-")
            .tempdir()
            .expect("creating a temporary directory for Prometheus");
        let client = reqwest::Client::builder()
            .no_proxy()
            .timeout(HTTP_TIMEOUT)
            .pool_max_idle_per_host(0)
            .build()
            .expect("building the HTTP client");
        let config_path = dir.path().join("prometheus.yml");
        let data_path = dir.path().join("data");
        std::fs::write(&config_path, config).expect("writing prometheus.yml");
        let (prometheus, addr) = spawn_listening(
            "prometheus",
            prometheus_bin,
            dir.path(),
            |addr| {
                vec![
                    format!("--config.file={}", config_path.display()),
                    format!("--storage.tsdb.path={}", data_path.display()),
                    format!("--web.listen-address={addr}"),
                ]
            },
            |addr| {
                matches!(
                    http_get(&client, &format!("http://{addr}/-/ready"), &[]),
                    Ok((200, _))
                )
            },
            &[],
        );
        ScrapingPrometheus {
            url: format!("http://{addr}"),
            prometheus,
            client,
            dir,
        }
    }

    /// One instant query; `Err` carries the response (or transport error).
    pub fn try_query(&self, query: &str) -> Result<Vec<Sample>, String> {
        let url = format!("{}/api/v1/query", self.url);
        let (status, body) = http_get(&self.client, &url, &[("query", query)])?;
        parse_query_response(status, &body)
    }

    /// GET a path of the HTTP API: (status, body).
    pub fn get(&self, path: &str) -> Result<(u16, String), String> {
        http_get(&self.client, &format!("{}{path}", self.url), &[])
    }

    /// The tail of Prometheus' output, for panic messages.
    pub fn diagnostics(&self) -> String {
        self.prometheus.describe()
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}
