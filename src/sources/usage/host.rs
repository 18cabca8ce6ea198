//! The host fetcher: this machine's load from procfs (root configurable, like node_exporter's
//! `--path.procfs`). CPU, network and disk are rates between two reads; the first fetch reads
//! twice, [`PRIME`] apart, so even the first sample has every value. Beside the load, the
//! node's pressure stall totals (`pressure/{cpu,memory,io}`), as counters.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use super::{Fetched, UsageFetcher};
use crate::model::{NodeCapacity, NodePressure, Pressure, Resource, UsageSample};
use crate::shared::error::{Error, ParseError};
use crate::sources::procfs::{self, CpuStat, NetCounters};

/// Gap between the two reads of the first fetch.
pub const PRIME: Duration = Duration::from_secs(1);

/// Settings of the host fetcher.
#[derive(Debug, Clone, PartialEq)]
pub struct HostConfig {
    /// The procfs mount, `/proc` on a normal host.
    pub procfs: PathBuf,
    /// The name this host is published under.
    pub node_name: String,
}

/// Counter readings at one instant.
#[derive(Debug, Clone)]
struct Counters {
    at: Instant,
    cpu: Option<CpuStat>,
    net: Option<BTreeMap<String, NetCounters>>,
    disks: Option<BTreeMap<String, u64>>,
}

#[derive(Debug)]
pub struct HostFetcher {
    cfg: HostConfig,
    prev: Option<Counters>,
}

async fn read(root: &Path, rel: &str) -> Result<Vec<u8>, Error> {
    let path = root.join(rel);
    tokio::fs::read(&path)
        .await
        .map_err(|source| Error::Io { path, source })
}

impl HostFetcher {
    pub fn new(cfg: HostConfig) -> Self {
        HostFetcher { cfg, prev: None }
    }

    async fn read_counters(&self, errors: &mut Vec<Error>) -> Counters {
        let root = &self.cfg.procfs;
        let cpu = keep(
            errors,
            read(root, "stat")
                .await
                .and_then(|b| Ok(procfs::parse_stat(&b)?)),
        );
        let net = keep(
            errors,
            read(root, "net/dev")
                .await
                .and_then(|b| Ok(procfs::parse_net_dev(&b)?)),
        );
        let disks = keep(
            errors,
            read(root, "diskstats")
                .await
                .and_then(|b| Ok(procfs::parse_diskstats(&b)?)),
        );
        Counters {
            at: Instant::now(),
            cpu,
            net,
            disks,
        }
    }
}

/// The pressure stall files of procfs, with the resource each names.
const PRESSURE_FILES: [(&str, &str); 3] = [
    ("cpu", "pressure/cpu"),
    ("memory", "pressure/memory"),
    ("io", "pressure/io"),
];

/// The node's pressure stall totals. A kernel without pressure stall information (before
/// 4.20, built without it, or booted with `psi=0`) has no `pressure/` folder: `None`, and no
/// error. A file that is there but unreadable, or has no `some` total, is an error kept in
/// `errors` (the run is counted as failed with the rest of the values kept).
async fn read_pressure(root: &Path, node: &str, errors: &mut Vec<Error>) -> Option<NodePressure> {
    let mut out = NodePressure {
        node: node.to_string(),
        totals: Vec::new(),
    };
    let mut found = false;
    for (resource, rel) in PRESSURE_FILES {
        let path = root.join(rel);
        let b = match tokio::fs::read(&path).await {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(source) => {
                errors.push(Error::Io { path, source });
                continue;
            }
        };
        found = true;
        let [some, full] = procfs::parse_pressure_totals(&b);
        if some.is_none() {
            errors.push(
                ParseError::Missing {
                    file: rel,
                    what: "a `some` line with total=",
                }
                .into(),
            );
            continue;
        }
        for (kind, total) in [("some", some), ("full", full)] {
            if let Some(us) = total {
                out.totals.push(Pressure {
                    resource,
                    kind,
                    seconds: us as f64 / 1e6,
                });
            }
        }
    }
    found.then_some(out)
}

/// The value, or `None` with the error kept.
fn keep<T>(errors: &mut Vec<Error>, r: Result<T, Error>) -> Option<T> {
    r.map_err(|e| errors.push(e)).ok()
}

/// Rates between two counter readings; each resource only where both readings have it.
fn rates(prev: &Counters, cur: &Counters) -> Vec<(Resource, f64)> {
    let mut out = Vec::new();
    let secs = cur.at.duration_since(prev.at).as_secs_f64();
    if let (Some(p), Some(c)) = (&prev.cpu, &cur.cpu)
        && let Some(u) = procfs::cpu_utilization(p, c)
    {
        out.push((Resource::Cpu, u));
    }
    if secs <= 0.0 {
        return out;
    }
    if let (Some(p), Some(c)) = (&prev.net, &cur.net) {
        let side = |f: fn(&NetCounters) -> u64| {
            let pick = |m: &BTreeMap<String, NetCounters>| {
                m.iter()
                    .filter(|(name, _)| name.as_str() != "lo")
                    .map(|(name, v)| (name.clone(), f(v)))
                    .collect::<BTreeMap<_, _>>()
            };
            procfs::counter_deltas(&pick(p), &pick(c))
        };
        let rx = side(|n| n.rx_bytes);
        let tx = side(|n| n.tx_bytes);
        for (resource, d) in [
            (Resource::NetworkReceive, &rx),
            (Resource::NetworkTransmit, &tx),
        ] {
            if !d.reset.is_empty() {
                tracing::debug!(interfaces = ?d.reset, resource = resource.as_str(), "counter went backwards; interface skipped this interval");
            }
            if d.keys > 0 {
                out.push((resource, d.sum as f64 / secs));
            }
        }
    }
    if let (Some(p), Some(c)) = (&prev.disks, &cur.disks) {
        let (max_ms, reset) = procfs::counter_delta_max(p, c);
        if !reset.is_empty() {
            tracing::debug!(disks = ?reset, "io_ticks went backwards; disk skipped this interval");
        }
        if let Some(ms) = max_ms {
            out.push((Resource::DiskIo, (ms as f64 / 1000.0 / secs).min(1.0)));
        }
    }
    out
}

impl UsageFetcher for HostFetcher {
    fn name(&self) -> &'static str {
        "host"
    }

    async fn fetch(&mut self) -> Fetched {
        let mut errors = Vec::new();
        if self.prev.is_none() {
            let first = self.read_counters(&mut errors).await;
            self.prev = Some(first);
            tokio::time::sleep(PRIME).await;
            errors.clear();
        }
        let cur = self.read_counters(&mut errors).await;
        let at = SystemTime::now();
        let mut values = self
            .prev
            .as_ref()
            .map(|p| rates(p, &cur))
            .unwrap_or_default();
        let mem = keep(
            &mut errors,
            read(&self.cfg.procfs, "meminfo")
                .await
                .and_then(|b| Ok(procfs::parse_meminfo(&b)?)),
        );
        // Memory used over MemTotal: the one definition of memory used, which the platform
        // metrics report in bytes.
        if let Some(ratio) = mem.and_then(|m| m.used_ratio()) {
            values.push((Resource::Memory, ratio));
        }
        let cpus = cur.cpu.as_ref().map(|c| c.per_cpu.len()).unwrap_or(0);
        self.prev = Some(cur);

        let node = self.cfg.node_name.clone();
        let mut fetched = Fetched {
            errors,
            ..Fetched::default()
        };
        if let Some(m) = mem
            && cpus > 0
        {
            fetched.capacities.push((
                node.clone(),
                NodeCapacity {
                    cpu_cores: cpus as f64,
                    memory_bytes: m.total_bytes as f64,
                },
            ));
        }
        fetched.pressure = read_pressure(&self.cfg.procfs, &node, &mut fetched.errors).await;
        if !values.is_empty() {
            fetched.samples.push(UsageSample { node, at, values });
        }
        fetched
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> Vec<u8> {
        let p = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/procfs")
            .join(name);
        std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("net")).unwrap();
        if files.iter().any(|(rel, _)| rel.starts_with("pressure/")) {
            std::fs::create_dir_all(dir.path().join("pressure")).unwrap();
        }
        for (rel, fix) in files {
            std::fs::write(dir.path().join(rel), fixture(fix)).unwrap();
        }
        dir
    }

    #[tokio::test(start_paused = true)]
    async fn first_fetch_has_every_resource_from_a_fixture_tree() {
        let dir = tree(&[
            ("stat", "stat_4cpu_a"),
            ("meminfo", "meminfo_modern"),
            ("net/dev", "net_dev_a"),
            ("diskstats", "diskstats_a"),
        ]);
        let mut f = HostFetcher::new(HostConfig {
            procfs: dir.path().to_path_buf(),
            node_name: "h1".into(),
        });
        // Both reads see the same files: network and disk rates are 0 but present; CPU has no
        // elapsed jiffies, so it is absent rather than a made-up number.
        let got = f.fetch().await;
        assert!(got.errors.is_empty(), "{:?}", got.errors);
        let s = &got.samples[0];
        assert_eq!(s.node, "h1");
        let v: BTreeMap<_, _> = s.values.iter().copied().collect();
        assert!(!v.contains_key(&Resource::Cpu), "{v:?}");
        assert_eq!(v[&Resource::NetworkReceive], 0.0);
        assert_eq!(v[&Resource::NetworkTransmit], 0.0);
        assert_eq!(v[&Resource::DiskIo], 0.0);
        let mem = procfs::parse_meminfo(&fixture("meminfo_modern")).unwrap();
        let (_, m) = s
            .values
            .iter()
            .find(|(r, _)| *r == Resource::Memory)
            .unwrap();
        assert_eq!(Some(*m), mem.used_ratio());
        assert_eq!(got.capacities[0].1.cpu_cores, 4.0);
        assert_eq!(got.capacities[0].1.memory_bytes, mem.total_bytes as f64);
        assert_eq!(
            got.pressure, None,
            "no pressure/ folder: no pressure, no error"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn pressure_totals_from_a_fixture_tree() {
        let dir = tree(&[
            ("stat", "stat_4cpu_a"),
            ("meminfo", "meminfo_modern"),
            ("net/dev", "net_dev_a"),
            ("diskstats", "diskstats_a"),
            ("pressure/cpu", "pressure_cpu"),
            ("pressure/memory", "pressure_memory"),
            ("pressure/io", "pressure_io"),
        ]);
        let mut f = HostFetcher::new(HostConfig {
            procfs: dir.path().to_path_buf(),
            node_name: "h1".into(),
        });
        let got = f.fetch().await;
        assert!(got.errors.is_empty(), "{:?}", got.errors);
        let p = got.pressure.expect("pressure totals");
        assert_eq!(p.node, "h1");
        let totals: Vec<_> = p
            .totals
            .iter()
            .map(|t| (t.resource, t.kind, t.seconds))
            .collect();
        assert_eq!(
            totals,
            [
                ("cpu", "some", 5036.197406),
                ("cpu", "full", 0.0),
                ("memory", "some", 153.702679),
                ("memory", "full", 90.543816),
                ("io", "some", 32.539654),
                ("io", "full", 15.84408),
            ]
        );
        // A kernel before 5.13 (no `full` line for cpu), and a file that does not parse: the
        // run keeps every total it could read and reports the broken file.
        std::fs::write(dir.path().join("pressure/cpu"), fixture("pressure_cpu_5_4")).unwrap();
        std::fs::write(dir.path().join("pressure/io"), "garbage\n").unwrap();
        let got = f.fetch().await;
        let p = got.pressure.expect("pressure totals");
        let kinds: Vec<_> = p.totals.iter().map(|t| (t.resource, t.kind)).collect();
        assert_eq!(
            kinds,
            [("cpu", "some"), ("memory", "some"), ("memory", "full")]
        );
        assert_eq!(p.totals[0].seconds, 40.188553);
        assert_eq!(got.errors.len(), 1, "{:?}", got.errors);
        assert!(
            got.errors[0].to_string().contains("pressure/io"),
            "{}",
            got.errors[0]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn second_fetch_computes_rates_between_fixtures() {
        let dir = tree(&[
            ("stat", "stat_4cpu_a"),
            ("meminfo", "meminfo_modern"),
            ("net/dev", "net_dev_a"),
            ("diskstats", "diskstats_a"),
        ]);
        let mut f = HostFetcher::new(HostConfig {
            procfs: dir.path().to_path_buf(),
            node_name: "h1".into(),
        });
        f.fetch().await;
        for (rel, fix) in [
            ("stat", "stat_4cpu_b"),
            ("net/dev", "net_dev_b"),
            ("diskstats", "diskstats_b"),
        ] {
            std::fs::write(dir.path().join(rel), fixture(fix)).unwrap();
        }
        tokio::time::advance(Duration::from_secs(10)).await;
        let got = f.fetch().await;
        assert!(got.errors.is_empty(), "{:?}", got.errors);
        let v: BTreeMap<_, _> = got.samples[0].values.iter().copied().collect();
        let want_cpu = procfs::cpu_utilization(
            &procfs::parse_stat(&fixture("stat_4cpu_a")).unwrap(),
            &procfs::parse_stat(&fixture("stat_4cpu_b")).unwrap(),
        )
        .unwrap();
        assert_eq!(v[&Resource::Cpu], want_cpu);
        assert!(v[&Resource::NetworkReceive] > 0.0);
        assert!(v[&Resource::DiskIo] > 0.0 && v[&Resource::DiskIo] <= 1.0);
    }

    #[tokio::test(start_paused = true)]
    async fn missing_files_fail_the_run_but_keep_what_worked() {
        let dir = tree(&[("meminfo", "meminfo_modern")]);
        let mut f = HostFetcher::new(HostConfig {
            procfs: dir.path().to_path_buf(),
            node_name: "h1".into(),
        });
        let got = f.fetch().await;
        assert_eq!(got.errors.len(), 3, "{:?}", got.errors);
        assert!(
            got.errors[0].to_string().contains("stat"),
            "{}",
            got.errors[0]
        );
        assert_eq!(got.samples[0].values.len(), 1);
        assert_eq!(got.samples[0].values[0].0, Resource::Memory);
    }
}
