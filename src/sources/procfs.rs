//! Pure parsers and counter-delta math for the Linux procfs and sysfs files kube-prober reads:
//! the one set, shared by the host usage source (`usage/host.rs`) and the task source
//! (`task/platform.rs`, and the kernel id lists of cpusets and online CPUs). The cgroup files'
//! own formats are parsed in the cgroup room (`task/cgroup/parse.rs`).
//!
//! Nothing in this module touches the filesystem: every parser takes the raw bytes of one
//! file (`/proc/stat`, `/proc/meminfo`, `/proc/vmstat`, `/proc/net/dev`, `/proc/diskstats`,
//! `/proc/self/auxv`, sysfs `nodeN/meminfo` and kernel id lists such as
//! `/sys/devices/system/cpu/online`) and returns typed values. Reading the files, keeping the
//! previous sample and deciding which interfaces or disks matter is the caller's job.
//!
//! Each quantity has one definition here, whoever reports it: busy CPU time is
//! [`CpuTimes::busy`], memory used is [`MemInfo::used_bytes`] (MemTotal - MemAvailable), and
//! the host's memory utilization is that figure over MemTotal ([`MemInfo::used_ratio`]).
//!
//! Parsers are strict about the lines they use (a malformed number is an error, never a
//! silent zero) and ignore lines they do not use.

use std::borrow::Borrow;
use std::collections::BTreeMap;

use crate::shared::error::ParseError;

// ---------------------------------------------------------------------------------------------
// Shared helpers
// ---------------------------------------------------------------------------------------------

/// Lines of `input` paired with their 1-based line numbers.
fn numbered_lines(input: &[u8]) -> impl Iterator<Item = (usize, &[u8])> {
    input
        .split(|&b| b == b'\n')
        .enumerate()
        .map(|(i, line)| (i + 1, line))
}

/// Whitespace-separated fields of one line.
fn fields(line: &[u8]) -> impl Iterator<Item = &[u8]> {
    line.split(u8::is_ascii_whitespace)
        .filter(|field| !field.is_empty())
}

/// Strict unsigned decimal: ASCII digits only (no sign, no spaces); overflow is rejected.
fn parse_u64(field: &[u8]) -> Option<u64> {
    if field.is_empty() {
        return None;
    }
    field.iter().try_fold(0u64, |acc, &b| {
        if b.is_ascii_digit() {
            acc.checked_mul(10)?.checked_add(u64::from(b - b'0'))
        } else {
            None
        }
    })
}

/// A field rendered for an error message, shortened so a garbage file cannot blow up a log line.
fn show(field: &[u8]) -> String {
    const MAX: usize = 40;
    let text = String::from_utf8_lossy(field);
    if text.chars().count() > MAX {
        let cut: String = text.chars().take(MAX).collect();
        format!("{cut}...")
    } else {
        text.into_owned()
    }
}

fn line_error(file: &'static str, line: usize, what: impl Into<String>) -> ParseError {
    ParseError::Line {
        file,
        line,
        what: what.into(),
    }
}

// ---------------------------------------------------------------------------------------------
// /proc/stat
// ---------------------------------------------------------------------------------------------

/// Jiffies of one CPU line. `busy()` excludes idle and iowait; guest/guest_nice are NOT added
/// (they are already counted in user/nice).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpuTimes {
    pub user: u64,
    pub nice: u64,
    pub system: u64,
    pub idle: u64,
    pub iowait: u64,
    pub irq: u64,
    pub softirq: u64,
    pub steal: u64,
}

impl CpuTimes {
    /// All jiffies of this CPU: busy plus idle and iowait (guest columns excluded).
    pub fn total(&self) -> u64 {
        self.busy().saturating_add(self.idle_all())
    }

    /// Idle jiffies: idle + iowait.
    pub fn idle_all(&self) -> u64 {
        self.idle.saturating_add(self.iowait)
    }

    /// Non-idle jiffies: user + nice + system + irq + softirq + steal.
    pub fn busy(&self) -> u64 {
        [self.nice, self.system, self.irq, self.softirq, self.steal]
            .into_iter()
            .fold(self.user, u64::saturating_add)
    }
}

/// The cpu lines of one /proc/stat sample.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CpuStat {
    /// The "cpu" line (sum over all CPUs), if present.
    pub aggregate: Option<CpuTimes>,
    /// The "cpuN" lines, keyed by N.
    pub per_cpu: BTreeMap<u32, CpuTimes>,
}

const STAT: &str = "stat";

/// Parses /proc/stat "cpu" and "cpuN" lines; other lines ignored. Old kernels have fewer columns
/// (at least 4: user nice system idle): missing trailing columns are 0. A cpu line with <4 numeric
/// columns or a non-numeric value is a ParseError::Line. No cpu lines at all: ParseError::Missing.
///
/// Columns past the eighth (guest, guest_nice and anything a future kernel adds) must be numeric
/// but are not stored. A repeated "cpu" or "cpuN" line is a ParseError::Line.
pub fn parse_stat(input: &[u8]) -> Result<CpuStat, ParseError> {
    let mut stat = CpuStat::default();
    for (line_no, line) in numbered_lines(input) {
        let mut cols = fields(line);
        let Some(label) = cols.next() else {
            continue;
        };
        let Some(suffix) = label.strip_prefix(b"cpu") else {
            continue;
        };
        let cpu = if suffix.is_empty() {
            None
        } else if suffix.iter().all(u8::is_ascii_digit) {
            let id = parse_u64(suffix)
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| {
                    line_error(
                        STAT,
                        line_no,
                        format!("cpu number out of range in {:?}", show(label)),
                    )
                })?;
            Some(id)
        } else {
            // Some other "cpu..." keyword: not a CPU time line.
            continue;
        };
        let times = parse_cpu_columns(cols).map_err(|what| line_error(STAT, line_no, what))?;
        let duplicate = match cpu {
            None => stat.aggregate.replace(times).is_some(),
            Some(id) => stat.per_cpu.insert(id, times).is_some(),
        };
        if duplicate {
            return Err(line_error(
                STAT,
                line_no,
                format!("duplicate {:?} line", show(label)),
            ));
        }
    }
    if stat.aggregate.is_none() && stat.per_cpu.is_empty() {
        return Err(ParseError::Missing {
            file: STAT,
            what: "cpu lines",
        });
    }
    Ok(stat)
}

fn parse_cpu_columns<'a>(cols: impl Iterator<Item = &'a [u8]>) -> Result<CpuTimes, String> {
    const MIN_COLUMNS: usize = 4;
    let mut values = [0u64; 8];
    let mut count = 0usize;
    for (i, col) in cols.enumerate() {
        let value = parse_u64(col)
            .ok_or_else(|| format!("invalid number {:?} in cpu column {}", show(col), i + 1))?;
        if let Some(slot) = values.get_mut(i) {
            *slot = value;
        }
        count = i + 1;
    }
    if count < MIN_COLUMNS {
        return Err(format!(
            "expected at least {MIN_COLUMNS} cpu time columns, found {count}"
        ));
    }
    let [user, nice, system, idle, iowait, irq, softirq, steal] = values;
    Ok(CpuTimes {
        user,
        nice,
        system,
        idle,
        iowait,
        irq,
        softirq,
        steal,
    })
}

/// Utilisation ratio in `[0, 1]` between two samples, computed per CPU over the CPUs present in BOTH
/// samples (so a CPU going offline or coming online does not distort it), skipping any CPU whose
/// total or busy counter went backwards (reset). Falls back to the aggregate line when per_cpu is
/// empty in either sample. Returns None when no usable CPU or zero elapsed jiffies. Clamp to `[0, 1]`.
///
/// The per-CPU deltas are summed (busy jiffies over total jiffies of the usable CPUs). A CPU whose
/// busy delta exceeds its total delta (idle or iowait went backwards, which some kernels do) is
/// counted as fully busy for its elapsed jiffies rather than inflating the others.
pub fn cpu_utilization(prev: &CpuStat, cur: &CpuStat) -> Option<f64> {
    let mut busy = 0u64;
    let mut total = 0u64;
    let mut add = |before: &CpuTimes, now: &CpuTimes| {
        let Some(elapsed) = now.total().checked_sub(before.total()) else {
            return;
        };
        let Some(worked) = now.busy().checked_sub(before.busy()) else {
            return;
        };
        total = total.saturating_add(elapsed);
        busy = busy.saturating_add(worked.min(elapsed));
    };
    if prev.per_cpu.is_empty() || cur.per_cpu.is_empty() {
        add(prev.aggregate.as_ref()?, cur.aggregate.as_ref()?);
    } else {
        for (id, now) in &cur.per_cpu {
            if let Some(before) = prev.per_cpu.get(id) {
                add(before, now);
            }
        }
    }
    if total == 0 {
        return None;
    }
    Some((busy as f64 / total as f64).clamp(0.0, 1.0))
}

// ---------------------------------------------------------------------------------------------
// /proc/meminfo
// ---------------------------------------------------------------------------------------------

/// Total and available memory from one /proc/meminfo sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemInfo {
    pub total_bytes: u64,
    pub available_bytes: u64,
    /// true when MemAvailable was absent (kernel < 3.14) and estimated as MemFree+Buffers+Cached (capped at total)
    pub available_estimated: bool,
}

impl MemInfo {
    /// Memory used, in bytes: MemTotal - MemAvailable (0 when available exceeds total). The one
    /// definition of "memory used": the platform's `memory_usage_bytes` is this figure and the
    /// host's memory utilization is this figure over MemTotal. Without MemAvailable (kernels
    /// before 3.14) it is MemTotal - MemFree - Buffers - Cached, floored at 0.
    pub fn used_bytes(&self) -> u64 {
        self.total_bytes.saturating_sub(self.available_bytes)
    }

    /// [`Self::used_bytes`] over MemTotal: 1 - available/total, in `[0, 1]`; None if total is 0
    pub fn used_ratio(&self) -> Option<f64> {
        if self.total_bytes == 0 {
            return None;
        }
        let ratio = self.used_bytes() as f64 / self.total_bytes as f64;
        Some(ratio.clamp(0.0, 1.0))
    }
}

const MEMINFO: &str = "meminfo";

/// The meminfo keys we read, in the order of the slots in `parse_meminfo`.
const MEM_KEYS: [&[u8]; 5] = [
    b"MemTotal",
    b"MemFree",
    b"MemAvailable",
    b"Buffers",
    b"Cached",
];

/// Values are in kB in the file ("MemTotal:  16384 kB"); convert to bytes (×1024). Missing MemTotal → Missing.
/// Missing MemAvailable → estimate as above; if MemFree is also missing → Missing.
///
/// Only the lines of the keys above are validated (a number then a "kB" unit); all other lines
/// are ignored. If a key appears twice, the first occurrence wins.
pub fn parse_meminfo(input: &[u8]) -> Result<MemInfo, ParseError> {
    let mut slots: [Option<u64>; 5] = [None; 5];
    for (line_no, line) in numbered_lines(input) {
        let mut halves = line.splitn(2, |&b| b == b':');
        let key = halves.next().unwrap_or_default().trim_ascii();
        let Some(rest) = halves.next() else {
            continue;
        };
        let Some(slot) = MEM_KEYS
            .iter()
            .position(|&k| k == key)
            .and_then(|i| slots.get_mut(i))
        else {
            continue;
        };
        if slot.is_some() {
            continue;
        }
        *slot = Some(kib_value(key, rest).map_err(|what| line_error(MEMINFO, line_no, what))?);
    }
    let [total, free, available, buffers, cached] = slots;
    let total_bytes = total.ok_or(ParseError::Missing {
        file: MEMINFO,
        what: "MemTotal",
    })?;
    let (available_bytes, available_estimated) = match available {
        Some(bytes) => (bytes, false),
        None => {
            let free = free.ok_or(ParseError::Missing {
                file: MEMINFO,
                what: "MemFree",
            })?;
            let estimate = free
                .saturating_add(buffers.unwrap_or(0))
                .saturating_add(cached.unwrap_or(0))
                .min(total_bytes);
            (estimate, true)
        }
    };
    Ok(MemInfo {
        total_bytes,
        available_bytes,
        available_estimated,
    })
}

/// The value of one meminfo-style line after its "Key:" (" 16384 kB"), in bytes: one number,
/// the unit kB, nothing after; the error text names the key.
fn kib_value(key: &[u8], rest: &[u8]) -> Result<u64, String> {
    let key = show(key);
    let mut cols = fields(rest);
    let kib = match cols.next() {
        None => return Err(format!("{key}: missing value")),
        Some(value) => {
            parse_u64(value).ok_or_else(|| format!("{key}: invalid number {:?}", show(value)))?
        }
    };
    match cols.next() {
        Some(unit) if unit.eq_ignore_ascii_case(b"kB") => {}
        Some(unit) => return Err(format!("{key}: expected unit kB, found {:?}", show(unit))),
        None => return Err(format!("{key}: missing unit kB")),
    }
    if let Some(extra) = cols.next() {
        return Err(format!("{key}: unexpected trailing {:?}", show(extra)));
    }
    kib.checked_mul(1024)
        .ok_or_else(|| format!("{key}: {kib} kB overflows a byte count"))
}

// ---------------------------------------------------------------------------------------------
// sysfs nodeN/meminfo
// ---------------------------------------------------------------------------------------------

/// Total and free memory of one NUMA node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeMemInfo {
    pub total_bytes: u64,
    pub free_bytes: u64,
}

const NODE_MEMINFO: &str = "node meminfo";

/// `/sys/devices/system/node/nodeN/meminfo`: lines of "Node N Key: value kB". MemTotal and
/// MemFree are read and validated as in /proc/meminfo (a number, then kB); a line of theirs
/// without the "Node N" prefix is a ParseError::Line, every other line is ignored. Either key
/// missing: ParseError::Missing. If a key appears twice, the first occurrence wins.
pub fn parse_node_meminfo(input: &[u8]) -> Result<NodeMemInfo, ParseError> {
    let mut slots: [Option<u64>; 2] = [None; 2];
    for (line_no, line) in numbered_lines(input) {
        let err = |what: String| line_error(NODE_MEMINFO, line_no, what);
        let mut halves = line.splitn(2, |&b| b == b':');
        let head = halves.next().unwrap_or_default();
        let Some(rest) = halves.next() else {
            continue;
        };
        let words: Vec<&[u8]> = fields(head).collect();
        let Some((&key, prefix)) = words.split_last() else {
            continue;
        };
        let Some(slot) = [b"MemTotal".as_slice(), b"MemFree"]
            .iter()
            .position(|&k| k == key)
            .and_then(|i| slots.get_mut(i))
        else {
            continue;
        };
        if !matches!(prefix, [b"Node", n] if parse_u64(n).is_some()) {
            return Err(err(format!("expected \"Node N\" before {:?}", show(key))));
        }
        if slot.is_none() {
            *slot = Some(kib_value(key, rest).map_err(err)?);
        }
    }
    let missing = |what| ParseError::Missing {
        file: NODE_MEMINFO,
        what,
    };
    let [total, free] = slots;
    Ok(NodeMemInfo {
        total_bytes: total.ok_or(missing("MemTotal"))?,
        free_bytes: free.ok_or(missing("MemFree"))?,
    })
}

// ---------------------------------------------------------------------------------------------
// Kernel id lists and /proc/self/auxv
// ---------------------------------------------------------------------------------------------

/// The highest CPU or memory-node id accepted in a kernel id list (the kernel's `NR_CPUS` is at
/// most 8192); a list naming a higher one is taken as not understood.
pub const MAX_SET_ID: u32 = 1 << 16;

/// Calls `f(lo, hi)` for each range of a kernel id list (`0-3,8,10-11`: (0, 3), (8, 8),
/// (10, 11)), after checking it: ascending, disjoint, every id at most [`MAX_SET_ID`]. `None`
/// (and the walk stopped) on anything else; an empty or blank list has no ranges.
fn id_ranges(b: &[u8], mut f: impl FnMut(u32, u32)) -> Option<()> {
    let s = std::str::from_utf8(b).ok()?.trim();
    if s.is_empty() {
        return Some(());
    }
    let mut next_free: u32 = 0; // ids below this are taken
    for part in s.split(',') {
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (parse_id(a)?, parse_id(b)?),
            None => {
                let v = parse_id(part)?;
                (v, v)
            }
        };
        if lo > hi || lo < next_free {
            return None;
        }
        f(lo, hi);
        next_free = hi + 1;
    }
    Some(())
}

fn parse_id(s: &str) -> Option<u32> {
    parse_u64(s.as_bytes())
        .and_then(|v| u32::try_from(v).ok())
        .filter(|&v| v <= MAX_SET_ID)
}

/// How many ids a kernel id list names (`cpuset.effective_cpus`, `cpuset.cpus.effective`,
/// `cpuset.mems.effective`): `0-3,8,10-11` is 7, an empty list 0. `None` for a list that
/// [`parse_id_list`] refuses. Counts without building the set, so the time is bounded by the
/// input length.
pub fn parse_id_list_len(b: &[u8]) -> Option<u32> {
    let mut count: u32 = 0;
    id_ranges(b, |lo, hi| count += hi - lo + 1)?;
    Some(count)
}

/// The ids a kernel id list names (`/sys/devices/system/cpu/online`, `node/online`,
/// `node/has_memory`): `0-3,8` is [0, 1, 2, 3, 8]. `None` for anything but ascending, disjoint
/// ranges of ids at most [`MAX_SET_ID`], so at most `MAX_SET_ID + 1` ids.
pub fn parse_id_list(b: &[u8]) -> Option<Vec<u32>> {
    let mut out = Vec::new();
    id_ranges(b, |lo, hi| out.extend(lo..=hi))?;
    Some(out)
}

/// The `some` and `full` totals (microseconds) of a pressure stall file, without allocating:
/// `/proc/pressure/{cpu,memory,io}` and the cgroup v2 `*.pressure` files share the format
/// (`some avg10=0.10 avg60=0.00 avg300=0.00 total=1234`, then a `full` line; kernels before
/// 5.13 have no `full` line in `/proc/pressure/cpu`).
pub fn parse_pressure_totals(b: &[u8]) -> [Option<u64>; 2] {
    let mut out = [None; 2];
    let Ok(s) = std::str::from_utf8(b) else {
        return out;
    };
    for l in s.lines() {
        let mut it = l.split_ascii_whitespace();
        let i = match it.next() {
            Some("some") => 0,
            Some("full") => 1,
            _ => continue,
        };
        out[i] = it
            .find_map(|f| f.strip_prefix("total="))
            .and_then(|v| v.parse().ok());
    }
    out
}

/// AT_PAGESZ (6) from an auxiliary vector (`/proc/self/auxv`) of native-endian 64-bit (key,
/// value) pairs; `None` when absent or not a power of two.
pub fn parse_auxv_page_size(b: &[u8]) -> Option<u64> {
    const AT_PAGESZ: u64 = 6;
    b.chunks_exact(16).find_map(|c| {
        let k = u64::from_ne_bytes(c[..8].try_into().ok()?);
        let v = u64::from_ne_bytes(c[8..].try_into().ok()?);
        (k == AT_PAGESZ && v.is_power_of_two()).then_some(v)
    })
}

// ---------------------------------------------------------------------------------------------
// /proc/net/dev
// ---------------------------------------------------------------------------------------------

/// Byte counters of one network interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NetCounters {
    pub rx_bytes: u64,
    pub tx_bytes: u64,
}

const NET_DEV: &str = "net/dev";

/// /proc/net/dev: two header lines, then "  eth0: rx_bytes rx_packets ... (8 rx fields) tx_bytes ...".
/// Note the interface name may be glued to the first number ("eth0:1234 ..."), handle it.
/// Returns every interface including lo (filtering is the caller's job, see below).
///
/// Header lines are recognised by their '|' separators; blank lines are skipped. Every other line
/// must be "name:" followed by at least 16 numeric fields (the kernel prints exactly 16). Linux
/// forbids ':' in interface names, so the name ends at the first ':'. An input with no interface
/// lines gives an empty map; a repeated interface name is a ParseError::Line.
pub fn parse_net_dev(input: &[u8]) -> Result<BTreeMap<String, NetCounters>, ParseError> {
    const MIN_FIELDS: usize = 16;
    const TX_BYTES: usize = 8;
    let mut out = BTreeMap::new();
    for (line_no, line) in numbered_lines(input) {
        if line.contains(&b'|') || line.trim_ascii().is_empty() {
            continue;
        }
        let err = |what: String| line_error(NET_DEV, line_no, what);
        let mut halves = line.splitn(2, |&b| b == b':');
        let raw_name = halves.next().unwrap_or_default().trim_ascii();
        let Some(rest) = halves.next() else {
            return Err(err(format!(
                "expected \"interface:\" at start of {:?}",
                show(line.trim_ascii())
            )));
        };
        let name = match std::str::from_utf8(raw_name) {
            Ok(name) if !name.is_empty() && !name.contains(|c: char| c.is_ascii_whitespace()) => {
                name
            }
            _ => return Err(err(format!("invalid interface name {:?}", show(raw_name)))),
        };
        let mut counters = NetCounters::default();
        let mut count = 0usize;
        for (i, field) in fields(rest).enumerate() {
            let value = parse_u64(field).ok_or_else(|| {
                err(format!(
                    "{name}: invalid number {:?} in field {}",
                    show(field),
                    i + 1
                ))
            })?;
            match i {
                0 => counters.rx_bytes = value,
                TX_BYTES => counters.tx_bytes = value,
                _ => {}
            }
            count = i + 1;
        }
        if count < MIN_FIELDS {
            return Err(err(format!(
                "{name}: expected at least {MIN_FIELDS} fields, found {count}"
            )));
        }
        if out.insert(name.to_owned(), counters).is_some() {
            return Err(err(format!("duplicate interface {name}")));
        }
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// /proc/diskstats
// ---------------------------------------------------------------------------------------------

const DISKSTATS: &str = "diskstats";

/// /proc/diskstats: "major minor name f1 f2 ..." with at least 14 columns total; io_ticks (milliseconds spent doing I/O) is the 13th column (index 12, the 10th stat field). Returns name -> io_ticks_ms for devices that `is_whole_disk(name)` accepts.
///
/// Every non-blank line is validated (column count, numeric major/minor and stat fields), also for
/// devices that are then filtered out. Blank or empty input gives an empty map; a repeated
/// whole-disk name is a ParseError::Line.
pub fn parse_diskstats(input: &[u8]) -> Result<BTreeMap<String, u64>, ParseError> {
    const MIN_COLUMNS: usize = 14;
    const IO_TICKS: usize = 9; // index among the stat fields (after major, minor, name)
    let mut out = BTreeMap::new();
    for (line_no, line) in numbered_lines(input) {
        let cols: Vec<&[u8]> = fields(line).collect();
        if cols.is_empty() {
            continue;
        }
        let err = |what: String| line_error(DISKSTATS, line_no, what);
        let [major, minor, raw_name, stats @ ..] = cols.as_slice() else {
            return Err(err(format!(
                "expected at least {MIN_COLUMNS} columns, found {}",
                cols.len()
            )));
        };
        if cols.len() < MIN_COLUMNS {
            return Err(err(format!(
                "{}: expected at least {MIN_COLUMNS} columns, found {}",
                show(raw_name),
                cols.len()
            )));
        }
        for (what, value) in [("major", major), ("minor", minor)] {
            if parse_u64(value).is_none() {
                return Err(err(format!("invalid {what} number {:?}", show(value))));
            }
        }
        let name = std::str::from_utf8(raw_name)
            .map_err(|_| err(format!("invalid device name {:?}", show(raw_name))))?;
        let mut io_ticks = None;
        for (i, field) in stats.iter().enumerate() {
            let value = parse_u64(field).ok_or_else(|| {
                err(format!(
                    "{name}: invalid number {:?} in column {}",
                    show(field),
                    i + 4
                ))
            })?;
            if i == IO_TICKS {
                io_ticks = Some(value);
            }
        }
        let Some(io_ticks) = io_ticks else {
            return Err(err(format!("{name}: io_ticks column missing")));
        };
        if is_whole_disk(name) && out.insert(name.to_owned(), io_ticks).is_some() {
            return Err(err(format!("duplicate device {name}")));
        }
    }
    Ok(out)
}

/// Our own rule: reject ram*, zram*, loop*, fd*, sr* (optical) and partitions: sdXN / hdXN / vdXN / xvdXN (letters then digits), nvmeXnYpZ, mmcblkXpY. Accept sda, vdb, nvme0n1, mmcblk0, dm-0, md0, xvda.
///
/// Anything not matched by a reject rule (dm-N, mdN, nbdN, rbdN, ...) is accepted; an empty name
/// is rejected.
pub fn is_whole_disk(name: &str) -> bool {
    const NOT_DISKS: [&str; 5] = ["ram", "zram", "loop", "fd", "sr"];
    const LETTER_DISKS: [&str; 4] = ["xvd", "sd", "hd", "vd"];
    if name.is_empty() || NOT_DISKS.iter().any(|prefix| name.starts_with(prefix)) {
        return false;
    }
    if let Some(rest) = LETTER_DISKS
        .iter()
        .find_map(|prefix| name.strip_prefix(prefix))
    {
        return !is_letters_then_digits(rest);
    }
    if let Some(rest) = name.strip_prefix("nvme") {
        return nvme_partition(rest).is_none();
    }
    if let Some(rest) = name.strip_prefix("mmcblk") {
        return mmc_partition(rest).is_none();
    }
    true
}

/// Strips a non-empty run of ASCII digits from the front of `s`.
fn strip_digits(s: &str) -> Option<&str> {
    let rest = s.trim_start_matches(|c: char| c.is_ascii_digit());
    (rest.len() < s.len()).then_some(rest)
}

/// "a1", "ab12": one or more lowercase letters, then one or more digits, nothing else.
fn is_letters_then_digits(s: &str) -> bool {
    let digits = s.trim_start_matches(|c: char| c.is_ascii_lowercase());
    digits.len() < s.len() && strip_digits(digits).is_some_and(str::is_empty)
}

/// Matches "XnYpZ" (the part after "nvme") with X, Y, Z decimal numbers.
fn nvme_partition(rest: &str) -> Option<()> {
    let rest = strip_digits(rest)?.strip_prefix('n')?;
    let rest = strip_digits(rest)?.strip_prefix('p')?;
    strip_digits(rest)?.is_empty().then_some(())
}

/// Matches "XpY" (the part after "mmcblk") with X, Y decimal numbers.
fn mmc_partition(rest: &str) -> Option<()> {
    let rest = strip_digits(rest)?.strip_prefix('p')?;
    strip_digits(rest)?.is_empty().then_some(())
}

// ---------------------------------------------------------------------------------------------
// /proc/vmstat
// ---------------------------------------------------------------------------------------------

const VMSTAT: &str = "vmstat";

/// The `/proc/vmstat` keys reported, in the order [`parse_vmstat`] returns them.
pub const VMSTAT_KEYS: [&str; 5] = ["pgfault", "pgmajfault", "pswpin", "pswpout", "oom_kill"];

/// /proc/vmstat: one "key value" pair a line. Returns the [`VMSTAT_KEYS`] present, as (key,
/// counter), in that order; a key the kernel does not have (oom_kill before 4.13) is left out,
/// and an input without any of them gives an empty list.
///
/// Only the lines of those keys are validated (exactly one unsigned decimal after the key); a
/// malformed one is a ParseError::Line. All other lines are ignored. If a key appears twice,
/// the first occurrence wins.
pub fn parse_vmstat(input: &[u8]) -> Result<Vec<(&'static str, u64)>, ParseError> {
    let mut slots: [Option<u64>; VMSTAT_KEYS.len()] = [None; VMSTAT_KEYS.len()];
    for (line_no, line) in numbered_lines(input) {
        let mut cols = fields(line);
        let Some(key) = cols.next() else {
            continue;
        };
        let Some(slot) = VMSTAT_KEYS
            .iter()
            .position(|k| k.as_bytes() == key)
            .and_then(|i| slots.get_mut(i))
        else {
            continue;
        };
        if slot.is_some() {
            continue;
        }
        let err = |what: String| line_error(VMSTAT, line_no, what);
        let key = show(key);
        let value = match cols.next() {
            None => return Err(err(format!("{key}: missing value"))),
            Some(value) => parse_u64(value)
                .ok_or_else(|| err(format!("{key}: invalid number {:?}", show(value))))?,
        };
        if let Some(extra) = cols.next() {
            return Err(err(format!("{key}: unexpected trailing {:?}", show(extra))));
        }
        *slot = Some(value);
    }
    Ok(VMSTAT_KEYS
        .iter()
        .zip(slots)
        .filter_map(|(&key, value)| Some((key, value?)))
        .collect())
}

// ---------------------------------------------------------------------------------------------
// Counter deltas
// ---------------------------------------------------------------------------------------------

/// Per-key counter deltas between two samples, for keys present in both; a key whose value went
/// backwards (reset, or a 32-bit counter wrap) is skipped and reported in `reset`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Deltas {
    /// Sum of the deltas of the usable keys (saturating).
    pub sum: u64,
    /// How many keys contributed to `sum`.
    pub keys: usize,
    /// Keys present in both samples whose value went backwards, sorted.
    pub reset: Vec<String>,
}

/// Per-key deltas; see [`Deltas`]. Keys only in one sample are ignored. If a key occurs more than
/// once in one sample, its last value is used.
///
/// Takes any `(key, value)` pairs: `(&str, u64)` tuples, or a `&BTreeMap<String, u64>` directly
/// (its items are `(&String, &u64)`).
pub fn counter_deltas<K, V>(
    prev: impl IntoIterator<Item = (K, V)>,
    cur: impl IntoIterator<Item = (K, V)>,
) -> Deltas
where
    K: AsRef<str>,
    V: Borrow<u64>,
{
    let mut out = Deltas::default();
    for_each_delta(prev, cur, |key, delta| match delta {
        Some(delta) => {
            out.sum = out.sum.saturating_add(delta);
            out.keys += 1;
        }
        None => out.reset.push(key.to_owned()),
    });
    out
}

/// Same, but the node value is the MAX single-key delta (used for "busiest disk" io_ticks)
///
/// Returns `None` when no key is present in both samples with a non-negative delta; the second
/// element lists (sorted) the keys whose value went backwards. Accepts the same inputs as
/// [`counter_deltas`].
pub fn counter_delta_max<K, V>(
    prev: impl IntoIterator<Item = (K, V)>,
    cur: impl IntoIterator<Item = (K, V)>,
) -> (Option<u64>, Vec<String>)
where
    K: AsRef<str>,
    V: Borrow<u64>,
{
    let mut max: Option<u64> = None;
    let mut reset = Vec::new();
    for_each_delta(prev, cur, |key, delta| match delta {
        Some(delta) => max = Some(max.map_or(delta, |m| m.max(delta))),
        None => reset.push(key.to_owned()),
    });
    (max, reset)
}

/// Calls `f(key, Some(delta))` for every key present in both samples, or `f(key, None)` when the
/// value went backwards; keys in sorted order.
fn for_each_delta<K, V>(
    prev: impl IntoIterator<Item = (K, V)>,
    cur: impl IntoIterator<Item = (K, V)>,
    mut f: impl FnMut(&str, Option<u64>),
) where
    K: AsRef<str>,
    V: Borrow<u64>,
{
    let prev: Vec<(K, V)> = prev.into_iter().collect();
    let cur: Vec<(K, V)> = cur.into_iter().collect();
    let before_by_key = index(&prev);
    for (key, now) in index(&cur) {
        if let Some(&before) = before_by_key.get(key) {
            f(key, now.checked_sub(before));
        }
    }
}

/// Borrowing key → value index of one sample; for a repeated key the last value wins.
fn index<K: AsRef<str>, V: Borrow<u64>>(items: &[(K, V)]) -> BTreeMap<&str, u64> {
    items
        .iter()
        .map(|(key, value)| (key.as_ref(), *value.borrow()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    macro_rules! fixture {
        ($name:literal) => {
            include_bytes!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/fixtures/procfs/",
                $name
            ))
            .as_slice()
        };
    }

    const EPS: f64 = 1e-12;

    fn assert_close(actual: Option<f64>, expected: f64) {
        let actual = actual.unwrap();
        assert!(
            (actual - expected).abs() < EPS,
            "expected {expected}, got {actual}"
        );
    }

    #[allow(clippy::too_many_arguments)]
    fn times(
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

    fn aggregate_only(t: CpuTimes) -> CpuStat {
        CpuStat {
            aggregate: Some(t),
            per_cpu: BTreeMap::new(),
        }
    }

    fn pairs(map: &BTreeMap<String, u64>) -> impl Iterator<Item = (&str, u64)> {
        map.iter().map(|(k, v)| (k.as_str(), *v))
    }

    fn rx(map: &BTreeMap<String, NetCounters>) -> impl Iterator<Item = (&str, u64)> {
        map.iter().map(|(k, c)| (k.as_str(), c.rx_bytes))
    }

    fn tx(map: &BTreeMap<String, NetCounters>) -> impl Iterator<Item = (&str, u64)> {
        map.iter().map(|(k, c)| (k.as_str(), c.tx_bytes))
    }

    fn without_lo<'a>(
        it: impl Iterator<Item = (&'a str, u64)>,
    ) -> impl Iterator<Item = (&'a str, u64)> {
        it.filter(|(name, _)| *name != "lo")
    }

    // ----- CpuTimes -----

    #[test]
    fn cpu_times_sums() {
        let t = times(1, 2, 4, 8, 16, 32, 64, 128);
        assert_eq!(t.busy(), 1 + 2 + 4 + 32 + 64 + 128);
        assert_eq!(t.idle_all(), 8 + 16);
        assert_eq!(t.total(), 255);
        assert_eq!(CpuTimes::default().total(), 0);
    }

    #[test]
    fn cpu_times_saturate_instead_of_overflowing() {
        let t = times(u64::MAX, 1, 0, u64::MAX, 1, 0, 0, 0);
        assert_eq!(t.busy(), u64::MAX);
        assert_eq!(t.idle_all(), u64::MAX);
        assert_eq!(t.total(), u64::MAX);
    }

    // ----- parse_stat -----

    #[test]
    fn stat_parses_aggregate_and_every_cpu() {
        let stat = parse_stat(fixture!("stat_4cpu_a")).unwrap();
        assert_eq!(
            stat.aggregate,
            Some(times(39000, 130, 11000, 322000, 1400, 8, 540, 70))
        );
        assert_eq!(
            stat.per_cpu.keys().copied().collect::<Vec<_>>(),
            [0, 1, 2, 3]
        );
        assert_eq!(
            stat.per_cpu[&2],
            times(12000, 70, 3500, 76000, 500, 8, 200, 25)
        );
        // guest (1200) and guest_nice (30) are not added on top of user/nice.
        assert_eq!(stat.per_cpu[&2].total(), 92303);
        assert_eq!(stat.per_cpu[&2].busy(), 15803);
        assert_eq!(stat.per_cpu[&2].idle_all(), 76500);
    }

    #[test]
    fn stat_old_kernel_missing_columns_are_zero() {
        let stat = parse_stat(fixture!("stat_old_kernel")).unwrap();
        assert_eq!(
            stat.aggregate,
            Some(times(4705, 356, 584, 3699, 0, 0, 0, 0))
        );
        assert_eq!(stat.per_cpu[&0], times(1393, 280, 325, 1849, 0, 0, 0, 0));
        assert_eq!(stat.per_cpu[&1], times(3312, 76, 259, 1850, 42, 7, 11, 0));
        assert_eq!(stat.per_cpu.len(), 2);
    }

    #[test]
    fn stat_garbage_is_a_line_error() {
        let err = parse_stat(fixture!("stat_garbage")).unwrap_err();
        match &err {
            ParseError::Line { file, line, what } => {
                assert_eq!(*file, "stat");
                assert_eq!(*line, 3);
                assert!(what.contains("25x0"), "{what}");
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(err.to_string().starts_with("stat: line 3: "));
    }

    #[test]
    fn stat_too_few_columns_is_a_line_error() {
        assert!(matches!(
            parse_stat(b"cpu  1 2 3\n"),
            Err(ParseError::Line {
                file: "stat",
                line: 1,
                ..
            })
        ));
        assert!(matches!(
            parse_stat(b"cpu  1 2 3 4\ncpu0 1 2 3\n"),
            Err(ParseError::Line {
                file: "stat",
                line: 2,
                ..
            })
        ));
        assert!(matches!(
            parse_stat(b"cpu0\n"),
            Err(ParseError::Line { line: 1, .. })
        ));
    }

    #[test]
    fn stat_rejects_signs_overflow_and_bad_cpu_numbers() {
        for bad in [
            b"cpu  -1 2 3 4\n".as_slice(),
            b"cpu  +1 2 3 4\n",
            b"cpu  18446744073709551616 2 3 4\n",
            b"cpu4294967296 1 2 3 4\n",
            b"cpu  1 2 3 4 5 6 7 8 9 x\n",
        ] {
            assert!(
                matches!(parse_stat(bad), Err(ParseError::Line { line: 1, .. })),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        assert_eq!(
            parse_stat(b"cpu  18446744073709551615 0 0 0\n")
                .unwrap()
                .aggregate
                .unwrap()
                .user,
            u64::MAX
        );
    }

    #[test]
    fn stat_duplicate_cpu_line_is_an_error() {
        assert!(matches!(
            parse_stat(b"cpu0 1 2 3 4\ncpu0 5 6 7 8\n"),
            Err(ParseError::Line { line: 2, .. })
        ));
        assert!(matches!(
            parse_stat(b"cpu 1 2 3 4\ncpu 5 6 7 8\n"),
            Err(ParseError::Line { line: 2, .. })
        ));
    }

    #[test]
    fn stat_without_cpu_lines_is_missing() {
        let missing = Err(ParseError::Missing {
            file: "stat",
            what: "cpu lines",
        });
        assert_eq!(parse_stat(b"intr 1 2 3\nctxt 5\nbtime 7\n"), missing);
        assert_eq!(parse_stat(b""), missing);
        assert_eq!(parse_stat(b"\n\n"), missing);
    }

    #[test]
    fn stat_ignores_other_lines_and_per_cpu_only_is_fine() {
        let stat = parse_stat(b"intr 5 x y\ncpu7 1 2 3 4 5 6 7 8 9 10 11\ncpux 1\n").unwrap();
        assert_eq!(stat.aggregate, None);
        assert_eq!(stat.per_cpu.len(), 1);
        assert_eq!(stat.per_cpu[&7], times(1, 2, 3, 4, 5, 6, 7, 8));
    }

    // ----- cpu_utilization -----

    #[test]
    fn utilization_between_two_samples() {
        let a = parse_stat(fixture!("stat_4cpu_a")).unwrap();
        let b = parse_stat(fixture!("stat_4cpu_b")).unwrap();
        // Each CPU ran 1000 jiffies; busy deltas 430 + 160 + 820 + 30 = 1440 of 4000.
        assert_close(cpu_utilization(&a, &b), 0.36);
    }

    #[test]
    fn utilization_falls_back_to_aggregate() {
        let a = parse_stat(fixture!("stat_4cpu_a")).unwrap();
        let b = parse_stat(fixture!("stat_4cpu_b")).unwrap();
        let mut a_agg = a.clone();
        a_agg.per_cpu.clear();
        // Aggregate a→b: busy 50748 → 52188 (+1440), total +4000.
        assert_close(cpu_utilization(&a_agg, &b), 0.36);
        // per_cpu empty in the later sample only: still the aggregate.
        let mut b_agg = b.clone();
        b_agg.per_cpu.clear();
        assert_close(cpu_utilization(&a, &b_agg), 0.36);

        // Hand-made aggregate-only samples: elapsed 300+100+500+100 = 1000, busy 400.
        let prev = aggregate_only(times(100, 0, 0, 900, 0, 0, 0, 0));
        let cur = aggregate_only(times(400, 0, 100, 1400, 100, 0, 0, 0));
        assert_close(cpu_utilization(&prev, &cur), 0.4);

        // No aggregate to fall back to.
        let per_cpu_only = CpuStat {
            aggregate: None,
            per_cpu: b.per_cpu.clone(),
        };
        assert_eq!(cpu_utilization(&a_agg, &per_cpu_only), None);
    }

    #[test]
    fn utilization_with_cpu_going_offline_uses_remaining_cpus() {
        let a = parse_stat(fixture!("stat_4cpu_a")).unwrap();
        let offline = parse_stat(fixture!("stat_cpu3_offline")).unwrap();
        assert_eq!(offline.per_cpu.len(), 3);
        // cpu0..cpu2 only: busy 430 + 160 + 820 = 1410 of 3000 jiffies.
        assert_close(cpu_utilization(&a, &offline), 0.47);
    }

    #[test]
    fn utilization_with_cpu_coming_online_uses_common_cpus() {
        let mut a = parse_stat(fixture!("stat_4cpu_a")).unwrap();
        a.per_cpu.remove(&3);
        let b = parse_stat(fixture!("stat_4cpu_b")).unwrap();
        // cpu3 is new in b: its whole uptime must not count as one interval.
        assert_close(cpu_utilization(&a, &b), 0.47);
    }

    #[test]
    fn utilization_skips_cpus_that_went_backwards() {
        let a = parse_stat(fixture!("stat_4cpu_a")).unwrap();
        let reset = parse_stat(fixture!("stat_reset")).unwrap();
        // cpu2 restarted from small numbers (total went backwards); cpu1's busy went backwards
        // (user -200) while its total still grew by 1000. Left: cpu0 430 + cpu3 30 of 2000.
        assert_close(cpu_utilization(&a, &reset), 0.23);
    }

    #[test]
    fn utilization_none_without_usable_cpu_or_elapsed_time() {
        let a = parse_stat(fixture!("stat_4cpu_a")).unwrap();
        let b = parse_stat(fixture!("stat_4cpu_b")).unwrap();
        // Same sample twice: zero elapsed jiffies.
        assert_eq!(cpu_utilization(&a, &a), None);
        // Samples swapped: every CPU went backwards.
        assert_eq!(cpu_utilization(&b, &a), None);
        // No CPU in common.
        let mut only3 = b.clone();
        only3.per_cpu.retain(|&id, _| id == 3);
        let mut only0 = a.clone();
        only0.per_cpu.retain(|&id, _| id == 0);
        assert_eq!(cpu_utilization(&only0, &only3), None);
        // Nothing at all.
        assert_eq!(
            cpu_utilization(&CpuStat::default(), &CpuStat::default()),
            None
        );
    }

    #[test]
    fn utilization_is_clamped_when_idle_goes_backwards() {
        // total 1500 → 1800 (+300) but busy 0 → 600 (+600) because iowait dropped by 400.
        let prev = aggregate_only(times(0, 0, 0, 1000, 500, 0, 0, 0));
        let cur = aggregate_only(times(600, 0, 0, 1100, 100, 0, 0, 0));
        assert_close(cpu_utilization(&prev, &cur), 1.0);
        // Fully idle interval.
        let cur = aggregate_only(times(0, 0, 0, 1600, 500, 0, 0, 0));
        assert_close(cpu_utilization(&prev, &cur), 0.0);
    }

    // ----- parse_meminfo -----

    #[test]
    fn meminfo_modern() {
        let mem = parse_meminfo(fixture!("meminfo_modern")).unwrap();
        assert_eq!(
            mem,
            MemInfo {
                total_bytes: 24_684_084 * 1024,
                available_bytes: 23_939_712 * 1024,
                available_estimated: false,
            }
        );
        assert_close(mem.used_ratio(), 1.0 - 23_939_712.0 / 24_684_084.0);
    }

    #[test]
    fn meminfo_without_memavailable_is_estimated() {
        let mem = parse_meminfo(fixture!("meminfo_no_memavailable")).unwrap();
        // MemFree 1234560 + Buffers 204800 + Cached 3072000 = 4511360 kB.
        assert_eq!(
            mem,
            MemInfo {
                total_bytes: 8_058_880 * 1024,
                available_bytes: 4_511_360 * 1024,
                available_estimated: true,
            }
        );
        assert_close(mem.used_ratio(), 1.0 - 4_511_360.0 / 8_058_880.0);
    }

    #[test]
    fn meminfo_missing_total() {
        assert_eq!(
            parse_meminfo(fixture!("meminfo_missing_total")),
            Err(ParseError::Missing {
                file: "meminfo",
                what: "MemTotal",
            })
        );
        assert_eq!(
            parse_meminfo(b""),
            Err(ParseError::Missing {
                file: "meminfo",
                what: "MemTotal",
            })
        );
    }

    #[test]
    fn meminfo_missing_free_and_available() {
        assert_eq!(
            parse_meminfo(b"MemTotal: 1000 kB\nBuffers: 10 kB\nCached: 20 kB\n"),
            Err(ParseError::Missing {
                file: "meminfo",
                what: "MemFree",
            })
        );
    }

    #[test]
    fn meminfo_estimate_is_capped_and_tolerates_missing_buffers() {
        let mem =
            parse_meminfo(b"MemTotal: 1000 kB\nMemFree: 600 kB\nBuffers: 300 kB\nCached: 400 kB\n")
                .unwrap();
        assert_eq!(mem.available_bytes, 1000 * 1024);
        assert!(mem.available_estimated);
        assert_close(mem.used_ratio(), 0.0);

        let mem = parse_meminfo(b"MemTotal: 1000 kB\nMemFree: 250 kB\n").unwrap();
        assert_eq!(mem.available_bytes, 250 * 1024);
        assert_close(mem.used_ratio(), 0.75);
    }

    #[test]
    fn meminfo_bad_lines() {
        assert!(matches!(
            parse_meminfo(b"MemTotal: lots kB\nMemAvailable: 1 kB\n"),
            Err(ParseError::Line {
                file: "meminfo",
                line: 1,
                ..
            })
        ));
        assert!(matches!(
            parse_meminfo(b"MemTotal: 16 kB\nMemAvailable: 8 MB\n"),
            Err(ParseError::Line { line: 2, .. })
        ));
        assert!(matches!(
            parse_meminfo(b"MemTotal: 16\nMemAvailable: 8 kB\n"),
            Err(ParseError::Line { line: 1, .. })
        ));
        assert!(matches!(
            parse_meminfo(b"MemTotal:\n"),
            Err(ParseError::Line { line: 1, .. })
        ));
        assert!(matches!(
            parse_meminfo(b"MemTotal: 18446744073709551615 kB\nMemFree: 1 kB\n"),
            Err(ParseError::Line { line: 1, .. })
        ));
        // Garbage on lines we do not use is ignored; so is a value glued to the colon.
        let mem = parse_meminfo(b"Weird: ??\nMemTotal:16 kB\nnoise\nMemAvailable: 4 kB\n").unwrap();
        assert_eq!(mem.total_bytes, 16 * 1024);
        assert_eq!(mem.available_bytes, 4 * 1024);
    }

    #[test]
    fn meminfo_used_ratio_edges() {
        let zero = MemInfo {
            total_bytes: 0,
            available_bytes: 0,
            available_estimated: false,
        };
        assert_eq!(zero.used_ratio(), None);
        let over = MemInfo {
            total_bytes: 100,
            available_bytes: 200,
            available_estimated: false,
        };
        assert_close(over.used_ratio(), 0.0);
        let full = MemInfo {
            total_bytes: 100,
            available_bytes: 0,
            available_estimated: false,
        };
        assert_close(full.used_ratio(), 1.0);
        assert_eq!(
            (zero.used_bytes(), over.used_bytes(), full.used_bytes()),
            (0, 0, 100)
        );
    }

    #[test]
    fn meminfo_used_bytes_is_total_minus_available() {
        // MemAvailable present: Buffers and Cached play no part.
        let mem = parse_meminfo(fixture!("meminfo_modern")).unwrap();
        assert_eq!(mem.used_bytes(), (24_684_084 - 23_939_712) * 1024);
        // Without MemAvailable: MemTotal - MemFree - Buffers - Cached (1000 - 100 - 50 - 250).
        let mem =
            parse_meminfo(b"MemTotal: 1000 kB\nMemFree: 100 kB\nBuffers: 50 kB\nCached: 250 kB\n")
                .unwrap();
        assert_eq!(mem.used_bytes(), 600 * 1024);
        // ... floored at 0 when free, buffers and cached add up to more than the total.
        let mem =
            parse_meminfo(b"MemTotal: 1000 kB\nMemFree: 600 kB\nBuffers: 300 kB\nCached: 400 kB\n")
                .unwrap();
        assert_eq!(mem.used_bytes(), 0);
        // The ratio is the same figure over the total.
        let mem = parse_meminfo(b"MemTotal: 1000 kB\nMemAvailable: 250 kB\n").unwrap();
        assert_eq!(mem.used_bytes(), 750 * 1024);
        assert_close(mem.used_ratio(), 0.75);
    }

    // ----- parse_vmstat -----

    #[test]
    fn vmstat_reports_the_documented_keys_in_order() {
        assert_eq!(
            parse_vmstat(fixture!("vmstat")),
            Ok(vec![
                ("pgfault", 627_575_890),
                ("pgmajfault", 236_229),
                ("pswpin", 17),
                ("pswpout", 40),
                ("oom_kill", 2),
            ])
        );
        // Keys the kernel lacks are left out; other lines, even malformed ones, are ignored.
        assert_eq!(
            parse_vmstat(b"nr_free_pages 1\npgfault 42\npswpin 0\noom_kill 3\nnoise x y\n"),
            Ok(vec![("pgfault", 42), ("pswpin", 0), ("oom_kill", 3)])
        );
        assert_eq!(parse_vmstat(b""), Ok(vec![]));
        assert_eq!(parse_vmstat(b"nr_free_pages 1\n\n"), Ok(vec![]));
        // The first of a repeated key wins.
        assert_eq!(
            parse_vmstat(b"pgfault 1\npgfault 2\n"),
            Ok(vec![("pgfault", 1)])
        );
    }

    #[test]
    fn vmstat_bad_lines() {
        for (bad, line) in [
            (b"pgfault\n".as_slice(), 1),
            (b"pgfault 1\npswpin -1\n", 2),
            (b"pswpout 1.5\n", 1),
            (b"oom_kill 18446744073709551616\n", 1),
            (b"pgmajfault 1 2\n", 1),
            (b"nr_free_pages x\npgfault 1 kB\n", 2),
        ] {
            assert!(
                matches!(
                    parse_vmstat(bad),
                    Err(ParseError::Line { file: "vmstat", line: l, .. }) if l == line
                ),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        let err = parse_vmstat(b"pgfault lots\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "vmstat: line 1: pgfault: invalid number \"lots\""
        );
    }

    // ----- parse_node_meminfo -----

    #[test]
    fn node_meminfo_total_and_free() {
        let text = b"Node 0 MemTotal:       16384 kB\nNode 0 MemFree:         1024 kB\n\
Node 0 MemUsed:        15360 kB\nNode 0 HugePages_Total:     0\n";
        assert_eq!(
            parse_node_meminfo(text),
            Ok(NodeMemInfo {
                total_bytes: 16384 * 1024,
                free_bytes: 1024 * 1024,
            })
        );
        // The first of a repeated key wins; other keys, even malformed, are ignored.
        assert_eq!(
            parse_node_meminfo(
                b"Node 1 MemTotal: 2 kB\nNode 1 MemTotal: 3 kB\nNode 1 Weird: ??\nNode 1 MemFree: 1 kB\n"
            ),
            Ok(NodeMemInfo {
                total_bytes: 2048,
                free_bytes: 1024,
            })
        );
    }

    #[test]
    fn node_meminfo_bad_and_missing() {
        for (bad, line) in [
            (
                b"Node 0 MemTotal: 16 kB\nNode 0 MemFree: x kB\n".as_slice(),
                2,
            ),
            (b"Node 0 MemTotal: 16\n", 1),
            (b"Node 0 MemTotal: 16 MB\n", 1),
            (b"MemTotal: 16 kB\n", 1),
            (b"Node x MemTotal: 16 kB\n", 1),
            (b"Node 0 MemFree: 18446744073709551615 kB\n", 1),
        ] {
            assert!(
                matches!(
                    parse_node_meminfo(bad),
                    Err(ParseError::Line { file: "node meminfo", line: l, .. }) if l == line
                ),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        assert_eq!(
            parse_node_meminfo(b"Node 0 MemFree: 1 kB\n"),
            Err(ParseError::Missing {
                file: "node meminfo",
                what: "MemTotal",
            })
        );
        assert_eq!(
            parse_node_meminfo(b"Node 0 MemTotal: 1 kB\n"),
            Err(ParseError::Missing {
                file: "node meminfo",
                what: "MemFree",
            })
        );
    }

    // ----- kernel id lists, auxv -----

    #[test]
    fn id_lists_count_and_list_the_same_ids() {
        for (list, want) in [
            (&b"0-3,8,10-11\n"[..], Some(vec![0, 1, 2, 3, 8, 10, 11])),
            (b"0", Some(vec![0])),
            (b"\n", Some(vec![])),
            (b"", Some(vec![])),
            (b"65536", Some(vec![65536])),
            (b"65537", None),
            (b"3-1", None),
            (b"0-3,2", None),
            (b"4,1", None),
            (b"0-", None),
            (b"-1", None),
            (b"0,,1", None),
            (b"+1", None),
            (b"0 - 3", None),
            (b"x", None),
            (b"\xff", None),
        ] {
            let shown = String::from_utf8_lossy(list);
            assert_eq!(parse_id_list(list), want, "{shown}");
            let len = want.map(|ids| u32::try_from(ids.len()).unwrap());
            assert_eq!(parse_id_list_len(list), len, "{shown}");
        }
        assert_eq!(parse_id_list_len(b"0-63"), Some(64));
        assert_eq!(parse_id_list(b"0-65536").map(|ids| ids.len()), Some(65_537));
    }

    #[test]
    fn pressure_totals() {
        assert_eq!(
            parse_pressure_totals(
                b"some avg10=0.10 avg60=0.00 avg300=0.00 total=1234\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=5\n"
            ),
            [Some(1234), Some(5)]
        );
        // /proc/pressure/cpu before 5.13: no `full` line.
        assert_eq!(
            parse_pressure_totals(b"some avg10=0.10 total=9\n"),
            [Some(9), None]
        );
        assert_eq!(parse_pressure_totals(b"some total=x\n"), [None, None]);
        assert_eq!(parse_pressure_totals(b"\xff\xfe"), [None, None]);
        assert_eq!(parse_pressure_totals(b""), [None, None]);
    }

    #[test]
    fn auxv_page_size() {
        let mut auxv = Vec::new();
        for (k, v) in [(33u64, 1u64), (6, 65536), (0, 0)] {
            auxv.extend_from_slice(&k.to_ne_bytes());
            auxv.extend_from_slice(&v.to_ne_bytes());
        }
        assert_eq!(parse_auxv_page_size(&auxv), Some(65536));
        assert_eq!(parse_auxv_page_size(&auxv[..16]), None);
        assert_eq!(parse_auxv_page_size(&[1, 2, 3]), None);
        let mut odd = Vec::new();
        for v in [6u64, 3000] {
            odd.extend_from_slice(&v.to_ne_bytes());
        }
        assert_eq!(parse_auxv_page_size(&odd), None);
    }

    // ----- parse_net_dev -----

    #[test]
    fn net_dev_includes_lo_and_glued_names() {
        let dev = parse_net_dev(fixture!("net_dev_a")).unwrap();
        assert_eq!(
            dev.keys().map(String::as_str).collect::<Vec<_>>(),
            ["eth0", "eth1", "lo", "veth3f2a9c1", "veth9e8d7c6"]
        );
        assert_eq!(
            dev["lo"],
            NetCounters {
                rx_bytes: 1_048_576,
                tx_bytes: 1_048_576,
            }
        );
        assert_eq!(
            dev["eth0"],
            NetCounters {
                rx_bytes: 5_000_000,
                tx_bytes: 2_000_000,
            }
        );
        // "  eth1:123456789  150000 ..." — the name is glued to rx_bytes.
        assert_eq!(
            dev["eth1"],
            NetCounters {
                rx_bytes: 123_456_789,
                tx_bytes: 98_765_432,
            }
        );
        assert_eq!(
            dev["veth3f2a9c1"],
            NetCounters {
                rx_bytes: 7000,
                tx_bytes: 9000,
            }
        );
    }

    #[test]
    fn net_dev_deltas_between_samples() {
        let a = parse_net_dev(fixture!("net_dev_a")).unwrap();
        let b = parse_net_dev(fixture!("net_dev_b")).unwrap();
        // Common non-lo interfaces: eth0, eth1, veth3f2a9c1 (veth9e8d7c6 left, cali... is new).
        assert_eq!(
            counter_deltas(without_lo(rx(&a)), without_lo(rx(&b))),
            Deltas {
                sum: 1_500_000 + 10_000 + 2_000,
                keys: 3,
                reset: vec![],
            }
        );
        assert_eq!(
            counter_deltas(without_lo(tx(&a)), without_lo(tx(&b))),
            Deltas {
                sum: 600_000 + 20_000 + 3_000,
                keys: 3,
                reset: vec![],
            }
        );
        // With lo: +4096.
        assert_eq!(
            counter_deltas(rx(&a), rx(&b)),
            Deltas {
                sum: 1_512_000 + 4096,
                keys: 4,
                reset: vec![],
            }
        );
    }

    #[test]
    fn net_dev_wrapped_counter_is_skipped_and_reported() {
        let a = parse_net_dev(fixture!("net_dev_a")).unwrap();
        let wrap = parse_net_dev(fixture!("net_dev_wrap")).unwrap();
        assert_eq!(wrap["eth0"].rx_bytes, 1200);
        assert_eq!(
            counter_deltas(without_lo(rx(&a)), without_lo(rx(&wrap))),
            Deltas {
                sum: 10_000 + 2_000,
                keys: 2,
                reset: vec!["eth0".to_owned()],
            }
        );
        // tx did not wrap.
        assert_eq!(
            counter_deltas(without_lo(tx(&a)), without_lo(tx(&wrap))),
            Deltas {
                sum: 623_000,
                keys: 3,
                reset: vec![],
            }
        );
    }

    #[test]
    fn net_dev_errors() {
        let header = "Inter-|   Receive |  Transmit\n face |bytes packets|bytes packets\n";
        let sixteen = " 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\n";
        let cases = [
            format!("{header}  eth0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\n"),
            format!("{header}  eth0: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15\n"),
            format!("{header}  eth0: 1 2 3 4 5 6 7 8 x 10 11 12 13 14 15 16\n"),
            format!("{header}  :{sixteen}"),
            format!("{header}  my eth:{sixteen}"),
        ];
        for case in &cases {
            assert!(
                matches!(
                    parse_net_dev(case.as_bytes()),
                    Err(ParseError::Line {
                        file: "net/dev",
                        line: 3,
                        ..
                    })
                ),
                "{case:?}"
            );
        }
        let dup = format!("{header}eth0:{sixteen}eth0:{sixteen}");
        assert!(matches!(
            parse_net_dev(dup.as_bytes()),
            Err(ParseError::Line { line: 4, .. })
        ));
    }

    #[test]
    fn net_dev_header_only_or_empty_is_an_empty_map() {
        assert_eq!(
            parse_net_dev(b"Inter-|   Receive |  Transmit\n face |bytes|bytes\n"),
            Ok(BTreeMap::new())
        );
        assert_eq!(parse_net_dev(b""), Ok(BTreeMap::new()));
        let extra = parse_net_dev(b"lo: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18\n\n").unwrap();
        assert_eq!(
            extra["lo"],
            NetCounters {
                rx_bytes: 1,
                tx_bytes: 9,
            }
        );
    }

    // ----- parse_diskstats -----

    #[test]
    fn diskstats_keeps_whole_disks_across_column_layouts() {
        let a = parse_diskstats(fixture!("diskstats_a")).unwrap();
        // sda: 18 columns, nvme0n1: 20 columns, dm-0: 14 columns. loop0, sr0 and the
        // partitions sda1 / nvme0n1p1 are filtered out.
        assert_eq!(
            a,
            BTreeMap::from([
                ("dm-0".to_owned(), 100_000),
                ("nvme0n1".to_owned(), 300_000),
                ("sda".to_owned(), 120_000),
            ])
        );
        let b = parse_diskstats(fixture!("diskstats_b")).unwrap();
        assert_eq!(b.len(), 4);
        assert_eq!(b["sdb"], 350);
        assert_eq!(b["nvme0n1"], 302_500);
    }

    #[test]
    fn diskstats_busiest_disk_and_sum() {
        let a = parse_diskstats(fixture!("diskstats_a")).unwrap();
        let b = parse_diskstats(fixture!("diskstats_b")).unwrap();
        // sda +800, nvme0n1 +2500, dm-0 +1200; sdb is new. loop0 (+5000) and
        // nvme0n1p1 (+2400) must not count because they were filtered.
        assert_eq!(
            counter_delta_max(pairs(&a), pairs(&b)),
            (Some(2500), vec![])
        );
        assert_eq!(
            counter_deltas(pairs(&a), pairs(&b)),
            Deltas {
                sum: 4500,
                keys: 3,
                reset: vec![],
            }
        );
        // Swapped samples: every common disk went backwards.
        assert_eq!(
            counter_delta_max(&b, &a),
            (
                None,
                vec!["dm-0".to_owned(), "nvme0n1".to_owned(), "sda".to_owned()]
            )
        );
    }

    #[test]
    fn diskstats_short_line_is_an_error() {
        let err = parse_diskstats(fixture!("diskstats_short_line")).unwrap_err();
        match &err {
            ParseError::Line { file, line, what } => {
                assert_eq!(*file, "diskstats");
                assert_eq!(*line, 3);
                assert!(what.contains("sdb") && what.contains("13"), "{what}");
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn diskstats_other_errors() {
        for bad in [
            b"   8 0 sda\n".as_slice(),
            b"   8 0\n",
            b"   8 0 sda 1 2 3 4 5 6 7 8 9 x 11\n",
            b"   8 y sda 1 2 3 4 5 6 7 8 9 10 11\n",
            // Filtered devices are validated too.
            b"   7 0 loop0 1 2 3 4 5 6 7 8 9 10 -11\n",
            b"   8 0 sda 1 2 3 4 5 6 7 8 9 10 11\n   8 0 sda 1 2 3 4 5 6 7 8 9 10 11\n",
        ] {
            assert!(
                matches!(
                    parse_diskstats(bad),
                    Err(ParseError::Line {
                        file: "diskstats",
                        ..
                    })
                ),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        assert_eq!(parse_diskstats(b""), Ok(BTreeMap::new()));
        assert_eq!(parse_diskstats(b"\n  \n"), Ok(BTreeMap::new()));
    }

    #[test]
    fn truncated_fixtures_never_panic() {
        let inputs = [
            fixture!("stat_4cpu_a"),
            fixture!("stat_old_kernel"),
            fixture!("stat_garbage"),
            fixture!("meminfo_modern"),
            fixture!("meminfo_no_memavailable"),
            fixture!("vmstat"),
            fixture!("net_dev_a"),
            fixture!("diskstats_a"),
            fixture!("diskstats_short_line"),
        ];
        for input in inputs {
            for end in 0..=input.len() {
                let cut = &input[..end];
                let _ = parse_stat(cut);
                let _ = parse_meminfo(cut);
                let _ = parse_vmstat(cut);
                let _ = parse_node_meminfo(cut);
                let _ = parse_id_list(cut);
                let _ = parse_net_dev(cut);
                let _ = parse_diskstats(cut);
            }
        }
        let noise: Vec<u8> = (0..=255u8).cycle().take(4096).collect();
        let _ = parse_stat(&noise);
        let _ = parse_meminfo(&noise);
        let _ = parse_vmstat(&noise);
        let _ = parse_node_meminfo(&noise);
        let _ = parse_id_list(&noise);
        let _ = parse_auxv_page_size(&noise);
        let _ = parse_net_dev(&noise);
        let _ = parse_diskstats(&noise);
    }

    // ----- is_whole_disk -----

    #[test]
    fn whole_disk_table() {
        let table = [
            ("sda", true),
            ("sdb", true),
            ("sdaa", true),
            ("vdb", true),
            ("hdc", true),
            ("xvda", true),
            ("nvme0n1", true),
            ("nvme12n3", true),
            ("mmcblk0", true),
            ("dm-0", true),
            ("md0", true),
            ("nbd0", true),
            ("sda1", false),
            ("sdaa12", false),
            ("vdb3", false),
            ("hdc2", false),
            ("xvda1", false),
            ("nvme0n1p1", false),
            ("nvme10n2p15", false),
            ("mmcblk0p1", false),
            ("ram0", false),
            ("zram0", false),
            ("loop0", false),
            ("loop12", false),
            ("fd0", false),
            ("sr0", false),
            ("", false),
        ];
        for (name, whole) in table {
            assert_eq!(is_whole_disk(name), whole, "{name:?}");
        }
    }

    // ----- counter deltas -----

    #[test]
    fn counter_deltas_basic_and_reset() {
        let prev = [("a", 10), ("b", 100), ("c", 5), ("gone", 1)];
        let cur = [("a", 15), ("b", 90), ("c", 5), ("new", 1000)];
        assert_eq!(
            counter_deltas(prev, cur),
            Deltas {
                sum: 5,
                keys: 2,
                reset: vec!["b".to_owned()],
            }
        );
        assert_eq!(
            counter_delta_max(prev, cur),
            (Some(5), vec!["b".to_owned()])
        );
    }

    #[test]
    fn counter_deltas_empty_and_disjoint() {
        let none: [(&str, u64); 0] = [];
        assert_eq!(counter_deltas(none, none), Deltas::default());
        assert_eq!(counter_delta_max(none, none), (None, vec![]));
        assert_eq!(counter_deltas([("x", 1)], [("y", 2)]), Deltas::default());
        // A zero delta is a usable key.
        assert_eq!(counter_delta_max([("x", 7)], [("x", 7)]), (Some(0), vec![]));
    }

    #[test]
    fn counter_deltas_sum_saturates_and_last_duplicate_wins() {
        let prev = [("a", 0), ("b", 0)];
        let cur = [("a", u64::MAX), ("b", u64::MAX)];
        assert_eq!(counter_deltas(prev, cur).sum, u64::MAX);
        assert_eq!(
            counter_delta_max([("a", 1), ("a", 10)], [("a", 4), ("a", 30)]),
            (Some(20), vec![])
        );
    }

    #[test]
    fn counter_deltas_accept_owned_maps() {
        let prev = BTreeMap::from([("sda".to_owned(), 100u64), ("sdb".to_owned(), 50)]);
        let cur = BTreeMap::from([("sda".to_owned(), 160u64), ("sdb".to_owned(), 40)]);
        assert_eq!(
            counter_deltas(pairs(&prev), pairs(&cur)),
            Deltas {
                sum: 60,
                keys: 1,
                reset: vec!["sdb".to_owned()],
            }
        );
        // The maps themselves (items `(&String, &u64)`) work too, and give the same answer.
        assert_eq!(
            counter_deltas(&prev, &cur),
            counter_deltas(pairs(&prev), pairs(&cur))
        );
        assert_eq!(
            counter_delta_max(&prev, &cur),
            (Some(60), vec!["sdb".to_owned()])
        );
        // So do owned `(String, u64)` pairs.
        assert_eq!(counter_delta_max(prev.clone(), cur.clone()).0, Some(60));
    }
}
