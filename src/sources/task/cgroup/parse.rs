//! The formats of the cgroup files, pure: single numbers, `max` limits, flat keyed files and
//! NUMA statistics. Kernel id lists (cpusets) and pressure totals, whose formats the cgroup
//! files share with procfs, are parsed by the shared [`crate::sources::procfs`] parsers.

/// A single unsigned integer (`memory.usage_in_bytes`, `cpuacct.usage`).
pub fn parse_u64(b: &[u8]) -> Option<u64> {
    std::str::from_utf8(b).ok()?.trim().parse().ok()
}

/// A v2 limit (`memory.max`): `Some(None)` for `max`.
pub fn parse_max(b: &[u8]) -> Option<Option<u64>> {
    let s = std::str::from_utf8(b).ok()?.trim();
    if s == "max" {
        return Some(None);
    }
    s.parse().ok().map(Some)
}

/// The value of `key` in a flat keyed file (`cpu.stat`, `memory.stat`, `memory.events`,
/// `memory.oom_control`): lines of `key value`.
pub fn parse_keyed(b: &[u8], key: &str) -> Option<u64> {
    let s = std::str::from_utf8(b).ok()?;
    s.lines().find_map(|l| {
        let mut it = l.split_ascii_whitespace();
        (it.next()? == key).then(|| it.next()?.parse().ok())?
    })
}

/// The values of several keys of a flat keyed file in one pass, in the order of `keys`.
pub fn parse_keys<const N: usize>(b: &[u8], keys: [&str; N]) -> [Option<u64>; N] {
    let mut out = [None; N];
    let Ok(s) = std::str::from_utf8(b) else {
        return out;
    };
    for l in s.lines() {
        let Some((k, v)) = l.split_once(' ') else {
            continue;
        };
        if let Some(i) = keys.iter().position(|x| *x == k) {
            out[i] = v.trim().parse().ok();
        }
    }
    out
}

fn per_node(fields: std::str::SplitAsciiWhitespace<'_>) -> Vec<(u32, u64)> {
    fields
        .filter_map(|f| {
            let (n, v) = f.strip_prefix('N')?.split_once('=')?;
            Some((n.parse().ok()?, v.parse().ok()?))
        })
        .collect()
}

/// v1 `memory.numa_stat`: pages per node of the whole subtree (`hierarchical_total=`; the
/// cgroup's own `total=` only when there is no hierarchical line: WCA let `total=` win).
pub fn parse_numa_stat_v1(b: &[u8]) -> Vec<(u32, u64)> {
    let Ok(s) = std::str::from_utf8(b) else {
        return Vec::new();
    };
    let line = |key: &str| {
        s.lines().find_map(|l| {
            let mut it = l.split_ascii_whitespace();
            let first = it.next()?;
            (first.strip_prefix(key)?.starts_with('=')).then(|| per_node(it))
        })
    };
    line("hierarchical_total")
        .or_else(|| line("total"))
        .unwrap_or_default()
}

/// v2 `memory.numa_stat`: bytes per node of `anon`, `file` and `unevictable` summed (what v1's
/// `total` counts).
pub fn parse_numa_stat_v2(b: &[u8]) -> Vec<(u32, u64)> {
    let Ok(s) = std::str::from_utf8(b) else {
        return Vec::new();
    };
    let mut sums: std::collections::BTreeMap<u32, u64> = Default::default();
    for l in s.lines() {
        let mut it = l.split_ascii_whitespace();
        if !matches!(it.next(), Some("anon" | "file" | "unevictable")) {
            continue;
        }
        for (n, v) in per_node(it) {
            *sums.entry(n).or_default() += v;
        }
    }
    sums.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parsers() {
        assert_eq!(parse_u64(b"123\n"), Some(123));
        assert_eq!(parse_u64(b"x"), None);
        assert_eq!(parse_max(b"max\n"), Some(None));
        assert_eq!(parse_max(b"1024\n"), Some(Some(1024)));
        let stat = b"usage_usec 10\nnr_periods 3\nnr_throttled 1\n";
        assert_eq!(parse_keyed(stat, "nr_periods"), Some(3));
        assert_eq!(parse_keyed(stat, "nr"), None);
        assert_eq!(
            parse_keys(stat, ["nr_throttled", "x", "usage_usec"]),
            [Some(1), None, Some(10)]
        );
        assert_eq!(
            parse_numa_stat_v1(
                b"total=10 N0=6 N1=4\nfile=1 N0=1 N1=0\nhierarchical_total=30 N0=20 N1=10\n"
            ),
            vec![(0, 20), (1, 10)]
        );
        assert_eq!(
            parse_numa_stat_v1(b"total=10 N0=6 N1=4\n"),
            vec![(0, 6), (1, 4)]
        );
        assert_eq!(
            parse_numa_stat_v2(b"anon N0=100 N1=1\nfile N0=10 N1=2\nkernel_stack N0=5 N1=5\nunevictable N0=1 N1=0\n"),
            vec![(0, 111), (1, 3)]
        );
    }
}
