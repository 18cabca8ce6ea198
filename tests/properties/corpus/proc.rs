//! `corpus/proc/`: `/proc` and `/sys` files through the procfs parsers
//! (`src/sources/procfs.rs`) and the pressure totals, then the captured ones through the host
//! usage source into the hub.

use std::time::{Duration, SystemTime};

use kube_prober::hub::{RunOutcome, Store};
use kube_prober::model::Resource;
use kube_prober::sources::procfs::{self, CpuTimes, parse_pressure_totals};
use kube_prober::sources::usage::host::{HostConfig, HostFetcher};
use kube_prober::sources::usage::run_once;

use super::{assert_every_entry_has_a_row, entries, read};

const KIND: &str = "proc";

/// What a file parses to.
#[derive(Debug)]
enum Want {
    /// `/proc/stat`: the CPUs with a line of their own and the aggregate line.
    Stat { cpus: &'static [u32], all: CpuTimes },
    /// `/proc/meminfo` in kB; `estimated` when MemAvailable was absent.
    MemInfo {
        total_kib: u64,
        available_kib: u64,
        estimated: bool,
    },
    /// `/proc/vmstat`: the counters read, in their order.
    VmStat(&'static [(&'static str, u64)]),
    /// `/proc/net/dev`: (interface, rx bytes, tx bytes), by name.
    NetDev(&'static [(&'static str, u64, u64)]),
    /// `/proc/diskstats`: (whole disk, io_ticks ms), by name.
    DiskStats(&'static [(&'static str, u64)]),
    /// A pressure file: the `some` and `full` totals in microseconds.
    Pressure(Option<u64>, Option<u64>),
    /// `/proc/self/auxv`: AT_PAGESZ.
    Auxv(u64),
    /// Sysfs `nodeN/meminfo`, in kB.
    NodeMemInfo { total_kib: u64, free_kib: u64 },
    /// A kernel id list (`/sys/devices/system/cpu/online`).
    Ids(&'static [u32]),
}

#[allow(clippy::too_many_arguments)]
const fn times(
    user: u64,
    nice: u64,
    system: u64,
    idle: u64,
    iowait: u64,
    irq: u64,
    softirq: u64,
    steal: u64,
) -> CpuTimes {
    CpuTimes {
        user,
        nice,
        system,
        idle,
        iowait,
        irq,
        softirq,
        steal,
    }
}

/// The aggregate line of the captured `/proc/stat`: with an offline CPU its counters still
/// count in it (the kernel sums every possible CPU there, and prints only the online ones).
const ALL: CpuTimes = times(1409341, 498259, 330624, 2508903, 12674, 0, 10508, 1216);

const ROWS: &[(&str, Want)] = &[
    (
        "stat-6.18",
        Want::Stat {
            cpus: &[0, 1],
            all: ALL,
        },
    ),
    (
        "stat-6.18-cpu1-offline",
        Want::Stat {
            cpus: &[0],
            all: ALL,
        },
    ),
    (
        "meminfo-6.18",
        Want::MemInfo {
            total_kib: 24684084,
            available_kib: 23337300,
            estimated: false,
        },
    ),
    (
        "meminfo-pre-3.14",
        Want::MemInfo {
            total_kib: 24684084,
            // MemFree + Buffers + Cached.
            available_kib: 5614064 + 685840 + 16092504,
            estimated: true,
        },
    ),
    (
        "vmstat-6.18",
        Want::VmStat(&[
            ("pgfault", 799901858),
            ("pgmajfault", 218755),
            ("pswpin", 0),
            ("pswpout", 0),
            ("oom_kill", 0),
        ]),
    ),
    (
        "vmstat-pre-4.13",
        Want::VmStat(&[
            ("pgfault", 799901858),
            ("pgmajfault", 218755),
            ("pswpin", 0),
            ("pswpout", 0),
        ]),
    ),
    (
        "net-dev-6.18",
        Want::NetDev(&[
            ("eth0", 3096645628, 13170529),
            ("ifb0", 0, 0),
            ("ifb1", 0, 0),
            ("lo", 887547617626, 887547617626),
        ]),
    ),
    ("net-dev-6.18-netns", Want::NetDev(&[("lo", 0, 0)])),
    (
        "net-dev-2.6-glued",
        Want::NetDev(&[
            ("eth0", 3096645628, 13170529),
            ("ifb0", 0, 0),
            ("ifb1", 0, 0),
            ("lo", 887547617626, 887547617626),
        ]),
    ),
    // loop* and zram* are not disks.
    ("diskstats-6.18", Want::DiskStats(&[("vda", 308984)])),
    ("diskstats-pre-4.18", Want::DiskStats(&[("vda", 308984)])),
    (
        "pressure-cpu-6.18",
        Want::Pressure(Some(5384908002), Some(0)),
    ),
    (
        "pressure-io-6.18",
        Want::Pressure(Some(158329993), Some(90732484)),
    ),
    (
        "pressure-memory-6.18",
        Want::Pressure(Some(34070742), Some(15957719)),
    ),
    // Before 5.13 the CPU has no `full` line: no value, not a zero.
    (
        "pressure-cpu-pre-5.13",
        Want::Pressure(Some(157656722), None),
    ),
    ("auxv-6.18-x86_64", Want::Auxv(4096)),
    (
        "node0-meminfo-6.18",
        Want::NodeMemInfo {
            total_kib: 24684084,
            free_kib: 5607076,
        },
    ),
    ("cpu-online-6.18", Want::Ids(&[0, 1])),
    ("cpu-online-sparse", Want::Ids(&[0, 2, 3])),
];

/// What `b` parses to, in the shape of `want`, or the parser's error.
fn parse(b: &[u8], want: &Want) -> Result<String, String> {
    let text = |e: kube_prober::shared::error::ParseError| e.to_string();
    Ok(match want {
        Want::Stat { .. } => {
            let s = procfs::parse_stat(b).map_err(text)?;
            let cpus: Vec<u32> = s.per_cpu.keys().copied().collect();
            format!("{cpus:?} {:?}", s.aggregate)
        }
        Want::MemInfo { .. } => {
            let m = procfs::parse_meminfo(b).map_err(text)?;
            format!(
                "{} {} {}",
                m.total_bytes, m.available_bytes, m.available_estimated
            )
        }
        Want::VmStat(_) => format!("{:?}", procfs::parse_vmstat(b).map_err(text)?),
        Want::NetDev(_) => {
            let m = procfs::parse_net_dev(b).map_err(text)?;
            let v: Vec<_> = m
                .iter()
                .map(|(k, c)| (k.as_str(), c.rx_bytes, c.tx_bytes))
                .collect();
            format!("{v:?}")
        }
        Want::DiskStats(_) => {
            let m = procfs::parse_diskstats(b).map_err(text)?;
            let v: Vec<_> = m.iter().map(|(k, t)| (k.as_str(), *t)).collect();
            format!("{v:?}")
        }
        Want::Pressure(..) => {
            let [some, full] = parse_pressure_totals(b);
            format!("{some:?} {full:?}")
        }
        Want::Auxv(_) => format!("{:?}", procfs::parse_auxv_page_size(b)),
        Want::NodeMemInfo { .. } => {
            let m = procfs::parse_node_meminfo(b).map_err(text)?;
            format!("{} {}", m.total_bytes, m.free_bytes)
        }
        Want::Ids(_) => format!("{:?}", procfs::parse_id_list(b)),
    })
}

/// `want` in the shape [`parse`] gives.
fn expected(want: &Want) -> String {
    const KIB: u64 = 1024;
    match want {
        Want::Stat { cpus, all } => format!("{cpus:?} {:?}", Some(all)),
        Want::MemInfo {
            total_kib,
            available_kib,
            estimated,
        } => format!("{} {} {estimated}", total_kib * KIB, available_kib * KIB),
        Want::VmStat(v) => format!("{v:?}"),
        Want::NetDev(v) => format!("{v:?}"),
        Want::DiskStats(v) => format!("{v:?}"),
        Want::Pressure(some, full) => format!("{some:?} {full:?}"),
        Want::Auxv(page) => format!("{:?}", Some(page)),
        Want::NodeMemInfo {
            total_kib,
            free_kib,
        } => format!("{} {}", total_kib * KIB, free_kib * KIB),
        Want::Ids(ids) => format!("{:?}", Some(ids.to_vec())),
    }
}

#[test]
fn every_proc_file_parses_to_its_expected_value() {
    assert_every_entry_has_a_row(KIND, ROWS.iter().map(|(name, _)| *name));
    let mut wrong = Vec::new();
    for (name, want) in ROWS {
        let got = parse(&read(KIND, name), want);
        if got.as_ref() != Ok(&expected(want)) {
            wrong.push(format!("{name}: got {got:?}, want {:?}", expected(want)));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The captured `stat`, `meminfo`, `net/dev` and `diskstats` (and each variant of them) as a
/// procfs root for the host usage source, through the hub: the memory used is MemTotal -
/// MemAvailable (or its estimate), the rates between two reads of the same files are zero
/// (none where there is nothing to measure), and nothing is dropped.
#[tokio::test(start_paused = true)]
async fn captured_proc_files_through_the_host_source_into_the_hub() {
    let names = entries(KIND);
    let pick =
        |prefix: &str| -> Vec<&String> { names.iter().filter(|n| n.starts_with(prefix)).collect() };
    for stat in pick("stat-") {
        for meminfo in pick("meminfo-") {
            for (net, disks) in pick("net-dev-")
                .into_iter()
                .zip(pick("diskstats-").into_iter().cycle())
            {
                let case = format!("{stat} {meminfo} {net} {disks}");
                let dir = tempfile::tempdir().unwrap();
                let root = dir.path();
                std::fs::create_dir(root.join("net")).unwrap();
                for (to, from) in [
                    ("stat", stat),
                    ("meminfo", meminfo),
                    ("net/dev", net),
                    ("diskstats", disks),
                ] {
                    std::fs::write(root.join(to), read(KIND, from)).unwrap();
                }
                let store = Store::new();
                let mut host = HostFetcher::new(HostConfig {
                    procfs: root.to_path_buf(),
                    node_name: "n1".into(),
                });
                let outcome = run_once(&mut host, &store, Duration::from_secs(10)).await;
                assert_eq!(outcome, RunOutcome::Ok, "{case}");
                let snap = store.snapshot(SystemTime::now());
                let load = &snap.nodes["n1"];
                let mem = procfs::parse_meminfo(&read(KIND, meminfo)).unwrap();
                let get = |r: Resource| load.latest.get(&r).copied();
                assert_eq!(
                    get(Resource::Memory),
                    mem.used_ratio(),
                    "{case}: memory used over MemTotal"
                );
                // The same counters twice: a rate of 0, but only with an interface besides
                // `lo` (a fresh network namespace has none: no rate at all).
                let interfaces = procfs::parse_net_dev(&read(KIND, net)).unwrap();
                let rate = interfaces.keys().any(|i| i != "lo").then_some(0.0);
                assert_eq!(get(Resource::NetworkReceive), rate, "{case}");
                assert_eq!(get(Resource::NetworkTransmit), rate, "{case}");
                // The same stat twice: no CPU time elapsed, no ratio (not a made-up 0).
                assert_eq!(get(Resource::Cpu), None, "{case}");
                let capacity = load.capacity.expect("a capacity");
                assert_eq!(capacity.memory_bytes, mem.total_bytes as f64, "{case}");
                // The CPUs online: an offline one is not capacity.
                let online = procfs::parse_stat(&read(KIND, stat)).unwrap().per_cpu.len();
                assert_eq!(capacity.cpu_cores, online as f64, "{case}");
                assert!(
                    snap.sources["host"].dropped.is_empty(),
                    "{case}: {:?}",
                    snap.sources["host"].dropped
                );
            }
        }
    }
}
